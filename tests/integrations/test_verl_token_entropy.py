"""The verl policy loss ``rlvr_diagnosed``: the configured loss, unchanged, plus token diagnostics.

Every call goes through verl's own ``core_algos.get_policy_loss_fn(config.policy_loss.loss_mode)``
(the lookup of ``verl/workers/utils/losses.py``) with a real ``ActorConfig``, on CPU; the new
metrics are checked against an independent float64 numpy recomputation.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from integrations import verl as rv  # noqa: E402

P = rv.TOKEN_METRIC_PREFIX


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(rv.ENV_PARAMS, raising=False)
    rv.reset()
    yield
    rv.reset()


def actor_config(low=0.2, high=0.28, **policy_loss):
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                       clip_ratio_low=low, clip_ratio_high=high,
                       policy_loss=PolicyLossConfig(loss_mode=rv.POLICY_LOSS, **policy_loss))


def batch(seed=0, B=8, T=40):
    """verl's padded tensors: float32 log-probabilities and per-token advantages, a bool mask."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(5, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    old = -torch.rand(B, T, generator=g) * 4.0                       # ℓ in (−4, 0]: c_t reaches (1, 5)
    new = old + 0.3 * torch.randn(B, T, generator=g)                  # ratios on both sides of the clip
    adv_row = torch.randn(B, generator=g) * 1.5
    adv_row[0] = 0.0                                                  # a row with A = 0
    adv = adv_row[:, None] * mask
    old[~mask] = 0.0
    new[~mask] = 0.0
    return old, new, adv, mask


def call(name, old, new, adv, mask, config, *, seed=0, agg="token-mean"):
    """One loss call through verl's registry; returns (loss, metrics, grad of log_prob)."""
    lp = new.clone().requires_grad_(True)
    torch.manual_seed(seed)                                           # clip_cov draws a random subset
    loss, metrics = core_algos.get_policy_loss_fn(name)(
        old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, loss_agg_mode=agg,
        config=config, rollout_is_weights=None)
    loss.backward()
    return loss.detach(), metrics, lp.grad


def reference(old, new, adv, mask, low, high, *, clamp, ratio=2e-4, lb=1.0, ub=5.0, kl_ratio=2e-4):
    """float64 numpy over the masked tokens (boolean indexing), written from the definitions;
    the Clip-Cov / KL-Cov settings default to verl's (ratio 2e-4, band (1, 5))."""
    m = mask.numpy()
    x, a = old.double().numpy()[m], adv.double().numpy()[m]
    d = new.double().numpy()[m] - old.double().numpy()[m]
    r = np.exp(np.clip(d, -20, 20) if clamp else d)
    clipped = ((a > 0) & (r > 1 + high)) | ((a < 0) & (r < 1 - low))
    n = x.size
    c = (a - a.mean()) * (x - x.mean())
    band = (c > lb) & (c < ub) & ~clipped
    k = max(1, int(n * kl_ratio))
    return {
        "cov_logp_adv": c.sum() / n,
        "cov_logp_adv_pos": c[a > 0].sum() / n,
        "cov_logp_adv_neg": c[a < 0].sum() / n,
        "cov_logp_adv_zero": c[a == 0].sum() / n,
        "cov_logp_adv_clipped": c[clipped].sum() / n,
        "cov_logp_adv_unclipped": c[~clipped].sum() / n,
        "adv_token_mean": a.mean(),
        "entropy_drift_fade": a.mean() * (-x.mean()) - c.sum() / (n - 1),
        "clip_cov_band_frac": band.sum() / n,
        "clip_cov_frac": min(max(int(ratio * n), 1), int(band.sum())) / n,
        "clip_cov_band_share": c[band].sum() / c.sum(),
        "kl_cov_frac": k / n,
        "kl_cov_threshold": np.sort(c)[::-1][k - 1],
        "kl_cov_share": np.sort(c)[::-1][:k].sum() / c.sum(),
    }, clipped


def test_registered_under_verls_config_path():
    cfg = actor_config()
    assert cfg.policy_loss.loss_mode == "rlvr_diagnosed"
    assert rv.POLICY_LOSS in core_algos.POLICY_LOSS_REGISTRY
    assert core_algos.get_policy_loss_fn(cfg.policy_loss.loss_mode) is rv.compute_policy_loss_diagnosed
    assert rv.register_policy_losses() == []                         # idempotent


@pytest.mark.parametrize("params", ["", "policy_loss=vanilla", "delta=0.5, policy_loss=vanilla"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum"])
def test_vanilla_wrapped_exactly_with_metrics(monkeypatch, params, agg):
    if params:
        monkeypatch.setenv(rv.ENV_PARAMS, params)
    old, new, adv, mask = batch(seed=1)
    cfg = actor_config()
    loss_d, met_d, grad_d = call("vanilla", old, new, adv, mask, cfg, agg=agg)
    loss_w, met_w, grad_w = call(rv.POLICY_LOSS, old, new, adv, mask, cfg, agg=agg)
    assert rv.delegate_name() == "vanilla"
    assert torch.equal(loss_w, loss_d) and torch.equal(grad_w, grad_d)
    assert {k: met_w[k] for k in met_d} == met_d                      # the delegate's metrics, all kept
    ours = {k[len(P):]: v for k, v in met_w.items() if k.startswith(P)}
    assert set(met_w) == set(met_d) | {P + k for k in ours}
    ref, clipped = reference(old, new, adv, mask, 0.2, 0.28, clamp=True)
    assert set(ours) == set(ref)
    assert 0 < clipped.sum() < clipped.size and 0 < ref["clip_cov_band_frac"]   # the data exercise both
    for key, want in ref.items():
        np.testing.assert_allclose(ours[key], want, rtol=1e-6, atol=1e-9, err_msg=key)
    # the recomputed clip mask is verl's own: its clip fraction
    assert ours["cov_logp_adv_clipped"] != 0
    np.testing.assert_allclose(clipped.mean(), met_d["actor/pg_clipfrac"], rtol=1e-6)


def test_clip_cov_delegate_uses_its_settings(monkeypatch):
    monkeypatch.setenv(rv.ENV_PARAMS, "policy_loss=clip_cov")
    old, new, adv, mask = batch(seed=2)
    new[0, 0] = old[0, 0] + 30.0                                      # beyond vanilla's ±20 clamp: still exact
    cfg = actor_config(low=0.2, high=0.2, clip_cov_ratio=0.05, clip_cov_lb=0.5, clip_cov_ub=3.0, kl_cov_ratio=0.01)
    loss_d, met_d, grad_d = call("clip_cov", old, new, adv, mask, cfg, seed=7)
    loss_w, met_w, grad_w = call(rv.POLICY_LOSS, old, new, adv, mask, cfg, seed=7)
    assert torch.equal(loss_w, loss_d) and torch.equal(grad_w, grad_d)
    assert {k: met_w[k] for k in met_d} == met_d
    ref, clipped = reference(old, new, adv, mask, 0.2, 0.2, clamp=False, ratio=0.05, lb=0.5, ub=3.0, kl_ratio=0.01)
    assert clipped.any() and ref["clip_cov_frac"] > 1 / clipped.size
    for key, want in ref.items():
        np.testing.assert_allclose(met_w[P + key], want, rtol=1e-6, atol=1e-9, err_msg=key)


def test_delegate_without_token_clip_gets_no_clip_split(monkeypatch):
    monkeypatch.setenv(rv.ENV_PARAMS, "policy_loss=gspo")
    old, new, adv, mask = batch(seed=3)
    cfg = actor_config()
    loss_d, met_d, _ = call("gspo", old, new, adv, mask, cfg)
    loss_w, met_w, _ = call(rv.POLICY_LOSS, old, new, adv, mask, cfg)
    assert torch.equal(loss_w, loss_d)
    assert {k: met_w[k] for k in met_d} == met_d
    assert P + "cov_logp_adv" in met_w and P + "cov_logp_adv_clipped" not in met_w


def test_no_graph_and_inputs_untouched():
    old, new, adv, mask = batch(seed=4)
    copies = [t.clone() for t in (old, new, adv, mask)]
    lp = new.clone().requires_grad_(True)
    rv.compute_policy_loss_diagnosed(old, lp, adv, mask, "token-mean", actor_config())
    assert all(torch.equal(a, b) for a, b in zip((old, lp.detach(), adv, mask), copies))
    assert lp.grad is None


def test_empty_micro_batch_keeps_delegate_metrics(caplog):
    old, new, adv, mask = batch(seed=5)
    mask = torch.zeros_like(mask)
    with caplog.at_level(logging.WARNING, logger="rlvr_diagnostics.verl"):
        _, met, _ = call(rv.POLICY_LOSS, old, new, adv, mask, actor_config())
    assert not any(k.startswith(P) for k in met) and "actor/pg_clipfrac" in met
    assert "token diagnostics skipped" in caplog.text


@pytest.mark.parametrize("params, match", [("policy_loss=rlvr_diagnosed", "not itself"),
                                           ("policy_loss=nope", "not a registered verl policy loss"),
                                           ("policy_loss=1", "must name")])
def test_bad_delegate(monkeypatch, params, match):
    monkeypatch.setenv(rv.ENV_PARAMS, params)
    old, new, adv, mask = batch()
    with pytest.raises(ValueError, match=match):
        call(rv.POLICY_LOSS, old, new, adv, mask, actor_config())


def test_estimators_ignore_the_policy_loss_key(monkeypatch):
    monkeypatch.setenv(rv.ENV_PARAMS, "policy_loss=clip_cov,singleton=raw")
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    adv, _ = rv.compute("rlvr_rloo", token_level_rewards=r, response_mask=torch.ones(3, 2),
                        index=np.array(["q", "q", "s"], dtype=object))
    assert adv[:, 0].tolist() == [1.0, -1.0, 1.0]
    assert rv.delegate_name() == "clip_cov"
