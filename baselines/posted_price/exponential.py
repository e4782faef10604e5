"""Exponential per-resource pricing, the primal-dual rule for online packing.

Each resource k posts the unit price

    p_k(y_k) = P0 * (U / P0) ** y_k,   P0 = L / (2K),

on its utilisation ``y_k`` in [0, 1]: it starts at ``L / (2K)`` and reaches ``U`` when the
resource is full, so while every resource is lightly used any bundle of density >= L clears,
and nobody pays for a bundle's share of a full resource. The constants are those of
Bartal, Gonen and Nisan's posted-price mechanism for multi-unit combinatorial auctions
(start ``v_min / (2k)``, growth factor ``2k v_max / v_min`` over the capacity); the same
exponential prices are the dual variables of Buchbinder and Naor's primal-dual algorithm for
online packing. With capacity B times the largest demand, the ratio is
``O((K U / L) ** (1 / B))``, hence ``O(log(K U / L))`` for ``B >= log(K U / L)``; the lower
bound is ``Omega(log(K U / L))``, with no tight constant known (docs/method.md §2).

References: Y. Bartal, R. Gonen, N. Nisan, "Incentive compatible multi unit combinatorial
auctions", TARK 2003; N. Buchbinder, J. Naor, "Online primal-dual algorithms for covering and
packing", Mathematics of Operations Research 34(2), 2009.
"""

from __future__ import annotations

import jax
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting


def exponential_price(utilisation: jax.Array, low: float, high: float, resources: int):
    """``P0 (U / P0) ** y`` elementwise on utilisation ``y`` (any shape), ``P0 = L / (2K)``."""
    start = low / (2 * resources)
    return start * (high / start) ** utilisation


@struct.dataclass
class ExponentialPolicy:
    """Posts ``P0 (U / P0) ** y_k`` on each resource k."""

    low: float = struct.field(pytree_node=False)
    high: float = struct.field(pytree_node=False)
    resources: int = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        return PriceDistribution.deterministic(
            exponential_price(observation.utilisation, self.low, self.high, self.resources)
        )


def make(setting: Setting) -> ExponentialPolicy:
    """Exponential pricing for ``setting``'s L, U and K."""
    return ExponentialPolicy(low=setting.low, high=setting.high, resources=setting.resources)
