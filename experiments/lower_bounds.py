"""Claim: in each finite setting of the from-scratch table, no online algorithm (learned or
classic, randomised or not) has a competitive ratio below the printed bound.

For each setting, hill climbing on a master sequence of buyers
(``problems/posted_price/lower_bound.py``: the oracles' search kernel and mutations, the bound
as its score) looks for the stopping family — the adversary sends a prefix of the sequence,
stopping where it likes — whose maximin LP gives the largest lower bound. Each of
``--restarts`` chains starts from a rising ramp with its own key, and the table keeps the
largest certified bound (every one is a valid bound: the certificate is an exact best
response, in float64, to the LP's stopping distribution). Beside it: ``threshold``'s exact CR
on the same setting and 1 + ln(U/L). The families themselves are written out, so each bound
can be checked.

The classic model's settings (:data:`CLASSIC_SETTINGS`: 640 buyers of 5% of capacity, 32
capacities of supply) get the classic family instead of a search: a rising ramp with a
capacity of buyers at each of 32 densities geometric in [L, U], stopped anywhere. It is what
makes 1 + ln(U/L) the best possible ratio as demands shrink; here it comes within 3% of it for
U/L = 5 and 10. (A search of the same budget at T = 640 takes about 6 min a setting.)

Beside each search's bound: the best of a small grid of branching families
(``problems/posted_price/tree_bound.py``), :func:`branching_bound`: buyers at L, then a rising
ramp, and after every fifth buyer of the ramp a branch where a capacity of buyers at U
arrives instead of the rest. The algorithm must decide how much to sell on the ramp before
it knows whether the flood comes.

Two resources (``k2-u10-oracle``, divisible): the same search over master sequences of
bundles and single-resource buyers (``problems/posted_price/bundle_bound.py``), each chain from
a rising ramp of bundles, and the one-resource search on the widened range [L, K U]
(``bundle_bound.widened``: buyers of one resource with densities up to U and bundles of
every resource at a K-th of the higher densities play the one-resource game on that range;
docs/method.md §5). Every family is certified by an exact best response over the product
grid. Beside it, ``threshold``'s certificate over the product grid (exact).

The configs that share a setting share its row (``k1-u10-oracle`` and ``k1-u10-classic``: the
classic configs hide the round from the network, which the bound does not depend on).

Run: python experiments/lower_bounds.py [--out results] [--steps 1500] [--restarts 2]
         [--candidates 4] [--seed 0]
Writes OUT/lower_bounds.{md,csv,json} and prints the table. About 13 min on 2 CPU cores for
one resource (the indivisible setting more than half of it), and 3 more for two.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from pathlib import Path

import jax
import numpy as np
from common import fmt, load_config, write_csv

from advonline.baselines.posted_price import make_baseline
from advonline.problems.posted_price import figures
from advonline.problems.posted_price.bundle_bound import (
    bundle_lower_bound,
    search_bundle_bound,
    search_widened_bound,
)
from advonline.problems.posted_price.grid_certify import certify_policy
from advonline.problems.posted_price.lower_bound import (
    LowerBound,
    search_lower_bound,
    stopping_lower_bound,
)
from advonline.problems.posted_price.model import Setting
from advonline.problems.posted_price.tree_bound import TreeFamily, tree_lower_bound

#: config whose setting is bounded -> the other configs with the same setting
SETTINGS = {
    "k1-u5-oracle": ("k1-u5-classic",),
    "k1-u10-oracle": ("k1-u10-classic",),
    "k1-u100-oracle": ("k1-u100-classic",),
    "k1-u10-d025-oracle": (),
    "k2-u10-oracle": (),
}


#: The classic model's settings (bounded by :func:`ramp_bound`): name -> setting fields.
CLASSIC_SETTINGS = {
    f"classic-u{high}": {
        "resources": 1,
        "low": 1.0,
        "high": float(high),
        "rounds": 640,
        "max_demand": 0.05,
        "divisible": True,
    }
    for high in (5, 10, 100)
}


#: The search's budget (the command-line defaults).
STEPS, CHAINS, CANDIDATES = 1500, 2, 4


def search(setting, steps=STEPS, chains=CHAINS, candidates=CANDIDATES, seed=0) -> list[LowerBound]:
    """Every chain's certified family for ``setting`` (each a valid bound); for several
    resources, the chains over bundles and single-resource buyers, then those of the
    widened one-resource game."""
    key = jax.random.key(seed)
    budget = {"steps": steps, "chains": chains, "candidates": candidates}
    if setting.resources == 1:
        return search_lower_bound(setting, key, **budget)
    bundle_key, widened_key = jax.random.split(key)
    bundles = search_bundle_bound(setting, bundle_key, **budget)
    return bundles + search_widened_bound(setting, widened_key, **budget)


def ramp_bound(setting: Setting) -> LowerBound:
    """The classic family's certified bound: one buyer of every grid unit at each density,
    a capacity per density, the densities geometric in [L, U] and rising."""
    per_level = setting.grid_size
    levels = setting.rounds // per_level
    densities = setting.low * setting.theta ** (np.arange(levels) / (levels - 1))
    units = np.ones(levels * per_level, dtype=np.int64)
    return stopping_lower_bound(setting, units, np.repeat(densities, per_level))


def flood_tree(setting: Setting, at_low: int, ramp: int, top: float, every: int) -> TreeFamily:
    """``at_low`` buyers of one unit at L, then ``ramp`` rising geometrically to ``top``; after
    the last buyer at L and every ``every``-th of the ramp, a branch of up to a capacity of
    buyers at U (as many as the rounds leave)."""
    densities = [setting.low] * at_low
    densities += list(setting.low * (top / setting.low) ** (np.arange(1, ramp + 1) / ramp))
    parent = list(range(-1, len(densities) - 1))
    for fork in range(at_low - 1, at_low + ramp, every):
        flood = min(setting.grid_size, setting.rounds - (fork + 1))
        for i in range(flood):
            parent.append(fork if i == 0 else len(parent) - 1)
            densities.append(setting.high)
    return TreeFamily(np.array(parent), np.ones(len(parent), np.int64), np.array(densities))


@functools.cache
def branching_bound(setting: Setting) -> float | None:
    """The best certified bound of :func:`flood_tree` over a small grid of its shapes, for
    divisible one-unit buyers (the settings of 200 buyers of 1%; None for others). Cached:
    several configs share a setting."""
    if not (
        setting.resources == 1
        and setting.divisible
        and setting.demand_levels == 1
        and setting.grid_size < setting.rounds
    ):
        return None
    grid = setting.grid_size
    shapes = [
        (round(grid * low_share), round(grid * ramp_share), top)
        for low_share in (0.4, 0.6, 0.8, 1.0)
        for ramp_share in (0.2, 0.5, 1.0)
        for top in (math.sqrt(setting.low * setting.high), setting.high)
        if grid * (low_share + ramp_share) <= setting.rounds
    ]
    families = (flood_tree(setting, *shape, every=5) for shape in shapes)
    return max(tree_lower_bound(setting, family).ratio for family in families)


def named_setting(name: str) -> Setting:
    """The setting of a config or of one of :data:`CLASSIC_SETTINGS`."""
    if name in CLASSIC_SETTINGS:
        return Setting(**CLASSIC_SETTINGS[name])
    return load_config(name).setting


def stored_families(out: Path) -> dict:
    """What ``OUT/lower_bounds.json`` holds (nothing when absent or unreadable)."""
    try:
        return json.loads((out / "lower_bounds.json").read_text())
    except (OSError, ValueError):
        return {}


def setting_bound(name: str, setting: Setting, out: Path) -> float:
    """The certified bound of the setting of ``name`` (a config or a classic setting): the
    largest of its family's and :func:`branching_bound`'s. The family is the
    one this script stored in ``OUT/lower_bounds.json`` for the same setting, certified again
    here (one LP and an exact best response), else a search now with the defaults, stored
    there too; a classic setting's is :func:`ramp_bound`."""
    return max(_family_bound(name, setting, out).ratio, branching_bound(setting) or 0.0)


def _family_bound(name: str, setting: Setting, out: Path) -> LowerBound:
    if name in CLASSIC_SETTINGS:
        return ramp_bound(setting)
    families = stored_families(out)
    for family in families.values():
        if family["setting"] == setting.describe():
            densities = np.asarray(family["densities"])
            if setting.resources == 1:
                units = np.round(np.asarray(family["demands"]) * setting.grid_size).astype(int)
                return stopping_lower_bound(setting, units, densities)
            units = np.asarray(family["demands"]) * setting.grid_size / setting.capacities
            return bundle_lower_bound(setting, np.round(units).astype(int), densities)
    best = max(search(setting), key=lambda bound: bound.ratio)
    families[name] = {"setting": setting.describe(), **best.describe()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "lower_bounds.json").write_text(json.dumps(families, indent=1))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for the tables")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per search chain")
    parser.add_argument("--restarts", type=int, default=CHAINS, help="search chains per setting")
    parser.add_argument(
        "--candidates", type=int, default=CANDIDATES, help="mutations per chain and step"
    )
    parser.add_argument("--seed", type=int, default=0, help="the search's key")
    parser.add_argument(
        "--only", action="append", choices=[*SETTINGS, *CLASSIC_SETTINGS], help="these settings"
    )
    args = parser.parse_args()
    if args.steps < 0 or args.restarts < 1 or args.candidates < 1:
        parser.error("--steps must be >= 0, --restarts and --candidates >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, families = [], stored_families(out)
    for name in args.only or [*SETTINGS, *CLASSIC_SETTINGS]:
        setting = named_setting(name)
        start = time.perf_counter()
        classic = name in CLASSIC_SETTINGS
        budget = (args.steps, args.restarts, args.candidates, args.seed)
        found = [] if classic else search(setting, *budget)
        best = ramp_bound(setting) if classic else max(found, key=lambda bound: bound.ratio)
        threshold = certify_policy(setting, make_baseline("threshold", setting)).ratio
        rows.append(
            {
                "configs": ", ".join((name, *SETTINGS.get(name, ()))),
                "setting": figures.setting_title(setting.describe()),
                "lower_bound": best.ratio,
                "lp_ratio": best.lp_ratio,
                "every_search": [round(bound.ratio, 4) for bound in found],
                "branching": branching_bound(setting),
                "family": "ramp" if classic else "stopping",
                "buyers": len(best.demands),
                "supply": float(best.demands.sum()),  # in capacities
                "threshold_exact": threshold,
                "one_plus_ln": 1 + math.log(setting.theta),
                "steps": 0 if classic else args.steps,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        families[name] = {"setting": setting.describe(), **best.describe()}
        print(rows[-1], flush=True)
    write_csv(rows, out / "lower_bounds.csv")
    (out / "lower_bounds.json").write_text(json.dumps(families, indent=1))
    markdown = table(rows)
    (out / "lower_bounds.md").write_text(markdown)
    print(markdown)


def table(rows: list[dict]) -> str:
    lines = [
        "Lower bound on the CR of every online algorithm (stopping, classic-ramp and branching "
        "families, certified); "
        "larger is stronger.",
        "",
        "| configs | setting | lower bound | LP value | every search | family: buyers, supply "
        "(capacities) | branching (ramp and floods) | threshold (exact) | 1 + ln(U/L) | steps "
        "| s |",
        "|---" * 11 + "|",
    ]
    for row in rows:
        cells = [
            row["configs"],
            row["setting"],
            fmt(row["lower_bound"]),
            fmt(row["lp_ratio"]),
            ", ".join(f"{r:.4f}" for r in row["every_search"]) or "none (classic family)",
            f"{row['family']}: {row['buyers']}, {row['supply']:.2f}",
            fmt(row["branching"]),
            fmt(row["threshold_exact"]),
            fmt(row["one_plus_ln"]),
            str(row["steps"]),
            str(row["seconds"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
