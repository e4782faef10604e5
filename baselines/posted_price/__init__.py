"""Classic online pricing algorithms, each ``make(setting) -> Policy`` (the learned signature)."""

from __future__ import annotations

from collections.abc import Callable

from advonline.baselines.posted_price import exponential, fixed, greedy, threshold
from advonline.problems.posted_price.model import Policy, Setting

BASELINES: dict[str, Callable[[Setting], Policy]] = {
    "threshold": threshold.make,
    "exponential": exponential.make,
    "greedy": greedy.make,
    "fixed": fixed.make,
}


def make_baseline(name: str, setting: Setting) -> Policy:
    """The baseline called ``name`` for ``setting``; KeyError names the known ones."""
    if name not in BASELINES:
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(sorted(BASELINES))}")
    return BASELINES[name](setting)
