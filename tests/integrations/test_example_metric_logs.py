"""The committed example metric logs of real CPU runs (examples/make_metric_logs.py) parse and hold
the keys their trainers write: TRL's output folder (``trainer_state.json``, checkpoints' state files,
completions tables) and verl's FileLogger JSONL.  Reads files only: no TRL or verl import."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

LOGS = Path(__file__).resolve().parents[2] / "examples" / "audit_logs"
TRL = LOGS / "trl_run"
VERL = LOGS / "verl_metrics" / "asym_grpo_delta0.5_cpu.jsonl"
STEPS = 40
CHECKPOINTS = (20, 40)

TRL_STEP_KEYS = {"step", "epoch", "loss", "grad_norm", "learning_rate", "entropy", "reward", "reward_std",
                 "frac_reward_zero_std", "rewards/starts_with_digit/mean", "completions/mean_length",
                 "rlvr/m_S", "rlvr/m_F", "rlvr/sign_ratio", "rlvr/frac_all_correct", "rlvr/frac_all_wrong",
                 "rlvr/abs_adv_sum", "rlvr/solve_rate"}
VERL_KEYS = {"actor/entropy", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/kl_loss", "actor/grad_norm",
             "actor/lr", "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/advantages/min",
             "critic/advantages/max", "critic/returns/mean", "response_length/mean", "response_length/clip_ratio",
             "prompt_length/mean", "rollout_corr/kl", "rollout_corr/rollout_is_mean",
             "training/rollout_probs_diff_mean", "training/global_step", "training/epoch", "timing_s/step",
             "timing_s/gen", "timing_s/update_actor", "perf/total_num_tokens", "perf/throughput", "global_seqlen/mean"}
VERL_DROPPED = {"perf/mfu/actor_infer", "perf/mfu/actor", "actor/perf/max_memory_allocated_gb",
                "actor/perf/max_memory_reserved_gb"}


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_trl_folder_holds_logs_only_and_is_small():
    files = [p for p in TRL.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} == {".json", ".parquet"}  # no weights, optimizer or args
    assert sum(p.stat().st_size for p in files) < 1_000_000


def test_trl_trainer_state():
    state = _json(TRL / "trainer_state.json")
    assert state["global_step"] == state["max_steps"] == STEPS and state["logging_steps"] == 1
    steps = [h for h in state["log_history"] if "loss" in h]
    assert [h["step"] for h in steps] == list(range(1, STEPS + 1))
    for h in steps:
        assert TRL_STEP_KEYS <= set(h), TRL_STEP_KEYS - set(h)
        assert all(isinstance(h[k], (int, float)) and math.isfinite(h[k]) for k in TRL_STEP_KEYS)
    assert steps[0]["entropy"] - steps[-1]["entropy"] > 0.5  # the entropy series moves
    assert "train_runtime" in state["log_history"][-1]


@pytest.mark.parametrize("n", CHECKPOINTS)
def test_trl_checkpoints(n):
    final = _json(TRL / "trainer_state.json")["log_history"]
    ckpt = _json(TRL / f"checkpoint-{n}" / "trainer_state.json")
    assert ckpt["global_step"] == n and ckpt["log_history"] == final[:n]
    rlvr = _json(TRL / f"checkpoint-{n}" / "rlvr_state.json")
    assert rlvr["name"] == "asym_grpo" and rlvr["generation_batches"] == STEPS


def test_trl_completions_tables():
    tables = sorted((TRL / "completions").glob("completions_*.parquet"))
    assert [p.name for p in tables] == [f"completions_{s:05d}.parquet" for s in range(1, STEPS + 1)]
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    for s in (1, STEPS):
        df = pd.read_parquet(TRL / "completions" / f"completions_{s:05d}.parquet")
        assert list(df.columns) == ["step", "prompt", "completion", "starts_with_digit", "advantage"]
        assert len(df) == 32 and (df["step"] == s).all()
        assert set(df["starts_with_digit"]) <= {0.0, 1.0}


def test_verl_file_logger_lines():
    lines = VERL.read_text(encoding="utf-8").splitlines()
    assert len(lines) == STEPS
    keys = None
    for i, line in enumerate(lines, start=1):
        rec = json.loads(line)
        assert set(rec) == {"step", "data"} and rec["step"] == i
        data = rec["data"]
        assert VERL_KEYS <= set(data), VERL_KEYS - set(data)
        assert not VERL_DROPPED & set(data)
        assert data["training/global_step"] == i
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in data.values())
        keys = set(data) if keys is None else keys
        assert set(data) == keys  # the same keys on every step
    first, last = json.loads(lines[0])["data"], json.loads(lines[-1])["data"]
    assert first["actor/entropy"] - last["actor/entropy"] > 0.5
    assert (LOGS / "verl_metrics" / "README.md").is_file()
