"""Exact competitive ratios of conversion curves, and the certified lower bound on every online
algorithm, for one-way trading on a rate grid (NumPy and SciPy's HiGHS, float64, outside
``jit``).

**A curve's exact ratio.** Against a curve ``g`` (non-decreasing in the rate) only a new
highest rate makes the trader convert: it converts up to ``g(p)`` and never beyond. So an
instance's revenue is set by its records ``p_{r_1} < ... < p_{r_c}``:
``sum_i p_{r_i} (g_{r_i} - g_{r_{i-1}}) + m (1 - g_{r_c})`` against ``OPT = p_{r_c}``. Putting
one more grid rate between two records never raises the revenue
(``(p_j - p_i)(g_j - g_{i-1}) <= 0``), so with ``T >= G`` rounds the worst instance for a top
rate ``p_k`` walks up through every grid rate to ``p_k``; with fewer rounds a dynamic
programme over (records so far, last record) finds the best chain of at most ``T`` records.
The ratio is the largest ``p_k / ALG_k``: exact, with the instance that attains it.

**Every online algorithm.** An online algorithm cannot tell the walk that stops at ``p_k`` from
the one that goes on until it has traded at ``p_k``; if it converts ``x_j`` (in expectation) at
``p_j`` along the walk, it earns ``m + sum_{j<=k} (p_j - m) x_j`` on the walk that stops at
``k`` and then stays at ``m``. The best ratio any algorithm can guarantee on these walks is an
LP in ``x``; its dual is a distribution ``q`` over stopping levels. The reported bound is
``1 / BR(q)``, where ``BR(q)`` is the exact best any algorithm (randomised included) can earn
against ``q`` in expectation of ``ALG / OPT``: a linear function of ``x`` maximised at a vertex.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from advonline.problem import Certificate, LowerBound
from advonline.problems.one_way_trading.model import Setting, walk_levels

#: Slack allowed when checking that a curve never falls.
MONOTONE_TOLERANCE = 1e-9


def curve_ratio(setting: Setting, fractions: np.ndarray) -> Certificate | None:
    """The exact competitive ratio of the conversion curve ``fractions`` ``[G]`` and an
    instance (tokens ``[T]``) that attains it; ``None`` if the curve falls somewhere."""
    g = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0)
    if np.any(np.diff(g) < -MONOTONE_TOLERANCE):
        return None
    g = np.maximum.accumulate(g)
    rates = np.asarray(setting.rates, dtype=np.float64)
    levels, rounds = setting.levels, setting.rounds
    # earned[c][k]: least revenue before leftovers of a chain of c + 1 records ending at k
    earned = rates * g
    chain_end = [earned.copy()]
    parents = []
    gain = rates[None, :] * (g[None, :] - g[:, None])  # [from j, to k]
    later = np.triu(np.ones((levels, levels), dtype=bool), 1)
    for _ in range(min(rounds, levels) - 1):
        extend = np.where(later, chain_end[-1][:, None] + gain, np.inf)
        parents.append(np.argmin(extend, axis=0))
        chain_end.append(np.minimum(chain_end[-1], extend.min(axis=0)))
    least = chain_end[-1]
    revenue = least + setting.low * (1.0 - g)
    ratios = rates / revenue
    stop = int(np.argmax(ratios))
    return Certificate(float(ratios[stop]), True, _worst_tokens(setting, chain_end, parents, stop))


def _worst_tokens(setting: Setting, chain_end, parents, stop: int) -> np.ndarray:
    """The records of the least-revenue chain ending at ``stop``, then ``m`` to the end."""
    records = [stop]
    depth = len(chain_end) - 1
    level = stop
    while depth > 0:
        if chain_end[depth][level] < chain_end[depth - 1][level]:
            level = int(parents[depth - 1][level])
            records.append(level)
        depth -= 1
    records = records[::-1]
    return np.asarray(records + [0] * (setting.rounds - len(records)), dtype=np.int32)


def walk_payoff_rows(setting: Setting) -> tuple[np.ndarray, np.ndarray]:
    """The stopping walks the lower bound uses: their grid levels ``[W]`` (all of them when
    they fit in ``T`` rounds, else evenly spaced ones) and the rates there ``[W]``."""
    walk = np.asarray(walk_levels(setting.levels, setting.rounds))
    return walk, np.asarray(setting.rates, dtype=np.float64)[walk]


def best_response(setting: Setting, rates: np.ndarray, stop_probs: np.ndarray) -> float:
    """The most ``E_q[ALG / OPT]`` any online algorithm earns when the walk through ``rates``
    stops at a level drawn from ``stop_probs``: ``m E_q[1/p] + max(0, max_j (p_j - m)
    E_q[1/p; stop >= j])`` (all of the unit converted at the single best step)."""
    per_stop = stop_probs / rates
    still_going = np.cumsum(per_stop[::-1])[::-1]
    best_step = float(np.max((rates - setting.low) * still_going))
    return setting.low * float(per_stop.sum()) + max(0.0, best_step)


def _walk_lp(setting: Setting):
    """The LP over conversions ``x`` along the walks: maximise ``s = 1 / ratio`` subject to
    ``s p_k - sum_{j<=k} (p_j - m) x_j <= m`` for every stop ``k`` and ``sum x <= 1``."""
    walk, rates = walk_payoff_rows(setting)
    count = len(rates)
    cost = np.zeros(count + 1)
    cost[-1] = -1.0
    upper = np.zeros((count + 1, count + 1))
    upper[:count, :count] = -np.tril(np.ones((count, count))) * (rates - setting.low)[None, :]
    upper[:count, -1] = rates
    upper[count, :count] = 1.0
    rhs = np.concatenate([np.full(count, setting.low), [1.0]])
    result = linprog(cost, A_ub=upper, b_ub=rhs, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"HiGHS could not solve the one-way trading walks: {result.message}")
    return walk, rates, result


def lower_bound(setting: Setting) -> LowerBound:
    """The certified lower bound on every online algorithm's ratio in ``setting``."""
    walk, rates, result = _walk_lp(setting)
    # the dual weight y_k of stop k satisfies sum_k y_k p_k = 1 (the column of s): the
    # distribution over stops is q_k = y_k p_k
    duals = np.maximum(-np.asarray(result.ineqlin.marginals)[: len(rates)], 0.0) * rates
    stop_probs = duals / duals.sum()
    value = best_response(setting, rates, stop_probs)
    return LowerBound(1.0 / value, value, stop_probs, walk)


def optimal_fractions(setting: Setting) -> np.ndarray:
    """The conversion curve ``[G]`` that solves the walks' LP: with ``T >= G`` an optimal
    online algorithm for the setting (its exact ratio equals the lower bound); with fewer
    rounds it is optimal against the evenly spaced walks only."""
    walk, rates, result = _walk_lp(setting)
    conversions = np.zeros(setting.levels)
    conversions[walk] = result.x[: len(rates)]
    return np.minimum(np.cumsum(conversions), 1.0)
