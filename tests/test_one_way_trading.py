"""One-way trading's certificate against brute force, with a simulator written again in
NumPy. A curve is linear between grid rates; its certificate is its ratio over every real
input of every horizon. On tiny settings every input the adversary's tokens can write is
tried, and random real rates besides: none goes above the certificate. Rising walks of many
records come within a hair of it, so it is the supremum and not a loose bound."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
from scipy.optimize import linprog
from tiers import first_by_default

from advonline import checkpoint, configs
from advonline.baselines.one_way_trading import BASELINES, optimal_ratio
from advonline.problems.one_way_trading import exact
from advonline.problems.one_way_trading.model import Setting, SettingError, rise_and_drop
from advonline.train import train


def _ratios(setting: Setting, curve: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """OPT / ALG on each input of real ``rates`` ``[N, T]`` of a curve linear between grid
    rates: it converts up to the curve at each rate (what it holds never falls), the rest at
    m in the end."""
    held = np.maximum.accumulate(np.interp(rates, np.asarray(setting.rates), curve), axis=1)
    converted = np.diff(held, axis=1, prepend=0.0)
    revenue = (rates * converted).sum(1) + setting.low * (1.0 - held[:, -1])
    return np.maximum(rates.max(1), setting.low) / revenue


def _dense_walks(setting: Setting, records: int = 3000, stops: int = 3000) -> np.ndarray:
    """Rising walks ``[stops, records]`` from m to each of ``stops`` best rates, geometric
    steps (the adversary's best inputs as the walk gets finer)."""
    ends = setting.low * setting.theta ** np.linspace(0.0, 1.0, stops)
    steps = np.linspace(0.0, 1.0, records)[None, :]
    return setting.low * (ends[:, None] / setting.low) ** steps


def _curves(levels: int) -> list[np.ndarray]:
    """Curves that convert at the lowest rate already (the first record counts), one that
    waits for the top, a straight ramp, and random non-decreasing ones."""
    rng = np.random.default_rng(3)
    curves = [
        np.full(levels, 0.4),
        np.linspace(0.3, 1.0, levels),
        np.where(np.arange(levels) == levels - 1, 1.0, 0.0),
        np.linspace(0.0, 1.0, levels),
    ]
    for _ in range(4):
        curves.append(np.minimum(np.cumsum(rng.uniform(0, 0.5, levels)), 1.0))
    return curves


@pytest.mark.parametrize(
    ("levels", "rounds"),
    [(4, 2), (4, 3), (3, 5), (5, 3)],
    ids=["T2-G4", "T3-G4", "T5-G3", "T3-G5"],
)
@pytest.mark.parametrize("points", [exact.ROUND_POINTS, 1], ids=["fine", "grid-rates-only"])
def test_no_input_goes_above_the_certificate(levels, rounds, points, monkeypatch):
    """With the bound's records on the grid rates alone (``points`` 1), real rates between
    them are what only the bound's cells between records cover."""
    monkeypatch.setattr(exact, "ROUND_POINTS", points)
    setting = Setting(low=1.0, high=9.0, rounds=rounds, levels=levels)
    tokens = np.asarray(setting.token_rates)
    every = np.asarray(list(itertools.product(range(len(tokens)), repeat=rounds)))
    rng = np.random.default_rng(11)
    real = np.exp(rng.uniform(0, np.log(9.0), (4000, rounds)))  # any rates in [m, M]
    real = np.concatenate([real, np.sort(real, axis=1)])  # and rising walks of them
    for curve in _curves(levels):
        certificate = exact.curve_ratio(setting, curve).ratio
        assert _ratios(setting, curve, tokens[every]).max() <= certificate * (1 + 1e-12)
        assert _ratios(setting, curve, real).max() <= certificate * (1 + 1e-12)


@pytest.mark.parametrize("levels", first_by_default([2, 4, 9]))
def test_fine_rising_walks_approach_the_certificate(levels):
    """Walks of 3,000 records to 3,000 best rates: none above the certificate, the worst within
    0.1% of it (a certificate missing a segment's interior maximum, or the first record's
    conversion at m, falls below them)."""
    setting = Setting(low=1.0, high=9.0, rounds=3000, levels=levels)
    walks = _dense_walks(setting)
    for curve in _curves(levels):
        certificate = exact.curve_ratio(setting, curve).ratio
        worst = _ratios(setting, curve, walks).max()
        assert worst <= certificate * (1 + 1e-12)
        assert worst >= certificate * (1 - 1e-3)


@pytest.mark.parametrize("rounds", [17, 5])
def test_the_certificate_names_the_hardest_walk_of_the_family(rounds):
    """The named input is the rise-and-drop member with the highest ratio, by the NumPy
    simulator, and stays below the certificate."""
    setting = Setting(low=1.0, high=9.0, rounds=rounds, levels=9)
    tokens = np.asarray(setting.token_rates)
    family = np.asarray(rise_and_drop(setting))
    for curve in _curves(9):
        certificate = exact.curve_ratio(setting, curve)
        named = _ratios(setting, curve, tokens[certificate.worst][None])[0]
        assert named == pytest.approx(_ratios(setting, curve, tokens[family]).max(), rel=1e-12)
        assert named <= certificate.ratio * (1 + 1e-12)


@pytest.mark.parametrize(
    ("low", "high", "named"),
    [(1.0, 1e16, "high / low must be at most"), (1e-40, 1e-35, "rates must lie in")],
)
def test_rates_too_far_apart_or_beyond_float32_are_refused(low, high, named):
    with pytest.raises(SettingError, match=named):
        Setting(low=low, high=high)


def test_a_falling_curve_has_no_certificate():
    setting = Setting(low=1.0, high=9.0, rounds=4, levels=4)
    assert exact.curve_ratio(setting, np.asarray([0.2, 0.5, 0.4, 1.0])) is None


@pytest.mark.parametrize(("low", "theta"), [(1.0, 4.0), (1.0, 20.0), (1e-9, 30.0), (1e9, 30.0)])
def test_the_best_curve_on_the_grid_is_bracketed_by_its_lp(low, theta):
    """The LP's ``1 / s`` is below every curve's ratio over every horizon (each baseline's,
    each random curve's) and within 0.1% of its own curve's; the lower bound on every online
    algorithm is below both, and r* lies between the bound and the best curve. Both LPs give
    the same figures at every scale of the rates."""
    setting = Setting(low=low, high=low * theta, rounds=33, levels=9)
    fractions, bound = exact.optimal_curve(setting)
    certified = exact.supremum(setting, fractions)
    assert bound <= certified <= bound * (1 + 1e-3)
    others = [make(setting).fractions for make in BASELINES.values()] + _curves(9)
    for curve in others:
        assert exact.supremum(setting, np.asarray(curve)) >= bound * (1 - 1e-9)
    lower = exact.lower_bound(setting).ratio
    assert lower < optimal_ratio(theta) < certified
    unit = Setting(low=1.0, high=theta, rounds=33, levels=9)
    assert exact.optimal_curve(unit)[1] == pytest.approx(bound, rel=1e-9)
    assert exact.lower_bound(unit).ratio == pytest.approx(lower, rel=1e-9)


def test_more_rounds_raise_the_lower_bound_towards_r_star():
    """Real rates let a longer horizon's walks take more, finer steps: the bound rises with T
    and stays below r*, the best ratio for an unbounded horizon."""
    bounds = [exact.lower_bound(Setting(high=10.0, rounds=rounds)).ratio for rounds in (9, 33, 129)]
    assert bounds[0] < bounds[1] < bounds[2] < optimal_ratio(10.0)


@pytest.mark.parametrize(
    ("levels", "rounds"), [(3, 2), (5, 3), (9, 6)], ids=["T2-G3", "T3-G5", "T6-G9"]
)
def test_the_bound_for_t_rounds_is_attained_by_its_own_walk(levels, rounds):
    """The walk behind the bound's largest point ratio (records on its fine rates, then m)
    is a real input; the one simulator gives it a ratio within 0.2% of the bound, and each
    walk's revenue, as the linear function of the curve that descent moves, is the bound's."""
    setting = Setting(low=1.0, high=9.0, rounds=rounds, levels=levels)
    for curve in _curves(levels):
        grid = np.maximum.accumulate(curve)
        bound = exact.rounds_bound(setting, grid)
        end = int(np.argmax(bound.point_ratios))
        records = bound.fine.rates[bound.walk(end)]
        assert len(records) <= rounds
        walk = np.concatenate([records, np.full(rounds - len(records), setting.low)])
        attained = _ratios(setting, grid, walk[None])[0]
        assert attained <= bound.ratio * (1 + 1e-12)
        assert attained >= bound.ratio * (1 - 2e-3)
        ends = np.arange(len(bound.fine.rates))
        rows, tops = bound.revenue_coefficients(setting.low, ends)
        np.testing.assert_allclose(tops / (rows @ grid + setting.low), bound.point_ratios)


def test_divide_and_conquer_finds_every_column_s_minimum():
    """:func:`exact.earlier_minima` against the whole matrix: random offsets, rising rates and
    non-decreasing slopes (with ties), every column's minimum over earlier rows and the first
    row that attains it."""
    rng = np.random.default_rng(7)
    for count in (1, 2, 3, 17, 300):
        rates = np.sort(rng.uniform(1.0, 10.0, count))
        slopes = np.sort(rng.choice([0.0, 0.25, 0.5, 1.0], count) * rng.uniform(0.5, 1, count))
        offsets = rng.uniform(0.0, 5.0, count)
        minima, rows = exact.earlier_minima(offsets, slopes, rates)
        whole = offsets[:, None] - rates[None, :] * slopes[:, None]
        whole[np.tril_indices(count)] = np.inf  # row i < column j only
        np.testing.assert_array_equal(minima, whole.min(axis=0))
        columns = np.arange(1, count)
        np.testing.assert_array_equal(rows[columns], whole.argmin(axis=0)[columns])


def test_a_curve_for_t_rounds_is_certified_below_r_star():
    """A walk of ``T`` records earns more than the integral, so the best curve for ``T``
    rounds beats r*, which no curve beats over every horizon: the LP over the bound's own
    walks (cutting planes) finds a curve certified below r* and above the lower bound on
    every online algorithm, while its ratio over every horizon stays above r*."""
    setting = Setting(low=1.0, high=10.0, rounds=33, levels=17)
    grid, _ = exact.optimal_curve(setting)
    walks, tops = [], []
    for _ in range(6):
        bound = exact.rounds_bound(setting, grid)
        ends = np.arange(0, len(bound.lowest), 8)
        rows, rates = bound.revenue_coefficients(setting.low, ends)
        walks.append(rows)
        tops.append(rates)
        grid = _best_curve_against(setting, np.concatenate(walks), np.concatenate(tops))
    certified = exact.curve_ratio(setting, grid).ratio
    assert exact.lower_bound(setting).ratio < certified < optimal_ratio(10.0)
    assert exact.supremum(setting, grid) > optimal_ratio(10.0)


def _best_curve_against(setting, rows, tops) -> np.ndarray:
    """The non-decreasing curve on the grid that maximises ``s`` with ``s top_k <= rows_k @ g +
    m`` for every walk ``k`` (HiGHS)."""
    levels = setting.levels
    rising = np.zeros((levels - 1, levels + 1))
    rising[np.arange(levels - 1), np.arange(levels - 1)] = 1.0
    rising[np.arange(levels - 1), np.arange(1, levels)] = -1.0
    upper = np.vstack([np.hstack([-rows, tops[:, None]]), rising])
    rhs = np.concatenate([np.full(len(tops), setting.low), np.zeros(levels - 1)])
    cost = np.zeros(levels + 1)
    cost[-1] = -1.0
    bounds = [(0.0, 1.0)] * levels + [(0.0, None)]
    solved = linprog(cost, A_ub=upper, b_ub=rhs, bounds=bounds, method="highs")
    return np.maximum.accumulate(np.clip(solved.x[:levels], 0.0, 1.0))


@pytest.mark.end_to_end
def test_descent_epochs_lower_the_certificate_and_deliver_the_best(tmp_path):
    """With ``oracle.descent_epochs`` the last epochs descend the certificate for ``T``
    rounds from the best certified curve: the run's guarantee falls below every epoch
    against the archive, and the delivered curve's certificate is that guarantee."""
    from tests.test_run_command import TINY

    text = TINY + "descent_epochs = 2\ndescent_learning_rate = 0.03\n"
    path = tmp_path / "descent.toml"
    path.write_text(text)
    config = configs.load(path)
    folder = tmp_path / "run"
    train(config, folder)
    with (folder / "metrics.csv").open() as handle:
        rows = [row for row in csv.DictReader(handle) if row["guarantee"]]
    guarantee = [float(row["guarantee"]) for row in rows]
    assert guarantee[-1] < guarantee[-3]  # below everything trained against the archive
    state, _, _ = checkpoint.load(folder)
    game = config.build_game()
    delivered = exact.curve_ratio(config.setting, game.policy(state.best_algorithm).fractions)
    assert delivered.ratio == pytest.approx(guarantee[-1], rel=1e-6)
