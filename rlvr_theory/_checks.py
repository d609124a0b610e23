"""Shared argument checks (private): messages start with the argument's name."""

from __future__ import annotations

from typing import Any

import numpy as np


def finite_array(name: str, x: Any, *, ndim: int = 0) -> np.ndarray:
    """``x`` as a float array with at least ``ndim`` axes and only finite entries."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array") from None
    if a.ndim < ndim:
        raise ValueError(f"{name} must have at least {ndim} axis(es), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return a
