"""Accuracy of the fast top-k spectrum of the checkpoint diff (analysis.spectra "gram32").

The per-matrix top-k metrics of a diff (every 2-D weight but the head) use a float32 Gram
matrix, LAPACK ssyevr for its leading eigenvectors (orthonormalised again in float64) and a
float64 Rayleigh-Ritz step on the matrix itself.  Stated accuracy: each of the top k singular
values, s1/s2 and r1 to 1e-11 relative against the exact float64 SVD (measured ~1e-13 on these
cases, 6e-13 on a 7B-shaped 18,944 x 3,584 noise matrix); the Frobenius norm exact (float64
sum); the leading singular vectors to first order in the float32 rounding
(‖W v − σ u‖ ≤ 1e-6·σ1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from analysis import diff as weight_diff
from analysis import spectra
from analysis.diff import measure

TOL = 1e-11


def _noise(m: int, n: int, seed: int) -> np.ndarray:
    return (1e-3 * np.random.default_rng(seed).standard_normal((m, n))).astype(np.float32)


def _spike(m: int, n: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    a = 1e-3 * g.standard_normal((m, n)) + 5e-3 * np.outer(g.standard_normal(m), g.standard_normal(n)) / np.sqrt(n)
    return a.astype(np.float32)


def _graded(m: int, n: int, seed: int) -> np.ndarray:
    if m < n:
        return np.ascontiguousarray(_graded(n, m, seed).T)
    g = np.random.default_rng(seed)
    U = np.linalg.qr(g.standard_normal((m, n)))[0]
    V = np.linalg.qr(g.standard_normal((n, n)))[0]
    s = np.logspace(0, -6, n)
    return ((U * s) @ V.T).astype(np.float32)


def _reference(A: np.ndarray) -> np.ndarray:
    return np.linalg.svd(A.astype(np.float64), compute_uv=False)


@pytest.mark.parametrize("make", [_noise, _spike, _graded], ids=["noise", "spike", "graded"])
@pytest.mark.parametrize("shape", [(1200, 400), (400, 1200)], ids=["tall", "wide"])
def test_gram32_top_k_matches_float64_svd(make, shape):
    A = make(*shape, seed=1)
    k = 24
    ref = _reference(A)
    spec = spectra.spectrum(A, k, method="gram32", n_vectors=2)
    assert spec.method == "gram32"
    assert np.max(np.abs(spec.s - ref[:k]) / ref[:k]) <= TOL
    assert abs(spectra.s1_s2(spec) - ref[0] / ref[1]) <= TOL * ref[0] / ref[1]
    r1 = ref[0] ** 2 / np.sum(ref ** 2)
    assert abs(spectra.rank1_fraction(spec) - r1) <= TOL * r1
    fro = np.sqrt(np.sum(A.astype(np.float64) ** 2))
    assert abs(spec.fro_norm - fro) <= 1e-13 * fro
    # leading triplets (first order in the float32 subspace error): ‖W v − σ u‖ ≤ 1e-6·σ1, unit vectors
    A64 = A.astype(np.float64)
    for i in range(2):
        res = np.linalg.norm(A64 @ spec.v[:, i] - spec.s[i] * spec.u[:, i])
        assert res <= 1e-6 * ref[0]
        assert abs(np.linalg.norm(spec.u[:, i]) - 1) < 1e-12


def test_gram32_scales_tiny_and_huge_entries():
    A = _spike(600, 200, seed=2)
    ref = _reference(A)
    for e in (-100, 100):   # float32 squares would under- / overflow without the power-of-2 scaling
        B = np.ldexp(A, e).astype(np.float32)   # exact: every entry stays a normal float32
        want = np.ldexp(ref, e)
        spec = spectra.spectrum(B, 8, method="gram32")
        assert np.max(np.abs(spec.s - want[:8]) / want[:8]) <= TOL
        assert spec.fro_norm == pytest.approx(float(np.ldexp(np.sqrt(np.sum(ref ** 2)), e)), rel=1e-13)


def test_gram32_falls_back_and_needs_k():
    A = _noise(300, 100, seed=3).astype(np.float64)
    assert spectra.spectrum(A, 5, method="gram32").method == "gram"   # float64 input: the float64 Gram
    with pytest.raises(ValueError, match="k is required with method='gram32'"):
        spectra.spectrum(A.astype(np.float32), method="gram32")
    assert spectra.spectrum(np.zeros((300, 100), np.float32), 3, method="gram32").fro_norm == 0.0


def _pair(root, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = {"lm_head.weight": 0.02 * torch.randn(256, 48, generator=g),
            "model.layers.0.mlp.up_proj.weight": 0.02 * torch.randn(300, 48, generator=g),
            "model.layers.0.mlp.down_proj.weight": 0.02 * torch.randn(48, 300, generator=g)}
    rl = {k: (v + 1e-3 * torch.randn(v.shape, generator=g)).bfloat16() for k, v in base.items()}
    base = {k: v.bfloat16() for k, v in base.items()}
    for name, tensors in (("base", base), ("rl", rl)):
        (root / name).mkdir()
        (root / name / "config.json").write_text('{"model_type": "toy", "tie_word_embeddings": false}')
        save_file(tensors, str(root / name / "model.safetensors"))
    return str(root / "base"), str(root / "rl")


def test_diff_fast_top_k_equals_exact_path(tmp_path, monkeypatch):
    """The diff's per-matrix metrics through "gram32" equal those of the float64 SVD path."""
    b, r = _pair(tmp_path)
    exact = weight_diff.diff(b, [r], device="cpu", top_k=8, progress=False)
    monkeypatch.setattr(measure, "_FAST_MIN_ELEMS", 1000)
    fast = weight_diff.diff(b, [r], device="cpu", top_k=8, progress=False)
    for x, y in zip(exact["checkpoints"][0]["layers"], fast["checkpoints"][0]["layers"]):
        assert x["name"] == y["name"]
        assert x["l2"] == y["l2"] and x["density"] == y["density"]
        for key in ("s1", "s2", "s1_s2", "rank1_fraction", "stable_rank"):
            assert y[key] == pytest.approx(x[key], rel=TOL, abs=0)
        np.testing.assert_allclose(y["top_singular_values"] if "top_singular_values" in y else y["singular_values"],
                                   x["top_singular_values"] if "top_singular_values" in x else x["singular_values"],
                                   rtol=TOL, atol=0)
    assert set(fast["timings_s"]) == set(weight_diff.PHASES)
    assert all(v >= 0 for v in fast["timings_s"].values())
    assert sum(fast["timings_s"].values()) <= fast["timing_s"] + 1e-6


def test_gram32_without_the_gil_free_lapack_calls_gives_the_same_values(monkeypatch):
    """The ctypes ssyrk/ssyevr calls (which release the GIL) against scipy's own wrappers."""
    A = _spike(900, 300, seed=4)
    fast = spectra.spectrum(A, 12, method="gram32", n_vectors=1)
    monkeypatch.setattr(spectra, "_SSYEVR", None)
    monkeypatch.setattr(spectra, "_SSYRK", None)
    ref = spectra.spectrum(A, 12, method="gram32", n_vectors=1)
    np.testing.assert_allclose(fast.s, ref.s, rtol=1e-13, atol=0)
    assert abs(abs(float(fast.u[:, 0] @ ref.u[:, 0])) - 1) < 1e-9
    F = np.asfortranarray(A)   # Fortran-ordered blocks take ssyrk's "T" branch
    np.testing.assert_allclose(spectra.spectrum(F, 12, method="gram32").s, ref.s, rtol=1e-13, atol=0)


def _pair_many(root, n_blocks=4, n_rl=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = {"lm_head.weight": 0.02 * torch.randn(6000, 48, generator=g)}
    for i in range(n_blocks):
        base[f"model.layers.{i}.mlp.up_proj.weight"] = 0.02 * torch.randn(300, 48, generator=g)
        base[f"model.layers.{i}.mlp.down_proj.weight"] = 0.02 * torch.randn(48, 300, generator=g)
    paths = []
    for j in range(n_rl + 1):
        t = base if j == 0 else {k: v + 1e-3 * torch.randn(v.shape, generator=g) for k, v in base.items()}
        d = root / f"ck{j}"
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "toy", "tie_word_embeddings": false}')
        save_file({k: v.bfloat16() for k, v in t.items()}, str(d / "model.safetensors"))
        paths.append(str(d))
    return paths[0], paths[1:]


def _strip(doc):
    doc = dict(doc)
    for key in ("timing_s", "timings_s", "run"):
        doc.pop(key, None)
    return doc


def test_background_spectra_give_the_same_report(tmp_path, monkeypatch):
    """Block spectra in 2 or 3 worker threads: the same document, key order included, as inline."""
    import json

    b, rls = _pair_many(tmp_path)
    monkeypatch.setattr(measure, "_FAST_MIN_ELEMS", 1000)
    most = [0]
    real_submit = weight_diff._Background.submit

    def spy(self, job, fill):
        real_submit(self, job, fill)
        most[0] = max(most[0], len(self.pending))

    monkeypatch.setattr(weight_diff._Background, "submit", spy)
    docs = [weight_diff.diff(b, rls, device="cpu", top_k=8, progress=False, workers=w) for w in (1, 2, 3)]
    assert most[0] == 6   # jobs were queued side by side (up to 2·workers)
    layers = docs[0]["checkpoints"][0]["layers"]
    assert sum(1 for x in layers if x.get("top_singular_values")) == 8   # the 8 block weights went through
    ref = json.dumps(_strip(docs[0]))
    for d in docs[1:]:
        assert json.dumps(_strip(d)) == ref
        assert sum(d["timings_s"].values()) <= d["timing_s"] + 1e-6
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        weight_diff.diff(b, rls, device="cpu", progress=False, workers=0)


def test_background_spectra_error_propagates_and_leaves_no_thread(tmp_path, monkeypatch):
    import threading

    b, rls = _pair_many(tmp_path, n_blocks=3, n_rl=1)
    monkeypatch.setattr(measure, "_FAST_MIN_ELEMS", 1000)
    real = spectra.spectrum

    def failing(W, k=None, **kw):
        if W.shape == (48, 300):
            raise RuntimeError("planted failure in a background spectrum")
        return real(W, k, **kw)

    monkeypatch.setattr(spectra, "spectrum", failing)
    with pytest.raises(RuntimeError, match="planted failure"):
        weight_diff.diff(b, rls, device="cpu", top_k=8, progress=False, workers=2)
    # (the former module-level _BG no longer exists: each diff's background lives in its DiffRun,
    # and tests/analysis/test_diff_run.py checks that the package keeps no module state)
    assert not [t for t in threading.enumerate() if t.name.startswith("rlvr-diff")]


@pytest.mark.parametrize("method", ["gram", "gram32"])
def test_gram_pass_in_two_workers_gives_the_same_numbers(method):
    """The Gram pass split between worker threads (two partial Grams, GIL-free BLAS): the same
    values, bit for bit, as one thread, over many row blocks; close to the float64 SVD."""
    A = _spike(1500, 120, seed=5)
    k = None if method == "gram" else 10
    one = spectra.spectrum(A, k, method=method, block_rows=64, workers=1, n_vectors=1)
    for w in (2, 3):
        other = spectra.spectrum(A, k, method=method, block_rows=64, workers=w, n_vectors=1)
        np.testing.assert_array_equal(other.s, one.s)
        np.testing.assert_array_equal(other.u, one.u)
    ref = _reference(A)
    np.testing.assert_allclose(one.s[:10], ref[:10], rtol=1e-11)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        spectra.spectrum(A, k, method=method, workers=0)
