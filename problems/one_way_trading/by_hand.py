"""One-way trading written again by hand, for the checks (``advonline check
one-way-trading``): a loop that converts up to the curve's target, and OPT by SciPy's LP."""

from __future__ import annotations

import jax
import numpy as np
from scipy.optimize import linprog

from advonline.problems.one_way_trading import model


def earned(setting: model.Setting, policy, rates) -> float:
    """What a policy earns on one rate sequence: convert up to the target each day, the rest
    at ``m`` in the end."""
    rates = np.asarray(rates)
    converted, revenue = 0.0, 0.0
    act = jax.jit(lambda observation: policy(observation))  # the rule, jitted; the loop is by hand
    for t, rate in enumerate(rates):
        observation = model.Observation(rate, np.float64(converted), np.float64(t / len(rates)))
        amount = min(max(float(act(observation)) - converted, 0.0), 1.0 - converted)
        converted += amount
        revenue += rate * amount
    return revenue + setting.low * (1.0 - converted)


def optimum(setting: model.Setting, rates) -> float:
    """OPT by LP: convert ``x_t`` at ``p_t``, the rest at ``m``."""
    rates = np.asarray(rates)
    result = linprog(
        -(rates - setting.low), A_ub=np.ones((1, len(rates))), b_ub=[1.0], bounds=(0, 1)
    )
    return setting.low - result.fun
