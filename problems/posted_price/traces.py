"""A user's own buyer trace: CSV with one buyer per row, columns ``value`` and ``demand``
(K = 1) or ``value, demand_1..demand_K``. Read with NumPy alone, validated with clear errors."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from advonline.errors import InputError, quoted, shown
from advonline.folders import read_text


class TraceError(InputError):
    """A trace file that cannot be read as buyers."""


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Values ``[T]`` and demands ``[T, K]`` (float64) from the CSV at ``path``."""
    path = Path(path)
    text = read_text(path, "trace", TraceError)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        raise TraceError(f"trace {path} is empty")
    header = [name.strip() for name in rows[0]]
    if "value" not in header:
        columns = shown(", ".join(header), 200)
        raise TraceError(f"trace {path} has no 'value' column (columns: {columns})")
    demand_columns = _demand_columns(header, path)
    # blank lines (a spreadsheet's file often ends in some) hold no buyer
    buyers = [(line, row) for line, row in enumerate(rows[1:], start=2) if row]
    if not buyers:
        raise TraceError(f"trace {path} has a header but no buyers")
    wanted = [header.index("value")] + [header.index(name) for name in demand_columns]
    table = np.empty((len(buyers), len(wanted)))
    for buyer, (line, row) in enumerate(buyers):
        if len(row) != len(header):
            raise TraceError(
                f"trace {path} line {line}: {len(row)} cells, header has {len(header)}"
            )
        for column, index in enumerate(wanted):
            cell = row[index].strip()
            try:
                number = float(cell)
            except ValueError:
                raise TraceError(
                    f"trace {path} line {line}: {header[index]}={quoted(cell)} is not a number"
                ) from None
            if not math.isfinite(number) or number < 0:
                given = f"{header[index]}={shown(cell)}"
                raise TraceError(f"trace {path} line {line}: {given} must be finite and >= 0")
            table[buyer, column] = number
    return table[:, 0], table[:, 1:]


def _demand_columns(header: list[str], path: Path) -> list[str]:
    if "demand" in header:
        return ["demand"]
    count = 0
    while f"demand_{count + 1}" in header:
        count += 1
    if count == 0:
        raise TraceError(
            f"trace {path} needs a 'demand' column (K = 1) or 'demand_1'..'demand_K' columns"
        )
    return [f"demand_{k}" for k in range(1, count + 1)]


def check_buyers(
    values: np.ndarray,
    demands: np.ndarray,
    low: float,
    high: float,
    capacities: tuple[float, ...],
    path: str | Path,
) -> None:
    """Refuse a buyer the setting does not allow: a value density ``value / sum(demand)``
    outside [L, U] (relative tolerance 1e-9), a demand above a resource's capacity, or a value
    without a demand. A row with no demand and no value is a round where nobody came."""
    with np.errstate(over="ignore"):  # an overflowing total or density is refused below
        total = demands.sum(axis=1)
        densities = values / np.where(total == 0, 1.0, total)
    for index in range(len(values)):
        line = index + 2
        if total[index] == 0:
            if values[index] > 0:
                raise TraceError(f"trace {path} line {line}: a value without a demand")
            continue
        density = densities[index]
        if not low * (1 - 1e-9) <= density <= high * (1 + 1e-9):
            raise TraceError(
                f"trace {path} line {line}: value density {density:.6g} is outside "
                f"[L, U] = [{low:g}, {high:g}] (set --setting low=... and --setting high=... "
                "to the trace's range)"
            )
        over = np.flatnonzero(demands[index] > np.asarray(capacities) * (1 + 1e-9))
        if over.size:
            k = int(over[0])
            raise TraceError(
                f"trace {path} line {line}: demand {demands[index, k]:g} on resource {k + 1} "
                f'exceeds its capacity {capacities[k]:g} (set --setting "capacities=[...]")'
            )
