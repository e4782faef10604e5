"""Time to certificate: how long a user waits, from a cold start, until an oracle-loop run's
delivered guarantee reaches given levels, and where that time goes.

Run: python benchmarks/time_to_certificate.py [--config CONFIG ...] [--seeds 0 1 2]
         [--levels 3.0 2.5 2.2] [--against-python PYTHON]

Each config and seed trains with ``advonline train`` in a fresh process (imports and
compiling included, nothing cached in memory). The script reads the run's ``metrics.csv`` as it
grows and stamps each row with the seconds since the process started: the time to a level is
the first row whose ``guarantee`` (the best certified bound so far for K = 1; the best
measured worst case for K >= 2, a lower bound) is at or below it. It prints, per config and
seed, when training starts (the first row's time less its epoch's training: the first
measurement is done), those times, the final guarantee, the total, and the run's phase
profile (seconds in training, the oracles, the meta-solver, the probe, the closing rounds,
the certificate, and compiling inside them), then the medians. ``--against-python PYTHON``
runs the same configs with the advonline installed for another Python (another checkout's
environment, e.g. ``OTHER/.venv/bin/python`` after ``make -C OTHER .venv/bin/advonline``)
in the same invocation, so two code versions are compared on the same machine, side by
side. The first line names the device. ``--cache cold`` (the default) gives every run an
empty compilation cache; ``--cache warm`` measures a second run of a config, its programs
compiled before.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advonline import environment, profile, xla_cpu

ROOT = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    text = path.read_text()
    return list(csv.DictReader(text[: text.rfind("\n") + 1].splitlines()))


def seeded_config(config: Path, seed: int, folder: Path) -> Path:
    """A copy of ``config`` in ``folder`` whose ``[game] seed`` is ``seed``."""
    folder.mkdir(parents=True, exist_ok=True)
    seeded = folder / f"{config.stem}-seed{seed}.toml"
    text, replaced = re.subn(r"(?m)^seed\s*=\s*\d+", f"seed = {seed}", config.read_text())
    if not replaced:
        text = text.replace("[game]\n", f"[game]\nseed = {seed}\n", 1)
    seeded.write_text(text)
    return seeded


def cache_environment(cache: Path) -> dict:
    """The environment of a run whose compilation cache is ``cache`` and whose measurement
    cache is ``cache``'s sibling: both as empty as ``cache`` is (a run measures its own
    baselines, as a first run does)."""
    environ = {
        **xla_cpu.environment_as_given(),  # each run's advonline sets its own XLA flags
        "ADVONLINE_COMPILATION_CACHE": str(cache),
        "ADVONLINE_MEASUREMENT_CACHE": f"{cache}-measurements",
    }
    environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    return environ


def code_versions(against_python: str | None, detail: str) -> dict[str, str]:
    """``{"this code": this Python, "other code": against_python}`` (the latter where given),
    having printed what the other code is and the device line, with ``detail`` at its end."""
    pythons = {"this code": sys.executable}
    if against_python is not None:
        pythons["other code"] = against_python
        print(f"other code: the advonline of {against_python}")
    print(f"{environment.device_line()}; {detail}")
    return pythons


def train_timed(config: Path, seed: int, python: str, folder: Path, cache: Path) -> list[dict]:
    """The metrics rows of a fresh ``advonline train`` of ``config`` with ``seed`` (the
    advonline of ``python``, compilation cache in ``cache``), each with ``since_start``:
    seconds from launching the process to the row."""
    seeded = seeded_config(config, seed, folder)
    out = folder / f"{config.stem}-seed{seed}"
    command = [python, "-m", "advonline", "train", str(seeded), "--out", str(out), "--quiet"]
    started = time.perf_counter()
    environ = cache_environment(cache)
    process = subprocess.Popen(  # from the scratch folder: `-m` imports from the cwd first
        command, cwd=folder, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stamped: list[dict] = []
    while process.poll() is None:
        time.sleep(0.2)
        rows = _rows(out / "metrics.csv")
        now = time.perf_counter() - started
        stamped += [{**row, "since_start": now} for row in rows[len(stamped) :]]
    _, error = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{config} seed {seed}: advonline train failed:\n{error.decode()}")
    now = time.perf_counter() - started
    rows = _rows(out / "metrics.csv")
    return stamped + [{**row, "since_start": now} for row in rows[len(stamped) :]]


def summary(rows: list[dict], levels: list[float]) -> dict:
    guarantees = [float(row["guarantee"]) for row in rows]
    reached = {}
    for level in levels:
        hits = [row["since_start"] for row, g in zip(rows, guarantees, strict=True) if g <= level]
        reached[level] = hits[0] if hits else None
    return {
        "reached": reached,
        "training starts": rows[0]["since_start"] - float(rows[0].get("seconds_training") or 0),
        "final": guarantees[-1],
        "total": rows[-1]["since_start"],
        "phases": profile.totals(rows) or {},
    }


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}"


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--levels", type=float, nargs="+", default=[3.0, 2.5, 2.2])
    parser.add_argument("--against-python", default=None)
    parser.add_argument(
        "--cache",
        choices=("cold", "warm"),
        default="cold",
        help="cold: every run compiles from an empty compilation cache; warm: the runs share "
        "one, filled first by a run of each config that is not counted",
    )
    args = parser.parse_args()
    configs = args.config or [ROOT / "experiments/configs/k1-u10-oracle.toml"]
    pythons = code_versions(args.against_python, f"compilation cache {args.cache}")
    phases = [c.removeprefix("seconds_") for c in profile.COLUMNS]
    header = ["code", "config", "seed", "s to train", *[f"s to <={lv}" for lv in args.levels]]
    header += ["final", "s"]
    print("  ".join(f"{h:>14}" for h in header) + "  " + "  ".join(f"{p:>11}" for p in phases))
    with tempfile.TemporaryDirectory() as scratch:
        for number, (code, python) in enumerate(pythons.items()):
            runs = Path(scratch) / f"code-{number}"
            runs.mkdir()
            for config in configs:
                shared = runs / f"cache-{config.stem}"
                if args.cache == "warm":  # filled by a run that is not counted
                    train_timed(config, args.seeds[0], python, runs / "warm-up", shared)
                results = []
                for seed in args.seeds:
                    cold = runs / f"cache-{config.stem}-{seed}"  # empty: nothing shared
                    cache = shared if args.cache == "warm" else cold
                    rows = train_timed(config, seed, python, runs, cache)
                    result = summary(rows, args.levels)
                    results.append(result)
                    _print_row(code, config.stem, str(seed), result, args.levels, phases)
                median = {
                    "reached": {
                        lv: _median([r["reached"][lv] for r in results]) for lv in args.levels
                    },
                    "training starts": statistics.median(r["training starts"] for r in results),
                    "final": statistics.median(r["final"] for r in results),
                    "total": statistics.median(r["total"] for r in results),
                    "phases": {
                        c: statistics.median(r["phases"][c] for r in results)
                        for c in profile.COLUMNS
                        if all(r["phases"] for r in results)
                    },
                }
                _print_row(code, config.stem, "median", median, args.levels, phases)


def _print_row(code, config, seed, result, levels, phases) -> None:
    cells = [code, config, seed, _seconds(result["training starts"])]
    cells += [_seconds(result["reached"][lv]) for lv in levels]
    cells += [f"{result['final']:.4f}", f"{result['total']:.0f}"]
    known = result["phases"]  # empty for code without the phase profile
    spent = [f"{known[f'seconds_{p}']:.1f}" if known else "n/a" for p in phases]
    print("  ".join(f"{c:>14}" for c in cells) + "  " + "  ".join(f"{s:>11}" for s in spent))


if __name__ == "__main__":
    main()
