"""Several resources (K >= 2) and the rollout-based game: the exponential baseline's formula,
continuations of the one simulator, the two-demand hard families, the per-round update by
rollouts (unbiased for the exact gradient). A K = 2 run end to end: tests/test_k2_run.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import configs
from advonline.baselines.posted_price import make_baseline
from advonline.baselines.posted_price.exponential import exponential_price
from advonline.problems.posted_price.families import family_demand_pairs, make_family, write_out
from advonline.problems.posted_price.model import (
    Instance,
    PriceDistribution,
    Setting,
    rollout,
    sample_prices,
    simulate,
)
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.sampled_game import rollout_gradient
from advonline.problems.posted_price.training import per_round_gradient

TWO = Setting(resources=2, capacities=(1.0, 1.0), rounds=12, max_demand=0.5, demand_levels=2)


def _instances(setting: Setting, count: int, seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    units = rng.integers(0, setting.demand_levels + 1, (count, setting.rounds, setting.resources))
    demands = units * setting.demand_unit
    density = rng.uniform(setting.low, setting.high, (count, setting.rounds))
    return Instance(
        values=jnp.asarray(density * demands.sum(-1), jnp.float32),
        demands=jnp.asarray(demands, jnp.float32),
    )


def test_exponential_prices_start_at_l_over_2k_and_reach_u_when_full():
    low, high = 1.0, 10.0
    for resources in (1, 2, 3):
        prices = np.asarray(exponential_price(jnp.array([0.0, 0.5, 1.0]), low, high, resources))
        start = low / (2 * resources)
        np.testing.assert_allclose(prices, [start, math.sqrt(start * high), high], rtol=1e-6)
    setting = Setting(resources=3, capacities=(1.0, 1.0, 1.0))
    policy = make_baseline("exponential", setting)
    instances = _instances(Setting(**{**setting.__dict__, "rounds": 200}), 4, seed=0)
    runs = simulate(setting, policy, instances, jax.random.split(jax.random.key(0), 4))
    assert np.all(np.asarray(runs.final_used) <= 1 + 1e-5)
    # prices are per resource: the resource sold most is the dearest
    last = np.asarray(runs.unit_prices[:, -1])
    order = np.argsort(np.asarray(runs.final_used), axis=-1)
    assert np.all(np.take_along_axis(last, order, -1)[:, -1] == last.max(-1))


def test_a_continuation_is_the_tail_of_the_run_it_continues():
    policy = make_baseline("threshold", TWO)
    instance = jax.tree.map(lambda leaf: leaf[0], _instances(TWO, 1, seed=1))
    key = jax.random.key(0)
    full = rollout(TWO, policy, instance, key)
    sold = full.fractions[:, None] * instance.demands
    used_before = np.cumsum(sold, axis=0) - sold
    for start in (0, 5, 11):
        tail = rollout(TWO, policy, instance, key, None, start, jnp.asarray(used_before[start]))
        expected = float(np.sum(full.fractions[start:] * instance.values[start:]))
        assert float(tail.welfare) == pytest.approx(expected, rel=1e-6)
        assert np.all(np.asarray(tail.fractions[:start]) == 0)


def test_families_switch_to_the_final_demand_at_the_stop():
    rising, final = family_demand_pairs(TWO, jnp.float32)
    assert rising.shape == final.shape == (36, 2)  # 2 balanced + 4 single-resource, squared
    one_then_both = (rising[:, 1] == 0) & (final[:, 0] > 0) & (final[:, 1] > 0)
    assert bool(one_then_both.any())
    index = int(jnp.argmax(one_then_both))
    stop = jnp.full(1, 6.0)
    policy = make_baseline("threshold", TWO)
    for name in ("staircase", "ramp"):
        family = make_family(name, TWO, stop, rising[index][None], final[index][None])
        runs = simulate(TWO, policy, family, jax.random.split(jax.random.key(0), 1))
        demands = np.asarray(runs.instance.demands[0])
        assert np.all(demands[-1] == np.asarray(final[index]))  # buyers at v want the bundle
        assert np.all(demands[0] == np.asarray(rising[index]))  # the ramp uses resource 1
    written = write_out(
        TWO, make_family("staircase", TWO, stop, rising[index][None], final[index][None]), 1
    )
    assert float(offline_optimum(TWO, written)[0]) > 0


def _random_distribution(rng, resources: int, atoms: int) -> PriceDistribution:
    probs = rng.dirichlet(np.full(atoms, 0.7), size=resources)
    prices = np.broadcast_to(np.geomspace(1.0, 10.0, atoms), (resources, atoms))
    return PriceDistribution(prices=jnp.asarray(prices), probs=jnp.asarray(probs))


def test_coupled_prices_keep_each_marginal_and_share_one_quantile():
    """The K prices share one quantile: each resource's price still follows its own row
    (Monte Carlo, 4 sigma), and the drawn atoms' quantile ranges always overlap."""
    rng = np.random.default_rng(5)
    draws_count = 40_000
    for resources in (2, 3):
        distribution = _random_distribution(rng, resources, 6)
        keys = jax.random.split(jax.random.key(resources), draws_count)
        draws = np.asarray(jax.vmap(sample_prices, in_axes=(None, 0))(distribution, keys))
        prices = np.asarray(distribution.prices[0])
        probs = np.asarray(distribution.probs)
        for k in range(resources):
            frequency = (draws[:, k, None] == prices[None]).mean(0)
            assert np.all(np.abs(frequency - probs[k]) < 4 * np.sqrt(probs[k] / draws_count))
        # one shared quantile: the quantile ranges of the K drawn atoms always overlap
        ranks = np.searchsorted(prices, draws)  # [N, K] atom index per resource
        upper = np.cumsum(probs, -1)[np.arange(resources), ranks]  # [N, K]
        lower = upper - probs[np.arange(resources), ranks]
        assert np.all(lower.max(-1) < upper.min(-1))


def test_a_shared_pricing_network_prices_resources_alike():
    network = AlgorithmNetwork(resources=3, atoms=5, hidden=8, shared_resources=True)
    params = network.init(jax.random.key(0), jnp.zeros(3), jnp.zeros(()))
    params = jax.tree.map(
        lambda leaf: leaf + 0.3 * jax.random.normal(jax.random.key(1), leaf.shape), params
    )
    utilisation = jnp.asarray([0.1, 0.6, 0.3])
    logits = network.apply(params, utilisation, jnp.asarray(0.25))
    order = jnp.asarray([2, 0, 1])
    permuted = network.apply(params, utilisation[order], jnp.asarray(0.25))
    np.testing.assert_allclose(np.asarray(permuted), np.asarray(logits[order]), atol=1e-6)
    assert not np.allclose(np.asarray(logits[0]), np.asarray(logits[1]))  # states differ
    batch = network.apply(params, jnp.stack([utilisation, utilisation[order]]), jnp.zeros(2))
    assert batch.shape == (2, 3, 5)
    uneven = {"setting": {"resources": 2, "capacities": [1.0, 2.0]}}
    uneven["algorithm"] = {"shared_resources": True}
    with pytest.raises(configs.ConfigError, match="shared_resources needs every capacity equal"):
        configs.from_tables(uneven)


def test_rollout_gradient_is_unbiased_for_the_exact_gradient():
    """On a tiny K = 1 game the exact per-round gradient is known; the rollout estimator,
    averaged over keys, agrees with it."""
    data = {
        "setting": {"low": 1.0, "high": 4.0, "rounds": 6, "max_demand": 0.25},
        "algorithm": {"price_atoms": 5, "hidden": 8, "layers": 1, "rollout_rounds": 6},
        "adversary": {"density_levels": 5, "hidden": 8, "batch": 8},
        "game": {"loop": "simultaneous"},
    }
    game = configs.from_tables(data).build_game()
    setting = game.setting
    params = game.head.module.init(jax.random.key(2), jnp.zeros(1), jnp.zeros(()))
    params = jax.tree.map(  # away from the uniform start
        lambda leaf: leaf + 0.5 * jax.random.normal(jax.random.key(3), leaf.shape), params
    )
    instances = _instances(setting, 4, seed=2)
    optimum = offline_optimum(setting, instances)
    weights = jnp.full(4, 0.25)
    exact = per_round_gradient(game, params, instances, optimum, weights)
    keys = jax.random.split(jax.random.key(4), 400)
    estimates = jax.jit(  # one estimate per key, in one programme
        jax.vmap(lambda key: rollout_gradient(game, params, instances, optimum, weights, key))
    )(keys)
    flat_exact = np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(exact)])
    flat_mean = np.concatenate([np.ravel(leaf.mean(axis=0)) for leaf in jax.tree.leaves(estimates)])
    cosine = flat_exact @ flat_mean / (np.linalg.norm(flat_exact) * np.linalg.norm(flat_mean))
    assert cosine > 0.97
    assert np.linalg.norm(flat_mean - flat_exact) < 0.25 * np.linalg.norm(flat_exact)
