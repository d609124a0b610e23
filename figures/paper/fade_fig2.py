"""FADE Fig. 2: positive and negative gradient mass versus the solve rate p.

Left: existing methods; middle: the Power α series p(1−p)^α; right: the AsymGRPO series
(m_F = p(1−p)/δ).  Solid lines m_S, dashed m_F (per rollout, closed forms at G = 8 where
the formula depends on G).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import subplots

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


def plot(df: pd.DataFrame):
    fig, axes = subplots(3)
    titles = {"existing": "existing methods", "power_alpha": r"Power $\alpha$: $p(1-p)^\alpha$",
              "asym_grpo": r"AsymGRPO: $m_F = p(1-p)/\delta$"}
    for ax, (panel, sub) in zip(axes, df.groupby("panel", sort=False)):
        for i, ((name, params), cur) in enumerate(sub.groupby(["advantage", "params"], sort=False)):
            color = f"C{i}"
            label = name + (f" ({params})" if params else "")
            ax.plot(cur.p, cur.m_S, color=color, label=label)
            ax.plot(cur.p, cur.m_F, color=color, ls="--")
        ax.set_title(titles[panel])
        ax.set_xlabel("solve rate p")
        ax.legend(fontsize=6)
    axes[0].set_ylabel(r"mass per rollout (solid $m_S$, dashed $m_F$)")
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
