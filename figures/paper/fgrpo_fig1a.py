"""F-GRPO Fig. 1a: probability that an update is active yet misses the rare-correct
mode, versus the group size N (Lemma 3.1), beside its two factors: the activity
Pr(A_N) (Eq. 9) and the coverage factor (1 − τ)^N (Sec. 3.1).

The caption gives no (μ, τ); we draw μ = 0.5, τ = 0.01 (ρ = τ/μ = 0.02), a setting where
the paper's group sizes N = 2, 8, 32 fall on the rising edge, near the peak and on the
falling edge.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import tail_miss

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots

MU, TAU = 0.5, 0.01
N = np.unique(np.round(np.geomspace(1, 4096, 400))).astype(np.int64)
MARKED = (2, 8, 32)


def data() -> pd.DataFrame:
    pk = tail_miss.peak(MU, TAU)
    series = {
        "active": tail_miss.active(MU, N),
        "coverage_factor": tail_miss.coverage_factor(TAU, N),
        "tail_miss": tail_miss.probability(MU, TAU, N),
    }
    rows = [pd.DataFrame({"series": k, "mu": MU, "tau": TAU, "N": N, "value": v}) for k, v in series.items()]
    rows.append(pd.DataFrame({"series": "peak", "mu": MU, "tau": TAU, "N": [int(pk.N)], "value": [pk.value]}))
    return pd.concat(rows, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, (ax,) = subplots(1, width=5.6, height=3.6)
    styles = {"tail_miss": dict(ls="-", color="C3", lw=2.4, zorder=2, label=r"tail miss $\Pr(\mathcal{B}_\tau)$"),
              "active": dict(ls="--", color="C0", lw=1.4, zorder=3, label=r"active $\Pr(\mathcal{A}_N)$"),
              "coverage_factor": dict(ls=":", color="C2", lw=1.8, zorder=3, label=r"coverage $(1-\tau)^N$")}
    for name, kw in styles.items():
        cur = df[df.series == name]
        ax.plot(cur.N, cur.value, **kw)
    tm = df[df.series == "tail_miss"].set_index("N").value
    ax.plot(list(MARKED), [tm.loc[n] for n in MARKED], "o", color="C3", ms=5, zorder=5,
            label="N = 2, 8, 32 (paper's sizes)")
    # each label on the side of its point away from the curve: right of the rising edge, under the
    # peak, left of the falling edge (inside the hump)
    offsets = dict(zip(MARKED, (((5, -12), "left"), ((0, -22), "center"), ((-7, -14), "right"))))
    for n in MARKED:
        xy, ha = offsets.get(n, ((5, -12), "left"))
        ax.annotate(f"N = {n}", (n, tm.loc[n]), textcoords="offset points", xytext=xy, fontsize=7, ha=ha)
    pk = df[df.series == "peak"].iloc[0]
    ax.plot([pk.N], [pk.value], "D", color="C3", mec="k", ms=7, zorder=5, label=f"our peak N* = {int(pk.N)}")
    n_max = int(tm.index.max())
    paper_point(ax, 1, 0.0, label=r"paper: $\Pr(\mathcal{B}_\tau)$ = 0 (N = 1, N $\to\infty$)")
    paper_point(ax, n_max, 0.0, label="_nolegend_")
    paper_point(ax, 2, 0.5, marker="P", s=70, label=r"paper: $\Pr(\mathcal{A}_2)$ = 1/2, $\Pr(\mathcal{A}_N) \to 1$")
    paper_point(ax, n_max, 1.0, marker="P", s=70, label="_nolegend_")
    paper_note(ax, r"paper (Fig. 1a, Sec. 3.1): $\Pr(\mathcal{B}_\tau)$" "\npeaks at an intermediate N", [1.0],
               loc="lower left", bbox_to_anchor=(0.13, 0.2), bbox_transform=ax.transAxes)
    ax.text(0.14, 0.04, "curves overlap: tail miss = active for small N,\nand = coverage once active ≈ 1",
            fontsize=6.5, color="0.3", transform=ax.transAxes)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size N")
    ax.set_ylabel("probability")
    ax.set_ylim(-0.04, 1.06)
    ax.set_title(rf"$\mu$ = {MU:g}, $\tau$ = {TAU:g} ($\rho = \tau/\mu$ = {TAU / MU:g})", fontsize=10)
    ax.legend(fontsize=6.5, loc="upper right", bbox_to_anchor=(1.0, 0.91))
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    tm = df[df.series == "tail_miss"].set_index("N").value
    act = df[df.series == "active"].set_index("N").value
    pk = df[df.series == "peak"].iloc[0]
    n_max = int(tm.index.max())
    intermediate = 2 < pk.N < n_max and pk.value > tm.loc[2] and pk.value > tm.loc[n_max]
    return [
        Claim("N = 1 is never active, so Pr(B_tau) = 0", "F-GRPO Eq. 9, 11", 0.0, tm.loc[1], 0.0),
        Claim("Pr(B_tau) peaks at intermediate N (1 = true)", "F-GRPO Fig. 1a caption, Sec. 3.1", 1.0,
              float(intermediate), 0.0),
        Claim("small N: activity Pr(A_2) = 2 mu (1 - mu) = 1/2", "F-GRPO Eq. 9, Sec. 3.1 'Small N'", 0.5,
              act.loc[2], 1e-12),
        Claim(f"large N covers the rare mode: Pr(B_tau) at N = {n_max} -> 0", "F-GRPO Sec. 3.1 'Large N'", 0.0,
              tm.loc[n_max], 1e-6),
        Claim(f"activity Pr(A_N) -> 1 at N = {n_max}", "F-GRPO Sec. 3.1", 1.0, act.loc[n_max], 1e-6),
    ]


register(FigureSpec("fgrpo_fig1a", "Tail-miss probability vs group size (active yet missing the rare mode)",
                    "F-GRPO Fig. 1a, Lemma 3.1", data, plot, claims))
