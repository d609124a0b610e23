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
from ._style import subplots
from .twostage_fig1 import mean_prob, panel, toy_data

SETTING = "four actions"


def data() -> pd.DataFrame:
    return toy_data("twostage-fig7", record_every=5)


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, width=4.8)
    panel(axes[0], df, "four actions, r = (0.4, 0.7, 1, 0)")
    axes[0].set_ylabel("probability")
    axes[0].legend(fontsize=7)
    st = toys.stages(df, "a2", "a3")
    k = int(st[st.two_stage].seed.min()) if st.two_stage.any() else 0  # first seed showing both stages of a2
    for i, (a, cur) in enumerate(df[df.seed == k].groupby("action", sort=False)):
        axes[1].plot(cur.step, cur.prob, color=f"C{i}", label=rf"$\pi$({a})")
    axes[1].set(title=f"seed {k} (first seed where a2 rises, then falls)", xlabel="step", ylim=(-0.02, 1.02))
    fig.suptitle(r"Two-Stage Fig. 7: four actions ($\pi_0$ = (0.3, 0.05, 0.01, 0.64), G = 2, Adam, lr 0.1)", fontsize=10)
    fig.tight_layout()
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
