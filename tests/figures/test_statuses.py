"""The claim statuses of issue 31: ``depends`` and ``underpowered`` beside pass / explained /
not reproducible here / fail, the refusals of :class:`figures.registry.Claim`, their order in the
summaries and the ``tested_at`` settings shown after a note."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from figures import cli, registry
from figures.registry import NOT_HERE, Claim, FigureSpec

NAN = math.nan


@pytest.mark.parametrize(("kwargs", "status"), [
    ({"ours": 1.05}, "pass"),
    ({"ours": 1.05, "note": "n", "verdict": "depends"}, "pass"),  # a claim that holds passes whatever its verdict
    ({"ours": 2.0}, "fail"),
    ({"ours": 2.0, "note": "misprint"}, "explained"),
    ({"ours": 2.0, "note": "holds at lr 0.3 only", "verdict": "depends"}, "depends"),
    ({"ours": 2.0, "note": "2 s.e. = 0.07 > 0.03", "verdict": "underpowered"}, "underpowered"),
    ({"ours": NAN, "note": "needs 7B runs", "verdict": "underpowered"}, NOT_HERE),  # NaN wins over a verdict
    ({"ours": NAN, "note": "needs 7B runs"}, NOT_HERE),
    ({"ours": NAN}, "fail"),
])
def test_status_rules(kwargs, status):
    assert Claim("c", "s", 1.0, tol=0.1, **kwargs).status == status


@pytest.mark.parametrize("verdict", ["depends", "underpowered"])
def test_a_verdict_without_a_note_is_refused(verdict):
    with pytest.raises(ValueError, match=f"verdict='{verdict}' needs a note"):
        Claim("c", "s", 1.0, 2.0, 0.1, verdict=verdict)


@pytest.mark.parametrize("verdict", ["explained", "fail", "pass", "Depends", NOT_HERE])
def test_an_unknown_verdict_is_refused_with_the_allowed_values(verdict):
    with pytest.raises(ValueError, match=r"verdict: .* is not allowed; allowed: '', 'depends', 'underpowered'"):
        Claim("c", "s", 1.0, 2.0, 0.1, note="n", verdict=verdict)


def test_status_order_and_meanings():
    assert registry.STATUSES == ("pass", "depends", "explained", "underpowered", NOT_HERE, "fail")
    assert set(registry.STATUS_MEANING) == set(registry.STATUSES)
    assert "2 s.e." in registry.STATUS_MEANING["underpowered"]


def test_tested_at_is_shown_after_the_note():
    assert Claim("c", "s", 1.0, 2.0, 0.1, note="misprint").shown_note == "misprint"
    assert Claim("c", "s", 1.0, 2.0, 0.1, note="misprint", tested_at="lr 0.1").shown_note == \
        "misprint. Tested at: lr 0.1."
    assert Claim("c", "s", 1.0, 1.0, 0.1, tested_at="lr ∈ {0.1, 0.3}.").shown_note == "Tested at: lr ∈ {0.1, 0.3}."


def test_summary_counts_every_status_in_order(tmp_path, capsys):
    """Two of each new status, one of the others: the summary line of `rlvr-figures check` and the
    Markdown count them in the order of STATUSES; the table shows the tested_at settings."""
    claims = [Claim("p", "s", 1.0, 1.0, 0.0),
              Claim("d1", "s", 1.0, 0.0, 0.1, note="holds at lr 0.3", verdict="depends", tested_at="lr ∈ {0.1, 0.3}"),
              Claim("d2", "s", 1.0, 0.0, 0.1, note="holds at G 4", verdict="depends"),
              Claim("e", "s", 1.0, 0.0, 0.1, note="misprint"),
              Claim("u1", "s", 1.0, 0.0, 0.1, note="2 s.e. 0.2 > 0.1", verdict="underpowered"),
              Claim("u2", "s", 1.0, 0.0, 0.1, note="2 s.e. 0.3 > 0.1", verdict="underpowered"),
              Claim("n", "s", 1.0, NAN, 0.1, note="7B")]
    spec = FigureSpec("zz_test_statuses", "t", "s", lambda: pd.DataFrame({"x": [1.0]}),
                      lambda df: __import__("matplotlib.pyplot").pyplot.figure(), lambda df: claims)
    doc = tmp_path / "r.md"
    with registry.registered(spec):
        assert cli.main(["check", "zz_test_statuses", "--out", str(tmp_path / "o"), "--doc", str(doc)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.endswith("; 7 claims: 1 pass, 2 depends, 1 explained, 2 underpowered, 1 not reproducible here, 0 fail")
    text = doc.read_text()
    assert "Summary: 7 claims — 1 pass, 2 depends, 1 explained, 2 underpowered, 1 not reproducible here, 0 fail." in text
    assert "| d1 | s | 1 | 0 | 0.1 | depends | holds at lr 0.3. Tested at: lr ∈ {0.1, 0.3}. |" in text
    assert "| u2 | s | 1 | 0 | 0.1 | underpowered | 2 s.e. 0.3 > 0.1 |" in text
    for s in registry.STATUSES:  # the preamble defines every status, in order
        assert f"- **{s}**: " in text
    assert [text.index(f"- **{s}**: ") for s in registry.STATUSES] == sorted(
        text.index(f"- **{s}**: ") for s in registry.STATUSES)
    assert "[protocol.md](protocol.md)" in text
    parsed = registry.parse_reproduction_markdown(text)
    assert parsed.status.tolist() == [c.status for c in claims]
