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
    except (TypeError, ValueError):  # ragged rows
        raise error(f"{what} must be a regular array of numbers") from None
    if array.dtype.kind not in "iuf" or _holds_boolean(value):
        raise error(f"{what} must be numbers")
    return array.astype(np.float64)


def _holds_boolean(value) -> bool:
    """Whether the nested lists ``value`` hold a boolean anywhere: NumPy reads
    ``[true, 1.5]`` as ``[1.0, 1.5]``, so a boolean among numbers is found here. Each list's
    element types are collected at C speed (``map(type, ...)``), and only lists are walked
    into: a policy file's arrays hold millions of numbers."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            kinds = set(map(type, item))
            if bool in kinds:
                return True
            if list in kinds:
                pending.extend(element for element in item if isinstance(element, list))
        elif isinstance(item, bool):
            return True
    return False


def number(value, what: str, error: type[Exception]) -> float:
    """A JSON number (never a boolean or a string); ``error`` names ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} must be a number, got {value!r}")
    return float(value)
