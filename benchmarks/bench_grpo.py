"""Benchmark of the GRPO trainer: training steps/s, generated tokens/s, and rollout time with
the KV cache against generation without it, measured side by side in one run.

Parts (all on one freshly initialised model of ``--preset``; a random policy rarely samples
``<eos>``, so every response runs to the budget ``--max-new-tokens`` — the worst case):

1. rollouts: ``B × G`` sequences sampled at temperature 1, top-p 1 by
   (a) :func:`simulations.grpo.rollout.sample` with the KV cache (what the trainer uses),
   (b) the same sampler with ``use_cache=False`` (the prefix recomputed at every token),
   (c) ``model.generate(do_sample=True, use_cache=True)`` and (d) ``use_cache=False``
   (Hugging Face's plain generation); median of ``--repeats`` timings each, ratios printed;
2. training: ``--steps`` GRPO steps (``grpo`` advantage, PPO-clip, token-mean) through
   :func:`simulations.grpo.trainer.train` on the ``sort`` task; steps/s and generated tokens/s
   from its metrics (median over steps after the first).

    python benchmarks/bench_grpo.py [--preset tiny-cpu] [--device auto] [--batch-size 16]
        [--group-size 8] [--max-new-tokens 8] [--steps 20] [--repeats 5] [--threads N (default: half the cores)]
        [--out benchmarks/results/grpo_<preset>_<device>.json]

On a GPU machine: ``python benchmarks/bench_grpo.py --preset small-gpu --device cuda
--batch-size 64 --max-new-tokens 32``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rlvr_plumbing import runner
from rlvr_plumbing.io import write_json
from rlvr_plumbing.runtime import resolve_device
from simulations.grpo import models, rollout, tasks, trainer


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _time(fn, repeats: int, dev: torch.device) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench_rollouts(args: argparse.Namespace, dev: torch.device) -> dict:
    task = tasks.get("sort", 4)
    model, tok = models.prepare_policy(task, preset=args.preset, seed=0, device=dev)
    model.eval()
    probs = task.sample(np.random.default_rng(0), args.batch_size)
    ids, mask = rollout.encode_prompts(tok, [p.prompt for p in probs], repeat=args.group_size, device=dev)
    T = args.max_new_tokens
    kw = dict(max_new_tokens=T, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)

    def ours(cache: bool):
        g = torch.Generator(device=dev).manual_seed(0)
        return lambda: rollout.sample(model, ids, mask, generator=g, use_cache=cache, **kw)

    def hf(cache: bool):
        # min_new_tokens = T: the same number of tokens as our sampler on a random policy
        return lambda: model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                      top_p=1.0, top_k=0, max_new_tokens=T, min_new_tokens=T, use_cache=cache,
                                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)

    ro = ours(True)()
    n_ours = int(ro.lengths.sum())            # a random policy sometimes samples <eos> early
    n_hf = ids.shape[0] * T                   # min_new_tokens = max_new_tokens = T
    with torch.no_grad():
        times = {"ours_kv_cache": _time(ours(True), args.repeats, dev),
                 "ours_no_cache": _time(ours(False), args.repeats, dev),
                 "hf_generate_cache": _time(hf(True), args.repeats, dev),
                 "hf_generate_no_cache": _time(hf(False), args.repeats, dev)}
    tokens = {k: (n_ours if k.startswith("ours") else n_hf) for k in times}
    return {"sequences": ids.shape[0], "prompt_len": ids.shape[1], "max_new_tokens": T,
            "generated_tokens": tokens, "params": models.n_params(model), "seconds": times,
            "tokens_per_s": {k: tokens[k] / v for k, v in times.items()},
            "ms_per_generated_token_step": {k: 1e3 * v / (tokens[k] / ids.shape[0]) for k, v in times.items()}}


def bench_training(args: argparse.Namespace, dev: torch.device) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = trainer.GRPOConfig(out=str(Path(tmp) / "run"), preset=args.preset, task="sort", difficulty=4,
                                 steps=args.steps, batch_size=args.batch_size, group_size=args.group_size,
                                 max_new_tokens=args.max_new_tokens, checkpoint_every=10**9, log_every=10**9,
                                 device=str(dev), threads=args.threads, quiet=True)
        rows = []
        trainer.train(cfg, callback=lambda rec: rows.append(rec.metrics))
    rows = rows[1:]  # the first step includes one-off warm-up
    step_time = statistics.median(r["step_time"] for r in rows)
    return {"steps_timed": len(rows), "step_time_s": step_time, "steps_per_s": 1.0 / step_time,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "rollout_share": statistics.median(r["rollout_time"] / r["step_time"] for r in rows),
            "response_len_mean": statistics.mean(r["response_len_mean"] for r in rows)}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or "cpu"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu", choices=list(models.PRESETS))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    runner.add_threads_option(ap)
    ap.add_argument("--out", default=None, help="JSON results file [benchmarks/results/grpo_<preset>_<device>.json]")
    args = ap.parse_args(argv)
    dev = resolve_device(args.device)
    args.threads = runner.apply_threads(args.threads)
    with models.torch_threads(args.threads):
        roll = bench_rollouts(args, dev)
        train = bench_training(args, dev)
    s = roll["seconds"]
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name()
    print(f"device {dev} ({name}), torch threads {args.threads}, preset {args.preset} "
          f"({roll['params'] / 1e6:.2f} M params)")
    print(f"rollout: {roll['sequences']} sequences x up to {roll['max_new_tokens']} new tokens "
          f"(prompt {roll['prompt_len']} tokens), median of {args.repeats}")
    for k, v in s.items():
        print(f"  {k:22s} {v * 1e3:9.1f} ms  {roll['tokens_per_s'][k]:10.0f} tokens/s")
    print(f"  ratio no-cache / KV-cache (ours)        {s['ours_no_cache'] / s['ours_kv_cache']:.2f}x")
    print(f"  ratio HF generate no-cache / ours KV    {s['hf_generate_no_cache'] / s['ours_kv_cache']:.2f}x")
    print(f"  ratio HF generate cache / ours KV       {s['hf_generate_cache'] / s['ours_kv_cache']:.2f}x")
    print(f"training: {train['steps_per_s']:.2f} steps/s ({train['step_time_s'] * 1e3:.0f} ms/step, "
          f"B={args.batch_size} x G={args.group_size}), {train['tokens_per_s']:.0f} generated tokens/s, "
          f"rollout {100 * train['rollout_share']:.0f}% of a step")
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / f"grpo_{args.preset}_{dev.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"device": str(dev), "device_name": name, "threads": args.threads,
                     "load_average": os.getloadavg(), "args": vars(args), "rollout": roll,
                     "training": train, "torch": torch.__version__}, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
