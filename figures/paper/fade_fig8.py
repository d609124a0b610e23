"""FADE Fig. 8 (left): the FADE controller's α and δ over training, from the linear-head
population (:func:`simulations.linear_head.simulate_population` with ``advantage="fade"``,
preset ``fade-fig8``): α decays as solve rates rise, δ decays once the entropy reaches
H* = H0/2.
"""

from __future__ import annotations

import pandas as pd

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import paper_hline, paper_note, paper_point, subplots


def data() -> pd.DataFrame:
    tr, _, _ = lh.run_preset("fade-fig8")
    return tr[["step", "seed", "alpha", "delta", "entropy", "solve_rate", "reward_mean", "r1"]]


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, height=3.6)
    m = df.groupby("step").mean(numeric_only=True).reset_index()
    drop = m[m.delta < 1].step.min()  # the step where delta first leaves 1
    n = df.seed.nunique()
    axes[0].plot(m.step, m.alpha, label=r"$\alpha$ (Power exponent)")
    axes[0].plot(m.step, m.delta, label=r"$\delta$ (sign ratio $m_S/m_F$)")
    paper_point(axes[0], 0, 3.0, label=r"paper: $\alpha_{max} = 3$ at the start; $\delta$ floor 0.3")
    paper_hline(axes[0], 0.3, label="_nolegend_")
    paper_note(axes[0], "paper (Fig. 8):\nα falls as the solve rate rises\n(Spearman corr. −1 ideal);\n"
               "δ leaves 1 only once the\nentropy is ≤ H* = H0/2 (1 = yes)", [-1.0, 1.0], loc="center right")
    axes[0].set_title(f"FADE controller (mean of {n} seeds)", fontsize=10)
    axes[0].set_ylabel("controller setting")
    axes[1].plot(m.step, m.solve_rate, label="solve rate")
    axes[1].plot(m.step, m.entropy / m.entropy.iloc[0], label="entropy / H0")
    paper_hline(axes[1], 0.5, label=r"paper: $H^* = H_0/2$")
    axes[1].set_title("training signals", fontsize=10)
    axes[1].set_ylabel("fraction")
    for ax in axes:
        ax.axvline(drop, color="0.5", lw=0.8, ls="--", label=rf"$\delta$ leaves 1 (step {drop})")
        ax.set_xlabel("training step")
    axes[0].legend(fontsize=7, loc="upper right")
    # right panel: the legend between the solve-rate curve (≈ 1 late) and the H* line (0.5), off both
    axes[1].legend(fontsize=7, loc="center right", bbox_to_anchor=(1.0, 0.72))
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    m = df.groupby("step").mean(numeric_only=True).reset_index().dropna(subset=["alpha"])
    H0 = float(m.entropy.iloc[0])
    first_drop = m[m.delta < 1].step.min()
    ent_at_drop = float(m[m.step == first_drop].entropy.iloc[0])
    return [
        Claim("alpha starts at alpha_max = 3 (low initial solve rate)", "FADE Eq. 11, Fig. 8", 3.0,
              float(m.alpha.iloc[0]), 0.3),
        Claim("alpha decays as solve rates rise: Spearman corr(alpha, solve rate) = -1 ideal", "FADE Fig. 8",
              -1.0, float(m.alpha.corr(m.solve_rate, method="spearman")), 0.3),
        Claim(f"delta leaves 1 only once entropy has reached H* = H0/2 (entropy/H0 = {ent_at_drop / H0:.3f} "
              f"at step {first_drop}; 1 = below 1/2)", "FADE Fig. 8", 1.0, float(ent_at_drop / H0 <= 0.5), 0),
        Claim("delta ends at its floor 0.3", "FADE Eq. 11", 0.3, float(m.delta.iloc[-1]), 0.05),
    ]


register(FigureSpec("fade_fig8", "FADE controller alpha, delta over steps (linear head)",
                    "FADE Fig. 8 left", data, plot, claims))
