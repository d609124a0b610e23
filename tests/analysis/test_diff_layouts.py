"""Folder layouts of training runs: TRL's ``checkpoint-N``, verl's ``global_step_N/actor/huggingface``
(merged) and ``global_step_N/actor`` (a Hugging Face directory itself); a verl FSDP shard
directory is refused with the command that merges it; a sharded index naming a missing file is
refused.  The checkpoints are real tiny ones (:mod:`tests.analysis.tiny_checkpoints`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis import checkpoints as ckp
from analysis import diff as wd
from analysis.diff import cli as diff_cli
from tests.analysis import tiny_checkpoints as tc

VERL_CMD = ("python -m verl.model_merger merge --backend fsdp --local_dir {a} --target_dir {a}/huggingface")


def _fsdp_actor(actor: Path) -> Path:
    """What verl's FSDP checkpoint manager leaves without ``hf_model`` in ``save_contents``: rank
    shards, extra state, and a ``huggingface`` folder with the config and tokenizer but no weights."""
    actor.mkdir(parents=True)
    for r in range(2):
        (actor / f"model_world_size_2_rank_{r}.pt").write_bytes(b"\0")
        (actor / f"optim_world_size_2_rank_{r}.pt").write_bytes(b"\0")
        (actor / f"extra_state_world_size_2_rank_{r}.pt").write_bytes(b"\0")
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 2}))
    return actor


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory mixing the layouts: checkpoint-5 (TRL), global_step_10/actor/huggingface
    (verl, merged), global_step_20/actor (a Hugging Face directory), and noise to ignore."""
    base, rl, _ = tc.arch_pair("qwen2")
    root = tmp_path_factory.mktemp("layouts")
    r = root / "run"
    r.mkdir()
    for step, rel in ((5, "checkpoint-5"), (10, "global_step_10/actor/huggingface"), (20, "global_step_20/actor")):
        d = tc.spectrum_matrix((tc.M_VOCAB, tc.M_HIDDEN), [1.0 + step / 10, 0.5], step)
        tc.plant_files(base, r / rel, {"lm_head.weight": d})
    (r / "latest_checkpointed_iteration.txt").write_text("20")   # verl writes this beside the steps
    (r / "tmp-checkpoint-30").mkdir()                             # a partial save
    (r / "global_step_40").mkdir()                                # a step being written: nothing yet
    return base, r


def test_series_recognises_trl_and_verl_layouts_in_step_order(run):
    _, r = run
    got = [Path(p).relative_to(r).as_posix() for p in wd.series(r)]
    assert got == ["checkpoint-5", "global_step_10/actor/huggingface", "global_step_20/actor"]


def test_steps_are_read_from_both_layouts():
    assert wd._step_of("runs/x/checkpoint-000200") == 200
    assert wd._step_of("ckpts/proj/exp/global_step_120/actor/huggingface") == 120
    assert wd._step_of("ckpts/proj/exp/global_step_7/actor") == 7
    assert wd._step_of("runs/sft/final") is None


def test_cli_series_over_mixed_layouts(run, tmp_path, capsys):
    base, r = run
    rc = diff_cli.main([str(base), "--series", str(r), "--out", str(tmp_path / "rep"), "--layers", "head", "--quiet"])
    assert rc == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [c["step"] for c in doc["checkpoints"]] == [5, 10, 20]
    assert doc["alignment"]["steps"] == [5, 10, 20]
    for c, step in zip(doc["checkpoints"], (5, 10, 20)):
        assert c["output_head"]["s1_s2"] == pytest.approx((1.0 + step / 10) / 0.5, rel=1e-5)


def test_a_global_step_directory_given_directly_is_resolved(run):
    base, r = run
    doc = wd.diff(str(base), [str(r / "global_step_10")], device="cpu", layers="head", progress=False)
    assert doc["checkpoints"][0]["path"] == str(r / "global_step_10" / "actor" / "huggingface")
    assert doc["checkpoints"][0]["step"] == 10


def test_verl_fsdp_shards_are_refused_with_the_merge_command(run, tmp_path):
    base, r = run
    run2 = tmp_path / "run2"
    shutil.copytree(r / "checkpoint-5", run2 / "checkpoint-5")
    actor = _fsdp_actor(run2 / "global_step_30" / "actor")
    cmd = VERL_CMD.format(a=actor)
    assert ckp.verl_merge_command(actor) == cmd
    with pytest.raises(ValueError, match="is a verl FSDP checkpoint") as ei:
        wd.series(run2)
    assert cmd in str(ei.value) and "model_world_size_2_rank_0.pt" in str(ei.value)
    for given in (actor, actor / "huggingface", actor.parent):        # the actor, its weightless hf folder, the step
        with pytest.raises(ValueError, match=r"^checkpoints\[0\]: .* is a verl FSDP checkpoint") as ei:
            wd.diff(str(base), [str(given)], device="cpu", progress=False)
        assert cmd in str(ei.value)


def test_cli_refuses_fsdp_shards_and_writes_no_report(run, tmp_path, capsys):
    base, _ = run
    actor = _fsdp_actor(tmp_path / "global_step_30" / "actor")
    rc = diff_cli.main([str(base), str(actor), "--out", str(tmp_path / "rep"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlvr-diff: error: RL 1: ")
    assert VERL_CMD.format(a=actor) in err
    assert not (tmp_path / "rep").exists()


def test_sharded_index_naming_a_missing_file_is_refused(tmp_path, capsys):
    base = tc.cached("llama_sharded_f32", lambda p: tc.build(p, "llama", sharded=True, layers=2, hidden=32, vocab=96))
    bad = tc.copy(base, tmp_path / "bad")
    idx = json.loads((bad / "model.safetensors.index.json").read_text())
    shard = sorted(set(idx["weight_map"].values()))[1]
    (bad / shard).unlink()
    with pytest.raises(ValueError, match=rf"^checkpoints\[0\]: shard '.*{shard}' listed in "
                                         r"model.safetensors.index.json is missing \(it should hold e.g. tensor"):
        wd.diff(str(base), [str(bad)], device="cpu", progress=False)
    rc = diff_cli.main([str(base), str(bad), "--out", str(tmp_path / "rep"), "--quiet"])
    assert rc == 2 and shard in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()
    # an index naming a file that never existed: the same refusal, by name
    bad2 = tc.copy(base, tmp_path / "bad2")
    idx["weight_map"][next(iter(idx["weight_map"]))] = "model-99999-of-99999.safetensors"
    (bad2 / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ValueError, match=r"model-99999-of-99999.safetensors' listed in .* is missing"):
        ckp.open_checkpoint(bad2, "base")
