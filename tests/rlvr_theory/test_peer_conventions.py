"""The peer trainers' advantage conventions in the registry (verl 0.9, TRL 1.16, SkyRL 0.4).

Each family is checked against an independent numpy transcription of the peer's definition
(loops over groups and tokens, written from the peers' source, not from the registry), its
closed form against exact enumeration of all 2^G groups and against Monte Carlo batches
computed by the finite definition, and its parameters against their refusals.  The peers'
own code is compared in tests/integrations/test_peers_verl.py (verl installed).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlvr_theory import advantages, masses

NEW = ["grpo_batch", "grpo_passk", "opo", "reinforce_pp_baseline", "gpg"]


# ------------------------------------------------- the peers, transcribed
def trl(rewards: np.ndarray, scale_rewards: str) -> np.ndarray:
    """TRL GRPOTrainer (sum_then_normalize): rewards (groups, G) -> advantages."""
    r = rewards.astype(float)
    mean = r.mean(1, keepdims=True)
    if scale_rewards == "group":
        std = np.array([[np.std(row, ddof=1)] for row in r])
    elif scale_rewards == "batch":
        std = np.std(r.ravel(), ddof=1)
    else:
        return r - mean
    return (r - mean) / (std + 1e-4)


def verl_grpo(rewards, eps=1e-6, norm=True):
    out = np.zeros(rewards.shape)
    for i, row in enumerate(rewards):
        mu, sd = row.mean(), np.std(row, ddof=1)
        out[i] = (row - mu) / (sd + eps) if norm else row - mu
    return out


def verl_passk(rewards, eps=1e-6, norm=True):
    out = np.zeros(rewards.shape)
    for i, row in enumerate(rewards):
        order = np.argsort(-row, kind="stable")
        adv = row[order[0]] - row[order[1]]
        if norm:
            adv = adv / (np.std(row, ddof=1) + eps)
        out[i, order[0]] = adv
    return out


def verl_opo(rewards, lengths):
    out = np.zeros(rewards.shape)
    for i, (row, ln) in enumerate(zip(rewards, lengths)):
        out[i] = row - (ln * row).sum() / ln.sum()
    return out


def verl_rfpp_baseline(rewards, lengths, *, literal=True):
    """verl: group mean subtracted, tiled over each response's tokens, masked_whiten over the batch."""
    c = rewards - rewards.mean(1, keepdims=True)
    L = int(lengths.max())
    flat_c, flat_len = c.ravel(), lengths.ravel().astype(int)
    mask = (np.arange(L)[None, :] < flat_len[:, None]).astype(float)  # (bs, L)
    values = flat_c[:, None] * mask
    n = mask.sum()
    tiny = 1e-8 if literal else 0.0  # verl's masked_mean divides by mask.sum() + 1e-8
    mean = (values * mask).sum() / (n + tiny)
    var = (((values - mean) ** 2) * mask).sum() / (n + tiny) * (n / (n - 1))
    white = (values - mean) / np.sqrt(var + 1e-8) * mask
    # every token of a response carries the same advantage: read it off the first token
    return white[:, 0].reshape(rewards.shape)


def verl_gpg(rewards, f_norm=1.0):
    flat = rewards.ravel()
    alpha = flat.size / max(np.count_nonzero(flat), 1)
    return alpha * (rewards - rewards.mean(1, keepdims=True)) / f_norm


def skyrl_maxrl(rewards, eps=1e-6):
    mean = rewards.mean(1, keepdims=True)
    return (rewards - mean) / (mean + eps)


def binary_batch(rng, n, G, p=0.4):
    r = (rng.random((n, G)) < p).astype(float)
    r[0], r[1] = 0.0, 1.0  # one group all wrong, one all right
    return r


def real_batch(rng, n, G):
    """Partial credit in quarters (exact binary fractions: the flat groups stay exactly flat)."""
    r = rng.integers(0, 5, (n, G)) / 4.0
    r[0] = 0.75
    return r


# --------------------------------------------------- definitions = peers
@pytest.mark.parametrize("G", [2, 3, 8])
def test_trl_scale_rewards_group_batch_none(G):
    rng = np.random.default_rng(G)
    for r in (binary_batch(rng, 12, G), real_batch(rng, 12, G)):
        calls = {"group": advantages.get("grpo", ddof=1, eps=1e-4), "batch": advantages.get("grpo_batch"),
                 "none": advantages.get("dr_grpo")}
        for mode, adv in calls.items():
            got = adv(r) if np.isin(r, (0.0, 1.0)).all() else adv.graded_call(r)
            np.testing.assert_allclose(got, trl(r, mode), rtol=1e-12, atol=1e-12, err_msg=mode)


def test_grpo_batch_parameters_are_the_batch_std_ddof_and_eps():
    rng = np.random.default_rng(3)
    r = real_batch(rng, 7, 5)
    for ddof, eps in ((0, 0.0), (1, 0.5), (0, 1e-3)):
        sd = np.std(r.ravel(), ddof=ddof)
        expect = (r - r.mean(1, keepdims=True)) / (sd + eps)
        np.testing.assert_allclose(advantages.get("grpo_batch", ddof=ddof, eps=eps).graded_call(r), expect,
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("G", [2, 4, 8])
def test_verl_grpo_is_grpo_ddof1_eps1e6(G):
    rng = np.random.default_rng(10 + G)
    r = binary_batch(rng, 16, G)
    np.testing.assert_allclose(advantages.get("grpo", ddof=1, eps=1e-6)(r), verl_grpo(r), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(advantages.get("dr_grpo")(r), verl_grpo(r, norm=False), atol=1e-15)
    x = real_batch(rng, 16, G)
    np.testing.assert_allclose(advantages.get("grpo", ddof=1, eps=1e-6).graded_call(x), verl_grpo(x),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("G", [2, 5, 8])
def test_grpo_passk_is_verl(G, norm):
    rng = np.random.default_rng(20 + G)
    adv = advantages.get("grpo_passk", norm_by_std=norm)
    r = binary_batch(rng, 40, G, p=0.2)
    np.testing.assert_allclose(adv(r), verl_passk(r, norm=norm), rtol=1e-12, atol=1e-14)
    x = rng.normal(size=(40, G)).round(1)  # real rewards, with ties at the top now and then
    x[0] = 0.5
    x[1, :2] = 9.0  # a tie at the top: nobody gets weight
    np.testing.assert_allclose(adv.graded_call(x), verl_passk(x, norm=norm), rtol=1e-12, atol=1e-14)
    assert np.all(adv.graded_call(x)[1] == 0)
    if not norm:  # without the std it is the leave-one-out pass@G of Tang et al.
        np.testing.assert_allclose(adv(r), advantages.get("passk_tang")(r), atol=1e-15)


@pytest.mark.parametrize("G", [1, 3, 6])
def test_opo_is_verl(G):
    rng = np.random.default_rng(30 + G)
    lengths = rng.integers(1, 50, (20, G)).astype(float)
    adv = advantages.get("opo")
    r = binary_batch(rng, 20, G)
    np.testing.assert_allclose(adv(r, lengths=lengths), np.where(r.std(1, keepdims=True) > 0,
                                                                  verl_opo(r, lengths), 0.0), atol=1e-14)
    x = real_batch(rng, 20, G)
    np.testing.assert_allclose(adv.graded_call(x, lengths=lengths), verl_opo(x, lengths), atol=1e-14)
    # equal lengths: Dr. GRPO
    np.testing.assert_allclose(adv.graded_call(x, lengths=np.full(x.shape, 7.0)),
                               advantages.get("dr_grpo").graded_call(x), atol=1e-15)


@pytest.mark.parametrize("G", [2, 4, 8])
def test_reinforce_pp_baseline_is_verl_token_whitening(G):
    rng = np.random.default_rng(40 + G)
    lengths = rng.integers(1, 30, (10, G)).astype(float)
    adv = advantages.get("reinforce_pp_baseline")
    for r in (binary_batch(rng, 10, G), real_batch(rng, 10, G)):
        got = adv(r, lengths=lengths) if np.isin(r, (0.0, 1.0)).all() else adv.graded_call(r, lengths=lengths)
        # the same definition without verl's 1e-8 in the token count: to rounding
        np.testing.assert_allclose(got, verl_rfpp_baseline(r, lengths, literal=False), rtol=1e-12, atol=1e-12)
        # verl's literal masked_mean (sum / (n + 1e-8)): a relative 1e-8/n
        np.testing.assert_allclose(got, verl_rfpp_baseline(r, lengths), rtol=1e-8, atol=1e-8)
        assert np.any(got[0] != 0)  # a flat group is shifted by -μ: verl does not zero it
    # equal lengths, no eps, no correction: reinforce_pp
    r = binary_batch(rng, 10, G)
    plain = advantages.get("reinforce_pp_baseline", eps=0.0, unbiased=False)
    np.testing.assert_allclose(plain(r, lengths=np.full(r.shape, 3.0)), advantages.get("reinforce_pp")(r),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rv", [(0.0, 1.0), (-1.0, 1.0), (-1.0, 0.0)])
def test_gpg_is_verl(rv):
    rng = np.random.default_rng(50)
    s = binary_batch(rng, 30, 6)
    r = np.where(s > 0, rv[1], rv[0])
    np.testing.assert_allclose(advantages.get("gpg", reward_values=rv)(r), verl_gpg(r), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(advantages.get("gpg", f_norm=2.5, reward_values=rv)(r), verl_gpg(r, 2.5),
                               rtol=1e-12, atol=1e-14)
    x = real_batch(rng, 30, 6)
    np.testing.assert_allclose(advantages.get("gpg").graded_call(x), verl_gpg(x), rtol=1e-12, atol=1e-14)
    zeros = np.zeros((3, 4))  # no nonzero reward: verl clamps the count at 1, every advantage is 0
    np.testing.assert_array_equal(advantages.get("gpg")(zeros), verl_gpg(zeros))


def test_skyrl_maxrl_is_maxrl_with_eps():
    rng = np.random.default_rng(60)
    r = binary_batch(rng, 30, 8)
    np.testing.assert_allclose(advantages.get("maxrl", eps=1e-6)(r), skyrl_maxrl(r), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(advantages.get("maxrl")(r[2:]), skyrl_maxrl(r[2:], eps=0.0), rtol=1e-12)
    # SkyRL divides by r̄ + eps itself: with R_w ≠ 0 the registry divides by r̄ − R_w instead
    pm = advantages.get("maxrl", eps=1e-6, reward_values=(-1, 1))(2 * r - 1)
    np.testing.assert_allclose(pm, advantages.get("maxrl", eps=5e-7)(r), rtol=1e-12, atol=1e-14)


# -------------------------------------------------------------- graded flags
def test_new_families_are_graded_and_maxrl_stays_binary():
    for name in NEW:
        assert advantages.registry()[name].graded, name
    assert not advantages.registry()["maxrl"].graded
    with pytest.raises(ValueError, match="maxrl.*binary rewards only"):
        advantages.get("maxrl").graded_call([[0.5, 0.25]])


def test_graded_call_passes_lengths_and_refuses_misplaced_ones():
    x = np.array([[0.5, 0.0, 1.0]])
    np.testing.assert_allclose(advantages.get("opo").graded_call(x, lengths=[[2, 1, 1]]), [[0.0, -0.5, 0.5]])
    with pytest.raises(ValueError, match="lengths: opo needs the response lengths"):
        advantages.get("opo").graded_call(x)
    with pytest.raises(ValueError, match="lengths: grpo does not use response lengths"):
        advantages.get("grpo").graded_call(x, lengths=[[1, 1, 1]])


# ---------------------------------------------- closed forms are exact
def _enumerate(adv, G, p, lengths_of=None):
    """Σ over all 2^G reward vectors of p^X q^(G−X)·masses, for one p (population for batch-level)."""
    s = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    X = s.sum(1)
    w = p**X * (1 - p) ** (G - X)
    rw, rc = adv.reward_values
    r = np.where(s > 0, rc, rw)
    if adv.batch_level:
        A = adv.population_advantages(r, np.array([p]))[0]
    else:
        A = adv(r, lengths=adv.default_lengths(s) if adv.uses_lengths else None)
    m_s = np.where(s > 0, A, 0.0).sum(1) / G
    m_f = -np.where(s > 0, 0.0, A).sum(1) / G
    return w @ m_s, w @ m_f


VARIANTS = [
    advantages.get("grpo_batch"), advantages.get("grpo_batch", ddof=0, eps=0.0),
    advantages.get("grpo_batch", eps=0.3, reward_values=(-1, 2)),
    advantages.get("grpo_passk"), advantages.get("grpo_passk", norm_by_std=False, reward_values=(0.5, 3)),
    advantages.get("grpo_passk", eps=0.2, reward_values=(-1, 1)),
    advantages.get("reinforce_pp_baseline"), advantages.get("reinforce_pp_baseline", length_correct=3.0),
    advantages.get("reinforce_pp_baseline", length_correct=0.5, length_incorrect=4.0, eps=0.01,
                   reward_values=(-1, 1)),
    advantages.get("gpg"), advantages.get("gpg", f_norm=2.0, reward_values=(-1, 0)),
    advantages.get("gpg", reward_values=(-1, 1)), advantages.get("gpg", reward_values=(0, 3)),
]


@pytest.mark.parametrize("adv", VARIANTS, ids=repr)
def test_expectation_closed_forms_equal_exact_enumeration(adv):
    assert adv.kind == "expectation"
    for G in (2, 3, 5, 8):
        for p in (0.0, 0.1, 0.37, 0.5, 0.81, 1.0):
            e = _enumerate(adv, G, p)
            c = masses.closed_form(adv, p, G)
            x = masses.exact(adv, p, G)
            np.testing.assert_allclose([float(c.m_S), float(c.m_F)], e, rtol=1e-12, atol=1e-14,
                                       err_msg=f"{adv!r} G={G} p={p}")
            np.testing.assert_allclose([float(x.m_S), float(x.m_F)], e, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("adv", [
    advantages.get("opo"), advantages.get("opo", length_correct=2.0, length_incorrect=5.0),
    advantages.get("opo", length_correct=7.0, length_incorrect=0.5, reward_values=(-1, 2)),
    advantages.get("maxrl", eps=1e-6), advantages.get("maxrl", eps=0.3, reward_values=(-2, 2)),
], ids=repr)
def test_exact_kind_closed_forms_hold_for_every_group(adv):
    """Given p̂ = X/G, the closed form equals the masses of the group (OPO in its length model)."""
    assert adv.kind == "exact"
    rw, rc = adv.reward_values
    for G in (2, 3, 8):
        for x in range(1, G):
            s = (np.arange(G) < x).astype(float)
            m = masses.of_group(adv, np.where(s > 0, rc, rw),
                                lengths=adv.default_lengths(s) if adv.uses_lengths else None)
            c = masses.closed_form(adv, x / G, G)
            np.testing.assert_allclose([float(m.m_S), float(m.m_F)], [float(c.m_S), float(c.m_F)],
                                       rtol=1e-12, atol=1e-14)


def test_closed_forms_by_hand():
    G, p = 8, 0.3
    q = 1 - p
    e1 = p * q * (G - 1) / G
    cf = masses.closed_form
    assert float(cf("grpo_batch", p, G).m_S) == pytest.approx(e1 / (math.sqrt(p * q) + 1e-4), rel=1e-13)
    assert float(cf("grpo_passk", p, G).m_S) == pytest.approx(p * q ** (G - 1) / (G**-0.5 + 1e-6), rel=1e-13)
    assert float(cf("grpo_passk", p, G).m_F) == 0.0
    assert float(cf("gpg", p, G).m_S) == pytest.approx(q * (G - 1) / G, rel=1e-13)  # α = 1/p
    assert float(cf("gpg", 0.0, G).m_S) == 0.0  # every group without signal
    m = cf(advantages.get("opo", length_correct=2.0, length_incorrect=6.0), p, G)
    assert (float(m.m_S), float(m.m_F)) == pytest.approx((p * q * 6 / (2 * p + 6 * q), p * q * 2 / (2 * p + 6 * q)))
    assert float(cf("reinforce_pp_baseline", p, G).m_S) == pytest.approx(e1 / math.sqrt(e1 + 1e-8), rel=1e-13)
    assert float(cf(advantages.get("maxrl", eps=0.1), p).m_S) == pytest.approx(p * q / (p + 0.1), rel=1e-13)


# -------------------------------- the large batch is the population model
@pytest.mark.parametrize("adv", [
    advantages.get("grpo_batch"), advantages.get("gpg"), advantages.get("gpg", reward_values=(-1, 0)),
    advantages.get("reinforce_pp_baseline", length_correct=2.0, length_incorrect=9.0),
    advantages.get("reinforce_pp_baseline"),
], ids=repr)
def test_monte_carlo_finite_batch_agrees_with_the_closed_form(adv):
    """One batch of 40,000 groups computed by the finite definition: its mean masses match the
    closed form (the large-batch limit) within 4 standard errors plus an O(1/batch) allowance."""
    rng = np.random.default_rng(7)
    G, n = 6, 40000
    rw, rc = adv.reward_values
    for p in (0.15, 0.6):
        s = (rng.random((n, G)) < p).astype(float)
        r = np.where(s > 0, rc, rw)
        m = masses.of_group(adv, r, lengths=adv.default_lengths(s) if adv.uses_lengths else None)
        c = masses.closed_form(adv, p, G)
        for sample, target in ((m.m_S, c.m_S), (m.m_F, c.m_F)):
            se = sample.std(ddof=1) / math.sqrt(n)
            # the batch statistic (σ, α, μ, v) is itself estimated: allow its own sampling error too
            assert abs(sample.mean() - float(target)) <= 4 * se + 5e-3 * abs(float(target)), (adv, p)


def test_reinforce_pp_baseline_unequal_lengths_is_sign_biased_by_the_token_mean():
    """Longer failures pull the token mean μ below 0: successes gain, failures lose (m_S > m_F)."""
    adv = advantages.get("reinforce_pp_baseline", length_correct=1.0, length_incorrect=4.0)
    m = masses.closed_form(adv, 0.4, 8)
    assert float(m.m_S) > float(m.m_F) > 0
    opo = masses.closed_form(advantages.get("opo", length_correct=1.0, length_incorrect=4.0), 0.4, 8)
    assert float(opo.m_S) > float(opo.m_F)  # OPO leans the same way


def test_subnormal_and_end_solve_rates_stay_finite():
    for name in NEW:
        adv = advantages.get(name)
        for p in (0.0, 5e-324, 2.2250738585e-313, 1e-300, 1 - 1e-16, 1.0):
            for m in (masses.exact(adv, p, 4), masses.closed_form(adv, p, 4)):
                assert np.isfinite(m.m_S) and np.isfinite(m.m_F), (name, p)


@pytest.mark.parametrize("name", NEW)
def test_exact_masses_at_large_G(name):
    """O(G) exact masses at G = 2^18: the closed form itself for the expectation kinds, and
    within O(1/G) of the plug-in value for OPO (kind exact: E[p̂q̂] = pq(G−1)/G)."""
    G = 2**18
    e = masses.exact(name, [0.3, 0.6], G)
    c = masses.closed_form(name, [0.3, 0.6], G)
    rtol = 1e-9 if advantages.registry()[name].kind == "expectation" else 1.0 / G + 1e-12
    np.testing.assert_allclose(e.m_S, c.m_S, rtol=rtol, atol=1e-300)
    np.testing.assert_allclose(e.m_F, c.m_F, rtol=rtol, atol=1e-300)


# ----------------------------------------------------------------- refusals
@pytest.mark.parametrize("name, params, match", [
    ("grpo_batch", {"ddof": 2}, "grpo_batch: ddof must be one of 0, 1; got 2"),
    ("grpo_batch", {"eps": -1}, "grpo_batch: eps must be a finite number >= 0, got -1"),
    ("grpo_passk", {"norm_by_std": "yes"}, "grpo_passk: norm_by_std must be one of True, False; got 'yes'"),
    ("grpo_passk", {"eps": float("nan")}, "grpo_passk: eps must be a finite number >= 0"),
    ("opo", {"length_correct": 0}, "opo: length_correct must be a finite number > 0, got 0"),
    ("opo", {"length_incorrect": -2.0}, "opo: length_incorrect must be a finite number > 0"),
    ("reinforce_pp_baseline", {"unbiased": 1.5}, "reinforce_pp_baseline: unbiased must be one of True, False"),
    ("reinforce_pp_baseline", {"eps": "1e-8"}, "reinforce_pp_baseline: eps must be a finite number"),
    ("gpg", {"f_norm": 0}, "gpg: f_norm must be a finite number > 0, got 0"),
    ("gpg", {"alpha": 2}, "gpg: unknown parameter.s. alpha; allowed: f_norm"),
    ("maxrl", {"eps": -1e-6}, "maxrl: eps must be a finite number >= 0"),
])
def test_bad_parameters_give_their_message(name, params, match):
    with pytest.raises(ValueError, match=match):
        advantages.get(name, **params)


def test_bad_inputs_give_their_message():
    with pytest.raises(ValueError, match="needs a group size G >= 2"):
        advantages.get("grpo_passk")(np.array([[1.0]]))
    with pytest.raises(ValueError, match="lengths: opo needs a positive total length in every group with signal"):
        advantages.get("opo")(np.array([[1.0, 0.0]]), lengths=np.zeros((1, 2)))
    np.testing.assert_array_equal(advantages.get("opo")(np.array([[1.0, 1.0]]), lengths=np.zeros((1, 2))), 0.0)
    with pytest.raises(ValueError, match=r"lengths: reinforce_pp_baseline needs more than 1 token\(s\) in the "
                                         r"batch \(the sum of the lengths\), got 1"):
        advantages.get("reinforce_pp_baseline")(np.array([[1.0, 0.0]]), lengths=np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="lengths: reinforce_pp_baseline needs the response lengths"):
        advantages.get("reinforce_pp_baseline")(np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="p is required"):
        advantages.get("gpg").outcome_values(4)
