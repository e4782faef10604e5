"""The core's network for an adversary that writes token sequences (docs/method.md §3).

:class:`AdversaryNetwork`: a noise vector and the round -> a distribution over the encoding's
tokens for that round. An input is written by drawing one noise vector, then one token per
round (:class:`advonline.adversary.TokenWriter`).

Why a noise vector and not an autoregressive model: a known hard input is often "rise to
some level, then stop there"; which level is the one choice the adversary must randomise over
(against the optimal algorithm every stopping level is equally bad). Conditioned on the noise,
the network writes one sequence (its logits can be sharp in every round: "rise until round
tau(z), then stay at level v(z)" is a function of (z, t) alone), and the mixture over the
noise is the adversary's mixed strategy. Rounds are independent given the noise, so writing a
batch of inputs is one ``vmap``, with no loop over rounds. A problem may bring networks of its
own (posted pricing's pricing network and state-conditioned adversary:
``problems/posted_price/networks.py``).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class AdversaryNetwork(nn.Module):
    """``(noise [..., Z], round_fraction [...]) -> logits [..., types]`` over the tokens."""

    types: int
    hidden: int = 64
    layers: int = 2

    @nn.compact
    def __call__(self, noise: jax.Array, round_fraction: jax.Array) -> jax.Array:
        features = jnp.concatenate([noise, 2 * round_fraction[..., None] - 1], axis=-1)
        for _ in range(self.layers):
            features = nn.tanh(nn.Dense(self.hidden)(features))
        return nn.Dense(self.types)(features)
