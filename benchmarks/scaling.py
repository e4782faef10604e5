"""Training speed on 1, 2 and 4 devices (the batches sharded over them, advonline/parallel.py),
side by side in one run, for one resource and for two (the K >= 2 step, OPT from the JAX
dual LP).

Run: python benchmarks/scaling.py [--steps N] [--devices 1 2 4]

On a machine whose only device is its CPU, the script restarts itself with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``: XLA then splits the same CPU cores
into 4 "devices". That checks that the sharded programs run and shows what partitioning and
the cross-device reductions cost; it cannot show a speed-up, because 4 forced devices share
the cores that 1 device already used. On a machine with several GPUs the same command times
the real devices (the first 1, 2 and 4 of them).

For each config and device count it prints steps per second and instances per second: the
instances the adversary writes plus those the pricing network trains against (the pool:
the batch and the replay), per step.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

from advonline.huge_pages import relaunch_with_huge_pages

FORCED = "--xla_force_host_platform_device_count=4"


def _restart_with_forced_devices() -> None:
    """Restart this script with 4 host devices when JAX would see only one CPU."""
    if FORCED in os.environ.get("XLA_FLAGS", ""):
        return
    import jax  # after the check: XLA_FLAGS is read when the backend starts

    if jax.devices()[0].platform != "cpu" or len(jax.devices()) > 1:
        return
    environment = dict(os.environ)
    environment["XLA_FLAGS"] = f"{environment.get('XLA_FLAGS', '')} {FORCED}".strip()
    sys.exit(subprocess.call([sys.executable, *sys.argv], env=environment))


def time_training_steps(config, devices: int, steps: int) -> tuple[list[float], int]:
    """Seconds per training step of ``config`` on ``devices`` devices (after 2 warm-up steps,
    which compile), and the instances one step handles."""
    import jax

    from advonline import parallel
    from advonline.simultaneous import init_state

    mesh = parallel.batch_mesh(devices)
    game = config.build_game(mesh)
    state = parallel.replicate(init_state(game, jax.random.key(config.game.seed)), mesh)
    step = game.step_function()
    for _ in range(2):
        state, metrics = step(game, state)
    jax.block_until_ready((state, metrics))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = step(game, state)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    written = config.adversary.batch * max(config.game.adversary_steps, 1)
    pool = config.adversary.batch + config.game.replay_size
    return times, written + pool * config.game.algorithm_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    relaunch_with_huge_pages()  # as the advonline command does (advonline/huge_pages.py)
    _restart_with_forced_devices()
    import jax

    from advonline import configs

    available = jax.devices()
    print(
        f"{len(available)} x {available[0].platform} ({available[0].device_kind}); "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; {os.cpu_count()} CPU cores"
    )
    counts = [count for count in args.devices if count <= len(available)]
    cases = {
        "k1-u10 (K = 1)": configs.load("experiments/configs/k1-u10-simultaneous.toml"),
        "k2-u10 (K = 2)": configs.load("experiments/configs/k2-u10-simultaneous.toml"),
    }
    print(f"{'config':28} {'devices':>7} {'ms/step':>9} {'steps/s':>8} {'instances/s':>12}")
    for name, config in cases.items():
        for count in counts:
            times, instances = time_training_steps(config, count, args.steps)
            median = statistics.median(times)
            print(
                f"{name:28} {count:7d} {median * 1e3:9.1f} {1 / median:8.2f} "
                f"{instances / median:12.0f}"
            )


if __name__ == "__main__":
    main()
