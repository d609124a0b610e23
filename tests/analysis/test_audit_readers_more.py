"""The open-instruct and slime readers of ``rlvr-audit`` (:mod:`analysis.audit.readers`), on logs
written here in the trainers' exact layouts (``open_instruct/rl_utils.py`` ``_save_rollouts``;
slime's ``save_debug_rollout_data``), checked against values computed by hand."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from analysis import audit_cli
from analysis.audit import metrics, readers

#: rewards[step][prompt] of a run of 2 steps x 2 prompts x 3 rollouts (one all-zero group)
REWARDS = [[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]], [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]]]
#: response lengths of the same rollouts
LENGTHS = [[[3, 5, 7], [2, 4, 6]], [[8, 1, 9], [4, 4, 5]]]
S2 = math.sqrt(2.0)
#: open-instruct's "standard" advantages of REWARDS ((r - mean)/(pop. std + 1e-8)), by hand:
#: {1,0,0}: mean 1/3, std sqrt(2)/3; {1,1,0}: mean 2/3, std sqrt(2)/3; {0,0,0}: 0
ADV = [[[S2, -1 / S2, -1 / S2], [1 / S2, 1 / S2, -S2]], [[0.0, 0.0, 0.0], [1 / S2, -S2, 1 / S2]]]


# ---------------------------------------------------------------------------------- writers
def _oi_line(step: int, p: int, s: int, *, nan_logprob: bool = False) -> str:
    """One rollout as ``dataclasses.asdict(RolloutRecord)``, the key order on disk."""
    n = LENGTHS[step][p][s]
    r = REWARDS[step][p]
    mean, std = sum(r) / 3, float(np.std(r))
    rec = {"step": step, "sample_idx": 3 * p + s, "prompt_idx": p, "prompt_tokens": [1, 40 + p, 7],
           "response_tokens": list(range(100, 100 + n)), "reward": r[s], "advantage": (r[s] - mean) / (std + 1e-8),
           "finish_reason": "stop", "dataset": "gsm8k", "ground_truth": ["4"],
           "request_info": {"num_calls": 0, "timeouts": False, "tool_errors": "", "tool_outputs": "",
                            "tool_runtimes": 0.0, "tool_calleds": False, "tool_call_stats": [], "rollout_state": {}},
           "logprobs": [float("nan") if nan_logprob else -0.5] + [-0.25] * (n - 1)}
    return json.dumps(rec) + "\n"  # json writes a NaN as the bare token NaN, as open-instruct's file does


def write_open_instruct(d, run="grpo__1__1755734400", *, nan_logprob=False, interleave=True):
    """``{run}_metadata.jsonl`` and ``{run}_rollouts_000000.jsonl``, with the lines of the two steps
    interleaved (two writer threads), a NaN logprob in one line when asked."""
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{run}_metadata.jsonl").write_text(json.dumps(
        {"run_name": run, "git_commit": "abc", "model_name": "m", "timestamp": "2026-08-20T00:00:00+00:00"}) + "\n")
    order = [(st, p, s) for p in range(2) for st in (1, 0) for s in range(3)] if interleave else \
        [(st, p, s) for st in range(2) for p in range(2) for s in range(3)]
    lines = [_oi_line(st, p, s, nan_logprob=nan_logprob and (st, p, s) == (0, 1, 2)) for st, p, s in order]
    (d / f"{run}_rollouts_000000.jsonl").write_text("".join(lines))
    return d


def _expected_frame():
    rows = [(st, p, REWARDS[st][p][s], ADV[st][p][s], LENGTHS[st][p][s])
            for st in range(2) for p in range(2) for s in range(3)]
    return np.array(rows, dtype=float)


def _sample(group_index, index, reward, length, **extra):
    """``Sample.to_dict()`` (the plain-dict form slime dumps), the keys a reader may meet."""
    smp = {"group_index": group_index, "index": index, "rollout_id": None, "prompt": "q", "tokens": [1] * (4 + length),
           "multimodal_inputs": None, "response": "a", "response_length": length, "label": "4", "reward": reward,
           "loss_mask": [1] * length, "weight_versions": ["0"], "rollout_log_probs": [-0.5] * length,
           "remove_sample": False, "status": "completed", "metadata": {}, "spec_info": {"spec_accept_token_num": 0},
           "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 4}}
    smp.update(extra)
    return smp


def slime_blob(rollout_id, *, reward=lambda r: r, **extra):
    samples = []
    for p in range(2):
        for s in range(3):
            g = rollout_id * 2 + p  # slime's group_index: a global counter
            samples.append(_sample(g, g * 3 + s, reward(REWARDS[rollout_id][p][s]), LENGTHS[rollout_id][p][s], **extra))
    return {"rollout_id": rollout_id, "samples": samples}


def write_slime(d, *, name="rollout_data/{rollout_id}.pt", reward=lambda r: r, with_eval=True):
    for rid in range(2):
        path = d / name.format(rollout_id=rid)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(slime_blob(rid, reward=reward), path)
    if with_eval:
        blob = slime_blob(0)
        for smp in blob["samples"]:
            smp["reward"] = 1.0
        torch.save(blob, d / name.format(rollout_id="eval_0"))
    return d


def _frame(r, advantage=True):
    cols = ["step", "group", "reward", "advantage", "length"] if advantage else ["step", "group", "reward", "length"]
    return r.frame[cols].to_numpy(dtype=float)


# ---------------------------------------------------------------------------------- open-instruct
@pytest.mark.parametrize("nan_logprob", [False, True], ids=["engine", "line-reader"])
def test_open_instruct_rollouts_are_read_with_their_logged_advantages(tmp_path, nan_logprob):
    d = write_open_instruct(tmp_path / "rollouts", nan_logprob=nan_logprob)
    assert readers.detect_format(d) == "open-instruct"
    r = readers.read(d)
    assert r.source["format"] == "open-instruct" and r.group_size == 3
    assert r.source["paths"] == [str(d / "grpo__1__1755734400_rollouts_000000.jsonl")]  # not the metadata file
    exp = _expected_frame()
    got = _frame(r)
    np.testing.assert_array_equal(got[:, [0, 1, 2, 4]], exp[:, [0, 1, 2, 4]])
    np.testing.assert_allclose(got[:, 3], exp[:, 3], rtol=1e-7, atol=1e-7)
    notes = " ".join(r.source["notes"])
    assert "starts at 0" in notes and "training_step is step + 1" in notes
    assert "filter_zero_std_samples" not in notes           # an all-equal group is in the log: not filtered
    # the logged advantage is GRPO's with the population std (ddof 0); eps 1e-8 is within the tolerance
    # of eps 0, which the search names first
    found = metrics.which_advantage(r)
    assert found["name"] == "grpo" and found["params"]["ddof"] == 0 and found["max_rel_error"] < 1e-6


def test_open_instruct_filtered_groups_are_noted_and_steps_filtered(tmp_path):
    d = tmp_path / "rollouts"
    d.mkdir()
    run = "grpo__1__1"
    lines = [_oi_line(st, p, s) for st in range(2) for p in range(2) for s in range(3) if (st, p) != (1, 0)]
    (d / f"{run}_rollouts_000000.jsonl").write_text("".join(lines[:6]))
    (d / f"{run}_rollouts_000001.jsonl").write_text("".join(lines[6:]))
    r = readers.read(d, steps=(1, None))
    assert r.frame["step"].tolist() == [1, 1, 1] and r.frame["reward"].tolist() == [1.0, 0.0, 1.0]
    assert r.source["paths"][-1].endswith("_rollouts_000001.jsonl")
    assert any("zero-signal counts undercount" in n for n in r.source["notes"])


def test_open_instruct_bad_lines_name_the_line(tmp_path):
    d = write_open_instruct(tmp_path / "rollouts", interleave=False)
    f = d / "grpo__1__1755734400_rollouts_000000.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    del rec["reward"]
    f.write_text("".join(lines[:2] + [json.dumps(rec) + "\n"] + lines[3:]))
    with pytest.raises(ValueError, match=rf"^{f}:3: missing key 'reward'"):
        readers.read(d)
    f.write_text("".join(lines[:2] + ['{"step": 0, "sampl\n'] + lines[3:]))
    with pytest.raises(ValueError, match=rf"^{f}:3: not a valid JSON line"):
        readers.read(d)
    r = readers.read(d, skip_bad_lines=True)
    assert r.source["n_bad_lines_skipped"] == 1 and len(r.frame) == 11


def test_open_instruct_legacy_traces_need_the_group_size(tmp_path):
    run = "grpo__1__1735689600"
    d = tmp_path / run
    d.mkdir()
    with open(d / f"traces_{run}.jsonl", "w") as fh:
        for st in range(2):
            flat = [x for g in REWARDS[st] for x in g]
            fh.write(json.dumps({"scores": flat, "finish_reasons": ["stop"] * 6,
                                 "responses": [[5] * n for g in LENGTHS[st] for n in g], "training_step": st + 1,
                                 "queries": [[1]] * 6, "ground_truths": [["4"]] * 6, "datasets": ["gsm8k"] * 6,
                                 "indices": None, "scores_again": flat, "objective/verifiable_reward": 0.5}) + "\n")
    assert readers.detect_format(d) == "open-instruct"
    with pytest.raises(ValueError, match=r"traces_grpo__1__1735689600\.jsonl: .*pass group_size"):
        readers.read(d)
    r = readers.read(d, group_size=3)
    exp = _expected_frame()
    exp[:, 0] += 1                                        # the legacy line's training_step is 1-based
    np.testing.assert_array_equal(_frame(r, advantage=False), exp[:, [0, 1, 2, 4]])
    assert r.frame["advantage"].isna().all()


def test_open_instruct_detection_keeps_the_other_formats(tmp_path):
    d = write_open_instruct(tmp_path / "oi")
    # the metadata file alone is no log
    m = tmp_path / "meta"
    m.mkdir()
    (m / "x_metadata.jsonl").write_text((d / "grpo__1__1755734400_metadata.jsonl").read_text())
    with pytest.raises(ValueError, match="cannot tell the log format"):
        readers.detect_format(m)
    # a verl {step}.jsonl and a table are still theirs
    v = tmp_path / "verl"
    v.mkdir()
    (v / "3.jsonl").write_text(json.dumps({"input": "q", "output": "o", "score": 1.0, "step": 3, "uid": "a_0_0"})
                               + "\n")
    (tmp_path / "t.jsonl").write_text(json.dumps({"step": 1, "group": 0, "reward": 1.0}) + "\n")
    assert readers.detect_format(v) == "verl" and readers.detect_format(tmp_path / "t.jsonl") == "table"
    (d / "t.csv").write_text("step,group,reward\n1,0,1\n")
    with pytest.raises(ValueError, match="mixes log formats: .*open-instruct: 1 file"):
        readers.detect_format(d)


# ---------------------------------------------------------------------------------- slime
def test_slime_dumps_are_read_and_eval_dumps_are_the_val_split(tmp_path):
    d = write_slime(tmp_path / "dump")
    assert readers.detect_format(d) == "slime"
    r = readers.read(d)
    assert r.source["format"] == "slime" and r.group_size == 3
    assert [p.rsplit("/", 2)[-2:] for p in r.source["paths"]] == [["rollout_data", "0.pt"], ["rollout_data", "1.pt"]]
    exp = _expected_frame()
    np.testing.assert_array_equal(_frame(r, advantage=False), exp[:, [0, 1, 2, 4]])
    assert r.frame["advantage"].isna().all() and (r.frame["split"] == "train").all()
    assert any("no advantages" in n for n in r.source["notes"])
    v = readers.read(d, split="val")
    assert v.frame["split"].eq("val").all() and v.frame["reward"].eq(1.0).all() and len(v.frame) == 6
    one = readers.read(d, steps=(1, 1))
    assert one.frame["step"].tolist() == [1] * 6 and one.source["paths"][0].endswith("1.pt")


def test_slime_dict_rewards_removed_and_aborted_samples(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    for rid in range(2):
        blob = slime_blob(rid, reward=lambda r: {"score": 2 * r - 1, "acc": r == 1.0, "pred": "4"})
        if rid == 1:
            blob["samples"][0]["remove_sample"] = True       # by a --rollout-sample-filter-path function
            blob["samples"][4]["status"] = "aborted"
        torch.save(blob, d / f"rollout_{rid}.pt")
    r = readers.read(d)
    assert r.frame["reward"].tolist()[:3] == [1.0, -1.0, -1.0]          # the default key, 'score'
    assert len(r.frame) == 11 and r.source["n_removed_samples_dropped"] == 1 and r.source["n_rows_read"] == 12
    assert r.frame[r.frame.step == 1]["reward"].tolist() == [-1.0, -1.0, 1.0, -1.0, 1.0]
    assert r.group_size is None                                          # the group of the removed sample has 2
    notes = " ".join(r.source["notes"])
    assert "1 samples marked remove_sample" in notes and "aborted (1)" in notes and "'score'" in notes
    acc = readers.read(d, reward_column="acc")
    assert acc.frame["reward"].tolist()[:3] == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"rollout_0\.pt: sample 0: the reward is a dict with no key 'nope' "
                                         r"\(its keys: 'score', 'acc', 'pred'\)"):
        readers.read(d, reward_column="nope")
    torch.save(slime_blob(0, reward=lambda r: {"correct": r}), d / "rollout_0.pt")
    with pytest.raises(ValueError, match=r"none of 'score', 'reward' \(its keys: 'correct'\).*--reward-column"):
        readers.read(d)


def test_slime_without_group_index_needs_the_group_size(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    blob = slime_blob(0)
    for smp in blob["samples"]:
        del smp["group_index"]
    torch.save(blob, d / "0.pt")
    with pytest.raises(ValueError, match=r"0\.pt: samples without 'group_index'.*--group-size"):
        readers.read(d, format="slime")
    r = readers.read(d, format="slime", group_size=3)
    assert r.frame["group"].tolist() == [0, 0, 0, 1, 1, 1] and r.source["grouping"] == "prompt-blocks"


@dataclass
class SpecInfo:
    """A stand-in for slime's ``Sample.SpecInfo``, pickled by reference as 2025-11 dumps did."""

    spec_accept_token_num: int = 0


def test_slime_files_that_need_unpickling_code_are_refused(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    blob = slime_blob(0)
    blob["samples"][0]["spec_info"] = SpecInfo()
    torch.save(blob, d / "rollout_0.pt")
    with pytest.raises(ValueError) as err:
        readers.read(d / "rollout_0.pt", format="slime")
    msg = str(err.value)
    assert msg.startswith(f"{d / 'rollout_0.pt'}: refused") and "weights_only=True" in msg
    assert "SpecInfo" in msg and "torch.save" in msg
    (d / "rollout_1.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"rollout_1\.pt: not a readable torch file"):
        readers.read(d / "rollout_1.pt", format="slime")
    assert readers._file_format(d / "rollout_1.pt") is None          # detection never unpickles


def test_slime_detection_does_not_take_other_pt_files(tmp_path):
    torch.save({"weight": torch.zeros(2)}, tmp_path / "model_1.pt")
    (tmp_path / "log.csv").write_text("step,group,reward\n1,0,1\n1,0,0\n")
    assert readers.detect_format(tmp_path) == "table"


# ---------------------------------------------------------------------------------- rlvr-audit
@pytest.mark.parametrize("kind", ["open-instruct", "slime"])
def test_rlvr_audit_end_to_end(tmp_path, capsys, cheap_png, kind):
    if kind == "open-instruct":
        d = write_open_instruct(tmp_path / "logs")
        extra = []
    else:
        d = write_slime(tmp_path / "logs", name="rollout_{rollout_id}.pt")
        extra = ["--advantage", "grpo"]
    capsys.readouterr()
    rc = audit_cli.main([str(d), "--out", str(tmp_path / "rep"), "--json", "--format", kind] + extra)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["source"]["format"] == kind and doc["group_size"] == 3
    assert [s["step"] for s in doc["steps"]] == [0, 1]
    if kind == "open-instruct":
        assert doc["masses_from"] == "logged" and doc["advantage"]["name"] == "grpo"
