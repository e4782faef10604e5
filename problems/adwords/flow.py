"""The exact offline optimum of budgeted allocation with many advertisers: a maximum flow with
whole-number capacities, solved on the host by SciPy's Dinic algorithm, outside ``jit``;
inside a trace (a jitted search scoring candidates) it joins through ``jax.pure_callback``.

OPT is the maximum flow from a source through the queries (capacity ``b_t`` each) to the
advertisers bidding on them, and from each advertiser to a sink (capacity 1: its budget)
(:mod:`.model`). Every bid is ``b_max l / L`` for a whole ``l``. With ``s`` the smallest whole
number that makes ``s b_max / L`` whole (:func:`capacity_scale`), multiplying every capacity
by ``s`` makes them all whole and scales every feasible flow by ``s``. The maximum flow of the
scaled network, found exactly by an augmenting-path algorithm on whole numbers, divided by
``s``, is therefore the LP's optimum: OPT itself, not a bound. For integral allocation (one
bid level, whole budgets) it is the integral optimum as well, since a maximum flow with whole
capacities is attained by a whole flow.

Where ``b_max / L`` is no ratio of whole numbers up to :data:`MOST_SCALE` (say ``b_max = pi /
10``), :func:`capacity_scale` is None and the model keeps its feasible flow.

**Most inputs need no flow.** Before the host solves anything, :func:`unit_bounds` brackets
OPT in ``jit`` on the whole batch: a feasible flow from below (a greedy pass that gives each
query to the bidder with the most room left beyond its later demand) and the cheapest of a
family of cuts from above (each advertiser's bids capped at its budget; or the ``k`` most
demanded advertisers' budgets and every query with a bidder outside them). Where the two
meet, that whole number of units is the maximum flow, the same number the host would return;
only the other inputs go to the host. On the search's inputs at 50 advertisers (held-out
families, random inputs and their mutations) they meet on most of them (``python
benchmarks/adwords_optimum.py`` prints the share).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

#: The largest capacity scale: the flow's total in units, at most ``64 s``, stays inside int32.
MOST_SCALE = 10**6
#: How close ``p / s`` must be to ``b_max / L`` to stand for it (a few units in the last
#: place of a float64).
RATIONAL_TOLERANCE = 1e-15
#: How close a scaled bid must be to a whole number to be that level's bid (float32 bids
#: included, even after a cast to float64); a bid off the levels is refused.
ON_LEVEL = 1e-6
#: The most units the bounds settle an input at: whole numbers up to it add exactly in float32
#: (and float64), so a bound below it is the exact sum of its units.
MOST_SETTLED = 2**24


def capacity_scale(setting) -> int | None:
    """The smallest whole ``s`` with ``s b_max / L`` whole (module docstring), or None where
    ``b_max / L`` is not a ratio of whole numbers with a denominator up to :data:`MOST_SCALE`."""
    unit = setting.max_bid / setting.bid_levels
    fraction = Fraction(unit).limit_denominator(MOST_SCALE)
    if abs(float(fraction) - unit) > RATIONAL_TOLERANCE * unit:
        return None
    return fraction.denominator


def instance_units(bids: np.ndarray, bidders: np.ndarray, scale: int) -> int:
    """OPT of one instance, ``bids [T]`` and ``bidders [T, n]`` (bool), times ``scale``: the
    maximum flow, a whole number, with every capacity multiplied by ``scale``. Nodes: the
    source 0, queries ``1 .. T``, advertisers ``T + 1 .. T + n``, the sink last; the graph is
    written straight into CSR rows (source, then each query's bidders, then each advertiser's
    budget)."""
    queries, advertisers = bidders.shape
    scaled = np.asarray(bids, np.float64) * scale
    room = np.rint(scaled).astype(np.int32)
    if not np.allclose(room, scaled, rtol=ON_LEVEL, atol=0.0):
        raise ValueError(f"bids {bids} are not whole multiples of 1 / {scale}: not the setting's")
    query, advertiser = np.nonzero(bidders)
    nodes = queries + advertisers + 2
    sink = nodes - 1
    per_row = np.concatenate(
        [[queries], np.count_nonzero(bidders, axis=1), np.ones(advertisers, np.int64), [0]]
    )
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    indices = np.concatenate(
        [1 + np.arange(queries), 1 + queries + advertiser, np.full(advertisers, sink)]
    ).astype(np.int32)
    capacities = np.concatenate([room, room[query], np.full(advertisers, scale, np.int32)])
    graph = csr_array((capacities, indices, indptr), shape=(nodes, nodes))
    return int(maximum_flow(graph, 0, sink, method="dinic").flow_value)


def batch_units(bids: np.ndarray, bidders: np.ndarray, scale: int, settled=None) -> np.ndarray:
    """:func:`instance_units` of every instance, ``bids [..., T]`` and ``bidders [..., T, n]``
    -> ``[...]`` (int32, NumPy); where ``settled`` ``[...]`` (the bounds' agreed units, -1
    where they differ) is given, only the unsettled instances are solved."""
    bids, bidders = np.asarray(bids), np.asarray(bidders)
    queries, advertisers = bidders.shape[-2:]
    flat_bids = bids.reshape(-1, queries)
    flat_bidders = bidders.reshape(-1, queries, advertisers)
    found = np.full(len(flat_bids), -1, np.int32)
    if settled is not None:
        found[:] = np.asarray(settled).reshape(-1)
    for row in np.flatnonzero(found < 0):
        found[row] = instance_units(flat_bids[row], flat_bidders[row], scale)
    return found.reshape(bids.shape[:-1])


@functools.partial(jax.jit, static_argnums=(2, 3))
def unit_bounds(bids: jax.Array, bidders: jax.Array, scale: int, passes: int):
    """A lower and an upper bound ``[...]`` on OPT in units (whole numbers in float32, exact
    below :data:`MOST_SETTLED`) of ``bids [..., T]`` and ``bidders [..., T, n]`` (module
    docstring), and whether every bid is on the setting's levels (else the bounds settle
    nothing: the host refuses it).

    Below: one pass over the queries; each goes to the bidder with room whose room most
    exceeds its demand still to come (its remaining bids), then, ``passes`` times in all, what
    is left of it to the next such bidder. Above: the least of ``sum_i min(s, demand_i)``
    (each advertiser takes at most its budget and its own bids) and, for ``k = 0 .. n - 1``,
    ``k s + sum of u_t over queries with a bidder outside the k most demanded``: a cut.
    Ties in demand rank by index; the bounds are valid whatever the order."""
    exact = bids * scale
    whole = jnp.round(exact)
    on_level = jnp.all(jnp.abs(whole - exact) <= ON_LEVEL * exact, axis=-1)
    units = whole.astype(jnp.float32)  # whole numbers: exact below MOST_SETTLED
    demand = jnp.sum(jnp.where(bidders, units[..., None], 0.0), axis=-2)  # [..., n]
    advertisers = bidders.shape[-1]
    ranks = jnp.arange(advertisers).reshape((1,) * (bids.ndim - 1) + (advertisers,))

    def give(carry, inputs):
        room, still_wanted = carry  # [..., n] each
        unit, bidding = inputs  # [...], [..., n]
        still_wanted = still_wanted - jnp.where(bidding, unit[..., None], 0.0)  # after t
        left, earned = unit, jnp.zeros_like(unit)
        for _ in range(passes):
            open_ = bidding & (room > 0)
            chosen = jnp.argmax(jnp.where(open_, room - still_wanted, -jnp.inf), axis=-1)
            one = (ranks == chosen[..., None]) & open_
            given = jnp.minimum(left, jnp.sum(jnp.where(one, room, 0.0), axis=-1))
            room = room - jnp.where(one, given[..., None], 0.0)
            left, earned = left - given, earned + given
        return (room, still_wanted), earned

    room = jnp.full(demand.shape, scale, jnp.float32)
    steps = (jnp.moveaxis(units, -1, 0), jnp.moveaxis(bidders, -2, 0))
    _, earned = jax.lax.scan(give, (room, demand), steps)
    lower = jnp.sum(earned, axis=0)

    rank = jnp.argsort(jnp.argsort(-demand, axis=-1), axis=-1)  # 0: the most demanded
    deepest = jnp.max(jnp.where(bidders, rank[..., None, :], -1), axis=-1)  # [..., T]
    at_rank = jnp.sum(
        jnp.where(deepest[..., None] == ranks[..., None, :], units[..., None], 0.0), axis=-2
    )
    beyond = jnp.cumsum(at_rank[..., ::-1], axis=-1)[..., ::-1]  # queries past the k first
    cuts = ranks.astype(jnp.float32) * scale + beyond
    upper = jnp.minimum(jnp.min(cuts, axis=-1), jnp.sum(jnp.minimum(demand, scale), axis=-1))
    return lower, upper, on_level


def greedy_passes(setting) -> int:
    """How many bidders the lower bound's greedy offers each query (:func:`unit_bounds`): one
    with a single bid level, where every room is a whole number of queries, so a query fits
    whole wherever room is left; two with several levels, where a query may only part-fit."""
    return 1 if setting.bid_levels == 1 else 2


def settled_units(bids, bidders, scale: int, passes: int) -> jax.Array:
    """The units of OPT ``[...]`` (int32) where :func:`unit_bounds` meet, -1 elsewhere."""
    lower, upper, on_level = unit_bounds(bids, bidders, scale, passes)
    met = on_level & (lower == upper) & (upper < MOST_SETTLED)
    return jnp.where(met, upper, -1).astype(jnp.int32)


def exact_flow(bids, bidders, scale: int, passes: int) -> jax.Array:
    """OPT of every instance ``[...]``, in ``bids``' dtype: the units the bounds settle
    (:func:`settled_units`; ``passes`` of the greedy) and :func:`batch_units` for the rest,
    over ``scale``. Called directly on concrete arrays, and through ``jax.pure_callback``
    inside a trace. The callback answers in whole units (int32), which mean the same to its
    thread whatever float64 flag that thread sees, and the division happens here, in the
    caller's precision, by the same code on both paths."""
    settled = settled_units(jnp.asarray(bids), jnp.asarray(bidders), scale, passes)
    if isinstance(settled, jax.core.Tracer):  # inside a trace: the host joins by callback
        shape = jax.ShapeDtypeStruct(bids.shape[:-1], jnp.int32)
        units = jax.pure_callback(
            lambda b, w, known: batch_units(b, w, scale, known),
            shape,
            bids,
            bidders,
            settled,
            vmap_method="broadcast_all",
        )
    else:
        units = jnp.asarray(batch_units(bids, bidders, scale, settled))
    return units.astype(bids.dtype) / jnp.asarray(scale, bids.dtype)
