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

- :func:`measure_low_rank`: the same for a LoRA update ``ΔW = s·L·R`` of an adapter, from its
  factors (:func:`analysis.geometry.lora_update_geometry`, called by
  :func:`analysis.diff.lora.adapter_pass` with ``W_base`` read once), with the update's intruder
  dimensions beside those of a random update of the same rank and norm; :func:`intruders`
  gathers them into the adapter's ``intruders`` block.

The matrix math and its baselines are :mod:`analysis.geometry` (``docs/spectra.md``, "Geometry of
an update relative to the base"); this module only runs it inside the tensor pass and sums up.
"""

from __future__ import annotations

import contextlib
import math
import zlib
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

__all__ = ["GEOMETRY_AGGREGATION", "INTRUDER_K", "INTRUDER_EPSILONS", "applies", "measure", "measure_low_rank",
           "intruders", "finish", "geometry_frame"]

#: how the aggregates of the ``geometry`` block are formed, stated in report.json and the report
GEOMETRY_AGGREGATION = (
    "aggregate and per_layer: for each (group, metric, param), the ‖ΔW‖²_F-weighted mean over the matrices that "
    "report it (a matrix with ΔW = 0 weighs 0), value and baseline alike (baseline null where a matrix has none); "
    "energy_covered = the share of the summed ‖ΔW‖² in those matrices. Not averaged: delta_fro_norm, base_rms, "
    "delta_rms, principal_rank and the ULP rows; the ULP histogram is aggregated in precision (counts add).")

#: intruder dimensions of a LoRA update: top-k singular vectors of W_base + s·B·A, thresholds ε
#: (the defaults of analysis.geometry.lora_intruders: k = 10 and the ε sweep of arXiv 2410.21228)
INTRUDER_K = 10
INTRUDER_EPSILONS = (0.1, 0.3, 0.5, 0.7, 0.9)

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


def _gram_workers(run: DiffRun) -> int:
    """Threads for the Gram pass of the geometry's ``"gram32"`` spectra: the run's workers when its
    background spectra are idle (inline, or nothing in flight), else 1 (the pass is already parallel)."""
    bg = run.background
    if run.device.type != "cpu" or bg is None:
        return 1
    if bg.pool is None:
        return max(1, int(run.workers))
    return max(1, int(run.workers)) if all(f.done() for f, _ in bg.pending) else 1


def _spectra(run: DiffRun, p: TensorPair, B: Any, X: Any, expert: int | None) -> tuple[Any, Any]:
    """The spectra of ``W_base`` and ``W_rl`` for the geometry (:func:`analysis.geometry.geometry_spectra`;
    each Gram pass on :func:`_gram_workers` threads), ``W_base``'s once per tensor (and expert)
    however many checkpoints are diffed against it: kept on ``run`` for the tensor being measured
    (each expert of a fused 3-D one), dropped before the next tensor's is computed."""
    key = (p.name, expert, tuple(int(s) for s in B.shape))
    cache = run.geometry_base
    for k in [k for k in cache if k[0] != p.name]:
        del cache[k]
    sb, sr = geo.geometry_spectra(B, X, base_spectrum=cache.get(key), device=run.device,
                                  workers=_gram_workers(run))
    cache[key] = sb
    return sb, sr


def measure(run: DiffRun, r: _Tally, p: TensorPair, B: Any, X: Any, ulp: str | None) -> None:
    """:func:`analysis.geometry.update_geometry` of ``(W_base, W_rl) = (B, X)`` (the compared rows,
    as the pass read them), appended to ``r.geometry``; a fused 3-D expert tensor expert by expert.
    ``W_base``'s spectrum is computed once per tensor for all checkpoints (:func:`_spectra`);
    large float32 matrices get ``"gram32"`` spectra (:func:`analysis.geometry.update_geometry`),
    their Gram pass split over the run's workers when the background spectra are idle."""
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
        sb, sr = _spectra(run, p, B, X, expert)
        df = geo.update_geometry(B, X, ulp_dtype=ulp, device=run.device, base_spectrum=sb, rl_spectrum=sr)
    except ValueError as err:
        if "zero matrix" not in str(err):
            where = p.name if expert is None else f"{p.name} (expert {expert})"
            raise ValueError(f"{r.ck.label}: geometry of tensor {where!r}: {err}") from None
        entry.update({"note": f"no geometry: {err}", "delta_energy": None, "ks": [], "ulp_dtype": ulp,
                      "metrics": [], "ulp_counts": None})
        r.geometry.append(entry)
        return
    _fill(entry, df, shape, ulp)
    r.geometry.append(entry)


def _fill(entry: dict[str, Any], df: pd.DataFrame, shape: list[int], ulp: str | None) -> None:
    """A matrix's entry from :func:`analysis.geometry.update_geometry`'s rows."""
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


def measure_low_rank(run: DiffRun, r: _Tally, p: TensorPair, B: Any, f: tuple[np.ndarray, np.ndarray, float],
                     info: dict[str, Any], ulp: str | None) -> None:
    """:func:`analysis.geometry.lora_update_geometry` of ``ΔW = s·L·R`` (``f = (L, R, s)``, as the
    base stores the weight) against ``W_base = B``, appended to ``r.geometry`` like a dense matrix's
    entry, with the update's intruder dimensions under ``"intruders"`` (:data:`INTRUDER_K`,
    :data:`INTRUDER_EPSILONS`; on the module's output side: the left singular vectors of an
    ``out × in`` weight, the right ones of a transposed one (Conv1D, embeddings); against the top
    ``max(default_ks)`` singular vectors of ``W_base`` the geometry computes anyway; the random
    update seeded by ``crc32`` of the tensor name)."""
    L, R, s = f
    shape = [int(x) for x in B.shape]
    entry: dict[str, Any] = {"name": p.name, "kind": p.kind, "layer": p.layer, "expert": None, "shape": shape}
    side = "right" if info.get("transposed") else "left"
    k = min(INTRUDER_K, min(shape))
    n_base = max(geo.default_ks(*shape))
    with _torch_threads(run):
        try:
            df = geo.lora_update_geometry(B, R, L, s, ulp_dtype=ulp, k=k, epsilons=INTRUDER_EPSILONS, side=side,
                                          n_base=n_base, seed=zlib.crc32(p.name.encode("utf-8")),
                                          device=run.device)
        except ValueError as err:
            if "zero matrix" not in str(err):
                raise ValueError(f"{r.ck.label}: geometry of tensor {p.name!r}: {err}") from None
            entry.update({"note": f"no geometry: {err}", "delta_energy": None, "ks": [], "ulp_dtype": ulp,
                          "metrics": [], "ulp_counts": None})
            r.geometry.append(entry)
            return
    _fill(entry, df[df.group != "intruders"], shape, ulp)
    intr = df[df.group == "intruders"]

    def col(metric: str, which: str) -> list[float]:
        return [float(x) for x in intr.loc[intr.metric == metric, which]]

    by_eps = []
    for e in INTRUDER_EPSILONS:
        row = {m: intr[(intr.metric == m) & (np.isclose(intr.param, e))].iloc[0]
               for m in ("n_intruders", "n_intruders_certain", "intruder_energy_share")}
        by_eps.append({"epsilon": e, "n_intruders": int(row["n_intruders"].value),
                       "n_intruders_certain": int(row["n_intruders_certain"].value),
                       "energy_share": float(row["intruder_energy_share"].value),
                       "baseline_n_intruders": int(row["n_intruders"].baseline),
                       "baseline_n_intruders_certain": int(row["n_intruders_certain"].baseline),
                       "baseline_energy_share": float(row["intruder_energy_share"].baseline)})
    entry["intruders"] = {"name": p.name, "module": info.get("module"), "rank": info.get("rank"),
                          "scale": info.get("scale"), "shape": shape, "layer": p.layer, "side": side, "k": k,
                          "n_base": n_base, "delta_energy": entry["delta_energy"],
                          "max_cos": col("max_cos", "value"), "baseline_max_cos": col("max_cos", "baseline"),
                          "base_span_share": col("base_span_share", "value"), "by_epsilon": by_eps}
    r.geometry.append(entry)


def intruders(r: _Tally) -> dict[str, Any]:
    """The ``intruders`` block of an adapter (``checkpoints[i].adapter.intruders``): every target's
    rows (taken out of its geometry entry) and, per ``ε``, the totals over the targets beside the
    random update's."""
    targets = [m.pop("intruders") for m in r.geometry if "intruders" in m]
    summary = []
    n = len(targets)
    for j, e in enumerate(INTRUDER_EPSILONS):
        rows = [t["by_epsilon"][j] for t in targets]
        summary.append({
            "epsilon": e, "n_targets": n,
            "n_intruders": sum(x["n_intruders"] for x in rows),
            "n_intruders_certain": sum(x["n_intruders_certain"] for x in rows),
            "targets_with_intruders": sum(x["n_intruders"] > 0 for x in rows),
            "energy_share_mean": sum(x["energy_share"] for x in rows) / n if n else None,
            "baseline_n_intruders": sum(x["baseline_n_intruders"] for x in rows),
            "baseline_targets_with_intruders": sum(x["baseline_n_intruders"] > 0 for x in rows),
            "baseline_energy_share_mean": sum(x["baseline_energy_share"] for x in rows) / n if n else None})
    return {"function": "analysis.geometry.lora_update_geometry (group 'intruders'), one call per LoRA target",
            "k": INTRUDER_K, "epsilons": list(INTRUDER_EPSILONS),
            "definition": "a top-k singular vector y_j of W_base + s·B·A (output side: left of an out × in weight, "
                          "right of a transposed one) is an intruder at ε when max_i |cos(y_j, x_i)| < ε over the top "
                          "n_base singular vectors x_i of W_base (n_base = max(default_ks), those the geometry "
                          "computes); the paper (arXiv 2410.21228) compares with all of them: n_intruders bounds "
                          "its count from above, n_intruders_certain (also √(1 − ‖X_n_baseᵀ y_j‖²) < ε) from below",
            "baseline": "the same for W_base + G_B·G_A, Gaussian factors of the adapter's rank r scaled to the same "
                        "‖ΔW‖_F, seeded by crc32 of the tensor name",
            "summary": summary, "targets": targets}


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
        mats = [{k: v for k, v in m.items() if k != "intruders"} for m in r.geometry]
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
