"""verl plugin: the registry's advantage families and schedules as verl advantage estimators.

Importing this module registers, with :func:`verl.trainer.ppo.core_algos.register_adv_est`,

* ``rlvr_<name>`` for every family of :func:`rlvr_theory.advantages.names` (``rlvr_asym_grpo``,
  ``rlvr_grpo``, ``rlvr_fade``, ...);
* ``rlvr_schedule_<name>`` for every schedule of :func:`rlvr_theory.schedules.names`, ``-``
  written ``_`` (``rlvr_schedule_fade``, ``rlvr_schedule_fade_log``, ``rlvr_schedule_agrae``,
  FADE's ablations ``rlvr_schedule_fade_entropy``, ``rlvr_schedule_fade_alpha_only``,
  ``rlvr_schedule_fade_delta_only``;
  the prefix keeps them apart from the families ``fade`` and ``agrae``).

verl imports it by itself through the ``verl.plugins`` entry point of this distribution (every
``import verl`` since verl 0.9.0), or through ``VERL_USE_EXTERNAL_MODULES=integrations.verl``.
Choose an estimator with ``algorithm.adv_estimator=rlvr_asym_grpo``.  verl's ``AlgoConfig``
refuses unknown keys, so the parameters come from the environment variable ``RLVR_PARAMS``
(``"delta=0.5,alpha=2"``, parsed by :func:`integrations.core.parse_params`), read when an
estimator is first called in a process, with the reserved keys

``success_threshold``
    a rollout succeeds when its score is ``>=`` it (real-valued rewards with a family that needs
    success and failure; the masses use it too);
``singleton``
    ``zero`` (default) or ``raw``: the advantage of a group of one rollout (verl's ``grpo`` gives
    such a rollout its raw reward);
``steps``
    the total number of training steps (schedule ``fade-log`` only).

The estimator follows verl's contract (keyword arguments ``token_level_rewards`` (bs, L),
``response_mask`` (bs, L), ``index`` (the group uids), ``config``; returns ``(advantages,
returns)``, both (bs, L), in the rewards' dtype and device): the score of a rollout is
``token_level_rewards.sum(-1)`` as in verl's own estimators, its length ``response_mask.sum(-1)``,
and its advantage is broadcast over its valid tokens (zero outside the mask).  verl's padding
rows (uid beginning with ``pad``) are left out of every group and batch statistic and get 0.
A schedule advances once per call, from the batch solve rate (verl passes no step or entropy).
Each call logs its diagnostics (:func:`rlvr_theory.groups.summary` and a schedule's ``alpha``,
``delta``, ``omega``) to the logger ``rlvr_diagnostics.verl`` at INFO, and when ``RLVR_LOG_DIR``
is set appends one JSON line (``estimator``, ``step``, ``time``, ``params``, ``rows``,
``padding_rows``, ``metrics``) to ``RLVR_LOG_DIR/rlvr_<hostname>_<pid>.jsonl``.

It also registers, with :func:`verl.trainer.ppo.core_algos.register_policy_loss`, the policy loss
``rlvr_diagnosed`` (:data:`POLICY_LOSS`; ``actor_rollout_ref.actor.policy_loss.loss_mode=rlvr_diagnosed``):
it calls the loss named by the key ``policy_loss`` of ``RLVR_PARAMS`` (default ``vanilla``; the
estimators ignore this key), returns that loss unchanged, and adds to its metrics
:func:`analysis.token_entropy.token_diagnostics` of the micro-batch under ``rlvr/token/<key>``
(see :func:`token_metrics`).

The guard (``analysis.guardrails``, issue 28): verl has no per-step callback, so this module wraps
verl's :class:`verl.utils.tracking.Tracking` (:func:`install_guard_hook`, on import), the one object
both of verl's trainer loops hand every step's metrics dict to (``logger.log(data=metrics,
step=global_steps)`` in ``RayPPOTrainer.fit`` and in the v1 ``PPOTrainer.fit``).  At each training
step's log it adds the masses of the ``rlvr_*`` estimator calls since the previous one
(:data:`integrations.core.STEP_METRICS`, the names TRL's adapter logs: ``rlvr/m_S``, ...; verl's
own backends log them too) and, when ``RLVR_GUARD`` names a preset or a JSON rules file, feeds
the step to a :class:`VerlGuardHook` (``RLVR_GUARD_ACTION``: ``log``, ``alert``, ``stop``).  See
:class:`VerlGuardHook` for why that mechanism and what ``stop`` does in each verl trainer.

Examples
--------
>>> import numpy as np, torch
>>> from integrations import verl as rv
>>> from verl.trainer.ppo.core_algos import get_adv_estimator_fn
>>> "rlvr_asym_grpo" in rv.estimator_names()
True
>>> fn = get_adv_estimator_fn("rlvr_asym_grpo")
>>> rewards = torch.zeros(4, 3)
>>> rewards[[0, 2], 2] = 1.0                      # the score sits on the last token
>>> mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
>>> uid = np.array(["a", "a", "b", "b"], dtype=object)
>>> adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=uid, config=None)
>>> adv
tensor([[ 0.5000,  0.5000,  0.5000],
        [-0.5000, -0.5000,  0.0000],
        [ 0.5000,  0.5000,  0.5000],
        [-0.5000,  0.0000,  0.0000]])
>>> rv.reset()                                    # forget the estimators' state (tests)
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.utils import tracking as verl_tracking

from analysis.audit.metric_logs import live_metrics
from analysis.guardrails import ACTIONS, ALERTS_FILE, PRESETS, Alert, Guard, append_alerts, drop_alerts_after
from analysis.token_entropy import CLIP_COV, KL_COV, ClipCov, KLCov, token_diagnostics
from rlvr_plumbing.serialize import dumps
from rlvr_theory import advantages, schedules

from .core import RESERVED, STEP_METRICS, Policy, parse_params

__all__ = [
    "ENV_PARAMS",
    "ENV_LOG_DIR",
    "RESERVED_KEYS",
    "PREFIX",
    "SCHEDULE_PREFIX",
    "register_estimators",
    "estimator_names",
    "allowed_keys",
    "policy",
    "compute",
    "reset",
    "logger",
    "POLICY_LOSS",
    "POLICY_LOSS_KEY",
    "DEFAULT_DELEGATE",
    "TOKEN_METRIC_PREFIX",
    "register_policy_losses",
    "delegate_name",
    "clip_mask",
    "token_metrics",
    "compute_policy_loss_diagnosed",
    "ENV_GUARD",
    "ENV_GUARD_ACTION",
    "TRAINING_KEY",
    "GuardStop",
    "VerlGuardHook",
    "guard_from_env",
    "guard_metrics",
    "estimator_metrics",
    "install_guard_hook",
]

#: environment variable holding the parameters, ``"delta=0.5,alpha=2"``
ENV_PARAMS = "RLVR_PARAMS"
#: environment variable naming the directory of the JSONL diagnostics
ENV_LOG_DIR = "RLVR_LOG_DIR"
#: keys of ``RLVR_PARAMS`` read by the adapter, not by the family or schedule
RESERVED_KEYS = RESERVED
#: prefix of the family estimators
PREFIX = "rlvr_"
#: prefix of the schedule estimators
SCHEDULE_PREFIX = "rlvr_schedule_"
#: verl computes these two itself, never through the registry
_VERL_SPECIAL = ("grpo", "gae")

#: the verl policy loss that wraps the configured one and adds the token diagnostics
POLICY_LOSS = "rlvr_diagnosed"
#: key of ``RLVR_PARAMS`` naming the verl policy loss that :data:`POLICY_LOSS` wraps
POLICY_LOSS_KEY = "policy_loss"
#: the loss wrapped when ``RLVR_PARAMS`` names none (verl's default ``loss_mode``)
DEFAULT_DELEGATE = "vanilla"
#: prefix of the metrics :data:`POLICY_LOSS` adds (``rlvr/token/cov_logp_adv``, ...)
TOKEN_METRIC_PREFIX = "rlvr/token/"
#: the losses that clip the token ratio as PPO does, ``clip_by_origin = (−A·clip(r) > −A·r) & mask``
#: (verl 0.9.1 ``core_algos.py``: ``vanilla`` clamps ``log r`` to ±20 first, ``clip_cov`` does not);
#: the others (sequence ratios, soft or IS-weight clips, no clip) get no clip mask
_PPO_CLIP: dict[str, float | None] = {"vanilla": 20.0, "clip_cov": None}

#: environment variable naming the guard: a preset of :data:`analysis.guardrails.PRESETS` or a JSON rules file
ENV_GUARD = "RLVR_GUARD"
#: environment variable naming the guard's action, one of :data:`analysis.guardrails.ACTIONS`
ENV_GUARD_ACTION = "RLVR_GUARD_ACTION"
#: the key both verl trainers put into a training step's metrics (validation-only logs lack it)
TRAINING_KEY = "training/global_step"

logger = logging.getLogger("rlvr_diagnostics.verl")

_LOCK = threading.RLock()
_ESTIMATORS: dict[str, tuple[str, str]] = {}  # verl name -> ("advantage" | "schedule", registry name)
_POLICIES: dict[str, tuple[Policy, dict[str, Any]]] = {}  # verl name -> (policy, parsed params)
_CALLS: dict[str, int] = {}
_DELEGATE: dict[str, str] = {}  # "name" -> the wrapped loss (read from RLVR_PARAMS once)
_WARNED: set[str] = set()


class _EstimatorFeed:
    """This process's estimator diagnostics not yet logged (thread-safe, at most ``maxlen`` calls)."""

    def __init__(self, maxlen: int = 1024):
        self._lock = threading.Lock()
        self._calls: deque[dict[str, Any]] = deque(maxlen=maxlen)

    def push(self, metrics: Mapping[str, Any]) -> None:
        with self._lock:
            self._calls.append(dict(metrics))

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            calls = list(self._calls)
            self._calls.clear()
        return calls

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()


_FEED = _EstimatorFeed()


# ------------------------------------------------------------------ registration
def _verl_name(kind: str, name: str) -> str:
    return (PREFIX if kind == "advantage" else SCHEDULE_PREFIX) + name.replace("-", "_")


def _make_estimator(est: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                  index: Any = None, config: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return compute(est, token_level_rewards=token_level_rewards, response_mask=response_mask, index=index)

    kind, name = _ESTIMATORS[est]
    estimator.__name__ = estimator.__qualname__ = est
    estimator.__doc__ = (f"verl advantage estimator {est!r}: the registry {kind} {name!r} "
                         f"(parameters from ${ENV_PARAMS}); see integrations.verl.compute.")
    estimator.rlvr_estimator = est  # type: ignore[attr-defined]
    return estimator


def register_estimators() -> list[str]:
    """Register a verl estimator for every family and schedule not registered yet.

    Called on import; call it again after registering a family of your own with
    :func:`rlvr_theory.advantages.register` to make it a verl estimator too.  A name that verl
    already holds for a function that is not this module's is left alone (with a warning).

    Returns
    -------
    list of str
        The estimator names registered by this call.
    """
    added = []
    with _LOCK:
        wanted = [("advantage", n) for n in advantages.names()] + [("schedule", n) for n in schedules.names()]
        for kind, name in wanted:
            est = _verl_name(kind, name)
            if est in _VERL_SPECIAL:  # pragma: no cover - the prefix rules it out
                continue
            held = core_algos.ADV_ESTIMATOR_REGISTRY.get(est)
            if held is not None:
                if getattr(held, "rlvr_estimator", None) != est:
                    logger.warning("verl estimator %r is already registered by %r; not replaced", est, held)
                _ESTIMATORS.setdefault(est, (kind, name))
                continue
            _ESTIMATORS[est] = (kind, name)
            core_algos.register_adv_est(est)(_make_estimator(est))
            added.append(est)
    return added


def estimator_names() -> list[str]:
    """The verl estimator names of this plugin: families first, then schedules.

    >>> from integrations import verl as rv
    >>> [n for n in rv.estimator_names() if n.startswith(rv.SCHEDULE_PREFIX)]
    ['rlvr_schedule_fade', 'rlvr_schedule_fade_log', 'rlvr_schedule_agrae', 'rlvr_schedule_fade_entropy', 'rlvr_schedule_fade_alpha_only', 'rlvr_schedule_fade_delta_only']
    """
    return list(_ESTIMATORS)


def _lookup(est: str) -> tuple[str, str]:
    try:
        return _ESTIMATORS[est]
    except KeyError:
        raise ValueError(f"unknown rlvr estimator {est!r}; allowed: {', '.join(_ESTIMATORS)}") from None


def allowed_keys(est: str) -> list[str]:
    """The keys ``RLVR_PARAMS`` may set for the estimator ``est`` (its parameters, then the reserved ones).

    >>> from integrations import verl as rv
    >>> rv.allowed_keys("rlvr_asym_grpo")
    ['delta', 'reward_values', 'success_threshold', 'singleton']
    >>> rv.allowed_keys("rlvr_schedule_fade_log")[-3:]
    ['success_threshold', 'singleton', 'steps']
    """
    kind, name = _lookup(est)
    if kind == "advantage":
        own = [*advantages.registry()[name].defaults, "reward_values"]
        return own + [k for k in RESERVED_KEYS if k != "steps"]
    cls = type(schedules.get(name, steps=1))
    own = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "T")]
    return own + list(RESERVED_KEYS)


# ------------------------------------------------------------------ parameters
def _bad(est: str, text: str, why: str) -> ValueError:
    return ValueError(f"{ENV_PARAMS}={text!r} is not valid for the verl estimator {est!r}: {why}; "
                      f"allowed keys: {', '.join(allowed_keys(est))}")


def _build(est: str, text: str) -> tuple[Policy, dict[str, Any]]:
    kind, name = _lookup(est)
    try:
        params = parse_params(text) if text.strip() else {}
    except ValueError as err:
        raise _bad(est, text, str(err)) from None
    params.pop(POLICY_LOSS_KEY, None)  # read by the policy loss rlvr_diagnosed, not by estimators
    threshold = params.pop("success_threshold", None)
    singleton = params.pop("singleton", "zero")
    steps = params.pop("steps", None)
    # a schedule's H0 (FADE's initial entropy) is also the policy's entropy before any is seen
    H0 = params.pop("H0") if kind == "schedule" and "H0" in params and "H0" in allowed_keys(est) else None
    try:
        if steps is not None and kind == "advantage":
            raise ValueError("steps is read by schedules only")
        if kind == "advantage":
            pol = Policy(advantage=name, advantage_params=params, success_threshold=threshold, singleton=singleton)
        else:
            pol = Policy(schedule=name, schedule_params=params, success_threshold=threshold,
                         singleton=singleton, steps=steps, H0=H0)
    except (ValueError, TypeError) as err:
        raise _bad(est, text, str(err)) from None
    threshold, singleton = pol.success_threshold, pol.singleton
    used = {**params, "success_threshold": threshold, "singleton": singleton}
    if kind == "schedule":
        used.update({"steps": steps} if H0 is None else {"H0": H0, "steps": steps})
    return pol, used


def policy(est: str) -> Policy:
    """The :class:`integrations.core.Policy` of the estimator ``est`` in this process.

    Created on first use from ``RLVR_PARAMS`` as it is then (later changes of the variable are
    not seen until :func:`reset`); its ``state_dict()`` holds a schedule's state.
    """
    with _LOCK:
        if est not in _POLICIES:
            _POLICIES[est] = _build(est, os.environ.get(ENV_PARAMS, ""))
        return _POLICIES[est][0]


def reset() -> None:
    """Forget every estimator's policy, schedule state and call count (``RLVR_PARAMS`` is read again)."""
    with _LOCK:
        _POLICIES.clear()
        _CALLS.clear()
        _DELEGATE.clear()
        _WARNED.clear()
    _FEED.clear()


# ------------------------------------------------------------------ computing
def _uids(index: Any, n: int, est: str) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, padding)``: group numbers (first-appearance order) of the uids, and the rows
    whose uid is a string beginning with ``pad`` (verl's padding rows).

    One pass of a dict over verl's object array of ``str(uuid4())`` (0.7 ms for 8192 rows);
    the padding test then runs once per distinct uid.
    """
    uid = np.asarray(index)
    if uid.shape != (n,):
        raise ValueError(f"{est}: index must hold one uid per row ({n}), got shape {uid.shape}")
    first: dict[Any, int] = {}
    try:
        codes = np.fromiter((first.setdefault(u, len(first)) for u in uid.tolist()), np.int64, n)
    except TypeError as err:
        raise ValueError(f"{est}: the uids must be hashable (strings, numbers): {err}") from None
    is_pad = np.fromiter((isinstance(k, str) and k.startswith("pad") for k in first), bool, len(first))
    return codes, is_pad[codes]


def compute(est: str, *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
            index: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages of one verl batch under the estimator ``est``: ``(advantages, returns)``.

    Parameters
    ----------
    est : str
        A name of :func:`estimator_names`.
    token_level_rewards, response_mask : torch.Tensor
        (bs, L); the score of a rollout is its row sum of ``token_level_rewards``.
    index : array of group ids
        verl's ``non_tensor_batch["uid"]``; rows whose uid begins with ``pad`` are padding.

    Returns
    -------
    (torch.Tensor, torch.Tensor)
        The same (bs, L) tensor twice (as verl's outcome estimators): each rollout's advantage on
        its valid tokens, 0 elsewhere and on padding rows.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from integrations import verl as rv
    >>> r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> adv, _ = rv.compute("rlvr_rloo", token_level_rewards=r, response_mask=torch.ones(4, 2),
    ...                     index=np.array(["q", "q", "pad0", "pad0"], dtype=object))
    >>> adv[:, 0]
    tensor([ 1., -1.,  0.,  0.])
    >>> rv.reset()
    """
    if index is None:
        raise ValueError(f"{est}: verl estimators of rlvr need the group uids (DataProto.non_tensor_batch['uid'])")
    if token_level_rewards.ndim != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(f"{est}: token_level_rewards and response_mask must both be (bs, L), got shapes "
                         f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}")
    n = token_level_rewards.shape[0]
    codes, pad = _uids(index, n, est)
    kind, name = _lookup(est)
    pol = policy(est)
    with torch.no_grad():
        scores_t = token_level_rewards.sum(dim=-1)  # verl's score, in the rewards' dtype
        scores = scores_t.detach().to("cpu", torch.float64).numpy()
        lengths = None
        if kind == "advantage" and advantages.registry()[name].uses_lengths:
            lengths = response_mask.sum(dim=-1).detach().to("cpu", torch.float64).numpy()
        with _LOCK:
            try:
                A, metrics = pol.step(scores, codes, valid=~pad, lengths=lengths)
            except ValueError as err:
                hint = (f"; set it in {ENV_PARAMS}, e.g. {ENV_PARAMS}='success_threshold=0.5'"
                        if "success_threshold is required" in str(err) else "")
                raise ValueError(f"{est}: {err}{hint}") from None
            _CALLS[est] = step = _CALLS.get(est, 0) + 1
        _FEED.push(metrics)
        dtype = token_level_rewards.dtype if token_level_rewards.is_floating_point() else torch.float32
        A_t = torch.as_tensor(np.where(pad, 0.0, A), dtype=dtype, device=token_level_rewards.device)
        out = A_t.unsqueeze(-1) * response_mask  # int/bool masks promote to dtype without a copy
        if out.dtype != dtype:
            out = out.to(dtype)
    _log(est, step, metrics, params=_POLICIES[est][1], n_rows=n, n_padding=int(pad.sum()))
    return out, out


def _log(est: str, step: int, metrics: dict[str, Any], *, params: dict[str, Any], n_rows: int,
         n_padding: int) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s step %d: %s", est, step, dumps(metrics))
    folder = os.environ.get(ENV_LOG_DIR)
    if not folder:
        return
    record = {"estimator": est, "step": step, "time": time.time(), "params": params, "rows": n_rows,
              "padding_rows": n_padding, "metrics": metrics}
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rlvr_{socket.gethostname()}_{os.getpid()}.jsonl")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(dumps(record) + "\n")


# ------------------------------------------------------------------ policy loss
def delegate_name() -> str:
    """The verl policy loss that :data:`POLICY_LOSS` wraps in this process.

    The key ``policy_loss`` of ``RLVR_PARAMS`` (``RLVR_PARAMS="policy_loss=clip_cov"``), default
    ``vanilla``; read on first use (later changes are not seen until :func:`reset`).

    >>> from integrations import verl as rv
    >>> rv.delegate_name()
    'vanilla'
    >>> rv.reset()
    """
    with _LOCK:
        if "name" not in _DELEGATE:
            text = os.environ.get(ENV_PARAMS, "")
            try:
                params = parse_params(text)
            except ValueError as err:
                raise ValueError(f"{ENV_PARAMS}={text!r} is not valid for the verl policy loss "
                                 f"{POLICY_LOSS!r}: {err}") from None
            name = params.get(POLICY_LOSS_KEY, DEFAULT_DELEGATE)
            if not isinstance(name, str) or not name or name == POLICY_LOSS:
                raise ValueError(f"{ENV_PARAMS}: {POLICY_LOSS_KEY}={name!r} must name the verl policy loss that "
                                 f"{POLICY_LOSS!r} wraps (e.g. {POLICY_LOSS_KEY}=vanilla), not itself")
            if name not in core_algos.POLICY_LOSS_REGISTRY:
                raise ValueError(f"{ENV_PARAMS}: {POLICY_LOSS_KEY}={name!r} is not a registered verl policy loss; "
                                 f"registered: {', '.join(k for k in core_algos.POLICY_LOSS_REGISTRY if k != POLICY_LOSS)}")
            _DELEGATE["name"] = name
        return _DELEGATE["name"]


def _cfg(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def clip_mask(delegate: str, old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
              response_mask: torch.Tensor, config: Any) -> torch.Tensor | None:
    """Where the loss ``delegate`` clips the ratio: verl's ``clip_by_origin``,
    ``(−A·clip(r, 1 − ε_low, 1 + ε_high) > −A·r) & (mask > 0)`` with ``r = exp(log_prob − old_log_prob)``
    (``log r`` clamped to ±20 first for ``vanilla``, as it does) and ``ε`` from
    ``config.clip_ratio_low/high`` (``config.clip_ratio`` when unset); ``None`` for a loss that
    does not clip token ratios so (only ``vanilla`` and ``clip_cov`` do).  The same elementwise
    operations as verl's, so the mask is verl's bit for bit.  No graph is built.
    """
    if delegate not in _PPO_CLIP:
        return None
    eps = _cfg(config, "clip_ratio", 0.2)
    low, high = _cfg(config, "clip_ratio_low", eps), _cfg(config, "clip_ratio_high", eps)
    bound = _PPO_CLIP[delegate]
    with torch.no_grad():
        log_ratio = log_prob.detach() - old_log_prob.detach()
        if bound is not None:
            log_ratio = torch.clamp(log_ratio, min=-bound, max=bound)
        ratio = torch.exp(log_ratio)
        loss1 = -advantages * ratio
        loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
        return (loss2 > loss1) & (response_mask > 0)


def _controls(config: Any) -> tuple[ClipCov, KLCov]:
    """Clip-Cov / KL-Cov settings from ``config.policy_loss`` (verl's defaults where unset)."""
    pl = _cfg(config, "policy_loss")
    if pl is None:
        return CLIP_COV, KL_COV
    clip_cov = ClipCov(ratio=_cfg(pl, "clip_cov_ratio", CLIP_COV.ratio), lb=_cfg(pl, "clip_cov_lb", CLIP_COV.lb),
                       ub=_cfg(pl, "clip_cov_ub", CLIP_COV.ub))
    return clip_cov, KLCov(ratio=_cfg(pl, "kl_cov_ratio", KL_COV.ratio))


def token_metrics(delegate: str, old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                  response_mask: torch.Tensor, config: Any = None) -> dict[str, float]:
    """The metrics :data:`POLICY_LOSS` adds: ``rlvr/token/<key>`` for every key of
    ``token_diagnostics(old_log_prob, advantages, response_mask, clipped=clip_mask(...))``.

    The log-probabilities are the sampling policy's (``old_log_prob``), verl passes no token
    entropies to a policy loss (FADE's ``H`` is then ``−ℓ̄``) and no learning rate (no
    ``entropy_change_pred_*`` keys); the Clip-Cov / KL-Cov reach uses ``config.policy_loss``'s
    ``clip_cov_ratio/lb/ub`` and ``kl_cov_ratio``.  On the tensors' device, under ``no_grad``.

    >>> import torch
    >>> from integrations import verl as rv
    >>> old = torch.tensor([[-0.1, -0.2, -0.3], [-2.0, -1.5, 0.0]])
    >>> adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    >>> m = rv.token_metrics("vanilla", old, old, adv, torch.tensor([[1, 1, 1], [1, 1, 0]]))
    >>> round(m["rlvr/token/cov_logp_adv"], 6), m["rlvr/token/cov_logp_adv_clipped"]
    (0.744, 0.0)
    """
    clipped = clip_mask(delegate, old_log_prob, log_prob, advantages, response_mask, config)
    clip_cov, kl_cov = _controls(config)
    with torch.no_grad():
        d = token_diagnostics(old_log_prob.detach(), advantages.detach(), response_mask, clipped=clipped,
                              clip_cov=clip_cov, kl_cov=kl_cov)
    return {TOKEN_METRIC_PREFIX + k: v for k, v in d.items()}


def compute_policy_loss_diagnosed(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                  response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                  config: Any = None, rollout_is_weights: torch.Tensor | None = None,
                                  **kwargs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy loss ``rlvr_diagnosed``: the loss :func:`delegate_name` names, with its token diagnostics.

    Calls the delegate with the same arguments and returns its ``(pg_loss, pg_metrics)``, the
    loss untouched and ``pg_metrics`` (the same dict) updated with :func:`token_metrics`.  A
    micro-batch the diagnostics refuse (no valid token, non-finite values) keeps the delegate's
    metrics only, with one warning per process.
    """
    delegate = delegate_name()
    fn = core_algos.get_policy_loss_fn(delegate)
    pg_loss, pg_metrics = fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                             response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=config,
                             rollout_is_weights=rollout_is_weights, **kwargs)
    try:
        extra = token_metrics(delegate, old_log_prob, log_prob, advantages, response_mask, config)
    except ValueError as err:
        with _LOCK:
            first = POLICY_LOSS not in _WARNED
            _WARNED.add(POLICY_LOSS)
        logger.log(logging.WARNING if first else logging.DEBUG,
                   "%s: token diagnostics skipped for a micro-batch: %s", POLICY_LOSS, err)
        return pg_loss, pg_metrics
    pg_metrics.update(extra)
    return pg_loss, pg_metrics


compute_policy_loss_diagnosed.rlvr_policy_loss = POLICY_LOSS  # type: ignore[attr-defined]


def register_policy_losses() -> list[str]:
    """Register :data:`POLICY_LOSS` with verl unless held (a loss of another module under that
    name is left alone, with a warning).  Called on import; returns the names registered."""
    with _LOCK:
        held = core_algos.POLICY_LOSS_REGISTRY.get(POLICY_LOSS)
        if held is not None:
            if getattr(held, "rlvr_policy_loss", None) != POLICY_LOSS:
                logger.warning("verl policy loss %r is already registered by %r; not replaced", POLICY_LOSS, held)
            return []
        core_algos.register_policy_loss(POLICY_LOSS)(compute_policy_loss_diagnosed)
        return [POLICY_LOSS]


# ------------------------------------------------------------------ guardrails
def estimator_metrics(calls: list[Mapping[str, Any]]) -> dict[str, float]:
    """The ``rlvr/*`` metrics of one training step from the estimator calls it made
    (:data:`integrations.core.STEP_METRICS`, the names TRL's adapter logs): each the mean of its
    finite values over the calls (one call per step unless
    ``trainer.v1.<mode>.parameter_sync_step > 1``), left out where none is finite (a
    ``sign_ratio`` with ``m_F = 0``, the masses of real rewards without a threshold), as TRL's
    adapter averages them over a logging step.

    >>> estimator_metrics([{"m_S": 0.25, "m_F": 0.5, "sign_ratio": 0.5}, {"m_S": 0.5, "m_F": 0.0,
    ...                    "sign_ratio": float("inf")}])
    {'rlvr/m_S': 0.375, 'rlvr/m_F': 0.25, 'rlvr/sign_ratio': 0.5}
    """
    out: dict[str, float] = {}
    for name, key in STEP_METRICS.items():
        vals = [float(c[key]) for c in calls if isinstance(c.get(key), (int, float)) and math.isfinite(c[key])]
        if vals:
            out[name] = float(np.mean(vals))
    return out


def guard_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """One verl step log in the guard's columns: :func:`analysis.audit.metric_logs.live_metrics`
    with verl's map (``actor/entropy`` → ``entropy``, ``rollout_corr/rollout_is_seq_max`` →
    ``seq_is_ratio_max``, ``actor/rlvr/token/cov_logp_adv`` → ``cov_logp_adv``, ``rlvr/m_S`` →
    ``m_S``, ``rlvr/frac_all_wrong`` → ``frac_all_wrong``, ...).

    >>> guard_metrics({"actor/entropy": 0.7, "actor/rlvr/token/cov_logp_adv": 0.01, "critic/score/mean": 0.5})
    {'entropy': 0.7, 'reward_mean': 0.5, 'cov_logp_adv': 0.01}
    """
    return live_metrics(data, "verl")


def guard_from_env(environ: Mapping[str, str] | None = None) -> Guard | None:
    """The guard ``RLVR_GUARD`` / ``RLVR_GUARD_ACTION`` name, or ``None`` when ``RLVR_GUARD`` is unset or empty.

    ``RLVR_GUARD`` is a preset of :data:`analysis.guardrails.PRESETS` (``default``) or the path of
    a JSON rules file (:meth:`analysis.guardrails.Guard.from_spec`); ``RLVR_GUARD_ACTION`` is one of
    ``log``, ``alert``, ``stop`` and wins over the file's ``action`` (default: the file's, else
    ``log``).  Anything else is refused with a ``ValueError`` naming the variable and its allowed
    values.

    >>> guard_from_env({"RLVR_GUARD": "default", "RLVR_GUARD_ACTION": "alert"}).action
    'alert'
    >>> guard_from_env({"RLVR_GUARD": "default", "RLVR_GUARD_ACTION": "halt"})
    Traceback (most recent call last):
    ...
    ValueError: RLVR_GUARD_ACTION='halt' is not an action of the rlvr guard; allowed: log, alert, stop
    """
    env = os.environ if environ is None else environ
    spec = env.get(ENV_GUARD, "").strip()
    action = env.get(ENV_GUARD_ACTION, "").strip() or None
    if action is not None and action not in ACTIONS:
        raise ValueError(f"{ENV_GUARD_ACTION}={env.get(ENV_GUARD_ACTION)!r} is not an action of the rlvr guard; "
                         f"allowed: {', '.join(ACTIONS)}")
    if not spec:
        if action is not None:
            raise ValueError(f"{ENV_GUARD_ACTION}={action!r} is set but {ENV_GUARD} is not: set {ENV_GUARD} to a "
                             f"preset ({', '.join(PRESETS)}) or the path of a JSON rules file")
        return None
    if spec not in PRESETS and not os.path.isfile(spec):
        raise ValueError(f"{ENV_GUARD}={spec!r} is neither a preset of the rlvr guard ({', '.join(PRESETS)}) nor a "
                         "JSON rules file (docs/guardrails.md)")
    try:
        return Guard.from_spec(spec, action=action)
    except ValueError as err:
        raise ValueError(f"{ENV_GUARD}={spec!r}: {err}") from None


class GuardStop(RuntimeError):
    """Raised out of verl's ``logger.log`` by a ``stop`` guard in a trainer whose loop offers no
    clean exit (verl's legacy ``RayPPOTrainer``), after the checkpoint of the step was saved.

    Attributes
    ----------
    step : int
        The step that fired (the checkpoint ``global_step_<step>``).
    alerts : list of Alert
        The alerts that stopped the run.
    """

    def __init__(self, message: str, *, step: int, alerts: list[Alert]):
        super().__init__(message)
        self.step = step
        self.alerts = alerts


_V1_BASE = ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
_LATEST = "latest_checkpointed_iteration.txt"


def _is_v1(trainer: Any) -> bool:
    """Whether ``trainer`` runs verl's v1 loop (``verl.trainer.ppo.v1.PPOTrainer`` or a subclass),
    tested on the class names so that a process without ``transfer_queue`` need not import it."""
    return any((c.__module__, c.__name__) == _V1_BASE for c in type(trainer).__mro__)


def _looks_like_trainer(obj: Any) -> bool:
    return obj is not None and callable(getattr(obj, "_save_checkpoint", None)) and hasattr(obj, "config")


def _cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    try:
        value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    except (AttributeError, KeyError):  # omegaconf's ConfigAttributeError / ConfigKeyError of a struct
        return default
    return default if value is None else value


class VerlGuardHook:
    """A :class:`analysis.guardrails.Guard` on verl's per-step metrics, and what its action does there.

    Why this mechanism.  verl 0.9.1 has no per-step callback: its extension points are the
    ``verl.plugins`` entry point (which imports this module in every verl process), the advantage
    and policy-loss registries, ``trainer.checkpoint_callback_class`` (called only after a
    checkpoint save) and, in the v1 trainer, ``on_step_end``-style methods meant for subclasses
    chosen through ``register_trainer`` (a new ``trainer.v1.trainer_mode`` name, which verl's own
    code compares with ``"sync"``).  Its ``Tracking`` backends are a closed list (``Tracking.__init__``
    asserts each name).  The one place where each step's whole metrics dict passes, in both the
    legacy ``RayPPOTrainer.fit`` (``trainer.use_v1=false``) and the v1 ``PPOTrainer.fit`` (the
    default), is ``Tracking.log(data=metrics, step=global_steps)``, called once per step after
    the update, the checkpoint and the validation of the step.  :func:`install_guard_hook` wraps
    ``Tracking.__init__`` and ``Tracking.log`` (the class, so every importer sees it); the wrapped
    ``__init__`` builds this hook from the environment (:func:`guard_from_env`) and takes the
    trainer from the frame that creates the ``Tracking`` (verl's ``fit``, its ``self``; verl hands
    ``Tracking`` no reference to it); the wrapped ``log`` first logs through verl's backends, then
    calls :meth:`on_log`.  The configuration comes from ``RLVR_GUARD`` / ``RLVR_GUARD_ACTION``
    because verl's config refuses unknown keys.

    Per training step (a log holding ``training/global_step``; the validation log before training
    is skipped) :meth:`on_log` maps the metrics with :func:`guard_metrics` and calls
    ``guard.update(step, ...)``.  Each alert of a rule that starts firing is logged by the logger
    ``rlvr_diagnostics.verl`` at WARNING; with ``alert`` or ``stop`` it is also appended to
    ``<run_dir>/rlvr_alerts.jsonl`` (:func:`analysis.guardrails.append_alerts`); with ``stop``:

    1. the step's checkpoint is saved by verl's own ``trainer._save_checkpoint()`` (actor, critic,
       dataloader state, ``latest_checkpointed_iteration.txt``) unless verl's loop already saved
       this step (``latest_checkpointed_iteration.txt`` holds it, or with ``async_save`` the
       loop's ``save_freq`` condition held);
    2. the v1 trainer (:func:`_is_v1`): ``trainer.total_training_steps`` is lowered to this step.
       Its loop, ``while ... and self.global_steps <= self.total_training_steps``, increments
       ``global_steps`` right after the log, so it ends before another step: ``on_train_end()``
       runs, ``fit`` returns and the run finishes cleanly;
    3. the legacy ``RayPPOTrainer`` (and any other trainer), unless the step is the run's last:
       :class:`GuardStop` is raised out of
       ``logger.log``.  Its loop ends only through ``is_last_step``, a local variable set from
       ``total_training_steps`` *before* the step runs, or when the ``for`` over the dataloader
       is exhausted; no attribute the hook can set ends it before another whole step is trained
       (lowering ``total_training_steps`` would end it only after one more step, past the
       checkpoint).  So the run stops at the alert with an error (``ray.get`` re-raises
       ``GuardStop`` in the driver; exit status non-zero), its checkpoint saved.

    Either way ``trainer.resume_mode=auto`` resumes from ``global_step_<step>``.  A resumed run's
    guard starts with an empty history (verl's checkpoint keeps no metric log), so it does not
    fire again at once; at its first training step ``s`` the alert lines of steps ``>= s`` are
    dropped (:func:`analysis.guardrails.drop_alerts_after`).

    Parameters
    ----------
    guard : Guard
        The rules and the action.
    run_dir : str or path, optional
        Where ``rlvr_alerts.jsonl`` goes; required for ``alert`` and ``stop``.  :meth:`from_env`
        uses ``RLVR_LOG_DIR``, else verl's ``trainer.default_local_dir`` (where the checkpoints go).
    trainer : verl trainer, optional
        Required for ``stop`` to save a checkpoint (without one ``stop`` raises
        :class:`GuardStop` with no checkpoint, and says so).
    stop_mode : {"loop", "raise"}, optional
        How ``stop`` ends the run (2. or 3. above); default: ``"loop"`` for the v1 trainer,
        ``"raise"`` otherwise.
    """

    def __init__(self, guard: Guard, *, run_dir: str | os.PathLike | None = None, trainer: Any = None,
                 stop_mode: str | None = None):
        if not isinstance(guard, Guard):
            raise ValueError(f"guard: expected an analysis.guardrails.Guard, got {type(guard).__name__}")
        if stop_mode is not None and stop_mode not in ("loop", "raise"):
            raise ValueError(f"stop_mode must be one of 'loop', 'raise' or None; got {stop_mode!r}")
        if guard.action in ("alert", "stop") and not run_dir:
            raise ValueError(f"{ENV_GUARD_ACTION}={guard.action!r} writes {ALERTS_FILE} into the run folder: "
                             f"set {ENV_LOG_DIR} or verl's trainer.default_local_dir")
        self.guard = guard
        self.run_dir = None if not run_dir else os.fspath(run_dir)
        self.trainer = trainer
        self.stop_mode = stop_mode
        #: the alerts that stopped the run (``stop``), else empty
        self.stopped: list[Alert] = []
        self._last_step = -1

    @classmethod
    def from_env(cls, *, config: Any = None, trainer: Any = None,
                 environ: Mapping[str, str] | None = None) -> VerlGuardHook | None:
        """The hook ``RLVR_GUARD`` asks for (``None`` when unset): :func:`guard_from_env`, the run
        folder ``RLVR_LOG_DIR`` or ``config`` 's (a dict or DictConfig of verl's whole config, else
        ``trainer.config``) ``trainer.default_local_dir``."""
        env = os.environ if environ is None else environ
        guard = guard_from_env(env)
        if guard is None:
            return None
        run_dir = env.get(ENV_LOG_DIR) or None
        if run_dir is None:
            for cfg in (config, getattr(trainer, "config", None)):
                run_dir = _cfg_get(_cfg_get(cfg, "trainer"), "default_local_dir")
                if run_dir:
                    break
        return cls(guard, run_dir=run_dir, trainer=trainer)

    # ------------------------------------------------------------ per step
    def on_log(self, data: Mapping[str, Any], step: int) -> list[Alert]:
        """One call of verl's ``logger.log(data=metrics, step=...)``: the alerts of the rules
        that start firing at this step (see the class docstring for the actions)."""
        if TRAINING_KEY not in data:
            return []
        step = int(step)
        if step <= self._last_step:
            return []
        writes = self.guard.action in ("alert", "stop")
        if self._last_step < 0 and step > 1 and writes:  # resumed from global_step_<step - 1>
            drop_alerts_after(self.run_dir, step - 1)
        self._last_step = step
        alerts = self.guard.update(step, guard_metrics(data))
        if not alerts:
            return alerts
        for a in alerts:
            logger.warning("guard (%s) at step %d: %s: %s", a.action, a.step, a.rule, a.message)
        if writes:
            os.makedirs(self.run_dir, exist_ok=True)
            append_alerts(self.run_dir, alerts)
        if self.guard.action == "stop":
            self._stop(step, alerts)
        return alerts

    def _saved_by_loop(self, step: int) -> bool:
        cfg = _cfg_get(self.trainer.config, "trainer")
        folder = _cfg_get(cfg, "default_local_dir")
        if folder:
            try:
                with open(os.path.join(folder, _LATEST), encoding="utf-8") as fh:
                    if fh.read().strip() == str(step):
                        return True
            except OSError:
                pass
        ckpt = _cfg_get(_cfg_get(_cfg_get(self.trainer.config, "actor_rollout_ref"), "actor"), "checkpoint")
        if not _cfg_get(ckpt, "async_save", False):
            return False  # a synchronous save of this step would have written latest_checkpointed_iteration.txt
        freq = _cfg_get(cfg, "save_freq", -1)
        total = getattr(self.trainer, "total_training_steps", math.inf)
        return freq > 0 and (step >= total or step % freq == 0)

    def _stop(self, step: int, alerts: list[Alert]) -> None:
        self.stopped = list(alerts)
        rules = ", ".join(a.rule for a in alerts)
        t = self.trainer
        if t is None:
            raise GuardStop(f"rlvr guard: {rules} at step {step}: stopping; no verl trainer was found, so no "
                            "checkpoint was saved", step=step, alerts=self.stopped)
        if not self._saved_by_loop(step):
            t._save_checkpoint()
        where = os.path.join(str(_cfg_get(_cfg_get(t.config, "trainer"), "default_local_dir", "")),
                             f"global_step_{step}")
        mode = self.stop_mode or ("loop" if _is_v1(t) else "raise")
        last = step >= getattr(t, "total_training_steps", math.inf)  # the loop ends after this step anyway
        if mode == "loop" or last:
            if not last:
                t.total_training_steps = step
            logger.warning("guard: %s at step %d: checkpoint %s saved; training ends after this step "
                           "(resume with trainer.resume_mode=auto)", rules, step, where)
            return
        raise GuardStop(f"rlvr guard: {rules} at step {step}: checkpoint {where} saved by verl's _save_checkpoint; "
                        f"{type(t).__name__}'s loop has no clean exit, so the run stops here (resume with "
                        "trainer.resume_mode=auto)", step=step, alerts=self.stopped)


def _caller_trainer(depth: int = 4) -> Any:
    """The verl trainer whose method creates a ``Tracking``: the first ``self`` that looks like
    one (``_save_checkpoint``, ``config``) in the ``depth`` frames above the wrapped ``__init__``."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if _looks_like_trainer(obj):
            return obj
        frame = frame.f_back
    return None


def install_guard_hook() -> bool:
    """Wrap verl's ``Tracking.__init__`` and ``Tracking.log`` once per process (called on import;
    ``False`` when already installed).

    The wrapped ``__init__`` builds :meth:`VerlGuardHook.from_env` *before* verl's (a bad
    ``RLVR_GUARD`` / ``RLVR_GUARD_ACTION`` is refused when ``fit`` starts, before any step) and
    keeps it as ``tracking.rlvr_guard`` (``None`` without ``RLVR_GUARD``).  The wrapped ``log``,
    on a training step's log (``training/global_step`` in ``data``), adds the
    :func:`estimator_metrics` of the ``rlvr_*`` estimator calls since the previous one (names
    verl's metrics already hold are kept), logs the result through verl's backends, then calls
    ``rlvr_guard.on_log`` (which may raise :class:`GuardStop`).  Every other call is verl's own.
    """
    cls = verl_tracking.Tracking
    if getattr(cls.log, "rlvr_guard_hook", False):
        return False
    orig_init, orig_log = cls.__init__, cls.log
    signature = inspect.signature(orig_init)

    @functools.wraps(orig_init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = signature.bind(self, *args, **kwargs).arguments.get("config")
        hook = VerlGuardHook.from_env(config=config, trainer=_caller_trainer())
        orig_init(self, *args, **kwargs)
        self.rlvr_guard = hook

    @functools.wraps(orig_log)
    def log(self, data: Any, step: Any, backend: Any = None) -> None:
        if not isinstance(data, Mapping) or TRAINING_KEY not in data:
            return orig_log(self, data=data, step=step, backend=backend)
        extra = {k: v for k, v in estimator_metrics(_FEED.drain()).items() if k not in data}
        merged = {**data, **extra} if extra else data
        orig_log(self, data=merged, step=step, backend=backend)
        hook = getattr(self, "rlvr_guard", None)
        if hook is not None and backend is None:
            hook.on_log(merged, step)

    __init__.rlvr_guard_hook = log.rlvr_guard_hook = True  # type: ignore[attr-defined]
    cls.__init__, cls.log = __init__, log
    return True


register_estimators()
register_policy_losses()
install_guard_hook()
