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

ΔNLL on rare-correct trajectories (F-GRPO App. F.2, Table 2's ``ΔNLL_rare``).  A fixed set of
*rare-correct* trajectories is built once from the base (initial) policy
(:func:`rare_correct_set`): ``prompts`` distinct training prompts, ``samples`` responses each
sampled from the base model at temperature 1, only the correct ones kept; each kept trajectory's
length-normalised NLL under the base model, ``NLL(y | x) = −(1/T) Σ_t log π(y_t | x, y_<t)`` over
its ``T`` response tokens (``eos`` included), is computed with a full forward pass
(:func:`sequence_nll`), and the rare-correct subset is the top ``fraction`` (the paper's 1 %) of
them by that NLL.  :func:`delta_nll_rare` is the mean NLL of this fixed subset under a trained
model minus its mean under the base model (the paper's "increase in negative log-likelihood on
trajectories that were correct but low-probability under the base model"; positive: the trained
policy moved probability away from them).  The paper uses 256 prompts × 800 samples; the sizes
are arguments here.  ``evaluate(..., rare=SET)`` adds ``nll_rare`` and ``delta_nll_rare`` to the
result (absent otherwise).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from analysis.passk import pass_at_k
from rlvr_plumbing import checks
from rlvr_plumbing.io import atomic_dir
from rlvr_plumbing.runtime import check_memory, resolve_device

from . import checkpoint as ck
from . import models, rollout, tasks
from .config import EVAL_FILES, EvalConfig

__all__ = ["EvalResult", "evaluate", "greedy_decode", "answer_entropy", "load_task", "RareSet", "rare_correct_set",
           "sequence_nll", "delta_nll_rare",
           "add_triage", "check_triage"]


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
    #: with ``evaluate(..., rare=SET)``: the mean length-normalised NLL of the rare-correct set under
    #: this checkpoint, and its increase over the base model (F-GRPO App. F.2); ``None`` otherwise
    nll_rare: float | None = None
    delta_nll_rare: float | None = None
    #: with :func:`add_triage`: the pre-RL triage summary (:meth:`analysis.triage.Triage.summary`) and the
    #: policy entropies; ``None`` otherwise
    triage: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        out = {"checkpoint": self.checkpoint, "task": self.task, "n": self.n, "problems": self.problems,
               "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
               "answer_entropy": self.answer_entropy, "token_entropy": self.token_entropy,
               "solve_rate": self.solve_rate, "decoding": self.decoding, "greedy_accuracy": self.greedy_accuracy}
        if self.delta_nll_rare is not None:
            out["nll_rare"], out["delta_nll_rare"] = self.nll_rare, self.delta_nll_rare
        if self.triage is not None:
            out["triage"] = self.triage
        return out


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


@dataclass
class RareSet:
    """The rare-correct trajectories of a base model (F-GRPO App. F.2; :func:`rare_correct_set`).

    Token ids as the base model's tokenizer wrote them: ``prompt_ids``/``prompt_mask`` ``[M, P]``
    left-padded, ``response_ids``/``response_mask`` ``[M, T]`` (mask 1 up to and including
    ``eos``); ``base_nll`` ``[M]`` their length-normalised NLL under the base model.  ``candidates``
    is the number of correct trajectories they were chosen from, ``drawn`` the number sampled.
    """

    base: str
    prompts: list[str]
    responses: list[str]
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    base_nll: np.ndarray
    fraction: float
    candidates: int
    drawn: int

    def rollouts(self, device: torch.device | str = "cpu") -> rollout.Rollouts:
        """The trajectories as :class:`~simulations.grpo.rollout.Rollouts` (all completed)."""
        return rollout.Rollouts(self.prompt_ids.to(device), self.prompt_mask.to(device), self.response_ids.to(device),
                                self.response_mask.to(device), torch.ones(len(self.prompts), dtype=torch.bool,
                                                                          device=device))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the set to ``path`` (one ``.npz`` file; :meth:`load` reads it back)."""
        from rlvr_plumbing.io import atomic_write

        arrays = {k: getattr(self, k).cpu().numpy() for k in ("prompt_ids", "prompt_mask", "response_ids",
                                                               "response_mask")}
        meta = {"base": self.base, "fraction": self.fraction, "candidates": self.candidates, "drawn": self.drawn}
        import json

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, base_nll=self.base_nll, prompts=np.array(self.prompts, dtype=str),
                         responses=np.array(self.responses, dtype=str), meta=np.array(json.dumps(meta)), **arrays)
        return atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike, *, what: str = "path") -> RareSet:
        """The set written to ``path`` by :meth:`save`.

        Read with ``allow_pickle=False``: nothing in the file is executed.  A path that is not
        such a set (missing, a directory, not a ``.npz`` archive, truncated, holding Python
        objects, lacking an array, arrays of inconsistent shapes or types) is refused with a
        ``ValueError`` that starts with ``what`` (the caller's name for the path: the command
        line passes its setting, shown as the flag) and names the file and what was expected.

        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "rare.npz"
        >>> _ = f.write_text("not an archive")
        >>> RareSet.load(f)
        Traceback (most recent call last):
        ...
        ValueError: path: file '.../rare.npz' is not a .npz archive; expected a rare-correct set (.npz, ...)
        """
        import zipfile

        p = Path(path)
        where = f"{what}: file {str(p)!r}"
        if not p.exists() or p.is_dir():
            raise ValueError(f"{what}: {str(p)!r} {'is a directory' if p.exists() else 'does not exist'}; "
                             f"expected {RARE_SET_EXPECTED}")
        if not zipfile.is_zipfile(p):
            raise ValueError(f"{where} is not a .npz archive; expected {RARE_SET_EXPECTED}")
        try:
            with np.load(p, allow_pickle=False) as z:
                missing = [k for k in RARE_SET_ARRAYS if k not in z.files]
                if missing:
                    raise ValueError(f"{where} lacks the array {missing[0]!r}; expected {RARE_SET_EXPECTED}, "
                                     f"whose arrays are {', '.join(RARE_SET_ARRAYS)}")
                try:
                    arrays = {k: z[k] for k in RARE_SET_ARRAYS}
                except ValueError as err:  # numpy refuses object arrays without allow_pickle
                    if "allow_pickle" not in str(err):
                        raise
                    raise ValueError(f"{where} holds Python objects (object arrays), which are never loaded; "
                                     f"expected {RARE_SET_EXPECTED}") from None
        except ValueError as err:
            if str(err).startswith(where):  # refused above, by name
                raise
            raise ValueError(f"{where} is truncated or corrupt ({_first_line(err)}); expected {RARE_SET_EXPECTED}") \
                from None
        except OSError as err:
            if err.errno is not None:  # the system refused the read (permission, I/O): not the file's fault
                raise
            raise ValueError(f"{where} is truncated or corrupt ({_first_line(err)}); expected {RARE_SET_EXPECTED}") \
                from None
        except Exception as err:  # zipfile.BadZipFile, EOFError, zlib.error, ...: an archive that is not whole
            raise ValueError(f"{where} is truncated or corrupt ({type(err).__name__}: {_first_line(err)}); "
                             f"expected {RARE_SET_EXPECTED}") from None
        return cls(*_check_rare_arrays(arrays, where))


#: the arrays of a rare-correct set file (:meth:`RareSet.save`)
RARE_SET_ARRAYS = ("meta", "prompts", "responses", "prompt_ids", "prompt_mask", "response_ids", "response_mask",
                   "base_nll")
#: what a rare-correct set file is, in the messages that refuse one
RARE_SET_EXPECTED = "a rare-correct set (.npz, written by RareSet.save or rlvr-train eval --nll-rare-set)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _check_rare_arrays(z: dict[str, np.ndarray], where: str) -> tuple:
    """The fields of a :class:`RareSet` from the arrays of its file, checked (``ValueError``
    starting with ``where``: the key and what it must hold)."""
    import json

    meta_keys = ("base", "fraction", "candidates", "drawn")
    try:
        meta = json.loads(str(z["meta"])) if z["meta"].ndim == 0 and z["meta"].dtype.kind == "U" else None
    except json.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict) or any(k not in meta for k in meta_keys) or not isinstance(meta["base"], str) \
            or any(not isinstance(meta[k], (int, float)) or isinstance(meta[k], bool) for k in meta_keys[1:]):
        raise ValueError(f"{where}: array 'meta' must hold a JSON object with {', '.join(map(repr, meta_keys))}; "
                         f"expected {RARE_SET_EXPECTED}")
    texts = {k: z[k] for k in ("prompts", "responses")}
    for k, a in texts.items():
        if a.ndim != 1 or a.dtype.kind != "U":
            raise ValueError(f"{where}: array {k!r} must be a 1-D array of text, got {a.dtype} of shape {a.shape}; "
                             f"expected {RARE_SET_EXPECTED}")
    M = len(texts["prompts"])
    for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask"):
        a = z[k]
        if a.ndim != 2 or a.dtype.kind not in "iub" or a.shape[0] != M or (a.size and a.min() < 0):
            raise ValueError(f"{where}: array {k!r} must be a 2-D array of non-negative integers with one row per "
                             f"prompt ({M}), got {a.dtype} of shape {a.shape}; expected {RARE_SET_EXPECTED}")
    for ids, mask in (("prompt_ids", "prompt_mask"), ("response_ids", "response_mask")):
        if z[ids].shape != z[mask].shape:
            raise ValueError(f"{where}: arrays {ids!r} {z[ids].shape} and {mask!r} {z[mask].shape} must have the same "
                             f"shape; expected {RARE_SET_EXPECTED}")
    nll = z["base_nll"]
    if nll.shape != (M,) or nll.dtype.kind != "f" or not np.isfinite(nll).all() or len(texts["responses"]) != M:
        raise ValueError(f"{where}: arrays 'responses' and 'base_nll' must hold one entry per prompt ({M}; "
                         f"'base_nll' finite floats), got {len(texts['responses'])} and {nll.dtype} of shape "
                         f"{nll.shape}; expected {RARE_SET_EXPECTED}")
    if M == 0:
        raise ValueError(f"{where} holds no trajectory; expected {RARE_SET_EXPECTED}")
    return (meta["base"], texts["prompts"].tolist(), texts["responses"].tolist(),
            *(torch.from_numpy(z[k]) for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask")),
            nll, float(meta["fraction"]), int(meta["candidates"]), int(meta["drawn"]))


@torch.no_grad()
def sequence_nll(model: Any, ro: rollout.Rollouts, *, batch_size: int = 1024) -> np.ndarray:
    """Length-normalised NLL of each response, ``−(1/T_i) Σ_t log π(y_t | x, y_<t)`` over its
    ``T_i`` response tokens (``eos`` included), temperature 1, from a full forward pass in chunks
    of ``batch_size`` sequences (float64 result ``[N]``)."""
    batch_size = checks.integer("batch_size", batch_size, low=1)
    was = model.training
    model.eval()
    out = []
    for lo in range(0, ro.prompt_ids.shape[0], batch_size):
        part = ro.select(slice(lo, lo + batch_size))
        logp, _ = rollout.token_logprobs(model, part, with_entropy=False)
        m = part.response_mask.to(logp.dtype)
        out.append((-(logp * m).sum(-1).double() / m.sum(-1).double().clamp_min(1)).cpu().numpy())
    model.train(was)
    return np.concatenate(out) if out else np.zeros(0)


def _distinct_train_problems(task: tasks.Task, n: int, seed: int) -> list[tasks.Problem]:
    rng = np.random.default_rng([seed, task.split_seed, 11])
    seen: dict[str, tasks.Problem] = {}
    misses = 0
    while len(seen) < n and misses < 20 * n + 1000:
        prob = task.sample(rng, 1)[0]
        if prob.prompt not in seen:
            seen[prob.prompt] = prob
            misses = 0
        else:
            misses += 1
    return list(seen.values())


def rare_correct_set(base: str | os.PathLike, *, task: tasks.Task | None = None, prompts: int = 256,
                     samples: int = 800, fraction: float = 0.01, seed: int = 0, max_new_tokens: int | None = None,
                     batch_size: int = 2048, device: str = "auto", threads: int | None = None,
                     progress: bool = False, what: str = "base") -> RareSet:
    """The rare-correct set of the base checkpoint ``base`` (F-GRPO App. F.2; module docstring).

    ``prompts`` distinct training prompts (fewer if the training split is smaller), ``samples``
    responses each at temperature 1; the correct ones are ranked by their length-normalised NLL
    under ``base`` and the top ``ceil(fraction · correct)`` (at least 1) form the set.  A base
    that is not a readable checkpoint, has no task (no ``task.json`` and no ``task``), or solves
    none of the sampled problems is refused with a ``ValueError`` starting with ``what`` (the
    caller's name for ``base``: ``rlvr-train eval`` passes its setting ``nll_rare_base``, which
    the command line shows as ``--nll-rare-base``).

    Examples
    --------
    >>> import tempfile
    >>> from simulations.grpo import sft
    >>> from simulations.grpo.config import SFTConfig
    >>> d = tempfile.mkdtemp()
    >>> base = sft.train_sft(SFTConfig(out=d + "/sft", task="sort", difficulty=2, target_solve_rate=0.3,
    ...                                eval_every=25, eval_problems=16, eval_samples=2, threads=1, device="cpu",
    ...                                quiet=True))
    >>> rare = rare_correct_set(base, prompts=8, samples=16, fraction=0.1, device="cpu", threads=1)
    >>> len(rare.prompts) == max(1, -(-rare.candidates // 10))
    True
    >>> delta_nll_rare(base, rare, device="cpu")        # the base model itself: no change
    0.0
    """
    prompts = checks.integer("prompts", prompts, low=1)
    samples = checks.integer("samples", samples, low=1)
    fraction = checks.probability("fraction", fraction, low_open=True)
    seed = checks.integer("seed", seed, low=0)
    batch_size = checks.integer("batch_size", batch_size, low=1)
    threads = checks.integer("threads", threads, low=1, allow_none=True)
    models.check_model_dir(base, what=what)
    if task is None:
        if tasks.read_spec(base, what=what) is None:
            raise ValueError(f"{what}: {str(base)!r} has no task.json (expected the checkpoint of a model trained "
                             "by rlvr-train, or give the task)")
        task = load_task(base)
    else:
        task = tasks.check_task(task)
    dev = resolve_device(device)
    with models.torch_threads(threads), torch.no_grad():
        model, tok = models.load_policy(base, device=dev, what=what)
        model.eval()
        probs = _distinct_train_problems(task, prompts, seed)
        max_new = max_new_tokens or task.max_answer_len() + 2
        gen = torch.Generator(device=dev).manual_seed(seed)
        per_chunk = max(1, batch_size // samples)
        kept: list[tuple[list[str], rollout.Rollouts]] = []
        from tqdm.auto import tqdm
        for lo in tqdm(range(0, len(probs), per_chunk), desc="rare set", disable=not progress, leave=False):
            chunk = probs[lo:lo + per_chunk]
            ids, mask = rollout.encode_prompts(tok, [p.prompt for p in chunk], repeat=samples, device=dev)
            ro = rollout.sample(model, ids, mask, max_new_tokens=max_new, eos_id=tok.eos_token_id,
                                pad_id=tok.pad_token_id, generator=gen)
            ok, _ = rollout.score(task, [p for p in chunk for _ in range(samples)], tok, ro)
            idx = torch.from_numpy(np.flatnonzero(ok)).to(dev)
            if len(idx):
                kept.append(([chunk[i // samples].prompt for i in idx.tolist()], ro.select(idx)))
        if not kept:
            raise ValueError(f"{what}: the model in {str(base)!r} solved none of the {prompts * samples} sampled "
                             "responses, so it has no rare-correct set (expected a base model that solves some "
                             "training problems; more prompts or samples per prompt may find some)")
        # one left-padded batch of every kept trajectory (prompts re-encoded; responses padded on the right)
        prompt_text = [p for names, _ in kept for p in names]
        T = max(int(ro.response_mask.sum(-1).max()) for _, ro in kept)
        resp = torch.cat([torch.nn.functional.pad(ro.response_ids[:, :T], (0, T - min(T, ro.response_ids.shape[1])),
                                                  value=tok.pad_token_id) for _, ro in kept])
        rmask = torch.cat([torch.nn.functional.pad(ro.response_mask[:, :T], (0, T - min(T, ro.response_mask.shape[1])))
                           for _, ro in kept])
        pids, pmask = rollout.encode_prompts(tok, prompt_text, device=dev)
        allro = rollout.Rollouts(pids, pmask, resp, rmask, torch.ones(len(prompt_text), dtype=torch.bool, device=dev))
        nll = sequence_nll(model, allro, batch_size=batch_size)
        m = max(1, math.ceil(fraction * len(nll) - 1e-9))
        top = np.argsort(-nll, kind="stable")[:m]
        sel = allro.select(torch.from_numpy(top).to(dev))
        texts, _ = rollout.decode_responses(tok, sel)
        # drop prompt columns that are padding in every selected row
        keep_cols = sel.prompt_mask.bool().any(0)
        out = RareSet(str(base), [prompt_text[i] for i in top], texts, sel.prompt_ids[:, keep_cols].cpu(),
                      sel.prompt_mask[:, keep_cols].cpu(), sel.response_ids.cpu(), sel.response_mask.cpu(),
                      nll[top], float(fraction), len(nll), len(probs) * samples)
        # the base NLL of the stored set as delta_nll_rare will recompute it (same inputs, same batching)
        out.base_nll = sequence_nll(model, out.rollouts(dev))
        return out


def delta_nll_rare(checkpoint: str | os.PathLike, rare: RareSet, *, batch_size: int = 1024, device: str = "auto",
                   threads: int | None = None) -> float:
    """``ΔNLL_rare`` of ``checkpoint``: the mean length-normalised NLL of the rare-correct set under
    it minus the set's mean under the base model (F-GRPO App. F.2, Table 2)."""
    return _nll_rare(checkpoint, rare, batch_size=batch_size, device=device, threads=threads)[1]


def _nll_rare(checkpoint, rare, *, batch_size, device, threads, model=None) -> tuple[float, float]:
    threads = checks.integer("threads", threads, low=1, allow_none=True)
    with models.torch_threads(threads):
        if model is None:
            model, _ = models.load_policy(checkpoint, device=resolve_device(device), what="checkpoint")
        dev = next(model.parameters()).device
        nll = sequence_nll(model, rare.rollouts(dev), batch_size=batch_size)
    mean = float(nll.mean())
    return mean, mean - float(np.mean(rare.base_nll))


_E = EvalConfig  # the defaults of the settings below are those of ``rlvr-train eval``


def evaluate(checkpoint: str | os.PathLike, *, task: tasks.Task | None = None, k: Sequence[int] = (1,),
             n: int | None = _E.n, problems: int = _E.problems, max_new_tokens: int | None = _E.max_new_tokens,
             temperature: float = _E.temperature, top_p: float = _E.top_p, seed: int = _E.seed,
             batch_size: int = _E.batch_size, device: str = _E.device, threads: int | None = _E.threads,
             progress: bool = True, rare: RareSet | None = None) -> EvalResult:
    """Evaluate a checkpoint directory on held-out problems (module docstring).

    ``n`` (samples per problem) defaults to ``max(k)``; every ``k`` must satisfy ``1 <= k <= n``.
    ``temperature = 0`` is greedy decoding (module docstring): one completion per problem
    (``n`` 1 or ``None``, ``k`` only 1), and ``EvalResult.greedy_accuracy`` is reported.
    ``batch_size`` bounds the sequences generated at once; ``threads``: CPU threads during the
    call.  The settings are described in :class:`~simulations.grpo.config.EvalConfig`.
    ``rare``: a rare-correct set of the base model (:func:`rare_correct_set`); the result then
    also has ``nll_rare`` and ``delta_nll_rare`` (F-GRPO App. F.2).
    """
    threads = checks.integer("threads", threads, low=1, allow_none=True)
    with models.torch_threads(threads):
        return _evaluate(checkpoint, task=task, k=k, n=n, problems=problems, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_p=top_p, seed=seed, batch_size=batch_size,
                         device=device, progress=progress, rare=rare)


@torch.no_grad()
def _evaluate(checkpoint, *, task, k, n, problems, max_new_tokens, temperature, top_p, seed, batch_size,
              device, progress, rare=None) -> EvalResult:
    if rare is not None and not isinstance(rare, RareSet):
        raise ValueError(f"rare must be a RareSet (evaluate.rare_correct_set) or None, got {type(rare).__name__}")
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
    nll_rare = (None, None) if rare is None else _nll_rare(checkpoint, rare, batch_size=1024, device=dev,
                                                           threads=None, model=model)
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
                      decoding="greedy" if greedy else "sample", greedy_accuracy=float(ok.mean()) if greedy else None,
                      nll_rare=nll_rare[0], delta_nll_rare=nll_rare[1])


def write_result(res: EvalResult, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """``eval.json`` (summary) and ``per_problem.csv`` into directory ``out``, which appears
    complete or not at all (:func:`rlvr_plumbing.io.atomic_dir`).  An existing non-empty ``out``
    is replaced only if it holds an earlier ``eval.json``, or with ``overwrite``."""
    def fill(tmp: Path) -> None:
        ck.write_json(tmp / "eval.json", res.summary())
        res.per_problem.to_csv(tmp / "per_problem.csv", index=False)
    return atomic_dir(out, fill, markers=None if overwrite else EVAL_FILES[:1])


def check_triage(G: Any, *, n: int | None, k: Sequence[int], temperature: float, advantage: Any = "grpo",
                 params: dict[str, Any] | None = None) -> Any:
    """The advantage of a triage at group size ``G`` of an evaluation with these settings, checked before
    any sampling: ``G <= n`` (``n`` defaults to ``max(k)``), sampled decoding, a group-level family."""
    from analysis.triage import resolve_advantage
    from rlvr_theory import masses

    G = checks.integer("triage", G, low=1)
    if checks.number("temperature", temperature, low=0) == 0:
        raise ValueError("triage needs sampled completions (temperature > 0): greedy decoding gives one "
                         "completion per problem")
    nn = max(checks.integer("k", x, low=1) for x in k) if n is None else checks.integer("n", n, low=1)
    if G > nn:
        raise ValueError(f"triage must be <= n = {nn} (samples per problem: each group of G is drawn from them), "
                         f"got {G}; raise --n")
    try:
        adv = resolve_advantage(advantage, params)
    except ValueError as err:
        raise ValueError(f"param: {err}") from None
    if adv.batch_level:
        raise ValueError(f"advantage: {adv!r} is batch-level; the triage needs a group-level family")
    masses.check_group_size(G, adv)
    return adv


def add_triage(res: EvalResult, G: int, advantage: Any = "grpo", params: dict[str, Any] | None = None) -> Any:
    """Pre-RL triage (:func:`analysis.triage.triage`) of an evaluation's per-problem successes at group
    size ``G``: sets ``res.triage`` (its summary with the answer and token entropies of the policy) and
    adds the per-problem columns ``p_zero_signal``, ``triage_m_S``, ``triage_m_F``; returns the
    :class:`~analysis.triage.Triage`."""
    from analysis.triage import triage

    adv = check_triage(G, n=res.n, k=[1], temperature=1.0 if res.decoding == "sample" else 0.0,
                       advantage=advantage, params=params)
    table = res.per_problem
    t = triage(table["n"].to_numpy(), table["correct"].to_numpy(), G, adv)
    table["p_zero_signal"] = t.per_prompt["p_zero_signal"].to_numpy()
    table["triage_m_S"] = t.per_prompt["m_S"].to_numpy()
    table["triage_m_F"] = t.per_prompt["m_F"].to_numpy()
    res.triage = {**t.summary(), "answer_entropy": res.answer_entropy, "token_entropy": res.token_entropy}
    return t
