"""Best-response oracles: given a frozen algorithm and a budget, find hard instances.

Every oracle takes the algorithm as its table over every state
(:func:`~posted_price.typed_payoffs.algorithm_table`: ``[T, G + 1, A]`` for K = 1,
``[T, S, K, A]`` on the product grid for K >= 2) and returns :class:`Found`: instances as buyer
type sequences (:mod:`posted_price.buyer_types`) with their ratios ``OPT / E[ALG]``, each the
ratio of a fixed input (oblivious; ``E[ALG]`` exact by backward induction; OPT exact for K = 1
and K = 2, and a primal-feasible lower bound for K >= 3, so a ratio is never inflated). Two
oracles, each with independent restarts vmapped in one jitted call:

- :func:`adversary_oracle`: fresh adversary networks trained from scratch with REINFORCE
  (:func:`~posted_price.adversary.best_response`), ``restarts`` seeds at once; every step's worst
  instance is a candidate.
- :func:`local_search_oracle`: hill climbing in instance space, ``chains`` independent
  chains. Each step every chain proposes ``candidates`` mutations of its instance (change a
  buyer's density or demand, copy a neighbour, swap two rounds, lengthen or cut a flood,
  shift a ramp, insert or delete a round) and moves to the best if it does not lower the
  ratio. Chains start from archived instances, the adversary's finds, or random sequences.

:func:`best_responses` runs both, the search seeded with the adversary's finds, and is the
single code path of the training loop's oracles, its stronger probe and the evaluator's fresh
adversary (the same call with a larger budget and other seeds).

Given a device mesh (advonline/parallel.py), the restarts and the chains are split over its
devices: each is computed whole on one device, with no sum across them, so the finds equal
one device's.

The ratio of a typed instance is cheap: the chance that each buyer type buys in each state is
tabled once per algorithm (:func:`~posted_price.typed_payoffs.type_sale_table`), so an
instance's sale probabilities are a gather and its ``E[ALG]`` one backward induction
(:func:`~posted_price.typed_payoffs.typed_payoffs`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from advonline.configs import OracleBudget
from advonline.parallel import shard_batch, spread
from advonline.problems.posted_price.adversary import AdversaryModel, best_response
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import PriceDistribution, Setting
from advonline.problems.posted_price.optimum import device_optimum
from advonline.problems.posted_price.typed_payoffs import typed_payoffs
from advonline.ratio import ratio_of_payoff
from advonline.search import Found, hill_climb, join

#: Mutation kinds of the local search (names for documentation and tests).
MUTATIONS = (
    "density",
    "demand",
    "copy-neighbour",
    "swap",
    "lengthen-flood",
    "cut",
    "shift-ramp",
    "insert",
    "delete",
)


def typed_ratios(
    setting: Setting,
    vocabulary: BuyerTypes,
    sale: jax.Array,
    types: jax.Array,
    dtype,
    weights: jax.Array | None = None,
) -> jax.Array:
    """``OPT / E[ALG]`` ``[B]`` of instances given as types ``[B, T]``, for the algorithm whose
    per-type sale table is ``sale`` ``[T, S, types]``; or, given ``weights`` ``[M]``, for the
    mixture chosen once per input (advonline/mixture.py) whose members' tables ``sale`` stacks
    ``[M, T, S, types]``: ``E[ALG] = sum_m weights[m] E[ALG_m]`` (members one at a time)."""
    optimum = device_optimum(setting, vocabulary.instances(types, dtype))

    def payoff_of(member_sale: jax.Array) -> jax.Array:
        member = member_sale.astype(dtype)
        return typed_payoffs(setting, vocabulary, member, types, optimum, differentiable=False)

    if weights is None:
        payoff = payoff_of(sale)
    else:
        payoff = weights.astype(dtype) @ jax.lax.map(payoff_of, sale)
    return ratio_of_payoff(payoff)


def random_types(vocabulary: BuyerTypes, key: jax.Array, count: int, rounds: int) -> jax.Array:
    """``[count, rounds]`` uniformly random buyer types (nobody excluded)."""
    return jax.random.randint(key, (count, rounds), 0, vocabulary.nobody)


def mutate(vocabulary: BuyerTypes, key: jax.Array, types: jax.Array) -> jax.Array:
    """One random mutation (:data:`MUTATIONS`) of a type sequence ``[T]``."""
    rounds = types.shape[0]
    levels, demands = len(vocabulary.densities), len(vocabulary.demands)
    nobody = vocabulary.nobody
    key_kind, key_at, key_other, key_length, key_step, key_fresh = jax.random.split(key, 6)
    at = jax.random.randint(key_at, (), 0, rounds)
    other = jax.random.randint(key_other, (), 0, rounds)
    length = jax.random.randint(key_length, (), 1, max(rounds // 4, 1) + 1)
    step = jax.random.choice(key_step, jnp.array([-8, -4, -2, -1, 1, 2, 4, 8]))
    fresh = jax.random.randint(key_fresh, (), 0, nobody)  # a random real buyer type
    position = jnp.arange(rounds)
    empty = types == nobody
    density = jnp.where(empty, fresh // demands, types // demands)
    demand = jnp.where(empty, fresh % demands, types % demands)

    def moved_density(shift):
        return jnp.clip(density + shift, 0, levels - 1) * demands + demand

    def set_at(value):
        return types.at[at].set(value.astype(types.dtype))

    def density_step():
        return set_at(moved_density(step)[at])

    def demand_change():  # a new demand level, or nobody
        level = fresh % (demands + 1)
        return set_at(jnp.where(level == demands, nobody, density[at] * demands + level))

    def copy_neighbour():
        source = jnp.clip(at + jnp.where(step > 0, 1, -1), 0, rounds - 1)
        return set_at(types[source])

    def swap():
        return types.at[at].set(types[other]).at[other].set(types[at])

    def lengthen_flood():
        return jnp.where((position > at) & (position <= at + length), types[at], types)

    def cut():
        return jnp.where((position >= at) & (position < at + length), nobody, types)

    def shift_ramp():
        start, stop = jnp.minimum(at, other), jnp.maximum(at, other) + 1
        inside = (position >= start) & (position < stop) & ~empty
        return jnp.where(inside, moved_density(step), types)

    def insert():  # buyer `at` twice, the rest one round later, the last dropped
        return jnp.where(position > at, types[jnp.maximum(position - 1, 0)], types)

    def delete():  # buyer `at` removed, the rest one round earlier, nobody at the end
        later = jnp.where(
            position + 1 < rounds, types[jnp.minimum(position + 1, rounds - 1)], nobody
        )
        return jnp.where(position >= at, later, types)

    branches = (
        density_step,
        demand_change,
        copy_neighbour,
        swap,
        lengthen_flood,
        cut,
        shift_ramp,
        insert,
        delete,
    )
    kind = jax.random.randint(key_kind, (), 0, len(branches))
    # every branch in the sequence's own dtype (under x64 some would widen to int64)
    same_dtype = [lambda branch=branch: branch().astype(types.dtype) for branch in branches]
    return jax.lax.switch(kind, same_dtype)


def propose(
    vocabulary: BuyerTypes, key: jax.Array, types: jax.Array, place=lambda keys: keys
) -> jax.Array:
    """A proposal for each type sequence of ``types`` ``[N, T]``: one to three mutations in a
    row (each after the first with probability 1/2), every sequence from its own key (the
    keys put where ``place`` says, e.g. split over devices)."""
    keys = place(jax.random.split(key, types.shape[0]))
    return jax.vmap(functools.partial(_proposal, vocabulary))(keys, types)


def _proposal(vocabulary: BuyerTypes, key: jax.Array, types: jax.Array) -> jax.Array:
    """One to three mutations of one sequence ``[T]`` in a row."""
    key_first, key_more, key_keep = jax.random.split(key, 3)
    keys = jnp.concatenate([key_first[None], jax.random.split(key_more, 2)])
    apply = jnp.concatenate([jnp.ones(1, bool), jax.random.bernoulli(key_keep, 0.5, (2,))])

    def one(proposed, key_and_apply):
        key_next, applied = key_and_apply
        return jnp.where(applied, mutate(vocabulary, key_next, proposed), proposed), None

    # one loop body, not three inlined copies of the nine-way switch (under vmap each copy
    # computes every branch): the local search compiles in less than half the time
    return jax.lax.scan(one, types, (keys, apply))[0]


@functools.partial(jax.jit, static_argnums=(0, 1, 4, 5, 6, 8))
def local_search_oracle(
    setting: Setting,
    vocabulary: BuyerTypes,
    sale: jax.Array,
    starts: jax.Array,
    candidates: int,
    steps: int,
    dtype,
    key: jax.Array,
    mesh: Mesh | None = None,
    weights: jax.Array | None = None,
) -> Found:
    """Hill climbing (:func:`~advonline.search.hill_climb`, ``candidates`` proposals per
    chain and step) from each start ``[C, T]`` (one chain each) against the algorithm whose
    per-type sale table is ``sale`` (a mixture's stacked tables with its ``weights``: see
    :func:`typed_ratios`): the best instance of each chain and its ratio ``[C]``; the chains
    split over ``mesh``'s devices where given."""
    score = functools.partial(typed_ratios, setting, vocabulary, sale, dtype=dtype, weights=weights)
    place = functools.partial(shard_batch, mesh=mesh)
    proposals = functools.partial(propose, vocabulary, place=place)
    types, ratios = hill_climb(score, proposals, key, starts, steps, candidates, place)
    return Found(types, ratios)


def adversary_oracle(
    setting: Setting,
    model: AdversaryModel,
    config: AdversaryConfig,
    table: PriceDistribution,
    restarts: int,
    steps: int,
    dtype,
    key: jax.Array,
    mesh: Mesh | None = None,
) -> tuple[Found, jax.Array]:
    """``restarts`` fresh adversary networks (vmapped), each trained ``steps`` steps against
    the frozen ``table``: every step's worst instance ``[restarts * steps]``, and the final
    parameters of each network (a pytree with a leading ``restarts`` axis). Given ``mesh``,
    the restarts are split over its devices (their keys are placed there; computation
    follows)."""
    train_one = functools.partial(best_response, setting, model, table, config, steps, dtype)
    found = jax.vmap(train_one)(spread(jax.random.split(key, restarts), mesh))
    types = found.types_by_step.reshape(restarts * steps, setting.rounds)
    return Found(types, found.ratio_by_step.reshape(-1)), found.params


def best_responses(
    setting: Setting,
    model: AdversaryModel,
    config: AdversaryConfig,
    table: PriceDistribution,
    budget: OracleBudget,
    key: jax.Array,
    dtype,
    starts: jax.Array | None = None,
    mesh: Mesh | None = None,
) -> Found:
    """Both oracles against the frozen ``table``: the adversary restarts, then local search
    whose chains start from ``starts`` ``[S, T]`` (e.g. archived instances), the adversary's
    best finds and random sequences, in that order of priority. Returns everything found:
    the adversary's per-step worst instances and every chain's best. Restarts and chains are
    split over ``mesh``'s devices where given."""
    key_adversary, key_random, key_search = jax.random.split(key, 3)
    vocabulary = model.buyer_types
    found = Found.nothing(setting.rounds, dtype)
    if budget.restarts and budget.adversary_steps:
        adversary_config = dataclasses.replace(config, batch=budget.adversary_batch)
        found, _ = adversary_oracle(
            setting,
            model,
            adversary_config,
            table,
            budget.restarts,
            budget.adversary_steps,
            dtype,
            key_adversary,
            mesh,
        )
    if not (budget.chains and budget.search_steps):
        return found
    pool = [found.best(budget.chains).types]
    if starts is not None:
        pool.insert(0, starts[: budget.chains])
    sale = model.type_sale_table(table, dtype)
    searched = _search(
        setting, vocabulary, sale, None, budget, pool, key_random, key_search, dtype, mesh
    )
    return join(found, searched)


def mixture_search(
    setting: Setting,
    vocabulary: BuyerTypes,
    sales: jax.Array,
    weights: jax.Array,
    budget: OracleBudget,
    key: jax.Array,
    dtype,
    starts: jax.Array | None = None,
    mesh: Mesh | None = None,
) -> Found:
    """Local search against a mixture chosen once per input (advonline/mixture.py): members'
    per-type sale tables ``sales`` ``[M, T, S, types]`` and ``weights`` ``[M]``. The chains
    start from ``starts`` (e.g. the archived instances hardest for the mixture), then random
    sequences. The adversary network is not run: it writes instances along one algorithm's
    states, and a mixture visits each member's."""
    if not (budget.chains and budget.search_steps):
        return Found.nothing(setting.rounds, dtype)
    key_random, key_search = jax.random.split(key)
    pool = [] if starts is None else [starts[: budget.chains]]
    return _search(
        setting, vocabulary, sales, weights, budget, pool, key_random, key_search, dtype, mesh
    )


def _search(
    setting, vocabulary, sale, weights, budget, pool, key_random, key_search, dtype, mesh
) -> Found:
    """:func:`local_search_oracle` with ``budget.chains`` chains started from ``pool`` (a list
    of ``[n, T]`` type arrays, in order of priority) and topped up with random sequences."""
    pool = [*pool, random_types(vocabulary, key_random, budget.chains, setting.rounds)]
    chain_starts = jnp.concatenate(pool)[: budget.chains]
    return local_search_oracle(
        setting,
        vocabulary,
        sale,
        chain_starts.astype(jnp.int32),
        budget.candidates,
        budget.search_steps,
        dtype,
        key_search,
        mesh,
        weights,
    )
