"""A mixture of algorithm networks chosen once per input: the oracle loop's equilibrium
mixture of snapshots as a randomised online algorithm (docs/method.md, "What a run
delivers"), for every problem.

Before the first request arrives the algorithm draws one member network with probability
``weights[m]`` and then plays that network for the whole sequence. Its expected gain (or
cost) on a fixed input is therefore ``sum_m weights[m] E[ALG_m]``, which is what the
restricted game's value promises for the archived instances. It is not a per-state policy:
the same state reached under two members gets two different distributions, so the mixture
does not reduce to ``policy(observation)``. A simulator that knows mixtures (posted
pricing's :func:`posted_price.model.rollout`) asks a policy with a ``draw_member`` method for
its member once per episode; every other problem's mixture is measured by its members'
exact payoffs, combined by :func:`mixed_payoffs` (:func:`payoffs`).

A run delivers a mixture only where its problem has no certificate for the networks (for
posted pricing, K >= 2), and only with ``oracle.mixtures``: where a certificate exists a
single network carries its upper bound, which a mixture has no counterpart of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class SnapshotMixture:
    """Member policies (one policy pytree whose every array has a leading ``[M]`` axis: the
    members stacked) and the probability ``weights`` ``[M]`` of drawing each, once per
    input."""

    members: Any
    weights: jax.Array  # [M], positive, sum 1
    deterministic: bool = struct.field(pytree_node=False, default=False)

    @property
    def size(self) -> int:
        return int(self.weights.shape[0])

    def member(self, index):
        """Member ``index`` (an int or a traced integer) as a policy."""
        return jax.tree.map(lambda leaf: leaf[index], self.members)

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


def member_count(policy) -> int:
    """How many networks ``policy`` (or None) draws from: a mixture's members, else 1."""
    return policy.size if isinstance(policy, SnapshotMixture) else 1


def positive_members(snapshots: dict, weights) -> tuple[dict, jax.Array]:
    """The members of the stacked ``snapshots`` (leading ``[S]`` axis) whose ``weights``
    ``[S]`` are positive, still stacked, and their weights renormalised to sum to 1: the
    members a mixture draws from."""
    weights = jnp.asarray(weights, jnp.float32)
    keep = jnp.flatnonzero(weights > 0)
    if keep.size == 0:
        raise ValueError("a snapshot mixture needs a member of positive weight")
    params = jax.tree.map(lambda stack: jnp.asarray(stack)[keep], snapshots)
    kept = weights[keep]
    return params, kept / kept.sum()


def snapshot_mixture(snapshots: dict, weights, policy_of: Callable[[dict], Any]) -> SnapshotMixture:
    """The mixture of the stacked ``snapshots`` with ``weights`` (:func:`positive_members`:
    members of zero weight left out). ``policy_of`` makes a policy of one member's
    parameters; it is mapped over the stacked ones."""
    params, kept = positive_members(snapshots, weights)
    return SnapshotMixture(jax.vmap(policy_of)(params), kept)


def mixed_payoffs(member_payoffs, weights, objective: str):
    """The payoffs ``[...]`` of a mixture drawn once per input, from its members' payoffs
    ``[M, ...]`` and its ``weights`` ``[M]`` (jit-able; NumPy arrays give NumPy).

    A problem that earns has payoff ``E[ALG] / OPT``, linear in the draw:
    ``sum_m w_m u_m``. One that pays has payoff ``OPT / E[cost]`` and
    ``E[cost] / OPT = sum_m w_m / u_m``, so the payoff is the weighted harmonic mean (0 where
    a member of positive weight has payoff 0: an unbounded cost)."""
    xp = np if isinstance(member_payoffs, np.ndarray) else jnp
    weights = xp.asarray(weights, member_payoffs.dtype)
    if objective == "earn":
        flat = member_payoffs.reshape(member_payoffs.shape[0], -1)
        return (weights @ flat).reshape(member_payoffs.shape[1:])
    weights = weights.reshape((-1,) + (1,) * (member_payoffs.ndim - 1))
    lost = xp.any((member_payoffs <= 0) & (weights > 0), axis=0)
    safe = xp.where(member_payoffs > 0, member_payoffs, 1.0)
    cost = xp.sum(xp.where(weights > 0, weights / safe, 0.0), axis=0)
    return xp.where(lost, 0.0, 1.0 / xp.where(lost, 1.0, cost))


def payoffs(problem, setting, policy, instances, optimum):
    """``problem``'s payoffs ``[B]`` of ``policy`` on ``instances`` given OPT ``[B]``
    (jit-able): its own for a policy, its members' combined (:func:`mixed_payoffs`) for a
    :class:`SnapshotMixture`, so that every problem's mixtures are measured exactly."""
    if not isinstance(policy, SnapshotMixture):
        return problem.payoffs(setting, policy, instances, optimum)
    each = jax.vmap(lambda member: problem.payoffs(setting, member, instances, optimum))(
        policy.members
    )
    return mixed_payoffs(each, policy.weights, problem.objective)
