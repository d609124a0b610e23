"""FADE Fig. 2: positive and negative gradient mass versus the solve rate p.

Left: existing methods; middle: the Power α series p(1−p)^α; right: the AsymGRPO series
(m_F = p(1−p)/δ).  Solid lines m_S, dashed m_F (per rollout, closed forms at G = 8 where
the formula depends on G); a family with m_S = m_F is drawn once, and markers at staggered
positions keep curves that coincide visible.  Black stars and boxes: the paper's numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots

G = 8
P = np.linspace(0.0, 1.0, 201)
PANELS = {
    "existing": [("grpo", {}), ("dr_grpo", {}), ("maxrl", {}), ("skew_r", {}), ("passk_chen", {"k": 4}),
                 ("passk_mix", {"k": 4}), ("w_reinforce", {"lam": 0.1}), ("relu", {}), ("logmeanexp", {"beta": 1.0})],
    "power_alpha": [("power_alpha", {"alpha": a}) for a in (1.0, 2.0, 3.0, 5.0)],
    "asym_grpo": [("asym_grpo", {"delta": d}) for d in (0.3, 0.5, 1.0, 2.0)],
}


def data() -> pd.DataFrame:
    rows = []
    for panel, entries in PANELS.items():
        for name, params in entries:
            adv = advantages.get(name, **params)
            m = masses.closed_form(adv, P, G)
            rows.append(pd.DataFrame({"panel": panel, "advantage": name,
                                      "params": ", ".join(f"{k}={v:g}" for k, v in params.items()),
                                      "G": G, "p": P, "m_S": m.m_S, "m_F": m.m_F}))
    return pd.concat(rows, ignore_index=True)


_GREEK = {"alpha=": "α = ", "delta=": "δ = ", "lam=": "λ = ", "beta=": "β = ", "k=": "k = "}


def _label(name: str, params: str) -> str:
    for k, v in _GREEK.items():
        params = params.replace(k, v)
    return name + (f" ({params})" if params else "")


def plot(df: pd.DataFrame):
    fig, axes = subplots(3, width=4.6, height=3.8)
    titles = {"existing": "existing methods", "power_alpha": r"Power $\alpha$: $p(1-p)^\alpha$",
              "asym_grpo": r"AsymGRPO: $m_S = p(1-p)$, $m_F = m_S/\delta$"}
    markers = "osD^vP*Xh"
    for ax, (panel, sub) in zip(axes, df.groupby("panel", sort=False)):
        for i, ((name, params), cur) in enumerate(sub.groupby(["advantage", "params"], sort=False)):
            # markers at staggered positions keep curves that coincide (e.g. Dr. GRPO and ReLU's
            # m_S, or AsymGRPO's m_S for every delta) visible
            style = {"color": f"C{i}", "marker": markers[i], "ms": 4, "markevery": (4 + 5 * i, 40)}
            same = bool(np.allclose(cur.m_S, cur.m_F))
            ax.plot(cur.p, cur.m_S, label=_label(name, params) + (r" [$m_S = m_F$]" if same else ""), **style)
            if not same:
                ax.plot(cur.p, cur.m_F, ls="--", **{**style, "markevery": (24 + 5 * i, 40), "mfc": "white"})
        ax.set_title(titles[panel], fontsize=10)
        ax.set_xlabel("solve rate p")
    axes[0].set_ylabel(rf"mass per rollout $m_S$, $m_F$ (G = {G})")
    paper_point(axes[0], 0.5, 0.25, values=[0.5, 0.25], label="paper: Dr. GRPO peak (1/2, 1/4)")
    for a in (2.0, 3.0):
        cur = df[(df.panel == "power_alpha") & (df.params == f"alpha={a:g}")]
        paper_point(axes[1], 1 / (1 + a), float(cur.m_S.max()), values=[1 / (1 + a)],
                    label=r"paper: peak at $p = 1/(1+\alpha)$, $\alpha$ = 2, 3" if a == 2 else "_nolegend_")
    paper_note(axes[1], "paper (Eq. 27): peak-normalised\nweights peak at 1/4 for every α", [0.25],
               loc="upper right")
    axes[2].text(0.5, 0.27, r"$m_S$ identical for all $\delta$", ha="center", fontsize=7)
    paper_note(axes[2], r"paper (Sec. 4.1): $m_S/m_F = \delta$" "\n" r"($\delta$ = 0.5: 0.5)", [0.5], loc="center right")
    styles = [Line2D([], [], color="0.3", label=r"solid: $m_S$ (filled markers)"),
              Line2D([], [], color="0.3", ls="--", marker="o", mfc="white", label=r"dashed: $m_F$ (open markers)")]
    for ax, top, ncol in zip(axes, (1.6, 0.45, 1.3), (2, 1, 2)):
        h, _ = ax.get_legend_handles_labels()
        ax.legend(handles=h + styles, fontsize=6, loc="upper left" if ncol == 1 else "upper center", ncol=ncol)
        ax.set_ylim(-0.02 * top, top)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    p_star, m_star = masses.peak(advantages.get("dr_grpo"))
    out = [Claim("Dr. GRPO mass p(1-p) peaks at p = 1/2", "FADE Sec. 2.2", 0.5, p_star, 1e-6),
           Claim("Dr. GRPO peak mass is 1/4", "FADE Sec. 2.2", 0.25, m_star, 1e-9)]
    for a in (2.0, 3.0):
        p_star, m_star = masses.peak(advantages.get("power_alpha", alpha=a, normalize=True))
        out.append(Claim(f"Power alpha={a:g} peaks at p = 1/(1+alpha)", "FADE Sec. 4.3, App. 14", 1 / (1 + a), p_star, 1e-6))
        out.append(Claim(f"Power alpha={a:g} normalised peak mass (Eq. 27)", "FADE Eq. 27", 0.25, m_star, 1e-9))
    sr = float(masses.sign_ratio(advantages.get("asym_grpo", delta=0.5), 0.3))
    out.append(Claim("AsymGRPO delta=0.5: m_S/m_F = delta", "FADE Sec. 4.1", 0.5, sr, 1e-12))
    return out


register(FigureSpec("fade_fig2", "Positive/negative gradient mass vs solve rate", "FADE Fig. 2",
                    data, plot, claims))
