"""Classic one-way trading algorithms, each ``make(setting) -> CurvePolicy`` on the setting's
rate grid, linear between grid rates (the learned policy's signature).

- ``threshold``: El-Yaniv, Fiat, Karp and Turpin's optimal algorithm for an unbounded horizon:
  nothing below ``m r*``, then ``g(p) = ln((p - m) / (m (r* - 1))) / r*``, where
  ``r* = 1 + W((theta - 1) / e)``; its ratio is at most ``r*`` as a continuous curve, and
  sampled on the grid a little above.
- ``optimal``: the curve that solves the grid's LP
  (:func:`~problems.one_way_trading.exact.optimal_curve`): the best curve on the grid up to
  the LP's sampling.
- ``reservation``: everything at the first rate of at least ``sqrt(m M)``, ramped from the
  grid rate below; ratio about ``sqrt(theta)``.
- ``all-at-once``: everything at the first rate; ratio ``theta``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from scipy.special import lambertw

from advonline.problems.one_way_trading.exact import optimal_curve
from advonline.problems.one_way_trading.model import CurvePolicy, Setting


def optimal_ratio(theta: float) -> float:
    """``r*(theta) = 1 + W((theta - 1) / e)``, the best ratio for an unbounded horizon."""
    return 1.0 + float(lambertw((theta - 1.0) / math.e).real)


def _curve(setting: Setting, fractions) -> CurvePolicy:
    return CurvePolicy(fractions=jnp.asarray(np.asarray(fractions)), rates=setting.rates)


def threshold(setting: Setting) -> CurvePolicy:
    ratio = optimal_ratio(setting.theta)
    rates = np.asarray(setting.rates)
    start = setting.low * ratio
    above = np.maximum(rates - setting.low, 1e-300) / (setting.low * (ratio - 1.0))
    fractions = np.where(rates >= start, np.log(np.maximum(above, 1.0)) / ratio, 0.0)
    return _curve(setting, np.clip(fractions, 0.0, 1.0))


def optimal(setting: Setting) -> CurvePolicy:
    return _curve(setting, optimal_curve(setting)[0])


def reservation(setting: Setting) -> CurvePolicy:
    rates = np.asarray(setting.rates)
    reserve = math.sqrt(setting.low * setting.high)
    return _curve(setting, (rates >= reserve * (1 - 1e-12)).astype(float))


def all_at_once(setting: Setting) -> CurvePolicy:
    return _curve(setting, np.ones(setting.levels))


BASELINES = {
    "threshold": threshold,
    "optimal": optimal,
    "reservation": reservation,
    "all-at-once": all_at_once,
}
