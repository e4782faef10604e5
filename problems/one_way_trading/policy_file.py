"""The one-way trading policy file: JSON with the setting and the conversion curve on its rate
grid. Loading it needs NumPy only (no JAX), so a trading service can use the learned curve
as it is: between grid rates the curve holds the value of the grid rate below, as in
training and in the certificate, whose ratio holds for every rate in ``[m, M]``.
"""

from __future__ import annotations

import numpy as np

from advonline.errors import InputError
from advonline.file_arrays import number_array

FORMAT = "advonline-one-way-trading-curve"

#: Relative slack when a rate is placed on the grid (as the simulator's).
GRID_SLACK = 1e-6


class PolicyFileError(InputError):
    """A policy file that is not a one-way trading curve."""


class NumpyCurve:
    """A loaded curve: ``target(rate) -> fraction to have converted``, NumPy only."""

    def __init__(self, rates: np.ndarray, fractions: np.ndarray):
        self.rates = rates
        self.fractions = fractions

    def target(self, rate: float) -> float:
        index = int(np.searchsorted(self.rates, rate * (1 + GRID_SLACK), side="right")) - 1
        return float(self.fractions[index]) if index >= 0 else 0.0

    def trade(self, rates) -> np.ndarray:
        """What it converts at each of ``rates`` (the leftover converts at m at the end)."""
        converted, amounts = 0.0, []
        for rate in rates:
            amount = min(max(self.target(rate) - converted, 0.0), 1.0 - converted)
            converted += amount
            amounts.append(amount)
        return np.asarray(amounts)


def load(document: dict) -> tuple[dict, NumpyCurve]:
    """The setting (as described in the file) and the NumPy policy a policy file holds;
    PolicyFileError says what is wrong with one that does not."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise PolicyFileError(f"not a one-way trading policy file (format {FORMAT!r} expected)")
    setting = document.get("setting")
    where = "one-way trading policy file"
    levels = setting.get("levels") if isinstance(setting, dict) else None
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
        raise PolicyFileError(f"{where}: setting.levels must be a whole number >= 2")
    rates = number_array(document.get("rates"), f"{where}: rates", PolicyFileError)
    fractions = number_array(document.get("fractions"), f"{where}: fractions", PolicyFileError)
    if rates.shape != (levels,) or fractions.shape != (levels,):
        raise PolicyFileError(f"{where}: need {levels} rates and fractions")
    if not np.all(np.isfinite(rates)) or not np.all(np.diff(rates) > 0):
        raise PolicyFileError(f"{where}: rates must be finite and increasing")
    slack = 1e-9  # what writing a float32 fraction in decimal may leave
    inside = np.all((fractions >= -slack) & (fractions <= 1 + slack))
    if not (np.all(np.isfinite(fractions)) and inside and np.all(np.diff(fractions) >= -slack)):
        raise PolicyFileError(f"{where}: fractions must lie in [0, 1] and never decrease")
    return setting, NumpyCurve(rates, np.clip(fractions, 0.0, 1.0))
