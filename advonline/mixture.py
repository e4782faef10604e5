"""A mixture of algorithm networks chosen once per input: the oracle loop's equilibrium
mixture of snapshots as a randomised online algorithm (docs/method.md, "What a run
delivers").

Before the first request arrives the algorithm draws one member network with probability
``weights[m]`` and then plays that network for the whole sequence. Its expected gain on a
fixed input is therefore ``sum_m weights[m] E[ALG_m]``, which is what the restricted game's
value promises for the archived instances. It is not a per-state policy: the same state
reached under two members gets two different distributions, so the mixture does not reduce
to ``policy(observation)``. A problem's one simulator (for posted pricing
:func:`posted_price.model.rollout`) asks a policy with a ``draw_member`` method for its
member once per episode, from its own key, and then plays that member.

The oracle loop delivers a mixture for K >= 2 only, where every candidate it compares is
measured by the worst case its searches found. For K = 1 a single network carries the DP
certificate's upper bound, which a mixture has no counterpart of (the induction would need
every member's state at once), so a single network is delivered there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class SnapshotMixture:
    """Member networks (one learned policy, a pytree with a ``params`` field and ``replace``,
    whose parameters have a leading ``[M]`` axis) and the probability ``weights`` ``[M]`` of
    drawing each, once per input."""

    members: Any
    weights: jax.Array  # [M], positive, sum 1
    deterministic: bool = struct.field(pytree_node=False, default=False)

    @property
    def size(self) -> int:
        return int(self.weights.shape[0])

    def member(self, index):
        """Member ``index`` (an int or a traced integer) as a policy."""
        params = jax.tree.map(lambda leaf: leaf[index], self.members.params)
        return self.members.replace(params=params)

    def draw_member(self, key: jax.Array):
        """The member an episode plays: index ``m`` with probability ``weights[m]``."""
        index = jax.random.categorical(key, jnp.log(self.weights))
        return self.member(index)

    def heaviest(self):
        """The member with the largest weight (its median read-out is the run's deterministic
        policy when a mixture is delivered)."""
        return self.member(int(jnp.argmax(self.weights)))

    def __call__(self, observation):
        raise TypeError(
            "a snapshot mixture draws one member per input (draw_member); it has no "
            "distribution per state"
        )


def snapshot_mixture(snapshots: dict, weights, policy_of: Callable[[dict], Any]) -> SnapshotMixture:
    """The mixture of the stacked ``snapshots`` (leading ``[S]`` axis) with ``weights`` ``[S]``:
    members of zero weight are left out and the rest renormalised. ``policy_of`` makes a
    learned policy of parameters (here of the stacked ones)."""
    weights = jnp.asarray(weights, jnp.float32)
    keep = jnp.flatnonzero(weights > 0)
    if keep.size == 0:
        raise ValueError("a snapshot mixture needs a member of positive weight")
    params = jax.tree.map(lambda stack: jnp.asarray(stack)[keep], snapshots)
    kept = weights[keep]
    return SnapshotMixture(policy_of(params), kept / kept.sum())
