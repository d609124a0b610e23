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

Exact sampling without a loop over draws or configurations: per configuration the step's
uniforms come from a counter-based generator (SplitMix64 of ``(seed, step, draw index)``), so
a configuration draws the same actions whether it runs alone or in a batch; each uniform is
turned into sorted uniforms (exponential spacings) and mapped through the configuration's
float64 CDF with ``torch.searchsorted`` (inverse-CDF, exact up to float64 rounding, ``~1e-16``
relative).  Cost ``O(K + N log K)`` per configuration and
step.  Configurations are grouped by group size ``N`` (one batched call per distinct ``N``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import torch

from analysis.runtime import check_memory, resolve_device
from rlvr_theory import advantages as _adv
from rlvr_theory import categorical as _cat
from rlvr_theory import checks, runner
from rlvr_theory import entropy as _ent

__all__ = ["Config", "PRESETS", "preset", "initial_logits", "sample_counts", "outcome_advantages",
           "simulate", "describe", "INDEX_MAX", "add_parser"]

SURROGATES = ("logprob", "prob", "trpo")
#: the largest index the engine's int64 tensors can hold: group sizes ``N <= INDEX_MAX - 1``
#: (draw indices ``0..N``); larger actions, steps or seed counts are refused by the memory check
INDEX_MAX = 2 ** 63 - 1
OPTIMIZERS = ("sgd", "adam")


# ------------------------------------------------------------------ configuration
def _each(check: Any, name: str, values: Any, **bounds: Any) -> tuple:
    """``check`` (:mod:`rlvr_theory.checks`) applied to every entry of a non-empty list: a tuple."""
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
    toys; ``record_probs`` (``K <= 64``) records every action's probability ``p_i``.
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

    def validate(self) -> Config:
        """Raise ``ValueError`` naming the first bad field and its allowed values.

        Checks follow :mod:`rlvr_theory.checks` (integral floats and numpy integers are
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
        adv = self.make_advantage()
        if self.rewards is not None and not adv.graded:
            ok = ", ".join(n for n in _adv.names() if _adv.registry()[n].graded)
            raise ValueError(f"advantage must be one of {ok} with per-action rewards, got {self.advantage!r}")
        if adv.batch_level or adv.uses_lengths:
            raise ValueError(f"advantage must be a group-level family without lengths, got {self.advantage!r}")
        if min(self.N) < adv.min_group_size():
            raise ValueError(f"N must be >= {adv.min_group_size()} for advantage {self.advantage!r}, got {min(self.N)}")
        return self

    def memory_bytes(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> int:
        """Estimated peak memory of :func:`simulate` in bytes, from the settings (Python integers:
        no overflow, however large the request).

        Per configuration: about ``12`` buffers of ``K`` numbers (logits, policy, CDF, gradient,
        counts, optimiser state, temporaries) and ``7`` of ``N + 1`` (the draws); on CUDA every
        configuration is resident at once, on the CPU one group size at a time.  Plus the
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
        block = [per_n * (K * (8 * es + 4 * 8) + 7 * 8 * (int(n) + 1)) + 8 * (int(n) + 1) for n in self.N]
        engine = sum(block) if torch.device(device).type == "cuda" else max(block)
        records = int(self.steps) // int(self.record_every) + 2
        cols = 20 + (K if self.record_probs else 0)
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


PRESETS: dict[str, dict[str, Any]] = {
    # F-GRPO App. J / Fig. 4: 17 N x 2 gamma x 4 seeds x 1,000 steps x 128,000 actions
    "fgrpo-fig4": {},
    # same shape, three N (one per regime), one seed, fewer steps: the regression/CI preset
    "fgrpo-fig4-small": {"N": (4, 1024, 131_072), "seeds": (0,), "steps": 600, "record_every": 10},
}


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


class _Draws:
    """Reusable buffers of ``N`` draws in ``b`` rows, with the draw-index hashes cached.

    The uniforms are those of the counter-based stream ``SplitMix64(h(seed, step) +
    SplitMix64(j))``, ``j = 0..N``; the step's work is a handful of in-place passes.
    """

    def __init__(self, b: int, N: int, device: torch.device):
        self.N = N
        self.hj = _splitmix64(torch.arange(N + 1, device=device, dtype=torch.int64))
        self.bits = torch.empty(b, N + 1, dtype=torch.int64, device=device)
        self.tmp = torch.empty_like(self.bits)
        self.f = torch.empty(b, N + 1, dtype=torch.float64, device=device)
        self.e = torch.empty_like(self.f)
        self.u = torch.empty(b, N, dtype=torch.float64, device=device)
        self.idx = torch.empty(b, N, dtype=torch.int64, device=device)

    def uniforms(self, seed: torch.Tensor, step: int) -> torch.Tensor:
        """Uniforms in [0, 1) float64 ``[b, N + 1]`` from (seed, step, draw index)."""
        base = _splitmix64(_splitmix64(seed.to(torch.int64) * 1_000_003 + 0x5EED) + step)
        torch.add(base[:, None], self.hj[None, :], out=self.bits)
        _mix_(self.bits, self.tmp).bitwise_right_shift_(11).bitwise_and_((1 << 53) - 1)
        return self.f.copy_(self.bits).mul_(2.0 ** -53)

    def draw(self, cdf: torch.Tensor, seed: torch.Tensor, step: int) -> torch.Tensor:
        """Sorted action indices ``[b, N]`` of ``N`` i.i.d. draws from the rows of the (unnormalised,
        float64) CDF ``cdf`` ``[b, K]``: inverse CDF of the sorted uniforms (exponential spacings)."""
        f = self.uniforms(seed, step).neg_()
        torch.cumsum(torch.log1p(f, out=f), dim=-1, out=self.e)  # −(E_1 + … + E_k), k = 1..N+1
        torch.mul(self.e[:, :-1], cdf[:, -1:] / self.e[:, -1:], out=self.u)
        return torch.searchsorted(cdf, self.u, right=True, out=self.idx).clamp_(max=cdf.shape[-1] - 1)


def sample_counts(p: torch.Tensor, N: int, seed: torch.Tensor, step: int) -> torch.Tensor:
    """Counts ``[B, K]`` of ``N`` i.i.d. draws from each row of ``p`` ``[B, K]`` (exact).

    Inverse-CDF sampling of the sorted sample: the order statistics of ``N`` i.i.d. uniforms
    are ``U_(k) = (E_1 + … + E_k)/(E_1 + … + E_{N+1})`` with i.i.d. exponentials ``E_j =
    −log(1 − u_j)`` (Devroye 1986, Ch. V.2), ``u_j`` from the counter-based generator keyed by
    ``(seed[b], step, j)``; ``a_(k) = #{i : cdf_i <= U_(k)·cdf_K}`` with the float64 CDF of the
    row.  The counts are those of ``N`` i.i.d. draws; a row's draws do not depend on the other rows.
    """
    idx = _Draws(p.shape[0], N, p.device).draw(torch.cumsum(p, -1, dtype=torch.float64), seed, step)
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


def describe(cfg: Config, prog: str = "rlvr-sim categorical") -> str:
    """``prog`` and the settings that size a run, for the messages of :func:`simulate`'s checks.

    >>> describe(Config(N=(4, 16), seeds=(0,), steps=10))
    'rlvr-sim categorical (K=128000, N up to 16, 4 configurations, steps=10, record_every=10)'
    """
    n = len(cfg.N) * len(cfg.gamma) * len(cfg.seeds) * len(cfg.lr)
    return (f"{prog} (K={cfg.K}, N up to {max(cfg.N)}, {n} configurations, steps={cfg.steps}, "
            f"record_every={cfg.record_every})")


def simulate(cfg: Config, *, device: str | torch.device = "auto", dtype: torch.dtype = torch.float32,
             progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every configuration of ``cfg`` as batched torch programs.

    Parameters
    ----------
    cfg : Config
        Sweep settings (:func:`preset` builds the named ones).
    device : "auto", "cpu", "cuda", ...
        Where the tensors live (``"auto"``: CUDA when present).  On CUDA all configurations
        advance together; on CPU the configurations of one group size ``N`` form a block that
        runs all its steps before the next block (its working set stays in cache, ~3x faster).
        Configurations never interact, so the trajectories are the same either way.
    dtype : torch.float64 or torch.float32
        Precision of logits, optimiser state and probabilities (the CDF is always float64).
    progress : bool
        Show a tqdm progress bar (configuration-steps).

    Returns
    -------
    trajectory : DataFrame
        One row per configuration and recorded step (``step = 0`` is the initial policy, step
        ``t`` the policy after ``t`` updates): ``config, N, gamma, seed, lr, advantage,
        surrogate, optimizer, temperature, step, Q_pos, M_ret, entropy, p_anchor, frac_lost,
        Q_u_pos`` (``Q_u_pos``: correct mass not drawn by the step that starts there; at the last row, by
        the draws a further step would make), with ``cfg.record_probs`` also ``p_0 … p_{K−1}``
        and, with ``cfg.predict``, the predicted and
        measured one-step changes (NaN at the last row only: no step starts there).
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
    """
    cfg.validate()
    dev = resolve_device(device)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    check_memory(cfg.memory_bytes(dev, dtype), describe(cfg), device=dev)
    grid = cfg.grid()
    per_n = len(cfg.gamma) * len(cfg.seeds) * len(cfg.lr)  # N is the outer axis of the grid
    groups = [(n, i * per_n, (i + 1) * per_n) for i, n in enumerate(cfg.N)]
    blocks = [groups] if dev.type == "cuda" else [[g] for g in groups]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(grid) * cfg.steps, desc="categorical", unit="config-step", unit_scale=True)
    frames = [_Block(cfg, grid, blk, dev, dtype).run(bar) for blk in blocks]
    if bar is not None:
        bar.close()
    traj = pd.concat(frames, ignore_index=True)
    meta = grid.assign(advantage=cfg.advantage, surrogate=cfg.surrogate, optimizer=cfg.optimizer,
                       temperature=cfg.temperature)
    traj = meta.merge(traj, on="config").sort_values(["config", "step"], ignore_index=True)
    final = traj[traj.step == cfg.steps].reset_index(drop=True)
    return traj, final


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
        self.lr = torch.tensor(sub.lr.to_numpy(), dtype=dtype, device=dev)[:, None]
        self.seeds = torch.tensor(sub.seed.to_numpy(), dtype=torch.int64, device=dev)
        self.rows = [(n, slice(lo - lo0, hi - lo0)) for n, lo, hi in groups]
        self.draws = [_Draws(sl.stop - sl.start, n, dev) for n, sl in self.rows]
        self.one = torch.ones((), dtype=dtype, device=dev)
        # buffers reused every step (no large allocation in the loop)
        self.ez = torch.empty_like(self.z)  # softmax(z/T), the policy
        self.cdf = torch.empty(self.z.shape, dtype=torch.float64, device=dev)
        self.g = torch.empty_like(self.z)
        self.counts = torch.empty_like(self.z)
        self.opt = self.m = self.v = None
        if cfg.optimizer == "adam" and len(set(sub.lr)) == 1:
            # torch's own Adam (fused kernel where available): one pass over z, m, v
            self.opt = torch.optim.Adam([self.z], lr=float(sub.lr.iloc[0]), betas=cfg.betas, eps=cfg.eps,
                                        maximize=True, fused=True if dev.type in ("cpu", "cuda") else None)
        elif cfg.optimizer == "adam":  # one learning rate per configuration: Adam written out
            self.m, self.v = torch.zeros_like(self.z), torch.zeros_like(self.z)
        self.refresh_policy()
        self.p0c = self.ez[:, :self.nc].clone()
        self.Q0 = self.p0c.sum(-1)

    # ------------------------------------------------------------ the loop
    def run(self, bar: Any = None) -> pd.DataFrame:
        """All steps; the recorded rows (``config, step``, metrics) as a DataFrame."""
        cfg, out = self.cfg, []
        for t in range(cfg.steps + 1):
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
            self.refresh_policy()
            if bar is not None:
                bar.update(self.B)
        traj = pd.concat([pd.DataFrame(r) for r in out], ignore_index=True)
        traj.insert(0, "config", np.tile(self.sub.config.to_numpy(), len(out)))
        return traj

    # ------------------------------------------------------------ policy and metrics
    def refresh_policy(self) -> None:
        """``ez = softmax(z/T)`` and its float64 CDF ``cdf`` from ``z``."""
        torch.softmax(self.z / self.T if self.T != 1 else self.z, -1, out=self.ez)
        torch.cumsum(self.ez, -1, dtype=torch.float64, out=self.cdf)

    def metrics(self, t: int = 0) -> dict[str, np.ndarray]:
        """The recorded metrics of the current policy (:func:`_metrics`) at step ``t``;
        ``ValueError`` (:func:`simulations.cli.diverged`) if the logits or a metric are not finite."""
        u = self.z / self.T if self.T != 1 else self.z
        out = _np(_metrics(u, self.ez, self.p0c, self.nc, self.Q0, self.cfg.record_probs))
        bad = ~torch.isfinite(u).all(-1).cpu().numpy()
        for v in out.values():
            bad |= ~np.isfinite(v)
        if bad.any():
            from .cli import diverged

            row = self.sub.iloc[int(np.argmax(bad))]
            where = f"configuration {int(row.config)}: N={int(row.N)}, gamma={row.gamma:g}, seed={int(row.seed)}"
            if self.T != 1:
                where += f", temperature={self.T:g}"
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
        X = torch.empty(self.B, dtype=torch.int64, device=self.dev)
        for (_, sl), dr in zip(self.rows, self.draws):
            ix = dr.draw(self.cdf[sl], self.seeds[sl], t)
            nc = torch.full((ix.shape[0], 1), self.nc, dtype=torch.int64, device=self.dev)
            X[sl] = torch.searchsorted(ix, nc)[:, 0]
        if counts:
            self.counts.zero_()
            for (_, sl), dr in zip(self.rows, self.draws):
                self.counts[sl].scatter_add_(1, dr.idx, self.one.expand(dr.idx.shape))
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
        self.g.zero_()
        if self.rew is None:
            Ac, Aw = A if scale is None else A * scale
        for k, ((n, sl), dr) in enumerate(zip(self.rows, self.draws)):
            if self.rew is None:
                first = torch.arange(n, device=self.dev)[None, :] < X[sl, None]  # sorted draws: X correct first
                vals = torch.where(first, Ac[sl, None], Aw[sl, None])
            else:
                vals = A[k] if scale is None else A[k] * scale[sl, None]
            self.g[sl].scatter_add_(1, dr.idx, vals)

    def _advantage_sum(self, X: torch.Tensor, A: Any) -> torch.Tensor:
        """``C = Σ_j A_j`` per configuration."""
        if self.rew is None:
            Xf, (Ac, Aw) = X.to(self.dtype), A
            return Xf * Ac + (self.Nt - Xf) * Aw
        return torch.cat([a.sum(-1) for a in A])

    def optimizer_step(self, t: int) -> None:
        """Ascend ``g``: SGD ``z += lr·g``, torch's Adam (one learning rate), or Adam written out."""
        z, g = self.z, self.g
        if self.cfg.optimizer == "sgd":
            z.addcmul_(self.lr, g)
        elif self.opt is not None:
            z.grad = g
            self.opt.step()
        else:
            (b1, b2), m, v = self.cfg.betas, self.m, self.v
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2 ** (t + 1))).sqrt_().add_(self.cfg.eps)
            z.addcmul_(self.lr / (1 - b1 ** (t + 1)), m / denom)


def _np(met: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    # copy: a float64 CPU tensor's .double().cpu() is the tensor itself, and the p_i / p_anchor
    # columns are views of the policy buffer that the next step overwrites in place
    return {k: t.double().cpu().numpy().copy() for k, t in met.items()}


# ------------------------------------------------------------------ CLI
def _run_cli(args: argparse.Namespace) -> int:
    from .cli import check_out, command_settings, write_run

    check_out(args)  # before any work
    seeds = None if args.seeds is None else checks.integer("seeds", args.seeds, low=1)
    params = runner.parse_params(args.param)
    kw = dict(steps=args.steps, N=args.N, gamma=args.gamma, surrogate=args.surrogate, optimizer=args.optimizer,
              advantage=args.advantage, advantage_params=params or None)
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


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``categorical`` to ``rlvr-sim`` (:mod:`simulations.cli`)."""
    ap = subparsers.add_parser("categorical", help="softmax policy over K actions with group sampling (F-GRPO App. J)",
                               description="Batched softmax policy over K actions trained with group sampling.")
    ap.add_argument("--preset", default="fgrpo-fig4", help=f"one of {', '.join(PRESETS)} [fgrpo-fig4]")
    ap.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    ap.add_argument("--N", type=int, nargs="+", help="group sizes")
    ap.add_argument("--gamma", type=float, nargs="+", help="focal exponents")
    ap.add_argument("--seeds", type=int, help="number of seeds (0..S-1)")
    ap.add_argument("--surrogate", choices=SURROGATES)
    ap.add_argument("--optimizer", choices=OPTIMIZERS)
    ap.add_argument("--advantage", help="registry name (default dr_grpo)")
    runner.add_param_option(ap)
    runner.add_run_options(ap, device="auto")
    ap.set_defaults(func=_run_cli)
    return ap
