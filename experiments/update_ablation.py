"""Claim: the per-round update (every action, exact values) reaches a given quality in fewer
steps and less wall time than the standard update (REINFORCE on sampled prices, with a
baseline), on the same objective and budget.

Both runs train the pricing network of experiments/configs/ablation-k1-u10.toml (a frozen
adversary and the staircase family: the same fixed pool of instances for both) from the same
seed, differing only in ``algorithm.update``. The objective is the worst ratio OPT / E[ALG]
over the pool (``pool_ratio`` in metrics.csv, exact E[ALG]). "Within 5%" means within 5% of the
best pool ratio either run reached.

Run: python experiments/update_ablation.py [--out results]
Writes OUT/update_ablation.{md,csv,png,pdf}, run folders in OUT/update_ablation/ (replaced on
each run of this script), and prints the Markdown table.
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

CONFIG = Path(__file__).parent / "configs" / "ablation-k1-u10.toml"
UPDATES = ("per-round", "reinforce")


def _first_within(rows: list[dict], target: float, key: str) -> float | None:
    return next((float(r[key]) for r in rows if float(r["pool_ratio"]) <= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for the table and figure")
    args = parser.parse_args()
    out = Path(args.out)
    base = configs.load(CONFIG)
    runs = {}
    for update in UPDATES:
        data = base.to_dict()
        data["algorithm"]["update"] = update
        config = configs.from_dict(data, f"{CONFIG} with update={update}")
        folder = out / "update_ablation" / update
        shutil.rmtree(folder, ignore_errors=True)  # this script's own output
        start = time.perf_counter()
        train(config, folder)
        print(f"{update}: {time.perf_counter() - start:.1f} s", flush=True)
        runs[update] = plots.read_metrics(folder / METRICS_NAME)
    best = min(float(r["pool_ratio"]) for rows in runs.values() for r in rows)
    target = 1.05 * best
    table = []
    for update, rows in runs.items():
        table.append(
            {
                "update": update,
                "steps": int(rows[-1]["step"]),
                "wall_seconds": float(rows[-1]["wall_seconds"]),
                "final_pool_ratio": float(rows[-1]["pool_ratio"]),
                "best_pool_ratio": min(float(r["pool_ratio"]) for r in rows),
                "steps_to_5pct": _first_within(rows, target, "step"),
                "seconds_to_5pct": _first_within(rows, target, "wall_seconds"),
            }
        )
    setting = base.setting
    title = (
        f"K=1, L={setting.low:g}, U={setting.high:g}, T={setting.rounds}, "
        f"max demand {setting.max_demand:g}; pool: frozen adversary + staircase family"
    )
    lines = [
        f"Setting: {title}. Target: pool ratio <= {target:.4f} (5% above the best, {best:.4f}).",
        "",
        "| update | steps | wall s | final pool ratio | best | steps to 5% | seconds to 5% |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        cells = [
            row["update"],
            str(row["steps"]),
            f"{row['wall_seconds']:.1f}",
            f"{row['final_pool_ratio']:.4f}",
            f"{row['best_pool_ratio']:.4f}",
            "not reached" if row["steps_to_5pct"] is None else f"{row['steps_to_5pct']:.0f}",
            "not reached" if row["seconds_to_5pct"] is None else f"{row['seconds_to_5pct']:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    markdown = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "update_ablation.md").write_text(markdown)
    with open(out / "update_ablation.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    plots.convergence_figure(
        runs,
        out,
        "update_ablation",
        f"Per-round vs REINFORCE update ({title})",
        target=target,
    )
    print(markdown)


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
