"""rlvr_theory.rank1 against simulation (FADE App. 15.1-15.2).

Token gradients ``A v ⊗ h`` are drawn from concrete models whose population quantities
are known in closed form; ``r1`` of the summed update is measured with numpy.linalg.svd
(independent of the code under test) and compared with the predicted limit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr_theory import rank1

V, D = 6, 5  # vocabulary, hidden size; u1 = e_0 of R^D


def token_model(rng, *, hypothesis_holds: bool):
    """A softmax head with fixed π; token y ~ π, A = +1 on tokens {0, 1} ("correct"), −1 otherwise.

    v = e_y − π;  h = α·u1 + μ_y + noise,  α ~ N(1.5, 1),  μ_y ⊥ u1,  noise ~ N(0, I) ⊥ u1.
    Population:  a = E[Aαv] = 1.5·Σ_y π_y A_y (e_y − π),   R = Σ_y π_y A_y (e_y − π) ⊗ μ_y.
    With ``hypothesis_holds`` the μ_y are projected so that aᵀR = 0 and u1 is the top right
    singular vector of E[g] = a ⊗ u1 + R (Prop. 15.1's hypothesis).
    """
    logits = rng.normal(size=V)
    pi = np.exp(logits) / np.exp(logits).sum()
    A_y = np.where(np.arange(V) < 2, 1.0, -1.0)
    err = np.eye(V) - pi  # rows e_y − π
    a = 1.5 * (pi * A_y) @ err
    M = rng.normal(size=(V, D - 1)) * 0.6
    if hypothesis_holds:
        c = pi * A_y * (err @ a)
        M = M - np.outer(c, c @ M) / (c @ c)
    mu = np.concatenate([np.zeros((V, 1)), M], axis=1)
    R = np.einsum("y,yv,yd->vd", pi * A_y, err, mu)
    return {"pi": pi, "A_y": A_y, "mu": mu, "a": a, "R": R}


def simulate_r1(rng, mdl, sizes, reps):
    """r1 of W = Σ_{i<=N} A_i v_i ⊗ h_i for each N in ``sizes`` (nested prefixes), ``reps`` runs."""
    rows, W, start = [], np.zeros((reps, V, D)), 0
    for N in sizes:
        n = N - start
        y = np.searchsorted(np.cumsum(mdl["pi"]), rng.random((reps, n)) * (1 - 1e-15))
        h = mdl["mu"][y] + np.concatenate([np.zeros((reps, n, 1)), rng.normal(size=(reps, n, D - 1))], -1)
        h[..., 0] += 1.5 + rng.normal(size=(reps, n))
        Ah = mdl["A_y"][y][..., None] * h
        onehot = (y[..., None] == np.arange(V)).astype(float)
        W += np.einsum("rnv,rnd->rvd", onehot, Ah) - mdl["pi"][None, :, None] * Ah.sum(1)[:, None, :]
        s = np.linalg.svd(W, compute_uv=False)
        rows.append(s[:, 0] ** 2 / (s**2).sum(-1))
        start = N
    return np.array(rows)  # [len(sizes), reps]


def population_r1(mdl):
    """σ1²/‖·‖_F² of the population gradient E[g] = a ⊗ u1 + R, by SVD."""
    G = np.outer(mdl["a"], np.eye(D)[0]) + mdl["R"]
    s = np.linalg.svd(G, compute_uv=False)
    return s[0] ** 2 / (s**2).sum()


def test_prop_15_1_simulated_r1_converges_at_rate_one_over_sqrt_N():
    rng = np.random.default_rng(11)
    mdl = token_model(rng, hypothesis_holds=True)
    limit = float(rank1.rank1_limit(mdl["a"], mdl["R"]))
    # the construction satisfies the hypothesis: Eq. 33 equals the SVD of the population gradient
    assert limit == pytest.approx(population_r1(mdl), rel=1e-12)
    assert 0.5 < limit < 0.95
    sizes = 2 ** np.arange(8, 17, 2)
    reps = 32
    r1 = simulate_r1(rng, mdl, sizes, reps)
    rms = np.sqrt(((r1 - limit) ** 2).mean(1))
    slope = np.polyfit(np.log(sizes), np.log(rms), 1)[0]
    assert -0.65 < slope < -0.35, (rms, slope)
    assert rms[-1] < 0.006
    err = r1[-1] - limit
    assert abs(err.mean()) <= 4 * err.std(ddof=1) / math.sqrt(reps)


def test_eq33_is_only_a_lower_bound_when_u1_is_not_the_top_singular_vector():
    rng = np.random.default_rng(12)
    mdl = token_model(rng, hypothesis_holds=False)
    eq33, exact = float(rank1.rank1_limit(mdl["a"], mdl["R"])), population_r1(mdl)
    assert exact > eq33 + 0.1
    r1 = simulate_r1(rng, mdl, [2**15], 16)[0]
    se = r1.std(ddof=1) / 4
    assert abs(r1.mean() - exact) <= 4 * se + 2e-3
    assert r1.mean() > eq33 + 0.1


def test_rank1_limit_values_and_broadcasting():
    a = np.array([3.0, 4.0])  # ‖a‖² = 25
    R = np.zeros((2, 3))
    R[0, 1] = 5.0  # ‖R‖² = 25
    assert float(rank1.rank1_limit(a, R)) == 0.5
    assert float(rank1.rank1_limit(a, np.zeros((2, 3)))) == 1.0
    out = rank1.rank1_limit(np.stack([a, 2 * a]), R)
    np.testing.assert_allclose(out, [0.5, 100 / 125])


# ---------------------------------------------------------- Corollary 15.2
def orthogonal_modes(rng, K, c, mu, *, d=20, orthogonal=True):
    w = rng.normal(size=(K, V))
    w *= c / np.linalg.norm(w, axis=1, keepdims=True)
    if orthogonal:
        basis = np.linalg.qr(rng.normal(size=(d, K)))[0].T  # K orthonormal rows
    else:  # one shared signal direction and overlapping means
        w[:] = w[0]
        basis = rng.normal(size=(K, d)) + 2.0
        basis /= np.linalg.norm(basis, axis=1, keepdims=True)
    return w, mu * basis


def test_mode_residual_closed_form_on_orthogonal_modes():
    rng = np.random.default_rng(13)
    for K in (1, 2, 3, 8, 16):
        w, means = orthogonal_modes(rng, K, c=1.7, mu=0.8)
        direct = sum(np.outer(w[k], means[k]) for k in range(K)) / K
        RF = rank1.mode_residual(w, means)
        np.testing.assert_allclose(RF, direct, atol=1e-14)
        assert np.sum(RF**2) == pytest.approx(float(rank1.mode_residual_norm_sq(1.7, 0.8, K)), rel=1e-12)
    # without orthogonal means the formula does not hold
    w, means = orthogonal_modes(rng, 8, c=1.7, mu=0.8, orthogonal=False)
    assert np.sum(rank1.mode_residual(w, means) ** 2) > 1.5 * float(rank1.mode_residual_norm_sq(1.7, 0.8, 8))


def test_cor_15_2_residual_shrinks_as_one_over_K_by_simulation():
    """Tokens: mode k ~ U{K}, A v = w_k + noise, h⊥ = μ_k + noise (independent).  The unbiased
    estimate ⟨R̂_1, R̂_2⟩_F of ‖R_F‖² (two independent halves) matches c²μ²/K within 4 SE."""
    rng = np.random.default_rng(14)
    c, mu, d, n, reps = 1.0, 1.0, 20, 2000, 40
    for K in (1, 2, 4, 8, 16):
        w, means = orthogonal_modes(rng, K, c, mu, d=d)
        k = rng.integers(0, K, size=(reps, 2, n))
        Av = w[k] + rng.normal(size=(reps, 2, n, V))
        h = means[k] + rng.normal(size=(reps, 2, n, d))
        Rhat = np.einsum("rhnv,rhnd->rhvd", Av, h) / n
        est = np.sum(Rhat[:, 0] * Rhat[:, 1], axis=(-2, -1))
        target = float(rank1.mode_residual_norm_sq(c, mu, K))
        assert abs(est.mean() - target) <= 4 * est.std(ddof=1) / math.sqrt(reps), (K, est.mean(), target)


# ---------------------------------------------------------------- App. 15.2
def test_clt_ratio_paper_number():
    assert float(rank1.clt_residual_ratio(8968, 54700)) == pytest.approx(0.40, abs=0.005)
    np.testing.assert_allclose(rank1.clt_residual_ratio([1, 4], [4, 1]), [0.5, 2.0])


def test_clt_ratio_against_simulated_group_residuals():
    """Null model of App. 15.2 at the paper's token counts: v = e_y − π with y ~ π, h⊥ ~ N(0, I),
    the same distribution for both groups; ‖R_F‖/‖R_S‖ concentrates at sqrt(N_S/N_F)."""
    rng = np.random.default_rng(15)
    Vb, d, reps = 40, 50, 200
    n_s, n_f = 8968, 54700
    pi = rng.dirichlet(np.ones(Vb))

    def residual_norm(n):
        # Σ_i (e_{y_i} − π) ⊗ h_i = S − π ⊗ ΣS with S_j = Σ_{i: y_i = j} h_i: given the token counts
        # n_j ~ Multinomial(n, π), S_j ~ sqrt(n_j)·N(0, I_d) exactly (Gaussian h), so no per-token loop
        counts = rng.multinomial(n, pi)
        S = np.sqrt(counts)[:, None] * rng.normal(size=(Vb, d))
        return np.linalg.norm((S - np.outer(pi, S.sum(0))) / n)

    ratio = np.array([residual_norm(n_f) / residual_norm(n_s) for _ in range(reps)])
    pred = float(rank1.clt_residual_ratio(n_s, n_f))
    assert abs(ratio.mean() - pred) <= 4 * ratio.std(ddof=1) / math.sqrt(reps) + 1e-3, (ratio.mean(), pred)
    # the paper's measured 0.73-0.79 is far outside this null distribution
    assert ratio.max() < 0.5


def test_mode_count_follows_the_integer_policy():
    """K: ints, numpy integers and integral floats are the same count."""
    ref = rank1.mode_residual_norm_sq(2.0, 3.0, 4)
    for K in (4.0, np.int64(4), np.float64(4)):
        assert rank1.mode_residual_norm_sq(2.0, 3.0, K) == ref


# -------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, match", [
    (lambda: rank1.rank1_limit([0.0, 0.0], np.ones((2, 3))), "^signal must be non-zero"),
    (lambda: rank1.rank1_limit([1.0, 0.0], np.ones((3, 3))), "^residual must have shape"),
    (lambda: rank1.rank1_limit([1.0, np.inf], np.ones((2, 3))), "^signal must contain only finite numbers"),
    (lambda: rank1.rank1_limit([1.0, 0.0], np.ones(2)), "^residual must have at least 2"),
    (lambda: rank1.mode_residual(np.ones((3, 4)), np.ones((2, 5))), "^mode_signals and mode_means"),
    (lambda: rank1.mode_residual_norm_sq(1.0, 1.0, 0), "^K must contain only integers >= 1"),
    (lambda: rank1.mode_residual_norm_sq(1.0, 1.0, 2.5), "^K must contain only integers >= 1"),
    (lambda: rank1.mode_residual_norm_sq(1.0, 1.0, True), "^K must be a numeric array, got booleans"),
    (lambda: rank1.mode_residual_norm_sq(1.0, -1.0, 2), "^mu must contain only finite numbers >= 0"),
    (lambda: rank1.mode_residual_norm_sq(-1.0, 1.0, 2), "^c must contain only finite numbers >= 0"),
    (lambda: rank1.clt_residual_ratio(0, 10), "^n_success must contain only finite numbers > 0"),
    (lambda: rank1.clt_residual_ratio(10, -1), "^n_failure must contain only finite numbers > 0"),
    (lambda: rank1.clt_residual_ratio("a", 10), "^n_success must be a numeric"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
