"""The ``rlvr-audit`` report: Markdown, self-contained HTML, JSON and PNGs of one audited run.

:func:`write_report` turns the document of :func:`analysis.audit.metrics.audit` (the
``report.json`` document) and its per-step table (:func:`analysis.audit.metrics.step_table`)
into a directory holding ``report.md``, ``report.html`` (every plot embedded as a base64 PNG,
no external file or script), ``report.json`` and the PNGs.  The page is rendered by the same
code as the ``rlvr-diff`` report (:func:`analysis.report.render_markdown`,
:func:`analysis.report.render_html`, :func:`analysis.report.to_json`).  The directory is built
beside ``out`` and renamed into place when complete (:func:`rlvr_plumbing.io.atomic_dir`); ``out``
is checked before any work (:func:`rlvr_plumbing.io.check_out`).

Sections, in order:

1. **Verdict**: the zero-signal fraction, the sign ratio and what FADE (Sec. 4.1-4.2) says it
   does to entropy (with the caveat of docs/categorical.md), the tail-miss risk, the pass@1 vs
   pass@G trend, and which advantage the masses are of;
2. **Run**: format, files, grouping, group size, steps, dropped rows, the readers' and the
   metrics' notes, and the validation rollouts when the log has them;
3. **Per step**: the first and last five steps, and every series over the run (first and
   last tenth of the steps, mean, extremes);
4. **By group size** (only when groups have unequal sizes);
5. **Solve rates**: the histogram of p̂ over all groups of the run;
6. **What if**: the masses of each ``--compare`` family on the same rewards;
7. **Series against step**: each series on the run's own step axis, with a centred rolling
   mean over a tenth of the run (:func:`rolling_window`).

Numbers in tables use :func:`rlvr_plumbing.serialize.fmt_number` with 4 significant digits.
The report is drawn from the document and the per-step table alone; without the table it is
drawn from ``doc["steps"]``, so a saved ``report.json`` can be rendered again:
``write_report(json.load(open(p)), None, out)``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlvr_plumbing.io import atomic_dir, atomic_write, atomic_write_text, check_out
from rlvr_plumbing.serialize import fmt_number

from ..report import Block, Page, coincides_with, new_figure, png_bytes, render_html, render_markdown, to_json

__all__ = ["write_report", "render", "check_report_out", "rolling_window", "REPORT_FILES", "REPORT_MARKERS",
           "TITLE", "HEADERS"]

#: files every audit report holds (PNGs come in addition)
REPORT_FILES = ("report.md", "report.html", "report.json")
#: a non-empty directory holding one of these is an earlier report (replaced without --overwrite
#: when its report.json is an audit document, see :func:`check_report_out`)
REPORT_MARKERS = ("report.json",)
TITLE = "RL run audit"

#: numbers of the tables: 4 significant digits, thousands separators (as the rlvr-diff report)
_fmt = functools.partial(fmt_number, digits=4, thousands=True)

#: table headers of the per-step columns
HEADERS: dict[str, str] = {
    "n_groups": "groups", "reward_mean": "mean reward", "solve_rate_mean": "p̂ mean",
    "frac_all_correct": "all-correct", "frac_all_wrong": "all-wrong", "frac_zero_signal": "zero-signal",
    "m_S": "m_S", "m_F": "m_F", "sign_ratio": "m_S/m_F", "abs_adv_sum": "Σ|A| per group", "n_eff": "N_eff",
    "pass_at_1": "pass@1", "pass_at_G": "pass@G", "drift_per_nat": "m_S − m_F (drift per nat)",
    "entropy_drift": "(m_S − m_F)·H", "fade_alpha": "FADE α", "fade_delta": "FADE δ", "agrae_omega": "A-GRAE ω",
    "n_nan_rewards": "no reward", "n_rollouts": "rollouts", "success_rate": "success rate",
    "frac_equal_rewards": "equal rewards", "frac_shaped_signal": "pass/fail-uniform, rewards differ",
}


def _num(x: Any) -> float:
    """A JSON or table value as a float: ``None`` → NaN, ``"inf"`` → inf."""
    try:
        return math.nan if x is None else float(x)
    except (TypeError, ValueError):
        return math.nan


def _pct(x: Any, digits: int = 3) -> str:
    """``x`` (a fraction) as a percentage with ``digits`` significant digits; ``—`` when missing."""
    v = _num(x)
    return "—" if math.isnan(v) else fmt_number(100 * v, digits) + "%"


def _mean(values: Any) -> float:
    """Mean of the finite values (NaN when none)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else math.nan


# ------------------------------------------------------------- the step table
def _numeric(frame: pd.DataFrame) -> pd.DataFrame:
    """JSON values read back: ``None`` → NaN, ``"inf"`` → inf, in every object column."""
    for c in frame.columns:
        if frame[c].dtype == object:
            frame[c] = [_num(v) for v in frame[c]]
    return frame


def _steps(doc: dict, steps_frame: pd.DataFrame | None) -> pd.DataFrame:
    """The per-step table: ``steps_frame`` or, without it, ``doc["steps"]``; the what-if
    columns ``compare/<label>/<col>`` are added from ``doc["compare"]`` where missing."""
    if steps_frame is None:
        frame = _numeric(pd.DataFrame(doc.get("steps") or []))
    else:
        if not isinstance(steps_frame, pd.DataFrame):
            raise ValueError(f"steps_frame must be a pandas DataFrame or None, got {type(steps_frame).__name__}")
        frame = steps_frame.copy()
    if frame.empty:
        raise ValueError("doc holds no steps: nothing to report")
    if "step" not in frame.columns:
        raise ValueError("steps_frame must have a 'step' column (analysis.audit.metrics.step_table)")
    for label, info in (doc.get("compare") or {}).items():
        rows = info.get("steps") if isinstance(info, dict) else None
        if not rows:
            continue
        sub = _numeric(pd.DataFrame(rows))
        new = [c for c in sub.columns if c != "step" and f"compare/{label}/{c}" not in frame.columns]
        if new and "step" in sub.columns:
            sub = sub[["step"] + new].rename(columns={c: f"compare/{label}/{c}" for c in new})
            frame = frame.merge(sub, on="step", how="left")
    return frame.sort_values("step").reset_index(drop=True)


def rolling_window(n_steps: int) -> int:
    """Steps in the rolling mean of the plots: a tenth of the run, odd, between 1 and 51.

    >>> rolling_window(5), rolling_window(40), rolling_window(1000)
    (1, 5, 51)
    """
    w = max(1, min(51, n_steps // 10))
    return w if w % 2 else w + 1


def _tenths(frame: pd.DataFrame, col: str) -> tuple[float, float]:
    """Mean of ``col`` over the first and the last tenth of the steps (at least one step each)."""
    k = max(1, len(frame) // 10)
    v = frame[col].to_numpy(dtype=float)
    return _mean(v[:k]), _mean(v[-k:])


def _prefixed(frame: pd.DataFrame, prefix: str) -> list[str]:
    return [c for c in frame.columns if str(c).startswith(prefix)]


def _compare_labels(doc: dict, frame: pd.DataFrame) -> list[str]:
    names = list((doc.get("compare") or {}).keys())
    for c in _prefixed(frame, "compare/"):
        n = str(c)[len("compare/"):].rsplit("/", 1)[0]
        if n not in names:
            names.append(n)
    return names


def _taus(frame: pd.DataFrame) -> list[str]:
    return [str(c).split("/", 1)[1] for c in _prefixed(frame, "tail_miss/")]


def _ratio(ms: float, mf: float) -> float:
    """m_S/m_F with the convention of :func:`rlvr_theory.groups.summary` (inf when only m_F is 0)."""
    if math.isnan(ms) or math.isnan(mf):
        return math.nan
    if mf == 0:
        return math.inf if ms != 0 else math.nan
    return ms / mf


def _overall(doc: dict, frame: pd.DataFrame) -> dict[str, float]:
    """Means over all groups of the run (the document's run summary), or over the steps when the
    document has none (a document built by hand)."""
    for key in ("summary",):
        d = doc.get(key)
        if isinstance(d, dict) and "m_S" in d:
            return {k: _num(v) for k, v in d.items() if not isinstance(v, (dict, list))}
    out = {c: _mean(frame[c]) for c in frame.columns if c != "step" and "/" not in str(c)}
    out["sign_ratio"] = _ratio(out.get("m_S", math.nan), out.get("m_F", math.nan))
    return out


# ------------------------------------------------------------------ figures
def _figure(w: float, h: float, ncols: int = 1) -> tuple[Any, np.ndarray]:
    """:func:`analysis.report.new_figure` with tight padding, its axes always as a 1-D array."""
    fig, axes = new_figure(w, h, ncols)
    fig.get_layout_engine().set(w_pad=0.04, h_pad=0.04)
    return fig, np.atleast_1d(axes)


_LINESTYLES = ("-", "--", "-.", ":")


def _series_axes(ax: Any, frame: pd.DataFrame, lines: Sequence[tuple[str, str]], window: int, ylabel: str,
                 *, log: bool = False, hline: float | None = None, hline_label: str | None = None,
                 band: tuple[float, float, str] | None = None, snap: tuple[float, float] | None = None,
                 scale: float = 1.0) -> bool:
    """Each ``(column, label)`` against step (thin) with its rolling mean (thick, same colour);
    a series equal to an earlier one says so in its label (:func:`analysis.report.coincides_with`).
    ``band=(lo, hi, label)``: a grey band (a range the verdict reads, e.g. "sign-balanced").

    ``snap=(target, tol)``: values within ``tol`` of ``target`` are drawn at ``target`` (the
    rounding noise of float32 logs: a sign ratio of 1 ± 1e-7 is 1).  A series that is flat
    (after snapping) sits inside a frame of half-height 25% of its value (``scale`` when the
    value is 0) instead of magnifying nothing.
    """
    x = frame["step"].to_numpy(dtype=float)
    drew = False
    shown: list[np.ndarray] = []
    drawn: list[tuple[str, np.ndarray]] = []
    for i, (col, label) in enumerate(lines):
        if col not in frame.columns:
            continue
        y = frame[col].to_numpy(dtype=float)
        if snap is not None:
            y = np.where(np.abs(y - snap[0]) <= snap[1], snap[0], y)
        if log:
            y = np.where((y > 0) & np.isfinite(y), y, np.nan)
        if not np.isfinite(y).any():
            continue
        color, ls = f"C{i}", _LINESTYLES[i % len(_LINESTYLES)]    # dashes keep coinciding series visible
        same = coincides_with(y, drawn)
        drawn.append((label, y))
        if same is not None:
            label = f"{label}\n(coincides with {same})"
        if window > 1:
            ax.plot(x, y, color=color, lw=0.8, alpha=0.35, marker="." if len(x) < 60 else None, ms=3)
            roll = pd.Series(y).rolling(window, center=True, min_periods=1).mean().to_numpy()
            ax.plot(x, roll, color=color, lw=1.8, ls=ls, label=label)
        else:
            ax.plot(x, y, color=color, lw=1.4, ls=ls, marker=".", ms=4, label=label)
        shown.append(y[np.isfinite(y)])
        drew = True
    if not drew:
        return False
    if hline is not None:
        ax.axhline(hline, color="k", lw=0.7, ls=":", label=hline_label)
    if band is not None:
        ax.axhspan(band[0], band[1], color="0.5", alpha=0.15, lw=0, zorder=0, label=band[2])
    if window > 1:  # what the two kinds of line mean, in the legend itself
        ax.plot([], [], color="0.5", lw=0.8, alpha=0.6, label="thin: value at each step")
        ax.plot([], [], color="0.5", lw=1.8, label=f"thick: rolling mean, {window} steps")
    allv = np.concatenate(shown)
    lo, hi = float(allv.min()), float(allv.max())
    if log and hi > 10 * lo:          # a log axis only where the values span more than a decade
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    elif hi - lo <= 1e-9 * max(abs(lo), abs(hi), 1e-300):          # flat: frame it, do not magnify noise
        half = 0.25 * abs(lo) if lo != 0 else 0.25 * scale
        bottom, top = lo - half, lo + half
        if hline is not None and not bottom <= hline <= top:     # keep the reference line in view
            bottom, top = min(bottom, hline - 0.3 * half), max(top, hline + 0.3 * half)
        ax.set_ylim(bottom, top)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.25, lw=0.5)
    # below the axes, never over the data; constrained layout makes room for it
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)
    return True


def _window_note(window: int) -> str:
    return (f"Each series against the run's steps: thin lines the value at each step, thick lines the centred "
            f"rolling mean over {window} steps (a tenth of the run)." if window > 1 else
            "Each series against the run's steps, one point per step (fewer than 20 steps: no rolling mean).")


def _plot(frame: pd.DataFrame, window: int, panels: Sequence[dict], w: float = 7.0) -> bytes | None:
    """One figure with one row of panels; ``None`` when no panel has data."""
    fig, axes = _figure(w, 3.6, len(panels))
    drew = [_series_axes(ax, frame, window=window, **p) for ax, p in zip(axes, panels)]
    if not any(drew):
        return None
    for ax, d in zip(axes, drew):
        if not d:
            ax.set_visible(False)
    return png_bytes(fig)


def _solve_rate_hist(doc: dict) -> tuple[bytes, Block] | None:
    """Bar chart and table of the groups per p̂ bin over the run (``doc["histogram"]``:
    ``bins`` labels ``0``, intervals of (0, 1), ``1``, and ``run`` counts)."""
    h = doc.get("histogram") or {}
    labels, counts = list(h.get("bins") or []), np.asarray(h.get("run") or [], dtype=float)
    if not labels or counts.size != len(labels):
        return None
    total = counts.sum()
    frac = counts / total if total else counts
    fig, axes = _figure(7.0, 3.4)
    ax = axes[0]
    x = np.arange(len(labels))
    colors = ["tab:red" if lab == "0" else "tab:green" if lab == "1" else "tab:blue" for lab in labels]
    ax.bar(x, frac, color=colors, edgecolor="white", lw=0.5)
    ax.set_xticks(x, [f"p̂ = {lab}" if lab in ("0", "1") else lab for lab in labels], rotation=45, ha="right",
                  fontsize=7)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="tab:red", label="p̂ = 0: all wrong (no signal)"),
                       Patch(color="tab:blue", label="0 < p̂ < 1: active"),
                       Patch(color="tab:green", label="p̂ = 1: all correct (no signal)")], fontsize=7, frameon=False)
    ax.set_xlabel("solve rate of a group p̂ = successes / rollouts with a reward")
    ax.set_ylabel("fraction of the run's groups")
    ax.grid(alpha=0.25, lw=0.5, axis="y")
    rows = [[lab, _fmt(int(c)), _pct(f)] for lab, c, f in zip(labels, counts, frac)]
    return png_bytes(fig), ("table", ["p̂", "groups", "share"], rows)


# ------------------------------------------------------------------ sections
def _label(d: dict | None) -> str:
    """``name(k=v, ...)`` of an advantage entry of the document."""
    if not d:
        return "—"
    if d.get("label"):
        return str(d["label"])
    params = ", ".join(f"{k}={v!r}" for k, v in (d.get("params") or {}).items())
    return f"{d.get('name')}({params})" if params else str(d.get("name"))


def _advantage_text(doc: dict) -> str:
    """Which advantage the masses are of: the family that reproduces the logged advantages, the
    logged advantages that match none, or the family of --advantage."""
    src = doc.get("masses_from")
    match = doc.get("advantage")
    search = doc.get("advantage_search") or {}
    if src is None and match:           # a document without masses_from (made by hand)
        src = "logged"
    if src == "logged":
        option = search.get("option")
        said = ""
        if option and not option.get("reproduced"):
            dev = option.get("max_abs_error")
            said = (f" --advantage {_label(option)} does not reproduce them"
                    + (f" (largest deviation {_fmt(_num(dev))})." if dev is not None else " (not defined on these rewards)."))
        if match:
            trainer = search.get("trainer") or {}
            how = {"option": " (--advantage, reproduced)",
                   "trainer": f" (named by {Path(str(trainer.get('file'))).name})" if trainer.get("file") else ""
                   }.get(match.get("from"), "")
            if match.get("fitted"):
                how += " with " + ", ".join(match["fitted"]) + " fitted to the log"
            return (f"Advantage used: the logged advantages are reproduced by {_label(match)}{how} (largest "
                    f"deviation {_fmt(_num(match.get('max_abs_error')))}); the masses are those of the logged "
                    "advantages." + said)
        best = search.get("best")
        close = search.get("close_tolerance", 0.05)
        if "closest" in search:
            closest = search.get("closest")
        else:  # a document written before "closest" existed: the same rule on its "best"
            closest = best if best and _num(best.get("max_rel_error")) <= close else None
        if closest:
            tail = (f" The closest of {_fmt(search.get('n_candidates'))} candidates is {_label(closest)} (largest "
                    f"deviation {_fmt(_num(closest.get('max_abs_error')))}).")
        elif best:
            tail = (f" No registry family comes close: the smallest largest deviation is "
                    f"{_fmt(_num(best.get('max_abs_error')))} ({_pct(_num(best.get('max_rel_error')))} of max |A|; "
                    f"a family is called close under {_pct(close)}).")
        else:
            tail = ""
        return ("Advantage used: the logged advantages match no registry family within relative tolerance "
                f"{_fmt(_num(search.get('tolerance')))}; the masses are those of the logged advantages." + tail + said)
    if src == "option":
        return (f"Advantage used: the log has no advantages; the masses are those of {_label(doc.get('masses_advantage'))} "
                "(--advantage) on the logged rewards.")
    return ("Advantage used: unknown: the log has no advantages and none was chosen, so the masses, Σ|A| and N_eff "
            "are not computed (choose one with --advantage NAME).")


def _sign_text(ratio: float) -> str:
    if math.isnan(ratio):
        return "Sign ratio m_S/m_F: no value (no masses, or no group carried signal)."
    r = "∞" if math.isinf(ratio) else fmt_number(ratio, 3)
    if ratio > 1.05:
        what = ("success-heavy: more gradient mass reinforces successes than suppresses failures. FADE Sec. 4.1: "
                "reinforcing successes collapses entropy, the faster the larger the sign ratio and the solve "
                "rate; a bias toward successes pays only at low solve rates")
    elif ratio < 0.95:
        what = ("failure-heavy: more gradient mass suppresses failures than reinforces successes. FADE Sec. 4.1-4.2: "
                "this delays entropy collapse and speeds exploration, but collapses the update toward rank 1; "
                "FADE reserves it for late-stage exploitation")
    else:
        what = ("sign-balanced (within 5%): FADE's entropy-drift term (m_S − m_F)·H vanishes and entropy falls "
                "through the covariance term alone, with no mechanism to recover")
    return (f"Sign ratio m_S/m_F = {r} (mean m_S over mean m_F of the run's groups): {what}. Caveat: for a softmax "
            "policy the drift term is not part of the exact first-order entropy change (docs/categorical.md); "
            "read it as FADE's diagnostic of sign imbalance, not as a prediction.")


def _verdict(page: Page, doc: dict, frame: pd.DataFrame) -> None:
    page.add(("h2", "Verdict"))
    o = _overall(doc, frame)
    lines: list[str] = []
    suspect = doc.get("suspect_read") or {}
    if suspect.get("problems"):
        lines.append("Suspect read, audited anyway (--allow-suspect-read): " + "; ".join(suspect["problems"])
                     + ". Every number below is of the rows as read: check how the log marks its groups first.")
    if "frac_all_correct" in o and "frac_all_wrong" in o:
        ac, aw = o["frac_all_correct"], o["frac_all_wrong"]
        last = ""
        if {"frac_all_correct", "frac_all_wrong"} <= set(frame.columns) and len(frame) >= 10:
            _, z = _tenths(frame.assign(_z=frame["frac_all_correct"] + frame["frac_all_wrong"]), "_z")
            last = f"; {_pct(z)} over the last tenth of the steps"
        rewards = doc.get("rewards") or {}
        if rewards.get("kind") == "shaped":
            lines += _shaped_views(o, rewards, ac, aw)
        else:
            lines.append(f"Zero-signal groups: {_pct(ac + aw)} of the run's groups (all correct {_pct(ac)}, all wrong "
                         f"{_pct(aw)}{last}). Their rewards are all equal, so they add no gradient; a step's masses "
                         "are means over all its groups with these counting as 0.")
    lines.append(_sign_text(o.get("sign_ratio", math.nan)))
    taus = _taus(frame)
    if taus:
        parts = [f"τ = {t}: {_pct(_mean(frame[f'tail_miss/{t}']))}" for t in taus]
        lines.append("Tail-miss risk (F-GRPO Lemma 3.1 at each group's p̂): the expected fraction of groups that are "
                     "active yet miss a correct mode of mass τ, mean over steps: " + "; ".join(parts) + ".")
    if {"pass_at_1", "pass_at_G"} <= set(frame.columns):
        (a1, b1), (aG, bG) = _tenths(frame, "pass_at_1"), _tenths(frame, "pass_at_G")
        tr = doc.get("trends") or {}
        s1, sG = (_num((tr.get(k) or {}).get("slope_per_100_steps")) for k in ("pass_at_1", "pass_at_G"))
        s1, sG = (0.0 if abs(x) < 1e-9 else x for x in (s1, sG))   # rounding noise of a flat series
        d1, dG = b1 - a1, bG - aG
        if len(frame) < 2 or math.isnan(d1) or math.isnan(dG):
            trend = "too few steps for a trend"
        elif min(aG, bG) >= 0.98 and d1 > 0.01:
            trend = ("pass@G is saturated near 1 (almost every prompt is solved at least once in G tries), so pass@1 "
                     "rising means the same prompts are solved more reliably: sharpening, with no coverage left to "
                     "gain or lose at this G")
        elif d1 > 0.01 and dG < -0.01:
            trend = ("pass@1 rises while pass@G falls: sharpening at the cost of coverage (prompts solved before are "
                     "no longer solved in G tries)")
        elif d1 > 0.01 and dG < 0.5 * d1:
            trend = ("pass@1 rises faster than pass@G: the policy is sharpening (concentrating on answers it already "
                     "finds) more than it learns to solve new prompts")
        elif d1 > 0.01:
            trend = "pass@1 and pass@G rise together: the run solves more prompts; it is not only sharpening"
        elif dG < -0.01:
            trend = "pass@G falls: the run loses prompts it could solve (coverage shrinks)"
        elif d1 < -0.01:
            trend = "pass@1 falls: the policy solves its prompts less reliably"
        else:
            trend = "pass@1 is flat: no clear progress over these steps"
        G = doc.get("group_size")
        slopes = f"; slopes {_fmt(s1)} and {_fmt(sG)} per 100 steps" if not (math.isnan(s1) or math.isnan(sG)) else ""
        lines.append(f"pass@1 {_fmt(a1)} → {_fmt(b1)} and pass@G{f' (G = {G})' if G else ''} {_fmt(aG)} → {_fmt(bG)} "
                     f"(first vs last tenth of the steps{slopes}): {trend}.")
    lines.append(_advantage_text(doc))
    page.add(*[("p", ln) for ln in lines])


def _shaped_views(o: dict, rewards: dict, ac: float, aw: float) -> list[str]:
    """The verdict's two labelled views of shaped rewards (docs/audit.md, "Shaped rewards")."""
    T = rewards.get("success_threshold")
    eq, sh = o.get("frac_equal_rewards", math.nan), o.get("frac_shaped_signal", math.nan)
    return [f"What the trainer did (shaped rewards, as logged): {_pct(eq)} of the run's groups had all-equal rewards, "
            f"so a group-relative advantage of 0 and no gradient; the other {_pct(1 - eq)} carried a gradient. "
            "Masses, Σ|A| and N_eff are of the advantages on these real-valued rewards.",
            f"Pass/fail at reward ≥ {_fmt(T)}: all pass {_pct(ac)}, all fail {_pct(aw)} of the groups; {_pct(sh)} of "
            "the groups are all-pass or all-fail yet have differing rewards, so they did move the policy (through "
            "the shaped part of the reward). Solve rates, pass@k and tail miss are of this view."]


def _run(page: Page, doc: dict, frame: pd.DataFrame) -> None:
    src = doc.get("source") or {}
    o = _overall(doc, frame)
    page.add(("h2", "Run"))
    paths = [str(p) for p in (src.get("paths") or [])]
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    sizes = doc.get("group_sizes") or {}
    G = doc.get("group_size")
    rows = [["format", src.get("format") or "—"], ["input", shown or "—"],
            ["files read", _fmt(src.get("n_files"))], ["grouping", src.get("grouping") or "—"],
            ["group size G", _fmt(G) if G is not None else
             "unequal: " + ", ".join(f"{k} rollouts × {_fmt(v)} groups" for k, v in sizes.items())],
            ["steps", f"{_fmt(len(frame))} ({_fmt(int(frame['step'].min()))} to {_fmt(int(frame['step'].max()))})"]]
    for key, label in (("n_groups", "groups"), ("n_rollouts", "rollouts with a reward"),
                       ("n_nan_rewards", "rollouts without a reward (NaN: left out of their groups)")):
        if key in o and not math.isnan(o[key]):
            rows.append([label, _fmt(int(o[key]))])
    for key, label in (("n_padding_rows_dropped", "padding rows dropped"),
                       ("n_duplicate_rows_dropped", "duplicate rows dropped"),
                       ("n_bad_lines_skipped", "unreadable lines skipped")):
        if src.get(key):
            rows.append([label, _fmt(src[key])])
    page.add(("table", ["", "value"], rows))
    for note in list(src.get("notes") or []) + list(doc.get("notes") or []):
        page.add(("p", f"Note: {note}"))
    val = (doc.get("val") or {}).get("summary")
    if val:
        page.add(("h3", "Validation rollouts"))
        keys = [k for k in ("n_groups", "n_rollouts", "reward_mean", "solve_rate_mean", "frac_all_correct",
                            "frac_all_wrong", "pass_at_1", "pass_at_G") if k in val]
        page.add(("table", ["", "value"], [[_header(k), _cell(k, val[k])] for k in keys]))


_TABLE_COLS = ("n_groups", "reward_mean", "solve_rate_mean", "frac_all_correct", "frac_all_wrong", "m_S", "m_F",
               "sign_ratio", "abs_adv_sum", "n_eff", "pass_at_1", "pass_at_G")
_PCT_COLS = ("frac_all_correct", "frac_all_wrong", "frac_zero_signal", "frac_equal_rewards", "frac_shaped_signal")
_INT_COLS = ("n_groups", "n_rollouts", "n_nan_rewards")
def _header(col: str) -> str:
    if col.startswith("tail_miss/"):
        return f"tail miss τ = {col.split('/', 1)[1]}"
    return HEADERS.get(col, col)


def _cell(col: str, v: Any) -> str:
    x = _num(v)
    if col in _PCT_COLS:
        return _pct(x)
    if col in _INT_COLS and not math.isnan(x):
        return _fmt(int(x))
    return _fmt(x)


def _per_step(page: Page, doc: dict, frame: pd.DataFrame) -> None:
    page.add(("h2", "Per step"))
    cols = [c for c in _TABLE_COLS if c in frame.columns]
    if (doc.get("rewards") or {}).get("kind") == "shaped":
        at = cols.index("frac_all_wrong") + 1 if "frac_all_wrong" in cols else len(cols)
        cols[at:at] = [c for c in ("frac_equal_rewards", "frac_shaped_signal") if c in frame.columns]
    if "n_nan_rewards" in frame.columns and (frame["n_nan_rewards"].fillna(0) > 0).any():
        cols.insert(1, "n_nan_rewards")
    n, k = len(frame), 5
    idx: list[int | None] = list(range(n)) if n <= 2 * k + 1 else list(range(k)) + [None] + list(range(n - k, n))
    rows = []
    for i in idx:
        if i is None:
            rows.append(["…"] + [""] * len(cols))
        else:
            r = frame.iloc[i]
            rows.append([_fmt(int(r["step"]))] + [_cell(c, r[c]) for c in cols])
    page.add(("p", "The first and last steps (all steps are in report.json). A step's value is the mean over its "
                   "groups, zero-signal groups counting as 0; m_S/m_F is the ratio of the step's mean masses; N_eff "
                   "is over the step's rollouts."))
    page.add(("table", ["step"] + [_header(c) for c in cols], rows))
    page.add(("h3", "Over the run"))
    extra = [c for c in ("frac_zero_signal", "drift_per_nat", "entropy_drift") if c in frame.columns]
    extra += _prefixed(frame, "tail_miss/") + [c for c in ("fade_alpha", "fade_delta", "agrae_omega")
                                                 if c in frame.columns]
    srows = []
    for c in [c for c in cols if c != "n_nan_rewards"] + extra:
        v = frame[c].to_numpy(dtype=float)
        fin = v[np.isfinite(v)]
        if not fin.size:
            continue
        first, last = _tenths(frame, c)
        srows.append([_header(c)] + [_cell(c, x) for x in (first, last, _mean(v), float(fin.min()), float(fin.max()))])
    page.add(("p", "Each series over the run's steps: the mean over the first and the last tenth of the steps, "
                   "the mean over all steps, and the extremes."))
    page.add(("table", ["series", "first tenth", "last tenth", "mean", "min", "max"], srows))


def _by_size(page: Page, doc: dict, frame: pd.DataFrame) -> None:
    by = doc.get("by_group_size")
    if not by:
        return
    page.add(("h2", "By group size"))
    page.add(("p", "Groups of unequal sizes: every advantage is computed per size; the run's means per size."))
    rows = []
    for size, d in by.items():
        r = d.get("summary") or {}
        rows.append([size] + [_cell(c, r.get(c)) for c in ("n_groups", "frac_all_correct", "frac_all_wrong", "m_S",
                                                           "m_F", "sign_ratio", "abs_adv_sum", "pass_at_1",
                                                           "pass_at_G")])
    page.add(("table", ["rollouts per group", "groups", "all-correct", "all-wrong", "m_S", "m_F", "m_S/m_F",
                        "Σ|A| per group",
                        "pass@1", "pass@G"], rows))


def _solve_rates(page: Page, doc: dict, frame: pd.DataFrame) -> None:
    page.add(("h2", "Solve rates"))
    got = _solve_rate_hist(doc)
    if got is None:
        page.add(("p", "The document holds no solve-rate histogram."))
        return
    png, table = got
    page.img("solve_rate_hist.png", png, "The solve rate p̂ of every group of the run: red and green bars are the "
                                         "zero-signal groups.")
    page.add(table)


def _what_if(page: Page, doc: dict, frame: pd.DataFrame, window: int) -> None:
    labels = _compare_labels(doc, frame)
    if not labels:
        return
    page.add(("h2", "What if: other advantages on the same rewards"))
    comp = doc.get("compare") or {}
    keys = ("m_S", "m_F", "sign_ratio", "abs_adv_sum")
    o = _overall(doc, frame)
    rows = [["in use"] + [_fmt(o.get(k, math.nan)) for k in keys]]
    for lab in labels:
        r = (comp.get(lab) or {}).get("summary") or {}
        vals = []
        for k in keys:
            col = f"compare/{lab}/{k}"
            vals.append(_fmt(_num(r[k])) if k in r else _fmt(_mean(frame[col])) if col in frame.columns else "—")
        rows.append([lab] + vals)
    page.add(("p", "The masses each family would have given the same groups (same rewards, same zero-signal "
                   "groups), means over the run's groups; m_S/m_F is the ratio of the means."))
    page.add(("table", ["advantage", "m_S", "m_F", "m_S/m_F", "Σ|A| per group"], rows))
    panels = [{"lines": [(mass, f"{mass}, in use")] + [(f"compare/{lab}/{mass}", f"{mass}, {lab}") for lab in labels],
               "ylabel": f"mass {mass} per group"} for mass in ("m_S", "m_F")]
    page.img("compare_masses.png", _plot(frame, window, panels, w=10.0),
             "m_S (left) and m_F (right) per step, of the advantage in use and of each --compare family.")


def _plots(page: Page, doc: dict, frame: pd.DataFrame, window: int) -> None:
    page.add(("h2", "Series against step"))
    page.add(("p", _window_note(window)))
    G = doc.get("group_size")
    mass = _mean(np.abs(frame[["m_S", "m_F"]].to_numpy(dtype=float))) if {"m_S", "m_F"} <= set(frame.columns) \
        else math.nan
    mass = mass if np.isfinite(mass) and mass > 0 else 1.0     # the scale of the masses: what counts as noise
    shaped = (doc.get("rewards") or {}).get("kind") == "shaped"
    specs: list[tuple[str, list[dict], str, float]] = [
        ("reward.png", [{"lines": [("reward_mean", "mean reward r̄"), ("solve_rate_mean", "mean solve rate p̂")],
                         "ylabel": "r̄, p̂"},
                        {"lines": [("pass_at_1", "pass@1"), ("pass_at_G", f"pass@G{f' (G = {G})' if G else ''}")],
                         "ylabel": "unbiased pass@k"}],
         "Mean reward and mean solve rate (left); unbiased pass@1 and pass@G (right): pass@1 rising while pass@G "
         "stays flat is sharpening.", 10.0),
        ("zero_signal.png", [{"lines": [("frac_all_correct", "all correct (p̂ = 1)"),
                                        ("frac_all_wrong", "all wrong (p̂ = 0)")]
                              + ([("frac_equal_rewards", "all rewards equal (zero advantage)")] if shaped else []),
                              "ylabel": "fraction of the step's groups"}],
         "Zero-signal groups per step" + (": pass/fail at the threshold, and the groups whose shaped rewards all "
                                          "equal (the trainer's zero-advantage groups)." if shaped else "."), 7.0),
        ("masses.png", [{"lines": [("m_S", "m_S: mass on successes"), ("m_F", "m_F: mass on failures")],
                         "ylabel": "mean mass per group"},
                        {"lines": [("sign_ratio", "m_S/m_F")], "ylabel": "sign ratio m_S/m_F", "log": True,
                         "hline": 1.0, "hline_label": "balanced: m_S = m_F", "snap": (1.0, 1e-6),
                         "band": (0.95, 1.05, "read as sign-balanced: 0.95 to 1.05")}],
         "Gradient masses of the advantages used (left; per group (1/k)Σ_S A and −(1/k)Σ_F A, as "
         "rlvr_theory.masses) and their ratio (right, log scale).", 10.0),
        ("weights.png", [{"lines": [("abs_adv_sum", "Σ_i |A_i|")], "ylabel": "mean Σ|A| per group"},
                         {"lines": [("n_eff", "N_eff = (Σ|A_i|)² / Σ A_i²")], "ylabel": "Kish N_eff (rollouts)"}],
         "Total absolute advantage per group (left) and the Kish effective sample size of the step's update "
         "weights (right).", 10.0),
        ("drift.png", [{"lines": [("drift_per_nat", "m_S − m_F"), ("entropy_drift", "(m_S − m_F)·H")],
                        "ylabel": "drift term", "hline": 0.0, "hline_label": "no drift",
                        "snap": (0.0, 1e-6 * mass), "scale": mass}],
         "FADE's entropy-drift term (Eq. 7, Thm. 13.1) per nat of entropy, and at the logged entropy when given "
         "(caveat in the verdict).", 7.0),
    ]
    taus = _taus(frame)
    if taus:
        specs.append(("tail_miss.png", [{"lines": [(f"tail_miss/{t}", f"τ = {t}") for t in taus],
                                         "ylabel": "Pr(active, mode τ missed)"}],
                      "Expected fraction of groups that are active yet miss a correct mode of mass τ (F-GRPO "
                      "Lemma 3.1 at each group's p̂ and size).", 7.0))
    specs.append(("schedule.png", [{"lines": [("fade_alpha", "FADE α"), ("fade_delta", "FADE δ"),
                                              ("agrae_omega", "A-GRAE ω")], "ylabel": "α, δ, ω"}],
                  "What FADE's schedule (α from the solve rate; δ from the entropy, when given) and A-GRAE's (ω) "
                  "would have chosen on this run's signals.", 7.0))
    for name, panels, caption, w in specs:
        page.img(name, _plot(frame, window, panels, w=w), caption)


def render(doc: dict, steps_frame: pd.DataFrame | None = None) -> tuple[list[Block], dict[str, bytes]]:
    """The report's blocks and PNG images (name → bytes), as :func:`write_report` writes them.

    ``steps_frame``: the per-step table (:func:`analysis.audit.metrics.step_table`); ``None``
    reads ``doc["steps"]`` and the what-if series of ``doc["compare"]``.

    Examples
    --------
    >>> doc = {"source": {"format": "table"}, "steps": [{"step": 0, "m_S": 0.3, "m_F": 0.1}]}
    >>> blocks, images = render(doc)
    >>> blocks[0], blocks[1][1][:38]
    (('h2', 'Verdict'), 'Sign ratio m_S/m_F = 3 (mean m_S over ')
    """
    if not isinstance(doc, dict) or "steps" not in doc or "source" not in doc:
        raise ValueError("doc must be the dict returned by analysis.audit.metrics.audit")
    from . import trainer_report

    page = Page()
    trainer = doc.get("trainer_log")
    if not doc.get("steps") and steps_frame is None and trainer:     # a metric log alone
        trainer_report.verdict(page, doc)
        trainer_report.run(page, doc)
        trainer_report.sections(page, doc)
        return page.blocks, page.images
    frame = _steps(doc, steps_frame)
    window = rolling_window(len(frame))
    _verdict(page, doc, frame)
    if trainer:
        trainer_report.verdict(page, doc, heading=False)
    _run(page, doc, frame)
    if trainer:
        trainer_report.run(page, doc)
    for section in (_per_step, _by_size, _solve_rates):
        section(page, doc, frame)
    if trainer:
        trainer_report.sections(page, doc)
    _what_if(page, doc, frame, window)
    _plots(page, doc, frame, window)
    return page.blocks, page.images


def _is_audit_doc(path: Path) -> bool:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and "steps" in d and "source" in d


def check_report_out(out: Any, *, overwrite: bool = False, arg: str = "out") -> Path:
    """:func:`rlvr_plumbing.io.check_out` for a report directory, and a non-empty ``out`` without
    ``overwrite`` must hold an earlier *audit* report (its report.json has ``source`` and
    ``steps``), not another command's report.  Returns ``Path(out)``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "report.json").write_text('{"checkpoints": []}')       # an rlvr-diff report
    >>> check_report_out(d)
    Traceback (most recent call last):
    ...
    ValueError: out: ... holds a report.json that is not an rlvr-audit report; choose a new directory or pass --overwrite
    """
    path = check_out(out, markers=REPORT_MARKERS, overwrite=overwrite, arg=arg)
    if not overwrite and path.is_dir() and any(path.iterdir()) and not _is_audit_doc(path / "report.json"):
        raise ValueError(f"{arg}: {str(path)!r} holds a report.json that is not an rlvr-audit report; choose a new "
                         "directory or pass --overwrite")
    return path


def write_report(doc: dict, steps_frame: pd.DataFrame | None, out: str | os.PathLike, *,
                 overwrite: bool = False) -> Path:
    """Write ``report.md``, ``report.html``, ``report.json`` and the PNGs of an audit into ``out``.

    Parameters
    ----------
    doc : dict
        The ``report.json`` document of :func:`analysis.audit.metrics.audit` (written as is,
        strict JSON: NaN → ``null``, ±inf → ``"inf"``/``"-inf"``).
    steps_frame : pandas.DataFrame or None
        The per-step table (:func:`analysis.audit.metrics.step_table`: its what-if,
        ``tail_miss/<tau>`` and schedule columns are plotted); ``None`` uses ``doc["steps"]``.
    out : path
        The report directory.  It may not exist yet, be empty, or hold an earlier audit report
        (replaced when the new one is complete); anything else is refused with a ``ValueError``
        before any work unless ``overwrite`` (then it is replaced whole).
    overwrite : bool
        Replace a non-empty ``out`` that is not an earlier audit report.

    Returns
    -------
    pathlib.Path
        ``out``, complete.  A write the system refuses raises ``OSError`` naming the file and
        leaves ``out`` as it was.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> doc = {"source": {"format": "table", "paths": ["run.csv"]}, "group_size": 4, "advantage": None,
    ...        "steps": [{"step": s, "n_groups": 2, "m_S": 0.2, "m_F": 0.25, "frac_all_correct": 0.0,
    ...                   "frac_all_wrong": 0.5} for s in range(3)], "compare": {}}
    >>> out = write_report(doc, None, pathlib.Path(tempfile.mkdtemp()) / "audit")
    >>> sorted(p.name for p in out.iterdir())
    ['masses.png', 'report.html', 'report.json', 'report.md', 'zero_signal.png']
    """
    path = check_report_out(out, overwrite=overwrite)  # before any work
    blocks, images = render(doc, steps_frame)

    def build(tmp: Path) -> None:
        for name, data in images.items():
            atomic_write(tmp / name, _writer(data))
        atomic_write_text(tmp / "report.md", render_markdown(TITLE, blocks))
        atomic_write_text(tmp / "report.html", render_html(TITLE, blocks, images))
        atomic_write_text(tmp / "report.json", to_json(doc) + "\n")

    return atomic_dir(path, build, markers=None if overwrite else REPORT_MARKERS)


def _writer(data: bytes) -> Callable[[str], Any]:
    return lambda p: Path(p).write_bytes(data)
