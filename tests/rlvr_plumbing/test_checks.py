"""The one validation policy (rlvr_plumbing.checks): integers, numbers, probabilities, choices,
arrays and random sources, with messages that name the argument and show the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr_plumbing import checks


# ----------------------------------------------------------------- integer
@pytest.mark.parametrize("value, expect", [
    (8, 8), (np.int64(8), 8), (np.int32(8), 8), (np.uint8(8), 8), (8.0, 8), (np.float64(8.0), 8),
    (np.float32(8.0), 8), (2.0**40, 2**40),
])
def test_integer_accepts_ints_numpy_ints_and_integral_floats(value, expect):
    out = checks.integer("G", value, low=1)
    assert out == expect and type(out) is int


@pytest.mark.parametrize("value", [8.5, float("nan"), float("inf"), "8", None, True, False, np.True_, [8],
                                   np.array([8]), 1 + 0j])
def test_integer_refuses_everything_else(value):
    with pytest.raises(ValueError, match=r"^G must be an integer >= 1, got "):
        checks.integer("G", value, low=1)


def test_integer_ranges_and_messages():
    assert checks.integer("k", 0, low=0, high=3) == 0 and checks.integer("k", 3, low=0, high=3) == 3
    with pytest.raises(ValueError, match=r"^k must be an integer >= 0 and <= 3, got 4$"):
        checks.integer("k", 4, low=0, high=3)
    with pytest.raises(ValueError, match=r"^k must be an integer <= 3, got 4$"):
        checks.integer("k", 4, high=3)
    with pytest.raises(ValueError, match=r"^k must be an integer, got 'x'$"):
        checks.integer("k", "x")
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 1, got 2.5$"):
        checks.integer("steps", 2.5, low=1)
    assert checks.integer("seed", None, allow_none=True) is None
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0 \(or None\), got -1$"):
        checks.integer("seed", -1, low=0, allow_none=True)
    with pytest.raises(ValueError, match=r"^G must be an integer >= 1, got None$"):
        checks.integer("G", None, low=1)


# ------------------------------------------------------------------ number
@pytest.mark.parametrize("value", [0.5, 1, np.float32(0.5), np.float64(0.5), np.int64(1), np.int8(1)])
def test_number_accepts_real_scalars_and_returns_a_float(value):
    out = checks.number("lr", value)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [True, np.False_, float("nan"), np.nan, "0.5", None, [0.5], 1j])
def test_number_refuses_bool_nan_and_non_numbers(value):
    with pytest.raises(ValueError, match=r"^lr must be a finite number, got "):
        checks.number("lr", value)


def test_number_ranges_open_and_closed():
    assert checks.number("x", 0, low=0) == 0.0
    with pytest.raises(ValueError, match=r"^x must be a finite number > 0, got 0$"):
        checks.number("x", 0, low=0, low_open=True)
    assert checks.number("x", 1, high=1) == 1.0
    with pytest.raises(ValueError, match=r"^x must be a finite number >= 0 and < 1, got 1$"):
        checks.number("x", 1, low=0, high=1, high_open=True)
    with pytest.raises(ValueError, match=r"^x must be a finite number >= 0.5, got 0.25$"):
        checks.number("x", 0.25, low=0.5)


def test_number_infinity_only_when_allowed():
    with pytest.raises(ValueError, match=r"^x must be a finite number, got inf$"):
        checks.number("x", math.inf)
    assert checks.number("x", math.inf, allow_inf=True) == math.inf
    assert checks.number("x", -math.inf, allow_inf=True) == -math.inf
    with pytest.raises(ValueError, match=r"^x must be a number >= 0, got -inf$"):
        checks.number("x", -math.inf, low=0, allow_inf=True)
    with pytest.raises(ValueError, match=r"^x must be a number, got nan$"):
        checks.number("x", math.nan, allow_inf=True)  # NaN is never allowed
    assert checks.number("x", None, allow_none=True) is None


def test_probability():
    assert checks.probability("p", 0) == 0.0 and checks.probability("p", 1) == 1.0
    assert checks.probability("p", np.float32(0.25)) == 0.25
    with pytest.raises(ValueError, match=r"^p must be a finite number >= 0 and <= 1, got 1.5$"):
        checks.probability("p", 1.5)
    with pytest.raises(ValueError, match=r"^p must be a finite number > 0 and < 1, got 1$"):
        checks.probability("p", 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"^p must be a finite number >= 0 and <= 1, got True$"):
        checks.probability("p", True)


# ------------------------------------------------------------------ choice
def test_choice_returns_the_allowed_entry():
    assert checks.choice("fmt", "csv", ("markdown", "csv")) == "csv"
    out = checks.choice("ddof", 1.0, (0, 1))
    assert out == 1 and type(out) is int
    assert checks.choice("ddof", np.int64(0), (0, 1)) == 0
    assert checks.choice("flag", np.True_, (True, False)) is True
    assert checks.choice("x", None, (None, "a")) is None


@pytest.mark.parametrize("value, allowed", [
    ("tsv", ("markdown", "csv")), (1, (True, False)), (0, (True, False)), (True, (0, 1)), (np.False_, (0, 1)),
    (2, (0, 1)), (0.5, (0, 1)), ([1], (0, 1)), (np.array([0, 1]), (0, 1)), ({"a": 1}, ("a",)), (float("nan"), (0, 1)),
])
def test_choice_refuses_with_the_allowed_values(value, allowed):
    with pytest.raises(ValueError, match=r"^which must be one of .*; got "):
        checks.choice("which", value, allowed)


def test_choice_message_lists_the_values():
    with pytest.raises(ValueError, match=r"^format must be one of 'markdown', 'csv'; got 'tsv'$"):
        checks.choice("format", "tsv", ["markdown", "csv"])


# ------------------------------------------------------------------- array
def test_array_converts_and_checks_every_entry():
    a = checks.array("N", [1, 2.0, np.int64(4)], integer=True, low=1)
    assert a.dtype == np.float64 and a.tolist() == [1.0, 2.0, 4.0]
    with pytest.raises(ValueError, match=r"^N must contain only integers >= 1, got 2.5$"):
        checks.array("N", [1, 2.5], integer=True, low=1)
    with pytest.raises(ValueError, match=r"^N must contain only integers >= 1, got 0.0$"):
        checks.array("N", np.array([4, 0]), integer=True, low=1)
    with pytest.raises(ValueError, match=r"^x must contain only finite numbers, got nan$"):
        checks.array("x", [0.0, np.nan])
    with pytest.raises(ValueError, match=r"^x must contain only finite numbers, got inf$"):
        checks.array("x", [0.0, np.inf])
    assert checks.array("x", [0.0, np.inf], allow_inf=True)[1] == np.inf
    with pytest.raises(ValueError, match=r"^x must contain only numbers, got nan$"):
        checks.array("x", [np.inf, np.nan], allow_inf=True)
    with pytest.raises(ValueError, match=r"^p must contain only finite numbers >= 0 and <= 1, got 1.5$"):
        checks.array("p", [[0.2, 1.5]], low=0, high=1)
    with pytest.raises(ValueError, match=r"^p must contain only finite numbers > 0 and < 1, got 0.0$"):
        checks.array("p", [0.0, 0.5], low=0, high=1, low_open=True, high_open=True)


def test_array_shape_and_type_checks():
    assert checks.array("x", 3.0).shape == ()
    with pytest.raises(ValueError, match=r"^x must have 2 axis\(es\), got shape \(3,\)$"):
        checks.array("x", [1, 2, 3], ndim=2)
    with pytest.raises(ValueError, match=r"^x must have at least 1 axis\(es\), got shape \(\)$"):
        checks.array("x", 1.0, min_ndim=1)
    with pytest.raises(ValueError, match=r"^x must not be empty$"):
        checks.array("x", [], nonempty=True)
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got booleans$"):
        checks.array("x", np.array([True, False]))
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got booleans$"):
        checks.array("x", True)
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got text$"):
        checks.array("x", [["a", "b"]])
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got text$"):
        checks.array("x", ["1", "0"])  # numeric strings are text too, not numbers
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got booleans$"):
        checks.array("x", [True, False])  # a plain list of bools, not only a bool ndarray
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got list$"):
        checks.array("x", [[1, 2], [3]])  # ragged
    with pytest.raises(ValueError, match=r"^x must be a numeric array, got dict$"):
        checks.array("x", {"a": 1})


# ----------------------------------------------------------- random_source
def test_random_source():
    g = np.random.default_rng(5)
    assert checks.random_source("seed", g) is g
    a, b = checks.random_source("seed", 7), checks.random_source("seed", np.int64(7))
    assert a.integers(1 << 30) == b.integers(1 << 30)
    assert checks.random_source("seed", 7.0).integers(1 << 30) == np.random.default_rng(7).integers(1 << 30)
    assert isinstance(checks.random_source("seed", None), np.random.Generator)
    for bad in (-1, 1.5, True, "7", np.random.RandomState(0)):
        with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got "):
            checks.random_source("seed", bad)


def test_range_text():
    assert checks.range_text() == ""
    assert checks.range_text(0, 1) == ">= 0 and <= 1"
    assert checks.range_text(0.5, None, low_open=True) == "> 0.5"
    assert checks.range_text(None, 1e-3, high_open=True) == "< 0.001"
