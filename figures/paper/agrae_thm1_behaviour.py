"""A-GRAE Theorem 1: the logit update in behaviour space, C = 0 vs C < 0; and GRPO-N (Two-Stage).

(a) one SGD step of the engine on eight behaviours (``b1`` explored correct, ``b2`` rare
correct, ``b3`` an over-confident incorrect one, ``b4..b8`` incorrect; G = 8, 64 seeds):
measured logit change ``Δh_b`` against ``η[1(b∈G)A_b − Cπ_b]`` (A-GRAE Eq. 6, ``η = lr/G``) from
:func:`simulations.toys.behaviour_step`.  GRPO has ``C = 0`` (unsampled behaviours do not move,
Eq. 9); negative-dominant (β = 10) and GRPO-N have ``C < 0`` (every unsampled behaviour rises by
``−ηCπ_b``, Eq. 36, and a sampled incorrect one can rise, Eq. 35).
(b, c) 200 steps of the same toy, SGD (dashed) and Adam (solid): ``π(b2)`` and entropy.  The
incentive ``−ηCπ_b`` is proportional to ``π_b``, so under SGD the rare ``b2`` still fades; Adam
normalises each coordinate's step and ``b2`` grows under ``C < 0`` only.
(d) Two-Stage's three-action toy with binary rewards (``a1``, ``a2`` correct, ``a3`` incorrect,
``π_0 = (0.3, 0.01, 0.69)``, G = 2, Adam, Two-Stage Alg. 1): GRPO vs GRPO-N (Two-Stage App. B.5) entropy
and ``π(a2)``.  Presets ``agrae-c0``, ``agrae-cneg``, ``twostage-grpo-n`` of :mod:`simulations.toys`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulations import toys

from ..registry import Claim, FigureSpec, register
from ._style import subplots

STEP_SEEDS = 64
COLORS = {"GRPO": "C0", "negative-dominant": "C3", "GRPO-N": "C2"}


def _family(setting: str) -> str:
    return setting.split(" (")[0]


def data() -> pd.DataFrame:
    one = pd.concat([toys.behaviour_step(n, seeds=STEP_SEEDS) for n in ("agrae-c0", "agrae-cneg")], ignore_index=True)
    one.insert(0, "panel", "one_step")
    frames = [one]
    for name, act in (("agrae-c0", "b2"), ("agrae-cneg", "b2"), ("twostage-grpo-n", "a2")):
        traj, _ = toys.run(name)
        keep = traj[traj.action == act].groupby(["toy", "setting", "optimizer", "step"], sort=False)[
            ["prob", "entropy", "Q_pos"]].mean().reset_index()
        frames.append(keep.assign(panel="trajectory", action=act))
    return pd.concat(frames, ignore_index=True)


def plot(df: pd.DataFrame):
    fig, axes = subplots(4, width=4.0)
    one = df[df.panel == "one_step"]
    marks = {"unsampled": "o", "sampled_positive": "^", "sampled_negative": "v"}
    for (fam, case), cur in one.groupby([one.setting.map(_family), "case"], sort=False):
        axes[0].scatter(cur.dh_theorem, cur.dh_measured, s=9, marker=marks[case], color=COLORS[fam], alpha=0.6,
                        label=f"{fam}, {case.replace('_', ' ')}")
    lim = float(np.abs(one[["dh_theorem", "dh_measured"]].to_numpy()).max()) * 1.05
    axes[0].plot([-lim, lim], [-lim, lim], color="k", lw=0.6)
    axes[0].set(title="(a) one SGD step: measured vs A-GRAE Eq. 6", xlabel=r"$\eta[1(b\in G)A_b - C\pi_b]$",
                ylabel=r"measured $\Delta h_b$")
    axes[0].legend(fontsize=5, ncol=1)
    tr = df[df.panel == "trajectory"]
    beh = tr[tr.toy != "twostage-grpo-n"]
    for (setting, opt), cur in beh.groupby(["setting", "optimizer"], sort=False):
        kw = dict(color=COLORS[_family(setting)], ls="-" if opt == "adam" else "--", label=setting)
        axes[1].plot(cur.step, cur.prob, **kw)
        axes[2].plot(cur.step, cur.entropy, **kw)
    axes[1].set(title=r"(b) rare correct behaviour $\pi$(b2)", xlabel="step", yscale="log")
    axes[2].set(title="(c) entropy (solid Adam, dashed SGD)", xlabel="step")
    axes[1].legend(fontsize=5)
    toy = tr[tr.toy == "twostage-grpo-n"]
    ax2 = axes[3].twinx()
    for setting, cur in toy.groupby("setting", sort=False):
        axes[3].plot(cur.step, cur.entropy, color=COLORS[setting], label=f"{setting}: entropy")
        ax2.plot(cur.step, cur.prob, color=COLORS[setting], ls=":", label=rf"{setting}: $\pi$(a2)")
    axes[3].set(title="(d) Two-Stage toy, binary rewards: GRPO vs GRPO-N", xlabel="step", ylabel="entropy")
    ax2.set_ylabel(r"$\pi$(a2) (dotted)")
    axes[3].legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    one = df[df.panel == "one_step"]
    fam = one.setting.map(_family)
    unsampled = one.case == "unsampled"
    c0 = one[(fam == "GRPO") & unsampled]
    neg = one[(fam != "GRPO") & unsampled & (one.C < 0)]
    neg_sampled = one[(fam != "GRPO") & (one.case == "sampled_negative") & (one.C < 0)]
    live0 = one[(fam == "GRPO") & (one.case != "unsampled") & (one.C.abs() < 1e-9)]
    signs = np.sign(live0.dh_measured[live0.dh_theorem.abs() > 1e-6]) == np.sign(live0.dh_theorem[live0.dh_theorem.abs() > 1e-6])
    tr = df[df.panel == "trajectory"].set_index(["setting", "step"])
    last = df.step[df.panel == "trajectory"].max()

    def fin(setting: str, col: str, step: float | None = None) -> float:
        sub = tr.loc[setting]
        return float(sub[col].iloc[-1] if step is None else sub.loc[step, col])

    b2_0 = fin("GRPO (C=0), Adam", "prob", 0)
    return [
        Claim("C = 0 (GRPO): unsampled behaviours do not move, max |dh| over 64 groups", "A-GRAE Theorem 1, Eq. 9",
              0.0, float(c0.dh_measured.abs().max()), 1e-6),
        Claim("C = 0: sampled positives rise and sampled negatives fall (fraction with the sign of Eq. 7-8)",
              "A-GRAE Eq. 7-8", 1.0, float(signs.mean()), 0),
        Claim("C < 0: every unsampled behaviour rises (fraction with dh > 0)", "A-GRAE App. B.5, Eq. 36", 1.0,
              float((neg.dh_measured > 0).mean()), 0),
        Claim("C < 0: unsampled dh = -eta C pi_b, max |measured - theorem|", "A-GRAE App. B.5, Eq. 36", 0.0,
              float((neg.dh_measured - neg.dh_theorem).abs().max()), 1e-6),
        Claim("C < 0: a sampled incorrect behaviour can rise (1 = some dh > 0 among sampled negatives)",
              "A-GRAE App. B.5, Eq. 35", 1.0, float((neg_sampled.dh_measured > 0).any()), 0),
        Claim(f"(ours) Adam, 200 steps: the rare correct b2 fades under C = 0 ({b2_0:.4f} -> "
              f"{fin('GRPO (C=0), Adam', 'prob'):.4f}) and grows under GRPO-N ({fin('GRPO-N (C<0), Adam', 'prob'):.4f}; "
              "1 = both)", "A-GRAE App. B.5 (exploration incentive)", 1.0,
              float(fin("GRPO (C=0), Adam", "prob") < b2_0 < fin("GRPO-N (C<0), Adam", "prob")), 0),
        Claim(f"Two-Stage toy: GRPO-N keeps more entropy than GRPO after {last:g} steps ({fin('GRPO-N', 'entropy'):.3f} vs "
              f"{fin('GRPO', 'entropy'):.3f}; 1 = yes)", "Two-Stage Sec. 4, Fig. 2 (GRPO entropy collapses)", 1.0,
              float(fin("GRPO-N", "entropy") > 2 * fin("GRPO", "entropy")), 0),
        Claim("Two-Stage toy: GRPO-N reaches the reward of GRPO, |Q_pos(GRPO-N) - Q_pos(GRPO)| at the end",
              "Two-Stage Sec. 4 (competitive performance)", 0.0, abs(fin("GRPO-N", "Q_pos") - fin("GRPO", "Q_pos")), 0.01),
    ]


register(FigureSpec("agrae_thm1_behaviour", "Behaviour-space logit update: C = 0 (GRPO) vs C < 0 (negative-dominant, GRPO-N)",
                    "A-GRAE Theorem 1, App. B.3, B.5; Two-Stage App. B.5", data, plot, claims))
