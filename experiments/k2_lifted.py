"""Claim: for two resources, a one-resource pricing table posted on both resources at once is
certified lower than every network that two-resource training delivered.

For each seed, a randomised table (``--atoms`` prices geometric in [L, U], the round seen) is
trained by certificate descent (``descent.descend``, 240 steps, as ``certificate_descent.py``
trains its tables) on one resource of the config's setting alone (``descent.one_resource``:
the same rounds, prices and demand levels). The table is then posted on every resource, each
at its own units sold, with one shared quantile, so a bundle's price is the sum of its
resources' prices (``descent.LiftedTableOf``), and certified over the product grid
(``grid_certify.certify_table``, float64): an upper bound on its competitive ratio against an
adversary that sees what has been sold, not the price draw. ``--steps N`` then descends that
two-resource certificate through the one-resource table's parameters for N Adam steps
(``descent.grid_descend_params``, the rate cosine-decayed from ``--learning-rate``; each
gradient in float32, a direction only, and every step certified in float64). ``--measure``
measures the delivered policy with the evaluator's default budget (``evaluation.measure``),
whose worst find the certificate must bound. ``--seconds S`` stops each seed's descent once S
seconds have passed (the rate's schedule still spans ``--steps``; the tables give the steps
taken), and ``--concurrent N`` runs N seeds at once in threads that share the programmes
compiled once and the device (``advonline.seeds.concurrently``, as ``advonline train --seeds``).
Each seed's delivered parameters are written beside its figures (``.npz``, float64), and
``--resume`` starts each seed from the parameters an earlier run wrote there instead of a
newly trained table (its one-resource and lifted certificates computed again), so a descent
can go on where the last one stopped, with a fresh schedule; the file is replaced only by
parameters certified as low or lower. Without ``--resume`` a folder that holds such files is
refused, so that no delivered table is overwritten. A lifted table is also written as a
policy file, ``<config>-seed<n>-policy.json`` (replaced with its parameters), that
``advonline evaluate --policy`` measures and certifies and the NumPy loader reads.
``--coupled`` descends a coupled table (``descent.CoupledTableOf``) instead: the lifted table
plus a row of logits for each other resource's units sold, zero at the start, so that a
resource's prices may follow what has been sold of the others. A coupled table has no policy
file (a version-1 file's resource posts by its own utilisation alone). ``--widened`` makes
the one-resource table's prices span [L, K U] and trains it there (``LiftedTableOf(...,
widened=True)``): that is the one-resource game bundles and one resource's own buyers play
(``bundle_bound.widened``), so a resource priced above U sells to bundles alone and keeps
what is left of it for them; its files are ``<config>-widened-seed<n>.*``.

The bracket is [lower bound, lowest certificate], with the setting's certified lower bound on
every online algorithm (``lower_bounds.setting_bound``, as ``k2_descent.py`` takes it).

Run: python experiments/k2_lifted.py [--out results] [--seeds 3] [--config k2-u10-certified]
         [--atoms 32] [--steps 0] [--learning-rate 0.05] [--measure] [--seconds S]
         [--concurrent 1] [--resume] [--coupled] [--widened]
Writes OUT/k2_lifted.{md,csv}, OUT/k2_lifted/<config>[-widened]-seed<n>.{json,npz} and, for
a lifted table, OUT/k2_lifted/<config>[-widened]-seed<n>-policy.json.
On 2 CPU cores, per seed: about 35 s for the one-resource table, 3 minutes for its
two-resource certificate, 2-5 more to measure it; with 16 prices, about a minute a descent
step (a float32 gradient through the induction, then a float64 certificate).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import lower_bounds
import numpy as np
from common import fmt, load_config, spread, write_csv

from advonline import checksums, environment, export
from advonline.configs import ConfigError
from advonline.evaluation import Budget, measure
from advonline.folders import atomic_write
from advonline.problems.posted_price import descent, grid_certify, policy_writer
from advonline.problems.posted_price.certify import certify_dp
from advonline.problems.posted_price.model import SettingError
from advonline.problems.posted_price.problem import PROBLEM as POSTED
from advonline.problems.posted_price.product_grid import GridTablePolicy
from advonline.seeds import concurrently

#: The one-resource tables' training, as ``certificate_descent.py``'s randomised rows.
TABLE_STEPS, TABLE_RATE = 240, 0.1


def lift_seed(
    table_of: descent.LiftedTableOf | descent.CoupledTableOf,
    seed: int,
    steps: int,
    learning_rate: float,
    seconds: float | None = None,
    saved: dict[str, np.ndarray] | None = None,
):
    """Train the one-resource table of ``seed`` (or take the ``saved`` parameters, certified
    again on one resource), certify it lifted by ``table_of`` (a coupled table starts with
    its cross terms zero, unless saved), descend that certificate ``steps`` steps (or for
    ``seconds``); the figures, the delivered grid table and its parameters."""
    setting, config = table_of.setting, table_of.config
    coupled = isinstance(table_of, descent.CoupledTableOf)
    one = table_of.single
    start = time.perf_counter()
    if saved is None:
        trained = descent.descend(one, config, jax.random.key(seed))
        params, alone = trained.params, trained.certificate.ratio
    else:
        with jax.enable_x64(True):
            params = jnp.asarray(saved["params"], jnp.float64)
            table = descent.price_table(one, config, params)
            alone = certify_dp(one, descent.table_policy(one, config, table)).ratio
    table_s = time.perf_counter() - start
    with jax.enable_x64(True):
        if coupled:
            params = descent.coupled_params(setting, params)
            if saved is not None and "cross" in saved:
                params = (params[0], jnp.asarray(saved["cross"], jnp.float64))
        start = time.perf_counter()
        # a widened table's one-resource game is not among the K-resource inputs, so this
        # start may lie above the lifted root
        lifted = grid_certify.certify_table_from(setting, table_of(params), 0.9 * alone)
        certify_s = time.perf_counter() - start
        if lifted.ratio is None:
            raise SystemExit(f"no two-resource certificate: {lifted.note}")
        start = time.perf_counter()
        found = descent.Descended(params, lifted.ratio, ())
        if steps:  # the lowest certificate: the lifted one when no step goes below it
            found = descent.grid_descend_params(
                setting,
                table_of,
                params,
                lifted.ratio,
                steps,
                learning_rate,
                jnp.float32,
                lambda line: print(
                    f"seed {seed} {time.perf_counter() - start:.0f} s {line}", flush=True
                ),
                seconds,
            )
        descent_s = time.perf_counter() - start
        table = table_of(found.params)
    own, cross = found.params if coupled else (found.params, None)
    arrays = {"params": np.asarray(own)} | ({} if cross is None else {"cross": np.asarray(cross)})
    return {
        "resumed": saved is not None,
        "one-resource certificate": alone,
        "lifted certificate": lifted.ratio,
        "certificate after descent": found.certificate,
        "steps taken": len(found.history),
        "history": " ".join(f"{r:.4f}" for r in found.history),
        "table s": round(table_s),
        "certify s": round(certify_s),
        "descent s": round(descent_s),
        "policy": GridTablePolicy(table, setting),
        "params": arrays,
    }


def saved_params(path: Path, shapes: dict[str, tuple[int, ...]]) -> dict | None:
    """The parameters an earlier run wrote to ``path`` (None if there is no such file), each
    array of ``shapes`` it holds (``cross`` only where ``shapes`` names it: a coupled run's
    file needs ``--coupled``); ValueError, in one line, if they are not finite arrays of those
    shapes."""
    if not path.exists():
        return None
    try:
        with np.load(path) as stored:
            arrays = {name: np.asarray(stored[name], np.float64) for name in stored.files}
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path}: not parameters this script wrote") from error
    if "params" not in arrays or set(arrays) - {"params", "cross"}:
        raise ValueError(f"{path}: not parameters this script wrote")
    if set(arrays) - set(shapes):
        raise ValueError(f"{path}: a coupled table's parameters: resume with --coupled")
    for name, array in arrays.items():
        if array.shape != shapes[name]:
            raise ValueError(
                f"{path}: {name} of shape {array.shape}, not {shapes[name]}: other --atoms?"
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(f"{path}: parameters that are not all finite")
    return arrays


def write_params(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` to ``path`` atomically, so that a stopped run leaves the earlier file whole."""
    packed = io.BytesIO()
    np.savez(packed, **arrays)
    atomic_write(path, packed.getvalue())


def policy_document(table_of: descent.LiftedTableOf, params, row: dict) -> dict:
    """A delivered lifted table as a policy file (version 1: the one-resource table posted on
    every resource at its own utilisation, every digit of its float64 probabilities), which
    ``advonline evaluate --policy`` measures and certifies as the table it is, and which the
    NumPy loader reads; its certificate and descent in the provenance."""
    setting, config = table_of.setting, table_of.config
    with jax.enable_x64(True):
        own = descent.price_table(table_of.single, config, jnp.asarray(params, jnp.float64))
        per_resource = jax.tree.map(
            lambda column: np.stack([np.asarray(column)] * setting.resources), own
        )
    provenance = {
        **export.stamp(),
        "algorithm": "lifted-table",
        "seed": row["seed"],
        "descent": dataclasses.asdict(config) | {"widened": table_of.widened},
        "descent_steps": row["steps taken"],
        "certificate": row["certificate after descent"],
    }
    return policy_writer.tables_document(setting, per_resource, False, provenance, digits=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--config", default="k2-u10-certified")
    parser.add_argument("--atoms", type=int, default=32)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--concurrent", type=int, default=1)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--coupled", action="store_true")
    parser.add_argument("--widened", action="store_true")
    args = parser.parse_args()
    if args.seeds < 1 or args.atoms < 2 or args.steps < 0 or not args.learning_rate > 0:
        parser.error("--seeds >= 1, --atoms >= 2, --steps >= 0 and --learning-rate > 0")
    if args.concurrent < 1 or (args.seconds is not None and not args.seconds > 0):
        parser.error("--concurrent >= 1 and --seconds > 0")
    out = Path(args.out)
    folder = out / "k2_lifted"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        setting = load_config(args.config).setting
    except ConfigError as error:
        parser.error(str(error))
    if setting.resources < 2:
        parser.error(f"{args.config} has one resource: nothing to lift the table to")
    config = descent.DescentConfig(
        policy="randomised",
        atoms=args.atoms,
        round_seen=True,
        steps=TABLE_STEPS,
        learning_rate=TABLE_RATE,
    )
    try:
        table_of = (descent.CoupledTableOf if args.coupled else descent.LiftedTableOf)(
            setting, config, args.widened
        )
    except SettingError as error:
        parser.error(str(error))
    shapes = {"params": descent.initial_params(table_of.single, config, jax.random.key(0)).shape}
    if args.coupled:
        shapes["cross"] = (setting.grid_size + 1, args.atoms)
    prefix = f"{args.config}-widened" if args.widened else args.config  # apart: same shapes
    stems = [folder / f"{prefix}-seed{seed}" for seed in range(args.seeds)]
    files = [stem.with_suffix(".npz") for stem in stems]
    kept = [path for path in files if path.exists()]
    if kept and not args.resume:
        parser.error(f"{kept[0]} holds a delivered table: --resume, or another --out")
    try:  # every saved file read before any seed starts: a bad one stops the run at once
        saved = [saved_params(path, shapes) for path in files]
    except ValueError as error:
        parser.error(str(error))
    bound = lower_bounds.setting_bound(args.config, setting, out)

    def one(seed: int) -> dict:
        stem = stems[seed]
        result = lift_seed(
            table_of, seed, args.steps, args.learning_rate, args.seconds, saved[seed]
        )
        policy = result.pop("policy")
        params = result.pop("params")
        write_params(files[seed], params)
        row = {"config": args.config, "seed": seed, "atoms": args.atoms, **result}
        if not args.coupled:  # replaced with the parameters: never certified higher
            document = policy_document(table_of, params["params"], row)
            text = json.dumps(checksums.signed(document), separators=(",", ":"))
            atomic_write(stem.with_name(f"{stem.name}-policy.json"), text.encode())
        row["coupled"], row["widened"] = args.coupled, args.widened
        row["steps"], row["learning rate"] = args.steps, args.learning_rate
        row["bracket"] = row["certificate after descent"] / bound
        if args.measure:
            start = time.perf_counter()
            name = "coupled" if args.coupled else "lifted"
            measured = measure(POSTED, setting, name, policy, Budget())
            row["measured CR"] = measured.competitive_ratio
            row["measure s"] = round(time.perf_counter() - start)
        stem.with_suffix(".json").write_text(json.dumps(row, indent=1))
        print(
            f"{args.config} seed {seed}: one resource {fmt(row['one-resource certificate'])}, "
            f"lifted {fmt(row['lifted certificate'])}, after {row['steps taken']} steps "
            f"{fmt(row['certificate after descent'])}",
            flush=True,
        )
        return row

    rows = concurrently(one, range(args.seeds), args.concurrent)
    write_csv(rows, out / "k2_lifted.csv")
    (out / "k2_lifted.md").write_text(table(rows, bound, setting))
    print(table(rows, bound, setting))


def table(rows: list[dict], bound: float, setting) -> str:
    """The per-seed table and the summary lines, median [min, max] over seeds."""
    columns = ["seed", *(["resumed"] if any(row["resumed"] for row in rows) else [])]
    columns += ["one-resource certificate", "lifted certificate"]
    if rows[0]["steps"]:
        columns += ["steps taken", "certificate after descent"]
    if any("measured CR" in row for row in rows):
        columns.append("measured CR")
    columns += ["bracket", "table s", "certify s"]
    lines = [f"setting: {json.dumps(setting.describe())}", environment.device_line(), ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c)) for c in columns) + " |")
    lowest = [r["certificate after descent"] for r in rows]
    lines += [
        "",
        f"two-resource certificate, {rows[0]['atoms']} atoms"
        f"{', widened' if rows[0]['widened'] else ''}"
        f"{', coupled' if rows[0]['coupled'] else ''}: {spread(lowest)}; lowest "
        f"{min(lowest):.4f}, bracket [{bound:.4f}, {min(lowest):.4f}] = "
        f"{min(lowest) / bound:.2f}x",
        "one-resource certificate: "
        f"{spread([r['one-resource certificate'] for r in rows])} (median "
        f"{statistics.median(r['one-resource certificate'] for r in rows):.4f})",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
