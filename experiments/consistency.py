"""Claim: on random settings, at scales and shapes no other table uses, every figure the
evaluator prints is consistent with every certificate it prints.

Three facts hold exactly, whatever the setting (up to float rounding: :data:`ROUNDING`), so
one that fails is a bug in a certificate, a lower bound or a source of the measurement:

- every source of a baseline's measurement (the adversary's, the families', the random
  inputs', and the exact worst case where there is one) is a real input's ratio, so it is at
  most that baseline's certificate: its exact ratio where the problem has one (posted
  pricing, where its programme fits; ski rental) or its certified upper bound (one-way
  trading);
- the problem's certified lower bound holds for every online algorithm, so it is at most
  every baseline's certificate;
- a ratio has no units and resources have no order: with every density (rate) divided by L
  (m), and posted pricing's capacities divided by the smallest and listed in reverse, the
  lower bound and every certificate are the same (:func:`unit_scale`; the two inequalities
  are checked there too).

Each setting is drawn at random: posted pricing's densities at any scale in [1e-6, 1e6] and
``U / L`` up to 1e4, horizons of 2-40 buyers, demands of 5-100% of a capacity anywhere in
[1e-3, 1e3], divisible or not, and in one setting of three two resources (``U / L`` up to
100, 2-12 buyers of 20-100% of each capacity, one or two demand levels); one-way trading's
rates at any scale in [1e-8, 1e8] with ``M / m`` up to 1e9, 1-80 rounds on 2-80 grid rates;
ski rental's prices of 2-40 days over seasons of 1-60. Each setting is measured with a small
budget (printed): the checks need real inputs, not the hardest ones.

Run: python experiments/consistency.py [--problem posted-price] [--settings 20] [--seed 0]
Prints a row per setting and the count of violations; status 1 if there is any. About 13 min
on 2 CPU cores (posted pricing's settings about 20 s each, measured twice: each compiles its
programmes).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

import jax

from advonline import problems as registry
from advonline.evaluation import Budget, measure

#: Small: the checks need real inputs' ratios, not the hardest ones.
BUDGET = Budget(family_members=17, random_instances=16, adversary_steps=4, search_steps=4)
#: Slack for float rounding between a source's ratio and a certificate's: a policy of
#: float32 arrays is simulated in float32 (advonline/sources.py), its certificate in float64.
ROUNDING = 1e-6


def posted_price(draw: random.Random) -> dict:
    resources = draw.choice([1, 1, 2])  # two: fewer, shorter rounds (the product grid's DP)
    low = 10 ** draw.uniform(-6, 6)
    return {
        "resources": resources,
        "low": low,
        "high": low * 10 ** draw.uniform(0.05, 4 if resources == 1 else 2),
        "rounds": draw.randint(2, 40 if resources == 1 else 12),
        "max_demand": draw.choice([0.05, 0.1, 0.2, 0.25, 0.5, 1.0][2 * (resources - 1) :]),
        "demand_levels": draw.choice([1, 1, 2, 3][: 5 - 2 * resources]),
        "divisible": draw.random() < 0.5,
        "capacities": [10 ** draw.uniform(-3, 3) for _ in range(resources)],
    }


def one_way_trading(draw: random.Random) -> dict:
    low = 10 ** draw.uniform(-8, 8)
    return {
        "low": low,
        "high": low * 10 ** draw.uniform(0.05, 9),
        "rounds": draw.randint(1, 80),
        "levels": draw.randint(2, 80),
    }


def ski_rental(draw: random.Random) -> dict:
    return {"buy": draw.randint(2, 40), "rounds": draw.randint(1, 60)}


SETTINGS = {
    "posted-price": posted_price,
    "one-way-trading": one_way_trading,
    "ski-rental": ski_rental,
}


def unit_scale(table: dict) -> dict | None:
    """The same game in the units the shipped configs use: densities (rates) divided by L
    (m), and posted pricing's capacities by the smallest, in reverse order; None for a setting
    with no scale (no ``low``). Every ratio is the same in these units (values and OPT scale
    alike) and in any order of the resources (every demand is a fraction of its capacity)."""
    if "low" not in table:
        return None
    scaled = {**table, "low": 1.0, "high": table["high"] / table["low"]}
    if "capacities" in table:
        scaled["capacities"] = [c / min(table["capacities"]) for c in table["capacities"][::-1]]
    return scaled


def certificate(measured) -> float | None:
    """The lowest certified upper bound on a baseline's ratio: its exact ratio or its
    certified upper bound (None without either)."""
    exact = measured.sources.get("exact")
    bounds = [exact.ratio if exact is not None else None, measured.upper_bound.ratio]
    bounds = [bound for bound in bounds if bound is not None]
    return min(bounds) if bounds else None


def check(problem, setting) -> tuple[float | None, dict, list[str]]:
    """The lower bound, every baseline's certificate, and the inequalities that fail."""
    lower = problem.lower_bound_of(setting)
    certificates, failed = {}, []
    for name, make in problem.baselines.items():
        measured = measure(problem, setting, name, make(setting), BUDGET)
        bound = certificates[name] = certificate(measured)
        for source, found in measured.sources.items():
            if bound is not None and found.ratio is not None:
                if found.ratio > bound * (1 + ROUNDING):
                    failed.append(f"{name} {source} {found.ratio:.6g} > {bound:.6g}")
    lowest = min((bound for bound in certificates.values() if bound is not None), default=None)
    if lower is not None and lowest is not None and lower.ratio > lowest * (1 + ROUNDING):
        failed.append(f"lower bound {lower.ratio:.6g} > certificate {lowest:.6g}")
    return (None if lower is None else lower.ratio), certificates, failed


def differences(found: tuple, unit: tuple) -> list[str]:
    """The figures of :func:`check` at a setting's scale (``found``) and in its units
    (``unit``) that differ by more than :data:`ROUNDING`, or where only one has a figure."""
    (lower, certificates, _), (unit_lower, unit_certificates, _) = found, unit
    pairs = [("lower bound", lower, unit_lower)]
    pairs += [(name, bound, unit_certificates[name]) for name, bound in certificates.items()]
    return [
        f"{name} {at_scale} at scale, {in_units} in units"
        for name, at_scale, in_units in pairs
        if (at_scale is None) != (in_units is None)
        or (at_scale is not None and not math.isclose(at_scale, in_units, rel_tol=ROUNDING))
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", action="append", choices=sorted(SETTINGS))
    parser.add_argument("--settings", type=int, default=20, help="random settings a problem")
    parser.add_argument("--seed", type=int, default=0, help="of the settings drawn")
    args = parser.parse_args()
    print(f"budget: {BUDGET.summary()}")
    violations = 0
    for name in args.problem or sorted(SETTINGS):
        problem, draw = registry.get(name), random.Random(args.seed)
        for _ in range(args.settings):
            table = SETTINGS[name](draw)
            setting = problem.setting.from_config(table)
            started = time.perf_counter()
            found = lower, certificates, failed = check(problem, setting)
            if (scaled := unit_scale(table)) is not None:
                unit = check(problem, problem.setting.from_config(scaled))
                failed += [f"in units: {line}" for line in unit[2]]
                failed += differences(found, unit)
            violations += len(failed)
            jax.clear_caches()  # every setting compiles its own programmes: let them go
            figures = ", ".join(
                f"{baseline} {'n/a' if bound is None else f'{bound:.4f}'}"
                for baseline, bound in certificates.items()
            )
            lower_text = "n/a" if lower is None else f"{lower:.4f}"
            verdict = "; ".join(failed) or "consistent"
            print(
                f"{name} {setting.describe()}: lower bound {lower_text}; certificates {figures}; "
                f"{verdict} ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    print(f"{violations} checks failed")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
