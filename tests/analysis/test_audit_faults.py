"""rlvr-audit under faults: a folder (or a list of paths) that mixes log formats, and Ctrl-C at
any moment of a run.

Each test first reproduced the failure it guards against (see the docstrings)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import audit_cli
from analysis.audit import readers
from tests.analysis.test_audit_readers import trl_frame, verl_rows, write_jsonl


def _run(argv: list, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = audit_cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ------------------------------------------------------------------ logs
def verl_run(folder: Path, n_steps: int = 12, n_groups: int = 6, G: int = 4, *, seed: int = 0) -> Path:
    """``n_steps`` verl rollout dumps ``{step}.jsonl`` of ``n_groups`` groups of ``G``."""
    rng = np.random.default_rng(seed)
    for step in range(1, n_steps + 1):
        write_jsonl(folder / f"{step}.jsonl", verl_rows(step, (rng.random((n_groups, G)) < 0.5).astype(float)))
    return folder


def trl_file(path: Path, step: int = 1, n_prompts: int = 4, G: int = 4) -> Path:
    """One TRL completions parquet (real-valued rewards: a format bonus of 0.5)."""
    n = n_prompts * G
    acc = (np.arange(n) % 3 == 0).astype(float)
    path.parent.mkdir(parents=True, exist_ok=True)
    trl_frame(step, [f"p{i}" for i in range(n_prompts)], G, acc, np.full(n, 0.5), np.zeros(n)).to_parquet(path)
    return path


# ------------------------------------------------------------------ 1. mixed formats
def test_a_folder_mixing_verl_and_trl_logs_is_refused_naming_the_argument_and_the_files(tmp_path, capsys,
                                                                                        monkeypatch):
    """Reproduced: 12 verl dumps and one TRL parquet in one folder were audited as TRL (1 step,
    4 groups instead of 12 steps and 72 groups), exit 0."""
    monkeypatch.chdir(tmp_path)
    mixed = verl_run(tmp_path / "mixed")
    trl_file(mixed / "completions_00001.parquet")
    rc, out, err = _run(["mixed/", "--out", "rep", "--success-threshold", "1", "--quiet"], capsys)
    assert rc == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("rlvr-audit: error: PATH: 'mixed/' mixes log formats: "), line
    assert "verl: 12 files (mixed/1.jsonl, mixed/2.jsonl, mixed/3.jsonl, ...)" in line, line
    assert "trl: 1 file (mixed/completions_00001.parquet)" in line, line
    assert "--format" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed"]          # nothing written
    # each format on its own, chosen with --format: every file of that format and no other
    v = readers.read(mixed, format="verl")
    assert v.frame["step"].nunique() == 12 and len(v.frame[["step", "group"]].drop_duplicates()) == 72
    t = readers.read(mixed, format="trl")
    assert t.frame["step"].nunique() == 1 and len(t.frame[["step", "group"]].drop_duplicates()) == 4


def test_a_mix_across_paths_and_in_a_trainer_s_subfolders_is_the_same_refusal(tmp_path):
    verl = verl_run(tmp_path / "verl", n_steps=2)
    (tmp_path / "t.csv").write_text("step,group,reward\n1,0,1\n1,0,0\n")
    with pytest.raises(ValueError, match=r"^paths: the logs mix formats: verl: 2 files \(.*verl/1\.jsonl, "
                                         r".*verl/2\.jsonl\); table: 1 file \(.*t\.csv\)"):
        readers.detect_format([verl, tmp_path / "t.csv"])
    # a TRL output directory (completions/ subfolder) whose top level also holds verl dumps
    out = verl_run(tmp_path / "trl_out", n_steps=3)
    for s in (1, 2):
        trl_file(out / "completions" / f"completions_{s:05d}.parquet", step=s)
    with pytest.raises(ValueError, match=r"^paths: '.*trl_out' mixes log formats: verl: 3 files .*; "
                                         r"trl: 2 files \(.*completions/completions_00001\.parquet, "):
        readers.read(out)
    # an rlvr run directory (rollouts/step_N.parquet) with a table beside it
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    pd.DataFrame({"step": [1, 1], "prompt": ["a", "a"], "group": [0, 0], "rollout": [0, 1], "reward": [1.0, 0.0],
                  "advantage": [0.5, -0.5], "length": [3, 4]}).to_parquet(run / "rollouts" / "step_000001.parquet")
    assert readers.detect_format(run) == "rlvr"
    (run / "extra.csv").write_text("step,group,reward\n1,0,1\n")
    with pytest.raises(ValueError, match=r"mixes log formats: rlvr: 1 file .*; table: 1 file \(.*extra\.csv\)"):
        readers.detect_format(run)
    # the name of the argument is the caller's
    with pytest.raises(ValueError, match=r"^PATH: "):
        readers.read(run, arg="PATH")


def test_files_no_reader_reads_do_not_count_as_a_format(tmp_path):
    """README, .DS_Store, a tokenizer.json or a metrics table beside the logs are not logs:
    detection ignores them, and so do the readers."""
    logs = verl_run(tmp_path / "logs", n_steps=3)
    (logs / "README.md").write_text("# my run\n")
    (logs / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (logs / ".completions_00001.parquet").write_bytes(b"PAR1")            # hidden: never read
    (logs / "tokenizer.json").write_text('{\n  "version": "1.0"\n}\n')
    (logs / "metrics.csv").write_text("step,loss\n1,0.5\n")
    (logs / "notes").mkdir()
    trl_file(logs / "notes" / "completions_00001.parquet")               # a folder no reader looks into
    assert readers.detect_format(logs) == "verl"
    r = readers.read(logs)
    assert r.source["n_files"] == 3 and r.frame["step"].unique().tolist() == [1, 2, 3]
    # a file named like one format's log whose first line is broken counts as none: the reader
    # of the folder's format refuses it, naming the line
    (logs / "4.jsonl").write_text('{"input": "q", "sco\n')
    assert readers.detect_format(logs) == "verl"
    with pytest.raises(ValueError, match=r"4\.jsonl:1: not a valid JSON line"):
        readers.read(logs)
    # nothing but such files: no format
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("x")
    with pytest.raises(ValueError, match="cannot tell the log format of"):
        readers.detect_format(other)


# ------------------------------------------------------------------ 2. Ctrl-C
PNG = b"\x89PNG\r\n\x1a\n"
EARLIER = {"report.json": '{"source": {"format": "table"}, "steps": [{"step": 0}]}\n', "report.md": "earlier\n"}


@pytest.fixture
def run_dir(tmp_path, monkeypatch) -> Path:
    """A folder holding a small table log ``run.csv``, the working directory; the report's
    plots are stubbed (the interrupts, not matplotlib, are under test)."""
    from analysis.audit import report

    rng = np.random.default_rng(1)
    step, group = np.repeat(np.arange(6), 12), np.tile(np.repeat(np.arange(3), 4), 6)
    rows = "".join(f"{s},{g},{float(r)}\n" for s, g, r in zip(step, group, rng.random(72) < 0.5))
    (tmp_path / "run.csv").write_text("step,group,reward\n" + rows)
    monkeypatch.setattr(report, "_plot", lambda *a, **k: PNG)
    monkeypatch.setattr(report, "_solve_rate_hist", lambda doc: None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _earlier_report(folder: Path) -> dict[str, str]:
    (folder / "rep").mkdir()
    for name, text in EARLIER.items():
        (folder / "rep" / name).write_text(text)
    return dict(EARLIER)


def _contents(folder: Path) -> dict[str, str] | None:
    return {p.name: p.read_text() for p in folder.iterdir()} if folder.is_dir() else None


def _interrupt(*a, **k):
    raise KeyboardInterrupt


def _at(where: str, monkeypatch) -> None:
    """Make the next rlvr-audit run raise KeyboardInterrupt at ``where``."""
    from analysis.audit import metrics, report

    real_replace, real_write = os.replace, report.atomic_write_text
    if where == "reading":
        monkeypatch.setattr(readers, "_read_table", _interrupt)
    elif where == "metrics":
        monkeypatch.setattr(metrics, "audit", _interrupt)
    elif where == "rendering":
        monkeypatch.setattr(report, "render", _interrupt)
    elif where == "writing":                                  # report.md written, report.html not
        def write(path, text):
            if Path(path).name == "report.html":
                raise KeyboardInterrupt
            return real_write(path, text)
        monkeypatch.setattr(report, "atomic_write_text", write)
    elif where in ("before moving the earlier report aside", "before the final rename", "after the final rename"):
        def replace(src, dst):
            src = Path(src)
            moving_aside = src.name == "rep"
            renaming_in = src.name.startswith(".rep.") and src.name.endswith(".tmp")
            if (where == "before moving the earlier report aside" and moving_aside) or \
                    (where == "before the final rename" and renaming_in):
                raise KeyboardInterrupt
            real_replace(src, dst)
            if where == "after the final rename" and renaming_in:
                raise KeyboardInterrupt
        monkeypatch.setattr(os, "replace", replace)
    elif where == "printing the summary":
        monkeypatch.setattr(audit_cli, "_summary", _interrupt)
    else:  # pragma: no cover
        raise AssertionError(where)


BEFORE_THE_REPORT = ["reading", "metrics", "rendering", "writing", "before moving the earlier report aside",
                     "before the final rename"]


@pytest.mark.parametrize("where", BEFORE_THE_REPORT)
def test_ctrl_c_before_the_report_is_in_place_leaves_the_earlier_report_and_no_temporary(run_dir, capsys,
                                                                                          monkeypatch, where):
    """Reproduced: Ctrl-C before the final rename left a hidden ``.rep.*.old`` folder holding the
    earlier report, and no report at ``--out``; the message did not say what was not written."""
    earlier = _earlier_report(run_dir)
    _at(where, monkeypatch)
    rc, out, err = _run(["run.csv", "--out", "rep"], capsys)
    assert sorted(p.name for p in run_dir.iterdir()) == ["rep", "run.csv"]      # no hidden folder
    assert _contents(run_dir / "rep") == earlier
    assert rc == 130 and out == ""
    assert err.strip().splitlines() == ["rlvr-audit: interrupted: no report written; 'rep' is left as it was"], err


@pytest.mark.parametrize("where", ["reading", "writing", "before the final rename"])
def test_ctrl_c_without_an_earlier_report_leaves_nothing(run_dir, capsys, monkeypatch, where):
    _at(where, monkeypatch)
    rc, _, err = _run(["run.csv", "--out", "rep", "--quiet"], capsys)
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.csv"]
    assert rc == 130
    assert err.strip().splitlines() == ["rlvr-audit: interrupted: no report written; 'rep' was not created"], err


@pytest.mark.parametrize("where", ["after the final rename", "printing the summary"])
def test_ctrl_c_once_the_report_is_in_place_says_so(run_dir, capsys, monkeypatch, where):
    _earlier_report(run_dir)
    _at(where, monkeypatch)
    rc, out, err = _run(["run.csv", "--out", "rep"], capsys)
    assert sorted(p.name for p in run_dir.iterdir()) == ["rep", "run.csv"]
    doc = json.loads((run_dir / "rep" / "report.json").read_text())
    assert [s["step"] for s in doc["steps"]] == list(range(6))               # the new report, whole
    assert rc == 130 and out == ""
    assert err.strip().splitlines() == ["rlvr-audit: interrupted: the report in 'rep' is complete; the summary "
                                        "was not printed"], err


def test_a_real_sigint_during_the_final_renames_completes_them(run_dir, capsys, monkeypatch):
    """SIGINT (not an exception raised in its place) while the earlier report is moved aside:
    the renames finish, then the interrupt stops the command."""
    _earlier_report(run_dir)
    real_replace = os.replace

    def replace(src, dst):
        if Path(src).name == "rep":                            # moving the earlier report aside
            os.kill(os.getpid(), signal.SIGINT)
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    rc, _, err = _run(["run.csv", "--out", "rep", "--quiet"], capsys)
    assert sorted(p.name for p in run_dir.iterdir()) == ["rep", "run.csv"]
    doc = json.loads((run_dir / "rep" / "report.json").read_text())
    assert [s["step"] for s in doc["steps"]] == list(range(6))               # the new report, whole
    assert rc == 130
    assert err.strip().splitlines() == ["rlvr-audit: interrupted: the report in 'rep' is complete"], err


def test_ctrl_c_after_the_command_is_done_changes_nothing(run_dir):
    """Reproduced: the console script interrupted while Python shut down (after the report and
    the summary) exited 0 with a KeyboardInterrupt traceback (from an atexit callback), or was
    killed by the signal (status -2) without a word."""
    root = Path(__file__).resolve().parents[2]
    code = ("import atexit, os, signal, sys\n"
            "from analysis import audit_cli\n"
            "from analysis.audit import report\n"
            "report._plot, report._solve_rate_hist = (lambda *a, **k: b'png'), (lambda doc: None)\n"  # no plots
            "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"   # runs last
            "sys.argv = ['rlvr-audit', 'run.csv', '--out', 'rep', '--quiet']\n"
            "audit_cli.main_exit()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=run_dir, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    assert sorted(q.name for q in run_dir.iterdir()) == ["rep", "run.csv"]
