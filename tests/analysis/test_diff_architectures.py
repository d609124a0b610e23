"""The checkpoint diff on twelve architectures built from transformers' own config classes.

Each pair is a tiny ``save_pretrained`` checkpoint and a copy with a planted ΔW written into
its safetensors files (:func:`tests.analysis.tiny_checkpoints.plant_files`): the output head
(explicit ``lm_head`` or the tied input embedding) gets σ = [4, bulk of 20], every 2-D weight
of block 1 a rank-2 ΔW with σ = (0.3, 0.1), block 0 nothing.  Expected numbers come from the
planted spectra and from numpy on the ΔW as stored, never from the code under test.  Fused
projections (Phi-3 ``qkv_proj`` / ``gate_up_proj``, GPT-2 Conv1D ``c_attn``) are also reported
per part.  Hidden-state geometry runs on every architecture.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis import diff as wd
from analysis import hidden_states as hs
from tests.analysis import tiny_checkpoints as tc

ARCHS = tuple(tc.MATRIX)
TIED = {a for a, (_, _, _, tie) in tc.MATRIX.items() if tie}
#: hidden-state geometry in the default run for these (scaled tied embeddings and logit soft-capping,
#: fused projections, experts, Conv1D); the other architectures are marked slow (about 1 s each)
FAST_HIDDEN = ("gemma2", "phi3", "mixtral", "gpt2")


@pytest.fixture(scope="module")
def docs():
    """Every pair built and diffed once for the module."""
    out = {}
    for arch in ARCHS:
        base, rl, planted = tc.arch_pair(arch)
        out[arch] = (base, rl, planted, wd.diff(str(base), [str(rl)], device="cpu", progress=False))
    return out


def test_the_matrix_covers_the_promised_architectures():
    assert {"qwen2", "qwen3", "llama_tied", "llama_untied", "mistral", "phi3", "gpt2", "olmo2", "qwen3_moe",
            "mixtral"} <= set(ARCHS) and {"gemma2", "gemma3"} & set(ARCHS)


@pytest.mark.parametrize("arch", ARCHS)
def test_planted_head_update_is_recovered(docs, arch):
    base, rl, planted, doc = docs[arch]
    c = doc["checkpoints"][0]
    h = c["output_head"]
    head = tc.head_name(base)
    assert h["name"] == head and h["tied"] == (arch in TIED)
    assert doc["architecture"]["tied_embeddings"] == (arch in TIED)
    sig = tc.head_sigmas(n_bulk=20)
    s = np.asarray(h["singular_values"])
    np.testing.assert_allclose(s[:len(sig)], sig, rtol=0, atol=2e-6)     # float32 storage rounds W + ΔW
    assert h["s1_s2"] == pytest.approx(sig[0] / sig[1], rel=1e-5)
    assert h["rank1_fraction"] == pytest.approx(sig[0] ** 2 / (sig ** 2).sum(), rel=1e-5)
    # against numpy on the ΔW as stored
    d = tc.stored_delta(base, rl)[head]
    ref = np.linalg.svd(d, compute_uv=False)
    np.testing.assert_allclose(s, ref[:len(s)], rtol=0, atol=2 ** -24 * np.linalg.norm(d) + 1e-12)


@pytest.mark.parametrize("arch", ARCHS)
def test_planted_block_updates_are_recovered_and_nothing_else_moves(docs, arch):
    base, rl, planted, doc = docs[arch]
    c = doc["checkpoints"][0]
    recs = {r["name"]: r for r in c["layers"]}
    stored = tc.stored_delta(base, rl)
    blocks = [k for k in planted if k != tc.head_name(base)]
    assert blocks, arch
    for k in blocks:
        r = recs[k]
        assert r["kind"] == "block" and r["layer"] == 1
        assert r["s1_s2"] == pytest.approx(3.0, rel=1e-4), k
        assert r["rank1_fraction"] == pytest.approx(0.9, rel=1e-4), k
        assert r["l2"] == pytest.approx(float(np.linalg.norm(stored[k])), rel=1e-6)
    for k, r in recs.items():
        if k not in planted:
            assert r["l2"] == 0.0, k
    total = np.sqrt(sum(float((v ** 2).sum()) for v in stored.values()))
    assert c["global_l2"] == pytest.approx(total, rel=1e-6)
    assert c["per_layer"][0]["l2"] == 0.0 and c["per_layer"][1]["l2_share"] > 0
    assert c["inner_s1_s2_mean"] == pytest.approx(3.0, rel=1e-4)


def _part_ref(d: np.ndarray, axis: int, a: int, z: int) -> tuple[float, float]:
    sub = d[a:z] if axis == 0 else d[:, a:z]
    s = np.linalg.svd(sub, compute_uv=False)
    return float(np.linalg.norm(sub)), float(s[0] / s[1])


@pytest.mark.parametrize("arch, suffix, parts", [
    ("phi3", "layers.1.self_attn.qkv_proj.weight", [("q", 0, 0, 32), ("k", 0, 32, 48), ("v", 0, 48, 64)]),
    ("phi3", "layers.1.mlp.gate_up_proj.weight", [("gate", 0, 0, 48), ("up", 0, 48, 96)]),
    ("gpt2", "h.1.attn.c_attn.weight", [("q", 1, 0, 32), ("k", 1, 32, 64), ("v", 1, 64, 96)]),
])
def test_fused_projections_are_reported_whole_and_per_part(docs, arch, suffix, parts):
    base, rl, planted, doc = docs[arch]
    recs = {r["name"]: r for r in doc["checkpoints"][0]["layers"]}
    name = next(k for k in recs if k.endswith(suffix))
    r = recs[name]
    assert r["s1_s2"] == pytest.approx(3.0, rel=1e-4)           # the stored matrix
    got = [(p["part"], p["axis"], p["start"], p["stop"]) for p in r["parts"]]
    assert got == parts
    d = tc.stored_delta(base, rl)[name]
    for p in r["parts"]:
        l2, s12 = _part_ref(d, p["axis"], p["start"], p["stop"])
        assert p["l2"] == pytest.approx(l2, rel=1e-6)
        assert p["s1_s2"] == pytest.approx(s12, rel=1e-4)
    assert np.hypot.reduce([p["l2"] for p in r["parts"]]) == pytest.approx(r["l2"], rel=1e-6)
    assert r.get("stored_transposed", False) == (arch == "gpt2")


def test_moe_pairs_keep_every_expert_and_router(docs):
    for arch, router in (("qwen3_moe", "mlp.gate.weight"), ("mixtral", "block_sparse_moe.gate.weight")):
        recs = {r["name"]: r for r in docs[arch][3]["checkpoints"][0]["layers"]}
        experts = [k for k in recs if ".experts." in k and ".layers.1." in k]
        assert len(experts) == 4 * 3, arch                       # 4 experts x 3 matrices, one row each
        assert all(recs[k]["s1_s2"] == pytest.approx(3.0, rel=1e-4) for k in experts)
        assert recs[f"model.layers.1.{router}"]["s1_s2"] == pytest.approx(3.0, rel=1e-4)


@pytest.mark.parametrize("arch", [a if a in FAST_HIDDEN else pytest.param(a, marks=pytest.mark.slow) for a in ARCHS])
def test_hidden_state_geometry_runs(arch):
    base, _, _ = tc.arch_pair(arch)
    rng = np.random.default_rng(7)
    ro = [{"prompt_ids": rng.integers(3, tc.M_VOCAB, 3).tolist(),
           "completion_ids": rng.integers(3, tc.M_VOCAB, 5).tolist(), "correct": i % 2 == 0} for i in range(6)]
    doc = hs.geometry(str(base), ro, device="cpu", batch_size=3, progress=False)
    assert doc["n_tokens"] == {"success": 15, "failure": 15}
    assert doc["hidden_size"] == tc.M_HIDDEN and doc["vocab_size"] == tc.M_VOCAB
    for g in ("success", "failure"):
        assert np.isfinite(doc["rho_perp"][g]) and np.isfinite(doc["residual_norm"][g])
