"""Where a run's wall time goes: seconds per phase of the oracle loop, and how much of the
run was spent compiling.

A run's cost is mostly not its training steps: compiling, the oracles' searches, the
meta-solver, the probe and the certificate take most of the wall time. :class:`PhaseClock`
adds up the seconds spent in each phase (:data:`PHASES`) and, through JAX's monitoring events,
the seconds XLA spent tracing, lowering and compiling (which happen inside the phases, so
``compiling`` overlaps them). Every metrics row of the oracle loop carries the seconds of its
epoch (:meth:`PhaseClock.row`); a run's summary sums them (:func:`totals`). Each phase is also
a named span in a JAX profiler trace (``benchmarks/epoch_profile.py`` reads them).

A phase is timed on the host; the code inside a phase turns its results into Python numbers
(or blocks on them) before the phase ends, so JAX's asynchronous dispatch does not move work
from one phase into the next.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import jax.monitoring
import jax.profiler

#: The phases of an oracle-loop epoch: updating the network against the archive's mixture,
#: the oracles' search for new instances (with scoring them into the archive), solving the
#: restricted game, the probe, the closing rounds against the algorithm's mixture, and the
#: certificate of the current network.
PHASES = ("training", "oracles", "meta_solver", "probe", "closing", "certificate")
COLUMNS = tuple(f"seconds_{name}" for name in (*PHASES, "compiling"))

#: JAX's events for the stages of turning a function into an executable.
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_listening = [False]


class _Compiled(threading.local):
    """Seconds compiling in this thread, from the first clock on: JAX compiles in the thread
    that calls a function, so runs trained at once in threads each count their own."""

    seconds = 0.0


_compiled = _Compiled()


def _heard(event: str, seconds: float, **_) -> None:
    if event in _COMPILE_EVENTS:
        _compiled.seconds += seconds


class PhaseClock:
    """Seconds per phase since the last :meth:`row`."""

    def __init__(self) -> None:
        if not _listening[0]:
            jax.monitoring.register_event_duration_secs_listener(_heard)
            _listening[0] = True
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.compiled_at_start = _compiled.seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            with jax.profiler.TraceAnnotation(name):  # the phase's span in a profiler trace
                yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def row(self) -> dict:
        """The ``seconds_*`` columns since the last row (then starts counting afresh)."""
        row = {f"seconds_{name}": round(value, 3) for name, value in self.seconds.items()}
        row["seconds_compiling"] = round(_compiled.seconds - self.compiled_at_start, 3)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.compiled_at_start = _compiled.seconds
        return row


def totals(rows: list[dict]) -> dict | None:
    """The ``seconds_*`` columns summed over metrics ``rows`` (None if none has them)."""
    measured = [row for row in rows if row.get(COLUMNS[0]) not in (None, "")]
    if not measured:
        return None
    return {column: round(sum(float(row[column]) for row in measured), 3) for column in COLUMNS}
