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

from analysis.runtime import resolve_device
from rlvr_theory.runner import apply_threads

__all__ = ["PRESETS", "build_model", "check_model_dir", "load_policy", "prepare_policy", "torch_threads",
           "quiet_transformers", "output_head", "n_params"]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny-cpu": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=256, max_position_embeddings=128),
    "small-gpu": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                      intermediate_size=2048, max_position_embeddings=512),
}


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

    The threads are set by :func:`rlvr_theory.runner.apply_threads`, as ``--threads`` of every
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


def build_model(preset: str, tokenizer: Any, *, seed: int = 0) -> Any:
    """A freshly initialised ``Qwen2ForCausalLM`` of ``preset`` for ``tokenizer`` (float32, CPU).

    Initialisation uses ``torch.manual_seed(seed)`` inside a forked RNG, so the global torch
    RNG is left as it was.
    """
    from transformers import AutoModelForCausalLM, Qwen2Config

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    cfg = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=False,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, **PRESETS[preset])
    with torch.random.fork_rng(devices=[]), quiet_transformers():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def check_model_dir(path: str | os.PathLike, *, what: str = "init") -> Path:
    """Refuse a directory that is not a Hugging Face causal-LM checkpoint (before loading it)."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"{what}: {str(p)!r} is not a directory")
    if not (p / "config.json").is_file():
        raise ValueError(f"{what}: {str(p)!r} is not a model directory (no config.json)")
    weights = [f for f in os.listdir(p) if f.endswith((".safetensors", ".bin")) or f.endswith(".index.json")]
    if not weights:
        raise ValueError(f"{what}: {str(p)!r} is not a model directory (no *.safetensors or *.bin weights)")
    if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        raise ValueError(f"{what}: {str(p)!r} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    return p


def load_policy(path: str | os.PathLike, *, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, what: str = "init") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local directory (``AutoModelForCausalLM`` / ``AutoTokenizer``).

    The tokenizer is switched to left padding; a missing pad token is set to the eos token.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = check_model_dir(path, what=what)
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(p, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{what}: cannot load a causal LM from {str(p)!r}: {err}") from None
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return model.to(dev), tok


def output_head(model: Any) -> torch.Tensor:
    """The output-head weight ``W_head`` (``lm_head``, or the tied input embedding)."""
    return model.get_output_embeddings().weight


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
