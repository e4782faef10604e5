"""What an oracle-loop run's archive holds, for people: one row per archived instance, and
the instances themselves as traces (CSV files; for posted pricing the buyer traces that
``advonline evaluate --instances`` reads).

Each row gives where the instance came from (the epoch, and whether the epoch's oracles or
the stronger probe found it), its weight in the adversary's equilibrium mixture, its offline
optimum, and its ratio ``OPT / E[ALG]`` against the run's current network and against the
network the run delivers (the best guarantee so far; a delivered mixture of snapshots by its
weighted payoff), both exact, and the problem's own summary of the instance
(:meth:`~posted_price.training.summaries`). The ratios are computed here, outside ``jit`` apart
from the payoff evaluation.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from advonline import archive as archives
from advonline.oracle_loop import OracleState, kept_ratios, network_ratios


def hardest_delivered(game, state: OracleState) -> tuple[np.ndarray, float]:
    """The archived instances ``[N, T]``, hardest against what the run delivers first, and
    the worst exact ratio among them (0 for an empty archive): a ratio a real instance
    attains, so a lower bound on the delivered policy's CR."""
    slots = archives.instance_slots(state.archive)
    if not len(slots):
        return np.zeros((0, state.archive.types.shape[1]), np.int32), 0.0
    ratios = kept_ratios(game, state)[slots]
    order = slots[np.argsort(-ratios, kind="stable")]
    return np.asarray(state.archive.types)[order], float(ratios.max())


def archive_rows(game, state: OracleState) -> list[dict]:
    """One dict per archived instance, hardest against what the run delivers first."""
    archive = state.archive
    slots = archives.instance_slots(archive)
    current = network_ratios(game, state.algorithm, archive)
    delivered = kept_ratios(game, state)
    summaries = game.summaries(archive.types[slots])
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
                **summaries[index],
            }
        )
    rows.sort(key=lambda row: (-row["ratio_delivered"], row["slot"]))
    return rows


def write_traces(game, state: OracleState, folder: str | Path) -> list[Path]:
    """Every archived instance as ``slot-<n>.csv`` in the new folder ``folder``: one row per
    round, the columns and numbers the problem's (:meth:`~posted_price.training.traces`), each
    number written exactly (``repr``)."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    slots = archives.instance_slots(state.archive)
    header, tables = game.traces(state.archive.types[slots])
    written = []
    for slot, table in zip(slots, tables, strict=True):
        path = folder / f"slot-{slot}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows([repr(float(x)) for x in row] for row in table)
        written.append(path)
    return written
