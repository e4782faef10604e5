"""The main job (`advonline run`) end to end on a tiny config, and what it leaves: exported
policies (the network, and tables on request) that NumPy alone can load and that post what the
checkpoint posts, `evaluate --policy` measuring them like the checkpoint, the figures, and
one-line errors for bad policy files."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.image
import numpy as np
import pytest

from advonline import checksums, pipeline
from advonline.cli import main
from advonline.problems.posted_price.model import price_table
from advonline.problems.posted_price.policy_file import PolicyFileError, load
from tests.test_train import TINY_TOML

# whole runs of the tool and searches at the evaluator's full budget (pyproject's markers)
pytestmark = pytest.mark.end_to_end

FIGURES = ("ratio", "exploitability", "price-curve")
SHARED_FIGURES = ("learned-vs-baselines", "convergence")
SMALL_BUDGET = ["--adversary-steps", "3", "--random-instances", "8", "--family-members", "5"]
SMALL_BUDGET += ["--search-steps", "4"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run folder left by the main job on a tiny config (20 steps)."""
    root = tmp_path_factory.mktemp("main-job")
    config = root / "tiny.toml"
    config.write_text(TINY_TOML.format(epochs=4).replace("epoch_steps = 1", "epoch_steps = 5"))
    folder = root / "run"
    assert main(["run", str(config), "--out", str(folder), "--quiet", *SMALL_BUDGET]) == 0
    return folder


@pytest.fixture(scope="module")
def tables(finished) -> Path:
    """Version-1 tables of the run's two policies (``export --table``)."""
    folder = finished.parent / "tables"
    for name, flags in (("policy.json", []), ("policy-readout.json", ["--read-out"])):
        argv = ["export", "--checkpoint", str(finished), "--out", str(folder / name)]
        assert main([*argv, "--table", "--no-measure", *flags]) == 0
    return folder


def test_main_job_leaves_measurement_policies_and_figures(finished, capsys):
    evaluation = json.loads((finished / pipeline.EVALUATION_NAME).read_text())
    names = [r["algorithm"] for r in evaluation["results"]]
    assert names == [
        "learned",
        "learned-deterministic",
        "threshold",
        "exponential",
        "greedy",
        "fixed",
    ]
    assert evaluation["training_steps"] == 20
    for name in ("policy.json", "policy-readout.json"):
        provenance = load(finished / name).provenance
        assert provenance["training_steps"] == 20 and provenance["seed"] == 3
        measured = next(
            r for r in evaluation["results"] if r["algorithm"] == provenance["algorithm"]
        )
        assert provenance["measured"]["competitive_ratio"] == measured["competitive_ratio"]
    stems = [f"run-{figure}" for figure in FIGURES] + list(SHARED_FIGURES)
    for stem in stems:
        image = matplotlib.image.imread(finished / "figures" / f"{stem}.png")
        assert image.shape[0] > 200 and image.shape[1] > 200 and image.std() > 0
        assert (finished / "figures" / f"{stem}.pdf").read_bytes().startswith(b"%PDF")


def test_loader_runs_without_jax(finished):
    script = (
        "import sys, numpy as np\n"
        "from advonline.problems.posted_price.policy_file import load\n"
        f"policy = load({str(finished / 'policy.json')!r})\n"
        "y = np.array([[0.0], [0.3], [1.0]])\n"
        "prices = policy.prices(y, round=2)\n"
        "drawn = policy.sample_prices(y, np.random.default_rng(0), round=np.array([0, 1, 7]))\n"
        "atoms, probs = policy.distribution(y[0], round=0)\n"
        "assert prices.shape == drawn.shape == (3, 1) and probs.shape == (1, atoms.shape[1])\n"
        "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, 'jax was imported'\n"
        "print('ok', float(prices[0, 0]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def _tables(folder: Path):
    run = pipeline.open_run(folder)
    policies = run.policies()
    with jax.enable_x64(True):
        randomised = price_table(run.setting, policies["learned"], jnp.float64)
        readout = price_table(run.setting, policies["learned-deterministic"], jnp.float64)
    return run.setting, randomised, readout


@pytest.mark.parametrize("version", [2, 1])
def test_exported_policies_post_what_the_checkpoint_posts(finished, tables, version):
    setting, randomised, readout = _tables(finished)
    grid = np.arange(setting.grid_size + 1) / setting.grid_size
    folder = finished if version == 2 else tables
    randomised_file, readout_file = (
        load(folder / "policy.json"),
        load(folder / "policy-readout.json"),
    )
    assert randomised_file.version == readout_file.version == version
    for t in range(setting.rounds):
        rounds = np.full(grid.size, t)
        atoms, probs = randomised_file.distribution(grid[:, None], round=rounds)
        np.testing.assert_allclose(probs[:, 0], randomised.probs[t], atol=1e-6, rtol=0)
        np.testing.assert_allclose(atoms[0], randomised.prices[t, 0], atol=1e-6, rtol=0)
        prices = readout_file.prices(grid[:, None], round=rounds)[:, 0]
        np.testing.assert_allclose(prices, readout.prices[t, :, 0], atol=1e-6, rtol=0)
        # the randomised file's prices() is its median read-out: the read-out policy's prices
        median = randomised_file.prices(grid[:, None], round=rounds)[:, 0]
        np.testing.assert_allclose(median, readout.prices[t, :, 0], atol=1e-6, rtol=0)


def test_table_loader_interpolates_and_samples_the_distribution(tables):
    policy = load(tables / "policy.json")
    grid = policy.grid
    middle = (grid[1] + grid[2]) / 2
    _, both = policy.distribution(np.array([[grid[1]], [grid[2]], [middle]]), round=4)
    np.testing.assert_allclose(both[2], (both[0] + both[1]) / 2, atol=1e-12)
    atoms, probs = policy.distribution(np.array([middle]), round=4)
    drawn = policy.sample_prices(np.full((40_000, 1), middle), np.random.default_rng(1), round=4)
    frequency = (drawn[:, 0, None] == atoms[0][None, :]).mean(axis=0)
    np.testing.assert_allclose(frequency, probs[0], atol=0.015)
    with pytest.raises(ValueError, match="round"):
        policy.prices(np.array([0.5]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        policy.prices(np.array([1.5]), round=0)


def _ratios(capsys, argv: list[str]) -> dict:
    assert main([*argv, *SMALL_BUDGET, "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    return {r["algorithm"]: (r["competitive_ratio"], r["upper_bound"]) for r in results}


def test_evaluate_policy_measures_like_the_checkpoint(finished, tables, capsys):
    """The network files are the checkpoint's network (same figures to the last digit); the
    table posts the same on the grid (same figures up to float rounding)."""
    from_checkpoint = _ratios(capsys, ["evaluate", "--checkpoint", str(finished)])
    files = [finished / "policy.json", finished / "policy-readout.json", tables / "policy.json"]
    for path in files:
        from_file = _ratios(capsys, ["evaluate", "--policy", str(path)])
        ((algorithm, (ratio, bound)),) = from_file.items()
        np.testing.assert_allclose(ratio, from_checkpoint[algorithm][0], rtol=1e-6)
        if bound is not None:
            np.testing.assert_allclose(bound, from_checkpoint[algorithm][1], rtol=1e-6)


def test_a_policy_named_like_a_baseline_is_measured_beside_it(finished, tmp_path, capsys):
    document = json.loads((finished / "policy-readout.json").read_text())
    document["provenance"]["algorithm"] = "greedy"
    renamed = tmp_path / "greedy.json"
    renamed.write_text(json.dumps(checksums.signed(document)))
    measured = _ratios(capsys, ["evaluate", "--policy", str(renamed), "--algorithm", "greedy"])
    assert list(measured) == ["greedy (policy file)", "greedy"]
    from_checkpoint = _ratios(
        capsys, ["evaluate", "--policy", str(finished / "policy-readout.json")]
    )
    assert measured["greedy (policy file)"] == from_checkpoint["learned-deterministic"]


def test_export_never_overwrites(finished, tmp_path, capsys):
    target = finished / "policy.json"
    before = target.read_bytes()
    assert main(["export", "--checkpoint", str(finished), "--out", str(target)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "exists; not overwritten" in error[0]
    assert target.read_bytes() == before
    fresh = tmp_path / "sub" / "readout.json"
    assert (
        main(
            [
                "export",
                "--checkpoint",
                str(finished),
                "--out",
                str(fresh),
                "--read-out",
                "--no-measure",
            ]
        )
        == 0
    )
    assert load(fresh).kind == "deterministic" and load(fresh).provenance["measured"] is None


def _corrupt(document: dict, change) -> str:
    """``document`` edited by ``change`` and signed again, as a hand edit that kept the
    checksum right would be: the reader's own checks must still refuse it."""
    document = json.loads(json.dumps(document))
    change(document)
    return json.dumps(checksums.signed(document))


def _flip_digit(text: str) -> str:
    """``text`` with its first digit changed: still valid JSON, no longer what was written."""
    at = next(i for i, c in enumerate(text) if c.isdigit())
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


def _set_version(document):
    document["version"] = 3


def _set_format(document):
    document["format"] = "something.else"


def _set_shape(document):
    document["resources"][0]["prices"] = [[1.0, 2.0]]


def _first_price(value):
    def change(document):
        document["resources"][0]["prices"][0][0] = value

    return change


def _first_probability(document):
    document["resources"][0]["probabilities"][0][0][0] = 5.0


# case -> (text from (randomised document, read-out document), words the error must contain)
BAD_FILES = {
    "empty": (lambda d, r: "", "is empty"),
    "truncated": (lambda d, r: json.dumps(d)[:-40], "not valid JSON"),
    "wrong version": (lambda d, r: _corrupt(d, _set_version), "unsupported version 3"),
    "wrong format": (lambda d, r: _corrupt(d, _set_format), "format must be"),
    "wrong shape": (lambda d, r: _corrupt(r, _set_shape), "must have shape"),
    "NaN prices": (lambda d, r: _corrupt(r, _first_price(float("nan"))), "NaN"),
    "negative prices": (lambda d, r: _corrupt(r, _first_price(-1.0)), "negative prices"),
    "probabilities": (lambda d, r: _corrupt(d, _first_probability), "summing to 1"),
    "one digit changed": (
        lambda d, r: _flip_digit(json.dumps(d)),
        "is corrupted: checksum mismatch",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_policy_files_get_one_line_and_exit_2(tables, tmp_path, capsys, case):
    randomised = json.loads((tables / "policy.json").read_text())
    readout = json.loads((tables / "policy-readout.json").read_text())
    make, message = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_text(make(randomised, readout))
    with pytest.raises(PolicyFileError, match=message):
        load(path)
    assert main(["evaluate", "--policy", str(path)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert (
        len(error) == 1
        and error[0].startswith("advonline: error: policy file")
        and message in error[0]
    )


def test_plot_refuses_folders_it_cannot_draw_with_one_line(finished, tmp_path, capsys):
    bare = tmp_path / "checkpoint-only"
    bare.mkdir()
    (bare / "checkpoint.msgpack").write_bytes((finished / "checkpoint.msgpack").read_bytes())
    cases = {str(tmp_path / "missing"): "no run folder", str(bare): "no readable metrics.csv"}
    for folder, message in cases.items():
        figures = tmp_path / "figures"
        assert main(["plot", str(finished), folder, "--out", str(figures)]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and message in error[0]
        assert not figures.exists()  # checked before anything is drawn


def _copy_run(finished: Path, to: Path) -> Path:
    to.mkdir()
    for name in ("checkpoint.msgpack", "metrics.csv", pipeline.EVALUATION_NAME, ".advonline"):
        (to / name).write_bytes((finished / name).read_bytes())
    return to


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ("", "no rows to plot"),
        ("step,payoff\n", "no rows to plot"),
        ("step,payoff\n1,abc\n", "line 2 has a cell that is not a number"),
        ("step,payoff\n1,0.5,7\n", "different number of cells"),
        ("step,payoff\n,0.5\n", "rows without a step"),
    ],
)
def test_plot_refuses_a_broken_metrics_table_before_drawing(
    finished, tmp_path, capsys, metrics, message
):
    run = _copy_run(finished, tmp_path / "run")
    (run / "metrics.csv").write_text(metrics)
    figures = tmp_path / "figures"
    assert main(["plot", str(finished), str(run), "--out", str(figures)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and message in error[0]
    assert not figures.exists()


def test_a_stored_evaluation_that_is_not_this_runs_is_measured_again(finished, tmp_path):
    run_folder = _copy_run(finished, tmp_path / "run")
    run = pipeline.open_run(run_folder)
    assert pipeline.stored_evaluation(run) is not None  # the main job's own report
    stored = json.loads((run_folder / pipeline.EVALUATION_NAME).read_text())
    for broken in (
        {key: value for key, value in stored.items() if key != "results"},
        {**stored, "results": [{"algorithm": "learned"}]},
        {**stored, "results": "none"},
        {**stored, "results": [{**stored["results"][0], "competitive_ratio": "1.5"}]},
        {**stored, "results": [{**stored["results"][0], "competitive_ratio": -1.0}]},
        {**stored, "results": [{**stored["results"][0], "algorithm": None}]},
        {**stored, "budget": {"unknown": 1}},
        # a report of another setting, or of none
        {**stored, "setting": {**stored["setting"], "rounds": stored["setting"]["rounds"] + 1}},
        {**stored, "setting": None},
        {**stored, "reference": "1 + ln(U / L)"},
        {**stored, "reference": {**stored["reference"], "ratio": 1e308}},
        # an older evaluator's report: a budget without the local search's fields
        {
            **stored,
            "budget": {
                key: value
                for key, value in stored["budget"].items()
                if not key.startswith("search_")
            },
        },
        # a report in the older layout: the budget inside the setting
        {
            **{key: value for key, value in stored.items() if key != "budget"},
            "setting": {**stored["setting"], "budget": stored["budget"]},
        },
    ):
        (run_folder / pipeline.EVALUATION_NAME).write_text(json.dumps(broken))
        assert pipeline.stored_evaluation(run) is None


def test_plot_draws_again_into_its_own_folder_and_nowhere_else(finished, tmp_path, capsys):
    figures = tmp_path / "figures"
    assert main(["plot", str(finished), "--out", str(figures)]) == 0
    assert json.loads((figures / ".advonline").read_text())["kind"] == "figures"
    assert main(["plot", str(finished), "--out", str(figures)]) == 0  # its own: redrawn
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ratio.png").write_bytes(b"mine")
    capsys.readouterr()
    assert main(["plot", str(finished), "--out", str(tmp_path / "mine")]) == 2
    assert "not a folder advonline made" in capsys.readouterr().err
    assert (tmp_path / "mine" / "ratio.png").read_bytes() == b"mine"


def test_an_interrupted_main_job_resumes_keeping_what_it_wrote(finished, tmp_path, capsys):
    """``run --resume`` after a job stopped while exporting: training is done, the policy file
    written is kept as it is, the missing one is written, and the measurement is the same."""
    interrupted = tmp_path / "interrupted"
    shutil.copytree(finished, interrupted)
    for name in ("policy-readout.json", "evaluation.json"):
        (interrupted / name).unlink()
    kept = (interrupted / "policy.json").read_bytes()
    config = finished.parent / "tiny.toml"
    argv = ["run", str(config), "--out", str(interrupted), "--quiet", *SMALL_BUDGET]
    assert main(argv) == 2  # a folder that holds a run needs --resume
    assert "pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert (interrupted / "policy.json").read_bytes() == kept
    readout = load(interrupted / "policy-readout.json")
    assert readout.kind == load(finished / "policy-readout.json").kind == "deterministic"
    # measured again as the job measured it the first time (recorded in the kept file)
    first = load(interrupted / "policy.json").provenance["measured"]
    again = json.loads((interrupted / "evaluation.json").read_text())["results"][0]
    assert again["algorithm"] == "learned"
    assert again["competitive_ratio"] == first["competitive_ratio"]
    assert again["sources"] == first["sources"]
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace("seed = 3", "seed = 4"))
    capsys.readouterr()
    assert main(["run", str(other), "--out", str(interrupted), "--resume", "--quiet"]) == 2
    assert "the config differs" in capsys.readouterr().err


def test_evaluate_writes_nothing_into_a_run_another_process_holds(finished, tmp_path, capsys):
    """``evaluate --checkpoint`` of a run folder that another process holds (a run still
    training there) prints its table and stores nothing there."""
    run_folder = _copy_run(finished, tmp_path / "run")
    stored = (run_folder / pipeline.EVALUATION_NAME).read_bytes()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from advonline.folders import FolderLock\n"
            f"with FolderLock({str(run_folder)!r}):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = ["evaluate", "--checkpoint", str(run_folder), "--algorithm", "greedy"]
        assert main([*argv, *SMALL_BUDGET]) == 0
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    captured = capsys.readouterr()
    assert "greedy" in captured.out and "stored in" not in captured.out
    assert "the report is not stored" in captured.err and "in use by process" in captured.err
    assert (run_folder / pipeline.EVALUATION_NAME).read_bytes() == stored


@pytest.mark.parametrize("largest", [1e308, float("inf")])
def test_the_bars_figure_draws_a_ratio_at_any_size(tmp_path, largest):
    """A ratio near float64's largest, or infinite, is drawn as a hatched bar at the top of an
    axis with finite limits (no overflow warning, which the suite makes an error)."""
    from advonline import plots

    rows = [("setting", {"learned": 1.5, "threshold": largest})]
    written = plots.bars_figure(rows, tmp_path, "bars", "title", [{"learned": 2.0}])
    assert sorted(path.suffix for path in written) == [".pdf", ".png"]
