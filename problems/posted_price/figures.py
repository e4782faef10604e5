"""Posted pricing's figures: the setting on one line, the learned price curve against the
threshold (K = 1) and the learned price of one resource over two resources' utilisation
(K >= 2). The core's figures (:mod:`advonline.plots`) take the title and the reference from
here."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from advonline import plots
from advonline.baselines.posted_price.threshold import threshold_price
from advonline.problems.posted_price.model import Observation, Setting, price_table

plt = plots.plt


def setting_title(setting: dict) -> str:
    """One line naming a setting (from ``Setting.describe()``)."""
    demand = (
        f"max demand {setting['max_demand']:g} of capacity"
        + ("" if setting.get("demand_levels", 1) == 1 else f" ({setting['demand_levels']} levels)")
        + ("" if setting.get("divisible", True) else ", indivisible")
    )
    return (
        f"K={setting['resources']}, L={setting['low']:g}, U={setting['high']:g}, "
        f"T={setting['rounds']}, {demand}"
    )


def price_curve_figure(
    name: str,
    grid: np.ndarray,
    curves: dict[str, np.ndarray],
    band: tuple[np.ndarray, np.ndarray] | None,
    threshold: tuple[np.ndarray, np.ndarray] | None,
    setting: dict,
    out: Path,
) -> list[Path]:
    """Learned price curves (``label -> price on grid``, K = 1) against the threshold phi(y)
    (``(y, phi(y))`` on its own, finer grid); ``band`` shades the randomised policy's
    interquartile price range."""
    figure, axis = plt.subplots(figsize=(7, 4.2))
    if band is not None:
        axis.fill_between(
            grid,
            *band,
            step="post",
            alpha=0.25,
            label="randomised policy: 25-75% price quantiles, round 0",
        )
    for label, curve in curves.items():
        axis.step(grid, curve, where="post", label=label)
    if threshold is not None:
        axis.plot(*threshold, "k--", linewidth=1.2, label="threshold phi(y)")
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(ScalarFormatter())
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_xlabel("utilisation y (fraction of capacity sold)")
    axis.set_ylabel("unit price (value per unit of capacity)")
    axis.set_title(f"{name}: learned price curve\n{setting_title(setting)}", fontsize=9)
    axis.legend(fontsize=7)
    return plots.save(figure, out, f"{name}-price-curve")


def price_heatmap_figure(
    name: str,
    grid: np.ndarray,
    prices: dict[str, np.ndarray],
    setting: dict,
    out: Path,
) -> list[Path]:
    """Several resources: the learned price of resource 1 over (its own utilisation, resource
    2's utilisation), one panel per ``label -> prices [own, other]`` (a round), on ``grid``;
    any further resources idle. One logarithmic colour scale, from L to U, for all panels."""
    low, high = setting["low"], setting["high"]
    panels = len(prices)
    figure, axes = plt.subplots(
        1, panels, figsize=(3.6 * panels + 1.2, 3.8), squeeze=False, layout="constrained"
    )
    norm = matplotlib.colors.LogNorm(vmin=low, vmax=high)
    for axis, (label, values) in zip(axes[0], prices.items(), strict=True):
        image = axis.pcolormesh(grid, grid, values, norm=norm, shading="nearest", cmap="viridis")
        axis.set_xlabel("utilisation of resource 2")
        axis.set_title(label, fontsize=8)
        axis.set_aspect("equal")
    axes[0][0].set_ylabel("utilisation of resource 1 (own)")
    colourbar = figure.colorbar(image, ax=axes[0].tolist(), shrink=0.85)
    colourbar.set_label("unit price of resource 1 (read-out, median)")
    colourbar.ax.yaxis.set_major_formatter(ScalarFormatter())
    colourbar.ax.yaxis.set_minor_formatter(ScalarFormatter())
    idle = "" if setting["resources"] == 2 else "; resources 3.. idle"
    figure.suptitle(
        f"{name}: learned price of resource 1{idle}\n{setting_title(setting)}", fontsize=9
    )
    return plots.save(figure, out, f"{name}-price-heatmap")


def price_curves(setting: Setting, policies: dict, rounds: list[int]) -> dict:
    """The learned curves on the utilisation grid (K = 1): the read-out's price in the
    ``rounds`` shown, the randomised policy's interquartile price range in round 0, and the
    threshold phi(y); ``policies`` holds ``learned`` and ``learned-deterministic``."""
    with jax.enable_x64(True):
        readout = price_table(setting, policies["learned-deterministic"], jnp.float64)
        randomised = price_table(setting, policies["learned"], jnp.float64)
    grid = np.arange(setting.grid_size + 1) / setting.grid_size
    fine = np.linspace(0.0, 1.0, 501)
    curves = {
        f"read-out (median), round {t}" if len(rounds) > 1 else "read-out (median)": np.asarray(
            readout.prices[t, :, 0]
        )
        for t in rounds
    }
    cumulative = np.cumsum(np.asarray(randomised.probs[0]), axis=-1)  # [G + 1, A]
    atoms = np.asarray(randomised.prices[0])

    def quantile(level: float) -> np.ndarray:
        index = np.argmax(cumulative >= level, axis=-1)
        return atoms[np.arange(atoms.shape[0]), index]

    return {
        "grid": grid,
        "curves": curves,
        "band": (quantile(0.25), quantile(0.75)),
        "threshold": (fine, np.asarray(threshold_price(fine, setting.low, setting.high))),
    }


def price_heatmaps(
    setting: Setting, readout, rounds: list[int], points: int = 41
) -> tuple[np.ndarray, dict]:
    """Several resources: the ``readout``'s price of resource 1 over (its own utilisation,
    resource 2's) on ``points`` x ``points`` states, any further resources idle, in the
    ``rounds`` shown."""
    grid = np.linspace(0.0, 1.0, points)
    own, other = np.meshgrid(grid, grid, indexing="ij")
    states = np.zeros((points * points, setting.resources))
    states[:, 0], states[:, 1] = own.ravel(), other.ravel()

    @jax.jit
    def first_price(utilisation, round_fraction):
        observation = Observation(utilisation=utilisation, round_fraction=round_fraction)
        return readout(observation).prices[0, 0]

    prices = {}
    for t in rounds:
        fraction = jnp.full(states.shape[0], t / setting.rounds, jnp.float32)
        values = jax.vmap(first_price)(jnp.asarray(states, jnp.float32), fraction)
        label = f"round {t} of {setting.rounds}" if len(rounds) > 1 else "every round"
        prices[label] = np.asarray(values).reshape(points, points)
    return grid, prices


def policy_figures(name: str, setting: Setting, policies: dict, rounds: list[int], out: Path):
    """The learned policy's own figure: the price curve for K = 1, else the heatmap."""
    described = setting.describe()
    if setting.resources == 1:
        curves = price_curves(setting, policies, rounds)
        return price_curve_figure(
            name,
            curves["grid"],
            curves["curves"],
            curves["band"],
            curves["threshold"],
            described,
            out,
        )
    readout = policies["learned-deterministic"]
    return price_heatmap_figure(name, *price_heatmaps(setting, readout, rounds), described, out)
