"""LoRA adapters in ``--geometry`` and ``--series``: the geometry of ``ΔW = s·B·A`` from its factors
(:func:`analysis.geometry.lora_update_geometry`) against float64 dense computations on the formed
``ΔW`` (numpy SVD, ``scipy.linalg.subspace_angles``, sorting), planted updates inside / orthogonal
to ``W_base``'s top-k subspace, the intruder dimensions against a full dense SVD and their random
baseline redrawn here, the adapter's ``intruders`` block and report table, and a series of adapter
checkpoints (bit-identical factor entries counted with numpy, R² by ``numpy.polyfit`` on the same
sampled entries of the dense ``ΔW``, Jaccard of masks from Python sets).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch
from safetensors.torch import load_file, save_file

from analysis import geometry
from analysis.diff import diff, series
from analysis.diff.cli import main
from analysis.diff.dynamics import sample_indices
from analysis.diff.settings import MASK_FRACTION

TOL = 1e-9      # float64 throughout: the factor route and the dense one differ by rounding only

H = 24
SHAPES = {"model.embed_tokens.weight": (60, H), "model.layers.0.self_attn.q_proj.weight": (H, H),
          "model.layers.0.mlp.up_proj.weight": (72, H), "model.layers.0.mlp.down_proj.weight": (H, 72),
          "model.layers.0.input_layernorm.weight": (H,), "model.norm.weight": (H,), "lm_head.weight": (60, H)}
CONFIG = {"model_type": "qwen2", "num_hidden_layers": 1, "hidden_size": H, "vocab_size": 60,
          "tie_word_embeddings": False}
TARGETS = {"model.layers.0.self_attn.q_proj": (H, H), "model.layers.0.mlp.up_proj": (72, H)}


def _vals(df, group=None):
    d = df if group is None else df[df.group == group]
    return {(m, None if math.isnan(p) else p): (v, b) for m, p, v, b in d[["metric", "param", "value", "baseline"]]
            .itertuples(index=False)}


# ------------------------------------------------------------ the matrix math
def _dense_refs(W, D, ks):
    """Energy shares, angles, drift and top-entry shares of ``D`` against ``W`` (float64, dense)."""
    U, s, Vt = np.linalg.svd(W)
    U2, s2, Vt2 = np.linalg.svd(W + D)
    E = float((D * D).sum())
    out = {}
    for k in ks:
        Uk, Vk = U[:, :k], Vt[:k].T
        out[("energy_left", k)] = float(((Uk.T @ D) ** 2).sum()) / E
        out[("energy_right", k)] = float(((D @ Vk) ** 2).sum()) / E
        out[("energy_both", k)] = float(((Uk.T @ D @ Vk) ** 2).sum()) / E
        out[("diagonal", k)] = float((np.diag(Uk.T @ D @ Vk) ** 2).sum()) / E
        out[("angle_left_max_deg", k)] = float(np.rad2deg(scipy.linalg.subspace_angles(Uk, U2[:, :k]).max()))
        out[("angle_right_max_deg", k)] = float(np.rad2deg(scipy.linalg.subspace_angles(Vk, Vt2[:k].T).max()))
        out[("sv_drift", k)] = float(np.linalg.norm(s2[:k] - s[:k]) / np.linalg.norm(s[:k]))
    a = np.sort(np.abs(D).ravel())[::-1]
    for q in (0.001, 0.01, 0.05):
        K = max(1, math.ceil(q * a.size - 1e-9))
        out[("top_energy_share", q)] = float((a[:K] ** 2).sum()) / E
    rms_b = math.sqrt(float((W * W).sum()) / W.size)
    for c in (1e-4, 1e-3, 1e-2):
        out[("density_above_rms", c)] = float((np.abs(D) > c * rms_b).mean())
    out[("delta_fro_norm", None)] = math.sqrt(E)
    return out


@pytest.mark.parametrize("m, n, r", [(40, 30, 3), (30, 45, 5)])
def test_geometry_from_factors_equals_dense_float64(m, n, r):
    rng = np.random.default_rng(m + n)
    W = rng.standard_normal((m, n))
    B, A, s = rng.standard_normal((m, r)), rng.standard_normal((r, n)), 0.02
    D = s * B @ A
    ks = (1, 4, 8)
    out = geometry.lora_update_geometry(W, A, B, s, ks=ks, k=5, ulp_dtype="bfloat16")
    got = _vals(out)
    for key, want in _dense_refs(W, D, ks).items():
        assert got[key][0] == pytest.approx(want, abs=TOL), key
    # the rows the dense reference above does not recompute (masks, rotation parts): as update_geometry
    # (itself tested against dense computations) on the dense float64 pair W, W + ΔW
    dense = _vals(geometry.update_geometry(W, W + D, ks=ks, ulp_dtype=None))
    for key, (v, b) in dense.items():
        assert got[key][0] == pytest.approx(v, abs=1e-9), key
        assert (math.isnan(b) and math.isnan(got[key][1])) or got[key][1] == pytest.approx(b, abs=1e-12), key
    # ULPs: W and W + ΔW each rounded once to bfloat16, distance in steps (sign-magnitude ordinals)
    def ordinal(x):
        bits = torch.from_numpy(x).bfloat16().view(torch.int16).to(torch.int64)
        mag = bits & 0x7FFF
        return torch.where(bits < 0, -mag, mag).numpy()
    dist = np.abs(ordinal(W + D) - ordinal(W))
    assert got[("unchanged_share", None)][0] == pytest.approx(float((dist == 0).mean()), abs=0)
    assert got[("one_ulp_share", None)][0] == pytest.approx(float((dist == 1).mean()), abs=0)
    assert got[("max_ulp", None)][0] == dist.max() and got[("exact_in_dtype", None)][0] == 0.0


def test_planted_inside_and_orthogonal_to_the_top_left_subspace():
    rng = np.random.default_rng(3)
    m, n, r, k = 36, 28, 3, 6
    U0 = np.linalg.qr(rng.standard_normal((m, n)))[0]
    V0 = np.linalg.qr(rng.standard_normal((n, n)))[0]
    W = (U0 * np.linspace(10.0, 1.0, n)) @ V0.T                  # distinct singular values: subspaces defined
    A = rng.standard_normal((r, n))
    inside = geometry.lora_update_geometry(W, A, U0[:, :k] @ rng.standard_normal((k, r)), 0.1, ks=[k],
                                           intruders=False, ulp_dtype=None)
    outside = geometry.lora_update_geometry(W, A, U0[:, k:] @ rng.standard_normal((n - k, r)), 0.1, ks=[k],
                                            intruders=False, ulp_dtype=None)
    assert _vals(inside)[("energy_left", k)][0] == pytest.approx(1.0, abs=TOL)
    assert _vals(outside)[("energy_left", k)][0] == pytest.approx(0.0, abs=TOL)
    assert _vals(outside)[("energy_both", k)][0] == pytest.approx(0.0, abs=TOL)
    right = geometry.lora_update_geometry(W, rng.standard_normal((r, k)) @ V0[:, :k].T, rng.standard_normal((m, r)),
                                          0.1, ks=[k], intruders=False, ulp_dtype=None)
    assert _vals(right)[("energy_right", k)][0] == pytest.approx(1.0, abs=TOL)


def _svd_intruders(W, Wt, k, n_base, eps):
    U0 = np.linalg.svd(W)[0][:, :n_base]
    U1, s1, _ = np.linalg.svd(Wt)
    cos = np.abs(U0.T @ U1[:, :k]).max(0)
    return cos, {e: ((cos < e).sum(), (s1[:k][cos < e] ** 2).sum() / (s1[:k] ** 2).sum()) for e in eps}


def test_intruders_and_their_random_baseline_equal_dense_svd():
    rng = np.random.default_rng(5)
    m, n, r, k, eps = 30, 30, 4, 6, (0.3, 0.5, 0.7)
    W = rng.standard_normal((m, n))
    B, A, s = rng.standard_normal((m, r)), rng.standard_normal((r, n)), 0.5
    out = geometry.lora_update_geometry(W, A, B, s, ks=[2], k=k, epsilons=eps, n_base=n, seed=11, ulp_dtype=None)
    got = _vals(out, "intruders")
    cos, per = _svd_intruders(W, W + s * B @ A, k, n, eps)
    # the random update, redrawn: Gaussian factors of rank r scaled to ‖s·B·A‖_F
    g = np.random.default_rng(11)
    GB, GA = g.standard_normal((m, r)), g.standard_normal((r, n))
    G = GB @ GA * (np.linalg.norm(s * B @ A) / np.linalg.norm(GB @ GA))
    gcos, gper = _svd_intruders(W, W + G, k, n, eps)
    for j in range(k):
        assert got[("max_cos", j + 1.0)][0] == pytest.approx(cos[j], abs=TOL)
        assert got[("max_cos", j + 1.0)][1] == pytest.approx(gcos[j], abs=TOL)
        assert got[("base_span_share", j + 1.0)][0] == pytest.approx(1.0, abs=TOL)   # complete basis
    for e in eps:
        assert got[("n_intruders", e)] == (per[e][0], gper[e][0])
        assert got[("n_intruders_certain", e)][0] == per[e][0]                      # n_base = d: the same
        assert got[("intruder_energy_share", e)][0] == pytest.approx(per[e][1], abs=TOL)
        assert got[("intruder_energy_share", e)][1] == pytest.approx(gper[e][1], abs=TOL)
    # fewer base vectors: an upper bound of the complete count, and the certain ones a lower bound
    few = _vals(geometry.lora_update_geometry(W, A, B, s, ks=[2], k=k, epsilons=eps, n_base=5, ulp_dtype=None),
                "intruders")
    for e in eps:
        assert few[("n_intruders_certain", e)][0] <= per[e][0] <= few[("n_intruders", e)][0]


def test_intruders_given_spectra_are_reused():
    rng = np.random.default_rng(8)
    W = rng.standard_normal((25, 20))
    B, A = rng.standard_normal((25, 2)), rng.standard_normal((2, 20))
    from analysis import spectra
    sb = spectra.spectrum(W, 20, n_vectors=20)
    st = spectra.spectrum(W + 3.0 * B @ A, 4, n_vectors=4)
    a = geometry.lora_intruders(W, A, B, 3.0, k=4, base_spectrum=sb, tuned_spectrum=st)
    b = geometry.lora_intruders(W, A, B, 3.0, k=4)
    assert np.allclose(a.value, b.value, atol=TOL)


# ---------------------------------------------------------------- the diff
def _write_base(path: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_file({k: 0.1 * torch.randn(s, generator=g) for k, s in SHAPES.items()}, str(path / "model.safetensors"))
    return path


def _write_adapter(path: Path, base: Path, factors: dict, r: int, alpha: float) -> Path:
    path.mkdir(parents=True)
    t = {}
    for mod, (A, B) in factors.items():
        t[f"base_model.model.{mod}.lora_A.weight"] = torch.as_tensor(A, dtype=torch.float32).contiguous()
        t[f"base_model.model.{mod}.lora_B.weight"] = torch.as_tensor(B, dtype=torch.float32).contiguous()
    save_file(t, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": ["q_proj", "up_proj"],
        "base_model_name_or_path": str(base)}))
    return path


def _factors(seed: int, r: int = 3) -> dict:
    g = np.random.default_rng(seed)
    return {mod: (g.standard_normal((r, i)), 0.05 * g.standard_normal((o, r))) for mod, (o, i) in TARGETS.items()}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path, list[Path]]:
    """A base and a run of 3 adapter checkpoints whose B moves linearly in the step (A fixed):
    ΔW = s·B_t·A is exactly linear in t."""
    root = tmp_path_factory.mktemp("lora_run")
    base = _write_base(root / "base")
    f0, f1 = _factors(1), _factors(2)
    cks = []
    for t in (10, 20, 40):
        fac = {mod: (f0[mod][0], f0[mod][1] + (t / 10.0) * f1[mod][1]) for mod in TARGETS}
        cks.append(_write_adapter(root / "run" / f"checkpoint-{t}", base, fac, 3, 6))
    return root, base, cks


def _stored(path: Path) -> dict:
    return {k: v.numpy() for k, v in load_file(str(path / "adapter_model.safetensors")).items()}


def test_diff_geometry_of_an_adapter(run, tmp_path):
    root, base, cks = run
    out = tmp_path / "rep"
    assert main([str(base), str(cks[0]), "--out", str(out), "--geometry", "--quiet"]) == 0
    doc = json.loads((out / "report.json").read_text())
    W = {k: v.double().numpy() for k, v in load_file(str(base / "model.safetensors")).items()}
    st = _stored(cks[0])
    mats = {m["name"]: m for m in doc["geometry"]["checkpoints"][0]["matrices"]}
    assert sorted(mats) == sorted(mod + ".weight" for mod in TARGETS)          # ΔW = 0 matrices left out
    for mod in TARGETS:
        A = st[f"base_model.model.{mod}.lora_A.weight"].astype(np.float64)
        B = st[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
        Wb = W[mod + ".weight"]
        ks = geometry.default_ks(*Wb.shape)
        ref = _dense_refs(Wb, 2.0 * B @ A, ks)                                # s = 6/3
        rows = {(x["metric"], x["param"]): x["value"] for x in mats[mod + ".weight"]["metrics"]}
        for key in [k for k in ref if k[0] in ("energy_left", "energy_right", "energy_both", "angle_left_max_deg",
                                               "sv_drift", "top_energy_share")]:
            assert rows[key] == pytest.approx(ref[key], abs=1e-7), (mod, key)   # W_base read as float32 → float64
    intr = doc["checkpoints"][0]["adapter"]["intruders"]
    assert [s["epsilon"] for s in intr["summary"]] == [0.1, 0.3, 0.5, 0.7, 0.9] and intr["k"] == 10
    assert {t["name"] for t in intr["targets"]} == set(mats)
    for t in intr["targets"]:
        assert len(t["max_cos"]) == len(t["baseline_max_cos"]) == 10 and t["n_base"] == max(geometry.default_ks(*t["shape"]))
        assert all(0 <= c <= 1 for c in t["max_cos"])
    md = (out / "report.md").read_text()
    assert "intruder dimensions (Shuttleworth et al., arXiv 2410.21228)" in md
    assert "| ε | intruders | certain |" in md and "at ε = 0.5," in md
    assert "LoRA adapters: the matrices an adapter updates" in md
    # without --geometry: no geometry, intruders null, and the report says how to get them
    doc2 = diff(str(base), [str(cks[0])], device="cpu", progress=False)
    assert "geometry" not in doc2 and doc2["checkpoints"][0]["adapter"]["intruders"] is None


def test_series_of_adapter_checkpoints(run, tmp_path, capsys):
    root, base, cks = run
    assert series(root / "run") == [str(c) for c in cks]
    out = tmp_path / "rep"
    assert main([str(base), "--series", str(root / "run"), "--out", str(out), "--quiet"]) == 0
    d = json.loads((out / "report.json").read_text())["dynamics"]
    assert d["kind"] == "series" and d["adapters"] and d["steps"] == [10.0, 20.0, 40.0]
    st = [_stored(c) for c in cks]
    for k, pair in enumerate(d["change"]["pairs"]):
        same = sum(int((st[k][key].view(np.int32) == st[k + 1][key].view(np.int32)).sum()) for key in st[k])
        assert pair["identical"] == same and pair["n_entries"] == sum(v.size for v in st[k].values())
    assert 0 < d["change"]["identical_share"] < 1                          # A is fixed, B moves
    # linearity: exactly linear ΔW (float32 factors: ΔW = s·B_t·A linear in t up to float32 rounding of B_t)
    lin = d["linearity"]
    assert lin["pooled_r2"] == pytest.approx(1.0, abs=1e-6)
    # the same sample, R² by numpy.polyfit on the dense ΔW
    ss_res = ss_tot = 0.0
    for mod, (m, n) in TARGETS.items():
        idx = sample_indices(mod + ".weight", m * n)
        Y = np.vstack([(2.0 * s[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
                        @ s[f"base_model.model.{mod}.lora_A.weight"].astype(np.float64)).ravel()[idx] for s in st])
        x = np.array([10.0, 20.0, 40.0])
        c = np.polyfit(x, Y, 1)                                             # one line per column
        ss_res += float(((np.outer(x, c[0]) + c[1] - Y) ** 2).sum())
        ss_tot += float(((Y - Y.mean(axis=0)) ** 2).sum())
    assert lin["pooled_r2"] == pytest.approx(1 - ss_res / ss_tot, abs=1e-9)
    md = (out / "report.md").read_text()
    assert "## Dynamics" in md and "LoRA adapters: only the base tensors some adapter updates are counted" in md


def test_jaccard_of_two_adapters_equals_sets(run):
    root, base, cks = run
    doc = diff(str(base), [str(cks[0]), str(cks[2])], device="cpu", progress=False, dynamics="runs")
    p = doc["dynamics"]["pairs"][0]
    inter = na = nb = N = 0
    for mod in TARGETS:
        Ds = []
        for c in (cks[0], cks[2]):
            s = _stored(c)
            Ds.append(np.abs(2.0 * s[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
                             @ s[f"base_model.model.{mod}.lora_A.weight"].astype(np.float64)).ravel())
        sets = []
        for D in Ds:
            K = max(1, math.ceil(MASK_FRACTION * D.size - 1e-9))
            t = np.sort(D)[::-1][K - 1]
            sets.append(set(np.flatnonzero((D >= t) & (D > 0)).tolist()))
        inter += len(sets[0] & sets[1])
        na, nb, N = na + len(sets[0]), nb + len(sets[1]), N + Ds[0].size
    assert (p["intersection"], p["union"], p["n_entries"]) == (inter, na + nb - inter, N)
    assert p["baseline"] == pytest.approx((na / N) * (nb / N) / (na / N + nb / N - na * nb / N ** 2), rel=1e-12)


def test_mixed_run_and_changed_rank_refused(run, tmp_path):
    root, base, cks = run
    mixed = tmp_path / "mixed"
    for c in cks[:2]:
        (mixed / c.name).mkdir(parents=True)
        for f in c.iterdir():
            (mixed / c.name / f.name).write_bytes(f.read_bytes())
    (mixed / "checkpoint-50").mkdir()
    (mixed / "checkpoint-50" / "config.json").write_text(json.dumps(CONFIG))
    (mixed / "checkpoint-50" / "model.safetensors").write_bytes((base / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=r"holds both LoRA adapter checkpoints \(2, e\.g\. 'checkpoint-10' with "
                                         r"adapter_config\.json\) and full checkpoints \(1, e\.g\. 'checkpoint-50'"):
        series(mixed)
    other = tmp_path / "ranks"
    _write_adapter(other / "checkpoint-1", base, _factors(1, r=3), 3, 6)
    _write_adapter(other / "checkpoint-2", base, _factors(1, r=2), 2, 6)
    with pytest.raises(ValueError, match=r"checkpoints\[1\]: the LoRA adapters of a series must update the same "
                                         r"tensors with the same ranks"):
        diff(str(base), series(other), device="cpu", progress=False, dynamics="series")
