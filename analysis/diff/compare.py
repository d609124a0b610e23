"""Comparing RL checkpoints with their base: :func:`diff` (the ``report.json`` document) and :func:`to_frame`.

:func:`diff` checks its arguments, opens the checkpoints (or LoRA adapters), creates the call's
:class:`~analysis.diff.run.DiffRun`, runs the tensor pass (:mod:`analysis.diff.stream` or
:mod:`analysis.diff.lora`) and assembles the document: per checkpoint :func:`_finish` (totals,
per-layer shares, the head with :mod:`analysis.diff.head`, MoE aggregates with
:mod:`analysis.diff.moe`), then alignment and clustering (:mod:`analysis.diff.align`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device, run_metadata

from ..checkpoints import Checkpoint, TensorPair, open_checkpoint, pair_tensors, tokenizer_size
from .align import _alignment, _clustering
from .dynamics import _check as _check_dynamics
from .dynamics import plan as plan_dynamics
from .geometry_pass import finish as geometry_finish
from .head import N_TOP_TOKENS, _check_tokenizer, _open_tokenizer, _top_tokens, u_statistics
from .lora import _is_adapter, _open_adapters, adapter_notes, adapter_pass
from .moe import _moe_finish
from .run import DiffRun, _blas_threads, _Tally
from .settings import CASTS, CPU_BLAS_THREADS, ENERGY_FRACTIONS, LAYERS, SRANK_DELTAS, TOLERANCES, _key
from .stream import _Ops, _step_of, dense_pass

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["diff", "to_frame"]


def diff(base: str, checkpoints: Sequence[str], *, device: str = "auto", top_k: int = 64,
         layers: str = "all", tokenizer: str | None = None, full_spectrum: bool = False,
         progress: bool = True, cast: str | None = None, workers: int | None = None,
         allow_other_base: bool = False, geometry: bool = False, dynamics: str | None = "auto") -> dict:
    """Compare RL checkpoints with their base checkpoint; return the ``report.json`` document.

    Parameters
    ----------
    base : str
        Base (SFT) checkpoint directory (``config.json`` + ``model.safetensors`` or shards).
    checkpoints : sequence of str
        One or more RL checkpoint directories of the same architecture (e.g. several runs,
        or :func:`~analysis.diff.stream.series` of one run in step order), or one or more PEFT LoRA adapter
        directories trained on ``base`` (:mod:`analysis.diff.lora`; not mixed with checkpoints).
    device : "auto", "cpu", "cuda", "cuda:N"
        Where differences, reductions and SVDs run (``"auto"``: CUDA when available).
        Numbers agree across devices to float rounding.
    top_k : int
        Leading singular values computed for every 2-D weight other than the output head
        (whose full spectrum is always computed).  ``>= 2``.
    layers : "all" or "head"
        ``"head"``: SVD metrics for the output head only (norms and densities still cover
        every tensor, as the head's L2 share needs them).
    tokenizer : str, optional
        Tokenizer directory to decode the top ± tokens of ``u``; default: the first of the
        last checkpoint / base that holds tokenizer files (none: token ids only).
    full_spectrum : bool
        All singular values of every weight (adds ``effective_rank`` and ``srank``).
    progress : bool
        tqdm progress bar over tensors.
    cast : "bf16", "fp16", "fp32", optional
        Round both sides to this precision before the difference (diff at one precision);
        default: each checkpoint as stored.  Without it, a pair whose dtypes differ (bf16 base,
        fp32 RL) is flagged (``dtype_differs``) with its ``rounding_floor``: the ‖ΔW‖ that
        casting alone produces, ‖cast(W → coarser dtype) − W‖ with ``W`` the side stored at
        the finer precision (the base, ‖cast(W_base → other dtype) − W_base‖, when it is the
        finer one), per tensor and overall.
    workers : int, optional
        Threads computing the top-``top_k`` spectra of the block weights side by side on a CPU
        diff, each on one BLAS thread, while the main thread reads the next tensors
        (``>= 1``; 1: inline).  Default: ``torch.get_num_threads()`` (what ``rlvr-diff
        --threads N`` sets; the command passes ``N`` here).  The numbers do not depend on it.
    allow_other_base : bool
        Diff a LoRA adapter whose ``base_model_name_or_path`` names another base than ``base``
        (:func:`analysis.diff.lora.base_identity`; refused by default), recorded as
        ``"base_identity": "other (allowed)"``.
    geometry : bool
        Also measure where every weight matrix's update lies relative to the base
        (:func:`analysis.geometry.update_geometry` of ``(W_base, W_rl)`` per 2-D weight, the head
        included, a fused 3-D expert tensor per expert; computed while both tensors are in memory):
        the document gains ``"geometry"`` (:func:`analysis.diff.geometry_pass.finish`: per
        checkpoint every matrix's rows with their random baselines, the ``‖ΔW‖²``-weighted
        aggregate, per block, and the ULP histogram of ``ΔW`` in the base's dtype) and
        ``timings_s["geometry"]``.  A LoRA adapter's updates are measured from their factors
        (:func:`analysis.geometry.lora_update_geometry`; matrices it does not update are left out)
        and its intruder dimensions go to ``checkpoints[i]["adapter"]["intruders"]``
        (:func:`analysis.diff.geometry_pass.intruders`).  Off (default): the document has no
        ``"geometry"`` key and nothing else changes.
    dynamics : "auto", "series", "runs" or None
        How the checkpoints move relative to each other (:mod:`analysis.diff.dynamics`; the
        document gains ``"dynamics"``, ``settings["dynamics"]``; its time counts in ``timings_s["cross"]``).
        ``"series"``: ``checkpoints`` are one training run in step order (``rlvr-diff --series``):
        the share of bit-identical stored entries between consecutive checkpoints, per tensor and
        overall, and the linearity R² of a fixed-seed sample of entries against the step (steps
        from the names ``checkpoint-N`` / ``global_step_N``, else the position).  ``"runs"``:
        independent runs of one base: the Jaccard of their top-``q`` update masks per pair against
        the random baseline.  ``"auto"`` (default): ``"runs"`` with two or more checkpoints, off with
        one.  ``None``: off.  Both need two or more checkpoints; LoRA adapters are measured from what
        they store (:mod:`analysis.diff.dynamics`).

    Returns
    -------
    dict
        ``{"base", "device", "settings", "checkpoints": [...], "alignment", "clustering",
        "skipped_tensors", "timing_s", "timings_s", "run"}``; see ``docs/checkpoint_diff.md`` for every
        key.  ``timings_s``: seconds of this call's main thread per phase
        (:data:`~analysis.diff.settings.PHASES`).  ``run`` is :func:`rlvr_plumbing.runtime.run_metadata` of the arguments (package
        version, settings, seed, device, threads).  An undefined ratio (``s1/s2`` of an
        exactly rank-1 ``ΔW``) is ``None``.

    Raises
    ------
    ValueError
        Bad arguments; a directory that is not a checkpoint; different architectures or
        shapes; a missing tensor; a truncated or corrupt safetensors file; NaN/Inf in a
        weight.  Messages start with ``base`` / ``checkpoints[i]`` and name the file and
        tensor.

    Examples
    --------
    Two tiny checkpoints written with safetensors: the "RL" one adds a rank-1 update
    ``0.1·u vᵀ`` to the output head and leaves the block weight unchanged.

    >>> import pathlib, tempfile, torch
    >>> from safetensors.torch import save_file
    >>> g = torch.Generator().manual_seed(0)
    >>> base = {"lm_head.weight": torch.randn(32, 8, generator=g),
    ...         "model.layers.0.mlp.up_proj.weight": torch.randn(16, 8, generator=g)}
    >>> u, v = torch.randn(32, 1, generator=g), torch.randn(8, 1, generator=g)
    >>> rl = dict(base, **{"lm_head.weight": base["lm_head.weight"] + 0.1 * u @ v.T})
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name, tensors in (("base", base), ("rl", rl)):
    ...     (root / name).mkdir()
    ...     _ = (root / name / "config.json").write_text('{"model_type": "toy", "tie_word_embeddings": false}')
    ...     save_file(tensors, str(root / name / "model.safetensors"))
    >>> doc = diff(str(root / "base"), [str(root / "rl")], device="cpu", progress=False)
    >>> head = doc["checkpoints"][0]["output_head"]
    >>> head["name"], round(head["l2_share"], 6), round(head["rank1_fraction"], 6), head["s1_s2"] > 1e5
    ('lm_head.weight', 1.0, 1.0, True)
    >>> doc["checkpoints"][0]["layers"][1]["note"]
    'unchanged (ΔW = 0): SVD metrics undefined'
    >>> sorted(doc["run"])
    ['device', 'package_version', 'seed', 'settings', 'threads']
    """

    t0 = time.perf_counter()
    workers = checks.integer("workers", torch.get_num_threads() if workers is None else workers, low=1)
    paths, top_k = _check_args(base, checkpoints, top_k, layers, tokenizer, full_spectrum, progress, cast)
    if not isinstance(allow_other_base, bool):
        raise ValueError(f"allow_other_base must be True or False, got {allow_other_base!r}")
    if not isinstance(geometry, bool):
        raise ValueError(f"geometry must be True or False, got {geometry!r}")
    _check_dynamics(dynamics)
    dyn = plan_dynamics(dynamics, paths, any(_is_adapter(p) for p in paths))
    dev = resolve_device(device)
    run = DiffRun(dev, _Ops(dev, cast), workers=workers, top_k=top_k, layers=layers,
                  full_spectrum=full_spectrum, cast=cast, vectors=len(paths) >= 2, geometry=geometry,
                  dynamics=dyn)
    b = open_checkpoint(base, "base")
    adapters = _open_adapters(b, paths, cast, allow_other_base, base)   # LoRA adapter directories (all or none)
    cks = adapters or [open_checkpoint(p, f"checkpoints[{i}]") for i, p in enumerate(paths)]
    all_pairs, skipped = _pairs(b, cks, bool(adapters))
    tok, tok_dir, tok_note = _open_tokenizer(tokenizer, [paths[-1], base])
    tallies = [_Tally(ck, pairs) for ck, pairs in zip(cks, all_pairs)]
    tok_note, tok_known = _tokenizer_fits(tok, tok_dir, tok_note, b, tallies)
    names = [p.name for p in all_pairs[0]]
    cross = _tensor_pass(run, tallies, b, names, adapters, progress)

    tfin = time.perf_counter()
    n = len(tallies)
    doc: dict[str, Any] = {
        "base": str(base),
        "device": _device_name(dev),
        "settings": {"top_k": int(top_k), "layers": layers, "full_spectrum": bool(full_spectrum),
                     "tolerances": list(TOLERANCES), "srank_deltas": list(SRANK_DELTAS),
                     "energy_fractions": list(ENERGY_FRACTIONS),
                     "tokenizer": None if tok_dir is None else str(tok_dir), "tokenizer_note": tok_note,
                     "cast": cast},
        "base_dtype": b.dtype,
        "architecture": {"model_type": b.model_type, "num_layers": b.num_layers,
                         "output_head": b.head, "tied_embeddings": b.tied,
                         "n_tensors": len(names)},
        "checkpoints": [_finish(r, b, tok, cast, tok_known) for r in tallies],
        "alignment": _alignment(tallies, b, paths) if n >= 2 else None,
        "clustering": _clustering(tallies, cross, b, paths) if cross is not None else None,
        "skipped_tensors": skipped,
    }
    if adapters:
        adapter_notes(doc, adapters, tallies if geometry else None)
        doc["settings"]["allow_other_base"] = allow_other_base
    if geometry:
        doc["settings"]["geometry"] = True
        doc["geometry"] = geometry_finish(tallies, b.num_layers)
    if dyn is not None:
        doc["settings"]["dynamics"] = dyn.kind
        doc["dynamics"] = dyn.finish()
    run.timings["finish"] += time.perf_counter() - tfin
    doc["timings_s"] = dict(run.timings)
    doc["timing_s"] = time.perf_counter() - t0
    doc["run"] = run_metadata({"base": str(base), "checkpoints": paths, "device": str(device), "top_k": top_k,
                               "layers": layers, "tokenizer": None if tokenizer is None else str(tokenizer),
                               "full_spectrum": bool(full_spectrum), "cast": cast,
                               "allow_other_base": allow_other_base, **({"geometry": True} if geometry else {}),
                               **({"dynamics": dyn.kind} if dyn is not None else {})},
                              seed=None,
                              device=doc["device"])
    return doc


def _pairs(b: Checkpoint, cks: list[Any], adapters: bool) -> tuple[list[list[TensorPair]], list[str]]:
    """The tensor pairs of every checkpoint with the base (of the base with itself for adapters) and
    the tensors skipped; refuses a base without an output head."""
    all_pairs = []
    skipped: list[str] = []
    for ck in cks:
        pairs, skipped = pair_tensors(b, b if adapters else ck)
        all_pairs.append(pairs)
    if b.head is None:
        raise ValueError(f"base: no output head found in {str(b.path)!r} (looked for lm_head.weight, "
                         f"embed_out.weight, output.weight, or a tied input embedding)")
    return all_pairs, skipped


def _tokenizer_fits(tok: Any, tok_dir: Any, note: str | None, b: Checkpoint,
                    tallies: list[_Tally]) -> tuple[str | None, int | None]:
    """``(tokenizer note, ids it knows)``: another vocabulary is refused before any work, padding
    rows are noted (:func:`analysis.diff.head._check_tokenizer`)."""
    if tok is None:
        return note, None
    hrows = [r.pairs[b.head] for r in tallies]
    rows_note = _check_tokenizer(tok, tok_dir, b.head, min(p.rows for p in hrows),
                                 max(max(p.base_rows, p.other_rows) for p in hrows))
    return (rows_note if note is None else note), tokenizer_size(tok)


def _tensor_pass(run: DiffRun, tallies: list[_Tally], b: Checkpoint, names: list[str], adapters: list[Any],
                 progress: bool) -> dict[str, Any] | None:
    """Measure every tensor of every checkpoint (adapters: :func:`analysis.diff.lora.adapter_pass`,
    full checkpoints: :func:`analysis.diff.stream.dense_pass`) with the run's BLAS threads,
    background workers and progress bar; the pairwise Gram matrices per tensor (two or more
    checkpoints, else ``None``)."""
    n = len(tallies)
    cross = {nm: (np.zeros((n, n)), [0] * n) for nm in names} if n >= 2 else None
    with contextlib.ExitStack() as stack:
        if progress:
            from tqdm.auto import tqdm
            run.bar = stack.enter_context(tqdm(total=len(names) * n, desc="ΔW", unit="tensor"))
        if run.device.type == "cpu":
            stack.enter_context(_blas_threads(CPU_BLAS_THREADS))
        stack.enter_context(run.spectra_workers())
        if adapters:
            adapter_pass(run, tallies, adapters, b, names, cross)
        else:
            dense_pass(run, tallies, b, names, cross)
    run.bar = None
    return cross


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{idx} ({torch.cuda.get_device_name(idx)})"
    return "cpu"


def _check_args(base: Any, checkpoints: Any, top_k: Any, layers: Any, tokenizer: Any,
                full_spectrum: Any, progress: Any, cast: Any = None) -> tuple[list[str], int]:
    """The checkpoint paths and ``top_k`` (numbers and choices: :mod:`rlvr_plumbing.checks`)."""
    if not isinstance(base, (str, os.PathLike)):
        raise ValueError(f"base must be a checkpoint directory path (str), got {base!r}")
    if isinstance(checkpoints, (str, os.PathLike)) or not isinstance(checkpoints, Sequence):
        raise ValueError(f"checkpoints must be a non-empty sequence of checkpoint directory paths, "
                         f"got {checkpoints!r}")
    cks = list(checkpoints)
    if not cks or not all(isinstance(c, (str, os.PathLike)) for c in cks):
        raise ValueError(f"checkpoints must be a non-empty sequence of checkpoint directory paths, "
                         f"got {checkpoints!r}")
    top_k = checks.integer("top_k", top_k, low=2)
    checks.choice("layers", layers, LAYERS)
    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        raise ValueError(f"tokenizer must be None or a tokenizer directory path, got {tokenizer!r}")
    checks.choice("full_spectrum", full_spectrum, (True, False))
    checks.choice("progress", progress, (True, False))
    if cast is not None:
        checks.choice("cast", cast, CASTS)
    return [str(c) for c in cks], top_k


def _finish(r: _Tally, b: Checkpoint, tok: Any, cast: str | None = None, tok_known: int | None = None) -> dict[str, Any]:
    """The per-checkpoint entry of the document from the accumulators."""
    total = r.l2
    for rec in r.records:
        rec["l2_share"] = (rec["l2"] / total) ** 2 if total > 0 else 0.0
    if total == 0.0:
        r.notes.append("the checkpoint is identical to the base (ΔW = 0 everywhere)")
    recs = {rec["name"]: rec for rec in r.records}
    head_rec = dict(recs[b.head])
    head: dict[str, Any] = {k: head_rec.get(k) for k in
                            ("name", "shape", "rows_compared", "l2", "l2_share", "relative_l2", "density",
                             "s1", "s2", "s1_s2", "rank1_fraction", "stable_rank", "effective_rank")}
    head["tied"] = b.tied
    head["srank"] = head_rec.get("srank")
    head["singular_values"] = head_rec.get("singular_values", [])
    if b.head in r.vectors:
        u, v = r.vectors[b.head]
        head.update(u_statistics(u))
        head["top_tokens"] = _top_tokens(u.astype(np.float64), tok, N_TOP_TOKENS, tok_known)
    else:
        head.update({"u_negative_fraction": None, "u_majority_sign_fraction": None, "u_majority_sign": None,
                     "u_largest_entries_side": None, "u_minority_energy_share": None, "u_orientation": None,
                     "u_energy_share": None, "u_vocab_fraction_for_half_energy": None, "u_quantiles": [],
                     "top_tokens": []})
    vocab_note = None
    hp = r.pairs[b.head]
    resized = [p for p in r.pairs.values() if p.vocab_resized]
    if resized:
        vocab_note = (f"vocabulary resized: base has {hp.base_rows} rows, this checkpoint {hp.other_rows}; "
                      f"the first {hp.rows} rows (the common tokens) of "
                      f"{', '.join(p.name for p in resized)} are compared, the other "
                      f"{abs(hp.base_rows - hp.other_rows)} rows are ignored")
    per_layer = []
    L = b.num_layers
    for i in range(L):
        lr = [rec for rec in r.records if rec["layer"] == i]
        ss = math.hypot(*(rec["l2"] for rec in lr))
        bs = math.hypot(*(rec["base_l2"] for rec in lr))
        s12 = [rec["s1_s2"] for rec in lr if rec["s1_s2"] is not None]
        r1 = [rec["rank1_fraction"] for rec in lr if rec["rank1_fraction"] is not None]
        per_layer.append({"layer": i, "l2": ss, "l2_share": (ss / total) ** 2 if total > 0 else 0.0,
                          "relative_l2": ss / bs if bs > 0 else None,
                          "s1_s2_mean": float(np.mean(s12)) if s12 else None,
                          "rank1_fraction_mean": float(np.mean(r1)) if r1 else None,
                          "n_matrices": len(s12)})
    inner = [rec for rec in r.records if rec["kind"] == "block"]
    inner_s12 = [rec["s1_s2"] for rec in inner if rec["s1_s2"] is not None]
    inner_r1 = [rec["rank1_fraction"] for rec in inner if rec["rank1_fraction"] is not None]
    n_inf = sum(1 for rec in inner if rec.get("rank1_fraction") is not None and rec["s1_s2"] is None)
    groups = {}
    for kind in ("head", "embedding", "block", "other"):
        groups[kind] = sum(rec["l2_share"] for rec in r.records if rec["kind"] == kind)
    floor = None
    if r.dtype_differs and cast is None:
        floor = {"l2": r.floor, "n_tensors": r.floor_tensors,
                 "ratio_to_global_l2": r.floor / total if total > 0 else None,
                 "rule": "‖cast(W → coarser dtype) − W‖, W the side stored at the finer precision, over the "
                         "tensors whose dtypes differ"}
        r.notes.append(f"dtypes differ: base {b.dtype}, this checkpoint {r.ck.dtype}; casting alone produces "
                       f"‖ΔW‖ = {r.floor:.4g} (the rounding floor) against the measured {total:.4g}; "
                       f"--cast bf16|fp16|fp32 diffs both at one precision")
    if cast is not None:
        r.notes.append(f"both sides rounded to {cast} before the difference (--cast)")
    out = {
        "path": str(r.ck.path),
        "step": _step_of(str(r.ck.path)),
        "dtype": r.ck.dtype,
        "dtype_differs": r.dtype_differs,
        "rounding_floor": floor,
        "global_l2": total,
        "base_l2": r.base_l2,
        "relative_l2": total / r.base_l2 if r.base_l2 > 0 else None,
        "density": {_key(t): a / r.count for t, a in zip(TOLERANCES, r.above)},
        "n_entries": r.count,
        "output_head": head,
        "layers": r.records,
        "per_layer": per_layer,
        "l2_share_by_kind": groups,
        "inner_s1_s2_mean": float(np.mean(inner_s12)) if inner_s12 else None,
        "inner_rank1_fraction_mean": float(np.mean(inner_r1)) if inner_r1 else None,
        "inner_l2_share_mean": float(np.mean([pl["l2_share"] for pl in per_layer])) if per_layer else None,
        # depth-normalised Inner: L · mean block share = the blocks' total share of ‖ΔW‖², which is also
        # the mean block share relative to an even split 1/L (compares across depths; FADE: L = 28)
        "inner_l2_share_x_layers": float(sum(pl["l2_share"] for pl in per_layer)) if per_layer else None,
        "inner_n_matrices": len(inner_s12),
        "vocab_note": vocab_note,
        "notes": r.notes + ([f"{n_inf} block matrices have σ2 = 0 (s1/s2 infinite), left out of "
                             f"inner_s1_s2_mean"] if n_inf else []),
    }
    _moe_finish(out, r.ck.config)
    return out


def to_frame(doc: dict) -> pd.DataFrame:
    """The per-tensor records of a :func:`diff` document as one long pandas DataFrame.

    One row per (checkpoint, tensor): ``checkpoint`` (path), ``step``, ``name``, ``kind``,
    ``layer``, ``l2``, ``relative_l2``, ``l2_share``, ``s1``, ``s2``, ``s1_s2``,
    ``rank1_fraction``, ``stable_rank`` and ``density_<tol>`` columns.
    """
    import pandas as pd

    rows = []
    for c in doc["checkpoints"]:
        for r in c["layers"]:
            row = {"checkpoint": c["path"], "step": c.get("step")}
            row.update({k: r.get(k) for k in ("name", "kind", "layer", "l2", "relative_l2", "l2_share", "s1", "s2",
                                               "s1_s2", "rank1_fraction", "stable_rank")})
            row.update({f"density_{k}": v for k, v in r["density"].items()})
            rows.append(row)
    return pd.DataFrame(rows)

