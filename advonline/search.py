"""The adversary's local search: hill climbing over token sequences with a problem's
``mutate`` (advonline/problem.py). One kernel for every oracle that searches inputs.

Each of ``B`` chains proposes one mutation per step and keeps it when the score does not fall
(ties move, so chains drift across plateaus). Everything runs inside one ``lax.scan``; the
score is any jit-able function ``tokens [B, T] -> [B]``.
"""

from __future__ import annotations

from collections.abc import Callable

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
