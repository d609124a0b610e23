"""A-GRAE's ablations (A-GRAE Table 5, App. D.5) and A-GRAE on Dr. GRPO, against a reference
written from the paper's Eq. 11-13 group by group, and the masses machinery (closed form given p̂,
brute-force enumeration, Monte Carlo) for the parameters the generic registry tests do not reach."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlvr_theory import advantages, masses


def reference(rewards: np.ndarray, *, sample: bool, group: bool, norm_by_std: bool = True, omega=None,
              alpha: float = 1.0) -> np.ndarray:
    """A-GRAE Eq. 11-13 literally, one group at a time (rewards {0, 1}, rows = groups of one batch).

    Eq. 11: ω = the batch mean reward.  Base advantage: GRPO (r − mean)/std (population std), or
    Dr. GRPO r − mean (the authors' ``norm_adv_by_std_in_grpo=False``).  Eq. 12 (sample level):
    ω/2·A/sqrt(p) + (1−ω)/2·A/sqrt(1−p) with p the group's success rate.  Eq. 13 (group level):
    positive advantages times min(1, ω/α).  A group whose rewards are all equal gets 0."""
    r = np.asarray(rewards, dtype=float)
    w = r.mean() if omega is None else omega
    out = np.zeros_like(r)
    for i, row in enumerate(r):
        p = row.mean()
        if p in (0.0, 1.0):
            continue
        a = row - p
        if norm_by_std:
            a = a / row.std()
        if sample:
            a = w / 2 * a / math.sqrt(p) + (1 - w) / 2 * a / math.sqrt(1 - p)
        if group:
            a = np.array([x * min(1.0, w / alpha) if x > 0 else x for x in a])
        out[i] = a
    return out


FAMILIES = {"agrae": (True, True), "agrae_sample": (True, False), "agrae_group": (False, True)}


def test_hand_computed_group():
    """p̂ = 1/4, ω = 1/2: GRPO gives sqrt(3) and −1/sqrt(3)."""
    r = np.array([1.0, 0, 0, 0])
    s3 = math.sqrt(3)
    sample_pos = 0.25 * s3 / 0.5 + 0.25 * s3 / math.sqrt(0.75)        # = sqrt(3)·(1/2) + 1/2
    sample_neg = -(0.25 / s3 / 0.5 + 0.25 / s3 / math.sqrt(0.75))
    np.testing.assert_allclose(advantages.get("agrae_sample", omega=0.5)(r), [sample_pos] + [sample_neg] * 3)
    np.testing.assert_allclose(advantages.get("agrae_group", omega=0.5)(r), [s3 / 2] + [-1 / s3] * 3)
    np.testing.assert_allclose(advantages.get("agrae", omega=0.5)(r), [sample_pos / 2] + [sample_neg] * 3)
    # on Dr. GRPO the base is r − 1/4: (3/4, −1/4)
    dr = (0.25 / 0.5 + 0.25 / math.sqrt(0.75))
    np.testing.assert_allclose(advantages.get("agrae", omega=0.5, norm_by_std=False)(r),
                               [0.75 * dr / 2] + [-0.25 * dr] * 3)
    np.testing.assert_allclose(advantages.get("agrae_group", omega=0.5, norm_by_std=False)(r),
                               [0.375, -0.25, -0.25, -0.25])


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("omega", [None, 0.2, 0.85])
def test_registry_equals_the_reference(name, norm_by_std, omega):
    rng = np.random.default_rng(3)
    rewards = (rng.random((40, 6)) < rng.uniform(0.1, 0.9, (40, 1))).astype(float)
    sample, group = FAMILIES[name]
    kw = {"omega": omega, "norm_by_std": norm_by_std}
    if group:
        kw["alpha"] = 0.7
    got = advantages.get(name, **kw)(rewards)
    want = reference(rewards, sample=sample, group=group, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_full_agrae_is_the_group_step_after_the_sample_step(norm_by_std):
    rng = np.random.default_rng(5)
    rewards = (rng.random((30, 8)) < 0.4).astype(float)
    w, alpha = float(rewards.mean()), 0.9
    a = advantages.get("agrae_sample", norm_by_std=norm_by_std)(rewards)
    full = advantages.get("agrae", alpha=alpha, norm_by_std=norm_by_std)(rewards)
    np.testing.assert_allclose(full, np.where(a > 0, a * min(1.0, w / alpha), a), rtol=1e-13)
    # the group-level step alone equals GRPO (or Dr. GRPO) with the positives attenuated
    base = advantages.get("grpo" if norm_by_std else "dr_grpo")(rewards)
    grp = advantages.get("agrae_group", alpha=alpha, norm_by_std=norm_by_std)(rewards)
    np.testing.assert_allclose(grp, np.where(base > 0, base * min(1.0, w / alpha), base), rtol=1e-13)


def test_defaults_and_the_dr_grpo_reward_scale():
    assert advantages.get("agrae").params == {"omega": None, "alpha": 1.0, "norm_by_std": True}
    assert advantages.get("agrae_sample").params == {"omega": None, "norm_by_std": True}
    assert advantages.get("agrae_group").params == {"omega": None, "alpha": 1.0, "norm_by_std": True}
    r = np.array([[1.0, 0, 1, 0, 0], [0, 0, 0, 1, 0]])
    for name in FAMILIES:
        on_grpo = advantages.get(name, omega=0.4)
        on_dr = advantages.get(name, omega=0.4, norm_by_std=False)
        # GRPO-based: invariant to the reward values; Dr. GRPO-based: proportional to R_c − R_w
        np.testing.assert_allclose(on_grpo.with_params(reward_values=(-1, 1))(2 * r - 1), on_grpo(r), atol=1e-14)
        np.testing.assert_allclose(on_dr.with_params(reward_values=(-1, 1))(2 * r - 1), 2 * on_dr(r), atol=1e-14)
        assert on_grpo.reward_scale_power() == 0.0 and on_dr.reward_scale_power() == 1.0


def test_bad_parameters_are_refused_with_their_name():
    with pytest.raises(ValueError, match="agrae: norm_by_std must be one of True, False; got 1"):
        advantages.get("agrae", norm_by_std=1)
    with pytest.raises(ValueError, match="agrae_sample: unknown parameter.*alpha.*allowed: norm_by_std, omega"):
        advantages.get("agrae_sample", alpha=0.5)
    with pytest.raises(ValueError, match="agrae_group: omega must be"):
        advantages.get("agrae_group", omega=1.5)
    with pytest.raises(ValueError, match="agrae_group: alpha must be"):
        advantages.get("agrae_group", alpha=0)


# ------------------------------------------------------------------ masses
NONDEFAULT = [advantages.get(n, **kw) for n in FAMILIES for kw in (
    {"omega": 0.3}, {"omega": 0.9, "norm_by_std": False}, {"norm_by_std": False})]
NONDEFAULT += [advantages.get("agrae_group", omega=0.3, alpha=0.5), advantages.get("agrae_group", alpha=0.4,
                                                                                     norm_by_std=False)]


def _per_group(adv, rewards):
    if adv.batch_level:  # every group its own batch: ω = p̂, as the closed form's homogeneous batch
        out = [masses.of_group(adv, r[None]) for r in rewards]
        return np.concatenate([m.m_S for m in out]), np.concatenate([m.m_F for m in out])
    m = masses.of_group(adv, rewards)
    return m.m_S, m.m_F


@pytest.mark.parametrize("reward_values", [(0.0, 1.0), (0.5, 3.0)])
@pytest.mark.parametrize("adv", NONDEFAULT, ids=repr)
def test_closed_form_is_exact_given_phat(adv, reward_values):
    adv = adv.with_params(reward_values=reward_values)
    rw, rc = reward_values
    for G in (3, 4, 8, 16):
        x = np.arange(1, G)
        rewards = np.where(np.arange(G)[None, :] < x[:, None], rc, rw)
        m_s, m_f = _per_group(adv, rewards)
        c = masses.closed_form(adv, x / G, G)
        np.testing.assert_allclose(np.c_[m_s, m_f], np.c_[c.m_S, c.m_F], rtol=0, atol=1e-12)


@pytest.mark.parametrize("adv", NONDEFAULT, ids=repr)
def test_exact_matches_brute_force_enumeration(adv):
    """Σ over all 2^G reward vectors of p^X q^(G−X)·masses (ω = p in a homogeneous batch)."""
    G = 6
    vecs = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    X = vecs.sum(1)
    p = np.array([0.0, 0.13, 0.5, 0.77, 1.0])
    w = p[:, None] ** X * (1 - p[:, None]) ** (G - X)
    e = masses.exact(adv, p, G)
    if adv.batch_level:
        A = np.stack([adv.with_params(omega=float(pi))(vecs) for pi in p])  # [P, 2^G, G], ω = p
        m_s = np.where(vecs == 1, A, 0.0).sum(-1) / G
        m_f = -np.where(vecs == 1, 0.0, A).sum(-1) / G
        np.testing.assert_allclose(e.m_S, (w * m_s).sum(1), atol=1e-13)
        np.testing.assert_allclose(e.m_F, (w * m_f).sum(1), atol=1e-13)
    else:
        m = masses.of_group(adv, vecs)
        np.testing.assert_allclose(e.m_S, w @ m.m_S, atol=1e-13)
        np.testing.assert_allclose(e.m_F, w @ m.m_F, atol=1e-13)


@pytest.mark.parametrize("adv", [a for a in NONDEFAULT if not a.batch_level], ids=repr)
def test_monte_carlo_agrees_with_exact(adv):
    rng = np.random.default_rng(11)
    G, n = 8, 20000
    for p in (0.2, 0.55):
        rewards = (rng.random((n, G)) < p).astype(float)
        m = masses.of_group(adv, rewards)
        e = masses.exact(adv, p, G)
        for sample, target in ((m.m_S, e.m_S), (m.m_F, e.m_F)):
            se = sample.std(ddof=1) / math.sqrt(n)
            assert abs(sample.mean() - float(target)) <= 4 * se + 1e-12, (repr(adv), p, sample.mean(), target, se)


def test_sign_balance_of_the_ablations():
    """The sample-level step rescales a group without changing the balance of its signs; the
    group-level step attenuates the successes when ω < α and is GRPO when ω >= α."""
    rewards = np.where(np.arange(8)[None, :] < np.arange(1, 8)[:, None], 1.0, 0.0)
    for kw in ({"omega": 0.3}, {"omega": 0.3, "norm_by_std": False}):
        m = masses.of_group(advantages.get("agrae_sample", **kw), rewards)
        np.testing.assert_allclose(m.m_S, m.m_F, rtol=1e-13)
    m = masses.of_group(advantages.get("agrae_group", omega=0.3, alpha=0.6), rewards)
    np.testing.assert_allclose(m.m_S, 0.5 * m.m_F, rtol=1e-13)
    m = masses.of_group(advantages.get("agrae_group", omega=0.8, alpha=0.6), rewards)
    np.testing.assert_allclose(m.m_S, m.m_F, rtol=1e-13)
