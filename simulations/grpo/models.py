"""Policy models: a small Qwen2-style causal LM built from a config, or any local causal LM.

Presets (``vocab_size`` comes from the tokenizer; untied output head so that the
checkpoint diff sees ``lm_head`` as its own matrix, as in Qwen 2.5 7B):

============  ======  ======  =====  ========  ===============  ==================
preset        hidden  layers  heads  kv heads  intermediate     parameters (V=56)
============  ======  ======  =====  ========  ===============  ==================
``tiny-cpu``  64      4       4      2         256              254,016
``small-gpu`` 768     12      12     4         2048             75,618,048
============  ======  ======  =====  ========  ===============  ==================

``load_policy(DIR)`` accepts any Hugging Face causal-LM directory on disk (``config.json`` plus
safetensors / bin weights and a tokenizer); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from analysis.checkpoints import open_checkpoint
from rlvr_plumbing.runner import apply_threads
from rlvr_plumbing.runtime import resolve_device

from .model_presets import PRESETS  # preset name → Qwen2 config keywords (defined there: no torch)

__all__ = ["PRESETS", "build_model", "check_model_dir", "check_weights", "first_non_finite", "load_policy",
           "model_shape", "memory_needed", "prepare_policy", "torch_threads",
           "quiet_transformers", "output_head", "n_params", "HeadGradient"]


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No weight loading/saving progress bars or advisory messages from transformers inside the
    block; the previous settings are restored afterwards."""
    from transformers.utils import logging as hf_logging

    bar, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` CPU threads inside the block (``None``: leave as is), then restore torch's count.

    The threads are set by :func:`rlvr_plumbing.runner.apply_threads`, as ``--threads`` of every
    command line is (torch's intra-op threads and the BLAS/OpenMP pools).
    """
    old = torch.get_num_threads()
    if n is not None:
        apply_threads(n)
    try:
        yield
    finally:
        if n is not None and torch.get_num_threads() != old:
            torch.set_num_threads(old)


def build_model(preset: str, tokenizer: Any, *, seed: int = 0, vocab_size: int | None = None) -> Any:
    """A freshly initialised ``Qwen2ForCausalLM`` of ``preset`` for ``tokenizer`` (float32, CPU).

    ``vocab_size``: rows of the embedding and the output head (default ``len(tokenizer)``; the
    memory model of distribution-level calibration takes the policy's, which may be larger).
    Initialisation uses ``torch.manual_seed(seed)`` inside a forked RNG, so the global torch
    RNG is left as it was.
    """
    from transformers import AutoModelForCausalLM, Qwen2Config

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    cfg = Qwen2Config(vocab_size=len(tokenizer) if vocab_size is None else vocab_size, tie_word_embeddings=False,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, **PRESETS[preset])
    with torch.random.fork_rng(devices=[]), quiet_transformers():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def check_model_dir(path: str | os.PathLike, *, what: str = "init") -> Path:
    """Refuse a directory that is not a Hugging Face causal-LM checkpoint (before loading it).

    Cheap: the files are looked for and every safetensors header is read through
    :func:`analysis.checkpoints.open_checkpoint` (a truncated or corrupt weights file is refused
    by name); the weights themselves are checked by :func:`check_weights`.
    """
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"{what}: {str(p)!r} {'is not a directory' if p.exists() else 'does not exist'} "
                         "(expected a Hugging Face causal-LM checkpoint directory with config.json, weights and "
                         "a tokenizer)")
    if not (p / "config.json").is_file():
        raise ValueError(f"{what}: {str(p)!r} is not a model directory (no config.json)")
    weights = [f for f in os.listdir(p) if f.endswith((".safetensors", ".bin")) or f.endswith(".index.json")]
    if not weights:
        raise ValueError(f"{what}: {str(p)!r} is not a model directory (no *.safetensors or *.bin weights)")
    if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        raise ValueError(f"{what}: {str(p)!r} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    if _has_safetensors(p):
        open_checkpoint(p, what)
    return p


def _has_safetensors(p: Path) -> bool:
    return (p / "model.safetensors").is_file() or (p / "model.safetensors.index.json").is_file()


def check_weights(path: str | os.PathLike, *, what: str = "init") -> None:
    """Refuse a checkpoint whose safetensors weights are truncated, corrupt or hold NaN / Inf.

    Every floating-point tensor is read once, one at a time, through the checkpoint validator
    :func:`analysis.checkpoints.open_checkpoint` (``Checkpoint.read_float``), whose messages
    name the file and the tensor.  Directories with ``*.bin`` weights only are left to
    ``from_pretrained``.
    """
    p = Path(path)
    if not _has_safetensors(p):
        return
    ckpt = open_checkpoint(p, what)
    for name, info in ckpt.tensors.items():
        if info.is_float:
            ckpt.read_float(name)


def first_non_finite(model: Any) -> str | None:
    """The name of the first parameter of ``model`` holding NaN or Inf (``None`` if all are finite)."""
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            return name
    return None


def load_policy(path: str | os.PathLike, *, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, what: str = "init") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local directory (``AutoModelForCausalLM`` / ``AutoTokenizer``).

    The directory is validated first (:func:`check_model_dir`, :func:`check_weights`: no
    truncated file, no NaN or Inf weight), and a tokenizer with more ids than the model's
    embedding rows is refused.  The tokenizer is switched to left padding; a missing pad token is set to the eos token.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = check_model_dir(path, what=what)
    check_weights(p, what=what)
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(p, dtype=dtype, local_files_only=True)
    except Exception as err:  # OSError, ValueError, KeyError, ... from transformers
        raise ValueError(f"{what}: cannot load a causal LM from {str(p)!r}: {err}") from None
    rows = min(model.get_input_embeddings().weight.shape[0], output_head(model).shape[0])
    if len(tok) > rows:
        raise ValueError(f"{what}: the tokenizer in {str(p)!r} has {len(tok)} ids but the model's embedding "
                         f"has {rows} rows (vocab_size of {str(p / 'config.json')!r}); they must match")
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(dev), tok


def model_shape(*, init: str | os.PathLike | None = None, preset: str = "tiny-cpu",
                vocab_size: int | None = None) -> dict[str, int]:
    """``{"params", "vocab", "hidden", "layers", "kv_dim", "intermediate"}`` of a model, without
    building it: from ``PRESETS[preset]`` and ``vocab_size``, or from the ``config.json`` and
    the safetensors headers of ``init`` (sizes an estimate of the memory a run needs)."""
    if init is None:
        c = PRESETS[preset]
        V, h, L, inter = int(vocab_size or 0), c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
        kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
        per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * inter + 2 * h
        return {"params": 2 * V * h + L * per_layer + h, "vocab": V, "hidden": h, "layers": L, "kv_dim": kv,
                "intermediate": inter}
    import json

    p = Path(init)
    try:
        cfg = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        cfg = {}
    cfg = cfg if isinstance(cfg, dict) else {}

    def get(*names: str, default: int = 0) -> int:
        for n in names:
            v = cfg.get(n)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return default

    h = get("hidden_size", "n_embd", "d_model")
    heads = max(get("num_attention_heads", "n_head", default=1), 1)
    kv = get("head_dim", default=h // heads) * get("num_key_value_heads", default=heads)
    params = 0
    if _has_safetensors(p):
        params = sum(t.numel for t in open_checkpoint(p, "init").tensors.values())
    return {"params": params, "vocab": get("vocab_size"), "hidden": h,
            "layers": get("num_hidden_layers", "n_layer", "num_layers"), "kv_dim": kv,
            "intermediate": get("intermediate_size", "n_inner", default=4 * h)}


def memory_needed(shape: dict[str, int], *, sequences: int, seq_len: int, train_rows: int = 0,
                  optimizer: bool = False, reference: bool = False, bytes_per: int = 4) -> int:
    """Bytes a run needs at least (Python integers: no overflow), from :func:`model_shape`.

    The weights (plus gradients and two AdamW moments with ``optimizer``, plus a frozen copy
    with ``reference``); sampling ``sequences`` sequences of ``seq_len`` tokens (token ids, the
    KV cache, one step's logits); and, with ``train_rows``, a forward and backward pass over
    that many sequences (logits, log-softmax and their gradients; block activations).

    >>> shape = model_shape(preset="tiny-cpu", vocab_size=56)
    >>> shape["params"]
    254016
    >>> memory_needed(shape, sequences=64, seq_len=16) < 2**24
    True
    """
    P, V, h, L = shape["params"], shape["vocab"], shape["hidden"], shape["layers"]
    kv, inter = shape["kv_dim"], shape["intermediate"]
    weights = P * bytes_per * (1 + (3 if optimizer else 0) + (1 if reference else 0))
    sampling = sequences * seq_len * 8 * 4 + sequences * L * 2 * kv * seq_len * bytes_per + sequences * V * 4 * 3
    training = train_rows * seq_len * (V * 4 * 4 + L * (12 * h + 3 * inter) * bytes_per)
    return int(weights + sampling + training)


def output_head(model: Any) -> torch.Tensor:
    """The output-head weight ``W_head`` (``lm_head``, or the tied input embedding)."""
    return model.get_output_embeddings().weight


class HeadGradient:
    """The gradient of the output head ``W_head`` [V, d] summed over the backward passes of a step.

    ``g = Σ_k ∂L_k/∂W_head`` over the backward passes ``k`` since the last :meth:`pop` (one per
    minibatch and epoch), through the head's role as output projection only: the raw
    gradients, before any clipping.  An untied head (the presets: ``tie_word_embeddings=False``)
    is its own parameter, and ``g`` is the sum of its ``.grad`` read by :meth:`after_backward`
    after each ``backward()``.  A head tied to the input embedding (``tie_word_embeddings=True``,
    e.g. Qwen2.5-0.5B) shares its ``.grad`` with the embedding lookup; then a forward hook on the
    head module records its input ``h`` [.., d] and a gradient hook on its output adds
    ``(∂L/∂logits)ᵀ h`` — the head's own part of the shared gradient (what ``lm_head.grad``
    of an untied copy would hold).  Forward passes without gradient (sampling, reference
    log-probs) are ignored.  Used for FADE Cor. 15.3's successive-gradient alignment
    (:func:`analysis.spectra.successive_alignment`).

    Examples
    --------
    >>> lin = torch.nn.Linear(3, 2, bias=False)
    >>> class M(torch.nn.Module):
    ...     def __init__(self): super().__init__(); self.head = lin
    ...     def get_output_embeddings(self): return self.head
    ...     def get_input_embeddings(self): return None
    >>> hg = HeadGradient(M())
    >>> for _ in range(2):
    ...     lin(torch.ones(1, 3)).sum().backward(); hg.after_backward(); lin.weight.grad = None
    >>> hg.pop().tolist(), hg.tied
    ([[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]], False)
    """

    def __init__(self, model: Any):
        self.param = output_head(model)
        emb = model.get_input_embeddings()
        self.tied = emb is not None and emb.weight is self.param
        self.total: torch.Tensor | None = None
        self._handle = model.get_output_embeddings().register_forward_hook(self._forward) if self.tied else None

    def _add(self, g: torch.Tensor) -> None:
        g = g.detach().float()
        self.total = g.clone() if self.total is None else self.total + g

    def _forward(self, module: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        if not (torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad):
            return
        h = inputs[0].detach()

        def on_grad(g: torch.Tensor) -> None:
            self._add(g.reshape(-1, g.shape[-1]).float().T @ h.reshape(-1, h.shape[-1]).float())
        output.register_hook(on_grad)

    def after_backward(self) -> None:
        """Add the head's ``.grad`` of the last backward pass (untied head; the tied one is
        recorded by its hooks)."""
        if not self.tied and self.param.grad is not None:
            self._add(self.param.grad)

    def pop(self) -> torch.Tensor | None:
        """The summed gradient since the last call (``None`` if no backward pass ran); resets."""
        total, self.total = self.total, None
        return total

    def remove(self) -> None:
        """Remove the hook (tied heads)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def n_params(model: Any) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def prepare_policy(task: Any, *, init: str | os.PathLike | None = None, preset: str = "tiny-cpu",
                   seed: int = 0, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)``: loaded from ``init`` or built from ``preset`` with a local
    character tokenizer covering ``task.alphabet``.  Refuses a tokenizer that cannot encode
    the task's characters."""
    from .tokenizer import build_tokenizer, check_covers

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if init is not None:
        model, tok = load_policy(init, device=dev)
        check_covers(tok, task.alphabet, where=f"the tokenizer of {str(init)!r}")
        return model, tok
    tok = build_tokenizer(task.alphabet)
    return build_model(preset, tok, seed=seed).to(dev), tok
