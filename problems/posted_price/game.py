"""Posted pricing's game (docs/method.md §3): the pricing network against the adversary, as
the core's loops play it (the simultaneous step of :mod:`advonline.simultaneous`, the oracle
loop of :mod:`advonline.oracle_loop`).

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
K >= 2 values the actions by rollouts (:mod:`posted_price.sampled_game`).

**Standard update** (ablation; ``"reinforce"``): sampled runs of the one simulator, the score
function of the sampled prices, the mean return of the other runs on the same instance as
baseline.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from advonline import ratio, simultaneous
from advonline.archive import on_padded_rows
from advonline.configs import RunConfig, StepConfig
from advonline.export import ExportError
from advonline.mixture import SnapshotMixture, snapshot_mixture
from advonline.parallel import shard_batch
from advonline.problems.posted_price import figures, policy_writer
from advonline.problems.posted_price.adversary import (
    AdversaryModel,
    build_adversary,
    payoffs_given_sales,
)
from advonline.problems.posted_price.certify import certify_and_draw, worst_runs
from advonline.problems.posted_price.config import AdversaryConfig, AlgorithmConfig
from advonline.problems.posted_price.descent import descend_params
from advonline.problems.posted_price.learned import (
    LearnedPolicy,
    LearnedPriceCurve,
    learned_policies,
    price_atoms,
)
from advonline.problems.posted_price.model import (
    Buyer,
    Instance,
    Setting,
    accepts,
    price_table,
    repeat_each,
    simulate,
    welfare_and_sale_weight,
)
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.oracles import best_responses, mixture_search
from advonline.problems.posted_price.typed_payoffs import algorithm_table, typed_payoffs
from advonline.search import Found


@dataclasses.dataclass(frozen=True)
class NetworkTable:
    """The game's pricing network as a function of its parameters: its float64 price table
    ``[T, G + 1, A]`` (K = 1). Hashable, so the certificate's sweeps and gradients compile
    once per game."""

    game: Game

    def __call__(self, params: dict):
        return price_table(self.game.setting, self.game.policy(params), jnp.float64)


@dataclasses.dataclass(frozen=True)
class Game:
    """The static parts of a run (hashable: a jit static argument): the setting, the config
    sections and fields the game reads, its networks and its devices."""

    objective = "earn"  # welfare: the payoff is E[ALG] / OPT

    setting: Setting
    algorithm_config: AlgorithmConfig  # [algorithm]
    adversary_config: AdversaryConfig  # [adversary]
    loop_config: StepConfig  # what the simultaneous step reads of [game]
    certificate_draws: int  # [oracle] certificate_instances: draws from the certificate's strategy
    mixtures: bool  # [oracle]: whether K >= 2 measures and delivers mixtures of snapshots
    pricing: AlgorithmNetwork
    atoms: tuple[float, ...]
    adversary: AdversaryModel
    mesh: Mesh | None = None  # the devices the batches are sharded over (advonline/parallel.py)

    @staticmethod
    def build(config: RunConfig, mesh: Mesh | None = None) -> Game:
        """The game of the run ``config``: the sections it reads, its networks."""
        setting = config.setting
        algorithm = config.algorithm
        pricing = AlgorithmNetwork(
            resources=setting.resources,
            atoms=algorithm.price_atoms,
            hidden=algorithm.hidden,
            layers=algorithm.layers,
            use_round=algorithm.round_input,
            shared_resources=algorithm.shared_resources,
        )
        atoms = price_atoms(setting, algorithm.price_atoms)
        adversary = build_adversary(setting, config.adversary)
        sections = (setting, algorithm, config.adversary, config.game.step_config())
        oracle = (config.oracle.certificate_instances, config.oracle.mixtures)
        return Game(*sections, *oracle, pricing, atoms, adversary, mesh)

    @property
    def instance_length(self) -> int:
        """Tokens in an instance: one buyer type per round."""
        return self.setting.rounds

    @functools.cached_property
    def encoding(self):
        """The run's instances as tokens of the problem's encoding, over the run's buyer
        types (the evaluator's when ``adversary.density_levels`` is the default)."""
        from advonline.problems.posted_price.problem import TypeEncoding  # it imports this

        return TypeEncoding(self.setting, self.adversary_config.density_levels)

    def policy(self, params: dict) -> LearnedPolicy:
        return LearnedPolicy(params, self.pricing, self.atoms)

    def algorithm_optimizer(self) -> optax.GradientTransformation:
        return optax.adam(self.algorithm_config.learning_rate)

    def shard(self, batch):
        """``batch`` (a pytree of arrays with a leading instance axis) sharded over the run's
        devices; unchanged on one device."""
        return shard_batch(batch, self.mesh)

    # What the simultaneous loop (advonline/train.py) asks of the game.

    def init_state(self, key: jax.Array) -> simultaneous.GameState:
        """Fresh parameters (uniform prices), optimiser states and an empty replay."""
        return simultaneous.init_state(self, key)

    def step_function(self) -> Callable:
        """``(game, state) -> (state, StepMetrics)``: one step of the simultaneous loop; exact
        values for K = 1 (:func:`advonline.simultaneous.game_step`),
        rollouts for K >= 2 (:func:`~posted_price.sampled_game.sampled_game_step`)."""
        if self.setting.resources == 1:
            return simultaneous.game_step
        from advonline.problems.posted_price.sampled_game import sampled_game_step

        return sampled_game_step

    def delivered_params(self, state) -> dict:
        """The pricing parameters a run delivers
        (:func:`advonline.simultaneous.delivered_params`)."""
        return simultaneous.delivered_params(self, state)

    # What the simultaneous step (advonline/simultaneous.py) asks of the game (K = 1).

    def frozen(self, params: dict):
        """The network's price table in every state: the state-conditioned adversary writes
        along it and every batch's payoffs come from it."""
        return price_table(self.setting, self.policy(params), jnp.float32)

    @staticmethod
    def writing_inputs(table) -> tuple:
        return (table,)

    def batch_optimum(self, instances: Instance) -> jax.Array:
        return offline_optimum(self.setting, instances)

    def batch_payoffs(self, table, instances: Instance, optimum: jax.Array) -> jax.Array:
        return payoffs_from_probs(self, table.probs, instances, optimum)

    def decode(self, types: jax.Array, dtype) -> Instance:
        """Buyer types ``[N, T]`` as instances."""
        return self.adversary.instances(types, dtype)

    @property
    def update_draws(self) -> bool:
        """Whether the algorithm's update draws random numbers (REINFORCE does)."""
        return self.algorithm_config.update == "reinforce"

    def pool_update(self, params: dict, instances: Instance, optimum, weigh, key):
        """The pool's payoffs ``[P]`` and the ascent direction of ``sum_j w_j u_j``, ``w =
        weigh(payoffs)``: the per-round update (:func:`per_round_update`), or REINFORCE."""
        if not self.update_draws:
            return per_round_update(self, params, instances, optimum, weigh)
        payoff = game_payoffs(self, params, instances, optimum)
        return payoff, reinforce_gradient(self, params, instances, optimum, weigh(payoff), key)

    # What the oracle loop (advonline/oracle_loop.py) asks of the game: instances are rows
    # of token indices ``[N, T]`` (buyer types), the algorithm a parameter pytree.

    def init_params(self, key: jax.Array) -> dict:
        """Fresh pricing parameters (the uniform distribution on the atoms everywhere)."""
        return self.pricing.init(key, jnp.zeros(self.setting.resources), jnp.zeros(()))

    @property
    def certifies(self) -> bool:
        """Whether a network's CR has an exact upper bound (the DP certificate, K = 1)."""
        return self.setting.resources == 1

    def certify(
        self, params: dict, start: float = 1.0, key: jax.Array | None = None
    ) -> tuple[float | None, np.ndarray | None]:
        """The DP certificate's upper bound on the network's CR, iterated from ``start`` (an
        attained lower bound), None where there is none; and, given ``key``,
        ``oracle.certificate_instances`` instances ``[N, T]`` (host token array) drawn from
        the adversary strategy that attains it (:func:`~posted_price.certify.certify_and_draw`;
        None without them). Float64, outside ``jit``."""
        count = 0 if key is None else self.certificate_draws
        policy = self.policy(params)
        found, runs = certify_and_draw(self.setting, policy, key, count, start=start)
        return found.ratio, None if runs is None else self.adversary.buyer_types.tokens(*runs)

    def descend(self, params: dict, certificate: float, steps: int, learning_rate: float):
        """The network ``params``, whose certificate is ``certificate``, after ``steps`` steps
        of certificate descent (:func:`~posted_price.descent.descend_params`, K = 1): the
        best certified parameters it reached, in the network's own precision. Float64,
        outside ``jit``."""
        found = descend_params(
            self.setting, NetworkTable(self), params, certificate, steps, learning_rate
        )
        return jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), found.params, params)

    def certificate_instances(self, params: dict, ratio: float, key: jax.Array) -> np.ndarray:
        """``oracle.certificate_instances`` instances ``[N, T]`` (host token array) drawn
        from the adversary strategy that attains the DP's value just below ``ratio`` (an
        attained ratio) against the network (:func:`~posted_price.certify.worst_runs`): where
        no certificate is computed, instances the strategy makes at least that hard. One DP
        sweep, outside ``jit``."""
        count = self.certificate_draws
        runs = worst_runs(self.setting, self.policy(params), ratio, key, count)
        return self.adversary.buyer_types.tokens(*runs)

    @property
    def mixes(self) -> bool:
        """Whether the loop also measures and may deliver a mixture of snapshots (K >= 2 with
        ``oracle.mixtures``)."""
        return self.setting.resources > 1 and self.mixtures

    def optimum_of(self, types) -> np.ndarray:
        """OPT of the instances written as ``types`` ``[N, T]`` (host array). For K = 1 one
        jitted programme, the batch padded to a power of two (at least 32) so that the
        epochs' varying counts share a handful of compilations; K >= 2 solves by HiGHS."""
        types = np.asarray(types)
        if self.setting.resources != 1:
            instances = self.adversary.instances(jnp.asarray(types), jnp.float32)
            return np.asarray(offline_optimum(self.setting, instances))
        return on_padded_rows(functools.partial(_typed_optimum, self), types)

    def payoffs(self, params: dict, types: jax.Array, optimum: jax.Array) -> jax.Array:
        """Exact payoffs ``E[ALG(I_j)] / OPT(I_j)`` ``[N]`` of the network ``params`` on the
        instances ``types`` ``[N, T]``: over the utilisation grid for K = 1
        (:func:`game_payoffs`), over the product grid for K >= 2
        (:func:`~posted_price.typed_payoffs.typed_payoffs`). Differentiable in ``params``."""
        if self.setting.resources == 1:
            return game_payoffs(self, params, self.adversary.instances(types, jnp.float32), optimum)
        sale = self.member_table(params)
        return typed_payoffs(self.setting, self.adversary.buyer_types, sale, types, optimum)

    def state_probs(self, params: dict) -> jax.Array:
        """The network's distributions in every state: ``[T, G + 1, A]`` for K = 1,
        ``[T, S, K, A]`` for K >= 2."""
        if self.setting.resources == 1:
            return policy_probs(self, params, jnp.float32)
        return algorithm_table(self.setting, self.policy(params), jnp.float32).probs

    def member_table(self, params: dict) -> jax.Array:
        """The network's per-type sale table (K >= 2, the product grid): what a mixture's
        member contributes to :meth:`mixture_search` (a faster score than its payoffs)."""
        table = algorithm_table(self.setting, self.policy(params), jnp.float32)
        return self.adversary.type_sale_table(table, jnp.float32)

    def ascent(self, types: jax.Array, optimum: jax.Array, weigh: Callable):
        """``(params, key) -> ascent direction`` of ``sum_j w_j u_j`` on the instances
        ``types`` with weights ``w = weigh(payoffs)``: the all-action per-round update for
        K = 1 (:func:`per_round_update`), the exact gradient through the product-grid
        induction for K >= 2; with ``algorithm.update = "reinforce"`` (the ablation)
        REINFORCE on sampled runs with the same weights, ``key`` feeding its runs."""
        instances = self.adversary.instances(types, jnp.float32)

        def direction(params: dict, key: jax.Array):
            if self.setting.resources == 1:  # the simultaneous step's update, on these inputs
                return self.pool_update(params, instances, optimum, weigh, key)[1]
            if self.algorithm_config.update == "reinforce":
                payoff = self.payoffs(params, types, optimum)
                weights = jax.lax.stop_gradient(weigh(payoff))
                return reinforce_gradient(self, params, instances, optimum, weights, key)
            payoff, pull_back = jax.vjp(lambda p: self.payoffs(p, types, optimum), params)
            return pull_back(jax.lax.stop_gradient(weigh(payoff)))[0]

        return direction

    def best_responses(self, params: dict, budget, key: jax.Array, starts) -> Found:
        """Both oracles (:func:`~posted_price.oracles.best_responses`) against the network,
        local search starting from ``starts`` ``[S, T]`` (or None)."""
        table = algorithm_table(self.setting, self.policy(params), jnp.float32)
        starts = None if starts is None else jnp.asarray(starts, jnp.int32)
        return best_responses(
            self.setting,
            self.adversary,
            self.adversary_config,
            table,
            budget,
            key,
            jnp.float32,
            starts,
            self.mesh,
        )

    def mixture_search(self, sales, weights, budget, key: jax.Array, starts) -> Found:
        """Local search (:func:`~posted_price.oracles.mixture_search`) against the mixture of
        members with sale tables ``sales`` (stacked :meth:`member_table`) and ``weights``."""
        starts = None if starts is None else jnp.asarray(starts, jnp.int32)
        vocabulary = self.adversary.buyer_types
        weights = jnp.asarray(weights, jnp.float32)
        args = (self.setting, vocabulary, sales, weights, budget, key, jnp.float32)
        return mixture_search(*args, starts, self.mesh)

    # What a finished run asks of the game (advonline/pipeline.py): its policies, its policy
    # files and its figures.

    def learned(self, params: dict) -> dict:
        """``{"learned": the randomised network, "learned-deterministic": its read-out}``."""
        return learned_policies(params, self.pricing, self.atoms)

    def readout(self, policy):
        """The deterministic read-out (median price) of a learned policy."""
        return LearnedPriceCurve(policy)

    def network_document(self, params: dict, deterministic: bool, provenance: dict) -> dict:
        """The policy file of the network ``params`` (or with ``deterministic`` its read-out)."""
        args = (self.setting, self.pricing, params, self.atoms, deterministic, provenance)
        return policy_writer.network_document(*args)

    def mixture_document(self, mixture: SnapshotMixture, provenance: dict) -> dict:
        """The policy file of a mixture of snapshots chosen once per input."""
        return policy_writer.mixture_document(self.setting, mixture, provenance)

    def table_document(self, policy, provenance: dict) -> dict:
        """The policy file of ``policy`` tabulated on the simulator's grid (K = 1; ExportError
        for more resources)."""
        if self.setting.resources != 1:
            raise ExportError(
                f"table policy files (version 1) cover one resource; this run has K = "
                f"{self.setting.resources} (export the network, version 2, without --table)"
            )
        round_dependent = self.algorithm_config.round_input
        return policy_writer.policy_document(self.setting, policy, round_dependent, provenance)

    @staticmethod
    def setting_title(described: dict) -> str:
        """A described setting (``Setting.describe()``) on one line, for figure titles."""
        return figures.setting_title(described)

    def policy_figures(self, name: str, policies: dict, out) -> list:
        """The learned policy's own figures (price curve or heatmap) into ``out``, at the
        first, middle and last round (one round where the network ignores it)."""
        rounds = [0]
        if self.algorithm_config.round_input:
            rounds = sorted({0, self.setting.rounds // 2, self.setting.rounds - 1})
        return figures.policy_figures(name, self.setting, policies, rounds, out)

    #: The columns the archive's listing adds for each instance (from :meth:`summaries`).
    archive_columns = ("buyers", "densities")

    @staticmethod
    def archive_cells(row: dict) -> tuple:
        """An archived instance's own cells in the listing, from its summary."""
        if row["buyers"] == 0:
            return row["buyers"], "-"
        return row["buyers"], f"{row['lowest_density']:.3g}-{row['highest_density']:.3g}"

    def summaries(self, types) -> list[dict]:
        """Per instance ``types`` ``[N, T]``, what a person reads first: how many buyers come
        and their lowest and highest density (None without buyers)."""
        instances = self.adversary.instances(jnp.asarray(types), jnp.float32)
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

    def traces(self, types) -> tuple[list[str], np.ndarray]:
        """The instances ``types`` ``[N, T]`` as buyer traces: the header (``value`` and
        ``demand``, or ``demand_1..K``) and ``[N, T, 1 + K]`` rows, a round without a buyer
        as value 0 and demand 0 (so a trace keeps the horizon); float64, the vocabulary's
        exact densities and demands."""
        with jax.enable_x64(True):
            instances = self.adversary.instances(jnp.asarray(types), jnp.float64)
            values, demands = np.asarray(instances.values), np.asarray(instances.demands)
        resources = demands.shape[-1]
        header = ["value"] + (
            ["demand"] if resources == 1 else [f"demand_{k + 1}" for k in range(resources)]
        )
        return header, np.concatenate([values[..., None], demands], axis=-1)

    def mixture(self, members: dict, weights) -> SnapshotMixture:
        """The randomised algorithm that plays member ``m`` of the stacked ``members`` with
        probability ``weights[m]``, drawn once per input."""
        return snapshot_mixture(members, weights, self.policy)


def accepted_atoms(game: Game, instances: Instance) -> jax.Array:
    """``[B, T]`` int: how many price atoms buyer t of each instance accepts.

    Atoms rise and a buyer accepts every price up to its density, so it accepts exactly the
    first ``k`` atoms: ``accept(a) = a < k``. This turns sums over atoms into cumulative sums
    (O(T G) per instance instead of O(T G A)).
    """
    atoms = jnp.asarray(game.atoms, instances.values.dtype)
    per_buyer = jax.vmap(jax.vmap(lambda v, d: accepts(atoms, Buyer(value=v, demand=d)).sum()))
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
def _typed_optimum(game: Game, types: jax.Array) -> jax.Array:
    """K = 1: OPT ``[N]`` of the instances written as ``types`` ``[N, T]``."""
    return offline_optimum(game.setting, game.adversary.instances(types, jnp.float32))


def policy_probs(game: Game, params: dict, dtype) -> jax.Array:
    """``[T, G + 1, A]``: the pricing network's distribution in every state (K = 1)."""
    return price_table(game.setting, game.policy(params), dtype).probs


def payoffs_and_gains(game: Game, sell: jax.Array, instances: Instance, optimum: jax.Array):
    """Exact payoffs ``[B]`` and per-state weights ``P(s_t = u) G_t(u) / OPT`` ``[T, B, G+1]``
    from the sale probabilities ``sell`` ``[T, B, G + 1]``."""
    welfare, sale_weight = jax.vmap(welfare_and_sale_weight, in_axes=(None, 1, 0), out_axes=(0, 1))(
        game.setting, sell, instances
    )
    safe = jnp.where(optimum > 0, optimum, 1)
    return ratio.payoff(welfare, optimum), sale_weight / safe[None, :, None]


def game_payoffs(game: Game, params: dict, instances: Instance, optimum: jax.Array):
    """Exact payoff of each instance against the current pricing network ``[B]``."""
    probs = policy_probs(game, params, instances.values.dtype)
    return payoffs_from_probs(game, probs, instances, optimum)


def payoffs_from_probs(game: Game, probs: jax.Array, instances: Instance, optimum: jax.Array):
    """:func:`game_payoffs` from the network's table ``probs`` ``[T, G + 1, A]``."""
    sell = sale_probabilities(probs, accepted_atoms(game, instances))
    return payoffs_given_sales(game.setting, sell, instances, optimum)


def per_round_update(
    game: Game,
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
    weight = action_weights(weights[None, :, None] * weighted_gain, accepted, len(game.atoms))
    (gradient,) = pull_back(weight.astype(probs.dtype))
    return payoff, gradient


def per_round_gradient(
    game: Game, params: dict, instances: Instance, optimum: jax.Array, weights: jax.Array
):
    """:func:`per_round_update` with fixed weights ``[B]``: the gradient only."""
    return per_round_update(game, params, instances, optimum, lambda _: weights)[1]


def reinforce_gradient(
    game: Game,
    params: dict,
    instances: Instance,
    optimum: jax.Array,
    weights: jax.Array,
    key: jax.Array,
):
    """Gradient (ascent) of ``sum_i w_i u_i`` by REINFORCE on sampled runs (the ablation)."""
    setting, samples = game.setting, game.algorithm_config.reinforce_samples
    count = instances.values.shape[0]
    repeated = repeat_each(instances, samples)
    frozen = game.policy(jax.lax.stop_gradient(params))
    runs = simulate(setting, frozen, repeated, jax.random.split(key, count * samples))
    returns = runs.welfare.reshape(count, samples) / jnp.where(optimum > 0, optimum, 1)[:, None]
    others = (returns.sum(-1, keepdims=True) - returns) / max(samples - 1, 1)
    advantage = (returns - others) * weights[:, None]  # leave-one-out baseline
    used_before = runs.used_before()  # [B S, T, K]
    atoms = jnp.asarray(game.atoms, runs.unit_prices.dtype)
    chosen = jnp.argmin(
        jnp.abs(runs.unit_prices[..., None] - atoms[None, None, None]), axis=-1
    )  # [B S, T, K]
    fractions = jnp.broadcast_to(
        jnp.arange(setting.rounds, dtype=used_before.dtype) / setting.rounds, chosen.shape[:2]
    )
    utilisation = used_before / jnp.asarray(setting.capacities, used_before.dtype)[None, None]

    def surrogate(p):
        logits = game.pricing.apply(p, utilisation, fractions)  # [B S, T, K, A]
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(log_probs, chosen[..., None], axis=-1)[..., 0]
        return jnp.sum(advantage.reshape(-1) * picked.sum((1, 2))) / samples

    return jax.grad(surrogate)(params)
