"""The budgeted allocation optimum by HiGHS, the reference the tests check the problem's own
optimum against."""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix, vstack


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
