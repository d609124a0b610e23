# Two commands for users: `make figures` and `make test`. Both set themselves up:
# a virtual environment in .venv (reusing a system PyTorch >= 2.4 if there is one),
# torch==2.13.0 (CPU build) only when no usable torch is found, then this package
# with its `dev` and `train` extras from pyproject.toml.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
OUT    ?= figures/out

.PHONY: figures gallery test test-all test-integrations integration-envs lint bench setup clean browser

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	@$(PY) -c "import sys, torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(v < (2, 4))" 2>/dev/null \
		|| $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev,train]"
	@touch $(STAMP)

figures: $(STAMP)
	$(VENV)/bin/rlvr-figures check --out $(OUT)

# the thumbnails and the gallery of docs/figures.md from the figures `make figures` wrote (not part
# of `make figures`: thumbnail bytes depend on fonts and matplotlib, and would dirty a checkout)
gallery: $(STAMP)
	$(VENV)/bin/rlvr-figures gallery --figures $(OUT)

# the fast suite and the runnable Examples of the docstrings (doctests)
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not gpu"

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

test-all: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_masses.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
