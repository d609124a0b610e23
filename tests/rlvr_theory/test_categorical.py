"""Categorical one-step identities: against torch autograd, brute-force enumeration, Monte Carlo
(4 SE) and the exact one-step softmax update (relative error linear in η)."""

from __future__ import annotations

import itertools
import math
import re
import time
from pathlib import Path

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import special

from rlvr_theory import advantages, masses
from rlvr_theory import categorical as cat

ROOT = Path(__file__).resolve().parents[2]


def config(seed, K=7, scale=1.5, B=None):
    rng = np.random.default_rng(seed)
    shape = (K,) if B is None else (B, K)
    return rng, rng.normal(0, scale, shape)


def halving_ratios(rel_err_fn, eta0):
    """rel_err(η)/rel_err(η/2) for η = eta0, eta0/2: 2 when the error is linear in η."""
    errs = [rel_err_fn(eta0 / 2**k) for k in range(3)]
    return np.array([errs[0] / errs[1], errs[1] / errs[2]]), errs


# ------------------------------------------------------- updates vs autograd
def torch_grad(z, objective):
    zt = torch.tensor(z, requires_grad=True)
    objective(zt).sum().backward()
    return zt.grad.numpy()


def test_logit_update_is_the_gradient_of_the_sampled_objective():
    """Two-Stage Lemma 1: Δz = η ∇_z (1/N) Σ_j A_j log softmax(z)[a_j] (autograd), batched."""
    rng, z = config(0, K=9, B=5)
    actions = rng.integers(0, 9, (5, 6))
    A = rng.normal(size=(5, 6))
    eta = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    ref = torch_grad(z, lambda zt: (torch.tensor(A) * torch.gather(torch.log_softmax(zt, -1), -1,
                                                                    torch.tensor(actions))).mean(-1))
    np.testing.assert_allclose(cat.logit_update(z, actions, A, eta), eta[:, None] * ref, atol=1e-15)
    np.testing.assert_allclose(cat.behaviour_update(z, actions, A, eta), 6 * eta[:, None] * ref, atol=1e-14)


def test_logit_update_per_draw_bullets_of_lemma1():
    """Two-Stage Lemma 1, one draw v: z_v moves by ηA(1 − π_v), every other z_u by −ηAπ_u."""
    _, z = config(1)
    p = np.exp(z) / np.exp(z).sum()
    for v in range(7):
        dz = cat.logit_update(z, [v], [0.7], 0.3)
        expect = -0.3 * 0.7 * p
        expect[v] = 0.3 * 0.7 * (1 - p[v])
        np.testing.assert_allclose(dz, expect, atol=1e-16)


def test_surrogate_update_is_the_gradient_of_the_support_surrogate():
    """F-GRPO Eq. 7: Δz = (η/N) ∇_z Σ_{i sampled} p_i R_i (autograd)."""
    rng, z = config(2, K=11, B=4)
    correct = rng.random((4, 11)) < 0.4
    counts = rng.multinomial(6, np.full(11, 1 / 11), size=4)
    for rv in ((0.0, 1.0), (-1.0, 1.0), (-0.5, 2.0)):
        R = np.where(counts > 0, np.where(correct, rv[1], rv[0]), 0.0)
        ref = torch_grad(z, lambda zt, R=R: (torch.softmax(zt, -1) * torch.tensor(R)).sum(-1))
        np.testing.assert_allclose(cat.surrogate_logit_update(z, correct, counts, 0.2, rv), 0.2 / 6 * ref, atol=1e-15)


def test_expected_update_is_the_exact_gradient():
    """Two-Stage Theorem 1 with fixed Â: η ∇_z E_p[Â] (autograd) and the paper's bracket form."""
    rng, z = config(3, B=3)
    A = rng.normal(size=(3, 7))
    ref = torch_grad(z, lambda zt: (torch.softmax(zt, -1) * torch.tensor(A)).sum(-1))
    got = cat.expected_logit_update(z, A, 0.5)
    np.testing.assert_allclose(got, 0.5 * ref, atol=1e-15)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    bracket = (1 - p) * A - ((p * A).sum(-1, keepdims=True) - p * A)  # (1−p_v)Â_v − Σ_{u≠v} p_uÂ_u
    np.testing.assert_allclose(got, 0.5 * p * bracket, atol=1e-15)


# ------------------------------------------------ Theorem 1: enumeration, MC
def enumerate_groups(K, N):
    return np.array(list(itertools.product(range(K), repeat=N)))


@pytest.mark.parametrize("K,N", [(3, 3), (4, 2), (5, 3)])
def test_theorem1_fixed_advantage_by_enumeration(K, N):
    rng, z = config(K * 10 + N, K=K)
    A = rng.normal(size=K)
    groups = enumerate_groups(K, N)
    p = np.exp(z) / np.exp(z).sum()
    w = np.prod(p[groups], axis=1)
    mean = w @ cat.logit_update(z, groups, A[groups], 0.3)
    np.testing.assert_allclose(mean, cat.expected_logit_update(z, A, 0.3), atol=1e-15)


GROUP_ADVS = [advantages.get("grpo"), advantages.get("dr_grpo"), advantages.get("rloo"),
              advantages.get("asym_grpo", delta=0.5), advantages.get("reinforce"), advantages.get("fgrpo", gamma=2.0),
              advantages.get("negative_dominant"), advantages.get("grpo", reward_values=(-1.0, 1.0))]


@pytest.mark.parametrize("adv", GROUP_ADVS, ids=repr)
def test_group_expectation_by_enumeration(adv):
    """E[Δz] over all K^G groups equals Theorem 1 with the effective advantage ā (exact)."""
    for K, G, seed in ((4, 3, 0), (3, 4, 1), (5, 2, 2)):
        _, z = config(seed, K=K)
        correct = np.arange(K) < 2
        groups = enumerate_groups(K, G)
        p = np.exp(z) / np.exp(z).sum()
        w = np.prod(p[groups], axis=1)
        mean = w @ cat.group_logit_update(z, groups, correct, adv, 0.4)
        np.testing.assert_allclose(mean, cat.expected_group_logit_update(z, correct, adv, G, 0.4), atol=1e-15)


def test_effective_advantage_matches_the_exact_masses():
    """Q·ā_C = m_S(Q, G) and −(1−Q)·ā_W = m_F(Q, G) (masses.exact), so Σ p ā = m_S − m_F."""
    rng, z = config(5, K=30, B=6)
    correct = rng.random((6, 30)) < 0.3
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    Q = (p * correct).sum(-1)
    for adv in GROUP_ADVS:
        a = cat.effective_advantage(z, correct, adv, 8)
        m = masses.exact(adv, Q, 8)
        a_c = a[np.arange(6), correct.argmax(-1)]
        a_w = a[np.arange(6), (~correct).argmax(-1)]
        np.testing.assert_allclose(Q * a_c, m.m_S, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(-(1 - Q) * a_w, m.m_F, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose((p * a).sum(-1), m.m_S - m.m_F, atol=1e-14)


@pytest.mark.parametrize("adv", [advantages.get("grpo"), advantages.get("asym_grpo", delta=0.4), None], ids=repr)
def test_theorem1_monte_carlo(adv):
    """20,000 sampled groups (G = 8, K = 6): every coordinate of the mean Δz within 4 SE."""
    rng, z = config(6, K=6)
    correct = np.array([1, 0, 1, 0, 0, 0], bool)
    M, G = 20_000, 8
    actions = cat.sample_actions(np.broadcast_to(z, (M, 6)), G, rng)
    if adv is None:  # fixed advantage per action (the paper's assumption)
        A = np.array([1.0, -0.5, 2.0, 0.3, -1.0, 0.0])
        dz = cat.logit_update(z, actions, A[actions], 1.0)
        target = cat.expected_logit_update(z, A, 1.0)
    else:
        dz = cat.group_logit_update(z, actions, correct, adv, 1.0)
        target = cat.expected_group_logit_update(z, correct, adv, G, 1.0)
    se = dz.std(0, ddof=1) / math.sqrt(M)
    assert np.all(np.abs(dz.mean(0) - target) <= 4 * se), (dz.mean(0), target, se)
    assert np.max(np.abs(target)) > 10 * np.max(se)  # the test can see a wrong expectation


def test_sample_actions_frequencies():
    rng, z = config(7, K=5)
    a = cat.sample_actions(z, 50_000, rng)
    freq = cat.action_counts(a, 5) / 50_000
    p = np.exp(z) / np.exp(z).sum()
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / 50_000))
    b = cat.sample_actions(np.zeros((3, 2, 4)), 7, np.random.default_rng(1))
    assert b.shape == (3, 2, 7) and b.min() >= 0 and b.max() < 4


# -------------------------------------------------- A-GRAE Theorem 1 and cases
def grpo_group():
    """K = 8 behaviours, 3 and 4 correct; a group of G = 6 draws with duplicates."""
    z = np.array([2.0, 0.5, -1.0, 1.0, 0.0, -2.0, -3.0, 1.5])
    correct = np.array([1, 1, 0, 0, 0, 1, 0, 1], bool)
    actions = np.array([0, 0, 3, 1, 4, 3])
    return z, correct, actions


def test_behaviour_cases_grpo_zero_sum():
    """A-GRAE Eq. 7-9: C = 0; sampled positives move by η·(count)·A_pos, negatives by η·(count)·A_neg,
    unsampled behaviours do not move."""
    z, correct, actions = grpo_group()
    r = correct[actions].astype(float)
    A = advantages.get("grpo")(r)
    assert abs(A.sum()) < 1e-15
    dh = cat.behaviour_update(z, actions, A, 0.1)
    cases = cat.behaviour_cases(actions, correct)
    a_pos, a_neg = A[r == 1][0], A[r == 0][0]
    counts = cat.action_counts(actions, 8)
    np.testing.assert_allclose(dh[cases == "sampled_positive"], 0.1 * a_pos * counts[cases == "sampled_positive"],
                               atol=1e-15)
    np.testing.assert_allclose(dh[cases == "sampled_negative"], 0.1 * a_neg * counts[cases == "sampled_negative"],
                               atol=1e-15)
    assert np.all(np.abs(dh[cases == "unsampled"]) < 1e-16)
    assert list(cases) == ["sampled_positive", "sampled_positive", "unsampled", "sampled_negative",
                           "sampled_negative", "unsampled", "unsampled", "unsampled"]


def test_behaviour_cases_negative_dominant_c_negative():
    """A-GRAE App. B.5 Eq. 34-36: C < 0 raises every unsampled logit by −ηCπ_b > 0 and raises the
    logit of an overconfident sampled negative."""
    z, correct, actions = grpo_group()
    r = correct[actions].astype(float)
    A = advantages.get("negative_dominant")(r)
    C = A.sum()
    assert C < 0
    dh = cat.behaviour_update(z, actions, A, 0.1)
    p = np.exp(z) / np.exp(z).sum()
    cases = cat.behaviour_cases(actions, correct)
    un = cases == "unsampled"
    np.testing.assert_allclose(dh[un], -0.1 * C * p[un], rtol=1e-14)
    assert np.all(dh[un] > 0)
    assert np.all(dh[cases == "sampled_positive"] > 0)
    z2 = z.copy()
    z2[4] = 6.0  # overconfident incorrect behaviour, drawn once
    dh2 = cat.behaviour_update(z2, actions, A, 0.1)
    assert dh2[4] > 0  # "the logits of overconfident negative responses can even be increased"


def test_sampled_positive_logit_rises_but_its_probability_can_fall():
    """A-GRAE Eq. 7 says the update is 'strictly increasing their probability': true for the logit,
    not for the probability.  A rare sampled-correct behaviour next to a dominant one drawn
    6 times loses probability under GRPO (exact one-step update)."""
    z = np.log(np.array([0.90, 0.01, 0.05, 0.04]))
    correct = np.array([1, 1, 0, 0], bool)
    actions = np.array([0, 0, 0, 0, 0, 0, 1, 2])
    A = advantages.get("grpo")(correct[actions].astype(float))
    dh = cat.behaviour_update(z, actions, A, 0.05)
    assert dh[1] > 0
    assert cat.exact_probability_change(z, dh)[1] < 0
    assert cat.probability_change(z, dh)[1] < 0


# ----------------------------------------------------- F-GRPO Eq. 8 and Eq. 13
def moment_configs(seed, B=8, K=40):
    rng, z = config(seed, K=K, scale=2.0, B=B)
    correct = rng.random((B, K)) < 0.3
    correct[:, 0] = True
    actions = cat.sample_actions(z, 6, rng)
    return z, correct, cat.action_counts(actions, K)


@pytest.mark.parametrize("rv", [(0.0, 1.0), (-1.0, 1.0), (0.2, 3.0)])
def test_eq8_and_prop32_equal_the_subset_identity(rv):
    """Eq. 8 and Eq. 13 from the moments equal Eq. 21 applied to the Eq. 7 update (1e-13)."""
    z, correct, counts = moment_configs(10)
    dz = cat.surrogate_logit_update(z, correct, counts, 0.3, rv)
    got = cat.delta_q_pos(z, correct, counts, 0.3, rv)
    np.testing.assert_allclose(got.total, cat.subset_mass_change(z, dz, correct), rtol=1e-12, atol=1e-17)
    np.testing.assert_allclose(got.total, got.sampled_correct + got.sampled_incorrect + got.unsampled_coupling,
                               rtol=1e-14)
    upos = correct & (counts == 0)
    gu = cat.delta_q_unsampled_pos(z, correct, counts, 0.3, rv)
    np.testing.assert_allclose(gu.total, cat.subset_mass_change(z, dz, upos), rtol=1e-12, atol=1e-17)
    if rv[0] <= 0 <= rv[1]:  # "the first two terms are always non-negative"
        assert np.all(got.sampled_correct >= 0) and np.all(got.sampled_incorrect >= 0)


def test_eq8_and_prop32_against_the_exact_update():
    """Relative error of ΔQ_pos and ΔQ_u,pos against softmax(z + Δz) halves with η."""
    z, correct, counts = moment_configs(11)
    upos = correct & (counts == 0)
    for pred_fn, mask in ((cat.delta_q_pos, correct), (cat.delta_q_unsampled_pos, upos)):
        def rel(eta, pred_fn=pred_fn, mask=mask):
            dz = cat.surrogate_logit_update(z, correct, counts, eta)
            exact = cat.exact_subset_mass_change(z, dz, mask)
            return np.abs(pred_fn(z, correct, counts, eta).total - exact) / np.abs(exact)

        with np.errstate(invalid="ignore"):
            ratios, errs = halving_ratios(rel, 1.0)
        # rows whose set is empty, or whose batch has no correct draw (S_R = 0 for Eq. 13), do not move
        live = mask.any(-1) & (cat.sample_moments(z, correct, counts).S_R > 0)
        assert live.sum() >= 4
        ratios, errs = ratios[:, live], [e[live] for e in errs]
        assert np.all(errs[0] < 0.05) and np.all(errs[0] > 1e-9)
        assert np.all((ratios > 1.8) & (ratios < 2.2)), ratios


def test_unsampled_correct_mass_can_fall_while_total_correct_mass_rises():
    """F-GRPO Sec. 3.2 after Eq. 13: ΔQ_u,pos < 0 < ΔQ_pos in a reward-positive batch (exact update too)."""
    p = np.array([0.5, 0.2, 0.1, 0.1, 0.1])  # 0, 1, 2 correct; 2 unsampled
    z = np.log(p)
    correct = np.array([1, 1, 1, 0, 0], bool)
    counts = np.array([4, 1, 0, 1, 0])
    qp = cat.delta_q_pos(z, correct, counts, 0.5)
    qu = cat.delta_q_unsampled_pos(z, correct, counts, 0.5)
    assert qp.total > 0 > qu.total and qu.direct_drift < 0 and qu.normalization_coupling < 0
    dz = cat.surrogate_logit_update(z, correct, counts, 0.5)
    assert cat.exact_subset_mass_change(z, dz, correct) > 0 > cat.exact_subset_mass_change(z, dz, correct & (counts == 0))


def test_eq8_sign_claim_needs_rw_nonpositive():
    """F-GRPO says the first two terms of Eq. 8 are always >= 0; with R_w > 0 the second,
    (S_R − R_w)Q_pos B2, is negative when little correct mass is sampled (S_R < R_w)."""
    z = np.log([0.01, 0.1, 0.89])
    got = cat.delta_q_pos(z, [True, False, False], [1, 1, 0], 1.0, reward_values=(0.2, 3.0))
    assert got.sampled_correct > 0 > got.sampled_incorrect  # S_R = 0.05 < R_w = 0.2


def test_eq8_by_hand():
    """Two-action check of Eq. 8 written out: p = (0.3, 0.7), action 0 correct, sampled once, N = 1."""
    z = np.log([0.3, 0.7])
    got = cat.delta_q_pos(z, [True, False], [1, 0], 1.0)
    # S_R = 0.3, A2 = 0.09, Q_neg = 0.7 -> (1 − 0.3)·0.7·0.09 ; U_neg2 = 0.49 -> 0.3·(0.3·0.49)
    assert float(got.total) == pytest.approx(0.7 * 0.7 * 0.09 + 0.3 * 0.3 * 0.49, rel=1e-14)


# ------------------------------------------- first order vs exact, in general
def test_first_order_probability_change_is_linear_in_eta():
    rng, z = config(12, K=25, B=4)
    actions = rng.integers(0, 25, (4, 8))
    A = rng.normal(size=(4, 8))
    d = cat.logit_update(z, actions, A, 1.0)
    sub = rng.random((4, 25)) < 0.5

    def rel(eta):
        exact = cat.exact_subset_mass_change(z, eta * d, sub)
        return np.abs(cat.subset_mass_change(z, eta * d, sub) - exact) / np.abs(exact)

    ratios, errs = halving_ratios(rel, 0.05)
    assert np.all(errs[0] < 0.05)
    assert np.all((ratios > 1.8) & (ratios < 2.2)), ratios
    dp = cat.probability_change(z, 1e-3 * d)
    np.testing.assert_allclose(dp.sum(-1), 0, atol=1e-18)
    np.testing.assert_allclose(dp, cat.exact_probability_change(z, 1e-3 * d), rtol=2e-2, atol=1e-12)


def test_exact_probability_change_against_mpmath():
    """50-digit reference at a tiny step (η = 1e-9), where the naive difference loses ~9 digits."""
    rng, z = config(13, K=6)
    dz = 1e-9 * rng.normal(size=6)
    mpmath.mp.dps = 50
    ez = [mpmath.exp(mpmath.mpf(float(v))) for v in z]
    ez2 = [mpmath.exp(mpmath.mpf(float(v)) + mpmath.mpf(float(d))) for v, d in zip(z, dz)]
    ref = np.array([float(b / sum(ez2) - a / sum(ez)) for a, b in zip(ez, ez2)])
    np.testing.assert_allclose(cat.exact_probability_change(z, dz), ref, rtol=1e-9)


# ------------------------------------------------------------ large K
def test_large_vocabulary_and_tiny_probabilities():
    """K = 128,000 (10,000 correct), logits spread over ~2,000 nats: finite results, Eq. 8 =
    subset identity, first order within 1% of exact, in well under a second per call."""
    K = 128_000
    rng = np.random.default_rng(14)
    z = rng.normal(0, 3, (2, K))
    z[:, :1000] -= 2000.0  # probabilities e^-2000: underflow to 0 when exponentiated
    correct = np.zeros(K, bool)
    correct[rng.choice(K, 10_000, replace=False)] = True
    t0 = time.perf_counter()
    actions = cat.sample_actions(z, 16, rng)
    counts = cat.action_counts(actions, K)
    dz = cat.surrogate_logit_update(z, correct, counts, 5.0)
    q = cat.delta_q_pos(z, correct, counts, 5.0)
    exact = cat.exact_subset_mass_change(z, dz, correct)
    g = cat.group_logit_update(z, actions, correct, "grpo", 1.0)
    e = cat.expected_group_logit_update(z, correct, "grpo", 16, 1.0)
    elapsed = time.perf_counter() - t0
    for arr in (dz, q.total, exact, g, e):
        assert np.all(np.isfinite(arr))
    np.testing.assert_allclose(q.total, cat.subset_mass_change(z, dz, correct), rtol=1e-10)
    np.testing.assert_allclose(q.total, exact, rtol=1e-2)
    np.testing.assert_allclose(g.sum(-1), 0, atol=1e-12)
    assert elapsed < 5.0


# ---------------------------------------------------------- properties
logits = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(2, 30)),
                    elements=st.floats(-40, 40, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(z=logits, seed=st.integers(0, 2**32 - 1), N=st.integers(1, 10), eta=st.floats(1e-4, 2.0))
def test_update_properties(z, seed, N, eta):
    rng = np.random.default_rng(seed)
    B, K = z.shape
    actions = rng.integers(0, K, (B, N))
    A = rng.normal(0, 3, (B, N))
    correct = rng.random((B, K)) < 0.5
    counts = cat.action_counts(actions, K)
    scale = eta * (np.abs(A).sum() + 1)
    for dz in (cat.logit_update(z, actions, A, eta), cat.behaviour_update(z, actions, A, eta),
               cat.surrogate_logit_update(z, correct, counts, eta, (-1.0, 1.0)),
               cat.expected_logit_update(z, rng.normal(size=(B, K)), eta)):
        assert dz.shape == (B, K) and np.all(np.isfinite(dz))
        np.testing.assert_allclose(dz.sum(-1), 0, atol=1e-12 * scale)  # Σ_i Δz_i = 0
        dp = cat.exact_probability_change(z, dz)
        p_new = cat.softmax(z) + dp  # in [0, 1] up to a few ulps, and equal to softmax(z + Δz)
        assert np.all(np.isfinite(dp)) and np.all((p_new >= -1e-14) & (p_new <= 1 + 1e-14))
        np.testing.assert_allclose(p_new, cat.softmax(z + dz), rtol=0, atol=1e-14)
        np.testing.assert_allclose(dp.sum(-1), 0, atol=1e-13)
        np.testing.assert_allclose(cat.subset_mass_change(z, dz, correct), -cat.subset_mass_change(z, dz, ~correct),
                                   atol=1e-13 * scale)
    q = cat.delta_q_pos(z, correct, counts, eta)
    u = cat.delta_q_unsampled_pos(z, correct, counts, eta)
    assert q.total.shape == u.total.shape == (B,) and np.all(np.isfinite(q.total)) and np.all(np.isfinite(u.total))


@settings(max_examples=30, deadline=None)
@given(z=logits, seed=st.integers(0, 2**32 - 1), G=st.integers(2, 9))
def test_effective_advantage_properties(z, seed, G):
    rng = np.random.default_rng(seed)
    correct = rng.random(z.shape) < 0.5
    a = cat.effective_advantage(z, correct, "grpo", G)
    assert a.shape == z.shape and np.all(np.isfinite(a))
    e = cat.expected_group_logit_update(z, correct, "grpo", G, 0.5)
    np.testing.assert_allclose(e.sum(-1), 0, atol=1e-12)


# ------------------------------------------------------------ bad input
def test_bad_inputs_name_the_argument():
    z = np.zeros(4)
    cases = [
        (lambda: cat.log_softmax([[np.nan, 0]]), "z must"),
        (lambda: cat.log_softmax(3.0), "z must"),
        (lambda: cat.logit_update(z, [4], [1.0], 0.1), "actions must"),
        (lambda: cat.logit_update(z, [0.5], [1.0], 0.1), "actions must"),
        (lambda: cat.logit_update(z, [1], [np.inf], 0.1), "advantages must"),
        (lambda: cat.logit_update(z, [1, 2], [1.0, 2.0, 3.0], 0.1), "advantages must"),
        (lambda: cat.logit_update(z, [1], [1.0], np.nan), "eta must"),
        (lambda: cat.expected_logit_update(z, [1.0, 2.0], 0.1), "action_advantage must"),
        (lambda: cat.surrogate_logit_update(z, [1, 0, 1, 0], [0, 0, 0, 0], 0.1), "counts must"),
        (lambda: cat.surrogate_logit_update(z, [1, 0, 1, 0], [1, -1, 0, 0], 0.1), "counts must"),
        (lambda: cat.surrogate_logit_update(z, [1, 0, 2, 0], [1, 0, 0, 0], 0.1), "correct must"),
        (lambda: cat.delta_q_pos(z, [1, 0, 1, 0], [1, 0, 0, 0], 0.1, reward_values=(0, np.nan)), "reward_values must"),
        (lambda: cat.effective_advantage(z, [1, 0, 1, 0], "agrae", 8), "adv must"),
        (lambda: cat.effective_advantage(z, [1, 0, 1, 0], "grpo", 0), "G must"),
        (lambda: cat.effective_advantage(z, [1, 0, 1, 0], 3, 8), "adv must"),
        (lambda: cat.subset_mass_change(z, np.zeros(3), [1, 0, 1, 0]), "dz must"),
        (lambda: cat.sample_actions(z, 0, np.random.default_rng(0)), "N must"),
        (lambda: cat.sample_actions(z, 3, 0), "rng must"),
        (lambda: cat.action_counts([1], 0), "K must"),
        (lambda: cat.action_counts([1], True), "K must be an integer >= 1"),
        (lambda: cat.action_counts([1], 4.5), "K must be an integer >= 1"),
        (lambda: cat.sample_actions(z, True, np.random.default_rng(0)), "N must be an integer >= 1"),
        (lambda: cat.sample_actions(z, 2.5, np.random.default_rng(0)), "N must be an integer >= 1"),
        (lambda: cat.effective_advantage(z, [1, 0, 1, 0], "grpo", True), "G must be an integer >= 1"),
        (lambda: cat.effective_advantage(z, [1, 0, 1, 0], "grpo", 8.5), "G must be an integer >= 1"),
        (lambda: cat.logit_update(z, np.array([True]), [1.0], 0.1), "actions must"),
        (lambda: cat.sample_moments(z, [1, 0, 1], [1, 0, 0, 0]), "correct must have a last axis of length 4"),
        (lambda: cat.delta_q_pos(z, [1, 0, 1, 0], [1, 0, 0, 0], 0.1, reward_values=(0, 1, 2)),
         "reward_values must be a pair"),
        (lambda: cat.log_partition_change(z, np.ones((2, 3))), "dz must have a last axis of length 4"),
        (lambda: cat.check_like("A", [1.0, 2.0], (3, 4)), "A must have a last axis of length 4"),
        (lambda: cat.check_like("A", np.ones((2, 4)), (3, 4)), "A must broadcast with shape (3, 4)"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match="^" + re.escape(msg)):
            fn()


def test_counts_follow_the_integer_policy():
    """N, K, G and action indices: ints, numpy integers and integral floats are the same count."""
    z = np.array([0.3, -0.2, 1.0, 0.0])
    ref = cat.sample_actions(z, 5, np.random.default_rng(3))
    for N in (5.0, np.int64(5), np.float64(5)):
        np.testing.assert_array_equal(cat.sample_actions(z, N, np.random.default_rng(3)), ref)
    for K in (4.0, np.int64(4)):
        np.testing.assert_array_equal(cat.action_counts([1, 1, 3], K), [0, 2, 0, 1])
    np.testing.assert_array_equal(cat.logit_update(z, [1.0, 3.0], [1.0, -1.0], 0.1),
                                  cat.logit_update(z, np.array([1, 3]), [1.0, -1.0], 0.1))
    ref = cat.effective_advantage(z, [1, 0, 1, 0], "grpo", 8)
    for G in (8.0, np.int64(8)):
        np.testing.assert_array_equal(cat.effective_advantage(z, [1, 0, 1, 0], "grpo", G), ref)


def test_log_partition_change_is_the_difference_of_logsumexps():
    rng = np.random.default_rng(0)
    z, dz = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    np.testing.assert_allclose(cat.log_partition_change(z, dz),
                               special.logsumexp(z + dz, -1) - special.logsumexp(z, -1), rtol=1e-13)
    np.testing.assert_allclose(cat.log_partition_change(z, 3 * dz),
                               special.logsumexp(z + 3 * dz, -1) - special.logsumexp(z, -1), rtol=1e-13)
    tiny = cat.log_partition_change(z, 1e-12 * dz)  # first order: Σ p·Δz, no cancellation
    np.testing.assert_allclose(tiny, 1e-12 * np.sum(cat.softmax(z) * dz, -1), rtol=1e-9)


# ------------------------------------------------------------------ docs
def test_docs_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "categorical.md").read_text(), flags=re.S)
    assert len(blocks) >= 2
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "docs/categorical.md", "exec"), ns)  # noqa: S102
