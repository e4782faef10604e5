"""A lower bound on the competitive ratio of every online algorithm in a finite one-resource
setting: what no policy, learned or classic, randomised or not, can beat there.

Yao's principle on a *stopping family*. Fix a master sequence ``S`` of ``T`` buyers; the
adversary sends a prefix ``S_1 .. S_j`` (then nobody) for some ``j`` of its choosing. An
online algorithm sees the same buyers whatever ``j`` is, until the sequence stops, so all it
can choose is how much of each ``S_t`` to take (randomly, if it likes). Its best guarantee
on the family is the linear programme

    z* = max_x min_j ALG_j(x) / OPT_j        (x: what it takes of each buyer, x feasible)

and ``1 / z*`` is a lower bound on its competitive ratio. Divisible buyers: ``x_t in [0, 1]``
with ``sum_t d_t x_t <= C`` (a randomised algorithm takes the same in expectation).
Indivisible buyers: a randomised algorithm is a flow over (round, units used) that accepts
or rejects each buyer that fits (:func:`~posted_price.tree_bound.flow_maximin` on a path).
``OPT_j`` is the exact offline optimum of the prefix.

The figure reported is not the LP's own optimum, which carries the solver's tolerance, but a
certificate: the LP's dual is the adversary's distribution ``p`` over stopping points, and
against a fixed ``p`` the best any algorithm can do is an exact knapsack (each buyer worth
``v_t sum_{j > t} p_j / OPT_j``; fractional or 0/1), solved in float64. ``1 / that`` is a
lower bound on every algorithm's ratio whatever the LP's accuracy (``certified <= 1 / z*``).

Which family is hardest is found by hill climbing on ``S`` (:func:`search_lower_bound`) with
the project's one search kernel (:func:`advonline.search.hill_climb`) and the oracles' own
mutations of a buyer-type sequence (:func:`~posted_price.oracles.propose`): a buyer's density
or demand, copy a neighbour, swap two rounds, lengthen a flood, cut a stretch, shift a ramp,
insert or delete a round; a chain keeps what does not lower the bound. The bound itself is
NumPy and SciPy's HiGHS, outside ``jit``: the kernel reaches it through
``jax.pure_callback``. The family is the adversary's side of a measurement, never training
data.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from advonline.problems.posted_price import oracles
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.knapsack import (
    add_item,
    capacity_units,
    densest_first,
    fractional_knapsack,
    knapsack,
)
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.tree_bound import TreeFamily, flow_maximin
from advonline.search import float64_everywhere, hill_climb


@dataclasses.dataclass(frozen=True)
class LowerBound:
    """The bound of one master sequence: ``ratio`` (certified, float64) <= ``lp_ratio``."""

    ratio: float  # 1 / (the best response's payoff against the stopping distribution)
    lp_ratio: float  # 1 / z*, the LP's optimum (solver tolerance)
    demands: np.ndarray  # [T] the master sequence's demands, as fractions of capacity
    densities: np.ndarray  # [T] value densities
    stopping: np.ndarray  # [T] the adversary's distribution over prefixes 1 .. T

    def describe(self) -> dict:
        """JSON-ready: the figures and the family (buyer t: its demand and value density)."""
        return {
            "lower_bound": self.ratio,
            "lp_ratio": self.lp_ratio,
            "demands": self.demands.tolist(),
            "densities": self.densities.tolist(),
            "stopping": self.stopping.tolist(),
        }


def prefix_optima(setting: Setting, units: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``[T]`` float64: the exact offline optimum of every prefix ``S_1 .. S_j``."""
    capacity = capacity_units(setting)
    optima = np.empty(len(units))
    if setting.divisible:
        order = densest_first(values, units)  # sorted once: each prefix's order is within it
        for j in range(len(units)):
            optima[j] = fractional_knapsack(values, units, capacity, order[order <= j])
        return optima
    best = np.zeros(capacity + 1)  # best[c]: the most value within c units
    for j, (value, weight) in enumerate(zip(values, units, strict=True)):
        add_item(best, value, weight)
        optima[j] = best[-1]
    return optima


def best_response_payoff(
    setting: Setting, units: np.ndarray, values: np.ndarray, stopping: np.ndarray
) -> float:
    """The most any online algorithm earns, ``sum_j p_j ALG_j / OPT_j``, when the sequence
    stops after buyer ``j`` with probability ``p_j`` (exact, float64)."""
    return _best_response(setting, units, values, prefix_optima(setting, units, values), stopping)


def _best_response(setting: Setting, units, values, optima, stopping) -> float:
    """:func:`best_response_payoff` given the prefix optima ``[T]``."""
    per_prefix = np.where(optima > 0, stopping / np.where(optima > 0, optima, 1.0), 0.0)
    worth = values * np.cumsum(per_prefix[::-1])[::-1]  # buyer t counts in every prefix j > t
    capacity = capacity_units(setting)
    if setting.divisible:
        return fractional_knapsack(worth, units, capacity)
    return knapsack(worth, units, capacity)


def stopping_lower_bound(setting: Setting, units: np.ndarray, densities: np.ndarray) -> LowerBound:
    """The certified lower bound of the master sequence (``units`` ``[T]`` int >= 1, value
    densities ``[T]`` in [L, U]): module docstring."""
    units = np.asarray(units, dtype=np.int64)
    densities = np.asarray(densities, dtype=np.float64)
    values = densities * units / setting.grid_size
    optima = prefix_optima(setting, units, values)
    z, duals = _maximin(setting, units, densities, values, optima)
    stopping = np.clip(duals, 0.0, None)
    stopping = stopping / stopping.sum()
    certified = 1.0 / _best_response(setting, units, values, optima, stopping)
    return LowerBound(certified, 1.0 / z, units / setting.grid_size, densities, stopping)


def _maximin(setting: Setting, units, densities, values, optima) -> tuple[float, np.ndarray]:
    """``z*`` and the duals of the prefix rows (the adversary's stopping distribution)."""
    rounds = len(units)
    capacity = capacity_units(setting)
    if setting.divisible:
        return _solved(_divisible_maximin(units, values, optima, capacity), rounds)
    # indivisible: the flow LP over (buyer, units used) of a tree that is a path
    path = TreeFamily(np.arange(-1, rounds - 1), units, densities)
    return flow_maximin(setting, path, optima)


def _divisible_maximin(units, values, optima, capacity: int):
    """HiGHS on the divisible LP, sparse: with running sums ``s_j = sum_{t <= j} v_t x_t``
    (one equality a round) each prefix row is ``z - s_j / OPT_j <= 0``: the LP of the module
    docstring, its prefix rows' duals the stopping distribution, in 6 T nonzeros where the
    rows written out take T^2 / 2 (0.02 s at T = 1,000 where those take 0.3-0.6 s).
    Variables: ``x [T]`` in [0, 1], ``s [T]``, ``z >= 0``."""
    rounds = len(units)
    t = np.arange(rounds)
    x, s, z = t, rounds + t, 2 * rounds
    columns = 2 * rounds + 1
    prefix_rows = sparse.coo_matrix(
        (
            np.concatenate([np.ones(rounds), -1.0 / optima]),
            (np.tile(t, 2), np.append([z] * rounds, s)),
        ),
        shape=(rounds, columns),
    )
    budget = sparse.coo_matrix((units.astype(float), ([0] * rounds, x)), shape=(1, columns))
    running = sparse.coo_matrix(  # s_j - s_{j-1} - v_j x_j = 0
        (
            np.concatenate([np.ones(rounds), -np.ones(rounds - 1), -values]),
            (np.concatenate([t, t[1:], t]), np.concatenate([s, s[:-1], x])),
        ),
        shape=(rounds, columns),
    )
    return linprog(
        c=np.append(np.zeros(columns - 1), -1.0),
        A_ub=sparse.vstack([prefix_rows, budget]).tocsr(),
        b_ub=np.append(np.zeros(rounds), capacity),
        A_eq=running.tocsr(),
        b_eq=np.zeros(rounds),
        bounds=[(0.0, 1.0)] * rounds + [(None, None)] * rounds + [(0.0, None)],
        method="highs",
    )


def _solved(result, rounds: int) -> tuple[float, np.ndarray]:
    if result.status != 0:
        raise RuntimeError(f"the stopping-family LP failed: {result.message}")
    return -float(result.fun), -np.asarray(result.ineqlin.marginals)[:rounds]


def search_lower_bound(
    setting: Setting,
    key: jax.Array,
    steps: int = 400,
    levels: int = 64,
    chains: int = 1,
    candidates: int = 1,
    family: Callable[[Setting, BuyerTypes, np.ndarray], LowerBound] | None = None,
) -> list[LowerBound]:
    """Hill climbing on the master sequence (module docstring): ``chains`` independent chains,
    each from a rising ramp of the largest demands (on every resource) through the ``levels``
    geometric densities in [L, U]; each of ``steps`` steps proposes ``candidates`` mutations
    per chain and keeps the best when the bound does not fall. Returns each chain's last
    family (its best: a chain never moves down), certified again here by the function that
    scored it: ``family(setting, vocabulary, types)``, by default the one-resource bound of
    the sequence of buyer types."""
    if family is None:
        capacity_units(setting)  # one resource only
        family = _family_bound
    vocabulary = BuyerTypes.build(setting, levels)
    level = np.round(np.linspace(0, levels - 1, setting.rounds)).astype(np.int32)
    # the grid densities sit at the even places of the vocabulary (each after its just-below)
    ramp = 2 * level * len(vocabulary.demands) + setting.demand_levels - 1
    starts = jnp.asarray(np.tile(ramp, (chains, 1)), jnp.int32)

    def bounds(types: np.ndarray) -> np.ndarray:
        return np.array([family(setting, vocabulary, row).ratio for row in types])

    def score(types: jax.Array) -> jax.Array:
        shape = jax.ShapeDtypeStruct(types.shape[:1], jnp.float64)
        return jax.pure_callback(bounds, shape, types)

    propose = functools.partial(oracles.propose, vocabulary)
    climb = jax.jit(hill_climb, static_argnums=(0, 1, 4, 5))
    with float64_everywhere():  # float64 scores from the callback's thread
        found = np.asarray(climb(score, propose, key, starts, steps, candidates)[0])
    return [family(setting, vocabulary, row) for row in found]


def _family_bound(setting: Setting, vocabulary: BuyerTypes, types: np.ndarray) -> LowerBound:
    """The bound of a master sequence written as buyer types ``[T]`` (nobody skipped; a
    sequence of nobody bounds nothing: ratio 1)."""
    types = np.asarray(types)
    buyers = types != vocabulary.nobody
    if not buyers.any():
        empty = np.zeros(0)
        return LowerBound(1.0, 1.0, empty, empty, empty)
    demands = len(vocabulary.demands)
    densities = np.asarray(vocabulary.densities)[types[buyers] // demands]
    return stopping_lower_bound(setting, types[buyers] % demands + 1, densities)
