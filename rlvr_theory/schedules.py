"""Schedules: advantages whose parameters follow training signals.

A schedule is a small stateful object.  Each training step the trainer calls
:meth:`Schedule.update` with that step's signals (batch mean reward, mean token
entropy, step index) and applies the returned :class:`~rlvr_theory.advantages.Advantage`
to the batch the signals came from, as FADE Alg. 2 does (lines 4-8: update the EMAs,
then compute the advantages of the same batch).  ``state_dict()`` /
``load_state_dict()`` save and restore the state (plain floats, JSON-serialisable).

Schedules are chosen by name through :func:`get` (``"fade"``, ``"fade-log"``, ``"agrae"``,
``"fade-entropy"``, ``"fade-alpha-only"``, ``"fade-delta-only"``; :func:`names`), the one place
that builds a schedule from a name and ``--param`` values:

* ``"fade"``, :class:`FADESchedule` — α from an EMA of the solve rate, δ from an EMA of the
  entropy (FADE Eq. 11, Alg. 2);
* ``"fade-log"``, :class:`FADELogSchedule` — the deterministic logarithmic fit of α(t), δ(t)
  (FADE App. 10, Eq. 17-18);
* ``"agrae"``, :class:`AGRAESchedule` — A-GRAE with ω_s = batch mean reward (A-GRAE
  Eq. 11-13);
* the ablations of FADE Sec. 5 / App. 10 Fig. 9 (:class:`FADESignalsSchedule`):
  ``"fade-entropy"`` (:class:`FADEEntropySchedule`, the entropy EMA drives both α and δ),
  ``"fade-alpha-only"`` (:class:`FADEAlphaOnlySchedule`, δ ≡ 1: bit for bit ``"fade"`` with
  ``H_target=0``) and ``"fade-delta-only"`` (:class:`FADEDeltaOnlySchedule`, α ≡ 1: bit for bit
  ``"fade"`` with ``alpha_max=1``).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from rlvr_plumbing import checks
from rlvr_plumbing.registry import Registry

from . import advantages
from .advantages import Advantage

__all__ = ["Schedule", "FADESchedule", "FADELogSchedule", "AGRAESchedule", "FADESignalsSchedule",
           "FADEEntropySchedule", "FADEAlphaOnlySchedule", "FADEDeltaOnlySchedule", "names", "get", "register"]

_REGISTRY: Registry[type[Schedule]] = Registry("schedule")
_finite = checks.number


def register(cls: type[Schedule]) -> type[Schedule]:
    """Class decorator adding a :class:`Schedule` subclass under ``cls.name`` (collisions raise)."""
    return _REGISTRY.register(cls)


def names() -> list[str]:
    """Registered schedule names, in registration order: ``fade``, ``fade-log``, ``agrae``,
    ``fade-entropy``, ``fade-alpha-only``, ``fade-delta-only``."""
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


class FADESignalsSchedule(FADESchedule):
    """FADE with each controller fed by a chosen signal: the ablations of FADE Sec. 5 ("We ablate
    each component independently ... driving both α and δ from entropy alone") and App. 10 Fig. 9.

    Not registered itself: its three presets are (:func:`get`).  Class attributes pick the signals:

    * ``alpha_from``: ``"solve_rate"`` (FADE Eq. 11: α = clip(3(1−p̂)/(2p̂), 1, α_max)),
      ``"entropy"`` or ``"none"`` (α ≡ 1, the sign axis only: AsymGRPO with a scheduled δ);
    * ``delta_from``: ``"entropy"`` (FADE Eq. 11: δ = clip(1 + Ĥ − H*, δ_min, 1)) or ``"none"``
      (δ ≡ 1, sign-balanced: Power α with a scheduled α).

    **α from the entropy** (``alpha_from="entropy"``).  The paper gives no formula for it; ours
    is the linear map from the entropy EMA to α that spans FADE's own range::

        α = 1 + (α_max − 1)·clip((Ĥ − H*)/(H0 − H*), 0, 1)        (H0 > H*; α = 1 when H0 <= H*)

    α = α_max while Ĥ is at the initial entropy H0 (where FADE's α starts when the solve rate
    is low, p̂ <= 1/3), falls linearly as the entropy drops, and reaches 1 exactly when Ĥ reaches
    H*, which is where δ starts to fall below 1: hard focus first, then the relaxation of α,
    then failure-biased exploitation — the order FADE's two signals produce in Fig. 8, here
    from one signal.

    ``H0`` may be left ``None`` (what :func:`get` gives a trainer that does not pass it): the
    first entropy fed to :meth:`update` is then taken as H0 (FADE Alg. 2 line 1,
    Ĥ ← H0(π_θ), the initial policy's entropy), and ``H_target`` (when also ``None``) as H0/2.
    Before that first update α = α_max (``"entropy"``) and δ = 1.  ``H0`` and ``H_target`` are
    part of :meth:`state_dict`.  The other parameters and the EMA are those of
    :class:`FADESchedule`; a parameter that its signals make irrelevant is refused by
    :func:`get` (e.g. ``alpha_max`` for ``"fade-delta-only"``).
    """

    name = ""
    alpha_from: str = "solve_rate"
    delta_from: str = "entropy"
    #: parameters with no effect under these signals (refused by :func:`get`)
    unused: tuple[str, ...] = ()
    _state_keys = FADESchedule._state_keys + ("H0", "H_target")

    def __init__(self, H0: float | None = None, H_target: float | None = None, *, alpha_max: float = 3.0,
                 beta: float = 0.02, delta_min: float = 0.3, p0: float = 0.5, ema: str = "as_written",
                 reward_values: tuple[float, float] = (0.0, 1.0)):
        checks.choice("alpha_from", self.alpha_from, ("solve_rate", "entropy", "none"))
        checks.choice("delta_from", self.delta_from, ("entropy", "none"))
        super().__init__(1.0 if H0 is None else H0, H_target, alpha_max=alpha_max, beta=beta,
                         delta_min=delta_min, p0=p0, ema=ema, reward_values=reward_values)
        if H0 is None:                      # taken from the first entropy seen (Alg. 2 line 1)
            self.H0 = self.H_hat = None
            self.H_target = None if H_target is None else self.H_target
            self.alpha, self.delta = self._alpha(), self._delta()

    def _alpha(self) -> float:
        if self.alpha_from == "solve_rate":
            return super()._alpha()
        if self.alpha_from == "none" or self.H_hat is None:
            return 1.0 if self.alpha_from == "none" else self.alpha_max
        span = self.H0 - self.H_target
        if span <= 0:
            return 1.0
        return 1.0 + (self.alpha_max - 1.0) * _clip((self.H_hat - self.H_target) / span, 0.0, 1.0)

    def _delta(self) -> float:
        if self.delta_from == "none" or self.H_hat is None:
            return 1.0
        return super()._delta()

    def update(self, *, reward_mean: float | None = None, entropy: float | None = None,
               step: int | None = None) -> Advantage:
        """As :meth:`FADESchedule.update`; the first call sets ``H0`` (and ``H_target``) when unset."""
        if self.H0 is None:
            h = _finite("entropy", entropy, low=0)
            _reward_mean(reward_mean, self.reward_values)
            _step(step, self.step)                     # refuse bad input before any state changes
            self.H0 = self.H_hat = h
            if self.H_target is None:
                self.H_target = h / 2
        return super().update(reward_mean=reward_mean, entropy=entropy, step=step)


@register
class FADEEntropySchedule(FADESignalsSchedule):
    """FADE with both α and δ driven by the entropy EMA (FADE Sec. 5 simplification (2), Fig. 9
    "scheduling both on entropy"); α from Ĥ as in :class:`FADESignalsSchedule`.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> s = schedules.FADEEntropySchedule(H0=2.0)   # H* = 1; α = 1 + 2·(Ĥ − 1)/(2 − 1)
    >>> adv = s.update(reward_mean=0.9, entropy=1.5)  # Ĥ = 0.02·2 + 0.98·1.5 = 1.51
    >>> round(adv.params["alpha"], 6), adv.params["delta"]
    (2.02, 1.0)
    """

    name = "fade-entropy"
    alpha_from = "entropy"
    unused = ("p0",)


@register
class FADEAlphaOnlySchedule(FADESignalsSchedule):
    """FADE without δ (δ ≡ 1; FADE Sec. 5 "removing δ", Fig. 9 "adaptive α only"): α from the
    solve-rate EMA as in Eq. 11.  Bit for bit :class:`FADESchedule` with ``H_target=0``.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> s = schedules.FADEAlphaOnlySchedule()
    >>> adv = s.update(reward_mean=0.4, entropy=0.1)  # p̂ = 0.02·0.5 + 0.98·0.4 = 0.402
    >>> round(adv.params["alpha"], 6), adv.params["delta"]  # α = 3·0.598/(2·0.402)
    (2.231343, 1.0)
    """

    name = "fade-alpha-only"
    delta_from = "none"
    unused = ("H_target", "delta_min")


@register
class FADEDeltaOnlySchedule(FADESignalsSchedule):
    """FADE without α (α ≡ 1; FADE Sec. 5 "removing α", Fig. 9 "ablation α"): AsymGRPO with δ
    from the entropy EMA as in Eq. 11.  Bit for bit :class:`FADESchedule` with ``alpha_max=1``.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> s = schedules.FADEDeltaOnlySchedule(H0=2.0)  # H* = 1
    >>> adv = s.update(reward_mean=0.25, entropy=0.5)  # Ĥ = 0.02·2 + 0.98·0.5 = 0.53
    >>> adv.params["alpha"], round(adv.params["delta"], 6)
    (1.0, 0.53)
    """

    name = "fade-delta-only"
    alpha_from = "none"
    unused = ("alpha_max", "p0")


def _parameters(cls: type[Schedule]) -> list[str]:
    """The keyword parameters of a schedule class (without ``reward_values``)."""
    sig = inspect.signature(cls.__init__)
    unused = getattr(cls, "unused", ())
    return [p for p in sig.parameters if p not in ("self", "reward_values", *unused)]


def get(name: str, *, steps: int | None = None, H0: float | None = None,
        reward_values: tuple[float, float] = (0.0, 1.0), **params: Any) -> Schedule:
    """The schedule ``name`` with ``params`` (the ``--param`` values of a command line).

    ``steps`` and ``H0`` are what a trainer knows: ``"fade"`` takes ``H0`` (the initial
    entropy, FADE Alg. 2 line 1; 1.0 when ``None``); the ablations ``"fade-entropy"``,
    ``"fade-alpha-only"``, ``"fade-delta-only"`` take it too (when ``None``: the first entropy
    their ``update`` sees); ``"fade-log"`` takes ``T = steps`` (required for it); the others
    ignore both.  ``H0`` is also the name of FADE's parameter,
    so a caller holding both a typed ``H0`` and a measured one passes
    ``H0=params.pop("H0", measured)``.  An unknown name or parameter is refused with a
    message listing the allowed ones; a bad value with the message of
    :mod:`rlvr_plumbing.checks`.

    Examples
    --------
    >>> from rlvr_theory import schedules
    >>> schedules.names()
    ['fade', 'fade-log', 'agrae', 'fade-entropy', 'fade-alpha-only', 'fade-delta-only']
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
    elif issubclass(cls, FADESignalsSchedule):
        kw["H0"] = H0
    if name == "fade-log":
        if steps is None:
            raise ValueError("steps is required for schedule 'fade-log' (its T, the total number of training steps)")
        kw["T"] = steps
    return cls(reward_values=reward_values, **kw)
