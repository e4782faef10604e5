"""The adversary's local search: hill climbing over token sequences with a problem's
``mutate`` (advonline/problem.py). One kernel for every oracle that searches inputs.

Each of ``B`` chains proposes ``candidates`` mutations per step and moves to the best of them
when its score does not fall (ties move, so chains drift across plateaus). Everything runs
inside one ``lax.scan``; the score is any jit-able function ``tokens [B, T] -> [B]`` (a host
solver joins through ``jax.pure_callback``). What an oracle returns is a :class:`Found`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp


def hill_climb(
    score: Callable[[jax.Array], jax.Array],
    mutate: Callable[[jax.Array, jax.Array], jax.Array],
    key: jax.Array,
    tokens: jax.Array,
    steps: int,
    candidates: int = 1,
    place: Callable[[jax.Array], jax.Array] = lambda batch: batch,
) -> tuple[jax.Array, jax.Array]:
    """``steps`` rounds of mutate-and-keep-if-no-worse from ``tokens`` ``[B, T]``; returns
    the chains' final tokens and scores ``[B]``.

    Each round ``mutate(key, tokens [B * M, T])`` proposes ``M = candidates`` mutations of
    every chain (chain-major: rows ``b M .. b M + M - 1`` are chain ``b``'s), and a chain
    moves to the best proposal when its score is at least the chain's. ``place`` puts a
    batch where it is computed (e.g. split over devices along its first axis); it must not
    change values."""
    chains = tokens.shape[0]

    def step(carry, step_key):
        current, current_score = carry
        proposals = place(mutate(step_key, place(jnp.repeat(current, candidates, axis=0))))
        scores = score(proposals).reshape(chains, candidates)
        best = jnp.argmax(scores, axis=1)
        best_score = scores[jnp.arange(chains), best]
        better = best_score >= current_score
        chosen = proposals.reshape(chains, candidates, -1)[jnp.arange(chains), best]
        current = jnp.where(better[:, None], chosen, current)
        return (current, jnp.where(better, best_score, current_score)), None

    tokens = place(tokens)
    (tokens, scores), _ = jax.lax.scan(step, (tokens, score(tokens)), jax.random.split(key, steps))
    return tokens, scores


@contextlib.contextmanager
def float64_everywhere() -> Iterator[None]:
    """Float64 in every thread while it lasts. A host scorer joined through
    ``jax.pure_callback`` runs on another thread, which sees only JAX's global flag, not a
    ``jax.enable_x64`` scope of the caller's, and would return float32 to a float64 search.
    What the global flag was is read on a thread of its own, which sees only the global flag
    too: read here, inside a caller's scope, it would be the scope's, and restoring that would
    leave float64 on for the whole process."""
    seen: list[bool] = []
    reader = threading.Thread(target=lambda: seen.append(bool(jax.config.jax_enable_x64)))
    reader.start()
    reader.join()
    was_x64 = seen[0]
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", was_x64)


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
