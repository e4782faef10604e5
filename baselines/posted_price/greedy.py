"""Greedy: post the lowest density L on every resource, selling to everyone while it fits.

The folklore first-come-first-served allocation; competitive ratio U / L on one resource
with small demands (fill the capacity at L, then a capacity's worth arrives at U).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting


@struct.dataclass
class GreedyPolicy:
    """Posts ``L`` on each resource whatever the state."""

    low: float = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        return PriceDistribution.deterministic(jnp.full_like(observation.utilisation, self.low))


def make(setting: Setting) -> GreedyPolicy:
    """Greedy pricing for ``setting``'s L."""
    return GreedyPolicy(low=setting.low)
