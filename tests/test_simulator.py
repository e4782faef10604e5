"""The one simulator: hand cases, parity with a slow NumPy loop, exact expectation."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from policies import RandomTablePolicy

from advonline.baselines.posted_price import make_baseline
from advonline.baselines.posted_price.threshold import threshold_price
from advonline.problems.posted_price.by_hand import earned
from advonline.problems.posted_price.model import (
    Instance,
    Observation,
    Setting,
    _simulate_jit,
    expected_welfare_exact,
    simulate,
)


def _run(setting, policy, values, demands):
    with jax.enable_x64(True):
        instance = Instance(
            values=jnp.asarray([values]), demands=jnp.asarray(demands)[None, :, None]
        )
        return simulate(setting, policy, instance, jax.random.split(jax.random.key(0), 1))


def test_greedy_hand_case_divisible():
    # greedy posts L = 1: buyer 1 (0.6 at density 2) buys; buyer 2 (0.6 at density 3) gets the
    # 0.4 left, 2/3 of its bundle; buyer 3 finds nothing. Welfare 1.2 + (2/3) 1.8 = 2.4,
    # revenue 0.6 + 0.4 = 1.0.
    setting = Setting(rounds=3, max_demand=0.6, demand_levels=3)
    played = _run(setting, make_baseline("greedy", setting), [1.2, 1.8, 5.0], [0.6, 0.6, 0.2])
    assert float(played.welfare[0]) == pytest.approx(2.4)
    assert float(played.revenue[0]) == pytest.approx(1.0)
    np.testing.assert_allclose(played.fractions[0], [1.0, 0.4 / 0.6, 0.0])


def test_fixed_price_refuses_low_buyers_and_indivisible_must_fit():
    setting = Setting(rounds=3, max_demand=0.6, demand_levels=3, divisible=False)
    fixed = make_baseline("fixed", setting)  # price sqrt(10) ~ 3.16
    played = _run(setting, fixed, [1.8, 2.4, 2.4], [0.6, 0.6, 0.4])  # densities 3, 4, 6
    # buyer 1 refuses (3 < 3.16); buyer 2 buys 0.6; buyer 3 (0.4) still fits exactly.
    np.testing.assert_allclose(played.fractions[0], [0.0, 1.0, 1.0])
    assert float(played.revenue[0]) == pytest.approx(math.sqrt(10) * 1.0)


def _numpy_threshold_rollout(setting, values, demands):
    """Slow reference: the posted-price rules written as a plain loop."""
    used = welfare = revenue = 0.0
    alpha = 1 + math.log(setting.high / setting.low)
    for value, demand in zip(values, demands, strict=True):
        y = used
        price = setting.low if y < 1 / alpha else setting.low * math.exp(alpha * y - 1)
        if demand <= 0 or value < price * demand:
            continue
        share = (
            min(1.0, (1.0 - used) / demand)
            if setting.divisible
            else float(used + demand <= 1 + 1e-8)
        )
        used += share * demand
        welfare += share * value
        revenue += share * price * demand
    return welfare, revenue


@pytest.mark.parametrize("divisible", [True, False])
def test_threshold_rollout_matches_numpy_reference(divisible):
    setting = Setting(rounds=60, max_demand=0.1, demand_levels=5, divisible=divisible)
    rng = np.random.default_rng(4)
    units = rng.integers(0, 6, size=(50, 60))
    demands = units * setting.demand_unit
    values = np.exp(rng.uniform(0, math.log(10), (50, 60))) * demands
    with jax.enable_x64(True):
        instances = Instance(values=jnp.asarray(values), demands=jnp.asarray(demands)[..., None])
        policy = make_baseline("threshold", setting)
        played = simulate(setting, policy, instances, jax.random.split(jax.random.key(1), 50))
    reference = np.array(
        [_numpy_threshold_rollout(setting, v, d) for v, d in zip(values, demands, strict=True)]
    )
    np.testing.assert_allclose(played.welfare, reference[:, 0], rtol=1e-12)
    np.testing.assert_allclose(played.revenue, reference[:, 1], rtol=1e-12)


def test_threshold_price_hand_values():
    alpha = 1 + math.log(10)
    y = jnp.array([0.0, 0.2, 1 / alpha, 1.0])
    np.testing.assert_allclose(threshold_price(y, 1.0, 10.0), [1.0, 1.0, 1.0, 10.0], rtol=1e-6)


def _random_table_policy(setting, seed):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(4), size=(setting.rounds, setting.grid_size + 1))
    return RandomTablePolicy(levels=jnp.asarray([1.0, 2.5, 4.0, 8.0]), probs=jnp.asarray(probs))


@pytest.mark.parametrize("divisible", [True, False])
def test_exact_expected_welfare_matches_monte_carlo(divisible):
    setting = Setting(rounds=6, max_demand=0.5, demand_levels=2, divisible=divisible)
    with jax.enable_x64(True):
        policy = _random_table_policy(setting, 5)
        instance = Instance(
            values=jnp.asarray([0.5, 1.5, 2.0, 3.0, 2.5, 1.0]),
            demands=jnp.asarray([0.25, 0.5, 0.25, 0.5, 0.5, 0.25])[:, None],
        )
        exact = float(expected_welfare_exact(setting, policy, instance))
        samples = 40_000
        batch = jax.tree.map(lambda leaf: jnp.repeat(leaf[None], samples, 0), instance)
        played = simulate(setting, policy, batch, jax.random.split(jax.random.key(2), samples))
    welfare = np.asarray(played.welfare)
    mean, error = welfare.mean(), welfare.std() / math.sqrt(samples)
    assert abs(exact - mean) < 4 * error


def test_exact_expected_welfare_equals_rollout_for_deterministic_policy():
    setting = Setting(rounds=40, max_demand=0.1, demand_levels=2)
    rng = np.random.default_rng(6)
    demands = rng.integers(0, 3, 40) * setting.demand_unit
    values = rng.uniform(1, 10, 40) * demands
    with jax.enable_x64(True):
        instance = Instance(values=jnp.asarray(values), demands=jnp.asarray(demands)[:, None])
        policy = make_baseline("threshold", setting)
        exact = float(expected_welfare_exact(setting, policy, instance))
        played = simulate(
            setting,
            policy,
            jax.tree.map(lambda x: x[None], instance),
            jax.random.split(jax.random.key(0), 1),
        )
    assert exact == pytest.approx(float(played.welfare[0]), rel=1e-12)


def test_simulate_traces_once_for_same_shapes():
    setting = Setting(rounds=17, max_demand=0.1, demand_levels=1)
    policy = make_baseline("threshold", setting)
    before = _simulate_jit._cache_size()
    for seed in range(3):
        rng = np.random.default_rng(seed)
        instances = Instance(
            values=jnp.asarray(rng.uniform(0.1, 1, (8, 17)), jnp.float32),
            demands=jnp.full((8, 17, 1), 0.1, jnp.float32),
        )
        simulate(setting, policy, instances, jax.random.split(jax.random.key(seed), 8), jnp.float32)
    assert _simulate_jit._cache_size() == before + 1


def _numpy_bundle_rollout(setting, policy, values, demands):
    """Slow reference for several resources, indivisible: a buyer buys its whole bundle iff
    its value covers the posted bundle price and the bundle fits; what each resource sold."""
    capacities = np.asarray(setting.capacities)
    used, welfare = np.zeros(setting.resources), 0.0
    for t, (value, demand) in enumerate(zip(values, demands, strict=True)):
        observation = Observation(jnp.asarray(used / capacities), jnp.asarray(t / setting.rounds))
        prices = np.asarray(policy(observation).prices)[:, 0]
        if demand.sum() == 0 or value < prices @ demand:
            continue
        if np.all(used + demand <= capacities + 1e-9):
            used, welfare = used + demand, welfare + value
    return welfare, used


def _best_subset(setting, values, demands) -> float:
    """OPT by enumeration: the most valuable set of whole bundles that fits."""
    capacities, best = np.asarray(setting.capacities), 0.0
    for chosen in itertools.product([0, 1], repeat=len(values)):
        pick = np.asarray(chosen, bool)
        if np.all(demands[pick].sum(0) <= capacities + 1e-9):
            best = max(best, float(values[pick].sum()))
    return best


@pytest.mark.parametrize("name", ["greedy", "threshold"])
def test_several_resources_indivisible_match_numpy_and_never_oversell(name):
    setting = Setting(
        resources=2,
        rounds=10,
        max_demand=0.5,
        demand_levels=2,
        capacities=(1.0, 1.0),
        divisible=False,
    )
    rng = np.random.default_rng(8)
    count = 12
    demands = rng.integers(0, 3, size=(count, setting.rounds, 2)) * setting.demand_unit
    values = np.exp(rng.uniform(0, math.log(10), (count, setting.rounds))) * demands.sum(-1)
    policy = make_baseline(name, setting)
    with jax.enable_x64(True):
        instances = Instance(values=jnp.asarray(values), demands=jnp.asarray(demands))
        keys = jax.random.split(jax.random.key(2), count)
        played = simulate(setting, policy, instances, keys)
    for i in range(count):
        welfare, used = _numpy_bundle_rollout(setting, policy, values[i], demands[i])
        assert float(played.welfare[i]) == pytest.approx(welfare, rel=1e-12, abs=1e-12)
        sold = (np.asarray(played.fractions[i])[:, None] * demands[i]).sum(0)
        np.testing.assert_allclose(sold, used, atol=1e-12)
        assert np.all(sold <= np.asarray(setting.capacities) + 1e-9)  # nothing oversold
        assert welfare <= _best_subset(setting, values[i], demands[i]) + 1e-9


@pytest.mark.parametrize("low", [1.0, 0.463, 3.69, 4e3])
def test_a_bundle_at_density_l_buys_at_every_scale_in_the_loop_by_hand_too(low):
    """``p . d`` and ``L sum(d)`` round differently away from L = 1: the simulator and the
    checks' loop by hand both count the buyer within rounding of the price as a tie."""
    setting = Setting(
        resources=2, low=low, high=100 * low, rounds=1, max_demand=0.25, capacities=(3e-3, 1.3e2)
    )
    demands = np.tile(0.25 * np.asarray(setting.capacities), (setting.rounds, 1))
    values = low * demands.sum(-1)
    policy = make_baseline("threshold", setting)
    with jax.enable_x64(True):
        instance = Instance(values=jnp.asarray(values), demands=jnp.asarray(demands))
        batch = jax.tree.map(lambda leaf: leaf[None], instance)
        played = simulate(setting, policy, batch, jax.random.split(jax.random.key(0), 1))
        simulated = float(played.welfare[0])
        by_hand = earned(setting, policy, instance)
    # at zero utilisation threshold posts L on each resource: the one buyer buys
    assert simulated == pytest.approx(values.sum(), rel=1e-12)
    assert by_hand == pytest.approx(simulated, rel=1e-12)
