"""Figures (matplotlib, PNG and PDF): each takes plain data and returns the files it wrote.

Every figure puts the setting in its title and labels its axes with units. The data come from
a run folder (``metrics.csv``, ``evaluation.json``, the checkpoint) through
:func:`advonline.pipeline.plot_runs`, or from the experiments' tables.
"""

from __future__ import annotations

import csv
import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FuncFormatter,
    LogLocator,
    NullFormatter,
    ScalarFormatter,
)

from advonline.ratio import RATIO_NAMES  # noqa: E402


def ratio_label(ratio: str = RATIO_NAMES["earn"]) -> str:
    """An axis label for a competitive ratio that is ``ratio`` (``OPT / E[ALG]`` or
    ``E[cost] / OPT``: :data:`advonline.ratio.RATIO_NAMES`)."""
    return f"competitive ratio {ratio}"


LEARNED = ("learned", "learned-deterministic")


def read_metrics(path: str | Path, fields: tuple[str, ...] = ()) -> list[dict]:
    """``metrics.csv`` rows with numbers as floats (an empty cell, not measured, as None), each
    row with every one of ``fields`` (None where the file has no such column). ValueError
    names the line of a cell that is not a number or a row of the wrong length."""
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            if None in row or None in row.values():
                raise ValueError(f"line {line} has a different number of cells than the header")
            try:
                parsed = {key: float(value) if value != "" else None for key, value in row.items()}
            except ValueError:
                raise ValueError(f"line {line} has a cell that is not a number") from None
            rows.append({**dict.fromkeys(fields), **parsed})
    return rows


def save(figure, out: Path, stem: str) -> list[Path]:
    """``out/stem.png`` and ``out/stem.pdf`` (figures are derived files: replaced on re-plot)."""
    out.mkdir(parents=True, exist_ok=True)
    if figure.get_layout_engine() is None:  # a figure may bring its own layout
        figure.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    for path in paths:
        figure.savefig(path, dpi=120)
    plt.close(figure)
    return paths


def _column(rows: list[dict], key: str, x: str = "step") -> tuple[list, list]:
    kept = [r for r in rows if r.get(key) is not None]
    return [r[x] for r in kept], [r[key] for r in kept]


#: The largest ratio the figures draw to scale; past it (or infinite) a ratio is drawn at the
#: top of its axis and labelled (matplotlib's log axis overflows in its margins near float64's
#: largest).
DRAWN_MAX = 1e100


def _to_scale(value) -> bool:
    """Whether ``value`` is a number the figures draw to scale (finite, at most
    :data:`DRAWN_MAX` in size)."""
    return value is not None and math.isfinite(value) and abs(value) <= DRAWN_MAX


def _ratio_scale(axis, values: list) -> None:
    """Log scale with plain tick labels when the ratios span more than 10x, else linear; over
    at most three decades the ticks at 2, 3 and 5 times a power of ten are labelled too."""
    finite = [v for v in values if _to_scale(v) and v > 0]
    if finite and max(finite) > 10 * min(finite):
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(ScalarFormatter())
        if max(finite) > 1000 * min(finite):
            axis.yaxis.set_minor_formatter(NullFormatter())
            return
        axis.yaxis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))
        axis.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


#: Ratios logged during training, by loop: (column, line style, legend label).
TRAINING_RATIOS = (
    ("pool_ratio", "-", "training: worst over the adversary's pool"),
    ("oracle_ratio", "o-", "each epoch's search against the network"),
    ("restricted_ratio", "s-", "restricted game's CR (snapshots x archive)"),
    ("probe_ratio", "o-", "probe: worst ratio a stronger search found"),
    ("mixture_ratio", "d-", "equilibrium mixture of snapshots: worst ratio found"),
    ("guarantee", "k-", "guarantee: best so far (certified bound, else worst found)"),
)


def ratio_figure(
    name: str,
    rows: list[dict],
    evaluation: dict,
    out: Path,
    title: str,
    reference: tuple[str, float] | None = None,
    ratio: str = RATIO_NAMES["earn"],
) -> list[Path]:
    """Ratio over training (training adversary, fresh adversary) with the final measured CR of the
    learned policies, each baseline's measured CR, and the ``reference`` ratio ``(label,
    value)`` (a known optimum), each as a line; ``title`` names the setting, ``ratio`` what
    the ratios are."""
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    for key, style, label in TRAINING_RATIOS:
        steps, values = _column(rows, key)
        if values:  # each loop logs its own columns
            axis.plot(steps, values, style, label=label)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    last = rows[-1]["step"] if rows else 0
    unplotted = []
    for index, result in enumerate(evaluation["results"]):
        measured, label = result["competitive_ratio"], result["algorithm"]
        text = f"{label}: measured CR {measured:.3g} ({result['worst_source']})"
        if not _to_scale(measured):
            unplotted.append(f"{label}: {measured:.3g}")
        elif label in LEARNED:
            axis.plot(
                [last], [measured], "*", markersize=12, color=colours[(index + 2) % 10], label=text
            )
        else:
            axis.axhline(measured, linestyle=":", color=colours[(index + 2) % 10], label=text)
    if reference is not None:
        label, value = reference
        axis.axhline(
            value, color="black", linestyle="--", linewidth=1, label=f"{label} = {value:.3f}"
        )
    drawn = [r.get(key) for r in rows for key, _, _ in TRAINING_RATIOS]
    drawn += [r["competitive_ratio"] for r in evaluation["results"]]
    drawn += [reference[1] if reference else None]
    _ratio_scale(axis, drawn)
    axis.set_xlabel("training step")
    axis.set_ylabel(ratio_label(ratio))
    note = f"; not drawn: {', '.join(unplotted)}" if unplotted else ""
    axis.set_title(f"{name}: ratio over training\n{title}{note}", fontsize=9)
    axis.legend(fontsize=7)
    return save(figure, out, f"{name}-ratio")


def exploitability_figure(
    name: str, rows: list[dict], title: str, out: Path, ratio: str = RATIO_NAMES["earn"]
) -> list[Path]:
    """The simultaneous loop: each epoch's search's worst ratio against the training
    adversary's, and their difference; the oracle loop: the probe's ratio against the
    restricted game's and the ratio gap. ``title`` names the setting, ``ratio`` what the
    ratios are."""
    if any(r.get("restricted_ratio") is not None for r in rows):
        return _oracle_exploitability_figure(name, rows, title, out, ratio)
    kept = [r for r in rows if r.get("oracle_ratio") is not None]
    steps = [r["step"] for r in kept]
    figure, axis = plt.subplots(figsize=(7, 4.2))
    axis.plot(steps, [r["oracle_ratio"] for r in kept], "o-", label="the epoch's search")
    axis.plot(steps, [r["adversary_ratio"] for r in kept], "s-", label="training adversary's ratio")
    axis.plot(
        steps, [r["exploitability"] for r in kept], "^-", label="exploitability (search - training)"
    )
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.set_xlabel("training step")
    axis.set_ylabel(f"{ratio_label(ratio)} (exploitability: difference)")
    axis.set_title(f"{name}: exploitability over training\n{title}", fontsize=9)
    axis.legend(fontsize=8)
    return save(figure, out, f"{name}-exploitability")


def _oracle_exploitability_figure(
    name: str, rows: list[dict], title: str, out: Path, ratio: str
) -> list[Path]:
    figure, (ratios, gap) = plt.subplots(1, 2, figsize=(10, 4))
    ratios.plot(*_column(rows, "restricted_ratio"), "s-", label="restricted game's CR (1 / value)")
    ratios.plot(*_column(rows, "probe_ratio"), "o-", label="probe's worst ratio")
    ratios.plot(*_column(rows, "archive_ratio"), ":", label="archive's worst ratio")
    mixture_steps, mixture_ratios = _column(rows, "mixture_ratio")
    if mixture_ratios:  # K >= 2: the equilibrium mixture is probed too
        ratios.plot(mixture_steps, mixture_ratios, "d-", label="mixture's worst ratio found")
    shown = ("restricted_ratio", "probe_ratio", "mixture_ratio")
    _ratio_scale(ratios, [r.get(k) for r in rows for k in shown])
    ratios.set_ylabel(ratio_label(ratio))
    ratios.legend(fontsize=8)
    steps, values = _column(rows, "exploitability")
    gap.plot(steps, values, "^-", label="network: max(probe, archive) / restricted - 1")
    mixture_steps, mixture_gaps = _column(rows, "mixture_exploitability")
    if mixture_gaps:
        gap.plot(mixture_steps, mixture_gaps, "d-", label="mixture: its worst / restricted - 1")
        values = values + mixture_gaps
    gap.axhline(0.05, color="grey", linestyle="--", linewidth=1, label="0.05")
    if any(_to_scale(v) and v > 0 for v in values):
        gap.set_yscale("symlog", linthresh=0.01)
        gap.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    gap.set_ylabel("exploitability (relative gap)")
    gap.legend(fontsize=8)
    for axis in (ratios, gap):
        axis.set_xlabel("training step")
    figure.suptitle(f"{name}: exploitability over training\n{title}", fontsize=9)
    return save(figure, out, f"{name}-exploitability")


def bars_figure(
    rows: list[tuple[str, dict[str, float]]],
    out: Path,
    stem: str,
    title: str,
    bounds: list[dict[str, float]] | None = None,
    ratio: str = RATIO_NAMES["earn"],
) -> list[Path]:
    """Grouped bars: one group per setting, one bar per algorithm's measured CR (log scale; an
    infinite ratio is drawn as a hatched bar reaching the top and labelled inf; ``ratio``:
    what the ratios are). ``bounds`` (per row, algorithm -> the certificate's upper bound,
    where it is not the CR itself) are drawn as markers above the bar: the true CR lies
    between the bar (worst instance found) and the marker."""
    algorithms = list(dict.fromkeys(a for _, ratios in rows for a in ratios))
    finite = [v for _, ratios in rows for v in ratios.values() if _to_scale(v)]
    top = max(finite) * 3 if finite else 10.0
    width = 0.8 / max(len(algorithms), 1)
    bound_drawn = False
    figure_width = max(6, 1.6 * len(rows) + 3)
    figure, axis = plt.subplots(figsize=(figure_width, 4.5))
    for j, algorithm in enumerate(algorithms):
        xs = np.arange(len(rows)) + (j - (len(algorithms) - 1) / 2) * width
        values = [ratios.get(algorithm) for _, ratios in rows]
        heights = [v if _to_scale(v) else (top if v is not None else 0) for v in values]
        bars = axis.bar(xs, heights, width, label=algorithm)
        marked = [None] * len(rows)  # where a bound's marker stands above each bar
        for index, (x, row_bounds) in enumerate(zip(xs, bounds or [], strict=False)):
            bound = row_bounds.get(algorithm)
            if bound is None:
                continue
            shown = min(bound, top)
            axis.plot(
                [x],
                [shown],
                "kv",
                markersize=5,
                label="certified upper bound" if not bound_drawn else None,
            )
            bound_drawn = True
            marked[index] = shown
            if bound > top:
                axis.annotate(
                    f"bound {bound:.2g}",
                    (x, shown),
                    ha="center",
                    va="top",
                    fontsize=6,
                    xytext=(0, -6),
                    textcoords="offset points",
                )
        for bar, value, marker in zip(bars, values, marked, strict=True):
            if value is not None and not _to_scale(value):
                bar.set_hatch("//")
                axis.annotate(
                    f"{value:.3g}",
                    (bar.get_x() + bar.get_width() / 2, top),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
            elif value is not None:
                axis.annotate(  # above the bar, or above its bound's marker
                    f"{value:.3g}",
                    (bar.get_x() + bar.get_width() / 2, max(value, marker or value)),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    xytext=(0, 1 if marker is None else 5),
                    textcoords="offset points",
                )
    group_width = figure_width / max(len(rows), 1)  # a label wraps to its group's width
    labels = [_wrapped(label, group_width, per_inch=14) for label, _ in rows]
    axis.set_xticks(np.arange(len(rows)), labels, fontsize=7)
    axis.set_yscale("log")
    axis.set_ylim(bottom=1.0, top=top * 2)
    axis.set_ylabel(f"measured {ratio_label(ratio)}")
    axis.set_title(_wrapped(title, figure_width), fontsize=9)
    axis.legend(fontsize=7)
    return save(figure, out, stem)


def _wrapped(title: str, figure_width: float, per_inch: int = 13) -> str:
    """``title`` with each line wrapped to fit ``figure_width`` inches: about 13 characters
    of 9-point text an inch inside the axes (14 of 7-point text under a bar group)."""
    characters = int(figure_width * per_inch)
    return "\n".join(textwrap.fill(line, characters) for line in title.split("\n"))


def convergence_figure(
    runs: dict[str, list[dict]],
    out: Path,
    stem: str,
    title: str,
    target: float | None = None,
    column: str = "pool_ratio",
    label: str = f"worst ratio {RATIO_NAMES['earn']} in the training pool",
    step_label: str = "training step",
) -> list[Path]:
    """A metrics ``column`` (by default the training pool's worst ratio) against steps and
    wall time, one line per run (the per-round vs REINFORCE ablation when the runs differ in
    their update); ``label`` names the column on the axis, ``step_label`` what the ``step``
    column counts."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for name, rows in runs.items():
        axes[0].plot(*_column(rows, column), label=name)
        axes[1].plot(*_column(rows, column, x="wall_seconds"), label=name)
    for axis, x_label in zip(axes, (step_label, "wall time (s)"), strict=True):
        if target is not None:
            axis.axhline(target, color="grey", linestyle="--", linewidth=1, label="best + 5%")
        axis.set_xlabel(x_label)
    _ratio_scale(axes[0], [r.get(column) for rows in runs.values() for r in rows])
    axes[0].set_ylabel(label)
    axes[0].legend(fontsize=8)
    figure.suptitle(_wrapped(title, 10), fontsize=9)
    return save(figure, out, stem)
