"""Time the local search's scoring: one step's candidates scored against `threshold`, with each
round's sale row read inside the backward induction (what the searches do) beside the rows
gathered first (what training differentiates), on the main job's setting and the two-resource
one.

Run: python benchmarks/search_speed.py [--candidates 1024] [--repeats 5]
Prints, per setting and dtype, the best warm call of each form in ms (OPT given), the offline
optimum of the candidates alone (which a search step adds to either), and whether both forms
give the same floats. One process on the machine it names, all its cores.
"""

from __future__ import annotations

import argparse
import functools
import time
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from time_to_certificate import code_versions

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.adversary import build_adversary
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.optimum import device_optimum
from advonline.problems.posted_price.oracles import random_types
from advonline.problems.posted_price.typed_payoffs import algorithm_table, typed_payoffs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("k1-u10-oracle", "k2-u10-oracle")


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _scores(setting, vocabulary, gathered, sale, types, optimum):
    return typed_payoffs(setting, vocabulary, sale, types, optimum, bool(gathered))


_optimum = jax.jit(device_optimum, static_argnums=0)


def best_ms(function, args, repeats: int) -> float:
    jax.block_until_ready(function(*args))  # compiled and run once
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(function(*args))
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    code_versions(None, f"{args.candidates} candidates a call, threshold's table")
    header = ("config", "dtype", "in loop ms", "gathered ms", "OPT ms", "same floats")
    print("  ".join(f"{cell:>14}" for cell in header))
    for name in CONFIGS:
        table = tomllib.loads((ROOT / f"experiments/configs/{name}.toml").read_text())
        setting = Setting.from_config(table["setting"])
        model = build_adversary(setting, AdversaryConfig(conditioning="state"))
        vocabulary = model.buyer_types
        types = random_types(vocabulary, jax.random.key(0), args.candidates, setting.rounds)
        policy = make_baseline("threshold", setting)
        for dtype in (jnp.float32, jnp.float64):
            with jax.enable_x64(dtype == jnp.float64):
                sale = model.type_sale_table(algorithm_table(setting, policy, dtype), dtype)
                instances = vocabulary.instances(types, dtype)
                opt = _optimum(setting, instances)
                calls = [(setting, vocabulary, gathered, sale, types, opt) for gathered in (0, 1)]
                cells = [best_ms(_scores, call, args.repeats) for call in calls]
                cells.append(best_ms(_optimum, (setting, instances), args.repeats))
                same = np.array_equal(*(np.asarray(_scores(*call)) for call in calls))
            row = [name, dtype.__name__, *(f"{ms:.0f}" for ms in cells), "yes" if same else "NO"]
            print("  ".join(f"{cell:>14}" for cell in row))


if __name__ == "__main__":
    main()
