"""Exported pricing policies: the ``advonline.pricing-policy`` JSON format and a NumPy-only loader.

This module imports NumPy and the standard library only (never JAX), so a deployment can load
and use a policy without the training stack: ``load(path).prices(utilisation)``.

Format, version 1 (written by ``advonline export``)::

    {
      "format": "advonline.pricing-policy",
      "version": 1,
      "kind": "randomised" | "deterministic",
      "setting": {"problem": "posted-price", "resources": K, "low": L, "high": U,
                  "rounds": T, "max_demand": ..., "demand_levels": ..., "divisible": ...,
                  "capacities": [...]},
      "utilisation_grid": [y_0 = 0, ..., y_G = 1],      # increasing, shared by all resources
      "round_dependent": true | false,
      "resources": [                                    # one entry per resource k
        {"prices": P}                                   # deterministic: P[t][g] (or P[g])
        {"price_atoms": [a_1, ..., a_A],                # randomised: the prices it may post
         "probabilities": Q}                            # Q[t][g][j] (or Q[g][j]), rows sum to 1
      ],
      "provenance": {...}                               # config, seed, training steps, measured
    }                                                   # ratio, package version, created

Entry ``[t][g]`` is what the policy posts on resource k in round t (0-based, of T) when the
utilisation of resource k is ``y_g`` (fraction of capacity sold). ``round_dependent: false``
drops the leading round axis. Between grid points the loader interpolates linearly: prices for
a deterministic policy, probabilities (a mixture of the two neighbouring distributions) for a
randomised one. Version 1 describes one resource (K = 1), the policies training produces.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

FORMAT = "advonline.pricing-policy"
VERSION = 1
KINDS = ("deterministic", "randomised")
PROBABILITY_TOLERANCE = 1e-5  # |sum of a row - 1| allowed (the file stores 8 significant digits)


class PolicyFileError(ValueError):
    """A policy file that cannot be read as an ``advonline.pricing-policy`` (one-line message)."""


class PricingPolicy:
    """A loaded pricing policy; every method takes and returns NumPy arrays.

    ``utilisation`` is ``[K]`` (one state) or ``[N, K]`` (a batch), in [0, 1]. ``round`` is the
    0-based round index (an int, or ``[N]`` for a batch), required when ``round_dependent``.
    """

    def __init__(self, document: dict, source: str = "<dict>") -> None:
        _validate(document, source)
        self.document = document
        self.kind: str = document["kind"]
        self.setting: dict = document["setting"]
        self.rounds: int = int(self.setting["rounds"])
        self.round_dependent: bool = document["round_dependent"]
        self.grid = np.asarray(document["utilisation_grid"], np.float64)
        self.provenance: dict = document.get("provenance", {})
        resources = document["resources"]
        if self.kind == "deterministic":
            self.table = np.stack([np.asarray(r["prices"], np.float64) for r in resources])
            self.atoms = None
        else:
            self.table = np.stack([np.asarray(r["probabilities"], np.float64) for r in resources])
            self.atoms = np.stack([np.asarray(r["price_atoms"], np.float64) for r in resources])
        if not self.round_dependent:  # one shared table for every round
            self.table = self.table[:, None]

    @property
    def resources(self) -> int:
        """K, the number of resources priced."""
        return self.table.shape[0]

    def _rows(self, utilisation, round) -> tuple[np.ndarray, bool]:
        """The interpolated table rows ``[N, K, ...]`` and whether the input was one state."""
        y = np.asarray(utilisation, np.float64)
        single = y.ndim == 1
        y = np.atleast_2d(y)
        if y.ndim != 2 or y.shape[1] != self.resources:
            raise ValueError(f"utilisation must be [K] or [N, K] with K = {self.resources}")
        if not np.all((y >= 0) & (y <= 1)):
            raise ValueError("utilisation must lie in [0, 1]")
        if self.round_dependent:
            if round is None:
                raise ValueError("this policy depends on the round: pass round=t (0-based)")
            t = np.broadcast_to(np.asarray(round), (y.shape[0],))
            if not np.all((t >= 0) & (t < self.rounds) & (t == np.floor(t))):
                raise ValueError(f"round must be a whole number in [0, {self.rounds})")
            t = t.astype(np.int64)
        else:
            t = np.zeros(y.shape[0], np.int64)
        g = self.grid.size
        lower = np.clip(np.searchsorted(self.grid, y, side="right") - 1, 0, g - 2)  # [N, K]
        weight = (y - self.grid[lower]) / (self.grid[lower + 1] - self.grid[lower])
        k = np.arange(self.resources)[None, :]
        below = self.table[k, t[:, None], lower]
        above = self.table[k, t[:, None], lower + 1]
        weight = weight.reshape(weight.shape + (1,) * (below.ndim - 2))
        return (1.0 - weight) * below + weight * above, single

    def distribution(self, utilisation, round=None) -> tuple[np.ndarray, np.ndarray]:
        """Randomised policy: ``(price_atoms [K, A], probabilities [K, A] or [N, K, A])``."""
        if self.kind != "randomised":
            raise ValueError("a deterministic policy has no price distribution; use prices()")
        probs, single = self._rows(utilisation, round)
        return self.atoms, probs[0] if single else probs

    def prices(self, utilisation, round=None) -> np.ndarray:
        """Unit prices ``[K]`` (or ``[N, K]``). For a randomised policy, its median price (the
        lowest atom with cumulative probability >= 1/2), the deterministic read-out."""
        rows, single = self._rows(utilisation, round)
        if self.kind == "randomised":
            median = np.argmax(np.cumsum(rows, axis=-1) >= 0.5, axis=-1)  # [N, K]
            rows = self.atoms[np.arange(self.resources)[None, :], median]
        return rows[0] if single else rows

    def sample_prices(self, utilisation, rng: np.random.Generator, round=None) -> np.ndarray:
        """Prices ``[K]`` (or ``[N, K]``) drawn from the policy's distribution with ``rng``; a
        deterministic policy returns its prices."""
        if self.kind == "deterministic":
            return self.prices(utilisation, round)
        probs, single = self._rows(utilisation, round)
        cumulative = np.cumsum(probs, axis=-1)
        draw = rng.random(cumulative.shape[:-1])[..., None] * cumulative[..., -1:]
        index = np.minimum((cumulative <= draw).sum(axis=-1), cumulative.shape[-1] - 1)
        prices = self.atoms[np.arange(self.resources)[None, :], index]
        return prices[0] if single else prices


def load(path: str | Path) -> PricingPolicy:
    """Read and validate a policy file; :class:`PolicyFileError` says what is wrong in one line."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyFileError(f"cannot read policy file {path}: {error}") from None
    if not text.strip():
        raise PolicyFileError(f"policy file {path} is empty")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise PolicyFileError(
            f"policy file {path} is not valid JSON (truncated?): {error.msg} at line {error.lineno}"
        ) from None
    return PricingPolicy(document, str(path))


def _fail(source: str, message: str) -> None:
    raise PolicyFileError(f"policy file {source}: {message}")


def _array(value, source: str, name: str, ndim: int) -> np.ndarray:
    try:
        array = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        _fail(source, f"{name} is not a rectangular array of numbers")
    if array.ndim != ndim:
        _fail(source, f"{name} must have {ndim} axes, has shape {list(array.shape)}")
    if not np.all(np.isfinite(array)):
        _fail(source, f"{name} holds NaN or infinite values")
    return array


def _validate(document, source: str) -> None:
    """Every check a reader relies on; the first failure raises :class:`PolicyFileError`."""
    if not isinstance(document, dict):
        _fail(source, "top level must be a JSON object")
    if document.get("format") != FORMAT:
        _fail(source, f"format must be {FORMAT!r}, got {document.get('format')!r}")
    if document.get("version") != VERSION:
        _fail(source, f"unsupported version {document.get('version')!r} (this reader: {VERSION})")
    for field in ("kind", "setting", "utilisation_grid", "round_dependent", "resources"):
        if field not in document:
            _fail(source, f"missing field {field!r}")
    if document["kind"] not in KINDS:
        _fail(source, f"kind must be one of {KINDS}, got {document['kind']!r}")
    if not isinstance(document["round_dependent"], bool):
        _fail(source, "round_dependent must be true or false")
    setting = document["setting"]
    if not isinstance(setting, dict):
        _fail(source, "setting must be an object")
    for field in ("low", "high", "rounds", "resources"):
        if not isinstance(setting.get(field), (int, float)) or isinstance(setting[field], bool):
            _fail(source, f"setting.{field} must be a number")
    if not (0 < setting["low"] < setting["high"] and math.isfinite(setting["high"])):
        _fail(source, "setting needs 0 < low < high")
    if setting["rounds"] < 1 or setting["rounds"] != int(setting["rounds"]):
        _fail(source, "setting.rounds must be a whole number >= 1")
    grid = _array(document["utilisation_grid"], source, "utilisation_grid", 1)
    if grid.size < 2 or grid[0] != 0 or grid[-1] != 1 or np.any(np.diff(grid) <= 0):
        _fail(source, "utilisation_grid must increase strictly from 0 to 1")
    resources = document["resources"]
    if not isinstance(resources, list) or len(resources) != setting["resources"]:
        _fail(source, f"resources must list one entry per resource ({setting['resources']})")
    if len(resources) != 1:
        _fail(source, f"version {VERSION} describes one resource (K = 1)")
    leading = [int(setting["rounds"])] if document["round_dependent"] else []
    shape = [*leading, grid.size]
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
        probs = _array(entry["probabilities"], source, f"{name}.probabilities", len(shape) + 1)
        if list(probs.shape) != [*shape, atoms.size]:
            _fail(
                source,
                f"{name}.probabilities must have shape {[*shape, atoms.size]}, has "
                f"{list(probs.shape)}",
            )
        if np.any(probs < 0) or np.any(np.abs(probs.sum(-1) - 1) > PROBABILITY_TOLERANCE):
            _fail(source, f"{name}.probabilities must be non-negative rows summing to 1")
