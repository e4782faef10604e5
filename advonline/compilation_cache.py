"""JAX's persistent compilation cache for the command line: a second run of a config loads
its compiled programs from disk instead of compiling them again.

Compiling is a large share of a short run's wall time on a CPU (figures in docs/results.md,
"time to certificate"). The cache holds XLA's
executables keyed by the program, the device and the versions, so a cached program computes
exactly what a freshly compiled one does.

Where: ``ADVONLINE_COMPILATION_CACHE`` names the folder; ``off`` turns the cache off. Unset,
it is ``$XDG_CACHE_HOME/advonline/jax`` (``~/.cache/advonline/jax``). A cache JAX was
already given (``JAX_COMPILATION_CACHE_DIR``) is left as it is. A folder that cannot be made
leaves the cache off: it is an optimisation, never a reason to stop.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

VARIABLE = "ADVONLINE_COMPILATION_CACHE"


def chosen_folder(variable: str, name: str) -> Path | None:
    """The cache folder the environment variable ``variable`` names (None where it says
    ``off``); unset, ``name`` in advonline's folder of the user's cache,
    ``$XDG_CACHE_HOME/advonline/NAME`` (else ``~/.cache/advonline/NAME``)."""
    chosen = os.environ.get(variable, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "advonline" / name


def folder() -> Path | None:
    """Where the cache lives for this process (None: off)."""
    return chosen_folder(VARIABLE, "jax")


def enable() -> Path | None:
    """Turn the persistent cache on (every compiled program, however small) and return its
    folder, or None when it stays off."""
    if jax.config.jax_compilation_cache_dir:  # given to JAX (JAX_COMPILATION_CACHE_DIR)
        return Path(jax.config.jax_compilation_cache_dir)
    where = folder()
    if where is None:
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(where))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return where
