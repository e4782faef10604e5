"""The ``advonline`` command line: the one place that defines flags; it calls library functions.

Bad input gets one line on stderr naming the problem and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import threading
import tomllib
import warnings
from pathlib import Path

import jax
from tqdm import tqdm

from advonline import (
    archive_view,
    checks,
    compilation_cache,
    configs,
    evaluation,
    folders,
    parallel,
    pipeline,
    plots,
    preflight,
    seeds,
)
from advonline import problems as registry
from advonline.checkpoint import CheckpointError
from advonline.checksums import UnverifiedFile
from advonline.configs import ConfigError
from advonline.errors import InputError
from advonline.export import ExportError, check_target
from advonline.folders import FolderError, check_path
from advonline.mixture import member_count
from advonline.oracle_loop import TrainingDiverged
from advonline.parallel import DevicesError
from advonline.pipeline import RunError
from advonline.preflight import PreflightError
from advonline.ratio import format_ratio
from advonline.train import (
    METRICS_NAME,
    TrainError,
    check_folder,
    check_processes,
    check_resumable,
    train,
)

EXIT_BAD_INPUT = 2
EXIT_OUT_OF_MEMORY = 3  # a command that ran out of memory part way (after its checks passed)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports it


class UsageError(Exception):
    """Bad input from the user; reported as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """All subcommands and their flags."""
    parser = _Parser(
        prog="advonline",
        description="Learn online algorithms by adversarial training, measure their "
        "competitive ratios beside the classic baselines, export and plot them.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ev = commands.add_parser("evaluate", help="measured competitive ratio of algorithms")
    ev.add_argument(
        "--problem",
        default=None,
        help=f"online problem, one of {', '.join(registry.names())} (default {registry.DEFAULT}; "
        "a policy file or run folder names its own)",
    )
    ev.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a field of the problem's setting, as in a config's [setting] table (repeatable; "
        "TOML values: high=100, divisible=false, capacities=[1, 2])",
    )
    ev.add_argument(
        "--algorithm",
        action="append",
        default=None,
        metavar="NAME",
        help="repeatable; a baseline of the problem (default: all)",
    )
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    _devices_flag(ev, "devices to split the families' and random instances over (default 0: all)")
    _budget_flags(ev)
    learned = ev.add_mutually_exclusive_group()
    learned.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="evaluate the learned policy of a training run (on its own setting) beside "
        "the --algorithm baselines",
    )
    learned.add_argument(
        "--policy",
        metavar="POLICY.json",
        help="evaluate an exported policy file (on its own setting) beside the --algorithm "
        "baselines",
    )
    learned.add_argument(
        "--instances",
        metavar="FILE.csv",
        help="run the baselines on your own input file (for a problem that reads one)",
    )
    ev.set_defaults(run=run_evaluate)

    ck = commands.add_parser("check", help="the checks every problem should pass, on a setting")
    ck.add_argument("problem", help=f"a registered problem: {', '.join(registry.names())}")
    ck.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a field of the problem's setting (repeatable; default: each small setting of the "
        "problem's own cases)",
    )
    ck.set_defaults(run=run_check)

    tr = commands.add_parser("train", help="train the algorithm network against the adversary")
    tr.add_argument("config", help="TOML config (see experiments/configs/)")
    tr.add_argument("--out", required=True, metavar="DIR", help="run folder: checkpoints, metrics")
    tr.add_argument("--resume", action="store_true", help="continue the run in --out")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.add_argument(
        "--seeds",
        metavar="LIST",
        help="train these game seeds in one process (0-4, 0,2,5), one run folder each in --out, "
        "and summarise the last epoch's figures as median [min, max]",
    )
    _concurrent_flag(tr, "train")
    tr.add_argument(
        "--check",
        action="store_true",
        help="check the config, the run folder and the memory estimate; write nothing",
    )
    _devices_flag(tr)
    tr.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="multi-process run: process 0's address (else $JAX_COORDINATOR_ADDRESS)",
    )
    tr.add_argument(
        "--processes", type=int, help="multi-process run: how many (else $JAX_NUM_PROCESSES)"
    )
    tr.add_argument(
        "--process-id", type=int, help="multi-process run: this one's index (else $JAX_PROCESS_ID)"
    )
    tr.set_defaults(run=run_train)

    ex = commands.add_parser("export", help="write a trained policy as a versioned JSON file")
    ex.add_argument("--checkpoint", required=True, metavar="DIR", help="training run folder")
    ex.add_argument("--out", required=True, metavar="POLICY.json", help="new file to write")
    ex.add_argument(
        "--read-out",
        action="store_true",
        help="export the deterministic read-out instead of the randomised policy",
    )
    ex.add_argument(
        "--table",
        action="store_true",
        help="write a version-1 table on the simulator's state grid instead of the network",
    )
    ex.add_argument(
        "--no-measure",
        action="store_true",
        help="skip measuring the exported policy (provenance 'measured' is then null)",
    )
    ex.set_defaults(run=run_export)

    pl = commands.add_parser("plot", help="figures of finished runs (PNG and PDF)")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR", help="training run folders")
    pl.add_argument("--out", required=True, metavar="DIR", help="folder for the figures")
    pl.set_defaults(run=run_plot)

    ar = commands.add_parser(
        "archive", help="the hard instances an oracle-loop run archived, hardest first"
    )
    ar.add_argument("run_dir", metavar="RUN_DIR", help="training run folder (game.loop = oracle)")
    ar.add_argument("--top", type=int, default=20, help="rows to print (default 20; 0: all)")
    ar.add_argument("--json", action="store_true", help="print every row as one JSON object")
    ar.add_argument(
        "--traces",
        metavar="DIR",
        help="new folder: write each instance as a CSV trace for evaluate --instances",
    )
    ar.set_defaults(run=run_archive)

    job = commands.add_parser(
        "run", help="the main job: train a config, measure, export and plot in one go"
    )
    job.add_argument("config", help="TOML config (see experiments/configs/)")
    job.add_argument(
        "--out", metavar="DIR", help="new run folder (default runs/<config>-<UTC time>)"
    )
    job.add_argument("--quiet", action="store_true", help="no progress bar")
    job.add_argument(
        "--seeds",
        metavar="LIST",
        help="train and measure these game seeds in one process (0-4, 0,2,5), one run folder "
        "each in --out, and summarise every figure as median [min, max]",
    )
    _concurrent_flag(job, "train (then measure in turn)")
    job.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out: train from its checkpoint, then measure, "
        "export and plot (policy files it already wrote are kept)",
    )
    job.add_argument(
        "--algorithm",
        action="append",
        default=None,
        metavar="NAME",
        help="baseline of the config's problem to measure beside the learned policies, "
        "repeatable (default: all)",
    )
    job.add_argument(
        "--check",
        action="store_true",
        help="check the config, the run folder and the memory estimate; write nothing",
    )
    _devices_flag(job)
    _budget_flags(job)
    job.set_defaults(run=run_main_job)
    return parser


def _devices_flag(
    parser: argparse.ArgumentParser,
    about: str = "devices to shard the batches over (default: the config's game.devices; 0: all)",
) -> None:
    parser.add_argument("--devices", type=int, metavar="N", help=about)


def _run_config(args: argparse.Namespace, tables: dict | None = None):
    """The run config of the config file (any problem's; its ``tables`` where already read)
    with ``--devices`` applied."""
    if tables is None:
        tables = configs.read_toml(args.config)
    run_config = configs.from_tables(tables, args.config)
    if args.devices is not None:
        if args.devices < 0:
            raise UsageError(f"--devices must be >= 0 (0: all), got {args.devices}")
        run_config = run_config.on_devices(args.devices)
    parallel.batch_mesh(run_config.devices)  # refuse a count JAX cannot give, now
    return run_config


def _budget_flags(parser: argparse.ArgumentParser) -> None:
    """The evaluator's budget (``evaluate`` and the measuring half of ``run``), the same for
    every problem (advonline/evaluation.py)."""
    default = evaluation.Budget()
    helps = {
        "seed": "the evaluator's seed",
        "random_instances": "instances drawn from the problem's random distribution",
        "family_members": "members of each parametrised hard family (e.g. its stopping points)",
        "adversary_steps": "training steps of each fresh adversary network",
        "search_steps": "hill-climbing steps of the adversary source's local search (0: none)",
    }
    for name, text in helps.items():
        value = getattr(default, name)
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, type=int, default=value, metavar="N", help=f"{text} (default {value})"
        )


def _budget(args: argparse.Namespace) -> evaluation.Budget:
    """The evaluator's budget the flags ask for."""
    budget = evaluation.Budget(**{name: getattr(args, name) for name in evaluation.BUDGET_FLAGS})
    if problems := budget.check():
        raise UsageError("; ".join(problems))
    return budget


def _problem(name: str):
    """The registered problem ``name`` (UsageError names the known ones)."""
    if name not in registry.names():
        raise UsageError(f"unknown problem {name!r}; known: {', '.join(registry.names())}")
    return registry.get(name)


def _setting_table(pairs: list[str]) -> dict:
    """``--setting KEY=VALUE`` flags as a ``[setting]`` table (each value read as TOML, else
    as a string)."""
    table = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise UsageError(f"--setting takes KEY=VALUE, got {pair!r}")
        if key in table:
            raise UsageError(f"--setting {key} given twice")
        try:
            table[key] = tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError:
            table[key] = text
        except ValueError:  # an integer of thousands of digits: Python refuses to convert it
            raise UsageError(f"--setting {key}: {configs.PAST_64_BITS}") from None
    configs.check_integers(table, "--setting ")
    return table


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``advonline`` console script."""
    compilation_cache.enable()
    with warnings.catch_warnings():
        warnings.simplefilter("always", UnverifiedFile)
        warnings.simplefilter("always", registry.PluginNote)
        warnings.showwarning = _show_warning
        return _main(argv)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Notes about the user's files and installed problems as one line each; other warnings
    as Python prints them."""
    if issubclass(category, (UnverifiedFile, registry.PluginNote)):
        print(f"advonline: note: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


#: What to lower when a command runs out of memory part-way, by command (the config's
#: sizes where the command reads a config or a run made from one).
LOWER_ON_OUT_OF_MEMORY = {
    "evaluate": "the setting's sizes or the budget (--family-members, --random-instances, "
    "--adversary-steps, --search-steps)",
    "check": "the setting's sizes",
}


def _main(argv: list[str] | None) -> int:
    command = None
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        return args.run(args)
    except (
        UsageError,
        InputError,
        ConfigError,
        CheckpointError,
        TrainError,
        ExportError,
        RunError,
        FolderError,
        PreflightError,
        DevicesError,
        TrainingDiverged,
    ) as error:
        print(f"advonline: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # a path the system refuses: permissions, a full disk, ...
        where = f"{error.filename}: " if error.filename else ""
        print(
            f"advonline: error: {where}{error.strerror or error}; files already written are kept",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            "advonline: interrupted; files already written are kept (train and run go on "
            "from their last checkpoint with --resume)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (jax.errors.JaxRuntimeError, MemoryError) as error:
        if not preflight.out_of_memory(error):
            raise
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        lower = LOWER_ON_OUT_OF_MEMORY.get(
            command, "the config's sizes (advonline train CONFIG --out DIR --check estimates them)"
        )
        print(
            f"advonline: error: out of memory ({first}); what was saved before is kept: "
            f"lower {lower}",
            file=sys.stderr,
        )
        return EXIT_OUT_OF_MEMORY


def run_evaluate(args: argparse.Namespace) -> int:
    """``advonline evaluate``: a table (or JSON) of measured ratios, for every problem alike:
    the baselines on a setting given by ``--setting``, a policy file or a run's policy beside
    them, or the baselines on the user's own input file."""
    budget = _budget(args)
    if args.problem is not None:
        _problem(args.problem)  # an empty or unknown name is refused, whatever else is given
    if args.setting and (args.checkpoint or args.policy):
        flag = "--checkpoint" if args.checkpoint else "--policy"
        raise UsageError(f"--setting conflicts with {flag}, which evaluates on its own setting")
    if args.checkpoint:
        return _evaluate_checkpoint(args, budget)
    path = args.policy
    policies, learned, extra = {}, None, {}
    if path:
        problem, setting, learned, policy = pipeline.read_policy_file(path, args.problem)
        policies[learned] = policy
        extra = {"policy": str(path)}
    else:
        problem = _problem(registry.DEFAULT if args.problem is None else args.problem)
    names = _baseline_names(args.algorithm or ([] if path else list(problem.baselines)), problem)
    if args.instances:
        if problem.trace is None:
            raise UsageError(f"--instances: {problem.name} reads no input files")
        document, text = problem.trace(_setting_table(args.setting), args.instances, names, budget)
        print(json.dumps(document) if args.json else text)
        return 0
    if not path:
        setting = problem.setting.from_config(_setting_table(args.setting))
    members = max((member_count(policy) for policy in policies.values()), default=1)
    preflight.check(preflight.evaluation_needs(problem, setting, budget, members))
    mesh = parallel.batch_mesh(_given(args.devices, 0))
    bar = MeasuringBar(args.quiet)
    results = pipeline.measure_policies(
        problem, setting, policies, tuple(names), budget, mesh, progress=bar
    )
    document = evaluation.report(
        problem, setting, budget, results, learned, names, progress=bar, **extra
    )
    bar.close()
    print(json.dumps(document) if args.json else evaluation.table(document))
    if not args.json and (measured := evaluation.time_line(document)) is not None:
        print(measured)
    return 0


def run_check(args: argparse.Namespace) -> int:
    """``advonline check NAME``: every check of :mod:`advonline.checks`, as a table, on the
    ``--setting`` given, else on each small setting the problem's cases name (else on its
    default setting); status 1 if any fails, else 2 if a check could not run because the
    setting does not fit in memory here (it is reported, not passed)."""
    problem = _problem(args.problem)
    if args.setting or problem.cases is None:
        tables = [_setting_table(args.setting)]
    else:
        tables = [dict(table) for table in problem.cases.settings]
    settings = [problem.setting.from_config(table) for table in tables]  # all read, then run
    failed, not_run = [], []
    for setting in settings:
        results = checks.check_problem(problem, setting)
        print(f"checks of {problem.name} on {evaluation.setting_line(setting.describe())}")
        width = max(len(result.name) for result in results) + 2
        above = None
        for result in results:  # a reason that repeats the line above is said once
            detail = "as above" if result.skipped and result.detail == above else result.detail
            print(f"{result.name:<{width}}{result.verdict:<6}{detail}")
            above = result.detail
        failed += [result.name for result in results if result.verdict == "FAIL"]
        not_run += [result.name for result in results if result.verdict == "skip"]
    if failed:
        print(f"failed: {', '.join(dict.fromkeys(failed))}")
        return 1
    if not_run:
        names = ", ".join(dict.fromkeys(not_run))
        print(
            f"advonline: error: not checked, the setting does not fit in memory here: {names}; "
            "lower the setting's sizes",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    print("all checks passed")
    return 0


def _evaluate_checkpoint(args: argparse.Namespace, budget: evaluation.Budget) -> int:
    """``evaluate --checkpoint DIR``: the run's delivered policies (with its own archive as a
    source) beside the ``--algorithm`` baselines, stored as the run's ``evaluation.json`` for
    ``plot`` to reuse (not while another process holds the folder)."""
    run = pipeline.open_run(args.checkpoint)
    problem = run.problem
    if args.problem is not None and args.problem != problem.name:
        raise UsageError(f"{args.checkpoint} is a run of {problem.name}, not {args.problem}")
    names = _baseline_names(args.algorithm or [], problem)
    members = member_count(run.mixture())  # None: one network
    preflight.check(preflight.evaluation_needs(problem, run.setting, budget, members))
    mesh = parallel.batch_mesh(_given(args.devices, 0))
    bar = MeasuringBar(args.quiet)
    document, _ = pipeline.evaluate_run(run, budget, names, mesh, store=False, progress=bar)
    bar.close()
    stored = pipeline.store_report(run.folder, document)
    if args.json:
        print(json.dumps(document))
        return 0
    print(evaluation.table(document))
    if stored:
        print(f"measured ratios stored in {run.folder / pipeline.EVALUATION_NAME}")
    return 0


def _baseline_names(names: list[str], problem) -> tuple[str, ...]:
    """The baselines ``--algorithm`` names, each one of ``problem``'s, in the order given."""
    for name in names:
        if name not in problem.baselines:
            known = ", ".join(problem.baselines)
            raise UsageError(f"unknown algorithm {name!r} for {problem.name}; known: {known}")
    return tuple(dict.fromkeys(names))


def _given(value, default):
    return default if value is None else value


#: The metrics columns the progress bar shows where a row has them, and their labels.
PROGRESS_COLUMNS = {
    "pool_ratio": "ratio",
    "restricted_ratio": "restricted",
    "guarantee": "bound",
    "exploitability": "exploit",
}


def _progress(steps: int, quiet: bool):
    """A tqdm bar on stderr and the ``report`` callback of :func:`advonline.train.train`."""
    bar = tqdm(total=steps, disable=quiet, unit="step", file=sys.stderr)
    shown = {}

    def report(row: dict) -> None:
        bar.update(row["step"] - bar.n)  # a resumed run starts where its checkpoint was
        bar.set_postfix(_shown(row, shown))

    return bar, report


def _shown(row: dict, shown: dict) -> dict:
    """``shown`` (a bar's figures) with what a metrics ``row`` measured."""
    for column, label in PROGRESS_COLUMNS.items():
        if row[column] != "":  # what the loop measured at this row
            shown[label] = f"{row[column]:.3f}"
    if row["steps_per_second"] != "":  # "" after the oracle loop's last measurement
        shown["steps/s"] = f"{row['steps_per_second']:.1f}"
    return shown


class MeasuringBar:
    """A tqdm bar on stderr over algorithms x sources while the evaluator measures
    (:class:`advonline.evaluation.Progress`): the source running, the worst ratio each
    algorithm has so far, and tqdm's estimate of the time left. What runs beside the sources
    (an upper bound computed apart, the lower bound's search) joins the total as it begins,
    so that the bar is full only at the end."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.bar = None
        self.worst: dict[str, float] = {}

    def begin(self, algorithms: list[str]) -> None:
        total = len(algorithms) * len(evaluation.SOURCE_NAMES)
        self.bar = tqdm(total=total, disable=self.quiet, unit="source", file=sys.stderr)
        self.bar.set_description("measuring")

    def started(self, algorithm: str, source: str) -> None:
        if self.bar is not None:
            if source not in evaluation.SOURCE_NAMES:
                self.bar.total += 1
            shown = {"now": f"{algorithm} {source}"}
            if algorithm in self.worst:
                shown["worst"] = format_ratio(self.worst[algorithm])
            self.bar.set_postfix(shown)

    def ended(self, algorithm, source: str, found, seconds: float) -> None:
        if found.ratio is not None:
            self.worst[algorithm] = max(self.worst.get(algorithm, found.ratio), found.ratio)
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _concurrent_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--concurrent",
        type=int,
        default=1,
        metavar="N",
        help=f"with --seeds: {what} up to N seeds at once, in threads sharing the devices "
        "(one seed's host work overlaps another's computing; the figures are those of the "
        "seeds in turn; default 1: in turn)",
    )


def _device_line(command: str, config: str, folder, run_config) -> None:
    if not parallel.writes_files():
        return
    devices = parallel.batch_mesh(run_config.devices).devices
    processes = f" in {jax.process_count()} processes" if jax.process_count() > 1 else ""
    print(
        f"advonline {command}: {config} on {devices.size} x {devices.flat[0].platform} "
        f"({devices.flat[0].device_kind}){processes}; run folder {folder}",
        file=sys.stderr,
    )


def run_train(args: argparse.Namespace) -> int:
    """``advonline train CONFIG --out DIR``: train with a progress bar; metrics and checkpoints
    in DIR. With several processes (``--processes`` or the environment) every process runs
    this, and process 0 alone prints the bar and writes DIR."""
    tables = configs.read_toml(args.config)
    parallel.start_processes(args.coordinator, args.processes, args.process_id)  # before JAX runs
    run_config = _run_config(args, tables)
    check_processes(run_config)
    if args.seeds is None and args.concurrent != 1:
        raise UsageError("--concurrent trains several seeds at once: name them with --seeds")
    if args.seeds is not None:
        return _train_seeds(args, run_config, Path(args.out))
    if parallel.writes_files():
        check_folder(args.out, args.resume)
        check_resumable(args.out, run_config)  # before the banner and the progress bar
    largest, available = preflight.check(run_config.training_needs())
    if args.check:
        return _checked(args.config, args.out, largest, available)
    with contextlib.ExitStack() as writing:
        if parallel.writes_files():  # a second writer is refused before anything is printed
            writing.enter_context(folders.FolderLock(args.out))
        if not args.quiet:
            _device_line("train", args.config, args.out, run_config)
        bar, report = _progress(run_config.total_steps, args.quiet or not parallel.writes_files())
        state = train(run_config, args.out, resume=args.resume, report=report)
        bar.close()
    if parallel.writes_files():
        print(f"trained {int(state.step)} steps; checkpoint and metrics.csv in {args.out}")
    return 0


def _checked(config: str, folder, largest: preflight.Need, available: float) -> int:
    """What ``--check`` prints: the config is valid, the folder usable, the memory enough."""
    print(
        f"{config}: valid; run folder {folder} usable; largest array {largest.what}, "
        f"{largest.bytes / 1e6:.3g} MB ({available / 1e9:.3g} GB free); nothing written"
    )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """``advonline export --checkpoint DIR --out POLICY.json``: the policy file, measured."""
    check_target(args.out)
    run = pipeline.open_run(args.checkpoint)
    algorithm = "learned-deterministic" if args.read_out else "learned"
    budget = None if args.no_measure else evaluation.Budget()
    say = functools.partial(print, file=sys.stderr)
    path, measured = pipeline.export_run(
        run, args.out, algorithm, budget, table=args.table, say=say
    )
    figure = "" if measured is None else f"; measured CR {format_ratio(measured.competitive_ratio)}"
    written = json.loads(Path(path).read_text())  # its format, as the problem wrote it
    form = str(written.get("format"))
    form += f" version {written['version']}" if "version" in written else ""
    print(f"wrote {path} ({algorithm}, {form}, {run.steps} training steps{figure})")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    """``advonline plot RUN_DIR... --out DIR``: every figure, PNG and PDF."""
    say = functools.partial(print, file=sys.stderr)
    written = pipeline.plot_runs(args.runs, args.out, say=say)
    print("\n".join(str(path) for path in written if path.suffix == ".png"))
    print(f"({len(written)} files: each figure as PNG and PDF in {args.out})")
    return 0


def run_archive(args: argparse.Namespace) -> int:
    """``advonline archive RUN_DIR``: the archive's instances, hardest against the delivered
    network first (advonline/archive_view.py)."""
    if args.top < 0:
        raise UsageError(f"--top must be >= 0, got {args.top}")
    if args.traces is not None and check_path(args.traces, "--traces").exists():
        raise UsageError(f"--traces {args.traces} already exists; name a new folder")
    run = pipeline.open_run(args.run_dir)
    if run.config.training_loop != "oracle":
        raise UsageError(
            f"{args.run_dir} was trained with game.loop = "
            f"{run.config.training_loop!r}; only the oracle loop keeps an archive"
        )
    game = run.game
    if args.traces is not None and not game.has_traces:
        raise UsageError(
            f"--traces: an archive of {run.problem.name} holds token sequences; use --json"
        )
    rows = archive_view.archive_rows(game, run.state)
    if args.traces is not None:
        written = archive_view.write_traces(game, run.state, args.traces)
        print(f"wrote {len(written)} traces to {args.traces}", file=sys.stderr)
    epochs = int(run.state.epoch)
    if args.json:
        print(json.dumps({"run": str(Path(args.run_dir)), "epochs": epochs, "instances": rows}))
        return 0
    shown = rows if args.top == 0 else rows[: args.top]
    title = game.setting_title(run.setting.describe())
    print(
        f"archive of {Path(args.run_dir)}: {len(rows)} instances after {epochs} epochs "
        f"({title}); ratios {run.problem.ratio_name}, exact"
    )
    header = ("slot", "epoch", "found by", "weight", "OPT", "vs current", "vs delivered")
    print("  ".join(f"{name:>12}" for name in (*header, *game.archive_columns)))
    for row in shown:
        cells = (
            row["slot"],
            row["found_at_epoch"],
            row["found_by"],
            f"{row['mixture_weight']:.3f}",
            f"{row['optimum']:.4g}",
            format_ratio(row["ratio_current"]),
            format_ratio(row["ratio_delivered"]),
            *game.archive_cells(row),
        )
        print("  ".join(f"{cell!s:>12}" for cell in cells))
    if len(shown) < len(rows):
        print(f"({len(rows) - len(shown)} more; --top 0 shows all)")
    return 0


def run_main_job(args: argparse.Namespace) -> int:
    """``advonline run CONFIG``: train, measure beside the baselines, export, plot, summarise;
    with ``--seeds``, each seed in turn into its own folder, then a summary over them."""
    run_config = _run_config(args)
    budget = _budget(args)
    problem = run_config.problem
    baselines = _baseline_names(args.algorithm or list(problem.baselines), problem)
    if args.resume and not args.out:
        raise UsageError("--resume continues the run in --out: name its folder")
    folder = args.out or pipeline.default_run_folder(args.config)
    if args.seeds is None and args.concurrent != 1:
        raise UsageError("--concurrent trains several seeds at once: name them with --seeds")
    if args.seeds is not None:
        return _several_seeds(args, run_config, budget, baselines, Path(folder))
    check_folder(folder, resume=args.resume)
    check_resumable(folder, run_config)  # before the banner and the progress bar
    if args.resume:
        pipeline.check_kept_files(folder, problem)
    largest, available = _preflight(run_config, budget)
    if args.check:
        return _checked(args.config, folder, largest, available)
    result = _one_run(args, run_config, budget, baselines, folder, args.resume)
    print(evaluation.table(result.report))
    print(
        f"trained {result.run.steps} steps in {result.run.wall_seconds:.0f} s; run folder {folder}"
    )
    _print_phases(result.report)
    if (measured := evaluation.time_line(result.report)) is not None:
        print(measured)
    print(f"measured ratios: {folder}/{pipeline.EVALUATION_NAME}")
    print("exported policies: " + (", ".join(str(path) for path in result.policies) or "none"))
    print(f"figures: {folder}/figures/ ({len(result.figures)} files, PNG and PDF)")
    return 0


def _preflight(run_config, budget) -> tuple[preflight.Need, float]:
    """The memory pre-flight of training and measuring (PreflightError: not enough)."""
    setting, members = run_config.setting, run_config.mixture_members()
    measuring = preflight.evaluation_needs(run_config.problem, setting, budget, members)
    return preflight.check([*run_config.training_needs(), *measuring])


def _one_run(args, run_config, budget, baselines, folder, resume: bool) -> pipeline.FinishedRun:
    """Train ``run_config`` into ``folder`` (continuing it with ``resume``), then measure,
    export and plot, holding the folder throughout."""
    with folders.FolderLock(folder):  # one writer from training to the last figure
        if not args.quiet:
            _device_line("run", args.config, folder, run_config)
        bar, report = _progress(run_config.total_steps, args.quiet)
        train(run_config, folder, resume=resume, report=report)
        bar.close()
        return _finish(args, run_config, budget, baselines, folder, resume)


def _finish(
    args, run_config, budget, baselines, folder, resume: bool, measured=None
) -> pipeline.FinishedRun:
    """Measure, export and plot the trained run in ``folder`` (held by the caller;
    ``measured``: baselines measured already on this setting and budget, reused)."""
    say = (lambda line: None) if args.quiet else functools.partial(print, file=sys.stderr)
    mesh = parallel.batch_mesh(run_config.devices)
    measuring = MeasuringBar(args.quiet)
    result = pipeline.finish_run(folder, budget, say, baselines, mesh, resume, measuring, measured)
    measuring.close()
    return result


def _seed_plan(args, run_config, parent: Path) -> list[tuple]:
    """``(seed, folder, config, resume)`` of every seed of ``--seeds``, each folder checked
    before any work: with ``--resume`` a seed whose folder exists continues, the others start
    (UsageError or TrainError: one line)."""
    if jax.process_count() > 1:
        raise UsageError("--seeds trains in one process; several processes train one seed")
    if args.concurrent < 1:
        raise UsageError(f"--concurrent takes a whole number >= 1, got {args.concurrent}")
    try:
        chosen = seeds.parse_seeds(args.seeds)
    except ValueError as error:
        raise UsageError(str(error)) from None
    folders.check_own(parent, ("seeds",), legacy=(seeds.SUMMARY_NAME,))
    if not args.resume and (parent / seeds.SUMMARY_NAME).exists():
        raise UsageError(f"{parent} already holds a several-seed run; pass --resume or a new --out")
    plan = []
    for seed in chosen:
        folder = seeds.seed_folder(parent, seed)
        config = run_config.with_seed(seed)
        resume = args.resume and folder.exists()
        check_folder(folder, resume=resume)
        check_resumable(folder, config)
        plan.append((seed, folder, config, resume))
    return plan


def _claim_seeds(parent: Path, plan: list[tuple], command: str) -> None:
    """Make ``parent`` (if new) and mark it as the tool's folder of several seeds' runs."""
    seeds_run = [seed for seed, *_ in plan]
    folders.claim(parent, "seeds", {"made_by": f"advonline {command} --seeds", "seeds": seeds_run})


def _train_seeds(args, run_config, parent: Path) -> int:
    """``train --seeds``: every seed trained into its own folder (:func:`_train_plan`), then
    ``summary.json`` in ``parent``: every figure of the seeds' last metrics rows over the
    seeds. ``run --seeds --resume`` on the same folder measures them afterwards."""
    plan = _seed_plan(args, run_config, parent)
    largest, available = preflight.check(run_config.training_needs())
    if args.check:
        return _checked(args.config, parent, largest, available)
    _claim_seeds(parent, plan, "train")
    with contextlib.ExitStack() as held:
        for _, folder, _, _ in plan:
            held.enter_context(folders.FolderLock(folder))
        states = _train_plan(args, plan, "train")
    last_rows = {}
    for (seed, folder, _, _), state in zip(plan, states, strict=True):
        last_rows[seed] = plots.read_metrics(Path(folder) / METRICS_NAME)[-1]
        print(f"seed {seed}: trained {int(state.step)} steps; run folder {folder}")
    summary = seeds.summarise_training(args.config, run_config.setting.describe(), last_rows)
    return _summarised(parent, summary, seeds.training_table(summary), plan)


def _train_plan(args, plan: list[tuple], command: str) -> list:
    """Train every seed of ``plan`` (their folders held), up to ``--concurrent`` at once,
    under one progress bar over all their steps; the seeds' final states, in order. The later
    seeds reuse the programmes the first compiled."""
    if not args.quiet:
        for _, folder, config, _ in plan:
            _device_line(command, args.config, folder, config)
    total = sum(config.total_steps for _, _, config, _ in plan)
    bar = tqdm(total=total, disable=args.quiet, unit="step", file=sys.stderr)
    updating, stopping = threading.Lock(), threading.Event()

    def one(entry):
        seed, folder, config, resume = entry
        done, shown = [0], {}

        def report(row: dict) -> None:  # after each checkpoint
            with updating:
                bar.update(row["step"] - done[0])
                done[0] = row["step"]
                bar.set_postfix({"seed": seed, **_shown(row, shown)})
            if stopping.is_set():  # another seed failed, or the user interrupted
                raise seeds.Stopped(f"seed {seed} stopped at step {row['step']}")

        return train(config, folder, resume=resume, report=report)

    states = seeds.concurrently(one, plan, args.concurrent, stopping)
    bar.close()
    return states


def _several_seeds(args, run_config, budget, baselines, parent: Path) -> int:
    """``run --seeds``: every seed's folder is checked before any work (:func:`_seed_plan`)
    and held throughout; the seeds train (:func:`_train_plan`), then each is measured,
    exported and plotted in turn; ``summary.json`` in ``parent`` holds every figure over the
    seeds. The baselines are measured once, in the first seed's run, and the later reports
    take those measurements (they depend on the setting and the budget alone)."""
    plan = _seed_plan(args, run_config, parent)
    for _, folder, _, resume in plan:
        if resume:
            pipeline.check_kept_files(folder, run_config.problem)
    largest, available = _preflight(run_config, budget)
    if args.check:
        return _checked(args.config, parent, largest, available)
    _claim_seeds(parent, plan, "run")
    reports, measured = {}, None
    with contextlib.ExitStack() as held:
        for _, folder, _, _ in plan:
            held.enter_context(folders.FolderLock(folder))
        _train_plan(args, plan, "run")
        for seed, folder, config, resume in plan:
            result = _finish(args, config, budget, baselines, folder, resume, measured)
            reports[seed] = result.report
            measured = measured or result.baseline_measurements  # measured once
            print(f"seed {seed}: {result.report.get('verdict')}; run folder {folder}")
    summary = seeds.summarise(args.config, reports)
    return _summarised(parent, summary, seeds.summary_table(summary), plan)


def _summarised(parent: Path, summary: dict, table: str, plan: list[tuple]) -> int:
    """Write a several-seed run's ``summary``, print its ``table`` and where everything is."""
    path = seeds.write_summary(parent, summary)
    print(table)
    print(f"summary: {path}; runs: {', '.join(str(folder) for _, folder, _, _ in plan)}")
    return 0


def _print_phases(report: dict) -> None:
    """Where a run's training time went, from its report (nothing where it does not say)."""
    if (phases := report.get("phase_seconds")) is not None:
        spent = ", ".join(f"{k.removeprefix('seconds_')} {v:.0f} s" for k, v in phases.items())
        print(f"where the time went: {spent} (compiling happens inside the phases)")


if __name__ == "__main__":
    sys.exit(main())
