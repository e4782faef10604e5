"""``advonline export``: what every policy file shares, whatever the problem: where the policy
came from (:func:`provenance`), numbers written exactly (:func:`float32_list`) or compactly
(:func:`significant`), a write that never overwrites and carries the file's checksum
(:func:`write`) and a read that checks it (:func:`read`). The document itself
is the problem's (for posted pricing :mod:`posted_price.policy_writer`)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

from advonline import __version__, checksums, folders
from advonline.errors import InputError
from advonline.folders import atomic_write, check_path

SIGNIFICANT_DIGITS = 9  # probabilities keep 9 significant digits (above float32's ~7)


class ExportError(ValueError):
    """An export that cannot be written (one-line message)."""


def significant(values: np.ndarray, digits: int) -> np.ndarray:
    """``values`` (non-negative) rounded to ``digits`` significant digits, so the JSON stays
    compact while tiny probabilities stay non-zero (rounding to fixed decimals would zero them,
    and a worst case can hinge on them: the DP bound of a policy is often 1 / its smallest
    probability of a low price)."""
    values = np.asarray(values, np.float64)
    rounded = values.copy()
    positive = values > 0
    scale = 10.0 ** (digits - 1 - np.floor(np.log10(values[positive])))
    rounded[positive] = np.round(values[positive] * scale) / scale
    return rounded


def float32_list(values) -> list:
    """``values`` as nested lists of the shortest decimals that read back as the same float32
    (``0.1`` rather than ``0.10000000149011612``): exact, and about half the text."""
    array = np.asarray(values, np.float32)
    shortest = np.array([float(str(value)) for value in array.ravel()], dtype=object)
    return shortest.reshape(array.shape).tolist()


def stamp() -> dict:
    """What every written policy says of its making: the package, its version, and when."""
    return {
        "package": "advonline",
        "package_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def provenance(
    algorithm: str, run_config, steps: int, checkpoint: str, measured: dict | None
) -> dict:
    """Where a policy came from: the run config it was trained with (any problem's), how
    long, and what it measured."""
    return {
        "algorithm": algorithm,
        **stamp(),
        "checkpoint": checkpoint,
        "seed": run_config.seed,
        "training_steps": steps,
        "config": run_config.to_tables(),
        "measured": measured,
    }


def check_target(path: str | Path) -> Path:
    """Refuse a target that exists: an exported policy is never overwritten."""
    path = check_path(path)
    if path.exists():
        raise ExportError(f"{path} exists; not overwritten (choose another --out)")
    return path


def write(path: str | Path, document: dict) -> None:
    """Write ``document`` to a new file atomically (parent folders created), carrying the
    SHA-256 of its content (:func:`checksums.signed`)."""
    path = check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(checksums.signed(document), separators=(",", ":"))
    atomic_write(path, text.encode())


def read_json(path: str | Path, what: str, error: type[Exception] = InputError):
    """The JSON document at ``path``; ``error`` (one line naming ``what``) says why it
    cannot be read."""
    text = folders.read_text(path, what, error)
    if not text.strip():
        raise error(f"{what} {path} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as problem:
        raise error(
            f"{what} {path} is not valid JSON (truncated?): {problem.msg} at line {problem.lineno}"
        ) from None
    except ValueError:  # a number past Python's limit on the digits of an integer
        raise error(f"{what} {path} is not valid JSON: a number too long to read") from None
    except RecursionError:
        raise error(f"{what} {path} nests too deeply to be read") from None


def read(path: str | Path) -> tuple[dict, bool]:
    """The policy file at ``path`` and whether it carries a checksum, which then matches
    (InputError when it does not). The caller notes an unverified file once it has read it
    as a policy, so a file that is not one gets one error only."""
    document = read_json(path, "policy file")
    return document, checksums.verified(document, f"policy file {path}", InputError)


#: The ``kind`` of a policy file that holds a mixture of snapshots of any problem.
MIXTURE_KIND = "snapshot-mixture"


def mixture_document(setting: dict, members: list[dict], weights, provenance: dict) -> dict:
    """The policy file of a mixture of snapshots drawn once per input, for any problem: the
    described ``setting``, each member's own policy file (the problem's export) with its
    weight, and the provenance. A user plays it by drawing one member with the weights before
    the first request and then running that member's file."""
    return {
        "format": "advonline-policy",
        "kind": MIXTURE_KIND,
        "setting": setting,
        "members": [
            {"weight": float(weight), "policy": member}
            for weight, member in zip(weights, members, strict=True)
        ],
        "provenance": provenance,
    }


def _restored(problem, document, what: str):
    """``problem.restore(document)``, its InputError naming the file (``what``), once the
    file's ``provenance``, where it has one, is an object with a string ``algorithm`` (the
    same for every problem's file)."""
    provenance = document.get("provenance", {}) if isinstance(document, dict) else {}
    if not isinstance(provenance, dict) or not isinstance(provenance.get("algorithm", ""), str):
        raise InputError(f"{what}: provenance must be an object with a string algorithm")
    try:
        return problem.restore(document)
    except InputError as error:
        raise InputError(f"{what}: {error}") from None


def restore(problem, document, what: str = "policy file"):
    """``(setting, policy)`` of a policy file ``document`` of ``problem``: the problem's own
    reader (``Problem.restore``), or for a mixture of snapshots (:data:`MIXTURE_KIND`) the
    mixture of its members, each read by the problem's reader. InputError says what is
    wrong."""
    if not (isinstance(document, dict) and document.get("kind") == MIXTURE_KIND):
        return _restored(problem, document, what)
    import jax
    import jax.numpy as jnp

    from advonline.mixture import SnapshotMixture

    members = document.get("members")
    if not isinstance(members, list) or not members:
        raise InputError(f"{what}: a mixture needs a non-empty list of members")
    weights, settings, policies = [], [], []
    for index, member in enumerate(members):
        where = f"{what} members[{index}]"
        if not isinstance(member, dict) or set(member) != {"weight", "policy"}:
            raise InputError(f"{where}: expected a table with a weight and a policy")
        weight = member["weight"]
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InputError(f"{where} weight: expected a number, got {weight!r}")
        if not 0 < weight <= 1:  # NaN and infinities fail too
            raise InputError(f"{where} weight must be a number in (0, 1], got {weight!r}")
        setting, policy = _restored(problem, member["policy"], where)
        weights.append(float(weight))
        settings.append(setting)
        policies.append(policy)
    if any(setting != settings[0] for setting in settings):
        raise InputError(f"{what}: the mixture's members have different settings")

    def plain(data):  # as JSON reads it back (lists, not tuples)
        return json.loads(json.dumps(data))

    if plain(document.get("setting")) != plain(settings[0].describe()):
        raise InputError(f"{what}: the mixture's setting is not its members'")
    if abs(sum(weights) - 1.0) > 1e-6:
        raise InputError(f"{what}: the members' weights sum to {sum(weights)!r}, not 1")
    try:
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *policies)
    except (ValueError, TypeError):
        raise InputError(f"{what}: the mixture's members are not networks of one shape") from None
    total = np.asarray(weights, np.float64)
    return settings[0], SnapshotMixture(stacked, jnp.asarray(total / total.sum(), jnp.float32))
