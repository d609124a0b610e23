"""Token-level entropy diagnostics of one policy-gradient batch: what drives the entropy.

One vectorised pass over the response tokens of a batch under the loss mask (tensors
``[B, T]``, any device, accumulated in float64) gives the quantities that Cui et al. (2025) and
FADE tie to the change of the policy entropy in one step, and what the covariance-based
entropy controls Clip-Cov and KL-Cov would act on (:func:`token_diagnostics`).  A small
stateful helper (:class:`EntropyChangeTracker`) puts the entropy change measured between two
logged steps beside the prediction and keeps their running correlation.  Used by the trainer
of :mod:`simulations.grpo` every step; the TRL and verl adapters are meant to call the same
function on the tensors their losses already hold (``docs/token_entropy.md``).

Notation: over the ``N`` masked tokens ``t`` of the batch, ``ℓ_t = log π(y_t | x, y_<t)`` (the
log-probability of the sampled token), ``A_t`` its advantage, ``H_t`` the entropy of its
next-token distribution, ``ℓ̄``, ``Ā``, ``H̄`` their token means, and the centred cross-products

    c_t = (A_t − Ā)·(ℓ_t − ℓ̄),    Ĉov(ℓ, A) = (1/N)·Σ_t c_t.

Sources: Cui et al. 2025 (arXiv 2505.22617): for a softmax policy under natural policy
gradient ``H(π_{k+1}) − H(π_k) ≈ −η·Cov_{y∼π_k}(log π_k(y), A(y))``, and Clip-Cov and
KL-Cov select tokens by ``c_t``; FADE Eq. 7 / Thm. 13.1 (the drift ``Ā·H``, see
:func:`rlvr_theory.entropy.fade_change_sampled`); verl 0.9.1's implementation
(``verl/trainer/ppo/core_algos.py``, lines cited at :data:`CLIP_COV` and :data:`KL_COV`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlvr_plumbing import checks

__all__ = ["ClipCov", "KLCov", "CLIP_COV", "KL_COV", "DIAGNOSTIC_KEYS", "token_diagnostics",
           "EntropyChangeTracker"]


@dataclass(frozen=True)
class ClipCov:
    """Clip-Cov's settings (Cui et al. 2025): the gradient of up to
    ``max(int(ratio·N), 1)`` tokens drawn at random among those with ``lb < c_t < ub`` (and not
    already clipped by PPO) is detached."""

    ratio: float = 2e-4
    lb: float = 1.0
    ub: float = 5.0

    def __post_init__(self) -> None:
        checks.number("clip_cov.ratio", self.ratio, low=0, high=1, low_open=True)
        lb = checks.number("clip_cov.lb", self.lb, allow_inf=True)
        checks.number("clip_cov.ub", self.ub, low=lb, allow_inf=True)


@dataclass(frozen=True)
class KLCov:
    """KL-Cov's setting (Cui et al. 2025): the ``max(1, int(ratio·N))`` tokens of largest
    ``c_t`` get the penalty ``ppo_kl_coef·|ℓ_t − ℓ_t^old|`` (coefficient not needed here)."""

    ratio: float = 2e-4

    def __post_init__(self) -> None:
        checks.number("kl_cov.ratio", self.ratio, low=0, high=1, low_open=True)


#: verl 0.9.1's defaults, ``verl/trainer/ppo/core_algos.py``: ``clip_cov_ratio`` 0.0002 (line 1788),
#: ``clip_cov_ub`` 5.0 (line 1792), ``clip_cov_lb`` 1.0 (line 1793); the band ``lb < c_t < ub`` among
#: masked tokens not clipped by PPO (lines 1810-1819) and the cap ``max(int(ratio·N), 1)`` (line 1818)
CLIP_COV = ClipCov()
#: verl 0.9.1's default ``kl_cov_ratio`` 0.0002 (``core_algos.py`` line 1884); the top
#: ``max(1, int(N·ratio))`` centred products over all masked tokens (lines 1905-1907)
KL_COV = KLCov()

#: the keys of :func:`token_diagnostics`, in order (those marked * only with the matching argument):
#: ``cov_logp_adv``, its parts ``cov_logp_adv_pos``, ``_neg``, ``_zero``, ``_clipped`` *, ``_unclipped`` *,
#: ``adv_token_mean``, ``entropy_mean`` *, ``entropy_drift_fade``, ``entropy_change_pred_fade`` *,
#: ``entropy_change_pred_cui`` *, ``clip_cov_band_frac``, ``clip_cov_frac``, ``clip_cov_band_share``,
#: ``kl_cov_frac``, ``kl_cov_threshold``, ``kl_cov_share``
DIAGNOSTIC_KEYS = ("cov_logp_adv", "cov_logp_adv_pos", "cov_logp_adv_neg", "cov_logp_adv_zero",
                   "cov_logp_adv_clipped", "cov_logp_adv_unclipped", "adv_token_mean", "entropy_mean",
                   "entropy_drift_fade", "entropy_change_pred_fade", "entropy_change_pred_cui",
                   "clip_cov_band_frac", "clip_cov_frac", "clip_cov_band_share",
                   "kl_cov_frac", "kl_cov_threshold", "kl_cov_share")


def _token_tensor(name: str, x: Any, shape: tuple[int, int], device: torch.device, *,
                  row_ok: bool = False) -> torch.Tensor:
    """``x`` as a tensor on ``device`` of shape ``[B, T]`` (``[B]`` too with ``row_ok``: one value per
    row, broadcast over its tokens)."""
    t = torch.as_tensor(x, device=device)
    if row_ok and t.dim() == 1 and t.shape[0] == shape[0]:
        return t[:, None]
    if tuple(t.shape) != shape:
        want = f"[B, T] = {list(shape)}" + (f" or [B] = [{shape[0]}]" if row_ok else "")
        raise ValueError(f"{name} must have shape {want} (the shape of logp), got {list(t.shape)}")
    return t


def token_diagnostics(logp: torch.Tensor, advantages: Any, mask: Any, *, entropy: Any = None,
                      clipped: Any = None, lr: float | None = None, clip_cov: ClipCov = CLIP_COV,
                      kl_cov: KLCov = KL_COV) -> dict[str, float]:
    """Cui et al.'s token covariance, FADE's entropy drift and the reach of Clip-Cov / KL-Cov.

    Parameters
    ----------
    logp : torch.Tensor, shape ``[B, T]``
        ``ℓ_t = log π(y_t | x, y_<t)`` of every sampled response token, under the policy that
        sampled them (the "old" log-probabilities of a PPO step).  Any float dtype and device.
    advantages : array_like, shape ``[B, T]`` or ``[B]``
        ``A_t`` per token, or one advantage per response (broadcast over its tokens).
    mask : array_like, shape ``[B, T]``
        The loss mask: tokens where it is non-zero count, the others (padding) are ignored
        whatever they hold.
    entropy : array_like, shape ``[B, T]``, optional
        ``H_t``, the entropy of each token's next-token distribution.  Without it the entropy
        in FADE's drift is estimated by ``−ℓ̄`` (the mean negative log-probability: unbiased
        for the token-mean entropy when the tokens were sampled from π).
    clipped : array_like of bool, shape ``[B, T]``, optional
        Where the loss's clip was engaged (PPO: ``A < 0`` and ``r < 1 − ε_low``, or ``A > 0``
        and ``r > 1 + ε_high``).  Splits the covariance, and is left out of Clip-Cov's band as
        verl does.
    lr : float, optional
        The learning rate of the step (the sum over its optimizer steps): the drifts per unit
        learning rate are also given times ``lr``.
    clip_cov, kl_cov : ClipCov, KLCov
        Settings of the controls whose reach is reported (default: verl's, :data:`CLIP_COV`,
        :data:`KL_COV`).

    Returns
    -------
    dict of str to float, keys in the order of :data:`DIAGNOSTIC_KEYS`:

    ``cov_logp_adv``
        ``Ĉov(ℓ, A) = (1/N)·Σ_t c_t`` (ddof 0, as Cui et al. and verl centre and average over
        the batch's tokens; positive values predict a falling entropy).
    ``cov_logp_adv_pos``, ``cov_logp_adv_neg``, ``cov_logp_adv_zero``
        ``(1/N)·Σ_{t∈S} c_t`` over the tokens with ``A_t > 0``, ``< 0``, ``= 0``: they sum to
        ``cov_logp_adv``.  (Tokens with ``A_t = 0`` contribute ``−Ā·(ℓ_t − ℓ̄)``.)
    ``cov_logp_adv_clipped``, ``cov_logp_adv_unclipped``
        The same split by ``clipped`` (only when it is given); they sum to ``cov_logp_adv``.
    ``adv_token_mean``
        ``Ā``, the token mean of the advantages (FADE's ``m_S − m_F`` when weighted by tokens).
    ``entropy_mean``
        ``H̄`` (only when ``entropy`` is given).
    ``entropy_drift_fade``
        FADE Eq. 7 per unit learning rate, ``Ā·H − Ĉov₁(A, ℓ)`` with ``H = H̄`` (or ``−ℓ̄``) and
        ``Ĉov₁ = Σ_t c_t / (N − 1)`` (ddof 1, as
        :func:`rlvr_theory.entropy.fade_change_sampled`, whose value with ``eta = 1`` it equals;
        ``N = 1``: ``Ĉov₁ = 0``).
    ``entropy_change_pred_fade``, ``entropy_change_pred_cui``
        With ``lr``: ``lr·entropy_drift_fade`` and Cui et al.'s ``−lr·Ĉov(ℓ, A)``.
    ``clip_cov_band_frac``, ``clip_cov_frac``, ``clip_cov_band_share``
        The share of tokens with ``lb < c_t < ub`` (not clipped); the share Clip-Cov would
        detach, ``min(max(int(ratio·N), 1), band)/N``; and the band's share of the total
        covariance, ``Σ_band c_t / Σ_t c_t`` (NaN when ``Σ_t c_t = 0``).
    ``kl_cov_frac``, ``kl_cov_threshold``, ``kl_cov_share``
        ``k/N`` with ``k = max(1, int(N·ratio))``; the ``k``-th largest ``c_t`` (the threshold
        KL-Cov's top-k reaches); the top ``k`` tokens' share ``Σ_top c_t / Σ_t c_t`` (NaN when
        ``Σ_t c_t = 0``).

    Raises
    ------
    ValueError
        A shape that does not match ``logp``'s, a ``mask`` that selects no token, a
        non-finite ``logp``, ``advantages`` or ``entropy`` on a masked token, a bad ``lr``.

    Notes
    -----
    Cui et al. 2025: for a softmax policy updated by natural policy gradient with step
    ``η``, ``ΔH ≈ −η·Cov_{y∼π}(log π(y), A(y))`` per state; the token version averages the
    centred products over the batch (Clip-Cov's ``Cov(y_i)``; verl
    ``core_algos.py`` lines 1812-1814 and 1905).  FADE Eq. 7 adds the drift ``(m_S − m_F)·H``;
    :mod:`rlvr_theory.entropy` shows the drift is not part of the first-order change of a
    softmax step (it is reported, not endorsed).  For an LLM trained with Adam or clipping
    neither is exact; the trainer's ``entropy_check`` measures the exact first-order change.
    The band and top-k fractions are computed in float64 on ``c_t``; verl computes ``c_t`` in
    the loss's dtype (its band membership can differ for a ``c_t`` within rounding of a bound).
    ``verl`` evaluates its controls per micro-batch: pass the same tokens to compare.
    Cost: a few elementwise passes over ``[B, T]`` and one ``topk``; two device
    synchronisations (the token count, the results).

    References
    ----------
    Cui, G. et al. (2025). The Entropy Mechanism of Reinforcement Learning for Reasoning
    Language Models. arXiv:2505.22617.  FADE Eq. 7 / Thm. 13.1 (``docs/papers.md``).

    Examples
    --------
    Two responses of three tokens (the last token of the second is padding):

    >>> import torch
    >>> logp = torch.tensor([[-0.1, -0.2, -0.3], [-2.0, -1.5, 0.0]])
    >>> mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    >>> d = token_diagnostics(logp, torch.tensor([1.0, -1.0]), mask, lr=0.1)
    >>> round(d["cov_logp_adv"], 6)          # the likely response is rewarded: entropy should fall
    0.744
    >>> round(d["cov_logp_adv_pos"] + d["cov_logp_adv_neg"], 6)
    0.744
    >>> round(d["entropy_change_pred_cui"], 6)   # −lr·Ĉov
    -0.0744
    >>> d["clip_cov_band_frac"], d["kl_cov_frac"]  # c_t = 1.416 alone lies in (1, 5); k = 1 of N = 5
    (0.2, 0.2)
    """
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2:
        raise ValueError(f"logp must be a torch.Tensor of shape [B, T], got "
                         f"{type(logp).__name__}{' of shape ' + str(list(logp.shape)) if isinstance(logp, torch.Tensor) else ''}")
    if not (logp.is_floating_point()):
        raise ValueError(f"logp must hold floating-point log-probabilities, got dtype {logp.dtype}")
    shape, dev = (int(logp.shape[0]), int(logp.shape[1])), logp.device
    if not isinstance(clip_cov, ClipCov):
        raise ValueError(f"clip_cov must be a ClipCov, got {clip_cov!r}")
    if not isinstance(kl_cov, KLCov):
        raise ValueError(f"kl_cov must be a KLCov, got {kl_cov!r}")
    lr = checks.number("lr", lr, low=0, allow_none=True)
    m = _token_tensor("mask", mask, shape, dev) != 0
    adv = _token_tensor("advantages", advantages, shape, dev, row_ok=True)
    ent = None if entropy is None else _token_tensor("entropy", entropy, shape, dev)
    clp = None
    if clipped is not None:
        clp = _token_tensor("clipped", clipped, shape, dev)
        if clp.dtype != torch.bool:
            raise ValueError(f"clipped must be a bool mask, got dtype {clp.dtype}")
    with torch.no_grad():   # log-probabilities with a graph (TRL's) are read, never differentiated
        return _diagnostics(logp, adv, m, ent, clp, lr, clip_cov, kl_cov, shape)


def _diagnostics(logp: torch.Tensor, adv: torch.Tensor, m: torch.Tensor, ent: torch.Tensor | None,
                 clp: torch.Tensor | None, lr: float | None, clip_cov: ClipCov, kl_cov: KLCov,
                 shape: tuple[int, int]) -> dict[str, float]:
    """The body of :func:`token_diagnostics` on checked inputs."""
    dev, f64 = logp.device, torch.float64
    n = int(m.sum())
    if n == 0:
        raise ValueError(f"mask must select at least one token (the loss mask of the batch's response tokens), "
                         f"got an empty mask of shape {list(shape)}")

    zero = torch.zeros((), dtype=f64, device=dev)
    x = torch.where(m, logp.to(f64), zero)
    a = torch.where(m, adv.to(f64), zero)             # [B, T] (a [B, 1] advantage broadcast by the mask)
    bad = [(~torch.isfinite(x)).sum(), (~torch.isfinite(a)).sum()]
    # centre about the first masked token's values first: constant inputs give exactly 0, and the
    # means are taken of small numbers (no device synchronisation: argmax of the flat mask)
    first = m.reshape(-1).to(torch.uint8).argmax()
    x0, a0 = x.reshape(-1)[first], a.reshape(-1)[first]
    xs, as_ = torch.where(m, x - x0, zero), torch.where(m, a - a0, zero)
    dx, da = xs.sum() / n, as_.sum() / n
    c = torch.where(m, (as_ - da) * (xs - dx), zero)
    vals = {"sum": c.sum(), "pos": torch.where(a > 0, c, zero).sum(), "neg": torch.where(a < 0, c, zero).sum(),
            "zero": torch.where(m & (a == 0), c, zero).sum(), "mean_a": a0 + da, "mean_x": x0 + dx}
    if clp is not None:
        vals["clipped"] = torch.where(m & clp, c, zero).sum()
        vals["unclipped"] = torch.where(m & ~clp, c, zero).sum()
    if ent is not None:
        e = torch.where(m, ent.to(f64), zero)
        bad.append((~torch.isfinite(e)).sum())
        vals["entropy"] = e.sum() / n
    band = m & (c > clip_cov.lb) & (c < clip_cov.ub)
    if clp is not None:
        band = band & ~clp
    vals["band_n"] = band.sum().to(f64)
    vals["band_sum"] = torch.where(band, c, zero).sum()
    k = max(1, int(n * kl_cov.ratio))
    top = torch.topk(torch.where(m, c, torch.full_like(c, -math.inf)).reshape(-1), k).values
    vals["top_min"], vals["top_sum"] = top[-1], top.sum()
    for name, count in zip(("logp", "advantages", "entropy"), bad):
        vals[f"bad_{name}"] = count.to(f64)
    got = dict(zip(vals, torch.stack(list(vals.values())).tolist()))   # one device synchronisation
    for name in ("logp", "advantages", "entropy"):
        count = got.get(f"bad_{name}", 0)
        if count:
            raise ValueError(f"{name} must be finite on the masked tokens, got {int(count)} non-finite value(s)")

    S = got["sum"]
    cov0, cov1 = S / n, S / max(n - 1, 1)
    H = got["entropy"] if ent is not None else -got["mean_x"]
    drift = got["mean_a"] * H - cov1
    share = (lambda part: part / S) if S != 0 else (lambda part: math.nan)
    out: dict[str, float] = {"cov_logp_adv": cov0, "cov_logp_adv_pos": got["pos"] / n,
                             "cov_logp_adv_neg": got["neg"] / n, "cov_logp_adv_zero": got["zero"] / n}
    if clp is not None:
        out["cov_logp_adv_clipped"] = got["clipped"] / n
        out["cov_logp_adv_unclipped"] = got["unclipped"] / n
    out["adv_token_mean"] = got["mean_a"]
    if ent is not None:
        out["entropy_mean"] = got["entropy"]
    out["entropy_drift_fade"] = drift
    if lr is not None:
        out["entropy_change_pred_fade"] = lr * drift
        out["entropy_change_pred_cui"] = -lr * cov0
    out["clip_cov_band_frac"] = got["band_n"] / n
    out["clip_cov_frac"] = min(max(int(clip_cov.ratio * n), 1), int(got["band_n"])) / n
    out["clip_cov_band_share"] = share(got["band_sum"])
    out["kl_cov_frac"] = k / n
    out["kl_cov_threshold"] = got["top_min"]
    out["kl_cov_share"] = share(got["top_sum"])
    return out


@dataclass
class EntropyChangeTracker:
    """The entropy change measured between logged steps, beside the one predicted, and the
    running Pearson correlation of the two.

    Feed :meth:`update` the entropy logged at each step (before its update) and the change the
    step's update is predicted to cause (e.g. ``entropy_change_pred_cui`` of
    :func:`token_diagnostics`).  The change measured for step ``s`` is
    ``H_{s+1} − H_s``, known one step later; each (prediction of ``s``, measured change of
    ``s``) pair with both finite enters the correlation.  The moments are merged batch by batch
    (Chan, Golub & LeVeque's pairwise update of Welford's sums), so one call may take many steps
    (e.g. a run's metric log) and gives the same sums as one call per step up to rounding.
    No module state: the trainer keeps one per prediction and saves :meth:`state_dict`.

    Attributes
    ----------
    n : int
        Pairs counted.
    mean_pred, mean_meas : float
        Means of the predictions and of the measured changes.
    m2_pred, m2_meas, co_moment : float
        ``Σ(p − p̄)²``, ``Σ(d − d̄)²``, ``Σ(p − p̄)(d − d̄)``.
    last_entropy, last_prediction : float or None
        The last step's entropy and prediction (waiting for the next entropy).

    Examples
    --------
    >>> tr = EntropyChangeTracker()
    >>> tr.update([1.0], [-0.1]).tolist()          # nothing before the first step
    [nan]
    >>> np.round(tr.update([0.8, 0.7, 0.65], [-0.05, -0.02, 0.0]), 6).tolist()   # the steps before
    [-0.2, -0.1, -0.05]
    >>> round(tr.correlation, 6)
    0.998906
    """

    n: int = 0
    mean_pred: float = 0.0
    mean_meas: float = 0.0
    m2_pred: float = 0.0
    m2_meas: float = 0.0
    co_moment: float = 0.0
    last_entropy: float | None = None
    last_prediction: float | None = None

    def update(self, entropy: Any, predicted: Any) -> np.ndarray:
        """Add consecutive steps: ``entropy[j]`` logged at step ``s + j`` and ``predicted[j]`` the
        change predicted for that step's update (NaN where unknown: no pair).  Returns ``measured`` (float64, same length):
        ``measured[j] = entropy[j] − entropy[j − 1]`` (``entropy[−1]``: the last one fed before;
        NaN for the first step ever), the measured change of the step *before* ``s + j``."""
        e = np.asarray(entropy, dtype=np.float64)      # NaN: a step without an entropy (no pair)
        if e.ndim != 1:
            raise ValueError(f"entropy must have 1 axis (one value per step), got shape {list(e.shape)}")
        p = np.asarray(predicted, dtype=np.float64)
        if p.shape != e.shape:
            raise ValueError(f"predicted must have the shape of entropy {list(e.shape)}, got {list(p.shape)}")
        if e.size == 0:
            return e.copy()
        prev_e = np.nan if self.last_entropy is None else self.last_entropy
        prev_p = np.nan if self.last_prediction is None else self.last_prediction
        measured = np.diff(np.concatenate([[prev_e], e]))
        pred = np.concatenate([[prev_p], p[:-1]])      # the prediction each measured change answers
        ok = np.isfinite(measured) & np.isfinite(pred)
        self._merge(pred[ok], measured[ok])
        self.last_entropy = float(e[-1]) if np.isfinite(e[-1]) else None
        self.last_prediction = float(p[-1]) if np.isfinite(p[-1]) else None
        return measured

    def _merge(self, p: np.ndarray, d: np.ndarray) -> None:
        nb = p.size
        if nb == 0:
            return
        mp, md = p.mean(), d.mean()
        m2p, m2d, cpd = ((p - mp) ** 2).sum(), ((d - md) ** 2).sum(), ((p - mp) * (d - md)).sum()
        na, n = self.n, self.n + nb
        dp, dd = mp - self.mean_pred, md - self.mean_meas
        w = na * nb / n
        self.mean_pred += dp * nb / n
        self.mean_meas += dd * nb / n
        self.m2_pred += float(m2p + dp * dp * w)
        self.m2_meas += float(m2d + dd * dd * w)
        self.co_moment += float(cpd + dp * dd * w)
        self.mean_pred, self.mean_meas = float(self.mean_pred), float(self.mean_meas)
        self.n = n

    @property
    def correlation(self) -> float:
        """Pearson correlation of predicted and measured changes (NaN below two pairs or with a
        constant series)."""
        den = math.sqrt(self.m2_pred * self.m2_meas)
        return self.co_moment / den if self.n >= 2 and den > 0 else math.nan

    def state_dict(self) -> dict[str, Any]:
        """The fields, JSON-ready."""
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s fields."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, state[f.name])
