"""Budgeted allocation (AdWords with small bids) as an advonline problem: its ``PROBLEM``.

There is no certificate (no exact competitive ratio of a rule over every input): the
evaluator's ratio is the worst it finds. The certified lower bound on every online algorithm is
Yao's principle over upper-triangular instances in a random advertiser order
(:mod:`.lower_bound`).
"""

from __future__ import annotations

import math

from advonline.baselines.adwords import BASELINES
from advonline.preflight import FLOAT32, FLOAT64, Need, encoding_evaluation_needs
from advonline.problem import Cases, Problem
from advonline.problems.adwords import (
    by_hand,
    families,
    lower_bound,
    model,
    policy,
    policy_file,
)


def exact_optimum(setting: model.Setting):
    """HiGHS's OPT where the model's optimum is only a lower bound on it (proportional
    allocation's best flow); None where it is exact (:func:`model.optimum_is_exact`)."""
    return None if model.optimum_is_exact(setting) else by_hand.optimum


def reference(setting: model.Setting) -> tuple[str, float]:
    del setting
    return "e / (e - 1): the best ratio as bids get small", math.e / (math.e - 1.0)


def optimum_need(setting: model.Setting, batch: int, itemsize: int, lower: str) -> Need:
    """OPT's largest array for ``batch`` instances scored at once (:func:`model.offline_optimum`):
    for ``n <= EXACT_ADVERTISERS`` the minimum cut's table of which queries each advertiser set
    leaves unmet, ``[B, T, 2^n]``; above, the flows' ``[B, T, n]``. Compiled, the programme's
    temporaries are the cut's table and about 1% more, or about 2.7 of the flows' (the split,
    its greedy orders), so the copies counted allow a little more."""
    if setting.advertisers <= model.EXACT_ADVERTISERS:
        what, size, copies = "[B, T, 2^n]", 2**setting.advertisers, 1.25
    else:
        what, size, copies = "[B, T, n]", setting.advertisers, 3
    table = itemsize * batch * setting.queries * size
    return Need(f"OPT's table {what} of {batch} inputs", table, lower, copies)


def evaluation_needs(setting: model.Setting, budget) -> list[Need]:
    """The evaluator's largest arrays: the encoding's, and OPT's table (:func:`optimum_need`)
    for the largest batch the sources score at once."""
    searched = max(
        budget.adversary_restarts * budget.adversary_batch,
        budget.search_chains * budget.search_candidates,
    )
    batch = max(searched, budget.random_instances)
    lower = "the setting's queries or advertisers"
    if budget.random_instances > searched:
        lower = f"--random-instances, or {lower}"
    return [
        *encoding_evaluation_needs(PROBLEM, setting, budget),
        optimum_need(setting, batch, FLOAT64, lower),
    ]


def training_needs(config) -> list[Need]:
    """Training's largest arrays: the encoding's (the networks' weights among them), and OPT's
    table (:func:`optimum_need`) for the search's inputs, the probe's networks' or the
    adversary's batch, whichever is largest."""
    batch = max(config.searched_inputs(), config.written_inputs())
    lower = (
        f"setting.queries or setting.advertisers, or the batch ({config.SEARCHED_KEYS}; "
        f"{config.written_keys()})"
    )
    return [*config.encoding_needs(), optimum_need(config.setting, batch, FLOAT32, lower)]


PROBLEM = Problem(
    name="adwords",
    setting=model.Setting,
    payoffs=model.payoffs,
    rollout=model.rollout,
    offline_optimum=model.offline_optimum,
    encoding=model.encoding,
    policy_head=policy.policy_head,
    baselines=BASELINES,
    certificate=lambda setting, rule: None,
    lower_bound=lower_bound.lower_bound,
    families=families.families,
    export=policy.export,
    load=policy_file.load,
    restore=policy.restore,
    exact_optimum=exact_optimum,
    reference=reference,
    evaluation_needs=evaluation_needs,
    training_needs=training_needs,
    cases=Cases(
        settings=(
            {"advertisers": 4, "queries": 12, "max_bid": 0.25, "bid_levels": 3},
            {"advertisers": 3, "queries": 8, "max_bid": 0.5, "bid_levels": 1},
            {"advertisers": 4, "queries": 16, "max_bid": 0.25, "allocation": "integral"},
            # two tokens per query; OPT by the maximum flow on the host
            {"advertisers": 20, "queries": 30, "max_bid": 0.2, "bid_levels": 2},
            # bids that do not scale to whole numbers: OPT by proportional allocation
            {"advertisers": 14, "queries": 30, "max_bid": math.pi / 10},
        ),
        earned=by_hand.earned,
        optimum=by_hand.optimum,
    ),
)
