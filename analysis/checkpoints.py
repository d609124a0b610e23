"""Hugging Face checkpoint directories, read one tensor at a time (DESIGN.md ``analysis.checkpoints``).

A checkpoint directory holds ``config.json`` and either ``model.safetensors`` or shards
``model-0000k-of-0000n.safetensors`` listed in ``model.safetensors.index.json`` (what
``save_pretrained`` writes), in bfloat16, float16, float32 or float64 (float8 is read too).
:class:`Checkpoint` validates the directory and every safetensors header when it is
opened (so a truncated or corrupt file is refused before any work), then streams tensors
one at a time with ``safetensors.safe_open(..., framework="pt")``; nothing keeps a whole
model in memory.

Architecture-independent naming:

* :func:`layer_index` — the block index of a tensor (``model.layers.7.mlp.up_proj.weight`` → 7,
  ``transformer.h.3.attn.c_attn.weight`` → 3, ``gpt_neox.layers.2...`` → 2); ``None`` outside
  the blocks;
* :func:`find_output_head` — the output head: ``lm_head.weight`` (also under a prefix, e.g.
  ``language_model.lm_head.weight``), ``embed_out.weight`` (GPT-NeoX), ``output.weight``; with
  tied embeddings (``tie_word_embeddings``, GPT-2, Qwen2.5-0.5B, Gemma) the input embedding
  ``model.embed_tokens.weight`` / ``transformer.wte.weight`` / ... which then *is* the head;
* :func:`tensor_kind` — ``"head"``, ``"embedding"``, ``"block"`` or ``"other"`` (final norm, ...);
* :func:`fused_parts` — the parts of a fused projection where the config gives the split
  (Phi-3 ``qkv_proj`` → q/k/v and ``gate_up_proj`` → gate/up along the rows; GPT-2's Conv1D
  ``c_attn`` → q/k/v along the columns, Conv1D weights being stored ``in × out``).
* mixture of experts: :func:`moe_tensor` — a routed expert's weight (``...experts.J.gate_proj.weight``,
  Mixtral's ``block_sparse_moe.experts.J.w1/w2/w3``), a fused 3-D expert tensor (``...experts.gate_up_proj``
  of shape ``E × 2f × d`` or ``E × d × 2f``: one matrix per expert), a router (``...mlp.gate.weight``)
  or a shared expert; :func:`expert_parts` splits a fused ``gate_up_proj`` expert matrix;
  :func:`check_expert_counts` refuses a pair whose expert counts differ.

Folder layouts (:func:`resolve_checkpoint_dir`): a Hugging Face directory itself; verl's
``global_step_N`` whose ``actor/huggingface`` (merged) or ``actor`` holds one; verl's FSDP
shards (``actor/model_world_size_W_rank_R.pt`` beside ``actor/huggingface/config.json``), read
directly without merging (:class:`_FsdpShards`: weights-only loads with DTensor's classes
allow-listed, DTensor ``Shard(dim)`` / ``Replicate`` shards and replicated plain tensors put
back as verl's merger does, bit for bit, each tensor read from the files when asked for).  A
shard directory it cannot read (a missing rank, another class in the pickle, an unknown
placement, ...) is refused, naming what is wrong, with the verl command that merges it
(:func:`verl_merge_command`).

:func:`load_causal_lm` loads a checkpoint as a transformers causal LM (local files only, never
remote code) for the analyses that run the model (hidden states, policy KL).

Every refusal is a ``ValueError`` whose message starts with the label of the checkpoint
(the argument name of the caller, e.g. ``base`` or ``checkpoints[1]``) and names the file
and the tensor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "TensorInfo",
    "Checkpoint",
    "open_checkpoint",
    "is_checkpoint_dir",
    "layer_index",
    "find_output_head",
    "tensor_kind",
    "FLOAT_DTYPES",
    "TensorPair",
    "pair_tensors",
    "has_tokenizer",
    "load_tokenizer",
    "load_causal_lm",
    "tokenizer_size",
    "DTYPE_NAMES",
    "fused_parts",
    "is_conv1d",
    "resolve_checkpoint_dir",
    "verl_merge_command",
    "MoeTensor",
    "moe_tensor",
    "expert_count",
    "expert_parts",
    "check_expert_counts",
    "EXPERT_COUNT_KEYS",
]

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
#: safetensors dtype strings read as floating-point weights
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E5M2")

#: safetensors dtype string -> torch dtype name
DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_FSDP_RE = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")
_FSDP_CONFIG = "fsdp_config.json"

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")
_HEAD_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight")
_EMBED_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight",
                   "tok_embeddings.weight", "embeddings.weight")


def layer_index(name: str) -> int | None:
    """Block index of a tensor name, or ``None`` for tensors outside the transformer blocks.

    Matches ``...layers.N.``, ``...layer.N.``, ``...h.N.`` (GPT-2), ``...blocks.N.``, the
    first occurrence.
    """
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def _text_config(config: dict) -> dict:
    """The language-model part of a config (multimodal configs nest it in ``text_config``)."""
    tc = config.get("text_config")
    return tc if isinstance(tc, dict) else config


def _tied(config: dict) -> bool:
    for c in (config, _text_config(config)):
        if "tie_word_embeddings" in c:
            return bool(c["tie_word_embeddings"])
    # transformers' PretrainedConfig default is True (GPT-2 and most small models rely on it)
    return True


def find_output_head(names: Iterable[str], config: dict) -> tuple[str | None, bool]:
    """``(name, tied)`` of the output-head weight among ``names``.

    An explicit head (``lm_head.weight``, ``embed_out.weight``, ``output.weight``, possibly
    under a prefix) wins; otherwise, with tied embeddings (``config["tie_word_embeddings"]``,
    default ``True`` as in transformers) the input embedding matrix is the head
    (``tied=True``).  ``(None, False)`` if neither is found.

    Examples
    --------
    >>> find_output_head(["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"], {})
    ('lm_head.weight', False)
    >>> find_output_head(["transformer.wte.weight", "transformer.h.0.attn.c_attn.weight"], {})   # GPT-2: tied
    ('transformer.wte.weight', True)
    >>> find_output_head(["model.embed_tokens.weight"], {"tie_word_embeddings": False})
    (None, False)
    """
    names = list(names)
    for h in _HEAD_NAMES:
        for n in names:
            if n == h or n.endswith("." + h) and layer_index(n) is None:
                return n, False
    emb = _find_embedding(names)
    if emb is not None and _tied(config):
        return emb, True
    return None, False


def _find_embedding(names: list[str]) -> str | None:
    for suf in _EMBED_SUFFIXES:
        for n in names:
            if (n == suf or n.endswith("." + suf)) and layer_index(n) is None:
                return n
    return None


def tensor_kind(name: str, head: str | None, ndim: int = 2) -> str:
    """``"head"``, ``"embedding"``, ``"block"`` or ``"other"`` for a tensor name."""
    if name == head:
        return "head"
    if layer_index(name) is not None:
        return "block"
    low = name.lower()
    if ndim == 2 and ("embed" in low or low.endswith("wte.weight") or low.endswith("wpe.weight")):
        return "embedding"
    return "other"


_CONV1D_TYPES = ("gpt2",)
_CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight",
                    "attn.q_attn.weight")


def is_conv1d(name: str, config: dict) -> bool:
    """Whether a 2-D weight is a GPT-2 ``Conv1D`` weight, stored transposed (``in × out``)."""
    return config.get("model_type") in _CONV1D_TYPES and name.endswith(_CONV1D_SUFFIXES)


def fused_parts(name: str, shape: tuple[int, ...], config: dict) -> list[tuple[str, int, int, int]] | None:
    """The parts of a fused projection as ``[(part, axis, start, stop)]``, or ``None``.

    Only where the config gives the split and the sizes add up to the stored shape:
    ``*.qkv_proj.weight`` (Phi-3: rows ``q`` = heads·head_dim, ``k``, ``v`` = kv_heads·head_dim);
    a 2-D ``*.gate_up_proj.weight`` (Phi-3: rows ``gate`` then ``up``, halves); GPT-2's Conv1D
    ``*.attn.c_attn.weight`` (``in × 3·n_embd``: columns ``q``, ``k``, ``v``).

    Examples
    --------
    >>> cfg = {"model_type": "phi3", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}
    >>> fused_parts("model.layers.0.self_attn.qkv_proj.weight", (64, 32), cfg)
    [('q', 0, 0, 32), ('k', 0, 32, 48), ('v', 0, 48, 64)]
    >>> fused_parts("model.layers.0.mlp.gate_up_proj.weight", (96, 32), cfg)
    [('gate', 0, 0, 48), ('up', 0, 48, 96)]
    >>> fused_parts("transformer.h.0.attn.c_attn.weight", (16, 48), {"model_type": "gpt2", "n_embd": 16})
    [('q', 1, 0, 16), ('k', 1, 16, 32), ('v', 1, 32, 48)]
    """
    if len(shape) != 2:
        return None
    c = _text_config(config)
    if name.endswith("qkv_proj.weight"):
        nh, d = c.get("num_attention_heads"), c.get("hidden_size")
        nkv = c.get("num_key_value_heads") or nh
        hd = c.get("head_dim") or (d // nh if isinstance(d, int) and isinstance(nh, int) and nh else None)
        if not all(isinstance(x, int) and x > 0 for x in (nh, nkv, hd)):
            return None
        q, kv = nh * hd, nkv * hd
        if q + 2 * kv != shape[0]:
            return None
        return [("q", 0, 0, q), ("k", 0, q, q + kv), ("v", 0, q + kv, q + 2 * kv)]
    if name.endswith("gate_up_proj.weight"):
        if shape[0] % 2:
            return None
        h = shape[0] // 2
        return [("gate", 0, 0, h), ("up", 0, h, 2 * h)]
    if is_conv1d(name, config) and name.endswith("attn.c_attn.weight"):
        d = c.get("n_embd") or c.get("hidden_size")
        if not isinstance(d, int) or shape[1] != 3 * d:
            return None
        return [("q", 1, 0, d), ("k", 1, d, 2 * d), ("v", 1, 2 * d, 3 * d)]
    return None


# ------------------------------------------------------------ mixture of experts
#: config keys holding the number of routed experts of an MoE layer (first found, text config first)
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_EXPERT_RE = re.compile(r"(?:^|\.)experts\.(\d+)\.(.+)$")
_FUSED_EXPERTS_RE = re.compile(r"(?:^|\.)experts\.([A-Za-z_]\w*?)(?:\.weight)?$")
_SHARED_RE = re.compile(r"(?:^|\.)shared_experts?\.(.+)$")
_ROUTER_RE = re.compile(r"(?:^|\.)(?:mlp|block_sparse_moe|feed_forward|moe)\.(?:gate|router)(?:\.layer)?"
                        r"\.(?:weight|bias|e_score_correction_bias)$")
_SHARED_GATE_RE = re.compile(r"(?:^|\.)shared_experts?_gate\.weight$")
#: stored projection names -> canonical ones (Mixtral's w1/w3/w2 are gate/up/down; GraniteMoE's fused
#: input_linear/output_linear are gate_up/down)
_PROJECTIONS = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj", "input_linear": "gate_up_proj",
                "output_linear": "down_proj"}
#: model types whose fused expert tensors are stored experts × in × out (gate/up along the columns)
_EXPERTS_IN_OUT = ("llama4", "llama4_text", "qwen3_vl_moe", "qwen3_vl_moe_text", "gpt_oss")
#: ... and whose gate/up columns alternate (gate = columns 0, 2, 4, ..., up = 1, 3, 5, ...)
_EXPERTS_INTERLEAVED = ("gpt_oss",)


@dataclass(frozen=True)
class MoeTensor:
    """The mixture-of-experts role of a tensor (:func:`moe_tensor`).

    ``role``: ``"expert"`` (a routed expert's weight, or a fused tensor of all of them),
    ``"router"`` (the gate that scores the experts) or ``"shared_expert"`` (always active);
    ``expert``: the index ``J`` of a per-expert tensor (``...experts.J...``), ``None`` otherwise;
    ``projection``: the canonical projection (``gate_proj``, ``up_proj``, ``down_proj``,
    ``gate_up_proj``; a router's is ``"router"``); ``fused``: a 3-D tensor holding every
    expert along its first axis.
    """

    role: str
    expert: int | None
    projection: str | None
    fused: bool


def expert_count(config: dict) -> int | None:
    """The number of routed experts per MoE layer from a config (``num_experts``,
    ``num_local_experts``, ``n_routed_experts``, ``moe_num_experts``), ``None`` for a dense model.

    >>> expert_count({"model_type": "mixtral", "num_local_experts": 8}), expert_count({"model_type": "llama"})
    (8, None)
    """
    for c in (_text_config(config), config):
        for k in EXPERT_COUNT_KEYS:
            v = c.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def _projection(rest: str) -> str:
    p = rest[:-len(".weight")] if rest.endswith(".weight") else rest
    return _PROJECTIONS.get(p, p)


def moe_tensor(name: str, shape: tuple[int, ...], config: dict) -> MoeTensor | None:
    """The mixture-of-experts role of tensor ``name`` (:class:`MoeTensor`), ``None`` for others.

    Per-expert tensors ``...experts.J.PROJ.weight`` (Qwen-MoE, OLMoE, DeepSeek; Mixtral's
    ``block_sparse_moe.experts.J.w1/w2/w3``); fused 3-D expert tensors (``...experts.gate_up_proj``,
    ``...experts.down_proj``, any 3-D weight inside a block: one matrix per expert along the first
    axis); routers ``...mlp.gate.weight``, ``...block_sparse_moe.gate.weight``, ``...router.weight``
    (and Qwen2-MoE's ``shared_expert_gate``) when the config names an expert count; shared experts
    ``...shared_expert.*`` / ``...shared_experts.*``.

    Examples
    --------
    >>> cfg = {"model_type": "qwen3_moe", "num_experts": 4}
    >>> moe_tensor("model.layers.1.mlp.experts.3.gate_proj.weight", (16, 32), cfg)
    MoeTensor(role='expert', expert=3, projection='gate_proj', fused=False)
    >>> moe_tensor("model.layers.1.block_sparse_moe.experts.0.w2.weight", (32, 48), cfg).projection
    'down_proj'
    >>> moe_tensor("model.layers.1.mlp.experts.gate_up_proj", (4, 32, 32), cfg)
    MoeTensor(role='expert', expert=None, projection='gate_up_proj', fused=True)
    >>> moe_tensor("model.layers.1.mlp.gate.weight", (4, 32), cfg).role
    'router'
    >>> moe_tensor("model.layers.1.mlp.shared_expert.up_proj.weight", (24, 32), cfg).role
    'shared_expert'
    >>> moe_tensor("model.layers.1.mlp.gate_proj.weight", (48, 32), cfg) is None
    True
    """
    m = _EXPERT_RE.search(name)
    if m:
        return MoeTensor("expert", int(m.group(1)), _projection(m.group(2)), False)
    m = _SHARED_RE.search(name)
    if m:
        return MoeTensor("shared_expert", None, _projection(m.group(1)), False)
    m = _FUSED_EXPERTS_RE.search(name)
    if m and len(shape) >= 2:
        return MoeTensor("expert", None, _projection(m.group(1)), len(shape) == 3)
    if len(shape) == 3 and layer_index(name) is not None:
        last = name.split(".")[-2] if name.endswith(".weight") else name.split(".")[-1]
        return MoeTensor("expert", None, _projection(last), True)
    if expert_count(config) is not None:
        if _SHARED_GATE_RE.search(name):
            return MoeTensor("router", None, "shared_expert_gate", False)
        if _ROUTER_RE.search(name):
            return MoeTensor("router", None, "router", False)
    return None


def expert_parts(name: str, shape: tuple[int, ...], config: dict) -> list[tuple[str, int, int, int, int]] | None:
    """The gate and up parts of one expert matrix of a fused 3-D ``gate_up_proj`` tensor of
    shape ``(E, a, b)``, as ``[(projection, axis, start, stop, step)]`` of the expert's ``a × b``
    matrix; ``None`` for other tensors or when the layout cannot be told.

    Layouts: transformers' ``E × 2f × d`` (gate rows then up rows, Qwen-MoE and Mixtral as
    loaded); ``E × d × 2f`` (gate then up columns: Llama 4, Qwen3-VL-MoE on disk); GPT-OSS
    ``E × d × 2f`` with alternating columns.  ``d`` is the config's ``hidden_size``; when
    ``a = b = d`` the model type decides (``E × 2f × d`` unless it is one of the column layouts).

    Examples
    --------
    >>> cfg = {"model_type": "mixtral", "hidden_size": 32, "num_local_experts": 4}
    >>> expert_parts("model.layers.0.mlp.experts.gate_up_proj", (4, 96, 32), cfg)
    [('gate_proj', 0, 0, 48, 1), ('up_proj', 0, 48, 96, 1)]
    >>> expert_parts("model.layers.0.mlp.experts.gate_up_proj", (4, 32, 96), cfg)
    [('gate_proj', 1, 0, 48, 1), ('up_proj', 1, 48, 96, 1)]
    >>> expert_parts("model.layers.0.mlp.experts.down_proj", (4, 32, 48), cfg) is None
    True
    """
    mt = moe_tensor(name, shape, config)
    if mt is None or not mt.fused or mt.projection != "gate_up_proj" or len(shape) != 3:
        return None
    c = _text_config(config)
    d = c.get("hidden_size")
    mtype = c.get("model_type") or config.get("model_type")
    a, b = shape[1], shape[2]
    if isinstance(d, int) and a == b == d:
        axis = 1 if mtype in _EXPERTS_IN_OUT else 0
    elif isinstance(d, int) and b == d:
        axis = 0
    elif isinstance(d, int) and a == d:
        axis = 1
    else:
        return None
    n = shape[1 + axis]
    if n % 2:
        return None
    if mtype in _EXPERTS_INTERLEAVED:
        return [("gate_proj", axis, 0, n, 2), ("up_proj", axis, 1, n, 2)]
    h = n // 2
    return [("gate_proj", axis, 0, h, 1), ("up_proj", axis, h, n, 1)]


def check_expert_counts(base: Checkpoint, other: Checkpoint) -> None:
    """Refuse an MoE pair whose expert counts differ, naming a tensor and its files.

    Compared: the experts present per MoE module (``...experts.J...`` names), the leading
    dimension of every fused expert tensor and the rows of every router, then the configs'
    expert counts (:data:`EXPERT_COUNT_KEYS`).  The message starts with ``other.label``.
    """
    def per_expert(ck: Checkpoint) -> dict[str, dict[int, str]]:
        out: dict[str, dict[int, str]] = {}
        for n, t in ck.tensors.items():
            mt = moe_tensor(n, t.shape, ck.config)
            if t.is_float and mt is not None and mt.expert is not None:
                m = _EXPERT_RE.search(n)
                assert m is not None
                out.setdefault(n[:m.start(1)], {}).setdefault(mt.expert, n)
        return out

    why = "MoE pairs with different expert counts cannot be compared"
    xb, xo = per_expert(base), per_expert(other)
    for mod in sorted(set(xb) | set(xo)):
        ib, io = xb.get(mod, {}), xo.get(mod, {})
        if set(ib) == set(io):
            continue
        counts = f"{mod}* holds {len(io)} experts in checkpoint {str(other.path)!r} and {len(ib)} in base"
        extra = sorted(set(io) - set(ib))
        if extra:
            n = io[extra[0]]
            raise ValueError(f"{other.label}: expert counts differ: tensor {n!r} (expert {extra[0]}) in file "
                             f"{str(other.tensors[n].file)!r} is not in base {str(base.path)!r}; {counts}: {why}")
        n = ib[sorted(set(ib) - set(io))[0]]
        raise ValueError(f"{other.label}: expert counts differ: tensor {n!r} (in base file "
                         f"{str(base.tensors[n].file)!r}) is missing from checkpoint {str(other.path)!r}; "
                         f"{counts}: {why}")
    for n, tb in base.tensors.items():
        to = other.tensors.get(n)
        mt = moe_tensor(n, tb.shape, base.config)
        if to is None or mt is None or not tb.shape or not to.shape or tb.shape[0] == to.shape[0]:
            continue
        if (mt.role == "expert" and mt.expert is None) or mt.projection == "router":
            what = "experts (leading dimension)" if mt.role == "expert" else "experts (router rows)"
            raise ValueError(f"{other.label}: expert counts differ: tensor {n!r} holds {to.shape[0]} {what}, shape "
                             f"{tuple(to.shape)} in file {str(to.file)!r}, but {tb.shape[0]}, shape "
                             f"{tuple(tb.shape)} in base file {str(tb.file)!r}: {why}")
    eb, eo = expert_count(base.config), expert_count(other.config)
    if eb is not None and eo is not None and eb != eo:
        named = [n for n, t in base.tensors.items() if moe_tensor(n, t.shape, base.config) is not None]
        key = next(k for c in (_text_config(other.config), other.config) for k in EXPERT_COUNT_KEYS
                   if isinstance(c.get(k), int) and not isinstance(c.get(k), bool))
        tname = f" (tensor {named[0]!r} and the other MoE tensors)" if named else ""
        raise ValueError(f"{other.label}: expert counts differ: {key} = {eo} in "
                         f"{str(other.path / 'config.json')!r} but {eb} in base "
                         f"{str(base.path / 'config.json')!r}{tname}: {why}")


def verl_merge_command(actor_dir: str | Path) -> str:
    """The verl (0.9) command that merges an FSDP shard directory into a Hugging Face one
    (``ACTOR/huggingface``, beside the config and tokenizer verl saved there).

    Examples
    --------
    >>> verl_merge_command("run/global_step_20/actor")
    'python -m verl.model_merger merge --backend fsdp --local_dir run/global_step_20/actor --target_dir run/global_step_20/actor/huggingface'
    """
    a = str(actor_dir).rstrip("/")
    return f"python -m verl.model_merger merge --backend fsdp --local_dir {a} --target_dir {a}/huggingface"


def _fsdp_shards(p: Path) -> list[str]:
    try:
        return sorted((x.name for x in p.iterdir() if _FSDP_RE.fullmatch(x.name)),
                      key=lambda n: tuple(int(g) for g in _FSDP_RE.fullmatch(n).groups()))
    except OSError:
        return []


def _fsdp_refusal(label: str, given: Path, actor: Path, reason: str) -> ValueError:
    """The refusal of a verl FSDP shard directory that is not read directly: the shards, why,
    and verl's merge command (:func:`verl_merge_command`)."""
    shards = _fsdp_shards(actor)
    first = shards[0] if shards else "model_world_size_W_rank_R.pt"
    more = f" and {len(shards) - 1} more" if len(shards) > 1 else ""
    return ValueError(f"{label}: {str(given)!r} is a verl FSDP checkpoint ({first}{more} in {str(actor)!r}: "
                      f"sharded torch state, not a Hugging Face directory) that cannot be read directly: "
                      f"{reason}; merge it to Hugging Face format first: {verl_merge_command(actor)}")


def _fsdp_layout_problem(actor: Path) -> str | None:
    """What makes the shard files of ``actor`` unreadable as one verl FSDP checkpoint, before
    any of them is loaded (``None`` when nothing): several world sizes, a missing rank, a world
    size other than ``fsdp_config.json``'s, no ``huggingface/config.json``, a file that is not a
    torch archive (zip)."""
    names = _fsdp_shards(actor)
    sizes = sorted({int(_FSDP_RE.fullmatch(n).group(1)) for n in names})
    if len(sizes) > 1:
        return (f"shards of several world sizes ({', '.join(map(str, sizes))}) in one directory: leftovers of "
                f"another run")
    w = sizes[0]
    ranks = {int(_FSDP_RE.fullmatch(n).group(2)) for n in names}
    missing = [r for r in range(w) if r not in ranks]
    if missing:
        extra = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return f"shard model_world_size_{w}_rank_{missing[0]}.pt{extra} is missing (world size {w}: ranks 0 to {w - 1})"
    stray = sorted(r for r in ranks if r >= w)
    if stray:
        return f"shard model_world_size_{w}_rank_{stray[0]}.pt is beyond world size {w}"
    cfg = actor / _FSDP_CONFIG
    if cfg.is_file():
        try:
            doc = json.loads(cfg.read_text())
            ws = doc.get("world_size") if isinstance(doc, dict) else None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return f"file {str(cfg)!r} is not valid JSON"
        if ws is not None and ws != w:
            return f"{_FSDP_CONFIG} says world_size {ws!r} but the shards are of world size {w}"
    if not (actor / "huggingface" / "config.json").is_file():
        return ("no huggingface/config.json beside the shards (verl saves the model's config there; it names "
                "the architecture)")
    for n in names:
        if not zipfile.is_zipfile(actor / n):
            return f"file {n} is not a torch archive (a zip file written by torch.save): truncated or corrupt"
    return None


def _fsdp_actor(p: Path) -> Path | None:
    """The verl ``actor`` directory whose FSDP shards the (weightless) ``huggingface`` folder
    ``p`` sits beside, or ``None``."""
    if p.name == "huggingface" and not (p / SINGLE).is_file() and not (p / INDEX).is_file() \
            and _fsdp_shards(p.parent):
        return p.parent
    return None


def resolve_checkpoint_dir(path: str | Path, label: str = "checkpoint") -> Path:
    """The checkpoint directory that ``path`` designates.

    ``path`` itself when it holds ``config.json`` and safetensors weights; for a verl
    ``global_step_N`` (or its ``actor``) directory, the merged ``actor/huggingface`` or an
    ``actor`` that is itself a Hugging Face directory.  A verl FSDP shard directory
    (``model_world_size_W_rank_R.pt`` in ``path``, its ``actor``, or beside a weightless
    ``huggingface`` folder) resolves to ``ACTOR/huggingface`` (the config and tokenizer verl
    saved; :class:`Checkpoint` reads the shards beside it, and it is where
    :func:`verl_merge_command` would write the merged model) when the shard set is complete,
    and is refused with the command that merges it otherwise (a missing rank, several world
    sizes, no ``huggingface/config.json``, a file that is no torch archive).  Anything else is
    returned unchanged (and refused by :class:`Checkpoint` with its own message).
    """
    p = Path(path)
    if is_checkpoint_dir(p) or not p.is_dir():
        return p
    for cand in (p / "actor" / "huggingface", p / "actor", p / "huggingface"):
        if is_checkpoint_dir(cand):
            return cand
    for actor in (p, p / "actor", p.parent if p.name == "huggingface" else None):
        if actor is not None and actor.is_dir() and _fsdp_shards(actor):
            problem = _fsdp_layout_problem(actor)
            if problem is not None:
                raise _fsdp_refusal(label, p, actor, problem)
            return actor / "huggingface"
    return p


# ------------------------------------------------------- verl FSDP shards
def _dtensor_globals() -> list[Any]:
    """The classes a weights-only load of a DTensor state dict needs (allow-listed, nothing else):
    DTensor, its spec and tensor metadata, the device mesh and the placements.  Partial and
    _StridedShard are loaded so that they can be refused by name (:class:`_FsdpShards`)."""
    try:
        from torch.distributed import tensor as dt
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import _dtensor_spec as spec
        from torch.distributed.tensor import placement_types as pt
    except ImportError:  # a torch without distributed support: plain tensors only
        return []
    names = ((spec, "DTensorSpec"), (spec, "TensorMeta"), (spec, "ShardOrderEntry"), (pt, "Shard"),
             (pt, "Replicate"), (pt, "Partial"), (pt, "_StridedShard"))
    from torch.distributed import device_mesh as dm
    names += ((dm, "_MeshLayout"), (dm, "_FlatLayout"))          # the mesh's layout (recent torch)
    return [dt.DTensor, DeviceMesh] + [getattr(m, n) for m, n in names if hasattr(m, n)]


class _QuietMesh(logging.Filter):
    """Drops torch's warning that a DeviceMesh was unpickled without its process groups (true,
    and irrelevant here: the mesh is only read for its shape and the rank's coordinate)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "DeviceMesh" not in record.getMessage()


@contextlib.contextmanager
def _weights_only_dtensors():
    log = logging.getLogger("torch.distributed.device_mesh")
    quiet = _QuietMesh()
    log.addFilter(quiet)
    safe = getattr(torch.serialization, "safe_globals", None)
    # only the classes not yet allow-listed: leaving the context removes what it added, and torch
    # allow-lists DTensor's classes itself when torch.distributed.tensor is imported
    have = set(getattr(torch.serialization, "get_safe_globals", list)())
    need = [c for c in _dtensor_globals() if c not in have]
    try:
        with (safe(need) if safe is not None and need else contextlib.nullcontext()):
            yield
    finally:
        log.removeFilter(quiet)


@dataclass(frozen=True)
class _Local:
    """One rank's entry of a shard file: a DTensor's local shard or a plain tensor, where its
    bytes lie in the file (``pos``: of element 0 of the view) and how they are laid out."""

    dtensor: bool
    dtype: torch.dtype
    shape: tuple[int, ...]          # the global shape (a DTensor's) or the tensor's own
    local: tuple[int, ...]
    stride: tuple[int, ...]
    pos: int
    contiguous: bool
    placements: tuple[Any, ...] = ()
    mesh: tuple[int, ...] = ()
    coord: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Piece:
    """A local shard placed in the assembled tensor: its file, bytes and global offset ``at``."""

    file: Path
    pos: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    contiguous: bool
    at: tuple[int, ...]


_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_INT_ST = {"int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def _st_dtype(dtype: torch.dtype) -> str:
    """The safetensors dtype string of a torch dtype (``torch.bfloat16`` → ``"BF16"``)."""
    name = str(dtype).removeprefix("torch.")
    for st, tn in DTYPE_NAMES.items():
        if tn == name:
            return st
    return _INT_ST.get(name, name.upper())


class _FsdpShards:
    """The tensors of a verl FSDP checkpoint (``ACTOR/model_world_size_W_rank_R.pt``), read
    without merging.

    Opening loads every shard's pickle with ``torch.load(map_location="meta",
    weights_only=True)`` and only DTensor's classes allow-listed: no tensor data is read, and
    each storage's byte offset in the file comes with it.  An entry is a DTensor (FSDP1 with
    a device mesh, FSDP2: placements ``Shard(dim)`` / ``Replicate`` on a 1-D or 2-D mesh) whose
    local shards are put back in mesh order, nested concatenation along each sharded dim — what
    verl's model merger does — or a plain tensor, which every rank must hold identically (one
    copy is read, as the merger keeps).  :meth:`read` reads the bytes of the pieces it needs
    straight into the result (rows ``start:stop`` touch only the pieces holding them), so that
    memory stays at one tensor.  Anything else is refused by ``refuse(reason)``.
    """

    def __init__(self, actor: Path, label: str, refuse: Callable[[str], ValueError]):
        self.actor = actor
        self.label = label
        names = _fsdp_shards(actor)
        self.files = [actor / n for n in names]
        per_rank = [self._load(f, refuse) for f in self.files]
        keys = list(per_rank[0])
        for r, d in enumerate(per_rank[1:], start=1):
            only0, only_r = sorted(set(keys) - set(d)), sorted(set(d) - set(keys))
            if only0:
                raise refuse(f"tensor {only0[0]!r} is in rank 0's shard but not in rank {r}'s")
            if only_r:
                raise refuse(f"tensor {only_r[0]!r} is in rank {r}'s shard but not in rank 0's")
        self.entries: dict[str, tuple[torch.dtype, tuple[int, ...], tuple[_Piece, ...]]] = {}
        plain: list[str] = []
        for k in keys:
            locs = [d[k] for d in per_rank]
            name = k
            for w in _WRAPPER_PARTS:
                name = name.replace(w, "")
            if locs[0].dtensor:
                self.entries[name] = self._assemble(k, locs, refuse)
            else:
                self.entries[name] = self._plain(k, locs, refuse)
                plain.append(name)
        lora = [k for k in self.entries if "lora_" in k]
        if lora:
            raise refuse(f"the shards hold LoRA adapter weights (e.g. {lora[0]!r}), which are read from the "
                         f"adapter directory the merger writes, not from the shards")
        self._check_replicated(plain, refuse)

    # ------------------------------------------------------------ opening
    def _load(self, file: Path, refuse: Callable[[str], ValueError]) -> dict[str, _Local]:
        import pickle
        try:
            with _weights_only_dtensors():
                sd = torch.load(file, map_location="meta", weights_only=True)
        except pickle.UnpicklingError as err:
            m = re.search(r"GLOBAL ([\w.]+)", str(err))
            detail = re.search(r"WeightsUnpickler error: ([^\n]*)", str(err))
            what = (f"class {m.group(1)}" if m else
                    f"more than tensors ({detail.group(1) if detail else str(err).splitlines()[0]})")
            raise refuse(f"file {file.name} needs {what}, which a weights-only load does not allow (only tensors "
                         f"and DTensors, with their placements and device mesh, are read)") from None
        except Exception as err:  # RuntimeError (zip), EOFError, OSError
            raise refuse(f"file {file.name} could not be read (truncated or corrupt torch file): {err}") from None
        with zipfile.ZipFile(file) as z:
            order = [n for n in z.namelist() if n.endswith("/byteorder")]
            if order and z.read(order[0]).decode(errors="replace").strip() != sys.byteorder:
                raise refuse(f"file {file.name} was written on a {z.read(order[0]).decode(errors='replace')}-endian "
                             f"machine")
        if not isinstance(sd, dict) or not sd:
            raise refuse(f"file {file.name} holds a {type(sd).__name__}, not a state dict of tensors")
        size = file.stat().st_size
        out: dict[str, _Local] = {}
        for k, v in sd.items():
            if not isinstance(k, str) or not isinstance(v, torch.Tensor):
                raise refuse(f"entry {k!r} of file {file.name} is a {type(v).__name__}, not a tensor")
            out[k] = self._local(file, k, v, size, refuse)
        return out

    @staticmethod
    def _local(file: Path, key: str, v: torch.Tensor, size: int, refuse: Callable[[str], ValueError]) -> _Local:
        try:
            from torch.distributed.tensor import DTensor
            dtensor = isinstance(v, DTensor)
        except ImportError:
            dtensor = False
        t = v._local_tensor if dtensor else v
        st = t.untyped_storage()
        off = getattr(st, "_checkpoint_offset", None)
        if off is None:
            raise refuse(f"this torch ({torch.__version__}) does not give the storages' offsets in file "
                         f"{file.name} (tensor {key!r})")
        item = t.element_size()
        if any(s < 0 for s in t.stride()):
            raise refuse(f"tensor {key!r} in file {file.name} has negative strides")
        span = 0 if t.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        end = (t.storage_offset() + span) * item
        if end > st.nbytes() or off + st.nbytes() > size:
            raise refuse(f"tensor {key!r} lies beyond the end of file {file.name} (truncated or corrupt)")
        common = dict(dtype=t.dtype, local=tuple(t.shape), stride=tuple(t.stride()),
                      pos=off + t.storage_offset() * item, contiguous=t.is_contiguous())
        if not dtensor:
            return _Local(False, shape=tuple(t.shape), **common)
        mesh = v.device_mesh
        coord = mesh.get_coordinate()
        if coord is None:
            raise refuse(f"the rank of file {file.name} is not in the device mesh of tensor {key!r}")
        return _Local(True, shape=tuple(v.shape), placements=tuple(v.placements), mesh=tuple(mesh.shape),
                      coord=tuple(int(c) for c in coord), **common)

    def _assemble(self, key: str, locs: list[_Local], refuse: Callable[[str], ValueError]
                  ) -> tuple[torch.dtype, tuple[int, ...], tuple[_Piece, ...]]:
        from torch.distributed.tensor import Replicate, Shard
        a = locs[0]
        for r, x in enumerate(locs):
            if not x.dtensor:
                raise refuse(f"tensor {key!r} is a DTensor on rank 0 but a plain tensor on rank {r}")
            if (x.placements, x.mesh, x.shape, x.dtype) != (a.placements, a.mesh, a.shape, a.dtype):
                raise refuse(f"tensor {key!r} has placements {x.placements}, mesh {x.mesh}, shape {x.shape}, "
                             f"{x.dtype} on rank {r} but {a.placements}, {a.mesh}, {a.shape}, {a.dtype} on rank 0")
        for p in a.placements:
            if type(p) not in (Shard, Replicate):
                raise refuse(f"tensor {key!r} has placement {p!r} (only Shard(dim) and Replicate are read)")
        if len(a.placements) != len(a.mesh) or math.prod(a.mesh) != len(locs):
            raise refuse(f"tensor {key!r} has a device mesh of shape {a.mesh} with placements {a.placements}, "
                         f"but the checkpoint has {len(locs)} rank files")
        at = {x.coord: (r, x) for r, x in enumerate(locs)}
        if len(at) != len(locs) or any(not 0 <= c < n for x in locs for c, n in zip(x.coord, a.mesh)):
            raise refuse(f"the ranks of tensor {key!r} do not cover its device mesh {a.mesh} once each "
                         f"(coordinates {sorted(at)})")

        def block(prefix: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[_Local, int, list[int]]]]:
            """Shape of the sub-block at mesh coordinates ``prefix`` and its pieces with offsets."""
            k = len(prefix)
            if k == len(a.mesh):
                r, x = at[prefix]
                return x.local, [(x, r, [0] * len(x.local))]
            pl = a.placements[k]
            if isinstance(pl, Replicate):   # verl's merger keeps the first copy
                return block(prefix + (0,))
            d = pl.dim if pl.dim >= 0 else pl.dim + len(a.shape)
            shape: list[int] | None = None
            pieces: list[tuple[_Local, int, list[int]]] = []
            along = 0
            for j in range(a.mesh[k]):
                s, ps = block(prefix + (j,))
                if shape is None:
                    shape = list(s)
                elif len(s) != len(shape) or any(s[i] != shape[i] for i in range(len(s)) if i != d):
                    raise refuse(f"the shards of tensor {key!r} along mesh dimension {k} have shapes that do not "
                                 f"fit together ({tuple(shape)} and {tuple(s)} concatenated along dim {d})")
                for x, r, off in ps:
                    off = list(off)
                    off[d] += along
                    pieces.append((x, r, off))
                along += s[d]
            shape[d] = along
            return tuple(shape), pieces

        shape, pieces = block(())
        if shape != a.shape:
            raise refuse(f"the shards of tensor {key!r} put together have shape {shape}, not its global shape "
                         f"{a.shape}")
        return a.dtype, a.shape, tuple(_Piece(self.files[r], x.pos, x.local, x.stride, x.contiguous, tuple(off))
                                       for x, r, off in pieces)

    def _plain(self, key: str, locs: list[_Local], refuse: Callable[[str], ValueError]
               ) -> tuple[torch.dtype, tuple[int, ...], tuple[_Piece, ...]]:
        a = locs[0]
        for r, x in enumerate(locs):
            if x.dtensor:
                raise refuse(f"tensor {key!r} is a plain tensor on rank 0 but a DTensor on rank {r}")
            if (x.shape, x.dtype) != (a.shape, a.dtype):
                raise refuse(f"plain (non-DTensor) tensor {key!r} has shape {x.shape}, {x.dtype} on rank {r} but "
                             f"{a.shape}, {a.dtype} on rank 0: not a replicated copy, and without placements its "
                             f"shards cannot be put together")
        return a.dtype, a.shape, tuple(_Piece(self.files[r], x.pos, x.local, x.stride, x.contiguous,
                                              (0,) * len(x.local)) for r, x in enumerate(locs))

    def _check_replicated(self, names: list[str], refuse: Callable[[str], ValueError]) -> None:
        """Every rank's copy of a plain tensor equals rank 0's, bit for bit (verl's merger keeps
        one copy and refuses ranks that disagree)."""
        for name in names:
            dtype, shape, pieces = self.entries[name]
            first = self._read_pieces(name, dtype, shape, pieces[:1], 0, None)
            for r, p in enumerate(pieces[1:], start=1):
                other = self._read_pieces(name, dtype, shape, (p,), 0, None)
                if not torch.equal(first.reshape(-1).view(torch.uint8), other.reshape(-1).view(torch.uint8)):
                    raise refuse(f"plain (non-DTensor) tensor {name!r} differs between rank 0 and rank {r}: not a "
                                 f"replicated copy")
            self.entries[name] = (dtype, shape, pieces[:1])

    # ------------------------------------------------------------ reading
    def info(self, name: str) -> tuple[str, tuple[int, ...]]:
        dtype, shape, _ = self.entries[name]
        return _st_dtype(dtype), shape

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        dtype, shape, pieces = self.entries[name]
        return self._read_pieces(name, dtype, shape, pieces, start, stop)

    def _read_pieces(self, name: str, dtype: torch.dtype, shape: tuple[int, ...], pieces: tuple[_Piece, ...],
                     start: int, stop: int | None) -> torch.Tensor:
        if not shape:
            out = torch.empty((), dtype=dtype)
            for p in pieces:
                self._read_into(name, p.file, p.pos, out.reshape(1))
            return out
        lo, hi, _ = slice(start, stop).indices(shape[0])     # Python's slicing, as safetensors'
        hi = max(lo, hi)
        out = torch.empty((hi - lo,) + shape[1:], dtype=dtype)
        for p in pieces:
            r0, r1 = max(lo, p.at[0]), min(hi, p.at[0] + p.shape[0])
            if r1 <= r0 or math.prod(p.shape) == 0:
                continue
            sub = (r1 - r0,) + p.shape[1:]
            target = out[(slice(r0 - lo, r1 - lo),) + tuple(slice(a, a + n) for a, n in zip(p.at[1:], p.shape[1:]))]
            item = out.element_size()
            if p.contiguous:
                pos = p.pos + (r0 - p.at[0]) * math.prod(p.shape[1:]) * item
                buf = target if target.is_contiguous() else torch.empty(sub, dtype=dtype)
                self._read_into(name, p.file, pos, buf)
            else:
                span = 1 + sum((n - 1) * s for n, s in zip(sub, p.stride))
                flat = torch.empty(span, dtype=dtype)
                self._read_into(name, p.file, p.pos + (r0 - p.at[0]) * p.stride[0] * item, flat)
                buf = flat.as_strided(sub, p.stride)
            if buf is not target:
                target.copy_(buf)
        return out

    def _read_into(self, name: str, file: Path, pos: int, buf: torch.Tensor) -> None:
        """Fill the contiguous ``buf`` with the bytes of ``file`` from ``pos``."""
        view = memoryview(buf.reshape(-1).view(torch.uint8).numpy())
        try:
            with open(file, "rb") as fh:
                fh.seek(pos)
                got = fh.readinto(view)
        except OSError as err:
            raise ValueError(f"{self.label}: tensor {name!r} in verl FSDP shard {str(file)!r} could not be read: "
                             f"{err}") from None
        if got != len(view):
            raise ValueError(f"{self.label}: tensor {name!r} in verl FSDP shard {str(file)!r} could not be read "
                             f"(truncated file: {got} of {len(view)} bytes at offset {pos})")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint: name, file, safetensors dtype string and shape."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return int(math.prod(self.shape))

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


def _safe_open(path: Path, label: str):
    from safetensors import safe_open
    try:
        return safe_open(str(path), framework="pt")
    except Exception as err:  # SafetensorError, OSError
        raise ValueError(f"{label}: file {str(path)!r} is truncated or corrupt (not a readable "
                         f"safetensors file): {err}") from None


def is_checkpoint_dir(path: str | Path) -> bool:
    """Whether ``path`` looks like a checkpoint directory (``config.json`` plus safetensors weights)."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file() and ((p / SINGLE).is_file() or (p / INDEX).is_file())


class Checkpoint:
    """A validated Hugging Face checkpoint directory, read one tensor at a time.

    Use :func:`open_checkpoint`.  Attributes: ``path``, ``label`` (prefix of error
    messages), ``config`` (the parsed ``config.json``), ``tensors`` (name →
    :class:`TensorInfo`, in file order), ``head`` (output-head tensor name or ``None``),
    ``tied`` (whether the head is the input embedding), ``vocab_size``.  For verl FSDP shards
    ``path`` is ``ACTOR/huggingface`` (config and tokenizer), the tensors are read from the
    shards beside it (:class:`_FsdpShards`; ``TensorInfo.file`` names rank 0's shard,
    :attr:`files` all of them).
    """

    def __init__(self, path: str | Path, label: str = "checkpoint"):
        self.label = label
        p = Path(path)
        if not p.exists():
            raise ValueError(f"{label}: {str(p)!r} does not exist (expected a Hugging Face checkpoint "
                             f"directory with config.json and model.safetensors)")
        if not p.is_dir():
            raise ValueError(f"{label}: {str(p)!r} is not a directory (expected a Hugging Face checkpoint "
                             f"directory with config.json and model.safetensors)")
        given = p
        p = resolve_checkpoint_dir(p, label)
        self.path = p
        self._fsdp: _FsdpShards | None = None
        cfg = p / "config.json"
        if not cfg.is_file():
            raise ValueError(f"{label}: {str(p)!r} is not a Hugging Face checkpoint directory: no config.json")
        try:
            self.config: dict = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{label}: file {str(cfg)!r} is not valid JSON: {err}") from None
        if not isinstance(self.config, dict):
            raise ValueError(f"{label}: file {str(cfg)!r} must hold a JSON object")
        self.tensors: dict[str, TensorInfo] = {}
        if (p / SINGLE).is_file():
            self._scan(p / SINGLE, None)
        elif (p / INDEX).is_file():
            self._scan_index(p / INDEX)
        elif (actor := _fsdp_actor(p)) is not None:
            self._scan_fsdp(actor, given)
        else:
            other = sorted(x.name for x in p.iterdir() if x.suffix in (".bin", ".pt", ".pth", ".gguf"))
            hint = (f" (found {', '.join(other)}: only safetensors are read; convert with "
                    f"model.save_pretrained(dir, safe_serialization=True))") if other else ""
            raise ValueError(f"{label}: {str(p)!r} is not a Hugging Face checkpoint directory: no {SINGLE} "
                             f"or {INDEX}{hint}")
        if not self.tensors:
            raise ValueError(f"{label}: {str(p)!r} holds no tensors")
        self.head, self.tied = find_output_head(self.tensors, self.config)
        self.vocab_size = self._vocab_size()

    # ------------------------------------------------------------- scanning
    def _scan(self, file: Path, expected: set[str] | None) -> None:
        with _safe_open(file, self.label) as f:
            keys = list(f.keys())
            for k in keys:
                sl = f.get_slice(k)
                self.tensors[k] = TensorInfo(k, file, str(sl.get_dtype()), tuple(int(x) for x in sl.get_shape()))
        if expected is not None:
            missing = sorted(expected - set(keys))
            if missing:
                raise ValueError(f"{self.label}: tensor {missing[0]!r} is listed in {INDEX} for file "
                                 f"{str(file)!r} but that file does not contain it"
                                 + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""))

    def _scan_fsdp(self, actor: Path, given: Path) -> None:
        """The tensors of verl's FSDP shards in ``actor`` (:class:`_FsdpShards`), with the names,
        dtypes and global shapes of the model; with tied embeddings (``tie_word_embeddings``) an
        output head saved beside the embedding it is tied to is dropped, as verl's merger does."""
        self._fsdp = _FsdpShards(actor, self.label, lambda why: _fsdp_refusal(self.label, given, actor, why))
        first = self._fsdp.files[0]
        for name in self._fsdp.entries:
            dtype, shape = self._fsdp.info(name)
            self.tensors[name] = TensorInfo(name, first, dtype, shape)
        head, _ = find_output_head(self.tensors, {"tie_word_embeddings": False})
        emb = _find_embedding(list(self.tensors))
        if head is not None and emb is not None and _tied(self.config) \
                and self.tensors[head].shape == self.tensors[emb].shape:
            del self.tensors[head]

    def _scan_index(self, index: Path) -> None:
        try:
            doc = json.loads(index.read_text())
            wm = doc["weight_map"]
            if not isinstance(wm, dict) or not wm:
                raise KeyError
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            raise ValueError(f"{self.label}: file {str(index)!r} is not a valid safetensors index "
                             f"(a JSON object with a non-empty 'weight_map')") from None
        by_file: dict[str, set[str]] = {}
        for name, fn in wm.items():
            by_file.setdefault(str(fn), set()).add(name)
        for fn in sorted(by_file):
            file = self.path / fn
            if not file.is_file():
                raise ValueError(f"{self.label}: shard {str(file)!r} listed in {INDEX} is missing "
                                 f"(it should hold e.g. tensor {sorted(by_file[fn])[0]!r})")
            self._scan(file, by_file[fn])
        # keep only the tensors the index assigns to each file (a shard may hold extras)
        self.tensors = {k: v for k, v in self.tensors.items() if wm.get(k) == v.file.name}

    def _vocab_size(self) -> int | None:
        v = _text_config(self.config).get("vocab_size", self.config.get("vocab_size"))
        return int(v) if isinstance(v, int) else None

    # ------------------------------------------------------------- metadata
    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    @property
    def dtypes(self) -> dict[str, int]:
        """Number of floating-point tensors per dtype (``{"bfloat16": 290}``), most frequent first."""
        n: dict[str, int] = {}
        for t in self.tensors.values():
            if t.is_float:
                k = DTYPE_NAMES.get(t.dtype, t.dtype)
                n[k] = n.get(k, 0) + 1
        return dict(sorted(n.items(), key=lambda kv: -kv[1]))

    @property
    def dtype(self) -> str:
        """The weights' dtype (``"bfloat16"``), or ``"mixed (bfloat16 ×288, float32 ×2)"``."""
        d = self.dtypes
        if len(d) == 1:
            return next(iter(d))
        return "mixed (" + ", ".join(f"{k} ×{v}" for k, v in d.items()) + ")" if d else "none"

    @property
    def files(self) -> list[Path]:
        """The weight files (every rank's shard of a verl FSDP checkpoint)."""
        if self._fsdp is not None:
            return list(self._fsdp.files)
        return sorted({t.file for t in self.tensors.values()})

    @property
    def num_layers(self) -> int:
        """Number of transformer blocks (``1 + `` the largest block index among the tensors)."""
        idx = [layer_index(n) for n in self.tensors]
        idx = [i for i in idx if i is not None]
        return max(idx) + 1 if idx else 0

    def kind(self, name: str) -> str:
        return tensor_kind(name, self.head, len(self.tensors[name].shape))

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ValueError(f"{self.label}: tensor {name!r} is missing from {str(self.path)!r}") from None

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, {len(self.tensors)} tensors, head={self.head!r})"

    # -------------------------------------------------------------- reading
    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Tensor ``name`` (rows ``start:stop`` of its first axis) as stored (e.g. bfloat16), on the CPU."""
        info = self.info(name)
        if self._fsdp is not None:
            return self._fsdp.read(name, start, stop)
        with _safe_open(info.file, self.label) as f:
            try:
                if start == 0 and (stop is None or stop >= (info.shape[0] if info.shape else 0)):
                    return f.get_tensor(name)
                return f.get_slice(name)[start:stop]
            except Exception as err:
                raise ValueError(f"{self.label}: tensor {name!r} in file {str(info.file)!r} could not be "
                                 f"read (truncated or corrupt file): {err}") from None

    def read_float(self, name: str, start: int = 0, stop: int | None = None, *,
                   device: torch.device | str = "cpu", use_torch: bool | None = None) -> Any:
        """Rows ``start:stop`` of tensor ``name`` as float32 (float64 if stored as float64),
        refused if it holds NaN or Inf.

        On the CPU the result is a numpy array (bfloat16 is widened by a bit shift, exactly),
        on CUDA (or with ``use_torch=True``) a torch tensor on ``device``.  The message of a
        non-finite tensor names the tensor, the file and the number of NaN and Inf entries.
        """
        info = self.info(name)
        if not info.is_float:
            raise ValueError(f"{self.label}: tensor {name!r} in file {str(info.file)!r} has dtype "
                             f"{info.dtype}, not a floating-point weight")
        t = self.read(name, start, stop)
        if t.ndim == 0:  # a scalar weight: one entry
            t = t.reshape(1)
        dev = torch.device(device)
        if use_torch is None:
            use_torch = dev.type != "cpu"
        if use_torch:
            x = t.to(dev)
            x = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
            bad = int((~torch.isfinite(x)).sum()) if not bool(torch.isfinite(x).all()) else 0
            if bad:
                self._non_finite(name, info, int(torch.isnan(x).sum()), bad)
            return x
        x = _to_numpy_float(t)
        if not np.isfinite(x).all():
            fin = np.isfinite(x)
            self._non_finite(name, info, int(np.isnan(x).sum()), int(x.size - fin.sum()))
        return x

    def _non_finite(self, name: str, info: TensorInfo, n_nan: int, n_bad: int) -> None:
        raise ValueError(f"{self.label}: tensor {name!r} in file {str(info.file)!r} holds non-finite "
                         f"values: {n_nan} NaN and {n_bad - n_nan} Inf (of {info.numel} entries)")


def _to_numpy_float(t: torch.Tensor) -> np.ndarray:
    """float32 numpy copy of a CPU tensor (float64 kept), without torch arithmetic:
    bfloat16 is the upper half of float32, so the widening is a 16-bit shift (exact)."""
    if t.dtype == torch.bfloat16:
        x = t.contiguous().view(torch.int16).numpy().view(np.uint16).astype(np.uint32)
        x <<= 16  # in place: one float32-sized array, no temporary
        return x.view(np.float32)
    if t.dtype == torch.float16:
        return t.numpy().astype(np.float32)
    if t.dtype == torch.float32:
        return t.numpy()
    if t.dtype == torch.float64:
        return t.numpy()
    return t.to(torch.float32).numpy()  # float8 variants


def open_checkpoint(path: str | Path, label: str = "checkpoint") -> Checkpoint:
    """Open and validate a checkpoint directory (see :class:`Checkpoint`).

    Raises ``ValueError`` (message starting with ``label``) if ``path`` is not a directory,
    has no ``config.json`` or no safetensors weights, if the index lists a missing shard or
    a tensor its shard lacks, or if a safetensors file is truncated or corrupt.

    Examples
    --------
    A tiny checkpoint directory: ``config.json`` and one safetensors file.

    >>> import pathlib, tempfile
    >>> from safetensors.torch import save_file
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text('{"model_type": "toy", "vocab_size": 32}')
    >>> save_file({"model.embed_tokens.weight": torch.ones(32, 8, dtype=torch.bfloat16),
    ...            "model.layers.0.mlp.up_proj.weight": torch.ones(16, 8),
    ...            "model.layers.1.mlp.up_proj.weight": torch.ones(16, 8)}, str(d / "model.safetensors"))
    >>> ck = open_checkpoint(d, "base")
    >>> ck.head, ck.tied, ck.num_layers, ck.vocab_size       # tied embedding: the head
    ('model.embed_tokens.weight', True, 2, 32)
    >>> ck.info(ck.head).dtype, ck.read_float(ck.head, 0, 4).shape, ck.kind("model.layers.1.mlp.up_proj.weight")
    ('BF16', (4, 8), 'block')
    >>> open_checkpoint(d / "missing", "base")
    Traceback (most recent call last):
    ...
    ValueError: base: '...missing' does not exist (expected a Hugging Face checkpoint directory with config.json and model.safetensors)
    """
    return Checkpoint(path, label)


@dataclass(frozen=True)
class TensorPair:
    """One tensor compared between a base checkpoint and another one.

    ``rows``: the rows of the first axis compared (all of them, or the common vocabulary
    rows of an embedding / output head whose vocabulary was resized); ``vocab_resized``:
    whether the two row counts differ; ``kind``: :func:`tensor_kind` in the base.
    """

    name: str
    kind: str
    layer: int | None
    shape: tuple[int, ...]
    base_rows: int
    other_rows: int
    rows: int

    @property
    def vocab_resized(self) -> bool:
        return self.base_rows != self.other_rows

    @property
    def compared_shape(self) -> tuple[int, ...]:
        return (self.rows, *self.shape[1:]) if self.shape else ()


def pair_tensors(base: Checkpoint, other: Checkpoint) -> tuple[list[TensorPair], list[str]]:
    """Match the floating-point tensors of ``other`` with those of ``base``.

    Returns ``(pairs, skipped)``: the pairs in ``base`` file order and the names of
    non-floating-point tensors (buffers) that are not compared.  Refuses, with a message
    starting with ``other.label`` that names the tensor and the files: a different
    ``model_type`` or ``architectures`` in ``config.json``; an MoE pair whose expert counts
    differ (:func:`check_expert_counts`); a tensor missing from either side; a shape mismatch other than a resized vocabulary (different first dimension of an
    embedding / output head, or of any tensor whose first dimension is the vocabulary
    size of each config), whose common rows are compared.
    """
    for key in ("model_type", "architectures"):
        a, b = base.config.get(key), other.config.get(key)
        if a is not None and b is not None and a != b:
            raise ValueError(f"{other.label}: {key} {b!r} in {str(other.path / 'config.json')!r} differs from "
                             f"{a!r} in base {str(base.path / 'config.json')!r}: different architectures "
                             f"cannot be compared")
    check_expert_counts(base, other)
    bn = [n for n, t in base.tensors.items() if t.is_float]
    on = {n for n, t in other.tensors.items() if t.is_float}
    missing = [n for n in bn if n not in on]
    if missing:
        n = missing[0]
        hint = ""
        if base.tied != other.tied and n in (base.head, other.head):
            hint = " (one checkpoint ties the output head to the input embedding, the other does not)"
        more = f"; {len(missing) - 1} more tensors are missing" if len(missing) > 1 else ""
        raise ValueError(f"{other.label}: tensor {n!r} (in base file {str(base.tensors[n].file)!r}) is missing "
                         f"from checkpoint {str(other.path)!r}{hint}{more}")
    extra = sorted(on - set(bn))
    if extra:
        n = extra[0]
        raise ValueError(f"{other.label}: tensor {n!r} in file {str(other.tensors[n].file)!r} is not in base "
                         f"{str(base.path)!r}: different architectures cannot be compared")
    vocab = (base.vocab_size, other.vocab_size)
    pairs = []
    for n in bn:
        tb, to = base.tensors[n], other.tensors[n]
        kind = base.kind(n)
        rows_b = tb.shape[0] if tb.shape else 1
        rows_o = to.shape[0] if to.shape else 1
        if tb.shape != to.shape:
            resizable = (len(tb.shape) == len(to.shape) >= 1 and tb.shape[1:] == to.shape[1:]
                         and (kind in ("head", "embedding")
                              or (vocab[0] != vocab[1] and (rows_b, rows_o) == vocab)))
            if not resizable:
                raise ValueError(f"{other.label}: tensor {n!r} has shape {tuple(to.shape)} in file "
                                 f"{str(to.file)!r} but {tuple(tb.shape)} in base file {str(tb.file)!r}: "
                                 f"different architectures or sizes cannot be compared")
        pairs.append(TensorPair(n, kind, layer_index(n), tb.shape, rows_b, rows_o, min(rows_b, rows_o)))
    skipped = [n for n, t in base.tensors.items() if not t.is_float]
    return pairs, skipped


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def has_tokenizer(path: str | Path) -> bool:
    """Whether directory ``path`` holds tokenizer files (``tokenizer.json``, ...)."""
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in _TOKENIZER_FILES)


def tokenizer_size(tok: Any) -> int | None:
    """Number of token ids a tokenizer knows (added tokens included), ``None`` if unknown."""
    try:
        if hasattr(tok, "get_vocab_size"):  # tokenizers.Tokenizer
            return int(tok.get_vocab_size(with_added_tokens=True))
        return int(len(tok))  # transformers
    except Exception:
        return None


def load_tokenizer(path: str | Path, label: str = "tokenizer", *, transformers: bool = False) -> Any:
    """A tokenizer from a local directory, for decoding token ids.

    ``tokenizer.json`` is read with the ``tokenizers`` library (fast, no transformers
    import); other formats (sentencepiece ``tokenizer.model``, ``vocab.json`` + merges) with
    ``transformers.AutoTokenizer`` (local files only), as is every format with
    ``transformers=True`` (to encode text with the model's special tokens).  Both have
    ``decode(ids)``.
    ``ValueError`` (starting with ``label``) if the directory holds no loadable tokenizer.
    """
    p = Path(path)
    if not has_tokenizer(p):
        raise ValueError(f"{label}: {str(p)!r} is not a tokenizer directory (no {', '.join(_TOKENIZER_FILES)})")
    try:
        if (p / "tokenizer.json").is_file() and not transformers:
            from tokenizers import Tokenizer
            return Tokenizer.from_file(str(p / "tokenizer.json"))
        cls = None
        if (p / "tokenizer_config.json").is_file():
            cls = json.loads((p / "tokenizer_config.json").read_text()).get("tokenizer_class")
        if cls in ("TokenizersBackend", "PreTrainedTokenizerFast") and (p / "tokenizer.json").is_file():
            # a generic tokenizers-library tokenizer: AutoTokenizer would pick the model type's
            # own class from config.json (e.g. Qwen2Tokenizer), which cannot read it
            from transformers import PreTrainedTokenizerFast
            return PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True)
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as err:
        raise ValueError(f"{label}: could not load a tokenizer from {str(p)!r}: {err}") from None


def load_causal_lm(ck: Checkpoint, dev: torch.device, dtype: str = "auto", progress: bool = True) -> tuple[Any, Any]:
    """The causal LM of an opened checkpoint on ``dev`` in eval mode, and its output head.

    Loaded with ``transformers.AutoModelForCausalLM.from_pretrained(..., local_files_only=True)``
    (never ``trust_remote_code``).  ``dtype``: ``"auto"`` (float32 on the CPU, the checkpoint's
    dtype on CUDA) or a torch dtype name (``"float32"``, ``"bfloat16"``, ``"float16"``,
    ``"float64"``).  transformers' loading bar only with ``progress``.  Raises ``ValueError``
    starting with ``ck.label`` if transformers cannot load the directory or a floating-point
    weight holds NaN or Inf (named, with its file and counts).
    """
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:  # pragma: no cover
        raise ValueError(f"{ck.label}: transformers is needed to run the model (pip install '.[train]')") from None
    if dtype == "auto":
        tdt = torch.float32 if dev.type == "cpu" else "auto"
    else:
        tdt = getattr(torch, dtype)
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(ck.path), dtype=tdt, local_files_only=True)
    except Exception as err:
        raise ValueError(f"{ck.label}: transformers could not load a causal LM from {str(ck.path)!r}: {err}") \
            from None
    finally:
        if shown and not progress:
            hf_logging.enable_progress_bar()
    for name, t in model.state_dict().items():  # NaN/Inf weights would give NaN results: refuse by name
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            info = ck.tensors.get(name)
            where = f" in file {str(info.file)!r}" if info is not None else f" of {str(ck.path)!r}"
            n_nan = int(torch.isnan(t).sum())
            raise ValueError(f"{ck.label}: tensor {name!r}{where} holds non-finite values: {n_nan} NaN and "
                             f"{int((~torch.isfinite(t)).sum()) - n_nan} Inf (of {t.numel()} entries)")
    model.to(dev).eval()
    return model, model.get_output_embeddings()
