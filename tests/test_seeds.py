"""``advonline run CONFIG --seeds``: several seeds in one process, a run folder each, and a
summary of every figure over them."""

from __future__ import annotations

import csv
import json
import statistics
import threading
import time

import pytest

from advonline import cli, folders
from advonline.ratio import format_ratio
from advonline.seeds import MOST_SEEDS, Stopped, concurrently, parse_seeds, spread
from tests.test_oracle_loop import TINY_ORACLE_TOML

BUDGET = ["--search-steps", "4", "--random-instances", "8", "--adversary-steps", "2"]
CONFIG = "experiments/configs/ski-b10.toml"


def test_seed_lists_read_and_bad_ones_refused():
    assert parse_seeds("0-4") == (0, 1, 2, 3, 4)
    assert parse_seeds("0,2,5") == (0, 2, 5)
    assert parse_seeds("0-2, 7") == (0, 1, 2, 7)
    assert len(parse_seeds(f"0-{MOST_SEEDS - 1}")) == MOST_SEEDS
    for bad in (
        "",
        "a",
        "3-1",
        "-1",
        "0,0",
        "1-2,2",
        f"0-{MOST_SEEDS}",
        "0-99999999999",
        "4294967296",
    ):
        with pytest.raises(ValueError):
            parse_seeds(bad)
    # thousands of digits are refused as a list that is not one, quoted by start and length
    with pytest.raises(ValueError, match=r"got '9{39}\.\.\. \(5002 characters\)$"):
        parse_seeds("9" * 5000)


def test_a_figure_over_seeds_is_its_median_min_and_max_in_seed_order():
    """Median, not mean: one seed far off moves the mean, not the median."""
    assert spread([2.0, 9.0, 1.5]) == {
        "median": 2.0,
        "min": 1.5,
        "max": 9.0,
        "by_seed": [2.0, 9.0, 1.5],
    }
    assert spread([1.0, 3.0, 2.0, 8.0])["median"] == 2.5  # an even count: the middle two


@pytest.mark.end_to_end
def test_several_seeds_run_in_one_process_and_are_summarised(tmp_path, capsys):
    out = tmp_path / "runs"
    first = ["run", CONFIG, "--seeds", "0-1", "--concurrent", "2", "--out", str(out), "--quiet"]
    assert cli.main([*first, *BUDGET]) == 0  # both seeds train at once, then are measured
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and "over seeds 0, 1" in printed
    # the summary says what it was measured on, as every table does
    assert "setting: ski-rental buy=10, rounds=30\nbudget: fresh adversary 2 steps" in printed
    learned, rows = [], []
    for seed in (0, 1):
        report = json.loads((out / f"seed{seed}" / "evaluation.json").read_text())
        assert report["config"]["game"]["seed"] == seed
        rows.append({r["algorithm"]: r for r in report["results"]})
        learned.append(rows[-1]["learned"]["competitive_ratio"])
    # the baselines, which do not depend on the seed, are measured once and reported by both
    assert (
        set(rows[1])
        == set(rows[0])
        == {"learned", "break-even", "randomised", "never", "buy-at-once"}
    )
    for name in ("break-even", "randomised", "never", "buy-at-once"):
        assert rows[1][name]["competitive_ratio"] == rows[0][name]["competitive_ratio"]
        assert rows[0][name]["seconds"] and not rows[1][name]["seconds"]
    figure = summary["algorithms"]["learned"]["competitive_ratio"]
    assert figure["by_seed"] == learned and figure["median"] == statistics.median(learned)
    assert learned[0] != learned[1]  # two seeds, two runs
    low, high = format_ratio(min(learned)), format_ratio(max(learned))
    assert f"{format_ratio(figure['median'])} [{low}, {high}]" in printed
    # the same folder again: refused in one line without --resume, nothing touched
    before = (out / "summary.json").read_bytes()
    again = ["run", CONFIG, "--seeds", "0-2", "--out", str(out), "--quiet", *BUDGET]
    assert cli.main(again) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert (out / "summary.json").read_bytes() == before and not (out / "seed2").exists()
    # with --resume the kept seeds continue from their checkpoints and seed 2 starts
    assert cli.main([*again, "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == [0, 1, 2]
    assert summary["algorithms"]["learned"]["competitive_ratio"]["by_seed"][:2] == learned


@pytest.mark.parametrize("seeds", ["x", "2-1"])
def test_a_bad_seed_list_gets_one_line_and_no_folder(tmp_path, capsys, seeds):
    out = tmp_path / "runs"
    assert cli.main(["run", CONFIG, "--seeds", seeds, "--out", str(out), *BUDGET]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert not out.exists()


def test_a_folder_of_seeds_is_the_tools_own_and_named_as_such(tmp_path, capsys):
    """``--seeds`` writes only into a new folder or one the tool marked as several seeds'
    runs, and a command that reads one run, given that folder, names the runs in it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    argv = ["run", CONFIG, "--seeds", "0-1", "--out", str(mine), "--check"]
    assert cli.main(argv) == 2
    assert "not a folder advonline made" in capsys.readouterr().err
    assert sorted(path.name for path in mine.iterdir()) == ["notes.txt"]
    several = tmp_path / "several"
    folders.claim(several, "seeds", {"seeds": [0, 1]})
    (several / "seed0").mkdir()
    (several / "seed1").mkdir()
    for command in (["evaluate", "--checkpoint"], ["archive"], ["export", "--checkpoint"]):
        extra = ["--out", str(tmp_path / "policy.json")] if command[0] == "export" else []
        assert cli.main([*command, str(several), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds the runs of several seeds (seed0, seed1)" in err


@pytest.mark.end_to_end
def test_train_seeds_summarises_the_last_epochs_and_run_resume_measures_them(tmp_path, capsys):
    out = tmp_path / "trained"
    assert cli.main(["train", CONFIG, "--seeds", "0-1", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and "over seeds 0, 1" in printed
    assert "setting: ski-rental buy=10, rounds=30\nover seeds 0, 1" in printed
    guarantees = []
    for seed in (0, 1):
        rows = _metrics(out / f"seed{seed}")
        assert json.loads((out / f"seed{seed}" / "config.json").read_text())["game"]["seed"] == seed
        guarantees.append(float(rows[-1]["guarantee"]))
    figure = summary["trained"]["guarantee"]
    assert figure["by_seed"] == guarantees and figure["median"] == statistics.median(guarantees)
    assert "step" not in summary["trained"] and "wall_seconds" in summary["trained"]
    # the same folder again: refused in one line, nothing touched
    before = (out / "summary.json").read_bytes()
    assert cli.main(["train", CONFIG, "--seeds", "0-1", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert (out / "summary.json").read_bytes() == before
    # run --seeds --resume measures the trained seeds without training them further
    measure = ["run", CONFIG, "--seeds", "0-1", "--out", str(out), "--resume", "--quiet", *BUDGET]
    assert cli.main(measure) == 0
    for seed in (0, 1):
        report = json.loads((out / f"seed{seed}" / "evaluation.json").read_text())
        rows = _metrics(out / f"seed{seed}")
        assert float(rows[-1]["guarantee"]) == guarantees[seed]
        assert report["results"][0]["algorithm"] == "learned"
    assert "algorithms" in json.loads((out / "summary.json").read_text())


def _metrics(folder) -> list[dict]:
    with (folder / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.end_to_end
def test_seeds_trained_at_once_give_the_figures_they_give_in_turn(tmp_path, capsys):
    config = tmp_path / "tiny-oracle.toml"
    config.write_text(TINY_ORACLE_TOML.format(epochs=3))
    rows = {}
    for at_once in ("1", "3"):
        out = tmp_path / f"at-once-{at_once}"
        command = ["train", str(config), "--seeds", "0-2", "--out", str(out), "--quiet"]
        assert cli.main([*command, "--concurrent", at_once]) == 0
        rows[at_once] = [_figures(_metrics(out / f"seed{seed}")) for seed in (0, 1, 2)]
    capsys.readouterr()
    assert rows["3"] == rows["1"]  # every figure of every epoch, to the last digit
    assert rows["1"][0] != rows["1"][1]  # three seeds, three runs
    # a bad count, or --concurrent without --seeds: one line, nothing written
    for bad in (["--seeds", "0-1", "--concurrent", "0"], ["--concurrent", "2"]):
        out = tmp_path / "refused"
        assert cli.main(["train", str(config), "--out", str(out), *bad]) == 2
        assert capsys.readouterr().err.strip().count("\n") == 0
        assert not out.exists()


def test_concurrently_keeps_the_order_and_raises_the_first_error():
    assert concurrently(lambda n: n * n, [3, 1, 2], at_once=3) == [9, 1, 4]

    def fails_on_two(n):
        if n == 2:
            raise ValueError("two")
        return n

    with pytest.raises(ValueError, match="two"):
        concurrently(fails_on_two, [1, 2, 3], at_once=2)


def test_a_failure_stops_the_entries_running_beside_it():
    stop, stopped = threading.Event(), []

    def work(n):
        if n == 0:
            time.sleep(0.2)  # the other entry is running by now
            raise ValueError("zero")
        for _ in range(1000):  # ten seconds, unless stopped
            if stop.is_set():
                stopped.append(n)
                raise Stopped("stopped")
            time.sleep(0.01)
        return n

    with pytest.raises(ValueError, match="zero"):  # the failure, not the stop it caused
        concurrently(work, [0, 1], at_once=2, stop=stop)
    assert stopped == [1]  # entry 1 ended at its next check, not after its ten seconds


def _figures(rows: list[dict]) -> list[dict]:
    """The metrics rows without the columns that time the run."""
    return [
        {k: v for k, v in row.items() if "seconds" not in k and k != "steps_per_second"}
        for row in rows
    ]
