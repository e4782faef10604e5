"""`advonline train`: checkpoints survive SIGKILL and resume to the same parameters; run folders
are never overwritten; bad configs and checkpoints get one line and exit 2; `evaluate
--checkpoint` measures the learned policies beside the baselines."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import serialization

from advonline import checkpoint, checksums, configs, oracle_loop
from advonline.cli import main
from advonline.simultaneous import delivered_params
from advonline.train import train

TINY_TOML = """
[setting]
low = 1.0
high = 4.0
rounds = 8
max_demand = 0.25

[algorithm]
price_atoms = 4
hidden = 8
layers = 1
learning_rate = 0.003

[adversary]
density_levels = 4
hidden = 8
batch = 8

[game]
loop = "simultaneous"
temperature = 0.02
epochs = {epochs}
replay_size = 8
replay_per_step = 2
seed = 3

[oracle]
epoch_steps = 1
restarts = 1
adversary_steps = 2
adversary_batch = 8
chains = 2
candidates = 4
search_steps = 2
"""


def _config(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / f"tiny-{steps}.toml"
    path.write_text(TINY_TOML.format(epochs=steps))  # epoch_steps = 1: one step an epoch
    return path


def _params(folder: Path) -> list[np.ndarray]:
    state, _, _ = checkpoint.load(folder)
    return [np.asarray(leaf) for leaf in jax.tree.leaves(state.algorithm)]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advonline", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.slow  # 400 steps three times and two CLI processes; the oracle loop's resume test
# (tests/test_oracle_loop.py) stays in the default run
def test_killed_run_resumes_to_the_same_parameters(tmp_path):
    steps = 400
    config_path = _config(tmp_path, steps)
    text = config_path.read_text().replace("epoch_steps = 1", "epoch_steps = 10")
    config_path.write_text(text.replace(f"epochs = {steps}", f"epochs = {steps // 10}"))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    train(configs.load(config_path), straight)

    command = [sys.executable, "-m", "advonline", "train", str(config_path)]
    process = subprocess.Popen([*command, "--out", str(killed), "--quiet"])
    metrics = killed / "metrics.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) > 4:
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    stopped_at = int(checkpoint.load(killed)[0].step)
    assert 0 < stopped_at < steps

    resumed = subprocess.run([*command, "--out", str(killed), "--resume", "--quiet"], check=False)
    assert resumed.returncode == 0
    for want, got in zip(_params(straight), _params(killed), strict=True):
        np.testing.assert_array_equal(got, want)
    with open(metrics, newline="") as handle:
        logged = [int(row["step"]) for row in csv.DictReader(handle)]
    assert logged == list(range(1, steps + 1))


def test_a_used_folder_is_not_overwritten(tmp_path, capsys):
    config_path = _config(tmp_path, 2)
    out = tmp_path / "run"
    assert main(["train", str(config_path), "--out", str(out), "--quiet"]) == 0
    before = (out / checkpoint.CHECKPOINT_NAME).read_bytes()
    capsys.readouterr()
    assert main(["train", str(config_path), "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "already holds a run" in error[0]
    assert (out / checkpoint.CHECKPOINT_NAME).read_bytes() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "has no checksum: not a checkpoint of this version"),
        ("garbage", "has no checksum: not a checkpoint of this version"),
    ],
)
def test_a_corrupt_checkpoint_gets_one_line(tmp_path, content, message):
    folder = tmp_path / "broken"
    folder.mkdir()
    path = folder / checkpoint.CHECKPOINT_NAME
    path.write_text(content)
    result = _cli("evaluate", "--checkpoint", str(folder))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert path.read_text() == content  # never deleted or rewritten


def test_a_bad_config_gets_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[game]\nepochs = -3\n")
    result = _cli("train", str(bad), "--out", str(tmp_path / "never"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("advonline: error:")
    assert "game.epochs must be >= 1" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "never").exists()
    missing = _cli("train", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "x"))
    assert missing.returncode == 2 and "missing.toml: no such file" in missing.stderr


@pytest.mark.end_to_end
def test_evaluate_checkpoint_measures_learned_beside_baselines(tmp_path, capsys):
    config_path = _config(tmp_path, 3)
    out = tmp_path / "run"
    assert main(["train", str(config_path), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    argv = ["evaluate", "--checkpoint", str(out), "--algorithm", "threshold", "--json"]
    # the budget of the main-job tests (tests/test_run_outputs.py): their programs are reused
    budget = ["--adversary-steps", "3", "--random-instances", "8", "--family-members", "5"]
    budget += ["--search-steps", "4"]
    assert main([*argv, *budget]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["setting"]["rounds"] == 8 and report["setting"]["high"] == 4.0
    names = [r["algorithm"] for r in report["results"]]
    assert names == ["learned", "learned-deterministic", "threshold"]
    for result in report["results"]:
        kept = {"archive"} if result["algorithm"] == "learned" else set()  # the run's replay
        assert set(result["sources"]) == {"exact", "adversary", "families", "random", *kept}
        assert result["competitive_ratio"] == max(
            v for v in result["sources"].values() if v is not None
        )
        assert result["competitive_ratio"] >= 1
    learned = report["results"][0]
    # randomised: every source is an instance an oblivious adversary writes (a lower bound on
    # the CR) and the DP bounds the CR from above, so the two bracket it
    assert learned["sources"]["exact"] is None
    assert learned["upper_bound"] >= learned["competitive_ratio"] * (1 - 1e-9)
    assert report["results"][1]["upper_bound"] is None  # deterministic: exact is the CR
    assert main(["evaluate", "--checkpoint", str(out), "--setting", "high=5"]) == 2
    assert "conflicts with --checkpoint" in capsys.readouterr().err


def test_the_run_delivers_the_measured_iterate_with_the_lowest_bound(tmp_path):
    """The simultaneous loop (K = 1) certifies the network after every epoch and keeps, and
    delivers, the measured parameters with the lowest DP upper bound: the same parameters
    as a run of the same seed stopped at that step. A ``[log]`` table is refused."""

    def swinging_config(steps: int) -> configs.RunConfig:
        data = configs.load(_config(tmp_path, steps)).to_tables()
        data["algorithm"]["learning_rate"] = 0.1  # large enough that the bound swings
        return configs.from_tables(data)

    steps = 12
    state = train(swinging_config(steps), tmp_path / "full")
    with open(tmp_path / "full" / "metrics.csv", newline="") as handle:
        bounds = [float(row["upper_bound"]) for row in csv.DictReader(handle)]
    best_step = int(np.argmin(bounds)) + 1
    assert len(set(bounds)) > 1 and best_step < steps  # a real choice, not the last iterate
    assert float(state.best_score) == pytest.approx(min(bounds), rel=1e-6)

    game = swinging_config(steps).build_game()
    delivered = delivered_params(game, checkpoint.load(tmp_path / "full")[0])
    train(swinging_config(best_step), tmp_path / "stopped")  # its best is its last step
    stopped = checkpoint.load(tmp_path / "stopped")[0]
    assert delivered_params(game, stopped) is stopped.best_algorithm
    for want, got in zip(
        jax.tree.leaves(stopped.algorithm), jax.tree.leaves(delivered), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(configs.ConfigError, match=r"unknown section \[log\]"):
        configs.from_tables({**swinging_config(steps).to_tables(), "log": {"every": 1}})


def test_a_checkpoint_of_another_layout_is_refused_in_one_line(tmp_path):
    """A checkpoint whose state lacks a field of the current layout (as one written before
    the state kept a best iterate) is refused with the field named, never half-loaded."""
    folder = tmp_path / "run"
    train(configs.load(_config(tmp_path, 2)), folder)
    path = checkpoint.checkpoint_path(folder)
    payload = checksums.unframed(path.read_bytes(), "", ValueError)
    record = serialization.msgpack_restore(payload)
    del record["state"]["best_algorithm"], record["state"]["best_score"]
    path.write_bytes(checksums.framed(serialization.msgpack_serialize(record)))
    with pytest.raises(checkpoint.CheckpointError, match="not a readable.*best_algorithm"):
        checkpoint.load(folder)


def test_a_checkpoint_of_another_version_says_so_without_library_text(tmp_path):
    """A checkpoint whose stored config this version does not read (a ``[game] steps`` key)
    names the key; one whose payload is not msgpack says no more than that."""
    folder = tmp_path / "run"
    train(configs.load(_config(tmp_path, 2)), folder)
    path = checkpoint.checkpoint_path(folder)
    payload = checksums.unframed(path.read_bytes(), "", ValueError)
    record = serialization.msgpack_restore(payload)
    stored = json.loads(record["meta"]["config"])
    stored["game"]["steps"] = 2
    record["meta"]["config"] = json.dumps(stored)
    path.write_bytes(checksums.framed(serialization.msgpack_serialize(record)))
    another_version = "another version.*steps is not a .game. key"
    with pytest.raises(checkpoint.CheckpointError, match=another_version):
        checkpoint.load(folder)
    path.write_bytes(checksums.framed(b"\xc1 not msgpack"))
    with pytest.raises(checkpoint.CheckpointError) as refused:
        checkpoint.load(folder)
    assert str(refused.value) == f"{path} is not a readable advonline checkpoint"


class _Stopped(Exception):
    pass


def test_a_resume_drops_rows_after_the_checkpoint_and_a_row_cut_short(tmp_path, monkeypatch):
    config = configs.load(_config(tmp_path, 6))
    folder = tmp_path / "run"
    save = checkpoint.save

    def stop_before_the_third_checkpoint(folder, state, *args) -> None:
        if int(state.step) == 3:  # a kill after the row of step 3, before its checkpoint
            raise _Stopped
        save(folder, state, *args)

    with monkeypatch.context() as patched, pytest.raises(_Stopped):
        patched.setattr(checkpoint, "save", stop_before_the_third_checkpoint)
        train(config, folder)
    assert int(checkpoint.load(folder)[0].step) == 2  # rows 1-3 written, checkpoint at 2
    with open(folder / "metrics.csv", "a") as handle:
        handle.write("4,0.5")  # a kill in the middle of writing a row
    train(config, folder, resume=True)
    with open(folder / "metrics.csv", newline="") as handle:
        logged = [int(row["step"]) for row in csv.DictReader(handle)]
    assert logged == list(range(1, 7))


@pytest.mark.parametrize("loop", ["simultaneous", "oracle"])
def test_a_run_whose_network_stops_being_finite_ends_in_one_line(tmp_path, capsys, loop):
    """Parameters that turn NaN after step 2 (as too large a learning rate makes them) end the
    run with one line and exit 2: neither measured nor saved, the checkpoint of step 2 kept."""
    from tests.test_oracle_loop import TINY_ORACLE_TOML

    path = tmp_path / "tiny.toml"
    path.write_text((TINY_TOML if loop == "simultaneous" else TINY_ORACLE_TOML).format(epochs=6))
    game_class = type(configs.load(path).build_game())
    step_function, train_epoch = game_class.step_function, oracle_loop.train_epoch

    def poisoned(state):
        if int(state.step) <= 2:
            return state
        return state.replace(algorithm=jax.tree.map(lambda x: x * np.nan, state.algorithm))

    def poisoned_step(game):
        step = step_function(game)

        def stepped(game, state):
            state, metrics = step(game, state)
            return poisoned(state), metrics

        return stepped

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(game_class, "step_function", poisoned_step)
        patched.setattr(oracle_loop, "train_epoch", lambda *args: poisoned(train_epoch(*args)))
        assert main(["train", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "training diverged by step" in error[0]
    state = checkpoint.load(tmp_path / "run")[0]
    assert int(state.step) == 2
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(state.algorithm))
