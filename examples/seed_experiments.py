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
* ``all`` — both.

Collapse.  A-GRAE App. D.3 characterises the Negative-Dominant group's "learning collapse" by
the number of fully unsolved training questions, which "exhibits high-amplitude oscillations and
a persistent upward trend", with performance falling.  The paper gives no threshold; here a run
*collapses* when the fraction of its training groups with no correct rollout (``frac_all_wrong``
in ``metrics.jsonl``), averaged over the last 20 % of steps, exceeds its average over the first
20 % of steps by at least ``COLLAPSE_RISE`` = 0.25 (fixed before the runs were made).

Setup (small enough for a shared CPU: tiny-cpu preset, the ``sort`` task at difficulty 3): one SFT warm start to a held-out solve rate of 0.3, then GRPO with B = 16 prompts,
lr 1e-3, token-mean PPO loss with ε = 0.2, one thread per process.  Every run is a fresh process
state (``trainer.train``); runs are skipped when their row is already in the CSV (``--redo`` to
redo), so an interrupted invocation continues.

Usage::

    OMP_NUM_THREADS=1 python examples/seed_experiments.py collapse --seeds 10
    OMP_NUM_THREADS=1 python examples/seed_experiments.py table2 --seeds 5
    python examples/seed_experiments.py summary
"""

from __future__ import annotations

import argparse
import json
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


def collapsed(frac_all_wrong: np.ndarray, rise: float = COLLAPSE_RISE) -> tuple[bool, float]:
    """``(collapsed, rise)``: the mean of the last 20 % of ``frac_all_wrong`` minus that of the first 20 %."""
    f = np.asarray(frac_all_wrong, dtype=float)
    w = max(1, len(f) // 5)
    d = float(f[-w:].mean() - f[:w].mean())
    return d >= rise, d


def warm_start(work: Path) -> Path:
    final = work / "sft" / "final"
    if (final / "config.json").exists():
        return final
    return sft.train_sft(SFTConfig(out=str(work / "sft"), task=TASK, difficulty=DIFFICULTY, target_solve_rate=0.3,
                                   eval_every=25, eval_problems=64, eval_samples=4, threads=1, device="cpu",
                                   quiet=True, overwrite=True))


def grpo_run(work: Path, name: str, init: Path, advantage: str, params: dict, *, seed: int, steps: int,
             group_size: int = 8, **extra) -> tuple[Path, pd.DataFrame, float]:
    out = work / name
    t0 = time.perf_counter()
    cfg = GRPOConfig(out=str(out), init=str(init), task=TASK, difficulty=DIFFICULTY, advantage=advantage,
                     params=dict(params), steps=steps, batch_size=16, group_size=group_size, lr=1e-3, seed=seed,
                     threads=1, device="cpu", quiet=True, rollout_log=False, log_kl=False, checkpoint_every=10**6,
                     overwrite=True, **extra)
    trainer.train(cfg)
    rows = pd.DataFrame([json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()])
    ckpt = sorted(out.glob("checkpoint-*"))[-1]
    return ckpt, rows, time.perf_counter() - t0


def _append(csv: Path, row: dict) -> None:
    df = pd.DataFrame([row])
    df.to_csv(csv, mode="a", header=not csv.exists(), index=False)


def _done(csv: Path) -> set[tuple[str, int]]:
    if not csv.exists():
        return set()
    d = pd.read_csv(csv)
    return set(zip(d.variant, d.seed))


def run_collapse(args) -> None:
    work = Path(args.work)
    init = warm_start(work)
    csv = Path(args.data) / "agrae_collapse.csv"
    if args.redo and csv.exists():
        csv.unlink()
    done = _done(csv)
    base = evaluate.evaluate(init, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                             threads=1, progress=False)
    for seed in range(args.seeds):
        for label, adv, params in COLLAPSE_VARIANTS:
            if (label, seed) in done:
                continue
            tag = f"collapse_{adv}{'_dr' if params.get('norm_by_std') is False else ''}_s{seed}"
            ckpt, rows, secs = grpo_run(work, tag, init, adv, params, seed=seed, steps=args.steps)
            hit, rise = collapsed(rows.frac_all_wrong.to_numpy())
            res = evaluate.evaluate(ckpt, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                                    threads=1, progress=False)
            row = {"variant": label, "advantage": adv, "params": json.dumps(params, sort_keys=True), "seed": seed,
                   "steps": args.steps, "collapsed": bool(hit), "frac_all_wrong_rise": rise,
                   "frac_all_wrong_first": float(rows.frac_all_wrong.head(max(1, len(rows) // 5)).mean()),
                   "frac_all_wrong_last": float(rows.frac_all_wrong.tail(max(1, len(rows) // 5)).mean()),
                   "pass@1": res.pass_at_k[1], f"pass@{args.k}": res.pass_at_k[args.k],
                   "sft_pass@1": base.pass_at_k[1], f"sft_pass@{args.k}": base.pass_at_k[args.k],
                   "answer_entropy": res.answer_entropy, "final_entropy": float(rows.entropy.tail(5).mean()),
                   "seconds": secs}
            _append(csv, row)
            print(f"{label:24s} seed {seed}: collapsed={hit} rise={rise:+.3f} pass@1={res.pass_at_k[1]:.3f} "
                  f"pass@{args.k}={res.pass_at_k[args.k]:.3f} ({secs:.1f} s)", flush=True)


def run_table2(args) -> None:
    work = Path(args.work)
    init = warm_start(work)
    csv = Path(args.data) / "fgrpo_table2.csv"
    if args.redo and csv.exists():
        csv.unlink()
    done = _done(csv)
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
    for seed in range(args.seeds):
        for label, adv, params, N, extra in TABLE2_VARIANTS:
            if (label, seed) in done:
                continue
            tag = f"table2_{label.replace(' ', '_').replace('=', '')}_s{seed}"
            ckpt, rows, secs = grpo_run(work, tag, init, adv, params, seed=seed, steps=args.steps, group_size=N,
                                        **extra)
            res = evaluate.evaluate(ckpt, k=(1, args.k), n=args.k, problems=args.problems, seed=0, device="cpu",
                                    threads=1, progress=False, rare=rare)
            row = {"variant": label, "advantage": adv, "params": json.dumps(params, sort_keys=True), "N": N,
                   "extra": json.dumps(extra, sort_keys=True), "seed": seed, "steps": args.steps,
                   "pass@1": res.pass_at_k[1], f"pass@{args.k}": res.pass_at_k[args.k],
                   "delta_nll_rare": res.delta_nll_rare, "nll_rare": res.nll_rare,
                   "sft_pass@1": base.pass_at_k[1], f"sft_pass@{args.k}": base.pass_at_k[args.k],
                   "rare_set_size": len(rare.prompts), "rare_candidates": rare.candidates,
                   "answer_entropy": res.answer_entropy, "final_entropy": float(rows.entropy.tail(5).mean()),
                   "seconds": secs}
            _append(csv, row)
            print(f"{label:14s} seed {seed}: pass@1={res.pass_at_k[1]:.3f} pass@{args.k}={res.pass_at_k[args.k]:.3f} "
                  f"dNLL_rare={res.delta_nll_rare:+.3f} ({secs:.1f} s)", flush=True)


def summarize(csv: Path, k: int, by: str = "variant") -> str:
    """A Markdown table: per variant (in the order of first appearance) the runs, the collapsed
    runs (collapse CSV) and the mean ± standard error over seeds of pass@1, pass@k, ΔNLL_rare."""
    d = pd.read_csv(csv)
    cols = [c for c in ("pass@1", f"pass@{k}", "delta_nll_rare", "frac_all_wrong_rise") if c in d]
    g = d.groupby(by, sort=False)
    head = ["variant", "runs"] + (["collapsed"] if "collapsed" in d else []) + cols
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, part in g:
        cells = [str(name), str(len(part))]
        if "collapsed" in d:
            cells.append(str(int(part.collapsed.sum())))
        cells += [f"{part[c].mean():.3f} ± {part[c].sem():.3f}" for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    sft = [c for c in ("sft_pass@1", f"sft_pass@{k}") if c in d]
    tail = ", ".join(f"{c[4:]} {d[c].iloc[0]:.3f}" for c in sft)
    return "\n".join(lines) + f"\n\nSFT start: {tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("collapse", "table2", "all", "summary"))
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "rlvr_seed_experiments"),
                    help="directory of the runs and the SFT warm start (outside the repository by default)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--k", type=int, default=16, help="pass@k's k (also the samples per held-out problem)")
    ap.add_argument("--problems", type=int, default=64, help="held-out problems per evaluation")
    ap.add_argument("--rare-prompts", type=int, default=64)
    ap.add_argument("--rare-samples", type=int, default=128)
    ap.add_argument("--rare-fraction", type=float, default=0.01)
    ap.add_argument("--data", default=str(DATA), help="where the CSV files go")
    ap.add_argument("--redo", action="store_true", help="discard the CSV and rerun every run")
    args = ap.parse_args(argv)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    if args.what in ("collapse", "all"):
        run_collapse(args)
    if args.what in ("table2", "all"):
        run_table2(args)
    if args.what == "summary":
        for name in ("agrae_collapse", "fgrpo_table2"):
            if (data / f"{name}.csv").exists():
                print(name)
                print(summarize(data / f"{name}.csv", args.k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
