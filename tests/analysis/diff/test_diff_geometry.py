"""``rlvr-diff --geometry`` / ``diff(..., geometry=True)``: the geometry of every weight matrix's
update in report.json and the report.

The per-matrix numbers are checked against :func:`analysis.geometry.update_geometry` called
directly on the same tensors read here with safetensors (an independent recomputation through the
library, which ``tests/analysis/test_geometry.py`` checks against dense float64 torch computations
to 1e-9 and against planted cases); the aggregates against a numpy recomputation from the
per-matrix values; a planted update inside the base's top-8 singular subspaces against its known
share (1) and the report's reading; an adapter against the documented refusal; and a run without
``--geometry`` against the unchanged document.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from analysis import geometry, report
from analysis.diff import diff
from analysis.diff.cli import main
from analysis.diff.geometry_pass import geometry_frame
from analysis.diff.settings import PHASES
from tests.analysis import tiny_checkpoints as tc


def _state(path: Path) -> dict:
    out = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The direct recomputation on one torch thread (small LAPACK calls busy-wait with two on a loaded machine)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


#: a Qwen2-named checkpoint written directly with safetensors (no transformers: fast): name -> shape
SHAPES = {"model.embed_tokens.weight": (96, 32), "model.layers.0.self_attn.q_proj.weight": (32, 32),
          "model.layers.0.self_attn.k_proj.weight": (16, 32), "model.layers.0.mlp.up_proj.weight": (48, 32),
          "model.layers.0.mlp.down_proj.weight": (32, 48), "model.layers.0.input_layernorm.weight": (32,),
          "model.layers.1.self_attn.q_proj.weight": (32, 32), "model.layers.1.mlp.down_proj.weight": (32, 48),
          "model.norm.weight": (32,), "lm_head.weight": (96, 32)}
CONFIG = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 32, "vocab_size": 96,
          "tie_word_embeddings": False}


def _write(path: Path, tensors: dict) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_file({k: torch.as_tensor(v, dtype=torch.float32).contiguous() for k, v in tensors.items()},
              str(path / "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("geometry")
    rng = np.random.default_rng(3)
    _write(root / "base", {k: (rng.standard_normal(s) / math.sqrt(s[-1]) if len(s) == 2 else 1.0 + 0.1 *
                               rng.standard_normal(s)) for k, s in SHAPES.items()})
    return root


@pytest.fixture(scope="module")
def pair(root) -> tuple[Path, Path]:
    """A random update of every tensor: rank-2 in the block matrices, a spiked full-rank one in the head."""
    base = root / "base"
    rng = np.random.default_rng(5)
    st = {k: t.double().numpy() for k, t in _state(base).items()}
    rl = {}
    for j, (k, W) in enumerate(st.items()):
        if k == "lm_head.weight":
            D = tc.spectrum_matrix(W.shape, [0.5] + [0.05] * 20, j)
        elif W.ndim == 2:
            D = tc.spectrum_matrix(W.shape, (0.3, 0.1), j)
        else:
            D = 1e-3 * rng.standard_normal(W.shape)
        rl[k] = W + D
    rl["model.layers.1.self_attn.q_proj.weight"] = st["model.layers.1.self_attn.q_proj.weight"]   # ΔW = 0
    return base, _write(root / "rl", rl)


@pytest.fixture(scope="module")
def docs(pair) -> tuple[dict, dict]:
    base, rl = pair
    with_geo = diff(str(base), [str(rl)], device="cpu", progress=False, geometry=True)
    without = diff(str(base), [str(rl)], device="cpu", progress=False)
    return with_geo, without


def test_each_matrix_equals_update_geometry_on_the_same_tensors(pair, docs):
    base, rl = pair
    g = docs[0]["geometry"]["checkpoints"][0]
    sb, sr = _state(base), _state(rl)
    want_names = sorted(k for k, t in sb.items() if t.ndim == 2 and t.is_floating_point())
    assert sorted(m["name"] for m in g["matrices"]) == want_names          # every 2-D weight, the head included
    assert "lm_head.weight" in want_names
    for m in g["matrices"]:
        ref = geometry.update_geometry(sb[m["name"]], sr[m["name"]], ulp_dtype="float32", device="cpu")
        rows = ref[~ref.metric.isin(("ulp_share", "ulp_count"))]
        assert [(r["group"], r["metric"]) for r in m["metrics"]] == list(zip(rows.group, rows.metric))
        got = np.array([[np.nan if r[c] is None else r[c] for c in ("param", "value", "baseline")]
                        for r in m["metrics"]], dtype=float)
        np.testing.assert_allclose(got, rows[["param", "value", "baseline"]].to_numpy(float),
                                   rtol=1e-10, atol=1e-13, equal_nan=True, err_msg=m["name"])
        assert m["ulp_counts"] == [int(c) for c in ref.loc[ref.metric == "ulp_count", "value"]]
        assert m["ks"] == list(geometry.default_ks(*m["shape"]))
        assert math.isclose(m["delta_energy"], float(np.sum((sr[m["name"]].double() - sb[m["name"]].double()).numpy()
                                                            ** 2)), rel_tol=1e-12)
    frame = geometry_frame(docs[0])
    assert len(frame) == sum(len(m["metrics"]) for m in g["matrices"])


def _numpy_aggregate(mats: list[dict]) -> dict:
    """(group, metric, param) -> (value, baseline, n, covered), recomputed with numpy."""
    skip = {"delta_fro_norm", "base_rms", "delta_rms", "principal_rank", "unchanged_share", "one_ulp_share",
            "max_ulp", "mean_ulp", "exact_in_dtype"}
    keys = {(r["group"], r["metric"], r["param"]) for m in mats for r in m["metrics"] if r["metric"] not in skip}
    total = sum(m["delta_energy"] for m in mats)
    out = {}
    for key in keys:
        w, v, b = [], [], []
        for m in mats:
            for r in m["metrics"]:
                if (r["group"], r["metric"], r["param"]) == key:
                    w.append(m["delta_energy"])
                    v.append(r["value"])
                    b.append(np.nan if r["baseline"] is None else r["baseline"])
        w, v, b = np.array(w), np.array(v), np.array(b)
        bv = float(np.average(b, weights=w)) if not np.isnan(b).any() else None
        out[key] = (float(np.average(v, weights=w)), bv, len(w), w.sum() / total)
    return out


def test_aggregates_equal_a_numpy_recomputation(docs):
    g = docs[0]["geometry"]["checkpoints"][0]
    want = _numpy_aggregate(g["matrices"])
    assert len(g["aggregate"]) == len(want)
    for a in g["aggregate"]:
        v, b, n, cov = want[(a["group"], a["metric"], a["param"])]
        assert a["value"] == pytest.approx(v, rel=1e-12, abs=1e-15)
        assert (a["baseline"] is None) == (b is None)
        if b is not None:
            assert a["baseline"] == pytest.approx(b, rel=1e-12, abs=1e-15)
        assert (a["n_matrices"], a["energy_covered"]) == (n, pytest.approx(cov, rel=1e-12))
    # per block: the same over the block's matrices
    for pl in g["per_layer"]:
        want_l = _numpy_aggregate([m for m in g["matrices"] if m["layer"] == pl["layer"]])
        for a in pl["aggregate"]:
            assert a["value"] == pytest.approx(want_l[(a["group"], a["metric"], a["param"])][0], rel=1e-12, abs=1e-15)
    # precision: ULP counts add over the matrices
    (h,) = g["precision"]
    assert h["dtype"] == "float32" and h["bin_edges"] == [int(e) for e in geometry.ulp_bin_edges("float32")]
    counts = np.sum([m["ulp_counts"] for m in g["matrices"]], axis=0)
    assert h["counts"] == counts.tolist() and h["n_entries"] == int(counts.sum())
    assert h["unchanged_share"] == counts[0] / counts.sum() and h["one_ulp_share"] == counts[1] / counts.sum()


def test_base_spectrum_once_per_tensor_for_several_checkpoints(pair, docs, monkeypatch):
    """Two checkpoints against one base: ``W_base``'s spectrum is computed once per matrix (not per
    checkpoint), and each checkpoint's geometry equals the one-checkpoint run's."""
    base, rl = pair
    calls: list[tuple] = []
    real = geometry.geometry_spectra

    def counting(Wb, Wr, **kw):
        if kw.get("base_spectrum") is None:          # W_base's spectrum computed (not reused)
            calls.append(tuple(Wb.shape))
        return real(Wb, Wr, **kw)

    monkeypatch.setattr(geometry, "geometry_spectra", counting)
    two = diff(str(base), [str(rl), str(rl)], device="cpu", progress=False, geometry=True)["geometry"]["checkpoints"]
    one = docs[0]["geometry"]["checkpoints"][0]["matrices"]
    n_changed = sum(1 for m in one if m["delta_energy"] is not None)
    assert len(calls) == len(one) >= n_changed > 0
    for ck in two:
        for a, b in zip(ck["matrices"], one):
            assert a["name"] == b["name"]
            for ra, rb in zip(a["metrics"], b["metrics"]):
                assert ra["value"] == pytest.approx(rb["value"], rel=1e-12, abs=1e-14), (a["name"], ra["metric"])


def test_without_geometry_the_document_is_unchanged(docs):
    with_geo, without = docs
    assert "geometry" not in without and "geometry" not in without["settings"]
    assert list(without["timings_s"]) == list(PHASES)
    assert "geometry" not in without["run"]["settings"]
    # the geometry pass leaves every other number as it was
    for key in ("checkpoints", "alignment", "clustering", "skipped_tensors", "architecture", "base_dtype"):
        assert json.dumps(with_geo[key], sort_keys=True) == json.dumps(without[key], sort_keys=True), key
    # the report gains nothing: its geometry section and the precision section's ULP tables are empty
    page = report.Page()
    report._geometry(page, without, ["rl"])
    report._ulp_tables(page, without, ["rl"])
    assert page.blocks == []


@pytest.fixture(scope="module")
def planted_in_top8(root) -> tuple[Path, Path]:
    """Every 2-D weight gets ΔW = U_8 diag(c) V_8ᵀ inside its base's top-8 left and right singular
    subspaces (numpy SVD of the stored float32 weights)."""
    base = root / "base"
    rng = np.random.default_rng(7)
    rl = {}
    for k, t in _state(base).items():
        W = t.double().numpy()
        if W.ndim == 2:
            U, s, Vt = np.linalg.svd(W, full_matrices=False)
            W = W + (U[:, :8] * (0.05 * s[:8] * rng.uniform(0.5, 1.0, 8))) @ Vt[:8]
        rl[k] = W
    return base, _write(root / "top8", rl)


def test_planted_update_in_the_top_subspace(planted_in_top8, tmp_path):
    base, rl = planted_in_top8
    out = tmp_path / "rep"
    assert main([str(base), str(rl), "--out", str(out), "--geometry", "--quiet"]) == 0
    doc = json.loads((out / "report.json").read_text())
    g = doc["geometry"]["checkpoints"][0]
    for m in g["matrices"]:
        both = next(r for r in m["metrics"] if r["metric"] == "energy_both" and r["param"] == 8.0)
        assert both["value"] == pytest.approx(1.0, abs=1e-6), m["name"]
        assert both["baseline"] <= 0.125                                     # k²/(mn): 64/512 for 16 × 32
    agg = {(a["metric"], a["param"]): a for a in g["aggregate"]}
    assert agg[("energy_both", 8.0)]["value"] == pytest.approx(1.0, abs=1e-6)
    assert agg[("energy_left", 8.0)]["value"] == pytest.approx(1.0, abs=1e-6)
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "## Geometry of the update" in md and "Geometry of the update" in html
    reading = "The update concentrates on the principal directions: 100% of its energy in the top-8 left"
    assert reading in md and reading in html
    assert "The update avoids the principal directions" not in md
    # the precision section: the ULP histogram of ΔW in W_base's dtype (float32 here)
    assert "| |ΔW| in ULPs of float32 | entries | share |".replace("|ΔW|", "\\|ΔW\\|") in md
    assert "unchanged in float32" in md


def test_geometry_with_a_lora_adapter_is_no_longer_refused(pair, tmp_path, capsys):
    """LoRA adapters get the geometry from their factors (tests/analysis/diff/test_lora_geometry.py):
    an adapter directory is read as such, and a broken one is refused for what is wrong with it."""
    base, _ = pair
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4,
                                                        "target_modules": ["q_proj"]}))
    with pytest.raises(ValueError, match=r"has no adapter_model\.safetensors"):
        diff(str(base), [str(ad)], device="cpu", progress=False, geometry=True)
    out = tmp_path / "rep"
    assert main([str(base), str(ad), "--out", str(out), "--geometry", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "has no adapter_model.safetensors" in err and "dense checkpoints only" not in err
    assert not out.exists()
