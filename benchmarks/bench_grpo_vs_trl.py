"""Benchmark: our GRPO trainer (``rlvr-train grpo``) against TRL's ``GRPOTrainer``, side by side.

Both trainers start from the same weights (one ``save_pretrained`` directory, loaded by both),
see the same prompts in the same order (the ``--task`` prompts our trainer draws with its seed,
given to TRL as a ``datasets.Dataset`` with ``shuffle_dataset=False``), score them with the
same verifier (the task's ``verify``, wrapped as a TRL reward function; a response counts only
if it ends with ``<eos>`` and holds no other special token, as in our trainer), and use the same
B prompts × G completions per optimizer step, completion budget, temperature, top-p, learning
rate, clip range, token-mean loss, AdamW, gradient clipping and number of steps.  Every run is
its own subprocess (peak RSS = that process's ``ru_maxrss``) with ``--threads`` torch / BLAS
threads; each trainer runs ``--repeats`` times, interleaved with the other, and the medians are
reported.  Per run: steady-state steps/s and generated tokens/s (wall time from the end of
step 1 to the end of the last step, so start-up and the first step's warm-up are left out),
the wall time of the whole subprocess (imports, loading, set-up, every step), peak RSS, the
load average before and after, and the ratios ours / TRL.  Our trainer runs twice per repeat:
``ours`` with the logging matched to TRL's defaults (no KL to the initial policy, no rollout
log) and ``ours-defaults`` with its own defaults (``log_kl``: one more forward pass per step;
one rollout-log file per step).  ``--profile`` adds one instrumented run of each with the time
per step of each phase (generation, reward, forward passes with and without gradient,
backward, gradient clipping, optimizer, logging, the rest), measured by wrapping those
functions.

Must run under the TRL environment (trl, transformers, torch CPU; this project installed in
editable mode)::

    ENV=/root/.cache/rlvr-diagnostics/envs/trl-aef9f684d80b/bin/python
    $ENV benchmarks/bench_grpo_vs_trl.py [--steps 20] [--threads 1 2] [--repeats 3] [--task arith]
        [--difficulty 2] [--batch-size 16] [--group-size 8] [--max-new-tokens N] [--lr 3e-4]
        [--init DIR | --fresh] [--profile] [--no-defaults-row]
        [--out benchmarks/results/grpo_vs_trl_cpu.json]

Without ``--init`` the model is a ``tiny-cpu`` preset warmed up by our SFT (``rlvr-train sft``,
stopped at a held-out solve rate of 0.3), so rewards and lengths vary as in real use;
``--fresh`` uses the untrained preset instead (every response runs to the budget).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's packages, not another editable install
    sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "grpo_vs_trl_cpu.json"
KINDS = ("ours", "ours-defaults", "trl")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _need_trl() -> None:
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit("bench_grpo_vs_trl: trl is not installed in this interpreter "
                 f"({sys.executable}); run it with the TRL environment, e.g. "
                 "/root/.cache/rlvr-diagnostics/envs/trl-aef9f684d80b/bin/python benchmarks/bench_grpo_vs_trl.py")


# ----------------------------------------------------------------- profiling
class Phases:
    """Wall time per phase, by wrapping functions (``--profile`` only); nested calls are not
    double-counted: a model forward inside generation counts as generation."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}
        self.snap: dict[str, float] = {}  # the totals at the end of step 1 (warm-up, left out)
        self.depth = 0

    def wrap(self, owner, name: str, phase: str) -> None:
        fn = getattr(owner, name)
        ph = self

        def timed(*a, **k):
            if ph.depth:
                return fn(*a, **k)
            ph.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                ph.t[phase] = ph.t.get(phase, 0.0) + time.perf_counter() - t0
                ph.depth -= 1
        setattr(owner, name, timed)

    def forward_hooks(self, model) -> None:
        import torch

        state = {}

        def pre(_m, _a, _k=None):
            if not self.depth:
                state["t0"] = time.perf_counter()
                state["grad"] = torch.is_grad_enabled()
            self.depth += 1

        def post(_m, _a, _k=None, _o=None):
            self.depth -= 1
            if not self.depth:
                key = "forward (grad)" if state["grad"] else "forward (no grad)"
                self.t[key] = self.t.get(key, 0.0) + time.perf_counter() - state["t0"]

        model.register_forward_pre_hook(pre)
        model.register_forward_hook(post)

    def optimizer_hooks(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        st = {}

        def pre(*_):
            st["t0"] = time.perf_counter()

        def post(*_):
            self.t["optimizer"] = self.t.get("optimizer", 0.0) + time.perf_counter() - st["t0"]
        register_optimizer_step_pre_hook(pre)
        register_optimizer_step_post_hook(post)

    def common(self) -> None:
        import torch

        self.wrap(torch.Tensor, "backward", "backward")
        self.wrap(torch.nn.utils, "clip_grad_norm_", "clip grad")
        self.optimizer_hooks()


# ------------------------------------------------------------------- workers
def _worker_ours(a: argparse.Namespace, defaults: bool) -> dict:
    from simulations.grpo import rollout as ro_mod
    from simulations.grpo import trainer

    ph = Phases() if a.profile else None
    if ph:
        ph.common()
        ph.wrap(ro_mod, "sample", "generation")
        ph.wrap(ro_mod, "score", "reward")
        ph.wrap(trainer, "write_rollout_log", "logging")
        ph.wrap(trainer.ck.MetricsLog, "write", "logging")
        from simulations.grpo import models
        orig = models.load_policy

        def load_and_hook(*args, **kw):
            m, t = orig(*args, **kw)
            ph.forward_hooks(m)
            return m, t
        models.load_policy = load_and_hook
    ends: list[float] = []
    tokens: list[int] = []
    rewards: list[float] = []

    def cb(rec):
        ends.append(time.perf_counter())
        if ph and len(ends) == 1:
            ph.snap = dict(ph.t)
        tokens.append(int(rec.lengths.sum()))
        rewards.append(float(rec.rewards.mean()))
    with tempfile.TemporaryDirectory() as tmp:
        extra = {} if defaults else {"log_kl": False, "rollout_log": False}
        cfg = trainer.GRPOConfig(
            out=str(Path(tmp) / "run"), init=a.model, task=a.task, difficulty=a.difficulty, steps=a.steps,
            batch_size=a.batch_size, group_size=a.group_size, max_new_tokens=a.max_new_tokens, lr=a.lr,
            temperature=1.0, top_p=1.0, advantage="grpo", loss="ppo", aggregation="token-mean", eps_low=0.2,
            eps_high=0.2, kl_coef=0.0, ppo_epochs=1, minibatches=1, max_grad_norm=1.0, weight_decay=0.0,
            warmup_steps=0, checkpoint_every=10**9, log_every=10, seed=a.seed, device="cpu",
            threads=a.threads, quiet=True, **extra)
        t0 = time.perf_counter()
        trainer.train(cfg, callback=cb)
        total = time.perf_counter() - t0
        import torch
        threads_seen = torch.get_num_threads()
    return _summary(ends, tokens, rewards, total, threads_seen, ph, a.steps)


def _worker_trl(a: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset

    from rlvr_plumbing.runner import apply_threads
    from simulations.grpo import models, tasks

    apply_threads(a.threads)
    import trl
    from transformers import TrainerCallback

    task = tasks.get(a.task, a.difficulty)
    model, tok = models.load_policy(a.model, device="cpu")
    assert len(tok("12+3=")["input_ids"]) == 5, "the tokenizer adds special tokens to prompts"
    prompts = json.loads(Path(a.prompts).read_text())
    ds = Dataset.from_dict({"prompt": [p for p, _ in prompts], "answer": [s for _, s in prompts]})
    special = set(tok.all_special_ids)
    eos = tok.eos_token_id
    tokens: list[int] = []
    rewards: list[float] = []

    def verifier_reward(prompts, completions, completion_ids, answer, **_):
        ok = task.verify([tasks.Problem(p, s) for p, s in zip(prompts, answer)], completions)
        valid = [len(ids) > 0 and ids[-1] == eos and not (special & set(ids[:-1])) for ids in completion_ids]
        r = [float(bool(o) and v) for o, v in zip(ok, valid)]
        tokens.append(sum(len(ids) for ids in completion_ids))
        rewards.append(sum(r) / len(r))
        return r

    ends: list[float] = []
    ph = Phases() if a.profile else None

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())
            if ph and len(ends) == 1:
                ph.snap = dict(ph.t)

    with tempfile.TemporaryDirectory() as tmp:
        cfg = trl.GRPOConfig(
            output_dir=tmp, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
            save_strategy="no", disable_tqdm=True, seed=a.seed, max_steps=a.steps,
            per_device_train_batch_size=a.batch_size * a.group_size, num_generations=a.group_size,
            gradient_accumulation_steps=1, max_completion_length=a.max_new_tokens, temperature=1.0, top_p=1.0,
            top_k=0, learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.2, num_iterations=1, loss_type="dapo",
            scale_rewards="group", shuffle_dataset=False, logging_steps=10, log_completions=False,
            dataloader_num_workers=0)
        tr = trl.GRPOTrainer(model=model, reward_funcs=verifier_reward, args=cfg, train_dataset=ds,
                             processing_class=tok, callbacks=[Clock()])
        if ph:
            ph.common()
            ph.forward_hooks(tr.model)
            ph.wrap(type(tr.model), "generate", "generation")
            ph.wrap(trl.GRPOTrainer, "_calculate_rewards", "reward")
            ph.wrap(trl.GRPOTrainer, "log", "logging")
        t0 = time.perf_counter()
        tr.train()
        total = time.perf_counter() - t0
        settings = {k: str(getattr(cfg, k)) for k in ("optim", "loss_type", "scale_rewards", "lr_scheduler_type",
                                                      "steps_per_generation", "generation_batch_size")}
    out = _summary(ends, tokens, rewards, total, torch.get_num_threads(), ph, a.steps)
    out["trl_settings"] = settings
    return out


def _summary(ends, tokens, rewards, total, threads_seen, ph, steps) -> dict:
    if len(ends) != steps or len(tokens) != steps:
        raise RuntimeError(f"expected {steps} steps, saw {len(ends)} step ends and {len(tokens)} reward calls")
    span = ends[-1] - ends[0]
    n = steps - 1
    gaps = [b - c for b, c in zip(ends[1:], ends[:-1])]
    out = {"steps": steps, "steady_steps": n, "steady_seconds": span,
           "steps_per_s": n / span, "median_step_s": statistics.median(gaps),
           "generated_tokens_per_s": sum(tokens[1:]) / span, "generated_tokens_per_step": statistics.mean(tokens),
           "reward_mean": statistics.mean(rewards), "train_call_seconds": total,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "torch_threads": threads_seen}
    if ph is not None:
        per = {k: 1e3 * (v - ph.snap.get(k, 0.0)) / n for k, v in sorted(ph.t.items())}
        per["other"] = 1e3 * span / n - sum(per.values())
        per["step"] = 1e3 * span / n
        out["profile_ms_per_step"] = per
    return out


def _median_run(trials: list[dict]) -> dict:
    """Median over the repeats of every number (peak RSS: the largest); each repeat kept."""
    med = {k: statistics.median(t[k] for t in trials) for k in
           ("steps_per_s", "median_step_s", "generated_tokens_per_s", "generated_tokens_per_step", "reward_mean",
            "train_call_seconds", "process_seconds")}
    med["peak_rss_mb"] = max(t["peak_rss_mb"] for t in trials)
    med["torch_threads"] = sorted({t["torch_threads"] for t in trials})
    if "trl_settings" in trials[0]:
        med["trl_settings"] = trials[0]["trl_settings"]
    med["repeats"] = trials
    return med


# ---------------------------------------------------------------------- main
def _prepare(a: argparse.Namespace, tmp: Path) -> tuple[str, str]:
    """(model dir, prompts file): the common starting weights and the prompts in order."""
    import numpy as np

    from simulations.grpo import models, sft, tasks

    task = tasks.get(a.task, a.difficulty)
    if a.init:
        model_dir = a.init
    elif a.fresh:
        from simulations.grpo import checkpoint as ck
        model, tok = models.prepare_policy(task, preset="tiny-cpu", seed=a.seed)
        model_dir = str(tmp / "fresh")
        ck.save_model_dir(Path(model_dir), model, tok, json_files={"task.json": task.spec()})
    else:
        t0 = time.perf_counter()
        model_dir = str(sft.train_sft(sft.SFTConfig(out=str(tmp / "sft"), task=a.task, difficulty=a.difficulty,
                                                    preset="tiny-cpu", seed=a.seed, threads=1, quiet=True)))
        print(f"SFT init: {model_dir} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rng = np.random.default_rng([a.seed, 2])  # the generator our trainer draws its prompts from
    probs = [p for _ in range(a.steps) for p in task.sample(rng, a.batch_size)]
    pfile = tmp / "prompts.json"
    pfile.write_text(json.dumps([[p.prompt, p.answer] for p in probs]))
    return model_dir, str(pfile)


def _run_worker(kind: str, threads: int, a: argparse.Namespace, model_dir: str, prompts: str, tmp: Path,
                profile: bool = False) -> dict:
    res = tmp / f"{kind}-{threads}.json"
    cmd = [sys.executable, __file__, "--worker", kind, "--model", model_dir, "--prompts", prompts,
           "--result", str(res), "--threads", str(threads), "--steps", str(a.steps), "--task", a.task,
           "--difficulty", str(a.difficulty), "--batch-size", str(a.batch_size), "--group-size", str(a.group_size),
           "--max-new-tokens", str(a.max_new_tokens), "--lr", str(a.lr), "--seed", str(a.seed)]
    if profile:
        cmd.append("--profile")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
    before = _load()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"bench_grpo_vs_trl: the {kind} worker failed (exit {proc.returncode})")
    out = json.loads(res.read_text())
    out["load_average_before"], out["load_average_after"] = before, _load()
    out["process_seconds"] = wall  # the whole subprocess: imports, loading, set-up, every step
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--task", default="arith")
    ap.add_argument("--difficulty", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=16, help="prompts per step (B)")
    ap.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="[the task's longest answer + 2]")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each trainer (interleaved); medians reported")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="start both from this model directory")
    ap.add_argument("--fresh", action="store_true", help="untrained tiny-cpu preset instead of the SFT init")
    ap.add_argument("--profile", action="store_true",
                    help="one more, instrumented run of each: the time per step of each phase")
    ap.add_argument("--no-defaults-row", action="store_true",
                    help="skip the run of our trainer with its default logging (KL to the initial policy, rollout log)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--prompts", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.steps < 2:
        ap.error("--steps must be >= 2 (the first step is warm-up)")
    _need_trl()
    from simulations.grpo import tasks

    task = tasks.get(a.task, a.difficulty)
    a.difficulty = task.difficulty
    a.max_new_tokens = a.max_new_tokens or task.max_answer_len() + 2

    if a.worker:
        a.threads = a.threads[0]
        if a.worker == "trl":
            out = _worker_trl(a)
        else:
            out = _worker_ours(a, defaults=a.worker == "ours-defaults")
        Path(a.result).write_text(json.dumps(out))
        return 0

    import platform

    import torch
    import transformers
    import trl

    load_start = _load()
    print(f"load average at start: {load_start}  ({os.cpu_count()} cores, {platform.processor() or 'cpu'})",
          flush=True)
    kinds = [k for k in KINDS if not (a.no_defaults_row and k == "ours-defaults")]
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        model_dir, prompts = _prepare(a, tmp)
        trials: dict[str, list[dict]] = {}
        for rep in range(a.repeats):  # interleaved, so that a change of load hits every kind alike
            for th in a.threads:
                for kind in kinds:
                    r = _run_worker(kind, th, a, model_dir, prompts, tmp)
                    trials.setdefault(f"{kind}/threads={th}", []).append(r)
                    print(f"  [{rep + 1}/{a.repeats}] {kind:14s} threads={th}: {r['steps_per_s']:6.2f} steps/s  "
                          f"{r['generated_tokens_per_s']:8.0f} gen tokens/s  peak RSS {r['peak_rss_mb']:6.0f} MB  "
                          f"reward {r['reward_mean']:.3f}  load {r['load_average_before']} -> "
                          f"{r['load_average_after']}", flush=True)
        runs = {k: _median_run(v) for k, v in trials.items()}
        if a.profile:  # one more run of each, instrumented; the timings above are not
            for th in a.threads:
                for kind in kinds:
                    r = _run_worker(kind, th, a, model_dir, prompts, tmp, profile=True)
                    runs[f"{kind}/threads={th}"]["profile"] = {
                        "ms_per_step": r["profile_ms_per_step"], "steps_per_s": r["steps_per_s"],
                        "load_average_before": r["load_average_before"], "load_average_after": r["load_average_after"]}
    load_end = _load()
    settings = {
        "task": a.task, "difficulty": a.difficulty, "model": "tiny-cpu (Qwen2, 254k params)",
        "init": a.init or ("fresh" if a.fresh else "our SFT to held-out solve rate 0.3"),
        "prompts_per_step_B": a.batch_size, "group_size_G": a.group_size,
        "completions_per_step": a.batch_size * a.group_size, "max_new_tokens": a.max_new_tokens,
        "temperature": 1.0, "top_p": 1.0, "top_k": "none", "lr": a.lr, "lr_schedule": "constant",
        "optimizer": "AdamW(0.9, 0.999, eps 1e-8, wd 0)", "max_grad_norm": 1.0, "clip_eps": [0.2, 0.2],
        "loss": "PPO-clip, token-mean over the step's 128 completions (ours ppo/token-mean; TRL dapo)",
        "updates_per_step": "1 epoch, 1 minibatch (TRL: num_iterations 1, gradient_accumulation_steps 1)",
        "kl": "none (ours kl_coef 0, log_kl off in 'ours'; TRL beta 0)", "steps": a.steps, "seed": a.seed,
        "threads": a.threads, "device": "cpu (TRL use_cpu=True, no vLLM, float32, no gradient checkpointing)",
    }
    differences = {
        "advantage": "ours 'grpo' (r - mean)/std per group from rlvr_theory.advantages; TRL scale_rewards='group': "
                     "(r - mean)/(std + 1e-4), std unbiased",
        "old_logprobs": "ours: a separate no-grad forward pass before the update (also gives the logged entropy "
                        "and the schedules' signal); TRL: skipped when generation and update are aligned "
                        "(old = current.detach())",
        "optimizer_impl": "ours torch.optim.AdamW (foreach); TRL optim='adamw_torch_fused'",
        "logging": "ours: metrics rows every step, files every 10 steps, rollout log off ('ours'); TRL: "
                   "logging_steps=10, log_completions=False",
        "ours-defaults": "our trainer with its defaults log_kl=True (a frozen reference copy and one more forward "
                         "pass per step for the logged KL) and rollout_log=True (one parquet file per step)",
        "entropy": "both compute per-token entropy for logging",
    }
    ratios = {}
    for th in a.threads:
        o, t = runs.get(f"ours/threads={th}"), runs.get(f"trl/threads={th}")
        if o and t:
            ratios[f"threads={th}"] = {
                "steps_per_s_ours_over_trl": o["steps_per_s"] / t["steps_per_s"],
                "tokens_per_s_ours_over_trl": o["generated_tokens_per_s"] / t["generated_tokens_per_s"],
                "peak_rss_ours_over_trl": o["peak_rss_mb"] / t["peak_rss_mb"]}
    print(f"load average at end: {load_end}")
    print(f"medians of {a.repeats} run(s):")
    for k, r in runs.items():
        print(f"  {k:24s} {r['steps_per_s']:6.2f} steps/s  {r['generated_tokens_per_s']:8.0f} gen tokens/s  "
              f"peak RSS {r['peak_rss_mb']:5.0f} MB  (whole process {r['process_seconds']:.1f} s)")
    for k, v in ratios.items():
        print(f"ratio ours / TRL ({k}): steps/s {v['steps_per_s_ours_over_trl']:.2f}x, "
              f"generated tokens/s {v['tokens_per_s_ours_over_trl']:.2f}x, peak RSS {v['peak_rss_ours_over_trl']:.2f}x")
    if a.profile:
        print("ms per step by phase:")
        for k, r in runs.items():
            print(f"  {k:24s} " + ", ".join(f"{p} {v:.1f}" for p, v in r["profile"]["ms_per_step"].items()))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": f"{os.cpu_count()} cores",
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "trl": trl.__version__},
           "load_average_start": load_start, "load_average_end": load_end, "settings": settings,
           "differences": differences, "runs": runs, "ratios": ratios}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:  # earlier results in the file are kept (newest first), each with its load average
        old = json.loads(out.read_text())
        earlier = [{k: v for k, v in old.items() if k != "earlier"}, *old.get("earlier", [])]
    except (OSError, ValueError, AttributeError):
        earlier = []
    doc["earlier"] = earlier
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
