"""F-GRPO Fig. 4: the categorical-policy simulation of App. J.

(a) total correct mass Q_pos vs step, (b) retained positive mass M_ret (F-GRPO Eq. 26) vs step,
(c) final Q_pos and M_ret vs group size N; solid γ = 0, dashed γ = 1.  Data from
:func:`simulations.categorical.simulate` on the ``fgrpo-fig4-small`` preset (N ∈ {4, 1024,
131,072}, one seed, 600 steps); ``rlvr-figures make fgrpo_fig4 --full`` draws the paper-scale
``fgrpo-fig4`` sweep (17 N × 2 γ × 4 seeds × 1,000 steps; also ``rlvr-sim categorical``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from simulations import categorical as sc

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots


def data(name: str = "fgrpo-fig4-small") -> pd.DataFrame:
    traj, _ = sc.simulate(sc.preset(name), device="auto")
    return traj.assign(preset=name)


def _mean(df: pd.DataFrame) -> pd.DataFrame:
    return df.groupby(["N", "gamma", "step"], as_index=False)[["Q_pos", "M_ret", "entropy", "p_anchor"]].mean()


def _styles(ax, entries, **kw):
    """A legend on ``ax``: proxy handles ``(label, Line2D kwargs)``, then the labelled artists of ``ax``."""
    handles = [Line2D([], [], **{"color": "0.3", **style}) for _, style in entries]
    labels = [label for label, _ in entries]
    own = ax.get_legend_handles_labels()
    ax.legend(handles + own[0], labels + own[1], fontsize=7.5, **kw)


def plot(df: pd.DataFrame):
    m = _mean(df)
    fig, axes = subplots(3, width=4.4, height=3.6)
    Ns = sorted(m.N.unique())
    colors = {n: f"C{i}" for i, n in enumerate(Ns)}
    for (n, g), cur in m.groupby(["N", "gamma"]):
        ls = "-" if g == 0 else "--"
        axes[0].plot(cur.step, cur.Q_pos, color=colors[n], ls=ls)
        axes[1].plot(cur.step, cur.M_ret, color=colors[n], ls=ls)
    s0 = m[m.step == 0].iloc[0]
    final = m[m.step == m.step.max()]
    for g, cur in final.groupby("gamma"):
        ls, fill, size = ("-", None, 6) if g == 0 else ("--", "white", 9)
        axes[2].plot(cur.N, cur.Q_pos, "o" + ls, color="C0", mfc=fill, ms=size, zorder=3 if g == 0 else 2)
        axes[2].plot(cur.N, cur.M_ret, "s" + ls, color="C3", mfc=fill, ms=size, zorder=3 if g == 0 else 2)
    big, mid = Ns[-1], Ns[len(Ns) // 2]
    paper_point(axes[0], 0, 0.63, label=r"paper: $Q_{pos}$ = 0.63 at step 0")
    paper_note(axes[0], "paper (Fig. 4a): $Q_{pos}$ rises for every N\n"
               f"(App. J: anchor prob. 4.7e-4 at step 0; ours {s0.p_anchor:.2g})", [1.0, 4.7e-4],
               loc="upper center", bbox_to_anchor=(0.5, -0.24), bbox_transform=axes[0].transAxes)
    paper_note(axes[1], f"paper (Fig. 4b-c, Sec. 5.1): $M_{{ret}}$ collapses at\nintermediate N (here N = {mid}); "
               "γ = 1 retains more", [1.0],
               loc="upper center", bbox_to_anchor=(0.5, -0.24), bbox_transform=axes[1].transAxes)
    paper_point(axes[2], big, 1.0, label=r"paper: $M_{ret}$ ≈ 1")
    paper_note(axes[2], "paper, Qwen2.5-7B (not reproducible here):\npass@256 of GRPO 64.1 → 70.3 with F-GRPO",
               [64.1, 70.3], loc="upper center", bbox_to_anchor=(0.5, -0.24), bbox_transform=axes[2].transAxes)
    gamma_styles = [(r"solid: $\gamma$ = 0 (GRPO)", {"ls": "-"}), (r"dashed: $\gamma$ = 1 (F-GRPO)", {"ls": "--"})]
    n_styles = [(f"N = {n}", {"color": colors[n]}) for n in Ns]
    _styles(axes[0], n_styles + gamma_styles, loc="lower right", ncol=2)
    axes[0].set_ylim(0.35, 1.0)  # room under the data for the legend
    _styles(axes[1], n_styles + gamma_styles, loc="lower left")
    axes[0].annotate(f"N = {Ns[0]}: both γ overlap", (300, float(final[final.N == Ns[0]].Q_pos.iloc[0])),
                     xytext=(0, 4), textcoords="offset points", fontsize=7.5, color="0.3")
    axes[1].text(0.03, 0.5, f"N = {Ns[0]} and N = {big} stay at ≈ 1\nfor both γ (lines overlap)", fontsize=7.5,
                 color="0.3", transform=axes[1].transAxes)
    _styles(axes[2], [(r"$Q_{pos}$", {"color": "C0", "marker": "o", "ls": ""}),
                      (r"$M_{ret}$", {"color": "C3", "marker": "s", "ls": ""}),
                      (r"solid, filled: $\gamma$ = 0", {"ls": "-", "marker": "o"}),
                      (r"dashed, open: $\gamma$ = 1", {"ls": "--", "marker": "o", "mfc": "white", "ms": 8})],
            loc="lower left")
    axes[2].set_xscale("log", base=2)
    axes[2].set_ylim(0, 1.06)  # room under the data for the legend
    axes[0].set(title=r"(a) total correct mass $Q_{pos}$", xlabel="step", ylabel=r"$Q_{pos}$")
    axes[1].set(title=r"(b) retained positive mass $M_{ret}$", xlabel="step", ylabel=r"$M_{ret}$")
    axes[2].set(title=f"(c) final state (step {int(m.step.max())}) vs group size", xlabel="group size N",
                ylabel=r"final $Q_{pos}$, $M_{ret}$")
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    m = _mean(df)
    s0 = m[m.step == 0].iloc[0]
    f = m[m.step == m.step.max()].set_index(["N", "gamma"])
    Ns = sorted(m.N.unique())
    big, mid = Ns[-1], Ns[len(Ns) // 2]
    return [
        Claim("initial total correct mass Q_pos", "F-GRPO App. J", 0.63, float(s0.Q_pos), 0.005),
        Claim("initial anchor probability", "F-GRPO App. J", 4.7e-4, float(s0.p_anchor), 5e-6),
        Claim(f"N = {big}: M_ret stays ~1 (gamma = 0)", "F-GRPO Sec. 5.1, App. J", 1.0, float(f.loc[(big, 0.0), "M_ret"]), 0.02),
        Claim("Q_pos increases for every N (1 = all final Q_pos > initial)", "F-GRPO Fig. 4a", 1.0,
              float(np.all(f.Q_pos.to_numpy() > s0.Q_pos)), 0.0),
        Claim(f"N = {mid} (concentration zone): M_ret collapses below 0.5 (1 = yes)", "F-GRPO Fig. 4b-c", 1.0,
              float(f.loc[(mid, 0.0), "M_ret"] < 0.5), 0.0),
        Claim(f"N = {mid}: gamma = 1 retains more mass than gamma = 0 (1 = yes)", "F-GRPO Sec. 5.1", 1.0,
              float(f.loc[(mid, 1.0), "M_ret"] > f.loc[(mid, 0.0), "M_ret"]), 0.0),
        Claim("F-GRPO raises pass@256 of GRPO on Qwen2.5-7B to 70.3 (from 64.1)", "F-GRPO Abstract, Sec. 5.2",
              70.3, float("nan"), 0.5, note="needs the paper's Qwen2.5-7B RL runs and benchmarks"),
    ]


register(FigureSpec("fgrpo_fig4", "Categorical simulation: Q_pos and retained mass vs step and N",
                    "F-GRPO Fig. 4, App. J", data, plot, claims,
                    full_data=lambda: data("fgrpo-fig4")))
