"""Certified competitive ratios of K >= 2 policies on the product grid, in float64
(docs/method.md §5, "Several resources").

**The instances.** The setting's buyers ask for a demand vector of the setting
(:func:`~posted_price.buyer_types.demand_vectors`: each level on every resource at once, or on
one resource alone) at any density in [L, U], or nobody comes. What the algorithm has sold then
stays on the grid ``{0, ..., G}^K`` (:mod:`posted_price.product_grid`).

**OPT in whole units.** Write OPT's share of buyer t as ``y_t`` units on each resource it asks
for (``0 <= y_t <= g_t``, its level). Capacity k then reads ``sum over buyers asking for k of
y_t <= G``: a 0/1 matrix whose columns are the demand supports, a single resource or all of
them. Each column's ones are consecutive (an interval matrix), so the matrix is totally
unimodular, and with whole bounds ``g_t`` and ``G`` the LP's optimum is attained at whole
``y_t``. OPT of a divisible instance is therefore the best choice of whole units per buyer
(of an indivisible one, of 0 or ``g_t``), and a programme that tracks OPT's units per resource
is exact: ``tests/test_grid_certify.py`` checks both against HiGHS.

**Dynamic programme.** For a ratio r the adversary solves

    F(r) = max over adversary strategies S of  E_S[OPT committed] - r E_S[ALG]

by backward induction over (round t, ALG's units, OPT's units): ``(G + 1)^(2K)`` states a
round. A buyer is a demand vector, a density, and how many whole units OPT takes of it. For
fixed state, demand and OPT share the payoff is affine in the density, and whether the buyer
buys depends only on which bundle prices ``p . d / |d|`` of the posted distribution lie at or
below it, so the density can be taken from each bundle price (clipped to [L, U]), the
supremum just below each bundle price within (L, U], and U. The adversary sees the state, not
the price draw; for a deterministic policy nothing branches, so ``sup_I OPT / ALG`` is the
root of F and the figure is exact. For a randomised (shared-quantile) policy every fixed
instance with its optimal selection is one strategy, so the root bounds the oblivious CR from
above. Dinkelbach's method finds the root as for K = 1 (:mod:`posted_price.certify`).

**Mixtures** chosen once per input. Each member m satisfies ``OPT(I) <= c_m E[ALG_m(I)]``
on every instance, so the mixture earns ``sum_m w_m E[ALG_m(I)] >= OPT(I) sum_m w_m / c_m``:
its ratio is at most the weighted harmonic mean of its members' certificates.

Everything runs outside any training loop; the induction is one jitted ``lax.scan`` per
Dinkelbach step.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advonline.mixture import SnapshotMixture
from advonline.problems.posted_price.buyer_types import demand_grid_units, demand_vectors
from advonline.problems.posted_price.certify import (
    _STRATEGY_MARGIN,
    NOTHING_FOR_ALG,
    Certificate,
    WorstRuns,
    _first_near,
    certify_dp,
    dinkelbach,
)
from advonline.problems.posted_price.certify import (
    DEFAULT_WORK_LIMIT as K1_WORK_LIMIT,
)
from advonline.problems.posted_price.model import Setting, observe, within_rounding
from advonline.problems.posted_price.product_grid import (
    grid_price_table,
    grid_transitions,
    grid_units,
    quantile_intervals,
    state_count,
)

#: Work limit of one sweep, in (state x sale class) updates; beyond it no certificate is made.
#: A 32-atom network for two resources at T = 60 and G = 20 is 1.1e10: about a minute a sweep
#: on 2 CPU cores, a few minutes a certificate.
DEFAULT_WORK_LIMIT = 2e10


def certify_policy(
    setting: Setting, policy, work_limit: float | None = None, start: float = 1.0
) -> Certificate:
    """The certificate of any policy or mixture: the DP of :mod:`posted_price.certify` for one
    resource (faster, and it draws its worst runs), the product-grid programme for several.
    ``work_limit`` defaults to each programme's own."""
    if setting.resources == 1 and not isinstance(policy, SnapshotMixture):
        limit = K1_WORK_LIMIT if work_limit is None else work_limit
        return certify_dp(setting, policy, limit, start)
    limit = DEFAULT_WORK_LIMIT if work_limit is None else work_limit
    return certify_grid(setting, policy, limit, start)


def grid_work(setting: Setting, intervals: int) -> float:
    """Updates in one sweep: T S^2 x (OPT shares x (I + 1) sale classes), S = (G + 1)^K."""
    return setting.rounds * state_count(setting) ** 2 * len(_blocks(setting)) * (intervals + 1)


def certify_grid(
    setting: Setting, policy, work_limit: float = DEFAULT_WORK_LIMIT, start: float = 1.0
) -> Certificate:
    """The certificate of a K >= 2 policy or of a mixture of networks (module docstring); for
    one resource :func:`certify_policy` takes the faster K = 1 DP. ``start``: a ratio some
    instance attains against the policy, where Dinkelbach's iteration begins."""
    if isinstance(policy, SnapshotMixture):
        return _mixture_certificate(setting, policy, work_limit)
    if (over := _over_limit(setting, 1, work_limit)) is not None:  # before the table is built
        return over
    with jax.enable_x64(True):
        table = grid_price_table(setting, policy, jnp.float64)  # [T, S, K, A]
    deterministic = getattr(policy, "deterministic", False)
    return certify_table(setting, table, deterministic, work_limit, start)


def certify_table_from(setting: Setting, table, guess: float) -> Certificate:
    """:func:`certify_table` of ``table`` with Dinkelbach's iteration started at
    ``guess``, a ratio no instance need attain (say, a little below a neighbouring table's
    certificate). Started above the root, the iteration stops at once at its start, a valid
    but looser bound; then it runs again from 1, so that the figure is the programme's
    value."""
    found = certify_table(setting, table, start=guess)
    if found.ratio is not None and found.ratio <= guess:  # stopped at once
        found = certify_table(setting, table)
    return found


def certify_table(
    setting: Setting,
    table,
    deterministic: bool = False,
    work_limit: float = DEFAULT_WORK_LIMIT,
    start: float = 1.0,
) -> Certificate:
    """:func:`certify_grid` of the policy whose float64 grid table is ``table``
    (``[T, S, K, A]``, :func:`~posted_price.product_grid.grid_price_table`)."""
    with jax.enable_x64(True):
        intervals = quantile_intervals(table)  # widths [T, S, I], prices [T, S, I, K]
        if (over := _over_limit(setting, intervals.widths.shape[-1], work_limit)) is not None:
            return over

        def sweep(ratio: float):
            *values, _ = _grid_induction(
                setting, intervals.widths, intervals.prices, jnp.float64(ratio)
            )
            return (*values, None)

        ratio, steps, _ = dinkelbach(sweep, start, setting.value_unit)
        if ratio is None:
            return Certificate(None, None, "Dinkelbach iteration did not converge")
        if math.isinf(ratio):
            return Certificate(ratio, "grid-programme", NOTHING_FOR_ALG)
    kind = (
        "exact on the setting's instances"
        if deterministic
        else "upper bound on the oblivious CR (adversary adapts to the state, not to the "
        "price draw; OPT commits on arrival)"
    )
    return Certificate(ratio, "grid-programme", f"{kind}, {steps} sweeps over the product grid")


def _over_limit(
    setting: Setting, intervals: int, work_limit: float, members: int = 1
) -> Certificate | None:
    """No certificate, and why, where one sweep over ``intervals`` price intervals (at
    least 1), for each of ``members`` policies, would exceed ``work_limit``; else None."""
    if (work := members * grid_work(setting, intervals)) <= work_limit:
        return None
    each = f", for {members} members" if members > 1 else ""
    note = (
        f"the grid certificate needs {work:.1e} updates per sweep (T={setting.rounds}, "
        f"{state_count(setting)} grid states, {intervals} price interval"
        f"{'s' if intervals > 1 else ' or more'}{each}), over the limit {work_limit:.0e}"
    )
    return Certificate(None, None, note)


def _mixture_certificate(setting: Setting, mixture: SnapshotMixture, work_limit: float):
    """The weighted harmonic mean of the members' certificates (module docstring)."""
    weights = np.asarray(mixture.weights, np.float64)
    if setting.resources > 1:  # at most K A intervals a member, A read from one posting
        empty = observe(setting, jnp.zeros(setting.resources), jnp.asarray(0))
        intervals = setting.resources * mixture.member(0)(empty).prices.shape[-1]
        if (over := _over_limit(setting, intervals, work_limit, len(weights))) is not None:
            return over
    inverse = 0.0
    for index, weight in enumerate(weights):
        member = certify_policy(setting, mixture.member(index))
        if member.ratio is None:
            return Certificate(None, None, f"member {index}: {member.note}")
        inverse += weight / member.ratio
    note = f"weighted harmonic mean of {len(weights)} members' certificates (each an upper bound)"
    return Certificate(1.0 / inverse, "grid-programme", note)


@functools.lru_cache(maxsize=8)
def _blocks(setting: Setting) -> tuple[tuple[int, int, int], ...]:
    """The induction's buyer blocks: ``(demand vector j, OPT's units m, its level g)``; OPT
    takes ``m / g`` of buyer j (whole units 0..g when divisible, 0 or g when not)."""
    levels = demand_grid_units(setting).max(-1)
    return tuple(
        (j, m, int(g))
        for j, g in enumerate(levels)
        for m in (range(g + 1) if setting.divisible else (0, g))
    )


def _opt_moves(setting: Setting) -> tuple[np.ndarray, np.ndarray]:
    """For every block of :func:`_blocks`: OPT's state after taking its units ``[B, S]`` (0 where
    they do not fit) and whether they fit ``[B, S]``."""
    units = grid_units(setting)  # [S, K]
    demand = demand_grid_units(setting)
    strides = (setting.grid_size + 1) ** np.arange(setting.resources - 1, -1, -1)
    following, fits = [], []
    for j, m, _ in _blocks(setting):
        taken = m * (demand[j] > 0)  # [K]
        after = units + taken
        fit = np.all(after <= setting.grid_size, -1)
        following.append(np.where(fit, np.minimum(after, setting.grid_size) @ strides, 0))
        fits.append(fit)
    return np.stack(following).astype(np.int32), np.stack(fits)


def _sale_classes(setting: Setting, widths: jax.Array, bundle: jax.Array):
    """The buyers of one demand vector, in every ALG state, grouped by what they buy.

    ``bundle`` ``[S, I]`` is each quantile interval's bundle price per unit of demand and
    ``widths`` its chance. A buyer of density v buys the intervals priced at most v, so the
    densities in [L, U] fall into classes that buy the same intervals: nothing (``[L, b_min)``)
    and, for each interval i, the ones priced at most ``b_i`` (``[max(b_i, L), b_next)``,
    ``b_next`` the next higher bundle price, capped at U). Within a class the payoff is affine in
    the density, so only its two ends matter: returns each class's lowest density, the
    supremum of its densities, its sale probability and whether it is non-empty, each
    ``[S, I + 1]`` (class 0 buys nothing)."""
    low, high = setting.low, setting.high
    higher = bundle[:, None, :] > bundle[:, :, None]  # [S, i, j]: b_j > b_i
    following = jnp.min(jnp.where(higher, bundle[:, None, :], jnp.inf), -1)  # [S, I]
    sale = jnp.sum(jnp.where(higher, 0.0, widths[:, None, :]), -1)  # b_j <= b_i
    lowest = jnp.maximum(bundle, low)
    first = jnp.min(bundle, -1, keepdims=True)
    return (
        jnp.concatenate([jnp.full_like(first, low), lowest], 1),
        jnp.concatenate([jnp.minimum(first, high), jnp.minimum(following, high)], 1),
        jnp.concatenate([jnp.zeros_like(first), sale], 1),
        jnp.concatenate([first > low, (lowest < following) & (bundle <= high)], 1),
    )


@functools.partial(jax.jit, static_argnums=(0, 4))
def _grid_induction(setting: Setting, widths, prices, ratio, record: bool = False):
    """The backward induction for ratio r: ``(F(r), E[OPT], E[ALG])`` of a maximising
    strategy, from the empty state, in the precision of ``widths`` (float64 for a
    certificate). Tables over (ALG state, OPT state) ``[S, S]``. With ``record``, also that
    strategy (:class:`GridStrategy`), else None."""
    with jax.enable_x64(True):
        dtype = widths.dtype
        demands = demand_vectors(setting, dtype)  # [J, K]
        size = demands.sum(-1)  # [J] |d|
        moves = grid_transitions(setting, demands)  # fraction, following [J, S]
        opt_following, opt_fits = (jnp.asarray(column) for column in _opt_moves(setting))
        blocks = _blocks(setting)

        def back(tables, inputs):
            widths_t, prices_t = inputs  # [S, I], [S, I, K]
            values = [tables[0]]
            picked = [tables[1:]]
            nobody = jnp.zeros_like(tables[0])
            chosen = [(nobody, nobody > 0, nobody)]  # never read: nobody buys
            per_demand = {}
            for index, (j, m, g) in enumerate(blocks):
                if j not in per_demand:
                    bundle = prices_t @ demands[j] / size[j]  # [S, I], ties as purchase's:
                    bundle = bundle * within_rounding(setting.resources, dtype)
                    per_demand[j] = _sale_classes(setting, widths_t, bundle)
                lowest, highest, sale, allowed = per_demand[j]
                # OPT's share less r times ALG's sale, per unit of density: the class's best
                # density is its supremum where that is non-negative, its lowest else
                alg_share = (size[j] * moves.fraction[j])[:, None]  # [S, 1]
                opt_share = size[j] * m / g
                slope = opt_share - ratio * sale * alg_share
                density = jnp.where(slope >= 0, highest, lowest)  # [S, I + 1]
                alg_gain = density * alg_share
                opt_gain = density * opt_share
                own = jnp.where(allowed, density * slope, -jnp.inf)
                columns = opt_following[index]
                stayed = [table[:, columns] for table in tables]
                moved = [table[moves.following[j]][:, columns] for table in tables]
                spread = moved[0] - stayed[0]  # [S, S]
                affine = own[:, :, None] + sale[:, :, None] * spread[:, None, :]  # [S, C, S]
                top = jnp.max(affine, axis=1)
                best = _first_near(affine, top, setting.value_unit)
                chance = jnp.take_along_axis(sale, best, 1)
                if record:  # the buyer each (ALG, OPT) state gets from this block
                    supremum = (slope >= 0) & (highest < setting.high)  # not attained
                    chosen.append(
                        (
                            jnp.take_along_axis(density, best, 1),
                            jnp.take_along_axis(supremum, best, 1),
                            chance,
                        )
                    )
                gains = (
                    jnp.take_along_axis(opt_gain, best, 1),
                    chance * jnp.take_along_axis(alg_gain, best, 1),
                )
                picked.append(
                    tuple(
                        gain + chance * after + (1 - chance) * before
                        for gain, after, before in zip(gains, moved[1:], stayed[1:], strict=True)
                    )
                )
                values.append(jnp.where(opt_fits[index][None, :], stayed[0] + top, -jnp.inf))
            block = jnp.argmax(jnp.stack(values), axis=0)  # [S, S]
            select = lambda stacked: jnp.take_along_axis(stacked, block[None], 0)[0]  # noqa: E731
            carried = tuple(select(jnp.stack(column)) for column in zip(*picked, strict=True))
            strategy = None
            if record:
                strategy = GridStrategy(
                    block.astype(jnp.int32),
                    *(select(jnp.stack(column)) for column in zip(*chosen, strict=True)),
                )
            return (select(jnp.stack(values)), *carried), strategy

        states = state_count(setting)
        zero = jnp.zeros((states, states), dtype)
        # rematerialised under differentiation: a round's [S, C, S] candidates are computed
        # again in the backward pass rather than kept for every round
        (gap, opt, alg), strategy = jax.lax.scan(
            jax.checkpoint(back), (zero, zero, zero), (widths, prices), reverse=True
        )
        return gap[0, 0], opt[0, 0], alg[0, 0], strategy


def grid_certificate_gradient(setting: Setting, table_of, params, ratio: float, dtype=jnp.float64):
    """The gradient of a K >= 2 policy's certificate over the product grid with respect to
    ``params``, where ``table_of(params)`` is its grid table (``[T, S, K, A]``) and ``ratio``
    the certificate :func:`certify_grid` gave for it.

    As for one resource (:func:`~posted_price.certify.certificate_gradient`): the
    certificate is the root of ``F(r) = max_S E_S[OPT] - r E_S[ALG]``, so its derivative is
    ``dF/dparams / E_S*[ALG]`` at the maximising strategy S*, taken a relative ``1e-6`` below
    the root. Reverse mode through the induction, each round recomputed in the backward pass.
    ``dtype``: the induction's precision. The gradient is a direction to descend, not a
    bound, so float32 serves, in about half float64's time on a CPU; every certificate stays
    float64. Returns float64 inside x64; ``table_of`` is a static argument (hashable, one
    compilation per function and precision)."""
    with jax.enable_x64(True):
        params = jax.tree.map(lambda leaf: jnp.asarray(leaf, dtype), params)
        below = jnp.asarray(ratio * (1 - _STRATEGY_MARGIN), dtype)
        slope = _grid_gradient(setting, table_of, params, below)
        return jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float64), slope)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _grid_gradient(setting: Setting, table_of, params, ratio):
    """``dF(ratio)/dparams / E[ALG]`` (:func:`grid_certificate_gradient`)."""

    def gap(params):
        intervals = quantile_intervals(table_of(params))
        value, _, alg, _ = _grid_induction(setting, intervals.widths, intervals.prices, ratio)
        return value, alg

    (_, alg), slope = jax.value_and_grad(gap, has_aux=True)(params)
    # a NaN entry does not move. Compiled without XLA's optimisation passes, reverse mode
    # through the induction gives NaN entries (op by op, and optimised, the same finite
    # ones); optimised, a NaN is rare
    return jax.tree.map(lambda leaf: jnp.where(jnp.isnan(leaf), 0.0, leaf / alg), slope)


class GridStrategy(NamedTuple):
    """The adversary's buyer in every round and (ALG state, OPT state), each ``[T, S, S]``: a
    maximiser of the programme for one ratio (:func:`_grid_induction` with ``record``)."""

    block: jax.Array  # int32: 0 nobody comes, else 1 + the index of its block (_blocks)
    density: jax.Array  # the buyer's value per unit of demand
    strictly_below: jax.Array  # bool: the density is the supremum just below it
    chance: jax.Array  # the chance ALG sells to that buyer


def grid_worst_runs(
    setting: Setting, policy, ratio: float, key: jax.Array, count: int
) -> WorstRuns:
    """``count`` instances written by the adversary strategy that attains the programme's
    value for a ratio a relative ``1e-6`` below ``ratio`` against a K >= 2 policy (with
    ``ratio`` the certificate: the strategy that attains the bound), as
    :func:`~posted_price.certify.worst_runs` does for one resource: each draw follows the
    strategy along one realisation of the posted prices, so it is one fixed instance (an
    attained lower bound on the oblivious CR, like any instance). ``levels`` holds each
    buyer's demand vector (:func:`~posted_price.buyer_types.demand_vectors`) plus one, 0 for
    nobody. One sweep that records the strategy, then the draws: two jitted programmes, in
    float64."""
    with jax.enable_x64(True):
        intervals = quantile_intervals(grid_price_table(setting, policy, jnp.float64))
        below = jnp.float64(ratio * (1 - _STRATEGY_MARGIN))
        *_, strategy = _grid_induction(setting, intervals.widths, intervals.prices, below, True)
        drawn = _grid_draw(setting, strategy, key, count)
    return WorstRuns(*(np.asarray(column).T for column in drawn))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _grid_draw(setting: Setting, strategy: GridStrategy, key: jax.Array, count: int):
    """Forward through ``strategy``: each round every draw takes the buyer of its (ALG, OPT)
    state, ALG sells to it with its chance and OPT takes its block's units. Returns
    ``(densities, strictly_below, levels)``, each ``[T, N]``."""
    demands = demand_vectors(setting, jnp.float64)
    alg_following = grid_transitions(setting, demands).following  # [J, S]
    opt_following = jnp.asarray(_opt_moves(setting)[0])  # [B, S]
    demand_of = jnp.asarray([j for j, _, _ in _blocks(setting)], jnp.int32)  # [B]

    def round_(carry, inputs):
        alg, opt = carry
        block, density, strictly_below, chance, round_key = inputs
        chosen = block[alg, opt]
        comes = chosen > 0
        index = jnp.maximum(chosen - 1, 0)
        demand = demand_of[index]
        sells = comes & (jax.random.uniform(round_key, (count,)) < chance[alg, opt])
        moved = (
            jnp.where(sells, alg_following[demand, alg], alg),
            jnp.where(comes, opt_following[index, opt], opt),
        )
        level = jnp.where(comes, demand + 1, 0)
        return moved, (density[alg, opt], strictly_below[alg, opt], level)

    start = jnp.zeros(count, jnp.int32)
    keys = jax.random.split(key, setting.rounds)
    _, drawn = jax.lax.scan(round_, (start, start), (*strategy, keys))
    return drawn
