"""Offline optimum OPT(I) = max sum_t b_t x_t s.t. sum_t d_tk x_t <= C_k (SPEC §2).

- K = 1 divisible: fill greedily by value density (exact; JAX, vmappable, float64 under x64).
- K = 1 indivisible on the demand grid: 0/1 knapsack by dynamic programming over capacity
  units (exact; JAX, ``lax.scan`` over buyers).
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

from problems.posted_price import Instance, Setting, demand_units


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

    K = 1 in JAX (greedy or knapsack DP); K >= 2 through SciPy, off the jit path.
    """
    if setting.resources != 1:
        found = batch_optimum(
            np.asarray(instances.values),
            np.asarray(instances.demands),
            np.asarray(setting.capacities, dtype=float),
            setting.divisible,
        )
        return jnp.asarray(found, dtype=instances.values.dtype)
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
    HiGHS LP (``divisible``) or MILP (gap 0); float64, NumPy, outside ``jit``."""
    values = np.asarray(values, float)
    demands = np.asarray(demands, float)
    count, rounds = values.shape
    if count == 0 or rounds == 0:
        return np.zeros(count)
    constraints = scipy.sparse.block_diag([d.T for d in demands], format="csr")
    limits = np.tile(np.asarray(capacities, float), count)
    if divisible:
        result = linprog(
            -values.ravel(), A_ub=constraints, b_ub=limits, bounds=(0, 1), method="highs"
        )
    else:
        result = milp(
            -values.ravel(),
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
    values, demands = np.asarray(values, float), np.asarray(demands, float).reshape(len(values), -1)
    if len(values) == 0:
        return 0.0
    result = linprog(
        -values, A_ub=demands.T, b_ub=np.asarray(capacities, float), bounds=(0, 1), method="highs"
    )
    if result.status != 0:
        raise RuntimeError(f"LP solve failed: {result.message}")
    return float(-result.fun)


def milp_optimum(values: np.ndarray, demands: np.ndarray, capacities: np.ndarray) -> float:
    """Indivisible OPT by HiGHS MILP (gap 0): values ``[T]``, demands ``[T, K]``, capacities
    ``[K]``."""
    values, demands = np.asarray(values, float), np.asarray(demands, float).reshape(len(values), -1)
    if len(values) == 0:
        return 0.0
    result = milp(
        -values,
        constraints=LinearConstraint(demands.T, -np.inf, np.asarray(capacities, float)),
        integrality=np.ones(len(values)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if result.status != 0:
        raise RuntimeError(f"MILP solve failed: {result.message}")
    return float(-result.fun)
