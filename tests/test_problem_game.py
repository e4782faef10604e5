"""The oracle loop's game for problems of the interface (advonline/game.py): its payoffs
and update are the problem's, and without a certificate the kept network is measured on the
same inputs as the one it is compared with."""

from __future__ import annotations

import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import configs, sources
from advonline.game import Game
from advonline.oracle_loop import init_oracle_state, measure_epoch, snapshot_payoffs, train_epoch
from advonline.problem import payoffs_of
from advonline.ratio import ratios_of_payoffs

ADWORDS = """
[problem]
name = "adwords"

[setting]
advertisers = 4
queries = 16
max_bid = 0.25

[algorithm]
hidden = 8

[game]
epochs = 3

[oracle]
epoch_steps = 20
archive_size = 32
new_per_epoch = 4
worst_case_weight = 1.0
chains = 8
candidates = 1
search_steps = 8
"""


def _game(text: str) -> tuple[configs.RunConfig, Game]:
    config = configs.from_tables(tomllib.loads(text), "test")
    game = Game.build(config.problem, config.setting, _head(config), 0.01)
    return config, game


def _head(config: configs.RunConfig) -> dict:
    return dict(config.algorithm.head)


def test_payoffs_and_ascent_are_the_problems():
    config, game = _game(ADWORDS)
    assert game == Game.build(config.problem, config.setting, _head(config), 0.01)
    again = Game.build(config.problem, config.setting, _head(config), 0.01)
    assert hash(game) == hash(again)
    assert not game.certifies and not game.mixes
    params = game.init_params(jax.random.key(1))
    types = game.encoding.random(jax.random.key(2), 6)
    instances = game.encoding.decode(types)
    want = payoffs_of(config.problem, config.setting, game.policy(params), instances)
    optimum = jnp.asarray(game.optimum_of(np.asarray(types)))
    np.testing.assert_allclose(game.payoffs(params, types, optimum), want, rtol=1e-6)
    np.testing.assert_allclose(
        optimum, config.problem.offline_optimum(config.setting, instances), rtol=1e-6
    )
    weights = jnp.linspace(0.1, 0.6, 6)
    ascent = game.ascent(types, optimum, lambda payoff: weights)(params, jax.random.key(3))
    gradient = jax.grad(lambda p: jnp.sum(weights * game.payoffs(p, types, optimum)))(params)
    for got, expected in zip(jax.tree.leaves(ascent), jax.tree.leaves(gradient), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("probe_every", [1, 2])
def test_without_a_certificate_the_kept_network_is_measured_on_the_archive(probe_every):
    """After every probed measurement the kept network's measured worst case is at least its
    worst ratio on the archive as it now is (``oracle.rescore_best``, on for problems of the
    interface): a later network is never compared with a figure from easier inputs."""
    config, game = _game(
        ADWORDS.replace("search_steps = 8", f"search_steps = 8\nprobe_every = {probe_every}")
    )
    assert config.oracle.rescore_best
    state = init_oracle_state(game, config.oracle, jax.random.key(0))
    kept = []
    for epoch in range(4):
        state, record = measure_epoch(game, config.oracle, state, last=epoch == 3)
        archive = state.archive
        payoffs = snapshot_payoffs(game, state.best_algorithm, archive.types, archive.optimum)
        worst = np.where(np.asarray(archive.filled), ratios_of_payoffs(payoffs), 0.0).max()
        if record.probe_ratio is not None:
            assert worst <= record.guarantee * (1 + 1e-6)
            kept.append(record.guarantee)
        if epoch < 3:
            state = train_epoch(game, config.oracle, config.temperature, state)
    assert len(kept) >= 2


def test_adversary_networks_join_the_oracle_with_honest_ratios():
    """With ``oracle.restarts`` and an ``[adversary]`` table the oracle also trains fresh
    noise-conditioned writers: each step's worst input comes back with the ratio the problem
    gives it, beside the hill climbing's chains, which start as they do without them."""
    networks_budget = "search_steps = 8\nrestarts = 2\nadversary_steps = 6"
    text = ADWORDS.replace("search_steps = 8", networks_budget)
    config = configs.from_tables(tomllib.loads(text + "\n[adversary]\nhidden = 16\n"), "test")
    assert config.adversary is not None and config.adversary.hidden == 16
    game = config.build_game()
    params = game.init_params(jax.random.key(0))
    budget = config.oracle.budget()
    networks = game.network_responses(params, budget, jax.random.key(1))
    assert networks.types.shape == (2 * 6, game.instance_length)
    policy = game.policy(params)
    again = sources.input_ratios(config.problem, config.setting, policy, networks.types)
    np.testing.assert_allclose(np.asarray(networks.ratios), np.asarray(again), rtol=1e-5)
    found = game.best_responses(params, budget, jax.random.key(2), None)
    assert found.types.shape[0] == 2 * 6 + budget.chains
    again = sources.input_ratios(config.problem, config.setting, policy, found.types)
    np.testing.assert_allclose(np.asarray(found.ratios), np.asarray(again), rtol=1e-5)
