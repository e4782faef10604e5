"""Exact offline optima of small one-resource buyer lists on the host, in float64: the
optimum the lower bounds divide by (``lower_bound.py`` for stopping families,
``tree_bound.py`` for branching ones). Demands are whole grid units; a divisible buyer may be
served in part (a fractional knapsack), an indivisible one wholly or not at all (a 0/1
knapsack by dynamic programming over the capacity). NumPy, outside ``jit``."""

from __future__ import annotations

import numpy as np

from advonline.problems.posted_price.model import Setting, SettingError


def capacity_units(setting: Setting) -> int:
    """The one resource's capacity in grid units, ``G`` (a grid unit is ``capacity / G``,
    as every demand is a fraction of its resource's capacity; SettingError for several
    resources)."""
    if setting.resources != 1:
        raise SettingError("the lower bounds are for one resource")
    return setting.grid_size


def add_item(best: np.ndarray, value: float, weight: int) -> None:
    """One 0/1 knapsack step in place: ``best[c]``, the most value within ``c`` units, now
    with the item of ``value`` and ``weight`` units available."""
    if weight < len(best):
        best[weight:] = np.maximum(best[weight:], best[: len(best) - weight] + value)


def fractional_knapsack(
    values: np.ndarray, units: np.ndarray, capacity: int, order: np.ndarray | None = None
) -> float:
    """The most value of buyers (``values``, demands of ``units``) served in part or whole
    within ``capacity`` units: the densest first. ``order``: the buyers to serve, densest
    first (default: every buyer, by a stable sort)."""
    if order is None:
        order = densest_first(values, units)
    taken_before = np.cumsum(units[order]) - units[order]
    share = np.clip((capacity - taken_before) / units[order], 0.0, 1.0)
    return float(np.sum(values[order] * share))


def densest_first(values: np.ndarray, units: np.ndarray) -> np.ndarray:
    """The buyers by value density, densest first, ties in their order (a stable sort: on a
    subset of the buyers it is this order restricted to them)."""
    return np.argsort(-(values / units), kind="stable")


def knapsack(values: np.ndarray, units: np.ndarray, capacity: int) -> float:
    """The most value of buyers served wholly or not at all within ``capacity`` units."""
    best = np.zeros(capacity + 1)
    for value, weight in zip(values, units, strict=True):
        if value > 0:
            add_item(best, value, weight)
    return float(best[-1])
