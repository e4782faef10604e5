"""The ski rental policy file: JSON with the setting and the rule's running chance of owning
the skis. Loading it needs NumPy only (no JAX): a booking service draws the buying day once
per customer with :meth:`NumpyRule.buying_day` and buys on that morning if the season is
still on.
"""

from __future__ import annotations

import numpy as np

from advonline.errors import InputError
from advonline.file_arrays import number_array

FORMAT = "advonline-ski-rental-rule"


class PolicyFileError(InputError):
    """A policy file that is not a ski rental rule."""


class NumpyRule:
    """A loaded rule: ``owned[t]`` the chance the skis are owned on day ``t + 1``."""

    def __init__(self, owned: np.ndarray):
        self.owned = owned

    def buying_day(self, rng: np.random.Generator) -> int | None:
        """A draw of the day (1-based) on whose morning to buy; None: never buy."""
        day = int(np.searchsorted(self.owned, rng.uniform(), side="right"))
        return day + 1 if day < self.owned.size else None


def load(document: dict) -> tuple[dict, NumpyRule]:
    """The setting (as described in the file) and the rule it holds; PolicyFileError says
    what is wrong with a file that is not one."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise PolicyFileError(f"not a ski rental policy file (format {FORMAT!r} expected)")
    where = "ski rental policy file"
    setting = document.get("setting")
    if not isinstance(setting, dict):
        raise PolicyFileError(f"{where}: no setting")
    for key in ("buy", "rounds"):
        value = setting.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PolicyFileError(f"{where}: setting.{key} must be a whole number >= 1")
    owned = number_array(document.get("owned"), f"{where}: owned", PolicyFileError)
    if owned.shape != (setting["rounds"],):
        raise PolicyFileError(f"{where}: need {setting['rounds']} values of owned")
    slack = 1e-9  # what writing a float32 in decimal may leave
    inside = np.all((owned >= -slack) & (owned <= 1 + slack))
    if not (np.all(np.isfinite(owned)) and inside and np.all(np.diff(owned) >= -slack)):
        raise PolicyFileError(f"{where}: owned must lie in [0, 1] and never decrease")
    return setting, NumpyRule(np.maximum.accumulate(np.clip(owned, 0.0, 1.0)))
