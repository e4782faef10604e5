"""Budgeted allocation (AdWords with small bids) learned from scratch: the docs/results.md block.

For each config and game seeds 0 .. N-1, trains with the oracle loop over the problem interface
(``advonline run`` does the same for one seed) and measures the learned rule beside the classic
ones with the same evaluator and budget. Prints the learned rule's measured ratio (the worst of
the evaluator's search, random inputs and held-out families; median [min, max] over the seeds),
its ratio to MSVV's and Greedy's on the same seed, the certified lower bound on every online
algorithm for the setting (Yao's principle over the upper-triangular instances in a random
advertiser order) and the learned ratio over it, how much more the evaluator found than the
worst of training's own final archive against the delivered rule (``fresh / archive - 1``:
what a fresh adversary still gains, the exploitability left), and the classic rules' ratios.

Every config is measured with the evaluator's default budget (64 chains x 16 candidates x 256
hill-climbing steps), n = 50 included, as ``experiments/from_scratch.py`` measures them.

    python experiments/adwords.py     # seeds 0-2: ~17 min a seed at n = 10, ~75 min for n = 50
    python experiments/adwords.py --only adwords-n10-mixtures --seeds 1   # mixtures, seed 0
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import concurrent_flag, result, run_seeds, spread

CONFIGS = ("adwords-n10", "adwords-n10-mixtures", "adwords-n10-integral", "adwords-n50")


def block(name: str, reports: list[dict]) -> str:
    """One markdown row per config."""
    setting = reports[0]["setting"]

    def ratios(algorithm: str) -> list[float]:
        return [result(report, algorithm)["competitive_ratio"] for report in reports]

    learned = ratios("learned")
    against = {
        other: [mine / theirs for mine, theirs in zip(learned, ratios(other), strict=True)]
        for other in ("msvv", "greedy")
    }
    classic = ", ".join(
        f"{algorithm} {spread(ratios(algorithm))}"
        for algorithm in (row["algorithm"] for row in reports[0]["results"])
        if algorithm != "learned"
    )
    seconds = [report["training_seconds"] for report in reports]
    bound = reports[0]["lower_bound"]["ratio"]
    gained = [
        mine / result(report, "learned")["sources"]["archive"] - 1
        for mine, report in zip(learned, reports, strict=True)
    ]
    return (
        f"| {name} (n {setting['advertisers']}, T {setting['queries']}, bids <= "
        f"{setting['max_bid']:g}, {setting['bid_levels']} level(s)) | {spread(learned)} | "
        f"{spread(against['msvv'])} | {spread(against['greedy'])} | {bound:.4f} | "
        f"{spread([mine / bound for mine in learned])} | {spread(gained)} | "
        f"{classic} | "
        f"{statistics.median(seconds):.0f} |"
    )


HEADER = (
    "| config | learned ratio, median [min, max] | learned / MSVV | learned / Greedy | "
    "lower bound, certified | learned / bound | fresh / archive - 1 | "
    "classic rules' ratios, median [min, max] | train s |\n" + "|---" * 9 + "|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/adwords", help="folder for the runs")
    parser.add_argument("--seeds", type=int, default=3)
    concurrent_flag(parser)
    parser.add_argument("--only", choices=CONFIGS, help="one config")
    args = parser.parse_args()
    print(HEADER)
    for name in [args.only] if args.only else CONFIGS:
        reports = run_seeds(name, args.seeds, Path(args.out), at_once=args.concurrent)
        print(block(name, reports), flush=True)


if __name__ == "__main__":
    main()
