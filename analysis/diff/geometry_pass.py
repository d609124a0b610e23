"""Geometry of every weight matrix's update relative to the base (``diff(..., geometry=True)``,
``rlvr-diff --geometry``): where ``ΔW`` lies relative to ``W_base`` (issue 29, items 1, 2 and 8).

- :func:`applies`: which tensors get it (every 2-D weight the pass measures, the output head
  included; a fused 3-D expert tensor expert by expert).
- :func:`measure`: :func:`analysis.geometry.update_geometry` of one tensor pair, called by
  :func:`analysis.diff.stream._tensor` while ``W_base`` and ``W_rl`` are both in memory (before
  the difference overwrites ``W_rl``: no second read), with the ranks it defaults to
  (:func:`analysis.geometry.default_ks`) and the ULP histogram in ``W_base``'s dtype (the
  ``--cast`` dtype when given).
- :func:`finish`: the document's ``geometry`` block: per checkpoint every matrix's rows, the
  ``‖ΔW‖²``-weighted aggregate over matrices, the same per transformer block, and the precision
  histogram (ULP counts added over matrices).
- :func:`geometry_frame`: the per-matrix rows of a document as one long DataFrame.

The matrix math and its baselines are :mod:`analysis.geometry` (``docs/spectra.md``, "Geometry of
an update relative to the base"); this module only runs it inside the tensor pass and sums up.
LoRA adapters are refused (:data:`ADAPTER_REFUSAL`): their pass never forms the dense ``ΔW``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import geometry as geo
from ..checkpoints import DTYPE_NAMES, TensorPair, moe_tensor
from .settings import CPU_BLAS_THREADS

if TYPE_CHECKING:
    import pandas as pd

    from .run import DiffRun, _Tally

__all__ = ["GEOMETRY_AGGREGATION", "ADAPTER_REFUSAL", "applies", "measure", "finish", "geometry_frame"]

#: how the aggregates of the ``geometry`` block are formed, stated in report.json and the report
GEOMETRY_AGGREGATION = (
    "aggregate and per_layer: for each (group, metric, param), the ‖ΔW‖²_F-weighted mean over the matrices that "
    "report it (a matrix with ΔW = 0 weighs 0), value and baseline alike (baseline null where a matrix has none); "
    "energy_covered = the share of the summed ‖ΔW‖² in those matrices. Not averaged: delta_fro_norm, base_rms, "
    "delta_rms, principal_rank and the ULP rows; the ULP histogram is aggregated in precision (counts add).")

#: why ``geometry=True`` is refused with a LoRA adapter
ADAPTER_REFUSAL = (
    "geometry: the geometry of the update is computed for dense checkpoints only: a LoRA adapter's ΔW = s·B·A is "
    "measured from its factors and never formed as a dense matrix (for a 7B model that is one m × n product per "
    "target module). Merge the adapter into a full checkpoint (peft: merge_and_unload() then save_pretrained()) "
    "and run rlvr-diff --geometry BASE MERGED, or drop --geometry")

#: rows of update_geometry that are not averaged over matrices
_NOT_AVERAGED = frozenset({"delta_fro_norm", "base_rms", "delta_rms", "principal_rank", "ulp_share", "ulp_count",
                           "unchanged_share", "one_ulp_share", "max_ulp", "mean_ulp", "exact_in_dtype"})
_GROUPS = ("energy", "rotation", "coordinates", "ulp")
_ULP_DTYPES = ("bfloat16", "float16", "float32")
_CAST_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _num(x: Any) -> float | None:
    """A JSON-safe float (``None`` for NaN)."""
    x = float(x)
    return None if math.isnan(x) else x


def ulp_dtype(base_st_dtype: str, cast: str | None) -> str | None:
    """The dtype whose ULPs measure ``ΔW``: the ``--cast`` dtype, else the base's stored dtype
    (``None`` for float64 and float8 bases: no ULP histogram)."""
    name = _CAST_NAMES[cast] if cast is not None else DTYPE_NAMES.get(base_st_dtype, base_st_dtype)
    return name if name in _ULP_DTYPES else None


def applies(run: DiffRun, p: TensorPair, config: dict) -> bool:
    """Whether tensor ``p`` gets the geometry: a 2-D weight the pass measures (every one with
    ``layers="all"``, the head only with ``"head"``), or a fused 3-D expert tensor (``"all"``)."""
    if not run.geometry or not p.compared_shape or min(p.compared_shape) < 1:
        return False
    if len(p.shape) == 2:
        return run.layers == "all" or p.kind == "head"
    if len(p.shape) == 3 and run.layers == "all":
        mt = moe_tensor(p.name, p.shape, config)
        return mt is not None and mt.fused
    return False


@contextlib.contextmanager
def _torch_threads(run: DiffRun) -> Iterator[None]:
    """On a CPU diff, torch's intra-op threads at :data:`~analysis.diff.settings.CPU_BLAS_THREADS`
    for the block (restored afterwards), as the BLAS pools of the pass: the geometry's small
    torch LAPACK calls (``svdvals`` of ``k × k`` matrices) busy-wait against each other with two
    threads on the loaded 2-core test machine (the tiny Qwen2 pair: 20.7 s of geometry with 2
    threads, 1.3 s with 1)."""
    if run.device.type != "cpu" or CPU_BLAS_THREADS is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(CPU_BLAS_THREADS))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def measure(run: DiffRun, r: _Tally, p: TensorPair, B: Any, X: Any, ulp: str | None) -> None:
    """:func:`analysis.geometry.update_geometry` of ``(W_base, W_rl) = (B, X)`` (the compared rows,
    as the pass read them), appended to ``r.geometry``; a fused 3-D expert tensor expert by expert."""
    with _torch_threads(run):
        if len(p.shape) == 3:
            for j in range(int(p.compared_shape[0])):
                _one(run, r, p, B[j], X[j], ulp, expert=j)
        else:
            _one(run, r, p, B, X, ulp, expert=None)


def _one(run: DiffRun, r: _Tally, p: TensorPair, B: Any, X: Any, ulp: str | None, expert: int | None) -> None:
    shape = [int(s) for s in B.shape]
    entry: dict[str, Any] = {"name": p.name, "kind": p.kind, "layer": p.layer, "expert": expert, "shape": shape}
    try:
        df = geo.update_geometry(B, X, ulp_dtype=ulp, device=run.device)
    except ValueError as err:
        if "zero matrix" not in str(err):
            where = p.name if expert is None else f"{p.name} (expert {expert})"
            raise ValueError(f"{r.ck.label}: geometry of tensor {where!r}: {err}") from None
        entry.update({"note": f"no geometry: {err}", "delta_energy": None, "ks": [], "ulp_dtype": ulp,
                      "metrics": [], "ulp_counts": None})
        r.geometry.append(entry)
        return
    fro = float(df.loc[df.metric == "delta_fro_norm", "value"].iloc[0])
    counts = df[df.metric == "ulp_count"]
    entry.update({
        "delta_energy": fro * fro,
        "ks": [int(k) for k in geo.default_ks(*shape)],
        "ulp_dtype": ulp,
        "metrics": [{"group": g, "metric": m, "param": _num(a), "value": float(v), "baseline": _num(b)}
                    for g, m, a, v, b in df[~df.metric.isin(("ulp_share", "ulp_count"))].itertuples(index=False)],
        "ulp_counts": [int(c) for c in counts["value"]] if ulp is not None else None,
    })
    r.geometry.append(entry)


def aggregate(matrices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``‖ΔW‖²``-weighted mean over ``matrices`` of every averaged row (:data:`GEOMETRY_AGGREGATION`)."""
    total = sum(m["delta_energy"] or 0.0 for m in matrices)
    acc: dict[tuple, list] = {}
    order: dict[str, int] = {}
    for m in matrices:
        w = m["delta_energy"] or 0.0
        for row in m["metrics"]:
            if row["metric"] in _NOT_AVERAGED:
                continue
            order.setdefault(row["metric"], len(order))
            key = (row["group"], row["metric"], row["param"])
            a = acc.setdefault(key, [0.0, 0.0, 0.0, True, 0])
            a[0] += w * row["value"]
            a[1] += w
            if row["baseline"] is None:
                a[3] = False
            else:
                a[2] += w * row["baseline"]
            a[4] += 1
    out = []
    for (g, metric, param), (sv, sw, sb, has_b, n) in acc.items():
        out.append({"group": g, "metric": metric, "param": param,
                    "value": sv / sw if sw > 0 else None,
                    "baseline": sb / sw if sw > 0 and has_b else None,
                    "n_matrices": n, "energy_covered": sw / total if total > 0 else None})
    out.sort(key=lambda x: (_GROUPS.index(x["group"]) if x["group"] in _GROUPS else len(_GROUPS),
                            order[x["metric"]], -1.0 if x["param"] is None else x["param"]))
    return out


def _precision(matrices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ULP histogram of ``ΔW`` over all matrices, per ULP dtype (counts add)."""
    out = []
    for dt in _ULP_DTYPES:
        ms = [m for m in matrices if m.get("ulp_dtype") == dt and m.get("ulp_counts") is not None]
        if not ms:
            continue
        edges = [int(e) for e in geo.ulp_bin_edges(dt)]
        counts = np.sum([m["ulp_counts"] for m in ms], axis=0).astype(np.int64)
        sizes = [m["shape"][0] * m["shape"][1] for m in ms]
        n = int(sum(sizes))
        vals = [{r["metric"]: r["value"] for r in m["metrics"] if r["group"] == "ulp"} for m in ms]
        out.append({"dtype": dt, "n_matrices": len(ms), "n_entries": n, "bin_edges": edges,
                    "counts": [int(c) for c in counts], "shares": [float(c) / n for c in counts],
                    "unchanged_share": float(counts[0]) / n, "one_ulp_share": float(counts[1]) / n,
                    "max_ulp": max(v["max_ulp"] for v in vals),
                    "mean_ulp": float(sum(v["mean_ulp"] * s for v, s in zip(vals, sizes)) / n),
                    "exact_in_dtype": all(v["exact_in_dtype"] == 1.0 for v in vals)})
    return out


def finish(tallies: list[_Tally], num_layers: int) -> dict[str, Any]:
    """The ``geometry`` block of the document (per checkpoint, in the order of ``checkpoints``)."""
    cks = []
    for r in tallies:
        mats = r.geometry
        per_layer = []
        for i in range(num_layers):
            lm = [m for m in mats if m["layer"] == i]
            if lm:
                per_layer.append({"layer": i, "n_matrices": len(lm),
                                  "energy": float(sum(m["delta_energy"] or 0.0 for m in lm)),
                                  "aggregate": aggregate(lm)})
        cks.append({"path": str(r.ck.path), "n_matrices": len(mats),
                    "energy": float(sum(m["delta_energy"] or 0.0 for m in mats)),
                    "aggregate": aggregate(mats), "per_layer": per_layer, "precision": _precision(mats),
                    "matrices": mats})
    return {"function": "analysis.geometry.update_geometry (default arguments, one call per matrix)",
            "ks": "analysis.geometry.default_ks(m, n) = {1, 8, 64, ⌈0.05·min(m, n)⌉} ∩ [1, min(m, n)] per matrix",
            "ulp_dtype": "the base's stored dtype (the --cast dtype when given); none for float64 / float8 bases",
            "aggregation": GEOMETRY_AGGREGATION, "checkpoints": cks}


def geometry_frame(doc: dict) -> pd.DataFrame:
    """The per-matrix rows of a document's ``geometry`` block as one long DataFrame: columns
    ``checkpoint, name, kind, layer, expert, group, metric, param, value, baseline``."""
    import pandas as pd

    rows = []
    for c in (doc.get("geometry") or {}).get("checkpoints", []):
        for m in c["matrices"]:
            for r in m["metrics"]:
                rows.append({"checkpoint": c["path"], "name": m["name"], "kind": m["kind"], "layer": m["layer"],
                             "expert": m["expert"], **r})
    cols = ["checkpoint", "name", "kind", "layer", "expert", "group", "metric", "param", "value", "baseline"]
    return pd.DataFrame(rows, columns=cols)
