"""F-GRPO Fig. 3: focal-scaled advantage magnitude g(x)·|A_GRPO| versus the success
probability, g = (1 − μ̂_pos)^γ (Eq. 15-16); solid: correct rollouts, dashed: incorrect.
Computed from the ``fgrpo`` advantage on groups of G = 400 rollouts.
"""

from __future__ import annotations

import pandas as pd

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import subplots

G = 400
GAMMAS = (0.0, 0.5, 1.0, 2.0)


def data() -> pd.DataFrame:
    rows = []
    for gamma in GAMMAS:
        t = masses.outcome_advantages(advantages.get("fgrpo", gamma=gamma), G)
        t = t[(t.x > 0) & (t.x < G)]
        rows.append(pd.DataFrame({"gamma": gamma, "mu_pos": t.p_hat, "abs_A_correct": t.A_success.abs(),
                                  "abs_A_incorrect": t.A_failure.abs()}))
    return pd.concat(rows, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, (ax,) = subplots(1, width=5.0)
    for i, (gamma, cur) in enumerate(df.groupby("gamma")):
        ax.plot(cur.mu_pos, cur.abs_A_correct, color=f"C{i}", label=f"gamma = {gamma:g}")
        ax.plot(cur.mu_pos, cur.abs_A_incorrect, color=f"C{i}", ls="--")
    ax.set_yscale("log")
    ax.set_xlabel(r"success probability $\mu_{pos}$")
    ax.set_ylabel(r"$g(x)\,|\hat A^{GRPO}|$ (solid correct, dashed incorrect)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    at = df.set_index(["gamma", "mu_pos"])
    return [
        Claim("gamma = 0 recovers GRPO: |A| = 1 at mu = 0.5", "F-GRPO Eq. 15-16", 1.0,
              at.loc[(0.0, 0.5), "abs_A_correct"], 1e-12),
        Claim("gamma = 1, mu = 0.75: correct |A| = 0.25·sqrt(1/3)", "F-GRPO Eq. 15-16, Fig. 3", 0.25 * (1 / 3) ** 0.5,
              at.loc[(1.0, 0.75), "abs_A_correct"], 1e-12),
        Claim("gamma = 2, mu = 0.75: incorrect |A| = 0.0625·sqrt(3)", "F-GRPO Eq. 15-16, Fig. 3", 0.0625 * 3**0.5,
              at.loc[(2.0, 0.75), "abs_A_incorrect"], 1e-12),
    ]


register(FigureSpec("fgrpo_fig3", "Focal-weighted advantage magnitude vs success rate", "F-GRPO Fig. 3",
                    data, plot, claims))
