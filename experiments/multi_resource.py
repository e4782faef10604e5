"""Claim: where the classic algorithms' assumptions fail (several resources, large
demands), the learned policy is measured against them with the same evaluator and budget.

Trains with the simultaneous loop (the paper's method, which does not converge: docs/method.md)
experiments/configs/k2-u10-simultaneous.toml (K = 2), k3-u10-simultaneous.toml (K = 3) and
k1-u10-d025-simultaneous.toml (K = 1, demands up to a quarter of capacity, indivisible), each
from scratch. It measures
`learned` (the randomised policy), `learned-deterministic` (its median-price read-out) and
every baseline with the evaluator's default budget. For K >= 2 the sources are the fresh
adversary, the two-demand hard families and the random instances, with sampled E[ALG] for
randomised policies, and the product-grid certificate where it fits its work limit (exact
for deterministic policies, an upper bound beside the CR for randomised ones). The table
gives each ratio with its worst source, the best baseline, learned / best baseline beside the
aim (0.85 for K >= 2, 0.90 against `threshold` for large demands) and the training wall time.

Run: python experiments/multi_resource.py [--out results] [--only k2-u10-simultaneous]
Writes OUT/multi_resource.{md,csv}, OUT/multi_resource.{png,pdf} (grouped bars), run folders
in OUT/multi_resource/ (replaced on each run of this script), and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import jax
from common import fmt, measurement_columns, train_and_measure, write_csv

from advonline import plots
from advonline.baselines.posted_price import BASELINES
from advonline.evaluation import Budget
from advonline.huge_pages import relaunch_with_huge_pages

NAMES = ["k2-u10-simultaneous", "k3-u10-simultaneous", "k1-u10-d025-simultaneous"]
AIMS = {
    "k2-u10-simultaneous": (0.85, BASELINES),
    "k3-u10-simultaneous": (0.85, BASELINES),
    "k1-u10-d025-simultaneous": (0.90, ("threshold",)),
}


def setting_text(setting) -> str:
    kind = "divisible" if setting.divisible else "indivisible"
    return (
        f"K={setting.resources} L={setting.low:g} U={setting.high:g} T={setting.rounds} "
        f"max demand {setting.max_demand:g} ({setting.demand_levels} levels, {kind})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for tables, figures and runs")
    parser.add_argument("--only", action="append", choices=NAMES, help="run only these configs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget()
    rows = []
    for name in args.only or NAMES:
        folder = out / "multi_resource" / name
        config, _, measured, wall = train_and_measure(name, folder, budget)
        aim, compared = AIMS[name]
        best = min(compared, key=lambda n: measured[n].competitive_ratio)
        learned = measured["learned"].competitive_ratio
        best_ratio = measured[best].competitive_ratio
        row = {
            "config": name,
            "training": "from scratch",
            "setting": setting_text(config.setting),
            "train_seconds": round(wall, 1),
            "best_baseline": best,
            "learned_over_best": learned / best_ratio,
            "aim": aim,
            **measurement_columns(measured),
        }
        rows.append(row)
        print(row, flush=True)
    write_csv(rows, out / "multi_resource.csv")
    write_markdown(rows, out, budget)
    names = ["learned", "learned-deterministic", *BASELINES]
    bars = [
        (f"{r['config']}\n({r['training']})", {n: r[f"{n}_ratio"] for n in names}) for r in rows
    ]
    title = f"Several resources and large demands: measured CR, same budget\n{budget.summary()}"
    bounds = [{n: r[f"{n}_upper_bound"] for n in names} for r in rows]
    plots.bars_figure(bars, out, "multi_resource", title, bounds)


def write_markdown(rows: list[dict], out: Path, budget: Budget) -> None:
    names = ["learned", "learned-deterministic", *BASELINES]
    header = (
        f"| config | training | setting | {' | '.join(names)} | best baseline | "
        "learned / best (aim) | train s |"
    )
    lines = [
        f"Hardware: {platform.processor() or platform.machine()}, JAX on "
        f"{jax.devices()[0].platform}. Budget: {budget.describe()}.",
        "",
        header,
        "|---" * (len(names) + 6) + "|",
    ]
    for r in rows:
        cells = [
            r["config"],
            r["training"],
            r["setting"],
            *(f"{fmt(r[f'{n}_ratio'])} ({r[f'{n}_worst_source']})" for n in names),
            r["best_baseline"],
            f"{fmt(r['learned_over_best'])} ({r['aim']:.2f})",
            f"{r['train_seconds']:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    markdown = "\n".join(lines) + "\n"
    (out / "multi_resource.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
