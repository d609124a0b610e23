"""integrations.trl: the per-micro-batch token diagnostics ``rlvr/token/*`` (CPU, tiny model).

A few steps of TRL's GRPO with ``num_iterations=2`` and a small clip range (so that the old
log-probabilities differ from the current ones and some tokens are clipped): every key of
:data:`analysis.token_entropy.DIAGNOSTIC_KEYS` and the tracked entropy change is logged; each
micro-batch's values equal an independent float64 numpy recomputation from the tensors that
micro-batch's loss used (captured here by wrapping the same methods), the logged values their
window means, and the tracked change and correlations a numpy replay of the logged entropy;
``token_diagnostics=False`` logs none and trains identically.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("pyarrow")

import torch  # noqa: E402

from analysis.token_entropy import CLIP_COV, DIAGNOSTIC_KEYS, KL_COV  # noqa: E402
from integrations.trl import TOKEN_PREFIX, TOKEN_TRACKED, GRPOTrainer  # noqa: E402
from tests.integrations import trl_tiny as T  # noqa: E402

torch.set_num_threads(1)

EPS = 1e-3  # TRL's clip range ε: small enough that the second iteration clips some tokens
CFG = dict(num_iterations=2, epsilon=EPS, max_steps=4, learning_rate=1e-3)


class Capturing(GRPOTrainer):
    """Records, per call of the loss, what it used and the ``rlvr/token/*`` values appended."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.captured: list[dict] = []
        self._cur: dict | None = None

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._cur is not None and "logps" not in self._cur:
            self._cur["logps"] = out[0].detach().double().numpy().copy()
            self._cur["logps32"] = out[0].detach().numpy().copy()
            self._cur["entropy"] = out[1].detach().double().numpy().copy()
        return out

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        before = {k: len(v) for k, v in self._metrics[mode].items() if k.startswith(TOKEN_PREFIX)}
        old = inputs.get("old_per_token_logps")
        self._cur = dict(mode=mode, step=self.state.global_step,
                         adv=inputs["advantages"].double().numpy().copy(),
                         mask=inputs["completion_mask"].numpy().copy(),
                         old32=None if old is None else old.numpy().copy(),
                         lr=self.optimizer.param_groups[0]["lr"])
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            cur, self._cur = self._cur, None
        cur["logged"] = {k[len(TOKEN_PREFIX):]: v[-1] for k, v in self._metrics[mode].items()
                         if k.startswith(TOKEN_PREFIX) and len(v) > before.get(k, 0)}
        self.captured.append(cur)
        return loss


def expected(cap: dict) -> dict[str, float]:
    """The diagnostics of one micro-batch, by numpy in float64 over the boolean-indexed tokens."""
    m = cap["mask"] != 0
    logp32 = cap["logps32"] if cap["old32"] is None else cap["old32"]
    x = logp32.astype(np.float64)[m]
    adv = cap["adv"]
    A = np.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, m.shape)
    a, h = A[m], cap["entropy"][m]
    # TRL's clip: ratio r = exp(ℓ − ℓ_old) in the loss's float32; A < 0 and r < 1 − ε, or A > 0 and r > 1 + ε
    r = np.exp(cap["logps32"] - logp32).astype(np.float64)
    cl = (((r < 1 - EPS) & (A < 0)) | ((r > 1 + EPS) & (A > 0)))[m]
    n = x.size
    c = (a - a.mean()) * (x - x.mean())
    S = c.sum()
    band = (c > CLIP_COV.lb) & (c < CLIP_COV.ub) & ~cl
    k = max(1, int(n * KL_COV.ratio))
    top = np.sort(c)[::-1][:k]
    drift = a.mean() * h.mean() - S / max(n - 1, 1)
    out = {"cov_logp_adv": S / n, "cov_logp_adv_pos": c[a > 0].sum() / n, "cov_logp_adv_neg": c[a < 0].sum() / n,
           "cov_logp_adv_zero": c[a == 0].sum() / n, "cov_logp_adv_clipped": c[cl].sum() / n,
           "cov_logp_adv_unclipped": c[~cl].sum() / n, "adv_token_mean": a.mean(), "entropy_mean": h.mean(),
           "entropy_drift_fade": drift, "clip_cov_band_frac": band.sum() / n,
           "clip_cov_frac": min(max(int(CLIP_COV.ratio * n), 1), int(band.sum())) / n,
           "clip_cov_band_share": c[band].sum() / S, "kl_cov_frac": k / n, "kl_cov_threshold": top[-1],
           "kl_cov_share": top.sum() / S}
    if cap["mode"] == "train":
        out["entropy_change_pred_fade"] = cap["lr"] * drift
        out["entropy_change_pred_cui"] = -cap["lr"] * S / n
    return {key: float(v) for key, v in out.items()}


def run(tmp_path, name, **kw):
    tr = T.build(Capturing, str(tmp_path / name), cfg=CFG, advantage="grpo", **kw)
    tr.train()
    return tr


def test_token_diagnostics_match_numpy_and_are_logged(tmp_path):
    tr = run(tmp_path, "on")
    train = [c for c in tr.captured if c["mode"] == "train"]
    assert len(train) == CFG["max_steps"]                      # one micro-batch per step here
    assert any(c["old32"] is not None for c in train)          # old log-probs from the generation
    clipped_any = False
    for cap in train:
        want = expected(cap)
        assert set(cap["logged"]) == set(DIAGNOSTIC_KEYS)      # every key with clip, entropy and lr
        for key, v in want.items():
            assert cap["logged"][key] == pytest.approx(v, rel=1e-6, abs=1e-9), key
        clipped_any |= cap["logged"]["cov_logp_adv_clipped"] != 0
    assert clipped_any, "no clipped token: the clipped/unclipped split is not exercised"

    # the logged values: the mean over the micro-batches of each logging window (one per step here)
    logs = [h for h in tr.state.log_history if "entropy" in h]
    assert len(logs) == CFG["max_steps"]
    for h in logs:
        window = [c for c in train if c["step"] == h["step"] - 1]
        assert window
        for key in DIAGNOSTIC_KEYS:
            assert h[TOKEN_PREFIX + key] == pytest.approx(np.mean([c["logged"][key] for c in window]), rel=1e-9), key
    logged_keys = set().union(*logs)
    assert {TOKEN_PREFIX + k for k in DIAGNOSTIC_KEYS} | set(TOKEN_TRACKED) <= logged_keys

    # the tracker: H_k − H_{k−1} beside the prediction of window k − 1 (one optimizer step per window)
    H = np.array([h["entropy"] for h in logs])
    for name in ("cui", "fade"):
        p = np.array([h[f"{TOKEN_PREFIX}entropy_change_pred_{name}"] for h in logs])
        for k, h in enumerate(logs):
            if k == 0:
                assert f"{TOKEN_PREFIX}entropy_change_measured" not in h
                continue
            assert h[f"{TOKEN_PREFIX}entropy_change_measured"] == pytest.approx(H[k] - H[k - 1], rel=1e-9, abs=1e-12)
            corr = f"{TOKEN_PREFIX}entropy_pred_corr_{name}"
            if k < 2:
                assert corr not in h
            else:
                want = np.corrcoef(p[:k], np.diff(H[:k + 1]))[0, 1]
                assert h[corr] == pytest.approx(want, rel=1e-6, abs=1e-9)
    assert tr.rlvr_entropy_trackers["cui"].n == len(logs) - 1


def test_off_logs_nothing_and_trains_the_same(tmp_path):
    on = run(tmp_path, "on")
    off = run(tmp_path, "off", token_diagnostics=False)
    assert not any(k.startswith(TOKEN_PREFIX) for h in off.state.log_history for k in h)
    losses = [[h["loss"] for h in tr.state.log_history if "loss" in h] for tr in (on, off)]
    assert losses[0] == losses[1] and len(losses[0]) == CFG["max_steps"]


def test_eval_logs_without_the_learning_rate(tmp_path):
    tr = run(tmp_path, "eval", eval_prompts=8)
    assert tr.args.eval_strategy == "no"  # the default; evaluate once by hand
    metrics = tr.evaluate()
    ev = [c for c in tr.captured if c["mode"] == "eval"]
    assert ev
    for cap in ev:
        assert set(cap["logged"]) == set(DIAGNOSTIC_KEYS) - {"entropy_change_pred_fade", "entropy_change_pred_cui"}
        for key, v in expected(cap).items():
            assert cap["logged"][key] == pytest.approx(v, rel=1e-6, abs=1e-9), key
    assert f"eval_{TOKEN_PREFIX}cov_logp_adv" in metrics
    assert all(math.isfinite(metrics[f"eval_{TOKEN_PREFIX}{k}"]) for k in ("cov_logp_adv", "entropy_mean"))


def test_refuses_a_non_bool():
    with pytest.raises(ValueError, match="token_diagnostics must be True or False"):
        GRPOTrainer(model=None, advantage="grpo", token_diagnostics="yes")
