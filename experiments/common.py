"""What the experiment scripts share: train a config, measure the learned policies and the
baselines with one budget, and write tables (CSV and Markdown cells)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import time
from pathlib import Path

from advonline import checkpoint, configs, pipeline
from advonline.baselines.posted_price import BASELINES, make_baseline
from advonline.evaluation import Budget, Measurement, measure
from advonline.pipeline import delivered_policies
from advonline.problems.posted_price.problem import PROBLEM as POSTED
from advonline.seeds import concurrently
from advonline.simultaneous import delivered_params
from advonline.train import train

CONFIGS = Path(__file__).parent / "configs"


def train_and_measure(
    name: str, folder: Path, budget: Budget, baselines=tuple(BASELINES), seed: int | None = None
) -> tuple[configs.RunConfig, dict, dict[str, Measurement], float]:
    """Train ``experiments/configs/<name>.toml`` into ``folder`` (replaced: this script's own
    output), then measure ``learned``, ``learned-deterministic`` and ``baselines`` with
    ``budget``. ``seed`` replaces the config's ``game.seed`` (the evaluator's seed is the
    budget's). Returns the config, the delivered parameters, the measurements and the
    training wall time in seconds."""
    config = load_config(name, seed)
    wall = train_afresh(config, folder)
    params, measured = measure_trained(config, folder, budget, baselines)
    return config, params, measured, wall


def train_afresh(config: configs.RunConfig, folder: Path) -> float:
    """Train ``config`` into ``folder`` (replaced: the script's own output); the wall time in
    seconds."""
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    train(config, folder)
    return time.perf_counter() - start


def load_config(name: str, seed: int | None = None):
    """``experiments/configs/<name>.toml`` (any problem's), with ``game.seed`` replaced by
    ``seed`` if given."""
    config = configs.load(CONFIGS / f"{name}.toml")
    if seed is None:
        return config
    data = config.to_tables()
    data["game"]["seed"] = seed
    return configs.from_tables(data, f"{name}.toml with game.seed = {seed}")


def measure_trained(
    config: configs.RunConfig, folder: Path, budget: Budget, baselines=tuple(BASELINES)
) -> tuple[dict, dict[str, Measurement]]:
    """Measure what the run in ``folder`` delivers (``learned``, ``learned-deterministic``)
    and ``baselines`` with ``budget``. Returns the delivered parameters and the
    measurements."""
    state, _, _ = checkpoint.load(folder)
    game = config.build_game()
    params = delivered_params(game, state)  # the network (a mixture's is in the policies)
    policies = delivered_policies(game, state)
    policies.update({n: make_baseline(n, config.setting) for n in baselines})
    return params, {n: measure(POSTED, config.setting, n, p, budget) for n, p in policies.items()}


def measurement_columns(measured: dict[str, Measurement]) -> dict:
    """Flat CSV columns: each algorithm's ratio, worst source, every source and its bound."""
    row = {}
    for name, found in measured.items():
        row[f"{name}_ratio"] = found.competitive_ratio
        row[f"{name}_worst_source"] = found.worst_source
        for source, ratio in found.sources.items():
            row[f"{name}_{source}"] = ratio.ratio
        row[f"{name}_upper_bound"] = found.upper_bound.ratio
    return row


def fmt(value) -> str:
    """A table cell: 4 decimals, scientific from 1e5, ``n/a`` for a missing figure."""
    if value is None:
        return "n/a"
    if not isinstance(value, float):
        return str(value)
    return f"{value:.4f}" if value < 1e5 else f"{value:.3e}"


def spread(values: list) -> str:
    """``median [min, max]`` of the figures that exist (a missing one is left out)."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    return f"{fmt(statistics.median(present))} [{fmt(min(present))}, {fmt(max(present))}]"


def write_csv(rows: list[dict], path: Path) -> None:
    """The rows as CSV; the columns are every key any row has (in order of appearance), blank
    where a row lacks one (e.g. a result stored before a column existed)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def result(report: dict, algorithm: str) -> dict:
    """``algorithm``'s entry in a report's results (advonline/evaluation.py)."""
    return next(row for row in report["results"] if row["algorithm"] == algorithm)


def certified(row: dict) -> float | None:
    """A result's certified ratio: its exact source, else its upper bound (None: neither)."""
    exact = row["sources"].get("exact")
    return exact if exact is not None else row["upper_bound"]


def run_seeds(
    name: str, seeds: int, out: Path, budget: Budget | None = None, at_once: int = 1
) -> list[dict]:
    """The report of each seed's run (``advonline run``'s main job with ``budget``, default
    the evaluator's; a run folder per seed under ``out``; kept ones reused). In one process,
    as ``advonline run --seeds``: the seeds without a report train, up to ``at_once`` at a
    time (``--concurrent``), reusing the compiled programmes; then each is measured in turn,
    the baselines measured in the first run measured here (they do not depend on the seed)."""
    folders = [out / f"{name}-seed{seed}" for seed in range(seeds)]
    pending = [
        (seed, folder, checkpoint.checkpoint_path(folder).exists())  # a run cut short goes on
        for seed, folder in enumerate(folders)
        if not (folder / pipeline.EVALUATION_NAME).is_file()
    ]
    concurrently(
        lambda entry: train(load_config(name, entry[0]), entry[1], resume=entry[2]),
        pending,
        at_once,
    )
    measured = None
    for _, folder, resume in pending:
        finished = pipeline.finish_run(
            folder, budget or Budget(), lambda line: None, resume=resume, measured=measured
        )
        measured = measured or finished.baseline_measurements
    return [json.loads((folder / pipeline.EVALUATION_NAME).read_text()) for folder in folders]


def concurrent_flag(parser) -> None:
    """The scripts' ``--concurrent N``: train up to N seeds at once (:func:`run_seeds`)."""
    parser.add_argument(
        "--concurrent", type=int, default=1, metavar="N", help="train up to N seeds at once"
    )
