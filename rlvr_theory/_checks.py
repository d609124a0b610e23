"""Shared argument checks (private): messages start with the argument's name."""

from __future__ import annotations

import math
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


def finite_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                  low_open: bool = False) -> float:
    """A finite real number (not a bool) in ``[low, high]`` (``(low, high]`` with ``low_open``),
    as a float; otherwise ``ValueError`` naming ``name`` and the allowed range."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        rng = ([f"{'>' if low_open else '>='} {low}"] if low is not None else []) + \
              ([f"<= {high}"] if high is not None else [])
        raise ValueError(f"{name} must be a finite number{' ' + ' and '.join(rng) if rng else ''}, got {value!r}")
    return float(value)
