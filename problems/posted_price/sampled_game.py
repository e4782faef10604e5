"""The game for several resources (K >= 2): the per-round update by rollouts.

For K = 1 :mod:`posted_price.training` computes every state's action values exactly by backward
induction. With K resources the state (round, utilisation of each resource) is too large for
that, so the values come from rollouts of the one simulator (docs/method.md §3):

**Per-round update by rollouts.** For each instance of the training pool, one run of the
current policy gives the states it reaches. At ``rollout_rounds`` rounds ``t`` drawn at random
from each run, the action's only effect is whether buyer t buys, so the value of *every* price
action ``a`` is ``Q_t(a) = V_{t+1}(s_t) + accept_t(a) G_t`` with ``G_t = b_t x_t +
V_{t+1}(s_t + x_t d_t) - V_{t+1}(s_t)`` (what a sale adds). The two continuations are two more
runs from round ``t + 1``, one from each state, with the same random numbers (so ``G_t`` has
little variance). The pricing network posts one distribution per resource, and the K prices
are drawn with one shared quantile (:func:`~posted_price.model.sample_prices`). The update
is the all-action gradient of each resource's distribution with the other resources' prices
as drawn in the run: ``sum_k sum_a grad pi_k(a | s_t) accept_t(a, p_{-k}) G_t / OPT``, scaled
by ``T / rollout_rounds``. For one resource this is an unbiased estimate of the gradient of
the expected payoff (tested against the exact K = 1 gradient). For K >= 2 it is exact only
for independent draws; with the shared quantile the other resources' prices depend on the
drawn atom, so it is an approximation (the K >= 2 results were trained with it).

**Payoffs** (the adversary's REINFORCE signal, the softmin weights of the pool, the metrics)
are means of ``payoff_runs`` sampled runs. **OPT** of each written batch comes from JAX
(:func:`~posted_price.optimum.device_optimum`, divisible buyers), so the whole step is one
jitted program with no host round trip: exact for K = 2; for K >= 3 the dual method's
primal-feasible value, so a ratio built on it is never inflated, but on the near-tied
instances an adversary writes it can stall short of OPT (``tests/test_optimum.py`` measures
how often and how far). The replay stores each instance's OPT, so an instance is solved once
however often the algorithm trains against it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from advonline.adversary import Written, adversary_update, write_batch
from advonline.problems.posted_price.adversary import sampled_payoffs
from advonline.problems.posted_price.model import Buyer, Instance, purchase, rollout
from advonline.problems.posted_price.optimum import device_optimum
from advonline.problems.posted_price.training import atoms, head, pricing, reinforce_gradient
from advonline.ratio import softmin_weights
from advonline.simultaneous import GameState, StepMetrics, step_metrics, training_pool


class SaleGains(NamedTuple):
    """The rounds of one run where every action is valued, and what it found there."""

    rounds: jax.Array  # [R] int32 round t
    utilisation: jax.Array  # [R, K] state: utilisation before buyer t
    unit_prices: jax.Array  # [R, K] the prices drawn in the run
    gain: jax.Array  # [R] G_t / OPT: what selling to buyer t adds


def sale_gains(
    game, params: dict, instance: Instance, optimum: jax.Array, key: jax.Array
) -> SaleGains:
    """One run of the policy on ``instance`` and, at ``rollout_rounds`` random rounds of it,
    ``G_t / OPT`` by two continuations from round t + 1 with the same random numbers."""
    setting, count = game.setting, head(game).rollout_rounds
    policy = game.policy(jax.lax.stop_gradient(params))
    key_run, key_rounds, key_next = jax.random.split(key, 3)
    run = rollout(setting, policy, instance, key_run, jnp.float32)
    used_before = run.used_before()  # [T, K]
    rounds = jax.random.choice(key_rounds, setting.rounds, (count,), replace=False)
    safe_optimum = jnp.where(optimum > 0, optimum, 1)

    def gain_at(t, key_t):
        used = used_before[t]
        buyer = Buyer(value=instance.values[t], demand=instance.demands[t])
        accepted = purchase(setting, used, jnp.zeros_like(used), buyer)  # the sale if it buys
        after = used + accepted.fraction * buyer.demand
        with_sale = rollout(setting, policy, instance, key_t, jnp.float32, t + 1, after)
        without = rollout(setting, policy, instance, key_t, jnp.float32, t + 1, used)
        return (accepted.welfare + with_sale.welfare - without.welfare) / safe_optimum

    gain = jax.vmap(gain_at)(rounds, jax.random.split(key_next, count))
    capacities = jnp.asarray(setting.capacities, used_before.dtype)[None, :]
    return SaleGains(rounds, used_before[rounds] / capacities, run.unit_prices[rounds], gain)


def rollout_gradient(
    game,
    params: dict,
    instances: Instance,
    optimum: jax.Array,
    weights: jax.Array,
    key: jax.Array,
):
    """Gradient (ascent) of ``sum_i w_i u_i`` by the per-round all-action update on rollouts
    (module docstring): instances ``[P]``, weights ``[P]``."""
    setting = game.setting
    count = instances.values.shape[0]
    found = jax.vmap(sale_gains, in_axes=(None, None, 0, 0, 0))(
        game, params, instances, optimum, jax.random.split(key, count)
    )
    rows = jnp.arange(count)[:, None]
    values = instances.values[rows, found.rounds]  # [P, R]
    demands = instances.demands[rows, found.rounds]  # [P, R, K]
    paid = found.unit_prices * demands
    others = paid.sum(-1, keepdims=True) - paid  # what the other resources cost, [P, R, K]
    price = jnp.asarray(atoms(game), values.dtype)
    bundle_price = price[None, None, None] * demands[..., None] + others[..., None]
    accept = values[..., None, None] >= bundle_price  # price atom a on resource k: bought?
    accept &= (demands.sum(-1) > 0)[..., None, None]  # [P, R, K, A]
    scale = setting.rounds / head(game).rollout_rounds
    coefficient = jax.lax.stop_gradient(weights[:, None] * found.gain * scale)  # [P, R]
    fractions = found.rounds.astype(values.dtype) / setting.rounds

    def expected_sales(p):
        logits = pricing(game).apply(p, found.utilisation, fractions)  # [P, R, K, A]
        probs = jax.nn.softmax(logits, axis=-1)
        return jnp.sum(coefficient[..., None, None] * probs * accept)

    return jax.grad(expected_sales)(params)


def pool_payoffs(game, params: dict, instances: Instance, optimum, key) -> jax.Array:
    """Payoffs ``[B]``: mean welfare of ``payoff_runs`` runs of the current policy over OPT."""
    runs = head(game).payoff_runs
    return sampled_payoffs(game.setting, game.policy(params), instances, optimum, key, runs)


_pool_payoffs = jax.jit(pool_payoffs, static_argnums=0)


@functools.partial(jax.jit, static_argnums=0)
def sampled_game_step(game, state: GameState) -> tuple[GameState, StepMetrics]:
    """One step of the K >= 2 game, one jitted program: ``n_adv`` adversary updates, each
    batch's OPT in JAX (:func:`~posted_price.optimum.device_optimum`), then ``n_alg``
    algorithm updates (:func:`_algorithm_updates`)."""
    state, written, optimum, payoff, key = _adversary_updates(game, state)
    return _algorithm_updates(game, state, written, optimum, payoff, key)


def _adversary_updates(game, state: GameState):
    """``n_adv`` adversary updates, each batch's OPT in JAX; the state after
    them, the last batch, its OPT and payoffs, and the algorithm's key."""
    setting, batch = game.setting, game.adversary_config.batch
    updates_made = game.loop_config.adversary_steps
    key, key_algorithm, *keys = jax.random.split(state.key, 2 + max(updates_made, 1))
    adversary, adversary_state = state.adversary, state.adversary_opt
    for index, key_batch in enumerate(keys):
        key_write, key_runs = jax.random.split(key_batch)
        written = game.shard(
            write_batch(game.adversary, adversary, setting, key_write, batch, jnp.float32)
        )
        optimum = device_optimum(setting, written.instances)
        payoff = _pool_payoffs(game, state.algorithm, written.instances, optimum, key_runs)
        if index < updates_made:  # none when the adversary is frozen
            adversary, adversary_state = adversary_update(
                game.adversary, game.adversary_config, adversary, adversary_state, written, payoff
            )
    state = state.replace(key=key, adversary=adversary, adversary_opt=adversary_state)
    return state, written, optimum, payoff, key_algorithm


@functools.partial(jax.jit, static_argnums=0)
def _algorithm_updates(
    game,
    state: GameState,
    written: Written,
    optimum: jax.Array,
    payoff: jax.Array,
    key: jax.Array,
) -> tuple[GameState, StepMetrics]:
    """Replay the batch's hardest instances, then ``n_alg`` updates of the pricing network on
    the pool (batch and replay) weighted by a softmin of its payoffs."""
    loop = game.loop_config
    replay, pool, pool_optimum, valid = training_pool(game, state.replay, written, optimum, payoff)
    pool, pool_optimum, valid = game.shard((pool, pool_optimum, valid))
    optimizer = game.algorithm_optimizer()
    algorithm, algorithm_state = state.algorithm, state.algorithm_opt
    for _ in range(loop.algorithm_steps):
        key, key_payoffs, key_gradient = jax.random.split(key, 3)
        pool_payoff = pool_payoffs(game, algorithm, pool, pool_optimum, key_payoffs)
        weights = softmin_weights(pool_payoff, valid, loop.temperature)
        per_round = head(game).update == "per-round"
        gradient = rollout_gradient if per_round else reinforce_gradient
        ascent = gradient(game, algorithm, pool, pool_optimum, weights, key_gradient)
        descent = jax.tree.map(jnp.negative, ascent)
        updates, algorithm_state = optimizer.update(descent, algorithm_state, algorithm)
        algorithm = optax.apply_updates(algorithm, updates)
    metrics = step_metrics(payoff, pool_payoff, valid)
    return state.replace(
        step=state.step + 1,
        algorithm=algorithm,
        algorithm_opt=algorithm_state,
        replay=replay,
    ), metrics
