"""One JSON policy and one number formatter for every file and table the toolkit writes.

JSON (:func:`jsonable`, :func:`dumps`) is always valid (``allow_nan=False``):

* NaN ("no value") is written ``null`` (pandas reads it back as NaN);
* ``+inf`` / ``-inf`` (a value, e.g. an infinite sign ratio) are the strings ``"inf"`` /
  ``"-inf"``;
* numpy scalars and arrays become Python numbers and lists; tuples become lists; paths,
  dtypes and devices become strings; dataclasses become objects.

Examples
--------
>>> import numpy as np
>>> from rlvr_plumbing.serialize import dumps, fmt_number
>>> dumps({"ratio": float("inf"), "x": np.float64(0.5), "missing": float("nan"), "G": np.int64(8)})
'{"ratio": "inf", "x": 0.5, "missing": null, "G": 8}'
>>> fmt_number(0.123456789), fmt_number(float("nan")), fmt_number(1234567, thousands=True)
('0.123457', '—', '1,234,567')
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np

__all__ = ["jsonable", "dumps", "fmt_number"]


def jsonable(value: Any) -> Any:
    """``value`` converted to plain JSON types under the policy of this module."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and callable(value.item):  # torch / numpy 0-d
        try:
            return jsonable(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


def dumps(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """Strict JSON text of ``value`` (see the module docstring for the policy)."""
    return json.dumps(jsonable(value), indent=indent, sort_keys=sort_keys, allow_nan=False, ensure_ascii=False)


def fmt_number(x: Any, digits: int = 6, *, thousands: bool = False) -> str:
    """A number for a table cell: ``digits`` significant digits, ``—`` for None/NaN,
    ``∞``/``-∞`` for infinities, integers exact (with separators if ``thousands``).

    >>> fmt_number(2.0), fmt_number(1e-7, 3), fmt_number(float("-inf")), fmt_number("text")
    ('2', '1e-07', '-∞', 'text')
    """
    if x is None:
        return "—"
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}" if thousands else str(int(x))
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "—"
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        return f"{v:.{digits}g}"
    return str(x)
