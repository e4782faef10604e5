"""Ski rental as an advonline problem (advonline/problem.py): its ``PROBLEM``."""

from __future__ import annotations

from advonline.baselines.ski_rental import BASELINES, karlin_ratio
from advonline.preflight import FLOAT32, FLOAT64, Need, encoding_evaluation_needs
from advonline.problem import Cases, Problem
from advonline.problems.ski_rental import by_hand, exact, model, policy, policy_file


def reference(setting: model.Setting) -> tuple[str, float] | None:
    """Karlin, Manasse, McGeoch and Owicki's best randomised ratio (Algorithmica 1994), for
    seasons of any length. Seasons of at most ``2 buy - 2`` days let a rule do better (it
    may rent through them all; at most ``buy`` days, renting is optimal): there the lower
    bound, the exact optimum of the setting, is the only figure, and this returns None."""
    if setting.rounds < 2 * setting.buy - 1:
        return None
    return "1 / (1 - (1 - 1/B)^B)", karlin_ratio(setting.buy)


def evaluation_needs(setting: model.Setting, budget) -> list[Need]:
    """The evaluator's largest arrays: a token is a whole season, simulated day by day, so the
    encoding's one token per input sizes only some of them: the held-out family (every
    season), the search's proposals and the random inputs are scored over every day (the
    lower bound's LP has O(T) nonzeros)."""
    days, lower = setting.rounds + 1, "the setting's rounds"
    proposals = budget.search_chains * budget.search_candidates
    return [
        *encoding_evaluation_needs(PROBLEM, setting, budget),
        Need("the family of every season, day by day [T + 1, T]", FLOAT64 * days * days, lower),
        Need(
            "the search's proposals, day by day [proposals, T]", FLOAT64 * proposals * days, lower
        ),
        Need(
            "the random inputs, day by day [random instances, T]",
            FLOAT64 * budget.random_instances * days,
            f"--random-instances or {lower}",
        ),
    ]


def training_needs(config) -> list[Need]:
    """Training's largest arrays: the encoding's (the networks' weights among them), and the
    archive or the probe's proposals, day by day."""
    seasons = config.searched_inputs()
    return [
        *config.encoding_needs(),
        Need(
            "the archive's or the probe's seasons, day by day [seasons, T]",
            FLOAT32 * seasons * (config.setting.rounds + 1),
            "setting.rounds",
        ),
    ]


PROBLEM = Problem(
    name="ski-rental",
    setting=model.Setting,
    payoffs=model.payoffs,
    rollout=model.rollout,
    offline_optimum=model.offline_optimum,
    encoding=model.SeasonEncoding,
    policy_head=policy.policy_head,
    baselines=BASELINES,
    certificate=exact.certificate,
    differentiable_certificate=exact.differentiable_certificate,
    lower_bound=exact.lower_bound,
    families=lambda setting: {"every season": model.every_season(setting)},
    export=policy.export,
    load=policy_file.load,
    restore=policy.restore,
    reference=reference,
    evaluation_needs=evaluation_needs,
    training_needs=training_needs,
    cases=Cases(({"buy": 4, "rounds": 10}, {"buy": 7, "rounds": 5}), by_hand.paid, by_hand.optimum),
    objective="pay",
)
