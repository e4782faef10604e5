"""``advonline run`` for a problem that provides the whole interface (advonline/problem.py):
given its config (advonline/problem_config.py), train with the oracle loop
(advonline/oracle_loop.py, through advonline/problem_game.py) or with ``[game] loop =
"simultaneous"`` the simultaneous loop (advonline/problem_simultaneous.py), measure the
learned policy beside the problem's baselines with the one evaluator and one budget
(advonline/evaluation.py; the delivered policy's own archive is one more source), export the
policy, draw the figures.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, NamedTuple

import jax
from flax import serialization

from advonline import (
    __version__,
    checkpoint,
    checksums,
    environment,
    evaluation,
    export,
    folders,
    parallel,
    plots,
    profile,
)
from advonline import problem_simultaneous as simultaneous_loop
from advonline import problems as registry
from advonline.archive_view import worst_delivered
from advonline.errors import InputError
from advonline.evaluation import ARCHIVE_SOURCE, Budget, SourceRatio, measure, with_source
from advonline.export import read_json
from advonline.folders import atomic_write
from advonline.oracle_loop import run_epochs
from advonline.pipeline import baseline_policies
from advonline.problem_config import ProblemRunConfig, from_dict
from advonline.train import METRIC_FIELDS, METRICS_NAME, check_folder, train_epochs, trim_metrics

EVALUATION_NAME = "evaluation.json"
POLICY_NAME = "policy.json"
LEARNED = "learned"


class Trained(NamedTuple):
    params: Any  # the delivered (best-so-far) parameters
    archive_worst: float  # the delivered parameters' worst ratio on the final archive
    seconds: float  # wall time of the training, compiling and resumed parts included


def train(config: ProblemRunConfig, folder: Path, report=None) -> Trained:
    """Learn the policy head's parameters for the config's setting with the run's loop, in
    the run ``folder``: every epoch ends with a row of ``metrics.csv`` and a checkpoint
    (:func:`advonline.train.train_epochs`, the one per-epoch driver), and ``report(row)`` is
    called with the row. A folder that holds a checkpoint is resumed from it
    (:func:`check_training_folder` has checked that it is this config's): the run then ends
    as an uninterrupted one would."""
    loop, oracle = config.loop, config.oracle
    mesh = parallel.batch_mesh(loop.devices)
    game = config.game(mesh)
    if checkpoint.checkpoint_path(folder).exists():
        _, state, wall_before = load_checkpoint(folder)
        trim_metrics(folder / METRICS_NAME, state)
    else:
        state, wall_before = config.initial_state(game, jax.random.key(loop.seed)), 0.0
    state = parallel.replicate(state, mesh)
    clock = None
    if loop.simultaneous:
        epochs = simultaneous_loop.run_epochs(game, oracle, loop.seed, state, loop.epochs)
    else:
        clock = profile.PhaseClock()
        steps = loop.epochs * oracle.epoch_steps
        epochs = run_epochs(game, oracle, loop.temperature, state, steps, clock)

    def save(state, wall: float) -> None:
        save_checkpoint(folder, state, config, wall)

    args = (epochs, oracle.epoch_steps, folder, save, state, wall_before, report, clock)
    state, wall = train_epochs(*args)
    if loop.simultaneous:
        worst = simultaneous_loop.delivered_worst(game, state)
    else:
        worst = worst_delivered(game, state)
    return Trained(state.best_algorithm, worst, wall)


def save_checkpoint(folder: Path, state, config: ProblemRunConfig, wall_seconds: float) -> None:
    """The loop's state after an epoch, with the config and the training's wall time so far,
    as the run's checkpoint (advonline/checkpoint.py: atomic, checksummed, the previous one
    kept)."""
    state = parallel.to_host(state.replace(key=jax.random.key_data(state.key)))
    meta = {
        "config": json.dumps(config.to_tables()),
        "wall_seconds": wall_seconds,
        "version": __version__,
    }
    checkpoint.write_record(folder, {"state": serialization.to_state_dict(state), "meta": meta})


def load_checkpoint(folder: str | Path) -> tuple[ProblemRunConfig, Any, float]:
    """The config, the loop's state (an oracle loop's :class:`OracleState` or a simultaneous
    run's :class:`~advonline.simultaneous.GameState`) and the training's wall time of a run's
    checkpoint; CheckpointError (one line) when it cannot be used."""
    path = checkpoint.checkpoint_path(folder)
    record, verified = checkpoint.read_record(folder)
    try:
        meta = record["meta"]
        config = from_dict(json.loads(meta["config"]), f"config stored in {path}")
        template = config.initial_state(config.game(), jax.random.key(0))
        template = template.replace(key=jax.random.key_data(template.key))
        state = serialization.from_state_dict(template, record["state"])
        checkpoint.check_shapes(template, state)
        wall_seconds = float(meta["wall_seconds"])
    except Exception as error:  # any corruption: missing keys, shapes, a config refused
        raise checkpoint.CheckpointError(
            f"{path} is not a readable advonline checkpoint ({error})"
        ) from None
    if not verified:
        checksums.note_unverified(f"checkpoint {path}")
    return config, state.replace(key=jax.random.wrap_key_data(state.key)), wall_seconds


def check_training_folder(folder: str | Path, config: ProblemRunConfig, resume: bool) -> Path:
    """Refuse, before any work, what the full game refuses (:func:`advonline.train.check_folder`:
    a folder that is not the tool's own run folder, a checkpointed one without ``resume``),
    a finished run without ``resume``, a resume with no checkpoint to go on from, a resume
    with another config, and a resume whose policy file (kept as it is) is damaged (one line
    each)."""
    check_folder(folder, resume)
    folder = Path(folder)
    if not resume and is_run(folder):
        raise InputError(
            f"{folder} already holds a run; pass --resume to continue it or choose another --out"
        )
    held = checkpoint.checkpoint_path(folder).exists()
    if resume and not held:
        raise InputError(f"nothing to resume: no checkpoint in {folder}")
    if resume and (folder / POLICY_NAME).exists():  # kept as it is: verified first
        export.read(folder / POLICY_NAME)
    if held and not load_checkpoint(folder)[0].same_run(config):
        raise InputError(
            f"the config differs from the one {folder} was trained with; "
            "resume with the same config or choose another --out"
        )
    return folder


def figures(rows: list[dict], report: dict, out: Path) -> list[Path]:
    """A run's figures from its metrics ``rows`` (``step``, ``wall_seconds``, ``upper_bound``)
    and its ``report``: the certified ratio over training, and the learned policy beside the
    baselines and the lower bound."""
    title = evaluation.setting_line(report["setting"])
    bound = report["lower_bound"]["ratio"] if report["lower_bound"] else None
    files = plots.convergence_figure(
        {LEARNED: rows},
        out,
        "convergence",
        title,
        target=None,
        column="upper_bound",
        label="certified ratio of the iterate",
        step_label="measurement (one per epoch)",
    )
    ratios = {row["algorithm"]: row["competitive_ratio"] for row in report["results"]}
    if bound is not None:
        ratios["lower bound (every algorithm)"] = bound
    name = report["setting"]["problem"]
    files += plots.bars_figure([(name, ratios)], out, "learned-vs-baselines", title)
    return files


def train_job(
    config: ProblemRunConfig, config_path: str | Path, folder: Path, say=print
) -> Trained:
    """Train into the run ``folder`` (:func:`check_training_folder` has accepted it): a
    checkpoint and ``metrics.csv`` after every epoch, resumed from the checkpoint it holds,
    then the delivered policy's file (never over one the folder holds: a resumed run
    delivers the same policy)."""
    folders.claim(
        folder,
        "run",
        {
            "config": str(config_path),
            "setting": config.setting.describe(),
            "environment": environment.describe(),
        },
    )
    problem, setting = config.problem, config.setting
    say(f"training {problem.name} {setting.describe()} for {config.loop.epochs} epochs")

    def log(row: dict) -> None:
        bound = row["upper_bound"]
        certified = "-" if bound == "" else f"{bound:.4f}"
        found = row["oracle_ratio"]
        say(
            f"epoch {row['epoch']}: {row['wall_seconds']:.0f} s, certified {certified}, "
            f"found {found:.4f}"
        )

    trained = train(config, folder, log)
    if not (folder / POLICY_NAME).exists():  # a resumed run's file is kept as it is
        learned = problem.policy_head(setting, config.head).to_policy(trained.params)
        policy = checksums.signed(problem.export(setting, learned))
        atomic_write(folder / POLICY_NAME, (json.dumps(policy, indent=1) + "\n").encode())
    return trained


def main_job(
    config: ProblemRunConfig,
    config_path: str | Path,
    folder: Path,
    budget: Budget,
    say=print,
    baselines: tuple[str, ...] | None = None,
    resume: bool = False,
) -> dict:
    """Train (or with ``resume`` go on from the folder's checkpoint), measure beside
    ``baselines`` (default: all of the problem's), export and plot; returns the report
    written to ``evaluation.json``."""
    folder = check_training_folder(folder, config, resume)
    trained = train_job(config, config_path, folder, say)
    problem, setting = config.problem, config.setting
    learned = problem.policy_head(setting, config.head).to_policy(trained.params)
    names = tuple(problem.baselines) if baselines is None else baselines
    policies = {LEARNED: learned, **baseline_policies(problem, setting, names)}
    results = [measure(problem, setting, name, p, budget) for name, p in policies.items()]
    archived = SourceRatio(trained.archive_worst, "the run's archive, against the policy")
    results = [
        with_source(m, ARCHIVE_SOURCE, archived) if m.algorithm == LEARNED else m for m in results
    ]
    tables = config.to_tables()
    training = {
        **config.loop.table(),
        "oracle": tables["oracle"]
        if config.loop.simultaneous
        else dataclasses.asdict(config.oracle),
        **({"adversary": tables["adversary"]} if config.adversary is not None else {}),
        "seconds": trained.seconds,
    }
    rows = plots.read_metrics(folder / METRICS_NAME, METRIC_FIELDS)
    report = evaluation.report(
        problem,
        setting,
        budget,
        results,
        LEARNED,
        names,
        training=training,
        phase_seconds=profile.totals(rows),
    )
    atomic_write(folder / EVALUATION_NAME, (json.dumps(report, indent=1) + "\n").encode())
    report["figures"] = [str(path) for path in figures(rows, report, folder / "figures")]
    return report


def is_interface_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a run folder of a problem on the interface alone (its marker
    names the problem; advonline/folders.py)."""
    found = folders.marker(folder)
    setting = found.get("setting") if found is not None else None
    name = setting.get("problem") if isinstance(setting, dict) else None
    return name in registry.names() and registry.get(name).training is None


def is_run(folder: str | Path) -> bool:
    """Whether ``folder`` holds a finished ``advonline run`` of a problem on the interface."""
    return (Path(folder) / EVALUATION_NAME).is_file() and (Path(folder) / POLICY_NAME).is_file()


def plot_runs(run_folders: list[str | Path], out: str | Path) -> list[Path]:
    """The figures of finished runs (:func:`main_job`'s), from their ``metrics.csv`` and
    ``evaluation.json``, into ``out`` (a new folder or one the tool made), one sub-folder per
    run."""
    out = folders.check_own(out, folders.KINDS)
    loaded = []
    for folder in map(Path, run_folders):
        if not (folder / EVALUATION_NAME).is_file() and checkpoint.checkpoint_path(folder).exists():
            raise InputError(
                f"{folder} is trained but not measured yet: advonline run CONFIG --resume "
                f"--out {folder} measures it"
            )
        report = read_json(folder / EVALUATION_NAME, "run report")
        try:
            rows = plots.read_metrics(folder / METRICS_NAME, METRIC_FIELDS)
        except (OSError, ValueError) as error:
            raise InputError(f"{folder} has no metrics table advonline wrote ({error})") from None
        keys = ("setting", "budget", "lower_bound", "reference", "results")
        if not isinstance(report, dict) or not all(key in report for key in keys):
            raise InputError(f"{folder / EVALUATION_NAME} is not a run report advonline wrote")
        loaded.append((folder, rows, report))
    with folders.FolderLock(out):  # one writer; taken once the runs are known to be drawable
        about = {"made_by": "advonline plot", "runs": [str(folder) for folder, _, _ in loaded]}
        folders.claim(out, "figures", about)
        return [
            path
            for folder, rows, report in loaded
            for path in figures(rows, report, out / folder.name)
        ]
