"""The rank-1 funnel (FADE App. 15, Prop. 15.1, Cor. 15.2): r1 = σ1²/‖ΔW‖_F² of the
output-head update ΔW = W_t − W_0 over steps for AsymGRPO δ ∈ {0.5, 1, 2} and K failure
modes, from :func:`simulations.linear_head.simulate_population`; dotted: r1 of the exact
expected gradient at W_0 (:func:`simulations.linear_head.expected_gradient`).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from analysis import spectra
from rlvr_theory import advantages, rank1
from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots

DELTAS = (0.5, 1.0, 2.0)
KS = (2, 4, 16)
G = 8


def data() -> pd.DataFrame:
    frames = []
    for d in DELTAS:
        tr, _ = lh.simulate_population(K=list(KS), seeds=4, advantage="asym_grpo", advantage_params={"delta": d},
                                       log_every=5)
        tr = tr[tr.step > 0].groupby(["K", "step"]).r1.mean().reset_index()
        tr["delta"], tr["kind"] = d, "simulated"
        frames.append(tr)
        for K in KS:
            H, path_p, cm, W0 = lh.population_setup(32, K)
            Eg = lh.expected_gradient(W0, H, path_p, cm, advantages.get("asym_grpo", delta=d), G)
            frames.append(pd.DataFrame({"K": [K], "step": [0], "r1": [spectra.rank1_fraction(Eg)],
                                        "delta": [d], "kind": ["expected_gradient"]}))
    return pd.concat(frames, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes = subplots(len(KS), height=3.6, sharey=True)
    for ax, K in zip(axes, KS):
        for i, d in enumerate(DELTAS):
            cur = df[(df.K == K) & (df.delta == d) & (df.kind == "simulated")]
            ax.plot(cur.step, cur.r1, color=f"C{i}", label=rf"$\delta$ = {d:g}")
            e = df[(df.K == K) & (df.delta == d) & (df.kind == "expected_gradient")].r1.iloc[0]
            ax.axhline(e, color=f"C{i}", ls=":")
        ax.set_title(f"K = {K} failure modes", fontsize=10)
        ax.set_xlabel("training step")
    e = df[(df.K == 4) & (df.delta == 0.5) & (df.kind == "expected_gradient")].r1.iloc[0]
    paper_point(axes[1], 0, e, label=r"paper: Eq. 33 limit, $\delta$ = 0.5")
    paper_note(axes[1], "paper (Prop. 15.1, Cor. 15.2): r1 grows\nwith K and as δ shrinks (1 = yes)",
               [1.0, 1.0, 1.0], loc="lower right")
    axes[0].set_ylabel(r"rank-1 fraction $r_1 = \sigma_1^2/\|\Delta W\|_F^2$")
    styles = [Line2D([], [], color="0.3", label=r"solid: $\Delta W$, mean of 4 seeds"),
              Line2D([], [], color="0.3", ls=":", label=r"dotted: $E[g]$ at $W_0$")]
    h, _ = axes[1].get_legend_handles_labels()  # one legend for all panels (same colours and styles)
    axes[2].legend(handles=h + styles, fontsize=7, loc="lower right")
    for ax in axes:
        ax.set_xlim(-5, 105)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    e = df[df.kind == "expected_gradient"].set_index(["K", "delta"]).r1
    s = df[(df.kind == "simulated") & (df.step == df.step.max())].set_index(["K", "delta"]).r1
    H, path_p, cm, W0 = lh.population_setup(32, 4)
    Eg = lh.expected_gradient(W0, H, path_p, cm, advantages.get("asym_grpo", delta=0.5), G)
    _, _, v = spectra.leading_vectors(Eg, 1)
    u1 = v[:, 0]
    limit = float(rank1.rank1_limit(Eg @ u1, Eg - (Eg @ u1)[:, None] * u1[None, :]))
    return [
        Claim("Prop. 15.1 Eq. 33 limit equals sigma1^2/||E[g]||_F^2 (K=4, delta=0.5)", "FADE Prop. 15.1",
              limit, spectra.rank1_fraction(Eg), 1e-10),
        Claim("more failure modes, larger r1: E[g] increasing in K for every delta (1 = yes)", "FADE Cor. 15.2",
              1.0, float(all(e[2, d] < e[4, d] < e[16, d] for d in DELTAS)), 0),
        Claim("smaller delta, larger r1: E[g] at every K (1 = yes)", "FADE Prop. 15.1, Cor. 15.2", 1.0,
              float(all(e[K, 0.5] > e[K, 1.0] > e[K, 2.0] for K in KS)), 0),
        Claim("simulated Delta W after 100 steps: r1 increasing in K at delta=0.5 (1 = yes)", "FADE Cor. 15.2",
              1.0, float(s[2, 0.5] < s[4, 0.5] < s[16, 0.5]), 0),
    ]


register(FigureSpec("fade_rank1_funnel", "Rank-1 funnel of the output-head update vs delta and K",
                    "FADE App. 15, Prop. 15.1, Cor. 15.2", data, plot, claims))
