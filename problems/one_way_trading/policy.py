"""The learned one-way trading policy and its policy file.

The network scores every grid rate from its position ``log(p / m) / log(theta)`` (one shared
MLP, so neighbouring rates get related scores) and a separate score keeps part of the unit for
the end. A softmax over the ``G + 1`` scores gives how much of the unit is converted at each
rate; their running sum is a conversion curve, non-decreasing by construction, so the exact
ratio of every iterate is computable (:mod:`problems.one_way_trading.exact`). The policy is
round-hidden and deterministic.

The policy file is JSON: the setting and the curve on its grid
(:mod:`problems.one_way_trading.policy_file` loads it with NumPy only).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from advonline.problem import PolicyHead, network_sizes
from advonline.problems.one_way_trading import policy_file
from advonline.problems.one_way_trading.model import CurvePolicy, Setting


class CurveNetwork(nn.Module):
    """Scores ``[G + 1]`` from rate positions ``[G]``: one per grid rate, and one to keep."""

    hidden: int = 32
    layers: int = 2

    @nn.compact
    def __call__(self, positions: jax.Array) -> jax.Array:
        features = positions[:, None]
        for _ in range(self.layers):
            features = nn.tanh(nn.Dense(self.hidden)(features))
        scores = nn.Dense(1)(features)[:, 0]
        keep = self.param("keep", nn.initializers.zeros, ())
        return jnp.concatenate([scores, keep[None]])


def positions(setting: Setting, dtype=None) -> jax.Array:
    """Each grid rate's place in [0, 1]: ``log(p / m) / log(theta)``."""
    grid = np.log(np.asarray(setting.rates) / setting.low) / math.log(setting.theta)
    return jnp.asarray(grid, dtype or jnp.result_type(float))


def policy_head(setting: Setting, config: dict) -> PolicyHead:
    """The curve network for ``setting`` (``config``: ``hidden``, ``layers``, whole numbers
    >= 1); ValueError names a key or value it cannot use."""
    sizes = network_sizes(config)
    network = CurveNetwork(**sizes)
    where = positions(setting)

    def to_policy(params) -> CurvePolicy:
        shares = jax.nn.softmax(network.apply(params, where.astype(_dtype(params))))
        fractions = jnp.minimum(jnp.cumsum(shares[:-1]), 1.0)
        return CurvePolicy(fractions=fractions, rates=setting.rates)

    return PolicyHead(module=network, example=(where,), to_policy=to_policy)


def _dtype(params):
    return jax.tree_util.tree_leaves(params)[0].dtype


def export(setting: Setting, policy: CurvePolicy) -> dict:
    """The policy file's content: the setting and the curve on its grid, linear between."""
    return {
        "format": policy_file.FORMAT,
        "between": policy_file.BETWEEN,
        "setting": setting.describe(),
        "rates": [float(rate) for rate in setting.rates],
        "fractions": [float(value) for value in np.asarray(policy.fractions)],
    }


def restore(document: dict) -> tuple[Setting, CurvePolicy]:
    """A policy file read back as the curve the simulator runs, with its setting."""
    described, curve = policy_file.load(document)
    try:
        setting = Setting.from_config({k: v for k, v in described.items() if k != "problem"})
    except TypeError:  # a value of the wrong kind
        raise policy_file.PolicyFileError("one-way trading policy file: a bad setting") from None
    if not np.allclose(curve.rates, setting.rates, rtol=1e-9):
        raise policy_file.PolicyFileError("one-way trading policy file: rates off its grid")
    return setting, CurvePolicy(fractions=jnp.asarray(curve.fractions), rates=setting.rates)
