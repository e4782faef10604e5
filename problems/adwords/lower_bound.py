"""A certified lower bound on every online algorithm's ratio in a budgeted allocation setting,
by Yao's principle over the upper-triangular instances in a uniformly random advertiser order.

**The distribution.** Take ``m <= n`` advertisers, ``s <= m`` phases of ``l`` queries of bid
``b`` (one of the setting's levels, ``l b <= 1``, ``s l <= T``). The phase-``i`` queries
(``i = 1 .. s``) are wanted by advertisers ``pi(i), .., pi(m)``, for an order ``pi`` drawn
uniformly from all ``m!``; the other queries nobody wants. OPT gives phase ``i`` to ``pi(i)``:
``OPT = s l b`` whatever the order.

**Why no algorithm earns more than** ``R = sum_j min(1, c sum_{i <= min(j, s)} 1/(m-i+1))``
(``c = l b``; sum over ``j = 1 .. m``). Who leaves after phase ``i`` is ``pi(i)``, uniform
among the ``m-i+1`` advertisers still wanted and revealed only by phase ``i+1``: independent
of everything the algorithm has seen and done by the end of phase ``i``. So each of them,
``pi(j)`` included for ``j >= i``, gets in expectation ``1 / (m-i+1)`` of what phase ``i`` hands
out, at most ``c``. Advertiser ``pi(j)`` is wanted in phases ``1 .. min(j, s)``; it earns at
most ``min(1, what it is given)``, and ``E[min(1, X)] <= min(1, E[X])``. Summing over ``j``
bounds every algorithm's expected revenue, randomised or not, fractional or integral (an
integral rule's expected allocation is a fractional one that earns at least as much).

**The bound is attained.** Water-filling keeps every wanted advertiser at the same level, so
each gets exactly ``c / (m-i+1)`` in phase ``i``, in every order: it earns ``R`` on each
instance of the distribution. ``R / OPT`` is therefore the exact best response (for
fractional allocation; for integral allocation an upper bound on it), and by Yao's principle
(OPT is the same on every instance) no online algorithm has a ratio below ``OPT / R``. The
bound is the largest over ``(m, s, b, l)``; all of it is closed form, in float64, outside
``jit``.
"""

from __future__ import annotations

import math

import numpy as np

from advonline.problem import LowerBound
from advonline.problems.adwords.families import bidder_set, from_blocks
from advonline.problems.adwords.model import Setting


def water_level_revenue(advertisers: int, phases: int, supply: float) -> float:
    """``R``: what water-filling earns on an upper-triangular instance of ``advertisers``
    advertisers, stopped after ``phases`` phases of ``supply`` each (module docstring)."""
    per_phase = supply / (advertisers - np.arange(phases, dtype=np.float64))
    given = np.cumsum(per_phase)  # to pi(j), j = 1 .. phases, by the end of phase j
    kept = np.full(advertisers - phases, given[-1])  # advertisers still wanted at the stop
    return float(np.minimum(1.0, np.concatenate([given, kept])).sum())


def _candidates(setting: Setting):
    """Every ``(ratio, m, s, level, l)`` the setting can hold."""
    for level, bid in enumerate(setting.bids):
        most = math.floor(1.0 / bid + 1e-9)  # queries of this bid in one budget
        for length in range(1, min(most, setting.queries) + 1):
            supply = length * bid
            for advertisers in range(2, setting.advertisers + 1):
                for phases in range(1, min(advertisers, setting.queries // length) + 1):
                    revenue = water_level_revenue(advertisers, phases, supply)
                    yield phases * supply / revenue, advertisers, phases, level, length


def lower_bound(setting: Setting) -> LowerBound:
    """The certified lower bound for ``setting``: the best distribution of the module docstring.
    ``inputs`` is the upper-triangular instance in the identity order (tokens ``[T]``); the
    distribution is every order of its first ``m`` advertisers, equally likely."""
    ratio, advertisers, phases, level, length = max(_candidates(setting))
    blocks = [(length, level, bidder_set(range(phase, advertisers))) for phase in range(phases)]
    tokens = from_blocks(setting, blocks)
    distribution = {
        "orders": f"uniform over the {advertisers}! orders of advertisers 0 .. {advertisers - 1}",
        "advertisers": advertisers,
        "phases": phases,
        "queries_per_phase": length,
        "bid": setting.bids[level],
    }
    return LowerBound(ratio, 1.0 / ratio, distribution, tokens)
