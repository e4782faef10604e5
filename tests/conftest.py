"""Strict numerics for every test: no silent rank promotion; and every measurement measured,
none taken from the user's measurement cache (off here: a test of the cache names its own
folder).

The suite's time is mostly compilation of tiny programs, so three settings make it cheaper:

- XLA skips most of its optimisation passes (``jax_disable_most_optimizations``): compiling
  is faster and the tiny programs run no slower to matter; they compute the same functions,
  up to float rounding (about a fifth off the evaluator and game tests on 2 CPU cores).
  ``make test-optimised`` runs the certificate tests with the passes on, as a run has them;
- XLA's CPU backend compiles fusions with its older emitters (as the package sets for every
  process, advonline/xla_cpu.py) and runtime, and each program's
  machine code in one piece rather than split for parallel code generation
  (:data:`FAST_COMPILE_FLAGS`): a quarter less compile time on the suite's programs, and a
  further tenth from the unsplit code generation. These flags are internal to XLA and a
  version that drops them aborts on them, so they are set only for the jaxlib versions they
  were measured on;
- compiled programs are cached on disk for the session (a temporary folder, removed at the
  end), so a program compiled again, by a fresh ``jax.jit`` of the same function or by a
  subprocess running the CLI, is read back instead of recompiled.

Subprocesses inherit all three through the environment. ``make test`` runs the files on every
core (pytest-xdist, ``-n auto --dist loadfile``: a file's module fixtures stay in one worker);
each worker caches in a folder of its own inside the session's: JAX writes a cache entry in
place, so a worker reading an entry another is still writing would find it truncated.
"""

import os
import shutil
import tempfile

import jax
import jaxlib
import pytest

# measured with jaxlib 0.10 on 2 CPU cores (with `-n 2`): the first two took the whole suite
# from 348 s to 261 s; the third takes a tenth off XLA's compile time (the two-resource run
# test's: 13.2 s -> 12.1 s)
FAST_COMPILE_FLAGS = " ".join(
    [
        "--xla_cpu_use_fusion_emitters=false",
        "--xla_cpu_use_thunk_runtime=false",
        "--xla_cpu_parallel_codegen_split_count=1",
    ]
)
if jaxlib.__version__.startswith("0.10.") and "xla_cpu_use" not in os.environ.get("XLA_FLAGS", ""):
    # read when the CPU backend starts (the first computation), so setting it here is in time
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE_FLAGS}".strip()

os.environ["ADVONLINE_MEASUREMENT_CACHE"] = "off"  # advonline/measurement_cache.py

jax.config.update("jax_numpy_rank_promotion", "raise")
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
jax.config.update(
    "jax_disable_most_optimizations",
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"].lower() in ("1", "true"),
)

_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:  # subprocesses inherit the variables and share the folder
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="advonline-tests-jax-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ["ADVONLINE_TESTS_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and os.environ.get("ADVONLINE_TESTS_CACHE") == os.environ["JAX_COMPILATION_CACHE_DIR"]:
    _FOLDER = os.path.join(os.environ["ADVONLINE_TESTS_CACHE"], _WORKER)
    os.makedirs(_FOLDER, exist_ok=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _FOLDER  # the worker's subprocesses share it
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")),
)


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


@pytest.fixture
def optimised_compilation():
    """XLA's optimisation passes on, as a run has them (the suite turns most off, for compile
    time). Compiled without them, the backward pass of a certificate's induction (the DP for
    one resource, the grid programme for several) returns NaN entries for randomised
    tables, where eager evaluation and the optimised program agree; descent would not move."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)
