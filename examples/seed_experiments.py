"""Small-scale versions of the seed papers' training experiments on the tiny GRPO trainer.

One command reproduces every number that ``docs/seed_experiments.md`` and the figures
``agrae_table5`` and ``fgrpo_table2`` report (they read the CSV files this script writes under
``figures/data/``, because the runs take minutes, far more than a figure may take):

* ``collapse`` — A-GRAE Table 5 / App. D.5 on the tiny trainer: GRPO, the Negative-Dominant
  control, A-GRAE's group-level-only and sample-level-only ablations, full A-GRAE and A-GRAE on
  Dr. GRPO, ``--seeds`` runs each from one shared SFT warm start; for every run, whether it
  *collapsed* (definition below), held-out pass@1 and pass@k.  Writes
  ``figures/data/agrae_collapse.csv`` (one row per run).
* ``table2`` — F-GRPO Table 2 and Sec. 5.5 / App. G Table 4: GRPO with N = 2, 8, 32 rollouts
  per prompt, F-GRPO (γ = 0.5, F-GRPO Table 6 for Qwen2.5-7B) with N = 8, GRPO with an entropy
  bonus and GRPO with a KL penalty (coefficient 0.001 each, F-GRPO App. H.2); held-out pass@1,
  pass@k and ΔNLL_rare (F-GRPO App. F.2, :func:`simulations.grpo.evaluate.rare_correct_set`).
  Writes ``figures/data/fgrpo_table2.csv``.
* ``fade9`` — FADE App. 10 Fig. 9 / Sec. 5 on the tiny trainer: FADE (Eq. 11, Alg. 2) against its
  ablations (α only, δ only, both driven by entropy, the log schedule of Eq. 17-18) and mean-only
  GRPO, N = 8; held-out pass@1, 4, 16, 64 from 64 samples per problem.  Writes
  ``figures/data/fade_fig9.csv``.
* ``all`` — ``collapse`` and ``table2``.

Collapse.  A-GRAE App. D.3 characterises the Negative-Dominant group's "learning collapse" by
the number of fully unsolved training questions, which "exhibits high-amplitude oscillations and
a persistent upward trend", with performance falling.  The paper gives no threshold; here a run
*collapses* when the fraction of its training groups with no correct rollout (``frac_all_wrong``
in ``metrics.jsonl``), averaged over the last 20 % of steps, exceeds its average over the first
20 % of steps by at least ``COLLAPSE_RISE`` = 0.25 (fixed before the runs were made).

Mechanism.  A-GRAE Sec. 4.2 / Fig. 3 attributes the Negative-Dominant collapse to training
entropy that rises "monotonically except at the very beginning".  Every row records the per-step
training entropy (``entropy`` in ``metrics.jsonl``) as ``entropy_first`` / ``entropy_last`` (means
over the first / last 20 % of steps), ``entropy_min``, ``entropy_max_rise`` (the largest rise of the
entropy, smoothed over a tenth of the run, above its running minimum) and ``entropy_rose``
(``entropy_last > entropy_first``: the mechanism, fixed before the runs), and the mean training
reward over the first / last 20 % of steps (``reward_first`` / ``reward_last``).

Setup (small enough for a shared CPU: tiny-cpu preset, the ``sort`` task at difficulty 3): one SFT
warm start to a held-out solve rate of 0.3, then GRPO with B = 16 prompts, AdamW at ``--lr``
(default 3e-4, the trainer's default; the protocol's grid is 1e-4, 3e-4, 1e-3, 3e-3), ``--steps``
steps (default 60), token-mean PPO loss with ε = 0.2, one thread per process.  ``lr`` and
``steps`` are columns of every CSV (rows written before the column existed ran at lr 1e-3 and are
given that value).  Every run is a fresh process state (``trainer.train``); a run is skipped when
its row (variant, seed, lr, steps) is already in the CSV (``--redo`` discards the CSV), so an
interrupted invocation continues.  Each row is appended with one ``write`` as soon as its run
ends, so two processes may append to the same CSV.

Usage::

    OMP_NUM_THREADS=1 python examples/seed_experiments.py collapse --seeds 10 --lr 3e-4
    OMP_NUM_THREADS=1 python examples/seed_experiments.py table2 --seeds 5 --lr 3e-4
    OMP_NUM_THREADS=1 python examples/seed_experiments.py collapse --seeds 10 --lr 3e-3 --steps 200
    OMP_NUM_THREADS=1 python examples/seed_experiments.py fade9 --seeds 5 --lr 3e-4
    python examples/seed_experiments.py summary
"""

from __future__ import annotations

import argparse
import csv as csvlib
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulations.grpo import evaluate, sft, trainer  # noqa: E402
from simulations.grpo.config import GRPOConfig, SFTConfig  # noqa: E402

DATA = ROOT / "figures" / "data"
TASK, DIFFICULTY = "sort", 3
COLLAPSE_RISE = 0.25
#: the learning rate of every row written before the ``lr`` column existed
LEGACY_LR = 1e-3
#: the protocol's learning-rate grid (docs/seed_experiments.md, "Protocol"); 3e-4 is GRPOConfig's default
LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3)
#: (label, advantage, params): A-GRAE Table 5's rows and App. D.5's control
COLLAPSE_VARIANTS = [
    ("GRPO", "grpo", {}),
    ("Negative-Dominant", "negative_dominant", {"beta": 10.0}),
    ("A-GRAE (group level)", "agrae_group", {"alpha": 1.0}),
    ("A-GRAE (sample level)", "agrae_sample", {}),
    ("A-GRAE (full)", "agrae", {"alpha": 1.0}),
    ("Dr.GRPO + A-GRAE", "agrae", {"alpha": 1.0, "norm_by_std": False}),
]
#: (label, advantage, params, group size N, extra GRPOConfig settings): F-GRPO Table 2 and Table 4
TABLE2_VARIANTS = [
    ("GRPO N=2", "grpo", {}, 2, {}),
    ("GRPO N=8", "grpo", {}, 8, {}),
    ("GRPO N=32", "grpo", {}, 32, {}),
    ("F-GRPO N=8", "fgrpo", {"gamma": 0.5}, 8, {}),
    ("GRPO-H N=8", "grpo", {}, 8, {"entropy_coef": 0.001}),
    ("GRPO-KL N=8", "grpo", {}, 8, {"kl_coef": 0.001}),
]
#: (label, schedule or None, advantage): FADE App. 10 Fig. 9's ablations (rlvr_theory.schedules) and
#: mean-only GRPO, FADE's "GRPO mean" baseline
FADE9_VARIANTS = [
    ("FADE", "fade", None),
    ("alpha only", "fade-alpha-only", None),
    ("delta only", "fade-delta-only", None),
    ("both on entropy", "fade-entropy", None),
    ("log schedule", "fade-log", None),
    ("GRPO mean", None, "dr_grpo"),
]
#: pass@k of the fade9 runs (n = the largest: samples per held-out problem)
FADE9_KS = (1, 4, 16, 64)
#: mechanism columns of every row (module docstring, "Mechanism")
TRAJECTORY_COLUMNS = ("entropy_first", "entropy_last", "entropy_min", "entropy_max_rise", "entropy_rose",
                      "reward_first", "reward_last")
COLLAPSE_COLUMNS = ("variant", "advantage", "params", "seed", "lr", "steps", "collapsed", "frac_all_wrong_rise",
                    "frac_all_wrong_first", "frac_all_wrong_last", "pass@1", "pass@16", "sft_pass@1",
                    "sft_pass@16", "answer_entropy", "final_entropy", *TRAJECTORY_COLUMNS, "seconds")
TABLE2_COLUMNS = ("variant", "advantage", "params", "N", "extra", "seed", "lr", "steps", "pass@1", "pass@16",
                  "delta_nll_rare", "nll_rare", "sft_pass@1", "sft_pass@16", "rare_set_size", "rare_candidates",
                  "answer_entropy", "final_entropy", *TRAJECTORY_COLUMNS, "seconds")
FADE9_COLUMNS = ("variant", "schedule", "advantage", "N", "seed", "lr", "steps",
                 *(f"pass@{k}" for k in FADE9_KS), *(f"sft_pass@{k}" for k in FADE9_KS), "answer_entropy",
                 "final_entropy", *TRAJECTORY_COLUMNS, "alpha_first", "alpha_last", "delta_first", "delta_last",
                 "delta_min", "frac_steps_delta_below_1", "seconds")


def collapsed(frac_all_wrong: np.ndarray, rise: float = COLLAPSE_RISE) -> tuple[bool, float]:
    """``(collapsed, rise)``: the mean of the last 20 % of ``frac_all_wrong`` minus that of the first 20 %."""
    f = np.asarray(frac_all_wrong, dtype=float)
    w = max(1, len(f) // 5)
    d = float(f[-w:].mean() - f[:w].mean())
    return d >= rise, d


def trajectory(entropy: np.ndarray, reward: np.ndarray) -> dict:
    """The mechanism record of one run (module docstring, "Mechanism").

    Parameters
    ----------
    entropy, reward : array_like, shape (steps,)
        Per-step training entropy and mean training reward (``metrics.jsonl``).

    Returns
    -------
    dict
        ``entropy_first`` / ``entropy_last``: means over the first / last ``max(1, steps // 5)``
        steps; ``entropy_min``; ``entropy_max_rise``: ``max_t (S_t − min_{s <= t} S_s)`` with ``S``
        the running mean over ``max(1, steps // 10)`` steps (0 for a non-increasing ``S``);
        ``entropy_rose``: ``entropy_last > entropy_first``; ``reward_first`` / ``reward_last``.
    """
    h = np.asarray(entropy, dtype=float)
    r = np.asarray(reward, dtype=float)
    if h.ndim != 1 or h.size == 0 or h.shape != r.shape:
        raise ValueError(f"entropy and reward must be 1-d of one non-zero length, got {h.shape} and {r.shape}")
    w = max(1, h.size // 5)
    m = max(1, h.size // 10)
    smooth = np.convolve(h, np.full(m, 1.0 / m), mode="valid")
    first, last = float(h[:w].mean()), float(h[-w:].mean())
    return {"entropy_first": first, "entropy_last": last, "entropy_min": float(h.min()),
            "entropy_max_rise": float((smooth - np.minimum.accumulate(smooth)).max()),
            "entropy_rose": bool(last > first),
            "reward_first": float(r[:w].mean()), "reward_last": float(r[-w:].mean())}


def mechanism_lr(csv: Path, steps: int = 60) -> float:
    """The grid's learning rate (:data:`LR_GRID`) where the ``steps``-step runs in ``csv`` show
    A-GRAE's collapse mechanism most: among the learning rates at which GRPO trains (its mean
    held-out pass@1 not below the SFT start's), the one with the largest fraction of Negative-Dominant runs whose entropy rose minus
    that of GRPO runs (A-GRAE Fig. 3: Negative-Dominant's entropy rises while the others' falls);
    ties go to the higher learning rate.  Raises ``ValueError`` when no learning rate qualifies."""
    d = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
    if d.empty or "entropy_rose" not in d:
        raise ValueError(f"--lr auto: {csv} has no Negative-Dominant runs with an entropy record")
    d = d[(d.steps == steps) & d.entropy_rose.notna() & d.variant.isin(["Negative-Dominant", "GRPO"])]
    d = d[d.lr.map(lambda x: any(math.isclose(x, g, rel_tol=1e-9) for g in LR_GRID))]
    d = d.assign(r=d.entropy_rose.astype(str).eq("True"))
    score = {}
    for lr, part in d.groupby("lr"):
        nd, gr = part[part.variant == "Negative-Dominant"], part[part.variant == "GRPO"]
        if len(nd) and len(gr) and gr["pass@1"].mean() >= gr["sft_pass@1"].mean():
            score[lr] = nd.r.mean() - gr.r.mean()
    if not score:
        raise ValueError(f"--lr auto: {csv} has no {steps}-step Negative-Dominant and GRPO runs with an entropy "
                         "record at a learning rate where GRPO trains")
    return float(max(score, key=lambda lr: (score[lr], lr)))


def warm_start(work: Path) -> Path:
    final = work / "sft" / "final"
    if (final / "config.json").exists():
        return final
    return sft.train_sft(SFTConfig(out=str(work / "sft"), task=TASK, difficulty=DIFFICULTY, target_solve_rate=0.3,
                                   eval_every=25, eval_problems=64, eval_samples=4, threads=1, device="cpu",
                                   quiet=True, overwrite=True))


def _lr_tag(lr: float) -> str:
    return f"{lr:g}"


def grpo_run(work: Path, name: str, init: Path, advantage: str, params: dict, *, seed: int, steps: int, lr: float,
             group_size: int = 8, **extra) -> tuple[Path, pd.DataFrame, float]:
    out = work / name
    t0 = time.perf_counter()
    cfg = GRPOConfig(out=str(out), init=str(init), task=TASK, difficulty=DIFFICULTY, advantage=advantage,
                     params=dict(params), steps=steps, batch_size=16, group_size=group_size, lr=lr, seed=seed,
                     threads=1, device="cpu", quiet=True, rollout_log=False, log_kl=False, checkpoint_every=10**6,
                     overwrite=True, **extra)
    trainer.train(cfg)
    rows = pd.DataFrame([json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()])
    ckpt = sorted(out.glob("checkpoint-*"))[-1]
    return ckpt, rows, time.perf_counter() - t0


def _cell(v) -> object:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return v


def ensure_columns(csv: Path, columns: tuple[str, ...]) -> None:
    """Bring an existing CSV to ``columns`` (in that order), atomically (temporary file, then rename).

    Rows without an ``lr`` column ran at ``LEGACY_LR``; other missing columns stay empty.  A CSV
    with a column not in ``columns`` is refused.
    """
    if not csv.exists():
        return
    d = pd.read_csv(csv)
    if tuple(d.columns) == tuple(columns):
        return
    extra = [c for c in d.columns if c not in columns]
    if extra:
        raise ValueError(f"{csv}: unknown columns {extra}; expected {list(columns)}")
    if "lr" not in d:
        d["lr"] = LEGACY_LR
    d = d.reindex(columns=list(columns))
    tmp = csv.with_name(csv.name + ".tmp")
    d.to_csv(tmp, index=False)
    os.replace(tmp, csv)


def append_row(csv: Path, row: dict, columns: tuple[str, ...]) -> None:
    """Append one row (its keys exactly ``columns``) to ``csv`` with a single ``write``.

    A new file is created with its header atomically (temporary file, then rename); an existing
    one must have exactly ``columns`` as its header.
    """
    if set(row) != set(columns):
        raise ValueError(f"row keys {sorted(set(row) ^ set(columns))} differ from the CSV's columns")
    buf = io.StringIO()
    writer = csvlib.writer(buf, lineterminator="\n")
    writer.writerow([_cell(row[c]) for c in columns])
    line = buf.getvalue()
    if not csv.exists():
        tmp = csv.with_name(f"{csv.name}.{os.getpid()}.tmp")
        head = io.StringIO()
        csvlib.writer(head, lineterminator="\n").writerow(columns)
        tmp.write_text(head.getvalue() + line)
        os.replace(tmp, csv)
        return
    with csv.open() as fh:
        header = next(csvlib.reader([fh.readline()]))
    if tuple(header) != tuple(columns):
        raise ValueError(f"{csv}: header {header} differs from {list(columns)}; run ensure_columns first")
    fd = os.open(csv, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _done(csv: Path) -> set[tuple[str, int, str, int]]:
    """(variant, seed, lr, steps) of the rows already in ``csv``."""
    if not csv.exists():
        return set()
    d = pd.read_csv(csv)
    if d.empty:
        return set()
    lr = d.lr if "lr" in d else pd.Series(LEGACY_LR, index=d.index)
    return set(zip(d.variant, d.seed.astype(int), (_lr_tag(float(x)) for x in lr), d.steps.astype(int)))


def _prepare(csv: Path, columns: tuple[str, ...], redo: bool) -> set:
    if redo and csv.exists():
        csv.unlink()
    ensure_columns(csv, columns)
    return _done(csv)


def _chosen(args, label: str, name: str) -> bool:
    """Whether ``--variants`` (labels or advantage / schedule names) selects this variant."""
    return not args.variants or label in args.variants or name in args.variants


def run_collapse(args) -> None:
    work = Path(args.work)
    init = warm_start(work)
    csv = Path(args.data) / "agrae_collapse.csv"
    done = _prepare(csv, COLLAPSE_COLUMNS, args.redo)
    if args.lr is None:
        args.lr = mechanism_lr(csv)
        print(f"--lr auto: {args.lr:g} (mechanism_lr: where Negative-Dominant's entropy rose most often against "
              "GRPO's)", flush=True)
    base = evaluate.evaluate(init, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                             threads=1, progress=False)
    lr = _lr_tag(args.lr)
    for seed in range(args.seeds):
        for label, adv, params in COLLAPSE_VARIANTS:
            if (label, seed, lr, args.steps) in done or not _chosen(args, label, adv):
                continue
            tag = (f"collapse_{adv}{'_dr' if params.get('norm_by_std') is False else ''}_lr{lr}_T{args.steps}"
                   f"_s{seed}")
            ckpt, rows, secs = grpo_run(work, tag, init, adv, params, seed=seed, steps=args.steps, lr=args.lr)
            hit, rise = collapsed(rows.frac_all_wrong.to_numpy())
            res = evaluate.evaluate(ckpt, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                                    threads=1, progress=False)
            tr = trajectory(rows.entropy.to_numpy(), rows.reward_mean.to_numpy())
            w = max(1, len(rows) // 5)
            row = {"variant": label, "advantage": adv, "params": json.dumps(params, sort_keys=True), "seed": seed,
                   "lr": args.lr, "steps": args.steps, "collapsed": bool(hit), "frac_all_wrong_rise": rise,
                   "frac_all_wrong_first": float(rows.frac_all_wrong.head(w).mean()),
                   "frac_all_wrong_last": float(rows.frac_all_wrong.tail(w).mean()),
                   "pass@1": res.pass_at_k[1], f"pass@{args.k}": res.pass_at_k[args.k],
                   "sft_pass@1": base.pass_at_k[1], f"sft_pass@{args.k}": base.pass_at_k[args.k],
                   "answer_entropy": res.answer_entropy, "final_entropy": float(rows.entropy.tail(5).mean()),
                   **tr, "seconds": secs}
            append_row(csv, row, COLLAPSE_COLUMNS)
            print(f"{label:24s} lr {lr} T {args.steps} seed {seed}: collapsed={hit} rise={rise:+.3f} "
                  f"H {tr['entropy_first']:.3f}->{tr['entropy_last']:.3f} pass@1={res.pass_at_k[1]:.3f} "
                  f"pass@{args.k}={res.pass_at_k[args.k]:.3f} ({secs:.1f} s)", flush=True)


def run_table2(args) -> None:
    work = Path(args.work)
    init = warm_start(work)
    csv = Path(args.data) / "fgrpo_table2.csv"
    done = _prepare(csv, TABLE2_COLUMNS, args.redo)
    rare_file = work / "rare_set.npz"
    if rare_file.exists():
        rare = evaluate.RareSet.load(rare_file)
    else:
        rare = evaluate.rare_correct_set(init, prompts=args.rare_prompts, samples=args.rare_samples,
                                         fraction=args.rare_fraction, seed=0, device="cpu", threads=1)
        rare.save(rare_file)
    print(f"rare-correct set: {len(rare.prompts)} of {rare.candidates} correct among {rare.drawn} sampled; "
          f"base NLL {float(np.mean(rare.base_nll)):.3f}", flush=True)
    base = evaluate.evaluate(init, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu", threads=1,
                             progress=False, rare=rare)
    lr = _lr_tag(args.lr)
    for seed in range(args.seeds):
        for label, adv, params, N, extra in TABLE2_VARIANTS:
            if (label, seed, lr, args.steps) in done or not _chosen(args, label, adv):
                continue
            tag = f"table2_{label.replace(' ', '_').replace('=', '')}_lr{lr}_T{args.steps}_s{seed}"
            ckpt, rows, secs = grpo_run(work, tag, init, adv, params, seed=seed, steps=args.steps, lr=args.lr,
                                        group_size=N, **extra)
            res = evaluate.evaluate(ckpt, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                                    threads=1, progress=False, rare=rare)
            tr = trajectory(rows.entropy.to_numpy(), rows.reward_mean.to_numpy())
            row = {"variant": label, "advantage": adv, "params": json.dumps(params, sort_keys=True), "N": N,
                   "extra": json.dumps(extra, sort_keys=True), "seed": seed, "lr": args.lr, "steps": args.steps,
                   "pass@1": res.pass_at_k[1], f"pass@{args.k}": res.pass_at_k[args.k],
                   "delta_nll_rare": res.delta_nll_rare, "nll_rare": res.nll_rare,
                   "sft_pass@1": base.pass_at_k[1], f"sft_pass@{args.k}": base.pass_at_k[args.k],
                   "rare_set_size": len(rare.prompts), "rare_candidates": rare.candidates,
                   "answer_entropy": res.answer_entropy, "final_entropy": float(rows.entropy.tail(5).mean()),
                   **tr, "seconds": secs}
            append_row(csv, row, TABLE2_COLUMNS)
            print(f"{label:14s} lr {lr} seed {seed}: pass@1={res.pass_at_k[1]:.3f} "
                  f"pass@{args.k}={res.pass_at_k[args.k]:.3f} dNLL_rare={res.delta_nll_rare:+.3f} "
                  f"reward {tr['reward_first']:.3f}->{tr['reward_last']:.3f} ({secs:.1f} s)", flush=True)


def run_fade9(args) -> None:
    work = Path(args.work)
    init = warm_start(work)
    csv = Path(args.data) / "fade_fig9.csv"
    done = _prepare(csv, FADE9_COLUMNS, args.redo)
    n = max(FADE9_KS)
    base = evaluate.evaluate(init, k=FADE9_KS, n=n, problems=args.problems, seed=0, device="cpu", threads=1,
                             progress=False)
    lr = _lr_tag(args.lr)
    for seed in range(args.seeds):
        for label, schedule, adv in FADE9_VARIANTS:
            if (label, seed, lr, args.steps) in done or not _chosen(args, label, schedule or adv):
                continue
            tag = f"fade9_{schedule or adv}_lr{lr}_T{args.steps}_s{seed}"
            extra = {"schedule": schedule} if schedule else {}
            ckpt, rows, secs = grpo_run(work, tag, init, adv or "grpo", {}, seed=seed, steps=args.steps, lr=args.lr,
                                        **extra)
            res = evaluate.evaluate(ckpt, k=FADE9_KS, n=n, problems=args.problems, seed=0, device="cpu", threads=1,
                                    progress=False)
            tr = trajectory(rows.entropy.to_numpy(), rows.reward_mean.to_numpy())
            w = max(1, len(rows) // 5)
            ctl = {}
            for c in ("alpha", "delta"):
                v = rows[c].to_numpy(dtype=float) if c in rows else np.full(len(rows), np.nan)
                ctl[f"{c}_first"] = float(v[:w].mean())
                ctl[f"{c}_last"] = float(v[-w:].mean())
            dv = rows["delta"].to_numpy(dtype=float) if "delta" in rows else np.full(len(rows), np.nan)
            ctl["delta_min"] = float(np.nanmin(dv)) if np.isfinite(dv).any() else float("nan")
            ctl["frac_steps_delta_below_1"] = float((dv < 1.0).mean()) if np.isfinite(dv).any() else float("nan")
            row = {"variant": label, "schedule": schedule or "", "advantage": adv or "", "N": 8, "seed": seed,
                   "lr": args.lr, "steps": args.steps,
                   **{f"pass@{k}": res.pass_at_k[k] for k in FADE9_KS},
                   **{f"sft_pass@{k}": base.pass_at_k[k] for k in FADE9_KS},
                   "answer_entropy": res.answer_entropy, "final_entropy": float(rows.entropy.tail(5).mean()),
                   **tr, **ctl, "seconds": secs}
            append_row(csv, row, FADE9_COLUMNS)
            print(f"{label:16s} lr {lr} seed {seed}: " + " ".join(f"pass@{k}={res.pass_at_k[k]:.3f}" for k in FADE9_KS)
                  + f" H {tr['entropy_first']:.3f}->{tr['entropy_last']:.3f} delta_min={ctl['delta_min']:.3f}"
                  f" ({secs:.1f} s)", flush=True)


def summarize(csv: Path, k: int, by: tuple[str, ...] = ("lr", "steps", "variant")) -> str:
    """A Markdown table: per (lr, steps, variant) (in the order of first appearance) the runs, the
    collapsed runs (collapse CSV) and the mean ± standard error over seeds of pass@1, pass@k,
    ΔNLL_rare, the rise of the fully unsolved fraction and the runs whose entropy rose."""
    d = pd.read_csv(csv)
    if "lr" not in d:
        d["lr"] = LEGACY_LR
    by = tuple(b for b in by if b in d)
    cols = [c for c in ("pass@1", f"pass@{k}", "delta_nll_rare", "frac_all_wrong_rise", "entropy_first",
                        "entropy_last") if c in d]
    g = d.groupby(list(by), sort=False)
    head = [*by, "runs"] + (["collapsed"] if "collapsed" in d else []) + (
        ["entropy rose"] if "entropy_rose" in d else []) + cols
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, part in g:
        key = key if isinstance(key, tuple) else (key,)
        cells = [f"{x:g}" if isinstance(x, float) else str(x) for x in key] + [str(len(part))]
        if "collapsed" in d:
            cells.append(str(int(part.collapsed.astype(bool).sum())))
        if "entropy_rose" in d:
            rec = part.entropy_rose.dropna()
            cells.append(f"{int(rec.astype(bool).sum())}/{len(rec)}" if len(rec) else "not recorded")
        cells += [f"{part[c].mean():.3f} ± {part[c].sem():.3f}" if part[c].notna().any() else "—" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    sft = [c for c in ("sft_pass@1", f"sft_pass@{k}") if c in d]
    tail = "; ".join(f"lr {lr:g}: " + ", ".join(f"{c[4:]} {part[c].iloc[0]:.3f}" for c in sft)
                     for lr, part in d.groupby("lr"))
    return "\n".join(lines) + f"\n\nSFT start: {tail}"


def _positive_float(flag: str, auto: bool = False):
    def parse(text: str) -> float | None:
        if auto and text == "auto":
            return None
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not (math.isfinite(v) and v > 0):
            raise argparse.ArgumentTypeError(f"{flag} must be a finite number > 0{' or auto' if auto else ''}, "
                                             f"got {text!r}")
        return v
    return parse


def _positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer >= 1, got {text!r}")
        return v
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("collapse", "table2", "fade9", "all", "summary"))
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "rlvr_seed_experiments"),
                    help="directory of the runs and the SFT warm start (outside the repository by default)")
    ap.add_argument("--seeds", type=_positive_int("--seeds"), default=10)
    ap.add_argument("--steps", type=_positive_int("--steps"), default=60, help="GRPO steps of every run")
    ap.add_argument("--lr", type=_positive_float("--lr", auto=True), default=3e-4,
                    help="AdamW learning rate of every run (the protocol's grid: 1e-4, 3e-4, 1e-3, 3e-3); collapse "
                         "also takes auto: the grid's learning rate where the 60-step Negative-Dominant runs' "
                         "entropy rose most often against GRPO's, where GRPO trains (mechanism_lr)")
    ap.add_argument("--variants", nargs="+", default=None, metavar="LABEL",
                    help="only these variants: labels as in the CSV (e.g. 'Negative-Dominant') or advantage / schedule "
                         "names (e.g. negative_dominant, agrae_group); default: all")
    ap.add_argument("--k", type=_positive_int("--k"), default=16,
                    help="pass@k's k (also the samples per held-out problem; collapse and table2)")
    ap.add_argument("--problems", type=_positive_int("--problems"), default=64, help="held-out problems per evaluation")
    ap.add_argument("--rare-prompts", type=int, default=64)
    ap.add_argument("--rare-samples", type=int, default=128)
    ap.add_argument("--rare-fraction", type=float, default=0.01)
    ap.add_argument("--data", default=str(DATA), help="where the CSV files go")
    ap.add_argument("--redo", action="store_true", help="discard the CSV and rerun every run")
    args = ap.parse_args(argv)
    if args.lr is None and args.what != "collapse":
        ap.error(f"--lr auto is for collapse only, not {args.what}")
    known = ({v[0] for v in COLLAPSE_VARIANTS + TABLE2_VARIANTS + FADE9_VARIANTS}
             | {v[1] for v in COLLAPSE_VARIANTS + TABLE2_VARIANTS} | {v[1] or v[2] for v in FADE9_VARIANTS})
    for v in args.variants or ():
        if v not in known:
            ap.error(f"--variants: unknown variant {v!r}; allowed: {', '.join(sorted(known))}")
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    if args.what in ("collapse", "all"):
        run_collapse(args)
    if args.what in ("table2", "all"):
        run_table2(args)
    if args.what == "fade9":
        run_fade9(args)
    if args.what == "summary":
        for name in ("agrae_collapse", "fgrpo_table2", "fade_fig9"):
            if (data / f"{name}.csv").exists():
                print(name)
                print(summarize(data / f"{name}.csv", 64 if name == "fade_fig9" else args.k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
