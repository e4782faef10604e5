"""A trained :class:`~posted_price.networks.AlgorithmNetwork` as a pricing policy (the shared
signature ``policy(observation) -> PriceDistribution``), in two forms evaluated separately:

- :class:`LearnedPolicy` (``learned``): the randomised algorithm that was trained, a
  distribution over the price atoms in every state;
- :class:`LearnedPriceCurve` (``learned-deterministic``): its read-out for deployment, the
  median price in every state (the lowest atom with cumulative probability >= 1/2). It does
  not inherit the randomised policy's ratio, so it is measured on its own. Why the median and
  not the mean: where the distribution puts most of its mass on L and a little far above, the
  mean sits above L and a buyer at density L never buys (ratio infinite), as measured on the
  first runs; the median keeps the price the policy mostly posts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from advonline.problems.posted_price.model import Observation, PriceDistribution, Setting
from advonline.problems.posted_price.networks import AlgorithmNetwork


def price_atoms(setting: Setting, count: int) -> tuple[float, ...]:
    """``count`` unit prices geometric in [L, U], both ends included (static, float64)."""
    if count < 2:
        return (setting.low,)
    ratio = setting.theta ** (1.0 / (count - 1))
    atoms = [setting.low * ratio**j for j in range(count)]
    atoms[-1] = setting.high
    return tuple(atoms)


@struct.dataclass
class LearnedPolicy:
    """The trained randomised algorithm: ``softmax(network(state))`` over the price atoms."""

    params: dict
    network: AlgorithmNetwork = struct.field(pytree_node=False)
    atoms: tuple[float, ...] = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, observation: Observation) -> PriceDistribution:
        logits = self.network.apply(
            self.params, observation.utilisation, observation.round_fraction
        )  # [K, A]
        probs = jax.nn.softmax(logits, axis=-1)
        prices = jnp.broadcast_to(jnp.asarray(self.atoms, probs.dtype), probs.shape)
        return PriceDistribution(prices=prices, probs=probs)


@struct.dataclass
class LearnedPriceCurve:
    """The deterministic read-out: the median of the learned distribution on each resource."""

    randomised: LearnedPolicy
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> PriceDistribution:
        distribution = self.randomised(observation)
        median = jnp.argmax(jnp.cumsum(distribution.probs, axis=-1) >= 0.5, axis=-1)  # [K]
        prices = jnp.take_along_axis(distribution.prices, median[:, None], axis=-1)[:, 0]
        return PriceDistribution.deterministic(prices)


def max_relative_gap(curve: jax.Array, reference: jax.Array) -> float:
    """``max |curve - reference| / reference`` over a grid (a reported closeness figure)."""
    return float(jnp.max(jnp.abs(curve - reference) / reference))
