"""What an oracle-loop run's archive holds, for people: one row per archived instance, and
the instances themselves as buyer traces that ``advonline evaluate --instances`` reads.

Each row gives where the instance came from (the epoch, and whether the epoch's oracles or
the stronger probe found it), its weight in the adversary's equilibrium mixture, its offline
optimum, and its ratio ``OPT / E[ALG]`` against the run's current network and against the
network the run delivers (the best guarantee so far; a delivered mixture of snapshots by its
weighted payoff), both exact (backward induction). The
ratios are computed here, outside ``jit`` apart from the payoff evaluation.
"""

from __future__ import annotations

import csv
from pathlib import Path

import jax
import numpy as np

from advonline import archive as archives
from advonline.game import Game
from advonline.oracle_loop import OracleState, delivered_mixture, payoff_matrix
from advonline.ratio import ratios_of_payoffs


def _ratios(game: Game, params: dict, archive: archives.Archive) -> np.ndarray:
    stacked = jax.tree.map(lambda leaf: leaf[None], params)
    return ratios_of_payoffs(payoff_matrix(game, stacked, archive.types, archive.optimum)[0])


def _delivered_ratios(game: Game, state: OracleState) -> np.ndarray:
    """Ratios of every archive slot against what the run delivers: its best network, or the
    mixture of snapshots (weighted payoffs: one member drawn per input)."""
    archive, mixture = state.archive, delivered_mixture(game, state)
    if mixture is None:
        return _ratios(game, state.best_algorithm, archive)
    payoffs = payoff_matrix(game, mixture.members.params, archive.types, archive.optimum)
    return ratios_of_payoffs(np.asarray(mixture.weights, np.float64) @ np.asarray(payoffs))


def worst_delivered(game: Game, state: OracleState) -> float:
    """The worst exact ratio, against what the run delivers, of any archived instance (0 for
    an empty archive): a ratio a real instance attains, so a lower bound on the delivered
    policy's CR."""
    slots = archives.instance_slots(state.archive)
    return float(_delivered_ratios(game, state)[slots].max()) if len(slots) else 0.0


def archive_rows(game: Game, state: OracleState) -> list[dict]:
    """One dict per archived instance, hardest against what the run delivers first."""
    archive = state.archive
    slots = archives.instance_slots(archive)
    current = _ratios(game, state.algorithm, archive)
    delivered = _delivered_ratios(game, state)
    instances = game.adversary.instances(archive.types[slots], np.float32)
    size = np.asarray(instances.demands).sum(-1)  # [N', T] total demand of each buyer
    buyers = (size > 0).sum(-1)
    densities = np.where(size > 0, np.asarray(instances.values) / np.maximum(size, 1e-30), np.nan)
    rows = []
    for index, slot in enumerate(slots):
        rows.append(
            {
                "slot": int(slot),
                "found_at_epoch": int(archive.found_at[slot]),
                "found_by": archives.ORIGINS[int(archive.origin[slot])],
                "mixture_weight": float(state.adversary_mixture[slot]),
                "optimum": float(archive.optimum[slot]),
                "ratio_current": float(current[slot]),
                "ratio_delivered": float(delivered[slot]),
                "buyers": int(buyers[index]),
                "lowest_density": float(np.nanmin(densities[index])) if buyers[index] else None,
                "highest_density": float(np.nanmax(densities[index])) if buyers[index] else None,
            }
        )
    rows.sort(key=lambda row: (-row["ratio_delivered"], row["slot"]))
    return rows


def write_traces(game: Game, state: OracleState, folder: str | Path) -> list[Path]:
    """Every archived instance as ``slot-<n>.csv`` in the new folder ``folder``: one row per
    round (columns ``value`` and ``demand``, or ``demand_1..K``), a round without a buyer
    written as value 0 and demand 0, so the trace keeps the instance's horizon."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    archive = state.archive
    slots = archives.instance_slots(archive)
    with jax.enable_x64(True):  # the vocabulary's exact densities and demands
        instances = game.adversary.instances(archive.types[slots], np.float64)
        values, demands = np.asarray(instances.values), np.asarray(instances.demands)
    resources = demands.shape[-1]
    header = (
        ["value", "demand"]
        if resources == 1
        else ["value"] + [f"demand_{k + 1}" for k in range(resources)]
    )
    written = []
    for index, slot in enumerate(slots):
        path = folder / f"slot-{slot}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for value, demand in zip(values[index], demands[index], strict=True):
                writer.writerow([repr(float(value)), *(repr(float(d)) for d in demand)])
        written.append(path)
    return written
