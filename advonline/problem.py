"""The interface between the problem-free core and an online problem (docs/adding-a-problem.md).

A problem is a package ``problems/<name>/`` whose ``PROBLEM`` is a :class:`Problem`: the
functions the core calls, and nothing the core has to know about the problem's meaning. The
core passes the problem's own objects (its setting, instances, policies) back to it unopened.

What the adversary writes is a token sequence ``[B, T]`` of integers in ``[0, vocabulary)``;
the :class:`Encoding` turns tokens into the problem's instances, draws random ones and mutates
them. Every algorithm, learned or classic, is a policy object the problem's simulator can
run; the core only ever asks the problem to measure one (:attr:`Problem.payoffs`, given OPT of
each instance: the core computes it once, with :attr:`Problem.offline_optimum`, and keeps it
beside the instance, so a training step never solves for OPT again; :func:`payoffs_of` where
it is not at hand).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import jax

from advonline.configs import MAX_LAYERS
from advonline.errors import quoted


def setting_from_table(setting_class: type, table: dict, error: type[Exception] = ValueError):
    """The frozen dataclass ``setting_class`` that a config's ``[setting]`` table (or the
    command line's ``--setting KEY=VALUE``) describes: the one reader of every problem's
    settings. Unknown keys and values of the wrong type (a float where a whole number
    belongs, a boolean for a number) are refused with ``error`` (the problem's refusal), one
    line naming the key; the class checks the values themselves."""
    from advonline.configs import ConfigError, build_section

    if not isinstance(table, dict):
        raise error("the setting must be a table of keys and values")
    known = {field.name for field in dataclasses.fields(setting_class)}
    unknown = sorted(set(table) - known)
    if unknown:
        named = ", ".join(quoted(key) for key in unknown)
        raise error(f"unknown setting keys [{named}]; known: {sorted(known)}")
    try:
        return build_section(setting_class, table, "setting")
    except ConfigError as problem:
        raise error(str(problem).removeprefix("setting: ").removeprefix("setting ")) from None


def network_sizes(config: dict, hidden: int = 32, layers: int = 2) -> dict[str, int]:
    """``{"hidden": .., "layers": ..}`` from a config's ``[algorithm]`` table, for a policy head
    that is a small network (at most :data:`~advonline.configs.MAX_LAYERS` layers); ValueError
    names a key or value it cannot use."""
    unknown = sorted(set(config) - {"hidden", "layers"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; known: hidden, layers")
    sizes = {"hidden": config.get("hidden", hidden), "layers": config.get("layers", layers)}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if sizes["layers"] > MAX_LAYERS:
        raise ValueError(f"layers must lie in [1, {MAX_LAYERS}], got {sizes['layers']}")
    return sizes


class Encoding(Protocol):
    """What the adversary writes: token sequences ``[B, T]`` over ``vocabulary`` symbols.

    Optionally also ``encode(instances) -> tokens`` (host, NumPy): the tokens ``[B, T]`` of
    the inputs nearest to ``instances`` that this encoding can write, where a run's own
    encoding (its ``[adversary]`` table) can differ from the evaluator's: the evaluator's
    search then also starts from the run's hardest kept inputs, written again."""

    vocabulary: int
    length: int

    def decode(self, tokens: jax.Array) -> Any:
        """The problem's instances (a batched pytree) that ``tokens`` ``[B, T]`` stand for."""

    def random(self, key: jax.Array, count: int) -> jax.Array:
        """``count`` random token sequences ``[count, T]`` (int32)."""

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        """One small random change to each sequence of ``tokens`` ``[B, T]``."""


class PolicyHead(NamedTuple):
    """The learned algorithm's network and how its parameters become a policy."""

    module: Any  # a flax.linen.Module; ``module.init(key, *example)`` gives its parameters
    example: tuple  # example inputs for ``module.init``
    to_policy: Callable[[Any], Any]  # params -> the problem's policy (the simulator runs it)


class Certificate(NamedTuple):
    """An upper bound on a policy's competitive ratio over every input of the setting.

    ``exact`` says the bound is attained (the policy's competitive ratio itself). ``worst``
    is an input that attains it (tokens ``[T]``), where one exists.
    """

    ratio: float
    exact: bool
    worst: Any = None


class LowerBound(NamedTuple):
    """A lower bound on every online algorithm's competitive ratio in the setting, certified:
    ``ratio = 1 / best_response``, where ``best_response`` is the best any algorithm can do
    (an exact computation) against ``distribution``, a distribution over ``inputs``: by Yao's
    principle the largest ``E[ALG] / E[OPT]`` of a deterministic rule for a problem that
    earns, the largest ``E[OPT] / E[cost]`` for one that pays."""

    ratio: float
    best_response: float
    distribution: Any
    inputs: Any


class Cases(NamedTuple):
    """The problem's own references, for the checks every problem passes
    (:mod:`advonline.checks`, ``advonline check NAME``).

    - ``settings``: small settings (as ``[setting]`` tables) the checks run on;
    - ``earned(setting, policy, instance) -> float``: what a deterministic policy earns (or
      pays) on one instance, by a loop written by hand, not through ``rollout``;
    - ``optimum(setting, instance) -> float``: OPT of one instance by a solver or by brute
      force, not through ``offline_optimum``.

    Either reference may be None: the checks then say what they did not compare.
    """

    settings: tuple[Mapping, ...]
    earned: Callable | None = None
    optimum: Callable | None = None


# Optional training capabilities (advonline/game.py): where a problem has one, the
# core's game calls it in place of its own default. Each callable takes the run's game (a
# :class:`advonline.game.Game`: the setting, the head, the encoding, the
# [algorithm] and [adversary] tables) first, as a strategy's public step calls its own.


class Update(NamedTuple):
    """The algorithm's update, where it is not the core's (the exact gradient of the
    payoffs):

    - ``pool(game, params, instances, optimum, weigh, key) -> (payoffs [P], ascent)``: the
      payoffs of a pool of decoded instances and the ascent direction of ``sum_j w_j u_j``,
      ``w = weigh(payoffs)`` (the simultaneous step's update);
    - ``tokens(game, types, optimum, weigh) -> (params, key) -> ascent``: the same on
      instances written as tokens ``[N, T]`` (the oracle loop's);
    - ``draws(game) -> bool``: whether the update reads its key (a sampled update does).
    """

    pool: Callable
    tokens: Callable
    draws: Callable


class Oracles(NamedTuple):
    """The oracle loop's scoring and search, where the problem has faster ones than the
    core's (decode, then ``payoffs``; hill climbing with the encoding's ``mutate``):

    - ``payoffs(game, params, types, optimum) -> [N]`` and ``optimum(game, types) -> [N]``
      (host) on token inputs ``[N, T]``;
    - ``best_responses(game, params, budget, key, starts) -> advonline.search.Found``;
    - ``member(game, params)``: what one snapshot contributes to ``mixture_search(game,
      members, weights, budget, key, starts) -> Found`` (stacked), the search against a
      mixture of snapshots (default: their payoffs weighted).
    """

    payoffs: Callable
    optimum: Callable
    best_responses: Callable
    member: Callable
    mixture_search: Callable


class TrainingCertificate(NamedTuple):
    """How training uses the certificate, where the problem has its own way (each None:
    the core's, from ``certificate``):

    - ``certifies(game) -> bool``: whether the run's networks are certified (default: a
      fresh network's policy has a certificate);
    - ``certify(game, params, start, key) -> (ratio | None, tokens [N, T] | None)``: the
      certificate iterated from ``start`` (an attained ratio) and, given ``key``, the run's
      ``certificate_draws`` inputs drawn from the adversary strategy that attains it
      (default: ``certificate`` and its worst input);
    - ``below(game, params, ratio, key) -> tokens``: draws from the strategy that attains
      the value just below ``ratio`` (default: the certificate's worst input);
    - ``descend(game, params, certificate, steps, learning_rate) -> params``: certificate
      descent (default: Adam down ``differentiable_certificate``).
    """

    certifies: Callable | None = None
    certify: Callable | None = None
    below: Callable | None = None
    descend: Callable | None = None


class Writer(NamedTuple):
    """The adversary network that writes inputs, where the problem has its own (default:
    the noise-conditioned writer of the encoding's tokens, :class:`advonline.adversary.
    TokenWriter`):

    - ``options``: a frozen dataclass of the problem's own ``[adversary]`` keys (defaults,
      ``check() -> [message]``), which the run's ``encoding(setting, options)`` also reads;
    - ``build(game)``: the writer (``init``, ``write``, as :class:`advonline.adversary.
      Adversary`);
    - ``frozen(game, params)``: what a simultaneous step writes against and scores on,
      ``inputs(frozen) -> tuple`` what the writer reads of it, ``payoffs(game, frozen,
      instances, optimum) -> [B]``;
    - ``step(game)``: the simultaneous step, or None for the core's
      (:func:`advonline.simultaneous.game_step`).
    """

    options: type
    build: Callable
    frozen: Callable
    inputs: Callable
    payoffs: Callable
    step: Callable


class Documents(NamedTuple):
    """Policy files written from the run's own parameters (default: ``export`` of the policy,
    and a mixture as its members' files with their weights):
    ``network(game, params, deterministic, provenance)``, ``mixture(game, mixture,
    provenance)`` and ``table(game, policy, provenance)`` (``export --table``)."""

    network: Callable
    mixture: Callable
    table: Callable


class Views(NamedTuple):
    """How a run's figures and archive listing show the problem's objects (default: the
    described setting on one line, no policy figures, the archive's ratios alone):
    ``setting_title(described) -> str``; ``policy_figures(game, name, policies, out) ->
    [path]``; ``archive_columns`` and ``archive_cells(summary) -> tuple``;
    ``summaries(game, types) -> [dict]``; ``traces(game, types) -> (header, rows)``."""

    setting_title: Callable
    policy_figures: Callable
    archive_columns: tuple
    archive_cells: Callable
    summaries: Callable
    traces: Callable


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """An online problem as the core sees it (hashed and compared by identity: the registry
    holds one per name, and compiled programmes take it as a static argument).

    - ``setting``: the problem's frozen, hashable setting class, with ``from_config(dict)``
      and ``describe() -> dict`` (printed beside every figure).
    - ``payoffs(setting, policy, instances, optimum) -> [B]``: the payoff of ``policy`` on each
      instance given its OPT ``optimum`` ``[B]`` (``E[ALG] / OPT`` for a problem that earns,
      ``OPT / E[cost]`` for one that pays; :func:`advonline.ratio.payoff` has the conventions),
      from the one simulator; jit-able, differentiable in the policy's parameters where the
      update needs it.
    - ``rollout(setting, policy, instance, key)``: the one simulator, for one instance.
    - ``offline_optimum(setting, instances) -> [B]``: OPT, never above the true optimum.
    - ``encoding(setting) -> Encoding`` (``encoding(setting, options)`` for a problem whose
      :class:`Writer` has options: a run's encoding may depend on them).
    - ``policy_head(setting, config: dict) -> PolicyHead``.
    - ``baselines``: the classic algorithms, ``{name: make(setting) -> policy}``.
    - ``certificate(setting, policy) -> Certificate | None``: outside ``jit`` (float64).
    - ``lower_bound(setting) -> LowerBound | None``: outside ``jit`` (float64, SciPy).
    - ``families(setting) -> {name: tokens [N, T]}``: held-out hard inputs, checks only.
    - ``export(setting, policy) -> dict`` and ``load(dict) -> (setting, numpy_policy)``: the
      policy file (the loaded policy needs NumPy only).
    - ``reference(setting) -> (label, ratio) | None``: the known optimal ratio, if any.
    - ``cases``: the small settings and the loop and solver by hand the checks compare the
      simulator and OPT against (:class:`Cases`).

    ``certificate``, ``lower_bound``, ``families``, ``reference`` and ``cases`` may be None
    (the problem has none: the reports and checks say so); without ``export`` a run is
    measured but writes no policy file, and ``advonline export`` refuses in one line. Further
    optional capabilities (None: the core's default serves, or the command that needs one
    refuses in one line):

    - ``restore(dict) -> (setting, policy)``: a policy file read back as a policy the
      simulator runs (``advonline evaluate --policy``); InputError says why it cannot be.

    - ``sources(setting, policy, budget, key, mesh, starts, clock) -> ({name: SourceRatio},
      upper_bound)``: the evaluator's sources (advonline/evaluation.py) computed the
      problem's own way (``starts``: inputs ``[S, T]`` its search should also start from, or
      None; ``clock``: an :class:`advonline.evaluation.SourceClock` that runs and times each
      source); default :func:`advonline.sources.sources`, over the token encoding.
    - ``trace(setting_table, path, names, budget) -> (report, text)``: the named baselines
      run on a user's input file (``advonline evaluate --instances``); default: refused in
      one line.
    - ``evaluation_needs(setting, budget) -> [advonline.preflight.Need]``: the evaluator's
      largest arrays, checked before it runs (default: as the encoding sizes them, a
      floor; a problem whose simulator or OPT holds more per input says so here, and an
      array built once per member of a mixture says so by its ``member_copies``).
    - ``exact_optimum(setting) -> solve | None``: for a setting where ``offline_optimum`` is
      only a lower bound on OPT (a heuristic's feasible solution), ``solve(setting,
      instance) -> float``, OPT of one instance exactly, on the host (a solver, outside
      ``jit``); the default sources score the hardest inputs they find again with it, so a
      reported ratio is the input's true one. None (default): ``offline_optimum`` is exact.
    - ``differentiable_certificate(setting, policy) -> jax.Array``: the certificate's ratio
      written in JAX, differentiable in the policy's parameters (jit-able; called in
      float64): where present, ``oracle.descent_epochs`` trains by descending it
      (:meth:`advonline.game.Game.descend`). It must equal ``certificate``.
    - ``update`` (:class:`Update`), ``oracles`` (:class:`Oracles`), ``training_certificate``
      (:class:`TrainingCertificate`), ``writer`` (:class:`Writer`), ``documents``
      (:class:`Documents`) and ``views`` (:class:`Views`): training, policy files and
      figures the problem's own way.
    - ``state_distributions(game, params) -> array``: the policy's distributions in every
      state, which the oracle loop's proximal anchor keeps close to the epoch's start
      (without it ``oracle.anchor`` is refused).
    - ``read_out(policy)``: a deterministic read-out of a learned policy, delivered and
      measured beside it as ``learned-deterministic``.
    - ``training_needs(run_config) -> [advonline.preflight.Need]``: training's largest
      arrays (default: as the encoding sizes them).
    - ``check_run(run_config) -> [message]``: what is wrong with how a run config's tables
      fit the setting (default: nothing more than each table's own checks).
    - ``certifies_mixtures``: whether ``certificate`` also bounds a mixture of snapshots
      (:class:`advonline.mixture.SnapshotMixture`); without it a mixture has no certificate
      and is measured by the other sources alone.
    - ``objective``: ``"earn"`` (welfare, revenue: the ratio is ``OPT / E[ALG]``) or
      ``"pay"`` (a cost: the ratio is ``E[cost] / OPT``), for the labels of reports,
      tables, figures and listings (:data:`advonline.ratio.RATIO_NAMES`).
    """

    name: str
    setting: type
    payoffs: Callable
    rollout: Callable
    offline_optimum: Callable
    encoding: Callable
    policy_head: Callable
    baselines: Mapping[str, Callable]
    certificate: Callable | None = None
    lower_bound: Callable | None = None
    families: Callable | None = None
    export: Callable | None = None
    load: Callable | None = None
    reference: Callable | None = None
    cases: Cases | None = None
    restore: Callable | None = None
    sources: Callable | None = None
    trace: Callable | None = None
    evaluation_needs: Callable | None = None
    exact_optimum: Callable | None = None
    differentiable_certificate: Callable | None = None
    update: Update | None = None
    oracles: Oracles | None = None
    training_certificate: TrainingCertificate | None = None
    writer: Writer | None = None
    documents: Documents | None = None
    views: Views | None = None
    state_distributions: Callable | None = None
    read_out: Callable | None = None
    training_needs: Callable | None = None
    check_run: Callable | None = None
    certifies_mixtures: bool = False
    objective: str = "earn"

    def __post_init__(self):
        from advonline.ratio import RATIO_NAMES

        if self.objective not in RATIO_NAMES:
            raise ValueError(
                f"problem {self.name!r}: objective must be one of {sorted(RATIO_NAMES)}, "
                f"got {self.objective!r}"
            )

    # The optional pieces asked for by what they give, None where the problem has none: every
    # caller treats an absent piece the same way.

    def certificate_of(self, setting, policy) -> Certificate | None:
        """``certificate(setting, policy)``, or None without a certificate (or for a mixture
        of snapshots, unless the problem ``certifies_mixtures``)."""
        from advonline.mixture import SnapshotMixture

        if self.certificate is None:
            return None
        if isinstance(policy, SnapshotMixture) and not self.certifies_mixtures:
            return None
        return self.certificate(setting, policy)

    def lower_bound_of(self, setting) -> LowerBound | None:
        """``lower_bound(setting)``, or None without one."""
        return None if self.lower_bound is None else self.lower_bound(setting)

    def families_of(self, setting) -> Mapping | None:
        """``families(setting)``, or None without held-out families."""
        return None if self.families is None else self.families(setting)

    def reference_of(self, setting) -> tuple[str, float] | None:
        """``reference(setting)``, or None without a known optimum."""
        return None if self.reference is None else self.reference(setting)

    @property
    def ratio_name(self) -> str:
        """What its competitive ratio is: ``OPT / E[ALG]`` or ``E[cost] / OPT``."""
        from advonline.ratio import RATIO_NAMES

        return RATIO_NAMES[self.objective]


def payoffs_of(problem: Problem, setting, policy, instances) -> jax.Array:
    """``problem``'s payoffs ``[B]`` of ``policy`` (or of a mixture of snapshots) on
    ``instances``, with OPT computed for them (jit-able): for inputs whose OPT nobody has
    stored yet, such as a search's candidates."""
    from advonline import mixture

    optimum = problem.offline_optimum(setting, instances)
    return mixture.payoffs(problem, setting, policy, instances, optimum)
