"""Per-group and per-step audit diagnostics, each checked against an independent computation."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.audit import metrics
from analysis.audit.readers import Rollouts
from rlvr_theory import advantages, groups, masses, schedules


# ----------------------------------------------------------------- helpers
def make_frame(rewards, *, adv=None, steps=None, group_ids=None, lengths=None, float32=False, split="train"):
    """A canonical frame from rewards [S, M, G] (or a flat array with ``steps``/``group_ids``);
    ``adv``: an Advantage whose advantages are logged, computed one step at a time."""
    r = np.asarray(rewards, dtype=float)
    if steps is None:
        S, M, G = r.shape
        steps = np.repeat(np.arange(S), M * G)
        group_ids = np.tile(np.repeat(np.arange(M), G), S)
        r = r.ravel()
    steps, group_ids = np.asarray(steps), np.asarray(group_ids)
    logged = np.full(r.size, np.nan)
    if adv is not None:
        for s in np.unique(steps):
            sel = steps == s
            logged[sel] = groups.advantages(adv, r[sel], group_ids[sel])
        if float32:
            logged = logged.astype(np.float32).astype(np.float64)
    return pd.DataFrame({"step": steps.astype(np.int64), "group": group_ids.astype(np.int64), "reward": r,
                         "advantage": logged,
                         "length": np.full(r.size, np.nan) if lengths is None else np.asarray(lengths, float),
                         "split": split})


def rollouts(frame, group_size=None):
    return Rollouts(frame=frame, source={"format": "table", "paths": ["x.csv"], "notes": []}, group_size=group_size)


def binary(rng, S, M, G, p=None):
    p = rng.beta(0.6, 0.6, size=(S, M, 1)) if p is None else p
    return (rng.random((S, M, G)) < p).astype(float)


def brute_pass_at_k(n_rewards, k):
    """Fraction of the k-subsets of the rewards that hold a success (enumerated)."""
    subsets = list(itertools.combinations(range(len(n_rewards)), k))
    return sum(any(n_rewards[i] == 1 for i in s) for s in subsets) / len(subsets)


# ----------------------------------------------------------------- masses
@pytest.mark.parametrize("adv", [advantages.get("grpo"), advantages.get("asym_grpo", delta=0.5),
                                 advantages.get("rloo"), advantages.get("power_alpha", alpha=2.0)])
def test_masses_equal_of_group_on_the_reshaped_rewards(adv):
    rng = np.random.default_rng(1)
    r = binary(rng, 5, 12, 8)
    g = metrics.group_table(rollouts(make_frame(r)), advantage=adv)
    ref = masses.of_group(adv, r.reshape(-1, 8))
    np.testing.assert_allclose(g["m_S"], ref.m_S, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(g["m_F"], ref.m_F, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(g["abs_adv_sum"], masses.abs_adv_sum(adv, r.reshape(-1, 8)), rtol=1e-12, atol=1e-15)
    st = metrics.step_table(rollouts(make_frame(r)), advantage=adv)
    np.testing.assert_allclose(st["m_S"], ref.m_S.reshape(5, 12).mean(1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(st["m_F"], ref.m_F.reshape(5, 12).mean(1), rtol=1e-12, atol=1e-15)
    # the step means are groups.summary of each step's groups
    for s in range(5):
        gs = groups.GroupStats(np.full(12, 8), r[s].sum(1).astype(int), ref.m_S.reshape(5, 12)[s],
                               ref.m_F.reshape(5, 12)[s], masses.abs_adv_sum(adv, r[s]))
        summ = groups.summary(gs)
        for key in ("m_S", "m_F", "abs_adv_sum", "solve_rate_mean", "frac_all_correct", "frac_all_wrong"):
            assert st[key][s] == pytest.approx(summ[key], rel=1e-12, abs=1e-15)


def test_logged_advantages_are_the_ones_used():
    rng = np.random.default_rng(2)
    r = binary(rng, 3, 10, 6)
    frame = make_frame(r, adv=advantages.get("dr_grpo"))
    frame["advantage"] *= 3.0           # not a registry family: the masses still follow the log
    g = metrics.group_table(rollouts(frame), advantage="grpo")
    ref = masses.of_group("dr_grpo", r.reshape(-1, 6))
    np.testing.assert_allclose(g["m_S"], 3 * ref.m_S, atol=1e-14)
    np.testing.assert_allclose(g["m_F"], 3 * ref.m_F, atol=1e-14)
    doc = metrics.audit(rollouts(frame), advantage="grpo")
    assert doc["masses_from"] == "logged" and "grpo" in doc["compare"]
    np.testing.assert_allclose([s["m_S"] for s in doc["compare"]["grpo"]["steps"]],
                               masses.of_group("grpo", r.reshape(-1, 6)).m_S.reshape(3, 10).mean(1), atol=1e-14)


def test_zero_signal_groups_count_zero_in_the_step_means():
    r = np.array([[[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]], float)  # one mixed, one all-correct, one all-wrong
    st = metrics.step_table(rollouts(make_frame(r)), advantage="grpo")
    ms = masses.of_group("grpo", r[0, :1]).m_S[0]
    assert st["m_S"][0] == pytest.approx(ms / 3)           # not ms / 1
    assert st["n_groups"][0] == 3
    assert st["frac_all_correct"][0] == pytest.approx(1 / 3) and st["frac_all_wrong"][0] == pytest.approx(1 / 3)
    assert st["frac_zero_signal"][0] == pytest.approx(2 / 3)
    assert st["solve_rate_mean"][0] == pytest.approx((0.25 + 1 + 0) / 3)


def test_compare_what_if_masses_on_the_same_rewards():
    rng = np.random.default_rng(3)
    r = binary(rng, 4, 9, 8)
    frame = make_frame(r, adv=advantages.get("grpo", ddof=1, eps=1e-4))
    st = metrics.step_table(rollouts(frame), compare=["dr_grpo", ("asym_grpo", {"delta": 0.5})])
    for label, adv in (("dr_grpo", advantages.get("dr_grpo")),
                       ("asym_grpo(delta=0.5)", advantages.get("asym_grpo", delta=0.5))):
        ref = masses.of_group(adv, r.reshape(-1, 8))
        np.testing.assert_allclose(st[f"compare/{label}/m_S"], ref.m_S.reshape(4, 9).mean(1), atol=1e-14)
        np.testing.assert_allclose(st[f"compare/{label}/m_F"], ref.m_F.reshape(4, 9).mean(1), atol=1e-14)
    # AsymGRPO δ = 0.5 doubles the failures' weight: sign ratio 1/2 wherever both masses are non-zero
    ratio = st["compare/asym_grpo(delta=0.5)/sign_ratio"].to_numpy()
    np.testing.assert_allclose(ratio[np.isfinite(ratio)], 0.5, rtol=1e-12)


# ----------------------------------------------------------------- n_eff
def test_n_eff_by_hand():
    rng = np.random.default_rng(4)
    r = binary(rng, 3, 7, 5)
    frame = make_frame(r, adv=advantages.get("asym_grpo", delta=0.4))
    st = metrics.step_table(rollouts(frame))
    for s in range(3):
        a = frame.loc[frame["step"] == s, "advantage"].to_numpy()
        expected = sum(abs(x) for x in a) ** 2 / sum(x * x for x in a) if any(a) else 0.0
        assert st["n_eff"][s] == pytest.approx(expected, rel=1e-12)
    # equal weights: every rollout of a step counts
    r1 = np.tile(np.array([1.0, 0.0]), (1, 4, 1))
    st1 = metrics.step_table(rollouts(make_frame(r1)), advantage="grpo")
    assert st1["n_eff"][0] == pytest.approx(8.0)
    # no signal: n_eff 0
    st0 = metrics.step_table(rollouts(make_frame(np.ones((1, 3, 4)))), advantage="grpo")
    assert st0["n_eff"][0] == 0.0


# ----------------------------------------------------------------- pass@k
def test_pass_at_k_against_brute_force_enumeration():
    rng = np.random.default_rng(5)
    r = binary(rng, 2, 6, 5)
    r[0, 0, 2] = np.nan                      # a group of 4 valid rollouts
    g = metrics.group_table(rollouts(make_frame(r)), advantage="grpo")
    for j, row in enumerate(r.reshape(-1, 5)):
        valid = [x for x in row if not math.isnan(x)]
        assert g["pass_at_1"][j] == pytest.approx(brute_pass_at_k(valid, 1), abs=1e-12)
        assert g["pass_at_G"][j] == pytest.approx(brute_pass_at_k(valid, len(valid)), abs=1e-12)
    st = metrics.step_table(rollouts(make_frame(r)), advantage="grpo")
    for s in range(2):
        rows = r[s]
        p1 = np.mean([brute_pass_at_k([x for x in row if not math.isnan(x)], 1) for row in rows])
        assert st["pass_at_1"][s] == pytest.approx(p1, abs=1e-12)


def test_pass_at_1_trend_is_the_least_squares_slope_per_100_steps():
    # pass@1 of step s is exactly (s + 1)/8 (one group of 8 with s + 1 successes), at steps 0, 10, ..., 60
    r = np.array([[[1.0] * (s + 1) + [0.0] * (7 - s)] for s in range(7)])
    frame = make_frame(r)
    frame["step"] *= 10
    doc = metrics.audit(rollouts(frame), advantage="grpo")
    # slope (1/8 per 10 steps) = 1.25 per 100 steps
    assert doc["trends"]["pass_at_1"]["slope_per_100_steps"] == pytest.approx(1.25, rel=1e-10)
    assert doc["trends"]["pass_at_G"]["slope_per_100_steps"] == pytest.approx(0.0, abs=1e-10)
    single = metrics.audit(rollouts(make_frame(r[:1])), advantage="grpo")
    assert single["trends"]["pass_at_1"]["slope_per_100_steps"] is None


# --------------------------------------------------------------- tail miss
def test_tail_miss_against_the_formula_and_monte_carlo():
    rng = np.random.default_rng(6)
    r = binary(rng, 3, 10, 8)
    taus = (0.05, 0.2)
    g = metrics.group_table(rollouts(make_frame(r)), advantage="grpo", taus=taus)
    x = r.reshape(-1, 8).sum(1)
    mu = x / 8
    for tau in taus:
        t = np.minimum(tau, mu)                      # a mode cannot outweigh the correct mass
        naive = (1 - t) ** 8 - (mu - t) ** 8 - (1 - mu) ** 8
        np.testing.assert_allclose(g[f"tail_miss/{tau:g}"], naive, atol=1e-12)
        assert np.all(g[f"tail_miss/{tau:g}"][mu < tau] == 0)
        st = metrics.step_table(rollouts(make_frame(r)), advantage="grpo", taus=taus)
        np.testing.assert_allclose(st[f"tail_miss/{tau:g}"], naive.reshape(3, 10).mean(1), atol=1e-12)
    # Monte Carlo at one solve rate: active groups of 8 draws with no rare-correct draw
    mu0, tau0, n = 0.5, 0.2, 200_000
    draws = rng.random((n, 8))
    correct, rare = draws < mu0, draws < tau0
    active = correct.any(1) & ~correct.all(1)
    freq = np.mean(active & ~rare.any(1))
    one = pd.DataFrame({"step": 0, "group": 0, "reward": [1.0] * 4 + [0.0] * 4, "advantage": np.nan})
    val = metrics.group_table(one, advantage="grpo", taus=[tau0])[f"tail_miss/{tau0:g}"][0]
    assert abs(val - freq) < 4 * math.sqrt(freq * (1 - freq) / n)


# ------------------------------------------------------------ which advantage
FAMILIES = [
    advantages.get("grpo"),
    advantages.get("grpo", ddof=1, eps=1e-4),    # TRL
    advantages.get("grpo", ddof=1, eps=1e-6),    # verl
    advantages.get("dr_grpo"),
    advantages.get("rloo"),
    advantages.get("maxrl"),
    advantages.get("fgrpo"),
    advantages.get("reinforce_pp"),              # batch-level: its batch is a step
    advantages.get("agrae"),                     # batch-level ω = the step's success rate
]


@pytest.mark.parametrize("adv", FAMILIES, ids=repr)
@pytest.mark.parametrize("float32", [False, True])
def test_which_advantage_finds_the_family_that_wrote_the_log(adv, float32):
    rng = np.random.default_rng(7)
    r = binary(rng, 12, 16, 8)
    frame = make_frame(r, adv=adv, float32=float32)
    found = metrics.which_advantage(rollouts(frame), sample_steps=3)
    assert found is not None, metrics.which_advantage(rollouts(frame), detail=True)
    assert (found["name"], found["params"]) == (adv.name, adv.params)
    assert found["max_abs_error"] <= 1e-5 * np.abs(frame["advantage"]).max()


def test_which_advantage_none_on_random_advantages_and_without_a_log():
    rng = np.random.default_rng(8)
    r = binary(rng, 4, 8, 8)
    frame = make_frame(r)
    assert metrics.which_advantage(rollouts(frame)) is None          # no logged advantages
    assert metrics.which_advantage(rollouts(frame), detail=True) is None
    frame["advantage"] = rng.normal(size=len(frame))
    assert metrics.which_advantage(rollouts(frame)) is None
    info = metrics.which_advantage(rollouts(frame), detail=True)
    assert info["match"] is None and info["best"]["max_abs_error"] > 0.1
    doc = metrics.audit(rollouts(frame))
    assert doc["advantage"] is None and doc["advantage_search"]["best"] is not None
    assert any("No registry advantage" in n for n in doc["notes"])


def test_which_advantage_singleton_raw_and_unequal_sizes(monkeypatch):
    # verl: a group of one rollout gets its raw reward; small chunks: the full check goes chunk by chunk
    monkeypatch.setattr(metrics, "CHUNK_ROWS", 9)
    rng = np.random.default_rng(9)
    sizes = [4, 1, 4, 1, 4]
    r = np.concatenate([(rng.random(k) < 0.5).astype(float) for k in sizes * 3])
    steps = np.repeat(np.arange(3), sum(sizes))
    gid = np.tile(np.repeat(np.arange(len(sizes)), sizes), 3)
    frame = make_frame(r, steps=steps, group_ids=gid)
    frame["advantage"] = groups.advantages("grpo", r, steps * 100 + gid, singleton="raw")
    found = metrics.which_advantage(rollouts(frame))
    assert (found["name"], found["singleton"]) == ("grpo", "raw")


def test_which_advantage_uses_registered_families_at_call_time():
    class Doubled(advantages.Advantage):
        name = "test_doubled_dr"
        description = "twice the mean-centred reward"
        source = "test"

        def _compute(self, g, lengths):
            return 2.0 * g.centered

        def _closed_form(self, k, d):
            return 2 * d * advantages.p * (1 - advantages.p), 2 * d * advantages.p * (1 - advantages.p)

    rng = np.random.default_rng(10)
    r = binary(rng, 3, 6, 4)
    frame = make_frame(r)
    with advantages.registered(Doubled):
        frame["advantage"] = groups.advantages("test_doubled_dr", r.ravel(), group_size=4)
        assert metrics.which_advantage(rollouts(frame))["name"] == "test_doubled_dr"
    assert metrics.which_advantage(rollouts(frame)) is None


# -------------------------------------------------------------- NaN rewards
def test_nan_rewards_are_excluded_and_counted():
    r = np.array([[[1, 0, np.nan, 0], [1, 1, 0, 0]], [[np.nan] * 4, [0, 1, 1, 1]]], float)
    ro = rollouts(make_frame(r))
    g = metrics.group_table(ro, advantage="grpo")
    ref = masses.of_group("grpo", np.array([[1.0, 0.0, 0.0]]))     # the group without its NaN row
    assert g["m_S"][0] == pytest.approx(ref.m_S[0]) and g["m_F"][0] == pytest.approx(ref.m_F[0])
    assert list(g["n_valid"]) == [3, 4, 0, 4] and list(g["n_nan_rewards"]) == [1, 0, 4, 0]
    assert np.isnan(g["m_S"][2])
    st = metrics.step_table(ro, advantage="grpo")
    assert list(st["n_nan_rewards"]) == [1, 4]
    assert list(st["n_groups"]) == [2, 1]                           # the all-NaN group is left out
    assert st["reward_mean"][0] == pytest.approx(3 / 7)
    assert st["m_S"][1] == pytest.approx(masses.of_group("grpo", np.array([0.0, 1, 1, 1])).m_S)
    doc = metrics.audit(ro, advantage="grpo")
    assert doc["summary"]["n_nan_rewards"] == 5
    assert any("no reward (NaN)" in n for n in doc["notes"]) and any("no reward at all" in n for n in doc["notes"])


# ----------------------------------------------------------- unequal sizes
def test_unequal_group_sizes_are_audited_per_size():
    rng = np.random.default_rng(11)
    sizes = [4, 8, 4, 8, 8]
    rows = [(rng.random(k) < 0.5).astype(float) for k in sizes * 2]
    r = np.concatenate(rows)
    steps = np.repeat(np.arange(2), sum(sizes))
    gid = np.tile(np.repeat(np.arange(len(sizes)), sizes), 2)
    ro = rollouts(make_frame(r, steps=steps, group_ids=gid))
    g = metrics.group_table(ro, advantage="grpo")
    expected = [masses.of_group("grpo", x).m_S for x in rows]
    np.testing.assert_allclose(g["m_S"], expected, atol=1e-14)
    st = metrics.step_table(ro, advantage="grpo")
    np.testing.assert_allclose(st["m_S"], np.reshape(expected, (2, 5)).mean(1), atol=1e-14)
    doc = metrics.audit(ro, advantage="grpo")
    assert doc["group_size"] is None and doc["group_sizes"] == {"4": 4, "8": 6}
    by = doc["by_group_size"]
    assert set(by) == {"4", "8"}
    m4 = np.mean([e for e, k in zip(expected, sizes * 2) if k == 4])
    assert by["4"]["summary"]["m_S"] == pytest.approx(m4)
    assert any("unequal sizes" in n for n in doc["notes"])
    # a batch-level family with unequal sizes is refused by the groups module, with the sizes named
    with pytest.raises(ValueError, match="one size"):
        metrics.group_table(ro, advantage="reinforce_pp")


# -------------------------------------------------------------- rewards
def test_real_rewards_need_a_threshold():
    frame = make_frame(np.array([[[0.2, 0.9, 0.5, 0.0]]]))
    with pytest.raises(ValueError, match="success_threshold is required"):
        metrics.step_table(rollouts(frame), advantage="grpo")
    g = metrics.group_table(rollouts(frame), advantage="grpo", success_threshold=0.5)
    assert g["n_success"][0] == 2
    A = groups.advantages("grpo", frame["reward"].to_numpy(), group_size=4)    # graded GRPO on the real rewards
    s = frame["reward"].to_numpy() >= 0.5
    assert g["m_S"][0] == pytest.approx(A[s].sum() / 4) and g["m_F"][0] == pytest.approx(-A[~s].sum() / 4)


def test_which_advantage_on_real_rewards_needs_no_threshold():
    # TRL's default on real-valued rewards: (r − mean)/(std(ddof=1) + 1e-4), a graded family
    rng = np.random.default_rng(17)
    r = rng.random((3, 5, 4)).round(2)
    logged = (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=1, keepdims=True) + 1e-4)
    frame = make_frame(r)
    frame["advantage"] = logged.ravel()
    found = metrics.which_advantage(rollouts(frame))
    assert (found["name"], found["params"]) == ("grpo", {"ddof": 1, "eps": 1e-4})
    assert found["max_abs_error"] < 1e-12


def test_candidates_follow_the_registry():
    names = [a.name for a, s in metrics.candidates()]
    assert names[:6] == ["grpo"] * 6 and set(advantages.names()) - {"t2t"} <= set(names)
    assert "t2t" not in [a.name for a, _ in metrics.candidates(lengths=False)]
    assert {s for _, s in metrics.candidates(singletons=True)} == {"zero", "raw"}
    assert all(a.reward_values == (-1.0, 1.0) for a, _ in metrics.candidates((-1.0, 1.0)))


def test_binary_rewards_other_than_zero_one():
    rng = np.random.default_rng(12)
    r01 = binary(rng, 2, 5, 6)
    r = 2 * r01 - 1                                          # rewards −1 / +1
    adv = advantages.get("dr_grpo", reward_values=(-1.0, 1.0))
    g = metrics.group_table(rollouts(make_frame(r)), advantage="dr_grpo")
    ref = masses.of_group(adv, r.reshape(-1, 6))
    np.testing.assert_allclose(g["m_S"], ref.m_S, atol=1e-14)
    np.testing.assert_allclose(g["solve_rate"], r01.reshape(-1, 6).mean(1))


def test_unsorted_frames_and_chunking_give_the_same_numbers(monkeypatch):
    rng = np.random.default_rng(13)
    r = binary(rng, 6, 5, 4)
    frame = make_frame(r, adv=advantages.get("rloo"))
    ref = metrics.step_table(rollouts(frame), compare=["grpo", "reinforce_pp"], taus=[0.1])
    # groups (and steps) in a random order, the rows of each group in their own order
    key = np.random.default_rng(0).permutation(30)[frame["step"] * 5 + frame["group"]]
    shuffled = frame.iloc[np.lexsort((np.arange(len(frame)), key))]
    assert not shuffled["step"].is_monotonic_increasing
    monkeypatch.setattr(metrics, "CHUNK_ROWS", 7)            # chunks of about two steps
    out = metrics.step_table(rollouts(shuffled), compare=["grpo", "reinforce_pp"], taus=[0.1])
    pd.testing.assert_frame_equal(out, ref, rtol=1e-12, atol=1e-15)


# ------------------------------------------------------- histogram and drift
def test_histogram_counts():
    r = np.array([[[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]], float)
    doc = metrics.audit(rollouts(make_frame(r)), advantage="grpo", bins=4)
    h = doc["histogram"]
    assert h["bins"] == ["0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1"]
    assert h["counts"] == [[1, 1, 1, 1, 0, 2]] and h["run"] == [1, 1, 1, 1, 0, 2]
    st = metrics.step_table(rollouts(make_frame(r)), advantage="grpo", bins=4)
    assert st["hist/1"][0] == 2 and st["hist/0"][0] == 1


def test_drift_term_is_fades_and_needs_entropy_to_be_one():
    rng = np.random.default_rng(14)
    r = binary(rng, 3, 10, 8)
    H = [2.0, 1.5, 1.2]
    st = metrics.step_table(rollouts(make_frame(r)), advantage=advantages.get("asym_grpo", delta=0.5), entropy=H)
    np.testing.assert_allclose(st["drift_per_nat"], st["m_S"] - st["m_F"], atol=1e-15)
    assert np.all(st["drift_per_nat"] <= 0)                  # failure-biased: entropy-raising per FADE
    np.testing.assert_allclose(st["entropy_drift"], (st["m_S"] - st["m_F"]) * H, atol=1e-15)
    st0 = metrics.step_table(rollouts(make_frame(r)), advantage="grpo")
    assert st0["entropy_drift"].isna().all()
    np.testing.assert_allclose(st0["drift_per_nat"], 0, atol=1e-12)   # sign-balanced


# ------------------------------------------------------------ schedules
def test_schedule_what_if_steps_through_the_run():
    rng = np.random.default_rng(15)
    r = binary(rng, 5, 6, 4)
    frame = make_frame(r)
    H = {0: 2.0, 2: 1.0, 4: 0.5}                               # steps 1 and 3 carry the last value
    st = metrics.step_table(rollouts(frame), advantage="grpo", entropy=H, fade={"beta": 0.5})
    s = schedules.get("fade", H0=2.0, beta=0.5)
    a = schedules.get("agrae")
    h = 2.0
    for i in range(5):
        h = H.get(i, h)
        solve = r[i].mean()
        adv = s.update(reward_mean=solve, entropy=h)
        assert st["fade_alpha"][i] == pytest.approx(adv.params["alpha"])
        assert st["fade_delta"][i] == pytest.approx(adv.params["delta"])
        assert st["agrae_omega"][i] == pytest.approx(a.update(reward_mean=solve).params["omega"])
    no_h = metrics.step_table(rollouts(frame), advantage="grpo")
    assert no_h["fade_delta"].isna().all() and no_h["fade_alpha"].notna().all()
    doc = metrics.audit(rollouts(frame), advantage="grpo")
    assert any("fade_delta is not computed" in n for n in doc["notes"])


# -------------------------------------------------------------- the document
def test_audit_document_is_json_safe_and_keeps_the_issue_names():
    rng = np.random.default_rng(16)
    r = binary(rng, 4, 6, 8)
    frame = pd.concat([make_frame(r, adv=advantages.get("grpo", ddof=1, eps=1e-4)),
                       make_frame(binary(rng, 2, 3, 8), split="val")], ignore_index=True)
    doc = metrics.audit(rollouts(frame, group_size=8), compare=["reinforce"], taus=[0.1])
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == doc
    assert doc["source"]["format"] == "table" and doc["group_size"] == 8
    assert doc["advantage"]["name"] == "grpo" and doc["advantage"]["params"] == {"ddof": 1, "eps": 0.0001}
    step = doc["steps"][0]
    for key in ("step", "n_groups", "reward_mean", "solve_rate_mean", "frac_all_correct", "frac_all_wrong",
                "m_S", "m_F", "sign_ratio", "abs_adv_sum", "pass_at_1", "pass_at_G", "n_eff", "tail_miss/0.1"):
        assert key in step
    assert len(doc["steps"]) == 4 and len(doc["val"]["steps"]) == 2
    # REINFORCE with {0, 1} rewards has no negative mass: an infinite sign ratio, written "inf"
    assert doc["compare"]["reinforce"]["steps"][0]["sign_ratio"] == "inf"


def test_no_advantage_anywhere_leaves_the_masses_empty():
    doc = metrics.audit(rollouts(make_frame(np.array([[[1.0, 0, 0, 1]]]))))
    assert doc["masses_from"] is None and doc["steps"][0]["m_S"] is None
    assert doc["steps"][0]["pass_at_1"] == pytest.approx(0.5)
    assert any("--advantage" in n for n in doc["notes"])
