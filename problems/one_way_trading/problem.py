"""One-way trading as an advonline problem (advonline/problem.py): its ``PROBLEM``."""

from __future__ import annotations

import numpy as np

from advonline.baselines.one_way_trading import BASELINES, optimal_ratio
from advonline.problem import Cases, Certificate, Problem, TrainingCertificate
from advonline.problems.one_way_trading import by_hand, descent, exact, model, policy, policy_file


def certificate(setting: model.Setting, trading_policy) -> Certificate | None:
    """An upper bound on a conversion curve's competitive ratio over ``T`` rounds of real
    rates (:func:`exact.curve_ratio`; None for any other policy)."""
    if not isinstance(trading_policy, model.CurvePolicy):
        return None
    return exact.curve_ratio(setting, np.asarray(trading_policy.fractions))


def reference(setting: model.Setting) -> tuple[str, float]:
    return "r*(theta) = 1 + W((theta - 1) / e), unbounded horizon", optimal_ratio(setting.theta)


PROBLEM = Problem(
    name="one-way-trading",
    setting=model.Setting,
    payoffs=model.payoffs,
    rollout=model.rollout,
    offline_optimum=model.offline_optimum,
    encoding=model.RateEncoding,
    policy_head=policy.policy_head,
    baselines=BASELINES,
    certificate=certificate,
    lower_bound=exact.lower_bound,
    families=lambda setting: {"rise-and-drop": model.rise_and_drop(setting)},
    export=policy.export,
    load=policy_file.load,
    restore=policy.restore,
    reference=reference,
    training_certificate=TrainingCertificate(descend=descent.descend),
    cases=Cases(
        settings=(
            {"low": 1.0, "high": 10.0, "rounds": 12, "levels": 9},
            {"low": 2.0, "high": 50.0, "rounds": 6, "levels": 11},
        ),
        earned=by_hand.earned,
        optimum=by_hand.optimum,
    ),
)
