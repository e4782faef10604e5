"""XLA's CPU code generation for advonline's programs: the older fusion emitters.

On a CPU, XLA compiles each fused loop with its newer "fusion emitters" by default. The
programs that most of measuring spends its time in are a different shape from what those
emitters are tuned for: the backward induction that scores a batch of inputs inside the
evaluator's local search (posted pricing's ``typed_payoffs``: a ``lax.scan`` over rounds of
gathers and elementwise updates) runs twice as fast for one resource with the older emitters
(``--xla_cpu_use_fusion_emitters=false``; ``benchmarks/search_speed.py``), and a sweep of the
two-resource certificate 1.4x. Two resources' scores are a third slower, but a two-resource
measurement is still faster in all. The main job's measuring falls by about a third; its
training is unchanged (docs/results.md, "the default job").

The flag changes how XLA generates machine code, not what a program computes: figures agree
with the newer emitters' up to float rounding (4e-16 on those scores). Rounding can still
send a search or a training run down another path, so a figure measured under one setting
is reproduced under the same one.

:func:`prefer_older_emitters` adds the flag to ``XLA_FLAGS`` when the package is imported,
before JAX starts its CPU backend (which reads ``XLA_FLAGS`` once, at its first computation),
so that the command line, the experiments, the benchmarks and the tests compile alike. It
adds nothing where ``ADVONLINE_XLA_CPU=default``, where ``XLA_FLAGS`` already sets the
flag, or for a jaxlib other than the versions it was measured on (:data:`MEASURED_JAXLIB`):
the flag is internal to XLA, and an XLA that no longer knows a flag aborts on it. In a
process whose backends started before the import (a notebook that computed first) it changes
nothing, so that a report's record of ``XLA_FLAGS`` stays what XLA compiled with.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Mapping

FLAG = "--xla_cpu_use_fusion_emitters=false"
#: jaxlib versions (prefixes) the flag was measured on.
MEASURED_JAXLIB = ("0.10.",)
OPT_OUT = "ADVONLINE_XLA_CPU"
#: ``XLA_FLAGS`` as this process found it, where :func:`prefer_older_emitters` changed it.
_GIVEN: dict[str, str | None] = {}


def flags_with_older_emitters(environ: Mapping[str, str], jaxlib_version: str) -> str | None:
    """The ``XLA_FLAGS`` to run with, or None where nothing is to change (module docstring)."""
    flags = environ.get("XLA_FLAGS", "")
    if (
        environ.get(OPT_OUT, "") == "default"
        or "xla_cpu_use_fusion_emitters" in flags
        or not jaxlib_version.startswith(MEASURED_JAXLIB)
    ):
        return None
    return f"{flags} {FLAG}".strip()


def prefer_older_emitters() -> None:
    """Set ``XLA_FLAGS`` for this process and its children (module docstring)."""
    try:
        version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return
    flags = flags_with_older_emitters(os.environ, version)
    if flags is not None and not _backends_started():
        _GIVEN.setdefault("XLA_FLAGS", os.environ.get("XLA_FLAGS"))
        os.environ["XLA_FLAGS"] = flags


def _backends_started() -> bool:
    """Whether JAX has started its backends in this process (XLA has read ``XLA_FLAGS``).
    JAX says so only through a private function; where it is missing, assume not."""
    bridge = sys.modules.get("jax._src.xla_bridge")  # not imported: nothing started
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started is not None and started())


def environment_as_given() -> dict[str, str]:
    """This process's environment with ``XLA_FLAGS`` as the process found it: for a child
    that is to choose for itself (another version of advonline, or one told
    ``ADVONLINE_XLA_CPU=default``), not inherit this process's choice."""
    environ = dict(os.environ)
    if "XLA_FLAGS" in _GIVEN:
        given = _GIVEN["XLA_FLAGS"]
        if given is None:
            environ.pop("XLA_FLAGS", None)
        else:
            environ["XLA_FLAGS"] = given
    return environ
