"""The competitive ratio and the game's payoff, with their conventions in one place.

The payoff of an algorithm on an input is ``ALG / OPT`` (what the algorithm maximises), 1 where
OPT is 0 (nothing could be earned, so nothing was lost). The ratio is ``OPT / ALG = 1 /
payoff``: infinite where the algorithm earns nothing that OPT could have earned. For a problem
that pays (a cost to minimise) the payoff is ``OPT / cost`` and the ratio ``cost / OPT``;
:data:`RATIO_NAMES` says which, for labels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: What a problem's competitive ratio is, by its objective (``Problem.objective``).
RATIO_NAMES = {"earn": "OPT / E[ALG]", "pay": "E[cost] / OPT"}


def payoff(earned: jax.Array, optimum: jax.Array) -> jax.Array:
    """``ALG / OPT`` elementwise (jit-able), 1 where OPT = 0."""
    safe = jnp.where(optimum > 0, optimum, 1)
    return jnp.where(optimum > 0, earned / safe, 1.0)


def ratio_of_payoff(payoffs: jax.Array) -> jax.Array:
    """``OPT / ALG`` from payoffs (jit-able); inf where the payoff is 0."""
    return jnp.where(payoffs > 0, 1.0 / jnp.where(payoffs > 0, payoffs, 1), jnp.inf)


def ratios(optimum, earned) -> np.ndarray:
    """``OPT / ALG`` elementwise in float64 (for reports): inf where ALG earns nothing but OPT
    does, 1 where both are 0."""
    optimum, earned = np.asarray(optimum, np.float64), np.asarray(earned, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(earned > 0, optimum / earned, np.where(optimum > 0, np.inf, 1.0))


def ratios_of_payoffs(payoffs) -> np.ndarray:
    """``OPT / ALG`` in float64 from payoffs ``ALG / OPT``; inf where the payoff is 0."""
    payoffs = np.asarray(payoffs, np.float64)
    with np.errstate(divide="ignore"):
        return np.where(payoffs > 0, 1.0 / np.maximum(payoffs, 1e-300), np.inf)


def format_ratio(ratio: float | None) -> str:
    """A ratio as the command line's tables print it (``n/a`` where none was measured): at
    most 9 characters, so that the tables' 10-character columns never run together."""
    if ratio is None:
        return "n/a"
    if np.isinf(ratio):
        return "inf"
    if ratio < 1e4:
        return f"{ratio:.4f}"
    return f"{ratio:.3e}" if ratio < 1e100 else f"{ratio:.2e}"


def softmin_weights(payoff: jax.Array, valid: jax.Array, temperature: float) -> jax.Array:
    """Weights over inputs that favour the lowest payoffs (the hardest inputs): a softmax of
    ``-payoff / temperature`` over the ``valid`` ones (the others weigh 0)."""
    logits = jnp.where(valid, -payoff / temperature, -jnp.inf)
    return jax.nn.softmax(logits)
