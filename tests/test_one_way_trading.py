"""One-way trading's certificate against brute force: on tiny grids every input (every
sequence of grid rates) is tried with a NumPy trader, and the certificate must be the worst
ratio among them, attained by the input it names."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from advonline.problems.one_way_trading import exact
from advonline.problems.one_way_trading.model import Setting


def _revenue(setting: Setting, curve: np.ndarray, tokens) -> float:
    """A conversion curve trading through the grid rates ``tokens`` by hand: up to
    ``curve[j]`` at rate ``j``, the rest at m in the end."""
    rates = np.asarray(setting.rates)
    converted, earned = 0.0, 0.0
    for token in tokens:
        amount = min(max(curve[token] - converted, 0.0), 1.0 - converted)
        converted += amount
        earned += rates[token] * amount
    return earned + setting.low * (1.0 - converted)


def _worst_by_enumeration(setting: Setting, curve: np.ndarray) -> float:
    rates = np.asarray(setting.rates)
    return max(
        max(rates[list(tokens)].max(), setting.low) / _revenue(setting, curve, tokens)
        for tokens in itertools.product(range(setting.levels), repeat=setting.rounds)
    )


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
    [(4, 2), (4, 3), (4, 4), (4, 6), (5, 3)],
    ids=["T2-G4", "T3-G4", "T4-G4", "T6-G4", "T3-G5"],
)
def test_certificate_is_the_worst_of_every_input(levels, rounds):
    setting = Setting(low=1.0, high=9.0, rounds=rounds, levels=levels)
    for curve in _curves(levels):
        certificate = exact.curve_ratio(setting, curve)
        assert certificate.exact
        assert certificate.ratio == pytest.approx(_worst_by_enumeration(setting, curve), rel=1e-12)
        rates = np.asarray(setting.rates)
        attained = max(rates[certificate.worst].max(), setting.low) / _revenue(
            setting, curve, certificate.worst
        )
        assert attained == pytest.approx(certificate.ratio, rel=1e-12)
