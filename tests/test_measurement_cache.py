"""The measurement cache: a baseline measured once on a setting with a budget is taken from
the cache by the next command that needs it, with the same figures and no seconds; anything
else about the measurement (the setting, the budget, the code) measures again, and a
cache that is off or unreadable changes nothing but the time."""

import dataclasses
import functools
import json
from types import SimpleNamespace

import pytest

from advonline import measurement_cache
from advonline import problems as registry
from advonline.cli import main
from advonline.evaluation import Budget, Measurement, SourceRatio
from tests.test_cli import TINY

ARGV = ["evaluate", *TINY, "--algorithm", "threshold", "--algorithm", "greedy", "--json"]


def _report(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _figures(report: dict) -> list:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in report["results"]]


@pytest.mark.end_to_end
def test_a_baseline_is_measured_once_and_taken_from_the_cache_after(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(measurement_cache.VARIABLE, str(tmp_path / "kept"))
    first = _report(capsys, ARGV)
    assert len(list((tmp_path / "kept").glob("*.json"))) == 3  # and the lower bound
    assert all(sum(r["seconds"].values()) > 0 for r in first["results"])
    again = _report(capsys, ARGV)
    assert _figures(again) == _figures(first)
    assert all(r["seconds"] == {} for r in again["results"])  # nothing was measured
    # another budget is another measurement
    other = _report(capsys, [*ARGV, "--seed", "1"])
    assert all(sum(r["seconds"].values()) > 0 for r in other["results"])
    assert len(list((tmp_path / "kept").glob("*.json"))) == 5  # one lower bound for both


def test_the_key_names_the_setting_budget_baseline_and_code(monkeypatch):
    problem = registry.get("posted-price")
    setting = problem.setting.from_config({"rounds": 40, "max_demand": 0.05})
    budget = Budget()
    key = measurement_cache.key(problem, setting, budget, "threshold")
    other_setting = problem.setting.from_config({"rounds": 41, "max_demand": 0.05})
    assert measurement_cache.key(problem, other_setting, budget, "threshold") != key
    assert measurement_cache.key(problem, setting, Budget(seed=1), "threshold") != key
    assert measurement_cache.key(problem, setting, budget, "greedy") != key
    two_devices = SimpleNamespace(size=2)  # a mesh's device count is all the key reads of it
    assert measurement_cache.key(problem, setting, budget, "threshold", two_devices) != key
    one_device = SimpleNamespace(size=1)
    assert measurement_cache.key(problem, setting, budget, "threshold", one_device) == key
    monkeypatch.setattr(measurement_cache, "_code_digest", lambda *packages: "other code")
    assert measurement_cache.key(problem, setting, budget, "threshold") != key


@pytest.mark.parametrize("content", ["", "{", '{"algorithm": "threshold"}', "[1, 2]"])
def test_an_unreadable_kept_file_is_measured_again(tmp_path, capsys, monkeypatch, content):
    monkeypatch.setenv(measurement_cache.VARIABLE, str(tmp_path / "kept"))
    first = _report(capsys, ARGV)
    for path in (tmp_path / "kept").glob("*.json"):
        path.write_text(content)
    again = _report(capsys, ARGV)
    assert _figures(again) == _figures(first)
    assert all(sum(r["seconds"].values()) > 0 for r in again["results"])


def test_off_keeps_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(measurement_cache.VARIABLE, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _report(capsys, ARGV)
    assert not list(tmp_path.rglob("*.json"))


def test_a_baseline_is_kept_by_the_source_of_its_package(tmp_path, monkeypatch):
    """A baseline given as a ``functools.partial`` is kept and read back equal (but for its
    seconds); one whose source cannot be found (a builtin) is measured but never kept."""
    monkeypatch.setenv(measurement_cache.VARIABLE, str(tmp_path))
    posted = registry.get("posted-price")
    made = functools.partial(posted.baselines["threshold"])
    problem = SimpleNamespace(
        name=posted.name, payoffs=posted.payoffs, baselines={"partial": made, "builtin": len}
    )
    setting = posted.setting.from_config({"rounds": 40})
    exact = SourceRatio(float("inf"), "exact", {"values": [1.0]})
    kept = Measurement("partial", float("inf"), "exact", {"exact": exact}, seconds={"exact": 1.0})
    measurement_cache.store(problem, setting, Budget(), [kept])
    assert measurement_cache.load(problem, setting, Budget(), ["partial"]) == {
        "partial": dataclasses.replace(kept, seconds={})
    }
    measurement_cache.store(
        problem, setting, Budget(), [dataclasses.replace(kept, algorithm="builtin")]
    )
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert measurement_cache.load(problem, setting, Budget(), ["builtin"]) == {}


def test_a_lower_bound_is_searched_once_and_kept(tmp_path, monkeypatch):
    """A setting's lower bound on every algorithm is searched once and read back (its ratio
    and best response); another setting is searched again, and with the cache off nothing is
    kept."""
    monkeypatch.setenv(measurement_cache.VARIABLE, str(tmp_path))
    ski = registry.get("ski-rental")
    searched = []

    def counted(setting):
        searched.append(setting)
        return ski.lower_bound(setting)

    problem = dataclasses.replace(ski, lower_bound=counted)
    setting = ski.setting(buy=4, rounds=10)
    first = measurement_cache.lower_bound(problem, setting)
    again = measurement_cache.lower_bound(problem, setting)
    assert len(searched) == 1 and first.ratio > 1
    assert (again.ratio, again.best_response) == (first.ratio, first.best_response)
    other = measurement_cache.lower_bound(problem, ski.setting(buy=6, rounds=10))
    assert len(searched) == 2 and other.ratio != first.ratio
    monkeypatch.setenv(measurement_cache.VARIABLE, "off")
    measurement_cache.lower_bound(problem, setting)
    assert len(searched) == 3 and len(list(tmp_path.glob("*.json"))) == 2
