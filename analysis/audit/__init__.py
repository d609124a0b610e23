"""Audit an RL run from the rollout logs its trainer wrote (``rlvr-audit`` in Python).

Three steps, one module each:

* :func:`read` (:mod:`analysis.audit.readers`): TRL completions parquet, verl rollout JSONL,
  prime-rl traces, ``rlvr-train grpo`` rollouts or any table → a :class:`Rollouts` whose
  ``frame`` has one row per rollout (``step``, ``group``, ``reward``, ``advantage``,
  ``length``, ``split``);
* :func:`group_table`, :func:`step_table`, :func:`which_advantage`, :func:`audit`
  (:mod:`analysis.audit.metrics`): per-group and per-step DataFrames for Jupyter (zero-signal
  groups, the masses ``m_S``, ``m_F`` of the advantages used and of ``compare`` families,
  Kish N_eff, tail miss, pass@1 and pass@G, FADE's α and A-GRAE's ω), the family that
  reproduces the logged advantages, and the whole ``report.json`` document;
* :func:`write_report` (:mod:`analysis.audit.report`): ``report.md``, self-contained
  ``report.html``, ``report.json`` and PNGs, written atomically.

The trainer's own metric log (one row per step: entropy, KL, clip fractions, the
importance-sampling ratios, ``frac_zero_std``, validation metrics) is read by
:func:`read_metrics` (:mod:`analysis.audit.metric_logs`: TRL ``trainer_state.json``, verl's
file logger, prime-rl, W&B exports, any step-keyed table), and :func:`trainer_sections`
(:mod:`analysis.audit.trainer_log`) gives the report's Entropy (with Cui et al.'s
entropy-performance fit, :func:`~analysis.audit.trainer_log.cui_fit`), mismatch, zero-signal
cross-check and alerts.

The metrics take any DataFrame with the columns ``step``, ``group``, ``reward`` (and
``advantage`` when the log has them), so an in-memory table works as well as a log.
``docs/audit.md`` explains every column with its source equation.

Examples
--------
>>> import numpy as np, pandas as pd
>>> from rlvr_theory import groups
>>> from analysis import audit
>>> r = np.array([1.0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
>>> frame = pd.DataFrame({"step": [0] * 8 + [1] * 8, "group": [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4,
...                       "reward": r, "advantage": groups.advantages("rloo", r, group_size=4)})
>>> audit.step_table(frame)[["step", "n_groups", "frac_all_correct", "frac_all_wrong", "m_S", "m_F"]]
   step  n_groups  frac_all_correct  frac_all_wrong       m_S       m_F
0     0         2               0.5             0.0  0.125000  0.125000
1     1         2               0.0             0.5  0.166667  0.166667
>>> audit.which_advantage(frame)["name"]
'rloo'
>>> doc = audit.audit(frame, compare=["asym_grpo"])
>>> doc["advantage"]["name"], [s["step"] for s in doc["steps"]]
('rloo', [0, 1])
"""

from .metric_logs import MetricLog, read_metrics
from .metrics import audit, group_table, step_table, which_advantage
from .readers import Rollouts, read
from .report import write_report
from .trainer_log import cui_fit
from .trainer_log import sections as trainer_sections

__all__ = ["read", "Rollouts", "group_table", "step_table", "which_advantage", "audit", "write_report",
           "read_metrics", "MetricLog", "trainer_sections", "cui_fit"]
