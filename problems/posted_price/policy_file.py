"""Exported pricing policies: the ``advonline.pricing-policy`` JSON format and a NumPy-only loader.

This module imports NumPy and the standard library only (never JAX), so a deployment can load
and use a policy without the training stack: ``load(path).prices(utilisation, round=t)``.

Two versions share the top level::

    {
      "format": "advonline.pricing-policy",
      "version": 2 | 1,
      "kind": "randomised" | "deterministic" | "mixture",
      "setting": {"problem": "posted-price", "resources": K, "low": L, "high": U,
                  "rounds": T, "max_demand": ..., "demand_levels": ..., "divisible": ...,
                  "capacities": [...]},
      ...                                               # version-specific, below
      "provenance": {...},                              # config, seed, training steps, measured
                                                        # ratio, package version, created
      "checksum": "sha256 of the canonical JSON of every other entry",
      "sha256": "..."                                   # hexadecimal
    }

``sha256`` is the SHA-256 of every other entry (``checksum`` included) written as canonical
JSON: keys sorted, separators ``,`` and ``:``, no spaces, non-ASCII characters as they are
(``json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``). The loader
refuses a file it does not match, and loads one with neither entry (written before checksums)
with an ``UnverifiedFile`` warning.

**Version 2** (written by ``advonline export``, any K) stores the pricing network itself::

      "network": {
        "inputs": "joint" | "per-resource",
        "round_input": true | false,
        "activation": "tanh",
        "layers": [{"weights": W [in, out], "bias": b [out]}, ...],   # last layer: no activation
        "price_atoms": [a_1, ..., a_A]                                  # increasing unit prices
      }

In round t (0-based, of T) with utilisations ``y`` ``[K]`` (fraction of each capacity sold) the
features are ``u_k = 2 y_k - 1`` and ``r = 2 t / T - 1`` (``r = 0`` when ``round_input`` is
false: the round is hidden). ``joint``: one input row ``[u_1, ..., u_K, r]``, and the output
``[K * A]`` is read as K rows of A logits. ``per-resource``: one row per resource k,
``[u_k, mean of the other u_j, largest other u_j, r]`` (both -1 when K = 1), and the output is
that resource's A logits. Each hidden layer is ``tanh(x W + b)``; the last is ``x W + b``. A
softmax over each row gives the probability of posting each atom on that resource. The
``randomised`` policy is that distribution; the ``deterministic`` one posts its median atom (the
lowest with cumulative probability >= 1/2) on every resource.

**Kind ``mixture``** (version 2, K >= 2: what an oracle-loop run delivers when the
equilibrium mixture of its snapshots measures better than any one network) stores several
networks in place of ``network``::

      "members": [{"weight": w_1, "network": {...}}, ...]   # weights > 0, summing to 1

Before the first buyer of a sequence, draw member m with probability ``w_m`` (``draw(rng)``)
and post that network's prices for the whole sequence. Every member has the same inputs,
layers and atoms.

**Version 1** stores a table on the utilisation grid for each resource (``advonline export
--table`` writes one for K = 1; ``experiments/k2_lifted.py`` writes its lifted tables, one
resource's table posted on every resource)::

      "utilisation_grid": [y_0 = 0, ..., y_G = 1],      # increasing
      "round_dependent": true | false,
      "resources": [                                    # one entry per resource
        {"prices": P}                                   # deterministic: P[t][g] (or P[g])
        {"price_atoms": [a_1, ..., a_A],                # randomised: the prices it may post
         "probabilities": Q}                            # Q[t][g][j] (or Q[g][j]), rows sum to 1
      ]

Entry ``[t][g]`` of resource k is what it posts in round t when its own utilisation is
``y_g``, whatever has been sold of the other resources; ``round_dependent: false`` drops the
round axis. Every randomised resource has the same number of atoms A. Between grid points the
loader interpolates linearly: prices for a deterministic policy, probabilities (a mixture of
the two neighbouring distributions) for a randomised one.

**Drawing prices.** With several resources the K prices of one round are drawn through one
shared quantile: a single uniform ``q`` picks, on every resource, the first atom whose
cumulative probability exceeds ``q`` (the simulator does the same, so that a bundle meets all
its resources cheap together or none; see ``docs/method.md``). For one resource that is an
ordinary draw from the distribution.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from advonline import checksums
from advonline.errors import InputError
from advonline.export import read_json
from advonline.file_arrays import number_array

FORMAT = "advonline.pricing-policy"
VERSION = 2  # what ``advonline export`` writes; version 1 (tables) is still read and written
VERSIONS = (1, 2)
KINDS = ("deterministic", "randomised", "mixture")
INPUTS = {"joint": None, "per-resource": 4}  # input width (joint: K + 1)
PROBABILITY_TOLERANCE = 1e-5  # |sum of a row - 1| allowed (the file stores 8 significant digits)


class PolicyFileError(InputError):
    """A policy file that cannot be read as an ``advonline.pricing-policy`` (one-line message)."""


class PricingPolicy:
    """A loaded pricing policy; every method takes and returns NumPy arrays.

    ``utilisation`` is ``[K]`` (one state) or ``[N, K]`` (a batch), in [0, 1]. ``round`` is the
    0-based round index (an int, or ``[N]`` for a batch), required when ``round_dependent``.
    Subclasses give the distribution over ``atoms`` (``[K, A]``) in a batch of states.
    """

    atoms: np.ndarray | None
    round_dependent: bool

    def __init__(self, document: dict, source: str) -> None:
        self.document = document
        self.source = source
        self.version: int = document["version"]
        self.kind: str = document["kind"]
        self.setting: dict = document["setting"]
        self.rounds: int = int(self.setting["rounds"])
        self.resources: int = int(self.setting["resources"])
        self.provenance: dict = document.get("provenance", {})

    def _probabilities(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Probabilities ``[N, K, A]`` of the atoms in states ``y`` ``[N, K]``, rounds ``t``."""
        raise NotImplementedError

    def _posted(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Prices ``[N, K]``: the median atom of each resource's distribution."""
        probs = self._probabilities(y, t)
        median = np.argmax(np.cumsum(probs, axis=-1) >= 0.5, axis=-1)  # [N, K]
        return self.atoms[np.arange(self.resources)[None, :], median]

    def _states(self, utilisation, round) -> tuple[np.ndarray, np.ndarray, bool]:
        """Checked ``(y [N, K], t [N] int, whether the input was one state)``."""
        y = np.asarray(utilisation, np.float64)
        single = y.ndim == 1
        y = np.atleast_2d(y)
        if y.ndim != 2 or y.shape[1] != self.resources:
            raise ValueError(f"utilisation must be [K] or [N, K] with K = {self.resources}")
        if not np.all((y >= 0) & (y <= 1)):
            raise ValueError("utilisation must lie in [0, 1]")
        if not self.round_dependent:
            return y, np.zeros(y.shape[0], np.int64), single
        if round is None:
            raise ValueError("this policy depends on the round: pass round=t (0-based)")
        t = np.broadcast_to(np.asarray(round), (y.shape[0],))
        if not np.all((t >= 0) & (t < self.rounds) & (t == np.floor(t))):
            raise ValueError(f"round must be a whole number in [0, {self.rounds})")
        return y, t.astype(np.int64), single

    def distribution(self, utilisation, round=None) -> tuple[np.ndarray, np.ndarray]:
        """Randomised policy: ``(price_atoms [K, A], probabilities [K, A] or [N, K, A])``."""
        if self.kind != "randomised":
            raise ValueError("a deterministic policy has no price distribution; use prices()")
        y, t, single = self._states(utilisation, round)
        probs = self._probabilities(y, t)
        return self.atoms, probs[0] if single else probs

    def prices(self, utilisation, round=None) -> np.ndarray:
        """Unit prices ``[K]`` (or ``[N, K]``). For a randomised policy, its median price (the
        lowest atom with cumulative probability >= 1/2), the deterministic read-out."""
        y, t, single = self._states(utilisation, round)
        prices = self._posted(y, t)
        return prices[0] if single else prices

    def sample_prices(self, utilisation, rng: np.random.Generator, round=None) -> np.ndarray:
        """Prices ``[K]`` (or ``[N, K]``) drawn with ``rng`` through one shared quantile per
        state (module docstring); a deterministic policy returns its prices."""
        if self.kind == "deterministic":
            return self.prices(utilisation, round)
        y, t, single = self._states(utilisation, round)
        cumulative = np.cumsum(self._probabilities(y, t), axis=-1)  # [N, K, A]
        quantile = rng.random(y.shape[0])[:, None, None] * cumulative[..., -1:]
        index = np.minimum((cumulative <= quantile).sum(axis=-1), cumulative.shape[-1] - 1)
        prices = self.atoms[np.arange(self.resources)[None, :], index]
        return prices[0] if single else prices


class NetworkPolicy(PricingPolicy):
    """Version 2: the pricing network, evaluated in float64 (module docstring)."""

    def __init__(self, document: dict, source: str = "policy file") -> None:
        _validate_setting(document, source)
        _validate_network(document, source)
        super().__init__(document, source)
        network = document["network"]
        self.inputs: str = network["inputs"]
        self.round_dependent: bool = network["round_input"]
        self.layers = [
            (np.asarray(layer["weights"], np.float64), np.asarray(layer["bias"], np.float64))
            for layer in network["layers"]
        ]
        atoms = np.asarray(network["price_atoms"], np.float64)
        self.atoms = np.broadcast_to(atoms, (self.resources, atoms.size))

    def features(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The network's input rows: ``[N, K + 1]`` (joint) or ``[N, K, 4]`` (per resource)."""
        scaled = 2 * y - 1
        rounds = 2 * (t / self.rounds) - 1 if self.round_dependent else np.zeros(y.shape[0])
        if self.inputs == "joint":
            return np.concatenate([scaled, rounds[:, None]], axis=-1)
        count = self.resources
        if count > 1:
            others = ~np.eye(count, dtype=bool)  # row k marks every resource but k
            spread = scaled[:, None, :]  # [N, 1, K]
            mean = np.where(others, spread, 0).sum(-1) / (count - 1)
            largest = np.where(others, spread, -1).max(-1)
        else:
            mean = largest = np.full_like(scaled, -1)
        rounds = np.broadcast_to(rounds[:, None], scaled.shape)
        return np.stack([scaled, mean, largest, rounds], axis=-1)

    def logits(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Logits ``[N, K, A]`` over the price atoms."""
        values = self.features(y, t)
        for weights, bias in self.layers[:-1]:
            values = np.tanh(values @ weights + bias)
        weights, bias = self.layers[-1]
        values = values @ weights + bias
        return values.reshape(y.shape[0], self.resources, -1)

    def _probabilities(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        logits = self.logits(y, t)
        logits = logits - logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=-1, keepdims=True)


class TablePolicy(PricingPolicy):
    """Version 1: a table on the utilisation grid, interpolated between grid points."""

    def __init__(self, document: dict, source: str = "policy file") -> None:
        _validate_setting(document, source)
        _validate_table(document, source)
        super().__init__(document, source)
        self.round_dependent: bool = document["round_dependent"]
        self.grid = np.asarray(document["utilisation_grid"], np.float64)
        resources = document["resources"]
        if self.kind == "deterministic":
            self.table = np.stack([np.asarray(r["prices"], np.float64) for r in resources])
            self.atoms = None
        else:
            self.table = np.stack([np.asarray(r["probabilities"], np.float64) for r in resources])
            self.atoms = np.stack([np.asarray(r["price_atoms"], np.float64) for r in resources])
        if not self.round_dependent:  # one shared table for every round
            self.table = self.table[:, None]

    def _rows(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The interpolated table rows ``[N, K, ...]``."""
        g = self.grid.size
        lower = np.clip(np.searchsorted(self.grid, y, side="right") - 1, 0, g - 2)  # [N, K]
        weight = (y - self.grid[lower]) / (self.grid[lower + 1] - self.grid[lower])
        k = np.arange(self.resources)[None, :]
        below = self.table[k, t[:, None], lower]
        above = self.table[k, t[:, None], lower + 1]
        weight = weight.reshape(weight.shape + (1,) * (below.ndim - 2))
        return (1.0 - weight) * below + weight * above

    def _probabilities(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self._rows(y, t)

    def _posted(self, y: np.ndarray, t: np.ndarray) -> np.ndarray:
        if self.kind == "deterministic":
            return self._rows(y, t)
        return super()._posted(y, t)


class MixturePolicy(PricingPolicy):
    """Version 2, kind ``mixture`` (K >= 2): several networks, one drawn per input with its
    weight (module docstring). It posts nothing itself: ``draw(rng)`` gives the member to
    follow for one whole sequence of buyers."""

    def __init__(self, document: dict, source: str = "policy file") -> None:
        _validate_setting(document, source)
        members = document.get("members")
        if not isinstance(members, list) or not members:
            _fail(source, "a mixture needs 'members', a non-empty list")
        if int(document["setting"]["resources"]) < 2:
            _fail(source, "a mixture of networks covers K >= 2 (K = 1 delivers one network)")
        self.members: list[NetworkPolicy] = []
        weights = []
        for index, member in enumerate(members):
            if not isinstance(member, dict) or not {"weight", "network"} <= member.keys():
                _fail(source, f"members[{index}] must be an object with 'weight' and 'network'")
            weight = member["weight"]
            if not isinstance(weight, (int, float)) or isinstance(weight, bool):
                _fail(source, f"members[{index}].weight must be a number, got {weight!r}")
            if not 0 < weight <= 1:  # NaN fails too
                _fail(source, f"members[{index}].weight must lie in (0, 1], got {weight!r}")
            weights.append(float(weight))
            single = {**document, "kind": "randomised", "network": member["network"]}
            self.members.append(NetworkPolicy(single, f"{source} members[{index}]"))
        total = sum(weights)
        if abs(total - 1) > PROBABILITY_TOLERANCE:
            _fail(source, f"the members' weights must sum to 1, sum to {total:.8g}")
        first = self.members[0]
        shapes = [[w.shape for w, _ in member.layers] for member in self.members]
        if any(
            m.inputs != first.inputs
            or m.round_dependent != first.round_dependent
            or not np.array_equal(m.atoms, first.atoms)
            or shape != shapes[0]
            for m, shape in zip(self.members, shapes, strict=True)
        ):
            _fail(source, "every member network must have the same inputs, layers and atoms")
        super().__init__(document, source)
        self.weights = np.asarray(weights) / total
        self.round_dependent = first.round_dependent
        self.atoms = first.atoms

    def draw(self, rng: np.random.Generator) -> NetworkPolicy:
        """The member network to follow for one input (index ``m`` with probability
        ``weights[m]``)."""
        return self.members[int(rng.choice(len(self.members), p=self.weights))]

    def _no_prices(self, *args, **kwargs):
        raise ValueError(
            "a mixture posts no prices itself: draw the member for each input first, "
            "member = policy.draw(rng)"
        )

    prices = distribution = sample_prices = _no_prices


def parse(document, source: str = "policy file") -> PricingPolicy:
    """A policy from a decoded JSON document (either version)."""
    if not isinstance(document, dict):
        _fail(source, "top level must be a JSON object")
    if document.get("format") != FORMAT:
        _fail(source, f"format must be {FORMAT!r}, got {document.get('format')!r}")
    version = document.get("version")
    if version not in VERSIONS or isinstance(version, bool):
        _fail(
            source,
            f"unsupported version {version!r} (this reader: {', '.join(map(str, VERSIONS))})",
        )
    if version == 1:
        return TablePolicy(document, source)
    return (MixturePolicy if document.get("kind") == "mixture" else NetworkPolicy)(document, source)


def load(path: str | Path) -> PricingPolicy:
    """Read and validate a policy file; :class:`PolicyFileError` says what is wrong in one line."""
    path = Path(path)
    document = read_json(path, "policy file", PolicyFileError)
    verified = checksums.verified(document, f"policy file {path}", PolicyFileError)
    try:
        policy = parse(document, f"policy file {path}")
    except RecursionError:  # a deep structure where a list of numbers belongs
        raise PolicyFileError(f"policy file {path} nests too deeply to be a policy") from None
    if not verified:
        checksums.note_unverified(f"policy file {path}")
    return policy


def _fail(source: str, message: str) -> None:
    raise PolicyFileError(f"{source}: {message}")


def _array(value, source: str, name: str, ndim: int) -> np.ndarray:
    array = number_array(value, f"{source}: {name}", PolicyFileError)
    if array.ndim != ndim:
        _fail(source, f"{name} must have {ndim} axes, has shape {list(array.shape)}")
    if not np.all(np.isfinite(array)):
        _fail(source, f"{name} holds NaN or infinite values")
    return array


def _network_array(value, source: str, name: str, ndim: int) -> np.ndarray:
    """A network's numbers: as :func:`_array`, and within float32's range, where the network
    is evaluated (a larger number would become infinite there)."""
    array = _array(value, source, name, ndim)
    if np.any(np.abs(array) > np.finfo(np.float32).max):
        _fail(source, f"{name} holds numbers beyond float32's range, where the network runs")
    return array


def _validate_setting(document: dict, source: str) -> None:
    """The fields both versions share; the first failure raises :class:`PolicyFileError`."""
    for field in ("kind", "setting"):
        if field not in document:
            _fail(source, f"missing field {field!r}")
    if document["kind"] not in KINDS:
        _fail(source, f"kind must be one of {KINDS}, got {document['kind']!r}")
    setting = document["setting"]
    if not isinstance(setting, dict):
        _fail(source, "setting must be an object")
    for field in ("low", "high"):
        if not isinstance(setting.get(field), (int, float)) or isinstance(setting[field], bool):
            _fail(source, f"setting.{field} must be a number")
    if not (0 < setting["low"] < setting["high"] and math.isfinite(setting["high"])):
        _fail(source, "setting needs 0 < low < high")
    for field, default in (("rounds", None), ("resources", None), ("demand_levels", 1)):
        value = setting.get(field, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _fail(source, f"setting.{field} must be a whole number >= 1, got {value!r}")
    if not isinstance(setting.get("divisible", True), bool):
        _fail(source, f"setting.divisible must be true or false, got {setting['divisible']!r}")
    provenance = document.get("provenance", {})
    if not isinstance(provenance, dict):
        _fail(source, "provenance must be an object")
    if not isinstance(provenance.get("algorithm", ""), str):
        _fail(source, "provenance.algorithm must be a string")


def _validate_network(document: dict, source: str) -> None:
    """Version 2's ``network``: known inputs, layer shapes that chain, finite weights."""
    network = document.get("network")
    if not isinstance(network, dict):
        _fail(source, "missing field 'network' (an object)")
    if not isinstance(network.get("inputs"), str) or network["inputs"] not in INPUTS:
        _fail(
            source, f"network.inputs must be one of {list(INPUTS)}, got {network.get('inputs')!r}"
        )
    if not isinstance(network.get("round_input"), bool):
        _fail(source, "network.round_input must be true or false")
    if network.get("activation") != "tanh":
        _fail(source, f"network.activation must be 'tanh', got {network.get('activation')!r}")
    atoms = _network_array(network.get("price_atoms"), source, "network.price_atoms", 1)
    if atoms.size < 1 or np.any(atoms < 0) or np.any(np.diff(atoms) <= 0):
        _fail(source, "network.price_atoms must be non-negative and increasing")
    layers = network.get("layers")
    if not isinstance(layers, list) or not layers:
        _fail(source, "network.layers must be a non-empty list")
    resources = int(document["setting"]["resources"])
    width = INPUTS[network["inputs"]] or resources + 1
    outputs = atoms.size if network["inputs"] == "per-resource" else resources * atoms.size
    for index, layer in enumerate(layers):
        name = f"network.layers[{index}]"
        if not isinstance(layer, dict) or not {"weights", "bias"} <= layer.keys():
            _fail(source, f"{name} must be an object with 'weights' and 'bias'")
        weights = _network_array(layer["weights"], source, f"{name}.weights", 2)
        bias = _network_array(layer["bias"], source, f"{name}.bias", 1)
        if weights.shape[0] != width or bias.size != weights.shape[1]:
            _fail(
                source,
                f"{name} must have weights [{width}, n] and bias [n], has "
                f"{list(weights.shape)} and {list(bias.shape)}",
            )
        width = weights.shape[1]
    if width != outputs:
        _fail(source, f"the last layer must have {outputs} outputs, has {width}")


def _validate_table(document: dict, source: str) -> None:
    """Version 1's grid and tables."""
    if document["kind"] == "mixture":
        _fail(source, "version 1 stores tables; a mixture of networks is version 2")
    for field in ("utilisation_grid", "round_dependent", "resources"):
        if field not in document:
            _fail(source, f"missing field {field!r}")
    if not isinstance(document["round_dependent"], bool):
        _fail(source, "round_dependent must be true or false")
    setting = document["setting"]
    grid = _array(document["utilisation_grid"], source, "utilisation_grid", 1)
    if grid.size < 2 or grid[0] != 0 or grid[-1] != 1 or np.any(np.diff(grid) <= 0):
        _fail(source, "utilisation_grid must increase strictly from 0 to 1")
    resources = document["resources"]
    if not isinstance(resources, list) or len(resources) != setting["resources"]:
        _fail(source, f"resources must list one entry per resource ({setting['resources']})")
    leading = [int(setting["rounds"])] if document["round_dependent"] else []
    shape = [*leading, grid.size]
    atom_counts = set()  # one for every resource: the loader stacks their tables
    for k, entry in enumerate(resources):
        name = f"resources[{k}]"
        if not isinstance(entry, dict):
            _fail(source, f"{name} must be an object")
        if document["kind"] == "deterministic":
            if "prices" not in entry:
                _fail(source, f"{name} needs 'prices'")
            prices = _array(entry["prices"], source, f"{name}.prices", len(shape))
            if list(prices.shape) != shape:
                _fail(source, f"{name}.prices must have shape {shape}, has {list(prices.shape)}")
            if np.any(prices < 0):
                _fail(source, f"{name}.prices holds negative prices")
            continue
        for field in ("price_atoms", "probabilities"):
            if field not in entry:
                _fail(source, f"{name} needs {field!r}")
        atoms = _array(entry["price_atoms"], source, f"{name}.price_atoms", 1)
        if np.any(atoms < 0):
            _fail(source, f"{name}.price_atoms holds negative prices")
        atom_counts.add(atoms.size)
        if len(atom_counts) > 1:
            _fail(source, f"{name}.price_atoms must have as many atoms as resources[0]'s")
        probs = _array(entry["probabilities"], source, f"{name}.probabilities", len(shape) + 1)
        if list(probs.shape) != [*shape, atoms.size]:
            _fail(
                source,
                f"{name}.probabilities must have shape {[*shape, atoms.size]}, has "
                f"{list(probs.shape)}",
            )
        if np.any(probs < 0) or np.any(np.abs(probs.sum(-1) - 1) > PROBABILITY_TOLERANCE):
            _fail(source, f"{name}.probabilities must be non-negative rows summing to 1")
