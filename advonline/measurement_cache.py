"""Classic baselines' measurements kept on disk, so that a setting's baselines are measured
once and not again by every run, seed and experiment on it; and a setting's certified lower
bound on every algorithm (:func:`lower_bound`), a function of the setting and the code alone.

A baseline is a function of the setting alone, and the evaluator's stream is keyed by the
budget's seed (advonline/evaluation.py), so its measurement depends on the problem, the
setting, the budget, the devices and the code, nothing else. The key is a hash of all of
them: the described setting and budget, the baseline's name, the device platform and count
(and how many of them the batches were split over), the versions of Python and of every
package the environment lists, and the bytes of the core's source and of the problem's and
the baselines' packages. Any change to the code or a version measures again. Learned
policies are never kept: they differ from run to run; nor is a baseline whose source cannot
be found.

Where: ``ADVONLINE_MEASUREMENT_CACHE`` names the folder; ``off`` turns the cache off. Unset,
it is ``$XDG_CACHE_HOME/advonline/measurements`` (``~/.cache/advonline/measurements``). A
file that cannot be read or written is measured again, never a reason to stop.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
from pathlib import Path

from advonline import environment
from advonline.compilation_cache import chosen_folder
from advonline.evaluation import Measurement, SourceRatio
from advonline.folders import atomic_write
from advonline.problem import LowerBound

VARIABLE = "ADVONLINE_MEASUREMENT_CACHE"


def folder() -> Path | None:
    """Where the measurements are kept (None: off)."""
    return chosen_folder(VARIABLE, "measurements")


@functools.cache
def _code_digest(*packages: Path) -> str:
    """A hash of every Python source file under ``packages`` (their bytes and paths)."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _package(function) -> Path:
    """The folder of the package that defines ``function`` (TypeError where it has no
    source file)."""
    function = getattr(function, "func", function)  # a functools.partial's function
    return Path(inspect.getsourcefile(inspect.unwrap(function))).resolve().parent


def key(problem, setting, budget, name: str, mesh=None) -> str:
    """The file name of the measurement of ``problem``'s baseline ``name`` on ``setting``
    with ``budget``, its batches split over ``mesh``'s devices (None: one), on this
    machine's devices, versions and code."""
    described = {
        "budget": budget.describe(),
        "algorithm": name,
        "split": 1 if mesh is None else mesh.size,
    }
    return _key(problem, setting, described, problem.payoffs, problem.baselines[name])


def _key(problem, setting, described: dict, *functions) -> str:
    """A file name: the hash of ``described`` with the problem, the setting, this machine's
    devices and versions, and the code of the core and of the packages defining
    ``functions``."""
    import advonline

    code = _code_digest(
        Path(advonline.__file__).resolve().parent, *(_package(f) for f in functions)
    )
    described = described | {
        "problem": problem.name,
        "setting": setting.describe(),
        "environment": environment.describe(),
        "code": code,
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest() + ".json"


def lower_bound(problem, setting) -> LowerBound | None:
    """``problem``'s certified lower bound on every algorithm in ``setting``, kept as its
    ratio and best response (its distribution and inputs are not kept: None when read back),
    searched where not kept; None where the problem has none."""
    if problem.lower_bound is None:
        return None
    path = _lower_bound_path(problem, setting)
    if path is not None:
        try:
            kept = json.loads(path.read_text())
            return LowerBound(float(kept["ratio"]), float(kept["best_response"]), None, None)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not kept or not readable: searched again
    found = problem.lower_bound_of(setting)
    if found is not None and path is not None:
        kept = {"ratio": found.ratio, "best_response": found.best_response}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(kept).encode())
        except OSError:
            pass  # a folder that cannot be written keeps nothing
    return found


def _lower_bound_path(problem, setting) -> Path | None:
    """Where ``problem``'s lower bound on ``setting`` is kept (None: off, or its code has no
    source file)."""
    where = folder()
    if where is None:
        return None
    try:
        return where / _key(problem, setting, {"lower_bound": True}, problem.lower_bound)
    except TypeError:
        return None


def load(problem, setting, budget, names, mesh=None) -> dict[str, Measurement]:
    """The kept measurements of the baselines ``names`` (those kept; none when off)."""
    where = folder()
    if where is None:
        return {}
    found = {}
    for name in names:
        try:
            path = where / key(problem, setting, budget, name, mesh)
            document = json.loads(path.read_text())
            found[name] = _measurement(document)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not kept, not readable or without a source: measured again
    return found


def store(problem, setting, budget, measurements, mesh=None) -> None:
    """Keep the baselines' ``measurements`` (a folder that cannot be written keeps none)."""
    where = folder()
    if where is None:
        return
    for measurement in measurements:
        try:
            path = where / key(problem, setting, budget, measurement.algorithm, mesh)
            where.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(measurement.to_json(), allow_nan=True).encode())
        except (OSError, TypeError):
            continue  # a folder that cannot be written, or a baseline without a source


def _measurement(document: dict) -> Measurement:
    """A measurement from its report entry (:meth:`Measurement.to_json`), with no seconds:
    it took none here."""
    notes, worst = document["notes"], document["worst_inputs"]
    sources = {
        name: SourceRatio(_number(ratio), notes[name], worst.get(name))
        for name, ratio in document["sources"].items()
    }
    bound = SourceRatio(_number(document["upper_bound"]), document["upper_bound_note"])
    ratio = _number(document["competitive_ratio"])
    if ratio is None:
        raise ValueError("a kept measurement without a ratio")
    return Measurement(document["algorithm"], ratio, document["worst_source"], sources, bound)


def _number(value) -> float | None:
    """A ratio as JSON kept it (None, a number, or infinity)."""
    if value is None:
        return None
    number = float(value)
    if math.isnan(number):
        raise ValueError("a kept ratio that is not a number")
    return number
