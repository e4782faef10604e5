"""Posted pricing written again by hand, for the checks (``advonline check posted-price``): a
NumPy loop that sells at a deterministic policy's posted prices, and OPT by HiGHS."""

from __future__ import annotations

import jax
import numpy as np

from advonline.problems.posted_price import model
from advonline.problems.posted_price.optimum import lp_optimum, milp_optimum


def earned(setting: model.Setting, policy, instance) -> float:
    """The welfare of deterministic prices on one instance: a buyer buys iff its value covers
    the posted bundle price (ties buy, up to :func:`model.within_rounding` for K >= 2); a
    divisible bundle takes what is left, scaled uniformly, and an indivisible one is sold only
    whole."""
    values, demands = np.asarray(instance.values), np.asarray(instance.demands)
    capacities = np.asarray(setting.capacities)
    used, welfare = np.zeros(setting.resources), 0.0
    tie = model.within_rounding(setting.resources, values.dtype)
    # the rule's prices, jitted; the loop around them is by hand
    act = jax.jit(lambda observation: policy(observation).prices)
    for t in range(setting.rounds):
        observation = model.Observation(used / capacities, np.float64(t / setting.rounds))
        prices = np.asarray(act(observation))[:, 0]
        if demands[t].sum() == 0 or values[t] < (prices @ demands[t]) * tie:
            continue
        if setting.divisible:
            asked = demands[t] > 0
            share = min(1.0, np.min((capacities - used)[asked] / demands[t][asked]))
        else:  # whole, if it fits up to rounding of the demand grid's sums
            share = float(np.all(demands[t] <= capacities - used + 1e-9 * capacities))
        used += share * demands[t]
        welfare += share * values[t]
    return welfare


def optimum(setting: model.Setting, instance) -> float:
    """OPT of one instance by HiGHS: the LP, or the MILP for indivisible bundles."""
    solve = lp_optimum if setting.divisible else milp_optimum
    return solve(
        np.asarray(instance.values), np.asarray(instance.demands), np.asarray(setting.capacities)
    )
