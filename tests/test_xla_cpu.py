"""The older CPU fusion emitters (advonline/xla_cpu.py): when the flag is added, and that
importing the package adds it before JAX's CPU backend starts."""

import os
import subprocess
import sys

import pytest

from advonline.xla_cpu import FLAG, OPT_OUT, flags_with_older_emitters

MEASURED = "0.10.2"


def test_the_flag_is_added_after_the_users_flags():
    assert flags_with_older_emitters({}, MEASURED) == FLAG
    other = "--xla_force_host_platform_device_count=4"
    assert flags_with_older_emitters({"XLA_FLAGS": other}, MEASURED) == f"{other} {FLAG}"


@pytest.mark.parametrize(
    ("environ", "version"),
    [
        ({OPT_OUT: "default"}, MEASURED),  # the user asked for XLA's own choice
        ({"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}, MEASURED),  # the user's value
        ({}, "0.11.0"),  # not measured there: an XLA without the flag would abort on it
        ({}, "0.9.9"),
    ],
)
def test_nothing_is_added(environ, version):
    assert flags_with_older_emitters(environ, version) is None


def _flags_seen_by_a_fresh_process(**extra: str) -> str:
    """What ``XLA_FLAGS`` a fresh interpreter has after ``import advonline`` (the suite's own
    flags removed from its environment), with a computation run under it."""
    environment = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", OPT_OUT)}
    first = "jnp.ones(2).block_until_ready(); " if extra.pop("computed_first", None) else ""
    code = (
        f"import os, jax.numpy as jnp; {first}import advonline; "
        "assert float(jnp.arange(4.0).sum()) == 6.0; print(os.environ.get('XLA_FLAGS', ''))"
    )
    finished = subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, **extra},
        capture_output=True,
        text=True,
        check=True,
    )
    return finished.stdout.strip()


def test_importing_the_package_sets_the_flag_for_the_locked_jaxlib():
    import jaxlib

    seen = _flags_seen_by_a_fresh_process()
    if jaxlib.__version__.startswith("0.10."):
        assert seen == FLAG
    else:
        assert FLAG not in seen
    assert _flags_seen_by_a_fresh_process(**{OPT_OUT: "default"}) == ""
    # a process that computed before the import keeps its flags: XLA has read them already
    assert _flags_seen_by_a_fresh_process(computed_first="1") == ""


def test_a_child_can_be_given_the_environment_as_this_process_found_it(monkeypatch):
    from advonline import xla_cpu

    monkeypatch.setattr(xla_cpu, "_GIVEN", {})
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    monkeypatch.delenv(OPT_OUT, raising=False)
    monkeypatch.setattr(xla_cpu.importlib.metadata, "version", lambda name: MEASURED)
    monkeypatch.setattr(xla_cpu, "_backends_started", lambda: False)  # as in a fresh process
    xla_cpu.prefer_older_emitters()
    assert os.environ["XLA_FLAGS"].endswith(FLAG)
    given = xla_cpu.environment_as_given()
    assert given["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(xla_cpu, "_GIVEN", {})
    xla_cpu.prefer_older_emitters()
    assert "XLA_FLAGS" not in xla_cpu.environment_as_given()


def test_a_report_records_the_xla_flags_it_ran_with():
    from advonline import environment

    assert environment.describe()["xla_flags"] == os.environ.get("XLA_FLAGS", "")
