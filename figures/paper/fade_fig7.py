"""FADE Fig. 7: variance of the gradient weight w(p) = C·p(1−p)^α at different solve
rates for G = 16 Monte Carlo rollouts, several α (App. 14, Eq. 27-31).

Left: the weights (peak-normalised, Eq. 27).  Middle: Var(w(p̂)) by the delta method
(Eq. 30, solid) and exactly over p̂ = Binom(G, p)/G (dashed, beyond the paper).  Right: the
relative variance Var(w)/w² (Eq. 31, solid; exact dashed) and the raw gradient noise
v0 = 1/(G p(1−p)) of Eq. 9 (grey).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from rlvr_theory import advantages, masses, variance

from ..registry import Claim, FigureSpec, register
from ._style import legend_below, legend_row, paper_point, paper_vline

G = 16
ALPHAS = (1.0, 2.0, 3.0, 5.0)
P = (np.arange(200) + 0.5) / 200


def _adv(alpha: float):
    return advantages.get("power_alpha", alpha=alpha, normalize=True)


def data() -> pd.DataFrame:
    rows = []
    for a in ALPHAS:
        adv = _adv(a)
        rows.append(pd.DataFrame({
            "alpha": a, "G": G, "p": P, "mode": masses.peak(adv)[0], "w": variance.weight(adv, P),
            "var_delta": variance.weight_variance(adv, P, G),
            "var_exact": variance.weight_variance(adv, P, G, method="exact"),
            "rel_var_delta": variance.relative_weight_variance(adv, P, G),
            "rel_var_exact": variance.relative_weight_variance(adv, P, G, method="exact"),
            "v0": variance.raw_noise(P, G)}))
    return pd.concat(rows, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes, spots = legend_row(3, width=4.4, height=3.4, legend_height=1.2)  # legends under the panels
    for i, (a, cur) in enumerate(df.groupby("alpha", sort=False)):
        c = f"C{i}"
        axes[0].plot(cur.p, cur.w, color=c, label=rf"$\alpha$ = {a:g}")
        axes[1].plot(cur.p, cur.var_delta, color=c, label=rf"$\alpha$ = {a:g}")
        axes[1].plot(cur.p, cur.var_exact, color=c, ls="--")
        axes[2].plot(cur.p, cur.rel_var_delta, color=c, label=rf"$\alpha$ = {a:g}")
        axes[2].plot(cur.p, cur.rel_var_exact, color=c, ls="--")
        mode = float(cur["mode"].iloc[0])
        paper_vline(axes[0], mode, label=r"paper: mode $1/(1+\alpha)$" if i == 0 else "_nolegend_")
        if a != 1.0:
            paper_point(axes[1], mode, 0.0, label=r"paper: Var$(w) = 0$ at the mode" if a == 2 else "_nolegend_")
    var_01 = (27 / 16) ** 2 * 0.1 * 0.9**3 * 0.7**2 / G  # Eq. 30 at alpha = 2, p = 0.1 (C = 27/16)
    paper_point(axes[1], 0.1, var_01, marker="P", s=70, label=rf"paper (Eq. 30): $\alpha$ = 2, p = 0.1: {var_01:.5f}")
    paper_point(axes[2], 0.5, 4 / G, label=r"paper (Eq. 31): $4/G$ at $\alpha$ = 3, p = 1/2")
    first = df[df.alpha == ALPHAS[0]]
    axes[2].plot(first.p, first.v0, color="0.5", lw=1.2, label=r"$v_0 = 1/(Gp(1-p))$ (Eq. 9)")
    axes[2].set_yscale("log")
    axes[2].set_ylim(bottom=1e-4)
    axes[0].set_title(r"weight $w(p) = C\,p(1-p)^\alpha$ (Eq. 27)", fontsize=9)
    axes[1].set_title(rf"Var$(w(\hat p))$, G = {G}", fontsize=9)
    axes[2].set_title(r"relative variance Var$(w)/w^2$ and raw noise $v_0$", fontsize=9)
    axes[0].set_ylabel("peak-normalised weight w(p)")
    axes[1].set_ylabel(r"Var$(w(\hat p))$, $\hat p$ = Binom(G, p)/G")
    axes[2].set_ylabel(r"Var$(w)/w^2$, $v_0$ (log scale)")
    styles = [Line2D([], [], color="0.3", label="solid: delta method (Eq. 30, 31)"),
              Line2D([], [], color="0.3", ls="--", label="dashed: exact over Binom(G, p)")]
    for ax, spot, extra, top in zip(axes, spots, ([], styles, styles), (0.33, 0.021, 1e6)):
        h, lab = ax.get_legend_handles_labels()
        order = sorted(range(len(h)), key=lambda j: lab[j].startswith("paper"))  # curves first, then marks
        legend_below(spot, [h[j] for j in order] + extra, fontsize=8, ncol=1 if ax is axes[0] else 2)
        ax.set_ylim(top=top)
        ax.set_xlabel("solve rate p")
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    out = []
    for a in (2.0, 3.0, 5.0):
        mode, _ = masses.peak(_adv(a))
        out.append(Claim(f"alpha={a:g}: delta-method Var(w) vanishes at the weight mode 1/(1+alpha)",
                         "FADE App. 14 (after Eq. 31)", 0.0, float(variance.weight_variance(_adv(a), mode, G)), 1e-12))
        out.append(Claim(f"alpha={a:g}: weight mode at 1/(1+alpha)", "FADE Sec. 4.3, App. 14", 1 / (1 + a), mode, 1e-6))
    rel = float(variance.relative_weight_variance(_adv(3.0), 0.5, G))
    out.append(Claim("alpha=3, p=0.5: relative variance [1-(1+a)p]^2/(G p(1-p)) = 4/G", "FADE Eq. 31",
                     0.25, rel, 1e-12))
    var = float(variance.weight_variance(_adv(2.0), 0.1, G))
    c2 = 27 / 16  # C of Eq. 27 at alpha = 2: 3^3/(4*2^2)
    out.append(Claim("alpha=2, p=0.1: Var(w) = C^2 p(1-p)^(2a-1)[1-(1+a)p]^2/G", "FADE Eq. 30",
                     c2**2 * 0.1 * 0.9**3 * 0.7**2 / G, var, 1e-15))
    return out


register(FigureSpec("fade_fig7", "Variance of the Power-alpha weight vs solve rate (G = 16)",
                    "FADE Fig. 7, App. 14 Eq. 27-31", data, plot, claims))
