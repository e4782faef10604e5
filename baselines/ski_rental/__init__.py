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

import jax.numpy as jnp
import numpy as np

from advonline.problems.ski_rental.model import BuyingRule, Setting


def karlin_ratio(buy: int) -> float:
    """``1 / (1 - (1 - 1/B)^B)``."""
    return 1.0 / (1.0 - (1.0 - 1.0 / buy) ** buy)


def buy_on(day: int):
    """The deterministic rule that buys on the morning of ``day`` (past the horizon: never)."""

    def make(setting: Setting) -> BuyingRule:
        owned = (np.arange(1, setting.rounds + 1) >= day).astype(np.float64)
        return BuyingRule(owned=jnp.asarray(owned), deterministic=True)

    return make


def break_even(setting: Setting) -> BuyingRule:
    return buy_on(setting.buy)(setting)


def randomised(setting: Setting) -> BuyingRule:
    buy = setting.buy
    days = np.arange(1, buy + 1)
    chances = (1 - 1 / buy) ** (buy - days) / (buy * (1 - (1 - 1 / buy) ** buy))
    on_day = np.zeros(max(setting.rounds, buy))
    on_day[:buy] = chances
    owned = np.minimum(np.cumsum(on_day)[: setting.rounds], 1.0)
    return BuyingRule(owned=jnp.asarray(owned))


BASELINES = {
    "break-even": break_even,
    "randomised": randomised,
    "never": buy_on(10**9),
    "buy-at-once": buy_on(1),
}
