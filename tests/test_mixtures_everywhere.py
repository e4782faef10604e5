"""Mixtures of snapshots for every problem (advonline/mixture.py): a mixture drawn once per
input is measured through its members' exact payoffs, combined as the problem's objective
says; a run of a problem without a certificate probes its equilibrium mixture and can deliver
it; and its policy file reads back as the same mixture."""

from __future__ import annotations

import json
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import configs, export, mixture, oracle_loop, pipeline
from advonline.errors import InputError
from advonline.evaluation import Budget, measure
from advonline.mixture import SnapshotMixture, mixed_payoffs
from advonline.problem import payoffs_of
from advonline.ratio import ratios_of_payoffs

ADWORDS = """
[problem]
name = "adwords"

[setting]
advertisers = 4
queries = 12
max_bid = 0.25

[algorithm]
hidden = 8

[game]
epochs = 4

[oracle]
epoch_steps = 10
archive_size = 32
snapshots = 4
new_per_epoch = 4
worst_case_weight = 1.0
chains = 8
candidates = 2
search_steps = 6
probe_every = 1
mixtures = true
"""

SKI = """
[problem]
name = "ski-rental"

[algorithm]
hidden = 8
"""


def _config(text: str) -> configs.RunConfig:
    return configs.from_tables(tomllib.loads(text), "test")


def _members(game, count: int, seed: int = 0):
    """``count`` fresh networks' parameters, stacked."""
    keys = jax.random.split(jax.random.key(seed), count)
    each = [game.init_params(key) for key in keys]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *each)


def test_mixed_payoffs_are_linear_in_the_earnings_or_in_the_costs():
    """Earning, the payoff ``E[ALG] / OPT`` is linear in the draw; paying, the ratio
    ``E[cost] / OPT`` is, so the payoff is the weighted harmonic mean; a member of positive
    weight with payoff 0 (an unbounded cost) makes the mixture's payoff 0."""
    payoffs = np.array([[0.5, 1.0, 0.25], [1.0, 0.5, 0.0]])
    weights = np.array([0.25, 0.75])
    np.testing.assert_allclose(mixed_payoffs(payoffs, weights, "earn"), [0.875, 0.625, 0.0625])
    paid = mixed_payoffs(payoffs, weights, "pay")
    np.testing.assert_allclose(1 / paid[:2], [0.25 * 2 + 0.75 * 1, 0.25 * 1 + 0.75 * 2])
    assert paid[2] == 0.0
    ignored = mixed_payoffs(payoffs, np.array([1.0, 0.0]), "pay")  # weight 0: not drawn
    np.testing.assert_allclose(ignored, payoffs[0])
    traced = jax.jit(lambda p, w: mixed_payoffs(p, w, "pay"))(jnp.asarray(payoffs), weights)
    np.testing.assert_allclose(np.asarray(traced), paid, rtol=1e-6)


@pytest.mark.parametrize("text", [ADWORDS, SKI], ids=["earns", "pays"])
def test_a_mixture_measures_as_its_members_drawn_once_per_input(text):
    """On every input a mixture's ratio is the weighted mean of its members' ratios of
    ``E[ALG]`` (a problem that earns: weights on ``E[ALG] / OPT``) or of ``E[cost]`` (one
    that pays: weights on ``E[cost] / OPT``), each member's from the problem's own payoffs."""
    config = _config(text)
    problem, setting, game = config.problem, config.setting, config.build_game()
    weights = jnp.array([0.2, 0.5, 0.3], jnp.float32)
    mixed = game.mixture(_members(game, 3), weights)
    tokens = game.encoding.random(jax.random.key(4), 16)
    instances = game.encoding.decode(tokens)
    got = ratios_of_payoffs(payoffs_of(problem, setting, mixed, instances))
    each = np.stack(
        [
            ratios_of_payoffs(payoffs_of(problem, setting, mixed.member(m), instances))
            for m in range(3)
        ]
    )
    if problem.objective == "earn":
        want = 1 / (np.asarray(weights, np.float64) @ (1 / each))
    else:
        want = np.asarray(weights, np.float64) @ each
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert problem.certificate_of(setting, mixed) is None  # no certificate of a mixture here


@pytest.mark.end_to_end
def test_a_problem_without_a_certificate_probes_its_mixture_of_snapshots():
    """With ``oracle.mixtures`` an AdWords run probes the equilibrium mixture once it has two
    snapshots. The probe's search scores its finds by the mixture's exact ratio (recomputed
    here from the members' networks), and its figure is at least the mixture's worst ratio on
    the archive; the kept guarantee is never above a mixture's measured figure, and never
    below the kept policy's (network or mixture) worst ratio on the archive
    (``oracle.rescore_best``)."""
    config = _config(ADWORDS)
    game = config.build_game()
    assert game.mixes and not game.certifies
    state = oracle_loop.init_oracle_state(game, config.oracle, jax.random.key(0))
    probed = 0
    for epoch in range(config.game.epochs):
        last = epoch == config.game.epochs - 1
        state, record = oracle_loop.measure_epoch(game, config.oracle, state, last)
        if record.mixture_ratio is not None:
            probed += 1
            assert record.guarantee <= record.mixture_ratio * (1 + 1e-6)
        if record.probe_ratio is not None:  # the kept policy, measured on the whole archive
            kept = oracle_loop.kept_ratios(game, state)[np.asarray(state.archive.filled)]
            assert kept.max() <= record.guarantee * (1 + 1e-5)
        if not last:
            state = oracle_loop.train_epoch(game, config.oracle, config.temperature, state)
    assert probed and oracle_loop.probes_mixture(game, state)
    budget = config.oracle.budget()
    figure, found = oracle_loop._mixture_probe(
        game, state, budget, jax.random.key(9), oracle_loop.MemberTables()
    )
    weights = np.asarray(state.algorithm_mixture)
    slots = np.flatnonzero(weights > 0)
    members = jax.tree.map(lambda stack: jnp.asarray(stack)[slots], state.archive.snapshots)
    mixed = game.mixture(members, weights[slots])
    archive = state.archive
    filled = np.flatnonzero(np.asarray(archive.filled))
    on_archive = ratios_of_payoffs(
        payoffs_of(config.problem, config.setting, mixed, game.encoding.decode(archive.types))
    )
    assert figure >= on_archive[filled].max() * (1 - 1e-5)
    again = ratios_of_payoffs(
        payoffs_of(config.problem, config.setting, mixed, game.encoding.decode(found.types))
    )
    np.testing.assert_allclose(np.asarray(found.ratios), again, rtol=1e-5)
    assert figure >= again.max() * (1 - 1e-5)


@pytest.mark.end_to_end
def test_a_delivered_mixture_exports_reads_back_and_measures_the_same():
    """A run that keeps a mixture delivers it as ``learned``; its policy file (each member
    the problem's own file, with its weight) reads back as the same mixture, which the
    evaluator's default sources measure to the same figures as the run's."""
    config = _config(ADWORDS)
    game = config.build_game()
    state = oracle_loop.init_oracle_state(game, config.oracle, jax.random.key(0))
    members = _members(game, config.oracle.snapshots, seed=3)
    weights = jnp.array([0.5, 0.0, 0.25, 0.25], jnp.float32)
    state = oracle_loop.keep_best(state, None, (members, weights), 1.5)
    delivered = pipeline.delivered_policies(game, state)
    assert set(delivered) == {"learned"} and isinstance(delivered["learned"], SnapshotMixture)
    policy = delivered["learned"]
    assert policy.size == 3
    document = game.mixture_document(policy, {"algorithm": "learned"})
    document = json.loads(json.dumps(document))
    assert document["kind"] == export.MIXTURE_KIND
    setting, restored = export.restore(config.problem, document)
    assert setting == config.setting
    tokens = game.encoding.random(jax.random.key(5), 32)
    instances = game.encoding.decode(tokens)
    before = payoffs_of(config.problem, setting, policy, instances)
    after = payoffs_of(config.problem, setting, restored, instances)
    np.testing.assert_allclose(after, before, rtol=1e-6)
    budget = Budget(
        random_instances=16,
        adversary_restarts=0,
        search_chains=4,
        search_candidates=2,
        search_steps=4,
    )
    first = measure(config.problem, setting, "learned", policy, budget)
    second = measure(config.problem, setting, "learned", restored, budget)
    assert first.competitive_ratio >= 1.0
    np.testing.assert_allclose(second.competitive_ratio, first.competitive_ratio, rtol=1e-6)
    families = first.sources["families"].ratio
    tokens = np.concatenate(list(config.problem.families_of(setting).values()))
    with jax.enable_x64(True):  # as the evaluator measures
        members = game.encoding.decode(jnp.asarray(tokens))
        optimum = config.problem.offline_optimum(setting, members)
        by_hand = ratios_of_payoffs(
            mixture.payoffs(config.problem, setting, policy, members, optimum)
        ).max()
    np.testing.assert_allclose(families, by_hand, rtol=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["members"][0].update(weight=0.9), "sum to"),
        (lambda d: d["members"][0].update(weight=-0.5), r"in \(0, 1\]"),
        (lambda d: d["members"][0].update(weight=10**400), r"in \(0, 1\]"),
        (lambda d: d["members"][0].update(weight=float("nan")), r"in \(0, 1\]"),
        (lambda d: d.update(members=[]), "non-empty list"),
        (lambda d: d["members"][0].pop("policy"), "a weight and a policy"),
        (lambda d: d["setting"].update(queries=13), "not its members'"),
    ],
)
def test_a_mixture_file_that_makes_no_sense_is_refused_in_one_line(change, message):
    config = _config(ADWORDS)
    game = config.build_game()
    policy = game.mixture(_members(game, 2), jnp.array([0.5, 0.5]))
    document = json.loads(json.dumps(game.mixture_document(policy, {"algorithm": "learned"})))
    change(document)
    with pytest.raises(InputError, match=message) as refused:
        export.restore(config.problem, document)
    assert "\n" not in str(refused.value)


def test_mixtures_are_a_key_of_every_problem_and_round_trip():
    """``oracle.mixtures`` (and the closing rounds) are read for a problem of the core's game,
    off by default there, and a config with them reads back equal from its tables."""
    plain = _config(ADWORDS.replace("mixtures = true\n", ""))
    assert not plain.oracle.mixtures and not plain.build_game().mixes
    config = _config(ADWORDS.replace("mixtures = true", "mixtures = true\nclosing_rounds = 2"))
    assert config.oracle.mixtures and config.oracle.closing_rounds == 2
    assert configs.from_tables(config.to_tables(), "again") == config
