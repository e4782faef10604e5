"""Posted pricing's policy files as written (format and reader in
:mod:`posted_price.policy_file`).

- Version 2 (the default, any K) stores the pricing network: its layer weights, written as the
  shortest decimals that read back to the same float32 values, so a file loaded for evaluation
  is the checkpoint's network bit for bit. A delivered mixture of snapshots (kind ``mixture``,
  K >= 2) stores every member network with the probability of drawing it.
- Version 1 (``--table``, K = 1) tabulates the policy on the simulator's own utilisation grid,
  so that the file posts exactly what the checkpoint posts in every state the simulator can
  reach. For several resources it holds one table per resource, each at its own units sold
  (the lifted tables of certificate descent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from advonline.export import SIGNIFICANT_DIGITS, ExportError, float32_list, significant
from advonline.mixture import SnapshotMixture
from advonline.problems.posted_price.model import Policy, PriceDistribution, Setting, price_table
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.policy_file import FORMAT


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
        table = jax.tree.map(lambda column: np.asarray(column)[None], table)
    return tables_document(setting, table, policy.deterministic, provenance, round_dependent)


def tables_document(
    setting: Setting,
    table: PriceDistribution,
    deterministic: bool,
    provenance: dict,
    round_dependent: bool = True,
    digits: int | None = SIGNIFICANT_DIGITS,
) -> dict:
    """The version-1 JSON document of one table per resource, ``[K, T, G + 1, A]`` on
    ``setting``'s utilisation grid: resource k posts row ``[k, t, g]`` in round t when ``g``
    of its own grid units are sold (one resource's table posted on every resource, as
    :func:`~posted_price.product_grid.lift_table` posts it, is K copies of it). Each
    resource's atoms must be the same in every state. ``round_dependent=False`` stores round
    0's rows for every round. Probabilities keep ``digits`` significant digits, or with None
    every digit of their float64 (the file is then the table exactly)."""
    prices, probs = np.asarray(table.prices), np.asarray(table.probs)
    if not round_dependent:
        prices, probs = prices[:, 0], probs[:, 0]
    grid = np.arange(setting.grid_size + 1) / setting.grid_size
    resources = []
    for own_prices, own_probs in zip(prices, probs, strict=True):
        if deterministic:
            resources.append({"prices": own_prices[..., 0].tolist()})
            continue
        atoms = own_prices.reshape(-1, own_prices.shape[-1])[0]
        if not np.all(own_prices == atoms):
            raise ExportError("a version-1 table posts the same atoms in every state")
        resources.append(
            {
                "price_atoms": atoms.tolist(),
                "probabilities": (
                    own_probs if digits is None else significant(own_probs, digits)
                ).tolist(),
            }
        )
    return {
        "format": FORMAT,
        "version": 1,
        "kind": "deterministic" if deterministic else "randomised",
        "setting": setting.describe(),
        "utilisation_grid": grid.tolist(),
        "round_dependent": round_dependent,
        "resources": resources,
        "provenance": provenance,
    }
