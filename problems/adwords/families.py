"""The held-out hard families for budgeted allocation: checks, never training data.

Each is a list of instances written as tokens ``[N, T]`` (queries the family does not need are
left empty: nobody bids). A *group* of queries carries one budget's worth of bids (``1 / b``
queries of bid ``b``), or fewer where ``T`` is short.

- ``upper-triangular``: group ``k`` (``k = 0 .. n-1``) is wanted by advertisers
  ``pi(k), .., pi(n-1)`` for a permutation ``pi``; OPT gives group ``k`` to ``pi(k)`` and
  earns ``n`` budgets. The classic worst case of Balance and of every deterministic rule
  (Karp, Vazirani and Vazirani 1990; Mehta et al. 2007). Members: the identity, its reverse
  and random permutations.
- ``balls-into-bins``: every query is wanted by two advertisers drawn at random, ``n`` budgets
  of bids in all.
- ``equal-bid-blocks``: two blocks of equal bids. The first, at the lowest bid level, is wanted
  by everyone; the second, at the highest, by the first ``m`` advertisers only, one budget
  each. OPT keeps those ``m`` budgets for the second block.
"""

from __future__ import annotations

import numpy as np

from advonline.problems.adwords.model import Setting, encoding

#: Seed of the families' random draws (fixed: the families are the same every time).
FAMILY_SEED = 20071
RANDOM_MEMBERS = 6


def _per_group(setting: Setting, bid: float) -> int:
    return max(1, min(round(1.0 / bid), setting.queries // setting.advertisers))


def from_blocks(setting: Setting, blocks: list[tuple[int, int, int]]) -> np.ndarray:
    """One instance from blocks ``(count, level, mask)``, cut or padded to ``T`` queries."""
    levels = [level for count, level, _ in blocks for _ in range(count)]
    masks = [mask for count, _, mask in blocks for _ in range(count)]
    pad = max(0, setting.queries - len(levels))
    levels, masks = (levels + [0] * pad)[: setting.queries], (masks + [0] * pad)[: setting.queries]
    return encoding(setting).tokens(levels, masks)


def bidder_set(advertisers) -> int:
    """The set of ``advertisers`` as an integer mask (bit ``i``: advertiser ``i``)."""
    return sum(1 << int(i) for i in advertisers)


def upper_triangular(setting: Setting) -> np.ndarray:
    n, top = setting.advertisers, setting.bid_levels - 1
    rng = np.random.default_rng(FAMILY_SEED)
    orders = [np.arange(n), np.arange(n)[::-1]]
    orders += [rng.permutation(n) for _ in range(RANDOM_MEMBERS)]
    count = _per_group(setting, setting.max_bid)
    return np.stack(
        [from_blocks(setting, [(count, top, bidder_set(o[k:])) for k in range(n)]) for o in orders]
    )


def balls_into_bins(setting: Setting) -> np.ndarray:
    n, top = setting.advertisers, setting.bid_levels - 1
    rng = np.random.default_rng(FAMILY_SEED + 1)
    count = min(setting.queries, n * _per_group(setting, setting.max_bid))
    rows = []
    for _ in range(RANDOM_MEMBERS):
        pairs = [rng.choice(n, size=2, replace=False) for _ in range(count)]
        rows.append(from_blocks(setting, [(1, top, bidder_set(pair)) for pair in pairs]))
    return np.stack(rows)


def equal_bid_blocks(setting: Setting) -> np.ndarray:
    n, top = setting.advertisers, setting.bid_levels - 1
    low_bid = setting.bids[0]
    rows = []
    for kept in range(1, n):
        first = (n - kept) * _per_group(setting, low_bid)
        second = kept * _per_group(setting, setting.max_bid)
        blocks = [(first, 0, bidder_set(range(n))), (second, top, bidder_set(range(kept)))]
        rows.append(from_blocks(setting, blocks))
    return np.stack(rows)


def families(setting: Setting) -> dict[str, np.ndarray]:
    """The held-out families of ``setting``: ``{name: tokens [N, T]}``."""
    return {
        "upper-triangular": upper_triangular(setting),
        "balls-into-bins": balls_into_bins(setting),
        "equal-bid-blocks": equal_bid_blocks(setting),
    }
