"""``advonline run`` beyond posted pricing: one-way trading trains from scratch, measures
beside its baselines, exports and plots, and resumes; a problem written outside the package,
or with only the required pieces, runs too; bad configs and flags get one line."""

from __future__ import annotations

import csv
import json
import shutil
import sys

import pytest

from advonline import checkpoint, checksums, cli, configs
from advonline.problems.one_way_trading.exact import optimal_curve
from advonline.problems.one_way_trading.model import Setting
from advonline.problems.one_way_trading.policy_file import load
from advonline.train import METRIC_FIELDS, train
from tests.reports import by_algorithm, certified, exact, figures, metrics_without_timings
from tests.test_inputs import tree_digest

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

[oracle]
epoch_steps = 100
worst_case_weight = 1.0
chains = 16
candidates = 1
search_steps = 64
probe_every = 0
certificate_instances = 1
"""


@pytest.mark.end_to_end
def test_run_trains_measures_exports_and_plots(tmp_path, capsys):
    config = tmp_path / "owt.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    args = ["run", str(config), "--out", str(out), "--search-steps", "32"]
    assert cli.main([*args, "--random-instances", "16"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "evaluation.json").read_text())
    learned = by_algorithm(report)["learned"]
    bound = report["lower_bound"]["ratio"]
    best = optimal_curve(configs.load(config).setting)[1]
    # the learned curve's certificate (its ratio for the setting's real rates) is above every
    # source's find, and far better than the naive baselines: within 5% of the best curve on
    # the grid over every horizon after 6 epochs, above the lower bound on every online
    # algorithm
    assert not exact(learned)
    assert 0.9 * certified(learned) <= learned["competitive_ratio"] <= certified(learned)
    assert bound < certified(learned) <= 1.05 * best
    assert certified(learned) < certified(by_algorithm(report)["reservation"])
    # the verdict judges certificate against certificate
    optimal = certified(by_algorithm(report)["optimal"])
    verdict = "beats optimal" if certified(learned) < optimal else "loses to optimal"
    assert verdict in printed
    assert "lower bound on every online algorithm" in printed
    _, curve = load(json.loads((out / "policy.json").read_text()))
    assert curve.fractions.shape == (17,)
    assert (out / "figures" / "convergence.png").is_file()
    assert (out / "figures" / "learned-vs-baselines.png").is_file()
    # a header and 7 measurements: the fresh curve's, then one after each of the 6 trainings,
    # in the columns of every run (posted pricing's too), with where each epoch's time went
    with open(out / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 7 and list(rows[0]) == list(METRIC_FIELDS)
    assert [row["epoch"] for row in rows] == [str(epoch) for epoch in range(7)]
    assert all(float(row["seconds_training"]) > 0 for row in rows[:-1])
    phases = report["phase_seconds"]  # summed into the report and printed, as for every run
    assert phases["seconds_training"] == pytest.approx(
        sum(float(row["seconds_training"]) for row in rows), abs=1e-2
    )
    assert "where the time went: training" in printed
    certified_rows = [row for row in rows if row["upper_bound"]]
    assert certified_rows and all(  # the guarantee is the best bound so far (float32)
        float(row["upper_bound"]) >= float(row["guarantee"]) * (1 - 1e-6) for row in certified_rows
    )


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
    config.write_text(TINY.replace("chains = 16", "chains = 16\nanchor = 1.0"))
    assert cli.main(["run", str(config), "--out", str(tmp_path / "d")]) == 2
    error = capsys.readouterr().err
    assert "[oracle]: anchor does not apply" in error and error.count("\n") == 1
    config.write_text(TINY.replace("chains = 16", "chains = 0"))
    assert cli.main(["run", str(config), "--out", str(tmp_path / "e")]) == 2
    assert "oracle.chains and search_steps must be >= 1" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in "abcde")


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
    assert cli.main(["train", str(config), "--out", str(checked), "--check"]) == 0
    assert "valid" in capsys.readouterr().out and not checked.exists()
    assert cli.main(["train", str(config), "--out", str(checked), "--processes", "2"]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not checked.exists()


@pytest.mark.end_to_end
def test_every_command_takes_a_run_of_the_interface(tmp_path, capsys):
    """evaluate, export, plot and archive on one-way trading: the run's policy file measured
    again on its own setting gives the run's figure; export writes the delivered curve
    again, never over a file; plot redraws the figures; archive lists the final archive's
    token sequences."""
    config = tmp_path / "owt.toml"
    config.write_text(TINY.replace("epochs = 6", "epochs = 1"))
    run = tmp_path / "run"
    budget = ["--search-steps", "8", "--random-instances", "8"]
    beside = ["--algorithm", "reservation"]  # the run measures the baselines it names
    assert cli.main(["run", str(config), "--out", str(run), "--quiet", *budget, *beside]) == 0
    assert capsys.readouterr().err == ""
    report = by_algorithm(json.loads((run / "evaluation.json").read_text()))
    assert set(report) == {"learned", "reservation"}
    measured = report["learned"]
    evaluate = ["evaluate", "--problem", "one-way-trading", *budget, "--json"]
    assert cli.main([*evaluate, "--policy", str(run / "policy.json")]) == 0
    again = by_algorithm(json.loads(capsys.readouterr().out))  # named by its provenance
    assert certified(again["learned"]) == pytest.approx(certified(measured), rel=1e-9)
    assert set(again) == {"learned"}  # baselines beside a policy only where named
    assert cli.main([*evaluate, "--checkpoint", str(run), "--algorithm", "reservation"]) == 0
    again = by_algorithm(json.loads(capsys.readouterr().out))
    assert set(again) == {"learned", "reservation"}
    assert certified(again["learned"]) == pytest.approx(certified(measured), rel=1e-9)
    # without a policy: the baselines on a setting given on the command line
    assert cli.main([*evaluate, "--setting", "high=100", "--setting", "levels=17"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["setting"]["high"] == 100.0 and report["setting"]["levels"] == 17
    assert set(by_algorithm(report)) == {"threshold", "optimal", "reservation", "all-at-once"}
    assert report["verdict"] is None and report["lower_bound"]["ratio"] > 1
    optimal = by_algorithm(report)["optimal"]
    setting = Setting(high=100.0, levels=17)  # the best curve on its grid, for real rates
    assert certified(optimal) <= optimal_curve(setting)[1] * 1.001  # at most every horizon's
    assert certified(optimal) > report["lower_bound"]["ratio"]
    for refused, message in [
        ([*evaluate, "--policy", str(run / "metrics.csv")], "is not valid JSON"),
        ([*evaluate, "--policy", str(run / "evaluation.json")], "not a one-way trading policy"),
        (
            ["evaluate", "--problem", "adwords", "--policy", str(run / "policy.json")],
            "is a policy of 'one-way-trading', not of 'adwords'",
        ),
        (
            [*evaluate, "--policy", str(run / "policy.json"), "--setting", "low=2"],
            "--setting conflicts with --policy",
        ),
        (["archive", str(run), "--traces", str(tmp_path / "traces")], "use --json"),
    ]:
        assert cli.main(refused) == 2
        assert message in capsys.readouterr().err
    copy = tmp_path / "copy.json"
    export = ["export", "--checkpoint", str(run), "--no-measure"]
    for refused, message in [  # what one-way trading does not deliver
        ("--read-out", "delivers no learned-deterministic policy"),
        ("--table", "writes no table policy files"),
    ]:
        assert cli.main([*export, "--out", str(copy), refused]) == 2
        assert message in capsys.readouterr().err and not copy.exists()
    assert cli.main([*export, "--out", str(copy)]) == 0
    assert "(learned, advonline-one-way-trading-curve, " in capsys.readouterr().out
    assert curve_of(copy) == curve_of(run / "policy.json")
    edited = tmp_path / "edited.json"  # the copy with one fraction changed by hand
    document = json.loads(copy.read_text())
    document["fractions"][0] += 1e-9
    edited.write_text(json.dumps(document))
    assert cli.main([*evaluate, "--policy", str(edited)]) == 2
    assert capsys.readouterr().err.strip().endswith("is corrupted: checksum mismatch")
    # a file that says nothing sensible is refused, checksum or not
    for change, message in [
        (lambda d: d["fractions"].__setitem__(-1, 1.5), "fractions must lie in [0, 1]"),
        (lambda d: d["fractions"].__setitem__(0, "0.1"), "fractions must be numbers"),
        (lambda d: d["rates"].__setitem__(0, True), "rates must be numbers"),  # not 1.0
        (lambda d: d["setting"].__setitem__("levels", True), "levels must be a whole number"),
        (lambda d: d.__setitem__("rates", d["rates"][::-1]), "rates must be finite and increasing"),
        (lambda d: d.pop("between"), "'between' must be 'linear'"),  # a held curve's file
    ]:
        document = json.loads(copy.read_text())
        for entry in (checksums.KEY, checksums.SCHEME_KEY):  # an unchecked file
            del document[entry]
        change(document)
        edited.write_text(json.dumps(document))
        assert cli.main([*evaluate, "--policy", str(edited)]) == 2
        err = capsys.readouterr().err  # a note that the file is unverified, then the refusal
        assert "Traceback" not in err and message in err.splitlines()[-1], err
    # a resumed run keeps its policy file only once it is verified
    kept = (run / "policy.json").read_bytes()
    (run / "policy.json").write_bytes(kept.replace(b"0.", b"1.", 1))  # one byte flipped
    assert cli.main(["run", str(config), "--out", str(run), "--resume", *budget]) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    (run / "policy.json").write_bytes(kept)
    (run / "figures").rename(tmp_path / "drawn")  # and a file where its figures go
    (run / "figures").write_text("mine")
    before = tree_digest(run)
    assert cli.main(["run", str(config), "--out", str(run), "--resume", *budget]) == 2
    assert "in the way of the run's figures" in capsys.readouterr().err
    assert tree_digest(run) == before  # refused before any work: nothing written
    (run / "figures").unlink()
    (tmp_path / "drawn").rename(run / "figures")
    before = copy.read_bytes()
    assert cli.main(["export", "--checkpoint", str(run), "--out", str(copy)]) == 2
    assert "exists" in capsys.readouterr().err and copy.read_bytes() == before
    figures = tmp_path / "figures"
    assert cli.main(["plot", str(run), "--out", str(figures)]) == 0
    assert (figures / "convergence.png").is_file()
    assert (figures / "learned-vs-baselines.pdf").is_file()
    capsys.readouterr()
    assert cli.main(["archive", str(run), "--top", "2"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert "instances after 2 epochs" in listing[0] and len(listing) == 1 + 1 + 2 + 1
    assert cli.main(["archive", str(run), "--json"]) == 0
    archived = json.loads(capsys.readouterr().out)["instances"]
    worst = max(row["ratio_delivered"] for row in archived)
    assert archived[0]["ratio_delivered"] == worst and len(archived[0]["tokens"]) == 17
    # the final archive's worst input against the delivered curve is what training recorded
    assert worst == pytest.approx(archive_source(run), rel=1e-6)
    # and the evaluator's search, whose chains also start from the hardest archived inputs and
    # never step down, finds at least as bad
    sources = by_algorithm(json.loads((run / "evaluation.json").read_text()))["learned"]["sources"]
    assert sources["adversary"] >= sources["archive"] * (1 - 1e-6)  # float32 rounding


def curve_of(path) -> tuple[list, list]:
    """The rates and fractions of a one-way trading policy file."""
    document = json.loads(path.read_text())
    return document["rates"], document["fractions"]


def archive_source(run) -> float:
    """The delivered policy's ratio on its run's final archive, as its report holds it."""
    report = json.loads((run / "evaluation.json").read_text())
    return by_algorithm(report)["learned"]["sources"]["archive"]


def interrupt_in_epoch(epoch: int):
    """A stand-in for writing the checkpoint that presses Ctrl-C once ``epoch`` are written."""
    save, written = checkpoint.save, []

    def saving(*args):
        save(*args)
        written.append(args)
        if len(written) == epoch:
            raise KeyboardInterrupt

    return saving


@pytest.mark.end_to_end
def test_a_run_cut_short_resumes_to_the_uninterrupted_result(tmp_path, capsys, monkeypatch):
    """Every epoch ends with a checkpoint: a run stopped right after its second one and
    resumed with ``run --resume`` ends with the same metrics and figures as a run in one go.
    A folder that holds a run is refused without --resume, and a resume with another config;
    ``train`` then ``run --resume`` measures a run and writes its policy file."""
    config = tmp_path / "owt.toml"
    config.write_text(TINY.replace("epochs = 6", "epochs = 3"))
    budget = ["--search-steps", "8", "--random-instances", "8", "--quiet"]
    budget += ["--algorithm", "reservation"]  # one baseline beside the learned curve
    whole = tmp_path / "whole"
    assert cli.main(["run", str(config), "--out", str(whole), *budget]) == 0
    cut = tmp_path / "cut"
    parsed = configs.load(config)

    def stop_after_the_second_epoch(row: dict) -> None:  # told after each epoch's checkpoint
        if row["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(parsed, cut, report=stop_after_the_second_epoch)
    assert len((cut / "metrics.csv").read_text().splitlines()) == 1 + 2
    capsys.readouterr()
    for refused, message in [
        (["run", str(config), "--out", str(cut), *budget], "pass --resume to continue it"),
        (["train", str(config), "--out", str(cut)], "pass --resume to continue it"),
        (["train", str(tmp_path / "new.toml"), "--out", str(cut), "--resume"], "differs"),
    ]:
        (tmp_path / "new.toml").write_text(TINY.replace("epochs = 6", "epochs = 4"))
        assert cli.main(refused) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1
    corrupted = tmp_path / "corrupted"  # one bit of a copy's checkpoint flipped
    shutil.copytree(cut, corrupted)
    damaged = bytearray((corrupted / "checkpoint.msgpack").read_bytes())
    damaged[-100] ^= 1
    (corrupted / "checkpoint.msgpack").write_bytes(bytes(damaged))
    assert cli.main(["run", str(config), "--out", str(corrupted), "--resume", *budget]) == 2
    assert "checksum mismatch; the previous checkpoint" in capsys.readouterr().err
    assert (corrupted / "checkpoint.msgpack").read_bytes() == bytes(damaged)
    assert cli.main(["run", str(config), "--out", str(cut), "--resume", *budget]) == 0
    assert figures(json.loads((cut / "evaluation.json").read_text())) == figures(
        json.loads((whole / "evaluation.json").read_text())
    )
    assert archive_source(cut) == archive_source(whole)

    without_seconds = metrics_without_timings
    assert without_seconds(cut) == without_seconds(whole) and len(without_seconds(cut)) == 4
    trained = tmp_path / "trained"
    with monkeypatch.context() as patched:  # Ctrl-C in the second epoch: one line, exit 130
        patched.setattr(checkpoint, "save", interrupt_in_epoch(2))
        assert cli.main(["train", str(config), "--out", str(trained), "--quiet"]) == 130
    error = capsys.readouterr().err
    assert "interrupted" in error and error.count("\n") == 1 and "Traceback" not in error
    assert cli.main(["train", str(config), "--out", str(trained), "--quiet", "--resume"]) == 0
    assert "trained 300 steps" in capsys.readouterr().out
    assert not (trained / "policy.json").exists() and not (trained / "evaluation.json").exists()
    assert cli.main(["run", str(config), "--out", str(trained), "--resume", *budget]) == 0
    assert without_seconds(trained) == without_seconds(whole)
    policy = (trained / "policy.json").read_bytes()
    assert cli.main(["run", str(config), "--out", str(trained), "--resume", *budget]) == 0
    assert (trained / "policy.json").read_bytes() == policy  # kept, never written over
    assert curve_of(trained / "policy.json") == curve_of(whole / "policy.json")


RENT_OR_BUY = """
[problem]
name = "rent-or-buy"

[setting]
buy = 4.0
rounds = 10

[game]
epochs = 8

[oracle]
epoch_steps = 100
worst_case_weight = 1.0
chains = 16
candidates = 1
search_steps = 32
probe_every = 0
"""

#: The same problem, two epochs: for the tests that exercise the commands, not the learning.
SHORT_RENT_OR_BUY = RENT_OR_BUY.replace("epochs = 8", "epochs = 2")


@pytest.mark.end_to_end
def test_a_problem_from_outside_the_package_runs(tmp_path, monkeypatch, capsys):
    """A researcher's own problem (tests/rent_or_buy.py), registered by module name, trains,
    measures beside its baselines, exports and plots with no change to advonline. Its learned
    buying curve, certified exactly, beats break-even's 2 - 1/buy and comes within 5% of the
    best randomised ratio."""
    from advonline import problems as registry

    monkeypatch.setitem(registry._MODULES, "rent-or-buy", "rent_or_buy")  # undone after the test
    registry.register("rent-or-buy", "rent_or_buy")
    from advonline import plots

    labels = []
    save = plots.save

    def saved(figure, out, stem):  # each figure's axis labels, then the figure as drawn
        labels.extend(axis.get_ylabel() for axis in figure.axes)
        return save(figure, out, stem)

    monkeypatch.setattr(plots, "save", saved)
    config = tmp_path / "rent.toml"
    config.write_text(RENT_OR_BUY)
    out = tmp_path / "run"
    budget = ["--search-steps", "16", "--random-instances", "16"]
    assert cli.main(["run", str(config), "--out", str(out), "--quiet", *budget]) == 0
    assert "measured competitive ratio E[cost] / OPT" in labels
    assert "competitive ratio E[cost] / OPT" in labels  # the ratio over training
    ratio_axes = [label for label in labels if "competitive ratio" in label]
    assert all(label.endswith("competitive ratio E[cost] / OPT") for label in ratio_axes)
    report = json.loads((out / "evaluation.json").read_text())
    algorithms = by_algorithm(report)
    assert certified(algorithms["break-even"]) == pytest.approx(2 - 1 / 4)
    assert certified(algorithms["never"]) == pytest.approx(10 / 4)
    assert exact(algorithms["learned"])
    assert certified(algorithms["learned"]) < certified(algorithms["break-even"])
    assert certified(algorithms["learned"]) <= 1.05 * report["reference"]["ratio"]
    assert (out / "figures" / "learned-vs-baselines.png").is_file()
    printed = capsys.readouterr().out
    assert "rent-or-buy" in printed
    # a cost problem's ratio is named as one in the report, the table and the listing
    assert report["ratio"] == "E[cost] / OPT" and "ratio: E[cost] / OPT" in printed
    assert cli.main(["archive", str(out), "--top", "1"]) == 0
    assert "ratios E[cost] / OPT, exact" in capsys.readouterr().out


def test_bad_budget_flags_get_one_line_before_any_work(tmp_path, capsys):
    config = tmp_path / "owt.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    for flag, value, message in [
        ("--search-steps", "-1", "--search-steps must be >= 0"),
        ("--random-instances", "0", "--random-instances must be >= 1"),
        ("--seed", "-3", "--seed must be a whole number"),
    ]:
        assert cli.main(["run", str(config), "--out", str(out), flag, value]) == 2
        assert message in capsys.readouterr().err
        evaluate = ["evaluate", "--problem", "one-way-trading", "--policy", "p.json"]
        assert cli.main([*evaluate, flag, value]) == 2
        assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.end_to_end
def test_a_problem_with_only_the_required_pieces_runs_and_says_what_it_lacks(
    tmp_path, monkeypatch, capsys
):
    """An outside problem without a certificate, lower bound, families, reference or policy
    files: ``run`` trains and measures it, says in one line that it exports nothing,
    ``evaluate`` measures its baselines, and ``export`` refuses in one line."""
    import dataclasses

    import rent_or_buy

    from advonline import problems as registry

    bare = dataclasses.replace(
        rent_or_buy.PROBLEM,
        certificate=None,
        lower_bound=None,
        families=None,
        export=None,
        load=None,
        reference=None,
        restore=None,
    )
    module = type(rent_or_buy)("bare_rent_or_buy")
    module.PROBLEM = bare
    monkeypatch.setitem(sys.modules, "bare_rent_or_buy", module)
    monkeypatch.setitem(registry._MODULES, "rent-or-buy", "bare_rent_or_buy")
    config = tmp_path / "rent.toml"
    config.write_text(SHORT_RENT_OR_BUY)
    out = tmp_path / "run"
    budget = ["--search-steps", "8", "--random-instances", "8"]
    assert cli.main(["run", str(config), "--out", str(out), *budget]) == 0
    printed = capsys.readouterr()
    report = json.loads((out / "evaluation.json").read_text())
    assert report["lower_bound"] is None and report["reference"] is None
    assert all(row["sources"]["exact"] is None for row in report["results"])
    assert all(row["sources"]["families"] is None for row in report["results"])
    assert "note: learned is not exported: rent-or-buy writes no policy files" in printed.err
    assert "exported policies: none" in printed.out
    assert "Traceback" not in printed.err and not (out / "policy.json").exists()
    target = tmp_path / "policy.json"
    assert cli.main(["export", "--checkpoint", str(out), "--out", str(target)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "advonline: error: rent-or-buy writes no policy files (it has no export)"
    assert not target.exists()
    argv = ["evaluate", "--problem", "rent-or-buy", "--quiet", "--json", *budget]
    assert cli.main(argv) == 0
    assert {r["algorithm"] for r in json.loads(capsys.readouterr().out)["results"]} == {
        "break-even",
        "never",
    }
    from advonline import checks

    setting = bare.setting(buy=4.0, rounds=10)
    assert all(result.passed for result in checks.check_problem(bare, setting))
