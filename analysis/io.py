"""Every file and directory the toolkit writes goes through here: nothing half-written under a
final name, one JSON policy (:mod:`rlvr_theory.serialize`).

* :func:`atomic_write` / :func:`atomic_write_text` / :func:`write_json` — one file, written to a
  temporary sibling and renamed;
* :func:`atomic_dir` — a whole directory (a report, a checkpoint) built in a temporary sibling
  and renamed into place, replacing an older one only when complete.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_json(d / "x.json", {"ratio": float("inf")}).read_text()
'{\\n "ratio": "inf"\\n}\\n'
>>> out = atomic_dir(d / "report", lambda tmp: (tmp / "report.md").write_text("# hi"))
>>> sorted(p.name for p in out.iterdir())
['report.md']
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr_theory.serialize import dumps

__all__ = ["atomic_write", "atomic_write_text", "write_json", "atomic_dir"]


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
    """:func:`atomic_write` of a string (UTF-8)."""
    return atomic_write(path, lambda p: Path(p).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, obj: Any, *, indent: int = 1) -> Path:
    """``obj`` as strict JSON (NaN → ``null``, ±inf → ``"inf"``/``"-inf"``), atomically."""
    return atomic_write_text(path, dumps(obj, indent=indent) + "\n")


def atomic_dir(out: str | os.PathLike, build: Callable[[Path], Any], *,
               markers: Sequence[str] | None = None) -> Path:
    """Call ``build(tmp)`` on a fresh temporary directory beside ``out``, then rename it to ``out``.

    An existing ``out`` is replaced only after ``build`` succeeded (moved aside first, deleted
    after the rename).  ``markers``: when given, an existing non-empty ``out`` must contain one
    of these files (it is an earlier output of the same kind), otherwise ``ValueError`` — so
    that a typo never replaces an unrelated directory.  On any error the temporary directory is
    removed and ``out`` is left as it was.
    """
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"out must be a directory path, got {str(out)!r} (an existing file)")
        if markers is not None and any(out.iterdir()) and not any((out / m).exists() for m in markers):
            raise ValueError(f"out: {str(out)!r} exists and holds no {' or '.join(markers)}; "
                             "choose a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        build(tmp)
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
