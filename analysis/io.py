"""File output shared by analysis, simulations and figures: nothing half-written under a
final name."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["atomic_write", "atomic_write_text"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    On any error the temporary file is removed and ``path`` is left as it was.  The file
    gets the usual 0644 permissions (``mkstemp`` creates 0600).  Returns ``Path(path)``.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of a string."""
    return atomic_write(path, lambda p: Path(p).write_text(text))
