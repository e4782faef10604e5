"""Budgeted allocation written again by hand, for the checks (``advonline check adwords``):
a NumPy loop around a rule's shares, and OPT by HiGHS on the sparse LP (or MILP). Neither
goes through :func:`~advonline.problems.adwords.model.rollout` or the JAX optimum, so the
checks compare two independent computations. The evaluator also takes HiGHS's OPT where the
JAX optimum is only a feasible flow (``problem.exact_optimum``)."""

from __future__ import annotations

import jax
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix, vstack

from advonline.problems.adwords import model


def allocation_optimum(bids, bidders, whole: bool = False) -> float:
    """OPT by LP over the pairs (query t, advertiser i bidding on it): x of query t to i, each
    query at most once, each budget 1. ``bids [T]``, ``bidders [T, n]`` (bool). ``whole``: by
    HiGHS's MILP, each query whole to one advertiser or to none."""
    bids, bidders = np.asarray(bids), np.asarray(bidders)
    queries, advertisers = bidders.shape
    query, advertiser = np.nonzero(bidders)
    pairs = np.arange(len(query))
    if len(pairs) == 0:  # nobody bids on anything
        return 0.0
    earn = bids[query]
    per_query = coo_matrix((np.ones(len(pairs)), (query, pairs)), shape=(queries, len(pairs)))
    per_budget = coo_matrix((earn, (advertiser, pairs)), shape=(advertisers, len(pairs)))
    rows = vstack([per_query, per_budget]).tocsr()
    if whole:
        constraints = LinearConstraint(rows, -np.inf, np.ones(queries + advertisers))
        found = milp(-earn, constraints=constraints, integrality=1, bounds=Bounds(0, 1))
        return -found.fun
    result = linprog(
        -earn, A_ub=rows, b_ub=np.ones(queries + advertisers), bounds=(0, 1), method="highs"
    )
    return -result.fun


def optimum(setting: model.Setting, instance) -> float:
    """OPT of one instance by HiGHS: the LP, or the MILP for whole queries."""
    whole = setting.allocation == "integral"
    return allocation_optimum(instance.bids, instance.bidders, whole)


def earned(setting: model.Setting, policy, instance) -> float:
    """What a rule earns on one instance by a loop: each query split by the rule's shares among
    its bidders (whole to the largest share for integral allocation), each advertiser's
    earnings capped by what is left of its budget of 1."""
    bids, bidders = np.asarray(instance.bids), np.asarray(instance.bidders)
    spent = np.zeros(setting.advertisers)
    policy = jax.jit(policy)  # the rule, jitted; the loop is by hand
    for t in range(setting.queries):
        bidding = bidders[t]
        offered = np.where(bidding, bids[t], 0.0)
        observation = model.Observation(offered, spent, np.float64(t / setting.queries))
        shares = np.where(bidding, np.asarray(policy(observation)), 0.0)
        if setting.allocation == "integral":
            shares = np.eye(setting.advertisers)[np.argmax(shares)] * (shares.max() > 0)
        spent = spent + np.clip(offered * shares, 0.0, 1.0 - spent)
    return float(spent.sum())
