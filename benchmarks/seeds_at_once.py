"""Several seeds against one: the wall time of ``advonline train CONFIG --seeds`` for one seed,
for several in turn and for several at once (``--concurrent``), in one invocation.

Run: python benchmarks/seeds_at_once.py [--config CONFIG] [--seeds 0-4] [--cache warm|cold]

Each variant is a fresh process. ``--cache warm`` (the default) first fills a compilation
cache with an uncounted one-seed run and gives every variant a copy of it, so the timings
are of training, not compiling; ``--cache cold`` gives every variant an empty one. The script
prints each variant's wall seconds, its ratio to one seed's, and the seeds' final guarantees
(the best DP bound for K = 1): the same in turn and at once on a CPU, within rounding on a
GPU, whose reductions are not bitwise reproducible.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from time_to_certificate import cache_environment

from advonline import environment
from advonline.seeds import parse_seeds

ROOT = Path(__file__).resolve().parents[1]


def train_seeds(config: Path, seeds: str, at_once: int, folder: Path, cache: Path) -> dict:
    """One ``advonline train --seeds`` process: its wall seconds and each seed's final
    guarantee."""
    out = folder / f"seeds-{seeds}-at-once-{at_once}"
    command = [sys.executable, "-m", "advonline", "train", str(config.resolve()), "--seeds"]
    command += [seeds, "--concurrent", str(at_once), "--out", str(out), "--quiet"]
    started = time.perf_counter()
    finished = subprocess.run(  # from the scratch folder: `-m` imports from the cwd first
        command, cwd=folder, env=cache_environment(cache), capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"--seeds {seeds} --concurrent {at_once} failed:\n{finished.stderr}")
    finals = {}
    for seed in parse_seeds(seeds):
        with (out / f"seed{seed}" / "metrics.csv").open(newline="") as handle:
            finals[seed] = float(list(csv.DictReader(handle))[-1]["guarantee"])
    return {"wall": wall, "finals": finals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "experiments/configs/k1-u10-oracle.toml"))
    parser.add_argument("--seeds", default="0-4")
    parser.add_argument("--cache", choices=("warm", "cold"), default="warm")
    args = parser.parse_args()
    config, count = Path(args.config), len(parse_seeds(args.seeds))
    first = str(parse_seeds(args.seeds)[0])
    print(f"{environment.device_line()}; {config.name}, compilation cache {args.cache}")
    with tempfile.TemporaryDirectory(prefix="seeds-at-once-") as scratch:
        folder = Path(scratch)
        filled = folder / "cache-filled"
        if args.cache == "warm":
            (folder / "warm-up").mkdir()
            train_seeds(config, first, 1, folder / "warm-up", filled)
        variants = [(first, 1), (args.seeds, 1), (args.seeds, count)]
        results = []
        for index, (seeds, at_once) in enumerate(variants):
            cache = folder / f"cache-{index}"
            if args.cache == "warm":
                shutil.copytree(filled, cache)
            (folder / f"run-{index}").mkdir()
            results.append(train_seeds(config, seeds, at_once, folder / f"run-{index}", cache))
    one = results[0]["wall"]
    print("seeds | at once | wall s | x one seed | final guarantee by seed")
    for (seeds, at_once), result in zip(variants, results, strict=True):
        finals = ", ".join(f"{seed}: {value:.4f}" for seed, value in result["finals"].items())
        print(f"{seeds} | {at_once} | {result['wall']:.1f} | {result['wall'] / one:.2f} | {finals}")


if __name__ == "__main__":
    main()
