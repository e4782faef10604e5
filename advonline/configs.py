"""Run configurations, one schema for every problem: data in ``experiments/configs/*.toml``,
validated here.

A config has six tables, each optional: ``[problem]`` (its ``name``; the registry's default
problem without it), the problem's ``[setting]``, the ``[algorithm]`` (the learned policy's
network and learning rate) and the ``[adversary]`` (its networks), and the core's ``[game]``
(the seed, epochs, loop and devices: :class:`GameConfig`) and ``[oracle]`` (each epoch and
its measurement: :class:`OracleConfig`). ``[algorithm]`` is a :class:`HeadTable` (the
problem's policy head reads its own keys) and ``[adversary]`` an :class:`AdversaryTable` plus
the keys of the problem's own writer, if it has one (:class:`advonline.problem.Writer`).
Unknown tables or keys, keys the run's loop does not read, wrong types and invalid values are
refused with one :class:`ConfigError` line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from pathlib import Path
from typing import Any

import jax
import numpy as np

from advonline.errors import quoted
from advonline.folders import read_text
from advonline.seeds import SEED_LIMIT

LOOPS = ("simultaneous", "oracle")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


#: The [oracle] keys the simultaneous loop reads: its epoch and its measurement's budget.
SIMULTANEOUS_ORACLE_KEYS = (
    "epoch_steps",
    "restarts",
    "adversary_steps",
    "adversary_batch",
    "chains",
    "candidates",
    "search_steps",
)
#: The [game] keys of the simultaneous loop's step alone.
STEP_KEYS = ("adversary_steps", "algorithm_steps", "replay_size", "replay_per_step")


@dataclasses.dataclass(frozen=True)
class GameConfig:
    """A config's ``[game]`` table, the same for every problem: the run's seed, how many
    epochs it trains (``oracle.epoch_steps`` updates each), the softmin's temperature, the
    devices and the loop; the simultaneous loop's step also reads :data:`STEP_KEYS`, which
    the oracle loop refuses."""

    seed: int = 0
    epochs: int = 12
    temperature: float = 0.01  # softmin over payoffs: the weights on the hardest instances
    # "oracle": the oracle loop (advonline/oracle_loop.py); "simultaneous": one live
    # adversary network against the algorithm, step by step, measured every
    # oracle.epoch_steps (advonline/simultaneous_loop.py)
    loop: str = "oracle"
    # devices the batches are sharded over (advonline/parallel.py): 0 = every device JAX sees;
    # a run may resume on another count (its figures agree up to float rounding)
    devices: int = 0
    adversary_steps: int = 1  # the simultaneous step: adversary updates per step (0: frozen)
    algorithm_steps: int = 1  # algorithm updates per step
    replay_size: int = 256  # past hard instances the algorithm keeps training against
    replay_per_step: int = 8  # hardest instances of each adversary batch added to the replay

    @property
    def simultaneous(self) -> bool:
        return self.loop == "simultaneous"

    def table(self) -> dict:
        """The ``[game]`` table of this config (the step's keys for the simultaneous loop
        only, which alone accepts them)."""
        table = dataclasses.asdict(self)
        skipped = () if self.simultaneous else STEP_KEYS
        return {name: value for name, value in table.items() if name not in skipped}

    def step_config(self) -> StepConfig:
        """What the simultaneous step reads (the seed, epochs and devices left out, so that
        runs of several seeds share its compiled programme)."""
        step = {name: getattr(self, name) for name in STEP_KEYS}
        return StepConfig(**step, temperature=self.temperature)

    def check(self) -> list[str]:
        problems = positive("game", self, "epochs", "algorithm_steps")
        if self.devices < 0:
            problems.append("game.devices must be >= 0 (0: every one)")
        if not 0 <= self.seed < SEED_LIMIT:
            problems.append(f"game.seed must lie in [0, 2**32), got {self.seed}")
        if self.loop not in LOOPS:
            problems.append(f"game.loop must be one of {', '.join(LOOPS)}")
        if min(self.adversary_steps, self.replay_size, self.replay_per_step) < 0:
            problems.append("game.adversary_steps, replay_size and replay_per_step must be >= 0")
        return problems + positive_float("game", self, "temperature")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """What the simultaneous step reads of the ``[game]`` table (hashable)."""

    adversary_steps: int
    algorithm_steps: int
    replay_size: int
    replay_per_step: int
    temperature: float


@dataclasses.dataclass(frozen=True)
class HeadTable:
    """The ``[algorithm]`` table: the policy head's own keys (the problem's ``policy_head``
    reads and checks them) and the learning rate of the algorithm's update."""

    head: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs
    learning_rate: float = 0.01

    @property
    def update(self) -> str:
        """The update's name, for the figures that compare updates: the head's ``update``
        key where the problem has several, else the exact gradient of the payoffs."""
        return dict(self.head).get("update", "gradient")

    def table(self) -> dict:
        return {**dict(self.head), "learning_rate": self.learning_rate}

    def check(self) -> list[str]:
        return positive_float("algorithm", self, "learning_rate")


@dataclasses.dataclass(frozen=True)
class AdversaryTable:
    """The ``[adversary]`` table's keys for every problem: the writer's network (the
    noise-conditioned :class:`advonline.adversary.TokenWriter`, or the problem's own) and its
    REINFORCE training."""

    hidden: int = 64
    layers: int = 2
    latent: int = 4  # the noise vector's size
    learning_rate: float = 0.01
    batch: int = 64  # instances written per step
    entropy: float = 0.01  # the entropy bonus on each round's token distribution

    def check(self) -> list[str]:
        problems = positive("adversary", self, "hidden", "latent", "batch")
        problems += layers_problems("adversary", self.layers)
        problems += positive_float("adversary", self, "learning_rate")
        if not self.entropy >= 0:
            problems.append("adversary.entropy must be >= 0")
        return problems


@dataclasses.dataclass(frozen=True)
class OracleBudget:
    """How hard one best-response oracle call looks (problems/posted_price/oracles.py; hashable)."""

    restarts: int = 4  # independent fresh adversary networks
    adversary_steps: int = 25  # REINFORCE steps of each
    adversary_batch: int = 32  # instances each writes per step
    chains: int = 16  # independent local-search chains
    candidates: int = 32  # mutations each chain tries per step
    search_steps: int = 40  # hill-climbing steps

    def scaled(self, factor: int) -> OracleBudget:
        """``factor`` times the restarts, steps and chains (a stronger probe)."""
        return dataclasses.replace(
            self,
            restarts=self.restarts * factor,
            adversary_steps=self.adversary_steps * factor,
            chains=self.chains * factor,
            search_steps=self.search_steps * factor,
        )


@dataclasses.dataclass(frozen=True)
class OracleConfig:
    """The epochs of either loop (``game.steps`` updates in all, ``epoch_steps`` per epoch) and
    what measures them. In the oracle loop (``game.loop = "oracle"``) an epoch adds the
    oracles' hard instances to the archive, solves the restricted game and trains the
    algorithm against its mixture; in the simultaneous loop the oracles' budget measures the
    network after each epoch's steps (advonline/simultaneous_loop.py)."""

    epoch_steps: int = 30  # per-round updates of the algorithm per epoch
    archive_size: int = 256  # instances kept (the least useful is evicted)
    snapshots: int = 16  # algorithm snapshots kept in the restricted game
    new_per_epoch: int = 32  # the oracles' hardest new instances archived per epoch
    worst_case_weight: float = 0.5  # share of the training weights on a softmin of the
    # current algorithm's payoffs (game.temperature); the rest is the equilibrium mixture
    anchor: float = 0.0  # proximal weight (where the problem has state_distributions): each
    # update also descends anchor x the mean over every state (round, utilisation) of
    # KL(epoch's starting distribution || current one)
    restarts: int = 0  # the oracles' budget per epoch (OracleBudget): fresh adversary
    # networks (none by default: hill climbing, and the certificate where there is one)
    adversary_steps: int = 25
    adversary_batch: int = 32
    chains: int = 16
    candidates: int = 32
    search_steps: int = 40
    probe_scale: int = 2  # the probe: this many times the restarts, steps and chains
    probe_every: int = 1  # epochs between probes; the last epoch is always probed, and with
    # 0 only the last
    certificate_instances: int = 0  # where the game certifies: instances drawn each epoch
    # from the adversary strategy that attains the certificate (an exact best response; its
    # hardest draws join the archive), 0 for none
    mixtures: bool = False  # where the networks have no certificate: each probed epoch
    # also probes the equilibrium mixture of snapshots, and the run delivers it when its
    # measured worst case is the lowest
    closing_rounds: int = 0  # with mixtures: the last measurement probes the mixture up to
    # this many more times, each probe's finds joining the archive and the restricted game
    # solved again (the adversary's side of double oracle over the final snapshots), until
    # the mixture's exploitability is at most closing_tolerance
    closing_tolerance: float = 0.01
    descent_epochs: int = 0  # where the game descends its certificate: the last this many
    # epochs train by certificate descent (epoch_steps gradient steps of the best network
    # down its own certificate, each against the exact worst adversary strategy) instead of
    # against the archive
    descent_learning_rate: float = 0.002
    descent_steps: int = 0  # gradient steps of each descent epoch (0: epoch_steps), for a
    # certificate whose steps cost much more than training's; the epoch counts epoch_steps
    rescore_best: bool = True  # without a certificate: before a probed network (or mixture)
    # is compared with the kept one, the kept one's measured worst case is raised to its worst
    # ratio on the current archive, so both are measured on everything found so far (the
    # archive grows harder, and a policy measured early would otherwise stay kept)

    def budget(self) -> OracleBudget:
        """The oracles' budget per epoch."""
        names = [f.name for f in dataclasses.fields(OracleBudget)]
        return OracleBudget(**{name: getattr(self, name) for name in names})

    def check(self) -> list[str]:
        problems = positive(
            "oracle",
            self,
            "epoch_steps",
            "archive_size",
            "snapshots",
            "new_per_epoch",
            "adversary_batch",
            "candidates",
            "probe_scale",
        )
        if self.probe_every < 0:
            problems.append("oracle.probe_every must be >= 0")
        if self.certificate_instances < 0:
            problems.append("oracle.certificate_instances must be >= 0")
        if min(self.restarts, self.adversary_steps, self.chains, self.search_steps) < 0:
            problems.append("oracle budgets (restarts, steps, chains) must be >= 0")
        if not 0 <= self.anchor < float("inf"):
            problems.append("oracle.anchor must be a finite number >= 0")
        if self.new_per_epoch > self.archive_size:
            problems.append("oracle.new_per_epoch must be <= oracle.archive_size")
        if not 0 <= self.worst_case_weight <= 1:
            problems.append("oracle.worst_case_weight must lie in [0, 1]")
        if self.closing_rounds < 0:
            problems.append("oracle.closing_rounds must be >= 0")
        if self.descent_epochs < 0 or self.descent_steps < 0:
            problems.append("oracle.descent_epochs and oracle.descent_steps must be >= 0")
        problems += positive_float("oracle", self, "descent_learning_rate")
        if not 0 <= self.closing_tolerance < float("inf"):
            problems.append("oracle.closing_tolerance must be a finite number >= 0")
        return problems


def not_applicable(problem) -> dict[str, str]:
    """[oracle] keys that ``problem`` has no use for, and why."""
    keys = {}
    if problem.state_distributions is None:
        keys["anchor"] = "the policy has no per-state distributions to anchor"
    own = problem.training_certificate
    descends = own is not None and own.descend is not None
    if problem.differentiable_certificate is None and not descends:
        why = "the problem's certificate has no gradient to descend"
        keys.update(descent_epochs=why, descent_learning_rate=why, descent_steps=why)
    return keys


#: [game] keys that belong elsewhere, and where.
MOVED_GAME_KEYS = {
    "steps": "give epochs, each of oracle.epoch_steps updates",
    "learning_rate": "the algorithm's learning rate belongs in [algorithm]",
}
#: The tables of a run config.
TABLES = ("problem", "setting", "algorithm", "adversary", "game", "oracle")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs, for every problem: the problem, its setting, the
    ``[algorithm]`` (:class:`HeadTable`) and ``[adversary]`` tables (:class:`AdversaryTable`,
    None without adversary networks, and the problem's writer options where it has a writer
    of its own) and ``[game]`` and ``[oracle]``. Build one with :func:`from_tables`."""

    problem: Any  # the registry's Problem (compared by identity)
    setting: Any
    algorithm: HeadTable
    adversary: AdversaryTable | None
    game: GameConfig = GameConfig()
    oracle: OracleConfig = OracleConfig()
    writer_options: Any = None  # the problem's own [adversary] keys (advonline.problem.Writer)

    @property
    def seed(self) -> int:
        return self.game.seed

    @property
    def devices(self) -> int:
        return self.game.devices

    @property
    def training_loop(self) -> str:
        """``"oracle"`` or ``"simultaneous"``."""
        return self.game.loop

    @property
    def total_steps(self) -> int:
        """The algorithm's updates the run makes in all."""
        return self.game.epochs * self.oracle.epoch_steps

    @property
    def temperature(self) -> float:
        return self.game.temperature

    @property
    def update(self) -> str:
        """How the algorithm's gradient is computed (the figures compare updates)."""
        return self.algorithm.update

    def to_tables(self) -> dict:
        """Plain data (TOML/JSON-ready) that :func:`from_tables` reads back to an equal config
        (what a checkpoint stores: a resume must continue the same run)."""
        oracle = dataclasses.asdict(self.oracle)
        oracle = {k: v for k, v in oracle.items() if k not in not_applicable(self.problem)}
        if self.game.simultaneous:
            oracle = {k: v for k, v in oracle.items() if k in SIMULTANEOUS_ORACLE_KEYS}
        tables = {
            "problem": {"name": self.problem.name},
            "setting": dataclasses.asdict(self.setting),
            "algorithm": _table(self.algorithm),
            "game": self.game.table(),
            "oracle": oracle,
        }
        adversary = {}
        if self.adversary is not None:
            adversary = _table(self.adversary)
            if not self.game.simultaneous:
                del adversary["batch"]  # the oracle's networks write adversary_batch
        if self.writer_options is not None:
            adversary |= dataclasses.asdict(self.writer_options)
        if adversary:
            tables["adversary"] = adversary
        return tables

    def build_game(self, mesh=None):
        """The game this run plays (:class:`advonline.game.Game`), its batches
        sharded over ``mesh``."""
        from advonline.game import Game

        step = self.game.step_config() if self.game.simultaneous else None
        head = dict(self.algorithm.head)
        args = (self.problem, self.setting, head, self.algorithm.learning_rate, mesh)
        draws = self.oracle.certificate_instances
        return Game.build(*args, step, self.adversary, self.mixes, self.writer_options, draws)

    def initial_state(self, game, key: jax.Array):
        """The state a run of this config starts from (either loop)."""
        if self.game.simultaneous:
            from advonline.simultaneous import init_state

            return init_state(game, key)
        from advonline.oracle_loop import init_oracle_state

        return init_oracle_state(game, self.oracle, key)

    def training_needs(self) -> list:
        """The largest arrays of training (:mod:`advonline.preflight`): the problem's estimate
        where it has one, else :meth:`encoding_needs`."""
        if self.problem.training_needs is not None:
            return self.problem.training_needs(self)
        return self.encoding_needs()

    @property
    def mixes(self) -> bool:
        """Whether the run may measure and deliver mixtures of snapshots: ``oracle.mixtures``
        in the oracle loop (a problem's certificate may still rule them out)."""
        return self.oracle.mixtures and not self.game.simultaneous

    def mixture_members(self) -> int:
        """The most networks a policy this run delivers can draw from: ``oracle.snapshots``
        where it may deliver a mixture of them, else 1."""
        return self.oracle.snapshots if self.mixes else 1

    def searched_inputs(self) -> int:
        """The most inputs training scores at once: the probe's proposals (chains x
        candidates, scaled by ``oracle.probe_scale``), the archive, or the certificate's draws
        of an epoch (``oracle.certificate_instances``), whichever is largest."""
        oracle = self.oracle
        probe = oracle.budget().scaled(oracle.probe_scale)
        drawn = oracle.certificate_instances
        return max(probe.chains * probe.candidates, oracle.archive_size, drawn)

    #: The keys that set :meth:`searched_inputs`, for a line that says what to lower.
    SEARCHED_KEYS = (
        "oracle.chains, oracle.candidates, oracle.probe_scale, oracle.archive_size "
        "or oracle.certificate_instances"
    )

    def written_keys(self) -> str:
        """The keys that set :meth:`written_inputs`, for a line that says what to lower."""
        keys = "oracle.restarts or oracle.adversary_batch"
        return f"adversary.batch, {keys}" if self.game.simultaneous else keys

    def written_inputs(self) -> int:
        """The most inputs adversary networks write at once: the probe's restarts x batch
        (vmapped), or in the simultaneous loop the writer's batch where it is larger."""
        probe = self.oracle.budget().scaled(self.oracle.probe_scale)
        written = probe.restarts * probe.adversary_batch
        if self.game.simultaneous and self.adversary is not None:
            written = max(written, self.adversary.batch)
        return written

    def encoding_needs(self) -> list:
        """Training's largest arrays as the problem's encoding sizes them
        (:func:`advonline.preflight.token_needs`): the inputs the adversary networks write at
        once (:meth:`written_inputs`), the inputs the search scores at once
        (:meth:`searched_inputs`) and the networks' weights. A problem's own estimate may start
        from these."""
        from advonline.preflight import network_needs, token_needs

        game = self.build_game()
        networks = {"the algorithm network": (game.init_params, "[algorithm] hidden or layers")}
        batch = 0
        if self.adversary is not None:
            batch = self.written_inputs()
            lower = "[adversary] hidden or latent"
            networks["the adversary network"] = (game.adversary.init, lower)
        searched, keys = self.searched_inputs(), self.SEARCHED_KEYS
        needs = token_needs(game.encoding, batch, searched, self.written_keys(), keys)
        return needs + network_needs(networks)

    def with_seed(self, seed: int) -> RunConfig:
        """This config with ``game.seed = seed`` (``run --seeds``)."""
        return dataclasses.replace(self, game=dataclasses.replace(self.game, seed=seed))

    def on_devices(self, count: int) -> RunConfig:
        """This config with ``game.devices = count`` (the ``--devices`` flag)."""
        return dataclasses.replace(self, game=dataclasses.replace(self.game, devices=count))

    def same_run(self, other) -> bool:
        """Whether ``other`` describes the same run: equal but perhaps for the device count."""
        return isinstance(other, RunConfig) and self.on_devices(0) == other.on_devices(0)


def _table(section) -> dict:
    return section.table() if hasattr(section, "table") else dataclasses.asdict(section)


def problem_of(data: dict, origin: str = "config"):
    """The :class:`~advonline.problem.Problem` a parsed config's ``[problem] name`` names (the
    registry's default without one); ConfigError for an unknown one."""
    from advonline import problems as registry  # the registry imports problems lazily

    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a table of sections")
    table = data.get("problem", {})
    if not isinstance(table, dict) or set(table) - {"name"}:
        raise ConfigError(f"{origin} [problem]: expected a table with one key, name")
    name = table.get("name", registry.DEFAULT)
    if not isinstance(name, str):
        raise ConfigError(f"{origin} [problem] name: expected a string, got {quoted(name)}")
    try:
        return registry.get(name)
    except KeyError as error:
        raise ConfigError(f"{origin}: {error.args[0]}") from None


def from_tables(data: dict, origin: str = "config") -> RunConfig:
    """The run config that plain data describes, for every problem; ConfigError names what
    is wrong.

    The ``[problem] name`` (default: the registry's default problem) says whose
    ``[setting]`` it is, whose policy head reads the ``[algorithm]`` keys and whose writer
    options the ``[adversary]`` table may hold; the problem's ``check_run`` says what is
    wrong with how the tables fit its setting. Keys the run's loop does not read are
    refused."""
    from advonline import preflight

    problem = problem_of(data, origin)
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ConfigError(f"{origin}: unknown section [{unknown[0]}]; known: {', '.join(TABLES)}")
    tables = {name: data.get(name, {}) for name in TABLES[1:]}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{origin} [{name}]: expected a table")
    try:
        setting = problem.setting.from_config(dict(tables["setting"]))
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{origin} [setting]: {error}") from None
    # one input's logits must fit before anything is built from the setting (a setting too
    # large for memory is refused here, not in a hang while its networks are built)
    preflight.check(preflight.token_needs(problem.encoding(setting), 1, 1))
    for name, where in MOVED_GAME_KEYS.items():
        if name in tables["game"]:
            raise ConfigError(f"{origin} [game]: {name} is not a [game] key: {where}")
    game = build_section(GameConfig, tables["game"], f"{origin} [game]")
    _check_loop_keys(game, tables, origin)
    algorithm = _head_table(problem, setting, tables["algorithm"], origin)
    writer_options, writer_keys = _writer_options(problem, tables["adversary"], origin)
    adversary = _writer_table(game, {**tables, "adversary": writer_keys}, tables["oracle"], origin)
    refused = not_applicable(problem)
    for name in tables["oracle"]:
        if name in refused:
            raise ConfigError(f"{origin} [oracle]: {name} does not apply: {refused[name]}")
    oracle = build_section(OracleConfig, tables["oracle"], f"{origin} [oracle]")
    config = RunConfig(problem, setting, algorithm, adversary, game, oracle, writer_options)
    problems = game.check() + oracle.check() + algorithm.check()
    problems += adversary.check() if adversary is not None else []
    problems += writer_options.check() if writer_options is not None else []
    if min(oracle.chains, oracle.search_steps) < 1:
        problems.append("oracle.chains and search_steps must be >= 1")
    if problem.check_run is not None:
        problems += problem.check_run(config)
    if problems:
        raise ConfigError(f"{origin}: {'; '.join(problems)}")
    return config


def from_stored_tables(data: dict, origin: str) -> RunConfig:
    """The run config a run folder stored (:meth:`RunConfig.to_tables`), read as
    :func:`from_tables` reads a config file, but for the ``[adversary]`` keys its loop does
    not read: a run of an earlier version stored its writer's every key, and they are left
    out here rather than refused, so that its folder still opens. ConfigError otherwise."""
    try:
        return from_tables(data, origin)
    except ConfigError:
        trimmed = _without_unread_writer_keys(data)
        if trimmed == data:
            raise
        return from_tables(trimmed, origin)


def _without_unread_writer_keys(data: dict) -> dict:
    """``data`` without the ``[adversary]`` keys an oracle-loop run does not read: all but
    the problem's writer options without adversary networks, else ``batch``."""
    game, oracle = data.get("game"), data.get("oracle")
    adversary = data.get("adversary")
    tables = (game, oracle, adversary)
    if not all(isinstance(table, dict) for table in tables) or game.get("loop") != "oracle":
        return data
    writer = problem_of(data).writer
    own = {field.name for field in dataclasses.fields(writer.options)} if writer else set()
    if oracle.get("restarts"):
        kept = {name: value for name, value in adversary.items() if name != "batch"}
    else:
        kept = {name: value for name, value in adversary.items() if name in own}
    return {**data, "adversary": kept}


def _check_loop_keys(game: GameConfig, tables: dict, origin: str) -> None:
    """Refuse the ``[game]`` and ``[oracle]`` keys that the run's loop does not read."""
    if game.loop not in LOOPS:
        raise ConfigError(f"{origin} [game]: loop must be one of {', '.join(LOOPS)}")
    if not game.simultaneous:
        for name in STEP_KEYS:
            if name in tables["game"]:
                raise ConfigError(
                    f'{origin} [game]: {name} applies to game.loop = "simultaneous" only'
                )
        return
    for name in tables["oracle"]:
        if name not in SIMULTANEOUS_ORACLE_KEYS:
            raise ConfigError(
                f"{origin} [oracle]: {name} does not apply to the simultaneous loop (it reads "
                f"{', '.join(SIMULTANEOUS_ORACLE_KEYS)})"
            )


def _head_table(problem, setting, table: dict, origin: str) -> HeadTable:
    """The ``[algorithm]`` table (the problem's policy head refuses keys and values it cannot
    use)."""
    head = {name: value for name, value in table.items() if name != "learning_rate"}
    try:
        problem.policy_head(setting, head)
    except (ValueError, TypeError) as error:
        also = "; learning_rate too" if "unknown key" in str(error) else ""
        raise ConfigError(f"{origin} [algorithm]: {error}{also}") from None
    rate = HeadTable.learning_rate
    if "learning_rate" in table:
        rate = _convert(table["learning_rate"], float, f"{origin} [algorithm] learning_rate")
    return HeadTable(tuple(sorted(head.items())), rate)


def _writer_options(problem, table: dict, origin: str):
    """The problem's own ``[adversary]`` keys (its writer's options; defaults for those not
    given) and the table's other keys: ``(options or None, {key: value})``."""
    if problem.writer is None or not isinstance(table, dict):
        return None, table
    own = {field.name for field in dataclasses.fields(problem.writer.options)}
    given = {name: value for name, value in table.items() if name in own}
    options = build_section(problem.writer.options, given, f"{origin} [adversary]")
    return options, {name: value for name, value in table.items() if name not in own}


def _writer_table(game: GameConfig, tables: dict, oracle: dict, origin: str):
    """The ``[adversary]`` table where the run has adversary networks: the simultaneous
    loop's writer, or the oracle loop's networks (``oracle.restarts > 0``; they write
    ``oracle.adversary_batch`` each); None without."""
    where = f"{origin} [adversary]"
    if not game.simultaneous:
        if not oracle.get("restarts"):
            if tables["adversary"]:
                raise ConfigError(
                    f'{origin}: [adversary] applies to game.loop = "simultaneous" or to '
                    "oracle.restarts > 0 only"
                )
            return None
        if "batch" in tables["adversary"]:
            raise ConfigError(f"{where}: batch does not apply: oracle.adversary_batch sets it")
    return build_section(AdversaryTable, tables["adversary"], where)


def load(path: str | Path):
    """Read and validate a TOML config file, of any problem (:func:`from_tables`)."""
    return from_tables(read_toml(path), str(path))


def read_toml(path: str | Path) -> dict:
    """The tables of the TOML config file at ``path``; ConfigError says why it cannot be
    read."""
    path = Path(path)
    text = read_text(path, "config", ConfigError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    except ValueError:  # an integer of thousands of digits: Python refuses to convert it
        raise ConfigError(f"{path} is not valid TOML: {PAST_64_BITS}") from None
    check_integers(data, f"{path}: ")
    return data


#: TOML's integers are 64-bit signed (TOML 1.0: one that cannot be held exactly is an error);
#: Python's reader takes any, and a message would then repeat every digit.
PAST_64_BITS = "an integer past 64 bits (TOML's integers are 64-bit signed)"


def check_integers(value, where: str) -> None:
    """ConfigError naming the key (``where`` + its dotted path) of the first integer in
    ``value`` (a TOML value: tables and arrays are walked) past 64 bits."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_integers(item, f"{where}{key}." if isinstance(item, dict) else f"{where}{key}")
    elif isinstance(value, list):
        for item in value:
            check_integers(item, where)
    elif isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ConfigError(f"{where.rstrip('.')}: {PAST_64_BITS}")


def read_options(cls, values: dict):
    """The frozen dataclass ``cls`` (with ``check() -> [message]``) from a problem's own keys
    of a table (its policy head's, say): ValueError names an unknown key, a value of the
    wrong type or what ``check`` finds wrong, in one line."""
    known = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown key {quoted(unknown[0])}; known: {', '.join(known)}")
    try:
        options = build_section(cls, values, "")
    except ConfigError as error:
        raise ValueError(str(error).strip()) from None
    if problems := options.check():
        raise ValueError("; ".join(problems))
    return options


def build_section(cls, values, where: str):
    """The dataclass ``cls`` from a config table: unknown keys and wrong types are refused
    with ConfigError, numbers converted to the field's type."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {quoted(unknown[0])}; known: {', '.join(fields)}")
    converted = {
        name: _convert(value, hints[name], f"{where} {name}") for name, value in values.items()
    }
    try:
        return cls(**converted)
    except ValueError as error:  # a section that checks itself on construction
        raise ConfigError(f"{where}: {error}") from None


def _convert(value, hint, where: str):
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list")
        item = typing.get_args(hint)[0]
        return tuple(_convert(v, item, where) for v in value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {quoted(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected a whole number, got {quoted(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {quoted(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {quoted(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {quoted(value)}")
        return value
    return value


def positive(section: str, config, *names: str) -> list[str]:
    """What is wrong with the whole-number fields ``names`` of ``config`` (each must be >= 1)."""
    return [f"{section}.{n} must be >= 1" for n in names if getattr(config, n) < 1]


#: The deepest network a config may ask for. Each layer is built in Python, so a mistyped
#: depth (a million layers) would hang before the memory pre-flight could size it.
MAX_LAYERS = 64


def layers_problems(section: str, layers: int) -> list[str]:
    """What is wrong with a network's ``layers`` (each network: 1 to :data:`MAX_LAYERS`)."""
    if 1 <= layers <= MAX_LAYERS:
        return []
    return [f"{section}.layers must lie in [1, {MAX_LAYERS}], got {layers}"]


#: The largest float32: training computes in float32, where a larger number is infinite.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def positive_float(section: str, config, *names: str) -> list[str]:
    """What is wrong with the number fields ``names`` of ``config`` (each must be > 0, and
    finite in float32, where training uses it)."""
    return [
        f"{section}.{n} must be > 0 and at most {FLOAT32_MAX:.3g} (float32)"
        for n in names
        if not 0 < getattr(config, n) <= FLOAT32_MAX
    ]
