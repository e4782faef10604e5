"""Strict numerics for every test: no silent rank promotion.

Compiled programs are also cached on disk for the session (a temporary folder, removed at the
end), so a program compiled again, by a fresh ``jax.jit`` of the same function or by a
subprocess running the CLI, is read back instead of recompiled.
"""

import os
import shutil
import tempfile

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")

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
