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
from ._style import paper_note, paper_point, plt

COLUMNS = ["setting", "N", "temperature", "seed", "step", "action", "prob", "entropy"]


def toy_data(name: str, **kw) -> pd.DataFrame:
    """Long-form trajectory of a toy, trimmed to the plotted columns."""
    traj, _ = toys.run(name, **kw)
    return traj[COLUMNS]


CROSS_STYLE = {"color": "0.3", "ls": "--", "lw": 0.9, "zorder": 3}


def panel(ax, df: pd.DataFrame, title: str, cross: tuple[str, str] | None = ("a1", "a2")) -> None:
    """Mean over seeds (thick) and every seed (thin) of ``π(a)`` for each action; with ``cross``
    (``df`` one run setting), a dashed line at the median step where ``cross[1]`` overtakes
    ``cross[0]`` (ours), labelled with that step."""
    for i, (_, cur) in enumerate(df.groupby("action", sort=False)):
        wide = cur.pivot(index="step", columns="seed", values="prob")
        ax.plot(wide.index, wide.to_numpy(), color=f"C{i}", lw=0.5, alpha=0.25)
        ax.plot(wide.index, wide.mean(axis=1), color=f"C{i}", lw=2)
    if cross is not None:
        row = stage_table(df, *cross).iloc[0]
        if np.isfinite(row.t_cross):
            ax.axvline(row.t_cross, **CROSS_STYLE)
            ax.annotate(f"{row.t_cross:g}", (row.t_cross, 0.5), xytext=(2, 0), textcoords="offset points", fontsize=7,
                        color="0.2", bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.2})
        else:
            a, b = (rf"$a_{c[1:]}$" for c in cross)
            ax.text(0.97, 0.3, f"{b} overtakes {a} in {int(row.crossed)} of {df.seed.nunique()} seeds\n(median step: never)",
                    transform=ax.transAxes, ha="right", fontsize=7, color="0.2")
    ax.set(title=title, xlabel="step", ylim=(-0.02, 1.02))


def legend(fig, labels: list[str], cross: str | None = r"ours: median step where $a_2$ overtakes $a_1$",
           paper_label: str | None = None, ncol: int = 4, extra: list | None = None, spot=None) -> None:
    """One legend below the panels: the colour of each action (``labels`` in the order of
    :func:`panel`), thick/thin lines, the crossing line, the paper marks and ``extra`` handles;
    with ``spot`` (an empty axes of the grid, turned off here) the legend fills that axes instead."""
    from matplotlib.lines import Line2D

    h = [Line2D([], [], color=f"C{i}", lw=2, label=lab) for i, lab in enumerate(labels)]
    h += [Line2D([], [], color="0.3", lw=2, label="thick: mean of seeds"),
          Line2D([], [], color="0.3", lw=0.5, alpha=0.6, label="thin: one seed each")]
    if cross is not None:
        h.append(Line2D([], [], **CROSS_STYLE, label=cross))
    if paper_label is not None:
        h.append(Line2D([], [], marker="*", ms=10, color="black", ls="none", label=paper_label))
    if spot is not None:
        spot.axis("off")
        spot.legend(handles=h + (extra or []), loc="upper center", ncol=ncol, fontsize=8.5, frameon=False)
        return
    fig.legend(handles=h + (extra or []), loc="outside lower center", ncol=ncol, fontsize=8, frameon=False)


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


def _title(label: str) -> str:
    """Panel title of a setting label ``pi(a2)=0.05`` / ``r(a1)=0.2``."""
    v = label.split("=")[1]
    if label.startswith("pi"):
        return rf"$\pi_0(a_2) = {v}$, $r = (0.5, 1, 0)$"
    return rf"$r(a_1) = {v}$, $\pi_0 = (0.3, 0.01, 0.69)$"


def plot(df: pd.DataFrame):
    labels = list(dict.fromkeys(df.setting))
    fig, axes = plt.subplots(2, 3, figsize=(12.6, 7.2), sharex=True, sharey=True, layout="constrained")
    for ax, lab in zip(axes.ravel(), labels):
        ax.grid(alpha=0.3)
        panel(ax, df[df.setting == lab], _title(lab))
    for ax in axes.ravel():
        ax.set_ylabel(r"probability $\pi(a)$")
        ax.label_outer()
    base = axes[0, 1]  # pi0(a2) = 0.01, r = (0.5, 1, 0): the setting of every claim
    paper_point(base, 0, 0.3, label="_nolegend_")
    paper_note(base, "paper (Sec. 3.2, Remarks 2-3):\n"
               "two stages in every run (fraction 1):\n"
               r"$\pi(a_1)$ peaks before $a_2$ overtakes it (1),"
               "\n" r"$\pi(a_3)$ only falls (1), $\pi(a_2)/\pi_0(a_2) \approx 1$"
               "\n" r"while $\pi(a_1) < 0.9$", [1.0, 1.0, 1.0, 1.0], loc="center right")
    paper_note(axes[0, 2], "paper (Theorem 1, Remark 3):\n"
               r"smaller $\pi_0(a_2)$, later crossing (1 = yes)", [1.0], loc="center right")
    paper_note(axes[1, 0], "paper (Theorem 1):\n"
               r"larger $r(a_2) - r(a_1)$, earlier crossing (1 = yes)", [1.0], loc="center right")
    legend(fig, [r"$\pi(a_1)$: explored, rewarded", r"$\pi(a_2)$: rare, reward 1", r"$\pi(a_3)$: reward 0"],
           paper_label=r"paper: $\pi_0(a_1) = 0.3$")
    fig.suptitle("Two-Stage Fig. 1: two-stage dynamic (G = 2, Adam, lr 0.1); top: initial policy, bottom: rewards",
                 fontsize=10)
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
