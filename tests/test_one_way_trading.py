"""One-way trading's certificate against brute force. On tiny grids every input the adversary
can write (every sequence of its rate tokens, grid rates and rates just below them) is tried,
and random inputs of real rates besides: the certificate, the curve's ratio for real rates,
is never below any of them, and the token inputs come within ``JUST_BELOW`` of it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from advonline.problems.one_way_trading import exact
from advonline.problems.one_way_trading.model import JUST_BELOW, Setting


def _ratios(setting: Setting, curve: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """OPT / ALG of a curve that holds its value between grid rates on each input of real
    ``rates`` ``[N, T]``: it converts up to the curve at the grid rate at or below each rate
    (what it holds falls never), the rest at m in the end."""
    grid = np.asarray(setting.rates)
    level = np.searchsorted(grid, rates * (1 + 1e-9), side="right") - 1
    held = np.maximum.accumulate(curve[level], axis=1)
    converted = np.diff(held, axis=1, prepend=0.0)
    revenue = (rates * converted).sum(1) + setting.low * (1.0 - held[:, -1])
    return np.maximum(rates.max(1), setting.low) / revenue


def _curves(levels: int) -> list[np.ndarray]:
    """Curves that convert at the lowest rate already (their first record counts), one that
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
    [(4, 2), (4, 3), (4, 5), (3, 6), (5, 3)],
    ids=["T2-G4", "T3-G4", "T5-G4", "T6-G3", "T3-G5"],
)
def test_certificate_is_the_supremum_over_every_input(levels, rounds):
    setting = Setting(low=1.0, high=9.0, rounds=rounds, levels=levels)
    tokens = np.asarray(setting.token_rates)
    every = np.asarray(list(itertools.product(range(len(tokens)), repeat=rounds)))
    rng = np.random.default_rng(11)
    real = np.exp(rng.uniform(0, np.log(9.0), (4000, rounds)))  # any rates in [m, M]
    for curve in _curves(levels):
        certificate = exact.curve_ratio(setting, curve)
        worst = _ratios(setting, curve, tokens[every]).max()
        assert worst <= certificate.ratio * (1 + 1e-12)
        assert worst >= certificate.ratio * (1 - JUST_BELOW) * (1 - 1e-12)
        assert _ratios(setting, curve, real).max() <= certificate.ratio * (1 + 1e-12)
        named = _ratios(setting, curve, tokens[certificate.worst][None])[0]
        assert named >= certificate.ratio * (1 - JUST_BELOW) * (1 - 1e-12)


@pytest.mark.parametrize("theta", [4.0, 20.0])
def test_the_best_curve_on_the_grid_has_the_stepped_walks_ratio(theta):
    """With ``T >= G`` the stepped walks' LP curve is the best a curve on the grid can do for
    real rates: its certificate equals the LP's value, which lies above the lower bound on
    every online algorithm."""
    setting = Setting(low=1.0, high=theta, rounds=9, levels=9)
    best = exact.best_curve_ratio(setting)
    certified = exact.curve_ratio(setting, exact.optimal_fractions(setting)).ratio
    assert certified == pytest.approx(best, rel=1e-7)
    assert exact.lower_bound(setting).ratio < best
