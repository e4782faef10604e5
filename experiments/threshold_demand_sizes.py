"""Claim: the classic threshold is optimal only for small demands; with large demands its
measured ratio departs from 1 + ln(U/L). Measures `threshold` (and `greedy` for scale) with the
evaluator's default budget on U/L = 10 for growing maximum demand, divisible and indivisible.

Run: python experiments/threshold_demand_sizes.py [--out results]
Writes OUT/threshold_demand_sizes.md and .csv and prints the Markdown table.
"""

import argparse
import csv
import math
import time
from pathlib import Path

from advonline.baselines.posted_price import make_baseline
from advonline.evaluation import Budget, measure
from advonline.huge_pages import relaunch_with_huge_pages
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.problem import PROBLEM as POSTED

# (max demand, demand levels, rounds): rounds >= 2 / max demand leave room for the hard ramp.
DEMANDS = [
    (0.001, 1, 2000),
    (0.01, 1, 200),
    (0.05, 5, 100),
    (0.1, 5, 60),
    (0.25, 5, 40),
    (0.5, 5, 40),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for the table")
    args = parser.parse_args()
    budget = Budget()
    rows = []
    for divisible in (True, False):
        for max_demand, levels, rounds in DEMANDS:
            setting = Setting(
                high=10.0,
                rounds=rounds,
                max_demand=max_demand,
                demand_levels=levels,
                divisible=divisible,
            )
            start = time.perf_counter()
            found = {
                n: measure(POSTED, setting, n, make_baseline(n, setting), budget)
                for n in ("threshold", "greedy")
            }
            threshold = found["threshold"]
            rows.append(
                {
                    "divisible": divisible,
                    "max_demand": max_demand,
                    "demand_levels": levels,
                    "rounds": rounds,
                    "threshold_cr": threshold.competitive_ratio,
                    "threshold_worst_source": threshold.worst_source,
                    "exact": threshold.sources["exact"].ratio,
                    "exact_note": threshold.sources["exact"].note,
                    "vs_1_plus_ln": threshold.competitive_ratio / POSTED.reference(setting)[1],
                    "greedy_cr": found["greedy"].competitive_ratio,
                    "seconds": time.perf_counter() - start,
                }
            )
            print(f"done: divisible={divisible} max demand {max_demand}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "threshold_demand_sizes.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = _markdown(rows, budget)
    (out / "threshold_demand_sizes.md").write_text(table)
    print(table)


def _markdown(rows, budget) -> str:
    fmt = lambda x: "inf" if math.isinf(x) else f"{x:.3f}"  # noqa: E731
    lines = [
        f"Setting: posted-price, K = 1, L = 1, U = 10 (1 + ln(U/L) = {1 + math.log(10):.3f}); "
        f"budget {budget.describe()}",
        "",
        "| demand | max demand | levels | T | threshold CR | worst source "
        "| CR / (1 + ln 10) | greedy CR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {'divisible' if r['divisible'] else 'indivisible'} | {r['max_demand']} | "
            f"{r['demand_levels']} | {r['rounds']} | {fmt(r['threshold_cr'])} | "
            f"{r['threshold_worst_source']} | {r['vs_1_plus_ln']:.3f} | {fmt(r['greedy_cr'])} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    relaunch_with_huge_pages()  # as the advonline command does
    main()
