"""Batched simulator of a softmax (categorical) policy over ``K`` actions trained with group sampling.

Setting of F-GRPO Sec. 5.1 and App. J (after Hu et al. 2025): ``K`` actions, a subset
``A+`` of them correct (reward ``R_c``), the rest incorrect (reward ``R_w``); policy
``π = softmax(z / T)`` over free logits ``z``.  Each step, per configuration:

1. draw ``N`` i.i.d. actions from ``π`` (:func:`sample_counts`, exact; counts per action);
2. ``X`` = number of correct draws, ``p̂ = X/N``; per-outcome advantages ``A_c, A_w`` from the
   registry :mod:`rlvr_theory.advantages` (default ``dr_grpo`` = the mean baseline
   ``r̃_j = R_j − (1/N)Σ_k R_k`` of F-GRPO App. J), times the focal weight ``g = (1 − p̂)^γ``
   (F-GRPO Eq. 15-16);
3. ascend one of three surrogates (``S_i = Σ_{j: a_j = i} A_j``, ``C = Σ_j A_j``; gradients in
   ``u = z/T``, the ``z``-gradient is ``1/T`` times these):

   * ``"logprob"`` — REINFORCE ``(1/N)Σ_j A_j log π(a_j)``: ``g_i = (S_i − C π_i)/N``
     (Two-Stage Lemma 1; :func:`rlvr_theory.categorical.logit_update` with ``η = 1``);
   * ``"prob"`` — the probability surrogate of F-GRPO App. J, ``ℒ = (1/N)Σ_j r̃_j π(a_j)``:
     ``g_i = π_i(S_i − Σ_k π_k S_k)/N``;
   * ``"trpo"`` — the TRPO linear surrogate of F-GRPO Eq. 7 on the distinct sampled support,
     ``g_i = g·π_i(R_i − S_R)/N`` with ``R_i ∈ {R_c, R_w}`` for sampled and ``0`` for unsampled
     actions (:func:`rlvr_theory.categorical.surrogate_logit_update`; uses rewards, not the
     registry advantage — only the focal weight applies);
4. update ``z`` with SGD (``z += η g``) or Adam (torch semantics, ``maximize``; bias-corrected
   ``m̂/(√v̂ + ε)``).

Metrics (every ``record_every`` steps): ``Q_pos = Σ_{a∈A+} π(a)``; the retained positive mass
``M_ret = 1 − Σ_{a∈A+} max(0, π_0(a) − π_t(a)) / Σ_{a∈A+} π_0(a)`` (F-GRPO App. J Eq. 26);
entropy; anchor probability; ``Q_u_pos`` (correct mass not drawn in this step, F-GRPO Eq. 12);
``frac_lost`` (fraction of correct actions with ``π_t < π_0``).  With ``predict=True`` the
one-step predictions of :mod:`rlvr_theory` are recorded next to the measured change of the
same step: ``dQ_pos_first_order`` (F-GRPO Eq. 21 applied to the actual step),
``dQ_pos_eq8`` (F-GRPO Eq. 8, the SGD/TRPO-surrogate prediction with the configured ``η``),
``dH_first_order`` (``−Cov_π(log π, Δu)``, :func:`rlvr_theory.entropy.first_order_change`;
FADE Theorem 13.1 without its drift term, see that module), and ``dQ_pos``, ``dH`` measured.

Distribution-level calibration (DLC; Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and 21-22),
``Config(mu > 0)``: per-action memory logits ``φ`` (one vector of ``K`` per configuration,
``φ = 0`` at the start: a uniform memory) replace the paper's memory network ``f_φ``.  Step 1
draws from ``q = softmax(z/T − μ·φ)`` instead of ``π`` (lines 5-6; ``f_θ = z/T``, the logits
of ``π``); steps 2-4 are unchanged — advantages, focal weight and every surrogate read the
drawn actions and the policy's own ``π`` (no importance weight, as the paper writes line 20);
then ``φ`` takes one step of its own optimizer (the policy's kind, own state, learning rate
``memory_lr``, default the row's ``lr``) along ``counts/N − softmax(φ)``, the gradient of the
mean log-likelihood of the drawn actions (line 22: cross-entropy on the samples).  Each
surrogate is a function of the draws and ``π`` only, and each prediction a function of the
actual step (Eq. 21, entropy, exact changes) or of ``(z, counts)`` (Eq. 8, ``Q_u_pos``), so all
of them hold for draws from ``q`` as they do for draws from ``π`` (tested against a reference
at ``mu > 0``); what no longer holds is that the step is an unbiased estimate of the on-policy
gradient (the paper's choice).  Extra metrics: ``sample_Q_pos`` and ``sample_entropy`` (of
``q``), ``memory_entropy`` (of ``softmax(φ)``), ``kl_sample_policy`` (``KL(q‖π)``).  ``mu = 0``
(default) allocates no memory: the run is the uncalibrated one, bit for bit.

Exact sampling without a loop over draws or configurations: per configuration the step's
uniforms come from a counter-based generator (SplitMix64 of ``(seed, step, draw index)``), so
a configuration draws the same actions whether it runs alone or in a batch; each uniform is
turned into sorted uniforms (exponential spacings) and mapped through the configuration's
float64 CDF (inverse-CDF, exact up to float64 rounding, ``~1e-16`` relative).  On the CPU the
sorted draws are merged with the CDF by a numba kernel (``O(N + K)``, a galloping search when
``N << K``; :data:`NUMBA`); elsewhere, or without numba, by ``torch.searchsorted``
(``O(N log K)``): the same draws, bit for bit.  Configurations are grouped by group size ``N``
(one batched call per distinct ``N``); :data:`EXECUTIONS` says how the groups are advanced.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache, partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.optim.adam import adam as torch_adam

from rlvr_plumbing import checks, runner
from rlvr_plumbing.runtime import check_memory, resolve_device
from rlvr_theory import advantages as _adv
from rlvr_theory import categorical as _cat
from rlvr_theory import entropy as _ent

from . import categorical_settings as _fields
from .calibration import CALIBRATION_FIELDS, check_calibration
from .categorical_settings import OPTIMIZERS, PRESETS, SURROGATES, add_parser
from .runs import check_out, command_settings, diverged, write_run

__all__ = ["Config", "PRESETS", "preset", "initial_logits", "sample_counts", "outcome_advantages",
           "simulate", "describe", "INDEX_MAX", "EXECUTIONS", "NUMBA", "sampler",
           "add_parser"]

# SURROGATES and OPTIMIZERS (the choices of Config.surrogate / optimizer), PRESETS (the named sweeps of
# :func:`preset`) and add_parser are defined in simulations.categorical_settings: `rlvr-sim --help` loads no torch

#: the largest index the engine's int64 tensors can hold: group sizes ``N <= INDEX_MAX - 1``
#: (draw indices ``0..N``); larger actions, steps or seed counts are refused by the memory check
INDEX_MAX = 2 ** 63 - 1
#: how :func:`simulate` advances the configurations: ``"blocks"`` (one group size ``N`` at a
#: time, each block through all its steps), ``"batched"`` (every configuration at once),
#: ``"auto"`` (batched on CUDA, blocks elsewhere)
#: how :func:`simulate` advances the configurations (its ``execution``): one group size at a
#: time (``"blocks"``), all at once (``"batched"``), or batched on CUDA and blocks elsewhere (``"auto"``)
EXECUTIONS = ("auto", "blocks", "batched")


def __getattr__(name: str) -> Any:
    if name == "SCHEDULES":  # the old name of EXECUTIONS
        warnings.warn("simulations.categorical.SCHEDULES is deprecated: use EXECUTIONS", DeprecationWarning,
                      stacklevel=2)
        return EXECUTIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _execution(execution: str | None, schedule: str | None) -> str:
    """The ``execution`` of :func:`simulate` / :meth:`Config.memory_bytes`, checked (default
    ``"auto"``); ``schedule``, its deprecated name, is still accepted with a ``DeprecationWarning``
    (and checked under that name)."""
    if schedule is None:
        return checks.choice("execution", "auto" if execution is None else execution, EXECUTIONS)
    if execution is not None:
        raise TypeError("give execution only (schedule is its deprecated name)")
    warnings.warn("schedule= is deprecated: use execution= (how the configurations are advanced: "
                  "'auto', 'blocks', 'batched')", DeprecationWarning, stacklevel=3)
    return checks.choice("schedule", schedule, EXECUTIONS)


# ------------------------------------------------------------------ configuration
def _each(check: Any, name: str, values: Any, **bounds: Any) -> tuple:
    """``check`` (:mod:`rlvr_plumbing.checks`) applied to every entry of a non-empty list: a tuple."""
    checks.array(name, values, ndim=1, nonempty=True, allow_inf=True)  # the shape; entries below
    return tuple(check(f"{name}[{i}]", v, **bounds) for i, v in enumerate(values))


@dataclass(frozen=True)
class Config:
    """One sweep of the categorical simulator (every setting recorded with the results).

    Defaults reproduce F-GRPO App. J: ``K = 128,000`` actions, ``n_correct = 10,000``,
    logits ``5.0`` (one anchor correct action), ``3.0`` (other correct), ``0.0`` (incorrect),
    ``lr = 1e-2``, ``1,000`` steps, rewards ``(R_w, R_c) = (−1, +1)``.  ``N``, ``gamma``,
    ``seeds`` and ``lr`` are lists; the sweep is their Cartesian product.  ``logits`` (``K``
    numbers, the correct actions first) replaces the App. J initialisation, for the few-action
    toys; ``record_probs`` (``K <= 64``) records every action's probability ``p_i`` (with
    ``mu > 0`` also ``q_i`` and ``m_i = softmax(φ)_i``).  ``mu >= 0`` and ``memory_lr > 0`` (or
    ``None``: each configuration's ``lr``; only with ``mu > 0``) set distribution-level
    calibration (Over-Sharpening Sec. 3.2, see the module docstring); Over-Sharpening uses
    ``mu = 0.5``.
    """

    K: int = 128_000
    n_correct: int = 10_000
    z_anchor: float = 5.0
    z_correct: float = 3.0
    z_incorrect: float = 0.0
    N: tuple[int, ...] = tuple(2 ** k for k in range(1, 18))
    gamma: tuple[float, ...] = (0.0, 1.0)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    lr: tuple[float, ...] = (1e-2,)
    steps: int = 1000
    advantage: str = "dr_grpo"
    advantage_params: dict = field(default_factory=dict)
    reward_values: tuple[float, float] = (-1.0, 1.0)
    surrogate: str = "logprob"
    optimizer: str = "adam"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    temperature: float = 1.0
    record_every: int = 10
    predict: bool = False
    logits: tuple[float, ...] | None = None
    record_probs: bool = False
    rewards: tuple[float, ...] | None = None
    mu: float = _fields.mu()
    memory_lr: float | None = _fields.memory_lr()

    def validate(self) -> Config:
        """Raise ``ValueError`` naming the first bad field and its allowed values.

        Checks follow :mod:`rlvr_plumbing.checks` (integral floats and numpy integers are
        accepted where an integer is expected, ``bool`` never); the integer and list fields are
        stored back normalised (``K = 8.0`` becomes ``8``, ``N = [4, 16]`` becomes ``(4, 16)``).
        Returns the configuration.
        """
        put = partial(object.__setattr__, self)  # frozen: store the normalised values
        for name, low in (("K", 2), ("steps", 1), ("record_every", 1)):
            put(name, checks.integer(name, getattr(self, name), low=low))
        put("n_correct", checks.integer("n_correct", self.n_correct, low=1, high=self.K - 1))
        for name in ("logits", "rewards"):
            if getattr(self, name) is not None:
                vals = checks.array(name, getattr(self, name), ndim=1)
                if len(vals) != self.K:
                    raise ValueError(f"{name} must be None or K = {self.K} finite numbers (one per action), "
                                     f"got {len(vals)}")
        if self.record_probs and self.K > 64:
            raise ValueError(f"record_probs needs K <= 64 (one column per action), got K = {self.K}")
        put("N", _each(checks.integer, "N", self.N, low=1, high=INDEX_MAX - 1))  # draw indices 0..N in int64
        put("seeds", _each(checks.integer, "seeds", self.seeds, low=0))
        put("gamma", _each(checks.number, "gamma", self.gamma, low=0))
        put("lr", _each(checks.number, "lr", self.lr, low=0, low_open=True))
        for name in ("z_anchor", "z_correct", "z_incorrect"):
            checks.number(name, getattr(self, name))
        checks.choice("surrogate", self.surrogate, SURROGATES)
        checks.choice("optimizer", self.optimizer, OPTIMIZERS)
        checks.number("temperature", self.temperature, low=0, low_open=True)
        for b in self.betas:
            checks.number("betas", b, low=0, high=1, high_open=True)
        checks.number("eps", self.eps, low=0, low_open=True)
        mu, memory_lr = check_calibration(self.mu, self.memory_lr, model="memory logits", plural=True)
        put("mu", mu)
        put("memory_lr", memory_lr)
        adv = self.make_advantage()
        if self.rewards is not None and not adv.graded:
            ok = ", ".join(n for n in _adv.names() if _adv.registry()[n].graded)
            raise ValueError(f"advantage must be one of {ok} with per-action rewards, got {self.advantage!r}")
        if adv.batch_level or adv.uses_lengths:
            raise ValueError(f"advantage must be a group-level family without lengths, got {self.advantage!r}")
        if min(self.N) < adv.min_group_size():
            raise ValueError(f"N must be >= {adv.min_group_size()} for advantage {self.advantage!r}, got {min(self.N)}")
        return self

    def memory_bytes(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                     execution: str | None = None, *, schedule: str | None = None) -> int:
        """Estimated peak memory of :func:`simulate` in bytes, from the settings (Python integers:
        no overflow, however large the request).

        Per configuration: about ``12`` buffers of ``K`` numbers (logits, policy, CDF, gradient,
        counts, optimiser state, temporaries; ``7`` more with memory logits, ``mu > 0``: the
        memory, its softmax, gradient and optimiser state, the calibrated logits and sampling
        distribution) and ``7`` of ``N + 1`` (the draws); every
        configuration is resident at once with the ``"batched"`` execution (``"auto"`` on CUDA),
        one group size at a time with ``"blocks"`` (:data:`EXECUTIONS`; on the CPU as many
        blocks side by side as torch has threads).  Plus the
        trajectory: one row of ``~20`` columns (``+ K`` with ``record_probs``) per configuration
        and recorded step, about three copies while it is assembled.

        >>> Config(K=10, n_correct=2, N=(4,), seeds=(0,), steps=10).memory_bytes() < 2**20
        True
        >>> Config(N=(10**12,)).memory_bytes() // 2**40  # TiB: 8 configurations of 10^12 draws
        414
        """
        es = torch.empty((), dtype=dtype).element_size()
        per_n = len(self.gamma) * len(self.seeds) * len(self.lr)
        K = int(self.K)
        per_k = 8 * es + 4 * 8 + (7 * es if self.mu > 0 else 0)
        block = [per_n * (K * per_k + 7 * 8 * (int(n) + 1)) + 8 * (int(n) + 1) for n in self.N]
        dev = torch.device(device)
        # blocks: one at a time, or as many side by side as torch has threads on the CPU
        side = 1 if dev.type != "cpu" else min(torch.get_num_threads(), len(block))
        engine = sum(block) if _batched(_execution(execution, schedule), dev) else sum(sorted(block)[-side:])
        records = int(self.steps) // int(self.record_every) + 2
        cols = 20 + (K if self.record_probs else 0) + (6 + (2 * K if self.record_probs else 0) if self.mu > 0 else 0)
        return int(engine + 3 * 8 * cols * records * per_n * len(self.N))

    def make_advantage(self) -> _adv.Advantage:
        """The registry advantage of this configuration (:func:`rlvr_theory.advantages.get`)."""
        return _adv.get(self.advantage, reward_values=self.reward_values, **self.advantage_params)

    def grid(self) -> pd.DataFrame:
        """One row per configuration: ``config, N, gamma, seed, lr`` (Cartesian product)."""
        idx = pd.MultiIndex.from_product([list(self.N), list(self.gamma), list(self.seeds), list(self.lr)],
                                         names=["N", "gamma", "seed", "lr"])
        g = idx.to_frame(index=False)
        g.insert(0, "config", np.arange(len(g)))
        return g.astype({"N": int, "gamma": float, "seed": int, "lr": float})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def preset(name: str, **overrides: Any) -> Config:
    """The :class:`Config` of a named preset (:data:`PRESETS`), with fields overridden."""
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {name!r}")
    kw = {**PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}}
    for k in ("N", "gamma", "seeds", "lr"):
        if k in kw and np.ndim(kw[k]) == 0:
            kw[k] = (kw[k],)
        if k in kw:
            kw[k] = tuple(kw[k])
    return Config(**kw).validate()


def initial_logits(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """Initial logits ``[K]`` and correct mask ``[K]``: actions ``0..n_correct−1`` are correct.

    ``cfg.logits`` when given (few-action toys), else F-GRPO App. J: action 0 is the anchor
    (``z_anchor``), the other correct actions ``z_correct``, the incorrect ones ``z_incorrect``.
    """
    correct = np.zeros(cfg.K, dtype=bool)
    correct[: cfg.n_correct] = True
    if cfg.logits is not None:
        return np.asarray(cfg.logits, dtype=float).copy(), correct
    z = np.where(correct, cfg.z_correct, cfg.z_incorrect).astype(float)
    z[0] = cfg.z_anchor
    return z, correct


# ------------------------------------------------------------------ sampling


def _s64(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_GOLD, _C1, _C2 = _s64(0x9E3779B97F4A7C15), _s64(0xBF58476D1CE4E5B9), _s64(0x94D049BB133111EB)


def _srl(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (as unsigned 64-bit)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser (Steele et al. 2014) on int64 tensors (wrap-around arithmetic)."""
    z = x + _GOLD
    z = (z ^ _srl(z, 30)) * _C1
    z = (z ^ _srl(z, 27)) * _C2
    return z ^ _srl(z, 31)


def _mix_(x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """:func:`_splitmix64` in place on ``x`` (``tmp``: a scratch buffer of its shape): no allocation."""
    x.add_(_GOLD)
    for s, c in ((30, _C1), (27, _C2), (31, None)):
        torch.bitwise_right_shift(x, s, out=tmp).bitwise_and_((1 << (64 - s)) - 1)
        x.bitwise_xor_(tmp)
        if c is not None:
            x.mul_(c)
    return x


#: Sample on the CPU with the numba kernels below (uniforms, an ``O(N + K)`` merge of the sorted
#: draws with the CDF, the scatter of the draws) when numba imports; ``False``: the pure-torch
#: path (``torch.searchsorted``), which gives the same draws bit for bit.  Read when a run starts.
NUMBA: bool = importlib.util.find_spec("numba") is not None

# The kernels are plain Python functions, compiled by numba on first use (:func:`_kernels`):
# importing this module does not import numba.  Each works on 4 rows at once (``quads[q]``:
# 4 row indices, the last repeated when the rows are not a multiple of 4): the sequential
# float64 sums (the CDF, the exponential spacings) are chains of dependent additions, and four
# independent chains run about as fast as one.  Every sum is taken in the order torch takes
# it, so the results are those of the torch path bit for bit (tested).
_NB_GOLD, _NB_C1, _NB_C2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_NB_S11, _NB_S27, _NB_S30, _NB_S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)


def _nb_cumsum(p, out, quads, lo, hi):  # pragma: no cover - compiled by numba
    """``out[r] = cumsum(p[r])`` in float64, left to right (= ``torch.cumsum(p, -1, dtype=float64)``)."""
    K = p.shape[1]
    for q in range(lo, hi):
        r0, r1, r2, r3 = quads[q, 0], quads[q, 1], quads[q, 2], quads[q, 3]
        a0 = a1 = a2 = a3 = 0.0
        for i in range(K):
            a0 += np.float64(p[r0, i])
            a1 += np.float64(p[r1, i])
            a2 += np.float64(p[r2, i])
            a3 += np.float64(p[r3, i])
            out[r0, i] = a0
            out[r1, i] = a1
            out[r2, i] = a2
            out[r3, i] = a3


def _nb_neg_uniforms(seeds, step, hj, f, lo, hi):  # pragma: no cover - compiled by numba
    """``f[r, j] = −u`` with the uniforms ``u`` of :meth:`_Draws.uniforms` (rows ``lo..hi−1``)."""
    n = f.shape[1]
    for r in range(lo, hi):
        z = np.uint64(seeds[r]) * np.uint64(1_000_003) + np.uint64(0x5EED) + _NB_GOLD
        z = (z ^ (z >> _NB_S30)) * _NB_C1
        z = (z ^ (z >> _NB_S27)) * _NB_C2
        z = (z ^ (z >> _NB_S31)) + np.uint64(step) + _NB_GOLD
        z = (z ^ (z >> _NB_S30)) * _NB_C1
        z = (z ^ (z >> _NB_S27)) * _NB_C2
        base = (z ^ (z >> _NB_S31)) + _NB_GOLD
        for j in range(n):
            z = base + hj[j]
            z = (z ^ (z >> _NB_S30)) * _NB_C1
            z = (z ^ (z >> _NB_S27)) * _NB_C2
            z = z ^ (z >> _NB_S31)
            f[r, j] = -(np.float64(z >> _NB_S11) * 1.1102230246251565e-16)  # 2**-53


def _nb_search(c, i, u):  # pragma: no cover - compiled by numba
    """The first ``j >= i`` with ``c[j] > u`` (``len(c)`` if none), given ``c[:i] <= u`` and ``c``
    non-decreasing: a galloping search from ``i`` (``O(log(j − i))``)."""
    K = c.shape[0]
    hi = K
    step = 1
    while i + step - 1 < K:
        p = i + step - 1
        if c[p] <= u:
            i = p + 1
            step *= 2
        else:
            hi = p
            break
    while i < hi:
        mid = (i + hi) >> 1
        if c[mid] <= u:
            i = mid + 1
        else:
            hi = mid
    return i


def _nb_merge(cdf, l, idx, X, nc, quads, lo, hi):  # pragma: no cover - compiled by numba
    """The sorted draws ``idx[r]`` of row ``r``: ``searchsorted(cdf[r], U, right=True)`` clamped
    to ``K − 1``, with ``U_k = e_k · cdf[r, −1] / e_N`` and ``e = cumsum(l[r])`` (the exponential
    spacings); ``X[r]`` = the number of draws below ``nc``.  Each sorted draw starts from the
    previous one's index: four comparisons ahead, a galloping search beyond (``O(N + K)``, and
    ``O(N log(K/N))`` for ``N << K``)."""
    K, N = cdf.shape[1], idx.shape[1]
    for q in range(lo, hi):
        r0, r1, r2, r3 = quads[q, 0], quads[q, 1], quads[q, 2], quads[q, 3]
        c0, c1, c2, c3 = cdf[r0], cdf[r1], cdf[r2], cdf[r3]
        t0 = t1 = t2 = t3 = 0.0
        for k in range(N + 1):
            t0 += l[r0, k]
            t1 += l[r1, k]
            t2 += l[r2, k]
            t3 += l[r3, k]
        s0, s1, s2, s3 = c0[K - 1] / t0, c1[K - 1] / t1, c2[K - 1] / t2, c3[K - 1] / t3
        a0 = a1 = a2 = a3 = 0.0
        i0 = i1 = i2 = i3 = 0
        for k in range(N):
            a0 += l[r0, k]
            a1 += l[r1, k]
            a2 += l[r2, k]
            a3 += l[r3, k]
            u0, u1, u2, u3 = a0 * s0, a1 * s1, a2 * s2, a3 * s3
            if i0 + 4 <= K:
                n = (c0[i0] <= u0) + (c0[i0 + 1] <= u0) + (c0[i0 + 2] <= u0) + (c0[i0 + 3] <= u0)
                i0 = _nb_search(c0, i0 + 4, u0) if n == 4 else i0 + n
            else:
                i0 = _nb_search(c0, i0, u0)
            if i1 + 4 <= K:
                n = (c1[i1] <= u1) + (c1[i1 + 1] <= u1) + (c1[i1 + 2] <= u1) + (c1[i1 + 3] <= u1)
                i1 = _nb_search(c1, i1 + 4, u1) if n == 4 else i1 + n
            else:
                i1 = _nb_search(c1, i1, u1)
            if i2 + 4 <= K:
                n = (c2[i2] <= u2) + (c2[i2 + 1] <= u2) + (c2[i2 + 2] <= u2) + (c2[i2 + 3] <= u2)
                i2 = _nb_search(c2, i2 + 4, u2) if n == 4 else i2 + n
            else:
                i2 = _nb_search(c2, i2, u2)
            if i3 + 4 <= K:
                n = (c3[i3] <= u3) + (c3[i3 + 1] <= u3) + (c3[i3 + 2] <= u3) + (c3[i3 + 3] <= u3)
                i3 = _nb_search(c3, i3 + 4, u3) if n == 4 else i3 + n
            else:
                i3 = _nb_search(c3, i3, u3)
            idx[r0, k] = min(i0, K - 1)
            idx[r1, k] = min(i1, K - 1)
            idx[r2, k] = min(i2, K - 1)
            idx[r3, k] = min(i3, K - 1)
        for r in (r0, r1, r2, r3):  # the sorted draws below nc: a binary search
            a, b = 0, N
            while a < b:
                mid = (a + b) >> 1
                if idx[r, mid] < nc:
                    a = mid + 1
                else:
                    b = mid
            X[r] = a


def _nb_scatter(idx, X, first, rest, out, lo, hi):  # pragma: no cover - compiled by numba
    """``out[r] = 0``, then ``out[r, idx[r, k]] += first[r]`` for the draws ``k < X[r]`` and
    ``rest[r]`` for the others, in the order of ``k`` (= ``torch.scatter_add_``)."""
    N = idx.shape[1]
    for r in range(lo, hi):
        out[r, :] = 0
        v, x = first[r], X[r]
        for k in range(N):
            if k == x:
                v = rest[r]
            out[r, idx[r, k]] += v


_COMPILED: list = []  # the kernels, once compiled (or None: numba does not import)
_LOCK = threading.Lock()


def _compiled() -> Any:
    """The numba kernels (compiled on first call, once, whatever the thread; cached on disk where
    numba can write); ``None`` when numba does not import."""
    with _LOCK:
        if not _COMPILED:
            _COMPILED.append(_compile())
        return _COMPILED[0]


def _compile() -> Any:
    try:
        import numba
    except ImportError:
        return None
    global _nb_search  # the merge calls it: compiled first, under its own name
    opts: dict[str, Any] = {"nogil": True, "cache": True}
    try:  # a cache is an optimisation: where numba finds no writable place for it, compile each run
        _nb_search = numba.njit(**opts)(_nb_search)
    except RuntimeError:
        opts["cache"] = False
        _nb_search = numba.njit(**opts)(_nb_search)
    return SimpleNamespace(**{name: numba.njit(**opts)(globals()["_nb_" + name])
                              for name in ("cumsum", "neg_uniforms", "merge", "scatter")})


def _kernels(device: torch.device) -> Any:
    """The compiled kernels when the numba path applies (CPU, :data:`NUMBA`), else ``None``."""
    return _compiled() if NUMBA and device.type == "cpu" else None


def sampler(device: str | torch.device = "cpu") -> str:
    """The sampler of :func:`simulate` and :func:`sample_counts` on ``device``: ``"numba"`` (the CPU
    kernels: :data:`NUMBA` is true and numba imports) or ``"torch"`` (``torch.searchsorted``; the
    same draws).

    >>> sampler("cuda" if torch.cuda.is_available() else "meta")
    'torch'
    """
    return "numba" if _kernels(torch.device(device)) is not None else "torch"


_POOL: list = [None, 0]  # a thread pool and its size


def _rows_in_parallel(kernel: Any, args: tuple, n: int, work: int) -> None:
    """``kernel(*args, lo, hi)`` over the units ``0..n−1`` (rows or quadruples of rows), split
    among ``torch.get_num_threads()`` threads (the kernels release the GIL) when ``work``
    (elements touched) is large enough to pay for it, else in the calling thread."""
    threads = min(torch.get_num_threads(), n, max(1, work // 250_000))
    if threads <= 1:
        kernel(*args, 0, n)
        return
    with _LOCK:
        if _POOL[1] < threads - 1:  # grows, never shrinks: a pool in use is never shut down
            _POOL[:] = [ThreadPoolExecutor(threads - 1, thread_name_prefix="categorical"), threads - 1]
        pool = _POOL[0]
    cuts = [n * i // threads for i in range(threads + 1)]
    futures = [pool.submit(kernel, *args, lo, hi) for lo, hi in zip(cuts[1:-1], cuts[2:])]
    kernel(*args, cuts[0], cuts[1])
    for fut in futures:
        fut.result()


@cache
def _quads(b: int) -> np.ndarray:
    """Rows ``0..b−1`` in groups of four ``[ceil(b/4), 4]`` (the last row repeated to fill the last)."""
    rows = np.minimum(np.arange(-(-b // 4) * 4), b - 1).reshape(-1, 4).astype(np.int64)
    rows.flags.writeable = False  # shared by every caller
    return rows


def _cumsum(p: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``torch.cumsum(p, -1, dtype=torch.float64, out=out)`` (a contiguous ``[B, K]``), by the numba
    kernel on the CPU (four rows at a time, the same sums)."""
    nb = _kernels(p.device)
    if nb is None or not (p.is_contiguous() and out.is_contiguous()):
        return torch.cumsum(p, -1, dtype=torch.float64, out=out)
    quads = _quads(p.shape[0])
    _rows_in_parallel(nb.cumsum, (p.numpy(), out.numpy(), quads), len(quads), p.numel())
    return out


class _Draws:
    """Reusable buffers of ``N`` draws in ``b`` rows, with the draw-index hashes cached.

    The uniforms are those of the counter-based stream ``SplitMix64(h(seed, step) +
    SplitMix64(j))``, ``j = 0..N``; the step's work is a handful of in-place passes.  On the CPU
    with numba (:data:`NUMBA`) the uniforms, the merge and the scatter are numba kernels; else
    torch (``torch.searchsorted``): the same draws either way.  After :meth:`draw`, ``X`` holds
    the number of draws below ``nc`` in each row (the correct draws).
    """

    def __init__(self, b: int, N: int, device: torch.device, nc: int = 0):
        self.N, self.nc = N, nc
        self.nb = _kernels(device)
        self.hj = _splitmix64(torch.arange(N + 1, device=device, dtype=torch.int64))
        self.f = torch.empty(b, N + 1, dtype=torch.float64, device=device)
        self.idx = torch.empty(b, N, dtype=torch.int64, device=device)
        self.X = torch.empty(b, dtype=torch.int64, device=device)
        if self.nb is not None:
            self.quads, self.hj_u64 = _quads(b), self.hj.numpy().view(np.uint64)
        else:
            self.bits = torch.empty(b, N + 1, dtype=torch.int64, device=device)
            self.tmp = torch.empty_like(self.bits)
            self.e = torch.empty_like(self.f)
            self.u = torch.empty(b, N, dtype=torch.float64, device=device)

    def uniforms(self, seed: torch.Tensor, step: int) -> torch.Tensor:
        """Uniforms in [0, 1) float64 ``[b, N + 1]`` from (seed, step, draw index) (torch path)."""
        base = _splitmix64(_splitmix64(seed.to(torch.int64) * 1_000_003 + 0x5EED) + step)
        torch.add(base[:, None], self.hj[None, :], out=self.bits)
        _mix_(self.bits, self.tmp).bitwise_right_shift_(11).bitwise_and_((1 << 53) - 1)
        return self.f.copy_(self.bits).mul_(2.0 ** -53)

    def draw(self, cdf: torch.Tensor, seed: torch.Tensor, step: int) -> torch.Tensor:
        """Sorted action indices ``[b, N]`` of ``N`` i.i.d. draws from the rows of the (unnormalised,
        float64) CDF ``cdf`` ``[b, K]``: inverse CDF of the sorted uniforms (exponential spacings)."""
        if self.nb is not None:
            f, b = self.f.numpy(), self.f.shape[0]
            seeds = seed.to(torch.int64).contiguous().numpy()
            _rows_in_parallel(self.nb.neg_uniforms, (seeds, step, self.hj_u64, f), b, f.size)
            torch.log1p(self.f, out=self.f)  # torch's log1p: the bits of the torch path
            _rows_in_parallel(self.nb.merge, (cdf.contiguous().numpy(), f, self.idx.numpy(), self.X.numpy(),
                                              self.nc, self.quads), len(self.quads), 4 * f.size + cdf.numel() // 8)
            return self.idx
        f = self.uniforms(seed, step).neg_()
        torch.cumsum(torch.log1p(f, out=f), dim=-1, out=self.e)  # −(E_1 + … + E_k), k = 1..N+1
        torch.mul(self.e[:, :-1], cdf[:, -1:] / self.e[:, -1:], out=self.u)
        torch.searchsorted(cdf, self.u, right=True, out=self.idx).clamp_(max=cdf.shape[-1] - 1)
        nc = torch.full((self.idx.shape[0], 1), self.nc, dtype=torch.int64, device=self.idx.device)
        self.X.copy_(torch.searchsorted(self.idx, nc)[:, 0])
        return self.idx

    def scatter(self, first: torch.Tensor, rest: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out = 0``, then ``first[r]`` added at each of the ``X[r]`` first draws of row ``r`` and
        ``rest[r]`` at the others (``scatter_add_``, in the order of the draws)."""
        if self.nb is not None and out.is_contiguous():
            _rows_in_parallel(self.nb.scatter, (self.idx.numpy(), self.X.numpy(), first.contiguous().numpy(),
                                                rest.contiguous().numpy(), out.numpy()),
                              out.shape[0], 2 * self.idx.numel() + out.numel())
            return out
        vals = torch.where(torch.arange(self.N, device=out.device)[None, :] < self.X[:, None],
                           first[:, None], rest[:, None])
        return out.zero_().scatter_add_(1, self.idx, vals)


def sample_counts(p: torch.Tensor, N: int, seed: torch.Tensor, step: int) -> torch.Tensor:
    """Counts ``[B, K]`` of ``N`` i.i.d. draws from each row of ``p`` ``[B, K]`` (exact).

    Inverse-CDF sampling of the sorted sample: the order statistics of ``N`` i.i.d. uniforms
    are ``U_(k) = (E_1 + … + E_k)/(E_1 + … + E_{N+1})`` with i.i.d. exponentials ``E_j =
    −log(1 − u_j)`` (Devroye 1986, Ch. V.2), ``u_j`` from the counter-based generator keyed by
    ``(seed[b], step, j)``; ``a_(k) = #{i : cdf_i <= U_(k)·cdf_K}`` with the float64 CDF of the
    row.  The counts are those of ``N`` i.i.d. draws; a row's draws do not depend on the other rows.

    >>> p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    >>> sample_counts(p, 10, torch.tensor([0, 1]), step=0)
    tensor([[5., 3., 2.],
            [0., 1., 9.]], dtype=torch.float64)
    """
    p = p.contiguous()
    dr = _Draws(p.shape[0], N, p.device)
    idx = dr.draw(_cumsum(p, torch.empty(p.shape, dtype=torch.float64, device=p.device)), seed.to(p.device), step)
    counts = torch.zeros(p.shape, dtype=p.dtype, device=p.device)
    return counts.scatter_add_(1, idx, torch.ones((), dtype=p.dtype, device=p.device).expand(idx.shape))


def outcome_advantages(adv: _adv.Advantage, X: np.ndarray, N: int) -> tuple[np.ndarray, np.ndarray]:
    """Advantage of a correct and of an incorrect draw in groups of ``N`` with ``X`` successes.

    Calls the registry on the canonical reward vectors (``X`` successes first); a value whose
    outcome does not occur is returned as 0.  Exact for every exchangeable group-level family.
    ``dr_grpo`` takes the closed form ``A_c = Δ(1 − p̂)``, ``A_w = −Δp̂`` (0 if ``X ∈ {0, N}``),
    which the tests check against the registry.
    """
    X = np.asarray(X, dtype=np.int64)
    rw, rc = adv.reward_values
    if adv.name == "dr_grpo":
        ph = X / N
        live = (X > 0) & (X < N)
        return np.where(live, (rc - rw) * (1 - ph), 0.0), np.where(live, -(rc - rw) * ph, 0.0)
    r = np.where(np.arange(N)[None, :] < X[:, None], rc, rw)
    A = adv(r)
    return np.where(X > 0, A[:, 0], 0.0), np.where(X < N, A[:, -1], 0.0)


# ------------------------------------------------------------------ simulation
def _metrics(u: torch.Tensor, p: torch.Tensor, p0c: torch.Tensor, nc: int, Q0: torch.Tensor,
             probs: bool = False) -> dict[str, torch.Tensor]:
    """Metrics of the policy ``p = softmax(u)``; the correct actions are ``0..nc−1``; with ``probs``
    also ``p_i`` for every action."""
    H = torch.logsumexp(u, -1) - (p[:, None, :] @ u[:, :, None])[:, 0, 0]  # −Σ p log p = lse − Σ p u
    pc = p[:, :nc]
    out = {"Q_pos": pc.sum(-1), "M_ret": 1 - torch.clamp(p0c - pc, min=0).sum(-1) / Q0, "entropy": H,
           "p_anchor": p[:, 0], "frac_lost": (pc < p0c).sum(-1).to(p.dtype) / nc}
    if probs:
        out |= {f"p_{i}": p[:, i] for i in range(p.shape[-1])}
    return out


def _not_finite(x: torch.Tensor) -> np.ndarray:
    """Rows of ``x`` with a non-finite entry (a non-finite entry makes the row's sum non-finite:
    one cheap pass, and the exact test only when a sum is not finite, an entry or an overflow)."""
    bad = ~torch.isfinite(x.sum(-1))
    if bool(bad.any()):
        bad = ~torch.isfinite(x).all(-1)
    return bad.cpu().numpy()


def _calibration_metrics(u: torch.Tensor, phi: torch.Tensor, w: torch.Tensor, q: torch.Tensor, sphi: torch.Tensor,
                    mu: float, nc: int, probs: bool = False) -> dict[str, torch.Tensor]:
    """Metrics of distribution-level calibration: the sampling distribution ``q = softmax(w)``,
    ``w = u − μ·φ`` (its correct mass ``sample_Q_pos`` and entropy ``sample_entropy``), the
    memory's entropy ``memory_entropy`` (``softmax(φ)``, into ``sphi``) and
    ``kl_sample_policy = KL(q‖π) = Σ q (log q − log π) = −μ Σ q φ − lse(w) + lse(u)``; with
    ``probs`` also ``q_i`` and ``m_i = softmax(φ)_i`` for every action."""
    torch.softmax(phi, -1, out=sphi)
    lse_w = torch.logsumexp(w, -1)
    dot = lambda a, b: (a[:, None, :] @ b[:, :, None])[:, 0, 0]  # noqa: E731 - row-wise Σ a b
    out = {"sample_Q_pos": q[:, :nc].sum(-1), "sample_entropy": lse_w - dot(q, w),
           "memory_entropy": torch.logsumexp(phi, -1) - dot(sphi, phi),
           "kl_sample_policy": -mu * dot(q, phi) - lse_w + torch.logsumexp(u, -1)}
    if probs:
        out |= {f"q_{i}": q[:, i] for i in range(q.shape[-1])} | {f"m_{i}": sphi[:, i] for i in range(q.shape[-1])}
    return out


def describe(cfg: Config, prog: str = "rlvr-sim categorical") -> str:
    """``prog`` and the settings that size a run, for the messages of :func:`simulate`'s checks.

    >>> describe(Config(N=(4, 16), seeds=(0,), steps=10))
    'rlvr-sim categorical (K=128000, N up to 16, 4 configurations, steps=10, record_every=10)'
    """
    n = len(cfg.N) * len(cfg.gamma) * len(cfg.seeds) * len(cfg.lr)
    return (f"{prog} (K={cfg.K}, N up to {max(cfg.N)}, {n} configurations, steps={cfg.steps}, "
            f"record_every={cfg.record_every})")


def _batched(execution: str, device: torch.device) -> bool:
    """Whether ``execution`` (:data:`EXECUTIONS`, checked) advances every configuration at once on ``device``."""
    return execution == "batched" or (execution == "auto" and device.type == "cuda")


def simulate(cfg: Config, *, device: str | torch.device = "auto", dtype: torch.dtype = torch.float32,
             progress: bool = False, execution: str | None = None,
             schedule: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every configuration of ``cfg`` as batched torch programs.

    Parameters
    ----------
    cfg : Config
        Sweep settings (:func:`preset` builds the named ones).
    device : "auto", "cpu", "cuda", ...
        Where the tensors live (``"auto"``: CUDA when present).
    dtype : torch.float64 or torch.float32
        Precision of logits, optimiser state and probabilities (the CDF is always float64).
    progress : bool
        Show a tqdm progress bar (configuration-steps).
    execution : "auto" (default), "blocks" or "batched"
        How the configurations are advanced (:data:`EXECUTIONS`): ``"batched"``: all together
        (the CUDA execution); ``"blocks"``: the configurations of one group size ``N`` form a
        block that runs all its steps before the next block (on the CPU its working set stays in
        cache, ~3x faster); ``"auto"``: batched on CUDA, blocks elsewhere.  Configurations never
        interact, so the trajectories are the same either way (tested on the CPU, bit for bit).
    schedule
        Deprecated name of ``execution`` (a ``DeprecationWarning``).

    Returns
    -------
    trajectory : DataFrame
        One row per configuration and recorded step (``step = 0`` is the initial policy, step
        ``t`` the policy after ``t`` updates): ``config, N, gamma, seed, lr, advantage,
        surrogate, optimizer, temperature, step, Q_pos, M_ret, entropy, p_anchor, frac_lost,
        Q_u_pos`` (``Q_u_pos``: correct mass not drawn by the step that starts there; at the last row, by
        the draws a further step would make), with ``cfg.record_probs`` also ``p_0 … p_{K−1}``
        and, with ``cfg.predict``, the predicted and
        measured one-step changes (NaN at the last row only: no step starts there).  With
        ``cfg.mu > 0`` also ``mu``, ``memory_lr`` (after ``temperature``) and ``sample_Q_pos``,
        ``sample_entropy``, ``memory_entropy``, ``kl_sample_policy`` (after ``frac_lost``; with
        ``record_probs`` then ``q_i``, ``m_i``); ``Q_u_pos`` stays the policy's correct mass
        that the step's draws (from ``q``) missed.
    final : DataFrame
        The last row of each configuration.

    Examples
    --------
    Ten actions, two of them correct, all equally likely at first (``Q_pos = 0.2``); group
    sizes 4 and 16, five Adam steps with learning rate 0.1:

    >>> cfg = Config(K=10, n_correct=2, z_anchor=0.0, z_correct=0.0, N=(4, 16), gamma=(0.0,),
    ...              seeds=(0,), lr=(0.1,), steps=5, record_every=5)
    >>> traj, final = simulate(cfg, device="cpu", dtype=torch.float64)
    >>> traj[["N", "step", "Q_pos", "M_ret", "entropy"]].round(4)
        N  step   Q_pos  M_ret  entropy
    0   4     0  0.2000    1.0   2.3026
    1   4     5  0.3110    1.0   2.2636
    2  16     0  0.2000    1.0   2.3026
    3  16     5  0.3842    1.0   2.2123

    The same with distribution-level calibration (``mu = 0.5``): the draws come from ``q``,
    which puts less mass than ``π`` on the correct actions the memory has seen most:

    >>> cfg = dataclasses.replace(cfg, mu=0.5)
    >>> traj, final = simulate(cfg, device="cpu", dtype=torch.float64)
    >>> final[["N", "Q_pos", "sample_Q_pos", "memory_entropy", "kl_sample_policy"]].round(4)
        N   Q_pos  sample_Q_pos  memory_entropy  kl_sample_policy
    0   4  0.3111        0.2877          2.2815            0.0048
    1  16  0.3832        0.3778          2.2840            0.0040
    """
    cfg.validate()
    dev = resolve_device(device)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    batched = _batched(_execution(execution, schedule), dev)
    check_memory(cfg.memory_bytes(dev, dtype, "batched" if batched else "blocks"), describe(cfg), device=dev)
    grid = cfg.grid()
    per_n = len(cfg.gamma) * len(cfg.seeds) * len(cfg.lr)  # N is the outer axis of the grid
    groups = [(n, i * per_n, (i + 1) * per_n) for i, n in enumerate(cfg.N)]
    blocks = [groups] if batched else [[g] for g in groups]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(grid) * cfg.steps, desc="categorical", unit="config-step", unit_scale=True)
    workers = min(torch.get_num_threads(), len(blocks)) if dev.type == "cpu" else 1
    try:
        if workers > 1:
            frames = _run_blocks_in_threads(cfg, grid, blocks, dev, dtype, bar, workers)
        else:
            frames = [_Block(cfg, grid, blk, dev, dtype).run(bar) for blk in blocks]
    finally:
        if bar is not None:
            bar.close()
    traj = pd.concat(frames, ignore_index=True)
    meta = grid.assign(advantage=cfg.advantage, surrogate=cfg.surrogate, optimizer=cfg.optimizer,
                       temperature=cfg.temperature)
    if cfg.mu > 0:  # the calibration's settings, per configuration (memory_lr: the row's lr unless given)
        meta = meta.assign(mu=cfg.mu, memory_lr=meta.lr if cfg.memory_lr is None else cfg.memory_lr)
    traj = meta.merge(traj, on="config").sort_values(["config", "step"], ignore_index=True)
    final = traj[traj.step == cfg.steps].reset_index(drop=True)
    return traj, final


def _run_blocks_in_threads(cfg: Config, grid: pd.DataFrame, blocks: list, dev: torch.device, dtype: torch.dtype,
                           bar: Any, workers: int) -> list[pd.DataFrame]:
    """The blocks run by ``workers`` threads at once, each with single-threaded torch operations
    (torch's thread count is set to 1 meanwhile, then restored), the largest group sizes first;
    the frames in the order of ``blocks``.  On the 2-core CPU this machine has, two blocks side by
    side beat one block whose every operation is split between two OpenMP threads (no barrier per
    operation; far less sensitive to other load).  The numbers are those of a sequential run
    (the blocks never interact; torch's CPU operations give the same results on one thread as on
    several, tested).  A failure (or Ctrl-C) stops the other blocks at their next step."""
    _kernels(dev)  # compiled here, before the threads
    stop = threading.Event()
    order = sorted(range(len(blocks)), key=lambda i: -max(n for n, _, _ in blocks[i]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="categorical-block") as pool:
            futures = {i: pool.submit(lambda blk: _Block(cfg, grid, blk, dev, dtype).run(bar, stop), blocks[i])
                       for i in order}
            try:
                return [futures[i].result() for i in range(len(blocks))]
            except BaseException:
                stop.set()
                for fut in futures.values():
                    fut.cancel()
                raise
    finally:
        torch.set_num_threads(threads)


class _Stopped(Exception):
    """A block stopped because another one failed."""


#: the one-step changes recorded with ``Config(predict=True)`` (NaN at the last row)
_PREDICTED = ("dQ_pos", "dQ_pos_first_order", "dQ_pos_eq8", "dH", "dH_first_order")


class _Block:
    """The configurations of whole group-size groups ``(N, lo, hi)`` (contiguous rows of the grid),
    advanced together; :meth:`run` is the training loop, one method per phase of a step:

    :meth:`sample` (exact group sampling) → :meth:`advantages` (registry) →
    :meth:`gradient` (the surrogate's ascent direction in ``z``, focal weight included) →
    :meth:`optimizer_step` (SGD or Adam) → :meth:`refresh_policy`; on recorded steps
    :meth:`metrics` before the step and :meth:`predictions` after it.
    """

    def __init__(self, cfg: Config, grid: pd.DataFrame, groups: list[tuple[int, int, int]], dev: torch.device,
                 dtype: torch.dtype):
        self.cfg, self.dev, self.dtype = cfg, dev, dtype
        self.adv = cfg.make_advantage()
        lo0, hi0 = groups[0][1], groups[-1][2]
        self.sub = sub = grid.iloc[lo0:hi0]
        self.B, self.T, self.nc = len(sub), cfg.temperature, cfg.n_correct  # the correct actions are 0..nc-1
        z0, self.correct = initial_logits(cfg)
        self.z = torch.tensor(z0, dtype=dtype, device=dev).repeat(self.B, 1)
        self.rew = None if cfg.rewards is None else torch.tensor(cfg.rewards, dtype=torch.float64, device=dev)
        self.Nt = torch.tensor(sub.N.to_numpy(), dtype=dtype, device=dev)
        self.gam = torch.tensor(sub.gamma.to_numpy(), dtype=dtype, device=dev)
        self.seeds = torch.tensor(sub.seed.to_numpy(), dtype=torch.int64, device=dev)
        self.rows = [(n, slice(lo - lo0, hi - lo0)) for n, lo, hi in groups]
        self.draws = [_Draws(sl.stop - sl.start, n, dev, self.nc) for n, sl in self.rows]
        self.one = torch.ones((), dtype=dtype, device=dev)
        # buffers reused every step (no large allocation in the loop)
        self.ez = torch.empty_like(self.z)  # softmax(z/T), the policy
        self.cdf = torch.empty(self.z.shape, dtype=torch.float64, device=dev)
        self.g = torch.empty_like(self.z)
        self.counts = torch.empty_like(self.z)
        self.opt = _Ascent(cfg, self.z, sub.lr.to_numpy())
        self.mu, self.phi = cfg.mu, None
        if cfg.mu > 0:  # distribution-level calibration: the memory logits and their buffers
            self.phi = torch.zeros_like(self.z)  # φ = 0: the memory starts uniform, q_0 = π_0
            self.w = torch.empty_like(self.z)  # z/T − μ·φ, the calibrated logits
            self.q = torch.empty_like(self.z)  # softmax(w), the sampling distribution
            self.sphi = torch.empty_like(self.z)  # softmax(φ)
            self.gphi = torch.empty_like(self.z)  # counts/N − softmax(φ)
            mlr = sub.lr.to_numpy() if cfg.memory_lr is None else np.full(self.B, cfg.memory_lr)
            self.calibration_opt = _Ascent(cfg, self.phi, mlr)
            self.inv_N = (1 / self.Nt).contiguous()
        self.refresh_policy()
        self.p0c = self.ez[:, :self.nc].clone()
        self.Q0 = self.p0c.sum(-1)

    # ------------------------------------------------------------ the loop
    def run(self, bar: Any = None, stop: threading.Event | None = None) -> pd.DataFrame:
        """All steps; the recorded rows (``config, step``, metrics) as a DataFrame (``stop``: set
        by another thread to end the run at the next step, raising :class:`_Stopped`)."""
        cfg, out = self.cfg, []
        for t in range(cfg.steps + 1):
            if stop is not None and stop.is_set():
                raise _Stopped
            rec = t % cfg.record_every == 0 or t == cfg.steps
            row = {"step": np.full(self.B, t), **self.metrics(t)} if rec else None
            X = self.sample(t, counts=rec or cfg.surrogate == "trpo" or cfg.predict)
            if rec:
                row["Q_u_pos"] = self.unsampled_correct_mass()
            if t == cfg.steps:  # final state: its Q_u_pos is that of the draws a next step would make
                out.append(row | ({k: np.full(self.B, np.nan) for k in _PREDICTED} if cfg.predict else {}))
                break
            sampled = self.counts.double().cpu().numpy() if rec and cfg.predict else None
            coef = torch.pow(1 - X.to(self.dtype) / self.Nt, self.gam) / (self.Nt * self.T)  # focal / N, 1/T for z = T u
            self.gradient(X, coef)
            z_before = self.z.clone() if sampled is not None else None
            self.optimizer_step(t)
            if sampled is not None:
                row |= self.predictions(z_before, coef, sampled)
            if rec:
                out.append(row)
            if self.phi is not None:  # Alg. 1 lines 21-22: after the policy step
                self.calibration_step(t)
            self.refresh_policy()
            if bar is not None:
                bar.update(self.B)
        traj = pd.concat([pd.DataFrame(r) for r in out], ignore_index=True)
        traj.insert(0, "config", np.tile(self.sub.config.to_numpy(), len(out)))
        return traj

    # ------------------------------------------------------------ policy and metrics
    def refresh_policy(self) -> None:
        """``ez = softmax(z/T)`` and the float64 CDF ``cdf`` of the sampling distribution from
        ``z``: the policy's own, or with memory logits (``mu > 0``; Over-Sharpening Alg. 1
        line 5) that of ``q = softmax(z/T − μ·φ)`` (into ``w``, ``q``)."""
        u = self.z / self.T if self.T != 1 else self.z
        torch.softmax(u, -1, out=self.ez)
        if self.phi is None:
            _cumsum(self.ez, self.cdf)
            return
        torch.add(u, self.phi, alpha=-self.mu, out=self.w)
        torch.softmax(self.w, -1, out=self.q)
        _cumsum(self.q, self.cdf)

    def calibration_step(self, t: int) -> None:
        """One optimizer step of the memory logits ``φ`` on the mean log-likelihood of step
        ``t``'s draws (Over-Sharpening Alg. 1 line 22, cross-entropy on the sampled actions):
        ascent direction ``∇_φ (1/N)Σ_j log softmax(φ)_{a_j} = counts/N − softmax(φ)``, with the
        policy's optimizer kind and its own state and learning rate (``memory_lr``)."""
        torch.softmax(self.phi, -1, out=self.sphi)
        for (_, sl), dr in zip(self.rows, self.draws):  # counts/N: 1/N scattered onto the draws
            dr.scatter(self.inv_N[sl], self.inv_N[sl], self.gphi[sl])
        self.gphi.sub_(self.sphi)
        self.calibration_opt.step(self.phi, self.gphi, t)

    def metrics(self, t: int = 0) -> dict[str, np.ndarray]:
        """The recorded metrics of the current policy (:func:`_metrics`) at step ``t``;
        ``ValueError`` (:func:`simulations.runs.diverged`) if the logits or a metric are not finite."""
        u = self.z / self.T if self.T != 1 else self.z
        out = _np(_metrics(u, self.ez, self.p0c, self.nc, self.Q0, self.cfg.record_probs))
        bad, bad_calibration = _not_finite(u), np.zeros(self.B, dtype=bool)
        for v in out.values():
            bad |= ~np.isfinite(v)
        if self.phi is not None:
            calibration = _np(_calibration_metrics(u, self.phi, self.w, self.q, self.sphi, self.mu, self.nc,
                                                   self.cfg.record_probs))
            bad_calibration = _not_finite(self.phi)
            for v in calibration.values():
                bad_calibration |= ~np.isfinite(v)
            out |= calibration
        if bad.any() or bad_calibration.any():
            in_calibration = not bad.any()  # the logits are finite: the memory logits diverged
            row = self.sub.iloc[int(np.argmax(bad_calibration if in_calibration else bad))]
            where = f"configuration {int(row.config)}: N={int(row.N)}, gamma={row.gamma:g}, seed={int(row.seed)}"
            if self.T != 1:
                where += f", temperature={self.T:g}"
            if in_calibration:
                lr = row.lr if self.cfg.memory_lr is None else self.cfg.memory_lr
                err = diverged(t, where + f", mu={self.mu:g}", lr, "non-finite memory logits")
                raise ValueError("memory_" + str(err))  # the setting to change: memory_lr
            raise diverged(t, where, row.lr, "non-finite logits")
        return out

    def unsampled_correct_mass(self) -> np.ndarray:
        """``Q_u_pos``: the correct mass not drawn by the current step (needs the counts)."""
        nc = self.nc
        return (self.ez[:, :nc] * (self.counts[:, :nc] == 0)).sum(-1).double().cpu().numpy()

    def predictions(self, z_before: torch.Tensor, coef: torch.Tensor, sampled: np.ndarray) -> dict[str, np.ndarray]:
        """The measured and predicted one-step changes of ``Q_pos`` and the entropy (float64)."""
        T, correct = self.T, self.correct
        zn, dzn = (z_before / T).double().cpu().numpy(), ((self.z - z_before) / T).double().cpu().numpy()
        eta_eq8 = self.sub.lr.to_numpy() * (coef * self.Nt).double().cpu().numpy()
        return {"dQ_pos": _cat.exact_subset_mass_change(zn, dzn, correct),
                "dQ_pos_first_order": _cat.subset_mass_change(zn, dzn, correct),
                "dQ_pos_eq8": _cat.delta_q_pos(zn, correct, sampled, eta_eq8, self.cfg.reward_values).total,
                "dH": _ent.exact_change(zn, dzn),
                "dH_first_order": _ent.first_order_change(zn, dzn)}

    # ------------------------------------------------------------ one step
    def sample(self, t: int, *, counts: bool) -> torch.Tensor:
        """Exact group sampling of step ``t``, one batched call per group size; returns ``X`` (the
        correct draws per configuration).  The sorted draws of group ``k`` stay in
        ``draws[k].idx`` (the first ``X`` are correct); with ``counts`` also the counts per action."""
        for (_, sl), dr in zip(self.rows, self.draws):
            dr.draw(self.cdf[sl], self.seeds[sl], t)
        X = self.draws[0].X if len(self.draws) == 1 else torch.cat([dr.X for dr in self.draws])
        if counts:
            for (_, sl), dr in zip(self.rows, self.draws):
                ones = self.one.expand(sl.stop - sl.start).contiguous()
                dr.scatter(ones, ones, self.counts[sl])
        return X

    def advantages(self, X: torch.Tensor) -> Any:
        """Registry advantages of the step's draws: binary rewards, ``(A_c, A_w)`` per configuration
        (:func:`outcome_advantages`); per-action rewards, one ``[b, N]`` tensor per group size
        (the advantage of each draw's reward ``r[a_j]``)."""
        if self.rew is None:
            Xc = X.cpu().numpy()
            AcAw = np.empty((2, self.B))
            for n, sl in self.rows:
                AcAw[:, sl] = outcome_advantages(self.adv, Xc[sl], n)
            return torch.tensor(AcAw, dtype=self.dtype, device=self.dev)
        return [torch.tensor(self.adv.graded_call(self.rew[dr.idx].cpu().numpy()), dtype=self.dtype, device=self.dev)
                for dr in self.draws]

    def gradient(self, X: torch.Tensor, coef: torch.Tensor) -> None:
        """The surrogate's ascent direction in ``z`` into ``g`` (``coef``: focal weight / (N T))."""
        p, g = self.ez, self.g
        if self.cfg.surrogate == "trpo":  # rewards of the distinct sampled support, not advantages
            R = torch.where(self.counts > 0, self.one, 0 * self.one)
            if self.rew is None:
                rw, rc = self.cfg.reward_values
                R[:, :self.nc] *= rc
                R[:, self.nc:] *= rw
            else:
                R *= self.rew.to(self.dtype)
            torch.mul(R.sub_((p * R).sum(-1, keepdim=True)).mul_(p), coef[:, None], out=g)
            return
        A = self.advantages(X)
        if self.cfg.surrogate == "logprob":  # g = coef·(S − C π)
            self._scatter_draws(X, A, coef)
            C = self._advantage_sum(X, A) * coef
            if bool((C != 0).any()):  # C = 0 for every mean-baseline family: skip the pass
                g.addcmul_(C[:, None], p, value=-1.0)
        else:  # prob: g = π ∘ (S − Σ_k π_k S_k) · coef
            self._scatter_draws(X, A, None)
            g.mul_(p)
            g.addcmul_(g.sum(-1, keepdim=True), p, value=-1.0).mul_(coef[:, None])

    def _scatter_draws(self, X: torch.Tensor, A: Any, scale: torch.Tensor | None) -> None:
        """``g_i = S_i = Σ_{draws j of i} A_j`` (times ``scale``), scattered straight into ``g``."""
        if self.rew is None:  # sorted draws: the X correct ones first
            AcAw = A if scale is None else A * scale
            Ac, Aw = AcAw[0], AcAw[1]
            for (_, sl), dr in zip(self.rows, self.draws):
                dr.scatter(Ac[sl], Aw[sl], self.g[sl])
            return
        self.g.zero_()
        for k, ((_, sl), dr) in enumerate(zip(self.rows, self.draws)):
            self.g[sl].scatter_add_(1, dr.idx, A[k] if scale is None else A[k] * scale[sl, None])

    def _advantage_sum(self, X: torch.Tensor, A: Any) -> torch.Tensor:
        """``C = Σ_j A_j`` per configuration."""
        if self.rew is None:
            Xf, (Ac, Aw) = X.to(self.dtype), A
            return Xf * Ac + (self.Nt - Xf) * Aw
        return torch.cat([a.sum(-1) for a in A])

    def optimizer_step(self, t: int) -> None:
        """Ascend ``g``: SGD ``z += lr·g``, torch's Adam (one learning rate), or Adam written out."""
        self.opt.step(self.z, self.g, t)


class _Ascent:
    """The optimizer of one ``[B, K]`` parameter (the logits, or the memory logits), its own
    state, one learning rate per row: SGD ``x += lr·g``, torch's Adam (``maximize``; one learning
    rate for every row), or the same Adam written out (several learning rates)."""

    def __init__(self, cfg: Config, x: torch.Tensor, lr: np.ndarray):
        self.kind, self.betas, self.eps = cfg.optimizer, cfg.betas, cfg.eps
        self.lr = torch.tensor(lr, dtype=x.dtype, device=x.device)[:, None]
        self.m = self.v = self.steps_taken = None
        self.fused = True if x.device.type in ("cpu", "cuda") else None
        if self.kind == "adam":
            self.m, self.v = torch.zeros_like(x), torch.zeros_like(x)
        if self.kind == "adam" and len(set(lr.tolist())) == 1:
            # torch's own Adam, functional form (torch.optim.adam.adam: the fused kernel where
            # available, one pass over x, m, v; the update of torch.optim.Adam without its
            # per-step bookkeeping); its step count, as torch.optim.Adam keeps it
            self.steps_taken = torch.zeros((), dtype=torch.float32, device=x.device)
            self.adam_lr = float(lr[0])

    def step(self, x: torch.Tensor, g: torch.Tensor, t: int) -> None:
        """Ascend ``g`` at step ``t`` (``x`` in place)."""
        if self.kind == "sgd":
            x.addcmul_(self.lr, g)
        elif self.steps_taken is not None:
            b1, b2 = self.betas
            torch_adam([x], [g], [self.m], [self.v], [], [self.steps_taken], amsgrad=False, beta1=b1, beta2=b2,
                       lr=self.adam_lr, weight_decay=0.0, eps=self.eps, maximize=True, fused=self.fused)
        else:
            (b1, b2), m, v = self.betas, self.m, self.v
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2 ** (t + 1))).sqrt_().add_(self.eps)
            x.addcmul_(self.lr / (1 - b1 ** (t + 1)), m / denom)


def _np(met: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    # copy: a float64 CPU tensor's .double().cpu() is the tensor itself, and the p_i / p_anchor
    # columns are views of the policy buffer that the next step overwrites in place
    return {k: t.double().cpu().numpy().copy() for k, t in met.items()}


# ------------------------------------------------------------------ CLI
#: the fields of :class:`Config` whose flags :func:`runner.add_settings` generates
_SETTINGS = CALIBRATION_FIELDS

def _run_cli(args: argparse.Namespace) -> int:
    check_out(args)  # before any work
    seeds = None if args.seeds is None else checks.integer("seeds", args.seeds, low=1)
    params = runner.parse_params(args.param)
    kw = dict(steps=args.steps, N=args.N, gamma=args.gamma, surrogate=args.surrogate, optimizer=args.optimizer,
              advantage=args.advantage, advantage_params=params or None,
              **runner.given_settings(args, Config, names=_SETTINGS))
    dev = resolve_device(args.device)
    if seeds is not None:  # the size of the sweep is checked before its seed list is built
        sized = dataclasses.replace(preset(args.preset, seeds=(0,), **kw), seeds=range(seeds))
        check_memory(sized.memory_bytes(dev), describe(sized), device=dev)
    cfg = preset(args.preset, seeds=None if seeds is None else tuple(range(seeds)), **kw)
    t0 = time.perf_counter()
    traj, final = simulate(cfg, device=dev, progress=not args.quiet)
    wall = time.perf_counter() - t0
    write_run(args.out, traj, final, {"preset": args.preset, "config": cfg.to_dict(), "torch": torch.__version__,
                                      "wall_s": wall},
              settings=command_settings(args), seed=list(cfg.seeds), device=dev, overwrite=args.overwrite)
    if not args.quiet:
        print(f"wrote {args.out}/trajectory.csv, final.csv, config.json ({len(final)} configurations, "
              f"{wall:.1f} s on {dev})")
    return 0
