"""The oracle loop: double oracle over an archive of hard instances (docs/method.md, "The
game as an oracle loop").

Simultaneous gradient play against one live adversary network cycles: the adversary
forgets what it found, the algorithm forgets what it was beaten by, and a fresh adversary
finds what the live one lost. The oracle loop keeps everything instead. Each epoch:

1. **Snapshot.** The current pricing network joins the restricted game as a row.
2. **Oracles.** Fresh best-response searches against it (:func:`~posted_price.oracles.
   best_responses`: restarted adversary networks, then local search seeded from the archive
   and from their finds) add their hardest new instances to the bounded archive as columns.
3. **Meta-solver.** The restricted game (snapshots x archive, payoff ``E[ALG] / OPT``) is
   solved by LP (:mod:`advonline.meta`, HiGHS, outside ``jit``): the adversary's equilibrium
   mixture ``q`` over instances and the value ``v`` the best mixture of snapshots guarantees.
4. **Measurement.** A probe stronger than the oracles (``probe_scale`` times their restarts,
   steps and chains, from its own keys) attacks the current network: the exploitability is
   ``probe CR / restricted CR - 1`` with ``restricted CR = 1 / v`` and the probe CR the worst
   of the probe's finds and the archive. The DP certificate's upper bound on the current
   network's CR (float64, outside ``jit``) is its guarantee; the run keeps the network with
   the best guarantee so far, which therefore never rises. The certificate's iteration
   starts from the worst ratio found (an attained lower bound on the CR), and is skipped when
   that ratio already reaches the best guarantee, since no bound could then beat it. With
   ``oracle.certificate_instances`` the certificate is also an oracle: the game draws that
   many runs of the adversary strategy behind the bound (an exact best response), and the
   hardest join the archive (origin ``certificate``); ``probe_every = 0`` probes only the
   last epoch. (Without a certificate, as for posted pricing's K >= 2, the run keeps the
   network whose measured
   worst case, the worst of the probe's finds and the archive, is lowest so far: a lower
   bound on its CR; only probed epochs compete, since the archive alone is a weaker search
   and would flatter an unprobed network; with ``oracle.rescore_best`` the kept network's
   figure is first raised to its worst ratio on the current archive, so that the two are
   measured on the same inputs.) What the probe found then joins the archive (it
   is this run's own search, not the evaluator's).
   Where the game mixes (``oracle.mixtures`` and no certificate of the networks: posted
   pricing with K >= 2, or a problem without one) a second probe attacks the algorithm's
   equilibrium mixture of snapshots, chosen once per input (:mod:`advonline.mixture`), by
   local search on its exact payoff; its measured worst case and its exploitability (that
   worst case over the restricted CR, minus 1) are logged, and it is kept, and delivered,
   when it beats everything kept so far. The last measurement closes the gap
   (``oracle.closing_rounds``): it probes the mixture again, after the restricted game is
   solved with the previous probe's finds, until the exploitability is at most
   ``oracle.closing_tolerance`` or the rounds are spent. With the snapshots fixed, this is
   the adversary's half of double oracle; the best mixture any round measured is kept. What
   these probes find joins the archive, and before either candidate is compared the network's
   figure and the kept mixture's are raised to their worst ratios on the archive as it then
   stands: an instance found against the mixture that hits the network harder counts against
   the network too. The snapshots' tables are built once each (:class:`MemberTables`).
5. **Training.** ``epoch_steps`` per-round all-action updates of the pricing network
   (:func:`~posted_price.training.per_round_update`, one jitted ``lax.scan``; for K >= 2 the exact
   gradient of the same weighted payoff through the product-grid induction of
   :mod:`posted_price.product_grid`, which is what the all-action update computes) against the
   archive's filled slots (:func:`training_batch`),
   weighted by ``(1 - w) q + w softmin(current payoffs)`` with ``w = worst_case_weight``:
   the equilibrium mixture keeps the weights stable across epochs, the softmin keeps the one
   network that is delivered robust to every archived instance. (``algorithm.update =
   "reinforce"``, the ablation, replaces the all-action direction by REINFORCE on sampled
   runs, with the same weights.)

The ``game`` is :class:`advonline.game.Game` (with the problem's own
capabilities where it brings them): the loop asks it for fresh parameters, exact
payoffs of token instances, the distributions in every state (for the anchor), the update
direction, both oracles, OPT, the certificate and the mixture it delivers, and keeps
everything else here. :func:`run_epochs` drives it for ``advonline train`` and ``advonline
run`` alike.

The epoch after the last training measures the final network, so a run of ``E`` epochs
trains ``E`` times and measures ``E + 1`` times. No step reads the evaluator's hard families
or its seeds: the archive is filled by the oracles alone.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from advonline import archive as archives
from advonline import meta, profile
from advonline.configs import OracleConfig
from advonline.mixture import SnapshotMixture, mixed_payoffs, positive_members
from advonline.ratio import ratios_of_payoffs, softmin_weights
from advonline.search import Found

#: Relative rounding of a ratio computed in float32, with room to spare.
_ROUNDING = 1e-4

#: Fold-in tags that keep the run's key streams apart.
_TRAIN, _ORACLES, _PROBE, _MIXTURE_PROBE, _CERTIFICATE = 0, 1, 2, 3, 4


@struct.dataclass
class OracleState:
    """Everything that changes during an oracle-loop run (a pytree; what a checkpoint holds)."""

    step: jax.Array  # [] int32 algorithm updates made
    epoch: jax.Array  # [] int32 measurements made
    key: jax.Array
    algorithm: dict
    algorithm_opt: optax.OptState
    archive: archives.Archive
    adversary_mixture: jax.Array  # [N] the adversary's equilibrium mixture over the archive
    algorithm_mixture: jax.Array  # [S] the algorithm's over the snapshots
    best_algorithm: dict  # the pricing parameters with the best guarantee so far
    best_score: jax.Array  # [] that guarantee (K = 1: an upper bound on the CR; K >= 2: the
    # measured worst case, a lower bound); inf before any
    best_members: dict  # K >= 2: the snapshots of the mixture with the best guarantee, when a
    # mixture holds it (leading [S] axis, like the archive's)
    best_weights: jax.Array  # [S] that mixture's weights; all zero when one network holds it


class EpochRecord(NamedTuple):
    """What one measurement logs (a metrics row)."""

    restricted_ratio: float  # 1 / v: the restricted game's CR
    oracle_ratio: float  # worst ratio the epoch's oracles found against the current network
    archive_ratio: float  # worst ratio of any archived instance against it (where its
    # mixture was probed, once the probes' finds joined)
    probe_ratio: float | None  # worst ratio the probe found (None when not probed)
    certificate_ratio: float | None  # worst ratio of the draws from the certificate's
    # strategy (None when none were drawn)
    exploitability: float | None  # max(probe, archive) / restricted CR - 1
    upper_bound: float | None  # the DP certificate's bound on the current network's CR (K = 1)
    guarantee: float  # the best bound so far (never rises; without a certificate the kept
    # network's measured worst case, raised by the archive with ``oracle.rescore_best``)
    archive_size: int
    support: int  # instances in the adversary's equilibrium mixture
    mixture_ratio: float | None = None  # K >= 2: the measured worst case of the algorithm's
    # equilibrium mixture (the worst of the archive and a probe against the mixture)
    mixture_exploitability: float | None = None  # mixture_ratio / restricted CR - 1


def init_oracle_state(game, oracle: OracleConfig, key: jax.Array) -> OracleState:
    """Fresh algorithm parameters, an empty archive of ``oracle``'s sizes, no snapshot."""
    key_alg, key_run = jax.random.split(key)
    algorithm = game.init_params(key_alg)
    length = game.instance_length
    empty = archives.empty_archive(oracle.archive_size, length, oracle.snapshots, algorithm)
    return OracleState(
        step=jnp.zeros((), jnp.int32),
        epoch=jnp.zeros((), jnp.int32),
        key=key_run,
        algorithm=algorithm,
        algorithm_opt=game.algorithm_optimizer().init(algorithm),
        archive=empty,
        adversary_mixture=jnp.zeros(oracle.archive_size, jnp.float32),
        algorithm_mixture=jnp.zeros(oracle.snapshots, jnp.float32),
        best_algorithm=algorithm,
        best_score=jnp.asarray(jnp.inf, jnp.float32),
        best_members=empty.snapshots,
        best_weights=jnp.zeros(oracle.snapshots, jnp.float32),
    )


def epoch_key(state: OracleState, stream: int) -> jax.Array:
    """The key of one stream (training, oracles, probe) of the current epoch, each used once."""
    return jax.random.fold_in(jax.random.fold_in(state.key, state.epoch), stream)


@functools.partial(jax.jit, static_argnums=0)
def payoff_matrix(game, snapshots: dict, types: jax.Array, optimum: jax.Array) -> jax.Array:
    """``[S, N]`` exact payoffs ``E[ALG_i(I_j)] / OPT(I_j)`` of every stored snapshot on every
    archived instance (empty slots give meaningless entries that the caller masks). The
    snapshots go one after another (``lax.map``): each one's tables are as large as a
    training step's, and all of them at once would not fit for K = 3."""
    types, optimum = game.shard((types, optimum))
    return jax.lax.map(lambda params: game.payoffs(params, types, optimum), snapshots)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 9))
def train_against(
    game,
    oracle: OracleConfig,
    temperature: float,
    params: dict,
    opt_state: optax.OptState,
    types: jax.Array,
    optimum: jax.Array,
    filled: jax.Array,
    mixture: jax.Array,
    steps: int,
    key: jax.Array,
) -> tuple[dict, optax.OptState]:
    """``steps`` per-round updates of the pricing network against the archive, weighted by
    ``(1 - w) mixture + w softmin(payoffs)`` (module docstring, step 5), each pulled back
    towards the epoch's starting network by ``oracle.anchor`` times the gradient of the mean
    KL divergence over every state: archived instances visit few states, and the anchor
    keeps the updates from moving the prices in the states none of them reaches. With
    ``algorithm.update = "reinforce"`` (the ablation) the ascent direction is REINFORCE on
    sampled runs instead, with the same weights from exact payoffs; ``key`` feeds its runs.
    ``temperature`` is the softmin's (``game.temperature``)."""
    types, optimum, filled, mixture = game.shard((types, optimum, filled, mixture))
    share = oracle.worst_case_weight
    softmin = functools.partial(softmin_weights, valid=filled, temperature=temperature)
    optimizer = game.algorithm_optimizer()

    def weigh(payoff: jax.Array) -> jax.Array:
        return (1 - share) * mixture + share * softmin(payoff)

    # the anchor's reference distributions (a game whose policies have none runs without it)
    start = jax.lax.stop_gradient(game.state_probs(params)) if oracle.anchor > 0 else None
    ascent_direction = game.ascent(types, optimum, weigh)

    def drift(p: dict) -> jax.Array:
        """Mean over every state of KL(start || current): the proximal term."""
        probs = game.state_probs(p)
        log_ratio = jnp.log(jnp.maximum(start, 1e-30)) - jnp.log(jnp.maximum(probs, 1e-30))
        return jnp.mean(jnp.sum(start * log_ratio, axis=-1))

    def update(carry, key_step):
        params, opt_state = carry
        ascent = ascent_direction(params, key_step)
        descent = jax.tree.map(jnp.negative, ascent)
        if oracle.anchor > 0:
            pull = jax.grad(drift)(params)
            descent = jax.tree.map(lambda d, g: d + oracle.anchor * g, descent, pull)
        updates, opt_state = optimizer.update(descent, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    keys = jax.random.split(key, steps)
    (params, opt_state), _ = jax.lax.scan(update, (params, opt_state), keys)
    return params, opt_state


@functools.partial(jax.jit, static_argnums=0)
def snapshot_payoffs(game, params: dict, types: jax.Array, optimum: jax.Array):
    """Exact payoffs ``[N]`` of the network ``params`` on the instances ``types``."""
    return game.payoffs(params, types, optimum)


def network_ratios(game, params: dict, archive: archives.Archive) -> np.ndarray:
    """Exact ratios ``OPT / E[ALG]`` ``[N]`` of the network ``params`` on every archive slot
    (empty slots give meaningless entries that the caller masks)."""
    stacked = jax.tree.map(lambda leaf: leaf[None], params)
    return ratios_of_payoffs(payoff_matrix(game, stacked, archive.types, archive.optimum)[0])


def _score_row(game, archive: archives.Archive, slot: int) -> archives.Archive:
    """Snapshot ``slot``'s payoff row on every archive slot (fixed shape: one compilation)."""
    params = archives.snapshot_params(archive, slot)
    values = snapshot_payoffs(game, params, archive.types, archive.optimum)
    columns = np.arange(archive.filled.shape[0])
    return archives.set_payoffs(archive, np.array([slot]), columns, np.asarray(values)[None])


def _score_columns(
    game, archive: archives.Archive, written: np.ndarray, count: int
) -> archives.Archive:
    """The payoff columns of the newly ``written`` instance slots for every snapshot slot;
    the slots are padded by repetition to ``count`` (``oracle.new_per_epoch``) so that one
    compilation serves every epoch. Nothing else in the matrix changes when instances are
    added."""
    if written.size == 0:
        return archive
    padded = np.resize(written, max(count, written.size))
    values = payoff_matrix(game, archive.snapshots, archive.types[padded], archive.optimum[padded])
    rows = np.arange(archive.snapshot_filled.shape[0])
    return archives.set_payoffs(archive, rows, written, np.asarray(values)[:, : written.size])


def _current_ratios(archive: archives.Archive, slot: int) -> np.ndarray:
    """``[N]`` ratios of every archived instance against snapshot ``slot`` (0 where empty)."""
    ratios = ratios_of_payoffs(archive.payoffs[slot])
    return np.where(np.asarray(archive.filled), ratios, 0.0)


def _archive_found(
    game, state: OracleState, found: Found, slot: int, origin: str, count: int
) -> archives.Archive:
    """Add the ``count`` (``oracle.new_per_epoch``) hardest distinct instances of ``found`` to
    the archive, evicting the least useful (outside the adversary's mixture, lowest ratio
    against the current network), and score their columns."""
    archive = state.archive
    order = np.argsort(-np.asarray(found.ratios), kind="stable")
    types = np.asarray(found.types)[order]
    _, first = np.unique(types, axis=0, return_index=True)
    types = types[np.sort(first)][:count]
    optimum = game.optimum_of(types)
    in_mixture = np.asarray(state.adversary_mixture) > 0
    usefulness = np.where(in_mixture, np.inf, _current_ratios(archive, slot))
    archive, written = archives.add_instances(
        archive,
        types,
        optimum,
        usefulness,
        int(state.epoch),
        np.full(len(types), archives.ORIGINS.index(origin)),
    )
    return _score_columns(game, archive, written, count)


def _solve(state: OracleState) -> tuple[OracleState, meta.MetaSolution]:
    """The restricted game's equilibrium, stored as full-length mixtures."""
    archive = state.archive
    solution = meta.solve(archives.restricted_game(archive))
    adversary = np.zeros(archive.filled.shape[0], np.float32)
    adversary[archives.instance_slots(archive)] = solution.adversary
    algorithm = np.zeros(archive.snapshot_filled.shape[0], np.float32)
    algorithm[archives.snapshot_slots(archive)] = solution.algorithm
    state = state.replace(
        adversary_mixture=jnp.asarray(adversary), algorithm_mixture=jnp.asarray(algorithm)
    )
    return state, solution


def _oracle_search(game, state: OracleState, slot: int, budget, key: jax.Array) -> Found:
    """Both oracles against the current network; local search starts from the archived
    instances that are hardest for it."""
    ratios = _current_ratios(state.archive, slot)
    hardest = np.argsort(-ratios, kind="stable")[: budget.chains // 2]
    starts = np.asarray(state.archive.types)[hardest[ratios[hardest] > 0]]
    return game.best_responses(state.algorithm, budget, key, starts if starts.size else None)


def _certificate_found(
    game, state: OracleState, slot: int, types: np.ndarray, count: int
) -> tuple[float, archives.Archive]:
    """The certificate as an oracle: ``types`` ``[N, T]``, instances drawn from the adversary
    strategy behind the DP's value, scored exactly against the current network; the worst
    draw's ratio, and the archive with the hardest draws added."""
    optimum = game.optimum_of(types)
    payoffs = snapshot_payoffs(game, state.algorithm, jnp.asarray(types), jnp.asarray(optimum))
    found = Found(jnp.asarray(types), jnp.asarray(ratios_of_payoffs(payoffs)))
    archive = _archive_found(game, state, found, slot, "certificate", count)
    return float(np.max(found.ratios)), archive


def probes_mixture(game, state: OracleState) -> bool:
    """Whether this epoch's probe also measures the algorithm's equilibrium mixture: the game
    allows mixtures (:attr:`~advonline.game.Game.mixes`) and the mixture has
    two snapshots or more."""
    return game.mixes and int((np.asarray(state.algorithm_mixture) > 0).sum()) > 1


class MemberTables:
    """The snapshots' tables for the mixture search (the game's ``member_table``: for posted
    pricing a per-type sale table, else the parameters themselves), built once each: a
    snapshot never changes once taken, so the table of the one taken at epoch ``e`` is kept
    under ``e`` until the snapshot leaves the archive. A host-side memo (not part of the
    checkpoint)."""

    def __init__(self):
        self._tables: dict[int, jax.Array] = {}

    def stacked(self, game, archive: archives.Archive, slots: np.ndarray) -> jax.Array:
        """The tables of snapshot ``slots``, stacked (a leading ``[M]`` axis)."""
        epochs = np.asarray(archive.snapshot_epoch)
        live = {int(epochs[slot]) for slot in archives.snapshot_slots(archive)}
        self._tables = {epoch: t for epoch, t in self._tables.items() if epoch in live}
        for slot in slots:
            if int(epochs[slot]) not in self._tables:
                params = archives.snapshot_params(archive, int(slot))
                self._tables[int(epochs[slot])] = game.member_table(params)
        tables = [self._tables[int(epochs[slot])] for slot in slots]
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *tables)


def mixture_ratios(game, member_payoffs, weights) -> np.ndarray:
    """Ratios ``[N]`` (float64) of the mixture with ``weights`` ``[M]`` from its members'
    payoffs ``[M, N]`` (:func:`~advonline.mixture.mixed_payoffs`, the game's objective)."""
    payoffs = np.asarray(member_payoffs, np.float64)
    return ratios_of_payoffs(mixed_payoffs(payoffs, np.asarray(weights), game.objective))


def _positive_slots(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The snapshot slots a mixture with ``weights`` ``[S]`` draws from, and their weights
    renormalised to sum to 1 (host, float64: the archive's payoffs are indexed by slot)."""
    slots = np.flatnonzero(weights > 0)
    return slots, weights[slots] / weights[slots].sum()


def _mixture_ratios_on_archive(game, archive: archives.Archive, weights: np.ndarray) -> np.ndarray:
    """``[N]`` ratios of every archived instance against the mixture of snapshots with
    ``weights`` ``[S]`` (one per snapshot slot), from the archive's payoffs (0 where empty)."""
    slots, member_weights = _positive_slots(weights)
    mixed = mixture_ratios(game, np.asarray(archive.payoffs)[slots], member_weights)
    return np.where(np.asarray(archive.filled), mixed, 0.0)


def _mixture_probe(
    game, state: OracleState, budget, key: jax.Array, tables: MemberTables
) -> tuple[float, Found]:
    """The measured worst case of the algorithm's equilibrium mixture (chosen once per input):
    the worst of its ratios on the archive and of a local search against it (the game's
    ``mixture_search``) started from the archived instances hardest for it; and what that
    search found."""
    archive, weights = state.archive, np.asarray(state.algorithm_mixture)
    slots, member_weights = _positive_slots(weights)
    on_archive = _mixture_ratios_on_archive(game, archive, weights)
    hardest = np.argsort(-on_archive, kind="stable")[: budget.chains // 2]
    starts = np.asarray(archive.types)[hardest[on_archive[hardest] > 0]]
    stacked = tables.stacked(game, archive, slots)
    starts = starts if starts.size else None
    found = game.mixture_search(stacked, member_weights, budget, key, starts)
    searched = float(jnp.max(found.ratios)) if found.ratios.size else 0.0
    return max(float(on_archive.max()), searched), found


def keep_best(
    state,
    network_score: float | None,
    mixture: tuple[dict, jax.Array] | None = None,
    mixture_score: float | None = None,
):
    """The best-so-far selector of both loops (lower scores are better): keep the current
    network (score ``network_score``) or the mixture ``(snapshots, weights)`` (score
    ``mixture_score``) where it beats the best score so far, the network first; the best
    score never rises. In the oracle loop keeping a network clears the kept mixture's
    weights, and keeping a mixture leaves the best network as it was (its read-out is the
    heaviest member's). ``state`` is any loop's state with ``algorithm``,
    ``best_algorithm`` and ``best_score``."""
    if network_score is not None and network_score < float(state.best_score):
        state = state.replace(
            best_algorithm=state.algorithm,
            best_score=jnp.asarray(network_score, state.best_score.dtype),
        )
        if isinstance(state, OracleState):
            state = state.replace(best_weights=jnp.zeros_like(state.best_weights))
    if mixture_score is not None and mixture_score < float(state.best_score):
        state = state.replace(
            best_members=mixture[0],
            best_weights=jnp.asarray(mixture[1], state.best_weights.dtype),
            best_score=jnp.asarray(mixture_score, state.best_score.dtype),
        )
    return state


def measure_epoch(
    game,
    oracle: OracleConfig,
    state: OracleState,
    last: bool,
    tables: MemberTables | None = None,
    clock: profile.PhaseClock | None = None,
) -> tuple[OracleState, EpochRecord]:
    """Steps 1-4 of an epoch (module docstring) for the current network, with ``oracle``'s
    budgets; ``last`` when training is over (the probe and the closing rounds then run);
    ``tables`` keeps the snapshots' tables from one epoch to the next (a fresh memo when
    None); ``clock`` hears the seconds of each phase (:mod:`advonline.profile`)."""
    tables = MemberTables() if tables is None else tables
    clock = profile.PhaseClock() if clock is None else clock
    count = oracle.new_per_epoch
    epoch = int(state.epoch)
    keep = np.asarray(state.algorithm_mixture) > 0
    with clock.phase("oracles"):
        archive, slot = archives.add_snapshot(state.archive, state.algorithm, epoch, keep)
        state = state.replace(archive=_score_row(game, archive, slot))
        found = _oracle_search(game, state, slot, oracle.budget(), epoch_key(state, _ORACLES))
        state = state.replace(archive=_archive_found(game, state, found, slot, "oracles", count))
        oracle_ratio = float(jnp.max(found.ratios))
        jax.block_until_ready(state.archive)
    with clock.phase("meta_solver"):
        state, solution = _solve(state)
    archive_ratio = float(_current_ratios(state.archive, slot).max())
    probe_ratio = exploitability = mixture_ratio = mixture_exploitability = None
    mixture = None  # ((snapshots, weights), measured worst case) of the best mixture measured
    if last or (oracle.probe_every > 0 and epoch % oracle.probe_every == 0):
        probe_budget = oracle.budget().scaled(oracle.probe_scale)
        with clock.phase("probe"):
            probed = _oracle_search(game, state, slot, probe_budget, epoch_key(state, _PROBE))
            probe_ratio = float(jnp.max(probed.ratios))
            exploitability = max(probe_ratio, archive_ratio) / solution.ratio - 1.0
            state = state.replace(archive=_archive_found(game, state, probed, slot, "probe", count))
            jax.block_until_ready(state.archive)
        with clock.phase("meta_solver"):
            state, solution = _solve(state)
        rounds = 1 + (oracle.closing_rounds if last else 0)
        for round_ in range(rounds):
            if not probes_mixture(game, state):
                break
            measured = (state.archive.snapshots, state.algorithm_mixture)
            key = jax.random.fold_in(epoch_key(state, _MIXTURE_PROBE), round_)
            with clock.phase("closing"):
                mixture_ratio, against_mixture = _mixture_probe(
                    game, state, probe_budget, key, tables
                )
                mixture_exploitability = mixture_ratio / solution.ratio - 1.0
                if mixture is None or mixture_ratio < mixture[1]:
                    mixture = (measured, mixture_ratio)
                archive = _archive_found(game, state, against_mixture, slot, "probe", count)
                state = state.replace(archive=jax.block_until_ready(archive))
            with clock.phase("meta_solver"):
                state, solution = _solve(state)
            if mixture_exploitability <= oracle.closing_tolerance:
                break
    if mixture is not None:  # the mixture probe's finds count against both candidates
        archive_ratio = max(archive_ratio, float(_current_ratios(state.archive, slot).max()))
        (snapshots, weights), measured_ratio = mixture
        on_archive = _mixture_ratios_on_archive(game, state.archive, np.asarray(weights))
        mixture = ((snapshots, weights), max(measured_ratio, float(on_archive.max())))
    attained = max(archive_ratio, probe_ratio or 0.0)  # a lower bound on the CR
    bound = drawn = certificate_ratio = None
    draws = game.certifies and oracle.certificate_instances > 0
    key = epoch_key(state, _CERTIFICATE) if draws else None
    with clock.phase("certificate"):
        if game.certifies and attained < float(state.best_score):  # else no bound beats it
            start = attained * (1 - _ROUNDING)  # below the float32 ratio's rounding
            bound, drawn = game.certify(state.algorithm, start, key)
        elif draws and math.isfinite(attained):  # the strategy at least as hard as attained
            drawn = game.certificate_instances(state.algorithm, attained, key)
        if drawn is not None:
            certificate_ratio, archive = _certificate_found(game, state, slot, drawn, count)
            state = state.replace(archive=jax.block_until_ready(archive))
    if drawn is not None:
        with clock.phase("meta_solver"):
            state, solution = _solve(state)
    # no certificate: the worst case measured, where a probe measured it (the archive alone
    # is a weaker search, so an unprobed epoch's figure is not comparable with a probed one's)
    score = bound if game.certifies else (attained if probe_ratio is not None else None)
    if score is not None and not game.certifies and oracle.rescore_best:
        state = _rescore_best(game, state)
    best_mixture, best_mixture_ratio = mixture if mixture is not None else (None, None)
    state = keep_best(state, score, best_mixture, best_mixture_ratio)
    record = EpochRecord(
        restricted_ratio=solution.ratio,
        oracle_ratio=oracle_ratio,
        archive_ratio=archive_ratio,
        probe_ratio=probe_ratio,
        certificate_ratio=certificate_ratio,
        exploitability=exploitability,
        upper_bound=bound,
        guarantee=float(state.best_score),
        archive_size=int(state.archive.filled.sum()),
        support=int((np.asarray(state.adversary_mixture) > 0).sum()),
        mixture_ratio=mixture_ratio,
        mixture_exploitability=mixture_exploitability,
    )
    return state.replace(epoch=state.epoch + 1), record


def _rescore_best(game, state: OracleState) -> OracleState:
    """``oracle.rescore_best``: the kept network's (or kept mixture's) measured worst case
    raised to its worst ratio on the current archive (a lower bound on its CR, as the
    measurement was)."""
    if not math.isfinite(float(state.best_score)):
        return state
    archive = state.archive
    ratios = kept_ratios(game, state)
    worst = np.where(np.asarray(archive.filled), ratios, 0.0).max()
    raised = max(float(state.best_score), float(worst))
    return state.replace(best_score=jnp.asarray(raised, state.best_score.dtype))


#: The smallest batch the archive's instances are trained on (:func:`training_slots`).
_SMALLEST_BATCH = 64


def training_slots(
    filled: np.ndarray, devices: int, smallest: int = _SMALLEST_BATCH
) -> tuple[np.ndarray, np.ndarray]:
    """The archive slots one epoch trains on and which of them hold an instance: the filled
    slots, padded (by repeating slot 0, marked empty) to ``archive_size / 2^k`` for the
    largest ``k`` that still holds them all, at least ``smallest``, and divisible by the
    run's ``devices``. Empty slots carry zero weight, so training on the filled ones alone
    computes the same update at a fraction of the cost while the archive fills; the batch
    takes a handful of shapes in a run (one compilation each)."""
    slots = np.flatnonzero(filled)
    size = filled.shape[0]
    while (
        size % 2 == 0
        and size // 2 >= max(slots.size, smallest)
        and (size // 2) % max(devices, 1) == 0
    ):
        size //= 2
    padded = np.zeros(size, np.int64)
    padded[: slots.size] = slots
    return padded, np.arange(size) < slots.size


def training_batch(
    archive: archives.Archive, mixture: jax.Array, devices: int, smallest: int = _SMALLEST_BATCH
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """What :func:`train_against` trains on: the types, optima, filled mask and mixture
    weights of the archive's :func:`training_slots` (padding weighs nothing)."""
    slots, valid = training_slots(np.asarray(archive.filled), devices, smallest)
    valid = jnp.asarray(valid)
    weights = jnp.where(valid, jnp.asarray(mixture)[slots], 0.0)
    return archive.types[slots], archive.optimum[slots], valid, weights


def descends(oracle: OracleConfig, state: OracleState, epochs: int) -> bool:
    """Whether the training after the measurement just taken (``state.epoch`` counts it) is
    certificate descent: one of the last ``oracle.descent_epochs`` of ``epochs``, with a
    certified network to start from."""
    late = int(state.epoch) > epochs - oracle.descent_epochs
    return late and math.isfinite(float(state.best_score))


def train_epoch(
    game, oracle: OracleConfig, temperature: float, state: OracleState, epochs: int = 0
) -> OracleState:
    """Step 5: ``oracle.epoch_steps`` updates against the archive's mixture, on the archive's
    filled slots (:func:`training_batch`), with the softmin's ``temperature``. In the last
    ``oracle.descent_epochs`` of the run's ``epochs`` they are instead
    ``oracle.descent_steps`` (or as many) steps of certificate descent from the best certified
    network
    (:meth:`~advonline.game.Game.descend`): the network trains against the
    exact worst case itself, and the next measurement certifies the best network it reached."""
    steps = oracle.epoch_steps
    if oracle.descent_epochs and descends(oracle, state, epochs):
        descent = oracle.descent_steps or steps
        params = game.descend(
            state.best_algorithm, float(state.best_score), descent, oracle.descent_learning_rate
        )
        return state.replace(algorithm=params, step=state.step + steps)
    mesh = getattr(game, "mesh", None)  # the devices the game shards its batches over
    devices = 1 if mesh is None else mesh.size
    params, opt_state = train_against(
        game,
        oracle,
        temperature,
        state.algorithm,
        state.algorithm_opt,
        *training_batch(state.archive, state.adversary_mixture, devices),
        steps,
        epoch_key(state, _TRAIN),
    )
    return state.replace(algorithm=params, algorithm_opt=opt_state, step=state.step + steps)


class TrainingDiverged(ArithmeticError):
    """The algorithm's parameters stopped being finite in training (too large a learning
    rate): the run stops before it measures or saves them, and its last checkpoint stays."""


def check_finite(params, step: int) -> None:
    """Raise :class:`TrainingDiverged` unless every leaf of ``params``, the algorithm's
    parameters after training up to ``step``, is finite."""
    leaves = jax.tree.leaves(params)
    if not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves):
        raise TrainingDiverged(
            f"training diverged by step {step}: the algorithm's parameters are no longer "
            "finite; lower [algorithm] learning_rate (or oracle.descent_learning_rate) and "
            "train again (checkpoints written before it are kept)"
        )


class Epoch(NamedTuple):
    """One epoch of :func:`run_epochs`: the state after it, its measurement, the step the
    measurement was taken at and the seconds of its training (None after the last one)."""

    state: OracleState
    record: EpochRecord
    measured_at: int
    training_seconds: float | None


def run_epochs(
    game,
    oracle: OracleConfig,
    temperature: float,
    state: OracleState,
    steps: int,
    clock: profile.PhaseClock | None = None,
) -> Iterator[Epoch]:
    """The oracle loop from ``state`` (fresh or resumed) until ``steps`` updates (a multiple
    of ``oracle.epoch_steps``) are made: each epoch measures (:func:`measure_epoch`) and then
    trains (:func:`train_epoch`), and the epoch after the last training measures the
    delivered network once more. Yields after every epoch, so the caller logs and
    checkpoints; ``clock`` hears the seconds of each phase."""
    tables, clock = MemberTables(), profile.PhaseClock() if clock is None else clock
    while int(state.epoch) <= steps // oracle.epoch_steps:
        measured_at = int(state.step)
        last = measured_at >= steps
        state, record = measure_epoch(game, oracle, state, last, tables, clock)
        seconds = None
        if not last:
            trained = time.perf_counter()
            with clock.phase("training"):
                epochs = steps // oracle.epoch_steps
                state = train_epoch(game, oracle, temperature, state, epochs)
                jax.block_until_ready(state.algorithm)  # asynchronous dispatch: time the work
            check_finite(state.algorithm, int(state.step))
            seconds = time.perf_counter() - trained
        yield Epoch(state, record, measured_at, seconds)


def record_row(record: EpochRecord) -> dict:
    """The metrics columns of one measurement ("" where a figure was not measured)."""
    return {name: ("" if value is None else value) for name, value in record._asdict().items()}


def kept_ratios(game, state: OracleState) -> np.ndarray:
    """Exact ratios ``[N]`` of every archive slot against what the run keeps (and would
    deliver): its best network, or the kept mixture of snapshots (its members' payoffs
    combined: one member drawn per input)."""
    archive, mixture = state.archive, delivered_mixture(game, state)
    if mixture is None:
        return network_ratios(game, state.best_algorithm, archive)
    members, _ = positive_members(state.best_members, state.best_weights)
    payoffs = payoff_matrix(game, members, archive.types, archive.optimum)
    return mixture_ratios(game, payoffs, mixture.weights)


def delivered_mixture(game, state) -> SnapshotMixture | None:
    """The mixture of snapshots a run delivers, when one holds the best guarantee (an
    oracle-loop run whose game mixes); else None and the run delivers one network."""
    weights = getattr(state, "best_weights", None)
    if weights is None or not bool(jnp.any(weights > 0)):
        return None
    return game.mixture(state.best_members, weights)
