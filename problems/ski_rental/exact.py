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
    daily = setting.buy * xp.diff(owned, prepend=0.0) + 1.0 - owned
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


def deterministic_costs(setting: Setting) -> np.ndarray:
    """``[T + 1 rules, T + 1 seasons]``: the cost of buying on the morning of day ``d`` (row
    ``d - 1``; the last row never buys) on every season of 0 .. T days."""
    days = setting.rounds
    owned = np.triu(np.ones((days, days)))  # row d - 1 owns from day d on
    rules = np.concatenate([owned, np.zeros((1, days))])
    return np.stack([season_costs(setting, row) for row in rules])


def lower_bound(setting: Setting) -> LowerBound:
    """The best ratio any online rule can have on ``setting``: the adversary's distribution
    ``q`` over seasons of 1 .. T days that maximises ``min_d E_q[cost_d] / E_q[OPT]`` (an LP,
    HiGHS), then ``best_response = max_d E_q[OPT] / E_q[cost_d]`` over every deterministic
    rule, computed exactly from ``q``, and ``ratio = 1 / best_response``. Where no season is
    longer than ``buy``, renting throughout is optimal online too: ``q`` is the longest
    season, whose best reply is renting, and no LP is solved (its costs would span 1 to
    ``buy``)."""
    costs = deterministic_costs(setting)[:, 1:]  # [rules, seasons]
    optima = season_optima(setting)[1:]
    seasons = optima.size
    if setting.buy >= setting.rounds:
        return _bound_of(np.eye(seasons)[-1], costs, optima)
    # variables: q (seasons), v; maximise v s.t. costs @ q >= v, optima @ q = 1, q >= 0
    objective = np.concatenate([np.zeros(seasons), [-1.0]])
    upper = np.concatenate([-costs, np.ones((costs.shape[0], 1))], axis=1)
    equal = np.concatenate([optima, [0.0]])[None, :]
    bounds = [(0, None)] * seasons + [(None, None)]
    solved = linprog(
        objective,
        A_ub=upper,
        b_ub=np.zeros(costs.shape[0]),
        A_eq=equal,
        b_eq=[1.0],
        bounds=bounds,
        method="highs",
    )
    if not solved.success:
        raise SettingError(f"the lower bound's LP failed on {setting}: {solved.message}")
    weights = np.clip(solved.x[:seasons], 0.0, None)
    return _bound_of(weights / weights.sum(), costs, optima)


def _bound_of(distribution: np.ndarray, costs: np.ndarray, optima: np.ndarray) -> LowerBound:
    """The lower bound the adversary's ``distribution`` over seasons proves: the best
    deterministic rule's ``E[OPT] / E[cost]``, computed exactly."""
    best_response = float(np.max((distribution @ optima) / (costs @ distribution)))
    support = np.flatnonzero(distribution > 0)
    return LowerBound(
        ratio=1.0 / best_response,
        best_response=best_response,
        distribution=distribution[support],
        inputs=(support + 1).astype(np.int32)[:, None],
    )
