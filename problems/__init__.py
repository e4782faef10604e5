"""The registry of online problems. Each problem is a package ``problems/<name>/`` (installed as
``advonline.problems.<name>``) whose ``PROBLEM`` is an :class:`advonline.problem.Problem`; the
core reaches a problem only through :func:`get`, by the name a config gives it.

A problem outside this repository registers itself with :func:`register`, naming the module that
defines its ``PROBLEM``.
"""

from __future__ import annotations

import importlib

#: The problem a config without a ``[problem]`` table describes.
DEFAULT = "posted-price"

_MODULES: dict[str, str] = {
    "posted-price": "advonline.problems.posted_price.problem",
    "one-way-trading": "advonline.problems.one_way_trading.problem",
    "adwords": "advonline.problems.adwords.problem",
}


def register(name: str, module: str) -> None:
    """Make ``module`` (importable; it defines ``PROBLEM``) the problem called ``name``."""
    _MODULES[name] = module


def names() -> list[str]:
    """The registered problems' names."""
    return list(_MODULES)


def get(name: str):
    """The :class:`~advonline.problem.Problem` called ``name``; KeyError names the known ones."""
    if name not in _MODULES:
        raise KeyError(f"unknown problem {name!r}; known: {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name]).PROBLEM
