"""One small registry for everything chosen by name: advantages, schedules, tasks, figures.

Modelled on the lm-evaluation-harness task registry: a mapping from name to object (usually
a class), filled by a decorator, looked up by name with a message that lists the names.

Examples
--------
>>> from rlvr_plumbing.registry import Registry
>>> shapes = Registry("shape")
>>> @shapes.register
... class Square:
...     name = "square"
>>> shapes.get("square").__name__
'Square'
>>> shapes.get("circle")
Traceback (most recent call last):
...
ValueError: shape: unknown shape 'circle'; allowed: square
>>> shapes.get("Squaer")
Traceback (most recent call last):
...
ValueError: shape: unknown shape 'Squaer'; allowed: square; did you mean 'square'?
>>> shapes.unregister("square")
>>> shapes.names()
[]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "close_name", "did_you_mean"]

T = TypeVar("T")


def _squash(text: str) -> str:
    return text.lower().replace("_", "").replace("-", "")


def _edits(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours that turn ``a`` into ``b``."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def close_name(value: Any, names: Iterable[Any], *, cutoff: float = 0.75) -> str | None:
    """The entry of ``names`` closest to ``value``, or ``None`` when none is close: the same
    name in another case or with ``_``/``-`` left out or swapped, else one with a
    :func:`difflib.get_close_matches` ratio >= ``cutoff``, else one a typo away (a letter
    added, dropped, changed, or two swapped; two typos for names of 10 letters or more; only
    a swap for names of three letters).

    >>> close_name("asymgrpo", ["grpo", "asym_grpo", "dr_grpo"])
    'asym_grpo'
    >>> close_name("Dr-GRPO", ["grpo", "dr_grpo"]), close_name("mases", ["list", "masses"])
    ('dr_grpo', 'masses')
    >>> close_name("cvs", ["markdown", "csv"]), close_name("chess", ["arith", "sort"])
    ('csv', None)
    """
    import difflib

    if not isinstance(value, str) or not value:
        return None
    names = [str(n) for n in names]
    if value in names:
        return None
    squashed: dict[str, str] = {}
    for n in names:
        squashed.setdefault(_squash(n), n)
    key = _squash(value)
    if key in squashed:
        return squashed[key]
    hit = difflib.get_close_matches(key, list(squashed), n=1, cutoff=cutoff)
    if hit:
        return squashed[hit[0]]
    allowed = 1 if len(key) < 10 else 2
    best = min(((_edits(key, k), k) for k in squashed if abs(len(k) - len(key)) <= allowed), default=None)
    if best is None or best[0] > allowed or (len(key) <= 3 and sorted(best[1]) != sorted(key)):
        return None  # a three-letter name one letter off ('tsv', 'csv') is another name, not a typo
    return squashed[best[1]]


def did_you_mean(value: Any, names: Iterable[Any]) -> str:
    """``"; did you mean 'asym_grpo'?"`` for the closest of ``names`` (:func:`close_name`), or ``""``.

    >>> "unknown advantage 'asymgrpo'" + did_you_mean("asymgrpo", ["grpo", "asym_grpo"])
    "unknown advantage 'asymgrpo'; did you mean 'asym_grpo'?"
    """
    hit = close_name(value, names)
    return "" if hit is None else f"; did you mean {hit!r}?"


class Registry(Generic[T]):
    """Name → object mapping with decorator registration and helpful lookups.

    Parameters
    ----------
    kind: what the entries are ("advantage", "task", ...), used in messages.
    key: how the name of an object is found (default: its ``name`` attribute).
    sort: ``names()`` sorted (True) or in registration order (False, the default).
    """

    def __init__(self, kind: str, *, key: Callable[[Any], str] | None = None, sort: bool = False):
        self.kind = kind
        self._key = key or (lambda obj: getattr(obj, "name", None))
        self._sort = sort
        self._entries: dict[str, T] = {}

    # -------------------------------------------------------------- writing
    def register(self, obj: T | None = None, *, name: str | None = None) -> Any:
        """Add ``obj`` under ``name`` (default: its name); usable as ``@registry.register``.

        Registering the same object again is a no-op; another object under a taken name
        raises ``ValueError``.
        """
        if obj is None:
            return lambda o: self.register(o, name=name)
        key = name if name is not None else self._key(obj)
        if not key or not isinstance(key, str):
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {key!r}")
        old = self._entries.get(key)
        if old is not None and old is not obj:
            raise ValueError(f"{self.kind} {key!r} is already registered")
        self._entries[key] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (``ValueError`` listing the names if it is not registered)."""
        self.get(name)
        del self._entries[name]

    @contextlib.contextmanager
    def registered(self, obj: T, *, name: str | None = None) -> Iterator[T]:
        """Context manager: ``obj`` is registered inside the ``with`` block only (for tests).

        An object that was already registered under that name stays registered afterwards.
        """
        key = name if name is not None else self._key(obj)
        was_there = key in self._entries
        self.register(obj, name=name)
        try:
            yield obj
        finally:
            if not was_there:
                self._entries.pop(key, None)

    # -------------------------------------------------------------- reading
    def get(self, name: str, *, arg: str | None = None) -> T:
        """The object registered as ``name``; ``ValueError`` naming ``arg`` (default: the
        kind) and the allowed names (sorted, whatever the order of :meth:`names`) otherwise,
        with the closest name when one is close (``asymgrpo``: ``did you mean 'asym_grpo'?``,
        :func:`close_name`)."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"{arg or self.kind}: unknown {self.kind} {name!r}; "
                             f"allowed: {', '.join(sorted(self._entries)) or 'none registered'}"
                             f"{did_you_mean(name, self._entries)}") from None

    def names(self) -> list[str]:
        """The registered names (sorted, or in registration order)."""
        return sorted(self._entries) if self._sort else list(self._entries)

    def as_dict(self) -> Mapping[str, T]:
        """A copy of the mapping name → object."""
        return dict(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} entries)"
