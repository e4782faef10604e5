"""Claim: the oracle loop learns from scratch, on every seed, a pricing policy whose measured
guarantee beats the classic baselines, with the game converged (small exploitability) and a
best-so-far guarantee that never rises.

Each config in ``experiments/configs/`` listed in :data:`TARGETS` is trained with game seeds
0 .. N-1 (no known hard family: the archive is filled by the loop's own searches). Every
delivered policy, and the baselines once per config, is measured by the evaluator with its
default budget (the same for every algorithm and run; its seed is the budget's, not the
game's). From each run's ``metrics.csv`` come the exploitability of the last epoch and whether
the guarantee ever rose. Per config the table gives median [min, max] over seeds, and marks
each target met or not:

- ``bound``: (one resource, the round seen) the DP upper bound on the learned policy's CR is
  below ``threshold``'s exact CR on every seed, and its median is at most ``factor`` times it.
- ``ratio``: the learned policy's measured CR is at most ``factor`` times the best
  baseline's measured CR on every seed (several resources, and large indivisible demands,
  where ``threshold`` is no longer the reference).
- ``classic``: (the round hidden from the network, the classic model) the learned policy's
  measured CR and its median read-out's exact CR are both at most ``factor`` times
  ``threshold``'s exact CR on every seed: phi recovered from scratch.
- The learned policy's measured CR (``ratio`` and ``classic``) is the worst ratio a real
  instance is known to attain against what the run delivers: the evaluator's, or the exact
  ratio of any instance in the run's archive (its own searches' finds, re-scored against the
  delivered policy), or, where the delivered policy has no certificate (a mixture of more
  networks than the product-grid certificate's work limit allows), the worst ratio the run
  measured when it kept that policy. The baselines get the evaluator's. (An archived instance the
  evaluator's fresh search did not match still counts: a worst case is a claim about every
  input.)
- every run: exploitability at the end at most 0.05; the guarantee never rises; training
  within the time limit on this machine. The exploitability is that of the restricted game's
  equilibrium mixture of snapshots where the run measures it (K >= 2: the worst ratio a probe
  of the mixture found over the restricted game's CR, minus 1; the double-oracle gap), else
  the current network's; the table shows both.

For every one-resource config, and each config of several resources that
:data:`BRACKET_TARGETS` names, a second table brackets the best possible CR of its setting:
the certified lower bound for every online algorithm (the family ``lower_bounds.py`` stored in
``OUT/lower_bounds.json`` for that setting, certified again; searched with its defaults when
none is stored) against the learned DP bounds, with their ratio per seed, and the bracket
targets of :data:`BRACKET_TARGETS` marked.

After them comes certificate descent's table (``certificate_descent.py``): for the same
one-resource settings and the classic model's, a randomised table's certificate and bracket,
and a deterministic price curve's exact CR beside ``threshold``'s. ``--only k1-u10`` (a
setting's name there) runs just that.

Problems on the interface alone (one-way trading, AdWords, ski rental) have their own
tables, from ``experiments/one_way_trading.py``, ``experiments/adwords.py`` and
``experiments/ski_rental.py``; ``--only`` takes their configs
too, and the full sweep prints them after the posted-pricing table.

Run: python experiments/from_scratch.py [--out results] [--seeds 3] [--only k1-u10-oracle]
Writes OUT/from_scratch.{md,csv} and the run folders OUT/from_scratch/<config>-seed<n>/. A run
whose folder already holds its result (``result.json``) is not trained again unless
``--fresh`` is given, so an interrupted sweep continues where it stopped; one measured with
another budget than the evaluator's current default is measured again from its checkpoint
(the budget is stored with the result). On 2 CPU cores,
with 3 seeds: about 25 min per K = 1 config (3-8 min of training and 1.5-3 min of measuring
a run); k2-u10-oracle about 5 min of training per run (plus 2-5 min of measuring);
k2-u10-oracle-probed and k3-u10-oracle, which also probe their equilibrium mixture every
epoch, 13-20 min of training per run, about an hour per config; about 6 hours in all, then
about 4 hours for the AdWords table (75 min of it n = 50) and 5 min for one-way trading.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import adwords
import certificate_descent
import lower_bounds
import one_way_trading
import ski_rental
from common import (
    concurrent_flag,
    fmt,
    load_config,
    measure_trained,
    measurement_columns,
    run_seeds,
    spread,
    train_afresh,
    write_csv,
)

from advonline import plots
from advonline.archive_view import hardest_delivered
from advonline.evaluation import Budget
from advonline.huge_pages import relaunch_with_huge_pages
from advonline.pipeline import open_run
from advonline.problems.posted_price import figures
from advonline.problems.posted_price.grid_certify import certify_policy

#: config -> (target kind, factor, training time limit in seconds on 2 CPU cores)
TARGETS = {
    "k1-u5-oracle": ("bound", 0.75, 600),
    "k1-u10-oracle": ("bound", 0.75, 600),
    "k1-u100-oracle": ("bound", 0.75, 600),
    "k1-u5-classic": ("classic", 1.02, 600),
    "k1-u10-classic": ("classic", 1.02, 600),
    "k1-u100-classic": ("classic", 1.02, 600),
    "k1-u10-d025-oracle": ("ratio", 0.45, 600),
    "k2-u10-oracle": ("ratio", 0.70, 300),
    "k2-u10-certified": ("ratio", 0.70, 1500),
    "k2-u10-oracle-probed": ("ratio", 0.85, 1200),
    "k3-u10-oracle": ("ratio", 0.85, 1200),
}
#: config -> the experiment whose table it belongs to (problems on the interface alone)
OTHER_PROBLEMS = (
    {name: adwords for name in adwords.CONFIGS}
    | {name: one_way_trading for name in one_way_trading.CONFIGS}
    | {name: ski_rental for name in ski_rental.CONFIGS}
)
#: config -> (median, every seed) limits on its bracket: the learned certificate over the
#: certified lower bound for every algorithm in its setting (None: none set). Every
#: one-resource config gets a bracket row; a config of several resources only if named here.
BRACKET_TARGETS = {
    "k1-u5-oracle": (1.05, 1.08),
    "k1-u10-oracle": (1.05, 1.08),
    "k1-u100-oracle": (1.05, 1.08),
    "k1-u10-d025-oracle": (1.25, None),
    "k2-u10-oracle": (1.25, None),
    "k2-u10-certified": (1.25, None),
}
#: certificate descent's settings (its own table: every policy class, every figure a
#: certificate; the deterministic rows are exact CRs)
DESCENT = tuple(certificate_descent.SETTINGS.values())
EXPLOITABILITY_TARGET = 0.05
BASELINES = ("threshold", "exponential")
RESULT_NAME = "result.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for tables and runs")
    parser.add_argument("--seeds", type=int, default=3, help="game seeds 0 .. N-1 (default 3)")
    concurrent_flag(parser)
    parser.add_argument(
        "--only",
        action="append",
        choices=[*TARGETS, *OTHER_PROBLEMS, *DESCENT],
        help="these configs (or certificate descent's settings)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="retrain posted pricing's runs that have a result (other problems' kept runs are "
        "reused; remove their folders to retrain them)",
    )
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    out = Path(args.out)
    names = args.only or [*TARGETS, *DESCENT, *OTHER_PROBLEMS]
    priced = [name for name in names if name in TARGETS]
    if priced:
        budget = Budget()
        rows = sweep(priced, args.seeds, out, budget, args.fresh)
        write_csv(rows, out / "from_scratch.csv")
        markdown = table(rows, budget) + bracket_table(rows, out)
        (out / "from_scratch.md").write_text(markdown)
        print(markdown)
    if descended := [name for name in names if name in DESCENT]:
        rows = certificate_descent.sweep(descended, args.seeds, out, False, args.fresh)
        markdown = certificate_descent.report(rows)
        (out / "certificate_descent.md").write_text(markdown)
        print(markdown)
    others = (OTHER_PROBLEMS[name] for name in names if name in OTHER_PROBLEMS)
    for experiment in dict.fromkeys(others):
        print(f"\n{experiment.__doc__.splitlines()[0]}\n\n{experiment.HEADER}")
        for name in (name for name in names if OTHER_PROBLEMS.get(name) is experiment):
            reports = run_seeds(name, args.seeds, out / "from_scratch", at_once=args.concurrent)
            print(experiment.block(name, reports), flush=True)


def sweep(names: list[str], seeds: int, out: Path, budget: Budget, fresh: bool = False) -> list:
    """One result row per config in ``names`` and game seed 0 .. ``seeds`` - 1, each trained
    into ``out/from_scratch/<config>-seed<n>`` unless that folder already holds its result
    (``fresh`` retrains); a result measured with another budget is measured again."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        for seed in range(seeds):
            folder = out / "from_scratch" / f"{name}-seed{seed}"
            baselines = BASELINES if seed == 0 else ()
            row = None if fresh else _stored(folder)
            if row is None:
                row = _train(name, seed, folder, budget, baselines)
            elif row.get("budget") != budget.describe():  # measured by an older evaluator
                print(f"measuring {folder} again with the current budget", flush=True)
                row = {**_training_columns(row), **_measure(name, seed, folder, budget, baselines)}
                (folder / RESULT_NAME).write_text(json.dumps(row, indent=1))
            rows.append(row)
            print(row, flush=True)
    return rows


def _stored(folder: Path) -> dict | None:
    try:
        return json.loads((folder / RESULT_NAME).read_text())
    except (OSError, ValueError):
        return None


#: A result's columns that come from training (the rest are measurements).
TRAINING_COLUMNS = (
    "config",
    "seed",
    "setting",
    "train_seconds",
    "epochs",
    "final_exploitability",
    "final_mixture_exploitability",
    "guarantee_never_rose",
    "final_guarantee",
)


def _training_columns(row: dict) -> dict:
    return {column: row.get(column) for column in TRAINING_COLUMNS}  # None: not recorded then


def _train(name: str, seed: int, folder: Path, budget: Budget, baselines) -> dict:
    config = load_config(name, seed)
    wall = train_afresh(config, folder)
    rows = plots.read_metrics(folder / "metrics.csv", ("mixture_exploitability",))
    guarantee = [r["guarantee"] for r in rows]
    row = {
        "config": name,
        "seed": seed,
        "setting": figures.setting_title(config.setting.describe()),
        "train_seconds": round(wall, 1),
        "epochs": len(rows),
        "final_exploitability": rows[-1]["exploitability"],
        "final_mixture_exploitability": rows[-1]["mixture_exploitability"],
        "guarantee_never_rose": all(b <= a for a, b in zip(guarantee, guarantee[1:], strict=False)),
        "final_guarantee": guarantee[-1],
        **_measure(name, seed, folder, budget, baselines),
    }
    (folder / RESULT_NAME).write_text(json.dumps(row, indent=1))
    return row


def _measure(name: str, seed: int, folder: Path, budget: Budget, baselines) -> dict:
    """The measurement columns of a trained run: the evaluator's (with ``budget``, which is
    stored beside them), and the worst ratio of its archive against what it delivers."""
    _, measured = measure_trained(load_config(name, seed), folder, budget, baselines)
    run = open_run(folder)
    return {
        "archive_worst": hardest_delivered(run.game, run.state)[1],
        **measurement_columns(measured),
        "budget": budget.describe(),
    }


def learned_figure(row: dict) -> float:
    """The learned policy's measured CR: the worst ratio a real instance is known to attain
    against it (module docstring)."""
    attained = [row["learned_ratio"], row.get("archive_worst") or 0.0]
    if row["learned_upper_bound"] is None:  # no certificate: the guarantee is a find
        attained.append(row["final_guarantee"])
    return max(attained)


def by_config(rows: list[dict]) -> dict[str, list[dict]]:
    """The result rows of each config, in the order the configs first appear."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["config"], []).append(row)
    return grouped


def certificates(mine: list[dict]) -> list[float]:
    """Each run's DP bound on the learned policy's CR (a run without one counts as unbounded)."""
    bounds = (r["learned_upper_bound"] for r in mine)
    return [math.inf if bound is None else bound for bound in bounds]


def network_certificate(row: dict, out: Path) -> float:
    """The certificate of the one network a run trained with the best guarantee, where the
    run delivers a mixture of snapshots (K >= 2) whose own certificate needs every member's
    and is over the work limit: a policy the run made, certified over the product grid.
    Stored in the run folder (``network_certificate.json``) and read from there again."""
    folder = out / "from_scratch" / f"{row['config']}-seed{row['seed']}"
    stored = folder / "network_certificate.json"
    try:
        return json.loads(stored.read_text())["ratio"]
    except (OSError, ValueError, KeyError):
        pass
    run = open_run(folder)
    game = run.config.build_game()
    network = game.learned(game.delivered_params(run.state))["learned"]
    start = time.perf_counter()
    found = certify_policy(run.config.setting, network)
    seconds = round(time.perf_counter() - start, 1)
    ratio = math.inf if found.ratio is None else found.ratio
    print(f"{folder.name}: network certified {ratio:.4f} in {seconds} s ({found.note})")
    document = {"ratio": ratio, "note": found.note, "seconds": seconds}
    stored.write_text(json.dumps(document, indent=1))
    return ratio


def lowest_certificates(mine: list[dict], out: Path) -> list[float]:
    """Each run's lowest certificate of a learned policy: the delivered policy's, or for
    several resources its best network's (:func:`network_certificate`) where that is lower."""
    delivered = certificates(mine)
    if load_config(mine[0]["config"]).setting.resources == 1:
        return delivered
    return [min(c, network_certificate(r, out)) for c, r in zip(delivered, mine, strict=True)]


def _figures(kind: str, factor: float, mine: list[dict]) -> tuple[list, float, str, str]:
    """Per config: the figure of every seed, the reference it is compared with, their labels,
    and the target marked met or not."""
    if kind == "bound":
        reference = next(r["threshold_ratio"] for r in mine if "threshold_ratio" in r)
        figures = certificates(mine)
        met = max(figures) < reference and statistics.median(figures) <= factor * reference
        target = f"every seed below threshold (exact {fmt(reference)}), median <= {factor} x it"
        return figures, reference, "learned DP bound", f"{target}: {_mark(met)}"
    if kind == "classic":
        reference = next(r["threshold_ratio"] for r in mine if "threshold_ratio" in r)
        figures = [learned_figure(r) for r in mine]
        read_outs = [r["learned-deterministic_ratio"] for r in mine]
        met = max(figures + read_outs) <= factor * reference
        target = (
            f"every seed's learned CR and read-out CR <= {factor} x threshold "
            f"(exact {fmt(reference)}; read-outs {spread(read_outs)})"
        )
        return figures, reference, "learned measured CR", f"{target}: {_mark(met)}"
    first = next(r for r in mine if "threshold_ratio" in r)
    reference = min(first[f"{name}_ratio"] for name in BASELINES)
    figures = [learned_figure(r) for r in mine]
    met = max(figures) <= factor * reference
    target = f"every seed <= {factor} x best baseline (measured {fmt(reference)})"
    return figures, reference, "learned measured CR", f"{target}: {_mark(met)}"


def final_exploitability(row: dict) -> float | None:
    """The exploitability the target is judged on: the equilibrium mixture's where the run
    measured it in its last epoch, else the current network's."""
    mixture = row.get("final_mixture_exploitability")
    return row["final_exploitability"] if mixture is None else mixture


def _mark(met: bool) -> str:
    return "met" if met else "**not met**"


def table(rows: list[dict], budget: Budget) -> str:
    """Per run, then per config the spread over seeds with each target marked."""
    lines = [
        f"Every figure measured by the evaluator, budget: {budget.describe()}.",
        "",
        "| config | seed | learned CR (evaluator's worst source) | worst archived | "
        "learned DP bound | "
        "run's guarantee (K = 1: DP bound; K >= 2: worst ratio its search found) | "
        "read-out CR | exploitability at end: network | mixture | guarantee never rose | "
        "train s |",
        "|---" * 11 + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['seed']} | {fmt(r['learned_ratio'])} "
            f"({r['learned_worst_source']}) | {fmt(r.get('archive_worst'))} | "
            f"{fmt(r['learned_upper_bound'])} | {fmt(r['final_guarantee'])} | "
            f"{fmt(r['learned-deterministic_ratio'])} | {fmt(r['final_exploitability'])} | "
            f"{fmt(r.get('final_mixture_exploitability'))} | "
            f"{'yes' if r['guarantee_never_rose'] else 'no'} | {r['train_seconds']:.0f} |"
        )
    lines += [
        "",
        "| config | setting | seeds | figure: median [min, max] | reference | "
        "figure / reference (median) | target | exploitability <= 0.05 | time |",
        "|---" * 9 + "|",
    ]
    for name, mine in by_config(rows).items():
        kind, factor, seconds = TARGETS[name]
        figures, reference, label, target = _figures(kind, factor, mine)
        calm = all(
            (gap := final_exploitability(r)) is not None
            and gap <= EXPLOITABILITY_TARGET
            and r["guarantee_never_rose"]
            for r in mine
        )
        fast = max(r["train_seconds"] for r in mine) <= seconds
        lines.append(
            f"| {name} | {mine[0]['setting']} | {len(mine)} | {label} {spread(figures)} | "
            f"{fmt(reference)} | {fmt(statistics.median(figures) / reference)} | {target} | "
            f"{_mark(calm)} | {_mark(fast)} (max {max(r['train_seconds'] for r in mine):.0f} s, "
            f"limit {seconds} s) |"
        )
    return "\n".join(lines) + "\n"


def bracket_table(rows: list[dict], out: Path) -> str:
    """Per config (one resource, or named in :data:`BRACKET_TARGETS`): the best possible CR
    of its setting bracketed between the certified lower bound for every online algorithm
    (``lower_bounds.py``'s family for the setting, certified again; searched now if none is
    stored) and the learned policies' DP bounds, with their ratio (the bracket) over seeds,
    and the classic policies' exact CRs beside them."""
    lines = [
        "",
        "Best possible CR, bracketed: certified lower bound for every online algorithm "
        "(`python experiments/lower_bounds.py`) and the learned certificate (DP bound; for "
        "two resources over the product grid, the lower of the delivered policy's and its "
        "best network's).",
        "",
        "| config | setting | lower bound | learned certificate | bracket: certificate / bound "
        "| threshold (exact) | exponential (exact) | target |",
        "|---" * 8 + "|",
    ]
    for name, mine in by_config(rows).items():
        setting = load_config(name).setting
        if setting.resources != 1 and name not in BRACKET_TARGETS:
            continue
        bound = lower_bounds.setting_bound(name, setting, out)
        learned = lowest_certificates(mine, out)
        brackets = [c / bound for c in learned]
        limits = BRACKET_TARGETS.get(name)
        if limits is None:
            target = "none set"
        else:
            median, every = limits
            met = statistics.median(brackets) <= median and (
                every is None or max(brackets) <= every
            )
            every_text = "" if every is None else f", every seed <= {every}"
            target = f"median <= {median}{every_text}: {_mark(met)}"
        first = next(r for r in mine if "threshold_ratio" in r)
        lines.append(
            f"| {name} | {mine[0]['setting']} | {fmt(bound)} | {spread(learned)} | "
            f"{spread(brackets)} | {fmt(first['threshold_ratio'])} | "
            f"{fmt(first.get('exponential_ratio'))} | {target} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
