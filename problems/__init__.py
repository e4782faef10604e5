"""The registry of online problems. Each problem is a package ``problems/<name>/`` (installed as
``advonline.problems.<name>``) whose ``PROBLEM`` is an :class:`advonline.problem.Problem`; the
core reaches a problem only through :func:`get`, by the name a config gives it.

A problem outside this repository comes in one of two ways:

- **an installed package** declares it under the entry-point group
  :data:`ENTRY_POINT_GROUP` (``[project.entry-points."advonline.problems"]`` in its
  ``pyproject.toml``: ``rent-or-buy = "rentorbuy.problem"``, a module that defines
  ``PROBLEM``, or ``"module:attribute"``). Every command then sees it. A declared name that a
  built-in problem or a second package already uses is ignored with one note naming the
  packages; a package whose problem cannot be loaded is refused in one line, naming it, when
  that problem is asked for, and never breaks the others. Nothing is imported until then;
- **a script** calls :func:`register` with the module's name before it runs a command.

This module imports no JAX (a policy file's NumPy-only loader reaches the registry too).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings

from advonline.errors import InputError

#: The problem a config without a ``[problem]`` table describes.
DEFAULT = "posted-price"

#: The entry-point group an installed package declares its problems under.
ENTRY_POINT_GROUP = "advonline.problems"

_MODULES: dict[str, str] = {
    "posted-price": "advonline.problems.posted_price.problem",
    "one-way-trading": "advonline.problems.one_way_trading.problem",
    "adwords": "advonline.problems.adwords.problem",
    "ski-rental": "advonline.problems.ski_rental.problem",
}

#: The built-in problems (the ones this repository ships and tests).
BUILT_IN = tuple(_MODULES)


class PluginNote(UserWarning):
    """A note about an installed package's problem (the command line prints it as one
    line)."""


class PluginError(InputError):
    """An installed package's problem cannot be used; the message names the package."""


_plugins: dict[str, tuple[str, str]] | None = None  # name -> (entry point's value, package)


def _package(entry: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return "an installed package" if dist is None else f"package {dist.name} {dist.version}"


def installed() -> dict[str, tuple[str, str]]:
    """The problems installed packages declare, ``{name: (module[:attribute], package)}``,
    read once per process; clashes are left out with a :class:`PluginNote` each."""
    global _plugins
    if _plugins is None:
        declared: dict[str, list[tuple[str, str]]] = {}
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            declared.setdefault(entry.name, []).append((entry.value, _package(entry)))
        _plugins = {}
        for name, entries in declared.items():
            packages = " and ".join(package for _, package in entries)
            if name in BUILT_IN:
                warnings.warn(
                    f"problem {name!r} of {packages} is ignored: a built-in problem has that name",
                    PluginNote,
                    stacklevel=2,
                )
            elif len(entries) > 1:
                warnings.warn(
                    f"problem {name!r} is declared by {packages}; both are ignored",
                    PluginNote,
                    stacklevel=2,
                )
            else:
                _plugins[name] = entries[0]
    return _plugins


def register(name: str, module: str) -> None:
    """Make ``module`` (importable; it defines ``PROBLEM``) the problem called ``name``."""
    _MODULES[name] = module


def names() -> list[str]:
    """The registered problems' names: the built-in and registered ones, then the installed."""
    return list(_MODULES) + [name for name in installed() if name not in _MODULES]


def get(name: str):
    """The :class:`~advonline.problem.Problem` called ``name``; KeyError names the known ones,
    PluginError an installed package whose problem cannot be loaded."""
    if name in _MODULES:
        return importlib.import_module(_MODULES[name]).PROBLEM
    if name not in installed():
        raise KeyError(f"unknown problem {name!r}; known: {', '.join(names())}")
    value, package = installed()[name]
    return _load(name, value, package)


def _load(name: str, value: str, package: str):
    """The problem of an entry point's ``value`` (``module`` or ``module:attribute``)."""
    from advonline.problem import Problem

    module, _, attribute = value.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute or "PROBLEM")
    except Exception as error:  # any failure of a package's import is that package's
        first = (str(error).strip().splitlines() or [""])[0]
        raise PluginError(
            f"problem {name!r} of {package} cannot be loaded from {value!r}: "
            f"{type(error).__name__}: {first}"
        ) from None
    if not isinstance(found, Problem):
        raise PluginError(
            f"problem {name!r} of {package}: {value!r} gives a {type(found).__name__!r} "
            "object, not an advonline.problem.Problem"
        )
    if found.name != name:
        raise PluginError(
            f"problem {name!r} of {package}: its Problem is named {found.name!r}; the entry "
            "point and the Problem must use one name"
        )
    return found
