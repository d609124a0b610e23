"""Argument checks shared by every public function and command line of the toolkit.

One policy, applied everywhere (compare scipy's ``scipy/_lib/_util.py``):

* **Messages** start with the argument's name as the caller wrote it, say what is allowed and
  show the value received: ``G must be an integer >= 1, got 0.5``.  Every check raises
  ``ValueError`` (a command line turns it into ``PROG: error: ...`` and exit status 2).
* **Integers**: Python ``int`` and numpy integers are accepted; so are *integral* floats
  (``8.0``, ``np.float64(8)``: what a CSV or ``2.0**k`` produces); ``8.5``, NaN and strings
  are refused.  The result is a Python ``int``.
* **bool** is never a number: ``True`` is refused wherever an integer or a real number is
  expected (``numpy.bool_`` too).
* **Real numbers**: ``int``, ``float`` and numpy real scalars; NaN is always refused, ``±inf``
  only with ``allow_inf=True``.  The result is a Python ``float``.
* **Ranges** are closed unless ``low_open``/``high_open`` says otherwise; ``None`` is no bound.
* **Arrays** are converted with ``numpy.asarray(x, dtype=float)`` and checked element-wise
  (finite unless ``allow_inf``; range; integrality); the result is a float64 array.  Complex
  values are refused (never silently cut to their real part), as are text and booleans.
* **Random sources**: ``None`` (fresh entropy), a non-negative integer seed, or a
  ``numpy.random.Generator`` (returned as is).

Examples
--------
>>> from rlvr_plumbing import checks
>>> checks.integer("G", 8.0, low=1)
8
>>> checks.probability("p", 0.25)
0.25
>>> checks.choice("which", "m_S", ("m_S", "m_F"))
'm_S'
>>> checks.integer("G", True, low=1)
Traceback (most recent call last):
...
ValueError: G must be an integer >= 1, got True
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["integer", "number", "probability", "choice", "array", "random_source", "range_text", "fmt_bytes",
           "available_host_memory", "fits_in_memory"]


def range_text(low: float | None = None, high: float | None = None, *, low_open: bool = False,
               high_open: bool = False) -> str:
    """``">= 0 and < 1"`` for the bounds (empty when both are ``None``)."""
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}" if isinstance(low, float) else
                     f"{'>' if low_open else '>='} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}" if isinstance(high, float) else
                     f"{'<' if high_open else '<='} {high}")
    return " and ".join(parts)


def _in_range(v: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    if low is not None and not (v > low if low_open else v >= low):
        return False
    if high is not None and not (v < high if high_open else v <= high):
        return False
    return True


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def integer(name: str, value: Any, low: int | None = None, high: int | None = None, *,
            allow_none: bool = False) -> int | None:
    """``value`` as a Python ``int`` in ``[low, high]``; integral floats are accepted.

    >>> integer("steps", np.int64(3), low=1)
    3
    """
    if value is None and allow_none:
        return None
    ok = _is_real(value)
    if ok and not isinstance(value, numbers.Integral):  # an integral float (8.0); ints of any size stay exact
        f = float(value)
        ok = math.isfinite(f) and f == math.floor(f)
    if ok:
        value = int(value)
        ok = _in_range(value, low, high, False, False)
    if not ok:
        rng = range_text(low, high)
        raise ValueError(f"{name} must be an integer{' ' + rng if rng else ''}"
                         f"{' (or None)' if allow_none else ''}, got {value!r}")
    return value


def number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False, allow_inf: bool = False,
           allow_none: bool = False) -> float | None:
    """``value`` as a Python ``float`` in the range (closed unless ``*_open``); NaN refused.

    >>> number("lr", 1e-3, low=0, low_open=True)
    0.001
    """
    if value is None and allow_none:
        return None
    ok = _is_real(value)
    if ok:
        f = float(value)
        ok = not math.isnan(f) and (allow_inf or math.isfinite(f)) and _in_range(f, low, high, low_open, high_open)
    if not ok:
        rng = range_text(low, high, low_open=low_open, high_open=high_open)
        what = "a number" if allow_inf else "a finite number"
        raise ValueError(f"{name} must be {what}{' ' + rng if rng else ''}"
                         f"{' (or None)' if allow_none else ''}, got {value!r}")
    return float(value)


def probability(name: str, value: Any, *, low_open: bool = False, high_open: bool = False) -> float:
    """A number in ``[0, 1]`` (ends excluded with ``low_open``/``high_open``).

    >>> probability("mu", 1)
    1.0
    """
    return number(name, value, 0.0, 1.0, low_open=low_open, high_open=high_open)


def _same(a: Any, value: Any) -> bool:
    """``value`` matches the allowed entry ``a``: a bool only a bool (numpy's too), never ``1 == True``."""
    a_bool, v_bool = isinstance(a, (bool, np.bool_)), isinstance(value, (bool, np.bool_))
    if a_bool or v_bool:
        return a_bool and v_bool and bool(a) == bool(value)
    try:
        return bool(a == value)
    except (TypeError, ValueError):  # incomparable, or an array (ambiguous truth value)
        return False


def choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """The entry of ``allowed`` equal to ``value``; otherwise a message listing them (and the
    closest, when one is close: ``did you mean 'csv'?``).

    The entry is returned, so ``0.0`` gives ``0`` for ``allowed=(0, 1)`` and ``numpy.True_``
    gives ``True``; a bool matches only a bool (``1`` is not ``True``).

    >>> choice("format", "csv", ("markdown", "csv"))
    'csv'
    >>> choice("ddof", np.float64(1.0), (0, 1))
    1
    """
    allowed = tuple(allowed)
    for a in allowed:
        if _same(a, value):
            return a
    from .registry import did_you_mean

    raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}"
                     f"{did_you_mean(value, [a for a in allowed if isinstance(a, str)])}")


def array(name: str, x: Any, *, ndim: int | None = None, min_ndim: int = 0, low: float | None = None,
          high: float | None = None, low_open: bool = False, high_open: bool = False,
          integer: bool = False, allow_inf: bool = False, nonempty: bool = False,
          allow_bool: bool = False) -> np.ndarray:
    """``x`` as a float64 array with the given number of axes, every entry checked.

    Booleans are refused unless ``allow_bool`` (then ``True`` is 1.0); text always.

    >>> array("N", [1, 2.0, 4], integer=True, low=1)
    array([1., 2., 4.])
    """
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):  # ragged nesting
        raw = None
    if raw is not None and ((raw.dtype == bool and not allow_bool) or raw.dtype.kind in "USV"):
        what = "booleans" if raw.dtype == bool else "text"
        raise ValueError(f"{name} must be a numeric array, got {what}")
    if raw is not None and (raw.dtype.kind == "c" or (raw.dtype.kind == "O" and any(
            isinstance(v, complex) or np.iscomplexobj(v) for v in raw.flat))):
        raise ValueError(f"{name} must be a real numeric array, got complex")  # never drop the imaginary part
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axis(es), got shape {a.shape}")
    if a.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axis(es), got shape {a.shape}")
    if nonempty and a.size == 0:
        raise ValueError(f"{name} must not be empty")
    bad = np.isnan(a) if allow_inf else ~np.isfinite(a)
    if integer:
        with np.errstate(invalid="ignore"):
            bad |= np.isfinite(a) & (a != np.floor(a))
    if low is not None:
        bad |= (a <= low) if low_open else (a < low)
    if high is not None:
        bad |= (a >= high) if high_open else (a > high)
    if np.any(bad):
        rng = range_text(low, high, low_open=low_open, high_open=high_open)
        what = ("integers" if integer else ("numbers" if allow_inf else "finite numbers")) + (" " + rng if rng else "")
        first = a[bad].flat[0].item()  # a Python float: the message shows 2.5, not np.float64(2.5)
        raise ValueError(f"{name} must contain only {what}, got {first!r}")
    return a


def random_source(name: str, seed: Any) -> np.random.Generator:
    """A ``numpy.random.Generator`` from ``None``, a seed ``>= 0`` or a Generator.

    >>> bool(random_source("seed", 0).integers(10) == np.random.default_rng(0).integers(10))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(integer(name, seed, low=0))


# ------------------------------------------------------------ sizes bounded by memory
def fmt_bytes(n: float) -> str:
    """``1.5 GiB``-style size (binary units).

    >>> fmt_bytes(3 * 2**30), fmt_bytes(512)
    ('3.0 GiB', '512 B')
    """
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"  # pragma: no cover - the loop returns


def available_host_memory() -> int:
    """Bytes of RAM a new allocation can use now: ``MemAvailable`` of ``/proc/meminfo`` (Linux),
    else the free physical pages (``os.sysconf``), capped by a cgroup memory limit; ``2**63 - 1``
    where none of these can be read (then the allocation itself decides)."""
    avail = math.inf
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = float(line.split()[1]) * 1024
                    break
    except OSError:  # pragma: no cover - not Linux
        pass
    if not math.isfinite(avail):  # pragma: no cover - not Linux
        try:
            avail = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return 2**63 - 1
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            avail = min(avail, float(text))
            break
    return int(avail)


def fits_in_memory(nbytes: float, what: str, *, available: float | None = None, fraction: float = 0.9,
                   where: str = "", advice: str = "") -> None:
    """``ValueError`` if ``what`` needs more than ``fraction`` of the memory ``available``
    (default :func:`available_host_memory`), before anything is allocated.  ``nbytes`` is the
    caller's estimate from its settings, in Python integers (no overflow); the message gives
    both numbers: ``{what} needs about {nbytes} of memory{where}; {limit} available{advice}``.

    >>> fits_in_memory(1024, "a tiny run")
    >>> fits_in_memory(2**50, "G = 2**40", available=2**30, where=" for the masses", advice=": choose a smaller G")
    Traceback (most recent call last):
    ...
    ValueError: G = 2**40 needs about 1.0 PiB of memory for the masses; 921.6 MiB available: choose a smaller G
    """
    limit = (available_host_memory() if available is None else available) * fraction
    if nbytes > limit:
        raise ValueError(f"{what} needs about {fmt_bytes(nbytes)} of memory{where}; {fmt_bytes(limit)} available"
                         f"{advice}")
