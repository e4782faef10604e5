"""Measured competitive ratio (docs/method.md §5): the worst of several sources, alike for
every algorithm.

Sources: ``exact`` (the DP certificate of a deterministic policy: over (round, units) for
K = 1, with the closed form in the small-demand limit beyond the DP's reach, and over the
product grid for K >= 2; ``null`` where neither fits the work limit), ``adversary`` (a
best response found from scratch against the frozen policy: the training loop's oracle, fresh
state-conditioned adversary networks then local search in instance space, with a larger
budget, for every K), ``families`` (the known hard inputs on a fine grid of
stopping densities) and ``random`` (a fixed seeded set of instances). For a randomised
policy or a mixture the certificate gives an ``upper_bound`` on its oblivious CR instead,
reported beside the measured CR (which is the worst instance found) and not part of it:
together they bracket the true CR. Every ratio is computed in float64; an algorithm that
earns nothing where OPT earns something has ratio ``inf``.

Welfare of a randomised policy on a fixed instance is its exact expectation (K = 1, backward
induction) or a Monte Carlo mean (K >= 2). The adaptive ``ramp`` family is used for
deterministic policies only (against them it is an oblivious input), so every source's figure
is the ratio of an instance an oblivious adversary can write: a lower bound on the CR.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from advonline import parallel
from advonline.configs import OracleBudget
from advonline.errors import InputError
from advonline.evaluation import (
    Budget,
    SourceClock,
    SourceRatio,
    cross_checked,
    evaluation_key,
)
from advonline.mixture import SnapshotMixture
from advonline.preflight import as_float
from advonline.problems.posted_price import certify, grid_certify
from advonline.problems.posted_price.adversary import build_adversary
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.families import (
    FAMILY_NAMES,
    family_demand_pairs,
    make_family,
    random_instances,
    stopping_densities,
    write_out,
)
from advonline.problems.posted_price.model import (
    BuyerSource,
    Instance,
    Policy,
    Setting,
    expected_welfare_exact,
    mean_welfare,
    repeat_each,
    simulate,
)
from advonline.problems.posted_price.optimum import (
    greedy_fill_optimum,
    lp_optimum,
    milp_optimum,
    offline_optimum,
)
from advonline.problems.posted_price.oracles import best_responses, mixture_search, random_types
from advonline.problems.posted_price.traces import check_buyers, load_trace
from advonline.problems.posted_price.typed_payoffs import algorithm_table, typed_payoffs
from advonline.ratio import format_ratio, ratios

SOURCE_NAMES = ("exact", "adversary", "families", "random")


#: The fresh adversary networks of source ``adversary`` are conditioned on the algorithm's
#: state as they write (they find far worse inputs than noise-conditioned ones;
#: problems/posted_price/adversary.py), with this entropy bonus.
ADVERSARY_CONDITIONING = "state"
ADVERSARY_ENTROPY = 1.0
#: The largest T x states x instances the fresh adversary scores (states: the utilisation grid,
#: (G + 1)^K), for the networks and for the search alike; the largest exact DP sweep (state x
#: candidate updates) the certificate attempts.
ADVERSARY_WORK_LIMIT = 1e10
EXACT_WORK_LIMIT = certify.DEFAULT_WORK_LIMIT
GRID_WORK_LIMIT = grid_certify.DEFAULT_WORK_LIMIT


def oracle_budget(budget: Budget) -> OracleBudget:
    """The training loop's best-response oracle with the evaluator's budget (source
    ``adversary``)."""
    return OracleBudget(
        restarts=budget.adversary_restarts,
        adversary_steps=budget.adversary_steps,
        adversary_batch=budget.adversary_batch,
        chains=budget.search_chains,
        candidates=budget.search_candidates,
        search_steps=budget.search_steps,
    )


def small_demand_regime(setting: Setting) -> bool:
    """Demands small and rounds many enough for the closed-form limit to describe the setting:
    max demand <= 1% of capacity and room for two capacities' worth of buyers."""
    return setting.max_demand <= 0.01 and setting.rounds * setting.max_demand >= 2


def upper_bound(setting: Setting, policy: Policy, budget: Budget) -> SourceRatio:
    """For a randomised policy or a mixture, the certificate's bound on its oblivious CR
    (:func:`~posted_price.grid_certify.certify_policy`): the measured CR (the worst instance
    found) and this bound bracket the true CR."""
    if policy.deterministic:
        return SourceRatio(None, "deterministic: the exact source is the CR itself")
    found = grid_certify.certify_policy(setting, policy, _work_limit(setting))
    return SourceRatio(found.ratio, found.note)


def _work_limit(setting: Setting) -> float:
    """The certificate's work limit: the K = 1 DP's, or the product-grid programme's."""
    return EXACT_WORK_LIMIT if setting.resources == 1 else GRID_WORK_LIMIT


def exact_source(setting: Setting, policy: Policy, budget: Budget) -> SourceRatio:
    """The DP certificate where it fits the budget, else the closed form in its regime
    (deterministic policies; a randomised policy gets :func:`upper_bound` instead)."""
    if not policy.deterministic:
        return SourceRatio(
            None, "exact CR for deterministic policies only: the certificate bounds it (bound)"
        )
    found = grid_certify.certify_policy(setting, policy, _work_limit(setting))
    if found.ratio is not None:
        return SourceRatio(found.ratio, found.note)
    if setting.resources != 1:
        return SourceRatio(None, found.note)
    if not small_demand_regime(setting):
        return SourceRatio(None, f"{found.note}; the closed form covers only small demands")
    closed = certify.certify_closed_form(setting, policy)
    if closed.ratio is None:
        return SourceRatio(None, f"{found.note}; {closed.note}")
    return SourceRatio(closed.ratio, f"closed form, {closed.note} (DP skipped: {found.note})")


def expected_welfare(
    setting: Setting, policy: Policy, instances: Instance, key: jax.Array, samples: int
) -> np.ndarray:
    """E[ALG] on each fixed instance ``[B]``: one run for deterministic policies, exact
    backward induction for randomised K = 1, else the mean of ``samples`` runs."""
    if not policy.deterministic and setting.resources == 1:
        return np.asarray(_expected_welfare_batch(setting, policy, instances))
    return np.asarray(mean_welfare(setting, policy, instances, key, samples))


_expected_welfare_batch = jax.jit(
    jax.vmap(expected_welfare_exact, in_axes=(None, None, 0)), static_argnums=0
)


def _source_ratios(
    setting: Setting,
    policy: Policy,
    source: BuyerSource,
    count: int,
    adaptive: bool,
    key: jax.Array,
    samples: int,
    mesh: Mesh | None = None,
) -> np.ndarray:
    """Ratio OPT / E[ALG] of each member of a batch of ``count`` sources (split over the
    devices of ``mesh``, if given)."""
    if not adaptive:
        instances = parallel.spread(write_out(setting, source, count), mesh)
        return ratios(
            offline_optimum(setting, instances),
            expected_welfare(setting, policy, instances, key, samples),
        )
    runs_each = 1 if policy.deterministic else samples
    repeated = parallel.spread(repeat_each(source, runs_each), mesh)
    keys = parallel.spread(jax.random.split(key, count * runs_each), mesh)
    runs = simulate(setting, policy, repeated, keys)
    opt = np.asarray(offline_optimum(setting, runs.instance)).reshape(count, runs_each).mean(-1)
    return ratios(opt, np.asarray(runs.welfare).reshape(count, runs_each).mean(-1))


def adversary_work(setting: Setting, budget: Budget, members: int = 0) -> tuple[float, float]:
    """The fresh adversary's work, ``T x states x instances`` scored (states: the utilisation
    grid, (G + 1)^K): its networks' and its local search's, against one policy (``members``
    0) or a mixture of ``members`` networks (searched alone, each member scored); ``inf``
    past float's range."""
    per_instance = setting.rounds * (setting.grid_size + 1) ** setting.resources
    networks = budget.adversary_restarts * budget.adversary_steps * budget.adversary_batch
    search = budget.search_chains * budget.search_candidates * budget.search_steps
    networks_work = 0 if members else per_instance * networks
    return as_float(networks_work), as_float(per_instance * search * max(members, 1))


def adversary_skipped(setting: Setting, budget: Budget, members: int = 0) -> str | None:
    """Why source ``adversary`` does not run on ``setting`` (its note), or None where it runs:
    for several resources with indivisible buyers, or where its networks, or one step of its
    search, would pass :data:`ADVERSARY_WORK_LIMIT` (a search over it takes fewer steps)."""
    if setting.resources > 1 and not setting.divisible:
        return (
            "no oracle for several resources with indivisible buyers: it scores inputs by "
            "an optimum inside jit, for them a MILP (HiGHS, host only)"
        )
    networks, search = adversary_work(setting, budget, members)
    if networks > ADVERSARY_WORK_LIMIT:
        return (
            f"the oracle's networks need {networks:.1e} state updates, over the limit "
            f"{ADVERSARY_WORK_LIMIT:.0e}"
        )
    if budget.search_steps and search / budget.search_steps > ADVERSARY_WORK_LIMIT:
        return (
            f"one local-search step needs {search / budget.search_steps:.1e} state "
            f"updates, over the limit {ADVERSARY_WORK_LIMIT:.0e}"
        )
    return None


def adversary_source(
    setting: Setting,
    policy: Policy,
    budget: Budget,
    key: jax.Array,
    starts=None,
    exact: SourceRatio | None = None,
) -> SourceRatio:
    """A best response computed from scratch against the frozen policy (method.md §5, source
    1), with the same budget and seed for every algorithm: the training loop's own oracle
    (:func:`~posted_price.oracles.best_responses`) with the evaluator's budget and key, for every
    K. ``adversary_restarts`` fresh state-conditioned networks, then local search whose chains
    start half from ``starts`` (buyer types ``[S, T]``: a trained run's archive, hardest
    first) and random sequences, and half from the networks' finds; against a mixture of
    networks chosen once per input (advonline/mixture.py) the local search alone, on the
    mixture's weighted payoff. Its hardest finds are scored again and the worst of those is the
    figure, the ratio of an input an oblivious adversary can write: K = 1 through the
    simulator's exact expectation (:func:`expected_welfare`), the path every other source
    takes; K >= 2 by exact backward induction on the product grid against HiGHS's exact OPT.

    Given the policy's ``exact`` source (its DP certificate, not the closed form: the policy
    is deterministic) the search's first chain starts at the instance the DP's worst strategy writes
    (:func:`~posted_price.certify.worst_runs`): the search is then a cross-check of the
    certificate (advonline/evaluation.py, "Measured once")."""
    mixture = isinstance(policy, SnapshotMixture)
    members = policy.size if mixture else 0
    if (skipped := adversary_skipped(setting, budget, members)) is not None:
        return SourceRatio(None, skipped)
    config = AdversaryConfig(
        batch=budget.adversary_batch,
        conditioning=ADVERSARY_CONDITIONING,
        entropy=ADVERSARY_ENTROPY,
    )
    model = build_adversary(setting, config)
    searched = oracle_budget(budget)
    fewer = ""
    if (search_work := adversary_work(setting, budget, members)[1]) > ADVERSARY_WORK_LIMIT:
        # a large grid: fewer steps, said in the note
        steps = int(budget.search_steps * ADVERSARY_WORK_LIMIT / search_work)
        searched = dataclasses.replace(searched, search_steps=steps)
        fewer = f" (of {budget.search_steps}: the work limit {ADVERSARY_WORK_LIMIT:.0e})"
    key_starts, key_oracle, key_rescore = jax.random.split(key, 3)
    vocabulary = model.buyer_types
    known = np.zeros((0, setting.rounds), np.int32) if starts is None else np.asarray(starts)
    if exact is not None and exact.ratio is not None and math.isfinite(exact.ratio):
        key_worst = jax.random.fold_in(key, _CERTIFICATE_START)
        runs = certify.worst_runs(setting, policy, exact.ratio, key_worst, 1)
        known = np.concatenate([vocabulary.tokens(*runs), known])
    known = known.astype(np.int32)[: budget.search_chains // 2]
    fresh = random_types(vocabulary, key_starts, budget.search_chains // 2, setting.rounds)
    starts = jnp.concatenate([jnp.asarray(known), fresh[len(known) :]])
    search = (
        f"local search {budget.search_chains} chains ({len(known)} from known hard inputs) "
        f"x {budget.search_candidates} candidates "
        f"x {searched.search_steps} steps{fewer}, seed {budget.seed}"
    )
    if mixture:
        sales = member_sale_tables(setting, model, policy)
        weights = jnp.asarray(policy.weights, jnp.float64)
        found = mixture_search(
            setting, vocabulary, sales, weights, searched, key_oracle, jnp.float64, starts
        )
        note = f"oracle against the mixture of {policy.size} networks: {search}"
    else:
        table = algorithm_table(setting, policy, jnp.float64)
        found = best_responses(
            setting, model, config, table, searched, key_oracle, jnp.float64, starts
        )
        note = (
            f"oracle: {searched.restarts} fresh {config.conditioning}-conditioned "
            f"adversary network(s) x {budget.adversary_steps} steps x {budget.adversary_batch} "
            f"instances, then {search}"
        )
    hardest = found.best(RESCORED)
    instances = vocabulary.instances(hardest.types, jnp.float64)
    optimum = offline_optimum(setting, instances)
    if setting.resources == 1:
        welfare = expected_welfare(setting, policy, instances, key_rescore, budget.samples)
    else:  # E[ALG] = OPT x the exact payoff E[ALG] / OPT, per member, weighted
        if not mixture:  # the table the oracle searched against, as a one-member mixture
            sales = model.type_sale_table(table, jnp.float64)[None]
            weights = jnp.ones(1, jnp.float64)
        payoffs = jax.lax.map(  # one member at a time: no copy of every table at once
            lambda sale: typed_payoffs(setting, vocabulary, sale, hardest.types, optimum), sales
        )
        welfare = np.asarray(optimum) * np.asarray(weights @ payoffs)
    rescored = ratios(optimum, welfare)
    index = int(np.argmax(rescored))
    worst = jax.tree.map(lambda leaf: np.asarray(leaf[index]).round(6).tolist(), instances)
    return SourceRatio(
        float(rescored[index]), note, {"values": worst.values, "demands": worst.demands}
    )


def member_sale_tables(setting: Setting, model, mixture: SnapshotMixture) -> jax.Array:
    """``[M, T, S, types]``: each member's per-type sale table, built one member at a time
    into the stacked result (``lax.map``), so that the peak holds the M tables and one
    member's temporaries, not a second copy of them all."""

    def one(index):
        table = algorithm_table(setting, mixture.member(index), jnp.float64)
        return model.type_sale_table(table, jnp.float64)

    return jax.lax.map(one, jnp.arange(mixture.size))


#: The oracle's finds re-scored exactly (the hardest few).
RESCORED = 8
#: Folded into the adversary source's key for the draw from the DP's worst strategy (kept
#: apart from the search's own keys, which every policy shares).
_CERTIFICATE_START = 0xCE27


def families_source(
    setting: Setting, policy: Policy, budget: Budget, key: jax.Array, mesh: Mesh | None = None
) -> SourceRatio:
    """Worst ratio over the hard families, every stopping density and family demand.

    The adaptive ``ramp`` reads the posted price; against a randomised policy that would be an
    adversary who sees the price draw (stronger than oblivious), so randomised policies get
    the oblivious families only and every figure here is a real instance's ratio.
    """
    names = FAMILY_NAMES if policy.deterministic else tuple(n for n in FAMILY_NAMES if n != "ramp")
    stops = stopping_densities(setting, budget.family_members, jnp.float64)
    rising, final = family_demand_pairs(setting, jnp.float64)
    worst, worst_input = -math.inf, None
    for name, key_family in zip(names, jax.random.split(key, len(names)), strict=True):
        keep = np.ones(rising.shape[0], bool)
        if name == "flood":  # one demand vector: the pairs with both the same
            keep = np.all(np.asarray(rising == final), axis=-1)
        pairs = int(keep.sum())
        stop_grid = jnp.repeat(stops, pairs)
        rising_grid = jnp.tile(rising[keep], (stops.shape[0], 1))
        final_grid = jnp.tile(final[keep], (stops.shape[0], 1))
        sources = make_family(name, setting, stop_grid, rising_grid, final_grid)
        adaptive = name == "ramp"
        found = _source_ratios(
            setting, policy, sources, stop_grid.shape[0], adaptive, key_family, budget.samples, mesh
        )
        index = int(np.argmax(found))
        if found[index] > worst:
            worst = float(found[index])
            worst_input = {
                "family": name,
                "stop_density": float(stop_grid[index]),
                "demand": np.asarray(rising_grid[index]).tolist(),
                "final_demand": np.asarray(final_grid[index]).tolist(),
            }
    note = (
        f"{', '.join(names)} x {budget.family_members} stopping densities "
        f"x {rising.shape[0]} (rising, final) demand pairs"
    )
    return SourceRatio(worst, note, worst_input)


def random_source(
    setting: Setting, policy: Policy, budget: Budget, key: jax.Array, mesh: Mesh | None = None
) -> SourceRatio:
    """Worst ratio over the fixed seeded random instances."""
    key_instances, key_prices = jax.random.split(key)
    instances = random_instances(setting, key_instances, budget.random_instances, jnp.float64)
    instances = parallel.spread(instances, mesh)
    found = ratios(
        offline_optimum(setting, instances),
        expected_welfare(setting, policy, instances, key_prices, budget.samples),
    )
    index = int(np.argmax(found))
    note = f"{budget.random_instances} instances, seed {budget.seed}"
    return SourceRatio(float(found[index]), note, {"index": index})


def sources(
    setting: Setting,
    policy: Policy,
    budget: Budget,
    key: jax.Array,
    mesh: Mesh | None = None,
    starts=None,
    clock: SourceClock | None = None,
) -> tuple[dict[str, SourceRatio], SourceRatio]:
    """Posted pricing's sources of the evaluator (module docstring) and the DP's upper bound on
    a randomised policy's CR, in float64 (the caller enables it). With a ``mesh`` the families'
    and random instances are split over its devices; the fresh adversary and the certificate
    run on one device. ``starts``: buyer types ``[S, T]`` the local search also starts from;
    ``clock`` times each source. Where ``exact`` is the CR the adversary source is a
    cross-check of it (:func:`~advonline.evaluation.cross_check_budget`)."""
    clock = clock or SourceClock("policy")
    key_adversary, key_families, key_random = jax.random.split(key, 3)
    found = {"exact": clock.run("exact", lambda: exact_source(setting, policy, budget))}
    exact = found["exact"]

    def adversary() -> SourceRatio:
        if exact.ratio is None or setting.resources != 1:  # no worst run to start from
            return adversary_source(setting, policy, budget, key_adversary, starts)
        if exact.note.startswith("closed form"):
            return SourceRatio(
                None,
                "no cross-check of the closed form: the setting is beyond "
                "the DP, whose worst run the cross-check starts from",
            )
        return cross_checked(
            budget, lambda cut: adversary_source(setting, policy, cut, key_adversary, starts, exact)
        )

    found["adversary"] = clock.run("adversary", adversary)
    found["families"] = clock.run(
        "families", lambda: families_source(setting, policy, budget, key_families, mesh)
    )
    found["random"] = clock.run(
        "random", lambda: random_source(setting, policy, budget, key_random, mesh)
    )
    return found, clock.run("upper_bound", lambda: upper_bound(setting, policy, budget))


@dataclasses.dataclass(frozen=True)
class TraceResult:
    """One algorithm on a user's trace, against that trace's exact offline optimum."""

    algorithm: str
    welfare: float
    revenue: float
    ratio: float

    def to_json(self) -> dict:
        """The ``results`` entry of ``advonline evaluate --instances ... --json``."""
        return dataclasses.asdict(self)


def trace_optimum(setting: Setting, instance: Instance) -> float:
    """Exact OPT of one trace: greedy fill (K = 1 divisible) or HiGHS LP / MILP (gap 0)."""
    values, demands = np.asarray(instance.values), np.asarray(instance.demands)
    capacities = np.asarray(setting.capacities, np.float64)
    if setting.divisible and setting.resources == 1:
        with jax.enable_x64(True):
            return float(
                greedy_fill_optimum(instance.values, instance.demands[:, 0], capacities[0])
            )
    solve = lp_optimum if setting.divisible else milp_optimum
    return solve(values, demands, capacities)


def run_trace(
    setting: Setting, name: str, policy: Policy, instance: Instance, budget: Budget
) -> TraceResult:
    """Welfare and revenue of ``policy`` on the trace (mean of sampled runs if randomised)."""
    runs = 1 if policy.deterministic else budget.samples
    with jax.enable_x64(True):
        batch = repeat_each(jax.tree.map(lambda leaf: leaf[None], instance), runs)
        played = simulate(
            setting, policy, batch, jax.random.split(evaluation_key(budget.seed), runs)
        )
        welfare = float(np.mean(played.welfare))
        revenue = float(np.mean(played.revenue))
    optimum = trace_optimum(setting, instance)
    return TraceResult(name, welfare, revenue, float(ratios(optimum, welfare)))


#: What a trace sets itself: its rounds and demands (the setting's other fields apply to it).
SET_BY_TRACE = ("rounds", "max_demand", "demand_levels")


def trace(setting_table: dict, path: str, names: tuple[str, ...], budget: Budget):
    """``advonline evaluate --instances TRACE.csv``: the baselines ``names`` run on the buyer
    trace at ``path``, each against the trace's exact offline optimum; ``setting_table`` gives
    the densities, capacities and divisibility (the trace gives the rounds and demands).
    Returns the report and its printed form; InputError says what is wrong."""
    from advonline.baselines.posted_price import BASELINES

    for field in SET_BY_TRACE:
        if field in setting_table:
            raise InputError(
                f"--setting {field} does not apply to --instances (the trace sets rounds and "
                "demands; the baselines are measured on it)"
            )
    values, demands = load_trace(path)
    resources = demands.shape[1]
    if setting_table.get("resources", resources) != resources:
        raise InputError(
            f"--setting resources={setting_table['resources']} but the trace has {resources} "
            "demand columns"
        )
    capacities = tuple(setting_table.get("capacities", (1.0,) * resources))
    table = {**setting_table, "resources": resources, "capacities": capacities}
    trace_setting = Setting.from_config({**table, "rounds": len(values), "max_demand": 1.0})
    check_buyers(values, demands, trace_setting.low, trace_setting.high, capacities, path)
    instance = Instance(values=values, demands=demands)
    results = [
        run_trace(trace_setting, name, BASELINES[name](trace_setting), instance, budget)
        for name in names
    ]
    optimum = trace_optimum(trace_setting, instance)
    report = {
        "setting": {**trace_setting.describe(), "trace": str(path)},
        "offline_optimum": optimum,
        "results": [r.to_json() for r in results],
    }
    kind = "divisible" if trace_setting.divisible else "indivisible"
    lines = [
        f"trace {path}: {len(values)} buyers, K={resources}, capacities {list(capacities)}, "
        f"{kind}, offline optimum {optimum:.6g}",
        f"{'algorithm':<12}{'welfare':>12}{'revenue':>12}{'OPT/ALG':>10}",
    ]
    for r in results:
        lines.append(
            f"{r.algorithm:<12}{r.welfare:>12.6g}{r.revenue:>12.6g}{format_ratio(r.ratio):>10}"
        )
    return report, "\n".join(lines)
