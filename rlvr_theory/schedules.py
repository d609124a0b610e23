"""Schedules: advantages whose parameters follow training signals.

A schedule is a small stateful object.  Each training step the trainer calls
:meth:`Schedule.update` with that step's signals (batch mean reward, mean token
entropy, step index) and applies the returned :class:`~rlvr_theory.advantages.Advantage`
to the batch the signals came from, as FADE Alg. 2 does (lines 4-8: update the EMAs,
then compute the advantages of the same batch).  ``state_dict()`` /
``load_state_dict()`` save and restore the state (plain floats, JSON-serialisable).

* :class:`FADESchedule` — α from an EMA of the solve rate, δ from an EMA of the entropy
  (FADE (000) Eq. 11, Alg. 2);
* :class:`FADELogSchedule` — the deterministic logarithmic fit of α(t), δ(t)
  (FADE (000) App. 10, Eq. 17-18);
* :class:`AGRAESchedule` — A-GRAE with ω_s = batch mean reward (A-GRAE (003) Eq. 11-13).
"""

from __future__ import annotations

import math
from typing import Any

from . import advantages
from ._checks import finite_number
from .advantages import Advantage

__all__ = ["Schedule", "FADESchedule", "FADELogSchedule", "AGRAESchedule"]

_finite = finite_number


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


class Schedule:
    """Base class: ``update(...) -> Advantage``, ``advantage``, ``state_dict``, ``load_state_dict``."""

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


class FADESchedule(Schedule):
    """FADE scheduler (FADE (000) Eq. 11, Alg. 2).

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
    """

    _state_keys = ("p_hat", "H_hat", "alpha", "delta", "step")

    def __init__(self, H0: float, H_target: float | None = None, *, alpha_max: float = 3.0,
                 beta: float = 0.02, delta_min: float = 0.3, p0: float = 0.5,
                 ema: str = "as_written", reward_values: tuple[float, float] = (0.0, 1.0)):
        self.H0 = _finite("H0", H0, low=0)
        self.H_target = _finite("H_target", H_target if H_target is not None else H0 / 2, low=0)
        self.alpha_max = _finite("alpha_max", alpha_max, low=1)
        self.beta = _finite("beta", beta, low=0, high=1)
        self.delta_min = _finite("delta_min", delta_min, low=0, high=1, low_open=True)
        if ema not in ("as_written", "conventional"):
            raise ValueError(f"ema must be 'as_written' or 'conventional', got {ema!r}")
        self.ema = ema
        self.reward_values = reward_values
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
        r = _finite("reward_mean", reward_mean, low=rw, high=rc)
        h = _finite("entropy", entropy, low=0)
        self.p_hat = self._mix(self.p_hat, (r - rw) / (rc - rw))
        self.H_hat = self._mix(self.H_hat, h)
        self.alpha, self.delta = self._alpha(), self._delta()
        self.step = int(step) if step is not None else self.step + 1
        return self.advantage


class FADELogSchedule(Schedule):
    """Deterministic log schedule fitted to FADE's 7B run (FADE (000) App. 10, Eq. 17-18)::

        δ(t) = δ0 − (δ0 − δ_min)·log(1 + t/τ_δ)/log(1 + T/τ_δ),  δ0 = 1.0, δ_min = 0.802, τ_δ = 12264
        α(t) = α0 − (α0 − α_min)·log(1 + t/τ_α)/log(1 + T/τ_α),  α0 = 2.0, α_min = 1.917, τ_α = 8500

    ``T`` is the total number of training steps.
    """

    _state_keys = ("step",)

    def __init__(self, T: int, *, delta0: float = 1.0, delta_min: float = 0.802, tau_delta: float = 12264.0,
                 alpha0: float = 2.0, alpha_min: float = 1.917, tau_alpha: float = 8500.0,
                 reward_values: tuple[float, float] = (0.0, 1.0)):
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise ValueError(f"T must be an integer >= 1 (total training steps), got {T!r}")
        self.T = T
        self.delta0 = _finite("delta0", delta0, low=0, low_open=True)
        self.delta_min = _finite("delta_min", delta_min, low=0, low_open=True)
        self.tau_delta = _finite("tau_delta", tau_delta, low=0, low_open=True)
        self.alpha0 = _finite("alpha0", alpha0, low=0)
        self.alpha_min = _finite("alpha_min", alpha_min, low=0)
        self.tau_alpha = _finite("tau_alpha", tau_alpha, low=0, low_open=True)
        self.reward_values = reward_values
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
        s = self.step + 1 if step is None else step
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"step must be an integer >= 0, got {s!r}")
        self.step = s
        return self.advantage


class AGRAESchedule(Schedule):
    """A-GRAE with ω_s = the step's batch mean reward (A-GRAE (003) Eq. 11-13).

    ``update(reward_mean=...)`` stores ω_s and returns ``agrae(omega=ω_s, alpha)``, so the
    advantage of each group in the step uses the whole batch's ω_s even when groups are
    processed separately.
    """

    _state_keys = ("omega", "step")

    def __init__(self, alpha: float = 1.0, *, omega0: float = 0.0,
                 reward_values: tuple[float, float] = (0.0, 1.0)):
        self.alpha = _finite("alpha", alpha, low=0, low_open=True)
        self.omega = _finite("omega0", omega0, low=0, high=1)
        self.reward_values = reward_values
        self.step = 0

    @property
    def advantage(self) -> Advantage:
        return advantages.get("agrae", omega=self.omega, alpha=self.alpha, reward_values=self.reward_values)

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:
        rw, rc = self.reward_values
        r = _finite("reward_mean", reward_mean, low=rw, high=rc)
        self.omega = (r - rw) / (rc - rw)
        self.step = int(step) if step is not None else self.step + 1
        return self.advantage
