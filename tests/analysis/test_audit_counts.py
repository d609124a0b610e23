"""A verl dump held as group counts (``readers.read(..., rows=False)``: the engine aggregates
every file per (step, group) in one streaming scan, ``Rollouts.counts``) against the same dump
held as rows (``rows=True``): the same groups, the same source dict, the same errors, and the
same ``metrics.audit`` document, number for number."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.audit import metrics, readers
from analysis.audit.readers import Rollouts, read
from tests.analysis.test_audit_readers_engine import LOGS, RAW, _write


def _groups(r: Rollouts) -> list:
    """The groups of a read as a sorted list of (split, step, sorted rewards): the same
    whatever the group numbers and the order of the rows within a group."""
    f = r.frame
    out = []
    for (step, _), g in f.groupby(["step", "group"], sort=False):
        rewards = tuple(sorted(repr(x) for x in g["reward"].tolist()))  # repr: NaN equals NaN
        out.append((str(g["split"].iloc[0]), int(step), rewards))
    return sorted(out, key=repr)


def _outcome(path: Path, **kw):
    try:
        r = read(path, format="verl", **kw)
    except ValueError as err:
        return type(err).__name__, str(err)
    src = {k: v for k, v in r.source.items() if k != "trainer_config"}
    return _groups(r), src, r.group_size, r.counts is not None


@pytest.mark.parametrize("name", sorted(LOGS) + sorted(RAW))
def test_counts_give_the_groups_the_rows_give(tmp_path, name):
    path = _write(tmp_path / "logs" / "1.jsonl", name)
    for kw in ({}, {"steps": (2, None)}, {"split": "val"}):
        counts, rows = _outcome(path.parent, rows=False, **kw), _outcome(path.parent, rows=True, **kw)
        if isinstance(rows[0], str):
            assert counts == rows
            continue
        assert counts[:3] == rows[:3]
        assert rows[3] is False


def test_which_dumps_are_held_as_counts(tmp_path):
    """Binary scores and '{group}_{rollout}_0' uids: counts; anything else: the rows readers."""
    held = {}
    for name in sorted(LOGS) + sorted(RAW):
        path = _write(tmp_path / name.replace(" ", "_").replace(":", "") / "1.jsonl", name)
        try:
            held[name] = read(path.parent, rows=False).counts is not None
        except ValueError:
            held[name] = None
    assert {n for n, v in held.items() if v} == {
        "clean", "integer score", "two steps", "blank lines", "padding rows", "extra nested keys", "CRLF",
        "byte order mark", "NaN in an extra key"} - {n for n in RAW if not held.get(n)}
    for name in ("shared uid", "several outputs", "other uids", "uids of two parts", "legacy: no uid", "null score",
                 "string score", "unicode uids", "lone surrogates", "first line broken"):
        assert held[name] is not True, name


def _dump(folder: Path, *, steps: int = 6, groups: int = 9, seed: int = 0, sizes=(8,), shift: int = 0) -> Path:
    """A verl dump with binary scores of varied solve rates, the groups' rows interleaved, a few
    padding rows, and groups of the ``sizes`` given (cycled)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(1 + shift, steps + 1 + shift):
        rows = []
        for g in range(groups):
            G, prefix = sizes[g % len(sizes)], f"{rng.integers(1 << 40):x}"
            p = rng.choice([0.0, 0.05, 0.3, 0.5, 0.9, 1.0])
            rows += [{"input": f"q{g}", "output": "o", "score": float(rng.random() < p), "step": s,
                      "uid": f"{prefix}_{i}_0"} for i in range(G)]
        rows = [rows[i] for i in rng.permutation(len(rows))]
        rows += [{"input": "", "output": "", "score": 0.0, "step": s, "uid": f"pad_{i}_0"} for i in range(2)]
        (folder / f"{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _close(a, b, path: str = "") -> None:
    """Equal documents: the same keys and values, floats to 1e-12 relative (the counts path sums a
    group's advantages in another order than the rows: the last bits may differ)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (path, set(a) ^ set(b))
        for k in a:
            _close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15), (path, a, b)
    else:
        assert a == b, (path, a, b)


OPTIONS = [
    {},
    {"advantage": "grpo", "compare": ["dr_grpo", "rloo", "maxrl"], "taus": [0.1, 0.01]},
    {"advantage": "asym_grpo", "params": {"delta": 0.5}, "success_threshold": 0.5},
    {"advantage": "power_alpha", "params": {"alpha": 2.0}, "success_threshold": 1.5},
    {"advantage": "rloo", "params": {"singleton": "raw"}, "success_threshold": 0.5},
    {"advantage": "agrae", "compare": ["grpo"]},  # batch-level: read as rows
    {"advantage": "fade", "entropy": {1: 1.0, 2: 0.9, 3: 0.8, 4: 0.7, 5: 0.6, 6: 0.5}, "fade": {}},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: o.get("advantage", "none"))
def test_the_audit_of_counts_is_the_audit_of_rows(tmp_path, options):
    batch = options.get("advantage") == "agrae"  # batch-level: needs groups of one size, and the rows
    train = _dump(tmp_path / "train", sizes=(8,) if batch else (8, 8, 4, 1))
    val = _dump(tmp_path / "val", steps=2, seed=1)
    for path, split in ((train, "train"), (val, "val")):
        counts = read(path, "verl", rows=False, split=split)
        rows = read(path, "verl", rows=True, split=split)
        assert counts.counts is not None and rows.counts is None
        doc_c = metrics.audit(counts, split=split, **options)
        _close(doc_c, metrics.audit(rows, split=split, **options))
        if split == "train" and not batch:
            assert doc_c["group_sizes"] == {"1": 12, "4": 12, "8": 30}  # per step: sizes 8,8,4,1,8,8,4,1,8
        assert (counts._frame is None) == (not batch)


def test_counts_are_not_expanded_by_the_audit(tmp_path):
    r = read(_dump(tmp_path / "d", groups=20), "verl", rows=False)
    metrics.audit(r, advantage="grpo", compare=["rloo"], taus=[0.1])
    assert readers.suspect_read(r) == [] and r._frame is None and r.n_rollouts == 6 * 20 * 8
    assert metrics.which_advantage(r) is None and r._frame is None
    f = r.frame  # built on demand: a group's failures, then its successes
    first = f.loc[(f["step"] == 1) & (f["group"] == 0), "reward"].to_numpy()
    assert (np.diff(first) >= 0).all() and f["advantage"].isna().all() and (f["split"] == "train").all()
    assert len(f) == r.n_rollouts and repr(r).startswith("Rollouts('verl', 960 rollouts, steps 1..6")


def test_group_numbers_follow_the_uid_prefixes(tmp_path):
    rows = [{"score": float(i % 2), "step": 4, "uid": f"{key}_{i}_0"} for key in ("zz", "aa", "mm") for i in range(2)]
    (tmp_path / "4.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = read(tmp_path, rows=False)
    assert r.counts[["step", "group", "rollouts", "successes"]].to_numpy().tolist() == [[4, 0, 2, 1], [4, 1, 2, 1],
                                                                                         [4, 2, 2, 1]]
    assert read(tmp_path, rows=True).frame["group"].tolist() == [0, 0, 1, 1, 2, 2]  # rows: first appearance


def test_a_repeated_or_large_rollout_index_goes_to_the_rows(tmp_path):
    rows = [{"score": 1.0, "step": 1, "uid": f"k_{i}_0"} for i in (0, 1, 1)]  # 'k_1_0' twice: a shared uid
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = read(tmp_path / "a", rows=False)
    assert a.counts is None and a.source["grouping"] == "shared-uid"
    rows = [{"score": 1.0, "step": 1, "uid": f"k_{i}_0"} for i in (0, 64)]  # beyond the 64-bit mask
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    b = read(tmp_path / "b", rows=False)
    assert b.counts is None and b.group_size == 2


def test_a_bad_line_after_a_clean_first_file_is_named_by_the_rows_reader(tmp_path):
    _dump(tmp_path, steps=3)
    with open(tmp_path / "3.jsonl", "a") as f:
        f.write('{"score": "1", "uid": "k_0_0", "step": 3}\n')
    n = sum(1 for _ in open(tmp_path / "3.jsonl"))
    with pytest.raises(ValueError, match=rf"^{tmp_path / '3.jsonl'}:{n}: key 'score' must be a number"):
        read(tmp_path, rows=False)
    with open(tmp_path / "2.jsonl", "a") as f:  # shaped rewards in a later file: rows
        f.write('{"score": 0.5, "uid": "k_0_0", "step": 2}\n')
    assert read(tmp_path, rows=False, steps=(1, 2)).counts is None


def test_the_default_holds_large_dumps_as_counts(tmp_path, monkeypatch):
    _dump(tmp_path, steps=2)
    assert read(tmp_path).counts is None
    monkeypatch.setattr(readers, "COUNTS_MIN_BYTES", 1)
    assert read(tmp_path).counts is not None
    assert read(tmp_path, rows=True).counts is None


def test_rollouts_refuse_both_or_neither(tmp_path):
    with pytest.raises(ValueError, match="give frame .* or counts"):
        Rollouts()
    with pytest.raises(ValueError, match="give frame .* or counts"):
        Rollouts(pd.DataFrame({"step": [1]}), {}, counts=pd.DataFrame({"step": [1]}))
    with pytest.raises(ValueError, match="rows must be None, True or False"):
        read(_dump(tmp_path, steps=1), rows="yes")
