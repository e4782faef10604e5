"""Posted pricing's keys of a run config (advonline/configs.py): the ``[algorithm]`` keys its
policy head reads (:class:`HeadConfig`: the pricing network and its update), its own
``[adversary]`` keys (:class:`WriterOptions`: the buyer types and the writer's
conditioning), the writer as its modules see it (:class:`AdversaryConfig`) and how the tables
must fit the setting (:func:`check_run`)."""

from __future__ import annotations

import dataclasses
import functools

from advonline.configs import AdversaryTable, RunConfig, layers_problems, positive, read_options

UPDATES = ("per-round", "reinforce")
#: The most price atoms a network may post: the head's atoms are a static tuple built when
#: the config is read, before the memory pre-flight sizes the arrays they drive.
MAX_PRICE_ATOMS = 2**16
CONDITIONINGS = ("noise", "state")


@dataclasses.dataclass(frozen=True)
class HeadConfig:
    """The pricing network and its update (the ``[algorithm]`` table but its learning rate)."""

    price_atoms: int = 64  # A, prices geometric in [L, U]
    hidden: int = 64
    layers: int = 2
    update: str = "per-round"  # "per-round" (all actions, exact Q) or "reinforce" (ablation)
    reinforce_samples: int = 8  # sampled runs per instance for REINFORCE
    round_input: bool = True  # the network sees t / T (False: the horizon is unknown to it)
    rollout_rounds: int = 4  # K >= 2: rounds of each run where every action is valued
    payoff_runs: int = 8  # K >= 2: sampled runs behind each payoff E[ALG] / OPT
    shared_resources: bool = False  # one network prices every resource alike (equal capacities)
    grid_certificate: bool = False  # K >= 2: certify the network over the product grid in
    # training (one resource always does), so that its worst runs join the archive and the
    # run delivers the network with the lowest certificate; costly: few price atoms

    def check(self) -> list[str]:
        problems = positive(
            "algorithm",
            self,
            "price_atoms",
            "hidden",
            "reinforce_samples",
            "rollout_rounds",
            "payoff_runs",
        )
        problems += layers_problems("algorithm", self.layers)
        if not 2 <= self.price_atoms <= MAX_PRICE_ATOMS:
            problems.append(f"algorithm.price_atoms must lie in [2, {MAX_PRICE_ATOMS}]")
        if self.update not in UPDATES:
            problems.append(f"algorithm.update must be one of {', '.join(UPDATES)}")
        return problems


@dataclasses.dataclass(frozen=True)
class WriterOptions:
    """Posted pricing's own ``[adversary]`` keys: the buyer types instances are written in
    (training's encoding) and what the writer conditions on."""

    density_levels: int = 64  # geometric densities in [L, U], each with a just-below copy
    conditioning: str = "noise"  # "noise": a noise vector and the round; "state": also the
    # algorithm's state as the instance is written (see problems/posted_price/adversary.py)

    def check(self) -> list[str]:
        problems = positive("adversary", self, "density_levels")
        if self.conditioning not in CONDITIONINGS:
            problems.append(f"adversary.conditioning must be one of {', '.join(CONDITIONINGS)}")
        return problems


@dataclasses.dataclass(frozen=True)
class AdversaryConfig:
    """The writer as posted pricing's modules read it: the core's ``[adversary]`` keys and
    :class:`WriterOptions`."""

    density_levels: int = 64
    latent: int = 4  # Z, size of the noise vector an instance is conditioned on
    hidden: int = 64
    layers: int = 2
    learning_rate: float = 1e-2
    batch: int = 64  # instances written per update
    entropy: float = 0.01  # bonus on the per-round type distributions
    conditioning: str = "noise"


@functools.lru_cache(maxsize=64)
def read_head(head_config: tuple) -> HeadConfig:
    """The ``[algorithm]`` keys of posted pricing (sorted pairs) as its :class:`HeadConfig`;
    ValueError names a key or value it cannot use."""
    return read_options(HeadConfig, dict(head_config))


def writer_config(table: AdversaryTable | None, options: WriterOptions) -> AdversaryConfig:
    """The writer as posted pricing's modules read it: the run's ``[adversary]`` table (its
    defaults without one) and posted pricing's own keys."""
    table = table if table is not None else AdversaryTable()
    return AdversaryConfig(**dataclasses.asdict(table), **dataclasses.asdict(options))


def check_run(config: RunConfig) -> list[str]:
    """What is wrong with how a posted-pricing run's tables fit its setting and each other."""
    problems = []
    head = read_head(config.algorithm.head)
    conditioning = config.writer_options.conditioning
    if head.rollout_rounds > config.setting.rounds:
        problems.append("algorithm.rollout_rounds must be <= setting.rounds")
    if head.shared_resources and len(set(config.setting.capacities)) > 1:
        problems.append("algorithm.shared_resources needs every capacity equal")
    several = config.setting.resources != 1
    if conditioning == "state" and several and config.game.loop != "oracle":
        problems.append(
            'adversary.conditioning = "state" with several resources needs game.loop = "oracle"'
        )
    if several and config.game.loop != "oracle" and config.oracle.restarts:
        problems.append(
            'several resources with game.loop = "simultaneous" measure each epoch by local '
            "search alone: set oracle.restarts = 0 (fresh adversary networks of several "
            'resources need adversary.conditioning = "state", which the oracle loop alone takes)'
        )
    if head.grid_certificate:
        problems.extend(_grid_certificate_problems(config, head))
    if config.oracle.descent_epochs and several and not head.grid_certificate:
        problems.append(
            "oracle.descent_epochs with several resources needs algorithm.grid_certificate"
        )
    if config.oracle.descent_epochs > config.game.epochs:
        problems.append("oracle.descent_epochs must be <= game.epochs")
    if several and not config.setting.divisible:
        problems.append("several resources need divisible buyers (OPT in JAX is an LP's)")
    if config.game.loop == "oracle" and several and config.oracle.restarts:
        if conditioning != "state":
            problems.append(
                'game.loop = "oracle" with several resources needs adversary.conditioning = "state"'
            )
    return problems


def _grid_certificate_problems(config: RunConfig, head: HeadConfig) -> list[str]:
    """What keeps ``algorithm.grid_certificate`` from certifying the run's networks: one
    resource (its DP certifies every run already), or a sweep over the work limit."""
    from advonline.problems.posted_price.grid_certify import DEFAULT_WORK_LIMIT, grid_work

    setting = config.setting
    if setting.resources == 1:
        return ["algorithm.grid_certificate is for several resources (one is always certified)"]
    work = grid_work(setting, setting.resources * head.price_atoms)
    if work > DEFAULT_WORK_LIMIT:
        return [
            f"algorithm.grid_certificate: a network's certificate needs {work:.1e} updates a "
            f"sweep, over the limit {DEFAULT_WORK_LIMIT:.0e}: fewer price_atoms"
        ]
    return []
