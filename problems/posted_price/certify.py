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

import jax
import jax.numpy as jnp
import numpy as np

from advonline.problems.posted_price.model import Observation, Policy, Setting, price_table

#: Work limit of one DP sweep, in (state x candidate) updates; beyond it the DP is skipped.
DEFAULT_WORK_LIMIT = 1e9
_MAX_DINKELBACH_STEPS = 60
_TOLERANCE = 1e-12
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
    if setting.resources != 1:
        return Certificate(None, None, "no exact certificate for K >= 2")
    with jax.enable_x64(True):
        table = price_table(setting, policy, jnp.float64)  # [T, G+1, A]
        atoms = table.prices.shape[-1]
        if (work := dp_work(setting, atoms)) > work_limit:
            return Certificate(
                None,
                None,
                f"exact DP needs {work:.1e} updates per sweep (T={setting.rounds}, "
                f"grid {setting.grid_size} units, {atoms} price atoms), over the limit "
                f"{work_limit:.0e}",
            )
        ratio, steps = max(float(start), 1.0), 0
        for steps in range(1, _MAX_DINKELBACH_STEPS + 1):  # noqa: B007
            gap, opt, alg = (
                float(x) for x in _sweep(setting, table.prices, table.probs, jnp.float64(ratio))
            )
            if opt > 0 and alg <= 0:
                return Certificate(
                    math.inf, "dynamic-programme", "an instance leaves ALG with nothing"
                )
            if gap <= _TOLERANCE * max(opt, 1.0):
                break
            ratio = opt / alg
        else:
            return Certificate(None, None, "Dinkelbach iteration did not converge")
    kind = (
        "exact on the finite setting"
        if policy.deterministic
        else "upper bound on the oblivious CR (adversary adapts to the state, not to the "
        "price draw; OPT commits on arrival)"
    )
    return Certificate(ratio, "dynamic-programme", f"{kind}, {steps} DP sweeps")


def _candidates(setting: Setting, prices: jax.Array, probs: jax.Array):
    """Buyer densities worth trying in each state and the chance each one buys.

    Per state (row u_A) and atom k: density ``clip(p_k, L, U)`` (buys every atom <= it) and
    just below ``p_k`` (the supremum ``min(p_k, U)``, buying only atoms < p_k; only when
    ``p_k > L``), and U. Between these the ratio is monotone, so nothing else can be worse.
    Returns density, sale probability and allowed, each ``[G+1, 2A+1]``.
    """
    low, high = setting.low, setting.high
    at = jnp.clip(prices, low, high)  # [G+1, A]
    below = jnp.minimum(prices, high)
    buys_at = jnp.sum(probs[:, None, :] * (prices[:, None, :] <= at[:, :, None]), -1)
    buys_below = jnp.sum(probs[:, None, :] * (prices[:, None, :] < prices[:, :, None]), -1)
    top = jnp.sum(probs * (prices <= high), -1, keepdims=True)
    density = jnp.concatenate([at, below, jnp.full_like(top, high)], 1)
    sale = jnp.concatenate([buys_at, buys_below, top], 1)
    allowed = jnp.concatenate([jnp.ones_like(at, bool), prices > low, jnp.ones_like(top, bool)], 1)
    return density, sale, allowed


def _expect(sale, rows, amount, shift_opt, table, gain):
    """``gain + E[table at the next state]`` over sale (prob ``sale``) or not; a certain
    outcome ignores the other branch, which may be -inf (OPT over capacity)."""
    moved = shift_opt(table[rows], amount)[:, None]
    stayed = shift_opt(table, amount)[:, None]
    return gain + jnp.where(sale > 0, sale * moved, 0) + jnp.where(sale < 1, (1 - sale) * stayed, 0)


@functools.partial(jax.jit, static_argnums=0)
def _sweep(setting: Setting, prices: jax.Array, probs: jax.Array, ratio: jax.Array):
    """One backward induction for ratio r: (F(r), E[OPT], E[ALG]) of the maximising strategy.

    Tables over (u_A, u_O) ``[G+1, G+1]``; a buyer choice is (demand level, density
    candidate, how many units OPT takes).
    """
    grid, levels = setting.grid_size, setting.demand_levels
    unit = setting.capacities[0] / grid
    units = jnp.arange(grid + 1)
    minus_inf = jnp.float64(-jnp.inf)

    def shift_opt(table: jax.Array, amount: int) -> jax.Array:
        """table[:, u_O + amount], -inf where OPT would overflow."""
        shifted = jnp.concatenate([table[:, amount:], jnp.full((grid + 1, amount), minus_inf)], 1)
        return shifted if amount else table

    def back(carry, inputs):  # carry: gap, opt, alg [G+1, G+1]; prices, probs [G+1, A]
        gap_next, opt_next, alg_next = carry
        density, sale, allowed = _candidates(setting, *inputs)  # [G+1, C]
        sale = sale[..., None]
        values, opts, algs = [gap_next[:, None]], [opt_next[:, None]], [alg_next[:, None]]
        for j in range(1, levels + 1):
            if setting.divisible:
                sold = jnp.minimum(j, grid - units)
                opt_amounts = range(j + 1)
            else:
                sold = jnp.where(units + j <= grid, j, 0)
                opt_amounts = (0, j)
            rows = units + sold
            alg_gain = (density * (sold * unit)[:, None])[..., None]  # [G+1, C, 1]
            for amount in opt_amounts:
                opt_gain = (density * amount * unit)[..., None]
                expect = functools.partial(_expect, sale, rows, amount, shift_opt)
                value = expect(gap_next, opt_gain - ratio * sale * alg_gain)
                values.append(jnp.where(allowed[..., None], value, minus_inf))
                opts.append(expect(opt_next, opt_gain))
                algs.append(expect(alg_next, sale * alg_gain))
        values = jnp.concatenate(values, axis=1)  # [G+1, choices, G+1]
        best = jnp.argmax(values, axis=1)[:, None]
        pick = lambda stacked: jnp.take_along_axis(  # noqa: E731
            jnp.concatenate(stacked, axis=1), best, 1
        )[:, 0]
        return (values.max(1), pick(opts), pick(algs)), None

    zero = jnp.zeros((grid + 1, grid + 1), jnp.float64)
    (gap, opt, alg), _ = jax.lax.scan(back, (zero, zero, zero), (prices, probs), reverse=True)
    return gap[0, 0], opt[0, 0], alg[0, 0]


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
