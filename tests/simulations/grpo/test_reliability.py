"""``rlvr-train`` refuses faults cleanly: broken checkpoints and task/run files, output locations
(existing files, under a file, read-only, disk full), existing outputs and resumes, a diverging
run, and a run that cannot fit in memory.  Every refusal is one line on stderr (no traceback)
and leaves nothing half-written under a final name.

Most cases call :func:`simulations.grpo.cli.main` in the test process (the console script
``rlvr-train`` is ``runner.console`` over the same parser and runner); ``test_console_script``
runs the installed ``rlvr-train`` itself on representative cases.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, models
from tests.in_process import run_in_process

ROOT = Path(__file__).resolve().parents[3]
RUN = ["--steps", "2", "--batch-size", "2", "--group-size", "2", "--checkpoint-every", "1", "--threads", "1",
       "--device", "cpu", "--quiet"]
EVAL = ["--k", "1", "--n", "2", "--problems", "2", "--threads", "1", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def base(untrained_sort3) -> Path:
    """An untrained tiny-cpu checkpoint for 3-digit sorting (``conftest.untrained_sort3``)."""
    return untrained_sort3


@pytest.fixture(scope="module")
def run_dir(base, tmp_path_factory) -> Path:
    """A finished two-step GRPO run (checkpoints 1 and 2)."""
    out = tmp_path_factory.mktemp("rel") / "run"
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *RUN]) == 0
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _fails(argv, capsys, status=2) -> str:
    """Run ``rlvr-train argv``: the exit status and one line on stderr, no traceback; returns it."""
    assert cli.main([str(a) for a in argv]) == status
    err = capsys.readouterr().err
    assert err.startswith("rlvr-train: error: ") and "Traceback" not in err and err.count("\n") == 1, err
    return err


def _debris(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".old")) or ".tmp" in p.name)


# ------------------------------------------------------------------ broken inputs
def _truncate(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _nan_weight(d: Path) -> None:
    f = d / "model.safetensors"
    w = load_file(str(f))
    w["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(w, str(f), metadata={"format": "pt"})


def _task_json(text: str):
    return lambda d: (d / "task.json").write_text(text)


def _wide_tokenizer(d: Path) -> None:
    """A tokenizer with more ids than the model has embedding rows (the model cut to 10 rows)."""
    f = d / "model.safetensors"
    w = load_file(str(f))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        w[name] = w[name][:10].contiguous()
    save_file(w, str(f), metadata={"format": "pt"})
    cfg = json.loads((d / "config.json").read_text())
    cfg["vocab_size"] = 10
    (d / "config.json").write_text(json.dumps(cfg))


BROKEN = {
    "truncated": (_truncate, r"model.safetensors' is truncated or corrupt"),
    "nan": (_nan_weight, r"tensor 'model.layers.0.mlp.up_proj.weight' in file '.*model.safetensors' holds "
                         r"non-finite values: 1 NaN"),
    "task-empty": (_task_json("{}"), r"task.json': key 'name' must be a task name"),
    "task-list": (_task_json("[1, 2]"), r"task.json' must hold a JSON object with the task's 'name', got a list"),
    "task-not-json": (_task_json("{name: sort"), r"task.json' is not valid JSON"),
    "task-bad-difficulty": (_task_json('{"name": "sort", "difficulty": 99}'), r"task.json': difficulty must be"),
    "tokenizer-wider": (_wide_tokenizer, r"the tokenizer in '.*' has \d+ ids but the model's embedding has 10 rows"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_init_is_refused_naming_the_file(base, tmp_path, capsys, case):
    make, message = BROKEN[case]
    init = _copy(base, tmp_path / "init")
    make(init)
    err = _fails(["grpo", "--init", init, "--out", tmp_path / "run", *RUN], capsys)
    assert err.startswith("rlvr-train: error: --init: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_checkpoint_is_refused_by_eval(base, tmp_path, capsys, case):
    make, message = BROKEN[case]
    ckpt = _copy(base, tmp_path / "ckpt")
    make(ckpt)
    err = _fails(["eval", ckpt, *EVAL, "--out", tmp_path / "ev"], capsys)
    assert err.startswith("rlvr-train: error: checkpoint: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "ev").exists()


def test_eval_of_a_model_that_cannot_be_sampled(base, tmp_path, capsys):
    """Finite but huge weights give NaN probabilities: refused naming the checkpoint, not a RuntimeError."""
    ckpt = _copy(base, tmp_path / "ckpt")
    w = load_file(str(ckpt / "model.safetensors"))
    w["lm_head.weight"].fill_(3e38)   # every logit +-inf: NaN probabilities
    save_file(w, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    err = _fails(["eval", ckpt, *EVAL], capsys)
    assert "cannot be sampled" in err and "not finite" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", r"run_config.json' is not valid JSON"),
    ("[]", r"run_config.json' must hold a JSON object, got a list"),
    ('{"package_version": "1", "settings": 3}', r"key 'settings' must be a JSON object"),
    ("DROP lr", r"run_config.json' is incomplete: setting 'lr' is missing"),
    ("SET lr=abc", r"run_config.json': setting 'lr' has the wrong type \('abc'\)"),
    ("SET colour=1", r"run_config.json': unknown setting 'colour'"),
    ("KIND sft", r"run_config.json' records a 'sft' run, not a GRPO run"),
])
def test_resume_with_a_corrupt_run_config(run_dir, tmp_path, capsys, content, message):
    out = _copy(run_dir, tmp_path / "run")
    path = out / "run_config.json"
    doc = json.loads(path.read_text())
    if content.startswith("DROP "):
        del doc["settings"][content[5:]]
        content = json.dumps(doc)
    elif content.startswith("SET "):
        key, value = content[4:].split("=")
        doc["settings"][key] = value
        content = json.dumps(doc)
    elif content.startswith("KIND "):
        doc["kind"] = content[5:]
        content = json.dumps(doc)
    path.write_text(content)
    err = _fails(["grpo", "--out", out, "--resume", "--steps", "3", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: --resume: file "), err
    assert re.search(message, err), err
    assert not (out / "checkpoint-000003").exists()


def test_resume_with_a_corrupt_trainer_state(run_dir, tmp_path, capsys):
    out = _copy(run_dir, tmp_path / "run")
    (out / "checkpoint-000002" / "trainer_state.pt").write_bytes(b"garbage")
    err = _fails(["grpo", "--out", out, "--resume", "--steps", "3", "--quiet"], capsys)
    assert "resume: the trainer state in" in err and "checkpoint-000002" in err
    (out / "checkpoint-000002" / "model.safetensors").write_bytes(b"xx")
    err = _fails(["grpo", "--out", out, "--resume", "--steps", "3", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: --resume: ") and "is truncated or corrupt" in err


# ------------------------------------------------------------------ existing outputs and resumes
def test_resume_of_a_missing_or_foreign_directory(tmp_path, capsys):
    err = _fails(["grpo", "--out", tmp_path / "typo", "--resume", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: --out: ") and "does not exist" in err
    assert not (tmp_path / "typo").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    err = _fails(["grpo", "--out", tmp_path / "mine", "--resume", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: --out: ") and "not a GRPO run directory (no run_config.json)" in err
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_a_moved_run_is_resumed_bit_exactly(base, run_dir, tmp_path, capsys):
    """Resume a copy of the two-step run to step 3; a run trained straight to step 3 is identical."""
    moved = _copy(run_dir, tmp_path / "elsewhere" / "moved")
    assert cli.main(["grpo", "--out", str(moved), "--resume", "--steps", "3", "--quiet"]) == 0
    straight = tmp_path / "straight"
    assert cli.main(["grpo", "--init", str(base), "--out", str(straight), *RUN[:1], "3", *RUN[2:]]) == 0
    a, b = load_file(str(moved / "checkpoint-000003" / "model.safetensors")), \
        load_file(str(straight / "checkpoint-000003" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = lambda d: [{k: v for k, v in json.loads(line).items() if k not in ("step_time", "tokens_per_s",  # noqa: E731
                                                                              "rollout_time")}
                      for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert rows(moved) == rows(straight)


def test_outputs_of_others_are_refused_unless_overwrite(base, run_dir, tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for argv in (["sft", "--out", foreign, "--max-steps", "1", "--quiet"],
                 ["grpo", "--init", base, "--out", foreign, *RUN],
                 ["eval", base, *EVAL, "--out", foreign],
                 ["sweep", "--init", base, "--out", foreign, "--deltas", "1", "--no-fade", *RUN]):
        err = _fails(argv, capsys)
        assert "--out: " in err and "exists and is not empty" in err and "--overwrite" in err, err
    assert os.listdir(foreign) == ["notes.txt"]
    # an existing GRPO run: grpo points to --resume; sweep and eval refuse to write into it
    err = _fails(["grpo", "--init", base, "--out", run_dir, *RUN], capsys)
    assert "already exists and is not empty" in err and "--resume" in err
    before = sorted(os.listdir(run_dir))
    err = _fails(["sweep", "--init", base, "--out", run_dir, "--deltas", "1", "--no-fade", *RUN], capsys)
    assert "holds a run (run_config.json), not an output of this command" in err
    _fails(["eval", base, *EVAL, "--out", run_dir], capsys)
    assert sorted(os.listdir(run_dir)) == before
    # --overwrite replaces; --init inside the replaced directory is refused
    assert cli.main(["eval", str(base), *EVAL, "--out", str(foreign), "--overwrite"]) == 0
    capsys.readouterr()
    assert sorted(os.listdir(foreign)) == ["eval.json", "per_problem.csv"]
    assert cli.main(["eval", str(base), *EVAL, "--out", str(foreign)]) == 0   # its own output: replaced
    capsys.readouterr()
    inner = _copy(base, foreign / "init")
    err = _fails(["grpo", "--init", inner, "--out", foreign, "--overwrite", *RUN], capsys)
    assert "lies inside --out" in err and inner.is_dir()
    err = _fails(["grpo", "--out", run_dir, "--resume", "--overwrite", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: --overwrite: ")


def test_grpo_overwrite_replaces_a_run(base, run_dir, tmp_path):
    out = _copy(run_dir, tmp_path / "run")
    (out / "checkpoint-000009").mkdir()    # a stale checkpoint that a later resume must not see
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), "--overwrite", *RUN[:1], "1", *RUN[2:]]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-000001", "metrics.csv", "metrics.jsonl",
                                                      "rollouts", "run_config.json"]
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step_000001.parquet"]


# ------------------------------------------------------------------ output locations
def _outputs(base, target):
    return {"sft": ["sft", "--out", target, "--max-steps", "1", "--eval-every", "1", "--eval-problems", "2",
                    "--eval-samples", "1", "--batch-size", "2", "--device", "cpu", "--threads", "1", "--quiet"],
            "grpo": ["grpo", "--init", base, "--out", target, *RUN],
            "eval": ["eval", base, *EVAL, "--out", target],
            "sweep": ["sweep", "--init", base, "--out", target, "--deltas", "1", "--no-fade", "--eval-problems", "0",
                      *RUN]}


@pytest.mark.parametrize("command", ["sft", "grpo", "eval", "sweep"])
def test_bad_output_locations_are_refused_before_any_work(base, tmp_path, capsys, monkeypatch, command):
    (tmp_path / "file").write_text("x")
    err = _fails(_outputs(base, tmp_path / "file")[command], capsys)
    assert err.startswith("rlvr-train: error: --out: ") and "is an existing file" in err
    err = _fails(_outputs(base, tmp_path / "file" / "sub")[command], capsys)
    assert err.startswith("rlvr-train: error: --out: ") and "lies under the file" in err
    import rlvr_plumbing.io

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(rlvr_plumbing.io.tempfile, "mkstemp", read_only)
    err = _fails(_outputs(base, tmp_path / "ro")[command], capsys)
    assert err.startswith("rlvr-train: error: --out: cannot write in ") and "Read-only file system" in err
    assert sorted(os.listdir(tmp_path)) == ["file"]


@pytest.mark.parametrize("command", ["sft", "grpo", "eval"])
def test_disk_full_during_a_write_leaves_nothing_under_the_final_name(base, tmp_path, capsys, monkeypatch,
                                                                      command):
    import pandas as pd
    from transformers import modeling_utils

    def full(tensors, filename, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(filename))
    monkeypatch.setattr(modeling_utils, "safe_save_file", full)     # every model save (save_pretrained)
    monkeypatch.setattr(pd.DataFrame, "to_csv", lambda self, path, **k: full(None, path))   # eval's table
    out = tmp_path / "out"
    err = _fails(_outputs(base, out)[command], capsys, status=1)
    assert err.startswith("rlvr-train: error: No space left on device: '"), err
    # a GRPO run appears under --out with its first checkpoint (built in a temporary sibling until then)
    assert not out.exists()
    assert not _debris(tmp_path)


# ------------------------------------------------------------------ divergence and memory
@pytest.mark.parametrize("lr, first", [("1e30", 1), ("1e15", 2)])
def test_a_diverging_run_stops_naming_the_step_and_lr(base, tmp_path, capsys, lr, first):
    """--lr 1e30: an infinite head_delta_norm at step 1; --lr 1e15: finite weights after step 1 whose
    next-token probabilities are NaN at step 2 (checkpoint 1 written and kept)."""
    out = tmp_path / "run"
    args = ["grpo", "--init", base, "--out", out, "--entropy-coef", "0.1", "--lr", lr, "--log-every", "1",
            *RUN[:1], "4", *RUN[2:]]
    err = _fails(args, capsys)
    assert err.startswith(f"rlvr-train: error: diverged at step {first}: "), err
    assert f"lower --lr (now {float(lr):g})" in err, err
    step = first
    kept = [p.name for _, p in ck.list_checkpoints(out)]
    assert kept == [ck.checkpoint_name(s) for s in range(1, step)]
    if not kept:   # stopped before its first checkpoint: nothing under --out (tests/simulations/grpo/test_faults.py)
        assert "nothing was written to --out" in err and not out.exists() and not _debris(tmp_path), err
        return
    assert f"the last checkpoint, {kept[-1]}, is intact" in err
    for name in kept:   # every checkpoint written is finite and loadable
        models.check_weights(out / name)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, step))
    assert "inf" not in (out / "metrics.jsonl").read_text() and "nan" not in (out / "metrics.csv").read_text()


def test_sft_divergence_writes_nothing(tmp_path, capsys):
    out = tmp_path / "sft"
    err = _fails(["sft", "--task", "sort", "--difficulty", "3", "--out", out, "--lr", "1e30", "--max-steps", "3",
                  "--eval-every", "1", "--eval-problems", "2", "--eval-samples", "1", "--batch-size", "4",
                  "--device", "cpu", "--threads", "1", "--quiet"], capsys)
    assert err.startswith("rlvr-train: error: diverged at step ") and "--lr (now 1e+30)" in err
    assert not out.exists() and not _debris(tmp_path)


@pytest.mark.parametrize("argv, what", [
    (["grpo", "--group-size", "1000000000000"], "the GRPO run (--batch-size 2 x --group-size 1000000000000)"),
    (["grpo", "--batch-size", str(2**62)], "the GRPO run (--batch-size 4611686018427387904 x --group-size 8)"),
    (["sft", "--batch-size", "1000000000000"], "the SFT run (--batch-size 1000000000000"),
])
def test_a_run_that_cannot_fit_is_refused_with_the_numbers(base, tmp_path, capsys, argv, what):
    cmd, *rest = argv
    extra = ["--init", base] if cmd == "grpo" else []
    common = ["--batch-size", "2", "--device", "cpu", "--quiet"] if "--batch-size" not in rest else \
        ["--device", "cpu", "--quiet"]
    err = _fails([cmd, *extra, *common, *rest, "--out", tmp_path / "run"], capsys)
    assert what in err and "of memory on cpu;" in err and "available" in err, err
    assert not (tmp_path / "run").exists()


def test_eval_that_cannot_fit_is_refused(base, capsys):
    err = _fails(["eval", base, "--k", "1", "--n", str(10**12), "--problems", "1", "--batch-size", str(10**12),
                  "--device", "cpu", "--quiet"], capsys)
    assert "the evaluation (--batch-size 1000000000000" in err and "of memory on cpu" in err


# ------------------------------------------------------------------ the installed console script
def test_console_script(base, tmp_path):
    """The real ``rlvr-train``: a truncated --init; and (in process) --resume of a directory that
    does not exist."""
    exe = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "rlvr-train"
    if not exe.exists():
        exe = ROOT / ".venv" / "bin" / "rlvr-train"
    if not exe.exists():
        pytest.skip("rlvr-train is not installed")
    init = _copy(base, tmp_path / "init")
    _truncate(init)
    argv = ["grpo", "--init", str(init), "--out", str(tmp_path / "run"), *RUN]
    proc = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("rlvr-train: error: --init: file "), proc.stderr
    assert "Traceback" not in proc.stderr
    # the same code without a new interpreter (tests/in_process.py): --resume of a missing directory
    proc = run_in_process(cli.main, "grpo", "--out", tmp_path / "typo", "--resume", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("rlvr-train: error: --out: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["init"]


def test_a_sweep_started_again_resumes_its_runs(base, run_dir, tmp_path):
    from simulations.grpo import config

    sweep_dir = tmp_path / "sweep"
    _copy(run_dir, sweep_dir / "asym_grpo_delta1")
    kw = dict(out=str(sweep_dir), init=str(base), deltas=[1.0], fade=True, task="sort", difficulty=3, device="cpu")
    cfgs = config.SweepConfig(**kw).validate()
    assert cfgs["asym_grpo_delta1"].resume and not cfgs["fade"].resume
    cfgs = config.SweepConfig(**kw, overwrite=True).validate()      # replaced: every run starts afresh
    assert not any(c.resume for c in cfgs.values()) and all(c.overwrite for c in cfgs.values())
