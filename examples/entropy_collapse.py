"""A run whose entropy collapses, next to a sign-balanced one (issue 28, item 5).

One SFT warm start of the tiny-cpu preset on 3-digit sorting, then two short GRPO runs from it
with the same settings except the advantage:

* ``relu``: ``max(A_grpo, 0)``, successes are reinforced and failures never pushed down
  (m_F = 0), so nothing holds the entropy up;
* ``grpo``: the group-centred advantage, sign-balanced.

Both run with ``--guard default --guard-action alert``.  The script then reads each run's
``metrics.jsonl`` and ``rlvr_alerts.jsonl`` and prints a small table per run.  On 2 CPU cores it
takes about a minute (the two GRPO runs go in parallel, one thread each).

    OMP_NUM_THREADS=1 python examples/entropy_collapse.py [--out DIR] [--steps 40] [--lr 1e-3]

See docs/token_entropy.md, "A worked example: a run whose entropy collapses".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RUNS = {"collapse (relu)": "relu", "balanced (grpo)": "grpo"}


def rlvr_train() -> list[str]:
    """The `rlvr-train` of this interpreter's environment (else `python -m simulations.grpo`)."""
    exe = Path(sys.executable).with_name("rlvr-train")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "simulations.grpo"]


def read_alerts(run_dir: Path) -> list[dict]:
    path = run_dir / "rlvr_alerts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(run_dir: Path) -> dict:
    m = pd.read_json(run_dir / "metrics.jsonl", lines=True)
    cov = m["cov_logp_adv"]
    total = cov.sum()
    pairs = m[["entropy_change_pred_cui", "entropy_change_measured"]].dropna()
    corr = (float(np.corrcoef(pairs.iloc[:, 0], pairs.iloc[:, 1])[0, 1])
            if len(pairs) >= 2 else float("nan"))
    return {
        "steps": len(m),
        "entropy_first": m["entropy"].iloc[0],
        "entropy_last": m["entropy"].iloc[-1],
        "solve_first": m["solve_rate"].iloc[0],
        "solve_last10": m["solve_rate"].tail(10).mean(),
        "m_F_mean": m["m_F"].mean(),
        "cov_mean": cov.mean(),
        "cov_pos_share": m["cov_logp_adv_pos"].sum() / total,
        "cov_neg_share": m["cov_logp_adv_neg"].sum() / total,
        "cov_zero_share": m["cov_logp_adv_zero"].sum() / total,
        "cov_positive_steps": float((cov > 0).mean()),
        "pred_cui_sum": m["entropy_change_pred_cui"].sum(),
        "measured_sum": m["entropy_change_measured"].sum(),
        "corr_cui_measured": corr,
        "n_pairs": len(pairs),
        "alerts": read_alerts(run_dir),
    }


def print_table(name: str, run_dir: Path, s: dict) -> None:
    h0, h1 = s["entropy_first"], s["entropy_last"]
    rows = [
        ("entropy, step 1 -> last", f"{h0:.3f} -> {h1:.3f} ({100 * (h1 - h0) / h0:+.0f} %)"),
        ("solve rate, step 1 / mean of last 10", f"{s['solve_first']:.2f} / {s['solve_last10']:.2f}"),
        ("mean m_F (failure mass)", f"{s['m_F_mean']:.3f}"),
        ("mean cov_logp_adv", f"{s['cov_mean']:+.4f} (> 0 on {100 * s['cov_positive_steps']:.0f} % of steps)"),
        ("share from A>0 / A<0 / A=0 tokens",
         f"{s['cov_pos_share']:+.2f} / {s['cov_neg_share']:+.2f} / {s['cov_zero_share']:+.2f}"),
        ("sum of Cui's -lr*cov / of measured dH",
         f"{s['pred_cui_sum']:+.4f} / {s['measured_sum']:+.4f}"),
        ("corr(Cui prediction, measured dH)", f"{s['corr_cui_measured']:+.2f} over {s['n_pairs']} steps"),
        ("alerts (rlvr_alerts.jsonl)", str(len(s["alerts"]))),
    ]
    print(f"\n== {name}: {run_dir}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    for a in s["alerts"]:
        print(f"    step {a['step']:>3}  {a['rule']:<13} {a['message'][:96]}")
    print(f"  next: rlvr-audit {run_dir} --out {run_dir.parent / ('audit_' + run_dir.name)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for the runs (default: a new temporary directory)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    out = Path(args.out or tempfile.mkdtemp(prefix="entropy_collapse_"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = rlvr_train()
    t0 = time.perf_counter()

    sft = [*cmd, "sft", "--task", "sort", "--difficulty", "3", "--preset", "tiny-cpu",
           "--target-solve-rate", "0.3", "--eval-every", "10", "--max-steps", "400",
           "--seed", str(args.seed), "--out", str(out / "sft"), "--threads", "1", "--quiet"]
    print("$", " ".join(sft[1:] if len(cmd) == 1 else sft), flush=True)
    subprocess.run(sft, env=env, check=True)

    procs = {}
    for name, adv in RUNS.items():
        grpo = [*cmd, "grpo", "--init", str(out / "sft" / "final"), "--advantage", adv,
                "--steps", str(args.steps), "--lr", str(args.lr), "--seed", str(args.seed),
                "--guard", "default", "--guard-action", "alert",
                "--checkpoint-every", str(args.steps), "--no-rollout-log",
                "--out", str(out / adv), "--threads", "1", "--quiet"]
        print("$", " ".join(grpo[1:] if len(cmd) == 1 else grpo), flush=True)
        # the guard's lines (action alert) go to stderr; keep them in a log file
        procs[name] = subprocess.Popen(grpo, env=env, stdout=subprocess.DEVNULL,
                                       stderr=open(out / f"{adv}.log", "w"))
    for name, p in procs.items():
        if p.wait() != 0:
            print((out / f"{RUNS[name]}.log").read_text(), file=sys.stderr)
            raise SystemExit(f"{name}: rlvr-train grpo failed (exit status {p.returncode})")

    for name, adv in RUNS.items():
        print_table(name, out / adv, summarise(out / adv))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
