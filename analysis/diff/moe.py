"""Mixture-of-experts weights in the checkpoint diff: every expert matrix measured, per-block aggregates.

- :func:`_moe_measure`: the MoE role of a tensor's record (router, expert, shared expert); a
  fused 3-D expert tensor (``experts.gate_up_proj`` of shape ``E × 2f × d`` or ``E × d × 2f``)
  measured expert by expert and per gate/up part (:func:`_matrix_metrics`).
- :func:`_moe_finish`: a checkpoint's ``experts`` list (block, expert, projection),
  ``per_layer[l]["moe"]`` (the block's experts aggregated as :data:`MOE_AGGREGATION` says, its
  routers and shared experts) and the ``moe`` totals.

Which tensors are experts: :func:`analysis.checkpoints.moe_tensor`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import spectra
from ..checkpoints import TensorPair, expert_count, expert_parts, moe_tensor
from .settings import TOLERANCES, _finite, _key

if TYPE_CHECKING:
    from .run import DiffRun, _Tally

__all__ = ["MOE_AGGREGATION"]

#: what the per-layer expert aggregates are, stated in report.json and the report
MOE_AGGREGATION = ("per block, over the routed experts' matrices (a fused gate_up_proj counts as its gate and up "
                   "parts): energy = Σ ‖ΔW_e‖²_F and l2_share = Σ of the shares; max and median of s1/s2 and of "
                   "r1 over the matrices that changed (ΔW ≠ 0; an exactly rank-1 ΔW has no finite s1/s2); "
                   "n_experts = distinct expert indices. Routers and shared experts are their own rows.")


def _matrix_metrics(run: DiffRun, M: Any, svd: bool) -> dict[str, Any]:
    """Norm, densities and SVD metrics of one expert matrix (a slice of a fused 3-D ``ΔW``)."""
    M = M.contiguous() if run.ops.torch else np.ascontiguousarray(M)
    l2, cnt = run.ops.stats(M)
    size = int(math.prod(M.shape))
    out: dict[str, Any] = {"shape": [int(x) for x in M.shape], "l2": l2,
                           "density": {_key(t): c / size for t, c in zip(TOLERANCES, cnt)},
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None, "stable_rank": None}
    if svd and cnt[0] > 0 and min(M.shape) >= 1:
        k = None if run.full_spectrum else min(run.top_k, min(M.shape))
        spec = spectra.spectrum(M, k, device=run.device)
        s = spec.s
        out.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec),
                    "stable_rank": spectra.stable_rank(spec)})
    return out


def _moe_measure(run: DiffRun, r: _Tally, p: TensorPair, D: Any, rec: dict[str, Any]) -> None:
    """The MoE role of a record (``moe``, ``expert``, ``projection``); a fused 3-D expert tensor is
    measured expert by expert (and per gate/up part), kept under ``_experts`` until :func:`_moe_finish`."""
    mt = moe_tensor(p.name, p.shape, r.ck.config)
    if mt is None:
        return
    rec["moe"] = mt.role
    rec["projection"] = mt.projection
    if mt.expert is not None:
        rec["expert"] = mt.expert
    if not mt.fused or len(p.compared_shape) != 3:
        return
    parts = expert_parts(p.name, p.shape, r.ck.config)
    rec["n_experts"] = int(p.compared_shape[0])
    rec["expert_parts"] = ([{"projection": q, "axis": ax, "start": a, "stop": z, "step": st}
                            for q, ax, a, z, st in parts] if parts else None)
    per = []
    for j in range(rec["n_experts"]):
        M = D[j]   # with parts, only the parts' spectra are reported: the whole matrix gets no SVD
        row = _matrix_metrics(run, M, svd=run.layers == "all" and not parts)
        if parts:
            row["parts"] = []
            for q, ax, a, z, st in parts:
                sub = M[a:z:st] if ax == 0 else M[:, a:z:st]
                row["parts"].append(dict(_matrix_metrics(run, sub, svd=run.layers == "all"),
                                         projection=q, axis=ax, start=a, stop=z, step=st))
        per.append(row)
    rec["_experts"] = per


_EXPERT_ROW_KEYS = ("shape", "l2", "density", "s1", "s2", "s1_s2", "rank1_fraction", "stable_rank")


def _expert_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Energy (sum), share (sum), max and median of s1/s2 and r1 over expert-matrix rows."""
    s12 = [x["s1_s2"] for x in rows if x["s1_s2"] is not None]
    r1 = [x["rank1_fraction"] for x in rows if x["rank1_fraction"] is not None]
    l2 = math.hypot(*(x["l2"] for x in rows)) if rows else 0.0
    return {"n_experts": len({x["expert"] for x in rows}), "n_matrices": len(rows),
            "n_changed": sum(1 for x in rows if x["l2"] > 0), "l2": l2, "energy": l2 * l2,
            "l2_share": float(sum(x["l2_share"] for x in rows)),
            "s1_s2_max": max(s12) if s12 else None, "s1_s2_median": float(np.median(s12)) if s12 else None,
            "rank1_fraction_max": max(r1) if r1 else None,
            "rank1_fraction_median": float(np.median(r1)) if r1 else None}


def _moe_finish(out: dict[str, Any], config: dict) -> None:
    """MoE entries of a checkpoint's document: ``experts`` (every expert matrix: block, expert,
    projection), ``per_layer[i]["moe"]`` (the block's experts aggregated, its routers and shared
    experts) and ``moe`` (totals); block and inner means then count the matrices of fused experts."""
    recs = out["layers"]
    if not any("moe" in rec for rec in recs):
        return
    total = out["global_l2"]
    rows: list[dict[str, Any]] = []
    fused_rows: list[dict[str, Any]] = []
    for rec in recs:
        if rec.get("moe") != "expert":
            continue
        per = rec.pop("_experts", None)
        if per is None:
            if len(rec["shape"]) == 2:
                rows.append({"layer": rec["layer"], "expert": rec.get("expert"), "projection": rec["projection"],
                             "name": rec["name"], "index": None, "part": None,
                             **{k: rec.get(k) for k in _EXPERT_ROW_KEYS}})
            continue
        for j, e in enumerate(per):
            for pt in e.get("parts") or [dict(e, projection=rec["projection"])]:
                part = ({k: pt[k] for k in ("axis", "start", "stop", "step")} if "axis" in pt else None)
                row = {"layer": rec["layer"], "expert": j, "projection": pt["projection"], "name": rec["name"],
                       "index": j, "part": part, **{k: pt.get(k) for k in _EXPERT_ROW_KEYS}}
                rows.append(row)
                fused_rows.append(row)
    for row in rows:
        row["l2_share"] = (row["l2"] / total) ** 2 if total > 0 else 0.0
    rows.sort(key=lambda x: (-1 if x["layer"] is None else x["layer"], x["expert"] if x["expert"] is not None else -1,
                             x["projection"] or ""))
    out["experts"] = rows

    def side(role: str, i: int | None) -> list[dict[str, Any]]:
        return [rec for rec in recs if rec.get("moe") == role and rec["layer"] == i]

    for pl in out["per_layer"]:
        i = pl["layer"]
        er = [x for x in rows if x["layer"] == i]
        routers, shared = side("router", i), side("shared_expert", i)
        if not (er or routers or shared):
            pl["moe"] = None
            continue
        by_proj = {q: _expert_stats([x for x in er if x["projection"] == q])
                   for q in sorted({x["projection"] for x in er})}
        pl["moe"] = {
            "experts": dict(_expert_stats(er), by_projection=by_proj),
            "routers": [{k: rec.get(k) for k in ("name", "projection", "shape", "l2", "l2_share", "s1", "s2", "s1_s2",
                                                  "rank1_fraction")} for rec in routers],
            "shared_experts": ({"names": [rec["name"] for rec in shared],
                                "l2": math.hypot(*(rec["l2"] for rec in shared)),
                                "l2_share": float(sum(rec["l2_share"] for rec in shared)),
                                "s1_s2_max": max((rec["s1_s2"] for rec in shared if rec["s1_s2"] is not None),
                                                 default=None)} if shared else None),
        }
        if fused_rows:   # the block's means count each fused expert matrix as a matrix of its own
            fr = [x for x in fused_rows if x["layer"] == i]
            lr = [rec for rec in recs if rec["layer"] == i]
            s12 = [x["s1_s2"] for x in lr + fr if x["s1_s2"] is not None]
            r1 = [x["rank1_fraction"] for x in lr + fr if x["rank1_fraction"] is not None]
            pl.update({"s1_s2_mean": float(np.mean(s12)) if s12 else None,
                       "rank1_fraction_mean": float(np.mean(r1)) if r1 else None, "n_matrices": len(s12)})
    if fused_rows:
        inner = [rec for rec in recs if rec["kind"] == "block"] + [x for x in fused_rows if x["layer"] is not None]
        s12 = [x["s1_s2"] for x in inner if x["s1_s2"] is not None]
        r1 = [x["rank1_fraction"] for x in inner if x["rank1_fraction"] is not None]
        out.update({"inner_s1_s2_mean": float(np.mean(s12)) if s12 else None,
                    "inner_rank1_fraction_mean": float(np.mean(r1)) if r1 else None, "inner_n_matrices": len(s12)})
    share = {role: float(sum(rec["l2_share"] for rec in recs if rec.get("moe") == role))
             for role in ("expert", "router", "shared_expert")}
    moe_layers = [pl["layer"] for pl in out["per_layer"] if pl.get("moe")]
    out["moe"] = {"n_experts": expert_count(config) or (max((x["expert"] for x in rows), default=-1) + 1),
                  "layers": moe_layers, "n_expert_matrices": len(rows),
                  "l2_share": {"experts": share["expert"], "routers": share["router"],
                               "shared_experts": share["shared_expert"]},
                  "fused_tensors": sorted({x["name"] for x in fused_rows}),
                  "aggregation": MOE_AGGREGATION}
