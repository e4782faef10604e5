"""Reading a report (``evaluation.json``, ``evaluate --json``; advonline/evaluation.py) and a
run's ``metrics.csv`` in tests."""

import csv
from pathlib import Path


def by_algorithm(report: dict) -> dict:
    """``{algorithm: its result}`` of a report, in the report's order."""
    return {row["algorithm"]: row for row in report["results"]}


def certified(row: dict) -> float | None:
    """A result's certified ratio: its exact source, else its upper bound (None: neither)."""
    exact = row["sources"].get("exact")
    return exact if exact is not None else row["upper_bound"]


def exact(row: dict) -> bool:
    """Whether a result's certificate is its exact competitive ratio."""
    return row["sources"].get("exact") is not None


def metrics_without_timings(run: Path) -> list[dict]:
    """A run's ``metrics.csv`` rows without the cells that time it (wall seconds, steps per
    second, seconds per phase): what a resumed run must reproduce exactly."""
    with open(Path(run) / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    timings = ("wall_seconds", "steps_per_second")
    return [
        {k: v for k, v in row.items() if k not in timings and not k.startswith("seconds_")}
        for row in rows
    ]


def figures(report: dict) -> list[dict]:
    """A report's results without the seconds each source took: what measuring the same
    policies again must reproduce exactly."""
    return [{k: v for k, v in row.items() if k != "seconds"} for row in report["results"]]
