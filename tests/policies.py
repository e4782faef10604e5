"""Policies defined by tables over (round, utilisation grid), for tests of K = 1 machinery."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution


def _cell(observation: Observation, rounds: int, grid: int) -> tuple[jax.Array, jax.Array]:
    round_index = jnp.round(observation.round_fraction * rounds).astype(jnp.int32)
    used_units = jnp.round(observation.utilisation[0] * grid).astype(jnp.int32)
    return round_index, used_units


@struct.dataclass
class TablePolicy:
    """Deterministic: posts ``prices[t, u]`` in round t after u of G units are sold."""

    prices: jax.Array  # [T, G+1]
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        rounds, grid = self.prices.shape[0], self.prices.shape[1] - 1
        t, u = _cell(observation, rounds, grid)
        return PriceDistribution.deterministic(self.prices[t, u][None])


@struct.dataclass
class RandomTablePolicy:
    """Randomised: price ``levels[a]`` with probability ``probs[t, u, a]``."""

    levels: jax.Array  # [A]
    probs: jax.Array  # [T, G+1, A]
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, observation: Observation) -> PriceDistribution:
        rounds, grid = self.probs.shape[0], self.probs.shape[1] - 1
        t, u = _cell(observation, rounds, grid)
        return PriceDistribution(prices=self.levels[None], probs=self.probs[t, u][None])
