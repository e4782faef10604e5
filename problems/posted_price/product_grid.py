"""Exact expected welfare for any K on the product utilisation grid.

With K resources the algorithm's state before buyer t is the round and what it has sold of
each resource. When every demand is a multiple of ``capacity / G`` on each resource and a
partly served buyer (divisible) takes the same whole number of units on every resource it
asks for (a balanced bundle, or one resource alone: the demand vectors the adversaries
write, :mod:`posted_price.buyer_types`), what has been sold stays on the grid ``{0, ..., G}^K``:
``S = (G + 1)^K`` states (441 for K = 2 and G = 20). The expected welfare of a randomised
policy on a fixed instance is then exact by backward induction over (round, state), as for
K = 1 (:func:`~posted_price.model.continuation`, which this generalises):

``V_T = 0``, ``V_t(s) = V_{t+1}(s) + p_t(s) [b_t x_t(s) + V_{t+1}(s'_t(s)) - V_{t+1}(s)]``

with ``x_t(s)`` and ``s'_t(s)`` the sale of :func:`~posted_price.model.purchase` in state
``s`` and ``p_t(s)`` the chance that buyer t accepts the prices posted there.

**Prices drawn by one shared quantile.** The K prices are the inverse CDFs of the K
distributions at one uniform draw ``q`` (:func:`~posted_price.model.sample_prices`). The
cumulative probabilities of all K distributions cut ``[0, 1)`` into at most ``K A``
intervals (:func:`quantile_intervals`); on each the K atoms are fixed, so the bundle price is
too, and ``p_t(s)`` is the total width of the intervals where the buyer accepts. The widths
are differences of the sorted cumulative probabilities: differentiable in the policy.

Everything here is a pure JAX function (jit- and vmap-able).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.problems.posted_price.model import (
    Buyer,
    Observation,
    Policy,
    PriceDistribution,
    Setting,
    default_dtype,
    demand_units,
    observe,
    purchase,
    widened_probs,
    within_rounding,
)


def state_count(setting: Setting) -> int:
    """``S = (G + 1)^K`` grid states."""
    return (setting.grid_size + 1) ** setting.resources


def grid_units(setting: Setting) -> np.ndarray:
    """``[S, K]`` int32: the units sold of each resource in every state; state ``s`` is the
    row-major index of its units (:func:`state_index`), state 0 is nothing sold."""
    shape = (setting.grid_size + 1,) * setting.resources
    return np.stack(np.unravel_index(np.arange(state_count(setting)), shape), -1).astype(np.int32)


def state_index(setting: Setting, units: jax.Array) -> jax.Array:
    """The state ``[...]`` (int32) of units sold ``[..., K]`` (row-major)."""
    strides = (setting.grid_size + 1) ** np.arange(setting.resources - 1, -1, -1)
    return (units @ jnp.asarray(strides, jnp.int32)).astype(jnp.int32)


def grid_price_table(setting: Setting, policy: Policy, dtype=None) -> PriceDistribution:
    """The policy in every (round, state): prices, probs ``[T, S, K, A]``."""
    dtype = default_dtype(dtype)
    capacities = np.asarray(setting.capacities)
    used = jnp.asarray(grid_units(setting) * capacities / setting.grid_size, dtype)  # [S, K]
    rounds = jnp.arange(setting.rounds, dtype=jnp.int32)

    def at(round_index, used_s):
        distribution = policy(observe(setting, used_s, round_index))
        return distribution.prices.astype(dtype), widened_probs(distribution.probs, dtype)

    prices, probs = jax.vmap(jax.vmap(at, in_axes=(None, 0)), in_axes=(0, None))(rounds, used)
    return PriceDistribution(prices=prices, probs=probs)


def lift_table(setting: Setting, table: PriceDistribution) -> PriceDistribution:
    """A one-resource table ``[T, G + 1, A]`` posted on every resource of ``setting`` at once:
    in grid state s resource k posts row ``[t, units_k(s)]``, its own units sold, so the grid
    table is ``[T, S, K, A]`` (:func:`grid_price_table`'s shape). One shared quantile draws
    every resource's price, and a bundle's price is the sum over the resources it asks for."""
    units = jnp.asarray(grid_units(setting))  # [S, K]
    return PriceDistribution(prices=table.prices[:, units], probs=table.probs[:, units])


class QuantileIntervals(NamedTuple):
    """The shared quantile's range cut where any resource's atom changes."""

    widths: jax.Array  # [..., I] the chance of each interval (sums to 1)
    prices: jax.Array  # [..., I, K] the unit prices posted on it


def quantile_intervals(table: PriceDistribution) -> QuantileIntervals:
    """:class:`QuantileIntervals` of distributions ``[..., K, A]``: for K = 1 the atoms
    themselves (``I = A``); otherwise ``I = K A`` intervals between the sorted cumulative
    probabilities, each priced at the atoms :func:`~posted_price.model.price_quantiles`
    picks at its left end (some intervals are empty: width 0)."""
    probs, prices = table.probs, table.prices
    resources, atoms = probs.shape[-2:]
    if resources == 1:
        return QuantileIntervals(probs[..., 0, :], prices[..., 0, :, None])
    cumulative = jnp.cumsum(probs, axis=-1)  # [..., K, A]
    ends = jnp.sort(cumulative.reshape(*cumulative.shape[:-2], resources * atoms), axis=-1)
    starts = jnp.concatenate([jnp.zeros_like(ends[..., :1]), ends[..., :-1]], -1)  # [..., I]
    below = jax.lax.stop_gradient(cumulative[..., None, :, :] <= starts[..., :, None, None])
    atom = jnp.minimum(below.sum(-1), atoms - 1)  # [..., I, K]
    posted = jnp.take_along_axis(prices[..., None, :, :], atom[..., None], axis=-1)[..., 0]
    return QuantileIntervals(jnp.maximum(ends - starts, 0), posted)


def acceptance(intervals: QuantileIntervals, buyer: Buyer) -> jax.Array:
    """The chance ``[...]`` that ``buyer`` accepts the prices the shared quantile draws
    (the rule of :func:`~posted_price.model.purchase`: ``value >= prices . demand``)."""
    bundle = intervals.prices @ buyer.demand.astype(intervals.prices.dtype)  # [..., I]
    bundle = bundle * within_rounding(buyer.demand.shape[-1], bundle.dtype)
    accepted = (buyer.value >= bundle) & (buyer.demand.sum() > 0)
    return jnp.sum(jnp.where(accepted, intervals.widths, 0), -1)


class Transitions(NamedTuple):
    """What a buyer who accepts buys in every state, for a list of demand vectors."""

    fraction: jax.Array  # [J, S] the share of its demand served (purchase's rule)
    following: jax.Array  # [J, S] int32 the state after that sale


def grid_transitions(setting: Setting, demands: jax.Array) -> Transitions:
    """:class:`Transitions` of demand vectors ``[J, K]`` (on the grid; a zero vector is
    nobody: it buys nothing), from :func:`~posted_price.model.purchase` at price zero."""
    dtype = demands.dtype
    units = jnp.asarray(grid_units(setting))  # [S, K]
    used = units.astype(dtype) * jnp.asarray(setting.capacities, dtype)[None] / setting.grid_size

    def of_demand(demand):
        buyer = Buyer(value=jnp.ones((), dtype), demand=demand)
        prices = jnp.zeros(setting.resources, dtype)
        sale = jax.vmap(purchase, in_axes=(None, 0, None, None))(setting, used, prices, buyer)
        taken = demand_units(setting, sale.fraction[:, None] * demand[None, :])  # [S, K]
        after = jnp.minimum(units + taken, setting.grid_size)
        return sale.fraction, state_index(setting, after)

    fraction, following = jax.vmap(of_demand)(demands)
    return Transitions(fraction, following)


def grid_welfare(
    sell: jax.Array,
    values: jax.Array,
    fraction: jax.Array,
    following: jax.Array,
    types: jax.Array | None = None,
    levels: jax.Array | None = None,
) -> jax.Array:
    """Exact expected welfare from state 0 by backward induction (module docstring): the
    chance ``sell`` ``[T, S]`` that buyer t accepts in state s, its value ``[T]``, and the sale
    it makes there (``fraction``, ``following``, ``[T, S]``).

    Given the instance's buyer ``types`` and demand ``levels`` ``[T]``, ``sell`` is a table
    over types ``[T, types, S]`` and ``fraction``, ``following`` tables over demand levels
    ``[L, S]``, and round t reads its rows inside the loop (as
    :func:`~posted_price.model.continuation` does): a vmapped batch then never writes out
    ``[T, B, S]`` tables."""

    def back(value_next, inputs):
        value_t, rows = inputs
        if types is None:
            sell_t, fraction_t, following_t = rows
        else:
            t, type_t, level_t = rows
            sell_t, fraction_t, following_t = sell[t, type_t], fraction[level_t], following[level_t]
        gain = value_t * fraction_t + value_next[following_t] - value_next
        return value_next + sell_t * gain, None

    rows = (sell, fraction, following)
    if types is not None:
        rows = (jnp.arange(values.shape[0]), types, levels)
    start = jnp.zeros(sell.shape[-1], sell.dtype)
    first, _ = jax.lax.scan(back, start, (values, rows), reverse=True)
    return first[0]


def expected_welfare_grid(setting: Setting, policy: Policy, values, demands) -> jax.Array:
    """Exact E[welfare] of ``policy`` on one instance (values ``[T]``, demands ``[T, K]`` on
    the grid, balanced or on one resource) for any K: O(T S (K A + K))."""
    table = grid_price_table(setting, policy, values.dtype)
    intervals = quantile_intervals(table)  # [T, S, I]

    def sell_round(intervals_t, value, demand):
        return acceptance(intervals_t, Buyer(value=value, demand=demand))

    sell = jax.vmap(sell_round)(intervals, values, demands)  # [T, S]
    moves = grid_transitions(setting, demands)
    return grid_welfare(sell, values, moves.fraction, moves.following)


@struct.dataclass
class GridTablePolicy:
    """A policy given by its :func:`grid_price_table` (``[T, S, K, A]``): posts entry
    ``[t, s]`` in round t in grid state s. On the grid it is the policy the table was made
    from, with the network evaluated once per state instead of once per visit."""

    table: PriceDistribution
    setting: Setting = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, observation: Observation) -> PriceDistribution:
        rounds = self.table.prices.shape[0]
        round_index = jnp.round(observation.round_fraction * rounds).astype(jnp.int32)
        units = jnp.round(observation.utilisation * self.setting.grid_size).astype(jnp.int32)
        state = state_index(self.setting, units)
        return PriceDistribution(
            prices=self.table.prices[round_index, state],
            probs=self.table.probs[round_index, state],
        )
