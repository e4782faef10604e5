"""Claim: for one resource, a pricing table that descends its own exact certificate comes
within a few percent of the best possible competitive ratio of its setting, and a
deterministic price curve learned that way from scratch matches or beats threshold pricing's
exact CR.

For each setting of :data:`SETTINGS` and each policy class of :data:`CLASSES`, a table is
trained with keys 0 .. N-1 by certificate descent (``problems/posted_price/descent.py``: every
step an exact best response, the DP, and a gradient step against it). Every figure in the
table is a float64 DP certificate of ``certify_dp``, the evaluator's own ``exact`` source:

- the delivered table's certificate: the exact CR of a deterministic table, an upper bound
  on the oblivious CR of a randomised one;
- ``threshold``'s exact CR in the same setting;
- the certified lower bound for every online algorithm (``lower_bounds.setting_bound``: the
  largest of the stored family's, certified again, and the branching trees'), and the
  bracket: certificate / lower bound.

The k1 settings are those of the from-scratch configs (200 buyers of 1%, and 40 large
indivisible buyers); the classic settings (``lower_bounds.CLASSIC_SETTINGS``) carry 32
capacities of supply, so that the classic ramp fits. Both classes hide the round (one row
for all rounds), as in the classic model; in :data:`ROUND_SEEN_SETTINGS`, finite settings
whose horizon the from-scratch networks are told, a third class sees it (``randomised, round
seen``: the shared row plus a residual per round). Targets (:data:`TARGETS`): the bracket of
the randomised tables, at the median and on every seed; the deterministic curve's exact CR
against threshold's. A second table brackets each setting's best possible CR: [the lower
bound, the lowest certificate of any delivered table], with the table that attains it. With
``--measure`` each delivered table is also measured by the evaluator with its default budget
(as every algorithm in the project is), which adds its measured CR: the worst ratio a real
input was found to attain.

Run: python experiments/certificate_descent.py [--out results] [--seeds 3] [--only k1-u10]
         [--class deterministic] [--steps N] [--atoms N] [--measure] [--fresh]
Writes OUT/certificate_descent.{md,csv} and each run's result and delivered table to
OUT/certificate_descent/<setting>-<class>-seed<n>.json, and the table as a policy file beside
it, ``<run>-policy.json`` (``advonline evaluate --policy FILE`` measures it); a run whose file
exists is not trained again unless ``--fresh``, which replaces both (``--measure`` measures a
stored table without training it again). ``--class`` keeps only the classes named;
``--steps`` and ``--atoms`` change every class's steps and prices (give them another
``--out``: a stored run is reused by its name, whatever it was trained with).
On 2 CPU cores, per randomised run: 5-11 min for 200 buyers of 1%, about 2 min for the
classic settings, 0.5 min for large demands; a deterministic run takes a sixth to a tenth of
that (one price atom instead of 16); a round-seen run (480 steps) about 8.5 min for 200
buyers of 1% and 0.5 min for large demands. About 3 hours for the whole sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import lower_bounds
import numpy as np
from common import fmt, spread, write_csv

from advonline import environment, export
from advonline.baselines.posted_price import make_baseline
from advonline.evaluation import Budget, measure
from advonline.problems.posted_price import figures
from advonline.problems.posted_price.certify import Certificate, certify_dp
from advonline.problems.posted_price.descent import (
    DescentConfig,
    descend,
    policy_document,
    table_policy,
)
from advonline.problems.posted_price.model import PriceDistribution, TablePolicy
from advonline.problems.posted_price.problem import PROBLEM as POSTED

#: setting name (a config's, or a classic setting's) -> the row's label
SETTINGS = {
    "k1-u5-oracle": "k1-u5",
    "k1-u10-oracle": "k1-u10",
    "k1-u100-oracle": "k1-u100",
    "k1-u10-d025-oracle": "k1-u10-d025",
    **{name: name for name in lower_bounds.CLASSIC_SETTINGS},
}

#: steps of the class that sees the round: its residuals learn from the worst cases' rounds
STEPS_SEEN = 480
#: policy class -> how it descends (the same for every setting)
CLASSES = {
    "randomised": DescentConfig(policy="randomised", atoms=16, steps=240, learning_rate=0.1),
    "deterministic": DescentConfig(policy="deterministic", steps=240, learning_rate=0.05),
    "randomised, round seen": DescentConfig(
        policy="randomised", atoms=16, steps=STEPS_SEEN, learning_rate=0.1, round_seen=True
    ),
}
#: the classes that see the round run in the finite settings whose bracket the hidden round
#: leaves above its target (the from-scratch networks are told the horizon there too)
ROUND_SEEN_SETTINGS = ("k1-u100", "k1-u10-d025")

#: label -> (randomised: median bracket, every seed's bracket; deterministic: CR / threshold's)
TARGETS = {
    "k1-u5": (1.05, 1.08, None),
    "k1-u10": (1.05, 1.08, None),
    "k1-u100": (1.05, 1.08, None),
    "k1-u10-d025": (1.25, None, None),
    "classic-u5": (1.02, None, 1.02),
    "classic-u10": (1.02, None, 1.02),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results", help="folder for the tables")
    parser.add_argument("--seeds", type=int, default=3, help="keys 0 .. N-1 per setting")
    parser.add_argument(
        "--only", action="append", choices=list(SETTINGS.values()), help="these settings"
    )
    parser.add_argument(
        "--class", dest="classes", action="append", choices=list(CLASSES), help="these classes"
    )
    parser.add_argument("--steps", type=int, help="every class's steps (default: its own)")
    parser.add_argument("--atoms", type=int, help="the randomised classes' prices (default 16)")
    parser.add_argument("--measure", action="store_true", help="also run the evaluator")
    parser.add_argument("--fresh", action="store_true", help="train again what is stored")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    out = Path(args.out)
    if (args.steps is not None and args.steps < 1) or (args.atoms is not None and args.atoms < 2):
        parser.error("--steps must be >= 1 and --atoms >= 2")
    changes = {name: value for name in ("steps", "atoms") if (value := getattr(args, name))}
    classes = {
        name: dataclasses.replace(config, **changes)
        for name, config in CLASSES.items()
        if name in (args.classes or CLASSES)
    }
    labels = args.only or list(SETTINGS.values())
    rows = sweep(labels, args.seeds, out, args.measure, args.fresh, classes)
    write_csv(rows, out / "certificate_descent.csv")
    markdown = report(rows)
    (out / "certificate_descent.md").write_text(markdown)
    print(markdown)


def sweep(
    labels: list[str],
    seeds: int,
    out: Path,
    evaluate: bool,
    fresh: bool,
    classes: dict[str, DescentConfig] = CLASSES,
) -> list[dict]:
    """One row per (setting, class of ``classes``, seed), trained now or read from its stored
    file."""
    folder = out / "certificate_descent"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, label in SETTINGS.items():
        if label not in labels:
            continue
        setting = lower_bounds.named_setting(name)
        bound = lower_bounds.setting_bound(name, setting, out)
        threshold = certify_dp(setting, make_baseline("threshold", setting)).ratio
        for policy_class, config in classes.items():
            if config.round_seen and label not in ROUND_SEEN_SETTINGS:
                continue
            for seed in range(seeds):
                path = folder / f"{label}-{_file_name(policy_class)}-seed{seed}.json"
                if fresh or not path.is_file():
                    _run(setting, policy_class, config, seed, path)
                    _policy_path(path).unlink(missing_ok=True)  # the earlier table's
                _write_policy(setting, config, path)
                row = _read(path)
                if evaluate and "measured" not in row:
                    row = _measure(setting, config, path)
                row.update(
                    setting_name=label,
                    setting=figures.setting_title(setting.describe()),
                    lower_bound=bound,
                    threshold_exact=threshold,
                    one_plus_ln=1 + math.log(setting.theta),
                )
                print({k: v for k, v in row.items() if k != "table"}, flush=True)
                rows.append({k: v for k, v in row.items() if k != "table"})
    return rows


def _run(setting, policy_class: str, config: DescentConfig, seed: int, path: Path) -> None:
    """Train one table and store its result with the table itself and the environment."""
    found = descend(setting, config, jax.random.key(seed))
    table = found.policy.table
    result = {
        "policy_class": policy_class,
        "seed": seed,
        "certificate": found.certificate.ratio,
        "certificate_note": found.certificate.note,
        "first_certificate": found.history[0],
        "steps": config.steps,
        "atoms": config.atoms if config.policy == "randomised" else 1,
        "train_seconds": round(found.seconds, 1),
        "table": {  # [G + 1, A], or [T, G + 1, A] with the round seen
            name: np.asarray(column if config.round_seen else column[0]).tolist()
            for name, column in (("prices", table.prices), ("probs", table.probs))
        },
        "environment": environment.describe(),
    }
    path.write_text(json.dumps(result, indent=1))


def _stored_policy(setting, config: DescentConfig, result: dict) -> TablePolicy:
    """The policy that posts a stored result's table (with the round hidden, its one row in
    every round)."""
    rows = [np.asarray(result["table"][name], np.float64) for name in ("prices", "probs")]
    shape = (setting.rounds, setting.grid_size + 1, rows[0].shape[-1])
    with jax.enable_x64(True):
        prices, probs = (jnp.broadcast_to(row, shape) for row in rows)
    return table_policy(setting, config, PriceDistribution(prices, probs))


def _file_name(policy_class: str) -> str:
    """A class's name in file names: ``randomised, round seen`` -> ``randomised-round-seen``."""
    return policy_class.replace(", ", "-").replace(" ", "-")


def _policy_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}-policy.json")


def _write_policy(setting, config: DescentConfig, path: Path) -> None:
    """The stored run's table as a policy file beside it, ``<run>-policy.json`` (once: an
    existing file is kept), which ``advonline evaluate --policy`` measures."""
    target = _policy_path(path)
    if target.is_file():
        return
    result = _read(path)
    note = result["certificate_note"]
    certificate = Certificate(result["certificate"], "dynamic-programme", note)
    provenance = {
        **export.stamp(),
        "seed": result["seed"],
        "training_steps": result["steps"],
        "measured": result.get("measured"),
    }
    policy = _stored_policy(setting, config, result)
    export.write(target, policy_document(setting, config, policy, certificate, provenance))


def _measure(setting, config: DescentConfig, path: Path) -> dict:
    """Add the evaluator's measurement of the stored table (its default budget) to its file."""
    result = _read(path)
    table = _stored_policy(setting, config, result)
    measured = measure(POSTED, setting, f"descent-{config.policy}", table, Budget())
    result.update(measured=measured.competitive_ratio, measured_source=measured.worst_source)
    path.write_text(json.dumps(result, indent=1))
    return result


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def report(rows: list[dict]) -> str:
    """What the command prints: :func:`table`, then :func:`bracketed`."""
    return table(rows) + "\n" + bracketed(rows)


def table(rows: list[dict]) -> str:
    """Per setting and class: median [min, max] over seeds of the certificate, the bracket
    against the lower bound and the ratio to threshold's exact CR, with the targets marked."""
    lines = [
        "Certificate descent (one resource; the round hidden unless the class says it is "
        "seen): every figure a DP certificate, median [min, max] over seeds.",
        "",
        "| setting | class | certificate | measured | lower bound | bracket: certificate / "
        "bound | threshold (exact) | / threshold | 1 + ln(U/L) | target | train s |",
        "|---" * 11 + "|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["setting_name"], row["policy_class"]), []).append(row)
    for (label, policy_class), mine in groups.items():
        first = mine[0]
        certified = [row["certificate"] for row in mine]
        brackets = [c / first["lower_bound"] for c in certified]
        to_threshold = [c / first["threshold_exact"] for c in certified]
        measured = [row.get("measured") for row in mine]
        cells = [
            f"{label}: {first['setting']}",
            policy_class,
            spread(certified),
            spread(measured),
            fmt(first["lower_bound"]),
            spread(brackets),
            fmt(first["threshold_exact"]),
            spread(to_threshold),
            fmt(first["one_plus_ln"]),
            _target(label, policy_class, brackets, to_threshold),
            spread([round(row["train_seconds"]) for row in mine]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def bracketed(rows: list[dict]) -> str:
    """Per setting, the best possible CR of any online algorithm bracketed: [the certified
    lower bound, the lowest certificate any delivered table has], with the table (class and
    seed) that attains the upper end, beside 1 + ln(U/L) and threshold's exact CR."""
    lines = [
        "Best possible CR, bracketed: no online algorithm is below the lower end; the table "
        "named attains the upper end (its DP certificate).",
        "",
        "| setting | best possible CR in | width: upper / lower | attained by | 1 + ln(U/L) "
        "| threshold (exact) |",
        "|---" * 6 + "|",
    ]
    settings: dict[str, list[dict]] = {}
    for row in rows:
        settings.setdefault(row["setting_name"], []).append(row)
    for label, mine in settings.items():
        best = min(mine, key=lambda row: row["certificate"])
        lower = best["lower_bound"]
        cells = [
            f"{label}: {best['setting']}",
            f"[{fmt(lower)}, {fmt(best['certificate'])}]",
            fmt(best["certificate"] / lower),
            f"{best['policy_class']}, seed {best['seed']}",
            fmt(best["one_plus_ln"]),
            fmt(best["threshold_exact"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _target(label: str, policy_class: str, brackets: list, to_threshold: list) -> str:
    """The target of this row and whether it is met, or ``none set``."""
    median, every, threshold_factor = TARGETS.get(label, (None, None, None))
    if policy_class == "deterministic":
        if threshold_factor is None:
            return "none set"
        met = max(to_threshold) <= threshold_factor
        return f"every seed <= {threshold_factor} x threshold: {'met' if met else 'NOT met'}"
    if median is None:
        return "none set"
    met = statistics.median(brackets) <= median and (every is None or max(brackets) <= every)
    every_text = "" if every is None else f", every seed <= {every}"
    return f"bracket median <= {median}{every_text}: {'met' if met else 'NOT met'}"


if __name__ == "__main__":
    main()
