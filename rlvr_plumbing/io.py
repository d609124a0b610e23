"""Every file and directory the toolkit writes goes through here: nothing half-written under a
final name, one JSON policy (:mod:`rlvr_plumbing.serialize`).

* :func:`atomic_write` / :func:`atomic_write_text` / :func:`write_json` — one file, written to a
  temporary sibling and renamed;
* :func:`check_out` — an output location checked *before* any work starts (not a file, not
  under a file, writable, and not somebody else's non-empty directory unless ``overwrite``);
* :func:`atomic_dir` — a whole directory (a report, a checkpoint) built in a temporary sibling
  and renamed into place, replacing an older one only when complete;
* :func:`interrupts_deferred` — Ctrl-C held back while the renames that put an output in
  place run, so that they are never left half-done.

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

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rlvr_plumbing.serialize import dumps

__all__ = ["atomic_write", "atomic_write_text", "write_json", "atomic_dir", "check_out", "read_json_object",
           "interrupts_deferred"]


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    On any error the temporary file is removed and ``path`` is left as it was; an ``OSError``
    that names no file (a full disk reports none) is re-raised naming ``path``, so that the
    runner's one-line message says where.  The file gets the usual 0644 permissions
    (``mkstemp`` creates 0600).  Returns ``Path(path)``.
    """
    path = Path(path)
    tmp: str | None = None
    try:
        with interrupts_deferred():  # the temporary file is created and known, or not created
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of a string (UTF-8)."""
    return atomic_write(path, lambda p: Path(p).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, obj: Any, *, indent: int = 1) -> Path:
    """``obj`` as strict JSON (NaN → ``null``, ±inf → ``"inf"``/``"-inf"``), atomically."""
    return atomic_write_text(path, dumps(obj, indent=indent) + "\n")


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while the block runs; raise it (``KeyboardInterrupt``) when the
    block is done.

    For the few steps that must not stop half-way: the renames that put an output in place and
    the clean-up after a failure.  Keep such blocks short: the user waits for them.  Outside the
    main thread (where Python never raises ``KeyboardInterrupt``), or when SIGINT is not handled
    by Python (ignored, or the system's default), the block runs as it is.

    >>> with interrupts_deferred():
    ...     print("renamed")
    renamed
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN, SIG_DFL, or installed outside Python: nothing to hold
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            previous(signal.SIGINT, None)  # Python's own handler: raises KeyboardInterrupt


def _clean_up(tmp: Path | None, old: Path | None, out: Path) -> None:
    """After a failure in :func:`atomic_dir`: the new directory removed unless it is already
    in place (then it stays), the earlier ``out`` put back where it was, no temporary left."""
    if tmp is not None and tmp.exists():  # not renamed into place
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / out.name).exists() and not out.exists():
            os.replace(old / out.name, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_dir(out: str | os.PathLike, build: Callable[[Path], Any], *,
               markers: Sequence[str] | None = None) -> Path:
    """Call ``build(tmp)`` on a fresh temporary directory beside ``out``, then rename it to ``out``.

    An existing ``out`` is replaced only after ``build`` succeeded (moved aside first, deleted
    after the rename).  ``markers``: when given, an existing non-empty ``out`` must contain one
    of these files (it is an earlier output of the same kind), otherwise ``ValueError`` — so
    that a typo never replaces an unrelated directory.  On any error the temporary directory is
    removed and ``out`` is left as it was; an ``OSError`` about a file inside the temporary
    directory is re-raised naming the file under ``out`` (the name the user knows).

    Ctrl-C, whenever it comes: the renames (an earlier ``out`` moved aside, the new one renamed
    into place, the earlier one deleted) run with the interrupt held back
    (:func:`interrupts_deferred`), so they finish and the ``KeyboardInterrupt`` comes after them,
    with the new ``out`` complete; before them, the ``KeyboardInterrupt`` leaves ``out`` as it
    was.  Either way no temporary directory is left beside ``out`` (only SIGKILL can leave one).
    """
    out = Path(os.path.abspath(out))  # "." and "x/.." name their folder, which can be renamed
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"out must be a directory path, got {str(out)!r} (an existing file)")
        if markers is not None and any(out.iterdir()) and not any((out / m).exists() for m in markers):
            raise ValueError(f"out: {str(out)!r} exists and holds no {' or '.join(markers)}; "
                             "choose a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    old: Path | None = None
    try:
        with interrupts_deferred():  # the temporary directory is created and known, or not created
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        build(tmp)
        os.chmod(tmp, 0o755)
        with interrupts_deferred():  # all the renames, or (on an error) none
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
                os.replace(out, old / out.name)
            os.replace(tmp, out)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException as err:
        with interrupts_deferred():  # a second Ctrl-C does not stop the clean-up half-way
            _clean_up(tmp, old, out)
        name = getattr(err, "filename", None) if isinstance(err, OSError) else None
        inside = tmp is not None and isinstance(name, str) and name.startswith(str(tmp) + os.sep)
        if inside and err.errno is not None:
            raise OSError(err.errno, err.strerror or str(err), str(out) + name[len(str(tmp)):]) from err
        raise
    return out


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_out(out: Any, *, kind: str = "directory", markers: Sequence[str] | None = None,
              overwrite: bool = False, arg: str = "out") -> Path:
    """Refuse an output location before any work starts; return it as a ``Path``.

    ``kind="directory"``: ``out`` must not be an existing file, nor the working directory or a
    folder holding it; an existing non-empty directory is accepted only if it holds one of
    ``markers`` (an earlier output of the same command, replaced atomically at the end) or
    ``overwrite`` is true (then it is replaced whole).  ``kind="file"``: ``out`` must not be an
    existing directory.  For both, no component of the path may be a file, and the folder
    that will receive it must be writable (probed with a real temporary file, so a read-only
    file system and missing permissions are found as such).  Messages start with ``arg``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "notes.txt").write_text("mine")
    4
    >>> check_out(d / "run").name
    'run'
    >>> check_out(d / "notes.txt")
    Traceback (most recent call last):
    ...
    ValueError: out: ... is an existing file; give a directory path
    >>> check_out(d)
    Traceback (most recent call last):
    ...
    ValueError: out: ... exists and is not empty (1 entries, not an output of this command); choose a new directory or pass --overwrite
    """
    if kind not in ("directory", "file"):
        raise ValueError(f"kind must be 'directory' or 'file', got {kind!r}")
    if not isinstance(out, (str, os.PathLike)) or os.fspath(out) == "":
        raise ValueError(f"{arg} must be a {kind} path, got {out!r}")
    path = Path(out)
    if kind == "directory" and path.is_file():
        raise ValueError(f"{arg}: {str(path)!r} is an existing file; give a directory path")
    if kind == "file" and path.is_dir():
        raise ValueError(f"{arg}: {str(path)!r} is an existing directory; give a file path")
    if kind == "directory":
        here, there = Path.cwd().resolve(), Path(os.path.abspath(path)).resolve()
        if there == here or there in here.parents:  # replacing it would pull the folder from under us
            raise ValueError(f"{arg}: {str(path)!r} is the working directory or holds it; give a new directory")
    base = _nearest_existing(path.parent if kind == "file" else path)
    if not base.is_dir():
        raise ValueError(f"{arg}: {str(path)!r} lies under the file {str(base)!r}")
    if kind == "directory" and path.is_dir():
        entries = [e.name for e in path.iterdir()]
        ours = markers is not None and any((path / m).exists() for m in markers)
        if entries and not ours and not overwrite:
            raise ValueError(f"{arg}: {str(path)!r} exists and is not empty ({len(entries)} entries, not an output "
                             "of this command); choose a new directory or pass --overwrite")
    probe_dir = base if base != path else path
    if base == path:  # the directory exists: the output's temporary sibling goes beside it
        probe_dir = path.parent if path.parent.exists() else path
    try:
        with interrupts_deferred():  # no probe file left behind by Ctrl-C
            fd, probe = tempfile.mkstemp(prefix=".rlvr-probe.", dir=probe_dir)
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise ValueError(f"{arg}: cannot write in {str(probe_dir)!r} ({err.strerror})") from None
    return path


def read_json_object(path: str | os.PathLike, where: str, *, expect: str = "a JSON object") -> dict:
    """The JSON object stored in ``path`` (a run's or a checkpoint's own file); ``ValueError``
    starting with ``where`` if it is not JSON (or not UTF-8) or holds something else.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "task.json"
    >>> _ = f.write_text("[1, 2]")
    >>> read_json_object(f, "init: file 'task.json'")
    Traceback (most recent call last):
    ...
    ValueError: init: file 'task.json' must hold a JSON object, got a list
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{where} is not valid JSON ({err})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where} must hold {expect}, got a {type(doc).__name__}")
    return doc
