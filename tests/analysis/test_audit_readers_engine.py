"""The verl reader's two paths: the engine (polars ``scan_ndjson``, projected) and the line
reader it falls back on.  Every log below is read both ways (the engine turned off with
``_engine_ok``) and must give the same table, the same source dict, or the same error (the
``FILE:LINE`` messages come from the line reader: the engine only decides to hand a file over)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.audit import readers
from analysis.audit.readers import read


def _row(step: int, g: int, r: int, o: int = 0, **extra) -> dict:
    return {"input": f"prompt {g}", "output": f"answer {r}", "gts": "1", "score": float((g + r) % 2), "step": step,
            "uid": f"u{g:03d}-7c_{r}_{o}", **extra}


BASE = [_row(1, g, r) for g in range(3) for r in range(4)]
BAD = '{"score": %s, "uid": "u9_0_0", "step": 1}'

# name -> the file's lines (dicts are written with json.dumps, strings as they are)
LOGS: dict[str, list] = {
    "clean": BASE,
    "string score": BASE[:5] + [BAD % '"1"'] + BASE[5:],
    "bool score": BASE + [BAD % "true"],
    "null score": BASE + [BAD % "null"],
    "nested score": BASE + [BAD % "[1]", BAD % '{"a": 1}'],
    "missing score": BASE + ['{"uid": "u9_0_0", "step": 1}'],
    "integer score": [dict(r, score=int(r["score"])) for r in BASE],
    "NaN and Infinity": BASE + [BAD % "NaN", BAD % "-Infinity"],
    "score beyond float": BASE + [BAD % "1e400"],
    "integer uid": BASE + ['{"score": 1, "uid": 5, "step": 1}', '{"score": 0, "uid": 5, "step": 1}'],
    "float uid": BASE + ['{"score": 1, "uid": 5.0, "step": 1}', '{"score": 0, "uid": 5, "step": 1}'],
    "bool uid": BASE + ['{"score": 1, "uid": true, "step": 1}', '{"score": 0, "uid": "True", "step": 1}'],
    "object uid": BASE + ['{"score": 1, "uid": {"a": [1, 2.50]}, "step": 1}'],
    "numeric string uid": BASE + ['{"score": 1, "uid": "5", "step": 1}'],
    "null uid": BASE + ['{"score": 1, "uid": null, "step": 1}'],
    "float step": BASE + ['{"score": 1, "uid": "u9_0_0", "step": 1.0}'],
    "string step": BASE + ['{"score": 1, "uid": "u9_0_0", "step": "1"}'],
    "null step": BASE + ['{"score": 1, "uid": "u9_0_0", "step": null}'],
    "no step key": [{k: v for k, v in r.items() if k != "step"} for r in BASE],
    "two steps": BASE + [_row(2, g, r) for g in range(2) for r in range(4)],
    "blank lines": BASE[:3] + ["", "   ", "\t"] + BASE[3:],
    "array line": BASE + ["[1, 2]"],
    "number line": BASE[:2] + ["5"] + BASE[2:],
    "broken line": BASE[:4] + ['{"score": 1, "uid": '] + BASE[4:],
    "padding rows": BASE + [dict(_row(1, 0, i), uid=f"padab12_{i}_0", gts=None) for i in range(3)],
    "only padding": [dict(_row(1, 0, i), uid=f"pad_{i}_0") for i in range(3)],
    "shared uid": [dict(_row(1, g, r), uid=f"p{g}") for g in range(3) for r in range(4)],
    "shared uid, two steps": [dict(_row(s, g, r), uid=f"p{g}") for s in (1, 2) for g in range(3) for r in range(2)],
    "several outputs": [_row(1, g, r, o) for g in range(2) for r in range(2) for o in range(3)],
    "other uids": BASE + [dict(_row(1, 9, 0), uid="weird"), dict(_row(1, 9, 1), uid="a_b_c")],
    "uids of two parts": [dict(_row(1, g, r), uid=f"u{g}_{r}") for g in range(3) for r in range(4)],
    "legacy: no uid": [{k: v for k, v in r.items() if k != "uid"} for r in BASE],
    "legacy: numeric input": [{"input": 5, "score": 1.0, "step": 1}, {"input": "5", "score": 0.0, "step": 1}],
    "legacy: null input": [{"input": "a", "score": 1.0, "step": 1}, {"input": None, "score": 0.0, "step": 1}],
    "first line broken": ['{"score": 1, "uid": '] + BASE,
    "lone surrogates": BASE + [BAD.replace("u9_0_0", e) % "1" for e in
                               ("\\ud800_0_0", "\\udc00x", "x\\ud800", "\\ud800\\u0041", "\\u0000_1_0")],
    "unicode uids": BASE + [{"score": 1.0, "uid": "é_ü_0\u2028", "step": 1}, {"score": 1.0, "uid": "a\nb_0_0", "step": 1}],
    "extra nested keys": [dict(r, extra={"x": [1, {"y": None}]}) for r in BASE],
    "huge integer score": BASE + [BAD % "123456789012345678901234567890"],
    "step beyond int64": BASE + ['{"score": 1, "uid": "u9_0_0", "step": 18446744073709551615}'],
    "empty": [],
}
RAW = {  # name -> bytes
    "CRLF": "".join(json.dumps(r) + "\r\n" for r in BASE).encode(),
    "byte order mark": b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in BASE).encode(),
    "invalid UTF-8": "".join(json.dumps(r) + "\n" for r in BASE).encode() + b'{"score": 1, "uid": "u\xff_0_0", "step": 1}\n',
    "truncated last line": "".join(json.dumps(r) + "\n" for r in BASE).encode() + b'{"score": 1, "ui',
    "NaN in an extra key": "".join(json.dumps(r) + "\n" for r in BASE).encode() + b'{"score": 1, "uid": "u9_0_0", "step": 1, "x": NaN}\n',
}


def _write(path: Path, name: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if name in RAW:
        path.write_bytes(RAW[name])
    else:
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in LOGS[name]))
    return path


def _outcome(path: Path, **kw):
    try:
        r = read(path, format="verl", **kw)
    except ValueError as err:
        return type(err).__name__, str(err)
    src = {k: v for k, v in r.source.items() if k != "trainer_config"}
    return r.frame, src, r.group_size


def _same(a, b) -> None:
    if isinstance(a[0], str) or isinstance(b[0], str):
        assert a == b
        return
    pd.testing.assert_frame_equal(a[0], b[0])
    assert a[1:] == b[1:]


@pytest.mark.parametrize("name", sorted(LOGS) + sorted(RAW))
@pytest.mark.parametrize("file_name", ["1.jsonl", "dump.jsonl"])  # the step in the name, or only in the lines
def test_the_engine_reads_every_log_as_the_line_reader_does(tmp_path, monkeypatch, name, file_name):
    path = _write(tmp_path / "logs" / file_name, name)
    target = path.parent if file_name == "1.jsonl" else path
    for kw in ({}, {"skip_bad_lines": True}, {"steps": (2, None)}, {"split": "val"}):
        with monkeypatch.context() as m:
            m.setattr(readers, "_engine_ok", lambda: False)
            lines = _outcome(target, **kw)
        _same(_outcome(target, **kw), lines)


def test_the_engine_never_turns_a_value_into_a_number(tmp_path):
    """polars refuses a string, a boolean or a float where the schema says a number: the line
    reader then names the line (DuckDB's read_json would have read "1" as 1.0, 1.5 as 2)."""
    for name, line, message in [("string score", 6, r"key 'score' must be a number, got '1'"),
                                ("bool score", 13, r"key 'score' must be a number, got True"),
                                ("null score", 13, r"missing key 'score'"),
                                ("nested score", 13, r"key 'score' must be a number, got \[1\]"),
                                ("null uid", 13, r"missing key 'uid'"),
                                ("string step", 13, r"key 'step' must be a number, got '1'"),
                                ("broken line", 5, r"not a valid JSON line \(Expecting value"),
                                ("truncated last line", 13, r"not a valid JSON line \(the last line: the file may be "
                                                            r"truncated\)"),
                                ("array line", 13, r"a verl line must be a JSON object, got list")]:
        path = _write(tmp_path / name.replace(" ", "_") / "1.jsonl", name)
        with pytest.raises(ValueError, match=rf"^{path}:{line}: {message}"):
            read(path.parent)
    r = read(_write(tmp_path / "skip" / "1.jsonl", "truncated last line").parent, skip_bad_lines=True)
    assert r.source["n_bad_lines_skipped"] == 1 and len(r.frame) == 12


def test_a_clean_dump_is_read_by_the_engine_alone(tmp_path, monkeypatch):
    for step in (1, 2, 10):
        p = tmp_path / f"{step}.jsonl"
        p.write_text("".join(json.dumps(dict(r, step=step)) + "\n" for r in BASE))
    _write(tmp_path / "pads" / "3.jsonl", "padding rows")
    _write(tmp_path / "shared" / "4.jsonl", "shared uid")
    _write(tmp_path / "legacy" / "5.jsonl", "legacy: no uid")

    def refuse(f, ctx):
        raise AssertionError(f"{f.path} was read line by line")

    monkeypatch.setattr(readers, "_read_verl", refuse)
    r = read(tmp_path)
    assert r.group_size == 4 and r.frame["step"].unique().tolist() == [1, 2, 10] and r.source["grouping"] == "uid"
    assert read(tmp_path / "pads").source["n_padding_rows_dropped"] == 3
    assert read(tmp_path / "shared").source["grouping"] == "shared-uid"
    assert read(tmp_path / "legacy").source["grouping"] == "input"


def test_a_group_split_between_an_engine_file_and_a_line_read_file_is_one_group(tmp_path, monkeypatch):
    """The keys' hashes are the same function on both paths (readers._hash_text)."""
    rows = [_row(3, g, r) for g in range(2) for r in range(4)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[0:2] + rows[4:6]))
    # NaN (Python's json reads it, polars refuses it): the line reader reads this file
    (tmp_path / "b" / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:4] + rows[6:8])
                                            + '{"score": NaN, "uid": "u001-7c_9_0", "step": 3}\n')
    by_lines = []
    line_reader = readers._read_verl
    monkeypatch.setattr(readers, "_read_verl", lambda f, ctx: (by_lines.append(f.path.parent.name), line_reader(f, ctx)))
    r = read([tmp_path / "a", tmp_path / "b"])
    assert by_lines == ["b"]
    assert r.frame["group"].tolist() == [0] * 4 + [1] * 5 and np.isnan(r.frame["reward"].iloc[-1])
    assert r.source["n_files"] == 2 and r.group_size is None


def test_small_blocks_and_the_split_column(tmp_path, monkeypatch):
    """Parts gathered in blocks (here of 5 rows) give the same table; the frame stays writable."""
    for step in range(1, 8):
        (tmp_path / f"{step}.jsonl").write_text("".join(json.dumps(dict(r, step=step)) + "\n" for r in BASE))
    whole = read(tmp_path).frame
    monkeypatch.setattr(readers, "_BLOCK_ROWS", 5)
    pd.testing.assert_frame_equal(read(tmp_path).frame, whole)
    f = read(tmp_path, split="val").frame
    assert str(f["split"].dtype) == "str" and (f["split"] == "val").all() and len(f) == 84
    f.loc[0, "advantage"] = 1.0  # the columns are the frame's own: writable
    f.loc[0, "split"] = "train"
    assert f["advantage"].iloc[0] == 1.0 and f["split"].tolist()[:2] == ["train", "val"]


def test_a_key_written_twice_is_the_one_difference(tmp_path, monkeypatch):
    """json.dumps never writes a key twice; where a hand-made line does, polars keeps the first
    value and Python's json (the line reader) the last.  Pinned here so that a change is seen."""
    p = tmp_path / "1.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in BASE) + '{"score": 0, "score": 1, "uid": "u9_0_0", "step": 1}\n')
    assert read(tmp_path).frame["reward"].iloc[-1] == 0.0
    monkeypatch.setattr(readers, "_engine_ok", lambda: False)
    assert read(tmp_path).frame["reward"].iloc[-1] == 1.0
