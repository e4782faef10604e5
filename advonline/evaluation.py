"""The evaluator's protocol, alike for every problem and every algorithm (docs/method.md §5):
an algorithm's measured competitive ratio is the worst of several sources (a certificate where
one exists, searches for bad inputs, held-out families, random inputs), each a
:class:`SourceRatio`; a certified upper bound stands beside it. A problem's evaluator (for
posted pricing :mod:`posted_price.evaluate`) computes the sources; this module combines them,
judges a learned policy against the baselines and keeps the evaluator's keys apart from
training's.
"""

from __future__ import annotations

import dataclasses
import math

import jax

#: A trained run's own source (advonline/pipeline.py): the instances its oracle loop archived,
#: re-scored exactly against the policy it delivers. Only a run's learned policy has one.
ARCHIVE_SOURCE = "archive"

#: Folded into the budget's seed: the evaluator's keys form a stream of their own, apart from
#: every training run's (whose root key is ``jax.random.key(game.seed)``), so no probe of the
#: evaluator repeats a search that training made.
EVALUATION_STREAM = 0x5EED_E7A1


def evaluation_key(seed: int) -> jax.Array:
    """The root key of the evaluator with budget seed ``seed``."""
    return jax.random.fold_in(jax.random.key(seed), EVALUATION_STREAM)


@dataclasses.dataclass(frozen=True)
class SourceRatio:
    """One source's ratio (None if it cannot run here) and what it means or why it is missing."""

    ratio: float | None
    note: str
    worst_input: dict | None = None


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The measured CR of one algorithm: the worst of its sources."""

    algorithm: str
    competitive_ratio: float
    worst_source: str
    sources: dict[str, SourceRatio]
    upper_bound: SourceRatio = SourceRatio(None, "exact for deterministic policies: see exact")

    def to_json(self) -> dict:
        """The ``results`` entry of ``advonline evaluate --json``."""
        return {
            "algorithm": self.algorithm,
            "competitive_ratio": self.competitive_ratio,
            "worst_source": self.worst_source,
            "sources": {name: source.ratio for name, source in self.sources.items()},
            "notes": {name: source.note for name, source in self.sources.items()},
            "worst_inputs": {
                name: source.worst_input
                for name, source in self.sources.items()
                if source.worst_input is not None
            },
            "upper_bound": self.upper_bound.ratio,
            "upper_bound_note": self.upper_bound.note,
        }


def from_sources(name: str, sources: dict[str, SourceRatio], bound: SourceRatio) -> Measurement:
    """The measurement whose CR is the worst of ``sources`` that have a ratio. Ties within
    float noise go to the first source in ``sources``' order (``exact`` first)."""
    measured = {source: s.ratio for source, s in sources.items() if s.ratio is not None}
    worst = max(measured.values())
    worst_source = next(n for n, ratio in measured.items() if ratio >= worst * (1 - 1e-12))
    return Measurement(name, worst, worst_source, sources, bound)


def with_source(measurement: Measurement, name: str, source: SourceRatio) -> Measurement:
    """``measurement`` with one more source (e.g. :data:`ARCHIVE_SOURCE`), its CR the worst of
    all of them again."""
    sources = {**measurement.sources, name: source}
    return from_sources(measurement.algorithm, sources, measurement.upper_bound)


def verdict(results: list[Measurement], learned: str, baselines: tuple[str, ...]) -> str:
    """One line saying whether the ``learned`` policy beats the best of the ``baselines`` (by
    measured CR). The learned policy is judged by its guarantee where it has one (the DP's
    upper bound, or the exact CR of a deterministic policy), else by the worst ratio found;
    a loss is a line starting with ``WARNING``, never handed over quietly."""
    by_name = {m.algorithm: m for m in results}
    mine = by_name[learned]
    best = min((by_name[name] for name in baselines), key=lambda m: m.competitive_ratio)
    certified = mine.upper_bound.ratio
    if certified is None and mine.worst_source == "exact":
        certified = mine.competitive_ratio  # deterministic: the exact CR
    figure = mine.competitive_ratio if certified is None else certified
    described = f"{learned} {_short(mine.competitive_ratio)} " + (
        "(worst found; no certificate here)"
        if certified is None
        else f"(certified <= {_short(certified)})"
    )
    versus = f"{best.algorithm} {_short(best.competitive_ratio)}"
    if figure < best.competitive_ratio:
        return f"verdict: {described} beats {versus}: {figure / best.competitive_ratio:.2f}x"
    factor = "inf" if math.isinf(figure) else f"{figure / best.competitive_ratio:.3g}x"
    return f"WARNING: {described} loses to {versus}: {factor}; do not use this policy"


def _short(ratio: float) -> str:
    return "inf" if math.isinf(ratio) else f"{ratio:.4g}" if ratio >= 1e5 else f"{ratio:.3f}"
