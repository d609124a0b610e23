"""rlvr_theory.sharpening against independent references (Over-Sharpening Sec. 2, App. A-G).

References: scipy.optimize maximisation of the objectives written out here, the
functional update of App. B iterated to its fixed point, the GRPO advantages of
rlvr_theory.advantages, torch autograd for the gradient Gram matrix, exact linear solves
for the NTK logit shifts, hand arithmetic and the numbers printed in App. G.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special

import figures
from rlvr_theory import advantages
from rlvr_theory import sharpening as sh


def random_batches(rng, n, K, G):
    """n random queries: π_ref ~ Dirichlet(0.5), G samples from π_ref, random correctness."""
    pi_ref = rng.dirichlet(np.full(K, 0.5), size=n)
    pi_ref = np.maximum(pi_ref, 1e-300)
    pi_ref /= pi_ref.sum(-1, keepdims=True)
    u = rng.random((n, G, 1))
    idx = (u > pi_ref.cumsum(-1)[:, None, :]).sum(-1).clip(max=K - 1)
    counts = (idx[..., None] == np.arange(K)).sum(1)
    correct = rng.random((n, K)) < 0.5
    return pi_ref, counts, correct


def maximise_over_simplex(score, pi_ref, beta):
    """argmax_π Σ_i π_i·score_i − β·KL(π‖π_ref), by BFGS over logits; returns (π, value)."""
    log_ref = np.log(pi_ref)

    def neg(z):
        lp = special.log_softmax(z)
        p = np.exp(lp)
        return -(p @ score - beta * (p @ (lp - log_ref)))

    res = optimize.minimize(neg, np.zeros_like(pi_ref), method="BFGS", options={"gtol": 1e-11, "maxiter": 10_000})
    return special.softmax(res.x), -res.fun


# ------------------------------------------------------------- Theorem 2.1
def test_kl_optimal_policy_is_the_numerical_maximiser_of_eq1():
    rng = np.random.default_rng(1)
    for K in (2, 3, 5, 8):
        pi_ref = rng.dirichlet(np.ones(K))
        A = rng.normal(size=K)
        for beta in (0.3, 1.0, 4.0):
            pi_num, value = maximise_over_simplex(A, pi_ref, beta)
            np.testing.assert_allclose(sh.kl_optimal_policy(pi_ref, A, beta), pi_num, atol=2e-6)
            # Gibbs variational principle: the maximum is β·log Z
            assert value == pytest.approx(beta * np.log(pi_ref @ np.exp(A / beta)), abs=1e-9)


def test_kl_optimal_policy_vectorised_and_stable():
    rng = np.random.default_rng(2)
    pi_ref = rng.dirichlet(np.ones(6), size=(4, 3))
    A = rng.normal(size=(4, 3, 6))
    beta = np.array([0.5, 1.0, 2.0])
    out = sh.kl_optimal_policy(pi_ref, A, beta)
    for i in range(4):
        for j in range(3):
            w = pi_ref[i, j] * np.exp(A[i, j] / beta[j])
            np.testing.assert_allclose(out[i, j], w / w.sum(), rtol=1e-13)
    # β → 0 concentrates on the best mode; no overflow, no NaN
    tiny = sh.kl_optimal_policy([0.5, 0.3, 0.2], [1.0, 3.0, 2.0], 1e-6)
    np.testing.assert_array_equal(tiny, [0.0, 1.0, 0.0])
    # a mode with π_ref = 0 stays at 0 however large its advantage
    np.testing.assert_allclose(sh.kl_optimal_policy([0.0, 1.0], [1e6, 0.0], 1e-3), [0.0, 1.0])


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(2, 12), a_plus=st.floats(0, 5), a_minus=st.floats(-5, 0),
       beta=st.floats(0.05, 20))
def test_corollary_2_1_infinite_sample_optimum_is_moderate(seed, K, a_plus, a_minus, beta):
    rng = np.random.default_rng(seed)
    pi_ref = rng.dirichlet(np.ones(K))
    correct = rng.random(K) < 0.5
    A = np.where(correct, a_plus, a_minus)
    assert sh.is_moderate_sharpening(sh.kl_optimal_policy(pi_ref, A, beta), pi_ref, correct, atol=1e-12)


# ------------------------------------------------------------- Theorem 2.2
def test_batch_optimal_policy_maximises_the_linear_batch_objective():
    """π̂ = argmax Σ_i π_i·N_i A_i/G − β KL(π‖π_ref); the maximum is β·log Z'."""
    rng = np.random.default_rng(3)
    for _trial in range(12):
        K = int(rng.integers(2, 7))
        pi_ref, counts, correct = random_batches(rng, 1, K, int(rng.integers(1, 9)))
        pi_ref, counts, correct = pi_ref[0], counts[0], correct[0]
        A = rng.normal(size=K) * 2
        beta = float(rng.choice([0.2, 0.7, 3.0]))
        pi_num, value = maximise_over_simplex(counts * A / counts.sum(), pi_ref, beta)
        np.testing.assert_allclose(sh.batch_optimal_policy(pi_ref, counts, A, beta), pi_num, atol=2e-6)
        assert value == pytest.approx(beta * sh.batch_partition(pi_ref, counts, A, beta, log=True), abs=1e-9)


def test_batch_optimal_policy_is_the_fixed_point_of_app_b_update():
    """Iterating log π ← log π + η[N A/G − β(log π − log π_ref)], renormalised (App. B), reaches π̂."""
    rng = np.random.default_rng(4)
    pi_ref, counts, correct = random_batches(rng, 5, 6, 8)
    A = sh.normalized_binary_advantages(counts, correct)
    beta, eta = 0.8, 0.5
    w = np.log(pi_ref)
    for _ in range(200):
        w = w + eta * (counts * A / 8 - beta * (w - np.log(pi_ref)))
        w = w - special.logsumexp(w, axis=-1, keepdims=True)
    np.testing.assert_allclose(sh.batch_optimal_policy(pi_ref, counts, A, beta), np.exp(w), atol=1e-12)


def test_eq3_as_printed_is_unbounded_with_a_negative_advantage():
    """The literal Eq. 3, (1/G)Σ_s A_s log π(o_s) − β KL, grows without bound as π(o_j) → 0 for A_j < 0."""
    pi_ref = np.array([0.5, 0.3, 0.2])
    counts, A, beta = np.array([2, 1, 0]), np.array([0.7, -1.4, 0.0]), 1.0

    def eq3(p):
        return (counts * A) @ np.log(p) / counts.sum() - beta * p @ np.log(p / pi_ref)

    values = [eq3(np.array([0.6, eps, 0.4 - eps])) for eps in (1e-2, 1e-4, 1e-8, 1e-16)]
    assert np.all(np.diff(values) > 0.4) and values[-1] > eq3(sh.batch_optimal_policy(pi_ref, counts, A, beta)) + 5


def test_partition_identities():
    rng = np.random.default_rng(5)
    pi_ref, counts, correct = random_batches(rng, 200, 7, 6)
    A = sh.normalized_binary_advantages(counts, correct)
    beta = 0.6
    Z = sh.batch_partition(pi_ref, counts, A, beta)
    direct = (pi_ref * np.exp(counts * A / (beta * counts.sum(-1, keepdims=True)))).sum(-1)
    np.testing.assert_allclose(Z, direct, rtol=1e-13)
    pi_hat = sh.batch_optimal_policy(pi_ref, counts, A, beta)
    np.testing.assert_allclose(pi_hat.sum(-1), 1.0, rtol=1e-14)
    # every unsampled mode is scaled by the same 1/Z' (Sec. 2.2, "uniform scaling")
    unsampled = counts == 0
    np.testing.assert_allclose(np.where(unsampled, pi_hat, 0), np.where(unsampled, pi_ref / Z[:, None], 0), rtol=1e-12)
    # Δ_i sums to zero
    np.testing.assert_allclose((pi_hat - pi_ref).sum(-1), 0.0, atol=1e-14)
    # a batch without signal (all correct) has A = 0, Z' = 1 and π̂ = π_ref
    one = np.array([[3, 1, 0]])
    A0 = sh.normalized_binary_advantages(one, [True, True, False])
    assert np.all(A0 == 0)
    assert sh.batch_partition([0.2, 0.3, 0.5], one, A0, 0.1) == pytest.approx(1.0, abs=1e-15)
    # log Z' stays finite where Z' overflows
    logz = sh.batch_partition([0.5, 0.5], [1, 0], [1.0, 0.0], 1e-4, log=True)
    assert logz == pytest.approx(1e4 + np.log(0.5), rel=1e-14)
    assert np.isinf(sh.batch_partition([0.5, 0.5], [1, 0], [1.0, 0.0], 1e-4))


def test_normalized_binary_advantages_are_grpo():
    rng = np.random.default_rng(6)
    pi_ref, counts, correct = random_batches(rng, 300, 5, 8)
    for ddof in (0, 1):
        A = sh.normalized_binary_advantages(counts, correct, ddof=ddof)
        grpo = advantages.get("grpo", ddof=ddof)
        for n in range(300):
            labels = np.repeat(np.arange(5), counts[n])
            rewards = correct[n][labels].astype(float)
            np.testing.assert_allclose(A[n][labels], grpo(rewards), rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------- Theorem 2.3
def test_binary_batch_stats_by_hand():
    pi_ref = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
    counts = np.array([3, 0, 2, 1, 2])
    correct = np.array([True, True, False, True, False])
    b = sh.binary_batch_stats(pi_ref, counts, correct)
    # sampled correct: modes 0, 3 -> min π = 0.12; sampled incorrect: 2, 4 -> max π = 0.15
    assert float(b.p_plus) == pytest.approx(4 / 8)
    assert float(b.sigma) == pytest.approx(0.5)
    assert float(b.delta_pi) == pytest.approx(0.12 - 0.15)
    A = sh.normalized_binary_advantages(counts, correct)
    general = 1 + (3 * 1.0 * 0.4 + 1 * 1.0 * 0.12 - 2 * 0.15 - 2 * 0.08) / (2.0 * 8)  # A± = ±1, β = 2
    assert float(sh.partition_lower_bound(pi_ref, counts, A, 2.0)) == pytest.approx(general, rel=1e-14)
    assert float(sh.partition_lower_bound_binary(*b, 2.0)) == pytest.approx(1 + 0.25 * (-0.03) / (2 * 0.5))


def _check_bounds(pi_ref, counts, correct, beta, ddof):
    A = sh.normalized_binary_advantages(counts, correct, ddof=ddof)
    logz = sh.batch_partition(pi_ref, counts, A, beta, log=True)
    general = sh.partition_lower_bound(pi_ref, counts, A, beta)
    simple = sh.partition_lower_bound_binary(*sh.binary_batch_stats(pi_ref, counts, correct, ddof=ddof), beta)
    assert np.all(np.isfinite(logz)) and np.all(np.isfinite(general)) and np.all(np.isfinite(simple))
    tol = 1e-12 * np.maximum(1, np.abs(general))
    assert np.all(simple <= general + tol)
    pos = general > 0
    assert np.all(logz[pos] >= np.log(general[pos]) - 1e-12)
    return np.exp(logz), general, simple


def test_bounds_below_the_partition_function_on_many_random_batches():
    rng = np.random.default_rng(7)
    for K, G in ((2, 1), (3, 4), (6, 8), (10, 16), (32, 64)):
        pi_ref, counts, correct = random_batches(rng, 4000, K, G)
        beta = rng.choice([0.05, 0.3, 1.0, 10.0], size=4000)
        for ddof in (0, 1) if G > 1 else (0,):
            Z, general, simple = _check_bounds(pi_ref, counts, correct, beta, ddof)
    # the bound is first-order tight: Z' − bound = O(1/β²)
    pi_ref, counts, correct = random_batches(rng, 50, 6, 8)
    A = sh.normalized_binary_advantages(counts, correct)
    signal = np.abs(A).sum(-1) > 0
    gap = [(sh.batch_partition(pi_ref, counts, A, b) - sh.partition_lower_bound(pi_ref, counts, A, b))[signal]
           for b in (10.0, 20.0)]
    np.testing.assert_allclose(gap[0] / gap[1], 4.0, rtol=0.1)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(2, 12), G=st.integers(2, 40), beta=st.floats(0.01, 50),
       ddof=st.sampled_from([0, 1]))
def test_bounds_hypothesis(seed, K, G, beta, ddof):
    pi_ref, counts, correct = random_batches(np.random.default_rng(seed), 1, K, G)
    _check_bounds(pi_ref[0], counts[0], correct[0], beta, ddof)


def test_confident_model_suppresses_an_unsampled_correct_mode():
    """Δπ > 0 ⇒ Z' > 1 ⇒ every unsampled mode loses mass, including a correct one (over-sharpening)."""
    pi_ref = np.array([0.5, 0.3, 0.1, 0.1])  # mode 2 is correct but not sampled
    counts = np.array([5, 0, 0, 3])
    correct = np.array([True, False, True, False])
    b = sh.binary_batch_stats(pi_ref, counts, correct)
    assert float(b.delta_pi) == pytest.approx(0.4)
    A = sh.normalized_binary_advantages(counts, correct)
    assert sh.partition_lower_bound_binary(*b, 1.0) > 1
    pi_hat = sh.batch_optimal_policy(pi_ref, counts, A, 1.0)
    assert pi_hat[2] < pi_ref[2] and pi_hat[1] < pi_ref[1]
    assert not sh.is_moderate_sharpening(pi_hat, pi_ref, correct)
    # with all modes sampled the same batch-level rule sharpens moderately
    assert sh.is_moderate_sharpening(sh.kl_optimal_policy(pi_ref, np.where(correct, 1.0, -1.0), 1.0), pi_ref, correct)


# ------------------------------------------------------ Sec. 2.3, Cor. 2.2
def test_target_shifts_by_hand():
    y, a = sh.target_shifts([5, 2, 1, 0], [0.5, 0.5, -3.5, 9.0], 2.0)
    np.testing.assert_allclose(y, [5 * 0.5 / 16, 2 * 0.5 / 16, 3.5 / 16, 0.0])
    assert float(a) == pytest.approx((25 * 0.5 + 4 * 0.5 + 3.5) / 16)


def test_coupling_ratio_is_the_quotient_of_theorem_2_4_bounds():
    rng = np.random.default_rng(8)
    n = 500
    G = rng.integers(2, 40, n)
    N = np.minimum(rng.integers(1, 10, n), G)
    y = rng.random(n)
    a = N * y + rng.random(n) * 5
    rho_min = rng.random(n) + 0.1
    rho_max = rho_min + rng.random(n)
    lam_min = rho_max + rng.random(n)
    lam_max = lam_min + rng.random(n)
    # Theorem 2.4 as printed (η = 1): Case-1 upper bound, Case-2 lower bound
    upper = rho_max * a / (lam_min + (G - 1) * rho_min)
    lower = N * (lam_min - rho_min) / (lam_max - rho_max) * (y - rho_max * a / (lam_max + (G - 1) * rho_max))
    np.testing.assert_allclose(sh.coupling_ratio(N, y, a, G, lam_min, lam_max, rho_min, rho_max), lower / upper,
                               rtol=1e-12)
    # equal λ's and ρ's: the general form reduces to the simplified one
    np.testing.assert_allclose(sh.coupling_ratio(N, y, a, G, lam_min, lam_min, rho_min, rho_min),
                               sh.coupling_ratio_simplified(N, y, a, G, lam_min / rho_min), rtol=1e-12)


def test_coupling_ratio_against_exact_ntk_logit_shifts():
    """K = (λ−ρ)I + ρ11ᵀ, transfer η·λ to the seen copies and η·ρ elsewhere: Δf_seen/Δf_unseen = R + 1."""
    rng = np.random.default_rng(9)
    for _ in range(50):
        G = int(rng.integers(2, 12))
        lam = rng.random() + 1.0
        rho = rng.random() * lam
        eta = rng.random()
        seen = np.zeros(G, bool)
        n_seen = int(rng.integers(1, G + 1))
        seen[:n_seen] = True
        y = np.where(seen, rng.random() + 0.1, rng.random(G))
        Kqq = (lam - rho) * np.eye(G) + rho
        alpha = np.linalg.solve(Kqq, y)
        df_seen = eta * np.where(seen, lam, rho) @ alpha
        df_unseen = eta * rho * alpha.sum()
        R = sh.coupling_ratio_simplified(n_seen, y[0], y.sum(), G, lam / rho)
        assert df_seen / df_unseen == pytest.approx(R + 1, rel=1e-10)


def test_theorem_2_4_is_not_a_bound_beyond_compound_symmetric_kernels():
    """Documented caveat: K = [[1, .5], [.5, 4]] meets Assumption 2.3, yet Σα exceeds the Step-1 bound."""
    K = np.array([[1.0, 0.5], [0.5, 4.0]])
    y = np.array([1.0, 0.0])
    st_ = sh.kernel_stats(K)
    alpha = np.linalg.solve(K, y)
    unseen_shift = st_.rho_max * alpha.sum()  # transfer ρ to both samples (η = 1)
    bound = st_.rho_max * y.sum() / (st_.lam_min + st_.rho_min)
    assert unseen_shift > bound * 1.3


# ------------------------------------------------------------------ App. G
SIMILARITY = ("High", "Mid", "Low")
PAPER_RHO = {"High": 0.635, "Mid": 0.56, "Low": 0.51}
PAPER_RATIO = {"High": 1.38, "Mid": 1.57, "Low": 1.72}
PAPER_LAMBDA = 0.8775


def appg_stats():
    e = np.array([[sh.TOY_EMBEDDINGS["Persian"], sh.SIAMESE_VARIANTS[s]] for s in SIMILARITY])
    return sh.kernel_stats(sh.logit_gradient_gram(e))


def test_appg_cross_similarities_match_the_paper():
    st_ = appg_stats()
    np.testing.assert_allclose(st_.rho_max, [PAPER_RHO[s] for s in SIMILARITY], atol=1e-12)
    np.testing.assert_array_equal(st_.rho_min, st_.rho_max)
    # the paper's printed ratios are its printed λ over these ρ, to the two decimals it prints
    np.testing.assert_allclose(np.round(PAPER_LAMBDA / st_.rho_max, 2), [PAPER_RATIO[s] for s in SIMILARITY])


def test_appg_lambda_erratum():
    """‖[0.75, 0.5, 0.25, 0.1]‖² = 0.5625 + 0.25 + 0.0625 + 0.01 = 0.885, not the printed 0.8775."""
    st_ = appg_stats()
    np.testing.assert_allclose(st_.lam_min, 0.885, atol=1e-12)
    assert abs(st_.lam_min[0] - PAPER_LAMBDA) > 5e-3
    np.testing.assert_allclose(np.round(st_.lam_min / st_.rho_max, 2), [1.39, 1.58, 1.74])
    # 0.8775 is what one gets with 0.05 in place of the last coordinate 0.1
    assert float(np.sum(np.square([0.75, 0.5, 0.25, 0.05]))) == pytest.approx(PAPER_LAMBDA, abs=1e-15)
    # the paper's qualitative statement survives: λ/ρ grows from High to Low similarity
    assert np.all(np.diff(st_.lam_min / st_.rho_max) > 0)


def test_logit_gradient_gram_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    names = ["Cat", "Persian", "Dog", "Siamese"]
    E = np.array([sh.TOY_EMBEDDINGS[k] for k in names] + [sh.SIAMESE_VARIANTS["Low"]])
    labels = np.array([0, 1, 1, 3, 1])
    W = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    grads = []
    for e, o in zip(E, labels):
        f = (W @ torch.tensor(e))[o]
        (g,) = torch.autograd.grad(f, W)
        grads.append(g.flatten().numpy())
    J = np.array(grads)
    np.testing.assert_allclose(sh.logit_gradient_gram(E, labels), J @ J.T, atol=1e-15)
    same = np.repeat(E[None], 3, 0)  # leading axes broadcast
    np.testing.assert_allclose(sh.logit_gradient_gram(same)[2], E @ E.T)


# -------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, match", [
    (lambda: sh.kl_optimal_policy([0.5, 0.6], [1, 2], 1.0), "^pi_ref must hold probability"),
    (lambda: sh.kl_optimal_policy([0.5, 0.5], [1, np.nan], 1.0), "^advantages must contain only finite numbers"),
    (lambda: sh.kl_optimal_policy([0.5, 0.5], [1, 2], 0.0), "^beta must contain only finite numbers > 0"),
    (lambda: sh.batch_optimal_policy([0.5, 0.5], [1.5, 0], [1, 2], 1.0), "^counts must contain only integers >= 0"),
    (lambda: sh.batch_optimal_policy([0.5, 0.5], [0, 0], [1, 2], 1.0), "^counts must sum to G >= 1"),
    (lambda: sh.batch_partition([0.5, 0.5], [1, 1, 1], [1, 2, 3], 1.0), "^arguments must broadcast"),
    (lambda: sh.normalized_binary_advantages([1, 1], [True, False], ddof=2), "^ddof must be one of 0, 1"),
    (lambda: sh.normalized_binary_advantages([1, 0], [True, False], ddof=1), "^counts must sum to G >= 2"),
    (lambda: sh.normalized_binary_advantages([1, 1], [0.5, 1]), "^correct must contain only integers >= 0 and <= 1"),
    (lambda: sh.partition_lower_bound_binary(1.2, 0.5, 0.1, 1.0), "^p_plus must contain only finite numbers >= 0 and <= 1"),
    (lambda: sh.partition_lower_bound_binary(0.5, 0.0, 0.1, 1.0), "^sigma must be"),
    (lambda: sh.partition_lower_bound_binary(0.5, 0.5, 2.0, 1.0), "^delta_pi must contain only finite numbers >= -1 and <= 1"),
    (lambda: sh.coupling_ratio_simplified(0, 0.1, 1.0, 8, 1.4), "^n_seen must contain only integers >= 1"),
    (lambda: sh.coupling_ratio_simplified(9, 0.1, 1.0, 8, 1.4), "^n_seen must be an integer in"),
    (lambda: sh.coupling_ratio_simplified(2, 0.9, 1.0, 8, 1.4), "^a_sum must be >= n_seen"),
    (lambda: sh.coupling_ratio_simplified(2, 0.1, 1.0, 8, 0.9), "^lam_over_rho must contain only finite numbers >= 1"),
    (lambda: sh.coupling_ratio_simplified(2, 0.1, 1.0, 2.5, 1.4), "^G must contain only integers >= 1"),
    (lambda: sh.coupling_ratio_simplified(2, 0.1, 1.0, True, 1.4), "^G must be a numeric array, got booleans"),
    (lambda: sh.coupling_ratio_simplified(2, -0.1, 1.0, 8, 1.4), "^y_seen must contain only finite numbers >= 0"),
    (lambda: sh.normalized_binary_advantages([1, 1], [True, False], ddof=True), "^ddof must be one of 0, 1"),
    (lambda: sh.batch_optimal_policy([0.5, 0.5], [1, 1], [1, 2], [1.0, -1.0]), "^beta must contain only"),
    (lambda: sh.coupling_ratio(2, 0.1, 1.0, 8, 1.0, 1.2, 0.5, 1.1), "^lam_min, lam_max"),
    (lambda: sh.kernel_stats(np.ones((2, 3))), "^gram must be square"),
    (lambda: sh.logit_gradient_gram(np.ones((3, 2)), [0.5, 1, 2]), "^labels must be an integer"),
    (lambda: sh.is_moderate_sharpening([0.5, 0.5], [0.5, 0.5], [True, False], atol=-1), "^atol must"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_counts_follow_the_integer_policy():
    """G, n_seen, counts and ddof: ints, numpy integers and integral floats are the same count."""
    ref = sh.coupling_ratio_simplified(2, 0.1, 1.0, 8, 1.4)
    for G in (8.0, np.int64(8), np.float64(8)):
        assert sh.coupling_ratio_simplified(2.0, 0.1, 1.0, G, 1.4) == ref
        assert sh.coupling_ratio_simplified(np.int64(2), 0.1, 1.0, G, 1.4) == ref
    pi_ref, adv = [0.2, 0.3, 0.5], [1.0, -1.0, 0.5]
    ref = sh.batch_optimal_policy(pi_ref, [2, 1, 0], adv, 0.5)
    np.testing.assert_array_equal(sh.batch_optimal_policy(pi_ref, [2.0, 1.0, 0.0], adv, 0.5), ref)
    np.testing.assert_array_equal(sh.batch_optimal_policy(pi_ref, np.array([2, 1, 0], np.int64), adv, 0.5), ref)
    np.testing.assert_array_equal(sh.normalized_binary_advantages([2, 1], [True, False], ddof=1.0),
                                  sh.normalized_binary_advantages([2, 1], [True, False], ddof=np.int64(1)))
    for G in (np.bool_(True), 8.5):
        with pytest.raises(ValueError, match="^G must"):
            sh.coupling_ratio_simplified(2, 0.1, 1.0, G, 1.4)


# ------------------------------------------------------------------ figure
def test_oversharpening_appg_figure(tmp_path):
    paths, claims = figures.make("oversharpening_appg", tmp_path)
    png = tmp_path / "oversharpening_appg.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    c = pd.read_csv(tmp_path / "oversharpening_appg.claims.csv", keep_default_na=False)
    assert len(c) >= 7 and (c.status != "fail").all(), c[c.status == "fail"]
    # the paper's lambda/rho column does not reproduce (misprinted lambda): explained, not passed
    explained = c[c.status == "explained"]
    assert len(explained) == 3 and explained.note.str.contains("0.885").all()
    df = pd.read_csv(tmp_path / "oversharpening_appg.csv")
    table = df[df.G == 8].set_index("similarity")
    assert table.loc["High", "rho"] == pytest.approx(0.635)
    assert table.loc["High", "lambda"] == pytest.approx(0.885)
    assert table.loc["High", "lambda_paper"] == pytest.approx(0.8775)
    # R for labels Cat:Persian:Dog = 5:2:1 (k = G/8), GRPO advantages A− = −7·A+, o' = Cat, by hand:
    # y_Cat/𝒜_sum = 5k·A+ / (k²(25 + 4 + 7)·A+) = 5/(36k)  ⇒  R = (25/36)(λ/ρ − 1) + 5G/72
    np.testing.assert_allclose(df.R, 25 / 36 * (df.lambda_over_rho - 1) + 5 * df.G / 72, rtol=1e-12)
    md = (tmp_path / "oversharpening_appg.md").read_text()
    assert "0.8775" in md and "0.885" in md and md.count("\n| ") == 3
