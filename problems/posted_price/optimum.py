"""Offline optimum OPT(I) = max sum_t b_t x_t s.t. sum_t d_tk x_t <= C_k (method.md §1).

- K = 1 divisible: fill greedily by value density (exact; JAX, vmappable, float64 under x64).
- K = 1 indivisible on the demand grid: 0/1 knapsack by dynamic programming over capacity
  units (exact; JAX, ``lax.scan`` over buyers).
- K = 2 divisible, inside ``jit`` for the oracles: the LP's dual minimised over the vertices
  of its arrangement (exact; JAX, vmappable).
- any K: the LP (divisible) and the MILP (indivisible) through SciPy's HiGHS. These run in
  NumPy, outside ``jit``. A batch is one block-diagonal problem (the instances share no
  variable or constraint, so its optimum is every instance's optimum at once), which saves
  HiGHS's per-call overhead: about 4x for 64 instances of 100 buyers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from advonline.problems.posted_price.model import Instance, Setting, SettingError, demand_units


def greedy_fill_optimum(values: jax.Array, demands: jax.Array, capacity: float) -> jax.Array:
    """OPT of one K = 1 divisible instance: values ``[T]``, demands ``[T]`` -> ``[]``."""
    asks = demands > 0
    density = jnp.where(asks, values / jnp.where(asks, demands, 1), -jnp.inf)
    order = jnp.argsort(-density)
    sorted_demands = jnp.where(asks, demands, 0)[order]
    taken_before = jnp.cumsum(sorted_demands) - sorted_demands
    taken = jnp.clip(capacity - taken_before, 0, sorted_demands)
    return jnp.sum(jnp.where(asks[order], density[order] * taken, 0))


def knapsack_optimum(values: jax.Array, units: jax.Array, grid_size: int) -> jax.Array:
    """OPT of one K = 1 indivisible instance: values ``[T]``, integer demands ``[T]`` in units
    of capacity / ``grid_size`` -> ``[]``. O(T G) by DP over used capacity."""
    capacity_units = jnp.arange(grid_size + 1)

    def add_buyer(best: jax.Array, buyer: tuple[jax.Array, jax.Array]):
        value, weight = buyer  # best[c]: the most value using at most c units
        source = capacity_units - weight
        with_buyer = jnp.where(source >= 0, best[jnp.clip(source, 0)] + value, -jnp.inf)
        return jnp.where(weight > 0, jnp.maximum(best, with_buyer), best), None

    start = jnp.zeros(grid_size + 1, values.dtype)
    best, _ = jax.lax.scan(add_buyer, start, (values, units))
    return best[-1]


def offline_optimum(setting: Setting, instances: Instance) -> jax.Array:
    """OPT of a batch of instances (leading axis) on ``setting``'s grid -> ``[B]``.

    K = 1 in JAX (greedy or knapsack DP); K >= 2 by SciPy's HiGHS on the host: called
    directly on concrete instances, and inside a trace (a jitted search scoring with it)
    through ``jax.pure_callback``, whose thread sees only JAX's global float64 flag
    (:func:`advonline.search.float64_everywhere`).
    """
    if setting.resources != 1:
        capacities = np.asarray(setting.capacities, dtype=float)
        values = instances.values

        def solve(values: np.ndarray, demands: np.ndarray) -> np.ndarray:
            rounds, resources = demands.shape[-2:]
            found = batch_optimum(
                values.reshape(-1, rounds),
                demands.reshape(-1, rounds, resources),
                capacities,
                setting.divisible,
            )
            return found.reshape(values.shape[:-1])

        if not isinstance(values, jax.core.Tracer):
            found = solve(np.asarray(values), np.asarray(instances.demands))
            return jnp.asarray(found, dtype=values.dtype)
        shape = jax.ShapeDtypeStruct(values.shape[:-1], values.dtype)
        return jax.pure_callback(
            lambda *arrays: solve(*arrays).astype(shape.dtype),
            shape,
            values,
            instances.demands,
            vmap_method="broadcast_all",
        )
    if setting.divisible:
        return _greedy_batch(instances.values, instances.demands[..., 0], setting.capacities[0])
    units = demand_units(setting, instances.demands)[..., 0]
    return _knapsack_batch(instances.values, units, setting.grid_size)


_greedy_batch = jax.jit(jax.vmap(greedy_fill_optimum, in_axes=(0, 0, None)), static_argnums=2)
_knapsack_batch = jax.jit(jax.vmap(knapsack_optimum, in_axes=(0, 0, None)), static_argnums=2)


def batch_optimum(
    values: np.ndarray, demands: np.ndarray, capacities: np.ndarray, divisible: bool
) -> np.ndarray:
    """OPT of a batch ``[B]`` (values ``[B, T]``, demands ``[B, T, K]``) as one block-diagonal
    HiGHS LP (``divisible``) or MILP (gap 0); float64, NumPy, outside ``jit``. Each
    capacity's row is written in units of that capacity and each instance's values in units
    of its largest: the solution is the same, and HiGHS solves settings at any scale (its
    own scaling stops short of capacities 1e5 apart with values spanning 1e7)."""
    values = np.asarray(values, float)
    shares = np.asarray(demands, float) / np.asarray(capacities, float)
    count, rounds = values.shape
    if count == 0 or rounds == 0:
        return np.zeros(count)
    largest = np.max(np.abs(values), axis=1, keepdims=True)
    objective = -(values / np.where(largest > 0, largest, 1.0)).ravel()
    constraints = scipy.sparse.block_diag([share.T for share in shares], format="csr")
    limits = np.ones(constraints.shape[0])
    if divisible:
        result = linprog(objective, A_ub=constraints, b_ub=limits, bounds=(0, 1), method="highs")
    else:
        result = milp(
            objective,
            constraints=LinearConstraint(constraints, -np.inf, limits),
            integrality=np.ones(values.size),
            bounds=Bounds(0, 1),
            options={"mip_rel_gap": 0.0},
        )
    if result.status != 0:
        raise RuntimeError(f"{'LP' if divisible else 'MILP'} solve failed: {result.message}")
    return np.sum(result.x.reshape(count, rounds) * values, axis=1)


def lp_optimum(values: np.ndarray, demands: np.ndarray, capacities: np.ndarray) -> float:
    """Divisible OPT by HiGHS LP: values ``[T]``, demands ``[T, K]``, capacities ``[K]``."""
    return _one_optimum(values, demands, capacities, True)


def milp_optimum(values: np.ndarray, demands: np.ndarray, capacities: np.ndarray) -> float:
    """Indivisible OPT by HiGHS MILP (gap 0): values ``[T]``, demands ``[T, K]``, capacities
    ``[K]``."""
    return _one_optimum(values, demands, capacities, False)


def _one_optimum(values, demands, capacities, divisible: bool) -> float:
    values = np.asarray(values, float)
    demands = np.asarray(demands, float).reshape(len(values), -1)
    return float(batch_optimum(values[None], demands[None], capacities, divisible)[0])


#: Smoothing temperatures of :func:`dual_lp_optimum`, relative to the largest value.
_TEMPERATURES = tuple(10.0 ** -(1 + 0.5 * i) for i in range(12))  # 1e-1 ... ~3e-7
_NEWTON_STEPS = 4  # per temperature
_STEP_SIZES = tuple(0.5**i for i in range(5))  # Newton step fractions tried
_GRADIENT_STEPS = tuple(10.0 ** (1 - 2 * i) for i in range(4))  # projected-gradient step lengths


def dual_lp_optimum(values: jax.Array, demands: jax.Array, capacities: tuple[float, ...]):
    """Divisible OPT of one instance for any K in JAX (jit- and vmap-able): values ``[T]``,
    demands ``[T, K]`` -> ``(lower, upper)``, a primal-feasible value and a dual value with
    ``lower <= OPT <= upper``.

    The LP ``max b.x, D x <= C, 0 <= x <= 1`` has the K-dimensional dual
    ``min_{y >= 0} f(y) = C.y + sum_t (b_t - d_t.y)_+``. Its smoothing
    ``f_tau(y) = C.y + tau sum_t softplus((b_t - d_t.y) / tau)`` is convex and smooth, and
    ``f <= f_tau <= f + T tau log 2``; a projected Newton method (K x K systems, a line search
    over fixed step sizes, so every instance takes the same steps) minimises it for a falling
    sequence of ``tau`` (down to 100 machine epsilons), each from the last one's minimiser.
    At the end ``x_t = sigmoid((b_t - d_t.y) / tau)``, each buyer scaled down by its most
    overloaded resource, is primal-feasible, and what that leaves free is given to the buyers
    in order of reduced value ``b_t - d_t.y``; greedy fills from nothing (in that order, and
    with the buyers at reduced value 0 ranked by value per unit of demand at the dual prices)
    are two more feasible points (where buyers tie at reduced value 0 the first alone can lose
    several per cent). The best one's value is ``lower``; ``f(y)`` at the final
    ``y`` is ``upper``. ``tests/test_optimum.py`` checks both against
    HiGHS on random instances. Use ``lower`` where a ratio must not be inflated.
    """
    dtype = values.dtype
    capacity = jnp.asarray(capacities, dtype)
    scale = jnp.maximum(jnp.max(values), jnp.finfo(dtype).tiny)
    b = values / scale  # in (0, 1]
    d = demands / capacity[None]  # capacity 1 per resource
    resources = d.shape[1]
    eye = jnp.eye(resources, dtype=dtype)

    def smooth(y, tau):
        return jnp.sum(y) + tau * jnp.sum(jax.nn.softplus((b - d @ y) / tau))

    def projected_gradient(y, tau):
        gradient = 1.0 - d.T @ jax.nn.sigmoid((b - d @ y) / tau)
        return jnp.linalg.norm(jnp.where((y > 0) | (gradient < 0), gradient, 0))

    def newton(y, tau):
        sigma = jax.nn.sigmoid((b - d @ y) / tau)
        gradient = 1.0 - d.T @ sigma
        curvature = (d * (sigma * (1 - sigma) / tau)[:, None]).T @ d
        free = (y > 0) | (gradient < 0)
        mask = free[:, None] & free[None, :]
        hessian = jnp.where(mask, curvature, 0) + eye * (1e-9 / tau + jnp.where(free, 0, 1))[None]
        direction = jnp.where(free, -jnp.linalg.solve(hessian, jnp.where(free, gradient, 0)), 0)
        steepest = -gradient / (jnp.linalg.norm(gradient) + jnp.finfo(dtype).tiny)
        tried = [y + s * direction for s in _STEP_SIZES] + [
            y + s * steepest for s in _GRADIENT_STEPS
        ]
        tried = jnp.maximum(jnp.stack([y] + tried), 0)
        scores = jax.vmap(smooth, in_axes=(0, None))(tried, tau)
        # where the values tie to rounding (near the minimum, in float32), the candidate with
        # the smallest projected gradient wins: the value alone cannot tell them apart
        tie = scores <= jnp.min(scores) * (1 + 8 * jnp.finfo(dtype).eps) + jnp.finfo(dtype).tiny
        stuck = jax.vmap(projected_gradient, in_axes=(0, None))(tried, tau)
        return tried[jnp.argmin(jnp.where(tie, stuck, jnp.inf))]

    y = jnp.zeros(resources, dtype)
    finest = max(_TEMPERATURES[-1], 100 * float(jnp.finfo(dtype).eps))  # argument noise < 1%
    temperatures = [tau for tau in _TEMPERATURES if tau >= finest]

    def anneal(y, tau):  # one scan over the temperatures keeps the compiled program small
        return jax.lax.fori_loop(0, _NEWTON_STEPS, lambda _, y: newton(y, tau), y), None

    y, _ = jax.lax.scan(anneal, y, jnp.asarray(temperatures, dtype))
    reduced = b - d @ y  # each buyer's value less its demand at the dual prices
    served = jax.nn.sigmoid(reduced / temperatures[-1])
    overload = jnp.maximum(d.T @ served, 1.0)  # [K], 1 where the resource fits
    # each buyer scaled by its most overloaded resource: every resource then fits
    shrink = jnp.min(jnp.where(d > 0, 1.0 / overload[None, :], 1.0), axis=1)
    fitted = served * shrink

    def top_up(carry, t):  # what the shrinking left free goes to buyers, best reduced value first
        residual, amounts = carry
        room = jnp.min(jnp.where(d[t] > 0, residual / jnp.where(d[t] > 0, d[t], 1), jnp.inf))
        extra = jnp.clip(jnp.minimum(1 - amounts[t], room), 0, 1)
        return (jnp.maximum(residual - extra * d[t], 0), amounts.at[t].add(extra)), None

    def filled(amounts, order):
        residual = jnp.maximum(1 - d.T @ amounts, 0)
        (_, amounts), _ = jax.lax.scan(top_up, (residual, amounts), order)
        return jnp.sum(b * amounts)

    by_reduced = jnp.argsort(-reduced)
    # the buyers with a positive reduced value first, then the rest (ties at 0 among them) by
    # value per unit of demand at the dual prices
    per_cost = b / (d @ y + jnp.finfo(dtype).eps)
    positive_first = jnp.lexsort((-per_cost, -(reduced > 1e-6).astype(dtype)))
    # feasible points, the best one counts: the shrunk sigmoid topped up, and greedy fills from
    # nothing in either order (where buyers tie at reduced value 0 the sigmoid serves them all
    # and the shrinking spreads the loss over every buyer)
    zero = jnp.zeros_like(fitted)
    candidates = [
        filled(fitted, by_reduced),
        filled(zero, by_reduced),
        filled(zero, positive_first),
    ]
    lower = scale * jnp.max(jnp.stack(candidates))
    upper = scale * (jnp.sum(y) + jnp.sum(jnp.maximum(reduced, 0)))
    return lower, jnp.maximum(upper, lower)


def two_resource_lp_optimum(
    values: jax.Array, demands: jax.Array, capacities: tuple[float, float]
) -> jax.Array:
    """Divisible OPT of one two-resource instance, exact up to rounding, in JAX (jit- and
    vmap-able): values ``[T]``, demands ``[T, 2]`` -> ``[]``.

    By LP duality OPT is the minimum over ``y >= 0`` of
    ``f(y) = C.y + sum_t (b_t - d_t.y)_+`` (see :func:`dual_lp_optimum`). ``f`` is convex and
    linear on each cell of the arrangement of the lines ``d_t.y = b_t`` and the two axes; it
    grows without bound in the quadrant (every capacity is positive), so its minimum is
    attained, and the set of minimisers is a face of a cell inside the quadrant: a pointed
    polyhedron, which has a vertex. So OPT is the least ``f`` over the pairwise intersections
    of those ``T + 2`` lines, ``(T + 2)(T + 1) / 2`` candidates costing ``T`` each; every
    candidate (moved into the quadrant where rounding left it just outside) is a dual-feasible
    point, so ``f`` there is never below OPT but by rounding (``tests/test_optimum.py`` checks
    it against HiGHS). Parallel lines (buyers with proportional demand vectors) do not
    intersect and are skipped."""
    dtype = values.dtype
    d = demands / jnp.asarray(capacities, dtype)[None]  # capacity 1 per resource
    lines = jnp.concatenate([d, jnp.eye(2, dtype=dtype)])  # d_t.y = b_t, then y_k = 0
    levels = jnp.concatenate([values, jnp.zeros(2, dtype)])
    first, second = np.triu_indices(lines.shape[0], 1)
    (a, b), (c, e) = lines[first].T, lines[second].T
    det = a * e - b * c
    crossing = det != 0
    safe = jnp.where(crossing, det, 1)
    y = jnp.stack(
        [
            (levels[first] * e - b * levels[second]) / safe,
            (a * levels[second] - levels[first] * c) / safe,
        ]
    )  # [2, P] by Cramer's rule
    y = jnp.maximum(y, 0)
    dual = jnp.sum(y, 0) + jnp.sum(jnp.maximum(values[:, None] - d @ y, 0), 0)
    return jnp.min(jnp.where(crossing, dual, jnp.inf))


#: Elements (instances x buyers x candidates) :func:`two_resource_lp_optimum` scores at once.
_VERTEX_CHUNK = 2**21
#: The largest ``T`` whose two-resource OPT the oracles take by vertices, exact, at up to about
#: twice the dual method's cost (1,024 instances on 2 CPU cores, float32: ``T`` = 60 0.12 s
#: against 0.17 s, ``T`` = 128 0.50 s against 0.24 s); beyond it the cubic cost grows on.
_VERTEX_ROUNDS = 128


def device_optimum(setting: Setting, instances: Instance) -> jax.Array:
    """OPT ``[B]`` in JAX for the training oracles (jit-able for every K): exact for K = 1
    (:func:`offline_optimum`) and for divisible K = 2 up to :data:`_VERTEX_ROUNDS` rounds
    (:func:`two_resource_lp_optimum`, exact up to rounding, in chunks of at most
    :data:`_VERTEX_CHUNK` elements); for the other divisible settings
    the primal-feasible value of :func:`dual_lp_optimum`: a lower bound, so a ratio built on it
    is never inflated; within 1e-4 relative on random instances, but on the near-tied grid
    instances the oracles write a few per cent of instances fall short by up to several per
    cent (``tests/test_optimum.py``). Indivisible K >= 2 needs HiGHS's MILP, outside ``jit``:
    refused here."""
    if setting.resources == 1:
        return offline_optimum(setting, instances)
    if not setting.divisible:
        raise SettingError("an in-jit optimum for indivisible buyers needs K = 1")
    if setting.resources == 2 and setting.rounds <= _VERTEX_ROUNDS:
        rounds = setting.rounds
        chunk = max(1, _VERTEX_CHUNK // (rounds * (rounds + 2) * (rounds + 1) // 2))
        values = instances.values.reshape(-1, rounds)
        demands = instances.demands.reshape(-1, rounds, 2)
        found = jax.lax.map(
            lambda one: two_resource_lp_optimum(*one, setting.capacities),
            (values, demands),
            batch_size=chunk,
        )
        return found.reshape(instances.values.shape[:-1])
    solve = jax.vmap(dual_lp_optimum, in_axes=(0, 0, None))
    return solve(instances.values, instances.demands, setting.capacities)[0]
