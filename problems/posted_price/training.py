"""Posted pricing's training capabilities (advonline/problem.py), which the core's game
(:class:`advonline.game.Game`) calls in place of its defaults: docs/method.md §3.

**Per-round update** (the paper's method; ``algorithm.update = "per-round"``). For K = 1 the
algorithm's state is (round t, units sold u) and its action a price atom. For every instance
the exact continuation values come from backward induction, so the value of *every* action in
every state is ``Q_t(u, a) = V_{t+1}(u) + accept_t(a) G_t(u)`` (``G_t(u)``: what a sale adds).
The update is the all-action gradient
``sum_{t,u} P(s_t = u) sum_a grad pi(a | t, u) Q_t(u, a) / OPT``, with the exact probability
of reaching each state (a forward pass, the transpose of the backward one:
:func:`~posted_price.model.welfare_and_sale_weight`), i.e. the expectation over rollouts of
the paper's along-the-rollout sum: zero variance. Because ``sum_a grad pi = 0`` the
``V_{t+1}`` term drops out and the gradient is two matrix products over the batch
(``tests/test_game.py`` checks it equals the gradient of the exact expected payoff).
K >= 2 takes the exact gradient through the product-grid induction on the oracle loop's
buyer types, and values the actions by rollouts in the simultaneous step
(:mod:`posted_price.sampled_game`).

**Standard update** (ablation; ``"reinforce"``): sampled runs of the one simulator, the score
function of the sampled prices, the mean return of the other runs on the same instance as
baseline.

**Oracles**: payoffs and search over buyer types with a per-type sale table
(:mod:`posted_price.typed_payoffs`, :mod:`posted_price.oracles`), and the state-conditioned
writer (:mod:`posted_price.adversary`). **The certificate** (K = 1): the DP bound with draws
from its maximising adversary strategy, and certificate descent through the price table
(:mod:`posted_price.descent`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from advonline import ratio
from advonline.archive import on_padded_rows
from advonline.export import ExportError
from advonline.mixture import SnapshotMixture
from advonline.problem import Documents, Oracles, TrainingCertificate, Update, Views, Writer
from advonline.problems.posted_price import figures, grid_certify, policy_writer
from advonline.problems.posted_price.adversary import (
    AdversaryModel,
    build_adversary,
    payoffs_given_sales,
)
from advonline.problems.posted_price.certify import certify_and_draw, worst_runs
from advonline.problems.posted_price.config import (
    AdversaryConfig,
    HeadConfig,
    WriterOptions,
    read_head,
    writer_config,
)
from advonline.problems.posted_price.descent import descend_params, grid_descend_params
from advonline.problems.posted_price.learned import price_atoms
from advonline.problems.posted_price.model import (
    Buyer,
    Instance,
    accepts,
    price_table,
    repeat_each,
    simulate,
    welfare_and_sale_weight,
)
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.oracles import best_responses, mixture_search
from advonline.problems.posted_price.typed_payoffs import algorithm_table, typed_payoffs
from advonline.search import Found


def head(game) -> HeadConfig:
    """The run's ``[algorithm]`` keys of posted pricing (the pricing network and its update)."""
    return read_head(game.head_config)


def atoms(game) -> tuple[float, ...]:
    """The run's price atoms (geometric in [L, U])."""
    return price_atoms(game.setting, head(game).price_atoms)


def pricing(game):
    """The run's pricing network (:class:`~posted_price.networks.AlgorithmNetwork`)."""
    return game.head.module


def adversary_config(game) -> AdversaryConfig:
    """The writer's sizes and training (the run's ``[adversary]`` table, or its defaults,
    with posted pricing's options)."""
    return writer_config(game.adversary_config, game.options)


def writer_model(game) -> AdversaryModel:
    """The writer ``[adversary] conditioning`` names, over the run's buyer types (the game
    builds it once, as ``game.adversary``)."""
    return build_adversary(game.setting, adversary_config(game))


@dataclasses.dataclass(frozen=True)
class NetworkTable:
    """The game's pricing network as a function of its parameters: its float64 price table
    (:func:`~posted_price.typed_payoffs.algorithm_table`: ``[T, G + 1, A]`` for K = 1,
    ``[T, S, K, A]`` over the product grid for K >= 2). Hashable, so the certificate's sweeps
    and gradients compile once per game."""

    game: object

    def __call__(self, params: dict):
        return algorithm_table(self.game.setting, self.game.policy(params), jnp.float64)


# The update (advonline.problem.Update).


def update_draws(game) -> bool:
    """Whether the algorithm's update draws random numbers (REINFORCE does)."""
    return head(game).update == "reinforce"


def pool_update(game, params: dict, instances: Instance, optimum, weigh, key):
    """The pool's payoffs ``[P]`` and the ascent direction of ``sum_j w_j u_j``, ``w =
    weigh(payoffs)``: the per-round update (:func:`per_round_update`), or REINFORCE."""
    if not update_draws(game):
        return per_round_update(game, params, instances, optimum, weigh)
    payoff = game_payoffs(game, params, instances, optimum)
    return payoff, reinforce_gradient(game, params, instances, optimum, weigh(payoff), key)


def token_ascent(game, types: jax.Array, optimum: jax.Array, weigh: Callable):
    """``(params, key) -> ascent direction`` of ``sum_j w_j u_j`` on the instances ``types``
    with weights ``w = weigh(payoffs)``: the all-action per-round update for K = 1
    (:func:`per_round_update`), the exact gradient through the product-grid induction for
    K >= 2; with ``algorithm.update = "reinforce"`` (the ablation) REINFORCE on sampled runs
    with the same weights, ``key`` feeding its runs."""
    instances = game.adversary.instances(types, jnp.float32)

    def direction(params: dict, key: jax.Array):
        if game.setting.resources == 1:  # the simultaneous step's update, on these inputs
            return pool_update(game, params, instances, optimum, weigh, key)[1]
        if update_draws(game):
            payoff = token_payoffs(game, params, types, optimum)
            weights = jax.lax.stop_gradient(weigh(payoff))
            return reinforce_gradient(game, params, instances, optimum, weights, key)
        payoff, pull_back = jax.vjp(lambda p: token_payoffs(game, p, types, optimum), params)
        return pull_back(jax.lax.stop_gradient(weigh(payoff)))[0]

    return direction


UPDATE = Update(pool=pool_update, tokens=token_ascent, draws=update_draws)


# The oracles (advonline.problem.Oracles).


def token_optimum(game, types) -> np.ndarray:
    """OPT of the instances written as ``types`` ``[N, T]`` (host array). For K = 1 one
    jitted programme, the batch padded to a power of two (at least 32) so that the epochs'
    varying counts share a handful of compilations; K >= 2 by HiGHS on the host
    (:func:`~posted_price.optimum.offline_optimum`)."""
    types = np.asarray(types)
    if game.setting.resources != 1:
        instances = game.adversary.instances(jnp.asarray(types), jnp.float32)
        return np.asarray(offline_optimum(game.setting, instances))
    return on_padded_rows(functools.partial(_typed_optimum, game), types)


def token_payoffs(game, params: dict, types: jax.Array, optimum: jax.Array) -> jax.Array:
    """Exact payoffs ``E[ALG(I_j)] / OPT(I_j)`` ``[N]`` of the network ``params`` on the
    instances ``types`` ``[N, T]``: over the utilisation grid for K = 1
    (:func:`game_payoffs`), over the product grid for K >= 2
    (:func:`~posted_price.typed_payoffs.typed_payoffs`). Differentiable in ``params``."""
    model = game.adversary
    if game.setting.resources == 1:
        return game_payoffs(game, params, model.instances(types, jnp.float32), optimum)
    sale = member_table(game, params)
    return typed_payoffs(game.setting, model.buyer_types, sale, types, optimum)


def member_table(game, params: dict) -> jax.Array:
    """The network's per-type sale table (K >= 2, the product grid): what a mixture's
    member contributes to :func:`search_mixture` (a faster score than its payoffs)."""
    table = algorithm_table(game.setting, game.policy(params), jnp.float32)
    return game.adversary.type_sale_table(table, jnp.float32)


def search(game, params: dict, budget, key: jax.Array, starts) -> Found:
    """Both oracles (:func:`~posted_price.oracles.best_responses`) against the network,
    local search starting from ``starts`` ``[S, T]`` (or None)."""
    table = algorithm_table(game.setting, game.policy(params), jnp.float32)
    starts = None if starts is None else jnp.asarray(starts, jnp.int32)
    config = adversary_config(game)
    args = (game.setting, game.adversary, config, table, budget, key, jnp.float32)
    return best_responses(*args, starts, game.mesh)


def search_mixture(game, sales, weights, budget, key: jax.Array, starts) -> Found:
    """Local search (:func:`~posted_price.oracles.mixture_search`) against the mixture of
    members with sale tables ``sales`` (stacked :func:`member_table`) and ``weights``."""
    starts = None if starts is None else jnp.asarray(starts, jnp.int32)
    vocabulary = game.adversary.buyer_types
    weights = jnp.asarray(weights, jnp.float32)
    args = (game.setting, vocabulary, sales, weights, budget, key, jnp.float32)
    return mixture_search(*args, starts, game.mesh)


ORACLES = Oracles(
    payoffs=token_payoffs,
    optimum=token_optimum,
    best_responses=search,
    member=member_table,
    mixture_search=search_mixture,
)


def state_distributions(game, params: dict) -> jax.Array:
    """The network's distributions in every state: ``[T, G + 1, A]`` for K = 1,
    ``[T, S, K, A]`` for K >= 2."""
    if game.setting.resources == 1:
        return policy_probs(game, params, jnp.float32)
    return algorithm_table(game.setting, game.policy(params), jnp.float32).probs


# How training uses the certificate (advonline.problem.TrainingCertificate).


def certifies(game) -> bool:
    """Whether a network's CR has an exact upper bound in training: the DP certificate
    (K = 1), or the certificate over the product grid where ``algorithm.grid_certificate``
    asks for it (K >= 2)."""
    return game.setting.resources == 1 or head(game).grid_certificate


def certify(game, params: dict, start: float = 1.0, key: jax.Array | None = None):
    """The certificate's upper bound on the network's CR, iterated from ``start`` (an
    attained lower bound), None where there is none; and, given ``key``, the run's
    ``certificate_draws`` instances ``[N, T]`` (host token array) drawn from the adversary
    strategy that attains it (None without them). K = 1:
    :func:`~posted_price.certify.certify_and_draw`; K >= 2: the product grid's
    (:mod:`~posted_price.grid_certify`), whose draws take one more sweep. Float64, outside
    ``jit``."""
    count = 0 if key is None else game.certificate_draws
    policy = game.policy(params)
    if game.setting.resources == 1:
        found, runs = certify_and_draw(game.setting, policy, key, count, start=start)
    else:
        found = grid_certify.certify_grid(game.setting, policy, start=start)
        runs = None
        if count and found.ratio is not None and math.isfinite(found.ratio):
            runs = grid_certify.grid_worst_runs(game.setting, policy, found.ratio, key, count)
    return found.ratio, None if runs is None else game.adversary.buyer_types.tokens(*runs)


def draws_below(game, params: dict, ratio: float, key: jax.Array) -> np.ndarray:
    """The run's ``certificate_draws`` instances ``[N, T]`` (host token array) drawn from the
    adversary strategy that attains the DP's value just below ``ratio`` (an attained ratio)
    against the network (:func:`~posted_price.certify.worst_runs`; K >= 2:
    :func:`~posted_price.grid_certify.grid_worst_runs`): where no certificate is computed,
    instances the strategy makes at least that hard. One DP sweep, outside ``jit``."""
    draw = worst_runs if game.setting.resources == 1 else grid_certify.grid_worst_runs
    runs = draw(game.setting, game.policy(params), ratio, key, game.certificate_draws)
    return game.adversary.buyer_types.tokens(*runs)


def descent(game, params: dict, certificate: float, steps: int, learning_rate: float):
    """``steps`` steps of certificate descent from the network ``params``, whose certificate
    is ``certificate`` (:func:`~posted_price.descent.descend_params`, K = 1;
    :func:`~posted_price.descent.grid_descend_params`, K >= 2): its
    :class:`~posted_price.descent.Descended`, the best certified parameters cast back to the
    network's own precision. Float64, outside ``jit``."""
    run = descend_params if game.setting.resources == 1 else grid_descend_params
    found = run(game.setting, NetworkTable(game), params, certificate, steps, learning_rate)
    cast = jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), found.params, params)
    return found._replace(params=cast)


def descend(game, params: dict, certificate: float, steps: int, learning_rate: float):
    """The parameters :func:`descent` reaches: the best certified network, in its own
    precision."""
    return descent(game, params, certificate, steps, learning_rate).params


TRAINING_CERTIFICATE = TrainingCertificate(
    certifies=certifies, certify=certify, below=draws_below, descend=descend
)


# The writer (advonline.problem.Writer): the simultaneous step's view of the algorithm.


def frozen(game, params: dict):
    """The network's price table in every state: the state-conditioned adversary writes
    along it and every batch's payoffs come from it."""
    return price_table(game.setting, game.policy(params), jnp.float32)


def writing_inputs(table) -> tuple:
    return (table,)


def batch_payoffs(game, table, instances: Instance, optimum: jax.Array) -> jax.Array:
    return payoffs_from_probs(game, table.probs, instances, optimum)


def step_function(game) -> Callable | None:
    """The simultaneous loop's step for K >= 2, rollouts
    (:func:`~posted_price.sampled_game.sampled_game_step`); None for K = 1, whose exact values
    the core's step computes (:func:`advonline.simultaneous.game_step`)."""
    if game.setting.resources == 1:
        return None
    from advonline.problems.posted_price.sampled_game import sampled_game_step

    return sampled_game_step


WRITER = Writer(
    options=WriterOptions,
    build=writer_model,
    frozen=frozen,
    inputs=writing_inputs,
    payoffs=batch_payoffs,
    step=step_function,
)


# Policy files and views (advonline.problem.Documents, advonline.problem.Views).


def network_document(game, params: dict, deterministic: bool, provenance: dict) -> dict:
    """The policy file of the network ``params`` (or with ``deterministic`` its read-out)."""
    args = (game.setting, pricing(game), params, atoms(game), deterministic, provenance)
    return policy_writer.network_document(*args)


def mixture_document(game, mixture: SnapshotMixture, provenance: dict) -> dict:
    """The policy file of a mixture of snapshots chosen once per input."""
    return policy_writer.mixture_document(game.setting, mixture, provenance)


def table_document(game, policy, provenance: dict) -> dict:
    """The policy file of ``policy`` tabulated on the simulator's grid (K = 1; ExportError
    for more resources)."""
    if game.setting.resources != 1:
        raise ExportError(
            f"table policy files (version 1) cover one resource; this run has K = "
            f"{game.setting.resources} (export the network, version 2, without --table)"
        )
    round_dependent = head(game).round_input
    return policy_writer.policy_document(game.setting, policy, round_dependent, provenance)


DOCUMENTS = Documents(network=network_document, mixture=mixture_document, table=table_document)


def policy_figures(game, name: str, policies: dict, out) -> list:
    """The learned policy's own figures (price curve or heatmap) into ``out``, at the
    first, middle and last round (one round where the network ignores it)."""
    rounds = [0]
    if head(game).round_input:
        rounds = sorted({0, game.setting.rounds // 2, game.setting.rounds - 1})
    return figures.policy_figures(name, game.setting, policies, rounds, out)


def archive_cells(row: dict) -> tuple:
    """An archived instance's own cells in the listing, from its summary."""
    if row["buyers"] == 0:
        return row["buyers"], "-"
    return row["buyers"], f"{row['lowest_density']:.3g}-{row['highest_density']:.3g}"


def summaries(game, types) -> list[dict]:
    """Per instance ``types`` ``[N, T]``, what a person reads first: how many buyers come
    and their lowest and highest density (None without buyers)."""
    instances = game.adversary.instances(jnp.asarray(types), jnp.float32)
    size = np.asarray(instances.demands).sum(-1)  # [N, T] total demand of each buyer
    buyers = (size > 0).sum(-1)
    values = np.asarray(instances.values)
    densities = np.where(size > 0, values / np.maximum(size, 1e-30), np.nan)
    return [
        {
            "buyers": int(count),
            "lowest_density": float(np.nanmin(row)) if count else None,
            "highest_density": float(np.nanmax(row)) if count else None,
        }
        for count, row in zip(buyers, densities, strict=True)
    ]


def traces(game, types) -> tuple[list[str], np.ndarray]:
    """The instances ``types`` ``[N, T]`` as buyer traces: the header (``value`` and
    ``demand``, or ``demand_1..K``) and ``[N, T, 1 + K]`` rows, a round without a buyer
    as value 0 and demand 0 (so a trace keeps the horizon); float64, the vocabulary's
    exact densities and demands."""
    with jax.enable_x64(True):
        instances = game.adversary.instances(jnp.asarray(types), jnp.float64)
        values, demands = np.asarray(instances.values), np.asarray(instances.demands)
    resources = demands.shape[-1]
    header = ["value"] + (
        ["demand"] if resources == 1 else [f"demand_{k + 1}" for k in range(resources)]
    )
    return header, np.concatenate([values[..., None], demands], axis=-1)


VIEWS = Views(
    setting_title=figures.setting_title,
    policy_figures=policy_figures,
    archive_columns=("buyers", "densities"),
    archive_cells=archive_cells,
    summaries=summaries,
    traces=traces,
)


def accepted_atoms(game, instances: Instance) -> jax.Array:
    """``[B, T]`` int: how many price atoms buyer t of each instance accepts.

    Atoms rise and a buyer accepts every price up to its density, so it accepts exactly the
    first ``k`` atoms: ``accept(a) = a < k``. This turns sums over atoms into cumulative sums
    (O(T G) per instance instead of O(T G A)).
    """
    price = jnp.asarray(atoms(game), instances.values.dtype)
    per_buyer = jax.vmap(jax.vmap(lambda v, d: accepts(price, Buyer(value=v, demand=d)).sum()))
    return per_buyer(instances.values, instances.demands)


def below_mask(atoms: int, dtype) -> jax.Array:
    """``M[a, k] = [a < k]`` ``[A, A + 1]``: a buyer who accepts the first ``k`` atoms buys
    with probability ``(probs @ M)[k]``; a cumulative sum as one matrix product, which a CPU
    does faster than XLA's cumulative sum over a short axis."""
    return (jnp.arange(atoms)[:, None] < jnp.arange(atoms + 1)[None, :]).astype(dtype)


def sale_probabilities(probs: jax.Array, accepted: jax.Array) -> jax.Array:
    """``[T, B, G + 1]`` (round-major, as the backward induction reads it): P(buyer t buys in
    state u) = P(price atom < k_t) from the table ``probs`` ``[T, G + 1, A]`` and the accepted
    counts ``k`` ``[B, T]``."""
    mask = below_mask(probs.shape[-1], probs.dtype)
    below = jnp.einsum("tua,ak->tku", probs, mask)  # [T, A + 1, G + 1]: gathered rows contiguous
    return jnp.clip(jnp.take_along_axis(below, accepted.T[:, :, None], axis=1), 0.0, 1.0)


def action_weights(weighted_gain: jax.Array, accepted: jax.Array, atoms: int) -> jax.Array:
    """``W[t, u, a] = sum_b c_b(t, u) [a < k_bt]`` ``[T, G + 1, A]`` from ``c`` ``[T, B, G+1]``:
    scatter each c_b(t, :) to its count k_bt, then sum the counts above each atom (the
    transpose of :func:`sale_probabilities`' sum below it)."""
    rounds = jnp.broadcast_to(jnp.arange(accepted.shape[1])[:, None], accepted.T.shape)
    shape = (weighted_gain.shape[0], atoms + 1, weighted_gain.shape[2])  # [T, A + 1, G + 1]
    # rows of G + 1 contiguous values are added at once (a scatter along the last axis of a
    # [T, G + 1, A + 1] table is several times slower on a CPU)
    by_count = jnp.zeros(shape, weighted_gain.dtype).at[rounds, accepted.T].add(weighted_gain)
    return jnp.einsum("tku,ak->tua", by_count, below_mask(atoms, weighted_gain.dtype))


@functools.partial(jax.jit, static_argnums=0)
def _typed_optimum(game, types: jax.Array) -> jax.Array:
    """K = 1: OPT ``[N]`` of the instances written as ``types`` ``[N, T]``."""
    return offline_optimum(game.setting, game.adversary.instances(types, jnp.float32))


def policy_probs(game, params: dict, dtype) -> jax.Array:
    """``[T, G + 1, A]``: the pricing network's distribution in every state (K = 1)."""
    return price_table(game.setting, game.policy(params), dtype).probs


def payoffs_and_gains(game, sell: jax.Array, instances: Instance, optimum: jax.Array):
    """Exact payoffs ``[B]`` and per-state weights ``P(s_t = u) G_t(u) / OPT`` ``[T, B, G+1]``
    from the sale probabilities ``sell`` ``[T, B, G + 1]``."""
    welfare, sale_weight = jax.vmap(welfare_and_sale_weight, in_axes=(None, 1, 0), out_axes=(0, 1))(
        game.setting, sell, instances
    )
    safe = jnp.where(optimum > 0, optimum, 1)
    return ratio.payoff(welfare, optimum), sale_weight / safe[None, :, None]


def game_payoffs(game, params: dict, instances: Instance, optimum: jax.Array):
    """Exact payoff of each instance against the current pricing network ``[B]``."""
    probs = policy_probs(game, params, instances.values.dtype)
    return payoffs_from_probs(game, probs, instances, optimum)


def payoffs_from_probs(game, probs: jax.Array, instances: Instance, optimum: jax.Array):
    """:func:`game_payoffs` from the network's table ``probs`` ``[T, G + 1, A]``."""
    sell = sale_probabilities(probs, accepted_atoms(game, instances))
    return payoffs_given_sales(game.setting, sell, instances, optimum)


def per_round_update(
    game,
    params: dict,
    instances: Instance,
    optimum: jax.Array,
    weigh: Callable[[jax.Array], jax.Array],
):
    """Payoffs ``[B]`` and the gradient (ascent direction) of ``sum_i w_i u_i`` by the
    all-action per-round update, with weights ``w = weigh(payoffs)`` (both from one pass)."""
    dtype = instances.values.dtype
    probs, pull_back = jax.vjp(lambda p: policy_probs(game, p, dtype), params)
    accepted = accepted_atoms(game, instances)
    # materialised once: left to itself XLA fuses the gather into both scans over rounds,
    # which costs a CPU more than writing the table out (about 10 ms of 90 per update)
    sell = jax.lax.optimization_barrier(sale_probabilities(probs, accepted))
    payoff, weighted_gain = payoffs_and_gains(game, sell, instances, optimum)
    weights = jax.lax.stop_gradient(weigh(payoff))
    # sum_i w_i P_i(t, u) G_i(t, u) accept_i(t, a) / OPT_i = d(payoff) / d pi(a | t, u)
    weight = action_weights(weights[None, :, None] * weighted_gain, accepted, len(atoms(game)))
    (gradient,) = pull_back(weight.astype(probs.dtype))
    return payoff, gradient


def per_round_gradient(
    game, params: dict, instances: Instance, optimum: jax.Array, weights: jax.Array
):
    """:func:`per_round_update` with fixed weights ``[B]``: the gradient only."""
    return per_round_update(game, params, instances, optimum, lambda _: weights)[1]


def reinforce_gradient(
    game,
    params: dict,
    instances: Instance,
    optimum: jax.Array,
    weights: jax.Array,
    key: jax.Array,
):
    """Gradient (ascent) of ``sum_i w_i u_i`` by REINFORCE on sampled runs (the ablation)."""
    setting, samples = game.setting, head(game).reinforce_samples
    count = instances.values.shape[0]
    repeated = repeat_each(instances, samples)
    frozen = game.policy(jax.lax.stop_gradient(params))
    runs = simulate(setting, frozen, repeated, jax.random.split(key, count * samples))
    returns = runs.welfare.reshape(count, samples) / jnp.where(optimum > 0, optimum, 1)[:, None]
    others = (returns.sum(-1, keepdims=True) - returns) / max(samples - 1, 1)
    advantage = (returns - others) * weights[:, None]  # leave-one-out baseline
    used_before = runs.used_before()  # [B S, T, K]
    price = jnp.asarray(atoms(game), runs.unit_prices.dtype)
    chosen = jnp.argmin(
        jnp.abs(runs.unit_prices[..., None] - price[None, None, None]), axis=-1
    )  # [B S, T, K]
    fractions = jnp.broadcast_to(
        jnp.arange(setting.rounds, dtype=used_before.dtype) / setting.rounds, chosen.shape[:2]
    )
    utilisation = used_before / jnp.asarray(setting.capacities, used_before.dtype)[None, None]

    def surrogate(p):
        logits = pricing(game).apply(p, utilisation, fractions)  # [B S, T, K, A]
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(log_probs, chosen[..., None], axis=-1)[..., 0]
        return jnp.sum(advantage.reshape(-1) * picked.sum((1, 2))) / samples

    return jax.grad(surrogate)(params)
