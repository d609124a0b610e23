"""Multi-turn masses and retries (FADE App. 9.1-9.2) against brute-force enumeration over all
outcomes, Monte Carlo with fixed seeds, and the Power α masses of ``rlvr_theory.masses``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlvr_theory import advantages, masses, multiturn

POWER2 = advantages.get("power_alpha", alpha=2.0)


# ------------------------------------------------------------ independent references
def hand_advantages(name: str, r: list[int]) -> list[float]:
    """The advantages written out by hand (rewards {0, 1}), not through the registry."""
    G = len(r)
    mean = sum(r) / G
    if name == "dr_grpo":
        return [ri - mean for ri in r]
    if name == "power2":
        return [(ri - mean) * (1 - mean) for ri in r]
    if name == "grpo":
        sd = math.sqrt(sum((ri - mean) ** 2 for ri in r) / G)
        return [0.0 if sd == 0 else (ri - mean) / sd for ri in r]
    raise AssertionError(name)


def brute_force(name: str, p_turns: list[float], G: int, rule: str):
    """Σ over every outcome of T·G rollouts of Pr(outcome)·1{t reached}·M^(t), per turn, and ρ_t."""
    T = len(p_turns)
    m_s, m_f, rho = [0.0] * T, [0.0] * T, [0.0] * T
    for outcome in itertools.product((0, 1), repeat=T * G):
        groups = [list(outcome[t * G:(t + 1) * G]) for t in range(T)]
        prob = 1.0
        for t, g in enumerate(groups):
            for ri in g:
                prob *= p_turns[t] if ri else 1 - p_turns[t]
        reached = True
        for t, g in enumerate(groups):
            if not reached:
                break
            rho[t] += prob
            A = hand_advantages(name, g)
            m_s[t] += prob * sum(a for a, ri in zip(A, g) if ri) / G
            m_f[t] -= prob * sum(a for a, ri in zip(A, g) if not ri) / G
            reached = (g[0] == 0) if rule == "attempt" else (sum(g) == 0)
    return np.array(m_s), np.array(m_f), np.array(rho)


ADV = {"dr_grpo": "dr_grpo", "power2": POWER2, "grpo": "grpo"}


# ------------------------------------------------------------------ App. 9.1: masses
@pytest.mark.parametrize("rule", multiturn.RULES)
@pytest.mark.parametrize("name", sorted(ADV))
@pytest.mark.parametrize("p_turns,G", [([0.3, 0.6], 3), ([0.2, 0.5, 0.9], 2), ([0.7, 0.7, 0.7], 2)])
def test_turn_masses_and_reachability_match_enumeration(rule, name, p_turns, G):
    m_s, m_f, rho = brute_force(name, p_turns, G, rule)
    np.testing.assert_allclose(multiturn.reachability(p_turns, rule=rule, G=G), rho, rtol=1e-12)
    m = multiturn.turn_masses(ADV[name], p_turns, G, rule=rule, exact=True)
    np.testing.assert_allclose(m.m_S, m_s, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(m.m_F, m_f, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("rule", multiturn.RULES)
def test_of_rollouts_matches_a_hand_loop_on_every_outcome(rule):
    G, T = 2, 3
    outcomes = np.array(list(itertools.product((0, 1), repeat=T * G))).reshape(-1, T, G)
    got = multiturn.of_rollouts("dr_grpo", outcomes, rule=rule)
    for k, groups in enumerate(outcomes.tolist()):
        reached = True
        for t, g in enumerate(groups):
            A = hand_advantages("dr_grpo", g)
            want_s = sum(a for a, ri in zip(A, g) if ri) / G if reached else 0.0
            want_f = -sum(a for a, ri in zip(A, g) if not ri) / G if reached else 0.0
            assert got.m_S[k, t] == pytest.approx(want_s, abs=1e-15)
            assert got.m_F[k, t] == pytest.approx(want_f, abs=1e-15)
            reached = reached and ((g[0] == 0) if rule == "attempt" else (sum(g) == 0))


@pytest.mark.parametrize("rule,seed", [("attempt", 0), ("group", 1)])
def test_monte_carlo_mean_of_rollouts_is_the_exact_turn_mass(rule, seed):
    rng = np.random.default_rng(seed)
    p_turns, G, n = np.array([0.3, 0.45, 0.6]), 4, 200_000
    rewards = (rng.random((n, 3, G)) < p_turns[None, :, None]).astype(float)
    for adv in ("dr_grpo", POWER2):
        real = multiturn.of_rollouts(adv, rewards, rule=rule)
        want = multiturn.turn_masses(adv, p_turns, G, rule=rule, exact=True)
        for got, exp in ((real.m_S, want.m_S), (real.m_F, want.m_F)):
            se = got.std(axis=0, ddof=1) / math.sqrt(n)
            assert np.all(np.abs(got.mean(axis=0) - exp) <= 5 * se + 1e-12), (got.mean(0), exp, se)


def test_single_turn_is_the_single_turn_framework():
    p = np.linspace(0, 1, 11)
    assert np.all(multiturn.reachability(p, turns=1) == 1.0)
    for adv in ("grpo", "dr_grpo", POWER2, advantages.get("asym_grpo", delta=0.5)):
        m = multiturn.turn_masses(adv, p, 8, turns=1)
        cf = masses.closed_form(adv, p, 8)
        np.testing.assert_array_equal(m.m_S[..., 0], cf.m_S)
        np.testing.assert_array_equal(m.m_F[..., 0], cf.m_F)
        mx = multiturn.turn_masses(adv, p, 8, turns=1, exact=True)
        np.testing.assert_array_equal(mx.m_S[..., 0], masses.exact(adv, p, 8).m_S)


def test_same_context_reachability_is_a_power_of_the_failure_rate():
    p = np.array([[0.0, 0.2], [0.5, 1.0]])
    rho = multiturn.reachability(p, turns=4)
    assert rho.shape == (2, 2, 4)
    np.testing.assert_allclose(rho, (1 - p)[..., None] ** np.arange(4), rtol=1e-15)
    rho_g = multiturn.reachability(p, turns=4, rule="group", G=3)
    np.testing.assert_allclose(rho_g, (1 - p)[..., None] ** (3 * np.arange(4)), rtol=1e-15)


def test_policy_gradient_splits_by_turn_with_reachability():
    """FADE Eq. 16 on a softmax policy, by enumeration: the expected update
    E[Σ_t 1{t reached}·(1/G)Σ_i A_i ∇log π_t(a_i)] equals Σ_t m_S^(t)∇̄_S^(t) − m_F^(t)∇̄_F^(t)
    with the per-turn masses of ``turn_masses`` (each turn its own logits: feedback)."""
    logits = [np.array([0.3, -0.2, 0.5]), np.array([1.0, 0.1, -0.4])]
    success = {0}
    G, T, K = 2, 2, 3
    pis = [np.exp(z) / np.exp(z).sum() for z in logits]

    def score(t, a):  # ∇ log π_t(a) w.r.t. (logits_1, logits_2)
        g = np.zeros(T * K)
        g[t * K:(t + 1) * K] = np.eye(K)[a] - pis[t]
        return g

    for name in ("dr_grpo", "power2"):
        for rule in multiturn.RULES:
            total = np.zeros(T * K)
            for acts in itertools.product(range(K), repeat=T * G):
                groups = [acts[t * G:(t + 1) * G] for t in range(T)]
                prob = math.prod(pis[t][a] for t, g in enumerate(groups) for a in g)
                reached = True
                for t, g in enumerate(groups):
                    if not reached:
                        break
                    r = [int(a in success) for a in g]
                    A = hand_advantages(name, r)
                    total += prob * sum(Ai * score(t, a) for Ai, a in zip(A, g)) / G
                    reached = (r[0] == 0) if rule == "attempt" else (sum(r) == 0)
            p_turns = [pis[t][0] for t in range(T)]
            m = multiturn.turn_masses(ADV[name], p_turns, G, rule=rule, exact=True)
            want = np.zeros(T * K)
            for t in range(T):
                grad_s = score(t, 0)  # the only success
                grad_f = sum(pis[t][a] * score(t, a) for a in (1, 2)) / (1 - pis[t][0])
                want += m.m_S[t] * grad_s - m.m_F[t] * grad_f
            np.testing.assert_allclose(total, want, rtol=1e-12, atol=1e-15)


# ------------------------------------------------- App. 9.2: one retry = Power α = 2
P = np.linspace(0, 1, 41)


def test_one_retry_has_the_closed_form_masses_of_power_alpha_2():
    retry = multiturn.turn_masses("dr_grpo", P, turns=2)
    power = masses.closed_form(POWER2, P)
    np.testing.assert_allclose(retry.m_S[:, 1], power.m_S, rtol=1e-13, atol=1e-17)
    np.testing.assert_allclose(retry.m_F[:, 1], power.m_F, rtol=1e-13, atol=1e-17)
    # the first round is GRPO (mean-only) itself: the whole update is Dr. GRPO + Power α = 2
    np.testing.assert_allclose(retry.m_S.sum(-1), masses.closed_form("dr_grpo", P).m_S + power.m_S, rtol=1e-13)


@pytest.mark.parametrize("alpha", [1, 2, 3, 4, 5])
def test_the_alpha_minus_1_th_retry_is_power_alpha(alpha):
    retry = multiturn.turn_masses("dr_grpo", P, turns=alpha).m_S[:, alpha - 1]
    plain = advantages.get("power_alpha", alpha=float(alpha))
    np.testing.assert_allclose(retry, masses.closed_form(plain, P).m_S, rtol=1e-13, atol=1e-17)
    # the peak-normalised Power α only up to its constant C = (1+α)^(1+α)/(4α^α)
    normed = masses.closed_form(advantages.get("power_alpha", alpha=float(alpha), normalize=True), P).m_S
    C = (1 + alpha) ** (1 + alpha) / (4 * alpha**alpha)
    np.testing.assert_allclose(C * retry, normed, rtol=1e-13, atol=1e-17)
    if alpha == 2:
        assert C == 27 / 16


@pytest.mark.parametrize("G", [1, 2, 3, 8, 64])
def test_at_finite_G_the_identity_misses_exactly_power2_gap(G):
    retry = multiturn.turn_masses("dr_grpo", P, G, turns=2, exact=True).m_S[:, 1]
    power = masses.exact(POWER2, P, G)
    gap = multiturn.power2_gap(P, G)
    np.testing.assert_allclose(power.m_S - retry, gap, atol=1e-15)
    np.testing.assert_allclose(power.m_F - retry, gap, atol=1e-15)
    # exact at p = 1/2 (and the ends), never off by more than 0.097/G
    assert np.all(np.abs(gap[[0, 20, 40]]) <= 1e-17)
    assert np.max(np.abs(gap)) <= 0.097 / G


def test_power2_gap_against_binomial_enumeration():
    for G in (2, 5, 9):
        for p in (0.1, 0.35, 0.8):
            power = sum(math.comb(G, x) * p**x * (1 - p) ** (G - x) * (x / G) * (1 - x / G) ** 2
                        for x in range(G + 1))
            retry = (1 - p) * sum(math.comb(G, x) * p**x * (1 - p) ** (G - x) * (x / G) * (1 - x / G)
                                  for x in range(G + 1))
            assert multiturn.power2_gap(p, G) == pytest.approx(power - retry, abs=1e-15)


def test_the_identity_is_asymptotic_in_G():
    p = np.array([0.1, 0.3, 0.7, 0.9])
    for G in (16, 256, 4096):
        retry = multiturn.turn_masses("dr_grpo", p, G, turns=2, exact=True).m_S[:, 1]
        power = masses.exact(POWER2, p, G).m_S
        # G·(difference) → p q (2p − 1); both tend to the plug-in p q²
        np.testing.assert_allclose(G * (power - retry), p * (1 - p) * (2 * p - 1) * (G - 1) / G, rtol=1e-9)
        np.testing.assert_allclose(power, p * (1 - p) ** 2, atol=1.0 / G)


def test_power2_is_dr_grpo_times_the_failure_fraction_in_every_group():
    """The within-batch form: Power α = 2 is Dr. GRPO reweighted by q̂, the reachability of
    the retry estimated from the same group (exact for every group)."""
    G = 5
    r = np.array(list(itertools.product((0.0, 1.0), repeat=G)))
    qhat = 1 - r.mean(-1)
    power, dr = masses.of_group(POWER2, r), masses.of_group("dr_grpo", r)
    np.testing.assert_allclose(power.m_S, qhat * dr.m_S, rtol=1e-14, atol=1e-17)
    np.testing.assert_allclose(power.m_F, qhat * dr.m_F, rtol=1e-14, atol=1e-17)


def test_monte_carlo_retry_loop_against_power_alpha_2():
    """Sampling the retry loop: its turn-2 mass is q·(G−1)/G·pq, Power α = 2 on the round-1
    groups is E[p̂q̂²], and the two differ by power2_gap (within 5 standard errors)."""
    rng = np.random.default_rng(7)
    G, n = 8, 400_000
    for p in (0.25, 0.5, 0.8):
        rewards = (rng.random((n, 2, G)) < p).astype(float)
        turn2 = multiturn.of_rollouts("dr_grpo", rewards).m_S[:, 1]
        power = masses.of_group(POWER2, rewards[:, 0]).m_S
        diff = power - turn2
        se = diff.std(ddof=1) / math.sqrt(n)
        assert abs(diff.mean() - float(multiturn.power2_gap(p, G))) <= 5 * se
        se2 = turn2.std(ddof=1) / math.sqrt(n)
        assert abs(turn2.mean() - (1 - p) * (G - 1) / G * p * (1 - p)) <= 5 * se2


def test_what_is_not_power_alpha_2():
    q = 1 - P
    # a retry of the groups without any success: q^G·pq
    grp = multiturn.turn_masses("dr_grpo", P, 4, turns=2, rule="group").m_S[:, 1]
    np.testing.assert_allclose(grp, q**4 * P * q, atol=1e-17)
    assert not np.allclose(grp, masses.closed_form(POWER2, P).m_S)
    # a retry with std-normalised GRPO: q·sqrt(pq)
    std = multiturn.turn_masses("grpo", P, turns=2).m_S[:, 1]
    np.testing.assert_allclose(std, q * np.sqrt(P * q), atol=1e-15)


# -------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call,match", [
    (lambda: multiturn.reachability(0.5), "p must have at least 1 axis"),
    (lambda: multiturn.reachability(np.zeros((2, 0))), "p must have at least one turn"),
    (lambda: multiturn.reachability([0.5, 1.5]), "p must contain only finite numbers >= 0 and <= 1, got 1.5"),
    (lambda: multiturn.reachability(0.5, turns=0), "turns must be an integer >= 1, got 0"),
    (lambda: multiturn.reachability(0.5, turns=2.5), "turns must be an integer >= 1, got 2.5"),
    (lambda: multiturn.reachability(0.5, turns=True), "turns must be an integer >= 1, got True"),
    (lambda: multiturn.reachability(0.5, turns=2, rule="any"), "rule must be one of 'attempt', 'group'"),
    (lambda: multiturn.reachability(0.5, turns=2, rule="group"), "G is required"),
    (lambda: multiturn.reachability(0.5, turns=2, G=0), "G must be an integer >= 1, got 0"),
    (lambda: multiturn.turn_masses("dr_grpo", 0.5, turns=2, exact=True), "G is required"),
    (lambda: multiturn.turn_masses("dr_grpo", 0.5, 4, turns=2, exact=1), "exact must be one of True, False"),
    (lambda: multiturn.turn_masses("nope", 0.5, turns=2), "nope"),
    (lambda: multiturn.turn_masses("dr_grpo", float("nan"), turns=2), "p must contain only finite numbers >= 0 and <= 1, got nan"),
    (lambda: multiturn.of_rollouts("dr_grpo", [0, 1]), "rewards must have at least 2 axis"),
    (lambda: multiturn.of_rollouts("dr_grpo", np.zeros((2, 0))), "rewards must have shape"),
    (lambda: multiturn.of_rollouts("dr_grpo", [[0, 2]]), "rewards"),
    (lambda: multiturn.of_rollouts("dr_grpo", [[0, 1]], rule="all"), "rule must be one of"),
    (lambda: multiturn.power2_gap(0.5, 0), "G must be an integer >= 1, got 0"),
    (lambda: multiturn.power2_gap(-0.1, 4), "p must contain only finite numbers >= 0 and <= 1, got -0.1"),
])
def test_bad_input_is_refused_with_a_clear_message(call, match):
    with pytest.raises(ValueError, match=match):
        call()
