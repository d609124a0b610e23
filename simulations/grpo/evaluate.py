"""Held-out evaluation: unbiased pass@k, answer-level and token-level entropy.

For each of ``problems`` distinct held-out problems (:meth:`Task.heldout_set`), ``n``
responses are sampled (temperature 1, top-p 1 by default) and verified; with ``c`` correct:

* pass@k — the unbiased estimator ``1 − C(n−c, k)/C(n, k)`` of Chen et al. (2021)
  (F-GRPO App. H.4 Eq. 25) via :func:`analysis.passk.pass_at_k`, averaged over problems;
* answer-level entropy (Two-Stage App. C.5) — per problem, over the ``M`` distinct answers with
  frequencies ``f_j`` among the ``n`` responses (malformed or unfinished responses count as
  the answer ``"NA"``), ``H_ans = −Σ_j (f_j/n) log(f_j/n)`` (nats), averaged over problems;
* token-level entropy (Two-Stage App. C.5) — ``H(p_t) = −Σ_v p_t(v) log p_t(v)`` of the sampling
  distribution at every generated token, averaged over all generated tokens (eos included).

Greedy decoding (``temperature = 0``).  Each problem gets one completion, the argmax token at
every step (:func:`greedy_decode`; ties go to the lowest token id, as ``torch.argmax`` and
transformers' ``generate(do_sample=False)`` break them), and the *greedy accuracy* — the fraction
of problems whose greedy completion is correct, i.e. pass@1 of that single completion — is
reported (the "greedy decoding accuracy" of Two-Stage Fig. 2 and 4 and A-GRAE Fig. 10).  It does
not depend on the seed, which still picks the held-out problems; ``top_p`` has no effect.  The
token-level entropy is then that of the policy's own next-token distribution (temperature 1)
along the greedy completions (the point mass that greedy decoding samples from has entropy 0);
the answer-level entropy of one completion is 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from analysis.io import atomic_dir
from analysis.passk import pass_at_k
from analysis.runtime import check_memory, resolve_device
from rlvr_theory import checks

from . import checkpoint as ck
from . import models, rollout, tasks
from .config import EVAL_FILES, EvalConfig

__all__ = ["EvalResult", "evaluate", "greedy_decode", "answer_entropy", "load_task"]


@dataclass
class EvalResult:
    """Summary (``pass_at_k``: {k: value}, entropies) and the per-problem table.

    ``decoding`` is ``"sample"`` or ``"greedy"`` (``temperature = 0``); ``greedy_accuracy`` is the
    share of problems whose greedy completion is correct (``None`` when sampling).
    """

    checkpoint: str
    task: dict[str, Any]
    n: int
    problems: int
    pass_at_k: dict[int, float]
    answer_entropy: float
    token_entropy: float
    solve_rate: float
    per_problem: pd.DataFrame
    decoding: str = "sample"
    greedy_accuracy: float | None = None

    def summary(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "task": self.task, "n": self.n, "problems": self.problems,
                "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
                "answer_entropy": self.answer_entropy, "token_entropy": self.token_entropy,
                "solve_rate": self.solve_rate, "decoding": self.decoding, "greedy_accuracy": self.greedy_accuracy}


def answer_entropy(problem_index: np.ndarray, answers: Sequence[str], n_problems: int) -> np.ndarray:
    """Per-problem entropy (nats) of the empirical answer distribution (Two-Stage App. C.5).

    ``problem_index[i]`` is the problem of ``answers[i]``; vectorised with ``np.unique``.
    """
    codes, inv = np.unique(np.asarray(answers, dtype=str), return_inverse=True)
    pair = problem_index.astype(np.int64) * len(codes) + inv.ravel()
    _, first, counts = np.unique(pair, return_index=True, return_counts=True)
    prob_of_pair = problem_index[first]
    n_per = np.bincount(problem_index, minlength=n_problems).astype(float)
    p = counts / n_per[prob_of_pair]
    return np.bincount(prob_of_pair, weights=-p * np.log(p), minlength=n_problems)


def load_task(checkpoint: str | os.PathLike, name: str | None = None, difficulty: int | None = None) -> tasks.Task:
    """The task of a checkpoint (its ``task.json``), with ``name``/``difficulty`` overrides."""
    spec = tasks.read_spec(checkpoint, what="checkpoint") or {}
    name = name or spec.get("name")
    if name is None:
        raise ValueError(f"task: {str(checkpoint)!r} has no task.json; pass the task name")
    same = name == spec.get("name")
    d = difficulty if difficulty is not None else (spec.get("difficulty") if same else None)
    kw = {k: spec[k] for k in ("heldout_fraction", "split_seed") if same and k in spec}
    return tasks.get(name, d, **kw)


@torch.no_grad()
def greedy_decode(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
                  eos_id: int, pad_id: int, use_cache: bool = True) -> rollout.Rollouts:
    """Greedy (argmax) decoding of one response per row of ``prompt_ids``.

    :func:`simulations.grpo.rollout.sample` with ``temperature=0`` (left-padded prompts, a KV cache,
    a row stops at its first ``eos`` and is padded with ``pad_id`` after it; the batch stops
    when every row has stopped or after ``max_new_tokens``), with the token chosen as
    ``argmax_v logits_t(v)`` instead of drawn: no randomness is used.  ``Rollouts.entropy`` holds
    the entropy of the model's next-token distribution ``softmax(logits_t)`` (temperature 1) at
    each generated position (0 after the response).  A non-finite next-token distribution raises
    ``FloatingPointError`` (as :func:`~simulations.grpo.rollout.sample` does).

    Examples
    --------
    >>> from simulations.grpo import models, tasks
    >>> from simulations.grpo.tokenizer import build_tokenizer
    >>> task = tasks.get("sort", 3)
    >>> tok = build_tokenizer(task.alphabet)
    >>> model = models.build_model("tiny-cpu", tok, seed=0)
    >>> ids, mask = rollout.encode_prompts(tok, ["sort:312=", "sort:21="])
    >>> ro = greedy_decode(model, ids, mask, max_new_tokens=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    >>> ro.response_ids.shape
    torch.Size([2, 4])
    >>> torch.equal(ro.response_ids, greedy_decode(model, ids, mask, max_new_tokens=4, eos_id=tok.eos_token_id,
    ...                                            pad_id=tok.pad_token_id).response_ids)   # deterministic
    True
    """
    T = checks.integer("max_new_tokens", max_new_tokens, low=1)
    return rollout.sample(model, prompt_ids, prompt_mask, max_new_tokens=T, eos_id=eos_id, pad_id=pad_id,
                          temperature=0.0, use_cache=use_cache, return_entropy=True)


_E = EvalConfig  # the defaults of the settings below are those of ``rlvr-train eval``


def evaluate(checkpoint: str | os.PathLike, *, task: tasks.Task | None = None, k: Sequence[int] = (1,),
             n: int | None = _E.n, problems: int = _E.problems, max_new_tokens: int | None = _E.max_new_tokens,
             temperature: float = _E.temperature, top_p: float = _E.top_p, seed: int = _E.seed,
             batch_size: int = _E.batch_size, device: str = _E.device, threads: int | None = _E.threads,
             progress: bool = True) -> EvalResult:
    """Evaluate a checkpoint directory on held-out problems (module docstring).

    ``n`` (samples per problem) defaults to ``max(k)``; every ``k`` must satisfy ``1 <= k <= n``.
    ``temperature = 0`` is greedy decoding (module docstring): one completion per problem
    (``n`` 1 or ``None``, ``k`` only 1), and ``EvalResult.greedy_accuracy`` is reported.
    ``batch_size`` bounds the sequences generated at once; ``threads``: CPU threads during the
    call.  The settings are described in :class:`~simulations.grpo.config.EvalConfig`.
    """
    threads = checks.integer("threads", threads, low=1, allow_none=True)
    with models.torch_threads(threads):
        return _evaluate(checkpoint, task=task, k=k, n=n, problems=problems, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size,
                         device=device, progress=progress)


@torch.no_grad()
def _evaluate(checkpoint, *, task, k, n, problems, max_new_tokens, temperature, top_p, seed, batch_size,
              device, progress) -> EvalResult:
    ks = sorted({checks.integer("k", x, low=1) for x in k})
    temperature = checks.number("temperature", temperature, low=0)
    greedy = temperature == 0
    if greedy and (ks != [1] or n not in (None, 1)):
        what, got = ("k", " ".join(map(str, ks))) if ks != [1] else ("n", n)
        raise ValueError(f"{what} must be 1 with temperature 0 (greedy decoding: one completion per problem, "
                         f"scored by its pass@1), got {got}")
    n = max(ks) if n is None else checks.integer("n", n, low=1)
    if max(ks) > n:
        raise ValueError(f"k must be <= n = {n} (samples per problem), got {max(ks)}")
    problems = checks.integer("problems", problems, low=1)
    batch_size = checks.integer("batch_size", batch_size, low=1)
    top_p = checks.number("top_p", top_p, low=0, high=1, low_open=True)
    seed = checks.integer("seed", seed, low=0)
    models.check_model_dir(checkpoint, what="checkpoint")
    task = load_task(checkpoint) if task is None else tasks.check_task(task)
    dev = resolve_device(device)
    max_new = max_new_tokens or task.max_answer_len() + 2
    per_chunk = max(1, batch_size // n)
    seqs, seq_len = min(per_chunk, problems) * n, task.max_prompt_len() + max_new
    check_memory(models.memory_needed(models.model_shape(init=checkpoint), sequences=seqs, seq_len=seq_len),
                 f"the evaluation (--batch-size {batch_size}: {seqs:,} sequences of up to {seq_len} tokens)",
                 device=dev)
    model, tok = models.load_policy(checkpoint, device=dev, what="checkpoint")
    model.eval()
    from .tokenizer import check_covers
    check_covers(tok, task.alphabet, where=f"the tokenizer of {str(checkpoint)!r}")
    probs = task.heldout_set(problems, seed=seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    correct, answers, ent_sum, ent_cnt = [], [], 0.0, 0.0

    from tqdm.auto import tqdm

    for lo in tqdm(range(0, len(probs), per_chunk), desc="eval", disable=not progress, leave=False):
        chunk = probs[lo:lo + per_chunk]
        ids, mask = rollout.encode_prompts(tok, [p.prompt for p in chunk], repeat=n, device=dev)
        try:
            if greedy:
                ro = greedy_decode(model, ids, mask, max_new_tokens=max_new, eos_id=tok.eos_token_id,
                                   pad_id=tok.pad_token_id)
            else:
                ro = rollout.sample(model, ids, mask, max_new_tokens=max_new, eos_id=tok.eos_token_id,
                                    pad_id=tok.pad_token_id, temperature=temperature, top_p=top_p, generator=gen,
                                    return_entropy=True)
        except FloatingPointError as err:
            raise ValueError(f"checkpoint: the model in {str(checkpoint)!r} cannot be sampled: {err} "
                             "(weights too large: a diverged run?)") from None
        ok, ans = rollout.score(task, [p for p in chunk for _ in range(n)], tok, ro)
        correct.append(ok)
        answers.extend(ans)
        m = ro.response_mask.float()
        ent_sum += float((ro.entropy * m).sum())
        ent_cnt += float(m.sum())
    P = len(probs)
    ok = np.concatenate(correct).reshape(P, n)
    c = ok.sum(-1)
    h_ans = answer_entropy(np.repeat(np.arange(P), n), answers, P)
    table = pd.DataFrame({"prompt": [p.prompt for p in probs], "answer": [p.answer for p in probs],
                          "n": n, "correct": c, "answer_entropy": h_ans})
    for kk in ks:
        table[f"pass@{kk}"] = pass_at_k(n, c, kk)
    return EvalResult(str(checkpoint), task.spec(), n, P,
                      {kk: float(table[f"pass@{kk}"].mean()) for kk in ks},
                      float(h_ans.mean()), ent_sum / max(ent_cnt, 1.0), float(ok.mean()), table,
                      decoding="greedy" if greedy else "sample", greedy_accuracy=float(ok.mean()) if greedy else None)


def write_result(res: EvalResult, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """``eval.json`` (summary) and ``per_problem.csv`` into directory ``out``, which appears
    complete or not at all (:func:`analysis.io.atomic_dir`).  An existing non-empty ``out``
    is replaced only if it holds an earlier ``eval.json``, or with ``overwrite``."""
    def fill(tmp: Path) -> None:
        ck.write_json(tmp / "eval.json", res.summary())
        res.per_problem.to_csv(tmp / "per_problem.csv", index=False)
    return atomic_dir(out, fill, markers=None if overwrite else EVAL_FILES[:1])
