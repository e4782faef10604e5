"""Kill -9 anywhere, resume, and get the same result: ``advonline run`` is killed with SIGKILL
ten times at random moments (part way through training, through an oracle search, through
writing a checkpoint, through exporting a policy) and resumed with ``--resume`` after each;
the finished run's state, metrics, measured ratios and policy files equal those of a run that
was never interrupted, bit for bit, and after every kill the folder's checkpoint reads.

Slow: each resume compiles again (about 10 to 20 minutes for the three loops on 2 CPU cores).
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from advonline import checkpoint, checksums, profile
from tests.reports import figures
from tests.test_several_resource_oracles import TINY_TWO
from tests.test_train import TINY_TOML

#: Runs ``advonline`` with one fault planted: ``FAULT N DELAY ARGS...``. ``search``: SIGKILL
#: ``DELAY`` seconds into the N-th oracle search (or as it ends, before its result is used,
#: if it ends sooner); ``checkpoint`` / ``export``: the N-th
#: checkpoint / policy write stops half way through its temporary file and the process is
#: killed there; ``none`` and ``moment``: no fault (for ``moment`` the test kills it from
#: outside, a random moment after it wrote N more metrics rows).
FAULTY_RUN = """
import os, signal, sys, threading
import jax
from advonline import checkpoint, export
from advonline.cli import main
from advonline.game import Game

fault, nth, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
calls = [0]

def kill():
    os.kill(os.getpid(), signal.SIGKILL)

def killed_part_way(method):
    def method_with_fault(*args, **kwargs):
        calls[0] += 1
        if calls[0] != nth:
            return method(*args, **kwargs)
        threading.Timer(delay, kill).start()
        jax.block_until_ready(method(*args, **kwargs))
        kill()  # the search ended first: killed before its result is used
    return method_with_fault

def torn_write(write):
    def write_with_fault(path, payload):
        calls[0] += 1
        if calls[0] == nth:
            torn = path.with_name(f".{path.name}.{os.getpid()}.torn.tmp")
            with open(torn, "wb") as handle:
                handle.write(payload[: len(payload) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            kill()
        write(path, payload)
    return write_with_fault

if fault == "search":
    for name in ("best_responses", "mixture_search"):
        setattr(Game, name, killed_part_way(getattr(Game, name)))
elif fault == "checkpoint":
    checkpoint.atomic_write = torn_write(checkpoint.atomic_write)
elif fault == "export":
    export.atomic_write = torn_write(export.atomic_write)
sys.exit(main(sys.argv[4:]))
"""

BUDGET = ["--adversary-steps", "3", "--random-instances", "8", "--family-members", "5"]
BUDGET += ["--search-steps", "8", "--algorithm", "threshold"]
KILLS = 10
TIMINGS = ("wall_seconds", "steps_per_second", *profile.COLUMNS)

# Long enough in steps that eight kills during training, each after at most two searches or
# checkpoints of its attempt, cannot finish it: the export kills then come after training.
SIMULTANEOUS = TINY_TOML.format(epochs=40).replace("epoch_steps = 1", "epoch_steps = 5")


def _toml(data: dict) -> str:
    lines = []
    for table, values in data.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _oracle(resources: int) -> str:
    data = {table: dict(values) for table, values in TINY_TWO.items()}
    data["game"]["epochs"] = 64 // data["oracle"]["epoch_steps"]
    if resources == 1:
        data["setting"] = {"low": 1.0, "high": 4.0, "rounds": 8, "max_demand": 0.25}
    return _toml(data)


CONFIGS = {"simultaneous": SIMULTANEOUS, "oracle-k1": _oracle(1), "oracle-k2": _oracle(2)}


def _run(config: Path, out: Path, fault: str, nth: int, delay: float, resume: bool):
    argv = ["run", str(config), "--out", str(out), "--quiet", *BUDGET]
    argv += ["--resume"] if resume else []
    command = [sys.executable, "-c", FAULTY_RUN, fault, str(nth), str(delay), *argv]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finished(process: subprocess.Popen, allowed=(0,)) -> int:
    """The exit status of ``process`` once it ends (its stderr shown if not ``allowed``)."""
    _, stderr = process.communicate()
    assert process.returncode in allowed, stderr
    return process.returncode


def _plan(rng: np.random.Generator) -> list[tuple[str, int, float]]:
    """Ten faults: eight while training, in a random order: three at random moments (a
    random delay after the attempt's first to third new metrics row), three in the second to
    fourth oracle search, two in the second or third checkpoint write (so that every attempt
    starts from a checkpoint once the first is written and moves a few epochs on); then two
    while exporting (the first policy file, then the second)."""
    plan = [("moment", int(rng.integers(1, 4)), float(rng.uniform(0.0, 0.3))) for _ in range(3)]
    plan += [("search", int(rng.integers(2, 5)), float(rng.uniform(0.0, 0.3))) for _ in range(3)]
    plan += [("checkpoint", int(rng.integers(2, 4)), 0.0) for _ in range(2)]
    order = rng.permutation(len(plan))
    return [plan[i] for i in order] + [("export", 1, 0.0), ("export", 2, 0.0)]


def _rows_written(folder: Path) -> int:
    path = folder / "metrics.csv"
    return path.read_text().count("\n") if path.exists() else 0


def _kill_after_rows(process: subprocess.Popen, folder: Path, rows: int, delay: float) -> None:
    """SIGKILL ``process`` ``delay`` seconds after ``rows`` more metrics rows appear."""
    target = _rows_written(folder) + rows
    while process.poll() is None and _rows_written(folder) < target:
        time.sleep(0.01)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)


def _state_leaves(folder: Path) -> list[np.ndarray]:
    state, _, _ = checkpoint.load(folder)
    state = state.replace(key=jax.random.key_data(state.key))
    return [np.asarray(leaf) for leaf in jax.tree.leaves(state)]


def _metrics(folder: Path) -> list[dict]:
    """The metrics rows without their timings (which differ from run to run)."""
    with open(folder / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]


def _policy(path: Path) -> dict:
    document = json.loads(path.read_text())
    assert checksums.verified(document, str(path), ValueError)
    # when and from which folder it was exported differ; the checksum covers them
    del document["provenance"]["created"], document["provenance"]["checkpoint"]
    del document[checksums.KEY]
    return document


@pytest.mark.slow
@pytest.mark.parametrize("loop", list(CONFIGS))
def test_a_run_killed_ten_times_resumes_to_the_same_result(tmp_path, loop):
    config = tmp_path / f"{loop}.toml"
    config.write_text(CONFIGS[loop])
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _finished(_run(config, straight, "none", 0, 0.0, resume=False))

    rng = np.random.default_rng(["simultaneous", "oracle-k1", "oracle-k2"].index(loop))
    kills, steps = [], []
    for fault, nth, delay in _plan(rng):
        process = _run(config, killed, fault, nth, delay, resume=killed.exists())
        if fault == "moment":
            _kill_after_rows(process, killed, nth, delay)
        code = _finished(process, (0, -signal.SIGKILL))
        kills.append((fault, code == -signal.SIGKILL))
        if checkpoint.checkpoint_path(killed).exists():  # once written, always readable
            steps.append(int(checkpoint.load(killed)[0].step))
        if code == 0:
            break
    _finished(_run(config, killed, "none", 0, 0.0, resume=True))
    print(f"{loop}: kills {kills}; checkpoint steps after each {steps}")

    assert sum(was_killed for _, was_killed in kills) == KILLS, kills
    assert {fault for fault, was_killed in kills if was_killed} == {
        "moment",
        "search",
        "checkpoint",
        "export",
    }
    assert steps == sorted(steps)
    for want, got in zip(_state_leaves(straight), _state_leaves(killed), strict=True):
        np.testing.assert_array_equal(got, want)
    assert _metrics(killed) == _metrics(straight)
    evaluation = [json.loads((f / "evaluation.json").read_text()) for f in (straight, killed)]
    assert figures(evaluation[1]) == figures(evaluation[0])
    for name in ("policy.json", "policy-readout.json"):
        assert _policy(killed / name) == _policy(straight / name)
    assert not list(killed.glob(".*.tmp")), "temporary files left behind"
