"""GRPO training loop (read top to bottom, like nanoGPT / CleanRL).

One step (FADE Alg. 1-2; F-GRPO Sec. 2.2):

1. draw ``B`` training prompts; sample ``G`` rollouts each at temperature 1, top-p 1, with a
   KV cache (:mod:`.rollout`).  With ``dynamic_sampling`` (DAPO, Yu et al. 2025, Sec. 3.2) the
   groups whose ``G`` rewards are all equal carry no signal: they are dropped and as many new
   prompts drawn, for at most ``max_refill_rounds`` more rounds; at the cap the batch is
   completed with the first groups without signal that were drawn.  With ``drop_easiest > 0``
   (Over-Sharpening App. I's filtering baseline) the prompts come from a fixed training set of
   ``filter_queries`` problems drawn before training, less the ``drop_easiest`` share that the
   initial policy solves most often (:func:`estimate_solve_rates`, :func:`easiest`);
2. rewards ``r ∈ {R_w, R_c}`` from the task's verifier, shape ``[B, G]`` (F-GRPO Eq. 1);
3. old log-probs and token entropies of the sampled tokens, and reference log-probs when a
   KL to the initial policy is penalised or logged (no gradient); with one epoch of one
   minibatch (the default) the old log-probs and entropies are those of the update's own
   forward pass, detached (on CPU bit for bit what a separate pass gives; one forward pass
   fewer, as TRL does when generation and update are aligned);
4. advantages ``A = adv(r)`` from the run's :class:`rlvr_theory.policy.Policy`: a family of
   :mod:`rlvr_theory.advantages`, or a schedule of :mod:`rlvr_theory.schedules` that first
   advances with this batch's mean reward, entropy and step (:meth:`~rlvr_theory.policy.Policy.advance`,
   FADE Alg. 2 lines 4-8; the Policy is built at the first step, whose entropy is ``H0`` unless
   ``H0`` is typed) — per group, and per batch for batch-level families; masses ``M_S, M_F`` of
   every group from :func:`rlvr_theory.masses.of_group`;
5. ``μ`` epochs over ``minibatches`` shuffled minibatches: the loss of :mod:`.losses`
   (PPO-clip / CISPO / GRPO-N, one of four aggregations, optional KL and entropy terms),
   AdamW (or plain SGD: ``optimizer="sgd"``) with linear warm-up, gradient clipping;
6. metrics to ``metrics.jsonl`` / ``metrics.csv``, among them the token-level entropy diagnostics
   (:data:`TOKEN_ENTROPY_COLUMNS`, below); every rollout's prompt, group, rollout
   number, reward, advantage and length to ``rollouts/step_{step:06d}.parquet`` (unless
   ``rollout_log=False``; read by ``rlvr-audit``, :func:`analysis.audit.readers.read`); every ``checkpoint_every`` steps (and at
   the end) ``checkpoint-{step:06d}/`` with the model (``save_pretrained``, safetensors),
   tokenizer, task and trainer state, written to a temporary name and renamed.

The loop body (:func:`_step`) calls one function per phase, in this order:
:func:`collect_rollouts` (1), :func:`old_logprobs` (3), :func:`score` (2, 4), :func:`update` (5),
:func:`log_step` and :func:`save_checkpoint` (6).

A new run's directory is built in a hidden temporary sibling (``.OUT.XXXX.tmp``) and renamed to
``out`` together with its first checkpoint (:func:`rlvr_plumbing.io.atomic_dir`): a run that stops
before it (disk full, divergence, Ctrl-C, a failing ``callback``) leaves nothing under ``out``, so
the same ``out`` can be used again, and ``overwrite`` replaces an earlier run only at that moment.

Distribution-level calibration (Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and 21-22; ``mu > 0``):
step 1 draws every token from ``softmax((f_θ − μ·f_φ)/temperature)`` (nucleus ``top_p`` of that
distribution), ``f_φ`` the logits of a memory model (:class:`.memory.MemoryModel`: a second small
causal LM, its head starting at zero), and after step 5 the memory takes one AdamW step on the
cross-entropy of the step's ``B·G`` sampled responses (metrics column ``memory_loss``, the loss
before that step).  Steps 3-5 are unchanged: the log-probabilities and ratios are those of
``π_θ``, with no importance weight for the calibrated sampling (as the paper writes it).  The
memory's weights and optimizer state are saved in ``trainer_state.pt``.  ``mu = 0``: no memory
model; the run is bit for bit the one without the option.

Successive output-head gradient alignment (FADE Cor. 15.3, App. 15.2; ``head_alignment``, on by
default): ``g_t`` is the gradient of step ``t``'s losses with respect to the output head
``W_head`` [V, d] (``lm_head.weight``), summed over the step's backward passes (one per epoch and
minibatch; the raw gradients, before clipping); for a head tied to the input embedding, its part
as output projection only (:class:`.models.HeadGradient`).  Columns ``head_grad_cos`` and
``head_grad_u_cos`` are :func:`analysis.spectra.successive_alignment` ``(g_{t−1}, g_t)``: the
cosine of the two flattened gradients and the absolute cosine of their leading right singular
vectors (empty at the first step, after a resume from a checkpoint without ``g_{t−1}``, and when a
gradient is zero).  ``g_{t−1}`` is saved with each checkpoint.

Token-level entropy diagnostics (every step; ``docs/token_entropy.md``):
:func:`analysis.token_entropy.token_diagnostics` of the step's response tokens — the old
log-probabilities and token entropies of step 3 (no forward pass of its own), the float64
advantages, the tokens whose clip was engaged in any of the step's passes, and the sum of the
learning rates of the step's optimizer steps: Cui et al.'s ``Ĉov(log π, A)`` and its parts,
FADE's drift, both predicted entropy changes, the reach of Clip-Cov and KL-Cov at verl's
defaults.  The change measured to the next step's ``entropy`` and the running correlations of
the predictions with it (:class:`analysis.token_entropy.EntropyChangeTracker`, saved in
``trainer_state.json``) are written into a step's row when the next step is logged
(:data:`NEXT_STEP_COLUMNS`).  With ``entropy_check`` (off by default) a float64 copy of the policy
gives the exact first-order change ``⟨∇_θ H, Δθ⟩`` of the step's actual update (``H`` the mean
token entropy of the step's responses) and the change ``H(θ + Δθ) − H(θ)`` on the same batch
(:data:`ENTROPY_CHECK_COLUMNS`; one forward and backward pass before the update, one forward pass
after it); training is unchanged.

Guardrails (``guard``, off by default; ``docs/guardrails.md``): after each step's metrics row an
:class:`analysis.guardrails.Guard` checks its rules (:func:`check_guard`); with ``guard_action``
``alert`` or ``stop`` the alerts go to ``rlvr_alerts.jsonl``, and ``stop`` saves a checkpoint of
that step and ends the run (``resume`` continues it).

``resume=True`` restarts from the last complete checkpoint of ``out``: model, optimizer,
learning-rate schedule, the numpy and torch generators, the advantage Policy's state (also
from a checkpoint written before the trainer held a Policy: ``schedule_kwargs`` and
``schedule_state``) and the metrics rows up to that step, so that on CPU the resumed run is bit-for-bit the run that
was not interrupted (tested).  The settings are :class:`~simulations.grpo.config.GRPOConfig`
(re-exported here).  See ``docs/grpo.md``.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.guardrails import Alert, Guard, append_alerts, drop_alerts_after
from analysis.spectra import successive_alignment
from analysis.token_entropy import EntropyChangeTracker, token_diagnostics
from rlvr_plumbing.io import atomic_dir
from rlvr_plumbing.runtime import resolve_device, run_metadata
from rlvr_theory import masses as _masses
from rlvr_theory.advantages import Advantage
from rlvr_theory.policy import Policy

from . import checkpoint as ck
from . import models, rollout, tasks
from .config import LATER_SETTINGS, RESUMABLE_CHANGES, GRPOConfig, read_run_settings
from .losses import policy_loss
from .memory import MemoryModel

__all__ = ["GRPOConfig", "StepRecord", "train", "METRIC_COLUMNS", "RESUMABLE_CHANGES", "ROLLOUT_DIR",
           "rollout_log_name", "write_rollout_log", "estimate_solve_rates", "easiest", "has_signal",
           "QUERY_FILTER_FILE", "HEAD_ALIGNMENT_COLUMNS", "MEMORY_COLUMNS", "DYNAMIC_SAMPLING_COLUMNS",
           "TOKEN_ENTROPY_COLUMNS", "NEXT_STEP_COLUMNS", "ENTROPY_CHECK_COLUMNS"]

#: every step: the token-level entropy diagnostics of :func:`analysis.token_entropy.token_diagnostics`
#: (Cui et al.'s Ĉov(log π, A) and its parts, FADE's drift, both predictions with the step's learning
#: rate, the reach of Clip-Cov and KL-Cov at verl's defaults), then the change measured to the next
#: step's entropy and the running correlations of the predictions with it (filled one step later)
TOKEN_ENTROPY_COLUMNS = ("cov_logp_adv", "cov_logp_adv_pos", "cov_logp_adv_neg", "cov_logp_adv_zero",
                         "cov_logp_adv_clipped", "cov_logp_adv_unclipped", "adv_token_mean", "entropy_drift_fade",
                         "entropy_change_pred_fade", "entropy_change_pred_cui", "clip_cov_band_frac", "clip_cov_frac",
                         "clip_cov_band_share", "kl_cov_frac", "kl_cov_threshold", "kl_cov_share",
                         "entropy_change_measured", "entropy_pred_corr_cui", "entropy_pred_corr_fade")
#: the columns of a step's row filled when the next step is logged (``None`` in the last row)
NEXT_STEP_COLUMNS = ("entropy_change_measured", "entropy_pred_corr_cui", "entropy_pred_corr_fade")
#: columns added with ``entropy_check``: ⟨∇_θ H, Δθ⟩ of the step's update and H(θ + Δθ) − H(θ) on the same batch
ENTROPY_CHECK_COLUMNS = ("entropy_change_first_order", "entropy_change_same_batch")
#: the per-step columns of metrics.jsonl / metrics.csv, in order (more follow)
METRIC_COLUMNS = ("step", "reward_mean", "solve_rate", "frac_all_correct", "frac_all_wrong", "m_S", "m_F",
                  "entropy", "clip_frac_low", "clip_frac_high", "kl", "grad_norm", "head_delta_norm",
                  "response_len_mean", "step_time", "tokens_per_s", "alpha", "delta",
                  "m_ratio", "entropy_nll", "loss", "pg_loss", "lr", "adv_abs_mean", "rollout_time",
                  *TOKEN_ENTROPY_COLUMNS, "head_grad_cos", "head_grad_u_cos")
#: the predictions whose correlation with the measured entropy change is tracked
_PREDICTIONS = ("cui", "fade")
#: with ``head_alignment`` (default): FADE Cor. 15.3's alignment of successive output-head gradients
HEAD_ALIGNMENT_COLUMNS = ("head_grad_cos", "head_grad_u_cos")
#: columns added with ``mu > 0``: the memory model's cross-entropy on the step's rollouts (before its update)
MEMORY_COLUMNS = ("memory_loss",)
#: columns added with ``dynamic_sampling``: groups generated this step, groups left out of the update
#: (``groups_drawn = B + groups_dropped``), extra generation rounds, and groups without signal the
#: update used because the cap on rounds was reached
DYNAMIC_SAMPLING_COLUMNS = ("groups_drawn", "groups_dropped", "refill_rounds", "groups_without_signal")
#: with ``drop_easiest > 0``: the training set, each query's estimated solve rate and whether it was dropped
QUERY_FILTER_FILE = "query_filter.json"


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


def _prepare_out(cfg: GRPOConfig, out: Path) -> tuple[int, Path] | None:
    """With ``resume``, check that the saved settings match and return the checkpoint to restart
    from (``None``: none yet).  A fresh run writes nothing here: its directory is built in a hidden
    temporary sibling and appears under ``out`` with its first checkpoint (:func:`_train`)."""
    if cfg.resume:
        old = {**LATER_SETTINGS, **(read_run_settings(out) or {})}
        new = cfg.to_json()
        diff = [k for k in new if k not in RESUMABLE_CHANGES and old.get(k) != new[k]]
        if diff:
            k = diff[0]
            raise ValueError(f"resume: setting {k!r} differs from the run in {str(out)!r} "
                             f"({old.get(k)!r} there, {new[k]!r} now); only {', '.join(RESUMABLE_CHANGES)} may change")
        ck.clean_partial(out)
        return ck.latest_checkpoint(out)
    return None


def _write_run_config(cfg: GRPOConfig, run_dir: Path, dev: torch.device) -> None:
    """``run_config.json``: the settings and run metadata (what ``--resume`` reads back)."""
    ck.write_json(run_dir / "run_config.json", {"kind": "grpo", **run_metadata(
        cfg.to_json(), seed=cfg.seed, device=dev, threads=torch.get_num_threads())})


#: the folder of the rollout log inside a run directory
ROLLOUT_DIR = "rollouts"


def rollout_log_name(step: int) -> str:
    """``step_{step:06d}.parquet``: the rollout-log file of a step."""
    return f"step_{step:06d}.parquet"


def write_rollout_log(run_dir: str | Path, step: int, prompts: list[str], rewards: np.ndarray,
                      advantages: np.ndarray, lengths: np.ndarray) -> Path:
    """Write one step's rollouts to ``RUN/rollouts/step_{step:06d}.parquet`` (atomically).

    Columns: ``step`` int64, ``prompt`` str, ``group`` int64 (the prompt's index within the
    step), ``rollout`` int64 (0..G-1), ``reward`` float64, ``advantage`` float64 (the
    advantage the update used), ``length`` int64 (generated tokens); one row per rollout,
    group by group.  ``rewards``, ``advantages`` and ``lengths`` have shape ``[B, G]``.

    Examples
    --------
    >>> import tempfile, numpy as np, pyarrow.parquet as pq
    >>> d = tempfile.mkdtemp()
    >>> p = write_rollout_log(d, 3, ["1+1=", "2+2="], np.array([[1., 0.], [0., 0.]]),
    ...                       np.array([[.5, -.5], [0., 0.]]), np.array([[2, 3], [2, 2]]))
    >>> p.name, pq.read_table(p).column("group").to_pylist()
    ('step_000003.parquet', [0, 0, 1, 1])
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlvr_plumbing.io import atomic_write

    B, G = rewards.shape
    table = pa.table({
        "step": pa.array(np.full(B * G, step, np.int64)),
        "prompt": pa.array([p for p in prompts for _ in range(G)], pa.string()),
        "group": pa.array(np.repeat(np.arange(B, dtype=np.int64), G)),
        "rollout": pa.array(np.tile(np.arange(G, dtype=np.int64), B)),
        "reward": pa.array(np.asarray(rewards, np.float64).reshape(-1)),
        "advantage": pa.array(np.asarray(advantages, np.float64).reshape(-1)),
        "length": pa.array(np.asarray(lengths, np.int64).reshape(-1)),
    })
    folder = Path(run_dir) / ROLLOUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_write(folder / rollout_log_name(step), lambda tmp: pq.write_table(table, tmp))


def _drop_rollout_logs_after(out: Path, step: int) -> None:
    """On resume: remove the rollout-log files of the steps after the checkpoint (they are
    written again by the resumed run) and any temporary file of a write that was killed."""
    for p in (out / ROLLOUT_DIR).glob(".step_*.tmp"):
        p.unlink(missing_ok=True)
    for p in (out / ROLLOUT_DIR).glob("step_*.parquet"):
        try:
            later = int(p.stem.split("_", 1)[1]) > step
        except ValueError:
            continue
        if later:
            p.unlink(missing_ok=True)


# ------------------------------------------------------------ data options
def has_signal(rewards: np.ndarray) -> np.ndarray:
    """``[n]`` bool: the groups (rows of ``rewards [n, G]``) whose rewards are not all equal.

    >>> has_signal(np.array([[1., 0.], [1., 1.], [0., 0.]]))
    array([ True, False, False])
    """
    return rewards.max(axis=1) > rewards.min(axis=1)


def estimate_solve_rates(model: Any, tok: Any, task: tasks.Task, problems: list[tasks.Problem], *, samples: int,
                         max_new_tokens: int, temperature: float, top_p: float, generator: torch.Generator,
                         chunk: int = 64) -> np.ndarray:
    """``[n]``: the share of ``samples`` rollouts of ``model`` that the verifier accepts, per problem
    (the empirical solve rate; prompts are generated ``chunk`` at a time)."""
    rates = []
    device = next(model.parameters()).device
    for i in range(0, len(problems), chunk):
        part = problems[i:i + chunk]
        ids, pmask = rollout.encode_prompts(tok, [p.prompt for p in part], repeat=samples, device=device)
        ro = rollout.sample(model, ids, pmask, max_new_tokens=max_new_tokens, eos_id=tok.eos_token_id,
                            pad_id=tok.pad_token_id, temperature=temperature, top_p=top_p, generator=generator)
        correct, _ = rollout.score(task, [p for p in part for _ in range(samples)], tok, ro)
        rates.append(correct.reshape(len(part), samples).mean(axis=1))
    return np.concatenate(rates)


def easiest(rates: np.ndarray, fraction: float) -> np.ndarray:
    """Sorted indices of the ``floor(fraction·n)`` queries with the highest solve rate (ties: the
    one drawn first goes first).

    >>> easiest(np.array([.5, 1., .25, 1., 0., .75, .5, .5]), 0.25)
    array([1, 3])
    """
    k = int(np.floor(fraction * len(rates) + 1e-9))
    return np.sort(np.argsort(-np.asarray(rates), kind="stable")[:k])


def _training_set(cfg: GRPOConfig, task: tasks.Task, model: Any, tok: Any, max_new: int,
                  dev: torch.device) -> tuple[list[tasks.Problem], dict[str, Any]]:
    """Over-Sharpening App. I's filtering baseline: ``filter_queries`` training problems drawn once,
    their solve rates under the initial policy, the easiest ``drop_easiest`` share dropped.  Its own
    generators (seeded from ``seed``): the same set on a resumed run.  Returns the kept problems and
    the document of ``query_filter.json`` (written by the caller into the run directory)."""
    rng = np.random.default_rng([cfg.seed, 3])
    pool = task.sample(rng, cfg.filter_queries)
    gen = torch.Generator(device=dev).manual_seed(int(rng.integers(2**62)))
    rates = estimate_solve_rates(model, tok, task, pool, samples=cfg.filter_samples, max_new_tokens=max_new,
                                 temperature=cfg.temperature, top_p=cfg.top_p, generator=gen)
    dropped = np.zeros(len(pool), bool)
    dropped[easiest(rates, cfg.drop_easiest)] = True
    doc = {"fraction": cfg.drop_easiest, "samples": cfg.filter_samples,
           "queries": [{"prompt": p.prompt, "answer": p.answer, "solve_rate": float(r), "dropped": bool(d)}
                       for p, r, d in zip(pool, rates, dropped)]}
    return [p for p, d in zip(pool, dropped) if not d], doc


def _concat_rollouts(parts: list[rollout.Rollouts], pad_id: int) -> rollout.Rollouts:
    """The rows of several rollout batches in one (prompts left-padded, responses right-padded)."""
    if len(parts) == 1:
        return parts[0]
    P = max(r.prompt_ids.shape[1] for r in parts)
    T = max(r.response_ids.shape[1] for r in parts)
    F = torch.nn.functional

    def cat(name: str, left: bool, value: float) -> torch.Tensor:
        width = P if left else T
        return torch.cat([F.pad(t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]), value=value)
                          for t in (getattr(r, name) for r in parts)])
    entropy = cat("entropy", False, 0.0) if all(r.entropy is not None for r in parts) else None
    return rollout.Rollouts(cat("prompt_ids", True, pad_id), cat("prompt_mask", True, 0),
                            cat("response_ids", False, pad_id), cat("response_mask", False, 0),
                            torch.cat([r.completed for r in parts]), entropy)


class _Diverged(Exception):
    """Raised inside a step when a number that must be finite is not."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def _finite_or_stop(value: float, what: str) -> float:
    if not np.isfinite(value):
        raise _Diverged(f"{what} is {value}")
    return value


# --------------------------------------------------------------------- train
def train(cfg: GRPOConfig, *, callback: Callable[[StepRecord], None] | None = None) -> Path:
    """Run GRPO; returns the run directory.  ``callback(record)`` runs after every step
    (after that step's checkpoint); an exception from it stops the run (tests use this to
    simulate a crash).  ``cfg.threads`` applies for the duration of the call."""
    task, _ = cfg.validate()
    with models.torch_threads(cfg.threads):
        return _train(cfg, task, callback)


@dataclass
class _Run:
    """What a run holds from step to step (built by :func:`_setup`)."""

    cfg: GRPOConfig
    task: tasks.Task
    out: Path
    run_dir: Path                       # where files go: out, or the hidden sibling a fresh run is built in
    dev: torch.device
    max_new: int                        # the response budget
    model: Any
    tok: Any
    ref: Any                            # the reference policy (KL), or None
    head0: torch.Tensor                 # the initial output head
    head_grad: models.HeadGradient | None
    train_set: list[tasks.Problem] | None
    query_filter: dict[str, Any] | None
    opt: torch.optim.Optimizer
    lr_sched: Any
    memory: MemoryModel | None
    np_rng: np.random.Generator
    gen: torch.Generator
    policy: Policy | None               # a schedule's: None until its first step gives H0
    log: ck.MetricsLog
    prev_head_grad: torch.Tensor | None = None
    step: int = 0                       # the step being run (named if the run diverges)
    check_model: Any = None             # entropy_check: the float64 copy of the policy
    guard: Guard | None = None          # --guard: the rules over each step's metrics
    stopped: list[Alert] = field(default_factory=list)  # --guard-action stop: the alerts that stopped the run
    entropy_trackers: dict[str, EntropyChangeTracker] = field(
        default_factory=lambda: {name: EntropyChangeTracker() for name in _PREDICTIONS})

    @property
    def single_pass(self) -> bool:
        """One epoch of one minibatch: the update's forward pass also gives the old log-probs."""
        return self.cfg.ppo_epochs == 1 and self.cfg.minibatches == 1


@dataclass
class _Batch:
    """Step 1: ``B`` prompts × ``G`` rollouts and their verdicts."""

    problems: list[tasks.Problem]
    ro: rollout.Rollouts
    correct: np.ndarray                 # [B, G] bool
    sampling_row: dict[str, int]        # the dynamic-sampling columns (empty without it)
    rollout_time: float


@dataclass
class _LogProbs:
    """Step 3: log-probabilities and entropies of the sampled tokens."""

    old_logp: torch.Tensor              # [B·G, T], no gradient
    ref_logp: torch.Tensor | None
    cur_logp: torch.Tensor | None       # single pass: the update's own forward pass (with gradient)
    cur_ent: torch.Tensor | None
    entropy: float                      # mean token entropy
    entropy_nll: float                  # FADE Alg. 2 line 4: mean over responses of the mean −log π
    ent_tok: torch.Tensor | None = None  # [B·G, T] token entropies, no gradient


@dataclass
class _Scores:
    """Steps 2 and 4: rewards, the advantage in force, advantages and masses."""

    rewards: np.ndarray                 # [B, G]
    lengths: np.ndarray                 # [B, G]
    advantage: Advantage
    A: np.ndarray                       # [B, G]
    masses: Any                         # rlvr_theory.masses.of_group


@dataclass
class _Update:
    """Step 5: what the minibatch updates report."""

    stats: list[Any]
    grad_norms: list[float]
    losses: list[float]
    extra_row: dict[str, Any]           # memory_loss, head_grad_cos, head_grad_u_cos, the entropy check
    token_row: dict[str, Any]           # TOKEN_ENTROPY_COLUMNS (NEXT_STEP_COLUMNS: None until the next step)


def _train(cfg: GRPOConfig, task: tasks.Task, callback: Callable[[StepRecord], None] | None) -> Path:
    """Set the run up (or restore it), then run :func:`_step` for each step; a fresh run until its
    first checkpoint in a hidden sibling of ``out`` (renamed to ``out`` then)."""
    run, resume_from = _setup(cfg, task)
    if resume_from is not None:
        start = _resume(run, *resume_from)
    else:
        start = 0
        if cfg.resume:  # resumed before its first checkpoint: from step 0
            run.log.write()
            _drop_rollout_logs_after(run.out, 0)
            drop_alerts_after(run.out, 0)
    from tqdm.auto import tqdm

    bar = tqdm(total=cfg.steps, initial=start, desc="grpo", disable=cfg.quiet, leave=False)

    def one_step(step: int) -> StepRecord:
        record = _step(run, step)
        bar.set_postfix(reward=f"{record.metrics['reward_mean']:.3f}", H=f"{record.metrics['entropy']:.2f}")
        bar.update(1)
        return record

    def steps(span: range) -> None:
        for step in span:
            if run.stopped:
                return
            record = one_step(step)
            if callback is not None:
                callback(record)

    fresh = not cfg.resume
    started = not fresh  # whether out holds this run (a fresh run: from its first checkpoint on)
    try:
        if fresh:  # built in a hidden sibling of out, renamed to out with its first checkpoint
            first = min(cfg.checkpoint_every, cfg.steps)
            held: list[StepRecord] = []

            def build(tmp: Path) -> None:
                run.run_dir = run.log.run_dir = tmp
                _start_files(run, tmp)
                steps(range(1, first))
                if not run.stopped:  # a guard's stop before the first checkpoint saved its own
                    held.append(one_step(first))  # its callback runs once the run is under out
            try:
                atomic_dir(run.out, build)
            finally:
                run.run_dir = run.log.run_dir = run.out
            started = True
            if callback is not None and held:
                callback(held[0])
            start = first
        steps(range(start + 1, cfg.steps + 1))
    except (_Diverged, FloatingPointError) as err:
        bar.close()
        raise _diverged_error(run, err, started) from None
    bar.close()
    run.log.write()
    if run.stopped:
        a = run.stopped[0]
        print(f"grpo: the guard stopped the run at step {a.step} ({'; '.join(f'{x.rule}: {x.message}' for x in run.stopped)}); "
              f"checkpoint {ck.checkpoint_name(a.step)} saved, continue with --resume", file=sys.stderr)
    return run.out


def _step(run: _Run, step: int) -> StepRecord:
    """Steps 1-6 of the module docstring: the metrics row, rollout log and checkpoint go to run_dir."""
    run.step = step
    t0 = time.perf_counter()
    batch = collect_rollouts(run)                   # 1. B prompts × G rollouts and their verdicts
    lp = old_logprobs(run, batch)                   # 3. old log-probs, entropies, reference log-probs
    scores = score(run, batch, lp, step)            # 2, 4. rewards, advantages (the Policy), masses
    upd = update(run, batch, lp, scores)            # 5. μ epochs of minibatch updates
    row = log_step(run, step, batch, lp, scores, upd, time.perf_counter() - t0)  # 6. metrics
    check_guard(run, step, row)                     # --guard: its rules over the metrics so far
    due = step % run.cfg.checkpoint_every == 0 or step == run.cfg.steps
    if run.stopped and not due:
        run.log.write()  # the metrics cover the checkpoint the guard's stop leaves
    if due or run.stopped:
        save_checkpoint(run, step)
    return StepRecord(step, scores.rewards, scores.A, scores.advantage, scores.lengths, row)


# ------------------------------------------------------------------ setup and resume
def _setup(cfg: GRPOConfig, task: tasks.Task) -> tuple[_Run, tuple[int, Path] | None]:
    """Policy model, reference, optimizer, generators and the advantage :class:`Policy` of a run;
    with ``resume``, also the checkpoint to restart from (``None``: none yet)."""
    out = Path(cfg.out)
    dev = resolve_device(cfg.device)
    max_new = cfg.max_new_tokens or task.max_answer_len() + 2
    model, tok = models.prepare_policy(task, init=cfg.init, preset=cfg.preset, seed=cfg.seed, device=dev)
    resume_from = _prepare_out(cfg, out)  # after loading --init: a bad model leaves no directory
    ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 or cfg.log_kl else None
    # the exact entropy check's float64 copy (before any hook is put on the policy)
    check_model = copy.deepcopy(model).double().eval() if cfg.entropy_check else None
    head0 = models.output_head(model).detach().clone()
    # FADE Cor. 15.3: the output head's gradient of each step (after the reference copy: no hook on it)
    head_grad = models.HeadGradient(model) if cfg.head_alignment else None
    # the filtering baseline's training set, from the initial policy (before a resumed state is loaded)
    train_set, query_filter = _training_set(cfg, task, model, tok, max_new, dev) if cfg.drop_easiest > 0 \
        else (None, None)
    opt = (torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) if cfg.optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay))
    # distribution-level calibration: the memory model f_φ (Over-Sharpening Alg. 1 lines 4-6, 21-22)
    memory = MemoryModel(model, tok, preset=cfg.memory_preset or next(iter(models.PRESETS)),
                         lr=cfg.lr if cfg.memory_lr is None else cfg.memory_lr, weight_decay=cfg.weight_decay,
                         seed=cfg.seed) if cfg.mu > 0 else None
    warm = max(cfg.warmup_steps, 1)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    np_rng = np.random.default_rng([cfg.seed, 2])
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # nothing should draw from it; seeded anyway
    # a schedule's Policy is built at the first step, whose entropy is FADE's H0 (Alg. 2 line 1)
    policy = cfg.make_policy() if cfg.schedule is None else None
    log = ck.MetricsLog(out, [c for c in METRIC_COLUMNS if cfg.head_alignment or c not in HEAD_ALIGNMENT_COLUMNS])
    run = _Run(cfg, task, out, out, dev, max_new, model, tok, ref, head0, head_grad, train_set, query_filter,
               opt, lr_sched, memory, np_rng, gen, policy, log, check_model=check_model, guard=cfg.make_guard())
    if cfg.resume:
        _start_files(run, out)  # a preset's initial model if it is missing; the query filter (the same set)
    return run, resume_from


def _start_files(run: _Run, where: Path) -> None:
    """What a run holds before its first step: settings, the preset's initial model, the query filter."""
    cfg = run.cfg
    if not cfg.resume:
        _write_run_config(cfg, where, run.dev)
    if cfg.init is None and not (where / "init" / "config.json").is_file():
        ck.save_model_dir(where / "init", run.model, run.tok, json_files={"task.json": run.task.spec()})
    if run.query_filter is not None:
        ck.write_json(where / QUERY_FILTER_FILE, run.query_filter)


def _resume(run: _Run, start: int, path: Path) -> int:
    """Restore model, optimizer, learning-rate schedule, generators, memory model, last head
    gradient, the advantage Policy and the metrics rows from checkpoint ``path``; returns its step."""
    cfg = run.cfg
    resumed, _ = models.load_policy(path, device=run.dev, what="resume")
    run.model.load_state_dict(resumed.state_dict())
    del resumed
    try:
        state = ck.read_json(path / "trainer_state.json")
        # map to the CPU: RNG states must be CPU tensors; the optimizer moves its state to the params
        blobs = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
        run.opt.load_state_dict(blobs["optimizer"])
        run.lr_sched.load_state_dict(blobs["lr_scheduler"])
        run.np_rng.bit_generator.state = state["rng"]["numpy"]
        run.gen.set_state(blobs["torch_generator"])
        torch.set_rng_state(blobs["torch_cpu"])
        if run.memory is not None:
            run.memory.load_state_dict(blobs["memory"])
        run.prev_head_grad = blobs.get("head_grad") if run.head_grad is not None else None
        if cfg.schedule is not None:
            run.policy = _restore_policy(cfg, state)
    except OSError:
        raise
    except Exception as err:  # not JSON, a missing key, a torch file that is not ours, ...
        raise ValueError(f"resume: the trainer state in {str(path)!r} (trainer_state.json / trainer_state.pt) "
                         f"is unreadable or incomplete ({type(err).__name__}: {_first_line(err)})") from None
    run.log.load(max_step=start)
    _restore_trackers(run, state)
    _drop_rollout_logs_after(run.out, start)
    drop_alerts_after(run.out, start)
    if run.guard is not None:
        run.guard.replay(run.log.rows)  # a rule firing at the checkpoint counts as reported
    if len(run.log) != start:
        raise ValueError(f"resume: metrics.jsonl in {str(run.out)!r} has {len(run.log)} rows up to step {start}, "
                         f"expected {start}")
    return start


def _restore_policy(cfg: GRPOConfig, state: dict[str, Any]) -> Policy:
    """A schedule's :class:`Policy` from a checkpoint's ``trainer_state.json``: ``policy`` and
    ``policy_H0`` (:func:`save_checkpoint`), or, in a checkpoint written before the trainer held a
    Policy, ``schedule_kwargs`` (the schedule's keyword arguments, the measured ``H0`` among them)
    and ``schedule_state``."""
    if "policy" in state:
        policy = cfg.make_policy(H0=state["policy_H0"])
        policy.load_state_dict(state["policy"])
    else:
        policy = cfg.make_policy(H0=state["schedule_kwargs"].get("H0"))
        policy.load_state_dict({"schedule": cfg.schedule, "state": state["schedule_state"], "entropy": None})
    return policy


# ------------------------------------------------------------------ the phases of a step
def _generate(run: _Run, n: int) -> tuple[list[tasks.Problem], rollout.Rollouts, np.ndarray]:
    """``n`` training prompts × ``G`` rollouts and their verdicts ``[n, G]``."""
    cfg, G = run.cfg, run.cfg.group_size
    if run.train_set is None:
        problems = run.task.sample(run.np_rng, n)
    else:
        problems = [run.train_set[i] for i in run.np_rng.integers(len(run.train_set), size=n)]
    ids, pmask = rollout.encode_prompts(run.tok, [p.prompt for p in problems], repeat=G, device=run.dev)
    ro = rollout.sample(run.model, ids, pmask, max_new_tokens=run.max_new, eos_id=run.tok.eos_token_id,
                        pad_id=run.tok.pad_token_id, temperature=cfg.temperature, top_p=cfg.top_p,
                        generator=run.gen, memory=None if run.memory is None else run.memory.model, mu=cfg.mu)
    correct, _ = rollout.score(run.task, [p for p in problems for _ in range(G)], run.tok, ro)
    return problems, ro, correct.reshape(n, G)


def collect_rollouts(run: _Run) -> _Batch:
    """Step 1: ``B`` prompts × ``G`` rollouts (temperature, top-p, KV cache) and their verdicts;
    with ``dynamic_sampling`` the groups without signal are dropped and refilled, at most
    ``max_refill_rounds`` times."""
    cfg, B, G = run.cfg, run.cfg.batch_size, run.cfg.group_size
    t0 = time.perf_counter()
    problems, ro, correct = _generate(run, B)
    sampling_row: dict[str, int] = {}
    if cfg.dynamic_sampling:
        parts = [(problems, ro, correct)]
        signal = [has_signal(correct)]
        n_signal, rounds = int(signal[0].sum()), 0
        while n_signal < B and rounds < cfg.max_refill_rounds:
            rounds += 1
            parts.append(_generate(run, B - n_signal))
            signal.append(has_signal(parts[-1][2]))
            n_signal += int(signal[-1].sum())
        keep = np.concatenate(signal)
        # the groups with signal, then (at the cap) the first ones without, in the order drawn
        chosen = np.sort(np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)[:B - n_signal]]))
        problems = [p for part in parts for p in part[0]]
        problems = [problems[i] for i in chosen]
        rows = torch.as_tensor((chosen[:, None] * G + np.arange(G)).reshape(-1), device=run.dev)
        ro = _concat_rollouts([part[1] for part in parts], run.tok.pad_token_id).select(rows)
        correct = np.concatenate([part[2] for part in parts])[chosen]
        sampling_row = {"groups_drawn": len(keep), "groups_dropped": len(keep) - B, "refill_rounds": rounds,
                        "groups_without_signal": B - n_signal}
    return _Batch(problems, ro, correct, sampling_row, time.perf_counter() - t0)


def old_logprobs(run: _Run, batch: _Batch) -> _LogProbs:
    """Step 3: old log-probs and entropies of the sampled tokens, reference log-probs (no
    gradient).  With one epoch of one minibatch the update's own forward pass gives them (old =
    current, detached: what the separate no-grad pass would compute), one forward pass fewer."""
    cfg, ro = run.cfg, batch.ro
    cur_logp = cur_ent = None
    if run.single_pass:
        run.model.train()
        cur_logp, cur_ent = rollout.token_logprobs(run.model, ro, temperature=cfg.temperature)
        old_logp, ent_tok = cur_logp.detach(), cur_ent.detach()
        if cfg.entropy_coef == 0:
            cur_ent = None  # frees the entropy's graph: the loss does not use it
    else:
        with torch.no_grad():
            old_logp, ent_tok = rollout.token_logprobs(run.model, ro, temperature=cfg.temperature)
    with torch.no_grad():
        ref_logp = rollout.token_logprobs(run.ref, ro, temperature=cfg.temperature,
                                          with_entropy=False)[0] if run.ref is not None else None
    mask = ro.response_mask.float()
    entropy = float((ent_tok * mask).sum() / mask.sum())
    # FADE Alg. 2 line 4: H_t = (1/|B|) Σ_i (1/T_i) Σ_t −log π(a_t)
    entropy_nll = float(((-old_logp * mask).sum(-1) / mask.sum(-1)).mean())
    return _LogProbs(old_logp, ref_logp, cur_logp, cur_ent, entropy, entropy_nll, ent_tok)


def score(run: _Run, batch: _Batch, lp: _LogProbs, step: int) -> _Scores:
    """Steps 2 and 4: rewards ``[B, G]`` from the verdicts; the advantage of this batch from the
    run's :class:`Policy` (a schedule first advances with the batch's mean reward and entropy,
    FADE Alg. 2 lines 4-8), the advantages and the masses of every group."""
    cfg, B, G = run.cfg, run.cfg.batch_size, run.cfg.group_size
    Rw, Rc = (float(v) for v in cfg.reward_values)
    rewards = np.where(batch.correct, Rc, Rw)
    lengths = batch.ro.lengths.cpu().numpy().reshape(B, G)
    if run.policy is None:  # a schedule's first step: FADE's Ĥ starts at this entropy (a typed H0 wins)
        run.policy = cfg.make_policy(H0=lp.entropy_nll)
    adv_fn = run.policy.advance(reward_mean=float(rewards.mean()), entropy=lp.entropy_nll, step=step)
    len_arg = lengths if adv_fn.uses_lengths else None
    A = adv_fn(rewards, lengths=len_arg)
    if not np.isfinite(A).all():
        raise ValueError(f"advantage: {adv_fn!r} gave non-finite advantages for the rewards "
                         f"{(Rw, Rc)} at step {step}; use reward values of moderate magnitude")
    return _Scores(rewards, lengths, adv_fn, A, _masses.of_group(adv_fn, rewards, lengths=len_arg))


def update(run: _Run, batch: _Batch, lp: _LogProbs, scores: _Scores) -> _Update:
    """Step 5: ``μ`` epochs over ``minibatches`` shuffled minibatches (loss, backward, gradient
    clipping, the optimizer, learning-rate schedule); then the token-level entropy diagnostics
    (:func:`_token_row`), the exact entropy check (``entropy_check``), the memory model's step and
    the alignment of successive output-head gradients."""
    cfg, model, dev = run.cfg, run.model, run.dev
    eps_low, eps_high = cfg.eps
    adv_t = torch.as_tensor(scores.A.reshape(-1), dtype=torch.float32, device=dev)
    check = _entropy_check_start(run, batch) if run.check_model is not None else None
    model.train()
    n_rows = cfg.batch_size * cfg.group_size
    mb = n_rows // cfg.minibatches
    stats, grad_norms, losses = [], [], []
    clipped = torch.zeros(batch.ro.response_mask.shape, dtype=torch.bool, device=dev)  # engaged in any pass
    lr_sum = 0.0                        # the step's learning rate: the sum over its optimizer steps
    for _epoch in range(cfg.ppo_epochs):
        order = torch.randperm(n_rows, generator=run.gen, device=dev) if cfg.minibatches > 1 \
            else torch.arange(n_rows, device=dev)
        for k in range(cfg.minibatches):
            idx = order[k * mb:(k + 1) * mb]
            sub = batch.ro.select(idx)
            if run.single_pass:  # the forward pass of step 3 (all rows, in order)
                logp, ent = lp.cur_logp, lp.cur_ent
            else:
                logp, ent = rollout.token_logprobs(model, sub, temperature=cfg.temperature,
                                                   with_entropy=cfg.entropy_coef > 0)
            loss, st = policy_loss(
                logp, lp.old_logp[idx], adv_t[idx], sub.response_mask, loss=cfg.loss,
                aggregation=cfg.aggregation, eps_low=eps_low, eps_high=eps_high, max_new_tokens=run.max_new,
                ref_logp=None if lp.ref_logp is None else lp.ref_logp[idx], kl_coef=cfg.kl_coef,
                entropy=ent, entropy_coef=cfg.entropy_coef)
            loss_value = _finite_or_stop(float(loss.detach()), "the loss")
            run.opt.zero_grad(set_to_none=True)
            loss.backward()
            if run.head_grad is not None:
                run.head_grad.after_backward()  # the raw gradient, before clipping
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
            grad_norms.append(_finite_or_stop(grad_norm, "the gradient norm"))
            lr_sum += float(run.opt.param_groups[0]["lr"])
            run.opt.step()
            run.lr_sched.step()
            clipped[idx] = clipped[idx] | st.clipped
            stats.append(st._replace(clipped=None))
            losses.append(loss_value)
    bad = models.first_non_finite(model)
    if bad is not None:
        raise _Diverged(f"weight {bad!r} is not finite after the update")
    token_row = _token_row(run, batch, lp, scores, clipped, lr_sum)
    extra_row: dict[str, Any] = {}
    if check is not None:
        extra_row.update(_entropy_check_end(run, batch, check))
    if run.memory is not None:  # Alg. 1 line 22: the memory learns the step's sampled responses
        extra_row["memory_loss"] = _finite_or_stop(run.memory.update(batch.ro), "the memory model's loss")
    if run.head_grad is not None:  # FADE Cor. 15.3: alignment of g_{t-1} and g_t
        extra_row.update(_head_alignment(run))
    return _Update(stats, grad_norms, losses, extra_row, token_row)


def _nan_none(value: float) -> float | None:
    """``None`` for NaN (an undefined ratio or correlation), else the value."""
    return None if np.isnan(value) else value


def _token_row(run: _Run, batch: _Batch, lp: _LogProbs, scores: _Scores, clipped: torch.Tensor,
               lr: float) -> dict[str, Any]:
    """:func:`analysis.token_entropy.token_diagnostics` of the step's response tokens: the old
    log-probabilities and token entropies of step 3 (no forward pass of its own), the float64
    advantages, the tokens whose clip was engaged in any of the step's passes, and ``lr`` the
    sum of the learning rates of the step's optimizer steps.  The shares are ``None`` when the
    covariance is 0 (e.g. a batch without signal); the columns known one step later ``None``."""
    adv = torch.as_tensor(scores.A.reshape(-1), dtype=torch.float64, device=run.dev)
    d = token_diagnostics(lp.old_logp, adv, batch.ro.response_mask, entropy=lp.ent_tok, clipped=clipped, lr=lr)
    row: dict[str, Any] = {k: d.get(k) for k in TOKEN_ENTROPY_COLUMNS}
    for k in ("clip_cov_band_share", "kl_cov_share"):
        row[k] = _nan_none(row[k])
    return row


def _batch_entropy(model: Any, ro: rollout.Rollouts, temperature: float) -> torch.Tensor:
    """``H``: the mean token entropy over the response tokens of ``ro`` (a scalar tensor)."""
    _, ent = rollout.token_logprobs(model, ro, temperature=temperature)
    mask = ro.response_mask.to(ent.dtype)
    return (ent * mask).sum() / mask.sum()


@dataclass
class _EntropyCheck:
    """``entropy_check`` before the update: ``H(θ)`` on the step's batch and ``∇_θ H`` (float64)."""

    H0: float
    grads: dict[str, torch.Tensor | None]


def _entropy_check_start(run: _Run, batch: _Batch) -> _EntropyCheck:
    """Load ``θ`` into the float64 copy (eval mode: no dropout), ``H(θ)`` and its gradient."""
    m64 = run.check_model
    m64.load_state_dict(run.model.state_dict())
    params = dict(m64.named_parameters())
    H0 = _batch_entropy(m64, batch.ro, run.cfg.temperature)
    grads = torch.autograd.grad(H0, list(params.values()), allow_unused=True)
    return _EntropyCheck(float(H0.detach()), dict(zip(params, grads)))


def _entropy_check_end(run: _Run, batch: _Batch, check: _EntropyCheck) -> dict[str, float]:
    """``entropy_change_first_order = ⟨∇_θ H(θ), Δθ⟩`` with ``Δθ`` the actual update of every
    parameter (float64 differences of the float32 weights: exact), and
    ``entropy_change_same_batch = H(θ + Δθ) − H(θ)`` on the same batch (one forward pass)."""
    m64, new = run.check_model, dict(run.model.named_parameters())
    with torch.no_grad():
        first = torch.zeros((), dtype=torch.float64, device=run.dev)
        for name, p in m64.named_parameters():      # p still holds θ
            g = check.grads[name]
            if g is not None:
                first = first + (g * (new[name].detach().to(torch.float64) - p)).sum()
        m64.load_state_dict(run.model.state_dict())
        H1 = float(_batch_entropy(m64, batch.ro, run.cfg.temperature))
    return {"entropy_change_first_order": float(first), "entropy_change_same_batch": H1 - check.H0}


def _track_entropy_change(run: _Run, entropy: float, token_row: dict[str, Any]) -> None:
    """Feed this step's entropy and predictions to the trackers; the change measured since the
    last step (``H_t − H_{t−1}``) and the running correlations go into the last row (step ``t − 1``)."""
    back: dict[str, Any] = {}
    for name, tracker in run.entropy_trackers.items():
        measured = float(tracker.update([entropy], [token_row[f"entropy_change_pred_{name}"]])[0])
        back["entropy_change_measured"] = _nan_none(measured)
        back[f"entropy_pred_corr_{name}"] = _nan_none(tracker.correlation)
    if back["entropy_change_measured"] is not None:
        run.log.update_last(back)


def _restore_trackers(run: _Run, state: dict[str, Any]) -> None:
    """The entropy trackers of a resumed run: from ``trainer_state.json``, or (a checkpoint written
    before they existed) rebuilt from the metrics rows read back."""
    saved = state.get("entropy_trackers") or {}

    def column(key: str) -> np.ndarray:
        return np.array([np.nan if r.get(key) is None else r[key] for r in run.log.rows], float)
    for name, tracker in run.entropy_trackers.items():
        if name in saved:
            tracker.load_state_dict(saved[name])
        else:
            tracker.update(column("entropy"), column(f"entropy_change_pred_{name}"))


def _head_alignment(run: _Run) -> dict[str, float | None]:
    """``head_grad_cos``, ``head_grad_u_cos`` of the last and this step's head gradients (None
    where undefined); this step's gradient becomes the last one."""
    cur = run.head_grad.pop()
    cos = u_cos = None
    if run.prev_head_grad is not None and cur is not None:
        c, u = (float(v) for v in successive_alignment(run.prev_head_grad, cur))
        cos, u_cos = (None if np.isnan(c) else c), (None if np.isnan(u) else u)
    run.prev_head_grad = cur
    return {"head_grad_cos": cos, "head_grad_u_cos": u_cos}


def _logged_params(policy: Policy, advantage: Advantage) -> tuple[Any, Any]:
    """``(alpha, delta)`` of the metrics row: those a schedule sets (:meth:`Policy.scheduled_params`),
    else the fixed family's parameters (``None`` where it has none)."""
    params = policy.scheduled_params() if policy.schedule is not None else advantage.params
    return params.get("alpha"), params.get("delta")


def log_step(run: _Run, step: int, batch: _Batch, lp: _LogProbs, scores: _Scores, upd: _Update,
             step_time: float) -> dict[str, Any]:
    """Step 6: the metrics row (every float finite, else the run stops as diverged), the rollout
    log, and the metrics files rewritten every ``log_every`` steps and before every checkpoint."""
    cfg, G = run.cfg, run.cfg.group_size
    rewards, lengths, correct, m = scores.rewards, scores.lengths, batch.correct, scores.masses
    X = correct.reshape(-1, G).sum(-1)
    alpha, delta = _logged_params(run.policy, scores.advantage)
    m_S, m_F = float(m.m_S.mean()), float(m.m_F.mean())
    stats = upd.stats
    row = {
        "step": step, "reward_mean": float(rewards.mean()), "solve_rate": float(correct.mean()),
        "frac_all_correct": float((X == G).mean()), "frac_all_wrong": float((X == 0).mean()),
        "m_S": m_S, "m_F": m_F, "entropy": lp.entropy,
        "clip_frac_low": float(np.mean([s.clip_frac_low for s in stats])),
        "clip_frac_high": float(np.mean([s.clip_frac_high for s in stats])),
        "kl": float(np.mean([s.kl for s in stats])) if lp.ref_logp is not None else None,
        "grad_norm": float(np.mean(upd.grad_norms)), "head_delta_norm": _head_delta_norm(run.model, run.head0),
        "response_len_mean": float(lengths.mean()), "step_time": step_time,
        "tokens_per_s": int(lengths.sum()) / step_time, "alpha": alpha, "delta": delta,
        "m_ratio": m_S / m_F if m_F != 0 else None, "entropy_nll": lp.entropy_nll,
        "loss": float(np.mean(upd.losses)), "pg_loss": float(np.mean([s.pg_loss for s in stats])),
        "lr": run.lr_sched.get_last_lr()[0], "adv_abs_mean": float(np.abs(scores.A).mean()),
        "rollout_time": batch.rollout_time, **upd.token_row, **batch.sampling_row, **upd.extra_row,
    }
    for key, value in row.items():
        if isinstance(value, float):
            _finite_or_stop(value, key)
    _track_entropy_change(run, lp.entropy, upd.token_row)   # fills the last row's measured change
    run.log.append(row)
    if cfg.rollout_log:
        write_rollout_log(run.run_dir, step, [p.prompt for p in batch.problems], rewards, scores.A, lengths)
    if step % cfg.checkpoint_every == 0 or step == cfg.steps or step % cfg.log_every == 0:
        run.log.write()  # before the checkpoint: metrics always cover the last checkpoint
    return row


def check_guard(run: _Run, step: int, row: dict[str, Any]) -> None:
    """``--guard``: the step's row to the guard; each alert of a rule that starts firing is
    printed (``log``), also appended to ``rlvr_alerts.jsonl`` (``alert``), and with ``stop`` the
    run ends after this step's checkpoint (:attr:`_Run.stopped`)."""
    if run.guard is None:
        return
    alerts = run.guard.update(step, row)
    for a in alerts:
        print(f"grpo: guard: step {a.step}: {a.rule}: {a.message}", file=sys.stderr)
    if alerts and run.guard.action in ("alert", "stop"):
        append_alerts(run.run_dir, alerts)
    if alerts and run.guard.action == "stop":
        run.stopped = alerts


def save_checkpoint(run: _Run, step: int) -> None:
    """``checkpoint-{step:06d}/``: the model, tokenizer and task; ``trainer_state.json`` (step,
    numpy generator, settings, the advantage :class:`Policy`'s state and ``H0``) and
    ``trainer_state.pt`` (optimizer, learning-rate schedule, torch generators, memory model,
    last head gradient), written last: they mark a complete checkpoint."""
    cfg = run.cfg
    rng = _rng_state(run.np_rng, run.gen)
    policy = run.policy
    state = {"step": step, "rng": {"numpy": rng["numpy"]}, "config": cfg.to_json(), "schedule": cfg.schedule,
             "policy": policy.state_dict() if policy is not None else {},
             "policy_H0": policy.H0 if policy is not None else None,
             "entropy_trackers": {name: tr.state_dict() for name, tr in run.entropy_trackers.items()},
             "base": str(Path(cfg.init) if cfg.init else run.out / "init")}  # the name the run knows it by
    blobs = {"optimizer": run.opt.state_dict(), "lr_scheduler": run.lr_sched.state_dict(),
             "torch_generator": rng["torch_generator"], "torch_cpu": rng["torch_cpu"]}
    if run.memory is not None:
        blobs["memory"] = run.memory.state_dict()
    if run.prev_head_grad is not None:
        blobs["head_grad"] = run.prev_head_grad

    def extra(tmp: Path) -> None:  # trainer_state.json last: it marks a complete checkpoint
        torch.save(blobs, tmp / "trainer_state.pt")
        ck.write_json(tmp / "trainer_state.json", state)
    ck.save_model_dir(run.run_dir / ck.checkpoint_name(step), run.model, run.tok,
                      json_files={"task.json": run.task.spec()}, extra=extra)


def _diverged_error(run: _Run, err: BaseException, started: bool) -> ValueError:
    """The message of a run that stopped at a non-finite number (what was kept, what to change)."""
    cfg, out = run.cfg, run.out
    if started:
        run.log.write()  # the finite rows before the step that diverged
        last = ck.latest_checkpoint(out)
        kept = f"the last checkpoint, {last[1].name}, is intact" if last else "no checkpoint was written"
    else:
        kept = (f"it had no checkpoint yet, so nothing was written to --out ({str(out)!r})"
                + (", and the run there before is as it was" if out.exists() else "")
                + "; the same --out can be used again")
    return ValueError(
        f"diverged at step {run.step}: {err}; the run stopped without saving that step ({kept}). The likely "
        f"cause is the learning rate: lower --lr (now {cfg.lr:g}) or --max-grad-norm (now "
        f"{cfg.max_grad_norm:g})")
