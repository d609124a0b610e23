"""FADE Fig. 4, Fig. 14 and Table 2 (Sec. 4.1, App. 11.3): policy entropy after a fixed number of
steps against the advantage ratio ρ(p̄) = m_S·p̄/(m_F·q̄), across advantages, with the learning
rate equalised by η·max_i|A_i| (App. 11.3) and without (Fig. 14), on the linear-head population
(:func:`simulations.linear_head.simulate_population`, the shared-answer setting of ``fade-fig8``).

Equalisation (App. 11.3, "we adapt the learning rate η for each method using their
η·max_i|A_i| magnitude ... using GRPO as a reference"): η_a = η_ref·max|A_ref|/max|A_a|
(:func:`equalised_lr`), with the reference the paper's "GRPO", the mean-only one
(``dr_grpo``, FADE Sec. 2.2), and max|A| the largest |advantage| any group of ``G`` rollouts can
receive (:func:`max_abs_advantage`, over the ``G + 1`` outcomes; the paper takes it from its
batches, which we do not have).  ρ(p̄) is the exact ratio at ``G`` (:func:`rlvr_theory.masses.
advantage_ratio`) at p̄, the mean solve rate of the equalised runs over training (the paper uses
the mid-training solve rate, 0.3 for its 7B model).  Families with m_F = 0 (ρ = ∞) are left out as
in Table 7.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlvr_theory import advantages, masses
from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from ._style import legend_below, legend_row, paper_note, spread_labels

G = 8
SEEDS = 4
STEPS = 150
LR_REF = 0.1
REFERENCE = ("dr_grpo", {})
#: (label, family, parameters): sign-balanced families of several scales and sign-biased ones
ADVANTAGES = (
    ("GRPO mean (dr_grpo)", "dr_grpo", {}), ("GRPO std", "grpo", {}), ("RLOO", "rloo", {}),
    ("Power α=2", "power_alpha", {"alpha": 2.0}), ("Power α=3", "power_alpha", {"alpha": 3.0}),
    ("MaxRL", "maxrl", {}), ("Skew-R", "skew_r", {}), ("logmeanexp", "logmeanexp", {}),
    ("AsymGRPO δ=0.25", "asym_grpo", {"delta": 0.25}), ("AsymGRPO δ=0.5", "asym_grpo", {"delta": 0.5}),
    ("AsymGRPO δ=2", "asym_grpo", {"delta": 2.0}), ("AsymGRPO δ=4", "asym_grpo", {"delta": 4.0}),
    ("asym Power", "asym_power_alpha", {}), ("W-REINFORCE", "w_reinforce", {}),
    ("quantile", "quantile", {}), ("negative dominant", "negative_dominant", {}),
    ("positive dominant", "positive_dominant", {}), ("IAC", "iac", {}),
)
POPULATION = dict(K=4, correct="shared", init_scale=1.0, G=G, seeds=SEEDS, steps=STEPS, log_every=STEPS // 10)
MODES = {"equalised": ("C0", "o", r"equalised lr $\eta_{ref}\max|A_{ref}|/\max|A|$ (Fig. 14 left)"),
         "same": ("C3", "s", rf"same lr $\eta$ = {LR_REF:g} (Fig. 14 right)")}


def max_abs_advantage(adv: advantages.Advantage | str, G: int) -> float:
    """max_i |A_i| over every group of ``G`` binary rewards (the ``G + 1`` outcomes x = 0..G).

    >>> max_abs_advantage("dr_grpo", 8)   # one success among 8: 1 − 1/8
    0.875
    """
    o = masses.outcome_advantages(adv, G)
    return float(np.nanmax(np.abs(np.r_[o.A_success.to_numpy(), o.A_failure.to_numpy()])))


def equalised_lr(adv: advantages.Advantage | str, G: int, lr_ref: float = LR_REF,
                 reference: advantages.Advantage | str = "dr_grpo") -> float:
    """FADE App. 11.3: the learning rate giving ``adv`` the reference's η·max|A|.

    >>> round(equalised_lr(advantages.get("asym_grpo", delta=0.5), 8, 0.1), 6)  # max|A| = 1.75
    0.05
    """
    return lr_ref * max_abs_advantage(reference, G) / max_abs_advantage(adv, G)


def data() -> pd.DataFrame:
    rows = []
    for label, name, params in ADVANTAGES:
        adv = advantages.get(name, **params)
        scale = max_abs_advantage(adv, G)
        runs: dict[float, pd.DataFrame] = {}   # the same lr in both modes (max|A| = the reference's): one run
        for mode in MODES:
            lr = equalised_lr(adv, G) if mode == "equalised" else LR_REF
            if lr not in runs:
                tr, _ = lh.simulate_population(advantage=name, advantage_params=params, lr=lr, **POPULATION)
                runs[lr] = tr.groupby("step")[["entropy", "solve_rate"]].mean()
            g = runs[lr]
            rows.append(dict(label=label, advantage=name, params=str(params), mode=mode, lr=lr, max_abs_A=scale,
                             lr_ratio=lr / LR_REF if mode == "equalised" else 1.0,
                             H0=float(g.entropy.iloc[0]), H_T=float(g.entropy.iloc[-1]),
                             solve_rate_mean=float(g.solve_rate.mean()), solve_rate_T=float(g.solve_rate.iloc[-1])))
    df = pd.DataFrame(rows)
    p_bar = float(df[df["mode"] == "equalised"].solve_rate_mean.mean())
    rho = {label: float(masses.advantage_ratio(advantages.get(name, **params), p_bar, G, exact=True))
           for label, name, params in ADVANTAGES}
    return df.assign(rho=df.label.map(rho), p_bar=p_bar, steps=STEPS, G=G, seeds=SEEDS)


def _spearman(a: pd.Series, b: pd.Series) -> float:
    return float(a.corr(b, method="spearman"))


def _stats(df: pd.DataFrame) -> dict[str, float]:
    eq, same = df[df["mode"] == "equalised"], df[df["mode"] == "same"]
    return {"rho_eq": _spearman(eq.rho, eq.H_T), "scale_same": _spearman(same.max_abs_A, same.H_T),
            "scale_eq": _spearman(eq.max_abs_A, eq.H_T), "solve_eq": _spearman(eq.solve_rate_T, eq.H_T),
            "solve_all": _spearman(df.solve_rate_T, df.H_T)}


def plot(df: pd.DataFrame):
    s = _stats(df)
    fig, axes, spots = legend_row(3, width=4.3, height=3.9, legend_height=0.55)
    top = 3.1  # room above the data for the paper notes
    eq = df[df["mode"] == "equalised"]
    ax = axes[0]
    ax.scatter(eq.rho, eq.H_T, color=MODES["equalised"][0], marker="o", s=22, label=MODES["equalised"][2], zorder=5)
    ax.set(xscale="log", xlabel=rf"advantage ratio $\rho(\bar p) = m_S\bar p/(m_F\bar q)$, $\bar p$ = {df.p_bar.iloc[0]:.2f}",
           ylabel=f"answer entropy at step {STEPS} (mean of {SEEDS} seeds)", xlim=(0.05, 20),
           title=f"Fig. 4: entropy vs ρ, equalised lr\nSpearman = {s['rho_eq']:+.2f}", ylim=(0, top))
    paper_note(ax, "paper (Fig. 4): entropy falls as ρ rises\n(Spearman −1 ideal); not reproduced here", [-1.0],
               loc="upper right")
    ax = axes[1]
    for mode, (c, mk, lab) in MODES.items():
        cur = df[df["mode"] == mode]
        ax.scatter(cur.max_abs_A, cur.H_T, color=c, marker=mk, s=22, label=lab)
    ax.set(xscale="log", xlabel=r"scale $\max_i|A_i|$ (any group of G = 8)", ylim=(0, top),
           ylabel=f"answer entropy at step {STEPS}",
           title=f"Fig. 14: scale vs entropy\nSpearman: same lr {s['scale_same']:+.2f}, equalised {s['scale_eq']:+.2f}")
    paper_note(ax, "paper (Fig. 14): at the same lr a larger\nscale collapses entropy faster (−1 ideal);\n"
               "equalising η·max|A| removes that (1 = yes)", [-1.0, 1.0], loc="upper right")
    ax = axes[2]
    for mode, (c, mk, lab) in MODES.items():
        cur = df[df["mode"] == mode]
        ax.scatter(cur.solve_rate_T, cur.H_T, color=c, marker=mk, s=22, label=lab.split(" (")[0])
    ax.set(xlabel=f"solve rate at step {STEPS}", ylabel=f"answer entropy at step {STEPS}", ylim=(0, top),
           title=f"entropy tracks learning progress here\nSpearman (all runs) = {s['solve_all']:+.2f}")
    paper_note(ax, "paper (Fig. 4): entropy is not correlated\nwith learning speed (corr. 0)", [0.0],
               loc="upper right")
    for ax, spot in zip(axes, spots):  # legends under the axes, off the points
        legend_below(spot, ax.get_legend_handles_labels()[0])
    fig.tight_layout(h_pad=0.2)
    spread_labels(axes[0], eq.rho, eq.H_T, eq.label, fontsize=6.5)  # after the layout: measured as drawn
    return fig


def markdown(df: pd.DataFrame) -> str:
    """Table 2 at this scale: max|A| against the reference and the equalised learning rates."""
    eq = df[df["mode"] == "equalised"]
    lines = [f"| advantage | max abs A (G={G}) | gradient ratio vs dr_grpo | equalised lr (ref {LR_REF:g}) | rho(p_bar) | "
             f"entropy at step {STEPS}, equalised | same lr |", "|---|---|---|---|---|---|---|"]
    same = df[df["mode"] == "same"].set_index("label").H_T
    ref = max_abs_advantage(REFERENCE[0], G)
    for _, r in eq.iterrows():
        lines.append(f"| {r.label} | {r.max_abs_A:.4g} | {r.max_abs_A / ref:.4g} | {r.lr:.4g} | {r.rho:.4g} | "
                     f"{r.H_T:.3f} | {same[r.label]:.3f} |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    s = _stats(df)
    eq = df[df["mode"] == "equalised"]
    asym = eq[eq.advantage.isin(["asym_grpo", "dr_grpo"])].sort_values("rho")
    sweep = ", ".join(f"rho={r.rho:.2f}: H={r.H_T:.2f}, solve={r.solve_rate_T:.2f}" for _, r in asym.iterrows())
    return [
        Claim("Fig. 4: at equalised learning rates the entropy after a fixed number of steps falls as the "
              "advantage ratio rho rises: Spearman(rho, H_T) = -1 ideal", "FADE Fig. 4, Sec. 4.1, App. 11.3",
              -1.0, s["rho_eq"], 0.3,
              note=f"measured {s['rho_eq']:+.2f} over {len(eq)} advantages. Here the entropy after {STEPS} steps "
                   f"follows how far each run has learned (Spearman(solve rate, H_T) = {s['solve_eq']:+.2f}, "
                   "equalised runs): the AsymGRPO delta sweep (equal difficulty profile) gives " + sweep + ", not "
                   "monotone in rho. The sign-ratio drift (m_S - m_F)H of Eq. 7 is not part of the first-order "
                   "entropy change of a softmax (rlvr_theory.entropy), so only the covariance term, which grows "
                   "with learning, acts",
              tested_at=f"one setting, not swept: reference lr {LR_REF:g} equalised by max|A|, G {G}, {SEEDS} seeds, "
                        f"{STEPS} steps; the tie of entropy to learning progress is structural (one shared correct "
                        "answer), not a property of the lr"),
        Claim("Fig. 14: at the same learning rate a larger advantage scale max|A| collapses entropy faster: "
              "Spearman(max|A|, H_T) = -1 ideal", "FADE Fig. 14, App. 11.3", -1.0, s["scale_same"], 0.3),
        Claim("Fig. 14 / App. 11.3: equalising eta*max|A| removes the scale effect: "
              "|Spearman(max|A|, H_T)| smaller at equalised than at the same lr (1 = yes)", "FADE App. 11.3, Fig. 14",
              1.0, float(abs(s["scale_eq"]) < abs(s["scale_same"])), 0),
        Claim("Fig. 4: entropy is not correlated with learning speed: Spearman(solve rate at T, H_T) over all "
              "runs = 0", "FADE Fig. 4", 0.0, s["solve_all"], 0.3,
              note=f"measured {s['solve_all']:+.2f}: in the linear head with one shared correct answer the answer "
                   "entropy falls as the correct answer's probability rises, so entropy and learning progress "
                   "are tied; the paper's token entropy of long reasoning traces is not",
              tested_at=f"one setting, not swept: reference lr {LR_REF:g}, G {G}, {SEEDS} seeds, {STEPS} steps; "
                        "the tie is structural (one shared correct answer), not a property of the lr"),
    ]


register(FigureSpec("fade_fig4", "Entropy vs advantage ratio rho with equalised learning rates (linear head)",
                    "FADE Fig. 4, Fig. 14, Table 2, App. 11.3", data, plot, claims, markdown))
