"""The archive of hard instances and the algorithm's snapshots: the restricted game's two
strategy sets, with its payoff matrix, kept in the checkpoint.

- **Instances** are buyer type sequences ``[N, T]`` (:mod:`posted_price.buyer_types`) with their
  offline optimum, the epoch each was found and by which oracle. The archive is bounded: a
  new instance replaces the least useful one, i.e. one outside the adversary's equilibrium
  mixture with the lowest ratio against the current algorithm. An instance already held is
  not added twice.
- **Snapshots** are the pricing network's parameters at the end of each epoch, stacked
  ``[S, ...]``, bounded the same way (the oldest outside the algorithm's equilibrium
  mixture goes first).
- **Payoffs** ``[S, N]``: ``E[ALG_i(I_j)] / OPT(I_j)`` for every stored pair, re-scored
  whenever a row or a column changes, so the meta-solver always sees the whole matrix.

Everything is a fixed-shape pytree (empty slots are masked by ``filled``) so that it
checkpoints with the rest of the training state; the bookkeeping here is NumPy, outside
``jit``, once per epoch.

**First in, first out.** The same store without snapshots is the simultaneous loop's replay
of past hard instances: :func:`push_first_out` (jit-able, inside the training step) writes new
instances over the oldest, stamping ``found_at`` with a running count of instances written.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

#: Which search found an instance (the ``origin`` column): the epoch's oracles (adversary
#: networks and local search together), the stronger probe, or the runs of the adversary
#: strategy behind the certificate.
ORIGINS = ("oracles", "probe", "certificate")


@struct.dataclass
class Archive:
    """Hard instances and algorithm snapshots with their payoff matrix (fixed shapes)."""

    types: jax.Array  # [N, T] int32 buyer types
    optimum: jax.Array  # [N] OPT of each instance
    filled: jax.Array  # [N] bool
    found_at: jax.Array  # [N] int32 epoch the instance was found (first in, first out:
    # its place in the order of writing)
    origin: jax.Array  # [N] int32 index into ORIGINS
    snapshots: dict  # pricing parameters, every leaf with a leading [S] axis
    snapshot_filled: jax.Array  # [S] bool
    snapshot_epoch: jax.Array  # [S] int32 epoch at whose end the snapshot was taken
    payoffs: jax.Array  # [S, N] E[ALG_i(I_j)] / OPT(I_j); meaningless where either is empty


def empty_archive(
    size: int, rounds: int, snapshots: int = 0, params: dict | None = None
) -> Archive:
    """An archive of ``size`` instance slots and ``snapshots`` snapshot slots, all empty;
    ``params`` gives the shapes of a snapshot (None: an instance store alone)."""
    return Archive(
        types=jnp.zeros((size, rounds), jnp.int32),
        optimum=jnp.zeros(size, jnp.float32),
        filled=jnp.zeros(size, bool),
        found_at=jnp.zeros(size, jnp.int32),
        origin=jnp.zeros(size, jnp.int32),
        snapshots=jax.tree.map(
            lambda leaf: jnp.zeros((snapshots, *leaf.shape), leaf.dtype), params
        ),
        snapshot_filled=jnp.zeros(snapshots, bool),
        snapshot_epoch=jnp.zeros(snapshots, jnp.int32),
        payoffs=jnp.zeros((snapshots, size), jnp.float32),
    )


def push_first_out(archive: Archive, types: jax.Array, optimum: jax.Array) -> Archive:
    """``types`` ``[M, T]`` with their ``optimum`` ``[M]`` written over the ``M`` oldest
    instances (empty slots first), in order; ``found_at`` counts the instances written so far.
    Repeats are kept (a replay weighs what recurs). Jit-able; M up to the size."""
    size = archive.optimum.shape[0]
    if size == 0 or types.shape[0] == 0:
        return archive
    types, optimum = types[-size:], optimum[-size:]  # more than fit: the last ones stay
    count = types.shape[0]
    age = jnp.where(archive.filled, archive.found_at, -1)
    slots = jnp.argsort(age, stable=True)[:count]
    written = jnp.max(age) + 1 + jnp.arange(count, dtype=archive.found_at.dtype)
    return archive.replace(
        types=archive.types.at[slots].set(types.astype(archive.types.dtype)),
        optimum=archive.optimum.at[slots].set(optimum.astype(archive.optimum.dtype)),
        filled=archive.filled.at[slots].set(True),
        found_at=archive.found_at.at[slots].set(written),
    )


def instance_slots(archive: Archive) -> np.ndarray:
    """Indices of the filled instance slots."""
    return np.flatnonzero(np.asarray(archive.filled))


def snapshot_slots(archive: Archive) -> np.ndarray:
    """Indices of the filled snapshot slots."""
    return np.flatnonzero(np.asarray(archive.snapshot_filled))


def restricted_game(archive: Archive) -> np.ndarray:
    """The payoff matrix over filled snapshots and instances ``[S', N']`` (float64)."""
    rows, columns = snapshot_slots(archive), instance_slots(archive)
    return np.asarray(archive.payoffs, np.float64)[np.ix_(rows, columns)]


def add_instances(
    archive: Archive,
    types: np.ndarray,
    optimum: np.ndarray,
    usefulness: np.ndarray,
    epoch: int,
    origin: np.ndarray,
) -> tuple[Archive, np.ndarray]:
    """Add new instances ``types`` ``[M, T]`` (those already held, or repeated, are skipped),
    each evicting the least useful instance once the archive is full. ``usefulness`` ``[N]``
    ranks the held instances (higher is kept longer; empty slots are used first). Returns the
    archive and the slots written (their payoff columns must be scored)."""
    types = np.asarray(types, np.int32)
    held_types = np.asarray(archive.types)
    filled = np.asarray(archive.filled).copy()
    held = {held_types[slot].tobytes() for slot in np.flatnonzero(filled)}
    rank = np.where(filled, np.asarray(usefulness, np.float64), -np.inf)
    new_types, new_optimum = held_types.copy(), np.asarray(archive.optimum).copy()
    found_at, origins = np.asarray(archive.found_at).copy(), np.asarray(archive.origin).copy()
    written = []
    for index, row in enumerate(types):
        if row.tobytes() in held:
            continue
        slot = int(np.argmin(rank))
        if filled[slot] and rank[slot] == np.inf:  # everything held is in use
            break
        if filled[slot]:
            held.discard(new_types[slot].tobytes())
        held.add(row.tobytes())
        new_types[slot], new_optimum[slot] = row, optimum[index]
        found_at[slot], origins[slot] = epoch, origin[index]
        filled[slot], rank[slot] = True, np.inf  # not evicted by the rest of this batch
        written.append(slot)
    archive = archive.replace(
        types=jnp.asarray(new_types),
        optimum=jnp.asarray(new_optimum, archive.optimum.dtype),
        filled=jnp.asarray(filled),
        found_at=jnp.asarray(found_at),
        origin=jnp.asarray(origins),
    )
    return archive, np.asarray(written, np.int64)


def add_snapshot(
    archive: Archive, params: dict, epoch: int, keep: np.ndarray
) -> tuple[Archive, int]:
    """Store ``params`` as a snapshot; once full it replaces the oldest snapshot not marked
    ``keep`` ``[S]`` (e.g. the support of the algorithm's equilibrium mixture). Returns the
    archive and the slot (its payoff row must be scored)."""
    filled = np.asarray(archive.snapshot_filled)
    epochs = np.asarray(archive.snapshot_epoch)
    free = np.flatnonzero(~filled)
    if free.size:
        slot = int(free[0])
    else:
        age = np.where(np.asarray(keep, bool), np.iinfo(np.int32).max, epochs)
        slot = int(np.argmin(age))
    snapshots = jax.tree.map(
        lambda stack, leaf: jnp.asarray(stack).at[slot].set(leaf), archive.snapshots, params
    )
    archive = archive.replace(
        snapshots=snapshots,
        snapshot_filled=jnp.asarray(archive.snapshot_filled).at[slot].set(True),
        snapshot_epoch=jnp.asarray(archive.snapshot_epoch).at[slot].set(epoch),
    )
    return archive, slot


def set_payoffs(archive: Archive, rows: np.ndarray, columns: np.ndarray, values) -> Archive:
    """Write ``values`` ``[len(rows), len(columns)]`` into the payoff matrix."""
    rows, columns = np.asarray(rows, np.int64), np.asarray(columns, np.int64)
    if rows.size == 0 or columns.size == 0:
        return archive
    payoffs = np.asarray(archive.payoffs).copy()
    payoffs[np.ix_(rows, columns)] = np.asarray(values)
    return archive.replace(payoffs=jnp.asarray(payoffs, archive.payoffs.dtype))


def snapshot_params(archive: Archive, slot: int) -> dict:
    """The parameters stored in snapshot ``slot``."""
    return jax.tree.map(lambda stack: stack[slot], archive.snapshots)


def on_padded_rows(function, rows) -> np.ndarray:
    """``function(rows)`` ``[N]`` for host ``rows`` ``[N, ...]`` whose count varies from epoch
    to epoch (what an oracle adds): padded by repeating the first row to a power of two, at
    least 32, so that a jitted ``function`` compiles for a handful of shapes; the padding's
    results are dropped."""
    rows = np.asarray(rows)
    count = rows.shape[0]
    if count == 0:
        return np.zeros(0, np.float32)
    padded = max(32, 1 << (count - 1).bit_length())
    filler = np.broadcast_to(rows[:1], (padded - count, *rows.shape[1:]))
    return np.asarray(function(jnp.asarray(np.concatenate([rows, filler]))))[:count]
