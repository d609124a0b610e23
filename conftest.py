"""pytest configuration shared by the tests and the doctests of the packages."""

import importlib.util

import numpy as np
import pytest

# the adapters import their trainer at module level: collect their doctests only where it is
# installed (the integration environments of `make test-integrations`)
collect_ignore = [f"integrations/{name}.py" for name in ("trl", "verl") if importlib.util.find_spec(name) is None]


@pytest.fixture(autouse=True)
def _doctest_numpy(doctest_namespace):
    """Docstring Examples may write ``np.`` without importing numpy, as numpy's own do."""
    doctest_namespace["np"] = np
    np.set_printoptions(legacy=False)
