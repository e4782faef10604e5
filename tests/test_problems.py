"""The checks every registered problem passes (docs/adding-a-problem.md), on each small
setting its own cases name: the checks of ``advonline check`` (advonline/checks.py: settings,
encodings, payoffs in [0, 1], the simulator and OPT against the problem's loop and solver by
hand, certificates that no search beats, a lower bound below every certificate, policy files
read without JAX), then the evaluator's search from the hard inputs. A built-in problem without
cases fails :func:`test_every_built_in_problem_supplies_its_cases`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import checks
from advonline import problems as registry
from advonline.evaluation import Budget, measure
from advonline.problems.adwords import by_hand as allocation_by_hand
from advonline.problems.adwords import model as allocation
from advonline.problems.one_way_trading import exact
from advonline.sources import families_source, hard_starts, input_ratios


@pytest.mark.parametrize(
    "values",
    [
        {"advertisers": 6, "queries": 24, "max_bid": 0.3, "bid_levels": 3},
        {"advertisers": 5, "queries": 20, "max_bid": 0.25, "allocation": "integral"},
    ],
)
def test_allocation_optimum_matches_highs_on_a_thousand_random_instances(values):
    setting = allocation.Setting(**values)
    encoding = allocation.encoding(setting)
    with jax.enable_x64(True):
        instances = encoding.decode(encoding.random(jax.random.key(7), 1000))
        optima = np.asarray(allocation.offline_optimum(setting, instances))
    instances = jax.tree.map(np.asarray, instances)
    for i in range(1000):
        one = jax.tree.map(lambda leaf, i=i: leaf[i], instances)
        assert optima[i] == pytest.approx(allocation_by_hand.optimum(setting, one), abs=1e-7)


PARAMS = [
    pytest.param(name, index, id=f"{name}-{index}")
    for name in registry.names()
    for index in range(len(registry.get(name).cases.settings if registry.get(name).cases else []))
]


def _case(name: str, index: int):
    problem = registry.get(name)
    return problem, problem.setting.from_config(dict(problem.cases.settings[index]))


def test_every_built_in_problem_supplies_its_cases():
    """Every problem this repository ships brings small settings, a loop by hand and a solver
    for the checks (an installed package's problem is its own package's to check)."""
    for name in registry.BUILT_IN:
        cases = registry.get(name).cases
        assert cases is not None and cases.settings, name
        assert cases.earned is not None and cases.optimum is not None, name


@pytest.mark.parametrize(
    ("name", "index"),
    # each problem's first case in the default run, the rest with the whole runs (pyproject)
    [
        p if p.values[1] == 0 else pytest.param(*p.values, id=p.id, marks=pytest.mark.end_to_end)
        for p in PARAMS
    ],
)
def test_every_check_of_advonline_check_passes(name, index):
    """The checks ``advonline check`` runs (advonline/checks.py): the setting reads back,
    the encoding stays in its vocabulary, payoffs are in [0, 1], the simulator and OPT match
    the problem's own by hand, no search beats a certificate and the lower bound stays below
    each, a policy file round-trips without JAX."""
    problem, setting = _case(name, index)
    failed = [r for r in checks.check_problem(problem, setting) if not r.passed]
    assert not failed, failed


def test_the_encoding_check_needs_mutations_unless_one_input_is_possible():
    """A season of at most one day is the only input there is: nothing to mutate, and the
    check says so. A mutation that changes nothing where inputs differ fails it."""
    problem = registry.get("ski-rental")
    single = checks.encoding_in_vocabulary(problem, problem.setting(buy=3, rounds=1))
    assert "draws one input only" in single
    frozen = type("Frozen", (problem.encoding,), {"mutate": lambda self, key, tokens: tokens})
    with pytest.raises(checks.CheckFailed, match="changed 0 of 32 sequences in 4 tries"):
        checks.encoding_in_vocabulary(
            dataclasses.replace(problem, encoding=frozen), problem.setting(buy=3, rounds=10)
        )


def test_the_by_hand_check_catches_a_simulator_off_by_a_little():
    """A loop by hand that disagrees with the simulator by 1e-6 on one day fails the check,
    and so does a solver whose OPT is 1e-6 off: the check compares, it does not just run."""
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=4, rounds=10)
    cases = problem.cases
    wrong = [
        cases._replace(earned=lambda s, rule, season: cases.earned(s, rule, season) * (1 + 1e-6)),
        cases._replace(optimum=lambda s, season: cases.optimum(s, season) + 1e-6),
    ]
    for bad in wrong:
        with pytest.raises(checks.CheckFailed):
            checks.matches_references(dataclasses.replace(problem, cases=bad), setting)


def test_the_range_and_certificate_checks_catch_a_problem_that_claims_a_little_too_much():
    """Each off by 1e-6, past float rounding: payoffs that beat OPT (above 1), an exact
    certificate its worst input does not attain, and a lower bound above the least of the
    baselines' certificates each fail their check; the shipped problem passes both."""
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=4, rounds=10)
    checks.payoffs_in_range(problem, setting)
    checks.certificates_hold(problem, setting)
    least = min(
        problem.certificate(setting, make(setting)).ratio for make in problem.baselines.values()
    )

    def generous(s, policy, instances, optimum):
        return problem.payoffs(s, policy, instances, optimum) * (1 + 1e-6)

    def loose(s, policy):  # claims exact, 1e-6 above what its worst input attains
        found = problem.certificate(s, policy)
        return found._replace(ratio=found.ratio * (1 + 1e-6))

    def too_high(s):
        found = problem.lower_bound(s)
        return found._replace(ratio=least * (1 + 1e-6), best_response=1 / (least * (1 + 1e-6)))

    with pytest.raises(checks.CheckFailed, match="payoffs in"):
        checks.payoffs_in_range(dataclasses.replace(problem, payoffs=generous), setting)
    with pytest.raises(checks.CheckFailed, match="its worst input has ratio"):
        checks.certificates_hold(dataclasses.replace(problem, certificate=loose), setting)
    with pytest.raises(checks.CheckFailed, match="below the lower bound"):
        checks.certificates_hold(dataclasses.replace(problem, lower_bound=too_high), setting)


def test_the_policy_file_check_catches_a_lax_or_wrong_reader():
    """A reader that drops a setting field it does not know, or reads a file back on another
    setting, fails the policy-file check: a file is read on the setting it names or not."""
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=4, rounds=10)
    checks.policy_file_round_trip(problem, setting)  # the shipped reader passes

    def lax(document):  # keeps the fields it knows, drops the rest unread
        known = {k: document["setting"][k] for k in ("problem", "buy", "rounds")}
        return problem.restore({**document, "setting": known})

    def elsewhere(document):
        return problem.setting(buy=5, rounds=10), problem.restore(document)[1]

    for reader in (lax, elsewhere):
        with pytest.raises(checks.CheckFailed):
            checks.policy_file_round_trip(dataclasses.replace(problem, restore=reader), setting)


#: A search far too small to find a hard input from random starts: no adversary networks, one
#: step of one candidate a chain, one random input, three members a family.
ONE_STEP = Budget(
    adversary_restarts=0,
    search_chains=16,
    search_candidates=1,
    search_steps=1,
    random_instances=1,
    family_members=3,
)


@pytest.mark.parametrize(
    ("name", "index"),
    # by default posted pricing (its own sources) and ski rental (the smallest problem on the
    # core's sources); the other problems with the whole runs
    [
        p
        if p.values[0] in ("posted-price", "ski-rental")
        else pytest.param(*p.values, id=p.id, marks=pytest.mark.end_to_end)
        for p in PARAMS
        if p.values[1] == 0
    ],
)
def test_evaluator_search_climbs_from_the_families_and_given_inputs(name, index):
    """The evaluator's local search starts chains at known hard inputs: the inputs it is given
    (a run's archive) and, for the core's default sources, the held-out families, one member
    of each in turn. A chain never ends worse than where it started, so the worst found is at
    least each such start's ratio, with a budget (one step of one candidate) far too small for
    chains from random inputs to get there."""
    problem, setting = _case(name, index)
    encoding = problem.encoding(setting)
    algorithm, make = next(
        (name, make)
        for name, make in problem.baselines.items()
        if getattr(make(setting), "deterministic", True)
    )
    policy = make(setting)
    budget = ONE_STEP
    with jax.enable_x64(True):
        candidates = encoding.random(jax.random.key(7), 64)
        scored = np.asarray(input_ratios(problem, setting, policy, candidates))
        given = candidates[int(np.argmax(scored))][None]  # the hardest of 64 random inputs
        starts = [given]
        if problem.sources is None:
            families = problem.families(setting) or {}
            starts += [jnp.asarray(tokens[:1]) for tokens in families.values()]
            hard = hard_starts(problem, setting, None, given, budget.search_chains // 2)
            for start in starts:  # the given input and a member of each family lead
                assert np.any(np.all(hard == np.asarray(start), axis=1))
        start_ratios = [float(input_ratios(problem, setting, policy, s)[0]) for s in starts]
    measured = measure(problem, setting, algorithm, policy, budget, starts=given)
    assert measured.sources["adversary"].ratio >= max(start_ratios) * (1 - 1e-9), algorithm


@pytest.mark.parametrize(
    "name", [name for name in registry.names() if registry.get(name).sources is None]
)
def test_the_families_source_is_the_worst_member_of_every_family(name):
    """The core's ``families`` source reports, for every baseline, the largest ratio of any
    member of any held-out family, names that family, and keeps the input that attains it
    (each family scored here on its own)."""
    problem, setting = _case(name, 0)
    families = problem.families_of(setting)
    with jax.enable_x64(True):
        for algorithm, make in problem.baselines.items():
            policy = make(setting)
            worst = {
                family: np.asarray(input_ratios(problem, setting, policy, jnp.asarray(tokens)))
                for family, tokens in families.items()
            }
            found = families_source(problem, setting, policy)
            chosen = found.worst_input["family"]
            assert found.ratio == max(float(r.max()) for r in worst.values()), algorithm
            assert found.ratio == float(worst[chosen].max()), algorithm
            tokens = jnp.asarray([found.worst_input["tokens"]])
            assert float(input_ratios(problem, setting, policy, tokens)[0]) == found.ratio


def test_the_cross_check_of_an_exact_certificate_starts_at_its_worst_input():
    """Against an exact certificate the search is a cross-check whose first chain starts at
    the certificate's worst input and never steps down, so even a search of one step of one
    candidate finds the certificate's figure again, for every ski rental rule."""
    problem = registry.get("ski-rental")
    setting = problem.setting(buy=10, rounds=30)
    budget = dataclasses.replace(ONE_STEP, search_chains=2)  # one from the worst, one random
    with jax.enable_x64(True):
        for algorithm, make in problem.baselines.items():
            measured = measure(problem, setting, algorithm, make(setting), budget)
            exact = measured.sources["exact"].ratio
            assert measured.sources["adversary"].ratio == pytest.approx(exact, rel=1e-12)


def test_the_fresh_networks_run_up_to_their_work_limit_and_are_skipped_past_it(monkeypatch):
    """The evaluator's fresh adversary networks write batch x T x vocabulary logits a step:
    with a limit of exactly what a budget writes over its steps and restarts they train (and
    the note says so); one logit less and they are skipped with a note naming the flag to
    lower, the search's figure standing alone."""
    from advonline import sources

    problem = registry.get("ski-rental")
    setting = problem.setting(buy=4, rounds=10)
    encoding = problem.encoding(setting)
    budget = dataclasses.replace(ONE_STEP, adversary_restarts=2, adversary_steps=3)
    written = 2 * 3 * budget.adversary_batch * encoding.length * encoding.vocabulary
    policy = problem.baselines["break-even"](setting)
    key = jax.random.key(0)
    for limit, networks in ((written, True), (written - 1, False)):
        monkeypatch.setattr(sources, "WRITER_WORK", limit)
        with jax.enable_x64(True):
            found = sources.adversary_source(problem, setting, policy, budget, key)
        assert ("fresh noise-conditioned adversary network" in found.note) == networks
        assert ("no adversary network" in found.note) != networks
        assert networks or "--adversary-steps" in found.note
        assert found.ratio >= 1


def test_the_search_runs_up_to_its_work_limit_and_is_skipped_past_it(monkeypatch):
    """The local search scores chains x candidates x steps inputs of T tokens: with a limit of
    exactly that it climbs; one token less and it is skipped with a note naming the flag to
    lower (with no networks either, the source has no figure)."""
    from advonline import sources

    problem = registry.get("one-way-trading")
    setting = problem.setting(rounds=8, levels=8)
    budget = dataclasses.replace(ONE_STEP, adversary_restarts=0, search_steps=3)
    searched = budget.search_chains * budget.search_candidates * 3 * setting.rounds
    policy = problem.baselines["threshold"](setting)
    for limit, climbs in ((searched, True), (searched - 1, False)):
        monkeypatch.setattr(sources, "SEARCH_WORK", limit)
        with jax.enable_x64(True):
            found = sources.adversary_source(problem, setting, policy, budget, jax.random.key(0))
        assert ("local search" in found.note and "no local search" not in found.note) == climbs
        assert climbs or ("--search-steps" in found.note and found.ratio is None)
        assert not climbs or found.ratio >= 1


def test_one_way_trading_ratios_match_closed_forms():
    from advonline.baselines.one_way_trading import optimal_ratio

    problem = registry.get("one-way-trading")
    setting = problem.setting(low=1.0, high=16.0, rounds=81, levels=81)  # sqrt(mM) = 4 on grid
    with jax.enable_x64(True):
        policies = {name: make(setting) for name, make in problem.baselines.items()}
        certified = {name: problem.certificate(setting, p).ratio for name, p in policies.items()}
    every_horizon = {name: exact.supremum(setting, p.fractions) for name, p in policies.items()}
    bound = problem.lower_bound(setting).ratio
    step = setting.rates[1] / setting.rates[0]
    # over every horizon: reservation ramps from the grid rate below 4 to 4, so a walk up to M
    # has converted all of it at their mean
    reservation = 16.0 / ((4.0 / step + 4.0) / 2)
    assert every_horizon["reservation"] == pytest.approx(reservation, rel=1e-12)
    assert every_horizon["all-at-once"] == pytest.approx(16.0, rel=1e-12)
    # r* is the least ratio over an unbounded horizon, so no curve's is below it; the best
    # curve on the grid comes within its LP's sampling of the LP's bound; threshold sampled on
    # the grid, linear between, loses less than the square of a grid step (on 81 and 1,025 rates)
    lp_bound = exact.optimal_curve(setting)[1]
    assert optimal_ratio(16.0) <= every_horizon["optimal"] <= every_horizon["threshold"]
    assert lp_bound <= every_horizon["optimal"] <= lp_bound * (1 + 1e-3)
    for fine in (setting, problem.setting(low=1.0, high=16.0, rounds=81, levels=1025)):
        rates = fine.rates
        threshold = exact.supremum(fine, problem.baselines["threshold"](fine).fractions)
        assert threshold <= optimal_ratio(16.0) * (1 + (rates[1] / rates[0] - 1) ** 2)
    # the certificate for the setting's 81 rounds is never above that, nor below the lower
    # bound on every online algorithm in 81 rounds
    for name, ratio in certified.items():
        assert bound < ratio <= every_horizon[name] * (1 + 1e-12), name


def test_one_way_trading_policy_file_needs_numpy_only(tmp_path):
    problem = registry.get("one-way-trading")
    setting = problem.setting(low=1.0, high=10.0, rounds=12, levels=9)
    policy = problem.baselines["threshold"](setting)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(problem.export(setting, policy)))
    rates = [1.0, 3.0, 2.0, 7.0, 10.0, 1.0]
    script = (
        "import sys, json; sys.modules['jax'] = None\n"
        "from advonline.problems.one_way_trading.policy_file import load\n"
        f"setting, curve = load(json.load(open({str(path)!r})))\n"
        f"print(json.dumps(curve.trade({rates}).tolist()))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = np.asarray(json.loads(out.stdout))
    with jax.enable_x64(True):
        simulated = problem.rollout(setting, policy, jnp.asarray(rates)).conversions
    np.testing.assert_allclose(loaded, np.asarray(simulated), atol=1e-6)
