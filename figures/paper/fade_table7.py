"""FADE Table 7: advantage ratio ρ(p) = m_S·p/(m_F·q) at p = 0.3 (Qwen 2.5 7B) and
p = 0.5 (CWM 32B), plug-in (paper) and exact at finite G.

As in the paper, families with only positive weights (m_F = 0: pass@k of Tang et al.,
REINFORCE with rewards {0, 1}, ReLU) are left out: their ρ is infinite.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import masses

from ..registry import Claim, FigureSpec, register
from ._style import paper_hline, paper_point, subplots

G = 8
P = (0.3, 0.5)


def data() -> pd.DataFrame:
    t = masses.table(P, G)
    t = t[np.isfinite(t.advantage_ratio)]
    return t[["advantage", "params", "kind", "p", "G", "m_S", "m_F", "sign_ratio", "advantage_ratio",
              "advantage_ratio_exact"]].reset_index(drop=True)


def plot(df: pd.DataFrame):
    fig, axes = subplots(1, nrows=2, width=10.5, height=3.9)  # one panel per row: 36 names each readable
    for ax, (p, sub) in zip(axes, df.groupby("p")):
        x = np.arange(len(sub))
        ax.bar(x - 0.2, sub.advantage_ratio, 0.4, label=r"plug-in $m_S\,p/(m_F\,q)$ (the paper's $\rho$)")
        ax.bar(x + 0.2, sub.advantage_ratio_exact, 0.4, label=f"exact at G = {G}")
        paper_hline(ax, p / (1 - p), label=rf"paper: sign-balanced $\rho = p/(1-p)$ = {p / (1 - p):.3g}")
        names = list(sub.advantage)
        for name in ("grpo", "asym_grpo") if p == 0.3 else ("grpo",):
            i = names.index(name)
            paper_point(ax, i - 0.2, p / (1 - p), label="paper: GRPO" + (", AsymGRPO δ = 1" if p == 0.3 else "")
                        if name == "grpo" else "_nolegend_")
        ax.set_xticks(x, names, rotation=60, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_xlim(-0.8, len(sub) - 0.2)
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_ylim(0, 60)
        ax.set_title(f"advantage ratio at p = {p:g} (linear below 0.1, log above)", fontsize=10)
        ax.set_ylabel(r"advantage ratio $\rho(p)$")
        ax.legend(fontsize=8, loc="upper left", ncol=2)
        ax.text(0.99, 0.97, r"families with $m_F = 0$ ($\rho = \infty$) left out", transform=ax.transAxes,
                ha="right", va="top", fontsize=8)
    fig.tight_layout()
    return fig


def markdown(df: pd.DataFrame) -> str:
    wide = df.pivot_table(index="advantage", columns="p", values=["advantage_ratio", "advantage_ratio_exact"],
                          sort=False)
    lines = [f"| advantage | rho(0.3) | rho(0.5) | exact rho(0.3), G={G} | exact rho(0.5), G={G} |",
             "|---|---|---|---|---|"]
    for name, r in wide.iterrows():
        lines.append(f"| {name} | {r[('advantage_ratio', 0.3)]:.6g} | {r[('advantage_ratio', 0.5)]:.6g} | "
                     f"{r[('advantage_ratio_exact', 0.3)]:.6g} | {r[('advantage_ratio_exact', 0.5)]:.6g} |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    r = df.set_index(["advantage", "p"]).advantage_ratio
    return [
        Claim("sign-balanced rho(0.3) = p/(1-p) (GRPO)", "FADE Sec. 11.3, Table 7", 0.3 / 0.7, r[("grpo", 0.3)], 1e-12),
        Claim("sign-balanced rho(0.5) = 1 (GRPO)", "FADE Sec. 11.3, Table 7", 1.0, r[("grpo", 0.5)], 1e-12),
        Claim("AsymGRPO delta=1 is sign-balanced: rho(0.3) = 3/7", "FADE Sec. 4.1", 3 / 7,
              r[("asym_grpo", 0.3)], 1e-12),
    ]


register(FigureSpec("fade_table7", "Advantage ratio rho at p = 0.3 and 0.5", "FADE Table 7, Sec. 11.3",
                    data, plot, claims, markdown))
