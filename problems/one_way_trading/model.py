"""One-way trading (El-Yaniv, Fiat, Karp and Turpin, Algorithmica 2001): setting, policy,
simulator, offline optimum and the token encoding the adversary writes.

A trader holds one unit of an asset and converts it over ``T`` rounds. In round ``t`` an
exchange rate ``p_t`` in ``[m, M]`` arrives and the trader converts a fraction ``x_t`` of the
unit (at most what it still holds) at that rate. Whatever is left after the last round
converts at ``m``. ``ALG = sum_t p_t x_t + m (1 - sum_t x_t)`` and ``OPT = max_t p_t``.

The adversary may post any rate in ``[m, M]``. A policy answers every observation (rate, what
it has converted, round) with the fraction of the unit it wants converted once this round is
over (its *target*); the simulator converts ``clip(target - converted, 0, 1 - converted)``. A
round-hidden policy whose target depends on the rate alone and never falls as the rate rises
is a *conversion curve* ``g``: it converts up to ``g(p)`` at rate ``p``. Every classic
algorithm here is one, and so is the learned policy; a randomised reservation rate ``R``
converts, in expectation, exactly like the curve ``g(p) = P(R <= p)``.

Curves are given on a grid of ``levels`` rates geometric in ``[m, M]``, both ends included,
and are linear in the rate between grid rates: a continuous curve, so no rate just below a
grid rate can exploit a step, and the certificate (:mod:`problems.one_way_trading.exact`)
holds for every real rate. The adversary writes tokens
over the grid rates and the geometric midpoint between each two neighbours
(:attr:`Setting.token_rates`), so a walk up through the tokens follows a curve's segments
twice as finely as its grid.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline import ratio
from advonline.errors import InputError
from advonline.problem import setting_from_table

#: The widest range of rates, ``M / m``, a setting may span. Every figure depends on the
#: ratio alone (the exact LPs are scale-free); up to here the certificates and the measured
#: worst cases agree, and beyond it the certificate's induction divides by revenues that
#: round to zero in float64.
MOST_THETA = 1e15
#: Where the rates themselves may lie: well inside float32's normal numbers, in which the
#: simulator holds them to about 7 digits at every scale.
RATE_RANGE = (1e-30, 1e30)


class SettingError(InputError):
    """A setting that does not describe a valid one-way trading problem."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """Static description of a one-way trading problem; hashable (a jit static argument)."""

    low: float = 1.0  # m, the lowest rate (and what the rest converts at in the end)
    high: float = 10.0  # M, the highest rate
    rounds: int = 64  # T, rates per instance
    levels: int = 64  # G, rates on the grid

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.low) and self.low > 0):
            problems.append(f"low rate m must be a positive finite number, got {self.low}")
        elif not (math.isfinite(self.high) and self.high > self.low):
            problems.append(
                f"high rate M must be finite and above m, got m={self.low}, M={self.high}"
            )
        elif self.high / self.low > MOST_THETA:
            problems.append(
                f"high / low must be at most {MOST_THETA:g}, got m={self.low}, M={self.high}"
            )
        elif not RATE_RANGE[0] <= self.low < self.high <= RATE_RANGE[1]:
            problems.append(
                f"rates must lie in [{RATE_RANGE[0]:g}, {RATE_RANGE[1]:g}], got m={self.low}, "
                f"M={self.high}"
            )
        if self.rounds < 1:
            problems.append(f"rounds must be >= 1, got {self.rounds}")
        if self.levels < 2:
            problems.append(f"levels must be >= 2, got {self.levels}")
        if problems:
            raise SettingError("; ".join(problems))

    @staticmethod
    def from_config(section: dict) -> Setting:
        """The setting a config's ``[setting]`` table describes."""
        return setting_from_table(Setting, section, SettingError)

    @property
    def theta(self) -> float:
        """M / m."""
        return self.high / self.low

    @property
    def rates(self) -> tuple[float, ...]:
        """The grid: ``levels`` rates geometric in [m, M], both ends exact (float64)."""
        step = self.theta ** (1.0 / (self.levels - 1))
        grid = [self.low * step**j for j in range(self.levels)]
        grid[-1] = self.high
        return tuple(grid)

    @property
    def token_rates(self) -> tuple[float, ...]:
        """The ``2 G - 1`` rates the adversary writes, rising: token ``2 j`` is grid rate
        ``r_j``, token ``2 j - 1`` the geometric midpoint ``sqrt(r_(j-1) r_j)``."""
        grid = self.rates
        rates = [grid[0]]
        for below, rate in zip(grid[:-1], grid[1:], strict=True):
            rates += [math.sqrt(below * rate), rate]
        return tuple(rates)

    def describe(self) -> dict:
        """JSON-ready description, printed beside every reported ratio."""
        return {"problem": "one-way-trading", **dataclasses.asdict(self)}


@struct.dataclass
class Observation:
    """What a trading policy sees when rate ``p_t`` arrives."""

    rate: jax.Array  # [] p_t
    converted: jax.Array  # [] what it has converted so far, in [0, 1]
    round_fraction: jax.Array  # [] t / T


@struct.dataclass
class CurvePolicy:
    """A conversion curve on the setting's grid: convert up to ``fractions[j]`` at rate
    ``rates[j]`` (``fractions`` non-decreasing in ``[0, 1]``), linearly in the rate between
    grid rates; a rate outside ``[m, M]`` reads as the nearest end."""

    fractions: jax.Array  # [G]
    rates: tuple[float, ...] = struct.field(pytree_node=False)
    deterministic: bool = struct.field(pytree_node=False, default=True)

    def __call__(self, observation: Observation) -> jax.Array:
        grid = jnp.asarray(self.rates, observation.rate.dtype)
        return jnp.interp(observation.rate, grid, self.fractions.astype(grid.dtype))


class Rollout(NamedTuple):
    """What one run of a policy on one instance produced."""

    conversions: jax.Array  # [T] x_t
    revenue: jax.Array  # [] ALG: sum_t p_t x_t + m (1 - sum_t x_t)


def rollout(setting: Setting, policy, rates: jax.Array, key: jax.Array | None = None) -> Rollout:
    """The one simulator: ``policy`` trades through ``rates`` ``[T]``. Deterministic, so
    ``key`` is unused; differentiable in the policy's parameters (``lax.scan``)."""
    del key
    rounds = rates.shape[0]

    def trade(converted, inputs):
        index, rate = inputs
        observation = Observation(rate=rate, converted=converted, round_fraction=index / rounds)
        target = policy(observation)
        amount = jnp.clip(target - converted, 0.0, 1.0 - converted)
        return converted + amount, amount

    start = jnp.zeros((), rates.dtype)
    converted, amounts = jax.lax.scan(trade, start, (jnp.arange(rounds), rates))
    revenue = jnp.dot(rates, amounts) + setting.low * (1.0 - converted)
    return Rollout(conversions=amounts, revenue=revenue)


def offline_optimum(setting: Setting, rates: jax.Array) -> jax.Array:
    """OPT of each instance ``[B, T]`` -> ``[B]``: convert everything at the best rate."""
    return jnp.maximum(jnp.max(rates, axis=-1), setting.low)


def payoffs(setting: Setting, policy, rates: jax.Array, optimum: jax.Array) -> jax.Array:
    """``ALG / OPT`` of ``policy`` on each instance ``[B, T]``, given OPT ``[B]`` -> ``[B]``
    (jit-able)."""
    revenue = jax.vmap(lambda one: rollout(setting, policy, one).revenue)(rates)
    return ratio.payoff(revenue, optimum)


@dataclasses.dataclass(frozen=True)
class RateEncoding:
    """What the adversary writes: instances as sequences of rate tokens ``[B, T]`` (int32;
    :attr:`Setting.token_rates`)."""

    setting: Setting

    @property
    def vocabulary(self) -> int:
        return 2 * self.setting.levels - 1

    @property
    def length(self) -> int:
        return self.setting.rounds

    def decode(self, tokens: jax.Array) -> jax.Array:
        """The rates ``[B, T]`` the tokens stand for (JAX's default float)."""
        return jnp.asarray(self.setting.token_rates, jnp.result_type(float))[tokens]

    def random(self, key: jax.Array, count: int) -> jax.Array:
        """Random sequences: half of them i.i.d. uniform indices, half random walks."""
        uniform_key, step_key = jax.random.split(key)
        shape = (count, self.length)
        uniform = jax.random.randint(uniform_key, shape, 0, self.vocabulary)
        steps = jax.random.randint(step_key, shape, -1, 3)
        walks = jnp.clip(jnp.cumsum(steps, axis=1), 0, self.vocabulary - 1)
        return jnp.where(jnp.arange(count)[:, None] % 2 == 0, uniform, walks).astype(jnp.int32)

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        """Per sequence, one of: a position set to a random index; a position set to its
        predecessor's index plus -1, 0, 1 or 2 (grows and trims rising runs); the sequence
        shifted one round left or right (room at the start or the end)."""
        count, length = tokens.shape
        kind_key, where_key, level_key, step_key = jax.random.split(key, 4)
        kind = jax.random.randint(kind_key, (count, 1), 0, 4)
        where = jax.random.randint(where_key, (count, 1), 0, length)
        level = jax.random.randint(level_key, (count, 1), 0, self.vocabulary)
        step = jax.random.randint(step_key, (count, 1), -1, 3)
        before = jnp.take_along_axis(tokens, jnp.clip(where - 1, 0), axis=1)
        follow = jnp.clip(before + step, 0, self.vocabulary - 1)
        position = jnp.arange(length)[None, :] == where
        changed = jnp.where(kind == 0, level, follow)
        set_one = jnp.where(position, changed, tokens)
        left = jnp.concatenate([tokens[:, 1:], tokens[:, -1:]], axis=1)
        right = jnp.concatenate([tokens[:, :1], tokens[:, :-1]], axis=1)
        shifted = jnp.where(kind == 2, left, right)
        return jnp.where(kind < 2, set_one, shifted).astype(tokens.dtype)


def rise_and_drop(setting: Setting) -> jax.Array:
    """The held-out family: rates rise through the tokens to token ``k``, then drop to ``m``
    for the remaining rounds; one member per token -> tokens ``[2 G - 1, T]``. With fewer
    rounds than the rise needs it takes evenly spaced tokens."""
    tokens = np.zeros((len(setting.token_rates), setting.rounds), np.int32)
    for stop in range(len(tokens)):
        rise = walk_levels(stop + 1, setting.rounds)
        tokens[stop, : len(rise)] = rise
    return jnp.asarray(tokens)


def walk_levels(levels: int, rounds: int) -> list[int]:
    """The levels ``0 .. levels - 1`` in rising order, at most ``rounds`` of them (evenly
    spaced, both ends kept, when they do not all fit)."""
    if levels <= rounds:
        return list(range(levels))
    if rounds == 1:
        return [levels - 1]
    return sorted({round(i * (levels - 1) / (rounds - 1)) for i in range(rounds)})
