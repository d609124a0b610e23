"""pytest configuration shared by the tests and the doctests of the packages."""

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _doctest_numpy(doctest_namespace):
    """Docstring Examples may write ``np.`` without importing numpy, as numpy's own do."""
    doctest_namespace["np"] = np
    np.set_printoptions(legacy=False)
