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

FADE Eq. 7 / Thm. 13.1 (Sec. 4.1, App. 13) states
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

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from rlvr_plumbing import checks

from . import masses as _masses
from .advantages import Advantage
from .categorical import check_like, log_partition_change, log_softmax

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
    """Advantages per action: a finite array ``[..., K]`` over the actions of ``shape``."""
    return check_like("A", A, shape)


def _eta(eta: Any) -> np.ndarray:
    """The learning rate (a number or an array over the batch axes) with a trailing axis."""
    return checks.array("eta", eta)[..., None]


def entropy(z: Any) -> np.ndarray:
    """Entropy ``H = −Σ_a π_a log π_a`` (nats) of ``π = softmax(z)`` along the last axis."""
    return _parts(z)[2][..., 0]


def entropy_gradient(z: Any) -> np.ndarray:
    """``∂H/∂z_i = −π_i(log π_i + H)`` (FADE App. 13 Eq. 22 in logit coordinates,
    with ``∇_z log π_a = e_a − π``).  Sums to 0 over the actions."""
    logp, p, H = _parts(z)
    return -p * (logp + H)


def cov_pi(z: Any, X: Any, Y: Any) -> np.ndarray:
    """``Cov_π(X, Y) = Σ_a π_a(X_a − E_π X)(Y_a − E_π Y)`` under ``π = softmax(z)``.

    ``X``, ``Y`` are arrays ``[..., K]`` over the actions; returns ``[...]``.
    """
    _, p, _ = _parts(z)
    x = check_like("X", X, p.shape)
    y = check_like("Y", Y, p.shape)
    xc = x - np.sum(p * x, axis=-1, keepdims=True)
    yc = y - np.sum(p * y, axis=-1, keepdims=True)
    return np.sum(p * xc * yc, axis=-1)


def natural_step(A: Any, eta: Any) -> np.ndarray:
    """Natural-gradient step of ``J = E_π[A]`` for a softmax: ``Δz = η·A`` (module docstring:
    the Fisher ``diag(π) − ππᵀ`` maps ``A + c·1`` to ``∂J/∂z`` for every ``c``)."""
    return _eta(eta) * checks.array("A", A, min_ndim=1)


def vanilla_step(z: Any, A: Any, eta: Any) -> np.ndarray:
    """Vanilla (logit-space) gradient step ``Δz = η·∂E_π[A]/∂z = η·π⊙(A − E_π A)``
    (Two-Stage Theorem 1 is its expectation form)."""
    _, p, _ = _parts(z)
    a = _action_adv(A, p.shape)
    return _eta(eta) * p * (a - np.sum(p * a, axis=-1, keepdims=True))


def first_order_change(z: Any, dz: Any) -> np.ndarray:
    """``ΔH ≈ ∇_z H·Δz = −Σ_i π_i(log π_i + H)Δz_i = −Cov_π(log π, Δz)`` for any logit step.

    Examples
    --------
    >>> from rlvr_theory import entropy
    >>> z, A = np.log([0.7, 0.2, 0.1]), np.array([1.0, -0.5, -0.5])
    >>> dz = entropy.natural_step(A, 0.01)
    >>> float(entropy.first_order_change(z, dz))
    -0.004674008
    >>> float(entropy.exact_change(z, dz))  # the first-order error is O(eta**2)
    -0.004683471
    """
    logp, p, H = _parts(z)
    d = check_like("dz", dz, logp.shape)
    return -np.sum(p * (logp + H) * d, axis=-1)


def exact_change(z: Any, dz: Any) -> np.ndarray:
    """Exact ``H(softmax(z + Δz)) − H(softmax(z))``, free of cancellation.

    With ``Δlse = log Σ_j π_j e^{Δz_j}``, ``π'_i = π_i e^{Δz_i − Δlse}``:
    ``ΔH = Δlse − Σ_i π'_iΔz_i − Σ_i (π'_i − π_i) log π_i`` and
    ``π'_i − π_i = π_i·expm1(Δz_i − Δlse)``; every term is of the order of the step, so the
    result keeps its relative precision for tiny steps (the reference of the tests).
    """
    logp, p, _ = _parts(z)
    d = check_like("dz", dz, logp.shape)
    dl = log_partition_change(z, d)[..., None]
    dp = p * np.expm1(d - dl)
    return dl[..., 0] - np.sum((p + dp) * d, axis=-1) - np.sum(dp * logp, axis=-1)


def natural_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """First-order ``ΔH = −η·Cov_π(A, log π)`` of the natural step ``Δz = ηA``.

    Exact first order (module docstring); independent of ``E_π[A]``.  It is FADE
    Eq. 7 without the drift term, i.e. Eq. 7 for sign-balanced advantages.

    Examples
    --------
    >>> from rlvr_theory import entropy
    >>> z, A = np.log([0.7, 0.2, 0.1]), np.array([1.0, -0.5, -0.5])  # E_pi[A] = 0.55
    >>> float(entropy.natural_change(z, A, 0.01))
    -0.004674008
    >>> float(entropy.fade_change(z, A, 0.01))  # adds the drift eta * E_pi[A] * H
    -0.000264006
    """
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    return -checks.array("eta", eta) * np.sum(p * (logp + H) * a, axis=-1)


def vanilla_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """First-order ``ΔH = −η·Cov_π(log π, π⊙(A − E_π A))`` of the vanilla step
    ``Δz = η·π⊙(A − E_π A)``; ``= −η[Cov_π(log π, π·A) − E_π[A]·Cov_π(log π, π)]``
    (derivation ours; Cui et al. 2025's ``−η·Cov(log π, π·A)`` when ``E_π[A] = 0``)."""
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    ac = a - np.sum(p * a, axis=-1, keepdims=True)
    return -checks.array("eta", eta) * np.sum(p * (logp + H) * p * ac, axis=-1)


def fade_change(z: Any, A: Any, eta: Any) -> np.ndarray:
    """FADE Eq. 7 / Theorem 13.1 as the paper states it, per action:
    ``ΔH ≈ η[E_π[A]·H − Cov_π(A, log π)]`` (``E_π[A] = m_S − m_F``).

    Equals ``−η·E_π[A log π]``.  Not the first-order change of a softmax step when
    ``E_π[A] ≠ 0``: it exceeds :func:`natural_change` by ``η·E_π[A]·H`` (module docstring).
    """
    logp, p, H = _parts(z)
    a = _action_adv(A, p.shape)
    mean = np.sum(p * a, axis=-1)
    return checks.array("eta", eta) * (mean * H[..., 0] - np.sum(p * (logp + H) * a, axis=-1))


def fade_change_sampled(log_prob: Any, A: Any, H: Any, eta: Any) -> np.ndarray:
    """FADE Eq. 7 estimated from ``N`` rollouts: ``η[Ā·H − Ĉov(A, log π(a_j))]``.

    ``log_prob`` and ``A`` have shape ``[..., N]`` (log-probability and advantage of each
    sampled action), ``H`` the policy entropy over the batch axes.  ``Ā`` is the sample mean
    (an estimate of ``m_S − m_F``) and ``Ĉov`` the unbiased (``ddof = 1``) sample covariance,
    so for i.i.d. draws with ``A_j = A(a_j)`` this is unbiased for :func:`fade_change`.
    ``N >= 2``.  Without the drift, ``−η·Ĉov`` estimates :func:`natural_change`.
    """
    lp = checks.array("log_prob", log_prob, min_ndim=1, high=0)
    if lp.shape[-1] < 2:
        raise ValueError(f"log_prob must have N >= 2 draws on its last axis, got shape {lp.shape}")
    a = check_like("A", A, lp.shape)
    h = checks.array("H", H, low=0)
    lp, a = np.broadcast_arrays(lp, a)
    N = lp.shape[-1]
    cov = np.sum((a - a.mean(-1, keepdims=True)) * (lp - lp.mean(-1, keepdims=True)), axis=-1) / (N - 1)
    return checks.array("eta", eta) * (a.mean(-1) * h - cov)


def drift(H: Any, m_S: Any, m_F: Any) -> np.ndarray:
    """FADE Eq. 7 drift term ``(m_S − m_F)·H`` (per unit learning rate)."""
    h = checks.array("H", H, low=0)
    return (checks.array("m_S", m_S) - checks.array("m_F", m_F)) * h


def drift_from_advantage(adv: Advantage | str, p: Any, H: Any, G: int | None = None, *,
                         exact: bool = False) -> np.ndarray:
    """The drift term ``(m_S − m_F)(p)·H`` of a registry advantage at solve rate(s) ``p``.

    Masses from :func:`rlvr_theory.masses.closed_form` (the paper's plug-in value), or with
    ``exact=True`` the finite-G expectation :func:`rlvr_theory.masses.exact` (``G`` needed).
    Zero for sign-balanced families; ``p(1−p)(1 − 1/δ)·H`` for AsymGRPO δ (FADE Sec. 4.1).
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
    zz = checks.array("z", z, ndim=1)
    a = _action_adv(A, zz.shape)
    e = checks.array("etas", list(etas), ndim=1, nonempty=True, low=0, low_open=True)
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
