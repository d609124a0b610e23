"""pytest configuration shared by the tests and the doctests of the packages."""

import importlib.util
import os

# Under pytest-xdist (`make test` runs one worker per core) each worker computes on one thread:
# workers side by side with a multi-threaded torch / BLAS each would oversubscribe the cores
# (OpenMP threads spin-waiting for a core another worker holds; docs/performance.md#threads).
# Set before numpy and torch are first imported, so that they and the commands the tests start
# read it; a value the user exported is kept.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    del _var

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# the adapters import their trainer at module level: collect their doctests only where it is
# installed (the integration environments of `make test-integrations`)
collect_ignore = [f"integrations/{name}.py" for name in ("trl", "verl") if importlib.util.find_spec(name) is None]


@pytest.fixture(autouse=True)
def _doctest_numpy(doctest_namespace):
    """Docstring Examples may write ``np.`` without importing numpy, as numpy's own do."""
    doctest_namespace["np"] = np
    np.set_printoptions(legacy=False)
