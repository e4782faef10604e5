"""Exact competitive ratios of conversion curves, and the certified lower bound on every online
algorithm, for one-way trading on a rate grid (NumPy and SciPy's HiGHS, float64, outside
``jit``).

**A curve's competitive ratio, for any rates in [m, M].** Against a curve ``g``
(non-decreasing in the rate) only a new highest rate makes the trader convert: it converts up
to ``g(p)`` and never beyond. So an instance's revenue is set by its records
``p_{r_1} < ... < p_{r_c}``: ``sum_i p_{r_i} (g_{r_i} - g_{r_{i-1}}) + m (1 - g_{r_c})``
against ``OPT = p_{r_c}``. The curve holds its value between grid rates, so the adversary
posts every record but the last at a grid rate (the same conversion at the least rate) and
the last as close as it likes below the next grid rate (the same conversion, the highest
OPT). The rates that matter are therefore the tokens of :attr:`~.model.Setting.token_rates`,
a just-below token taken at the grid rate above it (its limit). Putting one more of them
between two records never raises the revenue (``(p_j - p_i)(g_j - g_{i-1}) <= 0``), so a
dynamic programme over (records so far, last record) finds the least revenue of a chain of at
most ``T`` records ending at each token, and the ratio is the largest
``limit rate / (least revenue + m (1 - g))``: the curve's competitive ratio over every real
instance, a supremum that inputs ending just below a grid rate approach (the certificate
names the token input that comes within ``JUST_BELOW`` of it) but need not attain.

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
    """The competitive ratio of the conversion curve ``fractions`` ``[G]`` over every input of
    real rates in ``[m, M]`` (a supremum: ``exact`` is False) and the token input ``[T]`` that
    comes closest to it; ``None`` if the curve falls somewhere."""
    grid = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0)
    if np.any(np.diff(grid) < -MONOTONE_TOLERANCE):
        return None
    grid = np.maximum.accumulate(grid)
    # per token: the grid rate at or above it (a just-below token's limit) and the fraction
    # of the grid rate below it
    tokens = np.arange(2 * setting.levels - 1)
    rates = np.asarray(setting.rates, dtype=np.float64)[(tokens + 1) // 2]
    g = grid[tokens // 2]
    levels, rounds = len(rates), setting.rounds
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
    return Certificate(float(ratios[stop]), False, _worst_tokens(setting, chain_end, parents, stop))


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
    they fit in ``T`` rounds, else evenly spaced ones) and the rates there ``[W]``. Grid
    inputs are real-rate inputs, so the bound holds for real rates too."""
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


def _walk_lp(setting: Setting, stepped: bool = False):
    """The LP over conversions ``x`` along the walks: maximise ``s = 1 / ratio`` subject to
    ``s q_k - sum_{j<=k} (p_j - m) x_j <= m`` for every stop ``k`` and ``sum x <= 1``, where
    ``q_k = p_k``; with ``stepped``, a curve that holds its value up to the next walk rate,
    ``q_k`` is that next rate (the adversary stops just below it; ``M`` at the top)."""
    walk, rates = walk_payoff_rows(setting)
    count = len(rates)
    tops = np.append(rates[1:], setting.high) if stepped else rates
    cost = np.zeros(count + 1)
    cost[-1] = -1.0
    upper = np.zeros((count + 1, count + 1))
    upper[:count, :count] = -np.tril(np.ones((count, count))) * (rates - setting.low)[None, :]
    upper[:count, -1] = tops
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
    """The conversion curve ``[G]`` that solves the stepped walks' LP: with ``T >= G`` the best
    curve on the grid for real rates (its ratio, :func:`best_curve_ratio`, is
    :func:`curve_ratio`'s); with fewer rounds it is best against the evenly spaced walks
    only."""
    walk, rates, result = _walk_lp(setting, stepped=True)
    conversions = np.zeros(setting.levels)
    conversions[walk] = result.x[: len(rates)]
    return np.minimum(np.cumsum(conversions), 1.0)


def best_curve_ratio(setting: Setting) -> float:
    """The least ratio for real rates of any curve on the setting's grid that holds its value
    between grid rates (the stepped walks' LP; exact with ``T >= G``): what a learned curve on
    this grid can reach at best, above the lower bound on every online algorithm by the
    grid's coarseness."""
    return 1.0 / float(_walk_lp(setting, stepped=True)[2].x[-1])
