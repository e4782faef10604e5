"""What happens to a finished training run, of any problem: measure it beside the baselines,
export its policy, draw its figures, and the main job's second half (``advonline run``).

I/O and the evaluator's SciPy solvers live here, outside every jitted function.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from advonline import checkpoint, checksums, export, folders, measurement_cache, plots, profile
from advonline import problems as registry
from advonline.archive_view import hardest_delivered
from advonline.errors import InputError
from advonline.evaluation import (
    ARCHIVE_SOURCE,
    Budget,
    Measurement,
    Progress,
    SourceRatio,
    measure,
    measure_all,
    report,
    with_source,
)
from advonline.export import ExportError
from advonline.mixture import SnapshotMixture
from advonline.oracle_loop import delivered_mixture
from advonline.seeds import SUMMARY_NAME
from advonline.simultaneous_loop import hardest_replayed
from advonline.train import METRIC_FIELDS, METRICS_NAME

#: The metrics column a run's convergence figure draws and its axis label: the guarantee (the
#: best certificate so far, or the lowest worst case the measurements found).
CONVERGENCE_CURVE = ("guarantee", "guarantee (best so far)")
EVALUATION_NAME = "evaluation.json"  # the run's measured ratios beside the baselines
#: The hardest kept instances of a run the evaluator's search also starts from.
KEPT_STARTS = 16
POLICY_NAMES = {"learned": "policy.json", "learned-deterministic": "policy-readout.json"}
#: The folder of a run's own figures, which the main job draws.
FIGURES_NAME = "figures"


class RunError(ValueError):
    """A run folder that cannot be plotted or finished (one-line message)."""


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """A run folder's checkpoint: the state, the run config it was trained with (any
    problem's), its wall time."""

    folder: Path
    state: Any  # the loop's state (what the checkpoint holds)
    config: Any
    wall_seconds: float

    @property
    def setting(self):
        return self.config.setting

    @property
    def problem(self):
        return self.config.problem

    def baselines(self) -> dict:
        """The problem's classic algorithms, ``{name: make(setting)}``."""
        return dict(self.problem.baselines)

    @property
    def steps(self) -> int:
        return int(self.state.step)

    @functools.cached_property
    def game(self):
        """The game the run played (built once, on the first question that needs it)."""
        return self.config.build_game()

    def delivered(self) -> tuple[Any, dict]:
        """The run's game and the parameters it delivers."""
        return self.game, self.game.delivered_params(self.state)

    def policies(self) -> dict:
        """``{"learned": randomised, "learned-deterministic": read-out}``
        (:func:`delivered_policies`)."""
        return delivered_policies(self.game, self.state)

    @functools.cached_property
    def kept_inputs(self) -> tuple[np.ndarray, float] | None:
        """The instances the run kept (an oracle-loop run's archive, a simultaneous run's
        replay) ``[N, T]``, hardest against what it delivers first, and the worst exact ratio
        among them; None for a run that keeps none."""
        if self.config.training_loop == "oracle":
            return hardest_delivered(self.game, self.state)
        if int(self.state.replay.filled.sum()) == 0:
            return None
        return hardest_replayed(self.game, self.state)

    def search_starts(self) -> np.ndarray | None:
        """The :data:`KEPT_STARTS` hardest kept inputs as tokens of the evaluator's encoding,
        for its search to start from: as they are where the run trained in that encoding;
        else decoded and written again by its ``encode`` (the nearest inputs it can write),
        where it has one; else None, as for a run that keeps none."""
        if self.kept_inputs is None:
            return None
        kept = self.kept_inputs[0][:KEPT_STARTS]
        encoding = self.problem.encoding(self.setting)
        if self.game.encoding == encoding:
            return kept
        if (encode := getattr(encoding, "encode", None)) is None:
            return None
        return np.asarray(encode(self.game.encoding.decode(jnp.asarray(kept))), np.int32)

    def archive_source(self) -> SourceRatio | None:
        """The run's kept instances re-scored exactly against what it delivers: the worst
        ratio found there, or None for a run that keeps none."""
        if self.kept_inputs is None:
            return None
        note = "the run's archive, re-scored exactly against the policy"
        return SourceRatio(self.kept_inputs[1], note)

    def mixture(self) -> SnapshotMixture | None:
        """The delivered mixture of snapshots, if the run delivers one."""
        return delivered_mixture(self.game, self.state)


def delivered_policies(game, state) -> dict:
    """What a run delivers, by evaluator name: ``learned`` is the network with the best
    guarantee or, where it is better (an oracle-loop run whose game mixes), the equilibrium
    mixture of snapshots chosen once per input; ``learned-deterministic``, where the problem
    has a deterministic read-out (posted pricing's median price), is the network's, or for a
    mixture its heaviest member's."""
    mixture = delivered_mixture(game, state)
    if mixture is None:
        return game.learned(game.delivered_params(state))
    readout = game.readout(mixture.heaviest())
    return {"learned": mixture} | ({} if readout is None else {"learned-deterministic": readout})


def open_run(folder: str | Path) -> TrainedRun:
    """The trained run in ``folder`` (CheckpointError if it has none)."""
    if not Path(folder).is_dir():
        raise RunError(f"no run folder {folder}")
    marked = (folders.marker(folder) or {}).get("kind")
    if marked == "seeds" or (marked is None and (Path(folder) / SUMMARY_NAME).is_file()):
        runs = ", ".join(sorted(path.name for path in Path(folder).glob("seed*") if path.is_dir()))
        raise RunError(f"{folder} holds the runs of several seeds ({runs}); name one of them")
    state, config, wall = checkpoint.load(folder)
    return TrainedRun(Path(folder), state, config, wall)


def evaluate_run(
    run: TrainedRun,
    budget: Budget,
    baselines: tuple[str, ...] | None = None,
    mesh: Mesh | None = None,
    store: bool = True,
    progress: Progress | None = None,
    measured: dict[str, Measurement] | None = None,
) -> tuple[dict, list[Measurement]]:
    """Measure the learned policies and ``baselines`` (default: every one of the problem's)
    on the run's setting with the one evaluator and one budget (the instance batches split
    over ``mesh``'s devices, if given), and with ``store`` store the report as
    ``EVALUATION_NAME`` in the run folder (:func:`store_report`). The delivered policy
    (``learned``) of an oracle-loop run also has its own archive as a source: a worst case is
    a claim about every input, so an archived instance the evaluator's search did not match
    still counts, and the evaluator's search against the learned policies also starts from
    its hardest archived instances. ``progress`` hears each source begin and end.

    ``measured``: baselines already measured on this setting with this budget (by another
    seed's run of the same config), taken as they are, as are those the measurement cache
    keeps (:func:`measure_policies`)."""
    problem = run.problem
    baselines = tuple(problem.baselines) if baselines is None else baselines
    learned = run.policies()
    kept = run.search_starts()
    starts = {} if kept is None else dict.fromkeys(learned, kept)
    args = (problem, run.setting, learned, baselines, budget, mesh, starts, progress, measured)
    results = measure_policies(*args)
    if (archived := run.archive_source()) is not None:
        results = [
            with_source(m, ARCHIVE_SOURCE, archived) if m.algorithm == "learned" else m
            for m in results
        ]
    document = report(
        problem,
        run.setting,
        budget,
        results,
        learned="learned",
        baselines=baselines,
        progress=progress,
        checkpoint=str(run.folder),
        config=run.config.to_tables(),
        training_steps=run.steps,
        training_seconds=run.wall_seconds,
        phase_seconds=phase_seconds(run),
    )
    if store:
        store_report(run.folder, document)
    return document, results


def store_report(folder: Path, document: dict, say: Callable[[str], None] | None = None) -> bool:
    """Store ``document`` as the run ``folder``'s ``EVALUATION_NAME`` (derived data, replaced),
    unless another process holds the folder (a run still training there): then nothing is
    written, ``say`` hears why, and False is returned."""
    say = say or (lambda line: print(line, file=sys.stderr))
    try:
        with folders.FolderLock(folder):
            folders.atomic_write(folder / EVALUATION_NAME, json.dumps(document, indent=1).encode())
    except folders.FolderError as error:
        say(f"advonline: note: the report is not stored: {error}")
        return False
    return True


def kept_baselines(
    problem, setting, budget, names, measured=None, mesh: Mesh | None = None
) -> dict[str, Measurement]:
    """The baselines of ``names`` that need no measuring, with no seconds (they took none
    here): those in ``measured`` (another seed's run measured them on this setting with this
    budget) and those the measurement cache keeps (advonline/measurement_cache.py). A
    baseline's measurement depends on the setting and the budget alone (the evaluator's key
    is the budget's seed), so measuring it again would give the same figures."""
    kept = {
        name: dataclasses.replace(measured[name], seconds={})
        for name in names
        if measured and name in measured
    }
    others = [name for name in names if name not in kept]
    return kept | measurement_cache.load(problem, setting, budget, others, mesh)


def measure_policies(
    problem,
    setting,
    learned: dict,
    names: tuple[str, ...],
    budget: Budget,
    mesh: Mesh | None = None,
    starts: dict | None = None,
    progress: Progress | None = None,
    measured: dict[str, Measurement] | None = None,
) -> list[Measurement]:
    """:func:`measure_all` of the ``learned`` policies (``{name: policy}``) and the
    baselines ``names``, in that order; the baselines :func:`kept_baselines` has are taken
    as they are, the others measured and kept in the measurement cache."""
    kept = kept_baselines(problem, setting, budget, names, measured, mesh)
    fresh = tuple(name for name in names if name not in kept)
    policies = {**learned, **baseline_policies(problem, setting, fresh)}
    results = measure_all(problem, setting, policies, budget, mesh, starts, progress)
    by_name = {m.algorithm: m for m in results}
    measurement_cache.store(problem, setting, budget, [by_name[name] for name in fresh], mesh)
    by_name |= kept
    return [by_name[name] for name in (*learned, *names)]


def baseline_policies(problem, setting, names: tuple[str, ...]) -> dict:
    """``{name: policy}`` of ``problem``'s baselines ``names`` on ``setting``, built in
    float64 (the evaluator's precision)."""
    with jax.enable_x64(True):
        return {name: problem.baselines[name](setting) for name in names}


def read_policy_file(path: str | Path, problem_name: str | None = None):
    """``(problem, setting, name, policy)`` of the policy file at ``path``: the problem its
    setting names (``problem_name`` where it names none, else the registry's default), the
    setting and the policy the simulator runs, and the name the evaluator reports it under
    (its provenance's algorithm, marked as the file's where a baseline has that name).
    InputError says why the file cannot be used."""
    document, verified = export.read(path)
    setting = document.get("setting") if isinstance(document, dict) else None
    named = setting.get("problem") if isinstance(setting, dict) else None
    if named is not None and problem_name is not None and named != problem_name:
        raise InputError(f"policy file {path} is a policy of {named!r}, not of {problem_name!r}")
    name = next(n for n in (named, problem_name, registry.DEFAULT) if n is not None)
    if not isinstance(name, str) or name not in registry.names():
        raise InputError(f"policy file {path} names an unknown problem {name!r}")
    problem = registry.get(name)
    if problem.restore is None:
        raise InputError(f"{name} reads no policy files back (its problem has no restore)")
    what = f"policy file {path}"
    if named is None and problem_name is None:
        what += f" (it names no problem: read as {name}'s)"
    setting, policy = _restore_read(problem, path, document, verified, what)
    provenance = document.get("provenance")
    algorithm = provenance.get("algorithm") if isinstance(provenance, dict) else None
    label = algorithm if isinstance(algorithm, str) and algorithm else "policy file"
    if label in problem.baselines:
        label = f"{label} (policy file)"
    return problem, setting, label, policy


def _restore_read(problem, path: Path, document, verified: bool, what: str):
    """``(setting, policy)`` of the policy file at ``path``, read as ``document`` by
    :func:`export.read` (``verified``: it carried a checksum, which matched), with the note
    on an unverified file once it has read as a policy."""
    try:
        restored = export.restore(problem, document, what)
    except RecursionError:  # a deep structure where a list of numbers belongs
        raise InputError(f"policy file {path} nests too deeply to be a policy") from None
    if not verified:
        checksums.note_unverified(f"policy file {path}")
    return restored


def stored_evaluation(run: TrainedRun) -> dict | None:
    """The run's stored report, if there is a complete one for its current checkpoint and
    setting (else None: the caller measures again and replaces it, a derived file)."""
    path = run.folder / EVALUATION_NAME
    try:
        document = json.loads(path.read_text())
        stored_budget = document["budget"]
        # a report from an older evaluator (a budget field it did not have) is not current
        current = document["training_steps"] == run.steps
        current = current and Budget(**stored_budget).describe() == stored_budget
        current = current and document["setting"] == json.loads(json.dumps(run.setting.describe()))
        label, known = run.problem.reference_of(run.setting) or (None, None)
        reference = None if known is None else {"label": label, "ratio": known}
        current = current and document["reference"] == reference
        for result in document["results"]:
            _ratio(result["competitive_ratio"])
            current = current and isinstance(result["algorithm"], str)
            if result["upper_bound"] is not None:
                _ratio(result["upper_bound"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return document if current else None


def _ratio(value) -> None:
    """TypeError unless ``value`` is a JSON number > 0 (a stored report's ratio: infinite
    where an algorithm earns nothing, never negative or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TypeError(f"not a ratio: {value!r}")


def phase_seconds(run: TrainedRun) -> dict | None:
    """Where the run's training time went (:func:`profile.totals` of its metrics), or None
    when its metrics do not say (a simultaneous-loop run, or one from before the profile)."""
    try:
        return profile.totals(plots.read_metrics(run.folder / METRICS_NAME, METRIC_FIELDS))
    except (OSError, ValueError, csv.Error):
        return None


def read_metrics(run: TrainedRun) -> list[dict]:
    """The run's ``metrics.csv`` rows (numbers), or one RunError line saying what is wrong."""
    path = run.folder / METRICS_NAME
    try:
        rows = plots.read_metrics(path, METRIC_FIELDS)
    except OSError as error:
        raise RunError(
            f"{run.folder} has no readable {METRICS_NAME} to plot ({error.strerror})"
        ) from None
    except (ValueError, csv.Error) as error:  # UnicodeDecodeError is a ValueError
        raise RunError(f"{path} is not a metrics table advonline wrote ({error})") from None
    if not rows:
        raise RunError(f"{path} has no rows to plot")
    if any(row["step"] is None for row in rows):
        raise RunError(f"{path} has rows without a step")
    return rows


def measured_summary(measurement: Measurement, budget: Budget, measured_on: str) -> dict:
    """The provenance entry of an exported policy's measured ratio."""
    return {
        "competitive_ratio": measurement.competitive_ratio,
        "worst_source": measurement.worst_source,
        "sources": {name: source.ratio for name, source in measurement.sources.items()},
        "upper_bound": measurement.upper_bound.ratio,
        "budget": budget.describe(),
        "measured_on": measured_on,
    }


def export_run(
    run: TrainedRun,
    out: str | Path,
    algorithm: str = "learned",
    budget=None,
    measured: Measurement | None = None,
    table: bool = False,
    say: Callable[[str], None] | None = None,
) -> tuple[Path, Measurement | None]:
    """Write the run's ``algorithm`` (``learned`` or ``learned-deterministic``) as a policy file:
    the network (version 2, any K; a delivered mixture of snapshots as kind ``mixture``) or
    with ``table`` its grid table (version 1, K = 1).

    The provenance's measured ratio is ``measured`` (a measurement of the checkpoint's policy,
    which the file equals: exactly for version 2, on the grid for version 1) or, given a
    ``budget``, a fresh measurement of the exported file itself (``say`` hears when it
    starts); with neither it is null. ``out`` must not exist.
    """
    game, params = run.delivered()
    if algorithm not in run.policies():
        raise RunError(f"{run.folder}: a run of {run.problem.name} delivers no {algorithm} policy")
    if table and run.problem.documents is None:
        raise RunError(f"{run.folder}: --table: {run.problem.name} writes no table policy files")
    out = export.check_target(out)
    source = export.provenance(algorithm, run.config, run.steps, str(run.folder), None)
    if table:
        document = game.table_document(run.policies()[algorithm], source)
    elif (mixture := run.mixture()) is not None and algorithm == "learned":
        document = game.mixture_document(mixture, source)
    else:
        if mixture is not None:  # the read-out of a delivered mixture: its heaviest member's
            params = mixture.heaviest().params
        document = game.network_document(params, algorithm == "learned-deterministic", source)
    if measured is not None:
        budget = budget or Budget()
        summary = measured_summary(measured, budget, "the checkpoint's policy")
    elif budget is not None:
        problem = run.problem
        if problem.restore is None:
            raise ExportError(
                f"{problem.name} reads no policy files back (it has no restore), so the file "
                "cannot be measured: pass --no-measure"
            )
        setting, loaded = export.restore(problem, document)
        if say is not None:
            say(f"measuring the exported {algorithm} policy (budget {budget.describe()})")
        measured = measure(problem, setting, algorithm, loaded, budget)
        summary = measured_summary(measured, budget, "the exported file")
    else:
        summary = None
    document["provenance"]["measured"] = summary
    export.write(out, document)
    return out, measured


def check_kept_files(folder: str | Path, problem) -> None:
    """Refuse, before any work, a resumed run whose kept files cannot serve it: a policy file
    that does not load (a resume keeps them as they are; InputError names the file), or a
    ``figures`` path the run cannot draw into (RunError). A problem that reads no files back
    has no policy files to check."""
    figures = Path(folder) / FIGURES_NAME
    try:
        folders.check_own(figures, folders.KINDS)
    except folders.FolderError:
        raise RunError(
            f"{figures} is in the way of the run's figures (a file, or a folder advonline did "
            "not make); move it away to resume"
        ) from None
    if problem.restore is None:
        return
    for name in POLICY_NAMES.values():
        if (path := Path(folder) / name).exists():
            _restore_read(problem, path, *export.read(path), f"policy file {path}")


def default_run_folder(config_path: str | Path) -> Path:
    """``runs/<config name>-<UTC time>``: a new folder per main job, so none is overwritten."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{Path(config_path).stem}-{stamp}"


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    """Where the main job put things, and what it measured."""

    run: TrainedRun
    report: dict
    results: list[Measurement]
    policies: list[Path]
    figures: list[Path]

    @property
    def baseline_measurements(self) -> dict[str, Measurement]:
        """The baselines' measurements, for another seed's ``finish_run(measured=...)``."""
        baselines = self.run.baselines()
        return {m.algorithm: m for m in self.results if m.algorithm in baselines}


def finish_run(
    folder: str | Path,
    budget,
    say: Callable[[str], None] = print,
    baselines: tuple[str, ...] | None = None,
    mesh: Mesh | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    measured: dict[str, Measurement] | None = None,
) -> FinishedRun:
    """After training (the main job's first half): measure the learned policies beside the
    ``baselines`` (default every one), export both learned policies, and draw the run's
    figures into ``folder/figures``. With ``resume`` (the job was interrupted after training)
    a policy file it already wrote is kept once it loads: the measurement is recomputed from
    the same checkpoint with the same evaluator stream, so it is the same file but for its
    creation time. ``progress`` hears each source of the measurement begin and end;
    ``measured``: baselines another seed's run measured already (:func:`evaluate_run`)."""
    run = open_run(folder)
    baselines = tuple(run.baselines()) if baselines is None else baselines
    earlier = kept_baselines(run.problem, run.setting, budget, baselines, measured, mesh)
    fresh = [name for name in baselines if name not in earlier]
    what = " and ".join(["learned", *([", ".join(fresh)] if fresh else [])])
    if earlier:
        what += f" ({'the other baselines' if fresh else 'every baseline'} as measured before)"
    say(f"measuring {what} (budget: {budget.describe()})")
    # the baselines found above are taken as they are, not looked up again
    document, results = evaluate_run(
        run, budget, baselines, mesh, progress=progress, measured=earlier
    )
    by_name = {m.algorithm: m for m in results}
    exported = []
    if resume:
        check_kept_files(run.folder, run.problem)  # kept only once they load
    for algorithm, name in POLICY_NAMES.items():
        target = run.folder / name
        if algorithm not in by_name:  # a policy this problem does not deliver
            continue
        if resume and target.exists():
            exported.append(target)
            continue
        try:
            exported.append(export_run(run, target, algorithm, budget, by_name[algorithm])[0])
        except ExportError as error:  # a problem without policy files: measured, not written
            say(f"advonline: note: {algorithm} is not exported: {error}")
    figures = plot_runs([run.folder], run.folder / FIGURES_NAME, budget, say)
    return FinishedRun(run, document, results, exported, figures)


def plot_runs(
    run_folders: list[str | Path],
    out: str | Path,
    budget=None,
    say: Callable[[str], None] = print,
) -> list[Path]:
    """Every figure of ``advonline plot`` for the runs in ``run_folders``, written to ``out`` (a
    new folder or one the tool made: advonline/folders.py).

    Per run: ratio over training, exploitability, and the price curve (K = 1) or the price
    heatmap (K >= 2). Across the runs: learned vs baselines per setting (grouped bars) and the
    training convergence (per-round vs REINFORCE when the runs differ in their update).
    A run without a current ``evaluation.json`` is measured first with ``budget`` (default:
    its problem's standard budget), and the report stored in its folder.
    """
    out = folders.check_own(out, folders.KINDS)
    runs = [open_run(folder) for folder in run_folders]
    metrics = [read_metrics(run) for run in runs]  # every run checked before any figure
    with folders.FolderLock(out):  # one writer; taken once the runs are known to be drawable
        about = {"made_by": "advonline plot", "runs": [str(run.folder) for run in runs]}
        folders.claim(out, "figures", about)
        return _draw(runs, metrics, out, budget, say)


def _draw(runs: list[TrainedRun], metrics: list, out: Path, budget, say) -> list[Path]:
    """:func:`plot_runs`' figures, into the claimed folder ``out``."""
    written, bars, bounds, convergence, updates, budgets = [], [], [], {}, set(), set()
    ratios = set()
    for run, rows in zip(runs, metrics, strict=True):
        name = run.folder.name
        evaluation = stored_evaluation(run)
        if evaluation is None:
            budget = budget or Budget()
            say(
                f"measuring {run.folder} (no current {EVALUATION_NAME}; budget {budget.describe()})"
            )
            evaluation, _ = evaluate_run(run, budget)
        setting = evaluation["setting"]
        game = run.game
        title = game.setting_title(setting)
        known = evaluation["reference"]
        reference = None if known is None else (known["label"], known["ratio"])
        ratio = run.problem.ratio_name
        ratios.add(ratio)
        written += plots.ratio_figure(name, rows, evaluation, out, title, reference, ratio)
        written += plots.exploitability_figure(name, rows, title, out, ratio)
        written += game.policy_figures(name, run.policies(), out)
        results = evaluation["results"]
        bars.append((f"{name}\n{title}", {r["algorithm"]: r["competitive_ratio"] for r in results}))
        bounds.append({r["algorithm"]: r["upper_bound"] for r in results})
        loop = run.config.training_loop
        curves = convergence.setdefault(loop, {})
        curves[f"{name} ({run.config.update})"] = rows
        updates.add(run.config.update)
        budgets.add(Budget(**evaluation["budget"]).summary())
    budget_text = budgets.pop() if len(budgets) == 1 else "budgets differ between runs"
    written += plots.bars_figure(
        bars,
        out,
        "learned-vs-baselines",
        f"Learned vs baselines, measured CR\n{budget_text}",
        bounds,
        ratios.pop() if len(ratios) == 1 else "(earned and cost ratios mixed)",
    )
    title = (
        "Per-round vs REINFORCE update: training convergence"
        if updates == {"per-round", "reinforce"}
        else f"Training convergence ({', '.join(sorted(updates))} update)"
    )
    column, label = CONVERGENCE_CURVE
    for loop, runs_of_loop in convergence.items():
        stem = "convergence" if len(convergence) == 1 else f"convergence-{loop}"
        written += plots.convergence_figure(
            runs_of_loop, out, stem, f"{title}, {loop} loop", column=column, label=label
        )
    return written
