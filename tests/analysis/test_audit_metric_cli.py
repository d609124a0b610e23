"""``rlvr-audit`` on a trainer's metric log: alone, with rollouts, and refused.

The committed ``examples/audit_logs/trl_run`` is a real CPU run of ``examples/trl_grpo.py``
(TRL GRPOTrainer with the AsymGRPO adapter; ``examples/make_metric_logs.py``).  Its Entropy
section is recomputed here from ``trainer_state.json`` read with :mod:`json` and solved with
``numpy.linalg.lstsq`` — none of the toolkit's readers or fit code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis import audit_cli

ROOT = Path(__file__).resolve().parents[2]
TRL_RUN = ROOT / "examples" / "audit_logs" / "trl_run"


def _audit(tmp_path, *args) -> tuple[int, dict | None]:
    out = tmp_path / "rep"
    rc = audit_cli.main([*map(str, args), "--out", str(out), "--quiet"])
    doc = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return rc, doc


def _history(path: Path) -> dict[int, dict]:
    """step -> merged log_history entries of a trainer_state.json, read with json alone."""
    out: dict[int, dict] = {}
    for e in json.loads(path.read_text())["log_history"]:
        out.setdefault(int(e["step"]), {}).update(e)
    return out


def test_trl_output_folder_entropy_section_equals_lstsq(tmp_path, cheap_png):
    rc, doc = _audit(tmp_path, TRL_RUN)
    assert rc == 0
    t = doc["trainer_log"]
    assert t["source"]["format"] == "trl" and len(t["source"]["paths"]) == 3    # output folder + 2 checkpoints
    hist = _history(TRL_RUN / "trainer_state.json")
    steps = sorted(s for s, e in hist.items() if "entropy" in e and "reward" in e)
    H = np.array([hist[s]["entropy"] for s in steps])
    R = np.array([hist[s]["reward"] for s in steps])
    X = np.column_stack([-np.exp(H), np.ones_like(H)])
    (a, b), *_ = np.linalg.lstsq(X, R, rcond=None)
    fit = t["entropy"]["fit"]
    # one least-squares problem, two solvers: agreement to ~1e-10 relative (conditioning of e^H near 4 nats)
    assert fit["n"] == len(steps) and fit["a"] == pytest.approx(a, rel=1e-8) and fit["b"] == pytest.approx(b, rel=1e-8)
    assert fit["ceiling"] == pytest.approx(b - a, rel=1e-8)
    k = int(np.ceil(0.15 * len(steps)))
    (a1, b1), *_ = np.linalg.lstsq(X[:k], R[:k], rcond=None)
    early = t["entropy"]["early_fit"]
    assert early["n_fit"] == k and early["a"] == pytest.approx(a1, rel=1e-8)
    pred = b1 - a1 * np.exp(H[k:])
    assert early["oos_rmse"] == pytest.approx(np.sqrt(np.mean((R[k:] - pred) ** 2)), rel=1e-8)
    assert t["entropy"]["first"] == H[0] and t["entropy"]["last"] == H[-1]
    # the trainer's zero-std count against the rollout log's, step by step (both from the same run)
    z = t["zero_signal"]["rollouts"]
    assert z["n_steps_both"] == len(doc["steps"]) and z["n_disagree"] == 0
    # with rollouts, FADE's δ uses the logged entropy
    assert doc["options"]["entropy_given"] and all(s["fade_delta"] is not None for s in doc["steps"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Entropy" in md and "## Metric log" in md and "Cui's law" in md


def test_metric_log_alone(tmp_path, cheap_png):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRL_RUN / "trainer_state.json", run)
    rc, doc = _audit(tmp_path, run, "--performance", "reward_mean", "--fit-fraction", "0.25")
    assert rc == 0 and doc["steps"] == [] and doc["trainer_log"]["entropy"]["early_fit"]["fraction"] == 0.25
    assert doc["trainer_log"]["zero_signal"]["rollouts"] is None
    assert doc["trainer_log"]["entropy"]["fade"]              # α, δ from the logged reward and entropy
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Entropy" in md and "## Per step" not in md


def test_verl_metric_file_with_metric_map(tmp_path, cheap_png):
    f = tmp_path / "metrics.jsonl"
    H = np.linspace(1.5, 0.4, 12)
    lines = [{"step": i + 1, "data": {"actor/entropy": float(h), "critic/score/mean": float(-0.1 * np.exp(h) + 0.9),
                                      "my/acc": 0.5}} for i, h in enumerate(H)]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rc, doc = _audit(tmp_path, f, "--metric-map", "my/acc=val/acc")
    assert rc == 0
    t = doc["trainer_log"]
    assert t["source"]["format"] == "verl" and t["entropy"]["fit"]["a"] == pytest.approx(0.1, rel=1e-9)
    assert t["steps"][0]["val/acc"] == 0.5


def test_bad_metric_file_names_file_and_line_and_leaves_no_report(tmp_path, capsys):
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 1, "data": {"actor/entropy": 1.0}}\n{"step": 2, "data": {"actor/entropy": "high"}}\n')
    rc, doc = _audit(tmp_path, f)
    err = capsys.readouterr().err
    assert rc == 2 and doc is None and not (tmp_path / "rep").exists()
    assert f"{f}:2" in err and "entropy" in err
    rc, _ = _audit(tmp_path, f, "--performance", "")
    assert rc == 2 and "--performance" in capsys.readouterr().err
    rc, _ = _audit(tmp_path, f, "--fit-fraction", "1.5")
    assert rc == 2 and "--fit-fraction" in capsys.readouterr().err


def test_nothing_to_audit_is_refused(tmp_path, capsys):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "README.md").write_text("notes")
    rc, doc = _audit(tmp_path, d)
    assert rc == 2 and doc is None
    assert "cannot tell the log format" in capsys.readouterr().err


def test_an_rlvr_train_run_folder(tmp_path, cheap_png):
    # rlvr-train grpo writes metrics.jsonl and metrics.csv (one log twice), rlvr_alerts.jsonl (the guard)
    # and checkpoint-N/trainer_state.json of its own (no log_history): one metric log, the alerts shown
    from analysis.audit import metric_logs

    run = tmp_path / "run"
    (run / "checkpoint-000004").mkdir(parents=True)
    (run / "checkpoint-000004" / "trainer_state.json").write_text('{"step": 4, "rng": {}, "policy": {}}')
    H = [1.0, 0.9, 0.7, 0.6]
    rows = [{"step": s + 1, "entropy": h, "reward_mean": 0.3 + 0.1 * s, "m_S": 0.2, "m_F": 0.0} for s, h in enumerate(H)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.csv").write_text("step,entropy,reward_mean,m_S,m_F\n"
                                     + "".join(f"{r['step']},{r['entropy']},{r['reward_mean']},0.2,0.0\n" for r in rows))
    (run / "rlvr_alerts.jsonl").write_text('{"step": 3, "rule": "sign_ratio", "message": "m_S/m_F = inf", '
                                           '"value": "inf", "threshold": 1.25, "action": "alert"}\n')
    assert metric_logs.find_metric_files([run]) == [run / "metrics.jsonl"]
    rc, doc = _audit(tmp_path, run)
    assert rc == 0
    t = doc["trainer_log"]
    assert t["source"]["format"] == "table" and t["entropy"]["first"] == 1.0 and t["entropy"]["last"] == 0.6
    assert [(a["step"], a["rule"]) for a in t["alerts"]] == [(3, "sign_ratio")]
    assert "metrics.csv was not read: it is the same log as metrics.jsonl, which was" in t["source"]["notes"]
    assert "## Alerts" in (tmp_path / "rep" / "report.md").read_text()
