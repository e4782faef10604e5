"""The exact certificate against brute force, and the closed form against known optima."""

import dataclasses
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from policies import RandomTablePolicy, TablePolicy
from tiers import first_by_default

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.certify import (
    _induction,
    _pairs,
    certify_and_draw,
    certify_closed_form,
    certify_dp,
)
from advonline.problems.posted_price.learned import price_atoms
from advonline.problems.posted_price.model import (
    Instance,
    Setting,
    expected_welfare_exact,
    price_table,
    simulate,
)


def _opt_numpy(values, units, grid, divisible):
    """Independent OPT of tiny instances ``[N, T]``: greedy fill by density (divisible) or the
    best of every subset (indivisible), in NumPy."""
    if divisible:
        density = np.where(units > 0, values / np.maximum(units, 1), -1.0)
        order = np.argsort(-density, axis=1)
        units_sorted = np.take_along_axis(units, order, 1)
        before = np.cumsum(units_sorted, 1) - units_sorted
        take = np.clip(grid - before, 0, units_sorted)
        return np.sum(np.take_along_axis(np.maximum(density, 0), order, 1) * take, 1)
    subsets = np.array(list(itertools.product([0, 1], repeat=values.shape[1])))  # [2^T, T]
    feasible = units @ subsets.T <= grid
    return np.max(np.where(feasible, values @ subsets.T, 0.0), 1)


def _brute_force_ratio(setting: Setting, policy) -> float:
    """sup OPT / ALG over every instance whose densities come from a fine set that holds every
    posted price and a point just below it (the suprema the certificate reaches)."""
    with jax.enable_x64(True):
        prices = np.unique(np.asarray(price_table(setting, policy).prices))
        candidates = np.concatenate(
            [np.linspace(setting.low, setting.high, 13), prices, prices - 1e-9]
        )
        densities = np.unique(np.clip(candidates, setting.low, setting.high))
        types = [(0.0, 0)] + [
            (d, j) for d in densities for j in range(1, setting.demand_levels + 1)
        ]
        sequences = np.array(list(itertools.product(range(len(types)), repeat=setting.rounds)))
        density = np.array([types[i][0] for i in range(len(types))])[sequences]
        units = np.array([types[i][1] for i in range(len(types))])[sequences]
        demands = units * setting.demand_unit
        instances = Instance(
            values=jnp.asarray(density * demands), demands=jnp.asarray(demands)[..., None]
        )
        keys = jax.random.split(jax.random.key(0), len(sequences))
        welfare = np.asarray(simulate(setting, policy, instances, keys).welfare)
    opt = _opt_numpy(density * demands, units, setting.grid_size, setting.divisible)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(welfare > 0, opt / welfare, np.where(opt > 0, np.inf, 1.0))
    return float(ratio.max())


TINY = [
    Setting(low=1.0, high=4.0, rounds=3, max_demand=0.5, demand_levels=2, divisible=True),
    Setting(low=1.0, high=4.0, rounds=3, max_demand=0.5, demand_levels=2, divisible=False),
    Setting(low=1.0, high=6.0, rounds=4, max_demand=0.5, demand_levels=1, divisible=True),
    Setting(low=1.0, high=6.0, rounds=4, max_demand=0.5, demand_levels=1, divisible=False),
]


def _table_policy(setting: Setting, seed: int) -> TablePolicy:
    """A round-dependent, non-monotone price table that sometimes prices outside [L, U]."""
    rng = np.random.default_rng(seed)
    table = rng.uniform(
        0.8 * setting.low, 1.1 * setting.high, (setting.rounds, setting.grid_size + 1)
    )
    table[:, 0] = setting.low  # keeps the ratio finite so the comparison is informative
    return TablePolicy(prices=jnp.asarray(table))


@pytest.mark.parametrize(
    "setting",
    first_by_default(TINY, keep=2),
    ids=lambda s: f"T{s.rounds}-G{s.grid_size}-{'div' if s.divisible else 'ind'}",
)
@pytest.mark.parametrize("algorithm", ["threshold", "greedy", "table"])
def test_dp_certificate_equals_brute_force(setting, algorithm):
    if algorithm == "table":
        policy = _table_policy(setting, seed=setting.rounds + setting.divisible)
    else:
        policy = make_baseline(algorithm, setting)
    certificate = certify_dp(setting, policy)
    brute = _brute_force_ratio(setting, policy)
    assert certificate.method == "dynamic-programme"
    # the brute force only reaches suprema to within the 1e-9 step below each price
    assert brute <= certificate.ratio * (1 + 1e-9)
    assert brute == pytest.approx(certificate.ratio, rel=1e-6)


def test_a_warm_start_below_the_ratio_changes_nothing_and_one_above_stays_a_bound():
    setting = TINY[0]
    policy = _table_policy(setting, seed=3)
    exact = certify_dp(setting, policy)
    below = certify_dp(setting, policy, start=1 + 0.9 * (exact.ratio - 1))
    assert below.ratio == pytest.approx(exact.ratio, rel=1e-12)
    assert int(below.note.split()[-3]) <= int(exact.note.split()[-3])  # fewer sweeps or as many
    above = certify_dp(setting, policy, start=1.5 * exact.ratio)
    assert above.ratio == pytest.approx(1.5 * exact.ratio)  # certified at once, loose


@pytest.mark.parametrize(("scale", "capacity"), [(1e-15, 1.0), (1e12, 1.0), (1.0, 1e-25)])
def test_the_certificate_is_the_same_at_every_scale_of_prices(scale, capacity):
    """A ratio depends on U / L alone: the induction's stopping and tie tolerances are
    relative to L times the capacity, the unit of its values."""
    setting = TINY[0]
    scaled = dataclasses.replace(
        setting, low=setting.low * scale, high=setting.high * scale, capacities=(capacity,)
    )
    for name in ("threshold", "greedy"):
        unit = certify_dp(setting, make_baseline(name, setting)).ratio
        assert certify_dp(scaled, make_baseline(name, scaled)).ratio == pytest.approx(
            unit, rel=1e-9
        )


def test_dp_certificate_reports_infinite_ratio():
    setting = TINY[0]
    certificate = certify_dp(setting, make_baseline("fixed", setting))
    assert certificate.ratio == math.inf
    assert _brute_force_ratio(setting, make_baseline("fixed", setting)) == math.inf


def test_dp_skips_a_grid_too_large_and_says_why():
    setting = Setting(rounds=2000, max_demand=0.001)
    certificate = certify_dp(setting, make_baseline("threshold", setting))
    assert certificate.ratio is None
    assert "over the limit" in certificate.note


@pytest.mark.parametrize("high", [2.0, 5.0, 10.0, 100.0])
def test_closed_form_threshold_is_one_plus_log_theta(high):
    setting = Setting(high=high)
    found = certify_closed_form(setting, make_baseline("threshold", setting))
    # the utilisation grid (2^18 steps) can only place the kink at 1/alpha to within a step,
    # which overestimates by at most about alpha / 2^18 (relative)
    assert 1 + math.log(high) <= found.ratio <= (1 + math.log(high)) * (1 + 1e-4)


def test_closed_form_greedy_and_fixed():
    setting = Setting(high=10.0)
    assert certify_closed_form(setting, make_baseline("greedy", setting)).ratio == pytest.approx(
        10.0
    )
    assert certify_closed_form(setting, make_baseline("fixed", setting)).ratio == math.inf


def test_closed_form_refuses_round_dependent_policies():
    setting = TINY[2]
    found = certify_closed_form(setting, _table_policy(setting, seed=0))
    assert found.ratio is None and "round" in found.note


def _committed_gap_game_tree(setting: Setting, policy, ratio: float) -> float:
    """max E[OPT_committed - r ALG] over adversaries that see the round and both players'
    units (not the price draw) and commit OPT's share of each buyer on arrival, by recursion
    over the whole game tree of a tiny setting: the game the randomised DP solves."""
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)
        prices, probs = np.asarray(table.prices), np.asarray(table.probs)
    grid, unit = setting.grid_size, setting.demand_unit
    posted = prices.ravel()
    densities = np.unique(
        np.clip(np.concatenate([posted, posted - 1e-9, [setting.low]]), setting.low, setting.high)
    )

    @functools.cache
    def best(t: int, alg_units: int, opt_units: int) -> float:
        if t == setting.rounds:
            return 0.0
        found = best(t + 1, alg_units, opt_units)  # nobody comes
        for density, units in itertools.product(densities, range(1, setting.demand_levels + 1)):
            if setting.divisible:
                sells, opt_takes = min(units, grid - alg_units), range(units + 1)
            else:
                sells, opt_takes = (units if alg_units + units <= grid else 0), (0, units)
            buys = float(np.sum(probs[t, alg_units] * (density >= prices[t, alg_units])))
            for take in opt_takes:
                if opt_units + take > grid:
                    continue
                value = density * take * unit
                if buys > 0:
                    after = best(t + 1, alg_units + sells, opt_units + take)
                    value += buys * (after - ratio * density * sells * unit)
                if buys < 1:
                    value += (1 - buys) * best(t + 1, alg_units, opt_units + take)
                found = max(found, value)
        return found

    return best(0, 0, 0)


def _oblivious_brute_force_ratio(setting: Setting, policy) -> float:
    """sup OPT / E[ALG] over every fixed instance on the candidate densities (exact E[ALG])."""
    with jax.enable_x64(True):
        posted = np.asarray(price_table(setting, policy, jnp.float64).prices).ravel()
        densities = np.unique(
            np.clip(np.concatenate([posted, posted - 1e-9]), setting.low, setting.high)
        )
        types = [(0.0, 0)] + [(d, 1) for d in densities]
        sequences = np.array(list(itertools.product(range(len(types)), repeat=setting.rounds)))
        density = np.array([d for d, _ in types])[sequences]
        units = np.array([j for _, j in types])[sequences]
        instances = Instance(
            values=jnp.asarray(density * units * setting.demand_unit),
            demands=jnp.asarray(units * setting.demand_unit)[..., None],
        )
        welfare = np.asarray(
            jax.vmap(expected_welfare_exact, (None, None, 0))(setting, policy, instances)
        )
    opt = _opt_numpy(density * units * setting.demand_unit, units, setting.grid_size, True)
    return float(np.max(np.where(welfare > 0, opt / np.maximum(welfare, 1e-300), 1.0)))


def _random_policy(setting: Setting, seed: int) -> RandomTablePolicy:
    """Three price atoms (one above U) with random round- and state-dependent probabilities."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(3), (setting.rounds, setting.grid_size + 1))
    levels = np.array([setting.low, 0.5 * (setting.low + setting.high), 1.2 * setting.high])
    return RandomTablePolicy(levels=jnp.asarray(levels), probs=jnp.asarray(probs))


@pytest.mark.parametrize("setting", TINY[:2] + TINY[3:], ids=["div-2lv", "ind-2lv", "ind-T4"])
@pytest.mark.parametrize("ratio", [1.0, 1.7, 3.0])
def test_randomised_dp_equals_committed_game_tree(setting, ratio):
    policy = _random_policy(setting, seed=setting.rounds)
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)
        sweep = _induction(setting, table.prices, table.probs, ratio, False)[0]
        gap, opt, alg = (float(x) for x in sweep)
    assert gap == pytest.approx(opt - ratio * alg, abs=1e-9)
    assert gap == pytest.approx(_committed_gap_game_tree(setting, policy, ratio), abs=1e-6)


def test_randomised_dp_bounds_every_fixed_instance():
    """The randomised certificate is an upper bound on the oblivious CR (and here not loose
    by more than the adversary's extra power)."""
    setting = TINY[2]  # T = 4, one demand level of half the capacity, divisible
    policy = _random_policy(setting, seed=7)
    bound = certify_dp(setting, policy).ratio
    oblivious = _oblivious_brute_force_ratio(setting, policy)
    assert oblivious <= bound * (1 + 1e-9)
    assert oblivious > 1.0


def test_randomised_certificate_of_a_point_mass_is_the_deterministic_one():
    setting = TINY[0]
    with jax.enable_x64(True):
        deterministic = _table_policy(setting, seed=3)
        levels = jnp.unique(deterministic.prices)
        one_hot = (deterministic.prices[..., None] == levels[None, None]).astype(jnp.float64)
        as_random = RandomTablePolicy(levels=levels, probs=one_hot)
        want = certify_dp(setting, deterministic).ratio
        got = certify_dp(setting, as_random).ratio
    assert got == pytest.approx(want, rel=1e-12)


def _exact_ratios(setting: Setting, policy, vocabulary: BuyerTypes, types: np.ndarray):
    """OPT / E[ALG] of instances written as buyer types ``[N, T]`` (exact, float64)."""
    with jax.enable_x64(True):
        instances = vocabulary.instances(jnp.asarray(types), jnp.float64)
        welfare = jax.vmap(
            lambda values, demands: expected_welfare_exact(
                setting, policy, Instance(values=values, demands=demands)
            )
        )(instances.values, instances.demands)
    values = np.asarray(instances.values)
    units = np.rint(np.asarray(instances.demands)[..., 0] / setting.demand_unit).astype(int)
    opt = _opt_numpy(values, units, setting.grid_size, setting.divisible)
    return opt / np.asarray(welfare)


def _on_grid(setting: Setting, seed: int, randomised: bool):
    """A policy whose prices are the adversary's density grid (as a learned network's are):
    a random table of grid prices, or random probabilities over the grid."""
    rng = np.random.default_rng(seed)
    grid = np.asarray(price_atoms(setting, 5))
    shape = (setting.rounds, setting.grid_size + 1)
    if randomised:
        probs = rng.dirichlet(np.ones(grid.size), shape)
        return RandomTablePolicy(levels=jnp.asarray(grid), probs=jnp.asarray(probs))
    table = grid[rng.integers(0, grid.size, shape)]
    table[:, 0] = setting.low  # a finite ratio
    return TablePolicy(prices=jnp.asarray(table))


@pytest.mark.parametrize("setting", TINY[:2] + TINY[3:], ids=["div-2lv", "ind-2lv", "ind-T4"])
@pytest.mark.parametrize("ratio", [1.0, 1.7, 3.0])
def test_the_sweep_over_equal_sale_pairs_is_the_full_sweep(setting, ratio):
    """Where every state's atoms rise within [L, U], as a learned network's do, "at p_k" and
    "just below p_{k+1}" buy the same atoms; the sweep that keeps the better of each pair has
    the full sweep's value, which is the committed game tree's."""
    policy = _on_grid(setting, seed=setting.rounds, randomised=True)
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)
        assert _pairs(setting, table.prices)
        full, paired = (
            [float(x) for x in _induction(setting, table.prices, table.probs, ratio, False, p)[0]]
            for p in (False, True)
        )
    assert paired[0] == pytest.approx(full[0], rel=1e-12, abs=1e-12)
    assert paired[0] == pytest.approx(paired[1] - ratio * paired[2], abs=1e-9)
    assert paired[0] == pytest.approx(_committed_gap_game_tree(setting, policy, ratio), abs=1e-6)


@pytest.mark.parametrize("high", [10.0, 2682.4])
def test_a_tie_within_a_pair_carries_one_candidate_s_opt_and_alg(high, optimised_compilation):
    """Threshold's one atom ties "at p_0" with U exactly at ratio 1, and the compiled sweep may
    round the two candidates' payoffs apart in one column and not in another: the OPT and
    ALG it carries must still be one strategy's, or Dinkelbach's iteration cycles (as at
    U / L = 2682.4 here) or stops at a ratio no instance attains."""
    setting = Setting(high=high, rounds=16, max_demand=0.05, demand_levels=2, divisible=False)
    policy = make_baseline("threshold", setting)
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)
        prices, probs = table.prices, table.probs
        gap, opt, alg = (float(x) for x in _induction(setting, prices, probs, 1.0, False, True)[0])
        full = float(_induction(setting, prices, probs, 1.0, False, False)[0][2])
    assert gap == pytest.approx(opt - alg, abs=1e-9) and alg == pytest.approx(full, rel=1e-12)
    assert certify_dp(setting, policy).ratio is not None


def test_pairs_need_atoms_rising_within_the_range():
    setting = TINY[0]
    with jax.enable_x64(True):
        rising = price_table(setting, _on_grid(setting, 1, randomised=True), jnp.float64)
        above = price_table(setting, _random_policy(setting, seed=1), jnp.float64)
    assert _pairs(setting, rising.prices)
    assert not _pairs(setting, above.prices)  # an atom above U
    assert not _pairs(setting, rising.prices[..., ::-1])  # falling


@pytest.mark.parametrize(
    "setting", first_by_default(TINY, keep=2), ids=["div-2lv", "ind-2lv", "div-T4", "ind-T4"]
)
def test_the_strategy_behind_a_deterministic_certificate_attains_it(setting):
    """Every draw of the DP's maximising strategy, written in the adversary's vocabulary, is
    an instance whose exact ratio is the certificate (up to the vocabulary's just-below
    densities, a relative 1e-4 under the suprema the programme uses), never above it."""
    vocabulary = BuyerTypes.build(setting, 5)
    for seed in range(3):
        policy = _on_grid(setting, seed, randomised=False)
        certificate, runs = certify_and_draw(setting, policy, jax.random.key(seed), 4)
        assert certificate.ratio == certify_dp(setting, policy).ratio
        ratios = _exact_ratios(setting, policy, vocabulary, vocabulary.tokens(*runs))
        assert np.all(ratios <= certificate.ratio * (1 + 1e-9))
        assert np.all(ratios >= certificate.ratio * (1 - 2e-4))


@pytest.mark.parametrize(
    "setting", first_by_default(TINY, keep=2), ids=["div-2lv", "ind-2lv", "div-T4", "ind-T4"]
)
def test_draws_against_a_randomised_policy_stay_under_its_bound(setting):
    """Against a randomised policy each draw is one fixed instance: its exact ratio is a
    lower bound on the oblivious CR, so below the certificate, and the hardest comes close
    to the bound."""
    vocabulary = BuyerTypes.build(setting, 5)
    policy = _on_grid(setting, 11, randomised=True)
    certificate, runs = certify_and_draw(setting, policy, jax.random.key(0), 64)
    assert certificate.ratio == certify_dp(setting, policy).ratio
    ratios = _exact_ratios(setting, policy, vocabulary, vocabulary.tokens(*runs))
    assert np.all(ratios <= certificate.ratio * (1 + 1e-9))
    assert ratios.max() >= 0.8 * certificate.ratio


def test_buyer_types_round_a_density_down_to_the_grid():
    setting = TINY[0]
    vocabulary = BuyerTypes.build(setting, 5)
    grid = price_atoms(setting, 5)
    at = vocabulary.tokens(np.array([grid[2]]), np.array([False]), np.array([1]))
    below = vocabulary.tokens(np.array([grid[2]]), np.array([True]), np.array([2]))
    between = vocabulary.tokens(np.array([grid[2] * 1.01]), np.array([False]), np.array([1]))
    nobody = vocabulary.tokens(np.array([grid[2]]), np.array([False]), np.array([0]))
    with jax.enable_x64(True):
        values, demands = (np.asarray(x) for x in vocabulary.buyers(jnp.float64))
    unit = setting.demand_unit
    assert float(values[at[0]]) == pytest.approx(grid[2] * unit)
    assert float(values[below[0]]) == pytest.approx(grid[2] * (1 - 1e-4) * 2 * unit)
    assert between[0] == at[0]
    assert nobody[0] == vocabulary.nobody and float(demands[nobody[0]].sum()) == 0


@pytest.mark.parametrize("resources", [1, 2])
def test_inputs_of_other_density_levels_become_the_nearest_types(resources):
    """An input written over 5 density levels, read by a vocabulary of 8: every buyer keeps
    its demand vector and gets the highest density of the finer grid at most its own (less
    than one grid step lower); read by its own vocabulary it maps back to its own types,
    written in float32 or float64."""
    table = {"resources": resources, "capacities": [1.0] * resources, "low": 1.0, "high": 4.0}
    setting = Setting.from_config({**table, "rounds": 6, "max_demand": 0.5, "demand_levels": 2})
    coarse, fine = BuyerTypes.build(setting, 5), BuyerTypes.build(setting, 8)
    types = jax.random.randint(jax.random.key(0), (32, setting.rounds), 0, coarse.count)
    with jax.enable_x64(True):
        for dtype in (jnp.float32, jnp.float64):
            np.testing.assert_array_equal(
                coarse.nearest_types(coarse.instances(types, dtype)), types
            )
        given = coarse.instances(types, jnp.float64)
        near = fine.instances(jnp.asarray(fine.nearest_types(given)), jnp.float64)
    np.testing.assert_array_equal(near.demands, given.demands)
    values, nearest = np.asarray(given.values), np.asarray(near.values)
    grid_step = (setting.high / setting.low) ** (1 / 7)
    buyers = values > 0
    assert np.all(nearest <= values) and np.all(nearest[buyers] * grid_step > values[buyers])
    assert np.any(nearest < values)  # the grids differ: some buyers moved down
    assert np.all((nearest > 0) == buyers)


def test_draws_come_from_the_strategy_just_below_a_start_that_is_already_a_bound():
    """Started at the exact ratio the iteration stops at once, with no rising sweep; the draws
    then come from the strategy just below it, and still attain the ratio."""
    setting = TINY[2]
    vocabulary = BuyerTypes.build(setting, 5)
    policy = _on_grid(setting, 4, randomised=False)
    exact = certify_dp(setting, policy).ratio
    certificate, runs = certify_and_draw(setting, policy, jax.random.key(0), 2, start=exact)
    assert certificate.ratio == exact and certificate.note.endswith("1 DP sweeps")
    ratios = _exact_ratios(setting, policy, vocabulary, vocabulary.tokens(*runs))
    assert np.all(ratios <= exact * (1 + 1e-9)) and np.all(ratios >= exact * (1 - 2e-4))
