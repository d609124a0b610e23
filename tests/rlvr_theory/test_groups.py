"""rlvr_theory.groups: the registry on flat batches of ragged groups, against the registry on
rectangular arrays (its independent reference: each group computed on its own)."""

import numpy as np
import pytest

from rlvr_theory import advantages, groups, masses

RNG = np.random.default_rng(7)


def _lengths_kw(adv, shape, rng):
    return {"lengths": rng.integers(1, 50, size=shape).astype(float)} if adv.uses_lengths else {}


def _shuffle_keeping_group_order(ids, rng):
    """Positions that interleave the groups at random while each group's rows keep their order."""
    labels = rng.permutation(ids)            # which group each slot of the batch belongs to
    pos = np.empty(ids.size, dtype=np.int64)
    for g in np.unique(ids):                 # test helper: a loop over a handful of groups
        pos[np.flatnonzero(ids == g)] = np.flatnonzero(labels == g)
    return pos                               # original row i goes to slot pos[i]


@pytest.mark.parametrize("name", advantages.names())
def test_every_family_on_an_interleaved_batch_equals_the_registry(name):
    adv = advantages.get(name)
    G = max(4, adv.min_group_size())
    R = (RNG.random((6, G)) < 0.4).astype(float)
    R[0], R[1, :] = 1.0, 0.0              # groups without signal
    R[2, :2] = (1.0, 0.0)
    kw = _lengths_kw(adv, R.shape, RNG)
    want = adv(R, **kw).reshape(-1)
    ids = np.repeat(np.array([f"uid-{j}" for j in range(6)], dtype=object), G)
    pos = _shuffle_keeping_group_order(ids, RNG)
    assert not np.array_equal(pos, np.arange(ids.size))

    def place(x):
        out = np.empty_like(x)
        out[pos] = x
        return out

    got = groups.advantages(adv, place(R.reshape(-1)), place(ids), **{k: place(v.reshape(-1)) for k, v in kw.items()})
    np.testing.assert_allclose(got[pos], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "asym_grpo", "rloo", "passk_chen", "fade", "t2t", "maxrl"])
def test_interleaved_groups_in_order_equal_the_registry(name):
    adv = advantages.get(name)
    G = max(4, adv.min_group_size())
    R = (RNG.random((5, G)) < 0.5).astype(float)
    kw = _lengths_kw(adv, R.shape, RNG)
    # interleave: row j of group g sits at position j*5 + g (order within groups kept)
    flat = R.T.reshape(-1)
    ids = np.tile(np.arange(5), G)
    flat_kw = {k: v.T.reshape(-1) for k, v in kw.items()}
    got = groups.advantages(adv, flat, ids, **flat_kw).reshape(G, 5).T
    np.testing.assert_allclose(got, adv(R, **kw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["grpo", "asym_grpo", "rloo", "power_alpha", "softmax"])
def test_ragged_groups_and_missing_rewards_equal_each_group_alone(name):
    adv = advantages.get(name)
    sizes = [2, 5, 3, 5, 8]
    rewards, ids, want = [], [], []
    for j, k in enumerate(sizes):
        r = (RNG.random(k) < 0.5).astype(float)
        r[0], r[-1] = 1.0, 0.0
        rewards.append(r)
        ids += [j] * k
        want.append(adv(r[None])[0])
    r = np.concatenate(rewards)
    # add a NaN reward to group 3 and a padding row: both left out, advantage 0
    r_nan = np.concatenate([r, [np.nan, 1.0]])
    ids_nan = np.array(ids + [3, 99])
    valid = np.ones(r_nan.size, bool)
    valid[-1] = False
    got = groups.advantages(adv, r_nan, ids_nan, valid=valid)
    np.testing.assert_allclose(got[: r.size], np.concatenate(want), rtol=1e-12)
    assert got[-2:].tolist() == [0.0, 0.0]


def test_singletons_zero_or_raw():
    r = np.array([0.7, 1.0, 0.0, 1.0])
    ids = np.array([0, 1, 1, 2])
    adv = advantages.get("grpo", ddof=1)
    assert groups.advantages("dr_grpo", r, ids)[[0, 3]].tolist() == [0.0, 0.0]
    raw = groups.advantages(adv, r, ids, singleton="raw")
    assert raw[[0, 3]].tolist() == [0.7, 1.0]
    np.testing.assert_allclose(raw[1:3], adv(np.array([1.0, 0.0])))
    with pytest.raises(ValueError, match="singleton must be one of"):
        groups.advantages(adv, r, ids, singleton="one")


def test_real_rewards_graded_threshold_and_refusal():
    r = np.array([0.2, 0.9, 0.5, 0.5, 1.0, 0.0])
    got = groups.advantages("grpo", r, group_size=3)
    np.testing.assert_allclose(got, advantages.get("grpo").graded_call(r.reshape(2, 3)).reshape(-1))
    with pytest.raises(ValueError, match=r"success_threshold is required by 'asym_grpo'.*e\.g\. 0\.2"):
        groups.advantages("asym_grpo", r, group_size=3)
    got = groups.advantages("asym_grpo", r, group_size=3, success_threshold=0.5)
    want = advantages.get("asym_grpo")((r >= 0.5).astype(float).reshape(2, 3)).reshape(-1)
    np.testing.assert_allclose(got, want)
    np.testing.assert_array_equal(groups.success("grpo", r, success_threshold=0.5), r >= 0.5)
    with pytest.raises(ValueError, match="success_threshold is required: the rewards are real-valued"):
        groups.success("grpo", r)
    # binary rewards in other reward values need no threshold
    adv = advantages.get("asym_grpo", reward_values=(-1, 1))
    assert groups.success(adv, np.array([-1.0, 1.0, np.nan])).tolist() == [False, True, False]


def test_batch_level_family_needs_one_group_size():
    r = (RNG.random(9) < 0.5).astype(float)
    with pytest.raises(ValueError, match="needs groups of one size; got sizes 4, 5"):
        groups.advantages("reinforce_pp", r, np.array([0] * 4 + [1] * 5))
    # singletons are left aside: the rest has one size
    got = groups.advantages("reinforce_pp", np.r_[r[:8], 1.0], np.array([0] * 4 + [1] * 4 + [2]))
    np.testing.assert_allclose(got[:8], advantages.get("reinforce_pp")(r[:8].reshape(2, 4)).reshape(-1))


def test_group_below_the_family_minimum_is_refused():
    with pytest.raises(ValueError, match="needs groups of at least 4 rollouts; 1 group"):
        groups.advantages(advantages.get("passk_chen", k=4), np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
                          np.array([0, 0, 0, 0, 1, 1, 1]))


def test_stats_equal_masses_of_group_and_summary_means():
    adv = advantages.get("asym_grpo", delta=0.5)
    R = (RNG.random((40, 8)) < 0.3).astype(float)
    R[0], R[1] = 1.0, 0.0
    A = groups.advantages(adv, R.reshape(-1), group_size=8)
    gs = groups.stats(A, groups.success(adv, R.reshape(-1)), group_size=8)
    m = masses.of_group(adv, R)
    np.testing.assert_allclose(gs.m_S, m.m_S, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gs.m_F, m.m_F, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gs.abs_adv_sum, masses.abs_adv_sum(adv, R))
    s = groups.summary(gs)
    assert s["n_groups"] == 40 and s["group_size"] == 8.0
    assert s["m_S"] == pytest.approx(m.m_S.mean()) and s["m_F"] == pytest.approx(m.m_F.mean())
    assert s["sign_ratio"] == pytest.approx(m.m_S.mean() / m.m_F.mean())
    assert s["frac_all_correct"] == pytest.approx(np.mean(R.sum(1) == 8))
    assert s["frac_all_wrong"] == pytest.approx(np.mean(R.sum(1) == 0))
    assert s["solve_rate_mean"] == pytest.approx(R.mean())


def test_summary_ratio_limits_and_empty_batch():
    def gs(ms, mf):
        k = np.array([4])
        return groups.GroupStats(k, np.array([2]), np.array([ms]), np.array([mf]), np.array([1.0]))
    assert groups.summary(gs(0.1, 0.0))["sign_ratio"] == float("inf")
    assert groups.summary(gs(0.0, 0.0))["sign_ratio"] is None
    empty = groups.stats(np.zeros(3), np.zeros(3, bool), np.array([0, 0, 1]), valid=np.zeros(3, bool))
    s = groups.summary(empty)
    assert s["n_groups"] == 0 and s["m_S"] is None and s["sign_ratio"] is None


def test_group_codes_and_bad_input():
    codes, m = groups.group_codes(6, np.array(["b", "a", "b", "c", "a", "c"]))
    assert codes.tolist() == [0, 1, 0, 2, 1, 2] and m == 3
    with pytest.raises(ValueError, match="index or group_size is required"):
        groups.group_codes(4)
    with pytest.raises(ValueError, match="group_size: 5 rows are not a whole number of groups of 2"):
        groups.group_codes(5, group_size=2)
    with pytest.raises(ValueError, match=r"index must have one group id per row, shape \(3,\)"):
        groups.group_codes(3, np.array([0, 1]))
    with pytest.raises(ValueError, match="valid must be a boolean array"):
        groups.group_codes(2, group_size=2, valid=np.array([1, 0]))
    with pytest.raises(ValueError, match="rewards must be finite or NaN"):
        groups.advantages("grpo", np.array([1.0, np.inf]), group_size=2)
    with pytest.raises(ValueError, match="lengths are required by 't2t'"):
        groups.advantages("t2t", np.array([1.0, 0.0]), group_size=2)
