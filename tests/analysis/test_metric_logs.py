"""Readers of trainers' metric logs (analysis.audit.metric_logs): each format from files written
here in the trainer's own layout and names (TRL 1.16 / transformers 5.24 ``trainer_state.json``,
verl 0.9.1 ``FileLogger`` JSON lines, prime-rl's ``metrics.jsonl``, W&B exports, tables), the
values checked against the numbers written, and every refusal with its ``FILE:LINE``."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from analysis.audit import metric_logs as M
from analysis.audit.metric_logs import (
    METRIC_FORMATS,
    VOCABULARY,
    detect_metric_format,
    find_metric_files,
    is_metric_file,
    parse_metric_map,
    read_metrics,
)


# ---------------------------------------------------------------- writers in the trainers' layouts
def trl_entry(step, entropy, reward, **extra):
    """A GRPOTrainer log_history entry: Trainer's loss/grad_norm/learning_rate + GRPO's _metrics."""
    e = {"clip_ratio/high_max": 0.0, "clip_ratio/high_mean": 0.01 * step, "clip_ratio/low_mean": 0.002 * step,
         "clip_ratio/low_min": 0.0, "clip_ratio/region_mean": 0.012 * step, "completions/clipped_ratio": 0.25,
         "completions/max_length": 64.0 + step, "completions/mean_length": 30.0 + step, "entropy": entropy,
         "epoch": 0.0625 * step, "frac_reward_zero_std": 0.5, "grad_norm": 1.5, "learning_rate": 1e-6,
         "loss": 0.01, "num_tokens": 86.0 * step, "reward": reward, "reward_std": 0.4,
         "rewards/accuracy_reward/mean": reward, "step": step, "step_time": 0.3}
    e.update(extra)
    return e


def trl_eval(step, reward):
    return {"epoch": 0.0625 * step, "eval_entropy": 3.9, "eval_loss": 0.02, "eval_reward": reward,
            "eval_runtime": 1.5, "eval_samples_per_second": 5.3, "eval_steps_per_second": 0.7,
            "eval_completions/mean_length": 28.0, "step": step}


def trl_summary(step):
    return {"epoch": 0.0625 * step, "step": step, "total_flos": 0.0, "train_loss": 0.01, "train_runtime": 9.8,
            "train_samples_per_second": 3.2, "train_steps_per_second": 0.4}


def write_trainer_state(path, history, global_step):
    """transformers TrainerState.save_to_json: json.dumps(asdict(state), indent=2, sort_keys=True) + "\\n"."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
             "epoch": 0.0625 * global_step, "eval_steps": 2, "global_step": global_step,
             "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
             "log_history": history, "logging_steps": 1, "max_steps": 4, "num_input_tokens_seen": 0,
             "num_train_epochs": 1, "save_steps": 2, "stateful_callbacks": {}, "total_flos": 0.0,
             "train_batch_size": 8, "trial_name": None, "trial_params": None}
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def jsonl(path, rows, *, compact=False):
    """verl's FileLogger writes orjson (compact); prime-rl json.dumps (default separators)."""
    sep = (",", ":") if compact else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=sep) + "\n" for r in rows))
    return path


def line_of(path, needle, nth=0):
    """The 1-based line of the nth line containing ``needle``."""
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln]
    return hits[nth]


@pytest.fixture
def trl_run(tmp_path):
    """A TRL output folder: checkpoint-2, checkpoint-4, the final trainer_state.json, completions/."""
    h = [trl_entry(1, 0.9, 0.25), trl_entry(2, 0.8, 0.5), trl_eval(2, 0.3), trl_entry(3, 0.7, 0.5),
         trl_entry(4, 0.6, 0.75), trl_eval(4, 0.4)]
    write_trainer_state(tmp_path / "checkpoint-2" / "trainer_state.json", h[:3], 2)
    write_trainer_state(tmp_path / "checkpoint-4" / "trainer_state.json", h, 4)
    write_trainer_state(tmp_path / "trainer_state.json", h + [trl_summary(4)], 4)
    (tmp_path / "completions").mkdir()  # log_completions=True: rollouts, not metrics
    pd.DataFrame({"step": [1, 1], "prompt": ["a", "a"], "completion": ["x", "y"], "advantage": [1.0, -1.0],
                  "accuracy_reward": [1.0, 0.0]}).to_parquet(tmp_path / "completions" / "completions_00001.parquet")
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    return tmp_path


# ---------------------------------------------------------------- API
def test_vocabulary_and_formats():
    assert METRIC_FORMATS == ("trl", "verl", "prime-rl", "wandb", "table")
    for c in ("entropy", "kl", "ppo_kl", "clip_frac", "clip_frac_low", "clip_frac_high", "is_ratio_mean",
              "is_ratio_min", "is_ratio_max", "seq_is_ratio_mean", "seq_is_ratio_min", "seq_is_ratio_max", "mismatch_kl",
              "frac_zero_std", "reward_mean", "reward_std", "length_mean", "length_max", "length_clip_frac",
              "loss", "grad_norm", "lr"):
        assert c in VOCABULARY and VOCABULARY[c]
    for trainer_map in (M._TRL, M._VERL, M._PRIME):
        assert set(trainer_map) <= set(VOCABULARY)


# ---------------------------------------------------------------- TRL
def test_trl_output_folder(trl_run):
    files = find_metric_files(trl_run)
    assert sorted(str(f.relative_to(trl_run)) for f in files) == [
        "checkpoint-2/trainer_state.json", "checkpoint-4/trainer_state.json", "trainer_state.json"]
    m = read_metrics(trl_run)
    f = m.frame
    assert m.source["format"] == "trl" and m.source["trainer"] == "trl" and m.source["notes"] == []
    assert f["step"].tolist() == [1, 2, 3, 4] and f["step"].dtype == np.int64
    assert f["entropy"].tolist() == [0.9, 0.8, 0.7, 0.6]
    assert f["reward_mean"].tolist() == [0.25, 0.5, 0.5, 0.75]
    np.testing.assert_allclose(f["clip_frac"], [0.012, 0.024, 0.036, 0.048])
    np.testing.assert_allclose(f["clip_frac_low"], [0.002, 0.004, 0.006, 0.008])
    assert f["length_mean"].tolist() == [31.0, 32.0, 33.0, 34.0] and f["length_max"].tolist() == [65, 66, 67, 68]
    assert f["lr"].tolist() == [1e-6] * 4 and f["frac_zero_std"].tolist() == [0.5] * 4
    # eval entries -> val/<ours> (or val/<theirs>), merged into the train row of their step
    assert f["val/reward_mean"].isna().tolist() == [True, False, True, False]
    assert f["val/reward_mean"].tolist()[1::2] == [0.3, 0.4]
    assert f["val/length_mean"].tolist()[1] == 28.0 and f["val/loss"].tolist()[3] == 0.02
    assert m.source["columns"]["val/reward_mean"] == "eval_reward"
    assert m.source["columns"]["clip_frac_high"] == "clip_ratio/high_mean"
    # canonical columns in VOCABULARY order, then val/ sorted; all float64
    canon = [c for c in f.columns if c != "step" and not c.startswith("val/")]
    assert canon == [c for c in VOCABULARY if c in canon]
    vals = [c for c in f.columns if c.startswith("val/")]
    assert vals == sorted(vals) and list(f.columns) == ["step"] + canon + vals
    assert all(f[c].dtype == np.float64 for c in canon + vals)
    # no kl: TRL logs it only with beta != 0; the run summary (train_runtime) is skipped
    assert "kl" not in f and "train_loss" not in m.source["unmapped"]
    assert {"eval_runtime", "clip_ratio/high_max", "num_tokens", "step_time"} <= set(m.source["unmapped"])
    assert "val/runtime" not in f


def test_trl_importance_sampling_ratio_is_per_sequence_by_default(tmp_path):
    # TRL logs sampling/* with vLLM and vllm_importance_sampling_correction; its default mode is
    # "sequence_mask": one ratio per sequence, masked ones (above clip_max=3) counted as 0
    extra = {"sampling/importance_sampling_ratio/mean": 0.98, "sampling/importance_sampling_ratio/min": 0.0,
             "sampling/importance_sampling_ratio/max": 2.5, "sampling/sampling_logp_difference/mean": 0.01,
             "sampling/sampling_logp_difference/max": 0.9, "kl": 0.003}
    p = write_trainer_state(tmp_path / "trainer_state.json", [trl_entry(1, 0.9, 0.25, **extra)], 1)
    m = read_metrics(p)
    row = m.frame.iloc[0]
    assert (row["seq_is_ratio_mean"], row["seq_is_ratio_min"], row["seq_is_ratio_max"]) == (0.98, 0.0, 2.5)
    assert (row["logp_diff_mean"], row["logp_diff_max"], row["kl"]) == (0.01, 0.9, 0.003)
    assert "is_ratio_max" not in m.frame
    (note,) = m.source["notes"]
    assert "sequence_mask" in note and "metric_map" in note
    # a token-level run says so with a map
    m = read_metrics(p, metric_map="sampling/importance_sampling_ratio/max=is_ratio_max")
    assert m.frame["is_ratio_max"][0] == 2.5 and "seq_is_ratio_max" not in m.frame and m.source["notes"] == []


def test_trl_checkpoints_disagree(tmp_path):
    old = [trl_entry(1, 0.9, 0.25), trl_entry(2, 0.8, 0.5)]
    new = [trl_entry(1, 0.9, 0.25), trl_entry(2, 0.85, 0.5), trl_entry(3, 0.7, 0.5)]
    write_trainer_state(tmp_path / "checkpoint-2" / "trainer_state.json", old, 2)
    write_trainer_state(tmp_path / "checkpoint-3" / "trainer_state.json", new, 3)
    m = read_metrics(tmp_path)
    assert m.frame["entropy"].tolist() == [0.9, 0.85, 0.7]
    (note,) = m.source["notes"]
    assert "'entropy'" in note and "disagree" in note and "step 2" in note and "newest checkpoint" in note
    assert "checkpoint-2/trainer_state.json:" in note and "checkpoint-3/trainer_state.json:" in note


def test_trl_errors_name_file_and_line(tmp_path):
    h = [trl_entry(1, 0.9, 0.25), {"entropy": 0.5, "reward": 0.1}]
    p = write_trainer_state(tmp_path / "trainer_state.json", h, 2)
    line = line_of(p, "{", 2)  # the second entry of log_history (the document's "{" is the first)
    with pytest.raises(ValueError, match=rf"^metrics: .*trainer_state\.json:{line}: log_history entry without 'step'"):
        read_metrics(p)
    h = [trl_entry(1, 0.9, 0.25), trl_entry(2, "high", 0.5)]
    p = write_trainer_state(tmp_path / "trainer_state.json", h, 2)
    line = line_of(p, '"entropy": "high"')  # the line of the key, inside the entry
    with pytest.raises(ValueError, match=rf"trainer_state\.json:{line}: key 'entropy' \(mapped to 'entropy'\) must be "
                                         r"a number or null, got 'high'"):
        read_metrics(p)
    p = tmp_path / "other.json"
    p.write_text('{"log_historyy": []}')
    with pytest.raises(ValueError, match=r"other\.json:1: not a TRL/transformers trainer_state\.json"):
        read_metrics(p, format="trl")
    p.write_text('{\n  "log_history": [\n    {"step": 1,\n')
    with pytest.raises(ValueError, match=r"other\.json:\d+: not valid JSON"):
        read_metrics(p, format="trl")
    p = write_trainer_state(tmp_path / "e" / "trainer_state.json", [trl_summary(0)], 0)
    with pytest.raises(ValueError, match=r"trainer_state\.json:1: no metric rows"):
        read_metrics(p)


# ---------------------------------------------------------------- verl
def verl_rows():
    """verl's FileLogger: {"step": N, "data": metrics}; orjson writes NaN/inf as null."""
    return [
        {"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@4": 0.2, "val-aux/openai/gsm8k/reward/std@4": 0.1}},
        {"step": 1, "data": {"actor/entropy": 1.2, "actor/pg_clipfrac": 0.01, "actor/pg_clipfrac_lower": 0.001,
                             "actor/ppo_kl": 1e-4, "actor/kl_loss": 0.002, "actor/reward_kl_penalty": 0.5,
                             "actor/loss": 0.3, "actor/grad_norm": 0.9, "actor/lr": 1e-6,
                             "critic/score/mean": 0.4, "critic/rewards/mean": 0.39,
                             "response_length/mean": 200.0, "response_length/max": 512,
                             "response_length/clip_ratio": 0.05, "rollout_corr/rollout_is_mean": 1.01,
                             "rollout_corr/rollout_is_min": 0.5, "rollout_corr/rollout_is_max": 2.0,
                             "rollout_corr/rollout_is_seq_mean": 1.02, "rollout_corr/rollout_is_seq_max": 1.5,
                             "rollout_corr/k3_kl": 0.003, "rollout_corr/kl": 0.004, "training/global_step": 1,
                             "timing_s/gen": 12.5}},
        {"step": 2, "data": {"actor/entropy": 1.1, "actor/pg_clipfrac": 0.02, "actor/ppo_kl": None,
                             "critic/score/mean": 0.5, "response_length/mean": 210.0, "training/global_step": 2}},
        {"step": 2, "data": {"val-core/openai/gsm8k/reward/mean@4": 0.3}},
    ]


def test_verl_file_logger(tmp_path):
    p = jsonl(tmp_path / "my_project" / "exp1.jsonl", verl_rows(), compact=True)
    assert detect_metric_format([p]) == "verl" and find_metric_files(tmp_path / "my_project") == [p]
    m = read_metrics(tmp_path / "my_project")
    f = m.frame
    assert m.source["format"] == "verl" and f["step"].tolist() == [0, 1, 2]
    assert f["entropy"].tolist()[1:] == [1.2, 1.1] and np.isnan(f["entropy"][0])
    assert f["clip_frac"].tolist()[1:] == [0.01, 0.02] and f["clip_frac_dual"].tolist()[1] == 0.001
    assert f["ppo_kl"].tolist()[1] == 1e-4 and np.isnan(f["ppo_kl"][2])  # null -> NaN
    assert f["kl"].tolist()[1] == 0.002  # actor/kl_loss before actor/reward_kl_penalty
    assert f["reward_mean"].tolist()[1:] == [0.4, 0.5]  # critic/score/mean, not the KL-penalised rewards
    assert (f["is_ratio_mean"][1], f["is_ratio_min"][1], f["is_ratio_max"][1]) == (1.01, 0.5, 2.0)
    assert (f["seq_is_ratio_mean"][1], f["seq_is_ratio_max"][1]) == (1.02, 1.5)
    assert f["mismatch_kl"][1] == 0.003  # k3, as prime-rl's mismatch_kl
    assert (f["length_mean"][1], f["length_max"][1], f["length_clip_frac"][1]) == (200.0, 512.0, 0.05)
    assert (f["loss"][1], f["grad_norm"][1], f["lr"][1]) == (0.3, 0.9, 1e-6)
    assert f["val/openai/gsm8k/reward/mean@4"].tolist() == [0.2, None, 0.3] or \
        f["val/openai/gsm8k/reward/mean@4"].fillna(-1).tolist() == [0.2, -1, 0.3]
    assert f["val/openai/gsm8k/reward/std@4"].fillna(-1).tolist() == [0.1, -1, -1]
    assert {"actor/reward_kl_penalty", "critic/rewards/mean", "rollout_corr/kl", "training/global_step",
            "timing_s/gen"} <= set(m.source["unmapped"])
    assert m.source["notes"] == []


def test_verl_bypass_mode_names_and_kl_in_reward(tmp_path):
    rows = [{"step": 1, "data": {"actor/rollout_corr/rollout_is_mean": 0.99, "actor/rollout_corr/k3_kl": 0.01,
                                 "actor/reward_kl_penalty": 0.2, "actor/entropy": 1.0}}]
    m = read_metrics(jsonl(tmp_path / "e.jsonl", rows, compact=True))
    assert m.frame[["is_ratio_mean", "mismatch_kl", "kl"]].iloc[0].tolist() == [0.99, 0.01, 0.2]


def test_verl_errors(tmp_path):
    p = tmp_path / "exp.jsonl"
    p.write_text('{"step":1,"data":{"actor/entropy":1.0}}\n{"step":2,"data":{"actor/entropy":\n')
    with pytest.raises(ValueError, match=r"^metrics: .*exp\.jsonl:2: not a valid JSON line"):
        read_metrics(p)
    p.write_text('{"step":1,"data":{"actor/entropy":1.0}}\n\n{"data":{"actor/entropy":1.0},"stp":3}\n')
    with pytest.raises(ValueError, match=r"exp\.jsonl:3: record without a step"):
        read_metrics(p, format="verl")
    p.write_text('{"step":1,"data":{"actor/entropy":1.0}}\n{"step":2.5,"data":{"actor/entropy":1.0}}\n')
    with pytest.raises(ValueError, match=r"exp\.jsonl:2: the step must be an integer >= 0, got 2\.5"):
        read_metrics(p)
    p.write_text('{"step":-1,"data":{"actor/entropy":1.0}}\n')
    with pytest.raises(ValueError, match=r"exp\.jsonl:1: the step must be an integer >= 0, got -1"):
        read_metrics(p)
    p.write_text('{"step":1,"data":{"actor/entropy":1.0}}\n{"step":2,"data":{"actor/entropy":true}}\n')
    with pytest.raises(ValueError, match=r"exp\.jsonl:2: key 'actor/entropy' \(mapped to 'entropy'\) must be a "
                                         r"number or null, got True"):
        read_metrics(p)
    p.write_text('{"step":1,"data":{"actor/entropy":{"a":1}}}\n')
    with pytest.raises(ValueError, match=r"exp\.jsonl:1: key 'actor/entropy'"):
        read_metrics(p)
    # text, booleans and objects in columns that are not mapped are ignored
    p.write_text('{"step":1,"data":{"actor/entropy":"NaN","note":"hi","flag":true,"hist":[1,2],"d":{"a":1}}}\n'
                 '{"step":2,"data":{"actor/entropy":"Infinity"}}\n')
    m = read_metrics(p)
    assert np.isnan(m.frame["entropy"][0]) and m.frame["entropy"][1] == np.inf
    assert m.source["unmapped"] == ["note", "flag", "hist", "d"]


def test_verl_project_folder_with_two_experiments_is_refused(tmp_path):
    jsonl(tmp_path / "exp1.jsonl", verl_rows(), compact=True)
    jsonl(tmp_path / "exp2.jsonl", verl_rows(), compact=True)
    with pytest.raises(ValueError, match=r"several verl experiments \(exp1\.jsonl, exp2\.jsonl\)"):
        read_metrics(tmp_path)
    assert len(read_metrics([tmp_path / "exp1.jsonl"]).frame) == 3  # one named file is fine


# ---------------------------------------------------------------- prime-rl
def prime_rows():
    """{run_dir}/metrics.jsonl: FileMonitor rows {"step", "time", **metrics}, trainer and orchestrator
    appending to the same file; an eval row carries a float step (metrics["step"] = float(step))."""
    orch = {"train/agg/effective/agent/reward/mean": 0.5, "train/agg/effective/agent/reward/max": 1.0,
            "train/agg/effective/num_output_tokens/mean": 120.0, "train/agg/effective/num_output_tokens/max": 400.0,
            "train/agg/effective/agent/is_truncated/mean": 0.1, "train/agg/all/agent/solved_none": 0.25,
            "progress/tokens": 5000, "time/step": 3.2, "off_policy/mean": 0.5}
    trainer = {"entropy/all/mean": 0.8, "entropy/all/max": 5.0, "mismatch_kl/all/mean": 0.001,
               "mismatch_kl/all/max": 0.2, "is_masked/mean": 0.02, "is_masked_low/mean": 0.005,
               "is_masked_high/mean": 0.015, "loss/mean": -0.01, "kl_ent_ratio/mean": 0.00125}
    return [
        {"step": 1, "time": 1.0e9, "perf/throughput": 1000.0, "perf/mfu": 12.0},
        {"step": 1, "time": 1.0e9, "optim/lr": 1e-6, "optim/grad_norm": 0.5},
        {"step": 1, "time": 1.0e9, **trainer},
        {"step": 1, "time": 1.0e9, **orch},
        {"step": 2, "time": 1.0e9, **orch, "train/agg/effective/agent/reward/mean": 0.75},
        {"step": 2, "time": 1.0e9, **trainer, "entropy/all/mean": 0.7},
        {"step": 2.0, "time": 1.0e9, "eval/gsm8k/effective/agent/avg@4": 0.6, "eval/gsm8k/policy_version": 2.0},
    ]


def test_prime_rl_metrics_jsonl(tmp_path):
    run = tmp_path / "outputs" / "gsm8k--qwen--ab12"
    p = jsonl(run / "metrics.jsonl", prime_rows())
    (run / "rollouts" / "step_1" / "train" / "effective").mkdir(parents=True)
    (run / "rollouts" / "step_1" / "train" / "effective" / "traces.jsonl").write_text('{"step": 1, "task": "x"}\n')
    assert find_metric_files(run) == [p]
    m = read_metrics(run)
    f = m.frame
    assert m.source["format"] == "prime-rl" and f["step"].tolist() == [1, 2]
    assert f["entropy"].tolist() == [0.8, 0.7] and f["reward_mean"].tolist() == [0.5, 0.75]
    assert f["mismatch_kl"].tolist() == [0.001] * 2 and f["mismatch_kl_max"].tolist() == [0.2] * 2
    assert (f["clip_frac"][0], f["clip_frac_low"][0], f["clip_frac_high"][0]) == (0.02, 0.005, 0.015)
    assert (f["length_mean"][0], f["length_max"][0], f["length_clip_frac"][0]) == (120.0, 400.0, 0.1)
    assert (f["loss"][0], f["grad_norm"][0], f["lr"][0]) == (-0.01, 0.5, 1e-6)
    assert f["val/gsm8k/effective/agent/avg@4"].fillna(-1).tolist() == [-1, 0.6]
    assert m.source["columns"]["reward_mean"] == "train/agg/effective/agent/reward/mean"
    assert "time" not in m.source["unmapped"] and "train/agg/all/agent/solved_none" in m.source["unmapped"]
    assert m.source["notes"] == []


def test_prime_rl_several_agents_and_resumed_appends(tmp_path):
    rows = prime_rows()[:4]
    rows[3] = {**rows[3], "train/agg/effective/solver/reward/mean": 0.1}
    rows.append({"step": 1, "time": 2.0e9, "optim/lr": 1e-6, "optim/grad_norm": 0.7})  # a resume re-logs step 1
    m = read_metrics(jsonl(tmp_path / "metrics.jsonl", rows))
    assert "reward_mean" not in m.frame and m.frame["grad_norm"].tolist() == [0.7]
    agents, twice = m.source["notes"]
    assert agents.startswith("reward_mean: the log has several candidates") and "--metric-map" in agents
    assert "'optim/grad_norm': 1 step(s) logged twice" in twice and "kept the last one" in twice
    assert "metrics.jsonl:2" in twice and "metrics.jsonl:5" in twice
    m = read_metrics(tmp_path / "metrics.jsonl", metric_map="train/agg/effective/solver/reward/mean=reward_mean")
    assert m.frame["reward_mean"].tolist() == [0.1] and len(m.source["notes"]) == 1


# ---------------------------------------------------------------- W&B
def test_wandb_panel_csv_export_of_a_trl_run(tmp_path):
    # the UI's "Export CSV" of panels plotted against train/global_step (TRL's define_metric)
    p = tmp_path / "wandb_export.csv"
    p.write_text('"train/global_step","grpo-run-7 - train/entropy","grpo-run-7 - train/entropy__MIN",'
                 '"grpo-run-7 - train/entropy__MAX","grpo-run-7 - train/reward","grpo-run-7 - eval/reward"\n'
                 '1,0.9,0.9,0.9,0.25,\n2,0.8,0.8,0.8,0.5,0.3\n3,0.7,0.7,0.7,NaN,\n')
    assert detect_metric_format([p]) == "wandb"
    m = read_metrics(p)
    f = m.frame
    assert m.source["format"] == "wandb" and m.source["trainer"] == "trl"
    assert f["step"].tolist() == [1, 2, 3] and f["entropy"].tolist() == [0.9, 0.8, 0.7]
    assert f["reward_mean"].fillna(-1).tolist() == [0.25, 0.5, -1]
    assert f["val/reward_mean"].fillna(-1).tolist() == [-1, 0.3, -1]
    assert m.source["columns"]["entropy"] == "train/entropy"
    assert m.source["unmapped"] == ["train/entropy__MIN", "train/entropy__MAX"]
    assert not any("global step" in n for n in m.source["notes"])
    # plotted against W&B's Step (its _step): the steps are not TRL's, and a note says so
    p.write_text(p.read_text().replace('"train/global_step"', '"Step"'))
    m = read_metrics(p)
    assert m.frame["entropy"].tolist() == [0.9, 0.8, 0.7]
    assert any("not TRL's global step" in n for n in m.source["notes"])


def test_wandb_history_duplicate_steps_merge(tmp_path):
    # run.history() of a TRL run: _step counts wandb.log calls; train/global_step is the step;
    # train and eval logs of one step are separate rows; a completions table row has no step
    rows = [
        {"_step": 0, "_runtime": 3.0, "_timestamp": 1.7e9, "train/global_step": 1, "train/entropy": 0.9,
         "train/reward": 0.25, "train/loss": 0.1, "train/learning_rate": 1e-6},
        {"_step": 1, "_runtime": 4.0, "_timestamp": 1.7e9, "completions": {"_type": "table-file", "path": "x"}},
        {"_step": 2, "_runtime": 5.0, "_timestamp": 1.7e9, "train/global_step": 2, "train/entropy": 0.8,
         "train/reward": 0.5},
        {"_step": 3, "_runtime": 6.0, "_timestamp": 1.7e9, "train/global_step": 2, "eval/reward": 0.3,
         "train/entropy": None, "eval/runtime": 1.0},
        {"_step": 4, "_runtime": 7.0, "_timestamp": 1.7e9, "train/global_step": 2, "train/reward": 0.55},
    ]
    p = jsonl(tmp_path / "history.jsonl", rows)
    assert is_metric_file(p) and detect_metric_format([p]) == "wandb"
    m = read_metrics(p)
    f = m.frame
    assert f["step"].tolist() == [1, 2]
    assert f["entropy"].tolist() == [0.9, 0.8]  # the empty value does not erase the logged one
    assert f["reward_mean"].tolist() == [0.25, 0.55]  # two different values: the last one, and a note
    assert f["val/reward_mean"].fillna(-1).tolist() == [-1, 0.3] and "val/runtime" not in f
    (note,) = [n for n in m.source["notes"] if "twice" in n]
    assert "'train/reward'" in note and "step 2" in note and "history.jsonl:3" in note and "history.jsonl:5" in note
    assert "_runtime" not in m.source["unmapped"] and "completions" in m.source["unmapped"]


def test_wandb_history_csv_of_a_verl_run(tmp_path):
    df = pd.DataFrame({"_step": [1, 2, 2], "_runtime": [1.0, 2.0, 2.5], "actor/entropy": [1.2, 1.1, np.nan],
                       "critic/score/mean": [0.4, 0.5, np.nan], "val-core/gsm8k/acc/mean@1": [np.nan, np.nan, 0.7]})
    df.to_csv(tmp_path / "history.csv")  # with pandas' index column
    m = read_metrics(tmp_path / "history.csv")
    assert m.source["format"] == "wandb" and m.source["trainer"] == "verl"
    assert m.frame["step"].tolist() == [1, 2] and m.frame["entropy"].tolist() == [1.2, 1.1]
    assert m.frame["val/gsm8k/acc/mean@1"].fillna(-1).tolist() == [-1, 0.7]


def test_wandb_export_of_several_runs_is_refused(tmp_path):
    p = tmp_path / "export.csv"
    p.write_text("Step,run-a - train/entropy,run-b - train/entropy\n1,0.5,0.6\n")
    with pytest.raises(ValueError, match=r"export\.csv:1: the export holds several runs \(run-a, run-b\)"):
        read_metrics(p)


# ---------------------------------------------------------------- table and metric_map
def test_table_with_metric_map(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("global_step,my_entropy,acc,kl,notes\n0,0.9,0.1,0.01,start\n1,0.8,0.2,0.02,\n2,,0.3,Infinity,x\n")
    assert detect_metric_format([p]) == "table"
    m = read_metrics(p, metric_map="my_entropy=entropy,acc=val/acc")
    f = m.frame
    assert list(f.columns) == ["step", "entropy", "kl", "val/acc"]  # kl: named in our vocabulary
    assert f["entropy"].fillna(-1).tolist() == [0.9, 0.8, -1] and f["kl"].tolist() == [0.01, 0.02, np.inf]
    assert f["val/acc"].tolist() == [0.1, 0.2, 0.3]
    assert m.source["columns"] == {"entropy": "my_entropy", "kl": "kl", "val/acc": "acc"}
    assert m.source["unmapped"] == ["notes"]
    # without the map only our names are taken; the others are left out
    m = read_metrics(p)
    assert list(m.frame.columns) == ["step", "kl"] and m.source["unmapped"] == ["my_entropy", "acc", "notes"]
    # a map overrides the built-in names of a trainer's format
    p2 = jsonl(tmp_path / "e.jsonl", verl_rows(), compact=True)
    m = read_metrics(p2, metric_map=["critic/rewards/mean=reward_mean", "actor/reward_kl_penalty=kl"])
    assert m.frame["reward_mean"][1] == 0.39 and m.frame["kl"][1] == 0.5
    assert "critic/score/mean" in m.source["unmapped"] and "actor/kl_loss" in m.source["unmapped"]


def test_table_errors(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("step,my_entropy\n0,0.9\n1,lots\n")
    with pytest.raises(ValueError, match=r"^metrics: .*log\.csv:3: key 'my_entropy' \(mapped to 'entropy'\) must be "
                                         r"a number or null, got 'lots'"):
        read_metrics(p, metric_map="my_entropy=entropy")
    with pytest.raises(ValueError, match=r"none of the metrics of .*log\.csv is one we know \(its metrics: "
                                         r"my_entropy\); name them with metric_map"):
        read_metrics(p)
    with pytest.raises(ValueError, match=r"^metrics: metric_map names 'entropie', which is not a metric of "
                                         r".*log\.csv; its metrics are: my_entropy"):
        read_metrics(p, metric_map="entropie=entropy")
    p.write_text("step,my_entropy\n0,0.9\n,0.8\n")
    with pytest.raises(ValueError, match=r"log\.csv:3: record without a step"):
        read_metrics(p, metric_map="my_entropy=entropy")
    p.write_text("step,my_entropy\n0,0.9\n1,0.8,7\n")
    with pytest.raises(ValueError, match=r"log\.csv:3: not a readable CSV row"):
        read_metrics(p, metric_map="my_entropy=entropy")
    p.write_text("step,my_entropy\n0,0.9\nten,0.8\n")
    with pytest.raises(ValueError, match=r"log\.csv:3: the step must be an integer >= 0, got 'ten'"):
        read_metrics(p, metric_map="my_entropy=entropy")
    p.write_text("step,entropy\n")
    with pytest.raises(ValueError, match=r"log\.csv:1: no metric rows"):
        read_metrics(p)
    q = tmp_path / "log.jsonl"
    q.write_text("")
    with pytest.raises(ValueError, match=r"log\.jsonl:1: no metric rows"):
        read_metrics(q, format="table")


def test_parse_metric_map():
    assert parse_metric_map(None) == {} and parse_metric_map("") == {}
    assert parse_metric_map("a=entropy, b = val/acc ,") == {"a": "entropy", "b": "val/acc"}
    assert parse_metric_map(["a=kl,b=lr", "c=loss"]) == {"a": "kl", "b": "lr", "c": "loss"}
    assert parse_metric_map({"x": "grad_norm"}) == {"x": "grad_norm"}
    assert parse_metric_map("weird=name=kl") == {"weird=name": "kl"}
    for bad, msg in [("a", r"'a' is not THEIRS=OURS"), ("a=entropie", r"'entropie' \(in 'a=entropie'\) is not one"),
                     ("a=val/", r"is not one of our columns"), ("=kl", r"names no column"),
                     ("a=kl,a=lr", r"'a' is mapped twice"), ("a=kl,b=kl", r"'a' and 'b' both map to 'kl'"),
                     (3, r"must be 'theirs=ours,\.\.\.'")]:
        with pytest.raises(ValueError, match=r"^metric_map" + r".*" + msg):
            parse_metric_map(bad)


# ---------------------------------------------------------------- finding files, formats, steps
def test_find_metric_files_ignores_rollouts(tmp_path):
    # verl rollout dumps, a rollout table, TRL completions, prime-rl traces: no metric logs
    jsonl(tmp_path / "3.jsonl", [{"input": "q", "output": "o", "gts": "1", "score": 1.0, "step": 3, "uid": "u"}])
    (tmp_path / "t.csv").write_text("step,group,reward\n1,0,1\n")
    (tmp_path / "completions").mkdir()
    (tmp_path / "completions" / "completions_00001.parquet").write_bytes(b"PAR1")
    (tmp_path / "README.md").write_text("my run")
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    assert find_metric_files(tmp_path) == [] and find_metric_files([tmp_path / "t.csv"]) == []
    with pytest.raises(ValueError, match=r"^PATH: '.*nope' does not exist"):
        find_metric_files(tmp_path / "nope")
    with pytest.raises(ValueError, match=r"^metrics: no metric logs \(trainer_state\.json"):
        read_metrics(tmp_path)
    with pytest.raises(ValueError, match=r"cannot tell the metric-log format of '.*t\.csv'"):
        read_metrics(tmp_path / "t.csv")


def test_mixed_formats_are_refused(tmp_path, trl_run):
    v = jsonl(tmp_path / "v" / "exp.jsonl", verl_rows(), compact=True)
    with pytest.raises(ValueError, match=r"mix formats: .*trl: 3 files .*verl: 1 file \(.*exp\.jsonl\)"):
        read_metrics([trl_run, v])
    with pytest.raises(ValueError, match=r"mix formats"):
        detect_metric_format([str(v), str(trl_run / "trainer_state.json")])


def test_steps_filter(trl_run):
    m = read_metrics(trl_run, steps=(2, 3))
    assert m.frame["step"].tolist() == [2, 3] and m.frame["entropy"].tolist() == [0.8, 0.7]
    assert read_metrics(trl_run, steps=(None, 1)).frame["step"].tolist() == [1]
    assert read_metrics(trl_run, steps=(4, None)).frame["step"].tolist() == [4]
    with pytest.raises(ValueError, match=r"no metric rows in the steps 7: of .* \(its steps: 1\.\.4\)"):
        read_metrics(trl_run, steps=(7, None))
    with pytest.raises(ValueError, match=r"steps must be \(first, last\)"):
        read_metrics(trl_run, steps=(3, 2))


def test_format_given_and_repr(trl_run, tmp_path):
    m = read_metrics(trl_run, format="trl", arg="--metrics")
    assert re.match(r"MetricLog\('trl', 4 steps \(steps 1\.\.4\), metrics: entropy, ", repr(m))
    p = jsonl(tmp_path / "e.jsonl", verl_rows(), compact=True)
    with pytest.raises(ValueError, match=r"^--metrics: .*e\.jsonl:1: a TRL metric log is a trainer_state\.json"):
        read_metrics(p, format="trl", arg="--metrics")
    with pytest.raises(ValueError, match=r"format must be one of"):
        read_metrics(p, format="tensorboard")


def test_the_adapters_own_metrics_are_read(tmp_path):
    # integrations.trl logs rlvr/* masses and rlvr/token/* diagnostics into TRL's log_history
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": [
        {"step": 1, "entropy": 1.0, "rlvr/m_S": 0.25, "rlvr/m_F": 0.5, "rlvr/sign_ratio": 0.5,
         "rlvr/token/cov_logp_adv": 0.03},
        {"step": 2, "entropy": 0.9, "rlvr/m_S": 0.2, "rlvr/m_F": 0.4, "rlvr/sign_ratio": 0.5,
         "rlvr/token/cov_logp_adv": 0.02}]}))
    f = M.read_metrics(tmp_path).frame
    assert f["m_S"].tolist() == [0.25, 0.2] and f["sign_ratio"].tolist() == [0.5, 0.5]
    assert f["cov_logp_adv"].tolist() == [0.03, 0.02]
