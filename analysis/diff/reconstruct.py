"""Checkpoints that test the claims about ΔW: rank-k and extrapolated reconstructions (issue 29, item 4).

Two writers, each producing an ordinary Hugging Face checkpoint directory (safetensors shards,
``config.json``, generation config, tokenizer files) that ``transformers`` loads and
``rlvr-train eval`` evaluates:

* :func:`reconstruct` (``rlvr-diff reconstruct BASE RL --rank k --out DIR [--rescale]``): every
  weight matrix becomes ``W_base + P_k(ΔW)``, ``ΔW = W_rl − W_base`` and ``P_k`` its best rank-k
  approximation (the top-k singular triplets, :func:`analysis.spectra.spectrum` with
  ``n_vectors=k``: the project's one SVD); with ``rescale=True`` the rank-k part is multiplied by
  ``‖ΔW‖_F/‖P_k(ΔW)‖_F`` so that it carries the whole update's norm.  "The rank-1 part of ΔW
  recovers > 99 % of the gain" (AlphaRL, arXiv 2510.00553); "restoring the top 20 % of
  directions recovers 70-80 % of OOD accuracy" (RL Is Neither a Panacea Nor a Mirage,
  arXiv 2508.16546).
* :func:`extrapolate` (``rlvr-diff reconstruct --series CK1 CK2 ... --extrapolate STEP --out
  DIR``): every floating-point entry becomes the value at ``STEP`` of its least-squares line in the
  training step over the series: ``W(STEP) = Σ_i c_i W_i`` with
  ``c_i = 1/n + (t_i − t̄)(STEP − t̄)/Σ_j (t_j − t̄)²`` (:func:`line_weights`), exact for a series
  that is linear in the step (RLVR-Linearity, arXiv 2601.04537; AlphaRL's extrapolation).

What is done with each tensor (``reconstruct``):

==============================  ===========================================================
tensor                          written value
==============================  ===========================================================
2-D floating-point (every       ``W_base + P_k(ΔW)`` (rescaled with ``rescale``); embeddings and
linear weight, embeddings,      the output head included; a fused projection (``qkv_proj``,
output head)                    GPT-2's ``c_attn``) is one matrix, as stored
3-D floating-point (fused MoE   one matrix per slice of the first axis (per expert)
experts ``E × a × b``)
anything else floating-point    ``others="rl"`` (default): the RL value, so that the checkpoint
(norm weights, biases, scalars) differs from RL only in its matrices; ``others="base"``: the base
                                value (the reconstruction then holds no update outside the
                                matrices)
not floating-point (buffers)    copied from RL
==============================  ===========================================================

``k ≥ min(m, n)`` of a matrix is that matrix's whole ``ΔW`` (no SVD): ``rank="full"`` gives RL back
to the dtype's rounding.  A ``ΔW`` that is exactly zero stays zero.  Arithmetic is float64; the
result is rounded once to the RL tensor's stored dtype (bfloat16 stays bfloat16).

The RL side may be a PEFT LoRA adapter directory (:mod:`analysis.diff.lora`, the same reader as
the diff): the rank-k part of ``ΔW = s·B·A`` comes from its factors
(:func:`analysis.diff.lora.low_rank_spectrum`, never formed whole), a DoRA update or a tensor the
adapter stores whole (``modules_to_save``) is treated densely, a ``lora_bias`` update and trained
biases are "other" tensors, and every tensor the adapter does not touch is the base's.  The
weights are then stored in the base's dtype and ``config.json``, the generation config and the
tokenizer come from the base.

Streaming and atomicity: the safetensors headers are planned from the input headers (names,
shapes, dtypes are known before any value), then each shard is written sequentially, one tensor
computed and appended at a time, so memory stays near one tensor (the float64 ``ΔW`` and the
stored base and output tensors).  Shards follow ``save_pretrained``'s layout (``model.safetensors``,
or ``model-0000k-of-0000n.safetensors`` with ``model.safetensors.index.json`` above
``max_shard_size``).  Everything is written into a temporary folder beside ``out`` and renamed at
the end (:func:`rlvr_plumbing.io.atomic_dir`); after a failure nothing is left under ``out``.  An
existing non-empty ``out`` is refused unless ``overwrite``, and so is, even with it, an ``out``
that is or holds one of the inputs.  ``reconstruct.json`` in ``out`` records what was done (inputs,
settings, per-matrix ``‖ΔW‖``, ``‖P_k‖``, the energy share ``‖P_k‖²/‖ΔW‖²`` and the scale).

Copied from RL (the last checkpoint of a series; the base for an adapter), where present:
:data:`COPIED_FILES` (``config.json``, ``generation_config.json``, the tokenizer files and the
tiny trainer's ``task.json``, so that ``rlvr-train eval DIR`` knows the task).  Training state
(``trainer_state.*``, optimizer files) is not copied: it does not describe the reconstruction.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr_plumbing import checks
from rlvr_plumbing.io import atomic_dir, check_out, write_json

from .. import spectra
from ..checkpoints import Checkpoint, open_checkpoint, pair_tensors, resolve_checkpoint_dir
from .settings import DEFAULT_MAX_SHARD_SIZE, OTHERS, RANK_FULL  # in .settings: `rlvr-diff --help` needs no torch

__all__ = ["reconstruct", "extrapolate", "line_weights", "rank_k_part", "parse_size", "RANK_FULL", "OTHERS",
           "COPIED_FILES", "DEFAULT_MAX_SHARD_SIZE", "RECORD_FILE"]

#: files copied into the reconstruction from the RL directory (the last of a series; the base for an adapter)
COPIED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt",
                "tokenizer.model", "spiece.model", "chat_template.jinja", "chat_template.json", "task.json")
#: the provenance record written into the output directory
RECORD_FILE = "reconstruct.json"

_ST_TORCH = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
             "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64,
             "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
_TORCH_ST = {v: k for k, v in _ST_TORCH.items()}
_INDEX = "model.safetensors.index.json"
_BLOCK = 1 << 22                 # float64 entries of one row block of the output (32 MiB)
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


# ------------------------------------------------------------------ helpers
def parse_size(text: Any, name: str = "max_shard_size") -> int:
    """A byte count from ``5GB``, ``500MB``, ``64KiB`` or a plain integer (bytes); at least 1.

    >>> parse_size("5GB"), parse_size("64KiB"), parse_size(1000)
    (5000000000, 65536, 1000)
    """
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        return checks.integer(name, text, low=1)
    m = _SIZE_RE.match(str(text))
    unit = (m.group(2) or "").lower() if m else None
    if m is None or unit not in _UNITS or float(m.group(1)) * _UNITS[unit] < 1:
        raise ValueError(f"{name} must be a size such as 5GB, 500MB, 64KiB or a number of bytes >= 1, got {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def _check_rank(rank: Any) -> int | None:
    """``rank`` as an int >= 1, or ``None`` for :data:`RANK_FULL`."""
    if isinstance(rank, str):
        if rank.strip().lower() == RANK_FULL:
            return None
        try:
            rank = int(rank)
        except ValueError:
            raise ValueError(f"rank must be an integer >= 1 or {RANK_FULL!r}, got {rank!r}") from None
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1 or {RANK_FULL!r}, got {rank!r}")
    return int(rank)


def line_weights(steps: Sequence[float], at: float) -> np.ndarray:
    """Coefficients ``c`` with ``Σ_i c_i y_i`` = the least-squares line through ``(steps_i, y_i)``
    evaluated at ``at``: ``c_i = 1/n + (t_i − t̄)(at − t̄)/Σ_j (t_j − t̄)²`` (ordinary least
    squares; RLVR-Linearity's per-entry fit in the step).  Needs two distinct steps.

    >>> line_weights([0, 1], 2)            # y(2) = 2·y1 − y0
    array([-1.,  2.])
    >>> bool(np.isclose(line_weights([10, 20, 40], 80) @ (3.0 + 0.5 * np.array([10, 20, 40])), 3.0 + 0.5 * 80))
    True
    """
    t = checks.array("steps", steps, ndim=1)
    at = checks.number("extrapolate", at)
    if t.size < 2:
        raise ValueError(f"steps must hold at least 2 steps (one per checkpoint of the series), got {t.size}")
    tbar = float(t.mean())
    sxx = float(((t - tbar) ** 2).sum())
    if not sxx > 0:
        raise ValueError(f"steps must hold at least 2 distinct values for a line in the step, got {t.tolist()}")
    return 1.0 / t.size + (t - tbar) * (at - tbar) / sxx


def rank_k_part(D: torch.Tensor, k: int | None, *, rescale: bool = False,
                device: str | torch.device = "auto") -> tuple[torch.Tensor, dict[str, Any]]:
    """The rank-``k`` part ``P_k`` of a float64 matrix ``D`` (``U_k diag(s_k) V_kᵀ`` from
    :func:`analysis.spectra.spectrum` ``(D, k, n_vectors=k)``), float64 on the CPU, and a record
    ``{"k", "delta_l2", "part_l2", "energy", "scale"}``.

    ``k`` ``None`` or ``≥ min(D.shape)``: ``D`` itself (no SVD).  ``rescale``: ``P_k`` times
    ``‖D‖_F/‖P_k‖_F`` (``scale``).  The zero matrix gives zero.

    >>> P, rec = rank_k_part(torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)), 1)
    >>> P.diagonal().tolist(), rec["energy"]
    ([3.0, 0.0, 0.0], 0.6428571428571429)
    >>> round(rank_k_part(torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)), 1, rescale=True)[0][0, 0].item(), 9)
    3.741657387
    """
    d = min(D.shape)
    kk = d if k is None else min(int(k), d)
    fro = float(torch.linalg.vector_norm(D))
    rec: dict[str, Any] = {"k": kk, "delta_l2": fro}
    if fro == 0.0:
        rec.update(part_l2=0.0, energy=None, scale=1.0)
        return D, rec
    if kk >= d:
        rec.update(part_l2=fro, energy=1.0, scale=1.0)
        return D, rec
    spec = spectra.spectrum(D, kk, n_vectors=kk, device=device)
    part = float(np.linalg.norm(spec.s))
    scale = fro / part if rescale and part > 0 else 1.0
    rec.update(part_l2=part, energy=(part / fro) ** 2, scale=scale)
    U = torch.from_numpy(np.ascontiguousarray(spec.u * (spec.s * scale)))
    V = torch.tensor(spec.v)      # a copy: the spectrum's arrays are read-only
    return U @ V.T, rec


def _low_rank_part(L: np.ndarray, R: np.ndarray, s: float, k: int | None, rescale: bool,
                   shape: tuple[int, int]) -> tuple[torch.Tensor, dict[str, Any]]:
    """:func:`rank_k_part` of ``ΔW = s·L·R`` from its factors (a LoRA module)."""
    from .lora import low_rank_spectrum

    r = L.shape[1]
    d = min(shape)
    kk = d if k is None else min(int(k), d)
    ke = min(kk, r)
    spec = low_rank_spectrum(L, R, s, k=ke, n_vectors=ke)
    fro = float(spec.fro_norm)
    rec: dict[str, Any] = {"k": kk, "delta_l2": fro, "from_factors": True}
    if fro == 0.0 or spec.u is None:
        rec.update(part_l2=0.0, energy=None, scale=1.0)
        return torch.zeros(shape, dtype=torch.float64), rec
    part = float(np.linalg.norm(spec.s))
    scale = fro / part if rescale and part > 0 else 1.0
    rec.update(part_l2=part, energy=min(1.0, (part / fro) ** 2), scale=scale)
    U = torch.from_numpy(np.ascontiguousarray(spec.u * (spec.s * scale)))
    V = torch.tensor(spec.v)
    return U @ V.T, rec


def _add_into(base: torch.Tensor, P: torch.Tensor, out: torch.Tensor) -> None:
    """``out = cast(base (float64) + P)``, in row blocks (no float64 copy of the whole base)."""
    rows = base.shape[0]
    step = max(1, _BLOCK // max(1, base[0].numel() if base.ndim else 1))
    for i in range(0, rows, step):
        out[i:i + step] = (base[i:i + step].to(torch.float64) + P[i:i + step]).to(out.dtype)


# ------------------------------------------------------- streamed writing
@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: str                       # safetensors dtype string of the written tensor
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape)) * torch.empty((), dtype=_ST_TORCH[self.dtype]).element_size()


def _plan(entries: list[_Entry], max_bytes: int) -> list[tuple[str, list[_Entry]]]:
    """Shards as ``save_pretrained`` names them: entries in order, a new shard when the next tensor
    would push the current one over ``max_bytes`` (a larger tensor gets a shard of its own)."""
    shards: list[list[_Entry]] = [[]]
    size = 0
    for e in entries:
        if shards[-1] and size + e.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    n = len(shards)
    if n == 1:
        return [("model.safetensors", shards[0])]
    return [(f"model-{i + 1:05d}-of-{n:05d}.safetensors", s) for i, s in enumerate(shards)]


def _write_shards(folder: Path, plan: list[tuple[str, list[_Entry]]],
                  produce: Callable[[str], torch.Tensor], tick: Callable[[], None]) -> None:
    """Write each shard of ``plan`` sequentially: header first (planned from names, dtypes and
    shapes), then ``produce(name)``'s bytes one tensor at a time, checked against the plan."""
    weight_map: dict[str, str] = {}
    total = 0
    for fname, entries in plan:
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        off = 0
        for e in entries:
            header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [off, off + e.nbytes]}
            off += e.nbytes
            weight_map[e.name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)
        with open(folder / fname, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)))
            fh.write(raw)
            for e in entries:
                t = produce(e.name)
                if _TORCH_ST.get(t.dtype) != e.dtype or tuple(t.shape) != e.shape:  # pragma: no cover - internal
                    raise RuntimeError(f"tensor {e.name!r}: produced {t.dtype} {tuple(t.shape)}, planned "
                                       f"{e.dtype} {e.shape}")
                buf = t.contiguous().reshape(-1).view(torch.uint8).numpy()
                fh.write(memoryview(buf))
                del t, buf
                tick()
        total += off
    if len(plan) > 1:
        write_json(folder / _INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})


def _copy_files(src: Path, dst: Path) -> list[str]:
    done = []
    for f in COPIED_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, dst / f)
            done.append(f)
    return done


def _check_out_dir(out: Any, overwrite: bool, inputs: dict[str, Any]) -> Path:
    """``out`` before any work: :func:`rlvr_plumbing.io.check_out` (an existing non-empty directory
    only with ``overwrite``) and never a directory that is or holds an input."""
    o = check_out(out, overwrite=overwrite)
    r = Path(os.path.abspath(o)).resolve()
    for what, p in inputs.items():
        q = Path(p).resolve()
        if q == r or r in q.parents:
            raise ValueError(f"out: {str(out)!r} holds the input {what}; writing there would replace it: "
                             "choose another directory")
    return o


def _progress(total: int, progress: bool, desc: str) -> tuple[Callable[[], None], Callable[[], None]]:
    if not progress:
        return (lambda: None), (lambda: None)
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="tensor", leave=False)
    return (lambda: bar.update(1)), bar.close


def _same_shapes(ref: Checkpoint, other: Checkpoint) -> None:
    """``other`` has exactly the tensors of ``ref`` (names, shapes), architecture checked by
    :func:`analysis.checkpoints.pair_tensors`; a resized vocabulary is refused too."""
    pair_tensors(ref, other)
    for n, t in ref.tensors.items():
        o = other.tensors.get(n)
        if o is None:
            raise ValueError(f"{other.label}: tensor {n!r} (in file {str(t.file)!r}) is missing from "
                             f"{str(other.path)!r}")
        if o.shape != t.shape:
            raise ValueError(f"{other.label}: tensor {n!r} has shape {tuple(o.shape)} in file {str(o.file)!r} but "
                             f"{tuple(t.shape)} in {ref.label} file {str(t.file)!r}: a reconstruction needs "
                             f"equal shapes")
    extra = sorted(set(other.tensors) - set(ref.tensors))
    if extra:
        raise ValueError(f"{other.label}: tensor {extra[0]!r} in file {str(other.tensors[extra[0]].file)!r} is "
                         f"not in {ref.label} {str(ref.path)!r}")


def _finite(x: torch.Tensor, label: str, name: str) -> None:
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{label}: tensor {name!r} holds non-finite values (NaN or Inf)")


# ------------------------------------------------------------ reconstruct
def reconstruct(base: str | os.PathLike, rl: str | os.PathLike, out: str | os.PathLike, *, rank: int | str,
                rescale: bool = False, others: str = "rl", overwrite: bool = False,
                device: str | torch.device = "auto", max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
                allow_other_base: bool = False, progress: bool = False) -> dict[str, Any]:
    """Write ``W_base + P_k(W_rl − W_base)`` for every weight matrix into the checkpoint ``out``.

    Parameters
    ----------
    base, rl : checkpoint directories (a verl ``global_step_N`` resolves as in the diff); ``rl``
        may be a PEFT LoRA adapter directory (module docstring).
    out : the new checkpoint directory (written atomically).
    rank : int >= 1 or ``"full"``; per matrix ``min(rank, min(m, n))``.
    rescale : the rank-k part rescaled to ``‖ΔW‖_F`` per matrix.
    others : ``"rl"`` or ``"base"``: the source of every floating-point tensor that is not a
        matrix (norms, biases).
    overwrite : replace a non-empty ``out``.
    device : where the SVDs run (:func:`analysis.spectra.spectrum`).
    max_shard_size : bytes per safetensors shard (int, or ``"5GB"``, ``"500MB"``...).
    allow_other_base : an adapter whose ``base_model_name_or_path`` names another base is read
        anyway (:func:`analysis.diff.lora.base_identity`).

    Returns the record written to ``out/reconstruct.json``.  Raises ``ValueError`` naming the
    argument (``rank``, ``others``, ``max_shard_size``, ``out``, ``base``, ``rl``) and the tensor.
    """
    k = _check_rank(rank)
    checks.choice("others", others, OTHERS)
    checks.choice("rescale", rescale, (True, False))
    max_bytes = parse_size(max_shard_size)
    _check_out_dir(out, overwrite, {f"BASE {str(base)!r}": base, f"RL {str(rl)!r}": rl})
    b = open_checkpoint(resolve_checkpoint_dir(base, "base"), "base")
    from .lora import _is_adapter, open_adapter

    adapter = None
    if _is_adapter(str(rl)):
        adapter = open_adapter(rl, b, "rl", allow_other_base=allow_other_base, base_arg=base)
        src: Checkpoint = b
    else:
        src = open_checkpoint(resolve_checkpoint_dir(rl, "rl"), "rl")
        _same_shapes(b, src)

    entries = [_Entry(n, t.dtype, tuple(t.shape)) for n, t in src.tensors.items()]
    records: list[dict[str, Any]] = []
    counts = {"matrices": 0, "other_from_" + others: 0, "copied": 0, "unchanged": 0}

    def produce(name: str) -> torch.Tensor:
        info = src.info(name)
        if not info.is_float:
            counts["copied"] += 1
            return src.read(name)
        W0 = b.read(name)
        _finite(W0, "base", name)
        dtype = _ST_TORCH[info.dtype]
        if adapter is not None:
            return _adapter_tensor(adapter, name, W0, dtype, k, rescale, others, device, records, counts)
        if W0.ndim not in (2, 3):
            counts["other_from_" + others] += 1
            t = src.read(name) if others == "rl" else W0.to(dtype)
            _finite(t, "rl", name)
            return t
        X = src.read(name)
        _finite(X, "rl", name)
        D = X.to(torch.float64)
        del X
        D.sub_(W0.to(torch.float64))
        out_t = torch.empty(W0.shape, dtype=dtype)
        mats = [(None, D, W0, out_t)] if W0.ndim == 2 else [(j, D[j], W0[j], out_t[j]) for j in range(W0.shape[0])]
        for j, Dj, Bj, Oj in mats:
            P, rec = rank_k_part(Dj, k, rescale=rescale, device=device)
            _add_into(Bj, P, Oj)
            del P
            rec.update(name=name, shape=list(Dj.shape), **({} if j is None else {"expert": j}))
            records.append(rec)
            counts["matrices"] += 1
        return out_t

    plan = _plan(entries, max_bytes)
    tick, close = _progress(len(entries), progress, "reconstruct")
    doc = {"kind": "rank_k", "base": str(b.path), "rl": str(adapter.path if adapter is not None else src.path),
           "rl_is_adapter": adapter is not None, "rank": RANK_FULL if k is None else k, "rescale": bool(rescale),
           "others": others, "dtype": src.dtype, "shards": [f for f, _ in plan]}

    return _write_checkpoint(out, plan, produce, (tick, close), Path(src.path), doc,
                             lambda: {"counts": counts, "matrices": records, "energy_total": _energy(records)})


def _write_checkpoint(out: Path, plan: Any, produce: Callable, progress: tuple[Callable, Callable], files_from: Path,
                      doc: dict[str, Any], extra: Callable[[], dict[str, Any]] = dict) -> dict[str, Any]:
    """Write the planned shards, the files copied from ``files_from`` and the record ``doc``
    (with ``extra()``, known once the tensors are written) into ``out``, atomically."""
    tick, close = progress

    def build(tmp: Path) -> None:
        _write_shards(tmp, plan, produce, tick)
        doc["copied_files"] = _copy_files(files_from, tmp)
        doc.update(extra())
        write_json(tmp / RECORD_FILE, doc)

    try:
        atomic_dir(out, build)
    finally:
        close()
    return doc


def _energy(records: list[dict[str, Any]]) -> float | None:
    """``Σ ‖P_k‖² / Σ ‖ΔW‖²`` over the matrices (before any rescaling)."""
    num = sum(r["part_l2"] ** 2 for r in records)
    den = sum(r["delta_l2"] ** 2 for r in records)
    return num / den if den > 0 else None


def _adapter_tensor(adapter: Any, name: str, W0: torch.Tensor, dtype: torch.dtype, k: int | None, rescale: bool,
                    others: str, device: Any, records: list, counts: dict) -> torch.Tensor:
    """One base tensor under a LoRA adapter (module docstring)."""
    from .lora import _float64

    if name in adapter.low_rank and name not in adapter.dora:
        L, R, s = adapter.factors(name)
        P, rec = _low_rank_part(L, R, s, k, rescale, tuple(W0.shape))
    elif name in adapter.dora or (name in adapter.full and W0.ndim == 2):
        W64 = torch.from_numpy(_float64(W0))
        if name in adapter.dora:
            D = torch.from_numpy(adapter.dora_update(name, W64.numpy()))
        else:
            D = torch.from_numpy(_float64(adapter.read_full(name))) - W64
        P, rec = rank_k_part(D, k, rescale=rescale, device=device)
    elif name in adapter.full or name in adapter.bias_deltas:
        counts["other_from_" + others] += 1
        if others == "base":
            return W0.to(dtype)
        if name in adapter.bias_deltas:
            return (W0.to(torch.float64) + torch.from_numpy(adapter.bias_delta(name))).to(dtype)
        t = adapter.read_full(name)
        _finite(t, "rl", name)
        return t.to(dtype)
    else:
        counts["unchanged"] += 1
        return W0.to(dtype)
    out_t = torch.empty(W0.shape, dtype=dtype)
    _add_into(W0, P, out_t)
    rec.update(name=name, shape=list(W0.shape))
    records.append(rec)
    counts["matrices"] += 1
    return out_t


# ------------------------------------------------------------ extrapolate
def extrapolate(checkpoints: Sequence[str | os.PathLike], out: str | os.PathLike, *, at: float,
                steps: Sequence[float] | None = None, overwrite: bool = False,
                max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE, progress: bool = False) -> dict[str, Any]:
    """Write the per-entry least-squares line in the step, evaluated at step ``at``, of a series.

    ``checkpoints``: at least 2 checkpoint directories of one run (same tensors and shapes);
    ``steps``: their training steps, or ``None`` to read them from the names (``checkpoint-N``,
    verl's ``global_step_N``).  Every floating-point tensor is extrapolated (``Σ_i c_i W_i``,
    :func:`line_weights`, float64, rounded once to the dtype of the checkpoint with the largest
    step); non-floating-point tensors, ``config.json``, generation config and tokenizer files come
    from that checkpoint.  ``at`` may lie inside the series (interpolation of the fitted line).

    Returns the record written to ``out/reconstruct.json``; ``ValueError`` naming the argument
    (``checkpoints``, ``steps``, ``extrapolate``, ``out``, ``max_shard_size``) and the tensor.
    """
    from .stream import _step_of

    paths = [str(p) for p in checkpoints] if not isinstance(checkpoints, (str, os.PathLike)) else [str(checkpoints)]
    if len(paths) < 2:
        raise ValueError(f"checkpoints must hold at least 2 checkpoints of a series (a line in the step needs two "
                         f"points), got {len(paths)}: {paths}")
    from .lora import _is_adapter

    adapters = [i for i, p in enumerate(paths) if _is_adapter(p)]
    if adapters:
        i = adapters[0]
        raise ValueError(f"checkpoints[{i}] {paths[i]!r} is a LoRA adapter directory: extrapolation reads full "
                         f"checkpoints only (merge each adapter into its base first, e.g. with peft's "
                         f"merge_and_unload, and pass the merged directories)")
    if steps is None:
        found = [_step_of(p) for p in paths]
        if None in found:
            i = found.index(None)
            raise ValueError(f"steps: the step of checkpoints[{i}] {paths[i]!r} cannot be read from its name "
                             f"(checkpoint-N or global_step_N): give the steps explicitly")
        steps = [float(s) for s in found]  # type: ignore[arg-type]
    t = checks.array("steps", steps, ndim=1)
    if t.size != len(paths):
        raise ValueError(f"steps must hold one step per checkpoint ({len(paths)}), got {t.size}: {t.tolist()}")
    at = checks.number("extrapolate", at)
    c = line_weights(t, at)
    max_bytes = parse_size(max_shard_size)
    _check_out_dir(out, overwrite, {f"checkpoints[{i}] {p!r}": p for i, p in enumerate(paths)})
    cks = [open_checkpoint(resolve_checkpoint_dir(p, f"checkpoints[{i}]"), f"checkpoints[{i}]")
           for i, p in enumerate(paths)]
    for o in cks[1:]:
        _same_shapes(cks[0], o)
    last = cks[int(np.argmax(t))]
    entries = [_Entry(n, ti.dtype, tuple(ti.shape)) for n, ti in last.tensors.items()]

    def produce(name: str) -> torch.Tensor:
        info = last.info(name)
        if not info.is_float:
            return last.read(name)
        acc = None
        for ci, ck in zip(c, cks):
            x = ck.read(name)
            _finite(x, ck.label, name)
            x64 = x.to(torch.float64)
            del x
            if acc is None:
                acc = x64.mul_(float(ci))
            else:
                acc.add_(x64, alpha=float(ci))
            del x64
        res = acc.to(_ST_TORCH[info.dtype])  # type: ignore[union-attr]
        if not bool(torch.isfinite(res).all()):
            raise ValueError(f"extrapolate: step {at!r} takes tensor {name!r} beyond the range of "
                             f"{info.dtype} (non-finite values)")
        return res

    plan = _plan(entries, max_bytes)
    tick, close = _progress(len(entries), progress, "extrapolate")
    doc = {"kind": "extrapolate", "checkpoints": [str(ck.path) for ck in cks], "steps": t.tolist(),
           "extrapolate": at, "weights": c.tolist(), "dtype": last.dtype, "files_from": str(last.path),
           "shards": [f for f, _ in plan]}

    return _write_checkpoint(out, plan, produce, (tick, close), Path(last.path), doc)
