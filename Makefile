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

.PHONY: figures test test-all lint bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	@$(PY) -c "import sys, torch; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(v < (2, 4))" 2>/dev/null \
		|| $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev,train]"
	@touch $(STAMP)

figures: $(STAMP)
	$(VENV)/bin/rlvr-figures check --out $(OUT)

# the fast suite and the runnable Examples of the docstrings (doctests)
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not gpu"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test-all: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_masses.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
