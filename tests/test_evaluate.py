"""The evaluator: every baseline through one fixture, and the known ratios it must recover."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from policies import RandomTablePolicy
from tiers import first_by_default

from advonline import problems as registry
from advonline.baselines.posted_price import BASELINES, make_baseline
from advonline.evaluation import (
    LOWER_BOUND,
    SOURCE_NAMES,
    Budget,
    SourceRatio,
    from_sources,
    report,
    time_line,
)
from advonline.evaluation import measure as measure_on
from advonline.problems.posted_price.evaluate import families_source, random_source
from advonline.problems.posted_price.families import (
    make_family,
    random_instances,
    stopping_densities,
    write_out,
)
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.optimum import lp_optimum
from advonline.problems.posted_price.problem import PROBLEM as POSTED

# the setting and budget of the CLI tests (tests/test_cli.py): programs compiled there are
# reused here
SMALL_BUDGET = Budget(family_members=9, random_instances=8, adversary_steps=5, search_steps=8)


def measure(setting, name, policy, budget):
    return measure_on(POSTED, setting, name, policy, budget)


@pytest.mark.parametrize("name", list(BASELINES))
@pytest.mark.parametrize(
    "setting",
    first_by_default(
        [
            Setting(rounds=40, max_demand=0.05),
            Setting(rounds=40, max_demand=0.25, demand_levels=5, divisible=False),
        ]
    ),
    ids=["small-demand", "large-demand-indivisible"],
)
def test_every_baseline_gets_every_source(name, setting):
    found = measure(setting, name, make_baseline(name, setting), SMALL_BUDGET)
    assert set(found.sources) == set(SOURCE_NAMES)
    assert found.sources["exact"].ratio is not None  # the DP fits these settings
    ratios = [s.ratio for s in found.sources.values()]
    assert found.competitive_ratio == max(ratios) >= 1.0
    # ties within float rounding go to the first source (exact)
    worst = found.sources[found.worst_source].ratio
    assert worst == pytest.approx(found.competitive_ratio, rel=1e-12)
    # the families and random inputs are real instances: they cannot beat the exact sup
    exact = found.sources["exact"].ratio
    assert found.sources["families"].ratio <= exact * (1 + 1e-9)
    assert found.sources["random"].ratio <= exact * (1 + 1e-9)
    assert found.sources["adversary"].ratio <= exact * (1 + 1e-9)


@pytest.mark.parametrize("deciding", SOURCE_NAMES)
def test_any_source_can_decide_the_measured_ratio(deciding):
    """The CR is the worst of every source with a ratio, whichever source found it; a source
    without one (None) is passed over."""
    ratios = {name: 1.5 + 0.1 * index for index, name in enumerate(SOURCE_NAMES)}
    ratios[deciding] = 7.0
    sources = {name: SourceRatio(ratio, name) for name, ratio in ratios.items()}
    sources["missing"] = SourceRatio(None, "cannot run here")
    measured = from_sources("rule", sources, SourceRatio(None, "no bound"))
    assert (measured.competitive_ratio, measured.worst_source) == (7.0, deciding)


def test_the_budget_s_seed_draws_other_random_inputs():
    """``--seed`` reaches the evaluator's key stream: another seed measures other random
    instances, while the exact certificate stays what it is."""
    setting = Setting(rounds=40, max_demand=0.05)
    policy = make_baseline("threshold", setting)
    first, second = (
        measure(setting, "threshold", policy, dataclasses.replace(SMALL_BUDGET, seed=seed))
        for seed in (0, 1)
    )
    assert first.sources["random"].ratio != second.sources["random"].ratio
    assert first.sources["exact"].ratio == second.sources["exact"].ratio


def test_several_resources_with_indivisible_buyers_are_measured_without_the_oracle():
    """The oracle scores inputs by an optimum inside jit, which for indivisible buyers of
    several resources is a MILP: its source says so, and the others still measure."""
    setting = Setting(resources=2, capacities=(1.0, 1.0), rounds=3, max_demand=0.5, divisible=False)
    found = measure(setting, "threshold", make_baseline("threshold", setting), SMALL_BUDGET)
    assert found.sources["adversary"].ratio is None
    assert "indivisible" in found.sources["adversary"].note
    assert 1.0 < found.sources["families"].ratio <= found.competitive_ratio < math.inf


def test_the_families_stay_within_the_setting_s_densities():
    """A geometric grid can fall an ulp below L, and a buyer below L buys at no price a policy
    may post: the families would then report an infinite ratio for every policy."""
    setting = Setting(low=0.3, high=3.1, rounds=40, max_demand=0.05)
    greedy = make_baseline("greedy", setting)
    with jax.enable_x64(True):
        stops = np.asarray(stopping_densities(setting, SMALL_BUDGET.family_members, jnp.float64))
        found = families_source(setting, greedy, SMALL_BUDGET, jax.random.key(0))
    assert stops[0] == setting.low and stops[-1] == setting.high
    assert found.ratio == pytest.approx(setting.high / setting.low, rel=1e-9)  # U / L, attained


@pytest.mark.parametrize("name", ["threshold", "greedy"])
def test_two_resources_families_are_the_same_at_every_scale_of_densities(name):
    """Capacities 3e-3 and 1.3e2: values span 1e7, which HiGHS solves only with each row in
    units of its capacity, and a bundle priced at its density must buy though the two sides
    of ``b >= p . d`` round differently away from L = 1."""
    found = []
    for low in (1.0, 4e3):
        shape = {"rounds": 10, "max_demand": 0.25, "capacities": (3e-3, 1.3e2)}
        setting = Setting(resources=2, low=low, high=100 * low, **shape)
        with jax.enable_x64(True):
            policy = make_baseline(name, setting)
            source = families_source(setting, policy, SMALL_BUDGET, jax.random.key(0))
        found.append(source.ratio)
    assert math.isfinite(found[0]) and found[1] == pytest.approx(found[0], rel=1e-9)


@pytest.mark.end_to_end
@pytest.mark.parametrize("high", [5.0, 10.0, 100.0])
def test_threshold_small_demand_within_one_percent_of_optimum(high):
    setting = Setting(high=high, rounds=2000, max_demand=0.001)
    found = measure(setting, "threshold", make_baseline("threshold", setting), Budget())
    assert found.sources["exact"].note.startswith("closed form")
    assert found.competitive_ratio == pytest.approx(1 + math.log(high), rel=0.01)
    assert found.sources["families"].ratio == pytest.approx(1 + math.log(high), rel=0.01)


@pytest.mark.end_to_end
def test_greedy_and_fixed_known_ratios():
    setting = Setting(high=10.0, rounds=2000, max_demand=0.001)
    greedy = measure(setting, "greedy", make_baseline("greedy", setting), Budget())
    assert greedy.competitive_ratio == pytest.approx(10.0, rel=0.02)
    assert greedy.sources["families"].ratio == pytest.approx(10.0, rel=0.02)
    fixed = measure(setting, "fixed", make_baseline("fixed", setting), Budget())
    assert fixed.competitive_ratio == math.inf
    # a family priced below the fixed price sells nothing: an input's ratio is inf, not large
    assert fixed.sources["families"].ratio == math.inf


def test_k1_adversary_source_is_the_training_oracle(monkeypatch):
    """For K = 1 the evaluator's fresh best response is the training loop's oracle with the
    evaluator's budget, and the worst input it reports has the ratio it reports. Against a
    deterministic policy, whose exact source is its CR, it is a cross-check with a cut
    budget whose first chain starts at the DP's worst run: it ends no lower than that start
    and no higher than the certificate."""
    import jax
    import numpy as np

    from advonline.evaluation import cross_check_budget
    from advonline.problems.posted_price import certify, evaluate, oracles
    from advonline.problems.posted_price.adversary import build_adversary
    from advonline.problems.posted_price.config import AdversaryConfig
    from advonline.problems.posted_price.model import Instance
    from advonline.problems.posted_price.optimum import offline_optimum

    calls = []

    def spy(*args, **kwargs):
        calls.append(args[4])
        return oracles.best_responses(*args, **kwargs)

    monkeypatch.setattr(evaluate, "best_responses", spy)
    setting = Setting(rounds=40, max_demand=0.05)
    budget = Budget(family_members=9, random_instances=8, adversary_steps=10, search_steps=64)
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), size=(setting.rounds, setting.grid_size + 1))
    randomised = RandomTablePolicy(jnp.asarray([1.0, 2.0, 4.0, 8.0]), jnp.asarray(probs))
    threshold = make_baseline("threshold", setting)
    searched = measure(setting, "random-table", randomised, budget).sources["adversary"]
    found = measure(setting, "threshold", threshold, budget)
    assert calls == [
        evaluate.oracle_budget(budget),
        evaluate.oracle_budget(cross_check_budget(budget)),
    ]
    assert not searched.note.startswith("cross-check")
    source, exact = found.sources["adversary"], found.sources["exact"].ratio
    assert source.note.startswith("cross-check of the exact certificate")
    with jax.enable_x64(True):
        runs = certify.worst_runs(setting, threshold, exact, jax.random.key(0), 1)
        types = build_adversary(setting, AdversaryConfig()).buyer_types
        start = types.instances(jnp.asarray(types.tokens(*runs)), jnp.float64)
        key = jax.random.key(1)
        started = evaluate.ratios(
            offline_optimum(setting, start),
            evaluate.expected_welfare(setting, threshold, start, key, 1),
        )[0]
        assert started <= source.ratio <= exact * (1 + 1e-9)
        for checked, policy in ((source, threshold), (searched, randomised)):
            worst = Instance(**{k: np.asarray(v)[None] for k, v in checked.worst_input.items()})
            again = evaluate.ratios(
                offline_optimum(setting, worst),
                evaluate.expected_welfare(setting, policy, worst, key, 1),
            )
            assert again[0] == pytest.approx(checked.ratio, rel=1e-5)  # rounded to 1e-6


def test_several_resources_adversary_source_is_the_training_oracle(monkeypatch):
    """For K >= 2 too the fresh best response is the training loop's oracle (state-conditioned
    network, then local search) with the evaluator's budget, and the worst input it reports
    has the ratio it reports: the simulator's welfare against HiGHS's OPT."""
    import jax
    import numpy as np

    from advonline.problems.posted_price import evaluate, oracles
    from advonline.problems.posted_price.model import Instance
    from advonline.problems.posted_price.optimum import offline_optimum

    calls = []

    def spy(*args, **kwargs):
        calls.append(args[4])
        return oracles.best_responses(*args, **kwargs)

    monkeypatch.setattr(evaluate, "best_responses", spy)
    setting = Setting(resources=2, capacities=(1.0, 1.0), rounds=8, max_demand=0.5, demand_levels=2)
    budget = Budget(
        family_members=5, random_instances=4, adversary_steps=3, samples=4, search_steps=8
    )
    threshold = make_baseline("threshold", setting)
    source = measure(setting, "threshold", threshold, budget).sources["adversary"]
    assert calls == [evaluate.oracle_budget(budget)]
    assert "state-conditioned" in source.note and "local search" in source.note
    with jax.enable_x64(True):
        worst = Instance(**{k: np.asarray(v)[None] for k, v in source.worst_input.items()})
        again = evaluate.ratios(
            offline_optimum(setting, worst),
            evaluate.expected_welfare(setting, threshold, worst, jax.random.key(1), 1),
        )
    assert source.ratio >= 1
    assert again[0] == pytest.approx(source.ratio, rel=1e-5)  # the input was rounded to 1e-6


def _measured(name: str, ratio: float, bound: float | None, worst: str = "adversary"):
    from advonline.evaluation import Measurement, SourceRatio

    sources = {worst: SourceRatio(ratio, "given")}
    return Measurement(name, ratio, worst, sources, SourceRatio(bound, "given"))


def test_the_verdict_judges_the_learned_guarantee_against_the_best_baseline():
    from advonline.evaluation import verdict

    baselines = [_measured("threshold", 3.352, None, "exact"), _measured("greedy", 10.0, None)]
    beats = verdict([_measured("learned", 2.081, 2.158), *baselines], "learned", ("threshold",))
    assert beats == "verdict: learned 2.081 (certified <= 2.158) beats threshold 3.352: 0.64x"
    # the certificate decides, not the (lower) worst ratio found
    loose = [_measured("learned", 2.0, 3.5), *baselines]
    assert verdict(loose, "learned", ("threshold", "greedy")) == (
        "WARNING: learned 2.000 (certified <= 3.500) loses to threshold 3.352: 1.044x; "
        "use threshold instead"
    )
    # a certified baseline is judged by its certificate too, not by its worst found
    certified_optimal = [_measured("optimal", 2.1005, 2.1014), *baselines]
    assert verdict(
        [_measured("learned", 2.0990, 2.1018), *certified_optimal], "learned", ("optimal",)
    ) == (
        "WARNING: learned 2.099 (certified <= 2.102) loses to optimal 2.101 (certified): "
        "1.00019x; use optimal instead"
    )
    assert (
        verdict([_measured("learned", 2.0990, 2.1010), *certified_optimal], "learned", ("optimal",))
        == "verdict: learned 2.099 (certified <= 2.101) beats optimal 2.101 (certified): 0.99981x"
    )
    # no certificate (several resources): the worst ratio found is the figure
    found = verdict([_measured("learned", 5.1, None), *baselines], "learned", ("greedy",))
    assert (
        found
        == "verdict: learned 5.100 (worst found; no certificate here) beats greedy 10.000: 0.51x"
    )
    # a deterministic policy's exact CR is its certificate; a catastrophe is never quiet
    lost = verdict(
        [_measured("learned", 1734.3, None, "exact"), *baselines], "learned", ("threshold",)
    )
    assert lost.startswith("WARNING: learned 1734.300 (certified <= 1734.300) loses to threshold")
    assert "517.4x" in lost
    # a loss in the sixth digit is printed as one, not as 1x
    close = [_measured("water-filling", 1.5663104, None), *baselines]
    slight = verdict([_measured("learned", 1.5663153, None), *close], "learned", ("water-filling",))
    assert slight.endswith("loses to water-filling 1.566: 1.0000031x; use water-filling instead")
    # given the lower bound on every algorithm, the line says how far above it the figure is
    bracketed = [_measured("learned", 1.957, 1.9842), *baselines]
    assert verdict(bracketed, "learned", ("threshold",), lower_bound=1.9005) == (
        "verdict: learned 1.957 (certified <= 1.984, 1.044x the lower bound) beats threshold "
        "3.352: 0.59x"
    )
    near = [_measured("learned", 1.5663153, None), *close]
    assert "(worst found, 1.0000031x the lower bound; no certificate here)" in verdict(
        near, "learned", ("water-filling",), lower_bound=1.5663104
    )
    # a certified optimum matched within float rounding is a match, not a loss
    optimal = [_measured("optimal", 2.0741, None, "exact")]
    same = verdict(
        [_measured("learned", 2.0741 * (1 + 1e-9), None, "exact"), *optimal],
        "learned",
        ("optimal",),
    )
    assert same == "verdict: learned 2.074 (certified <= 2.074) matches optimal 2.074: 1.00x"
    # an exact certificate counts even where another source tops it by float rounding
    from advonline.evaluation import SourceRatio, from_sources

    exact, archive = SourceRatio(2.0804, "certificate"), SourceRatio(2.0804 * (1 + 1e-9), "a")
    tied = from_sources("learned", {"exact": exact, "archive": archive}, SourceRatio(None, ""))
    assert tied.worst_source == "archive"
    threshold = [_measured("threshold", 2.1007, None, "exact")]
    assert verdict([tied, *threshold], "learned", ("threshold",)) == (
        "verdict: learned 2.080 (certified <= 2.080) beats threshold 2.101: 0.9903x"
    )


def _expected_welfare_by_hand(setting, policy, values, demands) -> float:
    """E[welfare] of a randomised table policy (K = 1, divisible) by a plain recursion over
    (round, units sold) and every price it may draw, each with its probability in float64
    (each row of the table's probabilities divided by its sum: a float32 row's own sum
    misses 1 by its rounding)."""
    grid, levels = setting.grid_size, np.asarray(policy.levels)
    probs = np.asarray(policy.probs, np.float64)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    units = np.rint(np.asarray(demands)[:, 0] * grid).astype(int)

    @functools.cache
    def value_from(t: int, sold: int) -> float:
        if t == len(units):
            return 0.0
        total = 0.0
        for price, chance in zip(levels, probs[t, sold], strict=True):
            later = value_from(t + 1, sold)
            if units[t] and values[t] >= price * demands[t][0] and sold < grid:
                taken = min(units[t], grid - sold)
                gain = values[t] * taken / units[t]
                later = gain + value_from(t + 1, sold + taken)
            total += chance * later
        return total

    return value_from(0, 0)


def test_the_report_s_verdict_measures_the_learned_figure_against_its_lower_bound():
    """The report hands the verdict the problem's certified lower bound itself (a ratio,
    not its inverse), so the factor printed is the learned figure over the bound's ratio."""
    problem = registry.get("ski-rental")
    setting = problem.setting.from_config(dict(problem.cases.settings[0]))
    bound = problem.lower_bound(setting).ratio
    figure = bound * 1.25
    results = [_measured("learned", figure, None, "exact"), _measured("never", 9.0, None)]
    document = report(problem, setting, Budget(), results, learned="learned", baselines=("never",))
    assert document["lower_bound"]["ratio"] == bound > 1.0
    assert f"{figure / bound:.4g}x the lower bound" in document["verdict"]  # 1.25x


def test_every_source_of_a_randomised_policy_is_a_ratio_recomputed_by_hand():
    """For a randomised K = 1 policy, each source's worst input, rebuilt from what the report
    says and measured by a recursion written here against HiGHS's OPT, gives the source's
    figure; and every figure is OPT / E[ALG] >= 1, never its inverse."""
    setting = Setting(rounds=8, max_demand=0.25, demand_levels=2)
    rng = np.random.default_rng(5)
    probs = rng.dirichlet(np.ones(3), size=(setting.rounds, setting.grid_size + 1))
    policy = RandomTablePolicy(levels=jnp.asarray([1.0, 3.0, 6.0]), probs=jnp.asarray(probs))
    budget = Budget(random_instances=16, family_members=9, adversary_steps=4, search_steps=8)
    measured = measure_on(POSTED, setting, "random-table", policy, budget)
    found = {name: s.ratio for name, s in measured.sources.items() if s.ratio is not None}
    assert min(found.values()) >= 1.0, found
    assert measured.competitive_ratio == max(found.values())
    worst = measured.sources["adversary"].worst_input
    values, demands = np.asarray(worst["values"]), np.asarray(worst["demands"])
    optimum = lp_optimum(values, demands, np.asarray(setting.capacities))
    by_hand = optimum / _expected_welfare_by_hand(setting, policy, values, demands)
    assert measured.sources["adversary"].ratio == pytest.approx(by_hand, rel=1e-5)
    family = measured.sources["families"].worst_input
    source = make_family(
        family["family"],
        setting,
        jnp.asarray([family["stop_density"]]),
        jnp.asarray([family["demand"]]),
        jnp.asarray([family["final_demand"]]),
    )
    with jax.enable_x64(True):
        instance = write_out(setting, source, 1, jnp.float64)
    values, demands = np.asarray(instance.values[0]), np.asarray(instance.demands[0])
    optimum = lp_optimum(values, demands, np.asarray(setting.capacities))
    by_hand = optimum / _expected_welfare_by_hand(setting, policy, values, demands)
    assert measured.sources["families"].ratio == pytest.approx(by_hand, rel=1e-9)


def test_the_random_source_is_the_worst_of_its_instances_by_hand():
    """Posted pricing's ``random`` source is the largest ratio over its instances, each
    measured here by the recursion above against HiGHS's OPT, and it names that instance."""
    setting = Setting(rounds=6, max_demand=0.25, demand_levels=2)
    rng = np.random.default_rng(11)
    probs = rng.dirichlet(np.ones(3), size=(setting.rounds, setting.grid_size + 1))
    policy = RandomTablePolicy(levels=jnp.asarray([1.0, 2.5, 7.0]), probs=jnp.asarray(probs))
    budget = Budget(random_instances=12)
    key = jax.random.key(4)
    with jax.enable_x64(True):
        found = random_source(setting, policy, budget, key)
        key_instances, _ = jax.random.split(key)  # as the source splits its key
        instances = random_instances(setting, key_instances, budget.random_instances, jnp.float64)
    by_hand = [
        lp_optimum(values, demands, np.asarray(setting.capacities))
        / _expected_welfare_by_hand(setting, policy, values, demands)
        for values, demands in zip(
            np.asarray(instances.values), np.asarray(instances.demands), strict=True
        )
    ]
    assert found.worst_input["index"] == int(np.argmax(by_hand))
    assert found.ratio == pytest.approx(max(by_hand), rel=1e-9)
    assert min(by_hand) < max(by_hand) * (1 - 1e-3)  # the instances tell the two apart


class _Heard:
    """A progress display that writes down what it hears."""

    def __init__(self):
        self.heard = []

    def begin(self, algorithms):
        self.heard.append(("begin", tuple(algorithms)))

    def started(self, algorithm, source):
        self.heard.append(("started", algorithm, source))

    def ended(self, algorithm, source, found, seconds):
        self.heard.append(("ended", algorithm, source, found.ratio))


def test_the_report_times_the_lower_bound_and_the_progress_hears_its_search():
    """The lower bound on every algorithm is searched after the sources: the progress display
    hears it begin and end with its ratio, the report keeps its seconds apart from the
    measuring's, and the time line says them."""
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=4, rounds=10)
    heard = _Heard()
    document = report(problem, setting, Budget(), [], progress=heard)
    bound = document["lower_bound"]
    assert bound["ratio"] > 1 and bound["seconds"] >= 0
    assert heard.heard == [
        ("started", *LOWER_BOUND),
        ("ended", *LOWER_BOUND, bound["ratio"]),
    ]
    assert document["measuring_seconds"] == 0
    timed = {"results": [{"algorithm": "a", "seconds": {"exact": 2.0}}]}
    line = time_line(timed | {"lower_bound": bound | {"seconds": 8.4}})
    assert line.endswith("; then the lower bound on every algorithm 8 s")
