"""Schedules: advantages whose parameters follow training signals.

A schedule is a small stateful object.  Each training step the trainer calls
:meth:`Schedule.update` with that step's signals (batch mean reward, mean token
entropy, step index) and applies the returned :class:`~rlvr_theory.advantages.Advantage`
to the batch the signals came from, as FADE Alg. 2 does (lines 4-8: update the EMAs,
then compute the advantages of the same batch).  ``state_dict()`` /
``load_state_dict()`` save and restore the state (plain floats, JSON-serialisable).

Schedules are chosen by name through :func:`get` (``"fade"``, ``"fade-log"``, ``"agrae"``;
:func:`names`), the one place that builds a schedule from a name and ``--param`` values:

* ``"fade"``, :class:`FADESchedule` — α from an EMA of the solve rate, δ from an EMA of the
  entropy (FADE Eq. 11, Alg. 2);
* ``"fade-log"``, :class:`FADELogSchedule` — the deterministic logarithmic fit of α(t), δ(t)
  (FADE App. 10, Eq. 17-18);
* ``"agrae"``, :class:`AGRAESchedule` — A-GRAE with ω_s = batch mean reward (A-GRAE
  Eq. 11-13).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from . import advantages, checks
from .advantages import Advantage
from .registry import Registry

__all__ = ["Schedule", "FADESchedule", "FADELogSchedule", "AGRAESchedule", "names", "get", "register"]

_REGISTRY: Registry[type[Schedule]] = Registry("schedule")
_finite = checks.number


def register(cls: type[Schedule]) -> type[Schedule]:
    """Class decorator adding a :class:`Schedule` subclass under ``cls.name`` (collisions raise)."""
    return _REGISTRY.register(cls)


def names() -> list[str]:
    """Registered schedule names, in registration order: ``fade``, ``fade-log``, ``agrae``."""
    return _REGISTRY.names()


def _reward_mean(value: Any, reward_values: tuple[float, float]) -> float:
    rw, rc = reward_values
    return _finite("reward_mean", value, low=rw, high=rc)


def _step(value: Any, previous: int) -> int:
    return previous + 1 if value is None else checks.integer("step", value, low=0)


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


class Schedule:
    """Base class: ``update(...) -> Advantage``, ``advantage``, ``state_dict``, ``load_state_dict``."""

    #: registry name (:func:`get`)
    name: str = ""
    _state_keys: tuple[str, ...] = ()

    @property
    def advantage(self) -> Advantage:  # pragma: no cover - abstract
        """The advantage for the current state."""
        raise NotImplementedError

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:  # pragma: no cover - abstract
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The mutable state (floats/ints), enough to resume the schedule exactly."""
        return {k: getattr(self, k) for k in self._state_keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict`."""
        missing = set(self._state_keys) - set(state)
        if missing:
            raise ValueError(f"state is missing keys: {', '.join(sorted(missing))}")
        for k in self._state_keys:
            setattr(self, k, state[k])

    def __repr__(self) -> str:
        s = ", ".join(f"{k}={v!r}" for k, v in self.state_dict().items())
        return f"{type(self).__name__}({s})"


@register
class FADESchedule(Schedule):
    """FADE scheduler (FADE Eq. 11, Alg. 2).

    State: EMAs ``p_hat`` (initialised to 0.5) and ``H_hat`` (initialised to the initial
    entropy ``H0``).  At each step, with batch mean reward ``r̄`` and mean token entropy
    ``H_t``::

        p̂ ← β·p̂ + (1−β)·r̄,    Ĥ ← β·Ĥ + (1−β)·H_t           (Alg. 2 line 5, as written)
        α = clip(3(1−p̂)/(2p̂), 1, α_max),   δ = clip(1 + Ĥ − H*, 0.3, 1)

    With ``β = 0.02`` "as written" keeps only 2% of the old average.  The conventional
    EMA ``p̂ ← (1−β)·p̂ + β·r̄`` is available with ``ema="conventional"``.

    Parameters
    ----------
    H0: initial policy entropy (Alg. 2 line 1).
    H_target: target entropy H*; default ``H0/2`` ("half the initial entropy", Sec. 5).
    alpha_max: 3 in the paper.  beta: EMA coefficient, 0.02.  delta_min: lower clip of δ, 0.3.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> s = schedules.FADESchedule(H0=2.0)          # H* = H0/2 = 1
    >>> adv = s.update(reward_mean=0.5, entropy=0.4)  # p̂ = 0.5, Ĥ = 0.02·2 + 0.98·0.4
    >>> adv.name, round(adv.params["alpha"], 6), round(adv.params["delta"], 6)
    ('fade', 1.5, 0.432)
    >>> s.state_dict()["step"]
    1
    """

    name = "fade"
    _state_keys = ("p_hat", "H_hat", "alpha", "delta", "step")

    def __init__(self, H0: float, H_target: float | None = None, *, alpha_max: float = 3.0,
                 beta: float = 0.02, delta_min: float = 0.3, p0: float = 0.5,
                 ema: str = "as_written", reward_values: tuple[float, float] = (0.0, 1.0)):
        self.H0 = _finite("H0", H0, low=0)
        self.H_target = _finite("H_target", H_target if H_target is not None else H0 / 2, low=0)
        self.alpha_max = _finite("alpha_max", alpha_max, low=1)
        self.beta = _finite("beta", beta, low=0, high=1)
        self.delta_min = _finite("delta_min", delta_min, low=0, high=1, low_open=True)
        self.ema = checks.choice("ema", ema, ("as_written", "conventional"))
        self.reward_values = advantages.check_reward_values(reward_values)
        self.p_hat = _finite("p0", p0, low=0, high=1)
        self.H_hat = self.H0
        self.step = 0
        self.alpha, self.delta = self._alpha(), self._delta()

    def _mix(self, old: float, new: float) -> float:
        b = self.beta
        return b * old + (1 - b) * new if self.ema == "as_written" else (1 - b) * old + b * new

    def _alpha(self) -> float:
        if self.p_hat <= 0:
            return self.alpha_max
        return _clip(3 * (1 - self.p_hat) / (2 * self.p_hat), 1.0, self.alpha_max)

    def _delta(self) -> float:
        return _clip(1 + self.H_hat - self.H_target, self.delta_min, 1.0)

    @property
    def advantage(self) -> Advantage:
        return advantages.get("fade", alpha=self.alpha, delta=self.delta, reward_values=self.reward_values)

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:
        """Feed one step's batch success rate (mean reward for {0,1}) and mean token entropy."""
        rw, rc = self.reward_values
        r = _reward_mean(reward_mean, self.reward_values)
        h = _finite("entropy", entropy, low=0)
        step = _step(step, self.step)
        self.p_hat = self._mix(self.p_hat, (r - rw) / (rc - rw))
        self.H_hat = self._mix(self.H_hat, h)
        self.alpha, self.delta = self._alpha(), self._delta()
        self.step = step
        return self.advantage


@register
class FADELogSchedule(Schedule):
    """Deterministic log schedule fitted to FADE's 7B run (FADE App. 10, Eq. 17-18)::

        δ(t) = δ0 − (δ0 − δ_min)·log(1 + t/τ_δ)/log(1 + T/τ_δ),  δ0 = 1.0, δ_min = 0.802, τ_δ = 12264
        α(t) = α0 − (α0 − α_min)·log(1 + t/τ_α)/log(1 + T/τ_α),  α0 = 2.0, α_min = 1.917, τ_α = 8500

    ``T`` is the total number of training steps.
    """

    name = "fade-log"
    _state_keys = ("step",)

    def __init__(self, T: int, *, delta0: float = 1.0, delta_min: float = 0.802, tau_delta: float = 12264.0,
                 alpha0: float = 2.0, alpha_min: float = 1.917, tau_alpha: float = 8500.0,
                 reward_values: tuple[float, float] = (0.0, 1.0)):
        self.T = checks.integer("T", T, low=1)
        self.delta0 = _finite("delta0", delta0, low=0, low_open=True)
        self.delta_min = _finite("delta_min", delta_min, low=0, low_open=True)
        self.tau_delta = _finite("tau_delta", tau_delta, low=0, low_open=True)
        self.alpha0 = _finite("alpha0", alpha0, low=0)
        self.alpha_min = _finite("alpha_min", alpha_min, low=0)
        self.tau_alpha = _finite("tau_alpha", tau_alpha, low=0, low_open=True)
        self.reward_values = advantages.check_reward_values(reward_values)
        self.step = 0

    @staticmethod
    def _curve(v0: float, vmin: float, tau: float, t: float, T: float) -> float:
        return v0 - (v0 - vmin) * math.log1p(t / tau) / math.log1p(T / tau)

    @property
    def alpha(self) -> float:
        """α(t) of Eq. 18 at the current step."""
        return self._curve(self.alpha0, self.alpha_min, self.tau_alpha, self.step, self.T)

    @property
    def delta(self) -> float:
        """δ(t) of Eq. 17 at the current step."""
        return self._curve(self.delta0, self.delta_min, self.tau_delta, self.step, self.T)

    @property
    def advantage(self) -> Advantage:
        return advantages.get("fade", alpha=self.alpha, delta=self.delta, reward_values=self.reward_values)

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:
        """Advance to ``step`` (default: the next one); the signals are ignored."""
        self.step = _step(step, self.step)
        return self.advantage


@register
class AGRAESchedule(Schedule):
    """A-GRAE with ω_s = the step's batch mean reward (A-GRAE Eq. 11-13).

    ``update(reward_mean=...)`` stores ω_s and returns ``agrae(omega=ω_s, alpha)``, so the
    advantage of each group in the step uses the whole batch's ω_s even when groups are
    processed separately.
    """

    name = "agrae"
    _state_keys = ("omega", "step")

    def __init__(self, alpha: float = 1.0, *, omega0: float = 0.0,
                 reward_values: tuple[float, float] = (0.0, 1.0)):
        self.alpha = _finite("alpha", alpha, low=0, low_open=True)
        self.omega = _finite("omega0", omega0, low=0, high=1)
        self.reward_values = advantages.check_reward_values(reward_values)
        self.step = 0

    @property
    def advantage(self) -> Advantage:
        return advantages.get("agrae", omega=self.omega, alpha=self.alpha, reward_values=self.reward_values)

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:
        rw, rc = self.reward_values
        r = _reward_mean(reward_mean, self.reward_values)
        self.step = _step(step, self.step)
        self.omega = (r - rw) / (rc - rw)
        return self.advantage


def _parameters(cls: type[Schedule]) -> list[str]:
    """The keyword parameters of a schedule class (without ``reward_values``)."""
    sig = inspect.signature(cls.__init__)
    return [p for p in sig.parameters if p not in ("self", "reward_values")]


def get(name: str, *, steps: int | None = None, H0: float | None = None,
        reward_values: tuple[float, float] = (0.0, 1.0), **params: Any) -> Schedule:
    """The schedule ``name`` with ``params`` (the ``--param`` values of a command line).

    ``steps`` and ``H0`` are what a trainer knows: ``"fade"`` takes ``H0`` (the initial
    entropy, FADE Alg. 2 line 1; 1.0 when ``None``); ``"fade-log"`` takes ``T = steps``
    (required for it); the others ignore both.  ``H0`` is also the name of FADE's parameter,
    so a caller holding both a typed ``H0`` and a measured one passes
    ``H0=params.pop("H0", measured)``.  An unknown name or parameter is refused with a
    message listing the allowed ones; a bad value with the message of
    :mod:`rlvr_theory.checks`.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> schedules.names()
    ['fade', 'fade-log', 'agrae']
    >>> s = schedules.get("fade-log", steps=1000, alpha0=2.5)
    >>> s.update(step=1000)
    advantages.get('fade', alpha=1.917, delta=0.802)
    >>> schedules.get("fade", gamma=1.0)
    Traceback (most recent call last):
    ...
    ValueError: param: unknown parameter(s) gamma for schedule 'fade'; allowed: H0, H_target, alpha_max, beta, delta_min, p0, ema
    """
    cls = _REGISTRY.get(name)
    allowed = [a for a in _parameters(cls) if not (name == "fade-log" and a == "T")]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"param: unknown parameter(s) {', '.join(unknown)} for schedule {name!r}; "
                         f"allowed: {', '.join(allowed)}")
    kw = dict(params)
    if name == "fade":
        kw["H0"] = 1.0 if H0 is None else H0
    if name == "fade-log":
        if steps is None:
            raise ValueError("steps is required for schedule 'fade-log' (its T, the total number of training steps)")
        kw["T"] = steps
    return cls(reward_values=reward_values, **kw)
