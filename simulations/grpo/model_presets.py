"""The model presets of the GRPO trainer (``--preset``, ``--memory-preset``), without torch.

:data:`PRESETS` is :data:`simulations.grpo.models.PRESETS` (the same dict, the architectures in
that module's docstring); it lives here so that the settings (:mod:`simulations.grpo.config`)
and ``rlvr-train --help`` can name the presets without loading torch and transformers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny-cpu": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=256, max_position_embeddings=128),
    "small-gpu": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                      intermediate_size=2048, max_position_embeddings=512),
}
