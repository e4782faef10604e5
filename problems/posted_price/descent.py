"""Certificate descent: a one-resource pricing table trained against its exact best response.

For one resource the dynamic programme of :mod:`certify` is an exact best response to any
pricing table: its value ``F(r)`` is the most an adversary can make of ``OPT - r ALG``, and its
root is the table's certificate (the exact CR of a deterministic table, an upper bound on the
oblivious CR of a randomised one). The root moves smoothly with the table almost everywhere
(:func:`certify.certificate_gradient`), so the table can descend its own certificate. Each step
certifies the current table (Dinkelbach, started a little below the last certificate), takes
the gradient at the adversary strategy that attains it and makes an Adam step. This is the
game of the oracle loop with the adversary's side played exactly: nothing is sampled, and the
figure a run reports is the certificate of the table it delivers (the lowest any step had).

Two policy classes over the utilisation grid (units sold, ``G + 1`` states), each with the
round hidden (one row for every round, as in the classic model) or seen (a row per round: the
shared row plus a residual of that round, which starts at zero, so every round learns from
the shared row's gradient and a round the worst case visits can depart from it):

- ``randomised``: a softmax over ``atoms`` prices geometric in [L, U] in every state;
- ``deterministic``: one price per state, non-decreasing in the units sold. Its logarithm is a
  sum of positive steps less an offset, clipped to [ln L, ln U]; the first state posts L (a
  first price above L would lose every buyer just below it). All parameters zero give the
  geometric ramp from L to U; threshold pricing is a ramp with an offset.

Both start from zero parameters plus ``init_scale`` times normal noise from the run's key, so
seeds differ. The certificate and its gradient run in float64, one jitted programme each per
run; the loop, the keep-best choice and the Adam state live outside ``jit``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from advonline.game import DESCENT_FINAL_RATE
from advonline.problems.posted_price import grid_certify, policy_writer, product_grid
from advonline.problems.posted_price.certify import (
    DEFAULT_WORK_LIMIT,
    Certificate,
    certificate_gradient,
    certify_dp,
    strategy_gradient,
    worst_strategy,
)
from advonline.problems.posted_price.learned import price_atoms
from advonline.problems.posted_price.model import (
    PriceDistribution,
    Setting,
    SettingError,
    TablePolicy,
    one_resource,
)

POLICY_CLASSES = ("randomised", "deterministic")
#: Each step's Dinkelbach iteration starts at these fractions of the last certificate in
#: turn, until one is below the root.
_WARM_STARTS = (0.97, 0.8)
#: Each step of :func:`descend_params` starts its iteration this fraction of the last ratio.
_BELOW_LAST = 0.99
#: :func:`descend_params` takes a ratio as settled once Dinkelbach raises it by at most this.
_SETTLED = 1e-7
#: Where a K >= 2 descent step's certificate starts, relative to the last: below the new
#: root, which a step moves by a few per cent at most.
_GRID_BELOW_LAST = 0.9


@dataclasses.dataclass(frozen=True)
class DescentConfig:
    """How a table descends its certificate."""

    policy: str = "randomised"  # one of POLICY_CLASSES
    atoms: int = 16  # prices of the randomised class, geometric in [L, U]
    round_seen: bool = False  # a row per round; else one row for all rounds
    steps: int = 240
    learning_rate: float = 0.1
    init_scale: float = 0.1  # std of the normal noise on the zero start

    def __post_init__(self) -> None:
        if self.policy not in POLICY_CLASSES:
            raise SettingError(f"policy must be one of {POLICY_CLASSES}, got {self.policy!r}")
        if self.atoms < 2 or self.steps < 1 or self.learning_rate <= 0:
            raise SettingError("atoms must be >= 2, steps >= 1 and learning_rate > 0")


@dataclasses.dataclass(frozen=True)
class Descent:
    """What a descent delivers: the table with the lowest certificate, and how it got there."""

    policy: TablePolicy
    params: jax.Array  # the parameters that post ``policy``'s table (float64)
    certificate: Certificate  # of ``policy``, computed afresh from a start of 1
    history: tuple[float, ...]  # the certificate of each step's table
    reached_at: tuple[float, ...]  # seconds from the start to each step's certificate
    seconds: float


def initial_params(setting: Setting, config: DescentConfig, key: jax.Array) -> jax.Array:
    """``[R, G + 1, atoms]`` logits (randomised) or ``[R, G + 1]`` (deterministic: the offset,
    then ``G`` steps), float64. With the round hidden R = 1: zeros plus ``init_scale`` normal
    noise. With the round seen R = 1 + T: that shared row, then T per-round residuals, zero."""
    shape = (1, setting.grid_size + 1)
    if config.policy == "randomised":
        shape = (*shape, config.atoms)
    with jax.enable_x64(True):
        shared = config.init_scale * jax.random.normal(key, shape, jnp.float64)
        if not config.round_seen:
            return shared
        return jnp.concatenate([shared, jnp.zeros((setting.rounds, *shape[1:]))])


def _per_round(config: DescentConfig, params: jax.Array) -> jax.Array:
    """The parameters of each round: with the round seen, the shared row plus each round's
    residual ``[T, ...]``; hidden, the one row ``[1, ...]`` every round shares."""
    return params[:1] + params[1:] if config.round_seen else params


def price_table(setting: Setting, config: DescentConfig, params: jax.Array) -> PriceDistribution:
    """The table ``[T, G + 1, A]`` the parameters post (A = ``atoms``, or 1 deterministic)."""
    shape = (setting.rounds, setting.grid_size + 1)
    params = _per_round(config, params)
    if config.policy == "randomised":
        atoms = jnp.asarray(price_atoms(setting, config.atoms), params.dtype)
        probs = jnp.broadcast_to(jax.nn.softmax(params, axis=-1), (*shape, config.atoms))
        return PriceDistribution(prices=jnp.broadcast_to(atoms, probs.shape), probs=probs)
    prices = jnp.broadcast_to(_price_curve(setting, params), shape)[..., None]
    return PriceDistribution(prices=prices, probs=jnp.ones_like(prices))


@dataclasses.dataclass(frozen=True)
class TableOf:
    """:func:`price_table` of one setting and class, as a function of the parameters. Equal
    for equal settings and configs, so the certificate's gradient (where it is a ``jit``
    static argument) compiles once for every run of a class, not once per run."""

    setting: Setting
    config: DescentConfig

    def __call__(self, params: jax.Array) -> PriceDistribution:
        return price_table(self.setting, self.config, params)


@dataclasses.dataclass(frozen=True)
class LiftedTableOf:
    """A one-resource table of ``config``'s class on :attr:`single`, posted on every resource
    of ``setting`` at its own units sold with one shared quantile
    (:func:`~posted_price.product_grid.lift_table`), as a function of the table's parameters:
    the grid table ``[T, S, K, A]`` whose certificate :func:`grid_descend_params` descends.
    With ``widened`` the table's prices span ``[L, K U]``, the one-resource game of bundles
    (:func:`~posted_price.model.one_resource`): a resource priced above U sells to bundles
    alone, which keeps what is left of it for them. Hashable, like :class:`TableOf`. Every
    resource must have the same capacity, so that one table fits them all."""

    setting: Setting
    config: DescentConfig
    widened: bool = False

    def __post_init__(self) -> None:
        if len(set(self.setting.capacities)) != 1:
            raise SettingError("a lifted table needs every resource to have the same capacity")

    @property
    def single(self) -> Setting:
        """The one-resource setting the table is made (and trained) on."""
        return one_resource(self.setting, self.widened)

    def __call__(self, params: jax.Array) -> PriceDistribution:
        table = price_table(self.single, self.config, params)
        return product_grid.lift_table(self.setting, table)


@dataclasses.dataclass(frozen=True)
class CoupledTableOf(LiftedTableOf):
    """:class:`LiftedTableOf` with one more row of logits for what has been sold of the other
    resources: in grid state s resource k draws its price from the softmax of the table's
    logits at its own units sold plus, for every other resource j, ``cross[units_j(s)]``, with
    one shared quantile as before. So a resource's prices may follow the others' sales, which
    a lifted table's cannot; with ``cross`` zero it is the lifted table. Parameters ``(params,
    cross)``: the one-resource table's and ``[G + 1, A]`` (:func:`coupled_params`).
    Randomised tables only. Hashable, like :class:`TableOf`, and never equal to a lifted
    table of the same setting."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.config.policy != "randomised":
            raise SettingError("a coupled table is a randomised table")

    def __call__(self, params: tuple[jax.Array, jax.Array]) -> PriceDistribution:
        own, cross = params
        own = _per_round(self.config, own)
        shape = (self.setting.rounds, self.setting.grid_size + 1, self.config.atoms)
        units = jnp.asarray(product_grid.grid_units(self.setting))  # [S, K]
        shift = cross[units]  # [S, K, A]
        others = jnp.sum(shift, axis=1, keepdims=True) - shift
        probs = jax.nn.softmax(jnp.broadcast_to(own, shape)[:, units] + others[None], axis=-1)
        atoms = jnp.asarray(price_atoms(self.single, self.config.atoms), probs.dtype)
        return PriceDistribution(prices=jnp.broadcast_to(atoms, probs.shape), probs=probs)


def coupled_params(setting: Setting, params: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A lifted table's parameters as :class:`CoupledTableOf`'s, with ``cross`` zero: the
    same table."""
    atoms = params.shape[-1]
    return params, jnp.zeros((setting.grid_size + 1, atoms), params.dtype)


def _price_curve(setting: Setting, params: jax.Array) -> jax.Array:
    """``[R, G + 1]`` non-decreasing prices from ``[R, G + 1]`` parameters (module docstring):
    a zero step is ``ln(U/L) / G``, so zeros give the geometric ramp."""
    log_theta = math.log(setting.theta)
    step = log_theta / (setting.grid_size * math.log(2.0))  # softplus(0) = ln 2
    offset, rises = params[:, :1], jax.nn.softplus(params[:, 1:]) * step
    climbed = jnp.clip(jnp.cumsum(rises, axis=1) - offset * step * setting.grid_size, 0, log_theta)
    zero = jnp.zeros_like(offset)
    return setting.low * jnp.exp(jnp.concatenate([zero, climbed], axis=1))


def descend(
    setting: Setting,
    config: DescentConfig,
    key: jax.Array,
    work_limit: float = DEFAULT_WORK_LIMIT,
    say: Callable[[str], None] | None = None,
) -> Descent:
    """Train a table of ``config``'s class on ``setting`` (K = 1) by descending its DP
    certificate for ``config.steps`` steps from :func:`initial_params` (module docstring).
    ``say`` gets a progress line every tenth of the run."""
    if setting.resources != 1:
        raise SettingError("certificate descent needs one resource (K = 1)")
    start_time = time.perf_counter()
    table_of = TableOf(setting, config)
    schedule = optax.cosine_decay_schedule(config.learning_rate, config.steps, DESCENT_FINAL_RATE)
    optimiser = optax.adam(schedule)
    with jax.enable_x64(True):
        params = initial_params(setting, config, key)
        state = optimiser.init(params)
        best, best_params, last, history, reached_at = math.inf, params, None, [], []
        for step in range(config.steps):
            certificate = _certify(setting, config, table_of(params), work_limit, last)
            ratio = certificate.ratio
            history.append(ratio)
            reached_at.append(time.perf_counter() - start_time)
            if ratio < best:
                best, best_params = ratio, params
            if say and (step % max(1, config.steps // 10) == 0 or step == config.steps - 1):
                say(f"step {step}: certificate {ratio:.4f}, best {best:.4f}")
            if not math.isfinite(ratio):
                raise SettingError(f"the table's certificate is {ratio} ({certificate.note})")
            slope = certificate_gradient(setting, table_of, params, ratio)
            update, state = optimiser.update(jnp.nan_to_num(slope), state)
            params = optax.apply_updates(params, update)
            last = ratio
        delivered = table_policy(setting, config, table_of(best_params))
    return Descent(
        policy=delivered,
        params=best_params,
        certificate=certify_dp(setting, delivered, work_limit),
        history=tuple(history),
        reached_at=tuple(reached_at),
        seconds=time.perf_counter() - start_time,
    )


def table_policy(setting: Setting, config: DescentConfig, table: PriceDistribution) -> TablePolicy:
    """The policy that posts ``table`` (:func:`price_table`'s shape), of ``config``'s class."""
    deterministic = config.policy == "deterministic"
    return TablePolicy(table, setting.grid_size, deterministic)


def policy_document(
    setting: Setting,
    config: DescentConfig,
    policy: TablePolicy,
    certificate: Certificate,
    provenance: dict,
) -> dict:
    """A delivered table as a policy file (version 1: the utilisation-grid table that
    ``advonline evaluate --policy`` reads), with its certificate and the descent's settings
    added to ``provenance``."""
    provenance = {
        **provenance,
        "algorithm": f"descent-{config.policy}",
        "descent": dataclasses.asdict(config),
        "certificate": certificate.ratio,
        "certificate_note": certificate.note,
    }
    return policy_writer.policy_document(setting, policy, config.round_seen, provenance)


def _certify(setting, config, table, work_limit, last) -> Certificate:
    """The table's certificate, its iteration started a little below ``last`` (1 at first).
    A start already above the root stops at once at the start, a looser bound; then it runs
    again from further below, and at last from 1, so every figure is the programme's value."""
    policy = table_policy(setting, config, table)
    starts = [1.0] if last is None else [max(1.0, f * last) for f in _WARM_STARTS] + [1.0]
    for start in starts:
        certificate = certify_dp(setting, policy, work_limit, start)
        if certificate.ratio is None:
            raise SettingError(f"no certificate for the table: {certificate.note}")
        if start == 1.0 or certificate.ratio > start:
            return certificate
    return certificate


class Descended(NamedTuple):
    """What :func:`descend_params` delivers: the parameters with the lowest ratio seen, that
    ratio (within a relative ``_SETTLED`` of its certificate, or the certificate itself), and
    each step's ratio."""

    params: object
    certificate: float
    history: tuple[float, ...]


def descend_params(
    setting: Setting,
    table_of: Callable,
    params,
    certificate: float,
    steps: int,
    learning_rate: float,
) -> Descended:
    """``steps`` Adam steps (cosine-decayed ``learning_rate``) of any K = 1 policy's
    parameters ``params`` down their DP certificate, from ``certificate``, theirs.

    ``table_of(params)`` is the policy's float64 price table (hashable: a ``jit`` static
    argument). Each step runs Dinkelbach's iteration from a little below the last ratio
    (:func:`~posted_price.certify.worst_strategy`), keeping the worst adversary strategy; it
    stops once the ratio has settled (a raise of at most a relative ``_SETTLED``: within
    about that of the certificate) or reached the best ratio so far (the table cannot beat
    it). The step then descends that strategy's ratio
    (:func:`~posted_price.certify.strategy_gradient`: at the worst strategy, the
    certificate's gradient). The parameters returned are those of the lowest settled ratio,
    ``params`` when no step went below ``certificate``; the caller certifies them (the
    oracle loop's next measurement does). Float64; the loop runs outside ``jit``, and each
    sweep, gradient, table and Adam step is one jitted programme."""
    initialise, adam_step = _adam(learning_rate, steps)
    with jax.enable_x64(True):
        params = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
        state = initialise(params)
        best, best_params, ratio, history = certificate, params, certificate, []
        for _ in range(steps):
            start = ratio * _BELOW_LAST
            table = _table(table_of, params)
            ratio, bound, strategy = worst_strategy(setting, table, start, best, _SETTLED)
            settled = ratio if bound is None else bound
            history.append(settled)
            if settled < best:
                best, best_params = settled, params
            if strategy is None:  # nothing left to descend (or a table that loses everything)
                break
            _, slope = strategy_gradient(setting, table_of, params, strategy, table.prices)
            params, state = adam_step(params, state, slope)
    return Descended(best_params, best, tuple(history))


def grid_descend_params(
    setting: Setting,
    table_of: Callable,
    params,
    certificate: float,
    steps: int,
    learning_rate: float,
    gradient_dtype=jnp.float64,
    say: Callable[[str], None] | None = None,
    seconds: float | None = None,
) -> Descended:
    """``steps`` Adam steps (cosine-decayed ``learning_rate``) of a K >= 2 policy's
    parameters ``params`` down their certificate over the product grid, from
    ``certificate``, theirs; ``table_of(params)`` is the grid table (hashable).

    Each step descends the certificate's gradient at the last certified ratio
    (:func:`~posted_price.grid_certify.grid_certificate_gradient`, in ``gradient_dtype``:
    float32 takes about half the time on a CPU), then certifies the new parameters with
    Dinkelbach's iteration started :data:`_GRID_BELOW_LAST` below that ratio, so that it rises
    to the new root (:func:`~posted_price.grid_certify.certify_table_from`: from 1 again where
    that start was above it). Returns the parameters of the lowest certificate, ``params`` when no
    step went below ``certificate``. ``say`` gets a line a step. ``seconds`` caps the descent's
    wall time: no step starts after it (the schedule still spans ``steps``; the history says
    how many ran). Float64; the loop runs outside ``jit``; each sweep, gradient and Adam step
    is one jitted programme."""
    initialise, adam_step = _adam(learning_rate, steps)
    started = time.perf_counter()
    with jax.enable_x64(True):
        params = jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), params)
        state = initialise(params)
        best, best_params, ratio, history = certificate, params, certificate, []
        for step in range(steps):
            slope = grid_certify.grid_certificate_gradient(
                setting, table_of, params, ratio, gradient_dtype
            )
            params, state = adam_step(params, state, slope)
            table = _table(table_of, params)
            found = grid_certify.certify_table_from(setting, table, ratio * _GRID_BELOW_LAST)
            if found.ratio is None:
                break
            ratio = found.ratio
            history.append(ratio)
            if ratio < best:
                best, best_params = ratio, params
            if say:
                say(f"step {step + 1}: certificate {ratio:.4f}, best {best:.4f}")
            if seconds is not None and time.perf_counter() - started >= seconds:
                break
    return Descended(best_params, best, tuple(history))


@functools.partial(jax.jit, static_argnums=0)
def _table(table_of: Callable, params) -> PriceDistribution:
    """``table_of(params)`` as one programme (eager, a network's forward pass is dozens of
    small ones, each a launch and, on a GPU, a wait)."""
    return table_of(params)


@functools.lru_cache(maxsize=8)
def _adam(learning_rate: float, steps: int) -> tuple[Callable, Callable]:
    """``(init, step)`` of :func:`descend_params`'s optimiser: Adam at ``learning_rate``,
    cosine-decayed over ``steps``; ``step(params, state, slope)`` is one jitted programme,
    compiled once for every descent of a run with the same rate and steps."""
    optimiser = optax.adam(optax.cosine_decay_schedule(learning_rate, steps, DESCENT_FINAL_RATE))

    @jax.jit
    def step(params, state, slope):
        update, state = optimiser.update(jax.tree.map(jnp.nan_to_num, slope), state)
        return optax.apply_updates(params, update), state

    return optimiser.init, step
