"""FADE App. 14.1: the sweet spot of SNR²(p) ∝ s(p)²·p(1−p) for s = e^(−cp), the α
whose weight mode 1/(1+α) sits there, and the α maximising the update quality Q (Eq. 10,
uniform difficulty distribution) with known weights and with the weight-estimation
correction Var(w)/w²·(s² + v) of App. 14 (G = 8, 16; delta method and exact binomial).
"""

from __future__ import annotations

import pandas as pd

from rlvr_theory import advantages, masses, variance

from ..registry import Claim, FigureSpec, register
from ._style import paper_band, paper_note, paper_point, subplots

C = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
G_VALUES = (8, 16)


def data() -> pd.DataFrame:
    delta = variance.sweet_spot_table(C, G_VALUES)
    exact = variance.sweet_spot_table(C, G_VALUES, method="exact")
    return delta.assign(alpha_corrected_exact=exact.alpha_corrected.to_numpy())


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, width=4.8, height=3.8)
    one = df[df.G == G_VALUES[0]]
    ax = axes[0]
    ax.plot(one.c, one.p_star, "o-", color="C0", label=r"$p^*(c)$: argmax $s^2 p(1-p)$")
    paper_band(ax, 0.3, 0.5, start=0.5, stop=1.0, label=r"paper: $p^* \in [0.3, 0.5]$ for $c \in [0.5, 1]$")
    paper_point(ax, 0.0, 0.5, label=r"paper: $p^* = 1/2$ at $c = 0$; $\approx 0.3$ at $c = 1$")
    paper_point(ax, 1.0, 0.3, label="_nolegend_")
    ax.set_xlabel(r"signal slope c, $s(p) = e^{-cp}$")
    ax.set_ylabel(r"sweet spot $p^*$ (solve rate)")
    ax.legend(fontsize=7, loc="lower left")
    ax = axes[1]
    ax.plot(one.c, one.alpha_mode, "s:", color="0.4", label=r"weight mode at $p^*$: $\alpha = 1/p^* - 1$")
    ax.plot(one.c, one.alpha_known, "o-", color="C1", label="argmax Q, known weights")
    for i, g in enumerate(G_VALUES):
        cur = df[df.G == g]
        ax.plot(cur.c, cur.alpha_corrected, "o-", color=f"C{2 + i}", label=f"argmax Q, corrected, G = {g}")
        ax.plot(cur.c, cur.alpha_corrected_exact, "x--", color=f"C{2 + i}", label=f"  (exact Var(w)), G = {g}")
    paper_point(ax, 0.5, 1.2, label=r"paper, known weights: $\alpha \approx$ 1.2, 1.45")
    paper_point(ax, 1.0, 1.45, label="_nolegend_")
    paper_point(ax, 0.5, 1.05, marker="P", s=70, label=r"paper, corrected (G = 8-16): $\alpha \approx$ 1.05, 1.25")
    paper_point(ax, 1.0, 1.25, marker="P", s=70, label="_nolegend_")
    p5 = float(one.set_index("c").p_star[0.5])
    paper_note(ax, "paper (Sec. 4.3): weight mode 1/(1+α) at p*\n"
               f"(c = 0.5: p* = {p5:.3f}, α = {1 / p5 - 1:.3f})", [p5], loc="lower right")
    ax.set_xlabel(r"signal slope c, $s(p) = e^{-cp}$")
    ax.set_ylabel(r"Power exponent $\alpha$")
    ax.set_ylim(bottom=0.55)
    ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def markdown(df: pd.DataFrame) -> str:
    lines = ["| c | G | p* | alpha (mode at p*) | alpha (known weights) | alpha (corrected, delta) | "
             "alpha (corrected, exact Var) |", "|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        lines.append(f"| {r.c:g} | {r.G} | {r.p_star:.4f} | {r.alpha_mode:.3f} | {r.alpha_known:.3f} | "
                     f"{r.alpha_corrected:.3f} | {r.alpha_corrected_exact:.3f} |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    row = df[df.G == 8].set_index("c")
    corr = df.set_index(["c", "G"]).alpha_corrected
    a_mode = float(row.alpha_mode[0.5])
    mode, _ = masses.peak(advantages.get("power_alpha", alpha=a_mode))
    return [
        Claim("flat signal (c = 0): sweet spot at p = 1/2", "FADE App. 14.1", 0.5, float(row.p_star[0.0]), 1e-12),
        Claim("c = 0.5: sweet spot inside [0.3, 0.5] (encoded 0.4 +- 0.1)", "FADE App. 14.1", 0.4,
              float(row.p_star[0.5]), 0.1),
        Claim("c = 1: sweet spot at the lower end ~0.3 of [0.3, 0.5]", "FADE App. 14.1", 0.3,
              float(row.p_star[1.0]), 0.01),
        Claim("alpha with its weight mode 1/(1+alpha) at p*(0.5)", "FADE Sec. 4.3", float(row.p_star[0.5]), mode, 1e-6),
        Claim("known weights, c = 0.5: alpha ~ 1.2", "FADE App. 14.1", 1.2, float(row.alpha_known[0.5]), 0.01),
        Claim("known weights, c = 1: alpha ~ 1.45", "FADE App. 14.1", 1.45, float(row.alpha_known[1.0]), 0.01),
        Claim("corrected, c = 0.5, G = 8-16: alpha ~ 1.05 (ours: smaller of G = 8, 16)", "FADE App. 14.1", 1.05,
              float(min(corr[(0.5, 8)], corr[(0.5, 16)])), 0.015),
        Claim("corrected, c = 1, G = 8-16: alpha ~ 1.25 (ours: larger of G = 8, 16)", "FADE App. 14.1", 1.25,
              float(max(corr[(1.0, 8)], corr[(1.0, 16)])), 0.015),
    ]


register(FigureSpec("fade_sweetspot", "Sweet spot and alpha with/without weight-estimation correction",
                    "FADE App. 14.1", data, plot, claims, markdown))
