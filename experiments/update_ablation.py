"""Claim: the per-round update (every action, exact values) reaches a given quality in fewer
steps and less wall time than the standard update (REINFORCE on sampled prices, with a
baseline), on the same objective and budget, in both training loops.

- Simultaneous loop: both runs train the pricing network of
  experiments/configs/ablation-k1-u10-simultaneous.toml (a frozen adversary: the same fixed
  objective for both) from the same seed, differing only in
  ``algorithm.update``. The objective is the worst ratio OPT / E[ALG] over the pool
  (``pool_ratio`` in metrics.csv, exact E[ALG]).
- Oracle loop: both runs train experiments/configs/k1-u10-oracle.toml from scratch (game
  seed 0), differing only in ``algorithm.update``; the archive, the equilibrium weights and the
  anchor are the loop's own. The objective is the run's guarantee (``guarantee``: the best
  DP upper bound on the CR so far); the exploitability of the last epoch is printed beside it.

"Within 5%" means within 5% of the best value either run of a loop reached.

Run: python experiments/update_ablation.py [--out results] [--loop simultaneous|oracle|both]
Writes OUT/update_ablation.{md,csv,png,pdf} (simultaneous loop) and
OUT/update_ablation_oracle.{md,csv,png,pdf} (oracle loop), run folders in OUT/update_ablation/
(replaced on each run of this script), and prints the Markdown tables. About 8 min for the
simultaneous loop and 30 min for the oracle loop on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import time
from pathlib import Path

from advonline import configs, plots
from advonline.huge_pages import relaunch_with_huge_pages
from advonline.train import METRICS_NAME, train

CONFIGS = Path(__file__).parent / "configs"
UPDATES = ("per-round", "reinforce")
#: loop -> (config, the column it is judged by, its label in tables and figures, output stem)
LOOPS = {
    "simultaneous": (
        "ablation-k1-u10-simultaneous",
        "pool_ratio",
        "worst ratio OPT / E[ALG] in the training pool",
        "update_ablation",
    ),
    "oracle": (
        "k1-u10-oracle",
        "guarantee",
        "guarantee (best DP upper bound on the CR so far)",
        "update_ablation_oracle",
    ),
}


def _first_within(rows: list[dict], column: str, target: float, key: str) -> float | None:
    return next((r[key] for r in rows if r.get(column) is not None and r[column] <= target), None)


def _last(rows: list[dict], column: str) -> float | None:
    values = [r[column] for r in rows if r.get(column) is not None]
    return values[-1] if values else None


def ablate(loop: str, out: Path) -> str:
    """Train the loop's config with each update, write its table, CSV and figure; return the
    Markdown table."""
    name, column, label, stem = LOOPS[loop]
    base = configs.load(CONFIGS / f"{name}.toml")
    runs = {}
    for update in UPDATES:
        data = base.to_tables()
        data["algorithm"]["update"] = update
        config = configs.from_tables(data, f"{name}.toml with update={update}")
        folder = out / "update_ablation" / f"{loop}-{update}"
        shutil.rmtree(folder, ignore_errors=True)  # this script's own output
        start = time.perf_counter()
        train(config, folder)
        print(f"{loop} loop, {update}: {time.perf_counter() - start:.1f} s", flush=True)
        runs[update] = plots.read_metrics(folder / METRICS_NAME)
    best = min(r[column] for rows in runs.values() for r in rows if r.get(column) is not None)
    target = 1.05 * best
    table = []
    for update, rows in runs.items():
        table.append(
            {
                "update": update,
                "steps": int(rows[-1]["step"]),
                "wall_seconds": rows[-1]["wall_seconds"],
                "final": _last(rows, column),
                "best": min(r[column] for r in rows if r.get(column) is not None),
                "steps_to_5pct": _first_within(rows, column, target, "step"),
                "seconds_to_5pct": _first_within(rows, column, target, "wall_seconds"),
                "final_exploitability": _last(rows, "exploitability"),
            }
        )
    setting = base.setting
    title = (
        f"{loop} loop, {name}: K=1, L={setting.low:g}, U={setting.high:g}, T={setting.rounds}, "
        f"max demand {setting.max_demand:g}, game seed {base.game.seed}"
    )
    lines = [
        f"Setting: {title}. Judged by: {label} (`{column}`). Target: <= {target:.4f} (5% above "
        f"the best, {best:.4f}).",
        "",
        f"| update | steps | wall s | final {column} | best | steps to 5% | seconds to 5% | "
        "final exploitability |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        cells = [
            row["update"],
            str(row["steps"]),
            f"{row['wall_seconds']:.1f}",
            f"{row['final']:.4f}",
            f"{row['best']:.4f}",
            "not reached" if row["steps_to_5pct"] is None else f"{row['steps_to_5pct']:.0f}",
            "not reached" if row["seconds_to_5pct"] is None else f"{row['seconds_to_5pct']:.1f}",
            "n/a" if row["final_exploitability"] is None else f"{row['final_exploitability']:.4f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    markdown = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown)
    with open(out / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    plots.convergence_figure(
        runs,
        out,
        stem,
        f"Per-round vs REINFORCE update ({title})",
        target=target,
        column=column,
        label=label,
    )
    return markdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for the tables and figures")
    parser.add_argument("--loop", choices=[*LOOPS, "both"], default="both")
    args = parser.parse_args()
    for loop in LOOPS if args.loop == "both" else [args.loop]:
        print(ablate(loop, Path(args.out)))


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
