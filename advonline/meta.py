"""The meta-solver of the oracle loop: the restricted game solved by linear programming.

The restricted game is a matrix ``M[i, j] = E[ALG_i(I_j)] / OPT(I_j)``: the algorithm's
snapshots (rows, the maximiser) against the archive's instances (columns, the minimiser).
Its value ``v = max_p min_q p^T M q`` and the two equilibrium mixtures come from two small
LPs (von Neumann's minimax theorem; each player's LP is the other's dual):

- algorithm: ``max v  s.t.  sum_i p_i M[i, j] >= v  for every j,  p in the simplex``;
- adversary: ``min w  s.t.  sum_j q_j M[i, j] <= w  for every i,  q in the simplex``.

``1 / v`` is the competitive ratio the best mixture of snapshots guarantees against every
instance in the archive (a mixture chosen once per instance is itself a randomised online
algorithm), and ``q`` is the adversary's equilibrium mixture, which the algorithm trains
against. Both LPs run through SciPy's HiGHS in NumPy, outside ``jit``, once per epoch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import linprog


class MetaSolution(NamedTuple):
    """The restricted game's equilibrium."""

    algorithm: np.ndarray  # [S] the algorithm's mixture over snapshots (rows)
    adversary: np.ndarray  # [N] the adversary's mixture over instances (columns)
    value: float  # max_p min_q p^T M q, the payoff both mixtures guarantee

    @property
    def ratio(self) -> float:
        """The restricted game's competitive ratio ``1 / value``."""
        return 1.0 / self.value if self.value > 0 else float("inf")


class MetaSolverError(RuntimeError):
    """HiGHS could not solve the restricted game."""


def _maximin(payoff: np.ndarray) -> tuple[np.ndarray, float]:
    """The row player's optimal mixture and value of ``payoff`` ``[S, N]`` (maximiser)."""
    rows, columns = payoff.shape
    # variables (p_1..p_S, v); minimise -v
    cost = np.zeros(rows + 1)
    cost[-1] = -1.0
    upper = np.hstack([-payoff.T, np.ones((columns, 1))])  # v - p^T M[:, j] <= 0
    equal = np.hstack([np.ones((1, rows)), np.zeros((1, 1))])
    bounds = [(0, None)] * rows + [(None, None)]
    result = linprog(
        cost,
        A_ub=upper,
        b_ub=np.zeros(columns),
        A_eq=equal,
        b_eq=[1.0],
        bounds=bounds,
        method="highs",
    )
    if result.status != 0:
        raise MetaSolverError(f"restricted game LP failed: {result.message}")
    mixture = np.clip(result.x[:rows], 0, None)
    return mixture / mixture.sum(), float(result.x[-1])


def solve(payoff: np.ndarray) -> MetaSolution:
    """Both equilibrium mixtures of the restricted game ``payoff`` ``[S, N]`` (float64).

    The value reported is the algorithm mixture's guaranteed payoff, ``min_j (p^T M)_j``,
    recomputed from the mixture: it never exceeds the true value by more than the LP's
    tolerance allows, and it is exactly what that mixture earns on its worst archived
    instance.
    """
    payoff = np.asarray(payoff, np.float64)
    if payoff.ndim != 2 or 0 in payoff.shape:
        raise MetaSolverError(
            f"restricted game needs a non-empty [S, N] matrix, got {payoff.shape}"
        )
    algorithm, _ = _maximin(payoff)
    adversary, _ = _maximin(-payoff.T)  # the column player maximises -M^T
    value = float(np.min(algorithm @ payoff))
    return MetaSolution(algorithm, adversary, value)
