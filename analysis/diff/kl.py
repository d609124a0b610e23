"""KL between the base and the RL policy on continuations sampled from each (RL's Razor).

``rlvr-diff kl BASE RL --prompts FILE --out DIR`` and ``rlvr-diff weights ... --prompts FILE``.
RL's Razor (Shenfeld, Pari, Agrawal, arXiv 2509.04259) finds that how much a fine-tuned model
forgets of its prior tasks is predicted by the KL between the base policy ``π_0`` and the
fine-tuned policy ``π`` evaluated on the new task, ``E_{x~task}[KL(π_0(·|x) ‖ π(·|x))]``, which
it calls the *forward* KL, and not by the norm, sparsity or rank of the weight change.

Definitions (``x`` a prompt, ``y = (y_1, ..., y_n)`` a continuation, ``T`` the temperature,
``π(v | x, y_<t) = softmax(logits_t / T)_v`` each model's next-token distribution):

* **forward** ``KL(π_base ‖ π_RL)``: continuations sampled from ``π_base``; at every sampled
  token ``t`` the exact full-vocabulary divergence
  ``KL_t = Σ_v p(v) (log p(v) − log q(v))`` with ``p = π_base(·|x, y_<t)``, ``q = π_RL(·|x, y_<t)``;
  this is the direction RL's Razor calls forward (expectation under the base policy);
* **reverse** ``KL(π_RL ‖ π_base)``: continuations sampled from ``π_RL``, ``p = π_RL``,
  ``q = π_base`` at each of their tokens.

By the chain rule, ``E_{y~p}[Σ_t KL_t] = KL(p(y|x) ‖ q(y|x))`` (the divergence of the whole
continuation distributions): ``Σ_t KL_t`` is an unbiased estimate of it with less variance than
the single-sample estimate ``Σ_t (log p(y_t) − log q(y_t))``, which is reported beside it for
reference (its conditional mean at each token is ``KL_t``).

Token accounting: the tokens of a continuation are those generated up to and **including** the
first stop token (the sampling model's ``generation_config.eos_token_id``, else its
``config.eos_token_id``; a continuation without one runs to ``max_new_tokens``).  Stopping is a
decision of the policy, so the stop token's step counts; padding after it does not.  The prompt's
tokens are never counted.

Numbers per direction: ``kl_token_mean`` (tokens pooled over all prompts: ``Σ KL_t / N``) with a
standard error over prompts (ratio estimator), ``kl_prompt_mean`` (the mean of the per-prompt
token means) with its standard error over prompts, ``kl_sequence_mean`` (mean of ``Σ_t KL_t``
per continuation, nats per continuation), the single-sample estimate ``mc_token_mean`` and the
token counts; per prompt the same token means.  KL in nats, computed in float64 from the
models' logits (``log_softmax``, chunked over tokens so that one chunk holds at most 2^25
entries); an entry with ``p(v) = 0`` contributes 0.

Sampling: ``n_samples`` continuations per prompt from each model with transformers' ``generate``
(``do_sample=True``, ``temperature``, ``top_p``, no top-k, no repetition penalty: the
checkpoint's own ``generation_config.json`` sampling settings are set aside so that the samples
come from ``softmax(logits / T)``), prompts left-padded in batches of ``batch_size``; seeded
(``seed`` for the base's samples, ``seed + 1`` for the RL's) through a forked torch random state.
The samples depend on the seed, the batch size and the device.  With ``top_p < 1`` the samples
come from the nucleus-truncated policy while the KL is between the full tempered distributions.
Each continuation is then scored under both models in one teacher-forced forward each
(right-padded batches), and the two next-token distributions compared at every token.

Prompts: a JSONL file (one JSON object per line with ``prompt``, a string tokenized with the
tokenizer's special tokens, or ``prompt_ids``, a list of token ids; other keys are ignored, so a
rollouts file of ``rlvr-diff hidden-states`` reads as its prompts), or, for a ``.txt`` file, one
prompt per line.  Blank lines are skipped and repeated prompts are measured once.  Prompts are
tokenized as written: apply a chat template before, or give ``prompt_ids``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device, run_metadata

from ..checkpoints import has_tokenizer, load_causal_lm, load_tokenizer, open_checkpoint

__all__ = ["token_kl", "read_prompts", "policy_kl", "policy_kls", "check_inputs", "write_kl_report", "DTYPES",
           "KL_FILES", "KL_MARKERS", "DIRECTIONS"]

#: accepted values of ``dtype=`` (the models' dtype; the KL itself is always float64)
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
#: files of a ``rlvr-diff kl`` report
KL_FILES = ("kl.md", "kl.html", "kl.json")
#: a non-empty directory holding one of these is an earlier ``rlvr-diff kl`` report
KL_MARKERS = ("kl.json",)
#: the two directions: (key, divergence, model sampled from)
DIRECTIONS = (("forward", "KL(π_base ‖ π_RL)", "base"), ("reverse", "KL(π_RL ‖ π_base)", "rl"))
#: float64 entries of one chunk of log-probabilities (256 MiB)
_CHUNK = 1 << 25
_PROMPTS_HELP = ("a JSONL file with a 'prompt' (string) or 'prompt_ids' (token ids) per line, "
                 "or a .txt file with one prompt per line")


# ------------------------------------------------------------------ the formula
def token_kl(logits_p: Any, logits_q: Any, targets: Any = None, *,
             temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Exact ``KL(p_t ‖ q_t)`` per row, and the single-sample term ``log p_t(y_t) − log q_t(y_t)``.

    Parameters
    ----------
    logits_p, logits_q : array_like, shape (N, V)
        Next-token logits of the two models at the same ``N`` positions (torch or numpy).
    targets : array_like of int, shape (N,), optional
        The sampled tokens ``y_t`` (for the single-sample term).
    temperature : float
        ``p_t = softmax(logits_p / temperature)``, likewise ``q_t``.

    Returns
    -------
    kl : torch.Tensor, float64, shape (N,)
        ``Σ_v p_t(v) (log p_t(v) − log q_t(v))`` (``log_softmax`` in float64; entries with
        ``p_t(v) = 0`` contribute 0; ``+inf`` where ``q_t(v) = 0 < p_t(v)``).
    mc : torch.Tensor or None
        ``log p_t(y_t) − log q_t(y_t)`` (``None`` without ``targets``).

    Examples
    --------
    Two tokens with ``p = (3/4, 1/4)`` and ``q = (1/2, 1/2)``:
    ``KL = (3/4) log(3/2) + (1/4) log(1/2) ≈ 0.1308``.

    >>> kl, mc = token_kl([[math.log(3.0), 0.0]], [[0.0, 0.0]], [1])
    >>> round(float(kl[0]), 6), round(float(mc[0]), 6)
    (0.130812, -0.693147)
    """
    temperature = checks.number("temperature", temperature, low=0, low_open=True)
    lp_in = torch.as_tensor(logits_p)
    lq_in = torch.as_tensor(logits_q)
    if lp_in.ndim != 2 or lp_in.shape != lq_in.shape:
        raise ValueError(f"logits_p and logits_q must be two (N, V) arrays of one shape, got "
                         f"{tuple(lp_in.shape)} and {tuple(lq_in.shape)}")
    n, V = lp_in.shape
    lq_in = lq_in.to(lp_in.device)
    kl = torch.empty(n, dtype=torch.float64, device=lp_in.device)
    mc = None
    if targets is not None:
        y = torch.as_tensor(targets, dtype=torch.long, device=lp_in.device).reshape(-1)
        if y.numel() != n:
            raise ValueError(f"targets must hold one token per row ({n}), got {y.numel()}")
        mc = torch.empty(n, dtype=torch.float64, device=lp_in.device)
    step = max(1, _CHUNK // max(V, 1))
    for i in range(0, n, step):  # chunks of rows; each chunk one vectorised pass over the vocabulary
        lp = torch.log_softmax(lp_in[i:i + step].to(torch.float64) / temperature, dim=-1)
        lq = torch.log_softmax(lq_in[i:i + step].to(torch.float64) / temperature, dim=-1)
        p = lp.exp()
        kl[i:i + step] = torch.where(p > 0, p * (lp - lq), torch.zeros((), dtype=torch.float64,
                                                                         device=lp.device)).sum(-1)
        if mc is not None:
            yi = y[i:i + step, None]
            mc[i:i + step] = (lp.gather(-1, yi) - lq.gather(-1, yi))[:, 0]
    return kl, mc


# ------------------------------------------------------------------ prompts
def read_prompts(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The prompts of a file: ``[{"prompt": str} or {"prompt_ids": [int]}, ...]`` (each with its
    ``"source"``, ``FILE:LINE``).

    JSONL (any extension but ``.txt``): one JSON object per line with ``prompt`` (a non-empty
    string) or ``prompt_ids`` (a non-empty list of token ids ``>= 0``); other keys are ignored.
    ``.txt``: every non-blank line is one prompt.  Blank lines are skipped.  Raises
    ``ValueError`` starting with ``prompts:`` and naming ``FILE:LINE``.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"prompts: {str(path)!r} is not a file ({_PROMPTS_HELP})")
    out: list[dict[str, Any]] = []
    text = p.suffix.lower() == ".txt"
    for ln, raw in enumerate(p.read_bytes().splitlines(), 1):
        at = f"{p}:{ln}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"prompts: {at}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        if not line.strip():
            continue
        if text:
            out.append({"prompt": line, "source": at})
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"prompts: {at}: not valid JSON ({err}); {_PROMPTS_HELP}") from None
        out.append({**_check_prompt(rec, f"prompts: {at}:"), "source": at})
    if not out:
        raise ValueError(f"prompts: {str(path)!r} holds no prompts (only blank lines); {_PROMPTS_HELP}")
    return out


def _check_prompt(rec: Any, where: str) -> dict[str, Any]:
    """``{"prompt": str}`` or ``{"prompt_ids": [int]}`` of one record (a dict, a string or a list of ids)."""
    if isinstance(rec, str):
        rec = {"prompt": rec}
    elif isinstance(rec, (list, tuple, np.ndarray)):
        rec = {"prompt_ids": list(rec)}
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where} must be a JSON object with 'prompt' (a string) or 'prompt_ids' (token ids)")
    if "prompt_ids" in rec:
        v = rec["prompt_ids"]
        if not isinstance(v, (list, tuple, np.ndarray)) or len(v) == 0 or any(isinstance(x, bool) for x in v):
            raise ValueError(f"{where} prompt_ids must be a non-empty list of token ids (integers >= 0), got {v!r}")
        ids = checks.array(f"{where} prompt_ids", v, ndim=1, integer=True, low=0)
        return {"prompt_ids": [int(x) for x in ids]}
    v = rec.get("prompt")
    if not isinstance(v, str) or not v:
        raise ValueError(f"{where} needs 'prompt' (a non-empty string) or 'prompt_ids' (a list of token ids), "
                         f"got {'no prompt' if v is None else repr(v)}")
    return {"prompt": v}


def _prompt_records(prompts: Any) -> tuple[list[dict[str, Any]], str]:
    """The unique prompt records (first occurrence kept) and how the run block names them."""
    if isinstance(prompts, (str, os.PathLike)):
        recs, name = read_prompts(prompts), str(prompts)
    else:
        if isinstance(prompts, Mapping) or not isinstance(prompts, Sequence) or not len(prompts):
            raise ValueError("prompts must be a prompts file or a non-empty sequence of prompts (strings, "
                             "token id lists or {'prompt': ...} / {'prompt_ids': [...]} records)")
        recs = [{**_check_prompt(r, f"prompts[{i}]:"), "source": f"prompts[{i}]"} for i, r in enumerate(prompts)]
        name = f"{len(recs)} records"
    seen: set[Any] = set()
    unique = []
    for r in recs:
        key = ("ids", tuple(r["prompt_ids"])) if "prompt_ids" in r else ("text", r["prompt"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique, name


def _tokenize(recs: list[dict[str, Any]], tokenizer: str | None, base: str) -> tuple[list[list[int]], str | None]:
    """Token ids of every prompt (text through the tokenizer, with its special tokens)."""
    text = [i for i, r in enumerate(recs) if "prompt_ids" not in r]
    tok_dir = tokenizer if tokenizer is not None else (base if has_tokenizer(base) else None)
    ids = [list(r.get("prompt_ids", [])) for r in recs]
    if text:
        if tok_dir is None:
            raise ValueError(f"tokenizer: {recs[text[0]]['source']} has text, not token ids, and the base "
                             f"checkpoint {str(base)!r} has no tokenizer; pass --tokenizer DIR (tokenizer=)")
        tok = load_tokenizer(tok_dir, "tokenizer", transformers=True)
        enc = tok([recs[i]["prompt"] for i in text])["input_ids"]
        for i, e in zip(text, enc):
            if not len(e):
                raise ValueError(f"prompts: {recs[i]['source']}: the prompt has no tokens after tokenization")
            ids[i] = [int(x) for x in e]
    return ids, (None if not text else str(tok_dir))


# ------------------------------------------------------------------ checks
def _head_rows(ck: Any) -> int:
    return int(ck.info(ck.head).shape[0])


def check_inputs(base: str, checkpoints: Sequence[str], prompts: Any, *,
                 labels: Sequence[str] | None = None) -> tuple[Any, list[Any]]:
    """Refuse, before any model is loaded: a LoRA adapter directory among ``checkpoints`` (the
    policy needs a full checkpoint), a checkpoint whose vocabulary (output-head rows) differs
    from the base's, and a prompts file that cannot be read.  Returns the opened checkpoints."""
    from .lora import _is_adapter

    labels = [f"checkpoints[{i}]" for i in range(len(checkpoints))] if labels is None else list(labels)
    for lab, path in zip(labels, checkpoints):
        if _is_adapter(str(path)):
            raise ValueError(f"{lab}: {str(path)!r} is a LoRA adapter directory; the policy KL needs a full "
                             "checkpoint: merge the adapter into its base first (peft: PeftModel.from_pretrained("
                             "base, adapter).merge_and_unload().save_pretrained(DIR)) and give DIR")
    b = open_checkpoint(base, "base")
    cks = [open_checkpoint(p, lab) for lab, p in zip(labels, checkpoints)]
    vb = _head_rows(b)
    for ck in cks:
        v = _head_rows(ck)
        if v != vb:
            raise ValueError(f"{ck.label}: vocabulary of {v} tokens (output-head rows of {str(ck.path)!r}) differs "
                             f"from the base's {vb} ({str(b.path)!r}): the two policies are distributions over "
                             "different token sets, their KL is not defined")
    _prompt_records(prompts)
    return b, cks


# ------------------------------------------------------------------ sampling and scoring
def _stop_ids(model: Any) -> list[int]:
    """The sampling model's stop tokens: ``generation_config.eos_token_id``, else ``config.eos_token_id``."""
    gc = getattr(model, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return []
    return sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])})


def _pad_id(model: Any, stop: list[int]) -> int:
    pad = getattr(model.config, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    return stop[0] if stop else 0


def _batches(n: int, size: int) -> list[range]:
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def _bar(items: list, progress: bool, desc: str) -> Any:
    if not progress:
        return items
    from tqdm.auto import tqdm
    return tqdm(items, desc=desc, unit="batch")


def _sample(model: Any, prompt_ids: list[list[int]], *, n_samples: int, max_new_tokens: int, temperature: float,
            top_p: float, seed: int, batch_size: int, dev: torch.device, progress: bool,
            desc: str) -> list[tuple[int, list[int]]]:
    """``n_samples`` continuations of every prompt from ``model``: ``[(prompt index, ids up to and
    including the first stop token)]``, prompt by prompt."""
    from transformers import GenerationConfig

    stop = _stop_ids(model)
    pad = _pad_id(model, stop)
    jobs = [i for i in sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i])) for _ in range(n_samples)]
    gen_cfg = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=0, min_p=None,
                               typical_p=1.0, repetition_penalty=1.0, num_beams=1, min_new_tokens=0,
                               max_new_tokens=max_new_tokens, eos_token_id=stop or None, pad_token_id=pad)
    saved = model.generation_config  # its sampling settings would fill what gen_cfg leaves unset
    model.generation_config = GenerationConfig(eos_token_id=stop or None, pad_token_id=pad)
    out: list[tuple[int, list[int]]] = []
    stop_t = torch.tensor(stop, dtype=torch.long)
    devices = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            for bt in _bar(_batches(len(jobs), batch_size), progress, desc):
                rows = [prompt_ids[jobs[k]] for k in bt]
                L = max(len(r) for r in rows)
                ids = torch.full((len(rows), L), pad, dtype=torch.long)
                att = torch.zeros((len(rows), L), dtype=torch.long)
                for j, r in enumerate(rows):  # left padding
                    ids[j, L - len(r):] = torch.tensor(r)
                    att[j, L - len(r):] = 1
                gen = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), generation_config=gen_cfg)
                cont = gen[:, L:].cpu()
                n = torch.full((len(rows),), cont.shape[1], dtype=torch.long)
                if stop:
                    is_stop = torch.isin(cont, stop_t)
                    n = torch.where(is_stop.any(1), is_stop.int().argmax(1) + 1, n)
                out += [(jobs[k], cont[j, :int(n[j])].tolist()) for j, k in enumerate(bt)]
    finally:
        model.generation_config = saved
    return sorted(out, key=lambda t: t[0])  # stable: samples keep their order within a prompt


def _score(p_model: Any, q_model: Any, prompt_ids: list[list[int]], samples: list[tuple[int, list[int]]], *,
           temperature: float, batch_size: int, dev: torch.device, progress: bool,
           desc: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per continuation: ``KL_t`` and ``log p(y_t) − log q(y_t)`` at each of its tokens (float64),
    from one teacher-forced forward of each model per right-padded batch."""
    seqs = [prompt_ids[i] + c for i, c in samples]
    plen = [len(prompt_ids[i]) for i, _ in samples]
    order = sorted(range(len(seqs)), key=lambda k: len(seqs[k]))
    kl_out: list[np.ndarray] = [np.zeros(0)] * len(seqs)
    mc_out: list[np.ndarray] = [np.zeros(0)] * len(seqs)
    with torch.no_grad():
        for bt in _bar(_batches(len(order), batch_size), progress, desc):
            ks = [order[k] for k in bt]
            L = max(len(seqs[k]) for k in ks)
            ids = torch.zeros((len(ks), L), dtype=torch.long)
            att = torch.zeros((len(ks), L), dtype=torch.long)
            for j, k in enumerate(ks):
                ids[j, :len(seqs[k])] = torch.tensor(seqs[k])
                att[j, :len(seqs[k])] = 1
            P = torch.tensor([plen[k] for k in ks])
            S = torch.tensor([len(seqs[k]) for k in ks])
            t = torch.arange(L)
            # position t predicts token t + 1: the continuation's tokens are t + 1 in [P, S - 1]
            mask = (t[None, :] >= P[:, None] - 1) & (t[None, :] <= S[:, None] - 2)
            tgt = ids[:, 1:][mask[:, :-1]]
            md = mask.to(dev)
            ids_d, att_d = ids.to(dev), att.to(dev)
            lp = p_model(input_ids=ids_d, attention_mask=att_d).logits[md]
            lq = q_model(input_ids=ids_d, attention_mask=att_d).logits[md]
            kl, mc = token_kl(lp, lq, tgt.to(dev), temperature=temperature)
            counts = (S - P).tolist()
            for k, a, b in zip(ks, kl.cpu().split(counts), mc.cpu().split(counts)):
                kl_out[k], mc_out[k] = a.numpy(), b.numpy()
            del lp, lq
    return kl_out, mc_out


def _se(x: np.ndarray) -> float | None:
    """Standard error of the mean of ``x`` (``None`` for fewer than 2 values)."""
    return float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) >= 2 else None


def _summary(kl: list[np.ndarray], mc: list[np.ndarray], prompt_of: np.ndarray, n_prompts: int) -> dict[str, Any]:
    """Overall and per-prompt numbers of one direction (vectorised over continuations and prompts)."""
    n = np.array([len(a) for a in kl], dtype=float)
    s_kl = np.array([a.sum() for a in kl])
    s_mc = np.array([a.sum() for a in mc])
    N = np.bincount(prompt_of, weights=n, minlength=n_prompts)
    K = np.bincount(prompt_of, weights=s_kl, minlength=n_prompts)
    M = np.bincount(prompt_of, weights=s_mc, minlength=n_prompts)
    seqs = np.bincount(prompt_of, minlength=n_prompts).astype(float)
    tot = float(N.sum())
    kl_tok = float(K.sum() / tot)
    mc_tok = float(M.sum() / tot)
    P = n_prompts
    # ratio estimator Σ K_i / Σ N_i: s.e. from the prompts' residuals K_i − m N_i

    def ratio_se(S: np.ndarray, m: float) -> float | None:
        return float(math.sqrt(P / (P - 1) * np.sum((S - m * N) ** 2)) / tot) if P >= 2 else None

    per_prompt = K / N
    d = np.concatenate(mc) - np.concatenate(kl)  # martingale differences: uncorrelated, mean 0
    overall = {
        "n_sequences": int(len(kl)), "n_tokens": int(tot),
        "kl_token_mean": kl_tok, "kl_token_se": ratio_se(K, kl_tok),
        "kl_prompt_mean": float(per_prompt.mean()), "kl_prompt_se": _se(per_prompt),
        "kl_sequence_mean": float(s_kl.mean()), "kl_sequence_se": _se(K / seqs),
        "mc_token_mean": mc_tok, "mc_token_se": ratio_se(M, mc_tok),
        "mc_minus_kl_se": float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) >= 2 else None,
        "mean_tokens_per_sequence": float(tot / len(kl)),
    }
    rows = [{"n_tokens": int(N[i]), "kl": float(per_prompt[i]), "mc": float(M[i] / N[i]),
             "kl_sequence": float(K[i] / seqs[i])} for i in range(P)]
    return {"overall": overall, "rows": rows}


# ------------------------------------------------------------------ the measure
def _settings(n_samples: Any, max_new_tokens: Any, temperature: Any, top_p: Any, seed: Any, batch_size: Any,
              dtype: Any) -> dict[str, Any]:
    out = {"n_samples": checks.integer("n_samples", n_samples, low=1),
           "max_new_tokens": checks.integer("max_new_tokens", max_new_tokens, low=1),
           "temperature": checks.number("temperature", temperature, low=0, low_open=True),
           "top_p": checks.number("top_p", top_p, low=0, high=1, low_open=True),
           "seed": checks.integer("seed", seed, low=0),
           "batch_size": checks.integer("batch_size", batch_size, low=1)}
    checks.choice("dtype", dtype, DTYPES)
    return out


def policy_kls(base: str, checkpoints: Sequence[str], prompts: Any, *, n_samples: int = 4,
               max_new_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
               batch_size: int = 8, device: str = "auto", tokenizer: str | None = None, dtype: str = "auto",
               progress: bool = True, return_tokens: bool = False,
               labels: Sequence[str] | None = None) -> dict[str, Any]:
    """:func:`policy_kl` of several RL checkpoints against one base, the base loaded and sampled once.

    Returns ``{"settings": ..., "checkpoints": [one result of policy_kl per checkpoint, without
    its "run" block]}`` (``report.json["kl"]`` of ``rlvr-diff weights --prompts``).  ``labels``
    name the checkpoints in messages (default ``checkpoints[i]``).
    """
    t0 = time.perf_counter()
    st = _settings(n_samples, max_new_tokens, temperature, top_p, seed, batch_size, dtype)
    checkpoints = list(checkpoints)
    if not checkpoints:
        raise ValueError("checkpoints must hold at least one RL checkpoint directory")
    b_ck, cks = check_inputs(base, checkpoints, prompts, labels=labels)
    recs, prompts_name = _prompt_records(prompts)
    ids, tok_dir = _tokenize(recs, tokenizer, base)
    dev = resolve_device(device)
    base_model, head = load_causal_lm(b_ck, dev, dtype, progress)
    V = int(head.weight.shape[0])
    max_pos = getattr(base_model.config, "max_position_embeddings", None) or \
        getattr(base_model.config, "n_positions", None)
    for r, p in zip(recs, ids):
        if max(p) >= V:
            raise ValueError(f"prompts: {r['source']}: token id {max(p)} is outside the vocabulary (size {V})")
        if max_pos is not None and len(p) + st["max_new_tokens"] > max_pos:
            raise ValueError(f"prompts: {r['source']}: {len(p)} prompt tokens + max_new_tokens "
                             f"{st['max_new_tokens']} exceed the model's max_position_embeddings = {max_pos}")
    samp = {k: st[k] for k in ("n_samples", "max_new_tokens", "temperature", "top_p", "batch_size")}
    base_samples = _sample(base_model, ids, seed=st["seed"], dev=dev, progress=progress,
                           desc="KL: sampling the base", **samp)
    P = len(recs)
    settings = {**st, "dtype": str(base_model.dtype).replace("torch.", ""), "tokenizer": tok_dir,
                "stop_token_ids": {"base": _stop_ids(base_model)}, "stop_token_counts": True,
                "kl_precision": "float64", "seeds": {"base": st["seed"], "rl": st["seed"] + 1},
                "prompts": prompts_name, "n_prompts": P}
    results = []
    for path, ck in zip(checkpoints, cks):
        t1 = time.perf_counter()
        rl_model, rl_head = load_causal_lm(ck, dev, dtype, progress)
        rl_samples = _sample(rl_model, ids, seed=st["seed"] + 1, dev=dev, progress=progress,
                             desc="KL: sampling the RL checkpoint", **samp)
        dirs = {}
        for (key, _, frm), smp, (pm, qm) in zip(DIRECTIONS, (base_samples, rl_samples),
                                                   ((base_model, rl_model), (rl_model, base_model))):
            kl, mc = _score(pm, qm, ids, smp, temperature=st["temperature"], batch_size=st["batch_size"], dev=dev,
                            progress=progress, desc=f"KL: scoring {'base' if frm == 'base' else 'RL'} samples")
            prompt_of = np.array([i for i, _ in smp], dtype=np.int64)
            dirs[key] = (_summary(kl, mc, prompt_of, P), smp, kl, mc)
        rows = [{"index": i, "source": r["source"], "prompt": r.get("prompt"), "n_prompt_tokens": len(ids[i]),
                 **{key: dirs[key][0]["rows"][i] for key, _, _ in DIRECTIONS}} for i, r in enumerate(recs)]
        res: dict[str, Any] = {
            "base": str(base), "rl": str(path), "device": str(dev),
            "vocab_size": V,
            **{key: {"divergence": name, "sampled_from": frm, **dirs[key][0]["overall"]}
               for key, name, frm in DIRECTIONS},
            "prompts": rows,
            "settings": {**settings, "stop_token_ids": {"base": _stop_ids(base_model), "rl": _stop_ids(rl_model)}},
            "timing_s": time.perf_counter() - t1,
        }
        if return_tokens:
            res["tokens"] = {key: [{"prompt": i, "ids": c, "kl": k.tolist(), "mc": m.tolist()}
                                   for (i, c), k, m in zip(dirs[key][1], dirs[key][2], dirs[key][3])]
                             for key, _, _ in DIRECTIONS}
        results.append(res)
        del rl_model, rl_head
    return {"settings": settings, "checkpoints": results, "timing_s": time.perf_counter() - t0}


def policy_kl(base: str, rl: str, prompts: Any, *, n_samples: int = 4, max_new_tokens: int = 256,
              temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, batch_size: int = 8,
              device: str = "auto", tokenizer: str | None = None, dtype: str = "auto", progress: bool = True,
              return_tokens: bool = False) -> dict[str, Any]:
    """Token-averaged exact forward and reverse KL between a base and an RL policy (RL's Razor).

    Parameters
    ----------
    base, rl : str
        Hugging Face causal-LM checkpoint directories (full checkpoints; a LoRA adapter is
        refused: merge it first).  Their vocabularies (output-head rows) must be equal.
    prompts : str, os.PathLike or sequence
        A prompts file (:func:`read_prompts`: JSONL with ``prompt`` / ``prompt_ids``, or ``.txt``)
        or the prompts themselves (strings, token id lists or such records).
    n_samples : int
        Continuations sampled per prompt from each model (``>= 1``).
    max_new_tokens : int
        Longest continuation (``>= 1``); prompt plus continuation must fit the model's positions.
    temperature : float
        Sampling temperature ``T > 0``; both models' distributions are ``softmax(logits / T)``.
    top_p : float
        Nucleus sampling ``(0, 1]`` (1: none; see the module docstring for ``< 1``).
    seed : int
        Seed of the base's samples (``seed + 1``: the RL's); ``>= 0``.
    batch_size : int
        Sequences per ``generate`` call and per forward pass (``>= 1``).
    device : "auto", "cpu", "cuda", "cuda:N"
        Where both models run (both are held in memory at once).
    tokenizer : str, optional
        Tokenizer directory for text prompts (default: the base's, if it has one).
    dtype : "auto", "float32", "bfloat16", "float16", "float64"
        The models' dtype (``"auto"``: float32 on the CPU, the checkpoint's on CUDA); the KL is
        computed in float64 from their logits whatever this is.
    progress : bool
        tqdm bars over batches, transformers' loading bars.
    return_tokens : bool
        Also return every continuation with its per-token ``KL_t`` and single-sample terms
        (``"tokens"``: ``{"forward": [{"prompt", "ids", "kl", "mc"}, ...], "reverse": [...]}``).

    Returns
    -------
    dict
        ``base``, ``rl``, ``device``, ``vocab_size``; ``forward`` (``KL(π_base ‖ π_RL)`` on base
        samples, RL's Razor's forward KL) and ``reverse`` (``KL(π_RL ‖ π_base)`` on RL samples),
        each with ``n_sequences``, ``n_tokens``, ``kl_token_mean`` / ``kl_token_se``,
        ``kl_prompt_mean`` / ``kl_prompt_se``, ``kl_sequence_mean`` / ``kl_sequence_se``,
        ``mc_token_mean`` / ``mc_token_se``, ``mc_minus_kl_se`` and ``mean_tokens_per_sequence``
        (s.e. over prompts; ``None`` with one prompt); ``prompts`` (one row per prompt: ``index``,
        ``source``, ``prompt``, ``n_prompt_tokens`` and per direction ``n_tokens``, ``kl``, ``mc``,
        ``kl_sequence``); ``settings``; ``timing_s``; ``run``
        (:func:`rlvr_plumbing.runtime.run_metadata`).  KL in nats.

    Raises
    ------
    ValueError
        Bad settings (named), unreadable or empty prompts (``prompts: FILE:LINE: ...``), a LoRA
        adapter, different vocabularies, checkpoints transformers cannot load.
    """
    t0 = time.perf_counter()
    out = policy_kls(base, [rl], prompts, n_samples=n_samples, max_new_tokens=max_new_tokens,
                     temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size, device=device,
                     tokenizer=tokenizer, dtype=dtype, progress=progress, return_tokens=return_tokens, labels=["rl"])
    doc = out["checkpoints"][0]
    doc["timing_s"] = time.perf_counter() - t0
    st = out["settings"]
    doc["run"] = run_metadata({"base": str(base), "rl": str(rl), "prompts": st["prompts"],
                               "n_samples": st["n_samples"], "max_new_tokens": st["max_new_tokens"],
                               "temperature": st["temperature"], "top_p": st["top_p"], "seed": st["seed"],
                               "batch_size": st["batch_size"], "device": str(device),
                               "tokenizer": None if tokenizer is None else str(tokenizer), "dtype": dtype},
                              seed=st["seed"], device=doc["device"])
    return doc


# ------------------------------------------------------------------ the report
def write_kl_report(doc: dict, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``kl.md``, ``kl.html`` and ``kl.json`` of a :func:`policy_kl` document into directory
    ``out`` atomically (``out`` as for :func:`analysis.report.write_report`; an earlier ``kl``
    report is replaced).  The Markdown and HTML hold the "Policy KL" section of the weights
    report (:func:`analysis.report._policy_kl`)."""
    from rlvr_plumbing.io import atomic_dir, atomic_write_text

    from .. import report

    if not isinstance(doc, dict) or "forward" not in doc or "reverse" not in doc:
        raise ValueError("doc must be the dict returned by analysis.diff.kl.policy_kl")
    page = report.Page()
    report._policy_kl(page, {"kl": {"settings": doc.get("settings", {}), "checkpoints": [doc]}}, [])
    title = "Policy KL between the base and the RL checkpoint"

    def build(tmp: Path) -> None:
        atomic_write_text(tmp / "kl.md", report.render_markdown(title, page.blocks))
        atomic_write_text(tmp / "kl.html", report.render_html(title, page.blocks, page.images))
        atomic_write_text(tmp / "kl.json", report.to_json(doc))

    return atomic_dir(out, build, markers=None if overwrite else KL_MARKERS)
