"""Training configurations: data in ``experiments/configs/*.toml``, validated here.

A config has six tables, each optional: ``[problem]`` (its ``name``; the registry's
default problem without it), the problem's own ``[setting]``, ``[algorithm]`` and
``[adversary]`` (:attr:`advonline.problem.Training.sections`), and the core's ``[game]`` and
``[oracle]`` (the epochs and their measurements; defaults below). Unknown tables or keys, wrong
types and invalid values are refused with one :class:`ConfigError` line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from pathlib import Path
from typing import Any

import jax

from advonline.folders import read_text

LOOPS = ("simultaneous", "oracle")


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class GameConfig:
    """Alternating updates, replay of past instances, and what is mixed into training."""

    steps: int = 360  # a multiple of oracle.epoch_steps
    algorithm_steps: int = 1  # n_alg updates per step
    adversary_steps: int = 1  # n_adv updates per step (0: a frozen adversary, for ablations)
    replay_size: int = 256  # past hard instances the algorithm keeps training against
    replay_per_step: int = 8  # hardest instances of each adversary batch added to the replay
    temperature: float = 0.02  # softmin over payoffs: the adversary's weights on its instances
    seed: int = 0
    # "simultaneous": one live adversary network against the algorithm, step by step,
    # measured every oracle.epoch_steps (advonline/simultaneous_loop.py; K >= 2: each
    # batch's OPT from the JAX dual LP inside the step, divisible buyers only; see
    # problems/posted_price/sampled_game.py); "oracle": the oracle loop
    # (advonline/oracle_loop.py). Both read the [oracle] table
    loop: str = "simultaneous"
    # devices the batches are sharded over (advonline/parallel.py): 0 = every device JAX sees;
    # a run may resume on another count (its figures agree up to float rounding)
    devices: int = 0

    def check(self) -> list[str]:
        problems = positive("game", self, "steps", "algorithm_steps")
        if self.devices < 0:
            problems.append("game.devices must be >= 0 (0: every device)")
        if self.loop not in LOOPS:
            problems.append(f"game.loop must be one of {', '.join(LOOPS)}")
        if self.adversary_steps < 0:
            problems.append("game.adversary_steps must be >= 0")
        problems += positive_float("game", self, "temperature")
        if self.replay_size < 0 or self.replay_per_step < 0:
            problems.append("game.replay_size and game.replay_per_step must be >= 0")
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
    anchor: float = 3.0  # proximal weight: each update also descends anchor x the mean over
    # every state (round, utilisation) of KL(epoch's starting distribution || current one)
    restarts: int = 4  # the oracles' budget per epoch (OracleBudget)
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
    mixtures: bool = True  # K >= 2: each probed epoch also probes the equilibrium mixture of
    # snapshots, and the run delivers it when its measured worst case is the lowest so far
    closing_rounds: int = 0  # K >= 2: the last measurement probes the mixture up to this many
    # more times, each probe's finds joining the archive and the restricted game solved again
    # (the adversary's side of double oracle over the final snapshots), until the mixture's
    # exploitability is at most closing_tolerance
    closing_tolerance: float = 0.01
    rescore_best: bool = False  # without a certificate, one network kept: before a probed
    # network is compared with the kept one, the kept one's measured worst case is raised to
    # its worst ratio on the current archive, so both are measured on everything found so far
    # (the archive grows harder, and a network measured early would otherwise stay kept)

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
        if min(self.restarts, self.adversary_steps, self.chains, self.search_steps) < 0:
            problems.append("oracle budgets (restarts, steps, chains) must be >= 0")
        if not 0 <= self.anchor < float("inf"):
            problems.append("oracle.anchor must be a finite number >= 0")
        if not 0 <= self.worst_case_weight <= 1:
            problems.append("oracle.worst_case_weight must lie in [0, 1]")
        if self.closing_rounds < 0:
            problems.append("oracle.closing_rounds must be >= 0")
        if not 0 <= self.closing_tolerance < float("inf"):
            problems.append("oracle.closing_tolerance must be a finite number >= 0")
        return problems


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs: the problem's own sections (``setting``,
    ``algorithm``, ``adversary``: the classes its :attr:`~advonline.problem.Training.sections`
    name) and the core's (``game``, ``oracle``). Build one with :func:`from_dict`.

    It answers the questions every run config answers (what the run driver, the checkpoint
    and the commands ask; :class:`advonline.problem_config.ProblemRunConfig` answers the same):
    ``problem``, ``setting``, ``seed``, ``devices``, ``training_loop``, ``total_steps``,
    ``temperature``, ``update``, :meth:`to_tables`, :meth:`build_game`,
    :meth:`initial_state`, :meth:`training_needs`, :meth:`on_devices` and :meth:`same_run`."""

    problem: Any  # the registry's Problem (hashed by identity)
    setting: Any
    algorithm: Any
    adversary: Any
    game: GameConfig = GameConfig()
    oracle: OracleConfig = OracleConfig()

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
        return self.game.steps

    @property
    def temperature(self) -> float:
        return self.game.temperature

    @property
    def update(self) -> str:
        """How the algorithm's gradient is computed (the figures compare updates)."""
        return self.algorithm.update

    def to_tables(self) -> dict:
        """Plain data (TOML/JSON-ready); :func:`from_tables` reads it back."""
        sections = [f.name for f in dataclasses.fields(self) if f.name != "problem"]
        data = {name: dataclasses.asdict(getattr(self, name)) for name in sections}
        return {"problem": {"name": self.problem.name}, **data}

    def training(self):
        """The problem's :class:`~advonline.problem.Training` (what the full game asks of it)."""
        return self.problem.training

    def build_game(self, mesh=None):
        """The game this run plays (the problem's), its batches sharded over ``mesh``."""
        return self.training().game(self, mesh)

    def initial_state(self, game, key: jax.Array):
        """The state a run of this config starts from (either loop)."""
        if self.game.loop == "oracle":
            from advonline.oracle_loop import init_oracle_state

            return init_oracle_state(game, self.oracle, key)
        return game.init_state(key)

    def training_needs(self) -> list:
        """The largest arrays of training (:mod:`advonline.preflight`)."""
        return self.training().training_needs(self)

    def on_devices(self, count: int) -> RunConfig:
        """This config with ``game.devices = count`` (the ``--devices`` flag)."""
        return dataclasses.replace(self, game=dataclasses.replace(self.game, devices=count))

    def same_run(self, other) -> bool:
        """Whether ``other`` describes the same run: equal but perhaps for the device count."""
        return isinstance(other, RunConfig) and self.on_devices(0) == other.on_devices(0)


#: The core's own sections of a run config.
CORE_SECTIONS = {"game": GameConfig, "oracle": OracleConfig}


def from_dict(data: dict, origin: str = "config") -> RunConfig:
    """Validate plain data into a :class:`RunConfig`; :class:`ConfigError` names what is wrong.

    The ``[problem] name`` (default: the registry's default problem) says whose sections
    ``[setting]``, ``[algorithm]`` and ``[adversary]`` are; the problem checks how its
    sections and the core's fit together (:attr:`~advonline.problem.Training.check_run`)."""
    problem = problem_of(data, origin)
    if problem.training is None:
        raise ConfigError(f"{origin}: {problem.name} trains with 'advonline run' only")
    sections = {**problem.training.sections, **CORE_SECTIONS}
    unknown = sorted(set(data) - set(sections) - {"problem"})
    if unknown:
        known = ", ".join(["problem", *sections])
        raise ConfigError(f"{origin}: unknown section [{unknown[0]}]; known: {known}")
    built = {}
    for section, cls in sections.items():
        built[section] = build_section(cls, data.get(section, {}), f"{origin} [{section}]")
    config = RunConfig(problem, **built)
    problems = [p for name, part in built.items() if name != "setting" for p in part.check()]
    problems += problem.training.check_run(config)
    if config.game.steps % config.oracle.epoch_steps:
        problems.append("game.steps must be a multiple of oracle.epoch_steps")
    if problems:
        raise ConfigError(f"{origin}: {'; '.join(problems)}")
    return config


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
        raise ConfigError(f"{origin} [problem] name: expected a string, got {name!r}")
    try:
        return registry.get(name)
    except KeyError as error:
        raise ConfigError(f"{origin}: {error.args[0]}") from None


def from_tables(data: dict, origin: str = "config"):
    """The run config of any problem that plain data describes: a :class:`RunConfig` for a
    problem that trains with the full game, else the interface's
    (:class:`advonline.problem_config.ProblemRunConfig`). ConfigError names what is wrong."""
    if problem_of(data, origin).training is None:
        from advonline.problem_config import from_dict as interface_config

        return interface_config(data, origin)
    return from_dict(data, origin)


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
    return data


def build_section(cls, values, where: str):
    """The dataclass ``cls`` from a config table: unknown keys and wrong types are refused
    with ConfigError, numbers converted to the field's type."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(fields)}")
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
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected a whole number, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def positive(section: str, config, *names: str) -> list[str]:
    """What is wrong with the whole-number fields ``names`` of ``config`` (each must be >= 1)."""
    return [f"{section}.{n} must be >= 1" for n in names if getattr(config, n) < 1]


def positive_float(section: str, config, *names: str) -> list[str]:
    """What is wrong with the number fields ``names`` of ``config`` (each must be > 0)."""
    return [f"{section}.{n} must be > 0" for n in names if not getattr(config, n) > 0]
