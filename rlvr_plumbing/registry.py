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
>>> shapes.unregister("square")
>>> shapes.names()
[]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


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
        kind) and the allowed names (sorted, whatever the order of :meth:`names`) otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"{arg or self.kind}: unknown {self.kind} {name!r}; "
                             f"allowed: {', '.join(sorted(self._entries)) or 'none registered'}") from None

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
