"""Checkpoints and policy files carry a SHA-256 of their payload: a file with a flipped byte is
refused in one line (a checkpoint's message offers the previous one, which is kept); a
checkpoint without a checksum is refused, and a policy file without one loads with a note."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from advonline import checkpoint, checksums, configs
from advonline.cli import main
from advonline.problems.posted_price.policy_file import PolicyFileError, load
from advonline.train import train
from tests.test_train import TINY_TOML


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A four-step run (checkpoints after steps 2 and 4) and its exported network policy."""
    root = tmp_path_factory.mktemp("checksums")
    config = root / "tiny.toml"
    config.write_text(TINY_TOML.format(epochs=4))
    folder = root / "run"
    train(configs.load(config), folder)
    policy = root / "policy.json"
    assert main(["export", "--checkpoint", str(folder), "--out", str(policy), "--no-measure"]) == 0
    return folder, policy


def _flipped(data: bytes, at: int, rng: np.random.Generator) -> bytes:
    """``data`` with the byte at ``at`` replaced by another value."""
    other = (data[at] + int(rng.integers(1, 256))) % 256
    return data[:at] + bytes([other]) + data[at + 1 :]


def test_a_signed_document_verifies_however_it_is_indented():
    document = checksums.signed({"b": [1.0, 1e-05, -0.0], "a": {"é": True, "n": None}})
    for text in (json.dumps(document), json.dumps(document, indent=3, ensure_ascii=True)):
        assert checksums.verified(json.loads(text), "file", ValueError)
    assert not checksums.verified({"a": 1}, "file", ValueError)  # from before checksums
    for damaged in (
        {**document, "b": [1.0, 1e-05, 0.0]},
        {k: v for k, v in document.items() if k != checksums.KEY},
        {k: v for k, v in document.items() if k != checksums.SCHEME_KEY},
    ):
        with pytest.raises(ValueError, match="file is corrupted: checksum mismatch"):
            checksums.verified(damaged, "file", ValueError)


def test_a_policy_file_with_any_flipped_byte_is_refused(trained, tmp_path):
    _, policy = trained
    written = policy.read_bytes()
    original = json.loads(written)
    assert checksums.verified(original, "policy", ValueError)
    rng = np.random.default_rng(0)
    damaged = tmp_path / "damaged.json"
    for at in rng.choice(len(written), size=120, replace=False):
        damaged.write_bytes(_flipped(written, int(at), rng))
        try:
            load(damaged)
        except PolicyFileError:
            continue
        # accepted only if it reads back as the very document written (e.g. 1e-05 as 1E-05)
        assert json.loads(damaged.read_bytes()) == original, f"byte {at} flipped unnoticed"


def test_one_changed_digit_is_one_line_naming_the_mismatch(trained, tmp_path, capsys):
    _, policy = trained
    text = policy.read_text()
    at = text.index('"weights":[[') + len('"weights":[[')
    at += next(i for i, c in enumerate(text[at:]) if c.isdigit())
    edited = tmp_path / "edited.json"
    edited.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :])
    assert main(["evaluate", "--policy", str(edited)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"advonline: error: policy file {edited} is corrupted: checksum mismatch"]


def test_the_last_two_checkpoints_are_kept(trained):
    folder, _ = trained
    assert int(checkpoint.load(folder)[0].step) == 4
    previous = folder / checkpoint.PREVIOUS_NAME
    assert previous.is_file()
    assert previous.read_bytes() != checkpoint.checkpoint_path(folder).read_bytes()
    copy = folder.parent / "previous-only"
    copy.mkdir()
    (copy / checkpoint.CHECKPOINT_NAME).write_bytes(previous.read_bytes())
    assert int(checkpoint.load(copy)[0].step) == 3  # a checkpoint after every epoch


def test_a_checkpoint_with_a_flipped_byte_is_refused_and_the_previous_offered(
    trained, tmp_path, capsys
):
    folder, _ = trained
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    written = checkpoint.checkpoint_path(folder).read_bytes()
    previous = (folder / checkpoint.PREVIOUS_NAME).read_bytes()
    (damaged / checkpoint.PREVIOUS_NAME).write_bytes(previous)
    path = checkpoint.checkpoint_path(damaged)
    rng = np.random.default_rng(1)
    for at in [len(written) // 2, *rng.choice(len(written), size=12, replace=False)]:
        path.write_bytes(_flipped(written, int(at), rng))
        with pytest.raises(checkpoint.CheckpointError):
            checkpoint.load(damaged)
    path.write_bytes(_flipped(written, len(written) // 2, rng))
    before = path.read_bytes()
    assert main(["export", "--checkpoint", str(damaged), "--out", str(tmp_path / "p.json")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1
    assert f"checkpoint {path} is corrupted: checksum mismatch" in error[0]
    assert f"the previous checkpoint {damaged / checkpoint.PREVIOUS_NAME} is intact" in error[0]
    assert path.read_bytes() == before and not (tmp_path / "p.json").exists()
    (damaged / checkpoint.PREVIOUS_NAME).write_bytes(before)  # both damaged: nothing offered
    assert main(["export", "--checkpoint", str(damaged), "--out", str(tmp_path / "p.json")]) == 2
    assert "no intact previous checkpoint" in capsys.readouterr().err
    (damaged / checkpoint.PREVIOUS_NAME).write_bytes(previous)
    path.unlink()  # the current one removed by hand (a save never leaves the previous alone)
    assert main(["export", "--checkpoint", str(damaged), "--out", str(tmp_path / "p.json")]) == 2
    error = capsys.readouterr().err
    assert f"no checkpoint at {path}; the previous checkpoint" in error
    assert "rename that one" in error and "aside" not in error
    resumed = tmp_path / "resumed"  # and a resume is refused alike, not started afresh
    resumed.mkdir()
    for entry in folder.iterdir():
        if entry.name != checkpoint.CHECKPOINT_NAME:
            (resumed / entry.name).write_bytes(entry.read_bytes())
    config = folder.parent / "tiny.toml"
    assert main(["train", str(config), "--out", str(resumed), "--resume", "--quiet"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    assert not checkpoint.checkpoint_path(resumed).exists()


def test_a_checkpoint_without_a_checksum_is_refused_and_a_policy_file_loads_with_a_note(
    trained, tmp_path, capsys
):
    folder, policy = trained
    old = tmp_path / "old-run"
    old.mkdir()
    payload = checksums.unframed(
        checkpoint.checkpoint_path(folder).read_bytes(), "checkpoint", ValueError
    )
    (old / checkpoint.CHECKPOINT_NAME).write_bytes(payload)  # as written before checksums
    out = tmp_path / "from-old.json"
    assert main(["export", "--checkpoint", str(old), "--out", str(out), "--no-measure"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "has no checksum: not a checkpoint of this version" in error
    assert not out.exists()
    document = json.loads(policy.read_text())
    for key in (checksums.KEY, checksums.SCHEME_KEY):
        del document[key]
    unsigned = tmp_path / "unsigned.json"
    unsigned.write_text(json.dumps(document))
    with pytest.warns(checksums.UnverifiedFile, match="loaded unverified"):
        assert load(unsigned).kind == load(policy).kind
