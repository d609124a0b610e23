"""What the TRL and verl adapters share: the run's :class:`rlvr_theory.policy.Policy` and the
syntax of its parameter string.

:class:`~rlvr_theory.policy.Policy` holds the registry family (or schedule) a run uses, checks
the choices when it is built, before any generation, and turns one batch of rewards into
advantages and the papers' per-step diagnostics (:func:`rlvr_theory.groups.summary`).  The
adapters only move data between their trainer and :meth:`~rlvr_theory.policy.Policy.step`.

Examples
--------
>>> from integrations.core import Policy, parse_params
>>> pol = Policy(advantage="asym_grpo", advantage_params=parse_params("delta=0.5"))
>>> A, metrics = pol.step(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
>>> A                        # failures of the first group divided by δ; the second has no signal
array([ 0.75, -0.5 , -0.5 , -0.5 ,  0.  ,  0.  ,  0.  ,  0.  ])
>>> metrics["m_S"], metrics["m_F"], metrics["frac_all_correct"]
(0.09375, 0.1875, 0.5)
"""

from __future__ import annotations

import re
from typing import Any

from rlvr_plumbing.runner import parse_params as _parse_items
from rlvr_theory.policy import Policy

__all__ = ["Policy", "parse_params", "RESERVED", "STEP_METRICS"]

#: keys of a parameter string that configure the adapter, not the family
RESERVED = ("success_threshold", "singleton", "steps")

#: the metric names both adapters log from one :meth:`~rlvr_theory.policy.Policy.step` -> its key
#: in the step's metrics: TRL's ``GRPOTrainer`` appends them to TRL's metrics
#: (``integrations.trl.METRICS``), the verl plugin adds them to each training step's log of verl's
#: ``Tracking`` (:func:`integrations.verl.estimator_metrics`).  A key absent from a step's metrics or
#: not finite there (``sign_ratio`` when ``m_F = 0``, the masses of real rewards without a threshold,
#: ``alpha``/``delta``/``omega`` without a schedule) is not logged.  The metric-log readers of
#: :mod:`analysis.audit.metric_logs` know these names on their side (that package imports nothing
#: from ``integrations``); ``tests/integrations/test_core.py`` checks that the two agree.
STEP_METRICS: dict[str, str] = {
    "rlvr/m_S": "m_S",
    "rlvr/m_F": "m_F",
    "rlvr/sign_ratio": "sign_ratio",
    "rlvr/frac_all_correct": "frac_all_correct",
    "rlvr/frac_all_wrong": "frac_all_wrong",
    "rlvr/abs_adv_sum": "abs_adv_sum",
    "rlvr/solve_rate": "solve_rate_mean",
    "rlvr/alpha": "alpha",
    "rlvr/delta": "delta",
    "rlvr/omega": "omega",
}

_SPLIT = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")


def parse_params(text: str | None) -> dict[str, Any]:
    """``"delta=0.5,alpha=2"`` → ``{"delta": 0.5, "alpha": 2}`` (the ``--param`` value syntax).

    Commas separate items only before a ``NAME=``, so tuple values such as
    ``reward_values=(-1, 1)`` pass whole.

    >>> parse_params("delta=0.5, reward_values=(-1, 1),singleton=raw")
    {'delta': 0.5, 'reward_values': (-1, 1), 'singleton': 'raw'}
    >>> parse_params("")
    {}
    """
    text = (text or "").strip()
    if not text:
        return {}
    return _parse_items(s.strip() for s in _SPLIT.split(text))
