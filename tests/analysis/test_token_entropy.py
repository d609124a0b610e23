"""analysis.token_entropy: every value against an independent float64 numpy recomputation (boolean
indexing of the masked tokens, numpy sorting for the top-k), the splits sum to the total, padding
changes nothing, degenerate inputs, the running correlation against numpy.corrcoef."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import token_entropy as te
from analysis.token_entropy import ClipCov, EntropyChangeTracker, KLCov, token_diagnostics
from rlvr_theory.entropy import fade_change_sampled


def reference(logp, adv, mask, entropy=None, clipped=None, lr=None, clip_cov=te.CLIP_COV, kl_cov=te.KL_COV):
    """The documented formulas in float64 numpy, over the masked tokens picked by boolean indexing."""
    logp, mask = np.asarray(logp, np.float64), np.asarray(mask) != 0
    adv = np.asarray(adv, np.float64)
    adv = np.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, logp.shape)
    x, a = logp[mask], adv[mask]
    N = x.size
    c = (a - a.mean()) * (x - x.mean())
    S = c.sum()
    out = {"cov_logp_adv": S / N, "cov_logp_adv_pos": c[a > 0].sum() / N,
           "cov_logp_adv_neg": c[a < 0].sum() / N, "cov_logp_adv_zero": c[a == 0].sum() / N}
    clip = None
    if clipped is not None:
        clip = np.asarray(clipped, bool)[mask]
        out["cov_logp_adv_clipped"] = c[clip].sum() / N
        out["cov_logp_adv_unclipped"] = c[~clip].sum() / N
    out["adv_token_mean"] = a.mean()
    H = -x.mean()
    if entropy is not None:
        H = np.asarray(entropy, np.float64)[mask].mean()
        out["entropy_mean"] = H
    cov1 = S / (N - 1) if N > 1 else 0.0
    out["entropy_drift_fade"] = a.mean() * H - cov1
    if lr is not None:
        out["entropy_change_pred_fade"] = lr * out["entropy_drift_fade"]
        out["entropy_change_pred_cui"] = -lr * S / N
    band = (c > clip_cov.lb) & (c < clip_cov.ub)
    if clip is not None:
        band &= ~clip
    out["clip_cov_band_frac"] = band.sum() / N
    out["clip_cov_frac"] = min(max(int(clip_cov.ratio * N), 1), int(band.sum())) / N
    out["clip_cov_band_share"] = c[band].sum() / S if S != 0 else math.nan
    k = max(1, int(N * kl_cov.ratio))
    top = np.sort(c)[::-1][:k]
    out["kl_cov_frac"] = k / N
    out["kl_cov_threshold"] = top[-1]
    out["kl_cov_share"] = top.sum() / S if S != 0 else math.nan
    return out


def assert_same(got, want, rtol=1e-12, atol=1e-14):
    assert list(got) == list(want)
    assert list(got) == [k for k in te.DIAGNOSTIC_KEYS if k in got]           # documented order
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def batch(seed=0, B=6, T=9, dtype=torch.float64):
    """Ragged responses (right padding holds garbage), per-row advantages with zeros among them,
    entropies, a clip mask; scaled so that some centred products fall in Clip-Cov's band (1, 5)."""
    g = np.random.default_rng(seed)
    lengths = g.integers(1, T + 1, size=B)
    mask = np.arange(T)[None, :] < lengths[:, None]
    logp = -g.exponential(1.5, size=(B, T))
    logp[~mask] = g.normal(size=(~mask).sum()) * 50            # padding: garbage, even positive
    adv = g.normal(0, 1.5, size=B)
    adv[g.random(B) < 0.25] = 0.0
    ent = g.uniform(0, 3, size=(B, T))
    clipped = (g.random((B, T)) < 0.3) & mask
    t = lambda v: torch.tensor(v, dtype=dtype)  # noqa: E731
    return t(logp), t(adv), torch.tensor(mask), t(ent), torch.tensor(clipped)


@pytest.mark.parametrize("seed", range(4))
def test_every_value_matches_numpy_float64(seed):
    logp, adv, mask, ent, clipped = batch(seed)
    kw = dict(clip_cov=ClipCov(ratio=0.05), kl_cov=KLCov(ratio=0.15))   # caps and k > 1 at this N
    got = token_diagnostics(logp, adv, mask, entropy=ent, clipped=clipped, lr=0.03, **kw)
    assert_same(got, reference(logp, adv, mask, ent, clipped, 0.03, **kw))
    # per-token advantages [B, T] give the same as the per-row ones broadcast
    adv_bt = adv[:, None].expand_as(logp).clone()
    assert token_diagnostics(logp, adv_bt, mask, entropy=ent, clipped=clipped, lr=0.03, **kw) == got
    # log-probabilities that carry a graph (TRL's) are read without differentiating
    assert token_diagnostics(logp.clone().requires_grad_(), adv, mask, entropy=ent, clipped=clipped, lr=0.03,
                             **kw) == got
    # verl's defaults, without the optional inputs (FADE's H from −mean log π)
    assert_same(token_diagnostics(logp, adv, mask), reference(logp, adv, mask))


def test_fade_drift_is_fade_change_sampled_at_unit_lr():
    logp, adv, mask, ent, _ = batch(1)
    m = mask.numpy()
    x, a = logp.numpy()[m], np.broadcast_to(adv.numpy()[:, None], m.shape)[m]
    H = ent.numpy()[m].mean()
    got = token_diagnostics(logp, adv, mask, entropy=ent, lr=0.5)
    want = float(fade_change_sampled(x, a, H, 1.0))
    assert got["entropy_drift_fade"] == pytest.approx(want, rel=1e-12)
    assert got["entropy_change_pred_fade"] == pytest.approx(0.5 * want, rel=1e-12)


def test_float32_input():
    logp, adv, mask, ent, clipped = batch(2)
    l32, a32, e32 = logp.float(), adv.float(), ent.float()
    got = token_diagnostics(l32, a32, mask, entropy=e32, clipped=clipped, lr=0.1)
    # accumulated in float64: the float32 values themselves give the float64 numbers to 1e-12
    assert_same(got, reference(l32.double(), a32.double(), mask, e32.double(), clipped, 0.1))
    # against the float64 originals: only the inputs' rounding (relative 6e-8 each) remains; the
    # covariance of O(1) values with O(1) spread loses at most a few digits more: 1e-5 relative
    want = reference(logp, adv, mask, ent, clipped, 0.1)
    for k in ("cov_logp_adv", "entropy_mean", "entropy_drift_fade", "adv_token_mean"):
        assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-7), k


def test_splits_sum_to_the_total():
    logp, adv, mask, ent, clipped = batch(3)
    d = token_diagnostics(logp, adv, mask, clipped=clipped)
    total = d["cov_logp_adv"]
    assert d["cov_logp_adv_pos"] + d["cov_logp_adv_neg"] + d["cov_logp_adv_zero"] == pytest.approx(total, rel=1e-12)
    assert d["cov_logp_adv_clipped"] + d["cov_logp_adv_unclipped"] == pytest.approx(total, rel=1e-12)
    assert d["cov_logp_adv_zero"] != 0.0          # A = 0 tokens count when Ā ≠ 0


def test_padding_changes_nothing():
    logp, adv, mask, ent, clipped = batch(4)
    base = token_diagnostics(logp, adv, mask, entropy=ent, clipped=clipped, lr=0.1)
    pad = ~mask
    for fill in (math.nan, math.inf, -math.inf, 1e30):
        lp, e, c = logp.clone(), ent.clone(), clipped.clone()
        lp[pad], e[pad], c[pad] = fill, fill, True
        adv_bt = adv[:, None].expand_as(logp).clone()
        adv_bt[pad] = fill
        assert token_diagnostics(lp, adv_bt, mask, entropy=e, clipped=c, lr=0.1) == base
    # an integer or float 0/1 mask is the same mask
    assert token_diagnostics(logp, adv, mask.int(), entropy=ent, clipped=clipped, lr=0.1) == base
    assert token_diagnostics(logp, adv, mask.double(), entropy=ent, clipped=clipped, lr=0.1) == base


def test_degenerate_inputs():
    logp, adv, mask, ent, _ = batch(5)
    # one token: no covariance; FADE's drift is A·H
    one = torch.zeros_like(mask)
    one[2, 0] = True
    d = token_diagnostics(logp, adv, one, entropy=ent)
    assert d["cov_logp_adv"] == 0.0 and d["kl_cov_threshold"] == 0.0 and d["kl_cov_frac"] == 1.0
    assert d["entropy_drift_fade"] == pytest.approx(float(adv[2] * ent[2, 0]), rel=1e-15)
    assert math.isnan(d["clip_cov_band_share"]) and math.isnan(d["kl_cov_share"])
    # all-equal advantages (a zero-signal batch) and all-equal log-probs: exactly 0
    for a, lp in ((torch.full_like(adv, 0.1), logp), (adv, torch.full_like(logp, -0.7))):
        d = token_diagnostics(lp, a, mask, lr=1.0)
        assert d["cov_logp_adv"] == 0.0 and d["entropy_change_pred_cui"] == 0.0
        assert d["cov_logp_adv_pos"] == d["cov_logp_adv_neg"] == d["cov_logp_adv_zero"] == 0.0
        assert d["clip_cov_band_frac"] == 0.0 and d["clip_cov_frac"] == 0.0


def test_bad_input_names_the_argument():
    logp, adv, mask, ent, clipped = batch(6)
    with pytest.raises(ValueError, match="^mask must select at least one token"):
        token_diagnostics(logp, adv, torch.zeros_like(mask))
    with pytest.raises(ValueError, match=r"^advantages must have shape \[B, T\] = \[6, 9\] or \[B\] = \[6\]"):
        token_diagnostics(logp, adv[:3], mask)
    with pytest.raises(ValueError, match="^mask must have shape"):
        token_diagnostics(logp, adv, mask[:, :4])
    with pytest.raises(ValueError, match="^entropy must have shape"):
        token_diagnostics(logp, adv, mask, entropy=ent[0])
    with pytest.raises(ValueError, match="^clipped must be a bool mask"):
        token_diagnostics(logp, adv, mask, clipped=clipped.int())
    with pytest.raises(ValueError, match="^logp must be a torch.Tensor of shape"):
        token_diagnostics(logp.numpy(), adv, mask)
    bad = logp.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="^logp must be finite on the masked tokens, got 1 non-finite"):
        token_diagnostics(bad, adv, mask)
    with pytest.raises(ValueError, match="^entropy must be finite"):
        token_diagnostics(logp, adv, mask, entropy=torch.full_like(ent, math.inf))
    with pytest.raises(ValueError, match="^lr must be a finite number >= 0"):
        token_diagnostics(logp, adv, mask, lr=-1.0)
    with pytest.raises(ValueError, match=r"^clip_cov.ub must be"):
        ClipCov(lb=2.0, ub=1.0)
    with pytest.raises(ValueError, match=r"^kl_cov.ratio must be"):
        KLCov(ratio=0.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 7), st.floats(-3, 3), st.floats(-3, 3))
def test_properties(seed, B, T, shift_a, shift_x):
    """The splits sum to the total; the covariance ignores a constant added to every A or log π."""
    g = np.random.default_rng(seed)
    logp = torch.tensor(-g.exponential(1.0, (B, T)))
    adv = torch.tensor(np.round(g.normal(size=B), 1))
    mask = torch.tensor(g.random((B, T)) < 0.7)
    mask[0, 0] = True
    d = token_diagnostics(logp, adv, mask)
    scale = 1e-12 * max(1.0, abs(d["cov_logp_adv_pos"]) + abs(d["cov_logp_adv_neg"]) + abs(d["cov_logp_adv_zero"]))
    assert abs(d["cov_logp_adv_pos"] + d["cov_logp_adv_neg"] + d["cov_logp_adv_zero"] - d["cov_logp_adv"]) <= scale
    s = token_diagnostics(logp + shift_x, adv + shift_a, mask)
    assert s["cov_logp_adv"] == pytest.approx(d["cov_logp_adv"], rel=1e-9, abs=1e-12)
    assert 0.0 < d["kl_cov_frac"] <= 1.0 and 0.0 <= d["clip_cov_frac"] <= d["clip_cov_band_frac"] <= 1.0


@pytest.mark.gpu
def test_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    logp, adv, mask, ent, clipped = batch(7)
    cpu = token_diagnostics(logp, adv, mask, entropy=ent, clipped=clipped, lr=0.1)
    gpu = token_diagnostics(logp.cuda(), adv.cuda(), mask.cuda(), entropy=ent.cuda(), clipped=clipped.cuda(), lr=0.1)
    assert_same(gpu, cpu)


# ------------------------------------------------------------------ the tracker
def test_tracker_pairs_and_correlation_match_numpy():
    g = np.random.default_rng(0)
    H = 2.0 - np.cumsum(g.uniform(0, 0.05, 40))
    pred = np.diff(H, append=H[-1]) + g.normal(0, 0.01, 40)   # prediction of step s ≈ H[s+1] − H[s]
    pred[7] = math.nan                                         # a step without a prediction
    one = EntropyChangeTracker()
    measured = np.concatenate([one.update([h], [p]) for h, p in zip(H, pred)])
    np.testing.assert_array_equal(measured[1:], np.diff(H))
    assert math.isnan(measured[0])
    ok = np.isfinite(pred[:-1])
    assert one.n == ok.sum()
    assert one.correlation == pytest.approx(np.corrcoef(pred[:-1][ok], np.diff(H)[ok])[0, 1], rel=1e-12)
    # in uneven chunks (the vectorised merge): the same sums to rounding
    many = EntropyChangeTracker()
    parts = [many.update(H[i:j], pred[i:j]) for i, j in ((0, 1), (1, 13), (13, 14), (14, 40))]
    np.testing.assert_allclose(np.concatenate(parts), measured, rtol=0, atol=1e-15)
    for f in ("mean_pred", "mean_meas", "m2_pred", "m2_meas", "co_moment"):
        assert getattr(many, f) == pytest.approx(getattr(one, f), rel=1e-12, abs=1e-15), f
    # the state goes through JSON
    back = EntropyChangeTracker()
    back.load_state_dict(json.loads(json.dumps(many.state_dict())))
    assert back == many
    assert math.isnan(EntropyChangeTracker().correlation)
    assert many.update([], []).size == 0
    with pytest.raises(ValueError, match="^predicted must have the shape of entropy"):
        many.update([1.0, 2.0], [0.1])
