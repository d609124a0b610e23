"""Rollout logs of RL trainers, read into one canonical table of rollouts.

:func:`read` turns the rollout logs that a trainer wrote into a :class:`Rollouts`: a pandas
DataFrame with one row per rollout and the columns

==========  =======  ==============================================================
column      dtype    meaning
==========  =======  ==============================================================
step        int64    the optimisation step of the rollout
group       int64    its group (one prompt's rollouts), 0..n-1 within a step in
                     first-appearance order
reward      float64  its reward (NaN: missing, e.g. a TRL reward function gave None)
advantage   float64  the advantage the trainer used (NaN when the log has none)
length      float64  generated tokens (NaN when the log does not say)
split       str      ``"train"`` or ``"val"``
==========  =======  ==============================================================

sorted by (step, group), the log's order kept within a group; text (prompts, completions) is
dropped right after each file is parsed.  One reader per format (:data:`FORMATS`):

* ``"trl"`` — TRL >= 0.28 with ``log_completions=True``:
  ``OUTPUT_DIR/completions/completions_{step:05d}.parquet``;
* ``"verl"`` — verl >= 0.9 ``trainer.rollout_data_dir`` (and ``validation_data_dir``):
  ``DIR/{step}.jsonl``;
* ``"prime-rl"`` — ``OUTPUT_DIR/rollouts/step_N/{train,eval}/{effective,all}/traces.jsonl``;
* ``"rlvr"`` — ``rlvr-train grpo``'s ``RUN_DIR/rollouts/step_{step:06d}.parquet``;
* ``"table"`` — any CSV, JSONL or parquet file with columns ``step``, ``group``, ``reward``
  (and optionally ``advantage``, ``length``, ``split``).
* ``"open-instruct"`` — ``--save_traces``: ``DIR/{run_name}_rollouts_{shard:06d}.jsonl`` (one
  rollout a line, its advantage logged; or the legacy ``traces_{run_name}.jsonl``, with ``group_size``);
* ``"slime"`` — ``--save-debug-rollout-data``: ``rollout_data/{rollout_id}.pt``, loaded with
  ``torch.load(weights_only=True)`` only (a file that needs more is refused).

:func:`detect_format` tells the format file by file and refuses paths that mix formats.  A file
that does not match its format is refused (``ValueError`` naming the file, the line or row, and
the missing column).  Files are read one at a time, keeping only the canonical columns, so that
a run of millions of rollouts fits in memory (``benchmarks/bench_audit.py``).  A large verl
dump with binary rewards is held as group counts instead of rows (:attr:`Rollouts.counts`,
``rows=``): polars aggregates every file per (step, group) in one streaming scan
(:func:`_verl_counts`).  Other verl dumps are
scanned by polars (``scan_ndjson``, projected on ``score``, the uid and ``step``: the prompts and
completions are parsed, never brought out; two files at a time); a file that the engine would
not read exactly as the line-by-line reader does (a value of another type, a null, a line that
is not JSON: :func:`_verl_scan`) is read by that reader, whose messages name the line.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "log.csv").write_text("step,group,reward\\n1,a,1\\n1,a,0\\n1,b,0\\n1,b,0\\n2,a,1\\n2,a,1\\n")
>>> r = read(d / "log.csv")
>>> r.source["format"], r.group_size
('table', 2)
>>> r.frame[["step", "group", "reward"]].to_numpy().tolist()
[[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 0.0, 1.0], [2.0, 0.0, 1.0]]
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlvr_plumbing import checks

__all__ = ["FORMATS", "COLUMNS", "SPLITS", "MAX_DROPPED_SHARE", "COUNTS_MIN_BYTES", "Rollouts", "read", "detect_format", "list_files",
           "suspect_read", "trainer_config"]

#: the size of a verl dump (bytes of its files) from which :func:`read` holds it as group counts
#: by default (``rows=None``): below, the rows cost little and keep the log's order within a group
COUNTS_MIN_BYTES = 1 << 28
#: the formats :func:`read` knows
FORMATS = ("trl", "verl", "prime-rl", "rlvr", "table", "open-instruct", "slime")
#: the columns of :attr:`Rollouts.frame`, in order
COLUMNS = ("step", "group", "reward", "advantage", "length", "split")
#: the values of ``split=``: which rollouts to read (``"all"``: both)
SPLITS = ("train", "val", "all")

_TABLE_EXT = (".csv", ".jsonl", ".json", ".parquet")
_TRL_FILE = re.compile(r"^completions_(\d+)\.parquet$")
_RLVR_FILE = re.compile(r"^step_(\d+)\.parquet$")
_VERL_FILE = re.compile(r"^(\d+)\.jsonl$")
_STEP_DIR = re.compile(r"^step_(\d+)$")
#: open-instruct ``--save_traces``: ``{run_name}_rollouts_{shard:06d}.jsonl`` (one rollout a line)
_OI_FILE = re.compile(r"^(.+)_rollouts_(\d+)\.jsonl$")
#: open-instruct's legacy (<= 2026-01-05) ``traces_{run_name}.jsonl`` (one step a line)
_OI_LEGACY_FILE = re.compile(r"^traces_(.+)\.jsonl$")
#: the keys of an open-instruct rollout line that tell it
_OI_KEYS = frozenset({"step", "sample_idx", "prompt_idx", "reward", "advantage"})
#: the keys of an open-instruct legacy step line that tell it
_OI_LEGACY_KEYS = frozenset({"scores", "training_step", "responses"})
#: slime ``--save-debug-rollout-data``: ``{rollout_id}.pt`` (``rollout_data/`` of ``--dump-details``),
#: or the template's own prefix (``rollout_{rollout_id}.pt``); eval dumps are ``eval_{rollout_id}``
_SLIME_FILE = re.compile(r"^(?:.*[_-])?(\d+)\.pt$")
_SLIME_EVAL = re.compile(r"^(?:.*[_-])?eval_(\d+)\.pt$")
#: TRL columns that are not reward functions
_TRL_FIXED = ("step", "prompt", "completion", "advantage")


class Rollouts:
    """A run's rollouts in the canonical table (see the module docstring).

    Attributes
    ----------
    frame : pandas.DataFrame
        One row per rollout: ``step, group, reward, advantage, length, split``.  For a read
        held as :attr:`counts`, built from them on first access (the rows of a group in
        canonical order: its failures, then its successes).
    counts : pandas.DataFrame or None
        A large binary-reward verl dump aggregated by the engine (:func:`_verl_counts`): one
        row per group, ``step, group, rollouts, successes, split`` (``successes``: rows with
        reward 1, the others have reward 0; no advantage, no length), sorted by (step,
        group), the groups of a step numbered in the order of their uid prefixes.  ``None``
        for a read held as rows.  :func:`analysis.audit.metrics.audit` works on it without
        building the rows.
    source : dict
        ``format``, ``paths`` (the files read), ``notes`` (sentences a report prints),
        ``n_files``, ``n_padding_rows_dropped``, ``n_duplicate_rows_dropped`` (=
        ``n_earlier_outputs_dropped`` of multi-output verl rollouts +
        ``n_repeated_batch_rows_dropped`` of TRL files repeating a batch),
        ``n_bad_lines_skipped``, ``n_rows_read`` (kept + dropped), ``grouping`` (``"uid"``,
        ``"shared-uid"``, ``"input"``, ``"prompt-blocks"`` or ``"group-column"``),
        ``group_size_given`` and ``trainer_config`` (:func:`trainer_config`).
    group_size : int or None
        The rollouts per group, or ``None`` when groups have unequal sizes.
    """

    def __init__(self, frame: pd.DataFrame | None = None, source: dict[str, Any] | None = None,
                 group_size: int | None = None, *, counts: pd.DataFrame | None = None):
        if (frame is None) == (counts is None):
            raise ValueError("Rollouts: give frame (one row per rollout) or counts (one row per group), not both")
        self._frame = frame
        self.counts = counts
        self.source = {} if source is None else source
        self.group_size = group_size

    @property
    def frame(self) -> pd.DataFrame:
        """The rows (built from :attr:`counts` on first access)."""
        if self._frame is None:
            self._frame = _expand_counts(self.counts)
        return self._frame

    @property
    def n_rollouts(self) -> int:
        """Number of rows (rollouts)."""
        if self._frame is None:
            return int(self.counts["rollouts"].sum())
        return len(self._frame)

    def __repr__(self) -> str:
        steps = (self.counts if self._frame is None else self._frame)["step"]
        span = f"steps {int(steps.min())}..{int(steps.max())}" if len(steps) else "no steps"
        return (f"Rollouts({self.source.get('format')!r}, {self.n_rollouts:,} rollouts, {span}, "
                f"group_size={self.group_size})")


def _expand_counts(counts: pd.DataFrame) -> pd.DataFrame:
    """The canonical rows of a :attr:`Rollouts.counts` table: each group's failures (reward 0),
    then its successes (reward 1)."""
    k = counts["rollouts"].to_numpy(np.int64)
    x = counts["successes"].to_numpy(np.int64)
    n = int(k.sum())
    start = np.cumsum(k) - k
    pos = np.arange(n, dtype=np.int64) - np.repeat(start, k)
    reward = (pos >= np.repeat(k - x, k)).astype(np.float64)
    frame = pd.DataFrame({"step": np.repeat(counts["step"].to_numpy(np.int64), k),
                          "group": np.repeat(counts["group"].to_numpy(np.int64), k), "reward": reward,
                          "advantage": np.full(n, np.nan), "length": np.full(n, np.nan)}, copy=False)
    frame["split"] = _split_column(np.repeat((counts["split"] == "val").to_numpy(bool), k))
    return frame


# ============================================================== the entry point
def read(paths: Any, format: str = "auto", *, group_size: int | None = None,
         reward_column: str | Sequence[str] | None = None, steps: tuple[int | None, int | None] | None = None,
         skip_bad_lines: bool = False, split: str = "train", rows: bool | None = None,
         arg: str = "paths") -> Rollouts:
    """Read a run's rollout logs into the canonical table.

    Parameters
    ----------
    paths : path or sequence of paths
        Files or directories: a trainer's output directory, its log directory, or log files.
    format : str
        One of :data:`FORMATS`, or ``"auto"`` (:func:`detect_format`).
    group_size : int, optional
        Rollouts per group.  TRL logs have no group id: a group is ``group_size`` consecutive
        rows with the same prompt (inferred from the repeats of the prompts when not given).
        For the other formats, the size every group must have (refused otherwise).
    reward_column : str or sequence of str, optional
        TRL: the reward function column(s) to use as the reward (default: the sum of all).
        slime: the key of dict rewards (default: the first of :data:`SLIME_REWARD_KEYS` present).
    steps : (int or None, int or None), optional
        Keep the steps ``a <= step <= b`` (``None``: no bound).
    skip_bad_lines : bool
        Skip JSONL lines that are not valid JSON (a truncated last line) and count them in
        ``source["n_bad_lines_skipped"]``, instead of refusing the file.
    split : {"train", "val", "all"}
        Which rollouts to read where the log tells (prime-rl ``train``/``eval``, a ``split``
        column); the label of every row where it does not (verl, TRL, rlvr: pass ``"val"``
        for a verl ``validation_data_dir``).
    rows : bool, optional
        How a verl dump with binary rewards is held (:attr:`Rollouts.counts`): ``None``
        (default) as group counts when its files hold at least :data:`COUNTS_MIN_BYTES`, as rows
        otherwise; ``False``: as group counts whenever the dump allows (:func:`_verl_counts`);
        ``True``: as rows.  Other formats are always rows.
    arg : str
        The name of ``paths`` in messages (``rlvr-audit`` passes ``"PATH"``).

    Returns
    -------
    Rollouts

    Raises
    ------
    ValueError
        A path that does not exist, no log files, logs of several formats (``format="auto"``,
        :func:`detect_format`), or a file that does not match the format (the message names
        the file, the line or row, and the missing column).

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> rows = [{"input": "q", "output": "o", "gts": "1", "score": s, "step": 3, "uid": f"u{i // 2}_{i % 2}_0"}
    ...         for i, s in enumerate([1.0, 0.0, 0.0, 0.0])]
    >>> _ = (d / "3.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
    >>> r = read(d)
    >>> r.source["format"], r.source["grouping"], r.group_size
    ('verl', 'uid', 2)
    >>> r.frame["group"].tolist(), r.frame["reward"].tolist()
    ([0, 0, 1, 1], [1.0, 0.0, 0.0, 0.0])
    """
    typed = _typed(paths)
    paths = _as_paths(typed, arg=arg)
    fmt = detect_format(typed, arg=arg) if format == "auto" else checks.choice("format", format, FORMATS)
    group_size = checks.integer("group_size", group_size, low=1, allow_none=True)
    split = checks.choice("split", split, SPLITS)
    lo, hi = _check_steps(steps)
    if not isinstance(skip_bad_lines, bool):
        raise ValueError(f"skip_bad_lines must be True or False, got {skip_bad_lines!r}")
    if rows not in (None, True, False):
        raise ValueError(f"rows must be None, True or False, got {rows!r}")
    if reward_column is not None and fmt not in ("trl", "slime"):
        raise ValueError(f"reward_column: only TRL logs have several reward columns (and slime dumps dict rewards, "
                         f"read at one key); a {fmt} log has one reward")
    if fmt == "slime" and reward_column is not None and not isinstance(reward_column, str):
        raise ValueError(f"reward_column: a slime dump's dict reward is read at one key, got {reward_column!r}")
    files = list_files(paths, fmt, split=split, arg=arg)
    files = [f for f in files if f.step is None or ((lo is None or f.step >= lo) and (hi is None or f.step <= hi))]
    if not files:
        raise ValueError(f"no {fmt} log files in the steps {_steps_text(lo, hi)} under "
                         + ", ".join(repr(str(p)) for p in paths))
    ctx = _Context(fmt=fmt, split=split, skip_bad_lines=skip_bad_lines, lo=lo, hi=hi)
    if fmt == "trl":
        _read_trl(files, ctx, group_size=group_size, reward_column=reward_column)
    elif fmt == "verl":
        counts = None if rows or (rows is None and _total_bytes(files) < COUNTS_MIN_BYTES) else _verl_counts(files, ctx)
        if counts is not None:
            return ctx.finish_counts(files, counts, group_size=group_size)
        _read_verl_files(files, ctx)
    elif fmt == "open-instruct":
        _read_open_instruct_files(files, ctx, group_size=group_size)
    elif fmt == "slime":
        _read_slime_files(files, ctx, group_size=group_size, reward_key=reward_column)
    else:
        reader = {"prime-rl": _read_prime, "rlvr": _read_rlvr, "table": _read_table}[fmt]
        for f in files:
            reader(f, ctx)
    return ctx.finish(files, group_size=group_size)


# ============================================================== files and formats
@dataclass(frozen=True)
class LogFile:
    """One log file: its path, its step when the name tells it, its split label."""

    path: Path
    step: int | None = None
    split: str = "train"


def _as_paths(paths: Any, *, arg: str = "paths") -> list[Path]:
    typed = _typed(paths)
    if not typed:
        raise ValueError(f"{arg} must name at least one file or directory, got none")
    for t in typed:
        if not Path(t).exists():
            raise ValueError(f"{arg}: {t!r} does not exist")
    return [Path(t) for t in typed]


def _check_steps(steps: Any) -> tuple[int | None, int | None]:
    if steps is None:
        return None, None
    if not (isinstance(steps, (tuple, list)) and len(steps) == 2):
        raise ValueError(f"steps must be a pair (first, last) of steps (None: no bound), got {steps!r}")
    lo = checks.integer("steps", steps[0], low=0, allow_none=True)
    hi = checks.integer("steps", steps[1], low=0, allow_none=True)
    if lo is not None and hi is not None and hi < lo:
        raise ValueError(f"steps must be (first, last) with first <= last, got {steps!r}")
    return lo, hi


def _steps_text(lo: int | None, hi: int | None) -> str:
    return f"{'' if lo is None else lo}:{'' if hi is None else hi}" if (lo, hi) != (None, None) else "(all)"


def _natural(p: Path) -> tuple:
    m = re.search(r"(\d+)", p.name)
    return (int(m.group(1)) if m else -1, p.name)


def _numbered(folder: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    out = []
    for p in folder.iterdir() if folder.is_dir() else []:
        m = pattern.match(p.name)
        if m and p.is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def _step_dirs(folder: Path) -> list[tuple[int, Path]]:
    out = []
    for p in folder.iterdir() if folder.is_dir() else []:
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def _first_json(path: Path, *, skip_bad: bool = False) -> dict | None:
    """The first non-empty line of a JSONL file as a dict (``None`` if it is not one); with
    ``skip_bad``, the first line that is a JSON object."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        if skip_bad:
                            continue
                        return None
                    if isinstance(obj, dict) or not skip_bad:
                        return obj if isinstance(obj, dict) else None
    except OSError:
        return None
    return None


def _columns_of(path: Path) -> set[str]:
    """The column names of a table file (empty when unreadable)."""
    try:
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq
            return set(pq.read_schema(path).names)
        if suffix == ".csv":
            with open(path, encoding="utf-8") as f:
                return {c.strip() for c in f.readline().strip().split(",")}
        if suffix in (".jsonl", ".json"):
            return set(_first_json(path) or ())
    except Exception:  # noqa: BLE001 - detection only: an unreadable file matches nothing
        return set()
    return set()


def _file_format(p: Path) -> str | None:
    name = p.name
    if _TRL_FILE.match(name):
        return "trl"
    if name == "traces.jsonl":
        return "prime-rl"
    cols = _columns_of(p) if p.suffix.lower() in _TABLE_EXT else set()
    if _RLVR_FILE.match(name) and {"group", "rollout", "reward", "advantage"} <= cols:
        return "rlvr"
    if p.suffix.lower() == ".jsonl" and "score" in cols and ("uid" in cols or "input" in cols):
        return "verl"
    if {"step", "group", "reward"} <= cols:
        return "table"
    if {"step", "prompt", "completion", "advantage"} <= cols:
        return "trl"
    if p.suffix.lower() == ".jsonl" and (_OI_KEYS <= cols or (_OI_LEGACY_FILE.match(name)
                                                              and _OI_LEGACY_KEYS <= cols)):
        return "open-instruct"
    if p.suffix.lower() == ".pt" and _SLIME_FILE.match(name) and _slime_like(p):
        return "slime"
    return None


def _slime_like(path: Path) -> bool:
    """Whether a ``.pt`` file looks like a slime rollout dump, told without unpickling it: a torch
    zip archive whose pickle names the keys ``rollout_id`` and ``samples`` (and ``response_length``
    when it has samples) within its first MiB."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            pkl = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                return False
            with z.open(pkl) as f:
                head = f.read(1 << 20)
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return b"rollout_id" in head and b"samples" in head


def _folder_logs(d: Path) -> list[tuple[Path, str | None]]:
    """The files of the folder ``d`` that a reader of some format reads, each with the format
    its place decides, or ``None`` where the file's name and first line (or schema) decide.

    Looked at, as :func:`list_files` looks (hidden names, starting with ``.``, never):

    * ``completions/completions_{step}.parquet`` — only the TRL reader reads there: ``"trl"``;
    * ``rollouts/step_{step}.parquet`` — only the rlvr reader: ``"rlvr"``;
    * ``traces.jsonl`` under ``rollouts/step_N/`` (else ``step_N/``; or under ``d`` itself when
      ``d`` is a ``step_N`` folder) — only the prime-rl reader: ``"prime-rl"``;
    * ``rollout_data/{rollout_id}.pt`` (slime's ``--dump-details`` folder; ``eval_*`` never) —
      only the slime reader: ``"slime"``;
    * ``d``'s own ``.csv``, ``.jsonl``, ``.json`` and ``.parquet`` files — several readers may
      read them (verl ``{step}.jsonl``, TRL ``completions_{step}.parquet``, rlvr
      ``step_{step}.parquet``, open-instruct ``{run}_rollouts_{shard}.jsonl``, any table) — and
      its ``{...}{int}.pt`` files (slime's dumps, told by their pickle's keys): ``None``.

    Everything else (``README.md``, ``.DS_Store``, checkpoints, other subfolders) is no reader's.
    """
    out: list[tuple[Path, str | None]] = [(q, "trl") for _, q in _numbered(d / "completions", _TRL_FILE)]
    out += [(q, "rlvr") for _, q in _numbered(d / "rollouts", _RLVR_FILE)]
    steps = [d] if _STEP_DIR.match(d.name) else [q for _, q in _step_dirs(d / "rollouts") or _step_dirs(d)]
    for s in steps:
        out += [(q, "prime-rl") for q in sorted(s.rglob("traces.jsonl")) if q.is_file()]
    out += [(q, "slime") for _, q in _numbered(d / "rollout_data", _SLIME_FILE) if not _SLIME_EVAL.match(q.name)]
    own = sorted((q for q in d.iterdir() if q.is_file() and not q.name.startswith(".")
                  and (q.suffix.lower() in _TABLE_EXT or (q.suffix.lower() == ".pt" and _SLIME_FILE.match(q.name)))),
                 key=_natural)
    return out + [(q, None) for q in own]


def _typed(paths: Any) -> list[str]:
    """The paths as the caller wrote them (``"logs/"`` keeps its slash), for messages."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    try:
        return [os.fspath(p) for p in paths]
    except TypeError:
        raise ValueError(f"paths must be a path or a list of paths, got {paths!r}") from None


def _listing(by_format: dict[str, list[str]]) -> str:
    """``"verl: 12 files (a, b, c, ...); trl: 1 file (x)"``: the most frequent format first."""
    order = sorted(by_format, key=lambda f: (-len(by_format[f]), FORMATS.index(f)))
    parts = []
    for f in order:
        files = by_format[f]
        shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        parts.append(f"{f}: {len(files)} file{'s' if len(files) != 1 else ''} ({shown})")
    return "; ".join(parts)


def detect_format(paths: Any, *, arg: str = "paths") -> str:
    """The format of a run's logs (one of :data:`FORMATS`), told file by file.

    Every log file counts, inside folders as across the given paths: a file given by name, and
    in a folder the files some reader reads there (:func:`_folder_logs`: the folder's own
    ``.csv``/``.jsonl``/``.json``/``.parquet`` files, TRL's ``completions/``, rlvr's and
    prime-rl's ``rollouts/``, prime-rl's ``step_N/`` folders).  A file's format is the one its
    place allows, or else the one its name and first line (or parquet schema) match
    (``{step}.jsonl`` with ``score`` and ``uid``/``input``: verl; ``completions_{step}.parquet``
    or the columns ``step, prompt, completion, advantage``: TRL; ``step_{step}.parquet`` with
    ``group, rollout, reward, advantage``: rlvr; ``traces.jsonl``: prime-rl; the columns
    ``step, group, reward``: a table).  A file that matches no format does not count: notes
    (``README.md``), hidden files (``.DS_Store``), other JSON (``tokenizer.json``), a table
    without those columns, a JSONL file whose first line is broken (the reader of the run's
    format still reads a file named like its logs, and refuses it naming the line).

    Raises ``ValueError`` when a path holds no log file of any format, and when the files are
    of more than one format: the message starts with ``arg`` (the caller's name of the paths),
    names the path as given, and lists which files are which format (a few of each, with counts).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "t.csv").write_text("step,group,reward\\n1,0,1\\n")
    >>> _ = (d / "README.md").write_text("my run")
    >>> detect_format(d / "t.csv"), detect_format([d])
    ('table', 'table')
    >>> _ = (d / "3.jsonl").write_text('{"input": "q", "score": 1.0, "uid": "a_0_0", "step": 3}\\n')
    >>> detect_format(str(d))
    Traceback (most recent call last):
    ...
    ValueError: paths: '...' mixes log formats: verl: 1 file (.../3.jsonl); table: 1 file (.../t.csv); audit one run at a time, or pass format=... (--format) to read one of them
    """
    typed = _typed(paths)
    _as_paths(typed, arg=arg)
    by_format: dict[str, list[str]] = {}
    for t in typed:
        p = Path(t)
        if p.is_dir():
            kinds = [(os.path.join(t, os.path.relpath(q, p)), f or _file_format(q)) for q, f in _folder_logs(p)]
        else:
            kinds = [(t, _file_format(p))]
        mine: dict[str, list[str]] = {}
        for shown, f in kinds:
            if f is not None:
                mine.setdefault(f, []).append(shown)
        if not mine:
            raise ValueError(f"format: cannot tell the log format of {t!r} (none of {', '.join(FORMATS)} "
                             "matches its names or columns); pass format=... (--format)")
        if len(mine) > 1:
            raise ValueError(f"{arg}: {t!r} mixes log formats: {_listing(mine)}; audit one run at a time, or "
                             "pass format=... (--format) to read one of them")
        for f, files in mine.items():
            by_format.setdefault(f, []).extend(files)
    if len(by_format) > 1:
        raise ValueError(f"{arg}: the logs mix formats: {_listing(by_format)}; audit one run at a time, or pass "
                         "format=... (--format) to read one of them")
    return next(iter(by_format))


def list_files(paths: Any, format: str, *, split: str = "train", arg: str = "paths") -> list[LogFile]:
    """The log files of a format under ``paths``, in step order (files named by the user are
    kept in their order); ``arg`` names ``paths`` in messages.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for s in (10, 2):
    ...     _ = (d / f"{s}.jsonl").write_text("")
    >>> [(f.path.name, f.step) for f in list_files([d], "verl")]
    [('2.jsonl', 2), ('10.jsonl', 10)]
    """
    fmt = checks.choice("format", format, FORMATS)
    split = checks.choice("split", split, SPLITS)
    label = "val" if split == "val" else "train"
    out: list[LogFile] = []
    for p in _as_paths(paths, arg=arg):
        if fmt == "prime-rl":
            out += _prime_files(p, split, arg=arg)
            continue
        if fmt == "slime":
            out += _slime_files(p, split, arg=arg)
            continue
        if p.is_file():
            m = {"trl": _TRL_FILE, "rlvr": _RLVR_FILE, "verl": _VERL_FILE}.get(fmt)
            mm = m.match(p.name) if m else None
            out.append(LogFile(p, int(mm.group(1)) if mm else None, label))
            continue
        if fmt == "trl":
            found = _numbered(p / "completions", _TRL_FILE) or _numbered(p, _TRL_FILE)
        elif fmt == "rlvr":
            found = _numbered(p / "rollouts", _RLVR_FILE) or _numbered(p, _RLVR_FILE)
        elif fmt == "verl":
            found = _numbered(p, _VERL_FILE)
        elif fmt == "open-instruct":
            found = _open_instruct_files(p)
        else:
            found = [(None, q) for q in sorted((q for q in p.iterdir()
                                                 if q.is_file() and q.suffix.lower() in _TABLE_EXT
                                                 and not q.name.startswith(".")), key=_natural)]
        if not found:
            raise ValueError(f"{arg}: no {fmt} log files in {str(p)!r}")
        out += [LogFile(q, s, label) for s, q in found]
    return out


def _open_instruct_files(p: Path) -> list[tuple[None, Path]]:
    """open-instruct: the folder's ``{run_name}_rollouts_{shard}.jsonl`` by run name, then shard
    number (``{run_name}_metadata.jsonl`` is not a rollout file), else its legacy
    ``traces_{run_name}.jsonl``."""
    shards = sorted((m.group(1), int(m.group(2)), q) for q in p.iterdir()
                    if q.is_file() and (m := _OI_FILE.match(q.name)))
    if shards:
        return [(None, q) for _, _, q in shards]
    return [(None, q) for q in sorted(p.iterdir()) if q.is_file() and _OI_LEGACY_FILE.match(q.name)]


def _slime_files(p: Path, split: str, *, arg: str = "paths") -> list[LogFile]:
    """slime: ``rollout_data/{rollout_id}.pt`` (else the folder's own ``{...}{int}.pt``), in
    rollout order; the eval dumps (``eval_{rollout_id}``) are the validation split."""
    def kind(q: Path) -> tuple[str, int | None]:
        m = _SLIME_EVAL.match(q.name)
        if m:
            return "val", int(m.group(1))
        m = _SLIME_FILE.match(q.name)
        return "train", (int(m.group(1)) if m else None)

    wanted = {"train": ("train",), "val": ("val",), "all": ("train", "val")}[split]
    if p.is_file():
        label, step = kind(p)
        if label not in wanted:
            raise ValueError(f"{arg}: {str(p)!r} is a slime {'eval' if label == 'val' else 'training'} dump; pass "
                             f"split={'val' if label == 'val' else 'train'!r} (--split) to read it")
        return [LogFile(p, step, label)]
    base = p / "rollout_data" if _numbered(p / "rollout_data", _SLIME_FILE) else p
    found = sorted(((s, 0 if label == "train" else 1), q, label) for q in base.iterdir()
                   if q.is_file() and _SLIME_FILE.match(q.name) for label, s in [kind(q)])
    out = [LogFile(q, s, label) for (s, _), q, label in found if label in wanted]
    if not out:
        raise ValueError(f"{arg}: no slime rollout dumps ({{rollout_id}}.pt"
                         + (", eval_{rollout_id}.pt" if split != "train" else "") + f") in {str(p)!r}")
    return out


def _prime_files(p: Path, split: str, *, arg: str = "paths") -> list[LogFile]:
    """prime-rl: ``rollouts/step_N/{train,eval}/{effective,all}/traces.jsonl`` (the
    ``effective`` cohort — what the trainer updated on — when both were written)."""
    kinds = {"train": ("train",), "val": ("eval",), "all": ("train", "eval")}[split]
    if p.is_file():
        parts = p.parts
        kind = next((k for k in reversed(parts[:-1]) if k in ("train", "eval")), "train")
        step = next((int(m.group(1)) for q in reversed(parts[:-1]) if (m := _STEP_DIR.match(q))), None)
        return [LogFile(p, step, "val" if kind == "eval" else "train")] if kind in kinds else []
    if _STEP_DIR.match(p.name):
        steps = [(int(_STEP_DIR.match(p.name).group(1)), p)]
    else:
        steps = _step_dirs(p / "rollouts") or _step_dirs(p)
    if not steps:
        raise ValueError(f"{arg}: no prime-rl rollouts (rollouts/step_N/...) in {str(p)!r}")
    out = []
    for step, d in steps:
        for kind in kinds:
            base = d / kind
            chosen = None
            for subset in ("effective", "all"):
                if (base / subset / "traces.jsonl").is_file():
                    chosen = [base / subset / "traces.jsonl"]
                    break
            if chosen is None and base.is_dir():
                chosen = sorted(base.rglob("traces.jsonl"))
            out += [LogFile(q, step, "val" if kind == "eval" else "train") for q in chosen or ()]
    return out


# ============================================================== the trainer's own record
#: the largest trainer record read (a bigger ``run_config.json`` / ``rlvr_state.json`` is not one)
_MAX_RECORD_BYTES = 8 << 20
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


def _json_record(path: Path, notes: list[str] | None) -> dict | None:
    """A small JSON object file, read as JSON only (``None``, with a note, when it is not one)."""
    try:
        if path.stat().st_size > _MAX_RECORD_BYTES:
            raise ValueError(f"larger than {_MAX_RECORD_BYTES >> 20} MiB")
        obj = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(obj, dict):
            raise ValueError(f"a JSON {type(obj).__name__}, not an object")
        return obj
    except (OSError, ValueError) as err:
        if notes is not None:
            notes.append(f"{path}: not read as the trainer's record ({err}); 'which advantage' searches without it.")
        return None


def _run_config_entry(path: Path, notes: list[str] | None) -> dict | None:
    """``rlvr-train grpo``'s ``run_config.json``: ``{"kind": "grpo", "settings": {"advantage",
    "schedule", "params", ...}, ...}`` (an older file holds the settings at its top level)."""
    obj = _json_record(path, notes)
    if obj is None:
        return None
    settings = obj.get("settings") if isinstance(obj.get("settings"), dict) else obj
    if obj.get("kind", settings.get("kind")) not in (None, "grpo"):
        return None  # an SFT run: no advantage
    params = settings.get("params") if isinstance(settings.get("params"), dict) else {}
    for kind, key in (("schedule", "schedule"), ("family", "advantage")):
        name = settings.get(key)
        if isinstance(name, str) and name:
            return {"file": str(path), "name": name, "kind": kind, "params": dict(params), "params_known": True}
    return None


def _rlvr_state_entry(path: Path, notes: list[str] | None) -> dict | None:
    """The TRL adapter's ``checkpoint-N/rlvr_state.json``: ``{"policy": {...}, "name": family or
    schedule, ...}``; the parameters of a fixed family are not in it."""
    obj = _json_record(path, notes)
    if obj is None or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    policy = obj.get("policy") if isinstance(obj.get("policy"), dict) else {}
    kind = "schedule" if policy.get("schedule") else "family"
    return {"file": str(path), "name": obj["name"], "kind": kind, "params": {}, "params_known": False}


def trainer_config(paths: Iterable[Any], notes: list[str] | None = None) -> dict | None:
    """The advantage that the trainer's own record beside or above the log files names, or None.

    Looked for in the folder of each log file and in the one above it, the nearest first:
    ``run_config.json`` (``rlvr-train grpo``'s run folder, whose rollouts are in
    ``RUN/rollouts/``: the ``advantage`` or ``schedule`` of its ``settings`` and their
    ``params``) and ``checkpoint-N/rlvr_state.json`` of the highest ``N`` (the TRL adapter's
    output folder, whose completions are in ``OUTPUT_DIR/completions/``: the family's or
    schedule's ``name``; its parameters are not recorded).  The files are read as JSON, never
    run.  Returns ``{"file", "name", "kind": "family"|"schedule", "params", "params_known"}``;
    a file that is not a JSON object is skipped with a sentence in ``notes``.

    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "rollouts").mkdir()
    >>> _ = (d / "run_config.json").write_text(json.dumps({"kind": "grpo", "settings": {
    ...     "advantage": "asym_grpo", "schedule": None, "params": {"delta": 0.5}}}))
    >>> e = trainer_config([d / "rollouts" / "step_000001.parquet"])
    >>> e["name"], e["kind"], e["params"]
    ('asym_grpo', 'family', {'delta': 0.5})
    """
    dirs: list[Path] = []
    for p in paths:
        d = Path(p).parent
        for q in (d, d.parent):
            if q not in dirs:
                dirs.append(q)
    for d in dirs:
        if (d / "run_config.json").is_file():
            entry = _run_config_entry(d / "run_config.json", notes)
            if entry is not None:
                return entry
        ckpts = sorted((int(m.group(1)), q) for q in (d.iterdir() if d.is_dir() else ())
                       if (m := _CHECKPOINT_DIR.match(q.name)) and (q / "rlvr_state.json").is_file())
        for _, q in reversed(ckpts):
            entry = _rlvr_state_entry(q / "rlvr_state.json", notes)
            if entry is not None:
                return entry
    return None


#: the largest share of a log's rows that a reader may drop before ``rlvr-audit`` refuses the
#: read (:func:`suspect_read`; ``--allow-suspect-read`` audits the rows left anyway)
MAX_DROPPED_SHARE = 0.05


def suspect_read(rollouts: Rollouts) -> list[str]:
    """Signs that the log was misread, each as one sentence (empty: none).

    * the reader dropped more than :data:`MAX_DROPPED_SHARE` of the rows it read as earlier
      outputs of multi-output rollouts (verl) or as unreadable lines (``skip_bad_lines``).
      Not counted: verl's padding rows (not rollouts) and TRL files that repeat an earlier
      generation batch (identical copies: nothing is lost);
    * every group has one rollout while the group size was not given (``group_size=1`` says
      that it is right): no group can carry a signal.

    ``rlvr-audit`` refuses such a read (exit 2) unless ``--allow-suspect-read`` is given.

    >>> import pandas as pd
    >>> f = pd.DataFrame({"step": [1, 1], "group": [0, 1], "reward": [1.0, 0.0]})
    >>> suspect_read(Rollouts(f, {"format": "table", "n_rows_read": 2}, 1))
    ['every group of the table log has 1 rollout (2 groups of 1 row; grouping: group-column), so no group can carry a signal']
    """
    src = rollouts.source or {}
    out = []
    n_rows = int(src.get("n_rows_read") or rollouts.n_rollouts)
    parts = [(int(src.get("n_earlier_outputs_dropped") or 0), "as earlier outputs of multi-output rollouts "
              "(uid '{group}_{rollout}_{output}': the last output of each rollout kept)"),
             (int(src.get("n_bad_lines_skipped") or 0), "as lines that are not JSON (skip_bad_lines)")]
    dropped = sum(n for n, _ in parts)
    if n_rows and dropped > MAX_DROPPED_SHARE * n_rows:
        what = " and ".join(f"{n:,} {text}" for n, text in parts if n)
        out.append(f"the {src.get('format')} reader dropped {dropped:,} of the {n_rows:,} rows it read "
                   f"({100 * dropped / n_rows:.3g} %, more than {100 * MAX_DROPPED_SHARE:g} %): {what}")
    if rollouts.group_size == 1 and rollouts.n_rollouts and not src.get("group_size_given"):
        out.append(f"every group of the {src.get('format')} log has 1 rollout ({rollouts.n_rollouts:,} groups of 1 "
                   f"row; grouping: {src.get('grouping', 'group-column')}), so no group can carry a signal")
    return out


# ============================================================== accumulating files
#: the dtypes of the columns of :attr:`Rollouts.frame` while they are assembled (``split``: is "val")
_DTYPES = {"step": np.int64, "group": np.int64, "reward": np.float64, "advantage": np.float64,
           "length": np.float64, "split": bool}
#: rows of the blocks that :class:`_Parts` gathers small parts into (8-byte columns: 32 MiB, memory
#: that the allocator maps apart and gives back whole when the block is freed)
_BLOCK_ROWS = 1 << 22


class _Parts:
    """One column's parts, in order: arrays, or ``(value, n)`` for a constant run.  Consecutive
    small arrays (one per file) are gathered into blocks of :data:`_BLOCK_ROWS` rows, so that
    the memory of the small ones is reused for the next files, and a block's memory goes back
    to the system when :func:`_assemble` has copied it into the column."""

    def __init__(self, dtype: Any):
        self.dtype = dtype
        self.items: list = []
        self._small: list[np.ndarray] = []
        self._n_small = 0

    def append(self, part: Any) -> None:
        if isinstance(part, tuple):
            self._gather()
            self.items.append(part)
            return
        self._small.append(np.asarray(part, dtype=self.dtype))
        self._n_small += len(part)
        if self._n_small >= _BLOCK_ROWS:
            self._gather()

    def _gather(self) -> None:
        if len(self._small) == 1:
            self.items.append(self._small[0])
        elif self._small:
            self.items.append(np.concatenate(self._small))
        self._small, self._n_small = [], 0

    @property
    def items_done(self) -> list:
        self._gather()
        return self.items


@dataclass
class _Context:
    """What the readers have read so far: the canonical columns of every file, and the map
    of each step's group keys to group numbers (so that a group split across files is one)."""

    fmt: str
    split: str
    skip_bad_lines: bool
    lo: int | None
    hi: int | None
    parts: dict[str, _Parts] = field(default_factory=lambda: {c: _Parts(_DTYPES[c]) for c in COLUMNS})
    keys: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"n_padding_rows_dropped": 0,
                                                            "n_duplicate_rows_dropped": 0,
                                                            "n_bad_lines_skipped": 0,
                                                            "n_earlier_outputs_dropped": 0,
                                                            "n_repeated_batch_rows_dropped": 0})
    grouping: set[str] = field(default_factory=set)
    read_paths: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Add ``text`` to the notes of the read (once, however many files say it)."""
        if text not in self.notes:
            self.notes.append(text)

    def add(self, step: np.ndarray, key: Any, reward: np.ndarray, *, advantage: np.ndarray | None = None,
            length: np.ndarray | None = None, split: str | np.ndarray = "train") -> None:
        """Add one file's rows: ``key`` are group keys (any hashable values, or a pyarrow
        array), unique within a step."""
        step = np.asarray(step, dtype=np.int64)
        keep = self._in_steps(step)
        if len(step) == 0 or (keep is not None and not keep.any()):
            return
        codes, uniques = _factorize(key)
        self.add_coded(step, codes, _hash_keys(uniques), reward, advantage=advantage, length=length, split=split,
                       keep=keep)

    def _in_steps(self, step: np.ndarray) -> np.ndarray | None:
        """The rows in the steps read (``None``: all of them, no bound was given)."""
        if self.lo is None and self.hi is None:
            return None
        keep = np.ones(len(step), bool)
        if self.lo is not None:
            keep &= step >= self.lo
        if self.hi is not None:
            keep &= step <= self.hi
        return keep

    def add_coded(self, step: np.ndarray, codes: np.ndarray, hashes: np.ndarray, reward: np.ndarray, *,
                  advantage: np.ndarray | None = None, length: np.ndarray | None = None,
                  split: str | np.ndarray = "train", keep: Any = False) -> None:
        """:meth:`add` with the keys already numbered: ``codes`` (int64, first-appearance order)
        index ``hashes``, the 64-bit hashes of the distinct keys (:func:`_hash_keys`)."""
        step = np.asarray(step, dtype=np.int64)
        n = len(step)
        reward = np.asarray(reward, dtype=np.float64)
        if keep is False:  # not computed by the caller
            keep = self._in_steps(step)
        if n == 0 or (keep is not None and not keep.any()):
            return
        if keep is not None and not keep.all():
            step, codes, reward = step[keep], codes[keep], reward[keep]
            advantage = None if advantage is None else np.asarray(advantage)[keep]
            length = None if length is None else np.asarray(length)[keep]
            split = split if isinstance(split, str) else np.asarray(split)[keep]
            n = len(step)
        one_step = bool(n and step[0] == step[-1] and (step == step[0]).all())
        if one_step:  # one step (the usual file)
            group = self._number(int(step[0]), hashes)[codes]
        else:  # several steps in one file: number the (step, key) pairs, step by step
            nk = max(len(hashes), 1)
            scodes, suniq = pd.factorize(step)
            pcodes, puniq = pd.factorize(scodes.astype(np.int64) * nk + codes)
            lut = np.empty(len(puniq), np.int64)
            pstep = puniq // nk
            for j in np.unique(pstep):
                at = np.flatnonzero(pstep == j)  # first-appearance order within the step
                lut[at] = self._number(int(suniq[j]), hashes[puniq[at] % nk])
            group = lut[pcodes]
        # a constant column is kept as (value, n): memory is spent once, in finish()
        self.parts["step"].append((int(step[0]), n) if one_step else step)
        self.parts["group"].append(group)
        self.parts["reward"].append(reward)
        self.parts["advantage"].append((np.nan, n) if advantage is None else np.asarray(advantage, dtype=np.float64))
        self.parts["length"].append((np.nan, n) if length is None else np.asarray(length, dtype=np.float64))
        self.parts["split"].append((split == "val", n) if isinstance(split, str) else np.asarray(split) == "val")

    def _number(self, step: int, hashes: np.ndarray) -> np.ndarray:
        """The group numbers of keys (by their 64-bit hashes, in first-appearance order) within
        ``step``: the numbers given before to the keys seen before, new ones to the others."""
        known, numbers = self.keys.get(step, (np.empty(0, np.uint64), np.empty(0, np.int64)))
        out = np.empty(len(hashes), np.int64)
        pos = np.searchsorted(known, hashes)
        found = pos < len(known)
        found[found] = known[pos[found]] == hashes[found]
        out[found] = numbers[pos[found]]
        new = np.flatnonzero(~found)
        out[new] = len(known) + np.arange(len(new))
        if len(new):
            allh = np.concatenate([known, hashes[new]])
            alln = np.concatenate([numbers, out[new]])
            order = np.argsort(allh, kind="stable")
            self.keys[step] = (allh[order], alln[order])
        return out

    def finish(self, files: list[LogFile], *, group_size: int | None) -> Rollouts:
        dtypes = _DTYPES
        cols = {c: _assemble(self.parts[c].items_done, dtypes[c]) for c in COLUMNS}
        step, group = cols["step"], cols["group"]
        if len(step) and not _sorted(step, group):
            order = np.lexsort((group, step))  # stable: the log's order within a group
            for c in cols:
                cols[c] = cols[c][order]
            del order
            step, group = cols["step"], cols["group"]
        if len(step) == 0:
            raise ValueError(f"no rollouts in the steps {_steps_text(self.lo, self.hi)} of the {self.fmt} log "
                             + ", ".join(repr(str(f.path)) for f in files[:3]) + (" ..." if len(files) > 3 else ""))
        G = self._group_size(_group_sizes(step, group), group_size)
        n_nan = int(np.isnan(cols["reward"]).sum())
        if n_nan:
            self.notes.append(f"{n_nan:,} rollouts have no reward (NaN): they are left out of their group, as "
                              "TRL leaves them out, and counted.")
        frame = pd.DataFrame({"step": step, "group": group, "reward": cols["reward"],
                              "advantage": cols["advantage"], "length": cols["length"]}, copy=False)
        frame["split"] = _split_column(cols.pop("split"))
        return Rollouts(frame, self._source(files, len(step), group_size), G)

    def finish_counts(self, files: list[LogFile], counts: pd.DataFrame, *, group_size: int | None) -> Rollouts:
        """:meth:`finish` of a read the engine aggregated per group (:func:`_verl_counts`)."""
        G = self._group_size(counts["rollouts"].to_numpy(), group_size)
        return Rollouts(source=self._source(files, int(counts["rollouts"].sum()), group_size), group_size=G,
                        counts=counts)

    def _group_size(self, sizes: np.ndarray, group_size: int | None) -> int | None:
        """The one size of every group (``None``, with a note, when sizes differ); refuses a
        ``group_size`` the log does not have."""
        values, counts = np.unique(sizes, return_counts=True)
        if group_size is not None and self.fmt != "trl" and (len(values) > 1 or values[0] != group_size):
            raise ValueError(f"group_size: the log's groups have {_sizes_text(values, counts)} rollouts, "
                             f"not group_size={group_size}; leave group_size out to audit them as they are")
        G = int(values[0]) if len(values) == 1 else None
        if G is None:
            self.notes.append(f"Groups have unequal sizes ({_sizes_text(values, counts)} rollouts): group_size "
                              "is None and groups are audited per size.")
        return G

    def _source(self, files: list[LogFile], n_kept: int, group_size: int | None) -> dict[str, Any]:
        grouping = next((g for g in ("input", "shared-uid") if g in self.grouping), None) or (
            sorted(self.grouping)[0] if self.grouping else "group-column")
        c = self.counts
        n_read = (n_kept + c["n_padding_rows_dropped"] + c["n_duplicate_rows_dropped"] + c["n_bad_lines_skipped"]
                  + c.get("n_removed_samples_dropped", 0))
        return {"format": self.fmt, "paths": self.read_paths or [str(f.path) for f in files],
                "notes": self.notes, "n_files": len(self.read_paths or files), **self.counts,
                "n_rows_read": int(n_read), "grouping": grouping, "group_size_given": group_size is not None,
                "trainer_config": trainer_config([f.path for f in files], self.notes)}


def _split_column(is_val: np.ndarray) -> pd.Series:
    """The ``split`` column (``"train"``/``"val"``) as pandas strings, built without a Python
    object per row."""
    import pyarrow as pa

    n = len(is_val)
    if n and (is_val[0] == is_val).all():  # one label (the usual read): chunks that share one buffer
        size = min(n, 1 << 20)
        chunk = pa.array(["val" if is_val[0] else "train"] * size, pa.large_string())  # pandas' own type
        full, rest = divmod(n, size)
        arr = pa.chunked_array([chunk] * full + ([chunk.slice(0, rest)] if rest else []), pa.large_string())
    else:
        codes = pa.array(is_val.astype(np.int8))
        arr = pa.DictionaryArray.from_arrays(codes, pa.array(["train", "val"])).cast(pa.string())
    return pd.Series(pd.array(arr, dtype=pd.StringDtype("pyarrow", na_value=np.nan)), copy=False)


def _hash_keys(uniques: list) -> np.ndarray:
    """64-bit hashes of group keys (distinct keys of one step collide with probability ~n²/2⁶⁴):
    integers by pandas, any other key as its text by the engine (:func:`_hash_text`)."""
    if not len(uniques):
        return np.empty(0, np.uint64)
    arr = np.asarray(uniques)
    if arr.dtype.kind in "iu":
        return pd.util.hash_array(arr)
    return _hash_text([str(u) if not isinstance(u, str) else u for u in uniques])


def _hash_text(values: Any) -> np.ndarray:
    """The engine's 64-bit hash (polars' ``hash``, seed :data:`_HASH_SEED`) of each string of
    ``values``: the hash that :func:`_verl_scan` gives the keys it never brings out.  Without
    polars (an environment that installed the package without its dependencies, such as the
    adapters' test environments) the engine path is off too (:func:`_engine_ok`), so pandas'
    hash serves every file of the read alike."""
    if not _engine_ok():
        return pd.util.hash_array(np.asarray(list(values), dtype=object))
    import polars as pl

    return pl.Series(values, dtype=pl.String).hash(_HASH_SEED).to_numpy()


def _factorize(key: Any) -> tuple[np.ndarray, list]:
    """``(codes, uniques)`` of group keys in first-appearance order."""
    try:
        import pyarrow as pa
        if isinstance(key, (pa.Array, pa.ChunkedArray)):
            enc = key.dictionary_encode()
            if isinstance(enc, pa.ChunkedArray):
                enc = enc.combine_chunks()
            return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    codes, uniques = pd.factorize(np.asarray(key))
    return codes.astype(np.int64), list(uniques)


def _assemble(parts: list, dtype: Any) -> np.ndarray:
    """One column from its parts (arrays, or ``(value, n)`` for a constant run), written into
    one array while the parts are freed, so that the column is not held twice."""
    total = sum(p[1] if isinstance(p, tuple) else len(p) for p in parts)
    out = np.empty(total, dtype)
    i = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        n = p[1] if isinstance(p, tuple) else len(p)
        out[i:i + n] = p[0] if isinstance(p, tuple) else p
        i += n
    return out


def _sorted(step: np.ndarray, group: np.ndarray) -> bool:
    if (step[1:] < step[:-1]).any():
        return False
    return not ((step[1:] == step[:-1]) & (group[1:] < group[:-1])).any()


def _group_sizes(step: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Sizes of the consecutive (step, group) runs of a sorted table."""
    change = np.flatnonzero((step[1:] != step[:-1]) | (group[1:] != group[:-1])) + 1
    bounds = np.concatenate(([0], change, [len(step)]))
    return np.diff(bounds)


def _sizes_text(values: np.ndarray, counts: np.ndarray) -> str:
    if len(values) == 1:
        return f"{int(values[0])}"
    return ", ".join(f"{int(v)} ({int(c):,} groups)" for v, c in zip(values, counts))


# ============================================================== JSONL and parquet helpers
def _read_jsonl(path: Path, ctx: _Context, *, required: dict[str, Any], optional: dict[str, Any] = (),
                what: str) -> Any:
    """A JSONL file as a pyarrow Table of the ``required`` and ``optional`` keys (name ->
    pyarrow type).  Fast path: ``pyarrow.json`` with an explicit schema; on any problem the
    file is scanned line by line so that the message names the line (bad JSON lines are
    skipped and counted with ``skip_bad_lines``)."""
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([(k, t) for k, t in {**required, **dict(optional)}.items()])
    try:
        table = pj.read_json(path, read_options=pj.ReadOptions(block_size=2 << 20),
                             parse_options=pj.ParseOptions(explicit_schema=schema,
                                                           unexpected_field_behavior="ignore"))
        if all(table.column(k).null_count == 0 for k in required):
            return table
    except pa.ArrowInvalid:
        pass
    return _scan_jsonl(path, ctx, schema, required, what)


def _json_objects(path: Path, ctx: _Context, what: str):
    """``(line number, object)`` of each non-blank line of a JSONL file; a line that is not JSON is
    refused with ``path:line`` (or skipped and counted with ``skip_bad_lines``), a line that is not
    a JSON object is refused naming ``what``."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as err:
                if ctx.skip_bad_lines:
                    ctx.counts["n_bad_lines_skipped"] += 1
                    continue
                end = " (the last line: the file may be truncated)" if not line.endswith(b"\n") else ""
                raise ValueError(f"{path}:{lineno}: not a valid JSON line{end} ({err}); pass skip_bad_lines=True "
                                 "(--skip-bad-lines) to skip such lines") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: {what} must be a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _scan_jsonl(path: Path, ctx: _Context, schema: Any, required: dict[str, Any], what: str) -> Any:
    import pyarrow as pa

    good = io.BytesIO()
    for lineno, obj in _json_objects(path, ctx, f"a {what} line"):
        for k in required:
            if obj.get(k) is None:
                raise ValueError(f"{path}:{lineno}: missing key {k!r} (a {what} line has "
                                 + ", ".join(repr(r) for r in required) + ")")
        for k in schema.names:
            v = obj.get(k)
            t = schema.field(k).type
            if v is None:
                continue
            if pa.types.is_string(t) and not isinstance(v, str):
                obj[k] = json.dumps(v) if isinstance(v, (dict, list)) else str(v)
            elif pa.types.is_floating(t) or pa.types.is_integer(t):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError(f"{path}:{lineno}: key {k!r} must be a number, got {v!r}")
                if pa.types.is_integer(t) and isinstance(v, float) and not v.is_integer():
                    raise ValueError(f"{path}:{lineno}: key {k!r} must be an integer, got {v!r}")
        good.write(json.dumps({k: obj.get(k) for k in schema.names}).encode() + b"\n")
    if good.tell() == 0:
        return pa.table({k: pa.array([], type=schema.field(k).type) for k in schema.names})
    good.seek(0)
    import pyarrow.json as pj
    return pj.read_json(good, parse_options=pj.ParseOptions(explicit_schema=schema))


def _np(col: Any, dtype: Any = np.float64) -> np.ndarray:
    """A pyarrow column as a numpy array (nulls as NaN for floats)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if np.dtype(dtype).kind == "f":
        col = pc.cast(col, pa.float64()) if not pa.types.is_float64(col.type) else col
        return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return col.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _read_parquet(path: Path, columns: Sequence[str] | None, *, required: Sequence[str], what: str) -> Any:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception as err:  # noqa: BLE001 - any unreadable file is refused the same way
        raise ValueError(f"{path}: not a readable parquet file ({type(err).__name__}: {err})") from None
    missing = [c for c in required if c not in names]
    if missing:
        raise ValueError(f"{path}: row 1: missing column {missing[0]!r} (a {what} file has "
                         + ", ".join(repr(c) for c in required) + f"; this one has {', '.join(names)})")
    cols = [c for c in columns if c in names] if columns is not None else None
    return pq.read_table(path, columns=cols)


def _check_no_nulls(table: Any, path: Path, names: Iterable[str], *, header_rows: int = 0, unit: str = "row") -> None:
    """Refuse a null in a column that must be filled, naming the row (or CSV line)."""
    import pyarrow.compute as pc

    for c in names:
        col = table.column(c)
        if col.null_count:
            i = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"{path}: {unit} {i + 1 + header_rows}: column {c!r} is empty")


# ============================================================== verl
def _read_verl_files(files: list[LogFile], ctx: _Context) -> None:
    """Read verl files in order: each through the engine (:func:`_verl_scan`, a few files at a
    time on a small thread pool); a file that the engine does not read exactly as the line
    reader would (:func:`_verl_scan` returns ``None``) is read by :func:`_read_verl`, which
    refuses a bad file naming its line."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    if not _engine_ok():
        for f in files:
            _read_verl(f, ctx)
        return
    workers = max(1, min(_ENGINE_THREADS, len(files)))
    todo = iter(files)
    pending: deque = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="rlvr-read")
    try:
        for f in files[:_AHEAD * workers]:
            pending.append((f, pool.submit(_verl_scan, f.path, f.step)))
            next(todo)
        while pending:
            f, job = pending.popleft()
            scan = job.result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(_verl_scan, nxt.path, nxt.step)))
            if scan is None:
                _read_verl(f, ctx)
            else:
                _add_verl_scan(f, ctx, scan)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _total_bytes(files: list[LogFile]) -> int:
    return sum(os.path.getsize(f.path) for f in files)


def _verl_counts(files: list[LogFile], ctx: _Context) -> pd.DataFrame | None:
    """The :attr:`Rollouts.counts` of a verl dump, aggregated per (step, group) by the engine in
    one streaming scan of every file (polars ``scan_ndjson`` projected on ``score``, ``uid`` and
    ``step``: no row is brought out), or ``None`` when the rows must be read
    (:func:`_read_verl_files`).

    The scan is used only where it gives what the row readers give, group for group: every
    score 0 or 1, every uid ``{group}_{rollout}_0`` (the usual dump) with ``{rollout}`` an
    integer below 64 that no other row of the group repeats (the uid is not shared), no null
    or non-text value, no NUL, and, before the scan, the first file read that way by
    :func:`_verl_scan` (a dump with shaped rewards, shared uids or multi-output rollouts goes
    to the row readers at the cost of one file).  Padding rows (uid ``pad...``) are counted
    and dropped as there.  A line the engine refuses (not JSON, a value of another type)
    sends the read to the row readers, which name the line.  Group numbers follow the order
    of the uid prefixes within a step (the row readers: first appearance)."""
    if not _engine_ok() or not files:
        return None
    probe = _verl_scan(files[0].path, files[0].step)
    if probe is None or probe.mode != "uid" or not np.isin(probe.reward, (0.0, 1.0)).all():
        return None
    del probe
    import polars as pl

    label = files[0].split
    if any(f.split != label for f in files):  # one read of verl files has one label (list_files)
        return None
    uid, score, r = pl.col("uid"), pl.col("score"), pl.col("_r")
    lf = (pl.scan_ndjson([str(f.path) for f in files], schema={"score": pl.Float64, "uid": pl.String, "step": pl.Int64})
          .with_columns(_key=uid.str.replace(_UID_SUFFIX, ""))
          .with_columns(_r=uid.str.slice(pl.col("_key").str.len_chars() + 1).str.strip_suffix("_0")
                        .cast(pl.UInt32, strict=False)))
    try:
        # a null score, a null or non-integer rollout index, or one of 64 and more counts in none of
        # n1, n0 and bits: the checks below then fail
        g = (lf.group_by("step", "_key")
             .agg(n=pl.len(), n1=(score == 1).sum(), n0=(score == 0).sum(),
                  bits=pl.when(r < 64).then(pl.lit(2, pl.UInt64).pow(r)).bitwise_or().bitwise_count_ones())
             .collect(engine="streaming"))
    except Exception:  # noqa: BLE001 - any refusal of the engine: the row readers read the files (and name the line)
        return None
    if g["step"].null_count() or g["_key"].null_count():
        return None
    key = g["_key"]
    pad = key.str.starts_with("pad")
    # _NOT_TEXT of a uid '{key}_{r}_0' (a JSON array or object made text), and a NUL (in the key: a
    # NUL in '_{r}_0' leaves r null)
    ok = ((g["n0"] + g["n1"] == g["n"]) & (g["bits"].fill_null(0) == g["n"]) & ~key.str.contains(r"^[\[{]")
          & ~key.str.contains("\x00", literal=True))
    if not (ok | pad).all():
        return None
    # the groups in (step, uid prefix) order, padding and the steps not read left out: no copy of the keys
    order = g.select(pl.arg_sort_by("step", "_key")).to_series().to_numpy()
    pad = pad.to_numpy()
    step = g["step"].to_numpy()
    drop = pad.copy()
    if ctx.lo is not None:
        drop |= step < ctx.lo
    if ctx.hi is not None:
        drop |= step > ctx.hi
    order = order[~drop[order]]
    if order.size == 0:
        return None
    n_pad = int(g["n"].to_numpy()[pad].sum())
    step = step[order].astype(np.int64, copy=False)
    rollouts = g["n"].to_numpy()[order].astype(np.int64)
    successes = g["n1"].to_numpy()[order].astype(np.int64)
    del g, key, pad, ok, order, drop
    new = np.ones(step.size, bool)
    new[1:] = step[1:] != step[:-1]
    start = np.flatnonzero(new)
    group = np.arange(step.size, dtype=np.int64) - np.repeat(start, np.diff(np.append(start, step.size)))
    ctx.grouping.add("uid")
    ctx.counts["n_padding_rows_dropped"] += n_pad
    ctx.read_paths.extend(str(f.path) for f in files)
    split = pd.Categorical.from_codes(np.full(step.size, int(label == "val"), np.int8), categories=["train", "val"])
    return pd.DataFrame({"step": step, "group": group, "rollouts": rollouts, "successes": successes, "split": split})


#: files read at the same time by :func:`_read_verl_files` (the engine parallelises each read too)
_ENGINE_THREADS = 2
#: files scanned ahead of the one being added, per thread (bounds the memory of the scans in flight)
_AHEAD = 2
#: seed of the engine's 64-bit hash of group keys (:func:`_hash_text`)
_HASH_SEED = 0x5EED
#: a key whose text the engine may have made from a JSON number, boolean, array or object (the
#: line reader's ``str()``/``json.dumps`` text of it differs): such a file is read line by line
_NOT_TEXT = r"(?s)^(?:[-+0-9.eE]+|true|false|[\[{].*)$"
#: the verl uid suffix ``_{rollout}_{output}`` (the group is what precedes it)
_UID_SUFFIX = r"_[^_]*_[^_]*$"


def _engine_ok() -> bool:
    try:
        import polars  # noqa: F401
    except ImportError:  # pragma: no cover - polars is a dependency; the line reader still works
        return False
    return True


@dataclass
class _Scan:
    """What :func:`_verl_scan` read of one verl file: its rows' steps and rewards, and either
    the group keys' hashes (``codes`` into ``hashes``) or the uids (``keys``, for the uid
    forms that the line reader's rules sort out: :func:`_verl_by_uid`)."""

    mode: str  # "input", "uid", "shared-uid", "empty" or "rules"
    step: np.ndarray | None = None
    reward: np.ndarray | None = None
    codes: np.ndarray | None = None
    hashes: np.ndarray | None = None
    keys: Any = None
    n_padding: int = 0


def _verl_scan(path: Path, file_step: int | None) -> _Scan | None:
    """One verl file read by the engine (polars ``scan_ndjson`` projected on ``score``, the
    uid (or ``input``) and ``step``: the text columns are parsed, never brought out), or
    ``None`` when the line reader must read it: the engine refused a line (not JSON, not an
    object, a value of another type than the schema's: polars never turns a string or a
    boolean into a number, nor a float into an integer), a required value is missing or null,
    or a key may be a number, boolean, array or object made text (:data:`_NOT_TEXT`: the line
    reader's text of it may differ) or holds a NUL.  Runs on a worker thread and touches no
    shared state.

    One difference is left: a line whose object writes a key twice (``json.dumps`` never
    does) is read with the first value by polars, the last by the line reader."""
    try:
        import polars as pl

        first = _first_json(path, skip_bad=True)
        has_uid = first is None or "uid" in first
        key = "uid" if has_uid else "input"
        k = pl.col(key)
        # NUL: what polars may make of a lone surrogate escape ("\ud800"), which the line reader refuses
        bad = [pl.col("score").is_null(), k.is_null(), k.str.contains(_NOT_TEXT), k.str.contains("\x00", literal=True)]
        if file_step is None:
            bad.append(pl.col("step").is_null())
        cols = [pl.col("step"), pl.col("score"), pl.any_horizontal(bad).fill_null(True).alias("_bad"),
                k if has_uid else k.hash(_HASH_SEED).alias("_hash")]  # a legacy log's key is its prompt: hashed
        lf = pl.scan_ndjson(path, schema={"score": pl.Float64, key: pl.String, "step": pl.Int64})
        df = lf.select(cols).collect()
        if df["_bad"].any():
            return None
        if df.height == 0:
            return _Scan("empty")
        step_col = df["step"]
        n_null = step_col.null_count()
        if n_null == 0:
            step = step_col.to_numpy().astype(np.int64, copy=False)
        else:  # the file's name gives the step (else a null step is a "missing key": refused above)
            step = np.full(df.height, file_step, np.int64)
            if n_null < df.height:  # as the line reader fills them: through float64
                given = step_col.cast(pl.Float64).to_numpy()
                step = np.where(np.isnan(given), step, given).astype(np.int64)
        reward = df["score"].to_numpy().astype(np.float64, copy=False)
        if not has_uid:
            codes, hashes = pd.factorize(df["_hash"].to_numpy())
            return _Scan("input", step, reward, codes.astype(np.int64, copy=False), hashes)
        uid = df["uid"]
        del df
        return _verl_uid_scan(uid, step, reward)
    except Exception:  # noqa: BLE001 - any refusal of the engine: the line reader reads the file (and names the line)
        return None


def _verl_uid_scan(uid: Any, step: np.ndarray, reward: np.ndarray) -> _Scan:
    """:func:`_verl_scan` of a file with uids (a polars string Series): :func:`_verl_by_uid`'s
    rules (padding rows, a shared uid, ``{group}_{rollout}_0``), or the uids themselves for
    the other forms."""
    import polars as pl

    all_uid, all_step, all_reward = uid, step, reward
    pad = uid.str.starts_with("pad")
    n_pad = int(pad.sum())
    if n_pad:
        keep = (~pad).to_numpy()
        uid, step, reward = uid.filter(~pad), step[keep], reward[keep]
    if len(step) and (step == step[0]).all():
        shared = uid.n_unique() < len(uid)
    else:
        shared = pl.DataFrame({"s": step, "k": uid}).n_unique() < len(uid)
    if shared:  # verl's own uid, one per prompt: a group
        mode, hashed = "shared-uid", uid.hash(_HASH_SEED)
    elif uid.str.ends_with("_0").all():  # "{group}_{rollout}_0": the usual dump
        mode, hashed = "uid", uid.str.replace(_UID_SUFFIX, "").hash(_HASH_SEED)
    else:  # several outputs, or uids of other forms: the line reader's rules, on the uids
        return _Scan("rules", all_step, all_reward, keys=all_uid.to_arrow())
    codes, hashes = pd.factorize(hashed.to_numpy())
    return _Scan(mode, step, reward, codes.astype(np.int64, copy=False), hashes, n_padding=n_pad)


def _add_verl_scan(f: LogFile, ctx: _Context, scan: _Scan) -> None:
    """Add a file that :func:`_verl_scan` read, as :func:`_read_verl` would."""
    ctx.read_paths.append(str(f.path))
    if scan.mode == "empty":
        return
    if scan.mode == "input":
        _verl_by_input(f, ctx)
        ctx.add_coded(scan.step, scan.codes, scan.hashes, scan.reward, split=f.split)
        return
    if scan.mode == "rules":
        import pyarrow as pa

        keys = scan.keys.combine_chunks() if isinstance(scan.keys, pa.ChunkedArray) else scan.keys
        _verl_by_uid(f, ctx, keys.cast(pa.string()), scan.step, scan.reward)
        return
    ctx.grouping.add("uid")
    if scan.n_padding:
        ctx.counts["n_padding_rows_dropped"] += scan.n_padding
    if scan.mode == "shared-uid":
        ctx.grouping.add("shared-uid")
        ctx.note(_SHARED_UID_NOTE)
    ctx.add_coded(scan.step, scan.codes, scan.hashes, scan.reward, split=f.split)


def _read_verl(f: LogFile, ctx: _Context) -> None:
    """One verl file read line by line where the engine would not read it exactly (pyarrow with
    an explicit schema; on any problem :func:`_scan_jsonl`, which names the line)."""
    import pyarrow as pa

    first = _first_json(f.path, skip_bad=True)
    has_uid = first is None or "uid" in first
    key = "uid" if has_uid else "input"
    step_req = {} if f.step is not None else {"step": pa.int64()}
    table = _read_jsonl(f.path, ctx, required={"score": pa.float64(), key: pa.string(), **step_req},
                        optional={} if step_req else {"step": pa.int64()}, what="verl")
    ctx.read_paths.append(str(f.path))
    if table.num_rows == 0:
        return
    step_col = table.column("step")
    if step_col.null_count == 0:
        step = _np(step_col, np.int64)
    else:
        step = np.full(table.num_rows, f.step, np.int64)
        if step_col.null_count < table.num_rows:
            given = _np(step_col, np.float64)
            step = np.where(np.isnan(given), step, given).astype(np.int64)
    reward = _np(table.column("score"))
    keys = table.column(key).combine_chunks()
    del table
    if not has_uid:
        _verl_by_input(f, ctx)
        ctx.add(step, keys, reward, split=f.split)
        return
    _verl_by_uid(f, ctx, keys, step, reward)


def _verl_by_input(f: LogFile, ctx: _Context) -> None:
    ctx.grouping.add("input")
    note = ("verl log without uid (an older verl, or its legacy trainer): groups are the rollouts with "
            "identical input, so two prompts with the same text in one step form one group.")
    ctx.note(note)


_SHARED_UID_NOTE = ("verl log whose uid is shared by the rollouts of a prompt (verl's internal uid: one per prompt, "
                    "repeated rollout.n times): each uid of a step is one group and each of its rows one rollout.")


def _verl_by_uid(f: LogFile, ctx: _Context, keys: Any, step: np.ndarray, reward: np.ndarray) -> None:
    """The groups of a verl file's rows by their uids (a pyarrow string array): padding rows
    dropped, a shared uid, ``{group}_{rollout}_{output}`` uids, other uids, several outputs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ctx.grouping.add("uid")
    pad = pc.starts_with(keys, "pad").to_numpy(zero_copy_only=False)
    if pad.any():
        ctx.counts["n_padding_rows_dropped"] += int(pad.sum())
        keep = ~pad
        keys, step, reward = keys.filter(pa.array(keep)), step[keep], reward[keep]
    # verl's own uid is one uuid4 per prompt, repeated for its rollout.n rollouts: a uid that several
    # rows of one step carry is a group, and each of its rows a rollout (never "outputs" of one rollout)
    codes, _ = _factorize(keys)
    pair = step * np.int64(max(int(codes.max()) + 1, 1)) + codes if len(codes) else codes
    if len(pd.unique(pair)) < len(pair):
        ctx.grouping.add("shared-uid")
        ctx.note(_SHARED_UID_NOTE)
        ctx.add(step, keys, reward, split=f.split)
        return
    del codes, pair
    if pc.all(pc.ends_with(keys, "_0")).as_py():  # one output per rollout (the usual dump)
        ctx.add(step, pc.replace_substring_regex(keys, r"_[^_]*_[^_]*$", ""), reward, split=f.split)
        return
    numbered = pc.match_substring_regex(keys, r"_\d+_\d+$").to_numpy(zero_copy_only=False)
    if not numbered.all():
        # a uid without the two numeric suffixes of "{group}_{rollout}_{output}", on one row: a group
        # of its own (never an "earlier output" of another row)
        note = ("verl uids that are neither shared by a prompt's rollouts nor '{group}_{rollout}_{output}': "
                "each is a group of its own.")
        ctx.note(note)
        other = ~numbered
        ctx.add(step[other], keys.filter(pa.array(other)), reward[other], split=f.split)
        if not numbered.any():
            return
        keys, step, reward = keys.filter(pa.array(numbered)), step[numbered], reward[numbered]
    session = pc.replace_substring_regex(keys, r"_[^_]*$", "")  # "{group}_{rollout}"
    # multi-output agent loops: one rollout wrote several outputs; keep the last (as verl's metrics do)
    idx = pc.extract_regex(keys, r"_(?P<i>\d+)$").field("i")
    # the output index is the digits after the last "_" ("0" where a uid has none): never an error
    out_idx = pd.to_numeric(pd.Series(idx.to_numpy(zero_copy_only=False)), errors="coerce").fillna(0).to_numpy(np.int64)
    scodes, _ = _factorize(session)
    frame = pd.DataFrame({"s": scodes, "i": out_idx, "r": np.arange(len(scodes))})
    last = frame.sort_values(["s", "i"], kind="stable").groupby("s", sort=False)["r"].last().to_numpy()
    keep = np.zeros(len(scodes), bool)
    keep[last] = True
    n_drop = int((~keep).sum())
    ctx.counts["n_duplicate_rows_dropped"] += n_drop
    ctx.counts["n_earlier_outputs_dropped"] += n_drop
    msg = "verl rollouts with several outputs (multi-turn agent loops): the last output of each rollout is kept"
    if msg not in " ".join(ctx.notes):
        ctx.notes.append(msg + " (as verl's own metrics do); the others are counted as dropped duplicates.")
    session, step, reward = session.filter(pa.array(keep)), step[keep], reward[keep]
    group = pc.replace_substring_regex(session, r"_[^_]*$", "")
    ctx.add(step, group, reward, split=f.split)


# ============================================================== TRL
def _read_trl(files: list[LogFile], ctx: _Context, *, group_size: int | None,
              reward_column: str | Sequence[str] | None) -> None:
    import pyarrow as pa

    if isinstance(reward_column, str):
        chosen: list[str] | None = [reward_column]
    elif reward_column is not None:
        chosen = [str(c) for c in reward_column]
        if not chosen:
            raise ValueError("reward_column must name at least one column, got none")
    else:
        chosen = None
    loaded = []
    seen: dict[str, int] = {}
    repeats: list[tuple[int | None, int]] = []
    reward_names: list[str] | None = None
    for f in files:
        table = _read_parquet(f.path, None, required=_TRL_FIXED, what="TRL completions")
        ctx.read_paths.append(str(f.path))
        names = [c for c in table.column_names if c not in _TRL_FIXED]
        numeric = [c for c in names if pa.types.is_integer(table.schema.field(c).type)
                   or pa.types.is_floating(table.schema.field(c).type)]
        if chosen is not None:
            for c in chosen:
                if c not in table.column_names:
                    raise ValueError(f"{f.path}: row 1: missing column {c!r} (reward_column); the reward columns "
                                     f"are {', '.join(numeric) or 'none'}")
            rcols = chosen
        else:
            rcols = numeric
            if not rcols:
                raise ValueError(f"{f.path}: row 1: missing column: no reward column (a TRL completions file has "
                                 "one float column per reward function between 'completion' and 'advantage')")
        reward_names = reward_names or rcols
        _check_no_nulls(table, f.path, ["step"])
        R = np.column_stack([_np(table.column(c)) for c in rcols])
        with np.errstate(invalid="ignore"):
            reward = np.where(np.isnan(R).all(axis=1), np.nan, np.nansum(R, axis=1))
        advantage = _np(table.column("advantage"))
        step = _np(table.column("step"), np.int64)
        prompts = _text_keys(table.column("prompt"))
        completions = _text_keys(table.column("completion"))
        digest = hashlib.sha1()
        for arr in (prompts, completions):
            digest.update(pd.util.hash_array(np.asarray(arr, dtype=object)).tobytes())
        digest.update(np.nan_to_num(R, nan=np.inf).tobytes())
        digest.update(advantage.tobytes())
        h = digest.hexdigest()
        del table, completions
        if h in seen:
            ctx.counts["n_duplicate_rows_dropped"] += len(step)
            ctx.counts["n_repeated_batch_rows_dropped"] += len(step)
            repeats.append((int(step[0]) if len(step) else f.step, seen[h]))
            continue
        seen[h] = int(step[0]) if len(step) else -1
        pcodes, _ = pd.factorize(np.asarray(prompts, dtype=object))
        loaded.append((f, step, pcodes, reward, advantage))
    if repeats:
        shown = ", ".join(f"{a} (= {b})" for a, b in repeats[:8]) + (" ..." if len(repeats) > 8 else "")
        ctx.notes.append(f"TRL log: {len(repeats)} files repeat the generation batch of an earlier step "
                         f"(num_iterations > 1, or several steps per generation) and were dropped: steps {shown}.")
    ctx.notes.append(
        "TRL log: the reward is the unweighted sum of the reward columns "
        + ", ".join(repr(c) for c in (reward_names or [])) + " (NaN where every function returned None); "
        "the run's reward_weights are not in the log" + ("" if chosen else ", pass reward_column to pick one")
        + "; rollout lengths are not logged.")
    if group_size is None:
        runs = [_runs(p) for _, _, p, _, _ in loaded]
        allruns = np.concatenate(runs) if runs else np.array([], np.int64)
        G = int(np.gcd.reduce(allruns)) if len(allruns) else 1
        if G < 2:
            raise ValueError("group_size: cannot infer the group size of the TRL log (a prompt appears in a run of "
                             "1 row); pass group_size=num_generations (--group-size)")
        ctx.notes.append(f"TRL log: group size {G} inferred from the repeats of the prompts (num_generations "
                         "consecutive rows with the same prompt); pass group_size if that is wrong.")
    else:
        G = group_size
    ctx.grouping.add("prompt-blocks")
    for fi, (f, step, pcodes, reward, advantage) in enumerate(loaded):
        n = len(step)
        if n % G:
            raise ValueError(f"{f.path}: {n} rows is not a multiple of the group size {G}; pass "
                             "group_size=num_generations (--group-size)")
        blocks = pcodes.reshape(-1, G)
        bad = np.flatnonzero((blocks != blocks[:, :1]).any(axis=1))
        if len(bad):
            row = int(bad[0]) * G + int(np.flatnonzero(blocks[bad[0]] != blocks[bad[0], 0])[0])
            raise ValueError(f"{f.path}: row {row + 1}: the prompt changes inside a group of {G} consecutive rows "
                             "(a TRL group is num_generations rows with the same prompt); pass the run's "
                             "num_generations as group_size")
        # a group is a block of one file: (file number, block number) as one integer key
        key = (np.int64(fi) << np.int64(32)) + np.arange(n, dtype=np.int64) // G
        ctx.add(step, key, reward, advantage=advantage, split=f.split)


def _text_keys(col: Any) -> list:
    """A text column (strings, or conversations: lists of messages) as hashable strings."""
    import pyarrow as pa

    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col.to_pylist()
    return [json.dumps(v, sort_keys=True, default=str) for v in col.to_pylist()]


def _runs(codes: np.ndarray) -> np.ndarray:
    """Lengths of the runs of equal consecutive values."""
    if len(codes) == 0:
        return np.array([], np.int64)
    change = np.flatnonzero(np.diff(codes) != 0) + 1
    return np.diff(np.concatenate(([0], change, [len(codes)])))


# ============================================================== our trainer (rlvr)
_RLVR_COLUMNS = ("step", "group", "rollout", "reward", "advantage", "length")


def _read_rlvr(f: LogFile, ctx: _Context) -> None:
    table = _read_parquet(f.path, _RLVR_COLUMNS, required=_RLVR_COLUMNS, what="rlvr rollout-log")
    ctx.read_paths.append(str(f.path))
    _check_no_nulls(table, f.path, ("step", "group", "rollout"))
    ctx.grouping.add("group-column")
    ctx.add(_np(table.column("step"), np.int64), _np(table.column("group"), np.int64), _np(table.column("reward")),
            advantage=_np(table.column("advantage")), length=_np(table.column("length")), split=f.split)


# ============================================================== table
def _read_table(f: LogFile, ctx: _Context) -> None:
    import pyarrow as pa

    suffix = f.path.suffix.lower()
    required = ("step", "group", "reward")
    optional = ("advantage", "length", "split")
    header = 0
    unit = "row"
    if suffix == ".parquet":
        table = _read_parquet(f.path, required + optional, required=required, what="table")
    elif suffix == ".csv":
        import pyarrow.csv as pcsv

        cols = _columns_of(f.path)
        missing = [c for c in required if c not in cols]
        if missing:
            raise ValueError(f"{f.path}: line 1 (header): missing column {missing[0]!r} (a table has columns "
                             "step, group, reward [, advantage, length, split])")
        types = {"step": pa.int64(), "reward": pa.float64(), "advantage": pa.float64(), "length": pa.float64(),
                 "split": pa.string()}
        try:
            table = pcsv.read_csv(f.path, convert_options=pcsv.ConvertOptions(
                include_columns=[c for c in required + optional if c in cols],
                column_types={k: v for k, v in types.items() if k in cols}))
        except pa.ArrowInvalid as err:
            raise ValueError(f"{f.path}: not a table of numbers where expected ({err})") from None
        header, unit = 1, "line"
    elif suffix in (".jsonl", ".json"):
        first = _first_json(f.path) or {}
        gtype = pa.string() if isinstance(first.get("group"), str) else pa.int64()
        table = _read_jsonl(f.path, ctx, required={"step": pa.int64(), "group": gtype},
                            optional={"reward": pa.float64(), "advantage": pa.float64(), "length": pa.float64(),
                                      "split": pa.string()}, what="table")
        if table.num_rows and "reward" not in first:
            raise ValueError(f"{f.path}:1: missing key 'reward' (a table line has 'step', 'group', 'reward')")
    else:
        raise ValueError(f"{f.path}: a table is a .csv, .jsonl or .parquet file")
    ctx.read_paths.append(str(f.path))
    if table.num_rows == 0:
        return
    _check_no_nulls(table, f.path, ("step", "group"), header_rows=header, unit=unit)
    names = table.column_names
    split: Any = f.split
    if "split" in names:
        s = np.asarray(table.column("split").to_pylist(), dtype=object)
        s = np.where(np.isin(s, ("val", "eval", "validation", "test")), "val", "train")
        keep = np.ones(len(s), bool) if ctx.split == "all" else s == ctx.split
        table = table.filter(pa.array(keep))
        split = s[keep]
        if table.num_rows == 0:
            return
    group = table.column("group").combine_chunks()
    if not (pa.types.is_integer(group.type) or pa.types.is_string(group.type)):
        group = group.cast(pa.string())
    ctx.grouping.add("group-column")
    ctx.add(_np(table.column("step"), np.int64), group, _np(table.column("reward")),
            advantage=_np(table.column("advantage")) if "advantage" in names else None,
            length=_np(table.column("length")) if "length" in names else None, split=split)


# ============================================================== prime-rl
def _read_prime(f: LogFile, ctx: _Context) -> None:
    steps, keys, rewards = [], [], []
    no_reward = no_trace = 0
    for lineno, ep in _json_objects(f.path, ctx, "a prime-rl episode"):
        group = ep.get("group")
        gid = group.get("id") if isinstance(group, dict) else None
        if gid is None:
            raise ValueError(f"{f.path}:{lineno}: missing key 'group.id' (a prime-rl episode has its rollout "
                             "group's id)")
        if "traces" not in ep:
            raise ValueError(f"{f.path}:{lineno}: missing key 'traces' (a prime-rl episode lists its traces)")
        step = f.step
        if step is None:
            run = ep.get("run") if isinstance(ep.get("run"), dict) else {}
            work = run.get("work") if isinstance(run.get("work"), dict) else {}
            step = work.get("step")
            if step is None:
                raise ValueError(f"{f.path}:{lineno}: no step: neither a step_N folder nor 'run.work.step'")
        traces = ep["traces"] or []
        if not traces:
            no_trace += 1
        for tr in traces:
            rw = (tr or {}).get("rewards") or {}
            vals = [float(r["score"]) * float(r.get("weight", 1.0)) for r in rw.values() if r is not None]
            if not vals:
                no_reward += 1
            steps.append(int(step))
            keys.append(str(gid))
            rewards.append(math.fsum(vals))
    ctx.read_paths.append(str(f.path))
    ctx.grouping.add("group-column")
    if no_trace:
        ctx.notes.append(f"{f.path}: {no_trace} prime-rl episodes without a trace (failed before any output) "
                         "are not rollouts: skipped.")
    if no_reward:
        ctx.notes.append(f"{f.path}: {no_reward} prime-rl traces have no reward recorded (scoring did not run): "
                         "reward 0, as prime-rl counts them.")
    if steps:
        ctx.add(np.array(steps, np.int64), np.array(keys, dtype=object), np.array(rewards), split=f.split)


# ============================================================== open-instruct
_OI_STEP_NOTE = ("open-instruct log: step is the file's own 'step', the data-preparation counter, which starts at 0; "
                 "the trainer's (and wandb's) training_step is step + 1.")
_OI_FILTER_NOTE = ("open-instruct log without any group whose rewards are all equal: open-instruct drops such groups "
                   "before saving them (filter_zero_std_samples, on by default), so the zero-signal counts undercount "
                   "(they miss every group the trainer dropped).")
_OI_ADV_NOTE = ("open-instruct log: the advantage is the logged one, 'standard' (r - mean)/(std + 1e-8) with the "
                "population std, or 'centered' r - mean (the default since 2026-03-20); the log does not say which.")


def _read_open_instruct_files(files: list[LogFile], ctx: _Context, *, group_size: int | None) -> None:
    """open-instruct ``--save_traces``: the per-rollout shards (a group is ``(run name, step,
    prompt_idx)``; step = the file's 0-based ``step``), or the legacy per-step traces (a group
    is ``group_size`` consecutive rollouts of a line; step = its 1-based ``training_step``)."""
    runs: dict[str, int] = {}
    all_equal = False
    legacy = current = False
    for f in files:
        m = _OI_FILE.match(f.path.name) or _OI_LEGACY_FILE.match(f.path.name)
        run = m.group(1) if m else f.path.stem
        run_no = runs.setdefault(run, len(runs))
        first = _first_json(f.path, skip_bad=True) or {}
        if _OI_LEGACY_KEYS <= set(first) and "prompt_idx" not in first:
            legacy = True
            all_equal |= _read_open_instruct_legacy(f, ctx, run_no, group_size)
        else:
            current = True
            all_equal |= _read_open_instruct(f, ctx, run_no)
    ctx.grouping.add("group-column" if current else "prompt-blocks")
    if current:
        ctx.note(_OI_STEP_NOTE)
        ctx.note(_OI_ADV_NOTE)
    if legacy:
        ctx.note("open-instruct legacy traces (traces_{run}.jsonl, one line per step): step is the line's 1-based "
                 "training_step, a group is group_size consecutive rollouts of a line, and no advantages are logged.")
    if len(runs) > 1:
        ctx.note(f"open-instruct log of {len(runs)} launches (run names {', '.join(sorted(runs)[:4])}"
                 f"{', ...' if len(runs) > 4 else ''}): a step saved by two launches (a resume) has the groups of both.")
    if not all_equal:
        ctx.note(_OI_FILTER_NOTE)


def _oi_scan(path: Path) -> Any:
    """An open-instruct shard read by the engine (polars, projected on the five columns read; the
    token lists are counted, never brought out), or ``None`` when the line reader must read it
    (a line that is not JSON: a logprob ``NaN`` that Python's json writes, a value of another
    type, a missing ``step``, ``prompt_idx`` or ``reward``)."""
    if not _engine_ok():
        return None
    try:
        import polars as pl

        lf = pl.scan_ndjson(path, schema={"step": pl.Int64, "prompt_idx": pl.Int64, "reward": pl.Float64,
                                          "advantage": pl.Float64, "response_tokens": pl.List(pl.Int64)})
        df = lf.select(pl.col("step"), pl.col("prompt_idx"), pl.col("reward"), pl.col("advantage"),
                       pl.col("response_tokens").list.len().cast(pl.Float64).alias("length")).collect()
        if any(df[c].null_count() for c in ("step", "prompt_idx", "reward")):
            return None
        return (df["step"].to_numpy().astype(np.int64), df["prompt_idx"].to_numpy().astype(np.int64),
                df["reward"].to_numpy().astype(np.float64), df["advantage"].to_numpy().astype(np.float64),
                df["length"].to_numpy().astype(np.float64))
    except Exception:  # noqa: BLE001 - any refusal of the engine: the line reader reads (and names the line)
        return None


def _json_number(obj: dict, key: str, path: Path, lineno: int, *, integer: bool = False,
                 required: bool = True) -> float:
    v = obj.get(key)
    if v is None:
        if integer or (required and key not in obj):
            raise ValueError(f"{path}:{lineno}: missing key {key!r}")
        return np.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
        raise ValueError(f"{path}:{lineno}: key {key!r} must be {'an integer' if integer else 'a number'}, got {v!r}")
    return v


def _read_open_instruct(f: LogFile, ctx: _Context, run_no: int) -> bool:
    """One ``{run}_rollouts_{shard}.jsonl``; returns whether it has a group whose rewards are all equal."""
    scan = _oi_scan(f.path)
    if scan is None:
        cols: list[list] = [[], [], [], [], []]
        what = "an open-instruct rollout line (step, prompt_idx, reward, advantage, response_tokens, ...)"
        for lineno, obj in _json_objects(f.path, ctx, what):
            toks = obj.get("response_tokens")
            for c, v in zip(cols, (_json_number(obj, "step", f.path, lineno, integer=True),
                                   _json_number(obj, "prompt_idx", f.path, lineno, integer=True),
                                   _json_number(obj, "reward", f.path, lineno),
                                   _json_number(obj, "advantage", f.path, lineno, required=False),
                                   float(len(toks)) if isinstance(toks, list) else np.nan)):
                c.append(v)
        scan = (np.array(cols[0], np.int64), np.array(cols[1], np.int64), np.array(cols[2], np.float64),
                np.array(cols[3], np.float64), np.array(cols[4], np.float64))
    ctx.read_paths.append(str(f.path))
    step, prompt, reward, advantage, length = scan
    if not len(step):
        return False
    key = (np.int64(run_no) << np.int64(32)) + prompt
    ctx.add(step, key, reward, advantage=advantage, length=length, split=f.split)
    return _has_equal_group(step, key, reward)


def _has_equal_group(step: np.ndarray, key: np.ndarray, reward: np.ndarray) -> bool:
    g = pd.DataFrame({"s": step, "k": key, "r": reward}).groupby(["s", "k"])["r"]
    return bool((g.min() == g.max()).any())


def _read_open_instruct_legacy(f: LogFile, ctx: _Context, run_no: int, group_size: int | None) -> bool:
    """One legacy ``traces_{run}.jsonl``: a line per step with parallel lists (``scores``,
    ``responses``, ``training_step``); no group id, so ``group_size`` is required."""
    if group_size is None:
        raise ValueError(f"{f.path}: an open-instruct legacy traces file (one line per step, parallel lists) has no "
                         "group id: pass group_size=num_samples_per_prompt_rollout (--group-size) to group its "
                         "rollouts in consecutive blocks")
    steps, keys, rewards, lengths = [], [], [], []
    for lineno, obj in _json_objects(f.path, ctx, "an open-instruct traces line"):
        step = int(_json_number(obj, "training_step", f.path, lineno, integer=True))
        scores = obj.get("scores")
        if not isinstance(scores, list):
            raise ValueError(f"{f.path}:{lineno}: missing key 'scores' (a list of rewards)")
        if any(isinstance(s, bool) or not isinstance(s, (int, float)) for s in scores if s is not None):
            raise ValueError(f"{f.path}:{lineno}: key 'scores' must be a list of numbers")
        if len(scores) % group_size:
            raise ValueError(f"{f.path}:{lineno}: {len(scores)} scores is not a multiple of the group size "
                             f"{group_size}; pass group_size=num_samples_per_prompt_rollout (--group-size)")
        resp = obj.get("responses")
        n = len(scores)
        steps.append(np.full(n, step, np.int64))
        keys.append((np.int64(run_no) << np.int64(32)) + np.arange(n, dtype=np.int64) // group_size)
        rewards.append(np.array([np.nan if s is None else s for s in scores], np.float64))
        lengths.append(np.array([len(r) if isinstance(r, list) else np.nan for r in resp], np.float64)
                       if isinstance(resp, list) and len(resp) == n else np.full(n, np.nan))
    ctx.read_paths.append(str(f.path))
    if not steps:
        return False
    step, key, reward = np.concatenate(steps), np.concatenate(keys), np.concatenate(rewards)
    ctx.add(step, key, reward, length=np.concatenate(lengths), split=f.split)
    return _has_equal_group(step, key, reward)


# ============================================================== slime
#: the keys of a slime dict reward tried in order when ``reward_column`` is not given
SLIME_REWARD_KEYS = ("score", "reward")
_SLIME_ADV_NOTE = ("slime rollout dumps hold no advantages (they are saved before slime normalises the rewards; "
                   "its default grpo advantage is (r - mean)/(std + 1e-6) with the unbiased std): pass --advantage "
                   "for the family whose masses to report.")


def _slime_load(path: Path) -> Any:
    """``torch.load(path, weights_only=True, map_location="cpu")``: a file that needs more (custom
    classes, numpy values, images) is refused, never unpickled with ``weights_only=False``."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise ValueError(f"{path}: reading a slime dump needs torch") from None
    import pickle

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - every failure is refused, naming the file
        unsafe: list[str] = []
        find = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
        if find is not None:
            try:
                unsafe = [str(u) for u in find(path)]
            except Exception:  # noqa: BLE001 - the list is only for the message
                unsafe = []
        text = str(err)
        named = re.findall(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if unsafe or (isinstance(err, pickle.UnpicklingError) and named):
            what = ", ".join(unsafe or named)
            raise ValueError(
                f"{path}: refused: torch.load(weights_only=True) does not read it, it holds objects other than "
                f"plain containers, numbers, strings and tensors ({what}); a file is never unpickled with "
                "weights_only=False here (a file must not run code). Re-dump it with plain values: where slime is "
                "importable and the file is trusted, d = torch.load(PATH, weights_only=False), replace each "
                "sample's objects by dicts, lists or numbers (spec_info: dataclasses.asdict; numpy values: "
                ".tolist(); images: drop multimodal_inputs), then torch.save(d, PATH)") from None
        first = next((ln for ln in text.strip().splitlines() if ln.strip()), "")[:200]
        raise ValueError(f"{path}: not a readable torch file ({type(err).__name__}: {first})") from None


def _scalar(v: Any) -> float | None:
    """A number (or a one-element tensor) as a float; ``None`` for anything else."""
    if isinstance(v, (int, float)):
        return float(v)
    if hasattr(v, "numel") and hasattr(v, "item"):
        try:
            if v.numel() == 1:
                return float(v.item())
        except Exception:  # noqa: BLE001 - not a number
            return None
    return None


def _slime_reward(v: Any, path: Path, i: int, key: str | None, used: set[str]) -> float:
    if v is None:
        return np.nan
    if isinstance(v, dict):
        keys = [key] if key is not None else [k for k in SLIME_REWARD_KEYS if k in v]
        if not keys or keys[0] not in v:
            shown = ", ".join(repr(k) for k in v) or "none"
            ask = f"no key {key!r}" if key is not None else "none of " + ", ".join(map(repr, SLIME_REWARD_KEYS))
            raise ValueError(f"{path}: sample {i}: the reward is a dict with {ask} (its keys: {shown}); pass "
                             "reward_column=KEY (--reward-column, slime's --reward-key) to pick the reward")
        used.add(keys[0])
        v = v[keys[0]]
    r = _scalar(v)
    if r is None:
        raise ValueError(f"{path}: sample {i}: the reward must be a number or a dict of numbers, got "
                         f"{type(v).__name__} {v!r:.80}")
    return r


def _read_slime_files(files: list[LogFile], ctx: _Context, *, group_size: int | None, reward_key: str | None) -> None:
    """slime ``--save-debug-rollout-data``: ``{"rollout_id": int, "samples": [Sample.to_dict(), ...]}``
    per file; step = ``rollout_id``, group = ``group_index`` (else ``index // group_size``),
    reward = ``reward`` (a dict: at ``reward_key``), length = ``response_length``; samples with
    ``remove_sample`` are dropped and counted."""
    removed = 0
    status: dict[str, int] = {}
    used: set[str] = set()
    by_index = False
    for f in files:
        blob = _slime_load(f.path)
        if not isinstance(blob, dict) or not isinstance(blob.get("samples"), list):
            if isinstance(blob, dict) and "rewards" in blob and "response_lengths" in blob:
                raise ValueError(f"{f.path}: a slime dump of before 2025-07-23 (column lists 'tokens', 'rewards', "
                                 "'response_lengths', no 'samples' and no group ids): not read; pass its rows as a "
                                 "table (step, group, reward)")
            keys = ", ".join(map(repr, blob)) if isinstance(blob, dict) else type(blob).__name__
            raise ValueError(f"{f.path}: not a slime rollout dump (a dict with 'rollout_id' and 'samples', the list "
                             f"of Sample.to_dict()); got {keys}")
        rid = blob.get("rollout_id")
        if isinstance(rid, bool) or not isinstance(rid, int):
            if f.step is None:
                raise ValueError(f"{f.path}: no step: 'rollout_id' is {rid!r} and the file name has no number")
            rid = f.step
        samples = blob["samples"]
        del blob
        n = len(samples)
        reward = np.empty(n, np.float64)
        length = np.full(n, np.nan)
        gidx = np.zeros(n, np.int64)
        sidx = np.zeros(n, np.int64)
        keep = np.ones(n, bool)
        has_group = True
        no_index: int | None = None
        for i, s in enumerate(samples):
            if not isinstance(s, dict):
                raise ValueError(f"{f.path}: sample {i}: a slime sample must be a dict (Sample.to_dict()), got "
                                 f"{type(s).__name__}")
            if s.get("remove_sample") is True:
                keep[i] = False
                removed += 1
            st = s.get("status")
            if st in ("aborted", "failed", "pending"):
                status[st] = status.get(st, 0) + 1
            reward[i] = _slime_reward(s.get("reward"), f.path, i, reward_key, used)
            ln = _scalar(s.get("response_length"))
            if ln is not None:
                length[i] = ln
            g = s.get("group_index")
            if isinstance(g, int) and not isinstance(g, bool):
                gidx[i] = g
            else:
                has_group = False
            ix = s.get("index")
            if isinstance(ix, int) and not isinstance(ix, bool):
                sidx[i] = ix
            elif no_index is None:
                no_index = i
        del samples
        ctx.read_paths.append(str(f.path))
        if not has_group:
            if group_size is None:
                raise ValueError(f"{f.path}: samples without 'group_index' (slime before 2025-10-13, or a custom "
                                 "rollout): pass group_size=n_samples_per_prompt (--group-size) to group them by "
                                 "index // group_size")
            if no_index is not None:
                raise ValueError(f"{f.path}: sample {no_index}: neither 'group_index' nor 'index' (a slime sample "
                                 "has them): cannot tell its group")
            gidx = sidx // group_size
            by_index = True
        if not keep.all():
            reward, length, gidx = reward[keep], length[keep], gidx[keep]
        ctx.add(np.full(len(reward), rid, np.int64), gidx, reward, length=length, split=f.split)
    if removed:
        ctx.counts["n_removed_samples_dropped"] = ctx.counts.get("n_removed_samples_dropped", 0) + removed
        ctx.note(f"slime dumps: {removed:,} samples marked remove_sample (by a --rollout-sample-filter-path function: "
                 "trained with a zero loss mask, though they entered slime's reward normalisation) were dropped and "
                 "counted (n_removed_samples_dropped).")
    if status:
        ctx.note("slime dumps: samples kept with status " + ", ".join(f"{k} ({v:,})" for k, v in sorted(status.items()))
                 + ": their reward is whatever the rollout gave them.")
    if used:
        ctx.note("slime dict rewards: the reward is the value at " + ", ".join(repr(k) for k in sorted(used))
                 + ("" if reward_key is not None else " (pass reward_column, slime's --reward-key, for another key)")
                 + ".")
    ctx.grouping.add("prompt-blocks" if by_index else "group-column")
    if by_index:
        ctx.note(f"slime dumps without group_index: a group is the samples with one index // {group_size}.")
    ctx.note(_SLIME_ADV_NOTE)
