"""Series dynamics of the checkpoint diff: how the weights move from checkpoint to checkpoint.

Two modes, chosen by :func:`analysis.diff.diff`'s ``dynamics=`` (``report.json`` ``"dynamics"``,
the report's "Dynamics" section; every key in ``docs/checkpoint_diff.md``):

- ``"series"`` (``rlvr-diff BASE --series RUN_DIR``: the checkpoints of one run in step order):

  * **change density between consecutive checkpoints**: per tensor and overall, the share of
    entries whose *stored bits* are identical in checkpoints ``t`` and ``t+1`` (the raw tensors as
    stored, compared through an integer view: bf16 via ``.view(torch.int16)``; ``+0`` and ``−0``
    differ).  The figure infrastructure PRs quote for bf16 RL steps (AReaL #1125, TRL PR #5417,
    miles PR #881: ≥ 98 % bit-identical).  Streamed: per tensor, the stored tensors of two
    consecutive checkpoints are in memory at a time (re-read as stored, beside the float pass).
  * **linearity in the step** (RLVR-Linearity, arXiv 2601.04537: weights are linear in the step,
    R² ≈ 0.9): on a fixed-seed sample of :data:`~analysis.diff.settings.SERIES_SAMPLE` entries per
    tensor (all entries of a smaller tensor; :func:`sample_indices`), the R² of each entry's
    values against the step (least squares in float64, :func:`linearity_r2`); per tensor the
    median over the moving entries and the pooled ``1 − Σ SS_res / Σ SS_tot``, and both over the
    whole sample.  An entry that does not move (the same value in every checkpoint) has
    ``SS_res = SS_tot = 0``: its R² is defined as 1 (the line of slope 0 fits it exactly), but it
    is left out of the medians and adds nothing to the pooled R²; its share is ``static_share``.
    A tensor or a sample with no moving entry has ``median_r2 = pooled_r2 = None`` (never NaN).
    Beside it the same numbers for Gaussian random walks over the same steps
    (:func:`random_walk_r2`: what R² a weight that moves without any trend would show).
    Needs 3 checkpoints or more (two points always lie on a line): ``None`` otherwise.

- ``"runs"`` (several RL checkpoints of one base, ``rlvr-diff BASE RL1 RL2 ...``; the default
  with two or more dense checkpoints): the **Jaccard of the update masks** of every pair of runs
  (``M`` = the ``⌈q·N⌉`` entries of largest ``|ΔW|`` per tensor, ties at the threshold included,
  unchanged entries excluded, ``q`` = :data:`~analysis.diff.settings.MASK_FRACTION`; the rule of
  :func:`analysis.geometry.update_mask_jaccard`) per tensor and pooled over the tensors, against
  :func:`analysis.geometry.jaccard_baseline` of the achieved densities (two independent random
  masks).  The masks are taken from the ``ΔW`` of the tensor pass, one bit per entry.

LoRA adapters (``rlvr-diff BASE --series RUN_DIR`` over a TRL + peft run's adapter checkpoints, or
several adapters of one base) are measured from what they store, tensor by tensor, only over the
base tensors some adapter updates (the others have ``ΔW = 0`` in every checkpoint):

* **change density**: the bit-identical share of the *stored* adapter entries (``lora_A``,
  ``lora_B``, a DoRA magnitude, ``modules_to_save`` tensors, ``lora_B.bias``) between consecutive
  checkpoints: what the optimizer left untouched in the parameters it trains.  (The entries of
  ``ΔW = s·B·A`` are not stored: a change of one factor entry changes a whole row or column of
  ``ΔW``, so their bit-identity says nothing the factors do not.)  A series must keep the adapter's
  targets and ranks (refused otherwise, before any work: the factors of different shapes have no
  entry-by-entry correspondence);
* **linearity**: on the same fixed-seed sample of entries of ``ΔW`` per tensor as a dense series
  (:func:`sample_indices` of the ``m × n`` update), each sampled entry ``ΔW_ij = s·B_i·A_j``
  computed from row ``i`` of ``B`` and column ``j`` of ``A`` (never forming ``ΔW``); the R² of an
  entry of ``W_base + ΔW`` against the step is that of ``ΔW_ij`` (a constant shift);
* **Jaccard of update masks** across runs: the same rule on ``ΔW = s·B·A``, exact: the threshold
  (the ``⌈q·N⌉``-th largest ``|ΔW|``) by the streaming radix selection of :mod:`analysis.geometry`
  over float64 row blocks of ``s·B·A``, then the mask block by block (one bit per entry).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .settings import MASK_FRACTION, RANDOM_WALKS, SERIES_SAMPLE, SERIES_SEED

__all__ = ["DYNAMICS", "linearity_r2", "sample_indices", "random_walk_r2", "bit_identical", "Dynamics"]

#: accepted values of ``diff(dynamics=...)`` besides ``"auto"`` and ``None``
DYNAMICS = ("series", "runs")
#: what infrastructure PRs quote for consecutive bf16 RL steps (the report's reference)
CHANGE_REFERENCE = ("≥ 98 % of bf16 entries bit-identical between consecutive RL steps (AReaL #1125, "
                    "TRL PR #5417, miles PR #881)")
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# ------------------------------------------------------------------ pieces
def bit_identical(a: torch.Tensor, b: torch.Tensor) -> int:
    """Entries of ``a`` and ``b`` (same shape) with identical stored bits: both viewed as
    integers of their width (bf16 → ``int16``).  Different dtypes: equal values (float64)."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype == b.dtype and a.element_size() in _INT_VIEW:
        v = _INT_VIEW[a.element_size()]
        return int((a.view(v) == b.view(v)).sum())
    return int((a.to(torch.float64) == b.to(torch.float64)).sum())


def sample_indices(name: str, numel: int, size: int = SERIES_SAMPLE, seed: int = SERIES_SEED) -> np.ndarray:
    """The flat (C-order) indices of tensor ``name``'s entries sampled for the linearity: all of
    them when ``numel <= size``, else ``size`` distinct indices, sorted, drawn by
    ``numpy.random.default_rng([seed, crc32(name)])`` (the same sample for a tensor whatever
    the other tensors or the order of the pass)."""
    if numel <= size:
        return np.arange(numel, dtype=np.int64)
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])
    return np.sort(rng.choice(numel, size=size, replace=False)).astype(np.int64)


def linearity_r2(steps: Sequence[float], values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per entry (column of ``values``, shape ``(n_steps, n_entries)``) the least-squares line in the
    step (float64): ``(r2, ss_res, ss_tot, static)``.  ``r2 = 1 − ss_res/ss_tot``; a static entry
    (the same value at every step) has ``ss_res = ss_tot = 0`` and ``r2 = 1`` (the line of slope
    0 fits it exactly).  Source: RLVR-Linearity (arXiv 2601.04537).

    >>> r2, *_ = linearity_r2([0, 1, 2, 4], np.array([[1.0, 0.0, 5.0], [2.0, 1.0, 5.0], [3.0, 0.0, 5.0], [5.0, 1.0, 5.0]]))
    >>> np.round(r2, 4).tolist()
    [1.0, 0.2571, 1.0]
    """
    x = np.asarray(steps, dtype=np.float64)
    Y = np.asarray(values, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    static = np.all(Y == Y[:1], axis=0)
    xc = x - x.mean()
    sxx = float(xc @ xc)
    Yc = Y - Y.mean(axis=0)
    ss_tot = np.einsum("ij,ij->j", Yc, Yc)
    slope = (xc @ Yc) / sxx if sxx > 0 else np.zeros(Y.shape[1])
    R = Yc - np.outer(xc, slope)
    ss_res = np.einsum("ij,ij->j", R, R)
    ss_tot = np.where(static, 0.0, ss_tot)
    ss_res = np.where(static, 0.0, np.minimum(ss_res, ss_tot))
    r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0), 1.0)
    return r2, ss_res, ss_tot, static


def _summary(r2: np.ndarray, ss_res: np.ndarray, ss_tot: np.ndarray, static: np.ndarray) -> dict[str, Any]:
    moving = ~static
    n = int(static.size)
    st = float(ss_tot[moving].sum())
    return {"n_sampled": n, "static_share": float(static.sum()) / n if n else None,
            "median_r2": float(np.median(r2[moving])) if moving.any() else None,
            "pooled_r2": 1.0 - float(ss_res[moving].sum()) / st if st > 0 else None}


def random_walk_r2(steps: Sequence[float], n_walks: int = RANDOM_WALKS, seed: int = SERIES_SEED) -> dict[str, Any]:
    """The linearity of weights that move without a trend: ``n_walks`` Gaussian random walks
    over ``steps`` (independent increments of variance proportional to the step gap), their
    median and pooled R² (:func:`linearity_r2`), drawn with ``numpy.random.default_rng(seed)``."""
    x = np.asarray(steps, dtype=np.float64)
    rng = np.random.default_rng(seed)
    gaps = np.sqrt(np.maximum(np.diff(x), 0.0))
    inc = rng.standard_normal((x.size - 1, n_walks)) * gaps[:, None]
    Y = np.vstack([np.zeros((1, n_walks)), np.cumsum(inc, axis=0)])
    s = _summary(*linearity_r2(x, Y))
    return {"n_walks": int(n_walks), "seed": int(seed), "median_r2": s["median_r2"], "pooled_r2": s["pooled_r2"]}


def _mask_bits(D: Any, q: float) -> tuple[np.ndarray, int]:
    """The update mask of one ``ΔW`` (the ``⌈q·N⌉`` largest ``|ΔW|``, ties included, zeros
    excluded) as packed bits and its size."""
    from ..geometry import _top_count

    if isinstance(D, torch.Tensor):
        a = D.reshape(-1).abs()
        N = int(a.numel())
        if N == 0:
            return np.zeros(0, np.uint8), 0
        k = _top_count(q, N)
        t = a.kthvalue(N - k + 1).values
        m = ((a >= t) & (a > 0)).cpu().numpy()
    else:
        a = np.abs(np.asarray(D).reshape(-1))
        N = int(a.size)
        if N == 0:
            return np.zeros(0, np.uint8), 0
        k = _top_count(q, N)
        t = np.partition(a, N - k)[N - k]
        m = (a >= t) & (a > 0)
    return np.packbits(m), int(np.count_nonzero(m))


def _low_rank_mask_bits(f: tuple[np.ndarray, np.ndarray, float], q: float) -> tuple[np.ndarray, int, int]:
    """The update mask of ``ΔW = s·L·R`` (``f = (L, R, s)``) as :func:`_mask_bits` (packed bits,
    size) and its entry count ``N``: the threshold by an exact radix selection
    (:func:`analysis.geometry._select`) over float64 row blocks of ``s·L·R`` (2^22 entries each),
    then the mask block by block; ``ΔW`` is never formed whole."""
    from ..geometry import _select, _Target, _top_count

    L, R, s = f
    Lt = torch.from_numpy(np.ascontiguousarray(s * np.asarray(L, dtype=np.float64)))
    Rt = torch.from_numpy(np.ascontiguousarray(R, dtype=np.float64))
    m, n = int(Lt.shape[0]), int(Rt.shape[1])
    N = m * n
    step = max(8, ((1 << 22) // max(n, 1)) // 8 * 8)     # whole bytes of bits per block

    def blocks() -> Any:
        for i in range(0, m, step):
            yield {"d": (Lt[i:i + step] @ Rt).abs_()}

    t = _Target("d", _top_count(q, N))
    _select([t], blocks, N)
    bits, size = [], 0
    for sc in blocks():
        mk = (sc["d"] >= t.value) & (sc["d"] > 0)
        size += int(mk.sum())
        bits.append(np.packbits(mk.reshape(-1).numpy()))
    return np.concatenate(bits), size, N


def _sampled_entries(u: Any, idx: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The flat entries ``idx`` of one adapter's update of a tensor (float64): ``u`` is ``None``
    (``ΔW = 0``), the factors ``(L, R, s)`` (``ΔW_ij = s·L_i·R_{:,j}``, from rows of ``L`` and
    columns of ``R``) or the dense ``ΔW``."""
    if u is None:
        return np.zeros(idx.size)
    if isinstance(u, tuple):
        L, R, s = u
        n = int(R.shape[1])
        rows, cols = idx // n, idx % n
        return s * np.einsum("ij,ji->i", np.asarray(L, dtype=np.float64)[rows], np.asarray(R, dtype=np.float64)[:, cols])
    return np.asarray(u.cpu().numpy() if isinstance(u, torch.Tensor) else u, dtype=np.float64).reshape(-1)[idx]


def _popcount(x: np.ndarray) -> int:
    return int(np.bitwise_count(x).sum(dtype=np.int64))


# ------------------------------------------------------------------- state
class Dynamics:
    """The accumulators of one diff's dynamics (``kind`` ``"series"`` or ``"runs"``), fed tensor by
    tensor by :func:`analysis.diff.stream.dense_pass`; :meth:`finish` is ``report.json``'s
    ``"dynamics"``."""

    def __init__(self, kind: str, paths: Sequence[str], steps: Sequence[int | None]):
        self.kind = kind
        self.paths = [str(p) for p in paths]
        n = len(self.paths)
        self.notes: list[str] = []
        if all(s is not None for s in steps) and len(set(steps)) == n and list(steps) == sorted(steps):
            self.steps = [float(s) for s in steps]  # type: ignore[arg-type]
            self.step_source = "names"
        else:
            self.steps = [float(i) for i in range(n)]
            self.step_source = "position"
            if kind == "series":
                self.notes.append("the training steps could not be read from the names (checkpoint-N, "
                                  "global_step_N) in increasing order: the position in the series (0, 1, ...) "
                                  "stands for the step")
        self.tensors: list[dict[str, Any]] = []
        self.pair_counts = np.zeros((max(n - 1, 0), 2), dtype=np.int64)   # series: identical, entries
        self.r2: list[np.ndarray] = []
        self.ss: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.masks: dict[int, tuple[np.ndarray, int, int]] = {}          # runs: index -> (bits, size, N)
        self.pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        self.jac = np.zeros((len(self.pairs), 3), dtype=np.int64)         # runs: intersection, |A|, |B|
        self.jac_entries = 0
        self.adapters = False                                             # LoRA adapters (adapter_tensor_done)

    # ------------------------------------------------------------ runs
    def wants_masks(self) -> bool:
        return self.kind == "runs"

    def mask(self, i: int, D: Any, rows: int) -> None:
        """Record run ``i``'s update mask of the current tensor (its first ``rows`` rows)."""
        part = D[:rows] if getattr(D, "ndim", 0) >= 1 else D
        N = int(part.numel() if isinstance(part, torch.Tensor) else np.asarray(part).size)
        bits, size = _mask_bits(part, MASK_FRACTION)
        self.masks[i] = (bits, size, N)

    def _runs_tensor(self, name: str, kind: str) -> None:
        from ..geometry import _jaccard, jaccard_baseline

        N = self.masks[0][2]
        rows = []
        for k, (i, j) in enumerate(self.pairs):
            bi, na, _ = self.masks[i]
            bj, nb, _ = self.masks[j]
            inter = _popcount(bi & bj)
            self.jac[k] += (inter, na, nb)
            pa, pb = (na / N, nb / N) if N else (0.0, 0.0)
            rows.append({"a": i, "b": j, "jaccard": _jaccard(inter, na, nb), "baseline": float(jaccard_baseline(pa, pb)),
                         "density_a": pa, "density_b": pb})
        self.jac_entries += N
        self.tensors.append({"name": name, "kind": kind, "n_entries": N, "pairs": rows})
        self.masks.clear()

    # ---------------------------------------------------------- series
    def _series_tensor(self, tallies: list[Any], name: str, kind: str) -> None:
        rows = min(t.pairs[name].rows for t in tallies)
        prev = None
        idx = None
        vals = []
        same = []
        n_entries = 0
        for i, t in enumerate(tallies):
            raw = t.ck.read(name, 0, rows)
            raw = raw.reshape(-1) if raw.ndim else raw.reshape(1)
            if idx is None:
                n_entries = int(raw.numel())
                idx = sample_indices(name, n_entries)
            vals.append(raw[torch.from_numpy(idx)].to(torch.float64).numpy())
            if prev is not None:
                c = bit_identical(prev, raw)
                same.append(c)
                self.pair_counts[i - 1] += (c, n_entries)
            prev = raw
            del raw
        del prev
        rec: dict[str, Any] = {"name": name, "kind": kind, "n_entries": n_entries,
                               "identical_shares": [c / n_entries if n_entries else 1.0 for c in same],
                               "identical_share": sum(same) / (n_entries * len(same)) if n_entries and same else 1.0}
        if len(tallies) >= 3 and idx is not None:
            r2, ss_res, ss_tot, static = linearity_r2(self.steps, np.vstack(vals))
            self.r2.append(r2[~static])
            self.ss.append((ss_res, ss_tot, static))
            rec.update(_summary(r2, ss_res, ss_tot, static))
        self.tensors.append(rec)

    # ---------------------------------------------------------- adapters
    def check_adapters(self, adapters: Sequence[Any]) -> None:
        """Before any work: a series of adapters must store the same tensors with the same ranks in
        every checkpoint (their factors are compared entry by entry)."""
        self.adapters = True
        if self.kind != "series":
            return
        for i in range(len(adapters) - 1):
            a, b = adapters[i].layout(), adapters[i + 1].layout()
            if a != b:
                diff = sorted(set(a) ^ set(b)) or sorted(n for n in a if a[n] != b[n])
                n0 = diff[0]
                what = lambda x: "nothing" if x is None else (f"{x[0]} (rank {x[1]})" if x[1] is not None else x[0])  # noqa: E731
                raise ValueError(f"checkpoints[{i + 1}]: the LoRA adapters of a series must update the same tensors "
                                 f"with the same ranks (their stored factors are compared entry by entry), but tensor "
                                 f"{n0!r} is updated by {what(a.get(n0))} in {self.paths[i]!r} and by "
                                 f"{what(b.get(n0))} in {self.paths[i + 1]!r}")

    def adapter_tensor_done(self, tallies: list[Any], adapters: Sequence[Any], name: str, kind: str,
                            updates: Sequence[Any]) -> None:
        """Tensor ``name`` of every adapter measured: ``updates[i]`` is adapter ``i``'s update of it
        (``None``, the factors ``(L, R, s)`` or the dense ``ΔW``).  A tensor no adapter updates is
        left out."""
        if all(u is None for u in updates):
            return
        shape = tallies[0].pairs[name].compared_shape
        N = int(np.prod(shape)) if len(shape) else 1
        if self.kind == "runs":
            for i, u in enumerate(updates):
                if u is None:
                    self.masks[i] = (np.zeros(-(-N // 8), np.uint8), 0, N)
                elif isinstance(u, tuple):
                    self.masks[i] = _low_rank_mask_bits(u, MASK_FRACTION)
                else:
                    bits, size = _mask_bits(u, MASK_FRACTION)
                    self.masks[i] = (bits, size, N)
            self._runs_tensor(name, kind)
            return
        prev = None
        same = []
        n_stored = 0
        for i, a in enumerate(adapters):
            stored = [a._tensor(k) for k in a.stored_keys(name)]
            if prev is not None:
                c = sum(bit_identical(x, y) for x, y in zip(prev, stored))
                same.append(c)
                self.pair_counts[i - 1] += (c, n_stored)
            n_stored = sum(int(t.numel()) for t in stored)
            prev = stored
        rec: dict[str, Any] = {"name": name, "kind": kind, "n_entries": n_stored, "n_update_entries": N,
                               "identical_shares": [c / n_stored if n_stored else 1.0 for c in same],
                               "identical_share": sum(same) / (n_stored * len(same)) if n_stored and same else 1.0}
        if len(adapters) >= 3:
            idx = sample_indices(name, N)
            vals = np.vstack([_sampled_entries(u, idx, shape) for u in updates])
            r2, ss_res, ss_tot, static = linearity_r2(self.steps, vals)
            self.r2.append(r2[~static])
            self.ss.append((ss_res, ss_tot, static))
            rec.update(_summary(r2, ss_res, ss_tot, static))
        self.tensors.append(rec)

    # ----------------------------------------------------------- common
    def tensor_done(self, tallies: list[Any], name: str, kind: str) -> None:
        """All checkpoints of tensor ``name`` measured: the series pass of this tensor, or the
        pairwise Jaccard of the runs' masks."""
        if self.kind == "series":
            self._series_tensor(tallies, name, kind)
        elif self.masks:
            self._runs_tensor(name, kind)

    def finish(self) -> dict[str, Any]:
        """``report.json``'s ``"dynamics"``."""
        from ..geometry import _jaccard, jaccard_baseline

        doc: dict[str, Any] = {"kind": self.kind, "checkpoints": self.paths}
        if self.adapters:
            doc["adapters"] = True
            self.notes.append(
                "LoRA adapters: only the base tensors some adapter updates are counted; "
                + ("the bit-identical share is over the stored adapter entries (lora_A, lora_B, DoRA magnitudes, "
                   "full tensors, lora_B.bias), the linearity over sampled entries of ΔW = s·B·A (each from a row of "
                   "B and a column of A)" if self.kind == "series" else
                   "the update masks are those of ΔW = s·B·A (exact threshold, row blocks of s·B·A)"))
        if self.kind == "runs":
            q = MASK_FRACTION
            doc["settings"] = {"mask_fraction": q,
                               "mask_rule": "per tensor the ⌈q·N⌉ entries of largest |ΔW| (ties at the threshold "
                                            "included, unchanged entries excluded); pooled: Σ|A∩B| / Σ|A∪B| over "
                                            "the tensors, baseline jaccard_baseline of the pooled densities"}
            pairs = []
            N = self.jac_entries
            for (i, j), (inter, na, nb) in zip(self.pairs, self.jac.tolist()):
                pa, pb = (na / N, nb / N) if N else (0.0, 0.0)
                pairs.append({"a": i, "b": j, "path_a": self.paths[i], "path_b": self.paths[j],
                              "jaccard": _jaccard(inter, na, nb), "baseline": float(jaccard_baseline(pa, pb)),
                              "density_a": pa, "density_b": pb, "intersection": int(inter),
                              "union": int(na + nb - inter), "n_entries": int(N)})
            doc["pairs"] = pairs
            doc["tensors"] = self.tensors
            doc["notes"] = self.notes
            return doc
        ident, total = (int(x) for x in self.pair_counts.sum(axis=0)) if len(self.pair_counts) else (0, 0)
        doc["steps"] = self.steps
        doc["step_source"] = self.step_source
        doc["settings"] = {"sample_size": SERIES_SAMPLE, "seed": SERIES_SEED, "random_walks": RANDOM_WALKS}
        doc["change"] = {
            "identical_share": ident / total if total else None, "identical": ident, "n_entries": total,
            "pairs": [{"from": self.paths[k], "to": self.paths[k + 1], "from_step": self.steps[k],
                       "to_step": self.steps[k + 1], "identical": int(c), "n_entries": int(m),
                       "identical_share": c / m if m else None} for k, (c, m) in enumerate(self.pair_counts.tolist())],
            "reference": CHANGE_REFERENCE}
        if len(self.paths) >= 3 and self.ss:
            ss_res = np.concatenate([s[0] for s in self.ss])
            ss_tot = np.concatenate([s[1] for s in self.ss])
            static = np.concatenate([s[2] for s in self.ss])
            r2 = np.ones(static.size)
            r2[~static] = np.concatenate(self.r2)
            lin = _summary(r2, ss_res, ss_tot, static)
            lin["random_walk"] = random_walk_r2(self.steps)
            doc["linearity"] = lin
        else:
            doc["linearity"] = None
            self.notes.append("linearity needs 3 checkpoints or more (two points always lie on a line)")
        doc["tensors"] = self.tensors
        doc["notes"] = self.notes
        return doc


def plan(kind: str | None, paths: Sequence[str], adapters: bool = False) -> Dynamics | None:
    """The :class:`Dynamics` of a diff (``kind`` from ``diff(dynamics=...)``), ``None`` when off;
    ``adapters``: the checkpoints are LoRA adapter directories (measured alike, from what they
    store: module docstring)."""
    from .stream import _step_of

    n = len(paths)
    if kind == "auto":
        kind = "runs" if n >= 2 else None
    if kind is None:
        return None
    if n < 2:
        raise ValueError(f"dynamics={kind!r} needs at least 2 checkpoints, got {n}")
    d = Dynamics(kind, paths, [_step_of(p) for p in paths])
    d.adapters = bool(adapters)
    return d


def _check(kind: Any) -> None:
    if kind not in ("auto", None) + DYNAMICS:
        raise ValueError(f"dynamics must be 'auto', 'series', 'runs' or None, got {kind!r}")

