"""The trainer's entropy diagnostics: the token-level columns of every step (against the numpy
recomputation of tests/analysis/test_token_entropy.py on the tensors the trainer passed), the
measured change and running correlation filled one step later, and ``entropy_check``: with plain
SGD the exact first-order change ⟨∇_θ H, Δθ⟩ matches the change measured on the same batch to
O(η²).  An untrained tiny-cpu model (``conftest.untrained_sort3``, no training: fast) with T2T's
length-based advantage, which is non-zero on groups without a correct response."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from simulations.grpo import checkpoint as ck
from simulations.grpo import trainer
from tests.analysis.test_token_entropy import reference

TIMING = ["step_time", "tokens_per_s", "rollout_time"]
COMMON = dict(task="sort", difficulty=3, device="cpu", threads=1, quiet=True, batch_size=4, group_size=4,
              advantage="t2t", log_kl=False, rollout_log=False, head_alignment=False)


def _run(out: Path, base: Path, **kw) -> list[trainer.StepRecord]:
    recs: list[trainer.StepRecord] = []
    trainer.train(trainer.GRPOConfig(out=str(out), init=str(base), **{**COMMON, **kw}), callback=recs.append)
    return recs


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_first_order_change_is_exact_to_second_order(untrained_sort3, tmp_path):
    """SGD makes Δθ = −η·(clipped gradient), linear in η, so the residual measured − ⟨∇H, Δθ⟩ is the
    second-order term ½Δθᵀ∇²HΔθ plus O(η³): halving η divides it by 4·(1 + O(η)).  At these η the
    third-order share is a few per cent (ratios 3.92 and 3.96 measured); the window [3, 5.5] leaves
    room for another machine drawing another batch, whose third-order term may differ, while a
    residual of first order (ratio 2) or float noise (ratio ≈ 1) fails."""
    lrs = (4e-3, 2e-3, 1e-3)
    first, residual = [], []
    for lr in lrs:
        (rec,) = _run(tmp_path / f"lr{lr:g}", untrained_sort3, steps=1, optimizer="sgd", lr=lr, entropy_check=True)
        m = rec.metrics
        first.append(m["entropy_change_first_order"])
        residual.append(m["entropy_change_same_batch"] - m["entropy_change_first_order"])
    assert abs(first[-1]) > 1e-6 and abs(residual[-1]) > 1e-8     # far above float64 noise
    ratios = [residual[i] / residual[i + 1] for i in range(2)]
    assert all(3.0 <= r <= 5.5 for r in ratios), ratios
    # the first-order term is linear in η (the float32 weight differences: to 1e-4)
    assert first[0] / first[1] == pytest.approx(2.0, rel=1e-4) and first[1] / first[2] == pytest.approx(2.0, rel=1e-4)


def test_token_columns_every_step(untrained_sort3, tmp_path, monkeypatch):
    """Every row holds the token diagnostics of the tensors the update used, equal to the numpy
    recomputation; ``entropy_change_measured`` is the next row's entropy minus this one's and the
    correlations are numpy's over the pairs so far; the step's learning rate is the optimizer's."""
    seen = []
    real = trainer.token_diagnostics

    def spy(*args, **kw):
        seen.append((args, kw))
        return real(*args, **kw)
    monkeypatch.setattr(trainer, "token_diagnostics", spy)
    out = tmp_path / "run"
    recs = _run(out, untrained_sort3, steps=4, ppo_epochs=2, minibatches=2, lr=3e-3)
    rows = _rows(out)
    assert len(seen) == len(rows) == 4
    for rec, row, ((logp, adv, mask), kw) in zip(recs, rows, seen):
        assert kw["lr"] == pytest.approx(4 * 3e-3, rel=1e-12)   # μ = 2 epochs × 2 minibatches: 4 optimizer steps
        np.testing.assert_array_equal(adv.numpy().reshape(rec.advantages.shape), rec.advantages)
        want = reference(logp.numpy(), adv.numpy(), mask.numpy(), kw["entropy"].numpy(), kw["clipped"].numpy(),
                         kw["lr"])
        for k in trainer.TOKEN_ENTROPY_COLUMNS[:16]:
            if np.isnan(want[k]):
                assert row[k] is None, k
            else:
                assert row[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15), k
        assert row["entropy"] == pytest.approx(want["entropy_mean"], rel=1e-6)   # float32 mean vs float64
        assert kw["clipped"].dtype == torch.bool and not (kw["clipped"] & ~mask.bool()).any()
    assert any(kw["clipped"].any() for _, kw in seen)            # μ = 2: clipping engaged somewhere
    H = np.array([r["entropy"] for r in rows])
    measured = [r["entropy_change_measured"] for r in rows]
    assert measured[-1] is None
    np.testing.assert_allclose(measured[:-1], np.diff(H), rtol=1e-12)
    for name in ("cui", "fade"):
        pred = np.array([r[f"entropy_change_pred_{name}"] for r in rows])
        corr = [r[f"entropy_pred_corr_{name}"] for r in rows]
        assert corr[0] is None and corr[-1] is None           # one pair; not yet known
        for t in (1, 2):
            assert corr[t] == pytest.approx(np.corrcoef(pred[:t + 1], np.diff(H)[:t + 1])[0, 1], rel=1e-9)
    csv = pd.read_csv(out / "metrics.csv")
    assert list(csv.columns) == [c for c in trainer.METRIC_COLUMNS if c not in trainer.HEAD_ALIGNMENT_COLUMNS]


def test_check_changes_nothing_else_and_resumes(untrained_sort3, tmp_path):
    """The check adds its two columns at the end and leaves the run as it was (metrics, weights);
    a run resumed from a checkpoint written before the entropy trackers were saved rebuilds them
    from the metrics rows."""
    _run(tmp_path / "off", untrained_sort3, steps=3)
    _run(tmp_path / "on", untrained_sort3, steps=3, entropy_check=True)
    off = pd.read_csv(tmp_path / "off" / "metrics.csv").drop(columns=TIMING)
    on = pd.read_csv(tmp_path / "on" / "metrics.csv").drop(columns=TIMING)
    assert list(on.columns) == [*off.columns, *trainer.ENTROPY_CHECK_COLUMNS]
    pd.testing.assert_frame_equal(on[off.columns], off, check_exact=True)
    wa, wb = (load_file(str(tmp_path / r / ck.checkpoint_name(3) / "model.safetensors")) for r in ("off", "on"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # an old checkpoint: no tracker state; resumed from step 2 to 3, the columns are the same
    old = tmp_path / "old"
    _run(old, untrained_sort3, steps=2, checkpoint_every=1)
    path = old / ck.checkpoint_name(2) / "trainer_state.json"
    state = json.loads(path.read_text())
    del state["entropy_trackers"]
    path.write_text(json.dumps(state))
    trainer.train(trainer.GRPOConfig(out=str(old), init=str(untrained_sort3), resume=True,
                                     **{**COMMON, "steps": 3, "checkpoint_every": 1}))
    again = pd.read_csv(old / "metrics.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(again, off, check_exact=False, rtol=1e-12)
