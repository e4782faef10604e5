"""The oracle loop on a tiny setting: the guarantee never rises, the archive survives a kill
and resume unchanged and is inspectable, the metrics log every epoch, and training never
touches the evaluator's hard families or its keys."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import checkpoint, cli, configs, evaluation, pipeline, profile
from advonline.archive import ORIGINS, instance_slots
from advonline.archive_view import hardest_delivered
from advonline.evaluation import Budget
from advonline.oracle_loop import train_against, training_batch, training_slots
from advonline.problems.posted_price import families
from advonline.problems.posted_price.certify import certify_dp
from advonline.train import METRIC_FIELDS, train

TINY_ORACLE_TOML = """
[setting]
low = 1.0
high = 4.0
rounds = 8
max_demand = 0.25

[algorithm]
price_atoms = 4
hidden = 8
layers = 1
learning_rate = 0.01

[adversary]
density_levels = 4
hidden = 8
conditioning = "state"
entropy = 1.0

[game]
loop = "oracle"
epochs = {epochs}
seed = 5

[oracle]
epoch_steps = 2
archive_size = 24
snapshots = 3
new_per_epoch = 6
restarts = 1
adversary_steps = 2
adversary_batch = 4
chains = 4
candidates = 4
search_steps = 3
"""


def _config(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / f"tiny-oracle-{steps}.toml"
    path.write_text(TINY_ORACLE_TOML.format(epochs=steps // 2))  # epoch_steps = 2
    return path


def _rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oracle") / "straight"
    config_path = _config(folder.parent, 8)
    train(configs.load(config_path), folder)
    return folder, config_path


@pytest.mark.end_to_end
def test_resuming_a_finished_run_changes_nothing(straight_run, tmp_path, capsys):
    folder, config_path = straight_run
    copy = tmp_path / "finished"
    shutil.copytree(folder, copy)
    args = ["train", str(config_path), "--out", str(copy), "--resume", "--quiet"]
    assert cli.main(args) == 0
    assert "trained 8 steps" in capsys.readouterr().out
    assert _rows(copy) == _rows(folder)
    kept = checkpoint.checkpoint_path(copy).read_bytes()
    assert kept == checkpoint.checkpoint_path(folder).read_bytes()


def test_a_stored_config_with_unread_writer_keys_still_opens(straight_run, tmp_path):
    """A run of an earlier version stored its writer's every ``[adversary]`` key, also one
    its loop never reads (``batch``: the oracle's networks write ``oracle.adversary_batch``);
    a config file with that key is refused, but the run's folder still opens as the same
    run, and with nothing to drop a stored config is refused like a file."""
    folder, config_path = straight_run
    copy = tmp_path / "earlier"
    shutil.copytree(folder, copy)
    record = checkpoint.read_record(copy)
    stored = json.loads(record["meta"]["config"])
    stored["adversary"]["batch"] = 8
    with pytest.raises(configs.ConfigError, match="batch does not apply"):
        configs.from_tables(stored)
    record["meta"]["config"] = json.dumps(stored)
    checkpoint.write_record(copy, record)
    state, config, _ = checkpoint.load(copy)
    assert config == configs.load(config_path)
    assert int(state.step) == 8
    stored["game"]["epochs"] = 0
    with pytest.raises(configs.ConfigError, match="game.epochs must be >= 1"):
        configs.from_stored_tables(stored, "stored")


def test_every_row_says_where_its_epoch_spent_its_time(straight_run):
    folder, _ = straight_run
    rows = _rows(folder)
    seconds = [{c: float(r[c]) for c in profile.COLUMNS} for r in rows]
    assert all(value >= 0 for row in seconds for value in row.values())
    assert all(row["seconds_oracles"] > 0 and row["seconds_meta_solver"] > 0 for row in seconds)
    assert all(row["seconds_training"] > 0 for row in seconds[:-1])  # the last only measures
    assert seconds[-1]["seconds_training"] == 0 and seconds[-1]["seconds_probe"] > 0
    assert seconds[0]["seconds_compiling"] > 0  # the first epoch compiles
    phases = [sum(row[f"seconds_{p}"] for p in profile.PHASES) for row in seconds]
    walls = np.diff([0.0] + [float(r["wall_seconds"]) for r in rows])
    assert np.all(np.asarray(phases) <= walls + 0.01)  # the phases are parts of the wall time
    totals = profile.totals(rows)
    assert totals["seconds_oracles"] == pytest.approx(sum(r["seconds_oracles"] for r in seconds))


def test_every_epoch_is_logged_and_the_guarantee_never_rises(straight_run):
    folder, _ = straight_run
    rows = _rows(folder)
    assert [int(r["epoch"]) for r in rows] == list(range(5))  # 4 trainings, 5 measurements
    assert list(rows[0]) == list(METRIC_FIELDS)  # the columns of every problem's runs
    assert [int(r["step"]) for r in rows] == list(range(0, 10, 2))
    guarantee = [float(r["guarantee"]) for r in rows]
    # an epoch whose worst found ratio already reaches the guarantee skips the certificate
    bounds = [float(r["upper_bound"]) if r["upper_bound"] else np.inf for r in rows]
    for row, bound, before in zip(rows, bounds, [np.inf, *guarantee], strict=False):
        found = max(float(row["archive_ratio"]), float(row["probe_ratio"] or 0))
        assert bound < np.inf or found >= before
        assert found <= bound * (1 + 1e-4)  # every found ratio is attained: below the bound
    assert all(later <= earlier for earlier, later in zip(guarantee, guarantee[1:], strict=False))
    assert guarantee == pytest.approx(np.minimum.accumulate(bounds))
    assert all(float(r["restricted_ratio"]) >= 1.0 for r in rows)
    assert all(float(r["exploitability"]) >= -1e-6 for r in rows)  # the current network is a
    # pure strategy of the restricted game: it never beats the game's value
    assert guarantee[-1] < guarantee[0]  # the uniform start is far from the best it finds


def test_the_delivered_network_is_the_one_with_the_best_guarantee(straight_run):
    folder, config_path = straight_run
    state, config, _ = checkpoint.load(folder)
    assert config == configs.load(config_path)
    assert float(state.best_score) == pytest.approx(
        min(float(r["upper_bound"]) for r in _rows(folder) if r["upper_bound"])
    )
    archive = state.archive
    slots = instance_slots(archive)
    assert 0 < len(slots) <= 24
    assert np.all(np.asarray(archive.optimum)[slots] > 0)
    assert int(np.asarray(archive.snapshot_filled).sum()) == 3  # bounded


@pytest.mark.end_to_end
def test_a_measured_run_counts_its_own_archive_and_stores_its_verdict(straight_run):
    """``run`` and ``evaluate --checkpoint`` measure the delivered policy on its own archive
    too: the learned CR is at least the worst archived ratio, and the report keeps it."""
    folder, _ = straight_run
    run = pipeline.open_run(folder)
    budget = Budget(family_members=5, random_instances=8, adversary_steps=3, search_steps=4)
    document, results = pipeline.evaluate_run(run, budget, ("threshold",))
    learned = next(m for m in results if m.algorithm == "learned")
    worst = hardest_delivered(run.config.build_game(), run.state)[1]
    assert learned.sources["archive"].ratio == worst >= 1.0
    assert learned.competitive_ratio >= worst
    assert "archive" not in next(m for m in results if m.algorithm == "threshold").sources
    stored = json.loads((folder / pipeline.EVALUATION_NAME).read_text())
    assert stored["verdict"] == document["verdict"]
    assert stored["verdict"].startswith(("verdict: learned", "WARNING: learned"))
    assert stored["environment"]["jax"] == jax.__version__


def test_the_archive_command_lists_and_writes_what_the_run_archived(straight_run, capsys):
    folder, _ = straight_run
    state, _, _ = checkpoint.load(folder)
    traces = folder.parent / "traces"
    assert cli.main(["archive", str(folder), "--json", "--traces", str(traces)]) == 0
    rows = json.loads(capsys.readouterr().out)["instances"]
    assert len(rows) == len(instance_slots(state.archive))
    delivered = [row["ratio_delivered"] for row in rows]
    assert delivered == sorted(delivered, reverse=True) and min(delivered) >= 1.0
    assert sum(row["mixture_weight"] for row in rows) == pytest.approx(1.0, abs=1e-5)
    # a trace is the instance itself: the evaluator's exact OPT agrees with the archive's
    hardest = rows[0]
    trace = traces / f"slot-{hardest['slot']}.csv"
    assert (
        cli.main(
            [
                "evaluate",
                "--instances",
                str(trace),
                "--setting",
                "low=1",
                "--setting",
                "high=4",
                "--algorithm",
                "threshold",
                "--json",
            ]
        )
        == 0
    )
    measured = json.loads(capsys.readouterr().out)
    assert measured["offline_optimum"] == pytest.approx(hardest["optimum"], rel=1e-5)
    assert cli.main(["archive", str(folder), "--traces", str(traces)]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err


class _Interrupted(Exception):
    pass


def _assert_same_archive(folder: Path, other: Path) -> None:
    straight_state, _, _ = checkpoint.load(folder)
    resumed_state, _, _ = checkpoint.load(other)
    for want, got in zip(
        jax.tree.leaves(straight_state.archive), jax.tree.leaves(resumed_state.archive), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert [r["epoch"] for r in _rows(other)] == [r["epoch"] for r in _rows(folder)]


def test_an_interrupted_run_resumes_to_the_same_archive(straight_run, tmp_path):
    folder, config_path = straight_run
    interrupted = tmp_path / "interrupted"

    def stop_after_two_epochs(row: dict) -> None:
        if row["epoch"] == 2:
            raise _Interrupted

    with pytest.raises(_Interrupted):
        train(configs.load(config_path), interrupted, report=stop_after_two_epochs)
    assert len(_rows(interrupted)) == 3
    train(configs.load(config_path), interrupted, resume=True)
    _assert_same_archive(folder, interrupted)


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_archive(straight_run, tmp_path):
    folder, config_path = straight_run
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "advonline", "train", str(config_path)]
    process = subprocess.Popen([*command, "--out", str(killed), "--quiet"])
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if (killed / "metrics.csv").exists() and len(_rows(killed)) >= 2:
            break
        time.sleep(0.2)
    assert process.poll() is None, "the run finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    resumed = subprocess.run(
        [*command, "--out", str(killed), "--resume", "--quiet"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_archive(folder, killed)


def test_training_never_touches_the_evaluators_families(tmp_path, monkeypatch):
    calls = []

    def spy(name):
        def called(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"training called the evaluator's family generator {name}")

        return called

    for name in ("make_family", "stopping_densities", "family_demand_pairs", "write_out"):
        monkeypatch.setattr(families, name, spy(name))
    for family in (families.Ramp, families.Staircase, families.Flood):
        monkeypatch.setattr(family, "__call__", spy(family.__name__))
    train(configs.load(_config(tmp_path, 2)), tmp_path / "run")
    assert calls == []
    # the spy is live: a call through the module, as training would make one, is caught
    setting = configs.load(_config(tmp_path, 2)).setting
    with pytest.raises(AssertionError, match="family generator"):
        families.stopping_densities(setting, 3, jnp.float32)
    assert calls == ["stopping_densities"]


def test_the_evaluators_keys_differ_from_every_training_key():
    def raw(key):
        return tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())

    training = set()
    for seed in range(8):
        root = jax.random.key(seed)
        training.add(raw(root))
        training.update(raw(k) for k in jax.random.split(root, 3))
    evaluator = set()
    for seed in range(8):
        root = evaluation.evaluation_key(seed)
        evaluator.add(raw(root))
        evaluator.update(raw(k) for k in jax.random.split(root, 3))
    assert not training & evaluator


def test_the_oracle_loop_refuses_what_it_does_not_support(tmp_path):
    data = configs.load(_config(tmp_path, 12)).to_tables()
    data["game"]["epochs"] = 0
    with pytest.raises(configs.ConfigError, match="game.epochs must be >= 1"):
        configs.from_tables(data)
    data["game"]["epochs"] = 6
    data["oracle"]["probe_every"] = -1
    with pytest.raises(configs.ConfigError, match="oracle.probe_every must be >= 0"):
        configs.from_tables(data)


def test_reinforce_is_the_oracle_loops_ablation_update(straight_run):
    """``algorithm.update = "reinforce"`` trains in the oracle loop too: from the same network,
    archive and weights, its sampled direction moves the network elsewhere than the all-action
    update does, and it too raises the weighted payoff on the archive."""
    folder, config_path = straight_run
    state, _, _ = checkpoint.load(folder)
    trained = {}
    for update in ("per-round", "reinforce"):
        data = configs.load(config_path).to_tables()
        data["algorithm"]["update"] = update
        config = configs.from_tables(data, f"tiny oracle loop with {update}")
        game = config.build_game()
        archive = state.archive
        trained[update] = train_against(
            game,
            config.oracle,
            config.game.temperature,
            state.algorithm,
            game.algorithm_optimizer().init(state.algorithm),
            archive.types,
            archive.optimum,
            archive.filled,
            state.adversary_mixture,
            20,
            jax.random.key(3),
        )[0]
    filled = np.asarray(state.archive.filled)
    mixture = np.asarray(state.adversary_mixture)[filled]

    def weighted_payoff(params) -> float:
        payoffs = game.payoffs(params, state.archive.types, state.archive.optimum)
        return float(np.sum(mixture * np.asarray(payoffs)[filled]))

    before = weighted_payoff(state.algorithm)
    assert weighted_payoff(trained["per-round"]) > before
    assert weighted_payoff(trained["reinforce"]) > before
    moved = [np.ravel(a - b) for a, b in zip(*map(jax.tree.leaves, trained.values()), strict=True)]
    assert np.abs(np.concatenate(moved)).max() > 1e-4


def test_training_slots_hold_every_filled_slot_in_a_halved_batch():
    filled = np.zeros(512, bool)
    filled[[3, 7, 100, 511]] = True
    slots, valid = training_slots(filled, devices=1)
    assert slots.shape == valid.shape == (64,)
    assert list(slots[valid]) == [3, 7, 100, 511] and not valid[4:].any()
    filled[:130] = True
    assert training_slots(filled, devices=1)[0].shape == (256,)
    assert training_slots(filled, devices=1, smallest=1)[0].shape == (256,)
    assert training_slots(np.ones(512, bool), devices=1)[0].shape == (512,)
    assert training_slots(np.zeros(96, bool), devices=3)[0].shape == (96,)  # 48 < 64
    assert training_slots(np.zeros(96, bool), devices=3, smallest=1)[0].shape == (3,)


def test_training_on_the_filled_slots_is_training_on_the_archive(straight_run):
    """An epoch's update on the compacted batch (:func:`training_batch`) is the update on the
    whole archive, whose empty slots weigh nothing: the same network up to float rounding."""
    folder, config_path = straight_run
    state, _, _ = checkpoint.load(folder)
    config = configs.load(config_path)
    game = config.build_game()
    archive = state.archive
    filled = np.asarray(archive.filled).copy()
    filled[::2] = False  # half the slots empty, as while the archive fills
    mixture = (filled / filled.sum()).astype(np.float32)  # uniform over the filled slots
    batch = training_batch(archive.replace(filled=filled), mixture, devices=1, smallest=1)
    assert batch[0].shape[0] < filled.size
    start = (state.algorithm, game.algorithm_optimizer().init(state.algorithm))
    sections = (config.oracle, config.game.temperature)
    whole = train_against(
        game,
        *sections,
        *start,
        archive.types,
        archive.optimum,
        filled,
        mixture,
        5,
        jax.random.key(3),
    )[0]
    compact = train_against(game, *sections, *start, *batch, 5, jax.random.key(3))[0]
    for got, want in zip(jax.tree.leaves(compact), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    pairs = zip(jax.tree.leaves(whole), jax.tree.leaves(state.algorithm), strict=True)
    assert max(np.abs(a - b).max() for a, b in pairs) > 1e-4  # the update did move it


def test_the_certificates_strategy_is_an_oracle(tmp_path):
    """With ``oracle.certificate_instances`` every epoch draws instances from the adversary
    strategy behind the DP's value and archives the hardest as found by the certificate;
    each draw is attained, so never above the epoch's bound. With ``probe_every = 0`` only
    the last epoch is probed, and with ``restarts = 0`` no adversary network is trained."""
    text = TINY_ORACLE_TOML.format(epochs=4).replace(
        "restarts = 1", "restarts = 0\nprobe_every = 0\ncertificate_instances = 8"
    )
    # without adversary networks the [adversary] table holds the buyer types alone
    text = text.replace("density_levels = 4\nhidden = 8\n", "density_levels = 4\n")
    text = text.replace("entropy = 1.0\n", "")
    path = tmp_path / "drawn.toml"
    path.write_text(text)
    train(configs.load(path), tmp_path / "drawn")
    rows = _rows(tmp_path / "drawn")
    drawn = [float(row["certificate_ratio"]) for row in rows]  # every epoch draws
    for row, worst in zip(rows, drawn, strict=True):
        if row["upper_bound"]:
            assert worst <= float(row["upper_bound"]) * (1 + 1e-4)
    assert [row["probe_ratio"] != "" for row in rows] == [False] * (len(rows) - 1) + [True]
    guarantee = [float(row["guarantee"]) for row in rows]
    assert guarantee == sorted(guarantee, reverse=True) and guarantee[-1] < guarantee[0]
    state, _, _ = checkpoint.load(tmp_path / "drawn")
    origins = np.asarray(state.archive.origin)[instance_slots(state.archive)]
    assert ORIGINS.index("certificate") in set(origins.tolist())
    assert ORIGINS.index("probe") in set(origins.tolist())


def test_descent_epochs_train_the_best_network_down_its_certificate(tmp_path):
    """With ``oracle.descent_epochs`` the last epochs' training is certificate descent from
    the best certified network: the next measurement certifies a lower bound than any epoch
    before it, and the run delivers that network, with the steps counted as usual."""
    descent = "epoch_steps = 10\ndescent_epochs = 2\ndescent_learning_rate = 0.05\n"
    text = TINY_ORACLE_TOML.format(epochs=6).replace("epoch_steps = 2\n", descent)
    path = tmp_path / "descent.toml"
    path.write_text(text)
    config = configs.load(path)
    assert config.oracle.descent_epochs == 2
    folder = tmp_path / "run"
    train(config, folder)
    rows = _rows(folder)
    assert [int(r["step"]) for r in rows] == list(range(0, 70, 10))
    guarantee = [float(r["guarantee"]) for r in rows]
    assert guarantee[-1] < guarantee[4]  # below everything trained against the archive
    state, _, _ = checkpoint.load(folder)
    game = config.build_game()
    with jax.enable_x64(True):
        params = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), state.best_algorithm)
        certified = certify_dp(config.setting, game.policy(params)).ratio
    assert float(state.best_score) == pytest.approx(guarantee[-1])
    assert certified == pytest.approx(guarantee[-1], rel=1e-5)
