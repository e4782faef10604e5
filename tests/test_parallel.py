"""Data parallel training: the same run on 1 and on 4 devices gives the same metrics (up to
float rounding) and the same measured ratios, and a run in two processes (``jax.distributed``
on localhost, CPU collectives) writes one checkpoint that a second two-process launch resumes.

A test process has one CPU device, so each test trains in subprocesses, with four host
devices forced by ``XLA_FLAGS`` where it needs them."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from advonline import checkpoint, configs
from advonline.problems.one_way_trading.exact import optimal_curve
from tests.reports import by_algorithm, certified, metrics_without_timings
from tests.test_k2_run import TINY_K2
from tests.test_simultaneous_loop import SIMULTANEOUS
from tests.test_train import TINY_TOML

# each test launches processes that compete with the suite's workers for the cores, so they run
# on their own: `make test-parallel` (CI runs it after `make test` and `make test-end-to-end`)
pytestmark = pytest.mark.parallel


def _tiny(template: str, steps: int, epoch_steps: int) -> str:
    """A tiny config of ``steps`` steps, measured and checkpointed every ``epoch_steps``."""
    epochs_line = next(line for line in template.splitlines() if line.startswith("epochs = "))
    epoch_line = next(line for line in template.splitlines() if line.startswith("epoch_steps"))
    text = template.replace(epochs_line, f"epochs = {steps // epoch_steps}")
    return text.replace(epoch_line, f"epoch_steps = {epoch_steps}")


MEASURED = ("payoff", "adversary_ratio", "pool_ratio")


def _rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _train_command(config: Path, folder: Path) -> list[str]:
    return [sys.executable, "-m", "advonline", "train", str(config), "--out", str(folder)]


def _environment(devices: int) -> dict:
    environment = dict(os.environ)
    flags = environment.get("XLA_FLAGS", "")
    environment["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    return environment


EVALUATE = ["--algorithm", "threshold", "--json", "--adversary-steps", "2", "--search-steps", "4"]
EVALUATE += ["--family-members", "8", "--random-instances", "8"]


def test_one_and_four_devices_give_the_same_metrics(tmp_path):
    """K = 1 and K = 2 (OPT from the JAX dual LP), 5 epochs of one step each on 1 and on 4
    devices; then the K = 1 run measured by the evaluator on 1 and on 4 devices."""
    for name, template in (("k1", TINY_TOML.format(epochs=5)), ("k2", TINY_K2)):
        (tmp_path / f"{name}.toml").write_text(_tiny(template, 5, 1))
    # one process with four host devices trains each run twice, on 1 and on 4 of them, and
    # measures the K = 1 run twice
    script = (
        "import contextlib\n"
        "from advonline import configs\n"
        "from advonline.cli import main\n"
        "from advonline.train import train\n"
        "for name in ('k1', 'k2'):\n"
        f"    config = configs.load({str(tmp_path)!r} + f'/{{name}}.toml')\n"
        "    for count in (1, 4):\n"
        f"        train(config.on_devices(count), {str(tmp_path)!r} + f'/{{name}}-on-{{count}}')\n"
        "for count in (1, 4):\n"
        f"    with open({str(tmp_path)!r} + f'/measured-on-{{count}}.json', 'w') as out:\n"
        "        with contextlib.redirect_stdout(out):\n"
        f"            argv = ['evaluate', '--checkpoint', {str(tmp_path / 'k1-on-1')!r}]\n"
        f"            assert main([*argv, *{EVALUATE!r}, '--devices', str(count)]) == 0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=_environment(4), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("k1", "k2"):
        one, four = tmp_path / f"{name}-on-1", tmp_path / f"{name}-on-4"
        assert [int(r["step"]) for r in _rows(four)] == [1, 2, 3, 4, 5]
        for row_one, row_four in zip(_rows(one), _rows(four), strict=True):
            for field in MEASURED:
                # a sum over instances sharded four ways is added in another order: float32
                # rounding, nothing more
                np.testing.assert_allclose(float(row_four[field]), float(row_one[field]), rtol=1e-6)
        state_one, _, _ = checkpoint.load(one)
        state_four, stored, _ = checkpoint.load(four)
        assert stored.game.devices == 4
        np.testing.assert_allclose(
            _flat(state_four.algorithm), _flat(state_one.algorithm), rtol=1e-4, atol=1e-6
        )
    one, four = (
        json.loads((tmp_path / f"measured-on-{count}.json").read_text())["results"]
        for count in (1, 4)
    )
    assert [r["algorithm"] for r in four] == ["learned", "learned-deterministic", "threshold"]
    for result_one, result_four in zip(one, four, strict=True):
        for source, ratio in result_one["sources"].items():
            if ratio is not None:  # float64 sums over a split batch: rounding only
                np.testing.assert_allclose(result_four["sources"][source], ratio, rtol=1e-9)


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(tree)])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _launch_two(config: Path, folder: Path, *flags: str) -> list[subprocess.Popen]:
    """Two processes of one run on localhost, each with one CPU device."""
    coordinator = f"localhost:{_free_port()}"
    return [
        subprocess.Popen(
            [
                *_train_command(config, folder),
                "--quiet",
                "--coordinator",
                coordinator,
                "--processes",
                "2",
                "--process-id",
                str(index),
                *flags,
            ],
            env=_environment(1),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(2)
    ]


def test_two_processes_write_one_checkpoint_that_resumes(tmp_path):
    config = tmp_path / "tiny.toml"
    steps = 400
    config.write_text(_tiny(TINY_TOML.format(epochs=steps), steps, 10))
    folder = tmp_path / "run"
    processes = _launch_two(config, folder)
    deadline = time.monotonic() + 60
    while not checkpoint.checkpoint_path(folder).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for process in processes:  # killed mid-run, after the first checkpoint
        process.send_signal(signal.SIGKILL)
        process.communicate()  # reaps it and closes its pipes
    state, stored, _ = checkpoint.load(folder)
    stopped = int(state.step)
    assert 0 < stopped < steps and stopped % 10 == 0
    assert stored.game.devices == 0
    # process 0 alone wrote: one marker, its lock, config, metrics table and checkpoint, no
    # leftovers
    names = sorted(path.name for path in folder.iterdir())
    assert names == [
        ".advonline",
        ".advonline.lock",
        "checkpoint.msgpack",
        "config.json",
        "metrics.csv",
    ]

    processes = _launch_two(config, folder, "--resume")
    outputs = [process.communicate(timeout=120) for process in processes]
    for process, (_, error) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, error[-2000:]
    assert (
        "trained 400 steps" in outputs[0][0] and "trained" not in outputs[1][0]
    )  # process 0 speaks
    state, _, _ = checkpoint.load(folder)
    assert int(state.step) == steps
    steps_logged = [int(row["step"]) for row in _rows(folder)]
    # each epoch once: the kill's rows trimmed
    assert steps_logged == list(range(10, steps + 1, 10))


def test_two_processes_train_one_way_trading_as_one_does(tmp_path):
    """One-way trading trains on two processes with no code of its own: the same
    rows (timings aside) and delivered parameters as one process, up to the float32 rounding
    of batches split over two devices."""
    config = tmp_path / "owt.toml"
    config.write_text(SIMULTANEOUS.replace("epochs = 3", "epochs = 2").replace("= 60", "= 20"))
    alone, together = tmp_path / "alone", tmp_path / "together"
    single = subprocess.run(
        [*_train_command(config, alone), "--quiet"], env=_environment(1), check=False
    )
    assert single.returncode == 0
    processes = _launch_two(config, together)
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, error) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, error[-2000:]
    rows = [metrics_without_timings(folder) for folder in (alone, together)]
    assert len(rows[0]) == len(rows[1]) == 2
    for row_alone, row_together in zip(*rows, strict=True):
        assert row_alone.keys() == row_together.keys()
        for column, value in row_alone.items():
            if value in ("", row_together[column]):
                assert row_together[column] == value, column
            else:
                np.testing.assert_allclose(float(row_together[column]), float(value), rtol=1e-4)
    delivered = [checkpoint.load(folder)[0].best_algorithm for folder in (alone, together)]
    np.testing.assert_allclose(_flat(delivered[1]), _flat(delivered[0]), rtol=1e-4, atol=1e-6)


ORACLES_ON_DEVICES = """
import jax, jax.numpy as jnp, numpy as np
from advonline.problems.posted_price.adversary import build_adversary
from advonline.configs import OracleBudget
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.oracles import (
    best_responses, local_search_oracle, random_types,
)
from advonline.parallel import batch_mesh
from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.model import Setting, price_table

setting = Setting(low=1.0, high=10.0, rounds=12, max_demand=0.2)
config = AdversaryConfig(density_levels=16, conditioning="state")
model = build_adversary(setting, config)
table = price_table(setting, make_baseline("threshold", setting), jnp.float32)
budget = OracleBudget(
    restarts=4, adversary_steps=3, adversary_batch=8, chains=8, candidates=4, search_steps=5
)
found = {}
for count in (1, 4):
    mesh = batch_mesh(count)
    result = best_responses(
        setting, model, config, table, budget, jax.random.key(7), jnp.float32, mesh=mesh
    )
    found[count] = (np.asarray(result.types), np.asarray(result.ratios))
sale = model.type_sale_table(table, jnp.float32)
starts = random_types(model.buyer_types, jax.random.key(8), 8, setting.rounds)
searched = local_search_oracle(
    setting, model.buyer_types, sale, starts, 4, 5, jnp.float32, jax.random.key(9), batch_mesh(4)
)
assert len(searched.types.sharding.device_set) == 4, searched.types.sharding
assert not searched.types.sharding.is_fully_replicated, searched.types.sharding
np.savez(OUT, types_one=found[1][0], ratios_one=found[1][1], types_four=found[4][0],
         ratios_four=found[4][1])
"""


def test_oracle_searches_split_over_four_devices_find_what_one_finds(tmp_path):
    """The oracles' restarts and chains split over 4 devices: each is computed whole on one
    device, so the instances found are the same and their ratios equal to float rounding."""
    out = tmp_path / "found.npz"
    script = f"OUT = {str(out)!r}\n{ORACLES_ON_DEVICES}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=_environment(4), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = np.load(out)
    assert found["types_one"].shape == (4 * 3 + 8, 12)  # every restart's steps, every chain
    np.testing.assert_array_equal(found["types_four"], found["types_one"])
    np.testing.assert_allclose(found["ratios_four"], found["ratios_one"], rtol=1e-6)
    assert found["ratios_one"].max() > 1.0


def run_on_one_and_four(tmp_path, config_text: str, budget: list[str]):
    """``advonline run`` of an interface config on 1 and on 4 host devices: each run's
    metrics rows, the learned curve's certificate of each (its ratio for real rates), and
    the best any curve on the setting's grid certifies."""
    config = tmp_path / "owt.toml"
    config.write_text(config_text)
    for count in (1, 4):
        command = [sys.executable, "-m", "advonline", "run", str(config), *budget]
        command += ["--out", str(tmp_path / f"on-{count}"), "--devices", str(count)]
        done = subprocess.run(command, env=_environment(4), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    rows = [_rows(tmp_path / f"on-{count}") for count in (1, 4)]
    reports = [json.loads((tmp_path / f"on-{c}" / "evaluation.json").read_text()) for c in (1, 4)]
    certified_ratios = [certified(by_algorithm(report)["learned"]) for report in reports]
    return rows, certified_ratios, optimal_curve(configs.load(config).setting)[1]


def test_a_problem_of_the_interface_trains_on_four_devices(tmp_path):
    """One-way trading (17 rate levels, 3 epochs) on 1 and on 4 host devices: the first
    measurement (the fresh curve, the same searches) is the same; then the sharded gradient's
    rounding moves the trajectories apart a little, and both curves end within 10% of the
    best curve on the grid."""
    from tests.test_run_command import TINY

    budget = ["--search-steps", "8", "--random-instances", "8", "--quiet"]
    text = TINY.replace("epochs = 6", "epochs = 3")
    (one, four), ratios, best = run_on_one_and_four(tmp_path, text, budget)
    for field in ("oracle_ratio", "archive_ratio", "upper_bound"):
        np.testing.assert_allclose(float(four[0][field]), float(one[0][field]), rtol=1e-6)
    assert max(ratios) <= 1.1 * best and abs(ratios[1] / ratios[0] - 1) < 0.01


def test_the_simultaneous_loop_of_the_interface_trains_on_four_devices(tmp_path):
    """The simultaneous loop on one-way trading with its written batches and pool sharded
    over 4 host devices: the first epoch measures what one device measures, up to the
    sharded gradient's rounding, and the delivered curve ends as near the best curve on the
    grid."""
    from tests.test_simultaneous_loop import BUDGET, SIMULTANEOUS

    (one, four), ratios, best = run_on_one_and_four(tmp_path, SIMULTANEOUS, BUDGET)
    for field in ("oracle_ratio", "archive_ratio", "upper_bound"):
        np.testing.assert_allclose(float(four[0][field]), float(one[0][field]), rtol=1e-5)
    assert max(ratios) <= 1.1 * best and abs(ratios[1] / ratios[0] - 1) < 0.02
