"""Classic allocation rules for budgeted allocation, each ``make(setting) -> rule`` with the
learned rule's signature (``Observation -> shares [n]``). Every rule only gives a query to
advertisers that bid on it and have budget left.

- ``greedy``: the whole query to the advertiser that can earn the most from it,
  ``min(bid, budget left)`` (ties: lowest index); ratio 2 as bids get small.
- ``balance``: the whole query to the bidder that has spent the least of its budget (ties:
  lowest index); ratio ``e / (e - 1)`` for small equal bids (Kalyanasundaram and Pruhs 2000).
- ``msvv``: the whole query to the bidder with the largest ``bid (1 - e^(spent - 1))``
  (Mehta, Saberi, Vazirani and Vazirani 2007); ratio ``e / (e - 1)`` for small bids. With
  query-uniform bids it makes Balance's choices; the two differ where bids differ.
- ``water-filling``: the fractional Balance: the query is split so that the bidders' spent
  fractions rise together from the lowest (Buchbinder, Jain and Naor 2007).
- ``random``: equal shares to the bidders with budget left: what a uniformly random choice
  among them earns in expectation, query by query.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from advonline.problems.adwords.model import Observation, Setting
from advonline.problems.adwords.policy_file import eligible


@struct.dataclass
class ClassicRule:
    """A classic rule: ``choose(observation, eligible) -> shares [n]``."""

    choose: Callable = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> jax.Array:
        return self.choose(observation, eligible(observation.bids, observation.spent))


def _first_best(score: jax.Array, eligible: jax.Array) -> jax.Array:
    """The whole query to the eligible advertiser of the highest score (ties: lowest index)."""
    lowest = jnp.finfo(score.dtype).min
    best = jnp.argmax(jnp.where(eligible, score, lowest))
    return jnp.where(jnp.any(eligible), jax.nn.one_hot(best, score.shape[0], dtype=score.dtype), 0)


def _greedy(observation: Observation, eligible: jax.Array) -> jax.Array:
    return _first_best(jnp.minimum(observation.bids, 1.0 - observation.spent), eligible)


def _balance(observation: Observation, eligible: jax.Array) -> jax.Array:
    return _first_best(-observation.spent, eligible)


def _msvv(observation: Observation, eligible: jax.Array) -> jax.Array:
    return _first_best(observation.bids * (1.0 - jnp.exp(observation.spent - 1.0)), eligible)


def _water_filling(observation: Observation, eligible: jax.Array) -> jax.Array:
    # The water level L solves sum over eligible i of clip(L - spent_i, 0, 1 - spent_i) = bid,
    # piecewise linear in L. Raising it to bidder i's spent fraction takes
    # sum_j max(spent_i - spent_j, 0) of the query (the others count as full, spent 1); the
    # bidders for which that is at most the bid are the ones below L, so L is their mean
    # spent fraction plus the bid shared among them, in closed form (pairwise, n^2 per query:
    # on the CPU faster than a sort, or than bisecting L).
    bid = jnp.max(observation.bids)
    spent = jnp.where(eligible, observation.spent, 1.0)
    raising = jnp.sum(jnp.maximum(spent[:, None] - spent[None, :], 0.0), axis=1)
    below = eligible & (raising <= bid)
    lifted = bid + jnp.sum(jnp.where(below, spent, 0.0))
    level = jnp.minimum(lifted / jnp.maximum(jnp.sum(below), 1), 1.0)
    filled = jnp.clip(level - spent, 0.0, 1.0 - spent)  # 0 for the others, spent 1 here
    # never more than the whole query, whatever the rounding
    return filled / jnp.maximum(jnp.sum(filled), jnp.where(bid > 0, bid, 1.0))


def _random(observation: Observation, eligible: jax.Array) -> jax.Array:
    count = jnp.sum(eligible)
    return jnp.where(eligible, 1.0 / jnp.maximum(count, 1), 0.0).astype(observation.spent.dtype)


def _maker(choose: Callable) -> Callable[[Setting], ClassicRule]:
    def make(setting: Setting) -> ClassicRule:
        del setting
        return ClassicRule(choose)

    return make


BASELINES = {
    "greedy": _maker(_greedy),
    "balance": _maker(_balance),
    "msvv": _maker(_msvv),
    "water-filling": _maker(_water_filling),
    "random": _maker(_random),
}
