"""Weight-estimation variance, gradient noise and update quality of difficulty weights.

FADE Sec. 4.3 (Eq. 9-10, Fig. 7) and App. 14 (Eq. 27-31, Table 8, App. 14.1).

A difficulty weight ``w(p)`` is the positive mass ``m_S(p)`` (or ``m_F``) of a registered
advantage (:mod:`rlvr_theory.advantages`): for Power α, ``w(p) = C·p(1−p)^α`` with the
optional peak normalisation ``C = (1+α)^(1+α)/(4α^α)`` of Eq. 27.  The weight is computed
at the *estimated* solve rate ``p̂ = X/G``, ``X ~ Binom(G, p)``, so it is noisy:

* delta method (Eq. 28): ``Var(w(p̂)) ≈ w'(p)²·p(1−p)/G``, with ``w'`` the sympy
  derivative of the registry's closed form (Eq. 29 for Power α, Eq. 30 the result);
* relative variance ``Var(w(p̂))/w(p)²`` (Eq. 31: ``[1−(1+α)p]²/(G p(1−p))`` for Power α);
* ``method="exact"``: the finite-G variance ``Σ_x Binom(x; G, p)·(w(x/G) − E w)²``,
  which the paper does not give and which shows where the delta method breaks (at the
  weight mode, where it predicts 0, and near ``p ∈ {0, 1}``).

Noise model of Eq. 9 (iid rollouts): the contrast of the mean success and failure score
gradients of one prompt has raw variance ``v0(p) = σ²/(G p(1−p))`` (``σ²`` the per-rollout
noise variance in units of the squared signal); the weighted per-prompt gradient
``w(p̂)·ĝ`` with ``E[ĝ] = s(p)`` has variance

* ``"eq9"``:  ``w²v0 + s²·Var(w)``  (Eq. 9 as printed);
* ``"app14"``: ``w²v0 + Var(w)·(s² + v0)`` — the exact variance of a product of independent
  factors, i.e. the penalty ``Var(w)/w²·(s² + v)`` of App. 14 (end);
* ``"none"``: ``w²v0`` (known weights, ``G = ∞`` for the weight).

Update quality (Eq. 10), the choice we made.  Eq. 10 is ambiguous: its left form has
``q = s²/Var(w(p̂))``, its right form ``s/Var(w(p̂)ĝ)``.  Both literal readings are
degenerate (they grow without bound as ``w → 0`` and ``s/Var`` is not invariant to the
units of the gradient).  We read the left form as the squared SNR "of the weighted
gradient", ``q(p, w) = (w s)²/Var(w(p̂)ĝ)``, and combine prompts as the squared SNR of the
summed update ``Σ_j w(p̂_j)ĝ_j`` over ``M`` prompts drawn from ``f``::

    Q(w) = M·(E_f[w s])² / E_f[Var(w(p̂)ĝ)]
         = N_eff × (E_f[w s]/E_f[w])² / (E_f[w² v_eff]/E_f[w²]),   N_eff = M(E w)²/E w².

This is Eq. 10's "effective count × per-sample quality" with a weighted per-sample quality;
for a point mass ``f`` it is ``M·q(p, w)``; it is invariant to the scale of ``w``; and by
Cauchy–Schwarz (``correction="none"``) it is maximised by ``w ∝ s/v0 ∝ s·p(1−p)``, which is
the paper's statement that flat signal gives ``w* ∝ p(1−p)``, i.e. α = 1 (Sec. 4.3).
``form="product"`` gives the literal ``N_eff × E_f[q(p, w)]`` instead; with known weights it
does not depend on ``w`` except through ``N_eff`` (maximised by a constant weight), which
is why it is not the default.

Signal-enrichment threshold (Table 8).  With iid noise and known weights, the weight that
maximises ``Q`` gives two prompts at ``p`` and ``p̄`` the weight ratio ``(s/v0)(p)/(s/v0)(p̄)``.
A weight ``w`` is "justified" at ``p`` when its own ratio ``w(p)/w(p̄)`` is not larger,
i.e. when ``s(p)/s(p̄) ≥ w(p)v0(p)/(w(p̄)v0(p̄))``; for Power α this is ``((1−p)/(1−p̄))^(α−1)``
— ``[2(1−p)]²`` for α = 3, p̄ = 1/2 (App. 14).  At the threshold, α = 3 is exactly the
Q-maximising Power α of the two-prompt batch ``{p, p̄}``.  At finite ``G`` the noise of
each prompt grows to ``v0·(1 + Var(w)/w²)`` (noise-dominated limit ``s² ≪ v0`` of "app14"),
which multiplies the threshold by ``(1 + ρ(p))/(1 + ρ(p̄))``, ``ρ`` the relative variance.

Sweet spot (App. 14.1): ``SNR²(p) ∝ s(p)²·p(1−p)`` with ``s = e^(−cp)`` peaks at
``p*(c) = 1/((1+c) + sqrt(1+c²))``; the Power α with its mode ``1/(1+α)`` there is
``α = 1/p* − 1``; the α that maximises ``Q`` over a uniform ``f`` is
:func:`optimal_alpha` (without and with the weight-estimation correction).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_plumbing import checks

from . import advantages as _adv
from . import masses as _masses
from .advantages import Advantage

#: sympy, imported on first use (see :class:`rlvr_theory.advantages._LazySympy`); pandas and scipy are
#: imported inside the functions that use them
sp = _adv.sp
_NUMPY = _masses._NUMPY  # lambdify's modules (see rlvr_theory.masses)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "weight",
    "weight_derivative",
    "weight_variance",
    "relative_weight_variance",
    "raw_noise",
    "update_noise",
    "kish_neff",
    "update_quality",
    "enrichment_threshold",
    "enrichment_table",
    "sweet_spot",
    "alpha_for_mode",
    "optimal_alpha",
    "sweet_spot_table",
]

Signal = float | np.ndarray | Callable[[np.ndarray], Any]
_CORRECTIONS = ("none", "eq9", "app14")
_WHICH = ("m_S", "m_F")
_METHODS = ("delta", "exact")
_FORMS = ("batch", "product")


# ------------------------------------------------------------------ checks
def _open_p(p: Any) -> np.ndarray:
    """Solve rates in the open interval (0, 1): the noise ``v0 ∝ 1/(p(1−p))`` is infinite at the ends."""
    return checks.array("p", p, low=0, high=1, low_open=True, high_open=True)


def _signal(signal: Signal, p: np.ndarray) -> np.ndarray:
    """s(p) as an array of p's shape: a number, an array broadcastable to p, or a callable."""
    s = checks.array("signal", signal(p) if callable(signal) else signal)
    try:
        return np.broadcast_to(s, p.shape).astype(float)
    except ValueError:
        raise ValueError(f"signal must be a number, an array broadcastable to p's shape {p.shape}, "
                         "or a callable p -> s(p)") from None


def _distribution(p: Any, density: Any, M: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """(p, prob, M): samples (density None, prob = 1/n, M defaults to n) or a grid with
    density weights (normalised; M required)."""
    pa = checks.array("p", p, nonempty=True).ravel()
    if density is None:
        prob = np.full(pa.size, 1.0 / pa.size)
        M = pa.size if M is None else M
    else:
        d = checks.array("density", density, low=0).ravel()
        try:
            prob = np.broadcast_to(d, pa.shape).astype(float)
        except ValueError:
            raise ValueError(f"density must be an array of p's size {pa.size}") from None
        if prob.sum() <= 0:
            raise ValueError("density must not be all zero")
        prob = prob / prob.sum()
        if M is None:
            raise ValueError("M is required with density: the number of prompts in the batch, a number > 0")
    return pa, prob, checks.number("M", M, low=0, low_open=True)


# ------------------------------------------------------------- the weights
@functools.lru_cache(maxsize=512)
def _weight_sym(adv: Advantage, G: int | None, which: str) -> tuple[sp.Expr, sp.Expr, Callable, Callable]:
    """(w', w'²·p(1−p), and both lambdified) from the registry's closed form."""
    exprs = _masses.lambdified(adv, G)[2]
    w = exprs[0 if which == "m_S" else 1]
    dw = sp.diff(w, _adv.p)
    # jumps of piecewise closed forms (quantile, A-GRAE's min): derivative away from the jump
    dw = dw.replace(sp.DiracDelta, lambda *a: sp.Integer(0))
    if dw.has(sp.Derivative, sp.Subs):  # pragma: no cover - no registered family hits this
        raise ValueError(f"adv: sympy cannot differentiate the closed form of {adv!r}")
    var_pq = dw**2 * _adv.p * (1 - _adv.p)
    return dw, var_pq, sp.lambdify(_adv.p, dw, _NUMPY), sp.lambdify(_adv.p, var_pq, _NUMPY)


@functools.lru_cache(maxsize=4096)
def _limit(expr: sp.Expr, at: float) -> float:
    """One-sided limit of ``expr`` at ``at`` from inside (0, 1); evaluation just inside if
    sympy gives up."""
    # approach through a positive symbol t: p = at + t or at − t (sympy's limit in the
    # nonnegative symbol p itself returns +oo for GRPO's w' at p -> 1-, the wrong sign)
    t = sp.Symbol("t", positive=True)
    sign = 1 if at < 0.5 else -1
    try:
        val = complex(sp.limit(expr.subs(_adv.p, sp.nsimplify(at) + sign * t), t, 0, "+"))
        if val.imag == 0:
            return val.real
    except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gave up
        pass
    inside = at + sign * 1e-12
    return float(sp.lambdify(_adv.p, expr, _NUMPY)(inside))  # pragma: no cover


def _evaluate(fn: Callable, expr: sp.Expr, p: np.ndarray) -> np.ndarray:
    """``fn(p)`` with non-finite entries (ends of [0, 1], 0·inf) replaced by sympy limits."""
    with np.errstate(all="ignore"):
        out = np.broadcast_to(np.asarray(fn(p), dtype=float), p.shape).copy()
    bad = ~np.isfinite(out)
    for val in np.unique(p[bad]):
        out[bad & (p == val)] = _limit(expr, float(val))
    return out


def weight(adv: Advantage | str, p: Any, G: int | None = None, *, which: str = "m_S") -> np.ndarray:
    """The difficulty weight ``w(p)``: the closed-form mass ``m_S(p)`` (or ``m_F``) of ``adv``.

    Parameters
    ----------
    adv : Advantage or str
        A registered advantage; for Power α use
        ``advantages.get("power_alpha", alpha=a, normalize=True)``, whose weight is
        ``C·p(1−p)^α`` with ``C = (1+α)^(1+α)/(4α^α)`` (FADE Eq. 27).
    p : array_like
        Solve rates in [0, 1].
    G : int, optional
        Group size, only where the closed form depends on it (``rloo``, ``softmax``, ...).
    which : {"m_S", "m_F"}
        The mass used as weight (equal for sign-balanced families).

    Returns
    -------
    ndarray of ``p``'s shape.  Source: FADE Sec. 4.3, App. 14 Eq. 27.
    """
    m = _masses.closed_form(adv, p, G)
    return m.m_S if checks.choice("which", which, _WHICH) == "m_S" else m.m_F


def weight_derivative(adv: Advantage | str, p: Any, G: int | None = None, *, which: str = "m_S") -> np.ndarray:
    """``w'(p)``, the sympy derivative of the registry's closed form, lambdified and cached.

    For Power α it is ``C(1−p)^(α−1)[1 − (1+α)p]`` (FADE Eq. 29), zero at the weight
    mode ``1/(1+α)``.  At the ends of [0, 1] the one-sided limit is returned (``±inf`` where
    the weight has a vertical tangent, e.g. GRPO's ``sqrt(p(1−p))``).  Piecewise forms are
    differentiated away from their jumps.  Parameters as in :func:`weight`.
    """
    adv = _masses.as_advantage(adv)
    pa = _masses.check_p(p)
    G = _masses.check_group_size(G, adv, required=False)
    dw, _, f_dw, _ = _weight_sym(adv, G, checks.choice("which", which, _WHICH))
    return _evaluate(f_dw, dw, pa)


def weight_variance(adv: Advantage | str, p: Any, G: int, *, which: str = "m_S",
                    method: str = "delta") -> np.ndarray:
    """Variance of the weight at the estimated solve rate, ``Var(w(p̂))``, ``p̂ = X/G``.

    Parameters
    ----------
    adv, p, which
        As in :func:`weight`; ``p`` in [0, 1].
    G : int
        Number of rollouts used to estimate ``p`` (>= 1, and >= the family's minimum).
    method : {"delta", "exact"}
        ``"delta"``: ``w'(p)²·p(1−p)/G`` (FADE Eq. 28; Eq. 30 for Power α:
        ``C²p(1−p)^(2α−1)[1−(1+α)p]²/G``), with the one-sided limit at ``p ∈ {0, 1}``.
        ``"exact"``: ``Σ_x Binom(x; G, p)·(w(x/G) − E[w(p̂)])²`` with ``w`` the closed form
        (beyond the paper).  The two agree as ``G → ∞`` away from the weight mode (relative
        error O(1/G)); at the mode the delta method gives 0 while the exact variance is
        O(1/G²); at ``p ∈ {0, 1}`` the exact variance is 0.

    Returns
    -------
    ndarray of ``p``'s shape, >= 0.

    Examples
    --------
    >>> from rlvr_theory import advantages, variance
    >>> adv = advantages.get("power_alpha", alpha=3.0, normalize=True)
    >>> variance.weight_variance(adv, [0.25, 0.5], G=16)  # 0 at the weight mode 1/(1+alpha)
    array([0.        , 0.00548697])
    >>> variance.weight_variance(adv, [0.25, 0.5], G=16, method="exact")
    array([0.00168214, 0.0038221 ])
    """
    adv = _masses.as_advantage(adv)
    pa = _masses.check_p(p)
    G = _masses.check_group_size(G, adv)
    which = checks.choice("which", which, _WHICH)
    if checks.choice("method", method, _METHODS) == "delta":
        _, var_pq, _, f_var = _weight_sym(adv, G, which)
        return np.maximum(_evaluate(f_var, var_pq, pa), 0.0) / G
    _masses.check_memory(G, pa.size, what="the exact weight variance")  # before the O(G) arrays
    return _exact_variance(weight(adv, np.arange(G + 1) / G, G, which=which), pa)


def _exact_variance(w_x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Σ_x Binom(x; G, p)(w_x − mean)², w_x = w(x/G) for x = 0..G (centred: no cancellation)."""
    G = w_x.shape[-1] - 1
    flat = p.ravel()
    out = np.empty(flat.shape)
    step = max(1, 2**22 // (G + 1))  # p in chunks: O(G) memory per p, 32 MiB per array at most
    for lo in range(0, flat.size, step):
        pmf = _masses.binom_pmf(flat[lo : lo + step], G)
        mean = pmf @ w_x
        out[lo : lo + step] = np.einsum("px,px->p", pmf, (w_x[None, :] - mean[:, None]) ** 2)
    return out.reshape(p.shape)


def relative_weight_variance(adv: Advantage | str, p: Any, G: int, *, which: str = "m_S",
                             method: str = "delta") -> np.ndarray:
    """Relative variance (squared coefficient of variation) ``Var(w(p̂))/w(p)²``.

    For Power α and ``method="delta"`` it is ``[1 − (1+α)p]²/(G p(1−p))``, independent of
    ``C`` (FADE Eq. 31): zero at the weight mode ``1/(1+α)``, growing quadratically in
    α away from it.  Where ``w(p) = 0`` the result is ``inf`` if the variance is positive or
    ``p ∈ {0, 1}`` (the limit from inside for weights that vanish there, e.g. Eq. 31), and 0
    at an interior ``p`` where weight and variance both vanish (a weight that is locally
    zero, e.g. MC-GRPO's ``m_S`` above 1/2 with the delta method).  A weight that is
    identically zero (GRPO-N's ``m_S``) is refused.  Parameters as in :func:`weight_variance`.

    Examples
    --------
    >>> from rlvr_theory import advantages, variance
    >>> adv = advantages.get("power_alpha", alpha=3.0, normalize=True)
    >>> variance.relative_weight_variance(adv, [0.1, 0.25, 0.5], G=16)  # [1 - 4p]**2 / (16 p(1 - p))
    array([0.25, 0.  , 0.25])
    """
    adv = _masses.as_advantage(adv)
    which = checks.choice("which", which, _WHICH)
    pa = _masses.check_p(p)
    G = _masses.check_group_size(G, adv)
    if _masses.lambdified(adv, G)[2][0 if which == "m_S" else 1].is_zero:
        raise ValueError(f"adv: the weight {which} of {adv!r} is identically zero; "
                         "its relative variance is undefined")
    var = weight_variance(adv, pa, G, which=which, method=method)
    w = weight(adv, pa, G, which=which)
    out = np.zeros(np.shape(var))
    nz = w != 0
    with np.errstate(over="ignore"):
        out[nz] = (np.sqrt(var[nz]) / np.abs(w[nz])) ** 2  # no underflow of w² for tiny w
    out[~nz & ((var > 0) | (pa == 0) | (pa == 1))] = np.inf
    return out


# ---------------------------------------------------------------- the noise
def raw_noise(p: Any, G: int, *, sigma2: float = 1.0) -> np.ndarray:
    """Raw per-prompt gradient variance ``v0(p) = σ²/(G p(1−p))`` (FADE Eq. 9).

    The variance of the contrast ``∇̄_S − ∇̄_F`` of the mean score gradients of ``Gp``
    successes and ``G(1−p)`` failures with iid per-rollout noise of variance ``σ²``:
    ``σ²(1/(Gp) + 1/(G(1−p)))``.  Blows up when successes or failures are rare; ``inf``
    at ``p ∈ {0, 1}``.  ``p`` in [0, 1], ``G >= 1``, ``sigma2 > 0``.
    """
    pa = _masses.check_p(p)
    G = _masses.check_group_size(G)
    sigma2 = checks.number("sigma2", sigma2, low=0, low_open=True)
    with np.errstate(divide="ignore"):
        return sigma2 / (G * pa * (1.0 - pa))


def _noise(w: np.ndarray, var_w: np.ndarray, s: np.ndarray, v0: np.ndarray, correction: str) -> np.ndarray:
    """Var(w(p̂)ĝ) from its parts (see :func:`update_noise`)."""
    out = w**2 * v0
    if correction == "eq9":
        out = out + s**2 * var_w
    elif correction == "app14":
        out = out + var_w * (s**2 + v0)
    return out


def update_noise(adv: Advantage | str, p: Any, G: int, signal: Signal, *, sigma2: float = 1.0,
                 correction: str = "eq9", which: str = "m_S", method: str = "delta") -> np.ndarray:
    """Total per-update noise ``Var(w(p̂)ĝ)`` of one prompt (FADE Eq. 9).

    Parameters
    ----------
    adv, which
        The weight, as in :func:`weight`.
    p : array_like
        Solve rates in the open interval (0, 1).
    G : int
        Rollouts per prompt (raw noise ``v0 = σ²/(G p(1−p))`` and weight estimation).
    signal : float, array or callable
        ``s(p) = E[ĝ]``, the per-prompt gradient signal (same units as ``sqrt(σ²)``).
    sigma2 : float
        Per-rollout noise variance ``σ² > 0``.
    correction : {"eq9", "app14", "none"}
        ``"eq9"``: ``w²v0 + s²Var(w)`` (Eq. 9, delta method);
        ``"app14"``: ``w²v0 + Var(w)(s² + v0)``, the exact variance of the product of
        independent ``w(p̂)`` and ``ĝ`` given ``Var(w)`` (the penalty of App. 14);
        ``"none"``: ``w²v0`` (weights known).
    method : {"delta", "exact"}
        How ``Var(w(p̂))`` is computed (:func:`weight_variance`).
    """
    adv = _masses.as_advantage(adv)
    pa = _open_p(p)
    G = _masses.check_group_size(G, adv)
    correction = checks.choice("correction", correction, _CORRECTIONS)
    s = _signal(signal, pa)
    v0 = raw_noise(pa, G, sigma2=sigma2)
    var_w = weight_variance(adv, pa, G, which=which, method=method)
    return _noise(weight(adv, pa, G, which=which), var_w, s, v0, correction)


def kish_neff(adv: Advantage | str, p: Any, *, density: Any = None, M: float | None = None,
              G: int | None = None, which: str = "m_S") -> float:
    """Kish's effective sample size ``N_eff = M·(E_f[w])²/E_f[w²] <= M`` (FADE Eq. 10).

    Parameters
    ----------
    adv, G, which
        The weight ``w(p)``, as in :func:`weight`.
    p : array_like
        The difficulty distribution ``f``: samples of the solve rate (``density=None``) or a
        grid in [0, 1] with ``density``.
    density : array_like, optional
        Non-negative weights of the grid points (density times quadrature weight; normalised
        here).
    M : float, optional
        Number of prompts in the batch; defaults to the number of samples, required with
        ``density``.

    Returns
    -------
    float in ``[0, M]``; ``M`` for a constant weight; 0 if the weight vanishes on ``f``.

    Examples
    --------
    >>> from rlvr_theory import advantages, variance
    >>> p = [0.1, 0.25, 0.5, 0.9]  # four prompts
    >>> variance.kish_neff(advantages.get("power_alpha", alpha=3.0), p)  # peaked weight: fewer effective prompts
    2.873028
    >>> variance.kish_neff("grpo", p)
    3.805875
    """
    pa, prob, M = _distribution(p, density, M)
    w = weight(adv, pa, G, which=which)
    m2 = prob @ w**2
    return 0.0 if m2 == 0 else float(M * (prob @ w) ** 2 / m2)


def _quality(w, var_w, s, v0, prob, M, correction, form) -> float:
    noise = _noise(w, var_w, s, v0, correction)
    if form == "batch":
        den = prob @ noise
        return 0.0 if den == 0 else float(M * (prob @ (w * s)) ** 2 / den)
    m2 = prob @ w**2
    neff = 0.0 if m2 == 0 else M * (prob @ w) ** 2 / m2
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(noise > 0, (w * s) ** 2 / noise, 0.0)
    # a weight that is exactly zero without noise: q is the known-weight SNR² s²/v0
    q = np.where((w == 0) & (var_w == 0), s**2 / v0, q)
    return float(neff * (prob @ q))


def update_quality(adv: Advantage | str, p: Any, G: int, signal: Signal, *, density: Any = None,
                   M: float | None = None, sigma2: float = 1.0, correction: str = "app14",
                   method: str = "delta", form: str = "batch", which: str = "m_S") -> float:
    """Update quality ``Q(w)`` over a difficulty distribution (FADE Eq. 10).

    ``form="batch"`` (default, our reading of Eq. 10; see the module docstring):
    ``Q = M·(E_f[w s])²/E_f[Var(w(p̂)ĝ)] = N_eff × (E_f[ws]/E_f[w])²/(E_f[w²v_eff]/E_f[w²])``,
    the squared SNR of the summed update ``Σ_j w(p̂_j)ĝ_j`` of ``M`` prompts, invariant to the
    scale of ``w``, maximised by ``w ∝ s/v0`` when ``correction="none"``.
    ``form="product"``: the literal ``N_eff × E_f[q(p, w)]``, ``q = (w s)²/Var(w(p̂)ĝ)``.

    Parameters
    ----------
    adv, which
        The weight (:func:`weight`).
    p, density, M
        The difficulty distribution and batch size (:func:`kish_neff`); ``p`` in (0, 1).
    G, signal, sigma2, correction, method
        The noise model (:func:`update_noise`); default ``"app14"``, the penalty
        ``Var(w)/w²·(s² + v)`` of App. 14.
    """
    adv = _masses.as_advantage(adv)
    form = checks.choice("form", form, _FORMS)
    pa, prob, M = _distribution(p, density, M)
    pa = _open_p(pa)
    G = _masses.check_group_size(G, adv)
    correction = checks.choice("correction", correction, _CORRECTIONS)
    s = _signal(signal, pa)
    v0 = raw_noise(pa, G, sigma2=sigma2)
    w = weight(adv, pa, G, which=which)
    var_w = weight_variance(adv, pa, G, which=which, method=method)
    return _quality(w, var_w, s, v0, prob, M, correction, form)


# ------------------------------------------------------- Table 8 threshold
def enrichment_threshold(adv: Advantage | str, p: Any, *, p_bar: float = 0.5, G: int | None = None,
                         which: str = "m_S") -> np.ndarray:
    """Minimum signal enrichment ``s(p)/s(p̄)`` for which the weight ``w`` is justified.

    With iid rollout noise (``v0 ∝ 1/(p(1−p))``) the Q-optimal weight is ``∝ s/v0``, so
    ``w`` does not over-weight ``p`` relative to ``p̄`` iff
    ``s(p)/s(p̄) >= w(p)v0(p)/(w(p̄)v0(p̄))``.  For Power α (any ``C``) this is
    ``((1−p)/(1−p̄))^(α−1)``: ``[2(1−p)]²`` for α = 3 at ``p̄ = 1/2`` (FADE App. 14,
    Table 8; 2.25 at α = 3's mode p = 0.25, Sec. 4.3).  At the threshold α = 3 is the
    Q-maximising Power α for the batch ``{p, p̄}`` (tested).

    ``G=None`` is the paper's ``G = ∞``.  With a finite ``G`` the weights are estimated and
    each prompt's noise becomes ``v0·(1 + ρ)``, ``ρ`` the relative weight variance
    (:func:`relative_weight_variance`; noise-dominated limit of ``"app14"``): the threshold
    is multiplied by ``(1 + ρ(p))/(1 + ρ(p̄))`` (our derivation; the paper only states that
    the multipliers "ease by <= 30%").

    ``p`` and ``p_bar`` in (0, 1); ``w(p̄)`` must be > 0.
    """
    adv = _masses.as_advantage(adv)
    pa = _open_p(p)
    pb = checks.number("p_bar", p_bar, low=0, high=1, low_open=True, high_open=True)
    w = weight(adv, pa, G, which=which)
    wb = float(weight(adv, pb, G, which=which))
    if wb <= 0:
        raise ValueError(f"p_bar: the weight of {adv!r} must be > 0 at p_bar = {pb:g}, got {wb:g}")
    out = (w / (pa * (1 - pa))) / (wb / (pb * (1 - pb)))
    if G is not None:
        rho = relative_weight_variance(adv, pa, G, which=which)
        rho_b = float(relative_weight_variance(adv, pb, G, which=which))
        out = out * (1 + rho) / (1 + rho_b)
    return out


def enrichment_table(p: Sequence[float] = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5), *,
                     alpha: float = 3.0, p_bar: float = 0.5, G_values: Sequence[int] = (8, 16)) -> pd.DataFrame:
    """FADE Table 8 regenerated: minimum ``s(p)/s(p̄)`` for Power α to beat GRPO.

    Long form, one row per ``(p, G)``: ``p``, ``p_bar``, ``alpha``, ``G`` (``inf`` for the
    paper's ``G = ∞``), ``threshold`` (:func:`enrichment_threshold`), ``threshold_inf`` and
    ``easing = 1 − threshold/threshold_inf`` (> 0 where finite ``G`` lowers the multiplier).
    """
    import pandas as pd

    adv = _adv.get("power_alpha", alpha=alpha, normalize=True)
    pa = np.atleast_1d(_open_p(p)).ravel()
    base = enrichment_threshold(adv, pa, p_bar=p_bar)
    frames = []
    for G in (None, *G_values):
        thr = base if G is None else enrichment_threshold(adv, pa, p_bar=p_bar, G=G)
        frames.append(pd.DataFrame({"p": pa, "p_bar": p_bar, "alpha": float(alpha),
                                    "G": np.inf if G is None else float(G), "threshold": thr,
                                    "threshold_inf": base, "easing": 1.0 - thr / base}))
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------ App. 14.1 sweet spot
def sweet_spot(c: Any) -> np.ndarray:
    """Maximiser of ``SNR²(p) ∝ s(p)²·p(1−p)`` for ``s(p) = e^(−cp)`` (FADE App. 14.1).

    Setting the derivative of ``−2cp + log p + log(1−p)`` to zero gives
    ``2c p² − 2(1+c)p + 1 = 0``, whose root in (0, 1) is
    ``p*(c) = 1/((1+c) + sqrt(1+c²))`` (stable form; 1/2 for flat signal ``c = 0``,
    ``(3 − √5)/2 = 0.382`` at c = 0.5, ``1 − 1/√2 = 0.293`` at c = 1).  ``c`` any finite real.
    """
    ca = checks.array("c", c)
    return 1.0 / ((1.0 + ca) + np.sqrt(1.0 + ca**2))


def alpha_for_mode(p: Any) -> np.ndarray:
    """The Power α whose weight ``p(1−p)^α`` peaks at ``p``: ``α = 1/p − 1`` (mode ``1/(1+α)``,
    FADE Sec. 4.3, App. 14).  ``p`` in (0, 1]."""
    pa = checks.array("p", p, low=0, high=1, low_open=True)
    return 1.0 / pa - 1.0


@functools.lru_cache(maxsize=8)
def _power_alpha_parametric() -> tuple[Callable, Callable]:
    """w(p, α) and w'(p, α) of the registry's Power α closed form with α left symbolic
    (C = 1: Q is invariant to the weight's scale)."""
    a = sp.Symbol("alpha", positive=True)  # the symbol closed_form keeps for alpha
    m_s, _ = _adv.get("power_alpha", normalize=False).closed_form(symbolic=("alpha",))
    return sp.lambdify((_adv.p, a), m_s, _NUMPY), sp.lambdify((_adv.p, a), sp.diff(m_s, _adv.p), _NUMPY)


def optimal_alpha(signal: Signal, G: int, *, correction: str = "app14", sigma2: float = 1.0,
                  p: Any = None, density: Any = None, method: str = "delta",
                  bounds: tuple[float, float] = (0.5, 10.0), xatol: float = 1e-6) -> float:
    """The Power α maximising the update quality ``Q`` (:func:`update_quality`, batch form).

    Parameters
    ----------
    signal : float, array or callable
        ``s(p)``; App. 14.1 uses ``s(p) = e^(−cp)``.
    G : int
        Rollouts per prompt.
    correction : {"app14", "eq9", "none"}
        ``"none"``: known weights (the result then does not depend on ``G`` or ``sigma2``);
        ``"app14"``: with the weight-estimation penalty ``Var(w)/w²·(s² + v0)`` of App. 14.
    sigma2 : float
        Per-rollout noise variance in units of ``s²`` (``v0 = σ²/(G p(1−p))``); the paper
        writes ``v0 ∝ 1/(G p(1−p))`` and ``s(0) = 1``, i.e. ``σ² = 1``.
    p, density
        The difficulty distribution; default the uniform ``f`` on (0, 1) as a 2000-point
        midpoint grid.  Samples or grid points must lie in (0, 1).
    method : {"delta", "exact"}
        ``Var(w(p̂))`` by the delta method (the paper) or the exact binomial sum.
    bounds : (float, float)
        Search interval for α, with ``bounds[0] >= 0``.  Under a uniform ``f`` the
        weight-noise term diverges near p = 1 for α <= 1/2, hence the default lower bound.
    xatol : float
        Absolute tolerance in α.

    Returns
    -------
    float: the maximiser (bounded scalar search; Q is unimodal in α in the cases tested).
    Source: FADE Sec. 4.3, App. 14, App. 14.1.
    """
    G = _masses.check_group_size(G)
    correction = checks.choice("correction", correction, _CORRECTIONS)
    method = checks.choice("method", method, _METHODS)
    sigma2 = checks.number("sigma2", sigma2, low=0, low_open=True)
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be a pair (low, high), got {bounds!r}") from None
    lo = checks.number("bounds[0]", lo, low=0)
    hi = checks.number("bounds[1]", hi, low=lo, low_open=True)
    xatol = checks.number("xatol", xatol, low=0, low_open=True)
    if p is None:
        if density is not None:
            raise ValueError("density needs its grid p")
        p = (np.arange(2000) + 0.5) / 2000
    pa, prob, _ = _distribution(p, density, 1.0)
    pa = _open_p(pa)
    s = _signal(signal, pa)
    v0 = raw_noise(pa, G, sigma2=sigma2)
    f_w, f_dw = _power_alpha_parametric()
    x = np.arange(G + 1) / G

    def neg_log_q(a: float) -> float:
        w = f_w(pa, a)
        if method == "delta":
            var_w = f_dw(pa, a) ** 2 * pa * (1 - pa) / G
        else:
            var_w = _exact_variance(np.asarray(f_w(x, a), dtype=float), pa)
        return -math.log(_quality(w, var_w, s, v0, prob, 1.0, correction, "batch"))

    from scipy.optimize import minimize_scalar

    res = minimize_scalar(neg_log_q, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    return float(res.x)


def sweet_spot_table(c: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0), G: Sequence[int] = (8, 16), *,
                     sigma2: float = 1.0, correction: str = "app14", method: str = "delta") -> pd.DataFrame:
    """FADE App. 14.1: sweet spot and α for ``s(p) = e^(−cp)`` over a uniform ``f``.

    One row per ``(c, G)``: ``c``, ``G``, ``p_star`` (:func:`sweet_spot`), ``alpha_mode``
    (``1/p* − 1``, the α whose weight mode sits at the sweet spot), ``alpha_known``
    (:func:`optimal_alpha` with known weights) and ``alpha_corrected`` (with the
    weight-estimation ``correction`` at this ``G``).

    The paper: "flat case peaks at p = 1/2; c ≈ 0.5–1 moves the sweet spot into [0.3, 0.5],
    with α ≈ 1.2–1.45 for known weights falling to ≈ 1.05–1.25 once the weight-estimation
    correction is included (G = 8–16)".
    """
    import pandas as pd

    cs = np.atleast_1d(np.asarray(c, dtype=float)).ravel()
    p_star = sweet_spot(cs)
    rows = []
    for ci, ps in zip(cs, p_star):
        sig = functools.partial(_exp_signal, c=float(ci))
        known = optimal_alpha(sig, 16, correction="none")
        for g in G:
            rows.append({"c": float(ci), "G": int(_masses.check_group_size(g)), "p_star": float(ps),
                         "alpha_mode": float(alpha_for_mode(ps)), "alpha_known": known,
                         "alpha_corrected": optimal_alpha(sig, g, correction=correction, sigma2=sigma2,
                                                          method=method)})
    return pd.DataFrame(rows)


def _exp_signal(p: np.ndarray, c: float) -> np.ndarray:
    return np.exp(-c * p)
