"""Write the small example rollout logs of ``rlvr-audit`` (one folder per format).

    python examples/make_audit_logs.py [--out examples/audit_logs]

Deterministic (seeded): running it again rewrites the same files.  Every log is a simulated
run in the exact on-disk schema of its trainer: each prompt has a solve rate that rises over
the steps (logit + 0.25 per step, so groups move from all-wrong to mixed to all-correct), and
each rollout's reward is a Bernoulli draw of it.

=================================  ===================================================
folder                             what
=================================  ===================================================
``verl/rollout_data/{step}.jsonl``  verl >= 0.9 ``trainer.rollout_data_dir`` (uid
                                   ``{group}_{rollout}_{output}``; steps 4 and 9 carry
                                   padding rows ``pad...``)
``verl/validation_data/{step}.jsonl``  its ``trainer.validation_data_dir`` (read with
                                   ``--split val``)
``verl_legacy/{step}.jsonl``       an older verl dump without ``uid`` (grouped by input)
``trl/completions/``               TRL >= 0.28 ``log_completions=True`` parquet files:
                                   two reward functions (one returns None now and
                                   then), an extra column, TRL's GRPO advantages;
                                   ``num_iterations=2``: each batch is logged twice
``prime-rl/rollouts/step_N/``      prime-rl episodes (``train/effective`` and
                                   ``eval/all`` ``traces.jsonl``)
``rlvr/rollouts/``                 ``rlvr-train grpo``'s rollout log
``table/rollouts.csv``             the generic table (step, group, reward, advantage,
                                   length)
=================================  ===================================================
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent
STEPS = 12
PROMPTS = 6       # prompts (groups) per step
G = 8             # rollouts per prompt
QUESTIONS = [f"Q{i}: sum of the digits of {1000 + 37 * i}?" for i in range(40)]


def solve_rates(rng: np.random.Generator, step: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt ids and their solve rates at ``step`` (a logit that rises by 0.25 per step)."""
    ids = rng.choice(len(QUESTIONS), n, replace=False)
    base = np.linspace(-3.0, 1.5, len(QUESTIONS))[ids]
    return ids, 1 / (1 + np.exp(-(base + 0.25 * step)))


def draw(rng: np.random.Generator, step: int, n: int = PROMPTS, g: int = G) -> tuple[np.ndarray, np.ndarray]:
    ids, p = solve_rates(rng, step, n)
    return ids, (rng.random((n, g)) < p[:, None]).astype(float)


def answer(rng: np.random.Generator, ok: float) -> str:
    return f"... so the answer is {'correct' if ok else rng.integers(0, 99)}"


# ------------------------------------------------------------------ verl
def write_verl(out: Path, rng: np.random.Generator) -> None:
    d = out / "verl" / "rollout_data"
    d.mkdir(parents=True)
    for step in range(1, STEPS + 1):
        ids, R = draw(rng, step)
        lines = []
        for b, q in enumerate(ids):
            uid = f"{rng.integers(1 << 62):016x}"
            for g in range(G):
                lines.append({"input": QUESTIONS[q], "output": answer(rng, R[b, g]), "gts": "ok",
                              "score": R[b, g], "step": step, "uid": f"{uid}_{g}_0"})
        lines.sort(key=lambda r: r["uid"])  # verl's v1 trainer writes the dump sorted by uid
        if step in (4, 9):  # the batch was padded to a multiple of the data-parallel size
            pad = f"pad{rng.integers(1 << 62):016x}"
            lines += [{"input": "", "output": "", "gts": None, "score": 0.0, "step": step,
                       "uid": f"{pad}_{i}_0"} for i in range(3)]
        write_jsonl(d / f"{step}.jsonl", lines)
    v = out / "verl" / "validation_data"
    v.mkdir(parents=True)
    for step in (0, 6, 12):
        ids, R = draw(np.random.default_rng(100), step, n=PROMPTS, g=4)  # the same held-out prompts each time
        R = (np.random.default_rng(100 + step).random(R.shape) < solve_rates(np.random.default_rng(100), step,
                                                                             PROMPTS)[1][:, None]).astype(float)
        lines = [{"input": QUESTIONS[q], "output": answer(rng, R[b, g]), "gts": "ok", "score": R[b, g],
                  "step": step, "reward": R[b, g], "uid": f"val{b:02d}_{g}_0"}
                 for b, q in enumerate(ids) for g in range(4)]
        write_jsonl(v / f"{step}.jsonl", lines)
    legacy = out / "verl_legacy"
    legacy.mkdir(parents=True)
    for step in range(1, 5):
        ids, R = draw(rng, step, n=4)
        lines = [{"input": QUESTIONS[q], "output": answer(rng, R[b, g]), "gts": "ok", "score": R[b, g], "step": step}
                 for b, q in enumerate(ids) for g in range(G)]
        order = rng.permutation(len(lines))  # the legacy trainer's batch balancing reorders rollouts
        write_jsonl(legacy / f"{step}.jsonl", [lines[i] for i in order])


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


# ------------------------------------------------------------------ TRL
def trl_advantages(r: np.ndarray, g: int) -> np.ndarray:
    """TRL GRPOTrainer (scale_rewards="group"): (r - nanmean) / (nanstd + 1e-4) per group of
    ``g`` consecutive rows (nanstd with Bessel's correction), 0 where the reward is NaN."""
    x = r.reshape(-1, g)
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(x, axis=1, keepdims=True)
        std = np.nanstd(x, axis=1, ddof=1, keepdims=True)
    return np.nan_to_num((x - mean) / (std + 1e-4), nan=0.0).reshape(-1).astype(np.float32).astype(float)


def write_trl(out: Path, rng: np.random.Generator) -> None:
    d = out / "trl" / "completions"
    d.mkdir(parents=True)
    step = 0
    for batch in range(1, STEPS // 2 + 1):
        ids, R = draw(rng, 2 * batch, n=4)
        acc = R.reshape(-1).copy()
        fmt = (rng.random(acc.size) < 0.9).astype(float) * 0.5
        none = rng.random(acc.size) < 0.04  # the format function returns None now and then
        fmt[none] = np.nan
        acc[none & (rng.random(acc.size) < 0.5)] = np.nan  # sometimes both: an unscorable completion
        total = np.where(np.isnan(acc) & np.isnan(fmt), np.nan, np.nansum(np.c_[acc, fmt], axis=1))
        adv = trl_advantages(total, G)
        prompts = [[{"role": "user", "content": QUESTIONS[q]}] for q in ids for _ in range(G)]
        completions = [[{"role": "assistant", "content": answer(rng, a == 1)}] for a in acc]
        for _ in range(2):  # num_iterations=2: the same generation batch is logged at two steps
            step += 1
            df = pd.DataFrame({"step": [step] * len(acc), "prompt": prompts, "completion": completions,
                               "accuracy_reward": acc, "format_reward": fmt,
                               "judge": ["ok"] * len(acc), "advantage": adv})
            df.to_parquet(d / f"completions_{step:05d}.parquet")


# ------------------------------------------------------------------ prime-rl, rlvr, table
def write_prime(out: Path, rng: np.random.Generator) -> None:
    root = out / "prime-rl" / "rollouts"
    for step in range(1, 5):
        ids, R = draw(rng, 2 * step, n=3, g=4)
        eps = []
        for b, q in enumerate(ids):
            gid = f"{rng.integers(1 << 62):016x}"
            for g in range(4):
                eps.append({"id": f"{rng.integers(1 << 62):016x}", "env": {"id": "digits", "name": "digits"},
                            "task": {"prompt": QUESTIONS[q]}, "group": {"id": gid},
                            "run": {"type": "train", "id": "example", "work": {"type": "train", "step": step}},
                            "ok": True, "traces": [{"rewards": {"correct": {"score": R[b, g], "weight": 1.0}},
                                                    "stop_condition": "completed"}]})
        p = root / f"step_{step}" / "train" / "effective" / "traces.jsonl"
        p.parent.mkdir(parents=True)
        write_jsonl(p, eps)
    p = root / "step_4" / "eval" / "all" / "traces.jsonl"
    p.parent.mkdir(parents=True)
    write_jsonl(p, [{"id": f"e{i}", "env": {"id": "digits"}, "task": {"prompt": QUESTIONS[i]}, "group": {"id": f"v{i}"},
                     "ok": True, "traces": [{"rewards": {"correct": {"score": float(i % 2), "weight": 1.0}}}]}
                    for i in range(4)])


def write_rlvr(out: Path, rng: np.random.Generator) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = out / "rlvr" / "rollouts"
    d.mkdir(parents=True)
    for step in range(1, 7):
        ids, R = draw(rng, 2 * step, n=4)
        with np.errstate(invalid="ignore", divide="ignore"):
            A = R - R.mean(1, keepdims=True)
            sd = R.std(1, keepdims=True)
            A = np.where(sd > 0, A / np.where(sd > 0, sd, 1), 0.0)  # GRPO (population std)
        n = R.size
        pq.write_table(pa.table({
            "step": pa.array(np.full(n, step, np.int64)),
            "prompt": [QUESTIONS[q] for q in ids for _ in range(G)],
            "group": pa.array(np.repeat(np.arange(len(ids)), G).astype(np.int64)),
            "rollout": pa.array(np.tile(np.arange(G), len(ids)).astype(np.int64)),
            "reward": R.reshape(-1), "advantage": A.reshape(-1),
            "length": pa.array(rng.integers(3, 12, n).astype(np.int64))}), d / f"step_{step:06d}.parquet")


def write_table(out: Path, rng: np.random.Generator) -> None:
    d = out / "table"
    d.mkdir(parents=True)
    rows = []
    for step in range(1, STEPS + 1):
        ids, R = draw(rng, step)
        for b, q in enumerate(ids):
            m, s = R[b].mean(), R[b].std()
            for g in range(G):
                a = (R[b, g] - m) / s if s > 0 else 0.0
                rows.append((step, f"q{q}", R[b, g], round(a, 6), int(rng.integers(20, 400))))
    pd.DataFrame(rows, columns=["step", "group", "reward", "advantage", "length"]).to_csv(d / "rollouts.csv",
                                                                                          index=False)


#: the folders of ``--out`` this script writes (``examples/make_metric_logs.py`` writes the others)
SIMULATED = ("verl", "verl_legacy", "trl", "prime-rl", "rlvr", "table")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "audit_logs"), help="folder to (re)write [examples/audit_logs]")
    args = ap.parse_args(argv)
    out = Path(args.out)
    for name in SIMULATED:          # only the folders written here: trl_run/ and verl_metrics/ are real runs
        if (out / name).exists():
            shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    for i, write in enumerate((write_verl, write_trl, write_prime, write_rlvr, write_table)):
        write(out, np.random.default_rng([2026, i]))
    files = [p for name in SIMULATED for p in (out / name).rglob("*") if p.is_file()]
    print(f"wrote {len(files)} files ({sum(p.stat().st_size for p in files) / 1024:.0f} KiB) under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
