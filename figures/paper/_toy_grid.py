"""The protocol grid of the Over-Sharpening toy figures (issue 31; docs/protocol.md).

Over-Sharpening's toy (Sec. 2.4, App. G-H) fixes the task (Persian input only, reward 1 for Cat
or Persian, W_0 = 0, 500 steps, G ∈ {4, 16, 64}, SGD for Fig. 1-2, μ = 0.5 for DLC, α = 1 for IAC
by Table 5) and leaves open the learning rate, the reduction over the group, the momentum of its
"momentum optimizer" and the base advantage IAC multiplies.  The grid below was fixed before the
runs: the learning rates are our default 0.1 (the paper states none) with one and two
half-decades on each side; the reductions are both; the momentum is the usual 0.9 with 0.5 and
0.99 on either side; IAC's base is each reading (raw rewards, as Sec. 2.4's toy leads with;
centred, as Sec. 3.1's derivation uses; normalised, GRPO's as Sec. 4 trains).  All of it runs
as one batch per group size (:func:`simulations.toys.persian_grid`).

:func:`grid_claim` turns a claim evaluated on every cell of the grid into a
:class:`figures.registry.Claim`: ``ours`` is the fraction of cells where it holds (paper 1),
``pass`` when it holds in all, ``depends`` (saying where) when in some, ``explained`` (with the
reason) when in none.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from simulations import toys

from ..registry import Claim

#: learning rates swept (0.1: our default; the paper gives none)
LRS = (0.01, 0.03, 0.1, 0.3)
REDUCTIONS = ("sum", "mean")
#: heavy-ball momentum swept for the momentum optimizer (0.9: the usual value; the paper gives none)
MOMENTA = (0.5, 0.9, 0.99)
#: the readings of IAC's base advantage (Alg. 1 line 10 says only "advantages A")
BASES = {"raw": "raw rewards", "centred": "centred (r - mean)", "normalised": "normalised (GRPO)"}
DEFAULT_LR, DEFAULT_MOMENTUM = 0.1, 0.9
SEEDS, STEPS, LOG_EVERY = 16, 500, 10


def run(grid: pd.DataFrame, Gs: tuple[int, ...], *, seeds: int = SEEDS, steps: int = STEPS,
        log_every: int = LOG_EVERY) -> pd.DataFrame:
    """:func:`simulations.toys.persian_grid` for every ``G`` of ``Gs``, the grid's columns joined
    to the trajectory rows."""
    grid = grid.reset_index(drop=True)
    engine = grid[[c for c in grid.columns if c in toys.PERSIAN_COLUMNS]]
    frames = [toys.persian_grid(engine, G=G, seeds=seeds, steps=steps, log_every=log_every) for G in Gs]
    tr = pd.concat(frames, ignore_index=True)
    return tr.join(grid, on="config")


def fmt_lr(lr: float) -> str:
    return f"lr {lr:g}"


def grid_claim(claim: str, source: str, cells: Mapping[str, bool], *, tested_at: str, numbers: str,
               why: str = "") -> Claim:
    """A claim checked on every cell of a grid: ``cells`` maps a cell's label (e.g.
    ``"lr 0.1, sum"``) to whether the claim holds there.

    ``ours`` is the fraction of cells where it holds (paper 1, tol 0).  All cells: ``pass``
    (``numbers`` still in the note).  Some: ``depends``, the note lists where it holds and
    where not, then ``numbers``.  None: ``explained``, the note is ``numbers`` and ``why``
    (required then: the reason it fails across the grid).
    """
    held = [k for k, v in cells.items() if v]
    failed = [k for k, v in cells.items() if not v]
    frac = len(held) / len(cells)
    if not failed:
        note, verdict = f"holds in all {len(cells)} cells. {numbers}", ""
    elif held:
        note = (f"holds in {len(held)} of {len(cells)} cells: {'; '.join(held)}; not in: {'; '.join(failed)}. "
                f"{numbers}" + (f" {why}" if why else ""))
        verdict = "depends"
    else:
        if not why:
            raise ValueError(f"grid_claim: {claim!r} fails in every cell and needs a why")
        note, verdict = f"fails in all {len(cells)} cells. {numbers} {why}", ""
    return Claim(claim, source, 1.0, frac, 0, note=note, verdict=verdict, tested_at=tested_at)


#: the IAC / DLC grid's summary columns (per cell and G, means over the seeds)
IAC_KEYS = ["base", "alpha", "mu", "optimizer", "lr", "reduction", "G"]


def iac_grid(Gs: tuple[int, ...], *, optimizers: tuple[str, ...] = ("sgd", "adamw"), mus: tuple[float, ...] = (0.0,),
             mu: float = 0.5) -> pd.DataFrame:
    """IAC (α = 1) against its base (α = 0), each base reading of :data:`BASES`, with DLC weights
    ``mus`` (0: none; ``mu`` is the paper's 0.5), every lr of :data:`LRS` and both reductions, run for
    every ``G`` of ``Gs``: one row per (cell, G) with ``final_share`` (winner share at the last step),
    ``avg_share`` (averaged over the logged steps) and ``final_entropy``, each the mean over the seeds."""
    rows = [dict(base=b, alpha=a, mu=m, optimizer=o, lr=lr, reduction=r) for b in BASES for a in (0.0, 1.0)
            for m in mus for o in optimizers for lr in LRS for r in REDUCTIONS]
    tr = run(pd.DataFrame(rows), Gs)
    last = tr[tr.step == tr.step.max()].groupby(IAC_KEYS)
    out = pd.DataFrame({"final_share": last.winner_share.mean(), "final_entropy": last.entropy.mean(),
                        "avg_share": tr.groupby(IAC_KEYS).winner_share.mean()}).reset_index()
    return out.assign(part="grid")


def cell(lr: float, reduction: str) -> str:
    return f"lr {lr:g}, {reduction}"


TESTED_IAC = (f"lr ∈ {{{', '.join(f'{x:g}' for x in LRS)}}}, reduction ∈ {{sum, mean}}, α = 1 against α = 0 "
              f"on the same base, {SEEDS} seeds, {STEPS} steps")


def iac_why(base: str) -> str:
    """Why IAC, without anything to redistribute across prompts, does not slow the toy's collapse
    (per base reading)."""
    if base == "raw":
        return ("With raw rewards IAC's factor (G - |S+|) is 0 in an all-correct group, the groups through which "
                "raw rewards keep pushing whichever rewarded label is drawn more often, and it is G - |S+| >= 1 in "
                "mixed groups: the first slows collapse, the second speeds it, and which wins depends on the step "
                "size (lr, reduction)")
    return ("IAC scales positives by (G - |S+|)^alpha >= 1 and leaves negatives: a success-biased weight. With one "
            "training prompt there is nothing to redistribute across prompts; the two rewarded labels Cat and "
            "Persian are the competing modes and larger positive steps sharpen between them")
