"""LoRA adapters as checkpoint updates, read without peft and measured from their factors.

``rlvr-diff BASE ADAPTER_DIR``.  Reading and validating an adapter (:func:`open_adapter`,
:func:`base_identity`), the low-rank algebra (:func:`low_rank_spectrum`,
:func:`low_rank_counts`, :func:`low_rank_inner`, :func:`stored_norm`), and the diff's pass over
the tensors of adapters (:func:`adapter_pass`, :func:`adapter_notes`), which writes the same
records as the dense pass of :mod:`analysis.diff.stream`.

A PEFT LoRA adapter directory holds ``adapter_config.json`` and ``adapter_model.safetensors``
(what ``PeftModel.save_pretrained`` writes).  Against its base checkpoint the adapter *is* an
update ``ΔW`` of every module it targets:

* a linear module (``lora_A.weight`` ``r × in``, ``lora_B.weight`` ``out × r``):
  ``ΔW = s·B·A``, stored ``out × in``; with ``fan_in_fan_out`` (GPT-2's Conv1D, whose weight is
  stored ``in × out``; recognised from the config or the base's architecture) ``ΔW = s·(B·A)ᵀ``;
* an embedding (``lora_embedding_A`` ``r × V``, ``lora_embedding_B`` ``d × r``): ``ΔW = s·(B·A)ᵀ``
  (``V × d``), also for a tied head;
* ``s = lora_alpha/r``, or ``lora_alpha/√r`` with ``use_rslora``; ``r`` and ``lora_alpha`` per
  module from ``rank_pattern`` / ``alpha_pattern`` (keys matched as peft does: the pattern must
  match the end of the module name, at a ``.`` boundary);
* ``lora_bias``: the bias gets ``s·lora_B.bias``;
* DoRA (``use_dora``, linear modules): ``W' = diag(m/‖W + s·B·A‖_row)·(W + s·B·A)`` with the
  magnitude ``m`` (``lora_magnitude_vector``) and the norm of every output row (peft's merge), so
  ``ΔW = W' − W`` is not low rank: it is formed (float64) and diffed densely (:func:`dora_delta`);
* ``modules_to_save`` and trained biases (``bias="all"`` / ``"lora_only"``): full tensors, diffed
  densely against the base; the embedding copy peft saves beside an embedding LoRA
  (``….base_layer.weight``) must equal the base's.

Every ``ΔW = s·L·R`` (``L`` ``m × r``, ``R`` ``r × n``) is measured from its factors, never
formed whole: with ``L = Q_L R_L`` and ``Rᵀ = Q_R R_R`` (thin QR, float64),
``s·L·R = Q_L (s·R_L R_Rᵀ) Q_Rᵀ``, so the singular values of ``ΔW`` are those of the ``r × r``
core ``C = s·R_L R_Rᵀ`` (the rest are 0), ``‖ΔW‖_F = ‖C‖_F``, and the singular vectors are
``Q_L U_C`` and ``Q_R V_C`` (:func:`low_rank_spectrum`).  Entry counts (densities) are taken
from row blocks of ``s·L·R`` (float32), one block at a time (:func:`low_rank_counts`).

Refused, before any work, with the file, tensor or setting named: another PEFT type
(``peft_type`` other than ``LORA``), DoRA on an embedding, and the LoRA variants whose merge is
not ``s·B·A`` (:data:`REFUSED_SETTINGS`; merge those with peft's ``merge_and_unload()`` and diff
the merged checkpoint); an adapter whose base does
not match (a target module absent from the base, a factor whose shape does not fit the base
weight, a rank that contradicts ``r`` / ``rank_pattern``); a weights file that is missing
(``adapter_model.bin`` only), truncated or holds unknown tensors.

Base identity (:func:`base_identity`): an adapter of the right shapes may still have been trained
on another checkpoint of the same architecture, and every number that involves ``W`` is then
wrong (``modules_to_save`` and DoRA updates, relative norms, the head share). The adapter's
``base_model_name_or_path`` is compared with the base given: an existing local directory must be
the base (same resolved path) or a copy of it by :func:`base_fingerprint` (``config.json`` but for
the keys of saving, every tensor's name and shape, float64 checksums of the embedding, an untied
head and the first targeted weight, and of the first row of every other tensor: independent of
the shard layout and of a lossless dtype); a hub id (``Qwen/Qwen2.5-7B``) must match the base's
``config.json`` ``_name_or_path`` or the base directory's name (its last one or two path
components, a hub cache's ``models--Org--Name``; case-insensitive). A different directory, or a
base whose ``_name_or_path`` is another hub id, is refused unless ``allow_other_base`` (recorded
``"other (allowed)"``); when nothing decides (no ``base_model_name_or_path``, a recorded folder
that is not here (even if its name matches the base's) or holds no readable checkpoint, a hub id
that matches no name of the base) the adapter is read, the identity recorded ``"unverified"``
with both names, and a :class:`BaseIdentityWarning` issued.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import spectra
from ..checkpoints import (
    DTYPE_NAMES,
    FLOAT_DTYPES,
    Checkpoint,
    TensorPair,
    fused_parts,
    is_conv1d,
    resolve_checkpoint_dir,
)
from .measure import _fill_spectrum, _measure, _record, _shifts
from .run import DiffRun, _Tally
from .settings import TOLERANCES, _finite

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "REFUSED_SETTINGS", "LowRankDelta", "Adapter", "is_adapter_dir",
           "open_adapter", "base_identity", "base_fingerprint", "BaseIdentityWarning", "name_matches", "pattern_value",
           "low_rank_spectrum", "low_rank_counts", "low_rank_inner", "stored_norm",
           "dora_delta"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: adapter settings whose merged update is not ``s·B·A`` (refused when set): setting -> why
REFUSED_SETTINGS = {
    "use_qalora": "QA-LoRA pools the input groups: the update is not s·B·A",
    "use_bdlora": "block-diagonal LoRA factors are stored in another layout",
    "layer_replication": "the adapter replicates layers of the base: the architectures differ",
    "target_parameters": "LoRA on raw parameters (e.g. fused expert tensors) is stored in another layout",
    "trainable_token_indices": "trainable tokens replace embedding rows outside the LoRA factors",
    "alora_invocation_tokens": "activated LoRA applies only after its invocation tokens: it has no merged weight",
    "arrow_config": "Arrow routes between several LoRA experts: there is no single update",
    "kasa_config": "this LoRA variant's merged update is not s·B·A",
    "monteclora_config": "this LoRA variant's merged update is not s·B·A",
    "velora_config": "this LoRA variant's merged update is not s·B·A",
}
_PREFIX = "base_model.model."
_LINEAR = (".lora_A.weight", ".lora_B.weight")
_EMBED = (".lora_embedding_A", ".lora_embedding_B")
_LORA_BIAS = ".lora_B.bias"
_DORA = (".lora_magnitude_vector", ".lora_magnitude_vector.weight")
_BLOCK_ELEMS = 1 << 22      # float32 entries of one row block of s·L·R (16 MiB)
_NORM_PART = 1 << 16        # entries per float32 dot product in stored_norm
_NORM_CHUNK = 1 << 22       # entries widened to float32 at a time in stored_norm
_NORM_SAFE = (1e-30, 1e30)  # float32 partial sums of squares that lost nothing to under/overflow


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter directory (it holds ``adapter_config.json``)."""
    p = Path(path)
    return p.is_dir() and (p / ADAPTER_CONFIG).is_file()


def pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """The value of the first key of ``patterns`` (peft's ``rank_pattern`` / ``alpha_pattern``)
    matching the end of module name ``module`` at a ``.`` boundary (as peft's ``get_pattern_key``),
    else ``default``.

    Examples
    --------
    >>> pattern_value({"down_proj": 2, "layers.0.self_attn.q_proj": 3}, "model.layers.0.self_attn.q_proj", 8)
    3
    >>> pattern_value({"down_proj": 2}, "model.layers.1.mlp.down_proj", 8), pattern_value({}, "lm_head", 8)
    (2, 8)
    """
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


@dataclass(frozen=True)
class LowRankDelta:
    """``ΔW = scale·L·R`` of one base weight (``shape`` as stored in the base).

    ``L = B``, ``R = A`` (linear module) or, transposed (``fan_in_fan_out``, embeddings),
    ``L = Aᵀ``, ``R = Bᵀ``; ``a_key`` / ``b_key`` name the factors in the adapter file.
    """

    name: str
    module: str
    kind: str               # "linear" or "embedding"
    rank: int
    alpha: float
    scale: float
    transposed: bool
    a_key: str
    b_key: str
    shape: tuple[int, int]

    def info(self) -> dict[str, Any]:
        return {"module": self.module, "type": self.kind, "rank": self.rank, "alpha": self.alpha,
                "scale": self.scale, "transposed": self.transposed}


def dora_delta(W: np.ndarray, L: np.ndarray, R: np.ndarray, scale: float, magnitude: np.ndarray,
               transposed: bool) -> np.ndarray:
    """``ΔW`` (float64, as stored) of a DoRA module: ``V = W + scale·L·R``,
    ``W' = diag(m/‖V‖_row)·V`` over the output rows (columns of a transposed, ``in × out``
    weight), ``ΔW = W' − W`` (peft's ``merge_and_unload``).

    Examples
    --------
    >>> W, L, R = np.eye(2), np.ones((2, 1)), np.ones((1, 2))
    >>> dora_delta(W, L, R, 1.0, np.array([1.0, 2.0]), False)        # V = [[2, 1], [1, 2]], ‖V‖_row = √5
    array([[-0.10557281,  0.4472136 ],
           [ 0.89442719,  0.78885438]])
    """
    V = np.asarray(W, dtype=np.float64) + scale * (np.asarray(L, dtype=np.float64) @ np.asarray(R, dtype=np.float64))
    axis = 0 if transposed else 1
    norm = np.linalg.norm(V, axis=axis)
    f = np.asarray(magnitude, dtype=np.float64) / norm
    V *= f[None, :] if transposed else f[:, None]
    V -= W
    return V


@dataclass
class Adapter:
    """A validated LoRA adapter directory against one base checkpoint (:func:`open_adapter`).

    ``low_rank``: base tensor name → :class:`LowRankDelta`; ``full``: base tensor name → the
    adapter tensor holding its new value (``modules_to_save``, trained biases); ``bias_deltas``:
    base bias name → ``(lora_B.bias key, scale)`` (``lora_bias``).  ``path``, ``label``,
    ``dtype`` and ``config`` (the base's ``config.json``) let it stand where a checkpoint does.
    """

    path: Path
    label: str
    adapter_config: dict
    config: dict
    file: Path
    dtype: str
    low_rank: dict[str, LowRankDelta] = field(default_factory=dict)
    full: dict[str, str] = field(default_factory=dict)
    bias_deltas: dict[str, tuple[str, float]] = field(default_factory=dict)
    dora: dict[str, str] = field(default_factory=dict)
    #: :func:`base_identity` of the adapter against the base it was opened with
    identity: dict[str, Any] = field(default_factory=dict)

    def _tensor(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        try:
            with safe_open(str(self.file), framework="pt") as f:
                return f.get_tensor(key)
        except Exception as err:
            raise ValueError(f"{self.label}: tensor {key!r} in file {str(self.file)!r} could not be read "
                             f"(truncated or corrupt file): {err}") from None

    def _float64(self, key: str) -> np.ndarray:
        x = _float64(self._tensor(key))
        if not np.isfinite(x).all():
            raise ValueError(f"{self.label}: tensor {key!r} in file {str(self.file)!r} holds non-finite values")
        return x

    def factors(self, name: str) -> tuple[np.ndarray, np.ndarray, float]:
        """``(L, R, scale)`` (float64) with ``ΔW = scale·L·R`` for base tensor ``name``."""
        d = self.low_rank[name]
        A, B = self._float64(d.a_key), self._float64(d.b_key)
        return (A.T, B.T, d.scale) if d.transposed else (B, A, d.scale)

    def read_full(self, name: str) -> torch.Tensor:
        """The new value of base tensor ``name`` (a full tensor of the adapter) as stored."""
        return self._tensor(self.full[name])

    def dora_update(self, name: str, W: np.ndarray) -> np.ndarray:
        """``ΔW`` (float64) of DoRA module ``name`` against base weight ``W`` (:func:`dora_delta`)."""
        L, R, s = self.factors(name)
        return dora_delta(W, L, R, s, self._float64(self.dora[name]), self.low_rank[name].transposed)

    def bias_delta(self, name: str) -> np.ndarray:
        """``scale·lora_B.bias`` (float64): the ``lora_bias`` update of base bias ``name``."""
        key, scale = self.bias_deltas[name]
        return scale * self._float64(key)

    def stored_keys(self, name: str) -> list[str]:
        """The keys of the adapter file that hold the update of base tensor ``name`` (the factors
        ``lora_A``, ``lora_B`` and a DoRA magnitude; a full tensor; a ``lora_B.bias``), ``[]`` if none."""
        if name in self.low_rank:
            d = self.low_rank[name]
            return [d.a_key, d.b_key] + ([self.dora[name]] if name in self.dora else [])
        if name in self.full:
            return [self.full[name]]
        if name in self.bias_deltas:
            return [self.bias_deltas[name][0]]
        return []

    def layout(self) -> dict[str, Any]:
        """What the adapter stores, per base tensor: ``{name: (how, rank)}`` (``how``: ``"lora"``,
        ``"dora"``, ``"full"``, ``"lora_bias"``; ``rank`` ``None`` but for factors)."""
        out: dict[str, Any] = {n: ("dora" if n in self.dora else "lora", d.rank) for n, d in self.low_rank.items()}
        out.update({n: ("full", None) for n in self.full})
        out.update({n: ("lora_bias", None) for n in self.bias_deltas})
        return out

    def summary(self) -> dict[str, Any]:
        """The adapter's entry in the report document."""
        c = self.adapter_config
        ranks = sorted({d.rank for d in self.low_rank.values()})
        return {"path": str(self.path), "peft_type": c.get("peft_type"), "r": c.get("r"),
                "lora_alpha": c.get("lora_alpha"), "use_rslora": bool(c.get("use_rslora")),
                "ranks": ranks, "rank_pattern": c.get("rank_pattern") or {},
                "alpha_pattern": c.get("alpha_pattern") or {}, "fan_in_fan_out": bool(c.get("fan_in_fan_out")),
                "modules_to_save": c.get("modules_to_save"),
                "base_model_name_or_path": c.get("base_model_name_or_path"),
                "base_identity": self.identity.get("status"),
                "use_dora": bool(c.get("use_dora")), "n_dora": len(self.dora),
                "n_low_rank": len(self.low_rank) - len(self.dora), "n_full": len(self.full),
                "n_lora_bias": len(self.bias_deltas),
                "low_rank_tensors": sorted(self.low_rank), "full_tensors": sorted(self.full),
                "factors_dtype": self.dtype}


def _float64(t: torch.Tensor) -> np.ndarray:
    """A float64 numpy copy of a stored CPU tensor, without torch arithmetic (bfloat16 is the upper
    half of float32: widened by a 16-bit shift, exactly)."""
    if t.dtype == torch.bfloat16:
        x = t.contiguous().view(torch.int16).numpy().view(np.uint16).astype(np.uint32)
        x <<= 16
        return x.view(np.float32).astype(np.float64)
    if t.dtype in (torch.float16, torch.float32, torch.float64):
        return t.numpy().astype(np.float64)
    return t.to(torch.float64).numpy()   # float8 variants


def _refuse_settings(label: str, cfg_path: Path, cfg: dict) -> None:
    pt = cfg.get("peft_type")
    if pt is None:
        raise ValueError(f"{label}: file {str(cfg_path)!r} has no 'peft_type' (not a PEFT adapter config)")
    if str(pt).upper() != "LORA":
        raise ValueError(f"{label}: peft_type {pt!r} in {str(cfg_path)!r} is not supported: only LoRA adapters "
                         f"(peft_type 'LORA') are read; merge the adapter into the base with peft's "
                         f"merge_and_unload() and diff the merged checkpoint")
    for key, why in REFUSED_SETTINGS.items():
        v = cfg.get(key)
        if v not in (None, False, [], {}, ""):
            raise ValueError(f"{label}: setting {key}={v!r} in {str(cfg_path)!r} is not supported ({why}); merge "
                             f"the adapter with peft's merge_and_unload() and diff the merged checkpoint")
    for key in ("r", "lora_alpha"):
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{label}: setting {key} in {str(cfg_path)!r} must be a positive number, got {v!r}")
    for key in ("rank_pattern", "alpha_pattern"):
        v = cfg.get(key) or {}
        if not isinstance(v, dict):
            raise ValueError(f"{label}: setting {key} in {str(cfg_path)!r} must be an object, got {v!r}")


def _module_of(key: str, suffixes: Sequence[str]) -> str | None:
    for s in suffixes:
        if key.endswith(s):
            return key[:-len(s)]
    return None


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)?$")
#: config.json keys that say how a checkpoint was saved, not what it computes (left out of the fingerprint)
_SAVE_KEYS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")
_SUM_ELEMS = 1 << 22    # entries widened to float64 at a time by a checksum


class BaseIdentityWarning(UserWarning):
    """An adapter's base could not be verified: read against the base given, with a note."""


def _is_hub_id(name: str) -> bool:
    """``Org/Name`` or ``name`` (a Hugging Face hub id), not a path that exists here."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def _name_parts(name: str) -> list[str]:
    """The lower-case path components of a name (a hub cache's ``models--Org--Name`` as
    ``org``, ``name``)."""
    parts = [x for x in re.split(r"[/\\]+", str(name).strip().lower()) if x not in ("", ".")]
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].startswith("models--") and len(parts[i]) > len("models--"):
            return parts[i][len("models--"):].split("--")
    return parts


def name_matches(named: str, other: str, *, both_ids: bool = False) -> bool:
    """Whether the base ``named`` by an adapter (a hub id or a path) is ``other`` (a base
    directory or a ``_name_or_path``): the last path components agree, case-insensitive; with
    ``both_ids`` (two hub ids) the organisations too, where both have one.

    Examples
    --------
    >>> name_matches("Qwen/Qwen2.5-7B", "/models/qwen2.5-7b"), name_matches("Qwen/Qwen2.5-7B", "/m/Qwen/Qwen2.5-7B")
    (True, True)
    >>> name_matches("Qwen/Qwen2.5-7B", "/hf/hub/models--Qwen--Qwen2.5-7B/snapshots/0a1b2c")
    True
    >>> name_matches("Qwen/Qwen2.5-7B", "/models/Qwen2.5-7B-Instruct")
    False
    >>> name_matches("Qwen/Qwen2.5-7B", "Other/Qwen2.5-7B", both_ids=True)
    False
    >>> name_matches("gpt2", "openai/gpt2", both_ids=True)
    True
    """
    a, b = _name_parts(named), _name_parts(other)
    if not a or not b:
        return False
    if both_ids and len(a) >= 2 and len(b) >= 2:
        return a[-2:] == b[-2:]
    return a[-1] == b[-1]


def _checksum(ck: Checkpoint, name: str, stop: int | None = None) -> list[float]:
    """``[Σ x, Σ x·w]`` (float64) over the entries of tensor ``name`` of ``ck`` (rows ``:stop``),
    ``w_i = 1 + (i mod 97)/97`` of the flat index (the second sum changes when entries move).
    The values as stored, widened exactly: a copy re-saved in a wider dtype or another shard layout
    sums the same, bit for bit (the same chunks in the same order)."""
    shape = ck.info(name).shape
    rows = (shape[0] if shape else 1) if stop is None else min(stop, shape[0] if shape else 1)
    per_row = max(1, math.prod(shape[1:])) if shape else 1
    step = max(1, _SUM_ELEMS // per_row)
    s = sw = 0.0
    i0 = 0
    for a in range(0, rows, step):
        t = ck.read(name, a, min(rows, a + step)) if shape else ck.read(name)
        x = _float64(t).reshape(-1)
        w = 1.0 + ((np.arange(i0, i0 + x.size) % 97) / 97.0)
        s += float(np.sum(x))
        sw += float(np.dot(x, w))
        i0 += x.size
    return [s, sw]


def base_fingerprint(ck: Checkpoint, targets: Sequence[str] = ()) -> dict[str, Any]:
    """What identifies a base checkpoint for an adapter, independent of how it was saved.

    ``{"config", "shapes", "sums", "row0"}``: ``config.json`` without the keys of saving
    (:data:`_SAVE_KEYS`); the name and shape of every tensor (those the adapter targets among
    them); the float64 checksums (:func:`_checksum`) of a few fixed tensors read whole (the input
    embedding, an untied output head, the first tensor of ``targets``); and of the first row of
    every other floating-point tensor.  Two checkpoints of the same shapes have different
    fingerprints unless their sampled values agree exactly.
    """
    fixed: list[str] = []
    emb = next((n for n in ck.tensors if ck.kind(n) == "embedding"), None)
    for n in (emb, None if ck.tied else ck.head, *sorted(t for t in targets if t in ck.tensors)[:1]):
        if n is not None and n not in fixed and ck.info(n).is_float:
            fixed.append(n)
    return {"config": {k: v for k, v in ck.config.items() if k not in _SAVE_KEYS},
            "shapes": {n: list(i.shape) for n, i in ck.tensors.items()},
            "sums": {n: _checksum(ck, n) for n in fixed},
            "row0": {n: _checksum(ck, n, 1) for n, i in ck.tensors.items() if n not in fixed and i.is_float}}


def _fingerprint_difference(named: dict[str, Any], given: dict[str, Any], targets: Sequence[str]) -> str | None:
    """The first difference between two :func:`base_fingerprint` (there: the adapter's recorded
    base; here: the base given), in words, or ``None``."""
    ca, cb = named["config"], given["config"]
    if ca != cb:
        keys = sorted(k for k in set(ca) | set(cb) if ca.get(k, "∅") != cb.get(k, "∅"))
        return f"their config.json differ ({', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''})"
    a, b = named, given
    for n in [t for t in targets if t in b["shapes"]] + sorted(b["shapes"]):
        if a["shapes"].get(n) != b["shapes"][n]:
            there = "no such tensor" if n not in a["shapes"] else f"shape {tuple(a['shapes'][n])}"
            return f"tensor {n!r} has {there} there and shape {tuple(b['shapes'][n])} here"
    extra = sorted(set(a["shapes"]) - set(b["shapes"]))
    if extra:
        return f"tensor {extra[0]!r} is there but not here"
    for key, what in (("sums", "float64 checksum"), ("row0", "float64 checksum of the first row")):
        for n, v in b[key].items():
            if a[key].get(n) != v:
                return f"the {what} of tensor {n!r} is {a[key].get(n, [None])[0]!r} there and {v[0]!r} here"
    return None


def base_identity(named: Any, base: Checkpoint, base_arg: str | Path | None = None,
                  targets: Sequence[str] = ()) -> dict[str, Any]:
    """Whether ``named`` (an adapter's ``base_model_name_or_path``) designates ``base``.

    Returns ``{"status", "adapter_base", "base", "base_name_or_path", "how"}``; ``status`` is
    ``"same"``, ``"other"`` (a different readable checkpoint directory whose
    :func:`base_fingerprint` differs; a base whose ``config.json`` ``_name_or_path`` is another
    hub id) or ``"unverified"`` (nothing decides: no name, a recorded folder that is not here or
    not a readable checkpoint, a hub id that matches no name of the base).  ``base_arg``: the
    base as given (before a verl layout was resolved), whose name is tried too; ``targets``: the
    base tensors the adapter updates (the first one is checksummed whole).  See the module
    docstring.
    """
    nop = base.config.get("_name_or_path")
    nop = nop.strip() if isinstance(nop, str) and nop.strip() else None
    out: dict[str, Any] = {"status": "unverified", "adapter_base": named, "base": str(base.path),
                           "base_name_or_path": nop, "how": ""}
    if not isinstance(named, str) or not named.strip():
        out["how"] = "adapter_config.json names no base_model_name_or_path"
        return out
    named = named.strip()
    out["adapter_base"] = named
    p = Path(named).expanduser()
    if p.is_dir():
        try:
            rp = resolve_checkpoint_dir(p)
        except ValueError:
            rp = p
        mine = Path(base.path).resolve()
        if mine in (p.resolve(), rp.resolve()):
            out.update(status="same", how="the same directory")
            return out
        from ..checkpoints import open_checkpoint

        try:
            theirs = open_checkpoint(p, "base_model_name_or_path")
            fp_named = base_fingerprint(theirs, targets)
        except ValueError as err:
            out["how"] = (f"{named!r} exists here but is not a readable checkpoint ({err}): its weights could not "
                          f"be compared with the base's")
            return out
        fp_given = base_fingerprint(base, targets)
        diff = _fingerprint_difference(fp_named, fp_given, targets)
        checked = ", ".join(repr(n) for n in fp_given["sums"])
        if diff is None:
            out.update(status="same", how=f"a copy of the base: the same config.json, tensor names and shapes, "
                                          f"float64 checksums of {checked} and of the first row of every other "
                                          f"tensor")
        else:
            out.update(status="other", how=f"{named!r} is another existing directory (not the base, nor a copy of "
                                           f"it): {diff}")
        return out
    if nop is not None and name_matches(named, nop, both_ids=_is_hub_id(named) and _is_hub_id(nop)):
        out.update(status="same", how="the base's config.json _name_or_path matches")
        return out
    for d in [base.path] + ([base_arg] if base_arg is not None else []):
        if name_matches(named, str(Path(d).expanduser().absolute())):
            if not _is_hub_id(named):   # a folder that is not here: its name alone identifies nothing
                out["how"] = (f"{named!r} is not a directory on this machine (moved, or another machine's path); "
                              f"the base directory's name matches it but its weights could not be compared")
                return out
            out.update(status="same", how="the base directory's name matches")
            return out
    if nop is not None and _is_hub_id(named) and _is_hub_id(nop):
        out.update(status="other", how=f"the base's config.json _name_or_path is {nop!r}")
        return out
    out["how"] = (f"{named!r} is not a directory on this machine and no name of the base compares with it"
                  if not _is_hub_id(named)
                  else "the base directory's name does not match and its config.json has no _name_or_path"
                  if nop is None else "the base's _name_or_path is not a hub id to compare with")
    return out


def open_adapter(path: str | Path, base: Checkpoint, label: str = "checkpoint", *, allow_other_base: bool = False,
                 base_arg: str | Path | None = None) -> Adapter:
    """Read and validate a LoRA adapter directory against ``base``; nothing large is read.

    Raises ``ValueError`` (message starting with ``label``) naming the file, tensor or
    setting: see the module docstring.  An adapter whose ``base_model_name_or_path`` names
    another base (:func:`base_identity`) is refused unless ``allow_other_base``
    (``identity["status"]`` is then ``"other (allowed)"``).
    """
    p = Path(path)
    cfg_path = p / ADAPTER_CONFIG
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{label}: file {str(cfg_path)!r} is not a readable JSON adapter config: {err}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{label}: file {str(cfg_path)!r} must hold a JSON object")
    _refuse_settings(label, cfg_path, cfg)
    wfile = p / ADAPTER_WEIGHTS
    if not wfile.is_file():
        other = sorted(x.name for x in p.iterdir() if x.suffix in (".bin", ".pt", ".pth"))
        hint = (f" (found {', '.join(other)}: only safetensors are read; save the adapter with "
                f"save_pretrained(dir, safe_serialization=True))") if other else ""
        raise ValueError(f"{label}: {str(p)!r} has no {ADAPTER_WEIGHTS}{hint}")
    from safetensors import safe_open

    try:
        with safe_open(str(wfile), framework="pt") as f:
            heads = {k: (str(f.get_slice(k).get_dtype()), tuple(int(x) for x in f.get_slice(k).get_shape()))
                     for k in f.keys()}
    except Exception as err:
        raise ValueError(f"{label}: file {str(wfile)!r} is truncated or corrupt (not a readable safetensors "
                         f"file): {err}") from None

    def where(key: str) -> str:
        return f"tensor {key!r} in file {str(wfile)!r}"

    for key, (dt, _) in heads.items():
        if dt not in FLOAT_DTYPES:
            raise ValueError(f"{label}: {where(key)} has dtype {dt}, not a floating-point weight")
    strip = {k: (k[len(_PREFIX):] if k.startswith(_PREFIX) else k) for k in heads}
    factors: dict[str, dict[str, str]] = {}
    full: dict[str, str] = {}
    bias: dict[str, str] = {}
    copies: dict[str, str] = {}
    mags: dict[str, str] = {}
    for key, short in strip.items():
        m = _module_of(short, _DORA)
        if m is not None:
            mags[m] = key
            continue
        m = _module_of(short, _LINEAR)
        if m is not None:
            factors.setdefault(m, {"type": "linear"})["AB"[short.endswith(".lora_B.weight")]] = key
            continue
        m = _module_of(short, _EMBED)
        if m is not None:
            factors.setdefault(m, {"type": "embedding"})["AB"[short.endswith("_B")]] = key
            continue
        m = _module_of(short, (_LORA_BIAS,))
        if m is not None:
            bias[m] = key
            continue
        if ".lora_" in short or "lora_" in short.rsplit(".", 1)[-1]:
            raise ValueError(f"{label}: {where(key)} is not a LoRA tensor this reader knows (lora_A/lora_B, "
                             f"lora_embedding_A/B, lora_B.bias)")
        if short.endswith(".base_layer.weight"):
            copies[short[:-len(".base_layer.weight")] + ".weight"] = key
            continue
        full[short] = key
    if not factors and not full and not bias:
        raise ValueError(f"{label}: file {str(wfile)!r} holds no LoRA tensors")
    ad = Adapter(p, label, cfg, base.config, wfile, "")
    dts = sorted({DTYPE_NAMES.get(heads[k][0], heads[k][0]) for k in heads})
    ad.dtype = dts[0] if len(dts) == 1 else "mixed (" + ", ".join(dts) + ")"
    rslora = bool(cfg.get("use_rslora"))
    fifo = bool(cfg.get("fan_in_fan_out"))
    r0, a0 = cfg["r"], cfg["lora_alpha"]
    rp, ap = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
    for module, fk in sorted(factors.items()):
        name = module + ".weight"
        anyk = fk.get("A") or fk.get("B")
        for ab in "AB":
            if ab not in fk:
                raise ValueError(f"{label}: {where(anyk)} has no matching lora_{ab} factor for module {module!r}")
        if name not in base.tensors:
            raise ValueError(f"{label}: target module {module!r} ({where(anyk)}) has no weight {name!r} in base "
                             f"{str(base.path)!r}: the adapter was trained on another model (target_modules "
                             f"{cfg.get('target_modules')!r})")
        (_, sa), (_, sb) = heads[fk["A"]], heads[fk["B"]]
        bshape = base.tensors[name].shape
        if len(sa) != 2 or len(sb) != 2 or sa[0] != sb[1]:
            raise ValueError(f"{label}: LoRA factors of module {module!r} have shapes A {sa} and B {sb} "
                             f"({where(fk['A'])}): A must be r × in and B out × r")
        rank = sa[0]
        emb = fk["type"] == "embedding"
        plain = (sb[0], sa[1])                      # B·A: out × in (an embedding's is d × V)
        conv = is_conv1d(name, base.config)
        transposed = emb or fifo or conv
        if len(bshape) != 2 or bshape != (plain[::-1] if transposed else plain):
            want = f"{plain[::-1]} (transposed)" if transposed else f"{plain}"
            raise ValueError(f"{label}: LoRA factors of module {module!r} ({where(fk['A'])}, A {sa}, B {sb}) "
                             f"give a ΔW of shape {want} but base tensor {name!r} in file "
                             f"{str(base.tensors[name].file)!r} has shape {tuple(bshape)}: the adapter was "
                             f"trained on another model")
        r_cfg = pattern_value(rp, module, r0)
        if int(r_cfg) != rank:
            which = "rank_pattern" if r_cfg != r0 else "r"
            raise ValueError(f"{label}: module {module!r} has rank {rank} in file {str(wfile)!r} but setting "
                             f"{which} in {str(cfg_path)!r} gives {r_cfg}")
        alpha = float(pattern_value(ap, module, a0))
        scale = alpha / math.sqrt(rank) if rslora else alpha / rank
        ad.low_rank[name] = LowRankDelta(name, module, fk["type"], rank, alpha, scale, transposed, fk["A"],
                                         fk["B"], (int(bshape[0]), int(bshape[1])))
    dora = bool(cfg.get("use_dora"))
    for module, key in sorted(mags.items()):
        name = module + ".weight"
        d = ad.low_rank.get(name)
        if not dora or d is None:
            raise ValueError(f"{label}: {where(key)} is a DoRA magnitude but "
                             + ("setting use_dora is not set" if not dora else f"module {module!r} has no LoRA factors")
                             + f" in {str(cfg_path)!r}")
        if d.kind != "linear":
            raise ValueError(f"{label}: {where(key)}: DoRA (setting use_dora) on embedding {module!r} is not supported; "
                             f"merge the adapter with peft's merge_and_unload() and diff the merged checkpoint")
        out = d.shape[1] if d.transposed else d.shape[0]
        if heads[key][1] != (out,):
            raise ValueError(f"{label}: {where(key)} has shape {heads[key][1]} but module {module!r} has {out} outputs")
        ad.dora[name] = key
    if dora:
        lack = sorted(n for n in ad.low_rank if n not in ad.dora)
        if lack:
            raise ValueError(f"{label}: setting use_dora in {str(cfg_path)!r} is set but module "
                             f"{ad.low_rank[lack[0]].module!r} has no lora_magnitude_vector in file {str(wfile)!r}"
                             + (" (DoRA on embeddings is not supported)" if ad.low_rank[lack[0]].kind == "embedding"
                                else ""))
    for module, key in sorted(bias.items()):
        name = module + ".bias"
        if name not in base.tensors or module + ".weight" not in ad.low_rank:
            raise ValueError(f"{label}: {where(key)} (setting lora_bias) has no bias {name!r} to update in base "
                             f"{str(base.path)!r}")
        if heads[key][1] != base.tensors[name].shape:
            raise ValueError(f"{label}: {where(key)} has shape {heads[key][1]} but base bias {name!r} has shape "
                             f"{base.tensors[name].shape}")
        ad.bias_deltas[name] = (key, ad.low_rank[module + ".weight"].scale)
    for name, key in sorted(full.items()):
        if name not in base.tensors:
            raise ValueError(f"{label}: {where(key)} (modules_to_save or a trained bias) has no tensor {name!r} "
                             f"in base {str(base.path)!r}: the adapter was trained on another model")
        if heads[key][1] != base.tensors[name].shape:
            raise ValueError(f"{label}: {where(key)} has shape {heads[key][1]} but base tensor {name!r} in file "
                             f"{str(base.tensors[name].file)!r} has shape {base.tensors[name].shape}: the adapter "
                             f"was trained on another model (or with a resized vocabulary)")
        if name in ad.low_rank or name in ad.bias_deltas:
            raise ValueError(f"{label}: {where(key)} is both a full tensor and a LoRA update of {name!r}")
        ad.full[name] = key
    for name, key in sorted(copies.items()):
        if name not in base.tensors or heads[key][1] != base.tensors[name].shape:
            raise ValueError(f"{label}: {where(key)} (the embedding peft saves beside an embedding LoRA) does not "
                             f"match base tensor {name!r} in {str(base.path)!r}: the adapter was trained on another "
                             f"model or a resized vocabulary")
        if not torch.equal(ad._tensor(key).to(torch.float64), base.read(name).to(torch.float64)):
            raise ValueError(f"{label}: {where(key)} (the embedding peft saves beside an embedding LoRA) differs "
                             f"from base tensor {name!r} in {str(base.path)!r}: the adapter's base is another "
                             f"checkpoint")
    ad.identity = base_identity(cfg.get("base_model_name_or_path"), base, base_arg,
                                [*sorted(ad.low_rank), *sorted(ad.full), *sorted(ad.bias_deltas)])
    if ad.identity["status"] == "unverified":
        i = ad.identity
        warnings.warn(f"{label}: the base of adapter {str(p)!r} could not be verified: it names "
                      f"base_model_name_or_path {i['adapter_base']!r}, the base given is {i['base']!r}: {i['how']}; "
                      f"ΔW is read against the base given (the report notes it)", BaseIdentityWarning, stacklevel=2)
    if ad.identity["status"] == "other":
        if not allow_other_base:
            i = ad.identity
            said = f" (its config.json _name_or_path: {i['base_name_or_path']!r})" if i["base_name_or_path"] else ""
            raise ValueError(f"{label}: adapter {str(p)!r} was trained on base_model_name_or_path "
                             f"{i['adapter_base']!r} (in {str(cfg_path)!r}) but the base given is {i['base']!r}"
                             f"{said}: {i['how']}, and the same shapes do not make the same weights (ΔW would be "
                             f"read against another W); give the adapter's own base, or pass --allow-other-base "
                             f"(allow_other_base=True) to diff it against this base anyway")
        ad.identity["status"] = "other (allowed)"
    return ad


# ------------------------------------------------------------ low-rank algebra
def _core(L: np.ndarray, R: np.ndarray, scale: float, vectors: bool) -> tuple[Any, np.ndarray, Any]:
    """``(Q_L, C, Q_R)`` with ``scale·L·R = Q_L C Q_Rᵀ``, orthonormal ``Q_L``, ``Q_R`` (thin QR;
    ``None`` unless ``vectors``: the triangular factors alone cost half)."""
    L = np.asarray(L, dtype=np.float64)
    Rt = np.asarray(R, dtype=np.float64).T
    if vectors:
        QL, RL = np.linalg.qr(L)
        QR, RR = np.linalg.qr(Rt)
    else:
        QL = QR = None
        RL, RR = np.linalg.qr(L, mode="r"), np.linalg.qr(Rt, mode="r")
    return QL, scale * (RL @ RR.T), QR


def low_rank_spectrum(L: np.ndarray, R: np.ndarray, scale: float = 1.0, k: int | None = None, *,
                      n_vectors: int = 0) -> spectra.Spectrum:
    """The :class:`analysis.spectra.Spectrum` of ``ΔW = scale·L·R`` from its factors.

    ``L`` ``m × r``, ``R`` ``r × n``; the singular values of the ``r × r`` core of the thin QR
    factorisations (module docstring), zero-padded to all ``min(m, n)`` values (``k=None``) or
    to the top ``k``; ``fro_norm`` is ``‖ΔW‖_F`` exactly; ``u``, ``v`` follow
    :mod:`analysis.spectra`'s sign convention (largest ``|u_i|`` positive; ``None`` for
    ``ΔW = 0``).  Cost
    ``O((m + n)·r²)``: ``ΔW`` is never formed.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> L, R = rng.standard_normal((50, 3)), rng.standard_normal((3, 40))
    >>> spec = low_rank_spectrum(L, R, 0.5, n_vectors=1)
    >>> dense = np.linalg.svd(0.5 * L @ R, compute_uv=False)
    >>> bool(np.allclose(spec.s, dense)), spec.s.shape, bool(np.isclose(spec.fro_norm, np.linalg.norm(0.5 * L @ R)))
    (True, (40,), True)
    >>> low_rank_spectrum(L, R, 0.5, k=5).s[3:]
    array([0., 0.])
    """
    m, n = int(L.shape[0]), int(R.shape[1])
    d = min(m, n)
    QL, C, QR = _core(L, R, scale, n_vectors > 0)
    if n_vectors:
        Uc, s, Vct = np.linalg.svd(C)
    else:
        s = np.linalg.svd(C, compute_uv=False)
    fro = float(np.linalg.norm(C))
    kk = d if k is None else int(k)
    out = np.zeros(kk)
    out[:min(kk, s.size)] = s[:kk]
    u = v = None
    if n_vectors and fro > 0.0:   # the zero matrix has no singular vectors: u = v = None
        u = QL @ Uc[:, :n_vectors]
        v = QR @ Vct[:n_vectors].T
        idx = np.argmax(np.abs(u), axis=0)
        sgn = np.sign(u[idx, np.arange(u.shape[1])])
        sgn[sgn == 0] = 1.0
        u, v = u * sgn, v * sgn
        u.setflags(write=False)
        v.setflags(write=False)
    out.setflags(write=False)
    return spectra.Spectrum(out, fro, (m, n), u, v, "factors")


def low_rank_counts(L: np.ndarray, R: np.ndarray, scale: float, thresholds: Sequence[float]) -> list[int]:
    """``[#{|ΔW_ij| > t} for t in thresholds]`` for ``ΔW = scale·L·R``, from float32 row blocks of
    ``ΔW`` (16 MiB each), never the whole matrix.  ``thresholds`` compare float32 entries (pass
    the largest float32 at most each tolerance for an exact ``> tol`` test)."""
    L32 = np.ascontiguousarray(scale * np.asarray(L, dtype=np.float64), dtype=np.float32)
    R32 = np.ascontiguousarray(R, dtype=np.float32)
    m, n = L32.shape[0], R32.shape[1]
    step = max(1, _BLOCK_ELEMS // max(n, 1))
    th = [np.float32(t) for t in thresholds]
    cnt = [0] * len(th)
    for i in range(0, m, step):
        D = L32[i:i + step] @ R32
        np.abs(D, out=D)
        for j, t in enumerate(th):
            cnt[j] += int(np.count_nonzero(D > t))
    return cnt


def stored_norm(t: torch.Tensor) -> float | None:
    """``‖t‖_F`` of a stored bfloat16 / float16 / float32 CPU tensor, fast: float32 dot products of
    ``2**16`` entries (squares of bfloat16 and float16 values are exact in float32), summed in
    float64; relative error ≲ 1e-6.  ``None`` for other dtypes or when a partial sum leaves the
    safe float32 range (the caller then uses its exact float64 path).

    Examples
    --------
    >>> t = torch.full((300, 7), 0.5, dtype=torch.bfloat16)
    >>> stored_norm(t), float(np.sqrt(300 * 7 * 0.25))
    (22.9128784747792, 22.9128784747792)
    """
    if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return None
    flat = t.reshape(-1)
    ss = 0.0
    for i in range(0, flat.numel(), _NORM_CHUNK):
        x = flat[i:i + _NORM_CHUNK].to(torch.float32).numpy()
        for j in range(0, x.size, _NORM_PART):
            part = x[j:j + _NORM_PART]
            with np.errstate(over="ignore", under="ignore"):
                v = float(np.dot(part, part))
            if v != 0.0 and not _NORM_SAFE[0] <= v <= _NORM_SAFE[1]:
                return None
            ss += v
    return math.sqrt(ss)


def low_rank_inner(x: Any, y: Any) -> float:
    """``<X, Y>_F`` of two updates, each ``None`` (zero), a dense array, or ``(L, R, scale)``
    (``scale·L·R``), without forming a low-rank one: ``<sLR, tMN> = s·t·Σ (LᵀM) ∘ (R Nᵀ)``."""
    if x is None or y is None:
        return 0.0
    if isinstance(x, tuple) and isinstance(y, tuple):
        (L, R, s), (M, N, t) = x, y
        return float(s * t * np.sum((L.T @ M) * (R @ N.T)))
    if isinstance(x, tuple):
        x, y = y, x
    if isinstance(y, tuple):
        M, N, t = y
        X = np.asarray(x, dtype=np.float64).reshape(M.shape[0], N.shape[1])
        return float(t * np.sum((M.T @ X) * N))
    return float(np.dot(np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()))


# ------------------------------------------------ the diff of adapters
def _is_adapter(path: str) -> bool:
    """A LoRA adapter directory (``adapter_config.json``), not a full checkpoint that has one too."""
    p = Path(path)
    return is_adapter_dir(p) and not (p / "model.safetensors").is_file() \
        and not (p / "model.safetensors.index.json").is_file()


def _open_adapters(b: Checkpoint, paths: list[str], cast: str | None, allow_other_base: bool = False,
                   base_arg: str | None = None) -> list[Adapter]:
    """The adapters of ``paths`` validated against ``b`` (:func:`open_adapter`, which
    also checks each adapter's ``base_model_name_or_path`` against ``b``), or ``[]`` when none is an
    adapter directory; adapters and full checkpoints are not mixed in one diff."""
    flags = [_is_adapter(p) for p in paths]
    if not any(flags):
        return []
    if not all(flags):
        i, j = flags.index(False), flags.index(True)
        raise ValueError(f"checkpoints[{i}]: {paths[i]!r} is a full checkpoint but checkpoints[{j}] {paths[j]!r} is "
                         f"a LoRA adapter directory: diff adapters and full checkpoints in separate runs")
    if cast is not None:
        raise ValueError(f"cast: {cast!r} applies to two stored checkpoints; a LoRA adapter's ΔW = s·B·A is "
                         f"measured exactly from its factors (leave cast unset)")
    return [open_adapter(p, b, f"checkpoints[{i}]", allow_other_base=allow_other_base, base_arg=base_arg)
            for i, p in enumerate(paths)]


def _adapter_dense(a: Adapter, name: str, B: Any, ops: Any) -> Any:
    """``ΔW`` of a tensor an adapter stores whole (``modules_to_save``, trained bias) or updates by
    ``lora_bias``, as the dense diff computes it (float32 difference of the stored values)."""
    if name in a.bias_deltas:
        D = a.bias_delta(name)
        return torch.from_numpy(D).to(ops.dev) if ops.torch else D
    t = a.read_full(name)
    if not bool(torch.isfinite(t.to(torch.float64)).all()):
        raise ValueError(f"{a.label}: tensor {a.full[name]!r} in file {str(a.file)!r} holds non-finite values")
    x = t if t.dtype == torch.float64 else t.to(torch.float32)
    X = x.to(ops.dev) if ops.torch else x.numpy().copy()
    return ops.sub_(X, B)


def adapter_pass(run: DiffRun, runs: list[_Tally], adapters: list[Adapter], b: Checkpoint, names: list[str],
                 cross: dict[str, Any] | None) -> None:
    """The records of LoRA adapters, tensor by tensor: low-rank updates from their factors
    (:func:`_measure_low_rank`), full tensors with :func:`_measure`, the rest ΔW = 0.  The base
    is read once per tensor for ‖W_base‖ (:func:`analysis.stored_norm`, relative error ≲ 1e-6; the
    exact float64 path of the dense diff where it declines) and for the full tensors' difference."""
    from . import geometry_pass

    ops = run.ops
    n = len(runs)
    keep = n >= 2 or run.dynamics is not None
    if run.dynamics is not None:
        run.dynamics.check_adapters(adapters)
    for name in names:
        B = None   # the base as float, read only for a tensor an adapter stores whole (or for --geometry)
        base_l2 = stored_norm(b.read(name)) if b.info(name).is_float else None
        if base_l2 is None:
            B = ops.load(b, name)
            base_l2 = ops.stats(B, counts=False)[0]
        geometry = geometry_pass.applies(run, runs[0].pairs[name], b.config) and any(
            name in a.low_rank or name in a.full for a in adapters)
        ulp = geometry_pass.ulp_dtype(b.info(name).dtype, None) if geometry else None
        if geometry and B is None:
            with run.phase("read"):
                B = ops.load(b, name)
        upd: list[Any] = []
        for r, a in zip(runs, adapters):
            p = r.pairs[name]
            if name in a.dora:   # DoRA: W' − W is not low rank, formed in float64 and diffed densely
                if B is None:
                    B = ops.load(b, name)
                D = a.dora_update(name, B.cpu().numpy() if ops.torch else B)
                D = torch.from_numpy(D).to(ops.dev) if ops.torch else D
                if geometry:
                    with run.phase("geometry"):
                        geometry_pass.measure(run, r, p, B, B + D, ulp)
                _measure(run, r, p, D, base_l2)
                r.records[-1]["adapter_tensor"] = "dora"
                r.records[-1]["low_rank"] = dict(a.low_rank[name].info(), dora=True)
                upd.append((D.cpu().numpy() if ops.torch else D) if keep else None)
                del D
            elif name in a.low_rank:
                f = a.factors(name)
                if geometry:
                    with run.phase("geometry"):
                        geometry_pass.measure_low_rank(run, r, p, B, f, a.low_rank[name].info(), ulp)
                _measure_low_rank(run, r, p, f, a.low_rank[name].info(), base_l2)
                upd.append(f)
            elif name in a.full or name in a.bias_deltas:
                if B is None:
                    B = ops.load(b, name)
                if geometry and name in a.full:
                    x = a.read_full(name)
                    x = x if x.dtype == torch.float64 else x.to(torch.float32)
                    with run.phase("geometry"):
                        geometry_pass.measure(run, r, p, B, x.to(ops.dev) if ops.torch else x.numpy(), ulp)
                    del x
                D = _adapter_dense(a, name, B, ops)
                _measure(run, r, p, D, base_l2)
                r.records[-1]["adapter_tensor"] = "lora_bias" if name in a.bias_deltas else "full"
                upd.append((D.cpu().numpy() if ops.torch else D) if keep else None)
                del D
            else:
                _measure_low_rank(run, r, p, None, None, base_l2)
                upd.append(None)
            run.tick()
        del B
        if run.dynamics is not None:
            with run.phase("cross"):
                run.dynamics.adapter_tensor_done(runs, adapters, name, b.kind(name), upd)
        if cross is not None:
            sh = _shifts(runs)
            G = np.array([[low_rank_inner(x, y) for y in upd] for x in upd])
            with np.errstate(under="ignore"):
                cross[name] = (np.ldexp(G, -(np.array(sh)[:, None] + np.array(sh)[None, :])), sh)


def _low_rank_part(f: tuple[np.ndarray, np.ndarray, float], part: str, axis: int, a: int, z: int) -> dict[str, Any]:
    """Norm and SVD metrics of rows (``axis`` 0) or columns ``a:z`` of ``scale·L·R`` (still low rank)."""
    L, R, s = f
    sub = (L[a:z], R, s) if axis == 0 else (L, R[:, a:z], s)
    spec = low_rank_spectrum(*sub)
    shape = [z - a, R.shape[1]] if axis == 0 else [L.shape[0], z - a]
    out: dict[str, Any] = {"part": part, "axis": axis, "start": a, "stop": z, "shape": shape, "l2": spec.fro_norm,
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None}
    if spec.fro_norm > 0:
        out.update({"s1": float(spec.s[0]), "s2": float(spec.s[1]) if len(spec.s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec)})
    return out


def _measure_low_rank(run: DiffRun, r: _Tally, p: TensorPair, f: tuple[np.ndarray, np.ndarray, float] | None,
                      info: dict[str, Any] | None, base_l2: float) -> None:
    """The record of :func:`analysis.diff.measure._measure` for ``ΔW = scale·L·R`` given by its factors ``f`` (``None``:
    ΔW = 0): norm and spectrum from the QR core (:func:`analysis.low_rank_spectrum`), entry
    counts from float32 row blocks (:func:`analysis.low_rank_counts`)."""
    size = int(math.prod(p.compared_shape)) if p.compared_shape else 1
    is_head = p.kind == "head"
    two_d = len(p.shape) == 2 and min(p.compared_shape) >= 1 and (run.layers == "all" or is_head)
    full = is_head or run.full_spectrum
    spec = None
    if f is None:
        l2, cnt = 0.0, [0] * len(TOLERANCES)
    else:
        d = min(p.compared_shape)
        nv = 1 if (is_head or run.vectors) and two_d else 0
        spec = low_rank_spectrum(*f, None if full else min(run.top_k, d), n_vectors=nv)
        l2 = spec.fro_norm
        cnt = low_rank_counts(*f, run.ops.t32) if l2 > 0 else [0] * len(TOLERANCES)
    rec = _record(r, p, l2, base_l2, size, cnt)
    if info is not None:
        rec["low_rank"] = info
    if two_d:
        if spec is None or l2 == 0.0:
            rec["note"] = "unchanged (ΔW = 0): SVD metrics undefined"
        else:
            _fill_spectrum(r, p.name, rec, spec, full=full, is_head=is_head, top_k=run.top_k)
            parts = fused_parts(p.name, p.compared_shape, r.ck.config) if run.layers == "all" else None
            if parts and f is not None:
                rec["parts"] = [_low_rank_part(f, part, axis, a, z) for part, axis, a, z in parts]
    if len(p.shape) == 2 and is_conv1d(p.name, r.ck.config):
        rec["stored_transposed"] = True
    r.records.append(rec)


def adapter_notes(doc: dict[str, Any], adapters: list[Adapter], tallies: list[_Tally] | None = None) -> None:
    """Each adapter's summary (``checkpoints[i].adapter``) and what its numbers mean; with
    ``tallies`` (a diff with ``geometry=True``) its intruder dimensions
    (``checkpoints[i].adapter.intruders``, :func:`analysis.diff.geometry_pass.intruders`; ``None``
    without ``geometry``)."""
    from . import geometry_pass

    doc["settings"]["adapters"] = True
    for i_ck, (c, a) in enumerate(zip(doc["checkpoints"], adapters)):
        c["adapter"] = a.summary()
        c["adapter"]["intruders"] = geometry_pass.intruders(tallies[i_ck]) if tallies is not None else None
        i = a.identity
        c["base_identity"] = i["status"]
        c["base_identity_names"] = {"adapter_base_model_name_or_path": i["adapter_base"], "base": i["base"],
                                    "base_name_or_path": i["base_name_or_path"], "how": i["how"]}
        if i["status"] != "same":
            c["notes"].append(
                f"base identity: {i['status']}: the adapter names base {i['adapter_base']!r}, the base given is "
                f"{i['base']!r}" + (f" (config.json _name_or_path {i['base_name_or_path']!r})"
                                     if i["base_name_or_path"] else "") + f": {i['how']}"
                + (" (--allow-other-base): ΔW is read against another W than the adapter was trained on"
                   if i["status"] == "other (allowed)" else ""))
        c["dtype_differs"] = False
        ranks = ", ".join(str(x) for x in c["adapter"]["ranks"]) or "—"
        c["notes"].append(
            f"LoRA adapter ({a.adapter_config.get('peft_type')}, rank {ranks}, lora_alpha "
            f"{a.adapter_config.get('lora_alpha')}{', rsLoRA' if a.adapter_config.get('use_rslora') else ''}): "
            f"ΔW = s·B·A of {len(a.low_rank) - len(a.dora)} weights measured from the factors without forming ΔW "
            f"(spectrum from the QR core, exact); densities count the entries of s·B·A in float32 row blocks; "
            f"{len(a.dora)} DoRA weights (W' = diag(m/‖W + s·B·A‖_row)·(W + s·B·A), not low rank) formed in float64 "
            f"and diffed densely; "
            f"{len(a.full)} full tensors (modules_to_save, trained biases) and {len(a.bias_deltas)} lora_bias "
            f"updates diffed densely; every other tensor has ΔW = 0. This is the exact update: a checkpoint "
            f"merged in bfloat16 rounds W + s·B·A, which shifts small entries and the densities.")
