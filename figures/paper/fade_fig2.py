"""FADE Fig. 2: positive and negative gradient mass versus the solve rate p.

Left: existing methods; middle: the Power α series p(1−p)^α; right: the AsymGRPO series
(m_F = p(1−p)/δ).  Solid lines m_S, dashed m_F (per rollout, closed forms at G = 8 where
the formula depends on G); a family with m_S = m_F is drawn once, and markers at staggered
positions keep curves that coincide visible.  The middle panel also draws, thin and dotted, the
peak-normalised weights C·p(1−p)^α of Eq. 27 (C = (1+α)^(1+α)/(4α^α)) that its paper marks are
about.  Black stars and boxes: the paper's numbers.  Legends sit under the axes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import legend_below, legend_row, paper_note, paper_point

G = 8
P = np.linspace(0.0, 1.0, 201)
PANELS = {
    "existing": [("grpo", {}), ("dr_grpo", {}), ("maxrl", {}), ("skew_r", {}), ("passk_chen", {"k": 4}),
                 ("passk_mix", {"k": 4}), ("w_reinforce", {"lam": 0.1}), ("relu", {}), ("logmeanexp", {"beta": 1.0})],
    "power_alpha": [("power_alpha", {"alpha": a}) for a in (1.0, 2.0, 3.0, 5.0)],
    "asym_grpo": [("asym_grpo", {"delta": d}) for d in (0.3, 0.5, 1.0, 2.0)],
}
#: the peak-normalised Power α weights of Eq. 27 drawn (dotted) in the middle panel (α = 1: C = 1)
NORMALISED = (2.0, 3.0, 5.0)


def data() -> pd.DataFrame:
    rows = []
    entries = [(panel, name, params) for panel, es in PANELS.items() for name, params in es]
    entries[len(PANELS["existing"]) + len(PANELS["power_alpha"]):len(PANELS["existing"]) + len(PANELS["power_alpha"])] = [
        ("power_alpha", "power_alpha", {"alpha": a, "normalize": True}) for a in NORMALISED]
    for panel, name, params in entries:
        adv = advantages.get(name, **params)
        m = masses.closed_form(adv, P, G)
        rows.append(pd.DataFrame({"panel": panel, "advantage": name,
                                  "params": ", ".join(f"{k}={v:g}" if not isinstance(v, bool) else f"{k}={v}"
                                                      for k, v in params.items()),
                                  "G": G, "p": P, "m_S": m.m_S, "m_F": m.m_F}))
    return pd.concat(rows, ignore_index=True)


_GREEK = {"alpha=": "α = ", "delta=": "δ = ", "lam=": "λ = ", "beta=": "β = ", "k=": "k = "}


def _label(name: str, params: str) -> str:
    for k, v in _GREEK.items():
        params = params.replace(k, v)
    return name + (f" ({params})" if params else "")


def plot(df: pd.DataFrame):
    fig, axes, spots = legend_row(3, width=4.1, height=3.3, legend_height=1.6)
    titles = {"existing": "existing methods", "power_alpha": r"Power $\alpha$: $p(1-p)^\alpha$",
              "asym_grpo": r"AsymGRPO: $m_S = p(1-p)$, $m_F = m_S/\delta$"}
    markers = "osD^vP*Xh"
    for ax, (panel, sub) in zip(axes, df.groupby("panel", sort=False)):
        normed = sub.params.str.contains("normalize=True")
        for i, ((name, params), cur) in enumerate(sub[~normed].groupby(["advantage", "params"], sort=False)):
            # markers at staggered positions keep curves that coincide (e.g. Dr. GRPO and ReLU's
            # m_S, or AsymGRPO's m_S for every delta) visible
            style = {"color": f"C{i}", "marker": markers[i], "ms": 4, "markevery": (4 + 5 * i, 40)}
            same = bool(np.allclose(cur.m_S, cur.m_F))
            ax.plot(cur.p, cur.m_S, label=_label(name, params) + (r" [$m_S = m_F$]" if same else ""), **style)
            if not same:
                ax.plot(cur.p, cur.m_F, ls="--", **{**style, "markevery": (24 + 5 * i, 40), "mfc": "white"})
        for (_, params), cur in sub[normed].groupby(["advantage", "params"], sort=False):
            a = float(params.split(",")[0].split("=")[1])
            i = [e[1]["alpha"] for e in PANELS["power_alpha"]].index(a)
            ax.plot(cur.p, cur.m_S, color=f"C{i}", ls=":", lw=1.2)
        ax.set_title(titles[panel], fontsize=10)
        ax.set_xlabel("solve rate p")
    axes[0].set_ylabel(rf"mass per rollout $m_S$, $m_F$ (G = {G})")
    paper_point(axes[0], 0.5, 0.25, values=[0.5, 0.25], label="paper: Dr. GRPO peak (1/2, 1/4)")
    for a in (2.0, 3.0):  # on the peak-normalised curves, whose peak (1/(1+α), 1/4) the claims are about
        paper_point(axes[1], 1 / (1 + a), 0.25, values=[1 / (1 + a), 0.25],
                    label=r"paper: normalised peak $(1/(1+\alpha),\ 1/4)$, $\alpha$ = 2, 3" if a == 2 else "_nolegend_")
    paper_note(axes[1], "paper (Eq. 27): peak-normalised\nweights (dotted) peak at 1/4\nfor every α", [0.25],
               loc="upper right", fontsize=7)
    axes[2].text(0.5, 0.27, r"$m_S$ identical for all $\delta$", ha="center", fontsize=7.5)
    paper_note(axes[2], r"paper (Sec. 4.1): $m_S/m_F = \delta$" "\n" r"($\delta$ = 0.5: 0.5)", [0.5],
               loc="upper left", fontsize=7)
    styles = [Line2D([], [], color="0.3", label=r"solid: $m_S$ (filled markers)"),
              Line2D([], [], color="0.3", ls="--", marker="o", mfc="white", label=r"dashed: $m_F$ (open markers)")]
    normalised = Line2D([], [], color="0.3", ls=":", lw=1.2, label=r"dotted: peak-normalised $C\,p(1-p)^\alpha$ (Eq. 27)")
    for ax, spot, top, extra in zip(axes, spots, (1.05, 0.42, 1.0), (styles, [styles[0], normalised], styles)):
        h, _ = ax.get_legend_handles_labels()
        legend_below(spot, h + extra, ncol=2 if len(h) > 8 else 1, handlelength=2.6)  # never over the curves
        ax.set_ylim(-0.02 * top, top)
    fig.tight_layout(w_pad=1.5, h_pad=0.2)
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
