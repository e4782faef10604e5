"""The adversary network's side of the game, for any problem: a writer of instances as token
sequences, and the REINFORCE objective that teaches it to write harder ones.

An :class:`Adversary` is a static, hashable description (a ``jit`` static argument) with three
methods:

- ``init(key) -> params``;
- ``write(params, setting, key, count, dtype, *against) -> Written``: ``count`` instances, one
  token per round drawn from the network's distribution. ``against`` is whatever the writer
  conditions on besides its own noise (e.g. the frozen algorithm, for a writer that writes
  each round from the state the algorithm reached); a writer that needs nothing ignores it;
- ``log_prob(params, written) -> (log_prob [B], entropy [B])``: the log-probability of each
  written instance under ``params`` and its mean per-round entropy, recomputed from what the
  writer recorded (so the gradient flows through the network, not through the writing).

A problem brings its implementations (e.g. a noise-conditioned and a state-conditioned
writer); the oracles, the game step and the fresh best response use only this protocol.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import optax


class Written(NamedTuple):
    """A batch of instances and the draws that wrote them (what REINFORCE needs)."""

    instances: Any  # the problem's instance pytree, leading axis [B]
    noise: jax.Array  # [B, Z] the noise each instance was written from
    chosen: jax.Array  # [B, T] int32 the token drawn in each round
    context: Any = None  # per-round inputs the writer saw beyond its noise (None: nothing)


class Adversary(Protocol):
    """What the game asks of an adversary network (module docstring)."""

    def init(self, key: jax.Array) -> dict: ...

    def write(
        self, params: dict, setting: Any, key: jax.Array, count: int, dtype, *against
    ) -> Written: ...

    def log_prob(self, params: dict, written: Written) -> tuple[jax.Array, jax.Array]: ...


def token_log_prob(logits: jax.Array, chosen: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``log_prob`` from per-round logits ``[B, T, V]`` of the tokens ``chosen`` ``[B, T]``:
    the sum over rounds ``[B]`` and the mean per-round entropy ``[B]``."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, chosen[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1).mean(-1)
    return picked.sum(-1), entropy


@dataclasses.dataclass(frozen=True)
class NoiseWriter:
    """Writes each instance in advance from a noise vector and the round
    (:class:`~advonline.networks.AdversaryNetwork` over the vocabulary), one ``vmap``: the
    noise-conditioned writer. What the tokens mean is the subclass's (``instances(chosen,
    dtype)``); the writer ignores what it could write against."""

    network: Any  # an AdversaryNetwork over the vocabulary
    latent: int  # the noise vector's size

    def instances(self, chosen: jax.Array, dtype) -> Any:
        raise NotImplementedError

    def init(self, key: jax.Array) -> dict:
        return self.network.init(key, jnp.zeros(self.latent), jnp.zeros(()))

    def logits(self, params: dict, noise: jax.Array, rounds: int) -> jax.Array:
        """``[B, T, vocabulary]`` for noise ``[B, Z]``."""
        fractions = jnp.arange(rounds) / rounds
        noise_grid = jnp.broadcast_to(noise[:, None, :], (noise.shape[0], rounds, self.latent))
        fraction_grid = jnp.broadcast_to(fractions[None, :], noise_grid.shape[:2])
        return self.network.apply(params, noise_grid, fraction_grid)

    def write_tokens(self, params: dict, key: jax.Array, count: int, rounds: int, dtype):
        """``count`` instances of ``rounds`` tokens: one noise vector each, then one token
        per round."""
        key_noise, key_tokens = jax.random.split(key)
        noise = jax.random.normal(key_noise, (count, self.latent))
        chosen = jax.random.categorical(key_tokens, self.logits(params, noise, rounds), axis=-1)
        return Written(self.instances(chosen, dtype), noise, chosen)

    def log_prob(self, params: dict, written: Written) -> tuple[jax.Array, jax.Array]:
        logits = self.logits(params, written.noise, written.chosen.shape[1])
        return token_log_prob(logits, written.chosen)


@dataclasses.dataclass(frozen=True)
class TokenWriter(NoiseWriter):
    """The noise-conditioned writer of a problem's encoding (advonline/problem.py): instances
    of ``encoding.length`` tokens, decoded by the encoding."""

    encoding: Any = None

    def instances(self, chosen: jax.Array, dtype) -> Any:
        return self.encoding.decode(chosen)

    def write(self, params: dict, setting, key: jax.Array, count: int, dtype, *against):
        return self.write_tokens(params, key, count, self.encoding.length, dtype)


def reinforce_loss(
    adversary: Adversary,
    params: dict,
    written: Written,
    payoff: jax.Array,
    entropy_bonus: float,
) -> jax.Array:
    """REINFORCE for a minimiser of the payoff ``[B]`` (E[ALG] / OPT of each written
    instance), with the batch mean as baseline and the advantage scaled to unit spread, plus an
    entropy bonus on the per-round token distributions."""
    log_prob, entropy = adversary.log_prob(params, written)
    advantage = payoff - payoff.mean()
    advantage = advantage / (advantage.std() + 1e-8)
    return jnp.mean(jax.lax.stop_gradient(advantage) * log_prob) - entropy_bonus * entropy.mean()


class FreshAdversary(NamedTuple):
    """A fresh adversary trained against a frozen algorithm (:func:`train_fresh`)."""

    params: dict  # the adversary's parameters after training
    ratio_by_step: jax.Array  # [S] the worst ratio OPT / E[ALG] of each step's batch
    instance_by_step: Any  # [S] the instance that reached it (the problem's pytree)
    tokens_by_step: jax.Array  # [S, T] int32 that instance's tokens


def train_fresh(
    adversary: Adversary, config, steps: int, key: jax.Array, write, score
) -> FreshAdversary:
    """A fresh adversary trained from scratch for ``steps`` REINFORCE steps (one
    ``lax.scan``; the caller jits it): each step writes a batch with ``write(params, key) ->
    Written`` and scores it with ``score(written) -> payoff [B]`` (against the frozen
    algorithm); ``config`` is the ``[adversary]`` table (``learning_rate``, ``entropy``).
    Keeps each step's worst instance."""
    key_init, key_steps = jax.random.split(key)
    params = adversary.init(key_init)
    optimizer = adversary_optimizer(config)

    def step(carry, key_step):
        params, opt_state = carry
        written = write(params, key_step)
        payoff = score(written)
        grads = jax.grad(functools.partial(reinforce_loss, adversary))(
            params, written, payoff, config.entropy
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        ratios = 1.0 / payoff
        index = jnp.argmax(ratios)
        worst = jax.tree.map(lambda leaf: leaf[index], written.instances)
        return (params, opt_state), (ratios[index], worst, written.chosen[index])

    (params, _), by_step = jax.lax.scan(
        step, (params, optimizer.init(params)), jax.random.split(key_steps, steps)
    )
    return FreshAdversary(params, *by_step)


def adversary_optimizer(config) -> optax.GradientTransformation:
    """Adam at the ``[adversary]`` table's ``learning_rate``."""
    return optax.adam(config.learning_rate)


@functools.partial(jax.jit, static_argnums=(0, 2, 4, 5))
def write_batch(
    adversary: Adversary, params: dict, setting: Any, key: jax.Array, count: int, dtype
) -> Written:
    """:meth:`Adversary.write` (with nothing to write against), jit-compiled."""
    return adversary.write(params, setting, key, count, dtype)


@functools.partial(jax.jit, static_argnums=(0, 1))
def adversary_update(
    adversary: Adversary,
    config,
    params: dict,
    opt_state: optax.OptState,
    written: Written,
    payoff: jax.Array,
) -> tuple[dict, optax.OptState]:
    """One REINFORCE step of the adversary on the payoffs ``[B]`` of what it wrote; ``config``
    is the ``[adversary]`` table (hashable: ``learning_rate`` and ``entropy``)."""
    grads = jax.grad(functools.partial(reinforce_loss, adversary))(
        params, written, payoff, config.entropy
    )
    updates, opt_state = adversary_optimizer(config).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
