"""The game both loops play (advonline/oracle_loop.py, advonline/simultaneous.py), for every
problem of the interface (advonline/problem.py): what follows is its default, which a
problem's own capabilities replace piece by piece (below).

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
  best response. Where the problem also writes it in JAX (``differentiable_certificate``)
  or has a descent of its own, the last ``oracle.descent_epochs`` epochs descend it
  (:meth:`Game.descend`).

The same game plays the simultaneous loop's step (advonline/simultaneous.py) when the run
gives it that loop's config: the adversary is then the noise-conditioned writer of the
encoding's tokens (:class:`~advonline.adversary.TokenWriter`), and the algorithm's update the
same exact gradient, on the step's pool.

Where the problem brings a capability of its own (:mod:`advonline.problem`: its update, its
oracles, how training uses its certificate, its writer, its policy files and views, its
per-state distributions for the loop's proximal anchor), the game calls it in place of the
default described here; posted pricing brings all of them.

Without per-state distributions a policy has nothing for the proximal anchor to hold.
Without a certificate the delivered network is the probed one with the lowest measured worst
case, each compared on the current archive (``oracle.rescore_best``); with
``oracle.mixtures`` the meta-solver's mixture of snapshots, drawn once per input
(:mod:`advonline.mixture`), competes too: a local search attacks it through its members'
exact payoffs, and it is delivered where its measured worst case is the lowest. A problem
with a certificate delivers the network with the best certificate.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
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
from advonline.simultaneous import delivered_params, game_step
from advonline.sources import climb, fresh_networks


@dataclasses.dataclass(frozen=True)
class Game:
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
    options: Any = None  # the problem's own [adversary] keys (its Writer's options), or None
    certificate_draws: int = 0  # [oracle] certificate_instances: draws from the certificate's
    # adversary strategy each epoch, where the problem draws them

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
        options=None,
        certificate_draws: int = 0,
    ) -> Game:
        config = tuple(sorted(head_config.items()))
        if options is None and problem.writer is not None:
            options = problem.writer.options()
        args = (problem, problem.name, setting, config, learning_rate, mesh, loop_config)
        return Game(*args, adversary_config, mixtures, options, certificate_draws)

    def __post_init__(self):
        # built with the game, outside any trace (also for a copy made by
        # ``dataclasses.replace``): a head, encoding or adversary first built inside a jitted
        # function would keep that trace's values as its constants
        self.head, self.encoding  # noqa: B018
        if self.adversary_config is not None or self.problem.writer is not None:
            self.adversary  # noqa: B018

    @functools.cached_property
    def head(self):
        return self.problem.policy_head(self.setting, dict(self.head_config))

    @functools.cached_property
    def encoding(self):
        """The run's encoding (for a problem with writer options, as they set it)."""
        if self.options is None:
            return self.problem.encoding(self.setting)
        return self.problem.encoding(self.setting, self.options)

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
        if (certifies := self._training_certificate("certifies")) is not None:
            return certifies(self)
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
        if self.problem.oracles is not None and optimum is not None:
            return self.problem.oracles.payoffs(self, params, types, optimum)
        policy, instances = self.policy(params), self.encoding.decode(types)
        if optimum is None:
            return payoffs_of(self.problem, self.setting, policy, instances)
        return self.problem.payoffs(self.setting, policy, instances, optimum)

    def optimum_of(self, types) -> np.ndarray:
        """OPT of the instances ``types`` ``[N, T]`` (host array), the batch padded to a power
        of two so that the epochs' varying counts share a few compilations."""
        if self.problem.oracles is not None:
            return self.problem.oracles.optimum(self, types)
        optima = on_padded_rows(functools.partial(_optimum, self), np.asarray(types, np.int32))
        return optima.astype(np.float32)

    def ascent(self, types: jax.Array, optimum: jax.Array, weigh):
        """``(params, key) -> ascent direction`` of ``sum_j w_j u_j`` with ``w =
        weigh(payoffs)``: the exact gradient (``key`` is unused), or the problem's update."""
        if self.problem.update is not None:
            return self.problem.update.tokens(self, types, optimum, weigh)

        def direction(params, key: jax.Array):
            instances = self.encoding.decode(types)
            return self.pool_update(params, instances, optimum, weigh, key)[1]

        return direction

    # What the simultaneous step (advonline/simultaneous.py) asks of the game.

    def step_function(self):
        """The simultaneous loop's step: :func:`advonline.simultaneous.game_step`, or the
        problem's writer's own."""
        writer = self.problem.writer
        return (writer.step(self) if writer is not None else None) or game_step

    @functools.cached_property
    def adversary(self):
        """The writer of the simultaneous loop and of the oracle's networks, sized by
        ``[adversary]``: the noise-conditioned writer of the encoding's tokens, or the
        problem's own."""
        if self.problem.writer is not None:
            return self.problem.writer.build(self)
        config = self.adversary_config
        network = AdversaryNetwork(self.encoding.vocabulary, config.hidden, config.layers)
        return TokenWriter(network, config.latent, self.encoding)

    def frozen(self, params):
        """What every batch of a step is written against and scored on: the policy, or what
        the problem's writer reads of it."""
        if self.problem.writer is not None:
            return self.problem.writer.frozen(self, params)
        return self.policy(params)

    def writing_inputs(self, frozen) -> tuple:
        """What the writer reads of ``frozen`` (the noise-conditioned writer: nothing)."""
        return () if self.problem.writer is None else self.problem.writer.inputs(frozen)

    def batch_optimum(self, instances) -> jax.Array:
        return self.problem.offline_optimum(self.setting, instances)

    def batch_payoffs(self, frozen, instances, optimum: jax.Array) -> jax.Array:
        if self.problem.writer is not None:
            return self.problem.writer.payoffs(self, frozen, instances, optimum)
        return self.problem.payoffs(self.setting, frozen, instances, optimum)

    def decode(self, tokens: jax.Array, dtype):
        """The problem's instances of ``tokens`` ``[N, T]`` (in the problem's own dtype)."""
        return self.encoding.decode(tokens)

    @property
    def update_draws(self) -> bool:
        """Whether the algorithm's update reads its key (the exact gradient does not)."""
        return self.problem.update is not None and self.problem.update.draws(self)

    def pool_update(self, params, instances, optimum: jax.Array, weigh, key):
        """The pool's payoffs ``[P]`` and the exact gradient of ``sum_j w_j u_j``, ``w =
        weigh(payoffs)`` (``key`` is unused), or the problem's update."""
        if self.problem.update is not None:
            return self.problem.update.pool(self, params, instances, optimum, weigh, key)

        def payoffs(p):
            return self.problem.payoffs(self.setting, self.policy(p), instances, optimum)

        payoff, pull_back = jax.vjp(payoffs, params)
        return payoff, pull_back(jax.lax.stop_gradient(weigh(payoff)))[0]

    def best_responses(self, params, budget, key: jax.Array, starts) -> Found:
        """Hill climbing (``budget.chains`` chains of ``budget.search_steps`` steps, each
        proposing ``budget.candidates`` mutations) against the policy ``params``, from
        ``starts`` ``[S, T]`` (or None) and fresh random inputs for the other chains; with
        ``budget.restarts`` and an ``[adversary]`` table, beside it that many fresh adversary
        networks (:meth:`network_responses`). Everything found is returned. A problem with
        oracles of its own answers instead."""
        if self.problem.oracles is not None:
            return self.problem.oracles.best_responses(self, params, budget, key, starts)
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

    def member_table(self, params):
        """What a snapshot contributes to :meth:`mixture_search`: its parameters (the search
        scores the mixture through the members' payoffs), or what the problem's oracles
        score it by."""
        if self.problem.oracles is not None:
            return self.problem.oracles.member(self, params)
        return params

    def mixture(self, members, weights) -> SnapshotMixture:
        """The randomised algorithm that plays member ``m`` of the stacked parameters
        ``members`` with probability ``weights[m]``, drawn once per input."""
        return snapshot_mixture(members, weights, self.policy)

    def mixture_search(self, members, weights, budget, key: jax.Array, starts) -> Found:
        """Hill climbing (``budget.chains`` chains of ``budget.search_steps`` steps, each
        proposing ``budget.candidates`` mutations) against the mixture of the stacked
        parameters ``members`` with ``weights``, from ``starts`` ``[S, T]`` (or None) and
        fresh random inputs; the adversary networks are not run against a mixture. A problem
        with oracles of its own searches its way."""
        if self.problem.oracles is not None:
            search = self.problem.oracles.mixture_search
            return search(self, members, weights, budget, key, starts)
        if budget.chains == 0 or budget.search_steps == 0:
            return Found.nothing(self.instance_length, jnp.float32)
        fresh_key, search_key = jax.random.split(key)
        tokens = self.chain_starts(starts, budget.chains, fresh_key)
        mixture = SnapshotMixture(jax.vmap(self.policy)(members), jnp.asarray(weights, jnp.float32))
        steps, candidates = budget.search_steps, budget.candidates
        args = (self.problem, self.setting, mixture, search_key, tokens, steps, candidates)
        return Found(*climb(*args))  # jitted, the mixture its traced argument

    def readout(self, policy):
        """The problem's deterministic read-out of ``policy``, or None without one."""
        return None if self.problem.read_out is None else self.problem.read_out(policy)

    def mixture_document(self, mixture: SnapshotMixture, provenance: dict) -> dict:
        """The policy file of a delivered mixture (:func:`advonline.export.mixture_document`:
        each member the problem's own policy file, with its weight), or the problem's."""
        if self.problem.documents is not None:
            return self.problem.documents.mixture(self, mixture, provenance)
        if self.problem.export is None:
            raise ExportError(f"{self.problem.name} writes no policy files (it has no export)")
        members = [mixture.member(index) for index in range(mixture.size)]
        documents = [self.problem.export(self.setting, member) for member in members]
        weights = np.asarray(mixture.weights, np.float64)
        return mixture_document(self.setting.describe(), documents, weights, provenance)

    def summaries(self, types) -> list[dict]:
        """Each archived instance ``types`` ``[N, T]`` as the archive's listing shows it: its
        tokens (what the encoding means by them is the problem's), or the problem's view."""
        if self.problem.views is not None:
            return self.problem.views.summaries(self, types)
        return [{"tokens": [int(token) for token in row]} for row in np.asarray(types)]

    def _training_certificate(self, name: str) -> Callable | None:
        """The problem's own ``name`` of :class:`~advonline.problem.TrainingCertificate`, or
        None for the core's."""
        capability = self.problem.training_certificate
        return None if capability is None else getattr(capability, name)

    def certify(self, params, start: float = 1.0, key: jax.Array | None = None):
        """The problem's certificate of the policy ``params`` (None where there is none) and,
        given ``key``, the input that attains it ``[1, T]`` (None without one). Outside
        ``jit``; ``start`` is not needed. A problem that draws from its certificate's strategy
        returns its ``certificate_draws`` draws (:class:`advonline.problem.TrainingCertificate`)."""
        if (certify := self._training_certificate("certify")) is not None:
            return certify(self, params, start, key)
        certificate = self.problem.certificate_of(self.setting, self.policy(params))
        if certificate is None:
            return None, None
        worst = None
        if key is not None and certificate.worst is not None:
            worst = np.asarray(certificate.worst, np.int32)[None]
        return certificate.ratio, worst

    def certificate_instances(self, params, ratio: float, key: jax.Array):
        """The input that attains the certificate ``[1, T]`` (None without one), or the
        problem's draws from the strategy that attains the value just below ``ratio``."""
        if (below := self._training_certificate("below")) is not None:
            return below(self, params, ratio, key)
        return self.certify(params, ratio, key)[1]

    def descend(self, params, certificate: float, steps: int, learning_rate: float):
        """``params``, whose certificate is ``certificate``, after ``steps`` Adam steps (rate
        ``learning_rate``, cosine-decayed) down the problem's ``differentiable_certificate``:
        the parameters with the lowest value any step saw (``params`` when none went below
        ``certificate``), in the network's own precision. Float64, one jitted scan; the
        caller certifies what it returns (the oracle loop's next measurement does). A problem
        with its own descent descends its way."""
        if (descend := self._training_certificate("descend")) is not None:
            return descend(self, params, certificate, steps, learning_rate)
        with jax.enable_x64(True):
            wide = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
            found = _descend(self, wide, jnp.float64(certificate), steps, learning_rate)
        return jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), found, params)

    # What a finished run asks of the game (advonline/pipeline.py): what it delivers, its
    # policy file, its figures and its archive's listing.

    def delivered_params(self, state):
        """The parameters a run delivers (:func:`advonline.simultaneous.delivered_params`: the
        measured network with the best figure, which both loops keep in the state)."""
        return delivered_params(self, state)

    def learned(self, params) -> dict:
        """``{"learned": the policy of params}``, and ``"learned-deterministic"``: its
        read-out, where the problem has one."""
        policy = self.policy(params)
        readout = self.readout(policy)
        return {"learned": policy} | ({} if readout is None else {"learned-deterministic": readout})

    def state_probs(self, params):
        """The policy's distributions in every state (the proximal anchor's; the problem's
        ``state_distributions``, which a config's ``oracle.anchor`` needs)."""
        return self.problem.state_distributions(self, params)

    def network_document(self, params, deterministic: bool, provenance: dict) -> dict:
        """The problem's policy file of the network ``params`` (with ``deterministic`` of its
        read-out), with its ``provenance`` (ExportError where the problem writes none)."""
        if self.problem.documents is not None:
            return self.problem.documents.network(self, params, deterministic, provenance)
        if self.problem.export is None:
            raise ExportError(f"{self.problem.name} writes no policy files (it has no export)")
        return {**self.problem.export(self.setting, self.policy(params)), "provenance": provenance}

    def table_document(self, policy, provenance: dict) -> dict:
        """The policy file of ``policy`` tabulated (``export --table``; ExportError where the
        problem writes none)."""
        if self.problem.documents is None:
            raise ExportError(f"{self.problem.name} writes no table policy files")
        return self.problem.documents.table(self, policy, provenance)

    def setting_title(self, described: dict) -> str:
        """A described setting on one line, for figure titles."""
        if self.problem.views is not None:
            return self.problem.views.setting_title(described)
        from advonline.evaluation import setting_line

        return setting_line(described)

    def policy_figures(self, name: str, policies: dict, out) -> list:
        """The learned policy's own figures, where the problem draws any."""
        if self.problem.views is None:
            return []
        return self.problem.views.policy_figures(self, name, policies, out)

    @property
    def archive_columns(self) -> tuple:
        """The columns the archive's listing adds for each instance (none by default)."""
        return () if self.problem.views is None else self.problem.views.archive_columns

    def archive_cells(self, row: dict) -> tuple:
        """An archived instance's own cells in the listing, from its summary."""
        return () if self.problem.views is None else self.problem.views.archive_cells(row)

    @property
    def has_traces(self) -> bool:
        """Whether the problem writes archived instances as traces (``archive --traces``)."""
        return self.problem.views is not None

    def traces(self, types):
        """The instances ``types`` ``[N, T]`` as the problem's traces ``(header, rows)``."""
        return self.problem.views.traces(self, types)


@functools.partial(jax.jit, static_argnums=0)
def _optimum(game: Game, types: jax.Array) -> jax.Array:
    return game.problem.offline_optimum(game.setting, game.encoding.decode(types))


#: Certificate descent's learning rate decays along a cosine to this fraction of its start.
DESCENT_FINAL_RATE = 0.05


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _descend(game: Game, params, certificate: jax.Array, steps: int, learning_rate: float):
    """:meth:`Game.descend`'s steps as one scan, keeping the best parameters seen."""
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
def _climb(game: Game, params, key: jax.Array, tokens, steps: int, candidates: int):
    """:func:`~advonline.sources.climb` against the policy of ``params`` (built inside the
    trace, as every step of the loop builds it)."""
    policy = game.policy(params)
    return climb(game.problem, game.setting, policy, key, tokens, steps, candidates)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _train_networks(game: Game, params, keys: jax.Array, steps: int, batch: int):
    """:func:`~advonline.sources.fresh_networks` of the run's ``[adversary]`` table against
    the policy of ``params``."""
    writer, config = game.adversary, game.adversary_config
    policy = game.policy(params)
    return fresh_networks(
        game.problem, game.setting, writer, config, policy, keys, steps, batch, jnp.float32
    )
