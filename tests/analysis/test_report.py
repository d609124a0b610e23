"""analysis.report: Markdown / self-contained HTML / strict JSON / PNGs, written atomically."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import pytest

from analysis import diff as weight_diff
from analysis import report
from tests.analysis import tiny_checkpoints as tc


@pytest.fixture(scope="module")
def doc2():
    """A two-run diff (alignment and clustering present), computed once."""
    def make(p: Path):
        base = tc.qwen2_base()
        rl, _ = tc.qwen2_planted()
        tc.plant(base, p, head=tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), [1.0, 0.5], 21),
                 deltas=tc.block_deltas(base, seed=700, layers=[0]))
        return weight_diff.diff(str(base), [str(rl), str(p)], progress=False)
    return tc.cached("report_doc2", make)


def _strict(text: str) -> dict:
    def bad(c):
        raise AssertionError(f"non-strict JSON constant {c}")
    return json.loads(text, parse_constant=bad)


def test_report_files_are_complete_and_self_contained(doc2, tmp_path):
    out = report.write_report(doc2, tmp_path / "rep")
    names = sorted(p.name for p in out.iterdir())
    for f in report.REPORT_FILES + ("head_spectrum.png", "l2_share.png", "layer_s1_s2.png", "head_u.png",
                                    "density.png", "alignment.png", "clustering.png"):
        assert f in names, f
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    srcs = re.findall(r"src='([^']*)'", html) + re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == len(list(out.glob("*.png")))
    for s in srcs:   # every image embedded, none linked
        assert s.startswith("data:image/png;base64,")
        assert base64.b64decode(s.split(",", 1)[1])[:4] == b"\x89PNG"
    assert "<script" not in html and "href=" not in html and "<link" not in html
    js = _strict((out / "report.json").read_text())
    assert js["checkpoints"][0]["output_head"]["s1_s2"] == pytest.approx(
        doc2["checkpoints"][0]["output_head"]["s1_s2"], rel=1e-12)
    md = (out / "report.md").read_text()
    h = doc2["checkpoints"][0]["output_head"]
    assert report._fmt(h["s1_s2"]) in md and report._pct(h["rank1_fraction"]) in md
    assert "Cross-checkpoint alignment" in md and "cosine of ΔW and clustering" in md
    for png in out.glob("*.png"):
        assert f"]({png.name})" in md
    # a Markdown table row has as many cells as its header (no unescaped '|' in cells)
    for block in re.findall(r"(\|.*\|\n\|(?:---\|)+\n(?:\|.*\|\n)+)", md):
        lines = block.strip().split("\n")
        ncol = len(re.split(r"(?<!\\)\|", lines[0])) - 2
        for ln in lines[2:]:
            assert len(re.split(r"(?<!\\)\|", ln)) - 2 == ncol, ln
    assert "w" in md and "+ token" in md   # decoded top tokens table


def test_json_is_strict_with_non_finite_values():
    """One JSON policy (rlvr_plumbing.serialize): NaN → null, ±inf → "inf"/"-inf"."""
    assert report.to_json({"a": math.inf, "b": [1.0, math.nan], "c": {"d": -math.inf}}) == \
        json.dumps({"a": "inf", "b": [1.0, None], "c": {"d": "-inf"}}, indent=1)
    _strict(report.to_json({"a": math.inf, "b": math.nan}))


def test_table_numbers_use_the_shared_formatter():
    """rlvr_plumbing.serialize.fmt_number with the report's look: 4 significant digits,
    thousands separators for integers, — for a missing value, ∞ for an infinite one."""
    assert [report._fmt(x) for x in (0.123456, 1234567, 16.0, None, math.nan, math.inf, 2.5e-7)] == \
        ["0.1235", "1,234,567", "16", "—", "—", "∞", "2.5e-07"]
    assert report._pct(0.0123456) == "1.23%" and report._pct(None) == "—"


def test_written_atomically_and_existing_reports_replaced(doc2, tmp_path, monkeypatch, cheap_png):
    out = tmp_path / "rep"

    def boom(doc):
        raise RuntimeError("plot failed")
    monkeypatch.setattr(report, "_plot_clustering", boom)
    with pytest.raises(RuntimeError, match="plot failed"):
        report.write_report(doc2, out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []          # no temporary directory left behind
    monkeypatch.undo()
    report.write_report(doc2, out)
    (out / "marker.txt").write_text("old")
    report.write_report(doc2, out)                 # a previous report directory is replaced
    assert not (out / "marker.txt").exists() and (out / "report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"^out: .* exists and holds no report.json"):
        report.write_report(doc2, other)
    assert (other / "mine.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match=r"^out must be a directory path"):
        report.write_report(doc2, other / "mine.txt")
    with pytest.raises(ValueError, match=r"^doc must be the dict returned by"):
        report.write_report({"x": 1}, tmp_path / "r2")


def test_single_checkpoint_report_and_rerender_from_json(tmp_path):
    rl, _ = tc.qwen2_planted()
    doc = weight_diff.diff(str(tc.qwen2_base()), [str(rl)], progress=False, layers="head")
    assert doc["alignment"] is None and doc["clustering"] is None
    out = report.write_report(doc, tmp_path / "one")
    assert not (out / "alignment.png").exists() and not (out / "clustering.png").exists()
    assert not (out / "layer_s1_s2.png").exists()   # no per-layer SVD with layers="head"
    again = report.write_report(_strict((out / "report.json").read_text()), tmp_path / "two")
    assert (again / "report.md").read_text().replace("/two", "/one") == (out / "report.md").read_text()


def test_hidden_states_report(tmp_path):
    doc = {"checkpoint": "ck", "device": "cpu", "n_trajectories": {"success": 2, "failure": 3},
           "n_skipped_trajectories": 0, "n_tokens": {"success": 8968, "failure": 54700},
           "u1_energy_fraction": 0.5, "rho_perp": {"success": 0.3, "failure": 0.08, "ratio": 3.75},
           "residual_norm": {"success": 1.0, "failure": 0.75}, "residual_ratio": 0.75,
           "clt_baseline": math.sqrt(8968 / 54700), "ratio_over_baseline": 0.75 / math.sqrt(8968 / 54700),
           "paper": {"clt_baseline": 0.40, "n_success": 8968, "n_failure": 54700,
                     "residual_ratio_measured": [0.73, 0.79], "rho_ratio": [3, 4]}}
    out = report.write_hidden_states_report(doc, tmp_path / "hs")
    assert sorted(p.name for p in out.iterdir()) == ["hidden_states.html", "hidden_states.json",
                                                     "hidden_states.md", "hidden_states.png"]
    md = (out / "hidden_states.md").read_text()
    assert "0.4049" in md and "3.75" in md and "0.73-0.79" in md
    assert "data:image/png;base64," in (out / "hidden_states.html").read_text()
    with pytest.raises(ValueError, match=r"^doc must be the dict returned by analysis.hidden_states"):
        report.write_hidden_states_report({}, tmp_path / "x")
