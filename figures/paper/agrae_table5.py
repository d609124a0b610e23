"""A-GRAE Table 5 (ablations) and App. D.5 (collapse frequency) on the tiny GRPO trainer.

The runs take far longer than a figure may (sixty GRPO runs of the tiny-cpu model, about a
minute each on a shared core), so this figure reads the committed CSV
``figures/data/agrae_collapse.csv`` that ``python examples/seed_experiments.py collapse --seeds 10``
wrote (one row per run; the script and ``docs/seed_experiments.md`` give the setup).  A run
*collapses* when the fraction of its fully unsolved training groups, averaged over the last 20 %
of steps, exceeds its average over the first 20 % by at least 0.25 (App. D.3 characterises the
collapse by the rising count of fully unsolved questions and gives no threshold).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, passk_bars, subplots

CSV = Path(__file__).resolve().parents[1] / "data" / "agrae_collapse.csv"
ORDER = ("GRPO", "Negative-Dominant", "A-GRAE (group level)", "A-GRAE (sample level)", "A-GRAE (full)",
         "Dr.GRPO + A-GRAE")
#: A-GRAE App. D.5: collapsed runs out of 10 (Negative-Dominant; the attenuation suppression strategy,
#: i.e. the group-level asymmetry)
PAPER_COLLAPSES = {"Negative-Dominant": 3, "A-GRAE (group level)": 0}
#: A-GRAE Table 5, MATH, Qwen2.5-Math-7B: pass@1 and pass@256
PAPER_MATH = {"GRPO": (76.5, 95.0), "A-GRAE (sample level)": (77.8, 96.0), "A-GRAE (group level)": (77.6, 97.0),
              "A-GRAE (full)": (78.3, 96.5)}


def data() -> pd.DataFrame:
    runs = pd.read_csv(CSV)
    k = int([c for c in runs if c.startswith("pass@") and c != "pass@1"][0].split("@")[1])
    g = runs.groupby("variant")
    out = pd.DataFrame({"runs": g.size(), "collapsed": g.collapsed.sum(),
                        "pass1": g["pass@1"].mean(), "pass1_se": g["pass@1"].sem(),
                        "passk": g[f"pass@{k}"].mean(), "passk_se": g[f"pass@{k}"].sem(),
                        "rise": g.frac_all_wrong_rise.mean(), "rise_max": g.frac_all_wrong_rise.max(), "sft_pass1": g["sft_pass@1"].first(),
                        "sft_passk": g[f"sft_pass@{k}"].first(), "steps": g.steps.first()})
    out["k"] = k
    return out.reindex([v for v in ORDER if v in out.index]).reset_index(names="variant")


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, width=5.2, height=3.9)
    x = np.arange(len(df))
    names = [v.replace(" + ", " +\n").replace(" (", "\n(") for v in df.variant]
    ax = axes[0]
    bars = ax.bar(x, df.collapsed, color="C3", alpha=0.8, label="collapsed runs (ours)")
    ax.bar_label(bars, labels=[f"{int(c)}/{int(r)}\nrise {m:+.2f}" for c, r, m in zip(df.collapsed, df.runs, df.rise)],
                 fontsize=6.5, padding=2)
    for j, (v, n) in enumerate(PAPER_COLLAPSES.items()):
        if v in set(df.variant):
            i = int(np.flatnonzero(df.variant == v)[0])
            paper_point(ax, i, n, label="paper (App. D.5, 7B): of 10 runs" if j == 0 else "_nolegend_",
                        values=[n])
    ax.set_xticks(x, names, fontsize=6.5)
    ax.text(0.01, 0.62, "labels: collapsed/runs and the mean rise of the fully\nunsolved fraction "
            "(last 20 % of steps − first 20 %;\ncollapse: rise ≥ 0.25)", transform=ax.transAxes, fontsize=6.5,
            va="top", color="0.3")
    ax.set(ylabel=f"runs that collapsed, of {int(df.runs.max())}", ylim=(-0.4, 10.5),
           title=f"collapse frequency ({int(df.steps.iloc[0])} GRPO steps, sort-3)")
    ax.legend(fontsize=7, loc="upper right")
    paper_note(ax, "paper (Table 5, 7B): the sample-level asymmetry\nraises pass@1, the group-level one pass@k,\n"
               "the full A-GRAE raises pass@1 most; on Dr. GRPO\nit raises pass@1 too (1 = yes, claims)", [1.0],
               loc="upper center", bbox_to_anchor=(0.5, -0.28), bbox_transform=ax.transAxes)
    ax = axes[1]
    passk_bars(ax, df, names, fontsize=6.5)
    ax.set(ylabel="held-out solve rate", ylim=(0, 1.15), title="held-out pass@k after training")
    ax.legend(fontsize=6.5, loc="upper left", ncol=2)
    paper_note(ax, "paper (Table 5, MATH, 7B) pass@1 / pass@256:\n" + "\n".join(
        f"{v}: {a} / {b}" for v, (a, b) in PAPER_MATH.items()) + "\n(not reproducible here)",
        [x for ab in PAPER_MATH.values() for x in ab], loc="upper center", bbox_to_anchor=(0.5, -0.28),
        bbox_transform=ax.transAxes)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    s = df.set_index("variant")
    n = int(s.runs.max())
    k = int(s.k.iloc[0])
    out = []
    for v, paper in PAPER_COLLAPSES.items():
        ours = float(s.collapsed[v])
        note = ""
        if ours != paper:
            note = (f"measured {int(ours)} of {int(s.runs[v])} runs: the fully unsolved fraction rose by "
                    f"{s.rise[v]:+.3f} on average, {s.rise_max[v]:+.3f} at most (threshold +0.25); at this scale "
                    f"(254k-parameter model, {int(s.steps[v])} steps, lr 1e-3) the runs that collapse per variant are "
                    f"{', '.join(f'{a} {int(b)}' for a, b in s.collapsed.items())}")
        out.append(Claim(f"{v}: runs that collapse, of {n}", "A-GRAE App. D.5", float(paper), ours, 0, note=note))

    def direction(text, col, hi, lo):
        """Claim that variant ``hi`` beats ``lo`` on ``col`` (mean over seeds), with the measured difference."""
        d = s[col][hi] - s[col][lo]
        se = float(np.hypot(s[col + "_se"][hi], s[col + "_se"][lo]))
        detail = f"measured {s[col][hi]:.3f} vs {s[col][lo]:.3f}, difference {d:+.3f} ± {se:.3f} (s.e., {n} seeds)"
        why = ("; within 2 s.e. of zero: no detectable effect at this scale" if abs(d) <= 2 * se
               else "; the opposite direction at this scale, by more than 2 s.e.")
        return Claim(text + " (1 = yes: higher by more than 2 s.e.)", "A-GRAE Table 5, Sec. 6", 1.0,
                     float(d > 2 * se), 0, note=detail + ("" if d > 2 * se else why))

    out.append(direction("sample-level asymmetry raises pass@1 over GRPO", "pass1", "A-GRAE (sample level)", "GRPO"))
    out.append(direction(f"group-level asymmetry raises pass@k over GRPO (here k = {k})", "passk",
                         "A-GRAE (group level)", "GRPO"))
    out.append(direction("full A-GRAE raises pass@1 over the sample-level ablation", "pass1", "A-GRAE (full)",
                         "A-GRAE (sample level)"))
    out.append(direction("full A-GRAE raises pass@1 over the group-level ablation", "pass1", "A-GRAE (full)",
                         "A-GRAE (group level)"))
    out.append(direction("A-GRAE on Dr. GRPO raises pass@1 over GRPO (Table 2: 78.6 vs 76.5 on MATH)", "pass1",
                         "Dr.GRPO + A-GRAE", "GRPO"))
    for v, (a, b) in PAPER_MATH.items():
        out.append(Claim(f"{v}: MATH pass@1 (%)", "A-GRAE Table 5", a, float("nan"), 0,
                         note="Qwen2.5-Math-7B on MATH: not reproducible here (tiny model, sorting task)"))
        out.append(Claim(f"{v}: MATH pass@256 (%)", "A-GRAE Table 5", b, float("nan"), 0,
                         note="Qwen2.5-Math-7B on MATH: not reproducible here (tiny model, sorting task)"))
    return out


register(FigureSpec("agrae_table5", "A-GRAE ablations and collapse frequency on the tiny trainer",
                    "A-GRAE Table 5, App. D.5", data, plot, claims))
