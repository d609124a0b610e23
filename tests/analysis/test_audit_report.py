"""analysis.audit.report: the rlvr-audit report (Markdown, self-contained HTML, strict JSON, PNGs)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pandas as pd
import pytest

from analysis import report as diff_report
from analysis.audit import metrics, report
from rlvr_theory import advantages, groups

PNG = b"\x89PNG\r\n\x1a\n"


def rollouts(n_steps: int = 40, n_groups: int = 8, G: int = 8, *, seed: int = 0, logged: str | None = "grpo",
             params: dict | None = None) -> pd.DataFrame:
    """A run in the canonical rollout table: solve rates that rise over the steps, the advantages
    of ``logged`` (with ``params``) in the log, or none."""
    rng = np.random.default_rng(seed)
    step = np.repeat(np.arange(n_steps) * 5, n_groups * G)
    group = np.tile(np.repeat(np.arange(n_groups), G), n_steps)
    mu = np.clip(rng.beta(1, 2, (n_steps, n_groups)) + np.linspace(0, 0.5, n_steps)[:, None], 0, 1)
    r = (rng.random((n_steps, n_groups, G)) < mu[..., None]).astype(float).ravel()
    A = (groups.advantages(advantages.get(logged, **(params or {})), r, step * 1000 + group) if logged
         else np.full(r.size, np.nan))
    return pd.DataFrame({"step": step, "group": group, "reward": r, "advantage": A, "length": np.nan,
                         "split": "train"})


def audited(frame: pd.DataFrame | None = None, **options) -> dict:
    options.setdefault("compare", ["dr_grpo", ("asym_grpo", {"delta": 0.5})])
    options.setdefault("taus", [0.01, 0.1])
    return metrics.audit(rollouts() if frame is None else frame, **options)


def hand_built(n: int = 3) -> dict:
    """A document with the documented keys only (no run summary, histogram or trends)."""
    steps = [{"step": s, "n_groups": 2, "reward_mean": 0.5, "solve_rate_mean": 0.5, "frac_all_correct": 0.0,
              "frac_all_wrong": 0.5, "m_S": 0.2, "m_F": 0.25, "sign_ratio": 0.8, "abs_adv_sum": 1.0,
              "pass_at_1": 0.5, "pass_at_G": 0.75, "n_eff": 3.0} for s in range(n)]
    return {"source": {"format": "table", "paths": ["run.csv"]}, "group_size": 4,
            "advantage": {"name": "grpo", "params": {}, "max_abs_error": 0.0}, "steps": steps, "compare": {}}


def _strict(text: str) -> dict:
    def bad(c):
        raise AssertionError(f"non-strict JSON constant {c}")
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def doc() -> dict:
    return audited()


def test_report_files_are_complete_and_self_contained(doc, tmp_path):
    out = report.write_report(doc, None, tmp_path / "rep")
    names = sorted(p.name for p in out.iterdir())
    for f in report.REPORT_FILES + ("reward.png", "zero_signal.png", "masses.png", "weights.png", "drift.png",
                                    "tail_miss.png", "schedule.png", "compare_masses.png", "solve_rate_hist.png"):
        assert f in names, f
    pngs = list(out.glob("*.png"))
    for png in pngs:
        assert png.read_bytes()[:8] == PNG
    html = (out / "report.html").read_text()
    srcs = re.findall(r"src='([^']*)'", html) + re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == len(pngs)
    for s in srcs:                                   # every image embedded and decodable, none linked
        assert s.startswith("data:image/png;base64,")
        assert base64.b64decode(s.split(",", 1)[1], validate=True)[:8] == PNG
    assert "<script" not in html and "href=" not in html and "<link" not in html
    assert _strict((out / "report.json").read_text()) == _strict(diff_report.to_json(doc))   # the document as is
    md = (out / "report.md").read_text()
    for png in pngs:
        assert f"]({png.name})" in md
    for block in re.findall(r"(\|.*\|\n\|(?:---\|)+\n(?:\|.*\|\n)+)", md):   # no unescaped '|' in cells
        lines = block.strip().split("\n")
        ncol = len(re.split(r"(?<!\\)\|", lines[0])) - 2
        for ln in lines[2:]:
            assert len(re.split(r"(?<!\\)\|", ln)) - 2 == ncol, ln


def test_sections_in_order_and_the_verdict_first(doc):
    blocks, images = report.render(doc)
    md = diff_report.render_markdown(report.TITLE, blocks)
    heads = re.findall(r"^## (.*)$", md, flags=re.M)
    assert heads == ["Verdict", "Run", "Per step", "Solve rates", "What if: other advantages on the same rewards",
                     "Series against step"]
    verdict = md.split("## Verdict", 1)[1].split("## Run", 1)[0]
    run = doc["summary"]
    assert f"Zero-signal groups: {report._pct(run['frac_all_correct'] + run['frac_all_wrong'])}" in verdict
    assert "Sign ratio m_S/m_F = 1 " in verdict and "sign-balanced" in verdict and "docs/categorical.md" in verdict
    assert "τ = 0.01" in verdict and "τ = 0.1" in verdict and "F-GRPO Lemma 3.1" in verdict
    assert "pass@1" in verdict and "pass@G (G = 8)" in verdict
    assert "reproduced by grpo" in verdict
    table = md.split("## Per step", 1)[1].split("### Over the run", 1)[0]   # first and last five steps
    assert "| 0 |" in table and "| 195 |" in table and "| … |" in table and "| 100 |" not in table
    assert "| asym_grpo(delta=0.5) |" in md and "| (0.4, 0.5] |" in md
    assert "solve_rate_hist.png" in images


@pytest.mark.parametrize("params,phrase", [({"delta": 2.0}, "success-heavy"), ({"delta": 0.5}, "failure-heavy"),
                                           ({"delta": 1.0}, "sign-balanced")])
def test_the_verdict_reads_the_sign_ratio_as_fade_does(params, phrase, monkeypatch):
    monkeypatch.setattr(report, "_plot", lambda *a, **k: None)       # the text only: no figures
    for d in (audited(rollouts(n_steps=6, logged="asym_grpo", params=params), compare=(), taus=()),
              audited(rollouts(n_steps=6, logged=None), advantage="asym_grpo", params=params, compare=(), taus=())):
        blocks, _ = report.render(d)
        text = " ".join(b[1] for b in blocks if b[0] == "p")
        assert phrase in text and f"m_S/m_F = {params['delta']:g} " in text
    assert "match no registry family" in text or "(--advantage)" in text


@pytest.mark.parametrize("p1,pG,phrase", [
    ((0.2, 0.6), (0.5, 0.55), "pass@1 rises faster than pass@G: the policy is sharpening"),
    ((0.2, 0.6), (0.5, 0.9), "pass@1 and pass@G rise together"),
    ((0.2, 0.6), (0.99, 1.0), "pass@G is saturated near 1"),
    ((0.2, 0.6), (0.8, 0.6), "sharpening at the cost of coverage"),
    ((0.4, 0.4), (0.8, 0.6), "pass@G falls"),
    ((0.5, 0.3), (0.8, 0.8), "pass@1 falls"),
    ((0.4, 0.4), (0.8, 0.8), "pass@1 is flat"),
])
def test_the_verdict_reads_the_pass_at_k_trend(p1, pG, phrase, monkeypatch):
    monkeypatch.setattr(report, "_plot", lambda *a, **k: None)
    d = hand_built(20)
    for i, st in enumerate(d["steps"]):
        st["pass_at_1"] = p1[0] + (p1[1] - p1[0]) * i / 19
        st["pass_at_G"] = pG[0] + (pG[1] - pG[0]) * i / 19
    text = " ".join(b[1] for b in report.render(d)[0] if b[0] == "p")
    assert phrase in text, text


def test_rendered_again_from_the_saved_json(doc, tmp_path, cheap_png):
    out = report.write_report(doc, None, tmp_path / "one")
    again = report.write_report(_strict((out / "report.json").read_text()), None, tmp_path / "two")
    assert (again / "report.md").read_text() == (out / "report.md").read_text()
    steps = metrics.step_table(rollouts(), compare=["dr_grpo"], taus=[0.01])
    blocks, images = report.render(doc, steps)        # a step table in place of doc["steps"]
    assert "compare_masses.png" in images


def test_runs_without_masses_with_unequal_groups_nan_rewards_and_validation_rows():
    f = rollouts(n_steps=12, logged=None)
    f.loc[f.index[:3], "reward"] = np.nan
    f = f.drop(f.index[(f.step == 5) & (f.group == 0)][:3])             # a group of 5 among groups of 8
    val = rollouts(n_steps=2, n_groups=2, logged=None, seed=1).assign(split="val")
    d = metrics.audit(pd.concat([f, val]).sort_values(["step", "group"], kind="stable"))
    blocks, images = report.render(d)
    md = diff_report.render_markdown(report.TITLE, blocks)
    assert "Sign ratio m_S/m_F: no value" in md and "none was chosen" in md
    assert "## By group size" in md and "unequal: 5 rollouts × 1 groups, 8 rollouts × 95 groups" in md
    assert "| no reward |" in md.split("## Per step", 1)[1].split("\n\n", 3)[2]
    assert "### Validation rollouts" in md
    assert "masses.png" not in images and "reward.png" in images


def test_a_document_with_only_the_documented_keys(tmp_path):
    out = report.write_report(hand_built(), None, tmp_path / "rep")
    md = (out / "report.md").read_text()
    assert "Sign ratio m_S/m_F = 0.8 " in md and "failure-heavy" in md and "reproduced by grpo" in md
    assert "The document holds no solve-rate histogram." in md
    assert "one point per step" in md                     # three steps: no rolling mean


def test_rolling_window():
    assert [report.rolling_window(n) for n in (1, 9, 10, 20, 40, 100, 10_000)] == [1, 1, 1, 3, 5, 11, 51]


def test_written_atomically_and_the_overwrite_policy(tmp_path, monkeypatch, cheap_png):
    doc = hand_built(12)
    out = tmp_path / "rep"

    def boom(*a, **k):
        raise RuntimeError("plot failed")
    monkeypatch.setattr(report, "_plot", boom)
    with pytest.raises(RuntimeError, match="plot failed"):
        report.write_report(doc, None, out)
    assert list(tmp_path.iterdir()) == []           # nothing, not even a temporary directory
    monkeypatch.undo()
    report.write_report(doc, None, out)
    (out / "marker.txt").write_text("old")
    report.write_report(doc, None, out)             # an earlier audit report is replaced
    assert not (out / "marker.txt").exists() and (out / "report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"^out: .* exists and is not empty .* pass --overwrite"):
        report.write_report(doc, None, other)
    assert (other / "mine.txt").read_text() == "keep me"
    diff = tmp_path / "diff"                         # another command's report is not ours to replace
    diff.mkdir()
    (diff / "report.json").write_text('{"checkpoints": []}')
    with pytest.raises(ValueError, match=r"^out: .* is not an rlvr-audit report"):
        report.write_report(doc, None, diff)
    report.write_report(doc, None, diff, overwrite=True)
    assert "steps" in _strict((diff / "report.json").read_text())
    report.write_report(doc, None, other, overwrite=True)
    assert not (other / "mine.txt").exists()
    with pytest.raises(ValueError, match=r"^out: .* is an existing file"):
        report.write_report(doc, None, other / "report.md")


@pytest.mark.parametrize("bad,msg", [
    ({"x": 1}, "doc must be the dict returned by analysis.audit.metrics.audit"),
    ({"source": {}, "steps": []}, "doc holds no steps"),
])
def test_bad_documents_are_refused_before_anything_is_written(tmp_path, bad, msg):
    with pytest.raises(ValueError, match=msg):
        report.write_report(bad, None, tmp_path / "rep")
    assert not (tmp_path / "rep").exists()
    with pytest.raises(ValueError, match="steps_frame must be a pandas DataFrame"):
        report.write_report(hand_built(), [1, 2], tmp_path / "rep")
    assert list(tmp_path.iterdir()) == []
