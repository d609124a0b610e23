"""Two-Stage Fig. 5: the three-action toy for group sizes G = 2, 3, 5, 10.

Initial policy and rewards held fixed (``π_0 = (0.3, 0.01, 0.69)``, ``r = (0.5, 1, 0)``), Two-Stage
Algorithm 1 with Adam, ``η = 0.1``.  Two-Stage App. C.4: "a larger G leads to more stable
optimization and does not affect our main findings and conclusions, the two-stage dynamic".
Data from :func:`simulations.toys.run` (``twostage-fig5``; the four G run batched in one
engine call).  Registered only when the engine has per-action rewards.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots
from .twostage_fig1 import legend, panel, stage_table, toy_data

GS = (2, 3, 5, 10)


def data() -> pd.DataFrame:
    return toy_data("twostage-fig5", record_every=10)


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, nrows=2, width=4.6, height=3.3, sharex=True, sharey=True, layout="constrained")
    t = stage_table(df).droplevel("setting")
    for ax, G in zip(axes, GS):
        panel(ax, df[df.N == G], f"G = {G}")
        ax.set_title(f"G = {G}\n" rf"std over seeds of $\pi(a_1)$: {seed_spread(df, G):.3f}, of the crossing step: "
                     f"{t.t_cross_std[G]:.0f}", fontsize=9)
        paper_point(ax, 0, 0.3, label="_nolegend_")
    for ax in axes[::2]:
        ax.set_ylabel(r"probability $\pi(a)$")
    for ax in axes[:2]:
        ax.set_xlabel("")
    paper_note(axes[-1], "paper (App. C.4):\ntwo stages at every G\n(fraction of seeds 1);\n"
               "larger G more stable:\nsmaller seed std (1 = yes)", [1.0, 1.0, 1.0], loc="center right")
    legend(fig, [r"$\pi(a_1)$, $r = 0.5$", r"$\pi(a_2)$, $r = 1$", r"$\pi(a_3)$, $r = 0$"],
           paper_label=r"paper: $\pi_0(a_1) = 0.3$ at every G")
    fig.suptitle(r"Two-Stage Fig. 5: group sizes ($\pi_0$ = (0.3, 0.01, 0.69), r = (0.5, 1, 0), Adam, lr 0.1)", fontsize=10)
    return fig


def seed_spread(df: pd.DataFrame, G: int) -> float:
    """Across-seed standard deviation of π(a1), averaged over the recorded steps."""
    w = df[(df.N == G) & (df.action == "a1")].pivot(index="step", columns="seed", values="prob")
    return float(w.std(axis=1).mean())


def claims(df: pd.DataFrame) -> list[Claim]:
    t = stage_table(df).droplevel("setting")
    spread = {G: seed_spread(df, G) for G in GS}
    return [
        Claim("the two-stage dynamic holds for every G: smallest fraction of seeds with both stages over "
              "G = 2, 3, 5, 10 (pass if >= 0.75)", "Two-Stage App. C.4, Fig. 5", 1.0, float(t.two_stage.min()), 0.25),
        Claim(f"larger G is more stable: seed spread of pi(a1) (mean over steps of the std over seeds) smaller at "
              f"G = 10 ({spread[10]:.3f}) than at G = 2 ({spread[2]:.3f}) (1 = yes)", "Two-Stage App. C.4, Sec. 3.2", 1.0,
              float(spread[10] < spread[2]), 0),
        Claim(f"larger G is more stable: seed std of the crossing step smaller at G = 10 ({t.t_cross_std[10]:.0f}) "
              f"than at G = 2 ({t.t_cross_std[2]:.0f}) (1 = yes)", "Two-Stage App. C.4", 1.0,
              float(t.t_cross_std[10] < t.t_cross_std[2]), 0),
        Claim(f"(ours, not stated in Two-Stage) larger G finds a2 earlier: median crossing step G = 10 "
              f"({t.t_cross[10]:g}) < G = 2 ({t.t_cross[2]:g}) (1 = yes)", "follows from Two-Stage Theorem 1 "
              "(more draws per step)", 1.0, float(t.t_cross[10] < t.t_cross[2]), 0),
        Claim("all G start from the same policy: pi(a1) at step 0", "Two-Stage App. C.4 (pi held constant)", 0.3,
              float(np.mean(df[(df.step == 0) & (df.action == "a1")].prob)), 1e-6),
    ]


register(FigureSpec("twostage_fig5", "Two-stage dynamic for group sizes G = 2, 3, 5, 10",
                    "Two-Stage Fig. 5, App. C.4", data, plot, claims))
