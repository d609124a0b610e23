"""Two-Stage Fig. 7: four actions.

``π_0 = (0.3, 0.05, 0.01, 0.64)``, ``r = (0.4, 0.7, 1.0, 0)``: ``a3 = a_max`` (largest reward),
``a4 = a_min``.  Two-Stage App. C.4: ``E(Δz(a_max)) ≥ 0`` always, ``E(Δz(a_min)) < 0`` always, and
"for other actions, the probabilities generally exhibit a two-stage dynamic".  G = 2, Adam,
``η = 0.1`` (Two-Stage Alg. 1).  Data from :func:`simulations.toys.run` (``twostage-fig7``).
Registered only when the engine has per-action rewards.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulations import toys

from ..registry import Claim, FigureSpec, register
from ._style import paper_note, subplots
from .twostage_fig1 import CROSS_STYLE, legend, mean_prob, panel, stage_table, toy_data

SETTING = "four actions"


def data() -> pd.DataFrame:
    return toy_data("twostage-fig7", record_every=5)


def plot(df: pd.DataFrame):
    from matplotlib.lines import Line2D

    fig, axes = subplots(2, width=4.8, height=3.8, sharey=True, layout="constrained")
    panel(axes[0], df, "all seeds, r = (0.4, 0.7, 1, 0)", cross=None)
    lines = []
    for (a, b), ls in ((("a1", "a2"), "--"), (("a2", "a3"), "-.")):
        t = float(stage_table(df, a, b).t_cross.iloc[0])
        axes[0].axvline(t, **{**CROSS_STYLE, "ls": ls})
        lines.append(Line2D([], [], **{**CROSS_STYLE, "ls": ls},
                            label=rf"ours: median step where $a_{b[1]}$ overtakes $a_{a[1]}$ ({t:g})"))
    axes[0].set_ylabel(r"probability $\pi(a)$")
    paper_note(axes[0], "paper (App. C.4):\n"
               r"$E\,\Delta z(a_{min}) < 0$: $\pi(a_4)$ only falls (1 = yes)" "\n"
               r"$E\,\Delta z(a_{max}) \geq 0$: $\pi(a_3)$ ends higher (1 = yes)" "\n"
               r"two stages of $a_1$ and of $a_2$" "\n(fraction of seeds 1)", [1.0, 1.0, 1.0, 1.0], loc="lower right", borderpad=1.1, fontsize=6.5)
    st = toys.stages(df, "a2", "a3")
    k = int(st[st.two_stage].seed.min()) if st.two_stage.any() else 0  # first seed showing both stages of a2
    for i, (_, cur) in enumerate(df[df.seed == k].groupby("action", sort=False)):
        axes[1].plot(cur.step, cur.prob, color=f"C{i}", lw=1.5)
    axes[1].set(title=f"seed {k} (first seed where $a_2$ rises, then falls)", xlabel="step", ylim=(-0.02, 1.02))
    legend(fig, [r"$\pi(a_1)$, $r = 0.4$", r"$\pi(a_2)$, $r = 0.7$", r"$\pi(a_3) = \pi(a_{max})$, $r = 1$",
                 r"$\pi(a_4) = \pi(a_{min})$, $r = 0$"], cross=None, ncol=3, extra=lines)
    fig.suptitle(r"Two-Stage Fig. 7: four actions ($\pi_0$ = (0.3, 0.05, 0.01, 0.64), G = 2, Adam, lr 0.1)", fontsize=10)
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    a4 = mean_prob(df, SETTING, "a4").to_numpy()
    a3 = mean_prob(df, SETTING, "a3").to_numpy()
    s1 = toys.stages(df, "a1", "a2")
    s2 = toys.stages(df, "a2", "a3")
    return [
        Claim("a_min (a4): E(dz) < 0, seed-mean pi(a4) never rises by > 1e-3 (1 = yes)", "Two-Stage App. C.4", 1.0,
              float(np.all(np.diff(a4) < 1e-3)), 0),
        Claim(f"a_max (a3): E(dz) >= 0, seed-mean pi(a3) ends above its start ({a3[0]:.3f} -> {a3[-1]:.3f}; 1 = yes)",
              "Two-Stage App. C.4", 1.0, float(a3[-1] > a3[0]), 0),
        Claim("a1: two stages (rises, falls once a2 overtakes it), fraction of seeds (pass if >= 0.75)",
              "Two-Stage App. C.4, Fig. 7", 1.0, float(s1.two_stage.mean()), 0.25),
        Claim("a2: two stages (rises, falls once a3 overtakes it) within 1,000 steps, fraction of seeds "
              "(pass if >= 0.5)", "Two-Stage App. C.4, Fig. 7", 1.0, float(s2.two_stage.mean()), 0.5),
    ]


register(FigureSpec("twostage_fig7", "Two-stage dynamic of four actions",
                    "Two-Stage Fig. 7, App. C.4", data, plot, claims))
