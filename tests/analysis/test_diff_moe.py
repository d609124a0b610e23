"""The checkpoint diff on mixture-of-experts checkpoints: every expert, routers, shared experts.

Tiny ``save_pretrained`` pairs from transformers' own config classes (Qwen3-MoE and Mixtral of the
architecture matrix; Qwen2-MoE and DeepSeek-V3 for shared experts) with ΔW planted in chosen
experts, the routers and the shared experts (:func:`tests.analysis.tiny_checkpoints.moe_pair`).
Expected numbers come from numpy on the ΔW as stored (read with safetensors), never from the code
under test.  The same experts stored as fused 3-D tensors (``experts.gate_up_proj`` of shape
``(E, 2f, d)`` or ``(E, d, 2f)``, ``experts.down_proj``) give the same per-expert numbers.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from analysis import diff as wd
from analysis import report as rp
from analysis.diff import cli as diff_cli
from analysis.diff import stream
from rlvr_plumbing.serialize import fmt_number
from tests.analysis import tiny_checkpoints as tc

MOE = ("qwen3_moe", "mixtral")
SHARED = ("qwen2_moe", "deepseek_v3")
#: stored per-expert name -> (layer, expert, canonical projection), parsed here independently
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
_CANON = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
METRICS = ("l2", "s1", "s2", "s1_s2", "rank1_fraction")


def _fmt(x) -> str:
    return fmt_number(x, digits=4, thousands=True)     # the report's number format


def _diff(base, rl, **kw):
    return wd.diff(str(base), [str(rl)], device="cpu", progress=False, **kw)


@pytest.fixture(scope="module")
def docs():
    out = {}
    for arch in MOE + SHARED:
        base, rl, planted = tc.moe_pair(arch)
        out[arch] = (base, rl, planted, _diff(base, rl))
    return out


def _ref(d: np.ndarray) -> dict[str, float | None]:
    """Reference metrics of one ΔW with numpy (float64)."""
    s = np.linalg.svd(d, compute_uv=False)
    fro2 = float((d ** 2).sum())
    if fro2 == 0:
        return {"l2": 0.0, "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None}
    return {"l2": float(np.sqrt(fro2)), "s1": float(s[0]), "s2": float(s[1]), "s1_s2": float(s[0] / s[1]),
            "rank1_fraction": float(s[0] ** 2 / fro2)}


def _expert_refs(base, rl) -> dict[tuple[int, int, str], dict]:
    out = {}
    for k, d in tc.stored_delta(base, rl).items():
        m = _EXPERT.match(k)
        if m:
            out[(int(m.group(1)), int(m.group(2)), _CANON.get(m.group(3), m.group(3)))] = dict(_ref(d), name=k)
    return out


def _close(got, want, rel=1e-6, what=""):
    if want is None:
        assert got is None, what
    else:
        assert got == pytest.approx(want, rel=rel, abs=1e-12), what


@pytest.mark.parametrize("arch", MOE + SHARED)
def test_every_expert_matrix_is_a_row_equal_to_numpy(docs, arch):
    base, rl, planted, doc = docs[arch]
    c = doc["checkpoints"][0]
    refs = _expert_refs(base, rl)
    rows = {(x["layer"], x["expert"], x["projection"]): x for x in c["experts"]}
    assert set(rows) == set(refs) and len(c["experts"]) == tc.M_LAYERS * 4 * 3
    for key, ref in refs.items():
        row = rows[key]
        assert row["name"] == ref["name"] and row["index"] is None and row["part"] is None
        for m in METRICS:
            _close(row[m], ref[m], what=(key, m))
        _close(row["l2_share"], ref["l2"] ** 2 / c["global_l2"] ** 2, what=key)
    changed = {k for k, r in refs.items() if r["l2"] > 0}
    assert changed == {(layer, e, ("gate_proj", "up_proj", "down_proj")[q]) for layer, e, q in tc.MOE_PLANT}
    # the planted spectra themselves (float32 storage rounds W + ΔW)
    for (layer, e, q), sig in tc.MOE_PLANT.items():
        row = rows[(layer, e, ("gate_proj", "up_proj", "down_proj")[q])]
        assert row["s1_s2"] == pytest.approx(sig[0] / sig[1], rel=1e-5)
    # the per-tensor records carry the role, the expert index and the canonical projection
    recs = {r["name"]: r for r in c["layers"]}
    for ref in refs.values():
        r = recs[ref["name"]]
        assert r["moe"] == "expert" and r["kind"] == "block"
        assert (r["layer"], r["expert"], r["projection"]) in rows


@pytest.mark.parametrize("arch", MOE + SHARED)
def test_layer_aggregates_equal_independent_sums_max_median(docs, arch):
    base, rl, planted, doc = docs[arch]
    c = doc["checkpoints"][0]
    refs = _expert_refs(base, rl)
    total2 = c["global_l2"] ** 2
    for pl in c["per_layer"]:
        i = pl["layer"]
        mine = {k: v for k, v in refs.items() if k[0] == i}
        agg = pl["moe"]["experts"]
        assert agg["n_experts"] == 4 and agg["n_matrices"] == 12
        energy = sum(v["l2"] ** 2 for v in mine.values())
        assert agg["energy"] == pytest.approx(energy, rel=1e-6)
        assert agg["l2_share"] == pytest.approx(energy / total2, rel=1e-6)
        s12 = [v["s1_s2"] for v in mine.values() if v["s1_s2"] is not None]
        r1 = [v["rank1_fraction"] for v in mine.values() if v["rank1_fraction"] is not None]
        assert agg["n_changed"] == len(s12) > 0
        assert agg["s1_s2_max"] == pytest.approx(max(s12), rel=1e-6)
        assert agg["s1_s2_median"] == pytest.approx(float(np.median(s12)), rel=1e-6)
        assert agg["rank1_fraction_max"] == pytest.approx(max(r1), rel=1e-6)
        assert agg["rank1_fraction_median"] == pytest.approx(float(np.median(r1)), rel=1e-6)
        for proj, sub in agg["by_projection"].items():
            e = sum(v["l2"] ** 2 for k, v in mine.items() if k[2] == proj)
            assert sub["energy"] == pytest.approx(e, rel=1e-6) and sub["n_matrices"] == 4
    assert c["moe"]["n_experts"] == 4 and c["moe"]["layers"] == list(range(tc.M_LAYERS))
    assert c["moe"]["n_expert_matrices"] == len(refs)
    assert c["moe"]["l2_share"]["experts"] == pytest.approx(sum(v["l2"] ** 2 for v in refs.values()) / total2)


@pytest.mark.parametrize("arch", MOE + SHARED)
def test_routers_and_shared_experts_are_their_own_rows(docs, arch):
    base, rl, planted, doc = docs[arch]
    c = doc["checkpoints"][0]
    names = tc.moe_names(base, arch)
    stored = tc.stored_delta(base, rl)
    recs = {r["name"]: r for r in c["layers"]}
    in_experts = {x["name"] for x in c["experts"]}
    for i in range(tc.M_LAYERS):
        router = names["router"].format(i)
        ref = _ref(stored[router])
        assert recs[router]["moe"] == "router" and router not in in_experts
        assert recs[router]["s1_s2"] == pytest.approx(tc.MOE_ROUTER_SIGMAS[0] / tc.MOE_ROUTER_SIGMAS[1], rel=1e-5)
        rows = {r["name"]: r for r in c["per_layer"][i]["moe"]["routers"]}
        assert router in rows
        for m in METRICS:
            _close(rows[router][m], ref[m], what=(router, m))
        shared = c["per_layer"][i]["moe"]["shared_experts"]
        if names["shared"] is None:
            assert shared is None
            continue
        k = names["shared"].format(i)
        assert recs[k]["moe"] == "shared_expert" and k not in in_experts and k in shared["names"]
        assert recs[k]["s1_s2"] == pytest.approx(tc.MOE_SHARED_SIGMAS[0] / tc.MOE_SHARED_SIGMAS[1], rel=1e-5)
        assert shared["l2"] == pytest.approx(np.linalg.norm(stored[k]), rel=1e-6)
        assert shared["s1_s2_max"] == pytest.approx(_ref(stored[k])["s1_s2"], rel=1e-6)
    share = c["moe"]["l2_share"]
    routers = [k for k in stored if k.endswith((".gate.weight", "shared_expert_gate.weight"))
               or k.endswith(".gate.e_score_correction_bias")]
    assert share["routers"] == pytest.approx(sum(float((stored[k] ** 2).sum()) for k in routers)
                                             / c["global_l2"] ** 2, rel=1e-6)
    assert (share["shared_experts"] > 0) == (names["shared"] is not None)


def _fused_pair(arch: str, layout: str):
    def make(p):
        base, rl, _ = tc.moe_pair(arch)
        return tc.fuse_experts(base, p / "base", arch, layout), tc.fuse_experts(rl, p / "rl", arch, layout)
    return tc.cached(f"moe_fused_{arch}_{layout}", make)


@pytest.mark.parametrize("arch, layout", [("qwen3_moe", "out_in"), ("mixtral", "out_in"), ("mixtral", "in_out")])
def test_fused_3d_experts_give_the_same_per_expert_metrics(docs, arch, layout):
    fb, fr = _fused_pair(arch, layout)
    sep = docs[arch][3]["checkpoints"][0]
    doc = _diff(fb, fr)
    c = doc["checkpoints"][0]
    recs = {r["name"]: r for r in c["layers"]}
    fused = [n for n, r in recs.items() if r.get("n_experts")]
    assert len(fused) == 2 * tc.M_LAYERS and sorted(fused) == c["moe"]["fused_tensors"]
    gu = next(recs[n] for n in fused if n.endswith("gate_up_proj"))
    assert len(gu["shape"]) == 3 and gu["moe"] == "expert" and gu["s1_s2"] is None
    axis = 0 if layout == "out_in" else 1
    assert [(q["projection"], q["axis"]) for q in gu["expert_parts"]] == [("gate_proj", axis), ("up_proj", axis)]
    assert "_experts" not in gu            # per-expert numbers live in the checkpoint's "experts" list
    key = lambda x: (x["layer"], x["expert"], x["projection"])   # noqa: E731
    a = {key(x): x for x in sep["experts"]}
    b = {key(x): x for x in c["experts"]}
    assert set(a) == set(b)
    for k in a:
        for m in METRICS + ("l2_share", "stable_rank"):
            _close(b[k][m], a[k][m], rel=1e-6, what=(k, m))
        assert b[k]["index"] == k[1] and b[k]["name"].endswith(("gate_up_proj", "down_proj"))
        assert (b[k]["part"] is None) == (k[2] == "down_proj")
    for pa, pb in zip(sep["per_layer"], c["per_layer"]):
        for m in ("energy", "l2_share", "s1_s2_max", "s1_s2_median", "rank1_fraction_max", "rank1_fraction_median",
                  "n_experts", "n_matrices", "n_changed"):
            _close(pb["moe"]["experts"][m], pa["moe"]["experts"][m], rel=1e-6, what=m)
        for m in ("l2", "s1_s2_mean", "rank1_fraction_mean", "n_matrices"):
            _close(pb[m], pa[m], rel=1e-6, what=m)
    for m in ("global_l2", "inner_s1_s2_mean", "inner_rank1_fraction_mean", "inner_n_matrices"):
        _close(c[m], sep[m], rel=1e-6, what=m)
    # the same through the torch (CUDA) code path, on CPU tensors
    stream._TORCH_ON_CPU = True
    try:
        ct = _diff(fb, fr)["checkpoints"][0]
    finally:
        stream._TORCH_ON_CPU = False
    for x, y in zip(ct["experts"], c["experts"]):
        assert key(x) == key(y)
        for m in METRICS:
            _close(x[m], y[m], rel=1e-6, what=(key(x), m))


def test_fused_experts_with_layers_head_keep_norms_only():
    fb, fr = _fused_pair("mixtral", "out_in")
    c = _diff(fb, fr, layers="head")["checkpoints"][0]
    assert len(c["experts"]) == tc.M_LAYERS * 4 * 3
    assert all(x["s1_s2"] is None for x in c["experts"])
    assert sum(x["l2"] ** 2 for x in c["experts"]) == pytest.approx(
        sum(v["l2"] ** 2 for v in _expert_refs(*tc.moe_pair("mixtral")[:2]).values()), rel=1e-6)


def _refused(base, rl, tmp_path, match: str, capsys) -> None:
    with pytest.raises(ValueError, match=match):
        _diff(base, rl)
    out = tmp_path / "report"
    assert diff_cli.main([str(base), str(rl), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err), err
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_different_expert_counts_are_refused_with_the_tensor_named(tmp_path, capsys):
    base, _, _ = tc.moe_pair("qwen3_moe")
    other = tc.cached("moe_qwen3_moe_8", lambda p: tc.build_arch(p, "qwen3_moe_8"))     # 8 experts, not 4
    _refused(base, other, tmp_path, r"expert counts differ: tensor 'model\.layers\.0\.mlp\.experts\.4\.\w+\.weight'"
                                    r" \(expert 4\).*holds 8 experts in checkpoint .* and 4 in base", capsys)
    # the other way round: the base has more experts
    _refused(other, base, tmp_path, r"tensor 'model\.layers\.0\.mlp\.experts\.4\.\w+\.weight' \(in base file .*\) "
                                    r"is missing", capsys)


def test_fused_tensor_with_another_leading_dimension_is_refused(tmp_path, capsys):
    fb, fr = _fused_pair("mixtral", "out_in")
    cut = tc.copy(fr, tmp_path / "cut")
    name = "model.layers.1.block_sparse_moe.experts.down_proj"
    tc.rewrite_tensor(cut, name, lambda t: t[:3])
    _refused(fb, cut, tmp_path, re.escape(f"tensor '{name}' holds 3 experts (leading dimension), shape (3, 32, 48)")
             + r".*but 4, shape \(4, 32, 48\) in base file", capsys)
    # a router with another row count is refused the same way
    router = tc.copy(tc.moe_pair("mixtral")[1], tmp_path / "router")
    rname = "model.layers.0.block_sparse_moe.gate.weight"
    tc.rewrite_tensor(router, rname, lambda t: t[:2])
    _refused(tc.moe_pair("mixtral")[0], router, tmp_path, re.escape(f"tensor '{rname}' holds 2 experts (router rows)"),
             capsys)


def test_report_has_the_expert_rows_and_json_every_expert(docs, tmp_path):
    doc = docs["qwen2_moe"][3]
    out = rp.write_report(doc, tmp_path / "rep")
    md = (out / "report.md").read_text()
    assert "## Mixture of experts" in md
    c = doc["checkpoints"][0]
    sec = md.split("## Mixture of experts")[1].split("\n## ")[0]
    lines = [ln for ln in sec.splitlines() if ln.startswith("| ")]
    for pl in c["per_layer"]:
        e = pl["moe"]["experts"]
        row = next(ln for ln in lines if ln.startswith(f"| {pl['layer']} | 4 | 12 |"))
        cells = [x.strip() for x in row.strip("|").split("|")]
        assert cells[3] == _fmt(e["energy"]) and cells[5] == _fmt(e["s1_s2_max"])
        assert cells[6] == _fmt(e["s1_s2_median"])
    top = max(c["experts"], key=lambda x: x["l2"])
    assert top["name"] in sec
    assert "experts.png" in md and (out / "experts.png").is_file()
    assert "Mixture of experts" in (out / "report.html").read_text()
    js = json.loads((out / "report.json").read_text())["checkpoints"][0]
    assert len(js["experts"]) == tc.M_LAYERS * 4 * 3
    assert {(x["layer"], x["expert"], x["projection"]) for x in js["experts"]} == {
        (i, e, q) for i in range(tc.M_LAYERS) for e in range(4) for q in ("gate_proj", "up_proj", "down_proj")}
    assert js["per_layer"][1]["moe"]["experts"]["energy"] == pytest.approx(c["per_layer"][1]["moe"]["experts"]["energy"])
    # a dense report has no MoE section
    dense = wd.diff(str(tc.arch_pair("qwen3")[0]), [str(tc.arch_pair("qwen3")[1])], device="cpu", progress=False)
    assert "experts" not in dense["checkpoints"][0] and "moe" not in dense["checkpoints"][0]
    out2 = rp.write_report(dense, tmp_path / "dense")
    assert "Mixture of experts" not in (out2 / "report.md").read_text()
