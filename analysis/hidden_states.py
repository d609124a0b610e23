"""Hidden-state geometry of correct vs failed rollouts (FADE App. 15, "Hidden-state analysis",
App. 15.2, Tables 10-11).

For the tokens ``i`` of the completions of a batch of rollouts (prompt + completion, with
an outcome: correct ∈ S or failed ∈ F), let ``h_i ∈ R^d`` be the last-layer hidden state
that the output head multiplies (captured at the head's input, so after the final norm on
every architecture), ``y_i`` the next token and ``π_i = softmax(logits_i / T)`` the
policy's next-token distribution.  Then

* ``u_1`` = the top right singular vector of ``H = [h_i]`` (all tokens of both groups;
  FADE footnote: "the top right singular vector of H"), and ``h_i^⊥ = h_i − (h_iᵀu_1)u_1``;
* ``ρ̂_g`` = the mean pairwise cosine similarity of the ``h_i^⊥``, ``i ∈ g``, over the
  ``N_g(N_g − 1)`` ordered pairs ``i ≠ j`` (Table 10; FADE finds ``ρ̂_S ≈ 3-4 ρ̂_F``):
  with ``x̂_i = h_i^⊥/‖h_i^⊥‖``, ``ρ̂ = (‖Σ_i x̂_i‖² − N)/(N(N − 1))`` (one pass, no N² loop);
* ``R_g = (1/N_g) Σ_{i∈g} v_i ⊗ h_i^⊥`` with ``v_i = e_{y_i} − π_i ∈ R^V`` (App. 15.2,
  unweighted by advantages as in the paper's footnote), and its norm ``‖R_g‖_F``;
* the CLT baseline ``‖R_F‖/‖R_S‖ ≈ sqrt(N_S/N_F)``
  (:func:`rlvr_theory.rank1.clt_residual_ratio`; 0.40 for the paper's N_S = 8,968,
  N_F = 54,700; the paper measures 0.73-0.79, Table 11).

``R_g`` is accumulated in one pass without storing the ``V``-dimensional ``v_i``:
``Σ_i v_i h_iᵀ = Σ_i e_{y_i} h_iᵀ − Σ_i π_i h_iᵀ`` (a scatter-add plus one ``V × n`` by
``n × d`` product per batch), before ``u_1`` is known, because the projection commutes:
``Σ_i v_i (h_i^⊥)ᵀ = (Σ_i v_i h_iᵀ)(I − u_1u_1ᵀ)``.  Memory: ``2·V·d`` float64 for the
two sums, ``N·d`` float32 for ``H``, and one batch of logits.
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
from torch.nn.utils.rnn import pad_sequence

from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device, run_metadata

from . import spectra
from .checkpoints import has_tokenizer, load_causal_lm, load_tokenizer, open_checkpoint

__all__ = [
    "load_rollouts",
    "mean_pairwise_cosine",
    "project_out",
    "residual_norm",
    "geometry",
    "PAPER",
    "DTYPES",
]

#: accepted values of ``dtype=``
DTYPES = ("auto", "float32", "bfloat16", "float16")
_WHERE = "rollouts"  # how messages name the rollouts

#: FADE App. 15.2 numbers (Qwen 2.5 7B, AsymGRPO δ = 0.5)
PAPER = {"n_success": 8968, "n_failure": 54700, "clt_baseline": 0.40,
         "residual_ratio_measured": (0.73, 0.79), "rho_ratio": (3.0, 4.0)}


# ------------------------------------------------------------------ formulas
def project_out(H: Any, u: Any) -> np.ndarray:
    """``h_i^⊥ = h_i − (h_iᵀu)u`` for every row of ``H`` (``u`` normalised here); float64.

    FADE App. 15 "Hidden-state analysis".
    """
    H = np.asarray(H, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    if H.ndim != 2 or u.size != H.shape[1]:
        raise ValueError(f"H must be (N, d) and u of length d, got {H.shape} and {u.shape}")
    nu = np.linalg.norm(u)
    if not nu > 0:
        raise ValueError("u must be a non-zero vector")
    u = u / nu
    return H - np.outer(H @ u, u)


def mean_pairwise_cosine(X: Any) -> float:
    """Mean cosine similarity over the ordered pairs ``i ≠ j`` of the rows of ``X``.

    ``ρ̂ = (‖Σ_i x̂_i‖² − N)/(N(N − 1))`` with ``x̂_i = x_i/‖x_i‖`` (the sum of all
    ``x̂_iᵀx̂_j`` minus the diagonal), in ``O(N d)``.  Rows of zero norm (undefined cosine)
    are left out.  FADE Table 10.  Raises ``ValueError`` for fewer than two
    non-zero rows.

    Examples
    --------
    >>> mean_pairwise_cosine([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])   # cosines 0, 1/√2, 1/√2
    0.471404520791
    >>> mean_pairwise_cosine(project_out([[1.0, 1.0], [1.0, -1.0]], [1.0, 0.0]))   # h⊥ = (0, ±1)
    -1.0
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (N, d), got shape {X.shape}")
    nrm = np.linalg.norm(X, axis=1)
    keep = nrm > 0
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"X must have at least 2 non-zero rows for a pairwise cosine, got {n}")
    s = (X[keep] / nrm[keep, None]).sum(axis=0)
    return float((s @ s - n) / (n * (n - 1)))


def residual_norm(sum_vh: Any, n: int, u: Any) -> float:
    """``‖R_g‖_F`` with ``R_g = (1/N_g)·(Σ_i v_i h_iᵀ)(I − u uᵀ)`` (FADE App. 15.2).

    ``sum_vh``: ``Σ_{i∈g} v_i h_iᵀ`` (``V × d``), ``n = N_g``, ``u`` the projection
    direction (normalised here).  The projected matrix is formed in row blocks (no
    cancellation from ``‖R‖² − ‖Ru‖²``).
    """
    A = sum_vh
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    u = u / np.linalg.norm(u)
    if isinstance(A, torch.Tensor):
        ut = torch.as_tensor(u, dtype=A.dtype, device=A.device)
        tot = torch.zeros((), dtype=torch.float64, device=A.device)
        for i in range(0, A.shape[0], 4096):
            blk = A[i:i + 4096]
            P = blk - torch.outer(blk @ ut, ut)
            tot += (P.double() ** 2).sum()
        return math.sqrt(float(tot)) / n
    A = np.asarray(A, dtype=np.float64)
    tot = 0.0
    for i in range(0, A.shape[0], 4096):
        blk = A[i:i + 4096]
        P = blk - np.outer(blk @ u, u)
        tot += float((P * P).sum())
    return math.sqrt(tot) / n


# ------------------------------------------------------------------ rollouts
def load_rollouts(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a rollouts JSONL file: one JSON object per line with

    * ``prompt_ids`` and ``completion_ids`` (lists of token ids; preferred, exact), or
      ``prompt`` and ``completion`` (strings, tokenized with the checkpoint's tokenizer:
      the prompt with the tokenizer's special tokens, the completion without);
    * ``correct`` (true/false), or ``reward`` (a number; correct iff ``reward > 0``).

    Blank lines are skipped.  Raises ``ValueError`` naming the file and the line that is not
    valid (also for text that is not UTF-8).
    """
    return _read_rollouts(path)[0]


def _read_rollouts(path: str | os.PathLike) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of a rollouts file and where each comes from (``rollouts line N of 'FILE'``)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"rollouts must be a JSONL file, got {str(path)!r} (not a file)")
    out, where = [], []
    for ln, raw in enumerate(p.read_bytes().splitlines(), 1):
        at = f"rollouts line {ln} of {str(p)!r}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{at} is not UTF-8 text ({err.reason} at byte {err.start})") from None
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{at} is not valid JSON: {err}") from None
        out.append(_check_record(rec, at))
        where.append(at)
    if not out:
        raise ValueError(f"rollouts file {str(p)!r} holds no rollouts")
    return out, where


def _check_record(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where} must be a JSON object")
    r: dict[str, Any] = {}
    if "prompt_ids" in rec or "completion_ids" in rec:
        for k in ("prompt_ids", "completion_ids"):
            v = rec.get(k)
            if not isinstance(v, list) or any(isinstance(x, bool) for x in v):
                raise ValueError(f"{where}: {k} must be a list of token ids (integers >= 0), got {v!r}")
            r[k] = [int(x) for x in checks.array(f"{where}: {k}", v, ndim=1, integer=True, low=0)]
    elif isinstance(rec.get("prompt"), str) and isinstance(rec.get("completion"), str):
        r["prompt"], r["completion"] = rec["prompt"], rec["completion"]
    else:
        raise ValueError(f"{where} needs 'prompt_ids' and 'completion_ids' (token id lists) or "
                         f"'prompt' and 'completion' (strings)")
    if isinstance(rec.get("correct"), bool):
        r["correct"] = rec["correct"]
    elif "reward" in rec:
        r["correct"] = checks.number(f"{where}: reward", rec["reward"]) > 0
    elif "correct" in rec:
        checks.choice(f"{where}: correct", rec["correct"], (True, False))
    else:
        raise ValueError(f"{where} needs 'correct' (true/false) or 'reward' (a finite number, "
                         f"correct iff > 0)")
    return r


# ------------------------------------------------------------------ the pass
def _tokenize(rollouts: Sequence[Mapping[str, Any]], tok: Any, where: Sequence[str]) -> list[tuple[list[int], int, bool]]:
    recs = [_check_record(r, w) for r, w in zip(rollouts, where)]
    text = [i for i, r in enumerate(recs) if "prompt_ids" not in r]
    if text and tok is None:
        raise ValueError(f"tokenizer: {where[text[0]]} has text, not token ids, and no tokenizer was "
                         f"found; pass tokenizer= (a tokenizer directory)")
    if text:  # one batched call each for prompts and completions
        P = tok([recs[i]["prompt"] for i in text])["input_ids"]
        C = tok([recs[i]["completion"] for i in text], add_special_tokens=False)["input_ids"]
        for i, p, c in zip(text, P, C):
            recs[i] = {**recs[i], "prompt_ids": list(p), "completion_ids": list(c)}
    return [(r["prompt_ids"] + r["completion_ids"], len(r["prompt_ids"]), bool(r["correct"])) for r in recs]


def geometry(checkpoint: str, rollouts: str | Sequence[Mapping[str, Any]], *, tokenizer: str | None = None,
             device: str = "auto", batch_size: int = 8, temperature: float = 1.0, dtype: str = "auto",
             progress: bool = True) -> dict[str, Any]:
    """Hidden-state geometry of a checkpoint on rollouts (FADE App. 15, Tables 10-11).

    Parameters
    ----------
    checkpoint : str
        Hugging Face causal-LM checkpoint directory (loaded with transformers).
    rollouts : str or sequence of dict
        A JSONL path (:func:`load_rollouts`) or the records themselves.
    tokenizer : str, optional
        Tokenizer directory for text rollouts (default: the checkpoint's own, if any).
    device : "auto", "cpu", "cuda", "cuda:N"
        Where the forward passes and sums run.
    batch_size : int
        Sequences per forward pass (``>= 1``); sequences are sorted by length first.
    temperature : float
        ``π_i = softmax(logits_i / temperature)`` (the sampling temperature of the rollouts).
    dtype : "auto", "float32", "bfloat16", "float16"
        Model dtype (``"auto"``: float32 on the CPU, the checkpoint's dtype on CUDA).
    progress : bool
        tqdm bar over batches.

    Returns
    -------
    dict
        ``n_trajectories``, ``n_tokens`` (``N_S``, ``N_F``), ``rho_perp`` (``ρ̂`` per group
        and their ratio), ``residual_norm`` (``‖R_S‖``, ``‖R_F‖``), ``residual_ratio``
        (``‖R_F‖/‖R_S‖``), ``clt_baseline`` (``sqrt(N_S/N_F)``), ``ratio_over_baseline``,
        ``u1_energy_fraction`` (``σ_1²(H)/‖H‖_F²``), the paper's numbers, settings, and
        ``run`` (:func:`rlvr_plumbing.runtime.run_metadata` of the arguments).  Quantities of an
        empty (or single-token) group are ``None``.

    The work goes in phases: check the settings, tokenize the rollouts (:func:`_sequences`),
    load the model (:func:`analysis.checkpoints.load_causal_lm`), one forward pass over the batches accumulating
    ``H`` and ``Σ v_i h_iᵀ`` per outcome (:func:`_forward`), then the statistics per
    outcome (:func:`_per_outcome`) and the CLT baseline (:func:`_clt`).
    """
    t0 = time.perf_counter()
    batch_size = checks.integer("batch_size", batch_size, low=1)
    temperature = checks.number("temperature", temperature, low=0, low_open=True)
    checks.choice("dtype", dtype, DTYPES)
    ck = open_checkpoint(checkpoint, "checkpoint")
    dev = resolve_device(device)
    seqs, tok_dir, where = _sequences(checkpoint, rollouts, tokenizer)
    model, head = load_causal_lm(ck, dev, dtype, progress)
    usable = _usable(seqs, model, head, where)
    acc = _forward(model, head, usable, dev, batch_size, temperature, progress)
    stats = _per_outcome(acc)
    clt = _clt(stats)
    V, d = (int(x) for x in head.weight.shape)
    return {
        "checkpoint": str(checkpoint),
        "device": str(dev),
        "n_trajectories": {"success": sum(1 for s in usable if s[2]), "failure": sum(1 for s in usable if not s[2])},
        "n_skipped_trajectories": len(seqs) - len(usable),
        "n_tokens": {"success": stats["n_s"], "failure": stats["n_f"]},
        "hidden_size": d,
        "vocab_size": V,
        "u1_energy_fraction": stats["u1_energy_fraction"],
        "rho_perp": stats["rho_perp"],
        "residual_norm": stats["residual_norm"],
        **clt,
        "paper": {"clt_baseline": PAPER["clt_baseline"], "n_success": PAPER["n_success"],
                  "n_failure": PAPER["n_failure"], "residual_ratio_measured": list(PAPER["residual_ratio_measured"]),
                  "rho_ratio": list(PAPER["rho_ratio"])},
        "settings": {"temperature": temperature, "batch_size": batch_size,
                     "tokenizer": None if tok_dir is None else str(tok_dir), "dtype": str(model.dtype)},
        "timing_s": time.perf_counter() - t0,
        "run": run_metadata({"checkpoint": str(checkpoint),
                             "rollouts": str(rollouts) if isinstance(rollouts, (str, os.PathLike))
                             else f"{len(seqs)} records",
                             "tokenizer": None if tokenizer is None else str(tokenizer), "device": str(device),
                             "batch_size": batch_size, "temperature": temperature, "dtype": dtype},
                            seed=None, device=dev),
    }


# ---------------------------------------------------------------- phases
def _sequences(checkpoint: str, rollouts: Any, tokenizer: str | None) -> tuple[list[tuple[list[int], int, bool]],
                                                                                  str | None, list[str]]:
    """Load and tokenize the rollouts: ``[(ids, prompt length, correct)]``, the tokenizer used,
    and where each rollout comes from (for messages)."""
    if isinstance(rollouts, (str, os.PathLike)):
        recs, where = _read_rollouts(rollouts)
    else:
        recs = list(rollouts)
        if not recs:
            raise ValueError("rollouts must hold at least one rollout")
        where = [f"{_WHERE}[{i}]" for i in range(len(recs))]
    tok_dir = tokenizer if tokenizer is not None else (checkpoint if has_tokenizer(checkpoint) else None)
    tok = load_tokenizer(tok_dir, "tokenizer", transformers=True) if tok_dir is not None else None
    seqs = _tokenize(recs, tok, where)
    if tok is not None:  # tokenized text: an id beyond the model is the tokenizer's fault
        where = [w if "prompt_ids" in r else f"{w} (tokenized with {str(tok_dir)!r})" for r, w in zip(recs, where)]
    return seqs, tok_dir, where


def _usable(seqs: list[tuple[list[int], int, bool]], model: Any, head: Any,
            where: Sequence[str] | None = None) -> list[tuple[list[int], int, bool]]:
    """Refuse sequences the model cannot read (naming where each comes from); keep those with a
    non-empty prompt and completion."""
    where = [f"{_WHERE}[{i}]" for i in range(len(seqs))] if where is None else where
    V = int(head.weight.shape[0])
    max_pos = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    for i, (ids, _, _) in enumerate(seqs):
        if max_pos is not None and len(ids) > max_pos:
            raise ValueError(f"{where[i]}: sequence of {len(ids)} tokens exceeds the model's "
                             f"max_position_embeddings = {max_pos}")
        if ids and max(ids) >= V:
            raise ValueError(f"{where[i]}: token id {max(ids)} is outside the vocabulary (size {V})")
    return [s for s in seqs if len(s[0]) - s[1] >= 1 and s[1] >= 1]


def _forward(model: Any, head: Any, usable: list[tuple[list[int], int, bool]], dev: torch.device,
             batch_size: int, temperature: float, progress: bool) -> dict[str, Any]:
    """One pass over length-sorted batches: the completion tokens' hidden states ``H`` (the
    head's input), their outcome labels, and ``S[g] = Σ_{i∈g} (e_{y_i} − π_i) h_iᵀ`` per outcome."""
    V, d = (int(x) for x in head.weight.shape)
    cap: dict[str, torch.Tensor] = {}
    hook = head.register_forward_hook(lambda mod, inp, out: cap.__setitem__("h", inp[0]))
    S = {g: torch.zeros(V, d, dtype=torch.float64, device=dev) for g in (True, False)}
    Hs: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    order = sorted(range(len(usable)), key=lambda i: len(usable[i][0]))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    it: Any = batches
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(batches, desc="hidden states", unit="batch")
    try:
        with torch.no_grad():
            for bt in it:
                rows = [torch.tensor(usable[i][0]) for i in bt]
                ids = pad_sequence(rows, batch_first=True, padding_value=0)
                T = ids.shape[1]
                plen = torch.tensor([usable[i][1] for i in bt])
                slen = torch.tensor([len(usable[i][0]) for i in bt])
                good = torch.tensor([usable[i][2] for i in bt])
                att = (torch.arange(T)[None, :] < slen[:, None]).long()
                out = model(input_ids=ids.to(dev), attention_mask=att.to(dev))
                h = cap.pop("h")
                t = torch.arange(T)
                # position t predicts token t+1: completion tokens are t+1 in [P, L-1]
                mask = (t[None, :] >= plen[:, None] - 1) & (t[None, :] <= slen[:, None] - 2)
                tgt = torch.roll(ids, -1, dims=1)[mask].to(dev)
                md = mask.to(dev)
                hs = h[md].to(torch.float64)
                logits = out.logits[md].to(torch.float64) / temperature
                pi = torch.softmax(logits, dim=-1)
                grp = good[:, None].expand_as(mask)[mask].to(dev)
                for g in (True, False):
                    sel = grp == g
                    if bool(sel.any()):
                        hg = hs[sel]
                        S[g].index_add_(0, tgt[sel], hg)
                        S[g].sub_(pi[sel].T @ hg)
                Hs.append(hs.to(torch.float32).cpu().numpy())
                labels.append(grp.cpu().numpy())
                del out, h, logits, pi, hs
    finally:
        hook.remove()
    if not Hs:
        raise ValueError(f"{_WHERE} must hold at least one rollout with a non-empty prompt and completion")
    return {"H": np.concatenate(Hs), "labels": np.concatenate(labels), "S": S}


def _per_outcome(acc: dict[str, Any]) -> dict[str, Any]:
    """``u_1`` of ``H``, then per outcome: ``N_g``, ``ρ̂_g`` of ``h⊥`` (Table 10), ``‖R_g‖_F``."""
    H, lab, S = acc["H"], acc["labels"], acc["S"]
    spec = spectra.spectrum(H, 1, n_vectors=1, device="cpu")
    u1 = spec.v[:, 0]
    Hp = project_out(H, u1)
    n_s, n_f = int(lab.sum()), int((~lab).sum())
    rho: dict[str, float | None] = {}
    for name, g in (("success", True), ("failure", False)):
        try:
            rho[name] = mean_pairwise_cosine(Hp[lab == g])
        except ValueError:
            rho[name] = None
    rho["ratio"] = rho["success"] / rho["failure"] if rho["success"] is not None and rho["failure"] else None
    res = {"success": residual_norm(S[True], n_s, u1) if n_s else None,
           "failure": residual_norm(S[False], n_f, u1) if n_f else None}
    return {"n_s": n_s, "n_f": n_f, "u1_energy_fraction": spectra.rank1_fraction(spec), "rho_perp": rho,
            "residual_norm": res}


def _clt(stats: dict[str, Any]) -> dict[str, float | None]:
    """Measured ``‖R_F‖/‖R_S‖`` against the CLT baseline ``sqrt(N_S/N_F)`` (App. 15.2, Table 11)."""
    from rlvr_theory.rank1 import clt_residual_ratio

    res, n_s, n_f = stats["residual_norm"], stats["n_s"], stats["n_f"]
    ratio = res["failure"] / res["success"] if res["success"] and res["failure"] is not None else None
    base = float(clt_residual_ratio(n_s, n_f)) if n_s and n_f else None
    return {"residual_ratio": ratio, "clt_baseline": base,
            "ratio_over_baseline": ratio / base if ratio is not None and base else None}
