"""One fixed posted price, by default the geometric mean ``sqrt(L U)``.

A single price is the classic posted-price mechanism of revenue management; as an online
algorithm against a worst case it is not competitive (ratio ``inf``): buyers whose density
is below the price never buy, so an instance made only of them leaves it with nothing.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting


@struct.dataclass
class FixedPolicy:
    """Posts ``price`` on each resource whatever the state."""

    price: float = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        return PriceDistribution.deterministic(jnp.full_like(observation.utilisation, self.price))


def make(setting: Setting) -> FixedPolicy:
    """A fixed price of ``sqrt(L U)``."""
    return FixedPolicy(price=math.sqrt(setting.low * setting.high))
