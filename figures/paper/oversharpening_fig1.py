"""Over-Sharpening Fig. 1 (and App. G Fig. 3): π(Cat|Persian), π(Persian|Persian) over
training for raw, mean-shifted and normalised advantages (plus RLOO, REINFORCE++) and group
sizes G, Persian-only training, from :func:`simulations.linear_head.simulate_toy`.
"""

from __future__ import annotations

import pandas as pd

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import subplots

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
    fig, axes = subplots(len(ADVANTAGES), width=3.6)
    for ax, (panel, sub) in zip(axes, df.groupby("panel", sort=False)):
        one = sub[sub.seed == 0]
        for i, (g, cur) in enumerate(one.groupby("G")):
            ax.plot(cur.step, cur.p_cat, color=f"C{i}", label=f"Cat, G={g}")
            ax.plot(cur.step, cur.p_persian, color=f"C{i}", ls="--", label=f"Persian, G={g}")
        ax.set_title(f"{panel} (seed 0)")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("probability at the Persian input")
    axes[0].legend(fontsize=6)
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
