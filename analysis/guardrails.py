"""Guardrails: rules over a run's per-step metrics that say when training is going wrong.

Each rule is a small frozen dataclass holding its thresholds and its source, with
``check(history) -> Alert | None``: ``history`` is the run's per-step metric table so far (a
pandas DataFrame, or a mapping of column name to a 1-D array), one row per step, in the
vocabulary our trainer logs (``simulations.grpo``: ``entropy``, ``frac_all_correct``,
``frac_all_wrong``, ``m_S``, ``m_F``, ``m_ratio``, ``cov_logp_adv``, ...) and the audit's
(``frac_zero_signal``, ``sign_ratio``, ``frac_zero_std``, ``seq_is_ratio_max``, ...:
:mod:`analysis.audit.metric_logs`).  A rule looks at the last row and the window before it;
a rule whose column is not in the history never fires.

=================  =====================================================================
rule               fires when (defaults)
=================  =====================================================================
``entropy_drop``   the entropy fell by ``fraction`` (0.5) of its maximum over the last
                   ``steps`` (30) steps — a user's choice, not a paper number
``cov_positive``   Cui et al.'s ``Ĉov(log π, A)`` > 0 on each of the last ``steps`` (10)
                   steps: under natural policy gradient ``ΔH ≈ −η·Ĉov`` (arXiv 2505.22617)
``sign_ratio``     ``m_S/m_F`` outside ``[low, high]`` (0.8, 1.25) on each of the last
                   ``steps`` (3) steps: FADE Eq. 7's drift ``(m_S − m_F)·H`` (Sec. 4.1, Table 7)
``zero_signal``    the share of groups with all rewards equal above ``threshold`` (0.75) on
                   each of the last ``steps`` (10) steps (F-GRPO Lemma 3.1: a group carries
                   signal iff ``0 < X < G``); the message gives the floor ``p^G + (1−p)^G`` at
                   the step's mean solve rate when ``group_size`` is set
``is_ratio``       the importance-sampling ratio's maximum above ``cap`` (3.0, TRL's
                   ``vllm_importance_sampling_cap``), when the trainer logs it
=================  =====================================================================

:class:`Guard` holds the rules and an action (``log``, ``alert``, ``stop``); ``update(step,
metrics)`` adds one row and returns the alerts of rules that *start* firing at that step (a
rule that keeps firing is reported once, again only after it has stopped firing).
:func:`append_alerts` writes them as JSON lines to ``RUN_DIR/rlvr_alerts.jsonl``
(:data:`analysis.audit.trainer_log.ALERTS_FILE`), read back by
:func:`analysis.audit.trainer_log.read_alerts`.  See ``docs/guardrails.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from analysis.audit.trainer_log import ALERT_KEYS, ALERTS_FILE, IS_CAP
from rlvr_plumbing import checks
from rlvr_theory.tail_miss import active

__all__ = ["Alert", "EntropyDrop", "CovPositive", "SignRatio", "ZeroSignal", "ISRatio", "Guard", "RULES",
           "ACTIONS", "PRESETS", "default_rules", "append_alerts", "drop_alerts_after", "ALERTS_FILE", "ALERT_KEYS"]

#: what a guard does when a rule fires: log it, also write it to the run folder, also stop the run
ACTIONS = ("log", "alert", "stop")


@dataclass(frozen=True)
class Alert:
    """One rule firing at one step; :meth:`to_dict` is the JSON line of :data:`ALERTS_FILE`."""

    step: int
    rule: str
    message: str
    value: float | None = None
    threshold: float | None = None
    action: str = "log"
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``step``, ``rule``, ``message`` (:data:`ALERT_KEYS`), then ``value``, ``threshold``,
        ``action``, ``source`` (non-finite numbers as ``None``)."""
        d = dataclasses.asdict(self)
        for k in ("value", "threshold"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None if math.isnan(d[k]) else ("inf" if d[k] > 0 else "-inf")
        return {**{k: d[k] for k in ALERT_KEYS}, **{k: v for k, v in d.items() if k not in ALERT_KEYS}}


# ------------------------------------------------------------------ history access
def _column(history: Any, *names: str) -> np.ndarray | None:
    """The first of ``names`` present in ``history`` as a float array (None, strings such as
    ``"inf"`` converted; missing values NaN), or ``None``."""
    for name in names:
        if name in history:
            col = history[name]
            values = col.to_numpy() if hasattr(col, "to_numpy") else col
            try:
                return np.asarray(values, dtype=float).ravel()
            except (TypeError, ValueError):
                return np.array([_float(v) for v in values], dtype=float)
    return None


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _steps(history: Any, n: int) -> np.ndarray:
    s = _column(history, "step")
    return np.arange(n, dtype=float) if s is None else s


def _last_run(flags: np.ndarray) -> int:
    """Length of the run of ``True`` at the end of ``flags``."""
    if flags.size == 0 or not flags[-1]:
        return 0
    false = np.flatnonzero(~flags)
    return int(flags.size - (false[-1] + 1 if false.size else 0))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _check_steps(name: str, value: Any) -> int:
    return checks.integer(name, value, low=1)


# ------------------------------------------------------------------ rules
@dataclass(frozen=True)
class EntropyDrop:
    """The entropy fell by at least ``fraction`` of its maximum over the last ``steps`` steps.

    A user's choice of speed, not a paper's number (the default, 50 % in 30 steps, is the
    heuristic of ``microsoft/post-training-toolkit``); what it watches is the collapse the
    papers are about (FADE Sec. 4.1, Eq. 7; Cui et al. 2025)."""

    fraction: float = 0.5
    steps: int = 30
    column: str = "entropy"
    name: ClassVar[str] = "entropy_drop"
    source: ClassVar[str] = "user-set speed; entropy collapse: FADE Eq. 7, Cui et al. 2025 (arXiv 2505.22617)"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fraction", checks.number(f"{self.name}.fraction", self.fraction, low=0, high=1,
                                                           low_open=True, high_open=True))
        object.__setattr__(self, "steps", _check_steps(f"{self.name}.steps", self.steps))

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def check(self, history: Any) -> Alert | None:
        H = _column(history, self.column)
        if H is None or H.size == 0 or not np.isfinite(H[-1]):
            return None
        s = _steps(history, H.size)
        window = (s >= s[-1] - self.steps) & np.isfinite(H)
        i_max = int(np.argmax(np.where(window, H, -np.inf)))
        top = float(H[i_max])
        if not top > 0:
            return None
        drop = 1.0 - float(H[-1]) / top
        if drop < self.fraction:
            return None
        return Alert(int(s[-1]), self.name,
                     f"entropy fell {100 * drop:.3g} % in {int(s[-1] - s[i_max])} steps (from {_fmt(top)} at step "
                     f"{int(s[i_max])} to {_fmt(float(H[-1]))}); the guard's limit is {100 * self.fraction:.3g} % "
                     f"within {self.steps} steps", value=drop, threshold=self.fraction, source=self.source)


@dataclass(frozen=True)
class _Persistent:
    """A condition on one column that holds on each of the last ``steps`` steps that logged it
    (a step whose value is missing is skipped)."""

    steps: int = 10
    name: ClassVar[str] = ""
    source: ClassVar[str] = ""
    _names: ClassVar[tuple[str, ...]] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self._names

    def _series(self, history: Any) -> np.ndarray | None:
        return _column(history, *self._names)

    def _flags(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _message(self, x: np.ndarray, n: int, history: Any) -> str:
        raise NotImplementedError

    def _threshold(self, x: np.ndarray) -> float:
        raise NotImplementedError

    def check(self, history: Any) -> Alert | None:
        x = self._series(history)
        if x is None or x.size == 0:
            return None
        # the steps that logged the metric (TRL logs the masses on generation steps only when a
        # batch serves several optimiser steps): a step without it neither breaks nor extends a run
        logged = ~np.isnan(x)
        s = _steps(history, x.size)[logged]
        x = x[logged]
        n = _last_run(self._flags(x))
        if n < self.steps:
            return None
        return Alert(int(s[-1]), self.name, self._message(x, n, history), value=float(x[-1]),
                     threshold=self._threshold(x), source=self.source)


@dataclass(frozen=True)
class CovPositive(_Persistent):
    """Cui et al.'s token covariance ``Ĉov(log π, A)`` above ``threshold`` (0) on each of the
    last ``steps`` steps: a positive covariance drives the entropy down (``ΔH ≈ −η·Ĉov``)."""

    steps: int = 10
    threshold: float = 0.0
    column: str = "cov_logp_adv"
    name: ClassVar[str] = "cov_positive"
    source: ClassVar[str] = "Cui et al. 2025 (arXiv 2505.22617): ΔH ≈ −η·Cov(log π, A)"

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _check_steps(f"{self.name}.steps", self.steps))
        object.__setattr__(self, "threshold", checks.number(f"{self.name}.threshold", self.threshold))

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def _series(self, history: Any) -> np.ndarray | None:
        return _column(history, self.column)

    def _flags(self, x: np.ndarray) -> np.ndarray:
        return x > self.threshold

    def _threshold(self, x: np.ndarray) -> float:
        return self.threshold

    def _message(self, x: np.ndarray, n: int, history: Any) -> str:
        w = x[-n:]
        return (f"Ĉov(log π, A) > {_fmt(self.threshold)} for {n} consecutive steps (last {_fmt(float(x[-1]))}, mean "
                f"{_fmt(float(w.mean()))}, min {_fmt(float(w.min()))}): a positive covariance drives entropy down; "
                f"the guard's limit is {self.steps} steps")


@dataclass(frozen=True)
class SignRatio(_Persistent):
    """FADE's sign ratio ``m_S/m_F`` outside ``[low, high]`` on each of the last ``steps`` steps
    (``sign_ratio`` or ``m_ratio``, else ``m_S / m_F``; ``m_F = 0 < m_S`` is ``inf``, both zero
    is no value and breaks the run).  FADE Eq. 7's drift ``(m_S − m_F)·H`` lowers the entropy when
    ``m_S > m_F`` (Sec. 4.1, Table 7).  The band is a user's choice: the audit reads 0.95-1.05
    as sign-balanced; the default, 0.8-1.25, tolerates a 25 % imbalance."""

    steps: int = 3
    low: float = 0.8
    high: float = 1.25
    name: ClassVar[str] = "sign_ratio"
    source: ClassVar[str] = "FADE Eq. 7 (drift (m_S − m_F)·H), Sec. 4.1, Table 7"

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _check_steps(f"{self.name}.steps", self.steps))
        object.__setattr__(self, "low", checks.number(f"{self.name}.low", self.low, low=0))
        object.__setattr__(self, "high", checks.number(f"{self.name}.high", self.high, low=self.low, low_open=True))

    @property
    def columns(self) -> tuple[str, ...]:
        return ("sign_ratio", "m_ratio", "m_S", "m_F")

    def _series(self, history: Any) -> np.ndarray | None:
        mS, mF = _column(history, "m_S"), _column(history, "m_F")
        if mS is not None and mF is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(mF != 0, mS / np.where(mF != 0, mF, 1.0), np.where(mS > 0, np.inf, np.nan))
        return _column(history, "sign_ratio", "m_ratio")

    def _flags(self, x: np.ndarray) -> np.ndarray:
        return (x < self.low) | (x > self.high)   # NaN: False

    def _threshold(self, x: np.ndarray) -> float:
        return self.high if x[-1] > self.high else self.low

    def _message(self, x: np.ndarray, n: int, history: Any) -> str:
        side = "successes reinforced more than failures are pushed down: entropy falls" if x[-1] > self.high \
            else "failures pushed down more than successes are reinforced: entropy rises"
        return (f"sign ratio m_S/m_F = {_fmt(float(x[-1]))} outside [{_fmt(self.low)}, {_fmt(self.high)}] for {n} "
                f"consecutive steps ({side}, FADE's drift (m_S − m_F)·H); the guard's limit is {self.steps} steps")


@dataclass(frozen=True)
class ZeroSignal(_Persistent):
    """The share of groups without signal (all ``G`` rewards equal) above ``threshold`` on each
    of the last ``steps`` steps (``frac_zero_signal``, ``frac_zero_std``, else ``frac_all_correct +
    frac_all_wrong``).  Such groups give no gradient (F-GRPO Lemma 3.1: active iff ``0 < X < G``).

    The threshold is a user's choice.  With ``group_size`` the message also gives
    ``p^G + (1−p)^G`` at the step's mean solve rate ``p`` (``1 −`` :func:`rlvr_theory.tail_miss.active`):
    the share if every prompt had that solve rate, a lower bound for a spread of solve rates
    (the function is convex), not a prediction of the share — the per-prompt solve rates it would
    take are not in a per-step log."""

    steps: int = 10
    threshold: float = 0.75
    group_size: int | None = None
    name: ClassVar[str] = "zero_signal"
    source: ClassVar[str] = "F-GRPO Lemma 3.1 (a group is active iff 0 < X < G); FADE Sec. 4.1-4.2"

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _check_steps(f"{self.name}.steps", self.steps))
        object.__setattr__(self, "threshold", checks.probability(f"{self.name}.threshold", self.threshold,
                                                                 high_open=True))
        object.__setattr__(self, "group_size", checks.integer(f"{self.name}.group_size", self.group_size, low=2,
                                                              allow_none=True))

    @property
    def columns(self) -> tuple[str, ...]:
        return ("frac_zero_signal", "frac_zero_std", "frac_all_correct", "frac_all_wrong", "solve_rate")

    def _series(self, history: Any) -> np.ndarray | None:
        z = _column(history, "frac_zero_signal", "frac_zero_std")
        if z is None:
            ac, aw = _column(history, "frac_all_correct"), _column(history, "frac_all_wrong")
            z = None if ac is None or aw is None else ac + aw
        return z

    def _flags(self, x: np.ndarray) -> np.ndarray:
        return x > self.threshold

    def _threshold(self, x: np.ndarray) -> float:
        return self.threshold

    def _message(self, x: np.ndarray, n: int, history: Any) -> str:
        text = (f"{100 * float(x[-1]):.3g} % of groups without signal (all rewards equal), above "
                f"{100 * self.threshold:.3g} % for {n} consecutive steps (mean {100 * float(x[-n:].mean()):.3g} %)")
        p = _column(history, "solve_rate")
        if self.group_size is not None and p is not None and np.isfinite(p[-1]):
            floor = 1.0 - float(active(float(np.clip(p[-1], 0, 1)), self.group_size))
            text += (f"; at the mean solve rate {_fmt(float(p[-1]))} and G = {self.group_size} equal solve rates would "
                     f"give {100 * floor:.3g} %")
        return text + f"; the guard's limit is {self.steps} steps"


@dataclass(frozen=True)
class ISRatio:
    """The importance-sampling ratio's maximum (``seq_is_ratio_max``, else the token level
    ``is_ratio_max``) above ``cap`` at the last step; TRL's default cap of the sequence-level
    correction is 3.0 (:data:`analysis.audit.trainer_log.IS_CAP`).  Our trainer samples from the
    policy it trains and logs no such ratio: the rule is for logs of other trainers."""

    cap: float = IS_CAP
    name: ClassVar[str] = "is_ratio"
    source: ClassVar[str] = "TRL vllm_importance_sampling_cap (default 3.0)"

    def __post_init__(self) -> None:
        object.__setattr__(self, "cap", checks.number(f"{self.name}.cap", self.cap, low=1))

    @property
    def columns(self) -> tuple[str, ...]:
        return ("seq_is_ratio_max", "is_ratio_max")

    def check(self, history: Any) -> Alert | None:
        for col in self.columns:
            x = _column(history, col)
            if x is not None and x.size and not np.isnan(x[-1]):
                if x[-1] > self.cap:
                    s = _steps(history, x.size)
                    return Alert(int(s[-1]), self.name, f"{col} = {_fmt(float(x[-1]))} above the cap "
                                 f"{_fmt(self.cap)}: the sampler and the trainer disagree", value=float(x[-1]),
                                 threshold=self.cap, source=self.source)
                return None
        return None


#: rule name → class
RULES: dict[str, type] = {cls.name: cls for cls in (EntropyDrop, CovPositive, SignRatio, ZeroSignal, ISRatio)}


def default_rules() -> tuple[Any, ...]:
    """Every rule at its defaults."""
    return tuple(cls() for cls in RULES.values())


#: preset name → the rules it stands for
PRESETS = {"default": default_rules}


# ------------------------------------------------------------------ the guard
@dataclass
class Guard:
    """Rules and what to do when one fires (``action``: ``log``, ``alert``, ``stop``).

    >>> g = Guard((EntropyDrop(fraction=0.5, steps=5),), action="alert")
    >>> [g.update(s, {"entropy": h}) for s, h in enumerate([1.0, 0.9, 0.4, 0.3], 1)][2][0].rule
    'entropy_drop'
    """

    rules: tuple[Any, ...] = field(default_factory=default_rules)
    action: str = "log"
    _rows: dict[str, list[float]] = field(default_factory=dict, init=False, repr=False)
    _n: int = field(default=0, init=False, repr=False)
    _firing: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        checks.choice("action", self.action, ACTIONS)
        self.rules = tuple(self.rules)
        for r in self.rules:
            if not callable(getattr(r, "check", None)):
                raise ValueError(f"rules: {r!r} has no check(history)")
        names = [r.name for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rules: each rule at most once, got {', '.join(names)}")

    @property
    def columns(self) -> tuple[str, ...]:
        """The metric columns the rules read (and ``step``)."""
        return tuple(dict.fromkeys(["step", *(c for r in self.rules for c in r.columns)]))

    def _add(self, step: int, metrics: Mapping[str, Any]) -> None:
        for c in self.columns:
            col = self._rows.setdefault(c, [math.nan] * self._n)
            col.append(float(step) if c == "step" else _float(metrics.get(c)))
        self._n += 1

    def history(self) -> dict[str, np.ndarray]:
        """The rows seen so far, the columns the rules read."""
        return {k: np.asarray(v, dtype=float) for k, v in self._rows.items()}

    def _fired(self) -> list[Alert]:
        hist = self.history()
        return [a for a in (r.check(hist) for r in self.rules) if a is not None]

    def update(self, step: int, metrics: Mapping[str, Any]) -> list[Alert]:
        """Add step ``step``'s metrics; the alerts of the rules that start firing at it."""
        self._add(step, metrics)
        fired = self._fired()
        new = [dataclasses.replace(a, action=self.action) for a in fired if a.rule not in self._firing]
        self._firing = {a.rule for a in fired}
        return new

    def replay(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Load the rows of a resumed run (no alerts: those rules that fire at the last row are
        taken as already reported)."""
        for row in rows:
            self._add(int(row["step"]), row)
        self._firing = {a.rule for a in self._fired()} if self._n else set()

    # ------------------------------------------------------------ configuration
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any], *, where: str = "guard", action: str | None = None) -> Guard:
        """``{"action": ..., "rules": {name: {param: value}}}``: the rules named, each with its
        parameters over its defaults (``{}``: all defaults); without ``rules``, every rule.
        ``action`` (when given) wins over the spec's.  An unknown key is refused naming it."""
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected a JSON object, got {type(spec).__name__}")
        unknown = [k for k in spec if k not in ("action", "rules")]
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r}; expected action, rules")
        rules_spec = spec.get("rules")
        if rules_spec is None:
            rules = default_rules()
        else:
            if not isinstance(rules_spec, Mapping):
                raise ValueError(f"{where}: rules must be an object of rule name -> parameters")
            rules = []
            for name, params in rules_spec.items():
                if name not in RULES:
                    raise ValueError(f"{where}: unknown rule {name!r}; expected one of {', '.join(RULES)}")
                params = {} if params is None else params
                if not isinstance(params, Mapping):
                    raise ValueError(f"{where}: rules.{name} must be an object of parameters, got {params!r}")
                known = [f.name for f in dataclasses.fields(RULES[name])]
                bad = [k for k in params if k not in known]
                if bad:
                    raise ValueError(f"{where}: unknown parameter rules.{name}.{bad[0]}; expected {', '.join(known)}")
                try:
                    rules.append(RULES[name](**params))
                except ValueError as err:
                    raise ValueError(f"{where}: rules.{err}") from None
        act = action if action is not None else spec.get("action", "log")
        try:
            return cls(tuple(rules), act)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, action: str | None = None) -> Guard:
        """A guard from a JSON file (:meth:`from_dict`); errors name the file and the key."""
        p = Path(path)
        try:
            spec = json.loads(p.read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(f"guard: cannot read {str(p)!r} ({err.strerror or err})") from None
        except ValueError as err:
            raise ValueError(f"guard: {str(p)!r} is not JSON ({err})") from None
        return cls.from_dict(spec, where=f"guard: {p}", action=action)

    @classmethod
    def from_spec(cls, spec: str, *, action: str | None = None) -> Guard:
        """A preset name (:data:`PRESETS`) or the path of a JSON rules file."""
        if spec in PRESETS:
            return cls(PRESETS[spec](), action if action is not None else "log")
        if not Path(spec).is_file():
            from rlvr_plumbing.registry import did_you_mean

            raise ValueError(f"guard: {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a rules file"
                             f"{did_you_mean(spec, PRESETS)}")
        return cls.from_file(spec, action=action)

    def to_dict(self) -> dict[str, Any]:
        """The spec :meth:`from_dict` reads back."""
        return {"action": self.action,
                "rules": {r.name: {f.name: getattr(r, f.name) for f in dataclasses.fields(r)} for r in self.rules}}


# ------------------------------------------------------------------ the alerts file
def append_alerts(run_dir: str | os.PathLike, alerts: Sequence[Alert]) -> Path | None:
    """Append ``alerts`` to ``run_dir/``:data:`ALERTS_FILE` as whole JSON lines, in one
    ``O_APPEND`` write (a reader never sees half a line), then ``fsync``; no alerts: nothing."""
    path = Path(run_dir) / ALERTS_FILE
    if not alerts:
        return None
    data = "".join(json.dumps(a.to_dict(), ensure_ascii=False, allow_nan=False) + "\n" for a in alerts)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def drop_alerts_after(run_dir: str | os.PathLike, step: int) -> None:
    """On resume: keep the records of steps ``<= step`` (the resumed run writes the others again)."""
    from rlvr_plumbing.io import atomic_write_text

    path = Path(run_dir) / ALERTS_FILE
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    keep = [ln for ln in lines if ln.strip() and _line_step(ln) <= step]
    if len(keep) != len(lines):
        atomic_write_text(path, "".join(keep))


def _line_step(line: str) -> float:
    try:
        return float(json.loads(line).get("step", math.inf))
    except (ValueError, AttributeError, TypeError):
        return math.inf
