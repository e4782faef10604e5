# Two entry points for a fresh machine (README): `make run` and `make test`. Both install the
# locked dependency tree (requirements.lock: every package pinned, with hashes) into .venv.
# The bytecode is compiled once at install, on every core (`compileall -j 0`, 7 s on 2 cores,
# where pip's own compiling is serial: 11 s), so that no Python process of a run or of the test
# suite compiles jax's sources again, even where PYTHONDONTWRITEBYTECODE keeps Python from
# writing what it compiles (then every process pays about 2.5 s for it).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LOCK := requirements.lock

.PHONY: run quickstart test test-end-to-end test-parallel test-optimised lint bench lock

$(BIN)/advonline: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-compile --no-deps --no-build-isolation -e .
	$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c \
		"import sysconfig; print(sysconfig.get_path('purelib'))") advonline problems baselines >/dev/null
	touch $@

# The main job on the default config: train with the oracle loop, measure beside the
# baselines, export the policy, draw the figures, print the table and the verdict (a new
# folder runs/k1-u10-oracle-<UTC time> each time).
run: $(BIN)/advonline
	$(BIN)/advonline run experiments/configs/k1-u10-oracle.toml

# The same job in miniature, in under a minute: 40 buyers, learned beside threshold, a smaller
# evaluator budget (printed with the table), and XLA's optimisation passes mostly skipped (the
# programs are tiny, so compiling dominates; the figures are the same).
QUICK_BUDGET := --adversary-steps 20 --search-steps 32 --random-instances 64 --family-members 33
quickstart: $(BIN)/advonline
	JAX_DISABLE_MOST_OPTIMIZATIONS=1 $(BIN)/advonline run experiments/configs/quickstart.toml \
		--algorithm threshold $(QUICK_BUDGET)

# The test suite on every core, one file per worker at a time (long runs are marked `slow` and
# excluded; `pytest -m slow` runs them). Three tiers run on their own, and CI runs them after
# this one: the whole runs of the tool (train, measure, export, resume), the searches at the
# evaluator's full budget and the further cases of tests whose first case runs here, marked
# `end_to_end` (`make test-end-to-end`); the tests that launch several processes or devices,
# marked `parallel` (`make test-parallel`); and the certificate tests with XLA's optimisation
# passes on, as a run compiles them (`make test-optimised`: the suite turns most passes off for
# compile time, and a fused multiply-add can round a tie in a bound one way and not the other).
test: $(BIN)/advonline
	$(BIN)/python -m pytest -q -n auto --dist loadfile

test-end-to-end: $(BIN)/advonline
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m 'end_to_end and not slow'

test-parallel: $(BIN)/advonline
	$(BIN)/python -m pytest -q -m parallel

CERTIFICATE_TESTS := tests/test_certify.py tests/test_grid_certify.py tests/test_lower_bound.py
test-optimised: $(BIN)/advonline
	JAX_DISABLE_MOST_OPTIMIZATIONS=0 $(BIN)/python -m pytest -q -n auto --dist loadfile \
		$(CERTIFICATE_TESTS)

lint: $(BIN)/advonline
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(BIN)/advonline
	$(BIN)/python benchmarks/certify_speed.py

# Pin the whole tree again from pyproject.toml's ranges (needs the package index; uv runs from
# a throwaway environment). Commit the new lock with the figures measured on it.
lock:
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet uv
	.lock-venv/bin/uv pip compile pyproject.toml --extra dev --generate-hashes \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 -o $(LOCK)
	rm -rf .lock-venv
