"""Supervised warm start on task demonstrations, stopped at a chosen solve rate.

Each step draws ``batch_size`` training problems and minimises the token-mean cross-entropy
of ``answer + <eos>`` given the prompt (prompt tokens carry no loss)::

    L_SFT = −(1/Σ_i T_i) Σ_i Σ_{t ≤ T_i} log π_θ(y_{i,t} | x_i, y_{i,<t})

Every ``eval_every`` steps the held-out solve rate is measured *by sampling* (temperature 1,
``eval_samples`` responses on each of ``eval_problems`` fixed held-out problems — the rate
GRPO will see); training stops at the first evaluation with solve rate ``>= target_solve_rate``
(FADE starts RL near 0.3), or after ``max_steps``.  The model is saved as ``OUT/final/``
(``save_pretrained`` safetensors + tokenizer + ``task.json`` + ``sft.json``), the base
checkpoint of GRPO runs and of the checkpoint diff.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr_plumbing.io import atomic_dir
from rlvr_plumbing.runtime import resolve_device, run_metadata

from . import checkpoint as ck
from . import models, rollout, tasks
from .config import SFTConfig

__all__ = ["SFTConfig", "train_sft", "SFT_COLUMNS"]

SFT_COLUMNS = ("step", "loss", "lr", "solve_rate", "step_time")


def _teacher_forced(tokenizer: Any, problems: list[tasks.Problem], device: torch.device) -> rollout.Rollouts:
    """Prompts (left-padded) and ``answer + eos`` (right-padded) as a :class:`Rollouts`."""
    p_ids, p_mask = rollout.encode_prompts(tokenizer, [p.prompt for p in problems], device=device)
    enc = tokenizer([p.answer for p in problems], add_special_tokens=False, padding=True, padding_side="right",
                    return_tensors="pt")
    n_ans = enc["attention_mask"].sum(-1)
    pad = torch.full((len(problems), 1), tokenizer.pad_token_id, dtype=torch.long)
    r_ids = torch.cat([enc["input_ids"], pad], dim=1)
    r_ids.scatter_(1, n_ans[:, None], tokenizer.eos_token_id)          # eos right after each answer
    r_mask = (torch.arange(r_ids.shape[1])[None, :] <= n_ans[:, None]).long()
    done = torch.ones(len(problems), dtype=torch.bool)
    return rollout.Rollouts(p_ids, p_mask, r_ids.to(device), r_mask.to(device), done.to(device))


@torch.no_grad()
def sampled_solve_rate(model: Any, tokenizer: Any, task: tasks.Task, problems: list[tasks.Problem], *,
                       samples: int, max_new_tokens: int, generator: torch.Generator) -> float:
    """Mean success of ``samples`` temperature-1 responses on each problem."""
    dev = next(model.parameters()).device
    ids, mask = rollout.encode_prompts(tokenizer, [p.prompt for p in problems], repeat=samples, device=dev)
    ro = rollout.sample(model, ids, mask, max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id,
                        pad_id=tokenizer.pad_token_id, generator=generator)
    rep = [p for p in problems for _ in range(samples)]
    ok, _ = rollout.score(task, rep, tokenizer, ro)
    return float(ok.mean())


def train_sft(cfg: SFTConfig) -> Path:
    """Run SFT; returns the path of ``OUT/final``.  Metrics in ``OUT/metrics.{jsonl,csv}``.
    ``cfg.threads`` applies for the duration of the call.

    The whole output directory is built in a temporary sibling and renamed at the end
    (:func:`rlvr_plumbing.io.atomic_dir`): a run that fails or is killed leaves nothing under
    ``OUT``.  A diverging run (a non-finite loss, gradient or weight) stops with a message
    naming the step and ``--lr``.
    """
    task = cfg.validate()
    with models.torch_threads(cfg.threads):
        atomic_dir(cfg.out, lambda tmp: _train_sft(cfg, task, tmp))
    return Path(cfg.out) / "final"


def _train_sft(cfg: SFTConfig, task: tasks.Task, out: Path) -> Path:
    dev = resolve_device(cfg.device)
    ck.write_json(out / "run_config.json", {"kind": "sft", **run_metadata(
        cfg.to_json(), seed=cfg.seed, device=dev, threads=torch.get_num_threads())})

    model, tok = models.prepare_policy(task, init=cfg.init, preset=cfg.preset, seed=cfg.seed, device=dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warm = max(cfg.warmup_steps, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    rng = np.random.default_rng([cfg.seed, 1])
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    eval_set = task.heldout_set(cfg.eval_problems, seed=cfg.seed)
    max_new = task.max_answer_len() + 2
    log = ck.MetricsLog(out, SFT_COLUMNS)

    from tqdm.auto import tqdm

    bar = tqdm(range(1, cfg.max_steps + 1), desc="sft", disable=cfg.quiet, leave=False)
    solve = float("nan")
    step = 0
    for step in bar:
        t0 = time.perf_counter()
        batch = _teacher_forced(tok, task.sample(rng, cfg.batch_size), dev)
        logp, _ = rollout.token_logprobs(model, batch, with_entropy=False)
        mask = batch.response_mask.float()
        loss = -(logp * mask).sum() / mask.sum()
        loss_value = float(loss.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        bad = ("the loss", loss_value) if not math.isfinite(loss_value) else \
            ("the gradient norm", grad_norm) if not math.isfinite(grad_norm) else None
        if bad is None:
            opt.step()
            sched.step()
            name = models.first_non_finite(model)
            bad = None if name is None else (f"weight {name!r} after the update", "not finite")
        if bad is not None:
            _diverged(cfg, step, f"{bad[0]} is {bad[1]}")
        row = {"step": step, "loss": loss_value, "lr": sched.get_last_lr()[0], "solve_rate": None}
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            try:
                solve = sampled_solve_rate(model, tok, task, eval_set, samples=cfg.eval_samples,
                                           max_new_tokens=max_new, generator=gen)
            except FloatingPointError as err:
                _diverged(cfg, step, str(err))
            row["solve_rate"] = solve
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", solve=f"{solve:.2f}")
        row["step_time"] = time.perf_counter() - t0
        log.append(row)
        if row["solve_rate"] is not None and solve >= cfg.target_solve_rate:
            break
    bar.close()
    log.write()
    info = {"steps": step, "heldout_solve_rate": solve, "target_solve_rate": cfg.target_solve_rate,
            "eval_problems": len(eval_set), "eval_samples": cfg.eval_samples,
            "n_params": models.n_params(model), "preset": None if cfg.init else cfg.preset, "init": cfg.init}
    final = ck.save_model_dir(out / "final", model, tok, json_files={"task.json": task.spec(), "sft.json": info})
    ck.write_json(out / "sft.json", info)
    return final


def _diverged(cfg: SFTConfig, step: int, what: str) -> None:
    raise ValueError(f"diverged at step {step}: {what}; the run stopped and wrote nothing. The likely cause is "
                     f"the learning rate: lower --lr (now {cfg.lr:g}) or --max-grad-norm (now {cfg.max_grad_norm:g})")
