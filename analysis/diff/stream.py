"""Streaming the tensor pairs of two checkpoints: read, round, difference, one tensor at a time.

- :class:`_Ops`: the array backend (numpy on the CPU, torch on CUDA): reading a tensor as float,
  the rounding floor, in-place difference, float64 norms and density counts in chunks, Gram
  matrices of several ``ΔW``.
- :func:`dense_pass`: the pass over every tensor of full checkpoints: the base is read once per
  tensor, each checkpoint's ``ΔW`` measured (:func:`analysis.diff.measure._measure`) and, with
  several checkpoints, their pairwise dot products taken (:func:`_blocked_gram` when the ``ΔW``
  do not fit in memory together); with ``DiffRun.dynamics``, each tensor's update masks or its
  series pass (:mod:`analysis.diff.dynamics`).
- :func:`series` and :func:`_step_of`: the checkpoints of a training run in step order.

Pairing the tensors of two checkpoints and reading them lives in :mod:`analysis.checkpoints`
(shared with :mod:`analysis.hidden_states` and ``simulations.grpo``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checkpoints import DTYPE_NAMES, Checkpoint, resolve_checkpoint_dir
from . import geometry_pass
from .measure import _measure, _shifts
from .run import DiffRun, _Tally
from .settings import TOLERANCES

__all__ = ["series", "dense_pass"]

_CAST_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_ST_TORCH = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
             "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
_MANTISSA = {"F64": 52, "F32": 23, "F16": 10, "BF16": 7, "F8_E4M3": 3, "F8_E5M2": 2}
_CHUNK = 1 << 17            # float64 accumulation chunk on the CPU (entries): 1.6 MiB of temporaries
_CHUNK_CUDA = 1 << 24       # on CUDA: fewer kernel launches (128 MiB of float64 temporaries)
_SS_SAFE = (1e-200, 1e200)  # float64 sums of squares that lost nothing to underflow or overflow
_TORCH_ON_CPU = False       # tests only: run the torch (CUDA) code path on CPU tensors


# ----------------------------------------------------------- array backend
class _Ops:
    """numpy on the CPU (one BLAS with analysis.spectra, see its docs), torch on CUDA."""

    def __init__(self, device: torch.device, cast: str | None = None):
        self.dev = device
        self.torch = device.type != "cpu" or _TORCH_ON_CPU
        self.cast = None if cast is None else _CAST_TORCH[cast]
        # |x| > tol for float32 x  <=>  |x| > t32, t32 the largest float32 <= tol (exact)
        self.t32 = []
        for t in TOLERANCES:
            f = np.float32(t)
            if float(f) > t:
                f = np.nextafter(f, np.float32(-np.inf))
            self.t32.append(float(f))

    def load(self, ck: Checkpoint, name: str, start: int = 0, stop: int | None = None) -> Any:
        x = ck.read_float(name, start, stop, device=self.dev, use_torch=self.torch)
        if self.cast is None:
            return x
        if self.torch:
            return x.to(self.cast).to(torch.float32)
        if self.cast == torch.float32:
            return x.astype(np.float32, copy=False)
        return torch.from_numpy(np.ascontiguousarray(x)).to(self.cast).to(torch.float32).numpy()

    def floor(self, x: Any, st_dtype: str) -> float:
        """``‖cast(x → st_dtype) − x‖_F`` (float64 sums, in chunks): the ΔW that rounding ``x``
        to the other checkpoint's dtype produces by itself."""
        tdt = _ST_TORCH[st_dtype]
        flat = x.reshape(-1)
        ss = 0.0
        n = int(flat.numel() if self.torch else flat.size)
        for i in range(0, n, _CHUNK):
            part = flat[i:i + _CHUNK]
            if self.torch:
                p64 = part.to(torch.float64)
                d = part.to(tdt).to(torch.float64) - p64
                ss += float(torch.dot(d, d))
            else:
                t = torch.from_numpy(np.ascontiguousarray(part))
                d = t.to(tdt).to(torch.float64).numpy() - part.astype(np.float64)
                ss += float(np.dot(d, d))
        return math.sqrt(ss)

    def sub_(self, d: Any, b: Any) -> Any:
        if self.torch:
            d = d.to(torch.float64) if b.dtype == torch.float64 and d.dtype != torch.float64 else d
            return d.sub_(b.to(d.dtype))
        if b.dtype == np.float64 and d.dtype != np.float64:
            d = d.astype(np.float64)
        with np.errstate(over="ignore"):  # an overflowing ΔW is refused by name in _measure
            np.subtract(d, b, out=d, casting="unsafe")
        return d

    def stats(self, x: Any, counts: bool = True) -> tuple[float, list[int]]:
        """``(‖x‖₂, [#{|x| > tol} for tol in TOLERANCES])`` from float64 sums of squares.

        A sum of squares outside ``[1e-200, 1e200]`` (entries below ~1e-154 or above ~1e154,
        possible in float64 checkpoints) is summed again on ``x·2**-e`` (``2**e`` above the
        largest ``|x|``, exact), so that the norm of a tiny ``ΔW`` is not 0 and that of a huge
        one not inf; ``inf`` only when the norm itself exceeds the float64 range."""
        ss, cnt = self._sumsq(x, counts)
        if _SS_SAFE[0] <= ss <= _SS_SAFE[1] or (ss == 0.0 and counts and cnt[0] == 0):
            return math.sqrt(ss), cnt
        return self._scaled_norm(x), cnt

    def _scaled_norm(self, x: Any) -> float:
        flat = x.reshape(-1)
        n = int(flat.numel() if self.torch else flat.size)
        step = _CHUNK_CUDA if self.torch else _CHUNK   # the torch path: CUDA's chunks (also on CPU tensors)
        parts = [flat[i:i + step] for i in range(0, n, step)]
        if self.torch:
            amax = max((float(p.abs().max()) for p in parts), default=0.0)
        else:
            amax = max((float(np.max(np.abs(p))) for p in parts), default=0.0)
        if amax == 0.0 or not math.isfinite(amax):
            return amax
        e = math.frexp(amax)[1]
        ss = 0.0
        for p in parts:
            if self.torch:
                q = p.to(torch.float64) * math.ldexp(1.0, -(e // 2)) * math.ldexp(1.0, e // 2 - e)
                ss += float(torch.dot(q, q))
            else:
                q = np.ldexp(p.astype(np.float64), -e)
                ss += float(np.dot(q, q))
        try:
            return math.ldexp(math.sqrt(ss), e)
        except OverflowError:
            return math.inf

    def _sumsq(self, x: Any, counts: bool) -> tuple[float, list[int]]:
        """``(Σ x², counts)`` with plain float64 sums (may under/overflow: see :meth:`stats`)."""
        ths = self.t32 if x.dtype in (np.float32, torch.float32) else list(TOLERANCES)
        flat = x.reshape(-1)
        if self.torch:
            s = torch.zeros((), dtype=torch.float64, device=flat.device)
            c = torch.zeros(len(ths), dtype=torch.int64, device=flat.device)
            step = _CHUNK_CUDA
            for i in range(0, flat.numel(), step):
                part = flat[i:i + step]
                p64 = part.to(torch.float64)
                s += torch.dot(p64, p64)
                if counts:
                    a = part.abs()
                    c += torch.stack([(a > t).sum() for t in ths])
            return float(s), [int(v) for v in c.tolist()]
        s = 0.0
        cnt = [0] * len(ths)
        for i in range(0, flat.size, _CHUNK):
            part = flat[i:i + _CHUNK]
            p64 = part.astype(np.float64)
            with np.errstate(over="ignore", under="ignore"):  # out of range: summed again, scaled
                s += float(np.dot(p64, p64))
            if counts:
                a = np.abs(part)
                for j, t in enumerate(ths):
                    cnt[j] += int(np.count_nonzero(a > t))
        return s, cnt

    def gram(self, rows: list[Any], shifts: Sequence[int] | None = None) -> np.ndarray:
        """``S M Mᵀ S`` (float64) for ``M`` = the flattened arrays of ``rows`` stacked and
        ``S = diag(2**-shifts)`` (exact; with ``shifts`` from each row's norm no product
        under- or overflows, see :func:`_aligned_sum`)."""
        n = len(rows)
        flats = [r.reshape(-1) for r in rows]
        size = int(flats[0].numel() if self.torch else flats[0].size)
        step = max(1, _CHUNK // n)
        sh = [0] * n if shifts is None else [int(x) for x in shifts]
        if self.torch:
            G = torch.zeros(n, n, dtype=torch.float64, device=flats[0].device)
            for i in range(0, size, step):
                M = torch.stack([f[i:i + step].to(torch.float64) * math.ldexp(1.0, -(e // 2))
                                 * math.ldexp(1.0, e // 2 - e) for f, e in zip(flats, sh)])
                G += M @ M.T
            return G.cpu().numpy()
        G = np.zeros((n, n))
        with np.errstate(under="ignore"):
            for i in range(0, size, step):
                M = np.stack([np.ldexp(f[i:i + step].astype(np.float64), -e) for f, e in zip(flats, sh)])
                G += M @ M.T
        return G

    def nbytes(self, shape: Sequence[int]) -> int:
        return 4 * int(math.prod(shape))


# --------------------------------------------------------- the tensor pass
def dense_pass(run: DiffRun, tallies: list[_Tally], b: Checkpoint, names: list[str],
               cross: dict[str, Any] | None) -> None:
    """Measure every tensor ``names`` of the full checkpoints of ``tallies`` against the base ``b``,
    one tensor at a time; with ``cross``, the pairwise dot products of their ``ΔW`` per tensor
    (scaled as :meth:`_Ops.gram` with :func:`analysis.diff.measure._shifts`)."""
    ops = run.ops
    n = len(tallies)
    budget = max(ops.nbytes(tallies[0].pairs[nm].compared_shape) for nm in names)
    # tensors above this size wait for the background spectra to finish first (memory: the
    # 2·workers jobs in flight and the two tensors being read stay within one largest-tensor budget)
    small = budget // (2 * run.background.workers + 2)
    for name in names:
        size = n * ops.nbytes(tallies[0].pairs[name].compared_shape)
        if size > small:
            run.background.drain()
        with run.phase("read"):
            B = ops.load(b, name, 0, max(t.pairs[name].rows for t in tallies))
        keep: list[Any] | None = [] if n >= 2 and size <= budget else None
        _tensor(run, tallies, b, name, B, keep)
        if run.dynamics is not None:
            with run.phase("cross"):
                run.dynamics.tensor_done(tallies, name, b.kind(name))
        if cross is not None:
            with run.phase("cross"):
                if keep is not None and len({t.pairs[name].rows for t in tallies}) == 1:
                    cross[name] = (ops.gram(keep, _shifts(tallies)), _shifts(tallies))
                else:
                    cross[name] = (_blocked_gram(tallies, name, B, ops), _shifts(tallies))
        del keep, B
    run.background.drain()


def _tensor(run: DiffRun, tallies: list[_Tally], b: Checkpoint, name: str, B: Any, keep: list[Any] | None) -> None:
    """Measure tensor ``name`` of every checkpoint against the base's ``B`` (its ``ΔW`` appended to
    ``keep`` when given)."""
    ops = run.ops
    base_l2: dict[int, float] = {}
    base_floor: dict[tuple[int, str], float] = {}
    bdt = b.info(name).dtype
    common = min(r.pairs[name].rows for r in tallies)
    for i, r in enumerate(tallies):
        p = r.pairs[name]
        if p.rows not in base_l2:
            with run.phase("norms_densities"):
                base_l2[p.rows] = ops.stats(B[:p.rows], counts=False)[0]
        with run.phase("read"):
            X = ops.load(r.ck, name, 0, p.rows)
        odt = r.ck.info(name).dtype
        floor = None
        if odt != bdt:
            r.dtype_differs = True
            if run.cast is None:
                with run.phase("rounding_floor"):
                    floor = _rounding_floor(ops, B[:p.rows], X, (p.rows, odt), bdt, base_floor)
                r.floor = math.hypot(r.floor, floor)
                r.floor_tensors += 1
        if geometry_pass.applies(run, p, b.config):   # W_base and W_rl both in memory: before the difference
            with run.phase("geometry"):
                geometry_pass.measure(run, r, p, B[:p.rows], X, geometry_pass.ulp_dtype(bdt, run.cast))
        with run.phase("difference"):
            D = ops.sub_(X, B[:p.rows])
        del X
        if run.dynamics is not None and run.dynamics.wants_masks():
            with run.phase("cross"):
                run.dynamics.mask(i, D, common)
        _measure(run, r, p, D, base_l2[p.rows])
        if odt != bdt:
            r.records[-1]["dtypes"] = [DTYPE_NAMES.get(bdt, bdt), DTYPE_NAMES.get(odt, odt)]
            r.records[-1]["rounding_floor_l2"] = floor
        if keep is not None:
            keep.append(D)
        del D
        run.tick()


def _rounding_floor(ops: _Ops, B: Any, X: Any, key: tuple[int, str], bdt: str,
                    cache: dict[tuple[int, str], float]) -> float:
    """The side stored at the finer precision rounded to the other's dtype: ``‖cast(W) − W‖``;
    the base's (``B``, dtype ``bdt``) is cached in ``cache`` under ``key`` = (rows, other dtype)."""
    odt = key[1]
    if _MANTISSA.get(bdt, 0) >= _MANTISSA.get(odt, 0):
        if key not in cache:
            cache[key] = ops.floor(B, odt)
        return cache[key]
    return ops.floor(X, bdt)


def _blocked_gram(runs: list[_Tally], name: str, B: Any, ops: _Ops) -> np.ndarray:
    """Pairwise ``<ΔW_a, ΔW_b>`` over the rows common to all runs (scaled as :meth:`_Ops.gram`
    with :func:`_shifts`), re-reading row blocks so that the ``n`` blocks together take about
    one tensor of memory."""
    n = len(runs)
    rows = min(r.pairs[name].rows for r in runs)
    shape = runs[0].pairs[name].shape
    if len(shape) < 2:
        blocks = [(0, rows)]
    else:
        step = max(1, rows // n)
        blocks = [(i, min(i + step, rows)) for i in range(0, rows, step)]
    G = np.zeros((n, n))
    sh = _shifts(runs)
    for lo, hi in blocks:
        Ds = [ops.sub_(ops.load(r.ck, name, lo, hi), B[lo:hi]) for r in runs]
        G += ops.gram(Ds, sh)
        del Ds
    return G


# ------------------------------------------------------- training runs
_STEP_RE = re.compile(r"checkpoint-(\d+)$")
_VERL_STEP_RE = re.compile(r"global_step_(\d+)$")


def _step_of(path: str) -> int | None:
    """The training step of a checkpoint path: ``.../checkpoint-N`` (TRL, transformers'
    Trainer) or a ``global_step_N`` component (verl: ``global_step_N/actor/huggingface``)."""
    p = Path(os.path.normpath(str(path)))
    m = _STEP_RE.search(p.name)
    if m:
        return int(m.group(1))
    for part in reversed(p.parts):
        m = _VERL_STEP_RE.fullmatch(part)
        if m:
            return int(m.group(1))
    return None


def series(run_dir: str | os.PathLike) -> list[str]:
    """The checkpoints of a training run, in step order.

    Recognised layouts under ``run_dir``:

    * ``checkpoint-<step>`` (TRL and transformers' Trainer, any zero padding, e.g.
      ``checkpoint-000200`` as this project's trainer writes them) that contain a ``config.json``;
    * ``checkpoint-<step>`` that hold a PEFT LoRA adapter (``adapter_config.json`` and
      ``adapter_model.safetensors``, no ``model.safetensors`` / ``model.safetensors.index.json``: a
      TRL + peft run), diffed from their factors (:mod:`analysis.diff.lora`); a run directory that
      holds both adapter and full checkpoints is refused (one series is one kind);
    * verl's ``global_step_<step>``: its merged ``actor/huggingface`` directory, an ``actor``
      directory that holds a Hugging Face checkpoint itself, or the FSDP shards of ``actor``
      (``model_world_size_W_rank_R.pt``, read directly, listed as ``actor/huggingface``); a
      shard set that cannot be read is refused with the verl command that merges it
      (:func:`analysis.checkpoints.verl_merge_command`).

    Temporary or partial directories (other names, no ``config.json`` nor adapter files) are
    ignored.  Raises ``ValueError`` if ``run_dir`` is not a directory, holds none, or holds both
    adapter and full checkpoints.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> for d in ("checkpoint-20", "checkpoint-5", "global_step_10/actor/huggingface", "tmp-checkpoint-30"):
    ...     (run / d).mkdir(parents=True)
    ...     _ = (run / d / "config.json").write_text("{}")
    ...     _ = (run / d / "model.safetensors").write_bytes(b"")
    >>> [pathlib.Path(p).relative_to(run).as_posix() for p in series(run)]
    ['checkpoint-5', 'global_step_10/actor/huggingface', 'checkpoint-20']
    """
    p = Path(run_dir)
    if not p.is_dir():
        raise ValueError(f"run_dir must be a training-run directory holding checkpoint-* or global_step_* "
                         f"folders, got {str(run_dir)!r} (not a directory)")
    from .lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS

    found = []
    adapters = []
    for c in p.iterdir():
        if not c.is_dir():
            continue
        m = re.fullmatch(r"checkpoint-(\d+)", c.name)
        if m:
            full = (c / "model.safetensors").is_file() or (c / "model.safetensors.index.json").is_file()
            if not full and (c / ADAPTER_CONFIG).is_file() and (c / ADAPTER_WEIGHTS).is_file():
                adapters.append((int(m.group(1)), str(c)))
                continue
            if (c / "config.json").is_file():
                found.append((int(m.group(1)), str(c)))
                continue
        m = _VERL_STEP_RE.fullmatch(c.name)
        if m:
            r = resolve_checkpoint_dir(c, f"run_dir: {c.name}")
            if r != c and (r / "config.json").is_file():
                found.append((int(m.group(1)), str(r)))
    if found and adapters:
        a, f = min(adapters)[1], min(found)[1]
        raise ValueError(f"run_dir: {str(run_dir)!r} holds both LoRA adapter checkpoints ({len(adapters)}, e.g. "
                         f"{Path(a).name!r} with {ADAPTER_CONFIG}) and full checkpoints ({len(found)}, e.g. "
                         f"{Path(f).relative_to(p).as_posix()!r} with config.json): a series is one kind; diff them "
                         f"separately (give the checkpoints of one kind as RL arguments)")
    if not found and not adapters:
        raise ValueError(f"run_dir must hold checkpoint-<step> directories with a config.json or a LoRA adapter "
                         f"({ADAPTER_CONFIG} + {ADAPTER_WEIGHTS}), or verl global_step_<step>/actor/huggingface "
                         f"directories, found none in {str(run_dir)!r}")
    return [c for _, c in sorted(found or adapters)]
