"""A lower bound on every online algorithm's CR from a tree of buyer sequences: Yao's principle
with an adversary that branches (one resource).

A stopping family (:mod:`lower_bound`) is one master sequence cut where the adversary likes.
A tree family lets the sequence branch: nodes are buyers, each after its parent, and the
adversary sends the path from the root to a node ``j`` of its choosing. An online algorithm
sees the path so far, so what it sells to buyer ``n`` may depend on which branch it is in (the
node) but not on what follows. Its best guarantee is the linear programme

    z* = max_y min_j ALG_j(y) / OPT_j,   0 <= y_n <= d_n,   sum_{m on the path to n} y_m <= C

over the units ``y_n`` it sells buyer ``n`` (in expectation, for a randomised algorithm), with
``OPT_j`` the exact optimum of the path to ``j``. A path is a stopping family; a tree also
holds inputs that agree for a while and then part, and the algorithm must commit before it
knows which.

The figure reported is a certificate, as for stopping families: the LP's duals are the
adversary's distribution ``p`` over end nodes, and the most any algorithm earns against
``p``, ``sum_j p_j ALG_j / OPT_j``, is an exact dynamic programme over the tree and the units
left (``f(n, c) = max_y w_n y + sum over children f(child, c - y)``) in float64. Whole units
suffice for divisible buyers: the path constraints of a tree form a laminar system, whose
polytope has whole-unit vertices. For indivisible buyers ``y_n`` is 0 or ``d_n`` in the
programme, which is then the exact best response of every deterministic algorithm, and so
bounds the randomised ones too (Yao).

For indivisible buyers the LP over expected units sold would be a relaxation (a randomised
algorithm must fit the capacity on every draw, not on average), so the LP is over flows
instead, as for stopping families: the chance ``a[n, c]`` that the algorithm reaches buyer
``n`` with ``c`` units used and accepts, ``r[n, c]`` that it rejects. A buyer's inflow is its
parent's outflow (every child of a node sees the same history up to it), so the LP's optimum
is the maximin over every randomised online algorithm on the tree, and its duals the
adversary's best distribution. NumPy and SciPy's HiGHS, outside ``jit``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse
from scipy.optimize import linprog

from advonline.problems.posted_price.knapsack import (
    capacity_units,
    fractional_knapsack,
    knapsack,
)
from advonline.problems.posted_price.model import Setting, SettingError


@dataclasses.dataclass(frozen=True)
class TreeFamily:
    """Buyers on a tree: ``parent[n] < n`` (-1 at a root), demand ``units[n]`` >= 1 grid
    units and value density ``densities[n]``."""

    parent: np.ndarray  # [N] int
    units: np.ndarray  # [N] int
    densities: np.ndarray  # [N] float64

    def __post_init__(self) -> None:
        nodes = np.arange(len(self.parent))
        if np.any(self.parent >= nodes) or np.any(self.parent < -1):
            raise SettingError("a tree family lists every buyer after its parent")
        if np.any(self.units < 1):
            raise SettingError("every buyer of a tree family wants at least one unit")

    def paths(self) -> list[np.ndarray]:
        """The nodes from the root to each node, in order."""
        paths: list[np.ndarray] = []
        for node, parent in enumerate(self.parent):
            before = paths[parent] if parent >= 0 else np.zeros(0, np.int64)
            paths.append(np.append(before, node))
        return paths


@dataclasses.dataclass(frozen=True)
class TreeBound:
    """The bound of one tree family: ``ratio`` (certified, float64) <= ``lp_ratio``."""

    ratio: float  # 1 / (the best response's payoff against ``stopping``)
    lp_ratio: float  # 1 / z*, the LP's optimum (solver tolerance)
    stopping: np.ndarray  # [N] the adversary's distribution over end nodes


def path_optima(setting: Setting, family: TreeFamily) -> np.ndarray:
    """``[N]`` float64: the exact offline optimum of the path to every node."""
    capacity = capacity_units(setting)
    values = _values(setting, family)
    solve = fractional_knapsack if setting.divisible else knapsack
    return np.array([solve(values[path], family.units[path], capacity) for path in family.paths()])


def tree_lower_bound(setting: Setting, family: TreeFamily) -> TreeBound:
    """The certified lower bound of a tree family (module docstring)."""
    optima = path_optima(setting, family)
    z, duals = _maximin(setting, family, optima)
    stopping = np.clip(duals, 0.0, None)
    stopping = stopping / stopping.sum()
    certified = 1.0 / best_response_payoff(setting, family, stopping, optima)
    return TreeBound(certified, 1.0 / z, stopping)


def best_response_payoff(
    setting: Setting, family: TreeFamily, stopping: np.ndarray, optima: np.ndarray | None = None
) -> float:
    """The most any online algorithm earns, ``sum_j p_j ALG_j / OPT_j``, when the adversary
    sends the path to node ``j`` with probability ``p_j`` (exact, float64)."""
    optima = path_optima(setting, family) if optima is None else optima
    capacity = capacity_units(setting)
    per_end = np.where(optima > 0, stopping / np.where(optima > 0, optima, 1.0), 0.0)
    below = per_end.copy()  # node n counts in every end node of its subtree
    for node in range(len(below) - 1, 0, -1):
        if family.parent[node] >= 0:
            below[family.parent[node]] += below[node]
    worth = family.densities / setting.grid_size * below  # per unit sold to buyer n
    children = np.zeros((len(below), capacity + 1))  # sum over children of f(child, c)
    earned = np.zeros(capacity + 1)  # sum over roots of f(root, capacity)
    left = np.arange(capacity + 1)
    for node in range(len(below) - 1, -1, -1):
        demand = family.units[node]
        sales = range(demand + 1) if setting.divisible else (0, demand)
        best = np.full(capacity + 1, -np.inf)  # f(node, c) for every c
        for sold in sales:
            fits = left >= sold
            after = children[node][np.where(fits, left - sold, 0)]
            best = np.where(fits, np.maximum(best, worth[node] * sold + after), best)
        if family.parent[node] >= 0:
            children[family.parent[node]] += best
        else:
            earned += best
    return float(earned[-1])


def _values(setting: Setting, family: TreeFamily) -> np.ndarray:
    return family.densities * family.units / setting.grid_size


def _maximin(setting: Setting, family: TreeFamily, optima) -> tuple[float, np.ndarray]:
    """``z*`` of the LP over units sold ``y`` (divisible) or over accept / reject flows
    (indivisible), and the duals of its end rows."""
    if not setting.divisible:
        return flow_maximin(setting, family, optima)
    nodes = len(optima)
    capacity = capacity_units(setting)
    on_path = scipy.sparse.lil_array((nodes, nodes))  # row n: the nodes on the path to n
    for node, path in enumerate(family.paths()):
        on_path[node, path] = 1.0
    on_path = on_path.tocsr()
    unit_value = family.densities / setting.grid_size
    scale = scipy.sparse.diags_array(1.0 / optima)
    gains = -(scale @ on_path @ scipy.sparse.diags_array(unit_value))
    ends = scipy.sparse.hstack([gains, np.ones((nodes, 1))])  # z - ALG_j / OPT_j <= 0
    budget = scipy.sparse.hstack([on_path, np.zeros((nodes, 1))])  # units on each path <= C
    result = linprog(
        c=np.append(np.zeros(nodes), -1.0),
        A_ub=scipy.sparse.vstack([ends, budget]).tocsr(),
        b_ub=np.append(np.zeros(nodes), np.full(nodes, float(capacity))),
        bounds=[(0.0, float(d)) for d in family.units] + [(0.0, None)],
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the tree-family LP failed: {result.message}")
    return -float(result.fun), -np.asarray(result.ineqlin.marginals)[:nodes]


def flow_maximin(setting: Setting, family: TreeFamily, optima) -> tuple[float, np.ndarray]:
    """``z*`` and end-row duals of the indivisible LP: accept ``a[n, c]`` and reject
    ``r[n, c]`` flows over (buyer, units used before it), then ``z``; ``optima`` ``[N]`` are
    the paths' offline optima. A stopping family's LP is this one on a path."""
    nodes, states = len(optima), capacity_units(setting) + 1
    size = nodes * states
    accept = np.arange(size).reshape(nodes, states)
    reject = accept + size
    z_column = 2 * size
    used = np.arange(states)
    rows, cols, data = [], [], []
    start = np.zeros(size)  # every root is reached with nothing used
    for node, parent in enumerate(family.parent):
        here = node * states + used
        rows += [here, here]
        cols += [accept[node], reject[node]]
        data += [np.ones(states), np.ones(states)]
        if parent < 0:
            start[node * states] = 1.0
            continue
        # inflow: the parent's rejections at c, its acceptances at c - (its demand)
        rows.append(here)
        cols.append(reject[parent])
        data.append(-np.ones(states))
        grown = used[used >= family.units[parent]]
        rows.append(node * states + grown)
        cols.append(accept[parent, grown - family.units[parent]])
        data.append(-np.ones(len(grown)))
    flows = scipy.sparse.csr_array(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))),
        shape=(size, 2 * size + 1),
    )
    gain_rows, gain_cols, gain_data = [], [], []
    values = _values(setting, family)
    for end, path in enumerate(family.paths()):  # z - ALG_end / OPT_end <= 0
        gain_rows.append(np.full(len(path) * states + 1, end))
        gain_cols.append(np.append(accept[path].ravel(), z_column))
        gain_data.append(np.append(-np.repeat(values[path], states) / optima[end], 1.0))
    gains = scipy.sparse.csr_array(
        (np.concatenate(gain_data), (np.concatenate(gain_rows), np.concatenate(gain_cols))),
        shape=(nodes, 2 * size + 1),
    )
    fits = (used[None, :] + family.units[:, None]) < states  # [N, states]
    upper = np.concatenate([np.where(fits, 1.0, 0.0).ravel(), np.ones(size), [np.inf]])
    result = linprog(
        c=np.append(np.zeros(2 * size), -1.0),
        A_ub=gains,
        b_ub=np.zeros(nodes),
        A_eq=flows,
        b_eq=start,
        bounds=np.stack([np.zeros(2 * size + 1), upper], axis=1),
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the tree-family LP failed: {result.message}")
    return -float(result.fun), -np.asarray(result.ineqlin.marginals)
