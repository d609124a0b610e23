"""F-GRPO App. J, Fig. 5: tail-miss probability Pr(B_τ) (Lemma 3.1) versus N for
μ_pos = 0.64 and τ = 6.3·10⁻⁵ (one non-anchor correct action of the 128,000-action
categorical simulation), over the simulation's sweep N = 2, 4, ..., 2^17 and a dense grid.

App. J derives Q_pos ≈ 0.63 from the initial logits while the caption uses μ_pos = 0.64;
we follow the caption.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import tail_miss

from ..registry import Claim, FigureSpec, register
from ._style import paper_hline, paper_point, paper_vline, subplots

MU, TAU = 0.64, 6.3e-5
SWEEP = 2 ** np.arange(0, 18)
DENSE = np.unique(np.round(np.geomspace(1, 2**17, 400))).astype(np.int64)


def data() -> pd.DataFrame:
    pk = tail_miss.peak(MU, TAU)
    frames = [pd.DataFrame({"grid": g, "mu": MU, "tau": TAU, "N": n, "active": tail_miss.active(MU, n),
                            "tail_miss": tail_miss.probability(MU, TAU, n)})
              for g, n in (("sweep", SWEEP), ("dense", DENSE))]
    frames.append(pd.DataFrame({"grid": "peak", "mu": MU, "tau": TAU, "N": [int(pk.N)],
                                "active": [tail_miss.active(MU, pk.N)], "tail_miss": [pk.value]}))
    return pd.concat(frames, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, width=4.8, height=3.6)
    d, s, p = (df[df.grid == g] for g in ("dense", "sweep", "peak"))
    for ax, scale in zip(axes, ("linear", "log")):
        ax.plot(d.N, d.active, ls="--", color="C0", label=r"active $\Pr(\mathcal{A}_N)$")
        ax.plot(d.N, d.tail_miss, color="C3", lw=2, label=r"tail miss $\Pr(\mathcal{B}_\tau)$")
        ax.plot(s.N, s.tail_miss, "o", color="C3", ms=4, label=r"simulation sweep N = $2^k$")
        ax.plot(p.N, p.tail_miss, "D", color="C3", mec="k", ms=6, label=f"our peak N* = {int(p.N.iloc[0])}")
        paper_vline(ax, 2**15, values=[15.0], label=r"paper: declines from N ≈ $2^{15}$")
        ax.set_xscale("log", base=2)
        ax.set_yscale(scale)
        ax.set_xlabel("group size N")
    left, right = axes
    paper_point(left, 1, 0.0, label=r"paper: 0 at N = 1 and < $10^{-3}$ at $2^{17}$")
    paper_point(left, 2**17, 0.0, label="_nolegend_")
    paper_hline(left, 1.0, xmin=2**3, xmax=2**10, lw=2.2, label=r"paper: plateau near 1 for N = $2^3$–$2^{10}$")
    paper_hline(right, 1e-3, xmin=2**16, xmax=2**17, lw=2.2, values=[1e-3],
                label=r"paper: < $10^{-3}$ at N = $2^{17}$")
    right.set_ylim(1e-4, 1.5)
    right.set_xlim(left.get_xlim())
    right.text(2.3, 1.3e-4, "N = 1: 0, off the\nlog axis", fontsize=6.5, color="0.3")
    left.set_ylim(-0.04, 1.08)
    left.set_ylabel("probability")
    left.set_title(rf"$\mu_{{pos}}$ = {MU:g}, $\tau$ = {TAU:g}")
    right.set_title("same, log scale")
    left.legend(fontsize=6.5, loc="lower center", bbox_to_anchor=(0.45, 0.04))
    right.legend(fontsize=6.5, loc="lower center", bbox_to_anchor=(0.56, 0.04))
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    s = df[df.grid == "sweep"].set_index("N").tail_miss
    plateau = s.loc[2**3:2**10]
    low = s[(s.index >= 2**3) & (s < 0.2)]
    first_low = int(np.log2(low.index.min()))
    return [
        Claim("Pr(B_tau) < 1e-3 at N = 2^17 = 131,072 (bound: 0 +- 1e-3)", "F-GRPO App. J, Fig. 5", 0.0,
              s.loc[2**17], 1e-3),
        Claim("plateau near 1 for intermediate N: min Pr(B_tau) over N = 2^3..2^10", "F-GRPO App. J, Fig. 5", 1.0,
              plateau.min(), 0.1),
        Claim("declines toward zero for N >~ 2^15: log2 of the first sweep N with Pr(B_tau) < 0.2",
              "F-GRPO App. J, Fig. 5", 15.0, first_low, 0.0),
        Claim("rises steeply for small N: Pr(B_tau) at N = 1 (never active)", "F-GRPO App. J, Eq. 11", 0.0,
              s.loc[1], 0.0),
    ]


register(FigureSpec("fgrpo_fig5", "Tail-miss probability vs N in the categorical simulation's setting",
                    "F-GRPO App. J, Fig. 5, Lemma 3.1", data, plot, claims))
