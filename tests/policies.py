"""Policies defined by tables over (round, utilisation grid), for tests: one resource's, and
random tables over the product grid of several."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting
from advonline.problems.posted_price.product_grid import GridTablePolicy, state_count


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


def random_grid_table(
    setting: Setting, seed: int, atoms: int, off_range: bool = False
) -> GridTablePolicy:
    """Random sorted prices per (round, product-grid state, resource) with random
    probabilities (deterministic with one atom), in [L, U] or with ``off_range`` in
    [0.8 L, 1.1 U] (not monotone in the state either way); the empty state posts L, so that
    the ratio stays finite and a comparison says something."""
    rng = np.random.default_rng(seed)
    shape = (setting.rounds, state_count(setting), setting.resources, atoms)
    low, high = (
        (0.8 * setting.low, 1.1 * setting.high) if off_range else (setting.low, setting.high)
    )
    prices = np.sort(rng.uniform(low, high, shape), -1)
    prices[:, 0] = setting.low
    probs = rng.dirichlet(np.ones(atoms), shape[:-1])
    table = PriceDistribution(jnp.asarray(prices), jnp.asarray(probs))
    return GridTablePolicy(table, setting, deterministic=atoms == 1)
