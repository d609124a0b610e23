"""The rank-1 funnel of the output-head update (FADE App. 15.1-15.2).

For ``N`` token gradients ``g_i = A_i·v_i ⊗ h_i`` (``v_i = e_{y_i} − π_i ∈ R^V`` the softmax
error, ``h_i ∈ R^d`` the last hidden state) the update is ``W = Σ_i A_i v_i ⊗ h_i``
(a ``V × d`` matrix).  Splitting ``h_i = α_i u_1 + h_i^⊥`` along a fixed unit vector
``u_1`` separates ``W`` into the rank-1 part ``(Σ_i A_i α_i v_i) ⊗ u_1`` and the residual
``Σ_i A_i v_i ⊗ h_i^⊥`` (Eq. 32).  Its rank-1 fraction is ``r1 = σ1²(W)/‖W‖_F²``.

* :func:`rank1_limit` — the ``N → ∞`` limit of ``r1`` (Prop. 15.1, Eq. 33);
* :func:`mode_residual`, :func:`mode_residual_norm_sq` — the failure residual of ``K``
  failure modes (Cor. 15.2);
* :func:`clt_residual_ratio` — the CLT baseline ``‖R_F‖/‖R_S‖ ≈ sqrt(N_S/N_F)`` (App. 15.2).

SVD metrics of measured matrices live in ``analysis.spectra``; this module holds only the
closed forms.  Leading axes broadcast everywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_plumbing import checks

__all__ = [
    "rank1_limit",
    "mode_residual",
    "mode_residual_norm_sq",
    "clt_residual_ratio",
]


def rank1_limit(signal: Any, residual: Any) -> np.ndarray:
    """Limit of the rank-1 fraction ``r1 = σ1²(W)/‖W‖_F²`` as ``N → ∞`` (FADE Prop. 15.1, Eq. 33).

        r1 → ‖E[A α v]‖² / (‖E[A α v]‖² + ‖R‖_F²),   R = E[A v ⊗ h^⊥].

    Parameters
    ----------
    signal : array_like, shape (..., V)
        ``E[A_i α_i v_i]``, the rank-1 signal per token; must be non-zero (Prop. 15.1
        assumes it).
    residual : array_like, shape (..., V, d)
        ``R = E[A_i v_i ⊗ h_i^⊥]`` with ``h^⊥ ⊥ u_1`` (so ``R u_1 = 0``).

    Returns
    -------
    ndarray, shape (...)
        The limit, in ``(0, 1]``; 1 iff ``R = 0``.

    Notes
    -----
    The population gradient is ``E[g] = a ⊗ u_1 + R`` with ``a = E[Aαv]``; ``r1`` of ``W/N``
    tends to ``σ1²(E[g])/‖E[g]‖_F²`` and ``‖E[g]‖_F² = ‖a‖² + ‖R‖_F²`` always.  Eq. 33 is that
    limit when ``u_1`` is the top right singular vector of ``E[g]`` — the proposition's
    hypothesis, which holds iff ``aᵀR = 0`` and ``‖a‖ >= σ1(R)``.  For any other fixed
    ``u_1`` (with ``R u_1 = 0``) ``σ1²(E[g]) >= ‖a‖²`` and Eq. 33 is a *lower bound* on the
    limit (the tests show both cases by simulation).

    Examples
    --------
    >>> from rlvr_theory import rank1
    >>> float(rank1.rank1_limit([3.0, 4.0], np.zeros((2, 3))))  # no residual: rank 1
    1.0
    >>> float(rank1.rank1_limit([3.0, 4.0], [[0, 1, 0], [0, 0, 2]]))  # 25 / (25 + 5)
    0.833333
    """
    a = checks.array("signal", signal, min_ndim=1)
    R = checks.array("residual", residual, min_ndim=2)
    if R.shape[-2] != a.shape[-1]:
        raise ValueError(f"residual must have shape (..., V, d) with V = signal.shape[-1] = {a.shape[-1]}, "
                         f"got {R.shape}")
    s = (a**2).sum(-1)
    if np.any(s == 0):
        raise ValueError("signal must be non-zero (Prop. 15.1 assumes E[A·α·v] != 0)")
    r = (R**2).sum((-2, -1))
    s, r = np.broadcast_arrays(s, r)
    return s / (s + r)


def mode_residual(mode_signals: Any, mode_means: Any) -> np.ndarray:
    """Failure residual of ``K`` equally likely modes, ``R_F = (1/K)·Σ_k E[A v | k] ⊗ μ_k`` (FADE Cor. 15.2).

    Parameters
    ----------
    mode_signals : array_like, shape (..., K, V)
        ``E[A_i v_i | mode k]``.
    mode_means : array_like, shape (..., K, d)
        ``μ_k = E[h_i^⊥ | mode k]``.

    Returns
    -------
    ndarray, shape (..., V, d)

    Notes
    -----
    As the corollary's statement implies, ``A v`` and ``h^⊥`` are taken conditionally
    uncorrelated within a mode, so that ``E[A v ⊗ h^⊥ | k] = E[A v | k] ⊗ μ_k``.
    """
    w = checks.array("mode_signals", mode_signals, min_ndim=2)
    mu = checks.array("mode_means", mode_means, min_ndim=2)
    if w.shape[-2] != mu.shape[-2]:
        raise ValueError(f"mode_signals and mode_means must have the same number of modes K (axis -2), "
                         f"got {w.shape} and {mu.shape}")
    return np.einsum("...kv,...kd->...vd", w, mu) / w.shape[-2]


def mode_residual_norm_sq(c: Any, mu: Any, K: Any) -> np.ndarray:
    """``‖R_F‖_F² = c²μ²/K`` for ``K`` orthogonal mode means (FADE Cor. 15.2).

    Holds when the ``μ_k`` are mutually orthogonal with ``‖μ_k‖ = μ`` and
    ``‖E[A v | k]‖ = c`` for every ``k`` (the ``E[A v | k]`` need not be orthogonal):
    more diverse failure modes give a smaller residual, ``‖R_F‖ ∝ 1/sqrt(K)``.
    ``c, mu >= 0``; ``K`` integer ``>= 1``.
    """
    c, mu = checks.array("c", c, low=0), checks.array("mu", mu, low=0)
    K = checks.array("K", K, low=1, integer=True)
    return c**2 * mu**2 / K


def clt_residual_ratio(n_success: Any, n_failure: Any) -> np.ndarray:
    """CLT baseline of the residual-norm ratio, ``‖R_F‖/‖R_S‖ ≈ sqrt(N_S/N_F)`` (FADE App. 15.2).

    ``R_g = (1/N_g)·Σ_{i∈g} v_i ⊗ h_i^⊥`` for ``g ∈ {S, F}``.  Under the null hypothesis that
    both groups' per-token terms are i.i.d. with mean zero and a common variance ``σ²`` per
    entry, ``‖R_g‖_F² ≈ V d σ²/N_g``, hence the ratio.  The paper's batch (N_S = 8,968,
    N_F = 54,700) gives 0.40; it measures 0.73-0.79.

    ``n_success``, ``n_failure``: token counts ``> 0`` (array_like, broadcast).
    """
    ns = checks.array("n_success", n_success, low=0, low_open=True)
    nf = checks.array("n_failure", n_failure, low=0, low_open=True)
    return np.sqrt(ns / nf)
