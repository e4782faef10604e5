"""The learned ski rental rule and its policy file.

The network scores every day from its place in the season (one shared MLP, so neighbouring
days get related scores) and a separate score stands for never buying; a softmax over the
``T + 1`` scores is the distribution of the buying day, and its running sum the rule's chance
of owning the skis (:class:`~problems.ski_rental.model.BuyingRule`), so every iterate is a
randomised rule whose exact ratio :mod:`problems.ski_rental.exact` computes.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from advonline.problem import PolicyHead, network_sizes
from advonline.problems.ski_rental import policy_file
from advonline.problems.ski_rental.model import BuyingRule, Setting, SettingError


class BuyingDayNetwork(nn.Module):
    """Scores ``[T + 1]`` from day positions ``[T]``: one per day, and one for never."""

    hidden: int = 32
    layers: int = 2

    @nn.compact
    def __call__(self, positions: jax.Array) -> jax.Array:
        features = positions[:, None]
        for _ in range(self.layers):
            features = nn.tanh(nn.Dense(self.hidden)(features))
        scores = nn.Dense(1)(features)[:, 0]
        never = self.param("never", nn.initializers.zeros, ())
        return jnp.concatenate([scores, never[None]])


def policy_head(setting: Setting, config: dict) -> PolicyHead:
    """The buying-day network for ``setting`` (``config``: ``hidden``, ``layers``, whole
    numbers >= 1); ValueError names a key or value it cannot use."""
    network = BuyingDayNetwork(**network_sizes(config))
    positions = jnp.linspace(0.0, 1.0, setting.rounds)

    def to_policy(params) -> BuyingRule:
        dtype = jax.tree_util.tree_leaves(params)[0].dtype
        shares = jax.nn.softmax(network.apply(params, positions.astype(dtype)))
        return BuyingRule(owned=jnp.minimum(jnp.cumsum(shares[:-1]), 1.0))

    return PolicyHead(module=network, example=(positions,), to_policy=to_policy)


def export(setting: Setting, rule: BuyingRule) -> dict:
    """The policy file's content: the setting and the rule's chance of owning, day by day."""
    return {
        "format": policy_file.FORMAT,
        "setting": setting.describe(),
        "owned": [float(value) for value in np.asarray(rule.owned)],
    }


def restore(document: dict) -> tuple[Setting, BuyingRule]:
    """A policy file read back as the rule the simulator runs, with its setting."""
    described, rule = policy_file.load(document)
    try:
        setting = Setting.from_config({k: v for k, v in described.items() if k != "problem"})
    except SettingError as error:
        raise policy_file.PolicyFileError(f"ski rental policy file: {error}") from None
    return setting, BuyingRule(owned=jnp.asarray(rule.owned))
