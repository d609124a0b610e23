"""Two-Stage Fig. 6: the three-action toy at training temperatures 1, 2, 5, 20.

``π = softmax(z/τ)`` with the initial probabilities held fixed (Two-Stage App. C.4: "action rewards r
and initial policy probabilities π held constant"), so ``z_0 = τ·log π_0``.  With Adam the
gradient's factor ``1/τ`` is normalised away and ``u = z/τ`` moves by about ``η/τ`` per
step: a higher temperature slows both stages down (tested in ``tests/simulations/test_toys.py``: the
``τ = 2`` run equals the ``τ = 1`` run with ``η/2``).  2,000 steps; at ``τ = 20`` only the
exploitation stage fits.  Data from :func:`simulations.toys.run` (``twostage-fig6``).
Registered only when the engine has per-action rewards.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, paper_point, subplots
from .twostage_fig1 import legend, panel, stage_table, toy_data

TS = (1.0, 2.0, 5.0, 20.0)


def data() -> pd.DataFrame:
    return toy_data("twostage-fig6", record_every=20)


def plot(df: pd.DataFrame):
    # 2 × 3 grid (readable at 1,280 px): T = 1, 2, 5 / T = 20, entropy, legend
    fig, axes = subplots(3, nrows=2, width=4.3, height=3.4, layout="constrained")
    spot, axes = axes[-1], axes[:-1]
    t = stage_table(df).droplevel("N")
    for ax, T in zip(axes, TS):
        panel(ax, df[df.temperature == T], "")
        ax.set_title(f"T = {T:g}\n" rf"median $\pi(a_1)$ peak at step {t.t_peak[f'T={T:g}']:g}", fontsize=9)
        paper_point(ax, 0, 0.3, label="_nolegend_")
        if T not in (TS[0], TS[3]):
            ax.tick_params(labelleft=False)
        else:
            ax.set_ylabel(r"probability $\pi(a)$")
    paper_note(axes[3], "paper (App. C.4): " r"$\pi_0$ held constant," "\n"
               r"max $|\pi_0(a_1) - 0.3| = 0$;" "\ntwo stages at T = 1, 2, 5\n(fraction of seeds 1)",
               [0.0, 1.0], loc="center right", bbox_to_anchor=(1.0, 0.62), bbox_transform=axes[3].transAxes)
    ent = df[df.action == "a1"].groupby(["temperature", "step"]).entropy.mean()
    hmin = df[df.action == "a1"].groupby(["temperature", "seed"]).entropy.min().groupby("temperature").median()
    for i, T in enumerate(TS):
        axes[-1].plot(ent[T].index, ent[T].to_numpy(), color=f"C{i + 3}", label=f"entropy, T = {T:g} (median min {hmin[T]:.2g})")
    axes[-1].set(xlabel="step", ylabel="entropy (nats)", yscale="log")
    axes[-1].set_title("entropy of softmax(z/T)\nmean of seeds", fontsize=9)
    paper_note(axes[-1], "paper (App. C.4): higher T keeps\nmore entropy (1 = yes)", [1.0], loc="upper right")
    legend(fig, [r"$\pi(a_1)$, $r = 0.5$", r"$\pi(a_2)$, $r = 1$", r"$\pi(a_3)$, $r = 0$"],
           paper_label=r"paper: $\pi_0(a_1) = 0.3$ at every T", ncol=1, extra=axes[-1].get_legend_handles_labels()[0],
           spot=spot)
    fig.suptitle(r"Two-Stage Fig. 6: temperatures ($\pi_0$ = (0.3, 0.01, 0.69) at every T, r = (0.5, 1, 0), G = 2, Adam, lr 0.1)",
                 fontsize=10)
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    t = stage_table(df).droplevel("N")
    lab = {T: f"T={T:g}" for T in TS}
    peaks = [t.t_peak[lab[T]] for T in TS]
    hmin = df[df.action == "a1"].groupby(["temperature", "seed"]).entropy.min().groupby("temperature").median()
    return [
        Claim("the two-stage dynamic at T = 1, 2, 5 within 2,000 steps: smallest fraction of seeds with both "
              "stages (pass if >= 0.75)", "Two-Stage App. C.4, Fig. 6", 1.0,
              float(min(t.two_stage[lab[T]] for T in TS[:3])), 0.25),
        Claim("higher temperature keeps a more diverse policy: median over seeds of the minimum entropy increases "
              "with T = 1, 2, 5, 20 (" + ", ".join(f"{hmin[T]:.3g}" for T in TS) + "; 1 = yes)",
              "Two-Stage App. C.4 (after An et al. 2025)", 1.0, float(np.all(np.diff(hmin[list(TS)].to_numpy()) > 0)), 0),
        Claim("(ours) higher temperature slows the dynamic (Adam step eta/T in z/T): median step of the pi(a1) "
              "peak increases with T (" + ", ".join(f"{p:g}" for p in peaks) + "; 1 = yes)",
              "derivation in docs/simulations_toys.md", 1.0, float(np.all(np.diff(peaks) > 0)), 0),
        Claim("initial policy held constant across T: max |pi(a1) at step 0 - 0.3|", "Two-Stage App. C.4", 0.0,
              float(np.abs(df[(df.step == 0) & (df.action == "a1")].prob - 0.3).max()), 1e-6),
    ]


register(FigureSpec("twostage_fig6", "Two-stage dynamic for temperatures 1, 2, 5, 20",
                    "Two-Stage Fig. 6, App. C.4", data, plot, claims))
