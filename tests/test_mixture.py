"""A mixture of pricing networks chosen once per input: the simulator draws one member per
episode, its exact payoff is the weighted sum of its members', local search scores it so,
and its policy file reads back to the same mixture."""

import copy
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advonline import checkpoint, cli, configs, export, meta, oracle_loop, preflight
from advonline.archive import add_instances, add_snapshot, empty_archive, restricted_game
from advonline.archive_view import archive_rows
from advonline.configs import OracleBudget
from advonline.evaluation import Budget, measure
from advonline.mixture import snapshot_mixture
from advonline.oracle_loop import delivered_mixture, init_oracle_state, keep_best
from advonline.pipeline import TrainedRun, delivered_policies, export_run
from advonline.plots import read_metrics
from advonline.problems.posted_price import memory, policy_writer
from advonline.problems.posted_price import training as game_module
from advonline.problems.posted_price.adversary import build_adversary
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import Instance, rollout, simulate
from advonline.problems.posted_price.optimum import device_optimum, offline_optimum
from advonline.problems.posted_price.oracles import (
    local_search_oracle,
    mixture_search,
    random_types,
    typed_ratios,
)
from advonline.problems.posted_price.policy_file import MixturePolicy, PolicyFileError, parse
from advonline.problems.posted_price.problem import PROBLEM as POSTED
from advonline.problems.posted_price.tabulated import from_file
from advonline.problems.posted_price.typed_payoffs import algorithm_table
from advonline.train import train

TINY = {
    "setting": {
        "resources": 2,
        "capacities": [1.0, 1.0],
        "low": 1.0,
        "high": 10.0,
        "rounds": 8,
        "max_demand": 0.5,
        "demand_levels": 2,
    },
    "algorithm": {
        "price_atoms": 4,
        "hidden": 8,
        "layers": 1,
        "shared_resources": True,
        "learning_rate": 0.003,
    },
    "adversary": {"density_levels": 4, "conditioning": "state"},
    "game": {"loop": "oracle", "epochs": 2, "temperature": 0.02},
    "oracle": {
        "epoch_steps": 1,
        "archive_size": 8,
        "snapshots": 3,
        "new_per_epoch": 2,
        "restarts": 4,
        "anchor": 3.0,
        "mixtures": True,
        "rescore_best": False,
    },
}
RUN_CONFIG = configs.from_tables(TINY)


@pytest.fixture(scope="module")
def three_members():
    """A game and a mixture of three random, sharp pricing networks with weights .5/.3/.2."""
    game = RUN_CONFIG.build_game()
    keys = jax.random.split(jax.random.key(7), 3)
    params = [
        jax.tree.map(lambda leaf: 4 * leaf, game.head.module.init(k, jnp.zeros(2), jnp.zeros(())))
        for k in keys
    ]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *params)
    weights = jnp.array([0.5, 0.3, 0.2], jnp.float32)
    return game, snapshot_mixture(stacked, weights, game.policy), params


def _assert_same_params(got: dict, want: dict) -> None:
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)


def _instances(game, count: int, key) -> tuple[jax.Array, Instance]:
    types = random_types(game.adversary.buyer_types, key, count, game.setting.rounds)
    return types, game.adversary.instances(types, jnp.float32)


def test_an_episode_plays_the_member_drawn_from_its_first_key(three_members):
    game, mixture, _ = three_members
    _, instances = _instances(game, 1, jax.random.key(0))
    instance = jax.tree.map(lambda leaf: leaf[0], instances)
    for seed in range(4):
        key = jax.random.key(seed)
        played = rollout(game.setting, mixture, instance, key)
        key_rounds, key_member = jax.random.split(key)
        member = mixture.draw_member(key_member)
        alone = rollout(game.setting, member, instance, key_rounds)
        assert float(played.welfare) == float(alone.welfare)
        np.testing.assert_array_equal(played.unit_prices, alone.unit_prices)


def test_members_are_drawn_with_their_weights(three_members):
    _, mixture, _ = three_members
    keys = jax.random.split(jax.random.key(1), 20000)
    drawn = jax.vmap(lambda k: jax.random.categorical(k, jnp.log(mixture.weights)))(keys)
    frequencies = np.bincount(np.asarray(drawn), minlength=3) / keys.shape[0]
    np.testing.assert_allclose(frequencies, [0.5, 0.3, 0.2], atol=0.015)


def test_a_mixture_has_no_distribution_per_state(three_members):
    game, mixture, _ = three_members
    with pytest.raises(TypeError, match="draws one member per input"):
        algorithm_table(game.setting, mixture, jnp.float32)


def test_the_mixtures_exact_ratio_weighs_its_members_payoffs(three_members):
    game, mixture, params = three_members
    vocabulary = game.adversary.buyer_types
    types, _ = _instances(game, 6, jax.random.key(2))
    sales = jnp.stack(
        [
            game.adversary.type_sale_table(
                algorithm_table(game.setting, game.policy(p), jnp.float32), jnp.float32
            )
            for p in params
        ]
    )
    each = [1 / typed_ratios(game.setting, vocabulary, s, types, jnp.float32) for s in sales]
    expected = 1 / sum(w * p for w, p in zip([0.5, 0.3, 0.2], each, strict=True))
    mixed = typed_ratios(game.setting, vocabulary, sales, types, jnp.float32, mixture.weights)
    np.testing.assert_allclose(mixed, expected, rtol=1e-5)
    # ... and the simulator's sampled runs of the mixture agree with it in expectation
    instances = game.adversary.instances(types[:1], jnp.float32)
    runs = 4000
    repeated = jax.tree.map(lambda leaf: jnp.repeat(leaf, runs, axis=0), instances)
    played = simulate(game.setting, mixture, repeated, jax.random.split(jax.random.key(3), runs))
    sampled_payoff = float(jnp.mean(played.welfare) / device_optimum(game.setting, instances)[0])
    assert sampled_payoff == pytest.approx(1 / float(mixed[0]), rel=0.03)


def test_local_search_on_a_one_member_mixture_is_local_search_on_that_member(three_members):
    game, _, params = three_members
    vocabulary = game.adversary.buyer_types
    table = algorithm_table(game.setting, game.policy(params[0]), jnp.float32)
    sale = game.adversary.type_sale_table(table, jnp.float32)
    budget = OracleBudget(chains=4, candidates=4, search_steps=5)
    key = jax.random.key(4)
    starts, _ = _instances(game, 2, jax.random.key(5))
    mixed = mixture_search(
        game.setting, vocabulary, sale[None], jnp.ones(1), budget, key, jnp.float32, starts
    )
    key_random, key_search = jax.random.split(key)
    chains = jnp.concatenate([starts, random_types(vocabulary, key_random, 4, 8)])[:4]
    alone = local_search_oracle(
        game.setting, vocabulary, sale, chains, 4, 5, jnp.float32, key_search
    )
    np.testing.assert_array_equal(mixed.types, alone.types)
    np.testing.assert_allclose(mixed.ratios, alone.ratios, rtol=1e-6)
    assert np.all(
        np.asarray(alone.ratios)
        >= np.asarray(typed_ratios(game.setting, vocabulary, sale, chains, jnp.float32))
        * (1 - 1e-6)
    )


def test_a_run_delivers_a_mixture_only_when_one_holds_the_best_guarantee(three_members):
    game, mixture, params = three_members
    state = init_oracle_state(game, RUN_CONFIG.oracle, jax.random.key(0))
    assert delivered_mixture(game, state) is None
    members = jax.tree.map(lambda stack: jnp.asarray(stack), mixture.members.params)
    state = state.replace(best_members=members, best_weights=jnp.array([0.0, 0.6, 0.4]))
    delivered = delivered_policies(game, state)
    assert delivered["learned"].size == 2
    np.testing.assert_allclose(delivered["learned"].weights, [0.6, 0.4])
    # the read-out is the heaviest member's median
    readout = delivered["learned-deterministic"].randomised
    _assert_same_params(readout.params, params[1])


def _document(game, mixture) -> dict:
    return policy_writer.mixture_document(game.setting, mixture, {"algorithm": "learned"})


@pytest.mark.end_to_end
def test_a_mixture_file_reads_back_to_the_same_mixture_and_measure(three_members):
    game, mixture, _ = three_members
    document = json.loads(json.dumps(_document(game, mixture)))
    loaded = parse(document)
    assert isinstance(loaded, MixturePolicy) and len(loaded.members) == 3
    setting, policy = from_file(loaded)
    _assert_same_params(policy.members.params, mixture.members.params)
    np.testing.assert_array_equal(policy.weights, mixture.weights)
    budget = Budget(
        family_members=4,
        random_instances=8,
        samples=4,
        adversary_steps=3,
        adversary_batch=4,
        search_steps=3,
        search_chains=4,
    )
    assert measure(POSTED, setting, "m", policy, budget).competitive_ratio == pytest.approx(
        measure(POSTED, game.setting, "m", mixture, budget).competitive_ratio, rel=1e-12
    )
    # the NumPy loader draws a member per input and refuses to post prices itself
    rng = np.random.default_rng(0)
    counts = np.zeros(3)
    for _ in range(3000):
        counts[loaded.members.index(loaded.draw(rng))] += 1
    np.testing.assert_allclose(counts / 3000, [0.5, 0.3, 0.2], atol=0.03)
    with pytest.raises(ValueError, match="draw the member"):
        loaded.prices(np.zeros(2))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["members"][0].update(weight=0), r"weight must lie in \(0, 1\]"),
        (lambda d: d["members"][0].update(weight=float("nan")), r"weight must lie in \(0, 1\]"),
        (lambda d: d["members"][0].update(weight=True), "weight must be a number"),
        (lambda d: d["members"][0].update(weight=0.9), "must sum to 1"),
        (lambda d: d.update(members=[]), "non-empty list"),
        (lambda d: d["setting"].update(resources=1), "K >= 2"),
        (lambda d: d["members"][1]["network"].update(round_input=False), "same inputs"),
        (lambda d: d.update(version=1), "version 1 stores tables"),
    ],
)
def test_malformed_mixture_files_are_refused_in_one_line(three_members, change, message):
    game, mixture, _ = three_members
    document = copy.deepcopy(_document(game, mixture))
    change(document)
    with pytest.raises(PolicyFileError, match=message) as error:
        parse(document)
    assert "\n" not in str(error.value)


def test_the_best_so_far_is_a_network_or_a_mixture_whichever_measured_lower(three_members):
    game, mixture, params = three_members
    state = init_oracle_state(game, RUN_CONFIG.oracle, jax.random.key(0)).replace(
        algorithm=params[0]
    )
    members, weights = mixture.members.params, jnp.array([0.5, 0.5, 0.0])
    state = keep_best(state, 5.0, (members, weights), 4.0)  # the mixture measured lower
    assert float(state.best_score) == 4.0 and delivered_mixture(game, state).size == 2
    state = keep_best(state.replace(algorithm=params[1]), 4.5, (members, weights), 4.2)
    assert float(state.best_score) == 4.0  # neither beats it: nothing changes
    assert delivered_mixture(game, state) is not None
    _assert_same_params(state.best_algorithm, params[0])
    state = keep_best(state, 3.5, (members, weights), 3.9)  # now the network
    assert float(state.best_score) == 3.5 and delivered_mixture(game, state) is None
    _assert_same_params(state.best_algorithm, params[1])


def test_a_delivered_mixture_is_listed_and_exported_as_one(three_members, tmp_path):
    game, mixture, _ = three_members
    state = init_oracle_state(game, RUN_CONFIG.oracle, jax.random.key(0))
    state = state.replace(
        best_members=mixture.members.params, best_weights=jnp.array([0.2, 0.8, 0.0])
    )
    run = TrainedRun(tmp_path, state, RUN_CONFIG, 0.0)
    path, _ = export_run(run, tmp_path / "policy.json")
    document = json.loads(path.read_text())
    assert document["kind"] == "mixture"
    assert [m["weight"] for m in document["members"]] == pytest.approx([0.2, 0.8])
    readout, _ = export_run(run, tmp_path / "readout.json", "learned-deterministic")
    assert json.loads(readout.read_text())["kind"] == "deterministic"
    # the archive lists each instance's ratio against the mixture: its weighted payoff
    types, _ = _instances(game, 3, jax.random.key(8))
    instances = game.adversary.instances(types, jnp.float32)
    archive, _ = add_instances(
        state.archive,
        np.asarray(types),
        np.asarray(offline_optimum(game.setting, instances)),
        np.zeros(8),
        0,
        np.zeros(3, int),
    )
    listed = {
        row["slot"]: row["ratio_delivered"]
        for row in archive_rows(game, state.replace(archive=archive))
    }
    each = [
        1
        / typed_ratios(
            game.setting,
            game.adversary.buyer_types,
            game.adversary.type_sale_table(
                algorithm_table(game.setting, mixture.member(m), jnp.float32), jnp.float32
            ),
            types,
            jnp.float32,
        )
        for m in (0, 1)
    ]
    expected = 1 / (0.2 * each[0] + 0.8 * each[1])
    np.testing.assert_allclose([listed[slot] for slot in range(3)], expected, rtol=1e-4)


def _mix_every_snapshot_equally(monkeypatch) -> None:
    """Make the meta-solver's algorithm mixture uniform over the snapshots (a valid
    meta-strategy, weaker than the LP's), so that every run with two snapshots has a mixture;
    the adversary's side and the value follow the LP's adversary mixture and uniform rows."""
    solve = meta.solve

    def uniform_rows(payoff):
        solution = solve(payoff)
        rows = np.full(payoff.shape[0], 1 / payoff.shape[0])
        return meta.MetaSolution(rows, solution.adversary, float(np.min(rows @ payoff)))

    monkeypatch.setattr(meta, "solve", uniform_rows)


def _small_run(steps: int, seed: int, **oracle) -> configs.RunConfig:
    """The tiny K = 2 setting trained ``steps`` single-step epochs with small oracles and the
    ``oracle`` keys given."""
    data = copy.deepcopy(TINY)
    data["game"].update(epochs=steps, seed=seed)
    small = dict(restarts=1, adversary_steps=2, adversary_batch=4, chains=4, candidates=4)
    data["oracle"].update(epoch_steps=1, search_steps=3, **small, **oracle)
    return configs.from_tables(data)


@pytest.mark.end_to_end
def test_a_run_probes_its_mixture_closes_its_gap_and_never_lets_the_guarantee_rise(
    tmp_path, monkeypatch
):
    """A tiny K = 2 run whose meta-solver is made to mix every snapshot equally (a valid
    meta-strategy, weaker than the LP's): each epoch with two snapshots measures the mixture,
    the guarantee never rises and is at most every mixture's measured worst case.

    ``oracle.closing_rounds``: the last measurement probes the mixture again, each time from
    a fresh key and after the restricted game is solved with the finds, until the gap is at
    most ``closing_tolerance`` or the rounds are spent; it logs the last probe's gap and keeps
    the best mixture any round measured. Earlier measurements probe it once."""
    _mix_every_snapshot_equally(monkeypatch)
    probe = oracle_loop._mixture_probe
    calls = []

    def spy(game, state, budget, key, sales):
        ratio, found = probe(game, state, budget, key, sales)
        restricted = meta.solve(restricted_game(state.archive)).ratio
        calls.append((int(state.epoch), ratio, ratio / restricted - 1, jax.random.key_data(key)))
        return ratio, found

    monkeypatch.setattr(oracle_loop, "_mixture_probe", spy)
    folder = tmp_path / "run"
    train(_small_run(steps=4, seed=1, closing_rounds=3, closing_tolerance=1e-4), folder)
    rows = read_metrics(folder / "metrics.csv")
    guarantees = [r["guarantee"] for r in rows]
    assert np.all(np.diff(guarantees) <= 0)
    probed = [r for r in rows if r["mixture_ratio"] is not None]
    assert len(probed) == len(rows) - 1  # every epoch after the first has two snapshots
    for r in probed:  # the mixture's worst found includes the whole archive (float32 payoffs)
        assert r["mixture_exploitability"] >= -1e-6
    assert guarantees[-1] <= min(r["mixture_ratio"] for r in probed)

    last_epoch = len(rows) - 1
    earlier = [c for c in calls if c[0] < last_epoch]
    closing = [c for c in calls if c[0] == last_epoch]
    assert len(earlier) == len(rows) - 2  # once per earlier epoch with two snapshots
    assert 1 <= len(closing) <= 4
    assert all(gap > 1e-4 for _, _, gap, _ in closing[:-1])  # went on only while the gap was open
    assert len(closing) == 4 or closing[-1][2] <= 1e-4
    keys = {bytes(np.asarray(key)) for *_, key in calls}
    assert len(keys) == len(calls)
    np.testing.assert_allclose(rows[-1]["mixture_ratio"], closing[-1][1], rtol=1e-5)
    np.testing.assert_allclose(rows[-1]["mixture_exploitability"], closing[-1][2], atol=1e-5)
    assert rows[-1]["guarantee"] <= min(ratio for _, ratio, *_ in calls) * (1 + 1e-5)


@pytest.mark.end_to_end
def test_what_the_mixture_probe_finds_counts_against_the_kept_policy(tmp_path, monkeypatch):
    """The mixture probe's finds join the archive before the measurement's two candidates,
    the network and the mixture, are compared; each is compared at its worst ratio on the
    archive as it then stands. Here the probe is made to return what a stronger search finds
    against the current network (``oracle.rescore_best = false``, so nothing else raises a
    figure), and the policy the run keeps is never better than its worst archived ratio.
    (With seed 4 the stronger search hits the network harder than the network's probe did.)"""
    _mix_every_snapshot_equally(monkeypatch)
    probe = oracle_loop._mixture_probe

    def finds_against_the_network(game, state, budget, key, tables):
        ratio, _ = probe(game, state, budget, key, tables)
        return ratio, game.best_responses(state.algorithm, budget.scaled(4), key, None)

    monkeypatch.setattr(oracle_loop, "_mixture_probe", finds_against_the_network)
    folder = tmp_path / "run"
    train(_small_run(steps=2, seed=4, probe_every=0), folder)
    state, config, _ = checkpoint.load(folder)
    game = config.build_game()
    filled = np.asarray(state.archive.filled)
    network = oracle_loop.network_ratios(game, state.algorithm, state.archive)[filled]
    assert network.max() > read_metrics(folder / "metrics.csv")[-1]["probe_ratio"] * 1.01
    kept = oracle_loop.kept_ratios(game, state)[filled]
    assert math.isfinite(float(state.best_score))
    assert kept.max() <= float(state.best_score) * (1 + 1e-5)


@pytest.mark.end_to_end
def test_without_a_certificate_only_probed_epochs_compete(tmp_path):
    """K >= 2 with ``probe_every = 0``: the archive alone would flatter an unprobed network, so
    the guarantee stays open until the last (probed) measurement, which sets it to the worst
    case measured there or to its mixture's, whichever is lower."""
    folder = tmp_path / "run"
    train(_small_run(steps=2, seed=3, probe_every=0), folder)
    rows = read_metrics(folder / "metrics.csv")
    assert len(rows) == 3
    assert [r["probe_ratio"] is None for r in rows] == [True, True, False]
    assert all(r["guarantee"] == float("inf") for r in rows[:-1])
    measured = max(rows[-1]["archive_ratio"], rows[-1]["probe_ratio"])
    candidates = [measured] + [rows[-1]["mixture_ratio"]] * (rows[-1]["mixture_ratio"] is not None)
    np.testing.assert_allclose(rows[-1]["guarantee"], min(candidates), rtol=1e-6)


def test_member_sale_tables_are_built_once_per_snapshot(three_members, monkeypatch):
    """The mixture probe's memo builds a snapshot's sale table once, gives the table a fresh
    build gives, and builds again when a new snapshot takes the slot."""
    game, _, params = three_members
    archive = empty_archive(4, game.setting.rounds, 3, params[0])
    for epoch, member in enumerate(params):
        archive, _ = add_snapshot(archive, member, epoch, np.zeros(3, bool))
    built = []
    table_of = game_module.algorithm_table

    def counting(setting, policy, dtype):
        built.append(1)
        return table_of(setting, policy, dtype)

    monkeypatch.setattr(game_module, "algorithm_table", counting)

    def fresh(member):
        table = table_of(game.setting, game.policy(member), jnp.float32)
        return game.adversary.type_sale_table(table, jnp.float32)

    sales = oracle_loop.MemberTables()
    sales.stacked(game, archive, np.array([0, 2]))
    again = sales.stacked(game, archive, np.array([2, 1]))
    assert len(built) == 3
    np.testing.assert_array_equal(again, jnp.stack([fresh(params[2]), fresh(params[1])]))
    newer = jax.tree.map(lambda leaf: -leaf, params[0])
    archive, slot = add_snapshot(archive, newer, 3, np.zeros(3, bool))  # replaces epoch 0's
    assert slot == 0
    np.testing.assert_array_equal(sales.stacked(game, archive, np.array([0]))[0], fresh(newer))
    assert len(built) == 4


def _sale_need(setting, members: int):
    """The evaluator's need for the sale tables of a policy of ``members`` networks."""
    (need,) = [
        need
        for need in preflight.evaluation_needs(POSTED, setting, Budget(), members)
        if "sale chances" in need.what
    ]
    return need


@pytest.mark.parametrize("members", [2, 8])
def test_the_pre_flight_holds_the_search_against_every_member(members):
    """The search against a mixture scores all its members' sale tables ``[M, T, S, types]``
    at once: the pre-flight counts one table more for each member, and covers what the
    compiled search holds (its arguments and temporaries) by at most a quarter more."""
    setting = POSTED.setting(
        resources=2, capacities=(1.0, 1.0), rounds=20, max_demand=0.1, demand_levels=2
    )
    single, mixed = _sale_need(setting, 1), _sale_need(setting, members)
    assert f"{members} mixture members" in mixed.what and mixed.bytes == single.bytes
    assert mixed.copies == single.copies + members
    vocabulary = build_adversary(setting, AdversaryConfig(conditioning="state")).buyer_types
    states = (setting.grid_size + 1) ** setting.resources
    table = (setting.rounds, states, vocabulary.count)
    assert mixed.bytes == 8 * math.prod(table)  # float64, the tables the search reads
    sales = jax.ShapeDtypeStruct((members, *table), jnp.float64)
    weights = jax.ShapeDtypeStruct((members,), jnp.float64)
    budget = OracleBudget(chains=64, candidates=16, search_steps=4)

    def search(sales, weights, key):
        return mixture_search(setting, vocabulary, sales, weights, budget, key, jnp.float64).ratios

    with jax.enable_x64(True):
        compiled = jax.jit(search).lower(sales, weights, jax.random.key(0)).compile()
    held = compiled.memory_analysis()
    held = held.argument_size_in_bytes + held.temp_size_in_bytes
    assert held <= mixed.copies * mixed.bytes <= 1.25 * held


@pytest.mark.parametrize("given", ["policy", "checkpoint"])
def test_a_mixture_that_cannot_fit_is_refused_before_any_work(
    three_members, tmp_path, capsys, given
):
    """``evaluate`` counts a mixture's members in the pre-flight, whether it comes as a
    policy file or as what a run delivers: with memory for every need of one network but not
    for three members' sale tables (on a finer grid, where those tables are the largest
    need), the mixture of three is refused in one line naming them, and nothing is measured."""
    game, mixture, _ = three_members
    tables = TINY | {"setting": TINY["setting"] | {"rounds": 20, "max_demand": 0.05}}
    config = configs.from_tables(tables)
    setting = config.setting
    if given == "policy":
        source = tmp_path / "mixture.json"
        document = policy_writer.mixture_document(setting, mixture, {"algorithm": "learned"})
        export.write(source, document)
    else:
        source = tmp_path / "run"
        source.mkdir()
        state = init_oracle_state(config.build_game(), config.oracle, jax.random.key(0))
        state = state.replace(best_members=mixture.members.params, best_weights=mixture.weights)
        checkpoint.save(source, state, config, 0.0)
    one = max(n.copies * n.bytes for n in preflight.evaluation_needs(POSTED, setting, Budget()))
    three = _sale_need(setting, 3)
    assert three.copies * three.bytes > one
    available = (one + three.copies * three.bytes) / 2
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preflight, "available_bytes", lambda: available)
        assert cli.main(["evaluate", f"--{given}", str(source), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "for each of 3 mixture members" in error, error


def test_training_counts_the_tables_its_mixture_probe_keeps():
    """The mixture probe keeps each snapshot's sale table between epochs and stacks them for
    its search: training's estimate counts two of each snapshot's, and none where the run
    has no mixtures; a run's measuring counts up to ``oracle.snapshots`` members."""

    def config(**oracle) -> configs.RunConfig:
        return configs.from_tables(TINY | {"oracle": TINY["oracle"] | oracle})

    def probe_needs(run_config: configs.RunConfig) -> list:
        return [n for n in memory.training_needs(run_config) if "mixture probe" in n.what]

    (three,) = probe_needs(config())
    (nine,) = probe_needs(config(snapshots=9))
    assert nine.bytes == three.bytes and nine.copies - three.copies == 2 * (9 - 3)
    assert probe_needs(config(mixtures=False)) == []
    assert config(snapshots=9).mixture_members() == 9
    assert config(mixtures=False).mixture_members() == 1
