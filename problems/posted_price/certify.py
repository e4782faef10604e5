"""Exact competitive ratios of deterministic K = 1 policies, in float64 (docs/method.md §5,
source `exact`).

**Dynamic programme** (finite setting, exact). The adversary writes T buyers; each has a
demand of j grid units (j = 1..demand_levels, or nobody) and any density in [L, U]. Against a
deterministic policy the adversary can simulate the algorithm, so for a ratio r it solves

    F(r) = max over instances I and feasible OPT choices S of  value(S) - r * ALG(I)

by backward induction over (round t, ALG units u_A, OPT units u_O). Maximising jointly over
S gives OPT(I), since OPT is itself a maximum. For fixed state, demand and OPT amount the
payoff is linear in the density and the purchase depends only on ``density >= price``, so the
density can be taken from three candidates: just below the price (no sale; the supremum
``min(p, U)``), ``max(p, L)`` and ``U`` (a sale). For divisible demand, OPT takes any whole
number of units of a buyer (greedy filling by density of whole-unit demands into a whole-unit
capacity takes whole units, so this is exact). ``CR = sup_I OPT / ALG`` is the root of F;
we find it with Dinkelbach's method (a Newton iteration on F: each step's maximiser is a
real instance whose ratio is the next iterate, so iterates are attained lower bounds rising
superlinearly to CR, and ``F(r) <= tol`` certifies r as an upper bound). It converges in a
handful of sweeps where bisection needs about forty.

**Closed form** (small-demand limit). For a price function phi non-decreasing in utilisation
and independent of the round, ``CR = sup_{v in [L, U]} v / integral_0^{y(v)} phi(z) dz`` with
``y(v) = sup {y : phi(y) <= v}``: the algorithm sells along the price ramp up to v, then a
capacity's worth arrives at density just below the next price.

Both run outside any training loop; the DP is one jitted ``lax.scan`` per Dinkelbach step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advonline.problems.posted_price.model import Observation, Policy, Setting, price_table

#: Work limit of one DP sweep, in (state x candidate) updates; beyond it the DP is skipped.
DEFAULT_WORK_LIMIT = 1e9
_MAX_DINKELBACH_STEPS = 60
_TOLERANCE = 1e-12
#: What a certificate of ratio inf says.
NOTHING_FOR_ALG = "an instance leaves ALG with nothing"
_STRATEGY_MARGIN = 1e-6
_TIE = 1e-12
_CLOSED_FORM_POINTS = 1 << 18


@dataclasses.dataclass(frozen=True)
class Certificate:
    """An exact ratio, or None with the reason it could not be computed."""

    ratio: float | None
    method: str | None
    note: str


def dp_work(setting: Setting, atoms: int = 1) -> float:
    """Updates in one DP sweep: T (G + 1)^2 x candidates per state (``atoms`` price atoms)."""
    levels = setting.demand_levels
    opt_options = sum(j + 1 for j in range(1, levels + 1)) if setting.divisible else 2 * levels
    return setting.rounds * (setting.grid_size + 1) ** 2 * (1 + (2 * atoms + 1) * opt_options)


def certify_dp(
    setting: Setting,
    policy: Policy,
    work_limit: float = DEFAULT_WORK_LIMIT,
    start: float = 1.0,
) -> Certificate:
    """Exact CR of a K = 1 policy on the finite setting (module docstring).

    For a randomised policy the same programme lets the adversary choose each buyer from the
    state (round, units ALG and OPT hold) without seeing the price about to be drawn, with OPT
    committing its share of each buyer on arrival: ``sup E[OPT_committed] / E[ALG]``. Every
    fixed instance with its optimal selection is one such strategy, so the figure is an upper
    bound on the oblivious CR (``tests/test_certify.py`` checks the programme against the
    whole game tree and against every fixed instance of tiny settings). For a deterministic
    policy nothing branches and it is exact.

    ``start`` is where the Dinkelbach iteration begins: a ratio some instance is known to
    attain against the policy (a lower bound) saves sweeps. Whatever ``start`` is, the result
    is an upper bound: the iteration stops only at an r with ``F(r) <= tol``; from a start
    above the programme's value it stops there at once, with a bound looser than exact.
    """
    return certify_and_draw(setting, policy, None, 0, work_limit, start)[0]


def certify_and_draw(
    setting: Setting,
    policy: Policy,
    key: jax.Array | None,
    count: int,
    work_limit: float = DEFAULT_WORK_LIMIT,
    start: float = 1.0,
) -> tuple[Certificate, WorstRuns | None]:
    """:func:`certify_dp`, and ``count`` instances drawn with ``key`` from the adversary
    strategy that attains its bound (:func:`worst_runs`; None when ``count`` is 0 or the
    bound is not finite). The strategy is the maximiser of the last Dinkelbach sweep that
    raised the ratio, whose value the bound is, so the draws cost no extra sweep unless the
    iteration stopped at once."""
    if setting.resources != 1:
        note = "the K = 1 DP; several resources: posted_price.grid_certify"
        return Certificate(None, None, note), None
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)  # [T, G+1, A]
        atoms = table.prices.shape[-1]
        if (work := dp_work(setting, atoms)) > work_limit:
            note = (
                f"exact DP needs {work:.1e} updates per sweep (T={setting.rounds}, "
                f"grid {setting.grid_size} units, {atoms} price atoms), over the limit "
                f"{work_limit:.0e}"
            )
            return Certificate(None, None, note), None
        paired = _pairs(setting, table.prices)

        def sweep(ratio: float):
            (gap, opt, alg), choices = _induction(
                setting, table.prices, table.probs, jnp.float64(ratio), count > 0, paired
            )
            return gap, opt, alg, choices

        ratio, steps, strategy = dinkelbach(sweep, start, setting.value_unit)
        if ratio is None:
            return Certificate(None, None, "Dinkelbach iteration did not converge"), None
        if math.isinf(ratio):
            return Certificate(ratio, "dynamic-programme", NOTHING_FOR_ALG), None
    kind = (
        "exact on the finite setting"
        if policy.deterministic
        else "upper bound on the oblivious CR (adversary adapts to the state, not to the "
        "price draw; OPT commits on arrival)"
    )
    certificate = Certificate(ratio, "dynamic-programme", f"{kind}, {steps} DP sweeps")
    if count == 0:
        return certificate, None
    with jax.enable_x64(True):
        if strategy is None:  # the start was the bound: the strategy just below it
            return certificate, _runs_below(setting, table, ratio, key, count)
        return certificate, _runs(setting, table, strategy, key, count)


def dinkelbach(sweep, start: float, scale: float) -> tuple[float | None, int, object]:
    """Dinkelbach's iteration for the root of ``F(r) = max (OPT - r ALG)`` from ``start`` (a
    ratio some instance attains, else 1): ``sweep(r) -> (F(r), OPT, ALG, choices)`` is one
    backward induction at ``r``, ``OPT`` and ``ALG`` those of its maximiser; ``F(r)`` counts
    as 0 within a relative ``_TOLERANCE`` of ``OPT``, or of ``scale`` (the setting's
    :attr:`~posted_price.model.Setting.value_unit`) where ``OPT`` is smaller. Returns the root
    (the certificate; inf where an instance leaves ALG with nothing, None where the iteration
    did not converge within its limit), the sweeps taken and the choices of the last sweep
    that raised the ratio (None if none did)."""
    ratio, choices = max(float(start), 1.0), None
    for sweeps in range(1, _MAX_DINKELBACH_STEPS + 1):
        gap, opt, alg, found = sweep(ratio)
        gap, opt, alg = float(gap), float(opt), float(alg)
        if opt > 0 and alg <= 0:
            return math.inf, sweeps, None
        if gap <= _TOLERANCE * max(opt, scale):
            return ratio, sweeps, choices
        ratio, choices = opt / alg, found
    return None, _MAX_DINKELBACH_STEPS, choices


def _candidates(setting: Setting, prices: jax.Array, probs: jax.Array, rising: bool = False):
    """Buyer densities worth trying in each state and the chance each one buys.

    Per state (row u_A) and atom k: density ``clip(p_k, L, U)`` (buys every atom <= it) and
    just below ``p_k`` (the supremum ``min(p_k, U)``, buying only atoms < p_k; only when
    ``p_k > L``), and U. Between these the ratio is monotone, so nothing else can be worse.
    Returns density, sale probability and allowed, each ``[G+1, 2A+1]``. ``rising``: the
    atoms rise strictly within [L, U] (:func:`_pairs`), so the atoms a candidate buys are a
    prefix and the sale probabilities cumulative sums.
    """
    low, high = setting.low, setting.high
    at = jnp.clip(prices, low, high)  # [G+1, A]
    below = jnp.minimum(prices, high)
    if rising:
        buys_at = jnp.cumsum(probs, -1)
        buys_below = jnp.concatenate([jnp.zeros_like(probs[:, :1]), buys_at[:, :-1]], 1)
        top = buys_at[:, -1:]
    else:
        buys_at = jnp.sum(probs[:, None, :] * (prices[:, None, :] <= at[:, :, None]), -1)
        buys_below = jnp.sum(probs[:, None, :] * (prices[:, None, :] < prices[:, :, None]), -1)
        top = jnp.sum(probs * (prices <= high), -1, keepdims=True)
    density = jnp.concatenate([at, below, jnp.full_like(top, high)], 1)
    sale = jnp.concatenate([buys_at, buys_below, top], 1)
    allowed = jnp.concatenate([jnp.ones_like(at, bool), prices > low, jnp.ones_like(top, bool)], 1)
    return density, sale, allowed


def _choices(setting: Setting, atoms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What each choice index of the induction means: ``(demand level, OPT units,
    density candidate)``, each ``[choices]``; choice 0 is nobody (level 0). The order is the
    induction's: levels, then OPT amounts, then the ``2A + 1`` candidates of
    :func:`_candidates`."""
    levels, amounts, candidates = [0], [0], [0]
    for j in range(1, setting.demand_levels + 1):
        for amount in range(j + 1) if setting.divisible else (0, j):
            levels += [j] * (2 * atoms + 1)
            amounts += [amount] * (2 * atoms + 1)
            candidates += list(range(2 * atoms + 1))
    return np.array(levels), np.array(amounts), np.array(candidates)


def _first_near(affine: jax.Array, top: jax.Array, scale: float) -> jax.Array:
    """``[G+1, G+1]`` the first candidate (axis 1 of ``affine`` ``[G+1, C, G+1]``) whose
    value is within a relative ``_TIE`` of the maximum ``top`` (of ``scale``, the setting's
    value unit, where ``top`` is smaller): a maximiser up to rounding, at every scale.

    Two max-reductions instead of one arg-max (a variadic reduction, about eight times slower
    on a CPU). The value the induction carries is ``top`` itself, exact; the choice only
    decides which near-maximiser's OPT and ALG are carried, each a real strategy's.
    """
    last = affine.shape[1] - 1
    near = affine >= top[:, None, :] - _TIE * (scale + jnp.abs(top[:, None, :]))
    reversed_index = jnp.arange(last, -1, -1)[None, :, None]
    return jnp.clip(last - jnp.max(jnp.where(near, reversed_index, -1), axis=1), 0, last)


def _pairs(setting: Setting, prices: jax.Array) -> bool:
    """Whether the table's atoms rise strictly and lie within [L, U] in every state (a host
    check of a concrete ``[T, G+1, A]`` table). Then "at ``p_k``" and "just below
    ``p_{k+1}``" (and "at ``p_{A-1}``" and ``U``) buy the same atoms, so each pair shares its
    sale probability and, in a given block, only the better of the two can be the maximiser:
    :func:`_induction` compares them first and maximises over ``A + 1`` candidates, not
    ``2A + 1``, with the same value."""
    prices = np.asarray(prices)
    rising = prices.shape[-1] < 2 or bool(np.all(np.diff(prices, axis=-1) > 0))
    return rising and bool(prices.min() >= setting.low) and bool(prices.max() <= setting.high)


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _induction(setting, prices, probs, ratio, keep_choices: bool, paired: bool = False):
    """The backward induction for ratio r: ``((F(r), E[OPT], E[ALG]), choices)``, where
    ``choices`` ``[T, G+1, G+1]`` is the maximising choice index (:func:`_choices`) in every
    state when ``keep_choices``, else None. ``paired`` (only where :func:`_pairs` holds)
    maximises over the better candidate of each equal-sale pair.

    Tables over (u_A, u_O) ``[G+1, G+1]``; a buyer choice is (demand level, density
    candidate, how many units OPT takes).
    """
    grid, levels = setting.grid_size, setting.demand_levels
    unit = setting.capacities[0] / grid
    units = jnp.arange(grid + 1)
    minus_inf = jnp.float64(-jnp.inf)

    def blocks():
        """(units ALG sells ``[G+1]``, units OPT takes) of every demand level and OPT share,
        in the order of :func:`_choices`."""
        for j in range(1, levels + 1):
            if setting.divisible:
                yield from ((jnp.minimum(j, grid - units), amount) for amount in range(j + 1))
            else:
                sold = jnp.where(units + j <= grid, j, 0)
                yield from ((sold, amount) for amount in (0, j))

    def block_candidates(density, sale, allowed, sold, amount):
        """For one block: each candidate's own payoff ``opt_gain - r sale alg_gain`` (-inf where
        not allowed), sale probability, OPT gain and expected ALG gain, ``[G+1, C]``, and with
        ``paired`` the better of each pair with its index among the ``2A + 1`` of
        :func:`_candidates` (else None: all of them, in order)."""
        alg_gain = density * (sold * unit)[:, None]  # [G+1, 2A+1]
        opt_gain = density * (amount * unit)
        own = jnp.where(allowed, opt_gain - ratio * sale * alg_gain, minus_inf)
        if not paired:
            return own, sale, opt_gain, sale * alg_gain, None
        atoms = (density.shape[1] - 1) // 2
        first = jnp.arange(atoms)  # at p_k
        second = jnp.arange(atoms + 1, 2 * atoms + 1)  # just below p_{k+1}; U for the last
        # a tie (within _TIE) keeps the first: XLA may compute ``own`` again in each column's
        # kernel, rounding it its own way (a fused multiply-add in one, not in another), and
        # every column must take the same candidate ("at p_k" is always allowed: finite)
        margin = _TIE * (setting.value_unit + jnp.abs(own[:, first]))
        better = own[:, second] > own[:, first] + margin  # [G+1, A]

        def merge(column):
            column = jnp.broadcast_to(column, own.shape)
            kept = jnp.where(better, column[:, second], column[:, first])
            return jnp.concatenate([kept, column[:, atoms : atoms + 1]], 1)  # and below p_0

        columns = (own, sale, opt_gain, sale * alg_gain, jnp.arange(density.shape[1]))
        return tuple(merge(column) for column in columns)

    def back(carry, inputs):  # carry: gap, opt, alg [G+1, G+1]; prices, probs [G+1, A]
        tables = carry
        density, sale, allowed = _candidates(setting, *inputs, paired)  # [G+1, 2A+1]
        candidates = density.shape[1]
        values, choices, picked = [tables[0]], [jnp.zeros_like(tables[0], jnp.int32)], [tables[1:]]
        for index, (sold, amount) in enumerate(blocks()):
            own, chance_of, opt_gain, alg_gain, original = block_candidates(
                density, sale, allowed, sold, amount
            )
            rows = units + sold
            # after a sale the next state is (rows, u_O + amount), else (u_A, u_O + amount)
            # 0 where OPT would overflow (masked below)
            stayed = [_shifted(table, 0, amount) for table in tables]
            moved = [_shifted(table[rows], 0, amount) for table in tables]
            # the value of candidate c is affine in the continuation's difference:
            # own[c] + sale[c] * (moved - stayed) + stayed
            spread = moved[0] - stayed[0]
            affine = own[:, :, None] + chance_of[:, :, None] * spread[:, None, :]  # [G+1, C, G+1]
            top = jnp.max(affine, axis=1)  # [G+1 (u_A), G+1 (u_O)]
            best = _first_near(affine, top, setting.value_unit)
            chance = jnp.take_along_axis(chance_of, best, 1)
            gains = tuple(jnp.take_along_axis(gain, best, 1) for gain in (opt_gain, alg_gain))
            fits = (units + amount <= grid)[None, :]  # OPT's units within capacity
            picked.append(
                tuple(
                    gain + chance * after + (1 - chance) * before
                    for gain, after, before in zip(gains, moved[1:], stayed[1:], strict=True)
                )
            )
            values.append(jnp.where(fits, stayed[0] + top, minus_inf))
            if original is not None:  # the merged candidate's index among the 2A + 1
                best = jnp.take_along_axis(original, best, 1)
            choices.append(1 + index * candidates + best)
        block = jnp.argmax(jnp.stack(values), axis=0)  # [G+1, G+1]
        select = lambda stacked: jnp.take_along_axis(stacked, block[None], 0)[0]  # noqa: E731
        tables = tuple(select(jnp.stack(column)) for column in zip(*picked, strict=True))
        tables = (select(jnp.stack(values)), *tables)
        return tables, (select(jnp.stack(choices)) if keep_choices else None)

    zero = jnp.zeros((grid + 1, grid + 1), jnp.float64)
    (gap, opt, alg), choices = jax.lax.scan(back, (zero, zero, zero), (prices, probs), reverse=True)
    return (gap[0, 0], opt[0, 0], alg[0, 0]), choices


def certificate_gradient(setting: Setting, table_of, params, ratio: float):
    """The gradient of a K = 1 policy's DP certificate with respect to ``params``, where
    ``table_of(params)`` is its float64 price table (:func:`price_table`'s ``[T, G+1, A]``)
    and ``ratio`` the certificate :func:`certify_dp` gave for it.

    The certificate is the root of ``F(r) = max_S E_S[OPT] - r E_S[ALG]`` over adversary
    strategies S, so by the envelope theorem its derivative is ``dF/dparams / E_S*[ALG]`` at
    the maximising strategy S*. At the root sending nobody ties with the worst strategy, so
    both are taken a relative ``1e-6`` below it, as :func:`worst_runs` does. Where strategies
    tie this is one subgradient. Inside x64; ``table_of`` is a static argument of the jitted
    programme (hashable, one compilation per function)."""
    with jax.enable_x64(True):
        below = jnp.float64(ratio * (1 - _STRATEGY_MARGIN))
        paired = _pairs(setting, table_of(params).prices)
        return _gradient(setting, table_of, params, below, paired)


@functools.partial(jax.jit, static_argnums=(0, 1, 4))
def _gradient(setting, table_of, params, ratio, paired: bool):
    """``dF(ratio)/dparams / E[ALG]`` (:func:`certificate_gradient`)."""

    def gap(params):
        table = table_of(params)
        (value, _, alg), _ = _induction(setting, table.prices, table.probs, ratio, False, paired)
        return value, alg

    (_, alg), slope = jax.value_and_grad(gap, has_aux=True)(params)
    return jax.tree.map(lambda leaf: leaf / alg, slope)


def worst_strategy(
    setting: Setting, table, start: float, give_up_at: float = math.inf, settled: float = 0.0
) -> tuple[float, float | None, jax.Array | None]:
    """Dinkelbach's iteration for a float64 price ``table`` (``[T, G+1, A]``, inside x64) from
    ``start``, keeping the strategy behind each raise: ``(ratio, bound, strategy)``.

    ``ratio`` is the last iterate, a ratio the returned ``strategy`` (the maximising choices
    ``[T, G+1, G+1]`` of :func:`_induction`) attains, so a lower bound on the programme's
    value; ``bound`` is that value when the iteration converged there (``F(ratio) <= tol``:
    the certificate), None when it stopped early because ``ratio`` reached ``give_up_at`` (a
    bound already known elsewhere that this table cannot beat), or when a raise was at most
    ``settled`` times the ratio (the iteration converges superlinearly, so ``ratio`` is then
    within about that much of the value; the sweep that would certify it is skipped). A
    ``start`` at or above the value is lowered by 1% until it is below (each such ``start``
    bounds the value too; the lowest is kept in ``bound`` if no strategy is found).
    ``strategy`` is None only then, or where some instance leaves ALG with nothing (``ratio``
    inf).
    """
    paired = _pairs(setting, table.prices)
    ratio, bound, strategy = max(float(start), 1.0), None, None
    for _ in range(_MAX_DINKELBACH_STEPS):
        (gap, opt, alg), choices = _induction(
            setting, table.prices, table.probs, jnp.float64(ratio), True, paired
        )
        gap, opt, alg = float(gap), float(opt), float(alg)
        if opt > 0 and alg <= 0:
            return math.inf, None, None
        if gap <= _TOLERANCE * max(opt, setting.value_unit):  # the value is at most ratio
            bound = ratio
            if strategy is not None or ratio <= 1.0:
                return ratio, bound, strategy
            ratio = max(1.0, ratio * 0.99)  # no strategy yet: start below the value
            continue
        raised, ratio, strategy = opt / alg - ratio, opt / alg, choices
        if ratio >= give_up_at or raised <= settled * ratio:
            return ratio, None, strategy
    return ratio, None, strategy


def strategy_gradient(setting: Setting, table_of, params, strategy: jax.Array, prices=None):
    """``(ratio, gradient)``: the ratio ``E[OPT] / E[ALG]`` that the fixed adversary strategy
    ``strategy`` (choices ``[T, G+1, G+1]`` from :func:`worst_strategy`) attains against the
    table ``table_of(params)``, and its gradient with respect to ``params``. At the strategy
    behind a certificate this is the certificate's gradient (the envelope theorem, as in
    :func:`certificate_gradient`), at the cost of one pass over the states instead of the
    derivative of the whole induction. Inside x64; ``table_of`` is a static argument;
    ``prices``: the table's prices where the caller has them."""
    prices = table_of(params).prices if prices is None else prices
    meaning = tuple(
        jnp.asarray(column, jnp.int32) for column in _choices(setting, prices.shape[-1])
    )
    return _strategy_gradient(setting, table_of, _pairs(setting, prices), params, strategy, meaning)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _strategy_gradient(setting, table_of, paired, params, strategy, meaning):
    def ratio(params):
        table = table_of(params)
        opt, alg = _strategy_values(setting, table.prices, table.probs, strategy, meaning, paired)
        return opt / alg

    return jax.value_and_grad(ratio)(params)


def _shifted(table: jax.Array, rows: int, columns: int) -> jax.Array:
    """``table[u_A + rows, u_O + columns]``, 0 past the grid."""
    size = table.shape[0]
    if rows:
        table = jnp.concatenate([table[rows:], jnp.zeros((rows, size), table.dtype)], 0)
    if columns:
        table = jnp.concatenate([table[:, columns:], jnp.zeros((size, columns), table.dtype)], 1)
    return table


def _strategy_values(setting, prices, probs, strategy, meaning, paired):
    """``(E[OPT], E[ALG])`` of the fixed strategy against the table ``[T, G+1, A]``: the
    induction of :func:`_induction` with each state's choice given, so nothing is maximised
    (differentiable in the table; moves are shifts of the ``(u_A, u_O)`` grid)."""
    level_of, amount_of, candidate_of = meaning
    grid, levels = setting.grid_size, setting.demand_levels
    unit = setting.capacities[0] / grid
    units = jnp.arange(grid + 1)[:, None]

    def back(tables, inputs):
        choices, round_prices, round_probs = inputs
        density, sale, _ = _candidates(setting, round_prices, round_probs, paired)
        level, amount = level_of[choices], amount_of[choices]
        density = jnp.take_along_axis(density, candidate_of[choices], 1)
        chance = jnp.take_along_axis(sale, candidate_of[choices], 1)
        if setting.divisible:
            sold = jnp.minimum(level, grid - units)
        else:
            sold = jnp.where(units + level <= grid, level, 0)
        gains = (density * (amount * unit), chance * density * (sold * unit))
        after = []
        for table in tables:
            stayed = sum(
                jnp.where(amount == b, _shifted(table, 0, b), 0.0) for b in range(levels + 1)
            )
            moved = sum(
                jnp.where((sold == a) & (amount == b), _shifted(table, a, b), 0.0)
                for a in range(levels + 1)
                for b in range(levels + 1)
            )
            after.append(chance * moved + (1 - chance) * stayed)
        return tuple(gain + rest for gain, rest in zip(gains, after, strict=True)), None

    zero = jnp.zeros((grid + 1, grid + 1), prices.dtype)
    (opt, alg), _ = jax.lax.scan(back, (zero, zero), (strategy, prices, probs), reverse=True)
    return opt[0, 0], alg[0, 0]


class WorstRuns(NamedTuple):
    """Instances drawn from the DP's maximising adversary strategy (:func:`worst_runs`)."""

    densities: np.ndarray  # [N, T] float64 buyer value density (meaningless where level 0)
    strictly_below: np.ndarray  # [N, T] bool: the density is the supremum just below it
    levels: np.ndarray  # [N, T] demand level in grid units, 0 where nobody comes


def worst_runs(
    setting: Setting, policy: Policy, ratio: float, key: jax.Array, count: int
) -> WorstRuns:
    """``count`` instances written by the adversary strategy that attains the programme's
    value ``F(ratio)`` against a K = 1 policy (with ``ratio`` the certificate: the strategy
    that attains the bound).

    The strategy picks each buyer from the state, so for a randomised policy each draw
    follows it along one realisation of the posted prices: draw ``i`` is a fixed instance
    (an attained lower bound on the oblivious CR, like any instance), and the draws are the
    instances that make the certificate what it is. For a deterministic policy every draw is
    the one instance whose ratio is the exact CR. Float64; the induction and the draws are
    two jitted programmes, the rest runs outside ``jit``.

    The strategy is the one for a ratio a relative ``1e-6`` below ``ratio``: at the root of
    the programme sending nobody at all ties with the worst instance, above it is positive
    only for instances with ratio above it.
    """
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)
        return _runs_below(setting, table, ratio, key, count)


def _runs_below(setting: Setting, table, ratio: float, key: jax.Array, count: int) -> WorstRuns:
    """``count`` draws of the strategy for a ratio a relative ``_STRATEGY_MARGIN`` below
    ``ratio`` (:func:`worst_runs`) against the float64 price ``table`` (inside x64)."""
    below = jnp.float64(ratio * (1 - _STRATEGY_MARGIN))
    paired = _pairs(setting, table.prices)
    _, choices = _induction(setting, table.prices, table.probs, below, True, paired)
    return _runs(setting, table, choices, key, count)


def _runs(setting: Setting, table, choices: jax.Array, key: jax.Array, count: int) -> WorstRuns:
    """``count`` draws of the strategy ``choices`` against the price ``table``."""
    atoms = table.prices.shape[-1]
    meaning = tuple(jnp.asarray(column, jnp.int32) for column in _choices(setting, atoms))
    drawn = _draw(setting, table.prices, table.probs, choices, meaning, key, count)
    return WorstRuns(*(np.asarray(column).T for column in drawn))


@functools.partial(jax.jit, static_argnums=(0, 6))
def _draw(setting, prices, probs, choices, meaning, key, count):
    """Forward through the strategy ``choices`` ``[T, G+1, G+1]``: each round, every draw
    takes the choice of its state, sells with the candidate's sale probability and moves
    ALG's and OPT's units. Returns ``(densities, strictly_below, levels)``, each ``[T, N]``."""
    grid, atoms = setting.grid_size, prices.shape[-1]
    level_of, amount_of, candidate_of = meaning

    def round_(carry, inputs):
        alg_units, opt_units = carry
        choice_table, round_prices, round_probs, round_key = inputs
        density, sale, _ = _candidates(setting, round_prices, round_probs)  # [G+1, C]
        choice = choice_table[alg_units, opt_units]
        level, candidate = level_of[choice], candidate_of[choice]
        sells = jax.random.uniform(round_key, (count,)) < sale[alg_units, candidate]
        if setting.divisible:
            sold = jnp.minimum(level, grid - alg_units)
        else:
            sold = jnp.where(alg_units + level <= grid, level, 0)
        moved = (alg_units + jnp.where(sells, sold, 0), opt_units + amount_of[choice])
        below = (candidate >= atoms) & (candidate < 2 * atoms)
        return moved, (density[alg_units, candidate], below, level)

    start = jnp.zeros(count, jnp.int32)
    keys = jax.random.split(key, setting.rounds)
    _, drawn = jax.lax.scan(round_, (start, start), (choices, prices, probs, keys))
    return drawn


def certify_closed_form(setting: Setting, policy: Policy) -> Certificate:
    """Small-demand-limit CR of a monotone, round-independent K = 1 price function."""
    if setting.resources != 1:
        return Certificate(None, None, "no exact certificate for K >= 2")
    if not policy.deterministic:
        return Certificate(None, None, "the closed form covers deterministic policies only")
    with jax.enable_x64(True):
        utilisation = jnp.linspace(0.0, 1.0, _CLOSED_FORM_POINTS + 1, dtype=jnp.float64)

        def price_at(round_fraction):
            def one(y):
                observation = Observation(utilisation=y[None], round_fraction=round_fraction)
                return policy(observation).prices[0, 0]

            return jax.vmap(one)(utilisation)

        curves = np.asarray(jax.jit(jax.vmap(price_at))(jnp.linspace(0.0, 0.99, 5)), np.float64)
    phi = curves[0]
    if not np.allclose(curves, phi, rtol=1e-12, atol=0):
        return Certificate(None, None, "closed form needs a price independent of the round")
    if np.any(np.diff(phi) < -1e-12 * np.abs(phi).max()):
        return Certificate(None, None, "closed form needs a price non-decreasing in utilisation")
    low, high = setting.low, setting.high
    if phi[0] > low:
        return Certificate(math.inf, "closed-form", "buyers just below the first price never buy")
    step = 1.0 / _CLOSED_FORM_POINTS
    earned = np.concatenate([[0.0], np.cumsum((phi[1:] + phi[:-1]) * step / 2)])  # [N+1]
    stops = np.clip(np.concatenate([phi, [low, high]]), low, high)  # candidate v
    reached = np.searchsorted(phi, stops, side="right") - 1  # last grid point with phi <= v
    with np.errstate(divide="ignore"):
        ratio = float(np.max(stops / earned[reached]))
    return Certificate(ratio, "closed-form", "small-demand limit (T -> inf, demands -> 0)")
