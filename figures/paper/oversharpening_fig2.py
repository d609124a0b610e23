"""Over-Sharpening Fig. 2 and the IAC panel (App. H Fig. 5a): held-out Siamese accuracy
π(Siamese|Siamese) for High/Mid/Low similarity and G while training only on Persian
(normalised advantages), and the winner share of GRPO vs IAC, from
:func:`simulations.linear_head.simulate_toy`.

Protocol for the IAC claim (docs/protocol.md; fixed before the runs): the paper fixes the toy, SGD
(Sec. 2.4), α = 1 (Table 5) and G ∈ {4, 16}; it leaves open the learning rate (swept over
{0.01, 0.03, 0.1, 0.3}), the reduction (sum and mean) and which advantage IAC multiplies: raw
rewards (Sec. 2.4's toy), centred or normalised advantages (Sec. 3.1), each its own claim row,
IAC (α = 1) against the same base without it (α = 0), 16 seeds
(:func:`simulations.toys.persian_grid`).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from simulations import linear_head as lh

from ..registry import Claim, FigureSpec, register
from . import _toy_grid as tg
from ._style import paper_note, subplots

GS = (4, 16)
SEEDS = 8
SIMS = ("High", "Mid", "Low")


def data() -> pd.DataFrame:
    frames = []
    for name in ("grpo", "iac"):
        tr, _ = lh.simulate_toy(G=list(GS), similarity=list(SIMS), seeds=SEEDS, advantage=name, log_every=10)
        frames.append(tr)
    df = pd.concat(frames, ignore_index=True)
    df = (df.groupby(["advantage", "G", "similarity", "step"], sort=False)
          [["siamese_acc", "winner_share", "entropy"]].mean().reset_index())
    return pd.concat([df.assign(part="toy"), tg.iac_grid(GS, optimizers=("sgd",))], ignore_index=True)


def _legend(ax, colours: dict[str, str], loc: str = "upper right") -> None:
    """Legend of proxy handles at ``loc``: one colour per key of ``colours``, solid G = 4, dashed G = 16."""
    handles = [Line2D([], [], color=c, label=k) for k, c in colours.items()]
    handles += [Line2D([], [], color="0.3", ls=ls, label=f"{name}: G = {G}") for G, ls, name in
                zip(GS, ("-", "--"), ("solid", "dashed"))]
    ax.legend(handles=handles, fontsize=7.5, loc=loc)


def _note(ax, text: str, values: list[float]) -> None:
    paper_note(ax, text, values, loc="upper center", bbox_to_anchor=(0.5, -0.2), bbox_transform=ax.transAxes)


def plot(df: pd.DataFrame):
    fig, axes = subplots(3, width=4.4, height=3.8)
    g = df[df.advantage == "grpo"]
    for i, s in enumerate(SIMS):
        for G, ls in zip(GS, ("-", "--")):
            cur = g[(g.similarity == s) & (g.G == G)]
            axes[0].plot(cur.step, cur.siamese_acc, color=f"C{i}", ls=ls)
    axes[0].axvline(100, color="0.5", lw=0.8, ls="-.")
    axes[0].text(104, 0.15, "step 100\n(claims)", fontsize=7.5, color="0.3")
    axes[0].set_yscale("log")
    axes[0].set_title("(a) held-out Siamese accuracy (GRPO)")
    axes[0].set_ylabel(r"$\pi$(Siamese | Siamese), mean of seeds")
    _legend(axes[0], {f"{s} similarity": f"C{i}" for i, s in enumerate(SIMS)})
    _note(axes[0], "paper (Sec. 2.4, Fig. 2): higher similarity and larger G\nsqueeze the held-out Siamese class faster",
          [1.0, 1.0])
    methods = {"grpo": ("GRPO", "C3"), "iac": ("IAC", "C4")}
    for k, col in enumerate(("winner_share", "entropy")):
        ax = axes[k + 1]
        for name, (_, colour) in methods.items():
            for G, ls in zip(GS, ("-", "--")):
                cur = df[(df.advantage == name) & (df.G == G) & (df.similarity == "High")]
                ax.plot(cur.step, cur[col], color=colour, ls=ls)
        _legend(ax, dict(methods.values()), loc="lower right" if col == "winner_share" else "upper right")
    axes[1].set(title="(b) winner share at Persian (High sim.)",
                ylabel=r"$\max(\pi_{Cat}, \pi_{Persian}) / (\pi_{Cat} + \pi_{Persian})$")
    axes[2].set(title="(c) entropy at Persian (High sim.)", ylabel=r"entropy of $\pi(\cdot\,|\,$Persian$)$ (nats)")
    _note(axes[2], "paper (App. H, Fig. 5a): IAC retards collapse (higher\nentropy than GRPO); not reproduced with "
          "one\ntraining prompt (nothing to redistribute across prompts)", [1.0])
    for ax, xy in zip(axes[1:], ((0.2, 0.12), (0.42, 0.42))):
        ax.text(*xy, "G = 16: GRPO and IAC\nnearly coincide (dashed)", fontsize=7.5, color="0.3", transform=ax.transAxes)
    for ax in axes:
        ax.set_xlabel("step")
    fig.tight_layout()
    return fig


def claims(df: pd.DataFrame) -> list[Claim]:
    a = df[(df.advantage == "grpo") & (df.step == 100)].set_index(["G", "similarity"]).siamese_acc
    sim_order = all(a[(G, "High")] < a[(G, "Mid")] < a[(G, "Low")] for G in GS)
    g_order = all(a[(16, s)] < a[(4, s)] for s in SIMS)
    return [
        Claim("Siamese accuracy squeezed faster for higher similarity, High < Mid < Low at step 100 (1 = yes)",
              "Over-Sharpening Sec. 2.4, Fig. 2", 1.0, float(sim_order), 0),
        Claim("larger G squeezes Siamese faster, G=16 < G=4 at step 100 (1 = yes)", "Over-Sharpening Sec. 2.4, Fig. 2",
              1.0, float(g_order), 0),
        *_iac_claims(df[df.part == "grid"]),
    ]


def _iac_claims(grid: pd.DataFrame) -> list[Claim]:
    """IAC retards collapse (final entropy above its base's, G = 4 and 16), one row per base reading."""
    e = grid.set_index(["base", "alpha", "lr", "reduction", "G"]).final_entropy
    out = []
    for base, name in tg.BASES.items():
        cells = {tg.cell(lr, r): all(e[(base, 1.0, lr, r, G)] > e[(base, 0.0, lr, r, G)] for G in GS)
                 for lr in tg.LRS for r in tg.REDUCTIONS}
        nums = "; ".join(f"{tg.cell(lr, r)}: " + ", ".join(f"G={G} {e[(base, 1.0, lr, r, G)]:.3f} vs "
                                                           f"{e[(base, 0.0, lr, r, G)]:.3f}" for G in GS)
                         for lr in tg.LRS for r in tg.REDUCTIONS)
        out.append(tg.grid_claim(
            f"IAC retards collapse: final entropy IAC (alpha = 1) > without IAC, G = 4 and 16, SGD, IAC on {name}, "
            f"fraction of the {len(cells)} (lr, reduction) cells", "Over-Sharpening App. H, Fig. 5a", cells,
            tested_at=tg.TESTED_IAC + ", SGD", numbers=f"Final entropy IAC vs without: {nums}.",
            why=tg.iac_why(base)))
    return out


register(FigureSpec("oversharpening_fig2", "Semantic coupling squeezes the held-out class; IAC panel",
                    "Over-Sharpening Fig. 2, App. H Fig. 5", data, plot, claims))
