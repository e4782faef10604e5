"""Time one K >= 2 training step with OPT from HiGHS (between jitted pieces) and from the JAX
dual LP (the whole step jitted), on the same config, in one run.

Run: python benchmarks/k2_step.py [CONFIG.toml] [--steps N]
   (default experiments/configs/k2-u10.toml, 20 timed steps after 2 warm-up steps)

Prints the config, the device, each variant's median and best step time, and their ratio.
Both start from the same state and keys; the metrics differ only by the dual LP's shortfall.
"""

import argparse
import dataclasses
import statistics
import time

import jax

from advonline import configs
from advonline.game import Game, init_state, known_family_pool
from advonline.sampled_game import sampled_game_step


def time_steps(config: configs.RunConfig, optimum: str, steps: int) -> list[float]:
    config = dataclasses.replace(config, game=dataclasses.replace(config.game, optimum=optimum))
    game = Game.build(config)
    state = init_state(game, jax.random.key(config.game.seed))
    families, families_optimum = known_family_pool(game)
    for _ in range(2):  # warm-up: compilation
        state, metrics = sampled_game_step(game, state, families, families_optimum)
    jax.block_until_ready((state, metrics))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = sampled_game_step(game, state, families, families_optimum)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="experiments/configs/k2-u10.toml")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    config = configs.load(args.config)
    if config.setting.resources < 2 or not config.setting.divisible:
        parser.error("needs a divisible K >= 2 config")
    device = jax.devices()[0]
    print(
        f"{args.config}: K={config.setting.resources}, T={config.setting.rounds}, "
        f"adversary batch {config.adversary.batch}, on {device.platform} ({device.device_kind})"
    )
    medians = {}
    for optimum in ("highs", "device"):
        times = time_steps(config, optimum, args.steps)
        medians[optimum] = statistics.median(times)
        print(
            f"OPT from {optimum:>6}: median {medians[optimum] * 1e3:8.1f} ms per step, "
            f"best {min(times) * 1e3:8.1f} ms ({args.steps} steps)"
        )
    print(f"speed-up of the on-device optimum: {medians['highs'] / medians['device']:.2f}x")


if __name__ == "__main__":
    main()
