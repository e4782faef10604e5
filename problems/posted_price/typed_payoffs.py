"""Exact payoffs ``E[ALG(I)] / OPT(I)`` of instances written as buyer types, for any K.

The oracles score many instances against one frozen algorithm, so the chance that each buyer
type buys in each state is tabled once per algorithm (:func:`type_sale_table`,
``[T, S, types]``); an instance's sale probabilities are then a gather, and its ``E[ALG]`` one
backward induction: over the K = 1 utilisation grid
(:func:`~posted_price.model.continuation`) or, for K >= 2, the product grid
(:func:`~posted_price.product_grid.grid_welfare`). OPT comes from
:func:`~posted_price.optimum.device_optimum` inside ``jit`` (exact for K = 1 and, up to
rounding, for divisible K = 2; for K >= 3 a primal-feasible lower bound, so a ratio is never
inflated).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from advonline import ratio
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.model import (
    Instance,
    Policy,
    PriceDistribution,
    Setting,
    continuation,
    price_table,
    within_rounding,
)
from advonline.problems.posted_price.product_grid import (
    grid_price_table,
    grid_transitions,
    grid_welfare,
    quantile_intervals,
)


def payoffs_given_sales(
    setting: Setting, sell: jax.Array, instances: Instance, optimum: jax.Array
) -> jax.Array:
    """K = 1 payoffs ``[B]`` from the sale probabilities, round-major ``[T, B, G + 1]`` (the
    layout the backward induction reads fastest: each round's slice is contiguous), 1 where
    OPT = 0: nobody worth serving came."""
    welfare = jax.vmap(
        lambda sell_i, instance: continuation(setting, sell_i, instance).first[0], in_axes=(1, 0)
    )(sell, instances)
    return ratio.payoff(welfare, optimum)


def algorithm_table(setting: Setting, policy: Policy, dtype) -> PriceDistribution:
    """The policy in every state: ``[T, G + 1, A]`` for K = 1
    (:func:`~posted_price.model.price_table`), ``[T, S, K, A]`` for K >= 2
    (:func:`~posted_price.product_grid.grid_price_table`)."""
    if setting.resources == 1:
        return price_table(setting, policy, dtype)
    return grid_price_table(setting, policy, dtype)


@functools.partial(jax.jit, static_argnums=(0, 2))
def type_sale_table(vocabulary: BuyerTypes, table: PriceDistribution, dtype) -> jax.Array:
    """``[T, S, types]``: the chance that a buyer of each type accepts the prices posted in
    each state of ``table`` (:func:`algorithm_table`; 0 for the nobody type).

    Exactly ``sum_i widths[i] [value >= prices_i . demand]`` over the shared quantile's
    intervals (:func:`~posted_price.product_grid.quantile_intervals`; for K = 1 the atoms),
    without comparing every type with every interval in every state (84M comparisons for 129
    types, 64 atoms and 20k states; most of a K = 1 training step on a CPU). Within one demand
    vector the values rise with the density, so the types that accept an interval are those
    from the first whose value reaches its bundle price (a binary search); each interval's
    width is added at that type and summed upwards. Linear in the widths: differentiable.
    """
    if table.probs.ndim == 3:  # K = 1 layout [T, G + 1, A]
        table = PriceDistribution(prices=table.prices[:, :, None], probs=table.probs[:, :, None])
    intervals = quantile_intervals(table)
    widths, prices = intervals.widths.astype(dtype), intervals.prices.astype(dtype)
    values, demands = vocabulary.buyers(dtype)
    rounds, states = (jnp.arange(n) for n in widths.shape[:2])
    per_level = len(vocabulary.demands)
    # type i is density i // J with demand i % J: [J, D] indices, each row's values rising
    members = np.arange(vocabulary.count - 1).reshape(-1, per_level).T
    up_to = jnp.asarray(
        np.arange(members.shape[1] + 1)[:, None] <= np.arange(members.shape[1]), dtype
    )

    def one_demand(level_values_demand):  # [T, S, D]: the types of one demand vector
        level_values, demand = level_values_demand
        asks = (prices @ demand) * within_rounding(demand.shape[-1], dtype)  # [T, S, I]
        first = jnp.searchsorted(level_values, asks, side="left", method="scan_unrolled")
        binned = jnp.zeros((*widths.shape[:2], members.shape[1] + 1), dtype)
        binned = binned.at[rounds[:, None, None], states[None, :, None], first].add(widths)
        return binned @ up_to

    # one demand vector at a time (lax.map): for K = 3 all of them at once would not fit
    by_demand = jax.lax.map(one_demand, (values[members], demands[members[:, 0]]))  # [J, T, S, D]
    sale = jnp.moveaxis(by_demand, 0, -1).reshape(*widths.shape[:2], -1)  # type d * J + j
    return jnp.concatenate([sale, jnp.zeros((*widths.shape[:2], 1), dtype)], axis=-1)  # nobody


def typed_payoffs(
    setting: Setting,
    vocabulary: BuyerTypes,
    sale: jax.Array,
    types: jax.Array,
    optimum: jax.Array,
    differentiable: bool = True,
) -> jax.Array:
    """Exact payoffs ``E[ALG] / OPT`` ``[B]`` of instances given as types ``[B, T]``, for the
    algorithm whose :func:`type_sale_table` is ``sale``.

    With ``differentiable`` each instance's sale probabilities are gathered first
    (``[T, B, S]``), so that the gradient with respect to ``sale`` is one scatter. Without it
    (the searches, which only score) each round's row is read inside the backward induction:
    the same numbers, bit for bit, in a quarter to a half of the time on a CPU; a gradient there
    would carry a copy of the whole table per instance through the loop."""
    dtype = sale.dtype
    instances = vocabulary.instances(types, dtype)
    if differentiable:
        rounds = jnp.arange(setting.rounds)
        sell = jax.vmap(lambda row: sale[rounds, :, row], out_axes=1)(types)  # [T, B, S]
        if setting.resources == 1:
            return payoffs_given_sales(setting, sell, instances, optimum)
    else:
        sell = jnp.swapaxes(sale, 1, 2)  # [T, types, S]: round t reads row types[t]
        if setting.resources == 1:
            welfare = jax.vmap(lambda one, row: continuation(setting, sell, one, row).first[0])(
                instances, types
            )
            return ratio.payoff(welfare, optimum)
    demands = jnp.concatenate(
        [jnp.asarray(vocabulary.demands, dtype), jnp.zeros((1, setting.resources), dtype)]
    )
    moves = grid_transitions(setting, demands)  # [J + 1, S]: the last row is nobody
    level = jnp.where(
        types == vocabulary.nobody, len(vocabulary.demands), types % len(vocabulary.demands)
    )
    if differentiable:

        def gathered(sell_i, values_i, level_i):
            return grid_welfare(sell_i, values_i, moves.fraction[level_i], moves.following[level_i])

        earned = jax.vmap(gathered, in_axes=(1, 0, 0))(sell, instances.values, level)
    else:

        def in_loop(values_i, types_i, level_i):
            return grid_welfare(sell, values_i, moves.fraction, moves.following, types_i, level_i)

        earned = jax.vmap(in_loop)(instances.values, types, level)
    return ratio.payoff(earned, optimum)
