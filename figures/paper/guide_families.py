"""The main advantage families on one page: masses m_S and m_F, the advantage ratio ρ and the
update magnitude Σ_i|A_i| against the solve rate p, for G = 8 and G = 16.

Lines: the exact expectation over the successes X ~ Binom(G, p) of a group (what training
sees, groups without signal included; ``rlvr_theory.masses.exact``).  Markers: one group with
``p̂ = x/G`` (the papers' formulas, exact given p̂).  The families and their parameters are
those of ``figures.guide.FIGURE_FAMILIES``; the table behind the guide
(``docs/choosing_an_advantage.md``) has more of them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from rlvr_theory import advantages, masses

from ..guide import FIGURE_FAMILIES, family_label
from ..registry import Claim, FigureSpec, register
from ._style import PAPER_COLOR, paper_point, subplots

GS = (8, 16)
P = np.round(np.linspace(0.0, 1.0, 101), 10)
SIGN_BALANCED = ("grpo", "dr_grpo", "maxrl", "power_alpha", "fgrpo")


def data() -> pd.DataFrame:
    rows = []
    for name, params in FIGURE_FAMILIES:
        adv = advantages.get(name, **params)
        label = family_label(name, params)
        for G in GS:
            ms, mf, mean_abs = masses.exact(adv, P, G, with_abs=True)
            rows.append(pd.DataFrame({"family": label, "advantage": name, "G": G, "source": "expectation", "p": P,
                                      "m_S": ms, "m_F": mf, "rho": masses.advantage_ratio(adv, P, G, exact=True),
                                      "abs_adv_sum": G * mean_abs}))
            one = masses.outcome_advantages(adv, G)  # one group with x = 0..G successes
            inner = (one.x > 0) & (one.x < G)  # groups without signal have no ratio
            rho = np.full(len(one), np.nan)
            rho[inner] = masses.advantage_ratio(adv, one.p_hat[inner], G)  # closed form: exact given p̂
            rows.append(pd.DataFrame({"family": label, "advantage": name, "G": G, "source": "group",
                                      "p": one.p_hat, "m_S": one.m_S, "m_F": one.m_F, "rho": rho,
                                      "abs_adv_sum": one.abs_adv_sum}))
    return pd.concat(rows, ignore_index=True)


def _peaks() -> dict[str, tuple[float, float]]:
    return {"dr_grpo": masses.peak("dr_grpo"),
            "power_alpha": masses.peak(advantages.get("power_alpha", alpha=2.0, normalize=True))}


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, nrows=3, width=4.6, height=3.0)
    labels = list(dict.fromkeys(df.family))
    color = {lab: f"C{i}" for i, lab in enumerate(labels)}
    n_bal = sum(df[df.family == lab].advantage.iloc[0] in SIGN_BALANCED for lab in labels)
    for col, G in enumerate(GS):
        ax_m, ax_r, ax_a = axes[col], axes[2 + col], axes[4 + col]
        k = 0
        for lab in labels:
            cur = df[(df.family == lab) & (df.G == G)]
            line, pts = cur[cur.source == "expectation"], cur[cur.source == "group"]
            c = color[lab]
            balanced = cur.advantage.iloc[0] in SIGN_BALANCED
            # curves that coincide (m_S = m_F; every sign-balanced ρ = p/(1-p); asym_grpo's m_S = dr_grpo's)
            # are drawn as nested stripes: wider first, so each colour stays visible
            wide = 1.3 + 1.1 * (n_bal - k) if balanced else 1.3
            k += balanced
            ax_m.plot(line.p, line.m_S, color=c, lw=1.6 if lab.startswith("dr_grpo") else 1.2, zorder=2,
                      alpha=0.9)
            ax_m.plot(line.p, line.m_F, color=c, lw=1.2, ls="--", zorder=3)
            ax_m.plot(pts.p, pts.m_S, "o", color=c, ms=3.2, zorder=4)
            ax_m.plot(pts.p, pts.m_F, "o", mfc="none", mec=c, ms=5.5, mew=0.9, zorder=4)
            ok = np.isfinite(line.rho) & (line.rho > 0)
            ax_r.plot(line.p[ok], line.rho[ok], color=c, lw=wide, solid_capstyle="butt", zorder=2)
            ax_r.plot(pts.p, pts.rho, "o", color=c, ms=3.2, zorder=4)
            ax_a.plot(line.p, line.abs_adv_sum, color=c, lw=1.2, zorder=2)
            ax_a.plot(pts.p, pts.abs_adv_sum, "o", color=c, ms=3.2, zorder=4)
        paper_point(ax_m, 0.5, 0.25, values=[0.5, 0.25])
        paper_point(ax_m, 1 / 3, 0.25, values=[1 / 3, 0.25])
        paper_point(ax_r, 0.3, 3 / 7)
        paper_point(ax_r, 0.5, 0.5)
        paper_point(ax_a, 0.5, float(G))
        if G == 8:
            paper_point(ax_m, 0.25, 0.75)
        ax_m.set_ylim(0, 1.02)
        ax_m.set_title(f"masses, G = {G}", fontsize=10)
        ax_m.set_ylabel(r"mass per rollout $m_S$, $m_F$")
        ax_m.text(0.98, 0.97, "solid $m_S$ = dashed $m_F$ for all\nbut asym_grpo; its $m_S$ lies on dr_grpo's",
                  transform=ax_m.transAxes, ha="right", va="top", fontsize=6.5, color="0.25")
        ax_r.set_yscale("log")
        ax_r.set_ylim(5e-3, 150)
        ax_r.set_title(f"advantage ratio, G = {G}", fontsize=10)
        ax_r.set_ylabel(r"$\rho = m_S\,p\,/\,(m_F\,(1-p))$")
        ax_r.text(0.03, 0.97, f"{n_bal} sign-balanced families coincide\non p/(1−p) (nested stripes)",
                  transform=ax_r.transAxes, ha="left", va="top", fontsize=6.5, color="0.25")
        ax_a.set_title(f"update magnitude, G = {G}", fontsize=10)
        ax_a.set_ylabel(r"$\sum_i |A_i|$ per group")
        ax_a.set_xlabel("solve rate p")
        for ax in (ax_m, ax_r, ax_a):
            ax.set_xlim(0, 1)
    handles = [Line2D([], [], color=color[lab], lw=2.5, label=lab) for lab in labels]
    handles += [Line2D([], [], color="0.3", lw=1.2, label=r"solid: $m_S$, $\rho$, $\Sigma|A|$ (expectation"),
                Line2D([], [], color="none", label="       over X ~ Binom(G, p))"),
                Line2D([], [], color="0.3", lw=1.2, ls="--", label=r"dashed: $m_F$ (expectation)"),
                Line2D([], [], color="0.3", marker="o", ls="none", ms=4, label="filled dot: one group, p̂ = x/G"),
                Line2D([], [], color="0.3", marker="o", mfc="none", ls="none", ms=6,
                       label=r"open circle: $m_F$ of one group"),
                Line2D([], [], color=PAPER_COLOR, marker="*", ls="none", ms=10, label="paper (star)")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7.5, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    grp = df[df.source == "group"].set_index(["advantage", "G", "p"])
    line = df[df.source == "expectation"].set_index(["advantage", "G", "p"])
    pk = _peaks()
    out = [Claim(f"GRPO sum|A| = 2G sqrt(p(1-p)) = {G} for a group at p = 0.5 (G = {G})", "A-GRAE Theorem 2",
                 float(G), float(grp.abs_adv_sum[("grpo", G, 0.5)]), 1e-12) for G in GS]
    out += [
        Claim("Dr. GRPO mass peaks at p = 1/2", "FADE Sec. 2.2", 0.5, pk["dr_grpo"][0], 1e-6),
        Claim("Dr. GRPO peak mass = 1/4", "FADE Sec. 2.2", 0.25, pk["dr_grpo"][1], 1e-9),
        Claim("Power alpha = 2 (normalised) peaks at p = 1/(1+alpha) = 1/3", "FADE Sec. 4.3, Eq. 27", 1 / 3,
              pk["power_alpha"][0], 1e-6),
        Claim("Power alpha = 2 (normalised) peak mass = 1/4", "FADE Eq. 27", 0.25, pk["power_alpha"][1], 1e-9),
        Claim("MaxRL m_S = m_F = 1 - p = 0.75 for a group at p = 0.25 (G = 8)", "FADE App. 8.3", 0.75,
              float(grp.m_S[("maxrl", 8, 0.25)]), 1e-12),
        Claim("sign-balanced rho(0.3) = p/(1-p) = 3/7 (GRPO, expectation at G = 8)", "FADE Sec. 11.3, Table 7",
              3 / 7, float(line.rho[("grpo", 8, 0.3)]), 1e-9),
        Claim("AsymGRPO delta = 0.5: rho(0.5) = delta p/(1-p) = 0.5 (expectation at G = 8)", "FADE Sec. 4.1",
              0.5, float(line.rho[("asym_grpo", 8, 0.5)]), 1e-9),
    ]
    return out


register(FigureSpec("guide_families", "Main advantage families: masses, rho and sum|A| vs p (G = 8, 16)",
                    "FADE Fig. 2, Table 7; A-GRAE Theorem 2", data, plot, claims))
