"""Sharpening and over-sharpening under KL-regularised RLVR (Over-Sharpening Sec. 2, App. A-G).

The output space of one query is a finite set of *modes* (Over-Sharpening Sec. 2.1).  Every array
here has the modes on its **last axis**; leading axes are independent queries/batches
and broadcast (no Python loops over them).

* :func:`kl_optimal_policy` — the maximiser of the KL-regularised objective, Eq. 1-2
  (Theorem 2.1): ``π*(o) ∝ π_ref(o)·exp(A(o)/β)``;
* :func:`batch_optimal_policy`, :func:`batch_partition` — the batch-optimal policy and
  its partition function, Eq. 4 (Theorem 2.2): each advantage is weighted by the
  empirical frequency ``N_i/G`` of its mode, ``π̂(o_i) ∝ π_ref(o_i)·exp(N_i A_i/(βG))``;
* :func:`partition_lower_bound` and :func:`partition_lower_bound_binary` — the two forms of
  Theorem 2.3, with :func:`normalized_binary_advantages` and :func:`binary_batch_stats`
  (``p⁺``, ``σ``, ``Δπ = π⁺_min − π⁻_max``) for the normalised binary advantages;
* :func:`is_moderate_sharpening` — Definition 2.1;
* :func:`target_shifts`, :func:`coupling_ratio`, :func:`coupling_ratio_simplified` —
  the NTK target shifts ``y`` and the ratio ``R`` of Corollary 2.2 (Sec. 2.3, App. E-F);
* :func:`logit_gradient_gram`, :func:`kernel_stats` — the gradient Gram matrix of a
  linear softmax head and its ``λ_min, λ_max, ρ_min, ρ_max`` (Sec. 2.3), which give the
  ``λ/ρ`` numbers of the Cat/Dog/Persian/Siamese toy (App. G) from :data:`TOY_EMBEDDINGS`
  and :data:`SIAMESE_VARIANTS`.

Where the paper is wrong or ambiguous (details in the docstrings and ``docs/sharpening.md``):

* Theorem 2.2 says ``π̂`` maximises Eq. 3, the log-likelihood surrogate
  ``Σ_s A_s log π(o_s)/G − β KL``.  It does not: with any negative advantage that objective
  is unbounded above (``A log π → +∞`` as ``π → 0``).  ``π̂`` is the maximiser of the
  *linear* batch objective ``Σ_i π(o_i)·N_i A_i/G − β KL(π‖π_ref)`` (App. A's proof with
  ``A(o)`` replaced by ``N(o)A(o)/G``) and the fixed point of App. B's update (Eq. 6).
* Corollary 2.2's general ``R`` carries ``N_o'`` on its first term only, while dividing the
  two bounds of Theorem 2.4 (as App. F does) puts it on both; the main text's simplified
  form repeats the slip, App. F's does not.  We use the quotient of the bounds.
* App. G prints ``λ = ‖e_Persian‖² = 0.8775``; ``‖[0.75, 0.5, 0.25, 0.1]‖² = 0.885``.  The
  printed ratios 1.38 / 1.57 / 1.72 are ``0.8775/ρ``; with the correct ``λ`` they are
  1.394 / 1.580 / 1.735.  The ``ρ`` values 0.635 / 0.56 / 0.51 are right.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rlvr_plumbing import checks

__all__ = [
    "TOY_EMBEDDINGS",
    "SIAMESE_VARIANTS",
    "BinaryBatch",
    "KernelStats",
    "kl_optimal_policy",
    "batch_optimal_policy",
    "batch_partition",
    "partition_lower_bound",
    "normalized_binary_advantages",
    "binary_batch_stats",
    "partition_lower_bound_binary",
    "is_moderate_sharpening",
    "target_shifts",
    "coupling_ratio",
    "coupling_ratio_simplified",
    "logit_gradient_gram",
    "kernel_stats",
]

#: fixed feature embeddings of the softmax toy (Over-Sharpening Sec. 2.4)
TOY_EMBEDDINGS: dict[str, tuple[float, ...]] = {
    "Cat": (0.5, 0.5, 0.5, 0.1),
    "Persian": (0.75, 0.5, 0.25, 0.1),
    "Dog": (0.1, 0.1, 0.1, 0.9),
    "Siamese": (0.25, 0.5, 0.75, 0.1),
}
#: the three Siamese embeddings of the semantic-coupling experiment (Over-Sharpening Sec. 2.4, App. G)
SIAMESE_VARIANTS: dict[str, tuple[float, ...]] = {
    "High": (0.25, 0.5, 0.75, 0.1),
    "Mid": (0.1, 0.5, 0.9, 0.1),
    "Low": (0.0, 0.5, 1.0, 0.1),
}


class BinaryBatch(NamedTuple):
    """Statistics of a batch with binary rewards (Over-Sharpening Theorem 2.3)."""

    p_plus: np.ndarray
    sigma: np.ndarray
    delta_pi: np.ndarray


class KernelStats(NamedTuple):
    """Feature specificity ``λ`` (diagonal) and cross-similarity ``ρ`` (off-diagonal) of a Gram matrix."""

    lam_min: np.ndarray
    lam_max: np.ndarray
    rho_min: np.ndarray
    rho_max: np.ndarray


# ----------------------------------------------------------------- checks
def _positive(name: str, x: Any) -> np.ndarray:
    return checks.array(name, x, low=0, low_open=True)


def _probs(name: str, x: Any) -> np.ndarray:
    """Probability vectors on the last axis: entries >= 0 summing to 1."""
    a = checks.array(name, x, min_ndim=1, low=0)
    if not np.allclose(a.sum(-1), 1.0, rtol=0, atol=1e-9):
        raise ValueError(f"{name} must hold probability vectors on the last axis (entries >= 0, summing to 1)")
    return a


def _counts(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """Counts N_i >= 0 (integers) on the last axis and the batch size G = Σ N_i >= 1."""
    a = checks.array("counts", x, min_ndim=1, low=0, integer=True)
    G = a.sum(-1, keepdims=True)
    if np.any(G < 1):
        raise ValueError("counts must sum to G >= 1 on the last axis (a batch needs a sample)")
    return a, G


def _mask(name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean (or 0/1) mask over the modes, broadcast to ``shape``."""
    a = np.asarray(x)
    if a.dtype != np.bool_:
        a = checks.array(name, x, low=0, high=1, integer=True).astype(bool)
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise ValueError(f"{name} must broadcast to shape {shape}, got {a.shape}") from None


def _broadcast(*arrays: np.ndarray) -> list[np.ndarray]:
    try:
        return list(np.broadcast_arrays(*arrays))
    except ValueError:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(f"arguments must broadcast to one shape, got {shapes}") from None


def _tilt(pi_ref: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``π ∝ π_ref·exp(x)`` on the last axis and ``log Σ π_ref·exp(x)``, without overflow."""
    pi_ref, x = _broadcast(pi_ref, x)
    live = pi_ref > 0
    top = np.max(np.where(live, x, -np.inf), axis=-1, keepdims=True)
    w = np.where(live, pi_ref * np.exp(np.where(live, x - top, 0.0)), 0.0)
    s = w.sum(-1, keepdims=True)
    return w / s, (top + np.log(s))[..., 0]


def _beta(beta: Any) -> np.ndarray:
    return _positive("beta", beta)[..., None]


# ------------------------------------------------------- Theorems 2.1 - 2.2
def kl_optimal_policy(pi_ref: Any, advantages: Any, beta: Any) -> np.ndarray:
    """Maximiser of the KL-regularised objective (Over-Sharpening Eq. 1-2, Theorem 2.1).

    ``π*(o) = π_ref(o)·exp(A(o)/β) / Z``,  ``Z = Σ_o π_ref(o)·exp(A(o)/β)``.

    Parameters
    ----------
    pi_ref : array_like, shape (..., K)
        Reference probabilities of the ``K`` modes (last axis sums to 1).
    advantages : array_like, broadcastable to ``pi_ref``
        Advantage ``A(o)`` of each mode.
    beta : float or array_like broadcastable to ``pi_ref.shape[:-1]``
        KL coefficient, ``> 0``.

    Returns
    -------
    ndarray, shape (..., K)
        ``π*``; computed in the log domain (no overflow for small ``β``).  With
        ``A ≥ 0`` on correct and ``A ≤ 0`` on incorrect modes every correct mode gains
        probability (Corollary 2.1, see :func:`is_moderate_sharpening`).
    """
    pi_ref = _probs("pi_ref", pi_ref)
    adv = checks.array("advantages", advantages)
    return _tilt(pi_ref, adv / _beta(beta))[0]


def _batch_exponent(pi_ref: Any, counts: Any, advantages: Any, beta: Any) -> tuple[np.ndarray, ...]:
    pi_ref = _probs("pi_ref", pi_ref)
    N, G = _counts(counts)
    adv = checks.array("advantages", advantages)
    pi_ref, N, adv = _broadcast(pi_ref, N, adv)
    return pi_ref, N, adv, G, N * adv / (_beta(beta) * G)


def batch_optimal_policy(pi_ref: Any, counts: Any, advantages: Any, beta: Any) -> np.ndarray:
    """Batch-optimal policy ``π̂`` (Over-Sharpening Eq. 4, Theorem 2.2).

    ``π̂(o_i) = π_ref(o_i)·exp(N_i A_i/(βG)) / Z'``, ``G = Σ_i N_i``: Theorem 2.1 with
    each advantage weighted by the empirical frequency ``N_i/G`` of its mode.  Unsampled
    modes (``N_i = 0``) are all scaled by the same factor ``1/Z'``.

    Parameters
    ----------
    pi_ref : array_like, shape (..., K)
        Reference probabilities (last axis sums to 1).
    counts : array_like of int, shape (..., K)
        ``N_i``, times mode ``i`` appears in the batch of ``G`` samples (``G >= 1``).
    advantages : array_like, broadcastable to ``counts``
        ``A(q, o_i)``; only modes with ``N_i > 0`` matter.
    beta : float or array_like
        KL coefficient ``> 0`` (broadcast over the leading axes).

    Notes
    -----
    The paper calls ``π̂`` the maximiser of Eq. 3 (``(1/G)Σ_s A_s log π(o_s) − β KL``); that
    objective is unbounded above as soon as one advantage is negative.  ``π̂`` maximises the
    linear batch objective ``Σ_i π(o_i)·N_i A_i/G − β KL(π‖π_ref)`` (the proof of App. A with
    ``A`` replaced by ``N A/G``) and is the fixed point of App. B's update (Eq. 6); the tests
    check both.

    Examples
    --------
    >>> from rlvr_theory import sharpening
    >>> pi_ref = [0.5, 0.3, 0.2]
    >>> sharpening.batch_optimal_policy(pi_ref, counts=[3, 1, 0], advantages=[0.5, -1.5, 0.0], beta=0.5)
    array([0.75595805, 0.10120623, 0.14283572])
    >>> 0.2 / float(sharpening.batch_partition(pi_ref, [3, 1, 0], [0.5, -1.5, 0.0], 0.5))  # unsampled: pi_ref/Z'
    0.14283572
    """
    pi_ref, _, _, _, x = _batch_exponent(pi_ref, counts, advantages, beta)
    return _tilt(pi_ref, x)[0]


def batch_partition(pi_ref: Any, counts: Any, advantages: Any, beta: Any, *, log: bool = False) -> np.ndarray:
    """Batch partition function ``Z'(q) = Σ_j π_ref(o_j)·exp(N_j A_j/(βG))`` (Over-Sharpening Theorem 2.2).

    Same arguments as :func:`batch_optimal_policy`; returns shape ``counts.shape[:-1]``.
    ``Z' > 1`` suppresses every unsampled mode: ``π̂(o_k) = π_ref(o_k)/Z'`` (Over-Sharpening Sec. 2.2).
    ``log=True`` returns ``log Z'`` (finite where ``Z'`` itself would overflow).
    """
    pi_ref, _, _, _, x = _batch_exponent(pi_ref, counts, advantages, beta)
    logz = _tilt(pi_ref, x)[1]
    if log:
        return logz
    with np.errstate(over="ignore"):
        return np.exp(logz)


# -------------------------------------------------------------- Theorem 2.3
def partition_lower_bound(pi_ref: Any, counts: Any, advantages: Any, beta: Any) -> np.ndarray:
    """General lower bound of Over-Sharpening Theorem 2.3 (App. C): ``Z' ≥ 1 + (1/(βG))·Σ_i N_i A_i π_ref(o_i)``.

    With binary advantages (``A_+`` on sampled correct, ``A_−`` on sampled incorrect modes)
    this is the paper's ``1 + [A_+ Σ_{S⁺} N_i π_ref − |A_−| Σ_{S⁻} N_j π_ref]/(βG)``; the
    proof (``e^x ≥ 1 + x`` termwise) holds for any per-mode advantages, which we allow.
    Arguments as :func:`batch_optimal_policy`; returns shape ``counts.shape[:-1]``.
    """
    pi_ref, N, adv, G, _ = _batch_exponent(pi_ref, counts, advantages, beta)
    return 1.0 + (N * adv * pi_ref).sum(-1) / (_beta(beta)[..., 0] * G[..., 0])


def normalized_binary_advantages(counts: Any, correct: Any, *, ddof: int = 0) -> np.ndarray:
    """Normalised binary advantages of each mode (Over-Sharpening Theorem 2.3): ``A_+ = (1−p⁺)/σ``, ``A_− = −p⁺/σ``.

    ``p⁺ = Σ_{correct} N_i / G`` is the batch accuracy and ``σ = sqrt(p⁺(1−p⁺)·G/(G−ddof))``
    the empirical standard deviation of the 0/1 rewards — the GRPO advantage
    ``(r − r̄)/σ`` of every sample of that mode (``ddof`` as in
    ``advantages.get("grpo", ddof=...)``).  A batch whose samples are all correct or all
    incorrect (``σ = 0``) gets 0, as in GRPO.

    Parameters
    ----------
    counts : array_like of int, shape (..., K)
        ``N_i`` per mode.
    correct : array_like of bool, broadcastable to ``counts``
        Which modes are correct (``O⁺``).
    ddof : {0, 1}
        Delta degrees of freedom of ``σ``; ``ddof=1`` needs ``G >= 2``.

    Returns
    -------
    ndarray, shape (..., K)
        ``A_+`` on correct modes and ``A_−`` on incorrect ones (also on unsampled modes,
        where the value does not enter Eq. 4).
    """
    p, sigma = _accuracy(counts, correct, ddof)[1:3]
    adv = np.where(_mask("correct", correct, np.shape(counts)), 1.0 - p, -p)
    out = np.zeros(adv.shape)
    np.divide(adv, sigma, out=out, where=sigma > 0)
    return out


def _accuracy(counts: Any, correct: Any, ddof: int) -> tuple[np.ndarray, ...]:
    ddof = checks.choice("ddof", ddof, (0, 1))
    N, G = _counts(counts)
    ok = _mask("correct", correct, N.shape)
    if ddof and np.any(G < 2):
        raise ValueError("counts must sum to G >= 2 with ddof=1")
    p = np.where(ok, N, 0.0).sum(-1, keepdims=True) / G
    sigma = np.sqrt(p * (1 - p) * G / (G - ddof))
    return N, p, sigma, ok


def binary_batch_stats(pi_ref: Any, counts: Any, correct: Any, *, ddof: int = 0) -> BinaryBatch:
    """``p⁺``, ``σ`` and ``Δπ = π⁺_min − π⁻_max`` of a binary-reward batch (Over-Sharpening Theorem 2.3).

    ``π⁺_min = min_{i∈S⁺} π_ref(o_i)`` over the *sampled* correct modes and
    ``π⁻_max = max_{j∈S⁻} π_ref(o_j)`` over the sampled incorrect ones.  Where ``S⁺`` or
    ``S⁻`` is empty the bound's coefficient ``p⁺(1−p⁺)/σ`` has no meaning (``σ = 0``) and we
    set ``Δπ = 0``, so :func:`partition_lower_bound_binary` returns 1 (= ``Z'``: all
    advantages vanish).  Returns arrays of shape ``counts.shape[:-1]``.
    """
    pi_ref = _probs("pi_ref", pi_ref)
    N, p, sigma, ok = _accuracy(counts, correct, ddof)
    pi_ref, N, ok = _broadcast(pi_ref, N, ok)
    pos, neg = (N > 0) & ok, (N > 0) & ~ok
    both = pos.any(-1) & neg.any(-1)
    lo = np.min(np.where(pos, pi_ref, np.inf), axis=-1)
    hi = np.max(np.where(neg, pi_ref, -np.inf), axis=-1)
    delta = np.where(both, lo, 0.0) - np.where(both, hi, 0.0)
    p, sigma = (np.broadcast_to(a[..., 0], delta.shape) for a in (p, sigma))
    return BinaryBatch(p.copy(), sigma.copy(), np.asarray(delta))


def partition_lower_bound_binary(p_plus: Any, sigma: Any, delta_pi: Any, beta: Any) -> np.ndarray:
    """Simplified bound of Over-Sharpening Theorem 2.3: ``Z' ≥ 1 + p⁺(1−p⁺)·Δπ/(βσ)``.

    Valid for the normalised binary advantages of :func:`normalized_binary_advantages`
    (``σ`` the same standard deviation; ``p⁺, σ, Δπ`` from :func:`binary_batch_stats`).
    ``Δπ > 0`` (the model already prefers its sampled correct modes) forces ``Z' > 1``.

    Parameters
    ----------
    p_plus : array_like in [0, 1]
    sigma : array_like >= 0; 0 only where ``p_plus`` is 0 or 1 (the bound is then 1)
    delta_pi : array_like in [-1, 1]
    beta : array_like > 0
    """
    p = checks.array("p_plus", p_plus, low=0, high=1)
    s = checks.array("sigma", sigma, low=0)
    d = checks.array("delta_pi", delta_pi, low=-1, high=1)
    b = _positive("beta", beta)
    p, s, d, b = _broadcast(p, s, d, b)
    coef = p * (1 - p)
    if np.any((s == 0) & (coef > 0)):
        raise ValueError("sigma must be > 0 wherever 0 < p_plus < 1")
    out = np.ones(p.shape)
    np.divide(coef * d, b * s, out=out, where=s > 0)
    return np.where(s > 0, 1.0 + out, 1.0)


def is_moderate_sharpening(pi_new: Any, pi_ref: Any, correct: Any, *, atol: float = 1e-12) -> np.ndarray:
    """Over-Sharpening Definition 2.1: moderate sharpening iff no correct mode loses probability.

    True where ``π_new(o) >= π_ref(o) − atol`` for every correct mode ``o`` (last axis);
    False means over-sharpening.  Returns a boolean array of shape ``pi_ref.shape[:-1]``.
    """
    new, ref = _probs("pi_new", pi_new), _probs("pi_ref", pi_ref)
    new, ref = _broadcast(new, ref)
    ok = _mask("correct", correct, ref.shape)
    atol = checks.number("atol", atol, low=0)
    return np.all(~ok | (new >= ref - atol), axis=-1)


# -------------------------------------------------- Sec. 2.3, Corollary 2.2
def target_shifts(counts: Any, advantages: Any, beta: Any) -> tuple[np.ndarray, np.ndarray]:
    """NTK target logit shifts of a batch (Over-Sharpening Sec. 2.3, App. E).

    ``y_i = N_i·|A(q, o_i)|/(βG)`` for every sample of mode ``i`` (the sign is absorbed
    into the gradient direction) and ``𝒜_sum = Σ_{s=1}^G y_s = Σ_i N_i·y_i``.

    Returns
    -------
    y : ndarray, shape (..., K)
        Per-sample target shift of each mode (0 for unsampled modes).
    a_sum : ndarray, shape (...)
        ``𝒜_sum``.
    """
    N, G = _counts(counts)
    adv = checks.array("advantages", advantages)
    N, adv = _broadcast(N, adv)
    y = N * np.abs(adv) / (_beta(beta) * G)
    return y, (N * y).sum(-1)


def _coupling_args(n_seen: Any, y_seen: Any, a_sum: Any, G: Any) -> list[np.ndarray]:
    G = checks.array("G", G, low=1, integer=True)
    n = checks.array("n_seen", n_seen, low=1, integer=True)
    if np.any(n > G):
        raise ValueError(f"n_seen must be an integer in [1, G] (copies of o' in the batch), got {n_seen!r}")
    y = checks.array("y_seen", y_seen, low=0)
    a = _positive("a_sum", a_sum)
    if np.any(n * y > a * (1 + 1e-12)):
        raise ValueError("a_sum must be >= n_seen·y_seen (it sums y over the whole batch)")
    return _broadcast(n, y, a, G)


def coupling_ratio(n_seen: Any, y_seen: Any, a_sum: Any, G: Any, lam_min: Any, lam_max: Any,
                   rho_min: Any, rho_max: Any) -> np.ndarray:
    """Semantic-coupling ratio ``R`` (Over-Sharpening Corollary 2.2, App. F), general form.

    ``R`` is the Case-2 lower bound of Theorem 2.4 (a batch-seen mode ``o'``) divided by
    its Case-1 upper bound (a batch-unseen mode):

        R = (λ_min−ρ_min)/(λ_max−ρ_max) · N_o' · [ y_k/𝒜_sum · (λ_min+(G−1)ρ_min)/ρ_max
                                                   − (λ_min+(G−1)ρ_min)/(λ_max+(G−1)ρ_max) ].

    The paper's Cor. 2.2 prints ``N_o'`` on the first bracket term only; the quotient of
    the bounds (first line of App. F's proof) has it on both, which we use.  ``η`` cancels.

    Parameters
    ----------
    n_seen : int array_like in [1, G]
        ``N_o'``, copies of the seen mode in the batch.
    y_seen : array_like >= 0
        ``y_k``, its per-sample target shift (:func:`target_shifts`).
    a_sum : array_like > 0
        ``𝒜_sum`` (``>= n_seen·y_seen``).
    G : int array_like >= 1
        Batch size.
    lam_min, lam_max, rho_min, rho_max : array_like
        Kernel statistics (:func:`kernel_stats`) with ``0 < ρ_min <= ρ_max <= λ_min <= λ_max``
        (Assumption 2.3) and ``ρ_max < λ_max``.
    """
    n, y, a, G = _coupling_args(n_seen, y_seen, a_sum, G)
    lmin, lmax, rmin, rmax = (_positive(k, v) for k, v in
                              (("lam_min", lam_min), ("lam_max", lam_max), ("rho_min", rho_min), ("rho_max", rho_max)))
    n, y, a, G, lmin, lmax, rmin, rmax = _broadcast(n, y, a, G, lmin, lmax, rmin, rmax)
    if np.any(lmin > lmax) or np.any(rmin > rmax) or np.any(rmax > lmin) or np.any(rmax >= lmax):
        raise ValueError("lam_min, lam_max, rho_min, rho_max must satisfy 0 < rho_min <= rho_max <= lam_min "
                         "<= lam_max and rho_max < lam_max (Assumption 2.3)")
    loose = lmin + (G - 1) * rmin
    return (lmin - rmin) / (lmax - rmax) * n * (y / a * loose / rmax - loose / (lmax + (G - 1) * rmax))


def coupling_ratio_simplified(n_seen: Any, y_seen: Any, a_sum: Any, G: Any, lam_over_rho: Any) -> np.ndarray:
    """Simplified ``R`` for a well-conditioned kernel (Over-Sharpening Corollary 2.2, App. F).

    ``R ≈ N_o'·[ y_k/𝒜_sum · (λ/ρ + G − 1) − 1 ]`` when ``λ_min ≈ λ_max ≈ λ`` and
    ``ρ_min ≈ ρ_max ≈ ρ`` (App. F's form; the main text drops the outer ``N_o'`` on the
    ``−1``, see :func:`coupling_ratio`).  For a kernel that is exactly ``(λ−ρ)I + ρ11ᵀ``
    with transfer ``η·λ`` to the seen and ``η·ρ`` to the unseen samples, the true ratio of
    logit shifts is ``R + 1`` (the bound drops the non-negative ``ηρ·Σα`` term).

    Arguments as :func:`coupling_ratio`; ``lam_over_rho >= 1`` (Assumption 2.3).

    Examples
    --------
    >>> from rlvr_theory import sharpening
    >>> float(sharpening.coupling_ratio_simplified(2, 0.1, 1.0, 8, 1.4))  # R < 0: the unseen mode wins
    -0.32
    >>> float(sharpening.coupling_ratio_simplified(5, 5 / 36, 1.0, 8, 0.885 / 0.635))
    0.828959
    """
    n, y, a, G = _coupling_args(n_seen, y_seen, a_sum, G)
    lr = checks.array("lam_over_rho", lam_over_rho, low=1)  # Assumption 2.3: λ >= ρ
    n, y, a, G, lr = _broadcast(n, y, a, G, lr)
    return n * (y / a * (lr + G - 1) - 1)


def logit_gradient_gram(embeddings: Any, labels: Any = None) -> np.ndarray:
    """Gram matrix of the logit gradients of a linear softmax head (Over-Sharpening Sec. 2.3-2.4, App. G).

    For logits ``f(x, o) = W[o]·e_x`` the gradient ``∇_W f(x, o) = onehot(o) ⊗ e_x``, so
    ``K[(x,o), (x',o')] = 1[o = o']·e_xᵀ e_x'``.  App. G's "kernel entries
    ``K ≈ e_qᵀ e_q'``" are the entries of this matrix for one shared label.

    Parameters
    ----------
    embeddings : array_like, shape (..., n, d)
        Input features ``e_x`` of the ``n`` (input, label) pairs.
    labels : array_like of int, shape (..., n), optional
        Output label of each pair; ``None`` means one shared label.

    Returns
    -------
    ndarray, shape (..., n, n)
    """
    e = checks.array("embeddings", embeddings, min_ndim=2)
    K = e @ np.swapaxes(e, -1, -2)
    if labels is None:
        return K
    lab = np.asarray(labels)
    if not np.issubdtype(lab.dtype, np.integer):
        raise ValueError("labels must be an integer array of shape (..., n)")
    try:
        same = lab[..., :, None] == lab[..., None, :]
        return np.where(same, K, 0.0)
    except ValueError:
        raise ValueError(f"labels must have shape (..., n) matching embeddings {e.shape}, got {lab.shape}") from None


def kernel_stats(gram: Any) -> KernelStats:
    """``λ_min, λ_max`` (diagonal) and ``ρ_min, ρ_max`` (off-diagonal) of a Gram matrix (Over-Sharpening Sec. 2.3).

    ``λ`` is "feature specificity", ``ρ`` "cross-similarity".  ``gram``: ``(..., n, n)``,
    ``n >= 2``; returns arrays of shape ``(...)``.  For App. G the matrix of
    ``[e_Persian, e_Siamese]`` gives ``λ_min = ‖e_Persian‖²`` and ``ρ = e_Persianᵀ e_Siamese``.
    """
    K = checks.array("gram", gram, min_ndim=2)
    n = K.shape[-1]
    if K.shape[-2] != n or n < 2:
        raise ValueError(f"gram must be square (..., n, n) with n >= 2, got shape {K.shape}")
    d = np.diagonal(K, axis1=-2, axis2=-1)
    off = K[..., ~np.eye(n, dtype=bool)]
    return KernelStats(d.min(-1), d.max(-1), off.min(-1), off.max(-1))
