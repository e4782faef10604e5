"""The one-way trading policy file: JSON with the setting and the conversion curve on its rate
grid. Loading it needs NumPy only (no JAX), so a trading service can use the learned curve
as it is: between grid rates the curve is linear in the rate, as in training and in the
certificate, whose ratio holds for every rate in ``[m, M]`` over the setting's ``T`` rounds
(more rounds: the curve's ratio over every horizon, ``exact.supremum``).
"""

from __future__ import annotations

import numpy as np

from advonline.errors import InputError
from advonline.file_arrays import number_array

FORMAT = "advonline-one-way-trading-curve"

#: How the curve reads between grid rates; a file without it was written when curves held
#: their value between grid rates, and is refused rather than read differently.
BETWEEN = "linear"


class PolicyFileError(InputError):
    """A policy file that is not a one-way trading curve."""


class NumpyCurve:
    """A loaded curve: ``target(rate) -> fraction to have converted``, NumPy only."""

    def __init__(self, rates: np.ndarray, fractions: np.ndarray):
        self.rates = rates
        self.fractions = fractions

    def target(self, rate: float) -> float:
        """The fraction to have converted once ``rate`` has been seen: linear between grid
        rates, a rate outside the grid read as its nearest end (as the simulator reads it)."""
        return float(np.interp(rate, self.rates, self.fractions))

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
    if document.get("between") != BETWEEN:
        raise PolicyFileError(
            f"{where}: 'between' must be {BETWEEN!r} (a file without it holds its curve "
            "between grid rates, as curves were once written; export the run again)"
        )
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
