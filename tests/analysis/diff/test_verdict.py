"""The checkpoint-diff verdict: :func:`analysis.report.fade_regime` and Inner × L.

Expected values are typed from FADE's Sec. 5 table and text (the edges, each row's votes), or
computed with numpy from the planted ΔW (Inner × L), never taken from the code under test.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from analysis import report as rp
from analysis.diff import cli as diff_cli
from tests.analysis import tiny_checkpoints as tc

FB, SB = "failure-biased", "sign-balanced"


def _ck(oh, r1, s12, inner_x_l, **extra):
    """A checkpoint entry in table units (%, ratio), as the diff document holds it (fractions)."""
    h = {"l2_share": None if oh is None else oh / 100, "rank1_fraction": None if r1 is None else r1 / 100,
         "s1_s2": s12}
    return {"output_head": h, "inner_l2_share_x_layers": None if inner_x_l is None else inner_x_l / 100, **extra}


def _votes(v):
    return [x["vote"] for x in v["votes"]]


def test_the_edges_are_fades_least_extreme_values_of_each_stated_regime():
    # typed from the paper: OH sym "<10", H*=1.3 30k 72.7; r1 sym 61-62, asym 78-96; s1/s2 H*=0.5 10k 4.10,
    # H*=1.3 30k 5.77; Inner sym ~3.2, H*=1.3 30k 0.96, times 28 blocks (Qwen 2.5 7B)
    want = {"OH": (10, 72.7), "r1": (62, 78), "s1/s2": (4.10, 5.77), "Inner×L": (3.2 * 28, 0.96 * 28)}
    got = rp.verdict_edges()
    for m, (sb, fb) in want.items():
        assert got[m][SB] == pytest.approx(sb, rel=1e-12) and got[m][FB] == pytest.approx(fb, rel=1e-12), m
    assert rp.FADE_LAYERS == 28


def test_fade_table_transcription_adds_up_with_28_blocks():
    """OH + 28·Inner ≈ 98-100 % on every FADE row (the rest: embeddings, norms): the table's Inner is a
    mean block share and the model has 28 blocks."""
    for label, oh, _s12, _r1, inner in rp.FADE_SEC5_TABLE[:7]:
        oh_v = oh[0] if isinstance(oh, tuple) else oh
        inner_v = inner[0] if isinstance(inner, tuple) else inner
        assert 98.0 <= oh_v + 28 * inner_v <= 100.0, label


@pytest.mark.parametrize("oh,r1,s12,inner_l,regime", [
    (90, 87, 7.5, 0.3 * 28, FB),             # inside every failure-biased range
    (80, 96, 8.51, 20, FB),                  # beyond the edges on the failure side
    (5, 61.5, 3.8, 3.2 * 28, SB),            # inside every sign-balanced range
    (1, 20, 1.2, 99, SB),                    # beyond the edges on the sign-balanced side
])
def test_values_inside_a_fade_range_read_that_regime(oh, r1, s12, inner_l, regime):
    v = rp.fade_regime(_ck(oh, r1, s12, inner_l))
    assert v["regime"] == regime and v["reading"] == (rp.FAILURE_BIASED if regime == FB else rp.SIGN_BALANCED)
    assert _votes(v) == [regime] * 4
    assert v["votes_text"] == ", ".join(f"{m} → {regime}" for m in ("OH", "r1", "s1/s2", "Inner×L"))


# each FADE row: its votes by hand against the edges above, and the verdict (regime or None)
_ROWS = [
    ([SB, SB, SB, SB], SB),                  # H*=0.5 10k: 6.1, 38.7, 4.10, 92.96 (paper: full-rank, sign-balanced end)
    ([SB, SB, SB, SB], SB),                  # H*=0.5 33k: 6.3, 54.4, 3.84, 92.96
    (["between", SB, SB, "between"], None),  # H*=1.0 10k: 13.2, 55.9, 3.51, 85.96 (paper: no side)
    (["between", FB, "between", "between"], None),  # H*=1.0 40k: 66.9, 88.2, 5.34, 32.76 ("moderate")
    (["between", "between", SB, "between"], None),  # H*=1.3 10k: 23.9, 68.3, 3.25, 75.32
    ([FB, FB, FB, FB], FB),                  # H*=1.3 30k: "reproduces the rank-1 collapse"
    ([FB, FB, FB, FB], FB),                  # asymmetric runs
    ([SB, SB, SB, SB], SB),                  # symmetric runs
]


@pytest.mark.parametrize("i", range(len(rp.FADE_SEC5_TABLE)))
def test_fades_own_rows(i):
    label, oh, s12, r1, inner = rp.FADE_SEC5_TABLE[i]

    def one(x, pick):
        return pick(x) if isinstance(x, tuple) else x
    # a range row at each of its two ends (the symmetric OH "<10" at 9.9 and 0)
    for pick in ((lambda x: x[0]), (lambda x: min(x[1], 9.9) if x == (0, 10) else x[1])):
        v = rp.fade_regime(_ck(one(oh, pick), one(r1, pick), one(s12, pick), 28 * one(inner, pick)))
        votes, regime = _ROWS[i]
        assert _votes(v) == votes, (label, v["votes_text"])
        assert v["regime"] == regime, (label, v["reading"])
        if i in rp.FADE_STATED_REGIMES:
            assert regime == rp.FADE_STATED_REGIMES[i]
        if regime is None:
            assert v["reading"].startswith("cannot classify: between FADE's ranges: ")


def test_between_the_ranges_names_each_metric_and_where_it_sits():
    v = rp.fade_regime(_ck(40, 70, 5.0, 50))
    assert v["regime"] is None and _votes(v) == ["between"] * 4
    r = v["reading"]
    assert r.startswith("cannot classify: between FADE's ranges: ")
    for part in ("OH 40 % (sign-balanced ≤ 10, failure-biased ≥ 72.7)", "r1 70 % (sign-balanced ≤ 62, "
                 "failure-biased ≥ 78)", "s1/s2 5 (sign-balanced ≤ 4.1, failure-biased ≥ 5.77)",
                 "Inner×L 50 % (sign-balanced ≥ 89.6, failure-biased ≤ 26.9)",
                 "none of the 4 readable metrics votes for a regime"):
        assert part in r, (part, r)
    v = rp.fade_regime(_ck(40, 90, 7.0, 50))       # two for failure-biased, two between: no strict majority
    assert v["regime"] is None and "votes for failure-biased: 2 of 4 readable metrics" in v["reading"]


def test_disagreeing_metrics_do_not_commit():
    v = rp.fade_regime(_ck(95, 50, 7.0, 5))       # r1 alone says sign-balanced
    assert v["regime"] is None and _votes(v) == [FB, SB, FB, FB]
    assert v["reading"].startswith("cannot classify: the metrics disagree (")
    assert "r1 50 % → sign-balanced" in v["reading"] and "OH 95 % → failure-biased" in v["reading"]


def test_no_head_update_reads_nothing():
    for c in (_ck(0, None, None, 100), {"output_head": {}}, _ck(0, None, None, None)):
        v = rp.fade_regime(c)
        assert v["regime"] is None and v["votes"] == []
        assert v["reading"] == "cannot classify: no output-head update (ΔW_head = 0, r1 undefined)"


def test_a_head_update_at_the_rounding_floor_reads_nothing():
    fb = dict(oh=90, r1=90, s12=8.0, inner_x_l=8)
    v = rp.fade_regime(_ck(**fb, dtype_differs=True, rounding_floor={"ratio_to_global_l2": 0.8}))
    assert v["regime"] is None and "rounding floor" in v["reading"] and "--cast" in v["reading"]
    v = rp.fade_regime(_ck(**fb, dtype_differs=True, rounding_floor={"ratio_to_global_l2": 0.2}))
    assert v["regime"] == FB


def test_a_large_head_leaves_oh_and_inner_unread():
    # the head holds 20 % of the entries (> 10 %): OH and Inner × L are not read
    big = {"n_entries": 1000}
    c = _ck(95, 90, 8.0, 4, **big)
    c["output_head"]["shape"] = [20, 10]
    v = rp.fade_regime(c)
    assert _votes(v) == ["not read", FB, FB, "not read"] and v["regime"] == FB
    assert "the head holds 20% of the entries" in v["votes"][0]["why"]
    c = _ck(95, 90, 5.0, 4, **big)          # s1/s2 between: 1 of 2, no strict majority
    c["output_head"]["shape"] = [20, 10]
    v = rp.fade_regime(c)
    assert v["regime"] is None and "not read: OH (the head holds 20%" in v["reading"]
    c = _ck(95, 90, 8.0, 4, n_entries=10000)    # 2 % of the entries: all four read
    c["output_head"]["shape"] = [20, 10]
    assert _votes(rp.fade_regime(c)) == [FB] * 4


def test_early_steps_read_no_failure_biased_head_shape():
    v = rp.fade_regime(_ck(95, 90, 8.0, 4, step=200))
    assert _votes(v) == [FB, "not read", "not read", FB] and v["regime"] is None
    assert "neither r1 nor s1/s2 can be read" in v["reading"] and "FADE Table 9a" in v["reading"]
    assert rp.fade_regime(_ck(95, 90, 8.0, 4, step=501))["regime"] == FB
    assert rp.fade_regime(_ck(5, 50, 2.0, 93, step=20))["regime"] == SB      # a spread head is read early
    assert rp.fade_regime(_ck(95, 90, None, 4))["votes"][2]["value"] == float("inf")   # σ2 = 0: exactly rank 1


# ------------------------------------------------------------ end to end on planted checkpoints
def _small_head_base():
    """Qwen2, 3 blocks, vocab 64: the head holds 3.4 % of the entries (≤ 10 %, so OH and Inner × L are read)."""
    return tc.cached("verdict_small_head", lambda p: tc.build(p, "qwen2", vocab=64, hidden=64, layers=3))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A rank-1 dominated and a spread update of :func:`_small_head_base`, diffed once by ``rlvr-diff``
    (its report directory and printed summary)."""
    tmp = tmp_path_factory.mktemp("verdict")
    base = _small_head_base()
    # rank-1 dominated head: σ = 4 then 20 × 0.05: r1 = 16/16.05 = 99.7 %, s1/s2 = 80; tiny blocks: OH ≈ 99.97 %
    tc.plant(base, tmp / "fb", head=tc.spectrum_matrix((64, 64), [4.0] + [0.05] * 20, 1),
             deltas=tc.block_deltas(base, sigmas=(0.003, 0.001)))
    # spread: flat head σ = 0.05 × 40 (r1 = 2.5 %, s1/s2 = 1); every block matrix σ = (0.3, 0.1):
    # ‖ΔW_head‖² = 0.1 against 21 × 0.1 in the blocks: OH = 1/22 = 4.5 %, Inner × L = 21/22 = 95.5 %
    sb = tc.plant(base, tmp / "sb", head=tc.spectrum_matrix((64, 64), [0.05] * 40, 2), deltas=tc.block_deltas(base))
    assert len([k for k in sb if ".layers." in k]) == 21
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = diff_cli.main([str(base), str(tmp / "fb"), str(tmp / "sb"), "--out", str(tmp / "rep"), "--threads", "1"])
    assert rc == 0
    doc = json.loads((tmp / "rep" / "report.json").read_text())
    return base, tmp, doc, (tmp / "rep" / "report.md").read_text(), buf.getvalue()


def test_inner_x_layers_is_the_blocks_share_of_the_update(planted):
    base, tmp, doc, _md, _out = planted
    for c, name in zip(doc["checkpoints"], ("fb", "sb")):
        d = tc.stored_delta(base, tmp / name)           # ΔW as stored (float64 numpy)
        total = sum(float(np.sum(x * x)) for x in d.values())
        blocks = sum(float(np.sum(x * x)) for k, x in d.items() if ".layers." in k)
        # float64 sums of ~1e5 squares on each side: agree to ~1e-12 relative; 1e-9 leaves room
        assert c["inner_l2_share_x_layers"] == pytest.approx(blocks / total, rel=1e-9)
        assert c["inner_l2_share_x_layers"] == pytest.approx(3 * c["inner_l2_share_mean"], rel=1e-12)


def test_planted_rank1_head_reads_failure_biased_and_spread_update_sign_balanced(planted):
    _base, _tmp, doc, md, out = planted
    cf, cs = doc["checkpoints"]
    assert cf["output_head"]["l2_share"] >= 0.9
    assert cs["output_head"]["l2_share"] == pytest.approx(1 / 22, rel=1e-5)      # float32 storage of ΔW
    assert cs["inner_l2_share_x_layers"] == pytest.approx(21 / 22, rel=1e-5)
    vf, vs = rp.fade_regime(cf), rp.fade_regime(cs)
    assert _votes(vf) == [FB] * 4 and vf["reading"] == rp.FAILURE_BIASED
    assert _votes(vs) == [SB] * 4 and vs["reading"] == rp.SIGN_BALANCED
    verdict = md.split("\n## ")[1]
    assert rp.FAILURE_BIASED in verdict and rp.SIGN_BALANCED in verdict and "Inner × L" in verdict
    assert "OH → failure-biased, r1 → failure-biased, s1/s2 → failure-biased, Inner×L → failure-biased" in verdict
    assert "Verdict rule: " in verdict
    assert f"verdict: {rp.FAILURE_BIASED}" in out and f"verdict: {rp.SIGN_BALANCED}" in out


def test_report_json_holds_each_checkpoints_verdict():
    """report.json carries fade_regime of every checkpoint; the document passed in is not changed."""
    c_fail = {"output_head": {"l2": 1.0, "l2_share": 0.95, "rank1_fraction": 0.9, "s1_s2": 7.0},
              "inner_l2_share_x_layers": 0.05}
    doc = {"checkpoints": [c_fail], "base": "b"}
    out = json.loads(rp.to_json(rp.with_verdicts(doc)))
    assert out["checkpoints"][0]["verdict"]["regime"] == "failure-biased"
    assert out["checkpoints"][0]["verdict"]["reading"] == rp.fade_regime(c_fail)["reading"]
    assert "verdict" not in doc["checkpoints"][0]
