"""FADE Fig. 8 (left): the FADE controller's α and δ over training, from the linear-head
population (:func:`simulations.linear_head.simulate_population` with ``advantage="fade"``,
preset ``fade-fig8``): α decays as solve rates rise, δ decays once the entropy reaches
H* = H0/2.
"""

from __future__ import annotations

import pandas as pd

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import subplots


def data() -> pd.DataFrame:
    tr, _, _ = lh.run_preset("fade-fig8")
    return tr[["step", "seed", "alpha", "delta", "entropy", "solve_rate", "reward_mean", "r1"]]


def plot(df: pd.DataFrame):
    fig, axes = subplots(2)
    m = df.groupby("step").mean(numeric_only=True).reset_index()
    axes[0].plot(m.step, m.alpha, label=r"$\alpha$")
    axes[0].plot(m.step, m.delta, label=r"$\delta$")
    axes[0].set_title("FADE controller (mean of seeds)")
    axes[0].legend()
    axes[1].plot(m.step, m.solve_rate, label="solve rate")
    axes[1].plot(m.step, m.entropy / m.entropy.iloc[0], label="entropy / H0")
    axes[1].axhline(0.5, color="grey", ls=":", label="H* / H0")
    axes[1].set_title("training signals")
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("step")
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
