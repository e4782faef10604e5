"""The oracle loop's game (advonline/oracle_loop.py) for a problem of the interface
(advonline/problem.py), so that every registered problem trains with the one loop.

- **Instances** are the encoding's token sequences ``[N, T]``; OPT is the problem's offline
  optimum, computed once per instance and stored beside it in the archive.
- **The algorithm** is the policy head's parameters, and its payoff on an instance is the
  problem's ``E[ALG] / OPT`` from the one simulator.
- **The update** is the exact gradient of the weighted payoff ``sum_j w_j u_j``: the
  problem's payoffs are differentiable in the policy's parameters.
- **The oracle** is hill climbing with the encoding's ``mutate`` (advonline/search.py), from
  the archive's hardest inputs and fresh random ones; with ``oracle.restarts`` fresh adversary
  networks (the noise-conditioned writer of the encoding's tokens) add their finds. These do
  not replace the climbing's random starts: on one-way trading, starts taken from the
  networks' finds left the search weaker (docs/results.md).
- **Several devices**: the archive's batches and the search chains are sharded over the run's
  mesh (advonline/parallel.py); the parameters are replicated.
- **The certificate**, where the problem has one, is its own (outside ``jit``, float64). With
  ``oracle.certificate_instances`` the input that attains it joins the archive: an exact
  best response. Where the problem also writes it in JAX (``differentiable_certificate``),
  the last ``oracle.descent_epochs`` epochs descend it (:meth:`ProblemGame.descend`).

The same game plays the simultaneous loop's step (advonline/simultaneous.py) when the run
gives it that loop's config: the adversary is then the noise-conditioned writer of the
encoding's tokens (:class:`~advonline.adversary.TokenWriter`), and the algorithm's update the
same exact gradient, on the step's pool.

A policy of the interface is one function of its parameters: it has no per-state
distributions for the loop's proximal anchor. Without a certificate the delivered network is
the probed one with the lowest measured worst case, each compared on the current archive
(``oracle.rescore_best``); with ``oracle.mixtures`` the meta-solver's mixture of snapshots,
drawn once per input (:mod:`advonline.mixture`), competes too: a local search attacks it
through its members' exact payoffs, and it is delivered where its measured worst case is the
lowest. A problem with a certificate delivers the network with the best certificate.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from advonline.adversary import TokenWriter
from advonline.archive import on_padded_rows
from advonline.export import ExportError, mixture_document
from advonline.mixture import SnapshotMixture, snapshot_mixture
from advonline.networks import AdversaryNetwork
from advonline.parallel import shard_batch, spread
from advonline.problem import Problem, payoffs_of
from advonline.search import Found, join
from advonline.simultaneous import game_step
from advonline.sources import climb, fresh_networks


@dataclasses.dataclass(frozen=True)
class ProblemGame:
    """The static parts of a run on ``problem``, either loop (hashable: a ``jit`` static
    argument; two games are equal when they name the same problem, setting, head, learning
    rate, devices and loop configs)."""

    problem: Problem = dataclasses.field(compare=False)
    name: str
    setting: Any
    head_config: tuple[tuple[str, Any], ...]  # the config's [algorithm] table, sorted
    learning_rate: float
    mesh: Mesh | None = None  # the devices the batches are sharded over (advonline/parallel.py)
    loop_config: Any = None  # the simultaneous step's [game] fields (None: the oracle loop)
    adversary_config: Any = None  # the [adversary] table (None: no adversary network)
    mixtures: bool = False  # [oracle] mixtures: mixtures of snapshots compete (no certificate)

    update_draws = False  # the exact gradient draws no random numbers

    @staticmethod
    def build(
        problem: Problem,
        setting,
        head_config: dict,
        learning_rate: float,
        mesh=None,
        loop_config=None,
        adversary_config=None,
        mixtures: bool = False,
    ) -> ProblemGame:
        config = tuple(sorted(head_config.items()))
        args = (problem, problem.name, setting, config, learning_rate, mesh, loop_config)
        return ProblemGame(*args, adversary_config, mixtures)

    def __post_init__(self):
        # built with the game, outside any trace (also for a copy made by
        # ``dataclasses.replace``): a head, encoding or adversary first built inside a jitted
        # function would keep that trace's values as its constants
        self.head, self.encoding  # noqa: B018
        if self.adversary_config is not None:
            self.adversary  # noqa: B018

    @functools.cached_property
    def head(self):
        return self.problem.policy_head(self.setting, dict(self.head_config))

    @functools.cached_property
    def encoding(self):
        return self.problem.encoding(self.setting)

    @property
    def instance_length(self) -> int:
        return self.encoding.length

    def policy(self, params):
        """The problem's policy of the parameters ``params``."""
        return self.head.to_policy(params)

    @property
    def objective(self) -> str:
        """Whether the problem earns or pays (how a mixture's payoffs combine)."""
        return self.problem.objective

    @functools.cached_property
    def certifies(self) -> bool:
        """Whether the problem certifies its policies (asked once, of a fresh head's)."""
        params = self.init_params(jax.random.key(0))
        return self.problem.certificate_of(self.setting, self.policy(params)) is not None

    def init_params(self, key: jax.Array):
        return self.head.module.init(key, *self.head.example)

    def algorithm_optimizer(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate)

    def shard(self, batch):
        """``batch`` (arrays with a leading instance axis) sharded over the run's devices;
        unchanged on one device."""
        return shard_batch(batch, self.mesh)

    def payoffs(self, params, types: jax.Array, optimum: jax.Array | None) -> jax.Array:
        """The problem's payoffs ``[N]`` of the policy ``params`` on the instances ``types``
        ``[N, T]``, given their OPT ``optimum`` ``[N]`` (the loop's stored copy; None: computed
        here). Differentiable in ``params``."""
        policy, instances = self.policy(params), self.encoding.decode(types)
        if optimum is None:
            return payoffs_of(self.problem, self.setting, policy, instances)
        return self.batch_payoffs(policy, instances, optimum)

    def optimum_of(self, types) -> np.ndarray:
        """OPT of the instances ``types`` ``[N, T]`` (host array), the batch padded to a power
        of two so that the epochs' varying counts share a few compilations."""
        optima = on_padded_rows(functools.partial(_optimum, self), np.asarray(types, np.int32))
        return optima.astype(np.float32)

    def ascent(self, types: jax.Array, optimum: jax.Array, weigh):
        """``(params, key) -> ascent direction`` of ``sum_j w_j u_j`` with ``w =
        weigh(payoffs)``: the exact gradient (``key`` is unused)."""

        def direction(params, key: jax.Array):
            instances = self.encoding.decode(types)
            return self.pool_update(params, instances, optimum, weigh, key)[1]

        return direction

    # What the simultaneous step (advonline/simultaneous.py) asks of the game.

    @staticmethod
    def step_function():
        """The simultaneous loop's step: :func:`advonline.simultaneous.game_step`."""
        return game_step

    @functools.cached_property
    def adversary(self) -> TokenWriter:
        """The noise-conditioned writer of the encoding's tokens, sized by ``[adversary]``."""
        config = self.adversary_config
        network = AdversaryNetwork(self.encoding.vocabulary, config.hidden, config.layers)
        return TokenWriter(network, config.latent, self.encoding)

    def frozen(self, params):
        """The policy every batch of a step is written against and scored on."""
        return self.policy(params)

    @staticmethod
    def writing_inputs(policy) -> tuple:
        return ()  # the noise-conditioned writer does not look at the policy

    def batch_optimum(self, instances) -> jax.Array:
        return self.problem.offline_optimum(self.setting, instances)

    def batch_payoffs(self, policy, instances, optimum: jax.Array) -> jax.Array:
        return self.problem.payoffs(self.setting, policy, instances, optimum)

    def decode(self, tokens: jax.Array, dtype):
        """The problem's instances of ``tokens`` ``[N, T]`` (in the problem's own dtype)."""
        return self.encoding.decode(tokens)

    def pool_update(self, params, instances, optimum: jax.Array, weigh, key):
        """The pool's payoffs ``[P]`` and the exact gradient of ``sum_j w_j u_j``, ``w =
        weigh(payoffs)`` (``key`` is unused)."""

        def payoffs(p):
            return self.batch_payoffs(self.policy(p), instances, optimum)

        payoff, pull_back = jax.vjp(payoffs, params)
        return payoff, pull_back(jax.lax.stop_gradient(weigh(payoff)))[0]

    def best_responses(self, params, budget, key: jax.Array, starts) -> Found:
        """Hill climbing (``budget.chains`` chains of ``budget.search_steps`` steps, each
        proposing ``budget.candidates`` mutations) against the policy ``params``, from
        ``starts`` ``[S, T]`` (or None) and fresh random inputs for the other chains; with
        ``budget.restarts`` and an ``[adversary]`` table, beside it that many fresh adversary
        networks (:meth:`network_responses`). Everything found is returned."""
        if budget.chains == 0 or budget.search_steps == 0:
            return Found.nothing(self.instance_length, jnp.float32)
        fresh_key, search_key = jax.random.split(key)
        networks = Found.nothing(self.instance_length, jnp.float32)
        if self.adversary_config is not None and budget.restarts and budget.adversary_steps:
            search_key, network_key = jax.random.split(search_key)
            networks = self.network_responses(params, budget, network_key)
        tokens = self.chain_starts(starts, budget.chains, fresh_key)
        steps, candidates = budget.search_steps, budget.candidates
        found, ratios = _climb(self, params, search_key, tokens, steps, candidates)
        return join(networks, Found(found, ratios))

    def chain_starts(self, starts, chains: int, key: jax.Array) -> jax.Array:
        """``chains`` search chains ``[C, T]``: ``starts`` ``[S, T]`` (or None) first, then
        fresh random inputs from ``key``, split over the run's devices."""
        fresh = np.asarray(self.encoding.random(key, chains))
        pool = [fresh] if starts is None else [np.asarray(starts), fresh]
        tokens = np.concatenate(pool)[:chains].astype(np.int32)
        return spread(jnp.asarray(tokens), self.mesh)

    def network_responses(self, params, budget, key: jax.Array) -> Found:
        """``budget.restarts`` fresh noise-conditioned writers (vmapped, split over the
        devices), each trained ``budget.adversary_steps`` REINFORCE steps of
        ``budget.adversary_batch`` inputs against the frozen policy ``params``
        (:func:`~advonline.adversary.train_fresh`): every step's worst input."""
        keys = spread(jax.random.split(key, budget.restarts), self.mesh)
        steps, batch = budget.adversary_steps, budget.adversary_batch
        tokens, ratios = _train_networks(self, params, keys, steps, batch)
        return Found(tokens.reshape(-1, self.instance_length), ratios.reshape(-1))

    # Mixtures of snapshots (advonline/mixture.py), where the networks have no certificate.

    @property
    def mixes(self) -> bool:
        """Whether the loop also measures and may deliver the equilibrium mixture of
        snapshots: ``oracle.mixtures``, and no certificate (one would bound a single network's
        ratio, which a mixture's measured worst case cannot compete with)."""
        return self.mixtures and not self.certifies

    @staticmethod
    def member_table(params):
        """What a snapshot contributes to :meth:`mixture_search`: its parameters (the search
        scores the mixture through the members' payoffs)."""
        return params

    def mixture(self, members, weights) -> SnapshotMixture:
        """The randomised algorithm that plays member ``m`` of the stacked parameters
        ``members`` with probability ``weights[m]``, drawn once per input."""
        return snapshot_mixture(members, weights, self.policy)

    def mixture_search(self, members, weights, budget, key: jax.Array, starts) -> Found:
        """Hill climbing (``budget.chains`` chains of ``budget.search_steps`` steps, each
        proposing ``budget.candidates`` mutations) against the mixture of the stacked
        parameters ``members`` with ``weights``, from ``starts`` ``[S, T]`` (or None) and
        fresh random inputs; the adversary networks are not run against a mixture."""
        if budget.chains == 0 or budget.search_steps == 0:
            return Found.nothing(self.instance_length, jnp.float32)
        fresh_key, search_key = jax.random.split(key)
        tokens = self.chain_starts(starts, budget.chains, fresh_key)
        mixture = SnapshotMixture(jax.vmap(self.policy)(members), jnp.asarray(weights, jnp.float32))
        steps, candidates = budget.search_steps, budget.candidates
        args = (self.problem, self.setting, mixture, search_key, tokens, steps, candidates)
        return Found(*climb(*args))  # jitted, the mixture its traced argument

    @staticmethod
    def readout(policy):
        """A policy of the interface has no separate deterministic read-out."""
        return None

    def mixture_document(self, mixture: SnapshotMixture, provenance: dict) -> dict:
        """The policy file of a delivered mixture (:func:`advonline.export.mixture_document`:
        each member the problem's own policy file, with its weight)."""
        if self.problem.export is None:
            raise ExportError(f"{self.problem.name} writes no policy files (it has no export)")
        members = [mixture.member(index) for index in range(mixture.size)]
        documents = [self.problem.export(self.setting, member) for member in members]
        weights = np.asarray(mixture.weights, np.float64)
        return mixture_document(self.setting.describe(), documents, weights, provenance)

    def summaries(self, types) -> list[dict]:
        """Each archived instance ``types`` ``[N, T]`` as the archive's listing shows it: its
        tokens (what the encoding means by them is the problem's)."""
        return [{"tokens": [int(token) for token in row]} for row in np.asarray(types)]

    def certify(self, params, start: float = 1.0, key: jax.Array | None = None):
        """The problem's certificate of the policy ``params`` (None where there is none) and,
        given ``key``, the input that attains it ``[1, T]`` (None without one). Outside
        ``jit``; ``start`` is not needed."""
        certificate = self.problem.certificate_of(self.setting, self.policy(params))
        if certificate is None:
            return None, None
        worst = None
        if key is not None and certificate.worst is not None:
            worst = np.asarray(certificate.worst, np.int32)[None]
        return certificate.ratio, worst

    def certificate_instances(self, params, ratio: float, key: jax.Array):
        """The input that attains the certificate ``[1, T]`` (None without one)."""
        return self.certify(params, ratio, key)[1]

    def descend(self, params, certificate: float, steps: int, learning_rate: float):
        """``params``, whose certificate is ``certificate``, after ``steps`` Adam steps (rate
        ``learning_rate``, cosine-decayed) down the problem's ``differentiable_certificate``:
        the parameters with the lowest value any step saw (``params`` when none went below
        ``certificate``), in the network's own precision. Float64, one jitted scan; the
        caller certifies what it returns (the oracle loop's next measurement does)."""
        with jax.enable_x64(True):
            wide = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
            found = _descend(self, wide, jnp.float64(certificate), steps, learning_rate)
        return jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), found, params)

    # What a finished run asks of the game (advonline/pipeline.py): what it delivers, its
    # policy file, its figures and its archive's listing.

    @staticmethod
    def delivered_params(state):
        """The parameters a run delivers: the measured network with the best figure (both
        loops keep it in the state)."""
        return state.best_algorithm

    def learned(self, params) -> dict:
        """``{"learned": the policy of params}`` (a policy of the interface has no separate
        deterministic read-out)."""
        return {"learned": self.policy(params)}

    def network_document(self, params, deterministic: bool, provenance: dict) -> dict:
        """The problem's policy file of the network ``params``, with its ``provenance``
        (ExportError where the problem writes none)."""
        if self.problem.export is None:
            raise ExportError(f"{self.problem.name} writes no policy files (it has no export)")
        return {**self.problem.export(self.setting, self.policy(params)), "provenance": provenance}

    @staticmethod
    def setting_title(described: dict) -> str:
        """A described setting on one line, for figure titles."""
        from advonline.evaluation import setting_line

        return setting_line(described)

    @staticmethod
    def policy_figures(name: str, policies: dict, out) -> list:
        """The learned policy's own figures: none (the problem draws none)."""
        return []

    archive_columns = ()  # the listing shows the archive's ratios only

    @staticmethod
    def archive_cells(row: dict) -> tuple:
        return ()


@functools.partial(jax.jit, static_argnums=0)
def _optimum(game: ProblemGame, types: jax.Array) -> jax.Array:
    return game.problem.offline_optimum(game.setting, game.encoding.decode(types))


#: Certificate descent's learning rate decays along a cosine to this fraction of its start.
DESCENT_FINAL_RATE = 0.05


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _descend(game: ProblemGame, params, certificate: jax.Array, steps: int, learning_rate: float):
    """:meth:`ProblemGame.descend`'s steps as one scan, keeping the best parameters seen."""
    schedule = optax.cosine_decay_schedule(learning_rate, steps, DESCENT_FINAL_RATE)
    optimiser = optax.adam(schedule)

    def certified(p):
        return game.problem.differentiable_certificate(game.setting, game.policy(p))

    def step(carry, _):
        current, opt_state, best, best_params = carry
        ratio, slope = jax.value_and_grad(certified)(current)
        keep = functools.partial(jnp.where, ratio < best)
        best_params = jax.tree.map(keep, current, best_params)
        update, opt_state = optimiser.update(slope, opt_state, current)
        carry = (optax.apply_updates(current, update), opt_state, jnp.minimum(ratio, best))
        return (*carry, best_params), None

    start = (params, optimiser.init(params), certificate, params)
    return jax.lax.scan(step, start, None, length=steps)[0][3]


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _climb(game: ProblemGame, params, key: jax.Array, tokens, steps: int, candidates: int):
    """:func:`~advonline.sources.climb` against the policy of ``params`` (built inside the
    trace, as every step of the loop builds it)."""
    policy = game.policy(params)
    return climb(game.problem, game.setting, policy, key, tokens, steps, candidates)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _train_networks(game: ProblemGame, params, keys: jax.Array, steps: int, batch: int):
    """:func:`~advonline.sources.fresh_networks` of the run's ``[adversary]`` table against
    the policy of ``params``."""
    writer, config = game.adversary, game.adversary_config
    policy = game.policy(params)
    return fresh_networks(
        game.problem, game.setting, writer, config, policy, keys, steps, batch, jnp.float32
    )
