# Two entry points for a fresh machine (README): `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench

$(BIN)/advonline: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# The main job on the default config: train, measure beside the baselines, export the policy,
# draw the figures, print where they are (a new folder runs/k1-u10-<UTC time> each time).
run: $(BIN)/advonline
	$(BIN)/advonline run experiments/configs/k1-u10.toml

# The test suite on every core, one file per worker at a time (long runs are marked `slow` and
# excluded; `pytest -m slow` runs them).
test: $(BIN)/advonline
	$(BIN)/python -m pytest -q -n auto --dist loadfile

lint: $(BIN)/advonline
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(BIN)/advonline
	$(BIN)/python benchmarks/certify_speed.py
