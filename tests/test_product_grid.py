"""The exact expected welfare on the product utilisation grid (any K): the simulator's mean
for a randomised network, one run for a deterministic baseline, and the K = 1 induction."""

import jax
import jax.numpy as jnp
import numpy as np

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.learned import LearnedPolicy, price_atoms
from advonline.problems.posted_price.model import (
    Instance,
    Setting,
    expected_welfare_exact,
    simulate,
)
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.product_grid import (
    expected_welfare_grid,
    grid_units,
    state_count,
    state_index,
)

TWO = Setting(resources=2, capacities=(1.0, 1.0), rounds=10, max_demand=0.5, demand_levels=2)


def _instance(setting: Setting, seed: int) -> Instance:
    """Balanced bundles and single-resource buyers on the grid, some rounds empty."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, setting.resources + 2, setting.rounds)  # last kind: nobody
    level = rng.integers(1, setting.demand_levels + 1, setting.rounds) * setting.demand_unit
    demands = np.stack(
        [np.where((kind == 0) | (kind == k + 1), level, 0.0) for k in range(setting.resources)], -1
    )
    density = np.exp(rng.uniform(np.log(setting.low), np.log(setting.high), setting.rounds))
    return Instance(
        values=jnp.asarray(density * demands.sum(-1), jnp.float32),
        demands=jnp.asarray(demands, jnp.float32),
    )


def _network_policy(setting: Setting, seed: int) -> LearnedPolicy:
    network = AlgorithmNetwork(resources=setting.resources, atoms=6, hidden=16, layers=1)
    params = network.init(jax.random.key(seed), jnp.zeros(setting.resources), jnp.zeros(()))
    scaled = jax.tree.map(lambda leaf: 3 * leaf, params)  # sharper, state-dependent prices
    return LearnedPolicy(scaled, network, price_atoms(setting, 6))


def test_states_index_the_grid_row_major():
    units = grid_units(TWO)
    assert units.shape == (state_count(TWO), 2) == (25, 2)
    np.testing.assert_array_equal(np.asarray(state_index(TWO, jnp.asarray(units))), np.arange(25))


def test_grid_welfare_equals_the_simulators_mean_for_a_randomised_policy():
    policy = _network_policy(TWO, seed=1)
    runs = 40_000
    for seed in range(3):
        instance = _instance(TWO, seed)
        exact = float(expected_welfare_grid(TWO, policy, instance.values, instance.demands))
        batch = jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (runs, *leaf.shape)), instance)
        welfare = np.asarray(
            simulate(TWO, policy, batch, jax.random.split(jax.random.key(seed), runs)).welfare
        )
        error = welfare.std() / np.sqrt(runs)
        assert abs(exact - welfare.mean()) <= 4 * error + 1e-5, (exact, welfare.mean(), error)


def test_grid_welfare_equals_one_run_for_a_deterministic_baseline():
    policy = make_baseline("exponential", TWO)
    earned = []
    for seed in range(3):
        instance = _instance(TWO, seed)
        exact = float(expected_welfare_grid(TWO, policy, instance.values, instance.demands))
        run = simulate(
            TWO,
            policy,
            jax.tree.map(lambda leaf: leaf[None], instance),
            jax.random.split(jax.random.key(0), 1),
        )
        assert abs(exact - float(run.welfare[0])) <= 1e-5 * max(1.0, abs(exact))
        earned.append(exact)
    assert max(earned) > 0  # the baseline sells: the comparison is not 0 = 0


def test_grid_welfare_is_the_one_resource_induction_for_k1():
    one = Setting(rounds=12, max_demand=0.25, demand_levels=2)
    policy = _network_policy(one, seed=2)
    for seed in range(3):
        instance = _instance(one, seed)
        grid = float(expected_welfare_grid(one, policy, instance.values, instance.demands))
        assert abs(grid - float(expected_welfare_exact(one, policy, instance))) < 1e-5
