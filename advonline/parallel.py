"""Data parallelism over devices and hosts, with JAX's own sharding (docs/method.md §7).

One mesh axis, ``"batch"``, spans the devices a run uses. The instance batches of training
(the adversary's batch, the training pool with its replay, the oracle loop's archive columns
when it trains and scores) are sharded along it with :func:`jax.lax.with_sharding_constraint`
inside the jitted programs; the parameters and optimiser states are replicated, and the
replay stays split as the step leaves it. XLA's partitioner then runs each device's slice and
inserts the reductions (a mean over the batch, a gradient summed over instances) across
devices. The evaluator's hard-family and random instances are placed split over the devices
before its jitted programs run (:func:`spread`), and so are the oracle loop's searches: its
adversary restarts and local-search chains, each computed whole on one device (for posted
pricing, problems/posted_price/oracles.py). The simultaneous loop's exploitability probe runs
replicated (every device computes it whole), and the evaluator's fresh adversary and
certificate on one device. A sum over a sharded axis is added in another order than on one
device, so figures on N devices equal those on one up to float rounding (the last digit or two
of a float32 metric), not bit for bit.

Several hosts: :func:`start_processes` calls :func:`jax.distributed.initialize`, after which
``jax.devices()`` lists every process's devices and the mesh spans them all. Each process then
computes the slices of each batch that live on its own devices (the batches are written inside
the jitted step from PRNG keys, so "feeding" a slice is computing it), every process runs
every program, and process 0 alone writes files (:func:`writes_files`).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

BATCH_AXIS = "batch"
# the variables read by ``start_processes`` where no flag is given; JAX itself reads
# JAX_COORDINATOR_ADDRESS, and detects SLURM and Open MPI launches on its own
ENVIRONMENT = {
    "coordinator": "JAX_COORDINATOR_ADDRESS",
    "processes": "JAX_NUM_PROCESSES",
    "process_id": "JAX_PROCESS_ID",
}


class DevicesError(ValueError):
    """A device count or process layout that cannot be used; one line."""


def batch_mesh(count: int) -> Mesh:
    """The mesh of the first ``count`` devices (0: every device of every process)."""
    devices = jax.devices()
    if count < 0:
        raise DevicesError(f"--devices must be >= 0 (0: all), got {count}")
    if count == 0:
        count = len(devices)
    if count > len(devices):
        raise DevicesError(
            f"--devices {count} asks for more devices than the {len(devices)} JAX sees "
            f"({devices[0].platform}); lower it or pass 0 for all"
        )
    if jax.process_count() > 1 and count != len(devices):
        raise DevicesError(
            f"with {jax.process_count()} processes a run uses every device "
            f"({len(devices)}): pass --devices 0"
        )
    return Mesh(np.asarray(devices[:count]), (BATCH_AXIS,))


def _splits(leaf, mesh: Mesh) -> bool:
    """Whether ``leaf``'s first (instance) axis divides evenly over ``mesh``'s devices."""
    return leaf.ndim > 0 and leaf.shape[0] % mesh.size == 0


def shard_batch(tree, mesh: Mesh | None):
    """``tree``'s arrays sharded along their first (instance) axis over ``mesh``; on one
    device, or without a mesh, ``tree`` itself, so single-device programs stay as they were.
    An array whose first axis does not divide evenly over the devices (a scalar, a padded
    handful of new instances) is left to XLA, which keeps it whole: a program's outputs cannot
    be split unevenly."""
    if mesh is None or mesh.size == 1:
        return tree
    along = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
    return jax.tree.map(
        lambda leaf: jax.lax.with_sharding_constraint(leaf, along) if _splits(leaf, mesh) else leaf,
        tree,
    )


def spread(tree, mesh: Mesh | None):
    """``tree`` (arrays and PRNG keys with a leading instance axis, outside ``jit``) placed
    over ``mesh``: split along that axis where it divides evenly, else whole on every device.
    A jitted program called on it runs each device's slice (computation follows the data)."""
    if mesh is None or mesh.size == 1:
        return tree
    along = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
    everywhere = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(
        lambda leaf: jax.device_put(leaf, along if _splits(leaf, mesh) else everywhere), tree
    )


def replicate(tree, mesh: Mesh | None):
    """``tree`` (a state: arrays and PRNG keys, equal on every process) as global arrays
    replicated on every device of ``mesh``; a single device's tree is returned unchanged."""
    if mesh is None or mesh.size == 1:
        return tree
    everywhere = NamedSharding(mesh, PartitionSpec())

    def place(leaf):
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic | float | int):
            return leaf
        if _is_key(leaf):
            return jax.random.wrap_key_data(place(jax.random.key_data(leaf)))
        local = np.asarray(leaf)
        return jax.make_array_from_callback(local.shape, everywhere, lambda index: local[index])

    return jax.tree.map(place, tree)


def to_host(tree):
    """``tree`` as NumPy arrays on this host, gathered from every process where an array is
    sharded across processes (every process must call this together)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def from_writer(tree):
    """Process 0's ``tree`` on every process (a state read from its checkpoint; PRNG keys
    included); ``tree`` itself in a single-process run."""
    if jax.process_count() == 1:
        return tree
    plain = jax.tree.map(lambda leaf: jax.random.key_data(leaf) if _is_key(leaf) else leaf, tree)
    sent = multihost_utils.broadcast_one_to_all(plain)
    return jax.tree.map(
        lambda got, leaf: jax.random.wrap_key_data(got) if _is_key(leaf) else got, sent, tree
    )


def _is_key(leaf) -> bool:
    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def writes_files() -> bool:
    """Whether this process writes the run's files (process 0 alone)."""
    return jax.process_index() == 0


def start_processes(
    coordinator: str | None = None, processes: int | None = None, process_id: int | None = None
) -> bool:
    """Join a multi-process run: :func:`jax.distributed.initialize` from the flags, else from
    the environment (:data:`ENVIRONMENT`), else JAX's own detection (SLURM, Open MPI). Nothing
    is started where none of them names a coordinator or a process count; returns whether
    something was."""
    coordinator = coordinator or os.environ.get(ENVIRONMENT["coordinator"])
    processes = processes if processes is not None else _environment_int("processes")
    process_id = process_id if process_id is not None else _environment_int("process_id")
    detected = any(name in os.environ for name in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE"))
    if coordinator is None and processes is None and not detected:
        return False
    if processes is not None and processes < 1:
        raise DevicesError(f"--processes must be >= 1, got {processes}")
    host, colon, port = (coordinator or "").rpartition(":")
    if coordinator is not None and not (colon and host and port.isdigit()):
        raise DevicesError(f"the coordinator's address must be HOST:PORT, got {coordinator!r}")
    if process_id is not None and processes is not None and not 0 <= process_id < processes:
        raise DevicesError(f"--process-id must lie in [0, {processes - 1}], got {process_id}")
    try:
        jax.distributed.initialize(coordinator, processes, process_id)
    except (ValueError, TypeError, RuntimeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise DevicesError(f"cannot join the multi-process run: {first_line}") from None
    return True


def _environment_int(field: str) -> int | None:
    name = ENVIRONMENT[field]
    if name not in os.environ:
        return None
    try:
        return int(os.environ[name])
    except ValueError:
        raise DevicesError(f"{name} must be an integer, got {os.environ[name]!r}") from None
