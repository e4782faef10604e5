"""Ski rental's own figures: the classic rules' ratios in closed form, the certificate against
every season run through the simulator, the lower bound against the best mixed rule solved
as the algorithm's LP, and the policy file's draws."""

from __future__ import annotations

import csv
import fractions
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linprog

from advonline.baselines.ski_rental import BASELINES, karlin_ratio
from advonline.problems.ski_rental import exact, model, policy, policy_file
from advonline.problems.ski_rental.exact import season_costs, season_optima
from advonline.problems.ski_rental.problem import PROBLEM
from advonline.sources import input_ratios

SETTINGS = [
    model.Setting(buy=b, rounds=t) for b, t in ((10, 30), (4, 10), (3, 3), (7, 5), (4, 7), (4, 6))
]


@pytest.mark.parametrize("buy", [2**40, 2**63 - 1])
def test_a_price_past_int32_is_simulated_and_bounded_as_a_number(buy):
    """A price of the skis past int32 (and up to int64's largest) is a number to the
    simulator in float32, as training runs it, and to the lower bound's costs in float64: the
    classic randomised rule pays about ``e / (e - 1)`` times renting on every short season,
    and no rule's expected cost wraps round to a negative one."""
    setting = model.Setting(buy=buy, rounds=6)
    rule = BASELINES["randomised"](setting)
    rule = rule.replace(owned=rule.owned.astype(jnp.float32))
    seasons = jnp.arange(1, setting.rounds + 1)
    with jax.enable_x64(False):
        paid = jax.vmap(lambda season: model.rollout(setting, rule, season))(seasons)
    expected = np.e / (np.e - 1) * np.arange(1, setting.rounds + 1)
    np.testing.assert_allclose(np.asarray(paid), expected, rtol=1e-3)
    bound = exact.lower_bound(setting)
    assert bound.ratio == 1.0  # no season reaches the price: renting is optimal online too
    assert np.all(exact.rule_costs(setting, np.eye(setting.rounds)[-1]) > 0)
    if buy == 2**63 - 1:  # one more is refused as the setting is read (a config refuses it first)
        with pytest.raises(ValueError, match=r"buy must be a whole number in \[1, 9223372036"):
            model.Setting.from_config({"buy": buy + 1, "rounds": 6})


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_certificate_is_the_worst_season_through_the_simulator(setting):
    seasons = jnp.arange(1, setting.rounds + 1)
    with jax.enable_x64(True):
        optimum = model.offline_optimum(setting, seasons)
        for name, make in BASELINES.items():
            rule = make(setting)
            payoffs = np.asarray(model.payoffs(setting, rule, seasons, optimum))
            found = exact.certificate(setting, rule)
            assert found.exact
            assert found.ratio == pytest.approx(1 / payoffs.min(), rel=1e-12), name
            assert payoffs[found.worst[0] - 1] == payoffs.min(), name


@pytest.mark.parametrize("setting", SETTINGS[:2], ids=str)
def test_the_jax_certificate_equals_the_host_one_and_has_a_gradient(setting):
    """The certificate that certificate descent follows is the certificate, with a finite
    gradient that is not zero for a rule that could do better."""
    rng = np.random.default_rng(5)
    rules = [make(setting).owned for make in BASELINES.values()]
    rules += [np.minimum(np.cumsum(rng.uniform(0, 0.2, setting.rounds)), 1.0) for _ in range(4)]
    with jax.enable_x64(True):
        for owned in rules:
            rule = model.BuyingRule(owned=jnp.asarray(owned, jnp.float64))

            def certified(values, rule=rule):
                return PROBLEM.differentiable_certificate(setting, rule.replace(owned=values))

            value, slope = jax.value_and_grad(certified)(rule.owned)
            host = exact.certificate(setting, rule).ratio
            assert float(value) == pytest.approx(host, rel=1e-12)
            assert np.all(np.isfinite(np.asarray(slope))) and np.any(np.asarray(slope) != 0)


@pytest.mark.end_to_end
def test_descent_epochs_lower_the_certificate_through_the_core_s_descent(tmp_path):
    """Ski rental descends its JAX certificate with the core's Adam steps: the guarantee
    falls below every epoch against the archive, and the delivered rule is certified at it."""
    from advonline import checkpoint, configs
    from advonline.train import train

    path = tmp_path / "ski.toml"
    path.write_text(SKI_DESCENT)
    config = configs.load(path)
    train(config, tmp_path / "run")
    with (tmp_path / "run" / "metrics.csv").open() as handle:
        guarantee = [float(row["guarantee"]) for row in csv.DictReader(handle)]
    assert guarantee[-1] < guarantee[-3] * (1 - 1e-3)
    state, _, _ = checkpoint.load(tmp_path / "run")
    delivered = exact.certificate(config.setting, config.build_game().policy(state.best_algorithm))
    assert delivered.ratio == pytest.approx(guarantee[-1], rel=1e-6)


SKI_DESCENT = """
[problem]
name = "ski-rental"

[setting]
buy = 10
rounds = 30

[game]
seed = 0
epochs = 5

[oracle]
epoch_steps = 30
chains = 8
candidates = 1
search_steps = 8
probe_every = 0
certificate_instances = 1
descent_epochs = 2
descent_learning_rate = 0.03
"""


@pytest.mark.parametrize("setting", SETTINGS[:2], ids=str)
def test_classic_rules_have_their_known_ratios(setting):
    with jax.enable_x64(True):  # the rules in float64, as the evaluator makes them
        rules = {name: make(setting) for name, make in BASELINES.items()}
    ratios = {name: exact.certificate(setting, rule).ratio for name, rule in rules.items()}
    buy = setting.buy
    assert ratios["break-even"] == pytest.approx(2 - 1 / buy, rel=1e-12)
    assert ratios["randomised"] == pytest.approx(karlin_ratio(buy), rel=1e-12)
    assert ratios["never"] == pytest.approx(setting.rounds / buy, rel=1e-12)
    assert ratios["buy-at-once"] == pytest.approx(buy, rel=1e-12)


@pytest.mark.parametrize("buy", [1, 2, 10, 1000, 10**12, 10**18])
def test_the_randomised_rule_is_its_buying_chances_summed_over_the_season(buy):
    """Its chance of owning the skis by day ``d`` is the sum of its chances of buying on days
    1 .. d, ``(1 - 1/B)^(B - d) / (B (1 - (1 - 1/B)^B))`` (here in exact rationals for small
    ``B``); for a huge ``B`` the rule is built from the season's days alone and its exact
    ratio is still ``karlin_ratio(B)`` (OPT rents: the skis never pay off)."""
    setting = model.Setting(buy=buy, rounds=12)
    with jax.enable_x64(True):
        owned = np.asarray(BASELINES["randomised"](setting).owned)
        if buy <= 1000:
            q = fractions.Fraction(buy - 1, buy)
            chance = [q ** (buy - d) / (buy * (1 - q**buy)) for d in range(1, buy + 1)]
            summed = [min(sum(chance[:d]), 1) for d in range(1, setting.rounds + 1)]
            np.testing.assert_allclose(owned, [float(x) for x in summed], rtol=1e-13, atol=1e-15)
        else:
            ratio = exact.certificate(setting, model.BuyingRule(owned=jnp.asarray(owned))).ratio
            assert ratio == pytest.approx(karlin_ratio(buy), rel=1e-12)


@pytest.mark.parametrize("buy", [39, 40, 10**12])
def test_the_simulator_and_the_bounds_agree_whatever_the_price(buy):
    """Seasons are int32 tokens and OPT compares them with ``buy``: past 2^31 every season
    still gets its OPT, so the simulator's ratio of every classic rule on every season is its
    certificate's; and where no season outlasts the price (``buy >= rounds``) renting is
    optimal online too, so the lower bound is 1 (above 1 for a price one day shorter, and at
    most the ``T / B`` of never buying)."""
    setting = model.Setting(buy=buy, rounds=40)
    seasons = model.every_season(setting)
    with jax.enable_x64(True):
        for make in BASELINES.values():
            rule = make(setting)
            by_season = season_costs(setting, rule.owned)[1:] / season_optima(setting)[1:]
            simulated = input_ratios(PROBLEM, setting, rule, seasons)
            np.testing.assert_allclose(simulated, by_season, rtol=1e-12)
    bound = exact.lower_bound(setting).ratio
    assert bound == 1.0 if buy >= setting.rounds else 1.0 < bound <= 40 / 39


def _deterministic_costs(setting) -> np.ndarray:
    """``[T + 1 rules, T seasons]``: the simulator's cost of buying on the morning of day
    ``d`` (row ``d - 1``; the last row never buys) on every season of 1 .. T days, a dense
    table built apart from the lower bound's running sums."""
    days = setting.rounds
    owned = np.concatenate([np.triu(np.ones((days, days))), np.zeros((1, days))])
    return np.stack([season_costs(setting, row)[1:] for row in owned])


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_the_running_sums_are_the_rules_expected_costs(setting):
    distribution = np.random.default_rng(setting.rounds).dirichlet(np.ones(setting.rounds))
    expected = _deterministic_costs(setting) @ distribution
    np.testing.assert_allclose(exact.rule_costs(setting, distribution), expected, rtol=1e-13)


def _best_mixed_rule(setting) -> float:
    """The algorithm's LP: the distribution over buying days (and never) with the smallest
    worst ratio over every season, solved on its own (the lower bound solves the dual)."""
    costs = _deterministic_costs(setting)  # [rules, seasons]
    optima = exact.season_optima(setting)[1:]
    rules = costs.shape[0]
    # variables: p (rules), r; minimise r s.t. p @ costs <= r optima, sum p = 1
    upper = np.concatenate([costs.T, -optima[:, None]], axis=1)
    equal = np.concatenate([np.ones(rules), [0.0]])[None, :]
    solved = linprog(
        np.concatenate([np.zeros(rules), [1.0]]),
        A_ub=upper,
        b_ub=np.zeros(optima.size),
        A_eq=equal,
        b_eq=[1.0],
        bounds=[(0, None)] * rules + [(None, None)],
        method="highs",
    )
    return float(solved.fun)


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_lower_bound_is_the_best_mixed_rule_and_karlin_s_where_seasons_are_long(setting):
    bound = exact.lower_bound(setting)
    assert bound.ratio == pytest.approx(_best_mixed_rule(setting), rel=1e-9)
    assert bound.ratio == pytest.approx(1 / bound.best_response, rel=1e-15)
    assert bound.distribution.sum() == pytest.approx(1.0, rel=1e-12)
    reference = PROBLEM.reference(setting)
    if setting.rounds >= 2 * setting.buy - 1:
        assert bound.ratio == pytest.approx(reference[1], rel=1e-9)
        return
    assert reference is None  # shorter seasons: a rule can do better than Karlin's
    assert bound.ratio < karlin_ratio(setting.buy) - 1e-3
    if setting.rounds <= setting.buy:  # buying never pays: renting is optimal
        assert bound.ratio == pytest.approx(1.0, rel=1e-12)


def test_policy_file_draws_buying_days_with_the_rule_s_chances(tmp_path):
    setting = model.Setting(buy=4, rounds=10)
    rule = BASELINES["randomised"](setting)
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy.export(setting, rule)))
    described, loaded = policy_file.load(json.loads(path.read_text()))
    assert described == setting.describe()
    rng = np.random.default_rng(3)
    days = [loaded.buying_day(rng) for _ in range(20000)]
    drawn = np.asarray([np.mean([d is not None and d <= t for d in days]) for t in range(1, 11)])
    np.testing.assert_allclose(drawn, np.asarray(rule.owned), atol=0.015)
    assert loaded.buying_day(np.random.default_rng(0)) is not None  # it always buys by day 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "x"}, "not a ski rental policy file"),
        ({"owned": [0.5, 0.2, 1.0, 1.0]}, "never decrease"),
        ({"owned": [0.5, 1.0]}, "need 4 values"),
        ({"setting": {"problem": "ski-rental", "buy": 0, "rounds": 4}}, "setting.buy"),
    ],
)
def test_a_bad_policy_file_is_refused_in_one_line(change, message):
    setting = model.Setting(buy=2, rounds=4)
    document = {**policy.export(setting, BASELINES["break-even"](setting)), **change}
    with pytest.raises(policy_file.PolicyFileError, match=message):
        policy.restore(document)
