"""Where one oracle-loop epoch's time goes on this device: per phase, the wall seconds, the
seconds the device was busy, how many device operations ran and how many programmes the
host launched, and what compiled again.

Run: python benchmarks/epoch_profile.py [--config CONFIG] [--epochs 1 5] [--seed 0]
         [--trace-folder FOLDER]

The config's whole run trains once in this process (everything compiles), then again from
the same seed; in the second run the listed epochs (each a measurement and the training
after it) are traced with JAX's profiler, and the trace is read back. Per phase it counts
the host's calls of jitted functions (an eager operation is one) and, apart, PJRT's
executions of compiled programmes. A phase is *latency-bound* where the device is idle for
most of its wall time (the host is running Python, waiting for a result it asked for, or
launching many small programmes). The second
run's compiling seconds per epoch show programs compiled again although the first run had
compiled them (a shape that changes from epoch to epoch). The first line names the device.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import jax

from advonline import configs, environment, profile
from advonline.oracle_loop import run_epochs

ROOT = Path(__file__).resolve().parents[1]


def run(config, clock: profile.PhaseClock, traced: set[int], folder: Path) -> list[dict]:
    """One whole run of ``config``: each epoch's phase seconds (``clock.row()``), with the
    epochs in ``traced`` under the profiler (one trace folder each in ``folder``)."""
    game = config.build_game()
    state = config.initial_state(game, jax.random.key(config.seed))
    epochs = run_epochs(game, config.oracle, config.temperature, state, config.total_steps, clock)
    rows, epoch = [], 0
    while True:
        tracing = epoch in traced
        if tracing:
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0  # JAX's own events only: a smaller, faster trace
            jax.profiler.start_trace(
                str(folder / f"epoch{epoch}"), create_perfetto_trace=True, profiler_options=options
            )
        started = time.perf_counter()
        try:
            next(epochs)
        except StopIteration:
            if tracing:
                jax.profiler.stop_trace()
            return rows
        if tracing:
            jax.profiler.stop_trace()
        row = clock.row()
        row["wall"] = time.perf_counter() - started
        rows.append(row)
        epoch += 1


def trace_events(folder: Path) -> list[dict]:
    """The complete events of the one perfetto trace under ``folder``, each with
    ``device`` (whether it ran on an accelerator or the host)."""
    (path,) = folder.rglob("perfetto_trace.json.gz")
    data = json.loads(gzip.decompress(path.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    processes = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    found = []
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            name = processes.get(event.get("pid"), "")
            event["device"] = "/device:" in name and "CPU" not in name
            found.append(event)
    return found


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (microseconds) in seconds."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total / 1e6


def phase_table(events: list[dict]) -> dict[str, dict]:
    """Per phase (:data:`advonline.profile.PHASES`, named in the trace by the clock's
    annotations): wall seconds, device-busy seconds, device operations, programs launched."""
    table = {}
    for name in profile.PHASES:
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == name]
        if not spans:
            continue
        wall = sum(end - start for start, end in spans) / 1e6

        def inside(e, spans=spans) -> bool:
            return any(start <= e["ts"] < end for start, end in spans)

        device = [e for e in events if e["device"] and inside(e)]
        host = [e for e in events if not e["device"] and inside(e)]
        table[name] = {
            "wall": wall,
            "busy": busy_seconds([(e["ts"], e["ts"] + e["dur"]) for e in device]),
            "operations": len(device),
            "calls": len(_outermost_calls(host)),
            "executions": sum(e["name"] in _EXECUTIONS for e in host),
        }
    return table


#: A host event of a call of a jitted function (an eager operation is one too).
_CALL = "PjitFunction"
#: The host events of PJRT running a compiled programme (the GPU's and the CPU's clients).
_EXECUTIONS = (
    "PjRtCApiLoadedExecutable::Execute",
    "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice",
)


def _outermost_calls(host: list[dict]) -> list[dict]:
    """The calls of jitted functions among the host events ``host``: a call's events nest
    (the same call is logged inside itself), so only those inside no other call on their
    thread count."""
    calls = sorted(
        (e for e in host if e["name"].startswith(_CALL)), key=lambda e: (e.get("tid"), e["ts"])
    )
    outermost, thread, reach = [], None, float("-inf")
    for event in calls:
        end = event["ts"] + event["dur"]
        if event.get("tid") != thread or event["ts"] >= reach:
            outermost.append(event)
            thread, reach = event.get("tid"), end
        else:
            reach = max(reach, end)
    return outermost


def top_programs(events: list[dict], count: int = 8) -> list[tuple[str, int]]:
    """The jitted functions called most often in the trace."""
    host = [e for e in events if not e["device"]]
    return Counter(e["name"] for e in _outermost_calls(host)).most_common(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "experiments/configs/k1-u10-oracle.toml"))
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace-folder", help="keep the traces here (default: a temporary one)")
    args = parser.parse_args()
    print(f"{environment.device_line()}; config {args.config}, seed {args.seed}")
    config = configs.load(args.config).with_seed(args.seed)
    folder = Path(args.trace_folder or tempfile.mkdtemp(prefix="epoch-profile-"))
    clock = profile.PhaseClock()
    started = time.perf_counter()
    cold = run(config, clock, set(), folder)
    first = time.perf_counter() - started
    started = time.perf_counter()
    warm = run(config, clock, set(args.epochs), folder)
    second = time.perf_counter() - started
    print(f"whole run: {first:.1f} s compiling as it goes, {second:.1f} s again in-process")
    print("epoch  wall s  " + "  ".join(f"{p:>11}" for p in profile.PHASES) + "  compiling")
    for epoch, (row_cold, row) in enumerate(zip(cold, warm, strict=True)):
        cells = "  ".join(f"{row[f'seconds_{p}']:>11.3f}" for p in profile.PHASES)
        again = row["seconds_compiling"]
        print(
            f"{epoch:>5}  {row['wall']:>6.2f}  {cells}  {again:.3f} (first run "
            f"{row_cold['seconds_compiling']:.3f})"
        )
    for epoch in args.epochs:
        if not (folder / f"epoch{epoch}").exists():
            continue
        events = trace_events(folder / f"epoch{epoch}")
        print(
            f"epoch {epoch} traced (warm): phase, wall s, device busy s, busy share, "
            "device operations, jitted calls, programme executions"
        )
        for name, figures in phase_table(events).items():
            share = figures["busy"] / figures["wall"] if figures["wall"] else 0.0
            print(
                f"  {name:<12}{figures['wall']:>8.3f}{figures['busy']:>9.3f}{share:>8.0%}"
                f"{figures['operations']:>9}{figures['calls']:>7}{figures['executions']:>7}"
            )
        print("  called most often: " + ", ".join(f"{n} x{c}" for n, c in top_programs(events)))


if __name__ == "__main__":
    main()
