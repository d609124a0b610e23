"""``rlvr-train`` faults found after the reliability pass (``test_reliability.py``):

* ``eval --nll-rare-base`` / ``--nll-rare-set``: every refusal names the flag as typed, the file
  and what was expected (never ``base:``, never numpy's advice to load with ``allow_pickle``);
* ``grpo`` on a full disk, or diverging, before its first checkpoint leaves nothing under
  ``--out`` (the run folder is built in a hidden temporary sibling and renamed into place with
  its first checkpoint, :func:`rlvr_plumbing.io.atomic_dir`), so a rerun to the same ``--out`` works.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, evaluate
from tests.simulations.grpo.test_reliability import RUN, _debris, _fails

EVAL = ["--k", "1", "--n", "1", "--problems", "2", "--threads", "1", "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module")
def base(untrained_sort3) -> Path:
    """An untrained tiny-cpu checkpoint for 3-digit sorting (``conftest.untrained_sort3``)."""
    return untrained_sort3


# ------------------------------------------------------------ --nll-rare-base / --nll-rare-set
def _rare_set(tmp: Path) -> Path:
    """A valid rare-correct set file (a tiny hand-made one: the format, not the contents, matters)."""
    import torch

    ids = [torch.ones((1, 2), dtype=torch.long) for _ in range(4)]
    return evaluate.RareSet("base", ["sort:21="], ["12"], *ids, np.array([1.5]), 0.5, 2, 4).save(tmp / "rare.npz")


def _npz_without(key: str):
    def make(tmp: Path) -> Path:
        good = np.load(_rare_set(tmp))
        arrays = {k: good[k] for k in good.files if k != key}
        with open(tmp / "set.npz", "wb") as fh:
            np.savez(fh, **arrays)
        return tmp / "set.npz"
    return make


def _write(name: str, data: bytes):
    def make(tmp: Path) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name
    return make


def _truncated_npz(tmp: Path) -> Path:
    f = _rare_set(tmp)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return f


def _object_npz(tmp: Path) -> Path:
    """Every array of a set, 'meta' a pickled Python object (loading it would run pickle)."""
    good = np.load(_rare_set(tmp))
    arrays = {k: good[k] for k in good.files}
    arrays["meta"] = np.array([{"base": "x"}], dtype=object)
    with open(tmp / "obj.npz", "wb") as fh:
        np.savez(fh, **arrays)
    return tmp / "obj.npz"


def _bad_meta(tmp: Path) -> Path:
    good = np.load(_rare_set(tmp))
    arrays = {k: good[k] for k in good.files}
    arrays["meta"] = np.array("{not json")
    with open(tmp / "set.npz", "wb") as fh:
        np.savez(fh, **arrays)
    return tmp / "set.npz"


def _npy(tmp: Path) -> Path:
    np.save(tmp / "ids.npy", np.arange(3))
    os.replace(tmp / "ids.npy", tmp / "ids.npz")
    return tmp / "ids.npz"


def _a_directory(tmp: Path) -> Path:
    (tmp / "setdir").mkdir()
    return tmp / "setdir"


#: --nll-rare-set FILE that is not a rare-correct set: (how to make it, what the message says)
BAD_SETS = {
    "text": (_write("notes.npz", b"just some text\n"), r"is not a \.npz archive"),
    "empty": (_write("empty.npz", b""), r"is not a \.npz archive"),
    "truncated": (_truncated_npz, r"is not a \.npz archive|is truncated or corrupt"),
    "npy": (_npy, r"is not a \.npz archive"),
    "object-array": (_object_npz, r"holds Python objects"),
    "missing-key": (_npz_without("response_mask"), r"lacks the array 'response_mask'"),
    "bad-meta": (_bad_meta, r"array 'meta' must hold a JSON object"),
    "directory": (_a_directory, r"is a directory"),
}


@pytest.mark.parametrize("case", sorted(BAD_SETS))
def test_a_bad_nll_rare_set_is_refused_naming_the_flag_and_file(base, tmp_path, capsys, case):
    make, message = BAD_SETS[case]
    path = make(tmp_path)
    err = _fails(["eval", base, *EVAL, "--nll-rare-set", path], capsys)
    assert err.startswith("rlvr-train: error: --nll-rare-set: "), err
    assert str(path) in err and re.search(message, err), err
    assert "rare-correct set" in err, err                                  # what was expected
    assert "allow_pickle" not in err and "unsafely" not in err, err
    # the library refuses the same file the same way, under its own argument name
    with pytest.raises(ValueError, match=r"^path: "):
        evaluate.RareSet.load(path)


def test_a_saved_rare_set_still_loads(tmp_path):
    back = evaluate.RareSet.load(_rare_set(tmp_path))
    assert back.prompts == ["sort:21="] and back.responses == ["12"] and back.base_nll.tolist() == [1.5]


def _truncate(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


#: --nll-rare-base DIR that cannot give a set: (how to make it from the base's copy, message)
BAD_BASES = {
    "missing": (lambda d: _rmtree(d), r"does not exist \(expected a Hugging Face causal-LM checkpoint directory"),
    "a-file": (lambda d: (_rmtree(d), d.write_text("x")), r"is not a directory"),
    "not-a-model": (lambda d: (d / "config.json").unlink(), r"is not a model directory \(no config.json\)"),
    "truncated": (_truncate, r"model.safetensors' is truncated or corrupt"),
    "no-task": (lambda d: (d / "task.json").unlink(), r"has no task.json"),
    "solves-nothing": (lambda d: None, r"solved none of the 4 sampled responses"),
}


def _rmtree(d: Path) -> None:
    import shutil
    shutil.rmtree(d)


@pytest.mark.parametrize("case", sorted(BAD_BASES))
def test_a_bad_nll_rare_base_is_refused_naming_the_flag(base, tmp_path, capsys, case):
    import shutil

    make, message = BAD_BASES[case]
    rare_base = Path(shutil.copytree(base, tmp_path / "rare_base"))
    make(rare_base)
    out_set = tmp_path / "rare.npz"
    err = _fails(["eval", base, *EVAL, "--nll-rare-base", rare_base, "--nll-rare-set", out_set,
                  "--nll-rare-prompts", "2", "--nll-rare-samples", "2"], capsys)
    assert err.startswith("rlvr-train: error: --nll-rare-base: "), err
    assert str(rare_base) in err and re.search(message, err), err
    assert not err.startswith("rlvr-train: error: base:")
    assert not out_set.exists() and not _debris(tmp_path)


# ------------------------------------------------------------ grpo: nothing before the first checkpoint
def _no_space(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["first-file", "checkpoint"])
def test_grpo_on_a_full_disk_leaves_nothing_under_out(base, tmp_path, capsys, monkeypatch, where):
    """The disk is full at the run's first file (run_config.json) or at its first checkpoint's
    weights: one line naming the file under --out, exit 1, and no folder under --out."""
    from transformers import modeling_utils

    if where == "first-file":
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: _no_space())
    else:
        def full(tensors, filename, *a, **k):
            raise OSError(errno.ENOSPC, "No space left on device", str(filename))
        monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    out = tmp_path / "run"
    err = _fails(["grpo", "--init", base, "--out", out, *RUN], capsys, status=1)
    assert err.startswith("rlvr-train: error: No space left on device: '" + str(out) + os.sep), err
    assert (".tmp" not in err), err
    assert not out.exists(), sorted(os.listdir(out))
    assert sorted(os.listdir(tmp_path)) == []
    monkeypatch.undo()
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *RUN]) == 0   # the same --out, later
    assert [p.name for _, p in ck.list_checkpoints(out)] == ["checkpoint-000001", "checkpoint-000002"]


def test_grpo_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(base, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *RUN]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    from transformers import modeling_utils

    def full(tensors, filename, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(filename))
    monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    _fails(["grpo", "--init", base, "--out", out, "--overwrite", *RUN], capsys, status=1)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_a_run_diverging_before_its_first_checkpoint_leaves_nothing_and_the_out_is_reusable(base, tmp_path, capsys):
    """--lr 1e30 diverges at step 1: nothing under --out, advice that is true (no --resume, since
    there is nothing to resume), and the same --out takes a new run without --overwrite."""
    out = tmp_path / "run"
    args = ["grpo", "--init", base, "--out", out, "--entropy-coef", "0.1", "--lr", "1e30", *RUN]
    err = _fails(args, capsys)
    assert err.startswith("rlvr-train: error: diverged at step 1: "), err
    assert "--resume" not in err and "lower --lr (now 1e+30)" in err, err
    assert "nothing was written to --out" in err, err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == []
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *RUN]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]


def test_a_run_diverging_after_a_checkpoint_keeps_it_and_can_be_resumed(base, tmp_path, capsys):
    """--lr 1e15 diverges at step 2: checkpoint 1 stays (the run folder exists) and the advice
    names the checkpoint that a --resume would restart from."""
    out = tmp_path / "run"
    err = _fails(["grpo", "--init", base, "--out", out, "--entropy-coef", "0.1", "--lr", "1e15", "--log-every",
                  "1", *RUN[:1], "4", *RUN[2:]], capsys)
    assert err.startswith("rlvr-train: error: diverged at step 2: ") and "checkpoint-000001, is intact" in err, err
    assert [p.name for _, p in ck.list_checkpoints(out)] == ["checkpoint-000001"]
    assert not _debris(tmp_path) and not _debris(out)
    w = load_file(str(out / "checkpoint-000001" / "model.safetensors"))
    assert all(bool(t.isfinite().all()) for t in w.values())


def test_an_existing_run_without_a_checkpoint_gets_true_advice(base, tmp_path, capsys):
    """A run folder with run_config.json but no checkpoint (e.g. from an older version killed
    early): grpo to that --out says there is no checkpoint and how to start again."""
    out = tmp_path / "run"
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *RUN]) == 0
    for _, p in ck.list_checkpoints(out):
        _rmtree(p)
    err = _fails(["grpo", "--init", base, "--out", out, *RUN], capsys)
    assert "no checkpoint" in err and "--overwrite" in err, err
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), "--overwrite", *RUN]) == 0
    assert len(ck.list_checkpoints(out)) == 2
