"""analysis.spectra against independent references: numpy.linalg.svd (float64 LAPACK on the
float64 upcast of the input), mpmath's SVD at 50 digits for graded spectra, the direct
formulas of every metric evaluated on numpy's singular values, matrices with planted
spectra, and the numbers of FADE's Sec. 5 table."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from analysis import spectra
from analysis.spectra import Spectrum

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# ------------------------------------------------------------------ helpers
def planted(m: int, n: int, s, seed: int = 0) -> np.ndarray:
    """W = U diag(s) Vᵀ with random orthonormal U (m × r), V (n × r)."""
    rng = np.random.default_rng(seed)
    s = np.asarray(s, dtype=float)
    U = np.linalg.qr(rng.standard_normal((m, s.size)))[0]
    V = np.linalg.qr(rng.standard_normal((n, s.size)))[0]
    return (U * s) @ V.T


def make(kind: str, m: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = min(m, n)
    if kind == "gaussian":
        return rng.standard_normal((m, n))
    if kind == "lowrank_noise":  # σ = 30, 10, 5 planted + noise of σ ≈ 1e-3·(√m + √n)
        return planted(m, n, [30.0, 10.0, 5.0], seed) + 1e-3 * rng.standard_normal((m, n))
    if kind == "rank_deficient":  # exact rank 5 (up to the rounding of the product)
        return rng.standard_normal((m, 5)) @ rng.standard_normal((5, n))
    if kind == "gap_1e6":  # σ1/σ2 = 1e6
        return planted(m, n, np.r_[1.0, 1e-6 * np.linspace(1.0, 0.5, d - 1)], seed)
    raise KeyError(kind)


def as_f64(W) -> np.ndarray:
    """The input's values in float64 (exact for every supported dtype)."""
    if isinstance(W, torch.Tensor):
        return W.detach().to("cpu", torch.float64).numpy()
    return np.asarray(W, dtype=np.float64)


def ref_svd(W):
    return np.linalg.svd(as_f64(W), full_matrices=False)


def ref_sv(W) -> np.ndarray:
    return np.linalg.svd(as_f64(W), compute_uv=False)


def mp_sv(W: np.ndarray) -> np.ndarray:
    """Singular values at 50 significant digits (mpmath), descending."""
    with mpmath.workdps(50):
        s = mpmath.svd_r(mpmath.matrix(np.asarray(W, float).tolist()), compute_uv=False)
        return np.sort(np.array([float(x) for x in s]))[::-1]


def srank_direct(s: np.ndarray, delta: float) -> int:
    """FADE Fig. 5: min{k : Σ_{i≤k} s_i / Σ_i s_i ≥ 1 − δ}, by a plain loop."""
    total = sum(float(x) for x in s)
    acc = 0.0
    for k, x in enumerate(s, start=1):
        acc += float(x)
        if acc / total >= 1 - delta:
            return k
    return len(s)


KINDS = ("gaussian", "lowrank_noise", "rank_deficient", "gap_1e6")


# ------------------------------------------------- singular values vs numpy
@pytest.mark.parametrize("method", ["svd", "gram"])
@pytest.mark.parametrize("container", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(120, 24), (24, 120)], ids=["tall", "wide"])
@pytest.mark.parametrize("kind", KINDS)
def test_singular_values_match_numpy(kind, shape, dtype, container, method):
    """Every σ_i within 1e-13·σ_1 of float64 LAPACK on the same values (float32 inputs are
    taken as exact); σ_2 of the σ1/σ2 = 1e6 matrix to 1e-8 relative."""
    W = make(kind, *shape, seed=3).astype(dtype)
    if container == "torch":
        W = torch.from_numpy(W)
    ref = ref_sv(W)
    s = spectra.singular_values(W, method=method, device="cpu")
    assert s.shape == ref.shape and s.dtype == np.float64
    np.testing.assert_allclose(s, ref, rtol=0, atol=1e-13 * ref[0])
    if kind == "gap_1e6":
        assert ref[0] / ref[1] > 0.9e6
        assert abs(spectra.s1_s2(W, method=method) / (ref[0] / ref[1]) - 1) < 1e-8


def test_auto_uses_gram_above_2_20_entries_and_matches_numpy():
    W = make("lowrank_noise", 4200, 256, seed=1).astype(np.float32)  # 1,075,200 entries
    spec = spectra.spectrum(W, n_vectors=2)
    assert spec.method == "gram"
    ref = ref_sv(W)
    np.testing.assert_allclose(spec.s, ref, rtol=0, atol=1e-13 * ref[0])
    assert spectra.spectrum(W[:4000]).method == "svd"  # 1,024,000 ≤ 2^20


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("smallest,bound", [(1e-12, 2e-15), (1e-15, 1e-14)])
def test_graded_spectrum_against_mpmath(smallest, bound, transpose):
    """σ = 1 … 1e-12 or 1e-15 (16 values): refined Gram has LAPACK-like absolute accuracy
    (measured 3e-16·σ_1 and 2e-15·σ_1; one refinement level only: 6e-15 and 3e-13); the raw
    Gram eigenvalues lose everything below ~1e-8·σ_1."""
    W = planted(80, 16, np.logspace(0, np.log10(smallest), 16), seed=1)
    W = W.T.copy() if transpose else W
    truth = mp_sv(W)
    refined = spectra.singular_values(W, method="gram")
    raw = spectra.singular_values(W, method="gram", refine=False)
    lapack = spectra.singular_values(W, method="svd")
    assert np.max(np.abs(refined - truth)) < bound * truth[0]
    assert np.max(np.abs(lapack - truth)) < 1e-15 * truth[0]
    assert np.max(np.abs(raw - truth)) < 1e-7 * truth[0]      # documented raw accuracy
    assert np.max(np.abs(raw - truth)) > 1e-11 * truth[0]     # ... and the refinement matters
    big = truth > 1e-3 * truth[0]
    assert np.max(np.abs(refined - truth)[big] / truth[big]) < 1e-12


def test_rank_deficient_zeros_are_at_the_noise_floor():
    W = make("rank_deficient", 300, 40, seed=2)
    s = spectra.singular_values(W, method="gram")
    assert np.all(s[5:] < 1e-14 * s[0])
    assert np.all(s[:5] > 1e-3 * s[0])
    assert np.max(spectra.singular_values(W, method="gram", refine=False)[5:]) > 1e-11 * s[0]


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
def test_top_k_and_exact_frobenius(method):
    W = make("lowrank_noise", 200, 50, seed=4)
    ref = ref_sv(W)
    spec = spectra.spectrum(W, k=3, method=method)
    assert len(spec.s) == 3 and not spec.complete
    np.testing.assert_allclose(spec.s, ref[:3], rtol=1e-10)
    fro2 = float(np.sum(W**2))
    assert spec.fro_norm**2 == pytest.approx(fro2, rel=1e-13)   # not Σ of the top 3
    assert spectra.rank1_fraction(spec) == pytest.approx(ref[0] ** 2 / fro2, rel=1e-10)
    assert spectra.rank1_fraction(W, method=method) == pytest.approx(ref[0] ** 2 / fro2, rel=1e-10)


@pytest.mark.parametrize("shape", [(300, 40), (40, 300)])
def test_randomized_matches_numpy_and_is_seeded(shape):
    W = make("lowrank_noise", *shape, seed=5).astype(np.float32)
    ref = ref_sv(W)
    a = spectra.singular_values(W, k=3, method="randomized", seed=7)
    b = spectra.singular_values(W, k=3, method="randomized", seed=7)
    c = spectra.singular_values(W, k=3, method="randomized", seed=torch.Generator().manual_seed(7))
    d = spectra.singular_values(W, k=3, method="randomized", seed=8)
    np.testing.assert_allclose(a, ref[:3], rtol=1e-9)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    np.testing.assert_allclose(d, ref[:3], rtol=1e-9)
    # no power iteration on a flat spectrum: visibly approximate, so the iterations matter
    G = make("gaussian", 300, 40, seed=5)
    rough = spectra.singular_values(G, k=3, method="randomized", n_iter=0, n_oversamples=2)
    assert np.max(np.abs(rough - ref_sv(G)[:3]) / ref_sv(G)[:3]) > 1e-3


# ----------------------------------------------------------------- vectors
@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("shape", [(150, 30), (30, 150)], ids=["tall", "wide"])
@pytest.mark.parametrize("kind", ["lowrank_noise", "gap_1e6"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leading_vectors_match_numpy_up_to_sign(kind, shape, method, dtype):
    W = make(kind, *shape, seed=6).astype(dtype)
    U, s_ref, Vt = ref_svd(W)
    r = 2 if kind == "lowrank_noise" else 1          # gaps: 30/10/5 and 1/1e-6
    u, s, v = spectra.leading_vectors(W, r, method=method)
    assert u.shape == (shape[0], r) and v.shape == (shape[1], r) and s.shape == (r,)
    for i in range(r):
        assert abs(u[:, i] @ U[:, i]) > 1 - 1e-6
        assert abs(v[:, i] @ Vt[i]) > 1 - 1e-6
        j = np.argmax(np.abs(u[:, i]))
        assert u[j, i] > 0 and np.all(np.abs(u[:j, i]) < abs(u[j, i]))   # sign convention
    np.testing.assert_allclose(s, s_ref[:r], rtol=1e-10)
    W64 = as_f64(W)
    assert np.max(np.abs(W64 @ v - u * s)) < 1e-12 * s_ref[0]           # W v = σ u
    np.testing.assert_allclose(u.T @ u, np.eye(r), atol=1e-12)


def test_sign_convention_is_deterministic_under_negation():
    W = make("lowrank_noise", 100, 20, seed=7)
    u1, _, v1 = spectra.leading_vectors(W, 3)
    u2, _, v2 = spectra.leading_vectors(-W, 3)
    np.testing.assert_allclose(u1, u2, atol=1e-12)      # u is sign-normalised ...
    np.testing.assert_allclose(v1, -v2, atol=1e-12)     # ... so v carries the sign of W


# ------------------------------------------------------------- dtypes, I/O
@pytest.mark.parametrize("method", ["svd", "gram"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_upcast(dtype, method):
    W = torch.from_numpy(make("lowrank_noise", 200, 30, seed=8)).to(dtype)
    ref = ref_sv(W)                      # numpy on the exact float64 values of the half matrix
    s = spectra.singular_values(W, method=method)
    np.testing.assert_allclose(s, ref, rtol=0, atol=1e-13 * ref[0])
    Wn = W.to(torch.float16).numpy() if dtype == torch.float16 else None
    if Wn is not None:                   # numpy float16 too
        np.testing.assert_allclose(spectra.singular_values(Wn, method=method), ref, rtol=0, atol=1e-13 * ref[0])


def test_integer_bool_readonly_strided_and_list_inputs():
    rng = np.random.default_rng(9)
    Wi = rng.integers(-5, 6, size=(30, 12))
    np.testing.assert_allclose(spectra.singular_values(Wi), ref_sv(Wi), atol=1e-12)
    Wb = Wi > 0
    np.testing.assert_allclose(spectra.singular_values(Wb, method="gram"), ref_sv(Wb), atol=1e-12)
    W = rng.standard_normal((40, 9))
    W.setflags(write=False)
    np.testing.assert_allclose(spectra.singular_values(W), ref_sv(W), atol=1e-13)
    for view in (W[::-1], W[:, ::2], W.T, np.asfortranarray(W)):
        np.testing.assert_allclose(spectra.singular_values(view, method="gram"), ref_sv(view), atol=1e-13)
    np.testing.assert_allclose(spectra.singular_values(W.tolist()), ref_sv(W), atol=1e-13)


@pytest.mark.parametrize("transpose", [False, True])
def test_many_small_blocks_equal_one_block(transpose):
    W = make("lowrank_noise", 97, 13, seed=10)
    W = W.T if transpose else W
    a = spectra.spectrum(W, method="gram", block_rows=7, n_vectors=2)
    b = spectra.spectrum(W, method="gram", n_vectors=2)
    np.testing.assert_allclose(a.s, b.s, rtol=1e-13)
    np.testing.assert_allclose(a.u, b.u, atol=1e-12)
    assert a.fro_norm**2 == pytest.approx(float(np.sum(W**2)), rel=1e-14)


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_extreme_magnitudes_do_not_overflow(method, scale):
    W = make("lowrank_noise", 60, 20, seed=11)
    base = spectra.spectrum(W, k=3, method=method)
    big = W * scale
    before = big.copy()
    spec = spectra.spectrum(big, k=3, method=method)
    np.testing.assert_allclose(spec.s, base.s * scale, rtol=1e-12)
    assert spec.fro_norm == pytest.approx(base.fro_norm * scale, rel=1e-12)
    assert spectra.rank1_fraction(spec) == pytest.approx(spectra.rank1_fraction(base), rel=1e-12)
    assert np.array_equal(big, before)                 # the input is never written to


def scaled_reference(W: np.ndarray) -> tuple[np.ndarray, float]:
    """numpy's SVD of ``W·2**e`` (entries in [0.5, 1)) mapped back by ``2**-e``, and ‖W‖_F
    the same way: the reference for magnitudes whose squares leave the float64 range."""
    e = -math.frexp(float(np.max(np.abs(W))))[1]
    A = np.ldexp(W, e)
    s = np.linalg.svd(A, compute_uv=False)
    return np.ldexp(s, -e), math.ldexp(float(np.sqrt(np.sum(A * A))), -e)


def magnitude_case(name: str) -> np.ndarray:
    G = make("lowrank_noise", 40, 12, seed=23)
    if name == "subnormal":          # every entry below 2.2e-308 (a few ulps of 5e-324 apart)
        return np.round(G / np.max(np.abs(G)) * 1000) * 5e-324
    if name == "deep_subnormal":     # integers times the smallest float64
        return np.arange(1.0, 7.0).reshape(2, 3) * 5e-324
    if name == "tiny":
        return G * 1e-200
    if name == "huge":
        return G * 1e200
    if name == "near_max":           # ‖W‖_F just below the largest float64
        return G / np.linalg.norm(G) * 1.7e308
    if name == "mixed":              # rows from 1e200 down to subnormal: the small ones are negligible
        return G * np.array([1e200, 1e150, 1.0, 1e-200, 1e-310] * 8)[:, None]
    raise KeyError(name)


MAGNITUDES = ("subnormal", "deep_subnormal", "tiny", "huge", "near_max", "mixed")


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("name", MAGNITUDES)
def test_extreme_magnitudes_match_numpy_on_the_rescaled_matrix(name, method):
    W = magnitude_case(name)
    ref, fro = scaled_reference(W)
    k = 2 if method == "randomized" else None
    for src in (W, torch.from_numpy(W)):
        spec = spectra.spectrum(src, k, n_vectors=1, method=method)
        n = len(spec.s)
        # absolute accuracy ~1e-13·σ_1 (module docs); results below 2.2e-308 are subnormal: their
        # last digits are the representation's (2 ulps = 1e-323)
        np.testing.assert_allclose(spec.s, ref[:n], rtol=1e-9 if method == "randomized" else 1e-12,
                                   atol=max(1e-323, 1e-13 * ref[0]))
        assert spec.fro_norm == pytest.approx(fro, rel=1e-13, abs=1e-323)
        assert np.all(np.isfinite(spec.u)) and np.all(np.isfinite(spec.v))
        assert np.linalg.norm(spec.u[:, 0]) == pytest.approx(1.0, rel=1e-9)
    if name not in ("subnormal", "deep_subnormal"):   # metrics: finite and as for the rescaled matrix
        base = spectra.spectrum(np.ldexp(W, -math.frexp(float(np.max(np.abs(W))))[1]), k, method=method)
        assert spectra.rank1_fraction(spec) == pytest.approx(spectra.rank1_fraction(base), rel=1e-10)
        assert spectra.s1_s2(spec) == pytest.approx(spectra.s1_s2(base), rel=1e-9)


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("name", ["subnormal", "tiny", "huge", "mixed"])
def test_extreme_magnitudes_on_the_torch_code_path(torch_path, name, method):
    W = magnitude_case(name)
    ref, fro = scaled_reference(W)
    k = 2 if method == "randomized" else None
    spec = spectra.spectrum(torch.from_numpy(W), k, method=method, block_rows=7)
    np.testing.assert_allclose(spec.s, ref[:len(spec.s)], rtol=1e-9 if method == "randomized" else 1e-12,
                               atol=max(1e-323, 1e-13 * ref[0]))
    assert spec.fro_norm == pytest.approx(fro, rel=1e-13, abs=1e-323)


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
def test_norm_beyond_float64_is_refused_with_the_number(method):
    W = np.full((3, 3), 1.7e308)      # every entry finite, ‖W‖_F = 5.1e308 is not a float64
    with pytest.raises(ValueError, match=r"^W is too large: its Frobenius norm is about 2\^1025\.\d, beyond "
                                         r"the largest float64 \(1\.798e\+308\)"):
        spectra.spectrum(W, k=1 if method == "randomized" else None, method=method)


def test_zero_matrix():
    Z = np.zeros((5, 3))
    assert np.array_equal(spectra.singular_values(Z), np.zeros(3))
    assert np.array_equal(spectra.singular_values(Z, method="gram"), np.zeros(3))
    for fn in (spectra.rank1_fraction, spectra.s1_s2, spectra.stable_rank, spectra.effective_rank,
               spectra.srank, spectra.summary):
        with pytest.raises(ValueError, match=r"^W is the zero matrix"):
            fn(Z)
    with pytest.raises(ValueError, match=r"^n_vectors must be 0 for the zero matrix"):
        spectra.spectrum(Z, n_vectors=1)


# ------------------------------------------- metrics vs the direct formulas
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(90, 25), (25, 90)])
def test_metrics_against_direct_formulas_on_numpy_sigma(kind, shape):
    W = make(kind, *shape, seed=12)
    s = ref_sv(W)
    fro2 = np.linalg.norm(W, "fro") ** 2
    deltas = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.9]
    assert spectra.s1_s2(W) == pytest.approx(s[0] / s[1], rel=1e-9)
    assert spectra.rank1_fraction(W) == pytest.approx(s[0] ** 2 / fro2, rel=1e-12)
    assert spectra.stable_rank(W) == pytest.approx(fro2 / s[0] ** 2, rel=1e-12)
    assert spectra.effective_rank(W) == pytest.approx(math.exp(stats.entropy(s)), rel=1e-9)
    assert list(spectra.srank(W, deltas)) == [srank_direct(s, dl) for dl in deltas]
    given_s = Spectrum.from_singular_values(s)   # the same formulas on numpy's own σ
    assert list(spectra.srank(given_s, deltas)) == [srank_direct(s, dl) for dl in deltas]
    assert spectra.effective_rank(given_s) == pytest.approx(math.exp(stats.entropy(s)), rel=1e-12)


def test_srank_hand_computed_and_vectorised():
    spec = Spectrum.from_singular_values([1.0, 3.0, 2.0])        # sorted: 3, 2, 1 (sum 6)
    assert spectra.srank(spec, 0.5) == 1                           # 3/6 = 0.5 ≥ 0.5
    assert spectra.srank(spec, 0.2) == 2                           # 5/6 ≥ 0.8 > 3/6
    assert spectra.srank(spec, 0.1) == 3
    out = spectra.srank(spec, np.array([[0.5, 0.2], [0.1, 0.9]]))
    assert out.shape == (2, 2) and out.tolist() == [[1, 2], [3, 1]]
    assert spectra.srank(Spectrum.from_singular_values(np.ones(4)), 0.25) == 3   # tie: 3/4 ≥ 0.75
    eye = np.eye(40)                                               # srank_δ(I_n) = ⌈n(1−δ)⌉
    for dl in (0.01, 0.1, 0.33, 0.5):
        assert spectra.srank(eye, dl) == math.ceil(40 * (1 - dl) - 1e-9)
    assert spectra.effective_rank(eye) == pytest.approx(40.0, rel=1e-12)  # Roy-Vetterli: = rank
    assert spectra.effective_rank(planted(30, 10, [2.0] * 4)) == pytest.approx(4.0, rel=1e-9)
    assert spectra.stable_rank(planted(30, 10, [2.0] * 4)) == pytest.approx(4.0, rel=1e-9)


def test_rank_one_matrix():
    rng = np.random.default_rng(13)
    W = np.outer(rng.standard_normal(50), rng.standard_normal(20))
    assert spectra.rank1_fraction(W) == pytest.approx(1.0, abs=1e-14)
    assert spectra.rank1_fraction(W) <= 1.0 and spectra.stable_rank(W) >= 1.0
    assert spectra.s1_s2(W) > 1e12
    assert spectra.s1_s2(np.ones((1, 7))) == math.inf                       # d = 1
    assert spectra.s1_s2(Spectrum.from_singular_values([2.0, 0.0])) == math.inf


FADE_SEC5_TABLE = [  # (H*, step, s1/s2, rank-1 %) of FADE Sec. 5, Qwen 2.5 7B output head
    (0.5, "10k", 4.10, 38.7), (0.5, "33k", 3.84, 54.4), (1.0, "10k", 3.51, 55.9),
    (1.0, "40k", 5.34, 88.2), (1.3, "10k", 3.25, 68.3), (1.3, "30k", 5.77, 91.2),
]


@pytest.mark.parametrize("row", FADE_SEC5_TABLE, ids=lambda r: f"H{r[0]}-{r[1]}")
def test_fade_sec5_numbers_are_consistent_and_read_back(row):
    """FADE's rank-1 % is r_1 = σ1²/‖W‖_F² ≤ ρ²/(1+ρ²) with ρ = s1/s2 (each row satisfies the
    bound); a 512 × 64 matrix with σ = (ρ, 1, c, …, c) chosen to have the row's (ρ, r_1) is
    read back by summary to 1e-9."""
    _, _, rho, pct = row
    r1 = pct / 100
    assert r1 <= rho**2 / (1 + rho**2)
    n = 64
    c = math.sqrt((rho**2 / r1 - rho**2 - 1) / (n - 2))
    assert c <= 1
    W = planted(512, n, [rho, 1.0] + [c] * (n - 2), seed=14)
    out = spectra.summary(W, method="gram")
    assert out["s1_s2"] == pytest.approx(rho, rel=1e-9)
    assert out["rank1_fraction"] == pytest.approx(r1, rel=1e-9)


def test_summary_dict_and_frame():
    W = make("lowrank_noise", 80, 30, seed=15)
    s = ref_sv(W)
    out = spectra.summary(W, deltas=(0.01, 0.1))
    assert list(out) == ["rows", "cols", "method", "n_singular_values", "fro_norm", "s1", "s2", "s1_s2",
                         "rank1_fraction", "stable_rank", "effective_rank", "srank_0.01", "srank_0.1"]
    assert out["srank_0.1"] == srank_direct(s, 0.1) and out["s1"] == pytest.approx(s[0], rel=1e-12)
    assert out["fro_norm"] == pytest.approx(np.linalg.norm(W), rel=1e-13)
    df = spectra.summary(W, as_frame=True)
    assert list(df.columns) == ["metric", "value"] and "srank_0.01" in set(df.metric)
    top = spectra.summary(W, k=2)
    assert "srank_0.01" not in top and "effective_rank" not in top
    assert top["rank1_fraction"] == pytest.approx(out["rank1_fraction"], rel=1e-12)
    spec = spectra.spectrum(W)
    assert spectra.summary(spec) == spectra.summary(W)
    assert spectra.summary(W, deltas=0.05)["srank_0.05"] == srank_direct(s, 0.05)


# ---------------------------------------------------------- property tests
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)
matrices = hnp.arrays(np.float64, st.tuples(st.integers(1, 7), st.integers(1, 7)), elements=finite)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(W=matrices, method=st.sampled_from(["svd", "gram"]),
       c=st.floats(1e-3, 1e3).flatmap(lambda x: st.sampled_from([x, -x])))
def test_properties(W, method, c):
    assume(np.max(np.abs(W)) > 1e-6)
    d = min(W.shape)
    s = spectra.singular_values(W, method=method)
    fro2 = float(np.sum(W**2))
    assert s.shape == (d,) and np.all(s >= 0) and np.all(np.diff(s) <= 0)
    assert float(np.sum(s**2)) == pytest.approx(fro2, rel=1e-12)                 # Σσ² = ‖W‖_F²
    r1 = spectra.rank1_fraction(W, method=method)
    assert 0 < r1 <= 1 and r1 >= 1 / d - 1e-12
    np.testing.assert_allclose(spectra.singular_values(W.T, method=method), s, rtol=0, atol=1e-12 * s[0])
    np.testing.assert_allclose(spectra.singular_values(c * W, method=method), abs(c) * s, rtol=0,
                               atol=1e-12 * abs(c) * s[0])
    assert spectra.rank1_fraction(c * W.T, method=method) == pytest.approx(r1, rel=1e-10, abs=1e-12)
    spec = spectra.spectrum(W, method=method)
    assert 1 <= spectra.srank(spec, 0.01) <= d
    assert 1 - 1e-9 <= spectra.effective_rank(spec) <= d + 1e-9
    assert spectra.s1_s2(spec) >= 1


# --------------------------------------------------------------- bad input
BAD = [
    (lambda: spectra.singular_values(np.ones(5)), r"^W must be a 2-D matrix"),
    (lambda: spectra.singular_values(np.ones((2, 2, 2))), r"^W must be a 2-D matrix"),
    (lambda: spectra.singular_values(torch.ones(3)), r"^W must be a 2-D matrix"),
    (lambda: spectra.singular_values(np.ones((0, 3))), r"^W must be non-empty"),
    (lambda: spectra.singular_values(np.ones((2, 2), complex)), r"^W must be a real numeric"),
    (lambda: spectra.singular_values(torch.ones(2, 2, dtype=torch.complex64)), r"^W must be real"),
    (lambda: spectra.singular_values(np.array([["a", "b"]])), r"^W must be a real numeric"),
    (lambda: spectra.singular_values(np.array([[1.0, np.nan]])), r"^W must contain only finite"),
    (lambda: spectra.singular_values(np.array([[1.0, np.inf], [0, 1]]), method="gram"), r"^W must contain only finite"),
    (lambda: spectra.singular_values(np.array([[1.0, -np.inf]], np.float32), k=1, method="randomized"),
     r"^W must contain only finite"),
    (lambda: spectra.singular_values(torch.tensor([[1.0, float("nan")]], dtype=torch.bfloat16), method="gram"),
     r"^W must contain only finite"),
    (lambda: spectra.singular_values(np.eye(3), k=0), r"^k must be an integer >= 1 and <= 3"),
    (lambda: spectra.singular_values(np.eye(3), k=4), r"^k must be an integer >= 1 and <= 3"),
    (lambda: spectra.singular_values(np.eye(3), k=1.5), r"^k must be an integer"),
    (lambda: spectra.singular_values(np.eye(3), k=True), r"^k must be an integer"),
    (lambda: spectra.singular_values(np.eye(3), method="lanczos"), r"^method must be one of"),
    (lambda: spectra.singular_values(np.eye(3), method="randomized"), r"^k is required"),
    (lambda: spectra.singular_values(np.eye(3), device="tpu"), r"^device must be"),
    (lambda: spectra.singular_values(np.eye(3), n_iter=-1, k=1, method="randomized"), r"^n_iter must be"),
    (lambda: spectra.singular_values(np.eye(3), block_rows=0), r"^block_rows must be"),
    (lambda: spectra.singular_values(np.eye(3), refine="yes"), r"^refine must be"),
    (lambda: spectra.spectrum(np.eye(3), n_vectors=4), r"^n_vectors must be an integer >= 0 and <= 3"),
    (lambda: spectra.spectrum(np.eye(3), k=1, n_vectors=2), r"^n_vectors must be an integer >= 0 and <= 1"),
    (lambda: spectra.leading_vectors(np.eye(3), 0), r"^r must be an integer >= 1 and <= 3"),
    (lambda: spectra.leading_vectors(spectra.spectrum(np.eye(3)), 1), r"^W is a Spectrum without"),
    (lambda: spectra.srank(np.eye(3), 0.0), r"^delta must contain only finite numbers > 0 and < 1"),
    (lambda: spectra.srank(np.eye(3), 1.0), r"^delta must contain only finite numbers > 0 and < 1"),
    (lambda: spectra.srank(np.eye(3), [0.1, -0.1]), r"^delta must contain only finite numbers > 0 and < 1"),
    (lambda: spectra.srank(np.eye(3), float("nan")), r"^delta must contain only finite numbers > 0 and < 1"),
    (lambda: spectra.srank(np.eye(3), "x"), r"^delta must be a numeric array"),
    (lambda: spectra.summary(np.eye(3), deltas=(0.1, 1.5)), r"^deltas must contain only finite numbers > 0 and < 1"),
    (lambda: spectra.srank(spectra.spectrum(np.eye(3), k=2)), r"^W must carry the full spectrum"),
    (lambda: spectra.srank(np.eye(3), k=2), r"^k cannot be passed"),
    (lambda: spectra.rank1_fraction(spectra.spectrum(np.eye(3)), method="gram"), r"^options \['method'\]"),
    (lambda: Spectrum.from_singular_values([1.0, -1.0]), r"^s must contain only finite numbers >= 0"),
    (lambda: Spectrum.from_singular_values([1.0], shape=(3, 3)), r"^fro_norm is required"),
    (lambda: Spectrum.from_singular_values([2.0], shape=(3, 3), fro_norm=1.0), r"^fro_norm must be"),
]


@pytest.mark.parametrize("call,match", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_refused_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_integer_arguments_follow_the_shared_policy():
    """k, n_vectors, r, n_iter, block_rows, seed: integral floats and numpy integers are
    integers, bool is not (rlvr_plumbing.checks)."""
    W = np.diag([3.0, 2.0, 1.0])
    for k in (2, 2.0, np.int64(2), np.float64(2)):
        np.testing.assert_allclose(spectra.singular_values(W, k=k), [3.0, 2.0])
    u, s, v = spectra.leading_vectors(W, np.int32(1))
    assert s.tolist() == [3.0] and spectra.leading_vectors(W, 1.0)[1].tolist() == [3.0]
    spec = spectra.spectrum(W, k=2.0, n_vectors=1.0, method="randomized", n_iter=2.0, n_oversamples=np.int64(1),
                            seed=np.int64(3), block_rows=2.0)
    np.testing.assert_allclose(spec.s, [3.0, 2.0], rtol=1e-12)
    for bad in (True, np.bool_(True), 2.5, "2", float("nan")):
        with pytest.raises(ValueError, match=r"^k must be an integer"):
            spectra.singular_values(W, k=bad)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got True"):
        spectra.spectrum(W, k=1, method="randomized", seed=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_cuda_refused_without_cuda():
    with pytest.raises(ValueError, match=r"^device 'cuda' requested but CUDA is not available"):
        spectra.singular_values(np.eye(3), device="cuda")
    assert spectra.resolve_device("auto").type == "cpu"


def test_progress_bar_runs(capsys):
    W = make("gaussian", 50, 10)
    np.testing.assert_allclose(spectra.singular_values(W, method="gram", progress=True, block_rows=8),
                               ref_sv(W), atol=1e-12)


# ------------------------------------- the torch (CUDA) code path, on the CPU
@pytest.fixture
def torch_path(monkeypatch):
    """Run the code path used on CUDA (torch arrays, torch.linalg) with CPU tensors."""
    monkeypatch.setattr(spectra, "_TORCH_ON_CPU", True)


@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("kind", ["lowrank_noise", "gap_1e6", "rank_deficient"])
@pytest.mark.parametrize("shape", [(150, 30), (30, 150)], ids=["tall", "wide"])
def test_torch_code_path_matches_numpy(torch_path, kind, shape, method):
    W = torch.from_numpy(make(kind, *shape, seed=18)).to(torch.float32)
    U, ref, Vt = ref_svd(W)
    k = (1 if kind == "gap_1e6" else 3) if method == "randomized" else None   # top-k with a gap after k
    spec = spectra.spectrum(W, k, n_vectors=1, method=method, block_rows=16)
    n = len(spec.s)
    tol = 1e-10 * ref[0] if method == "randomized" else 1e-13 * ref[0]
    np.testing.assert_allclose(spec.s, ref[:n], rtol=0, atol=tol)
    assert abs(spec.u[:, 0] @ U[:, 0]) > 1 - 1e-6 and abs(spec.v[:, 0] @ Vt[0]) > 1 - 1e-6
    assert spec.fro_norm == pytest.approx(np.linalg.norm(as_f64(W)), rel=1e-13)


def test_torch_code_path_graded_nan_scale_and_half(torch_path):
    W = planted(80, 16, np.logspace(0, -12, 16), seed=1)
    truth = mp_sv(W)
    assert np.max(np.abs(spectra.singular_values(torch.from_numpy(W), method="gram") - truth)) < 1e-14
    with pytest.raises(ValueError, match=r"^W must contain only finite"):
        spectra.singular_values(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), method="gram")
    big = make("lowrank_noise", 60, 20, seed=11)
    ref = ref_sv(big)
    np.testing.assert_allclose(spectra.singular_values(big * 1e200, method="gram"), ref * 1e200, rtol=1e-12)
    Wb = torch.from_numpy(make("lowrank_noise", 200, 30, seed=8)).to(torch.bfloat16)
    np.testing.assert_allclose(spectra.singular_values(Wb, method="gram"), ref_sv(Wb), rtol=0,
                               atol=1e-13 * ref_sv(Wb)[0])
    Wu = np.random.default_rng(19).integers(0, 1000, size=(40, 12)).astype(np.uint16)[::-1]
    np.testing.assert_allclose(spectra.singular_values(Wu, method="gram"), ref_sv(Wu), rtol=1e-13)
    Wl = big.astype(np.longdouble)          # no torch dtype: converted block by block
    np.testing.assert_allclose(spectra.singular_values(Wl, method="svd"), ref, rtol=1e-13)


# --------------------------------------------------------------------- GPU
@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("method", ["svd", "gram", "randomized"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cuda_matches_cpu(method, dtype):
    W = torch.from_numpy(make("lowrank_noise", 3000, 400, seed=16)).to(dtype)
    k = 3 if method == "randomized" else None
    cpu = spectra.spectrum(W, k, n_vectors=2, method=method, device="cpu")
    for src in (W, W.cuda()):                               # host input streamed, device input
        gpu = spectra.spectrum(src, k, n_vectors=2, method=method, device="cuda")
        np.testing.assert_allclose(gpu.s, cpu.s, rtol=0, atol=1e-12 * cpu.s[0])
        np.testing.assert_allclose(gpu.u, cpu.u, atol=1e-8)
        np.testing.assert_allclose(gpu.v, cpu.v, atol=1e-8)
    assert spectra.resolve_device("auto", W.cuda()).type == "cuda"


@pytest.mark.gpu
@cuda
def test_cuda_graded_spectrum_and_auto_device():
    W = planted(3000, 400, np.logspace(0, -12, 400), seed=17)
    ref = ref_sv(W)
    s = spectra.singular_values(torch.from_numpy(W).cuda(), method="gram")
    np.testing.assert_allclose(s, ref, rtol=0, atol=1e-13)
    assert spectra.spectrum(W).method == "gram"             # 1.2M entries: auto → gram, on CUDA


def test_resolve_device_is_the_one_of_analysis_runtime():
    from rlvr_plumbing import runtime

    assert spectra.resolve_device is runtime.resolve_device
