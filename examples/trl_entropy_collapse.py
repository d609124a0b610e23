"""Entropy collapse inside TRL's GRPOTrainer, and the token diagnostics that show its drivers.

The TRL counterpart of ``examples/entropy_collapse.py`` (issue 28, item 5): TRL's own
``GRPOTrainer`` through ``integrations.trl.GRPOTrainer``, on CPU, with a tiny Qwen2 built here
from a config (no download), ``token_diagnostics=True`` and the default guard with the action
``alert``.  Per seed, two runs with the same settings except the advantage:

* ``relu``: ``max(A_grpo, 0)``, successes reinforced, failures never pushed down (m_F = 0);
* ``grpo``: the group-centred advantage, sign-balanced.

The reward is a verifiable format check (the answer begins with a digit; a fresh model passes
about one time in six).  Each run prints its entropy start → end (TRL's logged ``entropy``), the
guard's alerts (``OUT/<run>/rlvr_alerts.jsonl``: step, rule, the numbers it fired on), the
token-level split of Ĉov(log π, A) logged by the adapter (``rlvr/token/cov_logp_adv_pos``,
``_neg``, ``_zero``, ``_clipped``, ``_unclipped``: each part's sum over the steps as a share of
the total's) and the correlation of Cui's prediction −η·Ĉov with the measured entropy change
(the adapter's ``EntropyChangeTracker``).  With TRL's default ``num_iterations = 1`` the
importance ratio is 1 and nothing is clipped; ``--num-iterations 2`` (two optimizer steps per
generation batch) gives PPO's clip something to clip on the second step, but then the masses are
logged every other step only and the guard's ``sign_ratio`` rule (3 consecutive steps) never fires.

    OMP_NUM_THREADS=1 PYTHONPATH=. python examples/trl_entropy_collapse.py \\
        [--out DIR] [--steps 40] [--lr 1e-2] [--seeds 0 1 2] [--num-iterations 1]

About 10 s per run on one CPU thread (six runs with the default three seeds).  See
docs/integrations.md, "A worked example: entropy collapse inside TRL".
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import tempfile
import time
import warnings

import numpy as np
import torch
from datasets import Dataset
from transformers import PrinterCallback
from trl import GRPOConfig
from trl_grpo import starts_with_digit, tiny_model  # the script's folder is on sys.path

from analysis.guardrails import Guard, default_rules
from integrations.trl import GRPOTrainer  # <- the registry's advantages and diagnostics inside TRL
from simulations.grpo.tokenizer import build_tokenizer

RUNS = {"collapse (relu)": "relu", "balanced (grpo)": "grpo"}
SPLIT = ("pos", "neg", "zero", "clipped", "unclipped")
T = "rlvr/token/"


def run(out: str, advantage: str, seed: int, steps: int, lr: float, num_iterations: int) -> GRPOTrainer:
    tokenizer = build_tokenizer()
    rng = np.random.default_rng(seed)
    prompts = [f"{x}+{y}=" for x, y in rng.integers(0, 50, size=(64, 2))]
    args = GRPOConfig(output_dir=out, use_cpu=True, seed=seed, max_steps=steps, learning_rate=lr,
                      per_device_train_batch_size=32, num_generations=8, max_completion_length=4,
                      num_iterations=num_iterations, temperature=1.0, logging_steps=1, log_completions=False,
                      report_to=[], save_strategy="no", disable_tqdm=True, bf16=False)
    trainer = GRPOTrainer(model=tiny_model(tokenizer, seed), processing_class=tokenizer,
                          reward_funcs=starts_with_digit, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          args=args, advantage=advantage,
                          token_diagnostics=True,                              # <- rlvr/token/*
                          guard=Guard(default_rules(), action="alert"))        # <- rlvr_alerts.jsonl
    trainer.remove_callback(PrinterCallback)  # TRL's per-step dict; the summary below reads log_history
    trainer.train()
    return trainer


def read_alerts(out: str) -> list[dict]:
    path = os.path.join(out, "rlvr_alerts.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarise(trainer: GRPOTrainer, out: str) -> dict:
    logs = [h for h in trainer.state.log_history if "entropy" in h and f"{T}cov_logp_adv" in h]

    def col(key: str) -> np.ndarray:
        return np.array([h.get(key, math.nan) for h in logs], dtype=float)

    H, cov = col("entropy"), col(f"{T}cov_logp_adv")
    total = np.nansum(cov)
    tracker = trainer.rlvr_entropy_trackers["cui"]
    return {
        "steps": len(logs), "entropy": H, "reward": col("reward"), "m_F": col("rlvr/m_F"),
        "cov": cov, "shares": {k: np.nansum(col(f"{T}cov_logp_adv_{k}")) / total for k in SPLIT},
        "pred_cui_sum": np.nansum(col(f"{T}entropy_change_pred_cui")),
        "measured_sum": np.nansum(col(f"{T}entropy_change_measured")),
        "corr_cui": tracker.correlation, "n_pairs": int(tracker.n),
        "alerts": read_alerts(out),
    }


def print_table(name: str, out: str, s: dict) -> None:
    H = s["entropy"]
    h0, h1 = H[0], H[-1]
    i = np.linspace(0, len(H) - 1, min(len(H), 6)).round().astype(int)
    sh = s["shares"]
    rows = [
        ("entropy, step 1 -> last", f"{h0:.3f} -> {h1:.3f} ({100 * (h1 - h0) / h0:+.0f} %)"),
        ("entropy at steps " + ",".join(str(j + 1) for j in i), " ".join(f"{H[j]:.3f}" for j in i)),
        ("reward, step 1 / mean of last 10", f"{s['reward'][0]:.2f} / {np.nanmean(s['reward'][-10:]):.2f}"),
        ("mean m_F (failure mass)", f"{np.nanmean(s['m_F']):.3f}"),
        ("mean cov_logp_adv", f"{np.nanmean(s['cov']):+.4f} (> 0 on {100 * np.mean(s['cov'] > 0):.0f} % of steps)"),
        ("share from A>0 / A<0 / A=0 tokens", f"{sh['pos']:+.2f} / {sh['neg']:+.2f} / {sh['zero']:+.2f}"),
        ("share from clipped / unclipped tokens", f"{sh['clipped']:+.2f} / {sh['unclipped']:+.2f}"),
        ("sum of Cui's -lr*cov / of measured dH", f"{s['pred_cui_sum']:+.4f} / {s['measured_sum']:+.4f}"),
        ("corr(Cui prediction, measured dH)", f"{s['corr_cui']:+.2f} over {s['n_pairs']} steps"),
        ("alerts (rlvr_alerts.jsonl)", str(len(s["alerts"]))),
    ]
    print(f"\n== {name}: {out}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    for a in s["alerts"]:
        print(f"    step {a['step']:>3}  {a['rule']:<13} {a['message'][:100]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for the runs (default: a new temporary directory)")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    ap.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (TRL's default schedule: linear decay)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--num-iterations", type=int, default=1, help="TRL's num_iterations (optimizer steps per batch)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' deprecation notices
    logging.getLogger("integrations.trl").setLevel(logging.ERROR)  # the guard's warnings: printed below
    out = a.out or tempfile.mkdtemp(prefix="trl_entropy_collapse_")
    t0 = time.perf_counter()
    for seed in a.seeds:
        for name, adv in RUNS.items():
            d = os.path.join(out, f"seed{seed}_{adv}")
            t = time.perf_counter()
            trainer = run(d, adv, seed, a.steps, a.lr, a.num_iterations)
            print_table(f"seed {seed}, {name}", d, summarise(trainer, d))
            print(f"  ({time.perf_counter() - t:.0f} s)", flush=True)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
