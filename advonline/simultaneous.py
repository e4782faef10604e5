"""The simultaneous loop's step (docs/method.md §3), for any game: one live adversary network
against the algorithm, both updated in every step.

Payoff ``u = E_I E[ALG(I)] / OPT(I)``; the algorithm maximises it, the adversary minimises it.
One :func:`game_step` (jit-compiled) makes ``adversary_steps`` REINFORCE updates of the
adversary on the batches it writes against the frozen algorithm, then ``algorithm_steps``
updates of the algorithm (both counts from the ``[game]`` table), each with Optax.

**Keeping the adversary honest.** The adversary's instances go into a replay of past hard
instances (the ``replay_per_step`` hardest of each batch; an :class:`~advonline.archive.Archive`
used first in, first out). The algorithm trains against the union of the latest batch and the
replay, weighted by a softmin of their payoffs at ``temperature``: the adversary's best mixed
strategy over everything it has found, smoothed.

What the step asks of the game (a hashable object, ``jit``'s static argument:
:class:`~advonline.game.Game`):

- ``loop_config`` (the ``[game]`` table), ``adversary`` (an
  :class:`advonline.adversary.Adversary`), ``adversary_config`` (``learning_rate``, ``batch``,
  ``entropy``), ``setting``, ``instance_length``, ``init_params(key)``,
  ``algorithm_optimizer()`` and ``shard(batch)``;
- ``frozen(params)``: what the writing and the batch's payoffs read of the algorithm, computed
  once per step (e.g. its distributions in every state); ``writing_inputs(frozen)``: the
  ``against`` arguments the adversary writes with;
- ``batch_optimum(instances)`` (OPT ``[B]``, jit-able), ``batch_payoffs(frozen, instances,
  optimum)`` and ``decode(tokens, dtype)`` (the replay stores tokens);
- ``pool_update(params, instances, optimum, weigh, key) -> (payoffs, ascent)``: the payoffs of
  the pool and the ascent direction of ``sum_j w_j u_j`` with ``w = weigh(payoffs)``; a game
  whose update draws random numbers says so with ``update_draws``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from advonline.adversary import Written, adversary_optimizer, reinforce_loss
from advonline.archive import Archive, empty_archive, push_first_out
from advonline.ratio import softmin_weights


@struct.dataclass
class GameState:
    """Everything that changes during training (a pytree; what a checkpoint holds)."""

    step: jax.Array
    key: jax.Array
    algorithm: dict
    adversary: dict
    algorithm_opt: optax.OptState
    adversary_opt: optax.OptState
    replay: Archive  # past hard instances, first in first out (no snapshots)
    best_algorithm: dict  # the algorithm's parameters with the lowest selection score so far
    best_score: jax.Array  # [] that score (advonline/simultaneous_loop.py); inf before any
    # measurement


class StepMetrics(NamedTuple):
    payoff: jax.Array  # [] mean payoff E[ALG]/OPT over the adversary's latest batch
    adversary_ratio: jax.Array  # [] worst OPT / E[ALG] in that batch
    pool_ratio: jax.Array  # [] worst OPT / E[ALG] over everything the algorithm trained against


class TrainingPool(NamedTuple):
    """What the algorithm trains against in one step: the adversary's batch and the replay
    (with that batch's hardest added)."""

    replay: Archive  # the replay after adding the batch's hardest instances
    instances: object  # batch + replay, [P]
    optimum: jax.Array  # [P]
    valid: jax.Array  # [P] bool: False for empty replay slots


def init_state(game, key: jax.Array) -> GameState:
    """Fresh parameters, optimiser states and an empty replay."""
    key_alg, key_adv, key_run = jax.random.split(key, 3)
    algorithm = game.init_params(key_alg)
    adversary = game.adversary.init(key_adv)
    replay = empty_archive(game.loop_config.replay_size, game.instance_length)
    return GameState(
        step=jnp.zeros((), jnp.int32),
        key=key_run,
        algorithm=algorithm,
        adversary=adversary,
        algorithm_opt=game.algorithm_optimizer().init(algorithm),
        adversary_opt=adversary_optimizer(game.adversary_config).init(adversary),
        replay=replay,
        best_algorithm=algorithm,
        best_score=jnp.asarray(jnp.inf, jnp.float32),
    )


def delivered_params(game, state) -> dict:
    """The parameters a run delivers (evaluated, exported, plotted): the measured iterate with
    the lowest score (advonline/simultaneous_loop.py, advonline/oracle_loop.py), or the
    last one before any measurement. The evaluator then measures it on its own."""
    if bool(jnp.isfinite(state.best_score)):
        return state.best_algorithm
    return state.algorithm


def add_hardest(replay: Archive, types: jax.Array, optimum, payoff, count: int) -> Archive:
    """The ``count`` hardest (lowest ``payoff``) of ``types`` ``[B, T]`` replayed."""
    hardest = jnp.argsort(payoff)[:count]
    return push_first_out(replay, types[hardest], optimum[hardest])


def replay_instances(game, state: GameState, types: jax.Array, ratio: jax.Array) -> GameState:
    """``state`` with the ``replay_per_step`` worst of ``types`` ``[N, T]`` (by ``ratio``)
    replayed, each with its OPT."""
    optimum = game.batch_optimum(game.decode(types, jnp.float32))
    count = game.loop_config.replay_per_step
    return state.replace(replay=add_hardest(state.replay, types, optimum, 1.0 / ratio, count))


def training_pool(game, replay: Archive, written: Written, optimum, payoff) -> TrainingPool:
    """The pool of one step, the batch's ``replay_per_step`` hardest (by ``payoff``) replayed;
    the replay holds tokens, decoded here in the batch's dtype."""
    count = game.loop_config.replay_per_step
    replay = add_hardest(replay, written.chosen, optimum, payoff, count)
    dtype = jax.tree.leaves(written.instances)[0].dtype
    replayed = game.decode(replay.types, dtype)
    return TrainingPool(
        replay=replay,
        instances=jax.tree.map(
            lambda *leaves: jnp.concatenate(leaves), written.instances, replayed
        ),
        optimum=jnp.concatenate([optimum, replay.optimum]),
        valid=jnp.concatenate([jnp.ones_like(optimum, bool), replay.filled]),
    )


def step_metrics(payoff: jax.Array, pool_payoff: jax.Array, valid: jax.Array) -> StepMetrics:
    """Metrics of one step from the batch's payoffs and the (valid) pool's."""
    return StepMetrics(
        payoff=payoff.mean(),
        adversary_ratio=1.0 / payoff.min(),
        pool_ratio=1.0 / jnp.where(valid, pool_payoff, jnp.inf).min(),
    )


@functools.partial(jax.jit, static_argnums=0)
def game_step(game, state: GameState) -> tuple[GameState, StepMetrics]:
    """One step: the adversary's updates, then the algorithm's (module docstring)."""
    loop, adversary_config = game.loop_config, game.adversary_config
    adversary_opt = adversary_optimizer(adversary_config)
    algorithm_opt = game.algorithm_optimizer()
    updates_made = loop.adversary_steps
    key, *keys = jax.random.split(state.key, 1 + max(updates_made, 1))
    adversary, adversary_state = state.adversary, state.adversary_opt
    frozen = game.frozen(state.algorithm)  # once: every batch is written and scored against it
    for index, key_write in enumerate(keys):
        written = game.shard(
            game.adversary.write(
                adversary,
                game.setting,
                key_write,
                adversary_config.batch,
                jnp.float32,
                *game.writing_inputs(frozen),
            )
        )
        optimum = game.batch_optimum(written.instances)
        payoff = game.batch_payoffs(frozen, written.instances, optimum)
        if index < updates_made:  # none when the adversary is frozen
            grads = jax.grad(functools.partial(reinforce_loss, game.adversary))(
                adversary, written, payoff, adversary_config.entropy
            )
            updates, adversary_state = adversary_opt.update(grads, adversary_state, adversary)
            adversary = optax.apply_updates(adversary, updates)
    replay, pool, pool_optimum, valid = training_pool(game, state.replay, written, optimum, payoff)
    pool, pool_optimum, valid = game.shard((pool, pool_optimum, valid))
    algorithm, algorithm_state = state.algorithm, state.algorithm_opt
    weigh = functools.partial(softmin_weights, valid=valid, temperature=loop.temperature)
    for _ in range(loop.algorithm_steps):
        key_update = None
        if game.update_draws:
            key, key_update = jax.random.split(key)
        pool_payoff, ascent = game.pool_update(algorithm, pool, pool_optimum, weigh, key_update)
        descent = jax.tree.map(jnp.negative, ascent)
        updates, algorithm_state = algorithm_opt.update(descent, algorithm_state, algorithm)
        algorithm = optax.apply_updates(algorithm, updates)
    new_state = state.replace(
        step=state.step + 1,
        key=key,
        algorithm=algorithm,
        adversary=adversary,
        algorithm_opt=algorithm_state,
        adversary_opt=adversary_state,
        replay=replay,
    )
    return new_state, step_metrics(payoff, pool_payoff, valid)
