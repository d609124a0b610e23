"""Measuring one ``ΔW``: norm, densities and SVD / rank-1 metrics of a tensor's difference.

- :func:`_measure`: the record of one dense ``ΔW_t`` (norms, densities, the spectrum of a 2-D
  weight, inline or on the run's background workers, fused parts, the MoE role through
  :func:`analysis.diff.moe._moe_measure`).
- :func:`_record`, :func:`_fill_spectrum`: the record's norm and SVD fields, shared with the
  low-rank (LoRA) records of :mod:`analysis.diff.lora`.
- :func:`_part`: one part of a fused projection (Phi-3 ``qkv_proj``, GPT-2 ``c_attn``).
- :func:`_shifts`: per checkpoint, the power of two that scales its ``ΔW`` in Gram matrices.

All singular values go through :mod:`analysis.spectra`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import spectra
from ..checkpoints import TensorPair, fused_parts, is_conv1d
from .moe import _moe_measure
from .run import DiffRun, _Tally
from .settings import SRANK_DELTAS, TOLERANCES, _finite, _key

_SPECTRA_BLOCK = 8          # analysis.spectra's float64 row blocks: at most 1/8 of the matrix ...
_SPECTRA_MAX_ELEMS = 1 << 23  # ... and at most its default 64 MiB
_FAST_MIN_ELEMS = 1 << 20   # top-k spectra of float32 ΔW above this many entries: spectra's "gram32"


def _shifts(runs: list[_Tally]) -> list[int]:
    """Per run, the power of two just above the norm of its latest ``ΔW`` (0 for ``ΔW = 0``)."""
    return [math.frexp(r.records[-1]["l2"])[1] for r in runs]


def _record(r: Any, p: TensorPair, l2: float, base_l2: float, size: int, cnt: list[int]) -> dict[str, Any]:
    """Add one tensor's ‖ΔW‖, ‖W‖, size and density counts to the run ``r``; its record with the
    SVD fields empty (dense and low-rank ΔW alike)."""
    r.l2 = math.hypot(r.l2, l2)
    r.base_l2 = math.hypot(r.base_l2, base_l2)
    r.count += size
    r.above = [a + c for a, c in zip(r.above, cnt)]
    return {
        "name": p.name, "kind": p.kind, "layer": p.layer, "shape": list(p.shape),
        "rows_compared": p.rows, "l2": l2, "base_l2": base_l2,
        "relative_l2": l2 / base_l2 if base_l2 > 0 else None,
        "l2_share": None,  # filled in when all tensors are seen
        "density": {_key(t): c / size for t, c in zip(TOLERANCES, cnt)},
        "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None, "stable_rank": None,
    }


def _fill_spectrum(r: _Tally, name: str, rec: dict[str, Any], spec: spectra.Spectrum, *, full: bool, is_head: bool,
                   top_k: int) -> None:
    """The SVD fields of the record ``rec`` from ``spec`` (dense and low-rank ΔW alike); the
    leading vectors, when computed, kept in ``r.vectors`` (the head's in float64: they feed the
    u statistics)."""
    s = spec.s
    rec.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec),
                "stable_rank": spectra.stable_rank(spec), "n_singular_values": int(len(s))})
    if full:
        rec["effective_rank"] = spectra.effective_rank(spec)
        rec["srank"] = {_key(dl): int(kv) for dl, kv in
                        zip(SRANK_DELTAS, np.atleast_1d(spectra.srank(spec, list(SRANK_DELTAS))))}
    if is_head:
        rec["singular_values"] = [float(x) for x in s]
    else:
        rec["top_singular_values"] = [float(x) for x in s[:top_k]]
    if spec.u is not None and spec.v is not None:
        keep_dt = np.float64 if is_head else np.float32
        r.vectors[name] = (spec.u[:, 0].astype(keep_dt), spec.v[:, 0].astype(keep_dt))


def _measure(run: DiffRun, r: _Tally, p: TensorPair, D: Any, base_l2: float) -> None:
    """Norms, densities and (2-D weights) SVD metrics of one ``ΔW_t`` appended to ``r.records``;
    the leading singular vectors of the head always, of the other weights when ``run.vectors``
    (alignment needs them).

    Top-``k`` spectra of large float32 ``ΔW`` on the CPU use :mod:`analysis.spectra`'s
    ``"gram32"`` method (float32 Gram and eigenvectors, float64 Rayleigh–Ritz: top-``k`` values to
    ``≤ 10⁻¹¹`` relative, see its docs), on the run's background workers; the head's full
    spectrum the float64 ``"gram"``."""
    with run.phase("norms_densities"):
        l2, cnt = run.ops.stats(D)
    if not math.isfinite(l2) or not math.isfinite(base_l2):
        which = "ΔW" if math.isfinite(base_l2) else "the base weight"
        raise ValueError(f"{r.ck.label}: {which} of tensor {p.name!r} is beyond the float64 range (an entry or "
                         f"its norm exceeds 1.8e308, or the difference overflows the stored precision)")
    size = int(math.prod(p.compared_shape)) if p.compared_shape else 1
    rec = _record(r, p, l2, base_l2, size, cnt)
    if p.vocab_resized:
        rec["vocab_rows"] = {"base": p.base_rows, "checkpoint": p.other_rows}
    if len(p.shape) == 2 and min(p.compared_shape) >= 1 and (run.layers == "all" or p.kind == "head"):
        if cnt[0] == 0:   # no entry differs (cnt[0] = #{|ΔW| > 0}; a tiny ΔW is not 0)
            rec["note"] = "unchanged (ΔW = 0): SVD metrics undefined"
        else:
            _spectrum(run, r, p, D, rec)
            parts = fused_parts(p.name, p.compared_shape, r.ck.config) if run.layers == "all" else None
            if parts:
                rec["parts"] = [_part(run, D, part, axis, a, z) for part, axis, a, z in parts]
    if len(p.shape) == 2 and is_conv1d(p.name, r.ck.config):
        rec["stored_transposed"] = True   # GPT-2 Conv1D: in × out
    _moe_measure(run, r, p, D, rec)
    r.records.append(rec)


def _spectrum(run: DiffRun, r: _Tally, p: TensorPair, D: Any, rec: dict[str, Any]) -> None:
    """The SVD fields of ``rec`` for a 2-D ``ΔW ≠ 0``: inline, or (large float32 top-``k`` on the
    CPU) through the run's background workers, the keys reserved now to keep their order."""
    dev, is_head = run.device, p.kind == "head"
    d = min(p.compared_shape)
    full = is_head or run.full_spectrum
    k = None if full else min(run.top_k, d)
    tall, short = max(p.compared_shape), min(p.compared_shape)
    block_rows = max(1, min(_SPECTRA_MAX_ELEMS // short, -(-tall // _SPECTRA_BLOCK)))
    nv = 1 if (is_head or run.vectors) else 0
    fast = (k is not None and k < d and not run.ops.torch and dev.type == "cpu"
            and getattr(D, "dtype", None) == np.float32 and tall * short > _FAST_MIN_ELEMS)
    bg = run.background
    background = fast and bg is not None and bg.pool is not None
    gram_workers = 1 if background or bg is None or dev.type != "cpu" else bg.workers

    def job() -> spectra.Spectrum:   # inline (the head, ...): the Gram pass split between workers,
        return spectra.spectrum(D, k, n_vectors=nv, device=dev,   # in half-size blocks (same memory)
                                block_rows=block_rows if gram_workers == 1 else max(1, block_rows // 2),
                                method="gram32" if fast else "auto", workers=gram_workers)

    def fill(spec: spectra.Spectrum) -> None:
        _fill_spectrum(r, p.name, rec, spec, full=full, is_head=is_head, top_k=run.top_k)

    if fast and bg is not None:   # in the background; the keys keep their order in the record
        rec.update(dict.fromkeys(("s1", "s2", "s1_s2", "rank1_fraction", "stable_rank", "n_singular_values",
                                  "top_singular_values")))
        bg.submit(job, fill)
    else:
        with run.phase("head_spectrum" if is_head else "spectra"):
            fill(job())


def _part(run: DiffRun, D: Any, part: str, axis: int, a: int, z: int) -> dict[str, Any]:
    """Norm and SVD metrics of one part of a fused projection (rows or columns ``a:z``)."""
    ops = run.ops
    sub = D[a:z] if axis == 0 else D[:, a:z]
    sub = sub.contiguous() if ops.torch else np.ascontiguousarray(sub)
    l2, cnt = ops.stats(sub)
    out: dict[str, Any] = {"part": part, "axis": axis, "start": a, "stop": z, "shape": list(sub.shape), "l2": l2,
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None}
    if cnt[0] > 0:
        d = min(sub.shape)
        k = None if run.full_spectrum else min(run.top_k, d)
        spec = spectra.spectrum(sub, k, device=run.device)
        s = spec.s
        out.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec)})
    return out
