"""The adversary's local search: hill climbing over token sequences with a problem's
``mutate`` (advonline/problem.py). One kernel for every oracle that searches inputs.

Each of ``B`` chains proposes one mutation per step and keeps it when the score does not fall
(ties move, so chains drift across plateaus). Everything runs inside one ``lax.scan``; the
score is any jit-able function ``tokens [B, T] -> [B]``. What an oracle returns is a
:class:`Found`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp


def hill_climb(
    score: Callable[[jax.Array], jax.Array],
    mutate: Callable[[jax.Array, jax.Array], jax.Array],
    key: jax.Array,
    tokens: jax.Array,
    steps: int,
) -> tuple[jax.Array, jax.Array]:
    """``steps`` rounds of mutate-and-keep-if-no-worse from ``tokens`` ``[B, T]``; returns
    the chains' final tokens and scores ``[B]``."""

    def step(carry, step_key):
        current, current_score = carry
        proposal = mutate(step_key, current)
        proposal_score = score(proposal)
        better = proposal_score >= current_score
        current = jnp.where(better[:, None], proposal, current)
        return (current, jnp.where(better, proposal_score, current_score)), None

    (tokens, scores), _ = jax.lax.scan(step, (tokens, score(tokens)), jax.random.split(key, steps))
    return tokens, scores


class Found(NamedTuple):
    """Instances an oracle found, as token sequences, with their ratios."""

    types: jax.Array  # [N, T] int32
    ratios: jax.Array  # [N] OPT / E[ALG]; inf where ALG earns nothing but OPT does

    @staticmethod
    def nothing(rounds: int, dtype) -> Found:
        """No instance found (a search with no budget)."""
        return Found(jnp.zeros((0, rounds), jnp.int32), jnp.zeros((0,), dtype))

    def best(self, count: int) -> Found:
        """The ``count`` highest ratios (duplicates included)."""
        order = jnp.argsort(-self.ratios)[:count]
        return Found(self.types[order], self.ratios[order])


def join(*found: Found) -> Found:
    """One :class:`Found` of everything in ``found``."""
    return Found(
        jnp.concatenate([f.types for f in found]), jnp.concatenate([f.ratios for f in found])
    )
