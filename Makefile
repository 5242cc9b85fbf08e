# Every step a newcomer or CI needs, from a fresh checkout. `make test` is what CI runs.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin

.PHONY: setup bytecode demo test pytest prove wheel-test bench lint deb deb-test

setup: $(VENV)/.installed

# An editable install: crs_bridge.core and crs_bridge.bridge are found in core/ and bridge/ by
# the import finder setuptools installs (its start-up cost: docs/performance.md).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV) || { echo "make setup: 'python3 -m venv' failed:" \
	  "install Python's venv module (Debian, Ubuntu: apt install python3-venv) and run make again" >&2; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(MAKE) --no-print-directory bytecode
	touch $@

# An editable install runs from the sources: compile them once, so that a server start does not
# (PYTHONDONTWRITEBYTECODE, set on some machines, would otherwise make every start recompile).
bytecode:
	$(PY) -m compileall -q core bridge crs_bridge >/dev/null

# What HA's next round would do on a sample cluster and why, in words; then the scorer's answer as JSON.
demo: setup
	@echo '$$ $(VENV)/bin/crs-bridge explain @examples/dynamic-cluster.json'
	@$(BIN)/crs-bridge explain @examples/dynamic-cluster.json
	@echo
	@echo '$$ $(VENV)/bin/crs-bridge call score_best_balancing_migrations @examples/dynamic-cluster.json'
	@echo '# the best 3 moves as JSON, lowest imbalance (coefficient of variation of node loads) after the move first'
	@$(BIN)/crs-bridge call score_best_balancing_migrations @examples/dynamic-cluster.json

test: pytest prove wheel-test

pytest: setup
	$(PY) -m pytest -q

prove: setup
	PATH=$(BIN):$$PATH prove -r perl-client/t

# The public client from a built wheel in a throwaway venv (dependencies from PyPI; 15 to 30 s).
wheel-test:
	tests/public/run_from_wheel.sh

bench: setup bytecode
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_e2e.py
	PATH=$(BIN):$$PATH perl benchmarks/perl_round.pl
	PATH=$(BIN):$$PATH perl benchmarks/starts_under_load.pl --starts-only --starts 5

# The Debian package crs-bridge_<version>_amd64.deb, in this folder (debian/build-deb; needs
# dpkg-dev and PyPI, whose wheels it keeps in build/deb). README: "Deploy on Proxmox VE".
deb: setup
	PYTHON=$(PY) debian/build-deb

# The package test alone; `make test` runs it too where it can (root, debootstrap, dpkg-dev).
# CRS_BRIDGE_DEB_SUITE=trixie: on Debian 13 (perl 5.40, Python 3.13).
deb-test: setup
	@command -v lintian >/dev/null || echo "make deb-test: lintian is not installed" \
	  "(apt install lintian): the package's lintian check will be skipped" >&2
	$(PY) -m pytest -q tests/test_deb_package.py

lint: setup
	$(BIN)/ruff check crs_bridge tests benchmarks
