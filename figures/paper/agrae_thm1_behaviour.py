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
(d-f) Two-Stage's three-action toy with binary rewards (``a1``, ``a2`` correct, ``a3`` incorrect,
``π_0 = (0.3, 0.01, 0.69)``, G = 2, Adam, Two-Stage Alg. 1): GRPO vs GRPO-N (Two-Stage App. B.5) entropy,
``π(a2)`` and the incorrect mass ``1 − Q_pos``.  Boxed notes and the dotted diagonal of (a) show the
papers' statements ("paper").  Presets ``agrae-c0``, ``agrae-cneg``, ``twostage-grpo-n`` of :mod:`simulations.toys`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulations import toys

from ..registry import Claim, FigureSpec, register
from ._style import PAPER_COLOR, paper_note, subplots, tag_paper

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


MARKS = {"unsampled": "o", "sampled_positive": "^", "sampled_negative": "v"}
SIZES = {"GRPO": 40, "negative-dominant": 20, "GRPO-N": 7}  # shrinking open markers: coinciding points stay visible
STYLES = {"adam": "-", "sgd": "--"}


def _one_step(ax, one: pd.DataFrame) -> None:
    """Panel (a): measured one-step logit change against A-GRAE Eq. 6, with the paper's statements."""
    for (fam, case), cur in one.groupby([one.setting.map(_family), "case"], sort=False):
        ax.scatter(cur.dh_theorem, cur.dh_measured, s=SIZES[fam], marker=MARKS[case], facecolors="none",
                   edgecolors=COLORS[fam], linewidths=0.7, alpha=0.8)
    lim = float(np.abs(one[["dh_theorem", "dh_measured"]].to_numpy()).max()) * 1.05
    diag, = ax.plot([-lim, lim], [-lim, lim], color=PAPER_COLOR, ls=":", lw=1.3, zorder=4)
    tag_paper(diag, [0.0])  # Eq. 6 exactly: measured - theorem = 0
    ax.set(title="(a) one SGD step, 64 groups of G = 8", xlabel=r"A-GRAE Eq. 6: $\eta[1(b\in G)A_b - C\pi_b]$",
           ylabel=r"measured $\Delta h_b$", xlim=(-lim, lim), ylim=(-lim, lim))
    ax.text(0.03, 0.97, "dotted: measured = Eq. 6\n(error < 1e-6)\nGRPO unsampled: all at (0, 0)",
            transform=ax.transAxes, va="top", fontsize=6.5)
    paper_note(ax, "paper (Theorem 1, Eq. 7-9, 35-36):\n"
               "C = 0: unsampled max |Δh| = 0,\n  signs of Eq. 7-8 (fraction 1)\n"
               "C < 0: unsampled rise (fraction 1),\n  Δh = −ηCπ_b (max error 0);\n"
               "  a sampled incorrect b can rise (1)", [0.0, 1.0, 1.0, 0.0, 1.0], loc="lower right", fontsize=6.5)


def plot(df: pd.DataFrame):
    from matplotlib.lines import Line2D

    fig, axes = subplots(3, nrows=2, width=4.2, height=3.3, layout="constrained")
    _one_step(axes[0], df[df.panel == "one_step"])
    tr = df[df.panel == "trajectory"]
    beh = tr[tr.toy != "twostage-grpo-n"]
    for (setting, opt), cur in beh.groupby(["setting", "optimizer"], sort=False):
        kw = dict(color=COLORS[_family(setting)], ls=STYLES[opt])
        axes[1].plot(cur.step, cur.prob, **kw)
        axes[2].plot(cur.step, cur.entropy, **kw)
    axes[1].set(title=r"(b) rare correct behaviour $b_2$", xlabel="step", ylabel=r"$\pi(b_2)$ (log scale)", yscale="log",
                ylim=(3e-5, 3e-2))
    axes[2].set(title="(c) entropy, behaviour toy", xlabel="step", ylabel=r"entropy $H(\pi)$ (nats)")
    paper_note(axes[1], "A-GRAE App. B.5: C < 0 is an exploration\nincentive; ours (Adam): b2 fades at C = 0,\n"
               "grows under GRPO-N (1 = both)", [1.0], loc="lower left", fontsize=6.5)
    axes[2].text(0.97, 0.55, "dashed red and green\n(SGD, C < 0) nearly coincide", transform=axes[2].transAxes,
                 ha="right", fontsize=6.5)
    toy = tr[tr.toy == "twostage-grpo-n"]
    for setting, cur in toy.groupby("setting", sort=False):
        axes[3].plot(cur.step, cur.entropy, color=COLORS[setting])
        axes[4].plot(cur.step, cur.prob, color=COLORS[setting])
        axes[5].plot(cur.step, 1 - cur.Q_pos, color=COLORS[setting],
                     label=f"{setting}: end {cur.Q_pos.iloc[-1]:.4f}")
    axes[3].set(title="(d) Two-Stage toy: entropy", xlabel="step", ylabel=r"entropy $H(\pi)$ (nats)")
    axes[4].set(title=r"(e) Two-Stage toy: rare correct $a_2$", xlabel="step", ylabel=r"$\pi(a_2)$ (log scale)",
                yscale="log")
    axes[5].set(title=r"(f) Two-Stage toy: reward $Q_{pos}$", xlabel="step",
                ylabel=r"$1 - Q_{pos} = \pi(a_3)$ (log scale)", yscale="log")
    paper_note(axes[3], "paper (Two-Stage Sec. 4, Fig. 2):\nGRPO's entropy collapses,\nGRPO-N keeps it (1 = yes)",
               [1.0], loc="upper right")
    paper_note(axes[5], "paper (Two-Stage Sec. 4): GRPO-N\ncompetitive with GRPO:\n"
               r"$|Q_{pos}$(GRPO-N) $-$ $Q_{pos}$(GRPO)$| = 0$", [0.0], loc="upper right")
    axes[5].legend(title=r"$Q_{pos}$ at step 500", fontsize=7, title_fontsize=7, loc="lower left")
    h = [Line2D([], [], color=c, lw=2, label=f) for f, c in COLORS.items()]
    h += [Line2D([], [], color="0.3", ls=STYLES["adam"], label="solid: Adam"),
          Line2D([], [], color="0.3", ls=STYLES["sgd"], label="dashed: SGD")]
    h += [Line2D([], [], color="0.3", marker=m, ls="none", mfc="none", label=f"(a) {c.replace('_', ' ')}")
          for c, m in MARKS.items()]
    h.append(Line2D([], [], color=PAPER_COLOR, ls=":", label="paper"))
    fig.legend(handles=h, loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("top: A-GRAE behaviour toy (8 behaviours, C = 0 vs C < 0); bottom: Two-Stage three-action toy, "
                 "binary rewards, Adam", fontsize=10)
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
