"""The output head's leading singular vector ``u`` and the tokens it ranks highest and lowest.

- :func:`u_statistics`: sign-free and oriented statistics of ``u`` (FADE App. 15.1), under the
  orientation :data:`U_ORIENTATION`.
- :func:`_top_tokens`: the largest positive and most negative entries of ``u``, decoded.
- :func:`_open_tokenizer` and :func:`_check_tokenizer`: the tokenizer that decodes them (given,
  or found beside the checkpoints) and the refusal of one of another vocabulary
  (:data:`TOKENIZER_MIN_COVERAGE`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..checkpoints import has_tokenizer, load_tokenizer, tokenizer_size
from .settings import ENERGY_FRACTIONS, _key

__all__ = ["u_statistics", "U_ORIENTATION", "TOKENIZER_MIN_COVERAGE", "N_TOP_TOKENS", "N_QUANTILES"]

#: how the sign of the head's u is fixed (stated in the report and docs)
U_ORIENTATION = ("u and −u (with v flipped) are the same singular direction; u is signed so that its "
                 "largest-magnitude entry is positive (analysis.spectra), so 'negative' means 'opposite to the "
                 "largest entry'. Sign-free: the majority-sign fraction and the side (majority or minority) "
                 "that holds the largest entries.")
#: a tokenizer knowing fewer ids than this fraction of the head's rows is another vocabulary
TOKENIZER_MIN_COVERAGE = 0.9
N_TOP_TOKENS = 20
N_QUANTILES = 201


def u_statistics(u: np.ndarray) -> dict[str, Any]:
    """Statistics of the head's leading left singular vector ``u`` (unit norm, length V).

    Sign-free (the same for ``u`` and ``−u``): ``u_majority_sign_fraction`` =
    max(#{u_i > 0}, #{u_i < 0})/V; ``u_largest_entries_side`` = ``"minority"`` or
    ``"majority"``, the sign side holding the largest ``|u_i|`` (``"tie"`` when both sides are
    equally large, or without a majority); ``u_minority_energy_share`` = Σ u_i² over the
    minority side.  Under the orientation :data:`U_ORIENTATION` (largest ``|u_i|`` positive):
    ``u_negative_fraction`` = #{u_i < 0}/V and ``u_majority_sign`` (``"negative"`` or
    ``"positive"``).  ``u_energy_share[f]`` = Σ of the ``⌈f·V⌉`` largest ``u_i²`` over
    ``Σ u_i²``; ``u_vocab_fraction_for_half_energy`` = the smallest fraction of tokens holding
    half of ``Σ u_i²``; ``u_quantiles``: ``u`` sorted ascending at ``N_QUANTILES`` evenly spaced
    ranks (for plots).  FADE App. 15.1 ("99.93-99.97% of tokens have negative u values" is a
    majority-sign fraction of 0.9993-0.9997).

    Examples
    --------
    Five large entries one way, 15,189 small ones the other (FADE's 50 vs 151,886, scaled down):

    >>> u = np.r_[np.full(5, 0.3), np.full(15189, -np.sqrt((1 - 5 * 0.09) / 15189))]
    >>> st = u_statistics(u)
    >>> round(st["u_majority_sign_fraction"], 5), st["u_largest_entries_side"], st["u_majority_sign"]
    (0.99967, 'minority', 'negative')
    >>> u_statistics(-u)["u_majority_sign_fraction"] == st["u_majority_sign_fraction"]
    True
    """
    u = np.asarray(u, dtype=np.float64)
    V = u.size
    e = np.sort(u * u)[::-1]
    cum = np.cumsum(e) / e.sum()
    share = {_key(f): float(cum[min(V, max(1, math.ceil(f * V))) - 1]) for f in ENERGY_FRACTIONS}
    half = int(np.searchsorted(cum, 0.5, side="left")) + 1
    q = np.sort(u)[np.linspace(0, V - 1, min(N_QUANTILES, V)).round().astype(int)]
    pos, neg = u > 0, u < 0
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    maj = pos if n_pos > n_neg else neg
    mino = neg if n_pos > n_neg else pos
    if n_pos == n_neg:
        side = "tie"
    else:
        big_maj = float(np.abs(u[maj]).max()) if maj.any() else 0.0
        big_min = float(np.abs(u[mino]).max()) if mino.any() else 0.0
        side = "majority" if big_maj > big_min else "minority" if big_min > big_maj else "tie"
    return {"u_negative_fraction": float(np.mean(neg)),
            "u_majority_sign_fraction": max(n_pos, n_neg) / V,
            "u_majority_sign": None if n_pos == n_neg else ("positive" if n_pos > n_neg else "negative"),
            "u_largest_entries_side": side,
            "u_minority_energy_share": float(np.sum(u[mino] ** 2) / np.sum(u * u)) if n_pos != n_neg else 0.5,
            "u_orientation": "largest |u_i| positive",
            "u_energy_share": share,
            "u_vocab_fraction_for_half_energy": half / V, "u_quantiles": [float(x) for x in q]}


def _top_tokens(u: np.ndarray, tok: Any, n: int, n_known: int | None = None) -> list[dict[str, Any]]:
    """The ``n`` largest positive and ``n`` most negative entries of ``u`` (only entries of that
    sign: the "−" list holds negative entries only), decoded; special tokens by their names."""
    order = np.argsort(u, kind="stable")
    pos = [i for i in order[::-1][:n] if u[i] > 0]
    neg = [i for i in order[:n] if u[i] < 0]
    special = _special_ids(tok)
    out = []
    for sign, ids in (("+", pos), ("-", neg)):
        for rank, i in enumerate(ids, 1):
            i = int(i)
            known = n_known is None or i < n_known
            out.append({"sign": sign, "rank": rank, "token_id": i, "u": float(u[i]),
                        "token": _decode(tok, i) if known else None, "special": i in special})
    return out


def _special_ids(tok: Any) -> set[int]:
    """Ids of the special tokens (``<eos>``, ``<pad>``, ...) of a tokenizer (empty if none/unknown)."""
    if tok is None:
        return set()
    try:
        if hasattr(tok, "all_special_ids"):  # transformers
            return {int(i) for i in tok.all_special_ids}
        if hasattr(tok, "get_added_tokens_decoder"):  # tokenizers.Tokenizer
            return {int(i) for i, t in tok.get_added_tokens_decoder().items() if getattr(t, "special", False)}
    except Exception:
        pass
    return set()


def _decode(tok: Any, i: int) -> str | None:
    """Token ``i`` as text; a special token (or any token decoding to nothing) by its name."""
    if tok is None:
        return None
    try:
        try:
            text = str(tok.decode([i], skip_special_tokens=False))
        except TypeError:
            text = str(tok.decode([i]))
        if text.strip():
            return text
        name = tok.id_to_token(i) if hasattr(tok, "id_to_token") else tok.convert_ids_to_tokens(i)
        return str(name) if name else text
    except Exception:  # an id beyond the tokenizer's vocabulary (padded embedding rows)
        return None


def _check_tokenizer(tok: Any, tok_dir: Any, head: str, rows: int, rows_max: int) -> str | None:
    """Refuse a tokenizer of another vocabulary; a note when it decodes only part of the head's rows."""
    n = tokenizer_size(tok)
    if n is None:
        return None
    if n > rows_max or n < TOKENIZER_MIN_COVERAGE * rows:
        raise ValueError(f"tokenizer: {str(tok_dir)!r} knows {n:,} token ids but the output head {head!r} has "
                         f"{rows:,} rows: a tokenizer of another vocabulary (give the model's own with --tokenizer)")
    if n < rows:
        return (f"the tokenizer {str(tok_dir)!r} knows {n:,} token ids, the output head has {rows:,} rows: ids "
                f"{n:,}-{rows - 1:,} (padding rows) are not decoded")
    return None


def _open_tokenizer(tokenizer: Any, search: list[str]) -> tuple[Any, Any, str | None]:
    """``(tokenizer, its directory, note)``: the tokenizer given (an error if it cannot be loaded), or
    the first directory of ``search`` holding tokenizer files; one found by itself that cannot be
    loaded only costs the decoded tokens (the note says why)."""
    if tokenizer is not None:
        return load_tokenizer(tokenizer, "tokenizer"), tokenizer, None
    tok_dir = next((p for p in search if has_tokenizer(p)), None)
    if tok_dir is None:
        return None, None, None
    try:
        return load_tokenizer(tok_dir, "tokenizer"), tok_dir, None
    except ValueError as err:
        return None, None, f"top tokens not decoded: {err}"
