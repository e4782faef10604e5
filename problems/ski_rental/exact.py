"""The certificate of a buying rule and the lower bound on every rule, in float64 (NumPy and
SciPy, outside ``jit``; the certificate also in JAX, for certificate descent).

Every input is a season length, so the exact ratio of a rule is the largest ``E[cost] / OPT``
over ``n = 1 .. rounds``: a finite maximum. The best any online rule can do is a linear
programme over distributions on buying days; the lower bound solves the adversary's side of it
(a distribution over season lengths), then computes the best deterministic rule's reply
exactly, so the bound holds whatever the solver's tolerance (Yao's principle).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from advonline.problem import Certificate, LowerBound
from advonline.problems.ski_rental.model import BuyingRule, Setting, SettingError


def season_costs(setting: Setting, owned) -> np.ndarray:
    """``[T + 1]`` the expected cost of the rule ``owned`` ``[T]`` on every season of 0 .. T
    days (the simulator's sum, in float64)."""
    return np.concatenate([[0.0], _costs(np, setting, np.asarray(owned, np.float64))])


def _costs(xp, setting: Setting, owned):
    """``[T]`` the expected cost of the rule ``owned`` on seasons of 1 .. T days, written once
    for NumPy and JAX (``xp``: either module)."""
    daily = float(setting.buy) * xp.diff(owned, prepend=0.0) + 1.0 - owned
    return xp.cumsum(daily)


def differentiable_certificate(setting: Setting, rule: BuyingRule) -> jax.Array:
    """The exact ratio of a :class:`BuyingRule` (:func:`certificate`) in JAX, differentiable in
    its ``owned`` chances: certificate descent follows it."""
    optima = jnp.asarray(season_optima(setting)[1:], rule.owned.dtype)
    return jnp.max(_costs(jnp, setting, rule.owned) / optima)


def season_optima(setting: Setting) -> np.ndarray:
    """``[T + 1]`` OPT of every season of 0 .. T days."""
    return np.minimum(np.arange(setting.rounds + 1), setting.buy).astype(np.float64)


def certificate(setting: Setting, rule) -> Certificate | None:
    """The exact competitive ratio of a :class:`BuyingRule` (None for any other policy), with
    the season that attains it."""
    if not isinstance(rule, BuyingRule):
        return None
    ratios = season_costs(setting, rule.owned)[1:] / season_optima(setting)[1:]
    worst = int(np.argmax(ratios))
    return Certificate(float(ratios[worst]), True, np.asarray([worst + 1], np.int32))


def lower_bound(setting: Setting) -> LowerBound:
    """The best ratio any online rule can have on ``setting``: the adversary's distribution
    ``q`` over seasons of 1 .. T days that maximises ``min_d E_q[cost_d] / E_q[OPT]`` (an LP,
    HiGHS), then ``best_response = max_d E_q[OPT] / E_q[cost_d]`` over every deterministic
    rule, computed exactly from ``q``, and ``ratio = 1 / best_response``. Where no season is
    longer than ``buy``, renting throughout is optimal online too: ``q`` is the longest
    season, whose best reply is renting, and no LP is solved (its costs would span 1 to
    ``buy``)."""
    seasons = setting.rounds
    if setting.buy >= seasons:
        return _bound_of(setting, np.eye(seasons)[-1])
    solved = _adversary_lp(setting)
    if not solved.success:
        raise SettingError(f"the lower bound's LP failed on {setting}: {solved.message}")
    weights = np.clip(solved.x[:seasons], 0.0, None)
    return _bound_of(setting, weights / weights.sum())


def _adversary_lp(setting: Setting):
    """The adversary's LP, ``max v`` over ``q >= 0`` with ``E_q[OPT] = 1`` and every rule's
    ``E_q[cost_d] >= v``, written with running sums so that it has O(T) nonzeros where the
    dense ``[T + 1, T]`` cost table has T^2. Rule ``d`` (buy on day ``d``; ``d = T + 1``:
    never) pays ``n`` on a season of ``n < d`` days and ``d - 1 + B`` on a longer one, so
    ``E_q[cost_d] = rent_d + (d - 1 + B) left_d`` with ``rent_d = sum_{n < d} n q_n`` and
    ``left_d = sum_{n >= d} q_n``, each a running sum: ``rent_{d+1} = rent_d + d q_d``,
    ``left_d = left_{d+1} + q_d``."""
    days, buy = setting.rounds, setting.buy
    # variables: q_1..q_T, rent_1..rent_{T+1}, left_1..left_{T+1}, v
    q, rent, left, v = 0, days, 2 * days + 1, 3 * days + 2
    size = v + 1
    day = np.arange(1, days + 1)
    index = np.arange(days)
    equal = sparse.lil_matrix((2 * days + 3, size))
    equal[index, rent + index + 1] = 1.0  # rent_{d+1} - rent_d - d q_d = 0
    equal[index, rent + index] = -1.0
    equal[index, q + index] = -day
    equal[days + index, left + index] = 1.0  # left_d - left_{d+1} - q_d = 0
    equal[days + index, left + index + 1] = -1.0
    equal[days + index, q + index] = -1.0
    equal[2 * days, rent] = 1.0  # rent_1 = 0
    equal[2 * days + 1, left + days] = 1.0  # left_{T+1} = 0
    equal[2 * days + 2, q + index] = np.minimum(day, buy)  # E_q[OPT] = 1
    rules = np.arange(1, days + 2)  # v - rent_d - (d - 1 + B) left_d <= 0
    upper = sparse.lil_matrix((days + 1, size))
    upper[rules - 1, v] = 1.0
    upper[rules - 1, rent + rules - 1] = -1.0
    upper[rules[:-1] - 1, left + rules[:-1] - 1] = -(rules[:-1] - 1.0 + buy)
    objective = np.zeros(size)
    objective[v] = -1.0
    b_equal = np.zeros(2 * days + 3)
    b_equal[-1] = 1.0
    return linprog(
        objective,
        A_ub=upper.tocsr(),
        b_ub=np.zeros(days + 1),
        A_eq=equal.tocsr(),
        b_eq=b_equal,
        bounds=[(0, None)] * v + [(None, None)],
        method="highs",
    )


def rule_costs(setting: Setting, distribution: np.ndarray) -> np.ndarray:
    """``[T + 1]``: each deterministic rule's expected cost on seasons of 1 .. T days drawn
    from ``distribution`` ``[T]`` (rule ``d`` buys on day ``d``; the last never buys), by the
    running sums of :func:`_adversary_lp`, in float64."""
    day = np.arange(1, setting.rounds + 1)
    rent = np.concatenate([[0.0], np.cumsum(day * distribution)])  # sum_{n < d} n q_n
    left = np.concatenate([np.cumsum(distribution[::-1])[::-1], [0.0]])  # sum_{n >= d} q_n
    return rent + (np.arange(setting.rounds + 1) + float(setting.buy)) * left


def _bound_of(setting: Setting, distribution: np.ndarray) -> LowerBound:
    """The lower bound the adversary's ``distribution`` over seasons proves: the best
    deterministic rule's ``E[OPT] / E[cost]``, computed exactly."""
    optimum = distribution @ season_optima(setting)[1:]
    best_response = float(np.max(optimum / rule_costs(setting, distribution)))
    support = np.flatnonzero(distribution > 0)
    return LowerBound(
        ratio=1.0 / best_response,
        best_response=best_response,
        distribution=distribution[support],
        inputs=(support + 1).astype(np.int32)[:, None],
    )
