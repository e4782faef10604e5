"""The learned allocation rule and its policy file.

One shared network scores every advertiser from its own features (its bid, its spent
fraction, the query's place, whether it bids: :func:`policy_file.features`), so the rule is
equivariant under a permutation of the advertisers, as in Kong, Liaw, Mehta and Sivakumar
(ICLR 2019). A softmax of the scores over the advertisers that bid and have budget left splits
the query. The rule is deterministic and fractional; its parameters are trained through the
pathwise gradient of the fractional rollout.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.problem import PolicyHead, network_sizes
from advonline.problems.adwords import policy_file
from advonline.problems.adwords.model import Observation, Setting


class ScoreNetwork(nn.Module):
    """Scores ``[n]`` from the advertisers' features ``[n, 4]``."""

    hidden: int = 32
    layers: int = 2

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        for _ in range(self.layers):
            features = nn.tanh(nn.Dense(self.hidden)(features))
        return nn.Dense(1)(features)[:, 0]


@struct.dataclass
class NetworkRule:
    """The learned rule: the network's layers ``((weight, bias), ...)``, tanh between them."""

    layers: tuple
    max_bid: float = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> jax.Array:
        spent = observation.spent
        hidden = policy_file.features(
            observation.bids, spent, observation.round_fraction, self.max_bid, xp=jnp
        ).astype(self.layers[0][0].dtype)
        scores = policy_file.scores(self.layers, hidden, xp=jnp)
        eligible = policy_file.eligible(observation.bids, spent)
        return policy_file.split(scores, eligible, xp=jnp).astype(spent.dtype)


def policy_head(setting: Setting, config: dict) -> PolicyHead:
    """The score network for ``setting`` (``config``: ``hidden``, ``layers``, whole numbers
    >= 1); ValueError names a key or value it cannot use."""
    sizes = network_sizes(config)
    network = ScoreNetwork(**sizes)
    example = jnp.zeros((setting.advertisers, 4), jnp.result_type(float))

    def to_policy(params) -> NetworkRule:
        dense = params["params"]
        layers = tuple(
            (dense[f"Dense_{i}"]["kernel"], dense[f"Dense_{i}"]["bias"])
            for i in range(sizes["layers"] + 1)
        )
        return NetworkRule(layers=layers, max_bid=setting.max_bid)

    return PolicyHead(module=network, example=(example,), to_policy=to_policy)


def export(setting: Setting, rule: NetworkRule) -> dict:
    """The policy file's content: the setting and the network's layers."""
    return {
        "format": policy_file.FORMAT,
        "setting": setting.describe(),
        "layers": [
            {"weight": np.asarray(weight).tolist(), "bias": np.asarray(bias).tolist()}
            for weight, bias in rule.layers
        ],
    }


def restore(document: dict) -> tuple[Setting, NetworkRule]:
    """A policy file read back as the rule the simulator runs, with its setting."""
    described, loaded = policy_file.load(document)
    fields = {k: v for k, v in described.items() if k != "problem"}
    try:
        setting = Setting.from_config(fields)
    except (TypeError, AttributeError):  # a value of the wrong kind
        raise policy_file.PolicyFileError("adwords policy file: a bad setting") from None
    layers = tuple((jnp.asarray(w), jnp.asarray(b)) for w, b in loaded.layers)
    return setting, NetworkRule(layers=layers, max_bid=setting.max_bid)
