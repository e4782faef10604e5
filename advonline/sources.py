"""The evaluator's default sources (advonline/evaluation.py) for a problem of the interface
(advonline/problem.py), over its token encoding:

- ``exact``: the problem's certificate when it is exact (else it is the ``upper_bound``);
- ``adversary``: ``adversary_restarts`` fresh noise-conditioned adversary networks
  (:class:`~advonline.adversary.TokenWriter`) trained ``adversary_steps`` REINFORCE steps of
  ``adversary_batch`` inputs against the frozen policy, and beside them hill climbing
  (:func:`~advonline.search.hill_climb`) with ``search_chains`` chains, half of them from the
  known hard inputs (:func:`hard_starts`: the certificate's worst input, a trained run's
  archive, the held-out families) and the rest from fresh random inputs; the worst input
  either found (the networks are skipped, with a note, where their logits over the
  vocabulary would exceed :data:`~advonline.preflight.WRITER_LOGITS` at once, or
  :data:`WRITER_WORK` over all their steps, and the search where its tokens scored would
  exceed :data:`SEARCH_WORK`);
- ``families``: the worst member of the problem's held-out hard families;
- ``random``: ``random_instances`` fresh random inputs.

Against an exact certificate the ``adversary`` source is a cross-check of it, with a cut
budget (advonline/evaluation.py, "Measured once"); its first chain starts at the
certificate's worst input.

Every ratio is the problem's exact ``OPT / E[ALG]`` from its one simulator, in float64 (the
caller enables it) where the policy's own arrays are: a policy of float32 parameters (a
trained network, a baseline built in float32) is simulated in float32, so its ratios carry
float32 rounding, about 1e-7 relative. Where the problem's ``offline_optimum`` is only a
lower bound on OPT for the setting (``Problem.exact_optimum``), each source's :data:`RESCORED`
hardest inputs are scored again against OPT solved exactly on the host, and the worst is
taken from those. The policy is an argument of the compiled programmes, so every policy of
one structure shares them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from advonline import mixture
from advonline.adversary import TokenWriter, train_fresh
from advonline.configs import AdversaryTable
from advonline.evaluation import Budget, SourceClock, SourceRatio, cross_checked
from advonline.networks import AdversaryNetwork
from advonline.preflight import WRITER_LOGITS, writer_fits
from advonline.problem import Problem, payoffs_of
from advonline.ratio import ratio_of_payoff
from advonline.search import hill_climb

#: The fresh adversary networks' sizes and training (the simultaneous loop's defaults).
WRITER = AdversaryTable()
#: The most logits (batch x T x vocabulary, times steps and restarts) the fresh networks write
#: in all; past it they are skipped with a note: their time grows with the vocabulary (about
#: 43 ns a logit on 2 CPU cores, so 46 s at the limit) while the local search's does not.
WRITER_WORK = 2**30
#: The most tokens (chains x candidates x steps x T) the local search scores in all; past it
#: it is skipped with a note: about 16 ns a token for one-way trading on 2 CPU cores, so some
#: 5 minutes an algorithm at the limit, 30 times the default search on the longest inputs of
#: a shipped setting (AdWords, 50 advertisers).
SEARCH_WORK = 2**34
#: How many of a source's hardest inputs are scored again with an exact OPT, where the
#: problem's own OPT is a lower bound.
RESCORED = 16


def input_ratios(problem: Problem, setting, policy, tokens: jax.Array) -> jax.Array:
    """``OPT / E[ALG]`` of ``policy`` on each token sequence ``[B, T]`` -> ``[B]`` (jit-able)."""
    instances = problem.encoding(setting).decode(tokens)
    return ratio_of_payoff(payoffs_of(problem, setting, policy, instances))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _ratios(problem: Problem, setting, policy, tokens: jax.Array) -> jax.Array:
    return input_ratios(problem, setting, policy, tokens)


@functools.partial(jax.jit, static_argnums=(0, 1, 5, 6))
def climb(problem: Problem, setting, policy, key, tokens, steps: int, candidates: int):
    """Hill climbing against ``policy`` from the chains ``tokens`` ``[C, T]``
    (:func:`~advonline.search.hill_climb` with the encoding's ``mutate``): each chain's
    input and ratio. The evaluator's search and the training loop's oracle both call it."""
    score = functools.partial(input_ratios, problem, setting, policy)
    return hill_climb(score, problem.encoding(setting).mutate, key, tokens, steps, candidates)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 6, 7, 8))
def fresh_networks(
    problem: Problem, setting, writer, config, policy, keys, steps: int, batch: int, dtype
):
    """One fresh ``writer`` per key (``config``: its ``[adversary]`` table), each trained
    ``steps`` REINFORCE steps of ``batch`` inputs written in ``dtype`` against ``policy``:
    every step's worst input ``[R, S, T]`` and its ratio ``[R, S]``. The evaluator's search
    and the training loop's oracle both call it."""

    def write(params, key):
        return writer.write(params, setting, key, batch, dtype)

    def score(written):
        return payoffs_of(problem, setting, policy, written.instances)

    def one(key):
        trained = train_fresh(writer, config, steps, key, write, score)
        return trained.tokens_by_step, trained.ratio_by_step

    return jax.vmap(one)(keys)


def exactly_rescored(problem: Problem, setting, policy, tokens, ratios) -> tuple[np.ndarray, str]:
    """``ratios`` ``[N]`` of ``tokens`` ``[N, T]``, with the :data:`RESCORED` highest scored
    again against OPT solved exactly (``problem.exact_optimum``; host, outside ``jit``), and a
    note saying so; unchanged, with no note, where the problem's OPT is exact. The simulator
    is the same; only OPT changes, and a heuristic's OPT is never above the true one, so no
    input's ratio falls."""
    ratios = np.array(ratios, np.float64)
    solve = None if problem.exact_optimum is None else problem.exact_optimum(setting)
    if solve is None:
        return ratios, ""
    tokens = np.asarray(tokens)
    hardest = np.argsort(ratios)[-RESCORED:]
    instances = problem.encoding(setting).decode(jnp.asarray(tokens[hardest]))
    singles = [
        jax.tree.map(lambda leaf, i=i: np.asarray(leaf[i]), instances) for i in range(len(hardest))
    ]
    optima = jnp.asarray([solve(setting, one) for one in singles], jnp.float64)
    payoffs = mixture.payoffs(problem, setting, policy, instances, optima)
    ratios[hardest] = np.asarray(ratio_of_payoff(payoffs), np.float64)
    return ratios, f"; OPT of the {len(hardest)} hardest solved exactly"


def _worst(ratios, tokens, note: str) -> SourceRatio:
    """The worst of ``ratios`` ``[N]``, with its input ``tokens`` ``[N, T]``."""
    ratios = np.asarray(ratios, np.float64)
    index = int(np.argmax(ratios))
    worst = {"tokens": [int(t) for t in np.asarray(tokens)[index]]}
    return SourceRatio(float(ratios[index]), note, worst)


def hard_starts(problem: Problem, setting, certificate, starts, count: int) -> np.ndarray:
    """Up to ``count`` inputs ``[S, T]`` the search's chains start from besides random ones:
    the certificate's worst input first, then one input in turn from each of the given
    ``starts`` (a trained run's archive, hardest first) and the problem's held-out families,
    so that each has chains. The search's mutations then explore around each of them: a
    worst case that is a small change of a known hard input is found by a chain that starts
    there, rarely by one that starts at random."""
    length = problem.encoding(setting).length
    rows = []
    if certificate is not None and certificate.worst is not None:
        rows.append(np.asarray(certificate.worst, np.int32).reshape(1, length))
    pools = [] if starts is None else [np.asarray(starts, np.int32).reshape(-1, length)]
    pools += [np.asarray(t, np.int32) for t in (problem.families_of(setting) or {}).values()]
    deepest = max((len(pool) for pool in pools), default=0)
    rows += [pool[i : i + 1] for i in range(deepest) for pool in pools if i < len(pool)]
    if not rows or count < 1:
        return np.zeros((0, length), np.int32)
    return np.concatenate(rows)[:count]


def adversary_source(
    problem: Problem, setting, policy, budget: Budget, key, certificate=None, starts=None
) -> SourceRatio:
    """The best response searched for from scratch (module docstring), the local search's
    chains starting half from :func:`hard_starts` (``certificate``: the policy's, or None;
    ``starts``: more inputs to start from) and the rest from random inputs."""
    encoding = problem.encoding(setting)
    key_networks, key_starts, key_climb = jax.random.split(key, 3)
    found, ratios, parts = [], [], []
    logits = f"{budget.adversary_batch} x {encoding.length} x {encoding.vocabulary} logits"
    work = budget.adversary_restarts * budget.adversary_steps * budget.adversary_batch
    if budget.adversary_restarts > 0 and not writer_fits(encoding, budget.adversary_batch):
        parts.append(f"no adversary network: {logits} exceed {WRITER_LOGITS:.1e}")
    elif work * encoding.length * encoding.vocabulary > WRITER_WORK:
        parts.append(
            f"no adversary network: {budget.adversary_restarts} x {budget.adversary_steps} "
            f"steps of {logits} exceed {WRITER_WORK:.1e} in all (lower --adversary-steps)"
        )
    elif budget.adversary_restarts > 0:
        network = AdversaryNetwork(encoding.vocabulary, WRITER.hidden, WRITER.layers)
        writer = TokenWriter(network, WRITER.latent, encoding)
        keys = jax.random.split(key_networks, budget.adversary_restarts)
        steps, batch = budget.adversary_steps, budget.adversary_batch
        tokens, by_step = fresh_networks(
            problem, setting, writer, WRITER, policy, keys, steps, batch, jnp.float64
        )
        found.append(np.asarray(tokens).reshape(-1, encoding.length))
        ratios.append(np.asarray(by_step).reshape(-1))
        parts.append(
            f"{budget.adversary_restarts} fresh noise-conditioned adversary network(s) x "
            f"{steps} steps x {batch} inputs"
        )
    searched = budget.search_chains * budget.search_candidates * budget.search_steps
    if searched * encoding.length > SEARCH_WORK:
        parts.append(
            f"no local search: {budget.search_chains} chains x {budget.search_candidates} "
            f"candidates x {budget.search_steps} steps of {encoding.length} tokens exceed "
            f"{SEARCH_WORK:.1e} (lower --search-steps)"
        )
    elif budget.search_steps > 0:
        chains = budget.search_chains
        hard = hard_starts(problem, setting, certificate, starts, chains // 2)
        fresh = np.asarray(encoding.random(key_starts, chains - len(hard)), np.int32)
        chained = jnp.asarray(np.concatenate([hard, fresh]))
        steps, candidates = budget.search_steps, budget.search_candidates
        tokens, climbed = climb(problem, setting, policy, key_climb, chained, steps, candidates)
        found.append(np.asarray(tokens))
        ratios.append(np.asarray(climbed))
        parts.append(
            f"local search {chains} chains ({len(hard)} from known hard inputs, "
            f"{chains - len(hard)} random) x {budget.search_candidates} candidates x "
            f"{budget.search_steps} steps"
        )
    if not found:
        return SourceRatio(None, f"no search ({'; '.join(parts) or 'search_steps is 0'})")
    tokens = np.concatenate(found)
    # every find scored again by the one simulator, in float64
    rescored = _ratios(problem, setting, policy, jnp.asarray(tokens))
    rescored, exactly = exactly_rescored(problem, setting, policy, tokens, rescored)
    return _worst(rescored, tokens, f"{', then '.join(parts)}, seed {budget.seed}{exactly}")


def families_source(problem: Problem, setting, policy) -> SourceRatio:
    """The worst member of the problem's held-out hard families."""
    families = problem.families_of(setting)
    if not families:
        return SourceRatio(None, "the problem has no hard families")
    worst, chosen = None, None
    for name, tokens in families.items():
        ratios = np.asarray(_ratios(problem, setting, policy, jnp.asarray(tokens)))
        ratios, _ = exactly_rescored(problem, setting, policy, tokens, ratios)
        found = _worst(ratios, tokens, "")
        if worst is None or found.ratio > worst.ratio:
            worst, chosen = found, name
    where = {"family": chosen, **worst.worst_input}
    sizes = ", ".join(f"{name} ({len(tokens)})" for name, tokens in families.items())
    return SourceRatio(worst.ratio, f"{sizes}; worst: {chosen}", where)


def random_source(problem: Problem, setting, policy, budget: Budget, key) -> SourceRatio:
    """The worst of ``random_instances`` fresh random inputs."""
    tokens = problem.encoding(setting).random(key, budget.random_instances)
    ratios = _ratios(problem, setting, policy, tokens)
    ratios, exactly = exactly_rescored(problem, setting, policy, tokens, ratios)
    return _worst(ratios, tokens, f"{budget.random_instances} inputs, seed {budget.seed}{exactly}")


def sources(
    problem: Problem,
    setting,
    policy,
    budget: Budget,
    key,
    mesh=None,
    starts=None,
    clock: SourceClock | None = None,
) -> tuple[dict[str, SourceRatio], SourceRatio]:
    """Every default source of ``policy`` and its certificate's upper bound (``mesh`` is not
    used: these batches are small; ``starts``: inputs ``[S, T]`` the search also starts
    from; ``clock`` times each source). Against an exact certificate the search is a
    cross-check with :func:`~advonline.evaluation.cross_check_budget`."""
    clock = clock or SourceClock("policy")
    key_adversary, key_random = jax.random.split(key)
    found = {}
    certificate = None

    def exact_source() -> SourceRatio:
        nonlocal certificate
        certificate = problem.certificate_of(setting, policy)
        if certificate is None:
            return SourceRatio(None, "no certificate: the other sources are lower bounds on the CR")
        if certificate.exact:
            return SourceRatio(certificate.ratio, "the problem's exact certificate")
        return SourceRatio(None, "no exact CR: the certificate bounds it from above (bound)")

    found["exact"] = clock.run("exact", exact_source)
    if certificate is None:
        bound = SourceRatio(None, "no certificate for this policy")
    elif certificate.exact:
        bound = SourceRatio(None, "exact: see exact")
    else:
        bound = SourceRatio(certificate.ratio, "the problem's certificate (an upper bound)")

    def search(searched: Budget) -> SourceRatio:
        args = (problem, setting, policy, searched, key_adversary, certificate, starts)
        return adversary_source(*args)

    exact = certificate is not None and certificate.exact
    found["adversary"] = clock.run(
        "adversary", lambda: cross_checked(budget, search) if exact else search(budget)
    )
    found["families"] = clock.run("families", lambda: families_source(problem, setting, policy))
    found["random"] = clock.run(
        "random", lambda: random_source(problem, setting, policy, budget, key_random)
    )
    return found, bound
