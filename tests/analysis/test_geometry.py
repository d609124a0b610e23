"""analysis.geometry against dense float64 references (numpy's full SVD of the float64 upcast,
scipy's principal angles, sorting, bit-level ULP counts) and planted cases whose values are
known in closed form.

BLAS and torch run on one thread here (``single_thread``): on the shared 2-core machine under
load, two OpenBLAS threads made a 200 × 64 SVD take 0.8 s instead of 2 ms (measured); the
numbers do not depend on the thread count."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import torch

from analysis import geometry, spectra

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
TOL = 1e-9


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ helpers
def f64(W) -> np.ndarray:
    if isinstance(W, torch.Tensor):
        return W.detach().to("cpu", torch.float64).numpy()
    return np.asarray(W, dtype=np.float64)


def values(df: pd.DataFrame) -> dict:
    """``{(metric, param): value}`` (param NaN → None)."""
    return {(m, None if np.isnan(p) else float(p)): v for m, p, v in zip(df.metric, df.param, df.value)}


def baselines(df: pd.DataFrame) -> dict:
    return {(m, None if np.isnan(p) else float(p)): b for m, p, b in zip(df.metric, df.param, df.baseline)}


def pair(m: int, n: int, seed: int = 0, scale: float = 0.1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    s = np.geomspace(10.0, 0.1, min(m, n))          # distinct singular values with clear gaps
    U = np.linalg.qr(rng.standard_normal((m, min(m, n))))[0]
    V = np.linalg.qr(rng.standard_normal((n, min(m, n))))[0]
    Wb = (U * s) @ V.T
    Wr = Wb + scale * rng.standard_normal((m, n))
    return Wb.astype(dtype), Wr.astype(dtype)


def ref_energy(Wb, Wr, ks, svd_b=None):
    Wb, D = f64(Wb), f64(Wr) - f64(Wb)
    U, _, Vt = svd_b or np.linalg.svd(Wb, full_matrices=False)
    E = (D ** 2).sum()
    out = {}
    for k in ks:
        Uk, Vk = U[:, :k], Vt[:k].T
        left, right, both = ((Uk.T @ D) ** 2).sum() / E, ((D @ Vk) ** 2).sum() / E, ((Uk.T @ D @ Vk) ** 2).sum() / E
        diag = (np.einsum("ik,ij,jk->k", Uk, D, Vk) ** 2).sum() / E
        out.update({("energy_left", k): left, ("energy_right", k): right, ("energy_both", k): both,
                    ("diagonal", k): diag, ("rotation", k): 1 - diag, ("rotation_in_block", k): both - diag,
                    ("rotation_cross", k): left + right - 2 * both, ("outside", k): 1 - left - right + both})
    out[("delta_fro_norm", None)] = math.sqrt(E)
    return out


def ref_rotation(Wb, Wr, ks, svd_b=None):
    Ub, sb, Vbt = svd_b or np.linalg.svd(f64(Wb), full_matrices=False)
    Ur, sr, Vrt = np.linalg.svd(f64(Wr), full_matrices=False)
    out = {}
    for k in ks:
        for side, A, B in (("left", Ub[:, :k], Ur[:, :k]), ("right", Vbt[:k].T, Vrt[:k].T)):
            th = np.degrees(scipy.linalg.subspace_angles(A, B))
            out[(f"angle_{side}_max_deg", k)] = th.max()
            out[(f"angle_{side}_mean_deg", k)] = th.mean()
        out[("sv_drift", k)] = np.linalg.norm(sr[:k] - sb[:k]) / np.linalg.norm(sb[:k])
    return out


def ref_coordinates(Wb, Wr, top, mults, masks, q_upd, svd_b=None):
    b, d = f64(Wb), f64(Wr) - f64(Wb)
    N = d.size
    a = np.abs(d).ravel()
    E = (a ** 2).sum()
    srt = np.sort(a)[::-1]
    out = {}
    for q in top:
        K = max(1, math.ceil(q * N - 1e-9 * q * N))
        out[("top_energy_share", q)] = (srt[:K] ** 2).sum() / E
    rms_b = math.sqrt((b ** 2).mean())
    for c in mults:
        out[("density_above_rms", c)] = (a > c * rms_b).mean()
    if masks:
        K = max(1, math.ceil(q_upd * N - 1e-9 * q_upd * N))
        upd = (a >= srt[K - 1]) & (a > 0)
        out[("update_mask_density", q_upd)] = upd.mean()
        U, s, Vt = svd_b or np.linalg.svd(b, full_matrices=False)
        dmin = min(b.shape)
        for al in masks:
            r = max(1, int(math.floor(al * dmin + 1e-9)))
            score = np.abs((U[:, :r] * s[:r]) @ Vt[:r]).ravel()
            Km = max(1, math.ceil(al * N - 1e-9 * al * N))
            pm = score >= np.sort(score)[::-1][Km - 1]
            ab = np.abs(b).ravel()
            lm = ab <= np.sort(ab)[Km - 1]
            for name, M in (("principal", pm), ("low", lm)):
                inter = (M & upd).sum()
                out[(f"{name}_mask_density", al)] = M.mean()
                out[(f"update_in_{name}", al)] = inter / upd.sum() if upd.sum() else 0.0
                out[(f"{name}_updated", al)] = inter / M.sum()
                out[(f"jaccard_update_{name}", al)] = inter / (M | upd).sum()
            out[("principal_rank", al)] = r
    return out


def assert_match(got: dict, ref: dict, tol: float = TOL):
    for key, want in ref.items():
        assert key in got, key
        assert abs(got[key] - want) <= tol, (key, got[key], want)


# ---------------------------------------------------------- subspace energy
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (200, 64)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_energy_matches_dense(shape, dtype):
    Wb, Wr = pair(*shape, seed=1, dtype=dtype)
    ks = [1, 2, 5, 8, 30]
    out = geometry.subspace_energy(Wb, Wr, ks=ks)
    assert list(out.columns) == list(geometry.COLUMNS)
    assert_match(values(out), ref_energy(Wb, Wr, ks))
    m, n = shape
    base = baselines(out)
    for k in ks:
        assert base[("energy_left", k)] == k / m and base[("energy_right", k)] == k / n
        assert base[("energy_both", k)] == pytest.approx(k * k / (m * n), rel=1e-15)
        assert base[("diagonal", k)] == pytest.approx(k / (m * n), rel=1e-15)


def test_energy_planted_subspaces():
    rng = np.random.default_rng(3)
    m, n, k = 50, 20, 4
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    Wb = (U * np.arange(n, 0, -1.0)) @ V.T              # σ = 20, 19, …, 1
    M = rng.standard_normal((k, k))
    inside = U[:, :k] @ M @ V[:, :k].T                   # in the top-k block: energy 1 there
    outside = U[:, k:] @ rng.standard_normal((n - k, n - k)) @ V[:, k:].T
    diagonal = (U[:, :k] * rng.standard_normal(k)) @ V[:, :k].T
    left_only = U[:, :k] @ rng.standard_normal((k, n - k)) @ V[:, k:].T   # tilts the top-k subspaces
    for D, want in ((inside, {"energy_left": 1, "energy_right": 1, "energy_both": 1, "outside": 0}),
                    (outside, {"energy_left": 0, "energy_right": 0, "energy_both": 0, "outside": 1, "rotation": 1}),
                    (diagonal, {"energy_both": 1, "diagonal": 1, "rotation": 0, "rotation_in_block": 0}),
                    (left_only, {"energy_left": 1, "energy_right": 0, "rotation_cross": 1, "diagonal": 0})):
        got = values(geometry.subspace_energy(Wb, Wb + D, ks=[k]))
        for metric, v in want.items():
            assert got[(metric, k)] == pytest.approx(v, abs=1e-12), metric
    # inside the top-k block, the share of the diagonal is that of the diagonal of M
    got = values(geometry.subspace_energy(Wb, Wb + inside, ks=[k]))
    assert got[("diagonal", k)] == pytest.approx((np.diag(M) ** 2).sum() / (M ** 2).sum(), abs=1e-12)


def test_energy_rank_k_update_and_random_baseline():
    rng = np.random.default_rng(55)                     # not pair()'s stream: G independent of W_base
    Wb, _ = pair(200, 64, seed=5)
    U, s, Vt = np.linalg.svd(Wb, full_matrices=False)
    # a rank-2 update along u_1 v_3ᵀ and u_2 v_1ᵀ: left energy (top 2) 1, right energy (top 1) = share of the second
    D = 2.0 * np.outer(U[:, 0], Vt[2]) + 1.0 * np.outer(U[:, 1], Vt[0])
    got = values(geometry.subspace_energy(Wb, Wb + D, ks=[1, 2, 3]))
    assert got[("energy_left", 2)] == pytest.approx(1.0, abs=1e-12)
    assert got[("energy_left", 1)] == pytest.approx(0.8, abs=1e-12)
    assert got[("energy_right", 1)] == pytest.approx(0.2, abs=1e-12)
    assert got[("diagonal", 3)] == pytest.approx(0.0, abs=1e-12)
    # an isotropic Gaussian ΔW: each share is Beta(p·mn/2, (1−p)·mn/2), mean p, sd ≈ sqrt(2p(1−p)/(mn));
    # 5 sd (about 1 failure in 1.7 million seeds) for each of the fixed-seed draws below
    G = rng.standard_normal(Wb.shape)
    out = geometry.subspace_energy(Wb, Wb + G, ks=[1, 8, 16])
    N = Wb.size
    for metric, p, v in zip(out.metric, out.baseline, out.value):
        if metric in ("energy_left", "energy_right", "energy_both", "diagonal"):
            assert abs(v - p) <= 5 * math.sqrt(2 * p * (1 - p) / N) + 1e-12, (metric, v, p)


# --------------------------------------------------------- subspace rotation
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (200, 64)])
def test_rotation_matches_dense(shape):
    Wb, Wr = pair(*shape, seed=2, scale=0.05)
    ks = [1, 3, 8]
    assert_match(values(geometry.subspace_rotation(Wb, Wr, ks=ks)), ref_rotation(Wb, Wr, ks))


@pytest.mark.parametrize("theta_deg", [1e-4, 0.7, 30.0, 89.0])
def test_rotation_planted_angle(theta_deg):
    rng = np.random.default_rng(4)
    m, n, k = 60, 25, 4
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    s = np.geomspace(8.0, 0.5, n)
    t = math.radians(theta_deg)
    U2 = U.copy()                                       # u_1 turned towards u_{k+1} by θ
    U2[:, 0] = math.cos(t) * U[:, 0] + math.sin(t) * U[:, k]
    U2[:, k] = -math.sin(t) * U[:, 0] + math.cos(t) * U[:, k]
    s2 = s.copy()
    s2[:k] *= 1.01
    Wb, Wr = (U * s) @ V.T, (U2 * s2) @ V.T
    got = values(geometry.subspace_rotation(Wb, Wr, ks=[k]))
    assert got[("angle_left_max_deg", k)] == pytest.approx(theta_deg, rel=1e-9, abs=1e-11)
    assert got[("angle_left_mean_deg", k)] == pytest.approx(theta_deg / k, rel=1e-9, abs=1e-11)
    assert got[("angle_right_max_deg", k)] == pytest.approx(0.0, abs=1e-6)   # arcsin of rounding ~1e-15 rad
    assert got[("sv_drift", k)] == pytest.approx(0.01, rel=1e-12)


# -------------------------------------------------- coordinate concentration
@pytest.mark.parametrize("shape,block_rows", [((40, 30), None), ((200, 64), 37), ((30, 40), 7)])
def test_coordinates_match_dense(shape, block_rows):
    Wb, Wr = pair(*shape, seed=6, scale=0.02)
    top, mults, masks, q = (0.001, 0.01, 0.05, 0.5), (1e-3, 0.05, 0.2), (0.01, 0.05, 0.2), 0.05
    out = geometry.coordinate_concentration(Wb, Wr, top_fractions=top, rms_multiples=mults, mask_fractions=masks,
                                            update_fraction=q, block_rows=block_rows)
    assert_match(values(out), ref_coordinates(Wb, Wr, top, mults, masks, q))
    base = baselines(out)
    p_u = values(out)[("update_mask_density", q)]
    for al in masks:
        p_p = values(out)[("principal_mask_density", al)]
        assert base[("update_in_principal", al)] == p_p
        assert base[("jaccard_update_principal", al)] == pytest.approx(p_u * p_p / (p_u + p_p - p_u * p_p))


def test_coordinates_with_ties_and_every_radix_level(monkeypatch):
    """Integer-valued ΔW (massive ties at each threshold), and with the gather step disabled so
    that all three radix levels run: the same exact values."""
    rng = np.random.default_rng(7)
    Wb = rng.integers(-3, 4, size=(90, 50)).astype(np.float32) / 8
    Wr = Wb + rng.integers(-2, 3, size=Wb.shape).astype(np.float32) / 64
    args = dict(top_fractions=(0.001, 0.01, 0.05, 0.3), rms_multiples=(0.01, 0.1), mask_fractions=(0.02, 0.1),
                update_fraction=0.3)
    ref = ref_coordinates(Wb, Wr, args["top_fractions"], args["rms_multiples"], args["mask_fractions"], 0.3)
    assert_match(values(geometry.coordinate_concentration(Wb, Wr, block_rows=11, **args)), ref)
    monkeypatch.setattr(geometry, "_GATHER", 0)
    assert_match(values(geometry.coordinate_concentration(Wb, Wr, block_rows=11, **args)), ref)


def test_coordinates_planted_and_gaussian_baseline():
    rng = np.random.default_rng(8)
    Wb = rng.standard_normal((100, 100))
    D = np.zeros_like(Wb)
    D[np.ix_(rng.choice(100, 10, replace=False), rng.choice(100, 10, replace=False))] = 1.0   # 100 entries of 1
    got = values(geometry.coordinate_concentration(Wb, Wb + D, top_fractions=(0.001, 0.01), mask_fractions=()))
    assert got[("top_energy_share", 0.001)] == pytest.approx(0.1, abs=1e-15)
    assert got[("top_energy_share", 0.01)] == pytest.approx(1.0, abs=1e-15)
    # a Gaussian ΔW is near the large-N Gaussian baseline q + 2zφ(z); over 250,000 entries the
    # top-K energy sum has relative sd ≈ 1/sqrt(K)·O(1) ≲ 0.02 for K = 2,500 (q = 1 %): 0.1 relative is > 5 sd
    G = 1e-3 * rng.standard_normal((500, 500))
    W = rng.standard_normal((500, 500))
    out = geometry.coordinate_concentration(W, W + G, mask_fractions=(), rms_multiples=(1e-3,))
    for m_, v, b in zip(out.metric, out.value, out.baseline):
        if m_ in ("top_energy_share", "density_above_rms"):
            assert abs(v - b) <= 0.1 * b, (m_, v, b)


def test_masks_planted_overlaps():
    """An update on exactly the principal entries, and one on exactly the smallest entries."""
    rng = np.random.default_rng(9)
    Wb = np.outer(rng.standard_normal(40), rng.standard_normal(30)) + 1e-3 * rng.standard_normal((40, 30))
    U, s, Vt = np.linalg.svd(Wb)
    al = 0.1
    r = max(1, int(al * 30))
    score = np.abs((U[:, :r] * s[:r]) @ Vt[:r])
    K = math.ceil(al * Wb.size)
    top = score >= np.sort(score.ravel())[::-1][K - 1]
    got = values(geometry.coordinate_concentration(Wb, Wb + 1e-2 * top, mask_fractions=(al,), update_fraction=al))
    assert got[("update_in_principal", al)] == 1.0 and got[("jaccard_update_principal", al)] == 1.0
    low = np.abs(Wb) <= np.sort(np.abs(Wb).ravel())[K - 1]
    got = values(geometry.coordinate_concentration(Wb, Wb + 1e-2 * low, mask_fractions=(al,), update_fraction=al))
    assert got[("update_in_low", al)] == 1.0 and got[("low_updated", al)] == 1.0


def test_update_mask_jaccard_matches_dense():
    rng = np.random.default_rng(10)
    Wb = rng.standard_normal((60, 40))
    common = rng.standard_normal(Wb.shape)
    Wa = Wb + common + 0.5 * rng.standard_normal(Wb.shape)
    Wc = Wb + common + 0.5 * rng.standard_normal(Wb.shape)
    q = 0.05
    out = values(geometry.update_mask_jaccard(Wb, Wa, Wc, q, block_rows=9))
    K = math.ceil(q * Wb.size)
    ma = np.abs(Wa - Wb) >= np.sort(np.abs(Wa - Wb).ravel())[::-1][K - 1]
    mc = np.abs(Wc - Wb) >= np.sort(np.abs(Wc - Wb).ravel())[::-1][K - 1]
    assert out[("jaccard", q)] == pytest.approx((ma & mc).sum() / (ma | mc).sum(), abs=TOL)
    assert out[("density_a", q)] == ma.mean()
    assert geometry.jaccard_baseline(0.0, 0.0) == 1.0
    assert np.allclose(geometry.jaccard_baseline([0.1, 0.5], [0.2, 0.5]), [0.02 / 0.28, 0.25 / 0.75])


# --------------------------------------------------------------------- ULPs
def test_ulp_planted_bfloat16():
    rng = np.random.default_rng(11)
    base = torch.tensor(rng.uniform(1.0, 1.9, size=(30, 20)), dtype=torch.bfloat16)   # one binade: [1, 2)
    steps = torch.tensor(rng.choice([0, 1, 2, 3, 6, 11], size=base.shape, p=[.5, .2, .1, .1, .05, .05]))
    rl = base.clone()
    up = torch.full_like(base, 4.0)
    for _ in range(int(steps.max())):                  # j nextafter steps where steps > j
        rl = torch.where(steps > 0, torch.nextafter(rl, up), rl)
        steps = steps - 1
        steps.clamp_(min=0)
    steps = torch.tensor(rng.choice([0, 1, 2, 3, 6, 11], size=base.shape, p=[.5, .2, .1, .1, .05, .05]))
    out = values(geometry.ulp_histogram(base, base))
    assert out[("unchanged_share", None)] == 1.0
    # reference: ΔW / ulp(x) with ulp = 2^-7 in [1, 2) for bfloat16, by float arithmetic on exact values
    rl2 = base.clone()
    for j in range(11):
        rl2 = torch.where(steps > j, torch.nextafter(rl2, up), rl2)
    dist = ((rl2.double() - base.double()) / 2.0 ** -7).round().long().numpy().ravel()
    assert set(np.unique(dist)) <= {0, 1, 2, 3, 6, 11}
    got = values(geometry.ulp_histogram(base, rl2))
    N = dist.size
    assert got[("unchanged_share", None)] == (dist == 0).mean()
    assert got[("one_ulp_share", None)] == (dist == 1).mean()
    for edge, members in ((2, [2]), (4, [3, 4]), (8, [5, 6, 7, 8]), (16, list(range(9, 17)))):
        assert got[("ulp_share", float(edge))] == np.isin(dist, members).mean()
        assert got[("ulp_count", float(edge))] == np.isin(dist, members).sum()
    assert got[("max_ulp", None)] == dist.max() and got[("mean_ulp", None)] == pytest.approx(dist.mean())
    assert got[("exact_in_dtype", None)] == 1.0
    assert sum(v for (m_, _), v in got.items() if m_ == "ulp_share") == pytest.approx(1.0)
    assert N == 600


def test_ulp_exact_cases():
    bf = torch.bfloat16
    base = torch.tensor([[1 - 2 ** -8, 0.0, -0.0, 1.0, -1.0, 3.0]], dtype=bf)
    rl = torch.tensor([[1 + 2 ** -7, -0.0, torch.finfo(bf).tiny * 2 ** -7, -1.0, -1.0, 3.0]], dtype=bf)
    got = values(geometry.ulp_histogram(base, rl))
    # across the binade at 1: 2 steps; ±0: 0; −0 → smallest subnormal: 1; 1 → −1: 2·0x3F80 steps
    assert got[("ulp_count", 2.0)] == 1 and got[("ulp_count", 0.0)] == 3 and got[("ulp_count", 1.0)] == 1
    assert got[("max_ulp", None)] == 2 * 0x3F80
    # float32 input rounded to bfloat16: not exact; float32 ULPs of the same values
    x = np.array([[1.0, 1.0 + 2 ** -20]], dtype=np.float32)
    out = values(geometry.ulp_histogram(x, x[:, ::-1].copy(), "bfloat16"))
    assert out[("exact_in_dtype", None)] == 0.0 and out[("unchanged_share", None)] == 1.0
    out = values(geometry.ulp_histogram(x, x[:, ::-1].copy(), torch.float32))
    assert out[("ulp_count", 8.0)] == 2 and out[("max_ulp", None)] == 8   # 2^-20 / 2^-23
    assert list(geometry.ulp_bin_edges("float32")[-2:]) == [2 ** 31, 2 ** 32]


# -------------------------------------------------------------- intruders
def ref_intruders(Wb, A, B, s, k, side):
    Wt = f64(Wb) + s * f64(B) @ f64(A)
    U0, _, V0t = np.linalg.svd(f64(Wb), full_matrices=False)
    U1, s1, V1t = np.linalg.svd(Wt, full_matrices=False)
    X, Y = (U0, U1[:, :k]) if side == "left" else (V0t.T, V1t[:k].T)
    return np.abs(X.T @ Y).max(0), s1[:k]


@pytest.mark.parametrize("side", ["left", "right"])
def test_intruders_match_dense(side):
    rng = np.random.default_rng(12)
    Wb, _ = pair(50, 35, seed=12)
    B, A = rng.standard_normal((50, 4)), rng.standard_normal((4, 35))
    out = geometry.lora_intruders(Wb, A, B, scale=2.0, k=6, side=side, epsilons=(0.3, 0.6, 0.95))
    cos, s1 = ref_intruders(Wb, A, B, 2.0, 6, side)
    got = values(out)
    for j in range(6):
        assert got[("max_cos", j + 1.0)] == pytest.approx(cos[j], abs=TOL)
    for e in (0.3, 0.6, 0.95):
        assert got[("n_intruders", e)] == (cos < e).sum()
        assert got[("intruder_energy_share", e)] == pytest.approx((s1[cos < e] ** 2).sum() / (s1 ** 2).sum(), abs=TOL)


def test_intruders_planted():
    """A LoRA update along a direction spread evenly over 4 base directions (|cos| = 1/2 with each)
    and dominant: its top singular vector is an intruder at ε > 1/2 only; a small update is none."""
    rng = np.random.default_rng(13)
    m, n = 30, 20
    U = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n, n)))[0]
    Wb = (U * np.linspace(2.0, 1.0, n)) @ V.T
    y = U[:, :4].sum(1) / 2                               # |cos| = 1/2 with u_1 … u_4
    x = V[:, 5]
    out = values(geometry.lora_intruders(Wb, x[None, :], y[:, None], scale=100.0, k=1, epsilons=(0.45, 0.55)))
    assert out[("max_cos", 1.0)] == pytest.approx(0.5, abs=1e-3)    # perturbed by W_base / 100
    assert out[("n_intruders", 0.45)] == 0 and out[("n_intruders", 0.55)] == 1
    small = values(geometry.lora_intruders(Wb, x[None, :], y[:, None], scale=1e-6, k=3, epsilons=(0.9,)))
    assert small[("n_intruders", 0.9)] == 0


# -------------------------------------------------- the Gram (blocked) path
def test_large_gram_path_matches_dense():
    """5000 × 300 (1.5·10⁶ entries > 2^20): spectra's Gram path and several row blocks, against
    numpy's dense float64 SVD."""
    Wb, Wr = pair(5000, 300, seed=14, scale=0.01, dtype=np.float32)
    assert spectra.spectrum(Wb, 2, n_vectors=2).method == "gram"
    ks = [1, 8, 15]
    got = values(geometry.update_geometry(Wb, Wr, ks=ks, top_fractions=(0.01,), rms_multiples=(0.01,),
                                          mask_fractions=(0.01, 0.05), ulp_dtype=None, block_rows=1500))
    svd_b = np.linalg.svd(f64(Wb), full_matrices=False)
    ref = {**ref_energy(Wb, Wr, ks, svd_b), **ref_rotation(Wb, Wr, ks, svd_b),
           **ref_coordinates(Wb, Wr, (0.01,), (0.01,), (0.01, 0.05), 0.05, svd_b)}
    assert_match(got, ref)


# ---------------------------------------------------------- whole and edges
def test_update_geometry_equals_parts_and_zero_update():
    Wb, Wr = pair(40, 30, seed=15)
    whole = geometry.update_geometry(Wb, Wr, ks=[2, 5])
    parts = pd.concat([geometry.subspace_energy(Wb, Wr, ks=[2, 5]), geometry.subspace_rotation(Wb, Wr, ks=[2, 5]),
                       geometry.coordinate_concentration(Wb, Wr), geometry.ulp_histogram(Wb, Wr)], ignore_index=True)
    pd.testing.assert_frame_equal(whole.drop(columns="group"), parts)
    zero = geometry.update_geometry(Wb, Wb.copy())
    assert not zero.value.isna().any()
    v = values(zero)
    assert v[("energy_left", 1.0)] == 0.0 and v[("rotation", 8.0)] == 0.0 and v[("sv_drift", 8.0)] == 0.0
    assert v[("angle_left_max_deg", 8.0)] < 1e-11 and v[("top_energy_share", 0.01)] == 0.0
    assert v[("update_mask_density", 0.05)] == 0.0 and v[("jaccard_update_low", 0.05)] == 0.0
    assert v[("unchanged_share", None)] == 1.0


def test_torch_and_bfloat16_inputs_match_numpy():
    Wb, Wr = pair(40, 30, seed=16)
    tb, tr = torch.tensor(Wb).to(torch.bfloat16), torch.tensor(Wr).to(torch.bfloat16)
    got = values(geometry.update_geometry(tb, tr, ks=[1, 4]))
    ref = {**ref_energy(tb, tr, [1, 4]), **ref_rotation(tb, tr, [1, 4]),
           **ref_coordinates(tb, tr, (0.001, 0.01, 0.05), (1e-4, 1e-3, 1e-2), (0.01, 0.05), 0.05)}
    assert_match(got, ref)
    Wb0 = Wb.copy()
    geometry.update_geometry(Wb, Wr)            # inputs are never written to
    assert np.array_equal(Wb, Wb0)


@cuda
def test_cuda_matches_cpu():  # pragma: no cover - needs a GPU
    Wb, Wr = pair(200, 64, seed=17)
    cpu = geometry.update_geometry(Wb, Wr, device="cpu")
    gpu = geometry.update_geometry(torch.tensor(Wb).cuda(), torch.tensor(Wr).cuda())
    assert np.allclose(cpu.value, gpu.value, atol=1e-9)


@pytest.mark.parametrize("call,match", [
    (lambda W: geometry.subspace_energy(W, W[:, :-1]), "W_rl must have the shape of W_base"),
    (lambda W: geometry.subspace_energy(W, W, ks=[0]), "ks must contain only integers >= 1 and <= 6"),
    (lambda W: geometry.subspace_rotation(W, W, ks=[7]), "ks must contain only integers >= 1 and <= 6"),
    (lambda W: geometry.subspace_energy(W.astype(np.int64), W), "W_base must be a floating-point matrix"),
    (lambda W: geometry.subspace_energy(W, torch.tensor(W, dtype=torch.complex64)), "W_rl must be a floating"),
    (lambda W: geometry.subspace_energy(W[0], W[0]), "W_base must be a 2-D matrix"),
    (lambda W: geometry.subspace_energy(np.zeros_like(W), W), "W_base is the zero matrix"),
    (lambda W: geometry.subspace_rotation(W, np.zeros_like(W)), "W_rl is the zero matrix"),
    (lambda W: geometry.subspace_energy(W, W, method="qr"), "method must be one of"),
    (lambda W: geometry.ulp_histogram(W, W, "int8"), "dtype must be one of"),
    (lambda W: geometry.ulp_histogram(W, W * 1e300, "bfloat16"), "W_rl must be finite and within the range"),
    (lambda W: geometry.coordinate_concentration(W, W, mask_fractions=[0.0]), "mask_fractions must contain"),
    (lambda W: geometry.coordinate_concentration(W, W, top_fractions=[1.5]), "top_fractions must contain"),
    (lambda W: geometry.coordinate_concentration(W, W, update_fraction=0), "update_fraction must be"),
    (lambda W: geometry.coordinate_concentration(W, W * np.nan), "W_base and W_rl must contain only finite"),
    (lambda W: geometry.update_mask_jaccard(W, W, W[:-1]), "W_rl_b must have the shape of W_base"),
    (lambda W: geometry.lora_intruders(W, np.ones((2, 6)), np.ones((8, 3)), k=2), "B \\(m × r\\) and A \\(r × n\\)"),
    (lambda W: geometry.lora_intruders(W, np.ones((2, 6)), np.ones((8, 2)), k=7), "k must be an integer >= 1"),
    (lambda W: geometry.lora_intruders(W, np.ones((2, 6)), np.ones((8, 2)), k=2, side="up"), "side must be one"),
    (lambda W: geometry.jaccard_baseline(1.2, 0.1), "p_a must contain only"),
])
def test_bad_input(call, match):
    W = np.random.default_rng(0).standard_normal((8, 6))
    with pytest.raises(ValueError, match=match):
        call(W)


# ------------------------------------ coordinates: sampled brackets, one pass, radix fallback
def _spy_select(monkeypatch) -> list:
    """Record the targets handed to the radix select (the fallback of the bracketed path)."""
    calls: list = []
    real = geometry._select

    def spy(targets, passes, N):
        calls.append(len(targets))
        return real(targets, passes, N)

    monkeypatch.setattr(geometry, "_select", spy)
    return calls


CASES = {
    # name: (W_base, W_rl): continuous; integer-valued (walls of ties in |W_base| and |ΔW|); ΔW = 0 on 90 %
    "continuous": lambda rng: pair(300, 200, seed=21, scale=0.02),
    "ties": lambda rng: ((B := rng.integers(-3, 4, size=(300, 200)).astype(np.float32) / 8),
                         B + rng.integers(-2, 3, size=B.shape).astype(np.float32) / 64),
    "mostly_unchanged": lambda rng: ((B := rng.standard_normal((300, 200))),
                                     B + (rng.random(B.shape) < 0.1) * rng.standard_normal(B.shape)),
}
ARGS = dict(top_fractions=(0.001, 0.01, 0.05, 0.3), rms_multiples=(0.01, 0.1), mask_fractions=(0.02, 0.1),
            update_fraction=0.2)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("force", ["none", "miss", "cap"])
def test_coordinates_bracketed_path_equals_sorting(monkeypatch, case, force):
    """60,000 entries sampled 2,000 at a time (brackets from the sample, one counting pass), against
    numpy's sort of all entries (``ref_coordinates``); ``force``: brackets that miss every threshold
    (``_BRACKET_Z`` < 0) or hold too many distinct values (``_HIST_CAP``): the radix-select fallback,
    the same numbers.  Without forcing, the fallback must not run (the bracketed path answers)."""
    Wb, Wr = CASES[case](np.random.default_rng(20))
    monkeypatch.setattr(geometry, "_SAMPLE", 2000)
    if force == "miss":
        monkeypatch.setattr(geometry, "_BRACKET_Z", -40.0)
    elif force == "cap":
        monkeypatch.setattr(geometry, "_HIST_CAP", 3)
    calls = _spy_select(monkeypatch)
    got = values(geometry.coordinate_concentration(Wb, Wr, block_rows=37, **ARGS))
    assert_match(got, ref_coordinates(Wb, Wr, ARGS["top_fractions"], ARGS["rms_multiples"], ARGS["mask_fractions"],
                                      ARGS["update_fraction"]))
    if force == "none":
        assert calls == []
    else:
        assert calls and calls[0] >= 1


def test_coordinates_all_equal_and_zero_update(monkeypatch):
    """All-equal ``|W_base|`` (the low mask is a tie of every entry) and ``ΔW = 0`` in the sampled
    path: the documented values (every share, density and overlap 0; the low mask holds all)."""
    monkeypatch.setattr(geometry, "_SAMPLE", 500)
    Wb = np.full((120, 90), 0.25)
    Wb[::2] *= -1.0                                             # |W_base| all equal, rank 1
    got = values(geometry.coordinate_concentration(Wb, Wb.copy(), mask_fractions=(0.05,), rms_multiples=(0.1,)))
    assert got[("top_energy_share", 0.01)] == 0.0 and got[("density_above_rms", 0.1)] == 0.0
    assert got[("update_mask_density", 0.05)] == 0.0 and got[("low_mask_density", 0.05)] == 1.0
    assert got[("update_in_low", 0.05)] == 0.0 and got[("jaccard_update_low", 0.05)] == 0.0
    D = np.zeros_like(Wb)
    D[3, :10] = 1.0                                             # 10 of 10,800 entries change, by 1
    got = values(geometry.coordinate_concentration(Wb, Wb + D, mask_fractions=(0.05,), update_fraction=0.05))
    assert got[("update_mask_density", 0.05)] == pytest.approx(10 / Wb.size, abs=0)   # d > 0 only
    assert got[("top_energy_share", 0.001)] == 1.0                # K = 11 ≥ 10 changed entries
    assert got[("low_updated", 0.05)] == pytest.approx(10 / Wb.size, abs=1e-15)


def test_bracket_holds_the_rank_and_resolves_exactly():
    """``_bracket`` from a sample of 2^14 of 10^6 values brackets the K-th largest (the sorted
    truth) for K across the range; the exact sample gives lo = hi = t."""
    rng = np.random.default_rng(22)
    x = torch.from_numpy(rng.standard_normal(10 ** 6) ** 2)
    srt = torch.sort(x, descending=True).values
    idx = torch.from_numpy(rng.integers(0, x.numel(), 1 << 14))
    for K in (1, 10, 1000, 10 ** 5, 5 * 10 ** 5, 10 ** 6):
        lo, hi = geometry._bracket(torch.sort(x[idx], descending=True).values, K, x.numel(), exact=False)
        assert lo <= float(srt[K - 1]) <= hi, K
    small = torch.sort(x[:1000], descending=True).values
    assert geometry._bracket(small, 7, 1000, exact=True) == (float(small[6]),) * 2


# --------------------------------------------------- gram32 spectra of large float32 matrices
def test_gram32_vectors_accuracy(monkeypatch):
    """Above ``_GRAM32_MIN`` entries (lowered here) a float32 pair gets spectra's ``"gram32"``; its
    vectors against numpy's float64 SVD (2,000 × 500, Gaussian ``W_base``: the flat spectrum of the
    hard case).  Bounds: energy shares 1e-8, angles 1e-5 degrees, sv_drift 1e-9 relative — 10× the
    errors measured at 4,000 × 1,000 (6e-10, 1.4e-6°, 1.4e-11; update_geometry's docstring); the
    float64 paths stay at 1e-9 (the tests above)."""
    monkeypatch.setattr(geometry, "_GRAM32_MIN", 1 << 16)
    rng = np.random.default_rng(23)
    Wb = (0.02 * rng.standard_normal((2000, 500))).astype(np.float32)
    Wr = (Wb + 1e-3 * rng.standard_normal(Wb.shape)).astype(np.float32)
    assert geometry.geometry_base_spectrum(Wb, ks=[1, 8, 25]).method == "gram32"
    ks = [1, 8, 25]
    got = values(geometry.update_geometry(Wb, Wr, ks=ks, mask_fractions=(), ulp_dtype=None))
    svd_b = np.linalg.svd(f64(Wb), full_matrices=False)
    for key, want in {**ref_energy(Wb, Wr, ks, svd_b), **ref_rotation(Wb, Wr, ks, svd_b)}.items():
        if key[0].startswith("angle"):
            assert abs(got[key] - want) <= 1e-5, key
        elif key[0] == "sv_drift":
            assert got[key] == pytest.approx(want, rel=1e-9), key
        else:
            assert abs(got[key] - want) <= 1e-8, key
    monkeypatch.setattr(geometry, "_GRAM32_MIN", 1 << 22)
    assert geometry.geometry_base_spectrum(Wb, ks=[1, 8, 25]).method == "svd"   # 10^6 ≤ 2^20 entries: dense


def test_base_spectrum_given_is_used():
    Wb, Wr = pair(60, 40, seed=24)
    sb = geometry.geometry_base_spectrum(Wb, ks=[2, 5])
    a = geometry.update_geometry(Wb, Wr, ks=[2, 5])
    b = geometry.update_geometry(Wb, Wr, ks=[2, 5], base_spectrum=sb)
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(ValueError, match="at least 5 singular vectors"):
        geometry.update_geometry(Wb, Wr, ks=[2, 5], base_spectrum=geometry.geometry_base_spectrum(Wb, ks=[1]))


def test_spectra_with_workers_equal_one_thread(monkeypatch):
    """``workers=2``: the ``"gram32"`` Gram passes split over two threads give the same rows (the
    partial sums do not depend on the threads), and ``geometry_spectra`` reuses a given base."""
    monkeypatch.setattr(geometry, "_GRAM32_MIN", 1 << 16)
    Wb, Wr = pair(600, 300, seed=25, scale=0.01, dtype=np.float32)
    one = geometry.update_geometry(Wb, Wr, ulp_dtype=None)
    two = geometry.update_geometry(Wb, Wr, ulp_dtype=None, workers=2)
    pd.testing.assert_frame_equal(one, two)
    sb, sr = geometry.geometry_spectra(Wb, Wr, workers=2)
    assert sb.method == sr.method == "gram32"
    sb2, sr2 = geometry.geometry_spectra(Wb, Wr, base_spectrum=sb)
    assert sb2 is sb and np.array_equal(sr2.u, sr.u)
