"""Best-response oracles: local search finds the exact worst case of `threshold` on a small
setting; mutations stay in the type vocabulary; typed ratios agree with the simulator."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.adversary import AdversaryModel
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
    model = AdversaryModel.build(SMALL, AdversaryConfig(density_levels=64))
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
