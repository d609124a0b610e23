"""Real tiny Hugging Face checkpoints for the checkpoint-diff tests (a few hundred K parameters).

Built with transformers (``save_pretrained``, safetensors) for Qwen2, Llama and GPT-2 (tied
output head), sharded or not, bfloat16 or float32, plus a tiny word-level tokenizer; and, for
the architecture matrix (:data:`MATRIX`, :func:`arch_pair`), from transformers' own config
classes: Qwen3, Llama tied and untied, Mistral, Gemma2 and Gemma3 (tied, scaled embeddings),
Phi-3 (fused ``qkv_proj`` / ``gate_up_proj``), OLMo2, Qwen3-MoE and Mixtral (per-expert
tensors on disk).  :func:`plant_files` plants ΔW straight into the safetensors files (by
tensor name as stored: architecture-independent, no model load).
:func:`plant` writes an "RL" checkpoint = base + a known ΔW: in the output head a
rank-1 spike plus a flat bulk with exactly known singular values (``ΔW = U diag(σ) Vᵀ``,
``U``, ``V`` with orthonormal columns), and optionally per-layer deltas and a few
exactly known entries (for densities).  The planted matrices are returned, so that tests
compute the expected metrics from them with numpy, not with the code under test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

ARCHS = ("qwen2", "llama", "gpt2")
VOCAB = 384
HIDDEN = 64


#: the architecture matrix: name -> (transformers config class, model class, extra config, tied head)
MATRIX = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}, False),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 8}, False),
    "llama_untied": ("LlamaConfig", "LlamaForCausalLM", {}, False),
    "llama_tied": ("LlamaConfig", "LlamaForCausalLM", {}, True),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}, False),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 8}, True),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 8}, True),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}, False),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {}, True),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}, False),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  {"head_dim": 8, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}, False),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2}, False),
}
M_VOCAB, M_HIDDEN, M_LAYERS = 128, 32, 2


def build_arch(path: str | Path, arch: str, *, seed: int = 0, dtype: str = "float32") -> Path:
    """A tiny model of architecture ``arch`` of :data:`MATRIX` or :data:`MOE_ARCHS` (vocab 128, hidden 32, 2 blocks,
    4 heads, 2 KV heads), saved with ``save_pretrained``; return its path."""
    import transformers

    cfg_name, model_name, extra, tie = MATRIX[arch] if arch in MATRIX else MOE_ARCHS[arch]
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=M_VOCAB, n_embd=M_HIDDEN, n_layer=M_LAYERS, n_head=4,
                                      n_positions=64, tie_word_embeddings=True,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    else:
        cfg = getattr(transformers, cfg_name)(
            vocab_size=M_VOCAB, hidden_size=M_HIDDEN, intermediate_size=48, num_hidden_layers=M_LAYERS,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tie,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg)
    model.to(getattr(torch, dtype))
    path = Path(path)
    model.save_pretrained(path)
    return path


def plant_files(base: str | Path, out: str | Path, deltas: dict[str, np.ndarray],
                dtype: str | None = None) -> dict[str, np.ndarray]:
    """Copy checkpoint ``base`` to ``out`` with ``deltas`` (by stored tensor name) added in float64
    and cast to the stored dtype (or ``dtype`` for every floating tensor), directly in the
    safetensors files; return the planted ΔW (float64)."""
    from safetensors.torch import load_file, save_file

    base, out = Path(base), Path(out)
    shutil.copytree(base, out)
    left = dict(deltas)
    for f in sorted(out.glob("*.safetensors")):
        st = load_file(str(f))
        for k, t in st.items():
            tdt = getattr(torch, dtype) if dtype is not None and t.is_floating_point() else t.dtype
            if k in left:
                dW = np.asarray(left.pop(k), dtype=float)
                assert tuple(t.shape) == dW.shape, (k, t.shape, dW.shape)
                st[k] = (t.to(torch.float64) + torch.from_numpy(dW)).to(tdt).contiguous()
            elif tdt != t.dtype:
                st[k] = t.to(tdt)
        save_file(st, str(f), metadata={"format": "pt"})
    assert not left, f"tensors not found: {sorted(left)}"
    return {k: np.asarray(v, dtype=float) for k, v in deltas.items()}


def matrix_deltas(path: str | Path, seed: int = 30) -> dict[str, np.ndarray]:
    """Planted ΔW for an architecture pair: the head gets σ = :func:`head_sigmas` (spike 4, bulk of 20),
    every 2-D block weight of block 1 a rank-2 ΔW with σ = :data:`BLOCK_SIGMAS` (block 0 unchanged)."""
    st = load_state(path)
    h = head_name(path)
    out = {h: spectrum_matrix(tuple(st[h].shape), head_sigmas(n_bulk=20), seed)}
    for j, (k, t) in enumerate(sorted(st.items())):
        if t.ndim == 2 and (".layers.1." in k or ".h.1." in k):
            out[k] = spectrum_matrix(tuple(t.shape), BLOCK_SIGMAS, seed + 1 + j)
    return out


def arch_pair(arch: str) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """``(base, rl, planted)`` for ``arch`` of :data:`MATRIX`, built once per process."""
    def make(p: Path):
        base = build_arch(p / "base", arch)
        planted = plant_files(base, p / "rl", matrix_deltas(base))
        return base, p / "rl", planted
    return cached(f"arch_{arch}", make)


def _config(arch: str, vocab: int, hidden: int, layers: int, tie: bool | None):
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    if arch == "qwen2":
        return Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=256, tie_word_embeddings=bool(tie),
                           bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "llama":
        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=256, tie_word_embeddings=bool(tie),
                           bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=256,
                          tie_word_embeddings=True if tie is None else tie,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
    raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")


def _model_class(arch: str):
    from transformers import GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM

    return {"qwen2": Qwen2ForCausalLM, "llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}[arch]


def build(path: str | Path, arch: str = "qwen2", *, dtype: str = "float32", sharded: bool = False,
          seed: int = 0, vocab: int = VOCAB, hidden: int = HIDDEN, layers: int = 3,
          tie: bool | None = None, tokenizer: bool = False) -> Path:
    """Save a randomly initialised tiny causal LM with ``save_pretrained``; return its path.

    ``sharded``: several ``model-0000k-of-0000n.safetensors`` shards and an index
    (``max_shard_size="64KB"``).  ``tokenizer``: also save :func:`build_tokenizer`'s tokenizer.
    """
    torch.manual_seed(seed)
    model = _model_class(arch)(_config(arch, vocab, hidden, layers, tie))
    model.to(getattr(torch, dtype))
    path = Path(path)
    model.save_pretrained(path, max_shard_size="64KB" if sharded else "10GB")
    if tokenizer:
        build_tokenizer(vocab).save_pretrained(path)
    return path


WORDS = [f"w{i}" for i in range(VOCAB - 4)]


def build_tokenizer(vocab: int = VOCAB):
    """A word-level tokenizer over ``<pad> <s> </s> <unk> w0 w1 ...`` (whitespace split)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(vocab - 4)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint (safetensors, single or sharded), as stored."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def head_name(path: str | Path) -> str:
    """The output-head tensor name of a tiny checkpoint (independent of analysis.checkpoints)."""
    st = load_state(path)
    if "lm_head.weight" in st:
        return "lm_head.weight"
    return "transformer.wte.weight" if "transformer.wte.weight" in st else "model.embed_tokens.weight"


def spectrum_matrix(shape: tuple[int, int], sigmas: Sequence[float], seed: int) -> np.ndarray:
    """``U diag(σ) Vᵀ`` (float64) with random orthonormal ``U`` (m × r), ``V`` (n × r)."""
    rng = np.random.default_rng(seed)
    m, n = shape
    r = len(sigmas)
    U = np.linalg.qr(rng.standard_normal((m, r)))[0]
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    return (U * np.asarray(sigmas, dtype=float)) @ V.T


def head_sigmas(spike: float = 4.0, bulk: float = 0.25, n_bulk: int = 40) -> np.ndarray:
    """Rank-1 spike plus a graded bulk: ``σ = [spike, bulk·(1 − i/(2 n_bulk)) for i < n_bulk]``."""
    return np.concatenate([[spike], bulk * (1 - np.arange(n_bulk) / (2 * n_bulk))])


def plant(base: str | Path, out: str | Path, *, head: np.ndarray | None = None,
          deltas: dict[str, np.ndarray] | None = None, dtype: str | None = None,
          sharded: bool = False, tokenizer: bool = False) -> dict[str, np.ndarray]:
    """Write ``out`` = ``base`` + known ΔW; return the planted ΔW per tensor name (float64).

    ``head``: ΔW of the output head (its tensor name from :func:`head_name`); ``deltas``:
    more ΔW by tensor name (same shape as the tensor).  The model is loaded with
    transformers, the deltas added in float64 and cast to the checkpoint dtype
    (``dtype`` overrides it), and saved with ``save_pretrained``.
    """
    from transformers import AutoModelForCausalLM

    base = Path(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    if dtype is not None:
        model.to(getattr(torch, dtype))
    planted: dict[str, np.ndarray] = {}
    if head is not None:
        planted[head_name(base)] = np.asarray(head, dtype=float)
    for k, v in (deltas or {}).items():
        planted[k] = np.asarray(v, dtype=float)
    sd = dict(model.named_parameters())
    with torch.no_grad():
        for k, dW in planted.items():
            p = sd[k]
            assert tuple(p.shape) == dW.shape, (k, p.shape, dW.shape)
            p.copy_((p.detach().to(torch.float64) + torch.from_numpy(dW)).to(p.dtype))
    out = Path(out)
    model.save_pretrained(out, max_shard_size="64KB" if sharded else "10GB")
    if tokenizer:
        for f in base.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens")):
                shutil.copy(f, out / f.name)
    return planted


def stored_delta(base: str | Path, rl: str | Path) -> dict[str, np.ndarray]:
    """ΔW as actually stored (float64 numpy, common rows), read with safetensors + numpy only."""
    a, b = load_state(base), load_state(rl)
    out = {}
    for k, t in a.items():
        if not t.is_floating_point():
            continue
        x = t.to(torch.float64).numpy()
        y = b[k].to(torch.float64).numpy()
        m = min(x.shape[0], y.shape[0]) if x.ndim else None
        out[k] = (y[:m] - x[:m]) if x.ndim else (y - x)
    return out


def rewrite_tensor(path: str | Path, name: str, fn) -> None:
    """Replace tensor ``name`` of a (single-file) checkpoint by ``fn(tensor)`` (``None``: delete it)."""
    from safetensors.torch import load_file, save_file

    path = Path(path)
    idx = path / "model.safetensors.index.json"
    if idx.exists():
        f = path / json.loads(idx.read_text())["weight_map"][name]
    else:
        f = path / "model.safetensors"
    st = load_file(str(f))
    new = fn(st[name])
    if new is None:
        del st[name]
        if idx.exists():
            doc = json.loads(idx.read_text())
            del doc["weight_map"][name]
            idx.write_text(json.dumps(doc))
    else:
        st[name] = new.contiguous()
    save_file(st, str(f), metadata={"format": "pt"})


def copy(src: str | Path, dst: str | Path) -> Path:
    shutil.copytree(src, dst)
    return Path(dst)


def describe(path: str | Path) -> dict[str, Any]:
    """Tensor names, shapes and dtypes (for debugging tests)."""
    return {k: (tuple(v.shape), str(v.dtype)) for k, v in load_state(path).items()}


# ------------------------------------------------------------------ session cache
_CACHE: dict[str, Any] = {}


def cache_dir() -> Path:
    """A per-process temporary directory for built checkpoints (removed at exit)."""
    import atexit
    import tempfile

    if "_dir" not in _CACHE:
        d = Path(tempfile.mkdtemp(prefix="rlvr_tiny_ckpt_"))
        atexit.register(shutil.rmtree, d, True)
        _CACHE["_dir"] = d
    return _CACHE["_dir"]


def cached(key: str, make) -> Any:
    """``make(path)`` once per process under :func:`cache_dir`; returns what it returned
    (tests must copy a cached checkpoint before changing it)."""
    if key not in _CACHE:
        _CACHE[key] = make(cache_dir() / key)
    return _CACHE[key]


#: known entries planted into the final norm: value -> how many (counts above 0, 1e-5, 1e-4, 1e-3
#: are then 26, 15, 8, 3 exactly)
NORM_ENTRIES = {0.5: 3, 5e-4: 5, 5e-5: 7, 5e-6: 11}
BLOCK_SIGMAS = (0.3, 0.1)     # rank-2 ΔW of every block matrix: s1/s2 = 3, r1 = 0.9


def norm_delta(n: int) -> np.ndarray:
    d = np.zeros(n)
    i = 0
    for v, c in NORM_ENTRIES.items():
        d[i:i + c] = v
        i += c
    return d


def block_deltas(path: str | Path, seed: int = 10, sigmas: Sequence[float] = BLOCK_SIGMAS,
                 layers: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Rank-2 ΔW (σ = ``sigmas``) for every 2-D weight of the blocks (all, or ``layers``)."""
    out = {}
    for j, (k, t) in enumerate(sorted(load_state(path).items())):
        if t.ndim == 2 and (".layers." in k or ".h." in k):
            li = int(k.split(".layers.")[-1].split(".")[0]) if ".layers." in k else int(k.split(".h.")[-1].split(".")[0])
            if layers is None or li in layers:
                out[k] = spectrum_matrix(tuple(t.shape), sigmas, seed + j)
    return out


def qwen2_base() -> Path:
    """Qwen2, float32, one file, untied head, with a tokenizer (cached)."""
    return cached("qwen2_base", lambda p: build(p, "qwen2", dtype="float32", tokenizer=True))


def qwen2_planted() -> tuple[Path, dict[str, np.ndarray]]:
    """RL checkpoint of :func:`qwen2_base`: head ΔW with σ = :func:`head_sigmas`, rank-2 ΔW in
    every block matrix, :data:`NORM_ENTRIES` in ``model.norm.weight``."""
    def make(p: Path):
        base = qwen2_base()
        deltas = block_deltas(base)
        deltas["model.norm.weight"] = norm_delta(HIDDEN)
        planted = plant(base, p, head=spectrum_matrix((VOCAB, HIDDEN), head_sigmas(), 1), deltas=deltas,
                        tokenizer=True)
        return p, planted
    return cached("qwen2_planted", make)


# ------------------------------------------------------------ mixture of experts
#: MoE architectures beside :data:`MATRIX` (shared experts; another expert count): built by :func:`build_arch` too
MOE_ARCHS = {
    "qwen3_moe_8": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",      # 8 experts: refused against 4
                    {"head_dim": 8, "moe_intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2}, False),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  {"moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "num_experts": 4,
                   "num_experts_per_tok": 2}, False),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    {"moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1,
                     "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0,
                     "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                     "v_head_dim": 8}, False),
}
#: per-expert projection names of a tiny MoE checkpoint: (gate, up, down)
MOE_PROJ = {"mixtral": ("w1", "w3", "w2")}
_MOE_DEFAULT_PROJ = ("gate_proj", "up_proj", "down_proj")
#: planted ΔW of an MoE pair: (layer, expert, stored projection) -> σ (rank len(σ)); experts not
#: named here are unchanged.  s1/s2 = 3, 4, 2, 6, 5, 2, 2 (in this order).
MOE_PLANT = {(1, 1, 0): (0.3, 0.1), (1, 1, 2): (0.4, 0.1), (1, 3, 1): (0.2, 0.1), (1, 3, 2): (0.6, 0.1),
             (0, 2, 0): (0.5, 0.1), (0, 0, 2): (0.25, 0.125), (0, 2, 1): (0.2, 0.1)}
#: planted router ΔW per layer (σ; s1/s2 = 5) and shared-expert ΔW (σ, on its up projection)
MOE_ROUTER_SIGMAS = (0.5, 0.1)
MOE_SHARED_SIGMAS = (0.35, 0.05)


def moe_names(path: str | Path, arch: str) -> dict[str, str]:
    """Stored MoE tensor names of a tiny checkpoint by role: ``expert`` (a format string over
    layer, expert, projection), ``router`` and ``shared`` (format strings over the layer; ``shared``
    ``None`` without shared experts)."""
    st = load_state(path)
    mod = "block_sparse_moe" if any(".block_sparse_moe." in k for k in st) else "mlp"
    shared = next((k.split(".mlp.")[1].split(".")[0] for k in st if ".mlp.shared_expert" in k
                   and ".shared_expert_gate." not in k), None)
    return {"expert": f"model.layers.{{}}.{mod}.experts.{{}}.{{}}.weight",
            "router": f"model.layers.{{}}.{mod}.gate.weight",
            "shared": None if shared is None else f"model.layers.{{}}.mlp.{shared}.up_proj.weight"}


def moe_deltas(path: str | Path, arch: str, seed: int = 50) -> dict[str, np.ndarray]:
    """The planted ΔW of an MoE pair (:data:`MOE_PLANT`, :data:`MOE_ROUTER_SIGMAS` in both
    layers' routers, :data:`MOE_SHARED_SIGMAS` in each shared expert's up projection)."""
    st = load_state(path)
    names = moe_names(path, arch)
    proj = MOE_PROJ.get(arch, _MOE_DEFAULT_PROJ)
    out = {}
    for j, ((layer, e, q), sig) in enumerate(sorted(MOE_PLANT.items())):
        k = names["expert"].format(layer, e, proj[q])
        out[k] = spectrum_matrix(tuple(st[k].shape), sig, seed + j)
    for layer in range(M_LAYERS):
        k = names["router"].format(layer)
        out[k] = spectrum_matrix(tuple(st[k].shape), MOE_ROUTER_SIGMAS, seed + 20 + layer)
        if names["shared"] is not None:
            k = names["shared"].format(layer)
            out[k] = spectrum_matrix(tuple(st[k].shape), MOE_SHARED_SIGMAS, seed + 30 + layer)
    return out


def moe_pair(arch: str) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """``(base, rl, planted)`` for an MoE architecture of :data:`MATRIX` or :data:`MOE_ARCHS`
    with :func:`moe_deltas` planted, built once per process."""
    def make(p: Path):
        base = build_arch(p / "base", arch)
        planted = plant_files(base, p / "rl", moe_deltas(base, arch))
        return base, p / "rl", planted
    return cached(f"moe_{arch}", make)


def fuse_experts(src: str | Path, dst: str | Path, arch: str, layout: str = "out_in") -> Path:
    """Copy checkpoint ``src`` to ``dst`` with each layer's per-expert tensors replaced by fused
    3-D ones: ``...experts.gate_up_proj`` = the experts' ``[gate; up]`` stacked, shape
    ``(E, 2f, d)``, and ``...experts.down_proj`` ``(E, d, f)`` (transformers' layout,
    ``layout="out_in"``), or both transposed per expert, ``(E, d, 2f)`` and ``(E, f, d)``
    (``layout="in_out"``, Llama 4 / Qwen3-VL-MoE on disk)."""
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst)
    st = load_state(src)
    names = moe_names(src, arch)
    g, u, dn = MOE_PROJ.get(arch, _MOE_DEFAULT_PROJ)
    n_exp = 1 + max(int(k.split(".experts.")[1].split(".")[0]) for k in st if ".experts." in k)
    for layer in range(M_LAYERS):
        ex = names["expert"].format(layer, "{}", "{}")
        gu = torch.stack([torch.cat([st.pop(ex.format(e, g)), st.pop(ex.format(e, u))], 0) for e in range(n_exp)])
        down = torch.stack([st.pop(ex.format(e, dn)) for e in range(n_exp)])
        if layout == "in_out":
            gu, down = gu.transpose(1, 2), down.transpose(1, 2)
        prefix = ex.split(".experts.")[0] + ".experts."
        st[prefix + "gate_up_proj"] = gu.contiguous()
        st[prefix + "down_proj"] = down.contiguous()
    for f in dst.glob("*.safetensors"):
        f.unlink()
    (dst / "model.safetensors.index.json").unlink(missing_ok=True)
    save_file(st, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst
