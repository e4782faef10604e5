"""An exported policy file as a pricing policy (the shared ``policy(observation)`` signature),
so that ``advonline evaluate --policy FILE`` measures it with the same evaluator as everything
else.

- Version 2 (a network) becomes the learned policy it was exported from: the same module with
  the same float32 weights.
- A mixture (version 2, kind ``mixture``) becomes the :class:`~advonline.mixture.
  SnapshotMixture` of its member networks, drawn once per input with the file's weights.
- Version 1 (a table) posts exactly what the file says on its utilisation grid, and between
  grid points interpolates linearly, as the NumPy loader (:mod:`posted_price.policy_file`) does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.mixture import SnapshotMixture
from advonline.problems.posted_price.learned import LearnedPolicy, LearnedPriceCurve
from advonline.problems.posted_price.model import (
    Observation,
    Policy,
    PriceDistribution,
    Setting,
    SettingError,
)
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.policy_file import (
    MixturePolicy,
    NetworkPolicy,
    PolicyFileError,
    PricingPolicy,
    TablePolicy,
)


@struct.dataclass
class TabulatedPolicy:
    """Prices (deterministic) or probabilities over atoms (randomised) on a utilisation grid.

    ``table`` is ``[K, R, G + 1]`` (deterministic) or ``[K, R, G + 1, A]`` with ``R = T`` for a
    round-dependent policy and ``R = 1`` otherwise; ``atoms`` is ``[K, A]`` (randomised).
    """

    grid: np.ndarray  # [G + 1] utilisation grid, increasing from 0 to 1
    table: np.ndarray
    atoms: np.ndarray | None
    rounds: int = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False)

    def __call__(self, observation: Observation) -> PriceDistribution:
        dtype = observation.utilisation.dtype
        grid = jnp.asarray(self.grid).astype(dtype)
        table = jnp.asarray(self.table).astype(dtype)
        y = observation.utilisation  # [K]
        lower = jnp.clip(jnp.searchsorted(grid, y, side="right") - 1, 0, grid.shape[0] - 2)
        weight = (y - grid[lower]) / (grid[lower + 1] - grid[lower])  # [K]
        period = table.shape[1]
        round_index = jnp.round(observation.round_fraction * self.rounds).astype(jnp.int32)
        round_index = jnp.clip(round_index, 0, period - 1)  # period 1: the same every round
        resource = jnp.arange(table.shape[0])
        below, above = table[resource, round_index, lower], table[resource, round_index, lower + 1]
        if self.deterministic:
            return PriceDistribution.deterministic((1 - weight) * below + weight * above)
        probs = (1 - weight)[:, None] * below + weight[:, None] * above  # [K, A]
        return PriceDistribution(prices=jnp.asarray(self.atoms).astype(dtype), probs=probs)


def from_file(policy: PricingPolicy) -> tuple[Setting, Policy]:
    """The setting a loaded policy file was made for, and the policy as an evaluable pytree."""
    fields = {key: value for key, value in policy.setting.items() if key != "problem"}
    try:  # the one reader of settings: types checked, then the values
        setting = Setting.from_config(fields)
    except SettingError as error:
        raise PolicyFileError(f"{policy.source}: setting: {error}") from None
    if isinstance(policy, MixturePolicy):
        members = [network_policy(member) for member in policy.members]
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(m.params for m in members))
        weights = jnp.asarray(policy.weights, jnp.float32)
        return setting, SnapshotMixture(members[0].replace(params=stacked), weights)
    if isinstance(policy, NetworkPolicy):
        return setting, network_policy(policy)
    assert isinstance(policy, TablePolicy)
    tabulated = TabulatedPolicy(
        grid=policy.grid,
        table=policy.table,
        atoms=policy.atoms,
        rounds=policy.rounds,
        deterministic=policy.kind == "deterministic",
    )
    return setting, tabulated


def network_policy(policy: NetworkPolicy) -> LearnedPolicy | LearnedPriceCurve:
    """A version-2 file as the :class:`AlgorithmNetwork` it stores, with float32 weights."""
    widths = {weights.shape[1] for weights, _ in policy.layers[:-1]}
    if len(widths) > 1:
        raise PolicyFileError(
            f"{policy.source}: hidden layers of different widths {sorted(widths)} "
            "(the pricing network has one hidden width)"
        )
    atoms = tuple(float(a) for a in policy.atoms[0])
    network = AlgorithmNetwork(
        resources=policy.resources,
        atoms=len(atoms),
        hidden=widths.pop() if widths else 1,
        layers=len(policy.layers) - 1,
        use_round=policy.round_dependent,
        shared_resources=policy.inputs == "per-resource",
    )
    params = {
        "params": {
            f"Dense_{i}": {
                "kernel": jnp.asarray(weights, jnp.float32),
                "bias": jnp.asarray(bias, jnp.float32),
            }
            for i, (weights, bias) in enumerate(policy.layers)
        }
    }
    randomised = LearnedPolicy(params, network, atoms)
    return LearnedPriceCurve(randomised) if policy.kind == "deterministic" else randomised
