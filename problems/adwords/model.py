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

which :func:`offline_optimum` evaluates exactly over all ``2^n`` sets for ``n <= 12``, in
``jit``. With more advertisers it solves the maximum flow itself, exactly, on the host, with
every capacity scaled to a whole number (:mod:`.flow`; equal to HiGHS's LP to 1e-9, tested),
where a feasible flow and a cut found in ``jit`` do not already meet.
Only where the bids do not scale to whole numbers (``b_max / L`` no ratio of small whole
numbers) does it fall back to proportional allocation (each query split among its bidders in
proportion to weights that fall where an advertiser is over its budget and rise where it is
under; Agrawal, Zadimoghaddam and Mirrokni, ICML 2018), keeping the best feasible flow it
passes through, the weights' greedy orders included (:func:`proportional_flow`): never above
the optimum, so every ratio it gives is one a real input attains; against HiGHS it is exact on
upper-triangular instances of 50 advertisers, and within a relative 1e-4 on perturbed ones and
5e-4 on balls into bins (tested). There the evaluator scores its hardest finds again against
HiGHS (``Problem.exact_optimum``).

For integral allocation the setting has one bid level and a budget of a whole number of bids,
so the flow's capacities are whole numbers of bids and an integral flow attains the optimum:
the same formula is the integral optimum.

Bids live on ``bid_levels`` levels ``b_max l / L`` (``l = 1 .. L``). The adversary writes each
query as ``W = ceil(n / 16)`` tokens (words): word ``w`` has bit ``i`` set when advertiser
``16 w + i`` bids, and the first word also carries the level above its bits,
``(level - 1) 2^(n_0) + mask_0`` with ``n_0 = min(n, 16)`` (mask 0: a query nobody bids on).
Up to 16 advertisers that is one token per query.
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
from advonline.problems.adwords import flow

#: The most advertisers the exact optimum enumerates (``2^n`` advertiser sets); above it,
#: the maximum flow on the host (:mod:`.flow`), or proportional allocation.
EXACT_ADVERTISERS = 12
#: The most advertisers a setting accepts (the learned rule and the flow scale with ``n``).
MOST_ADVERTISERS = 64
#: Advertisers per token of the encoding.
WORD_BITS = 16
#: Rounds of proportional allocation in the optimum above ``EXACT_ADVERTISERS``, and how
#: often the greedy passes run.
FLOW_ROUNDS = 200
GREEDY_EVERY = 20
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
            problems.append(f"advertisers must be 2 .. {MOST_ADVERTISERS}, got {self.advertisers}")
        if self.queries < 1:
            problems.append(f"queries must be >= 1, got {self.queries}")
        if not (math.isfinite(self.max_bid) and 0 < self.max_bid <= 1):
            problems.append(f"max_bid must be in (0, 1], got {self.max_bid}")
        first_word = min(max(self.advertisers, 0), WORD_BITS)  # a bad count is named above
        if self.bid_levels < 1 or (self.bid_levels << first_word) > 2**31 - 1:
            problems.append(
                f"bid_levels must be >= 1 with L 2^min(n, 16) < 2^31, got {self.bid_levels}"
            )
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
    """Instances (batched or one): each query's bid ``[.., T]`` and who bids ``[.., T, n]``."""

    bids: jax.Array  # b_t
    bidders: jax.Array  # bool: advertiser i bids b_t on query t


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


def _bits(words: jax.Array, count: int) -> jax.Array:
    """The low ``count`` bits of each word ``[...]`` -> ``[..., count]`` (bool)."""
    positions = jnp.arange(count).reshape((1,) * words.ndim + (count,))
    return (words[..., None] >> positions) & 1 == 1


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
    inputs = (jnp.arange(queries), instance.bids, instance.bidders)
    _, earned = jax.lax.scan(allocate, start, inputs)
    return Rollout(earned=earned, revenue=jnp.sum(earned))


def _advertiser_sets(advertisers: int) -> tuple[np.ndarray, np.ndarray]:
    """Every advertiser set ``X`` as a mask ``[2^n]`` and its size ``[2^n]``."""
    sets = np.arange(1 << advertisers, dtype=np.int32)
    sizes = np.array([bin(s).count("1") for s in range(1 << advertisers)], dtype=np.float64)
    return sets, sizes


def optimum_is_exact(setting: Setting) -> bool:
    """Whether :func:`offline_optimum` is OPT itself in ``setting``: the minimum cut (up to
    ``EXACT_ADVERTISERS``) or the maximum flow of bids that scale to whole numbers; else it is
    proportional allocation's best flow, a lower bound."""
    small = setting.advertisers <= EXACT_ADVERTISERS
    return small or flow.capacity_scale(setting) is not None


def offline_optimum(setting: Setting, instances: Queries) -> jax.Array:
    """OPT of each instance ``[B, T]`` -> ``[B]``: the minimum cut over advertiser sets, exact,
    up to ``EXACT_ADVERTISERS``; above, the maximum flow on the host, exact, where the bids
    scale to whole numbers (:mod:`.flow`), else the best flow of proportional allocation,
    feasible (module docstring; :func:`optimum_is_exact` says which)."""
    if not optimum_is_exact(setting):
        return proportional_flow(instances.bids, instances.bidders, FLOW_ROUNDS)
    if setting.advertisers > EXACT_ADVERTISERS:
        scale, passes = flow.capacity_scale(setting), flow.greedy_passes(setting)
        return flow.exact_flow(instances.bids, instances.bidders, scale, passes)
    sets, sizes = _advertiser_sets(setting.advertisers)
    weights = jnp.asarray(1 << np.arange(setting.advertisers), jnp.int32)
    masks = jnp.sum(jnp.where(instances.bidders, weights[None, None], 0), axis=-1)
    outside = (masks[..., None] & ~jnp.asarray(sets)[None, None]) != 0  # [B, T, 2^n]
    unmet = jnp.einsum("bt,bts->bs", instances.bids, outside.astype(instances.bids.dtype))
    return jnp.min(unmet + jnp.asarray(sizes, instances.bids.dtype)[None], axis=-1)


def proportional_flow(bids: jax.Array, bidders: jax.Array, rounds: int) -> jax.Array:
    """A feasible flow's value ``[B]`` for queries ``bids [B, T]`` wanted by ``bidders
    [B, T, n]``, never above the maximum. ``rounds`` of proportional allocation: each splits
    every query among its bidders in proportion to weights, then scales each advertiser's
    weight by ``1 / its intake`` (towards a budget's worth). The best of these flows is kept:
    each round's split with over-full advertisers' intake scaled down to 1, and every
    ``GREEDY_EVERY`` rounds two greedy passes that fill each query's bidders in the order of
    the weights, highest first (the queries in order, and in reverse order). The weights find
    who must be kept for later, which is what the split alone is slow to settle on nested
    bidder sets."""
    wanted = bidders.astype(bids.dtype)
    batch, _, advertisers = bidders.shape

    def split(log_weights):  # [B, n] -> the flow [B, T, n]
        weights = jnp.exp(log_weights - jnp.max(log_weights, axis=-1, keepdims=True))
        shares = wanted * weights[:, None, :]
        total = jnp.sum(shares, axis=-1, keepdims=True)
        return bids[..., None] * shares / jnp.where(total > 0, total, 1.0)

    def proportional(carry, _):
        log_weights, best = carry
        intake = jnp.sum(split(log_weights), axis=1)  # [B, n]
        best = jnp.maximum(best, jnp.sum(jnp.minimum(intake, 1.0), axis=-1))
        log_weights = log_weights - jnp.log(jnp.where(intake > 0, intake, 1.0))
        return (jnp.clip(log_weights, -60.0, 60.0), best), None

    def checkpoint(carry, _):
        carry, _ = jax.lax.scan(proportional, carry, None, length=GREEDY_EVERY)
        log_weights, best = carry
        order = jnp.argsort(-log_weights, axis=-1)
        ranked = jnp.take_along_axis(bidders, order[:, None, :], axis=-1)
        forward = _greedy_flow(bids, ranked)
        backward = _greedy_flow(bids[:, ::-1], ranked[:, ::-1])
        return (log_weights, jnp.maximum(best, jnp.maximum(forward, backward))), None

    start = (jnp.zeros((batch, advertisers), bids.dtype), jnp.zeros((batch,), bids.dtype))
    (_, best), _ = jax.lax.scan(checkpoint, start, None, length=rounds // GREEDY_EVERY)
    return best


def _greedy_flow(bids: jax.Array, ranked: jax.Array) -> jax.Array:
    """What a pass over the queries earns ``[B]`` that fills each query's bidders ``ranked``
    ``[B, T, n]`` (advertisers in priority order) first to last, each up to its budget."""

    def fill(room, inputs):
        bid, bidding = inputs  # [B], [B, n]
        open_room = jnp.where(bidding, room, 0.0)
        before = jnp.cumsum(open_room, axis=-1) - open_room
        given = jnp.clip(bid[:, None] - before, 0.0, open_room)
        return room - given, jnp.sum(given, axis=-1)

    room = jnp.ones((ranked.shape[0], ranked.shape[2]), bids.dtype)
    _, earned = jax.lax.scan(fill, room, (bids.T, jnp.moveaxis(ranked, 1, 0)))
    return jnp.sum(earned, axis=0)


def payoffs(setting: Setting, policy, instances: Queries, optimum: jax.Array) -> jax.Array:
    """``ALG / OPT`` of ``policy`` on each instance, given OPT ``[B]`` -> ``[B]`` (jit-able)."""
    revenue = jax.vmap(lambda one: rollout(setting, policy, one).revenue)(instances)
    return ratio.payoff(revenue, optimum)


@dataclasses.dataclass(frozen=True)
class QueryEncoding:
    """Instances as ``W`` tokens per query ``[B, T W]`` (int32; module docstring)."""

    setting: Setting

    @property
    def words(self) -> int:
        """``W``: tokens per query."""
        return -(-self.setting.advertisers // WORD_BITS)

    @property
    def _sizes(self) -> tuple[int, ...]:
        """How many advertisers each word holds."""
        n = self.setting.advertisers
        return tuple(min(WORD_BITS, n - WORD_BITS * word) for word in range(self.words))

    @property
    def vocabulary(self) -> int:
        return self.setting.bid_levels << self._sizes[0]

    @property
    def length(self) -> int:
        return self.setting.queries * self.words

    def decode(self, tokens: jax.Array) -> Queries:
        """The queries the tokens stand for (bids in JAX's default float)."""
        words = tokens.reshape(tokens.shape[:-1] + (self.setting.queries, self.words))
        bids = jnp.asarray(self.setting.bids, jnp.result_type(float))
        bidders = [_bits(words[..., w], size) for w, size in enumerate(self._sizes)]
        return Queries(
            bids=bids[words[..., 0] >> self._sizes[0]], bidders=jnp.concatenate(bidders, axis=-1)
        )

    def tokens(self, levels, masks) -> np.ndarray:
        """The tokens ``[..., T W]`` (NumPy int32) of bid levels ``[..., T]`` (0-based) and
        bidder sets ``[..., T]`` (integers of any width: bit ``i`` for advertiser ``i``)."""
        levels = np.asarray(levels, np.int64)
        masks = np.asarray(masks, object)
        words = [
            np.vectorize(
                lambda mask, w=w, size=size: int(mask) >> (WORD_BITS * w) & ((1 << size) - 1),
                otypes=[np.int64],
            )(masks)
            for w, size in enumerate(self._sizes)
        ]
        words[0] = words[0] | levels << self._sizes[0]
        return np.stack(words, axis=-1).reshape(levels.shape[:-1] + (-1,)).astype(np.int32)

    def _pack(self, levels: jax.Array, bidders: jax.Array) -> jax.Array:
        """Tokens ``[B, T W]`` of levels ``[B, T]`` and bidders ``[B, T, n]`` (in ``jit``)."""
        words, first = [], 0
        for size in self._sizes:
            places = jnp.arange(size)[None, None]
            part = bidders[..., first : first + size].astype(jnp.int32)
            words.append(jnp.sum(part << places, axis=-1))
            first += size
        words[0] = levels << self._sizes[0] | words[0]
        return jnp.stack(words, axis=-1).reshape(levels.shape[0], -1).astype(jnp.int32)

    def random(self, key: jax.Array, count: int) -> jax.Array:
        """Random instances: each has its own chance that an advertiser bids on a query
        (uniform in [0.1, 0.9]), and each query a uniform bid level."""
        density_key, bit_key, level_key = jax.random.split(key, 3)
        n, queries = self.setting.advertisers, self.setting.queries
        density = jax.random.uniform(density_key, (count, 1, 1), minval=0.1, maxval=0.9)
        bidders = jax.random.uniform(bit_key, (count, queries, n)) < density
        levels = jax.random.randint(level_key, (count, queries), 0, self.setting.bid_levels)
        return self._pack(levels, bidders)

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        """Per sequence, one of: one advertiser's bid on a query switched on or off; a query's
        bid level redrawn; a query copied from its predecessor; the sequence shifted one query
        left or right (room at the start or the end); one advertiser's bids switched off, or
        on, from a query to the end (it leaves or joins the market)."""
        count = tokens.shape[0]
        queries, first = self.setting.queries, self._sizes[0]
        words = tokens.reshape(count, queries, self.words)  # [B, T, W]
        kind_key, where_key, bit_key, level_key = jax.random.split(key, 4)
        kind = jax.random.randint(kind_key, (count, 1), 0, 7)[..., None]
        where = jax.random.randint(where_key, (count, 1), 0, queries)[..., None]
        bit = jax.random.randint(bit_key, (count, 1), 0, self.setting.advertisers)[..., None]
        level = jax.random.randint(level_key, (count, 1), 0, self.setting.bid_levels)[..., None]
        word = jnp.arange(self.words)[None, None]
        switch = jnp.where(word == bit // WORD_BITS, 1 << (bit % WORD_BITS), 0)  # [B, 1, W]
        current = jnp.take_along_axis(words, where, axis=1)  # [B, 1, W]
        before = jnp.take_along_axis(words, jnp.clip(where - 1, 0), axis=1)
        relevelled = jnp.where(word == 0, level << first | current & ((1 << first) - 1), current)
        changed = jnp.select([kind == 0, kind == 1], [current ^ switch, relevelled], before)
        at = jnp.arange(queries)[None, :, None]
        set_one = jnp.where(at == where, changed, words)
        left = jnp.concatenate([words[:, 1:], jnp.zeros_like(words[:, :1])], axis=1)
        right = jnp.concatenate([jnp.zeros_like(words[:, :1]), words[:, :-1]], axis=1)
        shifted = jnp.where(kind == 3, left, right)
        later = at >= where
        leaves = jnp.where(later, words & ~switch, words)
        joins = jnp.where(later, words | switch, words)
        market = jnp.where(kind == 5, leaves, joins)
        moved = jnp.where(kind < 5, shifted, market)
        mutated = jnp.where(kind < 3, set_one, moved)
        return mutated.reshape(tokens.shape).astype(tokens.dtype)


def encoding(setting: Setting) -> QueryEncoding:
    """What the adversary writes for ``setting``."""
    return QueryEncoding(setting)
