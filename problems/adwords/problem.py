"""Budgeted allocation (AdWords with small bids) as an advonline problem: its ``PROBLEM``.

There is no certificate (no exact competitive ratio of a rule over every input): the
evaluator's ratio is the worst it finds. The certified lower bound on every online algorithm is
Yao's principle over upper-triangular instances in a random advertiser order
(:mod:`.lower_bound`).
"""

from __future__ import annotations

import math

from advonline.baselines.adwords import BASELINES
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
