"""Over-Sharpening Fig. 1 (and App. G Fig. 3): π(Cat|Persian), π(Persian|Persian) over
training for raw, mean-shifted and normalised advantages (plus RLOO, REINFORCE++) and group
sizes G, Persian-only training, from :func:`simulations.linear_head.simulate_toy`.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, subplots

ADVANTAGES = {"raw": "reinforce", "mean-shifted": "dr_grpo", "normalised": "grpo", "RLOO": "rloo",
              "REINFORCE++": "reinforce_pp"}
GS = (4, 16, 64)
SEEDS = 8


def data() -> pd.DataFrame:
    frames = []
    for label, name in ADVANTAGES.items():
        tr, _ = lh.simulate_toy(G=list(GS), similarity="High", seeds=SEEDS, advantage=name, log_every=10)
        tr["panel"] = label
        frames.append(tr)
    return pd.concat(frames, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes = subplots(len(ADVANTAGES), width=3.6, height=3.8)
    gs = sorted(df.G.unique())
    proxies = [Line2D([], [], color=f"C{i}", label=f"G = {g}") for i, g in enumerate(gs)]
    proxies += [Line2D([], [], color="0.3", label=r"solid: $\pi$(Cat | Persian)"),
                Line2D([], [], color="0.3", ls="--", label=r"dashed: $\pi$(Persian | Persian)")]
    notes = {"raw": f"paper (Sec. 2.4, Fig. 1): collapses onto one label\n(winner share → 1; ours, {SEEDS}-seed mean "
                    f"{_share(df, 'raw'):.2f}),\nmore aggressively than mean-shifted",
             "normalised": "paper (Sec. 2.4): slower than mean-shifted;\nnot reproduced with sum-over-group SGD "
                           "\n(the std division enlarges the step)"}
    for ax, (panel, sub) in zip(axes, df.groupby("panel", sort=False)):
        one = sub[sub.seed == 0]
        for g, cur in one.groupby("G"):
            ax.plot(cur.step, cur.p_cat, color=f"C{gs.index(g)}")
            ax.plot(cur.step, cur.p_persian, color=f"C{gs.index(g)}", ls="--")
        ax.set_title(f"{panel} (seed 0)")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.legend(handles=proxies, fontsize=6.5, loc="center right", bbox_to_anchor=(1.0, 0.52))
        if panel in notes:
            paper_note(ax, notes[panel], [1.0], loc="upper center", bbox_to_anchor=(0.5, -0.2),
                       bbox_transform=ax.transAxes, fontsize=6.5)
    axes[0].set_ylabel(r"probability $\pi(\cdot\,|\,$Persian$)$")
    fig.tight_layout()
    return fig


def _share(df: pd.DataFrame, panel: str) -> float:
    f = df[(df.panel == panel) & (df.step == df.step.max())]
    return float(f.winner_share.mean())


def claims(df: pd.DataFrame) -> list[Claim]:
    raw, ms, nm = _share(df, "raw"), _share(df, "mean-shifted"), _share(df, "normalised")
    return [
        Claim("raw rewards: collapse onto one label (mean winner share of Cat/Persian at step 500, 1 = full)",
              "Over-Sharpening Sec. 2.4, Fig. 1", 1.0, raw, 0.1),
        Claim("raw collapses more aggressively than mean-shifted (1 = yes)", "Over-Sharpening Sec. 2.4", 1.0, float(raw > ms), 0),
        Claim("normalised slower than mean-shifted (1 = yes)", "Over-Sharpening Sec. 2.4", 1.0, float(nm < ms), 0,
              note="not reproduced with sum-over-group SGD updates: dividing by the group std (<= 1/2 for "
                   "binary rewards) enlarges the step, so normalised collapses faster; the paper gives "
                   "neither lr nor reduction (docs/simulations_linear_head.md)"),
    ]


register(FigureSpec("oversharpening_fig1", "Over-sharpening toy: collapse onto one label",
                    "Over-Sharpening Fig. 1, App. G Fig. 3", data, plot, claims))
