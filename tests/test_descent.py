"""Certificate descent: its gradient against finite differences of the exact certificate, and a
short descent that lowers the certificate of what it delivers."""

import functools
import json

import jax
import numpy as np
import pytest

from advonline.problems.posted_price.certify import (
    certificate_gradient,
    certify_dp,
    strategy_gradient,
    worst_strategy,
)
from advonline.problems.posted_price.descent import (
    DescentConfig,
    TableOf,
    descend,
    descend_params,
    initial_params,
    policy_document,
    price_table,
    table_policy,
)
from advonline.problems.posted_price.model import Setting, SettingError
from advonline.problems.posted_price.policy_file import parse
from advonline.problems.posted_price.tabulated import from_file

# compiled as a run compiles (conftest.optimised_compilation)
pytestmark = pytest.mark.usefixtures("optimised_compilation")


SETTING = Setting(resources=1, low=1.0, high=4.0, rounds=8, max_demand=0.25, divisible=True)


def _certificate(config: DescentConfig, params) -> float:
    with jax.enable_x64(True):
        table = price_table(SETTING, config, params)
    return certify_dp(SETTING, table_policy(SETTING, config, table)).ratio


@pytest.mark.parametrize("policy", ["randomised", "deterministic"])
def test_the_gradient_is_the_certificates_slope(policy):
    """Along random directions the envelope gradient matches the certificate's central
    difference (where one adversary strategy is the unique worst, the certificate is smooth)."""
    config = DescentConfig(policy=policy, atoms=4, round_seen=True)
    shape = initial_params(SETTING, config, jax.random.key(3)).shape  # shared row, residuals
    params = 0.5 * np.random.default_rng(2).normal(size=shape)  # a generic point: no ties
    ratio = _certificate(config, params)
    table_of = functools.partial(price_table, SETTING, config)
    slope = np.asarray(certificate_gradient(SETTING, table_of, params, ratio))
    assert np.abs(slope).max() > 0
    point = np.asarray(params)
    for direction in np.random.default_rng(0).normal(size=(3, *point.shape)):
        step = 1e-6
        up = _certificate(config, point + step * direction)
        down = _certificate(config, point - step * direction)
        difference = (up - down) / (2 * step)
        predicted = float(np.sum(slope * direction))
        assert difference == pytest.approx(predicted, rel=1e-3, abs=1e-6)


@pytest.mark.parametrize("policy", ["randomised", "deterministic"])
def test_a_short_descent_delivers_its_lowest_certificate(policy):
    config = DescentConfig(policy=policy, atoms=4, steps=30, learning_rate=0.1)
    found = descend(SETTING, config, jax.random.key(0))
    assert len(found.history) == 30
    assert found.certificate.ratio == pytest.approx(min(found.history), rel=1e-9)
    assert found.certificate.ratio < 0.9 * found.history[0]
    assert found.certificate.ratio == pytest.approx(certify_dp(SETTING, found.policy).ratio)
    assert found.policy.deterministic == (policy == "deterministic")
    # as a policy file: the same setting, and the certificate up to the 9 digits it keeps
    document = policy_document(SETTING, config, found.policy, found.certificate, {})
    setting, loaded = from_file(parse(json.loads(json.dumps(document))))
    assert setting == SETTING and document["provenance"]["algorithm"] == f"descent-{policy}"
    assert certify_dp(setting, loaded).ratio == pytest.approx(found.certificate.ratio, rel=1e-7)
    if policy == "deterministic":
        curve = np.asarray(found.policy.table.prices[0, :, 0])
        assert curve[0] == SETTING.low
        assert np.all(np.diff(curve) >= 0)
        assert np.all((curve >= SETTING.low) & (curve <= SETTING.high))
        assert "exact" in found.certificate.note


@pytest.mark.parametrize("policy", ["randomised", "deterministic"])
def test_the_worst_strategy_s_gradient_is_the_certificate_s(policy):
    """The worst adversary strategy, held fixed, attains the certificate, and the gradient of
    its ratio is the certificate's gradient through the whole induction (the envelope
    theorem), at a generic point; indivisible buyers of two sizes move ALG and OPT by more
    than one unit."""
    setting = Setting(
        resources=1, low=1.0, high=4.0, rounds=8, max_demand=0.5, demand_levels=2, divisible=False
    )
    config = DescentConfig(policy=policy, atoms=4, round_seen=True)
    shape = initial_params(setting, config, jax.random.key(3)).shape
    params = 0.5 * np.random.default_rng(1).normal(size=shape)
    table_of = TableOf(setting, config)
    with jax.enable_x64(True):
        certified = certify_dp(setting, table_policy(setting, config, table_of(params))).ratio
        ratio, bound, strategy = worst_strategy(setting, table_of(params), 1.0)
        attained, slope = strategy_gradient(setting, table_of, params, strategy)
        whole = certificate_gradient(setting, table_of, params, certified)
    assert setting.demand_levels == 2
    assert bound == pytest.approx(certified, rel=1e-12) and ratio == bound
    assert float(attained) == pytest.approx(certified, rel=1e-9)
    assert np.abs(np.asarray(slope)).max() > 0
    np.testing.assert_allclose(np.asarray(slope), np.asarray(whole), rtol=1e-4, atol=1e-7)


def test_descending_any_parameters_lowers_the_certificate_of_what_it_returns():
    """``descend_params`` (the oracle loop's descent epochs) on a table's parameters: what it
    returns is certified at the ratio it reports (up to the settled tolerance), below the
    start, and a step it could not improve returns the start itself."""
    config = DescentConfig(policy="randomised", atoms=4, round_seen=False)
    params = initial_params(SETTING, config, jax.random.key(1))
    table_of = TableOf(SETTING, config)
    start = _certificate(config, params)
    found = descend_params(SETTING, table_of, params, start, steps=25, learning_rate=0.1)
    assert len(found.history) == 25
    assert found.certificate == pytest.approx(min(found.history), rel=1e-12)
    assert found.certificate < 0.95 * start
    assert _certificate(config, found.params) == pytest.approx(found.certificate, rel=1e-6)
    same = descend_params(SETTING, table_of, params, 1.0, steps=1, learning_rate=0.1)
    np.testing.assert_array_equal(np.asarray(same.params), np.asarray(params))


def test_a_seen_round_starts_from_the_shared_row():
    """With the round seen, the parameters are the shared row and one zero residual per
    round, so training starts from the table the round-hidden class would start from."""
    seen, hidden = (DescentConfig(atoms=4, round_seen=flag) for flag in (True, False))
    params = initial_params(SETTING, seen, jax.random.key(1))
    assert params.shape == (1 + SETTING.rounds, SETTING.grid_size + 1, 4)
    np.testing.assert_array_equal(params[0], initial_params(SETTING, hidden, jax.random.key(1))[0])
    with jax.enable_x64(True):
        moved = price_table(SETTING, seen, params.at[3, :, 0].add(1.0))  # round 2, atom 0
    assert not np.allclose(moved.probs[2], moved.probs[1])
    np.testing.assert_array_equal(moved.probs[1], moved.probs[-1])


def test_a_hidden_round_posts_the_same_table_every_round():
    config = DescentConfig(policy="randomised", atoms=4)
    params = initial_params(SETTING, config, jax.random.key(1))
    assert params.shape == (1, SETTING.grid_size + 1, 4)
    with jax.enable_x64(True):
        table = price_table(SETTING, config, params)
    assert table.probs.shape == (SETTING.rounds, SETTING.grid_size + 1, 4)
    np.testing.assert_array_equal(table.probs[0], table.probs[-1])
    np.testing.assert_allclose(np.asarray(table.probs).sum(-1), 1.0, rtol=1e-12)


def test_bad_descent_configs_and_several_resources_are_refused():
    with pytest.raises(SettingError, match="policy must be one of"):
        DescentConfig(policy="greedy")
    with pytest.raises(SettingError, match="atoms must be"):
        DescentConfig(atoms=1)
    two = Setting(resources=2, low=1.0, high=4.0, rounds=4, max_demand=0.25, capacities=(1.0, 1.0))
    with pytest.raises(SettingError, match="one resource"):
        descend(two, DescentConfig(), jax.random.key(0))
