"""The stopping-family lower bound: a hand-solved game, exact prefix optima, and a bound that
no algorithm's exact ratio undercuts (were it wrong, an achievable ratio would lie below it)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linprog

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.certify import certify_dp
from advonline.problems.posted_price.knapsack import fractional_knapsack
from advonline.problems.posted_price.lower_bound import (
    best_response_payoff,
    prefix_optima,
    search_lower_bound,
    stopping_lower_bound,
)
from advonline.problems.posted_price.model import Setting, SettingError
from advonline.problems.posted_price.optimum import greedy_fill_optimum, knapsack_optimum
from advonline.problems.posted_price.problem import certified_lower_bound


@pytest.mark.parametrize("capacity", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("divisible", [True, False])
def test_two_buyers_match_the_hand_solution(divisible, capacity):
    """A whole capacity at L, then (maybe) a whole capacity at U. Taking a share x of the
    first earns x L against OPT L if the sequence stops, x L + (1 - x) U against U if not;
    the best x equalises the two: x = 1 / (2 - L/U), ratio 2 - L/U (1.75 for U/L = 4), and
    the adversary's stopping distribution weighs both prefixes. Demands are fractions of the
    capacity, so the game is the same whatever the capacity."""
    setting = Setting(
        low=1.0, high=4.0, rounds=2, max_demand=1.0, divisible=divisible, capacities=(capacity,)
    )
    bound = stopping_lower_bound(setting, np.array([1, 1]), np.array([1.0, 4.0]))
    assert bound.ratio == pytest.approx(1.75, rel=1e-9)
    assert bound.lp_ratio == pytest.approx(1.75, rel=1e-9)
    assert np.all(bound.stopping > 0) and bound.stopping.sum() == pytest.approx(1.0)
    # against that stopping distribution, taking all or none of the first buyer earns the same
    values = np.array([1.0, 4.0])
    payoff = best_response_payoff(setting, np.array([1, 1]), values, bound.stopping)
    assert 1.0 / payoff == pytest.approx(1.75, rel=1e-9)


@pytest.mark.parametrize("divisible", [True, False])
def test_prefix_optima_are_the_offline_optima_of_the_prefixes(divisible):
    setting = Setting(rounds=12, max_demand=0.4, demand_levels=4, divisible=divisible)
    rng = np.random.default_rng(3)
    units = rng.integers(1, 5, size=12)
    values = rng.uniform(1.0, 10.0, size=12) * units / setting.grid_size
    optima = prefix_optima(setting, units, values)
    # every prefix at once: the buyers after it are blanked out (no demand, no value)
    after = np.arange(12)[None, :] > np.arange(12)[:, None]  # [prefix, buyer]
    blank_values = jnp.asarray(np.where(after, 0.0, values[None, :]))
    blank_units = jnp.asarray(np.where(after, 0, units[None, :]))
    if divisible:
        demands = blank_units / setting.grid_size
        expected = jax.vmap(lambda v, d: greedy_fill_optimum(v, d, 1.0))(blank_values, demands)
    else:
        expected = jax.vmap(lambda v, u: knapsack_optimum(v, u, setting.grid_size))(
            blank_values, blank_units
        )
    np.testing.assert_allclose(optima, np.asarray(expected), rtol=1e-5)


def test_prefix_optima_sorted_once_are_each_prefix_s_own_knapsack_to_the_bit():
    """The divisible prefix optima sort the buyers once; each equals the fractional knapsack
    of its own prefix, sorted on its own, exactly (ties in density included): the search
    compares bounds for ties, so the figures it finds must not move in the last bit."""
    setting = Setting(rounds=300, max_demand=0.05, demand_levels=5)
    rng = np.random.default_rng(11)
    units = rng.integers(1, 6, size=300)
    densities = rng.choice(np.geomspace(1.0, 10.0, 7), size=300)  # many ties
    values = densities * units / setting.grid_size
    optima = prefix_optima(setting, units, values)
    for j in range(300):
        own = fractional_knapsack(values[: j + 1], units[: j + 1], setting.grid_size)
        assert optima[j] == own, j


@pytest.mark.parametrize(
    "setting",
    [
        Setting(low=1.0, high=10.0, rounds=40, max_demand=0.05),
        Setting(low=1.0, high=10.0, rounds=12, max_demand=0.25, demand_levels=2, divisible=False),
    ],
    ids=["divisible", "indivisible"],
)
def test_no_algorithm_beats_the_searched_bound(setting):
    """The search only ever raises the bound, the certificate never exceeds the LP's own
    optimum, and every baseline's exact ratio on the same setting lies above the bound."""
    (start,) = search_lower_bound(setting, jax.random.key(0), steps=0)
    (searched,) = search_lower_bound(setting, jax.random.key(0), steps=60)
    assert 1.0 < start.ratio <= searched.ratio
    assert searched.ratio <= searched.lp_ratio * (1 + 1e-7)
    assert np.all(searched.densities >= setting.low) and np.all(searched.densities <= setting.high)
    for name in ("threshold", "exponential", "greedy"):
        exact = certify_dp(setting, make_baseline(name, setting)).ratio
        assert searched.ratio <= exact * (1 + 1e-9), name


def test_the_sparse_lp_is_the_lp_written_out():
    """The bound's divisible LP, solved with running sums (a few nonzeros a round), has the
    optimum of the LP written row by row, ``z <= sum_{t <= j} v_t x_t / OPT_j`` for every
    prefix j, and its duals certify no more than that optimum."""
    setting = Setting(rounds=60, max_demand=0.1, demand_levels=4)
    rng = np.random.default_rng(7)
    for _ in range(4):
        units = rng.integers(1, 5, size=60)
        densities = rng.uniform(1.0, 10.0, size=60)
        values = densities * units / setting.grid_size
        optima = prefix_optima(setting, units, values)
        rows = -np.tril(np.ones((60, 60))) * values[None, :] / optima[:, None]
        written = linprog(
            c=np.append(np.zeros(60), -1.0),
            A_ub=np.vstack([np.hstack([rows, np.ones((60, 1))]), np.append(units, 0.0)]),
            b_ub=np.append(np.zeros(60), setting.grid_size),
            bounds=[(0.0, 1.0)] * 60 + [(0.0, None)],
        )
        bound = stopping_lower_bound(setting, units, densities)
        assert bound.lp_ratio == pytest.approx(-1.0 / written.fun, rel=1e-9)
        assert 1.0 < bound.ratio <= bound.lp_ratio * (1 + 1e-9)


def test_several_resources_are_refused():
    setting = Setting(resources=2, capacities=(1.0, 1.0), rounds=4)
    with pytest.raises(SettingError, match="one resource"):
        stopping_lower_bound(setting, np.array([1, 1, 1, 1]), np.ones(4))


def test_the_setting_s_lower_bound_is_the_same_in_every_unit():
    """The search runs in units of L and the capacity: a setting at another scale gets the
    same figure, and its family's densities in its own units."""
    unit = Setting(low=1.0, high=2.8, rounds=29, max_demand=0.2, demand_levels=2, divisible=False)
    scaled = dataclasses.replace(unit, low=0.463, high=0.463 * 2.8, capacities=(0.0169,))
    found, at_unit = certified_lower_bound(scaled), certified_lower_bound(unit)
    assert found.ratio == at_unit.ratio
    np.testing.assert_allclose(found.inputs, 0.463 * np.asarray(at_unit.inputs), rtol=1e-12)
