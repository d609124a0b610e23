"""rlvr-audit: the command line (in-process main(argv), and the program itself in a subprocess)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import audit_cli
from rlvr_theory import groups, masses

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
#: the keys report.json keeps (the schema of the command's documentation)
STEP_KEYS = {"step", "n_groups", "reward_mean", "solve_rate_mean", "frac_all_correct", "frac_all_wrong", "m_S", "m_F",
             "sign_ratio", "abs_adv_sum", "pass_at_1", "pass_at_G", "n_eff"}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """A small run as a table log: 12 steps x 4 prompts x 4 rollouts, RLOO advantages logged."""
    rng = np.random.default_rng(3)
    n_steps, n_groups, G = 12, 4, 4
    step = np.repeat(np.arange(n_steps) * 10, n_groups * G)
    group = np.tile(np.repeat(np.arange(n_groups), G), n_steps)
    mu = np.clip(np.linspace(0.1, 0.8, n_steps)[:, None] + rng.normal(0, 0.15, (n_steps, n_groups)), 0, 1)
    r = (rng.random((n_steps, n_groups, G)) < mu[..., None]).astype(float).ravel()
    A = groups.advantages("rloo", r, step * 100 + group)
    path = tmp_path_factory.mktemp("logs") / "run.csv"
    pd.DataFrame({"step": step, "group": group, "reward": r, "advantage": A}).to_csv(path, index=False)
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = audit_cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_writes_the_report_and_the_masses_are_the_theory_s(table, tmp_path, capsys):
    rc, out, err = _run([table, "--out", tmp_path / "rep", "--compare", "dr_grpo", "asym_grpo:delta=0.5",
                         "--tau", "0.05", "--quiet"], capsys)
    assert rc == 0 and out == "" and err == ""
    rep = tmp_path / "rep"
    names = {p.name for p in rep.iterdir()}
    assert {"report.md", "report.html", "report.json", "masses.png", "compare_masses.png", "tail_miss.png",
            "solve_rate_hist.png"} <= names
    doc = json.loads((rep / "report.json").read_text())
    assert doc["advantage"]["name"] == "rloo" and doc["masses_from"] == "logged"
    assert set(doc["compare"]) == {"dr_grpo", "asym_grpo(delta=0.5)"}
    # the masses of a step are rlvr_theory.masses.of_group on its groups, zero-signal groups counting 0
    frame = pd.read_csv(table)
    first = frame[frame.step == doc["steps"][0]["step"]]
    m = masses.of_group("rloo", first.reward.to_numpy().reshape(-1, 4))
    assert doc["steps"][0]["m_S"] == pytest.approx(float(np.mean(m.m_S)), rel=1e-12, abs=1e-15)
    assert doc["steps"][0]["m_F"] == pytest.approx(float(np.mean(m.m_F)), rel=1e-12, abs=1e-15)
    assert doc["run"]["settings"]["compare"] == ["dr_grpo", "asym_grpo:delta=0.5"]
    assert doc["run"]["threads"] >= 1 and "package_version" in doc["run"]
    html = (rep / "report.html").read_text()
    srcs = re.findall(r"src='([^']*)'", html)
    assert len(srcs) == len([n for n in names if n.endswith(".png")])
    for s in srcs:
        assert base64.b64decode(s.split(",", 1)[1], validate=True)[:8] == PNG
    assert "<script" not in html and "href=" not in html
    md = (rep / "report.md").read_text()
    assert md.index("## Verdict") < md.index("## Per step") and "reproduced by rloo" in md


def test_json_prints_report_json_with_the_schema(table, tmp_path, capsys, cheap_png):
    rc, out, _ = _run([table, "--out", tmp_path / "rep", "--json", "--steps", "20:80", "--advantage", "grpo"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc == json.loads((tmp_path / "rep" / "report.json").read_text())
    assert {"source", "group_size", "advantage", "steps", "compare"} <= set(doc)
    assert doc["source"]["format"] == "table" and doc["source"]["paths"] == [str(table)]
    assert doc["group_size"] == 4
    assert {"name", "params", "max_abs_error"} <= set(doc["advantage"])
    assert [s["step"] for s in doc["steps"]] == [20, 30, 40, 50, 60, 70, 80]
    for s in doc["steps"]:
        assert STEP_KEYS <= set(s)
    assert "grpo" in doc["compare"]          # --advantage on a log with advantages: shown as a what-if


def test_a_summary_unless_quiet(table, tmp_path, capsys, cheap_png):
    rc, out, _ = _run([table, "--out", tmp_path / "rep"], capsys)
    assert rc == 0
    assert out.startswith(f"report: {tmp_path / 'rep'}/report.md") and "12 steps, 48 groups of 4" in out
    assert "reproduced by rloo" in out


@pytest.mark.parametrize("argv,msg", [
    (["{log}", "--format", "nope"], "argument --format: invalid choice: 'nope'"),
    (["{tmp}/missing.csv"], "PATH: '{tmp}/missing.csv' does not exist"),
    (["{log}", "--steps", "5"], "--steps must look like A:B"),
    (["{log}", "--steps", "a:b"], "--steps must look like A:B with integer steps"),
    (["{log}", "--steps", "9:3"], "--steps must be A:B with A <= B, got '9:3'"),
    (["{log}", "--advantage", "grpo", "--param", "delta"], "--param must look like NAME=VALUE"),
    (["{log}", "--advantage", "grpo", "--param", "delta=1"], "grpo: unknown parameter(s) delta; allowed: ddof, eps"),
    (["{log}", "--param", "delta=1"], "--param: give the advantage they belong to with --advantage NAME"),
    (["{log}", "--advantage", "nope"], "--advantage: unknown advantage 'nope'"),
    (["{log}", "--compare", "nope"], "--compare: unknown advantage 'nope'"),
    (["{log}", "--compare", "asym_grpo:delta=-1"], "--compare: asym_grpo: delta must be a finite number > 0"),
    (["{log}", "--compare", "asym_grpo:delta"], "--compare: 'asym_grpo:delta': parameters must look like NAME:k=v"),
    (["{log}", "--tau", "1.5"], "--tau must be a finite number > 0 and < 1, got 1.5"),
    (["{log}", "--group-size", "0"], "--group-size must be an integer >= 1, got 0"),
    (["{log}", "--success-threshold", "nan"], "--success-threshold must be a finite number"),
    (["{log}", "--threads", "0"], "--threads must be an integer >= 1, got 0"),
    (["{log}", "--format", "trl"], "not a readable parquet file"),
    (["{log}", "--reward-column", "x"], "--reward-column: only TRL logs have several reward columns"),
])
def test_bad_input_is_refused_naming_the_flag_and_nothing_is_written(table, tmp_path, capsys, argv, msg):
    fill = {"log": str(table), "tmp": str(tmp_path)}
    rc, out, err = _run([a.format(**fill) for a in argv] + ["--out", tmp_path / "rep"], capsys)
    assert rc == 2 and out == ""
    last = err.strip().splitlines()[-1]             # argparse's own errors come after a usage line
    assert last.startswith("rlvr-audit: error: ") and msg.format(**fill) in last, err
    assert not (tmp_path / "rep").exists()
    assert [p.name for p in tmp_path.iterdir()] == []       # no temporary directory either


def test_a_truncated_jsonl_line_is_refused_or_skipped(tmp_path, capsys):
    logs = tmp_path / "verl"
    logs.mkdir()
    for step in (1, 2):
        rows = [{"input": f"q{g}", "output": "o", "gts": "1", "score": float((g + i + step) % 3 == 0), "step": step,
                 "uid": f"u{g}_{i}_0"} for g in range(3) for i in range(4)]
        (logs / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open(logs / "2.jsonl", "a") as f:
        f.write('{"input": "q9", "output": "o", "sco')              # the trainer was killed mid-line
    rc, _, err = _run([logs, "--out", tmp_path / "rep"], capsys)
    assert rc == 2 and "2.jsonl:13" in err and not (tmp_path / "rep").exists()
    rc, out, _ = _run([logs, "--out", tmp_path / "rep", "--skip-bad-lines", "--json"], capsys)
    assert rc == 0 and json.loads(out)["source"]["n_bad_lines_skipped"] == 1


def test_the_overwrite_policy(table, tmp_path, capsys, cheap_png):
    rep = tmp_path / "rep"
    assert _run([table, "--out", rep, "--quiet"], capsys)[0] == 0
    (rep / "old.txt").write_text("from the earlier report")
    assert _run([table, "--out", rep, "--quiet"], capsys)[0] == 0    # an earlier audit report: replaced
    assert not (rep / "old.txt").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    rc, _, err = _run([table, "--out", mine], capsys)
    assert rc == 2 and "--out: " in err and "pass --overwrite" in err and (mine / "notes.txt").exists()
    diff = tmp_path / "diff"                                          # an rlvr-diff report is not ours
    diff.mkdir()
    (diff / "report.json").write_text('{"checkpoints": []}')
    rc, _, err = _run([table, "--out", diff], capsys)
    assert rc == 2 and "is not an rlvr-audit report" in err
    assert _run([table, "--out", mine, "--overwrite", "--quiet"], capsys)[0] == 0
    assert not (mine / "notes.txt").exists() and (mine / "report.json").exists()
    logs = tmp_path / "logs"                                          # never over its own input
    logs.mkdir()
    shutil.copy(table, logs / "run.csv")
    rc, _, err = _run([logs / "run.csv", "--out", logs, "--overwrite"], capsys)
    assert rc == 2 and "holds the input" in err and (logs / "run.csv").exists()


def test_the_program_runs_in_a_subprocess(table, tmp_path):
    """``python -m analysis.audit_cli`` (and the ``rlvr-audit`` console script where installed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmds = [[sys.executable, "-m", "analysis.audit_cli"]]
    exe = shutil.which("rlvr-audit", path=str(Path(sys.executable).parent))
    if exe:
        cmds.append([exe])
    # a whole report through the first entry point, a refusal through the other (each run costs a
    # new interpreter: 5-15 s on 2 cores)
    p = subprocess.run(cmds[0] + [str(table), "--out", str(tmp_path / "rep0"), "--json", "--threads", "1"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run"]["threads"] == 1 and (tmp_path / "rep0" / "report.html").is_file()
    bad = subprocess.run(cmds[-1] + [str(table), "--out", str(tmp_path / "bad"), "--steps", "x"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("rlvr-audit: error: --steps")
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("folder,extra", [
    ("verl/rollout_data", ["--advantage", "grpo"]), ("verl_legacy", []), ("trl", ["--success-threshold", "1"]),
    ("table", []), ("prime-rl", ["--split", "all"]), ("rlvr", []), ("verl/validation_data", ["--split", "val"]),
])
def test_the_example_logs_are_audited(tmp_path, capsys, folder, extra, cheap_png):
    path = ROOT / "examples" / "audit_logs" / folder
    if not path.exists():
        pytest.skip(f"{path} not written")
    rc, out, err = _run([path, "--out", tmp_path / "rep", "--json"] + extra, capsys)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["steps"] and STEP_KEYS <= set(doc["steps"][0])
    if "--split" in extra:
        assert doc["split"] == ("val" if "val" in extra else "train")
        assert ("val" in doc) == ("all" in extra)          # prime-rl tells its eval rollouts apart
