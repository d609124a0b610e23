"""Policy-gradient losses of GRPO-style RLVR, and how per-token losses are aggregated.

Notation: rollout ``i`` of a minibatch of ``N`` rollouts has response tokens ``t ∈ A_i``
(the mask), ``T_i = |A_i|``; ``A_i`` is its advantage (one number per rollout, broadcast to
its tokens); ``r_{i,t} = π_θ(y_t|…)/π_old(y_t|…) = exp(logp − old_logp)`` the importance ratio.

Per-token losses ``L_{i,t}`` (:func:`per_token_loss`):

``"ppo"`` — PPO clipping with asymmetric bounds (FADE App. 11 Eq. 19-20; DAPO in F-GRPO
Sec. 2.2)::

    L_{i,t} = −min( r_{i,t}·A_i,  clip(r_{i,t}, 1−ε_low, 1+ε_high)·A_i )

``"cispo"`` — clipped importance-sampling weights with a REINFORCE-style objective (F-GRPO
Sec. 2.2 Eq. 5, Chen et al. 2025)::

    L_{i,t} = −sg( clip(r_{i,t}, 1−ε_low, 1+ε_high) )·A_i·log π_θ(y_t|…)

``"grpo-n"`` — relative negative gradients only (Two-Stage App. B.5): PPO's ``L_{i,t}`` times
``1[A_i < 0]``; the aggregation denominators are unchanged (``|y_i|`` and ``G`` in Two-Stage's
formula), so ``loss="grpo-n"`` with the ``grpo`` advantage is the same update as
``loss="ppo"`` with the ``grpo_n`` advantage.

``"gspo"`` — Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071; the
sequence-level importance ratio as Two-Stage Sec. 2 writes it, "GSPO [86]").  The ratio of a
rollout is the length-normalised likelihood ratio ``s_i = (π_θ(y_i|x)/π_old(y_i|x))^{1/T_i} =
exp((1/T_i) Σ_{t∈A_i} log r_{i,t})`` and the clipping acts on it, for the whole sequence::

    ℓ_i = −min( s_i·A_i,  clip(s_i, 1−ε_low, 1+ε_high)·A_i )

It is implemented in Zheng et al.'s token form ("GSPO-token"): every token carries
``s_{i,t} = sg(s_i)·π_θ(y_t|…)/sg(π_θ(y_t|…))`` — the value of ``s_i``, the gradient
``s_i·∇log π_θ(y_t|…)`` — and ``L_{i,t} = −min(s_{i,t}·A_{i,t}, clip(s_{i,t}, …)·A_{i,t})``.  With
one advantage per rollout (``adv`` of shape ``[N]``) ``L_{i,t} = ℓ_i`` for every token and the
gradient of ``Σ_t L_{i,t}`` is ``T_i·∇ℓ_i``, so every aggregation below is a weighting of the
sequence losses ``ℓ_i``: ``"seq-mean-token-mean"`` gives GSPO's objective
``(1/N) Σ_i ℓ_i`` exactly (value and gradient, tested); ``"token-mean"`` weights ``ℓ_i`` by
``T_i/Σ_j T_j``.  The ratio needs the response ``mask`` (padding is left out of ``T_i``).

``"gspo-n"`` — GSPO with relative negative gradients only (Two-Stage Sec. 4.1, Table 1
"GSPO-N", defined as for GRPO-N in App. B.5): ``"gspo"``'s ``L_{i,t}`` times ``1[A_i < 0]``,
denominators unchanged.

Aggregation over a minibatch (:func:`aggregate`; ``M_{i,t}`` the mask):

``"token-mean"``          ``Σ_i Σ_t M·L / Σ_i T_i``                       (DAPO; F-GRPO App. H.2)
``"seq-mean-token-mean"`` ``(1/N) Σ_i (1/T_i) Σ_t M·L``                   (GRPO, F-GRPO Sec. 2.2)
``"seq-mean-token-sum"``  ``(1/N) Σ_i Σ_t M·L``                           (Dr. GRPO)
``"sum-tmax"``            ``(1/T_max) Σ_i Σ_t M·L``, ``T_max = N·max_new_tokens``
                          (FADE App. 11: "T_max is the maximum token budget per
                          microbatch", i.e. the per-sequence budget times the batch size)

Optional regularisers, aggregated the same way (:func:`policy_loss`): a KL penalty
``β·KL(π_θ‖π_ref)`` with the per-token k3 estimator ``exp(ρ) − ρ − 1``, ``ρ = log π_ref − log π_θ``
(Schulman 2020; GRPO's ``D_KL`` term in F-GRPO Sec. 2.2), and an entropy bonus ``−c_H·H_t``
(F-GRPO Sec. 5.5 "GRPO-ℋ").

Clip statistics.  For ``"ppo"``/``"grpo-n"`` the *lower* clip is engaged (the token's
gradient is zero) where ``A_i < 0`` and ``r < 1−ε_low``; the *upper* clip where ``A_i > 0``
and ``r > 1+ε_high``; for ``"gspo"``/``"gspo-n"`` the same with the sequence ratio ``s_i`` in
place of ``r`` (every token of a clipped sequence counts).  For ``"cispo"`` the weight is
clipped (gradient kept, weight capped) where ``r < 1−ε_low`` (low) or ``r > 1+ε_high``
(high), whatever the sign of ``A_i``.
Fractions are over masked tokens.

The losses are registered by name with their default clip range (:func:`register_policy_loss`,
as verl registers its policy losses): the configuration's ``loss`` choices, its default
``(ε_low, ε_high)`` and the ``--loss`` help of ``rlvr-train grpo`` are read from the registry, and a
loss registered here is usable everywhere.  A registered function receives the importance
ratio (token-level ``r_{i,t}``, or ``s_{i,t}`` for a ``sequence`` loss), the advantages ``[N, 1]``
or ``[N, T]``, the log-probabilities and the clip bounds ``1−ε_low, 1+ε_high``, and returns
``(L, clipped_low, clipped_high)``.

Examples
--------
>>> names()
['ppo', 'cispo', 'grpo-n', 'gspo', 'gspo-n']
>>> get_policy_loss("cispo").eps                   # CISPO's default (ε_low, ε_high)
(1.0, 5.0)
>>> get_policy_loss("dpo")
Traceback (most recent call last):
...
ValueError: loss must be one of 'ppo', 'cispo', 'grpo-n', 'gspo', 'gspo-n'; got 'dpo'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from rlvr_plumbing import checks
from rlvr_plumbing.registry import Registry

if TYPE_CHECKING:  # imported where used: the registry (`rlvr-train --help`) loads no torch
    import torch

__all__ = ["LOSSES", "SEQUENCE_LOSSES", "AGGREGATIONS", "DEFAULT_EPS", "POLICY_LOSSES", "PolicyLoss",
           "register_policy_loss", "get_policy_loss", "names", "describe", "LossStats", "aggregate",
           "per_token_loss", "kl_k3", "policy_loss"]

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "sum-tmax")

#: ``(L, clipped_low, clipped_high) = fn(ratio, adv, logp, lo, hi)`` (module docstring)
LossFn = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", float, float],
                  tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered per-token loss: its ``name`` (``--loss``), function, default clip range
    ``eps = (ε_low, ε_high)`` (used when the configuration gives none), whether its ratio is
    the sequence-level ``s_i`` (``sequence``: it needs the response mask) and a one-line
    ``description`` (the ``--loss`` help)."""

    name: str
    fn: LossFn
    eps: tuple[float, float]
    sequence: bool = False
    description: str = ""


#: the registered losses, in registration order (:func:`register_policy_loss`)
POLICY_LOSSES: Registry[PolicyLoss] = Registry("loss")


def register_policy_loss(name: str, *, eps: tuple[float, float], sequence: bool = False,
                         description: str = "") -> Callable[[LossFn], LossFn]:
    """Decorator: register ``fn`` as loss ``name`` with its default ``eps = (ε_low, ε_high)``
    (verl's ``register_policy_loss``).  The function is returned unchanged, so one function may
    be registered under several names; a taken name raises ``ValueError``."""
    lo, hi = (checks.number("eps", v, low=0) for v in eps)

    def add(fn: LossFn) -> LossFn:
        POLICY_LOSSES.register(PolicyLoss(name, fn, (lo, hi), bool(sequence), description))
        return fn
    return add


def names() -> list[str]:
    """The registered loss names, in registration order."""
    return POLICY_LOSSES.names()


def get_policy_loss(name: str) -> PolicyLoss:
    """The registered loss ``name``; an unknown name is refused with the registered ones."""
    return POLICY_LOSSES.get(checks.choice("loss", name, names()))


def describe() -> str:
    """``name (default ε_low/ε_high)`` of every registered loss, for the ``--loss`` help."""
    return "; ".join(f"{p.name}{': ' + p.description if p.description else ''} (default ε {p.eps[0]:g}/{p.eps[1]:g})"
                     for p in (POLICY_LOSSES.get(n) for n in names()))


class _DefaultEps(Mapping[str, tuple[float, float]]):
    """Loss name → its default ``(ε_low, ε_high)``: a read-only view of the registry."""

    def __getitem__(self, name: str) -> tuple[float, float]:
        if name not in POLICY_LOSSES:
            raise KeyError(name)
        return POLICY_LOSSES.get(name).eps

    def __iter__(self) -> Iterator[str]:
        return iter(names())

    def __len__(self) -> int:
        return len(POLICY_LOSSES)

    def __repr__(self) -> str:
        return repr(dict(self))


#: loss name → default ``(ε_low, ε_high)`` (a live view of :data:`POLICY_LOSSES`)
DEFAULT_EPS: Mapping[str, tuple[float, float]] = _DefaultEps()


# ------------------------------------------------------------------ the losses
def _ppo_clip(ratio: torch.Tensor, adv: torch.Tensor, logp: torch.Tensor, lo: float,
              hi: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``−min(ratio·A, clip(ratio, lo, hi)·A)``; the lower clip is engaged where ``A < 0`` and
    ``ratio < lo``, the upper where ``A > 0`` and ``ratio > hi``."""
    import torch

    L = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
    return L, (adv < 0) & (ratio < lo), (adv > 0) & (ratio > hi)


def _ppo_negative(ratio: torch.Tensor, adv: torch.Tensor, logp: torch.Tensor, lo: float,
                  hi: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO-clip on the negative advantages only (``A·1[A < 0]``)."""
    return _ppo_clip(ratio, adv * (adv < 0), logp, lo, hi)


def _cispo(ratio: torch.Tensor, adv: torch.Tensor, logp: torch.Tensor, lo: float,
           hi: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``−sg(clip(ratio, lo, hi))·A·log π_θ``; clipped where ``ratio`` leaves ``[lo, hi]``."""
    w = ratio.clamp(lo, hi).detach()
    L = -w * adv * logp
    return L, (ratio < lo).expand_as(L), (ratio > hi).expand_as(L)


# the clip ranges: PPO / DAPO (FADE App. 11: 0.2/0.2), CISPO's (F-GRPO App. H.2: 1.0/5.0) and
# GSPO's on the sequence ratio (Zheng et al. 2025: 3e-4/4e-4)
register_policy_loss("ppo", eps=(0.2, 0.2), description="PPO clip")(_ppo_clip)
register_policy_loss("cispo", eps=(1.0, 5.0), description="clipped IS weight, REINFORCE")(_cispo)
register_policy_loss("grpo-n", eps=(0.2, 0.2), description="PPO clip, negative advantages only")(_ppo_negative)
register_policy_loss("gspo", eps=(3e-4, 4e-4), sequence=True, description="sequence-level ratio")(_ppo_clip)
register_policy_loss("gspo-n", eps=(3e-4, 4e-4), sequence=True,
                     description="sequence-level ratio, negative advantages only")(_ppo_negative)

#: the built-in losses (the registry may hold more: :func:`names`)
LOSSES = tuple(names())
#: the built-in losses whose ratio is the sequence-level ``s_i`` (they need the response mask)
SEQUENCE_LOSSES = tuple(n for n in LOSSES if get_policy_loss(n).sequence)


class LossStats(NamedTuple):
    """Diagnostics of one loss evaluation (floats, detached), and ``clipped``: the bool map
    ``[N, T]`` of the masked tokens where a clip was engaged (low or high; detached)."""

    pg_loss: float
    kl: float
    entropy: float
    clip_frac_low: float
    clip_frac_high: float
    clipped: torch.Tensor | None = None


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, *,
              max_new_tokens: int | None = None) -> torch.Tensor:
    """Reduce per-token ``values [N, T]`` to a scalar with ``mask [N, T]`` (module docstring).

    ``max_new_tokens`` (the per-sequence budget) is required by ``"sum-tmax"``.  Rows with an
    empty mask contribute 0 (and count in ``N``).

    Examples
    --------
    >>> import torch
    >>> values = torch.tensor([[-1.2, -1.0], [1.0, 1.0]])
    >>> mask = torch.tensor([[1, 1], [1, 0]])          # the 2nd token of rollout 2 is padding
    >>> aggregate(values, mask, "token-mean")          # (−1.2 − 1 + 1) / 3
    tensor(-0.4000)
    >>> aggregate(values, mask, "seq-mean-token-mean")  # ((−1.2 − 1)/2 + 1/1) / 2
    tensor(-0.0500)
    >>> aggregate(values, mask, "sum-tmax", max_new_tokens=2)  # (−1.2 − 1 + 1) / (2·2)
    tensor(-0.3000)
    """
    checks.choice("aggregation", mode, AGGREGATIONS)
    m = mask.to(values.dtype)
    total = (values * m).sum()
    n = values.shape[0]
    if mode == "token-mean":
        return total / m.sum().clamp_min(1.0)
    if mode == "seq-mean-token-mean":
        per_seq = (values * m).sum(-1) / m.sum(-1).clamp_min(1.0)
        return per_seq.sum() / n
    if mode == "seq-mean-token-sum":
        return total / n
    if max_new_tokens is None:
        raise ValueError("max_new_tokens must be given for 'sum-tmax' (the per-sequence budget), got None")
    return total / (n * checks.integer("max_new_tokens", max_new_tokens, low=1))


def per_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, *, loss: str = "ppo",
                   eps_low: float = 0.2, eps_high: float = 0.2,
                   mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(L, clipped_low, clipped_high)``, each ``[N, T]``: the per-token loss of the module
    docstring and boolean maps of where each clip is engaged.

    ``adv`` is ``[N]`` (one advantage per rollout) or ``[N, T]``.  ``mask`` (``[N, T]``, 1 on
    response tokens) is required by the sequence-level losses ``"gspo"``/``"gspo-n"``, whose
    ratio ``s_i`` averages the log-ratios over the response tokens; the others ignore it.

    Examples
    --------
    Two rollouts of two tokens; the importance ratios are 2, 1 (rollout 1) and 1, 1:

    >>> import torch
    >>> logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))   # π_θ of the sampled tokens
    >>> old = torch.log(torch.tensor([[0.25, 0.25], [0.5, 0.5]]))   # π_old
    >>> L, low, high = per_token_loss(logp, old, torch.tensor([1.0, -1.0]))
    >>> L      # −min(r·A, clip(r, 0.8, 1.2)·A): the ratio 2 is capped at 1.2 where A = +1
    tensor([[-1.2000, -1.0000],
            [ 1.0000,  1.0000]])
    >>> high   # the upper clip is engaged there (zero gradient)
    tensor([[ True, False],
            [False, False]])
    >>> per_token_loss(logp, old, torch.tensor([1.0, -1.0]), loss="cispo")[0]  # −sg(clip(r))·A·log π_θ
    tensor([[ 0.8318,  1.3863],
            [-0.6931, -0.6931]])

    GSPO: rollout 1's sequence ratio is ``(2·1)^(1/2) = 1.4142``, clipped to 1.2 for ``A = +1``;
    every token of a rollout carries its sequence loss:

    >>> mask = torch.ones(2, 2)
    >>> per_token_loss(logp, old, torch.tensor([1.0, -1.0]), loss="gspo", mask=mask)[0]
    tensor([[-1.2000, -1.2000],
            [ 1.0000,  1.0000]])
    """
    import torch

    spec = get_policy_loss(loss)
    eps_low = checks.number("eps_low", eps_low, low=0)
    eps_high = checks.number("eps_high", eps_high, low=0)
    a = adv[:, None] if adv.dim() == 1 else adv
    a = a.to(logp.dtype)
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    if spec.sequence:
        if mask is None:
            raise ValueError(f"mask is required for loss={loss!r} (its ratio averages the log-ratios over "
                             "the response tokens), got None")
        m = mask.to(logp.dtype)
        log_s = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp_min(1.0)   # (1/T_i) Σ_t log r_{i,t}
        # GSPO-token: the value of s_i, the gradient s_i·∇log π_θ(y_t|…) on each token
        ratio = torch.exp(log_s.detach()[:, None] + logp - logp.detach())
    else:
        ratio = torch.exp(logp - old_logp)
    return spec.fn(ratio, a, logp, lo, hi)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of ``KL(π_θ‖π_ref)``: ``exp(ρ) − ρ − 1``, ``ρ = ref_logp − logp`` (>= 0)."""
    import torch

    rho = ref_logp - logp
    return torch.exp(rho) - rho - 1.0


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *,
                loss: str = "ppo", aggregation: str = "token-mean", eps_low: float = 0.2, eps_high: float = 0.2,
                max_new_tokens: int | None = None, ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0,
                entropy: torch.Tensor | None = None, entropy_coef: float = 0.0) -> tuple[torch.Tensor, LossStats]:
    """Total minibatch loss ``agg(L) + β·agg(KL_t) − c_H·agg(H_t)`` and its :class:`LossStats`.

    ``logp``, ``old_logp``, ``ref_logp``, ``entropy``, ``mask``: ``[N, T]``; ``adv``: ``[N]``.
    The KL term needs ``ref_logp`` when ``kl_coef > 0`` (it is *reported* whenever
    ``ref_logp`` is given); the entropy bonus needs ``entropy`` (with gradient) when
    ``entropy_coef > 0``.

    Examples
    --------
    >>> import torch
    >>> logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    >>> old = torch.log(torch.tensor([[0.25, 0.25], [0.5, 0.5]]))
    >>> mask = torch.tensor([[1, 1], [1, 0]])
    >>> total, stats = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask)
    >>> total                          # PPO-clip, token-mean: (−1.2 − 1 + 1) / 3
    tensor(-0.4000)
    >>> round(stats.clip_frac_high, 4)  # one of the three response tokens is clipped
    0.3333
    """
    L, low, high = per_token_loss(logp, old_logp, adv, loss=loss, eps_low=eps_low, eps_high=eps_high, mask=mask)
    agg = lambda v: aggregate(v, mask, aggregation, max_new_tokens=max_new_tokens)  # noqa: E731
    pg = agg(L)
    total = pg
    kl_val = float("nan")
    if ref_logp is not None:
        kl_tok = kl_k3(logp, ref_logp)
        kl_agg = agg(kl_tok)
        kl_val = float(aggregate(kl_tok.detach(), mask, "token-mean"))
        if kl_coef:
            total = total + kl_coef * kl_agg
    elif kl_coef:
        raise ValueError("ref_logp is required when kl_coef != 0")
    ent_val = float("nan")
    if entropy is not None:
        ent_val = float(aggregate(entropy.detach(), mask, "token-mean"))
        if entropy_coef:
            total = total - entropy_coef * agg(entropy)
    elif entropy_coef:
        raise ValueError("entropy is required when entropy_coef != 0")
    m = mask.bool()
    denom = max(int(m.sum()), 1)
    stats = LossStats(float(pg.detach()), kl_val, ent_val,
                      float((low & m).sum()) / denom, float((high & m).sum()) / denom, ((low | high) & m).detach())
    return total, stats
