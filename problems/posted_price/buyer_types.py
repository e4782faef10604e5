"""The vocabulary an adversary writes instances in: a finite set of buyer types.

A buyer type is a value density and a demand vector, or nobody. The densities are a
geometric grid ``g_0 = L < ... < g_{D-1} = U`` plus a copy of each ``g_j`` (j >= 1) just below
it (by a relative ``1e-4``). Against prices on the same grid these are the only densities
that matter: a buyer with density in ``[g_j, g_{j+1})`` buys exactly where one with density
``g_j`` buys, and a ratio that is a quotient of two linear functions of the density is worst
at an end of that interval, i.e. at ``g_j`` or just below ``g_{j+1}``.

The demand vectors are every demand level on every resource at once (balanced bundles) and,
with several resources, every level on one resource alone. Type ``i`` is density
``i // J`` with demand ``i % J`` (J demand vectors); the last index is nobody.

Every instance an oracle writes or an archive holds is a sequence of type indices ``[T]``:
mutations are integer moves, and :meth:`BuyerTypes.instances` turns them into values and
demands. The evaluator's hard families (:mod:`posted_price.families`) use the same demand
vectors; this module is independent of them, so training never needs to import them.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from advonline.problems.posted_price.learned import price_atoms
from advonline.problems.posted_price.model import Instance, Setting

JUST_BELOW = 1e-4  # relative gap of the "just below a grid price" densities


def density_levels(setting: Setting, count: int) -> tuple[float, ...]:
    """The geometric grid of ``count`` densities on [L, U] and the just-below copies."""
    grid = list(price_atoms(setting, count))
    below = [g * (1 - JUST_BELOW) for g in grid[1:]]
    return tuple(sorted(grid + below))


def demand_vectors(setting: Setting, dtype) -> jax.Array:
    """``[J, K]`` demand vectors: each level on every resource at once, and each level on one
    resource alone (K >= 2)."""
    unit = jnp.asarray(setting.capacities, dtype)[None, :] / setting.grid_size  # [1, K]
    levels = jnp.arange(1, setting.demand_levels + 1, dtype=dtype)[:, None]  # [N, 1]
    balanced = levels * unit  # [N, K]
    if setting.resources == 1:
        return balanced
    alone = balanced[:, None, :] * jnp.eye(setting.resources, dtype=dtype)[None]  # [N, K, K]
    return jnp.concatenate([balanced, alone.reshape(-1, setting.resources)])


def demand_grid_units(setting: Setting) -> np.ndarray:
    """``[J, K]`` int: each of :func:`demand_vectors` in whole grid units (capacity / G)
    of each resource, computed on the host in float64 (for the exact programmes outside
    ``jit``: the certificate over the product grid and the bundle lower bound)."""
    with jax.enable_x64(True), jax.ensure_compile_time_eval():
        demands = np.asarray(demand_vectors(setting, jnp.float64))
    return np.rint(demands * setting.grid_size / np.asarray(setting.capacities)).astype(int)


@dataclasses.dataclass(frozen=True)
class BuyerTypes:
    """The static type vocabulary (hashable, so it can be a jit static argument)."""

    densities: tuple[float, ...]
    demands: tuple[tuple[float, ...], ...]  # [J][K] demand vectors

    @staticmethod
    def build(setting: Setting, levels: int) -> BuyerTypes:
        """``levels`` grid densities (and their just-below copies) times every demand vector."""
        with jax.enable_x64(True):  # the exact grid fractions, whatever dtype runs later
            demands = tuple(tuple(row) for row in demand_vectors(setting, jnp.float64).tolist())
        return BuyerTypes(density_levels(setting, levels), demands)

    @property
    def count(self) -> int:
        """Number of types, nobody included."""
        return len(self.densities) * len(self.demands) + 1

    @property
    def nobody(self) -> int:
        """The index of the empty type (no buyer this round)."""
        return self.count - 1

    def instances(self, types: jax.Array, dtype) -> Instance:
        """Type indices ``[..., T]`` as values ``[..., T]`` and demand vectors ``[..., T, K]``
        (one compiled program per shape: it is called between jitted steps too)."""
        return _instances(self, types, jnp.dtype(dtype))

    def tokens(self, densities, strictly_below, levels) -> np.ndarray:
        """Type indices of buyers given by density, whether it is the supremum just below
        that density, and demand level (the same level on every resource; 0 for nobody;
        level ``j + 1`` is demand vector ``j``, so levels past N name one resource alone),
        all ``[..., T]``: the highest grid density at most the given one (strictly below
        it where ``strictly_below``), so that such a buyer buys no price the given one does
        not. A host function (NumPy)."""
        grid = np.asarray(self.densities)
        index = np.where(
            strictly_below,
            np.searchsorted(grid, densities, side="left"),
            np.searchsorted(grid, densities, side="right"),
        )
        density_index = np.clip(index - 1, 0, len(grid) - 1)
        levels = np.asarray(levels)
        types = density_index * len(self.demands) + np.maximum(levels - 1, 0)
        return np.where(levels > 0, types, self.nobody).astype(np.int32)

    def nearest_types(self, instances: Instance) -> np.ndarray:
        """The type index ``[..., T]`` nearest to each buyer of ``instances`` (values
        ``[..., T]``, demands ``[..., T, K]``, written in any vocabulary of the setting, in
        float32 or float64): its demand vector with the highest density of this grid at most
        its own (within float32's rounding, a relative 1e-6), so that it buys no price the
        given buyer does not; nobody for a blank or a demand vector this vocabulary lacks.
        Its own instances map back to their types. A host function (NumPy), for inputs
        written over other density levels."""
        demands = np.asarray(instances.demands, np.float64)
        vectors = np.asarray(self.demands, np.float64)  # [J, K]
        match = np.all(np.isclose(demands[..., None, :], vectors, rtol=1e-6, atol=0), -1)
        totals = demands.sum(-1)
        densities = np.asarray(instances.values, np.float64) / np.where(totals > 0, totals, 1)
        # float32 rounding must not move a grid density below its own grid point
        densities = densities * (1 + 1e-6)
        levels = np.where(match.any(-1) & (totals > 0), match.argmax(-1) + 1, 0)
        return self.tokens(densities, np.zeros(densities.shape, bool), levels)

    def types_of(self, instances: Instance, dtype) -> jax.Array:
        """The type index ``[..., T]`` of every buyer of ``instances`` written from this
        vocabulary in ``dtype`` (values ``[..., T]``, demands ``[..., T, K]``): the type whose
        value and demand it equals exactly (nobody for a blank). The inverse of
        :meth:`instances`."""
        values, demands = self.buyers(dtype)
        lead = (None,) * instances.values.ndim  # ranks made equal by hand, not by promotion
        match = (instances.values[..., None] == values[lead]) & jnp.all(
            instances.demands[..., None, :] == demands[lead], -1
        )  # [..., T, types]: exactly one type wrote each buyer
        return jnp.argmax(match, -1).astype(jnp.int32)

    def buyers(self, dtype) -> tuple[jax.Array, jax.Array]:
        """Value ``[types]`` and demand ``[types, K]`` of every type."""
        instance = self.instances(jnp.arange(self.count), dtype)
        return instance.values, instance.demands


@functools.partial(jax.jit, static_argnums=(0, 2))
def _instances(vocabulary: BuyerTypes, types: jax.Array, dtype) -> Instance:
    densities = jnp.asarray(vocabulary.densities, dtype)
    demands = jnp.asarray(vocabulary.demands, dtype)  # [J, K]
    density_index = jnp.clip(types, 0, vocabulary.nobody - 1) // len(vocabulary.demands)
    demand = demands[types % len(vocabulary.demands)]
    demand = jnp.where((types == vocabulary.nobody)[..., None], 0, demand)
    return Instance(values=densities[density_index] * demand.sum(-1), demands=demand)
