"""F-GRPO App. B: E[P_pos | X = k], E[P_neg | X = k], E[S_R | X = k] in closed form (Lemma B.1,
Eq. 17-19) against Monte Carlo, and the monotonicity of Lemma B.1 / Cor. B.2."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_theory import categorical as cat

RV = (-1.0, 1.0)


def _monte_carlo(p: np.ndarray, correct: np.ndarray, N: int, trials: int, seed: int, rv=RV):
    """Per k = 0..N: (count of groups with X = k, mean and standard error of P_pos, P_neg, S_R),
    from `trials` groups of N i.i.d. draws; the sampled masses come from `sample_moments`."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(N, p, size=trials)                        # [trials, K]
    X = counts[:, correct].sum(-1)
    m = cat.sample_moments(np.log(p), correct, counts, reward_values=rv)
    out = {}
    n_k = np.bincount(X, minlength=N + 1)
    for name, v in (("P_pos", m.P_pos), ("P_neg", m.P_neg), ("S_R", m.S_R)):
        s1 = np.bincount(X, weights=v, minlength=N + 1)
        s2 = np.bincount(X, weights=v * v, minlength=N + 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = s1 / n_k
            var = (s2 - n_k * mean**2) / (n_k - 1)
        out[name] = (mean, np.sqrt(np.maximum(var, 0.0) / n_k))
    return n_k, out


CASES = {
    # K = 6: correct masses 0.3, 0.05, 0.01; incorrect 0.4, 0.2, 0.04
    "six": (np.array([0.3, 0.05, 0.01, 0.4, 0.2, 0.04]), np.array([1, 1, 1, 0, 0, 0], bool), 8),
    # K = 400, a long tail (Zipf), 40 correct actions spread through it; N = 16
    "zipf": (None, None, 16),
}


def _case(name):
    p, c, N = CASES[name]
    if p is None:
        r = np.arange(1, 401)
        p = (1.0 / r**1.1) / np.sum(1.0 / r**1.1)
        c = np.zeros(400, bool)
        c[np.random.default_rng(3).choice(400, 40, replace=False)] = True
    return p, c, N


@pytest.mark.parametrize("name", sorted(CASES))
def test_lemma_b1_against_monte_carlo(name):
    p, c, N = _case(name)
    exact = cat.conditional_sampled_mass(np.log(p), c, N, reward_values=RV)
    n_k, mc = _monte_carlo(p, c, N, trials=60_000, seed=12345)
    used = n_k >= 50                                                   # k values seen often enough
    assert used.sum() >= 4
    for field in ("P_pos", "P_neg", "S_R"):
        mean, se = mc[field]
        err = np.abs(mean[used] - getattr(exact, field)[used])
        # 5 standard errors (+ rounding): a false alarm has probability ~ 6e-7 per value
        assert np.all(err <= 5 * se[used] + 1e-12), (field, err, se[used])


def test_the_extremes_are_exact():
    p, c, N = _case("six")
    m = cat.conditional_sampled_mass(np.log(p), c, N)
    assert m.P_pos[0] == 0.0 and m.P_neg[N] == 0.0                 # no correct / no incorrect draw
    # X = N correct draws: the chance that each correct action is hit at least once, by hand
    q = p[c] / p[c].sum()
    assert m.P_pos[N] == pytest.approx(np.sum(p[c] * (1 - (1 - q) ** N)), rel=1e-14)
    # with a single correct action, it is sampled as soon as X >= 1
    one = cat.conditional_sampled_mass(np.log(p), np.arange(6) == 0, N)
    np.testing.assert_allclose(one.P_pos[1:], p[0], rtol=1e-15)


@pytest.mark.parametrize("rv", [(0.0, 1.0), (-1.0, 1.0), (-0.3, 2.0), (0.0, 0.0001)])
def test_monotonicity_lemma_b1_and_corollary_b2(rv):
    rng = np.random.default_rng(7)
    z = rng.normal(0, 3, size=(50, 30))                                # 50 configurations of 30 actions
    c = rng.random((50, 30)) < 0.3
    N = 12
    m = cat.conditional_sampled_mass(z, c, N, reward_values=rv)
    d = cat.conditional_sampled_mass_differences(z, c, N, reward_values=rv)
    assert m.P_pos.shape == (50, N + 1) and d.P_pos.shape == (50, N)
    assert np.all(d.P_pos >= 0) and np.all(d.P_neg <= 0) and np.all(d.S_R >= 0)   # R_w <= 0 <= R_c
    # the closed-form steps are the differences of the closed form
    for field in ("P_pos", "P_neg", "S_R"):
        np.testing.assert_allclose(np.diff(getattr(m, field), axis=-1), getattr(d, field), rtol=1e-9, atol=1e-15)


def test_corollary_b2_needs_a_non_negative_correct_reward():
    # R_c > R_w and R_w <= 0 (Cor. B.2's stated hypotheses) with R_c < 0: the baseline falls at k = 0
    z = np.log([0.4, 0.6])
    m = cat.conditional_sampled_mass(z, [True, False], 3, reward_values=(-1.0, -0.5))
    assert m.S_R[1] < m.S_R[0]
    assert m.S_R[1] - m.S_R[0] == pytest.approx(-0.5 * 0.4)
    # Monte Carlo agrees
    n_k, mc = _monte_carlo(np.array([0.4, 0.6]), np.array([True, False]), 3, trials=20_000, seed=1,
                           rv=(-1.0, -0.5))
    assert mc["S_R"][0][1] < mc["S_R"][0][0]


def test_tiny_probabilities_keep_their_precision():
    # K = 128,000 with 10,000 correct actions, logits spread over 60 nats
    K, N = 128_000, 8
    z = np.linspace(0.0, -60.0, K)
    c = np.zeros(K, bool)
    c[::13] = True
    m = cat.conditional_sampled_mass(z, c, N)
    assert np.all(np.isfinite(m.P_pos)) and np.all(np.isfinite(m.P_neg))
    # a single rare correct action: E[P_pos | X = 1] = π(o)·q(o) exactly, without underflow to 0
    zr = np.array([0.0, -700.0, -5.0])
    r = cat.conditional_sampled_mass(zr, [False, True, True], N, k=1)
    p = cat.softmax(zr)
    q = p[1:] / p[1:].sum()
    assert float(r.P_pos) == pytest.approx(float(np.sum(p[1:] * q)), rel=1e-14)


def test_k_broadcasts_with_the_batch():
    p, c, N = _case("six")
    z = np.stack([np.log(p), np.log(p[::-1])])
    cc = np.stack([c, c[::-1]])
    full = cat.conditional_sampled_mass(z, cc, N)
    one = cat.conditional_sampled_mass(z, cc, N, k=[2, 5])
    assert one.P_pos.shape == (2,)
    np.testing.assert_allclose(one.P_pos, [full.P_pos[0, 2], full.P_pos[1, 5]], rtol=1e-15)
    np.testing.assert_allclose(cat.conditional_sampled_mass(z, cc, N, k=3).S_R, full.S_R[:, 3], rtol=1e-15)


def test_bad_arguments_name_the_argument():
    z = np.log([0.5, 0.5])
    with pytest.raises(ValueError, match=r"^N must be an integer >= 1, got 0"):
        cat.conditional_sampled_mass(z, [True, False], 0)
    with pytest.raises(ValueError, match=r"^k must contain only integers >= 0 and <= 3, got 4.0"):
        cat.conditional_sampled_mass(z, [True, False], 3, k=4)
    with pytest.raises(ValueError, match=r"^k must contain only integers >= 0 and <= 3, got 1.5"):
        cat.conditional_sampled_mass(z, [True, False], 3, k=1.5)
    with pytest.raises(ValueError, match=r"^k must broadcast with the batch shape"):
        cat.conditional_sampled_mass(np.zeros((2, 2)), [True, False], 3, k=[1, 2, 3])
    with pytest.raises(ValueError, match=r"^correct must"):
        cat.conditional_sampled_mass(z, [True, False, True], 3)
    with pytest.raises(ValueError, match=r"^reward_values must"):
        cat.conditional_sampled_mass_differences(z, [True, False], 3, reward_values=(0, 1, 2))
