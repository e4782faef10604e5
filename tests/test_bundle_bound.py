"""The lower bound for several resources: the one-resource bound where it should be, exact
prefix optima, and a bound no policy's certificate undercuts."""

import itertools

import jax
import numpy as np
import pytest
from policies import random_grid_table

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.bundle_bound import (
    best_running,
    bundle_lower_bound,
    embedded,
    search_bundle_bound,
    search_widened_bound,
    widened,
)
from advonline.problems.posted_price.buyer_types import demand_grid_units
from advonline.problems.posted_price.grid_certify import certify_grid
from advonline.problems.posted_price.lower_bound import stopping_lower_bound
from advonline.problems.posted_price.model import Setting, SettingError
from advonline.problems.posted_price.optimum import batch_optimum


def test_a_bundle_at_l_then_one_at_u_is_the_hand_solved_game():
    """As for one resource: a whole capacity of both at L, then (maybe) one at U; the best
    share of the first equalises the two stops, ratio 2 - L/U."""
    setting = Setting(2, 1.0, 4.0, 2, 1.0, 1, True, (1.0, 1.0))
    bound = bundle_lower_bound(setting, np.array([[1, 1], [1, 1]]), np.array([1.0, 4.0]))
    assert bound.ratio == pytest.approx(1.75, rel=1e-9)
    assert bound.lp_ratio == pytest.approx(1.75, rel=1e-9)


def test_buyers_of_one_resource_give_the_one_resource_bound():
    rng = np.random.default_rng(0)
    two = Setting(2, 1.0, 10.0, 30, 0.2, 2, True, (1.0, 1.0))
    one = Setting(1, 1.0, 10.0, 30, 0.2, 2, True, (1.0,))
    levels = rng.integers(1, 3, 30)
    densities = np.sort(rng.uniform(1.0, 10.0, 30))
    units = np.stack([levels, np.zeros(30, int)], -1)
    assert bundle_lower_bound(two, units, densities).ratio == pytest.approx(
        stopping_lower_bound(one, levels, densities).ratio, rel=1e-9
    )


@pytest.mark.parametrize("resources", [2, 3])
def test_bundles_and_one_resource_play_the_one_resource_game_on_k_times_the_range(resources):
    """A master sequence of one resource with densities in [L, K U], written as buyers of
    resource 0 (densities up to U) and bundles of every resource (above, at a K-th of the
    density), has the one-resource bound of the widened range."""
    setting = Setting(resources, 1.0, 5.0, 12, 0.25, 2, True, (1.0,) * resources)
    wide = widened(setting)
    assert (wide.resources, wide.low, wide.high) == (1, 1.0, 5.0 * resources)
    rng = np.random.default_rng(resources)
    levels = rng.integers(1, 3, 12)
    densities = np.sort(rng.uniform(1.0, wide.high, 12))
    units, spread = embedded(setting, levels, densities)
    assert (units[:, 1:] > 0).any() and (units[:, 1:] == 0).any()  # bundles and singles
    assert spread.min() >= setting.low and spread.max() <= setting.high
    assert bundle_lower_bound(setting, units, spread).ratio == pytest.approx(
        stopping_lower_bound(wide, levels, densities).ratio, rel=1e-9
    )


def test_no_widened_game_where_the_ranges_do_not_meet():
    assert widened(Setting(2, 1.0, 1.5, 4, 0.5, 1, True, (1.0, 1.0))) is None  # 2 L > U
    assert widened(Setting(2, 1.0, 4.0, 4, 0.5, 1, True, (1.0, 2.0))) is None
    narrow = Setting(2, 1.0, 1.5, 4, 0.5, 1, True, (1.0, 1.0))
    assert search_widened_bound(narrow, jax.random.key(0)) == []


@pytest.mark.parametrize("resources", [2, 3])
def test_prefix_optima_are_highs_optima_of_the_prefixes(resources):
    setting = Setting(resources, 1.0, 10.0, 10, 0.5, 2, True, (1.0,) * resources)
    rng = np.random.default_rng(resources)
    units = demand_grid_units(setting)[rng.integers(len(demand_grid_units(setting)), size=10)]
    worth = rng.uniform(0.1, 1.0, 10)
    running = best_running(setting, units, worth)
    unit_size = np.asarray(setting.capacities) / setting.grid_size
    demands = units * unit_size  # [T, K]
    values = worth * units.max(-1)  # the whole buyer is worth g_t units
    for j in range(10):
        highs = batch_optimum(
            values[None, : j + 1], demands[None, : j + 1], setting.capacities, True
        )
        assert running[j] == pytest.approx(highs[0], rel=1e-9)


def test_no_policy_is_certified_below_the_searched_bound():
    """The search only raises the bound, the certificate never exceeds the LP's own optimum,
    and every policy's certificate on the setting (baselines, random tables, randomised too)
    lies above it and above the widened game's bound."""
    setting = Setting(2, 1.0, 6.0, 8, 0.5, 2, True, (1.0, 1.0))
    (start,) = search_bundle_bound(setting, jax.random.key(0), steps=0)
    (searched,) = search_bundle_bound(setting, jax.random.key(0), steps=40, candidates=2)
    assert 1.0 < start.ratio <= searched.ratio <= searched.lp_ratio * (1 + 1e-7)
    (wide,) = search_widened_bound(setting, jax.random.key(0), steps=20, candidates=2)
    assert 1.0 < wide.ratio <= wide.lp_ratio * (1 + 1e-7)
    policies = [make_baseline(name, setting) for name in ("threshold", "exponential")]
    policies += [
        random_grid_table(setting, seed, atoms) for seed, atoms in itertools.product((1, 2), (1, 3))
    ]
    for policy in policies:
        certificate = certify_grid(setting, policy).ratio
        assert max(searched.ratio, wide.ratio) <= certificate * (1 + 1e-9)


def test_what_the_bound_does_not_cover_is_refused_in_one_line():
    indivisible = Setting(2, 1.0, 4.0, 2, 1.0, 1, False, (1.0, 1.0))
    with pytest.raises(SettingError, match="divisible"):
        bundle_lower_bound(indivisible, np.array([[1, 1], [1, 1]]), np.array([1.0, 4.0]))
    uneven = Setting(2, 1.0, 4.0, 2, 1.0, 2, True, (1.0, 1.0))
    with pytest.raises(SettingError, match="one level"):
        bundle_lower_bound(uneven, np.array([[1, 2], [1, 1]]), np.array([1.0, 4.0]))
