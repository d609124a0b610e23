"""The report's sections on the trainer's own metric log (``report.json`` ``"trainer_log"``).

Drawn from the block of :func:`analysis.audit.trainer_log.sections` alone, so a saved
``report.json`` renders again.  :func:`verdict` adds the headline sentences, :func:`run` the
table of the metric log read, :func:`sections` the sections *Entropy* (Cui et al.'s law and
its early fit), *Train–inference mismatch*, *Zero-signal cross-check* and *Alerts*, each with
the logged columns it rests on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..report import Page, png_bytes
from .report import _figure, _fmt, _num, _pct, _series_axes, rolling_window

__all__ = ["verdict", "run", "sections"]


def _block(doc: dict) -> dict:
    return doc.get("trainer_log") or {}


def _frame(t: dict) -> pd.DataFrame:
    f = pd.DataFrame(t.get("steps") or [])
    for c in f.columns:
        f[c] = [_num(v) for v in f[c]]
    return f


# ------------------------------------------------------------------ verdict
def _entropy_lines(e: dict) -> list[str]:
    out = [f"Entropy (the trainer's `entropy`) went from {_fmt(e['first'])} to {_fmt(e['last'])} nats over steps "
           f"{_fmt(e['first_step'])}–{_fmt(e['last_step'])} ({_pct(-e['relative_drop'])} change)"
           + (f"; {_pct(e['drop_in_first_fraction'])} of the drop came in the first "
              f"{_pct(e['fraction'])} of the logged steps" if _finite(e.get("drop_in_first_fraction")) else "")
           + "."]
    f, early = e.get("fit"), e.get("early_fit")
    perf = e.get("performance")
    if f:
        text = (f"Cui's law R = −a·e^H + b (arXiv 2505.22617) fitted to {perf} over {f['n']} steps: a = {_fmt(f['a'])}, "
                f"b = {_fmt(f['b'])} (R² {_fmt(f['r2'])}, RMSE {_fmt(f['rmse'])}); predicted ceiling at zero entropy "
                f"−a + b = {_fmt(f['ceiling'])}.")
        if f["a"] <= 0:
            text += (" Here a ≤ 0: the performance does not rise as the entropy falls, so the law does not describe "
                     "this run and the ceiling means nothing.")
        out.append(text)
    if early:
        out.append(f"Fitted on the first {_pct(early['fraction'])} of those steps only ({early['n_fit']} points, up to "
                   f"step {_fmt(early['last_fit_step'])}), it predicts the other {early['n_held_out']} with RMSE "
                   f"{_fmt(early['oos_rmse'])} (largest error {_fmt(early['oos_max_abs_error'])}); at step "
                   f"{_fmt(early['final_step'])} it predicts {_fmt(early['final_predicted'])} against "
                   f"{_fmt(early['final_actual'])} logged; its ceiling is {_fmt(early['ceiling'])}"
                   + (" (its a ≤ 0: the first steps alone do not show performance rising as entropy falls)."
                      if early["a"] <= 0 else "."))
    return out


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _mismatch_line(m: dict) -> str:
    col = m.get("flag_column")
    if col is None:
        return ("Train–inference mismatch: " + ", ".join(f"{c} mean {_fmt(v['mean'])}, max {_fmt(v['max'])}"
                                                         for c, v in m["columns"].items()) + ".")
    steps, vals = m.get("flagged_steps") or [], m.get("flagged_values") or []
    n = m["columns"][col]["n_steps"]
    masked = m.get("masked_steps") or []
    extra = (f" At {len(masked)} step(s) (first {_fmt(masked[0])}) the logged minimum sequence ratio is 0: the trainer "
             "masked sequences whose ratio passed its cap (TRL logs a masked sequence's ratio as 0, so its logged "
             "maximum never passes the cap)." if masked else "")
    if not steps:
        return (f"Train–inference mismatch: the {m['level']}-level importance-sampling ratio stayed at or under its cap "
                f"{_fmt(m['cap'])} at all {n} logged steps (largest {_fmt(m['columns'][col]['max'])}).{extra}")
    return (f"Train–inference mismatch: the {m['level']}-level importance-sampling ratio ({col}) passed its cap "
            f"{_fmt(m['cap'])} at {len(steps)} of {n} logged steps (first at step {_fmt(steps[0])}, largest "
            f"{_fmt(max(vals))}): the trainer's update rests on rollouts the inference engine sampled from a "
            f"different distribution there.{extra}")


def _zero_line(z: dict) -> str:
    r = z.get("rollouts")
    if not r:
        return (f"The trainer logged {_pct(z['trainer_mean'])} of groups with zero reward spread (frac_zero_std, mean "
                "over steps); no rollout log to check it against.")
    if not r["n_steps_both"]:
        return "The trainer's frac_zero_std and the rollout log share no step: not compared."
    head = (f"Zero-signal cross-check at {r['n_steps_both']} common steps: the trainer's frac_zero_std (mean "
            f"{_pct(r['trainer_mean_joined'])}) against the rollout log's groups with all-equal rewards (mean "
            f"{_pct(r['rollout_mean'])})")
    if not r["n_disagree"]:
        return head + f": they agree at every step (largest difference {_fmt(r['max_abs_difference'])})."
    return (head + f": they DISAGREE by at least half a group at {r['n_disagree']} step(s) (largest difference "
            f"{_fmt(r['max_abs_difference'])}; listed under Zero-signal cross-check). The rollout log may miss rows, "
            "or the trainer logged a mean over several batches.")


def verdict(page: Page, doc: dict, *, heading: bool = True) -> None:
    """Headline sentences of the metric log (under the rollout verdict, or as the verdict)."""
    t = _block(doc)
    lines: list[str] = []
    if t.get("entropy"):
        lines += _entropy_lines(t["entropy"])
    if t.get("mismatch"):
        lines.append(_mismatch_line(t["mismatch"]))
    if t.get("zero_signal"):
        lines.append(_zero_line(t["zero_signal"]))
    alerts = t.get("alerts") or []
    if alerts:
        rules = sorted({str(a.get("rule")) for a in alerts})
        lines.append(f"{len(alerts)} guardrail alert(s) in the run folder ({', '.join(rules)}), the first at step "
                     f"{_fmt(alerts[0]['step'])}: {alerts[0].get('message')}.")
    if not lines:
        lines.append("The metric log has none of the columns the audit reads (entropy, importance-sampling ratios, "
                     "frac_zero_std): see Metric log for what it holds.")
    if heading:
        page.add(("h2", "Verdict"))
    page.add(*[("p", ln) for ln in lines])


# ------------------------------------------------------------------ run
def run(page: Page, doc: dict) -> None:
    """The metric log read: format, files, steps, which of the trainer's names became which of ours."""
    t = _block(doc)
    src = t.get("source") or {}
    f = _frame(t)
    page.add(("h2", "Metric log"))
    paths = [str(p) for p in (src.get("paths") or [])]
    rows = [["format", src.get("format") or "—"],
            ["files", ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "") or "—"]]
    if not f.empty:
        rows.append(["steps", f"{_fmt(len(f))} ({_fmt(int(f['step'].min()))} to {_fmt(int(f['step'].max()))})"])
    page.add(("table", ["", "value"], rows))
    mapped = src.get("columns") or {}
    if mapped:
        page.add(("table", ["ours", "the trainer's name"], [[k, str(v)] for k, v in mapped.items()]))
    unmapped = src.get("unmapped") or []
    if unmapped:
        page.add(("p", f"Not read ({len(unmapped)} logged names outside the vocabulary of docs/metric_logs.md): "
                       + ", ".join(map(str, unmapped[:20])) + (", …" if len(unmapped) > 20 else "")
                       + ". Map one with --metric-map NAME=ours."))
    for note in list(src.get("notes") or []) + list(t.get("notes") or []):
        page.add(("p", f"Note: {note}"))


# ------------------------------------------------------------------ sections
def _entropy_plot(f: pd.DataFrame, e: dict) -> bytes | None:
    if "entropy" not in f.columns:
        return None
    fig, axes = _figure(10.0, 3.6, 2)
    window = rolling_window(int(f["entropy"].notna().sum()))
    _series_axes(axes[0], f.loc[f["entropy"].notna()], [("entropy", "policy entropy H (logged)")], window,
                 "entropy (nats)")
    perf = e.get("performance")
    ax = axes[1]
    if perf in f.columns and (e.get("fit") or e.get("early_fit")):
        pts = pd.merge_asof(f.loc[f[perf].notna(), ["step", perf]], f.loc[f["entropy"].notna(), ["step", "entropy"]],
                            on="step", direction="backward").dropna()
        h = pts["entropy"].to_numpy(float)
        ax.scatter(h, pts[perf].to_numpy(float), s=8, c=pts["step"].to_numpy(float), cmap="viridis",
                   label=f"{perf} at each step (colour: step)")
        grid = np.linspace(0.0, float(h.max()) * 1.05, 200)
        for key, label, ls in (("fit", "fit on all steps", "-"), ("early_fit", "fit on the first steps only", "--")):
            fit = e.get(key)
            if fit:
                ax.plot(grid, fit["b"] - fit["a"] * np.exp(grid), ls=ls, lw=1.4,
                        label=f"{label}: ceiling {_fmt(fit['ceiling'])}")
        ax.set_xlabel("entropy H (nats)")
        ax.set_ylabel(perf)
        ax.grid(alpha=0.25, lw=0.5)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=1, frameon=False)
    else:
        ax.set_visible(False)
    return png_bytes(fig)


def _entropy(page: Page, t: dict, f: pd.DataFrame) -> None:
    e = t.get("entropy")
    if not e:
        return
    page.add(("h2", "Entropy"))
    page.add(("p", "The policy entropy the trainer logged (mean token entropy, nats) and Cui et al.'s entropy–"
                   "performance law R = −a·e^H + b (arXiv 2505.22617), fitted by least squares (linear in a "
                   "and b); the ceiling −a + b is R at H = 0. The early fit uses the first "
                   f"{_pct(e['fraction'])} of the steps that have both values and is judged on the rest."))
    rows = [["entropy first → last (nats)", f"{_fmt(e['first'])} → {_fmt(e['last'])}"],
            ["drop (relative)", f"{_fmt(e['drop'])} ({_pct(e['relative_drop'])})"],
            ["minimum", _fmt(e["min"])]]
    for key, label in (("fit", "all steps"), ("early_fit", "first steps only")):
        fit = e.get(key)
        if fit:
            rows.append([f"fit on {label}: a, b", f"{_fmt(fit['a'])}, {_fmt(fit['b'])} ({fit['n']} points)"])
            rows.append([f"fit on {label}: ceiling −a + b", _fmt(fit["ceiling"])])
            rows.append([f"fit on {label}: RMSE, R²", f"{_fmt(fit['rmse'])}, {_fmt(fit['r2'])}"])
    early = e.get("early_fit")
    if early:
        rows.append(["early fit, held-out steps: RMSE, largest error",
                     f"{_fmt(early['oos_rmse'])}, {_fmt(early['oos_max_abs_error'])} ({early['n_held_out']} steps)"])
    page.add(("table", ["", f"value ({e.get('performance')})"], rows))
    fade = e.get("fade")
    if fade:
        a = [r["alpha"] for r in fade]
        d = [r["delta"] for r in fade if r.get("delta") is not None and math.isfinite(_num(r["delta"]))]
        page.add(("p", f"FADE's schedule (Alg. 1-2) fed the logged reward and entropy: α {_fmt(a[0])} → {_fmt(a[-1])}"
                       + (f", δ {_fmt(d[0])} → {_fmt(d[-1])}" if d else "") + " over the run (report.json has each step)."))
    page.img("entropy.png", _entropy_plot(f, e),
             "Left: the logged entropy against step. Right: the performance series against the entropy, with Cui's "
             "law fitted on all steps and on the first steps only (the curve at H = 0 is the predicted ceiling).")


def _mismatch(page: Page, t: dict, f: pd.DataFrame) -> None:
    m = t.get("mismatch")
    if not m:
        return
    page.add(("h2", "Train–inference mismatch"))
    page.add(("p", "The importance-sampling ratio π_train/π_inference and the KL between the two log-probabilities, "
                   "as the trainer logged them (TRL sampling/*, verl rollout_corr/*, prime-rl mismatch_kl). A step is "
                   f"flagged where the {m.get('level') or 'sequence'}-level ratio passes its cap {_fmt(m['cap'])}."))
    page.add(("table", ["column", "mean", "min", "max", "last", "steps"],
              [[c, _fmt(v["mean"]), _fmt(v["min"]), _fmt(v["max"]), _fmt(v["last"]), _fmt(v["n_steps"])]
               for c, v in m["columns"].items()]))
    steps = m.get("flagged_steps") or []
    if steps:
        page.add(("table", ["flagged step", m["flag_column"]],
                  [[_fmt(s), _fmt(v)] for s, v in list(zip(steps, m["flagged_values"]))[:20]]))
    col = m.get("flag_column")
    if col and col in f.columns:
        sub = f.loc[f[col].notna()]
        fig, axes = _figure(7.0, 3.6)
        if _series_axes(axes[0], sub, [(col, col)], rolling_window(len(sub)), "importance-sampling ratio",
                        hline=m["cap"], hline_label=f"cap {_fmt(m['cap'])}"):
            page.img("mismatch.png", png_bytes(fig), "The flagged importance-sampling ratio against step, with its cap.")


def _zero(page: Page, t: dict, f: pd.DataFrame) -> None:
    z = t.get("zero_signal")
    if not z or not z.get("rollouts"):
        return
    r = z["rollouts"]
    page.add(("h2", "Zero-signal cross-check"))
    page.add(("p", "The trainer's own fraction of groups whose rewards all equal (frac_zero_std) beside the rollout "
                   "log's, step by step. A difference of at least half a group (0.5 / groups of the step) is listed."))
    page.add(("table", ["", "value"],
              [["common steps", _fmt(r["n_steps_both"])], ["steps only in the metric log", _fmt(r["n_steps_trainer_only"])],
               ["steps only in the rollout log", _fmt(r["n_steps_rollouts_only"])],
               ["mean: trainer, rollouts", f"{_pct(r['trainer_mean_joined'])}, {_pct(r['rollout_mean'])}"],
               ["largest difference", _fmt(r["max_abs_difference"])], ["steps that disagree", _fmt(r["n_disagree"])]]))
    if r["disagreements"]:
        page.add(("table", ["step", "trainer", "rollout log", "groups"],
                  [[_fmt(d["step"]), _pct(d["trainer"]), _pct(d["rollouts"]), _fmt(d["n_groups"])]
                   for d in r["disagreements"][:20]]))


def _alerts(page: Page, t: dict) -> None:
    alerts = t.get("alerts") or []
    if not alerts:
        return
    page.add(("h2", "Alerts"))
    page.add(("p", "The guardrail records the run wrote (rlvr_alerts.jsonl), with the numbers each fired on."))
    page.add(("table", ["step", "rule", "value", "threshold", "action", "message"],
              [[_fmt(a["step"]), str(a.get("rule")), _fmt(a.get("value")), _fmt(a.get("threshold")),
                str(a.get("action") or "—"), str(a.get("message"))] for a in alerts[:50]]))


def sections(page: Page, doc: dict) -> None:
    """Entropy, Train–inference mismatch, Zero-signal cross-check and Alerts (those the log allows)."""
    t = _block(doc)
    f = _frame(t)
    _entropy(page, t, f)
    _mismatch(page, t, f)
    _zero(page, t, f)
    _alerts(page, t)
