"""Ski rental written again by hand, for the checks (``advonline check ski-rental``)."""

from __future__ import annotations

import numpy as np

from advonline.problems.ski_rental.model import Setting


def paid(setting: Setting, rule, season) -> float:
    """Each morning of the season, buy what the rule buys that day and rent while not owned."""
    owned, cost, before = np.asarray(rule.owned, np.float64), 0.0, 0.0
    for day in range(int(season)):
        cost += setting.buy * (owned[day] - before) + (1.0 - owned[day])
        before = owned[day]
    return cost


def optimum(setting: Setting, season) -> float:
    """OPT by trying every buying day and never buying, knowing the season."""
    season = int(season)
    return float(min([season] + [day - 1 + setting.buy for day in range(1, season + 1)]))
