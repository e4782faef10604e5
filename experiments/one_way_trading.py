"""One-way trading learned from scratch: the docs/results.md block.

For each config and game seeds 0 .. N-1, trains over the problem interface (``advonline run``
does the same for one seed) and measures the learned curve beside the baselines with the same
evaluator: owt-u10 and owt-u100 with the oracle loop, and the same settings with the
simultaneous loop (``*-simultaneous``, a live adversary network) and owt-u10 with adversary
networks beside the oracle's hill climbing (``owt-u10-networks``) for comparison. Prints the
known optimum r*(theta), the certified lower bound on every online algorithm for the setting,
the least ratio any curve on the setting's grid can certify (the bound of the best curve's
LP; the `optimal` baseline's certificate lies just above it), the learned curve's certificate
for real rates (median [min, max] over the seeds) and the baselines'.

    python experiments/one_way_trading.py            # seeds 0-2, every config
    python experiments/one_way_trading.py --only owt-u10-simultaneous
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import certified, concurrent_flag, result, run_seeds, spread

from advonline.problems.one_way_trading.exact import optimal_curve
from advonline.problems.one_way_trading.model import Setting

CONFIGS = (
    "owt-u10",
    "owt-u100",
    "owt-u10-simultaneous",
    "owt-u100-simultaneous",
    "owt-u10-networks",
)


def block(name: str, reports: list[dict]) -> str:
    """One markdown row per config: the bracket and the learned spread."""
    first = reports[0]
    setting = first["setting"]
    bound = first["lower_bound"]["ratio"]
    reference = first["reference"]["ratio"]
    learned = [certified(result(report, "learned")) for report in reports]
    seconds = [report["training_seconds"] for report in reports]
    described = {key: value for key, value in setting.items() if key != "problem"}
    best = optimal_curve(Setting(**described))[1]
    baselines = ", ".join(
        f"{row['algorithm']} {certified(row):.4f}"
        for row in first["results"]
        if row["algorithm"] != "learned"
    )
    return (
        f"| {name} (theta {setting['high'] / setting['low']:g}, T {setting['rounds']}, "
        f"{setting['levels']} rates) | {reference:.4f} | {bound:.4f} | {best:.4f} | "
        f"{spread(learned)} | {max(learned) / best:.4f} | {max(learned) / bound:.4f} | "
        f"{max(learned) / reference:.4f} | {baselines} | {statistics.median(seconds):.0f} |"
    )


HEADER = (
    "| config | r* | lower bound, certified | no curve on the grid below | learned certified "
    "ratio, median [min, max] | worst / grid's least | worst / bound | worst / r* | "
    "baselines' certified ratios | train s |\n" + "|---" * 10 + "|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/one_way_trading", help="folder for the runs")
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
