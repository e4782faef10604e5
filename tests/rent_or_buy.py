"""A problem brought from outside the package, as a researcher would bring one: rent or buy
(ski rental with fractional buying, the smallest version of the shipped ``ski-rental``),
written against the interface (advonline/problem.py) and registered with
``advonline.problems.register`` (tests/test_run_command.py) or installed as a package
(tests/test_plugins.py).

Skis rent for 1 a day or are bought once for ``buy``; the season lasts ``n`` days, unknown in
advance. A token per day says whether the season goes on (1) or has ended (0; every day after
the first 0 is off season). A policy is a buying curve: by day ``t`` it has bought the fraction
``bought[t]`` (non-decreasing), paying ``buy`` times what it buys and renting the rest. ``OPT =
min(n, buy)``; the payoff is ``OPT / ALG`` (costs: the algorithm maximises it).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from rent_or_buy_file import load  # the policy file needs NumPy only

from advonline.problem import Cases, Certificate, PolicyHead, Problem, setting_from_table
from advonline.ratio import payoff


@dataclasses.dataclass(frozen=True)
class Setting:
    buy: float = 4.0
    rounds: int = 10

    @staticmethod
    def from_config(section: dict) -> Setting:
        return setting_from_table(Setting, section)  # unknown keys, wrong types: one line

    def describe(self) -> dict:
        return {"problem": "rent-or-buy", "buy": self.buy, "rounds": self.rounds}


@struct.dataclass
class Curve:
    bought: jax.Array  # [T] fraction bought by the end of each day
    deterministic: bool = struct.field(pytree_node=False, default=True)


def rollout(setting: Setting, policy: Curve, days: jax.Array, key=None) -> jax.Array:
    """The cost of ``policy`` over one season ``days`` ``[T]`` (1 while it lasts)."""
    season = jnp.cumprod(days)  # 1 until the first day off, then 0
    before = jnp.concatenate([jnp.zeros(1), policy.bought[:-1]])
    bought_today = policy.bought - before
    return jnp.sum(season * (setting.buy * bought_today + (1 - policy.bought)))


def offline_optimum(setting: Setting, days: jax.Array) -> jax.Array:
    return jnp.minimum(jnp.sum(jnp.cumprod(days, axis=-1), axis=-1), setting.buy)


def payoffs(setting: Setting, policy: Curve, days: jax.Array, optimum: jax.Array) -> jax.Array:
    cost = jax.vmap(lambda one: rollout(setting, policy, one))(days)
    return payoff(optimum, cost)  # a cost: OPT / ALG is what the algorithm maximises


@dataclasses.dataclass(frozen=True)
class DayEncoding:
    setting: Setting
    vocabulary: int = 2

    @property
    def length(self) -> int:
        return self.setting.rounds

    def decode(self, tokens):
        return tokens.astype(jnp.result_type(float))

    def random(self, key, count):
        return jax.random.randint(key, (count, self.length), 0, 2)

    def mutate(self, key, tokens):
        where = jax.random.randint(key, (tokens.shape[0], 1), 0, self.length)
        flip = jnp.arange(self.length)[None, :] == where
        return jnp.where(flip, 1 - tokens, tokens)


class BuyingNetwork(nn.Module):
    @nn.compact
    def __call__(self, positions):
        scores = nn.Dense(1)(nn.tanh(nn.Dense(16)(positions[:, None])))[:, 0]
        return jnp.concatenate([scores, self.param("never", nn.initializers.zeros, (1,))])


def policy_head(setting: Setting, config: dict) -> PolicyHead:
    network = BuyingNetwork()
    positions = jnp.linspace(0.0, 1.0, setting.rounds)

    def to_policy(params) -> Curve:
        shares = jax.nn.softmax(network.apply(params, positions))
        return Curve(bought=jnp.minimum(jnp.cumsum(shares[:-1]), 1.0))

    return PolicyHead(module=network, example=(positions,), to_policy=to_policy)


def buy_on(day: int):
    """Buy the whole pair at the start of ``day`` (1-based; past the horizon: never)."""

    def make(setting: Setting) -> Curve:
        return Curve(bought=(jnp.arange(1, setting.rounds + 1) >= day).astype(float))

    return make


def seasons(setting: Setting) -> np.ndarray:
    """Every season length ``0 .. T`` as tokens ``[T + 1, T]``."""
    return (np.arange(setting.rounds)[None, :] < np.arange(setting.rounds + 1)[:, None]).astype(
        np.int32
    )


def certificate(setting: Setting, policy: Curve) -> Certificate:
    """The exact ratio of a curve: the worst season length (every input is one)."""
    tokens = seasons(setting)
    days = tokens.astype(np.float64)
    with jax.enable_x64(True):
        costs = np.asarray([rollout(setting, policy, jnp.asarray(d)) for d in days])
    optimum = np.minimum(days.sum(1), setting.buy)
    ratios = np.where(optimum > 0, costs / np.maximum(optimum, 1e-300), 1.0)
    worst = int(np.argmax(ratios))
    return Certificate(float(ratios[worst]), True, tokens[worst])


def export(setting: Setting, policy: Curve) -> dict:
    return {"setting": setting.describe(), "bought": np.asarray(policy.bought).tolist()}


def paid_by_hand(setting: Setting, policy: Curve, days) -> float:
    """The cost by a loop over the days, for the checks."""
    cost, owned = 0.0, 0.0
    for day, on in enumerate(np.asarray(days)):
        if not on:
            break
        bought = float(policy.bought[day])
        cost, owned = cost + setting.buy * (bought - owned) + 1.0 - bought, bought
    return cost


def optimum_by_hand(setting: Setting, days) -> float:
    """OPT by brute force: rent throughout, or buy on one of the season's days."""
    season = int(np.cumprod(np.asarray(days)).sum())
    return min([float(season)] + [day + setting.buy for day in range(season)])


def reference(setting: Setting) -> tuple[str, float]:
    """The best randomised ratio for a whole-number ``buy`` (Karlin, Manasse, McGeoch and
    Owicki, Algorithmica 1994), reached within ``buy`` days; e / (e - 1) as ``buy`` grows."""
    return "1 / (1 - (1 - 1/buy)^buy)", 1 / (1 - (1 - 1 / setting.buy) ** setting.buy)


PROBLEM = Problem(
    name="rent-or-buy",
    setting=Setting,
    payoffs=payoffs,
    rollout=rollout,
    offline_optimum=offline_optimum,
    encoding=DayEncoding,
    policy_head=policy_head,
    baselines={"break-even": lambda s: buy_on(int(s.buy))(s), "never": buy_on(10**6)},
    certificate=certificate,
    lower_bound=lambda setting: None,
    families=lambda setting: {"seasons": jnp.asarray(seasons(setting))},
    export=export,
    load=load,
    reference=reference,
    cases=Cases(({"buy": 4.0, "rounds": 10},), paid_by_hand, optimum_by_hand),
    objective="pay",
)
