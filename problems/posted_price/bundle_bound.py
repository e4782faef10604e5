"""A lower bound on every online algorithm's competitive ratio with several resources
(divisible buyers): Yao's principle on a stopping family of bundles and single-resource
buyers, as :mod:`posted_price.lower_bound` does for one resource.

The master sequence's buyer t asks for one of the setting's demand vectors: ``g_t`` grid units
on every resource, or on one alone. An online algorithm chooses how many units ``y_t`` in
``[0, g_t]`` to sell it on each resource it asks for (in expectation, if it randomises), before
it knows where the sequence stops, so its best guarantee is the LP

    z* = max_y min_j ALG_j(y) / OPT_j,   sum over buyers asking for k of y_t <= G  (every k)

with ``ALG_j(y) = sum_{t <= j} v_t y_t / g_t``. The LP's duals on the prefix rows are the
adversary's stopping distribution ``p``; against it the most any algorithm earns is
``max_y sum_t w_t y_t`` with ``w_t = v_t / g_t sum_{j >= t} p_j / OPT_j``, and ``1 / that`` is
the certified bound (whatever the LP solver's accuracy).

Both that maximum and the prefix optima ``OPT_j`` are over the same polytope, whose matrix is
an interval matrix (each buyer's support is one resource or all of them: consecutive ones),
hence totally unimodular: its vertices are whole, so an exact dynamic programme over the
units sold of each resource, ``(G + 1)^K`` states, computes both in float64
(docs/method.md §5, "several resources"). NumPy and SciPy's HiGHS, outside ``jit``.
"""

from __future__ import annotations

import jax
import numpy as np
from scipy.optimize import linprog

from advonline.problems.posted_price.buyer_types import BuyerTypes, demand_grid_units
from advonline.problems.posted_price.lower_bound import LowerBound, search_lower_bound
from advonline.problems.posted_price.model import Setting, SettingError, one_resource


def search_bundle_bound(
    setting: Setting, key: jax.Array, steps: int = 400, chains: int = 1, candidates: int = 1
) -> list[LowerBound]:
    """Hill climbing on the master sequence of bundles and single-resource buyers, with the
    one-resource search's kernel and mutations (:func:`~posted_price.lower_bound.
    search_lower_bound`): each chain's certified family."""
    return search_lower_bound(
        setting, key, steps, chains=chains, candidates=candidates, family=_typed_bound
    )


def widened(setting: Setting) -> Setting | None:
    """One resource of ``setting`` alone, its densities widened to ``[L, K U]``: the
    one-resource game that buyers of resource 0 alone and bundles of every resource play in
    ``setting`` (:func:`embedded`); None where it is not that game (unequal capacities, or
    ``K L > U``, which leaves densities in ``(U, K L)`` that neither kind of buyer has)."""
    if len(set(setting.capacities)) > 1 or setting.resources * setting.low > setting.high:
        return None
    return one_resource(setting, widened=True)


def embedded(setting: Setting, units: np.ndarray, densities: np.ndarray):
    """A master sequence of :func:`widened`'s game, ``units [T]`` and ``densities [T]`` in
    ``[L, K U]``, as one of ``setting``: a density up to U is a buyer of resource 0 alone, and
    a higher one ``d`` a bundle of the same units on every resource at density ``d / K``. A
    bundle's value is its density times its size on every resource, so each unit of resource
    0 is worth ``d`` either way; the other resources, equal in capacity, are sold only with
    resource 0 in bundles and never bind before it. Every online algorithm and OPT thus earn
    the same on every prefix in both games, and the two bounds are equal. Returns ``units
    [T, K]`` and the densities."""
    units = np.asarray(units, dtype=np.int64)
    densities = np.asarray(densities, dtype=np.float64)
    bundle = densities > setting.high
    spread = np.zeros((len(units), setting.resources), np.int64)
    spread[:, 0] = units
    spread[:, 1:] = np.where(bundle, units, 0)[:, None]
    return spread, np.where(bundle, densities / setting.resources, densities)


def search_widened_bound(
    setting: Setting, key: jax.Array, steps: int = 400, chains: int = 1, candidates: int = 1
) -> list[LowerBound]:
    """The one-resource search (:func:`~posted_price.lower_bound.search_lower_bound`) on
    :func:`widened`'s game, each chain's family then certified in ``setting`` itself
    (:func:`embedded`, :func:`bundle_lower_bound`: an exact best response over the product
    grid); no family where :func:`widened` is None."""
    wide = widened(setting)
    if wide is None:
        return []
    found = search_lower_bound(wide, key, steps, chains=chains, candidates=candidates)
    families = []
    for bound in found:
        units = np.round(np.asarray(bound.demands) * wide.grid_size).astype(np.int64)
        families.append(bundle_lower_bound(setting, *embedded(setting, units, bound.densities)))
    return families


def _typed_bound(setting: Setting, vocabulary: BuyerTypes, types: np.ndarray) -> LowerBound:
    """The bound of a master sequence of buyer types ``[T]`` (nobody skipped; a sequence of
    nobody bounds nothing: ratio 1)."""
    types = np.asarray(types)
    buyers = types != vocabulary.nobody
    if not buyers.any():
        empty = np.zeros(0)
        return LowerBound(1.0, 1.0, empty, empty, empty)
    units = demand_grid_units(setting)  # [J, K], the vocabulary's demand vectors in order
    demand = types[buyers] % len(units)
    densities = np.asarray(vocabulary.densities)[types[buyers] // len(units)]
    return bundle_lower_bound(setting, units[demand], densities)


def bundle_lower_bound(setting: Setting, units: np.ndarray, densities: np.ndarray) -> LowerBound:
    """The certified lower bound of the master sequence: ``units`` ``[T, K]`` whole grid units
    (one level on every resource or on one alone), value densities ``[T]`` in [L, U]."""
    if not setting.divisible:
        raise SettingError("the bundle lower bound is for divisible buyers")
    units = np.asarray(units, dtype=np.int64)
    densities = np.asarray(densities, dtype=np.float64)
    unit_size = np.asarray(setting.capacities) / setting.grid_size  # capacity of one unit
    levels = units.max(-1)
    if np.any(levels < 1) or np.any((units > 0) & (units != levels[:, None])):
        raise SettingError("every buyer asks for one level, on every resource or on one alone")
    per_unit = densities * (units @ unit_size) / levels  # value of one unit y_t
    optima = best_running(setting, units, per_unit)
    z, duals = _maximin(setting, units, per_unit, optima)
    stopping = np.clip(duals, 0.0, None)
    stopping = stopping / stopping.sum()
    certified = 1.0 / _best_response(setting, units, per_unit, optima, stopping)
    return LowerBound(certified, 1.0 / z, units * unit_size, densities, stopping)


def best_running(setting: Setting, units: np.ndarray, worth: np.ndarray) -> np.ndarray:
    """``[T]``: for every prefix ``1 .. j``, the most ``sum_t worth_t y_t`` over whole
    ``0 <= y_t <= g_t`` within every resource's G units (exact: module docstring). For
    ``worth`` the value of a unit, the prefix optima."""
    grid = setting.grid_size
    shape = (grid + 1,) * setting.resources
    best = np.full(shape, -np.inf)
    best[(0,) * setting.resources] = 0.0
    running = np.empty(len(units))
    for t, (asked, gain) in enumerate(zip(units, worth, strict=True)):
        support = np.flatnonzero(asked)
        after = best.copy()
        for y in range(1, asked.max() + 1):
            every = range(setting.resources)
            source = tuple(slice(0, grid + 1 - y) if k in support else slice(None) for k in every)
            target = tuple(slice(y, None) if k in support else slice(None) for k in every)
            after[target] = np.maximum(after[target], best[source] + gain * y)
        best = after
        running[t] = best.max()
    return running


def _best_response(setting: Setting, units, per_unit, optima, stopping) -> float:
    """The most any online algorithm earns against the stopping distribution."""
    per_prefix = np.where(optima > 0, stopping / np.where(optima > 0, optima, 1.0), 0.0)
    worth = per_unit * np.cumsum(per_prefix[::-1])[::-1]  # buyer t counts in every j >= t
    return float(best_running(setting, units, worth)[-1])


def _maximin(setting: Setting, units, per_unit, optima) -> tuple[float, np.ndarray]:
    """``z*`` and the duals of the prefix rows (the adversary's stopping distribution)."""
    rounds = len(units)
    prefix = np.tril(np.ones((rounds, rounds)))  # row j sums buyers 0 .. j
    gains = prefix * per_unit[None, :] / optima[:, None]
    rows = np.hstack([-gains, np.ones((rounds, 1))])
    capacity = np.hstack([(units > 0).T.astype(float), np.zeros((setting.resources, 1))])
    result = linprog(
        c=np.append(np.zeros(rounds), -1.0),
        A_ub=np.vstack([rows, capacity]),
        b_ub=np.append(np.zeros(rounds), np.full(setting.resources, setting.grid_size)),
        bounds=[(0.0, float(g)) for g in units.max(-1)] + [(0.0, None)],
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the bundle stopping-family LP failed: {result.message}")
    return -float(result.fun), -np.asarray(result.ineqlin.marginals)[:rounds]
