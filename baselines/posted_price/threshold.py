"""The optimal threshold price for one resource with small demands (docs/method.md §2).

``phi(y) = L`` for ``y < 1/alpha`` and ``L * exp(alpha * y - 1)`` for ``y >= 1/alpha``, with
``alpha = 1 + ln(U / L)``; ``phi(1) = U``. Competitive ratio ``alpha`` in the small-demand
limit, which is optimal (also among randomised algorithms).

References: Y. Zhou, D. Chakrabarty, R. Lukose, "Budget constrained bidding in keyword
auctions and online knapsack problems", WINE 2008; Z. Zhang, Z. Li, C. Wu, "Optimal posted
prices for online cloud resource allocation", ACM SIGMETRICS 2017. For K >= 2 the price of
each resource is ``phi`` of its own utilisation (Zhang-Li-Wu's multi-type extension).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting


def threshold_price(utilisation: jax.Array, low: float, high: float) -> jax.Array:
    """``phi(y)`` elementwise on utilisation ``y`` (any shape)."""
    alpha = 1.0 + math.log(high / low)
    rising = low * jnp.exp(alpha * utilisation - 1.0)
    return jnp.where(utilisation < 1.0 / alpha, low, rising)


@struct.dataclass
class ThresholdPolicy:
    """Posts ``phi(y_k)`` on each resource k."""

    low: float = struct.field(pytree_node=False)
    high: float = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        return PriceDistribution.deterministic(
            threshold_price(observation.utilisation, self.low, self.high)
        )


def make(setting: Setting) -> ThresholdPolicy:
    """The threshold policy for ``setting``'s L and U."""
    return ThresholdPolicy(low=setting.low, high=setting.high)
