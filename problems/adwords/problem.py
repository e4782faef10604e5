"""Budgeted allocation (AdWords with small bids) as an advonline problem: its ``PROBLEM``.

There is no certificate (no exact competitive ratio of a rule over every input) and no
certified lower bound for the setting yet: the evaluator's ratio is the worst it finds.
"""

from __future__ import annotations

import math

from advonline.baselines.adwords import BASELINES
from advonline.problem import Problem
from advonline.problems.adwords import families, model, policy, policy_file


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
    lower_bound=lambda setting: None,
    families=families.families,
    export=policy.export,
    load=policy_file.load,
    restore=policy.restore,
    reference=reference,
)
