"""Best-response oracles: local search finds the exact worst case of `threshold` on a small
setting; mutations stay in the type vocabulary; typed ratios agree with the simulator."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.adversary import build_adversary
from advonline.problems.posted_price.certify import certify_dp
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import Setting, mean_welfare, price_table
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.oracles import (
    local_search_oracle,
    mutate,
    random_types,
    typed_ratios,
)

SMALL = Setting(low=1.0, high=10.0, rounds=12, max_demand=0.2)


@pytest.fixture(scope="module")
def threshold_target():
    model = build_adversary(SMALL, AdversaryConfig(density_levels=64))
    policy = make_baseline("threshold", SMALL)
    sale = model.type_sale_table(price_table(SMALL, policy, jnp.float32), jnp.float32)
    return model.buyer_types, policy, sale


def test_local_search_raises_a_weak_instance_to_the_exact_worst_case(threshold_target):
    vocabulary, policy, sale = threshold_target
    with jax.enable_x64(True):
        exact = certify_dp(SMALL, policy).ratio
    weak = jnp.full((8, SMALL.rounds), vocabulary.nobody - 1, jnp.int32)  # every buyer at U
    start = float(typed_ratios(SMALL, vocabulary, sale, weak[:1], jnp.float32)[0])
    found = local_search_oracle(
        SMALL, vocabulary, sale, weak, 16, 100, jnp.float32, jax.random.key(1)
    )
    best = float(found.ratios.max())
    assert start == pytest.approx(1.0)  # threshold sells everything at U: the ratio is 1
    assert best > 1.5 * start
    assert best >= 0.98 * exact  # within 2% of the DP's exact worst case
    assert best <= exact * (1 + 1e-5)  # a real instance cannot beat the exact CR


def test_typed_ratios_agree_with_the_simulator(threshold_target):
    vocabulary, policy, sale = threshold_target
    types = random_types(vocabulary, jax.random.key(2), 6, SMALL.rounds)
    instances = vocabulary.instances(types, jnp.float32)
    welfare = mean_welfare(SMALL, policy, instances, jax.random.key(3), 1, jnp.float32)
    expected = offline_optimum(SMALL, instances) / welfare
    np.testing.assert_allclose(
        typed_ratios(SMALL, vocabulary, sale, types, jnp.float32), expected, rtol=1e-5
    )


def test_every_mutation_keeps_a_valid_type_sequence(threshold_target):
    vocabulary, _, _ = threshold_target
    types = random_types(vocabulary, jax.random.key(4), 1, SMALL.rounds)[0]
    mutated = jax.vmap(lambda key: mutate(vocabulary, key, types))(
        jax.random.split(jax.random.key(5), 512)
    )
    assert mutated.shape == (512, SMALL.rounds)
    assert int(mutated.min()) >= 0 and int(mutated.max()) <= vocabulary.nobody
    changed = np.any(np.asarray(mutated) != np.asarray(types)[None], axis=1)
    assert changed.mean() > 0.5  # most proposals move somewhere


def test_the_search_kernel_moves_each_chain_to_its_best_candidate():
    """Candidates are laid out chain-major (rows b M .. b M + M - 1 belong to chain b): with a
    mutation that adds its candidate index to every token, each step moves each chain by
    M - 1; a chain whose every candidate is worse stays (a score that caps the tokens)."""
    from advonline.search import hill_climb

    chains, candidates, steps = 3, 4, 5

    def offset_by_candidate(key, tokens):
        assert tokens.shape[0] == chains * candidates
        return tokens + (jnp.arange(tokens.shape[0]) % candidates)[:, None]

    starts = jnp.arange(chains * 2, dtype=jnp.int32).reshape(chains, 2)
    tokens, scores = hill_climb(
        lambda t: t.sum(1).astype(jnp.float32),
        offset_by_candidate,
        jax.random.key(0),
        starts,
        steps,
        candidates,
    )
    np.testing.assert_array_equal(tokens, starts + steps * (candidates - 1))
    np.testing.assert_array_equal(scores, tokens.sum(1))
    capped, capped_scores = hill_climb(
        lambda t: -jnp.abs(t.sum(1) - 7).astype(jnp.float32),  # best at a sum of 7
        lambda key, t: offset_by_candidate(key, t) + 1,  # every candidate moves
        jax.random.key(0),
        starts,
        steps,
        candidates,
    )
    # chains 0 and 1 (sums 1 and 5) reach 7 in one step, then stay, every candidate being
    # worse; chain 2 (sum 9) never moves: each of its candidates is further from 7
    assert [int(total) for total in capped.sum(1)] == [7, 7, 9]
    np.testing.assert_array_equal(capped[2], starts[2])
    np.testing.assert_array_equal(capped_scores, [0.0, 0.0, -2.0])


def test_float64_everywhere_inside_a_float64_scope_leaves_the_global_flag_off():
    from advonline.search import float64_everywhere

    with jax.enable_x64(True), float64_everywhere():
        assert jax.config.jax_enable_x64
    assert not jax.config.jax_enable_x64
    assert jnp.arange(2).dtype == jnp.int32
