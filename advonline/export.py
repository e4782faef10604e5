"""``advonline export``: a trained policy as an ``advonline.pricing-policy`` JSON document
(format in :mod:`posted_price.policy_file`).

- Version 2 (the default, any K) stores the pricing network: its layer weights, written as the
  shortest decimals that read back to the same float32 values, so a file loaded for evaluation
  is the checkpoint's network bit for bit. A delivered mixture of snapshots (kind ``mixture``,
  K >= 2) stores every member network with the probability of drawing it.
- Version 1 (``--table``, K = 1) tabulates the policy on the simulator's own utilisation grid,
  so that the file posts exactly what the checkpoint posts in every state the simulator can
  reach.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from advonline import __version__
from advonline.checkpoint import atomic_write
from advonline.configs import RunConfig
from advonline.folders import check_path
from advonline.mixture import SnapshotMixture
from advonline.networks import AlgorithmNetwork
from advonline.problems.posted_price.model import Policy, Setting, price_table
from advonline.problems.posted_price.policy_file import FORMAT

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


def network_document(
    setting: Setting,
    network: AlgorithmNetwork,
    params: dict,
    atoms: tuple[float, ...],
    deterministic: bool,
    provenance: dict,
) -> dict:
    """The version-2 JSON document of a pricing network (any K): the randomised policy, or with
    ``deterministic`` its median read-out."""
    dense = params["params"]
    layers = [
        {
            "weights": float32_list(dense[f"Dense_{i}"]["kernel"]),
            "bias": float32_list(dense[f"Dense_{i}"]["bias"]),
        }
        for i in range(network.layers + 1)
    ]
    return {
        "format": FORMAT,
        "version": 2,
        "kind": "deterministic" if deterministic else "randomised",
        "setting": setting.describe(),
        "network": {
            "inputs": "per-resource" if network.shared_resources else "joint",
            "round_input": network.use_round,
            "activation": "tanh",
            "layers": layers,
            "price_atoms": list(atoms),
        },
        "provenance": provenance,
    }


def mixture_document(setting: Setting, mixture: SnapshotMixture, provenance: dict) -> dict:
    """The version-2 JSON document of a mixture of pricing networks chosen once per input
    (kind ``mixture``, K >= 2): each member's ``network`` with its ``weight``."""
    members = []
    for index in range(mixture.size):
        member = mixture.member(index)
        document = network_document(
            setting, member.network, member.params, member.atoms, False, provenance
        )
        members.append({"weight": float(mixture.weights[index]), "network": document["network"]})
    return {
        "format": FORMAT,
        "version": 2,
        "kind": "mixture",
        "setting": setting.describe(),
        "members": members,
        "provenance": provenance,
    }


def policy_document(
    setting: Setting, policy: Policy, round_dependent: bool, provenance: dict
) -> dict:
    """The version-1 JSON document of ``policy`` on ``setting``'s utilisation grid (K = 1).

    ``round_dependent=False`` stores one table for every round: right only for policies that
    ignore the round (a network trained with ``round_input = false``).
    """
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)  # [T, G + 1, A]
        prices, probs = np.asarray(table.prices), np.asarray(table.probs)
    if not round_dependent:
        prices, probs = prices[0], probs[0]
    grid = np.arange(setting.grid_size + 1) / setting.grid_size
    if policy.deterministic:
        resource = {"prices": prices[..., 0].tolist()}
        kind = "deterministic"
    else:
        atoms = prices.reshape(-1, prices.shape[-1])[0]
        resource = {
            "price_atoms": atoms.tolist(),
            "probabilities": significant(probs, SIGNIFICANT_DIGITS).tolist(),
        }
        kind = "randomised"
    return {
        "format": FORMAT,
        "version": 1,
        "kind": kind,
        "setting": setting.describe(),
        "utilisation_grid": grid.tolist(),
        "round_dependent": round_dependent,
        "resources": [resource],
        "provenance": provenance,
    }


def provenance(
    algorithm: str, run_config: RunConfig, steps: int, checkpoint: str, measured: dict | None
) -> dict:
    """Where a policy came from: the config it was trained with, how long, and what it measured."""
    return {
        "algorithm": algorithm,
        "package": "advonline",
        "package_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "checkpoint": checkpoint,
        "seed": run_config.game.seed,
        "training_steps": steps,
        "config": run_config.to_dict(),
        "measured": measured,
    }


def check_target(path: str | Path) -> Path:
    """Refuse a target that exists: an exported policy is never overwritten."""
    path = check_path(path)
    if path.exists():
        raise ExportError(f"{path} exists; not overwritten (choose another --out)")
    return path


def write(path: str | Path, document: dict) -> None:
    """Write ``document`` to a new file atomically (parent folders created)."""
    path = check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(document, separators=(",", ":")).encode())
