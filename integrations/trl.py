"""Registry advantages, schedules and mass diagnostics inside TRL's ``GRPOTrainer``.

:class:`GRPOTrainer` is a drop-in subclass of ``trl.GRPOTrainer`` (``pip install
"rlvr-diagnostics[trl]"``, TRL 1.16) with seven more keyword arguments: ``advantage`` /
``advantage_params`` (a registry family, :func:`rlvr_theory.advantages.names`) or ``schedule``
/ ``schedule_params`` (:func:`rlvr_theory.schedules.names`), ``success_threshold``,
``singleton`` and ``token_diagnostics``.  Everything else (generation, the loss, accelerate /
DeepSpeed, vLLM, checkpoints) stays TRL's.

Per generation batch it

1. takes the rewards TRL gathered across processes, one row per completion: the weighted sum of
   the reward columns with TRL's ``reward_weights`` (``NaN`` where every reward function
   returned ``None``; those rows take part in no baseline and get advantage 0, as in TRL);
2. recomputes the advantages with :class:`integrations.core.Policy` on groups of
   ``num_generations`` consecutive completions (TRL's layout), gives each process its slice
   (TRL's ``process_slice``) and replaces the advantages TRL logged, so that the completions
   table (``log_completions=True`` → ``OUTPUT_DIR/completions/completions_NNNNN.parquet``, column
   ``advantage``) shows the advantages that entered the loss;
3. appends the diagnostics to TRL's own metrics (averaged and logged by TRL, ``eval_`` prefixed
   in evaluation): ``rlvr/m_S``, ``rlvr/m_F``, ``rlvr/sign_ratio``, ``rlvr/frac_all_correct``,
   ``rlvr/frac_all_wrong``, ``rlvr/abs_adv_sum``, ``rlvr/solve_rate`` and a schedule's
   ``rlvr/alpha``, ``rlvr/delta``, ``rlvr/omega``.  A value that is undefined for a batch
   (``sign_ratio`` when ``m_F = 0``, masses of real rewards without a threshold) is left out.

Per micro-batch of the loss (``token_diagnostics=True``, the default) it also logs
:func:`analysis.token_entropy.token_diagnostics` as ``rlvr/token/<key>`` (``docs/token_entropy.md``),
computed on the tensors TRL's ``_compute_loss`` already holds (no extra forward pass): the old
log-probabilities (``per_token_logps.detach()`` when TRL skipped them), the advantages, the loss
mask (``completion_mask`` times ``tool_mask``), TRL's token entropies, the PPO clip mask (loss
types ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo``, ``luspo``) and, in training, the learning rate of
the step.  At each training log it puts the entropy change measured since the previous log beside
the predictions (``rlvr/token/entropy_change_measured``, ``rlvr/token/entropy_pred_corr_cui``,
``rlvr/token/entropy_pred_corr_fade``, :class:`analysis.token_entropy.EntropyChangeTracker` fed
with TRL's logged ``entropy``).

A schedule advances once per generation batch in training (never in evaluation), from the
batch solve rate and TRL's logged entropy (the mean of the ``entropy`` values TRL logged since
the previous generation batch, else the last one seen, else ``H0``).  Its state is written to
``checkpoint-N/rlvr_state.json`` with every TRL checkpoint and restored by
``trainer.train(resume_from_checkpoint=...)``.  Every process computes the same advantages and
schedule state from the same gathered rewards and the globally reduced entropy.

Examples
--------
Refusals come from ``__init__``, before the model is touched:

>>> from integrations.trl import GRPOTrainer
>>> GRPOTrainer(model=None, advantage="asym_grpo", advantage_params={"gamma": 1.0})
Traceback (most recent call last):
...
ValueError: asym_grpo: unknown parameter(s) gamma; allowed: delta

A run (tiny model and tokenizer of your own, ``processing_class`` given)::

    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward,
                          train_dataset=dataset, args=GRPOConfig(..., log_completions=True),
                          advantage="asym_grpo", advantage_params={"delta": 0.5})
    trainer.train()
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any

import numpy as np
import torch
import trl
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from analysis.audit.metric_logs import live_metrics
from analysis.guardrails import Guard, append_alerts, drop_alerts_after
from analysis.token_entropy import DIAGNOSTIC_KEYS, EntropyChangeTracker
from analysis.token_entropy import token_diagnostics as _token_diagnostics
from integrations.core import STEP_METRICS, Policy
from rlvr_plumbing.io import read_json_object, write_json
from rlvr_theory import advantages as registry

__all__ = ["GRPOTrainer", "GuardCallback", "guard_metrics", "STATE_FILE", "METRICS", "TOKEN_PREFIX",
           "TOKEN_TRACKED"]

logger = logging.getLogger(__name__)

#: file written into every ``checkpoint-N`` directory: the policy's (schedule's) state
STATE_FILE = "rlvr_state.json"

#: TRL metric name -> key of :meth:`integrations.core.Policy.step`'s metrics (the list both
#: adapters log, :data:`integrations.core.STEP_METRICS`)
METRICS = STEP_METRICS


#: prefix of the per-micro-batch token diagnostics: ``rlvr/token/<key of token_diagnostics>``
TOKEN_PREFIX = "rlvr/token/"
#: logged at each training log from the entropy TRL logged (``EntropyChangeTracker``)
TOKEN_TRACKED = ("rlvr/token/entropy_change_measured", "rlvr/token/entropy_pred_corr_cui",
                 "rlvr/token/entropy_pred_corr_fade")
#: TRL 1.16 loss types with PPO's two-sided clip (``is_low_clipped | is_high_clipped``)
_CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def _trainer_args(args: tuple, kwargs: dict) -> Any:
    """The ``GRPOConfig`` passed to ``trl.GRPOTrainer.__init__`` (third positional or ``args=``)."""
    return kwargs.get("args", args[2] if len(args) > 2 else None)


class GRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a registry family or schedule.

    Parameters
    ----------
    *args, **kwargs
        Everything ``trl.GRPOTrainer`` takes, unchanged.
    advantage : str, optional
        A registry family (:func:`rlvr_theory.advantages.names`), e.g. ``"asym_grpo"``.
        Exactly one of ``advantage`` and ``schedule`` is given.
    advantage_params : dict, optional
        Its parameters, e.g. ``{"delta": 0.5}`` (also ``reward_values=(R_w, R_c)``).
    schedule : str, optional
        A schedule (:func:`rlvr_theory.schedules.names`): ``"fade"``, ``"fade-log"`` (its ``T`` is
        the number of generation batches of the run), ``"agrae"``, and FADE's ablations
        ``"fade-entropy"``, ``"fade-alpha-only"``, ``"fade-delta-only"``.
    schedule_params : dict, optional
        Its parameters, e.g. ``{"H0": 2.3, "beta": 0.9}`` for ``"fade"`` (``H0``: the initial
        entropy, default 1.0, also the entropy used before TRL has logged one).
    success_threshold : float, optional
        Reward at or above which a completion succeeds.  Required by a family defined on
        success/failure (not ``graded``, and every schedule) when the reward is real-valued:
        several reward functions, weights other than 1, or a reward function with real outputs.
    singleton : {"zero", "raw"}
        Advantage of a group left with one scored completion (the others returned ``None``).
    guard : str, path, Guard, optional
        Add :class:`GuardCallback` with this guard: a preset name (``"default"``), the path of a
        JSON rules file (:meth:`analysis.guardrails.Guard.from_spec`) or a ``Guard``.
    token_diagnostics : bool
        Log :func:`analysis.token_entropy.token_diagnostics` of every micro-batch of the loss as
        ``rlvr/token/<key>`` and the measured entropy change beside the predictions (default
        True; a few elementwise passes over the micro-batch's ``[B, T]`` tensors, no forward pass).

    Raises
    ------
    ValueError
        In ``__init__``, before any generation: an unknown family, schedule or parameter, a
        bad parameter value, ``num_generations`` below the family's smallest group,
        ``multi_objective_aggregation="normalize_then_sum"``, or a success/failure family
        without ``success_threshold`` on a weighted sum of rewards.  During training: real-valued
        rewards without ``success_threshold`` for such a family.
    """

    def __init__(self, *args: Any, advantage: str | None = None, advantage_params: dict | None = None,
                 schedule: str | None = None, schedule_params: dict | None = None,
                 success_threshold: float | None = None, singleton: str = "zero",
                 token_diagnostics: bool = True, guard: Any = None, **kwargs: Any):
        guard_callback = None if guard is None else GuardCallback(guard)  # refused before the model loads
        if not isinstance(token_diagnostics, bool):
            raise ValueError(f"token_diagnostics must be True or False, got {token_diagnostics!r}")
        self.rlvr_token_diagnostics = token_diagnostics
        self._rlvr_capture: dict | None = None      # the loss's log-probs and entropies, inside _compute_loss
        sched_params = dict(schedule_params or {})
        h0 = sched_params.pop("H0", None) if schedule == "fade" else None  # FADE's initial entropy
        self._rlvr_config = dict(advantage=advantage, advantage_params=dict(advantage_params or {}),
                                 schedule=schedule, schedule_params=sched_params,
                                 success_threshold=success_threshold, singleton=singleton, H0=h0)
        # names, parameters and values are checked before TRL loads the model
        cfg = _trainer_args(args, kwargs)
        self._rlvr_steps = self._rlvr_planned_batches(cfg)
        policy = Policy(**self._rlvr_config, steps=self._rlvr_steps)
        super().__init__(*args, **kwargs)
        self.rlvr_policy = policy
        self._rlvr_check_trainer()
        self._rlvr_entropy_cursor = 0               # entropy values of _metrics["train"] already read
        self._rlvr_entropy_pending: list[float] = []  # read by log() before TRL cleared them
        self._rlvr_rewards: torch.Tensor | None = None
        self.rlvr_entropy_trackers = {name: EntropyChangeTracker() for name in ("cui", "fade")}
        self._rlvr_token_last_step = 0              # global step of the previous training log
        self._rlvr_token_warned = False
        self.rlvr_guard_callback = guard_callback
        if guard_callback is not None:
            self.add_callback(guard_callback)

    # ----------------------------------------------------------------- checks
    @staticmethod
    def _rlvr_planned_batches(cfg: Any, max_steps: int | None = None) -> int:
        """Generation batches of a run of ``max_steps`` optimizer steps (schedules that need ``T``)."""
        steps = max_steps if max_steps is not None else getattr(cfg, "max_steps", -1)
        if cfg is None or steps is None or steps <= 0:
            return 1  # not known before train(): set from the trainer state at the first batch
        micro = steps * cfg.gradient_accumulation_steps
        per = (cfg.steps_per_generation or cfg.gradient_accumulation_steps) * cfg.num_iterations
        return max(1, math.ceil(micro / per))

    def _rlvr_check_trainer(self) -> None:
        pol = self.rlvr_policy
        pol.check_group_size(self.num_generations, what="num_generations")
        if self.args.eval_strategy != "no" and self.num_generations_eval != self.num_generations:
            pol.check_group_size(self.num_generations_eval, what="num_generations_eval")
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(f"multi_objective_aggregation must be 'sum_then_normalize' with advantage=/schedule= "
                             f"(the family computes the advantages of the weighted sum of the rewards), "
                             f"got {self.multi_objective_aggregation!r}")
        w = [float(x) for x in self.reward_weights.tolist()]
        if pol.needs_threshold and pol.success_threshold is None and (len(w) > 1 or any(x != 1.0 for x in w)):
            what = (f"the weighted sum of {len(w)} reward functions" if len(w) > 1 else "a reward function")
            graded = ", ".join(n for n, cls in registry.registry().items() if cls.graded)
            raise ValueError(f"success_threshold is required by {pol.name!r}, which is defined on success/failure "
                             f"rewards: the reward is {what} with weights {w}, real-valued; pass "
                             f"success_threshold=T (completions with reward >= T succeed) or use a family "
                             f"defined on real rewards ({graded})")

    # ------------------------------------------------------------ the batch
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rlvr_rewards = rewards_per_func  # gathered across processes: (all completions, functions)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rpf, self._rlvr_rewards = self._rlvr_rewards, None
        if rpf is None:  # a rollout path that computed no rewards (not in TRL 1.16)
            raise RuntimeError("integrations.trl: TRL produced no rewards for this batch")
        return self._rlvr_apply(output, rpf, "train" if self.model.training else "eval")

    def _rlvr_apply(self, output: dict, rpf: torch.Tensor, mode: str) -> dict:
        """Replace TRL's advantages in ``output`` (this process's rows) and in the completions
        log by the policy's, from the gathered ``rpf`` (all completions × reward functions),
        and append the diagnostics to ``self._metrics[mode]``."""
        rewards = self._rlvr_weighted_rewards(rpf)
        local = output["advantages"]
        n_local, n = local.shape[0], rewards.shape[0]
        if n != n_local * self.accelerator.num_processes:
            raise RuntimeError(f"integrations.trl: {n} gathered rewards for {self.accelerator.num_processes} "
                               f"process(es) of {n_local} completions")
        lengths = None
        if self.rlvr_policy.advantage.uses_lengths:
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            lengths = self.accelerator.gather(mask.sum(1)).detach().cpu().double().numpy()
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        if mode == "train":
            self._rlvr_sync_steps()
            A, metrics = self.rlvr_policy.step(rewards, group_size=group_size, lengths=lengths,
                                               entropy=self._rlvr_take_entropy())
        else:  # evaluation: the current advantage, the schedule does not move
            frozen = copy.copy(self.rlvr_policy)
            frozen.schedule = None
            A, metrics = frozen.step(rewards, group_size=group_size, lengths=lengths)
        start = self.accelerator.process_index * n_local
        output["advantages"] = torch.as_tensor(A[start:start + n_local], dtype=local.dtype, device=local.device)
        logged = self._logs["advantages"]  # TRL appended the advantages of all processes
        k = min(n, len(logged))
        if k == len(logged):  # the usual case: the log holds this batch only
            logged.clear()
        else:
            for _ in range(k):
                logged.pop()
        logged.extend(A[n - k:].tolist())
        for name, key in METRICS.items():
            v = metrics.get(key)
            if v is not None and math.isfinite(v):
                self._metrics[mode][name].append(float(v))
        return output

    def _rlvr_weighted_rewards(self, rewards_per_func: torch.Tensor) -> np.ndarray:
        """TRL's reward of each completion: Σ_k w_k·r_k over the reward functions that returned a
        value (``nansum``), ``NaN`` where none did."""
        r = rewards_per_func.detach().to("cpu", torch.float64).numpy()
        w = self.reward_weights.detach().to("cpu", torch.float64).numpy()
        missing = np.isnan(r).all(axis=1)
        total = np.nansum(r * w, axis=1)
        total[missing] = np.nan
        return total

    def _rlvr_sync_steps(self) -> None:
        """Give the schedule the run's number of generation batches once ``train()`` knows it."""
        if self.rlvr_policy.schedule is None:
            return
        T = self._rlvr_planned_batches(self.args, self.state.max_steps)
        if T != self._rlvr_steps:
            state = self.rlvr_policy.state_dict()
            self.rlvr_policy = Policy(**self._rlvr_config, steps=T)
            self.rlvr_policy.load_state_dict(state)
            self._rlvr_steps = T

    # ------------------------------------------------------ token diagnostics
    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        cap = self._rlvr_capture
        if cap is not None and "logps" not in cap:  # the policy's forward of the loss (the only call there)
            cap["logps"], cap["entropies"] = out[0], out[1]
        return out

    def _compute_loss(self, model, inputs):
        if not self.rlvr_token_diagnostics:
            return super()._compute_loss(model, inputs)
        self._rlvr_capture = cap = {}
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._rlvr_capture = None
        if "logps" in cap:
            self._rlvr_token_metrics(inputs, cap["logps"], cap["entropies"],
                                     "train" if self.model.training else "eval")
        return loss

    def _rlvr_token_inputs(self, inputs: dict, logps: torch.Tensor,
                           entropies: torch.Tensor | None, mode: str) -> dict[str, Any]:
        """The arguments of :func:`token_diagnostics` for one micro-batch, as TRL's loss builds them."""
        with torch.no_grad():
            logps = logps.detach()
            mask = inputs["completion_mask"]
            if inputs.get("tool_mask") is not None:
                mask = mask * inputs["tool_mask"]
            old = inputs.get("old_per_token_logps")
            old = logps if old is None else old.detach()
            adv = inputs["advantages"].detach()
            clipped = None
            if self.loss_type in _CLIPPED_LOSSES:  # TRL's is_low_clipped | is_high_clipped
                a2 = adv.unsqueeze(1) if adv.dim() == 1 else adv
                log_ratio = logps - old
                if self.importance_sampling_level == "sequence":
                    log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
                coef_1 = torch.exp(log_ratio)
                if self.args.delta is not None:
                    coef_1 = torch.clamp(coef_1, max=self.args.delta)
                clipped = (((coef_1 < 1 - self.epsilon_low) & (a2 < 0))
                           | ((coef_1 > 1 + self.epsilon_high) & (a2 > 0))).expand(logps.shape)
            lr = None
            if mode == "train":
                sched = getattr(self, "lr_scheduler", None)
                lr = float(sched.get_last_lr()[0]) if sched is not None else float(self.args.learning_rate)
        return dict(logp=old, advantages=adv, mask=mask,
                    entropy=None if entropies is None else entropies.detach(), clipped=clipped, lr=lr)

    def _rlvr_token_metrics(self, inputs: dict, logps: torch.Tensor, entropies: torch.Tensor | None,
                            mode: str) -> None:
        """Append ``rlvr/token/*`` of one micro-batch to ``self._metrics[mode]`` (the mean over
        processes of each process's value under several processes)."""
        kw = self._rlvr_token_inputs(inputs, logps, entropies, mode)
        absent = set()
        if kw["clipped"] is None:
            absent |= {"cov_logp_adv_clipped", "cov_logp_adv_unclipped"}
        if kw["entropy"] is None:
            absent.add("entropy_mean")
        if kw["lr"] is None:
            absent |= {"entropy_change_pred_fade", "entropy_change_pred_cui"}
        keys = [k for k in DIAGNOSTIC_KEYS if k not in absent]  # the same on every process
        try:
            d = _token_diagnostics(**kw)
        except ValueError as err:  # e.g. a micro-batch whose mask selects no token: nothing logged
            if not self._rlvr_token_warned:
                logger.warning("integrations.trl: token diagnostics skipped for a micro-batch: %s", err)
                self._rlvr_token_warned = True
            d = {}
        values = [float(d.get(k, math.nan)) for k in keys]
        if self.accelerator.num_processes > 1:
            t = torch.tensor(values, dtype=torch.float64, device=self.accelerator.device)
            values = self.accelerator.gather(t[None]).nanmean(0).tolist()
        metrics = self._metrics[mode]
        for k, v in zip(keys, values):
            if math.isfinite(v):
                metrics[TOKEN_PREFIX + k].append(v)

    def _rlvr_track_entropy(self) -> None:
        """At a training log: TRL's window entropy into the trackers, the measured change and the
        running correlations appended to the window's metrics (before TRL averages them)."""
        metrics = self._metrics["train"]
        ent = [float(v) for v in metrics.get("entropy", []) if math.isfinite(v)]
        if not ent:
            return
        steps = max(1, self.state.global_step - self._rlvr_token_last_step)
        self._rlvr_token_last_step = self.state.global_step
        measured = math.nan
        for name, tracker in self.rlvr_entropy_trackers.items():
            preds = [float(v) for v in metrics.get(f"{TOKEN_PREFIX}entropy_change_pred_{name}", [])
                     if math.isfinite(v)]
            # the window's optimizer steps each predicted about the mean micro-batch prediction
            p = steps * sum(preds) / len(preds) if preds else math.nan
            measured = float(tracker.update([sum(ent) / len(ent)], [p])[0])
            corr = tracker.correlation
            if math.isfinite(corr):
                metrics[f"{TOKEN_PREFIX}entropy_pred_corr_{name}"].append(corr)
        if math.isfinite(measured):
            metrics[f"{TOKEN_PREFIX}entropy_change_measured"].append(measured)

    # ---------------------------------------------------------------- entropy
    def _rlvr_unread_entropy(self) -> list[float]:
        values = self._metrics["train"].get("entropy", [])
        if len(values) < self._rlvr_entropy_cursor:  # cleared elsewhere
            self._rlvr_entropy_cursor = 0
        out = [float(v) for v in values[self._rlvr_entropy_cursor:]]
        self._rlvr_entropy_cursor = len(values)
        return out

    def _rlvr_take_entropy(self) -> float | None:
        """Mean of TRL's ``entropy`` metric since the previous generation batch (None if none)."""
        values = [v for v in self._rlvr_entropy_pending + self._rlvr_unread_entropy() if math.isfinite(v)]
        self._rlvr_entropy_pending = []
        return sum(values) / len(values) if values else None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        train = self.model.training
        if train:  # TRL clears the train metrics: keep the entropy values not read yet
            self._rlvr_entropy_pending.extend(self._rlvr_unread_entropy())
            if self.rlvr_token_diagnostics:
                self._rlvr_track_entropy()
        super().log(logs, start_time)
        if train:
            self._rlvr_entropy_cursor = 0

    # ------------------------------------------------------------ checkpoints
    def _rlvr_state(self) -> dict[str, Any]:
        pending = self._rlvr_entropy_pending + [
            float(v) for v in self._metrics["train"].get("entropy", [])[self._rlvr_entropy_cursor:]]
        return {"policy": self.rlvr_policy.state_dict(), "name": self.rlvr_policy.name,
                "generation_batches": self._rlvr_steps, "entropy_pending": pending,
                "entropy_trackers": {k: t.state_dict() for k, t in self.rlvr_entropy_trackers.items()},
                "token_last_step": self._rlvr_token_last_step}

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            write_json(os.path.join(self._get_output_dir(trial=trial), folder, STATE_FILE), self._rlvr_state())

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            if self.rlvr_policy.schedule is not None:
                logger.warning("%s has no %s: schedule %r starts from its initial state",
                               checkpoint, STATE_FILE, self.rlvr_policy.name)
            return
        doc = read_json_object(path, f"resume_from_checkpoint: file {path!r}")
        try:
            self.rlvr_policy.load_state_dict(doc["policy"])
            self._rlvr_entropy_pending = [float(v) for v in doc.get("entropy_pending", [])]
            for k, st in doc.get("entropy_trackers", {}).items():  # absent in older checkpoints
                if k in self.rlvr_entropy_trackers:
                    self.rlvr_entropy_trackers[k].load_state_dict(st)
            self._rlvr_token_last_step = int(doc.get("token_last_step", self._rlvr_token_last_step))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"resume_from_checkpoint: {path!r} does not hold the state of "
                             f"{self.rlvr_policy.name!r}: {err}") from None
        self._rlvr_entropy_cursor = 0


# ------------------------------------------------------------------ guardrails
def guard_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """One training log of TRL (``on_log``'s ``logs``, a ``log_history`` entry) in the guard's
    vocabulary: :func:`analysis.audit.metric_logs.live_metrics` with TRL's map (``entropy``,
    ``frac_reward_zero_std`` → ``frac_zero_std``, ``sampling/importance_sampling_ratio/max`` →
    ``seq_is_ratio_max``, this adapter's ``rlvr/m_S``, ``rlvr/sign_ratio``,
    ``rlvr/token/cov_logp_adv``, ...) and the adapters' ``rlvr/frac_all_correct``,
    ``rlvr/frac_all_wrong`` and ``rlvr/solve_rate`` without their prefix; a value that is not a
    number is left out.

    >>> guard_metrics({"entropy": 2.0, "frac_reward_zero_std": 0.5, "rlvr/m_S": 0.3, "loss": 0.1})
    {'entropy': 2.0, 'frac_zero_std': 0.5, 'loss': 0.1, 'm_S': 0.3}
    """
    return live_metrics(logs, "trl")


def _as_guard(guard: Any) -> Guard:
    if isinstance(guard, Guard):
        return guard
    if isinstance(guard, (str, os.PathLike)):
        return Guard.from_spec(os.fspath(guard))
    raise ValueError(f"guard: expected a preset name, the path of a rules file or a Guard, got {guard!r}")


def _is_training_log(logs: dict[str, Any]) -> bool:
    """A per-step training log (not an evaluation's ``eval_*`` nor the end-of-train summary)."""
    return not any(k.startswith("eval_") or k in ("train_runtime", "train_loss") for k in logs)


class GuardCallback(TrainerCallback):
    """Runs a :class:`analysis.guardrails.Guard` on TRL's training logs.

    At each training log (``on_log``; evaluation logs and the end-of-train summary are skipped)
    the metrics, in the guard's vocabulary (:func:`guard_metrics`), go to ``guard.update(
    state.global_step, metrics)``.  Each alert of a rule that starts firing is logged (warning);
    with the action ``alert`` or ``stop`` it is also appended to ``OUTPUT_DIR/rlvr_alerts.jsonl``
    (:func:`analysis.guardrails.append_alerts`, main process only; read back by
    :func:`analysis.audit.trainer_log.read_alerts`); with ``stop`` the callback sets
    ``control.should_save`` and ``control.should_training_stop``: transformers calls ``on_log``
    before its save in ``_maybe_log_save_evaluate``, so ``checkpoint-N`` of that step is written and
    the run ends cleanly.  :attr:`stopped` holds the alerts that stopped it.

    On ``train(resume_from_checkpoint=...)`` the checkpoint's ``log_history`` is replayed
    (:meth:`Guard.replay`: a rule firing at the checkpoint counts as reported, so the run goes on)
    and alert lines of later steps are dropped (:func:`analysis.guardrails.drop_alerts_after`).
    Every process runs the same guard on the same (reduced) logs, so all of them stop together.

    Parameters
    ----------
    guard : Guard, str or path
        A ``Guard``, a preset name (``"default"``) or the path of a JSON rules file.
    """

    def __init__(self, guard: Any = "default"):
        self.guard = _as_guard(guard)
        self.stopped: list = []
        self._last_step = -1

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0 and self._last_step < 0:  # resumed from a checkpoint
            rows = [{**guard_metrics(h), "step": int(h["step"])} for h in state.log_history
                    if "step" in h and int(h["step"]) <= state.global_step and _is_training_log(h)]
            self.guard.replay(rows)
            self._last_step = state.global_step
            if state.is_world_process_zero:
                drop_alerts_after(args.output_dir, state.global_step)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not _is_training_log(logs) or state.global_step <= self._last_step:
            return control
        self._last_step = state.global_step
        alerts = self.guard.update(state.global_step, guard_metrics(logs))
        if not alerts:
            return control
        if state.is_world_process_zero:
            for a in alerts:
                logger.warning("guard (%s) at step %d: %s: %s", a.action, a.step, a.rule, a.message)
            if self.guard.action in ("alert", "stop"):
                os.makedirs(args.output_dir, exist_ok=True)
                append_alerts(args.output_dir, alerts)
        if self.guard.action == "stop":
            self.stopped = alerts
            control.should_save = True
            control.should_training_stop = True
        return control
