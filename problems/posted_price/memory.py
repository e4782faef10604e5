"""Posted pricing's memory estimates for the pre-flight (:mod:`advonline.preflight`): the
largest arrays of training and of the evaluator, from the sizes that drive them (rounds T,
grid G + 1, batches, hidden size, densities, price atoms, demand vectors)."""

from __future__ import annotations

from advonline.configs import RunConfig
from advonline.preflight import FLOAT32, FLOAT64, Need
from advonline.problems.posted_price.config import (
    AdversaryConfig,
    HeadConfig,
    read_head,
    writer_config,
)
from advonline.problems.posted_price.evaluate import adversary_skipped
from advonline.problems.posted_price.model import Setting


def demand_vector_count(setting: Setting) -> int:
    """How many demand vectors the buyer types and the hard families use
    (:func:`posted_price.buyer_types.demand_vectors`), counted without building them."""
    return setting.demand_levels * (1 if setting.resources == 1 else setting.resources + 1)


def type_count(setting: Setting, density_levels: int) -> int:
    """How many buyer types an adversary chooses among (advonline/buyer_types.py): the
    densities with their just-below copies, times the demand vectors, plus nobody."""
    return (2 * density_levels - 1) * demand_vector_count(setting) + 1


def evaluation_needs(setting: Setting, budget) -> list[Need]:
    """The evaluator's largest arrays (float64) for one algorithm on ``setting``."""
    rounds, states, k = setting.rounds, setting.grid_size + 1, setting.resources
    history = rounds * (2 * k + 2)  # one rollout: buyers, fractions, prices
    members = budget.family_members * demand_vector_count(setting) ** 2
    needs = [
        Need(
            "the fresh adversary's type logits [batch, T, types]",
            FLOAT64
            * budget.adversary_batch
            * rounds
            * type_count(setting, AdversaryConfig.density_levels),
            "the setting's rounds, demand_levels or resources",
        ),
        Need(
            "the hard families' runs [members x samples, T, ...]",
            FLOAT64 * members * budget.samples * history,
            "--family-members, or the setting's demand_levels or resources",
        ),
        Need(
            "the random instances' runs [instances x samples, T, ...]",
            FLOAT64 * budget.random_instances * budget.samples * history,
            "--random-instances, or the setting's rounds",
        ),
    ]
    if adversary_skipped(setting, budget) is None:  # the adversary source runs
        needs.append(
            Need(
                "the fresh adversary's sale chances of every buyer type [T, (G + 1)^K, types]",
                FLOAT64 * rounds * states**k * type_count(setting, AdversaryConfig.density_levels),
                "the setting's rounds, max_demand, demand_levels or resources",
                # read, not differentiated: the peak holds about 2.3 of it (17 GB for a 7.5 GB
                # table at K = 4, T = 100, 14641 states, 636 types); a mixture's search holds
                # every member's table beside two more (built and scored one at a time)
                copies=3,
                member_copies=1,
            )
        )
    if k == 1:
        needs += [
            Need(
                "the price table [T, G + 1, atoms]",
                FLOAT64 * rounds * states * HeadConfig.price_atoms,
                "the setting's rounds or max_demand (G = demand_levels / max_demand)",
            ),
            Need(
                "the exact expected welfare of the families [members, T, G + 1]",
                FLOAT64 * members * rounds * states,
                "--family-members, or the setting's rounds, max_demand or demand_levels",
            ),
        ]
    return needs


def training_needs(config: RunConfig) -> list[Need]:
    """The training run's largest arrays (float32), from its config."""
    setting, algorithm = config.setting, read_head(config.algorithm.head)
    adversary = writer_config(config.adversary, config.writer_options)
    rounds, states, k = setting.rounds, setting.grid_size + 1, setting.resources
    types = type_count(setting, adversary.density_levels)
    needs = [
        Need(
            "the pricing network's weights [hidden, hidden] x layers",
            FLOAT32 * algorithm.layers * algorithm.hidden**2,
            "algorithm.hidden or algorithm.layers",
        ),
        Need(
            "the pricing network's output layer [hidden, K x atoms]",
            FLOAT32 * algorithm.hidden * k * algorithm.price_atoms,
            "algorithm.hidden or algorithm.price_atoms",
        ),
        Need(
            "the adversary network's weights [hidden, hidden] x layers",
            FLOAT32 * adversary.layers * adversary.hidden**2,
            "adversary.hidden or adversary.layers",
        ),
        Need(
            "the adversary's type logits [batch, T, types]",
            FLOAT32 * adversary.batch * rounds * types,
            "adversary.batch, adversary.density_levels or setting.rounds",
        ),
        Need(
            "the adversary's output layer [hidden, types]",
            FLOAT32 * adversary.hidden * types,
            "adversary.hidden or adversary.density_levels",
        ),
        Need(
            "the adversary's noise, fed to every round [batch, T, latent]",
            FLOAT32 * adversary.batch * rounds * adversary.latent,
            "adversary.latent or adversary.batch",
        ),
        Need(
            "the replay of hard instances, written out for training [replay, T, K]",
            FLOAT32 * config.game.replay_size * rounds * (k + 1),
            "game.replay_size or setting.rounds",
        ),
    ]
    if k == 1:
        needs.append(
            Need(
                "the per-round values [batch, T, G + 1, atoms]",
                FLOAT32 * adversary.batch * rounds * states * algorithm.price_atoms,
                "adversary.batch, setting.rounds, setting.max_demand or algorithm.price_atoms",
            )
        )
    if config.game.loop == "oracle":
        oracle = config.oracle
        scale = oracle.probe_scale
        needs += [
            Need(
                "the local search's candidates or the certificate's draws [inputs, T, G + 1]",
                FLOAT32 * config.searched_inputs() * rounds * states,
                "oracle.chains, oracle.candidates, oracle.certificate_instances or setting.rounds",
            ),
            Need(
                "the probe's adversary logits [restarts x batch, T, types]",
                FLOAT32 * scale * oracle.restarts * oracle.adversary_batch * rounds * types,
                "oracle.restarts, oracle.adversary_batch or adversary.density_levels",
            ),
            Need(
                "the restricted game's payoffs [snapshots, archive, T]",
                FLOAT32 * oracle.snapshots * oracle.archive_size * rounds,
                "oracle.snapshots or oracle.archive_size",
            ),
        ]
        if k > 1:  # exact payoffs over the product grid of (G + 1)^K utilisation states
            grid = states**k
            needs += [
                Need(
                    "one network's sale chances [T, (G + 1)^K states, types]",
                    FLOAT32 * rounds * grid * types,
                    "setting.max_demand, setting.demand_levels or adversary.density_levels",
                ),
                Need(
                    "the archive's sale chances in training [T, archive, (G + 1)^K states]",
                    FLOAT32 * rounds * oracle.archive_size * grid,
                    "oracle.archive_size, setting.max_demand or setting.demand_levels",
                ),
            ]
            if config.mixes and not algorithm.grid_certificate:
                # the mixture probe: each snapshot's table kept between epochs and stacked
                # for the search, which holds two more while it scores
                needs.append(
                    Need(
                        "each snapshot's sale chances for the mixture probe [T, (G + 1)^K, types]",
                        FLOAT32 * rounds * grid * types,
                        "oracle.snapshots, setting.max_demand or adversary.density_levels",
                        copies=2 * oracle.snapshots + 2,
                    )
                )
    return needs
