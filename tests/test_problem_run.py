"""``advonline run`` on a problem of the interface: one-way trading trains from scratch,
measures beside its baselines, exports and plots; bad configs get one line."""

from __future__ import annotations

import json

import pytest

from advonline import cli
from advonline.problems.one_way_trading.policy_file import load

TINY = """
[problem]
name = "one-way-trading"

[setting]
low = 1.0
high = 10.0
rounds = 17
levels = 17

[game]
seed = 0
epochs = 6
epoch_steps = 100

[oracle]
restarts = 16
search_steps = 64
"""


def test_run_trains_measures_exports_and_plots(tmp_path, capsys):
    config = tmp_path / "owt.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    args = ["run", str(config), "--out", str(out), "--search-steps", "32"]
    assert cli.main([*args, "--random-instances", "16"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "evaluation.json").read_text())
    learned = report["algorithms"]["learned"]
    bound = report["lower_bound"]["ratio"]
    # the learned curve is certified exactly, no source beats the certificate, and it is
    # far better than the naive baselines (within 5% of the setting's optimum after 6 epochs)
    assert learned["exact"] and learned["ratio"] == pytest.approx(learned["certified"])
    assert bound <= learned["certified"] <= 1.05 * bound
    assert learned["certified"] < report["algorithms"]["reservation"]["certified"]
    assert "verdict: learned" in printed and "lower bound on every online algorithm" in printed
    _, curve = load(json.loads((out / "policy.json").read_text()))
    assert curve.fractions.shape == (17,)
    assert (out / "figures" / "convergence.png").is_file()
    assert (out / "figures" / "learned-vs-baselines.png").is_file()
    assert len((out / "metrics.csv").read_text().splitlines()) == 7


def test_unknown_problem_and_bad_keys_get_one_line(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(TINY.replace('"one-way-trading"', '"knapsack"'))
    assert cli.main(["run", str(config), "--out", str(tmp_path / "a")]) == 2
    assert "unknown problem 'knapsack'" in capsys.readouterr().err
    config.write_text(TINY.replace("epochs = 6", "epoch = 6"))
    assert cli.main(["run", str(config), "--out", str(tmp_path / "b")]) == 2
    assert "unknown key 'epoch'" in capsys.readouterr().err
    config.write_text(TINY + "\n[algorithm]\nhiden = 8\n")
    assert cli.main(["run", str(config), "--out", str(tmp_path / "c")]) == 2
    assert "[algorithm]: unknown key 'hiden'" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in "abc")


def test_check_algorithm_and_devices_flags(tmp_path, capsys):
    config = tmp_path / "owt.toml"
    config.write_text(TINY)
    checked = tmp_path / "checked"
    assert cli.main(["run", str(config), "--out", str(checked), "--check"]) == 0
    assert "valid" in capsys.readouterr().out and not checked.exists()
    assert cli.main(["run", str(config), "--out", str(checked), "--algorithm", "greedy"]) == 2
    assert "unknown algorithm 'greedy' for one-way-trading" in capsys.readouterr().err
    assert cli.main(["run", str(config), "--out", str(checked), "--devices", "2"]) == 2
    assert "--devices" in capsys.readouterr().err and not checked.exists()
    out = tmp_path / "run"
    budget = ["--search-steps", "8", "--random-instances", "8"]
    quick = TINY.replace("epochs = 6", "epochs = 1")
    config.write_text(quick)
    args = ["run", str(config), "--out", str(out), "--quiet", "--algorithm", "reservation"]
    assert cli.main([*args, *budget]) == 0
    assert capsys.readouterr().err == ""
    report = json.loads((out / "evaluation.json").read_text())
    assert set(report["algorithms"]) == {"learned", "reservation"}
