"""One-way trading learned from scratch: the docs/results.md block.

For each config and game seeds 0 .. N-1, trains over the problem interface (``advonline run``
does the same for one seed) and measures the learned curve beside the baselines with the same
evaluator: owt-u10 and owt-u100 with the oracle loop, and the same settings with the
simultaneous loop (``*-simultaneous``, a live adversary network) and owt-u10 with adversary
networks beside the oracle's hill climbing (``owt-u10-networks``) for comparison. Prints the
known optimum r*(theta) (over every horizon), the certified lower bound on every online
algorithm for the setting's ``T`` rounds, the learned curve's certificate for ``T`` rounds of
real rates (median [min, max] over the seeds), its ratio over every horizon (which no curve
brings below r*) and the baselines' certificates.

    python experiments/one_way_trading.py            # seeds 0-2, every config
    python experiments/one_way_trading.py --only owt-u10-simultaneous
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from common import certified, concurrent_flag, result, run_seeds, spread

from advonline.problems.one_way_trading.exact import supremum
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
    described = Setting(**{key: value for key, value in setting.items() if key != "problem"})
    every_horizon = [supremum(described, np.asarray(_curve(report))) for report in reports]
    baselines = ", ".join(
        f"{row['algorithm']} {certified(row):.4f}"
        for row in first["results"]
        if row["algorithm"] != "learned"
    )
    return (
        f"| {name} (theta {setting['high'] / setting['low']:g}, T {setting['rounds']}, "
        f"{setting['levels']} rates) | {reference:.4f} | {bound:.4f} | {spread(learned)} | "
        f"{max(learned) / bound:.4f} | {max(learned) / reference:.4f} | "
        f"{spread(every_horizon)} | {baselines} | {statistics.median(seconds):.0f} |"
    )


def _curve(report: dict) -> list[float]:
    """The learned curve of a seed's run, from the policy file the run exported."""
    document = json.loads((Path(report["checkpoint"]) / "policy.json").read_text())
    return document["fractions"]


HEADER = (
    "| config | r* | lower bound, certified | learned certified ratio for T rounds, median "
    "[min, max] | worst / bound | worst / r* | learned over every horizon | baselines' "
    "certified ratios | train s |\n" + "|---" * 9 + "|"
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
