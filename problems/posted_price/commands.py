"""Posted pricing's part of the command line (``advonline evaluate`` and ``advonline run``;
the core's :mod:`advonline.cli` defines every other flag): the setting flags, the evaluator's
budget, a buyer trace, a policy file, and the tables it prints.

Each function reports bad input as :class:`~advonline.errors.InputError` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import math

from advonline.baselines.posted_price import BASELINES
from advonline.errors import InputError
from advonline.evaluation import ARCHIVE_SOURCE
from advonline.problems.posted_price import evaluate, policy_file
from advonline.problems.posted_price.model import Instance, Setting, SettingError
from advonline.problems.posted_price.tabulated import from_file
from advonline.problems.posted_price.traces import check_buyers, load_trace
from advonline.ratio import format_ratio

SETTING_FLAGS = ("resources", "low", "high", "rounds", "max_demand", "demand_levels")

# a trace sets its own rounds and demands (--low, --high, --resources, --capacity and
# --indivisible apply to it)
NOT_FOR_TRACES = ("checkpoint", "policy", "rounds", "max_demand", "demand_levels")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """``evaluate``'s flags that describe a setting, or a buyer trace to measure on."""
    default = Setting()
    parser.add_argument("--resources", type=int, default=None, help="K resource types (default 1)")
    parser.add_argument("--low", type=float, help=f"L, lowest value density ({default.low:g})")
    parser.add_argument("--high", type=float, help=f"U, highest value density ({default.high:g})")
    parser.add_argument("--rounds", type=int, help=f"T buyers per instance ({default.rounds})")
    parser.add_argument(
        "--max-demand",
        type=float,
        help=f"largest demand, fraction of capacity ({default.max_demand:g})",
    )
    parser.add_argument(
        "--demand-levels",
        type=int,
        help=f"demands j*max_demand/levels, j=1..levels ({default.demand_levels})",
    )
    parser.add_argument("--indivisible", action="store_true", help="buyers take all or nothing")
    parser.add_argument("--instances", metavar="FILE.csv", help="evaluate on your own buyer trace")
    parser.add_argument(
        "--capacity",
        type=float,
        action="append",
        default=None,
        help="capacity per resource for --instances (repeat per resource; default 1)",
    )


def add_budget_flags(parser: argparse.ArgumentParser) -> None:
    """The evaluator's budget flags of posted pricing beside the core's."""
    default = evaluate.Budget()
    parser.add_argument("--stopping-densities", type=int, default=default.stopping_densities)


def budget(args: argparse.Namespace) -> evaluate.Budget:
    """The budget the flags ask for (each count >= 1)."""
    if min(args.stopping_densities, args.random_instances, args.adversary_steps) < 1:
        raise InputError(
            "--stopping-densities, --random-instances and --adversary-steps must be >= 1"
        )
    return evaluate.Budget(
        stopping_densities=args.stopping_densities,
        random_instances=args.random_instances,
        seed=args.seed,
        adversary_steps=args.adversary_steps,
        search_steps=args.search_steps,
    )


def given_setting_flag(args: argparse.Namespace) -> str | None:
    """The first setting flag given on the command line, if any (``--checkpoint`` and
    ``--policy`` measure on their own setting)."""
    given = [f"--{f.replace('_', '-')}" for f in SETTING_FLAGS if getattr(args, f) is not None]
    given += ["--indivisible"] if args.indivisible else []
    return given[0] if given else None


def check_finite(args: argparse.Namespace) -> None:
    """Refuse an infinite or NaN number given to a setting flag, naming the flag."""
    for flag in ("low", "high", "max_demand", "capacity"):
        given = getattr(args, flag)
        for value in given if isinstance(given, list) else [given]:
            if value is not None and not math.isfinite(value):
                name = flag.replace("_", "-")
                raise InputError(f"--{name} must be a finite number, got {value}")


#: The setting's fields as the flags name them.
FLAG_NAMES = {
    "resources": "--resources",
    "low": "--low",
    "high": "--high",
    "rounds": "--rounds",
    "max_demand": "--max-demand",
    "demand_levels": "--demand-levels",
    "capacities": "--capacity",
}


def _setting_of_flags(**fields) -> Setting:
    """The setting of ``fields`` taken from flags: a problem with it names the flags."""
    try:
        return Setting(**fields)
    except SettingError as error:
        raise InputError(error.naming(FLAG_NAMES)) from None


def setting(args: argparse.Namespace) -> Setting:
    """The setting the flags describe (defaults where not given)."""
    check_finite(args)
    if args.capacity:
        raise InputError("--capacity applies to --instances traces; settings use capacity 1")
    default = Setting()
    resources = _given(args.resources, 1)
    if resources < 1:
        raise InputError(f"--resources must be >= 1, got {resources}")
    return _setting_of_flags(
        resources=resources,
        low=_given(args.low, default.low),
        high=_given(args.high, default.high),
        rounds=_given(args.rounds, default.rounds),
        max_demand=_given(args.max_demand, default.max_demand),
        demand_levels=_given(args.demand_levels, default.demand_levels),
        divisible=not args.indivisible,
        capacities=(1.0,) * resources,
    )


def load_policy(path: str) -> tuple[Setting, object, str]:
    """A policy file's setting, its policy and the name it was exported under."""
    loaded = policy_file.load(path)
    setting_, policy = from_file(loaded)
    return setting_, policy, loaded.provenance.get("algorithm", "policy")


def evaluate_trace(args: argparse.Namespace, names: tuple[str, ...], budget_) -> str:
    """``evaluate --instances TRACE.csv``: every named baseline run on the buyer trace, as
    printed (one JSON object with ``--json``)."""
    check_finite(args)
    for flag in NOT_FOR_TRACES:
        if getattr(args, flag) is not None:
            raise InputError(
                f"--{flag.replace('_', '-')} does not apply to --instances (the trace sets "
                "rounds and demands; the baselines are measured on it)"
            )
    values, demands = load_trace(args.instances)
    resources = demands.shape[1]
    if args.resources is not None and args.resources != resources:
        raise InputError(
            f"--resources {args.resources} but the trace has {resources} demand columns"
        )
    capacities = tuple(args.capacity or [1.0])
    if len(capacities) == 1:
        capacities *= resources
    default = Setting()
    trace_setting = _setting_of_flags(
        resources=resources,
        low=_given(args.low, default.low),
        high=_given(args.high, default.high),
        rounds=len(values),
        max_demand=1.0,
        divisible=not args.indivisible,
        capacities=capacities,
    )
    check_buyers(values, demands, trace_setting.low, trace_setting.high, capacities, args.instances)
    instance = Instance(values=values, demands=demands)
    results = [
        evaluate.run_trace(trace_setting, name, BASELINES[name](trace_setting), instance, budget_)
        for name in names
    ]
    optimum = evaluate.trace_optimum(trace_setting, instance)
    if args.json:
        described = {**trace_setting.describe(), "trace": str(args.instances)}
        report = {
            "setting": described,
            "offline_optimum": optimum,
            "results": [r.to_json() for r in results],
        }
        return json.dumps(report)
    kind = "divisible" if trace_setting.divisible else "indivisible"
    lines = [
        f"trace {args.instances}: {len(values)} buyers, K={resources}, capacities "
        f"{list(capacities)}, {kind}, offline optimum {optimum:.6g}",
        f"{'algorithm':<12}{'welfare':>12}{'revenue':>12}{'OPT/ALG':>10}",
    ]
    for r in results:
        lines.append(
            f"{r.algorithm:<12}{r.welfare:>12.6g}{r.revenue:>12.6g}{format_ratio(r.ratio):>10}"
        )
    return "\n".join(lines)


def table(setting_: Setting, budget_, results) -> str:
    """The measured ratios as printed: the setting, the budget and the reference beside."""
    kind = "divisible" if setting_.divisible else "indivisible"
    levels = setting_.demand_levels
    lines = [
        f"setting: posted-price K={setting_.resources} L={setting_.low:g} U={setting_.high:g} "
        f"T={setting_.rounds} max demand {setting_.max_demand:g} "
        f"({levels} level{'s' * (levels > 1)}), {kind}",
        f"budget: {budget_.summary()}",
    ]
    if (reference := evaluate.reference_ratio(setting_)) is not None:
        lines.append(f"reference: 1 + ln(U/L) = {reference:.4f} (optimal CR, small-demand limit)")
    columns = evaluate.SOURCE_NAMES
    if any(ARCHIVE_SOURCE in r.sources for r in results):
        columns += (ARCHIVE_SOURCE,)
    width = max([12] + [len(r.algorithm) + 2 for r in results])
    lines.append(
        f"{'algorithm':<{width}}{'CR':>10}  {'worst':<10}"
        + "".join(f"{c:>10}" for c in columns)
        + f"{'bound':>10}"
    )
    for r in results:
        cells = "".join(
            f"{format_ratio(r.sources[c].ratio if c in r.sources else None):>10}" for c in columns
        )
        measured = f"{format_ratio(r.competitive_ratio):>10}  {r.worst_source:<10}"
        lines.append(
            f"{r.algorithm:<{width}}{measured}{cells}{format_ratio(r.upper_bound.ratio):>10}"
        )
    for r in results:
        for c in columns:
            if c in r.sources and r.sources[c].ratio is None:
                lines.append(f"note: {r.algorithm} {c}: {r.sources[c].note}")
        if r.upper_bound.ratio is not None:
            lines.append(f"note: {r.algorithm} bound: {r.upper_bound.note}")
    return "\n".join(lines)


def archive_title(setting_: Setting) -> str:
    """The setting as the archive's listing names it."""
    return (
        f"K = {setting_.resources}, densities [{setting_.low:g}, {setting_.high:g}], "
        f"T = {setting_.rounds}"
    )


#: The columns the archive's listing adds for each instance (from the game's summaries).
ARCHIVE_COLUMNS = ("buyers", "densities")


def archive_cells(row: dict) -> tuple:
    """An archived instance's own cells, from its summary."""
    if row["buyers"] == 0:
        return row["buyers"], "-"
    return row["buyers"], f"{row['lowest_density']:.3g}-{row['highest_density']:.3g}"


def _given(value, default):
    return default if value is None else value
