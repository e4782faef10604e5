"""``advonline train``: the one run driver of every problem and loop; metrics, checkpoints,
resuming after a kill.

Files in the run folder:

- ``checkpoint.msgpack``: the latest state (:mod:`advonline.checkpoint`, atomic and
  checksummed), and ``checkpoint.previous.msgpack`` the one before;
- ``config.json``: the validated config (for people; the checkpoint holds its own copy);
- ``metrics.csv``: one row per measured epoch (:data:`METRIC_FIELDS`), each appended whole and
  flushed before the checkpoint that follows it. On ``--resume`` rows after the checkpoint,
  and a last row a kill cut short, are dropped, so the file describes exactly one run.

Both loops are measured once per epoch (``oracle.epoch_steps`` updates): the oracle loop
(advonline/oracle_loop.py) before each epoch's training and after the last, the simultaneous
loop (advonline/simultaneous_loop.py) after each epoch's steps. Each measurement keeps the
network with the best figure so far (its certificate where the problem has one), which the
run delivers. A resumed run reproduces the run exactly.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from advonline import checkpoint, environment, folders, parallel, profile, simultaneous_loop
from advonline.oracle_loop import OracleState, record_row, run_epochs

METRIC_FIELDS = (
    "step",
    "wall_seconds",
    "steps_per_second",
    "payoff",
    "adversary_ratio",
    "pool_ratio",
    "exploitability",
    "upper_bound",
    # the oracle loop's measurement of each epoch (advonline/oracle_loop.py)
    "epoch",
    "restricted_ratio",
    "oracle_ratio",
    "archive_ratio",
    "probe_ratio",
    "certificate_ratio",
    "guarantee",
    "archive_size",
    "support",
    "mixture_ratio",
    "mixture_exploitability",
    # the oracle loop's seconds per phase in the epoch (advonline/profile.py)
    *profile.COLUMNS,
)
METRICS_NAME = "metrics.csv"


class TrainError(ValueError):
    """A run that cannot start (folder in use, nothing to resume, config mismatch)."""


def check_processes(config) -> None:
    """Refuse, in a multi-process run, what runs on the host between jitted programs with
    each process's own data: the oracle loop (its archive and meta-solver)."""
    if jax.process_count() > 1 and config.training_loop == "oracle":
        raise TrainError(
            "several processes train the simultaneous loop only (not game.loop = oracle)"
        )


def check_folder(folder: str | Path, resume: bool) -> None:
    """Refuse, before any work, a run folder that is not the tool's own
    (advonline/folders.py), a finished or checkpointed run without ``resume``, or a resume
    with nothing to resume. A marked folder whose run stopped before its first checkpoint
    starts again from step 0, with or without ``resume``."""
    folder = folders.check_own(folder, ("run",), legacy=(checkpoint.CHECKPOINT_NAME,))
    has_checkpoint = checkpoint.checkpoint_path(folder).exists()
    if resume and not has_checkpoint and folders.marker(folder) is None:
        raise TrainError(f"nothing to resume: no checkpoint in {folder}")
    if not resume and has_checkpoint:
        raise TrainError(
            f"{folder} already holds a run; pass --resume to continue it or choose another --out"
        )


def check_resumable(folder: str | Path, config) -> None:
    """Refuse, before any work, to resume the run in ``folder`` with another config, with a
    ``metrics.csv`` this tool did not write, or without the rows its checkpoint follows (each
    row is written before its checkpoint, so they are missing only if removed by hand), or
    with only the previous checkpoint left (also only by hand: CheckpointError offers it)."""
    if checkpoint.checkpoint_path(folder).exists() or checkpoint.previous_path(folder).exists():
        _, stored, _ = checkpoint.load(folder)
        _check_same_run(folder, stored, config)
        if not _kept_rows(Path(folder) / METRICS_NAME):
            raise TrainError(
                f"{Path(folder) / METRICS_NAME} is missing or empty, but the run has a "
                "checkpoint; put the table back to resume, or start a new run elsewhere"
            )


def _check_same_run(folder, stored, config) -> None:
    if not stored.same_run(config):
        raise TrainError(
            f"the config differs from the one {folder} was trained with; "
            "resume with the same config or choose another --out"
        )


def prepare_folder(folder: Path, config, resume: bool) -> tuple[Any, float]:
    """The state to start from: fresh, or the folder's checkpoint with ``resume``."""
    check_folder(folder, resume)
    if checkpoint.checkpoint_path(folder).exists():  # resume (check_folder saw to that)
        state, stored, wall = checkpoint.load(folder)
        _check_same_run(folder, stored, config)
        return state, wall
    about = {
        "made_by": "advonline train",
        "setting": config.setting.describe(),
        "seed": config.seed,
        "environment": environment.describe(),  # the versions and device it trained with
    }
    folders.claim(folder, "run", about)
    folders.atomic_write(
        folder / "config.json", (json.dumps(config.to_tables(), indent=2) + "\n").encode()
    )
    return config.initial_state(config.build_game(), jax.random.key(config.seed)), 0.0


def trim_metrics(path: Path, state: Any) -> None:
    """Drop the rows a resumed run will write again: those after the checkpoint's step (or,
    in the oracle loop, of the epochs it has not measured), and a last line cut short by a
    kill. Rewritten atomically, so a kill during the trim loses nothing."""
    if not path.exists():
        return
    rows = _kept_rows(path)
    if isinstance(state, OracleState):
        rows = [row for row in rows if int(row["epoch"]) < int(state.epoch)]
    else:
        rows = [row for row in rows if int(row["step"]) <= int(state.step)]
    folders.atomic_write(path, _csv_text(rows, header=True).encode())


def _kept_rows(path: Path) -> list[dict]:
    """The complete rows of a run's ``metrics.csv`` (a last line cut short by a kill
    dropped); TrainError when it is not a table this tool wrote."""
    if not path.exists():
        return []
    try:
        text = path.read_text()
        complete = text[: text.rfind("\n") + 1]  # a row is written whole only with its newline
        reader = csv.DictReader(io.StringIO(complete))
        rows = list(reader)
        if rows and tuple(reader.fieldnames or ()) != METRIC_FIELDS:
            raise ValueError
        for row in rows:
            int(row["step"]), int(row["epoch"] or 0)
    except (ValueError, TypeError, csv.Error):  # UnicodeDecodeError is a ValueError
        raise TrainError(
            f"{path} is not a metrics table advonline wrote; move it away to resume the run"
        ) from None
    return rows


def _csv_text(rows: list[dict], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=METRIC_FIELDS)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _write_rows(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` (with the header first in a new file), flushed to disk."""
    text = _csv_text(rows, header=not path.exists())
    with open(path, "a", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def train(
    config,
    folder: str | Path,
    resume: bool = False,
    report: Callable[[dict], None] | None = None,
) -> Any:
    """Train the run ``config`` describes (any problem's run config) to its last step;
    returns the final state (also in the checkpoint). ``report(row)`` hears every metrics row.

    The batches are sharded over ``config.devices`` devices (advonline/parallel.py). In a
    multi-process run every process calls this; process 0 alone reads and writes ``folder``,
    holding its lock (:class:`~advonline.folders.FolderLock`) throughout, and sends the state
    it starts from to the others."""
    folder = Path(folder)
    if not parallel.writes_files():
        return _train(config, folder, resume, report)
    check_folder(folder, resume)  # before the lock writes its file there
    with folders.FolderLock(folder):
        return _train(config, folder, resume, report)


def _train(config, folder: Path, resume: bool, report: Callable[[dict], None] | None) -> Any:
    mesh = parallel.batch_mesh(config.devices)
    check_processes(config)
    if parallel.writes_files():
        state, wall_before = prepare_folder(folder, config, resume)
        trim_metrics(folder / METRICS_NAME, state)
    else:
        key = jax.random.key(config.seed)
        state, wall_before = config.initial_state(config.build_game(), key), 0.0
    state, wall_before = parallel.from_writer((state, wall_before))
    state = parallel.replicate(state, mesh)
    game = config.build_game(mesh)
    return _train_by_epochs(game, config, folder, state, wall_before, report)


def _train_by_epochs(
    game, config, folder: Path, state, wall_before: float, report: Callable[[dict], None] | None
):
    """Either loop, measured once per epoch: the oracle loop (advonline/oracle_loop.py:
    measure, then train) or the simultaneous loop (advonline/simultaneous_loop.py: train,
    then measure)."""
    oracle, clock = config.oracle, None
    if config.training_loop == "oracle":
        clock = profile.PhaseClock()
        epochs = run_epochs(game, oracle, config.temperature, state, config.total_steps, clock)
    else:
        count = config.total_steps // oracle.epoch_steps
        epochs = simultaneous_loop.run_epochs(game, oracle, config.seed, state, count)

    def save(state, wall: float) -> None:
        checkpoint.save(folder, state, config, wall)

    args = (epochs, oracle.epoch_steps, folder, save, state, wall_before, report, clock)
    return train_epochs(*args)[0]


def train_epochs(
    epochs,
    epoch_steps: int,
    folder: Path,
    save: Callable[[Any, float], None],
    state: Any,
    wall_before: float,
    report: Callable[[dict], None] | None,
    clock: profile.PhaseClock | None = None,
) -> tuple[Any, float]:
    """The one per-epoch driver of every loop and problem: for each measured epoch that
    ``epochs`` yields (``state``, ``record``, ``measured_at``, ``training_seconds``), one
    metrics row (:data:`METRIC_FIELDS`, the loop's ``clock`` phases among them) and then
    ``save(state, wall_seconds)``, the checkpoint. Returns the last state and the training's
    wall seconds (``state`` and ``wall_before``, the checkpoint's, when nothing was left to
    train)."""
    metrics_path = folder / METRICS_NAME
    started = time.perf_counter()
    wall = wall_before
    for epoch in epochs:
        state, seconds = epoch.state, epoch.training_seconds
        row = dict.fromkeys(METRIC_FIELDS, "")
        row.update(record_row(epoch.record))
        if clock is not None:
            row.update(clock.row())
        row.update(
            step=epoch.measured_at,
            epoch=epoch.measured_at // epoch_steps,
            wall_seconds=round(wall_before + time.perf_counter() - started, 3),
            steps_per_second="" if seconds is None else epoch_steps / seconds,
        )
        # the row first: a kill between the two leaves a row after the checkpoint, which a
        # resume drops and writes again (the other order would lose the row)
        if parallel.writes_files():
            _write_rows(metrics_path, [row])
        wall = wall_before + time.perf_counter() - started
        save(state, wall)
        if report is not None:
            report(row)
    return state, wall
