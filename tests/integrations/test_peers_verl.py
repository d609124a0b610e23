"""verl's own outcome estimators against the registry on the same batch (verl 0.9.1).

Each verl estimator of ``verl.trainer.ppo.core_algos`` is called on a random batch laid out as
verl holds it: float32 ``token_level_rewards`` (bs, L) with the reward on the last token of the
response, a ``response_mask`` of varied lengths, ``index`` the group uids (rows of a group not
adjacent), some groups with all rewards equal.  The registry call of docs/integrations.md
(through :func:`rlvr_theory.groups.advantages`) reproduces it to 1e-6 in float32, and to
rounding in float64.  Where the conventions differ, the test says how:

* a group of one rollout: verl keeps its raw reward (``singleton="raw"``); verl's ``grpo``
  divides it by ``1 + epsilon`` (std 1), a relative 1e-6;
* ``reinforce_plus_plus_baseline``: verl's ``masked_mean`` divides by ``n + 1e-8`` tokens
  (relative 1e-8/n, left out of the registry);
* the batch-level estimators (``reinforce_plus_plus_baseline``, ``gpg``) read their batch
  statistics over every row, singletons included, while the registry reads them over the
  groups of two or more: compared on batches without singletons.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
from verl.trainer.ppo import core_algos  # noqa: E402

from rlvr_theory import advantages, groups  # noqa: E402

L_MAX = 12


def make_batch(seed: int, sizes, *, real: bool = False, flat: int = 2):
    """rewards (bs,), lengths (bs,), uids (bs,) shuffled, in groups of the given sizes; the first
    ``flat`` groups have equal rewards (one all wrong, one all right / all 0.75)."""
    rng = np.random.default_rng(seed)
    uids, rewards = [], []
    for g, k in enumerate(sizes):
        r = rng.integers(0, 5, k) / 4.0 if real else (rng.random(k) < 0.4).astype(float)
        if g < flat:
            r[:] = (0.0, 1.0 if not real else 0.75)[g % 2]
        rewards.append(r)
        uids += [f"uid-{g}"] * k
    rewards = np.concatenate(rewards)
    perm = rng.permutation(rewards.size)
    lengths = rng.integers(1, L_MAX + 1, rewards.size)
    return rewards[perm], lengths[perm], np.array(uids, dtype=object)[perm]


def verl_inputs(rewards, lengths, dtype=torch.float32):
    bs = rewards.size
    mask = (torch.arange(L_MAX)[None, :] < torch.as_tensor(lengths)[:, None]).to(dtype)
    tlr = torch.zeros(bs, L_MAX, dtype=dtype)
    tlr[torch.arange(bs), torch.as_tensor(lengths) - 1] = torch.as_tensor(rewards, dtype=dtype)
    return tlr, mask


def run_verl(name, rewards, lengths, index, dtype=torch.float32, **kw):
    tlr, mask = verl_inputs(rewards, lengths, dtype)
    fn = core_algos.get_adv_estimator_fn(name)
    adv, _ = fn(token_level_rewards=tlr, response_mask=mask, index=index, **kw)
    adv = adv.to(torch.float64).numpy()
    m = mask.numpy().astype(bool)
    # one advantage per response, repeated on its tokens and 0 outside the mask
    first = adv[:, 0]
    np.testing.assert_array_equal(adv[~m], 0.0)
    np.testing.assert_allclose(adv, np.where(m, first[:, None], 0.0), rtol=1e-6, atol=1e-7)
    return first


# verl estimator (and its keyword arguments) -> the registry call that reproduces it
CASES = {
    "grpo": ("grpo", {"norm_adv_by_std_in_grpo": True}, advantages.get("grpo", ddof=1, eps=1e-6)),
    "grpo_no_std": ("grpo", {"norm_adv_by_std_in_grpo": False}, advantages.get("dr_grpo")),
    "grpo_passk": ("grpo_passk", {"config": {"norm_adv_by_std_in_grpo": True}}, advantages.get("grpo_passk")),
    "grpo_passk_no_std": ("grpo_passk", {"config": {"norm_adv_by_std_in_grpo": False}},
                          advantages.get("grpo_passk", norm_by_std=False)),
    "rloo": ("rloo", {}, advantages.get("rloo")),
    "opo": ("opo", {}, advantages.get("opo")),
    "reinforce_plus_plus_baseline": ("reinforce_plus_plus_baseline", {}, advantages.get("reinforce_pp_baseline")),
    "gpg": ("gpg", {}, advantages.get("gpg")),
}


def registry(adv, rewards, lengths, index, singleton="zero"):
    return groups.advantages(adv, rewards, index, lengths=lengths if adv.uses_lengths else None,
                             singleton=singleton)


@pytest.mark.parametrize("real", [False, True], ids=["binary", "real"])
@pytest.mark.parametrize("case", list(CASES))
def test_verl_estimator_equals_the_registry(case, real):
    name, kw, adv = CASES[case]
    for seed, G in ((0, 2), (1, 4), (2, 8)):
        rewards, lengths, index = make_batch(seed, [G] * 7, real=real)
        want = registry(adv, rewards, lengths, index)
        got32 = run_verl(name, rewards, lengths, index, **kw)
        np.testing.assert_allclose(got32, want, rtol=1e-6, atol=1e-6, err_msg=f"{case} G={G} float32")
        got64 = run_verl(name, rewards, lengths, index, dtype=torch.float64, **kw)
        # float64: the conventions agree to rounding, but for verl's 1e-8 in masked_mean's token
        # count and GPG's α = bsz / count_nonzero, a float32 tensor whatever the rewards' dtype
        tol = {"reinforce_plus_plus_baseline": 1e-8, "gpg": 2e-7}.get(name, 1e-12)
        np.testing.assert_allclose(got64, want, rtol=tol, atol=tol, err_msg=f"{case} G={G} float64")


@pytest.mark.parametrize("case", ["grpo", "grpo_no_std", "rloo", "opo"])
def test_group_level_estimators_on_ragged_groups_and_singletons(case):
    """Groups of sizes 1..5 in one batch: verl keeps a singleton's raw reward (GRPO divides it by
    1 + 1e-6, its std being 1), which is ``singleton="raw"``."""
    name, kw, adv = CASES[case]
    rewards, lengths, index = make_batch(5, [1, 3, 1, 2, 5, 4, 1, 2], flat=3)
    got = run_verl(name, rewards, lengths, index, dtype=torch.float64, **kw)
    want = registry(adv, rewards, lengths, index, singleton="raw")
    np.testing.assert_allclose(got, want, rtol=1.1e-6 if case == "grpo" else 1e-12, atol=1e-12)
    zero = registry(adv, rewards, lengths, index)  # the registry's default: a singleton gets 0
    single = np.isin(index, [u for u in set(index) if (index == u).sum() == 1])
    assert single.sum() == 3 and np.all(zero[single] == 0) and np.allclose(zero[~single], want[~single])


def test_grpo_passk_singletons_verl_refuses_the_registry_follows_singleton():
    rewards, lengths, index = make_batch(6, [1, 3, 3], flat=0)
    with pytest.raises(ValueError, match="at least 2 samples per group"):
        run_verl("grpo_passk", rewards, lengths, index, config={"norm_adv_by_std_in_grpo": True})
    lone = np.array([(index == u).sum() == 1 for u in index])
    for singleton, value in (("zero", 0.0), ("raw", rewards[lone])):
        A = groups.advantages(advantages.get("grpo_passk"), rewards, index, singleton=singleton)
        np.testing.assert_array_equal(A[lone], value)
    with pytest.raises(ValueError, match="grpo_passk.*needs a group size G >= 2"):
        advantages.get("grpo_passk")(rewards[lone][None])


def test_batch_level_estimators_read_singletons_into_their_statistics():
    """verl's GPG counts every row in α = bsz / #nonzero, singletons included; the registry reads
    the batch over the groups it computes (two or more rollouts) and gives singletons their raw
    reward apart: the two agree without singletons (above), here they differ by design."""
    rewards, lengths, index = make_batch(7, [1, 4, 4, 4], flat=0)  # α: float32 in verl
    got = run_verl("gpg", rewards, lengths, index, dtype=torch.float64)
    multi = np.array([(index == u).sum() > 1 for u in index])
    B, nz = multi.sum(), np.count_nonzero(rewards[multi])
    want = groups.advantages(advantages.get("gpg"), rewards, index, singleton="raw")
    alpha_verl = rewards.size / max(np.count_nonzero(rewards), 1)
    np.testing.assert_allclose(got[multi], want[multi] * alpha_verl / (B / max(nz, 1)), rtol=2e-7, atol=1e-12)


def test_flat_group_of_non_dyadic_rewards_verl_rounds_the_registry_gives_zero():
    """A group whose rewards are all 0.7: verl's float32 mean is not 0.7 exactly, so its GRPO
    divides a rounding error (~6e-8) by std + 1e-6 (~7e-8) and hands out advantages of ~0.06;
    the registry detects the group without signal exactly and gives 0 (float64 verl: ~1e-10)."""
    rewards = np.array([0.7] * 8 + [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    lengths = np.full(16, 4)
    index = np.array(["a"] * 8 + ["b"] * 8, dtype=object)
    got = run_verl("grpo", rewards, lengths, index, norm_adv_by_std_in_grpo=True)
    want = registry(advantages.get("grpo", ddof=1, eps=1e-6), rewards, lengths, index)
    assert np.all(want[:8] == 0) and 1e-3 < np.abs(got[:8]).max() < 0.2
    np.testing.assert_allclose(got[8:], want[8:], rtol=1e-6, atol=1e-6)
