"""The one JSON policy (NaN -> null, ±inf -> "inf"/"-inf", always valid JSON) and the one
number formatter of tables and reports (rlvr_plumbing.serialize)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlvr_plumbing.serialize import dumps, fmt_number, jsonable


def test_non_finite_numbers_follow_the_policy():
    assert jsonable(math.nan) is None and jsonable(np.float32("nan")) is None
    assert jsonable(math.inf) == "inf" and jsonable(-np.inf) == "-inf"
    assert jsonable(np.float64(0.5)) == 0.5 and type(jsonable(np.float64(0.5))) is float


def test_dumps_is_strict_json_that_json_loads_reads():
    value = {"ratio": math.inf, "neg": -math.inf, "missing": math.nan, "G": np.int64(8), "x": np.float32(0.25),
             "flag": np.True_, "arr": np.array([[1.0, np.nan], [np.inf, 2.0]]), "t": (1, 2), "s": {3},
             "nested": [{"v": np.float64(np.nan)}], "none": None, "text": "r̄", 3: "int key"}
    text = dumps(value)
    assert "NaN" not in text and "Infinity" not in text
    back = json.loads(text)
    assert back == {"ratio": "inf", "neg": "-inf", "missing": None, "G": 8, "x": 0.25, "flag": True,
                    "arr": [[1.0, None], ["inf", 2.0]], "t": [1, 2], "s": [3], "nested": [{"v": None}],
                    "none": None, "text": "r̄", "3": "int key"}
    assert dumps({"b": 1, "a": 2}, sort_keys=True) == '{"a": 2, "b": 1}'
    assert dumps([1], indent=1) == "[\n 1\n]"


def test_types_beyond_plain_json():
    @dataclasses.dataclass
    class Settings:
        lr: float = 0.5
        path: Path = Path("out/run")

    assert json.loads(dumps(Settings())) == {"lr": 0.5, "path": "out/run"}
    assert jsonable(Path("a/b")) == "a/b"
    assert jsonable(np.dtype("float32")) == "float32"
    assert jsonable(np.int8(-3)) == -3 and type(jsonable(np.uint64(3))) is int
    assert jsonable(np.bool_(False)) is False and jsonable(True) is True
    assert jsonable(np.array(2.5)) == 2.5            # 0-d array
    assert jsonable(Settings) == str(Settings)       # a class is not a dataclass instance
    assert jsonable(object) == "<class 'object'>"


def test_torch_scalars_if_installed():
    torch = pytest.importorskip("torch")
    assert jsonable(torch.tensor(1.5)) == 1.5
    assert jsonable(torch.tensor(float("inf"))) == "inf"
    assert json.loads(dumps({"d": torch.device("cpu")})) == {"d": "cpu"}


@pytest.mark.parametrize("x, kw, expect", [
    (None, {}, "—"), (math.nan, {}, "—"), (np.float32("nan"), {}, "—"), (math.inf, {}, "∞"), (-math.inf, {}, "-∞"),
    (2.0, {}, "2"), (0.123456789, {}, "0.123457"), (0.123456789, {"digits": 3}, "0.123"), (1e-7, {"digits": 3}, "1e-07"),
    (1234567, {}, "1234567"), (1234567, {"thousands": True}, "1,234,567"), (np.int64(42), {}, "42"),
    (True, {}, "True"), (np.True_, {}, "True"), ("text", {}, "text"), (np.float64(0.5), {}, "0.5"),
])
def test_fmt_number(x, kw, expect):
    assert fmt_number(x, **kw) == expect
