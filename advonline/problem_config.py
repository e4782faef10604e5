"""The config of a run of a problem of the interface (``advonline run`` and ``train``; the
runs themselves: advonline/train.py and advonline/pipeline.py, as every problem's): the
problem, its setting and policy head, the ``[game]`` table (the loop, its seed, epochs and
devices), the ``[oracle]`` table and, for the simultaneous loop or an oracle with adversary
networks, the ``[adversary]`` table. Keys a run's loop does not read are refused in one line
(ConfigError)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from advonline import preflight, simultaneous_loop
from advonline.configs import ConfigError, OracleConfig, build_section, problem_of, read_toml
from advonline.oracle_loop import init_oracle_state
from advonline.preflight import Need, token_needs
from advonline.problem import Problem
from advonline.problem_game import ProblemGame
from advonline.simultaneous import init_state

#: [oracle] keys that a problem of the interface has no use for, and why.
NOT_APPLICABLE = {
    "anchor": "the policy has no per-state distributions to anchor",
    "mixtures": "one network is delivered, never a mixture of snapshots",
    "closing_rounds": "one network is delivered, never a mixture of snapshots",
    "closing_tolerance": "one network is delivered, never a mixture of snapshots",
}
#: The full game's [oracle] defaults that a problem of the interface runs without.
INTERFACE_ORACLE = {"anchor": 0.0, "mixtures": False}
#: The [oracle] defaults of a problem of the interface that differ from the full game's: no
#: adversary networks unless asked for (hill climbing and the certificate suffice where the
#: problem certifies), and a kept network measured again on the current archive.
INTERFACE_DEFAULTS = {"restarts": 0, "rescore_best": True}


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """A config's ``[game]`` table: the run's seed, how many epochs it trains, its learning
    rate, the softmin's temperature and the loop (advonline/oracle_loop.py, or
    advonline/simultaneous_loop.py with its step's own keys)."""

    seed: int = 0
    epochs: int = 12
    learning_rate: float = 0.01
    temperature: float = 0.01
    devices: int = 0  # the devices the batches are sharded over (0: every one JAX sees)
    loop: str = "oracle"  # or "simultaneous"
    adversary_steps: int = 1  # the simultaneous loop: adversary updates per step
    algorithm_steps: int = 1  # algorithm updates per step
    replay_size: int = 256  # past hard instances kept, first in, first out
    replay_per_step: int = 8  # each batch's hardest instances replayed

    @property
    def simultaneous(self) -> bool:
        return self.loop == "simultaneous"

    def table(self) -> dict:
        """The ``[game]`` table of this config (the simultaneous step's keys only for that
        loop, which alone accepts them)."""
        table = dataclasses.asdict(self)
        skipped = () if self.simultaneous else simultaneous_loop.STEP_KEYS
        return {name: value for name, value in table.items() if name not in skipped}

    def step_config(self) -> simultaneous_loop.StepConfig | None:
        """What the simultaneous step reads (None for the oracle loop)."""
        if not self.simultaneous:
            return None
        step = {name: getattr(self, name) for name in simultaneous_loop.STEP_KEYS}
        return simultaneous_loop.StepConfig(**step, temperature=self.temperature)


@dataclasses.dataclass(frozen=True)
class ProblemRunConfig:
    """A run of a problem of the interface: it answers what every run config answers
    (:class:`advonline.configs.RunConfig` lists the questions)."""

    problem: Problem
    setting: object
    head: dict
    loop: LoopConfig
    oracle: OracleConfig
    adversary: simultaneous_loop.AdversaryTable | None = None  # the simultaneous loop's

    @property
    def seed(self) -> int:
        return self.loop.seed

    @property
    def devices(self) -> int:
        return self.loop.devices

    @property
    def training_loop(self) -> str:
        return self.loop.loop

    @property
    def total_steps(self) -> int:
        return self.loop.epochs * self.oracle.epoch_steps

    @property
    def temperature(self) -> float:
        return self.loop.temperature

    @property
    def update(self) -> str:
        return "gradient"  # the exact gradient of the payoffs

    def on_devices(self, count: int) -> ProblemRunConfig:
        """This config sharded over ``count`` devices (the ``--devices`` flag)."""
        return dataclasses.replace(self, loop=dataclasses.replace(self.loop, devices=count))

    def to_tables(self) -> dict:
        """The config as the tables :func:`from_dict` reads back to an equal config (what a
        checkpoint stores: a resume must continue the same run)."""
        setting = {k: v for k, v in self.setting.describe().items() if k != "problem"}
        skipped = {*NOT_APPLICABLE, *INTERFACE_ORACLE}
        oracle = {k: v for k, v in dataclasses.asdict(self.oracle).items() if k not in skipped}
        if self.loop.simultaneous:
            oracle = {k: v for k, v in oracle.items() if k in simultaneous_loop.ORACLE_KEYS}
        tables = {
            "problem": {"name": self.problem.name},
            "setting": setting,
            "algorithm": dict(self.head),
            "game": self.loop.table(),
            "oracle": oracle,
        }
        if self.adversary is not None:
            adversary = dataclasses.asdict(self.adversary)
            if not self.loop.simultaneous:  # the oracle's networks write adversary_batch
                del adversary["batch"]
            tables["adversary"] = adversary
        return tables

    def build_game(self, mesh=None) -> ProblemGame:
        """The game of this run, its batches sharded over ``mesh``."""
        loop = self.loop
        args = (self.problem, self.setting, self.head, loop.learning_rate, mesh)
        return ProblemGame.build(*args, loop.step_config(), self.adversary)

    def initial_state(self, game: ProblemGame, key: jax.Array):
        """The state a run of this config starts from (either loop)."""
        if self.loop.simultaneous:
            return init_state(game, key)
        return init_oracle_state(game, self.oracle, key)

    def training_needs(self) -> list[Need]:
        """The largest arrays of training this run, as the problem's encoding sizes them
        (:func:`advonline.preflight.token_needs`): the adversary networks' batch, and the
        probe's candidates or the archive, whichever is larger."""
        oracle = self.oracle
        probe = oracle.budget().scaled(oracle.probe_scale)
        batch = 0
        if self.adversary is not None:
            batch = self.adversary.batch if self.loop.simultaneous else oracle.adversary_batch
        proposals = max(probe.chains * probe.candidates, oracle.archive_size)
        return token_needs(self.problem.encoding(self.setting), batch, proposals)

    def same_run(self, other) -> bool:
        """Whether ``other`` trains the same run (the devices it is sharded over aside)."""
        return isinstance(other, ProblemRunConfig) and other.on_devices(0) == self.on_devices(0)


def from_dict(data: dict, origin: str) -> ProblemRunConfig:
    """The run a parsed config describes; ConfigError names what is wrong."""
    problem = problem_of(data, origin)
    known = {"problem", "setting", "algorithm", "adversary", "game", "oracle"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{origin}: unknown table [{unknown[0]}]; known: {sorted(known)}")
    try:
        setting = problem.setting.from_config(dict(data.get("setting", {})))
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{origin}: [setting]: {error}") from None
    # one input's logits must fit before anything is built from the setting (a setting too
    # large for memory is refused here, not in a hang while its head is built)
    preflight.check(token_needs(problem.encoding(setting), 1, 1))
    sections = ("algorithm", "adversary", "game", "oracle")
    tables = {section: data.get(section, {}) for section in sections}
    for section, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{origin} [{section}]: expected a table")
    try:  # the head refuses keys and values it cannot use
        problem.policy_head(setting, tables["algorithm"])
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{origin} [algorithm]: {error}") from None
    loop = build_section(LoopConfig, tables["game"], f"{origin} [game]")
    adversary = _check_loop_tables(loop, tables, origin)
    for name in tables["oracle"]:
        if name in NOT_APPLICABLE:
            raise ConfigError(f"{origin} [oracle]: {name} does not apply: {NOT_APPLICABLE[name]}")
    given = {**INTERFACE_DEFAULTS, **tables["oracle"], **INTERFACE_ORACLE}
    oracle = build_section(OracleConfig, given, f"{origin} [oracle]")
    problems = ["game.epochs must be >= 1"] if loop.epochs < 1 else []
    problems += [
        f"game.{name} must be > 0"
        for name in ("learning_rate", "temperature")
        if not getattr(loop, name) > 0
    ]
    if loop.seed < 0 or loop.devices < 0:
        problems.append("game.seed and game.devices must be >= 0")
    if min(loop.adversary_steps, loop.replay_size, loop.replay_per_step) < 0:
        problems.append("game.adversary_steps, replay_size and replay_per_step must be >= 0")
    if loop.algorithm_steps < 1:
        problems.append("game.algorithm_steps must be >= 1")
    problems += adversary.check() if adversary is not None else []
    if oracle.chains < 1 or oracle.search_steps < 1 or oracle.candidates < 1:
        problems.append("oracle.chains, search_steps and candidates must be >= 1")
    problems += oracle.check()
    if problems:
        raise ConfigError(f"{origin}: {'; '.join(problems)}")
    return ProblemRunConfig(problem, setting, dict(tables["algorithm"]), loop, oracle, adversary)


def _check_loop_tables(loop: LoopConfig, tables: dict, origin: str):
    """The ``[adversary]`` table of a simultaneous run, or of an oracle loop whose oracles
    train adversary networks (``oracle.restarts``); None without networks. Refuses the keys
    and tables that the run's loop does not read."""
    where = f"{origin} [adversary]"
    if loop.loop not in ("oracle", "simultaneous"):
        raise ConfigError(f'{origin} [game]: loop must be "oracle" or "simultaneous"')
    if not loop.simultaneous:
        for name in simultaneous_loop.STEP_KEYS:
            if name in tables["game"]:
                raise ConfigError(
                    f'{origin} [game]: {name} applies to game.loop = "simultaneous" only'
                )
        if not tables["oracle"].get("restarts", INTERFACE_DEFAULTS["restarts"]):
            if tables["adversary"]:
                raise ConfigError(
                    f'{origin}: [adversary] applies to game.loop = "simultaneous" or to '
                    "oracle.restarts > 0 only"
                )
            return None
        if "batch" in tables["adversary"]:
            raise ConfigError(f"{where}: batch does not apply: oracle.adversary_batch sets it")
        return build_section(simultaneous_loop.AdversaryTable, tables["adversary"], where)
    for name in tables["oracle"]:
        if name not in simultaneous_loop.ORACLE_KEYS:
            raise ConfigError(
                f"{origin} [oracle]: {name} does not apply to the simultaneous loop (it reads "
                f"{', '.join(simultaneous_loop.ORACLE_KEYS)})"
            )
    return build_section(simultaneous_loop.AdversaryTable, tables["adversary"], where)


def read_config(path: str | Path) -> ProblemRunConfig:
    """The run the config file at ``path`` describes (ConfigError: it cannot be read)."""
    return from_dict(read_toml(path), str(path))
