"""An exported policy file as a pricing policy (the shared ``policy(observation)`` signature),
so that ``advonline evaluate --policy FILE`` measures it with the same evaluator as everything
else. On the file's utilisation grid it posts exactly what the file says; between grid points
it interpolates linearly, as the NumPy loader (:mod:`advonline.policy_file`) does."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.policy_file import PolicyFileError, PricingPolicy
from problems.posted_price import Observation, PriceDistribution, Setting, SettingError


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


def from_file(policy: PricingPolicy) -> tuple[Setting, TabulatedPolicy]:
    """The setting a loaded policy file was made for, and the policy as an evaluable pytree."""
    fields = {key: value for key, value in policy.setting.items() if key != "problem"}
    try:
        setting = Setting(**{**fields, "capacities": tuple(fields.get("capacities", (1.0,)))})
    except (TypeError, SettingError) as error:
        raise PolicyFileError(f"policy file setting is not valid: {error}") from None
    tabulated = TabulatedPolicy(
        grid=policy.grid,
        table=policy.table,
        atoms=policy.atoms,
        rounds=policy.rounds,
        deterministic=policy.kind == "deterministic",
    )
    return setting, tabulated
