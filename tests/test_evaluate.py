"""The evaluator: every baseline through one fixture, and the known ratios it must recover."""

import math

import pytest

from advonline.evaluate import SOURCE_NAMES, Budget, measure
from baselines import BASELINES, make_baseline
from problems.posted_price import Setting

# the setting and budget of the CLI tests (tests/test_cli.py): programs compiled there are
# reused here
SMALL_BUDGET = Budget(stopping_densities=9, random_instances=8, adversary_steps=5)


@pytest.mark.parametrize("name", list(BASELINES))
@pytest.mark.parametrize(
    "setting",
    [
        Setting(rounds=40, max_demand=0.05),
        Setting(rounds=40, max_demand=0.25, demand_levels=5, divisible=False),
    ],
    ids=["small-demand", "large-demand-indivisible"],
)
def test_every_baseline_gets_every_source(name, setting):
    found = measure(setting, name, make_baseline(name, setting), SMALL_BUDGET)
    assert set(found.sources) == set(SOURCE_NAMES)
    assert found.sources["exact"].ratio is not None  # the DP fits these settings
    ratios = [s.ratio for s in found.sources.values()]
    assert found.competitive_ratio == max(ratios) >= 1.0
    assert found.sources[found.worst_source].ratio == found.competitive_ratio
    # the families and random inputs are real instances: they cannot beat the exact sup
    exact = found.sources["exact"].ratio
    assert found.sources["families"].ratio <= exact * (1 + 1e-9)
    assert found.sources["random"].ratio <= exact * (1 + 1e-9)


@pytest.mark.parametrize("high", [5.0, 10.0, 100.0])
def test_threshold_small_demand_within_one_percent_of_optimum(high):
    setting = Setting(high=high, rounds=2000, max_demand=0.001)
    found = measure(setting, "threshold", make_baseline("threshold", setting), Budget())
    assert found.sources["exact"].note.startswith("closed form")
    assert found.competitive_ratio == pytest.approx(1 + math.log(high), rel=0.01)
    assert found.sources["families"].ratio == pytest.approx(1 + math.log(high), rel=0.01)


def test_greedy_and_fixed_known_ratios():
    setting = Setting(high=10.0, rounds=2000, max_demand=0.001)
    greedy = measure(setting, "greedy", make_baseline("greedy", setting), Budget())
    assert greedy.competitive_ratio == pytest.approx(10.0, rel=0.02)
    assert greedy.sources["families"].ratio == pytest.approx(10.0, rel=0.02)
    fixed = measure(setting, "fixed", make_baseline("fixed", setting), Budget())
    assert fixed.competitive_ratio == math.inf
