# Two commands for users: `make figures` and `make test`. Both set themselves up: a virtual
# environment in .venv that sees none of the system's packages, torch==2.13.0 (CPU build), then
# this package with its `dev` and `train` extras from pyproject.toml, at the tested versions of
# requirements/lock.txt (pip constraints).  `make test-latest` runs the suite against the newest
# releases instead (in .venv-latest); `LOCK=` skips the lock for any target; `make lock`
# regenerates it from a clean environment.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
LOCK   ?= requirements/lock.txt
STAMP  := $(VENV)/.installed
OUT    ?= figures/out
# extra pytest arguments (.ci/run: --durations=20); test workers (pytest-xdist: one per core, idle
# workers take pending tests from busy ones,
# each on one thread; `PYTEST_WORKERS=0` runs the tests in this process)
PYTEST_ARGS ?=
PYTEST_WORKERS ?= auto
# the tests start the commands in fresh interpreters: let them reuse compiled bytecode even where
# the environment says not to write it (PYTHONDONTWRITEBYTECODE; an empty value turns it off)
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
# with a lock: its versions as constraints; without: the newest releases, upgrading what is there
PIP_PINS := $(if $(LOCK),-c $(LOCK),--upgrade --upgrade-strategy eager)

.PHONY: figures gallery test test-slow test-all test-latest test-integrations integration-envs lint bench setup \
	lock gpu-check clean browser dist

setup: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(PIP_PINS) "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet $(PIP_PINS) -e ".[dev,train]"
	@touch $(STAMP)

# requirements/lock.txt from a clean environment (no system packages, no lock), written atomically
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	.venv-lock/bin/python -m pip install --quiet -e ".[dev,train]"
	@mkdir -p requirements
	@{ sed -n '1,/^# regenerate/p' requirements/lock.txt 2>/dev/null | grep '^#' || true; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/'; \
	} > requirements/.lock.txt.tmp && mv requirements/.lock.txt.tmp requirements/lock.txt
	rm -rf .venv-lock
	@echo "requirements/lock.txt: $$(grep -vc '^#' requirements/lock.txt) packages"

figures: $(STAMP)
	$(VENV)/bin/rlvr-figures check --out $(OUT)

# the thumbnails and the gallery of docs/figures.md from the figures `make figures` wrote (not part
# of `make figures`: thumbnail bytes depend on fonts and matplotlib, and would dirty a checkout)
gallery: $(STAMP)
	$(VENV)/bin/rlvr-figures gallery --figures $(OUT)

# the fast suite and the runnable Examples of the docstrings (doctests); the `slow` tests alone;
# both; the fast suite against the newest releases (a fresh resolution in .venv-latest)
test: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist worksteal -m "not slow and not gpu" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist worksteal -m "slow and not gpu" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-latest:
	rm -f .venv-latest/.installed
	$(MAKE) test VENV=.venv-latest LOCK=

# the GPU check of docs/performance.md: gpu tests and benchmarks on CUDA, results in
# benchmarks/results/gpu/ (`make gpu-check GPU_CHECK_ARGS=--dry-run`: tiny shapes on the CPU)
GPU_CHECK_ARGS ?=
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# The wheel, dist/rlvr_diagnostics-VERSION-py3-none-any.whl (offline: the setuptools of .venv, no
# dependencies; build/ is removed first so that no deleted module survives in it).  Install it with its
# extras from the file: pip install "dist/rlvr_diagnostics-0.1.0-py3-none-any.whl[trl]" (README, Install);
# tests/test_wheel_install.py (slow) builds it the same way and installs it into a fresh venv.
dist: $(STAMP)
	rm -rf build dist/rlvr_diagnostics-*.whl
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir dist .
	@ls dist/rlvr_diagnostics-*.whl

# The TRL and verl adapters, each tested in its own environment (verl 0.9.1 pins
# transformers <= 5.10, trl 1.16 pulls 5.23).  An environment is built once from
# integrations/requirements-{trl,verl}.txt under $(INTEG_ENVS) and reused while that file is
# unchanged (its hash names the folder); this checkout is installed into it without
# dependencies (for verl's plugin entry point) before each run.
INTEG_ENVS ?= $(HOME)/.cache/rlvr-diagnostics/envs
INTEG_FWS  := trl verl

integration-envs:
	@set -e; for fw in $(INTEG_FWS); do \
	  env=$(INTEG_ENVS)/$$fw-$$(sha256sum integrations/requirements-$$fw.txt | cut -c1-12); \
	  if [ ! -f $$env/.installed ]; then \
	    echo "building the $$fw test environment in $$env (once)"; \
	    rm -rf $$env; $(PYTHON) -m venv $$env; \
	    $$env/bin/python -m pip install --quiet -r integrations/requirements-$$fw.txt; \
	    touch $$env/.installed; \
	  fi; \
	  $$env/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .; \
	done

test-integrations: integration-envs
	@set -e; for fw in $(INTEG_FWS); do \
	  env=$(INTEG_ENVS)/$$fw-$$(sha256sum integrations/requirements-$$fw.txt | cut -c1-12); \
	  echo "== $$fw ($$env)"; \
	  $$env/bin/python -m pytest -q -p no:cacheprovider tests/integrations integrations; \
	done

# A headless browser for the test that opens the HTML reports (tests/analysis/test_report_browser.py):
# Chromium from the distribution's packages (Debian/Ubuntu: apt-get), nothing when one is on PATH or in $CHROME.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable
browser:
	@if [ -n "$$CHROME" ] && [ -x "$$CHROME" ]; then echo "browser: $$CHROME"; exit 0; fi; \
	for b in $(BROWSERS); do \
	  if command -v $$b >/dev/null 2>&1; then echo "browser: $$(command -v $$b)"; exit 0; fi; \
	done; \
	command -v apt-get >/dev/null 2>&1 || { echo "no apt-get here: install Chromium with the system's package manager, or set CHROME"; exit 1; }; \
	SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/bench_masses.py

clean:
	rm -rf $(VENV) .venv-latest .venv-lock $(OUT) .pytest_cache .hypothesis
