"""A-GRAE Fig. 6 and Table 1b: the update magnitude Σ_i|A_i| of one group versus its
success rate, for GRPO (2G·sqrt(p(1−p)), Theorem 2) and the hard/easy-focused controls
(G·sqrt(1−p), G·sqrt(p)).  Lines: closed forms; markers: groups with X = 0..G successes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import advantages, masses

from ..registry import Claim, FigureSpec, register
from ._style import paper_point, subplots

G = 8
P = np.linspace(0.0, 1.0, 201)
FAMILIES = ("grpo", "agrae_hard", "agrae_easy")


def data() -> pd.DataFrame:
    rows = []
    for name in FAMILIES:
        adv = advantages.get(name)
        m = masses.closed_form(adv, P)
        rows.append(pd.DataFrame({"advantage": name, "source": "closed form", "G": G, "p": P,
                                  "abs_adv_sum": G * (m.m_S + m.m_F)}))
        x = np.arange(G + 1)
        groups = (np.arange(G)[None, :] < x[:, None]).astype(float)
        rows.append(pd.DataFrame({"advantage": name, "source": "groups", "G": G, "p": x / G,
                                  "abs_adv_sum": masses.abs_adv_sum(adv, groups)}))
    return pd.concat(rows, ignore_index=True)


LABELS = {"grpo": r"GRPO: $2G\sqrt{p(1-p)}$", "agrae_hard": r"hard-focused: $G\sqrt{1-p}$",
          "agrae_easy": r"easy-focused: $G\sqrt{p}$"}


def plot(df: pd.DataFrame):
    fig, (ax,) = subplots(1, width=5.4, height=3.9)
    for i, name in enumerate(FAMILIES):
        cur = df[df.advantage == name]
        line, pts = cur[cur.source == "closed form"], cur[cur.source == "groups"]
        ax.plot(line.p, line.abs_adv_sum, color=f"C{i}", label=LABELS[name])
        ax.plot(pts.p, pts.abs_adv_sum, "o", color=f"C{i}", ms=7 - 1.5 * i)  # shrinking: coinciding dots stay visible
    ax.plot([], [], "o", color="0.4", ms=4, label=f"a group with X = 0..{G} successes")
    # the paper's numbers: Theorem 2 (GRPO peak, symmetric in p) and Table 1b (controls at p = 1/4)
    paper_point(ax, 0.5, G, label="paper (Theorem 2, Table 1b)")
    paper_point(ax, 0.25, G * 0.75**0.5, label="_nolegend_")
    paper_point(ax, 0.75, G * 0.75**0.5, label="_nolegend_")
    paper_point(ax, 0.25, G * 0.25**0.5, label="_nolegend_")
    box = {"fontsize": 7, "bbox": {"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.3}}
    ax.annotate(f"{G}", (0.5, G), xytext=(0, -13), textcoords="offset points", ha="center", **box)
    root3 = rf"${G // 2}\sqrt{{3}} \approx {G * 0.75**0.5:.2f}$"
    arrow = {"arrowstyle": "-", "color": "0.4", "lw": 0.6}
    ax.annotate(root3, (0.25, G * 0.75**0.5), xytext=(0.02, G * 1.06), arrowprops=arrow, **box)
    ax.annotate(root3, (0.75, G * 0.75**0.5), xytext=(0.98, G * 1.06), ha="right", arrowprops=arrow, **box)
    ax.annotate(f"{G * 0.5:g}", (0.25, G * 0.5), xytext=(4, -11), textcoords="offset points", **box)
    ax.set(xlabel=r"group success rate $p = X/G$", ylabel=r"$\Sigma_i\,|A_i|$ (one group)", xlim=(-0.03, 1.03),
           ylim=(-0.3, G * 1.12), title=f"update magnitude vs difficulty (G = {G})")
    ax.legend(fontsize=7, loc="lower center", title="lines: closed form", title_fontsize=7)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    grp = df[(df.advantage == "grpo") & (df.source == "groups")].set_index("p").abs_adv_sum
    hard = df[(df.advantage == "agrae_hard") & (df.source == "groups")].set_index("p").abs_adv_sum
    easy = df[(df.advantage == "agrae_easy") & (df.source == "groups")].set_index("p").abs_adv_sum
    return [
        Claim(f"GRPO sum|A| = 2G sqrt(p(1-p)) = {G} at p = 0.5", "A-GRAE Theorem 2, Eq. 10", float(G), grp[0.5], 1e-12),
        Claim("GRPO sum|A| symmetric: p = 0.25 equals p = 0.75", "A-GRAE Sec. 3, Fig. 6", grp[0.25], grp[0.75], 1e-12),
        Claim("hard-focused sum|A| = G sqrt(1-p) at p = 0.25", "A-GRAE Table 1b", G * 0.75**0.5, hard[0.25], 1e-12),
        Claim("easy-focused sum|A| = G sqrt(p) at p = 0.25", "A-GRAE Table 1b", G * 0.25**0.5, easy[0.25], 1e-12),
    ]


register(FigureSpec("agrae_fig6", "Sum of absolute advantages vs success rate", "A-GRAE Fig. 6, Table 1b",
                    data, plot, claims))
