"""FADE Table 1: every advantage as (m_S, m_F), closed form and numbers.

The CSV holds one row per family: the sympy expressions (per rollout), the kind of the
closed form, the source, any erratum, and the plug-in and exact finite-G values at
p = 0.3 and p = 0.5 (G = 8).
"""

from __future__ import annotations

import pandas as pd

from rlvr_theory import masses

from ..registry import Claim, FigureSpec, register
from ._style import plt

G = 8
P = (0.3, 0.5)


def data() -> pd.DataFrame:
    expr = masses.expressions()
    vals = masses.table(P, G)
    wide = vals.pivot_table(index="advantage", columns="p",
                            values=["m_S", "m_F", "m_S_exact", "m_F_exact"], sort=False)
    wide.columns = [f"{v}@p={p:g}" for v, p in wide.columns]
    return expr.merge(wide.reset_index(), on="advantage").assign(G=G)


def plot(df: pd.DataFrame):
    show = df[["advantage", "m_S", "m_F", "kind", "m_S@p=0.3", "m_F@p=0.3",
               "m_S_exact@p=0.3", "m_F_exact@p=0.3"]].copy()
    for c in show.columns[4:]:
        show[c] = show[c].map(lambda v: f"{v:.4g}")
    for c in ("m_S", "m_F"):
        show[c] = show[c].map(lambda s: s if len(s) <= 48 else s[:45] + "...")
    fig, ax = plt.subplots(figsize=(15, 0.28 * len(show) + 1))
    ax.axis("off")
    tab = ax.table(cellText=show.values, colLabels=list(show.columns), loc="center", cellLoc="left")
    tab.auto_set_font_size(False)
    tab.set_fontsize(6.5)
    tab.auto_set_column_width(list(range(show.shape[1])))
    ax.set_title(f"FADE Table 1: masses per rollout (closed form; values at p = 0.3, exact at G = {G})")
    return fig


def markdown(df: pd.DataFrame) -> str:
    lines = [f"| advantage | m_S | m_F | kind | m_S(0.3) | m_F(0.3) | exact m_S(0.3), G={G} | "
             f"exact m_F(0.3), G={G} | source |", "|---|---|---|---|---|---|---|---|---|"]
    for r in df.to_dict("records"):
        lines.append(f"| {r['advantage']} | ${r['m_S_latex']}$ | ${r['m_F_latex']}$ | {r['kind']} | "
                     f"{r['m_S@p=0.3']:.6g} | {r['m_F@p=0.3']:.6g} | {r['m_S_exact@p=0.3']:.6g} | "
                     f"{r['m_F_exact@p=0.3']:.6g} | {r['source']} |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    row = df.set_index("advantage")
    return [
        Claim("GRPO m_S = m_F = sqrt(pq) at p = 0.3", "FADE App. 8.1", 0.21**0.5, row.loc["grpo", "m_S@p=0.3"], 1e-12),
        Claim("MaxRL m_S = m_F = q at p = 0.3", "FADE App. 8.3", 0.7, row.loc["maxrl", "m_F@p=0.3"], 1e-12),
        Claim("binary contrastive m_S = m_F = p at p = 0.3", "FADE App. 8.7", 0.3,
              row.loc["binary_contrastive", "m_F@p=0.3"], 1e-12),
        Claim("MC-GRPO m_S = p·1[p <= 1/2] at p = 0.5", "FADE App. 8.6", 0.5, row.loc["mc_grpo", "m_S@p=0.5"], 1e-12),
    ]


register(FigureSpec("fade_table1", "Masses (m_S, m_F) of every advantage", "FADE Table 1, App. 8",
                    data, plot, claims, markdown))
