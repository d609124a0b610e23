"""F-GRPO Fig. 3: focal-scaled advantage magnitude g(x)·|A_GRPO| versus the success
probability, g = (1 − μ̂_pos)^γ (Eq. 15-16); solid: correct rollouts, dashed: incorrect.
Computed from the ``fgrpo`` advantage on groups of G = 400 rollouts.
"""

from __future__ import annotations

import pandas as pd

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import paper_point, subplots

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
    fig, (ax,) = subplots(1, width=5.4, height=3.8)
    markers = "osD^"
    for i, (gamma, cur) in enumerate(df.groupby("gamma")):
        style = dict(color=f"C{i}", marker=markers[i], ms=4, markevery=(8 * i, 40))
        ax.plot(cur.mu_pos, cur.abs_A_correct, **style, label=rf"$\gamma$ = {gamma:g}")
        ax.plot(cur.mu_pos, cur.abs_A_incorrect, ls="--", mfc="white", **style)
    ax.plot([], [], color="0.3", label="solid, filled: correct")
    ax.plot([], [], color="0.3", ls="--", label="dashed, open: incorrect")
    paper_point(ax, 0.5, 1.0, label=r"paper (Eq. 15-16, Fig. 3)")
    for y, text, at in ((0.25 * (1 / 3) ** 0.5, r"$\gamma$ = 1, correct: $\frac{1}{4}\sqrt{1/3}$ = 0.144", 0.012),
                        (0.0625 * 3**0.5, r"$\gamma$ = 2, incorrect: $\frac{1}{16}\sqrt{3}$ = 0.108", 0.0035)):
        paper_point(ax, 0.75, y, label="_nolegend_")
        ax.annotate(text, (0.75, y), xytext=(0.36, at), fontsize=6.5,
                    arrowprops=dict(arrowstyle="-", color="0.4", lw=0.6))
    ax.annotate(r"$\gamma$ = 0 (GRPO): 1 at $\mu_{pos}$ = 1/2", (0.5, 1.0), xytext=(0.36, 8), fontsize=6.5,
                arrowprops=dict(arrowstyle="-", color="0.4", lw=0.6))
    ax.text(0.02, 0.02, r"near $\mu_{pos}$ = 1, dashed $\gamma$ overlaps solid $\gamma - 1$;" "\n"
            r"near $\mu_{pos}$ = 0, all solid curves overlap ($g \approx 1$)",
            fontsize=6.5, color="0.3", transform=ax.transAxes)
    ax.set_yscale("log")
    ax.set_xlabel(r"success probability $\hat\mu_{pos}$ (G = " f"{G})")
    ax.set_ylabel(r"$g(x)\,|\hat A^{GRPO}|$, $g = (1-\hat\mu_{pos})^\gamma$")
    ax.legend(fontsize=6.5, loc="lower left", bbox_to_anchor=(0.0, 0.1), ncol=1)
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
