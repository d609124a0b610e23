"""How much of a tiny GRPO run's gain do the rank-1, 4 and 16 parts of ΔW recover? (issue 29, item 4)

AlphaRL (arXiv 2510.00553) reports that the rank-1 part of ΔW = W_rl − W_base recovers > 99 % of
the RL gain.  This script makes the tiny version of that test: one SFT warm start (the base), a few
GRPO runs from it (one per seed), for each run the checkpoints ``W_base + P_k(ΔW)`` for k = 1, 4,
16 (and rank 1 rescaled to ‖ΔW‖) written by ``rlvr-diff reconstruct``, and the held-out accuracy of
every checkpoint by ``rlvr-train eval`` (sampled pass@1 at temperature 1 and greedy accuracy).
The recovered share of a reconstruction is ``(acc − acc_base) / (acc_rl − acc_base)``; it means
something only where RL improved on the base.

Setup (as ``examples/seed_experiments.py``): tiny-cpu model (hidden 64, 4 blocks, every matrix's
smaller side is 64: rank 16 is a quarter of it), the ``sort`` task at difficulty 3, SFT to a
held-out sampled solve rate ≥ 0.3, then GRPO with B = 16 prompts, G = 8, 60 steps, lr 1e-3, one
thread.  Evaluation: the same 100 distinct held-out problems and sampling seed for every checkpoint,
32 samples each (pass@1) and one greedy completion each.

Everything runs in one process through the library (``sft.train_sft``, ``trainer.train``,
``analysis.diff.reconstruct.reconstruct``, ``evaluate.evaluate``): a process per command would
pay the import of transformers every time.  The equivalent commands are printed (``--dry-run``
prints them only)::

    OMP_NUM_THREADS=1 python examples/reconstruct_rank.py --seeds 3 --work /tmp/rank_work

Rows go to ``WORK/reconstruct_rank.csv`` (one per seed and checkpoint; runs already there are
skipped, so an interrupted command continues; ``--redo`` starts over); the summary table is
printed as Markdown.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.diff.reconstruct import reconstruct  # noqa: E402
from simulations.grpo import evaluate, sft, trainer  # noqa: E402
from simulations.grpo.config import GRPOConfig, SFTConfig  # noqa: E402

TASK, DIFFICULTY = "sort", 3
STEPS, BATCH, GROUP, LR = 60, 16, 8, 1e-3
PROBLEMS, SAMPLES = 100, 32
#: (variant, rank, rescale)
VARIANTS = [("rank 1", 1, False), ("rank 4", 4, False), ("rank 16", 16, False), ("rank 1 rescaled", 1, True)]


def _say(cmd: list[str]) -> None:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)


def warm_start(work: Path, dry: bool) -> Path:
    final = work / "sft" / "final"
    _say(["rlvr-train", "sft", "--task", TASK, "--difficulty", str(DIFFICULTY), "--preset", "tiny-cpu",
          "--target-solve-rate", "0.3", "--eval-every", "25", "--eval-problems", "64", "--eval-samples", "4",
          "--device", "cpu", "--threads", "1", "--out", str(work / "sft")])
    if dry or (final / "config.json").exists():
        return final
    return sft.train_sft(SFTConfig(out=str(work / "sft"), task=TASK, difficulty=DIFFICULTY, target_solve_rate=0.3,
                                   eval_every=25, eval_problems=64, eval_samples=4, threads=1, device="cpu",
                                   quiet=True, overwrite=True))


def grpo(work: Path, init: Path, seed: int, dry: bool) -> Path:
    out = work / f"grpo-s{seed}"
    _say(["rlvr-train", "grpo", "--init", str(init), "--advantage", "grpo", "--steps", str(STEPS), "--batch-size",
          str(BATCH), "--group-size", str(GROUP), "--lr", str(LR), "--seed", str(seed), "--no-rollout-log",
          "--no-log-kl", "--device", "cpu", "--threads", "1", "--out", str(out)])
    final = out / f"checkpoint-{STEPS:06d}"
    if dry or (final / "config.json").exists():
        return final
    trainer.train(GRPOConfig(out=str(out), init=str(init), task=TASK, difficulty=DIFFICULTY, advantage="grpo",
                             steps=STEPS, batch_size=BATCH, group_size=GROUP, lr=LR, seed=seed, threads=1,
                             device="cpu", quiet=True, rollout_log=False, log_kl=False, checkpoint_every=10**6,
                             overwrite=True))
    return final


def rebuild(base: Path, rl: Path, out: Path, rank: int, rescale: bool, dry: bool) -> dict | None:
    _say(["rlvr-diff", "reconstruct", str(base), str(rl), "--rank", str(rank), *(["--rescale"] if rescale else []),
          "--device", "cpu", "--overwrite", "--out", str(out)])
    if dry:
        return None
    return reconstruct(base, rl, out, rank=rank, rescale=rescale, device="cpu", overwrite=True)


def score(ckpt: Path, dry: bool) -> dict[str, float]:
    _say(["rlvr-train", "eval", str(ckpt), "--k", "1", "--n", str(SAMPLES), "--problems", str(PROBLEMS),
          "--seed", "0", "--device", "cpu", "--threads", "1"])
    _say(["rlvr-train", "eval", str(ckpt), "--temperature", "0", "--problems", str(PROBLEMS), "--seed", "0",
          "--device", "cpu", "--threads", "1"])
    if dry:
        return {}
    s = evaluate.evaluate(ckpt, k=(1,), n=SAMPLES, problems=PROBLEMS, seed=0, device="cpu", threads=1, progress=False)
    g = evaluate.evaluate(ckpt, temperature=0, problems=PROBLEMS, seed=0, device="cpu", threads=1, progress=False)
    return {"pass@1": float(s.pass_at_k[1]), "greedy": float(g.greedy_accuracy)}


def _ms(x: pd.Series) -> str:
    x = x.dropna()
    if x.empty:
        return "—"
    se = x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
    return f"{x.mean():.3f}" + (f" ± {se:.3f}" if np.isfinite(se) else "")


def summary(d: pd.DataFrame) -> str:
    """Markdown: mean ± s.e. over seeds of each checkpoint's accuracies and recovered shares.

    A recovered share is shown only for a metric whose RL gain over the base is positive in every
    seed; otherwise the column says so (the share of a gain that is noise is not a number)."""
    order = ["base (SFT)", "RL (GRPO)"] + [v for v, _, _ in VARIANTS]
    rl = d[d.variant == "RL (GRPO)"]
    lines = []
    meaningful = {}
    for m in ("pass@1", "greedy"):
        gain = rl[f"gain_{m}"]
        meaningful[m] = bool((gain > 0).all())
        lines.append(f"RL gain over the base, {m}: {_ms(gain)} (per seed: "
                     f"{', '.join(f'{g:+.3f}' for g in gain)}){'' if meaningful[m] else ': not positive in every seed, no recovered share'}")
    lines += ["", "| checkpoint | seeds | pass@1 | greedy | recovered share of the pass@1 gain | "
              "recovered share of the greedy gain | energy share of ΔW |", "|---|---|---|---|---|---|---|"]
    for v in order:
        r = d[d.variant == v]
        if r.empty:
            continue
        rec = [_ms(r[f"recovered_{m}"]) if meaningful[m] else "n/a" for m in ("pass@1", "greedy")]
        lines.append(f"| {v} | {r.seed.nunique()} | {_ms(r['pass@1'])} | {_ms(r['greedy'])} | {rec[0]} | {rec[1]} | "
                     f"{_ms(r['energy'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="GRPO runs, seeds 0..N-1 [3]")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "rlvr_reconstruct_rank"),
                    help="folder of the runs and checkpoints")
    ap.add_argument("--redo", action="store_true", help="start the CSV over")
    ap.add_argument("--dry-run", action="store_true", help="print the equivalent commands only")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "reconstruct_rank.csv"
    if args.redo and csv.exists():
        csv.unlink()
    dry = args.dry_run
    t0 = time.perf_counter()
    base = warm_start(work, dry)
    b = score(base, dry)
    rows = [] if dry or not csv.exists() else pd.read_csv(csv).to_dict("records")
    done = {int(r["seed"]) for r in rows}
    for seed in range(args.seeds):
        if seed in done:
            continue
        rl = grpo(work, base, seed, dry)
        r = score(rl, dry)
        new = [{"seed": seed, "variant": "base (SFT)", **b, "energy": np.nan},
               {"seed": seed, "variant": "RL (GRPO)", **r, "energy": 1.0}]
        for name, rank, rescale in VARIANTS:
            out = work / f"rec-s{seed}-r{rank}{'-rescaled' if rescale else ''}"
            doc = rebuild(base, rl, out, rank, rescale, dry)
            if dry:
                continue
            new.append({"seed": seed, "variant": name, **score(out, dry), "energy": doc["energy_total"]})
        if dry:
            continue
        for row in new:
            for m in ("pass@1", "greedy"):
                gain = r[m] - b[m]
                row[f"gain_{m}"] = gain
                row[f"recovered_{m}"] = (row[m] - b[m]) / gain if gain > 0 else np.nan
        rows += new
        pd.DataFrame(rows).to_csv(csv, index=False)
        print(f"seed {seed} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    if dry:
        return
    d = pd.DataFrame(rows)
    print(f"\nRows: {csv} ({time.perf_counter() - t0:.0f} s)\n")
    print(d.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print()
    print(summary(d))


if __name__ == "__main__":
    main()
