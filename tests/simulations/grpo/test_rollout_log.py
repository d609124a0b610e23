"""The GRPO trainer's rollout log: ``RUN/rollouts/step_XXXXXX.parquet`` written every step,
its advantages those of the registry on its rewards, read back by the audit's reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from analysis.audit import readers
from rlvr_theory import advantages
from simulations.grpo import cli, trainer

TINY = dict(task="sort", difficulty=3, device="cpu", threads=1, quiet=True, batch_size=3, group_size=4,
            steps=2, log_kl=False, checkpoint_every=2, max_new_tokens=4)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, list[trainer.StepRecord]]:
    out = tmp_path_factory.mktemp("rollout_log") / "run"
    recs: list[trainer.StepRecord] = []
    trainer.train(trainer.GRPOConfig(out=str(out), advantage="asym_grpo", params={"delta": 0.5}, **TINY),
                  callback=recs.append)
    return out, recs


def test_one_file_per_step_with_the_documented_columns(run):
    out, recs = run
    files = sorted((out / "rollouts").glob("*.parquet"))
    assert [f.name for f in files] == ["step_000001.parquet", "step_000002.parquet"]
    for f, rec in zip(files, recs):
        t = pq.read_table(f)
        assert t.column_names == ["step", "prompt", "group", "rollout", "reward", "advantage", "length"]
        types = {n: str(t.schema.field(n).type) for n in t.column_names}
        assert types == {"step": "int64", "prompt": "string", "group": "int64", "rollout": "int64",
                         "reward": "double", "advantage": "double", "length": "int64"}
        d = t.to_pydict()
        B, G = rec.rewards.shape
        assert set(d["step"]) == {rec.step}
        assert d["group"] == [b for b in range(B) for _ in range(G)]
        assert d["rollout"] == [g for _ in range(B) for g in range(G)]
        prompts = np.array(d["prompt"]).reshape(B, G)
        assert (prompts == prompts[:, :1]).all() and all(p.startswith("sort:") for p in prompts[:, 0])
        np.testing.assert_array_equal(np.reshape(d["reward"], (B, G)), rec.rewards)
        np.testing.assert_array_equal(np.reshape(d["advantage"], (B, G)), rec.advantages)
        np.testing.assert_array_equal(np.reshape(d["length"], (B, G)), rec.lengths)


def test_logged_advantages_are_the_registry_on_the_logged_rewards(run):
    out, _ = run
    adv = advantages.get("asym_grpo", delta=0.5)
    for f in sorted((out / "rollouts").glob("*.parquet")):
        d = pq.read_table(f).to_pydict()
        r = np.reshape(d["reward"], (-1, TINY["group_size"]))
        np.testing.assert_array_equal(np.reshape(d["advantage"], r.shape), adv(r))


def test_the_audit_reader_reads_the_log(run):
    out, recs = run
    assert readers.detect_format(out) == "rlvr"
    r = readers.read(out)
    assert r.source["format"] == "rlvr" and r.source["grouping"] == "group-column" and r.group_size == 4
    assert r.source["n_files"] == 2
    f = r.frame
    assert list(f.columns) == list(readers.COLUMNS) and len(f) == 2 * 3 * 4
    for rec in recs:
        s = f[f["step"] == rec.step]
        np.testing.assert_array_equal(s["reward"].to_numpy().reshape(3, 4), rec.rewards)
        np.testing.assert_array_equal(s["advantage"].to_numpy().reshape(3, 4), rec.advantages)
        np.testing.assert_array_equal(s["length"].to_numpy().reshape(3, 4), rec.lengths)
        assert s["group"].tolist() == [b for b in range(3) for _ in range(4)]
    assert (f["split"] == "train").all()


def test_no_rollout_log_writes_none_and_is_a_cli_flag(tmp_path):
    out = tmp_path / "quiet"
    trainer.train(trainer.GRPOConfig(out=str(out), rollout_log=False, **{**TINY, "steps": 1, "checkpoint_every": 1}))
    assert (out / "metrics.jsonl").is_file() and not (out / "rollouts").exists()
    ap = cli.build_parser()
    args = ap.parse_args(["grpo", "--out", "x", "--no-rollout-log"])
    assert args.rollout_log is False
    assert ap.parse_args(["grpo", "--out", "x"]).rollout_log is None  # the default (on) applies
    assert trainer.GRPOConfig(out="x").rollout_log is True


def test_resume_rewrites_the_logs_after_the_checkpoint_as_the_uninterrupted_run(tmp_path):
    cfg = dict(TINY, steps=4, checkpoint_every=2)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "a"), **cfg))

    def crash(rec):
        if rec.step == 3:  # after checkpoint 2 and the rollout log of step 3
            raise RuntimeError("killed")

    b = tmp_path / "b"
    with pytest.raises(RuntimeError, match="killed"):
        trainer.train(trainer.GRPOConfig(out=str(b), **cfg), callback=crash)
    names = [f"step_{s:06d}.parquet" for s in (1, 2, 3, 4)]
    assert sorted(p.name for p in (b / "rollouts").iterdir()) == names[:3]
    (b / "rollouts" / ".step_000004.parquet.x1y2.tmp").write_bytes(b"half a file")  # a write that was killed
    trainer.train(trainer.GRPOConfig(out=str(b), resume=True, **{**cfg, "steps": 2}))  # nothing left to train
    assert sorted(p.name for p in (b / "rollouts").iterdir()) == names[:2]  # step 3 was after the checkpoint
    trainer.train(trainer.GRPOConfig(out=str(b), resume=True, **cfg))
    assert sorted(p.name for p in (b / "rollouts").iterdir()) == names
    for name in names:
        assert pq.read_table(tmp_path / "a" / "rollouts" / name).equals(pq.read_table(b / "rollouts" / name))
