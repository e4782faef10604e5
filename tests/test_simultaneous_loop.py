"""The simultaneous loop (``[game] loop = "simultaneous"``, advonline/simultaneous_loop.py):
one-way trading trains against a live adversary network, is measured like any run, resumes
to the uninterrupted result, and its config refuses what the loop does not read."""

from __future__ import annotations

import json

import pytest

from advonline import cli, configs
from advonline.problems.one_way_trading.exact import optimal_curve
from advonline.train import train
from tests.reports import by_algorithm, certified, exact, figures, metrics_without_timings

SIMULTANEOUS = """
[problem]
name = "one-way-trading"

[setting]
low = 1.0
high = 10.0
rounds = 17
levels = 17

[algorithm]
hidden = 16

[adversary]
hidden = 32
batch = 32

[game]
loop = "simultaneous"
seed = 0
epochs = 3
replay_size = 64
replay_per_step = 4

[oracle]
epoch_steps = 60
chains = 16
search_steps = 32
candidates = 1
"""
BUDGET = ["--search-steps", "8", "--random-instances", "8", "--quiet", "--algorithm", "threshold"]


@pytest.mark.end_to_end
def test_the_simultaneous_loop_trains_an_interface_problem_and_resumes(tmp_path, capsys):
    config = tmp_path / "owt.toml"
    config.write_text(SIMULTANEOUS)
    whole = tmp_path / "whole"
    assert cli.main(["run", str(config), "--out", str(whole), *BUDGET]) == 0
    report = json.loads((whole / "evaluation.json").read_text())
    learned, bound = by_algorithm(report)["learned"], report["lower_bound"]["ratio"]
    # the delivered curve is certified (its ratio for real rates), and 180 steps against a
    # live adversary already bring it within 10% of the best curve on the grid (the uniform
    # start: 3.8), itself above the lower bound on every online algorithm
    best = optimal_curve(configs.load(config).setting)[1]
    assert not exact(learned) and bound < best <= certified(learned) <= 1.1 * best
    assert report["config"]["game"]["loop"] == "simultaneous"
    assert set(report["config"]["oracle"]) == set(configs.SIMULTANEOUS_ORACLE_KEYS)
    rows = metrics_without_timings(whole)
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert [row["step"] for row in rows] == ["60", "120", "180"]
    # the delivered figure never rises, and it is the lowest certificate measured
    certificates = [float(row["upper_bound"]) for row in rows]
    guarantees = [float(row["guarantee"]) for row in rows]
    assert guarantees == sorted(guarantees, reverse=True)
    assert guarantees[-1] == pytest.approx(min(certificates), rel=1e-6)
    assert certified(learned) == pytest.approx(min(certificates), rel=1e-4)
    # cut short after its first epoch's checkpoint, then resumed: the same run
    cut = tmp_path / "cut"
    parsed = configs.load(config)

    def stop_after_the_first_epoch(row: dict) -> None:
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(parsed, cut, report=stop_after_the_first_epoch)
    capsys.readouterr()
    assert cli.main(["run", str(config), "--out", str(cut), "--resume", *BUDGET]) == 0
    assert metrics_without_timings(cut) == rows
    resumed = json.loads((cut / "evaluation.json").read_text())
    assert figures(resumed) == figures(report)
    assert cli.main(["archive", str(cut)]) == 2
    assert "only the oracle loop keeps an archive" in capsys.readouterr().err


def test_each_loop_refuses_the_other_loops_keys(tmp_path, capsys):
    """The simultaneous loop refuses the oracle loop's archive keys, the oracle loop the
    step's keys and an ``[adversary]`` table unless its oracles train networks
    (``oracle.restarts``), whose batch ``oracle.adversary_batch`` sets."""
    config = tmp_path / "bad.toml"
    oracle = SIMULTANEOUS.replace('loop = "simultaneous"', 'loop = "oracle"')
    oracle = oracle.replace("replay_size = 64\nreplay_per_step = 4\n", "")
    for text, message in [
        (SIMULTANEOUS.replace("chains = 16", "chains = 16\narchive_size = 8"), "archive_size"),
        (SIMULTANEOUS.replace("batch = 32", "batch = 0"), "adversary.batch must be >= 1"),
        (SIMULTANEOUS.replace('"simultaneous"', '"both"'), "loop must be one of"),
        (oracle, "[adversary] applies to game.loop"),
        (
            oracle.replace("candidates = 1", "candidates = 1\nrestarts = 2"),
            "batch does not apply: oracle.adversary_batch sets it",
        ),
        (
            oracle.replace("[adversary]\nhidden = 32\nbatch = 32\n", "").replace(
                "epochs = 3", "epochs = 3\nreplay_size = 8"
            ),
            'replay_size applies to game.loop = "simultaneous" only',
        ),
    ]:
        config.write_text(text)
        assert cli.main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1
