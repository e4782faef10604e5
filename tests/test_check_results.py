"""experiments/check_results.py: a re-run table is matched to docs/results.md row by row, and
a figure that moved is reported while a time column is not; experiments/consistency.py: its
checks hold on a setting and fail where a bound is wrong or a figure changes with the units."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from advonline import problems as registry
from advonline.problem import LowerBound

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, monkeypatch=None):
    if monkeypatch is not None:  # the experiments import their shared helpers by name
        monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HEADER = "| config | learned ratio | bound | train s |\n|---|---|---|---|"
DOCUMENT = f"""Some text.

{HEADER}
| a (small) | 1.5375 [1.5373, 1.5386] | 1.5353 | 3 |
| b | 2.0000 | 1.9000 | 40 |

More text.
"""


def test_a_moved_figure_a_missing_row_and_an_unknown_table_are_reported():
    check = _load("check_results")
    same = f"{HEADER}\n| a (small) | 1.5375 [1.5373, 1.5386] | 1.5353 | 9 |\n"
    assert check.compare(same, DOCUMENT) == []  # only the time differs
    moved = f"{HEADER}\n| a (small) | 1.5380 [1.5373, 1.5386] | 1.5353 | 3 |\n| c | 1 | 1 | 1 |\n"
    assert check.compare(moved, DOCUMENT) == [
        "a (small): learned ratio: docs/results.md says 1.5375 [1.5373, 1.5386], "
        "now 1.5380 [1.5373, 1.5386]",
        "c: no such row in docs/results.md",
    ]
    other = "| config | something else |\n|---|---|\n| a (small) | 1 |\n"
    assert check.compare(other, DOCUMENT) == [
        "no table in docs/results.md has the header | config | something else |"
    ]


def test_every_checked_experiment_prints_a_table_of_the_results_document(monkeypatch):
    """The header each experiment prints heads a table in docs/results.md, so its rows have
    something to be compared with."""
    check = _load("check_results")
    stored = check.tables((ROOT / "docs" / "results.md").read_text())
    for name in check.EXPERIMENTS:
        header = _load(name, monkeypatch).HEADER.splitlines()[0].strip()
        assert header in stored, name


def test_the_consistency_check_passes_a_setting_and_catches_a_bound_above_a_certificate():
    """experiments/consistency.py: the inequalities hold on a ski rental setting, and a lower
    bound set above a baseline's exact ratio is reported (the check can fail)."""
    consistency = _load("consistency")
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=5, rounds=8)
    lower, certificates, failed = consistency.check(problem, setting)
    assert failed == [] and lower <= min(certificates.values())
    raised = dataclasses.replace(problem, lower_bound=lambda s: LowerBound(9.0, 1 / 9, None, None))
    assert consistency.check(raised, setting)[2] == [
        f"lower bound 9 > certificate {min(certificates.values()):.6g}"
    ]


def test_the_consistency_check_catches_a_figure_that_changes_with_the_units():
    """experiments/consistency.py: the same game in units of L and of the smallest capacity,
    resources in reverse order, and every figure that differs there (or exists in only one of
    the two) is reported."""
    consistency = _load("consistency")
    table = {"low": 2.0, "high": 8.0, "rounds": 3, "capacities": [0.5, 2.0]}
    unit = {"low": 1.0, "high": 4.0, "rounds": 3, "capacities": [4.0, 1.0]}
    assert consistency.unit_scale(table) == unit
    assert consistency.unit_scale({"buy": 5, "rounds": 8}) is None
    found = (1.5, {"a": 2.0, "b": None}, [])
    assert consistency.differences(found, found) == []
    assert consistency.differences(found, (1.5, {"a": 2.1, "b": 3.0}, [])) == [
        "a 2.0 at scale, 2.1 in units",
        "b None at scale, 3.0 in units",
    ]
