"""Training throughput of the per-round update: JAX (jit, vmap) beside a plain NumPy loop.

Run: python benchmarks/training_throughput.py [CONFIG]
(default experiments/configs/k1-u10-simultaneous.toml)

Both compute the same per-round update on the same batch of instances (as many as one
algorithm update trains on in the config: the adversary's batch plus a full replay, written by
the adversary at initialisation) for the same pricing network: exact continuation values by
backward induction, state probabilities by a forward pass, and the all-action weights
``W[t, u, a] = sum_i w_i P_i(t, u) G_i(t, u) accept_i(t, a) / OPT_i``, with the same algorithm
(a buyer accepts the first k_t atoms, so sums over atoms are cumulative sums). The NumPy
version loops over instances and rounds in Python (vectorised over utilisation and prices
only); the JAX version is one jitted call that also backpropagates through the network. Prints
buyer-rounds per second, updates per second and the speed-up (median call times) of each of
three runs and the median speed-up, and the largest difference between the two weight tables
(they must agree). On a machine where JAX sees a GPU the JAX figures are the GPU's; the NumPy
loop always runs on the CPU. Like the ``advonline`` command, the script first starts itself again
with huge pages for ``malloc``'s large blocks where that applies (advonline/huge_pages.py); both
implementations then run in that one process, and the first line says whether it applied.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from advonline import configs
from advonline.huge_pages import huge_pages_on, relaunch_with_huge_pages
from advonline.problems.posted_price import training
from advonline.problems.posted_price.model import price_table
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.training import (
    accepted_atoms,
    action_weights,
    payoffs_and_gains,
    per_round_gradient,
    policy_probs,
    sale_probabilities,
)
from advonline.simultaneous import init_state


def numpy_action_weights(setting, probs, instances, optimum, weights, atoms) -> np.ndarray:
    """The per-round all-action weights by plain loops (the reference implementation), with
    the same algorithm as the JAX one (accepted-atom counts and cumulative sums)."""
    grid, rounds = setting.grid_size, setting.rounds
    units_all = np.arange(grid + 1)
    used = units_all / grid
    below = np.concatenate([np.zeros_like(probs[..., :1]), np.cumsum(probs, -1)], -1)
    total = np.zeros((rounds, grid + 1, len(atoms) + 1))
    for values, demands, opt, weight in zip(
        instances.values, instances.demands[..., 0], optimum, weights, strict=True
    ):
        # float32 products, as the JAX run computes them: buyers exactly at a price (ties) buy
        asks = atoms[None, :].astype(np.float32) * demands[:, None].astype(np.float32)
        accept = (values[:, None].astype(np.float32) >= asks) & (demands[:, None] > 0)
        accepted = accept.sum(-1)
        sell = np.clip(below[np.arange(rounds), :, accepted], 0, 1)  # [T, G+1]
        value_next = np.zeros(grid + 1)
        gains = np.zeros((rounds, grid + 1))
        for t in range(rounds - 1, -1, -1):  # backward: V_t and what a sale adds
            demand = demands[t]
            fraction = np.clip((1.0 - used) / demand, 0, 1) if demand > 0 else np.zeros(grid + 1)
            sold = np.round(fraction * round(demand * grid)).astype(int)
            after = np.clip(units_all + sold, 0, grid)
            gains[t] = values[t] * fraction + value_next[after] - value_next
            value_next = value_next + sell[t] * gains[t]
        state = np.zeros(grid + 1)
        state[0] = 1.0
        for t in range(rounds):  # forward: probability of each state, then its weight
            total[t, :, accepted[t]] += (weight / opt) * state * gains[t]
            demand = demands[t]
            fraction = np.clip((1.0 - used) / demand, 0, 1) if demand > 0 else np.zeros(grid + 1)
            sold = np.round(fraction * round(demand * grid)).astype(int)
            moved = np.zeros(grid + 1)
            np.add.at(moved, np.clip(units_all + sold, 0, grid), state * sell[t])
            state = state * (1 - sell[t]) + moved
    return np.flip(np.cumsum(np.flip(total, -1), -1), -1)[..., 1:]


JAX_CALLS = 30  # timed calls of each implementation; the median is reported (a shared CPU's
NUMPY_CALLS = 3  # timings swing by 10-20% from call to call)
RUNS = 3  # whole measurements, each printed; their median speed-up is the figure


def median_seconds(call, count: int) -> float:
    """Median wall time of ``count`` calls of ``call()``."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "experiments/configs/k1-u10-simultaneous.toml"
    config = configs.load(path)
    game = config.build_game()
    setting = game.setting
    device = jax.devices()[0]
    state = init_state(game, jax.random.key(0))
    # the pool one algorithm update trains on: adversary batch + replay
    pool = config.adversary.batch + config.game.replay_size
    table = price_table(setting, game.policy(state.algorithm), jnp.float32)
    written = game.adversary.write(
        state.adversary, setting, jax.random.key(1), pool, jnp.float32, table
    )
    instances = written.instances
    optimum = offline_optimum(setting, instances)
    weights = jnp.full(optimum.shape, 1.0 / optimum.shape[0])
    batch = optimum.shape[0]
    buyer_rounds = batch * setting.rounds

    update = jax.jit(per_round_gradient, static_argnums=0)
    jax.block_until_ready(update(game, state.algorithm, instances, optimum, weights))  # compile
    probs = np.asarray(policy_probs(game, state.algorithm, jnp.float32), np.float64)
    as_numpy = jax.tree.map(np.asarray, (instances, optimum, weights))
    atoms = np.asarray(training.atoms(game))
    reference = numpy_action_weights(setting, probs, *as_numpy, atoms)

    runs = []  # (JAX seconds, NumPy seconds) of each run, each a median of its calls
    for _ in range(RUNS):
        jax_seconds = median_seconds(
            lambda: jax.block_until_ready(
                update(game, state.algorithm, instances, optimum, weights)
            ),
            JAX_CALLS,
        )
        numpy_seconds = median_seconds(
            lambda: numpy_action_weights(setting, probs, *as_numpy, atoms), NUMPY_CALLS
        )
        runs.append((jax_seconds, numpy_seconds))

    accepted = accepted_atoms(game, instances)
    sell = sale_probabilities(jnp.asarray(probs, jnp.float32), accepted)
    _, weighted_gain = payoffs_and_gains(game, sell, instances, optimum)
    jax_weights = np.asarray(
        action_weights(weights[None, :, None] * weighted_gain, accepted, len(training.atoms(game)))
    )
    gap = np.abs(jax_weights - reference).max() / np.abs(reference).max()

    huge_pages = "on" if huge_pages_on(os.environ) else "off"
    print(f"{os.cpu_count()} CPU cores; huge pages for malloc's large blocks: {huge_pages}")
    print(f"config: {path}; setting: {setting.describe()}")
    print(
        f"batch: {batch} instances x {setting.rounds} rounds, grid {setting.grid_size} units, "
        f"{len(training.atoms(game))} price atoms"
    )
    print(f"{RUNS} runs, each the median of {JAX_CALLS} (JAX) and {NUMPY_CALLS} (NumPy) calls")
    print(
        f"{'run':<6}{'implementation':<28}{'s/update':>10}{'updates/s':>12}{'buyer-rounds/s':>16}"
    )
    jax_name = f"JAX ({device.platform}, jit)"
    for index, (jax_seconds, numpy_seconds) in enumerate(runs, start=1):
        for name, seconds in ((jax_name, jax_seconds), ("NumPy loop (cpu)", numpy_seconds)):
            print(
                f"{index:<6}{name:<28}{seconds:>10.4f}{1 / seconds:>12.2f}"
                f"{buyer_rounds / seconds:>16.3g}"
            )
    speedups = [numpy_seconds / jax_seconds for jax_seconds, numpy_seconds in runs]
    print(
        "speed-up JAX / NumPy per run: "
        + ", ".join(f"{speedup:.0f}x" for speedup in speedups)
        + f"; median {np.median(speedups):.0f}x (target >= 50x on CPU)"
    )
    print(f"max relative difference of the all-action weights: {gap:.1e}")


if __name__ == "__main__":
    relaunch_with_huge_pages()
    main()
