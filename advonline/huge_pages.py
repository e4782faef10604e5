"""Transparent huge pages for XLA's large CPU buffers (Linux with glibc 2.35 or later).

On a CPU, XLA takes each call's temporaries (tens of MB for one training step: the backward
and forward inductions write ``[T, B, G + 1]`` tables) from ``malloc``, which serves blocks that
large by a fresh ``mmap`` and returns them on ``free``. Every call then touches new 4 KiB pages
and the kernel faults each one in: about 27,000 page faults per k1-u10 update, over a third of
its time on 2 CPU cores. glibc's tunable ``glibc.malloc.hugetlb=1`` makes ``malloc`` advise the
kernel to back such blocks with 2 MiB transparent huge pages (where the kernel's THP mode is
``madvise``), 512 times fewer faults: the per-round update runs about 1.6x faster
(``benchmarks/training_throughput.py``) and k1-u10 training about 1.2x, with identical numbers.

glibc reads its tunables once, when the process starts, so the ``advonline`` command (and the
benchmarks) start themselves again with the tunable added: :func:`relaunch_with_huge_pages`,
called before any work. Nothing else changes: same interpreter, arguments, environment and
process id. Set ``ADVONLINE_HUGE_PAGES=0`` to run without it.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

TUNABLE = "glibc.malloc.hugetlb"
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
OPT_OUT = "ADVONLINE_HUGE_PAGES"
FIRST_GLIBC = (2, 35)  # the first glibc with the tunable


def thp_mode(path: str = THP_MODE_FILE) -> str:
    """The kernel's transparent-huge-page mode (``always``, ``madvise`` or ``never``; ``""``
    where the file is missing): the bracketed word of ``path``."""
    try:
        with open(path) as file:
            text = file.read()
    except OSError:
        return ""
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else ""


def huge_pages_on(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` already asks glibc for huge pages (this process runs with them)."""
    return TUNABLE in environ.get("GLIBC_TUNABLES", "")


def huge_pages_environment(
    environ: Mapping[str, str], libc: tuple[str, str], mode: str
) -> dict[str, str] | None:
    """The environment to start again with, or ``None`` where a restart would change nothing:
    not glibc or older than 2.35, a THP mode other than ``madvise`` (``always`` gives huge pages
    already, ``never`` none at all), the tunable already set, or the opt-out set to ``0``."""
    name, version = libc
    try:
        glibc = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if (
        name != "glibc"
        or glibc < FIRST_GLIBC
        or mode != "madvise"
        or huge_pages_on(environ)
        or environ.get(OPT_OUT, "1") == "0"
    ):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables, f"{TUNABLE}=1")))}


def relaunch_with_huge_pages() -> None:
    """Replace this process by the same command with huge pages for ``malloc``'s large blocks
    (see the module's docstring), or return where that would change nothing. Call it first, in
    a program's entry point, never from library code or tests."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return
    environment = huge_pages_environment(os.environ, platform.libc_ver(), thp_mode())
    if environment is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)
