"""The checks every built-in problem passes (docs/adding-a-problem.md): the checks of
``advonline check`` (advonline/checks.py: settings, encodings, payoffs in [0, 1], certificates
that no search beats, a lower bound below every certificate, policy files), then the simulator
against a brute-force NumPy loop and the offline optimum against HiGHS. Each problem brings a
small setting and its NumPy reference below; a built-in problem without one fails
:func:`test_every_built_in_problem_has_a_case`."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from allocation_lp import allocation_optimum
from scipy.optimize import linprog

from advonline import checks
from advonline import problems as registry
from advonline.evaluation import Budget, measure
from advonline.problem import payoffs_of
from advonline.problems.adwords import model as allocation
from advonline.problems.one_way_trading import exact
from advonline.problems.one_way_trading import model as trading
from advonline.problems.posted_price import model as posted
from advonline.problems.posted_price.optimum import lp_optimum
from advonline.sources import hard_starts, input_ratios


def _trading_loop(setting, policy, rates) -> float:
    """One-way trading by hand: convert up to the target, the rest at m in the end."""
    rates = np.asarray(rates)
    converted, earned = 0.0, 0.0
    for t, rate in enumerate(rates):
        observation = trading.Observation(
            jnp.asarray(rate), jnp.asarray(converted), jnp.asarray(t / len(rates))
        )
        amount = min(max(float(policy(observation)) - converted, 0.0), 1.0 - converted)
        converted += amount
        earned += rate * amount
    return earned + setting.low * (1.0 - converted)


def _selling_loop(setting, policy, instance) -> float:
    """Posted pricing by hand, deterministic prices: a buyer buys iff its value covers the
    posted bundle price; a divisible bundle takes what is left, scaled uniformly."""
    values, demands = np.asarray(instance.values), np.asarray(instance.demands)
    capacities = np.asarray(setting.capacities)
    used, welfare = np.zeros(setting.resources), 0.0
    for t in range(setting.rounds):
        observation = posted.Observation(
            jnp.asarray(used / capacities), jnp.asarray(t / setting.rounds)
        )
        prices = np.asarray(policy(observation).prices)[:, 0]
        if demands[t].sum() == 0 or values[t] < prices @ demands[t]:
            continue
        asked = demands[t] > 0
        share = min(1.0, np.min((capacities - used)[asked] / demands[t][asked]))
        used += share * demands[t]
        welfare += share * values[t]
    return welfare


def _allocation_loop(setting, policy, instance) -> float:
    """Budgeted allocation by hand: each query split by the rule's shares among its bidders,
    each advertiser's earnings capped by what is left of its budget of 1."""
    bids, bidders = np.asarray(instance.bids), np.asarray(instance.bidders)
    spent = np.zeros(setting.advertisers)
    policy = jax.jit(policy)  # the rule's own arithmetic; the loop around it is by hand
    for t in range(setting.queries):
        bidding = bidders[t]
        offered = np.where(bidding, bids[t], 0.0)
        observation = allocation.Observation(
            jnp.asarray(offered), jnp.asarray(spent), jnp.asarray(t / setting.queries)
        )
        shares = np.where(bidding, np.asarray(policy(observation)), 0.0)
        if setting.allocation == "integral":  # whole to the largest share, if any
            shares = np.eye(setting.advertisers)[np.argmax(shares)] * (shares.max() > 0)
        spent = spent + np.clip(offered * shares, 0.0, 1.0 - spent)
    return float(spent.sum())


def _allocation_optimum(setting, instance, whole: bool = False) -> float:
    """OPT by HiGHS (for integral allocation the settings here have an integral optimal
    vertex; ``whole`` solves the MILP)."""
    return allocation_optimum(instance.bids, instance.bidders, whole)


@pytest.mark.parametrize(
    "values",
    [
        {"advertisers": 6, "queries": 24, "max_bid": 0.3, "bid_levels": 3},
        {"advertisers": 5, "queries": 20, "max_bid": 0.25, "allocation": "integral"},
    ],
)
def test_allocation_optimum_matches_highs_on_a_thousand_random_instances(values):
    setting = allocation.Setting(**values)
    whole = setting.allocation == "integral"
    encoding = allocation.encoding(setting)
    with jax.enable_x64(True):
        instances = encoding.decode(encoding.random(jax.random.key(7), 1000))
        optima = np.asarray(allocation.offline_optimum(setting, instances))
    instances = jax.tree.map(np.asarray, instances)
    for i in range(1000):
        one = jax.tree.map(lambda leaf, i=i: leaf[i], instances)
        assert optima[i] == pytest.approx(_allocation_optimum(setting, one, whole), abs=1e-7)


def _renting_loop(setting, rule, season) -> float:
    """Ski rental by hand: each morning of the season, buy what the rule buys that day (at
    ``buy`` per pair) and rent for what is not owned."""
    owned, cost, before = np.asarray(rule.owned, np.float64), 0.0, 0.0
    for day in range(int(season)):
        cost += setting.buy * (owned[day] - before) + (1.0 - owned[day])
        before = owned[day]
    return cost


def _renting_optimum(setting, season) -> float:
    """OPT by trying every buying day and never buying, knowing the season."""
    season = int(season)
    return float(min([season] + [day - 1 + setting.buy for day in range(1, season + 1)]))


def _earned(rollout) -> float:
    """What one run earned or paid: one-way trading's revenue, posted pricing's welfare, ski
    rental's cost."""
    for field in ("welfare", "revenue"):
        if hasattr(rollout, field):
            return float(getattr(rollout, field))
    return float(rollout)


def _trading_optimum(setting, rates) -> float:
    """OPT by LP: convert x_t at p_t, the rest at m."""
    rates = np.asarray(rates)
    result = linprog(
        -(rates - setting.low), A_ub=np.ones((1, len(rates))), b_ub=[1.0], bounds=(0, 1)
    )
    return setting.low - result.fun


def _selling_optimum(setting, instance) -> float:
    return lp_optimum(
        np.asarray(instance.values), np.asarray(instance.demands), np.asarray(setting.capacities)
    )


CASES = {
    "adwords": [
        (
            {"advertisers": 4, "queries": 12, "max_bid": 0.25, "bid_levels": 3},
            _allocation_loop,
            _allocation_optimum,
        ),
        (
            {"advertisers": 3, "queries": 8, "max_bid": 0.5, "bid_levels": 1},
            _allocation_loop,
            _allocation_optimum,
        ),
        (
            {"advertisers": 4, "queries": 16, "max_bid": 0.25, "allocation": "integral"},
            _allocation_loop,
            _allocation_optimum,
        ),
        (  # two tokens per query; the optimum by proportional allocation
            {"advertisers": 20, "queries": 30, "max_bid": 0.2, "bid_levels": 2},
            _allocation_loop,
            _allocation_optimum,
        ),
    ],
    "one-way-trading": [
        ({"low": 1.0, "high": 10.0, "rounds": 12, "levels": 9}, _trading_loop, _trading_optimum),
        ({"low": 2.0, "high": 50.0, "rounds": 6, "levels": 11}, _trading_loop, _trading_optimum),
    ],
    "ski-rental": [
        ({"buy": 4, "rounds": 10}, _renting_loop, _renting_optimum),
        ({"buy": 7, "rounds": 5}, _renting_loop, _renting_optimum),
    ],
    "posted-price": [
        ({"rounds": 16, "max_demand": 0.125}, _selling_loop, _selling_optimum),
        (
            {"resources": 2, "rounds": 12, "max_demand": 0.25, "capacities": (1.0, 1.0)},
            _selling_loop,
            _selling_optimum,
        ),
    ],
}

PARAMS = [
    pytest.param(name, index, id=f"{name}-{index}")
    for name in registry.names()
    for index in range(len(CASES.get(name, [])))
]


def _case(name: str, index: int):
    problem = registry.get(name)
    values, loop, solver = CASES[name][index]
    return problem, problem.setting(**values), loop, solver


def test_every_built_in_problem_has_a_case():
    """Every problem this repository ships is checked here (an installed package's problem
    is its own package's to check)."""
    assert set(registry.BUILT_IN) <= set(CASES), "give every built-in problem a case here"


@pytest.mark.parametrize(("name", "index"), PARAMS)
def test_every_check_of_advonline_check_passes(name, index):
    """The checks ``advonline check`` runs (advonline/checks.py): the setting reads back,
    the encoding stays in its vocabulary, payoffs are in [0, 1], no search beats a
    certificate and the lower bound stays below each, a policy file round-trips."""
    problem, setting, _, _ = _case(name, index)
    failed = [r for r in checks.check_problem(problem, setting) if not r.passed]
    assert not failed, failed


@pytest.mark.parametrize(("name", "index"), PARAMS)
def test_simulator_and_optimum_match_brute_force(name, index):
    problem, setting, loop, solver = _case(name, index)
    with jax.enable_x64(True):
        encoding = problem.encoding(setting)
        instances = encoding.decode(encoding.random(jax.random.key(2), 6))
        optima = np.asarray(problem.offline_optimum(setting, instances))
        for algorithm, make in problem.baselines.items():
            policy = make(setting)
            if not getattr(policy, "deterministic", True):
                continue
            payoffs = np.asarray(payoffs_of(problem, setting, policy, instances))
            # the one simulator, an episode per instance (vmapped: one compiled program)
            episodes = jax.vmap(
                lambda one, key, policy=policy: problem.rollout(setting, policy, one, key)
            )(instances, jax.random.split(jax.random.key(5), 6))
            for i in range(6):
                one = jax.tree.map(lambda leaf, i=i: leaf[i], instances)
                earned = loop(setting, policy, one)
                simulated = _earned(jax.tree.map(lambda leaf, i=i: leaf[i], episodes))
                assert simulated == pytest.approx(earned, rel=1e-9, abs=1e-12), algorithm
                ratio = earned / optima[i] if problem.objective == "earn" else optima[i] / earned
                assert payoffs[i] == pytest.approx(ratio, rel=1e-9), algorithm
                assert optima[i] == pytest.approx(solver(setting, one), rel=1e-7)


@pytest.mark.parametrize(("name", "index"), [p for p in PARAMS if p.values[1] == 0])
def test_evaluator_search_climbs_from_the_families_and_given_inputs(name, index):
    """The evaluator's local search starts chains at known hard inputs: the inputs it is given
    (a run's archive) and, for the core's default sources, the held-out families, one member
    of each in turn. A chain never ends worse than where it started, so the worst found is at
    least each such start's ratio, with a budget (one step of one candidate) far too small for
    chains from random inputs to get there."""
    problem, setting, _, _ = _case(name, index)
    encoding = problem.encoding(setting)
    algorithm, make = next(
        (name, make)
        for name, make in problem.baselines.items()
        if getattr(make(setting), "deterministic", True)
    )
    policy = make(setting)
    budget = Budget(
        adversary_restarts=0,
        search_chains=16,
        search_candidates=1,
        search_steps=1,
        random_instances=1,
        family_members=3,
    )
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


def test_one_way_trading_ratios_match_closed_forms():
    from advonline.baselines.one_way_trading import optimal_ratio

    problem = registry.get("one-way-trading")
    setting = problem.setting(low=1.0, high=16.0, rounds=81, levels=81)  # sqrt(mM) = 4 on grid
    with jax.enable_x64(True):
        certified = {
            name: problem.certificate(setting, make(setting)).ratio
            for name, make in problem.baselines.items()
        }
    bound = problem.lower_bound(setting).ratio
    assert certified["reservation"] == pytest.approx(4.0, rel=1e-12)
    assert certified["all-at-once"] == pytest.approx(16.0, rel=1e-12)
    # the best curve on the grid for real rates, above every algorithm's bound by the grid
    assert certified["optimal"] == pytest.approx(exact.best_curve_ratio(setting), rel=1e-7)
    assert bound < certified["optimal"] <= certified["threshold"]
    # the threshold held between grid rates loses at most one grid step to r*
    step = setting.rates[1] / setting.rates[0]
    assert certified["threshold"] <= optimal_ratio(16.0) * step * (1 + 1e-9)


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
