"""The meta-solver: the restricted game's equilibrium against games solved by hand."""

import numpy as np
import pytest

from advonline import meta


def test_two_by_two_game_matches_the_hand_solution():
    # No saddle point: p (0.9 - 0.4) ... equalising gives p1 = (0.8 - 0.4) / (0.9 - 0.3 - 0.4 +
    # 0.8) = 0.4, q1 = (0.8 - 0.3) / 1.0 = 0.5, value 0.9 * 0.5 + 0.3 * 0.5 = 0.6.
    payoff = np.array([[0.9, 0.3], [0.4, 0.8]])
    solution = meta.solve(payoff)
    np.testing.assert_allclose(solution.algorithm, [0.4, 0.6], atol=1e-9)
    np.testing.assert_allclose(solution.adversary, [0.5, 0.5], atol=1e-9)
    assert solution.value == pytest.approx(0.6, abs=1e-9)
    assert solution.ratio == pytest.approx(1 / 0.6, abs=1e-9)


def test_three_by_three_game_matches_the_hand_solution():
    # M = 0.5 + 0.1 * A with A the cyclic game [[0, -1, 2], [1, 0, -1], [-2, 1, 0]] (antisymmetric,
    # value 0). Solving A p = 0 by hand: p = (1, 2, 1) / 4; the adversary plays the same by
    # symmetry (A^T = -A), and the value of M is 0.5.
    cyclic = np.array([[0.0, -1.0, 2.0], [1.0, 0.0, -1.0], [-2.0, 1.0, 0.0]])
    solution = meta.solve(0.5 + 0.1 * cyclic)
    np.testing.assert_allclose(solution.algorithm, [0.25, 0.5, 0.25], atol=1e-9)
    np.testing.assert_allclose(solution.adversary, [0.25, 0.5, 0.25], atol=1e-9)
    assert solution.value == pytest.approx(0.5, abs=1e-9)


def test_a_dominated_row_gets_no_weight_and_a_saddle_point_is_pure():
    payoff = np.array([[0.7, 0.6, 0.9], [0.5, 0.4, 0.8]])  # row 0 dominates; column 1 is worst
    solution = meta.solve(payoff)
    np.testing.assert_allclose(solution.algorithm, [1.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(solution.adversary, [0.0, 1.0, 0.0], atol=1e-9)
    assert solution.value == pytest.approx(0.6, abs=1e-9)


def test_an_empty_game_is_refused():
    with pytest.raises(meta.MetaSolverError):
        meta.solve(np.zeros((0, 3)))
