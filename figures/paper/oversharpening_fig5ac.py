"""Over-Sharpening App. H Fig. 5a/5c: inverse-success advantage calibration (IAC, Sec. 3.1, α = 1)
against its uncalibrated baseline (GRPO, α = 0) under SGD and AdamW, in the Persian toy
(:func:`simulations.linear_head.simulate_toy`) and in a population of prompts of spread
difficulty where IAC's re-weighting across prompts can act
(:func:`simulations.linear_head.simulate_population`).

The population is the closest this simulator comes to the paper's setting: ``M = 32`` prompts
with good-path probabilities ``g_m`` evenly spaced over [0.1, 0.9] (hard to easy), ``K = 4``
failure modes, ``G = 8`` rollouts per prompt as in the paper's runs (Sec. 4.1), every prompt every
step.  It has one correct answer per prompt, so "collapse" there is read from what the paper
measures on its LLM runs: the answer entropy (App. I Fig. 6), avg@8 and pass@8 (Tables 1-3),
and, for the difficulty re-weighting itself, the solve rates of the hardest and easiest quarters.

Protocol for the toy claims (docs/protocol.md; fixed before the runs): the paper fixes the toy,
α = 1, G ∈ {4, 16} and the two optimizers; it leaves open the learning rate ({0.01, 0.03, 0.1,
0.3}), the reduction (sum and mean) and the base advantage IAC multiplies (raw rewards, centred,
normalised: one claim row each), IAC against the same base without it, 16 seeds
(:func:`simulations.toys.persian_grid`).  The population claims are tested at the simulator's
defaults only (lr 0.05, reduction "sum", IAC on GRPO's advantages: the population simulator takes
registry advantages only).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from . import _toy_grid as tg
from ._style import paper_note, subplots

OPTIMIZERS = {"sgd": "SGD", "adamw": "AdamW"}
PANEL = {"sgd": "5a", "adamw": "5c"}
METHODS = {"GRPO": ("grpo", "C3"), "IAC": ("iac", "C4")}      # IAC: alpha = 1 (the paper's default)
# toy (as oversharpening_fig5): Persian only, High similarity, lr 0.1, reduction "sum"
TOY_GS, TOY_SEEDS, TOY_STEPS, TOY_LR = (4, 16), 16, 500, 0.1
# population: the simulator's defaults (lr 0.05, reduction "sum") for both optimizers
M, K, G, POP_SEEDS, POP_STEPS, POP_LR = 32, 4, 8, 8, 200, 0.05
QUARTER = M // 4
STYLE = dict(zip(TOY_GS, ("-", "--")))
OPT_STYLE = {"sgd": "-", "adamw": "--"}


def _per_prompt(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact solve rate and path-weighted answer entropy per prompt of heads ``W`` [C, V, d]."""
    H, path_p, cm, _ = lh.population_setup(M, K)
    pi = lh.softmax(np.einsum("cvd,mzd->cmzv", W, H))
    pc = np.take_along_axis(pi, np.broadcast_to(cm[None, :, None, None], pi.shape[:3] + (1,)), -1)[..., 0]
    ent = -(pi * np.log(np.where(pi > 0, pi, 1.0))).sum(-1)
    return (pc * path_p).sum(-1), (ent * path_p).sum(-1)


def data() -> pd.DataFrame:
    frames = []
    for opt in OPTIMIZERS:
        for method, (adv, _) in METHODS.items():
            tr, _ = lh.simulate_toy(G=list(TOY_GS), similarity="High", seeds=TOY_SEEDS, advantage=adv, optimizer=opt,
                                    lr=TOY_LR, steps=TOY_STEPS, log_every=10)
            t = tr.groupby(["G", "step"])[["winner_share", "entropy"]].mean().reset_index()
            frames.append(t.assign(part="toy", optimizer=opt, method=method))
            tr, fin = lh.simulate_population(M=M, K=K, G=G, seeds=POP_SEEDS, advantage=adv, optimizer=opt, lr=POP_LR,
                                             steps=POP_STEPS, log_every=10)
            t = tr.groupby("step")[["solve_rate", "entropy"]].mean().reset_index()
            frames.append(t.assign(part="population", optimizer=opt, method=method))
            W0, W = fin.attrs["weights"][K]
            s, e = _per_prompt(W)
            s0, e0 = _per_prompt(W0[None])
            g = lh.population_setup(M, K)[1][:, 0]
            frames.append(pd.DataFrame({"part": "prompts", "optimizer": opt, "method": method, "prompt": np.arange(M),
                                        "g": g, "solve_rate": s.mean(0), "solve_rate_0": s0[0], "entropy": e.mean(0),
                                        "entropy_0": e0[0], "pass8": (1 - (1 - s) ** G).mean(0),
                                        "step": POP_STEPS}))
    frames.append(tg.iac_grid(TOY_GS))
    return pd.concat(frames, ignore_index=True)


def _legend(ax, extra: list[Line2D], **kw) -> None:
    handles = [Line2D([], [], color=c, label=f"{m}" + (" (α = 1)" if m == "IAC" else " (α = 0)"))
               for m, (_, c) in METHODS.items()]
    ax.legend(handles=handles + extra, fontsize=6.5, **kw)


def plot(df: pd.DataFrame):
    fig, axes = subplots(3, nrows=2, width=4.4, height=3.5)
    axes = axes.reshape(2, 3)
    toy = df[df.part == "toy"]
    for col, (opt, name) in enumerate(OPTIMIZERS.items()):
        ax = axes[0, col]
        for m, (_, c) in METHODS.items():
            for G_, ls in STYLE.items():
                cur = toy[(toy.optimizer == opt) & (toy.method == m) & (toy.G == G_)]
                ax.plot(cur.step, cur.winner_share, color=c, ls=ls)
        ax.set(ylim=(0.45, 1.02), xlabel="step", title=f"({PANEL[opt][-1]}) toy, {name}: Persian only",
               ylabel=f"winner share, mean of {TOY_SEEDS} seeds")
        _legend(ax, [Line2D([], [], color="0.3", ls=ls, label=f"G = {G_}") for G_, ls in STYLE.items()],
                loc="lower right")
        where = (dict(loc="lower left", bbox_to_anchor=(0.1, 0.03), bbox_transform=ax.transAxes) if opt == "sgd"
                 else dict(loc="upper left"))       # clear of the curves
        paper_note(ax, f"paper (App. H, Fig. {PANEL[opt]}):\nIAC retards collapse vs the\nuncalibrated baseline; "
                   "here it\nspeeds it (higher winner share)", [1.0], fontsize=6.5, **where)
    pop = df[df.part == "population"]
    ax = axes[0, 2]
    for m, (_, c) in METHODS.items():
        for opt, ls in OPT_STYLE.items():
            cur = pop[(pop.optimizer == opt) & (pop.method == m)]
            ax.plot(cur.step, cur.entropy, color=c, ls=ls)
    ax.set(xlabel="step", ylabel="mean answer entropy (nats)", ylim=(0.3, 2.05),
           title=f"population: M = {M} prompts, g from 0.1 to 0.9")
    _legend(ax, [Line2D([], [], color="0.3", ls=ls, label=OPTIMIZERS[o]) for o, ls in OPT_STYLE.items()],
            loc="lower left")
    paper_note(ax, "paper (App. I, Fig. 6): entropy stays\nhigher with IAC than without", [1.0], loc="lower right",
               fontsize=6.5)
    pr = df[df.part == "prompts"]
    for col, (opt, name) in enumerate(OPTIMIZERS.items()):
        ax = axes[1, col]
        for m, (_, c) in METHODS.items():
            cur = pr[(pr.optimizer == opt) & (pr.method == m)].sort_values("g")
            ax.plot(cur.g, cur.solve_rate - cur.solve_rate_0, color=c, marker="o", ms=2.5)
        ax.axhline(0, color="0.5", lw=0.8)
        for x in (pr.g.sort_values().unique()[QUARTER - 1], pr.g.sort_values().unique()[-QUARTER]):
            ax.axvline(x, color="0.6", lw=0.8, ls="-.")
        ax.set(xlabel=r"good-path probability $g_m$ of the prompt (hard → easy)",
               ylabel=f"solve-rate gain after {POP_STEPS} steps", title=f"population, {name}: gain per prompt")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.3 * (hi - lo))  # headroom: the legend above the points
        _legend(ax, [Line2D([], [], color="0.6", ls="-.", label="hardest / easiest quarter")], loc="upper left")
        paper_note(ax, "paper (Sec. 3.1): harder queries get\na larger effective weight", [1.0], loc="lower right",
                   fontsize=6.5)
    ax = axes[1, 2]
    s = _summary(df)
    x = np.arange(4)
    for k, (m, (_, c)) in enumerate(METHODS.items()):
        vals = [s.loc[(opt, m), key] for opt in OPTIMIZERS for key in ("avg", "pass8")]
        ax.bar(x + (k - 0.5) * 0.38, vals, 0.36, color=c, label=m)
        for xi, v in zip(x, vals):
            ax.text(xi + (k - 0.5) * 0.38, v + 0.01, f"{v:.3f}", ha="center", va="bottom", fontsize=7.5, rotation=90)
    ax.set_xticks(x, [f"{OPTIMIZERS[o]}\n{k}" for o in OPTIMIZERS for k in ("avg@8", "pass@8")])
    ax.set(ylim=(0, 1.45), ylabel=f"mean over prompts and {POP_SEEDS} seeds", title=f"population at step {POP_STEPS}")
    ax.legend(fontsize=6.5, loc="upper left")
    paper_note(ax, "paper (Tables 1-3): IAC above GRPO\non AVG@8 and PASS@8", [1.0], loc="upper right", fontsize=6.5)
    fig.tight_layout()
    return fig


def _summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (optimizer, method): avg@8 (mean solve rate), pass@8, entropy; hardest / easiest quarter's
    solve-rate gain and entropy, at the last step."""
    pr = df[df.part == "prompts"].sort_values("g")
    rows = {}
    for (opt, m), cur in pr.groupby(["optimizer", "method"]):
        hard, easy = cur.iloc[:QUARTER], cur.iloc[-QUARTER:]
        rows[(opt, m)] = {"avg": cur.solve_rate.mean(), "pass8": cur.pass8.mean(), "entropy": cur.entropy.mean(),
                          "hard_gain": (hard.solve_rate - hard.solve_rate_0).mean(),
                          "easy_gain": (easy.solve_rate - easy.solve_rate_0).mean(),
                          "easy_entropy": easy.entropy.mean(), "hard_entropy": hard.entropy.mean()}
    return pd.DataFrame(rows).T


def claims(df: pd.DataFrame) -> list[Claim]:
    out = []
    grid = df[df.part == "grid"].set_index(["base", "alpha", "optimizer", "lr", "reduction", "G"])
    for opt, name in OPTIMIZERS.items():
        for base, bname in tg.BASES.items():
            a = grid.avg_share.xs(opt, level="optimizer").xs(base, level="base")
            cells = {tg.cell(lr, r): all(a[(1.0, lr, r, g)] < a[(0.0, lr, r, g)] for g in TOY_GS)
                     for lr in tg.LRS for r in tg.REDUCTIONS}
            nums = "; ".join(f"{tg.cell(lr, r)}: " + ", ".join(f"G={g} {a[(1.0, lr, r, g)]:.3f} vs "
                                                               f"{a[(0.0, lr, r, g)]:.3f}" for g in TOY_GS)
                             for lr in tg.LRS for r in tg.REDUCTIONS)
            why = tg.iac_why(base) + ("" if opt == "sgd" else "; AdamW normalises the overall step size away, so "
                                      "it is the weight of positives relative to negatives that acts")
            out.append(tg.grid_claim(
                f"toy, {name}: IAC (alpha = 1) on {bname} retards collapse, time-averaged winner share of "
                f"Cat/Persian below that without IAC for G = 4 and 16, fraction of the {len(cells)} (lr, "
                "reduction) cells", f"Over-Sharpening App. H, Fig. {PANEL[opt]}", cells,
                tested_at=tg.TESTED_IAC + f", {name}",
                numbers=f"Time-averaged winner share IAC vs without: {nums}.", why=why))
    s = _summary(df)
    per = {opt: {m: s.loc[(opt, m)] for m in METHODS} for opt in OPTIMIZERS}

    def fmt(key: str) -> str:
        return "; ".join(f"{OPTIMIZERS[o]}: IAC {per[o]['IAC'][key]:.3f} vs GRPO {per[o]['GRPO'][key]:.3f}"
                         for o in OPTIMIZERS)

    where = f"population M={M}, K={K}, G={G}, {POP_SEEDS} seeds, step {POP_STEPS}"
    hard = all(per[o]["IAC"].hard_gain > per[o]["GRPO"].hard_gain for o in OPTIMIZERS)
    out.append(Claim(f"multi-prompt: IAC moves learning to hard prompts, solve-rate gain of the hardest quarter "
                     f"larger than GRPO's under SGD and AdamW ({where}; 1 = yes)", "Over-Sharpening Sec. 3.1", 1.0,
                     float(hard), 0, note=f"measured hardest-quarter gain {fmt('hard_gain')}; easiest quarter "
                                          f"{fmt('easy_gain')}"))
    both = all(per[o]["IAC"][k] > per[o]["GRPO"][k] for o in OPTIMIZERS for k in ("avg", "pass8"))
    out.append(Claim(f"multi-prompt: IAC above GRPO on avg@8 and pass@8 under SGD and AdamW ({where}; 1 = yes)",
                     "Over-Sharpening Sec. 4.2, Tables 1-3", 1.0, float(both), 0,
                     note=f"measured avg@8 {fmt('avg')}; pass@8 {fmt('pass8')}"))
    ent = all(per[o]["IAC"].entropy > per[o]["GRPO"].entropy for o in OPTIMIZERS)
    out.append(Claim(f"multi-prompt: answer entropy stays higher with IAC than with GRPO under SGD and AdamW "
                     f"({where}; 1 = yes)", "Over-Sharpening App. I, Fig. 6", 1.0, float(ent), 0,
                     tested_at=f"lr {POP_LR:g}, reduction 'sum', IAC on GRPO's normalised advantages, {POP_SEEDS} "
                               "seeds (one setting, not swept)",
                     note=f"measured mean entropy {fmt('entropy')}; hardest quarter {fmt('hard_entropy')}; "
                          f"easiest quarter {fmt('easy_entropy')}. IAC's factor is >= 1 on every positive: it "
                          "shrinks no prompt's weight in absolute terms, it adds weight where successes are rare, "
                          "so the total update grows and the mean entropy falls faster. Fig. 6 compares DAPO with "
                          "DAPO + IAC on an LLM, whose entropy counts many correct modes; here every prompt has "
                          "one correct answer"))
    return out


register(FigureSpec("oversharpening_fig5ac", "Inverse-success advantage calibration: toy and prompt population",
                    "Over-Sharpening App. H Fig. 5a/5c, Sec. 3.1", data, plot, claims))
