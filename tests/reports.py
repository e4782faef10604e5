"""Reading a report (``evaluation.json``, ``evaluate --json``; advonline/evaluation.py) in
tests."""


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
