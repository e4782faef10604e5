"""The command line: the table and its JSON schema, user traces and bad input (the console
entry point runs as a subprocess in tests/test_parallel.py and tests/test_train.py)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from advonline import cli
from advonline.cli import main
from advonline.problems.posted_price.optimum import lp_optimum, milp_optimum
from advonline.ratio import format_ratio

TINY = [
    "--setting",
    "rounds=40",
    "--setting",
    "max_demand=0.05",
    "--family-members",
    "9",
    "--random-instances",
    "8",
    "--adversary-steps",
    "5",
    "--search-steps",
    "8",
]


def test_evaluate_json_schema(capsys):
    assert main(["evaluate", *TINY, "--algorithm", "greedy", "--algorithm", "fixed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["setting"]["rounds"] == 40 and report["setting"]["low"] == 1.0
    assert [r["algorithm"] for r in report["results"]] == ["greedy", "fixed"]
    greedy, fixed = report["results"]
    assert set(greedy["sources"]) == {"exact", "adversary", "families", "random"}
    assert greedy["competitive_ratio"] == max(greedy["sources"].values())
    assert fixed["competitive_ratio"] == float("inf")


def test_evaluate_prints_a_table_with_its_setting(capsys):
    assert main(["evaluate", *TINY, "--algorithm", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "greedy" in out and "setting: posted-price resources=1" in out and "rounds=40" in out


@pytest.mark.parametrize("ratio", [1.0, 9999.99994, 83298.0665, 1.009e5, 3.4e38, 1e300])
def test_a_ratio_fills_at_most_nine_of_its_ten_columns_and_reads_back(ratio):
    printed = format_ratio(ratio)
    assert len(printed) <= 9 and float(printed) == pytest.approx(ratio, rel=5e-3)


def _write_trace(path, values, demands):
    columns = ["value"] + (
        ["demand"]
        if demands.shape[1] == 1
        else [f"demand_{k + 1}" for k in range(demands.shape[1])]
    )
    rows = [",".join(columns)] + [
        ",".join(f"{x:.17g}" for x in [v, *d]) for v, d in zip(values, demands, strict=True)
    ]
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("indivisible", [False, True])
def test_trace_optimum_matches_independent_highs_solve(tmp_path, capsys, indivisible):
    rng = np.random.default_rng(7)
    for trial in range(5):
        count = int(rng.integers(5, 40))
        demands = rng.uniform(0.01, 0.4, (count, 1))
        values = rng.uniform(1, 10, count) * demands[:, 0]
        trace = tmp_path / f"trace{trial}.csv"
        _write_trace(trace, values, demands)
        flags = ["--setting", "divisible=false"] if indivisible else []
        assert main(["evaluate", "--instances", str(trace), "--json", *flags]) == 0
        report = json.loads(capsys.readouterr().out)
        solve = milp_optimum if indivisible else lp_optimum
        assert report["offline_optimum"] == pytest.approx(solve(values, demands, [1.0]), rel=1e-9)
        for result in report["results"]:
            assert result["welfare"] <= report["offline_optimum"] * (1 + 1e-9)
            assert result["ratio"] == pytest.approx(report["offline_optimum"] / result["welfare"])


BAD = [
    (["evaluate", "--setting", "low=5", "--setting", "high=2"], "must exceed L"),
    (["evaluate", "--setting", "low=2", "--setting", "high=2"], "must exceed L"),
    (["evaluate", "--setting", "high=1e13"], "high / low must be at most 1e+12"),
    (["evaluate", "--setting", "low=1e31", "--setting", "high=1e32"], "must lie in [1e-30, 1e+30]"),
    (["evaluate", "--setting", "capacities=[1e-31]"], "a buyer's value (a density times a"),
    (["evaluate", "--algorithm", "oracle"], "unknown algorithm"),
    (["evaluate", "--problem", "tsp"], "unknown problem"),
    (["evaluate", "--setting", "rounds=many"], "rounds: expected a whole number, got 'many'"),
    (["evaluate", "--setting", "rounds=9.0"], "rounds: expected a whole number, got 9.0"),
    (["evaluate", "--setting", "divisible=1"], "divisible: expected true or false"),
    (["evaluate", "--setting", "colour=red"], "unknown setting keys ['colour']"),
    (["evaluate", "--setting", "rounds"], "--setting takes KEY=VALUE"),
    (["evaluate", "--setting", "rounds=4", "--setting", "rounds=5"], "rounds given twice"),
    (["evaluate", "--setting", "max_demand=0.03", "--setting", "demand_levels=1"], "whole number"),
    (["evaluate", "--instances", "missing.csv"], "trace missing.csv: no such file"),
    (["evaluate", "--setting", "resources=0"], "resources must be >= 1"),
    (["evaluate", "--problem", "adwords", "--setting", "queries=10.5"], "expected a whole number"),
    (["evaluate", "--problem", "adwords", "--setting", "max_bid=true"], "expected a number"),
    (["evaluate", "--problem", "one-way-trading", "--instances", "x.csv"], "reads no input"),
    (["evaluate", "--seed", str(2**70)], "--seed must be a whole number"),
    (["evaluate", "--seed", "-1"], "--seed must be a whole number"),
    (["evaluate", "--search-steps", "-1"], "--search-steps must be >= 0"),
    (["evaluate", "--problem", ""], "unknown problem ''"),
    (["evaluate", "--problem", "", "--policy", "x.json"], "unknown problem ''"),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_bad_input_one_line_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("value,size\n1,0.2\n", "demand"),
        ("demand\n0.2\n", "'value'"),
        ("value,demand\n1,abc\n", "not a number"),
        ("value,demand\n1\n", "cells"),
        ("value,demand\n", "no buyers"),
        ("", "empty"),
    ],
)
def test_bad_traces_one_line_exit_2(tmp_path, capsys, content, message):
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    assert main(["evaluate", "--instances", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_trace_with_a_byte_order_mark_reads_as_without(tmp_path, capsys):
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    text = "value,demand\n2,0.2\n4.5,0.5\n1,0.4\n"
    plain.write_text(text)
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())  # as spreadsheet programs save CSV
    reports = []
    for trace in (plain, marked):
        assert main(["evaluate", "--instances", str(trace), "--algorithm", "greedy", "--json"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0]["offline_optimum"] == reports[1]["offline_optimum"] > 0
    assert reports[0]["results"] == reports[1]["results"]


def test_a_config_that_is_not_utf8_gets_one_line(tmp_path, capsys):
    config = tmp_path / "latin1.toml"
    config.write_bytes("# prix en \xe9\n[setting]\nlow = 1.0\n".encode("latin-1"))
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not UTF-8" in err and not (tmp_path / "run").exists()


def test_negative_capacity_is_refused(tmp_path, capsys):
    trace = tmp_path / "ok.csv"
    trace.write_text("value,demand\n1,0.2\n")
    assert main(["evaluate", "--instances", str(trace), "--setting", "capacities=[-1]"]) == 2
    assert "capacities must be positive" in capsys.readouterr().err


def test_evaluate_reaches_every_problem_through_the_one_evaluator(capsys, monkeypatch):
    """``evaluate`` has one path for every problem: posted pricing and one-way trading are
    both measured by ``advonline.evaluation.measure`` with the budget the flags give, and
    reported in the one format."""
    from advonline import evaluation

    seen = []

    def spy(problem, setting, name, policy, budget, *args):
        seen.append((problem.name, name, budget.search_steps))
        return measure(problem, setting, name, policy, budget, *args)

    measure = evaluation.measure
    monkeypatch.setattr(evaluation, "measure", spy)
    owt = ["--problem", "one-way-trading", "--setting", "levels=9", "--setting", "rounds=9"]
    reports = []
    for argv in (
        [*TINY, "--algorithm", "greedy"],
        [*owt, *TINY[4:], "--algorithm", "threshold"],
    ):
        assert main(["evaluate", *argv, "--json"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert seen == [("posted-price", "greedy", 8), ("one-way-trading", "threshold", 8)]
    assert [set(report) for report in reports] == [set(reports[0])] * 2
    assert reports[1]["setting"]["problem"] == "one-way-trading"


def test_every_command_takes_every_problem_by_one_path():
    """The command line never asks which kind of problem a run belongs to: it reads configs
    with the one reader and opens runs with the one opener, whatever the problem; no module
    of the core asks either, and every problem's config builds the one game."""
    source = Path(cli.__file__).read_text()
    assert "configs.from_tables(" in source and "pipeline.open_run(" in source
    world_tests = re.compile(
        r"training is None|problem\.training\b|problem_config|problem_run|is_interface|Training\("
    )
    for path in sorted(Path(cli.__file__).parent.glob("*.py")):
        assert not world_tests.search(path.read_text()), path.name
    from advonline import configs
    from advonline.game import Game

    for name in ("k1-u10-oracle", "k2-u10-oracle", "owt-u10", "adwords-n10"):
        config = configs.load(Path(__file__).parents[1] / "experiments/configs" / f"{name}.toml")
        assert type(config.build_game()) is Game, name


def test_the_table_prints_its_report_cell_by_cell_and_a_shared_note_once(capsys):
    flags = ["--problem", "one-way-trading", "--setting", "rounds=8", "--setting", "levels=8"]
    assert main(["evaluate", *flags, *TINY[4:], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["results"]) > 1
    assert all(r["sources"]["exact"] is None for r in report["results"])
    exact_notes = {r["notes"]["exact"] for r in report["results"]}
    assert main(["evaluate", *flags, *TINY[4:]]) == 0
    printed = capsys.readouterr().out.splitlines()
    bound = report["lower_bound"]["ratio"]
    assert f"lower bound on every online algorithm (certified): {bound:.4f}" in printed
    header = next(line for line in printed if line.startswith("algorithm")).split()
    assert header[:3] == ["algorithm", "CR", "worst"] and header[-1] == "bound"
    for result in report["results"]:
        row = next(line for line in printed if line.startswith(result["algorithm"] + " "))
        cells = dict(zip(header, row.split(), strict=True))
        expected = {**result["sources"], "CR": result["competitive_ratio"]}
        expected["bound"] = result["upper_bound"]
        assert cells["worst"] == result["worst_source"]
        for column, figure in expected.items():
            assert cells[column] == format_ratio(figure), (result["algorithm"], column)
    assert any(r["upper_bound"] is not None for r in report["results"])  # a bound is shown
    notes = [line for line in printed if line.startswith("note:")]
    assert [n for n in notes if n.startswith("note: exact")] == [
        f"note: exact (every algorithm): {note}" for note in exact_notes
    ]
    assert len(notes) == len(set(notes))
    assert not any("below the lower bound" in note for note in notes)
    # a worst found under the certified lower bound on every algorithm is said to be short
    from advonline.evaluation import table

    lowest = min(r["competitive_ratio"] for r in report["results"])
    report["lower_bound"]["ratio"] = lowest * 1.001
    below = [r["algorithm"] for r in report["results"] if r["competitive_ratio"] == lowest]
    assert f"note: below the lower bound ({', '.join(below)}): the worst inputs found" in table(
        report
    )
