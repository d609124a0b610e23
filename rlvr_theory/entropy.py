"""First-order entropy change of a softmax policy after one policy-gradient step.

Setting: ``π = softmax(z)`` over ``K`` actions (logits ``z`` of shape ``[..., K]``,
vectorised over the leading axes), an advantage ``A`` per action (shape ``[..., K]``) or per
sampled action, entropy ``H = −Σ_a π_a log π_a`` and the step ``z → z + Δz``.  Computed from
``log_softmax(z)``: ``K = 128,000`` and probabilities that underflow are fine.

Gradient of the entropy in logit space: ``∂H/∂z_i = −π_i(log π_i + H)``
(:func:`entropy_gradient`), so to first order ``ΔH = Σ_i ∂H/∂z_i·Δz_i``
(:func:`first_order_change`).  Since ``Σ_i π_i(log π_i + H) = 0``, for any ``Y``

    Σ_i π_i (log π_i + H)·Y_i = Cov_π(log π, Y).

Two steps, both the ascent direction of ``J(z) = E_π[A] = Σ_a π_a A_a``:

* **natural gradient** (:func:`natural_step`): the Fisher matrix of a softmax in logit space
  is ``F = diag(π) − ππᵀ`` (singular along ``1``) and ``∂J/∂z = π⊙(A − E_π A)``;
  ``F·(A + c·1) = π⊙(A − E_π A)`` for every ``c``, so the natural-gradient step is
  ``Δz = η·A`` up to a constant shift of all logits (which leaves ``π`` unchanged).
  First order: ``ΔH = −η·Cov_π(A, log π)`` (:func:`natural_change`);
* **vanilla gradient** (:func:`vanilla_step`): ``Δz = η·∂J/∂z = η·π⊙(A − E_π A)``.
  First order: ``ΔH = −η·Cov_π(log π, π⊙(A − E_π A)) = −η[Cov_π(log π, π·A) −
  E_π[A]·Cov_π(log π, π)]`` (:func:`vanilla_change`; the form ``−η·Cov(log π, π·A)`` of
  Cui et al. 2025 is the case ``E_π[A] = 0``).  Derivation ours (brief: "derive it").

FADE's Eq. 7 / Theorem 13.1 (000 Sec. 4.1, App. 13) states
``ΔH ≈ η[(m_S − m_F)·H − Cov(A, log π)]`` with ``E[A] = m_S − m_F`` (:func:`fade_change`,
:func:`drift`).  **For a softmax policy the drift term is not part of the first-order change.**
``E_π[A·∇log π]`` does not change when a constant is added to ``A`` (``E_π[∇log π] = 0``), so
no step of the form ``Δθ = η·M·E_π[A∇log π]`` (any preconditioner ``M``) can make ``ΔH``
depend on ``E[A]``.  The exact Fisher inner product in Step 4 of the proof is
``E[log π ∇log π]ᵀ F⁺ E[A ∇log π] = Cov_π(A, log π)``, not ``E_π[A log π]``; replacing one by the
other adds ``−E[A]·E[log π] = (m_S − m_F)·H``.  The tests measure this: the exact one-step
change of the natural step matches :func:`natural_change` with an error ``O(η²)``, and
:func:`fade_change` misses it by ``η·(m_S − m_F)·H``.  With a sign-balanced advantage
(``E[A] = 0``) the two agree.  A mean advantage does act on the logits of a *finite*
sample — the ``−C·π`` term of :func:`rlvr_theory.categorical.behaviour_update` — whose
first-order entropy effect :func:`first_order_change` gives for any ``Δz``.

:func:`exact_change` computes ``H(softmax(z + Δz)) − H(softmax(z))`` without the cancellation
of the naive difference (relative precision near machine epsilon even for ``η = 1e-8``);
:func:`one_step_table` puts predictions and exact changes side by side.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from . import masses as _masses
from .advantages import Advantage
from .categorical import _check_eta, _check_like, _check_z, _delta_lse, log_softmax

__all__ = [
    "entropy",
    "entropy_gradient",
    "cov_pi",
    "natural_step",
    "vanilla_step",
    "first_order_change",
    "exact_change",
    "natural_change",
    "vanilla_change",
    "fade_change",
    "fade_change_sampled",
    "drift",
    "drift_from_advantage",
    "one_step_table",
]


def _parts(z: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """logp, p and H (with a trailing axis of length 1)."""
    logp = log_softmax(z)
    p = np.exp(logp)
    H = -np.sum(p * logp, axis=-1, keepdims=True)
    return logp, p, H


def _action_adv(A: Any, shape: tuple[int, ...]) -> np.ndarray:
    return _check_like("A", A, shape, "a finite array [..., K] of advantages per action")


def entropy(z: Any) -> np.ndarray:
    """Entropy ``H = −Σ_a π_a log π_a`` (nats) of ``π = softmax(z)`` along the last axis."""
    return _parts(z)[2][..., 0]


def entropy_gradient(z: Any) -> np.ndarray:
    """``∂H/∂z_i = −π_i(log π_i + H)`` (FADE (000) App. 13 Eq. 22 in logit coordinates,
    with ``∇_z log π_a = e_a − π``).  Sums to 0 over the actions."""
    logp, p, H = _parts(z)
    return -p * (logp + H)


def cov_pi(z: Any, X: Any, Y: Any) -> np.ndarray:
    """``Cov_π(X, Y) = Σ_a π_a(X_a − E_π X)(Y_a − E_π Y)`` under ``π = softmax(z)``.

    ``X``, ``Y`` are arrays ``[..., K]`` over the actions; returns ``[...]``.
    """
    _, p, _ = _parts(z)
    x = _check_like("X", X, p.shape, "a finite array [..., K]")
    y = _check_like("Y", Y, p.shape, "a finite array [..., K]")
    xc = x - np.sum(p * x, axis=-1, keepdims=True)
    yc = y - np.sum(p * y, axis=-1, keepdims=True)
    return np.sum(p * xc * yc, axis=-1)


def natural_step(A: Any, eta: Any) -> np.ndarray:
    """Natural-gradient step of ``J = E_π[A]`` for a softmax: ``Δz = η·A`` (module docstring:
    the Fisher ``diag(π) − ππᵀ`` maps ``A + c·1`` to ``∂J/∂z`` for every ``c``)."""
    a = np.asarray(A, dtype=float)
    if a.ndim == 0 or not np.all(np.isfinite(a)):
        raise ValueError("A must be a finite array [..., K] of advantages per action")
    return _check_eta(eta) * a


def vanilla_step(z: Any, A: Any, eta: Any) -> np.ndarray:
    """Vanilla (logit-space) gradient step ``Δz = η·∂E_π[A]/∂z = η·π⊙(A − E_π A)``
    (two-stage paper (001) Theorem 1 is its expectation form)."""
    _, p, _ = _parts(z)
    a = _action_adv(A, p.shape)
    return _check_eta(eta) * p * (a - np.sum(p * a, axis=-1, keepdims=True))


def first_order_change(z: Any, dz: Any) -> np.ndarray:
    """``ΔH ≈ ∇_z H·Δz = −Σ_i π_i(log π_i + H)Δz_i = −Cov_π(log π, Δz)`` for any logit step."""
    logp, p, H = _parts(z)
    d = _check_like("dz", dz, logp.shape, "a finite array [..., K] of logit changes")
    return -np.sum(p * (logp + H) * d, axis=-1)


def exact_change(z: Any, dz: Any) -> np.ndarray:
    """Exact ``H(softmax(z + Δz)) − H(softmax(z))``, free of cancellation.

    With ``Δlse = log Σ_j π_j e^{Δz_j}``, ``π'_i = π_i e^{Δz_i − Δlse}``:
    ``ΔH = Δlse − Σ_i π'_iΔz_i − Σ_i (π'_i − π_i) log π_i`` and
    ``π'_i − π_i = π_i·expm1(Δz_i − Δlse)``; every term is of the order of the step, so the
    result keeps its relative precision for tiny steps (the reference of the tests).
    """
    logp, p, _ = _parts(z)
    d = _check_like("dz", dz, logp.shape, "a finite array [..., K] of logit changes")
    dl = _delta_lse(p, logp, d)
    dp = p * np.expm1(d - dl)
    return dl[..., 0] - np.sum((p + dp) * d, axis=-1) - np.sum(dp * logp, axis=-1)


def natural_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """First-order ``ΔH = −η·Cov_π(A, log π)`` of the natural step ``Δz = ηA``.

    Exact first order (module docstring); independent of ``E_π[A]``.  It is FADE (000)
    Eq. 7 without the drift term, i.e. Eq. 7 for sign-balanced advantages.
    """
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    return -_check_eta(eta)[..., 0] * np.sum(p * (logp + H) * a, axis=-1)


def vanilla_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """First-order ``ΔH = −η·Cov_π(log π, π⊙(A − E_π A))`` of the vanilla step
    ``Δz = η·π⊙(A − E_π A)``; ``= −η[Cov_π(log π, π·A) − E_π[A]·Cov_π(log π, π)]``
    (derivation ours; Cui et al. 2025's ``−η·Cov(log π, π·A)`` when ``E_π[A] = 0``)."""
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    ac = a - np.sum(p * a, axis=-1, keepdims=True)
    return -_check_eta(eta)[..., 0] * np.sum(p * (logp + H) * p * ac, axis=-1)


def fade_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """FADE (000) Eq. 7 / Theorem 13.1 as the paper states it, per action:
    ``ΔH ≈ η[E_π[A]·H − Cov_π(A, log π)]`` (``E_π[A] = m_S − m_F``).

    Equals ``−η·E_π[A log π]``.  Not the first-order change of a softmax step when
    ``E_π[A] ≠ 0``: it exceeds :func:`natural_change` by ``η·E_π[A]·H`` (module docstring).
    """
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    mean = np.sum(p * a, axis=-1)
    return _check_eta(eta)[..., 0] * (mean * H[..., 0] - np.sum(p * (logp + H) * a, axis=-1))


def fade_change_sampled(log_prob: Any, A: Any, H: Any, eta: Any) -> np.ndarray:
    """FADE (000) Eq. 7 estimated from ``N`` rollouts: ``η[Ā·H − Ĉov(A, log π(a_j))]``.

    ``log_prob`` and ``A`` have shape ``[..., N]`` (log-probability and advantage of each
    sampled action), ``H`` the policy entropy over the batch axes.  ``Ā`` is the sample mean
    (an estimate of ``m_S − m_F``) and ``Ĉov`` the unbiased (``ddof = 1``) sample covariance,
    so for i.i.d. draws with ``A_j = A(a_j)`` this is unbiased for :func:`fade_change`.
    ``N >= 2``.  Without the drift, ``−η·Ĉov`` estimates :func:`natural_change`.
    """
    lp = np.asarray(log_prob, dtype=float)
    if lp.ndim == 0 or lp.shape[-1] < 2 or not np.all(np.isfinite(lp)) or np.any(lp > 0):
        raise ValueError("log_prob must be a finite array [..., N] of log-probabilities (<= 0) with N >= 2")
    a = _check_like("A", A, lp.shape, "a finite array [..., N] of advantages of the draws")
    h = np.asarray(H, dtype=float)
    if not np.all(np.isfinite(h)) or np.any(h < 0):
        raise ValueError("H must be a finite entropy >= 0 (or an array over the batch axes)")
    lp, a = np.broadcast_arrays(lp, a)
    N = lp.shape[-1]
    cov = np.sum((a - a.mean(-1, keepdims=True)) * (lp - lp.mean(-1, keepdims=True)), axis=-1) / (N - 1)
    return _check_eta(eta)[..., 0] * (a.mean(-1) * h - cov)


def drift(H: Any, m_S: Any, m_F: Any) -> np.ndarray:
    """FADE (000) Eq. 7 drift term ``(m_S − m_F)·H`` (per unit learning rate)."""
    h, ms, mf = (np.asarray(x, dtype=float) for x in (H, m_S, m_F))
    if not np.all(np.isfinite(h)) or np.any(h < 0):
        raise ValueError("H must be a finite entropy >= 0 (or an array)")
    if not (np.all(np.isfinite(ms)) and np.all(np.isfinite(mf))):
        raise ValueError("m_S and m_F must be finite")
    return (ms - mf) * h


def drift_from_advantage(adv: Advantage | str, p: Any, H: Any, G: int | None = None, *,
                         exact: bool = False) -> np.ndarray:
    """The drift term ``(m_S − m_F)(p)·H`` of a registry advantage at solve rate(s) ``p``.

    Masses from :func:`rlvr_theory.masses.closed_form` (the paper's plug-in value), or with
    ``exact=True`` the finite-G expectation :func:`rlvr_theory.masses.exact` (``G`` needed).
    Zero for sign-balanced families; ``p(1−p)(1 − 1/δ)·H`` for AsymGRPO δ (000 Sec. 4.1).
    """
    m = _masses.exact(adv, p, G) if exact else _masses.closed_form(adv, p, G)
    return drift(H, m.m_S, m.m_F)


def one_step_table(z: Any, A: Any, etas: Iterable[float]) -> pd.DataFrame:
    """Predictions next to the exact one-step change, for one configuration ``z``, ``A`` ``[K]``.

    One row per (``eta``, ``step``, ``form``): ``step`` is ``"natural"`` (``Δz = ηA``) or
    ``"vanilla"`` (``Δz = ηπ⊙(A − E_π A)``); ``form`` is the first-order prediction compared
    (``"natural"``/``"fade"`` for the natural step, ``"vanilla"`` for the vanilla step);
    columns ``predicted``, ``exact``, ``rel_error = |predicted − exact|/|exact|``, ``E_A``, ``H``.
    """
    zz = _check_z(z)
    if zz.ndim != 1:
        raise ValueError(f"z must be one configuration [K], got shape {zz.shape}")
    a = _action_adv(A, zz.shape)
    e = np.asarray(list(etas), dtype=float)
    if e.ndim != 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError("etas must be a non-empty list of finite learning rates > 0")
    _, p, H = _parts(zz)
    rows = []
    for step, dz, forms in (("natural", natural_step(a, e), {"natural": natural_change, "fade": fade_change}),
                            ("vanilla", vanilla_step(zz, a, e), {"vanilla": vanilla_change})):
        exact = exact_change(zz, dz)
        for form, fn in forms.items():
            pred = fn(zz, a, e)
            rows.append(pd.DataFrame({"eta": e, "step": step, "form": form, "predicted": pred, "exact": exact,
                                      "rel_error": np.abs(pred - exact) / np.abs(exact),
                                      "E_A": float(np.sum(p * a)), "H": float(H[0])}))
    return pd.concat(rows, ignore_index=True)
