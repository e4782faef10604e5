"""Memory pre-flight: refuse, before anything is allocated, a command whose largest array
cannot fit in this machine's memory.

Each command's largest arrays are estimated by the problem (its
:attr:`~advonline.problem.Problem.training_needs` and
:attr:`~advonline.problem.Problem.evaluation_needs`) from the sizes that
drive them and named with the flag or config key that makes them smaller. An array never lives
alone: its gradient, an optimiser's moments and XLA's temporaries sit beside it, so the
estimate counts ``WORKING_COPIES`` of the largest array (or the copies a need names, where
its peak was measured) and compares that with the memory available now (``MemAvailable`` on
Linux, and the accelerator's own limit where JAX reports one). The evaluator's work limits
count time; this counts space. Both apply.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax

WORKING_COPIES = 4  # the largest array, its gradient or result, and XLA's temporaries
FLOAT64, FLOAT32 = 8, 4


class PreflightError(ValueError):
    """A command whose largest array would not fit; the message names what to lower.
    ``sizes`` is the message without that advice, for a caller whose sizes are not the
    user's to choose (the checks of ``advonline check`` name only the setting)."""

    def __init__(self, message: str, sizes: str | None = None) -> None:
        super().__init__(message)
        self.sizes = message if sizes is None else sizes


@dataclasses.dataclass(frozen=True)
class Need:
    """One large array: what it is, how many bytes, what makes it smaller, how many copies
    of it the computation holds at its peak, and how many more copies each member of a
    mixture of snapshots adds (where the array is built once per member)."""

    what: str
    bytes: float
    lower: str
    copies: float = WORKING_COPIES
    member_copies: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bytes", as_float(self.bytes))

    def for_members(self, members: int) -> Need:
        """This need where the policy measured is a mixture of ``members`` networks (one
        network: the need itself)."""
        if members <= 1 or not self.member_copies:
            return self
        return dataclasses.replace(
            self,
            what=f"{self.what} for each of {members} mixture members",
            copies=self.copies + self.member_copies * members,
            member_copies=0.0,
        )


def as_float(count: float) -> float:
    """``count`` as a float, ``inf`` where it is an integer past float's range (sizes are
    products of a setting's dimensions in Python integers, which have no limit: 11^300
    grid states is one), so that it compares, multiplies and prints as a float."""
    try:
        return float(count)
    except OverflowError:
        return math.inf


def available_bytes() -> float:
    """Memory free for a new array now: the smaller of the host's available memory and the
    default device's limit (when JAX reports one)."""
    limits = [_host_available()]
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # backends without memory statistics (CPU)
        stats = {}
    if "bytes_limit" in stats:
        limits.append(float(stats["bytes_limit"]) - float(stats.get("bytes_in_use", 0)))
    return min(limits)


def _host_available() -> float:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check(needs: list[Need], available: float | None = None) -> tuple[Need, float]:
    """Refuse (PreflightError, one line) when the copies of the largest need exceed
    ``available`` bytes (default: :func:`available_bytes`); else the largest need and the
    bytes available."""
    available = available_bytes() if available is None else available
    if not needs:
        return Need("nothing estimated", 0.0, "nothing"), available
    largest = max(needs, key=lambda need: need.copies * need.bytes)
    if largest.copies * largest.bytes > available:
        sizes = (
            f"{largest.what} would take {_size(largest.bytes)} (and about {largest.copies:g}x "
            f"that while computing); {_size(available)} is free"
        )
        raise PreflightError(f"{sizes}: lower {largest.lower}", sizes)
    return largest, available


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says that memory ran out part way: Python's ``MemoryError``, or a
    runtime error of XLA that says so (on any device)."""
    if isinstance(error, MemoryError):
        return True
    if not isinstance(error, jax.errors.JaxRuntimeError):
        return False
    text = str(error).lower()
    return "resource_exhausted" in text or "out of memory" in text or "oom" in text.split()


def evaluation_needs(problem, setting, budget, members: int = 1) -> list[Need]:
    """The evaluator's largest arrays on ``setting`` with ``budget``, as ``problem`` estimates
    them, or where it makes no estimate of its own as its encoding sizes them
    (:func:`token_needs`); for a policy that is a mixture of up to ``members`` networks, the
    arrays built once per member counted for each (:meth:`Need.for_members`)."""
    if problem.evaluation_needs is not None:
        needs = problem.evaluation_needs(setting, budget)
    else:
        needs = encoding_evaluation_needs(problem, setting, budget)
    return [need.for_members(members) for need in needs]


def encoding_evaluation_needs(problem, setting, budget) -> list[Need]:
    """The evaluator's largest arrays as ``problem``'s encoding sizes them: the fresh
    adversary networks' logits, the search's proposals and the random source's inputs (each
    batch scored at once). A problem's own estimate may start from these."""
    proposals = budget.search_chains * budget.search_candidates
    encoding = problem.encoding(setting)
    # without its networks (too large: skipped) one input's logits are still a floor on what
    # the setting's alphabet costs
    batch = budget.adversary_batch if writer_fits(encoding, budget.adversary_batch) else 1
    drawn = Need(
        "the random source's inputs [random instances, T]",
        FLOAT64 * budget.random_instances * encoding.length,
        "--random-instances",
    )
    return [*token_needs(encoding, batch, proposals), drawn]


#: The most logits (batch x T x vocabulary) the evaluator's default fresh adversary networks
#: write at once; past it they are skipped with a note (2 GB in float64).
WRITER_LOGITS = 2**28


def writer_fits(encoding, batch: int) -> bool:
    """Whether a noise-conditioned writer of ``encoding``'s tokens, ``batch`` sequences at a
    time, stays within :data:`WRITER_LOGITS`."""
    return batch * encoding.length * encoding.vocabulary <= WRITER_LOGITS


def token_needs(
    encoding, batch: int, proposals: int, batch_keys: str = "", proposal_keys: str = ""
) -> list[Need]:
    """The largest arrays of a search over ``encoding``'s token sequences, a floor on what any
    problem of the interface needs: an adversary network's logits over the vocabulary for
    ``batch`` sequences (float64), and ``proposals`` candidate sequences scored at once, at
    least a float64 per token once decoded. ``batch_keys`` and ``proposal_keys`` name the
    config keys that set those counts, for the line that says what to lower."""
    length, vocabulary = encoding.length, encoding.vocabulary
    size = "the setting's sizes (the length of its inputs and their alphabet)"
    return [
        Need(
            "an adversary network's logits [batch, T, vocabulary]",
            FLOAT64 * batch * length * vocabulary,
            f"{batch_keys}, or {size}" if batch_keys else size,
        ),
        Need(
            "the search's candidate inputs [proposals, T]",
            FLOAT64 * proposals * length,
            f"{proposal_keys}, or {size}" if proposal_keys else size,
        ),
    ]


def network_needs(networks: dict[str, tuple]) -> list[Need]:
    """The weights of each network, ``{what: (init, lower)}`` with ``init(key)`` giving its
    parameters: sized by tracing ``init`` (nothing is allocated), float32."""
    needs = []
    for what, (init, lower) in networks.items():
        shapes = jax.tree.leaves(jax.eval_shape(init, jax.random.key(0)))
        count = sum(math.prod(leaf.shape) for leaf in shapes)
        needs.append(Need(f"{what}'s weights", FLOAT32 * count, lower))
    return needs


def _size(count: float) -> str:
    if not math.isfinite(count):
        return "more than 1e308 bytes"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count / 1e3:.3g} kB"
