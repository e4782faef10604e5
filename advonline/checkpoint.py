"""Checkpoints of a training run: one msgpack file (Flax serialization), written atomically
and checksummed.

``DIR/checkpoint.msgpack`` holds the game state (parameters, optimiser states, replay, PRNG
key, step) and its metadata (the validated config, wall time so far, package version), behind
a header line with the SHA-256 of that payload (:mod:`advonline.checksums`). It is written to
a temporary file in the same folder, flushed to disk and then renamed over the old one, so a
kill at any moment leaves either the previous checkpoint or the new one, never a torn file.

The last two checkpoints are kept: before a new one is written, the current one becomes
``DIR/checkpoint.previous.msgpack`` (a hard link renamed into place, so at every moment both
names hold a complete checkpoint). A checkpoint that fails its checksum is refused in one line
that offers the previous one when it is intact. A checkpoint written before checksums loads
with a note. Nothing here deletes a checkpoint the run still needs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
from flax import serialization

from advonline import __version__, checksums, parallel
from advonline.configs import ConfigError, from_stored_tables
from advonline.folders import atomic_link, atomic_write

CHECKPOINT_NAME = "checkpoint.msgpack"
PREVIOUS_NAME = "checkpoint.previous.msgpack"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be read; one line naming the file."""


def checkpoint_path(folder: str | Path) -> Path:
    return Path(folder) / CHECKPOINT_NAME


def previous_path(folder: str | Path) -> Path:
    return Path(folder) / PREVIOUS_NAME


def save(folder: str | Path, state, config, wall_seconds: float) -> None:
    """Write the checkpoint of ``state``, the run's state under ``config`` (any problem's run
    config), atomically. In a multi-process run every process calls this (the state is
    gathered from all of them) and process 0 writes."""
    state = parallel.to_host(state.replace(key=jax.random.key_data(state.key)))
    if not parallel.writes_files():
        return
    record = {
        "state": serialization.to_state_dict(state),
        "meta": {
            "config": json.dumps(config.to_tables()),
            "wall_seconds": wall_seconds,
            "version": __version__,
        },
    }
    write_record(folder, record)


def write_record(folder: str | Path, record: dict) -> None:
    """Write ``record`` (msgpack-able) as the checkpoint in ``folder``, atomically, the
    current checkpoint kept as the previous one."""
    current = checkpoint_path(folder)
    if current.exists():  # keep it as the previous checkpoint, with no moment of absence
        atomic_link(current, previous_path(folder))
    atomic_write(current, checksums.framed(serialization.msgpack_serialize(record)))


def read_record(folder: str | Path) -> dict:
    """The record of the checkpoint in ``folder``; CheckpointError (one line) when it is
    missing, has no checksum, fails it (offering the previous checkpoint when that one is
    intact) or is not msgpack."""
    path = checkpoint_path(folder)
    if not path.is_file():  # the previous one alone is left only by hand (see write_record)
        kept = previous_path(folder).is_file()
        raise CheckpointError(f"no checkpoint at {path}{_offer_previous(folder) if kept else ''}")
    try:
        payload = checksums.unframed(path.read_bytes(), f"checkpoint {path}", CheckpointError)
    except CheckpointError as error:
        raise CheckpointError(f"{error}{_offer_previous(folder)}") from None
    try:
        return serialization.msgpack_restore(payload)
    except Exception:  # a payload this version did not write
        raise CheckpointError(f"{path} is not a readable advonline checkpoint") from None


def load(folder: str | Path) -> tuple[Any, Any, float]:
    """The loop's state, the run config (any problem's) and the training's wall time of the
    checkpoint in ``folder``."""
    path = checkpoint_path(folder)
    record = read_record(folder)
    try:
        meta = record["meta"]
        config = from_stored_tables(json.loads(meta["config"]), f"config stored in {path}")
        template = config.initial_state(config.build_game(), jax.random.key(0))
        template = template.replace(key=jax.random.key_data(template.key))
        missing = sorted(set(serialization.to_state_dict(template)) - set(record["state"]))
        if missing:
            raise CheckpointError(
                f"{path} is not a readable advonline checkpoint (its state lacks "
                f"{', '.join(missing)})"
            )
        state = serialization.from_state_dict(template, record["state"])
        check_shapes(path, template, state)
        wall = float(meta["wall_seconds"])
    except CheckpointError:
        raise
    except ConfigError as error:  # a config this version does not read (another version's)
        raise CheckpointError(
            f"{path} was written by another version of advonline ({error})"
        ) from None
    except Exception:  # any corruption: missing fields, arrays of another shape
        raise CheckpointError(f"{path} is not a readable advonline checkpoint") from None
    return state.replace(key=jax.random.wrap_key_data(state.key)), config, wall


def _offer_previous(folder: str | Path) -> str:
    """The clause offering the previous checkpoint when it is intact, else the clause saying
    no intact one is kept."""
    previous = previous_path(folder)
    try:
        checksums.unframed(previous.read_bytes(), str(previous), CheckpointError)
    except (OSError, CheckpointError):
        return "; no intact previous checkpoint is kept"
    aside = "move the corrupted file aside and " if checkpoint_path(folder).exists() else ""
    return (
        f"; the previous checkpoint {previous} is intact (one save earlier): {aside}rename "
        f"that one to {CHECKPOINT_NAME} to go on from it"
    )


def check_shapes(path: Path, template, state) -> None:
    """CheckpointError unless every array of the state read from ``path`` has its
    ``template``'s shape."""
    for want, got in zip(jax.tree.leaves(template), jax.tree.leaves(state), strict=True):
        if getattr(want, "shape", None) != getattr(got, "shape", None):
            raise CheckpointError(
                f"{path} is not a readable advonline checkpoint (array shapes differ from its "
                f"config: {want.shape} vs {got.shape})"
            )
