"""Time AdWords' offline optimum with many advertisers, the cost of every search step there:
what the model uses where the bids scale to whole numbers (bounds in JAX, then the maximum
flow on the host with whole capacities for the inputs they do not settle) beside the host's
flow on every input, proportional allocation's feasible flow in JAX (the model's fallback)
and HiGHS's LP (the solver by hand), on the candidates of one search step, then one
evaluator search step with each of the model's optima.

Run: python benchmarks/adwords_optimum.py [--advertisers 50] [--queries 500] [--candidates 1024]
[--policy FILE.json]
Prints the device line, the share of the candidates the bounds settle, each optimum's time
for the candidates (HiGHS on a sample of 16, scaled to the candidates), how far each falls
below the exact flow, and the seconds of one hill-climbing step (64 chains x 16 candidates)
against water-filling with each optimum; with ``--policy`` (an AdWords policy file, whose
setting then replaces the flags') also one step against that policy, with the bounds and max
flow. One process, all of the machine's cores, float64.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from time_to_certificate import code_versions

from advonline import pipeline, sources
from advonline import problems as registry
from advonline.problems.adwords import by_hand, families, flow, model

SAMPLE = 16


def seconds(function, *args) -> float:
    """The second of two calls (the first compiles)."""
    jax.block_until_ready(function(*args))
    start = time.perf_counter()
    jax.block_until_ready(function(*args))
    return time.perf_counter() - start


def candidates(setting, count: int) -> jax.Array:
    """A search step's candidates: the held-out families and random inputs, each mutated."""
    encoding = model.encoding(setting)
    hard = np.concatenate(list(families.families(setting).values()))
    fresh = np.asarray(encoding.random(jax.random.key(0), max(0, count - len(hard))))
    tokens = jnp.asarray(np.concatenate([hard, fresh])[:count])
    return encoding.mutate(jax.random.key(1), tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--advertisers", type=int, default=50)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--candidates", type=int, default=1024)
    parser.add_argument("--policy", help="an AdWords policy file: also a step against it")
    args = parser.parse_args()
    problem = registry.get("adwords")
    setting = model.Setting(advertisers=args.advertisers, queries=args.queries, max_bid=0.1)
    learned = None
    if args.policy:
        _, setting, _, learned = pipeline.read_policy_file(args.policy, problem.name)
    code_versions(None, f"adwords {setting.describe()}, {args.candidates} candidates, float64")
    scale = flow.capacity_scale(setting)
    with jax.enable_x64(True):
        instances = model.encoding(setting).decode(candidates(setting, args.candidates))
        bids, bidders = instances.bids, instances.bidders

        def host_alone(bids, bidders):  # no bounds: every input's flow on the host
            units = jnp.asarray(flow.batch_units(bids, bidders, scale))
            return units.astype(bids.dtype) / jnp.asarray(scale, bids.dtype)

        passes = flow.greedy_passes(setting)
        exact = np.asarray(flow.exact_flow(bids, bidders, scale, passes))
        alone = np.asarray(host_alone(bids, bidders))
        np.testing.assert_array_equal(alone, exact)  # the bounds settle the same optima
        settled = np.asarray(flow.settled_units(bids, bidders, scale, passes)) >= 0

        proportional = jax.jit(functools.partial(model.proportional_flow, rounds=model.FLOW_ROUNDS))
        heuristic = np.asarray(proportional(bids, bidders))
        start = time.perf_counter()
        sample = [by_hand.allocation_optimum(bids[i], bidders[i]) for i in range(SAMPLE)]
        highs = (time.perf_counter() - start) * args.candidates / SAMPLE
        bounded = seconds(flow.exact_flow, bids, bidders, scale, passes)
        rows = [
            ("bounds, then host flow", bounded, exact),
            ("max flow, host, every input", seconds(host_alone, bids, bidders), alone),
            ("proportional, JAX", seconds(proportional, bids, bidders), heuristic),
            (f"HiGHS LP ({SAMPLE} scaled)", highs, np.asarray(sample)),
        ]
        print(f"the bounds settle {settled.mean():.1%} of the {args.candidates} candidates")
        print(f"{'optimum':>28} {'s':>8} {'most below the flow, relative':>30}")
        for name, spent, found in rows:
            below = np.max((exact[: len(found)] - found) / exact[: len(found)])
            print(f"{name:>28} {spent:8.2f} {below:30.2e}")
        rule = problem.baselines["water-filling"](setting)
        chains = model.encoding(setting).random(jax.random.key(2), 64)
        climb = functools.partial(sources.climb, problem, setting, rule, jax.random.key(3))
        with_flow = seconds(climb, chains, 1, 16)
        if learned is not None:
            step = seconds(
                sources.climb, problem, setting, learned, jax.random.key(3), chains, 1, 16
            )
        flow.capacity_scale = lambda setting: None  # the model's fallback, for comparison
        jax.clear_caches()  # compiled with the max flow: trace again
        with_proportional = seconds(climb, chains, 1, 16)
    print(
        f"one search step, 64 chains x 16 candidates against water-filling: "
        f"{with_flow:.2f} s with the bounds and max flow, {with_proportional:.2f} s with "
        "proportional flow"
    )
    if learned is not None:
        print(f"one search step against {args.policy}: {step:.2f} s with the bounds and max flow")


if __name__ == "__main__":
    main()
