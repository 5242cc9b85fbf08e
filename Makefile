# Every step a newcomer or CI needs, from a fresh checkout. `make test` is what CI runs.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin

.PHONY: setup demo test pytest prove bench lint

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: setup
	$(BIN)/crs-bridge call score_best_balancing_migrations @examples/dynamic-cluster.json

test: pytest prove

pytest: setup
	$(PY) -m pytest -q

prove: setup
	PATH=$(BIN):$$PATH prove -r perl-client/t

bench: setup
	$(PY) benchmarks/bench_core.py

lint: setup
	$(BIN)/ruff check core bridge tests benchmarks
