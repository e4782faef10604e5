"""The adversary network's instances, its REINFORCE update, and a fresh best response.

Buyer types: a density level and a demand level, or nobody. The density levels are a
geometric grid ``g_0 = L < ... < g_{D-1} = U`` plus a copy of each ``g_j`` (j >= 1) just below
it (by a relative ``1e-4``). Against prices on the same grid these are the only densities
that matter: a buyer with density in ``[g_j, g_{j+1})`` buys exactly where one with density
``g_j`` buys, and a ratio that is a quotient of two linear functions of the density is worst
at an end of that interval, i.e. at ``g_j`` or just below ``g_{j+1}``.

Two writers, each an :class:`advonline.adversary.Adversary` (init / write / log-prob), chosen
by ``adversary.conditioning`` (:func:`build_adversary`):

- ``"noise"`` (:class:`NoiseAdversary`): a noise vector and the round
  (:class:`~advonline.networks.AdversaryNetwork`); the instances are written in advance, one
  ``vmap``.
- ``"state"`` (:class:`StateAdversary`, any K): each instance is written while the one
  simulator plays it against the algorithm (:class:`StateWriter`): buyer t is drawn from the
  state reached (round, units the algorithm sold of each resource, a draw of its prices from
  its own distribution) and every type is scored by its density, demand and chance to buy in
  that state (:class:`~posted_price.networks.StateAdversaryNetwork`). "Send a buyer at about the
  current price, then stop and flood at the last density" (docs/method.md, "The game") is
  then a simple rule. What it writes is a fixed instance and is measured as one (oblivious,
  exact ``E[ALG]`` over fresh draws), so every figure it produces is attained by a real
  input. Against a randomised algorithm the *writing* adapts to one draw of its prices; the
  measurement does not. ``tests/test_state_adversary.py`` checks that against ``threshold``
  a fresh one gets within 10% of the exact worst case, beyond a noise-conditioned one of the
  same budget.

The adversary minimises the game payoff ``u = E_I E[ALG(I)] / OPT(I)``. In
:func:`best_response` each instance's ``E[ALG]`` is exact (backward induction over the
algorithm's state: the utilisation grid for K = 1, the product grid of
:mod:`posted_price.product_grid` for K >= 2 with state conditioning) and OPT is computed in
``jit`` (:func:`~posted_price.optimum.device_optimum`), so the only noise in its REINFORCE
gradient is which instances were drawn; the whole best response is one jitted ``lax.scan``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from advonline import ratio
from advonline.adversary import (
    NoiseWriter,
    Written,
    token_log_prob,
    train_fresh,
)
from advonline.networks import AdversaryNetwork
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.config import AdversaryConfig
from advonline.problems.posted_price.model import (
    AdversaryView,
    Buyer,
    Instance,
    Policy,
    PriceDistribution,
    Setting,
    TablePolicy,
    demand_units,
    mean_welfare,
    rollout,
    sell_probability,
)
from advonline.problems.posted_price.networks import StateAdversaryNetwork
from advonline.problems.posted_price.optimum import device_optimum
from advonline.problems.posted_price.product_grid import GridTablePolicy, state_index
from advonline.problems.posted_price.typed_payoffs import (
    payoffs_given_sales,
    type_sale_table,
    typed_payoffs,
)

#: Features of a buyer type, from its scaled log-density x, scaled demand m and the chance s
#: that it buys in the current state: x, x^2, s, s^2, x s, m, m s, m x.
TYPE_FEATURES = 8


@dataclasses.dataclass(frozen=True)
class _TypeWriter:
    """What both writers share (hashable): the network and the buyer types it writes in."""

    network: AdversaryNetwork | StateAdversaryNetwork
    latent: int
    densities: tuple[float, ...]
    demands: tuple[tuple[float, ...], ...]  # [N][K] demand vectors

    @property
    def buyer_types(self) -> BuyerTypes:
        """The type vocabulary it writes in (:mod:`posted_price.buyer_types`)."""
        return BuyerTypes(self.densities, self.demands)

    @property
    def types(self) -> int:
        return self.buyer_types.count

    def type_sale_table(self, table: PriceDistribution, dtype) -> jax.Array:
        """``[T, S, types]``: :func:`~posted_price.typed_payoffs.type_sale_table` of its types."""
        return type_sale_table(self.buyer_types, table, dtype)

    def type_buyers(self, dtype) -> tuple[jax.Array, jax.Array]:
        """Value ``[types]`` and demand ``[types, K]`` of every buyer type."""
        return self.buyer_types.buyers(dtype)

    def instances(self, chosen: jax.Array, dtype) -> Instance:
        """Buyer types ``[B, T]`` as values and demand vectors."""
        return self.buyer_types.instances(chosen, dtype)


@dataclasses.dataclass(frozen=True)
class NoiseAdversary(_TypeWriter, NoiseWriter):
    """Writes each instance's buyer types in advance from a noise vector and the round
    (:class:`advonline.adversary.NoiseWriter`)."""

    def write(
        self, params: dict, setting: Setting, key: jax.Array, count: int, dtype, *against
    ) -> Written:
        """``count`` instances (the algorithm, if given in ``against``, is not looked at)."""
        return self.write_tokens(params, key, count, setting.rounds, dtype)


@dataclasses.dataclass(frozen=True)
class StateAdversary(_TypeWriter):
    """Writes each buyer from the state the algorithm reached
    (:class:`~posted_price.networks.StateAdversaryNetwork`; module docstring). What it records
    per round (``Written.context``) is the scaled state ``[B, T, 1 + K]`` and every type's
    chance to buy there ``[B, T, types]``."""

    def init(self, key: jax.Array) -> dict:
        return self.network.init(
            key,
            jnp.zeros(self.latent + 1 + len(self.demands[0])),
            jnp.zeros((self.types, TYPE_FEATURES)),
        )

    def state_logits(
        self, params: dict, noise: jax.Array, state: jax.Array, sale: jax.Array
    ) -> jax.Array:
        """``[..., types]`` from noise ``[..., Z]``, the state ``[..., 1 + K]``
        (:func:`scaled_state`) and each type's chance to buy ``[..., types]``."""
        context = jnp.concatenate([noise, state.astype(noise.dtype)], -1)
        return self.network.apply(params, context, self.type_features(sale))

    def type_features(self, sale: jax.Array) -> jax.Array:
        """``[..., types, TYPE_FEATURES]`` from every type's chance to buy ``[..., types]``."""
        log_density = jnp.log(jnp.asarray(self.densities, sale.dtype))
        scaled = 2 * (log_density - log_density[0]) / (log_density[-1] - log_density[0]) - 1
        totals = jnp.asarray(self.demands, sale.dtype).sum(-1)
        x = jnp.concatenate([jnp.repeat(scaled, len(self.demands)), jnp.full(1, -1.0)])
        m = jnp.concatenate([jnp.tile(totals / totals.max(), len(self.densities)), jnp.zeros(1)])
        x, m = (jnp.broadcast_to(f.astype(sale.dtype), sale.shape) for f in (x, m))
        return jnp.stack([x, x * x, sale, sale * sale, x * sale, m, m * sale, m * x], -1)

    def write(
        self,
        params: dict,
        setting: Setting,
        key: jax.Array,
        count: int,
        dtype,
        table: PriceDistribution,
        sale: jax.Array | None = None,
    ) -> Written:
        """``count`` instances, each written while the one simulator plays it against the
        algorithm given by its price ``table`` (prices drawn from it; its
        :meth:`type_sale_table` may be passed as ``sale`` when it is already at hand), each
        buyer from the state reached. The instance is then a fixed input like any other,
        measured obliviously."""
        if sale is None:
            sale = self.type_sale_table(table, dtype)
        key_noise, key_types, key_prices = jax.random.split(key, 3)
        noise = jax.random.normal(key_noise, (count, self.latent))
        gumbel = jax.random.gumbel(key_types, (count, setting.rounds, self.types))
        values, demands = self.type_buyers(dtype)
        if setting.resources == 1:
            policy = TablePolicy(table, setting.grid_size)
        else:
            policy = GridTablePolicy(table, setting)

        def one(noise_i, gumbel_i, key_i):
            writer = StateWriter(self, setting, params, noise_i, gumbel_i, sale, values, demands)
            return rollout(setting, policy, writer, key_i, dtype)

        runs = jax.vmap(one)(noise, gumbel, jax.random.split(key_prices, count))
        instances = runs.instance
        units = demand_units(setting, runs.used_before())  # [B, T, K], as the writer saw them
        index = state_index(setting, units)  # [B, T]
        rounds = jnp.broadcast_to(jnp.arange(setting.rounds)[None, :], index.shape)
        chosen = self.buyer_types.types_of(instances, dtype)
        state = scaled_state(setting, rounds, units)
        return Written(instances, noise, chosen, (state, sale[rounds, index]))

    def log_prob(self, params: dict, written: Written) -> tuple[jax.Array, jax.Array]:
        state, sale = written.context
        noise = jnp.broadcast_to(written.noise[:, None], (*written.chosen.shape, self.latent))
        return token_log_prob(self.state_logits(params, noise, state, sale), written.chosen)


#: Either writer (both follow :class:`advonline.adversary.Adversary`).
AdversaryModel = NoiseAdversary | StateAdversary


def build_adversary(setting: Setting, config: AdversaryConfig) -> AdversaryModel:
    """The writer ``config.conditioning`` names, over ``config.density_levels`` densities."""
    vocabulary = BuyerTypes.build(setting, config.density_levels)
    if config.conditioning == "state":
        network = StateAdversaryNetwork(
            types=vocabulary.count,
            features=TYPE_FEATURES,
            hidden=config.hidden,
            layers=config.layers,
        )
        writer = StateAdversary
    else:
        network = AdversaryNetwork(
            types=vocabulary.count, hidden=config.hidden, layers=config.layers
        )
        writer = NoiseAdversary
    return writer(network, config.latent, vocabulary.densities, vocabulary.demands)


def scaled_state(setting: Setting, round_index: jax.Array, units: jax.Array) -> jax.Array:
    """``[..., 1 + K]``: the round and the algorithm's units of each resource ``[..., K]``,
    each scaled to [-1, 1]."""
    scaled_round = (2 * round_index / setting.rounds - 1)[..., None]
    return jnp.concatenate([scaled_round, 2 * units / setting.grid_size - 1], -1)


@struct.dataclass
class StateWriter:
    """A :class:`~posted_price.model.BuyerSource` that writes buyer t from the state the
    algorithm reached (round, units sold; not the price it is about to draw): the
    state-conditioned network's type, drawn with the Gumbel-max trick from ``gumbel``."""

    model: AdversaryModel = struct.field(pytree_node=False)
    setting: Setting = struct.field(pytree_node=False)
    params: dict
    noise: jax.Array  # [Z]
    gumbel: jax.Array  # [T, types]
    sale: jax.Array  # [T, G + 1, types]
    values: jax.Array  # [types]
    demands: jax.Array  # [types, K]

    def __call__(self, view: AdversaryView) -> Buyer:
        units = demand_units(self.setting, view.alg_used)  # [K] sold, in grid units
        state = scaled_state(self.setting, view.round, units)
        index = state_index(self.setting, units)
        logits = self.model.state_logits(
            self.params, self.noise, state, self.sale[view.round, index]
        )
        chosen = jnp.argmax(logits + self.gumbel[view.round])
        return Buyer(value=self.values[chosen], demand=self.demands[chosen])


def payoffs(setting: Setting, table: PriceDistribution, instances: Instance, optimum: jax.Array):
    """``E[ALG(I)] / OPT(I)`` per instance ``[B]`` for the policy given by its price ``table``."""
    sell = jax.vmap(sell_probability, in_axes=(None, 0), out_axes=1)(table, instances)
    return payoffs_given_sales(setting, sell, instances, optimum)


class BestResponse(NamedTuple):
    """What a fresh adversary found against a frozen algorithm."""

    worst_ratio: jax.Array  # [] max OPT / E[ALG] over every instance it wrote
    worst_instance: Instance  # the instance that reached it
    ratio_by_step: jax.Array  # [steps] worst ratio of each step's batch
    worst_by_step: Instance  # [steps] the instance that reached it
    params: dict  # the adversary's parameters after training
    types_by_step: jax.Array | None = None  # [steps, T] int32: those instances as buyer types


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4, 5))
def best_response(
    setting: Setting,
    model: AdversaryModel,
    table: PriceDistribution,
    config: AdversaryConfig,
    steps: int,
    dtype,
    key: jax.Array,
) -> BestResponse:
    """Train a fresh adversary from scratch for ``steps`` REINFORCE steps against the frozen
    algorithm given by its price ``table`` (:func:`~posted_price.typed_payoffs.algorithm_table`;
    K >= 2 needs state conditioning and divisible buyers: OPT in ``jit``,
    :func:`~posted_price.optimum.device_optimum`); keep the worst instance of everything
    written."""
    # the algorithm is frozen: its per-type sale table is computed once, not once per step
    sale = model.type_sale_table(table, dtype) if isinstance(model, StateAdversary) else None

    def write(params: dict, key_step: jax.Array) -> Written:
        return model.write(params, setting, key_step, config.batch, dtype, table, sale)

    def score(written: Written) -> jax.Array:
        optimum = device_optimum(setting, written.instances)
        if setting.resources == 1:
            return payoffs(setting, table, written.instances, optimum)
        # state conditioning (any K) writes types; K >= 2 is scored through them
        return typed_payoffs(setting, model.buyer_types, sale, written.chosen, optimum)

    trained = train_fresh(model, config, steps, key, write, score)
    by_step, worst_by_step = trained.ratio_by_step, trained.instance_by_step
    best = jnp.argmax(by_step)
    worst_instance = jax.tree.map(lambda leaf: leaf[best], worst_by_step)
    return BestResponse(
        by_step[best],
        worst_instance,
        by_step,
        worst_by_step,
        trained.params,
        trained.tokens_by_step,
    )


def sampled_payoffs(
    setting: Setting,
    policy: Policy,
    instances: Instance,
    optimum: jax.Array,
    key: jax.Array,
    samples: int,
) -> jax.Array:
    """``E[ALG(I)] / OPT(I)`` ``[B]`` with ``E[ALG]`` the mean welfare of ``samples`` runs of
    the simulator (one run for a deterministic policy: then it is exact)."""
    welfare = mean_welfare(setting, policy, instances, key, samples, optimum.dtype)
    return ratio.payoff(welfare, optimum)
