"""The evaluator, one for every problem and every algorithm (docs/method.md §5).

An algorithm's measured competitive ratio is the worst of its sources, each a
:class:`SourceRatio`:

- ``exact``: its certified competitive ratio where the problem has an exact certificate;
- ``adversary``: a best response searched for from scratch against the frozen policy;
- ``families``: the problem's held-out hard families (checks, never training data);
- ``random``: a fixed seeded set of random inputs;
- ``archive``: for a trained run's delivered policy, the inputs its oracle loop archived.

A certificate that bounds the ratio without attaining it (a randomised policy's) stands
beside the measured ratio as its ``upper_bound``: the true ratio lies between the two.

A problem computes its sources with its own ``sources`` capability where it has one
(:attr:`advonline.problem.Problem.sources`), else with the core's default over its token
encoding (:mod:`advonline.sources`). Either way the key stream, the :class:`Budget`, the
report (``evaluation.json``, ``evaluate --json``), the printed table and the verdict are this
module's. Everything here runs outside ``jit``, in float64.

**Measured once.** Where a policy's ``exact`` source is its competitive ratio (a
deterministic policy with an exact certificate), no search can find a worse input: the
``adversary`` source then runs as a cross-check of the certificate, with the budget's
network and search steps cut by :data:`CROSS_CHECK_SHARE` (:func:`cross_check_budget`), its
search starting at the certificate's worst input where the problem gives one, and its note
says so. A search that found more than the certificate would show the certificate wrong.

Each source is run through a :class:`SourceClock`, which times it and tells the caller's
progress display; the seconds go into the report.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Protocol

import jax

from advonline import environment
from advonline.ratio import RATIO_NAMES, format_ratio

#: The sources every problem's evaluator reports, in the table's order.
SOURCE_NAMES = ("exact", "adversary", "families", "random")

#: A trained run's own source: the instances its oracle loop archived, re-scored against the
#: policy it delivers. Only a run's learned policy has one.
ARCHIVE_SOURCE = "archive"

#: Folded into the budget's seed: the evaluator's keys form a stream of their own, apart from
#: every training run's (whose root key is ``jax.random.key(game.seed)``), so no probe of the
#: evaluator repeats a search that training made.
EVALUATION_STREAM = 0x5EED_E7A1


def evaluation_key(seed: int) -> jax.Array:
    """The root key of the evaluator with budget seed ``seed``."""
    return jax.random.fold_in(jax.random.key(seed), EVALUATION_STREAM)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How hard the evaluator looks: the same for every algorithm and every problem."""

    seed: int = 0  # seed of the evaluator's stream (never a training key)
    random_instances: int = 256  # size of the fixed random set
    family_members: int = 129  # members of each parametrised hard family (e.g. stopping points)
    samples: int = 32  # sampled runs per input where a policy's expectation has no exact form
    adversary_restarts: int = 1  # fresh adversary networks trained against the policy
    adversary_steps: int = 100  # REINFORCE steps of each
    adversary_batch: int = 64  # instances each writes per step
    search_chains: int = 64  # local-search chains over the problem's inputs
    search_candidates: int = 16  # mutations each chain tries per step
    search_steps: int = 256  # hill-climbing steps (0: no local search)

    def describe(self) -> dict:
        """JSON-ready description, printed beside the ratios it produced."""
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """One line for a table's header and a figure's title."""
        return (
            f"fresh adversary {self.adversary_steps} steps x {self.adversary_batch} "
            f"x {self.adversary_restarts}, then local search {self.search_chains} "
            f"chains x {self.search_candidates} x {self.search_steps} steps, "
            f"{self.family_members} family members, {self.random_instances} random "
            f"instances, seed {self.seed}"
        )

    def check(self) -> list[str]:
        """What is wrong with the budget (a field the command line sets by its flag's name)."""
        counts = ("random_instances", "family_members", "samples", "adversary_steps")
        counts += ("adversary_batch", "search_chains", "search_candidates")
        problems = [
            f"{_budget_name(name)} must be >= 1" for name in counts if getattr(self, name) < 1
        ]
        problems += [
            f"{_budget_name(name)} must be >= 0"
            for name in ("adversary_restarts", "search_steps")
            if getattr(self, name) < 0
        ]
        if not 0 <= self.seed < 2**63:
            problems.append(f"--seed must be a whole number in [0, 2**63), got {self.seed}")
        return problems


#: The share of the budget's adversary-network and search steps a cross-check of an exact
#: certificate gets (module docstring).
CROSS_CHECK_SHARE = 1 / 8


#: The budget's fields that the commands' flags set (``--random-instances`` ...).
BUDGET_FLAGS = ("random_instances", "family_members", "adversary_steps", "search_steps", "seed")


def _budget_name(field: str) -> str:
    return f"--{field.replace('_', '-')}" if field in BUDGET_FLAGS else f"the budget's {field}"


def cross_check_budget(budget: Budget) -> Budget:
    """``budget`` with its adversary-network and search steps cut to
    :data:`CROSS_CHECK_SHARE` (at least one step each where there were any): the search that
    cross-checks an exact certificate."""

    def cut(steps: int) -> int:
        return 0 if steps == 0 else max(1, round(steps * CROSS_CHECK_SHARE))

    return dataclasses.replace(
        budget,
        adversary_steps=cut(budget.adversary_steps),
        search_steps=cut(budget.search_steps),
    )


def cross_checked(budget: Budget, search: Callable[[Budget], SourceRatio]) -> SourceRatio:
    """``search`` run with :func:`cross_check_budget` of ``budget``, its note saying that it
    is a cross-check of the exact certificate."""
    cut = cross_check_budget(budget)
    found = search(cut)
    share = f"1/{round(1 / CROSS_CHECK_SHARE)}"
    said = (
        f"cross-check of the exact certificate ({share} of the budget's steps: "
        f"{cut.adversary_steps} network, {cut.search_steps} search): "
    )
    return dataclasses.replace(found, note=said + found.note)


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
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # per source

    def to_json(self) -> dict:
        """The ``results`` entry of a report."""
        return {
            "algorithm": self.algorithm,
            "seconds": {name: round(value, 3) for name, value in self.seconds.items()},
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


def from_sources(
    name: str, sources: dict[str, SourceRatio], bound: SourceRatio, seconds: dict | None = None
) -> Measurement:
    """The measurement whose CR is the worst of ``sources`` that have a ratio. Ties within
    float noise go to the first source in ``sources``' order (``exact`` first)."""
    measured = {source: s.ratio for source, s in sources.items() if s.ratio is not None}
    worst = max(measured.values())
    worst_source = next(n for n, ratio in measured.items() if ratio >= worst * (1 - 1e-12))
    return Measurement(name, worst, worst_source, sources, bound, dict(seconds or {}))


def with_source(measurement: Measurement, name: str, source: SourceRatio) -> Measurement:
    """``measurement`` with one more source (e.g. :data:`ARCHIVE_SOURCE`), its CR the worst of
    all of them again."""
    sources = {**measurement.sources, name: source}
    return from_sources(
        measurement.algorithm, sources, measurement.upper_bound, measurement.seconds
    )


class Progress(Protocol):
    """What a progress display hears of a measurement (e.g. the command line's bar)."""

    def begin(self, algorithms: list[str]) -> None:
        """These algorithms will be measured, in this order."""

    def started(self, algorithm: str, source: str) -> None:
        """The source ``source`` of ``algorithm`` begins."""

    def ended(self, algorithm: str, source: str, found: SourceRatio, seconds: float) -> None:
        """It ended with ``found`` after ``seconds``."""


class SourceClock:
    """Runs the sources of one algorithm's measurement, one at a time: times each and tells
    ``progress``, so that every problem's sources are timed and shown alike. Host-side,
    outside ``jit``."""

    def __init__(self, algorithm: str, progress: Progress | None = None):
        self.algorithm = algorithm
        self.progress = progress
        self.seconds: dict[str, float] = {}

    def run(self, name: str, compute: Callable[[], SourceRatio]) -> SourceRatio:
        """``compute()``, the source ``name``, timed."""
        if self.progress is not None:
            self.progress.started(self.algorithm, name)
        start = time.perf_counter()
        found = compute()
        self.seconds[name] = time.perf_counter() - start
        if self.progress is not None:
            self.progress.ended(self.algorithm, name, found, self.seconds[name])
        return found


def measure(
    problem,
    setting,
    name: str,
    policy,
    budget: Budget,
    mesh=None,
    starts=None,
    progress: Progress | None = None,
) -> Measurement:
    """The measured CR of ``policy`` on ``problem``'s ``setting``: every source (the
    problem's own ``sources`` or the core's default), then the worst. With a ``mesh`` the
    problem may split its batches over the devices (the figures agree with one device's up
    to float64 rounding). ``starts`` (token rows ``[S, T]``, e.g. a trained run's archive,
    hardest first) are inputs the adversary's search starts from as well. ``progress``
    hears each source begin and end (:class:`SourceClock`)."""
    from advonline import sources as default  # it imports this module

    clock = SourceClock(name, progress)
    with jax.enable_x64(True):
        key = evaluation_key(budget.seed)
        if problem.sources is not None:
            found, bound = problem.sources(setting, policy, budget, key, mesh, starts, clock)
        else:
            args = (setting, policy, budget, key, mesh, starts, clock)
            found, bound = default.sources(problem, *args)
    return from_sources(name, found, bound, clock.seconds)


def measure_all(
    problem,
    setting,
    policies: dict,
    budget: Budget,
    mesh=None,
    starts: dict | None = None,
    progress: Progress | None = None,
) -> list[Measurement]:
    """:func:`measure` of every policy of ``policies`` (``{name: policy}``), in order, with
    ``starts[name]`` where given; ``progress`` first hears the names."""
    if progress is not None:
        progress.begin(list(policies))
    starts = starts or {}
    return [
        measure(problem, setting, name, policy, budget, mesh, starts.get(name), progress)
        for name, policy in policies.items()
    ]


def time_line(document: dict) -> str | None:
    """Where a report's measuring time went, on one line (None for a report without times):
    per algorithm, then per source, then the lower bound's search."""
    results = [r for r in document.get("results", []) if r.get("seconds")]
    if not results:
        return None
    per_source: dict[str, float] = {}
    for r in results:
        for name, seconds in r["seconds"].items():
            per_source[name] = per_source.get(name, 0.0) + seconds
    algorithms = ", ".join(f"{r['algorithm']} {sum(r['seconds'].values()):.0f} s" for r in results)
    sources = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in per_source.items())
    total = sum(per_source.values())
    line = f"measuring took {total:.0f} s: {algorithms}; by source: {sources}"
    bound = document.get("lower_bound") or {}
    if bound.get("seconds", 0) >= 0.5:  # not where this process had found it before
        line += f"; then the lower bound on every algorithm {bound['seconds']:.0f} s"
    return line


#: Relative difference within which two ratios are the same figure (float rounding).
MATCHING = 1e-6


def verdict(
    results: list[Measurement],
    learned: str,
    baselines: tuple[str, ...],
    lower_bound: float | None = None,
) -> str:
    """One line saying whether the ``learned`` policy beats the best of the ``baselines``.
    Each is judged by its guarantee where it has one (a certificate's upper bound, or the
    exact CR), else by the worst ratio found, so a certified learned policy meets a certified
    baseline's certificate, not that baseline's (lower) worst found; equal within float
    rounding (both at a certified optimum) it matches; a loss is a line starting with
    ``WARNING`` that names the baseline to use instead, never handed over quietly. Given the
    certified ``lower_bound`` on every online algorithm, the line says how far above it the
    learned figure is: the gap no algorithm could close."""
    by_name = {m.algorithm: m for m in results}
    mine = by_name[learned]
    best = min((by_name[name] for name in baselines), key=_judged)
    certified = _guarantee(mine)
    figure = _judged(mine)
    gap = "" if lower_bound is None else f", {_times(figure / lower_bound)} the lower bound"
    described = f"{learned} {_short(mine.competitive_ratio)} " + (
        f"(worst found{gap}; no certificate here)"
        if certified is None
        else f"(certified <= {_short(certified)}{gap})"
    )
    theirs = _judged(best)
    bound = _guarantee(best)
    below = bound is not None and best.competitive_ratio < bound * (1 - MATCHING)
    shown = " (certified)" if below else ""  # its guarantee, not the worst found, is judged
    versus = f"{best.algorithm} {_short(theirs)}{shown}"
    if figure < theirs * (1 - MATCHING):
        factor = figure / theirs
        times = f"{factor:.2f}x" if factor <= 0.99 else _times(factor)
        return f"verdict: {described} beats {versus}: {times}"
    if figure <= theirs * (1 + MATCHING):
        return f"verdict: {described} matches {versus}: 1.00x"
    factor = _times(figure / theirs)
    return f"WARNING: {described} loses to {versus}: {factor}; use {best.algorithm} instead"


def _guarantee(measured: Measurement) -> float | None:
    """A measurement's guarantee: its certificate's upper bound, or its exact CR (which float
    rounding may leave a hair below another source's figure); None without either."""
    exact = measured.sources.get("exact")
    if measured.upper_bound.ratio is None and exact is not None and exact.ratio is not None:
        return exact.ratio
    return measured.upper_bound.ratio


def _judged(measured: Measurement) -> float:
    """The figure a verdict judges a measurement by: its guarantee, else the worst found."""
    guarantee = _guarantee(measured)
    return measured.competitive_ratio if guarantee is None else guarantee


def _times(factor: float) -> str:
    """A factor to 4 significant digits (1.044x, 517.4x, 0.9621x), and one within 1% of 1 to
    its first two digits that differ from 1 (1.0000031x, 0.99981x): a small difference is
    never printed as 1x."""
    if math.isinf(factor):
        return "inf"
    if not (0.99 < factor < 1.01 and factor != 1.0):
        return f"{factor:.4g}x"
    return f"{factor:.{1 - math.floor(math.log10(abs(factor - 1.0)))}f}x"


def _short(ratio: float) -> str:
    return "inf" if math.isinf(ratio) else f"{ratio:.4g}" if ratio >= 1e5 else f"{ratio:.3f}"


def report(
    problem,
    setting,
    budget: Budget,
    results: list[Measurement],
    learned: str | None = None,
    baselines: tuple[str, ...] = (),
    progress: Progress | None = None,
    **extra,
) -> dict:
    """The report of ``results`` (``evaluation.json``, ``evaluate --json``): the setting,
    the budget, the environment, the problem's known optimum and its certified lower bound
    on every online algorithm (with the seconds its search took; ``progress`` hears it begin
    and end, as :data:`LOWER_BOUND`) beside the figures; with a ``learned`` policy among them
    and ``baselines`` beside it, the verdict (:func:`verdict`)."""
    bound, bound_seconds = _lower_bound(problem, setting, progress)
    label, reference = problem.reference_of(setting) or (None, None)
    judged = learned is not None and baselines
    return {
        "setting": setting.describe(),
        "ratio": problem.ratio_name,
        "budget": budget.describe(),
        **extra,
        "environment": environment.describe(),
        "reference": {"label": label, "ratio": reference} if reference is not None else None,
        "lower_bound": (
            {
                "ratio": bound.ratio,
                "best_response": bound.best_response,
                "seconds": round(bound_seconds, 3),
            }
            if bound
            else None
        ),
        "results": [m.to_json() for m in results],
        "measuring_seconds": round(sum(sum(m.seconds.values()) for m in results), 3),
        "verdict": (
            verdict(results, learned, baselines, bound.ratio if bound else None) if judged else None
        ),
    }


#: How a progress display hears of the lower bound's search: an algorithm and a source.
LOWER_BOUND = ("every algorithm", "lower bound")


def _lower_bound(problem, setting, progress: Progress | None):
    """The problem's lower bound on ``setting`` (None without one) and the seconds it took
    (about 0 where it was kept: :func:`advonline.measurement_cache.lower_bound`); ``progress``
    hears it as :data:`LOWER_BOUND`."""
    from advonline import measurement_cache  # it imports this module

    if problem.lower_bound is None:
        return None, 0.0
    clock = SourceClock(LOWER_BOUND[0], progress)
    found = []

    def search() -> SourceRatio:
        found.append(measurement_cache.lower_bound(problem, setting))
        ratio = None if found[0] is None else found[0].ratio
        return SourceRatio(ratio, "certified on every online algorithm")

    clock.run(LOWER_BOUND[1], search)
    return found[0], clock.seconds[LOWER_BOUND[1]]


def setting_line(described: dict) -> str:
    """A setting's description on one line: the problem, then its fields."""
    fields = (f"{k}={v}" for k, v in described.items() if k != "problem")
    return f"{described['problem']} " + ", ".join(fields)


#: A CR this far below the certified lower bound on every algorithm (relative) is a worst
#: input found short of the worst, not a figure within float rounding of the bound.
BELOW_BOUND = 1 - 1e-6


def table(document: dict) -> str:
    """A report (:func:`report`) as printed: the setting, the budget, the known optimum and
    the lower bound beside every algorithm's sources; then what a missing figure means."""
    budget = Budget(**document["budget"])
    lines = [f"setting: {setting_line(document['setting'])}", f"budget: {budget.summary()}"]
    lines.append(f"ratio: {document.get('ratio', RATIO_NAMES['earn'])}, lower is better")
    if document["reference"]:
        reference = document["reference"]
        lines.append(f"reference: {reference['label']} = {reference['ratio']:.4f}")
    if document["lower_bound"]:
        lines.append(
            f"lower bound on every online algorithm (certified): "
            f"{document['lower_bound']['ratio']:.4f}"
        )
    results = document["results"]
    columns = SOURCE_NAMES + tuple(
        dict.fromkeys(c for r in results for c in r["sources"] if c not in SOURCE_NAMES)
    )
    width = max([12] + [len(r["algorithm"]) + 2 for r in results])
    lines.append(
        f"{'algorithm':<{width}}{'CR':>10}  {'worst':<10}"
        + "".join(f"{c:>10}" for c in columns)
        + f"{'bound':>10}"
    )
    for r in results:
        cells = "".join(f"{format_ratio(r['sources'].get(c)):>10}" for c in columns)
        measured = f"{format_ratio(r['competitive_ratio']):>10}  {r['worst_source']:<10}"
        lines.append(
            f"{r['algorithm']:<{width}}{measured}{cells}{format_ratio(r['upper_bound']):>10}"
        )
    notes: dict[tuple[str, str], list[str]] = {}  # (column, note) -> the algorithms it is of
    for r in results:
        for c in columns:
            if c in r["sources"] and r["sources"][c] is None:
                notes.setdefault((c, r["notes"][c]), []).append(r["algorithm"])
        if r["upper_bound"] is not None:
            notes.setdefault(("bound", r["upper_bound_note"]), []).append(r["algorithm"])
    for (column, note), names in notes.items():
        of = "every algorithm" if len(names) == len(results) > 1 else ", ".join(names)
        lines.append(f"note: {column} ({of}): {note}")
    if document["lower_bound"]:
        bound = document["lower_bound"]["ratio"]
        below = [r["algorithm"] for r in results if r["competitive_ratio"] < bound * BELOW_BOUND]
        if below:
            lines.append(
                f"note: below the lower bound ({', '.join(below)}): the worst inputs found, "
                f"not the CR, which is at least {bound:.4f}: more --search-steps search further"
            )
    if document["verdict"]:
        lines.append(document["verdict"])
    return "\n".join(lines)
