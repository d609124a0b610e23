"""`analysis.spectra.successive_alignment` (FADE Cor. 15.3) against torch references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis import spectra
from analysis.spectra import successive_alignment


def _reference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    ta, tb = torch.tensor(a), torch.tensor(b)
    cos = torch.nn.functional.cosine_similarity(ta.flatten(), tb.flatten(), dim=0).item()
    va = torch.linalg.svd(ta).Vh[0]
    vb = torch.linalg.svd(tb).Vh[0]
    return cos, abs(float(va @ vb))


def test_batch_matches_a_torch_reference_per_matrix():
    rng = np.random.default_rng(0)
    u = rng.normal(size=7)
    a = rng.normal(size=(4, 5, 1)) * u + 0.05 * rng.normal(size=(4, 5, 7))  # near rank 1 along u
    b = rng.normal(size=(4, 5, 1)) * u + 0.05 * rng.normal(size=(4, 5, 7))
    cos, u_cos = successive_alignment(a, b)
    assert cos.shape == u_cos.shape == (4,)
    for i in range(4):
        rc, ru = _reference(a[i], b[i])
        assert cos[i] == pytest.approx(rc, abs=1e-12) and u_cos[i] == pytest.approx(ru, abs=1e-10)
    assert np.all(u_cos > 0.9)                                   # the shared u is found
    cos_t, u_t = successive_alignment(torch.tensor(a), torch.tensor(b))
    np.testing.assert_array_equal(cos_t, cos)
    np.testing.assert_array_equal(u_t, u_cos)


@pytest.mark.parametrize("torch_gram", [False, True])
def test_tall_heads_use_the_gram_and_match_the_reference(torch_gram, monkeypatch):
    """V > d (an output head): the leading right vector comes from the d × d Gram — numpy's on the
    CPU, torch's on a GPU (run here on CPU tensors)."""
    monkeypatch.setattr(spectra, "_TORCH_ON_CPU", torch_gram)
    rng = np.random.default_rng(2)
    u = rng.normal(size=6)
    a = rng.normal(size=(3, 40, 1)) * u + 0.3 * rng.normal(size=(3, 40, 6))
    b = rng.normal(size=(3, 40, 1)) * u + 0.3 * rng.normal(size=(3, 40, 6))
    cos, u_cos = successive_alignment(a, b)
    for i in range(3):
        rc, ru = _reference(a[i], b[i])
        assert cos[i] == pytest.approx(rc, abs=1e-12) and u_cos[i] == pytest.approx(ru, abs=1e-10)
    assert np.all(u_cos > 0.9)


def test_independent_directions_are_nearly_orthogonal_and_scale_free():
    rng = np.random.default_rng(1)
    a = np.outer(rng.normal(size=50), np.eye(400)[0])
    b = np.outer(rng.normal(size=50), np.eye(400)[1])
    assert successive_alignment(a, b)[1] == pytest.approx(0.0, abs=1e-12)
    assert successive_alignment(a, 1e-200 * a)[1] == pytest.approx(1.0)
    assert successive_alignment(a, -1e200 * a)[0] == pytest.approx(-1.0)


def test_zero_gradient_gives_nan_and_bad_shapes_are_refused():
    a = np.ones((3, 2))
    assert np.isnan(successive_alignment(a, np.zeros((3, 2)))).all()
    with pytest.raises(ValueError, match="prev and cur"):
        successive_alignment(a, np.ones((2, 3)))
    with pytest.raises(ValueError, match="prev and cur"):
        successive_alignment(np.ones(3), np.ones(3))
