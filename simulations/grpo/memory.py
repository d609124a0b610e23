"""The memory model of distribution-level calibration (DLC) for the GRPO trainer.

Over-Sharpening (paper 004) Sec. 3.2 and Alg. 1 lines 4-6 and 21-22: an auxiliary memory network
``m_φ`` with logits ``f_φ(q, o)`` is trained by cross-entropy on the sampled trajectories after
each policy step, "so that it outputs higher logits for frequently generated outputs"; rollouts
are drawn from ``softmax(f_θ − μ·f_φ)`` with ``μ ≥ 0`` (:func:`simulations.grpo.rollout.sample`
with ``memory=``, ``mu=``).  The policy update is unchanged: its log-probabilities and ratios are
those of ``π_θ`` (no importance weight for the calibrated sampling), as the paper writes it and
as the linear-head version in :mod:`simulations.linear_head` does.

Here ``m_φ`` is a second small causal LM over the policy's vocabulary (the paper uses a smaller
Qwen3 model as memory): a fresh model of a preset of :mod:`simulations.grpo.models` (default the
smallest, ``tiny-cpu``) whose output head is set to zero, so that ``f_φ ≡ 0`` and the first step
samples from ``π_θ`` exactly — as neutral as the paper's memory, which has seen no trajectory
yet (the linear-head memory likewise starts at ``W_φ = 0``).  Its update (line 22) is one AdamW
step on the token-mean cross-entropy of the step's ``B·G`` sampled responses given their prompts,

    L(φ) = − Σ_{n,t} m_{n,t} log softmax(f_φ(x_n, y_{n,<t}))[y_{n,t}] / Σ_{n,t} m_{n,t},

at temperature 1 (``m`` the response mask, the ``eos`` included), without gradient clipping.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr_plumbing import checks

from . import models
from .rollout import Rollouts, token_logprobs

__all__ = ["MemoryModel", "memory_loss"]


def memory_loss(memory: Any, rollouts: Rollouts) -> torch.Tensor:
    """The token-mean cross-entropy of ``rollouts``' responses under ``memory`` (module docstring)."""
    logp, _ = token_logprobs(memory, rollouts, temperature=1.0, with_entropy=False)
    mask = rollouts.response_mask.to(logp.dtype)
    return -(logp * mask).sum() / mask.sum()


class MemoryModel:
    """A memory LM ``m_φ`` and its optimizer (module docstring).

    Parameters
    ----------
    policy, tokenizer: the policy (its output head fixes the vocabulary size) and its tokenizer.
    preset: the memory's architecture, a key of :data:`simulations.grpo.models.PRESETS`.
    lr, weight_decay: its AdamW settings.
    seed: seed of its (random) body initialisation; the head starts at zero.

    Examples
    --------
    >>> from simulations.grpo import tasks, tokenizer as tk
    >>> tok = tk.build_tokenizer(tasks.get("sort", 3).alphabet)
    >>> policy = models.build_model("tiny-cpu", tok)
    >>> mem = MemoryModel(policy, tok, preset="tiny-cpu", lr=1e-3)
    >>> float(models.output_head(mem.model).detach().abs().max())      # f_φ ≡ 0 at the start
    0.0
    """

    def __init__(self, policy: Any, tokenizer: Any, *, preset: str = "tiny-cpu", lr: float = 3e-4,
                 weight_decay: float = 0.0, seed: int = 0):
        checks.choice("memory_preset", preset, tuple(models.PRESETS))
        lr = checks.number("memory_lr", lr, low=0, low_open=True)
        V = models.output_head(policy).shape[0]
        dev = next(policy.parameters()).device
        self.model = models.build_model(preset, tokenizer, seed=seed, vocab_size=V).to(dev)
        with torch.no_grad():
            models.output_head(self.model).zero_()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay)

    def update(self, rollouts: Rollouts) -> float:
        """One AdamW step on :func:`memory_loss` of ``rollouts`` (Alg. 1 line 22); returns the loss
        before the step."""
        self.model.train()
        loss = memory_loss(self.model, rollouts)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def state_dict(self) -> dict[str, Any]:
        """Weights and optimizer state (saved with each trainer checkpoint)."""
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
