"""Two-Stage Fig. 1: probability mass dynamics of three actions.

``a1`` explored and rewarded, ``a2`` unexplored with a higher reward, ``a3`` explored with
reward 0; Two-Stage Algorithm 1 (``G = 2`` samples, mean baseline, Adam, ``η = 0.1``).  Top row:
three initial ``π(a2)`` at fixed rewards; bottom row: three ``r(a1)`` at a fixed initial policy
(the paper's layout; its exact values are only in the image, ours are in
``docs/simulations_toys.md``).  Data from :func:`simulations.toys.run` (``twostage-fig1``);
thick lines: mean over seeds, thin lines: every seed.

The three reward levels use the engine's per-action rewards (``Config(rewards=...)``).  This
module also holds the plotting and claim helpers of Fig. 5-7.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulations import toys

from ..registry import Claim, FigureSpec, register
from ._style import plt

COLUMNS = ["setting", "N", "temperature", "seed", "step", "action", "prob", "entropy"]


def toy_data(name: str, **kw) -> pd.DataFrame:
    """Long-form trajectory of a toy, trimmed to the plotted columns."""
    traj, _ = toys.run(name, **kw)
    return traj[COLUMNS]


def panel(ax, df: pd.DataFrame, title: str) -> None:
    """Mean over seeds (thick) and every seed (thin) of ``π(a)`` for each action."""
    for i, (a, cur) in enumerate(df.groupby("action", sort=False)):
        wide = cur.pivot(index="step", columns="seed", values="prob")
        ax.plot(wide.index, wide.to_numpy(), color=f"C{i}", lw=0.5, alpha=0.25)
        ax.plot(wide.index, wide.mean(axis=1), color=f"C{i}", lw=2, label=rf"$\pi$({a})")
    ax.set(title=title, xlabel="step", ylim=(-0.02, 1.02))


def stage_table(df: pd.DataFrame, first: str = "a1", second: str = "a2") -> pd.DataFrame:
    """Per (setting, N): fraction of seeds with both stages, medians of ``t_peak`` and of
    ``t_cross`` (a seed that never crosses counts as ``+inf``), seed std of ``t_cross``."""
    st = toys.stages(df, first, second)
    st["t_cross_inf"] = st.t_cross.fillna(np.inf)
    return st.groupby(["setting", "N"], sort=False).agg(
        two_stage=("two_stage", "mean"), t_peak=("t_peak", "median"), t_cross=("t_cross_inf", "median"),
        t_cross_std=("t_cross", "std"), crossed=("t_cross", "count"))


def mean_prob(df: pd.DataFrame, setting: str, action: str, N: int | None = None) -> pd.Series:
    """Seed-mean ``π(action)`` over steps."""
    cur = df[(df.setting == setting) & (df.action == action) & ((df.N == N) if N is not None else True)]
    return cur.groupby("step").prob.mean()


def data() -> pd.DataFrame:
    return toy_data("twostage-fig1", record_every=10)


def plot(df: pd.DataFrame):
    labels = list(dict.fromkeys(df.setting))
    fig, axes = plt.subplots(2, 3, figsize=(12.6, 6.8), squeeze=False)
    for ax, lab in zip(axes.ravel(), labels):
        ax.grid(alpha=0.3)
        panel(ax, df[df.setting == lab], lab + (r", r = (0.5, 1, 0)" if lab.startswith("pi") else r", $\pi_0$ = (0.3, 0.01, 0.69)"))
    axes[0, 0].set_ylabel("probability (top: same rewards)")
    axes[1, 0].set_ylabel("probability (bottom: same initial policy)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Two-Stage Fig. 1: two-stage dynamic (G = 2, Adam, lr 0.1; thick: mean of seeds)", fontsize=10)
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    t = stage_table(df)
    base = "pi(a2)=0.01"
    s = t.loc[(base, 2)]
    a3 = mean_prob(df, base, "a3").to_numpy()
    st = toys.stages(df[df.setting == base])
    # pi(a2) when pi(a1) first exceeds 0.9 (the end of the exploitation stage), over its initial value
    w1 = df[(df.setting == base) & (df.action == "a1")].pivot(index="seed", columns="step", values="prob")
    w2 = df[(df.setting == base) & (df.action == "a2")].pivot(index="seed", columns="step", values="prob")
    end1 = (w1.to_numpy() > 0.9).argmax(1)
    ratio = float(np.median(w2.to_numpy()[np.arange(len(w2)), end1] / w2.iloc[:, 0].to_numpy()))
    row1 = [t.loc[(k, 2), "t_cross"] for k in ("pi(a2)=0.05", "pi(a2)=0.01", "pi(a2)=0.002")]
    row2 = [t.loc[(k, 2), "t_cross"] for k in ("r(a1)=0.2", "r(a1)=0.5", "r(a1)=0.8")]
    return [
        Claim(f"{base}: fraction of seeds where pi(a1) rises, then falls once a2 overtakes it (paper: the dynamic of "
              "Fig. 1; pass if >= 0.75)", "Two-Stage Sec. 3.2, Fig. 1", 1.0, float(s.two_stage), 0.25),
        Claim(f"{base}: exploitation before exploration, median step of the pi(a1) peak < median step where a2 "
              "overtakes a1 (1 = yes)", "Two-Stage Remark 3, Sec. 3.2", 1.0, float(s.t_peak < s.t_cross), 0),
        Claim(f"{base}: pi(a3) (reward 0) only decreases, seed mean never rises by > 1e-3 (1 = yes)",
              "Two-Stage Sec. 3.2", 1.0, float(np.all(np.diff(a3) < 1e-3)), 0),
        Claim(f"{base}: pi(a2) 'almost unchanged (or may even decrease)' in stage 1: median pi(a2)/pi0(a2) when "
              "pi(a1) first exceeds 0.9 (pass in [0.25, 1.75])", "Two-Stage Sec. 3.2, Remark 2-3", 1.0, ratio, 0.75),
        Claim("smaller initial pi(a2) -> later exploration: median crossing step increases for pi0(a2) = 0.05, 0.01, "
              f"0.002 ({row1[0]:g}, {row1[1]:g}, {row1[2]:g}; 1 = yes)", "Two-Stage Theorem 1, Remark 3 (update scales "
              "with pi(v))", 1.0, float(row1[0] < row1[1] < row1[2]), 0),
        Claim("larger reward gap r(a2) - r(a1) -> earlier exploration: median crossing step increases for r(a1) = "
              f"0.2, 0.5, 0.8 ({row2[0]:g}, {row2[1]:g}, {row2[2]:g}; 1 = yes)", "Two-Stage Theorem 1 (update scales "
              "with the advantage)", 1.0, float(row2[0] < row2[1] < row2[2]), 0),
        Claim(f"{base}: every run starts at pi(a1) = 0.3", "setting (docs/simulations_toys.md)", 0.3,
              float(st.p_first_0.mean()), 1e-6),
    ]


register(FigureSpec("twostage_fig1", "Two-stage dynamic of three actions (initial policy and rewards)",
                    "Two-Stage Fig. 1, Sec. 3.2, App. C.1 Alg. 1", data, plot, claims))
