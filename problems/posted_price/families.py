"""Known hard inputs (docs/method.md §2, and §5 source `families`) and the seeded random
instances (source `random`).

Each family is a :class:`~posted_price.model.BuyerSource` parameterised by a stopping
density ``v``; the evaluator sweeps ``v`` over a fine geometric grid of [L, U] and runs every
member through the one simulator, which records the buyers actually written.

- ``ramp``: the canonical hard input, adaptive. While the algorithm's price for a bundle is
  at most ``v`` and the bundle fits, a buyer arrives at exactly that price (density at least
  L), so the algorithm sells along its own price curve; then buyers at density ``v`` arrive
  for the rest of the horizon (a capacity's worth and more), which the algorithm refuses or
  cannot fit while OPT takes them. Against a deterministic policy an oblivious adversary can
  write the same sequence in advance; against a randomised one it would be adaptive, so the
  evaluator uses it for deterministic policies only.
- ``staircase``: the same shape written obliviously: densities rise geometrically from L to
  ``v`` over the first rounds, then the last ``ceil(1 / max_demand)`` rounds stay at ``v``.
- ``flood``: every buyer at density ``v``; hurts prices that start above L.

Ramp and staircase take two demand vectors: one for the rising buyers and one for the buyers
at ``v``; the evaluator sweeps every pair. With one resource they are demand sizes (rise in
small chunks, stop with large ones). With K >= 2 they give the multi-resource hard inputs: a
ramp on one resource followed by bundles that need it as well as idle resources (the
algorithm sold it cheaply, OPT keeps it for the bundles and the idle resources go unused), or
a ramp of bundles followed by buyers of a single resource.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.buyer_types import demand_vectors
from advonline.problems.posted_price.model import (
    AdversaryView,
    Buyer,
    BuyerSource,
    Instance,
    Setting,
    capacity_tolerance,
    default_dtype,
)


@struct.dataclass
class Ramp:
    """Sell the algorithm its own price curve up to ``stop``, then flood at ``stop``."""

    stop: jax.Array  # [] stopping density v
    demand: jax.Array  # [K] the rising buyers' demand
    final_demand: jax.Array  # [K] the demand of the buyers at v
    low: float = struct.field(pytree_node=False)
    capacities: tuple[float, ...] = struct.field(pytree_node=False)

    def __call__(self, view: AdversaryView) -> Buyer:
        total = self.demand.sum()
        asking = jnp.dot(view.unit_prices, self.demand) / total  # density that just buys
        slack = capacity_tolerance(view.alg_used.dtype)
        fits = jnp.all(view.alg_used + self.demand <= jnp.asarray(self.capacities) + slack)
        rising = (asking <= self.stop) & fits
        demand = jnp.where(rising, self.demand, self.final_demand)
        density = jnp.where(rising, jnp.maximum(asking, self.low), self.stop)
        return Buyer(value=density * demand.sum(), demand=demand)


@struct.dataclass
class Staircase:
    """Densities rising from L to ``stop``, then ``final_rounds`` rounds at ``stop``."""

    stop: jax.Array  # [] v
    demand: jax.Array  # [K] the rising buyers' demand
    final_demand: jax.Array  # [K] the demand of the buyers at v
    low: float = struct.field(pytree_node=False)
    rounds: int = struct.field(pytree_node=False)
    final_rounds: int = struct.field(pytree_node=False)

    def __call__(self, view: AdversaryView) -> Buyer:
        rising = max(self.rounds - self.final_rounds, 1)
        progress = jnp.minimum(view.round / max(rising - 1, 1), 1.0)
        stopped = view.round >= rising
        density = jnp.where(stopped, self.stop, self.low * (self.stop / self.low) ** progress)
        demand = jnp.where(stopped, self.final_demand, self.demand)
        return Buyer(value=density * demand.sum(), demand=demand)


@struct.dataclass
class Flood:
    """Every buyer at density ``stop``."""

    stop: jax.Array  # [] v
    demand: jax.Array  # [K]

    def __call__(self, view: AdversaryView) -> Buyer:
        return Buyer(value=self.stop * self.demand.sum(), demand=self.demand)


FAMILY_NAMES = ("ramp", "staircase", "flood")


def stopping_densities(setting: Setting, levels: int, dtype) -> jax.Array:
    """``levels`` densities geometric in [L, U], both ends included and exact (a geometric
    grid's first point can fall an ulp below L, where no price of at least L sells)."""
    densities = jnp.geomspace(setting.low, setting.high, levels, dtype=dtype)
    return densities.at[0].set(setting.low).at[-1].set(setting.high)


def family_demand_pairs(setting: Setting, dtype) -> tuple[jax.Array, jax.Array]:
    """Every (rising demand, final demand) pair of the demand vectors
    (:func:`~posted_price.buyer_types.demand_vectors`), ``[P, K]`` each."""
    demands = demand_vectors(setting, dtype)
    count = demands.shape[0]
    return jnp.repeat(demands, count, axis=0), jnp.tile(demands, (count, 1))


def make_family(
    name: str,
    setting: Setting,
    stop: jax.Array,
    demand: jax.Array,
    final_demand: jax.Array | None = None,
):
    """A batch of ``name`` sources: ``stop`` ``[B]``, rising ``demand`` ``[B, K]`` and the
    ``final_demand`` ``[B, K]`` at ``stop`` (default: the same; ``flood`` uses ``demand``)."""
    final_demand = demand if final_demand is None else final_demand
    if name == "ramp":
        return Ramp(
            stop=stop,
            demand=demand,
            final_demand=final_demand,
            low=setting.low,
            capacities=setting.capacities,
        )
    if name == "staircase":
        final_rounds = math.ceil(1.0 / setting.max_demand)
        return Staircase(
            stop=stop,
            demand=demand,
            final_demand=final_demand,
            low=setting.low,
            rounds=setting.rounds,
            final_rounds=min(final_rounds, setting.rounds),
        )
    if name == "flood":
        return Flood(stop=stop, demand=demand)
    raise KeyError(f"unknown family {name!r}; known: {', '.join(FAMILY_NAMES)}")


def random_instances(setting: Setting, key: jax.Array, count: int, dtype) -> Instance:
    """``count`` instances: densities log-uniform in [L, U], demand levels uniform on the grid
    (per resource, 0..N units with at least one unit in all, for K >= 2)."""
    key_density, key_demand = jax.random.split(key)
    shape = (count, setting.rounds)
    log_density = jax.random.uniform(
        key_density, shape, dtype, math.log(setting.low), math.log(setting.high)
    )
    unit = jnp.asarray(setting.capacities, dtype)[None, None, :] / setting.grid_size
    low_units = 1 if setting.resources == 1 else 0
    units = jax.random.randint(
        key_demand, (*shape, setting.resources), low_units, setting.demand_levels + 1
    )
    units = units.at[..., 0].set(jnp.where(units.sum(-1) == 0, 1, units[..., 0]))
    demands = units.astype(dtype) * unit
    return Instance(values=jnp.exp(log_density) * demands.sum(-1), demands=demands)


def write_out(setting: Setting, source: BuyerSource, count: int, dtype=None) -> Instance:
    """The fixed instances an oblivious source batch ``[count]`` writes."""
    dtype = default_dtype(dtype)
    blank = AdversaryView(
        jnp.int32(0), jnp.zeros(setting.resources, dtype), jnp.zeros(setting.resources, dtype)
    )

    def one(member):
        def buyer_at(t):
            buyer = member(blank._replace(round=t))
            return buyer.value, buyer.demand

        values, demands = jax.vmap(buyer_at)(jnp.arange(setting.rounds, dtype=jnp.int32))
        return Instance(values=values, demands=demands)

    return jax.vmap(one)(source)
