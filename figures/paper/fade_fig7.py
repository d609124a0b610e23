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

from rlvr_theory import advantages, masses, variance

from ..registry import Claim, FigureSpec, register
from ._style import subplots

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
    fig, axes = subplots(3)
    for i, (a, cur) in enumerate(df.groupby("alpha", sort=False)):
        c = f"C{i}"
        axes[0].plot(cur.p, cur.w, color=c, label=rf"$\alpha$ = {a:g}")
        axes[1].plot(cur.p, cur.var_delta, color=c, label=rf"$\alpha$ = {a:g} (delta, Eq. 30)")
        axes[1].plot(cur.p, cur.var_exact, color=c, ls="--")
        axes[2].plot(cur.p, cur.rel_var_delta, color=c, label=rf"$\alpha$ = {a:g} (Eq. 31)")
        axes[2].plot(cur.p, cur.rel_var_exact, color=c, ls="--")
        axes[0].axvline(cur["mode"].iloc[0], color=c, lw=0.6, ls=":")
    first = df[df.alpha == ALPHAS[0]]
    axes[2].plot(first.p, first.v0, color="0.5", lw=1.2, label=r"$v_0 = 1/(Gp(1-p))$ (Eq. 9)")
    axes[2].set_yscale("log")
    axes[2].set_ylim(1e-4, 1e2)
    axes[0].set_title(r"weight $C\,p(1-p)^\alpha$ (Eq. 27); dotted: mode $1/(1+\alpha)$", fontsize=8)
    axes[1].set_title(rf"Var$(w(\hat p))$, G = {G} (solid delta, dashed exact)", fontsize=9)
    axes[2].set_title(r"relative variance Var$(w)/w^2$ and raw noise $v_0$", fontsize=9)
    for ax in axes:
        ax.set_xlabel("solve rate p")
        ax.legend(fontsize=6)
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
