"""The checks any problem of the interface should pass, on a setting of its own
(``advonline check NAME``): a built-in problem and an installed package's alike.

Each check is a function ``(problem, setting) -> detail`` that raises :class:`CheckFailed`
(or any exception: a problem that crashes fails the check) and returns one line saying what
it saw. :func:`check_problem` runs them all and reports each, so one failure never hides the
others. What needs a reference only the problem has (its simulator against a loop written by
hand, its optimum against a solver) the problem supplies as its
:class:`~advonline.problem.Cases`, with the small settings to run on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from advonline import preflight
from advonline.errors import InputError
from advonline.evaluation import Budget
from advonline.preflight import PreflightError, out_of_memory
from advonline.problem import Problem, payoffs_of
from advonline.ratio import ratio_of_payoff
from advonline.search import float64_everywhere, hill_climb

#: Relative rounding a float64 ratio may carry.
_ROUNDING = 1e-9


class CheckFailed(AssertionError):
    """A check found something wrong; the message says what."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check's outcome and one line of what it saw. ``skipped``: the check could not run
    because the setting does not fit in memory here (the pre-flight refused it, or memory
    ran out part way): neither a pass nor a fault of the problem."""

    name: str
    passed: bool
    detail: str
    skipped: bool = False

    @property
    def verdict(self) -> str:
        """``pass``, ``FAIL`` or ``skip``, as the command line prints it."""
        return "skip" if self.skipped else "pass" if self.passed else "FAIL"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def setting_round_trip(problem: Problem, setting) -> str:
    """The setting is hashable, names its problem, and reads back from its own description;
    an unknown key is refused with a ValueError (the command line's one line)."""
    described = setting.describe()
    _require(described.get("problem") == problem.name, f"describe() names {described!r}")
    fields = {k: v for k, v in described.items() if k != "problem"}
    again = problem.setting.from_config(json.loads(json.dumps(fields)))
    _require(again == setting and hash(again) == hash(setting), "from_config(describe()) differs")
    try:
        problem.setting.from_config({**fields, "no_such_key": 1})
    except ValueError:
        return f"{len(fields)} fields read back; an unknown key is refused"
    raise CheckFailed("from_config accepted the unknown key 'no_such_key'")


def encoding_in_vocabulary(problem: Problem, setting) -> str:
    """Random and mutated token sequences stay in ``[0, vocabulary)``, with the encoding's
    length, and mutation moves a search: most sequences change within ``MUTATION_TRIES``
    independent mutations of each (where the random inputs differ at all: a setting with one
    possible input leaves nothing to mutate to)."""
    encoding = problem.encoding(setting)
    tokens = encoding.random(jax.random.key(0), 32)
    _require(tokens.shape == (32, encoding.length), f"random() gave shape {tokens.shape}")
    _require_in_vocabulary(tokens, encoding.vocabulary)
    changed = jnp.zeros(32, bool)
    for key in jax.random.split(jax.random.key(1), MUTATION_TRIES):
        mutated = encoding.mutate(key, tokens)
        _require(mutated.shape == tokens.shape, f"mutate() gave shape {mutated.shape}")
        _require_in_vocabulary(mutated, encoding.vocabulary)
        changed = changed | jnp.any(mutated != tokens, axis=1)
    count = int(changed.sum())
    described = f"vocabulary {encoding.vocabulary}, length {encoding.length}"
    if count == 0 and bool(jnp.all(tokens == tokens[:1])):
        return f"{described}; random() draws one input only, so there is nothing to mutate"
    _require(count >= 16, f"mutate() changed {count} of 32 sequences in {MUTATION_TRIES} tries")
    return f"{described}; {count}/32 changed within {MUTATION_TRIES} mutations"


def _require_in_vocabulary(tokens, vocabulary: int) -> None:
    low, high = int(tokens.min()), int(tokens.max())
    _require(0 <= low and high < vocabulary, f"tokens in [{low}, {high}]")


#: Independent mutations of each sequence the encoding check tries: a mutation may leave a
#: short sequence as it is (a shift of one token), but a few should move most of them.
MUTATION_TRIES = 4


def payoffs_in_range(problem: Problem, setting) -> str:
    """Every baseline's payoff on random inputs is in [0, 1] (no algorithm beats OPT), and
    OPT is never negative."""
    encoding = problem.encoding(setting)
    with jax.enable_x64(True):
        instances = encoding.decode(encoding.random(jax.random.key(2), 16))
        optima = np.asarray(problem.offline_optimum(setting, instances))
        _require(bool(np.all(optima >= 0)), f"OPT as low as {optima.min():.6g}")
        for name, make in problem.baselines.items():
            payoffs = np.asarray(payoffs_of(problem, setting, make(setting), instances))
            inside = np.all((payoffs >= 0) & (payoffs <= 1 + _ROUNDING))
            _require(bool(inside), f"{name}: payoffs in [{payoffs.min()}, {payoffs.max()}]")
    return f"{len(problem.baselines)} baselines x 16 inputs"


def matches_references(problem: Problem, setting) -> str:
    """On random inputs, OPT equals the problem's solver by hand, and each deterministic
    baseline's payoff equals what the problem's loop by hand earns (or pays) against that OPT,
    as ``E[ALG] / OPT`` or ``OPT / E[cost]``: the simulator and the optimum, each against an
    independent computation."""
    cases = problem.cases
    if cases is None or (cases.earned is None and cases.optimum is None):
        return "not run: the problem supplies no loop or solver by hand (Cases)"
    encoding = problem.encoding(setting)
    count = 6
    with jax.enable_x64(True):
        instances = encoding.decode(encoding.random(jax.random.key(2), count))
        optima = np.asarray(problem.offline_optimum(setting, instances))
        singles = [
            jax.tree.map(lambda leaf, i=i: np.asarray(leaf[i]), instances) for i in range(count)
        ]
        seen = []
        if cases.optimum is not None:
            solved = np.asarray([cases.optimum(setting, one) for one in singles])
            _require(
                np.allclose(optima, solved, rtol=1e-7, atol=1e-12),
                f"offline_optimum gives {optima.tolist()}, the solver by hand {solved.tolist()}",
            )
            seen.append(f"OPT on {count} inputs")
        compared = 0
        for name, make in problem.baselines.items() if cases.earned is not None else ():
            policy = make(setting)
            if not getattr(policy, "deterministic", True):
                continue
            payoffs = np.asarray(payoffs_of(problem, setting, policy, instances))
            earned = np.asarray([cases.earned(setting, policy, one) for one in singles])
            # ALG / OPT or OPT / cost, 1 where the divisor is 0 (advonline.ratio's convention)
            over, under = (earned, optima) if problem.objective == "earn" else (optima, earned)
            by_hand = np.where(under > 0, over / np.where(under > 0, under, 1.0), 1.0)
            _require(
                np.allclose(payoffs, by_hand, rtol=1e-9, atol=0.0),
                f"{name}: payoffs {payoffs.tolist()}, by hand {by_hand.tolist()}",
            )
            compared += 1
        if cases.earned is not None:
            seen.append(f"{compared} deterministic baselines' payoffs")
    return " and ".join(seen) + " match the problem's own by hand"


def certificates_hold(problem: Problem, setting) -> str:
    """No input a hill climb finds beats a baseline's certificate; an exact certificate's
    worst input attains it; the lower bound on every algorithm is below every certificate."""
    encoding = problem.encoding(setting)
    bound = problem.lower_bound_of(setting)
    seen = []
    with jax.enable_x64(True):
        for name, make in problem.baselines.items():
            policy = make(setting)
            certificate = problem.certificate_of(setting, policy)
            if certificate is None:
                continue

            def score(tokens, policy=policy):
                # this check's encoding, built (and its tables filled by ``random``) outside
                # the search's trace: one built inside it would keep the trace's values
                instances = encoding.decode(tokens)
                return ratio_of_payoff(payoffs_of(problem, setting, policy, instances))

            starts = encoding.random(jax.random.key(3), 16)
            with float64_everywhere():  # a host OPT (pure_callback) answers in float64 too
                _, found = hill_climb(score, encoding.mutate, jax.random.key(4), starts, 64)
            worst = float(found.max())
            _require(
                worst <= certificate.ratio * (1 + _ROUNDING),
                f"{name}: a search found {worst:.6g} above its certificate {certificate.ratio:.6g}",
            )
            if certificate.exact and certificate.worst is not None:
                attained = float(score(jnp.asarray(certificate.worst)[None])[0])
                _require(
                    math.isclose(attained, certificate.ratio, rel_tol=1e-9),
                    f"{name}: its worst input has ratio {attained:.6g}, the certificate says "
                    f"{certificate.ratio:.6g}",
                )
            if bound is not None:
                _require(
                    bound.ratio <= certificate.ratio * (1 + _ROUNDING),
                    f"{name}: certified {certificate.ratio:.6g} below the lower bound "
                    f"{bound.ratio:.6g}",
                )
            seen.append(f"{name} {certificate.ratio:.4g}")
    if not seen:
        return "no baseline has a certificate here"
    lower = "no lower bound" if bound is None else f"lower bound {bound.ratio:.4g}"
    return f"certified: {', '.join(seen)}; {lower}"


def policy_file_round_trip(problem: Problem, setting) -> str:
    """A learned policy (a fresh policy head's, with default sizes) exports to JSON, loads
    back, and where the problem restores files measures as the policy it came from."""
    if problem.export is None or problem.load is None:
        return "not run: the problem has no export and load (its documents write its files)"
    encoding = problem.encoding(setting)
    head = problem.policy_head(setting, {})
    policy = head.to_policy(head.module.init(jax.random.key(6), *head.example))
    document = json.loads(json.dumps(problem.export(setting, policy)))
    problem.load(document)
    _loads_without_jax(problem, document)
    if problem.restore is None:
        return "a fresh learned policy exported and loaded without JAX (it restores no files)"
    read_setting, restored = problem.restore(document)
    _require(read_setting == setting, f"the file is read back on {read_setting}, not {setting}")
    _refuses_a_stray_setting_field(problem, document)
    with jax.enable_x64(True):
        instances = encoding.decode(encoding.random(jax.random.key(5), 8))
        before = np.asarray(payoffs_of(problem, setting, policy, instances))
        after = np.asarray(payoffs_of(problem, setting, restored, instances))
    _require(
        np.allclose(before, after, rtol=1e-5, atol=1e-9),
        f"the restored file earns {after} where the policy earns {before}",
    )
    return "a fresh learned policy exported, loaded without JAX and restored: the same payoffs"


def _refuses_a_stray_setting_field(problem: Problem, document: dict) -> None:
    """``problem.restore`` refuses, with an InputError, a file whose ``setting`` table has a
    field no setting has: a file is read on the setting it names, or not at all."""
    if not isinstance(document.get("setting"), dict):
        return
    stray = {**document, "setting": {**document["setting"], "no_such_field": 1}}
    try:
        problem.restore(stray)
    except InputError:
        return
    _require(False, "a file whose setting has a field no setting has is read, not refused")


def _loads_without_jax(problem: Problem, document: dict) -> None:
    """``problem.load`` reads ``document`` in a fresh Python where JAX cannot be imported: the
    policy file's promise to a service that has NumPy only."""
    load = problem.load
    if "<" in load.__qualname__:  # a lambda or a nested function: nothing to import by name
        return
    script = (
        "import json, sys\n"
        "sys.modules['jax'] = sys.modules['jaxlib'] = sys.modules['flax'] = None\n"
        f"from {load.__module__} import {load.__qualname__} as load\n"
        "load(json.loads(sys.stdin.read()))\n"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    _require(
        done.returncode == 0,
        f"{load.__module__}.{load.__qualname__} cannot load the file without JAX: {last}",
    )


#: Every check, by name, in the order run.
CHECKS: dict[str, Callable] = {
    "setting": setting_round_trip,
    "encoding": encoding_in_vocabulary,
    "payoffs": payoffs_in_range,
    "by hand": matches_references,
    "certificates": certificates_hold,
    "policy file": policy_file_round_trip,
}


#: The checks' own scale, as an evaluator's budget for the memory pre-flight: a few random
#: inputs, a hill climb of 16 chains x 64 steps, no adversary networks.
PREFLIGHT_BUDGET = Budget(
    random_instances=16,
    family_members=1,
    samples=1,
    adversary_restarts=0,
    adversary_batch=1,
    search_chains=16,
    search_candidates=1,
    search_steps=64,
)


def _refused(problem: Problem, setting) -> str | None:
    """Why the checks after the first cannot run on ``setting`` here (the memory pre-flight
    at :data:`PREFLIGHT_BUDGET`: a random input of a billion rounds is refused before it is
    drawn, not killed by the system part way), or None. The reason gives the sizes alone:
    the checks' budget is fixed, so only the setting is the user's to lower. An estimate that
    crashes refuses nothing: the checks then report the crash."""
    try:
        preflight.check(preflight.evaluation_needs(problem, setting, PREFLIGHT_BUDGET))
    except PreflightError as error:
        return error.sizes
    except Exception:  # the problem's own code: the checks below report it
        pass
    return None


def check_problem(problem: Problem, setting) -> list[CheckResult]:
    """Every check of :data:`CHECKS` on ``setting``; each failure or crash is reported, not
    raised. A check whose arrays do not fit in memory here is reported as skipped: the
    setting is too large for this machine, which says nothing about the problem. The first
    check (the setting reads back) runs on any setting; the others only where the memory
    pre-flight lets them."""
    (first, check), *others = CHECKS.items()
    results = [_outcome(first, check, problem, setting)]
    refused = _refused(problem, setting)
    for name, check in others:
        if refused is None:
            results.append(_outcome(name, check, problem, setting))
        else:
            results.append(CheckResult(name, False, f"not run: {refused}", skipped=True))
    return results


def _outcome(name: str, check: Callable, problem: Problem, setting) -> CheckResult:
    """One check's outcome: a pass, a failure (a crash of the problem's code fails it too),
    or skipped where memory ran out."""
    try:
        return CheckResult(name, True, check(problem, setting))
    except PreflightError as error:
        return CheckResult(name, False, f"not run: {error.sizes}", skipped=True)
    except Exception as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if out_of_memory(error):
            return CheckResult(name, False, f"not run: {first}", skipped=True)
        return CheckResult(name, False, f"{type(error).__name__}: {first}")
