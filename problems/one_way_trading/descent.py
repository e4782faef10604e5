"""Certificate descent for one-way trading: the network's curve follows its certificate for
``T`` rounds down (:func:`~problems.one_way_trading.exact.rounds_bound`).

That certificate is a maximum, over fine rates ``p``, of ``p`` over what the bound's walk to
``p`` earns, and each walk's revenue is linear in the curve
(:meth:`~problems.one_way_trading.exact.RoundsBound.revenue_coefficients`). So a descent
epoch cuts planes: it computes the bound for the current curve (NumPy, outside ``jit``),
adds the walks to every :data:`SPREAD`-th fine rate and to its :data:`HARDEST` hardest to a
working set, takes Adam steps down the largest ratio over the working set (one jitted scan,
float64), and repeats :data:`ROUNDS` times. For every curve the working set's maximum is at
most the certificate (the bound's walks earn the least) and it agrees with the certificate on
the curves the walks were taken at, so the steps follow the certificate where it binds; the
epoch keeps the parameters with the lowest certificate it computed. Walks to rates spread
over the whole range keep the steps from running away where the working set has none.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from advonline.problems.one_way_trading import exact

#: Rounds of (bound, walks, Adam steps) in one descent epoch; walks added per round: to
#: every :data:`SPREAD`-th fine rate and to the :data:`HARDEST` rates.
ROUNDS = 8
SPREAD = 8
HARDEST = 64
#: The learning rate decays along a cosine over the epoch to this fraction of its start.
FINAL_RATE = 0.05


def descend(game, params, certificate: float, steps: int, learning_rate: float):
    """``params``, whose certificate is ``certificate``, after ``steps`` Adam steps in
    :data:`ROUNDS` rounds (module docstring): the parameters with the lowest certificate
    seen (``params`` when none went below), in the network's own precision."""
    setting = game.setting
    count = len(exact.FineRates.of(setting).rates)
    capacity = ROUNDS * (len(range(0, count, SPREAD)) + HARDEST)
    coefficients = np.zeros((capacity, setting.levels))
    tops = np.zeros(capacity)
    taken = 0
    best, best_params = certificate, params
    with jax.enable_x64(True):
        current = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
        per_round = max(1, steps // ROUNDS)
        total = per_round * ROUNDS
        opt_state = _optimiser(total, learning_rate).init(current)
        for round_index in range(ROUNDS + 1):
            # the learned curve never falls (a running sum of shares), so it is certified
            _, ratio, bound = exact.certified(setting, _fractions(game, current))
            if ratio < best:
                best, best_params = ratio, current
            if round_index == ROUNDS:
                break
            hardest = np.argsort(-bound.point_ratios)[:HARDEST]
            ends = np.concatenate([np.arange(0, count, SPREAD), hardest])
            rows, rates = bound.revenue_coefficients(setting.low, ends)
            coefficients[taken : taken + len(ends)] = rows
            tops[taken : taken + len(ends)] = rates
            taken += len(ends)
            valid = np.arange(capacity) < taken
            walks_now = (jnp.asarray(coefficients), jnp.asarray(tops), jnp.asarray(valid))
            current, opt_state = _steps(
                game, current, opt_state, *walks_now, per_round, total, learning_rate
            )
    return jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), best_params, params)


def _fractions(game, params) -> np.ndarray:
    """The curve ``[G]`` of the parameters, on the host in float64."""
    return np.asarray(game.policy(params).fractions, np.float64)


def _optimiser(steps: int, learning_rate: float) -> optax.GradientTransformation:
    """Adam whose rate decays along one cosine over the whole epoch's ``steps``: the later
    rounds, whose working sets are fuller, take the smaller steps."""
    return optax.adam(optax.cosine_decay_schedule(learning_rate, steps, FINAL_RATE))


@functools.partial(jax.jit, static_argnums=(0, 6, 7, 8))
def _steps(game, params, opt_state, coefficients, tops, valid, steps, total, learning_rate):
    """``steps`` Adam steps (of the epoch's ``total``) down ``max_k tops[k] / (coefficients[k]
    @ g + m)`` over the valid walks ``k``, ``g`` the curve of the parameters; the last
    parameters and the optimiser's state."""
    optimiser = _optimiser(total, learning_rate)
    low = game.setting.low

    def worst(p):
        curve = jnp.clip(game.policy(p).fractions, 0.0, 1.0)
        ratios = tops / (coefficients @ curve + low)
        return jnp.max(jnp.where(valid, ratios, 0.0))

    def step(carry, _):
        current, opt_state = carry
        slope = jax.grad(worst)(current)
        update, opt_state = optimiser.update(slope, opt_state, current)
        return (optax.apply_updates(current, update), opt_state), None

    return jax.lax.scan(step, (params, opt_state), None, length=steps)[0]
