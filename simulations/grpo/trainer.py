"""GRPO training loop (read top to bottom, like nanoGPT / CleanRL).

One step (FADE (000) Alg. 1-2; F-GRPO (002) Sec. 2.2):

1. draw ``B`` training prompts; sample ``G`` rollouts each at temperature 1, top-p 1, with a
   KV cache (:mod:`.rollout`);
2. rewards ``r ∈ {R_w, R_c}`` from the task's verifier, shape ``[B, G]`` (002 Eq. 1);
3. old log-probs and token entropies of the sampled tokens (no gradient), and reference
   log-probs when a KL to the initial policy is penalised or logged;
4. advantages ``A = adv(r)`` from :mod:`rlvr_theory.advantages` — or from a schedule of
   :mod:`rlvr_theory.schedules`, first updated with this batch's mean reward and entropy
   (FADE Alg. 2 lines 4-8) — per group, and per batch for batch-level families; masses
   ``M_S, M_F`` of every group from :func:`rlvr_theory.masses.of_group`;
5. ``μ`` epochs over ``minibatches`` shuffled minibatches: the loss of :mod:`.losses`
   (PPO-clip / CISPO / GRPO-N, one of four aggregations, optional KL and entropy terms),
   AdamW with linear warm-up, gradient clipping;
6. metrics to ``metrics.jsonl`` / ``metrics.csv``; every ``checkpoint_every`` steps (and at
   the end) ``checkpoint-{step:06d}/`` with the model (``save_pretrained``, safetensors),
   tokenizer, task and trainer state, written to a temporary name and renamed.

``resume=True`` restarts from the last complete checkpoint of ``out``: model, optimizer,
learning-rate schedule, the numpy and torch generators, the advantage schedule and the
metrics rows up to that step, so that on CPU the resumed run is bit-for-bit the run that
was not interrupted (tested).  See ``docs/grpo.md``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr_theory import masses as _masses
from rlvr_theory.advantages import Advantage

from . import checkpoint as ck
from . import models, rollout, tasks
from .config import (SCHEDULES, check_float, check_int, check_out_dir, make_advantage, make_schedule)
from .losses import AGGREGATIONS, LOSSES, policy_loss

__all__ = ["GRPOConfig", "StepRecord", "train", "METRIC_COLUMNS", "RESUMABLE_CHANGES"]

#: the per-step columns of metrics.jsonl / metrics.csv, in order (more follow)
METRIC_COLUMNS = ("step", "reward_mean", "solve_rate", "frac_all_correct", "frac_all_wrong", "m_S", "m_F",
                  "entropy", "clip_frac_low", "clip_frac_high", "kl", "grad_norm", "head_delta_norm",
                  "response_len_mean", "step_time", "tokens_per_s", "alpha", "delta",
                  "m_ratio", "entropy_nll", "loss", "pg_loss", "lr", "adv_abs_mean", "rollout_time")

#: settings that may differ between a run and its resumption
RESUMABLE_CHANGES = ("steps", "checkpoint_every", "log_every", "quiet", "threads", "resume")

#: PPO / DAPO defaults (FADE App. 11: 0.2/0.2) and CISPO's (F-GRPO App. H.2: 1.0/5.0)
_DEFAULT_EPS = {"ppo": (0.2, 0.2), "grpo-n": (0.2, 0.2), "cispo": (1.0, 5.0)}


@dataclass
class GRPOConfig:
    """Settings of :func:`train` (CLI: ``rlvr-train grpo``); defaults in brackets in ``--help``."""

    out: str
    init: str | None = None
    preset: str = "tiny-cpu"
    task: str = "arith"
    difficulty: int | None = None
    heldout_fraction: float = 0.1
    split_seed: int = 0
    advantage: str = "grpo"
    schedule: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    reward_values: tuple[float, float] = (0.0, 1.0)
    steps: int = 200
    batch_size: int = 16
    group_size: int = 8
    max_new_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    loss: str = "ppo"
    aggregation: str = "token-mean"
    eps_low: float | None = None
    eps_high: float | None = None
    ppo_epochs: int = 1
    minibatches: int = 1
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    log_kl: bool = True
    checkpoint_every: int = 50
    log_every: int = 10
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    quiet: bool = False
    resume: bool = False

    # ------------------------------------------------------------ validation
    def validate(self) -> tuple[tasks.Task, Advantage | None]:
        """Refuse a bad configuration before any work; returns ``(task, fixed advantage or None)``."""
        if self.task not in tasks.names():
            raise ValueError(f"task: unknown task {self.task!r}; allowed: {', '.join(tasks.names())}")
        tasks.check_task(tasks.registry()[self.task])  # a verifier before anything else
        task = tasks.get(self.task, self.difficulty, heldout_fraction=self.heldout_fraction,
                         split_seed=self.split_seed)
        rv = self.reward_values
        if not (isinstance(rv, (tuple, list)) and len(rv) == 2):
            raise ValueError(f"reward_values must be a pair (R_w, R_c) with R_c > R_w, got {rv!r}")
        check_int("group_size", self.group_size, 2)
        for name, low in (("steps", 1), ("batch_size", 1), ("ppo_epochs", 1), ("minibatches", 1),
                          ("warmup_steps", 0), ("checkpoint_every", 1), ("log_every", 1), ("seed", 0)):
            check_int(name, getattr(self, name), low)
        adv: Advantage | None = None
        if self.schedule is not None:
            if self.schedule not in SCHEDULES:
                raise ValueError(f"schedule: unknown schedule {self.schedule!r}; allowed: {', '.join(SCHEDULES)}")
            make_schedule(self.schedule, dict(self.params), tuple(rv), steps=self.steps)
        else:
            adv = make_advantage(self.advantage, dict(self.params), tuple(rv))
            if self.group_size < adv.min_group_size():
                raise ValueError(f"group_size must be an integer >= {adv.min_group_size()} for {adv!r}, "
                                 f"got {self.group_size}")
        n = self.batch_size * self.group_size
        if n % self.minibatches:
            raise ValueError(f"minibatches must divide batch_size * group_size = {n}, got {self.minibatches}")
        if self.max_new_tokens is not None:
            check_int("max_new_tokens", self.max_new_tokens, 1)
        check_float("temperature", self.temperature, 0, low_open=True)
        check_float("top_p", self.top_p, 0, 1, low_open=True)
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        for name in ("eps_low", "eps_high"):
            if getattr(self, name) is not None:
                check_float(name, getattr(self, name), 0)
        check_float("lr", self.lr, 0, low_open=True)
        for name in ("weight_decay", "kl_coef", "entropy_coef"):
            check_float(name, getattr(self, name), 0)
        check_float("max_grad_norm", self.max_grad_norm, 0, low_open=True)
        if self.threads is not None:
            check_int("threads", self.threads, 1)
        if self.init is None and self.preset not in models.PRESETS:
            raise ValueError(f"preset must be one of {', '.join(models.PRESETS)}, got {self.preset!r}")
        if self.init is not None:
            models.check_model_dir(self.init)
        models.resolve_device(self.device)
        check_out_dir(self.out, resume=self.resume)
        return task, adv

    @property
    def eps(self) -> tuple[float, float]:
        """``(ε_low, ε_high)`` with the loss's defaults filled in."""
        lo, hi = _DEFAULT_EPS[self.loss]
        return (lo if self.eps_low is None else self.eps_low, hi if self.eps_high is None else self.eps_high)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["reward_values"] = list(self.reward_values)
        return d


@dataclass
class StepRecord:
    """What one step computed, handed to ``callback(record)`` (tests, notebooks)."""

    step: int
    rewards: np.ndarray            # [B, G]
    advantages: np.ndarray         # [B, G], as fed to the loss
    advantage: Advantage           # the advantage function used this step
    lengths: np.ndarray            # [B, G] response lengths
    metrics: dict[str, Any]


# ------------------------------------------------------------------ helpers
def _rng_state(np_rng: np.random.Generator, gen: torch.Generator) -> dict[str, Any]:
    return {"numpy": np_rng.bit_generator.state, "torch_generator": gen.get_state(),
            "torch_cpu": torch.get_rng_state()}


def _head_delta_norm(model: Any, head0: torch.Tensor) -> float:
    """‖W_head − W_head(0)‖_F."""
    return float(torch.linalg.vector_norm(models.output_head(model).detach() - head0))


def _schedule_kwargs(cfg: GRPOConfig, H0: float | None) -> dict[str, Any]:
    kw = dict(cfg.params)
    if cfg.schedule == "fade" and "H0" not in kw:
        kw["H0"] = H0
    return kw


def _prepare_out(cfg: GRPOConfig, out: Path) -> tuple[int, Path] | None:
    """Create / check the run directory; on resume return the checkpoint to restart from."""
    saved = out / "run_config.json"
    if cfg.resume and saved.is_file():
        old = ck.read_json(saved)
        new = cfg.to_json()
        diff = [k for k in new if k not in RESUMABLE_CHANGES and old.get(k) != new[k]]
        if diff:
            k = diff[0]
            raise ValueError(f"resume: setting {k!r} differs from the run in {str(out)!r} "
                             f"({old.get(k)!r} there, {new[k]!r} now); only {', '.join(RESUMABLE_CHANGES)} may change")
        ck.clean_partial(out)
        return ck.latest_checkpoint(out)
    if cfg.resume and out.is_dir() and any(out.iterdir()):
        raise ValueError(f"resume: {str(out)!r} is not a GRPO run directory (no run_config.json)")
    out.mkdir(parents=True, exist_ok=True)
    return None


# --------------------------------------------------------------------- train
def train(cfg: GRPOConfig, *, callback: Callable[[StepRecord], None] | None = None) -> Path:
    """Run GRPO; returns the run directory.  ``callback(record)`` runs after every step
    (after that step's checkpoint); an exception from it stops the run (tests use this to
    simulate a crash).  ``cfg.threads`` applies for the duration of the call."""
    task, fixed_adv = cfg.validate()
    with models.torch_threads(cfg.threads):
        return _train(cfg, task, fixed_adv, callback)


def _train(cfg: GRPOConfig, task: tasks.Task, fixed_adv: Advantage | None,
           callback: Callable[[StepRecord], None] | None) -> Path:
    out = Path(cfg.out)
    resume_from = _prepare_out(cfg, out)
    dev = models.resolve_device(cfg.device)
    B, G = cfg.batch_size, cfg.group_size
    Rw, Rc = (float(v) for v in cfg.reward_values)
    eps_low, eps_high = cfg.eps
    max_new = cfg.max_new_tokens or task.max_answer_len() + 2

    # ---- policy, reference, initial head -----------------------------------
    model, tok = models.prepare_policy(task, init=cfg.init, preset=cfg.preset, seed=cfg.seed, device=dev)
    base_dir = Path(cfg.init) if cfg.init else out / "init"
    if cfg.init is None and not (base_dir / "config.json").is_file():
        ck.save_model_dir(base_dir, model, tok, json_files={"task.json": task.spec()})
    ref = None
    if cfg.kl_coef > 0 or cfg.log_kl:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    head0 = models.output_head(model).detach().clone()
    if not (out / "run_config.json").is_file():
        ck.write_json(out / "run_config.json", cfg.to_json())

    # ---- optimizer, randomness, schedule -----------------------------------
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warm = max(cfg.warmup_steps, 1)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    np_rng = np.random.default_rng([cfg.seed, 2])
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # nothing should draw from it; seeded anyway
    schedule = None
    schedule_kw: dict[str, Any] | None = None
    log = ck.MetricsLog(out, METRIC_COLUMNS)
    start = 0

    if resume_from is not None:  # ---- resume: restore everything -----------
        start, path = resume_from
        state = ck.read_json(path / "trainer_state.json")
        # map to the CPU: RNG states must be CPU tensors; the optimizer moves its state to the params
        blobs = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
        resumed, _ = models.load_policy(path, device=dev, what="resume")
        model.load_state_dict(resumed.state_dict())
        del resumed
        opt.load_state_dict(blobs["optimizer"])
        lr_sched.load_state_dict(blobs["lr_scheduler"])
        np_rng.bit_generator.state = state["rng"]["numpy"]
        gen.set_state(blobs["torch_generator"])
        torch.set_rng_state(blobs["torch_cpu"])
        if cfg.schedule is not None:
            schedule_kw = state["schedule_kwargs"]
            schedule = make_schedule(cfg.schedule, schedule_kw, (Rw, Rc), steps=cfg.steps)
            schedule.load_state_dict(state["schedule_state"])
        log.load(max_step=start)
        if len(log) != start:
            raise ValueError(f"resume: metrics.jsonl in {str(out)!r} has {len(log)} rows up to step {start}, "
                             f"expected {start}")
    elif cfg.resume:
        log.write()

    def save_checkpoint(step: int) -> None:
        rng = _rng_state(np_rng, gen)
        state = {"step": step, "rng": {"numpy": rng["numpy"]}, "config": cfg.to_json(),
                 "schedule": cfg.schedule, "schedule_kwargs": schedule_kw,
                 "schedule_state": schedule.state_dict() if schedule is not None else None,
                 "base": str(base_dir)}
        blobs = {"optimizer": opt.state_dict(), "lr_scheduler": lr_sched.state_dict(),
                 "torch_generator": rng["torch_generator"], "torch_cpu": rng["torch_cpu"]}

        def extra(tmp: Path) -> None:  # trainer_state.json last: it marks a complete checkpoint
            torch.save(blobs, tmp / "trainer_state.pt")
            ck.write_json(tmp / "trainer_state.json", state)
        ck.save_model_dir(out / ck.checkpoint_name(step), model, tok,
                          json_files={"task.json": task.spec()}, extra=extra)

    from tqdm.auto import tqdm

    bar = tqdm(range(start + 1, cfg.steps + 1), desc="grpo", disable=cfg.quiet, leave=False,
               initial=start, total=cfg.steps)
    for step in bar:
        t0 = time.perf_counter()

        # 1. B prompts × G rollouts (temperature, top-p, KV cache)
        problems = task.sample(np_rng, B)
        ids, pmask = rollout.encode_prompts(tok, [p.prompt for p in problems], repeat=G, device=dev)
        ro = rollout.sample(model, ids, pmask, max_new_tokens=max_new, eos_id=tok.eos_token_id,
                            pad_id=tok.pad_token_id, temperature=cfg.temperature, top_p=cfg.top_p,
                            generator=gen)
        t_rollout = time.perf_counter() - t0

        # 2. rewards from the verifier, [B, G]
        correct, _ = rollout.score(task, [p for p in problems for _ in range(G)], tok, ro)
        rewards = np.where(correct, Rc, Rw).reshape(B, G)
        lengths = ro.lengths.cpu().numpy().reshape(B, G)
        mask = ro.response_mask.float()

        # 3. old log-probs and entropies (no gradient); reference log-probs
        with torch.no_grad():
            old_logp, ent_tok = rollout.token_logprobs(model, ro, temperature=cfg.temperature)
            ref_logp = rollout.token_logprobs(ref, ro, temperature=cfg.temperature,
                                              with_entropy=False)[0] if ref is not None else None
        entropy = float((ent_tok * mask).sum() / mask.sum())
        # FADE Alg. 2 line 4: H_t = (1/|B|) Σ_i (1/T_i) Σ_t −log π(a_t)
        entropy_nll = float(((-old_logp * mask).sum(-1) / mask.sum(-1)).mean())

        # 4. advantages from the registry (or a schedule fed this batch's signals) and masses
        if cfg.schedule is not None:
            if schedule is None:  # first step: FADE's Ĥ starts at the initial entropy H0 (Alg. 2 line 1)
                schedule_kw = _schedule_kwargs(cfg, entropy_nll)
                schedule = make_schedule(cfg.schedule, schedule_kw, (Rw, Rc), steps=cfg.steps)
            adv_fn = schedule.update(reward_mean=float(rewards.mean()), entropy=entropy_nll, step=step)
        else:
            adv_fn = fixed_adv
        len_arg = lengths if adv_fn.uses_lengths else None
        A = adv_fn(rewards, lengths=len_arg)
        m = _masses.of_group(adv_fn, rewards, lengths=len_arg)
        adv_t = torch.as_tensor(A.reshape(-1), dtype=torch.float32, device=dev)

        # 5. μ epochs of minibatch updates
        model.train()
        n_rows = B * G
        mb = n_rows // cfg.minibatches
        stats, grad_norms, losses = [], [], []
        for _epoch in range(cfg.ppo_epochs):
            order = torch.randperm(n_rows, generator=gen, device=dev) if cfg.minibatches > 1 \
                else torch.arange(n_rows, device=dev)
            for k in range(cfg.minibatches):
                idx = order[k * mb:(k + 1) * mb]
                sub = ro.select(idx)
                logp, ent = rollout.token_logprobs(model, sub, temperature=cfg.temperature,
                                                   with_entropy=cfg.entropy_coef > 0)
                loss, st = policy_loss(
                    logp, old_logp[idx], adv_t[idx], sub.response_mask, loss=cfg.loss,
                    aggregation=cfg.aggregation, eps_low=eps_low, eps_high=eps_high, max_new_tokens=max_new,
                    ref_logp=None if ref_logp is None else ref_logp[idx], kl_coef=cfg.kl_coef,
                    entropy=ent, entropy_coef=cfg.entropy_coef)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)))
                opt.step()
                lr_sched.step()
                stats.append(st)
                losses.append(float(loss.detach()))

        # 6. metrics and checkpoint
        step_time = time.perf_counter() - t0
        n_tok = int(lengths.sum())
        X = correct.reshape(B, G).sum(-1)
        alpha = getattr(schedule, "alpha", None) if schedule is not None else adv_fn.params.get("alpha")
        delta = getattr(schedule, "delta", None) if schedule is not None else adv_fn.params.get("delta")
        m_S, m_F = float(m.m_S.mean()), float(m.m_F.mean())
        row = {
            "step": step, "reward_mean": float(rewards.mean()), "solve_rate": float(correct.mean()),
            "frac_all_correct": float((X == G).mean()), "frac_all_wrong": float((X == 0).mean()),
            "m_S": m_S, "m_F": m_F, "entropy": entropy,
            "clip_frac_low": float(np.mean([s.clip_frac_low for s in stats])),
            "clip_frac_high": float(np.mean([s.clip_frac_high for s in stats])),
            "kl": float(np.mean([s.kl for s in stats])) if ref_logp is not None else None,
            "grad_norm": float(np.mean(grad_norms)), "head_delta_norm": _head_delta_norm(model, head0),
            "response_len_mean": float(lengths.mean()), "step_time": step_time,
            "tokens_per_s": n_tok / step_time, "alpha": alpha, "delta": delta,
            "m_ratio": m_S / m_F if m_F != 0 else None, "entropy_nll": entropy_nll,
            "loss": float(np.mean(losses)), "pg_loss": float(np.mean([s.pg_loss for s in stats])),
            "lr": lr_sched.get_last_lr()[0], "adv_abs_mean": float(np.abs(A).mean()), "rollout_time": t_rollout,
        }
        log.append(row)
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", H=f"{entropy:.2f}")
        is_ckpt = step % cfg.checkpoint_every == 0 or step == cfg.steps
        if is_ckpt or step % cfg.log_every == 0:
            log.write()  # before the checkpoint: metrics always cover the last checkpoint
        if is_ckpt:
            save_checkpoint(step)
        if callback is not None:
            callback(StepRecord(step, rewards, A, adv_fn, lengths, row))
    bar.close()
    log.write()
    return out
