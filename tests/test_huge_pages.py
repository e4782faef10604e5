"""The restart with huge pages (advonline/huge_pages.py): when it applies, what it changes, and
that the ``advonline`` command really runs under it where this machine allows it."""

import os
import platform
import subprocess
import sys

import pytest

from advonline.huge_pages import (
    OPT_OUT,
    TUNABLE,
    huge_pages_environment,
    thp_mode,
)

GLIBC = ("glibc", "2.36")


def test_the_tunable_is_added_once_and_other_tunables_are_kept():
    environment = huge_pages_environment({"HOME": "/h"}, GLIBC, "madvise")
    assert environment == {"HOME": "/h", "GLIBC_TUNABLES": f"{TUNABLE}=1"}
    kept = huge_pages_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, GLIBC, "madvise")
    assert kept["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}=1"
    # started again, the process finds the tunable and goes on: no second restart
    assert huge_pages_environment(environment, GLIBC, "madvise") is None


@pytest.mark.parametrize(
    ("environ", "libc", "mode"),
    [
        ({}, GLIBC, "always"),  # every large block gets huge pages already
        ({}, GLIBC, "never"),  # none can
        ({}, GLIBC, ""),  # no THP file (not Linux, or a kernel without THP)
        ({}, ("glibc", "2.34"), "madvise"),  # before the tunable existed
        ({}, ("musl", "1.2"), "madvise"),
        ({}, ("", ""), "madvise"),
        ({OPT_OUT: "0"}, GLIBC, "madvise"),
    ],
)
def test_no_restart_where_it_would_change_nothing_or_is_refused(environ, libc, mode):
    assert huge_pages_environment(environ, libc, mode) is None


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    path = tmp_path / "enabled"
    path.write_text("always [madvise] never\n")
    assert thp_mode(str(path)) == "madvise"
    assert thp_mode(str(tmp_path / "missing")) == ""


SHOW_TUNABLES = "import os; print(os.environ.get('GLIBC_TUNABLES', ''))"


@pytest.mark.skipif(
    huge_pages_environment(os.environ, platform.libc_ver(), thp_mode()) is None,
    reason="this machine would not restart (no glibc >= 2.35 with THP in madvise mode)",
)
def test_the_command_starts_again_with_the_tunable():
    """``python -m advonline`` restarts itself and keeps its arguments: the restarted process
    runs the command asked for, with the tunable in its environment."""
    script = (
        "import sys; from advonline.huge_pages import relaunch_with_huge_pages; "
        f"relaunch_with_huge_pages(); {SHOW_TUNABLES}; print(sys.argv[1:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "one", "two"], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [f"{TUNABLE}=1", "['one', 'two']"]
    help_text = subprocess.run(
        [sys.executable, "-m", "advonline", "export", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert help_text.stdout.startswith("usage: advonline export")
    refused = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, OPT_OUT: "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert refused.stdout.splitlines()[0] == os.environ.get("GLIBC_TUNABLES", "")
