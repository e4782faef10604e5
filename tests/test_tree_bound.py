"""Tree families against brute force: the certified bound is the maximin over every online
algorithm on the family, found by enumerating the deterministic ones and mixing them."""

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from advonline.problems.posted_price.lower_bound import stopping_lower_bound
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.tree_bound import (
    TreeFamily,
    best_response_payoff,
    path_optima,
    tree_lower_bound,
)


def _setting(divisible: bool) -> Setting:
    """Three grid units of capacity: buyers of one or two units."""
    return Setting(
        resources=1,
        low=1.0,
        high=4.0,
        rounds=6,
        max_demand=2 / 3,
        demand_levels=2,
        divisible=divisible,
    )


def _random_tree(seed: int, nodes: int = 6) -> TreeFamily:
    rng = np.random.default_rng(seed)
    parent = np.array([-1] + [int(rng.integers(0, n)) for n in range(1, nodes)])
    units = rng.integers(1, 3, nodes)
    return TreeFamily(parent, units, rng.uniform(1.0, 4.0, nodes))


def _every_algorithm(setting: Setting, family: TreeFamily) -> np.ndarray:
    """``[A, N]`` units each deterministic online algorithm sells each buyer: one choice per
    node (what it has seen identifies the node), within capacity on every path."""
    choices = [range(d + 1) if setting.divisible else (0, d) for d in family.units]
    capacity = setting.grid_size
    algorithms = [
        sold
        for sold in itertools.product(*choices)
        if all(sum(sold[m] for m in path) <= capacity for path in family.paths())
    ]
    return np.array(algorithms, dtype=float)


def _payoffs(setting: Setting, family: TreeFamily, algorithms: np.ndarray) -> np.ndarray:
    """``[A, N]`` ALG_j / OPT_j of every algorithm and end node."""
    on_path = np.zeros((len(family.parent),) * 2)
    for node, path in enumerate(family.paths()):
        on_path[node, path] = 1.0
    earned = algorithms * family.densities / setting.grid_size  # [A, N]
    return earned @ on_path.T / path_optima(setting, family)[None, :]


def _brute_maximin(payoffs: np.ndarray) -> float:
    """``max_q min_j sum_a q_a payoffs[a, j]`` over mixtures q of the algorithms."""
    count, ends = payoffs.shape
    result = linprog(
        c=np.append(np.zeros(count), -1.0),
        A_ub=np.hstack([-payoffs.T, np.ones((ends, 1))]),
        b_ub=np.zeros(ends),
        A_eq=np.append(np.ones(count), 0.0)[None, :],
        b_eq=[1.0],
        bounds=[(0.0, None)] * count + [(None, None)],
        method="highs",
    )
    assert result.status == 0
    return -float(result.fun)


@pytest.mark.parametrize("divisible", [True, False], ids=["divisible", "indivisible"])
@pytest.mark.parametrize("seed", range(6))
def test_a_tree_bound_is_the_maximin_over_every_algorithm(seed, divisible):
    """For indivisible buyers too: the flow LP is the maximin over every randomised algorithm
    (a mixture of the deterministic ones), not a relaxation of it."""
    setting, family = _setting(divisible), _random_tree(seed)
    bound = tree_lower_bound(setting, family)
    payoffs = _payoffs(setting, family, _every_algorithm(setting, family))
    best = 1.0 / _brute_maximin(payoffs)
    assert bound.ratio == pytest.approx(best, rel=1e-7)
    assert bound.ratio <= best * (1 + 1e-12)
    assert bound.lp_ratio == pytest.approx(best, rel=1e-7)


@pytest.mark.parametrize("seed", range(6))
def test_the_best_response_is_the_best_algorithm_against_the_stopping(seed):
    """Divisible or not, the programme's payoff is the best enumerated algorithm's, so the
    certified bound holds for each of them and for every mixture."""
    for divisible in (True, False):
        setting, family = _setting(divisible), _random_tree(seed)
        stopping = np.random.default_rng(seed + 100).dirichlet(np.ones(len(family.parent)))
        payoffs = _payoffs(setting, family, _every_algorithm(setting, family))
        best = float(np.max(payoffs @ stopping))
        assert best_response_payoff(setting, family, stopping) == pytest.approx(best, rel=1e-12)
        bound = tree_lower_bound(setting, family)
        assert bound.ratio <= 1.0 / _brute_maximin(payoffs) * (1 + 1e-12)


@pytest.mark.parametrize("divisible", [True, False])
def test_a_tree_that_is_a_path_is_a_stopping_family(divisible):
    setting = _setting(divisible)
    units = np.array([1, 2, 1, 1, 2])
    densities = np.array([1.0, 1.5, 2.0, 3.0, 4.0])
    path = TreeFamily(np.arange(-1, 4), units, densities)
    assert tree_lower_bound(setting, path).ratio == pytest.approx(
        stopping_lower_bound(setting, units, densities).ratio, rel=1e-9
    )


def test_branching_can_be_harder_than_any_of_its_paths():
    """A capacity at L, then either a capacity at U or one at a middle density: the algorithm
    must commit at L before it knows which follows. The tree's bound is at least that of
    each of its two stopping families."""
    setting = _setting(True)
    parent = np.array([-1, 0, 1, 2, 1, 4])
    units = np.array([2, 1, 2, 1, 2, 1])
    densities = np.array([1.0, 1.0, 4.0, 4.0, 2.0, 2.0])
    tree = tree_lower_bound(setting, TreeFamily(parent, units, densities))
    for path in ([0, 1, 2, 3], [0, 1, 4, 5]):
        alone = stopping_lower_bound(setting, units[path], densities[path]).ratio
        assert tree.ratio >= alone - 1e-9
