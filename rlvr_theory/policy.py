"""The advantage a run uses: one registry family, or a schedule stepped once per batch.

:class:`Policy` is the one object behind every place that runs an advantage over training
steps: the GRPO trainer (:mod:`simulations.grpo.trainer`), the linear-head simulator, the
audit's what-ifs and the TRL and verl adapters.  It checks the choice when it is built
(before any generation), steps a schedule with each batch's signals
(:meth:`Policy.advance`), turns one batch of rewards into advantages and the papers'
per-step diagnostics (:meth:`Policy.step`), and saves and restores its state.

The initial entropy ``H0`` of FADE's schedule is decided here once: an ``H0`` typed in the
schedule's parameters wins over the ``H0`` the caller measured (FADE Alg. 2 line 1: the initial
policy's entropy); with neither, the schedule's own default applies
(:func:`rlvr_theory.schedules.get`: ``"fade"`` starts from 1, the ``"fade-entropy"`` ablations
take the first entropy they are fed).  A trainer that measures the entropy only at its first
step builds its Policy there (:mod:`simulations.grpo.trainer`).

Examples
--------
>>> import numpy as np
>>> from rlvr_theory.policy import Policy
>>> pol = Policy(advantage="asym_grpo", advantage_params={"delta": 0.5})
>>> A, metrics = pol.step(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
>>> A                        # failures of the first group divided by δ; the second has no signal
array([ 0.75, -0.5 , -0.5 , -0.5 ,  0.  ,  0.  ,  0.  ,  0.  ])
>>> metrics["m_S"], metrics["m_F"], metrics["frac_all_correct"]
(0.09375, 0.1875, 0.5)

A schedule advances once per batch; a typed ``H0`` wins over the measured one:

>>> fade = Policy(schedule="fade", schedule_params={"H0": 2.0}, H0=5.0)
>>> fade.H0, fade.advance(reward_mean=0.25, entropy=2.0).name
(2.0, 'fade')
>>> sorted(fade.scheduled_params())
['alpha', 'delta']
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlvr_plumbing import checks

from . import advantages as _advantages
from . import groups, schedules
from .advantages import Advantage

__all__ = ["Policy", "SCHEDULED_PARAMS"]

#: the parameters a schedule moves, reported per step (:meth:`Policy.scheduled_params`)
SCHEDULED_PARAMS = ("alpha", "delta", "omega")


class Policy:
    """The advantage a run uses, and its diagnostics per batch.

    Parameters
    ----------
    advantage : str, optional
        A registry family (:func:`rlvr_theory.advantages.names`); ``advantage_params`` its
        parameters.  Exactly one of ``advantage`` and ``schedule`` is given.
    schedule : str, optional
        A schedule (:func:`rlvr_theory.schedules.names`) with ``schedule_params``; it advances
        once per batch (:meth:`advance`, or :meth:`step`) from the batch's mean reward and
        entropy (else the last entropy seen, else ``H0``, else 1).
    success_threshold : float, optional
        Reward at or above which a rollout succeeds (real-valued rewards).
    singleton : {"zero", "raw"}
        Advantage of a group of one rollout (:func:`rlvr_theory.groups.advantages`).
    steps : int, optional
        Total training steps (the schedules whose curve spans the run need it).
    H0 : float >= 0, optional
        Initial entropy measured by the caller; ``schedule_params["H0"]`` (typed by the user)
        wins over it.
    reward_values : (float, float), optional
        ``(R_w, R_c)``, the failure and success rewards, passed to the family or schedule
        (default: the registry's, ``(0, 1)``).
    """

    def __init__(self, advantage: str | None = None, advantage_params: dict | None = None,
                 schedule: str | None = None, schedule_params: dict | None = None,
                 success_threshold: float | None = None, singleton: str = "zero",
                 steps: int | None = None, H0: float | None = None,
                 reward_values: tuple[float, float] | None = None):
        if (advantage is None) == (schedule is None):
            raise ValueError("give exactly one of advantage (a registry family) and schedule; got "
                             f"advantage={advantage!r}, schedule={schedule!r}")
        self.success_threshold = (None if success_threshold is None
                                  else checks.number("success_threshold", success_threshold))
        self.singleton = checks.choice("singleton", singleton, ("zero", "raw"))
        rv = {} if reward_values is None else {"reward_values": tuple(reward_values)}
        self.H0 = None if H0 is None else checks.number("H0", H0, low=0)
        self.entropy: float | None = None
        self.schedule: schedules.Schedule | None = None
        if schedule is not None:
            if advantage_params:
                raise ValueError("advantage_params go with advantage=; a schedule takes schedule_params")
            params = dict(schedule_params or {})
            if "H0" in params:  # typed by the user: wins over the measured one
                typed = params.pop("H0")
                self.H0 = None if typed is None else checks.number("H0", typed, low=0)
            self.schedule = schedules.get(schedule, steps=steps, H0=self.H0, **rv, **params)
            self.advantage: Advantage = self.schedule.advantage
        else:
            if schedule_params:
                raise ValueError("schedule_params go with schedule=; a family takes advantage_params")
            self.advantage = _advantages.get(advantage, **rv, **dict(advantage_params or {}))  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        """The schedule's or the family's name."""
        return self.schedule.name if self.schedule is not None else self.advantage.name

    @property
    def needs_threshold(self) -> bool:
        """True if real-valued rewards need ``success_threshold`` (a family defined on success/failure)."""
        return not self.advantage.graded or self.schedule is not None

    def check_group_size(self, G: int, *, what: str = "group size") -> None:
        """Refuse a group size below the family's minimum (``what`` names the trainer's setting)."""
        G = checks.integer(what, G, low=1)
        least = self.advantage.min_group_size()
        if G < least:
            raise ValueError(f"{what} must be >= {least} for {self.advantage!r}, got {G}")

    # ------------------------------------------------------------------ step
    def advance(self, *, reward_mean: float, entropy: float | None = None, step: int | None = None) -> Advantage:
        """Step the schedule with one batch's mean reward and entropy (``None``: the last one
        seen, else ``H0``, else 1) and return the advantage for that batch; a fixed family
        returns itself.  ``step``: the schedule's step index (default: the next one)."""
        if self.schedule is None:
            return self.advantage
        if entropy is not None:
            self.entropy = checks.number("entropy", entropy, low=0)
        h = self.entropy if self.entropy is not None else (self.H0 if self.H0 is not None else 1.0)
        self.advantage = self.schedule.update(reward_mean=reward_mean, entropy=h, step=step)
        return self.advantage

    def scheduled_params(self) -> dict[str, float]:
        """``alpha``, ``delta``, ``omega`` of the advantage in force, where a schedule moves them
        and they are finite (empty for a fixed family)."""
        if self.schedule is None:
            return {}
        out = {}
        for key in SCHEDULED_PARAMS:
            v = self.advantage.params.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[key] = float(v)
        return out

    def _success(self, r: np.ndarray) -> np.ndarray | None:
        if self.success_threshold is None and not groups.is_binary(self.advantage, r):
            return None  # real rewards, no threshold: no success/failure split
        return groups.success(self.advantage, r, success_threshold=self.success_threshold)

    def step(self, rewards: Any, index: Any = None, *, group_size: int | None = None, valid: Any = None,
             lengths: Any = None, entropy: float | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Advantages of one batch and its diagnostics (a schedule first :meth:`advance` s with
        the batch's success rate).

        Returns ``(A, metrics)``: ``A`` float64 (n,) from :func:`rlvr_theory.groups.advantages`
        (0 on rows left out: ``valid`` False or NaN reward); ``metrics`` the keys of
        :func:`rlvr_theory.groups.summary` (masses left out when real-valued rewards have no
        ``success_threshold``), plus :meth:`scheduled_params`.  No value is NaN.
        """
        r = groups.check_rewards(rewards)
        keep = ~np.isnan(r) if valid is None else (np.asarray(valid, dtype=bool) & ~np.isnan(r))
        codes = groups.group_codes(r.size, index, group_size=group_size, valid=keep)
        s = self._success(np.where(keep, r, np.nan))
        if self.schedule is not None:
            if s is None:
                rw, rc = self.advantage.reward_values
                raise ValueError(f"success_threshold is required by schedule {self.name!r}: the rewards are "
                                 f"real-valued, not R_w = {rw:g} or R_c = {rc:g}")
            rw, rc = self.schedule.reward_values
            solve = float(s[keep].mean()) if keep.any() else 0.0
            self.advance(reward_mean=rw + (rc - rw) * solve, entropy=entropy)
        A = groups.advantages(self.advantage, r, lengths=lengths, success_threshold=self.success_threshold,
                              singleton=self.singleton, codes=codes)
        if s is None:
            gs = groups.stats(A, np.zeros(r.size, bool), codes=codes)
            metrics = {k: v for k, v in groups.summary(gs).items()
                       if k in ("n_groups", "group_size", "abs_adv_sum")}
        else:
            metrics = groups.summary(groups.stats(A, s, codes=codes))
        metrics.update(self.scheduled_params())
        return A, {k: v for k, v in metrics.items() if v is not None}

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The schedule's state and the last entropy seen (JSON-able); empty for a fixed family."""
        if self.schedule is None:
            return {}
        return {"schedule": self.schedule.name, "state": self.schedule.state_dict(), "entropy": self.entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a fixed family ignores an empty state)."""
        if self.schedule is None:
            if state:
                raise ValueError("state holds a schedule's state, but this policy has no schedule")
            return
        if state.get("schedule") != self.schedule.name:
            raise ValueError(f"state is of schedule {state.get('schedule')!r}, this policy runs {self.schedule.name!r}")
        self.schedule.load_state_dict(state["state"])
        self.entropy = state.get("entropy")
        self.advantage = self.schedule.advantage
