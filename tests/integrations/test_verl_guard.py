"""The verl guard hook (issue 28, item 3): ``RLVR_GUARD`` / ``RLVR_GUARD_ACTION`` on verl's ``Tracking``.

verl's trainers hand every step's metrics to ``Tracking.log(data=metrics, step=global_steps)``;
:func:`integrations.verl.install_guard_hook` wraps that class.  These tests use the real
``verl.utils.tracking.Tracking`` (with no backend, or verl's own ``file`` backend), the real
``rlvr_*`` estimator registered in verl, and the real ``RayPPOTrainer._save_checkpoint`` on an
instance built without its Ray workers.  Two stand-ins, each doing exactly what verl does there:

* ``_Workers.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep=...)``: the
  actor worker group's RPC that ``_save_checkpoint`` calls (it writes a marker file);
* :func:`run_steps` / :class:`V1Loop`: the part of ``fit`` that touches the logger: construct
  ``Tracking(project_name=, experiment_name=, default_backend=, config=)`` inside a method of the
  trainer, then per step ``logger.log(data=metrics, step=self.global_steps)`` and
  ``self.global_steps += 1`` (``RayPPOTrainer.fit``, ray_trainer.py; v1 ``PPOTrainer.fit``,
  v1/trainer_base.py, whose ``while`` condition :class:`V1Loop` copies: the v1 trainer needs
  ``transfer_queue``, which the verl test environment does not install).
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

from omegaconf import OmegaConf  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path  # noqa: E402
from verl.utils.tracking import Tracking  # noqa: E402

from analysis.audit.metric_logs import read_metrics  # noqa: E402
from analysis.audit.trainer_log import read_alerts  # noqa: E402
from integrations import verl as rv  # noqa: E402

#: a collapsing entropy stream: 1.0 at step 1, down 0.1 per step; with entropy_drop(fraction=0.5)
#: the first step with H <= 0.5 (a fall of half the maximum 1.0) is step 6 (H = 0.5)
ENTROPY = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
FIRES_AT = 6
RULES = {"rules": {"entropy_drop": {"fraction": 0.5, "steps": 20}}}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in (rv.ENV_GUARD, rv.ENV_GUARD_ACTION, rv.ENV_LOG_DIR, rv.ENV_PARAMS):
        monkeypatch.delenv(var, raising=False)
    rv.reset()
    yield
    rv.reset()


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES))
    return str(path)


def step_metrics(step, **extra):
    """A training step's metrics under verl's own names."""
    return {"training/global_step": step, "training/epoch": 0, "actor/entropy": ENTROPY[step - 1],
            "critic/score/mean": 0.5, "actor/pg_loss": 0.1, **extra}


def config(run_dir, *, save_freq=-1):
    return OmegaConf.create({
        "trainer": {"project_name": "p", "experiment_name": "e", "logger": [], "default_local_dir": str(run_dir),
                    "default_hdfs_dir": None, "save_freq": save_freq, "max_actor_ckpt_to_keep": None},
        "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}},
    })


class _Workers:
    """Stand-in of the actor worker group: ``save_checkpoint`` as ``_save_checkpoint`` calls it."""

    def __init__(self, events):
        self.events = events

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, "weights.marker"), "w") as fh:
            fh.write(str(global_step))
        self.events.append(("save", global_step))


def legacy_trainer(run_dir, events, *, save_freq=-1, total=len(ENTROPY)):
    """A real ``RayPPOTrainer`` without Ray: what ``_save_checkpoint`` reads, a real dataloader."""
    t = object.__new__(ray_trainer.RayPPOTrainer)
    t.config = config(run_dir, save_freq=save_freq)
    t.actor_rollout_wg = _Workers(events)
    t.use_critic = False
    t.train_dataloader = StatefulDataLoader(list(range(32)), batch_size=4)
    t.total_training_steps = total
    t.global_steps = 0
    return t


def run_steps(self, n, extra=lambda step: {}):
    """``fit``'s use of the logger, run as a method of the trainer ``self`` (see the module docstring)."""
    logger = Tracking(project_name=self.config.trainer.project_name,
                      experiment_name=self.config.trainer.experiment_name,
                      default_backend=self.config.trainer.logger,
                      config=OmegaConf.to_container(self.config, resolve=True))
    logger.log(data={"val-core/acc": 0.1}, step=0)  # the validation before training: not a step
    self.global_steps = 1
    while self.global_steps <= n:
        logger.log(data=step_metrics(self.global_steps, **extra(self.global_steps)), step=self.global_steps)
        self.global_steps += 1
    return logger


# ------------------------------------------------------------------ configuration
def test_hook_is_installed_on_verls_tracking():
    assert Tracking.log.rlvr_guard_hook and Tracking.__init__.rlvr_guard_hook
    assert rv.install_guard_hook() is False  # once per process
    t = Tracking(project_name="p", experiment_name="e", default_backend=[])
    assert t.rlvr_guard is None  # RLVR_GUARD unset: no guard


def test_without_guard_or_estimator_verls_log_is_unchanged(monkeypatch, tmp_path):
    """The plugin imported, ``RLVR_GUARD`` unset and no ``rlvr_*`` estimator called: every backend
    of the wrapped ``Tracking`` gets verl's own dict (the same object, no key added) with the same
    step, for training and validation logs, keyword or positional calls and ``backend=``; nothing
    raises and ``log`` returns what verl's returns; the ``file`` log equals that of verl's own
    (unwrapped) ``Tracking.log``."""
    assert Tracking.log.rlvr_guard_hook  # the plugin's wrapper is what runs
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    seen = []

    class Spy:  # a backend that records what Tracking.log hands it
        def log(self, data, step):
            seen.append((data, step))

    t = Tracking(project_name="p", experiment_name="wrapped", default_backend=["file"])
    assert t.rlvr_guard is None
    t.logger["spy"] = Spy()
    calls = [({"val-core/acc": 0.1}, 0), (step_metrics(1), 1), (step_metrics(2, **{"rlvr/m_S": 7.0}), 2),
             ({"training/global_step": 3, "actor/entropy": float("nan")}, 3)]
    originals = [(dict(d), s) for d, s in calls]
    for i, (data, step) in enumerate(calls):
        out = t.log(data=data, step=step) if i % 2 else t.log(data, step)
        assert out is None
    assert t.log(data=step_metrics(4), step=4, backend=["spy"]) is None  # one backend only
    t.finish()
    assert [d for d, _ in seen[:len(calls)]] == [d for d, _ in calls]
    assert all(d is data for (d, _), (data, _) in zip(seen, calls))  # the caller's dict, not a copy
    assert [(d, s) for d, s in calls] == originals  # not mutated
    assert [s for _, s in seen] == [0, 1, 2, 3, 4] and seen[-1][0] == step_metrics(4)

    # verl's own log, unwrapped, writes the same file lines
    ref = Tracking(project_name="p", experiment_name="verl", default_backend=["file"])
    verl_log = Tracking.log.__wrapped__
    for data, step in originals:
        verl_log(ref, data=data, step=step)
    ref.finish()
    assert (tmp_path / "p" / "wrapped.jsonl").read_bytes() == (tmp_path / "p" / "verl.jsonl").read_bytes()


@pytest.mark.parametrize("env, needle", [
    ({"RLVR_GUARD": "nonsense"}, "RLVR_GUARD='nonsense' is neither a preset of the rlvr guard (default) nor a JSON"),
    ({"RLVR_GUARD": "default", "RLVR_GUARD_ACTION": "halt"},
     "RLVR_GUARD_ACTION='halt' is not an action of the rlvr guard; allowed: log, alert, stop"),
    ({"RLVR_GUARD_ACTION": "stop"}, "RLVR_GUARD_ACTION='stop' is set but RLVR_GUARD is not"),
])
def test_bad_environment_is_refused_when_verl_builds_its_logger(monkeypatch, env, needle):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as err:
        Tracking(project_name="p", experiment_name="e", default_backend=[])
    assert needle in str(err.value)


def test_bad_rules_file_and_missing_run_folder_are_refused(monkeypatch, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": {"entropy_fall": {}}}))
    monkeypatch.setenv(rv.ENV_GUARD, str(bad))
    with pytest.raises(ValueError, match=r"RLVR_GUARD='.*bad.json': .*unknown rule 'entropy_fall'; expected one of "
                                         r"entropy_drop"):
        Tracking(project_name="p", experiment_name="e", default_backend=[])
    monkeypatch.setenv(rv.ENV_GUARD, "default")
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "alert")
    with pytest.raises(ValueError, match="RLVR_GUARD_ACTION='alert' writes rlvr_alerts.jsonl into the run folder: "
                                         "set RLVR_LOG_DIR or verl's trainer.default_local_dir"):
        Tracking(project_name="p", experiment_name="e", default_backend=[])  # no config, no trainer


def test_action_from_file_and_variable(monkeypatch, tmp_path, rules_file):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    assert rv.guard_from_env().action == "log"
    assert [r.name for r in rv.guard_from_env().rules] == ["entropy_drop"]
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "stop")
    assert rv.guard_from_env().action == "stop"


# ------------------------------------------------------------------ the metrics the guard sees
def test_verl_names_map_to_the_guard_columns():
    m = rv.guard_metrics({"actor/entropy": 1.25, "rollout_corr/rollout_is_seq_max": 4.5,
                          "rollout_corr/rollout_is_max": 2.0, "actor/rlvr/token/cov_logp_adv": 0.03,
                          "rlvr/m_S": 0.1, "rlvr/m_F": 0.2, "rlvr/frac_all_correct": 0.25,
                          "rlvr/frac_all_wrong": 0.5, "rlvr/solve_rate": 0.4, "timing_s/step": 9.0})
    assert m == {"entropy": 1.25, "is_ratio_max": 2.0, "seq_is_ratio_max": 4.5, "m_S": 0.1, "m_F": 0.2,
                 "cov_logp_adv": 0.03, "frac_all_correct": 0.25, "frac_all_wrong": 0.5, "solve_rate": 0.4}


def test_estimator_metrics_are_the_shared_step_metrics():
    """The names the plugin adds to verl's log are :data:`integrations.core.STEP_METRICS`, TRL's too."""
    from integrations.core import STEP_METRICS

    assert "ESTIMATOR_METRICS" not in vars(rv)  # one list, in integrations.core
    calls = [{key: 0.5 for key in STEP_METRICS.values()}]
    assert list(rv.estimator_metrics(calls)) == list(STEP_METRICS)


def test_estimator_masses_reach_verls_log_and_the_audit(monkeypatch, tmp_path):
    """The real ``rlvr_dr_grpo`` estimator, then verl's ``file`` backend: mean-only GRPO on the groups
    [1, 0, 0, 0] and [1, 1, 1, 1] gives A = (0.75, -0.25, -0.25, -0.25) and 0, so per group
    M_S = M_F = 0.75/4 = 0.1875 and 0; their means 0.09375 (sign ratio 1), all-correct 0.5,
    solve rate (0.25 + 1)/2 = 0.625."""
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    fn = core_algos.get_adv_estimator_fn("rlvr_dr_grpo")
    rewards = torch.zeros(8, 3)
    rewards[[0, 4, 5, 6, 7], 2] = 1.0
    fn(token_level_rewards=rewards, response_mask=torch.ones(8, 3),
       index=np.array(["a"] * 4 + ["b"] * 4, dtype=object), config=None)
    t = Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    t.log(data=step_metrics(1), step=1)
    t.log(data=step_metrics(2), step=2)  # no estimator call since: no rlvr/* keys
    t.finish()
    lines = [json.loads(ln) for ln in (tmp_path / "p" / "e.jsonl").read_text().splitlines()]
    first, second = lines[0]["data"], lines[1]["data"]
    assert first["rlvr/m_S"] == pytest.approx(0.09375, abs=1e-12)
    assert first["rlvr/m_F"] == pytest.approx(0.09375, abs=1e-12)
    assert first["rlvr/sign_ratio"] == pytest.approx(1.0, abs=1e-12)
    assert first["rlvr/frac_all_correct"] == 0.5 and first["rlvr/frac_all_wrong"] == 0.0
    assert first["rlvr/solve_rate"] == pytest.approx(0.625, abs=1e-12)
    assert first["actor/entropy"] == 1.0
    assert not any(k.startswith("rlvr/") for k in second)
    frame = read_metrics(tmp_path / "p" / "e.jsonl", "verl").frame
    assert frame["m_S"].tolist()[0] == pytest.approx(0.09375, abs=1e-12)
    assert frame["entropy"].tolist() == [1.0, 0.9]


# ------------------------------------------------------------------ actions
def test_log_fires_entropy_drop_at_the_collapse(monkeypatch, tmp_path, rules_file, caplog):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    t = legacy_trainer(tmp_path / "ckpt", [])
    with caplog.at_level(logging.WARNING, logger="rlvr_diagnostics.verl"):
        logger = run_steps(t, len(ENTROPY))
    fired = [r for r in caplog.records if r.name == "rlvr_diagnostics.verl" and r.levelno == logging.WARNING]
    assert len(fired) == 1  # reported once while it keeps firing
    assert fired[0].getMessage().startswith(f"guard (log) at step {FIRES_AT}: entropy_drop: entropy fell 50 %")
    assert logger.rlvr_guard.trainer is t
    assert logger.rlvr_guard.guard.history()["entropy"].tolist() == ENTROPY  # the val log is no step
    assert not (tmp_path / "ckpt").exists()  # log writes nothing


def test_alert_writes_the_run_folder(monkeypatch, tmp_path, rules_file):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "alert")
    t = legacy_trainer(tmp_path / "ckpt", [])
    run_steps(t, len(ENTROPY), extra=lambda s: {"rollout_corr/rollout_is_seq_max": 5.0 if s == 2 else 1.5})
    records = [json.loads(ln) for ln in (tmp_path / "ckpt" / "rlvr_alerts.jsonl").read_text().splitlines()]
    assert [(r["step"], r["rule"], r["action"]) for r in records] == [(FIRES_AT, "entropy_drop", "alert")]
    assert records[0]["value"] == pytest.approx(0.5) and records[0]["threshold"] == 0.5
    assert t.global_steps == len(ENTROPY) + 1  # alert does not stop
    # RLVR_LOG_DIR wins over trainer.default_local_dir; the default preset's is_ratio reads rollout_corr/*
    monkeypatch.setenv(rv.ENV_LOG_DIR, str(tmp_path / "logs"))
    monkeypatch.setenv(rv.ENV_GUARD, "default")
    run_steps(legacy_trainer(tmp_path / "ckpt2", []), 3,
              extra=lambda s: {"rollout_corr/rollout_is_seq_max": 5.0 if s == 2 else 1.5})
    alerts = read_alerts([tmp_path / "logs" / "rlvr_alerts.jsonl"])
    assert [(a["step"], a["rule"]) for a in alerts] == [(2, "is_ratio")]
    assert not (tmp_path / "ckpt2").exists()


def test_stop_saves_a_resumable_checkpoint_then_ends_the_legacy_trainer(monkeypatch, tmp_path, rules_file):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "stop")
    events = []
    t = legacy_trainer(tmp_path / "ckpt", events)
    with pytest.raises(rv.GuardStop) as err:
        run_steps(t, len(ENTROPY))
    assert err.value.step == FIRES_AT and [a.rule for a in err.value.alerts] == ["entropy_drop"]
    assert "RayPPOTrainer's loop has no clean exit" in str(err.value)
    assert events == [("save", FIRES_AT)]  # verl's _save_checkpoint ran once, before the stop
    assert t.global_steps == FIRES_AT  # nothing after the log of that step
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == str(FIRES_AT)
    assert (ckpt / f"global_step_{FIRES_AT}" / "data.pt").is_file()
    assert find_latest_ckpt_path(str(ckpt)).endswith(f"global_step_{FIRES_AT}")  # what resume_mode=auto loads
    assert [a["action"] for a in read_alerts([ckpt / "rlvr_alerts.jsonl"])] == ["stop"]
    # resumed: the guard's window restarts, alert lines after the checkpoint are dropped
    (ckpt / "rlvr_alerts.jsonl").write_text((ckpt / "rlvr_alerts.jsonl").read_text()
                                            + json.dumps({"step": 9, "rule": "x", "message": "later"}) + "\n")
    hook = rv.VerlGuardHook.from_env(trainer=t)
    hook.on_log(step_metrics(FIRES_AT + 1), FIRES_AT + 1)
    assert [a["step"] for a in read_alerts([ckpt / "rlvr_alerts.jsonl"])] == [FIRES_AT]


def test_stop_does_not_save_twice_when_verl_saved_the_step(monkeypatch, tmp_path, rules_file):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "stop")
    events = []
    t = legacy_trainer(tmp_path / "ckpt", events, save_freq=FIRES_AT)
    t.global_steps = FIRES_AT
    t._save_checkpoint()  # verl's loop saves step 6 (save_freq) before it logs the step
    with pytest.raises(rv.GuardStop):
        run_steps(t, len(ENTROPY))
    assert events == [("save", FIRES_AT)]  # the guard did not save it again


class V1Loop:
    """Stand-in of the v1 ``PPOTrainer.fit`` loop (v1/trainer_base.py): the same ``while`` condition,
    ``logger.log`` then ``global_steps += 1``, ``on_train_end`` after the loop."""

    def __init__(self, run_dir, events, total=len(ENTROPY)):
        self.config = config(run_dir)
        self.events = events
        self.total_training_steps = total
        self.global_steps = 1

    def _save_checkpoint(self):
        self.events.append(("save", self.global_steps))

    def on_train_end(self):
        self.events.append(("end", self.global_steps))

    def fit(self, hook):
        logger = Tracking(project_name="p", experiment_name="e", default_backend=[])
        logger.rlvr_guard = hook
        while self.global_steps <= self.total_training_steps:
            self.events.append(("step", self.global_steps))
            logger.log(data=step_metrics(self.global_steps), step=self.global_steps)
            self.global_steps += 1
        self.on_train_end()


def test_stop_ends_the_v1_loop_cleanly(tmp_path, rules_file):
    events = []
    trainer = V1Loop(tmp_path / "ckpt", events)
    hook = rv.VerlGuardHook(rv.Guard.from_spec(rules_file, action="stop"), run_dir=tmp_path / "ckpt",
                            trainer=trainer, stop_mode="loop")
    trainer.fit(hook)  # returns: no exception
    assert events[-3:] == [("step", FIRES_AT), ("save", FIRES_AT), ("end", FIRES_AT + 1)]
    assert [e for e in events if e[0] == "step"][-1] == ("step", FIRES_AT)
    assert [a.rule for a in hook.stopped] == ["entropy_drop"]
    assert not rv._is_v1(trainer) and not rv._is_v1(legacy_trainer(tmp_path, []))


def test_stop_at_the_last_step_ends_without_an_error(monkeypatch, tmp_path, rules_file):
    monkeypatch.setenv(rv.ENV_GUARD, rules_file)
    monkeypatch.setenv(rv.ENV_GUARD_ACTION, "stop")
    events = []
    t = legacy_trainer(tmp_path / "ckpt", events, total=FIRES_AT)
    logger = run_steps(t, FIRES_AT)  # verl's loop returns after its last step: nothing to raise
    assert events == [("save", FIRES_AT)] and [a.rule for a in logger.rlvr_guard.stopped] == ["entropy_drop"]


def test_stop_without_a_trainer_says_no_checkpoint(tmp_path, rules_file):
    hook = rv.VerlGuardHook(rv.Guard.from_spec(rules_file, action="stop"), run_dir=tmp_path)
    for s in range(1, FIRES_AT):
        assert hook.on_log(step_metrics(s), s) == []
    with pytest.raises(rv.GuardStop, match="no verl trainer was found, so no checkpoint was saved"):
        hook.on_log(step_metrics(FIRES_AT), FIRES_AT)
