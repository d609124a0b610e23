"""The learning-rate grid of the tiny-trainer experiments (issue 31; docs/seed_experiments.md,
"Protocol") and the verdict rules of their claims.

The figures ``agrae_table5``, ``fgrpo_table2`` and ``fade_fig9`` read CSVs with one row per run
(``examples/seed_experiments.py``); every row carries its learning rate ``lr`` and ``steps``.
A *cell* of the grid is one (lr, steps) pair.  :func:`aggregate` turns the runs into one row per
(cell, variant) with the mean and the standard error over seeds of each measured column;
:func:`direction_claim` checks "variant A is above variant B" in every cell:

* in a cell the claim *holds* when every difference ``d = mean_A − mean_B`` exceeds 2 s.e. of the
  difference, ``se_d = sqrt(se_A² + se_B²)`` (each ``se`` the standard error of a mean over
  seeds); it goes the *other way* when some ``d < −2 se_d``; otherwise the cell shows *no
  detectable effect*;
* ``ours`` is the fraction of cells where it holds (paper 1, tol 0): **pass** in all cells;
  **depends** (the note says where, with the numbers) in some; in none, **underpowered** when
  every cell shows no detectable effect and the smallest detectable effect, 2 s.e. of each
  failing difference, exceeds the paper's effect in every cell; else **explained**, with the
  numbers of every cell and the reason the caller gives.

A cell counts only when each variant the claim compares has at least :data:`MIN_SEEDS` runs in
it; the others are listed as incomplete.  With ``reference`` (the plain GRPO run of the
experiment), a cell where that variant's mean held-out pass@1 ends below the SFT start's is a
cell where training breaks: it is listed with its numbers, not counted (a learning rate that
breaks GRPO tests no difference between advantages).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..registry import Claim

#: the learning rate of the rows written before the ``lr`` column existed
LEGACY_LR = 1e-3
#: a cell enters a claim only with at least this many runs of every variant it compares
MIN_SEEDS = 3


def read_runs(csv) -> pd.DataFrame:
    """The runs of ``csv``, with ``lr`` = :data:`LEGACY_LR` where the column is missing."""
    runs = pd.read_csv(csv)
    if "lr" not in runs:
        runs["lr"] = LEGACY_LR
    return runs


def cell_label(lr: float, steps: int, default_steps: int = 60) -> str:
    """``"lr 3e-04"`` or, for runs of other than ``default_steps`` steps, ``"lr 3e-03, 200 steps"``."""
    text = f"lr {lr:.0e}"
    return text if int(steps) == default_steps else f"{text}, {int(steps)} steps"


def aggregate(runs: pd.DataFrame, cols: dict[str, str]) -> pd.DataFrame:
    """One row per (lr, steps, variant): ``runs`` (count), and for each ``name: column`` of
    ``cols`` the mean (``name``) and the standard error over seeds (``name_se``, ``ddof = 1``;
    NaN with one run) of ``runs[column]``.  Rows are sorted by steps, lr, then the variants'
    order of first appearance."""
    order = {v: i for i, v in enumerate(dict.fromkeys(runs.variant))}
    g = runs.groupby(["lr", "steps", "variant"], sort=False)
    out = pd.DataFrame({"runs": g.size()})
    for name, col in cols.items():
        out[name] = g[col].mean()
        out[name + "_se"] = g[col].sem()
    out = out.reset_index()
    out["_o"] = out.variant.map(order)
    return out.sort_values(["steps", "lr", "_o"]).drop(columns="_o").reset_index(drop=True)


def two_se(se_a: float, se_b: float) -> float:
    """2 s.e. of a difference of two independent means with standard errors ``se_a``, ``se_b``:
    the smallest difference the experiment detects."""
    return 2.0 * math.hypot(se_a, se_b)


def direction_claim(claim: str, source: str, agg: pd.DataFrame, pairs: Sequence[tuple[str, str, float]],
                    col: str, what: str, *, scale: float = 1.0, unit: str = "", why: str = "",
                    setting: str = "", reference: str | None = None) -> Claim:
    """The claim "``hi`` is above ``lo`` on ``col``" for every ``(hi, lo, paper_effect)`` of
    ``pairs``, checked in every cell of ``agg`` (:func:`aggregate`; module docstring for the
    rules).

    Parameters
    ----------
    claim, source : str
        The claim's text and where the paper states it.
    agg : pandas.DataFrame
        :func:`aggregate`'s frame with columns ``col`` and ``col_se``.
    pairs : sequence of (str, str, float) or (str, str, float, str)
        ``(hi, lo, paper_effect)``: the paper's ``hi − lo`` in the paper's units (NaN if the paper
        gives none); ``paper_effect · scale`` is compared with our 2 s.e.  A fourth element names
        the column of that pair instead of ``col``.
    col, what : str
        The column and its name in the note (e.g. ``"pass1"``, ``"pass@1"``).
    scale : float
        Paper units to ours (0.01 for percentage points against solve rates).
    unit : str
        Appended to the paper's effect in the note (e.g. ``" points"``).
    why : str
        Why the claim fails in every cell (appended to the note when it does).
    setting : str
        The fixed settings, for ``tested_at`` (the learning rates and seeds are added).
    reference : str, optional
        The variant whose training must work in a cell for the cell to count: its ``pass1`` not
        below its ``sft_pass1`` (columns of ``agg``).

    Returns
    -------
    figures.registry.Claim
        ``ours`` the fraction of complete cells where the claim holds, paper 1, tol 0, with
        ``verdict`` and ``tested_at`` set as the module docstring says.  With no complete cell,
        ``ours`` is NaN (status "not reproducible here", the note says no complete cell yet).
    """
    names = {v for pair in pairs for v in pair[:2]}
    held, failed, skipped, numbers, seeds, broken = [], [], [], [], [], []
    opposite, small, no_paper = False, [], []
    for (lr, steps), cell in agg.groupby(["lr", "steps"], sort=False):
        label = cell_label(lr, steps)
        s = cell.set_index("variant")
        if not names <= set(s.index) or int(s.runs[list(names)].min()) < MIN_SEEDS:
            skipped.append(label)
            continue
        if reference is not None and reference in s.index and s.pass1[reference] < s.sft_pass1[reference]:
            broken.append(f"{label} ({reference} pass@1 {s.pass1[reference]:.3f} below the SFT start's "
                          f"{s.sft_pass1[reference]:.3f})")
            continue
        seeds.append(int(s.runs[list(names)].min()))
        ok, parts = True, []
        for pair in pairs:
            hi, lo, paper = pair[:3]
            c = pair[3] if len(pair) > 3 else col
            d = float(s[c][hi] - s[c][lo])
            bar = two_se(float(s[c + "_se"][hi]), float(s[c + "_se"][lo]))
            ok &= d > bar
            paper_txt = ("" if not np.isfinite(paper) else f", paper {paper:+g}{unit}" if scale == 1 else
                         f", paper {paper * scale:+.3f} = {paper:+g}{unit}")
            shown = f"pass@{c[4:]}" if c.startswith("pass") and c[4:].isdigit() else c
            what_c = f"{shown}: " if len(pair) > 3 else ""
            parts.append(f"{what_c}{hi} − {lo} {d:+.3f} (2 s.e. {bar:.3f}{paper_txt})")
            if d <= bar:
                if d < -bar:
                    opposite = True
                elif not np.isfinite(paper):
                    no_paper.append(f"{hi} − {lo}")
                elif bar <= abs(paper) * scale:
                    small.append(f"{label} {hi} − {lo}")
        numbers.append(f"{label}: " + "; ".join(parts))
        (held if ok else failed).append(label)
    if not held and not failed:
        return Claim(claim, source, 1.0, float("nan"), 0,
                     note=f"no complete cell of the grid yet (at least {MIN_SEEDS} runs per variant, training "
                          f"not broken); incomplete: {', '.join(skipped) or 'none'}"
                          + (f"; broken: {', '.join(broken)}" if broken else ""))
    n = len(held) + len(failed)
    tested_at = (f"{', '.join(held + failed)} ({n} cell{'s' * (n != 1)}), {min(seeds)}-{max(seeds)} seeds per "
                 f"variant" + (f", {setting}" if setting else ""))
    extra = (f"; incomplete cells not counted: {', '.join(skipped)}" if skipped else "") + (
        f"; cells where training breaks, not counted: {', '.join(broken)}" if broken else "")
    body = f"measured {what} differences: " + " | ".join(numbers) + extra
    verdict = ""
    if not failed:
        note = f"holds in all {n} cell{'s' * (n != 1)}. {body}"
    elif held:
        note = f"holds at {', '.join(held)}; not at {', '.join(failed)}. {body}"
        verdict = "depends"
    elif not opposite and not small and not no_paper:
        note = (f"in each of the {n} cell{'s' * (n != 1)} the differences that fail show no detectable effect, and "
                f"their smallest detectable effect (2 s.e. of the difference) exceeds the paper's effect. {body}")
        verdict = "underpowered"
    else:
        reasons = []
        if opposite:
            reasons.append("in at least one cell a difference goes the other way by more than 2 s.e.")
        if small:
            reasons.append("2 s.e. is below the paper's effect at " + ", ".join(dict.fromkeys(small))
                           + ", so an effect of the paper's size would have been seen there")
        if no_paper:
            reasons.append("the paper gives no size for " + ", ".join(dict.fromkeys(no_paper))
                           + " to set 2 s.e. against")
        note = f"fails in all {n} cell{'s' * (n != 1)} ({'; '.join(reasons)}). {body}"
        if why:
            note += f". {why}"
    return Claim(claim, source, 1.0, len(held) / n, 0, note=note, verdict=verdict, tested_at=tested_at)
