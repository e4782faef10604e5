"""The certificate on the product grid (K >= 2) against brute force, HiGHS and the K = 1 DP."""

import dataclasses
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from policies import random_grid_table
from tiers import first_by_default

from advonline.baselines.posted_price import make_baseline
from advonline.mixture import SnapshotMixture
from advonline.problems.posted_price import (
    bundle_bound,
    descent,
    grid_certify,
    policy_file,
    policy_writer,
)
from advonline.problems.posted_price import problem as posted_price_problem
from advonline.problems.posted_price.buyer_types import demand_vectors
from advonline.problems.posted_price.certify import certify_dp
from advonline.problems.posted_price.grid_certify import (
    certify_grid,
    certify_table,
    certify_table_from,
    grid_worst_runs,
)
from advonline.problems.posted_price.model import (
    PriceDistribution,
    Setting,
    SettingError,
    one_resource,
    price_table,
)
from advonline.problems.posted_price.optimum import batch_optimum
from advonline.problems.posted_price.policy_file import PolicyFileError
from advonline.problems.posted_price.product_grid import (
    GridTablePolicy,
    expected_welfare_grid,
    grid_price_table,
    grid_units,
)

TINY = [
    Setting(2, 1.0, 4.0, 3, 0.5, 1, True, (1.0, 1.0)),
    Setting(2, 1.0, 4.0, 3, 0.5, 1, False, (1.0, 1.0)),
    Setting(2, 1.0, 5.0, 2, 2 / 3, 2, True, (1.0, 2.0)),
    Setting(2, 1.0, 5.0, 2, 2 / 3, 2, False, (1.0, 2.0)),
]
IDS = [f"T{s.rounds}-G{s.grid_size}-{'div' if s.divisible else 'ind'}" for s in TINY]


def _demands(setting: Setting) -> np.ndarray:
    with jax.enable_x64(True):
        return np.asarray(demand_vectors(setting, jnp.float64))


def _sold(setting: Setting, prices: np.ndarray, used: np.ndarray, value, demand) -> float:
    """The share of ``demand`` a buyer of ``value`` buys at unit ``prices``, written by hand."""
    if demand.sum() == 0 or value < prices @ demand:
        return 0.0
    room = np.asarray(setting.capacities) - used
    if setting.divisible:
        asked = demand > 0
        return float(min(1.0, np.min(room[asked] / demand[asked])))
    return float(np.all(demand <= room + 1e-9))


def _deterministic_worst(setting: Setting, policy, rng) -> float:
    """sup OPT / ALG by enumerating every instance whose buyers take, in the state the policy
    is in, a density at each bundle price, just below it, L, U or a random one; OPT by HiGHS."""
    demands = _demands(setting)
    capacities = np.asarray(setting.capacities)
    units = grid_units(setting)
    with jax.enable_x64(True):
        table = np.asarray(grid_price_table(setting, policy, jnp.float64).prices)[..., 0]
    leaves = []  # (values, demands, ALG)

    def walk(t, used, values, asked, welfare):
        if t == setting.rounds:
            leaves.append((values, asked, welfare))
            return
        now = np.rint(used / capacities * setting.grid_size)
        state = int(np.flatnonzero(np.all(units == now, 1))[0])
        prices = table[t, state]
        walk(t + 1, used, values + [0.0], asked + [np.zeros(2)], welfare)
        for demand in demands:
            bundle = prices @ demand / demand.sum()
            densities = {setting.low, setting.high, rng.uniform(setting.low, setting.high)}
            densities.add(float(np.clip(bundle, setting.low, setting.high)))
            if setting.low < bundle <= setting.high:
                densities.add(bundle * (1 - 1e-10))
            for density in densities:
                value = density * demand.sum()
                share = _sold(setting, prices, used, value, demand)
                walk(
                    t + 1, used + share * demand, values + [value], asked + [demand],
                    welfare + share * value,
                )  # fmt: skip

    walk(0, np.zeros(2), [], [], 0.0)
    values = np.array([leaf[0] for leaf in leaves])
    asked = np.array([leaf[1] for leaf in leaves])
    welfare = np.array([leaf[2] for leaf in leaves])
    opt = batch_optimum(values, asked, capacities, setting.divisible)
    assert np.all(welfare > 0) or np.all(opt[welfare <= 0] <= 0)
    return float(np.max(np.where(welfare > 0, opt / np.maximum(welfare, 1e-300), 1.0)))


@pytest.mark.parametrize("setting", first_by_default(TINY, keep=2), ids=IDS)
@pytest.mark.parametrize("algorithm", ["threshold", "exponential", "table"])
def test_grid_certificate_of_a_deterministic_policy_equals_brute_force(setting, algorithm):
    rng = np.random.default_rng(setting.rounds + 2 * setting.divisible)
    if algorithm == "table":
        policy = random_grid_table(setting, int(rng.integers(1 << 30)), atoms=1, off_range=True)
    else:
        policy = make_baseline(algorithm, setting)
    certificate = certify_grid(setting, policy)
    assert certificate.method == "grid-programme" and "exact" in certificate.note
    brute = _deterministic_worst(setting, policy, rng)
    # the brute force reaches each supremum to within its 1e-10 step below the price
    assert brute <= certificate.ratio * (1 + 1e-9)
    assert brute == pytest.approx(certificate.ratio, rel=1e-6)


def _ratios(setting: Setting, policy, values: np.ndarray, asked: np.ndarray) -> np.ndarray:
    """OPT (HiGHS) over exact E[ALG] (backward induction on the product grid) of instances."""
    with jax.enable_x64(True):
        welfare = jax.jit(
            jax.vmap(lambda v, d: expected_welfare_grid(setting, policy, v, d)),
        )(jnp.asarray(values), jnp.asarray(asked))
    opt = batch_optimum(values, asked, np.asarray(setting.capacities), setting.divisible)
    welfare = np.asarray(welfare)
    return np.divide(opt, welfare, out=np.ones_like(opt), where=opt > 0)


def _instances(setting: Setting, policy, rng, sampled: int) -> tuple[np.ndarray, np.ndarray]:
    """Every instance over a few densities, and ``sampled`` more whose densities are drawn
    from the bundle prices the policy posts anywhere (and just below them)."""
    demands = _demands(setting)
    options = [(0.0, np.zeros(2))] + [
        (density, demand)
        for demand in demands
        for density in (setting.low, (setting.low + setting.high) / 2, setting.high)
    ]
    chosen = list(itertools.product(options, repeat=setting.rounds))
    with jax.enable_x64(True):
        prices = np.asarray(grid_price_table(setting, policy, jnp.float64).prices)
    for _ in range(sampled):
        sequence = []
        for _ in range(setting.rounds):
            j = rng.integers(len(demands) + 1)
            if j == len(demands):
                sequence.append(options[0])
                continue
            demand = demands[j]
            bundle = rng.choice(prices.reshape(-1, 2, prices.shape[-1]), 1)[0].T @ demand
            density = rng.choice(bundle) / demand.sum() * rng.choice([1.0, 1 - 1e-10])
            sequence.append((float(np.clip(density, setting.low, setting.high)), demand))
        chosen.append(tuple(sequence))
    values = np.array([[density * demand.sum() for density, demand in row] for row in chosen])
    asked = np.array([[demand for _, demand in row] for row in chosen])
    return values, asked


@pytest.mark.parametrize("setting", TINY[:2], ids=IDS[:2])
def test_grid_certificate_of_a_randomised_policy_bounds_every_instance(setting):
    rng = np.random.default_rng(7)
    policy = random_grid_table(setting, seed=11, atoms=3, off_range=True)
    certificate = certify_grid(setting, policy)
    assert "upper bound" in certificate.note
    values, asked = _instances(setting, policy, rng, sampled=3000)
    worst = _ratios(setting, policy, values, asked).max()
    assert 1.0 < worst <= certificate.ratio * (1 + 1e-9)


#: Beside TINY, a setting whose worst strategy depends on OPT's state (more buyers than OPT
#: can serve).
LONGER = Setting(2, 1.0, 10.0, 6, 0.5, 1, True, (1.0, 1.0))


@pytest.mark.parametrize(
    "setting", first_by_default([TINY[0], LONGER, *TINY[1:]]), ids=[IDS[0], "T6-G2-div", *IDS[1:]]
)
@pytest.mark.parametrize("atoms", [1, 3])
def test_draws_from_the_certificate_s_strategy_attain_or_stay_below_it(setting, atoms):
    """Deterministic: every draw is an instance whose ratio is the certificate. Randomised:
    every draw is one instance, at most the certificate, and the hardest is well above 1."""
    policy = random_grid_table(setting, seed=21 + atoms, atoms=atoms, off_range=True)
    certificate = certify_grid(setting, policy).ratio
    runs = grid_worst_runs(setting, policy, certificate, jax.random.key(4), 64)
    demands = np.vstack([np.zeros((1, 2)), _demands(setting)])[runs.levels]  # [N, T, K]
    densities = runs.densities * np.where(runs.strictly_below, 1 - 1e-10, 1.0)
    values = np.where(runs.levels > 0, densities * demands.sum(-1), 0.0)
    found = _ratios(setting, policy, values, demands)
    # the random table's float32 probabilities sum to 1 within 5e-8: E[ALG] by the two
    # inductions agrees to a few times that
    assert found.max() <= certificate * (1 + 1e-6)
    if atoms == 1:
        assert found == pytest.approx(certificate, rel=1e-6)
    else:
        assert found.max() > 1 + (certificate - 1) / 2


@struct.dataclass
class _StackedTables:
    """Grid tables as the parameters of a policy, so that a mixture can stack them."""

    params: PriceDistribution  # [T, S, K, A] (or [M, T, S, K, A] stacked)
    setting: Setting = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, observation):
        return GridTablePolicy(self.params, self.setting)(observation)


def test_a_mixture_is_certified_by_the_harmonic_mean_of_its_members():
    setting = TINY[0]
    members = [random_grid_table(setting, seed, atoms=2, off_range=True) for seed in (1, 2)]
    weights = np.array([0.3, 0.7])
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(m.table for m in members))
    mixture = SnapshotMixture(_StackedTables(stacked, setting), jnp.asarray(weights))
    weights = np.asarray(mixture.weights, np.float64)  # as the mixture holds them
    alone = [certify_grid(setting, member).ratio for member in members]
    certificate = certify_grid(setting, mixture)
    assert certificate.ratio == pytest.approx(1 / np.sum(weights / alone), rel=1e-12)
    values, asked = _instances(setting, members[0], np.random.default_rng(3), sampled=0)
    opt = batch_optimum(values, asked, np.asarray(setting.capacities), setting.divisible)
    earned = sum(
        w * opt / _ratios(setting, m, values, asked) for w, m in zip(weights, members, strict=True)
    )
    some = opt > 0
    assert np.max(opt[some] / earned[some]) <= certificate.ratio * (1 + 1e-9)


ONE = [
    Setting(1, 1.0, 4.0, 3, 0.5, 2, True, (1.0,)),
    Setting(1, 1.0, 6.0, 4, 0.5, 1, False, (1.0,)),
]


@pytest.mark.parametrize("setting", ONE, ids=["div", "ind"])
@pytest.mark.parametrize("atoms", [1, 3])
def test_for_one_resource_the_grid_certificate_is_the_dp_certificate(setting, atoms):
    policy = random_grid_table(setting, seed=5 + atoms, atoms=atoms, off_range=True)
    assert certify_grid(setting, policy).ratio == pytest.approx(
        certify_dp(setting, policy).ratio, rel=1e-10
    )


@pytest.mark.parametrize("resources", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_opt_of_the_settings_demand_vectors_is_attained_in_whole_units(resources, seed):
    """The interval-matrix argument of the grid certificate: HiGHS's LP optimum equals the best
    choice of whole units per buyer, enumerated."""
    rng = np.random.default_rng(seed)
    setting = Setting(resources, 1.0, 10.0, 6, 0.5, 2, True, (1.0,) * resources)
    demands = _demands(setting)
    units = np.rint(demands * setting.grid_size).astype(int)
    picks = rng.integers(len(demands), size=(40, setting.rounds))
    asked = demands[picks]  # [N, T, K]
    values = rng.uniform(1.0, 10.0, picks.shape) * asked.sum(-1)
    lp = batch_optimum(values, asked, np.asarray(setting.capacities), True)
    for n in range(len(picks)):
        levels = units[picks[n]].max(-1)
        best = 0.0
        for taken in itertools.product(*(range(g + 1) for g in levels)):
            used = (np.asarray(taken)[:, None] * (units[picks[n]] > 0)).sum(0)
            if np.all(used <= setting.grid_size):
                best = max(best, float(values[n] @ (np.asarray(taken) / levels)))
        assert lp[n] == pytest.approx(best, rel=1e-9)


def test_a_guess_above_the_root_is_run_again_from_one():
    """Dinkelbach's iteration started above the root stops at once at its start (a valid but
    looser bound); started from a guess there, ``certify_table_from`` gives the programme's
    value, and from a guess below the root the same."""
    setting = TINY[0]
    with jax.enable_x64(True):
        table = grid_price_table(setting, random_grid_table(setting, seed=5, atoms=3), jnp.float64)
        root = certify_table(setting, table).ratio
        assert certify_table(setting, table, start=2 * root).ratio == 2 * root
        assert certify_table_from(setting, table, 2 * root).ratio == root
        assert certify_table_from(setting, table, 0.9 * root).ratio == pytest.approx(root, rel=1e-9)


@pytest.mark.parametrize("setting", TINY, ids=IDS)
@pytest.mark.parametrize(("scale", "capacities"), [(3.69, (1.0, 1.0)), (1e5, (0.05, 0.0137))])
def test_the_grid_certificate_is_the_same_at_every_scale(setting, scale, capacities):
    """A ratio has no units: densities times ``scale`` and capacities times any one factor
    leave every certificate as it is (a price per unit of a bundle rounds above L where its
    unit prices are L: that must not open a class of buyers who buy nothing)."""
    shape = {"capacities": capacities, "low": setting.low * scale, "high": setting.high * scale}
    unit = dataclasses.replace(setting, capacities=(1.0, capacities[1] / capacities[0]))
    scaled = dataclasses.replace(setting, **shape)
    for name in ("threshold", "greedy", "exponential"):
        found = certify_grid(scaled, make_baseline(name, scaled)).ratio
        assert found == pytest.approx(certify_grid(unit, make_baseline(name, unit)).ratio, rel=1e-9)


def test_a_grid_too_large_is_skipped_and_says_why(monkeypatch):
    """Skipped before the policy's price table ``[T, S, K, A]`` is built: at 1e6 grid states
    (max_demand 0.001) that table alone is gigabytes, for a policy or a mixture's member."""
    setting = Setting(2, 1.0, 10.0, 60, 0.1, 2, True, (1.0, 1.0))
    certificate = certify_grid(setting, make_baseline("threshold", setting), work_limit=1e6)
    assert certificate.ratio is None and "over the limit" in certificate.note

    def never(*args, **kwargs):
        raise AssertionError("built the price table of a grid over the work limit")

    monkeypatch.setattr(grid_certify, "grid_price_table", never)
    huge = Setting(2, 1.0, 10.0, 200, 0.001, 1, True, (1.0, 1.0))
    threshold = make_baseline("threshold", huge)
    both = jax.tree.map(lambda *leaves: jnp.stack(leaves), threshold, threshold)
    for policy in (threshold, SnapshotMixture(both, jnp.asarray([0.5, 0.5]))):
        certificate = certify_grid(huge, policy)
        assert certificate.ratio is None and "1002001 grid states" in certificate.note


def test_a_lifted_table_posts_each_resource_s_row_and_certifies_above_one_resource():
    """A one-resource table lifted to two resources posts, in every grid state, each
    resource's row at that resource's own units sold; its two-resource certificate is at least
    the table's one-resource certificate (buyers who ask for one resource alone are among the
    two-resource inputs), and the grid table is the one the lifted policy posts."""
    setting = Setting(2, 1.0, 4.0, 3, 0.5, 1, True, (1.0, 1.0))
    config = descent.DescentConfig(atoms=3, round_seen=True)
    lifted_of = descent.LiftedTableOf(setting, config)
    one = descent.one_resource(setting)
    with jax.enable_x64(True):
        params = descent.initial_params(one, config, jax.random.key(5)) * 10
        # rounds apart from the shared row
        params = params.at[1:].set(jax.random.normal(jax.random.key(6), params[1:].shape))
        table = descent.price_table(one, config, params)  # [T, G + 1, A]
        lifted = lifted_of(params)  # [T, S, K, A]
        units = grid_units(setting)
        for state, sold in enumerate(units):
            for resource in range(2):
                np.testing.assert_array_equal(
                    lifted.probs[:, state, resource], table.probs[:, sold[resource]]
                )
                np.testing.assert_array_equal(
                    lifted.prices[:, state, resource], table.prices[:, sold[resource]]
                )
        alone = certify_dp(one, descent.table_policy(one, config, table)).ratio
        both = certify_grid(setting, GridTablePolicy(lifted, setting)).ratio
        posted = grid_price_table(setting, GridTablePolicy(lifted, setting), jnp.float64)
    np.testing.assert_allclose(posted.probs, lifted.probs, rtol=0, atol=1e-15)
    assert both >= alone * (1 - 1e-9)


@pytest.mark.parametrize("widened", [False, True], ids=["prices-to-U", "widened"])
def test_a_lifted_table_s_policy_file_is_the_table_and_certifies_as_it_does(widened):
    """A lifted table written as a version-1 policy file (one table per resource, each at its
    own utilisation) reads back, through the command line's restore, as the policy that posts
    the lifted grid table, with the same certificate; the NumPy loader posts each resource's
    row at its own utilisation; a file whose resources have different numbers of atoms is
    refused in one line. A widened table's prices reach K U, and so do the file's."""
    setting = Setting(2, 1.0, 4.0, 3, 0.5, 1, True, (1.0, 1.0))
    config = descent.DescentConfig(atoms=3, round_seen=True)
    lifted_of = descent.LiftedTableOf(setting, config, widened)
    one = lifted_of.single
    assert one == (bundle_bound.widened(setting) if widened else descent.one_resource(setting))
    with jax.enable_x64(True):
        params = jax.random.normal(jax.random.key(8), (setting.rounds + 1, 3, config.atoms))
        lifted = lifted_of(params)
        own = descent.price_table(one, config, params)  # [T, G + 1, A]
        certificate = certify_table(setting, lifted).ratio
    assert np.asarray(lifted.prices).max() == (2 if widened else 1) * setting.high
    per_resource = jax.tree.map(lambda column: np.stack([column] * 2), own)
    document = policy_writer.tables_document(setting, per_resource, False, {}, digits=None)
    document = json.loads(json.dumps(document))
    restored_setting, restored = posted_price_problem.restore(document)
    assert restored_setting == setting
    with jax.enable_x64(True):
        posted = grid_price_table(setting, restored, jnp.float64)
    np.testing.assert_array_equal(posted.probs, lifted.probs)
    np.testing.assert_array_equal(posted.prices, lifted.prices)
    assert certify_grid(setting, restored).ratio == certificate
    loaded = policy_file.parse(document)
    atoms, probs = loaded.distribution(np.array([0.5, 1.0]), round=1)
    np.testing.assert_array_equal(probs, np.asarray(own.probs)[1, [1, 2]])
    np.testing.assert_array_equal(atoms, np.stack([np.asarray(own.prices)[0, 0]] * 2))
    document["resources"][1]["price_atoms"].pop()
    with pytest.raises(PolicyFileError, match=r"resources\[1\]\.price_atoms must have as many"):
        policy_file.parse(document)


@pytest.mark.parametrize("widened", [False, True], ids=["prices-to-U", "widened"])
def test_a_coupled_table_is_the_lifted_one_shifted_by_the_others_sales(widened):
    """With its cross terms zero a coupled table is the lifted table (widened or not);
    otherwise each resource's logits in a state move by the cross term at the other
    resource's units sold, and by nothing else."""
    setting = Setting(2, 1.0, 4.0, 3, 0.5, 1, True, (1.0, 1.0))
    config = descent.DescentConfig(atoms=3, round_seen=True)
    one = descent.one_resource(setting)
    coupled_of = descent.CoupledTableOf(setting, config, widened)
    with jax.enable_x64(True):
        params = descent.initial_params(one, config, jax.random.key(5)) * 10
        params = params.at[1:].set(jax.random.normal(jax.random.key(6), params[1:].shape))
        lifted = descent.LiftedTableOf(setting, config, widened)(params)
        same = coupled_of(descent.coupled_params(setting, params))
        cross = jax.random.normal(jax.random.key(7), (setting.grid_size + 1, config.atoms))
        shifted = coupled_of((params, cross))
    np.testing.assert_allclose(same.probs, lifted.probs, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(same.prices, lifted.prices)
    units = grid_units(setting)
    for state, sold in enumerate(units):
        for resource in range(2):
            moved = np.log(shifted.probs[:, state, resource]) - np.log(
                lifted.probs[:, state, resource]
            )
            moved -= np.asarray(cross[sold[1 - resource]])
            np.testing.assert_allclose(moved, moved[:, :1] * np.ones_like(moved), atol=1e-12)
    with pytest.raises(SettingError, match="randomised"):
        descent.CoupledTableOf(setting, descent.DescentConfig(policy="deterministic"))


@pytest.mark.parametrize(
    "coupled", [False, pytest.param(True, marks=pytest.mark.end_to_end)], ids=["lifted", "coupled"]
)
def test_grid_descent_with_float32_gradients_delivers_its_lowest_certificate(
    optimised_compilation, coupled
):
    """Descending a lifted (or coupled) table's two-resource certificate with the gradient in
    float32 (a direction only): the delivered certificate is the lowest of the start and every
    step's, below the start, and certifying the delivered table afresh, in float64, gives it
    again. A wall-time cap that has passed after the first step stops the descent there, with
    the first step's certificate."""
    setting = TINY[0]
    config = descent.DescentConfig(atoms=3, round_seen=True)
    shape = (1 + setting.rounds, setting.grid_size + 1, config.atoms)
    table_of = descent.LiftedTableOf(setting, config)
    rate = 0.3
    with jax.enable_x64(True):
        params = jax.random.normal(jax.random.key(8), shape, jnp.float64)
        if coupled:  # at 0.3 a step falls further than the certificate's start below the last
            table_of = descent.CoupledTableOf(setting, config)
            params = descent.coupled_params(setting, params)
        start = certify_grid(setting, GridTablePolicy(table_of(params), setting)).ratio
        found = descent.grid_descend_params(
            setting, table_of, params, start, 4, rate, gradient_dtype=jnp.float32
        )
        again = certify_grid(setting, GridTablePolicy(table_of(found.params), setting))
        capped = descent.grid_descend_params(
            setting, table_of, params, start, 4, rate, gradient_dtype=jnp.float32, seconds=1e-9
        )
    assert capped.history == found.history[:1]
    assert found.certificate == min(start, *found.history)
    assert found.certificate < start  # four steps from random logits
    assert again.ratio == pytest.approx(found.certificate, rel=1e-9)


def test_a_lifted_table_needs_equal_capacities():
    with pytest.raises(SettingError, match="same capacity"):
        descent.LiftedTableOf(TINY[2], descent.DescentConfig())


@pytest.mark.parametrize("setting", [TINY[2], one_resource(TINY[2])], ids=["K2", "K1"])
def test_a_float64_table_of_float32_distributions_sums_to_one_in_float64(setting):
    """A network posts float32 distributions, whose rows miss 1 by float32's rounding; the
    float64 table a certificate weighs every atom by is renormalised, its rows summing to 1
    to float64's rounding, each probability moved by no more than that miss."""
    drawn = random_grid_table(setting, seed=9, atoms=5)
    probs = np.asarray(drawn.table.probs, np.float32)
    policy = GridTablePolicy(
        PriceDistribution(drawn.table.prices, jnp.asarray(probs)), setting, deterministic=False
    )
    missed = np.abs(probs.astype(np.float64).sum(-1) - 1)
    assert missed.max() > 1e-9  # what a plain cast would leave in the float64 table
    with jax.enable_x64(True):
        tables = [grid_price_table(setting, policy, jnp.float64)]
        if setting.resources == 1:
            tables.append(price_table(setting, policy, jnp.float64))
    for table in tables:
        widened = np.asarray(table.probs)
        assert widened.dtype == np.float64
        assert np.abs(widened.sum(-1) - 1).max() < 1e-15
        np.testing.assert_allclose(widened, probs.reshape(widened.shape), rtol=2 * missed.max())
