"""A user's own buyer trace: CSV with one buyer per row, columns ``value`` and ``demand``
(K = 1) or ``value, demand_1..demand_K``. Read with NumPy alone, validated with clear errors."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np


class TraceError(ValueError):
    """A trace file that cannot be read as buyers."""


def load_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Values ``[T]`` and demands ``[T, K]`` (float64) from the CSV at ``path``."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # spreadsheets write a BOM
            rows = list(csv.reader(handle))
    except OSError as error:
        raise TraceError(f"cannot read trace {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace {path} is not a text CSV file") from None
    if not rows:
        raise TraceError(f"trace {path} is empty")
    header = [name.strip() for name in rows[0]]
    if "value" not in header:
        raise TraceError(f"trace {path} has no 'value' column (columns: {', '.join(header)})")
    demand_columns = _demand_columns(header, path)
    if len(rows) < 2:
        raise TraceError(f"trace {path} has a header but no buyers")
    wanted = [header.index("value")] + [header.index(name) for name in demand_columns]
    table = np.empty((len(rows) - 1, len(wanted)))
    for line, row in enumerate(rows[1:], start=2):
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
                    f"trace {path} line {line}: {header[index]}={cell!r} is not a number"
                ) from None
            if not math.isfinite(number) or number < 0:
                raise TraceError(
                    f"trace {path} line {line}: {header[index]}={cell} must be finite and >= 0"
                )
            table[line - 2, column] = number
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
