"""Posted pricing's networks (docs/method.md §3).

- :class:`AlgorithmNetwork` (the algorithm): state -> a distribution over a grid of unit prices
  for each resource, i.e. a randomised online algorithm.
- :class:`StateAdversaryNetwork` (K = 1): an adversary that also sees the algorithm's state
  and scores each buyer type by its chance to buy there, so the ramp, whose densities must
  follow the algorithm's own prices, is a rule of the state; the instances it writes are
  still fixed inputs, measured obliviously (``problems/posted_price/adversary.py``). REINFORCE
  on the core's noise-conditioned writer (:class:`advonline.networks.AdversaryNetwork`) rarely
  finds the ramp.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class AlgorithmNetwork(nn.Module):
    """``(fill [..., K], round_fraction [...]) -> logits [..., K, A]`` over action atoms.

    ``fill`` is the state of each of the K resources as a fraction in [0, 1] (for posted
    pricing, the utilisation of each resource; the atoms are its prices).

    The last layer starts at zero, so training starts from the uniform distribution on the
    atoms (every price equally likely). With ``use_round = False`` the round is hidden from
    the network (a constant feature): the algorithm does not know how much of the horizon is
    left, as in the classic online model where 1 + ln(U/L) is the optimal ratio.

    With ``shared_resources`` one network prices every resource from the same features seen
    from that resource: its own utilisation, the mean and the maximum of the others' and the
    round. The policy then treats resources alike (equivariant: permuting the resources
    permutes the prices), as the problem does when every resource has the same capacity and
    [L, U]; what it learns on one resource holds for all, so an adversary that only ever
    presses one resource during training cannot leave another one untrained.
    """

    resources: int
    atoms: int
    hidden: int = 64
    layers: int = 2
    use_round: bool = True
    shared_resources: bool = False

    @nn.compact
    def __call__(self, fill: jax.Array, round_fraction: jax.Array) -> jax.Array:
        round_feature = 2 * round_fraction - 1 if self.use_round else jnp.zeros_like(round_fraction)
        if self.shared_resources:
            return self._shared(2 * fill - 1, round_feature)
        features = jnp.concatenate([2 * fill - 1, round_feature[..., None]], axis=-1)
        logits = self._head(features, self.resources * self.atoms)
        return logits.reshape(*logits.shape[:-1], self.resources, self.atoms)

    def _shared(self, scaled: jax.Array, round_feature: jax.Array) -> jax.Array:
        count = self.resources
        if count > 1:
            others = ~jnp.eye(count, dtype=bool)  # [K, K]: row k marks every resource but k
            spread = scaled[..., None, :]  # [..., 1, K]
            mean = jnp.sum(jnp.where(others, spread, 0), -1) / (count - 1)
            largest = jnp.max(jnp.where(others, spread, -1), -1)
        else:
            mean = largest = jnp.full_like(scaled, -1)  # no other resource: all idle
        rounds = jnp.broadcast_to(round_feature[..., None], scaled.shape)
        features = jnp.stack([scaled, mean, largest, rounds], axis=-1)  # [..., K, 4]
        return self._head(features, self.atoms)

    def _head(self, features: jax.Array, outputs: int) -> jax.Array:
        for _ in range(self.layers):
            features = nn.tanh(nn.Dense(self.hidden)(features))
        return nn.Dense(outputs, kernel_init=nn.initializers.zeros)(features)


class StateAdversaryNetwork(nn.Module):
    """``(context [..., C], type_features [..., types, F]) -> logits [..., types]``.

    The state-conditioned adversary (``adversary.conditioning = "state"``). The context is
    the noise vector, the round and the algorithm's utilisation; every buyer type is described
    by its own features (its density and demand, and the chance it buys in the current state).
    Each type's logit is a context-dependent base (as in :class:`AdversaryNetwork`) plus a
    context-dependent linear score of its features, so "the cheapest type that surely buys"
    (a ramp along the algorithm's prices) and "the dearest type that does not buy" (a flood
    just below them) are simple rules of the state, whatever the algorithm's prices are.
    """

    types: int
    features: int
    hidden: int = 64
    layers: int = 2

    @nn.compact
    def __call__(self, context: jax.Array, type_features: jax.Array) -> jax.Array:
        for _ in range(self.layers):
            context = nn.tanh(nn.Dense(self.hidden)(context))
        base = nn.Dense(self.types)(context)
        weights = nn.Dense(self.features)(context)
        return base + jnp.einsum("...f,...jf->...j", weights, type_features)
