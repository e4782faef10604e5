"""Which cases of a parametrised test run by default: the first ones; the rest run with the
whole runs (the ``end_to_end`` marker, pyproject.toml), which ``make test-end-to-end`` and CI
run. Each further case checks the same property on another shape, and compiles its programs
again, so the default run keeps the cases that reach each code path and leaves the rest."""

import pytest


def first_by_default(values, keep: int = 1) -> list:
    """``values`` for ``pytest.mark.parametrize`` with one name: the first ``keep`` as they
    are, the rest marked ``end_to_end`` (the test's ``ids`` still name them)."""
    return [
        value if index < keep else pytest.param(value, marks=pytest.mark.end_to_end)
        for index, value in enumerate(values)
    ]
