"""Numbers read from a user's file (a policy file), with NumPy alone: a loader that needs no
JAX can use it. Anything but numbers (strings, booleans, nested objects) is refused, never
converted."""

from __future__ import annotations

import numpy as np


def number_array(value, what: str, error: type[Exception]) -> np.ndarray:
    """``value`` (a JSON number or nested lists of them) as a float64 array; ``error`` names
    ``what`` when it holds anything else or is ragged."""
    try:
        array = np.asarray(value)
    except ValueError:  # ragged rows
        raise error(f"{what} must be a regular array of numbers") from None
    if array.dtype.kind not in "iuf":
        raise error(f"{what} must be numbers")
    return array.astype(np.float64)


def number(value, what: str, error: type[Exception]) -> float:
    """A JSON number (never a boolean or a string); ``error`` names ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} must be a number, got {value!r}")
    return float(value)
