"""integrations.trl.GuardCallback: a guardrail stops a tiny CPU GRPO run through TRL's own control.

A ``sign_ratio`` rule with a narrow band (``asym_grpo`` with δ = 0.5 reinforces successes more than
it pushes failures down: m_S/m_F ≠ 1 whenever a group has signal) and the action ``stop`` ends a
run of 8 steps early; the run leaves ``checkpoint-N/`` of the stopping step and an alert line that
:func:`analysis.audit.trainer_log.read_alerts` reads; a new trainer resumes from it and, the rule
counting as reported, runs to ``max_steps``.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from analysis.audit.trainer_log import ALERTS_FILE, read_alerts  # noqa: E402
from analysis.guardrails import CovPositive, Guard, SignRatio  # noqa: E402
from integrations.trl import GRPOTrainer, GuardCallback, guard_metrics  # noqa: E402
from tests.integrations import trl_tiny as T  # noqa: E402

torch.set_num_threads(1)

MAX_STEPS = 8
ASYM = dict(advantage="asym_grpo", advantage_params={"delta": 0.5})


def stop_guard() -> Guard:
    return Guard((SignRatio(steps=2, low=0.99, high=1.01),), action="stop")


def test_guard_metrics_maps_trl_and_rlvr_names():
    logs = {"entropy": 2.5, "frac_reward_zero_std": 0.25, "sampling/importance_sampling_ratio/max": 4.0,
            "rlvr/m_S": 0.4, "rlvr/m_F": 0.2, "rlvr/sign_ratio": 2.0, "rlvr/frac_all_correct": 0.1,
            "rlvr/frac_all_wrong": 0.3, "rlvr/token/cov_logp_adv": 0.01, "rlvr/token/entropy_mean": 9.0}
    m = guard_metrics(logs)
    assert m == {"entropy": 2.5, "frac_zero_std": 0.25, "seq_is_ratio_max": 4.0, "m_S": 0.4, "m_F": 0.2,
                 "sign_ratio": 2.0, "frac_all_correct": 0.1, "frac_all_wrong": 0.3, "cov_logp_adv": 0.01}
    # every column the default rules read that TRL or the adapter logs is reachable
    assert {"entropy", "cov_logp_adv", "m_S", "m_F", "frac_zero_std", "seq_is_ratio_max"} <= set(m)


def test_guard_metrics_is_the_shared_live_map_and_metrics_the_shared_list():
    import integrations.trl as rt
    from analysis.audit.metric_logs import live_metrics
    from integrations.core import STEP_METRICS

    logs = {"entropy": "n/a", "clip_ratio/region_mean": 0.125, "rlvr/solve_rate": 0.5, "rlvr/abs_adv_sum": 1.0,
            "rlvr/token/entropy_drift_fade": -0.5, "eval_reward": 0.3}
    assert guard_metrics(logs) == live_metrics(logs, "trl") == {
        "clip_frac": 0.125, "entropy_drift_fade": -0.5, "solve_rate": 0.5}  # a non-number is left out
    assert rt.METRICS is STEP_METRICS  # the names TRL logs are the list shared with the verl plugin


def test_guard_argument_refused_before_the_model():
    with pytest.raises(ValueError, match="neither a preset"):
        GRPOTrainer(model=None, guard="no-such-preset-or-file", **ASYM)
    with pytest.raises(ValueError, match="guard: expected"):
        GuardCallback(3)


def test_stop_checkpoint_alerts_and_resume(tmp_path):
    out = str(tmp_path / "run")
    cfg = dict(max_steps=MAX_STEPS, save_strategy="no", log_completions=False)
    tr = T.build(GRPOTrainer, out, cfg=cfg, guard=stop_guard(), **ASYM)
    assert tr.rlvr_guard_callback in tr.callback_handler.callbacks
    tr.train()
    cb = tr.rlvr_guard_callback
    assert cb.stopped, "the guard did not fire"
    step = cb.stopped[0].step
    assert 2 <= step < MAX_STEPS and tr.state.global_step == step
    ckpt = os.path.join(out, f"checkpoint-{step}")
    assert os.path.isfile(os.path.join(ckpt, "trainer_state.json"))
    assert os.path.isfile(os.path.join(ckpt, "rlvr_state.json"))
    assert sorted(d for d in os.listdir(out) if d.startswith("checkpoint-")) == [f"checkpoint-{step}"]
    alerts = read_alerts([os.path.join(out, ALERTS_FILE)])
    assert [(a["step"], a["rule"], a["action"]) for a in alerts] == [(step, "sign_ratio", "stop")]
    # the guard saw the adapter's masses: the sign ratio it read is the one TRL logged at that step
    logged = [h for h in tr.state.log_history if h.get("step") == step and "rlvr/m_S" in h][0]
    assert alerts[0]["value"] == pytest.approx(logged["rlvr/m_S"] / logged["rlvr/m_F"])

    # a new trainer resumes; the rule firing at the checkpoint counts as reported, the run goes on
    b = T.build(GRPOTrainer, out, cfg=cfg, guard=stop_guard(), **ASYM)
    b.train(resume_from_checkpoint=True)
    assert b.state.global_step == MAX_STEPS
    assert not b.rlvr_guard_callback.stopped
    # the checkpoint's log_history was replayed: one guard row per step, none twice
    assert b.rlvr_guard_callback.guard.history()["step"].tolist() == list(range(1, MAX_STEPS + 1))
    alerts = read_alerts([os.path.join(out, ALERTS_FILE)])
    assert alerts[0]["step"] == step and all(a["step"] >= step for a in alerts)


def test_alert_action_plain_trl_trainer(tmp_path):
    """The callback on TRL's own trainer (``callbacks=[...]``): ``alert`` writes and does not stop."""
    import trl

    out = str(tmp_path / "plain")
    model, tok = T.tiny_model_and_tokenizer()
    cb = GuardCallback(Guard((CovPositive(steps=1, threshold=-1e6),), action="alert"))
    tr = trl.GRPOTrainer(model=model, reward_funcs=T.binary_reward, args=T.config(out, max_steps=3,
                         log_completions=False), train_dataset=T.dataset(32), processing_class=tok,
                         callbacks=[cb])
    tr.train()
    assert tr.state.global_step == 3 and not cb.stopped
    # plain TRL logs no rlvr/token/cov_logp_adv: the rule never fires, nothing is written
    assert not os.path.exists(os.path.join(out, ALERTS_FILE))
    assert len(cb.guard.history()["step"]) == 3
