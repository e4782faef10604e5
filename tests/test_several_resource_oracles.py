"""The oracle loop for several resources: the per-type sale table against the acceptance
rule, typed ratios against the simulator and HiGHS, local search against a baseline, and a
tiny K = 2 run whose archive scores equal a full recomputation."""

import csv

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import checkpoint, configs
from advonline.archive import instance_slots, snapshot_slots
from advonline.baselines.posted_price import make_baseline
from advonline.oracle_loop import payoff_matrix
from advonline.problems.posted_price.adversary import build_adversary
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import Buyer, Setting, mean_welfare
from advonline.problems.posted_price.optimum import batch_optimum
from advonline.problems.posted_price.oracles import local_search_oracle, random_types, typed_ratios
from advonline.problems.posted_price.product_grid import acceptance, grid_units, quantile_intervals
from advonline.problems.posted_price.typed_payoffs import algorithm_table, typed_payoffs
from advonline.train import train

TWO = Setting(resources=2, capacities=(1.0, 1.0), rounds=10, max_demand=0.5, demand_levels=2)


@pytest.fixture(scope="module")
def two_resources():
    model = build_adversary(TWO, AdversaryConfig(density_levels=8, conditioning="state"))
    game = configs.from_tables(_tiny_config(4)).build_game()
    params = game.head.module.init(jax.random.key(3), jnp.zeros(2), jnp.zeros(()))
    policy = game.policy(jax.tree.map(lambda leaf: 3 * leaf, params))  # sharper prices
    table = algorithm_table(TWO, policy, jnp.float32)
    return model, policy, table, model.type_sale_table(table, jnp.float32)


def test_the_sale_table_is_the_acceptance_rule_for_every_type(two_resources):
    model, _, table, sale = two_resources
    values, demands = model.type_buyers(jnp.float32)
    intervals = quantile_intervals(table)  # [T, S, I]
    for kind in range(0, model.types, 7):  # a spread of types, nobody included
        buyer = Buyer(value=values[kind], demand=demands[kind])
        expected = acceptance(intervals, buyer)  # [T, S]
        np.testing.assert_allclose(sale[..., kind], expected, atol=1e-6)
    assert sale.shape == (TWO.rounds, len(grid_units(TWO)), model.types)
    np.testing.assert_array_equal(sale[..., -1], 0.0)


def test_typed_ratios_agree_with_the_simulator_and_highs(two_resources):
    model, policy, _, sale = two_resources
    vocabulary = model.buyer_types
    types = random_types(vocabulary, jax.random.key(2), 6, TWO.rounds)
    instances = vocabulary.instances(types, jnp.float32)
    runs = 20_000
    welfare = mean_welfare(TWO, policy, instances, jax.random.key(3), runs, jnp.float32)
    optimum = batch_optimum(instances.values, instances.demands, np.ones(2), True)
    ratios = np.asarray(typed_ratios(TWO, vocabulary, sale, types, jnp.float32))
    # E[ALG] exact against the simulator's mean (a few percent of sampling error at most)
    np.testing.assert_allclose(optimum / ratios, np.asarray(welfare), rtol=0.03)
    assert np.all(np.isfinite(ratios)) and np.all(ratios >= 1 - 1e-5)


@pytest.mark.parametrize("resources", [1, 2])
def test_reading_the_sale_rows_in_the_loop_gives_the_gathered_payoffs_bit_for_bit(resources):
    """The searches read each round's sale row inside the induction; training gathers them
    first (for its gradient). Both must give the same float, so that a search scores exactly
    what training does."""
    setting = TWO if resources == 2 else Setting(rounds=12, max_demand=0.25, demand_levels=2)
    model = build_adversary(setting, AdversaryConfig(density_levels=8, conditioning="state"))
    vocabulary = model.buyer_types
    policy = make_baseline("exponential", setting)
    shape = model.type_sale_table(algorithm_table(setting, policy, jnp.float32), jnp.float32).shape
    # a sale table that changes with the round and the state (a baseline's does not with the
    # round), so that a row read from the wrong round shows
    sale = jax.random.uniform(jax.random.key(4), shape).at[..., -1].set(0.0)
    types = random_types(vocabulary, jax.random.key(5), 64, setting.rounds)
    types = types.at[:, ::3].set(vocabulary.nobody)  # rounds without a buyer too
    optimum = jnp.linspace(1.0, 2.0, 64)
    payoffs = [
        np.asarray(typed_payoffs(setting, vocabulary, sale, types, optimum, gathered))
        for gathered in (True, False)
    ]
    np.testing.assert_array_equal(payoffs[0], payoffs[1])
    assert np.all(payoffs[0] > 0)


@pytest.mark.slow  # 15 s of compiling; tests/test_oracles.py runs the same search for K = 1
def test_local_search_raises_a_weak_instance_against_the_exponential_baseline(two_resources):
    model, _, _, _ = two_resources
    vocabulary = model.buyer_types
    policy = make_baseline("exponential", TWO)
    sale = model.type_sale_table(algorithm_table(TWO, policy, jnp.float32), jnp.float32)
    weak = jnp.full((4, TWO.rounds), vocabulary.nobody - 1, jnp.int32)  # the top density
    start = float(typed_ratios(TWO, vocabulary, sale, weak[:1], jnp.float32)[0])
    found = local_search_oracle(TWO, vocabulary, sale, weak, 8, 30, jnp.float32, jax.random.key(1))
    assert float(found.ratios.max()) > 1.5 * start


TINY_TWO = {
    "setting": {
        "resources": 2,
        "capacities": [1.0, 1.0],
        "low": 1.0,
        "high": 10.0,
        "rounds": 10,
        "max_demand": 0.5,
        "demand_levels": 2,
    },
    "algorithm": {"price_atoms": 4, "hidden": 8, "layers": 1, "learning_rate": 0.01},
    "adversary": {"density_levels": 4, "hidden": 8, "conditioning": "state", "entropy": 1.0},
    "game": {"loop": "oracle", "epochs": 2, "seed": 2},
    "oracle": {
        "epoch_steps": 2,
        "archive_size": 16,
        "snapshots": 3,
        "new_per_epoch": 4,
        "restarts": 1,
        "adversary_steps": 2,
        "adversary_batch": 4,
        "chains": 4,
        "candidates": 4,
        "search_steps": 3,
    },
}


def _tiny_config(steps: int) -> dict:
    data = {table: dict(values) for table, values in TINY_TWO.items()}
    data["game"]["epochs"] = steps // data["oracle"]["epoch_steps"]
    return data


@pytest.mark.slow  # about 90 s on 2 CPU cores, most of it compiling
def test_a_two_resource_run_scores_its_archive_incrementally_and_never_rises(tmp_path):
    config = configs.from_tables(_tiny_config(4))
    folder = tmp_path / "run"
    train(config, folder)
    state, _, _ = checkpoint.load(folder)
    with (folder / "metrics.csv").open() as file:
        rows = list(csv.DictReader(file))
    guarantees = [float(row["guarantee"]) for row in rows]
    assert len(rows) == 3 and all(np.diff(guarantees) <= 0)
    assert all(row["upper_bound"] == "" for row in rows)  # no certificate for K >= 2
    # The payoff matrix kept up by rows and columns equals one computed afresh.
    archive = state.archive
    game = config.build_game()
    fresh = payoff_matrix(game, archive.snapshots, archive.types, archive.optimum)
    rows_used, columns = snapshot_slots(archive), instance_slots(archive)
    np.testing.assert_allclose(
        np.asarray(archive.payoffs)[np.ix_(rows_used, columns)],
        np.asarray(fresh)[np.ix_(rows_used, columns)],
        rtol=1e-6,
    )
    # the archive's OPT is HiGHS's exact optimum
    instances = game.adversary.instances(archive.types[columns], jnp.float32)
    exact = batch_optimum(instances.values, instances.demands, np.ones(2), True)
    np.testing.assert_allclose(np.asarray(archive.optimum)[columns], exact, rtol=1e-5)


def test_several_resources_need_state_conditioning_and_divisible_buyers():
    data = _tiny_config(4)
    data["adversary"]["conditioning"] = "noise"
    with pytest.raises(configs.ConfigError, match="conditioning"):
        configs.from_tables(data)
    data = _tiny_config(4)
    data["setting"]["divisible"] = False
    with pytest.raises(configs.ConfigError, match="divisible"):
        configs.from_tables(data)
