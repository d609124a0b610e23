"""Run directories: atomic checkpoints, metrics files, finding the last complete checkpoint.

Nothing appears under a final name half-written: a checkpoint is built by
:func:`rlvr_plumbing.io.atomic_dir` in a temporary directory ``.checkpoint-000010.XXXX.tmp`` next to
its final place and renamed when complete; JSON files go through :func:`rlvr_plumbing.io.write_json`
(strict JSON: NaN as ``null``, ±inf as ``"inf"``/``"-inf"``) and metrics files through
:func:`rlvr_plumbing.io.atomic_write`.

A checkpoint directory holds ``model.safetensors`` + ``config.json`` (``save_pretrained``),
the tokenizer files, ``task.json`` (the task spec) and, for GRPO, ``trainer_state.json`` plus
``trainer_state.pt`` (optimizer, learning-rate schedule and torch RNG states; the last output-head
gradient with ``head_alignment``; the memory model's weights and optimizer state with ``mu > 0``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr_plumbing.io import atomic_dir, atomic_write, write_json
from rlvr_plumbing.serialize import dumps, jsonable

__all__ = ["save_model_dir", "checkpoint_name", "latest_checkpoint", "list_checkpoints",
           "clean_partial", "remove_tree", "MetricsLog", "write_json", "read_json"]

_CKPT = re.compile(r"^checkpoint-(\d{6,})$")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in ``path`` (written by :func:`write_json`, i.e. :func:`rlvr_plumbing.io.write_json`)."""
    return json.loads(Path(path).read_text())


def save_model_dir(final: str | os.PathLike, model: Any, tokenizer: Any, *,
                   json_files: Mapping[str, Any] | None = None,
                   extra: Callable[[Path], None] | None = None) -> Path:
    """``save_pretrained`` (safetensors) + tokenizer + JSON files (+ ``extra(tmpdir)``), atomically."""
    from .models import quiet_transformers

    def fill(tmp: Path) -> None:
        with quiet_transformers():
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        for name, obj in (json_files or {}).items():
            write_json(tmp / name, obj)
        if extra is not None:
            extra(tmp)
    return atomic_dir(final, fill)


def checkpoint_name(step: int) -> str:
    """``checkpoint-{step:06d}``."""
    return f"checkpoint-{step:06d}"


def list_checkpoints(run_dir: str | os.PathLike, *, require: str = "trainer_state.json") -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, ``[(step, path)]`` sorted by step."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    out = []
    for p in run.iterdir():
        m = _CKPT.match(p.name)
        if m and p.is_dir() and (p / require).is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """The last complete checkpoint ``(step, path)`` of a run, or ``None``."""
    ck = list_checkpoints(run_dir)
    return ck[-1] if ck else None


def clean_partial(run_dir: str | os.PathLike) -> list[Path]:
    """Remove temporary directories/files left by an interrupted save; returns what was removed."""
    run = Path(run_dir)
    removed = []
    for p in run.glob(".*.tmp*") if run.is_dir() else []:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        removed.append(p)
    for p in run.glob(".*.old*") if run.is_dir() else []:
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def remove_tree(path: str | os.PathLike) -> None:
    """Delete the directory ``path`` (``--overwrite`` of a run).  The current working directory
    and its parents are refused."""
    p = Path(path).resolve()
    cwd = Path.cwd().resolve()
    if p == cwd or p in cwd.parents:
        raise ValueError(f"overwrite: {str(path)!r} holds the current directory; choose another --out")
    if p.is_dir():
        shutil.rmtree(p)
    elif p.exists():
        p.unlink()


class MetricsLog:
    """Rows of per-step metrics, written to ``metrics.jsonl`` and ``metrics.csv`` atomically.

    ``columns`` fixes the leading column order; keys not listed are appended in first-seen
    order.  Values follow the JSON policy of :mod:`rlvr_plumbing.serialize` (NaN as ``null``,
    written empty in the CSV; ±inf as ``"inf"``/``"-inf"``).
    """

    def __init__(self, run_dir: str | os.PathLike, columns: Sequence[str] = ()):
        self.run_dir = Path(run_dir)
        self.columns = list(columns)
        self.rows: list[dict[str, Any]] = []

    def append(self, row: Mapping[str, Any]) -> None:
        self.rows.append(jsonable(dict(row)))
        for k in row:
            if k not in self.columns:
                self.columns.append(k)

    def update_last(self, values: Mapping[str, Any]) -> None:
        """Set ``values`` in the last row (a value known one step later); no row: nothing."""
        if self.rows:
            self.rows[-1].update(jsonable(dict(values)))
            for k in values:
                if k not in self.columns:
                    self.columns.append(k)

    def load(self, max_step: int | None = None) -> None:
        """Read ``metrics.jsonl`` back, keeping rows with ``step <= max_step``."""
        path = self.run_dir / "metrics.jsonl"
        self.rows = []
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    if max_step is None or row["step"] <= max_step:
                        self.append(row)

    def write(self) -> None:
        def jsonl(p: str) -> None:
            with open(p, "w") as f:
                for r in self.rows:
                    f.write(dumps(r) + "\n")

        def csv_(p: str) -> None:
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in self.columns})
            Path(p).write_text(buf.getvalue())

        atomic_write(self.run_dir / "metrics.jsonl", jsonl)
        atomic_write(self.run_dir / "metrics.csv", csv_)

    def __len__(self) -> int:
        return len(self.rows)

