"""The simultaneous loop, epoch by epoch, for every problem (``[game] loop =
"simultaneous"``): one live adversary network against the algorithm, both updated in every
step (advonline/simultaneous.py), as the oracle loop's alternative and the method to compare
it with.

- **The adversary** is the game's writer: the noise-conditioned writer of the encoding's
  tokens (:class:`~advonline.adversary.TokenWriter`, sized by the ``[adversary]`` table,
  :class:`~advonline.configs.AdversaryTable`), or the problem's own;
  **the algorithm's update** is the game's (by default the exact gradient of the
  softmin-weighted payoffs of the step's pool, the latest batch and the replay).
- **An epoch** is ``oracle.epoch_steps`` steps, then one measurement of the current network:
  the game's best responses with the oracle's budget (hill climbing from the replay's
  hardest inputs and fresh random ones, and fresh adversary networks where the budget has
  ``restarts``), under a key of its own (the seed and the epoch, never the training
  state's); the worst ratio on the replay; and the certificate where the game has one. What
  the search found joins the replay. The row also logs the epoch's last step (``payoff``,
  ``adversary_ratio``, ``pool_ratio``) and the exploitability: how much worse the search's
  worst is than the live adversary's latest batch.
- **The run delivers** the measured network with the lowest figure: its certificate, or
  without one the worst ratio its measurement saw (search and replay).
- **Several processes** train it together: the steps run on the global mesh, and each
  process measures its own copy of the state with the game on its own devices (the same
  key and data, so the same figures), then the state is replicated again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advonline import parallel, simultaneous
from advonline.oracle_loop import check_finite, snapshot_payoffs
from advonline.ratio import ratio_of_payoff
from advonline.simultaneous import GameState, StepMetrics


class Measured(NamedTuple):
    """One epoch's measurement of the current network (the metrics columns' names)."""

    payoff: float  # the epoch's last step: mean payoff on the adversary's batch
    adversary_ratio: float  # worst ratio in that batch
    pool_ratio: float  # worst ratio in that step's training pool
    exploitability: float  # oracle_ratio - adversary_ratio
    oracle_ratio: float  # worst ratio the search found
    archive_ratio: float  # worst ratio on the replay
    upper_bound: float | None  # the problem's certificate (None: none)
    guarantee: float  # the delivered network's figure so far


class Epoch(NamedTuple):
    state: GameState
    record: Measured
    measured_at: int  # the step of the measurement (after the epoch's training)
    training_seconds: float  # the epoch's training, compiling included


def replay_ratios(game, params, state: GameState) -> np.ndarray:
    """``OPT / E[ALG]`` of ``params`` on every replay slot ``[N]`` (-inf where empty)."""
    replay = state.replay
    ratios = np.asarray(
        ratio_of_payoff(snapshot_payoffs(game, params, replay.types, replay.optimum))
    )
    return np.where(np.asarray(replay.filled), ratios, -np.inf)


def measure(
    game, budget, seed: int, epoch: int, state: GameState, last_step: StepMetrics
) -> tuple[GameState, Measured]:
    """The measurement after ``epoch`` epochs (module docstring): the state with what the
    search found replayed and the best network kept, and the figures, beside
    ``last_step``'s. Outside ``jit``."""
    params = state.algorithm
    on_replay = replay_ratios(game, params, state)
    filled = int(np.asarray(state.replay.filled).sum())
    hardest = np.argsort(-on_replay)[: min(budget.chains // 2, filled)]
    starts = np.asarray(state.replay.types)[hardest]  # half the chains, the rest fresh
    key = jax.random.fold_in(jax.random.key(seed + 1), epoch)
    found = game.best_responses(params, budget, key, starts)
    state = simultaneous.replay_instances(game, state, found.types, found.ratios)
    found_worst = float(np.max(np.asarray(found.ratios), initial=-np.inf))
    archive_worst = float(np.max(on_replay, initial=-np.inf))
    bound = game.certify(params)[0] if game.certifies else None
    figure = bound if bound is not None else max(found_worst, archive_worst)
    if figure < float(state.best_score):
        state = state.replace(best_algorithm=params, best_score=jnp.asarray(figure, jnp.float32))
    adversary_ratio = float(last_step.adversary_ratio)
    return state, Measured(
        float(last_step.payoff),
        adversary_ratio,
        float(last_step.pool_ratio),
        found_worst - adversary_ratio,
        found_worst,
        archive_worst,
        bound,
        float(state.best_score),
    )


def measure_everywhere(game, budget, seed: int, epoch: int, state: GameState, last_step):
    """:func:`measure` in one process, or in each of several: on a host copy of the state
    with the game on the process's own devices, the result replicated on the run's mesh."""
    if jax.process_count() == 1:
        return measure(game, budget, seed, epoch, state, last_step)
    plain = parallel.to_host(state.replace(key=jax.random.key_data(state.key)))
    host = jax.tree.map(jnp.asarray, plain)  # on this process's own default device
    host = host.replace(key=jax.random.wrap_key_data(host.key))
    local = dataclasses.replace(game, mesh=None)
    host, record = measure(local, budget, seed, epoch, host, parallel.to_host(last_step))
    return parallel.replicate(host, game.mesh), record


def run_epochs(game, oracle, seed: int, state: GameState, epochs: int) -> Iterator[Epoch]:
    """Train from ``state`` until ``epochs`` epochs are done, yielding each measured epoch
    (a resumed run goes on from its state's step)."""
    step_once = game.step_function()
    for epoch in range(int(state.step) // oracle.epoch_steps + 1, epochs + 1):
        started = time.perf_counter()
        while int(state.step) < epoch * oracle.epoch_steps:
            state, last_step = step_once(game, state)
        jax.block_until_ready(state.algorithm)  # asynchronous dispatch: time the work
        seconds = time.perf_counter() - started
        check_finite(state.algorithm, int(state.step))
        state, record = measure_everywhere(game, oracle.budget(), seed, epoch, state, last_step)
        yield Epoch(state, record, int(state.step), seconds)


def hardest_replayed(game, state: GameState) -> tuple[np.ndarray, float]:
    """The final replay's instances ``[N, T]``, hardest against the delivered network first,
    and the worst ratio among them (-inf for an empty replay)."""
    ratios = replay_ratios(game, game.delivered_params(state), state)
    order = np.argsort(-ratios, kind="stable")[: int(np.asarray(state.replay.filled).sum())]
    return np.asarray(state.replay.types)[order], float(np.max(ratios, initial=-np.inf))
