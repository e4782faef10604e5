"""Classic ski rental rules, each ``make(setting) -> BuyingRule`` (the learned rule's
signature). With ``B = buy``:

- ``break-even``: rent ``B - 1`` days, buy on the morning of day ``B``; ratio ``2 - 1/B``, the
  best of any deterministic rule.
- ``randomised``: Karlin, Manasse, McGeoch and Owicki's rule (Algorithmica 1994): buy on the
  morning of day ``d = 1 .. B`` with chance ``(1 - 1/B)^(B - d) / (B (1 - (1 - 1/B)^B))``;
  ratio ``1 / (1 - (1 - 1/B)^B)`` (e / (e - 1) as B grows), the best of any rule.
- ``never``: rent every day; ratio ``rounds / B`` over seasons up to ``rounds`` days.
- ``buy-at-once``: buy on day 1; ratio ``B``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from advonline.problems.ski_rental.model import BuyingRule, Setting


def karlin_ratio(buy: int) -> float:
    """``1 / (1 - (1 - 1/B)^B)``, through ``log1p`` and ``expm1`` (exact to rounding for any
    ``B``, where ``1 - 1/B`` itself rounds to 1 past 2^53)."""
    return 1.0 if buy == 1 else 1.0 / -math.expm1(buy * math.log1p(-1.0 / buy))


def buy_on(day: int):
    """The deterministic rule that buys on the morning of ``day`` (past the horizon: never)."""

    def make(setting: Setting) -> BuyingRule:
        owned = (np.arange(1, setting.rounds + 1) >= day).astype(np.float64)
        return BuyingRule(owned=jnp.asarray(owned), deterministic=True)

    return make


def break_even(setting: Setting) -> BuyingRule:
    return buy_on(setting.buy)(setting)


def randomised(setting: Setting) -> BuyingRule:
    """Its chance of owning the skis by day ``d``, the sum of its buying chances over days
    1 .. d: ``(1 - 1/B)^(B - d) (1 - (1 - 1/B)^d) / (1 - (1 - 1/B)^B)`` (1 from day ``B`` on),
    for the season's days only and to rounding for any ``B`` (``log1p``, ``expm1``)."""
    buy = setting.buy
    days = np.arange(1, setting.rounds + 1, dtype=np.float64)
    if buy == 1:
        owned = np.ones_like(days)
    else:
        step = math.log1p(-1.0 / buy)  # log(1 - 1/B)
        waited = np.exp(np.maximum(buy - days, 0.0) * step)
        owned = waited * -np.expm1(days * step) / -math.expm1(buy * step)
    return BuyingRule(owned=jnp.asarray(np.minimum(owned, 1.0)))


BASELINES = {
    "break-even": break_even,
    "randomised": randomised,
    "never": buy_on(10**9),
    "buy-at-once": buy_on(1),
}
