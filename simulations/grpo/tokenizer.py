"""A character-level tokenizer built locally with the ``tokenizers`` library.

Every character is one token: a byte-level BPE *without merges* (GPT-2's byte-to-unicode
alphabet, so a space is the symbol ``Ġ``), a ``ByteLevel`` pre-tokenizer and decoder.  The
vocabulary is ``<pad>, <bos>, <eos>, <unk>`` (ids 0-3) followed by the characters of
:data:`~simulations.grpo.tasks.BASE_ALPHABET` and of any extra alphabet (non-ASCII
characters contribute one token per UTF-8 byte), so the ids of the built-in characters do
not depend on the task.  It is wrapped as a ``transformers.PreTrainedTokenizerFast`` (left
padding, for batched generation) and saved with every checkpoint.

Why byte-level: ``AutoTokenizer.from_pretrained`` loads every ``qwen2`` checkpoint with
``Qwen2Tokenizer`` (transformers 5 forces it for that model type), which rebuilds a
byte-level BPE from ``tokenizer.json``'s vocabulary and merges.  With this vocabulary that
rebuilt tokenizer encodes and decodes every supported string exactly as the one built here
(tested), so ``AutoTokenizer.from_pretrained(checkpoint)`` works offline and agrees with
training.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .tasks import BASE_ALPHABET

__all__ = ["SPECIAL_TOKENS", "build_tokenizer", "check_covers", "byte_symbols"]

#: special tokens, ids 0..3
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable unicode symbols (Radford et al. 2019)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return dict(zip(bs, map(chr, cs)))


def byte_symbols(text: str) -> list[str]:
    """The byte-level symbols (vocabulary entries) of ``text``'s UTF-8 bytes, in order."""
    m = _byte_to_unicode()
    return [m[b] for b in text.encode("utf-8")]


def build_tokenizer(extra_alphabet: str = "") -> Any:
    """Character-level ``PreTrainedTokenizerFast`` over ``BASE_ALPHABET`` + ``extra_alphabet``.

    Returns a tokenizer with ``padding_side="left"`` and no automatic special tokens
    (``encode("12+3=")`` gives exactly five ids).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not isinstance(extra_alphabet, str):
        raise ValueError(f"extra_alphabet must be a string of characters, got {type(extra_alphabet).__name__}")
    symbols = list(dict.fromkeys(byte_symbols(BASE_ALPHABET + extra_alphabet)))
    vocab = {tok: i for i, tok in enumerate(list(SPECIAL_TOKENS.values()) + symbols)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, padding_side="left", **SPECIAL_TOKENS)


def check_covers(tokenizer: Any, alphabet: str, *, where: str = "the tokenizer") -> None:
    """Refuse a tokenizer that cannot encode (and decode back) every character of ``alphabet``."""
    unk = tokenizer.unk_token_id
    missing = []
    for c in dict.fromkeys(alphabet):
        ids = tokenizer.encode(c, add_special_tokens=False)
        if not ids or (unk is not None and unk in ids) or tokenizer.decode(ids) != c:
            missing.append(c)
    if missing:
        raise ValueError(f"init: {where} cannot encode the task's characters {''.join(missing)!r}")
    if tokenizer.eos_token_id is None:
        raise ValueError(f"init: {where} has no eos token; the trainer needs one to end responses")
