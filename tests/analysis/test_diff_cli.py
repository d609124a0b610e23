"""rlvr-diff: the command line (in-process main(argv) and one real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.diff import cli as diff_cli
from tests.analysis import tiny_checkpoints as tc

ROOT = Path(__file__).resolve().parents[2]


def test_diff_writes_the_report_and_prints_a_summary(tmp_path, capsys):
    rl, _ = tc.qwen2_planted()
    capsys.readouterr()                                          # building output is not ours
    rc = diff_cli.main([str(tc.qwen2_base()), str(rl), "--out", str(tmp_path / "rep"), "--layers", "head",
                        "--top-k", "8", "--quiet"])
    assert rc == 0
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == ""                       # --quiet: nothing, no progress bar
    for f in ("report.md", "report.html", "report.json", "head_spectrum.png"):
        assert (tmp_path / "rep" / f).is_file()
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["settings"]["top_k"] == 8 and doc["settings"]["layers"] == "head"
    assert doc["checkpoints"][0]["output_head"]["s1_s2"] == pytest.approx(16, rel=1e-5)


def test_json_flag_prints_the_document(tmp_path, capsys, cheap_png):
    rl, _ = tc.qwen2_planted()
    rc = diff_cli.main([str(tc.qwen2_base()), str(rl), "--out", str(tmp_path / "rep"), "--json",
                        "--layers", "head", "--device", "cpu"])
    assert rc == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc["device"] == "cpu" and doc["checkpoints"][0]["path"] == str(rl)
    assert doc == json.loads((tmp_path / "rep" / "report.json").read_text())


def test_series_flag(tmp_path, capsys, cheap_png):
    base = tc.qwen2_base()
    run = tmp_path / "run"
    run.mkdir()
    for step in (20, 10):
        tc.plant(base, run / f"checkpoint-{step}", head=tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), [2.0, 1.0], step))
    rc = diff_cli.main([str(base), "--series", str(run), "--out", str(tmp_path / "rep"), "--layers", "head"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.index("checkpoint-10") < out.index("checkpoint-20")        # step order in the summary
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["alignment"]["steps"] == [10, 20]
    assert doc["alignment"]["output_head"]["u"][1] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("argv,msg", [
    (["{base}", "--out", "{out}"], "RL: give at least one RL checkpoint directory or --series"),
    (["{base}", "{tmp}/nope", "--out", "{out}"], "RL 1: '{tmp}/nope' does not exist"),
    (["{tmp}", "{base}", "--out", "{out}"], "BASE: '{tmp}' is not a Hugging Face checkpoint directory"),
    (["{base}", "{base}", "--out", "{out}", "--top-k", "1"], "--top-k must be an integer >= 2"),
    (["{base}", "{base}", "--out", "{out}", "--device", "tpu"], "device must be"),
    (["{base}", "--series", "{tmp}", "--out", "{out}"], "--series must hold checkpoint-<step> directories"),
])
def test_errors_exit_2_with_a_message(tmp_path, capsys, argv, msg):
    fill = {"base": str(tc.qwen2_base()), "out": str(tmp_path / "rep"), "tmp": str(tmp_path)}
    capsys.readouterr()
    rc = diff_cli.main([a.format(**fill) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("rlvr-diff: error: ") and msg.format(**fill) in err, err
    assert not (tmp_path / "rep").exists()


def test_usage_errors_exit_2(capsys):
    assert diff_cli.main([]) == 2
    assert "rlvr-diff: error:" in capsys.readouterr().err
    assert diff_cli.main(["a", "b"]) == 2                                   # --out is required
    assert diff_cli.main(["a", "b", "--out", "o", "--layers", "mlp"]) == 2
    assert diff_cli.main(["hidden-states", "ck", "--out", "o"]) == 2        # --rollouts is required
    assert "the following arguments are required: --rollouts" in capsys.readouterr().err
    assert diff_cli.main(["--help"]) == 0
    assert "hidden-states" in capsys.readouterr().out


def test_hidden_states_subcommand(tmp_path, capsys):
    f = tmp_path / "r.jsonl"
    rows = [{"prompt_ids": [5, 6, 7], "completion_ids": [8, 9, 10, 11], "correct": True},
            {"prompt_ids": [12, 13], "completion_ids": [14, 15, 16], "reward": 0.0},
            {"prompt_ids": [20], "completion_ids": [21, 22, 23, 24, 25], "reward": 1.0},
            {"prompt_ids": [30, 31], "completion_ids": [32, 33], "correct": False}]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    rc = diff_cli.main(["hidden-states", str(tc.qwen2_base()), "--rollouts", str(f), "--out", str(tmp_path / "hs"),
                        "--batch-size", "2"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "rho_perp" in out and "CLT" in out
    doc = json.loads((tmp_path / "hs" / "hidden_states.json").read_text())
    assert doc["n_tokens"] == {"success": 9, "failure": 5}
    assert doc["run"]["settings"]["batch_size"] == 2 and doc["run"]["settings"]["rollouts"] == str(f)
    assert sorted(doc["run"]) == ["device", "package_version", "seed", "settings", "threads"]
    assert doc["clt_baseline"] == pytest.approx((9 / 5) ** 0.5, rel=1e-12)
    f.write_text('{"prompt_ids": [1], "completion_ids": [2]}')
    rc = diff_cli.main(["hidden-states", str(tc.qwen2_base()), "--rollouts", str(f), "--out", str(tmp_path / "hs2")])
    assert rc == 2
    assert capsys.readouterr().err.startswith("rlvr-diff: error: --rollouts line 1 of ")


def test_console_entry_point_runs_as_a_program(tmp_path):
    """``python -m analysis.diff.cli`` (what the ``rlvr-diff`` script calls) exits 2 on an error."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "analysis.diff.cli", str(tmp_path / "no"), str(tmp_path / "no2"),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 2
    assert p.stderr.startswith("rlvr-diff: error: BASE: ")


def test_weights_is_the_default_subcommand_and_threads_is_recorded(tmp_path, capsys, cheap_png):
    """``rlvr-diff weights BASE RL`` = ``rlvr-diff BASE RL``; ``--threads`` goes through the
    runner and lands in the run block of report.json."""
    import torch

    rl, _ = tc.qwen2_planted()
    before = torch.get_num_threads()
    try:
        for argv, out in ([["weights"], tmp_path / "a"], [[], tmp_path / "b"]):
            rc = diff_cli.main(argv + [str(tc.qwen2_base()), str(rl), "--out", str(out), "--layers", "head",
                                       "--threads", "1", "--quiet"])
            assert rc == 0
        docs = [json.loads((d / "report.json").read_text()) for d in (tmp_path / "a", tmp_path / "b")]
    finally:
        torch.set_num_threads(before)
    for doc in docs:
        run = doc["run"]
        assert run["threads"] == 1 and run["settings"]["threads"] == 1 and run["settings"]["layers"] == "head"
        assert run["settings"]["out"] in (str(tmp_path / "a"), str(tmp_path / "b"))
        assert run["package_version"] and run["device"] == doc["device"]
    assert docs[0]["checkpoints"][0]["output_head"]["s1_s2"] == docs[1]["checkpoints"][0]["output_head"]["s1_s2"]
    assert diff_cli.main(["weights", "--help"]) == 0 and "--threads" in capsys.readouterr().out
    assert diff_cli.main(["hidden-states", "--help"]) == 0 and "--threads" in capsys.readouterr().out
    assert diff_cli.main([str(tc.qwen2_base()), str(rl), "--out", str(tmp_path / "c"), "--threads", "0"]) == 2
    assert "rlvr-diff: error: --threads must be an integer >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_python_dash_m_analysis_is_rlvr_diff(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "analysis", "hidden-states", str(tmp_path / "no"), "--rollouts",
                        str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 2 and p.stderr.startswith("rlvr-diff: error: "), p.stderr
    assert not (tmp_path / "o").exists()
