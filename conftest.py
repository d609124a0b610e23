"""pytest configuration shared by the tests and the doctests of the packages."""

import importlib.util
import os
import sys

# Under pytest-xdist (`make test` runs one worker per core) each worker computes on one thread:
# workers side by side with a multi-threaded torch / BLAS each would oversubscribe the cores
# (OpenMP threads spin-waiting for a core another worker holds; docs/performance.md#threads).
# Set before numpy and torch are first imported, so that they and the commands the tests start
# read it; a value the user exported is kept.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in THREAD_VARS:
        os.environ.setdefault(_var, "1")
    del _var

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# the adapters import their trainer at module level: collect their doctests only where it is
# installed (the integration environments of `make test-integrations`)
collect_ignore = [f"integrations/{name}.py" for name in ("trl", "verl") if importlib.util.find_spec(name) is None]


#: tests that run for a minute on 2 cores: started first, so that under xdist no worker is left
#: finishing one of them alone at the end of the run
FIRST = ("tests/benchmarks/",)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _doctest_numpy(doctest_namespace):
    """Docstring Examples may write ``np.`` without importing numpy, as numpy's own do."""
    doctest_namespace["np"] = np
    np.set_printoptions(legacy=False)


@pytest.fixture(autouse=True)
def _threads_restored():
    """A command run in process sets the threads of torch and the BLAS pools (``--threads``, or its
    default: all cores for ``rlvr-diff weights``, ``rlvr-sim categorical``); put them back after
    the test, so that no test runs on the threads another one left (under xdist: oversubscribed)."""
    env = {var: os.environ.get(var) for var in THREAD_VARS}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    if all(os.environ.get(var) == val for var, val in env.items()) and (
            threads is None or sys.modules["torch"].get_num_threads() == threads):
        return
    for var, val in env.items():
        if val is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = val
    if threads is not None:
        sys.modules["torch"].set_num_threads(threads)
    if env["OMP_NUM_THREADS"] is not None:
        import threadpoolctl

        threadpoolctl.threadpool_limits(int(env["OMP_NUM_THREADS"]))
