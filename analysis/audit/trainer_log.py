"""What the trainer itself logged: the audit's sections built on a metric log.

A metric log (:func:`analysis.audit.metric_logs.read_metrics`: TRL's ``trainer_state.json``,
verl's file logger, prime-rl, W&B exports, any step-keyed table) holds one row per
optimisation step in one vocabulary (``entropy``, ``reward_mean``, ``frac_zero_std``, the
importance-sampling ratios, ``val/<name>``, ...).  :func:`sections` turns it into the
``"trainer_log"`` block of ``report.json``:

* **entropy** — the series, its drop, and Cui et al.'s entropy–performance law
  (arXiv 2505.22617):

  .. math:: R = -a\\,e^{H} + b,

  fitted by least squares (linear in ``a`` and ``b``: the regressor is ``e^H``,
  :func:`cui_fit`) to the performance series (the training reward ``reward_mean`` by default,
  any logged metric when chosen, e.g. ``val/acc``), with the predicted ceiling ``R(H = 0) =
  -a + b``; and the honest out-of-sample error of the same fit made on the first
  :data:`FIT_FRACTION` of the points only (:func:`cui_fit_early`) — the paper's claim is that
  early steps predict the rest.  FADE's α and δ (Alg. 1-2) are computed from the real entropy
  when the run has no rollout log to take the solve rates from.
* **mismatch** — the train–inference importance-sampling ratio and the log-probability KL
  between the inference engine and the trainer (TRL ``sampling/*``, verl ``rollout_corr/*``,
  prime-rl ``mismatch_kl``), with the steps where the sequence-level ratio passes its cap
  (TRL's default :data:`IS_CAP` = 3; the token-level maximum when no sequence level is logged).
* **zero_signal** — the trainer's own fraction of groups whose rewards all equal
  (``frac_zero_std``, TRL's ``frac_reward_zero_std``) beside the rollout log's count of the same
  groups, step by step; a disagreement is listed, not hidden.
* **alerts** — the guardrail records a run folder holds (:data:`ALERTS_FILE`, JSON lines
  ``{"step", "rule", "message", ...}``), read by :func:`read_alerts`.

Every number rests on the columns named in its block (``"from"``), so the report can say which
logged metric it came from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlvr_plumbing import checks

__all__ = ["cui_fit", "cui_fit_early", "sections", "read_alerts", "find_alerts", "FIT_FRACTION", "MIN_FIT_POINTS",
           "IS_CAP", "ALERTS_FILE", "ALERT_KEYS", "MISMATCH_COLUMNS"]

#: share of the (entropy, performance) points, first by step, that the early fit sees
FIT_FRACTION = 0.15
#: fewest points of a fit (two parameters, and one degree of freedom to judge it)
MIN_FIT_POINTS = 3
#: cap of the sequence-level importance-sampling ratio (TRL's ``vllm_importance_sampling_cap`` default)
IS_CAP = 3.0
#: the file of guardrail records in a run folder (one JSON object per line)
ALERTS_FILE = "rlvr_alerts.jsonl"
#: keys every guardrail record has; ``value``, ``threshold``, ``action``, ``source`` are optional
ALERT_KEYS = ("step", "rule", "message")
#: the mismatch columns of the vocabulary, in the report's order
MISMATCH_COLUMNS = ("seq_is_ratio_mean", "seq_is_ratio_min", "seq_is_ratio_max", "is_ratio_mean", "is_ratio_min",
                    "is_ratio_max", "mismatch_kl", "mismatch_kl_max", "logp_diff_mean", "logp_diff_max")


# ================================================================ Cui's law
def cui_fit(H: Any, R: Any) -> dict[str, Any]:
    """Least-squares fit of ``R = -a·exp(H) + b`` (Cui et al. 2025, arXiv 2505.22617).

    Parameters
    ----------
    H, R : array_like (n,)
        Entropy (nats) and performance at the same steps; NaN pairs are left out.

    Returns
    -------
    dict
        ``a``, ``b``, ``ceiling`` (``-a + b``: the performance the law predicts at zero
        entropy), ``n`` (points), ``rmse`` and ``r2`` of the fit, ``max_abs_error``.
        The fit is the ordinary least-squares line of ``R`` on ``x = e^H``: slope ``-a``,
        intercept ``b``, computed on centred values.

    Raises
    ------
    ValueError
        Fewer than :data:`MIN_FIT_POINTS` points, a negative or non-finite entropy, or an
        entropy that does not vary (``a`` is then not identified).

    Examples
    --------
    >>> H = np.array([1.2, 1.0, 0.8, 0.5, 0.3])
    >>> f = cui_fit(H, -0.2 * np.exp(H) + 0.9)
    >>> round(f["a"], 12), round(f["b"], 12), round(f["ceiling"], 12)
    (0.2, 0.9, 0.7)
    """
    h = np.asarray(H, dtype=float).ravel()
    r = np.asarray(R, dtype=float).ravel()
    if h.shape != r.shape:
        raise ValueError(f"H and R must have the same length, got {h.size} and {r.size}")
    keep = ~(np.isnan(h) | np.isnan(r))
    h, r = h[keep], r[keep]
    if h.size < MIN_FIT_POINTS:
        raise ValueError(f"the entropy-performance fit needs at least {MIN_FIT_POINTS} steps with both an entropy and a "
                         f"performance value, got {h.size}")
    if not (np.isfinite(h).all() and (h >= 0).all() and (h <= 700).all()):
        bad = h[~(np.isfinite(h) & (h >= 0) & (h <= 700))][0]
        raise ValueError(f"entropy must be finite nats in [0, 700] for exp(H), got {bad!r}")
    if not np.isfinite(r).all():
        raise ValueError(f"performance must be finite, got {r[~np.isfinite(r)][0]!r}")
    if np.ptp(h) == 0:
        raise ValueError(f"the entropy is constant ({h[0]:g} nats at all {h.size} steps): a is not identified")
    x = np.exp(h)
    xc, rc = x - x.mean(), r - r.mean()
    sxx = float(xc @ xc)
    slope = float(xc @ rc) / sxx
    a = -slope
    b = float(r.mean() - slope * x.mean())
    res = r - (b - a * x)
    ss_res, ss_tot = float(res @ res), float(rc @ rc)
    return {"a": a, "b": b, "ceiling": b - a, "n": int(h.size), "rmse": math.sqrt(ss_res / h.size),
            "r2": (1.0 - ss_res / ss_tot) if ss_tot > 0 else math.nan,
            "max_abs_error": float(np.abs(res).max())}


def cui_fit_early(steps: Any, H: Any, R: Any, *, fraction: float = FIT_FRACTION) -> dict[str, Any]:
    """Fit Cui's law on the first ``fraction`` of the points (by step) and judge it on the rest.

    The early fit sees the first ``max(MIN_FIT_POINTS, ceil(fraction·n))`` points of the
    ``n`` steps with both values; the others are held out.  Returns :func:`cui_fit`'s keys of
    the early fit, and ``n_fit``, ``n_held_out``, ``last_fit_step``, ``oos_rmse``,
    ``oos_max_abs_error`` (on the held-out points), ``final_step``, ``final_actual`` and
    ``final_predicted`` (the last held-out point).  Raises ``ValueError`` when no point is left
    to hold out.

    >>> H = np.linspace(1.5, 0.2, 40)
    >>> f = cui_fit_early(np.arange(40), H, -0.1 * np.exp(H) + 0.8)
    >>> f["n_fit"], f["n_held_out"], round(f["oos_rmse"], 12)
    (6, 34, 0.0)
    """
    fraction = checks.number("fit_fraction", fraction, low=0, high=1, low_open=True, high_open=True)
    s = np.asarray(steps, dtype=float).ravel()
    h = np.asarray(H, dtype=float).ravel()
    r = np.asarray(R, dtype=float).ravel()
    keep = ~(np.isnan(s) | np.isnan(h) | np.isnan(r))
    order = np.argsort(s[keep], kind="stable")
    s, h, r = s[keep][order], h[keep][order], r[keep][order]
    n_fit = max(MIN_FIT_POINTS, math.ceil(fraction * s.size))
    if s.size - n_fit < 1:
        raise ValueError(f"the early fit on the first {100 * fraction:g} % of the steps needs steps left to judge it "
                         f"on: {s.size} steps with both values, {n_fit} of them fitted")
    out = cui_fit(h[:n_fit], r[:n_fit])
    pred = out["b"] - out["a"] * np.exp(h[n_fit:])
    err = r[n_fit:] - pred
    out.update(n_fit=n_fit, n_held_out=int(s.size - n_fit), fraction=fraction, last_fit_step=int(s[n_fit - 1]),
               oos_rmse=float(np.sqrt(np.mean(err ** 2))), oos_max_abs_error=float(np.abs(err).max()),
               final_step=int(s[-1]), final_actual=float(r[-1]), final_predicted=float(pred[-1]))
    return out


# ================================================================ sections
def _series(frame: pd.DataFrame, cols: Sequence[str]) -> list[dict[str, Any]]:
    sub = frame[["step", *cols]].dropna(subset=list(cols), how="all")
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
            for rec in sub.to_dict("records")]


def _aligned(frame: pd.DataFrame, performance: str) -> pd.DataFrame:
    """(step, H, R): the performance series with the entropy of the same step, or of the last
    step before it that logged one (validation metrics are logged every N steps)."""
    h = frame.loc[frame["entropy"].notna(), ["step", "entropy"]]
    r = frame.loc[frame[performance].notna(), ["step", performance]]
    if h.empty or r.empty:
        return pd.DataFrame({"step": [], "H": [], "R": []})
    m = pd.merge_asof(r.sort_values("step"), h.sort_values("step"), on="step", direction="backward")
    m = m.dropna()
    return pd.DataFrame({"step": m["step"].to_numpy(), "H": m["entropy"].to_numpy(float),
                         "R": m[performance].to_numpy(float)})


def _entropy(frame: pd.DataFrame, performance: str | None, fit_fraction: float, notes: list[str],
             fade: Mapping[str, Any] | None, schedules: bool) -> dict[str, Any] | None:
    if "entropy" not in frame.columns or frame["entropy"].notna().sum() == 0:
        notes.append("The metric log has no entropy: the Entropy section is left out.")
        return None
    e = frame.loc[frame["entropy"].notna(), ["step", "entropy"]]
    H, steps = e["entropy"].to_numpy(float), e["step"].to_numpy()
    first, last = float(H[0]), float(H[-1])
    k = max(1, math.ceil(fit_fraction * H.size))
    drop = first - last
    out: dict[str, Any] = {
        "from": "entropy", "n_steps": int(H.size), "first_step": int(steps[0]), "last_step": int(steps[-1]),
        "first": first, "last": last, "min": float(H.min()), "drop": drop,
        "relative_drop": drop / first if first > 0 else math.nan,
        "drop_in_first_fraction": (first - float(H[k - 1])) / drop if drop > 0 else math.nan,
        "fraction": fit_fraction,
    }
    perf = performance or "reward_mean"
    out["performance"] = perf
    if perf not in frame.columns:
        if performance is not None:
            have = ", ".join(c for c in frame.columns if c != "step")
            raise ValueError(f"performance: the metric log has no column {performance!r} (it has: {have})")
        notes.append("The metric log has no reward_mean: Cui's entropy-performance fit is not computed "
                     "(choose a logged metric with --performance).")
        out["fit"] = out["early_fit"] = None
    else:
        pts = _aligned(frame, perf)
        out["points"] = int(len(pts))
        try:
            out["fit"] = cui_fit(pts["H"], pts["R"])
        except ValueError as err:
            out["fit"] = None
            notes.append(f"Cui's fit of {perf} is not computed: {err}.")
        try:
            out["early_fit"] = cui_fit_early(pts["step"], pts["H"], pts["R"], fraction=fit_fraction)
        except ValueError as err:
            out["early_fit"] = None
            notes.append(f"Cui's early fit of {perf} is not computed: {err}.")
    if schedules:
        from .metrics import _schedule_columns

        r = frame["reward_mean"].to_numpy(float) if "reward_mean" in frame.columns else np.full(len(frame), np.nan)
        if np.nanmin(r, initial=0.0) < 0 or np.nanmax(r, initial=0.0) > 1:
            notes.append("FADE's schedule is fed the batch success rate; reward_mean leaves [0, 1] here, so α and δ "
                         "are not computed from the metric log (give the rollout log).")
        else:
            cols = _schedule_columns(frame["step"].to_numpy(), r, frame["entropy"].to_numpy(float)
                                     if "entropy" in frame.columns else None, fade, None)
            out["fade"] = [{"step": int(s), "alpha": a, "delta": d} for s, a, d in
                           zip(frame["step"].tolist(), cols["fade_alpha"].tolist(), cols["fade_delta"].tolist())
                           if not math.isnan(a)]
    return out


def _mismatch(frame: pd.DataFrame, cap: float) -> dict[str, Any] | None:
    cols = [c for c in MISMATCH_COLUMNS if c in frame.columns and frame[c].notna().any()]
    if not cols:
        return None
    out: dict[str, Any] = {"from": cols, "cap": cap, "columns": {}}
    for c in cols:
        v = frame[c].dropna()
        out["columns"][c] = {"mean": float(v.mean()), "max": float(v.max()), "min": float(v.min()),
                             "last": float(v.iloc[-1]), "n_steps": int(v.size)}
    flag_col = "seq_is_ratio_max" if "seq_is_ratio_max" in cols else "is_ratio_max" if "is_ratio_max" in cols else None
    out["flag_column"] = flag_col
    if flag_col is not None:
        v = frame[["step", flag_col]].dropna()
        over = v.loc[v[flag_col] > cap]
        out["level"] = "sequence" if flag_col.startswith("seq_") else "token"
        out["flagged_steps"] = over["step"].astype(int).tolist()
        out["flagged_values"] = over[flag_col].astype(float).tolist()
    if "seq_is_ratio_min" in cols:
        # TRL logs the ratio after its correction: a masked sequence (ratio above the cap, mask modes)
        # is logged as 0, so the logged maximum never passes the cap and a minimum of 0 marks masking
        v = frame[["step", "seq_is_ratio_min"]].dropna()
        out["masked_steps"] = v.loc[v["seq_is_ratio_min"] == 0, "step"].astype(int).tolist()
    return out


def _zero_signal(frame: pd.DataFrame, rollout_steps: pd.DataFrame | None, notes: list[str]) -> dict[str, Any] | None:
    has_trainer = "frac_zero_std" in frame.columns and frame["frac_zero_std"].notna().any()
    if not has_trainer:
        return None
    t = frame.loc[frame["frac_zero_std"].notna(), ["step", "frac_zero_std"]]
    out: dict[str, Any] = {"from": "frac_zero_std", "trainer_mean": float(t["frac_zero_std"].mean()),
                           "n_trainer_steps": int(len(t))}
    if rollout_steps is None or rollout_steps.empty:
        out["rollouts"] = None
        return out
    r = rollout_steps[["step", "frac_equal_rewards", "n_groups"]]
    m = t.merge(r, on="step", how="outer", sort=True)
    both = m.dropna(subset=["frac_zero_std", "frac_equal_rewards"])
    tol = 0.5 / both["n_groups"].clip(lower=1)       # half a group: the counts differ by at least one group
    diff = (both["frac_zero_std"] - both["frac_equal_rewards"]).to_numpy(float)
    bad = np.abs(diff) > tol.to_numpy(float)
    out["rollouts"] = {
        "n_steps_both": int(len(both)),
        "n_steps_trainer_only": int(m["frac_equal_rewards"].isna().sum()),
        "n_steps_rollouts_only": int(m["frac_zero_std"].isna().sum()),
        "rollout_mean": float(both["frac_equal_rewards"].mean()) if len(both) else math.nan,
        "trainer_mean_joined": float(both["frac_zero_std"].mean()) if len(both) else math.nan,
        "max_abs_difference": float(np.abs(diff).max()) if diff.size else math.nan,
        "n_disagree": int(bad.sum()),
        "disagreements": [{"step": int(s), "trainer": float(a), "rollouts": float(b), "n_groups": int(g)}
                          for s, a, b, g in zip(both["step"][bad], both["frac_zero_std"][bad],
                                                both["frac_equal_rewards"][bad], both["n_groups"][bad])],
    }
    if len(both) == 0:
        notes.append("The metric log's steps and the rollout log's steps do not overlap: the zero-signal counts "
                     "cannot be compared step by step.")
    return out


def sections(metric_log: Any, *, rollout_steps: pd.DataFrame | None = None, performance: str | None = None,
             fit_fraction: float = FIT_FRACTION, is_cap: float = IS_CAP, fade: Mapping[str, Any] | None = None,
             alerts: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The ``"trainer_log"`` block of ``report.json``.

    Parameters
    ----------
    metric_log : analysis.audit.metric_logs.MetricLog or None
        The trainer's metric log (``frame``: one row per step; ``source``); None: only the
        alerts.
    rollout_steps : pandas.DataFrame, optional
        The rollout audit's per-step table (:func:`analysis.audit.metrics.step_table`), for
        the zero-signal cross-check; ``None`` when the run has no rollout log (then FADE's α and
        δ are computed here, from the logged reward and entropy).
    performance : str, optional
        The metric Cui's law is fitted to (``reward_mean`` when None); a name the log does not
        have is refused.
    fit_fraction : float
        Share of the points the early fit sees (:data:`FIT_FRACTION`).
    is_cap : float
        Cap of the importance-sampling ratio (:data:`IS_CAP`).
    fade : mapping, optional
        Parameters of FADE's schedule (as ``rlvr-audit``'s what-ifs).
    alerts : sequence of dict
        Guardrail records (:func:`read_alerts`).

    Returns
    -------
    dict with ``source``, ``steps`` (the series: ``step`` and every logged column),
    ``entropy``, ``mismatch``, ``zero_signal`` (each None when the log lacks its columns),
    ``alerts`` and ``notes``.
    """
    frame = pd.DataFrame({"step": np.zeros(0, np.int64)}) if metric_log is None else getattr(metric_log, "frame", None)
    if not isinstance(frame, pd.DataFrame) or "step" not in frame.columns:
        raise ValueError("metric_log must be a MetricLog (analysis.audit.metric_logs.read_metrics)")
    fit_fraction = checks.number("fit_fraction", fit_fraction, low=0, high=1, low_open=True, high_open=True)
    is_cap = checks.number("is_cap", is_cap, low=1)
    notes: list[str] = []
    cols = [c for c in frame.columns if c != "step"]
    return {
        "source": dict(getattr(metric_log, "source", None) or {}),
        "steps": _series(frame, cols) if cols else [],
        "entropy": None if metric_log is None else _entropy(frame, performance, fit_fraction, notes, fade,
                                                            schedules=rollout_steps is None),
        "mismatch": _mismatch(frame, is_cap),
        "zero_signal": _zero_signal(frame, rollout_steps, notes),
        "alerts": [dict(a) for a in alerts],
        "notes": notes,
    }


# ================================================================ alerts
def find_alerts(paths: Iterable[Any]) -> list[Path]:
    """The :data:`ALERTS_FILE` files among ``paths``: a file of that name, or one in a folder
    (the folder itself and its ``checkpoint-*`` / ``global_step_*`` subfolders)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and p.name == ALERTS_FILE:
            out.append(p)
        elif p.is_dir():
            out += [q for q in [p / ALERTS_FILE, *sorted(p.glob(f"*/{ALERTS_FILE}"))] if q.is_file()]
    return list(dict.fromkeys(out))


def read_alerts(files: Iterable[Any], *, arg: str = "alerts") -> list[dict[str, Any]]:
    """Guardrail records of the files (JSON lines), sorted by step; a record missing one of
    :data:`ALERT_KEYS`, or a line that is not a JSON object, is refused naming ``FILE:LINE``.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / ALERTS_FILE
    >>> _ = f.write_text('{"step": 7, "rule": "entropy_drop", "message": "H fell 40 % in 20 steps", "value": 0.4}\\n')
    >>> [(a["step"], a["rule"]) for a in read_alerts([f])]
    [(7, 'entropy_drop')]
    """
    out: list[dict[str, Any]] = []
    for f in map(Path, files):
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as err:
                    raise ValueError(f"{arg}: {f}:{i}: not a JSON line ({err.msg})") from None
                if not isinstance(rec, dict):
                    raise ValueError(f"{arg}: {f}:{i}: a guardrail record must be a JSON object")
                missing = [k for k in ALERT_KEYS if k not in rec]
                if missing:
                    raise ValueError(f"{arg}: {f}:{i}: a guardrail record needs {', '.join(ALERT_KEYS)}; "
                                     f"missing {', '.join(missing)}")
                if isinstance(rec["step"], bool) or not isinstance(rec["step"], int) or rec["step"] < 0:
                    raise ValueError(f"{arg}: {f}:{i}: step must be an integer >= 0, got {rec['step']!r}")
                out.append({**rec, "file": str(f)})
    return sorted(out, key=lambda r: r["step"])
