"""Online budgeted allocation (AdWords with small bids): setting, policy interface, simulator,
offline optimum and the token encoding the adversary writes.

``n`` advertisers each have a budget of 1. ``T`` queries arrive one at a time; query ``t``
brings a bid ``b_t`` in ``(0, b_max]`` from each advertiser in its set ``S_t`` (the bid depends
on the query, not on the advertiser: *query-uniform bids*) and is allocated at once. Giving
advertiser ``i`` a share ``x_i`` of the query earns ``b_t x_i``, capped by what is left of its
budget. ``ALG`` is the total earned. With ``allocation = "fractional"`` a query may be split;
with ``"integral"`` it goes whole to one advertiser: the simulator gives it to the advertiser
of the largest share the rule names (ties: lowest index), and passes the gradient of the
shares through that choice (a straight-through estimator), so one rule and one update serve
both.

**The offline optimum is a maximum flow.** Writing ``y_ti = b_t x_ti``, the optimum allocation
sends at most ``b_t`` from query ``t`` to the advertisers in ``S_t``, at most 1 into each
advertiser: a flow from a source through the queries to a sink. By max-flow = min-cut,

    ``OPT = min over advertiser sets X of ( |X| + sum of b_t over queries with S_t not in X )``,

which :func:`offline_optimum` evaluates exactly over all ``2^n`` sets (``n <= 12``), in ``jit``.
For integral allocation the setting has one bid level and a budget of a whole number of bids,
so the flow's capacities are whole numbers of bids and an integral flow attains the optimum:
the same formula is the integral optimum.

Bids live on ``bid_levels`` levels ``b_max l / L`` (``l = 1 .. L``); the adversary writes one
token per query, ``(level - 1) 2^n + mask`` with ``mask``'s bit ``i`` set when advertiser ``i``
bids (mask 0: a query nobody bids on).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from advonline.errors import InputError
from advonline.problem import setting_from_table

#: The most advertisers the exact optimum enumerates (``2^n`` advertiser sets).
MOST_ADVERTISERS = 12
ALLOCATIONS = ("fractional", "integral")


def _whole(value: float) -> bool:
    return abs(value - round(value)) <= 1e-9 * value


class SettingError(InputError):
    """A setting that does not describe a valid budgeted allocation problem."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """Static description of a budgeted allocation problem; hashable (a jit static argument)."""

    advertisers: int = 10  # n, each with a budget of 1
    queries: int = 100  # T
    max_bid: float = 0.1  # b_max, as a fraction of a budget
    bid_levels: int = 1  # L: bids b_max l / L, l = 1 .. L
    allocation: str = "fractional"  # or "integral": each query whole to one advertiser

    def __post_init__(self) -> None:
        problems = []
        if not 2 <= self.advertisers <= MOST_ADVERTISERS:
            problems.append(
                f"advertisers must be 2 .. {MOST_ADVERTISERS} (the optimum enumerates 2^n "
                f"advertiser sets), got {self.advertisers}"
            )
        if self.queries < 1:
            problems.append(f"queries must be >= 1, got {self.queries}")
        if not (math.isfinite(self.max_bid) and 0 < self.max_bid <= 1):
            problems.append(f"max_bid must be in (0, 1], got {self.max_bid}")
        if self.bid_levels < 1 or (self.bid_levels << self.advertisers) > 2**31 - 1:
            problems.append(f"bid_levels must be >= 1 with L 2^n < 2^31, got {self.bid_levels}")
        if self.allocation not in ALLOCATIONS:
            problems.append(f"allocation must be one of {ALLOCATIONS}, got {self.allocation!r}")
        whole = math.isfinite(self.max_bid) and self.max_bid > 0 and _whole(1 / self.max_bid)
        if self.allocation == "integral" and not (self.bid_levels == 1 and whole):
            problems.append(
                "integral allocation needs bid_levels = 1 and a budget of a whole number of bids "
                "(1 / max_bid a whole number), where the optimum is exact"
            )
        if problems:
            raise SettingError("; ".join(problems))

    @staticmethod
    def from_config(section: dict) -> Setting:
        """The setting a config's ``[setting]`` table describes."""
        return setting_from_table(Setting, section, SettingError)

    @property
    def bids(self) -> tuple[float, ...]:
        """The bid of each level, lowest first."""
        levels = range(1, 1 + self.bid_levels)
        return tuple(self.max_bid * level / self.bid_levels for level in levels)

    def describe(self) -> dict:
        """JSON-ready description, printed beside every reported ratio."""
        return {
            "problem": "adwords",
            "advertisers": self.advertisers,
            "queries": self.queries,
            "max_bid": self.max_bid,
            "bid_levels": self.bid_levels,
            "allocation": self.allocation,
        }


@struct.dataclass
class Queries:
    """Instances (batched or one): each query's bid ``[.., T]`` and who bids ``[.., T]``."""

    bids: jax.Array  # b_t
    masks: jax.Array  # int32, bit i set: advertiser i bids b_t


@struct.dataclass
class Observation:
    """What an allocation rule sees when a query arrives."""

    bids: jax.Array  # [n] each advertiser's bid on the query (0: it does not bid)
    spent: jax.Array  # [n] the fraction of each budget spent so far
    round_fraction: jax.Array  # [] t / T


class Rollout(NamedTuple):
    """What one run of a rule on one instance produced."""

    earned: jax.Array  # [T, n] what each advertiser earned from each query
    revenue: jax.Array  # [] ALG


def member_bits(masks: jax.Array, advertisers: int) -> jax.Array:
    """The masks' bits ``[..., n]`` (bool): whether each advertiser bids."""
    bits = jnp.arange(advertisers).reshape((1,) * masks.ndim + (advertisers,))
    return (masks[..., None] >> bits) & 1 == 1


def whole_query(shares: jax.Array) -> jax.Array:
    """The whole query to the advertiser of the largest share (ties: lowest index; nothing
    where every share is 0), with the shares' gradient (straight-through)."""
    chosen = jax.nn.one_hot(jnp.argmax(shares), shares.shape[0], dtype=shares.dtype)
    chosen = jnp.where(jnp.max(shares) > 0, chosen, 0.0)
    return shares + jax.lax.stop_gradient(chosen - shares)


def rollout(setting: Setting, policy, instance: Queries, key: jax.Array | None = None) -> Rollout:
    """The one simulator: ``policy`` (``Observation -> shares [n]``, non-negative, summing to
    at most 1) allocates each query of ``instance`` as it arrives (whole, by
    :func:`whole_query`, for integral allocation). Shares given to advertisers that do not bid
    are dropped; earnings are capped by what is left of each budget. Deterministic, so ``key``
    is unused; differentiable in the policy's parameters."""
    del key
    queries = instance.bids.shape[0]
    bidders = member_bits(instance.masks, setting.advertisers)

    def allocate(spent, inputs):
        index, bid, bids_on = inputs
        bids = jnp.where(bids_on, bid, 0.0).astype(spent.dtype)
        observation = Observation(bids=bids, spent=spent, round_fraction=index / queries)
        shares = jnp.where(bids_on, policy(observation), 0.0)
        if setting.allocation == "integral":
            shares = whole_query(shares)
        earned = jnp.clip(bids * shares, 0.0, 1.0 - spent)
        return spent + earned, earned

    start = jnp.zeros(setting.advertisers, instance.bids.dtype)
    _, earned = jax.lax.scan(allocate, start, (jnp.arange(queries), instance.bids, bidders))
    return Rollout(earned=earned, revenue=jnp.sum(earned))


def _advertiser_sets(advertisers: int) -> tuple[np.ndarray, np.ndarray]:
    """Every advertiser set ``X`` as a mask ``[2^n]`` and its size ``[2^n]``."""
    sets = np.arange(1 << advertisers, dtype=np.int32)
    sizes = np.array([bin(s).count("1") for s in range(1 << advertisers)], dtype=np.float64)
    return sets, sizes


def offline_optimum(setting: Setting, instances: Queries) -> jax.Array:
    """OPT of each instance ``[B, T]`` -> ``[B]``: the minimum cut over advertiser sets (module
    docstring); exact."""
    sets, sizes = _advertiser_sets(setting.advertisers)
    outside = (instances.masks[..., None] & ~jnp.asarray(sets)[None, None]) != 0  # [B, T, 2^n]
    unmet = jnp.einsum("bt,bts->bs", instances.bids, outside.astype(instances.bids.dtype))
    return jnp.min(unmet + jnp.asarray(sizes, instances.bids.dtype)[None], axis=-1)


def payoffs(setting: Setting, policy, instances: Queries) -> jax.Array:
    """``ALG / OPT`` of ``policy`` on each instance -> ``[B]`` (jit-able); 1 where OPT is 0."""
    revenue = jax.vmap(lambda one: rollout(setting, policy, one).revenue)(instances)
    optimum = offline_optimum(setting, instances)
    return jnp.where(optimum > 0, revenue / jnp.where(optimum > 0, optimum, 1.0), 1.0)


@dataclasses.dataclass(frozen=True)
class QueryEncoding:
    """Instances as one token per query ``[B, T]`` (int32): ``(level - 1) 2^n + mask``."""

    setting: Setting

    @property
    def vocabulary(self) -> int:
        return self.setting.bid_levels << self.setting.advertisers

    @property
    def length(self) -> int:
        return self.setting.queries

    def decode(self, tokens: jax.Array) -> Queries:
        """The queries the tokens stand for (bids in JAX's default float)."""
        bids = jnp.asarray(self.setting.bids, jnp.result_type(float))
        return Queries(bids=bids[tokens >> self.setting.advertisers], masks=tokens & self._all)

    @property
    def _all(self) -> int:
        return (1 << self.setting.advertisers) - 1

    def tokens(self, levels, masks) -> np.ndarray:
        """The tokens of bid levels (0-based) and masks, NumPy int32."""
        return (np.asarray(levels) << self.setting.advertisers | np.asarray(masks)).astype(np.int32)

    def random(self, key: jax.Array, count: int) -> jax.Array:
        """Random instances: each has its own chance that an advertiser bids on a query
        (uniform in [0.1, 0.9]), and each query a uniform bid level."""
        density_key, bit_key, level_key = jax.random.split(key, 3)
        n = self.setting.advertisers
        density = jax.random.uniform(density_key, (count, 1, 1), minval=0.1, maxval=0.9)
        bits = jax.random.uniform(bit_key, (count, self.length, n)) < density
        masks = jnp.sum(bits.astype(jnp.int32) << jnp.arange(n)[None, None], axis=-1)
        levels = jax.random.randint(level_key, (count, self.length), 0, self.setting.bid_levels)
        return (levels << n | masks).astype(jnp.int32)

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        """Per sequence, one of: one advertiser's bid on a query switched on or off; a query's
        bid level redrawn; a query copied from its predecessor; the sequence shifted one query
        left or right (room at the start or the end); one advertiser's bids switched off, or
        on, from a query to the end (it leaves or joins the market)."""
        count, length = tokens.shape
        n = self.setting.advertisers
        kind_key, where_key, bit_key, level_key = jax.random.split(key, 4)
        kind = jax.random.randint(kind_key, (count, 1), 0, 7)
        where = jax.random.randint(where_key, (count, 1), 0, length)
        bit = jax.random.randint(bit_key, (count, 1), 0, n)
        level = jax.random.randint(level_key, (count, 1), 0, self.setting.bid_levels)
        current = jnp.take_along_axis(tokens, where, axis=1)
        before = jnp.take_along_axis(tokens, jnp.clip(where - 1, 0), axis=1)
        flipped = current ^ (1 << bit)
        relevelled = (level << n) | (current & self._all)
        changed = jnp.select([kind == 0, kind == 1], [flipped, relevelled], before)
        set_one = jnp.where(jnp.arange(length)[None, :] == where, changed, tokens)
        left = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
        right = jnp.concatenate([jnp.zeros_like(tokens[:, :1]), tokens[:, :-1]], axis=1)
        shifted = jnp.where(kind == 3, left, right)
        later = jnp.arange(length)[None, :] >= where
        leaves = jnp.where(later, tokens & ~(1 << bit), tokens)
        joins = jnp.where(later, tokens | (1 << bit), tokens)
        market = jnp.where(kind == 5, leaves, joins)
        moved = jnp.where(kind < 5, shifted, market)
        return jnp.where(kind < 3, set_one, moved).astype(tokens.dtype)


def encoding(setting: Setting) -> QueryEncoding:
    """What the adversary writes for ``setting``."""
    return QueryEncoding(setting)
