"""Online posted-price allocation of K resources (docs/method.md §1): setting, instance,
policy, simulator.

A seller holds K resource types with capacities ``C_k``. Buyer ``t`` has a demand vector
``d_t`` ``[K]`` and a value ``b_t`` for the whole bundle; its value density
``b_t / sum_k d_tk`` lies in ``[L, U]``. Before the buyer arrives the seller posts unit prices
``p_t`` ``[K]`` that depend only on what it has seen (utilisation and round). The buyer buys
iff ``b_t >= p_t . d_t`` (ties buy) and the bundle fits (indivisible) or buys what is left
of it, scaled uniformly (divisible). Sales are final.

Everything here is a pure function over immutable pytrees. :class:`Setting` fixes shapes and is
a static (hashable) argument; instances, policies and keys are traced.

Demands live on a grid: every demand is a multiple of ``demand_unit = max_demand /
demand_levels`` of capacity, so that utilisation can be tracked exactly on a grid of
``grid_size = 1 / demand_unit`` steps (K = 1), which the exact expected welfare and the exact
certificate need.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from advonline.errors import InputError
from advonline.preflight import as_float
from advonline.problem import setting_from_table

#: The widest range of densities, ``U / L``, a user's setting may span. The certificate's
#: induction carries values from ``L`` to ``U`` in float64; measured worst cases stay at or
#: below it up to ``U / L = 1e14``, and at ``1e15`` they do not.
MOST_THETA = 1e12
#: Where the densities, and a buyer's value (a density times a capacity), may lie: inside
#: float32's normal numbers, which training computes in.
DENSITY_RANGE = (1e-30, 1e30)


class SettingError(InputError):
    """A setting that does not describe a valid posted-price problem. Its problems are
    templates naming the setting's fields as ``{low}``, ``{max_demand}``, ...; the message
    names them as the config file does (:data:`FIELD_NAMES`), and :meth:`naming` phrases them
    with other names (the command line's flags)."""

    def __init__(self, problems: list[str] | str) -> None:
        if isinstance(problems, str):  # a message naming no field
            problems = [problems.replace("{", "{{").replace("}", "}}")]
        self.problems = list(problems)
        super().__init__(self.naming(FIELD_NAMES))

    def naming(self, names: dict[str, str]) -> str:
        """The message with each field called by ``names`` (its config key when not there)."""
        return "; ".join(problem.format_map({**FIELD_NAMES, **names}) for problem in self.problems)


#: The setting's fields as a config file's ``[setting]`` table names them.
FIELD_NAMES = {
    name: name
    for name in (
        "resources", "low", "high", "rounds", "max_demand", "demand_levels", "capacities"
    )
}  # fmt: skip


def within_range(setting: Setting) -> Setting:
    """``setting`` if its densities lie where the figures hold (:data:`MOST_THETA`,
    :data:`DENSITY_RANGE`), else SettingError: checked where a user's setting is read, not in
    the settings built from it (a bundle's widened range ``[L, K U]``)."""
    least, most = DENSITY_RANGE
    got = f"got L={setting.low}, U={setting.high}"
    if setting.theta > MOST_THETA:
        problem = f"{{high}} / {{low}} must be at most {MOST_THETA:g}, {got}"
    elif not least <= setting.low < setting.high <= most:
        problem = f"{{low}} and {{high}} must lie in [{least:g}, {most:g}], {got}"
    elif not least <= setting.value_unit <= setting.high * max(setting.capacities) <= most:
        problem = (
            f"a buyer's value (a density times a capacity) must lie in [{least:g}, {most:g}], "
            f"{got}, {{capacities}}={list(setting.capacities)}"
        )
    else:
        return setting
    raise SettingError([problem])


#: The largest utilisation grid G: amounts are counted in grid units as int32
#: (:func:`demand_units`).
MOST_GRID = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Setting:
    """Static description of a posted-price problem; hashable, so it can be a jit static arg."""

    resources: int = 1  # K, number of resource types
    low: float = 1.0  # L, lowest value density
    high: float = 10.0  # U, highest value density
    rounds: int = 200  # T, buyers per instance
    max_demand: float = 0.01  # largest demand of one resource, as a fraction of capacity
    demand_levels: int = 1  # demands are j * max_demand / demand_levels, j = 1..demand_levels
    divisible: bool = True  # buyers take what is left (True) or all-or-nothing (False)
    capacities: tuple[float, ...] = (1.0,)  # C_k, one per resource

    def __post_init__(self) -> None:
        problems = []
        if self.resources < 1:
            problems.append(f"{{resources}} must be >= 1, got {self.resources}")
        if not (math.isfinite(self.low) and self.low > 0):
            problems.append(f"{{low}} (density L) must be a positive number, got {self.low}")
        if not (math.isfinite(self.high) and self.high > self.low):
            problems.append(f"{{high}} (density U) must exceed L, got L={self.low}, U={self.high}")
        if self.rounds < 1:
            problems.append(f"{{rounds}} must be >= 1, got {self.rounds}")
        if not (0 < self.max_demand <= 1):
            problems.append(f"{{max_demand}} must lie in (0, 1], got {self.max_demand}")
        if self.demand_levels < 1:
            problems.append(f"{{demand_levels}} must be >= 1, got {self.demand_levels}")
        if len(self.capacities) != self.resources:
            problems.append(
                f"need {self.resources} {{capacities}}, one per resource, got "
                f"{len(self.capacities)}"
            )
        if any(not (math.isfinite(c) and c > 0) for c in self.capacities):
            problems.append(f"{{capacities}} must be positive, got {list(self.capacities)}")
        if not problems:
            grid = as_float(self.demand_levels) / self.max_demand
            if grid > MOST_GRID:
                problems.append(
                    f"{{demand_levels}} / {{max_demand}} (the utilisation grid) must be at most "
                    f"{MOST_GRID} (grid units are int32); got {self.demand_levels} / "
                    f"{self.max_demand}"
                )
            elif abs(grid - round(grid)) > 1e-9 * grid:
                problems.append(
                    "{demand_levels} / {max_demand} must be a whole number (the utilisation "
                    f"grid); got {self.demand_levels} / {self.max_demand}"
                )
        if problems:
            raise SettingError(problems)

    @staticmethod
    def from_config(section: dict) -> Setting:
        """The setting a config's ``[setting]`` table describes (capacity 1 for each
        resource where it names none)."""
        if isinstance(section, dict) and "capacities" not in section:
            resources = section.get("resources", 1)
            whole = isinstance(resources, int) and not isinstance(resources, bool)
            if whole and 0 < resources <= 64:
                section = {**section, "capacities": [1.0] * resources}
        return within_range(setting_from_table(Setting, section, SettingError))

    @property
    def theta(self) -> float:
        """U / L."""
        return self.high / self.low

    @property
    def value_unit(self) -> float:
        """L times the smallest capacity: the scale of buyers' values, to which the exact
        programmes' tolerances are relative (so a ratio is the same at every scale)."""
        return self.low * min(self.capacities)

    @property
    def grid_size(self) -> int:
        """G: capacity is G demand units; utilisation lives on {0, 1/G, ..., 1}."""
        return round(self.demand_levels / self.max_demand)

    @property
    def demand_unit(self) -> float:
        """Smallest demand, as a fraction of capacity (1 / G)."""
        return 1.0 / self.grid_size

    def describe(self) -> dict:
        """JSON-ready description, printed beside every reported ratio."""
        return {
            "problem": "posted-price",
            "resources": self.resources,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "max_demand": self.max_demand,
            "demand_levels": self.demand_levels,
            "divisible": self.divisible,
            "capacities": list(self.capacities),
        }


@struct.dataclass
class Observation:
    """What a pricing policy sees before a buyer arrives."""

    utilisation: jax.Array  # [K] used / capacity, in [0, 1]
    round_fraction: jax.Array  # [] t / T, in [0, 1)


@struct.dataclass
class PriceDistribution:
    """Unit prices per resource as a distribution over A atoms (A = 1: deterministic)."""

    prices: jax.Array  # [K, A] unit price of each atom
    probs: jax.Array  # [K, A] probability of each atom, rows sum to 1

    @staticmethod
    def deterministic(prices: jax.Array) -> PriceDistribution:
        """A point mass on ``prices`` ``[K]``."""
        prices = jnp.asarray(prices)
        return PriceDistribution(prices=prices[:, None], probs=jnp.ones_like(prices)[:, None])


class Policy(Protocol):
    """Every pricing algorithm, learned or classic: ``policy(observation) -> PriceDistribution``.

    ``deterministic`` is a static attribute telling whether every output is a point mass. A
    policy with a ``draw_member(key) -> Policy`` method is a mixture chosen once per input:
    :func:`rollout` draws the member before the first round and plays it all along.
    """

    deterministic: bool

    def __call__(self, observation: Observation) -> PriceDistribution: ...


@struct.dataclass
class Buyer:
    """One buyer: bundle value and demand vector."""

    value: jax.Array  # [] b_t
    demand: jax.Array  # [K] d_t, fractions of capacity; all zero means "nobody came"


class AdversaryView(NamedTuple):
    """What a state-conditioned buyer source may look at when writing buyer t.

    Against a deterministic policy an oblivious adversary can compute all of it itself; against
    a randomised one, a source that reads it is adaptive (stronger than oblivious).
    """

    round: jax.Array  # [] int32 t
    alg_used: jax.Array  # [K] what the algorithm has sold so far (capacity units)
    unit_prices: jax.Array  # [K] the prices posted for buyer t


class BuyerSource(Protocol):
    """Writes buyer t, possibly from the algorithm's state: ``source(view) -> Buyer``."""

    def __call__(self, view: AdversaryView) -> Buyer: ...


@struct.dataclass
class Instance:
    """A fixed buyer sequence; as a :class:`BuyerSource` it ignores the state."""

    values: jax.Array  # [T] bundle values b_t
    demands: jax.Array  # [T, K] demand vectors d_t

    def __call__(self, view: AdversaryView) -> Buyer:
        return Buyer(value=self.values[view.round], demand=self.demands[view.round])

    @property
    def densities(self) -> jax.Array:
        """[T] value per unit of total demand (0 where nobody came)."""
        total = self.demands.sum(-1)
        return jnp.where(total > 0, self.values / jnp.where(total > 0, total, 1), 0)


class Sale(NamedTuple):
    """What happened in one round."""

    fraction: jax.Array  # [] x_t, share of the bundle sold
    welfare: jax.Array  # [] b_t x_t
    revenue: jax.Array  # [] (p_t . d_t) x_t


def default_dtype(dtype=None):
    """``dtype``, or JAX's default float (float64 inside ``jax.enable_x64(True)``)."""
    return jnp.dtype(jnp.result_type(float) if dtype is None else dtype)


def widened_probs(probs: jax.Array, dtype) -> jax.Array:
    """Probabilities ``[..., A]`` in ``dtype``; where ``dtype`` is wider than theirs, each
    row is renormalised there, so that a float64 table of a float32 network's distributions
    sums to 1 to float64's rounding, not float32's (a certificate's expectation weighs every
    atom by them)."""
    wide = probs.astype(dtype)
    if jnp.finfo(dtype).bits <= jnp.finfo(probs.dtype).bits:
        return wide
    return wide / jnp.sum(wide, axis=-1, keepdims=True)


def capacity_tolerance(dtype) -> float:
    """Slack for 'the bundle fits' on a demand grid summed in floating point."""
    return math.sqrt(float(jnp.finfo(dtype).eps))


def within_rounding(resources: int, dtype) -> float:
    """The factor a bundle price is multiplied by before ``b_t >= p_t . d_t`` (ties buy). For
    K >= 2 the price is a sum of K products and a value is a density times a summed demand,
    so a buyer whose density equals every unit price can fall short of the price by rounding
    (by at most ``K`` machine epsilons, every term being positive; a price per unit of demand,
    ``p . d / |d|``, by ``K + 1/2``): ``4 (K - 1)`` epsilons below the price count as a tie. For
    K = 1 both sides are one product and the factor is 1."""
    return 1.0 - 4 * (resources - 1) * float(jnp.finfo(dtype).eps)


def purchase(setting: Setting, used: jax.Array, unit_prices: jax.Array, buyer: Buyer) -> Sale:
    """The buyer's decision against posted ``unit_prices`` ``[K]`` with ``used`` ``[K]`` sold."""
    capacities = jnp.asarray(setting.capacities, dtype=used.dtype)
    bundle_price = jnp.dot(unit_prices, buyer.demand)
    asked = bundle_price * within_rounding(setting.resources, bundle_price.dtype)
    wants = (buyer.value >= asked) & (buyer.demand.sum() > 0)
    remaining = capacities - used
    if setting.divisible:
        asks = buyer.demand > 0
        room = jnp.where(asks, remaining / jnp.where(asks, buyer.demand, 1), jnp.inf)
        fits = jnp.clip(room.min(), 0, 1)
    else:
        slack = capacity_tolerance(used.dtype) * capacities
        fits = jnp.all(buyer.demand <= remaining + slack).astype(used.dtype)
    fraction = jnp.where(wants, fits, 0).astype(used.dtype)
    return Sale(fraction=fraction, welfare=buyer.value * fraction, revenue=bundle_price * fraction)


def one_resource(setting: Setting, widened: bool = False) -> Setting:
    """One resource of ``setting`` alone: the same rounds, prices and demand levels, its first
    capacity. ``widened``: its densities ``[L, K U]`` instead, what a bundle of every resource
    is worth per unit of any one of them (a bundle of density d: ``K d``): the one-resource
    game that bundles and one resource's own buyers play
    (:func:`~posted_price.bundle_bound.widened`)."""
    high = setting.resources * setting.high if widened else setting.high
    return dataclasses.replace(setting, resources=1, high=high, capacities=setting.capacities[:1])


def observe(setting: Setting, used: jax.Array, round_index: jax.Array) -> Observation:
    """The policy's observation for round ``round_index`` after selling ``used`` ``[K]``."""
    capacities = jnp.asarray(setting.capacities, dtype=used.dtype)
    return Observation(
        utilisation=used / capacities,
        round_fraction=(round_index / setting.rounds).astype(used.dtype),
    )


def price_quantiles(distribution: PriceDistribution, quantile: jax.Array) -> jax.Array:
    """Atom index ``[..., K]`` of each resource at ``quantile`` ``[...]`` in [0, 1): the first
    atom whose cumulative probability exceeds it (the inverse CDF)."""
    cumulative = jnp.cumsum(distribution.probs, axis=-1)  # [K, A]
    below = cumulative <= quantile[..., None, None]  # [..., K, A]
    return jnp.minimum(below.sum(-1), distribution.probs.shape[-1] - 1)


def sample_prices(distribution: PriceDistribution, key: jax.Array) -> jax.Array:
    """Draw one unit price per resource ``[K]`` (no randomness used for point masses).

    Each resource's price follows its own row of ``probs``; with several resources the rows
    are coupled through **one shared quantile** (comonotone): the K prices are the inverse
    CDFs at one uniform draw, so a bundle meets all its resources cheap together or none.
    Independent draws would let a bundle buy at the low prices only with the *product* of the
    per-resource probabilities, which an adversary exploits with low-density bundles (the
    first K = 2 runs measured 51.7 on such a staircase). One resource: a categorical draw
    (the same law; kept so that K = 1 random streams are unchanged).
    """
    if distribution.prices.shape[-1] == 1:
        return distribution.prices[:, 0]
    if distribution.prices.shape[0] == 1:
        atoms = jax.random.categorical(key, jnp.log(distribution.probs), axis=-1)
    else:
        atoms = price_quantiles(distribution, jax.random.uniform(key))
    return jnp.take_along_axis(distribution.prices, atoms[:, None], axis=-1)[:, 0]


class Rollout(NamedTuple):
    """A simulated episode; ``instance`` is the buyer sequence that was actually written."""

    welfare: jax.Array  # [] sum_t b_t x_t
    revenue: jax.Array  # [] sum_t (p_t . d_t) x_t
    instance: Instance  # realised buyers: values [T], demands [T, K]
    fractions: jax.Array  # [T] x_t
    unit_prices: jax.Array  # [T, K] posted prices
    final_used: jax.Array  # [K]

    def used_before(self) -> jax.Array:
        """``[..., T, K]``: what had been sold when each buyer arrived (also for a batch)."""
        sold = self.fractions[..., None] * self.instance.demands
        return jnp.cumsum(sold, axis=-2) - sold


class _Carry(NamedTuple):
    used: jax.Array  # [K]
    welfare: jax.Array  # []
    revenue: jax.Array  # []


class _Round(NamedTuple):
    buyer: Buyer
    fraction: jax.Array
    unit_prices: jax.Array


def rollout(
    setting: Setting,
    policy: Policy,
    source: BuyerSource,
    key: jax.Array,
    dtype=None,
    start_round: jax.Array | int = 0,
    start_used: jax.Array | None = None,
) -> Rollout:
    """Play one episode of ``setting.rounds`` buyers: ``lax.scan`` over rounds.

    This is the project's only rollout loop: training, evaluation and baselines all call it
    (``vmap`` it over sources and keys for a batch). One key per round, each used once (a
    mixture's member draw takes its own key first).

    A continuation (what the policy earns from a state on) starts at round ``start_round``
    with ``start_used`` ``[K]`` already sold: nobody comes before that round.
    """
    dtype = default_dtype(dtype)
    zero = jnp.zeros((), dtype)
    draw_member = getattr(policy, "draw_member", None)
    if draw_member is not None:  # a mixture chosen once per input (advonline/mixture.py)
        key, key_member = jax.random.split(key)
        policy = draw_member(key_member)

    def play_round(carry: _Carry, inputs: tuple[jax.Array, jax.Array]):
        round_index, key_round = inputs
        distribution = policy(observe(setting, carry.used, round_index))
        unit_prices = sample_prices(distribution, key_round).astype(dtype)
        buyer = source(AdversaryView(round_index, carry.used, unit_prices))
        came = round_index >= start_round
        buyer = Buyer(
            value=jnp.where(came, buyer.value, 0).astype(dtype),
            demand=jnp.where(came, buyer.demand, 0).astype(dtype),
        )
        sale = purchase(setting, carry.used, unit_prices, buyer)
        carry = _Carry(
            used=carry.used + sale.fraction * buyer.demand,
            welfare=carry.welfare + sale.welfare,
            revenue=carry.revenue + sale.revenue,
        )
        return carry, _Round(buyer, sale.fraction, unit_prices)

    used = jnp.zeros(setting.resources, dtype) if start_used is None else start_used.astype(dtype)
    start = _Carry(used=used, welfare=zero, revenue=zero)
    rounds = jnp.arange(setting.rounds, dtype=jnp.int32)
    final, history = jax.lax.scan(
        play_round, start, (rounds, jax.random.split(key, setting.rounds))
    )
    return Rollout(
        welfare=final.welfare,
        revenue=final.revenue,
        instance=Instance(values=history.buyer.value, demands=history.buyer.demand),
        fractions=history.fraction,
        unit_prices=history.unit_prices,
        final_used=final.used,
    )


def simulate(
    setting: Setting, policy: Policy, sources: BuyerSource, keys: jax.Array, dtype=None
) -> Rollout:
    """:func:`rollout` vmapped over a batch of sources (leading axis) and keys ``[B]``."""
    return _simulate_jit(setting, policy, sources, keys, default_dtype(dtype))


def repeat_each(batch, times: int):
    """Each member of a pytree batch (leading axis) ``times`` times in a row."""
    return jax.tree.map(lambda leaf: jnp.repeat(leaf, times, axis=0), batch)


def mean_welfare(
    setting: Setting, policy: Policy, instances: Instance, key: jax.Array, samples: int, dtype=None
) -> jax.Array:
    """Welfare ``[B]`` of :func:`simulate` on each instance: one run for a deterministic policy
    (exact), else the mean of ``samples`` runs, one key each."""
    runs_each = 1 if policy.deterministic else samples
    count = instances.values.shape[0]
    runs = simulate(
        setting,
        policy,
        repeat_each(instances, runs_each),
        jax.random.split(key, count * runs_each),
        dtype,
    )
    return runs.welfare.reshape(count, runs_each).mean(-1)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _simulate_jit(setting, policy, sources, keys, dtype):
    return jax.vmap(rollout, in_axes=(None, None, 0, 0, None))(
        setting, policy, sources, keys, dtype
    )


@functools.partial(jax.jit, static_argnums=(0, 2))
def price_table(setting: Setting, policy: Policy, dtype=None) -> PriceDistribution:
    """The policy on the K = 1 utilisation grid: prices, probs ``[T, G + 1, A]``.

    Entry ``[t, u]`` is the distribution posted in round t after selling u demand units.
    One compiled programme per setting, policy class and dtype (policies are pytrees), so a
    table made between training steps is not dispatched operation by operation.
    """
    if setting.resources != 1:
        raise SettingError("the utilisation-grid table needs one resource (K = 1)")
    dtype = default_dtype(dtype)
    grid = setting.grid_size
    used = jnp.arange(grid + 1, dtype=dtype)[:, None] * setting.capacities[0] / grid
    rounds = jnp.arange(setting.rounds, dtype=jnp.int32)

    def at(round_index, used_k):
        distribution = policy(observe(setting, used_k, round_index))
        return distribution.prices[0].astype(dtype), widened_probs(distribution.probs[0], dtype)

    prices, probs = jax.vmap(jax.vmap(at, in_axes=(None, 0)), in_axes=(0, None))(rounds, used)
    return PriceDistribution(prices=prices, probs=probs)


@struct.dataclass
class TablePolicy:
    """A K = 1 policy given by its :func:`price_table` (``[T, G + 1, A]``): posts entry
    ``[t, u]`` in round t after u grid units are sold. On the grid it is the policy the table
    was made from, with the network evaluated once per state instead of once per visit."""

    table: PriceDistribution
    grid: int = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, observation: Observation) -> PriceDistribution:
        rounds = self.table.prices.shape[0]
        round_index = jnp.round(observation.round_fraction * rounds).astype(jnp.int32)
        units = jnp.round(observation.utilisation[0] * self.grid).astype(jnp.int32)
        return PriceDistribution(
            prices=self.table.prices[round_index, units][None],
            probs=self.table.probs[round_index, units][None],
        )


def demand_units(setting: Setting, demands: jax.Array) -> jax.Array:
    """Amounts ``[..., K]`` of each resource (demands, or what was sold) as whole grid units,
    int32."""
    capacities = jnp.broadcast_to(jnp.asarray(setting.capacities, demands.dtype), demands.shape)
    return jnp.round(demands / capacities * setting.grid_size).astype(jnp.int32)


def expected_welfare_exact(setting: Setting, policy: Policy, instance: Instance) -> jax.Array:
    """Exact E[welfare] of a (randomised) K = 1 policy on one instance, by backward induction
    (:func:`continuation`). Zero variance, O(T G A); differentiable in the policy."""
    table = price_table(setting, policy, instance.values.dtype)
    return continuation(setting, sell_probability(table, instance), instance).first[0]


def accepts(unit_prices: jax.Array, buyer: Buyer) -> jax.Array:
    """K = 1: whether the buyer accepts each unit price ``[...]`` (the rule of :func:`purchase`;
    whether the bundle fits is separate)."""
    return (buyer.value >= unit_prices * buyer.demand[0]) & (buyer.demand[0] > 0)


def sell_probability(table: PriceDistribution, instance: Instance) -> jax.Array:
    """``[T, G + 1]`` probability that buyer t accepts the price posted after u units are sold."""

    def at_round(prices, probs, value, demand):  # [G+1, A] x2, [], [1]
        return jnp.sum(probs * accepts(prices, Buyer(value=value, demand=demand)), axis=-1)

    return jax.vmap(at_round)(table.prices, table.probs, instance.values, instance.demands)


def look_ahead(values: jax.Array, ahead: jax.Array, most: int) -> jax.Array:
    """``values[min(u + ahead[u], G)]`` ``[G + 1]`` for offsets ``ahead`` in ``0..most``
    (static), without a gather: one static shift per offset, selected elementwise. A sale
    moves utilisation by at most ``demand_levels`` units, so the shifts are few; a gather (and
    the scatter-add its derivative is) costs far more per element on a CPU than a shift does.
    """
    picked = values
    for offset in range(1, most + 1):
        edge = jnp.broadcast_to(values[-1:], (min(offset, values.shape[0]),))
        shifted = jnp.concatenate([values[offset:], edge])
        picked = jnp.where(ahead == offset, shifted, picked)
    return picked


class SaleTable(NamedTuple):
    """K = 1: what a buyer who accepts buys after u units are sold, for every demand level."""

    fraction: jax.Array  # [D + 1, G + 1] the fraction of its demand served (purchase's rule)
    sold_units: jax.Array  # [D + 1, G + 1] int32, the grid units that sale takes


def sale_table(setting: Setting, dtype) -> SaleTable:
    """:class:`SaleTable` from :func:`purchase` for demands of 0..``demand_levels`` grid
    units. A sale depends on the buyer's demand and the state only (price zero: it accepts),
    so one small table serves every round: recomputing the sale per round and state was most
    of the backward induction's time on a CPU."""
    grid, capacity = setting.grid_size, setting.capacities[0]
    used_units = jnp.arange(grid + 1)
    used = used_units.astype(dtype) * capacity / grid

    def of_level(level):
        demand = (level * capacity / grid).astype(dtype)[None]
        buyer = Buyer(value=jnp.ones((), dtype), demand=demand)
        sale = jax.vmap(purchase, in_axes=(None, 0, None, None))(
            setting, used[:, None], jnp.zeros(1, dtype), buyer
        )
        sold_units = jnp.round(sale.fraction * level).astype(jnp.int32)
        return SaleTable(sale.fraction, jnp.clip(sold_units, 0, grid - used_units))

    return jax.vmap(of_level)(jnp.arange(setting.demand_levels + 1))


class Continuation(NamedTuple):
    """Exact values of a K = 1 policy on one instance, over (round t, utilisation units u)."""

    first: jax.Array  # [G + 1] V_0(u); V_0(0) is the instance's expected welfare
    sale_gain: jax.Array  # [T, G + 1] G_t(u) = b_t x(u) + V_{t+1}(u + s(u)) - V_{t+1}(u)


def continuation(
    setting: Setting, sell_prob: jax.Array, instance: Instance, types: jax.Array | None = None
) -> Continuation:
    """Backward induction over (t, u): ``V_T = 0``,
    ``V_t(u) = V_{t+1}(u) + p_t(u) [b_t x(u) + V_{t+1}(u + s(u)) - V_{t+1}(u)]``
    with ``p = sell_prob`` ``[T, G + 1]`` and the sale ``x(u)`` (fraction), ``s(u)`` (units) of
    :func:`purchase` (:func:`sale_table`). Needs demands on the setting's grid.

    Given the instance's buyer ``types`` ``[T]``, ``sell_prob`` is a table over types
    ``[T, types, G + 1]`` and round t reads its row ``types[t]`` inside the loop: a batch of
    typed instances (vmapped) then never writes out its sale probabilities ``[T, B, G + 1]``,
    which took about half of a local-search step's time on a CPU.
    """
    dtype = instance.values.dtype
    table = sale_table(setting, dtype)
    levels = demand_units(setting, instance.demands)[:, 0]  # [T]

    def back(value_next: jax.Array, inputs) -> tuple[jax.Array, jax.Array]:
        sell, value, level = inputs  # [G+1] (or (round, type)), [], []
        if types is not None:
            sell = sell_prob[sell[0], sell[1]]
        welfare = value * table.fraction[level]  # purchase's welfare: value times fraction
        ahead = look_ahead(value_next, table.sold_units[level], setting.demand_levels)
        gain = welfare + ahead - value_next
        return value_next + sell * gain, gain

    sell_prob = sell_prob.astype(dtype)
    sells = sell_prob if types is None else (jnp.arange(setting.rounds), types)
    inputs = (sells, instance.values, levels)
    start = jnp.zeros(setting.grid_size + 1, dtype)
    first, gains = jax.lax.scan(back, start, inputs, reverse=True)
    return Continuation(first=first, sale_gain=gains)


def welfare_and_sale_weight(
    setting: Setting, sell_prob: jax.Array, instance: Instance
) -> tuple[jax.Array, jax.Array]:
    """The expected welfare ``V_0(0)`` and its derivative with respect to every state's sale
    probability ``[T, G + 1]``: ``dV_0(0) / dp_t(u) = P(s_t = u) G_t(u)``, the probability of
    reaching u units sold at round t times what a sale adds there, because ``V_0(0)`` is linear
    in ``V_t`` with the state probabilities as coefficients.

    The state probabilities come from a forward pass that is the transpose of the backward
    induction: where the backward pass looks ``s(u)`` units ahead (:func:`look_ahead`), the
    forward pass pushes the probability of selling there the same units ahead (its linear
    transpose), so the dynamics are written once. (Reverse-mode autodiff through
    :func:`continuation` gives the same numbers, ``tests/test_game.py``, about 15% slower.)
    """
    dtype = instance.values.dtype
    following = continuation(setting, sell_prob, instance)
    sold_units = sale_table(setting, dtype).sold_units
    levels = demand_units(setting, instance.demands)[:, 0]  # [T]

    def push_ahead(mass: jax.Array, ahead: jax.Array) -> jax.Array:
        shift = functools.partial(look_ahead, ahead=ahead, most=setting.demand_levels)
        return jax.linear_transpose(shift, mass)(mass)[0]

    def forward(reached: jax.Array, inputs) -> tuple[jax.Array, jax.Array]:
        sell, level, gain = inputs  # [G+1], [], [G+1]
        selling = reached * sell
        reached_next = reached - selling + push_ahead(selling, sold_units[level])
        return reached_next, reached * gain

    start = jnp.zeros(setting.grid_size + 1, dtype).at[0].set(1)
    inputs = (sell_prob.astype(dtype), levels, following.sale_gain)
    _, weight = jax.lax.scan(forward, start, inputs)
    return following.first[0], weight
