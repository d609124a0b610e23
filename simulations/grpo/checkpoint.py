"""Run directories: atomic checkpoints, metrics files, finding the last complete checkpoint.

Nothing appears under a final name half-written: a checkpoint is written into a temporary
directory ``.checkpoint-000010.tmp-XXXX`` next to its final place and renamed when complete;
metrics files go through :func:`analysis.io.atomic_write`.

A checkpoint directory holds ``model.safetensors`` + ``config.json`` (``save_pretrained``),
the tokenizer files, ``task.json`` (the task spec) and, for GRPO, ``trainer_state.json`` plus
``trainer_state.pt`` (optimizer, learning-rate schedule and torch RNG states).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from analysis.io import atomic_write, atomic_write_text

__all__ = ["save_dir_atomic", "save_model_dir", "checkpoint_name", "latest_checkpoint", "list_checkpoints",
           "clean_partial", "MetricsLog", "write_json", "read_json"]

_CKPT = re.compile(r"^checkpoint-(\d{6,})$")


def _clean(value: Any) -> Any:
    """JSON-safe value: NaN/inf → None, numpy scalars → Python numbers."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomic JSON file (indent 2, NaN written as null)."""
    def conv(o: Any) -> Any:
        if isinstance(o, Mapping):
            return {str(k): conv(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [conv(v) for v in o]
        return _clean(o)
    return atomic_write_text(path, json.dumps(conv(obj), indent=2) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def save_dir_atomic(final: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Call ``fill(tmpdir)`` on a fresh temporary directory beside ``final``, then rename it.

    An existing ``final`` is replaced (moved aside first, deleted after the rename).  On any
    error the temporary directory is removed and ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


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
    return save_dir_atomic(final, fill)


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
    for p in run.glob(".*.old-*") if run.is_dir() else []:
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


class MetricsLog:
    """Rows of per-step metrics, written to ``metrics.jsonl`` and ``metrics.csv`` atomically.

    ``columns`` fixes the leading column order; keys not listed are appended in first-seen
    order.  Non-finite values are written as ``null`` (JSON) / empty (CSV).
    """

    def __init__(self, run_dir: str | os.PathLike, columns: Sequence[str] = ()):
        self.run_dir = Path(run_dir)
        self.columns = list(columns)
        self.rows: list[dict[str, Any]] = []

    def append(self, row: Mapping[str, Any]) -> None:
        self.rows.append({k: _clean(v) for k, v in row.items()})
        for k in row:
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
                    f.write(json.dumps(r) + "\n")

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

