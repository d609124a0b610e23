"""Reading the diff report right: dtypes and the rounding floor, ``--cast``, sign-free statistics of
the head's u, top-token tables (special tokens by name, the "−" column negative only), a
tokenizer smaller than the head or of another vocabulary, the verdict against FADE's Sec. 5
table, and plot axes with room for flat data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import diff as wd
from analysis import report as rp
from analysis.diff import cli as diff_cli
from analysis.diff import stream
from tests.analysis import tiny_checkpoints as tc


def _floor_ref(path: str | Path, to: torch.dtype) -> dict[str, float]:
    """‖cast(W → to) − W‖ per floating tensor of a checkpoint, with torch + float64 only."""
    out = {}
    for k, t in tc.load_state(path).items():
        if t.is_floating_point():
            w = t.to(torch.float64)
            out[k] = float(torch.linalg.norm((t.to(to).to(torch.float64) - w).reshape(-1)))
    return out


@pytest.fixture(scope="module")
def f32_base():
    return tc.cached("rr_qwen2_f32", lambda p: tc.build_arch(p, "qwen2"))


# ----------------------------------------------------------------- dtypes
def test_fp32_base_against_its_bf16_cast_measures_exactly_the_rounding_floor(f32_base, tmp_path):
    rl = tmp_path / "rl_bf16"
    tc.plant_files(f32_base, rl, {}, dtype="bfloat16")          # no training: casting alone
    doc = wd.diff(str(f32_base), [str(rl)], device="cpu", layers="head", progress=False)
    c = doc["checkpoints"][0]
    assert doc["base_dtype"] == "float32" and c["dtype"] == "bfloat16" and c["dtype_differs"]
    ref = _floor_ref(f32_base, torch.bfloat16)                   # ‖cast(W_base → bf16) − W_base‖
    for r in c["layers"]:
        assert r["dtypes"] == ["float32", "bfloat16"]
        assert r["rounding_floor_l2"] == pytest.approx(ref[r["name"]], rel=1e-12, abs=1e-300)
        assert r["l2"] == pytest.approx(ref[r["name"]], rel=1e-6)   # the measured ΔW is the floor
    total = float(np.sqrt(sum(v ** 2 for v in ref.values())))
    assert c["rounding_floor"]["l2"] == pytest.approx(total, rel=1e-12)
    assert c["rounding_floor"]["ratio_to_global_l2"] == pytest.approx(1.0, rel=1e-6)
    assert any("dtypes differ" in n for n in c["notes"])
    # --cast bf16: both sides at one precision: nothing is left
    doc2 = wd.diff(str(f32_base), [str(rl)], device="cpu", layers="head", progress=False, cast="bf16")
    c2 = doc2["checkpoints"][0]
    assert c2["global_l2"] == 0.0 and c2["rounding_floor"] is None and doc2["settings"]["cast"] == "bf16"
    assert any("rounded to bf16" in n for n in c2["notes"])


def test_bf16_base_fp32_rl_is_flagged_with_the_floor_beside_the_measured_update(tmp_path, cheap_png):
    base = tc.cached("rr_qwen2_bf16", lambda p: tc.build_arch(p, "qwen2", dtype="bfloat16"))
    rl = tmp_path / "rl_f32"
    planted = tc.plant_files(base, rl, tc.matrix_deltas(base), dtype="float32")
    doc = wd.diff(str(base), [str(rl)], device="cpu", progress=False)
    c = doc["checkpoints"][0]
    assert doc["base_dtype"] == "bfloat16" and c["dtype"] == "float32" and c["dtype_differs"]
    ref = _floor_ref(rl, torch.bfloat16)                         # the finer side (RL) to the coarser dtype
    recs = {r["name"]: r for r in c["layers"]}
    for k, v in ref.items():
        assert recs[k]["rounding_floor_l2"] == pytest.approx(v, rel=1e-12, abs=1e-300)
    assert c["rounding_floor"]["l2"] == pytest.approx(float(np.sqrt(sum(v ** 2 for v in ref.values()))), rel=1e-12)
    assert 0 < c["rounding_floor"]["l2"] < c["global_l2"]
    # the head update is still read right in float32
    assert c["output_head"]["s1_s2"] == pytest.approx(4 / 0.25, rel=1e-4)
    assert set(planted) <= set(recs)
    # the report shows the dtypes, the flag and both norms; the CLI takes --cast
    out = rp.write_report(doc, tmp_path / "rep")
    md = (out / "report.md").read_text()
    assert "## Precision" in md and "dtypes differ" in md and "bfloat16" in md and "rounding floor" in md
    rc = diff_cli.main([str(base), str(rl), "--out", str(tmp_path / "rep2"), "--cast", "fp32", "--quiet",
                        "--layers", "head"])
    assert rc == 0
    j = json.loads((tmp_path / "rep2" / "report.json").read_text())
    assert j["settings"]["cast"] == "fp32" and j["run"]["settings"]["cast"] == "fp32"
    assert j["checkpoints"][0]["global_l2"] == pytest.approx(c["global_l2"], rel=1e-6)  # bf16 -> fp32 is exact
    assert diff_cli.main([str(base), str(rl), "--out", str(tmp_path / "rep3"), "--cast", "fp8"]) == 2
    with pytest.raises(ValueError, match=r"^cast must be one of"):
        wd.diff(str(base), [str(rl)], cast="int8", progress=False)


def test_same_dtype_has_no_flag(f32_base, tmp_path):
    rl = tmp_path / "rl"
    tc.plant_files(f32_base, rl, {"lm_head.weight": tc.spectrum_matrix((tc.M_VOCAB, tc.M_HIDDEN), [1.0, 0.5], 3)})
    c = wd.diff(str(f32_base), [str(rl)], device="cpu", layers="head", progress=False)["checkpoints"][0]
    assert c["dtype"] == "float32" and not c["dtype_differs"] and c["rounding_floor"] is None
    assert all("rounding_floor_l2" not in r for r in c["layers"])


# ------------------------------------------------------------ the head's u
def _u_pair(root: Path, u: np.ndarray, seed: int = 0) -> tuple[str, str]:
    """Two single-file checkpoints whose head ΔW is ``u vᵀ`` (float64 storage: exact)."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    V, d = u.size, 8
    v = torch.randn(d, 1, generator=g, dtype=torch.float64)
    v /= torch.linalg.norm(v)
    base = {"lm_head.weight": torch.randn(V, d, generator=g, dtype=torch.float64),
            "model.layers.0.mlp.up_proj.weight": torch.randn(16, d, generator=g, dtype=torch.float64)}
    rl = dict(base, **{"lm_head.weight": base["lm_head.weight"] + torch.from_numpy(u)[:, None] @ v.T})
    for name, st in (("base", base), ("rl", rl)):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text('{"model_type": "toy", "tie_word_embeddings": false}')
        save_file(st, str(root / name / "model.safetensors"))
    return str(root / "base"), str(root / "rl")


def _fade_u(V_major: int, n_minor: int, big_on_minority: bool) -> np.ndarray:
    """n_minor entries one way, V_major the other, unit norm; the largest |u_i| on the chosen side."""
    minor = np.full(n_minor, 0.3 if big_on_minority else 0.001)
    major = np.full(V_major, -1.0)
    if not big_on_minority:
        major[0] = -60.0
    major *= np.sqrt(max(1 - (minor ** 2).sum(), 0.1) / (major ** 2).sum())
    u = np.r_[minor, major]
    return u / np.linalg.norm(u)


@pytest.mark.parametrize("big_on_minority", [True, False])
def test_sign_free_u_statistics_on_the_scaled_down_fade_case(tmp_path, big_on_minority, cheap_png):
    # FADE's first-time-user case: 151,886 tokens one way, 50 the other; scaled down 1:10
    u = _fade_u(15189, 5, big_on_minority)
    b, r = _u_pair(tmp_path, u)
    doc = wd.diff(b, [r], device="cpu", progress=False)
    h = doc["checkpoints"][0]["output_head"]
    V = u.size
    assert h["u_majority_sign_fraction"] == 15189 / V                 # 0.99967, whatever the orientation
    assert h["u_largest_entries_side"] == ("minority" if big_on_minority else "majority")
    # the stated orientation: the largest |u_i| is positive
    assert h["u_negative_fraction"] == (15189 / V if big_on_minority else 5 / V)
    assert h["u_majority_sign"] == ("negative" if big_on_minority else "positive")
    minority_energy = float((u[:5] ** 2).sum())
    assert h["u_minority_energy_share"] == pytest.approx(minority_energy, rel=1e-9)
    out = rp.write_report(doc, tmp_path / "rep")
    j = json.loads((out / "report.json").read_text())
    assert j["checkpoints"][0]["output_head"]["u_majority_sign_fraction"] == pytest.approx(15189 / V)
    md = (out / "report.md").read_text()
    assert "Orientation of u" in md and "largest-magnitude entry is positive" in md
    assert "one sign on 99.97% of tokens" in md


# ---------------------------------------------------------- top tokens
def _tok_pair(tmp_path: Path, u: np.ndarray, tokenizer_vocab: int | None = None) -> tuple[Path, Path]:
    base = tc.qwen2_base()
    v = np.linalg.qr(np.random.default_rng(1).standard_normal((tc.HIDDEN, 1)))[0][:, 0]
    rl = tmp_path / "rl"
    tc.plant_files(base, rl, {"lm_head.weight": 2.0 * np.outer(u, v)})
    if tokenizer_vocab is not None:
        for f in rl.glob("tokenizer*"):
            f.unlink()
        tc.build_tokenizer(tokenizer_vocab).save_pretrained(rl)
    return base, rl


def _signed_u(neg_ids: list[int], top_id: int, n: int = tc.VOCAB) -> np.ndarray:
    u = np.linspace(1.0, 2.0, n)
    u[neg_ids] = -np.arange(1, len(neg_ids) + 1, dtype=float)
    u[top_id] = 10.0
    return u / np.linalg.norm(u)


def test_special_tokens_by_name_and_only_negative_entries_in_the_minus_column(tmp_path, cheap_png):
    u = _signed_u([0, 7, 9], top_id=2)                  # </s> the largest; <pad>, w3, w5 the only negatives
    base, rl = _tok_pair(tmp_path, u)
    doc = wd.diff(str(base), [str(rl)], device="cpu", layers="head", progress=False)
    toks = doc["checkpoints"][0]["output_head"]["top_tokens"]
    pos = [t for t in toks if t["sign"] == "+"]
    neg = [t for t in toks if t["sign"] == "-"]
    assert pos[0]["token_id"] == 2 and pos[0]["token"] == "</s>" and pos[0]["special"]
    assert [t["token_id"] for t in neg] == [9, 7, 0]          # most negative first, only the three negatives
    assert all(t["u"] < 0 for t in neg) and all(t["u"] > 0 for t in pos)
    assert neg[2]["token"] == "<pad>" and neg[2]["special"] and neg[0]["token"] == "w5" and not neg[0]["special"]
    md = (rp.write_report(doc, tmp_path / "rep") / "report.md").read_text()
    table = md[md.index("| rank | + id"):]
    assert "| </s> |" in table and "| <pad> |" in table and "''" not in table and "'w5'" in table
    # the table's "−" column stops after the three negative entries
    lines = [ln for ln in table.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split("|")[5].strip() for ln in lines[:4]] == ["9", "7", "0", ""]


def test_a_tokenizer_smaller_than_the_head_decodes_the_ids_it_has_with_a_warning(tmp_path, cheap_png):
    u = _signed_u([5], top_id=383)                       # the largest entry on a padding row
    base, rl = _tok_pair(tmp_path, u, tokenizer_vocab=380)
    doc = wd.diff(str(base), [str(rl)], device="cpu", layers="head", progress=False)
    note = doc["settings"]["tokenizer_note"]
    assert "knows 380 token ids" in note and "384 rows" in note and "380-383" in note
    toks = doc["checkpoints"][0]["output_head"]["top_tokens"]
    assert toks[0]["token_id"] == 383 and toks[0]["token"] is None
    assert all(t["token"] is not None for t in toks if t["token_id"] < 380)
    md = (rp.write_report(doc, tmp_path / "rep") / "report.md").read_text()
    assert "Warning (tokenizer): " in md and "not decoded" in md


@pytest.mark.parametrize("size", [500, 100])
def test_a_tokenizer_of_another_vocabulary_is_refused_and_no_report_written(tmp_path, size, capsys):
    u = _signed_u([5], top_id=3)
    base, rl = _tok_pair(tmp_path, u)
    other = tmp_path / f"tok{size}"
    tc.build_tokenizer(size).save_pretrained(other)
    with pytest.raises(ValueError, match=rf"^tokenizer: '.*tok{size}' knows {size} token ids but the output head "
                                         r"'lm_head.weight' has 384 rows: a tokenizer of another vocabulary"):
        wd.diff(str(base), [str(rl)], tokenizer=str(other), device="cpu", progress=False)
    rc = diff_cli.main([str(base), str(rl), "--tokenizer", str(other), "--out", str(tmp_path / "rep"), "--quiet"])
    assert rc == 2 and "another vocabulary" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


# ------------------------------------------------------------ verdict, plots
def test_the_report_opens_with_a_verdict_beside_fades_values(tmp_path):
    rl, _ = tc.qwen2_planted()
    doc = wd.diff(str(tc.qwen2_base()), [str(rl)], device="cpu", progress=False)
    md = (rp.write_report(doc, tmp_path / "rep") / "report.md").read_text()
    first = md.split("\n## ")[1]
    assert first.startswith("Verdict")
    for col in ("OH share", "head r1", "head s1/s2", "Inner", "density \\|ΔW\\| > 0"):
        assert col in first
    assert "FADE Sec. 5 table (Qwen 2.5 7B)" in first
    assert "FADE runs 6.1-72.7; failure-biased ≈90; sign-balanced <10 (%)" in first      # OH
    assert "FADE runs 38.7-91.2; failure-biased 78-96; sign-balanced 61-62 (%)" in first  # rank-1
    assert "FADE runs 3.25-5.77; failure-biased 6.96-8.51; sign-balanced 3.61-3.98" in first
    assert "FADE runs 0.96-3.32; failure-biased ≈0.3; sign-balanced ≈3.2 (%)" in first   # Inner
    c = doc["checkpoints"][0]
    assert rp._pct(c["output_head"]["l2_share"]) in first and rp._fmt(c["output_head"]["s1_s2"]) in first
    assert "FADE runs 26.88-92.96; failure-biased ≈8.4; sign-balanced ≈89.6 (%)" in first   # Inner × L
    # the head holds 15 % of this tiny model's entries: OH and Inner × L are not read; r1 ≈ 89 % and
    # s1/s2 = 16 of the planted head (spike 4, bulk ≤ 0.25) both vote failure-biased
    assert rp.FAILURE_BIASED in first
    assert "OH → not read, r1 → failure-biased, s1/s2 → failure-biased, Inner×L → not read" in first


def test_flat_per_layer_shares_leave_room_on_the_axes(monkeypatch):
    figs = []
    monkeypatch.setattr(rp, "png_bytes", lambda fig: figs.append(fig) or b"")
    doc = {"checkpoints": [{"path": "a/checkpoint-1", "step": 1, "output_head": {"l2_share": 0.1},
                            "per_layer": [{"layer": i, "l2_share": 0.3, "s1_s2_mean": 2.0} for i in range(3)]}]}
    rp._plot_l2_share(doc)
    rp._plot_layer_s12(doc)
    (lo, hi), (lo2, hi2) = figs[0].axes[0].get_ylim(), figs[1].axes[0].get_ylim()
    assert lo == 0 and hi >= 30 * 1.1                          # the line at 30% sits inside the frame
    assert lo2 == 0 and hi2 >= 2.0 * 1.1
    from matplotlib.figure import Figure
    ax = Figure().subplots()
    assert rp.y_room(ax, [0.0, 0.0]) == (0.0, 1.0)
    assert rp.y_room(ax, [5.0], from_zero=False) == (3.75, 6.25)


def test_torch_code_path_gives_the_same_floor_cast_and_parts(monkeypatch, tmp_path):
    """The CUDA code path (torch tensors), run on CPU tensors: rounding floor, --cast and fused parts."""
    base = tc.cached("rr_qwen2_bf16", lambda p: tc.build_arch(p, "qwen2", dtype="bfloat16"))
    rl = tmp_path / "rl_f32"
    tc.plant_files(base, rl, tc.matrix_deltas(base), dtype="float32")
    pb, pr, _ = tc.arch_pair("phi3")
    runs = {}
    for torch_path in (False, True):
        monkeypatch.setattr(stream, "_TORCH_ON_CPU", torch_path)
        runs[torch_path] = (wd.diff(str(base), [str(rl)], device="cpu", progress=False),
                            wd.diff(str(base), [str(rl)], device="cpu", progress=False, cast="bf16"),
                            wd.diff(str(pb), [str(pr)], device="cpu", progress=False))
    for a, b in zip(runs[False], runs[True]):
        ca, cb = a["checkpoints"][0], b["checkpoints"][0]
        assert cb["global_l2"] == pytest.approx(ca["global_l2"], rel=1e-12)
        if ca["rounding_floor"]:
            assert cb["rounding_floor"]["l2"] == pytest.approx(ca["rounding_floor"]["l2"], rel=1e-12)
        for ra, rb in zip(ca["layers"], cb["layers"]):
            for pa, pb_ in zip(ra.get("parts", []), rb.get("parts", [])):
                assert pb_["l2"] == pytest.approx(pa["l2"], rel=1e-12)
                assert pb_["s1_s2"] == pytest.approx(pa["s1_s2"], rel=1e-9)
    assert any("parts" in r for r in runs[True][2]["checkpoints"][0]["layers"])


def test_the_verdicts_reading_puts_fades_own_rows_in_their_regimes():
    """The rows whose regime FADE states read as that regime (the full rule: tests/analysis/diff/test_verdict.py)."""
    for i, regime in rp.FADE_STATED_REGIMES.items():
        label, oh, s12, r1, inner = rp.FADE_SEC5_TABLE[i]
        lo = [x[0] if isinstance(x, tuple) else x for x in (oh, s12, r1, inner)]
        c = {"output_head": {"l2_share": lo[0] / 100, "s1_s2": lo[1], "rank1_fraction": lo[2] / 100},
             "inner_l2_share_x_layers": 28 * lo[3] / 100}
        assert rp.fade_regime(c)["regime"] == regime, (label, rp.fade_regime(c)["reading"])
