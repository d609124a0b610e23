"""The rollout-log readers of the audit: every format from files written here, the canonical
table they return, and the files they refuse (naming the file, the line or row, the column)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.audit import readers
from analysis.audit.readers import read

TEXT = "Solve: what is the sum of the first ten primes? Think step by step. " * 3


# ------------------------------------------------------------------ writers of logs
def verl_rows(step: int, rewards: np.ndarray, *, uid: bool = True, prefix: str = "u", outputs: int = 1) -> list[dict]:
    """verl >= 0.9 rollout dump rows of a [n_groups, G] reward array (uid "{group}_{rollout}_{output}")."""
    rows = []
    for b, group in enumerate(rewards):
        for g, r in enumerate(group):
            for o in range(outputs):
                row = {"input": f"{TEXT} prompt {prefix}{b}", "output": f"answer {g} {o}", "gts": "42",
                       "score": float(r), "step": step}
                if uid:
                    row["uid"] = f"{prefix}{b:04d}-9f3c_{g}_{o}"
                rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict], *, tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def trl_frame(step: int, prompts: list, G: int, acc: np.ndarray, fmt: np.ndarray, adv: np.ndarray) -> pd.DataFrame:
    """A TRL >= 0.28 completions table: step, prompt, completion, one column per reward
    function, extra columns, advantage (the order of GRPOTrainer.log)."""
    n = len(prompts) * G
    return pd.DataFrame({"step": [step] * n, "prompt": [p for p in prompts for _ in range(G)],
                         "completion": [f"completion {i}" for i in range(n)], "accuracy_reward": acc,
                         "format_reward": fmt, "judge_note": ["ok"] * n, "advantage": adv})


# ------------------------------------------------------------------ verl
def test_verl_groups_by_uid_and_drops_padding_rows(tmp_path):
    rng = np.random.default_rng(0)
    R1 = (rng.random((3, 4)) < 0.5).astype(float)
    R2 = (rng.random((3, 4)) < 0.5).astype(float)
    pad = [{"input": "", "output": "", "gts": None, "score": 0.0, "step": 2, "uid": f"padab12cd_{i}_0"} for i in range(2)]
    write_jsonl(tmp_path / "1.jsonl", verl_rows(1, R1))
    write_jsonl(tmp_path / "2.jsonl", verl_rows(2, R2) + pad)
    write_jsonl(tmp_path / "10.jsonl", verl_rows(10, R1))
    r = read(tmp_path)
    f = r.frame
    assert r.source["format"] == "verl" and r.source["grouping"] == "uid" and r.group_size == 4
    assert r.source["n_padding_rows_dropped"] == 2 and r.source["n_files"] == 3
    assert [Path(p).name for p in r.source["paths"]] == ["1.jsonl", "2.jsonl", "10.jsonl"]
    assert list(f.columns) == list(readers.COLUMNS)
    assert {c: str(t) for c, t in f.dtypes.items()} == {"step": "int64", "group": "int64", "reward": "float64",
                                                          "advantage": "float64", "length": "float64", "split": "str"}
    assert f["step"].unique().tolist() == [1, 2, 10]
    np.testing.assert_array_equal(f[f.step == 2]["reward"].to_numpy().reshape(3, 4), R2)
    assert f[f.step == 1]["group"].tolist() == [b for b in range(3) for _ in range(4)]
    assert f["advantage"].isna().all() and f["length"].isna().all() and (f["split"] == "train").all()


def test_verl_legacy_without_uid_groups_by_input_and_says_so(tmp_path):
    rows = verl_rows(5, np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), uid=False)
    rows = [rows[i] for i in (0, 3, 1, 4, 2, 5)]  # the legacy trainer may interleave groups (balance_batch)
    write_jsonl(tmp_path / "5.jsonl", rows)
    r = read(tmp_path / "5.jsonl", format="verl")
    assert r.source["grouping"] == "input" and r.group_size == 3
    assert any("without uid" in n and "identical input" in n for n in r.source["notes"])
    assert r.frame["group"].tolist() == [0, 0, 0, 1, 1, 1]
    assert r.frame["reward"].tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # the log's order within a group


def test_verl_validation_dump_is_split_val(tmp_path):
    write_jsonl(tmp_path / "val" / "0.jsonl", verl_rows(0, np.array([[1.0], [0.0], [1.0]])))
    r = read(tmp_path / "val", split="val")
    assert (r.frame["split"] == "val").all() and r.group_size == 1 and len(r.frame) == 3


def test_verl_multi_output_rollouts_keep_their_last_output(tmp_path):
    rows = verl_rows(1, np.array([[1.0, 0.0]]), outputs=3)
    for row in rows:  # earlier outputs of a session carry the final reward too; mark them
        if not row["uid"].endswith("_2"):
            row["score"] = 0.5
    write_jsonl(tmp_path / "1.jsonl", rows)
    r = read(tmp_path)
    assert r.frame["reward"].tolist() == [1.0, 0.0] and r.source["n_duplicate_rows_dropped"] == 4


def test_groups_split_across_two_files_are_joined(tmp_path):
    rows = verl_rows(3, np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    write_jsonl(tmp_path / "a" / "3.jsonl", rows[:6])  # group 0 whole, group 1 half
    write_jsonl(tmp_path / "b" / "3.jsonl", rows[6:])
    r = read([tmp_path / "a", tmp_path / "b"])
    assert r.group_size == 4 and r.frame["group"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # a table split in two CSV files, the same group in both
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "part1.csv").write_text("step,group,reward\n1,x,1\n1,y,0\n1,x,0\n")
    (tmp_path / "t" / "part2.csv").write_text("step,group,reward\n1,y,1\n1,x,1\n1,y,0\n")
    t = read(tmp_path / "t")
    assert t.source["format"] == "table" and t.group_size == 3
    assert t.frame["group"].tolist() == [0, 0, 0, 1, 1, 1]
    assert t.frame["reward"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_unequal_group_sizes_are_kept_and_said(tmp_path):
    rows = verl_rows(1, np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]))[:-1]  # one rollout lost
    write_jsonl(tmp_path / "1.jsonl", rows)
    r = read(tmp_path)
    assert r.group_size is None and len(r.frame) == 7
    assert any("unequal sizes" in n for n in r.source["notes"])
    with pytest.raises(ValueError, match=r"group_size: .*3 \(1 groups\), 4 \(1 groups\)"):
        read(tmp_path, group_size=4)


def test_truncated_last_line_is_refused_with_file_and_line_or_skipped(tmp_path):
    rows = verl_rows(7, np.array([[1.0, 0.0], [0.0, 0.0]]))
    p = write_jsonl(tmp_path / "7.jsonl", rows, tail=json.dumps(rows[0])[:25])
    with pytest.raises(ValueError, match=rf"{p}:5: not a valid JSON line \(the last line: the file may be "
                                         r"truncated\).*skip_bad_lines"):
        read(tmp_path)
    r = read(tmp_path, skip_bad_lines=True)
    assert r.source["n_bad_lines_skipped"] == 1 and len(r.frame) == 4 and r.group_size == 2


def test_a_file_missing_a_column_is_refused_naming_file_row_and_column(tmp_path):
    rows = verl_rows(1, np.array([[1.0, 0.0], [0.0, 0.0]]))
    del rows[2]["score"]
    p = write_jsonl(tmp_path / "v" / "1.jsonl", rows)
    with pytest.raises(ValueError, match=rf"{p}:3: missing key 'score'"):
        read(tmp_path / "v")
    c = tmp_path / "t.csv"
    c.write_text("step,group,score\n1,0,1\n")
    with pytest.raises(ValueError, match=rf"{c}: line 1 \(header\): missing column 'reward'"):
        read(c, format="table")
    c2 = tmp_path / "t2.csv"
    c2.write_text("step,group,reward\n1,0,1\n,0,1\n")
    with pytest.raises(ValueError, match=rf"{c2}: line 3: column 'step' is empty"):
        read(c2)
    q = tmp_path / "run" / "rollouts" / "step_000001.parquet"
    q.parent.mkdir(parents=True)
    pq.write_table(pa.table({"step": [1, 1], "prompt": ["a", "a"], "group": [0, 0], "rollout": [0, 1],
                             "reward": [1.0, 0.0], "length": [3, 4]}), q)
    with pytest.raises(ValueError, match=rf"{q}: row 1: missing column 'advantage'"):
        read(q, format="rlvr")
    t = tmp_path / "trl" / "completions" / "completions_00001.parquet"
    t.parent.mkdir(parents=True)
    pd.DataFrame({"step": [1], "prompt": ["p"], "completion": ["c"], "accuracy_reward": [1.0]}).to_parquet(t)
    with pytest.raises(ValueError, match=rf"{t}: row 1: missing column 'advantage'"):
        read(tmp_path / "trl", format="trl", group_size=1)


# ------------------------------------------------------------------ TRL
def test_trl_rewards_groups_nan_and_num_iterations_duplicates(tmp_path):
    out = tmp_path / "trl_out"
    G = 4
    acc = np.array([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1], float)
    fmt = np.array([0.5, 0.5, np.nan, 0.5, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5])
    acc[2] = np.nan  # every reward function returned None: the total is NaN
    adv = np.arange(12) / 10
    comp = out / "completions"
    comp.mkdir(parents=True)
    # one prompt twice in a row (two groups): the run of 2G rows does not fool the inference of G
    trl_frame(1, ["p0", "p1", "p1"], G, acc, fmt, adv).to_parquet(comp / "completions_00001.parquet")
    trl_frame(2, ["p0", "p1", "p1"], G, acc, fmt, adv).to_parquet(comp / "completions_00002.parquet")  # same batch
    trl_frame(3, ["p2", "p3", "p4"], G, acc[::-1].copy(), fmt, adv).to_parquet(comp / "completions_00003.parquet")
    assert readers.detect_format(out) == "trl"
    r = read(out)
    f = r.frame
    assert r.source["format"] == "trl" and r.source["grouping"] == "prompt-blocks" and r.group_size == G
    assert r.source["n_duplicate_rows_dropped"] == 12 and f["step"].unique().tolist() == [1, 3]
    s1 = f[f.step == 1]
    expected = np.where(np.isnan(acc) & np.isnan(fmt), np.nan, np.nan_to_num(acc) + np.nan_to_num(fmt))
    np.testing.assert_array_equal(s1["reward"].to_numpy(), expected)
    assert np.isnan(s1["reward"].iloc[2])
    np.testing.assert_array_equal(s1["advantage"].to_numpy(), adv)
    assert s1["group"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    notes = " ".join(r.source["notes"])
    assert "reward_weights are not in the log" in notes and "'accuracy_reward', 'format_reward'" in notes
    assert "1 files repeat the generation batch of an earlier step" in notes and "steps 2 (= 1)" in notes and "1 rollouts have no reward" in notes
    # one reward function; a given group size; the steps filter
    one = read(comp, reward_column="accuracy_reward", group_size=4, steps=(3, 3))
    assert one.frame["step"].unique().tolist() == [3]
    np.testing.assert_array_equal(one.frame["reward"].to_numpy(), acc[::-1])
    bad = _trl_file(tmp_path, ["a", "a", "a", "b", "b", "b"])
    with pytest.raises(ValueError, match=rf"{bad}: row 4: the prompt changes inside a group of 2"):
        read(bad, group_size=2)
    with pytest.raises(ValueError, match=r"6 rows is not a multiple of the group size 4"):
        read(bad, group_size=4)
    with pytest.raises(ValueError, match=r"missing column 'nope' \(reward_column\)"):
        read(out, reward_column="nope")


def _trl_file(tmp_path: Path, prompts: list[str]) -> Path:
    p = tmp_path / "bad" / "completions_00001.parquet"
    p.parent.mkdir(exist_ok=True)
    n = len(prompts)
    pd.DataFrame({"step": [1] * n, "prompt": prompts, "completion": ["c"] * n, "r": [1.0] * n,
                  "advantage": [0.0] * n}).to_parquet(p)
    return p


def test_trl_conversational_prompts(tmp_path):
    conv = [[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "3+3?"}]]
    df = pd.DataFrame({"step": [4] * 4, "prompt": [conv[0], conv[0], conv[1], conv[1]],
                       "completion": [[{"role": "assistant", "content": str(i)}] for i in range(4)],
                       "correct": [1.0, 0.0, 0.0, 0.0], "advantage": [0.7, -0.7, 0.0, 0.0]})
    (tmp_path / "completions").mkdir()
    df.to_parquet(tmp_path / "completions" / "completions_00004.parquet")
    r = read(tmp_path)
    assert r.group_size == 2 and r.frame["group"].tolist() == [0, 0, 1, 1]


# ------------------------------------------------------------------ prime-rl, rlvr, table
def _episode(group: str, rewards: list, step: int = 1) -> dict:
    return {"id": "e", "env": {"id": "gsm8k"}, "task": {"prompt": TEXT}, "group": {"id": group},
            "run": {"type": "train", "id": "r", "work": {"type": "train", "step": step}}, "ok": True,
            "traces": [{"rewards": rw, "metrics": {}, "nodes": [], "calls": []} for rw in rewards]}


def test_prime_rl_traces(tmp_path):
    root = tmp_path / "out" / "rollouts"
    ok = {"correct": {"score": 1.0, "weight": 1.0}, "fmt": {"score": 1.0, "weight": 0.5}}
    bad = {"correct": {"score": 0.0, "weight": 1.0}, "fmt": None}
    eps = [_episode("g1", [ok]), _episode("g2", [bad]), _episode("g1", [bad]), _episode("g2", [{}])]
    write_jsonl(root / "step_1" / "train" / "effective" / "traces.jsonl", eps)
    write_jsonl(root / "step_1" / "train" / "all" / "traces.jsonl", eps + eps)  # the effective cohort is read
    write_jsonl(root / "step_2" / "train" / "effective" / "traces.jsonl", eps[:2])
    write_jsonl(root / "step_2" / "eval" / "all" / "traces.jsonl", [_episode("v", [ok])])
    assert readers.detect_format(tmp_path / "out") == "prime-rl"
    r = read(tmp_path / "out")
    f = r.frame
    assert r.source["format"] == "prime-rl" and r.source["n_files"] == 2
    assert f[f.step == 1]["group"].tolist() == [0, 0, 1, 1]
    assert f[f.step == 1]["reward"].tolist() == [1.5, 0.0, 0.0, 0.0]
    assert r.group_size is None  # step 2 has groups of 1
    assert any("no reward recorded" in n for n in r.source["notes"])
    v = read(tmp_path / "out", split="val")
    assert v.frame["split"].tolist() == ["val"] and v.frame["reward"].tolist() == [1.5]
    assert len(read(tmp_path / "out", split="all").frame) == 7


def test_rlvr_and_table_formats(tmp_path):
    run = tmp_path / "run" / "rollouts"
    run.mkdir(parents=True)
    for step in (1, 2):
        pq.write_table(pa.table({"step": [step] * 4, "prompt": ["a", "a", "b", "b"], "group": [0, 0, 1, 1],
                                 "rollout": [0, 1, 0, 1], "reward": [1.0, 0.0, 0.0, 0.0],
                                 "advantage": [0.5, -0.5, 0.0, 0.0], "length": [3, 5, 2, 2]}),
                       run / f"step_{step:06d}.parquet")
    r = read(tmp_path / "run")
    assert r.source["format"] == "rlvr" and r.group_size == 2 and len(r.frame) == 8
    assert r.frame["length"].tolist()[:4] == [3.0, 5.0, 2.0, 2.0]
    assert read(tmp_path / "run", steps=(2, 2)).frame["step"].unique().tolist() == [2]
    # table: JSONL with string groups, a split column; parquet
    rows = [{"step": 1, "group": "q1", "reward": 1, "advantage": 0.5, "split": "train"},
            {"step": 1, "group": "q1", "reward": 0, "advantage": -0.5, "split": "train"},
            {"step": 1, "group": "q9", "reward": 1, "split": "val"}]
    write_jsonl(tmp_path / "tab" / "log.jsonl", rows)
    t = read(tmp_path / "tab" / "log.jsonl")
    assert t.source["format"] == "table" and t.frame["advantage"].tolist() == [0.5, -0.5]
    assert read(tmp_path / "tab", split="val").frame["split"].tolist() == ["val"]
    pq.write_table(pa.table({"step": [5, 5, 6], "group": [7, 7, 7], "reward": [1.0, 0.0, 1.0]}), tmp_path / "x.parquet")
    x = read(tmp_path / "x.parquet")
    assert x.frame["group"].tolist() == [0, 0, 0] and x.group_size is None


def test_format_detection_and_refusals(tmp_path):
    write_jsonl(tmp_path / "v" / "3.jsonl", verl_rows(3, np.ones((1, 2))))
    (tmp_path / "t.csv").write_text("step,group,reward\n1,0,1\n")
    (tmp_path / "odd.csv").write_text("a,b\n1,2\n")
    assert readers.detect_format(tmp_path / "v") == "verl"
    assert readers.detect_format(tmp_path / "v" / "3.jsonl") == "verl"
    assert readers.detect_format([tmp_path / "t.csv"]) == "table"
    with pytest.raises(ValueError, match="cannot tell the log format of .*odd.csv"):
        readers.detect_format(tmp_path / "odd.csv")
    with pytest.raises(ValueError, match=r"the logs mix formats: verl: 1 file \(.*3\.jsonl\); table: 1 file"):
        readers.detect_format([tmp_path / "v", tmp_path / "t.csv"])
    with pytest.raises(ValueError, match="does not exist"):
        read(tmp_path / "missing")
    with pytest.raises(ValueError, match="format must be one of"):
        read(tmp_path / "t.csv", format="csv")
    with pytest.raises(ValueError, match="no verl log files in the steps 9:"):
        read(tmp_path / "v", steps=(9, None))
    with pytest.raises(ValueError, match="reward_column: only TRL"):
        read(tmp_path / "t.csv", reward_column="x")


# ------------------------------------------------------------------ the committed example logs
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES = [("verl/rollout_data", "train", "verl", 8), ("verl/validation_data", "val", "verl", 4),
         ("verl_legacy", "train", "verl", 8), ("trl", "train", "trl", 8), ("prime-rl", "train", "prime-rl", 4),
         ("rlvr", "train", "rlvr", 8), ("table/rollouts.csv", "train", "table", 8)]


@pytest.fixture(scope="module")
def fresh_logs(tmp_path_factory) -> Path:
    """The example logs written again by examples/make_audit_logs.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_audit_logs", EXAMPLES / "make_audit_logs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path_factory.mktemp("examples") / "logs"
    mod.main(["--out", str(out)])
    return out


@pytest.mark.parametrize(("sub", "split", "fmt", "G"), CASES)
def test_the_example_logs_are_read_and_match_their_script(fresh_logs, sub, split, fmt, G):
    committed = read(EXAMPLES / "audit_logs" / sub, split=split)
    fresh = read(fresh_logs / sub, split=split)
    assert committed.source["format"] == fmt and committed.group_size == G
    pd.testing.assert_frame_equal(committed.frame, fresh.frame)
