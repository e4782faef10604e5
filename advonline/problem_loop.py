"""The oracle loop over the problem interface (advonline/problem.py): learns a deterministic
policy for any registered problem whose payoffs are differentiable in the policy's parameters.

Each epoch:

1. **Adversary's oracle.** Hill climbing (advonline/search.py) over the problem's token
   sequences, maximising the current policy's ratio ``OPT / ALG``, from fresh random inputs
   and from the archive's hardest inputs (warm starts). The best finds join the archive.
2. **Algorithm.** ``epoch_steps`` Adam steps on the smoothed worst case over the archive:
   ``temperature * logsumexp(log ratio / temperature)``, the largest log-ratio within about
   ``temperature``. Against a deterministic policy the adversary's best mixture puts all its
   weight on the worst inputs, which is what the smoothing weights.
3. **Certificate and best-so-far.** Where the problem certifies a policy (an upper bound on
   its ratio over every input), the policy is certified after the epoch, outside ``jit`` in
   float64; the delivered parameters are the best certified iterate. Without a certificate
   the new iterate replaces the delivered one when its worst ratio on the archive is lower
   than the delivered one's on the same archive (an archive of the first epochs is
   easy, so figures of different epochs are not compared).

The archive keeps at most ``archive_size`` distinct inputs, the hardest against the current
policy. Held-out families are never seen here.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from advonline.problem import Problem
from advonline.ratio import ratio_of_payoff
from advonline.search import hill_climb


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """What one training run of :func:`train` does (a config's ``[game]`` and ``[oracle]``)."""

    seed: int = 0
    epochs: int = 12
    epoch_steps: int = 200
    learning_rate: float = 0.01
    restarts: int = 64  # search chains per epoch (half fresh, half from the archive)
    search_steps: int = 256  # hill-climbing steps per chain
    keep_per_epoch: int = 16  # best distinct finds archived per epoch
    archive_size: int = 256
    temperature: float = 0.01  # smoothing of the worst case, in log-ratio


class EpochRow(NamedTuple):
    epoch: int
    seconds: float  # wall time since the start, compiling included
    found: float  # worst ratio the oracle found against the policy it searched
    archive_worst: float  # worst archived ratio against the policy after the epoch
    certificate: float  # certified ratio after the epoch (nan: none)
    best_certificate: float  # of the delivered parameters so far


class Trained(NamedTuple):
    params: Any  # the delivered (best-so-far) parameters
    archive: np.ndarray  # [N, T] the archived inputs (tokens)
    rows: list[EpochRow]
    archive_worst: float  # the delivered parameters' worst ratio on the final archive


def input_ratios(problem: Problem, setting, policy, tokens: jax.Array) -> jax.Array:
    """``OPT / ALG`` of ``policy`` on each token sequence ``[B, T]`` -> ``[B]`` (jit-able)."""
    instances = problem.encoding(setting).decode(tokens)
    return ratio_of_payoff(problem.payoffs(setting, policy, instances))


def _unique_hardest(tokens: np.ndarray, ratios: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` hardest distinct rows of ``tokens``."""
    order = np.argsort(-ratios, kind="stable")
    _, first = np.unique(tokens[order], axis=0, return_index=True)
    return tokens[order[np.sort(first)][:count]]


def train(problem: Problem, setting, head, config: LoopConfig, log=None) -> Trained:
    """Learn ``head``'s parameters for ``setting`` from scratch (see the module docstring);
    ``log(row)`` is called after every epoch."""
    encoding = problem.encoding(setting)
    key = jax.random.key(config.seed)
    init_key, key = jax.random.split(key)
    params = head.module.init(init_key, *head.example)
    optimizer = optax.adam(config.learning_rate)
    opt_state = optimizer.init(params)

    def score(params, tokens):
        return input_ratios(problem, setting, head.to_policy(params), tokens)

    @jax.jit
    def search(params, key, starts):
        return hill_climb(
            lambda tokens: score(params, tokens), encoding.mutate, key, starts, config.search_steps
        )

    def loss(params, tokens):
        log_ratio = jnp.log(score(params, tokens))
        return config.temperature * jax.scipy.special.logsumexp(log_ratio / config.temperature)

    @jax.jit
    def improve(params, opt_state, tokens):
        def step(carry, _):
            params, opt_state = carry
            grads = jax.grad(loss)(params, tokens)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        (params, opt_state), _ = jax.lax.scan(
            step, (params, opt_state), None, length=config.epoch_steps
        )
        return params, opt_state

    archive = np.zeros((0, encoding.length), np.int32)
    best_params, best_score = params, math.inf
    rows: list[EpochRow] = []
    start = time.perf_counter()
    for epoch in range(config.epochs):
        fresh_key, search_key, key = jax.random.split(key, 3)
        fresh = np.asarray(encoding.random(fresh_key, config.restarts))
        warm = archive[: config.restarts // 2]
        starts = np.concatenate([warm, fresh[: config.restarts - len(warm)]])
        found, found_ratios = search(params, search_key, jnp.asarray(starts))
        found, found_ratios = np.asarray(found), np.asarray(found_ratios, np.float64)
        archive = np.concatenate(
            [archive, _unique_hardest(found, found_ratios, config.keep_per_epoch)]
        )
        params, opt_state = improve(params, opt_state, jnp.asarray(archive))
        archived = np.asarray(score(params, jnp.asarray(archive)), np.float64)
        archive = _unique_hardest(archive, archived, config.archive_size)
        certificate = problem.certificate(setting, head.to_policy(params))
        if certificate is not None:
            measured, incumbent = certificate.ratio, best_score
        else:  # both iterates on the same archive: the yardstick grows harder every epoch
            measured = float(archived.max())
            incumbent = math.inf
            if epoch:
                incumbent = float(np.max(score(best_params, jnp.asarray(archive))))
        if measured < incumbent:
            best_params, best_score = params, measured
        row = EpochRow(
            epoch=epoch + 1,
            seconds=time.perf_counter() - start,
            found=float(found_ratios.max()),
            archive_worst=float(archived.max()),
            certificate=certificate.ratio if certificate is not None else math.nan,
            best_certificate=best_score if certificate is not None else math.nan,
        )
        rows.append(row)
        if log is not None:
            log(row)
    delivered_worst = float(np.max(score(best_params, jnp.asarray(archive))))
    return Trained(best_params, archive, rows, delivered_worst)
