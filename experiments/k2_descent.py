"""Claim: the two-resource networks that training delivers are not at the bottom of their own
certificate; descending it further lowers the upper end of the two-resource bracket.

For each seed of a from-scratch two-resource config trained with ``algorithm.grid_certificate``
(its runs in ``OUT/from_scratch/<config>-seed<n>``, written by ``from_scratch.py``), the
delivered network is certified over the product grid (``grid_certify.certify_grid``, float64,
from scratch), then descends that certificate for ``--steps`` more Adam steps
(``training.descent``: the rate cosine-decayed from ``--learning-rate``, every step certified;
the same routine as the config's descent epochs, one long descent instead of
several short ones that restart the optimiser). Every figure is a certificate: an upper bound
on the network's competitive ratio against an adversary that sees what has been sold (for
the randomised network, not the price draw). The table gives, per seed, the certificate
before and after and the bracket [lower bound, certificate] against the setting's certified
lower bound (``lower_bounds.setting_bound``, as ``from_scratch.py``'s bracket: the family
stored in ``OUT/lower_bounds.json`` certified again, else searched now); the CSV and each
seed's JSON add every step's certificate.

The descended network of each seed is written as a policy file,
``OUT/k2_descent/<config>-seed<n>-policy.json`` (``advonline evaluate --policy FILE`` measures
it with the evaluator; ``--measure`` does that here, adding about 3 minutes a seed).

Run: python experiments/k2_descent.py [--out results] [--seeds 3] [--config k2-u10-certified]
         [--steps 16] [--learning-rate 0.001] [--measure]
Writes OUT/k2_descent.{md,csv} and OUT/k2_descent/<config>-seed<n>.json (the history).
On 2 CPU cores: about a minute for the first certificate, then 40-60 s a step (the gradient
through the whole induction and a certificate), about 18 min a seed for 16 steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import lower_bounds
from common import fmt, load_config, spread, write_csv

from advonline import export, pipeline
from advonline.evaluation import Budget, measure
from advonline.problems.posted_price import grid_certify
from advonline.problems.posted_price.training import descent


def descend_seed(run_folder: Path, steps: int, learning_rate: float) -> dict:
    """Certify the run's delivered network, descend its certificate ``steps`` steps, and
    return the figures with the descended parameters (in the network's own precision)."""
    run = pipeline.open_run(run_folder)
    game, params = run.delivered()
    setting = run.setting
    start = time.perf_counter()
    with jax.enable_x64(True):
        before = grid_certify.certify_grid(setting, game.policy(params)).ratio
    certified_s = time.perf_counter() - start
    start = time.perf_counter()
    found = descent(game, params, before, steps, learning_rate)
    return {
        "run": run,
        "game": game,
        "before": before,
        "descended": found.certificate,
        "history": list(found.history),
        "params": found.params,
        "certify_s": certified_s,
        "descent_s": time.perf_counter() - start,
    }


def certify_file(path: Path, near: float) -> float:
    """The certificate of the policy file at ``path`` as it loads (its float32 parameters:
    the figure the file carries), the Dinkelbach iteration started below ``near``."""
    _, setting, _, policy = pipeline.read_policy_file(path)
    with jax.enable_x64(True):
        return grid_certify.certify_grid(setting, policy, start=0.9 * near).ratio


def write_policy(result: dict, path: Path) -> None:
    """The descended network as a policy file (its provenance names the run it came from)."""
    run, game = result["run"], result["game"]
    source = export.provenance("learned", run.config, run.steps, str(run.folder), None)
    source["descended"] = {"steps": len(result["history"]), "from": str(run.folder)}
    path.unlink(missing_ok=True)  # this script's own output
    export.write(path, game.network_document(result["params"], False, source))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--config", default="k2-u10-certified")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--measure", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    folder = out / "k2_descent"
    folder.mkdir(parents=True, exist_ok=True)
    bound = lower_bounds.setting_bound(args.config, load_config(args.config).setting, out)
    rows = []
    for seed in range(args.seeds):
        run_folder = out / "from_scratch" / f"{args.config}-seed{seed}"
        result = descend_seed(run_folder, args.steps, args.learning_rate)
        policy_path = folder / f"{args.config}-seed{seed}-policy.json"
        write_policy(result, policy_path)
        result["after"] = certify_file(policy_path, result["descended"])
        row = {
            "config": args.config,
            "seed": seed,
            "certificate before": result["before"],
            "certificate after": result["after"],
            "certificate descended (float64)": result["descended"],
            "bracket": result["after"] / bound,
            "steps": args.steps,
            "learning rate": args.learning_rate,
            "certify s": round(result["certify_s"]),
            "descent s": round(result["descent_s"]),
            "history": " ".join(f"{r:.4f}" for r in result["history"]),
        }
        if args.measure:
            problem, setting, _, policy = pipeline.read_policy_file(policy_path)
            measured = measure(problem, setting, "learned", policy, Budget())
            row["measured CR"] = measured.competitive_ratio
        rows.append(row)
        (folder / f"{args.config}-seed{seed}.json").write_text(json.dumps(row, indent=1))
        print(
            f"{args.config} seed {seed}: certificate {fmt(row['certificate before'])} -> "
            f"{fmt(row['certificate after'])} in {args.steps} steps "
            f"({row['descent s']:.0f} s); history {row['history']}",
            flush=True,
        )
    write_csv(rows, out / "k2_descent.csv")
    (out / "k2_descent.md").write_text(table(rows, bound))
    print(table(rows, bound))


def table(rows: list[dict], bound: float) -> str:
    """The per-seed table and the summary line, median [min, max] over seeds."""
    columns = ["seed", "certificate before", "certificate after", "bracket", "descent s"]
    if any("measured CR" in row for row in rows):
        columns.insert(3, "measured CR")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c)) for c in columns) + " |")
    after = [row["certificate after"] for row in rows]
    lines.append("")
    lines.append(
        f"certificate after descent ({rows[0]['steps']} steps from {rows[0]['learning rate']}): "
        f"{spread(after)}; lowest {min(after):.4f}, "
        f"bracket [{bound:.4f}, {min(after):.4f}] = {min(after) / bound:.2f}x"
    )
    before = statistics.median(row["certificate before"] for row in rows)
    lines.append(f"median certificate before: {before:.4f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
