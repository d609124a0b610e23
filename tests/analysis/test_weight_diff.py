"""analysis.diff on real tiny checkpoints with a planted ΔW.

Expected values come from the planted singular values (hand formulas written out here) and
from numpy on the ΔW as stored (safetensors' own loader + numpy.linalg.svd), never from
analysis.spectra or the code under test.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import diff as wd
from analysis.diff import stream
from tests.analysis import tiny_checkpoints as tc


def ref_svd(M: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy SVD with the documented sign convention (largest-|entry| of u positive)."""
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    u, v = U[:, 0], Vt[0]
    sg = np.sign(u[np.argmax(np.abs(u))])
    return s, u * sg, v * sg


def f32_bound(d: np.ndarray) -> float:
    """ΔW is formed in float32: each entry is the exact difference times (1 + ε), |ε| <= 2^-24,
    so every singular value moves by at most ‖E‖_2 <= ‖E‖_F <= 2^-24·‖ΔW‖_F (Weyl)."""
    return 2.0 ** -24 * float(np.linalg.norm(d)) + 1e-15


def srank_ref(s: np.ndarray, delta: float) -> int:
    c = np.cumsum(s) / s.sum()
    return int(np.argmax(c >= 1 - delta)) + 1


@pytest.fixture(scope="module")
def planted():
    base = tc.qwen2_base()
    rl, pl = tc.qwen2_planted()
    doc = wd.diff(str(base), [str(rl)], progress=False)
    return base, rl, pl, doc, tc.stored_delta(base, rl)


def test_output_head_metrics_come_back(planted):
    base, rl, pl, doc, st = planted
    c = doc["checkpoints"][0]
    h = c["output_head"]
    assert h["name"] == "lm_head.weight" and h["tied"] is False
    sig = tc.head_sigmas()          # [4, 0.25, ..., 0.128]: 41 planted singular values
    s = np.array(h["singular_values"])
    assert s.shape == (tc.HIDDEN,)
    # against numpy on the stored ΔW (float32 rounding included): to float64 precision
    s_ref, u_ref, _ = ref_svd(st["lm_head.weight"])
    np.testing.assert_allclose(s, s_ref, rtol=0, atol=f32_bound(st["lm_head.weight"]))
    # against the planted spectrum: float32 storage rounds W + ΔW, ~1e-7 relative to W
    np.testing.assert_allclose(s[:41], sig, rtol=0, atol=2e-6)
    assert np.all(s[41:] < 1e-5)
    assert h["s1_s2"] == pytest.approx(4 / 0.25, rel=1e-5)
    r1 = 16 / (sig ** 2).sum()      # σ1² / ‖ΔW‖²_F
    assert h["rank1_fraction"] == pytest.approx(r1, rel=1e-6)
    assert h["stable_rank"] == pytest.approx(1 / r1, rel=1e-6)
    p = sig / sig.sum()
    assert h["effective_rank"] == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-5)
    assert h["srank"] == {"0.01": srank_ref(sig, 0.01), "0.05": srank_ref(sig, 0.05), "0.1": srank_ref(sig, 0.1)}
    assert h["srank"]["0.01"] == 41 and h["srank"]["0.1"] < 41
    # u over the vocabulary
    assert h["u_negative_fraction"] == np.mean(u_ref < 0)
    e = np.sort(u_ref ** 2)[::-1]
    # (u moves by ~‖E‖/(σ1 − σ2) ≈ 1e-7 from the float32 rounding of ΔW)
    assert h["u_energy_share"]["0.01"] == pytest.approx(e[:4].sum(), rel=1e-6)      # ceil(0.01·384) = 4
    assert h["u_energy_share"]["0.22"] == pytest.approx(e[:85].sum(), rel=1e-6)     # ceil(0.22·384) = 85
    half = int(np.argmax(np.cumsum(e) >= 0.5)) + 1
    assert h["u_vocab_fraction_for_half_energy"] == half / tc.VOCAB
    np.testing.assert_allclose(h["u_quantiles"][0], u_ref.min(), atol=1e-7)
    # top tokens decoded with the tokenizer found in the checkpoint (id i -> "w{i-4}")
    top = [t for t in h["top_tokens"] if t["sign"] == "+"]
    bot = [t for t in h["top_tokens"] if t["sign"] == "-"]
    assert [t["token_id"] for t in top[:5]] == list(np.argsort(-u_ref, kind="stable")[:5])
    assert [t["token_id"] for t in bot[:5]] == list(np.argsort(u_ref, kind="stable")[:5])
    for t in top + bot:
        assert t["token"] == (f"w{t['token_id'] - 4}" if t["token_id"] >= 4 else t["token"])
    assert doc["settings"]["tokenizer"] == str(rl)


def test_norms_shares_and_densities(planted):
    base, rl, pl, doc, st = planted
    c = doc["checkpoints"][0]
    b = tc.load_state(base)
    tot = sum((d ** 2).sum() for d in st.values())
    assert c["global_l2"] == pytest.approx(math.sqrt(tot), rel=2 ** -23)   # float32 differences
    btot = sum((t.double().numpy() ** 2).sum() for t in b.values())
    assert c["relative_l2"] == pytest.approx(math.sqrt(tot / btot), rel=2 ** -23)
    recs = {r["name"]: r for r in c["layers"]}
    assert set(recs) == set(st)
    assert sum(r["l2_share"] for r in c["layers"]) == pytest.approx(1.0, abs=1e-12)
    for k, d in st.items():
        assert recs[k]["l2"] == pytest.approx(np.linalg.norm(d), rel=2 ** -23, abs=1e-300)
        assert recs[k]["l2_share"] == pytest.approx((d ** 2).sum() / tot, rel=2 ** -21, abs=1e-300)
    assert c["output_head"]["l2_share"] == pytest.approx((st["lm_head.weight"] ** 2).sum() / tot, rel=2 ** -21)
    # densities: exactly the planted entries of the final norm ...
    assert recs["model.norm.weight"]["density"] == {"0": 26 / 64, "1e-05": 15 / 64, "0.0001": 8 / 64, "0.001": 3 / 64}
    # ... and globally the numpy count over every stored ΔW
    n = sum(d.size for d in st.values())
    for tol, key in zip((0, 1e-5, 1e-4, 1e-3), ("0", "1e-05", "0.0001", "0.001")):
        cnt = sum(int((np.abs(d) > tol).sum()) for d in st.values())
        assert c["density"][key] == cnt / n
    assert c["n_entries"] == n
    # per layer: sum of its tensors
    for pl_ in c["per_layer"]:
        i = pl_["layer"]
        ss = sum((d ** 2).sum() for k, d in st.items() if f".layers.{i}." in k)
        assert pl_["l2_share"] == pytest.approx(ss / tot, rel=2 ** -21)
    assert c["inner_l2_share_mean"] == pytest.approx(np.mean([x["l2_share"] for x in c["per_layer"]]), rel=1e-12)
    assert sum(c["l2_share_by_kind"].values()) == pytest.approx(1.0, abs=1e-12)
    assert c["vocab_note"] is None


def test_every_block_matrix_reports_its_planted_ratio(planted):
    base, rl, pl, doc, st = planted
    c = doc["checkpoints"][0]
    blocks = [r for r in c["layers"] if r["kind"] == "block" and len(r["shape"]) == 2]
    assert len(blocks) == 3 * 7
    for r in blocks:
        # rank-2 ΔW with σ = (0.3, 0.1): s1/s2 = 3, r1 = 0.09/0.1 = 0.9
        assert r["s1_s2"] == pytest.approx(3.0, rel=1e-4), r["name"]
        assert r["rank1_fraction"] == pytest.approx(0.9, rel=1e-5)
        s_ref = np.linalg.svd(st[r["name"]], compute_uv=False)
        assert len(r["top_singular_values"]) == min(64, min(r["shape"]))
        np.testing.assert_allclose(r["top_singular_values"], s_ref[:len(r["top_singular_values"])],
                                   atol=f32_bound(st[r["name"]]))
        assert "effective_rank" not in r          # top-k by default
    assert c["inner_s1_s2_mean"] == pytest.approx(3.0, rel=1e-4)
    assert c["inner_rank1_fraction_mean"] == pytest.approx(0.9, rel=1e-5)
    assert c["inner_n_matrices"] == 21
    one_d = [r for r in c["layers"] if len(r["shape"]) == 1]
    assert all(r["s1_s2"] is None for r in one_d)


def test_to_frame(planted):
    base, rl, pl, doc, st = planted
    df = wd.to_frame(doc)
    assert len(df) == len(st) and set(df["name"]) == set(st)
    assert df["l2_share"].sum() == pytest.approx(1.0, abs=1e-12)
    row = df.set_index("name").loc["model.norm.weight"]
    assert row["density_0"] == 26 / 64 and row["density_0.001"] == 3 / 64


def test_layers_head_and_full_spectrum_options(planted):
    base, rl, pl, doc, st = planted
    d_head = wd.diff(str(base), [str(rl)], layers="head", progress=False)["checkpoints"][0]
    assert d_head["output_head"]["s1_s2"] == pytest.approx(doc["checkpoints"][0]["output_head"]["s1_s2"], rel=1e-12)
    assert all(r["s1_s2"] is None for r in d_head["layers"] if r["kind"] != "head")
    assert d_head["global_l2"] == doc["checkpoints"][0]["global_l2"]
    assert d_head["inner_s1_s2_mean"] is None
    full = wd.diff(str(base), [str(rl)], full_spectrum=True, top_k=4, progress=False)["checkpoints"][0]
    q = next(r for r in full["layers"] if r["name"] == "model.layers.1.self_attn.q_proj.weight")
    pq = np.array([0.75, 0.25])   # σ = (0.3, 0.1) planted; the float32 rounding tail (62 values
    # ~1e-8) adds ~1e-5 to the entropy, so the tight reference is numpy on the stored ΔW
    assert q["effective_rank"] == pytest.approx(math.exp(-(pq * np.log(pq)).sum()), rel=1e-4)
    sq = np.linalg.svd(st[q["name"]], compute_uv=False)
    pp = sq / sq.sum()
    assert q["effective_rank"] == pytest.approx(math.exp(-(pp * np.log(pp)).sum()), rel=1e-6)
    assert q["srank"] == {"0.01": 2, "0.05": 2, "0.1": 2}
    assert q["n_singular_values"] == 64 and len(q["top_singular_values"]) == 4
    topk = wd.diff(str(base), [str(rl)], top_k=4, progress=False)["checkpoints"][0]
    q4 = next(r for r in topk["layers"] if r["name"] == "model.layers.1.self_attn.q_proj.weight")
    assert q4["n_singular_values"] == 4 and q4["s1_s2"] == pytest.approx(3.0, rel=1e-4)


def test_torch_code_path_gives_the_same_numbers(planted, monkeypatch):
    """The CUDA code path (torch reductions), run on CPU tensors, agrees with the numpy path."""
    base, rl, pl, doc, st = planted
    monkeypatch.setattr(stream, "_TORCH_ON_CPU", True)
    t = wd.diff(str(base), [str(rl)], progress=False)["checkpoints"][0]
    c = doc["checkpoints"][0]
    assert t["density"] == c["density"]
    assert t["global_l2"] == pytest.approx(c["global_l2"], rel=1e-13)
    np.testing.assert_allclose(t["output_head"]["singular_values"], c["output_head"]["singular_values"], atol=1e-13)
    for a, b in zip(t["layers"], c["layers"]):
        assert a["name"] == b["name"] and a["density"] == b["density"]
        assert a["l2"] == pytest.approx(b["l2"], rel=1e-13, abs=1e-300)
        if b["s1_s2"] is not None:
            assert a["s1_s2"] == pytest.approx(b["s1_s2"], rel=1e-10)


@pytest.mark.gpu
def test_cuda_matches_cpu(planted):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    base, rl, pl, doc, st = planted
    g = wd.diff(str(base), [str(rl)], device="cuda", progress=False)
    assert g["device"].startswith("cuda")
    c, t = doc["checkpoints"][0], g["checkpoints"][0]
    assert t["density"] == c["density"]
    assert t["global_l2"] == pytest.approx(c["global_l2"], rel=1e-12)
    np.testing.assert_allclose(t["output_head"]["singular_values"], c["output_head"]["singular_values"], atol=1e-12)
    assert t["inner_s1_s2_mean"] == pytest.approx(c["inner_s1_s2_mean"], rel=1e-9)


def test_bf16_sharded_llama(tmp_path):
    base = tc.cached("llama_bf16_sharded", lambda p: tc.build(p, "llama", dtype="bfloat16", sharded=True))
    head = tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), tc.head_sigmas(spike=2.0, bulk=0.1), 3)
    tc.plant(base, tmp_path / "rl", head=head, sharded=True)
    assert len(list((tmp_path / "rl").glob("model-*.safetensors"))) > 1
    st = tc.stored_delta(base, tmp_path / "rl")
    c = wd.diff(str(base), [str(tmp_path / "rl")], progress=False)["checkpoints"][0]
    s_ref, u_ref, _ = ref_svd(st["lm_head.weight"])
    h = c["output_head"]
    # differences of bfloat16 values are exact in float32 (unless magnitudes differ by > 2^16)
    np.testing.assert_allclose(h["singular_values"], s_ref, atol=1e-13 * s_ref[0])
    assert h["s1_s2"] == pytest.approx(s_ref[0] / s_ref[1], rel=1e-12)
    assert h["s1_s2"] == pytest.approx(20, rel=0.05)          # planted 2/0.1, bf16 rounding
    assert h["u_negative_fraction"] == np.mean(u_ref < 0)
    tot = sum((d ** 2).sum() for d in st.values())
    assert c["global_l2"] == pytest.approx(math.sqrt(tot), rel=1e-12)
    assert h["top_tokens"][0]["token"] is None                  # no tokenizer: ids only


def test_gpt2_tied_head(tmp_path):
    base = tc.cached("gpt2_fp32_sharded", lambda p: tc.build(p, "gpt2", dtype="float32", sharded=True))
    head = tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), tc.head_sigmas(spike=3.0, bulk=0.5, n_bulk=10), 4)
    tc.plant(base, tmp_path / "rl", head=head)
    doc = wd.diff(str(base), [str(tmp_path / "rl")], progress=False)
    assert doc["architecture"]["tied_embeddings"] is True
    h = doc["checkpoints"][0]["output_head"]
    assert h["name"] == "transformer.wte.weight" and h["tied"] is True
    assert h["s1_s2"] == pytest.approx(6.0, rel=1e-5)
    sig = tc.head_sigmas(spike=3.0, bulk=0.5, n_bulk=10)
    assert h["rank1_fraction"] == pytest.approx(9 / (sig ** 2).sum(), rel=1e-6)
    kinds = {r["name"]: r["kind"] for r in doc["checkpoints"][0]["layers"]}
    assert kinds["transformer.wpe.weight"] == "embedding" and kinds["transformer.h.2.attn.c_attn.weight"] == "block"


def test_resized_vocabulary_compares_common_rows(tmp_path):
    from transformers import AutoModelForCausalLM

    base = tc.qwen2_base()
    m = AutoModelForCausalLM.from_pretrained(base)
    m.resize_token_embeddings(tc.VOCAB + 8)
    head = tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), tc.head_sigmas(), 5)
    with torch.no_grad():
        w = m.lm_head.weight
        w[:tc.VOCAB] = (w[:tc.VOCAB].double() + torch.from_numpy(head)).float()
    m.save_pretrained(tmp_path / "rl")
    c = wd.diff(str(base), [str(tmp_path / "rl")], progress=False)["checkpoints"][0]
    assert f"base has {tc.VOCAB} rows" in c["vocab_note"] and f"this checkpoint {tc.VOCAB + 8}" in c["vocab_note"]
    assert "lm_head.weight" in c["vocab_note"] and "model.embed_tokens.weight" in c["vocab_note"]
    h = c["output_head"]
    assert h["rows_compared"] == tc.VOCAB
    np.testing.assert_allclose(h["singular_values"][:41], tc.head_sigmas(), atol=2e-6)
    assert h["s1_s2"] == pytest.approx(16, rel=1e-5)
    rec = {r["name"]: r for r in c["layers"]}
    assert rec["lm_head.weight"]["vocab_rows"] == {"base": tc.VOCAB, "checkpoint": tc.VOCAB + 8}


# ------------------------------------------------------ series and alignment
def _rotated(shape, c_u, c_v, seed, big=2.0, small=0.2):
    """ΔW = big·(c_u q1 + s_u q2)(c_v p1 + s_v p2)ᵀ + small·q3 p3ᵀ: the leading u has
    |cos| = c_u with q1, the leading v |cos| = c_v with p1."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((shape[0], 3)))[0]
    P = np.linalg.qr(rng.standard_normal((shape[1], 3)))[0]
    u = c_u * Q[:, 0] + math.sqrt(1 - c_u ** 2) * Q[:, 1]
    v = c_v * P[:, 0] + math.sqrt(1 - c_v ** 2) * P[:, 1]
    return big * np.outer(u, v) + small * np.outer(Q[:, 2], P[:, 2])


def test_series_alignment_against_the_last_checkpoint(tmp_path):
    base = tc.cached("llama_fp32", lambda p: tc.build(p, "llama", dtype="float32"))
    st = tc.load_state(base)
    mats = sorted(k for k, t in st.items() if t.ndim == 2 and ".layers." in k)
    run = tmp_path / "run"
    run.mkdir()
    # (head cos u, head cos v, per-layer cos u) for steps 100, 200 and the last, 300
    plan = {100: (0.6, 1.0, (0.5, 0.7, 1.0)), 200: (1.0, 0.8, (0.9, 0.2, 0.4)), 300: (1.0, 1.0, (1.0, 1.0, 1.0))}
    for step, (cu, cv, lay) in plan.items():
        deltas = {}
        for j, k in enumerate(mats):
            li = int(k.split(".layers.")[1].split(".")[0])
            deltas[k] = _rotated(tuple(st[k].shape), lay[li], 1.0, 100 + j)
        tc.plant(base, run / f"checkpoint-{step:06d}", head=_rotated((tc.VOCAB, tc.HIDDEN), cu, cv, 7),
                 deltas=deltas)
    (run / ".checkpoint-000400.tmp").mkdir()          # a partial write is ignored
    (run / "checkpoint-000050").mkdir()               # no config.json: ignored
    paths = wd.series(run)
    assert [Path(p).name for p in paths] == ["checkpoint-000100", "checkpoint-000200", "checkpoint-000300"]
    doc = wd.diff(str(base), paths, progress=False)
    al = doc["alignment"]
    assert al["steps"] == [100, 200, 300] and al["reference"] == paths[-1]
    np.testing.assert_allclose(al["output_head"]["u"], [0.6, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(al["output_head"]["v"], [1.0, 0.8, 1.0], atol=1e-6)
    assert {k: v["layers"] for k, v in al["thirds"].items()} == {"early": [0], "mid": [1], "late": [2]}
    for third, li in (("early", 0), ("mid", 1), ("late", 2)):
        np.testing.assert_allclose(al["thirds"][third]["u"], [plan[s][2][li] for s in (100, 200, 300)], atol=1e-6)
        np.testing.assert_allclose(al["thirds"][third]["v"], [1.0, 1.0, 1.0], atol=1e-6)
    assert [c["step"] for c in doc["checkpoints"]] == [100, 200, 300]


def test_series_refusals(tmp_path):
    with pytest.raises(ValueError, match=r"^run_dir must be a training-run directory"):
        wd.series(tmp_path / "none")
    with pytest.raises(ValueError, match=r"^run_dir must hold checkpoint-<step> directories"):
        wd.series(tmp_path)


def test_thirds():
    assert wd.thirds(28) == {"early": list(range(10)), "mid": list(range(10, 19)), "late": list(range(19, 28))}
    assert wd.thirds(3) == {"early": [0], "mid": [1], "late": [2]}


# --------------------------------------------------------------- clustering
def test_pairwise_cosine_and_clustering_across_runs(tmp_path, planted):
    base, rl_a, pl_a, _, st_a = planted
    rng = np.random.default_rng(11)
    head_b = pl_a["lm_head.weight"] + 0.005 * rng.standard_normal((tc.VOCAB, tc.HIDDEN))
    deltas_b = {k: v for k, v in pl_a.items() if k != "lm_head.weight"}
    tc.plant(base, tmp_path / "b", head=head_b, deltas=deltas_b)
    tc.plant(base, tmp_path / "c", head=tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), tc.head_sigmas(), 99),
             deltas=tc.block_deltas(base, seed=500))
    runs = [str(rl_a), str(tmp_path / "b"), str(tmp_path / "c")]
    doc = wd.diff(str(base), runs, progress=False)
    cl = doc["clustering"]
    sts = [st_a, tc.stored_delta(base, tmp_path / "b"), tc.stored_delta(base, tmp_path / "c")]
    flat = np.stack([np.concatenate([s[k].ravel() for k in sorted(s)]) for s in sts])
    nrm = np.linalg.norm(flat, axis=1)
    want = flat @ flat.T / np.outer(nrm, nrm)
    np.testing.assert_allclose(cl["cosine_global"], want, atol=1e-6)
    assert want[0, 1] > 0.95 and abs(want[0, 2]) < 0.2
    # per layer: only the tensors of block 1
    keys = [k for k in sorted(st_a) if ".layers.1." in k]
    f1 = np.stack([np.concatenate([s[k].ravel() for k in keys]) for s in sts])
    n1 = np.linalg.norm(f1, axis=1)
    np.testing.assert_allclose(cl["cosine_per_layer"]["layer 1"], f1 @ f1.T / np.outer(n1, n1), atol=1e-6)
    fh = np.stack([s["lm_head.weight"].ravel() for s in sts])
    nh = np.linalg.norm(fh, axis=1)
    np.testing.assert_allclose(cl["cosine_per_layer"]["output head"], fh @ fh.T / np.outer(nh, nh), atol=1e-6)
    # the two similar runs merge first
    assert sorted(int(x) for x in cl["linkage"][0][:2]) == [0, 1]
    assert cl["linkage"][0][2] == pytest.approx(1 - want[0, 1], abs=1e-6)
    us = [ref_svd(s["lm_head.weight"])[1] for s in sts]
    vs = [ref_svd(s["lm_head.weight"])[2] for s in sts]
    for i in range(3):
        for j in range(3):
            assert cl["head_u_abs_cos"][i][j] == pytest.approx(abs(us[i] @ us[j]), abs=1e-6)
            assert cl["head_v_abs_cos"][i][j] == pytest.approx(abs(vs[i] @ vs[j]), abs=1e-6)


def test_blocked_cross_products_match_kept_ones(planted, tmp_path, monkeypatch):
    """The row-block re-reading path (tensors too large to keep) gives the same cosines."""
    base, rl_a, pl_a, _, _ = planted
    tc.plant(base, tmp_path / "c", head=tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), tc.head_sigmas(), 99))
    runs = [str(rl_a), str(tmp_path / "c")]
    kept = wd.diff(str(base), runs, progress=False)["clustering"]
    monkeypatch.setattr(wd._Ops, "nbytes", lambda self, shape: 10 ** 12 if shape else 0)
    blocked = wd.diff(str(base), runs, progress=False)["clustering"]
    np.testing.assert_allclose(blocked["cosine_global"], kept["cosine_global"], atol=1e-13)
    for g in kept["cosine_per_layer"]:
        np.testing.assert_allclose(blocked["cosine_per_layer"][g], kept["cosine_per_layer"][g], atol=1e-13)


# ------------------------------------------------------------------ memory
def test_streaming_memory_stays_near_three_largest_tensors(tmp_path):
    """numpy's traced peak during a diff of a bf16 pair stays below 2.75× the largest tensor
    in float32 (the stored bf16 tensor being read, 0.5× more, is a torch allocation); the
    two whole models would be 7.5×.  Shapes like a real decoder: a tall head and embedding,
    smaller blocks."""
    from safetensors.torch import save_file

    rng = torch.Generator().manual_seed(0)
    shapes = {"lm_head.weight": (12288, 128), "model.embed_tokens.weight": (12288, 128)}
    shapes.update({f"model.layers.{i}.mlp.up_proj.weight": (1024, 128) for i in range(24)})
    for name in ("base", "rl"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "qwen2", "vocab_size": 12288, "tie_word_embeddings": false}')
        tensors = {k: (torch.randn(*s, generator=rng) * 0.02).bfloat16() for k, s in shapes.items()}
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    largest = 4 * 12288 * 128
    total = 2 * 4 * sum(a * b for a, b in shapes.values())
    assert total > 7.5 * largest
    wd.diff(str(tmp_path / "base"), [str(tmp_path / "rl")], progress=False)  # warm-up (imports, caches)
    tracemalloc.start()
    try:
        doc = wd.diff(str(tmp_path / "base"), [str(tmp_path / "rl")], progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert doc["checkpoints"][0]["output_head"]["rank1_fraction"] < 0.05   # random ΔW: not rank-1
    assert peak < 2.75 * largest, peak / largest


# ------------------------------------------------------------------ refusals
def test_argument_refusals(planted):
    base, rl, *_ = planted
    b, r = str(base), [str(rl)]
    with pytest.raises(ValueError, match=r"^checkpoints must be a non-empty sequence"):
        wd.diff(b, [])
    with pytest.raises(ValueError, match=r"^checkpoints must be a non-empty sequence"):
        wd.diff(b, str(rl))
    with pytest.raises(ValueError, match=r"^top_k must be an integer >= 2"):
        wd.diff(b, r, top_k=1)
    with pytest.raises(ValueError, match=r"^layers must be one of 'all', 'head'"):
        wd.diff(b, r, layers="mlp")
    with pytest.raises(ValueError, match=r"^device must be"):
        wd.diff(b, r, device="tpu")
    with pytest.raises(ValueError, match=r"^full_spectrum must be one of True, False"):
        wd.diff(b, r, full_spectrum="yes")
    with pytest.raises(ValueError, match=r"^top_k must be an integer >= 2, got True"):
        wd.diff(b, r, top_k=True)
    with pytest.raises(ValueError, match=r"^top_k must be an integer >= 2, got 8.5"):
        wd.diff(b, r, top_k=8.5)
    with pytest.raises(ValueError, match=r"^tokenizer: .* is not a tokenizer directory"):
        wd.diff(b, r, tokenizer=str(Path(b) / "nope"))


def test_refuses_nan_in_a_checkpoint_naming_it(tmp_path, planted):
    base, rl, *_ = planted
    d = tc.copy(rl, tmp_path / "rl_nan")

    def poison(t):
        t = t.clone()
        t[0, 0] = float("nan")
        return t
    tc.rewrite_tensor(d, "model.layers.0.self_attn.k_proj.weight", poison)
    with pytest.raises(ValueError, match=r"^checkpoints\[1\]: tensor 'model.layers.0.self_attn.k_proj.weight' in file "
                                         r"'.*rl_nan/model.safetensors' holds non-finite values: 1 NaN and 0 Inf"):
        wd.diff(str(base), [str(rl), str(d)], progress=False)


def test_top_k_follows_the_integer_policy_and_the_run_block_records_it(planted):
    """Integral floats and numpy integers are integers (rlvr_plumbing.checks); the document
    carries the run block with the arguments."""
    base, rl, *_ = planted
    docs = [wd.diff(str(base), [str(rl)], top_k=k, layers="head", progress=False) for k in (8, 8.0, np.int64(8))]
    assert [d["settings"]["top_k"] for d in docs] == [8, 8, 8]
    run = docs[1]["run"]
    assert sorted(run) == ["device", "package_version", "seed", "settings", "threads"]
    assert run["settings"]["top_k"] == 8 and type(run["settings"]["top_k"]) is int
    assert run["settings"]["checkpoints"] == [str(rl)] and run["device"] == docs[1]["device"]


def test_identical_checkpoint_gives_zeros_not_nan(planted):
    base, *_ = planted
    c = wd.diff(str(base), [str(base)], progress=False)["checkpoints"][0]
    assert c["global_l2"] == 0.0 and c["relative_l2"] == 0.0
    assert c["density"] == {"0": 0.0, "1e-05": 0.0, "0.0001": 0.0, "0.001": 0.0}
    assert c["output_head"]["s1_s2"] is None and c["output_head"]["singular_values"] == []
    assert any("identical" in n for n in c["notes"])
    assert all(r["l2_share"] == 0.0 for r in c["layers"])


def test_unloadable_tokenizer_found_by_itself_only_loses_the_decoding(tmp_path, planted):
    base, rl, *_ = planted
    d = tc.copy(rl, tmp_path / "rl_badtok")
    (d / "tokenizer.json").write_text("{not a tokenizer")
    doc = wd.diff(str(base), [str(d)], layers="head", progress=False)
    assert doc["settings"]["tokenizer"] is None and "top tokens not decoded" in doc["settings"]["tokenizer_note"]
    assert all(t["token"] is None for t in doc["checkpoints"][0]["output_head"]["top_tokens"])
    with pytest.raises(ValueError, match=r"^tokenizer: could not load a tokenizer"):
        wd.diff(str(base), [str(d)], tokenizer=str(d), progress=False)   # given explicitly: refused
