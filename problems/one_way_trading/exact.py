"""Certified competitive ratios of conversion curves, and the certified lower bound on every
online algorithm, for one-way trading with real rates (NumPy and SciPy's HiGHS, float64,
outside ``jit``; a certificate's named input is scored by the one simulator).

**A curve's competitive ratio, for any rates in [m, M] and any horizon.** Against a curve
``g`` (non-decreasing in the rate) only a new highest rate makes the trader convert: it
converts up to ``g(p)`` and never beyond. So an instance's revenue is set by its records
``p_1 < ... < p_c``: ``sum_i p_i (g(p_i) - g(p_(i-1))) + m (1 - g(p_c))`` against
``OPT = p_c``. Each term ``p_i (g(p_i) - g(p_(i-1)))`` is at least the integral of ``q dg(q)``
over ``(p_(i-1), p_i]`` (the first record's at least ``m g(m)`` plus the integral from
``m``), so every instance whose best rate is ``p`` earns at least
``R(p) = m g(m) + int_(m, p] q dg(q) + m (1 - g(p))``, and rising walks that get finer
approach it. The curve's ratio over every real instance of every horizon is therefore
``sup_p p / R(p)``, exact for an unbounded horizon and an upper bound for ``T`` rounds (a
walk of ``T`` records earns a little more). A curve linear between grid rates makes ``R`` a
quadratic ``alpha + beta p + gamma p^2`` on each segment, with ``gamma = g' / 2 >= 0``;
``p / R(p)`` rises while ``alpha > gamma p^2`` and falls after, so on each segment the
supremum is at an end or at ``sqrt(alpha / gamma)``: a closed form, no search.

**Every online algorithm.** An online algorithm cannot tell the walk that stops at ``p_k`` from
the one that goes on until it has traded at ``p_k``; if it converts ``x_j`` (in expectation) at
``p_j`` along the walk, it earns ``m + sum_{j<=k} (p_j - m) x_j`` on the walk that stops at
``k`` and then stays at ``m``. The best ratio any algorithm can guarantee on these walks is an
LP in ``x``; its dual is a distribution ``q`` over stopping levels. The reported bound is
``1 / BR(q)``, where ``BR(q)`` is the exact best any algorithm (randomised included) can earn
against ``q`` in expectation of ``ALG / OPT``: a linear function of ``x`` maximised at a vertex.
The walks climb a geometric grid of their own, one rate a round (at most
:data:`WALK_LEVELS`), whatever grid the curves use: real rates are the adversary's to choose,
so more rounds give a walk more steps and a higher bound.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog

from advonline.problem import Certificate, LowerBound
from advonline.problems.one_way_trading.model import (
    CurvePolicy,
    RateEncoding,
    Setting,
    offline_optimum,
    payoffs,
    rise_and_drop,
)

#: Slack allowed when checking that a curve never falls.
MONOTONE_TOLERANCE = 1e-9

#: The most levels a lower bound's walks climb (the LP grows with their square).
WALK_LEVELS = 1025

#: Rates per grid segment at which the best curve's LP (:func:`optimal_curve`) asks for the
#: ratio; the certificate then gives the curve's exact ratio between them.
LP_SAMPLES = 8


def supremum(xp, setting: Setting, grid):
    """``sup_p p / R(p)`` of the non-decreasing curve ``grid`` ``[G]`` in ``[0, 1]``, written
    once for NumPy and for JAX (``xp``: either module; with ``jax.numpy`` it is jit-able and
    differentiable in ``grid``). At every grid rate, and at ``sqrt(alpha / gamma)`` on each
    segment where that lies inside."""
    rates, low = xp.asarray(setting.rates, dtype=grid.dtype), setting.low
    a, b = rates[:-1], rates[1:]
    slope = xp.diff(grid) / (b - a)
    rises = xp.cumsum(slope * (b * b - a * a) / 2.0)
    integral = xp.concatenate([xp.zeros(1, dtype=grid.dtype), rises])
    revenue = low * grid[0] + integral + low * (1.0 - grid)
    # on segment [a, b]: R(p) = alpha + beta p + gamma p^2, beta = -m slope
    gamma = slope / 2.0
    alpha = revenue[:-1] - slope * a * a / 2.0 + low * slope * a
    turns = (gamma > 0) & (alpha > 0)
    # 1 where there is no turn, so that neither value nor gradient is ever inf or NaN
    turn = xp.sqrt(xp.where(turns, alpha / xp.where(turns, gamma, 1.0), 1.0))
    inside = turns & (turn > a) & (turn < b)
    at = xp.where(inside, turn, a)  # a harmless point where the turn is not inside
    turning = at / (alpha - low * slope * at + gamma * at * at)
    return xp.maximum(xp.max(rates / revenue), xp.max(xp.where(inside, turning, 0.0)))


def curve_ratio(setting: Setting, fractions: np.ndarray) -> Certificate | None:
    """The competitive ratio of the curve ``fractions`` ``[G]`` (linear between grid rates)
    over every input of real rates in ``[m, M]`` (:func:`supremum`, exact for an unbounded
    horizon: ``exact`` is False) and the hardest walk up through the tokens
    (:func:`_worst_walk`), an input that comes near it; ``None`` if the curve falls
    somewhere."""
    grid = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0)
    if np.any(np.diff(grid) < -MONOTONE_TOLERANCE):
        return None
    grid = np.maximum.accumulate(grid)
    ratio = float(supremum(np, setting, grid))
    return Certificate(ratio, False, _worst_walk(setting, grid))


def _worst_walk(setting: Setting, grid: np.ndarray) -> np.ndarray:
    """Tokens ``[T]``: of the walks up through the tokens to each token, then ``m``
    (:func:`~problems.one_way_trading.model.rise_and_drop`), the one with the highest
    ratio against the curve ``grid`` ``[G]``, scored by the one simulator in float64."""
    walks = rise_and_drop(setting)
    with jax.enable_x64(True):
        earned = np.asarray(_walk_payoffs(setting, walks, jnp.asarray(grid)))
    return np.asarray(walks[int(np.argmin(earned))], dtype=np.int32)


@functools.partial(jax.jit, static_argnums=0)
def _walk_payoffs(setting: Setting, walks: jax.Array, grid: jax.Array) -> jax.Array:
    """``ALG / OPT`` ``[W]`` of the curve ``grid`` on the token inputs ``walks`` ``[W, T]``."""
    rates = RateEncoding(setting).decode(walks)
    curve = CurvePolicy(fractions=grid, rates=setting.rates)
    return payoffs(setting, curve, rates, offline_optimum(setting, rates))


def walk_rates(setting: Setting) -> np.ndarray:
    """The rates ``[W]`` the lower bound's walks climb: ``min(T, WALK_LEVELS)`` geometric in
    ``[m, M]``, both ends included (one a round)."""
    count = min(setting.rounds, WALK_LEVELS)
    if count == 1:
        return np.asarray([setting.high])
    rates = setting.low * setting.theta ** (np.arange(count) / (count - 1))
    rates[-1] = setting.high
    return rates


def best_response(setting: Setting, rates: np.ndarray, stop_probs: np.ndarray) -> float:
    """The most ``E_q[ALG / OPT]`` any online algorithm earns when the walk through ``rates``
    stops at a level drawn from ``stop_probs``: ``m E_q[1/p] + max(0, max_j (p_j - m)
    E_q[1/p; stop >= j])`` (all of the unit converted at the single best step)."""
    per_stop = stop_probs / rates
    still_going = np.cumsum(per_stop[::-1])[::-1]
    best_step = float(np.max((rates - setting.low) * still_going))
    return setting.low * float(per_stop.sum()) + max(0.0, best_step)


def lower_bound(setting: Setting) -> LowerBound:
    """The certified lower bound on every online algorithm's ratio in ``setting``: the LP over
    conversions ``x`` along the walks (maximise ``s = 1 / ratio`` subject to ``s p_k - sum_{j<=k}
    (p_j - m) x_j <= m`` for every stop ``k`` and ``sum x <= 1``), its dual a distribution over
    stops, scored exactly by :func:`best_response`."""
    rates = walk_rates(setting)
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
    # the dual weight y_k of stop k satisfies sum_k y_k p_k = 1 (the column of s): the
    # distribution over stops is q_k = y_k p_k
    duals = np.maximum(-np.asarray(result.ineqlin.marginals)[:count], 0.0) * rates
    stop_probs = duals / duals.sum()
    value = best_response(setting, rates, stop_probs)
    return LowerBound(1.0 / value, value, stop_probs, rates)


def optimal_curve(setting: Setting) -> tuple[np.ndarray, float]:
    """The best curve ``[G]`` on the setting's grid, and a ratio no such curve certifies
    below. An LP in the grid fractions and ``s``: maximise ``s`` subject to ``s p <= R(p)``
    (linear in the fractions) at the grid rates and :data:`LP_SAMPLES` rates per segment,
    the fractions non-decreasing in ``[0, 1]``. Its ``1 / s`` is below every curve's
    certificate (fewer constraints); the curve's own certificate (:func:`curve_ratio`) lies
    above it by what the samples miss."""
    rates, low = np.asarray(setting.rates, dtype=np.float64), setting.low
    levels = len(rates)
    a, b = rates[:-1], rates[1:]
    steps = np.arange(LP_SAMPLES) / LP_SAMPLES
    samples = np.append((a[:, None] + (b - a)[:, None] * steps[None, :]).ravel(), rates[-1])
    # R(p) = m g_0 + sum_j w_j(p) (g_(j+1) - g_j) + m (1 - g(p)),
    # w_j(p) = (min(p, b_j)^2 - a_j^2) / (2 (b_j - a_j)) for p > a_j
    upto = np.minimum(samples[:, None], b[None, :])
    weights = np.where(samples[:, None] > a[None, :], (upto**2 - a**2) / (2.0 * (b - a)), 0.0)
    coefficients = np.zeros((len(samples), levels))
    coefficients[:, 0] += low
    coefficients[:, :-1] -= weights
    coefficients[:, 1:] += weights
    for column in range(levels):  # - m g(p): the curve at p, linear between grid rates
        unit = np.zeros(levels)
        unit[column] = 1.0
        coefficients[:, column] -= low * np.interp(samples, rates, unit)
    rising = np.zeros((levels - 1, levels + 1))
    rising[np.arange(levels - 1), np.arange(levels - 1)] = 1.0
    rising[np.arange(levels - 1), np.arange(1, levels)] = -1.0
    upper = np.vstack([np.hstack([-coefficients, samples[:, None]]), rising])
    rhs = np.concatenate([np.full(len(samples), low), np.zeros(levels - 1)])
    cost = np.zeros(levels + 1)
    cost[-1] = -1.0
    bounds = [(0.0, 1.0)] * levels + [(0.0, None)]
    result = linprog(cost, A_ub=upper, b_ub=rhs, bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"HiGHS could not solve the best curve's LP: {result.message}")
    return np.maximum.accumulate(np.clip(result.x[:levels], 0.0, 1.0)), 1.0 / result.x[-1]
