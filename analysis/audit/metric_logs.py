"""Trainers' metric logs (one row per optimisation step), read into one vocabulary.

:func:`read_metrics` turns the per-step metric log a trainer wrote into a :class:`MetricLog`: a
pandas DataFrame with one row per step and the trainer's own metric names mapped onto the
columns of :data:`VOCABULARY` (``entropy``, ``kl``, ``clip_frac``, ``mismatch_kl``,
``reward_mean``, ...), plus the validation metrics as ``val/<name>``.  One reader per format
(:data:`METRIC_FORMATS`); the real names, read from the trainers' sources, are tabulated in
``docs/metric_logs.md``:

* ``"trl"`` — TRL ``GRPOTrainer`` (transformers ``Trainer``): ``trainer_state.json``
  (``{"log_history": [{"step": N, ...}, ...]}``) in the output folder and in every
  ``checkpoint-N/``; the files are merged (the same value logged in several must agree; where
  they disagree the newest checkpoint's is kept and a note says so);
* ``"verl"`` — verl's ``trainer.logger=[file]`` backend (``verl/utils/tracking.py``
  ``FileLogger``): ``$VERL_FILE_LOGGER_ROOT/{project}/{experiment}.jsonl``, lines
  ``{"step": N, "data": {...}}``;
* ``"prime-rl"`` — the file monitor (``src/prime_rl/monitors/file.py``): ``{run_dir}/metrics.jsonl``,
  lines ``{"step": N, "time": t, ...}`` appended by both the trainer and the orchestrator;
* ``"wandb"`` — W&B run-history exports: the UI's panel "Export CSV" (``Step`` or
  ``train/global_step``, ``<run> - <metric>`` and its ``__MIN``/``__MAX`` columns) and
  ``run.history()`` dumps as CSV or JSON lines (``_step``, ``_runtime``, ``_timestamp``); the
  names are those of the trainer that logged them (TRL's with ``train/``/``eval/`` prefixes),
  recognised with the three maps above;
* ``"table"`` — any CSV or JSON-lines file with a step column (``step``, ``_step``,
  ``global_step``, ``Step``, ``trainer/global_step``); columns named like :data:`VOCABULARY` or
  ``val/<name>`` are taken as they are, the others through ``metric_map``.

Several records of one step (train and eval entries, W&B keys logged separately, the trainer
and orchestrator of prime-rl) merge into one row; a column with two different values for one
step keeps the last one read and adds a note.  A file that does not parse, a record without a
valid step, a non-number in a mapped column, a log without metric rows: ``ValueError`` naming
``FILE:LINE``.

Examples
--------
>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> history = [{"step": 1, "entropy": 0.7, "reward": 0.25, "frac_reward_zero_std": 0.5, "loss": 0.01},
...            {"step": 1, "eval_reward": 0.3, "eval_runtime": 2.0},
...            {"step": 2, "entropy": 0.6, "reward": 0.5, "frac_reward_zero_std": 0.25, "loss": 0.02},
...            {"step": 2, "train_runtime": 9.0, "train_loss": 0.015}]
>>> _ = (d / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}, indent=2))
>>> m = read_metrics(d)
>>> m.source["format"], m.source["columns"]["frac_zero_std"]
('trl', 'frac_reward_zero_std')
>>> m.frame
   step  entropy  frac_zero_std  reward_mean  loss  val/reward_mean
0     1      0.7           0.50         0.25  0.01              0.3
1     2      0.6           0.25         0.50  0.02              NaN
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlvr_plumbing import checks

from .readers import _check_steps  # the one check of steps=(first, last), shared with the rollout readers
from .trainer_log import ALERTS_FILE

__all__ = ["METRIC_FORMATS", "VOCABULARY", "TRAINER_NAMES", "ADAPTER_NAMES", "live_metrics", "MetricLog",
           "find_metric_files", "is_metric_file", "detect_metric_format", "read_metrics", "parse_metric_map"]

#: the formats :func:`read_metrics` knows
METRIC_FORMATS = ("trl", "verl", "prime-rl", "wandb", "table")

#: the canonical columns of :attr:`MetricLog.frame` (after ``step``), in order, with their meaning
VOCABULARY: dict[str, str] = {
    "entropy": "mean token entropy of the policy on its own rollouts (nats)",
    "kl": "KL divergence of the policy to the reference policy (the trainer's estimator, per token)",
    "ppo_kl": "approximate KL from the old (behaviour) policy to the updated policy, per token",
    "clip_frac": "fraction of tokens whose ratio was clipped (or masked by a trust region), both sides",
    "clip_frac_low": "fraction of tokens clipped at the lower bound (ratio < 1 - eps_low, negative advantage)",
    "clip_frac_high": "fraction of tokens clipped at the upper bound (ratio > 1 + eps_high, positive advantage)",
    "clip_frac_dual": "fraction of tokens hit by the dual-clip bound (ratio > c, negative advantage)",
    "is_ratio_mean": "mean train/inference importance-sampling ratio pi_train/pi_infer, token level",
    "is_ratio_min": "smallest train/inference importance-sampling ratio, token level",
    "is_ratio_max": "largest train/inference importance-sampling ratio, token level",
    "seq_is_ratio_mean": "mean over sequences of the per-sequence train/inference IS weight",
    "seq_is_ratio_min": "smallest per-sequence train/inference IS weight",
    "seq_is_ratio_max": "largest per-sequence train/inference IS weight",
    "mismatch_kl": "KL between the inference engine's and the trainer's token log-probs (k3 estimator), mean",
    "mismatch_kl_max": "largest per-token train/inference mismatch KL (k3 estimator)",
    "logp_diff_mean": "mean |log pi_train - log pi_infer| over tokens",
    "logp_diff_max": "largest |log pi_train - log pi_infer| over tokens",
    "frac_zero_std": "fraction of groups whose rewards are all equal (no learning signal)",
    "reward_mean": "mean reward of the step's training rollouts",
    "reward_std": "standard deviation of the rewards of the step's training rollouts",
    "length_mean": "mean completion length (tokens)",
    "length_max": "longest completion (tokens)",
    "length_clip_frac": "fraction of completions cut at the maximum length",
    "loss": "the training loss the trainer reports",
    "grad_norm": "gradient norm (before clipping)",
    "lr": "learning rate",
    "m_S": "gradient mass on successes, mean over groups (the adapters' rlvr/m_S; FADE Eq. 3)",
    "m_F": "gradient mass on failures, mean over groups (rlvr/m_F)",
    "sign_ratio": "m_S / m_F (rlvr/sign_ratio)",
    "cov_logp_adv": "centred token covariance of log pi and the advantage (analysis.token_entropy; Cui et al.)",
    "entropy_drift_fade": "FADE's drift A_bar*H - Cov(A, log pi) per unit learning rate (analysis.token_entropy)",
}

#: where a column may be named: ``step`` and these (in this order of preference)
_STEP_COLUMNS = ("step", "_step", "global_step", "Step", "trainer/global_step")
#: the step column of W&B exports, in order of preference: TRL logs ``train/global_step`` as the
#: x axis (``define_metric``), its ``_step`` counts ``wandb.log`` calls and is not the step
_WANDB_STEP_COLUMNS = ("train/global_step", "trainer/global_step", "_step", "Step", "step", "global_step")
_WANDB_BOOKKEEPING = ("_step", "_runtime", "_timestamp", "_wandb")
#: columns of rollout logs (``readers.read``): a file with one of them is no metric log
_ROLLOUT_MARKERS = frozenset({"group", "prompt", "completion", "completions", "input", "output", "gts", "uid",
                              "response", "responses", "advantage", "messages", "trace", "traces", "task"})
_NULL_WORDS = ("", "nan", "-nan", "+nan", "null", "none", "na", "n/a")
_TEXT_EXT = (".jsonl", ".csv")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_MAX_SNIFF = 1 << 16
# the working columns of the long table (no trainer names a metric like these)
_STEP, _FILE, _LINE, _PRESENT = "\x00step", "\x00file", "\x00line", "\x00present"


# ============================================================== the trainers' names
# Each map: our column -> the trainer's names, the first one present in the log is used.
# A name "re:<pattern>" matches several (one of them must be present, else a note).

#: TRL 1.16 trl/trainer/grpo_trainer.py (``self._metrics[mode][...]``, ``log``) and transformers
#: 5.24 trainer.py (``_maybe_log_save_evaluate``: ``loss``, ``grad_norm``, ``learning_rate``)
_TRL: dict[str, tuple[str, ...]] = {
    "entropy": ("entropy",),
    "kl": ("kl",),
    "clip_frac": ("clip_ratio/region_mean", "cispo_clip_ratio"),
    "clip_frac_low": ("clip_ratio/low_mean",),
    "clip_frac_high": ("clip_ratio/high_mean",),
    # per sequence in TRL's default vllm_importance_sampling_mode="sequence_mask" (grpo_config.py);
    # per token in the token_* modes, which the log does not tell (a note says so)
    "seq_is_ratio_mean": ("sampling/importance_sampling_ratio/mean",),
    "seq_is_ratio_min": ("sampling/importance_sampling_ratio/min",),
    "seq_is_ratio_max": ("sampling/importance_sampling_ratio/max",),
    "logp_diff_mean": ("sampling/sampling_logp_difference/mean",),
    "logp_diff_max": ("sampling/sampling_logp_difference/max",),
    "frac_zero_std": ("frac_reward_zero_std",),
    "reward_mean": ("reward",),
    "reward_std": ("reward_std",),
    "length_mean": ("completions/mean_length",),
    "length_max": ("completions/max_length",),
    "length_clip_frac": ("completions/clipped_ratio",),
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
    "lr": ("learning_rate",),
    # this toolkit's TRL adapter (integrations.trl: rlvr/* masses, rlvr/token/* diagnostics)
    "m_S": ("rlvr/m_S",),
    "m_F": ("rlvr/m_F",),
    "sign_ratio": ("rlvr/sign_ratio",),
    "cov_logp_adv": ("rlvr/token/cov_logp_adv",),
    "entropy_drift_fade": ("rlvr/token/entropy_drift_fade",),
}
#: transformers' ``speed_metrics`` of an evaluation: not validation metrics
_TRL_EVAL_SPEED = ("runtime", "samples_per_second", "steps_per_second")

#: verl 0.9.1: verl/trainer/ppo/core_algos.py (``actor/pg_clipfrac``, ``actor/ppo_kl``,
#: ``actor/pg_clipfrac_lower`` = the dual-clip fraction), ray_trainer.py (``actor/entropy``,
#: ``actor/reward_kl_penalty``, ``val-core``/``val-aux``), workers/utils/losses.py (``kl_loss``),
#: workers/engine_workers.py (``loss``, ``grad_norm``, ``lr``; prefixed ``actor/`` by
#: ``rename_dict``), trainer/ppo/metric_utils.py (``critic/score/mean``, ``response_length/*``),
#: trainer/ppo/rollout_corr_helper.py (``rollout_corr/*``; ``actor/rollout_corr/*`` in bypass mode)
_VERL: dict[str, tuple[str, ...]] = {
    "entropy": ("actor/entropy",),
    "kl": ("actor/kl_loss", "actor/reward_kl_penalty"),
    "ppo_kl": ("actor/ppo_kl",),
    "clip_frac": ("actor/pg_clipfrac",),
    "clip_frac_dual": ("actor/pg_clipfrac_lower",),
    "is_ratio_mean": ("rollout_corr/rollout_is_mean", "actor/rollout_corr/rollout_is_mean"),
    "is_ratio_min": ("rollout_corr/rollout_is_min", "actor/rollout_corr/rollout_is_min"),
    "is_ratio_max": ("rollout_corr/rollout_is_max", "actor/rollout_corr/rollout_is_max"),
    "seq_is_ratio_mean": ("rollout_corr/rollout_is_seq_mean", "actor/rollout_corr/rollout_is_seq_mean"),
    "seq_is_ratio_min": ("rollout_corr/rollout_is_seq_min", "actor/rollout_corr/rollout_is_seq_min"),
    "seq_is_ratio_max": ("rollout_corr/rollout_is_seq_max", "actor/rollout_corr/rollout_is_seq_max"),
    "mismatch_kl": ("rollout_corr/k3_kl", "actor/rollout_corr/k3_kl"),
    "reward_mean": ("critic/score/mean",),
    "length_mean": ("response_length/mean",),
    "length_max": ("response_length/max",),
    "length_clip_frac": ("response_length/clip_ratio",),
    "loss": ("actor/loss",),
    "grad_norm": ("actor/grad_norm",),
    "lr": ("actor/lr",),
    # this toolkit's verl plugin (integrations.verl): the estimators' masses, added to each step's
    # log by its Tracking hook, and the policy loss rlvr_diagnosed's token diagnostics (verl
    # prefixes actor metrics with actor/)
    "m_S": ("rlvr/m_S",),
    "m_F": ("rlvr/m_F",),
    "sign_ratio": ("rlvr/sign_ratio",),
    "cov_logp_adv": ("actor/rlvr/token/cov_logp_adv", "rlvr/token/cov_logp_adv"),
    "entropy_drift_fade": ("actor/rlvr/token/entropy_drift_fade", "rlvr/token/entropy_drift_fade"),
}

#: prime-rl (github PrimeIntellect-ai/prime-rl 559b447): src/prime_rl/trainer/rl/train.py
#: (``entropy/all``, ``mismatch_kl/all``, ``loss``, ``optim/lr``, ``optim/grad_norm``; statistics
#: ``/mean``, ``/max`` from trainer/utils.py ``compute_stats``), trainer/rl/loss.py (``is_masked``,
#: ``is_masked_low``, ``is_masked_high``: DPPO trust-region masking), orchestrator/metrics.py and
#: orchestrator.py (``train/agg/{all,effective}/[<agent>/]...``, ``eval/<env>/...``)
_PRIME: dict[str, tuple[str, ...]] = {
    "entropy": ("entropy/all/mean",),
    "clip_frac": ("is_masked/mean",),
    "clip_frac_low": ("is_masked_low/mean",),
    "clip_frac_high": ("is_masked_high/mean",),
    "mismatch_kl": ("mismatch_kl/all/mean",),
    "mismatch_kl_max": ("mismatch_kl/all/max",),
    "reward_mean": (r"re:train/agg/effective/[^/]+/reward/mean",),
    "length_mean": ("train/agg/effective/num_output_tokens/mean",),
    "length_max": ("train/agg/effective/num_output_tokens/max",),
    "length_clip_frac": (r"re:train/agg/effective/[^/]+/is_truncated/mean",),
    "loss": ("loss/mean",),
    "grad_norm": ("optim/grad_norm",),
    "lr": ("optim/lr",),
}

#: TRL's names as its ``WandbCallback`` logs them (transformers ``rewrite_logs``: ``train/``, ``eval/``)
_TRL_WANDB = {ours: tuple("train/" + n for n in names) for ours, names in _TRL.items()}
_TRAINER_MAPS = {"trl": _TRL, "verl": _VERL, "prime-rl": _PRIME}
#: each trainer's names of our columns (ours -> theirs, first present wins), read-only; the guard
#: hooks of :mod:`integrations` (TRL and verl) map a live log with it through :func:`live_metrics`
TRAINER_NAMES = _TRAINER_MAPS

#: columns outside :data:`VOCABULARY` that the guardrails read (:mod:`analysis.guardrails`:
#: ``zero_signal``), as this toolkit's adapters log them in every trainer (``integrations.trl``,
#: ``integrations.verl``); :func:`live_metrics` adds them to a trainer's map
ADAPTER_NAMES: dict[str, tuple[str, ...]] = {
    "frac_all_correct": ("rlvr/frac_all_correct",),
    "frac_all_wrong": ("rlvr/frac_all_wrong",),
    "solve_rate": ("rlvr/solve_rate",),
}


def live_metrics(logs: Mapping[str, Any], trainer: str) -> dict[str, float]:
    """One live metric record of ``trainer`` (the dict it hands its loggers at one step) in our
    columns: :data:`TRAINER_NAMES` ``[trainer]``, then :data:`ADAPTER_NAMES`; for each column the
    first of its names present in ``logs`` whose value is a number (else the column is left out).

    What the guard hooks of :mod:`integrations` feed :meth:`analysis.guardrails.Guard.update`.

    Parameters
    ----------
    logs : mapping
        The trainer's metric names to values (numbers, 0-d arrays; others are skipped).
    trainer : str
        One of ``"trl"``, ``"verl"``, ``"prime-rl"``.

    Examples
    --------
    >>> live_metrics({"actor/entropy": 1.5, "rollout_corr/rollout_is_seq_max": 4.0, "rlvr/m_S": 0.2,
    ...               "rlvr/frac_all_wrong": 0.25, "timing_s/step": 3.0}, "verl")
    {'entropy': 1.5, 'seq_is_ratio_max': 4.0, 'm_S': 0.2, 'frac_all_wrong': 0.25}
    """
    checks.choice("trainer", trainer, tuple(_TRAINER_MAPS))
    out: dict[str, float] = {}
    for ours, names in (*_TRAINER_MAPS[trainer].items(), *ADAPTER_NAMES.items()):
        for name in names:
            if name.startswith("re:") or name not in logs:
                continue
            try:
                out[ours] = float(logs[name])
            except (TypeError, ValueError):
                continue
            break
    return out


def _val_trl(name: str) -> str | None:
    if not name.startswith("eval_") or name[5:] in _TRL_EVAL_SPEED or len(name) == 5:
        return None
    return "val/" + _trl_canonical(name[5:])


def _val_trl_wandb(name: str) -> str | None:
    if not name.startswith("eval/") or name[5:] in _TRL_EVAL_SPEED or len(name) == 5:
        return None
    return "val/" + _trl_canonical(name[5:])


def _trl_canonical(rest: str) -> str:
    for ours, names in _TRL.items():
        if rest in names:
            return ours
    return rest


def _val_verl(name: str) -> str | None:
    for pfx in ("val-core/", "val-aux/"):
        if name.startswith(pfx) and len(name) > len(pfx):
            return "val/" + name[len(pfx):]
    return None


def _val_prime(name: str) -> str | None:
    return "val/" + name[5:] if name.startswith("eval/") and len(name) > 5 else None


def _val_table(name: str) -> str | None:
    return name if name.startswith("val/") and len(name) > 4 else None


# (built-in map, validation rule) of each trainer, as its own log names them and through W&B
_RULES = {
    "trl": (_TRL, _val_trl),
    "verl": (_VERL, _val_verl),
    "prime-rl": (_PRIME, _val_prime),
    "wandb:trl": (_TRL_WANDB, _val_trl_wandb),
    "wandb:verl": (_VERL, _val_verl),
    "wandb:prime-rl": (_PRIME, _val_prime),
    "table": ({ours: (ours,) for ours in VOCABULARY}, _val_table),
}


# ============================================================== the result
@dataclass
class MetricLog:
    """A run's metric log in the canonical vocabulary (see the module docstring).

    Attributes
    ----------
    frame : pandas.DataFrame
        One row per step, sorted, steps unique: ``step`` (int64), then the columns of
        :data:`VOCABULARY` the log has (float64, in that order), then ``val/<name>`` (float64,
        sorted by name).  NaN where a step did not log a metric.
    source : dict
        ``format``; ``paths`` (the files read); ``columns`` (``{ours: theirs}``); ``unmapped``
        (their metric names left out); ``notes`` (sentences a report prints); ``trainer`` (the
        trainer whose names were recognised: ``"trl"``, ``"verl"``, ``"prime-rl"`` or ``None``).
    """

    frame: pd.DataFrame
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        """The metric columns of :attr:`frame` (all but ``step``)."""
        return [c for c in self.frame.columns if c != "step"]

    def __repr__(self) -> str:
        steps = self.frame["step"]
        span = f"steps {int(steps.min())}..{int(steps.max())}" if len(steps) else "no steps"
        return (f"MetricLog({self.source.get('format')!r}, {len(self.frame):,} steps ({span}), "
                f"metrics: {', '.join(self.metrics) or 'none'})")


# ============================================================== metric_map
def parse_metric_map(text_or_items: Any) -> dict[str, str]:
    """``{theirs: ours}`` from ``"theirs=ours,theirs2=ours2"``, a list of such items or a mapping.

    ``ours`` must be a column of :data:`VOCABULARY` or ``val/<name>``; one of their names maps
    to one of ours, and two of theirs never to the same one.  ``None`` or ``""``: ``{}``.

    Examples
    --------
    >>> parse_metric_map("my_entropy=entropy, acc=val/acc")
    {'my_entropy': 'entropy', 'acc': 'val/acc'}
    >>> parse_metric_map(["a=kl", "b=lr"])
    {'a': 'kl', 'b': 'lr'}
    >>> parse_metric_map("a=entropie")
    Traceback (most recent call last):
    ...
    ValueError: metric_map: 'entropie' (in 'a=entropie') is not one of our columns: entropy, kl, ppo_kl, ...
    """
    if text_or_items is None:
        return {}
    if isinstance(text_or_items, Mapping):
        pairs = [(str(k), str(v), f"{k}={v}") for k, v in text_or_items.items()]
    else:
        if isinstance(text_or_items, str):
            items = [text_or_items]
        elif isinstance(text_or_items, Iterable):
            items = list(text_or_items)
        else:
            raise ValueError(f"metric_map must be 'theirs=ours,...', a list of such items or a dict, "
                             f"got {text_or_items!r}")
        pairs = []
        for item in items:
            if not isinstance(item, str):
                raise ValueError(f"metric_map: items must be strings 'theirs=ours', got {item!r}")
            for part in item.split(","):
                if not part.strip():
                    continue
                if "=" not in part:
                    raise ValueError(f"metric_map: {part.strip()!r} is not THEIRS=OURS (e.g. 'my_entropy=entropy')")
                theirs, ours = part.rsplit("=", 1)
                pairs.append((theirs, ours, part.strip()))
    out: dict[str, str] = {}
    for theirs, ours, shown in pairs:
        theirs, ours = theirs.strip(), ours.strip()
        if not theirs:
            raise ValueError(f"metric_map: {shown!r} names no column of the log before '='")
        if ours not in VOCABULARY and not (ours.startswith("val/") and len(ours) > 4):
            shown_vocab = ", ".join(list(VOCABULARY)[:3])
            raise ValueError(f"metric_map: {ours!r} (in {shown!r}) is not one of our columns: {shown_vocab}, ... "
                             f"(the full list is in docs/metric_logs.md) or val/<name>")
        if theirs in out and out[theirs] != ours:
            raise ValueError(f"metric_map: {theirs!r} is mapped twice ({out[theirs]!r} and {ours!r})")
        for t, o in out.items():
            if o == ours and t != theirs:
                raise ValueError(f"metric_map: {t!r} and {theirs!r} both map to {ours!r}")
        out[theirs] = ours
    return out


# ============================================================== files and formats
def _typed(paths: Any, arg: str) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    try:
        typed = [os.fspath(p) for p in paths]
    except TypeError:
        raise ValueError(f"{arg} must be a path or a list of paths, got {paths!r}") from None
    if not typed:
        raise ValueError(f"{arg} must name at least one file or directory, got none")
    for t in typed:
        if not Path(t).exists():
            raise ValueError(f"{arg}: {t!r} does not exist")
    return typed


def _natural(p: Path) -> tuple:
    m = re.search(r"(\d+)", p.name)
    return (int(m.group(1)) if m else -1, p.name)


def _head(path: Path, n: int = _MAX_SNIFF) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(n).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _first_record(path: Path) -> dict | list[str] | None:
    """The first JSON object of a ``.jsonl`` file, or the header of a ``.csv`` (``None``: neither)."""
    suffix = path.suffix.lower()
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            if suffix == ".csv":
                try:
                    return next(csv.reader(fh))
                except (StopIteration, csv.Error):
                    return None
            for _, line in zip(range(1000), fh):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        return None
                    return obj if isinstance(obj, dict) else None
    except OSError:
        return None
    return None


def _file_format(path: Path) -> str | None:
    """The metric format of one file from its name and first record (``None``: no metric log)."""
    path = Path(path)
    if not path.is_file() or path.name.startswith("."):
        return None
    suffix = path.suffix.lower()
    if suffix == ".json":
        # TRL's trainer_state.json (json.dumps(sort_keys=True): "log_history" comes early); rlvr-train's
        # own checkpoint-N/trainer_state.json holds no log_history and is not a metric log
        return "trl" if '"log_history"' in _head(path) else None
    if suffix not in _TEXT_EXT:
        return None
    if path.name in ("traces.jsonl", ALERTS_FILE):  # prime-rl rollouts; guardrail records (trainer_log)
        return None
    first = _first_record(path)
    if not first:
        return None
    keys = list(first)
    if suffix == ".jsonl" and set(keys) == {"step", "data"} and isinstance(first["data"], dict):
        return "verl"
    if _ROLLOUT_MARKERS & set(keys):
        return None
    if not any(c in keys for c in _STEP_COLUMNS + _WANDB_STEP_COLUMNS):
        return None
    if suffix == ".jsonl" and "step" in first and "time" in first and (
            path.name == "metrics.jsonl" or any(k.startswith(_PRIME_PREFIXES) for k in keys)):
        return "prime-rl"
    if any(k in keys for k in ("_step", "_runtime", "_timestamp", "train/global_step")) or \
            any(k.endswith(("__MIN", "__MAX")) or " - " in k for k in keys):
        return "wandb"
    return "table"


_PRIME_PREFIXES = ("entropy/all/", "mismatch_kl/all/", "optim/", "train/agg/", "progress/", "off_policy/",
                   "dispatcher/", "perf/throughput", "time/wait_for_")


def is_metric_file(path: Any) -> bool:
    """Whether ``path`` is a metric log of some format, told from its name and first record.

    A JSON file with ``"log_history"`` (TRL's ``trainer_state.json``); a ``.jsonl`` or ``.csv``
    file whose first record has a step column and no column of a rollout log (``group``,
    ``prompt``, ``completion``, ``input``, ``output``, ``uid``, ...).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "m.csv").write_text("step,my_entropy\\n1,0.5\\n")
    >>> _ = (d / "r.csv").write_text("step,group,reward\\n1,0,1\\n")
    >>> is_metric_file(d / "m.csv"), is_metric_file(d / "r.csv")
    (True, False)
    """
    return _file_format(Path(path)) is not None


def _folder_files(d: Path) -> list[Path]:
    own = sorted((q for q in d.iterdir() if q.is_file()), key=_natural)
    out = [q for q in own if _file_format(q) is not None]
    # one log written twice (rlvr-train's metrics.jsonl and metrics.csv): the JSON lines only
    stems = {q.stem for q in out if q.suffix.lower() == ".jsonl"}
    out = [q for q in out if not (q.suffix.lower() == ".csv" and q.stem in stems)]
    ckpts = sorted((int(m.group(1)), q) for q in d.iterdir() if q.is_dir() and (m := _CHECKPOINT.match(q.name)))
    out += [q / "trainer_state.json" for _, q in ckpts if _file_format(q / "trainer_state.json") is not None]
    return out


def find_metric_files(paths: Any, *, arg: str = "PATH") -> list[Path]:
    """The metric-log files among ``paths`` (files and folders); ``[]`` if there are none.

    A file counts when :func:`is_metric_file` says so.  A folder is searched for its own metric
    files (``trainer_state.json``, verl's ``{experiment}.jsonl``, prime-rl's ``metrics.jsonl``,
    W&B exports, tables) and for ``checkpoint-N/trainer_state.json`` (TRL), not deeper: rollout
    logs (``completions/``, ``rollouts/``, verl's ``{step}.jsonl`` dumps, rollout tables) are not
    metric logs.  Raises ``ValueError`` only for a path that does not exist.
    """
    out: list[Path] = []
    for t in _typed(paths, arg):
        p = Path(t)
        found = _folder_files(p) if p.is_dir() else ([p] if _file_format(p) is not None else [])
        out += [q for q in found if q not in out]
    return out


def _listing(by_format: dict[str, list[str]]) -> str:
    parts = []
    for f, files in sorted(by_format.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        parts.append(f"{f}: {len(files)} file{'s' if len(files) != 1 else ''} ({shown})")
    return "; ".join(parts)


def detect_metric_format(files: Any, *, arg: str = "metrics") -> str:
    """The format (one of :data:`METRIC_FORMATS`) of metric-log files; refuses a mix of formats
    and files of no format with a ``ValueError`` that names them.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "exp.jsonl").write_text('{"step": 1, "data": {"actor/entropy": 0.5}}\\n')
    >>> detect_metric_format([d / "exp.jsonl"])
    'verl'
    """
    typed = _typed(files, arg)
    by_format: dict[str, list[str]] = {}
    for t in typed:
        f = _file_format(Path(t))
        if f is None:
            raise ValueError(f"{arg}: cannot tell the metric-log format of {t!r} (none of "
                             f"{', '.join(METRIC_FORMATS)} matches its name and first record); "
                             "pass format=... (--metric-format)")
        by_format.setdefault(f, []).append(t)
    if len(by_format) > 1:
        raise ValueError(f"{arg}: the metric logs mix formats: {_listing(by_format)}; read one run at a time, "
                         "or pass format=... (--metric-format)")
    return next(iter(by_format))


# ============================================================== parsing
@dataclass
class _Part:
    """One file's records: ``rows`` (dicts) or ``table`` (a CSV's strings), their steps and lines."""

    path: Path
    keys: dict[str, None]
    lines: list[int]
    steps: list[Any] | pd.Series
    rows: list[dict] | None = None
    table: pd.DataFrame | None = None
    rank: tuple = ()
    step_key: str = "step"
    text: str | None = None  # a trainer_state.json: its text and each entry's span, to place a key
    spans: list[tuple[int, int]] | None = None

    def line_of(self, j: int, key: str) -> int:
        """The line of ``key`` in record ``j`` (the record's line where it cannot be placed)."""
        if self.text is None or self.spans is None:
            return self.lines[j]
        start, end = self.spans[j]
        at = self.text.find(json.dumps(key) + ":", start, end)
        return self.lines[j] + self.text.count("\n", start, at) if at >= 0 else self.lines[j]


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}"


def _read_text(path: Path, arg: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{arg}: {path}:1: not UTF-8 text ({err.reason})") from None


def _jsonl_records(path: Path, arg: str) -> list[tuple[int, dict]]:
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{arg}: {_where(path, lineno)}: not a valid JSON line ({err})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{arg}: {_where(path, lineno)}: a metrics line must be a JSON object, "
                                 f"got {type(obj).__name__}")
            out.append((lineno, obj))
    return out


def _parse_trl(path: Path, arg: str) -> _Part:
    text = _read_text(path, arg)
    try:
        doc = json.loads(text)
    except ValueError as err:
        line = getattr(err, "lineno", 1)
        raise ValueError(f"{arg}: {_where(path, line)}: not valid JSON ({err})") from None
    if not isinstance(doc, dict) or "log_history" not in doc:
        raise ValueError(f"{arg}: {_where(path, 1)}: not a TRL/transformers trainer_state.json (no 'log_history')")
    history = doc["log_history"]
    m = re.search(r'"log_history"\s*:\s*\[', text)
    hist_line = text.count("\n", 0, m.start()) + 1 if m else 1
    if not isinstance(history, list):
        raise ValueError(f"{arg}: {_where(path, hist_line)}: 'log_history' must be a list of entries, "
                         f"got {type(history).__name__}")
    placed = _array_lines(text, m.end(), len(history)) if m else None
    lines, spans = placed if placed else ([hist_line] * len(history), None)  # else: the line of log_history
    part = _Part(path=path, keys={}, lines=[], steps=[], rows=[], text=text if spans else None,
                 spans=[] if spans else None)
    for j, (entry, line) in enumerate(zip(history, lines)):
        if not isinstance(entry, dict):
            raise ValueError(f"{arg}: {_where(path, line)}: a log_history entry must be an object, got {entry!r}")
        if "train_runtime" in entry:  # the run summary of Trainer.train (train_loss, total_flos, ...)
            continue
        if "step" not in entry:
            raise ValueError(f"{arg}: {_where(path, line)}: log_history entry without 'step' "
                             f"(keys: {', '.join(list(entry)[:6])})")
        metrics = {k: v for k, v in entry.items() if k not in ("step", "epoch")}
        if not metrics:
            continue
        part.rows.append(metrics)
        part.steps.append(entry["step"])
        part.lines.append(line)
        part.keys.update(dict.fromkeys(metrics))
        if spans:
            part.spans.append(spans[j])
    gs = doc.get("global_step")
    ck = _CHECKPOINT.match(path.parent.name)
    part.rank = (gs if isinstance(gs, (int, float)) and not isinstance(gs, bool) else -1,
                 int(ck.group(1)) if ck else math.inf)
    return part


def _array_lines(text: str, pos: int, n: int) -> tuple[list[int], list[tuple[int, int]]] | None:
    """The 1-based first line and the span of each of the ``n`` elements of the JSON array whose
    ``[`` ends at ``pos`` (``None`` when they cannot be told)."""
    dec = json.JSONDecoder()
    lines, spans, line, last = [], [], 1 + text.count("\n", 0, pos), pos
    ws = re.compile(r"[\s,]*")
    try:
        while True:
            pos = ws.match(text, pos).end()
            if pos >= len(text) or text[pos] == "]":
                break
            line += text.count("\n", last, pos)
            last = pos
            lines.append(line)
            start = pos
            _, pos = dec.raw_decode(text, pos)
            spans.append((start, pos))
    except ValueError:
        return None
    return (lines, spans) if len(lines) == n else None


def _parse_jsonl(path: Path, fmt: str, arg: str) -> _Part:
    records = _jsonl_records(path, arg)
    part = _Part(path=path, keys={}, lines=[], steps=[], rows=[])
    if fmt == "verl":
        for lineno, obj in records:
            if "step" not in obj:
                raise ValueError(f"{arg}: {_where(path, lineno)}: record without a step (a verl metrics line is "
                                 f"{{\"step\": N, \"data\": {{...}}}}; keys: {', '.join(list(obj)[:6])})")
            data = obj.get("data")
            if not isinstance(data, dict):
                raise ValueError(f"{arg}: {_where(path, lineno)}: key 'data' must be an object of metrics "
                                 f"(a verl metrics line is {{\"step\": N, \"data\": {{...}}}}), got {data!r}"[:300])
            part.rows.append(data)
            part.steps.append(obj["step"])
            part.lines.append(lineno)
            part.keys.update(dict.fromkeys(data))
        return part
    if not records:
        return part
    keys: dict[str, None] = {}
    for _, obj in records:
        keys.update(dict.fromkeys(obj))
    step_key = _step_key(keys, fmt)
    if step_key is None:
        where = _where(path, records[0][0]) if records else _where(path, 1)
        raise ValueError(f"{arg}: {where}: record without a step (no column "
                         f"{' / '.join(_WANDB_STEP_COLUMNS if fmt == 'wandb' else _STEP_COLUMNS)})")
    skip = _skip_keys(keys, step_key, fmt)
    part.step_key = step_key
    for lineno, obj in records:
        step = obj.get(step_key)
        metrics = {k: v for k, v in obj.items() if k not in skip}
        if step is None:
            if fmt == "wandb" and not any(_is_number(v) for v in metrics.values()):
                part.keys.update(dict.fromkeys(metrics))
                continue  # a W&B row of media or tables only
            raise ValueError(f"{arg}: {_where(path, lineno)}: record without a step (no {step_key!r})")
        part.rows.append(metrics)
        part.steps.append(step)
        part.lines.append(lineno)
        part.keys.update(dict.fromkeys(metrics))
    return part


def _step_key(keys: Iterable[str], fmt: str) -> str | None:
    keys = set(keys)
    order = _WANDB_STEP_COLUMNS if fmt == "wandb" else _STEP_COLUMNS
    return next((c for c in order if c in keys), None)


def _skip_keys(keys: Iterable[str], step_key: str, fmt: str) -> set[str]:
    """The columns that are no metrics: the step column(s), W&B's bookkeeping, prime-rl's time."""
    skip = {step_key}
    if fmt == "wandb":
        skip |= set(_WANDB_BOOKKEEPING) | (set(_WANDB_STEP_COLUMNS) & set(keys))
    elif fmt == "prime-rl":
        skip |= {"time"}
    return skip


def _is_number(v: Any) -> bool:
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (int, float)):
        return not (isinstance(v, float) and math.isnan(v))
    if isinstance(v, str):
        try:
            return not math.isnan(float(v))
        except ValueError:
            return False
    return False


def _parse_csv(path: Path, fmt: str, arg: str) -> _Part:
    text = _read_text(path, arg)
    try:
        # pandas' own parsing of numbers (NaN, inf, Infinity) and of empty cells and null spellings
        table = pd.read_csv(io.StringIO(text), skip_blank_lines=True, low_memory=False)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{arg}: {_where(path, 1)}: no metric rows (the file is empty)") from None
    except (pd.errors.ParserError, ValueError) as err:
        m = re.search(r"line (\d+)", str(err))
        raise ValueError(f"{arg}: {_where(path, int(m.group(1)) if m else 1)}: not a readable CSV row "
                         f"({str(err).strip()})") from None
    # the 1-based line of each row: the header is line 1; blank lines are skipped by read_csv
    row_lines = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip()][1:]
    lines = row_lines if len(row_lines) == len(table) else list(range(2, len(table) + 2))
    columns = [str(c) for c in table.columns]
    if fmt == "wandb":
        columns = _strip_run_names(columns, path, arg)
    if len(set(columns)) != len(columns):
        dup = next(c for c in columns if columns.count(c) > 1)
        raise ValueError(f"{arg}: {_where(path, 1)}: column {dup!r} appears twice in the header")
    table.columns = columns
    step_key = _step_key(columns, fmt)
    if step_key is None:
        raise ValueError(f"{arg}: {_where(path, 1)}: no step column (one of "
                         f"{', '.join(_WANDB_STEP_COLUMNS if fmt == 'wandb' else _STEP_COLUMNS)}) in the header")
    skip = _skip_keys(columns, step_key, fmt)
    steps = table[step_key]
    metric_cols = [c for c in columns if c not in skip]
    table = table[metric_cols]
    keep = np.ones(len(table), dtype=bool)
    missing = steps.isna().to_numpy()
    if missing.any():
        if fmt == "wandb":  # rows with no number but media/tables: not metric rows
            numeric = pd.DataFrame({c: _floats(table[c])[0] for c in metric_cols}, index=table.index)
            has = numeric.notna().any(axis=1).to_numpy() if metric_cols else np.zeros(len(table), bool)
            bad = missing & has
            keep = ~(missing & ~has)
        else:
            bad = missing
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{arg}: {_where(path, lines[i])}: record without a step (column {step_key!r} is empty)")
    idx = np.flatnonzero(keep)
    return _Part(path=path, keys=dict.fromkeys(metric_cols), lines=[lines[i] for i in idx],
                 steps=steps.iloc[idx].reset_index(drop=True), table=table.iloc[idx].reset_index(drop=True),
                 step_key=step_key)


def _strip_run_names(columns: list[str], path: Path, arg: str) -> list[str]:
    """W&B panel exports name columns ``<run> - <metric>`` (and ``... __MIN``/``__MAX``)."""
    runs, out = {}, []
    for c in columns:
        if " - " in c and c not in _WANDB_STEP_COLUMNS:
            run, metric = c.rsplit(" - ", 1)
            runs.setdefault(run, None)
            out.append(metric)
        else:
            out.append(c)
    if len(runs) > 1:
        raise ValueError(f"{arg}: {_where(path, 1)}: the export holds several runs ({', '.join(list(runs)[:4])}); "
                         "export one run per file")
    return out


def _floats(s: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """``s`` as float64 (None, NaN and their spellings -> NaN; "Infinity" -> inf) and a mask of
    the values that are no number (text, booleans, objects)."""
    if s.dtype.kind in "fiu":
        return s.astype("float64"), np.zeros(len(s), dtype=bool)
    if s.dtype.kind == "b":
        return pd.Series(np.nan, index=s.index), np.ones(len(s), dtype=bool)
    obj = s.astype(object)
    kind = obj.map(type)
    isnum = kind.isin((int, float)).to_numpy()
    isstr = kind.eq(str).to_numpy()
    isnull = obj.isna().to_numpy() & ~isstr
    out = pd.Series(np.nan, index=s.index, dtype="float64")
    if isnum.any():
        out[isnum] = obj[isnum].astype("float64")
    bad = ~(isnum | isstr | isnull)
    if isstr.any():
        st = obj[isstr].astype(str).str.strip()
        null = st.str.lower().isin(_NULL_WORDS)
        conv = pd.to_numeric(st.where(~null), errors="coerce")
        out[isstr] = conv.to_numpy(dtype="float64")
        bad[np.flatnonzero(isstr)[(conv.isna() & ~null).to_numpy()]] = True
    return out, bad


# ============================================================== mapping their names onto ours
def _resolve(keys: dict[str, None], rules: tuple, user: dict[str, str], notes: list[str]) -> dict[str, str]:
    """``{ours: theirs}`` for the log's metric names ``keys``."""
    builtin, val_rule = rules
    taken_ours = set(user.values())
    taken_theirs = set(user)
    cols: dict[str, str] = {}
    for ours, candidates in builtin.items():
        if ours in taken_ours:
            continue
        for cand in candidates:
            if cand.startswith("re:"):
                pat = re.compile(cand[3:] + r"\Z")
                hits = [k for k in keys if pat.match(k) and k not in taken_theirs]
                if len(hits) > 1:
                    notes.append(f"{ours}: the log has several candidates ({', '.join(hits[:4])}); none was taken "
                                 f"— pass metric_map (--metric-map THEIRS={ours}) to choose one")
                    break
                if hits:
                    cols[ours] = hits[0]
                    break
            elif cand in keys and cand not in taken_theirs:
                cols[ours] = cand
                break
    used = set(cols.values()) | taken_theirs
    val: dict[str, str] = {}
    for k in keys:
        if k in used:
            continue
        name = val_rule(k)
        if name is None or name in taken_ours:
            continue
        if name in val:
            notes.append(f"{name}: both {val[name]!r} and {k!r} map to it; kept {val[name]!r}")
            continue
        val[name] = k
    for theirs, ours in user.items():
        cols[ours] = theirs
    cols.update({o: t for o, t in val.items() if o not in cols})
    return cols


def _pick_wandb_trainer(keys: dict[str, None]) -> str | None:
    best, best_n = None, 0
    for trainer in ("trl", "verl", "prime-rl"):
        builtin, val_rule = _RULES["wandb:" + trainer]
        n = sum(1 for names in builtin.values() for c in names
                if (c.startswith("re:") and any(re.compile(c[3:] + r"\Z").match(k) for k in keys)) or c in keys)
        n += sum(1 for k in keys if trainer == "verl" and val_rule(k) is not None)  # val-core/, val-aux/
        if n > best_n:
            best, best_n = trainer, n
    return best


# ============================================================== the entry point
def read_metrics(paths: Any, format: str = "auto", *, metric_map: Any = None,
                 steps: tuple[int | None, int | None] | None = None, arg: str = "metrics") -> MetricLog:
    """Read a run's metric log(s) into the canonical vocabulary.

    Parameters
    ----------
    paths : path or sequence of paths
        Metric-log files, or folders searched by :func:`find_metric_files` (a TRL output folder:
        its ``trainer_state.json`` and those of its ``checkpoint-N/``).
    format : str
        One of :data:`METRIC_FORMATS`, or ``"auto"`` (:func:`detect_metric_format`).
    metric_map : str, list of str or dict, optional
        ``"theirs=ours,..."`` (:func:`parse_metric_map`): their names mapped onto ours, on top of
        (and before) the built-in map of the format; what makes a ``"table"`` useful.
    steps : (int or None, int or None), optional
        Keep the steps ``a <= step <= b`` (``None``: no bound).
    arg : str
        The name of ``paths`` in messages (``rlvr-audit`` passes ``"--metrics"`` or ``"PATH"``).

    Returns
    -------
    MetricLog

    Raises
    ------
    ValueError
        A path that does not exist, no metric logs, a mix of formats, a line that does not
        parse, a record without a step or with a step that is not an integer >= 0, a non-number
        in a mapped column, a JSON file that is no ``trainer_state.json``, a log with no metric
        rows (in ``steps``), a ``metric_map`` naming a column the log does not have.  The message
        starts with ``arg`` and names ``FILE:LINE``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "log.csv").write_text("global_step,my_entropy,acc\\n0,0.9,0.1\\n1,0.8,0.2\\n")
    >>> m = read_metrics(d / "log.csv", metric_map="my_entropy=entropy,acc=val/acc")
    >>> m.source["format"], m.frame.columns.tolist(), m.frame["entropy"].tolist()
    ('table', ['step', 'entropy', 'val/acc'], [0.9, 0.8])
    """
    fmt_arg = format
    if fmt_arg != "auto":
        checks.choice("format", fmt_arg, METRIC_FORMATS)
    user = parse_metric_map(metric_map)
    lo, hi = _check_steps(steps)
    typed = _typed(paths, arg)
    files: list[Path] = []
    searched: dict[str, list[Path]] = {}
    for t in typed:
        p = Path(t)
        if p.is_dir():
            found = _folder_files(p)
            if fmt_arg != "auto":
                found = [q for q in found if _compatible(_file_format(q), fmt_arg)]
            searched[t] = found
        else:
            found = [p]
        files += [q for q in found if q not in files]
    if not files:
        what = "metric logs" if fmt_arg == "auto" else f"{fmt_arg} metric logs"
        raise ValueError(f"{arg}: no {what} (trainer_state.json, checkpoint-N/trainer_state.json, verl's "
                         f"{{experiment}}.jsonl, prime-rl's metrics.jsonl, a W&B export or a table) in "
                         + ", ".join(repr(t) for t in typed))
    fmt = detect_metric_format([str(f) for f in files], arg=arg) if fmt_arg == "auto" else fmt_arg
    for t, found in searched.items():  # verl writes one file per experiment: several are several runs
        if fmt == "verl" and len(found) > 1:
            raise ValueError(f"{arg}: {t!r} holds the metric logs of several verl experiments "
                             f"({', '.join(q.name for q in found[:4])}{', ...' if len(found) > 4 else ''}); "
                             "name the file of one run")
    if fmt == "trl":
        for f in files:
            if f.suffix.lower() != ".json":
                raise ValueError(f"{arg}: {_where(f, 1)}: a TRL metric log is a trainer_state.json, not {f.name!r}")
        parts = sorted((_parse_trl(f, arg) for f in files), key=lambda q: q.rank)  # oldest first
    else:
        parts = []
        for f in files:
            suffix = f.suffix.lower()
            if suffix == ".jsonl":
                parts.append(_parse_jsonl(f, fmt, arg))
            elif suffix == ".csv" and fmt in ("wandb", "table"):
                parts.append(_parse_csv(f, fmt, arg))
            else:
                kinds = ".jsonl or .csv" if fmt in ("wandb", "table") else ".jsonl"
                raise ValueError(f"{arg}: {_where(f, 1)}: a {fmt} metric log is a {kinds} file, not {f.name!r}")
    return _assemble(parts, fmt, user, lo, hi, arg)


def _compatible(found: str | None, wanted: str) -> bool:
    loose = ("prime-rl", "wandb", "table")
    return found == wanted or (found in loose and wanted in loose)


def _assemble(parts: list[_Part], fmt: str, user: dict[str, str], lo: int | None, hi: int | None,
              arg: str) -> MetricLog:
    paths = [str(p.path) for p in parts]
    if not any(p.lines for p in parts):
        f = parts[0].path
        raise ValueError(f"{arg}: {_where(f, 1)}: no metric rows in " + ", ".join(paths))
    keys: dict[str, None] = {}
    for p in parts:
        keys.update(p.keys)
    notes: list[str] = []
    read = {p.path for p in parts}
    for p in parts:      # _folder_files reads X.jsonl, not its twin X.csv (rlvr-train writes both): say so
        twin = p.path.with_suffix(".csv")
        if p.path.suffix.lower() == ".jsonl" and twin not in read and _file_format(twin) is not None:
            notes.append(f"{twin.name} was not read: it is the same log as {p.path.name}, which was")
    missing = [t for t in user if t not in keys]
    if missing:
        shown = ", ".join(list(keys)[:40]) + (", ..." if len(keys) > 40 else "")
        raise ValueError(f"{arg}: metric_map names {missing[0]!r}, which is not a metric of "
                         f"{', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}; its metrics are: {shown}")
    trainer = fmt if fmt in _TRAINER_MAPS else None
    rules = _RULES.get(fmt)
    if fmt == "wandb":
        trainer = _pick_wandb_trainer(keys)
        rules = _RULES["wandb:" + trainer] if trainer else _RULES["table"]
        if trainer:
            notes.append(f"W&B export of a {trainer} run: its metric names were mapped with the {trainer} map")
        counters = sorted({p.step_key for p in parts if p.step_key in ("_step", "Step")})
        if trainer == "trl" and counters:
            notes.append(f"the steps are W&B's {counters[0]!r} (one per wandb.log call), not TRL's global step: "
                         "export the history with 'train/global_step' (the x axis TRL sets) to align them")
    cols = _resolve(keys, rules, user, notes)
    if not cols:
        shown = ", ".join(list(keys)[:20]) + (", ..." if len(keys) > 20 else "")
        raise ValueError(f"{arg}: none of the metrics of {', '.join(paths[:3])} is one we know "
                         f"(its metrics: {shown}); name them with metric_map (--metric-map THEIRS=OURS, "
                         "see docs/metric_logs.md)")
    if trainer == "trl" and any(cols.get(c, "").endswith("sampling/importance_sampling_ratio/max")
                                for c in ("seq_is_ratio_max",)):
        notes.append("TRL's sampling/importance_sampling_ratio/* are read as per-sequence ratios "
                     "(seq_is_ratio_*), as in its default vllm_importance_sampling_mode='sequence_mask'; they are "
                     "logged after TRL's correction (a masked ratio counts as 0, a truncated one as the bound); "
                     "for a run in a token_* mode pass metric_map "
                     "(sampling/importance_sampling_ratio/max=is_ratio_max, ...)")
    theirs = list(dict.fromkeys(cols.values()))
    frames = []
    for i, p in enumerate(parts):
        if not p.lines:
            continue
        steps = _steps(p, arg)
        raw = p.table.reindex(columns=theirs) if p.table is not None else \
            pd.DataFrame.from_records(p.rows, columns=theirs)
        if p.table is not None:  # a CSV cell is empty where the row did not log the metric
            present = raw.notna().any(axis=1).to_numpy()
        else:  # a JSON record logged the metrics it has a key for (a null too)
            wanted = set(theirs)
            present = np.fromiter((not wanted.isdisjoint(r) for r in p.rows), dtype=bool, count=len(p.rows))
        data = {_STEP: steps, _FILE: np.full(len(steps), i), _LINE: np.asarray(p.lines), _PRESENT: present}
        for t in theirs:
            vals, bad = _floats(raw[t])
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                ours = next(o for o, th in cols.items() if th == t)
                raise ValueError(f"{arg}: {_where(p.path, p.line_of(j, t))}: key {t!r} (mapped to {ours!r}) must be a "
                                 f"number or null, got {raw[t].iloc[j]!r}"[:400])
            data[t] = vals.to_numpy()
        frames.append(pd.DataFrame(data))
    long = pd.concat(frames, ignore_index=True)
    _conflict_notes(long, theirs, parts, fmt, notes)
    grouped = long.groupby(_STEP, sort=True)
    wide = grouped[theirs].last()
    order = [o for o in VOCABULARY if o in cols] + sorted(o for o in cols if o not in VOCABULARY)
    frame = pd.DataFrame({"step": wide.index.to_numpy(dtype="int64")})
    for o in order:
        frame[o] = wide[cols[o]].to_numpy(dtype="float64")
    empty = ~grouped[_PRESENT].any().to_numpy()
    if empty.all():
        raise ValueError(f"{arg}: {_where(parts[0].path, 1)}: no metric rows: no record of "
                         f"{', '.join(paths[:3])} has a value of {', '.join(theirs[:6])}")
    if empty.any():
        notes.append(f"{int(empty.sum())} step(s) logged none of the mapped metrics and were left out "
                     f"(e.g. step {int(frame['step'][empty].iloc[0])})")
        frame = frame[~empty].reset_index(drop=True)
    all_steps = frame["step"]
    if lo is not None or hi is not None:
        keep = np.ones(len(frame), dtype=bool)
        if lo is not None:
            keep &= frame["step"].to_numpy() >= lo
        if hi is not None:
            keep &= frame["step"].to_numpy() <= hi
        if not keep.any():
            raise ValueError(f"{arg}: no metric rows in the steps {'' if lo is None else lo}:{'' if hi is None else hi}"
                             f" of {', '.join(paths[:3])} (its steps: {int(all_steps.min())}.."
                             f"{int(all_steps.max())})")
        frame = frame[keep].reset_index(drop=True)
    unmapped = [k for k in keys if k not in set(theirs)]
    source = {"format": fmt, "paths": paths, "columns": {o: cols[o] for o in order}, "unmapped": unmapped,
              "notes": notes, "trainer": trainer}
    return MetricLog(frame=frame, source=source)


def _steps(p: _Part, arg: str) -> np.ndarray:
    """The steps of a part as int64, refusing a missing, non-integer or negative one (FILE:LINE)."""
    s = p.steps if isinstance(p.steps, pd.Series) else pd.Series(p.steps)
    vals, bad = _floats(s)
    v = vals.to_numpy()
    with np.errstate(invalid="ignore"):
        wrong = bad | np.isnan(v) | ~np.isfinite(v) | (v != np.floor(v)) | (v < 0)
    if wrong.any():
        j = int(np.flatnonzero(wrong)[0])
        x = s.iloc[j]
        x = x.item() if isinstance(x, np.generic) else x
        what = "record without a step" if x is None or (isinstance(x, float) and math.isnan(x)) else \
            f"the step must be an integer >= 0, got {x!r}"
        raise ValueError(f"{arg}: {_where(p.path, p.lines[j])}: {what}")
    return v.astype("int64")


def _conflict_notes(long: pd.DataFrame, theirs: list[str], parts: list[_Part], fmt: str, notes: list[str]) -> None:
    """A note per column with two different values for one step (the last one is kept)."""
    if long[_STEP].is_unique:
        return
    counts = long.groupby(_STEP)[theirs].nunique()
    for t in theirs:
        bad = counts.index[counts[t].to_numpy() > 1]
        if not len(bad):
            continue
        step = bad[0]
        rows = long[(long[_STEP] == step) & long[t].notna()]
        shown = "; ".join(f"{v:g} at {_where(parts[f].path, ln)}"
                          for v, f, ln in zip(rows[t], rows[_FILE], rows[_LINE]))
        if fmt == "trl":
            head = f"{t!r}: the trainer_state files disagree at {len(bad)} step(s)"
            tail = "kept the newest checkpoint's value"
        else:
            head = f"{t!r}: {len(bad)} step(s) logged twice with different values"
            tail = "kept the last one"
        notes.append(f"{head} (step {int(step)}: {shown}); {tail}")
