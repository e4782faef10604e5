"""Strict numerics for every test: no silent rank promotion.

The suite's time is mostly compilation of tiny programs, so two settings make it cheaper:

- XLA skips most of its optimisation passes (``jax_disable_most_optimizations``): compiling
  is faster and the tiny programs run no slower to matter; they compute the same functions,
  up to float rounding (about a fifth off the evaluator and game tests on 2 CPU cores);
- compiled programs are cached on disk for the session (a temporary folder, removed at the
  end), so a program compiled again, by a fresh ``jax.jit`` of the same function or by a
  subprocess running the CLI, is read back instead of recompiled.

Subprocesses inherit both through the environment.
"""

import os
import shutil
import tempfile

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
jax.config.update(
    "jax_disable_most_optimizations",
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"].lower() in ("1", "true"),
)

_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:  # subprocesses inherit the variables and share the folder
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="advonline-tests-jax-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.2"
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")),
)


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
