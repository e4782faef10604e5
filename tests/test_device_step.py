"""A training step never leaves the device: after warm-up, one K = 1 step and one K = 2 step
(OPT from the JAX dual LP) run under ``jax.transfer_guard("disallow")``."""

import tomllib

import jax
import numpy as np

from advonline import configs
from advonline.problems.posted_price.sampled_game import sampled_game_step
from advonline.simultaneous import game_step, init_state
from tests.test_k2_run import TINY_K2
from tests.test_train import TINY_TOML


def _game(text: str):
    return configs.from_tables(tomllib.loads(text)).build_game()


def _two_steps_second_guarded(game, step):
    state = init_state(game, jax.random.key(0))
    state, _ = step(game, state)  # warm-up: compiles
    jax.block_until_ready(state)
    with jax.transfer_guard("disallow"):
        state, metrics = step(game, state)
        jax.block_until_ready((state, metrics))
    return state, metrics


def test_a_one_resource_step_stays_on_the_device():
    game = _game(TINY_TOML.format(epochs=4))
    state, metrics = _two_steps_second_guarded(game, game_step)
    assert int(state.step) == 2 and np.isfinite(float(metrics.pool_ratio))


def test_a_two_resource_step_with_the_device_optimum_stays_on_the_device():
    game = _game(TINY_K2)
    state, metrics = _two_steps_second_guarded(game, sampled_game_step)
    assert int(state.step) == 2 and float(metrics.pool_ratio) >= 1.0
