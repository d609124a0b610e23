"""The settings of every run kind of the GRPO trainer, in one place.

One dataclass per run kind; each field carries its ``help`` (and ``choices`` where the set is
fixed) in its metadata, and the command line ``rlvr-train`` is generated from the fields by
:func:`rlvr_plumbing.runner.add_settings` (the help shows each field's default).  Adding a
setting is one line: a field with its help.

* :class:`RunSettings` — what SFT and GRPO share (output, task, model, optimiser, seed,
  device, threads);
* :class:`SFTConfig` — :func:`simulations.grpo.sft.train_sft` (``rlvr-train sft``);
* :class:`GRPOConfig` — :func:`simulations.grpo.trainer.train` (``rlvr-train grpo``);
* :class:`EvalConfig` — :func:`simulations.grpo.evaluate.evaluate` (``rlvr-train eval``);
* :class:`SweepConfig` — :func:`simulations.grpo.sweep.run_sweep` (``rlvr-train sweep``).

``validate()`` refuses a bad setting before any work starts, with the checks of
:mod:`rlvr_plumbing.checks`; advantages and schedules are looked up in their registries
(:mod:`rlvr_theory.advantages`, :mod:`rlvr_theory.schedules`), tasks in
:mod:`simulations.grpo.tasks`.

Examples
--------
>>> cfg = GRPOConfig(out="runs/asym", advantage="asym_grpo", params={"delta": 0.5})
>>> cfg.group_size, cfg.eps
(8, (0.2, 0.2))
>>> GRPOConfig(out="runs/x", loss="cispo").eps
(1.0, 5.0)
>>> GRPOConfig(out="runs/x", group_size=1).validate()
Traceback (most recent call last):
...
ValueError: group_size must be an integer >= 2, got 1
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_plumbing import checks
from rlvr_plumbing.io import check_out, read_json_object
from rlvr_plumbing.runtime import check_memory, resolve_device
from rlvr_theory import advantages, schedules
from rlvr_theory.advantages import Advantage
from rlvr_theory.policy import Policy

from ..calibration import check_calibration, memory_lr_field, memory_preset_field, mu_field
from . import losses, tasks
from .losses import AGGREGATIONS, DEFAULT_EPS
from .model_presets import PRESETS as _MODEL_PRESETS

if TYPE_CHECKING:  # imported where used: `rlvr-train --help` loads no torch, pandas or scipy
    from analysis.guardrails import Guard

__all__ = ["RunSettings", "SFTConfig", "GRPOConfig", "EvalConfig", "SweepConfig", "RESUMABLE_CHANGES",
           "DEFAULT_EPS", "LATER_SETTINGS", "OPTIMIZERS", "REWARD_LIMIT", "EVAL_FILES", "SWEEP_FILES", "check_out_dir", "read_run_settings"]

#: the optimizers of the GRPO trainer (``GRPOConfig.optimizer``)
OPTIMIZERS = ("adamw", "sgd")

#: GRPO settings that may differ between a run and its resumption
#: (``out`` too: a run directory that was moved or copied is resumed where it is now)
RESUMABLE_CHANGES = ("steps", "checkpoint_every", "log_every", "quiet", "threads", "resume", "out", "overwrite",
                     "rollout_log", "head_alignment", "entropy_check", "guard", "guard_action")

#: rewards are refused beyond ±REWARD_LIMIT, and a gap R_c − R_w below 1/REWARD_LIMIT: the batch means
#: and standard deviations of the advantages stay finite and non-zero in float64
REWARD_LIMIT = 1e100

# DEFAULT_EPS (imported): each loss's clip bounds (ε_low, ε_high) when not given, read from the loss
# registry (simulations.grpo.losses.register_policy_loss: PPO / DAPO 0.2/0.2, CISPO 1.0/5.0, GSPO 3e-4/4e-4)


def _list_field(default: Iterable[Any], help: str) -> Any:
    """A list-valued field; its default is shown in ``--help`` from the same values."""
    values = list(default)
    shown = " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
    return field(default_factory=lambda: list(values), metadata={"help": help, "default_text": shown})


def _eps_text(i: int) -> str:
    ppo, cispo = DEFAULT_EPS["ppo"][i], DEFAULT_EPS["cispo"][i]
    return f"{ppo:g}; cispo {cispo:g}"


#: what ``rlvr-train eval --out`` writes
EVAL_FILES = ("eval.json", "per_problem.csv")
#: what ``rlvr-train sweep`` writes besides the run folders
SWEEP_FILES = ("summary.csv", "output_head_table.csv", "output_head_table.md")

_OVERWRITE_HELP = "replace a non-empty --out that this command did not write (default: refuse)"


def check_out_dir(out: Any, *, resume: bool = False, overwrite: bool = False,
                  markers: Iterable[str] | None = None, resumable: bool = True, arg: str = "out") -> Path:
    """The output directory of a run, checked before any work (:func:`rlvr_plumbing.io.check_out`).

    Without ``resume``: not a file, not under a file, writable, and new or empty (or holding
    one of ``markers``: an earlier output of the same command) unless ``overwrite``; an
    existing run is refused (with a pointer to ``--resume`` when ``resumable``).  With ``resume``: an existing,
    writable GRPO run directory (with ``run_config.json``).
    """
    if not isinstance(out, (str, os.PathLike)) or os.fspath(out) == "":
        raise ValueError(f"{arg} must be a directory path, got {out!r}")
    p = Path(out)
    if resume:
        if not p.exists():
            raise ValueError(f"{arg}: {str(p)!r} does not exist; --resume continues the GRPO run in an existing "
                             "directory (leave --resume out to start a new run)")
        if p.is_dir() and not (p / "run_config.json").is_file():
            raise ValueError(f"{arg}: {str(p)!r} is not a GRPO run directory (no run_config.json); "
                             "--resume continues a run written by rlvr-train grpo")
        return check_out(p, markers=("run_config.json",), arg=arg)
    if not overwrite and resumable and p.is_dir() and (p / "run_config.json").is_file():
        if markers is None:
            from .checkpoint import latest_checkpoint

            if latest_checkpoint(p) is None:  # a run from before runs appeared with their first checkpoint
                raise ValueError(f"{arg}: {str(p)!r} holds a GRPO run with no checkpoint (it stopped before its "
                                 "first one: nothing to continue from); pass --overwrite to start a new run there "
                                 "(--resume starts that run again from step 0 with its saved settings), or choose "
                                 "a new directory")
            raise ValueError(f"{arg}: {str(p)!r} already exists and is not empty (a run); pass --resume to "
                             "continue a GRPO run there, --overwrite to replace it, or choose a new directory")
        if not any((p / m).exists() for m in markers):
            raise ValueError(f"{arg}: {str(p)!r} holds a run (run_config.json), not an output of this command; "
                             "choose a new directory or pass --overwrite")
    return check_out(p, markers=None if markers is None else tuple(markers), overwrite=overwrite, arg=arg)


def _inside(path: Any, folder: Any) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (after resolving links)."""
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p == f or f in p.parents


def _fits(value: Any, tp: Any) -> bool:
    """Whether a JSON value has the type of a settings field (``int`` for a ``float`` field too)."""
    if value is None:
        return type(None) in typing.get_args(tp) or tp is Any
    tp = _unwrap(tp)
    origin = typing.get_origin(tp) or tp
    if origin is bool:
        return isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    return True


def _unwrap(tp: Any) -> Any:
    """``X`` for ``X | None``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def read_run_settings(run_dir: str | os.PathLike, cls: type | None = None) -> dict[str, Any] | None:
    """The settings saved in ``RUN/run_config.json`` (``None`` if there is none).

    The file holds the run-metadata block of :func:`rlvr_plumbing.runtime.run_metadata`; the
    settings are its ``settings`` entry (a file written before that block existed holds the
    settings at its top level).  A file that is not JSON, not an object, the record of
    another kind of run (``"kind": "sft"``), or whose settings miss a field of ``cls``
    (default :class:`GRPOConfig`), name an unknown one or hold a value of the wrong type is
    refused (``ValueError`` naming the file and the key).
    """
    cls = GRPOConfig if cls is None else cls
    path = Path(run_dir) / "run_config.json"
    if not path.is_file():
        return None
    where = f"resume: file {str(path)!r}"
    doc = read_json_object(path, where)
    settings = doc.get("settings") if "package_version" in doc or "settings" in doc else doc
    if not isinstance(settings, dict):
        raise ValueError(f"{where}: key 'settings' must be a JSON object, got {type(settings).__name__}")
    settings = dict(settings)
    kind = doc.get("kind", settings.pop("kind", None))
    settings.pop("kind", None)
    if kind not in (None, "grpo"):
        raise ValueError(f"{where} records a {kind!r} run, not a GRPO run; --resume continues a run written "
                         "by rlvr-train grpo")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = sorted(fields - set(settings) - _OPTIONAL_SAVED)
    if missing:
        raise ValueError(f"{where} is incomplete: setting {missing[0]!r} is missing"
                         + (f" ({len(missing) - 1} more)" if len(missing) > 1 else ""))
    for key, value in settings.items():
        if key not in fields:
            raise ValueError(f"{where}: unknown setting {key!r}")
        if not _fits(value, hints[key]):
            raise ValueError(f"{where}: setting {key!r} has the wrong type ({value!r})")
    return settings


#: GRPO settings added after runs were first written, with the value a run_config.json without
#: them stands for (their defaults: the behaviour before they existed)
LATER_SETTINGS = {"dynamic_sampling": False, "max_refill_rounds": 8, "drop_easiest": 0.0,
                  "filter_queries": 256, "filter_samples": 8, "mu": 0.0, "memory_lr": None, "memory_preset": None,
                  "head_alignment": False, "optimizer": "adamw", "entropy_check": False, "guard": None,
                  "guard_action": "log"}

#: settings that a run_config.json may lack (added after runs were first written)
_OPTIONAL_SAVED = frozenset({"overwrite", "rollout_log", *LATER_SETTINGS})


# ===================================================================== settings
@dataclass
class RunSettings:
    """Settings shared by SFT and GRPO runs."""

    out: str = field(metadata={"help": "run directory (new; for grpo also an existing run with --resume)"})
    task: str = field(default="arith", metadata={
        "help": "task name (simulations.grpo.tasks; grpo: the task of --init's task.json unless given)"})
    difficulty: int | None = field(default=None, metadata={
        "help": "task difficulty", "default_text": "the task's default, or --init's"})
    heldout_fraction: float = field(default=0.1, metadata={
        "help": "share of the problem space held out for evaluation, in (0, 1)"})
    split_seed: int = field(default=0, metadata={"help": "seed of the train / held-out partition"})
    preset: str = field(default="tiny-cpu", metadata={
        "help": "fresh model of this size (simulations.grpo.models)", "choices": tuple(_MODEL_PRESETS)})
    init: str | None = field(default=None, metadata={
        "help": "start from this local model directory (e.g. runs/sft/final) instead of --preset"})
    batch_size: int = field(default=16, metadata={"help": "prompts per step B"})
    lr: float = field(default=3e-4, metadata={"help": "learning rate (AdamW; grpo: of --optimizer)"})
    weight_decay: float = field(default=0.0, metadata={
        "help": "weight decay (AdamW: decoupled; grpo --optimizer sgd: an L2 term in the gradient)"})
    warmup_steps: int = field(default=0, metadata={"help": "linear learning-rate warm-up (optimizer steps)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (global norm)"})
    seed: int = field(default=0, metadata={"help": "seed of every random draw"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda or cuda:N"})
    threads: int | None = field(default=None, metadata={
        "help": "torch / BLAS CPU threads during the run (None: leave as they are)"})
    quiet: bool = field(default=False, metadata={"help": "no progress bars"})
    overwrite: bool = field(default=False, metadata={"help": _OVERWRITE_HELP})

    def _task(self) -> tasks.Task:
        """The task instance (an unknown or verifier-less task is refused first)."""
        return tasks.get(self.task, self.difficulty, heldout_fraction=self.heldout_fraction,
                         split_seed=self.split_seed)

    def _validate_common(self, *, resume: bool = False, resumable: bool = True) -> None:
        """The checks shared by SFT and GRPO, run last (the model and output directories)."""
        from . import models

        if self.init is None:
            checks.choice("preset", self.preset, tuple(_MODEL_PRESETS))
        else:
            models.check_model_dir(self.init)
        self.warmup_steps = checks.integer("warmup_steps", self.warmup_steps, low=0)
        self.seed = checks.integer("seed", self.seed, low=0)
        self.threads = checks.integer("threads", self.threads, low=1, allow_none=True)
        self.lr = checks.number("lr", self.lr, low=0, low_open=True)
        self.weight_decay = checks.number("weight_decay", self.weight_decay, low=0)
        self.max_grad_norm = checks.number("max_grad_norm", self.max_grad_norm, low=0, low_open=True)
        resolve_device(self.device)
        if not isinstance(self.overwrite, bool):
            raise ValueError(f"overwrite must be True or False, got {self.overwrite!r}")
        if resume and self.overwrite:
            raise ValueError("overwrite: --resume continues the run in --out; --overwrite would replace it")
        check_out_dir(self.out, resume=resume, overwrite=self.overwrite, resumable=resumable)
        if self.init is not None and self.overwrite and _inside(self.init, self.out):
            raise ValueError(f"overwrite: --init {str(self.init)!r} lies inside --out {str(self.out)!r}, "
                             "which --overwrite would replace")

    def _check_memory(self, task: tasks.Task, *, sequences: int, new_tokens: int, train_rows: int,
                      reference: bool, what: str, memory_preset: str | None = None,
                      entropy_check: bool = False) -> None:
        """Refuse a run whose model and batches cannot fit (:func:`rlvr_plumbing.runtime.check_memory`),
        estimated from the settings by :func:`simulations.grpo.models.memory_needed` (plus, with
        ``memory_preset``, the memory model of distribution-level calibration: its weights, AdamW
        state, sampling and one training pass over the same rows; with ``entropy_check``, the
        float64 copy of the policy: its weights and gradients and one pass over the rows)."""
        from . import models
        from .tokenizer import build_tokenizer

        vocab = None if self.init is not None else len(build_tokenizer(task.alphabet))
        shape = models.model_shape(init=self.init, preset=self.preset, vocab_size=vocab)
        seq_len = task.max_prompt_len() + new_tokens
        need = models.memory_needed(shape, sequences=sequences, seq_len=seq_len, train_rows=train_rows,
                                    optimizer=True, reference=reference)
        if memory_preset is not None:
            mem_shape = models.model_shape(preset=memory_preset, vocab_size=shape["vocab"])
            need += models.memory_needed(mem_shape, sequences=sequences, seq_len=seq_len, train_rows=train_rows,
                                         optimizer=True)
        if entropy_check:
            need += models.memory_needed(shape, sequences=0, seq_len=seq_len, train_rows=train_rows,
                                         bytes_per=8) + 8 * shape["params"]
        check_memory(need, f"{what} ({sequences:,} sequences of up to {seq_len} tokens, a model of "
                           f"{shape['params']:,} parameters)", device=resolve_device(self.device))

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclass
class SFTConfig(RunSettings):
    """Settings of :func:`simulations.grpo.sft.train_sft` (CLI: ``rlvr-train sft``).

    Examples
    --------
    >>> SFTConfig(out="runs/sft", target_solve_rate=1.5).validate()
    Traceback (most recent call last):
    ...
    ValueError: target_solve_rate must be a finite number >= 0 and <= 1, got 1.5
    """

    batch_size: int = field(default=64, metadata={"help": "demonstrations per step"})
    lr: float = field(default=3e-3, metadata={"help": "AdamW learning rate"})
    warmup_steps: int = field(default=20, metadata={"help": "linear learning-rate warm-up (optimizer steps)"})
    target_solve_rate: float = field(default=0.3, metadata={
        "help": "stop at the first evaluation with this held-out sampled solve rate"})
    max_steps: int = field(default=3000, metadata={"help": "give up after this many steps"})
    eval_every: int = field(default=25, metadata={"help": "measure the held-out solve rate every k steps"})
    eval_problems: int = field(default=64, metadata={"help": "held-out problems for the solve rate"})
    eval_samples: int = field(default=4, metadata={"help": "samples per problem for the solve rate"})

    def validate(self) -> tasks.Task:
        """Check every setting (no work done); returns the task instance."""
        task = self._task()
        self.target_solve_rate = checks.probability("target_solve_rate", self.target_solve_rate)
        for name in ("batch_size", "max_steps", "eval_every", "eval_problems", "eval_samples"):
            setattr(self, name, checks.integer(name, getattr(self, name), low=1))
        self._validate_common(resumable=False)
        self._check_memory(task, sequences=max(self.eval_problems * self.eval_samples, self.batch_size),
                           new_tokens=task.max_answer_len() + 2, train_rows=self.batch_size, reference=False,
                           what=f"the SFT run (--batch-size {self.batch_size}, --eval-problems "
                                f"{self.eval_problems} x --eval-samples {self.eval_samples})")
        return task


@dataclass
class GRPOConfig(RunSettings):
    """Settings of :func:`simulations.grpo.trainer.train` (CLI: ``rlvr-train grpo``).

    Exactly one of ``advantage`` (a name of :mod:`rlvr_theory.advantages`) and ``schedule`` (a
    name of :mod:`rlvr_theory.schedules`) is in use: a ``schedule`` replaces the advantage.
    ``params`` are the chosen family's or schedule's parameters (``--param NAME=VALUE``).

    Examples
    --------
    >>> GRPOConfig(out="runs/x", advantage="asym_grpo", params={"delta": 2.0}).eps
    (0.2, 0.2)
    >>> GRPOConfig(out="runs/x", advantage="nope").validate()
    Traceback (most recent call last):
    ...
    ValueError: advantage: unknown advantage 'nope'; allowed: ...
    """

    advantage: str = field(default="grpo", metadata={"help": "advantage family (rlvr-theory list)"})
    schedule: str | None = field(default=None, metadata={
        "help": "a schedule of rlvr_theory.schedules instead of --advantage: " + ", ".join(schedules.names())})
    params: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "parameters of the advantage or schedule (--param NAME=VALUE)"})
    reward_values: tuple[float, float] = field(default=(0.0, 1.0), metadata={
        "help": "rewards of a wrong and a correct response", "metavar": ("R_W", "R_C")})
    steps: int = field(default=200, metadata={"help": "training steps"})
    group_size: int = field(default=8, metadata={"help": "rollouts per prompt G (>= 2 and the family's minimum)"})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "response budget in tokens", "default_text": "longest answer + 2"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus mass of sampling"})
    loss: str = field(default="ppo", metadata={
        "help": f"per-token loss (the registry of simulations.grpo.losses): {losses.describe()}",
        "choices": losses.POLICY_LOSSES})
    aggregation: str = field(default="token-mean", metadata={
        "help": "reduction of the per-token losses", "choices": AGGREGATIONS})
    eps_low: float | None = field(default=None, metadata={"help": "lower clip ε_low", "default_text": _eps_text(0)})
    eps_high: float | None = field(default=None, metadata={"help": "upper clip ε_high", "default_text": _eps_text(1)})
    ppo_epochs: int = field(default=1, metadata={"help": "inner epochs μ over each batch"})
    minibatches: int = field(default=1, metadata={"help": "minibatches per epoch (must divide B·G)"})
    kl_coef: float = field(default=0.0, metadata={"help": "KL(π‖π_ref) penalty β (reference: the initial policy)"})
    entropy_coef: float = field(default=0.0, metadata={"help": "entropy bonus c_H"})
    log_kl: bool = field(default=True, metadata={
        "help": "log the KL to the initial policy, keeping a reference model (--no-log-kl saves that memory)"})
    rollout_log: bool = field(default=True, metadata={
        "help": "write every rollout's prompt, group, reward, advantage and length to "
                "OUT/rollouts/step_XXXXXX.parquet, for rlvr-audit (--no-rollout-log: don't)"})
    dynamic_sampling: bool = field(default=False, metadata={
        "help": "DAPO dynamic sampling: drop the groups whose G rewards are all equal (no signal) and draw "
                "more prompts until B groups with signal are collected or --max-refill-rounds is reached"})
    max_refill_rounds: int = field(default=8, metadata={
        "help": "with --dynamic-sampling, extra generation rounds per step at most; at the cap the batch is "
                "completed with the first groups without signal that were drawn"})
    drop_easiest: float = field(default=0.0, metadata={
        "help": "drop this fraction of the training queries, those the initial policy solves most often, "
                "before training (Over-Sharpening App. I baseline: 0.25; 0: off, queries drawn afresh)"})
    filter_queries: int = field(default=256, metadata={
        "help": "with --drop-easiest, the size of the fixed training set drawn before training"})
    filter_samples: int = field(default=8, metadata={
        "help": "with --drop-easiest, rollouts per query to estimate its solve rate"})
    mu: float = mu_field("a memory model f_φ (after each step)")
    memory_lr: float | None = memory_lr_field("memory model (AdamW)", default_text="--lr")
    memory_preset: str | None = memory_preset_field(_MODEL_PRESETS)
    head_alignment: bool = field(default=True, metadata={
        "help": "log head_grad_cos and head_grad_u_cos, the alignment of successive output-head gradients "
                "(FADE Cor. 15.3; --no-head-alignment: don't, e.g. for a large vocabulary)"})
    optimizer: str = field(default="adamw", metadata={
        "help": "the policy's optimizer: adamw, or sgd (plain SGD: no momentum, Δθ = −lr·clipped gradient)",
        "choices": OPTIMIZERS})
    entropy_check: bool = field(default=False, metadata={
        "help": "log the exact first-order entropy change of each step, ⟨∇_θ H, Δθ⟩ with Δθ the step's actual "
                "update, beside the change measured on the same batch after it (H: mean token entropy of the "
                "step's responses; computed on a float64 copy of the policy: one more forward and backward pass "
                "before the update, one forward pass after it)"})
    guard: str | None = field(default=None, metadata={
        "help": "guardrails over each step's metrics (analysis.guardrails, docs/guardrails.md): a preset "
                "(default) or a JSON rules file", "default_text": "off"})
    guard_action: str = field(default="log", metadata={
        "help": "what --guard does when a rule fires: log it, alert (also append it to RUN_DIR/rlvr_alerts.jsonl), "
                "or stop (also save a checkpoint at that step and end the run; --resume continues it)",
        "choices": ("log", "alert", "stop")})
    checkpoint_every: int = field(default=50, metadata={"help": "save a checkpoint every k steps (and at the end)"})
    log_every: int = field(default=10, metadata={"help": "rewrite the metrics files every k steps"})
    resume: bool = field(default=False, metadata={
        "help": "continue the run in --out from its last complete checkpoint"})

    # ------------------------------------------------------------ validation
    def validate(self) -> tuple[tasks.Task, Advantage | None]:
        """Refuse a bad configuration before any work; returns ``(task, fixed advantage or None)``."""
        task = self._task()
        rv = self.reward_values
        if not (isinstance(rv, (tuple, list)) and len(rv) == 2):
            raise ValueError(f"reward_values must be a pair (R_w, R_c) with R_c > R_w, got {rv!r}")
        self.reward_values = rv = tuple(checks.number("reward_values", v, low=-REWARD_LIMIT, high=REWARD_LIMIT)
                                        for v in rv)
        if rv[1] - rv[0] < 1 / REWARD_LIMIT:
            raise ValueError(f"reward_values must be (R_w, R_c) with R_c - R_w >= {1 / REWARD_LIMIT:g} (usable range "
                             f"of rewards: |R| <= {REWARD_LIMIT:g}), got {rv!r}")
        self.group_size = checks.integer("group_size", self.group_size, low=2)
        for name in ("batch_size", "steps", "ppo_epochs", "minibatches", "checkpoint_every", "log_every"):
            setattr(self, name, checks.integer(name, getattr(self, name), low=1))
        adv = self.make_advantage()
        if adv is not None and self.group_size < adv.min_group_size():
            raise ValueError(f"group_size must be an integer >= {adv.min_group_size()} for {adv!r}, "
                             f"got {self.group_size}")
        n = self.batch_size * self.group_size
        if n % self.minibatches:
            raise ValueError(f"minibatches must divide batch_size * group_size = {n}, got {self.minibatches}")
        self.max_new_tokens = checks.integer("max_new_tokens", self.max_new_tokens, low=1, allow_none=True)
        self.temperature = checks.number("temperature", self.temperature, low=0, low_open=True)
        self.top_p = checks.number("top_p", self.top_p, low=0, high=1, low_open=True)
        losses.get_policy_loss(self.loss)  # an unknown name lists the registered losses
        checks.choice("aggregation", self.aggregation, AGGREGATIONS)
        for name in ("eps_low", "eps_high"):
            setattr(self, name, checks.number(name, getattr(self, name), low=0, allow_none=True))
        for name in ("kl_coef", "entropy_coef"):
            setattr(self, name, checks.number(name, getattr(self, name), low=0))
        if not isinstance(self.dynamic_sampling, bool):
            raise ValueError(f"dynamic_sampling must be True or False, got {self.dynamic_sampling!r}")
        self.max_refill_rounds = checks.integer("max_refill_rounds", self.max_refill_rounds, low=0)
        self.drop_easiest = checks.probability("drop_easiest", self.drop_easiest, high_open=True)
        for name in ("filter_queries", "filter_samples"):
            setattr(self, name, checks.integer(name, getattr(self, name), low=1))
        self.mu, self.memory_lr = check_calibration(self.mu, self.memory_lr, model="memory model",
                                                    memory_preset=self.memory_preset, presets=_MODEL_PRESETS)
        if not isinstance(self.head_alignment, bool):
            raise ValueError(f"head_alignment must be True or False, got {self.head_alignment!r}")
        checks.choice("optimizer", self.optimizer, OPTIMIZERS)
        if not isinstance(self.entropy_check, bool):
            raise ValueError(f"entropy_check must be True or False, got {self.entropy_check!r}")
        self.make_guard()  # an unknown preset, a missing file or a bad rule is refused here
        self._validate_common(resume=self.resume)
        n = self.batch_size * self.group_size
        self._check_memory(task, sequences=n, new_tokens=self.max_new_tokens or task.max_answer_len() + 2,
                           train_rows=n, reference=self.kl_coef > 0 or self.log_kl,
                           memory_preset=(self.memory_preset or next(iter(_MODEL_PRESETS))) if self.mu > 0 else None,
                           entropy_check=self.entropy_check, what=f"the GRPO run (--batch-size {self.batch_size} x --group-size {self.group_size})")
        return task, adv

    def make_guard(self) -> Guard | None:
        """The run's :class:`analysis.guardrails.Guard` (``None`` without ``guard``)."""
        from analysis.guardrails import ACTIONS, Guard

        checks.choice("guard_action", self.guard_action, ACTIONS)
        if self.guard is None:
            return None
        if not isinstance(self.guard, str):
            raise ValueError(f"guard must be a preset name or a path, got {self.guard!r}")
        return Guard.from_spec(self.guard, action=self.guard_action)

    def make_policy(self, H0: float | None = None) -> Policy:
        """The run's :class:`rlvr_theory.policy.Policy`: the ``schedule`` with ``params`` (``H0``:
        the measured initial entropy; an ``H0`` typed in ``params`` wins), else the ``advantage``
        family with ``params``, for ``reward_values``.  Unknown names list the registered ones; a
        bad parameter value is refused as a ``param:``."""
        rv = tuple(self.reward_values)
        if self.schedule is not None:
            try:
                return Policy(schedule=self.schedule, schedule_params=dict(self.params), steps=self.steps,
                              H0=H0, reward_values=rv)
            except ValueError as err:  # a known name with a bad parameter value: say it is a --param
                if self.schedule not in schedules.names() or str(err).startswith("param:"):
                    raise
                raise ValueError(f"param: schedule {self.schedule!r}: {err}") from None
        try:
            return Policy(advantage=self.advantage, advantage_params=dict(self.params), reward_values=rv)
        except ValueError as err:
            if self.advantage in advantages.names():  # the name is fine: a parameter is not
                raise ValueError(f"param: {err}") from None
            raise

    def make_advantage(self) -> Advantage | None:
        """The fixed advantage (``None`` with a schedule, whose :meth:`make_policy` is built to
        check its name and parameters)."""
        policy = self.make_policy()
        return None if policy.schedule is not None else policy.advantage

    @property
    def eps(self) -> tuple[float, float]:
        """``(ε_low, ε_high)`` with the loss's defaults filled in."""
        lo, hi = losses.get_policy_loss(self.loss).eps
        return (lo if self.eps_low is None else self.eps_low, hi if self.eps_high is None else self.eps_high)


@dataclass
class EvalConfig:
    """Settings of ``rlvr-train eval`` (:func:`simulations.grpo.evaluate.evaluate`)."""

    checkpoint: str = field(metadata={"help": "checkpoint directory", "cli": False})
    k: list[int] = _list_field([1], "pass@k values")
    n: int | None = field(default=None, metadata={"help": "samples per problem", "default_text": "max k"})
    problems: int = field(default=100, metadata={"help": "distinct held-out problems"})
    task: str | None = field(default=None, metadata={"help": "task name", "default_text": "the checkpoint's task.json"})
    difficulty: int | None = field(default=None, metadata={"help": "task difficulty",
                                                           "default_text": "the checkpoint's"})
    temperature: float = field(default=1.0, metadata={
        "help": "sampling temperature; 0: greedy (argmax) decoding, one completion per problem, reporting "
                "the greedy accuracy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus mass of sampling"})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "response budget in tokens", "default_text": "longest answer + 2"})
    batch_size: int = field(default=2048, metadata={"help": "sequences generated at once"})
    seed: int = field(default=0, metadata={"help": "seed of the held-out set and the sampling"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda or cuda:N"})
    threads: int | None = field(default=None, metadata={"help": "torch / BLAS CPU threads during the call"})
    quiet: bool = field(default=False, metadata={"help": "no progress bar"})
    out: str | None = field(default=None, metadata={
        "help": "write eval.json and per_problem.csv into this directory", "default_text": "print only"})
    overwrite: bool = field(default=False, metadata={"help": _OVERWRITE_HELP})
    nll_rare_base: str | None = field(default=None, metadata={
        "help": "base checkpoint (e.g. the SFT model) whose rare correct solutions give ΔNLL_rare "
                "(F-GRPO App. F.2)", "default_text": "no ΔNLL_rare"})
    nll_rare_set: str | None = field(default=None, metadata={
        "help": "rare-correct set file (.npz): read if it exists, else built from --nll-rare-base and "
                "written there, so several checkpoints share one set", "default_text": "not kept"})
    nll_rare_prompts: int = field(default=256, metadata={"help": "distinct training prompts of the rare set"})
    nll_rare_samples: int = field(default=800, metadata={"help": "base-model samples per prompt of the rare set"})
    nll_rare_fraction: float = field(default=0.01, metadata={
        "help": "share of the correct samples, highest base NLL first, kept in the rare set"})
    triage: int | None = field(default=None, metadata={
        "help": "planned GRPO group size G (<= n): pre-RL triage of the sampled problems (analysis.triage: "
                "zero-signal share, expected masses, no-signal prompts), printed and added to eval.json",
        "default_text": "no triage"})
    advantage: str = field(default="grpo", metadata={
        "help": "advantage family of --triage (rlvr-theory list), with --param NAME=VALUE"})
    params: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "parameters of the --triage advantage (--param NAME=VALUE)"})


@dataclass
class SweepConfig(GRPOConfig):
    """Settings of ``rlvr-train sweep`` (:func:`simulations.grpo.sweep.run_sweep`): the shared
    GRPO settings of every run, and the runs.  ``advantage``, ``schedule``, ``params``,
    ``resume`` and ``preset`` are set by the sweep for each run and cannot be chosen."""

    out: str = field(metadata={"help": "sweep directory (one sub-directory per run)"})
    init: str | None = field(default=None, metadata={"help": "the SFT checkpoint every run starts from"})

    deltas: list[float] = _list_field([0.5, 1.0, 2.0], "AsymGRPO δ values, one run each")
    fade: bool = field(default=True, metadata={"help": "train the FADE run as well (--no-fade skips it)"})
    fade_params: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "FADESchedule parameters (--fade-param NAME=VALUE)"})
    eval_problems: int = field(default=100, metadata={"help": "held-out problems for pass@1 (0: skip)"})
    eval_n: int = field(default=16, metadata={"help": "samples per problem for pass@1"})
    diff_device: str = field(default="auto", metadata={"help": "device of the checkpoint diff"})
    diff_layers: str = field(default="all", metadata={
        "help": "SVD metrics for every matrix or the output head only", "choices": ("all", "head")})

    #: fields the sweep sets for each run
    PER_RUN = ("advantage", "schedule", "params", "resume", "preset")

    def runs(self) -> dict[str, dict[str, Any]]:
        """Run name → the settings that differ between runs (``advantage``, ``schedule``, ``params``)."""
        runs: dict[str, dict[str, Any]] = {}
        for d in self.deltas:
            runs[f"asym_grpo_delta{float(d):g}"] = {"advantage": "asym_grpo", "schedule": None,
                                                    "params": {"delta": float(d)}}
        if self.fade:
            runs["fade"] = {"advantage": "grpo", "schedule": "fade", "params": dict(self.fade_params)}
        return runs

    def run_configs(self) -> dict[str, GRPOConfig]:
        """Run name → the :class:`GRPOConfig` of that run (``OUT/<run>``, resumed if it holds a
        run already, unless ``overwrite``)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(GRPOConfig)
                  if f.name not in (*self.PER_RUN, "out")}
        cfgs = {}
        for name, spec in self.runs().items():
            out = Path(self.out) / name
            resume = not self.overwrite and (out / "run_config.json").is_file()
            cfgs[name] = GRPOConfig(out=str(out), resume=resume, **shared, **spec)
        return cfgs

    def markers(self) -> tuple[str, ...]:
        """What a sweep directory holds: its tables and one folder per run."""
        return (*SWEEP_FILES, *self.runs())

    def validate(self) -> dict[str, GRPOConfig]:  # type: ignore[override]
        """Check the sweep's own settings and every run's (no work done); returns the runs."""
        base = GRPOConfig(out="")
        for name in self.PER_RUN:
            if name != "preset" and getattr(self, name) != getattr(base, name):
                raise ValueError(f"{name}: the sweep sets it for each run; leave it out")
        if self.init is None:
            raise ValueError("init must be the SFT checkpoint every run starts from, got None")
        checks.array("deltas", self.deltas, ndim=1)
        self.eval_problems = checks.integer("eval_problems", self.eval_problems, low=0)
        self.eval_n = checks.integer("eval_n", self.eval_n, low=1)
        checks.choice("diff_layers", self.diff_layers, ("all", "head"))
        if not isinstance(self.overwrite, bool):
            raise ValueError(f"overwrite must be True or False, got {self.overwrite!r}")
        check_out_dir(self.out, overwrite=self.overwrite, markers=self.markers())
        if self.overwrite and _inside(self.init, self.out):
            raise ValueError(f"overwrite: --init {str(self.init)!r} lies inside --out {str(self.out)!r}, "
                             "which --overwrite would replace")
        cfgs = self.run_configs()
        for cfg in cfgs.values():
            cfg.validate()
        return cfgs
