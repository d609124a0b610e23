"""Gradient masses: closed forms against the implementation, exact expectations against
brute-force enumeration and Monte Carlo, and the papers' numbers."""

from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pytest

from rlvr_theory import advantages, masses

GS = (2, 3, 4, 8, 16)
ALL = advantages.names()
BY_KIND = {k: [n for n in ALL if advantages.registry()[n].kind == k] for k in ("exact", "expectation", "asymptotic")}


def groups_with_successes(G: int, xs, reward_values=(0.0, 1.0), shuffle_seed=None) -> np.ndarray:
    """One reward row per x in xs, the x successes placed at random positions if seeded."""
    xs = np.asarray(xs)
    succ = (np.arange(G)[None, :] < xs[:, None])
    if shuffle_seed is not None:
        rng = np.random.default_rng(shuffle_seed)
        succ = rng.permuted(succ, axis=1)
    rw, rc = reward_values
    return np.where(succ, rc, rw)


def lengths_for(adv, rewards):
    if not adv.uses_lengths:
        return None
    return adv.default_lengths((rewards == adv.reward_values[1]).astype(float))


def fits(adv, G):
    try:
        masses.check_group_size(G, adv)
        return True
    except ValueError:
        return False


def per_group_masses(adv, rewards):
    """Masses group by group (a batch-level family then sees each group as its own batch)."""
    if adv.batch_level:
        out = [masses.of_group(adv, r[None], lengths=lengths_for(adv, r[None])) for r in rewards]
        return masses.Masses(np.concatenate([m.m_S for m in out]), np.concatenate([m.m_F for m in out]))
    return masses.of_group(adv, rewards, lengths=lengths_for(adv, rewards))


# ------------------------------------------------------- exact given p-hat
@pytest.mark.parametrize("reward_values", [(0.0, 1.0), (-1.0, 1.0), (0.5, 3.0)])
@pytest.mark.parametrize("name", BY_KIND["exact"])
def test_closed_form_is_exact_given_phat(name, reward_values):
    """For every X in 1..G-1 the masses of a group equal the closed form at p̂ = X/G (1e-12)."""
    adv = advantages.get(name, reward_values=reward_values)
    checked = 0
    for G in GS:
        if not fits(adv, G):
            continue
        x = np.arange(1, G)
        m = per_group_masses(adv, groups_with_successes(G, x, reward_values, shuffle_seed=G))
        c = masses.closed_form(adv, x / G, G)
        np.testing.assert_allclose(m.m_S, c.m_S, rtol=0, atol=1e-12)
        np.testing.assert_allclose(m.m_F, c.m_F, rtol=0, atol=1e-12)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("adv", [
    advantages.get("grpo", ddof=1), advantages.get("grpo", eps=0.1), advantages.get("power_alpha", alpha=0.5),
    advantages.get("power_alpha", alpha=3, normalize=True), advantages.get("power_alpha_easy", alpha=2.5),
    advantages.get("asym_power_alpha", alpha_s=0.5, alpha_f=3), advantages.get("asym_grpo", delta=0.3),
    advantages.get("asymrl", delta=0.2), advantages.get("quantile", tau=0.25), advantages.get("quantile", tau=0.75),
    advantages.get("quantile", tau=1.0), advantages.get("power_norm", gamma=0.2), advantages.get("softmax", beta=3),
    advantages.get("w_reinforce", lam=0.5), advantages.get("t2t", alpha=2.0, length_correct=0.9, length_incorrect=0.2),
    advantages.get("fgrpo", gamma=2.5), advantages.get("agrae", omega=0.3, alpha=0.5), advantages.get("agrae", omega=0.9),
    advantages.get("agrae_hard", gamma=1), advantages.get("positive_dominant", beta=3),
    advantages.get("negative_dominant", beta=4), advantages.get("iac", alpha=0.5), advantages.get("fade", alpha=2.5, delta=0.4),
], ids=repr)
def test_closed_form_exact_with_nondefault_params(adv):
    for G in (3, 4, 8, 16):
        x = np.arange(1, G)
        m = per_group_masses(adv, groups_with_successes(G, x, adv.reward_values))
        c = masses.closed_form(adv, x / G, G)
        np.testing.assert_allclose(np.c_[m.m_S, m.m_F], np.c_[c.m_S, c.m_F], rtol=0, atol=1e-12)


def test_t2t_general_lengths_match_paper_algebra():
    """FADE Eq. 12-14: M_S = M_F = p̂q̂·C/σ_R with C from the class-mean lengths (random lengths)."""
    rng = np.random.default_rng(0)
    adv = advantages.get("t2t", alpha=0.3)
    G = 8
    rewards = groups_with_successes(G, np.arange(1, G), shuffle_seed=1)
    L = rng.uniform(0, 1, rewards.shape)
    m = masses.of_group(adv, rewards, lengths=L)
    s = rewards == 1
    ph = s.mean(1)
    LS = np.where(s, L, 0).sum(1) / s.sum(1)
    LF = np.where(~s, L, 0).sum(1) / (~s).sum(1)
    R = np.where(s, 1 - 0.3 * ph[:, None] * L, 0.3 * (1 - ph[:, None]) * L)
    C = 1 - 0.3 * ph * LS - 0.3 * (1 - ph) * LF
    expect = ph * (1 - ph) * C / R.std(1)
    np.testing.assert_allclose(m.m_S, expect, rtol=1e-12)
    np.testing.assert_allclose(m.m_F, expect, rtol=1e-12)


# ------------------------------------------------------------ expectation
@pytest.mark.parametrize("name", BY_KIND["expectation"])
def test_expectation_closed_form_equals_exact_expectation(name):
    adv = advantages.get(name)
    p = np.linspace(0, 1, 41)
    for G in GS:
        e, c = masses.exact(adv, p, G), masses.closed_form(adv, p, G)
        np.testing.assert_allclose(e.m_S, c.m_S, atol=1e-14)
        np.testing.assert_allclose(e.m_F, c.m_F, atol=1e-14)


def test_passk_tang_fires_only_on_unique_success():
    adv = advantages.get("passk_tang")
    r = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 1, 0]])
    np.testing.assert_array_equal(adv(r), [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]])


# -------------------------------------------------------------- asymptotic
@pytest.mark.parametrize("name", BY_KIND["asymptotic"])
def test_asymptotic_families_converge_at_rate_one_over_G(name):
    """max relative gap between exact(p, G) and the closed form halves when G doubles."""
    adv = advantages.get(name)
    p = np.linspace(0.1, 0.9, 17)

    def gap(G):
        e, c = masses.exact(adv, p, G), masses.closed_form(adv, p, G)
        return np.max(np.abs(np.r_[e.m_S - c.m_S, e.m_F - c.m_F]) / np.r_[c.m_S, c.m_F])

    gaps = [gap(G) for G in (128, 256, 512)]
    assert gaps[-1] < 0.05
    for a, b in zip(gaps, gaps[1:]):
        assert 1.7 < a / b < 2.3, gaps


def test_passk_chen_finite_G_formula_of_the_paper():
    """FADE App. 8.4.2: given p̂, m_S = m_F = p̂·sqrt((1−R_k)/R_k), R_k = 1 − C(F,k)/C(G,k)."""
    for k in (1, 2, 4):
        adv = advantages.get("passk_chen", k=k)
        for G in (4, 8, 16):
            x = np.arange(1, G)
            m = masses.of_group(adv, groups_with_successes(G, x, shuffle_seed=3))
            F = G - x
            R = np.array([1 - math.comb(int(f), k) / math.comb(G, k) for f in F])
            expect = x / G * np.sqrt((1 - R) / R)
            np.testing.assert_allclose(m.m_S, expect, atol=1e-12)
            np.testing.assert_allclose(m.m_F, expect, atol=1e-12)


def test_passk_chen_k1_is_grpo():
    r = groups_with_successes(8, np.arange(0, 9), shuffle_seed=4)
    np.testing.assert_allclose(advantages.get("passk_chen", k=1)(r), advantages.get("grpo")(r), atol=1e-12)


def test_logmeanexp_exact_finite_G_derivation():
    """Our derivation: A_s = β⁻¹log((G−1)m/(Gm − e^{βΔ})), A_f = β⁻¹log((G−1)m/(Gm − 1))."""
    for beta in (0.5, 1.0, 4.0):
        adv = advantages.get("logmeanexp", beta=beta)
        for G in (2, 3, 8, 16):
            x = np.arange(1, G)
            ph = x / G
            m_ = ph * math.exp(beta) + (1 - ph)
            a_s = np.log((G - 1) * m_ / (G * m_ - math.exp(beta))) / beta
            a_f = np.log((G - 1) * m_ / (G * m_ - 1)) / beta
            m = masses.of_group(adv, groups_with_successes(G, x, shuffle_seed=5))
            np.testing.assert_allclose(m.m_S, ph * a_s, rtol=1e-12)
            np.testing.assert_allclose(m.m_F, -(1 - ph) * a_f, rtol=1e-12)
            assert np.all(m.m_S > m.m_F)  # weak success bias (Jensen)


def test_logmeanexp_direct_definition():
    """Against a literal leave-one-out computation on the reward vector."""
    beta, r = 2.0, np.array([1.0, 0, 0, 1, 0, 1, 0])

    def lme(v):
        return np.log(np.mean(np.exp(beta * v))) / beta

    expect = [lme(r) - lme(np.delete(r, i)) for i in range(len(r))]
    np.testing.assert_allclose(advantages.get("logmeanexp", beta=beta)(r), expect, rtol=1e-13)


# -------------------------------------------------- exact() is exact
@pytest.mark.parametrize("name", ALL)
def test_exact_matches_brute_force_enumeration(name):
    """Σ over all 2^G reward vectors of p^X q^(G−X)·masses, without the permutation shortcut."""
    adv = advantages.get(name)
    if adv.batch_level and "omega" in adv.params:
        adv = adv.with_params(omega=0.35)
    G = 6 if fits(adv, 6) else 8
    vecs = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    X = vecs.sum(1)
    p = np.array([0.0, 0.13, 0.5, 0.77, 1.0])
    w = p[:, None] ** X * (1 - p[:, None]) ** (G - X)
    e = masses.exact(adv, p, G)
    if adv.batch_level:  # reinforce_pp: each vector inside the homogeneous batch at its p
        A = adv.population_advantages(vecs, p)  # [P, 2^G, G]
        m_s = np.where(vecs == 1, A, 0.0).sum(-1) / G
        m_f = -np.where(vecs == 1, 0.0, A).sum(-1) / G
        np.testing.assert_allclose(e.m_S, (w * m_s).sum(1), atol=1e-13)
        np.testing.assert_allclose(e.m_F, (w * m_f).sum(1), atol=1e-13)
        return
    m = masses.of_group(adv, vecs, lengths=lengths_for(adv, vecs))
    np.testing.assert_allclose(e.m_S, w @ m.m_S, atol=1e-13)
    np.testing.assert_allclose(e.m_F, w @ m.m_F, atol=1e-13)


def test_agrae_population_exact_uses_omega_equal_p():
    adv = advantages.get("agrae", alpha=0.7)
    for p in (0.2, 0.5, 0.9):
        e = masses.exact(adv, p, 8)
        f = masses.exact(adv.with_params(omega=p), p, 8)
        assert float(e.m_S) == pytest.approx(float(f.m_S), abs=1e-14)
        assert float(e.m_F) == pytest.approx(float(f.m_F), abs=1e-14)


def test_agrae_omega_from_batch():
    rewards = groups_with_successes(4, [1, 2, 3, 0])
    omega = rewards.mean()
    np.testing.assert_allclose(advantages.get("agrae")(rewards),
                               advantages.get("agrae", omega=omega)(rewards), atol=1e-15)


# ------------------------------------------------------------- Monte Carlo
MC_ADVS = [advantages.get(n, omega=0.3) if "omega" in advantages.registry()[n].defaults else advantages.get(n)
           for n in ALL]  # reinforce_pp: the 20,000 groups are one large batch


@pytest.mark.parametrize("adv", MC_ADVS, ids=lambda a: a.name)
def test_monte_carlo_agrees_with_exact(adv):
    """Random groups of Bernoulli(p) rewards: the sample mean of the masses lies within 4 SE.

    The seed is fixed per family (crc32 of its name; Python's ``hash`` of a string changes from
    run to run).  A batch-level family conditions every group on the batch's own statistics (GPG's
    α = B/#successes, the batch std of REINFORCE++): the 20,000 groups share that common-mode
    error, which the per-group SE does not see, so its target is the exact mass at the batch's
    realised solve rate."""
    rng = np.random.default_rng(zlib.crc32(adv.name.encode()))
    G, n = 8, 20000
    for p in (0.2, 0.55):
        rewards = (rng.random((n, G)) < p).astype(float)
        m = masses.of_group(adv, rewards, lengths=lengths_for(adv, rewards))
        e = masses.exact(adv, float(rewards.mean()) if adv.batch_level else p, G)
        for sample, target in ((m.m_S, e.m_S), (m.m_F, e.m_F)):
            se = sample.std(ddof=1) / math.sqrt(n)
            assert abs(sample.mean() - float(target)) <= 4 * se + 1e-12, (adv.name, p, sample.mean(), target, se)


# -------------------------------------------------------------- sign balance
BALANCED = ["grpo", "dr_grpo", "rloo", "skew_r", "power_alpha", "power_alpha_easy", "maxrl", "passk_chen",
            "passk_mix", "binary_contrastive", "power_norm", "softmax", "t2t", "fgrpo", "agrae_sample", "agrae_hard", "agrae_easy",
            "reinforce_pp", "grpo_batch", "opo", "reinforce_pp_baseline", "gpg"]
BIASED = ["reinforce", "asym_power_alpha", "passk_tang", "asymrl", "quantile", "mc_grpo", "logmeanexp", "relu",
          "w_reinforce", "positive_dominant", "negative_dominant", "iac", "grpo_n", "grpo_passk", "agrae_group"]


def test_every_family_is_classified():
    assert set(BALANCED) | set(BIASED) | {"asym_grpo", "fade", "agrae"} == set(ALL)


@pytest.mark.parametrize("name", BALANCED)
def test_sign_balanced_families_have_equal_masses(name):
    adv = advantages.get(name)
    for G in (4, 8, 16):
        if not fits(adv, G):
            continue
        rewards = groups_with_successes(G, np.arange(G + 1), shuffle_seed=G)
        m = masses.of_group(adv, rewards, lengths=lengths_for(adv, rewards))
        np.testing.assert_allclose(m.m_S, m.m_F, rtol=1e-13, atol=1e-15)
    ms, mf = adv.closed_form()
    assert (ms - mf).equals(0)
    np.testing.assert_allclose(masses.advantage_ratio(adv, [0.3, 0.5], 8), [0.3 / 0.7, 1.0], rtol=1e-12)
    np.testing.assert_allclose(masses.advantage_ratio(adv, [0.3, 0.5], 8, exact=True), [0.3 / 0.7, 1.0], rtol=1e-12)


@pytest.mark.parametrize("adv", [advantages.get(n) for n in BIASED] + [
    advantages.get("asym_grpo", delta=0.5), advantages.get("fade", alpha=2, delta=0.5),
    advantages.get("agrae", omega=0.3, alpha=0.6)], ids=repr)
def test_sign_biased_families_have_unequal_masses(adv):
    rewards = groups_with_successes(8, np.arange(1, 8))
    m = masses.of_group(adv, rewards)
    assert np.max(np.abs(m.m_S - m.m_F)) > 1e-3
    assert not np.allclose(masses.sign_ratio(adv, [0.3, 0.5], 8, exact=True), 1.0)


def test_delta_one_and_equal_powers_are_balanced():
    for adv in (advantages.get("asym_grpo", delta=1), advantages.get("fade", alpha=2, delta=1),
                advantages.get("asym_power_alpha", alpha_s=1, alpha_f=1), advantages.get("iac", alpha=0)):
        np.testing.assert_allclose(masses.sign_ratio(adv, np.linspace(0.05, 0.95, 7), 8), 1.0, rtol=1e-12)


# -------------------------------------------------------- the papers' numbers
def test_abs_sum_agrae_theorem2_and_table1b():
    for G in (2, 4, 8, 16):
        x = np.arange(G + 1)
        r = groups_with_successes(G, x, shuffle_seed=7)
        ph = x / G
        np.testing.assert_allclose(masses.abs_adv_sum("grpo", r), 2 * G * np.sqrt(ph * (1 - ph)), atol=1e-12)
        np.testing.assert_allclose(masses.abs_adv_sum("agrae_hard", r)[1:-1], G * np.sqrt(1 - ph[1:-1]), atol=1e-12)
        np.testing.assert_allclose(masses.abs_adv_sum("agrae_easy", r)[1:-1], G * np.sqrt(ph[1:-1]), atol=1e-12)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0, 3.0, 5.0])
def test_power_alpha_peak_and_normalisation(alpha):
    adv = advantages.get("power_alpha", alpha=alpha, normalize=True)
    p_star, m_star = masses.peak(adv)
    assert p_star == pytest.approx(1 / (1 + alpha), abs=1e-7)
    assert m_star == pytest.approx(0.25, abs=1e-12)
    C = (1 + alpha) ** (1 + alpha) / (4 * alpha**alpha)
    ms = masses.closed_form(adv, 0.3).m_S
    assert float(ms) == pytest.approx(C * 0.3 * 0.7**alpha, rel=1e-14)


def test_known_closed_form_values():
    p, q = 0.3, 0.7
    cases = {
        ("grpo", ()): (math.sqrt(p * q),) * 2,
        ("dr_grpo", ()): (p * q,) * 2,
        ("maxrl", ()): (q, q),
        ("binary_contrastive", ()): (p, p),
        ("relu", ()): (p * q, 0.0),
        ("asymrl", (("delta", 0.01),)): (p * (q - 0.01), q * (p + 0.01)),
        ("skew_r", ()): ((p * q) ** 1.5,) * 2,
        ("w_reinforce", (("lam", 0.1),)): (0.1 * p, q),
        ("mc_grpo", ()): (p, 0.0),
        ("passk_chen", (("k", 4),)): (p * math.sqrt(q**4 / (1 - q**4)),) * 2,
        ("grpo_n", ()): (0.0, math.sqrt(p * q)),
        ("power_norm", (("gamma", 0.0),)): (p * q,) * 2,
    }
    for (name, params), expect in cases.items():
        m = masses.closed_form(advantages.get(name, **dict(params)), p)
        assert (float(m.m_S), float(m.m_F)) == pytest.approx(expect, rel=1e-13, abs=1e-15), name


def test_exact_differs_from_plugin_and_agrees_for_linear_families():
    """E[p̂q̂] = pq(G−1)/G for Dr. GRPO: the exact column is not the plug-in one."""
    for G in (2, 8, 32):
        e = masses.exact("dr_grpo", 0.3, G)
        assert float(e.m_S) == pytest.approx(0.21 * (G - 1) / G, rel=1e-13)
    # binary contrastive: m = p̂ except X = G (no failures -> 0): E = p − p^G
    assert float(masses.exact("binary_contrastive", 0.3, 4).m_S) == pytest.approx(0.3 - 0.3**4, rel=1e-13)


def test_ratios_at_the_ends_are_limits():
    assert masses.sign_ratio("grpo", [0.0, 1.0]).tolist() == [1.0, 1.0]
    assert masses.advantage_ratio("grpo", [0.0, 1.0]).tolist() == [0.0, math.inf]
    assert masses.sign_ratio("relu", 0.0) == math.inf
    np.testing.assert_array_equal(masses.advantage_ratio("grpo", [0.0, 1.0], 8, exact=True), [0.0, math.inf])
    t = masses.table(np.linspace(0, 1, 11), 8)
    assert not t.drop(columns=["balance"]).isna().any().any()


def test_table_columns_and_values():
    t = masses.table([0.3, 0.5], 8)
    assert set(advantages.names()) == set(t.advantage)
    assert {"m_S", "m_F", "m_S_exact", "m_F_exact", "sign_ratio", "advantage_ratio", "advantage_ratio_exact",
            "abs_adv_sum_exact", "kind", "balance"} <= set(t.columns)
    row = t[(t.advantage == "asym_grpo") & (t.p == 0.3)].iloc[0]
    assert row.m_S == pytest.approx(0.21) and row.m_F == pytest.approx(0.21)
    grpo = t[(t.advantage == "grpo") & (t.p == 0.5)].iloc[0]
    assert grpo.balance == "balanced"
    # Σ|A| per group = G·(m_S + m_F) for sign-consistent weights
    assert grpo.abs_adv_sum_exact == pytest.approx(8 * (grpo.m_S_exact + grpo.m_F_exact), rel=1e-13)
    # and E[Σ_i |A_i|] per group by enumerating the 2^8 reward vectors (population-std GRPO, flat groups 0)
    r = np.array(list(itertools.product([0.0, 1.0], repeat=8)))
    sd = r.std(axis=1, keepdims=True)
    A = np.divide(r - r.mean(axis=1, keepdims=True), sd, out=np.zeros_like(r), where=sd > 0)
    assert grpo.abs_adv_sum_exact == pytest.approx(np.abs(A).sum(axis=1).mean(), rel=1e-12)  # p = 0.5: uniform


def test_outcome_advantages():
    t = masses.outcome_advantages(advantages.get("fgrpo", gamma=1.0), 4)
    assert list(t.x) == [0, 1, 2, 3, 4]
    assert math.isnan(t.A_success[0]) and math.isnan(t.A_failure[4])
    # x = 1: p̂ = 1/4, A_s = (3/4)·sqrt(3), A_f = −(3/4)/sqrt(3)
    assert t.A_success[1] == pytest.approx(0.75 * math.sqrt(3), rel=1e-14)
    assert t.A_failure[1] == pytest.approx(-0.75 / math.sqrt(3), rel=1e-14)


# ------------------------------------------------------------- bad input
def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="^p must"):
        masses.closed_form("grpo", 1.5)
    with pytest.raises(ValueError, match="^p must"):
        masses.exact("grpo", float("nan"), 8)
    with pytest.raises(ValueError, match="^G must"):
        masses.exact("grpo", 0.3, 0)
    with pytest.raises(ValueError, match="^G must"):
        masses.exact("passk_chen", 0.3, 2)  # k = 4 > G
    with pytest.raises(ValueError, match="^G is required"):
        masses.closed_form("rloo", 0.3)
    with pytest.raises(ValueError, match="^which"):
        masses.peak("grpo", which="m_X")
    with pytest.raises(ValueError, match="^adv"):
        masses.of_group(3, [[1, 0]])


def test_p_and_G_follow_the_checks_policy():
    """G: ints, numpy ints and integral floats accepted; bool, 8.5 and NaN refused (one policy)."""
    ref = masses.exact("grpo", 0.3, 8)
    for G in (8, np.int64(8), 8.0, np.float64(8.0)):
        assert masses.exact("grpo", 0.3, G) == ref
        assert masses.check_group_size(G) == 8 and type(masses.check_group_size(G)) is int
    for bad in (True, 8.5, float("nan"), "8", 0, -1):
        with pytest.raises(ValueError, match="^G must be an integer >= 1, got "):
            masses.exact("grpo", 0.3, bad)
    assert masses.check_group_size(None, required=False) is None
    with pytest.raises(ValueError, match=r"^G must be >= 2 for advantages.get\('rloo'\), got 1$"):
        masses.check_group_size(1, advantages.get("rloo"))
    np.testing.assert_array_equal(masses.check_p([0, 0.5, np.float32(1)]), [0.0, 0.5, 1.0])
    assert masses.check_p(np.int64(1)).dtype == np.float64
    for bad in (1.5, -0.1, float("nan"), float("inf"), True, np.array([True]), "x", [0.2, 2]):
        with pytest.raises(ValueError, match=r"^p must lie in \[0, 1\], got "):
            masses.closed_form("grpo", bad)
    with pytest.raises(ValueError, match="^advantage: unknown advantage 'nope'"):
        masses.as_advantage("nope")
