"""pass@k: unbiased estimation, population scaling laws, solve-rate fits and significance tests.

Notation: a problem is answered ``n`` times, ``c`` answers are correct; its solve rate is
``p``; ``pass@k = 1 − (1 − p)^k`` and the *miss* is ``1 − pass@k``.  Over a set of problems
``pass@k`` is the mean over problems.

Estimation (Chen et al. 2021; F-GRPO App. H.4 Eq. 25; A-GRAE App. C.2):

* :func:`pass_at_k` — the unbiased estimator ``1 − C(n−c, k)/C(n, k)`` in the stable
  product form ``1 − Π_{i=n−c+1}^{n} (1 − k/i)``;
* :func:`pass_at_k_table` — per-problem values for several k (long-form DataFrame).

Population view (FADE App. 12):

* :func:`expected_pass_at_k` — ``E_p[1 − (1 − p)^k]`` for weighted samples of ``p`` or a
  scipy frozen distribution on [0, 1];
* :func:`beta_pass_at_k` — its closed form for ``p ~ Beta(a, b)`` (or a Beta mixture):
  ``E[(1 − p)^k] = B(a, b + k)/B(a, b)``;
* :func:`power_law_miss`, :func:`beta_power_law`, :func:`power_law_table` — the power-law
  regime of Theorem 12.1, ``1 − pass@k ≈ C·Γ(b)·k^{−b}`` for a density ``C·p^{b−1}`` at 0;
* :func:`rapid_decay_log_miss` — the rapidly decaying regime (leading Laplace exponent);
* :func:`shifted_power_law`, :func:`fit_shifted_power_law` — ``G(k) = exp(−a(k + k0)^{−b})``
  fitted by least squares (the paper's MSE);
* :func:`fit_beta_binomial`, :func:`fit_beta_mixture` — Beta-binomial and two-component
  Beta(-binomial) mixture fits of per-problem success counts (MLE or the paper's MSE).

Uncertainty (FADE App. 11.2; F-GRPO App. I):

* :func:`subsample_pass_at_k` — benchmark pass@k from random m-out-of-n subsets of answers;
* :func:`grouped_std` — FADE's standard deviation: groups of ``2k`` answers per problem;
* :func:`bootstrap_pass_at_k` — percentile bootstrap over problems;
* :func:`paired_subsampling_test` — F-GRPO's paired m-out-of-n subsampling test of
  ``pass@k(A) = pass@k(B)`` on the same problems, and :func:`rejection_rate` to measure
  its type-I error and power on synthetic data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import integrate, optimize, special

from rlvr_plumbing import checks

__all__ = [
    "pass_at_k",
    "pass_at_k_table",
    "expected_pass_at_k",
    "beta_pass_at_k",
    "power_law_miss",
    "beta_power_law",
    "power_law_table",
    "rapid_decay_log_miss",
    "shifted_power_law",
    "ShiftedPowerLaw",
    "fit_shifted_power_law",
    "BetaBinomialFit",
    "fit_beta_binomial",
    "BetaMixtureFit",
    "fit_beta_mixture",
    "subsample_pass_at_k",
    "grouped_std",
    "bootstrap_pass_at_k",
    "paired_subsampling_test",
    "rejection_rate",
]

# ------------------------------------------------------------------ validation
# Every check is rlvr_plumbing.checks (one policy: integral floats and numpy integers are
# integers, bool is not a number, NaN refused); these two only pick the scalar or the array
# form of a check.
_INT64_MAX = (1 << 63) - 1    # counts are int64: a larger one is refused by value, not overflowed


def _ints(name: str, x: Any, low: int, high: int | None = None) -> np.ndarray:
    """Integers in ``[low, high]``: a scalar or an array of them, as int64 (a value above
    2^63 − 1 is refused by value, never wrapped around)."""
    if x is None or np.isscalar(x):
        v = checks.integer(name, x, low=low, high=high)
        if v > _INT64_MAX:
            raise ValueError(f"{name} must be an integer <= 2^63 - 1 = {_INT64_MAX} (int64), got {v}")
        return np.asarray(v, dtype=np.int64)
    arr = checks.array(name, x, integer=True, low=low, high=high, nonempty=True)
    # float64 / uint64 arrays: compare with 2^63 exactly (2^63 − 1 rounds up to it in float64)
    big = arr >= 2.0 ** 63 if arr.dtype.kind == "f" else arr > np.uint64(_INT64_MAX) if arr.dtype.kind == "u" else None
    if big is not None and np.any(big):
        raise ValueError(f"{name} must contain only integers <= 2^63 - 1 = {_INT64_MAX} (int64), "
                         f"got {int(np.max(arr))}")
    return arr.astype(np.int64)


def _reals(name: str, x: Any, low: float | None = None, high: float | None = None, *,
           low_open: bool = False) -> np.ndarray:
    """Finite numbers in the range: a scalar or an array of them, as float64."""
    if x is None or np.isscalar(x):
        return np.asarray(checks.number(name, x, low, high, low_open=low_open))
    return checks.array(name, x, low=low, high=high, low_open=low_open, nonempty=True)


def _short(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 60 else s[:57] + "..."


def _ks(k: Any, high: np.ndarray | int, high_name: str) -> np.ndarray:
    ks = np.atleast_1d(_ints("k", k, 1))
    if ks.ndim != 1:
        raise ValueError(f"k must be an integer or a 1-D list of integers in [1, {high_name}]")
    if np.any(ks > np.min(high)):
        raise ValueError(f"k must be an integer in [1, {high_name}] with {high_name} = {int(np.min(high))}, "
                         f"got {int(ks.max())}")
    return ks


def _counts(successes: Any, n: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-problem (c, n) as 1-D int arrays of equal length, 0 <= c <= n."""
    c = _ints("successes", successes, 0)
    if c.ndim != 1:
        raise ValueError(f"successes must be a 1-D array (one count per problem), got shape {c.shape}")
    nn = _ints("n", n, 1)
    try:
        nn = np.broadcast_to(nn, c.shape).copy()
    except ValueError:
        raise ValueError(f"n must be a scalar or have one entry per problem ({c.size}), got shape {nn.shape}") from None
    if np.any(c > nn):
        i = int(np.argmax(c > nn))
        raise ValueError(f"successes must be integers in [0, n], got {c[i]} > n = {nn[i]} (problem {i})")
    return c, nn


# ------------------------------------------------------------- the estimator
@functools.lru_cache(maxsize=256)
def _log_miss_table(n: int, k: int, length: int) -> np.ndarray:
    """``log(C(n−c, k)/C(n, k))`` for c = 0..length by the product Π_{i=n−c+1}^{n} (1 − k/i).

    A cumulative sum of ``log1p(−k/i)`` terms that all have the same sign, so there is no
    cancellation (relative error <= c·eps); ``−inf`` once ``n − c < k``.  Only ``length``
    (<= n) factors are built, so a huge ``n`` with few successes costs nothing.
    """
    i = n - np.arange(length, dtype=float)  # the factor added when c grows from j to j+1
    terms = np.full(length, -np.inf)
    ok = i > k
    terms[ok] = np.log1p(-k / i[ok])
    out = np.concatenate([[0.0], np.cumsum(terms)])
    out.setflags(write=False)
    return out


def _pair_codes(u: np.ndarray, v: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Distinct pairs (u_i, v_i) and the index of each element's pair (1-D, overflow-free)."""
    uu, iu = np.unique(u, return_inverse=True)
    uv, iv = np.unique(v, return_inverse=True)
    codes, inv = np.unique(iu.ravel() * uv.size + iv.ravel(), return_inverse=True)
    pairs = [(int(uu[cd // uv.size]), int(uv[cd % uv.size])) for cd in codes]
    return pairs, inv.ravel()


def _log_miss(n: np.ndarray, c: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Vectorised ``log(C(n−c,k)/C(n,k))``: one table per distinct (n, k), gathered by c."""
    shape = np.broadcast_shapes(n.shape, c.shape, k.shape)
    n, c, k = (np.broadcast_to(a, shape).ravel() for a in (n, c, k))
    out = np.empty(n.size)
    keys, inv = _pair_codes(n, k)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(keys) + 1))
    for j, (nn, kk) in enumerate(keys):
        idx = order[bounds[j]:bounds[j + 1]]
        length = min(nn, 1 << int(c[idx].max()).bit_length())  # a power of 2 >= max c: reusable
        out[idx] = _log_miss_table(nn, kk, length)[c[idx]]
    return out.reshape(shape)


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike, *, complement: bool = False) -> np.ndarray:
    """Unbiased pass@k of one problem from ``n`` answers of which ``c`` are correct.

    .. math:: \\widehat{\\mathrm{pass@}k} = 1 − \\binom{n−c}{k}\\Big/\\binom{n}{k}
              = 1 − \\prod_{i=n−c+1}^{n} \\Bigl(1 − \\frac{k}{i}\\Bigr)

    Chen et al. (2021); F-GRPO App. H.4 Eq. 25; A-GRAE App. C.2.  The product
    is summed in log space, so both ``pass@k`` and, with ``complement=True``, the miss
    ``C(n−c,k)/C(n,k)`` keep full relative precision (no ``comb`` overflow at any ``n``;
    the cost grows with the largest ``c``, not with ``n``).

    Parameters
    ----------
    n, c, k : array_like of int
        Broadcast together.  ``n >= 1``, ``0 <= c <= n``, ``1 <= k <= n``.  Integer-valued
        floats are accepted.
    complement : bool
        Return ``1 − pass@k`` instead.

    Returns
    -------
    ndarray of float in [0, 1], the broadcast shape.  ``pass@k = 1`` exactly when
    ``n − c < k`` (every k-subset holds a correct answer).

    Examples
    --------
    10 answers, 3 correct: ``pass@k = 1 − C(7, k)/C(10, k)``.

    >>> pass_at_k(10, 3, [1, 2, 5])
    array([0.3       , 0.53333333, 0.91666667])
    >>> float(pass_at_k(10, 3, 8))            # n − c = 7 < 8: every 8-subset holds a correct one
    1.0
    >>> pass_at_k([10, 10, 16], [0, 5, 16], 4)   # one problem per entry, broadcast
    array([0.        , 0.97619048, 1.        ])
    >>> float(pass_at_k(10**6, 1, 1, complement=True))   # the miss keeps its precision
    0.999999
    """
    n_ = _ints("n", n, 1)
    c_ = _ints("c", c, 0)
    k_ = _ints("k", k, 1)
    try:
        nb, cb, kb = np.broadcast_arrays(n_, c_, k_)
    except ValueError:
        raise ValueError(f"n, c and k must broadcast together, got shapes {n_.shape}, {c_.shape}, {k_.shape}") from None
    if np.any(cb > nb):
        i = np.argmax(cb > nb)
        raise ValueError(f"c must be an integer in [0, n], got c = {cb.flat[i]} > n = {nb.flat[i]}")
    if np.any(kb > nb):
        i = np.argmax(kb > nb)
        raise ValueError(f"k must be an integer in [1, n], got k = {kb.flat[i]} > n = {nb.flat[i]}")
    lm = _log_miss(nb, cb, kb)
    return np.exp(lm) if complement else -np.expm1(lm) + 0.0


def pass_at_k_table(successes: ArrayLike, n: ArrayLike, k: ArrayLike) -> pd.DataFrame:
    """Per-problem unbiased pass@k for several k, long form.

    Columns ``problem, n, successes, k, pass_at_k`` (one row per problem and k).
    ``successes`` is 1-D (one count per problem); ``n`` a scalar or one per problem.
    Source: as :func:`pass_at_k`.
    """
    c, nn = _counts(successes, n)
    ks = _ks(k, nn, "n")
    vals = pass_at_k(nn[None, :], c[None, :], ks[:, None])
    P = c.size
    return pd.DataFrame({"problem": np.tile(np.arange(P), ks.size), "n": np.tile(nn, ks.size),
                         "successes": np.tile(c, ks.size), "k": np.repeat(ks, P), "pass_at_k": vals.ravel()})


# --------------------------------------------------------- population pass@k
def _k_real(k: Any) -> np.ndarray:
    return _reals("k", k, 0.0, low_open=True)


def expected_pass_at_k(k: ArrayLike, p: ArrayLike | None = None, *, weights: ArrayLike | None = None,
                       dist: Any = None, complement: bool = False) -> np.ndarray:
    """pass@k of a solve-rate distribution, ``E_p[1 − (1 − p)^k]`` (FADE App. 12).

    Give either samples ``p`` (optionally with non-negative ``weights``) or ``dist``, a
    scipy.stats frozen continuous distribution with support inside [0, 1].

    * samples: ``Σ_j w_j·(−expm1(k·log1p(−p_j)))/Σ_j w_j`` (miss: ``exp`` instead of
      ``−expm1``), exact for the empirical distribution at every k;
    * ``dist``: integration by parts turns the density integral into
      ``E[(1 − p)^k] = k ∫_0^1 (1 − p)^{k−1} F(p) dp`` with the CDF ``F`` — bounded, so a
      density singular at 0 (``Beta(a < 1, ·)``) costs nothing; ``scipy.integrate.quad``
      with break points at ``1/k, 10/k, 100/k, 1000/k`` and relative tolerance 1e-11.

    ``k`` may be any positive real (array).  Returns an array of ``k``'s shape; with
    ``complement=True`` the miss ``E[(1 − p)^k]``, which keeps its relative precision when
    pass@k rounds to 1 (large k).
    """
    kk = _k_real(k)
    if (p is None) == (dist is None):
        raise ValueError("p or dist: give exactly one (samples of the solve rate, or a frozen distribution)")
    if p is not None:
        pa = _reals("p", p, 0.0, 1.0).ravel()
        if weights is None:
            w = np.full(pa.size, 1.0 / pa.size)
        else:
            w = _reals("weights", weights, 0.0).ravel()
            if w.size != pa.size or w.sum() <= 0:
                raise ValueError(f"weights must be non-negative, one per p ({pa.size}), with a positive sum")
            w = w / w.sum()
        with np.errstate(divide="ignore"):
            lg = np.multiply.outer(kk, np.log1p(-pa))  # [..., N]; -inf where p = 1
        vals = np.exp(lg) if complement else -np.expm1(lg)
        return vals @ w
    if not (hasattr(dist, "cdf") and hasattr(dist, "support")):
        raise ValueError("dist must be a scipy.stats frozen continuous distribution with support in [0, 1]")
    lo, hi = (float(v) for v in dist.support())
    if lo < 0 or hi > 1:
        raise ValueError(f"dist must have its support inside [0, 1], got [{lo:g}, {hi:g}]")
    miss = np.empty(kk.size)
    for j, kv in enumerate(kk.ravel()):
        miss[j] = _quad_miss(dist.cdf, float(kv))
    miss = miss.reshape(kk.shape)
    return miss if complement else 1.0 - miss


def _quad_miss(cdf, k: float) -> float:
    def f(x: float) -> float:
        return k * math.exp((k - 1.0) * math.log1p(-x)) * float(cdf(x)) if x < 1.0 else 0.0

    pts = [m / k for m in (1.0, 10.0, 100.0, 1000.0) if m / k < 1.0]
    val, _ = integrate.quad(f, 0.0, 1.0, points=pts or None, epsabs=0.0, epsrel=1e-11, limit=500)
    return min(max(val, 0.0), 1.0)


def _beta_params(a: Any, b: Any, weights: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    aa = np.atleast_1d(_reals("a", a, 0.0, low_open=True))
    bb = np.atleast_1d(_reals("b", b, 0.0, low_open=True))
    if aa.ndim != 1 or bb.shape != aa.shape:
        raise ValueError(f"a and b must be numbers or 1-D arrays of equal length, got shapes {aa.shape}, {bb.shape}")
    if weights is None:
        if aa.size != 1:
            raise ValueError("weights is required for a mixture (one weight per component, summing to 1)")
        w = np.ones(1)
    else:
        w = np.atleast_1d(_reals("weights", weights, 0.0, 1.0))
        if w.shape != aa.shape or abs(w.sum() - 1.0) > 1e-9:
            raise ValueError(f"weights must be one per component in [0, 1] summing to 1, got {_short(weights)}")
    return aa, bb, w


def beta_pass_at_k(k: ArrayLike, a: ArrayLike, b: ArrayLike, weights: ArrayLike | None = None, *,
                   complement: bool = False) -> np.ndarray:
    """Closed-form pass@k when the solve rate is ``p ~ Beta(a, b)`` (or a Beta mixture).

    .. math:: E[(1 − p)^k] = \\frac{B(a, b + k)}{B(a, b)} = \\frac{Γ(b + k)\\,Γ(a + b)}{Γ(b)\\,Γ(a + b + k)}

    For a mixture pass ``a``, ``b``, ``weights`` as 1-D arrays (one entry per component);
    the miss is the weighted sum.  ``k`` any positive real (array).  With
    ``complement=True`` returns the miss.  This is the independent reference for FADE
    Theorem 12.1 and for the pass@k implied by :func:`fit_beta_binomial` /
    :func:`fit_beta_mixture`.
    """
    kk = _k_real(k)
    aa, bb, w = _beta_params(a, b, weights)
    lm = special.betaln(aa, bb + kk[..., None]) - special.betaln(aa, bb)  # [..., J]
    if aa.size == 1:
        lm = lm[..., 0]
        return np.exp(lm) if complement else -np.expm1(lm)
    miss = np.exp(lm) @ w
    return miss if complement else (-np.expm1(lm)) @ w


# ------------------------------------------------------------ Theorem 12.1
def power_law_miss(k: ArrayLike, C: float, b: float) -> np.ndarray:
    """Power-law regime of FADE Theorem 12.1: ``1 − pass@k ≈ C·Γ(b)·k^{−b}``.

    Holds as ``k → ∞`` when the solve-rate density is ``C·p^{b−1} + O(p^{b−1+θ})`` near
    ``p = 0`` (the Laplace integral ``∫ e^{−kp} C p^{b−1} dp``).  ``C > 0``, ``b > 0``.
    """
    kk = _k_real(k)
    C = float(_reals("C", C, 0.0, low_open=True))
    b = float(_reals("b", b, 0.0, low_open=True))
    return np.exp(math.log(C) + special.gammaln(b) - b * np.log(kk))


def beta_power_law(a: ArrayLike, b: ArrayLike, weights: ArrayLike | None = None) -> tuple[float, float]:
    """``(C, exponent)`` of the density near 0 for ``Beta(a, b)`` or a Beta mixture.

    ``Beta(a, b)`` has density ``p^{a−1}(1−p)^{b−1}/B(a, b) = C·p^{a−1}(1 + O(p))``, so
    Theorem 12.1's exponent is the *first* Beta parameter ``a`` and ``C = 1/B(a, b)``.
    In a mixture the components with the smallest ``a`` dominate:
    ``C = Σ_{j: a_j = min a} w_j/B(a_j, b_j)``.  Source: FADE Theorem 12.1, App. 12.2.
    """
    aa, bb, w = _beta_params(a, b, weights)
    amin = aa.min()
    sel = (aa == amin) & (w > 0)
    if not np.any(sel):
        amin = aa[w > 0].min()
        sel = (aa == amin) & (w > 0)
    C = float(np.sum(w[sel] * np.exp(-special.betaln(aa[sel], bb[sel]))))
    return C, float(amin)


def power_law_table(k: ArrayLike, a: ArrayLike, b: ArrayLike, weights: ArrayLike | None = None) -> pd.DataFrame:
    """Exact pass@k of a Beta (mixture) next to Theorem 12.1's power-law prediction.

    Columns ``k, pass_at_k, miss, miss_power_law, ratio`` (``ratio = miss/miss_power_law``,
    which tends to 1 as ``k → ∞``; for one ``Beta(a, b)`` the first-order gap is
    ``ratio − 1 ≈ −a(a + 2b − 1)/(2k)``).  Source: FADE Theorem 12.1.
    """
    kk = np.atleast_1d(_k_real(k)).ravel()
    C, e = beta_power_law(a, b, weights)
    miss = beta_pass_at_k(kk, a, b, weights, complement=True)
    pl = power_law_miss(kk, C, e)
    return pd.DataFrame({"k": kk, "pass_at_k": beta_pass_at_k(kk, a, b, weights), "miss": miss,
                         "miss_power_law": pl, "ratio": miss / pl})


def rapid_decay_log_miss(k: ArrayLike, c: float, alpha: float) -> np.ndarray:
    """Leading term of ``log(1 − pass@k)`` in the rapidly decaying regime of Theorem 12.1.

    For a solve-rate density ``∝ exp(−c/p^α)`` near 0 the Laplace integral
    ``∫ exp(−kp − c p^{−α}) dp`` is dominated by ``p* = (αc/k)^{1/(1+α)}``, giving

    .. math:: \\log(1 − \\mathrm{pass@}k) = −(1 + 1/α)\\,(αc)^{1/(1+α)}\\,k^{α/(1+α)} + O(\\log k),

    which makes ``1 − pass@k = o(k^{−b})`` for every ``b > 0``.  The paper (FADE
    Theorem 12.1, case 2) states only the bound ``exp(−Ω(k^{α/(1+α)}))``; the constant here
    is our derivation (minimise ``kp + c p^{−α}``).  The relative error of the leading
    term is ``O(log k / k^{α/(1+α)})``.
    """
    kk = _k_real(k)
    c = float(_reals("c", c, 0.0, low_open=True))
    alpha = float(_reals("alpha", alpha, 0.0, low_open=True))
    return -(1.0 + 1.0 / alpha) * (alpha * c) ** (1.0 / (1.0 + alpha)) * kk ** (alpha / (1.0 + alpha))


# ------------------------------------------------------- shifted power law
def shifted_power_law(k: ArrayLike, a: float, b: float, k0: float) -> np.ndarray:
    """FADE App. 12.2: ``G(k) = exp(−a·(k + k0)^{−b})`` (needs ``k + k0 > 0``)."""
    kk = _reals("k", k, 0.0, low_open=True)
    if np.any(kk + k0 <= 0):
        raise ValueError(f"k0 must satisfy k + k0 > 0 for every k, got k0 = {k0!r}")
    return np.exp(-a * (kk + k0) ** (-b))


@dataclass(frozen=True)
class ShiftedPowerLaw:
    """A fitted ``G(k) = exp(−a(k + k0)^{−b})`` (FADE App. 12.2).

    ``stderr`` are the asymptotic standard errors ``sqrt(diag(s²(JᵀJ)^{−1}))`` with
    ``s² = SSR/(N − #free)`` (0 for a fixed ``k0``); ``mse`` is the paper's criterion
    ``mean((G(k_i) − y_i)²)``.
    """

    a: float
    b: float
    k0: float
    mse: float
    stderr: tuple[float, float, float]
    n_points: int

    def __call__(self, k: ArrayLike) -> np.ndarray:
        return shifted_power_law(k, self.a, self.b, self.k0)

    def to_frame(self) -> pd.DataFrame:
        """Long form: ``parameter, value, stderr``."""
        return pd.DataFrame({"parameter": ["a", "b", "k0"], "value": [self.a, self.b, self.k0],
                             "stderr": list(self.stderr)})


def fit_shifted_power_law(k: ArrayLike, pass_at_k: ArrayLike, *, k0: float | None = None,
                          k0_bounds: tuple[float, float] | None = None) -> ShiftedPowerLaw:
    """Fit ``G(k) = exp(−a(k + k0)^{−b})`` to ``(k, pass@k)`` points by least squares.

    FADE App. 12.2 fits the three parameters ``a`` (scale), ``b`` (exponent), ``k0``
    (shift) by the mean squared error of ``G`` against pass@k; we minimise the same sum of
    squares with ``scipy.optimize.least_squares`` (trust-region reflective, bounds
    ``a >= 0``, ``1e-6 <= b <= 50``, ``k0`` in ``k0_bounds``, default
    ``(−0.999·min k, 1e6)`` so that ``k + k0 > 0``).  Starts: for each ``k0`` in
    ``{0, 0.5, 2, 8, 32}`` (inside the bounds) the straight-line fit of
    ``log(−log y)`` on ``log(k + k0)``; the best final MSE wins.  ``k0=<number>`` fixes the
    shift (``k0=0`` is the plain power law of the miss ``−log G``).

    Parameters
    ----------
    k : array_like, 1-D, positive; at least 4 points.
    pass_at_k : array_like, same length, values in [0, 1].

    Examples
    --------
    Points of a known curve ``a = 1.2``, ``b = 0.6``, ``k0 = 1.5`` are fitted back:

    >>> k = np.array([1, 2, 4, 8, 16, 32, 64])
    >>> fit = fit_shifted_power_law(k, shifted_power_law(k, 1.2, 0.6, 1.5))
    >>> round(fit.a, 6), round(fit.b, 6), round(fit.k0, 6), fit.mse < 1e-20
    (1.2, 0.6, 1.5, True)
    >>> fit([128, 1024]).round(4)              # extrapolated pass@k
    array([0.9372, 0.9814])
    """
    kk = _reals("k", k, 0.0, low_open=True).ravel()
    y = _reals("pass_at_k", pass_at_k, 0.0, 1.0).ravel()
    if y.size != kk.size:
        raise ValueError(f"pass_at_k must have one value per k ({kk.size}), got {y.size}")
    if kk.size < 4:
        raise ValueError(f"k must hold at least 4 points to fit 3 parameters with errors, got {kk.size}")
    kmin = float(kk.min())
    if k0 is not None:
        k0 = float(_reals("k0", k0, -kmin, low_open=True))
    lo0, hi0 = k0_bounds if k0_bounds is not None else (-0.999 * kmin, 1e6)
    if k0 is None and not (-kmin < lo0 < hi0):
        raise ValueError(f"k0_bounds must be (lo, hi) with −min(k) = {-kmin:g} < lo < hi, got {k0_bounds!r}")

    def resid(theta: np.ndarray) -> np.ndarray:
        a, b, s = theta if k0 is None else (*theta, k0)
        return np.exp(-a * (kk + s) ** (-b)) - y

    mid = (y > 0) & (y < 1)
    starts = []
    for s in ([0.0, 0.5, 2.0, 8.0, 32.0] if k0 is None else [k0]):
        if k0 is None and not lo0 <= s <= hi0:
            continue
        if mid.sum() >= 2 and np.ptp(np.log(kk[mid] + s)) > 0:
            slope, icpt = np.polyfit(np.log(kk[mid] + s), np.log(-np.log(y[mid])), 1)
            a0, b0 = math.exp(min(icpt, 50.0)), float(np.clip(-slope, 1e-3, 10.0))
        else:
            a0, b0 = 1.0, 0.5
        starts.append([a0, b0, s] if k0 is None else [a0, b0])
    if not starts:
        starts.append([1.0, 0.5, float(np.clip(0.0, lo0, hi0))])
    lb = [0.0, 1e-6] + ([lo0] if k0 is None else [])
    ub = [np.inf, 50.0] + ([hi0] if k0 is None else [])
    best = None
    for x0 in starts:
        x0 = np.clip(x0, lb, np.minimum(ub, 1e12))
        res = optimize.least_squares(resid, x0, bounds=(lb, ub), method="trf", x_scale="jac",
                                     xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=5000)
        if best is None or res.cost < best.cost:
            best = res
    theta = best.x
    dof = max(kk.size - theta.size, 1)
    s2 = 2.0 * best.cost / dof
    cov = np.linalg.pinv(best.jac.T @ best.jac) * s2
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    a, b = float(theta[0]), float(theta[1])
    k0v = float(theta[2]) if k0 is None else k0
    stderr = (float(se[0]), float(se[1]), float(se[2]) if k0 is None else 0.0)
    return ShiftedPowerLaw(a, b, k0v, float(2.0 * best.cost / kk.size), stderr, int(kk.size))


# ------------------------------------------------------ solve-rate fits
_AB_BOUNDS = (1e-3, 1e4)
# SLSQP: same optimum as L-BFGS-B here (log-likelihood to 1e-9), 5x faster on 2 cores.
_MIN_OPTS: dict = {"method": "SLSQP", "options": {"ftol": 1e-14, "maxiter": 2000}}


def _grouped(c: np.ndarray, nn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (n, c) pairs and their multiplicities (the likelihood only needs these)."""
    pairs, inv = _pair_codes(nn, c)
    counts = np.bincount(inv, minlength=len(pairs)).astype(float)
    arr = np.array(pairs, dtype=np.int64)
    return arr[:, 0], arr[:, 1], counts


_HIST_MAX = 1 << 24   # "mle": the histogram MSE is reported only up to this many bins (else inf)


def _histogram(c: np.ndarray, nn: np.ndarray, method: str) -> np.ndarray:
    """The fraction of problems with x successes, x = 0..n; refused (with the memory it would
    take) where the arrays over 0..n cannot fit."""
    if np.any(nn != nn[0]):
        raise ValueError(f"method={method!r} needs the same n for every problem (a histogram over 0..n)")
    from rlvr_plumbing.runtime import check_memory

    check_memory(4 * 8 * (int(nn[0]) + 1), f"method={method!r} (arrays over x = 0..n, n = {int(nn[0])})")
    return np.bincount(c, minlength=int(nn[0]) + 1) / c.size


def _with_histogram(c: np.ndarray, nn: np.ndarray, method: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(h, x)`` over ``x = 0..n`` for the MSE: always for ``"mse"``; for ``"mle"`` (where
    the MSE is only reported) when every problem has the same ``n <= 2^24``."""
    if method == "mse" or (np.all(nn == nn[0]) and int(nn[0]) < _HIST_MAX):
        return _histogram(c, nn, method), np.arange(int(nn[0]) + 1)
    return None, None


@dataclass(frozen=True)
class BetaBinomialFit:
    """Solve rates ``p ~ Beta(a, b)``, counts ``c ~ BetaBin(n, a, b)`` (FADE App. 12.2).

    ``loglik`` is the log-likelihood of the counts at the fit, ``mse`` the mean squared
    error of the fitted pmf against the empirical histogram over ``x = 0..n`` (NaN-free:
    ``inf`` when the problems have different ``n``, or, for an MLE fit, ``n > 2^24``: the
    likelihood needs no array over ``0..n``, so a huge ``n`` fits in O(problems)).
    """

    a: float
    b: float
    loglik: float
    mse: float
    method: str
    n_problems: int

    def pass_at_k(self, k: ArrayLike, *, complement: bool = False) -> np.ndarray:
        """Population pass@k implied by the fit (:func:`beta_pass_at_k`)."""
        return beta_pass_at_k(k, self.a, self.b, complement=complement)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"parameter": ["a", "b"], "value": [self.a, self.b]})


def _bb_logpmf(x: np.ndarray, n: np.ndarray, a: float, b: float) -> np.ndarray:
    """``log BetaBin(x; n, a, b) = log C(n, x) + log B(x + a, n − x + b) − log B(a, b)``."""
    lc = special.gammaln(n + 1) - special.gammaln(x + 1) - special.gammaln(n - x + 1)
    return lc + special.betaln(x + a, n - x + b) - special.betaln(a, b)


def _bb_loglik(a: float, b: float, n: np.ndarray, x: np.ndarray, w: np.ndarray) -> float:
    return float(w @ _bb_logpmf(x, n, a, b))


def _moment_start(c: np.ndarray, nn: np.ndarray) -> tuple[float, float]:
    ph = c / nn
    mu = float(np.clip(ph.mean(), 0.02, 0.98))
    v = float(ph.var())
    nbar = float(np.mean(nn))
    rho = (v / (mu * (1 - mu)) - 1.0 / nbar) / (1.0 - 1.0 / nbar) if nbar > 1 else 0.5
    rho = float(np.clip(rho, 1e-3, 0.95))
    s = 1.0 / rho - 1.0
    return mu * s, (1 - mu) * s


def fit_beta_binomial(successes: ArrayLike, n: ArrayLike, *, method: str = "mle") -> BetaBinomialFit:
    """Fit ``BetaBin(n, a, b)`` to per-problem success counts (FADE App. 12.2).

    ``method="mle"``: maximise ``Σ_i log BetaBin(c_i; n_i, a, b)``
    over ``(log a, log b)`` (SLSQP with bounds) from the method-of-moments start; ``n`` may differ
    between problems.  ``method="mse"`` (the paper's criterion, read as): minimise
    ``(1/(n+1))·Σ_{x=0}^{n} (h_x − BetaBin(x; n, a, b))²`` with ``h_x`` the fraction of
    problems with ``x`` successes (same ``n`` for all problems), started at the MLE.
    ``a, b`` are kept in ``[1e-3, 1e4]``: a histogram with all mass at 0 (or n) drives the
    MLE to that bound rather than to a degenerate limit.

    Examples
    --------
    2,000 problems whose solve rates are drawn from ``Beta(0.5, 2)``, 16 answers each:

    >>> rng = np.random.default_rng(0)
    >>> c = rng.binomial(16, rng.beta(0.5, 2.0, size=2000))
    >>> fit = fit_beta_binomial(c, 16)
    >>> round(fit.a, 2), round(fit.b, 2), fit.n_problems
    (0.49, 2.0, 2000)
    >>> fit.pass_at_k([1, 8, 64]).round(3)     # population pass@k implied by the fit
    array([0.197, 0.567, 0.83 ])
    """
    method = checks.choice("method", method, ("mle", "mse"))
    c, nn = _counts(successes, n)
    gn, gx, gw = _grouped(c, nn)
    lb = np.log(_AB_BOUNDS)

    def nll(z):
        return -_bb_loglik(math.exp(z[0]), math.exp(z[1]), gn, gx, gw) / c.size

    z0 = np.clip(np.log(_moment_start(c, nn)), *lb)
    res = optimize.minimize(nll, z0, bounds=[tuple(lb)] * 2, **_MIN_OPTS)
    z = res.x
    hist, xs = _with_histogram(c, nn, method)
    if method == "mse":
        def mse(z):
            return float(np.mean((hist - np.exp(_bb_logpmf(xs, nn[0], math.exp(z[0]), math.exp(z[1])))) ** 2))
        z = optimize.minimize(mse, z, method="Nelder-Mead",
                              options={"xatol": 1e-10, "fatol": 1e-18, "maxiter": 20000}).x
        z = np.clip(z, *lb)
    a, b = math.exp(z[0]), math.exp(z[1])
    m = float(np.mean((hist - np.exp(_bb_logpmf(xs, nn[0], a, b))) ** 2)) if hist is not None else math.inf
    return BetaBinomialFit(a, b, _bb_loglik(a, b, gn, gx, gw), m, method, int(c.size))


@dataclass(frozen=True)
class BetaMixtureFit:
    """``p ~ w·Beta(a1, b1) + (1 − w)·Beta(a2, b2)``, fitted through the counts.

    Components are ordered by their mean ``a/(a + b)``: component 1 is the harder one
    (this removes label switching).  ``loglik`` and ``mse`` as in :class:`BetaBinomialFit`.
    Source: FADE App. 12.2 (two-component Beta mixture of solve rates).
    """

    w: float
    a1: float
    b1: float
    a2: float
    b2: float
    loglik: float
    mse: float
    method: str
    n_problems: int

    def pass_at_k(self, k: ArrayLike, *, complement: bool = False) -> np.ndarray:
        """Population pass@k implied by the fit (:func:`beta_pass_at_k` of the mixture)."""
        return beta_pass_at_k(k, [self.a1, self.a2], [self.b1, self.b2], [self.w, 1.0 - self.w],
                              complement=complement)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"parameter": ["w", "a1", "b1", "a2", "b2"],
                             "value": [self.w, self.a1, self.b1, self.a2, self.b2]})


def _mix_logpmf(z: np.ndarray, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    lw1 = -np.logaddexp(0.0, -z[0])  # log sigmoid
    lw2 = -np.logaddexp(0.0, z[0])
    a1, b1, a2, b2 = np.exp(z[1:])
    return np.logaddexp(lw1 + _bb_logpmf(x, n, a1, b1), lw2 + _bb_logpmf(x, n, a2, b2))


def fit_beta_mixture(successes: ArrayLike, n: ArrayLike, *, method: str = "mle", starts: int = 8,
                     seed: int | np.random.Generator = 0) -> BetaMixtureFit:
    """Two-component Beta mixture of solve rates, fitted to per-problem success counts.

    FADE App. 12.2 models the bimodal solve-rate distribution as
    ``w·Beta(a1, b1) + (1 − w)·Beta(a2, b2)``.  Solve rates are seen only through
    ``c_i ~ Binomial(n_i, p_i)`` (many ``c_i`` are 0 or ``n_i``, where a density of ``c/n``
    has no likelihood), so the counts follow the mixture of Beta-binomials
    ``w·BetaBin(n, a1, b1) + (1 − w)·BetaBin(n, a2, b2)``; its parameters are those of the
    Beta mixture.

    ``method="mle"``: direct maximum likelihood over ``(logit w, log a1, log b1, log a2,
    log b2)`` with SLSQP (``a, b`` in ``[1e-3, 1e4]``, ``w`` in ``[1e-4, 1 − 1e-4]``)
    from one deterministic start (problems split at ``c/n = 1/2``, moment-matched halves)
    and ``starts`` random starts drawn from ``seed``; the best likelihood wins.
    ``method="mse"``: then minimise the histogram MSE over ``x = 0..n`` (same ``n``), as for
    :func:`fit_beta_binomial`.  Five parameters need ``n >= 5`` to be identifiable
    (moments of order up to ``n`` only).  Components are ordered by mean (harder first).
    """
    method = checks.choice("method", method, ("mle", "mse"))
    c, nn = _counts(successes, n)
    starts = checks.integer("starts", starts, low=0)
    rng = checks.random_source("seed", seed)
    gn, gx, gw = _grouped(c, nn)
    lab = np.log(_AB_BOUNDS)
    lwb = math.log(1e-4 / (1 - 1e-4))
    bounds = [(lwb, -lwb)] + [tuple(lab)] * 4

    def nll(z):
        return -float(gw @ _mix_logpmf(z, gn, gx)) / c.size

    hard = c / nn < 0.5
    z_list = []
    if 0 < hard.sum() < c.size:
        a1, b1 = _moment_start(c[hard], nn[hard])
        a2, b2 = _moment_start(c[~hard], nn[~hard])
        w0 = float(np.clip(hard.mean(), 0.05, 0.95))
        z_list.append([math.log(w0 / (1 - w0)), *np.log([a1, b1, a2, b2])])
    for _ in range(starts):
        w0 = rng.uniform(0.2, 0.8)
        z_list.append([math.log(w0 / (1 - w0)), *rng.uniform(math.log(0.2), math.log(5.0), 4)])
    if not z_list:
        a0, b0 = _moment_start(c, nn)
        z_list.append([0.0, math.log(a0), math.log(b0), math.log(a0), math.log(b0)])
    best = None
    for z0 in z_list:
        z0 = np.clip(z0, [b[0] for b in bounds], [b[1] for b in bounds])
        res = optimize.minimize(nll, z0, bounds=bounds, **_MIN_OPTS)
        if best is None or res.fun < best.fun:
            best = res
    z = best.x
    hist, xs = _with_histogram(c, nn, method)
    if method == "mse":
        def mse(z):
            return float(np.mean((hist - np.exp(_mix_logpmf(z, nn[0], xs))) ** 2))
        z = optimize.minimize(mse, z, method="Nelder-Mead",
                              options={"xatol": 1e-10, "fatol": 1e-18, "maxiter": 40000, "maxfev": 40000}).x
        z = np.clip(z, [b[0] for b in bounds], [b[1] for b in bounds])
    w = float(1.0 / (1.0 + math.exp(-z[0])))
    a1, b1, a2, b2 = (float(v) for v in np.exp(z[1:]))
    if a1 / (a1 + b1) > a2 / (a2 + b2):  # label switching: harder component first
        w, a1, b1, a2, b2 = 1.0 - w, a2, b2, a1, b1
        z = np.array([-z[0], *np.log([a1, b1, a2, b2])])
    m = float(np.mean((hist - np.exp(_mix_logpmf(z, nn[0], xs))) ** 2)) if hist is not None else math.inf
    return BetaMixtureFit(w, a1, b1, a2, b2, float(gw @ _mix_logpmf(z, gn, gx)), m, method, int(c.size))


# ------------------------------------------------------------ subsampling
def _subsample_means(c: np.ndarray, nn: np.ndarray, m: int, ks: np.ndarray, iterations: int,
                     rng: np.random.Generator, weights: np.ndarray | None = None,
                     chunk_elems: int = 1 << 20) -> Iterator[np.ndarray]:
    """Yield ``[K, chunk]`` blocks of ``Σ_i w_i·pass@k(m, C_i*, k)`` (default ``w = 1/P``).

    ``C_i* ~ Hypergeometric(n_i, c_i, m)`` is the number of correct answers in ``m`` answers
    drawn without replacement from problem i's ``n_i`` — the same law as drawing the
    answers themselves.  ``pass@k(m, ·, k)`` is looked up in a table over 0..m.
    """
    from rlvr_plumbing.runtime import check_memory

    P = c.size
    w = np.full(P, 1.0 / P) if weights is None else weights
    check_memory(8 * (ks.size + 2) * (m + 1), f"the pass@k table over 0..m (m = {m}, {ks.size} values of k)")
    table = pass_at_k(m, np.arange(m + 1)[None, :], ks[:, None])  # [K, m+1]
    chunk = max(1, chunk_elems // (P * ks.size))
    done = 0
    while done < iterations:
        b = min(chunk, iterations - done)
        draws = rng.hypergeometric(c, nn - c, m, size=(b, P))
        yield table[:, draws] @ w
        done += b


def subsample_pass_at_k(successes: ArrayLike, n: ArrayLike, k: ArrayLike, m: int, *, iterations: int = 1000,
                        seed: int | np.random.Generator = 0) -> np.ndarray:
    """Benchmark pass@k from random m-out-of-n subsets of each problem's answers.

    Each iteration draws, for every problem, ``m`` of its ``n`` answers without replacement,
    computes the unbiased pass@k from those ``m`` (:func:`pass_at_k` with ``n = m``) and
    averages over problems.  Returns an array ``[len(k), iterations]``.  Its mean over all
    subsets is exactly the unbiased pass@k from all ``n`` answers (a U-statistic).
    Source: F-GRPO App. I; FADE App. 11.2 (``m = 2k``).
    """
    c, nn = _counts(successes, n)
    m = checks.integer("m", m, low=1)
    if m > nn.min():
        raise ValueError(f"m must be an integer in [1, n] with n = {int(nn.min())}, got {m}")
    ks = _ks(k, m, "m")
    iterations = checks.integer("iterations", iterations, low=1)
    return np.concatenate(list(_subsample_means(c, nn, m, ks, iterations, checks.random_source("seed", seed))), axis=1)


def grouped_std(successes: ArrayLike, n: ArrayLike, k: ArrayLike, *, groups: int = 400,
                seed: int | np.random.Generator = 0) -> pd.DataFrame:
    """FADE App. 11.2: mean and standard deviation of pass@k over groups of ``2k`` answers.

    "For each pass@k metric, we draw 2k samples and compute the mean over 400 groups of size
    2k to estimate the standard deviation."  Read as: each group draws, for every problem,
    ``2k`` of its ``n`` answers without replacement and computes the benchmark pass@k from
    them (unbiased estimator with ``n = 2k``); ``mean`` and ``std`` (ddof = 1) are taken
    over ``groups`` groups.  ``std`` is the spread of a ``2k``-answer evaluation *given*
    the ``n`` answers at hand; it shrinks to 0 as ``2k → n``.  Needs ``n >= 2k``.

    Returns long form: ``k, group_size, groups, full, mean, std`` (``full``: the unbiased
    pass@k from all ``n`` answers, the exact expectation of ``mean``).
    """
    c, nn = _counts(successes, n)
    ks = _ks(k, nn // 2, "n/2")
    groups = checks.integer("groups", groups, low=2)
    rng = checks.random_source("seed", seed)
    rows = []
    for kv in ks:
        vals = subsample_pass_at_k(c, nn, [kv], 2 * int(kv), iterations=groups, seed=rng)[0]
        rows.append({"k": int(kv), "group_size": 2 * int(kv), "groups": groups,
                     "full": float(pass_at_k(nn, c, kv).mean()), "mean": float(vals.mean()),
                     "std": float(vals.std(ddof=1))})
    return pd.DataFrame(rows)


def bootstrap_pass_at_k(successes: ArrayLike, n: ArrayLike, k: ArrayLike, *, n_boot: int = 2000,
                        level: float = 0.95, seed: int | np.random.Generator = 0) -> pd.DataFrame:
    """Percentile bootstrap over problems for the benchmark pass@k.

    Resamples problems with replacement ``n_boot`` times (answers of a problem stay
    together) and recomputes the mean of the per-problem unbiased pass@k.  Returns long
    form ``k, estimate, se, ci_low, ci_high, level, n_boot`` (``se``: standard deviation of
    the bootstrap means; ``ci``: their ``(1 ± level)/2`` quantiles).  This interval covers
    the population of problems the benchmark was drawn from; for the answer-sampling noise
    with the problems held fixed use :func:`grouped_std` or :func:`subsample_pass_at_k`.
    """
    c, nn = _counts(successes, n)
    ks = _ks(k, nn, "n")
    n_boot = checks.integer("n_boot", n_boot, low=2)
    level = checks.probability("level", level, low_open=True, high_open=True)
    rng = checks.random_source("seed", seed)
    V = pass_at_k(nn[None, :], c[None, :], ks[:, None])  # [K, P]
    P = c.size
    chunk = max(1, (1 << 20) // P)
    boots = np.concatenate([V[:, rng.integers(0, P, size=(min(chunk, n_boot - s), P))].mean(-1)
                            for s in range(0, n_boot, chunk)], axis=1)
    q = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=1)
    return pd.DataFrame({"k": ks, "estimate": V.mean(1), "se": boots.std(1, ddof=1), "ci_low": q[0],
                         "ci_high": q[1], "level": level, "n_boot": n_boot})


def _paired_test(ca, cb, nn, ks, m, iterations, alpha, rescale, rng):
    """Arrays (difference, ci_low, ci_high, p_value) per k; see :func:`paired_subsampling_test`."""
    P = ca.size
    full_a = pass_at_k(nn[None, :], ca[None, :], ks[:, None])  # [K, P]
    full_b = pass_at_k(nn[None, :], cb[None, :], ks[:, None])
    diff = full_a.mean(1) - full_b.mean(1)
    if rescale:
        w = np.sqrt(m / (nn - m)) / P  # per-problem factor sqrt(m/(n−m))
        const = diff - (full_a - full_b) @ w
    else:
        w, const = None, np.zeros(ks.size)
    ga = _subsample_means(ca, nn, m, ks, iterations, rng, w)
    gb = _subsample_means(cb, nn, m, ks, iterations, rng, w)
    d = np.concatenate([a - b for a, b in zip(ga, gb)], axis=1) + const[:, None]
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2], axis=1)
    pval = np.minimum(1.0, 2.0 * np.minimum((d <= 0).mean(1), (d >= 0).mean(1)))
    return full_a.mean(1), full_b.mean(1), diff, lo, hi, pval


def paired_subsampling_test(successes_a: ArrayLike, successes_b: ArrayLike, n: ArrayLike, k: ArrayLike, m: int,
                            *, iterations: int = 50_000, alpha: float = 0.05, rescale: bool = False,
                            seed: int | np.random.Generator = 0) -> pd.DataFrame:
    """Paired m-out-of-n subsampling test of ``pass@k(A) = pass@k(B)`` (F-GRPO App. I).

    The paper (following Politis, Romano & Wolf 1999): both models answer the same problems
    ``n`` times (1024 there).  In each of ``iterations`` (50,000) iterations, for every
    problem and each model, ``m`` (256) answers are drawn without replacement; pass@k is
    computed from them with the unbiased formula (``n = m``) and averaged over problems,
    giving one pass@k per model; their difference ``A − B`` is recorded.  The test is
    two-sided at level ``alpha``: ``p = 2·min(P*(d <= 0), P*(d >= 0))`` over the subsampling
    distribution, and the ``1 − alpha`` interval is its ``alpha/2``, ``1 − alpha/2``
    quantiles; ``p < alpha`` ⇔ the interval excludes 0.  "Paired" means the same problems
    and the same iteration for both models; the answers of A and B have no common index,
    so their subsets are drawn independently.

    ``rescale=False`` is the paper's test.  Its subsampling distribution has the spread of
    an ``m``-answer evaluation, wider than the sampling spread of the ``n``-answer estimate
    by ``sqrt((n − m)/m)`` for pass@1 (finite-population correction of Hypergeometric
    sampling), so it is conservative for ``m < n/2`` (type-I error ≈ 0.0007 instead of
    0.05 at ``m = n/4``) and anti-conservative for ``m > n/2``.  ``rescale=True`` (our
    addition, Politis et al.'s rescaling with the finite-population factor) maps each
    problem's subsample value ``v*`` to ``v + sqrt(m/(n − m))·(v* − v)`` around its
    full-data value ``v``, so that the distribution has the spread of the ``n``-answer
    difference; its type-I error is near ``alpha`` for pass@k with ``k << m``.

    Parameters
    ----------
    successes_a, successes_b : 1-D int arrays, correct answers per problem (same problems).
    n : int or 1-D array, answers per problem (both models).
    k : int or list of int, ``1 <= k <= m``.
    m : int, subsample size, ``k <= m < n``.

    Returns
    -------
    DataFrame, one row per k: ``k, n`` (the smallest if it varies by problem), ``m,
    pass_at_k_a, pass_at_k_b, difference`` (unbiased, all ``n`` answers), ``ci_low, ci_high,
    p_value, significant, alpha, iterations, rescaled``.
    """
    ca, nn = _counts(successes_a, n)
    cb, _ = _counts(successes_b, n)
    if cb.size != ca.size:
        raise ValueError(f"successes_b must have one count per problem of successes_a ({ca.size}), got {cb.size}")
    m = checks.integer("m", m, low=1)
    if m >= nn.min():
        raise ValueError(f"m must be an integer in [k, n − 1] with n = {int(nn.min())}, got {m}")
    ks = _ks(k, m, "m")
    iterations = checks.integer("iterations", iterations, low=2)
    alpha = checks.probability("alpha", alpha, low_open=True, high_open=True)
    pa, pb, diff, lo, hi, pval = _paired_test(ca, cb, nn, ks, m, iterations, alpha, bool(rescale), checks.random_source("seed", seed))
    return pd.DataFrame({"k": ks, "n": int(nn.min()), "m": m,
                         "pass_at_k_a": pa, "pass_at_k_b": pb, "difference": diff, "ci_low": lo,
                         "ci_high": hi, "p_value": pval, "significant": pval < alpha, "alpha": alpha,
                         "iterations": iterations, "rescaled": bool(rescale)})


def rejection_rate(p_a: ArrayLike, p_b: ArrayLike, n: int, k: ArrayLike, m: int, *, reps: int = 200,
                   iterations: int = 1000, alpha: float = 0.05, rescale: bool = False,
                   seed: int | np.random.Generator = 0,
                   progress: bool = False) -> pd.DataFrame:
    """Rejection rate of :func:`paired_subsampling_test` on synthetic benchmarks.

    Each replicate draws ``c_a,i ~ Binomial(n, p_a,i)`` and ``c_b,i ~ Binomial(n, p_b,i)``
    independently for the fixed problems ``i`` and runs the test.  With ``p_a = p_b`` this is
    the type-I error (compare with ``alpha``), otherwise the power.  Returns long form
    ``k, rejection_rate, se, reps, m, n, rescaled`` (``se`` the binomial standard error).
    Source: F-GRPO App. I (the test); the calibration study is ours.
    """
    pa = _reals("p_a", p_a, 0.0, 1.0).ravel()
    pb = _reals("p_b", p_b, 0.0, 1.0).ravel()
    if pa.size != pb.size:
        raise ValueError(f"p_b must have one solve rate per problem of p_a ({pa.size}), got {pb.size}")
    n = checks.integer("n", n, low=1)
    m = checks.integer("m", m, low=1)
    if m >= n:
        raise ValueError(f"m must be an integer in [k, n − 1] with n = {n}, got {m}")
    ks = _ks(k, m, "m")
    reps = checks.integer("reps", reps, low=1)
    iterations = checks.integer("iterations", iterations, low=2)
    alpha = checks.probability("alpha", alpha, low_open=True, high_open=True)
    rng = checks.random_source("seed", seed)
    nn = np.full(pa.size, n)
    rejected = np.zeros(ks.size)
    it = range(reps)
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(it, desc="rejection_rate")
    for _ in it:
        ca, cb = rng.binomial(n, pa), rng.binomial(n, pb)
        pval = _paired_test(ca, cb, nn, ks, m, iterations, alpha, bool(rescale), rng)[-1]
        rejected += pval < alpha
    rate = rejected / reps
    return pd.DataFrame({"k": ks, "rejection_rate": rate, "se": np.sqrt(rate * (1 - rate) / reps),
                         "reps": reps, "m": m, "n": n, "rescaled": bool(rescale)})
