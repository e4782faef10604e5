"""Posted pricing as an advonline problem (advonline/problem.py): its ``PROBLEM``.

Posted pricing brings every optional capability of the interface: its training pieces
(:mod:`posted_price.training`: the per-round update, the oracles over buyer types, the DP
certificate's draws and descent, the state-conditioned writer, its policy files and views)
and its memory estimates, which the core's game and run pipeline call. The evaluator measures
it with its own sources (:func:`posted_price.evaluate.sources`: the DP certificate, the
state-conditioned fresh adversary, the families per demand pair) and runs the baselines on a
buyer trace (:func:`posted_price.evaluate.trace`). ``families``, ``export`` and ``load`` are
left ``None``: its documents write the policy files (with provenance and versions) and the
evaluator sweeps its families itself.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from advonline import ratio
from advonline.baselines.posted_price import BASELINES
from advonline.problem import Cases, Certificate, LowerBound, PolicyHead, Problem
from advonline.problems.posted_price import (
    by_hand,
    config,
    evaluate,
    grid_certify,
    lower_bound,
    memory,
    model,
    policy_file,
    product_grid,
    training,
)
from advonline.problems.posted_price.buyer_types import BuyerTypes
from advonline.problems.posted_price.learned import LearnedPolicy, LearnedPriceCurve, price_atoms
from advonline.problems.posted_price.networks import AlgorithmNetwork
from advonline.problems.posted_price.optimum import offline_optimum
from advonline.problems.posted_price.oracles import mutate, random_types
from advonline.problems.posted_price.tabulated import from_file

#: Density levels of the token vocabulary (as the oracle loop's default).
DENSITY_LEVELS = 64


@dataclasses.dataclass(frozen=True)
class TypeEncoding:
    """Instances as sequences of buyer types (:mod:`posted_price.buyer_types`) over
    ``density_levels`` densities. Its sizes are known before the types are built, so that a
    setting too large to train is refused before anything is allocated."""

    setting: model.Setting
    density_levels: int = DENSITY_LEVELS

    @functools.cached_property
    def types(self) -> BuyerTypes:
        with jax.ensure_compile_time_eval():  # constants, even when first asked inside jit
            return BuyerTypes.build(self.setting, self.density_levels)

    @property
    def vocabulary(self) -> int:
        return memory.type_count(self.setting, self.density_levels)

    @property
    def length(self) -> int:
        return self.setting.rounds

    def decode(self, tokens: jax.Array) -> model.Instance:
        return self.types.instances(tokens, jnp.result_type(float))

    def random(self, key: jax.Array, count: int) -> jax.Array:
        return random_types(self.types, key, count, self.length)

    def mutate(self, key: jax.Array, tokens: jax.Array) -> jax.Array:
        keys = jax.random.split(key, tokens.shape[0])
        return jax.vmap(lambda k, t: mutate(self.types, k, t))(keys, tokens)

    def encode(self, instances: model.Instance) -> np.ndarray:
        return self.types.nearest_types(instances)


def encoding(setting: model.Setting, options: config.WriterOptions | None = None) -> TypeEncoding:
    """Buyer types over ``options.density_levels`` densities (a run's), else the default."""
    return TypeEncoding(setting, DENSITY_LEVELS if options is None else options.density_levels)


def payoffs(
    setting: model.Setting, policy, instances: model.Instance, optimum: jax.Array
) -> jax.Array:
    """Exact ``E[ALG] / OPT`` per instance, given OPT ``[B]``: backward induction for K = 1,
    the product grid for K >= 2."""
    if setting.resources == 1:
        earned = jax.vmap(lambda one: model.expected_welfare_exact(setting, policy, one))(instances)
    else:
        earned = jax.vmap(
            lambda values, demands: product_grid.expected_welfare_grid(
                setting, policy, values, demands
            )
        )(instances.values, instances.demands)
    return ratio.payoff(earned, optimum)


def policy_head(setting: model.Setting, keys: dict) -> PolicyHead:
    """The pricing network the ``[algorithm]`` keys describe (:class:`config.HeadConfig`;
    ValueError names a key or value it cannot use)."""
    head = config.read_head(tuple(sorted(keys.items())))
    network = AlgorithmNetwork(
        resources=setting.resources,
        atoms=head.price_atoms,
        hidden=head.hidden,
        layers=head.layers,
        use_round=head.round_input,
        shared_resources=head.shared_resources,
    )
    atoms = price_atoms(setting, network.atoms)
    example = (jnp.zeros(setting.resources), jnp.zeros(()))
    return PolicyHead(network, example, lambda params: LearnedPolicy(params, network, atoms))


def certificate(setting: model.Setting, policy) -> Certificate | None:
    """The DP certificate (over the product grid for K >= 2): exact for a deterministic
    policy, an upper bound else; None beyond its work limit."""
    found = grid_certify.certify_policy(setting, policy)
    if found.ratio is None:
        return None
    return Certificate(found.ratio, bool(getattr(policy, "deterministic", False)))


@functools.lru_cache(maxsize=16)
def certified_lower_bound(setting: model.Setting) -> LowerBound | None:
    """The stopping-family bound (K = 1), hill-climbed from a fixed seed (seconds; kept per
    setting, so a process computes it once). The search runs in units of L and of the
    capacity, where the ratio is the same: a climb accepts ties, which other units round
    apart, so searching in the setting's own units would give a different (as valid)
    figure at each scale."""
    if setting.resources != 1:
        return None
    unit = dataclasses.replace(setting, low=1.0, high=setting.theta, capacities=(1.0,))
    (found,) = lower_bound.search_lower_bound(unit, jax.random.key(0))
    densities = found.densities * setting.low
    return LowerBound(found.ratio, 1.0 / found.ratio, found.stopping, densities)


def restore(document: dict) -> tuple[model.Setting, object]:
    """A policy file (either version, a network or a mixture) as the policy the simulator
    runs, with its setting; PolicyFileError says what is wrong."""
    return from_file(policy_file.parse(document, "posted pricing"))


def reference(setting: model.Setting) -> tuple[str, float] | None:
    if setting.resources != 1:
        return None
    return "1 + ln(U / L), K = 1 in the small-demand limit", 1.0 + math.log(setting.theta)


PROBLEM = Problem(
    name="posted-price",
    setting=model.Setting,
    payoffs=payoffs,
    rollout=model.rollout,
    offline_optimum=offline_optimum,
    encoding=encoding,
    policy_head=policy_head,
    baselines=BASELINES,
    certificate=certificate,
    lower_bound=certified_lower_bound,
    families=None,
    export=None,
    load=None,
    reference=reference,
    cases=Cases(
        settings=(
            {"rounds": 16, "max_demand": 0.125},
            {"resources": 2, "rounds": 12, "max_demand": 0.25, "capacities": [1.0, 1.0]},
            {
                "resources": 2,
                "rounds": 10,
                "max_demand": 0.5,
                "demand_levels": 2,
                "capacities": [1.0, 1.0],
                "divisible": False,
            },
        ),
        earned=by_hand.earned,
        optimum=by_hand.optimum,
    ),
    restore=restore,
    sources=evaluate.sources,
    trace=evaluate.trace,
    evaluation_needs=memory.evaluation_needs,
    certifies_mixtures=True,
    update=training.UPDATE,
    oracles=training.ORACLES,
    training_certificate=training.TRAINING_CERTIFICATE,
    writer=training.WRITER,
    documents=training.DOCUMENTS,
    views=training.VIEWS,
    state_distributions=training.state_distributions,
    read_out=LearnedPriceCurve,
    training_needs=memory.training_needs,
    check_run=config.check_run,
)
