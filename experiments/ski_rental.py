"""Ski rental learned from scratch: the docs/results.md block.

For each config and game seeds 0 .. N-1, trains over the problem interface (``advonline run``
does the same for one seed) and measures the learned buying rule beside the classic rules
with the same evaluator. Prints the known optimum (Karlin et al.'s ratio), the certified
lower bound on every online rule for the setting (an LP over every season length), the
learned rule's exact ratio (median [min, max] over the seeds), the worst seed over the
optimum, and the classic rules' exact ratios.

    python experiments/ski_rental.py            # seeds 0-2
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import certified, concurrent_flag, result, run_seeds, spread

CONFIGS = ("ski-b10",)
#: config -> the largest learned exact ratio over the known optimum, on every seed
TARGETS = {"ski-b10": 1.005}


def block(name: str, reports: list[dict]) -> str:
    """One markdown row per config."""
    first = reports[0]
    setting = first["setting"]
    bound = first["lower_bound"]["ratio"]
    reference = first["reference"]["ratio"]
    learned = [certified(result(report, "learned")) for report in reports]
    seconds = [report["training_seconds"] for report in reports]
    worst = max(learned) / reference
    met = "met" if worst <= TARGETS[name] else "NOT met"
    baselines = ", ".join(
        f"{row['algorithm']} {certified(row):.4f}"
        for row in first["results"]
        if row["algorithm"] != "learned"
    )
    return (
        f"| {name} (B {setting['buy']}, seasons up to {setting['rounds']} days) | "
        f"{reference:.4f} | {bound:.4f} | {spread(learned)} | {worst:.4f} (target "
        f"<= {TARGETS[name]}: {met}) | {baselines} | {statistics.median(seconds):.0f} |"
    )


HEADER = (
    "| config | optimum 1 / (1 - (1 - 1/B)^B) | lower bound, certified | learned exact ratio, "
    "median [min, max] | worst / optimum | classic rules' exact ratios | train s |\n"
    + "|---" * 7
    + "|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/ski_rental", help="folder for the runs")
    parser.add_argument("--seeds", type=int, default=3)
    concurrent_flag(parser)
    parser.add_argument("--only", action="append", choices=CONFIGS, help="run only these")
    args = parser.parse_args()
    print(HEADER)
    for name in args.only or CONFIGS:
        reports = run_seeds(name, args.seeds, Path(args.out), at_once=args.concurrent)
        print(block(name, reports), flush=True)


if __name__ == "__main__":
    main()
