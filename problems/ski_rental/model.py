"""Ski rental: the setting, the buying rule, the one simulator, OPT and the encoding.

Skis rent for 1 a day or are bought once for ``buy``; the season lasts ``n`` days, ``0 <= n <=
rounds``, and nobody knows ``n`` until it ends. An online rule only learns each morning that
the season goes on, so every deterministic rule is "buy on the morning of day ``d``" (or
never), and every randomised rule is a distribution over those days. A :class:`BuyingRule`
holds that distribution as its running sum: ``owned[t]`` is the chance that the skis are
owned on day ``t + 1`` (bought that morning or before). On a season of ``n`` days the rule
pays, in expectation, ``buy`` times what it buys on days 1..n and 1 for every day it does not
own the skis; the offline optimum pays ``min(n, buy)``. The ratio is ``E[cost] / OPT``.

The adversary's whole input is the season's length, one token in ``[0, rounds]``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from advonline.errors import InputError
from advonline.problem import setting_from_table
from advonline.ratio import payoff


class SettingError(InputError):
    """A ski rental setting that cannot be used (one line)."""


#: The longest season (seasons are int32 tokens) and the highest price of the skis (NumPy's
#: int64 holds it beside the seasons' days), in days of rent.
MOST_ROUNDS, MOST_BUY = 2**31 - 1, 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Setting:
    """``buy``: the price of the skis in days of rent (a whole number, so that the classic
    optimum applies); ``rounds``: the longest season, in days."""

    buy: int = 10
    rounds: int = 30

    def __post_init__(self) -> None:
        if not (1 <= self.buy <= MOST_BUY and 1 <= self.rounds <= MOST_ROUNDS):
            raise SettingError(
                f"buy must be a whole number in [1, {MOST_BUY}] (int64) and rounds in "
                f"[1, {MOST_ROUNDS}] (seasons are int32 tokens), got buy={self.buy}, "
                f"rounds={self.rounds}"
            )

    @staticmethod
    def from_config(section: dict) -> Setting:
        return setting_from_table(Setting, section, SettingError)

    def describe(self) -> dict:
        return {"problem": "ski-rental", "buy": self.buy, "rounds": self.rounds}


@struct.dataclass
class BuyingRule:
    """A (randomised) buying rule: ``owned[t]`` ``[T]`` is the chance the skis are owned on day
    ``t + 1``, non-decreasing in ``[0, 1]``; ``1 - owned[-1]`` is the chance it never buys.
    ``deterministic``: every ``owned[t]`` is 0 or 1."""

    owned: jax.Array  # [T]
    deterministic: bool = struct.field(pytree_node=False, default=False)


def rollout(setting: Setting, rule: BuyingRule, season: jax.Array, key=None) -> jax.Array:
    """The one simulator: the expected cost of ``rule`` on a season of ``season`` days (an
    integer ``[]``). Buying is linear in the rule's distribution, so the expectation is exact
    and nothing is drawn (``key`` is unused)."""
    owned = rule.owned
    bought_today = owned - jnp.concatenate([jnp.zeros(1, owned.dtype), owned[:-1]])
    skiing = jnp.arange(setting.rounds) < season
    return jnp.sum(jnp.where(skiing, float(setting.buy) * bought_today + 1.0 - owned, 0.0))


def offline_optimum(setting: Setting, seasons: jax.Array) -> jax.Array:
    """OPT ``[B]``: rent through a short season, buy on day 1 for one of ``buy`` days or more."""
    dtype = jnp.result_type(float)  # buy as a float: it may be past the tokens' int32
    return jnp.minimum(seasons.astype(dtype), jnp.asarray(setting.buy, dtype))


def payoffs(setting: Setting, rule: BuyingRule, seasons: jax.Array, optimum: jax.Array):
    """``OPT / E[cost]`` ``[B]`` on each season (1 for a season of no days)."""
    cost = jax.vmap(lambda season: rollout(setting, rule, season))(seasons)
    return payoff(optimum, cost)


@dataclasses.dataclass(frozen=True)
class SeasonEncoding:
    """An input is one token: the season's length in days, ``0 .. rounds``."""

    setting: Setting
    length: int = 1

    @property
    def vocabulary(self) -> int:
        return self.setting.rounds + 1

    def decode(self, tokens: jax.Array) -> jax.Array:
        """The season lengths ``[B]`` of ``tokens`` ``[B, 1]``."""
        return tokens[:, 0]

    def random(self, key: jax.Array, count: int) -> jax.Array:
        """Seasons of 1 .. rounds days, uniform."""
        return jax.random.randint(key, (count, 1), 1, self.vocabulary, jnp.int32)

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        """A season one or two days longer or shorter, within 1 .. rounds."""
        steps = jnp.asarray([-2, -1, 1, 2], jnp.int32)
        step = steps[jax.random.randint(key, tokens.shape, 0, 4)]
        return jnp.clip(tokens + step, 1, self.setting.rounds).astype(jnp.int32)


def every_season(setting: Setting):
    """Every season of 1 .. rounds days as tokens ``[rounds, 1]``."""
    return jnp.arange(1, setting.rounds + 1, dtype=jnp.int32)[:, None]
