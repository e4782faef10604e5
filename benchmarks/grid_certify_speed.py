"""Time the two-resource certificate (the product-grid programme) on a config's setting.

Run: python benchmarks/grid_certify_speed.py [--config CONFIG] [--network]

Certifies `threshold` and `exponential` (exact: deterministic policies), each twice: the
first call compiles, the second is warm. ``--network`` also certifies the config's pricing
network as it starts training (randomised, the config's price atoms; an upper bound), once:
its programme is the same for every network of the config, so a trained one costs the same.
Prints the device first, then per policy the certificate, its sweeps and the seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax

from advonline import configs, environment
from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price.grid_certify import certify_grid, grid_work
from advonline.problems.posted_price.product_grid import state_count

ROOT = Path(__file__).resolve().parents[1]


def timed(setting, policy) -> tuple[object, float]:
    started = time.perf_counter()
    certificate = certify_grid(setting, policy)
    return certificate, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "experiments/configs/k2-u10-oracle.toml"))
    parser.add_argument("--network", action="store_true", help="also the config's network")
    args = parser.parse_args()
    config = configs.load(args.config)
    setting = config.setting
    print(f"{environment.device_line()}; {Path(args.config).name}: {setting.describe()}")
    print(
        f"{state_count(setting)} grid states a round; one interval's sweep "
        f"{grid_work(setting, 1):.2e} updates"
    )
    print("policy | certificate | note | first call s | warm call s")
    for name in ("threshold", "exponential"):
        policy = make_baseline(name, setting)
        certificate, first = timed(setting, policy)
        _, warm = timed(setting, policy)
        print(f"{name} | {certificate.ratio:.4f} | {certificate.note} | {first:.1f} | {warm:.1f}")
    if args.network:
        game = config.build_game()
        state = config.initial_state(game, jax.random.key(config.seed))
        certificate, first = timed(setting, game.policy(state.algorithm))
        print(
            f"untrained network | {certificate.ratio:.4f} | {certificate.note} | {first:.1f} | n/a"
        )


if __name__ == "__main__":
    main()
