"""F-GRPO Fig. 2: tail-miss probability Pr(B_τ) (Lemma 3.1) versus the group size N,
one panel per μ_pos ∈ {0.8, 0.5, 0.2}, one curve per ρ = τ/μ_pos, stars at the peaks.

The caption does not list the ρ values; we use ρ ∈ {0.2, 0.1, 0.05, 0.01}.  Peaks come from
:func:`rlvr_theory.tail_miss.peak` (integer maximiser, no scan).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import tail_miss

from ..registry import Claim, FigureSpec, register
from ._style import legend_below, legend_row, paper_note

MUS = (0.8, 0.5, 0.2)
RHOS = (0.2, 0.1, 0.05, 0.01)
N = np.unique(np.round(np.geomspace(1, 4096, 300))).astype(np.int64)


def data() -> pd.DataFrame:
    rows = []
    for mu in MUS:
        for rho in RHOS:
            tau = rho * mu
            pk = tail_miss.peak(mu, tau)
            rows.append(pd.DataFrame({"kind": "curve", "mu": mu, "rho": rho, "tau": tau, "N": N,
                                      "tail_miss": tail_miss.probability(mu, tau, N)}))
            rows.append(pd.DataFrame({"kind": "peak", "mu": mu, "rho": rho, "tau": tau, "N": [int(pk.N)],
                                      "tail_miss": [pk.value]}))
    return pd.concat(rows, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes, spots = legend_row(len(MUS), width=4.2, height=3.4, legend_height=1.5)  # legends under the panels
    for ax, spot, mu in zip(axes, spots, MUS):
        peaks = df[(df.mu == mu) & (df.kind == "peak")].sort_values("rho", ascending=False)
        ax.plot(peaks.N, peaks.tail_miss, color="0.5", lw=0.8, ls="-.", zorder=1, label=r"peaks as $\rho$ shrinks")
        for i, rho in enumerate(RHOS):
            cur = df[(df.mu == mu) & (df.rho == rho)]
            c, p = cur[cur.kind == "curve"], cur[cur.kind == "peak"].iloc[0]
            ax.plot(c.N, c.tail_miss, color=f"C{i}", label=rf"$\rho$ = {rho:g} (N* = {int(p.N)})")
            ax.plot([p.N], [p.tail_miss], "*", color=f"C{i}", ms=11, mec="k", mew=0.5)
        ax.plot([], [], "*", color="0.7", ms=11, mec="k", mew=0.5, label=r"our peak (N*, $\Pr(\mathcal{B}_\tau)$)")
        ax.set_xscale("log", base=2)
        ax.set_title(rf"$\mu_{{pos}}$ = {mu:g}")
        ax.set_xlabel("group size N")
        ax.set_ylim(0, 1.02)
        legend_below(spot, ax.get_legend_handles_labels()[0], fontsize=8)
    paper_note(axes[0], "paper (Fig. 2), every panel:\nas ρ shrinks, the peak moves\nright and up; every curve\n"
               "peaks at an intermediate N", [1.0], loc="upper right", fontsize=7.5)
    axes[0].set_ylabel(r"tail-miss probability $\Pr(\mathcal{B}_\tau)$")
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    out = []
    pk = df[df.kind == "peak"]
    curves = df[df.kind == "curve"]
    n_max = int(curves.N.max())
    for mu in MUS:
        p = pk[pk.mu == mu].sort_values("rho", ascending=False)  # rho shrinking
        right = bool(np.all(np.diff(p.N.to_numpy()) >= 0) and p.N.iloc[-1] > p.N.iloc[0])
        up = bool(np.all(np.diff(p.tail_miss.to_numpy()) > 0))
        end = curves[(curves.mu == mu) & (curves.N == n_max)].set_index("rho").tail_miss
        intermediate = bool(np.all(p.N.to_numpy() > 1) and np.all(end.loc[p.rho].to_numpy() < p.tail_miss.to_numpy()))
        out += [
            Claim(f"mu = {mu:g}: smaller rho moves the peak right (1 = true)", "F-GRPO Fig. 2 caption", 1.0,
                  float(right), 0.0),
            Claim(f"mu = {mu:g}: smaller rho moves the peak up (1 = true)", "F-GRPO Fig. 2 caption", 1.0, float(up), 0.0),
            Claim(f"mu = {mu:g}: every curve peaks at intermediate N (1 = true)", "F-GRPO Fig. 2 caption", 1.0,
                  float(intermediate), 0.0),
        ]
    return out


register(FigureSpec("fgrpo_fig2", "Tail-miss probability vs N for several mu and rho, peaks marked",
                    "F-GRPO Fig. 2, Lemma 3.1", data, plot, claims))
