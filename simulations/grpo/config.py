"""Argument checks shared by the SFT and GRPO configurations, ``--param`` parsing, and the
construction of advantages and schedules from names (refused before any work starts)."""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path
from typing import Any, Iterable

from rlvr_theory import advantages as _adv
from rlvr_theory import schedules as _sched
from rlvr_theory._checks import finite_number

__all__ = ["check_int", "check_float", "parse_params", "SCHEDULES", "make_advantage", "make_schedule",
           "check_out_dir"]

#: schedule names → classes of :mod:`rlvr_theory.schedules`
SCHEDULES = {"fade": _sched.FADESchedule, "fade-log": _sched.FADELogSchedule, "agrae": _sched.AGRAESchedule}


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """An integer ``>= low`` (and ``<= high``), or ValueError naming ``name``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        rng = f">= {low}" + ("" if high is None else f" and <= {high}")
        raise ValueError(f"{name} must be an integer {rng}, got {value!r}")
    return value


check_float = finite_number  # one implementation: rlvr_theory._checks


def parse_params(items: Iterable[str] | None) -> dict[str, Any]:
    """``["delta=0.5", "normalize=true"]`` → ``{"delta": 0.5, "normalize": True}``.

    Values are Python literals (``0.5``, ``3``, ``None``, ``True``); ``true``/``false``/``none``
    are accepted in any case; anything else stays a string.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"param must look like NAME=VALUE (e.g. delta=0.5), got {item!r}")
        low = raw.strip().lower()
        if low in ("true", "false", "none"):
            val: Any = {"true": True, "false": False, "none": None}[low]
        else:
            try:
                val = ast.literal_eval(raw.strip())
            except (ValueError, SyntaxError):
                val = raw.strip()
        out[key] = val
    return out


def make_advantage(name: str, params: dict[str, Any], reward_values: tuple[float, float]) -> _adv.Advantage:
    """``rlvr_theory.advantages.get(name, reward_values=..., **params)`` with messages naming the setting."""
    if name not in _adv.names():
        raise ValueError(f"advantage: unknown advantage {name!r}; allowed: {', '.join(sorted(_adv.names()))}")
    try:
        return _adv.get(name, reward_values=tuple(reward_values), **params)
    except ValueError as err:
        raise ValueError(f"param: {err}") from None


def _schedule_params(name: str) -> list[str]:
    sig = inspect.signature(SCHEDULES[name].__init__)
    return [p for p in sig.parameters if p not in ("self", "reward_values")]


def make_schedule(name: str, params: dict[str, Any], reward_values: tuple[float, float], *,
                  steps: int, H0: float | None = None) -> _sched.Schedule:
    """A schedule of :mod:`rlvr_theory.schedules` from its CLI name and ``--param`` values.

    ``fade``: ``H0`` defaults to the measured initial entropy (passed by the trainer; FADE
    Alg. 2 line 1) and must be given when ``H0`` is ``None``; ``fade-log``: ``T = steps``.
    """
    if name not in SCHEDULES:
        raise ValueError(f"schedule: unknown schedule {name!r}; allowed: {', '.join(SCHEDULES)}")
    allowed = [a for a in _schedule_params(name) if not (name == "fade-log" and a == "T")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"param: unknown parameter(s) {', '.join(unknown)} for schedule {name!r}; "
                         f"allowed: {', '.join(allowed)}")
    kw = dict(params)
    if name == "fade":
        kw.setdefault("H0", 1.0 if H0 is None else H0)
    if name == "fade-log":
        kw["T"] = steps
    try:
        return SCHEDULES[name](reward_values=tuple(reward_values), **kw)
    except (ValueError, TypeError) as err:
        raise ValueError(f"param: schedule {name!r}: {err}") from None


def check_out_dir(out: Any, *, resume: bool = False) -> Path:
    """``out`` must be a path; without ``resume`` it must not exist or be an empty directory."""
    if not isinstance(out, (str, os.PathLike)) or str(out) == "":
        raise ValueError(f"out must be a directory path, got {out!r}")
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ValueError(f"out: {str(p)!r} exists and is not a directory")
    if not resume and p.is_dir() and any(p.iterdir()):
        raise ValueError(f"out: {str(p)!r} already exists and is not empty; choose a new directory "
                         "(or pass --resume to continue a GRPO run there)")
    return p
