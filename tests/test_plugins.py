"""A problem from an installed package: the registry reads the package's entry point
(``advonline.problems``), every command sees the problem, and a clash or a broken package
gets one line, naming the package, without touching the other problems."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advonline import cli
from advonline import problems as registry
from advonline.preflight import PreflightError
from tests.test_run_command import SHORT_RENT_OR_BUY

ROOT = Path(__file__).resolve().parents[1]


def install(site: Path, package: str, entries: dict[str, str], modules: dict[str, str]) -> None:
    """``package`` as an installer leaves it in ``site``: its modules (``{path: text}``) and a
    ``.dist-info`` folder whose ``entry_points.txt`` declares ``entries`` (``{name: value}``)."""
    for path, text in modules.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    declared = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{declared}")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on the import path, read afresh by the registry (its own reading of the
    installed packages is put back after the test)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(registry, "_plugins", None)
    return folder


@pytest.mark.end_to_end
def test_an_installed_problem_runs_from_the_plain_command_line(tmp_path, site):
    """A package that declares rent or buy (tests/rent_or_buy.py) under the entry point, and
    nothing else: ``advonline run`` in a fresh process trains it, measures it beside its
    baselines and exports it, and ``evaluate --checkpoint`` reads the run without
    ``--problem``."""
    module = (ROOT / "tests" / "rent_or_buy.py").read_text()
    loader = (ROOT / "tests" / "rent_or_buy_file.py").read_text()
    files = {
        "rentorbuy/__init__.py": "",
        "rentorbuy/problem.py": module,
        "rent_or_buy_file.py": loader,
    }
    install(site, "rentorbuy", {"rent-or-buy": "rentorbuy.problem"}, files)
    config = tmp_path / "rent.toml"
    config.write_text(SHORT_RENT_OR_BUY)
    out = tmp_path / "run"
    environment = {**os.environ, "PYTHONPATH": str(site)}
    budget = ["--search-steps", "8", "--random-instances", "8", "--adversary-steps", "2"]
    command = [sys.executable, "-m", "advonline", "run", str(config), "--out", str(out)]
    finished = subprocess.run(
        [*command, "--quiet", *budget], cwd=tmp_path, env=environment, capture_output=True
    )
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    report = json.loads((out / "evaluation.json").read_text())
    assert report["setting"]["problem"] == "rent-or-buy"
    rows = {row["algorithm"]: row for row in report["results"]}
    assert set(rows) == {"learned", "break-even", "never"}
    assert rows["break-even"]["sources"]["exact"] == pytest.approx(2 - 1 / 4)
    assert (out / "policy.json").is_file()
    read = [*command[:3], "evaluate", "--checkpoint", str(out), "--json", "--quiet", *budget]
    again = subprocess.run(read, cwd=tmp_path, env=environment, capture_output=True)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert json.loads(again.stdout)["setting"]["problem"] == "rent-or-buy"
    check = [*command[:3], "check", "rent-or-buy", "--setting", "buy=4", "--setting", "rounds=10"]
    checked = subprocess.run(check, cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
    assert checked.stdout.strip().endswith("all checks passed")


def test_the_checks_catch_a_certificate_that_claims_too_much(capsys, monkeypatch):
    """``advonline check`` fails, with status 1 and the check named, a problem whose
    certificates are half what its inputs reach; the other checks still run and pass."""
    import dataclasses

    import rent_or_buy

    from advonline.problem import Certificate

    def halved(setting, policy):
        found = rent_or_buy.certificate(setting, policy)
        return Certificate(found.ratio / 2, found.exact, found.worst)

    wrong = dataclasses.replace(rent_or_buy.PROBLEM, certificate=halved)
    monkeypatch.setattr(cli, "_problem", lambda name: wrong)
    assert cli.main(["check", "rent-or-buy"]) == 1
    printed = capsys.readouterr().out
    assert "certificates  FAIL  CheckFailed: break-even: a search found" in printed
    assert printed.count("pass ") == 5 and printed.strip().endswith("failed: certificates")


@pytest.mark.parametrize(
    "refusal",
    [PreflightError("the table would take 720 GB: lower the setting's levels"), MemoryError()],
)
def test_a_check_that_does_not_fit_in_memory_is_skipped_not_failed(capsys, monkeypatch, refusal):
    """A check whose arrays the pre-flight refuses, or whose memory runs out part way, says
    nothing about the problem: it is marked ``skip``, the others still run and pass, and the
    command ends with one line and status 2, not a failure (status 1)."""
    import dataclasses

    import rent_or_buy

    def too_large(setting, policy):
        raise refusal

    wrong = dataclasses.replace(rent_or_buy.PROBLEM, certificate=too_large)
    monkeypatch.setattr(cli, "_problem", lambda name: wrong)
    assert cli.main(["check", "rent-or-buy", "--setting", "buy=4"]) == 2
    captured = capsys.readouterr()
    assert "certificates  skip  not run: " in captured.out
    assert captured.out.count("pass ") == 5 and "FAIL" not in captured.out
    assert captured.err.strip().splitlines() == [
        "advonline: error: not checked, the setting does not fit in memory here: certificates; "
        "lower the setting's sizes"
    ]


def test_a_memory_estimate_that_crashes_refuses_no_check(capsys, monkeypatch):
    """The checks' pre-flight runs the problem's own estimate; where that code crashes, it
    refuses nothing, and the checks run and report on the problem as they find it."""
    import dataclasses

    import rent_or_buy

    def crashing(setting, budget):
        raise RuntimeError("an estimate with a bug")

    odd = dataclasses.replace(rent_or_buy.PROBLEM, evaluation_needs=crashing)
    monkeypatch.setattr(cli, "_problem", lambda name: odd)
    assert cli.main(["check", "rent-or-buy", "--setting", "buy=4"]) == 0
    assert capsys.readouterr().out.count("pass ") == 6


def test_clashes_and_broken_packages_get_one_line_each(site, capsys):
    install(site, "clashing", {"adwords": "clashing_problem"}, {"clashing_problem.py": ""})
    for twin in ("twin-a", "twin-b"):
        install(site, twin, {"twin": "twin_problem"}, {"twin_problem.py": ""})
    broken = "raise ImportError('needs a library that is not here')\n"
    install(site, "broken", {"broken": "broken_problem"}, {"broken_problem.py": broken})
    install(site, "odd", {"odd": "odd_problem:VALUE"}, {"odd_problem.py": "VALUE = 3\n"})
    misnamed = "from advonline.problems.adwords.problem import PROBLEM\n"
    install(site, "misnamed", {"other-name": "misnamed_problem"}, {"misnamed_problem.py": misnamed})

    with pytest.warns(registry.PluginNote) as notes:
        known = registry.names()
    said = sorted(str(note.message) for note in notes)
    assert said == [
        "problem 'adwords' of package clashing 0.1 is ignored: a built-in problem has that name",
        "problem 'twin' is declared by package twin-a 0.1 and package twin-b 0.1; both are ignored",
    ]
    assert known.count("adwords") == 1 and "twin" not in known
    assert {"broken", "odd", "other-name"} <= set(known)
    assert registry.get("adwords").name == "adwords"  # the built-in one, untouched
    for name, message in [
        ("broken", "package broken 0.1 cannot be loaded from 'broken_problem': ImportError"),
        ("odd", "'odd_problem:VALUE' gives a 'int' object, not an advonline.problem.Problem"),
        ("other-name", "its Problem is named 'adwords'"),
    ]:
        with pytest.raises(registry.PluginError, match=message):
            registry.get(name)

    registry._plugins = None  # read again, as a fresh process would
    assert cli.main(["evaluate", "--problem", "broken"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in "".join(lines)
    assert lines[0].startswith("advonline: note: problem 'adwords' of package clashing 0.1")
    assert lines[2].startswith("advonline: error: problem 'broken' of package broken 0.1")
