"""The main job's time: training against measuring, from a cold start, and the figures both
halves give.

Run: python benchmarks/main_job.py [--config CONFIG] [--seeds 0] [--together 0-4] [--concurrent N]
         [--against-python PYTHON] [--default-emitters-too]

Each seed runs ``advonline run CONFIG`` in a fresh process with an empty compilation cache
(what a user's first ``make run`` does after the install). The script prints, per seed, the
whole job's wall time, the training's seconds and the measuring's (``training_seconds`` and
``measuring_seconds`` of the run's ``evaluation.json``; a report without the latter shows
n/a), the search for the lower bound on every algorithm after it (``lower_bound.seconds``),
the rest (start-up, export, figures), and every algorithm's measured CR with the
learned policy's certified bound, so that two code versions (``--against-python``: the
advonline installed for another Python, e.g. another checkout's ``.venv/bin/python``) are
compared on the same machine in one invocation, figures side by side. Then the medians.
``--together 0-4`` also times ``advonline run CONFIG --seeds 0-4`` (those seeds trained, in
turn or ``--concurrent N`` at once, and measured in turn in one process, the baselines
measured once) from an empty cache, and prints its wall time beside the single runs': the
cost of several seeds against one. ``--default-emitters-too`` also runs this code with
``ADVONLINE_XLA_CPU=default`` (XLA's newer CPU fusion emitters, advonline/xla_cpu.py), a row
of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from time_to_certificate import cache_environment, code_versions, seeded_config

from advonline import xla_cpu

ROOT = Path(__file__).resolve().parents[1]


def run_timed(config: Path, seed: int, python: str, folder: Path, extra: dict) -> dict:
    """One cold ``advonline run`` of ``config`` with ``seed`` (the advonline of ``python``,
    ``extra`` added to its environment): its wall seconds and its report."""
    seeded = seeded_config(config, seed, folder)
    out = folder / f"{config.stem}-seed{seed}"
    arguments = [str(seeded), "--out", str(out)]
    wall = _cold_run(python, arguments, folder, f"cache-{seed}", extra)
    return {"wall": wall, "report": json.loads((out / "evaluation.json").read_text())}


def run_together(
    config: Path, seeds: str, at_once: int, python: str, folder: Path, extra: dict
) -> dict:
    """One cold ``advonline run CONFIG --seeds SEEDS --concurrent AT_ONCE`` (one process):
    its wall seconds and its ``summary.json``."""
    out = folder / f"{config.stem}-seeds"
    arguments = [str(config.resolve()), "--seeds", seeds, "--out", str(out)]
    arguments += ["--concurrent", str(at_once)]
    wall = _cold_run(python, arguments, folder, "cache-together", extra)
    return {"wall": wall, "summary": json.loads((out / "summary.json").read_text())}


def _cold_run(python: str, arguments: list[str], folder: Path, cache: str, extra: dict) -> float:
    """The wall seconds of ``advonline run ARGUMENTS --quiet`` (the advonline of ``python``,
    ``extra`` added to its environment) in ``folder``, with an empty compilation cache
    ``folder / cache``."""
    command = [python, "-m", "advonline", "run", *arguments, "--quiet"]
    started = time.perf_counter()
    finished = subprocess.run(  # from the scratch folder: `-m` imports from the cwd first
        command,
        cwd=folder,
        env={**cache_environment(folder / cache), **extra},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)}: advonline run failed:\n{finished.stderr}")
    return wall


def _together_line(code: str, seeds: str, together: dict, alone: list[dict]) -> str:
    summary = together["summary"]
    training = sum(summary["training_seconds"]["by_seed"])
    measuring = sum(summary["measuring_seconds"]["by_seed"])
    one = statistics.median(run["wall"] for run in alone)
    learned = summary["algorithms"]["learned"]["competitive_ratio"]
    return (
        f"{code}: --seeds {seeds} in one process: {together['wall']:.0f} s in all "
        f"({training:.0f} s training, {measuring:.0f} s measuring), "
        f"{together['wall'] / one:.2f}x one seed alone ({one:.0f} s); learned CR "
        f"{learned['median']:.4f} [{learned['min']:.4f}, {learned['max']:.4f}]"
    )


def _cells(result: dict, algorithms: list[str]) -> list[str]:
    report = result["report"]
    training = report["training_seconds"]
    measuring = report.get("measuring_seconds")
    searching = (report.get("lower_bound") or {}).get("seconds")
    rest = None if measuring is None else result["wall"] - training - measuring - (searching or 0)
    by_name = {r["algorithm"]: r for r in report["results"]}
    bound = by_name["learned"]["upper_bound"] if "learned" in by_name else None
    cells = [f"{result['wall']:.0f}", f"{training:.0f}", _maybe(measuring), _maybe(searching)]
    cells.append(_maybe(rest))
    cells += [
        f"{by_name[a]['competitive_ratio']:.4f}" if a in by_name else "n/a" for a in algorithms
    ]
    return [*cells, "n/a" if bound is None else f"{bound:.4f}"]


def _maybe(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, default=ROOT / "experiments/configs/k1-u10-oracle.toml"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--together", metavar="LIST", help="also time run --seeds LIST")
    parser.add_argument(
        "--concurrent", type=int, default=1, metavar="N", help="--together trains N seeds at once"
    )
    parser.add_argument("--against-python", default=None)
    parser.add_argument(
        "--default-emitters-too",
        action="store_true",
        help="also run this code with XLA's default CPU fusion emitters",
    )
    args = parser.parse_args()
    detail = f"config {args.config.name}; compilation cache cold"
    pythons = code_versions(args.against_python, detail)
    runs_of = {code: (python, {}) for code, python in pythons.items()}
    if args.default_emitters_too:
        runs_of["default emitters"] = (sys.executable, {xla_cpu.OPT_OUT: "default"})
    results: dict[str, list[dict]] = {}
    together: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for number, (code, (python, extra)) in enumerate(runs_of.items()):
            folder = Path(scratch) / f"code-{number}"
            results[code] = [run_timed(args.config, s, python, folder, extra) for s in args.seeds]
            if args.together:
                runs = (args.config, args.together, args.concurrent, python, folder, extra)
                together[code] = run_together(*runs)
    algorithms = [r["algorithm"] for r in next(iter(results.values()))[0]["report"]["results"]]
    header = ["code", "seed", "s in all", "s training", "s measuring", "s lower bound"]
    header.append("s other")
    header += [f"CR {a}" for a in algorithms] + ["learned bound"]
    print("  ".join(f"{h:>14}" for h in header))
    for code, runs in results.items():
        rows = [_cells(run, algorithms) for run in runs]
        for seed, cells in zip(args.seeds, rows, strict=True):
            print("  ".join(f"{c:>14}" for c in [code, str(seed), *cells]))
        if len(rows) > 1:
            medians = [_median_cell([row[i] for row in rows]) for i in range(len(rows[0]))]
            print("  ".join(f"{c:>14}" for c in [code, "median", *medians]))
    for code, run in together.items():
        print(
            _together_line(
                code, f"{args.together} --concurrent {args.concurrent}", run, results[code]
            )
        )


def _median_cell(cells: list[str]) -> str:
    if any(c == "n/a" for c in cells):
        return "n/a"
    return f"{statistics.median(float(c) for c in cells):.4g}"


if __name__ == "__main__":
    main()
