"""Claim: the game learns a pricing policy for one resource from scratch, and the evaluator
measures it beside the classic baselines with the same sources and budget.

For U/L in {5, 10, 100}, trains with the simultaneous loop (the paper's method, which does not
converge: docs/method.md) experiments/configs/k1-u{H}-simultaneous.toml (from scratch: no known
hard family in training), then measures `learned` (the randomised policy), `learned-deterministic`
(its median-price read-out) and every baseline (`threshold`, `exponential`,
`greedy`, `fixed`) with the default budget (exact DP bound, fresh adversary, families, random
instances; for the randomised policy the DP's upper bound on its oblivious CR beside it). Also
reports the read-out's largest relative gap to the threshold price phi(y) over the utilisation
grid (first round) and the training wall time.

Run: python experiments/learned_k1.py [--out results] [--only k1-u10-simultaneous]
Writes OUT/learned_k1.{md,csv}, OUT/learned_k1.{png,pdf} (grouped bars),
OUT/<config>-exploitability.{png,pdf}, run folders in
OUT/learned_k1/ (replaced on each run of this script), and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import jax
import jax.numpy as jnp
from common import fmt, measurement_columns, train_and_measure, write_csv

from advonline import plots
from advonline.baselines.posted_price import BASELINES
from advonline.baselines.posted_price.threshold import threshold_price
from advonline.evaluation import Budget
from advonline.huge_pages import relaunch_with_huge_pages
from advonline.problems.posted_price import figures
from advonline.problems.posted_price.learned import max_relative_gap
from advonline.problems.posted_price.model import price_table
from advonline.problems.posted_price.problem import PROBLEM as POSTED
from advonline.train import METRICS_NAME

NAMES = [f"k1-u{h}-simultaneous" for h in (5, 10, 100)]


def readout_gap(config, params) -> float:
    """max over the utilisation grid of |read-out - phi| / phi, in the first round."""
    setting = config.setting
    readout = config.build_game().learned(params)["learned-deterministic"]
    with jax.enable_x64(True):
        curve = price_table(setting, readout, jnp.float64).prices[0, :, 0]
        grid = jnp.linspace(0.0, 1.0, setting.grid_size + 1, dtype=jnp.float64)
        return max_relative_gap(curve, threshold_price(grid, setting.low, setting.high))


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
        folder = out / "learned_k1" / name
        config, params, measured, wall = train_and_measure(name, folder, budget)
        setting = config.setting
        title = (
            f"K=1 L={setting.low:g} U={setting.high:g} T={setting.rounds} "
            f"max demand {setting.max_demand:g}"
        )
        rows_logged = plots.read_metrics(folder / METRICS_NAME)
        described = figures.setting_title(setting.describe())
        plots.exploitability_figure(name, rows_logged, described, out)
        row = {
            "config": name,
            "training": "from scratch",
            "setting": title,
            "train_seconds": round(wall, 1),
            "one_plus_ln_theta": round(POSTED.reference(setting)[1], 4),
            "readout_gap_to_phi": round(readout_gap(config, params), 4),
            **measurement_columns(measured),
        }
        rows.append(row)
        print(row, flush=True)
    write_tables(rows, out, budget)
    write_figure(rows, out, budget)


def write_figure(rows: list[dict], out: Path, budget: Budget) -> None:
    """Grouped bars of every algorithm's measured CR per config, with the DP upper bound of the
    randomised policy as a marker."""
    names = ["learned", "learned-deterministic", *BASELINES]
    bars = [
        (f"{r['config']}\n({r['training']})", {n: r[f"{n}_ratio"] for n in names}) for r in rows
    ]
    bounds = [{n: r[f"{n}_upper_bound"] for n in names} for r in rows]
    title = f"Learned vs baselines, measured CR, same budget\n{budget.summary()}"
    plots.bars_figure(bars, out, "learned_k1", title, bounds)


def write_tables(rows: list[dict], out: Path, budget: Budget) -> None:
    write_csv(rows, out / "learned_k1.csv")
    header = (
        "| config | training | setting | 1+ln(U/L) | learned (worst source) | learned bound | "
        f"learned-deterministic | {' | '.join(BASELINES)} | read-out gap to phi | train s |"
    )
    lines = [
        f"Hardware: {platform.processor() or platform.machine()}, JAX on "
        f"{jax.devices()[0].platform}. Budget: {budget.describe()}.",
        "",
        header,
        "|---" * (9 + len(BASELINES)) + "|",
    ]
    for r in rows:
        cells = [
            r["config"],
            r["training"],
            r["setting"],
            fmt(r["one_plus_ln_theta"]),
            f"{fmt(r['learned_ratio'])} ({r['learned_worst_source']})",
            fmt(r["learned_upper_bound"]),
            f"{fmt(r['learned-deterministic_ratio'])} ({r['learned-deterministic_worst_source']})",
            *(f"{fmt(r[f'{n}_ratio'])} ({r[f'{n}_worst_source']})" for n in BASELINES),
            fmt(r["readout_gap_to_phi"]),
            f"{r['train_seconds']:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    markdown = "\n".join(lines) + "\n"
    (out / "learned_k1.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
