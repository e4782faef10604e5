"""Several seeds of one config in one process (``advonline run CONFIG --seeds 0-2``, and
``advonline train`` likewise): one run folder per seed, side by side, and a summary of every
figure over the seeds as median [min, max], the form in which every from-scratch result is
reported.

The seeds train in one process, in turn or up to ``--concurrent N`` at once in threads that
share the devices (:func:`concurrently`). The seed enters a run only through its keys, so the
seeds reuse the programmes compiled once (on 2 CPU cores the quickstart config's second seed
trains in 3 s against the first's 67 s). Seeds trained at once give the figures they give in
turn: each thread runs its own seed's programmes on its own arrays, and while one thread is in
Python (the archive, the meta-solver's LP, a launch) another computes, so small programmes
that leave a GPU or the cores idle overlap.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from advonline.errors import quoted
from advonline.evaluation import Budget, setting_line
from advonline.ratio import format_ratio

SUMMARY_NAME = "summary.json"

_Seed = TypeVar("_Seed")
_Done = TypeVar("_Done")


def concurrently(
    work: Callable[[_Seed], _Done],
    plan: Sequence[_Seed],
    at_once: int,
    stop: threading.Event | None = None,
) -> list:
    """``[work(entry) for entry in plan]``, with up to ``at_once`` entries at a time in
    threads (in turn where ``at_once`` is 1). Once an entry fails, or the caller is
    interrupted, ``stop`` is set (work that checks it ends early, :class:`Stopped`), the
    entries not yet started are dropped, and the first failure is raised once every started
    entry has ended."""
    if at_once <= 1 or len(plan) <= 1:
        return [work(entry) for entry in plan]
    stop = threading.Event() if stop is None else stop
    pool = ThreadPoolExecutor(min(at_once, len(plan)), thread_name_prefix="seed")
    futures = [pool.submit(work, entry) for entry in plan]
    try:
        wait(futures, return_when=FIRST_EXCEPTION)
    finally:  # after a failure or an interruption the running entries stop at their next check
        if not all(future.done() and future.exception() is None for future in futures):
            stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
    errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    if errors:
        raise next((error for error in errors if not isinstance(error, Stopped)), errors[0])
    return [future.result() for future in futures]


class Stopped(Exception):
    """Raised by work that saw :func:`concurrently`'s ``stop`` set: another entry failed, or
    the caller was interrupted."""


#: The most seeds one process trains (each is a run folder of its own).
MOST_SEEDS = 1000
#: Game seeds lie in [0, SEED_LIMIT): JAX's default keys tell those apart (a larger seed
#: would give a smaller one's key).
SEED_LIMIT = 2**32


def parse_seeds(text: str) -> tuple[int, ...]:
    """The seeds ``text`` names: ``"0-4"``, ``"0,2,5"`` or a mix (``"0-2,7"``), whole numbers
    >= 0, each once; ValueError with one line for anything else."""
    seeds: list[int] = []
    given = quoted(text)
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise ValueError(
                f"--seeds takes whole numbers like 0-4 or 0,2,5, got {given}"
            ) from None
        if first < 0 or last < first or last >= SEED_LIMIT:
            where = quoted(part.strip())
            raise ValueError(f"--seeds: {where} is not a range of seeds in [0, 2**32)")
        if len(seeds) + last - first + 1 > MOST_SEEDS:
            raise ValueError(f"--seeds names more than {MOST_SEEDS} seeds: {given}")
        seeds += range(first, last + 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds names a seed twice: {given}")
    return tuple(seeds)


def seed_folder(parent: str | Path, seed: int) -> Path:
    """The run folder of ``seed`` inside a several-seed run's folder."""
    return Path(parent) / f"seed{seed}"


def spread(values: list[float]) -> dict:
    """``{"median", "min", "max", "by_seed"}`` of one figure over the seeds."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "by_seed": list(values),
    }


def summarise(config: str, reports: dict[int, dict]) -> dict:
    """The summary of the seeds' reports (``{seed: evaluation.json's content}``): each
    algorithm's measured CR and, where it has one, its certified upper bound, and the
    training and measuring seconds, each as :func:`spread` over the seeds in order."""
    seeds = sorted(reports)
    first = reports[seeds[0]]
    names = [row["algorithm"] for row in first["results"]]
    algorithms = {}
    for name in names:
        rows = [_row(reports[seed], name) for seed in seeds]
        entry = {"competitive_ratio": spread([row["competitive_ratio"] for row in rows])}
        bounds = [row.get("upper_bound") for row in rows]
        if all(bound is not None for bound in bounds):
            entry["upper_bound"] = spread(bounds)
        algorithms[name] = entry
    return {
        "config": config,
        "seeds": seeds,
        "setting": first["setting"],
        "budget": first["budget"],
        "ratio": first.get("ratio"),
        "lower_bound": first.get("lower_bound"),
        "algorithms": algorithms,
        "training_seconds": spread([reports[seed]["training_seconds"] for seed in seeds]),
        "measuring_seconds": spread(
            [reports[seed].get("measuring_seconds", 0.0) for seed in seeds]
        ),
        "verdicts": {str(seed): reports[seed].get("verdict") for seed in seeds},
        "runs": {str(seed): f"seed{seed}" for seed in seeds},
    }


#: The columns of a training's last metrics row that say where it is, not what it reached.
_POSITION = ("step", "epoch", "steps_per_second")


def summarise_training(config: str, setting: dict, last_rows: dict[int, dict]) -> dict:
    """The summary of ``train --seeds`` on ``setting`` (as the problem describes it): every
    figure of the seeds' last ``metrics.csv`` rows (``{seed: {column: number or None}}``) that
    each seed measured, as :func:`spread` over the seeds (``wall_seconds`` is the training
    time)."""
    seeds = sorted(last_rows)
    columns = [
        name
        for name in last_rows[seeds[0]]
        if name not in _POSITION and all(last_rows[seed].get(name) is not None for seed in seeds)
    ]
    return {
        "config": config,
        "seeds": seeds,
        "setting": setting,
        "trained": {
            name: spread([float(last_rows[seed][name]) for seed in seeds]) for name in columns
        },
        "runs": {str(seed): f"seed{seed}" for seed in seeds},
    }


def training_table(summary: dict) -> str:
    """The lines ``train --seeds`` prints: each figure of the last epoch over the seeds, then
    the training time (the seconds per phase are left to the summary file)."""
    lines = [
        f"setting: {setting_line(summary['setting'])}",
        f"over seeds {', '.join(map(str, summary['seeds']))}: median [min, max]",
    ]
    figures = summary["trained"]
    for name, figure in figures.items():
        if "seconds" not in name:
            lines.append(f"{name:<24}{_cell(figure):>30}")
    if (wall := figures.get("wall_seconds")) is not None:
        lines.append(_training_line(wall))
    return "\n".join(lines)


def _row(report: dict, name: str) -> dict:
    for row in report["results"]:
        if row["algorithm"] == name:
            return row
    raise ValueError(f"a seed's report has no {name!r}")


def _cell(figure: dict) -> str:
    return (
        f"{format_ratio(figure['median'])} [{format_ratio(figure['min'])}, "
        f"{format_ratio(figure['max'])}]"
    )


def summary_table(summary: dict) -> str:
    """The summary as the lines ``run --seeds`` prints: the setting and the budget, the lower
    bound on every algorithm where there is one, then one line per algorithm."""
    seeds = summary["seeds"]
    lines = [
        f"setting: {setting_line(summary['setting'])}",
        f"budget: {Budget(**summary['budget']).summary()}",
    ]
    if summary["lower_bound"] is not None:
        ratio = summary["lower_bound"]["ratio"]
        lines.append(f"lower bound on every online algorithm (certified): {ratio:.4f}")
    lines += [
        f"over seeds {', '.join(map(str, seeds))}: median [min, max]; ratio {summary['ratio']}",
        f"{'algorithm':<24}{'CR':>30}{'certified <=':>30}",
    ]
    for name, entry in summary["algorithms"].items():
        bound = _cell(entry["upper_bound"]) if "upper_bound" in entry else "n/a"
        lines.append(f"{name:<24}{_cell(entry['competitive_ratio']):>30}{bound:>30}")
    lines.append(_training_line(summary["training_seconds"]))
    return "\n".join(lines)


def _training_line(seconds: dict) -> str:
    return f"training {seconds['median']:.0f} s [{seconds['min']:.0f}, {seconds['max']:.0f}] a seed"


def write_summary(parent: str | Path, summary: dict) -> Path:
    """``summary.json`` in the several-seed run's folder."""
    path = Path(parent) / SUMMARY_NAME
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
