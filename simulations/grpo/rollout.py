"""Sampling ``B`` prompts × ``G`` rollouts with a KV cache, and per-token log-probs.

:func:`sample` generates all ``N = B·G`` sequences in one batch (left-padded prompts, rows
``b·G … b·G+G−1`` belong to prompt ``b``), one token per step for every sequence, reusing the
keys and values of earlier positions (``transformers.DynamicCache``).  Tokens are drawn from
``softmax(logits / temperature)`` restricted to the nucleus of mass ``top_p`` (``top_p = 1``:
the full distribution; FADE and F-GRPO App. H both sample at temperature 1,
top-p 1) with an explicit ``torch.Generator``, so a run is reproducible from its seed.
A sequence stops at its first ``eos``; the batch stops when every sequence has stopped or
after ``max_new_tokens``.  ``use_cache=False`` recomputes the whole prefix at every step
(same tokens, used by the benchmark to measure what the cache saves).

With a ``memory`` model and ``mu > 0`` (Over-Sharpening distribution-level calibration, Sec. 3.2,
Alg. 1 lines 5-6) the tokens are drawn from ``softmax((f_θ − μ·f_φ) / temperature)``, restricted to
the nucleus of mass ``top_p`` of that calibrated distribution (greedy: its argmax), where ``f_θ``
and ``f_φ`` are the policy's and the memory's next-token logits at the same prefix; the memory
model is stepped together with the policy, with its own KV cache.  ``mu = 0`` (or no memory)
never runs the memory model: the draws are those without it, bit for bit.

:func:`token_logprobs` recomputes, with gradients if enabled, ``log π(y_t | x, y_<t)`` of the
sampled tokens and the entropy ``H_t = −Σ_v π(v) log π(v)`` of each next-token distribution
(Two-Stage App. C.5).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlvr_plumbing import checks

__all__ = ["Rollouts", "encode_prompts", "sample", "token_logprobs", "decode_responses", "score"]


@dataclass
class Rollouts:
    """A batch of sampled responses.

    Attributes
    ----------
    prompt_ids: ``[N, P]`` left-padded prompt tokens.
    prompt_mask: ``[N, P]`` 1 on real prompt tokens.
    response_ids: ``[N, T]`` sampled tokens (``pad`` after the first ``eos``).
    response_mask: ``[N, T]`` 1 on response tokens up to and including the first ``eos``.
    completed: ``[N]`` True where the response ended with ``eos`` within ``max_new_tokens``.
    entropy: ``[N, T]`` entropy of ``softmax(logits/temperature)`` at each sampled position
        (before the nucleus cut; 0 after the response), or ``None``.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    completed: torch.Tensor
    entropy: torch.Tensor | None = None

    @property
    def lengths(self) -> torch.Tensor:
        """Response lengths (tokens, eos included)."""
        return self.response_mask.sum(-1)

    def full(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask, position_ids)`` of prompt + response for a forward pass."""
        ids = torch.cat([self.prompt_ids, self.response_ids], dim=1)
        mask = torch.cat([self.prompt_mask, torch.ones_like(self.response_mask)], dim=1)
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        return ids, mask, pos

    def select(self, idx: torch.Tensor | slice) -> Rollouts:
        """The rows ``idx`` (a minibatch)."""
        return Rollouts(self.prompt_ids[idx], self.prompt_mask[idx], self.response_ids[idx],
                        self.response_mask[idx], self.completed[idx],
                        None if self.entropy is None else self.entropy[idx])


def encode_prompts(tokenizer: Any, prompts: Sequence[str], repeat: int = 1,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(ids, mask)`` of ``prompts``, each repeated ``repeat`` times consecutively."""
    enc = tokenizer(list(prompts), padding=True, add_special_tokens=False, return_tensors="pt",
                    padding_side="left")
    ids = enc["input_ids"].repeat_interleave(repeat, dim=0).to(device)
    mask = enc["attention_mask"].repeat_interleave(repeat, dim=0).to(device)
    return ids, mask


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tokens outside the smallest set of mass >= top_p (renormalised by multinomial)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(-1)
    drop = cum - sorted_p >= top_p  # mass before this token already reaches top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def cache_keyword(model: Any) -> str:
    """The keyword under which ``model.forward`` takes its key/value cache, read from its
    signature: ``"cache"`` where it has one (recent transformers, which deprecate
    ``past_key_values`` and remove it in 5.40), else ``"past_key_values"`` (earlier releases)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.no_grad()
def sample(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
           eos_id: int, pad_id: int, temperature: float = 1.0, top_p: float = 1.0,
           generator: torch.Generator | None = None, use_cache: bool = True,
           return_entropy: bool = False, memory: Any = None, mu: float = 0.0) -> Rollouts:
    """Sample one response per row of ``prompt_ids`` (see the module docstring).

    Parameters
    ----------
    model: a causal LM (``transformers`` API: ``input_ids``, ``attention_mask``,
        ``position_ids`` and a key/value cache, :func:`cache_keyword`).
    prompt_ids, prompt_mask: ``[N, P]`` left-padded prompts (:func:`encode_prompts`).
    max_new_tokens: response budget ``T_max`` per sequence.
    temperature: >= 0; ``0``: greedy decoding (the argmax token at every step, ties to the lowest
        id as ``torch.argmax``; no randomness, ``top_p`` and ``generator`` unused; the entropy is
        that of the model's distribution at temperature 1).  top_p: in (0, 1].
    generator: a ``torch.Generator`` on the model's device (reproducibility).
    use_cache: reuse keys/values (``True``) or recompute the prefix at every step.
    return_entropy: also record the entropy of each sampling distribution (``Rollouts.entropy``;
        with a memory, of the calibrated distribution).
    memory, mu: a second causal LM over the same vocabulary, and ``μ >= 0``: sample from
        ``softmax((f_θ − μ f_φ) / temperature)`` (module docstring); ``mu = 0``: not used.

    Raises ``FloatingPointError`` when a sampling distribution is not finite (a diverged or
    corrupt model); the trainer, SFT and evaluation turn it into a message naming the cause.
    """
    from transformers import DynamicCache

    temperature = checks.number("temperature", temperature, low=0)
    greedy = temperature == 0
    top_p = checks.number("top_p", top_p, low=0, high=1, low_open=True)
    mu = checks.number("mu", mu, low=0)
    calibrated = memory is not None and mu > 0
    N, P = prompt_ids.shape
    T, dev = max_new_tokens, prompt_ids.device
    out = torch.full((N, T), pad_id, dtype=torch.long, device=dev)
    resp_mask = torch.zeros((N, T), dtype=torch.long, device=dev)
    ent = torch.zeros((N, T), dtype=torch.float32, device=dev) if return_entropy else None
    alive = torch.ones(N, dtype=torch.bool, device=dev)
    # attention mask and positions of the whole (prompt + budget) sequence, sliced per step
    mask = torch.cat([prompt_mask, torch.ones((N, T), dtype=prompt_mask.dtype, device=dev)], dim=1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    ids = torch.cat([prompt_ids, out], dim=1)
    cache = DynamicCache(config=model.config) if use_cache else None
    kv, mem_kv = cache_keyword(model), cache_keyword(memory) if calibrated else None
    was_training = model.training
    model.eval()
    if calibrated:
        mem_cache = DynamicCache(config=memory.config) if use_cache else None
        mem_training = memory.training
        memory.eval()
    for t in range(T):
        if use_cache:
            lo = 0 if t == 0 else P + t - 1
        else:
            lo = 0
        logits = model(input_ids=ids[:, lo:P + t], attention_mask=mask[:, :P + t], position_ids=pos[:, lo:P + t],
                       use_cache=use_cache, **{kv: cache}).logits[:, -1].float()
        if calibrated:  # f̃ = f_θ − μ f_φ (Over-Sharpening Alg. 1 line 5)
            logits = logits - mu * memory(
                input_ids=ids[:, lo:P + t], attention_mask=mask[:, :P + t], position_ids=pos[:, lo:P + t],
                use_cache=use_cache, **{mem_kv: mem_cache}).logits[:, -1].float()
        if temperature not in (0.0, 1.0):
            logits = logits / temperature
        probs = torch.softmax(logits, dim=-1)
        if not bool(torch.isfinite(probs).all()):  # multinomial would fail with a bare RuntimeError
            model.train(was_training)
            if calibrated:
                memory.train(mem_training)
            whose = "the calibrated (policy − μ·memory) sampling's" if calibrated else "the policy's"
            raise FloatingPointError(f"{whose} next-token probabilities are not finite "
                                     f"(NaN or Inf logits at response token {t + 1})")
        if return_entropy:
            ent[:, t] = torch.where(alive, -(probs * torch.log_softmax(logits, dim=-1)).sum(-1), 0.0)
        if greedy:
            tok = logits.argmax(-1)
        else:
            if top_p < 1:
                probs = _nucleus(probs, top_p)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        tok = torch.where(alive, tok, pad_id)
        out[:, t] = tok
        ids[:, P + t] = tok
        resp_mask[:, t] = alive
        alive &= tok != eos_id
        if not bool(alive.any()):
            break
    model.train(was_training)
    if calibrated:
        memory.train(mem_training)
    return Rollouts(prompt_ids, prompt_mask, out, resp_mask, ~alive, ent)


def token_logprobs(model: Any, rollouts: Rollouts, *, temperature: float = 1.0,
                   with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logp, entropy)``, each ``[N, T]``: log-prob of each sampled response token and the
    entropy of its next-token distribution, both at ``temperature`` (float32; float64 for a
    float64 model; zero where ``response_mask`` is 0 is *not* enforced — callers mask)."""
    ids, mask, pos = rollouts.full()
    P = rollouts.prompt_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    logits = logits[:, P - 1: -1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, rollouts.response_ids[..., None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, ent


def decode_responses(tokenizer: Any, rollouts: Rollouts) -> tuple[list[str], torch.Tensor]:
    """``(texts, valid)``: each response decoded without its ``eos``, and whether it is a
    well-formed answer — ended by ``eos`` within the budget and free of other special tokens
    (a stray ``<pad>``/``<bos>`` inside an answer would otherwise vanish in decoding)."""
    ids, eos, pad = rollouts.response_ids, tokenizer.eos_token_id, tokenizer.pad_token_id
    body = rollouts.response_mask.bool() & (ids != eos)
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), device=ids.device)
    stray = (torch.isin(ids, special) & body).any(-1)
    texts = tokenizer.batch_decode(torch.where(body, ids, pad).cpu(), skip_special_tokens=True)
    return texts, rollouts.completed & ~stray


def score(task: Any, problems: Sequence[Any], tokenizer: Any, rollouts: Rollouts) -> tuple[np.ndarray, list[str]]:
    """``(correct [N] bool, answers)``: the task's verifier on the decoded responses, False for
    malformed ones (:func:`decode_responses`); ``answers`` has ``"NA"`` for malformed responses
    (Two-Stage App. C.5's convention for answer-level entropy)."""
    texts, valid = decode_responses(tokenizer, rollouts)
    valid_np = valid.cpu().numpy()
    ok = np.asarray(task.verify(problems, texts), dtype=bool)
    if ok.shape != valid_np.shape:
        raise ValueError(f"task: verify of {task.name!r} must return one bool per response, "
                         f"got shape {ok.shape} for {valid_np.shape[0]} responses")
    answers = np.where(valid_np, np.array(texts, dtype=object), "NA").tolist()
    return ok & valid_np, answers
