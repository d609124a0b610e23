"""Entropy change of a softmax step: first-order forms against the exact one-step update
(relative error linear in η), torch autograd, mpmath, Monte Carlo (4 SE) and FADE's statements."""

from __future__ import annotations

import math
import re

import mpmath
import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlvr_theory import advantages, masses
from rlvr_theory import categorical as cat
from rlvr_theory import entropy as ent


def config(seed, B=6, K=20, scale=2.0, shift=0.7):
    """Random logits and advantages whose mean under π is far from 0 (sign-imbalanced)."""
    rng = np.random.default_rng(seed)
    return rng, rng.normal(0, scale, (B, K)), rng.normal(0, 1, (B, K)) + shift


def halving(rel_err_fn, eta0):
    errs = [rel_err_fn(eta0 / 2**k) for k in range(3)]
    return np.array([errs[0] / errs[1], errs[1] / errs[2]]), errs


# ------------------------------------------------------------ basics
def test_entropy_matches_scipy_and_gradient_matches_autograd():
    _, z, _ = config(0)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    np.testing.assert_allclose(ent.entropy(z), scipy.stats.entropy(p, axis=-1), rtol=1e-13)
    zt = torch.tensor(z, requires_grad=True)
    lp = torch.log_softmax(zt, -1)
    (-(lp.exp() * lp).sum()).backward()
    np.testing.assert_allclose(ent.entropy_gradient(z), zt.grad.numpy(), atol=1e-14)


def test_cov_pi_by_definition():
    rng, z, A = config(1)
    X = rng.normal(size=z.shape)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    ex, ea = (p * X).sum(-1), (p * A).sum(-1)
    ref = (p * X * A).sum(-1) - ex * ea
    np.testing.assert_allclose(ent.cov_pi(z, X, A), ref, atol=1e-13)


def test_first_order_change_is_the_directional_derivative():
    """∇H·Δz against torch forward-mode (jvp) of H(softmax(z + t·Δz)) at t = 0."""
    rng, z, A = config(2)
    dz = rng.normal(size=z.shape)

    def H(zt):
        lp = torch.log_softmax(zt, -1)
        return -(lp.exp() * lp).sum(-1)

    _, jvp = torch.func.jvp(H, (torch.tensor(z),), (torch.tensor(dz),))
    np.testing.assert_allclose(ent.first_order_change(z, dz), jvp.numpy(), atol=1e-13)
    np.testing.assert_allclose(ent.natural_change(z, A, 1.0), ent.first_order_change(z, A), atol=1e-13)
    np.testing.assert_allclose(ent.vanilla_change(z, A, 1.0), ent.first_order_change(z, ent.vanilla_step(z, A, 1.0)),
                               atol=1e-13)


def test_vanilla_covariance_form():
    """ΔH_vanilla = −η[Cov(log π, π·A) − E[A]·Cov(log π, π)]; = −η·Cov(log π, π·A) when E_π[A] = 0."""
    _, z, A = config(3)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    lp = np.log(p)
    ea = (p * A).sum(-1)
    ref = -0.1 * (ent.cov_pi(z, lp, p * A) - ea * ent.cov_pi(z, lp, p))
    np.testing.assert_allclose(ent.vanilla_change(z, A, 0.1), ref, atol=1e-14)
    Ac = A - ea[:, None]
    np.testing.assert_allclose(ent.vanilla_change(z, Ac, 0.1), -0.1 * ent.cov_pi(z, lp, p * Ac), atol=1e-14)


def test_natural_step_is_the_fisher_preconditioned_gradient():
    """(diag π − ππᵀ)·A = ∂E_π[A]/∂z: Δz = ηA is a natural-gradient step (up to a shift)."""
    _, z, A = config(4, B=1, K=9)
    p = np.exp(z[0]) / np.exp(z[0]).sum()
    F = np.diag(p) - np.outer(p, p)
    grad = ent.vanilla_step(z[0], A[0], 1.0)
    np.testing.assert_allclose(F @ A[0], grad, atol=1e-15)
    np.testing.assert_allclose(F @ (A[0] + 3.0), grad, atol=1e-15)
    sol = np.linalg.lstsq(F, grad, rcond=None)[0]  # minimum-norm solution: A minus its plain mean
    np.testing.assert_allclose(sol - sol.mean(), A[0] - A[0].mean(), atol=1e-10)


# -------------------------------------------- exact one-step update
def test_exact_change_against_naive_and_mpmath():
    rng, z, A = config(5)
    dz = 0.05 * A
    np.testing.assert_allclose(ent.exact_change(z, dz), ent.entropy(z + dz) - ent.entropy(z), rtol=1e-10)
    mpmath.mp.dps = 60
    z0, d0 = z[0], 1e-9 * A[0]

    def H(v):
        e = [mpmath.exp(mpmath.mpf(float(x))) for x in v]
        s = sum(e)
        return -sum(x / s * mpmath.log(x / s) for x in e)

    ref = float(H([mpmath.mpf(float(a)) + mpmath.mpf(float(b)) for a, b in zip(z0, d0)]) - H(z0))
    assert float(ent.exact_change(z0, d0)) == pytest.approx(ref, rel=1e-8)
    big = ent.exact_change(z, 30 * A)  # steps beyond |Δz| = 1 take the logsumexp branch
    np.testing.assert_allclose(big, ent.entropy(z + 30 * A) - ent.entropy(z), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("step", ["natural", "vanilla"])
def test_first_order_relative_error_is_linear_in_eta(step):
    """Halving η halves |predicted − exact|/|exact| (ratio within [1.8, 2.2]) on 6 configurations."""
    _, z, A = config(6)
    if step == "natural":
        dz_fn, pred_fn, eta0 = (lambda e: ent.natural_step(A, e)), ent.natural_change, 1e-3
    else:
        dz_fn, pred_fn, eta0 = (lambda e: ent.vanilla_step(z, A, e)), ent.vanilla_change, 2e-2

    def rel(eta):
        exact = ent.exact_change(z, dz_fn(eta))
        return np.abs(pred_fn(z, A, eta) - exact) / np.abs(exact)

    ratios, errs = halving(rel, eta0)
    assert np.all(errs[0] < 0.25) and np.all(errs[0] > 1e-8), errs[0]
    assert np.all((ratios > 1.8) & (ratios < 2.2)), ratios


def test_fade_eq7_misses_the_exact_change_by_its_drift_term():
    """With E_π[A] = m_S − m_F ≠ 0, (exact − FADE Eq. 7)/η → −(m_S − m_F)·H as η → 0:
    the drift term is not part of the first-order entropy change of a softmax natural step."""
    _, z, A = config(7)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    drift = ent.drift(ent.entropy(z), (p * np.clip(A, 0, None)).sum(-1), -(p * np.clip(A, None, 0)).sum(-1))
    np.testing.assert_allclose(drift, (p * A).sum(-1) * ent.entropy(z), rtol=1e-12)
    assert np.all(np.abs(drift) > 0.3)
    for eta in (1e-2, 1e-3, 1e-4):
        resid = (ent.exact_change(z, ent.natural_step(A, eta)) - ent.fade_change(z, A, eta)) / eta
        np.testing.assert_allclose(resid, -drift, rtol=0, atol=20 * eta)
    # ... and the FADE form's relative error does not shrink with η
    exact = ent.exact_change(z, ent.natural_step(A, 1e-5))
    assert np.all(np.abs(ent.fade_change(z, A, 1e-5) - exact) / np.abs(exact) > 0.05)


def test_fade_eq7_is_exact_first_order_for_sign_balanced_advantages():
    _, z, A = config(8)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    Ac = A - (p * A).sum(-1, keepdims=True)  # E_π[A] = 0, i.e. m_S = m_F
    np.testing.assert_allclose(ent.fade_change(z, Ac, 0.1), ent.natural_change(z, Ac, 0.1), atol=1e-14)


def test_mean_advantage_does_not_move_the_exact_step():
    """Adding c to every advantage leaves the exact entropy change of both steps unchanged."""
    _, z, A = config(9)
    for c in (-2.0, 5.0):
        np.testing.assert_allclose(ent.exact_change(z, ent.natural_step(A + c, 0.05)),
                                   ent.exact_change(z, ent.natural_step(A, 0.05)), rtol=1e-9)
        np.testing.assert_allclose(ent.exact_change(z, ent.vanilla_step(z, A + c, 0.05)),
                                   ent.exact_change(z, ent.vanilla_step(z, A, 0.05)), rtol=1e-9, atol=1e-17)


def test_one_step_table():
    _, z, A = config(10, B=1)
    t = ent.one_step_table(z[0], A[0], [0.02, 0.01, 0.005])
    assert len(t) == 9 and set(t.form) == {"natural", "fade", "vanilla"}
    nat = t[t.form == "natural"].rel_error.to_numpy()
    np.testing.assert_allclose(nat[:-1] / nat[1:], 2.0, rtol=0.1)
    fade = t[t.form == "fade"]
    np.testing.assert_allclose(fade.predicted - t[t.form == "natural"].predicted.to_numpy(),
                               fade.eta * fade.E_A * fade.H, rtol=1e-12)


# ----------------------------------------------------- sampled & masses
def test_fade_sampled_is_unbiased_monte_carlo():
    """Mean over 20,000 groups of N = 3 draws within 4 SE of FADE Eq. 7 per action."""
    rng, z, A = config(11, B=1, K=6)
    z, A = z[0], A[0]
    M, N = 20_000, 3
    acts = cat.sample_actions(np.broadcast_to(z, (M, 6)), N, rng)
    lp = cat.log_softmax(z)
    est = ent.fade_change_sampled(lp[acts], A[acts], ent.entropy(z), 0.1)
    target = float(ent.fade_change(z, A, 0.1))
    se = est.std(ddof=1) / math.sqrt(M)
    assert abs(est.mean() - target) <= 4 * se
    assert abs(target - float(ent.natural_change(z, A, 0.1))) > 10 * se  # the drift is visible to MC
    lp8, a8 = lp[acts[:3]], A[acts[:3]]  # the formula on three groups, with numpy's covariance
    ref = [0.1 * (a.mean() * ent.entropy(z) - np.cov(a, l)[0, 1]) for a, l in zip(a8, lp8)]
    np.testing.assert_allclose(ent.fade_change_sampled(lp8, a8, ent.entropy(z), 0.1), ref, rtol=1e-12)


def test_drift_signs_of_fade_sec41():
    """AsymGRPO (FADE Sec. 4.1): δ = 1 no drift, δ > 1 positive, δ < 1 negative; equals
    p(1−p)(1 − 1/δ)·H; sign-balanced families have none."""
    p, H = np.array([0.2, 0.5, 0.8]), 3.0
    for delta, sign in ((1.0, 0), (2.0, 1), (0.5, -1)):
        d = ent.drift_from_advantage(advantages.get("asym_grpo", delta=delta), p, H)
        np.testing.assert_allclose(d, p * (1 - p) * (1 - 1 / delta) * H, atol=1e-15)
        assert np.all(np.sign(np.round(d, 15)) == sign)
    assert np.all(ent.drift_from_advantage("grpo", p, H) == 0)
    e = ent.drift_from_advantage("reinforce", p, H, 8, exact=True)
    m = masses.exact("reinforce", p, 8)
    np.testing.assert_allclose(e, (m.m_S - m.m_F) * H)
    np.testing.assert_allclose(e, p * H, rtol=1e-13)  # REINFORCE: m_S = p, m_F = 0


def test_expected_group_entropy_change_has_no_drift():
    """E[first-order ΔH] of a sampled group update (Two-Stage Lemma 1) with a success-biased advantage
    equals −η·Cov_π(log π, π(ā − E ā)) — the vanilla form with the effective advantage,
    whatever m_S − m_F is (Monte Carlo, 4 SE)."""
    rng = np.random.default_rng(12)
    z = rng.normal(0, 1.5, 8)
    correct = np.arange(8) < 3
    adv = advantages.get("asym_grpo", delta=3.0)  # m_S = 3 m_F
    a_eff = cat.effective_advantage(z, correct, adv, 8)
    target = float(ent.vanilla_change(z, a_eff, 1.0))
    acts = cat.sample_actions(np.broadcast_to(z, (20_000, 8)), 8, rng)
    dH = ent.first_order_change(z, cat.group_logit_update(z, acts, correct, adv, 1.0))
    se = dH.std(ddof=1) / math.sqrt(len(dH))
    assert abs(dH.mean() - target) <= 4 * se


# ------------------------------------------------------------ large K
def test_large_vocabulary_tiny_probabilities():
    K = 128_000
    rng = np.random.default_rng(13)
    z = rng.normal(0, 3, (2, K))
    z[:, :500] = -5000.0
    A = rng.normal(size=(2, K))
    H = ent.entropy(z)
    assert np.all(np.isfinite(H)) and np.all((H > 0) & (H < math.log(K)))
    for dz_fn, pred in ((lambda e: ent.natural_step(A, e), ent.natural_change),
                        (lambda e: ent.vanilla_step(z, A, e), ent.vanilla_change)):
        unit = 1.0 / np.abs(dz_fn(1.0)).max()  # η with the largest logit move equal to 1
        for move, rtol in ((1e-3, 1e-2), (1e-9, 1e-7)):  # linear in η down to tiny steps
            exact = ent.exact_change(z, dz_fn(move * unit))
            assert np.all(np.isfinite(exact))
            np.testing.assert_allclose(pred(z, A, move * unit), exact, rtol=rtol)
    assert np.all(np.isfinite(ent.entropy_gradient(z)))


# ------------------------------------------------------------ properties
logits = hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 40)),
                    elements=st.floats(-300, 300, allow_nan=False))


@settings(max_examples=80, deadline=None)
@given(z=logits, seed=st.integers(0, 2**32 - 1), c=st.floats(-50, 50))
def test_entropy_properties(z, seed, c):
    K = z.shape[-1]
    H = ent.entropy(z)
    assert np.all(np.isfinite(H)) and np.all(H >= -1e-12) and np.all(H <= math.log(K) + 1e-9)
    np.testing.assert_allclose(ent.entropy(z + c), H, atol=1e-9)
    g = ent.entropy_gradient(z)
    np.testing.assert_allclose(g.sum(-1), 0, atol=1e-12 * max(1.0, np.abs(g).max()))
    np.testing.assert_allclose(ent.first_order_change(z, np.full(z.shape, c)), 0, atol=1e-9 * (1 + abs(c)))
    A = np.random.default_rng(seed).normal(0, 2, z.shape)
    for dz in (ent.natural_step(A, 0.3), ent.vanilla_step(z, A, 0.3)):
        ex = ent.exact_change(z, dz)
        assert ex.shape == H.shape and np.all(np.isfinite(ex))
        np.testing.assert_allclose(ex, ent.entropy(z + dz) - H, atol=1e-9)
    np.testing.assert_allclose(ent.exact_change(z, np.full(z.shape, c)), 0, atol=1e-12)


# ------------------------------------------------------------ bad input
def test_bad_inputs_name_the_argument():
    z = np.zeros(4)
    cases = [
        (lambda: ent.entropy([np.inf, 0.0]), "z must"),
        (lambda: ent.natural_change(z, [1.0, 2.0], 0.1), "A must"),
        (lambda: ent.natural_change(z, np.ones(4), "x"), "eta must"),
        (lambda: ent.natural_step(np.nan, 0.1), "A must"),
        (lambda: ent.first_order_change(z, [np.nan] * 4), "dz must"),
        (lambda: ent.cov_pi(z, np.ones(3), np.ones(4)), "X must"),
        (lambda: ent.fade_change_sampled([[-1.0]], [[1.0]], 1.0, 0.1), "log_prob must"),
        (lambda: ent.fade_change_sampled([-1.0, 0.5], [1.0, 1.0], 1.0, 0.1), "log_prob must"),
        (lambda: ent.fade_change_sampled([-1.0, -2.0], [1.0, 1.0], -1.0, 0.1), "H must"),
        (lambda: ent.drift(1.0, np.nan, 0.0), "m_S must contain only finite numbers"),
        (lambda: ent.drift(1.0, 0.0, [np.inf]), "m_F must contain only finite numbers"),
        (lambda: ent.drift(-1.0, 0.0, 0.0), "H must contain only finite numbers >= 0"),
        (lambda: ent.exact_change(z, np.ones(3)), "dz must have a last axis of length 4"),
        (lambda: ent.drift_from_advantage("grpo", 0.5, 1.0, G=True, exact=True), "G must be an integer >= 1"),
        (lambda: ent.drift_from_advantage("grpo", 0.5, 1.0, G=8.5, exact=True), "G must be an integer >= 1"),
        (lambda: ent.drift_from_advantage("grpo", 1.5, 1.0), "p must"),
        (lambda: ent.one_step_table(np.zeros((2, 3)), np.zeros(3), [0.1]), "z must"),
        (lambda: ent.one_step_table(z, np.ones(4), [0.0]), "etas must"),
    ]
    for fn, msg in cases:
        with pytest.raises(ValueError, match="^" + re.escape(msg)):
            fn()
