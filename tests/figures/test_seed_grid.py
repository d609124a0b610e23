"""The verdict rules of the tiny-trainer figures under the learning-rate grid (issue 31):
figures.paper._seed_grid, the collapse claims of agrae_table5, the N = 2 note of fgrpo_table2, the
pass@k claims of fade_fig9, and the CSV plumbing of examples/seed_experiments.py.  Synthetic run
tables with planted means and spreads; expected values computed by hand (fast: no figure is made,
no training runs)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from figures.paper import _seed_grid as sg
from figures.paper import agrae_table5, fade_fig9, fgrpo_table2

ROOT = Path(__file__).resolve().parents[2]


def _runs(cells: dict[float, dict[str, list[float]]], col: str = "pass@1", steps: int = 60) -> pd.DataFrame:
    """One row per planted value: ``cells[lr][variant]`` lists the per-seed values of ``col``."""
    rows = [{"variant": v, "seed": i, "lr": lr, "steps": steps, col: x}
            for lr, per in cells.items() for v, xs in per.items() for i, x in enumerate(xs)]
    return pd.DataFrame(rows)


def _claim(runs, pairs, **kw):
    agg = sg.aggregate(runs, {"pass1": "pass@1"})
    return sg.direction_claim("A above B", "paper", agg, pairs, "pass1", "pass@1", **kw)


def test_aggregate_mean_and_standard_error_by_hand():
    runs = _runs({3e-4: {"A": [0.1, 0.2, 0.6], "B": [0.5, 0.5, 0.5, 0.9]}})
    agg = sg.aggregate(runs, {"pass1": "pass@1"}).set_index("variant")
    assert agg.loc["A", "runs"] == 3 and agg.loc["B", "runs"] == 4
    assert agg.loc["A", "pass1"] == pytest.approx(0.3, abs=1e-12)
    # s.e. with ddof = 1: sqrt(((0.2)^2 + (0.1)^2 + (0.3)^2) / 2 / 3) = sqrt(0.14 / 6)
    assert agg.loc["A", "pass1_se"] == pytest.approx(math.sqrt(0.14 / 6), rel=1e-12)
    # B: mean 0.6, deviations -0.1, -0.1, -0.1, 0.3: sqrt(0.12 / 3 / 4)
    assert agg.loc["B", "pass1_se"] == pytest.approx(math.sqrt(0.12 / 12), rel=1e-12)


def test_two_se_is_twice_the_hypotenuse():
    assert sg.two_se(0.02, 0.015) == pytest.approx(0.05, rel=1e-12)   # 2·sqrt(0.0004 + 0.000225) = 2·0.025


# planted cells: "up" A clearly above B; "flat" no difference with s.e. 0.05 each (2 s.e. of the
# difference = 2·sqrt(2)·0.05 = 0.1414); "down" A clearly below B
UP = {"A": [0.60, 0.61, 0.62], "B": [0.40, 0.41, 0.42]}
FLAT = {"A": [0.45, 0.50, 0.55, 0.45, 0.55], "B": [0.45, 0.50, 0.55, 0.45, 0.55]}
DOWN = {"A": [0.30, 0.31, 0.32], "B": [0.50, 0.51, 0.52]}


def test_holds_in_every_cell_passes():
    c = _claim(_runs({1e-4: UP, 3e-4: UP}), [("A", "B", 1.0)], scale=0.01)
    assert (c.status, c.ours) == ("pass", 1.0)
    assert "lr 1e-04" in c.tested_at and "lr 3e-04" in c.tested_at


def test_holds_in_part_of_the_grid_depends_and_says_where():
    c = _claim(_runs({1e-4: FLAT, 3e-4: UP}), [("A", "B", 1.0)], scale=0.01)
    assert (c.status, c.ours) == ("depends", 0.5)
    assert c.note.startswith("holds at lr 3e-04; not at lr 1e-04")
    assert "+0.200" in c.note   # the planted difference at lr 3e-4


def test_null_everywhere_with_a_smaller_paper_effect_is_underpowered():
    x = np.array(FLAT["A"])
    se = x.std(ddof=1) / math.sqrt(x.size)
    bar = 2 * math.hypot(se, se)
    c = _claim(_runs({1e-4: FLAT, 3e-4: FLAT}), [("A", "B", 1.3)], scale=0.01, unit=" points")
    assert c.status == "underpowered"
    assert f"2 s.e. {bar:.3f}" in c.note and "paper +0.013 = +1.3 points" in c.note
    assert bar > 0.013


def test_null_where_the_paper_effect_would_have_shown_is_explained_not_underpowered():
    # paper effect 20 points = 0.2 > 2 s.e. (0.089): an effect of the paper's size would have been seen
    c = _claim(_runs({3e-4: FLAT}), [("A", "B", 20.0)], scale=0.01, why="a stated reason")
    assert c.status == "explained"
    assert "would have been seen" in c.note and c.note.endswith("a stated reason")


def test_the_other_way_is_explained_and_never_underpowered():
    c = _claim(_runs({3e-4: DOWN, 1e-3: FLAT}), [("A", "B", 1.0)], scale=0.01)
    assert c.status == "explained" and "other way" in c.note


def test_a_null_without_a_paper_effect_cannot_be_underpowered():
    c = _claim(_runs({3e-4: FLAT}), [("A", "B", float("nan"))])
    assert c.status == "explained" and "gives no size" in c.note


def test_incomplete_cells_are_listed_not_counted():
    runs = _runs({3e-4: UP, 1e-3: {"A": [0.1, 0.9], "B": [0.5, 0.5]}})
    c = _claim(runs, [("A", "B", 1.0)])
    assert c.status == "pass" and "incomplete cells not counted: lr 1e-03" in c.note
    only = _claim(_runs({1e-3: {"A": [0.1, 0.9], "B": [0.5, 0.5]}}), [("A", "B", 1.0)])
    assert math.isnan(only.ours) and only.status == "not reproducible here"


def test_a_cell_where_the_reference_ends_below_the_sft_start_is_listed_not_counted():
    runs = pd.concat([_runs({3e-4: {**UP, "GRPO": [0.5, 0.5, 0.5]}}),
                      _runs({3e-3: {**FLAT, "GRPO": [0.0, 0.0, 0.0]}})], ignore_index=True)
    agg = sg.aggregate(runs, {"pass1": "pass@1"}).assign(sft_pass1=0.36)
    c = sg.direction_claim("A above B", "paper", agg, [("A", "B", 1.0)], "pass1", "pass@1", reference="GRPO")
    assert c.status == "pass" and "training breaks, not counted: lr 3e-03 (GRPO pass@1 0.000" in c.note
    without = sg.direction_claim("A above B", "paper", agg, [("A", "B", 1.0)], "pass1", "pass@1")
    assert without.status == "depends"


def test_every_pair_must_hold_in_a_cell():
    runs = _runs({3e-4: {**UP, "C": [0.40, 0.41, 0.42]}})
    c = _claim(runs, [("A", "B", 1.0), ("B", "C", 1.0)], scale=0.01)
    assert c.ours == 0.0 and c.status != "pass"


# ------------------------------------------------------------------ agrae_table5 collapse claims
def test_fisher_one_sided_by_hand():
    # 0 of 10 against 3 of 10: P(all 3 collapses fall in the paper's 10 of 20) = C(10,3)/C(20,3)
    assert agrae_table5.fisher_fewer(0, 10) == pytest.approx(120 / 1140, rel=1e-12)
    assert agrae_table5.fisher_fewer(0, 20) == pytest.approx(120 / math.comb(30, 3), rel=1e-12)
    assert agrae_table5.fisher_fewer(3, 10) > 0.5


def _collapse_frame(nd: dict, grp_collapsed: int = 0, grpo: dict | None = None) -> pd.DataFrame:
    base = dict(lr=3e-4, steps=60, runs=10, rise=0.0, rise_max=0.1, H_first=0.7, H_last=0.5, pass1=0.5,
                pass1_se=0.02, passk=0.8, passk_se=0.02, sft_pass1=0.36, sft_passk=0.73, k=16, rose=0.0, rose_n=10.0,
                collapsed=0.0)
    rows = [{**base, "variant": v} for v in agrae_table5.ORDER]
    for r in rows:
        if r["variant"] == "Negative-Dominant":
            r.update(nd)
        if r["variant"] == "A-GRAE (group level)":
            r["collapsed"] = float(grp_collapsed)
        if r["variant"] == "GRPO":
            r.update(grpo or {})
    return pd.DataFrame(rows)


def test_collapse_count_without_the_mechanism_does_not_test_the_claim():
    nd, grp = agrae_table5._collapse_claims(_collapse_frame({"rose": 2.0, "collapsed": 0.0}))
    assert nd.status == "explained" and "does not test the claim" in nd.note
    assert "entropy rose in 2 of 10 runs" in nd.note
    assert grp.status == "pass" and "does not show that the attenuation prevents" in grp.note


def test_collapse_count_with_the_mechanism_and_no_collapse_is_underpowered_at_ten_runs():
    nd, _ = agrae_table5._collapse_claims(_collapse_frame({"rose": 8.0, "collapsed": 0.0}))
    assert nd.status == "underpowered" and f"p = {120 / 1140:.3f}" in nd.note


@pytest.mark.parametrize("grpo", [{"rose": 9.0}, {"pass1": 0.0}])
def test_no_mechanism_when_grpo_rises_too_or_does_not_train(grpo):
    """Fig. 3's contrast: Negative-Dominant's entropy rises while the others' falls; a learning
    rate at which GRPO itself ends below the SFT start breaks every variant."""
    nd, _ = agrae_table5._collapse_claims(_collapse_frame({"rose": 8.0, "collapsed": 5.0}, grpo=grpo))
    assert nd.status == "explained" and "does not test the claim" in nd.note


def test_collapse_count_with_the_mechanism_and_collapses_depends():
    nd, _ = agrae_table5._collapse_claims(_collapse_frame({"rose": 8.0, "collapsed": 2.0}))
    assert nd.status == "depends" and nd.ours == 2.0


def test_collapse_of_the_group_level_variant_in_part_of_the_grid_depends():
    df = pd.concat([_collapse_frame({}), _collapse_frame({}, grp_collapsed=1).assign(lr=3e-3)], ignore_index=True)
    _, grp = agrae_table5._collapse_claims(df)
    assert grp.status == "depends" and "no collapse at lr 3e-04" in grp.note


# ------------------------------------------------------------------ fgrpo_table2 N = 2 note
def test_n2_against_the_sft_start_is_reported_per_complete_cell():
    df = pd.DataFrame([
        dict(lr=1e-3, steps=60, variant="GRPO N=2", runs=5, pass1=0.17, sft_pass1=0.36, reward_first=np.nan,
             reward_last=np.nan),
        dict(lr=3e-4, steps=60, variant="GRPO N=2", runs=5, pass1=0.47, sft_pass1=0.36, reward_first=0.39,
             reward_last=0.57),
        dict(lr=3e-3, steps=60, variant="GRPO N=2", runs=1, pass1=0.01, sft_pass1=0.36, reward_first=0.1,
             reward_last=0.0)])
    text = fgrpo_table2.n2_versus_sft(df)
    assert "lr 1e-03: below (0.170 vs 0.360)" in text
    assert "lr 3e-04: above (0.470 vs 0.360, training reward 0.390 → 0.570)" in text
    assert "3e-03" not in text   # one run: not a complete cell


# ------------------------------------------------------------------ fade_fig9 trainer claims
def test_fade_fig9_trainer_claims_without_runs_stay_not_reproducible():
    cs = fade_fig9._trainer_claims(None, "why")
    assert [c.status for c in cs] == ["not reproducible here"] * 3


def test_fade_fig9_trainer_claims_from_planted_runs(tmp_path):
    rows = []
    for v, p64 in (("FADE", 0.90), ("delta only", 0.80), ("both on entropy", 0.90), ("log schedule", 0.90)):
        for s, e in enumerate((-0.01, 0.0, 0.01)):
            rows.append({"variant": v, "seed": s, "lr": 3e-4, "steps": 60, "pass@1": 0.5, "pass@4": 0.7,
                         "pass@16": 0.8 + e, "pass@64": p64 + e, "sft_pass@1": 0.36, "sft_pass@4": 0.6,
                         "sft_pass@16": 0.73, "sft_pass@64": 0.8, "entropy_last": 0.4})
    pd.DataFrame(rows).to_csv(tmp_path / "f.csv", index=False)
    delta, both, log = fade_fig9._trainer_claims(fade_fig9.trainer_data(tmp_path / "f.csv"), "why")
    assert delta.status == "pass"                                  # 0.10 above, 2 s.e. = 0.0163
    assert both.status == log.status == "explained"               # equal: no detectable effect, no paper size
    assert "gives no size" in both.note


# ------------------------------------------------------------------ examples/seed_experiments.py plumbing
@pytest.fixture(scope="module")
def se():
    spec = importlib.util.spec_from_file_location("seed_experiments", ROOT / "examples" / "seed_experiments.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["seed_experiments"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_trajectory_of_a_planted_entropy_curve(se):
    h = np.r_[np.linspace(1.0, 0.5, 10), np.linspace(0.5, 1.5, 40)]      # dips, then rises
    r = np.linspace(0.2, 0.6, 50)
    t = se.trajectory(h, r)
    assert t["entropy_first"] == pytest.approx(h[:10].mean()) and t["entropy_last"] == pytest.approx(h[-10:].mean())
    assert t["entropy_rose"] and t["entropy_min"] == pytest.approx(0.5)
    smooth = np.convolve(h, np.ones(5) / 5, mode="valid")                  # window 50 // 10
    assert t["entropy_max_rise"] == pytest.approx(smooth[-1] - smooth.min())
    assert t["reward_first"] == pytest.approx(r[:10].mean())
    assert not se.trajectory(h[::-1], r)["entropy_rose"]
    with pytest.raises(ValueError, match="1-d of one non-zero length"):
        se.trajectory(h, r[:3])


def test_legacy_rows_get_lr_1e3_and_rows_append_in_header_order(se, tmp_path):
    csv = tmp_path / "c.csv"
    old = [c for c in se.COLLAPSE_COLUMNS if c not in ("lr", *se.TRAJECTORY_COLUMNS)]
    pd.DataFrame([{c: i for i, c in enumerate(old)}]).to_csv(csv, index=False)
    se.ensure_columns(csv, se.COLLAPSE_COLUMNS)
    d = pd.read_csv(csv)
    assert tuple(d.columns) == se.COLLAPSE_COLUMNS and d.lr.tolist() == [1e-3]
    row = {c: 1 for c in se.COLLAPSE_COLUMNS} | {"variant": "a, b", "lr": 3e-4, "entropy_first": float("nan")}
    se.append_row(csv, row, se.COLLAPSE_COLUMNS)
    d = pd.read_csv(csv)
    assert d.variant.iloc[1] == "a, b" and d.lr.tolist() == [1e-3, 3e-4] and math.isnan(d.entropy_first.iloc[1])
    # legacy row: variant 0, seed 3, steps 4 (the positions of those columns without lr)
    assert se._done(csv) == {("0", 3, "0.001", 4), ("a, b", 1, "0.0003", 1)}
    with pytest.raises(ValueError, match="differ from the CSV's columns"):
        se.append_row(csv, {"variant": "x"}, se.COLLAPSE_COLUMNS)
    assert not list(tmp_path.glob("*.tmp"))


def test_mechanism_lr_picks_the_largest_contrast_where_grpo_trains(se, tmp_path):
    def runs(lr, nd, grpo, grpo_pass1=0.6):
        return ([{"variant": "Negative-Dominant", "steps": 60, "lr": lr, "entropy_rose": x, "pass@1": 0.5,
                  "sft_pass@1": 0.36} for x in nd]
                + [{"variant": "GRPO", "steps": 60, "lr": lr, "entropy_rose": x, "pass@1": grpo_pass1,
                    "sft_pass@1": 0.36} for x in grpo])
    rows = (runs(1e-4, [True, False], [False, False]) + runs(3e-4, [True, False], [False, False])
            + runs(1e-3, [True, True], [True, True])                       # both rise: contrast 0
            + runs(3e-3, [True, True], [False, False], grpo_pass1=0.0)     # GRPO does not train: excluded
            + [{"variant": "GRPO", "steps": 200, "lr": 1e-3, "entropy_rose": False, "pass@1": 0.6,
                "sft_pass@1": 0.36}])
    pd.DataFrame(rows).to_csv(tmp_path / "c.csv", index=False)
    assert se.mechanism_lr(tmp_path / "c.csv") == 3e-4              # 0.5 at 1e-4 and 3e-4: the higher
    with pytest.raises(ValueError, match="no Negative-Dominant runs"):
        se.mechanism_lr(tmp_path / "missing.csv")


@pytest.mark.parametrize("argv, msg", [
    (["collapse", "--lr", "0"], "--lr must be a finite number > 0 or auto, got '0'"),
    (["table2", "--lr", "auto"], "--lr auto is for collapse only"),
    (["collapse", "--variants", "nope"], "--variants: unknown variant 'nope'"),
    (["collapse", "--steps", "0"], "--steps must be an integer >= 1"),
])
def test_bad_flags_are_refused_by_name(se, argv, msg, capsys):
    with pytest.raises(SystemExit):
        se.main(argv)
    assert msg in capsys.readouterr().err


# ------------------------------------------------------------------ fade_rank1_funnel learning-rate sweep
def _alignment_frame(order_ok_at_sweep: bool) -> pd.DataFrame:
    from figures.paper import fade_rank1_funnel as f
    rows = []
    for lr in (f.DEFAULT_LR, *f.SWEEP_LRS):
        kind = "simulated" if lr == f.DEFAULT_LR else "lr_sweep"
        for i, d in enumerate(f.DELTAS):
            c = 0.1 * (i + 1) if (order_ok_at_sweep or lr == f.DEFAULT_LR) else 0.1 * (3 - i)
            rows.append({"kind": kind, "lr": lr, "K": f.K_COS, "step": f.LATE + 5, "delta": d,
                         "abs_grad_cos": c, "grad_u_cos": 0.9 + 0.01 * i})
    return pd.DataFrame(rows)


def test_rank1_funnel_alignment_order_is_checked_at_every_learning_rate():
    from figures.paper import fade_rank1_funnel as f
    text, same, top = f._sweep(_alignment_frame(True))
    assert same and top == pytest.approx(0.1) and text.count("lr ") == 3
    _, same, top = f._sweep(_alignment_frame(False))
    assert not same and top == pytest.approx(0.3)   # the reversed order at the swept rates: δ = 0.5 largest


def _fig9_frame(h_default: tuple[float, float], h_sweep: dict[float, tuple[float, float]]) -> pd.DataFrame:
    """Final-step rows of the linear head (FADE, alpha only) at lr 0.1 and the lr-sweep rows."""
    rows = [{"source": "linear head", "step": 300, "variant": v, "entropy": h, "solve_rate": 0.9}
            for v, h in zip(("fade", "fade-alpha-only"), h_default)]
    rows += [{"source": "linear head", "step": 300, "variant": v, "entropy": 1.0, "solve_rate": 0.9}
             for v in fade_fig9.VARIANTS if v not in ("fade", "fade-alpha-only")]
    rows += [{"source": "lr sweep", "lr": lr, "step": 300, "variant": v, "entropy": h, "delta": 1.0}
             for lr, hs in h_sweep.items() for v, h in zip(("fade", "fade-alpha-only"), hs)]
    return pd.DataFrame(rows)


def test_fade_fig9_entropy_claim_across_learning_rates():
    never = _fig9_frame((0.2, 0.3), {0.03: (1.0, 1.0), 0.3: (0.01, 0.04)})
    assert fade_fig9._alpha_only_below(never) == []
    some = _fig9_frame((0.2, 0.3), {0.03: (1.0, 1.0), 0.3: (0.04, 0.01)})
    assert fade_fig9._alpha_only_below(some) == ["lr 0.3"]
    assert "alpha only ends below FADE at some learning rate" in fade_fig9._sweep_text(some)
    assert "the two are one run" in fade_fig9._sweep_text(never)      # lr 0.03: identical entropies
