"""Across checkpoints: alignment of leading singular vectors, pairwise cosines and clustering.

- :func:`_alignment`: ``|cos|`` of each checkpoint's leading ``u``, ``v`` against the last
  checkpoint's, for the head and the early / mid / late :func:`thirds` of the blocks (FADE
  Table 12).
- :func:`_clustering`: pairwise ``cos(vec ΔW_a, vec ΔW_b)`` (global and per layer) from the
  scaled Gram matrices of :mod:`analysis.diff.stream` (summed by :func:`_aligned_sum`),
  average-linkage clustering on ``1 − cos``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..checkpoints import Checkpoint
from .stream import _step_of

if TYPE_CHECKING:
    from .run import _Tally

__all__ = ["thirds"]


def thirds(n_layers: int) -> dict[str, list[int]]:
    """Blocks ``0 … L−1`` split into early / mid / late thirds (FADE Table 12):
    ``numpy.array_split`` sizes, the first thirds one larger when ``L`` is not a multiple of 3."""
    parts = np.array_split(np.arange(n_layers), 3)
    return {k: [int(i) for i in p] for k, p in zip(("early", "mid", "late"), parts)}


def _aligned_sum(parts: list[tuple[np.ndarray, list[int]]]) -> np.ndarray:
    """``Σ_t 2**(s_a+s_b) G_t[a, b]`` for scaled Grams ``(G_t, s)``, itself scaled per run by
    ``2**-(E_a+E_b)``, ``E`` the largest shift of each run: cosines are unchanged by a per-run
    scale, and neither tiny nor huge ``ΔW`` (float64 checkpoints) under- or overflows."""
    S = np.array([s for _, s in parts], dtype=np.int64)
    live = np.array([np.diag(G) > 0 for G, _ in parts])      # a ΔW = 0 sets no scale
    E = np.where(live, S, -(1 << 40)).max(axis=0)
    E = np.where(live.any(axis=0), E, 0)
    total = np.zeros_like(parts[0][0])
    with np.errstate(under="ignore"):
        for G, s in parts:
            d = np.asarray(s, dtype=np.int64) - E
            total += np.ldexp(G, (d[:, None] + d[None, :]).astype(np.int32))
    return total


def _abs_cos(a: np.ndarray, b: np.ndarray) -> float:
    m = min(a.size, b.size)
    a, b = a[:m].astype(np.float64), b[:m].astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(abs(a @ b) / (na * nb)) if na > 0 and nb > 0 else 0.0


def _alignment(runs: list[_Tally], b: Checkpoint, paths: list[str]) -> dict[str, Any]:
    """|cos| of each checkpoint's leading u, v against the last checkpoint's (FADE Table 12)."""
    last = runs[-1]
    L = b.num_layers
    parts = thirds(L)

    def cos(name: str) -> list[tuple[float | None, float | None]]:
        out = []
        for r in runs:
            if name in r.vectors and name in last.vectors:
                (u, v), (ul, vl) = r.vectors[name], last.vectors[name]
                out.append((_abs_cos(u, ul), _abs_cos(v, vl)))
            else:
                out.append((None, None))
        return out

    head = cos(b.head)
    block_mats = [n for n in last.vectors if last.pairs[n].kind == "block"]
    per_layer: dict[int, list[list[tuple]]] = {i: [] for i in range(L)}
    for nm in block_mats:
        per_layer[last.pairs[nm].layer].append(cos(nm))

    def mean_over(layers_: list[int], which: int) -> list[float | None]:
        res = []
        for j in range(len(runs)):
            vals = [c[j][which] for i in layers_ for c in per_layer[i] if c[j][which] is not None]
            res.append(float(np.mean(vals)) if vals else None)
        return res

    return {
        "reference": paths[-1],
        "checkpoints": paths,
        "steps": [_step_of(p) for p in paths],
        "output_head": {"name": b.head, "u": [c[0] for c in head], "v": [c[1] for c in head]},
        "thirds": {k: {"layers": ls, "u": mean_over(ls, 0), "v": mean_over(ls, 1)} for k, ls in parts.items()},
        "per_layer": [{"layer": i, "u": mean_over([i], 0), "v": mean_over([i], 1)} for i in range(L)],
        "note": "|cos| between the leading singular vectors of each checkpoint's ΔW and those of the "
                "last checkpoint; blocks: mean over the 2-D weights of the layers of each third",
    }


def _clustering(runs: list[_Tally], cross: dict[str, tuple[np.ndarray, list[int]]], b: Checkpoint,
                paths: list[str]) -> dict[str, Any]:
    """Pairwise cosine of the flattened ΔW (global and per layer), average-linkage
    hierarchical clustering on 1 − cos (scipy), |cos| of the head's u and v between runs."""
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    n = len(runs)

    def cosine(G: np.ndarray) -> np.ndarray:
        d = np.sqrt(np.clip(np.diag(G), 0, None))
        with np.errstate(invalid="ignore", divide="ignore"):
            C = G / np.outer(d, d)
        C[~np.isfinite(C)] = 0.0
        C = np.clip(C, -1.0, 1.0)
        np.fill_diagonal(C, np.where(d > 0, 1.0, 0.0))
        return C

    members: dict[str, list[tuple[np.ndarray, list[int]]]] = {}
    for nm, part in cross.items():
        p = runs[0].pairs[nm]
        g = f"layer {p.layer}" if p.layer is not None else ("output head" if p.kind == "head" else p.kind)
        members.setdefault(g, []).append(part)
    groups = {g: _aligned_sum(parts) for g, parts in members.items()}
    total = _aligned_sum(list(cross.values()))
    C = cosine(total)
    Dm = np.clip(1.0 - C, 0.0, 2.0)
    np.fill_diagonal(Dm, 0.0)
    Z = linkage(squareform(Dm, checks=False), method="average")

    def vec_cos(which: int) -> list[list[float | None]]:
        out = []
        for ra in runs:
            row = []
            for rb in runs:
                if b.head in ra.vectors and b.head in rb.vectors:
                    row.append(_abs_cos(ra.vectors[b.head][which], rb.vectors[b.head][which]))
                else:
                    row.append(None)
            out.append(row)
        return out

    order = sorted(groups, key=lambda g: (0, int(g.split()[1])) if g.startswith("layer ") else (1, g))
    return {
        "labels": paths,
        "cosine_global": C.tolist(),
        "cosine_per_layer": {g: cosine(groups[g]).tolist() for g in order},
        "linkage": Z.tolist(),
        "leaf_order": [int(i) for i in leaves_list(Z)],
        "method": "average",
        "distance": "1 - cos",
        "head_u_abs_cos": vec_cos(0),
        "head_v_abs_cos": vec_cos(1),
        "n": n,
    }
