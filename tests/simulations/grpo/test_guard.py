"""``rlvr-train grpo --guard``: a deliberately collapsing tiny run (an advantage that only
reinforces successes, ``relu``, at a high learning rate) is stopped by the guard, leaves the
alerts the audit reads and a checkpoint from which ``--resume`` continues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.audit.trainer_log import ALERTS_FILE, find_alerts, read_alerts
from simulations.grpo import trainer
from simulations.grpo.checkpoint import latest_checkpoint
from simulations.grpo.cli import main

FAST = dict(task="sort", difficulty=3, device="cpu", threads=1, quiet=True, batch_size=4, group_size=4)
COLLAPSE = dict(advantage="relu", lr=2e-3, **FAST)


@pytest.fixture(scope="module")
def base(sft_sort3) -> Path:
    return sft_sort3


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_guard_stops_a_collapsing_run_and_the_checkpoint_resumes(base, tmp_path, capsys):
    out = tmp_path / "run"
    # stops before the first scheduled checkpoint (50): the fresh run's hidden directory must still land
    assert main(["grpo", "--out", str(out), "--init", str(base), "--advantage", "relu", "--lr", "2e-3",
                 "--steps", "8", "--checkpoint-every", "50", "--batch-size", "4", "--group-size", "4",
                 "--device", "cpu", "--threads", "1", "--quiet", "--guard", "default",
                 "--guard-action", "stop"]) == 0
    said = capsys.readouterr()
    assert "stopped by --guard at step 3 (sign_ratio: sign ratio m_S/m_F = inf" in said.out
    assert "--resume" in said.out and "the guard stopped the run at step 3" in said.err
    recs = read_alerts(find_alerts([out]))
    assert [(r["step"], r["rule"], r["action"]) for r in recs] == [(3, "sign_ratio", "stop")]
    assert recs[0]["value"] == "inf" and recs[0]["threshold"] == 1.25 and "FADE" in recs[0]["source"]
    assert latest_checkpoint(out)[0] == 3 and [r["step"] for r in _rows(out)] == [1, 2, 3]
    # the checkpoint resumes (the rule already reported is not reported again while it keeps firing)
    trainer.train(trainer.GRPOConfig(out=str(out), init=str(base), steps=5, checkpoint_every=50, resume=True,
                                     guard="default", guard_action="stop", **COLLAPSE))
    assert [r["step"] for r in _rows(out)] == [1, 2, 3, 4, 5] and latest_checkpoint(out)[0] == 5
    assert len(read_alerts([out / ALERTS_FILE])) == 1


def test_guard_off_and_log_leave_no_alerts_file(base, tmp_path):
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "log"), init=str(base), steps=3, checkpoint_every=3,
                                     guard="default", guard_action="log", **COLLAPSE))
    assert not (tmp_path / "log" / ALERTS_FILE).exists() and len(_rows(tmp_path / "log")) == 3


def test_guard_settings_are_checked_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="neither a preset"):
        trainer.GRPOConfig(out=str(tmp_path / "x"), guard="nope", **FAST).validate()
    with pytest.raises(ValueError, match="guard_action"):
        trainer.GRPOConfig(out=str(tmp_path / "x"), guard="default", guard_action="halt", **FAST).validate()
    f = tmp_path / "rules.json"
    f.write_text(json.dumps({"rules": {"entropy_drop": {"steps": -1}}}))
    with pytest.raises(ValueError, match=r"entropy_drop\.steps"):
        trainer.GRPOConfig(out=str(tmp_path / "x"), guard=str(f), **FAST).validate()
    assert not (tmp_path / "x").exists()
