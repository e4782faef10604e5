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
``sup_p p / R(p)`` (:func:`supremum`), exact for an unbounded horizon. A curve linear between
grid rates makes ``R`` a quadratic ``alpha + beta p + gamma p^2`` on each segment, with
``gamma = g' / 2 >= 0``; ``p / R(p)`` rises while ``alpha > gamma p^2`` and falls after, so on
each segment the supremum is at an end or at ``sqrt(alpha / gamma)``: a closed form, no search.

**The same curve over ``T`` rounds.** A walk of at most ``T`` records earns more than the
integral, so a curve can do better than ``sup_p p / R(p)`` over ``T`` rounds (and than
r*(theta), which no curve beats over every horizon). Let ``W_k(p)`` be the least
``sum_i p_i (g(p_i) - g(p_(i-1)))`` over walks of at most ``k`` records ending at ``p``; the
ratio over ``T`` rounds is ``sup_p p / (W_T(p) + m (1 - g(p)))``. :func:`rounds_bound` bounds
``W_k`` from below on fine rates ``x_0 = m < ... < x_N = M`` (grid rates and
:data:`ROUND_POINTS` sub-rates per segment, ``g`` linear between), by induction on ``k``:

- ``W_k(q) >= W_k(x_i) + int_(x_i, q] r dg(r)`` for ``q >= x_i``: in a walk ending at ``q``,
  replace the first record ``r >= x_i`` by ``x_i`` and stop there (a walk of at most ``k``
  records to ``x_i``, earning no more: its records below ``x_i`` are unchanged and
  ``r (g(r) - g(prev)) >= x_i (g(x_i) - g(prev)) + r (g(r) - g(x_i))``); the records from
  ``r`` on earn an upper sum of the integral from ``x_i`` to ``q``;
- so a walk to ``x_j`` whose record before the last lies in ``[x_i, x_(i+1))`` earns at least
  ``L_(k-1)(i) + int_(x_i, x_(i+1)] r dg(r) + x_j (g(x_j) - g(x_(i+1)))`` (the bound falls
  as that record rises in the cell), and
  ``L_k(j) = min(L_(k-1)(j), x_j g(x_j), min_(i < j) of that)`` is at most ``W_k(x_j)``;
- between ``x_j`` and ``x_(j+1)`` the first bullet with ``r dg(r) >= x_j dg(r)`` makes the
  ratio a quotient of two linear functions of the rate, largest at an end of the cell.

The terms ``-x_j g(x_(i+1))`` make the matrix of candidates Monge in ``(i, j)``, so each
round's minima over ``i`` fall at rows that never decrease with ``j`` and are found by divide
and conquer, ``O(N log N)`` a round. What the first bullet gives away (a record moved to the
start of its cell, times the curve's rise since the record before) shrinks with the cells:
the walks behind the bound (real inputs, records on the fine rates) come within 0.2% of it on
tiny settings and within 0.05% on the shipped ones. The certificate of a curve is the
lower of this bound and :func:`supremum`.

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
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog

from advonline import preflight
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


def supremum(setting: Setting, grid: np.ndarray) -> float:
    """``sup_p p / R(p)`` of the non-decreasing curve ``grid`` ``[G]`` in ``[0, 1]``: at every
    grid rate, and at ``sqrt(alpha / gamma)`` on each segment where that lies inside."""
    grid = np.asarray(grid, dtype=np.float64)
    rates, low = np.asarray(setting.rates, dtype=np.float64), setting.low
    a, b = rates[:-1], rates[1:]
    slope = np.diff(grid) / (b - a)
    integral = np.concatenate([[0.0], np.cumsum(slope * (b * b - a * a) / 2.0)])
    revenue = low * grid[0] + integral + low * (1.0 - grid)
    # on segment [a, b]: R(p) = alpha + beta p + gamma p^2, beta = -m slope
    gamma = slope / 2.0
    alpha = revenue[:-1] - slope * a * a / 2.0 + low * slope * a
    turns = (gamma > 0) & (alpha > 0)
    turn = np.sqrt(np.where(turns, alpha / np.where(turns, gamma, 1.0), 1.0))
    inside = turns & (turn > a) & (turn < b)
    at = np.where(inside, turn, a)  # a harmless point where the turn is not inside
    turning = at / (alpha - low * slope * at + gamma * at * at)
    return float(max(np.max(rates / revenue), np.max(np.where(inside, turning, 0.0))))


def curve_ratio(setting: Setting, fractions: np.ndarray) -> Certificate | None:
    """An upper bound on the competitive ratio of the curve ``fractions`` ``[G]`` (linear
    between grid rates) over every input of ``T`` real rates in ``[m, M]``
    (:func:`certified`), ``exact`` False; with the hardest walk up through the tokens
    (:func:`_worst_walk`), an input that comes near it. ``None`` if the curve falls
    somewhere."""
    found = certified(setting, fractions)
    if found is None:
        return None
    grid, ratio, _ = found
    return Certificate(ratio, False, _worst_walk(setting, grid))


def certified(setting: Setting, fractions: np.ndarray):
    """``(grid, ratio, bound)`` of the curve ``fractions`` ``[G]``: the curve held in
    ``[0, 1]`` and never falling (float64), the lower of :func:`supremum` (every horizon) and
    :func:`rounds_bound` (``T`` rounds), and that bound for ``T`` rounds (whose walks
    certificate descent moves); ``None`` if the curve falls somewhere."""
    grid = np.clip(np.asarray(fractions, dtype=np.float64), 0.0, 1.0)
    if np.any(np.diff(grid) < -MONOTONE_TOLERANCE):
        return None
    grid = np.maximum.accumulate(grid)
    bound = rounds_bound(setting, grid)
    return grid, min(supremum(setting, grid), bound.ratio), bound


#: Sub-rates per grid segment on which :func:`rounds_bound` places records, fewer where
#: ``T`` rounds over them would exceed :data:`ROUNDS_WORK` (the bound holds for any number;
#: more make it tighter).
ROUND_POINTS = 1024
ROUNDS_WORK = 2_200_000


class FineRates(NamedTuple):
    """Rates ``[N]`` on a curve's grid: the grid rates and sub-rates between them, each the
    mix ``(1 - weight) r_segment + weight r_(segment + 1)`` of two grid rates, so that a
    curve at them is ``(1 - weight) g[segment] + weight g[segment + 1]``."""

    rates: np.ndarray  # [N]
    segment: np.ndarray  # [N] int
    weight: np.ndarray  # [N]

    @staticmethod
    def of(setting: Setting) -> FineRates:
        """The setting's fine rates: :data:`ROUND_POINTS` a segment, fewer within
        :data:`ROUNDS_WORK`, at least one (the grid rates)."""
        grid = np.asarray(setting.rates, dtype=np.float64)
        segments = len(grid) - 1
        points = max(1, min(ROUND_POINTS, ROUNDS_WORK // (setting.rounds * segments)))
        weight = np.append(np.tile(np.arange(points) / points, segments), 1.0)
        segment = np.append(np.repeat(np.arange(segments), points), segments - 1)
        rates = (1.0 - weight) * grid[segment] + weight * grid[segment + 1]
        return FineRates(rates, segment, weight)

    def curve(self, grid: np.ndarray) -> np.ndarray:
        """The curve ``grid`` ``[G]`` at the fine rates ``[N]``."""
        return (1.0 - self.weight) * grid[self.segment] + self.weight * grid[self.segment + 1]


class RoundsBound(NamedTuple):
    """:func:`rounds_bound`'s certificate and what it is made of."""

    ratio: float
    fine: FineRates
    fractions: np.ndarray  # [N] the curve at the fine rates
    lowest: np.ndarray  # [N] L_T: the least a walk of T records to each fine rate earns
    earlier: np.ndarray  # [T - 1, N] the record before the last, in round k's minimum (-1: none)
    point_ratios: np.ndarray  # [N] x_j / (L_T(j) + m (1 - g(x_j)))

    def walk(self, end: int) -> list[int]:
        """The fine rates (indices, rising) of the walk behind ``lowest[end]``."""
        records, rounds = [end], len(self.earlier)
        while rounds > 0:
            before = int(self.earlier[rounds - 1, records[-1]])
            if before >= 0:
                records.append(before)
            rounds -= 1
        return records[::-1]

    def revenue_coefficients(self, low: float, ends) -> tuple[np.ndarray, np.ndarray]:
        """For the walks to the fine rates ``ends`` ``[K]``: ``a [K, G]`` such that the bound's
        revenue of each, ``m (1 - g(end))`` included, is ``a @ g + m`` for every grid curve
        ``g`` (linear in it), and their best rates ``[K]``: the pieces of the certificate that
        certificate descent moves. All walks at once, round by round backwards."""
        rates, fine = self.fine.rates, self.fine
        halfway = np.append((rates[:-1] + rates[1:]) / 2.0, rates[-1])
        ends = np.asarray(ends, int)
        rows = np.arange(len(ends))
        result = np.zeros((len(ends), int(fine.segment.max()) + 2))

        def add(at: np.ndarray, amount: np.ndarray) -> None:  # amount x g(rates[at])
            np.add.at(result, (rows, fine.segment[at]), amount * (1.0 - fine.weight[at]))
            np.add.at(result, (rows, fine.segment[at] + 1), amount * fine.weight[at])

        add(ends, np.full(len(ends), -low))
        current = ends.copy()
        for before in self.earlier[::-1]:
            previous = before[current]
            step = previous >= 0
            at = np.where(step, previous, 0)
            add(np.where(step, at + 1, 0), np.where(step, halfway[at] - rates[current], 0.0))
            add(at, np.where(step, -halfway[at], 0.0))
            add(current, np.where(step, rates[current], 0.0))
            current = np.where(step, previous, current)
        add(current, rates[current])
        return result, rates[ends]


def rounds_bound(setting: Setting, grid: np.ndarray) -> RoundsBound:
    """An upper bound on the ratio of the non-decreasing curve ``grid`` ``[G]`` over every
    input of at most ``T`` real rates in ``[m, M]`` (module docstring): the induction on
    fine rates, ``T - 1`` rounds of :func:`earlier_minima` (it stops early where a round
    changes nothing)."""
    fine = FineRates.of(setting)
    rates, low = fine.rates, setting.low
    fractions = fine.curve(np.asarray(grid, dtype=np.float64))
    following = np.append(fractions[1:], fractions[-1])
    rise = (following - fractions) * (rates + np.append(rates[1:], rates[-1])) / 2.0
    lowest = rates * fractions
    earlier = np.full((max(setting.rounds - 1, 0), len(rates)), -1, dtype=np.int32)
    for k in range(setting.rounds - 1):
        minima, rows = earlier_minima(lowest + rise, following, rates)
        candidate = minima + rates * fractions
        better = candidate < lowest
        if not better.any():
            earlier = earlier[:k]
            break
        earlier[k] = np.where(better, rows, -1)
        lowest = np.where(better, candidate, lowest)
    point_ratios = rates / (lowest + low * (1.0 - fractions))
    # between x_j and x_(j+1): the cell's right end, by the linear lower bound from x_j
    right = rates[1:] / (
        lowest[:-1] - rates[:-1] * fractions[:-1] + low + (rates[:-1] - low) * fractions[1:]
    )
    ratio = float(max(point_ratios.max(), right.max(initial=0.0)))
    return RoundsBound(ratio, fine, fractions, lowest, earlier, point_ratios)


def earlier_minima(offsets: np.ndarray, slopes: np.ndarray, rates: np.ndarray):
    """``min_(i < j) offsets[i] - rates[j] slopes[i]`` for every ``j >= 1`` (``inf`` at
    ``j = 0``) and the least ``i`` that attains it, for ``slopes`` non-decreasing and
    ``rates`` rising: a Monge matrix, whose rows of the minima never decrease with ``j``, so
    divide and conquer, one level of every column range at a time (NumPy, ``O(N log N)``)."""
    count = len(rates)
    minima = np.full(count, np.inf)
    rows_of = np.full(count, -1, dtype=np.int64)
    if count < 2:
        return minima, rows_of
    # column ranges [first, last] whose minima lie in rows [low_row, high_row]
    first, last = np.array([1]), np.array([count - 1])
    low_row, high_row = np.array([0]), np.array([count - 2])
    while first.size:
        middle = (first + last) // 2
        sizes = np.minimum(high_row, middle - 1) - low_row + 1
        starts = np.cumsum(sizes) - sizes
        which = np.repeat(np.arange(middle.size), sizes)
        rows = low_row[which] + np.arange(sizes.sum()) - starts[which]
        values = offsets[rows] - rates[middle[which]] * slopes[rows]
        least = np.minimum.reduceat(values, starts)
        hits = np.flatnonzero(values == least[which])
        firsts = hits[np.r_[True, which[hits][1:] != which[hits][:-1]]]
        found = rows[firsts]
        minima[middle], rows_of[middle] = least, found
        left, right = first <= middle - 1, middle + 1 <= last
        first, last, low_row, high_row = (
            np.concatenate([first[left], middle[right] + 1]),
            np.concatenate([middle[left] - 1, last[right]]),
            np.concatenate([low_row[left], found[right]]),
            np.concatenate([found[left], high_row[right]]),
        )
    return minima, rows_of


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
    stops, scored exactly by :func:`best_response`. Each stop's row is divided by its rate
    ``p_k``, so the LP holds rate ratios only: the same for every scale of the rates, and
    well conditioned however far apart ``m`` and ``M`` are."""
    rates = walk_rates(setting)
    count = len(rates)
    cost = np.zeros(count + 1)
    cost[-1] = -1.0
    upper = np.zeros((count + 1, count + 1))
    upper[:count, :count] = -np.tril((rates - setting.low)[None, :] / rates[:, None])
    upper[:count, -1] = 1.0
    upper[count, :count] = 1.0
    rhs = np.concatenate([setting.low / rates, [1.0]])
    result = linprog(cost, A_ub=upper, b_ub=rhs, bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"HiGHS could not solve the one-way trading walks: {result.message}")
    # the dual weight q_k of stop k's row satisfies sum_k q_k = 1 (the column of s): the
    # distribution over stops
    duals = np.maximum(-np.asarray(result.ineqlin.marginals)[:count], 0.0)
    stop_probs = duals / duals.sum()
    value = best_response(setting, rates, stop_probs)
    return LowerBound(1.0 / value, value, stop_probs, rates)


def optimal_curve(setting: Setting) -> tuple[np.ndarray, float]:
    """The best curve ``[G]`` on the setting's grid, and a ratio no such curve certifies
    below. An LP in the grid fractions and ``s``: maximise ``s`` subject to ``s p <= R(p)``
    (linear in the fractions) at the grid rates and :data:`LP_SAMPLES` rates per segment,
    the fractions non-decreasing in ``[0, 1]``. Its ``1 / s`` is below every curve's
    certificate (fewer constraints); the curve's own certificate (:func:`curve_ratio`) lies
    above it by what the samples miss. Each sample's row is divided by its rate, so the LP
    holds rate ratios only (as :func:`lower_bound`'s). Its matrix is dense, so a grid whose
    matrix cannot fit in memory is refused first (:class:`~advonline.preflight.PreflightError`,
    one line naming the levels)."""
    rates, low = np.asarray(setting.rates, dtype=np.float64), setting.low
    levels = len(rates)
    rows = (levels - 1) * LP_SAMPLES + 1
    what = f"the best curve's dense LP [(G - 1) x {LP_SAMPLES} + 1 rates, G + 1]"
    size = preflight.FLOAT64 * (rows + levels) * (levels + 1)
    preflight.check([preflight.Need(what, size, "the setting's levels")])
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
    ones = np.ones((len(samples), 1))
    upper = np.vstack([np.hstack([-coefficients / samples[:, None], ones]), rising])
    rhs = np.concatenate([low / samples, np.zeros(levels - 1)])
    cost = np.zeros(levels + 1)
    cost[-1] = -1.0
    bounds = [(0.0, 1.0)] * levels + [(0.0, None)]
    result = linprog(cost, A_ub=upper, b_ub=rhs, bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"HiGHS could not solve the best curve's LP: {result.message}")
    return np.maximum.accumulate(np.clip(result.x[:levels], 0.0, 1.0)), 1.0 / result.x[-1]
