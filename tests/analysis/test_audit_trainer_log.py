"""The audit's sections on the trainer's metric log (analysis.audit.trainer_log), and shaped rewards.

Cui's law R = −a·e^H + b is checked against numpy.linalg.lstsq on the design matrix
[−e^H, 1] (an independent solver of the same least-squares problem), a planted series is
recovered, and the early fit's out-of-sample error is recomputed by hand.  The shaped-reward
counts are checked on groups written out by hand.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analysis.audit import metrics, trainer_log


def _log(**cols) -> SimpleNamespace:
    n = len(next(iter(cols.values())))
    return SimpleNamespace(frame=pd.DataFrame({"step": np.arange(n, dtype=np.int64), **cols}),
                           source={"format": "table", "paths": ["m.csv"], "columns": {}, "unmapped": [], "notes": []})


# ------------------------------------------------------------------ Cui's law
def test_cui_fit_equals_lstsq_on_noisy_series():
    rng = np.random.default_rng(3)
    H = np.sort(rng.uniform(0.2, 2.0, 60))[::-1]
    R = -0.07 * np.exp(H) + 0.85 + rng.normal(0, 0.02, H.size)
    f = trainer_log.cui_fit(H, R)
    X = np.column_stack([-np.exp(H), np.ones_like(H)])
    (a, b), res, *_ = np.linalg.lstsq(X, R, rcond=None)
    # two solvers of one well-conditioned 2-parameter problem: agreement to ~1e-12 relative
    assert f["a"] == pytest.approx(a, rel=1e-10)
    assert f["b"] == pytest.approx(b, rel=1e-10)
    assert f["ceiling"] == pytest.approx(b - a, rel=1e-10)
    assert f["rmse"] == pytest.approx(math.sqrt(res[0] / H.size), rel=1e-8)
    r2 = 1 - res[0] / np.sum((R - R.mean()) ** 2)
    assert f["r2"] == pytest.approx(r2, rel=1e-8)
    assert f["n"] == 60


@pytest.mark.parametrize("a,b", [(0.2, 0.9), (0.013, 0.41), (1.5, 3.0)])
def test_planted_series_is_recovered(a, b):
    H = np.linspace(1.8, 0.05, 50)
    f = trainer_log.cui_fit(H, -a * np.exp(H) + b)
    assert f["a"] == pytest.approx(a, rel=1e-9) and f["b"] == pytest.approx(b, rel=1e-9)
    assert f["ceiling"] == pytest.approx(b - a, rel=1e-9)
    assert f["rmse"] < 1e-9 * b


def test_early_fit_is_judged_on_held_out_steps_only():
    rng = np.random.default_rng(0)
    steps = np.arange(100, 140)
    H = np.linspace(1.4, 0.3, steps.size)
    R = -0.1 * np.exp(H) + 0.8 + rng.normal(0, 0.01, steps.size)
    perm = rng.permutation(steps.size)          # the input order does not matter: steps order the points
    f = trainer_log.cui_fit_early(steps[perm], H[perm], R[perm], fraction=0.15)
    n_fit = math.ceil(0.15 * steps.size)
    assert f["n_fit"] == n_fit and f["n_held_out"] == steps.size - n_fit and f["last_fit_step"] == steps[n_fit - 1]
    X = np.column_stack([-np.exp(H[:n_fit]), np.ones(n_fit)])
    (a, b), *_ = np.linalg.lstsq(X, R[:n_fit], rcond=None)
    pred = b - a * np.exp(H[n_fit:])
    assert f["a"] == pytest.approx(a, rel=1e-9)
    assert f["oos_rmse"] == pytest.approx(np.sqrt(np.mean((R[n_fit:] - pred) ** 2)), rel=1e-9)
    assert f["oos_max_abs_error"] == pytest.approx(np.abs(R[n_fit:] - pred).max(), rel=1e-9)
    assert f["final_predicted"] == pytest.approx(pred[-1], rel=1e-9) and f["final_actual"] == R[-1]


def test_cui_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="at least 3 steps"):
        trainer_log.cui_fit([1.0, 0.5], [0.1, 0.2])
    with pytest.raises(ValueError, match="entropy is constant"):
        trainer_log.cui_fit([0.7] * 5, [0.1, 0.2, 0.3, 0.4, 0.5])
    with pytest.raises(ValueError, match="entropy must be finite"):
        trainer_log.cui_fit([1.0, -0.5, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="steps left to judge"):
        trainer_log.cui_fit_early([0, 1, 2], [1.0, 0.5, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="fit_fraction"):
        trainer_log.cui_fit_early([0, 1, 2, 3], [1.0, 0.5, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], fraction=1.5)


# ------------------------------------------------------------------ sections
def test_entropy_section_aligns_sparse_validation_with_the_last_entropy():
    H = np.linspace(1.2, 0.2, 30)
    val = np.full(30, np.nan)
    val[::5] = -0.2 * np.exp(H[::5]) + 0.9       # validation every 5 steps
    t = trainer_log.sections(_log(entropy=H, reward_mean=np.linspace(0.1, 0.6, 30), **{"val/acc": val}),
                             performance="val/acc")
    e = t["entropy"]
    assert e["performance"] == "val/acc" and e["points"] == 6
    assert e["fit"]["a"] == pytest.approx(0.2, rel=1e-9) and e["fit"]["ceiling"] == pytest.approx(0.7, rel=1e-9)
    assert e["first"] == 1.2 and e["last"] == pytest.approx(0.2) and e["relative_drop"] == pytest.approx(1.0 / 1.2)
    # FADE's α, δ from the logged reward and entropy: one per step (no rollout log here)
    assert len(e["fade"]) == 30 and all(math.isfinite(r["delta"]) for r in e["fade"])
    with pytest.raises(ValueError, match="performance: the metric log has no column 'val/pass'"):
        trainer_log.sections(_log(entropy=H), performance="val/pass")


def test_mismatch_flags_steps_over_the_cap_sequence_level_first():
    seq = np.array([1.1, 2.9, 3.0, 3.2, 1.0, 7.5])
    tok = np.array([5.0] * 6)
    m = trainer_log.sections(_log(seq_is_ratio_max=seq, is_ratio_max=tok, mismatch_kl=np.full(6, 1e-3)))["mismatch"]
    assert m["flag_column"] == "seq_is_ratio_max" and m["level"] == "sequence"
    assert m["flagged_steps"] == [3, 5] and m["flagged_values"] == [3.2, 7.5]        # 3.0 is at the cap, not over
    m = trainer_log.sections(_log(is_ratio_max=tok), is_cap=6.0)["mismatch"]
    assert m["level"] == "token" and m["flagged_steps"] == []
    assert trainer_log.sections(_log(entropy=np.linspace(1, 0.5, 6)))["mismatch"] is None


def test_zero_signal_cross_check_lists_each_disagreement():
    trainer = _log(frac_zero_std=np.array([0.25, 0.5, 0.5, 0.0]))
    roll = pd.DataFrame({"step": [0, 1, 2, 5], "frac_equal_rewards": [0.25, 0.5, 0.75, 0.0], "n_groups": [4, 4, 4, 4]})
    z = trainer_log.sections(trainer, rollout_steps=roll)["zero_signal"]["rollouts"]
    assert z["n_steps_both"] == 3 and z["n_steps_trainer_only"] == 1 and z["n_steps_rollouts_only"] == 1
    assert z["n_disagree"] == 1 and z["disagreements"] == [{"step": 2, "trainer": 0.5, "rollouts": 0.75, "n_groups": 4}]
    assert z["max_abs_difference"] == pytest.approx(0.25)


def test_alerts_are_read_and_bad_lines_named(tmp_path):
    f = tmp_path / trainer_log.ALERTS_FILE
    f.write_text('{"step": 9, "rule": "is_ratio_cap", "message": "ratio 4.1 > 3", "value": 4.1, "threshold": 3}\n'
                 '\n{"step": 2, "rule": "entropy_drop", "message": "fell"}\n')
    (tmp_path / "checkpoint-5").mkdir()
    assert trainer_log.find_alerts([tmp_path]) == [f]
    assert [a["step"] for a in trainer_log.read_alerts([f])] == [2, 9]
    f.write_text('{"step": 1, "rule": "x", "message": "m"}\n{"step": 2, "rule": "x"}\n')
    with pytest.raises(ValueError, match=rf"alerts: {f}:2: .*missing message"):
        trainer_log.read_alerts([f])
    f.write_text('{"step": 1, "rule": "x", "message": "m"}\nnot json\n')
    with pytest.raises(ValueError, match=rf"alerts: {f}:2: not a JSON line"):
        trainer_log.read_alerts([f])


# ------------------------------------------------------------------ shaped rewards
def _shaped_frame() -> pd.DataFrame:
    # per step, four groups of four (threshold 1.0):
    #   g0 [0, .1, 0, .2]   all fail, rewards differ   -> gradient from the shaped part
    #   g1 [0, 0, 0, 0]     all fail, all equal        -> zero advantage
    #   g2 [1, .05, 1, 1]   mixed pass/fail
    #   g3 [1, 1, 1, 1]     all pass, all equal        -> zero advantage
    r = np.array([0, .1, 0, .2, 0, 0, 0, 0, 1, .05, 1, 1, 1, 1, 1, 1] * 2, float)
    return pd.DataFrame({"step": np.repeat([0, 1], 16), "group": np.tile(np.repeat(np.arange(4), 4), 2), "reward": r})


def test_shaped_rewards_give_two_views_counted_by_hand():
    doc = metrics.audit(_shaped_frame(), advantage="grpo", success_threshold=1.0, compare=["asym_grpo"])
    s = doc["summary"]
    assert doc["rewards"]["kind"] == "shaped"
    assert s["frac_all_wrong"] == 0.5 and s["frac_all_correct"] == 0.25        # pass/fail view: g0, g1 / g3
    assert s["frac_equal_rewards"] == 0.5                                     # trainer's view: g1, g3
    assert s["frac_shaped_signal"] == 0.25                                    # g0
    # masses of grpo on the real rewards: g2 alone has S and F; by hand (population std)
    r2 = np.array([1, .05, 1, 1])
    A2 = (r2 - r2.mean()) / r2.std()
    m_S2 = A2[r2 >= 1].sum() / 4
    assert doc["steps"][0]["m_S"] == pytest.approx(m_S2 / 4, rel=1e-12)       # mean over the step's 4 groups
    # Σ|A| sees g0's gradient, which the masses net out (all its rollouts are in F)
    r0 = np.array([0, .1, 0, .2])
    A0 = (r0 - r0.mean()) / r0.std()
    assert doc["steps"][0]["abs_adv_sum"] == pytest.approx((np.abs(A0).sum() + np.abs(A2).sum()) / 4, rel=1e-12)
    assert doc["masses_advantage"]["on_real_rewards"] is True
    assert doc["compare"]["asym_grpo"]["on_real_rewards"] is False
    assert any("asym_grpo is defined on success/failure only" in n for n in doc["notes"])


def test_binary_rewards_keep_one_view():
    f = _shaped_frame()
    f["reward"] = (f["reward"] >= 1).astype(float)
    doc = metrics.audit(f, advantage="grpo")
    assert doc["rewards"]["kind"] == "binary"
    assert doc["summary"]["frac_equal_rewards"] == doc["summary"]["frac_all_wrong"] + doc["summary"]["frac_all_correct"]
    assert doc["summary"]["frac_shaped_signal"] == 0.0


def test_report_never_says_no_gradient_of_groups_whose_rewards_differ(tmp_path, cheap_png):
    from analysis.audit.report import render

    doc = metrics.audit(_shaped_frame(), advantage="grpo", success_threshold=1.0)
    blocks, _ = render(doc)
    text = " ".join(str(b[1]) for b in blocks if b[0] == "p")
    assert "What the trainer did" in text and "Pass/fail at reward ≥ 1" in text
    assert "50% of the run's groups had all-equal rewards" in text.replace(" %", "%")
    zero = [b[1] for b in blocks if b[0] == "p" and "no gradient" in str(b[1])]
    assert zero and all("all-equal rewards" in z for z in zero)


def test_trl_masked_sequences_are_seen_through_a_zero_minimum():
    # TRL's mask modes log a masked sequence's ratio as 0 and never log one above the cap
    m = trainer_log.sections(_log(seq_is_ratio_min=np.array([0.9, 0.0, 0.8, 0.0]),
                                  seq_is_ratio_max=np.array([1.2, 2.9, 1.1, 3.0])))["mismatch"]
    assert m["flagged_steps"] == [] and m["masked_steps"] == [1, 3]
