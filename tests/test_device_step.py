"""A training step never leaves the device: after warm-up, one K = 1 step and one K = 2 step
(OPT from the JAX dual LP) run under ``jax.transfer_guard("disallow")``; the K = 2 step with
the on-device optimum trains as the HiGHS step does."""

import tomllib

import jax
import numpy as np

from advonline import configs
from advonline.problems.posted_price.game import Game, known_family_pool
from advonline.problems.posted_price.sampled_game import on_device, sampled_game_step
from advonline.simultaneous import game_step, init_state
from tests.test_k2_run import TINY_K2
from tests.test_train import TINY_TOML


def _game(text: str, **game_keys) -> Game:
    data = tomllib.loads(text)
    data.setdefault("game", {}).update(game_keys)
    return Game.build(configs.from_dict(data))


def _two_steps_second_guarded(game: Game, step):
    state = init_state(game, jax.random.key(0))
    families, families_optimum = known_family_pool(game)
    state, _ = step(game, state, families, families_optimum)  # warm-up: compiles
    jax.block_until_ready(state)
    with jax.transfer_guard("disallow"):
        state, metrics = step(game, state, families, families_optimum)
        jax.block_until_ready((state, metrics))
    return state, metrics


def test_a_one_resource_step_stays_on_the_device():
    game = _game(TINY_TOML.format(steps=4))
    state, metrics = _two_steps_second_guarded(game, game_step)
    assert int(state.step) == 2 and np.isfinite(float(metrics.pool_ratio))


def test_a_two_resource_step_with_the_device_optimum_stays_on_the_device():
    game = _game(TINY_K2, optimum="device")
    assert on_device(game)
    state, metrics = _two_steps_second_guarded(game, sampled_game_step)
    assert int(state.step) == 2 and float(metrics.pool_ratio) >= 1.0


def test_the_device_optimum_trains_as_highs_does():
    """Same state, same keys: the two steps see the same batch; OPT differs by the dual LP's
    float32 error (at most 1e-4 relative, never above OPT), and so do the metrics."""
    results = {}
    for optimum in ("device", "highs"):
        game = _game(TINY_K2, optimum=optimum)
        state = init_state(game, jax.random.key(0))
        results[optimum] = sampled_game_step(game, state, *known_family_pool(game))
    (device_state, device_metrics), (highs_state, highs_metrics) = results.values()
    for name in ("payoff", "adversary_ratio", "pool_ratio"):
        device_value = float(getattr(device_metrics, name))
        highs_value = float(getattr(highs_metrics, name))
        np.testing.assert_allclose(device_value, highs_value, rtol=2e-4)
    # OPT from the dual LP is at most HiGHS's: payoffs E[ALG] / OPT at least as large
    assert float(device_metrics.payoff) >= float(highs_metrics.payoff) * (1 - 1e-6)
    for got, want in zip(
        jax.tree.leaves(device_state.algorithm), jax.tree.leaves(highs_state.algorithm), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
