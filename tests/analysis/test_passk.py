"""pass@k: the estimator against exact fractions, population pass@k against Beta closed forms
and mpmath, Theorem 12.1 against the Gamma-ratio expansion, fits against known parameters
(Fisher-information standard errors computed here with scipy.stats.betabinom), and the
subsampling machinery against exact hypergeometric moments and normal-theory rejection rates."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from analysis import passk as pk

ROOT = Path(__file__).resolve().parents[2]


def exact_pass(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


# ------------------------------------------------------------ the estimator
def test_matches_exact_fractions_on_every_small_case():
    """All n <= 40, 0 <= c <= n, 1 <= k <= n in one vectorised call: pass and miss to 1e-13 (relative)."""
    grid = np.array([(n, c, k) for n in range(1, 41) for c in range(n + 1) for k in range(1, n + 1)])
    n, c, k = grid.T
    got, got_miss = pk.pass_at_k(n, c, k), pk.pass_at_k(n, c, k, complement=True)
    want = [exact_pass(*map(int, row)) for row in grid]
    want_f = np.array([float(w) for w in want])
    want_miss = np.array([float(1 - w) for w in want])
    np.testing.assert_allclose(got, want_f, rtol=1e-13, atol=0)
    np.testing.assert_allclose(got_miss, want_miss, rtol=1e-13, atol=0)
    assert np.all(got[n - c < k] == 1.0) and np.all(got[c == 0] == 0.0)


@pytest.mark.parametrize("n,c,k", [(10**12, 1, 1), (10**15, 5, 10**6), (10**6, 1, 1), (10**6, 3, 10),
                                   (100_000, 17, 1000), (1000, 990, 5),
                                   (4096, 1, 4000), (2**20, 2**20 - 300, 299), (256, 255, 256)])
def test_large_n_keeps_relative_precision(n, c, k):
    """Tiny pass@k and tiny misses keep 1e-11 relative precision where comb() overflows a float
    (reference: 50-digit mpmath binomials)."""
    with mpmath.workdps(50):
        miss = mpmath.binomial(n - c, k) / mpmath.binomial(n, k)
    assert float(pk.pass_at_k(n, c, k)) == pytest.approx(float(1 - miss), rel=1e-11, abs=0)
    assert float(pk.pass_at_k(n, c, k, complement=True)) == pytest.approx(float(miss), rel=1e-11, abs=0)
    both = pk.pass_at_k([n, 40], [c, 3], [k, 7])  # mixed sizes in one call
    assert both[0] == pytest.approx(float(1 - miss), rel=1e-11, abs=0)
    assert both[1] == pytest.approx(float(exact_pass(40, 3, 7)), rel=1e-13)


@pytest.mark.parametrize("n,k", [(8, 3), (64, 1), (64, 20), (200, 50)])
def test_estimator_is_unbiased(n, k):
    """Σ_c Binom(c; n, p)·pass@k(n, c, k) = 1 − (1 − p)^k for every p (exact identity, 1e-12)."""
    p = np.linspace(0, 1, 21)
    c = np.arange(n + 1)
    mean = stats.binom.pmf(c[None, :], n, p[:, None]) @ pk.pass_at_k(n, c, k)
    np.testing.assert_allclose(mean, 1 - (1 - p) ** k, atol=1e-12)


def test_pass_at_1_is_the_fraction_correct_and_broadcasts():
    n = np.array([[5], [10]])
    out = pk.pass_at_k(n, [0, 1, 5], 1)
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out, [[0, 0.2, 1.0], [0, 0.1, 0.5]], rtol=1e-15)
    assert pk.pass_at_k(10.0, 3.0, 2.0) == pytest.approx(1 - 21 / 45)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.data())
def test_properties_in_unit_interval_and_monotone(n, data):
    c = data.draw(st.integers(0, n))
    ks = np.arange(1, n + 1)
    by_k = pk.pass_at_k(n, c, ks)
    assert np.all((by_k >= 0) & (by_k <= 1))
    assert np.all(np.diff(by_k) >= -1e-15), "non-decreasing in k"
    k = data.draw(st.integers(1, n))
    by_c = pk.pass_at_k(n, np.arange(n + 1), k)
    assert np.all(np.diff(by_c) >= -1e-15), "non-decreasing in c"
    assert np.all(np.isfinite(by_c))


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=10, c=3, k=11), r"^k must be an integer in \[1, n\]"),
    (dict(n=10, c=11, k=2), r"^c must be an integer in \[0, n\]"),
    (dict(n=10, c=-1, k=2), r"^c must be an integer >= 0, got -1"),
    (dict(n=0, c=0, k=1), r"^n must be an integer >= 1"),
    (dict(n=10, c=3, k=0), r"^k must be an integer >= 1, got 0"),
    (dict(n=10, c=2.5, k=2), r"^c must be an integer"),
    (dict(n=10.5, c=2, k=2), r"^n must be an integer"),
    (dict(n=10, c=2, k=np.nan), r"^k must be an integer"),
    (dict(n=10, c=True, k=2), r"^c must be an integer"),
    (dict(n=10, c="3", k=2), r"^c must be an integer"),
    (dict(n=[10, 10], c=[1, 2, 3], k=2), r"^n, c and k must broadcast"),
])
def test_bad_input_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pk.pass_at_k(**kwargs)


def test_integer_arguments_follow_the_shared_policy():
    """n, c, k, m, iterations, groups, starts, seed: integral floats and numpy integers are
    integers, bool is not (rlvr_plumbing.checks), as scalars and inside arrays."""
    want = pk.pass_at_k(10, 3, 4)
    for n, c, k in [(10.0, 3.0, 4.0), (np.int64(10), np.int32(3), np.float64(4)), (10, [3.0], np.array([4]))]:
        np.testing.assert_allclose(pk.pass_at_k(n, c, k), want, rtol=0, atol=0)
    assert pk.subsample_pass_at_k([1, 2], 8, 2.0, 4.0, iterations=np.int64(3), seed=np.int64(1)).shape == (1, 3)
    assert pk.grouped_std([1, 2], 8, [1.0, 2.0], groups=3.0).groups.tolist() == [3, 3]
    for bad in (True, np.bool_(True)):
        with pytest.raises(ValueError, match=r"^k must be an integer"):
            pk.pass_at_k(10, 3, bad)
        with pytest.raises(ValueError, match=r"^m must be an integer >= 1"):
            pk.subsample_pass_at_k([1, 2], 8, 1, bad)
    with pytest.raises(ValueError, match=r"^c must be a numeric array, got booleans"):
        pk.pass_at_k(10, np.array([True, False]), 1)
    with pytest.raises(ValueError, match=r"^iterations must be an integer >= 1, got 2.5"):
        pk.subsample_pass_at_k([1, 2], 8, 1, 4, iterations=2.5)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got True"):
        pk.bootstrap_pass_at_k([1, 2], 8, 1, seed=True)


def test_table_is_long_form():
    df = pk.pass_at_k_table([0, 3, 8], 8, [1, 4])
    assert list(df.columns) == ["problem", "n", "successes", "k", "pass_at_k"] and len(df) == 6
    row = df[(df.problem == 1) & (df.k == 4)].pass_at_k.item()
    assert row == pytest.approx(float(exact_pass(8, 3, 4)))
    with pytest.raises(ValueError, match="^successes must be"):
        pk.pass_at_k_table([0, 9], 8, 1)
    with pytest.raises(ValueError, match=r"^k must be an integer in \[1, n\]"):
        pk.pass_at_k_table([0, 3], 8, [1, 9])


# ------------------------------------------------------ population pass@k
def test_beta_closed_form_against_mpmath():
    """B(a, b+k)/B(a, b) against a 30-digit mpmath evaluation, k up to 1e8."""
    for a, b in [(0.3, 2.0), (2.5, 0.7), (1.0, 1.0)]:
        k = np.array([1, 3.5, 100, 1e4, 1e8])
        got = pk.beta_pass_at_k(k, a, b, complement=True)
        with mpmath.workdps(30):
            want = [float(mpmath.beta(a, b + kk) / mpmath.beta(a, b)) for kk in k]
        np.testing.assert_allclose(got, want, rtol=1e-10)
        np.testing.assert_allclose(pk.beta_pass_at_k(k, a, b), 1 - np.array(want), rtol=1e-10)


@pytest.mark.parametrize("a,b", [(0.3, 2.0), (0.5, 0.5), (2.0, 5.0), (1.0, 1.0)])
def test_quadrature_matches_beta_closed_form(a, b):
    """expected_pass_at_k(dist=Beta) — quadrature of the CDF form — vs the closed form, k to 1e6."""
    k = np.array([1, 2, 7, 64, 1000, 123456, 1e6])
    got = pk.expected_pass_at_k(k, dist=stats.beta(a, b), complement=True)
    np.testing.assert_allclose(got, pk.beta_pass_at_k(k, a, b, complement=True), rtol=1e-8)


def test_samples_monte_carlo_within_4_se():
    rng = np.random.default_rng(0)
    a, b, N = 0.4, 1.5, 40_000
    p = rng.beta(a, b, N)
    k = np.array([1, 4, 32, 256])
    got = pk.expected_pass_at_k(k, p)
    se = np.std(1 - (1 - p[None, :]) ** k[:, None], axis=1) / math.sqrt(N)
    assert np.all(np.abs(got - pk.beta_pass_at_k(k, a, b)) < 4 * se)


def test_samples_with_weights_equal_repeated_samples_and_edges():
    p = np.array([0.0, 0.2, 1.0])
    w = np.array([1, 2, 3])
    k = np.array([1, 5, 1e9])
    np.testing.assert_allclose(pk.expected_pass_at_k(k, p, weights=w), pk.expected_pass_at_k(k, np.repeat(p, w)),
                               rtol=1e-14)
    got = pk.expected_pass_at_k(k, p, weights=w, complement=True)
    np.testing.assert_allclose(got, [(1 + 2 * 0.8) / 6, (1 + 2 * 0.8**5) / 6, 1 / 6], rtol=1e-14)


def test_mixture_closed_form_against_mpmath_quadrature():
    w, a, b = [0.3, 0.7], [0.4, 3.0], [2.0, 1.2]
    for k in (1, 10, 500):
        dens = lambda x: sum(wi * x ** (ai - 1) * (1 - x) ** (bi - 1) / mpmath.beta(ai, bi)  # noqa: E731
                             for wi, ai, bi in zip(w, a, b))
        with mpmath.workdps(25):
            want = float(mpmath.quad(lambda x, dens=dens, k=k: dens(x) * (1 - x) ** k, [0, 1 / k, 1]))
        assert float(pk.beta_pass_at_k(k, a, b, w, complement=True)) == pytest.approx(want, rel=1e-9, abs=0)


def test_population_bad_input():
    with pytest.raises(ValueError, match="^p or dist"):
        pk.expected_pass_at_k(3)
    with pytest.raises(ValueError, match=r"^p must contain only finite numbers >= 0 and <= 1"):
        pk.expected_pass_at_k(3, [0.2, 1.2])
    with pytest.raises(ValueError, match=r"^k must be a finite number > 0"):
        pk.expected_pass_at_k(0, [0.2])
    with pytest.raises(ValueError, match="^dist must have its support"):
        pk.expected_pass_at_k(3, dist=stats.norm())
    with pytest.raises(ValueError, match="^weights must be"):
        pk.expected_pass_at_k(3, [0.2, 0.3], weights=[1.0])
    with pytest.raises(ValueError, match="^weights is required"):
        pk.beta_pass_at_k(3, [1, 2], [1, 1])
    with pytest.raises(ValueError, match="^weights must be one per component"):
        pk.beta_pass_at_k(3, [1, 2], [1, 1], [0.5, 0.6])


# -------------------------------------------------------- Theorem 12.1
@pytest.mark.parametrize("a,b", [(0.3, 2.0), (0.5, 0.5), (2.0, 5.0)])
def test_power_law_regime_with_gamma_ratio_correction(a, b):
    """1 − pass@k / (C Γ(a) k^−a) → 1 with k·(ratio − 1) → −a(a+2b−1)/2 (Tricomi–Erdélyi).

    C = 1/B(a, b), exponent a (density ~ p^(a−1)/B(a,b) near 0).  The O(1/k²) remainder
    bounds the gap at k = 1e5 by 1e-3 relative on the slope.
    """
    C, e = pk.beta_power_law(a, b)
    assert e == a and C == pytest.approx(1 / special.beta(a, b), rel=1e-14)
    df = pk.power_law_table([1e2, 1e3, 1e4, 1e5], a, b)
    assert np.all(np.diff(np.abs(df.ratio - 1)) < 0), "the gap shrinks with k"
    slope = (df.k * (df.ratio - 1)).to_numpy()
    assert slope[-1] == pytest.approx(-a * (a + 2 * b - 1) / 2, rel=1e-3, abs=1e-6)


def test_power_law_for_a_non_beta_density():
    """Truncated exponential on [0, 1] (density C at 0, b = 1): quadrature miss·k/C → 1, vs mpmath."""
    lam = 5.0
    dist = stats.truncexpon(b=lam, scale=1 / lam)
    C = lam / (1 - math.exp(-lam))
    k = np.array([10, 100, 1000, 10000])
    miss = pk.expected_pass_at_k(k, dist=dist, complement=True)
    with mpmath.workdps(25):
        want = [float(mpmath.quad(lambda x, kk=kk: C * mpmath.exp(-lam * x) * (1 - x) ** int(kk), [0, 1 / kk, 1]))
                for kk in k]
    np.testing.assert_allclose(miss, want, rtol=1e-9)
    ratio = miss / pk.power_law_miss(k, C, 1.0)
    assert np.all(np.diff(np.abs(ratio - 1)) < 0) and abs(ratio[-1] - 1) < 1e-3


def test_mixture_power_law_takes_the_smallest_exponent():
    w, a, b = [0.6, 0.4], [2.0, 0.3], [0.5, 4.0]
    C, e = pk.beta_power_law(a, b, w)
    assert e == 0.3 and C == pytest.approx(0.4 / special.beta(0.3, 4.0))
    df = pk.power_law_table([1e3, 1e6], a, b, w)
    assert abs(df.ratio.iloc[-1] - 1) < 1e-4 < abs(df.ratio.iloc[0] - 1)


class RapidDecay:
    """Solve-rate density ∝ exp(−c/p) on (0, 1]; CDF F(x) = x·E₂(c/x)/E₂(c) (no cancellation)."""

    def __init__(self, c: float):
        self.c = c

    def support(self):
        return 0.0, 1.0

    def cdf(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(x > 0, x * special.expn(2, self.c / np.maximum(x, 1e-300)), 0.0) / special.expn(2, self.c)


def rapid_decay_reference(k: float, c: float) -> float:
    """E[(1−p)^k] for density ∝ exp(−c/p): the *density* integral in u = log p, scaled by
    exp(2√(ck)) against underflow, around the Laplace point p* = √(c/k).  (Plain mpmath.quad in p
    is off by up to 5e-4 at k = 1e5 on this sharp peak; this form agrees with the CDF form to 1e-13.)"""
    from scipy import integrate

    Z = integrate.quad(lambda u: math.exp(-c / math.exp(u) + u), -60, 0, epsabs=0, epsrel=1e-13, limit=500)[0]
    S, u0 = 2 * math.sqrt(c * k), 0.5 * math.log(c / k)
    f = lambda u: math.exp(-c / math.exp(u) + k * math.log1p(-math.exp(u)) + u + S)  # noqa: E731
    v = integrate.quad(f, u0 - 8, min(0.0, u0 + 8), points=[u0 - 1, u0, u0 + 1], epsabs=0, epsrel=1e-13, limit=500)[0]
    return v / Z * math.exp(-S)


def test_rapidly_decaying_regime():
    """Density ∝ exp(−c/p): CDF-form quadrature vs log-space density quadrature (1e-9 relative,
    values down to 1e-278); log-miss/leading term → 1; k^b·miss → 0 (miss = o(k^−b))."""
    c = 1.0
    k = np.array([1e2, 1e3, 1e4, 1e5])
    miss = pk.expected_pass_at_k(k, dist=RapidDecay(c), complement=True)
    for kk, m in zip(k, miss):
        assert m == pytest.approx(rapid_decay_reference(kk, c), rel=1e-9, abs=0)
    ratio = np.log(miss) / pk.rapid_decay_log_miss(k, c, 1.0)
    assert np.all(np.diff(np.abs(ratio - 1)) < 0) and abs(ratio[-1] - 1) < 0.02
    for b in (1.0, 3.0):
        scaled = miss * k**b
        assert np.all(np.diff(scaled) < 0) and scaled[-1] < 1e-100


def test_rapid_decay_exponent_formula_general_alpha():
    """The leading term is −min_p (kp + c p^−α), checked by numeric minimisation."""
    from scipy.optimize import minimize_scalar
    for c, alpha, k in [(0.5, 2.0, 1e4), (2.0, 0.5, 1e6)]:
        r = minimize_scalar(lambda lp, k=k, c=c, alpha=alpha: k * math.exp(lp) + c * math.exp(-alpha * lp), bounds=(-30, 0), method="bounded",
                            options={"xatol": 1e-12})
        assert float(pk.rapid_decay_log_miss(k, c, alpha)) == pytest.approx(-r.fun, rel=1e-9)


# ----------------------------------------------------- shifted power law
@pytest.mark.parametrize("a,b,k0", [(2.0, 0.5, 3.0), (0.8, 1.2, 0.0), (5.0, 0.3, -0.5), (1.0, 0.7, 20.0)])
def test_shifted_power_law_exact_recovery(a, b, k0):
    """Noise-free G(k) at 20 log-spaced k in [1, 1024]: parameters recovered to 1e-6 (relative)."""
    k = np.unique(np.round(np.logspace(0, 10, 20, base=2)))
    fit = pk.fit_shifted_power_law(k, np.exp(-a * (k + k0) ** (-b)))
    assert fit.a == pytest.approx(a, rel=1e-6) and fit.b == pytest.approx(b, rel=1e-6)
    assert fit.k0 == pytest.approx(k0, rel=1e-6, abs=1e-6) and fit.mse < 1e-20
    np.testing.assert_allclose(fit(k), np.exp(-a * (k + k0) ** (-b)), atol=1e-9)


def test_shifted_power_law_noisy_recovery_within_4_se_and_honest_errors():
    """σ = 0.003 Gaussian noise: each fit within 4 reported standard errors of the truth, and
    over 30 seeds the z-scores have standard deviation in [0.6, 1.5] (errors are honest)."""
    a, b, k0 = 2.0, 0.5, 3.0
    k = np.arange(1, 257, 8.0)
    truth = np.exp(-a * (k + k0) ** (-b))
    z = []
    for seed in range(30):
        y = np.clip(truth + np.random.default_rng(seed).normal(0, 0.003, k.size), 0, 1)
        fit = pk.fit_shifted_power_law(k, y)
        zz = (np.array([fit.a, fit.b, fit.k0]) - [a, b, k0]) / np.array(fit.stderr)
        assert np.all(np.abs(zz) < 4), (seed, fit)
        z.append(zz)
    sd = np.std(z, axis=0)
    assert np.all((sd > 0.6) & (sd < 1.5)), sd


def test_shifted_power_law_beats_plain_power_law_on_beta_pass_at_k():
    """FADE App. 12.2: the shift lowers the MSE; on an exact Beta(0.5, 2) curve by > 3x."""
    k = np.unique(np.round(np.logspace(0, 8, 25, base=2)))
    y = pk.beta_pass_at_k(k, 0.5, 2.0)
    shifted, plain = pk.fit_shifted_power_law(k, y), pk.fit_shifted_power_law(k, y, k0=0.0)
    assert plain.k0 == 0.0 and plain.stderr[2] == 0.0
    assert shifted.mse * 3 < plain.mse and shifted.mse < 1e-5
    frame = shifted.to_frame()
    assert list(frame.parameter) == ["a", "b", "k0"] and frame.value.iloc[0] == shifted.a


def test_shifted_power_law_bad_input():
    with pytest.raises(ValueError, match="^k must hold at least 4"):
        pk.fit_shifted_power_law([1, 2, 3], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"^pass_at_k must contain only finite numbers >= 0 and <= 1"):
        pk.fit_shifted_power_law([1, 2, 3, 4], [0.1, 0.2, 0.3, 1.1])
    with pytest.raises(ValueError, match="^pass_at_k must have one value per k"):
        pk.fit_shifted_power_law([1, 2, 3, 4], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="^k0_bounds must be"):
        pk.fit_shifted_power_law([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], k0_bounds=(-2, 5))
    with pytest.raises(ValueError, match="^k0 must"):
        pk.shifted_power_law([1, 2], 1.0, 0.5, -1.0)


# ------------------------------------------------------------------ fits
def fisher_se(logpmf, theta, ns, P_per_n):
    """Standard errors from the expected Fisher information, via scipy.stats log-pmfs and
    central differences (independent of analysis.passk)."""
    theta = np.asarray(theta, float)
    info = np.zeros((theta.size, theta.size))
    for n, P in zip(ns, P_per_n):
        x = np.arange(n + 1)
        grads = []
        for j in range(theta.size):
            h = 1e-5 * max(abs(theta[j]), 1e-3)
            up, dn = theta.copy(), theta.copy()
            up[j] += h
            dn[j] -= h
            grads.append((logpmf(x, n, up) - logpmf(x, n, dn)) / (2 * h))
        g = np.array(grads)
        info += P * (g * np.exp(logpmf(x, n, theta))) @ g.T
    return np.sqrt(np.diag(np.linalg.inv(info)))


def bb_logpmf(x, n, th):
    return stats.betabinom.logpmf(x, n, th[0], th[1])


def mix_logpmf(x, n, th):
    w, a1, b1, a2, b2 = th
    return np.logaddexp(np.log(w) + stats.betabinom.logpmf(x, n, a1, b1),
                        np.log(1 - w) + stats.betabinom.logpmf(x, n, a2, b2))


@pytest.mark.parametrize("a,b,ns", [(0.4, 0.8, (16,)), (2.0, 3.0, (8, 16, 32)), (0.2, 0.3, (64,))])
def test_beta_binomial_mle_recovers_parameters_within_4_se(a, b, ns):
    rng = np.random.default_rng(7)
    P_each = 2000 // len(ns)
    n = np.repeat(ns, P_each)
    c = rng.binomial(n, rng.beta(a, b, n.size))
    fit = pk.fit_beta_binomial(c, n)
    se = fisher_se(bb_logpmf, (a, b), ns, [P_each] * len(ns))
    assert abs(fit.a - a) < 4 * se[0] and abs(fit.b - b) < 4 * se[1], (fit, se)
    assert fit.loglik == pytest.approx(stats.betabinom.logpmf(c, n, fit.a, fit.b).sum(), rel=1e-12)
    np.testing.assert_allclose(fit.pass_at_k([1, 10]), pk.beta_pass_at_k([1, 10], fit.a, fit.b))


def test_beta_binomial_mse_fit_of_an_exact_histogram_and_of_a_sample():
    """MSE (paper's criterion) on a histogram that equals the pmf to 1e-6 recovers (a, b) to 1e-3;
    on a sample it lands within 4 MLE standard errors and its histogram MSE <= the MLE's."""
    n, a, b = 16, 0.5, 1.5
    pmf = stats.betabinom.pmf(np.arange(n + 1), n, a, b)
    c = np.repeat(np.arange(n + 1), np.round(pmf * 1e6).astype(int))
    fit = pk.fit_beta_binomial(c, n, method="mse")
    assert fit.a == pytest.approx(a, rel=1e-3) and fit.b == pytest.approx(b, rel=1e-3) and fit.mse < 1e-12
    rng = np.random.default_rng(3)
    c = rng.binomial(n, rng.beta(a, b, 2000))
    mse_fit, mle_fit = pk.fit_beta_binomial(c, n, method="mse"), pk.fit_beta_binomial(c, n)
    se = fisher_se(bb_logpmf, (a, b), [n], [2000])
    assert abs(mse_fit.a - a) < 4 * se[0] and abs(mse_fit.b - b) < 4 * se[1]
    assert mse_fit.mse <= mle_fit.mse and mle_fit.loglik >= mse_fit.loglik
    hist = np.bincount(c, minlength=n + 1) / c.size
    ref_pmf = stats.betabinom.pmf(np.arange(n + 1), n, mse_fit.a, mse_fit.b)
    assert mse_fit.mse == pytest.approx(np.mean((hist - ref_pmf) ** 2), rel=1e-9, abs=0)


def synth_mixture(rng, P, n, w, a1, b1, a2, b2):
    z = rng.random(P) < w
    return rng.binomial(n, np.where(z, rng.beta(a1, b1, P), rng.beta(a2, b2, P)))


def test_beta_mixture_mle_recovers_parameters_within_4_se_without_label_switching():
    """Bimodal solve rates (FADE Fig. 10): w=0.4 of Beta(0.3, 3) and 0.6 of Beta(4, 1); 3000
    problems with n = 32.  Every parameter within 4 Fisher standard errors, for two seeds of the
    random starts and with the components given in the other order."""
    truth = (0.4, 0.3, 3.0, 4.0, 1.0)
    c = synth_mixture(np.random.default_rng(11), 3000, 32, *truth)
    se = fisher_se(mix_logpmf, truth, [32], [3000])
    fits = [pk.fit_beta_mixture(c, 32, seed=s, starts=4) for s in (0, 1)]
    for fit in fits:
        est = np.array([fit.w, fit.a1, fit.b1, fit.a2, fit.b2])
        assert np.all(np.abs(est - truth) < 4 * se), (est, se)
        assert fit.a1 / (fit.a1 + fit.b1) < fit.a2 / (fit.a2 + fit.b2)
        assert fit.loglik == pytest.approx(mix_logpmf(c, 32, est).sum(), rel=1e-12)
    assert fits[0].loglik == pytest.approx(fits[1].loglik, abs=1e-6)
    swapped = synth_mixture(np.random.default_rng(11), 3000, 32, 0.6, 4.0, 1.0, 0.3, 3.0)
    sf = pk.fit_beta_mixture(swapped, 32, starts=4)
    assert sf.a1 < 1 < sf.a2 and abs(sf.w - 0.4) < 4 * se[0]
    np.testing.assert_allclose(fits[0].pass_at_k([1, 64]),
                               pk.beta_pass_at_k([1, 64], [fits[0].a1, fits[0].a2], [fits[0].b1, fits[0].b2],
                                                 [fits[0].w, 1 - fits[0].w]))
    assert list(fits[0].to_frame().parameter) == ["w", "a1", "b1", "a2", "b2"]


def test_beta_mixture_mse_on_exact_histogram():
    truth = (0.35, 0.5, 4.0, 3.0, 0.8)
    n = 24
    pmf = np.exp(mix_logpmf(np.arange(n + 1), n, truth))
    c = np.repeat(np.arange(n + 1), np.round(pmf * 1e6).astype(int))
    fit = pk.fit_beta_mixture(c, n, method="mse", starts=2)
    np.testing.assert_allclose([fit.w, fit.a1, fit.b1, fit.a2, fit.b2], truth, rtol=2e-2)
    assert fit.mse < 1e-12


def test_fits_refuse_bad_input_and_degenerate_data_gives_finite_results():
    with pytest.raises(ValueError, match="^method must be"):
        pk.fit_beta_binomial([1, 2], 4, method="ls")
    with pytest.raises(ValueError, match="^successes must be integers in \\[0, n\\]"):
        pk.fit_beta_binomial([1, 5], 4)
    with pytest.raises(ValueError, match="^n must be a scalar or have one entry per problem"):
        pk.fit_beta_mixture([1, 2, 3], [4, 4])
    with pytest.raises(ValueError, match="needs the same n"):
        pk.fit_beta_binomial([1, 2], [4, 5], method="mse")
    with pytest.raises(ValueError, match="^seed must be"):
        pk.fit_beta_mixture([1, 2], 4, seed=-1)
    fit = pk.fit_beta_binomial(np.zeros(50, int), 8)  # every problem unsolved
    assert np.isfinite([fit.a, fit.b, fit.loglik]).all() and fit.a / (fit.a + fit.b) < 1e-3
    mix = pk.fit_beta_mixture(np.r_[np.zeros(30, int), np.full(30, 8)], 8, starts=1)
    assert np.isfinite([mix.w, mix.a1, mix.b1, mix.a2, mix.b2, mix.loglik, mix.mse]).all()


# ------------------------------------------------------------ subsampling
def hyper_moments(c, n, m, k):
    """Exact mean and variance of pass@k(m, C*, k), C* ~ Hypergeometric(n, c, m), per problem."""
    x = np.arange(m + 1)
    pmf = stats.hypergeom.pmf(x[None, :], n, np.asarray(c)[:, None], m)
    v = np.array([float(exact_pass(m, int(xx), k)) for xx in x])
    mean = pmf @ v
    return mean, pmf @ v**2 - mean**2


def test_subsample_average_is_the_full_unbiased_estimate_exactly():
    """Σ_x Hyp(x; n, c, m)·pass@k(m, x, k) = pass@k(n, c, k) in exact fractions (U-statistic)."""
    n, m = 12, 7
    for c in range(n + 1):
        for k in range(1, m + 1):
            tot = sum(Fraction(math.comb(c, x) * math.comb(n - c, m - x), math.comb(n, m)) * exact_pass(m, x, k)
                      for x in range(max(0, m - (n - c)), min(c, m) + 1))
            assert tot == exact_pass(n, c, k)


def test_subsample_pass_at_k_mean_and_variance_against_hypergeometric_moments():
    rng = np.random.default_rng(2)
    n, m, P, it = 40, 10, 25, 20_000
    c = rng.integers(0, n + 1, P)
    draws = pk.subsample_pass_at_k(c, n, [1, 4], m, iterations=it, seed=5)
    assert draws.shape == (2, it)
    for row, k in zip(draws, (1, 4)):
        mean, var = hyper_moments(c, n, m, k)
        sd = math.sqrt(var.sum()) / P
        assert abs(row.mean() - mean.mean()) < 4 * sd / math.sqrt(it)
        assert abs(row.mean() - pk.pass_at_k(n, c, k).mean()) < 4 * sd / math.sqrt(it)
        assert abs(row.std() / sd - 1) < 4 * math.sqrt(1 / (2 * (it - 1))) + 0.01  # + kurtosis allowance


def test_grouped_std_fade_app_11_2():
    """Groups of 2k answers: mean within 4 SE of the full estimate; std = exact hypergeometric sd
    (relative 4/sqrt(2·400) + 0.02); n = 2k leaves nothing to vary (std 0)."""
    rng = np.random.default_rng(4)
    n, P = 64, 30
    c = rng.integers(0, n + 1, P)
    df = pk.grouped_std(c, n, [1, 4, 16], seed=1)
    assert list(df.columns) == ["k", "group_size", "groups", "full", "mean", "std"]
    for r in df.itertuples():
        _, var = hyper_moments(c, n, 2 * r.k, r.k)
        sd = math.sqrt(var.sum()) / P
        assert r.full == pytest.approx(pk.pass_at_k(n, c, r.k).mean())
        assert abs(r.mean - r.full) < 4 * sd / math.sqrt(400)
        assert abs(r.std / sd - 1) < 4 / math.sqrt(800) + 0.02
    assert pk.grouped_std(c, n, 32).loc[0, "std"] < 1e-12
    with pytest.raises(ValueError, match=r"^k must be an integer in \[1, n/2\]"):
        pk.grouped_std(c, n, 33)


def test_bootstrap_se_matches_plug_in_standard_error():
    rng = np.random.default_rng(8)
    n, P, B = 32, 300, 4000
    c = rng.binomial(n, rng.beta(0.5, 1.0, P))
    df = pk.bootstrap_pass_at_k(c, n, [1, 8], n_boot=B, seed=3)
    for r in df.itertuples():
        v = pk.pass_at_k(n, c, r.k)
        plug_in = v.std() / math.sqrt(P)
        assert r.estimate == pytest.approx(v.mean())
        assert abs(r.se / plug_in - 1) < 4 / math.sqrt(2 * B)
        assert r.ci_low < r.estimate < r.ci_high
        assert (r.ci_high - r.ci_low) / (2 * 1.96 * plug_in) == pytest.approx(1, abs=0.08)
    again = pk.bootstrap_pass_at_k(c, n, [1, 8], n_boot=B, seed=3)
    pd.testing.assert_frame_equal(df, again)


def bootstrap_coverage(reps, P, seed):
    """Fraction of 95% intervals covering the population pass@k of Beta(0.5, 1.5) problems."""
    rng = np.random.default_rng(seed)
    truth = pk.beta_pass_at_k([1, 8], 0.5, 1.5)
    hits = np.zeros(2)
    for _ in range(reps):
        c = rng.binomial(16, rng.beta(0.5, 1.5, P))
        df = pk.bootstrap_pass_at_k(c, 16, [1, 8], n_boot=400, seed=rng)
        hits += (df.ci_low.to_numpy() <= truth) & (truth <= df.ci_high.to_numpy())
    return hits / reps


def test_bootstrap_coverage_small():
    cover = bootstrap_coverage(100, 150, 0)
    assert np.all(np.abs(cover - 0.95) < 4 * math.sqrt(0.95 * 0.05 / 100)), cover


@pytest.mark.slow
def test_bootstrap_coverage_large():
    cover = bootstrap_coverage(1000, 150, 1)
    assert np.all(np.abs(cover - 0.95) < 4 * math.sqrt(0.95 * 0.05 / 1000) + 0.005), cover


# ------------------------------------------------- paired subsampling test
def test_paired_test_statistic_matches_the_paper_description():
    """The paper's test: CI half-width = 1.96 × the exact sd of the m-out-of-n difference;
    rescaled: × sqrt(m/(n−m)); p < α ⇔ the CI excludes 0; identical data is never significant."""
    rng = np.random.default_rng(9)
    n, m, P = 64, 16, 40
    p = rng.beta(1, 1.5, P)
    ca, cb = rng.binomial(n, p), rng.binomial(n, np.clip(p + 0.05, 0, 1))
    res = pk.paired_subsampling_test(ca, cb, n, [1, 4], m, iterations=20_000, seed=1)
    scaled = pk.paired_subsampling_test(ca, cb, n, [1, 4], m, iterations=20_000, seed=1, rescale=True)
    for r, s in zip(res.itertuples(), scaled.itertuples()):
        va, vb = hyper_moments(ca, n, m, r.k)[1], hyper_moments(cb, n, m, r.k)[1]
        sd = math.sqrt(va.sum() + vb.sum()) / P
        assert r.difference == pytest.approx(pk.pass_at_k(n, ca, r.k).mean() - pk.pass_at_k(n, cb, r.k).mean())
        assert (r.ci_high - r.ci_low) / (2 * 1.96 * sd) == pytest.approx(1, abs=0.05)
        assert (s.ci_high - s.ci_low) / (2 * 1.96 * sd * math.sqrt(m / (n - m))) == pytest.approx(1, abs=0.05)
        assert (r.ci_low + r.ci_high) / 2 == pytest.approx(r.difference, abs=0.1 * sd)
        for t in (r, s):
            assert t.significant == (t.p_value < 0.05) == (not t.ci_low <= 0 <= t.ci_high)
    same = pk.paired_subsampling_test(ca, ca, n, [1, 4], m, iterations=2000, seed=2)
    assert (same.difference == 0).all() and not same.significant.any() and (same.p_value > 0.3).all()


def test_paired_test_bad_input():
    with pytest.raises(ValueError, match=r"^m must be an integer in \[k, n − 1\]"):
        pk.paired_subsampling_test([1, 2], [1, 2], 8, 1, 8)
    with pytest.raises(ValueError, match=r"^k must be an integer in \[1, m\]"):
        pk.paired_subsampling_test([1, 2], [1, 2], 8, 5, 4)
    with pytest.raises(ValueError, match="^successes_b must have one count per problem"):
        pk.paired_subsampling_test([1, 2], [1, 2, 3], 8, 1, 4)
    with pytest.raises(ValueError, match=r"^alpha must be a finite number > 0 and < 1"):
        pk.paired_subsampling_test([1, 2], [1, 2], 8, 1, 4, alpha=1.0)
    with pytest.raises(ValueError, match="^iterations must be"):
        pk.paired_subsampling_test([1, 2], [1, 2], 8, 1, 4, iterations=1)


def predicted_rate(pa, pb, n, m, rescale, alpha=0.05):
    """Normal theory for pass@1: the n-answer difference D ~ N(δ, s²), s² = Σ(p q)/n / P²; the test
    rejects when |D| > z·s·sqrt((n−m)/m) (paper) or |D| > z·s (rescaled)."""
    P = len(pa)
    s = math.sqrt(np.sum(pa * (1 - pa) + pb * (1 - pb)) / n) / P
    z = stats.norm.isf(alpha / 2) * (1 if rescale else math.sqrt((n - m) / m))
    d = np.mean(pa - pb) / s
    return stats.norm.cdf(d - z) + stats.norm.cdf(-d - z)


# (m, rescale, shift): the paper's test is conservative at m = n/4, near nominal at n/2, liberal at 3n/4
FAST = [(16, False, 0.0), (48, False, 0.0), (16, True, 0.0), (16, False, 0.04), (16, True, 0.04)]
SLOW = [(m, r, s) for m, r in [(16, False), (32, False), (48, False), (16, True)] for s in (0.0, 0.04)]


def check_rates(cases, reps, iterations, slack, seed):
    rng = np.random.default_rng(seed)
    n, P = 64, 30
    p = rng.beta(1, 1.5, P)
    for i, (m, rescale, shift) in enumerate(cases):
        pb = np.clip(p + shift, 0, 1)
        rate = pk.rejection_rate(pb, p, n, 1, m, reps=reps, iterations=iterations, rescale=rescale,
                                 seed=seed * 100 + i).rejection_rate.item()
        pred = predicted_rate(pb, p, n, m, rescale)
        tol = 4 * math.sqrt(max(pred * (1 - pred), 1 / reps) / reps) + slack * (shift > 0)
        assert abs(rate - pred) < tol, (m, rescale, shift, rate, pred, tol)


@pytest.mark.slow  # a power study: 200 replicates of the test (~5 s)
def test_subsampling_test_type_i_error_and_power_small():
    """n = 64 answers, 30 problems, 200 replicates: type-I error within 4 SE of normal theory
    (0.0007 for the paper's test at m = n/4, 0.26 at m = 3n/4, 0.05 rescaled); power at a
    0.04 shift too (+0.03 for the normal approximation with estimated variances).  The slow
    version adds m = n/2 (0.05) and uses 1000 replicates."""
    check_rates(FAST, reps=200, iterations=250, slack=0.03, seed=1)


@pytest.mark.slow
def test_subsampling_test_type_i_error_and_power_large():
    check_rates(SLOW, reps=1000, iterations=500, slack=0.02, seed=2)


@pytest.mark.slow
def test_rescaled_test_near_nominal_for_pass_at_4():
    rng = np.random.default_rng(3)
    p = rng.beta(1, 1.5, 30)
    df = pk.rejection_rate(p, p, 64, [1, 4], 16, reps=1000, iterations=500, rescale=True, seed=4)
    assert np.all(np.abs(df.rejection_rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / 1000) + 0.01), df


# -------------------------------------------------------------------- docs
def test_docs_examples_run():
    text = (ROOT / "docs" / "passk.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "docs/passk.md", "exec"), ns)  # noqa: S102
