"""One writer per folder, and writes that cannot collide or tear: a second ``train`` into a run
folder another process is writing is refused at once in one line naming the holder; a lock left
by a process that died is taken over with one line; a finished writer leaves the folder free;
a write that fails before its rename leaves the old file and no temporary."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import pytest

from advonline.cli import main
from advonline.folders import LOCK_NAME, FolderError, FolderLock
from tests.test_run_command import TINY
from tests.test_train import TINY_TOML

HOLD = """
import sys, time
from advonline.folders import FolderLock
with FolderLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held(tmp_path):
    """A run folder whose lock another process holds, and that process."""
    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    yield folder, holder
    holder.kill()
    holder.communicate()


def test_a_folder_another_process_holds_cannot_be_locked(held):
    """The lock itself, in the default run: a holder in another process excludes this one,
    at once, and nothing is written into the folder."""
    folder, holder = held
    with pytest.raises(FolderError, match=f"in use by process {holder.pid}"):
        with FolderLock(folder):
            pass
    assert sorted(path.name for path in folder.iterdir()) == [LOCK_NAME]


@pytest.mark.parallel  # another process holds the folder meanwhile
def test_a_second_writer_is_refused_at_once_naming_the_holder(held, tmp_path, capsys):
    folder, holder = held
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML.format(epochs=4))
    assert main(["train", str(config), "--out", str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"in use by process {holder.pid}" in err
    assert sorted(path.name for path in folder.iterdir()) == [LOCK_NAME]  # nothing written
    trading = tmp_path / "owt.toml"
    trading.write_text(TINY.replace("epochs = 6", "epochs = 1"))
    done, budget = tmp_path / "done", ["--search-steps", "4", "--random-instances", "4"]
    assert main(["run", str(trading), "--out", str(done), "--quiet", *budget]) == 0
    capsys.readouterr()
    assert main(["plot", str(done), "--out", str(folder)]) == 2  # plot is refused the same way
    assert f"in use by process {holder.pid}" in capsys.readouterr().err
    assert sorted(path.name for path in folder.iterdir()) == [LOCK_NAME]
    with pytest.raises(FolderError, match=f"in use by process {holder.pid}"):
        FolderLock(folder).__enter__()


def test_a_lock_left_by_a_dead_process_is_taken_over_with_one_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    stale = {"pid": 2**22 + 7, "started": "2026-01-01T00:00:00+00:00"}
    (folder / LOCK_NAME).write_text(json.dumps(stale))
    leftovers = [
        folder / f".checkpoint.msgpack.{stale['pid']}.0a1b2c3d.tmp",  # killed mid-write
        folder / f".checkpoint.previous.msgpack.{stale['pid']}.link",
    ]
    kept = [
        folder / f".checkpoint.msgpack.{os.getpid()}.0a1b2c3d.tmp",  # a live writer's
        folder / "checkpoint.msgpack",
    ]
    for path in [*leftovers, *kept]:
        path.write_bytes(b"half")
    said = []
    with FolderLock(folder, say=said.append):
        holder = json.loads((folder / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid()
        with FolderLock(folder, say=said.append):  # the same process may lock it again
            pass
    assert len(said) == 1 and f"taking over the lock of process {stale['pid']}" in said[0]
    assert not any(path.exists() for path in leftovers)
    assert all(path.read_bytes() == b"half" for path in kept)
    assert (folder / LOCK_NAME).read_text() == ""  # a clean end names nobody
    with FolderLock(folder, say=said.append):
        pass
    assert len(said) == 1


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    """atomic_write's temporary names are per process (PID and a random suffix), and a write
    that fails before its rename leaves the old file whole and no temporary behind."""
    from advonline import folders

    target = tmp_path / "checkpoint.msgpack"
    folders.atomic_write(target, b"old")
    names = set()
    real_replace = os.replace

    def failing(source, destination):
        names.add(os.path.basename(source))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing)
    for _ in range(2):
        with pytest.raises(OSError, match="disk full"):
            folders.atomic_write(target, b"new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert target.read_bytes() == b"old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint.msgpack"]
    assert len(names) == 2 and all(f".{os.getpid()}." in name for name in names)
    folders.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"


@pytest.mark.parallel  # another process holds the folder meanwhile
def test_a_second_train_is_refused_and_the_first_ends_with_every_row_once(tmp_path, capsys):
    """The natural mistake: ``train --resume`` in a second terminal while the run goes on."""
    steps = 1500
    config = tmp_path / "tiny.toml"
    text = TINY_TOML.format(epochs=steps // 50)
    config.write_text(text.replace("epoch_steps = 1", "epoch_steps = 50"))
    folder = tmp_path / "run"
    argv = ["train", str(config), "--out", str(folder), "--quiet"]
    first = subprocess.Popen([sys.executable, "-m", "advonline", *argv])
    while first.poll() is None and not (folder / "checkpoint.msgpack").exists():
        time.sleep(0.05)
    assert main([*argv, "--resume"]) == 2
    assert first.poll() is None, "the first run ended before the second could try"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"in use by process {first.pid} (started 20" in err
    assert first.wait() == 0
    with open(folder / "metrics.csv", newline="") as handle:
        logged = [int(row["step"]) for row in csv.DictReader(handle)]
    assert logged == list(range(50, steps + 1, 50))
