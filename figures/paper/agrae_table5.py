"""A-GRAE Table 5 (ablations) and App. D.5 (collapse frequency) on the tiny GRPO trainer.

The runs take far longer than a figure may (sixty GRPO runs of the tiny-cpu model per learning
rate, about a minute each on a shared core), so this figure reads the committed CSV
``figures/data/agrae_collapse.csv`` that ``python examples/seed_experiments.py collapse --seeds 10
--lr LR`` wrote (one row per run, with its ``lr`` and ``steps``; the script and
``docs/seed_experiments.md`` give the setup and the protocol's grid).  A run *collapses* when the
fraction of its fully unsolved training groups, averaged over the last 20 % of steps, exceeds its
average over the first 20 % by at least 0.25 (App. D.3 characterises the collapse by the rising
count of fully unsolved questions and gives no threshold).

The collapse counts are read beside the mechanism A-GRAE gives for them (Sec. 4.2, Fig. 3:
Negative-Dominant's training entropy rising while the other variants' falls): a cell of the grid
shows it when the entropy of most of its Negative-Dominant runs rose (``entropy_rose``), that of
most GRPO runs did not, and GRPO trains there (held-out pass@1 not below the SFT start's).
Without it the count does not test the claim; with it, no collapse in 10 runs is set against the
paper's 3 of 10 by Fisher's exact test.
The orderings of Table 5 are checked at every learning rate by :mod:`figures.paper._seed_grid`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..registry import Claim, FigureSpec, register
from ._seed_grid import aggregate, cell_label, direction_claim, read_runs
from ._style import paper_note, paper_point, subplots

CSV = Path(__file__).resolve().parents[1] / "data" / "agrae_collapse.csv"
ORDER = ("GRPO", "Negative-Dominant", "A-GRAE (group level)", "A-GRAE (sample level)", "A-GRAE (full)",
         "Dr.GRPO + A-GRAE")
#: A-GRAE App. D.5: collapsed runs out of 10 (Negative-Dominant; the attenuation suppression strategy,
#: i.e. the group-level asymmetry)
PAPER_COLLAPSES = {"Negative-Dominant": 3, "A-GRAE (group level)": 0}
PAPER_RUNS = 10
#: A-GRAE Table 5, MATH, Qwen2.5-Math-7B: pass@1 and pass@256
PAPER_MATH = {"GRPO": (76.5, 95.0), "A-GRAE (sample level)": (77.8, 96.0), "A-GRAE (group level)": (77.6, 97.0),
              "A-GRAE (full)": (78.3, 96.5)}
#: A-GRAE Table 2, MATH: Dr.GRPO + A-GRAE pass@1
PAPER_DR_AGRAE_PASS1 = 78.6
#: the settings every cell shares (docs/seed_experiments.md, "Protocol")
SETTING = "sort-3, tiny-cpu model, one SFT start, B = 16, G = 8, AdamW, token-mean PPO"


def data() -> pd.DataFrame:
    """One row per (lr, steps, variant): runs, collapsed runs, pass@1 / pass@k (mean, s.e.), the
    rise of the fully unsolved fraction (mean, max), and the mechanism record: the runs whose
    training entropy rose (``rose`` of ``rose_n`` recorded; ``rose_n`` = 0 for the runs written
    before the record existed) and the mean entropy over the first / last 20 % of steps."""
    runs = read_runs(CSV)
    k = int([c for c in runs if c.startswith("pass@") and c != "pass@1"][0].split("@")[1])
    for c in ("entropy_rose", "entropy_first", "entropy_last"):
        if c not in runs:
            runs[c] = np.nan
    runs["rose_f"] = runs.entropy_rose.map({True: 1.0, False: 0.0, "True": 1.0, "False": 0.0})
    runs["collapsed_f"] = runs.collapsed.astype(str).eq("True").astype(float)
    out = aggregate(runs, {"pass1": "pass@1", "passk": f"pass@{k}", "rise": "frac_all_wrong_rise",
                           "H_first": "entropy_first", "H_last": "entropy_last"})
    g = runs.groupby(["lr", "steps", "variant"], sort=False)
    extra = pd.DataFrame({"collapsed": g.collapsed_f.sum(), "rise_max": g.frac_all_wrong_rise.max(),
                          "rose": g.rose_f.sum(), "rose_n": g.rose_f.count(),
                          "sft_pass1": g["sft_pass@1"].first(), "sft_passk": g[f"sft_pass@{k}"].first()})
    out = out.join(extra, on=["lr", "steps", "variant"])
    out["k"] = k
    return out


def _cells(df: pd.DataFrame) -> list[tuple[float, int]]:
    return list(dict.fromkeys(zip(df.lr, df.steps)))


def plot(df: pd.DataFrame):
    fig, axes = subplots(2, width=5.6, height=3.9)
    cells = _cells(df)
    x = np.arange(len(ORDER))
    w = 0.8 / max(1, len(cells))
    names = [v.replace(" + ", " +\n").replace(" (", "\n(") for v in ORDER]
    ax = axes[0]
    for j, (lr, steps) in enumerate(cells):
        cur = df[(df.lr == lr) & (df.steps == steps)].set_index("variant").reindex(list(ORDER))
        pos = x - 0.4 + w * (j + 0.5)
        bars = ax.bar(pos, cur.collapsed.fillna(0), w, color=f"C{j}", alpha=0.85, label=cell_label(lr, steps))
        labels = [("" if np.isnan(r) else f"{int(c)}/{int(r)}") for c, r in zip(cur.collapsed.fillna(0), cur.runs)]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=1, rotation=90)
    for j, (v, n) in enumerate(PAPER_COLLAPSES.items()):
        i = ORDER.index(v)
        paper_point(ax, i, n, label="paper (App. D.5, 7B): of 10 runs" if j == 0 else "_nolegend_", values=[n])
    nd = df[df.variant == "Negative-Dominant"]
    mech = "; ".join(f"{cell_label(r.lr, r.steps)}: {int(r.rose)}/{int(r.rose_n)}" if r.rose_n else
                     f"{cell_label(r.lr, r.steps)}: not recorded" for r in nd.itertuples())
    ax.text(0.01, 0.98, "Negative-Dominant runs whose\ntraining entropy rose (the\nmechanism, A-GRAE Fig. 3):\n"
            + mech.replace("; ", "\n"), transform=ax.transAxes, fontsize=7.5, va="top", color="0.3")
    ax.set_xticks(x, names, fontsize=7.5)
    ax.set(ylabel="runs that collapsed (labels: collapsed/runs)", ylim=(-0.4, 11.5),
           title="collapse frequency per learning rate (sort-3)")
    ax.legend(fontsize=7.5, loc="upper right")
    paper_note(ax, "paper (Table 5, 7B): the sample-level asymmetry\nraises pass@1, the group-level one pass@k,\n"
               "the full A-GRAE raises pass@1 most; on Dr. GRPO\nit raises pass@1 too (1 = yes, claims)", [1.0],
               loc="upper center", bbox_to_anchor=(0.5, -0.28), bbox_transform=ax.transAxes)
    ax = axes[1]
    for j, (lr, steps) in enumerate(cells):
        cur = df[(df.lr == lr) & (df.steps == steps)].set_index("variant").reindex(list(ORDER))
        pos = x - 0.4 + w * (j + 0.5)
        ax.bar(pos, cur.pass1, w, yerr=cur.pass1_se, color=f"C{j}", alpha=0.85, label=cell_label(lr, steps))
    ax.axhline(float(df.sft_pass1.iloc[0]), color="0.3", ls="--", lw=1, label="SFT start")
    ax.set_xticks(x, names, fontsize=7.5)
    ax.set(ylabel="held-out pass@1 (mean ± s.e. over seeds)", ylim=(0, 1.0), title="held-out pass@1 after training")
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    paper_note(ax, "paper (Table 5, MATH, 7B) pass@1 / pass@256:\n" + "\n".join(
        f"{v}: {a} / {b}" for v, (a, b) in PAPER_MATH.items()) + "\n(not reproducible here)",
        [x for ab in PAPER_MATH.values() for x in ab], loc="upper center", bbox_to_anchor=(0.5, -0.28),
        bbox_transform=ax.transAxes)
    fig.tight_layout()
    return fig


def fisher_fewer(ours: int, runs: int, paper: int = 3, paper_runs: int = PAPER_RUNS) -> float:
    """One-sided Fisher exact p-value that our collapse rate is below the paper's: the probability,
    given ``ours + paper`` collapses among ``runs + paper_runs`` runs, that ours get ``ours`` or
    fewer of them (hypergeometric)."""
    total, hits = runs + paper_runs, ours + paper
    return float(sum(math.comb(hits, x) * math.comb(total - hits, runs - x) for x in range(0, ours + 1))
                 / math.comb(total, runs))


def _mechanism(nd, grpo) -> bool:
    """The mechanism of A-GRAE Sec. 4.2 / Fig. 3 in one cell: the training entropy of most
    Negative-Dominant runs rose (last 20 % of steps above the first 20 %) while that of most GRPO
    runs did not ("a trend diametrically opposed to the other groups"), and GRPO trains: its mean
    held-out pass@1 is not below the SFT start's (else the learning rate breaks every variant,
    whatever its balance).  ``nd`` / ``grpo``: the cell's rows of :func:`data` (``grpo`` None if
    absent)."""
    if not nd.rose_n or nd.rose < nd.rose_n / 2:
        return False
    if grpo is None or not grpo.rose_n:
        return False
    return bool(grpo.rose < grpo.rose_n / 2 and grpo.pass1 >= grpo.sft_pass1)


def _collapse_claims(df: pd.DataFrame) -> list[Claim]:
    nd = df[df.variant == "Negative-Dominant"]
    grpo = {(r.lr, r.steps): r for r in df[df.variant == "GRPO"].itertuples()}
    cells = []
    for r in nd.itertuples():
        label = cell_label(r.lr, r.steps)
        g = grpo.get((r.lr, r.steps))
        rec = (f"entropy rose in {int(r.rose)} of {int(r.rose_n)} runs (mean {r.H_first:.3f} → {r.H_last:.3f})"
               if r.rose_n else "entropy not recorded")
        if g is not None and g.rose_n:
            rec += (f"; GRPO: entropy rose in {int(g.rose)} of {int(g.rose_n)}, pass@1 {g.pass1:.3f} (SFT start "
                    f"{g.sft_pass1:.3f})")
        cells.append((label, r, rec, g))
    numbers = "; ".join(f"{lab}: {int(r.collapsed)} of {int(r.runs)} collapsed, mean rise of the fully unsolved "
                        f"fraction {r.rise:+.3f} (max {r.rise_max:+.3f}, threshold +0.25), {rec}"
                        for lab, r, rec, _ in cells)
    mech = [(lab, r) for lab, r, _, g in cells if _mechanism(r, g)]
    def trains(g) -> bool:
        return g is not None and bool(g.pass1 >= g.sft_pass1)

    ranked = sorted(cells, key=lambda c: (trains(c[3]), c[1].rose / c[1].rose_n if c[1].rose_n else -1.0,
                                          c[1].steps, c[1].lr))
    test_label, test = ranked[-1][0], ranked[-1][1]
    tested_at = (f"{', '.join(c[0] for c in cells)} ({len(cells)} cell{'s' * (len(cells) != 1)}), "
                 f"{int(nd.runs.min())}-{int(nd.runs.max())} runs per cell, {SETTING}")
    text = f"Negative-Dominant: runs that collapse, of {PAPER_RUNS}"
    if not mech and not (nd.rose_n > 0).any():
        note = (f"ours: {test_label}. The count does not test the claim: A-GRAE attributes the collapse to "
                "Negative-Dominant's entropy rising throughout training (Sec. 4.2, Fig. 3), and these runs "
                f"did not record their entropy trajectory. {numbers}")
        nd_claim = Claim(text, "A-GRAE App. D.5", float(PAPER_COLLAPSES["Negative-Dominant"]), float(test.collapsed),
                         0, note=note, tested_at=tested_at)
    elif not mech:
        note = (f"ours: {test_label}, the cell where GRPO trains and Negative-Dominant's entropy rose most often. "
                "The count does "
                "not test the claim: A-GRAE attributes the collapse to Negative-Dominant's entropy rising "
                "throughout training while the other variants' falls (Sec. 4.2, Fig. 3), and in no cell did it "
                "rise in most runs while GRPO's fell and GRPO trained (held-out pass@1 not below the SFT start), "
                "so the runs never "
                f"reach the state the paper's collapse comes from. {numbers}")
        nd_claim = Claim(text, "A-GRAE App. D.5", float(PAPER_COLLAPSES["Negative-Dominant"]), float(test.collapsed),
                         0, note=note, tested_at=tested_at)
    else:
        hit = [(lab, r) for lab, r in mech if r.collapsed >= 1]
        p = {lab: fisher_fewer(int(r.collapsed), int(r.runs)) for lab, r in mech}
        ptxt = "; ".join(f"{lab}: Fisher one-sided p = {p[lab]:.3f} for {int(r.collapsed)} of {int(r.runs)} "
                         f"against 3 of {PAPER_RUNS}" for lab, r in mech)
        mech_txt = ", ".join(lab for lab, _ in mech)
        if hit:
            verdict = "depends"
            note = (f"the mechanism (entropy rising in most Negative-Dominant runs, not in GRPO's) appears at "
                    f"{mech_txt}; runs "
                    f"collapse there at {', '.join(lab for lab, _ in hit)}. {ptxt}. {numbers}")
        elif all(v >= 0.05 for v in p.values()):
            verdict = "underpowered"
            note = (f"the mechanism appears at {mech_txt} but no run collapses there; 0 collapses is "
                    f"not distinguishable from the paper's 3 of {PAPER_RUNS} with these run counts ({ptxt}). "
                    f"{numbers}")
        else:
            verdict = ""
            note = (f"the mechanism appears at {mech_txt} but no run collapses there, fewer than the paper's 3 of "
                    f"{PAPER_RUNS} at the 5 % level ({ptxt}); the collapse threshold (+0.25 rise of the fully "
                    f"unsolved fraction) is ours, the paper gives none. {numbers}")
        best = sorted(mech, key=lambda c: (c[1].collapsed, c[1].steps, c[1].lr))[-1]
        nd_claim = Claim(text, "A-GRAE App. D.5", float(PAPER_COLLAPSES["Negative-Dominant"]),
                         float(best[1].collapsed), 0, note=f"ours: {best[0]}. " + note, verdict=verdict,
                         tested_at=tested_at)
    grp = df[df.variant == "A-GRAE (group level)"]
    counts = "; ".join(f"{cell_label(r.lr, r.steps)}: {int(r.collapsed)} of {int(r.runs)}" for r in grp.itertuples())
    zero = [cell_label(r.lr, r.steps) for r in grp.itertuples() if r.collapsed == 0]
    some = [cell_label(r.lr, r.steps) for r in grp.itertuples() if r.collapsed > 0]
    broken = [f"{cell_label(r.lr, r.steps)} (GRPO pass@1 {grpo[(r.lr, r.steps)].pass1:.3f}, SFT start "
              f"{grpo[(r.lr, r.steps)].sft_pass1:.3f})" for r in grp.itertuples()
              if r.collapsed > 0 and (r.lr, r.steps) in grpo
              and grpo[(r.lr, r.steps)].pass1 < grpo[(r.lr, r.steps)].sft_pass1]
    dead = [f"{cell_label(lr, st)} (GRPO pass@1 {g.pass1:.3f}, this variant {r.pass1:.3f}, SFT start "
            f"{g.sft_pass1:.3f})" for r in grp.itertuples() for (lr, st), g in grpo.items()
            if (lr, st) == (r.lr, r.steps) and g.pass1 < g.sft_pass1 and r.collapsed == 0]
    gnote = (f"collapsed runs per cell: {counts}"
             + (f"; where it collapses GRPO does not train either: {', '.join(broken)}" if broken else "")
             + (f"; at {', '.join(dead)} training breaks for every variant from the first steps, which the "
                "collapse threshold (a rise of the fully unsolved fraction within the run) does not count"
                if dead else "")
             + ("" if mech else "; Negative-Dominant, the contrast, never shows its mechanism here, so the 0 does "
                "not show that the attenuation prevents a collapse"))
    g_claim = Claim(f"A-GRAE (group level): runs that collapse, of {PAPER_RUNS}", "A-GRAE App. D.5",
                    float(PAPER_COLLAPSES["A-GRAE (group level)"]), float(grp.collapsed.max()), 0,
                    note=(f"no collapse at {', '.join(zero)}; " if some and zero else "") + gnote,
                    verdict="depends" if some and zero else "", tested_at=tested_at)
    return [nd_claim, g_claim]


def claims(df: pd.DataFrame) -> list[Claim]:
    k = int(df.k.iloc[0])
    agg = df[df.steps == df.steps.min()]  # the orderings: the runs of the grid's common length
    why = ("What differs from the paper's setting: pass@16 here against pass@256 (Table 5's group-level gain is "
           "in the tail of pass@k), and a 254k-parameter model on a sorting task for 60 steps against "
           "Qwen2.5-Math-7B on MATH")

    def direction(text, col, hi, lo, paper, what):
        return direction_claim(text + " (1 = yes: higher by more than 2 s.e.)", "A-GRAE Table 5, Sec. 6", agg,
                               [(hi, lo, paper)], col, what, scale=0.01, unit=" points", why=why,
                               setting=SETTING, reference="GRPO")

    (g1, gk), (s1, _), (a1, _), (f1, _) = (PAPER_MATH[v] for v in ("GRPO", "A-GRAE (sample level)",
                                                                   "A-GRAE (group level)", "A-GRAE (full)"))
    ak = PAPER_MATH["A-GRAE (group level)"][1]
    out = _collapse_claims(df)
    out.append(direction("sample-level asymmetry raises pass@1 over GRPO", "pass1", "A-GRAE (sample level)", "GRPO",
                         s1 - g1, "pass@1"))
    out.append(direction(f"group-level asymmetry raises pass@k over GRPO (here k = {k})", "passk",
                         "A-GRAE (group level)", "GRPO", ak - gk, f"pass@{k} (paper: pass@256)"))
    out.append(direction("full A-GRAE raises pass@1 over the sample-level ablation", "pass1", "A-GRAE (full)",
                         "A-GRAE (sample level)", f1 - s1, "pass@1"))
    out.append(direction("full A-GRAE raises pass@1 over the group-level ablation", "pass1", "A-GRAE (full)",
                         "A-GRAE (group level)", f1 - a1, "pass@1"))
    out.append(direction("A-GRAE on Dr. GRPO raises pass@1 over GRPO (Table 2: 78.6 vs 76.5 on MATH)", "pass1",
                         "Dr.GRPO + A-GRAE", "GRPO", PAPER_DR_AGRAE_PASS1 - g1, "pass@1"))
    for v, (a, b) in PAPER_MATH.items():
        out.append(Claim(f"{v}: MATH pass@1 (%)", "A-GRAE Table 5", a, float("nan"), 0,
                         note="Qwen2.5-Math-7B on MATH: not reproducible here (tiny model, sorting task)"))
        out.append(Claim(f"{v}: MATH pass@256 (%)", "A-GRAE Table 5", b, float("nan"), 0,
                         note="Qwen2.5-Math-7B on MATH: not reproducible here (tiny model, sorting task)"))
    return out


register(FigureSpec("agrae_table5", "A-GRAE ablations and collapse frequency on the tiny trainer",
                    "A-GRAE Table 5, App. D.5", data, plot, claims))
