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
"""

from __future__ import annotations

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


def batch_units(bids: np.ndarray, bidders: np.ndarray, scale: int) -> np.ndarray:
    """:func:`instance_units` of every instance, ``bids [..., T]`` and ``bidders [..., T, n]``
    -> ``[...]`` (int32, NumPy)."""
    bids, bidders = np.asarray(bids), np.asarray(bidders)
    queries, advertisers = bidders.shape[-2:]
    flat_bids = bids.reshape(-1, queries)
    flat_bidders = bidders.reshape(-1, queries, advertisers)
    found = [instance_units(b, w, scale) for b, w in zip(flat_bids, flat_bidders, strict=True)]
    return np.asarray(found, np.int32).reshape(bids.shape[:-1])


def exact_flow(bids, bidders, scale: int) -> jax.Array:
    """OPT of every instance ``[...]``, in ``bids``' dtype: :func:`batch_units` over
    ``scale``. Called directly on concrete arrays, and through ``jax.pure_callback`` inside a
    trace. The callback answers in whole units (int32), which mean the same to its thread
    whatever float64 flag that thread sees, and the division happens here, in the caller's
    precision, by the same code on both paths."""
    traced = isinstance(bids, jax.core.Tracer) or isinstance(bidders, jax.core.Tracer)
    if traced:
        shape = jax.ShapeDtypeStruct(bids.shape[:-1], jnp.int32)
        units = jax.pure_callback(
            lambda b, w: batch_units(b, w, scale),
            shape,
            bids,
            bidders,
            vmap_method="broadcast_all",
        )
    else:
        units = jnp.asarray(batch_units(bids, bidders, scale))
    return units.astype(bids.dtype) / jnp.asarray(scale, bids.dtype)
