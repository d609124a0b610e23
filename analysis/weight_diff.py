"""ΔW analysis of Hugging Face checkpoints (FADE Sec. 4.2, Sec. 5 table, App. 15).

For each RL checkpoint against a base (SFT) checkpoint, tensor by tensor,
``ΔW_t = W_rl,t − W_base,t``, streamed one tensor at a time from both checkpoints
(:mod:`analysis.checkpoints`), on the GPU when present:

=========================  =================================================================  ======================
quantity                   definition                                                         source
=========================  =================================================================  ======================
``global_l2``              ``‖ΔW‖_F = sqrt(Σ_t ‖ΔW_t‖_F²)`` over every floating-point tensor  App. 15 "global L2"
``relative_l2``            ``‖ΔW‖_F / ‖W_base‖_F`` (same entries)                             —
``l2_share`` (tensor)      ``‖ΔW_t‖_F² / Σ_s ‖ΔW_s‖_F²``; sums to 1                           App. 15 "per-layer L2"
``l2_share`` (layer)       sum of the shares of the block's tensors                           App. 15
``output_head.l2_share``   the head's share: FADE Sec. 5 table column "OH"                    Sec. 5 table
``density[tol]``           fraction of entries with ``|ΔW| > tol``, tol ∈ {0, 1e-5, 1e-4,    "RL finetunes small
                           1e-3}; per tensor and global                                       subnetworks" analysis
``s1_s2``                  ``σ_1/σ_2`` of ``ΔW_t``                                            Sec. 5 table, Fig. 5
``rank1_fraction``         ``r_1 = σ_1²/‖ΔW_t‖_F²`` (exact ``‖·‖_F``)                          Eq. 8, App. 15.1 Eq. 33
``srank[δ]``               ``min{k : Σ_{i≤k}σ_i / Σσ_i ≥ 1−δ}``, δ ∈ {0.01, 0.05, 0.1}        Fig. 5
``stable_rank``            ``‖ΔW‖_F²/σ_1²``; ``effective_rank`` Roy & Vetterli (2007)         —
``u_majority_sign_         max(#{u_i > 0}, #{u_i < 0})/V for the head's leading left          App. 15.1 ("99.93-99.97%
fraction``                 singular vector ``u`` (sign-free); ``u_largest_entries_side``:     of tokens negative")
                           the side holding the largest ``|u_i|``
``u_negative_fraction``    #{u_i < 0}/V under the orientation "largest ``|u_i|`` positive"   —
``u_energy_share[f]``      ``Σ`` of the largest ``⌈f·V⌉`` values ``u_i²`` (``‖u‖ = 1``),        App. 15.1 ("50% of
                           f ∈ {0.01, 0.22}; ``u_vocab_fraction_for_half_energy``             energy in ~22% of vocab")
``inner_s1_s2_mean``       mean ``s1/s2`` over the 2-D weights of the transformer blocks      see docs ("Inner")
``inner_l2_share_mean``    mean over blocks of the block's ``l2_share``                       Sec. 5 table "Inner"
alignment                  ``|cos|`` of leading ``u``, ``v`` of each checkpoint's ``ΔW``        Table 12
                           vs the last checkpoint (head; early/mid/late thirds of blocks)
clustering                 pairwise ``cos(vec ΔW_a, vec ΔW_b)`` (global, per layer),            App. 15 "pairwise cosine
                           average-linkage clustering on ``1 − cos``; ``|cos|`` of head u, v   ... hierarchical clustering"
=========================  =================================================================  ======================

All singular values go through :mod:`analysis.spectra` (the output head: its full
spectrum, computed through the ``d × d`` Gram matrix; other weights: the top ``top_k``
values, or all with ``full_spectrum=True``).  Sums of squares, dot products and counts are
accumulated in float64.

Memory: the base tensor and one ``ΔW`` in float32 (plus the stored tensor being read and
``analysis.spectra``'s workspace), i.e. about 3× the largest tensor in float32; never two
models.  With several checkpoints the pairwise dot products of their ``ΔW_t`` are computed
from the ``ΔW_t`` kept in memory when they fit in one largest-tensor budget, else in row
blocks re-read from the files.

Precision: each checkpoint's dtype is recorded; a pair whose dtypes differ is flagged with its
rounding floor (the ‖ΔW‖ that casting alone produces: the finer-precision side rounded to the
coarser dtype), per tensor and overall; ``cast=`` rounds both sides to one precision first.
Fused projections (Phi-3 ``qkv_proj``/``gate_up_proj``, GPT-2 ``c_attn``) are measured as stored
and per part (:func:`analysis.checkpoints.fused_parts`).

Mixture of experts (:func:`analysis.checkpoints.moe_tensor`): every expert matrix is measured, a
fused 3-D expert tensor (``experts.gate_up_proj`` of shape ``E × 2f × d`` or ``E × d × 2f``) expert by
expert and ``gate_up_proj`` per gate/up part; the checkpoint's ``experts`` list keeps every expert
matrix (block, expert, projection), ``per_layer[l]["moe"]`` aggregates the block's experts
(:data:`MOE_AGGREGATION`) beside its routers and shared experts, each a row of their own.

LoRA adapters: a ``checkpoints`` entry may be a PEFT LoRA adapter directory
(``adapter_config.json`` + ``adapter_model.safetensors``, all entries adapters or none); each
``ΔW = s·B·A`` is measured from its factors without forming it (:mod:`analysis.lora`), under the
same metric names, ``modules_to_save`` diffed densely, every other tensor ``ΔW = 0``.

Entry points: :func:`diff` (the report document, ``report.json``) and :func:`series`.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device, run_metadata

from . import lora, spectra
from .checkpoints import (
    DTYPE_NAMES,
    Checkpoint,
    TensorPair,
    expert_count,
    expert_parts,
    fused_parts,
    has_tokenizer,
    is_conv1d,
    load_tokenizer,
    moe_tensor,
    open_checkpoint,
    pair_tensors,
    resolve_checkpoint_dir,
    tokenizer_size,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["diff", "series", "to_frame", "u_statistics", "TOLERANCES", "SRANK_DELTAS", "ENERGY_FRACTIONS", "thirds",
           "LAYERS", "CASTS", "U_ORIENTATION", "TOKENIZER_MIN_COVERAGE", "MOE_AGGREGATION"]

#: density thresholds |ΔW| > tol
TOLERANCES = (0.0, 1e-5, 1e-4, 1e-3)
#: δ of srank_δ for the output head
SRANK_DELTAS = (0.01, 0.05, 0.1)
#: fractions of the vocabulary whose share of ‖u‖² is reported
ENERGY_FRACTIONS = (0.01, 0.22)
#: accepted values of ``layers=``
LAYERS = ("all", "head")
#: accepted values of ``cast=`` (``None``: each checkpoint as stored)
CASTS = ("bf16", "fp16", "fp32")
_CAST_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_ST_TORCH = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
             "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
_MANTISSA = {"F64": 52, "F32": 23, "F16": 10, "BF16": 7, "F8_E4M3": 3, "F8_E5M2": 2}
#: how the sign of the head's u is fixed (stated in the report and docs)
U_ORIENTATION = ("u and −u (with v flipped) are the same singular direction; u is signed so that its "
                 "largest-magnitude entry is positive (analysis.spectra), so 'negative' means 'opposite to the "
                 "largest entry'. Sign-free: the majority-sign fraction and the side (majority or minority) "
                 "that holds the largest entries.")
#: a tokenizer knowing fewer ids than this fraction of the head's rows is another vocabulary
TOKENIZER_MIN_COVERAGE = 0.9
N_TOP_TOKENS = 20
N_QUANTILES = 201
_CHUNK = 1 << 17            # float64 accumulation chunk on the CPU (entries): 1.6 MiB of temporaries
_CHUNK_CUDA = 1 << 24       # on CUDA: fewer kernel launches (128 MiB of float64 temporaries)
_SS_SAFE = (1e-200, 1e200)  # float64 sums of squares that lost nothing to underflow or overflow
_SPECTRA_BLOCK = 8          # analysis.spectra's float64 row blocks: at most 1/8 of the matrix ...
_SPECTRA_MAX_ELEMS = 1 << 23  # ... and at most its default 64 MiB
_FAST_MIN_ELEMS = 1 << 20   # top-k spectra of float32 ΔW above this many entries: spectra's "gram32"
_TORCH_ON_CPU = False       # tests only: run the torch (CUDA) code path on CPU tensors
#: OpenBLAS threads during a CPU diff (``None``: leave the process's setting).  numpy and scipy
#: each bundle their own OpenBLAS; their two thread pools, alternating call by call, busy-wait
#: against each other: on the 2-core test machine (load 3-5 from other jobs) the 0.5B benchmark
#: took 226 s with the default 2 threads in both, 177 s / 242 s with one of them at 1, and 36 s
#: with both at 1 (at load 1.5: 25.9 s with 2 threads, 23.0 s with 1).  The previous setting is
#: restored afterwards.  The cores are used by the ``workers`` of :class:`_Background` instead
#: (``benchmarks/bench_diff_workers.py``: at load 3.6-7.3, 58 s side by side against 374 s with two
#: BLAS threads per call; quiet: 10.8 s against 11.4 s).
CPU_BLAS_THREADS: int | None = 1


#: phases of :func:`diff`'s ``timings_s`` (seconds of the main thread's wall time spent in each;
#: ``spectra`` with background workers: the time it waited for them)
PHASES = ("read", "difference", "norms_densities", "rounding_floor", "head_spectrum", "spectra", "cross", "finish")
_TIMINGS: dict[str, float] | None = None   # the running diff's phase times (module state, one diff at a time)


@contextlib.contextmanager
def _phase(name: str):
    """Add the wall time of the block to the running diff's ``timings_s[name]``."""
    if _TIMINGS is None:
        yield
        return
    t = time.perf_counter()
    try:
        yield
    finally:
        _TIMINGS[name] = _TIMINGS.get(name, 0.0) + time.perf_counter() - t


class _Background:
    """Top-``k`` spectra of the block weights computed by ``workers`` threads side by side
    (``analysis.spectra``'s ``"gram32"`` releases the GIL in every heavy step, each call on one
    BLAS thread: no thread pools spinning against each other on a busy machine), while the main
    thread reads and differences the next tensors.  At most ``2·workers`` jobs are queued or
    running (a worker that finishes finds the next job waiting instead of idling while the main
    thread reads); each job's ``fill`` runs in the main thread, in submission order.
    ``workers = 1``: inline."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="rlvr-diff") if workers > 1 else None
        self.pending: collections.deque = collections.deque()

    def submit(self, job: Any, fill: Any) -> None:
        if self.pool is None:
            with _phase("spectra"):
                fill(job())
            return
        while len(self.pending) >= 2 * self.workers:
            self._pop()
        self.pending.append((self.pool.submit(job), fill))

    def _pop(self) -> None:
        fut, fill = self.pending.popleft()
        with _phase("spectra"):   # the main thread's wait: the spectra that reading did not hide
            res = fut.result()
        fill(res)

    def drain(self) -> None:
        while self.pending:
            self._pop()

    def close(self) -> None:
        for fut, _ in self.pending:
            fut.cancel()
        self.pending.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True)


_BG: _Background | None = None   # the running diff's background spectra (module state, like _TIMINGS)


def _key(x: float) -> str:
    """JSON key of a tolerance / δ / fraction: ``0`` → ``"0"``, ``1e-5`` → ``"1e-05"``."""
    return f"{x:g}"


def _finite(x: Any) -> float | None:
    """A JSON-safe float: ``None`` for inf/NaN (e.g. ``s1/s2`` of an exactly rank-1 ``ΔW``)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


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


# ---------------------------------------------------------------- helpers
@contextlib.contextmanager
def _blas_threads(n: int | None):
    """Run the block with ``n`` threads in every BLAS pool loaded in this process (numpy's and
    scipy's bundled OpenBLAS included; ``None``: unchanged), restored afterwards.  The same
    mechanism as ``--threads`` (:func:`rlvr_plumbing.runner.apply_threads`): threadpoolctl."""
    if n is None:
        yield
        return
    import threadpoolctl

    with threadpoolctl.threadpool_limits(int(n), user_api="blas"):
        yield


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
    * verl's ``global_step_<step>``: its merged ``actor/huggingface`` directory, or an
      ``actor`` directory that holds a Hugging Face checkpoint itself.  A step whose ``actor``
      holds only FSDP shards (``model_world_size_W_rank_R.pt``) is refused with the verl
      command that merges it (:func:`analysis.checkpoints.verl_merge_command`).

    Temporary or partial directories (other names, no ``config.json``) are ignored.
    Raises ``ValueError`` if ``run_dir`` is not a directory or holds none.

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
    found = []
    for c in p.iterdir():
        if not c.is_dir():
            continue
        m = re.fullmatch(r"checkpoint-(\d+)", c.name)
        if m and (c / "config.json").is_file():
            found.append((int(m.group(1)), str(c)))
            continue
        m = _VERL_STEP_RE.fullmatch(c.name)
        if m:
            r = resolve_checkpoint_dir(c, f"run_dir: {c.name}")
            if r != c and (r / "config.json").is_file():
                found.append((int(m.group(1)), str(r)))
    if not found:
        raise ValueError(f"run_dir must hold checkpoint-<step> directories with a config.json, or verl "
                         f"global_step_<step>/actor/huggingface directories, found none in {str(run_dir)!r}")
    return [c for _, c in sorted(found)]


def thirds(n_layers: int) -> dict[str, list[int]]:
    """Blocks ``0 … L−1`` split into early / mid / late thirds (FADE Table 12):
    ``numpy.array_split`` sizes, the first thirds one larger when ``L`` is not a multiple of 3."""
    parts = np.array_split(np.arange(n_layers), 3)
    return {k: [int(i) for i in p] for k, p in zip(("early", "mid", "late"), parts)}


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{idx} ({torch.cuda.get_device_name(idx)})"
    return "cpu"


def _check_args(base: Any, checkpoints: Any, top_k: Any, layers: Any, tokenizer: Any,
                full_spectrum: Any, progress: Any, cast: Any = None) -> tuple[list[str], int]:
    """The checkpoint paths and ``top_k`` (numbers and choices: :mod:`rlvr_plumbing.checks`)."""
    if not isinstance(base, (str, os.PathLike)):
        raise ValueError(f"base must be a checkpoint directory path (str), got {base!r}")
    if isinstance(checkpoints, (str, os.PathLike)) or not isinstance(checkpoints, Sequence):
        raise ValueError(f"checkpoints must be a non-empty sequence of checkpoint directory paths, "
                         f"got {checkpoints!r}")
    cks = list(checkpoints)
    if not cks or not all(isinstance(c, (str, os.PathLike)) for c in cks):
        raise ValueError(f"checkpoints must be a non-empty sequence of checkpoint directory paths, "
                         f"got {checkpoints!r}")
    top_k = checks.integer("top_k", top_k, low=2)
    checks.choice("layers", layers, LAYERS)
    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        raise ValueError(f"tokenizer must be None or a tokenizer directory path, got {tokenizer!r}")
    checks.choice("full_spectrum", full_spectrum, (True, False))
    checks.choice("progress", progress, (True, False))
    if cast is not None:
        checks.choice("cast", cast, CASTS)
    return [str(c) for c in cks], top_k


# ------------------------------------------------------------ head vector
def u_statistics(u: np.ndarray) -> dict[str, Any]:
    """Statistics of the head's leading left singular vector ``u`` (unit norm, length V).

    Sign-free (the same for ``u`` and ``−u``): ``u_majority_sign_fraction`` =
    max(#{u_i > 0}, #{u_i < 0})/V; ``u_largest_entries_side`` = ``"minority"`` or
    ``"majority"``, the sign side holding the largest ``|u_i|`` (``"tie"`` when both sides are
    equally large, or without a majority); ``u_minority_energy_share`` = Σ u_i² over the
    minority side.  Under the orientation :data:`U_ORIENTATION` (largest ``|u_i|`` positive):
    ``u_negative_fraction`` = #{u_i < 0}/V and ``u_majority_sign`` (``"negative"`` or
    ``"positive"``).  ``u_energy_share[f]`` = Σ of the ``⌈f·V⌉`` largest ``u_i²`` over
    ``Σ u_i²``; ``u_vocab_fraction_for_half_energy`` = the smallest fraction of tokens holding
    half of ``Σ u_i²``; ``u_quantiles``: ``u`` sorted ascending at ``N_QUANTILES`` evenly spaced
    ranks (for plots).  FADE App. 15.1 ("99.93-99.97% of tokens have negative u values" is a
    majority-sign fraction of 0.9993-0.9997).

    Examples
    --------
    Five large entries one way, 15,189 small ones the other (FADE's 50 vs 151,886, scaled down):

    >>> u = np.r_[np.full(5, 0.3), np.full(15189, -np.sqrt((1 - 5 * 0.09) / 15189))]
    >>> st = u_statistics(u)
    >>> round(st["u_majority_sign_fraction"], 5), st["u_largest_entries_side"], st["u_majority_sign"]
    (0.99967, 'minority', 'negative')
    >>> u_statistics(-u)["u_majority_sign_fraction"] == st["u_majority_sign_fraction"]
    True
    """
    u = np.asarray(u, dtype=np.float64)
    V = u.size
    e = np.sort(u * u)[::-1]
    cum = np.cumsum(e) / e.sum()
    share = {_key(f): float(cum[min(V, max(1, math.ceil(f * V))) - 1]) for f in ENERGY_FRACTIONS}
    half = int(np.searchsorted(cum, 0.5, side="left")) + 1
    q = np.sort(u)[np.linspace(0, V - 1, min(N_QUANTILES, V)).round().astype(int)]
    pos, neg = u > 0, u < 0
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    maj = pos if n_pos > n_neg else neg
    mino = neg if n_pos > n_neg else pos
    if n_pos == n_neg:
        side = "tie"
    else:
        big_maj = float(np.abs(u[maj]).max()) if maj.any() else 0.0
        big_min = float(np.abs(u[mino]).max()) if mino.any() else 0.0
        side = "majority" if big_maj > big_min else "minority" if big_min > big_maj else "tie"
    return {"u_negative_fraction": float(np.mean(neg)),
            "u_majority_sign_fraction": max(n_pos, n_neg) / V,
            "u_majority_sign": None if n_pos == n_neg else ("positive" if n_pos > n_neg else "negative"),
            "u_largest_entries_side": side,
            "u_minority_energy_share": float(np.sum(u[mino] ** 2) / np.sum(u * u)) if n_pos != n_neg else 0.5,
            "u_orientation": "largest |u_i| positive",
            "u_energy_share": share,
            "u_vocab_fraction_for_half_energy": half / V, "u_quantiles": [float(x) for x in q]}


def _top_tokens(u: np.ndarray, tok: Any, n: int, n_known: int | None = None) -> list[dict[str, Any]]:
    """The ``n`` largest positive and ``n`` most negative entries of ``u`` (only entries of that
    sign: the "−" list holds negative entries only), decoded; special tokens by their names."""
    order = np.argsort(u, kind="stable")
    pos = [i for i in order[::-1][:n] if u[i] > 0]
    neg = [i for i in order[:n] if u[i] < 0]
    special = _special_ids(tok)
    out = []
    for sign, ids in (("+", pos), ("-", neg)):
        for rank, i in enumerate(ids, 1):
            i = int(i)
            known = n_known is None or i < n_known
            out.append({"sign": sign, "rank": rank, "token_id": i, "u": float(u[i]),
                        "token": _decode(tok, i) if known else None, "special": i in special})
    return out


def _special_ids(tok: Any) -> set[int]:
    """Ids of the special tokens (``<eos>``, ``<pad>``, ...) of a tokenizer (empty if none/unknown)."""
    if tok is None:
        return set()
    try:
        if hasattr(tok, "all_special_ids"):  # transformers
            return {int(i) for i in tok.all_special_ids}
        if hasattr(tok, "get_added_tokens_decoder"):  # tokenizers.Tokenizer
            return {int(i) for i, t in tok.get_added_tokens_decoder().items() if getattr(t, "special", False)}
    except Exception:
        pass
    return set()


def _decode(tok: Any, i: int) -> str | None:
    """Token ``i`` as text; a special token (or any token decoding to nothing) by its name."""
    if tok is None:
        return None
    try:
        try:
            text = str(tok.decode([i], skip_special_tokens=False))
        except TypeError:
            text = str(tok.decode([i]))
        if text.strip():
            return text
        name = tok.id_to_token(i) if hasattr(tok, "id_to_token") else tok.convert_ids_to_tokens(i)
        return str(name) if name else text
    except Exception:  # an id beyond the tokenizer's vocabulary (padded embedding rows)
        return None


def _check_tokenizer(tok: Any, tok_dir: Any, head: str, rows: int, rows_max: int) -> str | None:
    """Refuse a tokenizer of another vocabulary; a note when it decodes only part of the head's rows."""
    n = tokenizer_size(tok)
    if n is None:
        return None
    if n > rows_max or n < TOKENIZER_MIN_COVERAGE * rows:
        raise ValueError(f"tokenizer: {str(tok_dir)!r} knows {n:,} token ids but the output head {head!r} has "
                         f"{rows:,} rows: a tokenizer of another vocabulary (give the model's own with --tokenizer)")
    if n < rows:
        return (f"the tokenizer {str(tok_dir)!r} knows {n:,} token ids, the output head has {rows:,} rows: ids "
                f"{n:,}-{rows - 1:,} (padding rows) are not decoded")
    return None


# --------------------------------------------------------------- the diff
class _Run:
    """Accumulators for one RL checkpoint."""

    def __init__(self, ck: Checkpoint, pairs: list[TensorPair]):
        self.ck = ck
        self.pairs = {p.name: p for p in pairs}
        self.records: list[dict[str, Any]] = []
        self.vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.l2 = 0.0       # ‖ΔW‖ over the tensors seen (accumulated as norms: no under/overflow)
        self.base_l2 = 0.0
        self.count = 0
        self.above = [0] * len(TOLERANCES)
        self.head: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.floor = 0.0            # ‖ΔW‖ that casting alone produces, over the tensors whose dtypes differ
        self.floor_tensors = 0
        self.dtype_differs = False


def diff(base: str, checkpoints: Sequence[str], *, device: str = "auto", top_k: int = 64,
         layers: str = "all", tokenizer: str | None = None, full_spectrum: bool = False,
         progress: bool = True, cast: str | None = None, workers: int | None = None,
         allow_other_base: bool = False) -> dict:
    """Compare RL checkpoints with their base checkpoint; return the ``report.json`` document.

    Parameters
    ----------
    base : str
        Base (SFT) checkpoint directory (``config.json`` + ``model.safetensors`` or shards).
    checkpoints : sequence of str
        One or more RL checkpoint directories of the same architecture (e.g. several runs,
        or :func:`series` of one run in step order), or one or more PEFT LoRA adapter
        directories trained on ``base`` (:mod:`analysis.lora`; not mixed with checkpoints).
    device : "auto", "cpu", "cuda", "cuda:N"
        Where differences, reductions and SVDs run (``"auto"``: CUDA when available).
        Numbers agree across devices to float rounding.
    top_k : int
        Leading singular values computed for every 2-D weight other than the output head
        (whose full spectrum is always computed).  ``>= 2``.
    layers : "all" or "head"
        ``"head"``: SVD metrics for the output head only (norms and densities still cover
        every tensor, as the head's L2 share needs them).
    tokenizer : str, optional
        Tokenizer directory to decode the top ± tokens of ``u``; default: the first of the
        last checkpoint / base that holds tokenizer files (none: token ids only).
    full_spectrum : bool
        All singular values of every weight (adds ``effective_rank`` and ``srank``).
    progress : bool
        tqdm progress bar over tensors.
    cast : "bf16", "fp16", "fp32", optional
        Round both sides to this precision before the difference (diff at one precision);
        default: each checkpoint as stored.  Without it, a pair whose dtypes differ (bf16 base,
        fp32 RL) is flagged (``dtype_differs``) with its ``rounding_floor``: the ‖ΔW‖ that
        casting alone produces, ‖cast(W → coarser dtype) − W‖ with ``W`` the side stored at
        the finer precision (the base, ‖cast(W_base → other dtype) − W_base‖, when it is the
        finer one), per tensor and overall.
    allow_other_base : bool
        Diff a LoRA adapter whose ``base_model_name_or_path`` names another base than ``base``
        (:func:`analysis.lora.base_identity`; refused by default), recorded as
        ``"base_identity": "other (allowed)"``.

    Returns
    -------
    dict
        ``{"base", "device", "settings", "checkpoints": [...], "alignment", "clustering",
        "skipped_tensors", "timing_s", "timings_s", "run"}``; see ``docs/checkpoint_diff.md`` for every
        key.  ``run`` is :func:`rlvr_plumbing.runtime.run_metadata` of the arguments (package
        version, settings, seed, device, threads).  An undefined ratio (``s1/s2`` of an
        exactly rank-1 ``ΔW``) is ``None``.

    Raises
    ------
    ValueError
        Bad arguments; a directory that is not a checkpoint; different architectures or
        shapes; a missing tensor; a truncated or corrupt safetensors file; NaN/Inf in a
        weight.  Messages start with ``base`` / ``checkpoints[i]`` and name the file and
        tensor.

    Examples
    --------
    Two tiny checkpoints written with safetensors: the "RL" one adds a rank-1 update
    ``0.1·u vᵀ`` to the output head and leaves the block weight unchanged.

    >>> import pathlib, tempfile, torch
    >>> from safetensors.torch import save_file
    >>> g = torch.Generator().manual_seed(0)
    >>> base = {"lm_head.weight": torch.randn(32, 8, generator=g),
    ...         "model.layers.0.mlp.up_proj.weight": torch.randn(16, 8, generator=g)}
    >>> u, v = torch.randn(32, 1, generator=g), torch.randn(8, 1, generator=g)
    >>> rl = dict(base, **{"lm_head.weight": base["lm_head.weight"] + 0.1 * u @ v.T})
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name, tensors in (("base", base), ("rl", rl)):
    ...     (root / name).mkdir()
    ...     _ = (root / name / "config.json").write_text('{"model_type": "toy", "tie_word_embeddings": false}')
    ...     save_file(tensors, str(root / name / "model.safetensors"))
    >>> doc = diff(str(root / "base"), [str(root / "rl")], device="cpu", progress=False)
    >>> head = doc["checkpoints"][0]["output_head"]
    >>> head["name"], round(head["l2_share"], 6), round(head["rank1_fraction"], 6), head["s1_s2"] > 1e5
    ('lm_head.weight', 1.0, 1.0, True)
    >>> doc["checkpoints"][0]["layers"][1]["note"]
    'unchanged (ΔW = 0): SVD metrics undefined'
    >>> sorted(doc["run"])
    ['device', 'package_version', 'seed', 'settings', 'threads']
    """
    global _TIMINGS
    t0 = time.perf_counter()
    workers = checks.integer("workers", torch.get_num_threads() if workers is None else workers, low=1)
    _TIMINGS = dict.fromkeys(PHASES, 0.0)
    try:
        return _diff(t0, base, checkpoints, device=device, top_k=top_k, layers=layers, tokenizer=tokenizer,
                     full_spectrum=full_spectrum, progress=progress, cast=cast, workers=workers,
                     allow_other_base=allow_other_base)
    finally:
        _TIMINGS = None


def _diff(t0: float, base: str, checkpoints: Sequence[str], *, device: str, top_k: int, layers: str,
          tokenizer: str | None, full_spectrum: bool, progress: bool, cast: str | None, workers: int,
          allow_other_base: bool = False) -> dict:
    """The body of :func:`diff` (which times its phases)."""
    paths, top_k = _check_args(base, checkpoints, top_k, layers, tokenizer, full_spectrum, progress, cast)
    if not isinstance(allow_other_base, bool):
        raise ValueError(f"allow_other_base must be True or False, got {allow_other_base!r}")
    dev = resolve_device(device)
    ops = _Ops(dev, cast)
    b = open_checkpoint(base, "base")
    adapters = _open_adapters(b, paths, cast, allow_other_base, base)   # LoRA adapter directories (all or none)
    cks = adapters or [open_checkpoint(p, f"checkpoints[{i}]") for i, p in enumerate(paths)]
    all_pairs = []
    skipped: list[str] = []
    for ck in cks:
        pairs, skipped = pair_tensors(b, b if adapters else ck)
        all_pairs.append(pairs)
    if b.head is None:
        raise ValueError(f"base: no output head found in {str(b.path)!r} (looked for lm_head.weight, "
                         f"embed_out.weight, output.weight, or a tied input embedding)")
    tok = None
    tok_dir = tokenizer
    tok_note = None
    if tok_dir is not None:
        tok = load_tokenizer(tok_dir, "tokenizer")
    else:  # found by itself: a tokenizer that cannot be loaded only costs the decoded tokens
        tok_dir = next((p for p in (paths[-1], base) if has_tokenizer(p)), None)
        if tok_dir is not None:
            try:
                tok = load_tokenizer(tok_dir, "tokenizer")
            except ValueError as err:
                tok_note, tok_dir = f"top tokens not decoded: {err}", None

    runs = [_Run(ck, pairs) for ck, pairs in zip(cks, all_pairs)]
    if tok is not None:  # another vocabulary is refused before any work; padding rows are noted
        hrows = [r.pairs[b.head] for r in runs]
        note = _check_tokenizer(tok, tok_dir, b.head, min(p.rows for p in hrows),
                                max(max(p.base_rows, p.other_rows) for p in hrows))
        tok_note = note if tok_note is None else tok_note
        tok_known = tokenizer_size(tok)
    else:
        tok_known = None
    n = len(runs)
    names = [p.name for p in all_pairs[0]]
    budget = max(ops.nbytes(p.compared_shape) for p in all_pairs[0])
    cross = {nm: (np.zeros((n, n)), [0] * n) for nm in names} if n >= 2 else None

    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(names) * n, desc="ΔW", unit="tensor")
    global _BG
    stack = contextlib.ExitStack()
    if dev.type == "cpu":
        stack.enter_context(_blas_threads(CPU_BLAS_THREADS))
    bg = _BG = _Background(workers if dev.type == "cpu" and not ops.torch else 1)
    # tensors above this size wait for the background spectra to finish first (memory: the
    # 2·workers jobs in flight and the two tensors being read stay within one largest-tensor budget)
    small = budget // (2 * bg.workers + 2)
    try:
        if adapters:
            _adapter_pass(runs, adapters, b, names, ops, dev, top_k, layers, full_spectrum, cross, bar)
        for name in ([] if adapters else names):
            rows_needed = max(r.pairs[name].rows for r in runs)
            if n * ops.nbytes(runs[0].pairs[name].compared_shape) > small:
                bg.drain()
            with _phase("read"):
                B = ops.load(b, name, 0, rows_needed)
            base_l2: dict[int, float] = {}
            base_floor: dict[tuple[int, str], float] = {}
            fits = n * ops.nbytes(runs[0].pairs[name].compared_shape) <= budget
            keep: list[Any] | None = [] if n >= 2 and fits else None
            bdt = b.info(name).dtype
            for r in runs:
                p = r.pairs[name]
                if p.rows not in base_l2:
                    with _phase("norms_densities"):
                        base_l2[p.rows] = ops.stats(B[:p.rows], counts=False)[0]
                with _phase("read"):
                    X = ops.load(r.ck, name, 0, p.rows)
                odt = r.ck.info(name).dtype
                floor = None
                if odt != bdt:
                    r.dtype_differs = True
                    if cast is None:  # the side stored at the finer precision, rounded to the other's dtype
                        tf = time.perf_counter()
                        if _MANTISSA.get(bdt, 0) >= _MANTISSA.get(odt, 0):
                            if (p.rows, odt) not in base_floor:
                                base_floor[(p.rows, odt)] = ops.floor(B[:p.rows], odt)
                            floor = base_floor[(p.rows, odt)]
                        else:
                            floor = ops.floor(X, bdt)
                        r.floor = math.hypot(r.floor, floor)
                        r.floor_tensors += 1
                        if _TIMINGS is not None:
                            _TIMINGS["rounding_floor"] += time.perf_counter() - tf
                with _phase("difference"):
                    D = ops.sub_(X, B[:p.rows])
                del X
                _measure(r, p, D, base_l2[p.rows], ops, dev, top_k, layers, full_spectrum, vectors=n >= 2)
                if odt != bdt:
                    r.records[-1]["dtypes"] = [DTYPE_NAMES.get(bdt, bdt), DTYPE_NAMES.get(odt, odt)]
                    r.records[-1]["rounding_floor_l2"] = floor
                if keep is not None:
                    keep.append(D)
                del D
                if bar is not None:
                    bar.update(1)
            if cross is not None:
                with _phase("cross"):
                    if keep is not None and len({r.pairs[name].rows for r in runs}) == 1:
                        cross[name] = (ops.gram(keep, _shifts(runs)), _shifts(runs))
                    else:
                        cross[name] = (_blocked_gram(runs, name, B, ops), _shifts(runs))
            del keep, B
        bg.drain()
    finally:
        bg.close()
        _BG = None
        stack.close()
        if bar is not None:
            bar.close()

    tfin = time.perf_counter()
    doc: dict[str, Any] = {
        "base": str(base),
        "device": _device_name(dev),
        "settings": {"top_k": int(top_k), "layers": layers, "full_spectrum": bool(full_spectrum),
                     "tolerances": list(TOLERANCES), "srank_deltas": list(SRANK_DELTAS),
                     "energy_fractions": list(ENERGY_FRACTIONS),
                     "tokenizer": None if tok_dir is None else str(tok_dir), "tokenizer_note": tok_note,
                     "cast": cast},
        "base_dtype": b.dtype,
        "architecture": {"model_type": b.model_type, "num_layers": b.num_layers,
                         "output_head": b.head, "tied_embeddings": b.tied,
                         "n_tensors": len(names)},
        "checkpoints": [_finish(r, b, tok, cast, tok_known) for r in runs],
        "alignment": _alignment(runs, b, paths) if n >= 2 else None,
        "clustering": _clustering(runs, cross, b, paths) if cross is not None else None,
        "skipped_tensors": skipped,
    }
    if adapters:
        _adapter_notes(doc, adapters)
        doc["settings"]["allow_other_base"] = allow_other_base
    if _TIMINGS is not None:
        _TIMINGS["finish"] += time.perf_counter() - tfin
        doc["timings_s"] = dict(_TIMINGS)
    doc["timing_s"] = time.perf_counter() - t0
    doc["run"] = run_metadata({"base": str(base), "checkpoints": paths, "device": str(device), "top_k": top_k,
                               "layers": layers, "tokenizer": None if tokenizer is None else str(tokenizer),
                               "full_spectrum": bool(full_spectrum), "cast": cast,
                               "allow_other_base": allow_other_base}, seed=None,
                              device=doc["device"])
    return doc


# ------------------------------------------------------- LoRA adapters
def _is_adapter(path: str) -> bool:
    """A LoRA adapter directory (``adapter_config.json``), not a full checkpoint that has one too."""
    p = Path(path)
    return lora.is_adapter_dir(p) and not (p / "model.safetensors").is_file() \
        and not (p / "model.safetensors.index.json").is_file()


def _open_adapters(b: Checkpoint, paths: list[str], cast: str | None, allow_other_base: bool = False,
                   base_arg: str | None = None) -> list[lora.Adapter]:
    """The adapters of ``paths`` validated against ``b`` (:func:`analysis.lora.open_adapter`, which
    also checks each adapter's ``base_model_name_or_path`` against ``b``), or ``[]`` when none is an
    adapter directory; adapters and full checkpoints are not mixed in one diff."""
    flags = [_is_adapter(p) for p in paths]
    if not any(flags):
        return []
    if not all(flags):
        i, j = flags.index(False), flags.index(True)
        raise ValueError(f"checkpoints[{i}]: {paths[i]!r} is a full checkpoint but checkpoints[{j}] {paths[j]!r} is "
                         f"a LoRA adapter directory: diff adapters and full checkpoints in separate runs")
    if cast is not None:
        raise ValueError(f"cast: {cast!r} applies to two stored checkpoints; a LoRA adapter's ΔW = s·B·A is "
                         f"measured exactly from its factors (leave cast unset)")
    return [lora.open_adapter(p, b, f"checkpoints[{i}]", allow_other_base=allow_other_base, base_arg=base_arg)
            for i, p in enumerate(paths)]


def _adapter_dense(a: lora.Adapter, b: Checkpoint, name: str, B: Any, ops: _Ops) -> Any:
    """``ΔW`` of a tensor an adapter stores whole (``modules_to_save``, trained bias) or updates by
    ``lora_bias``, as the dense diff computes it (float32 difference of the stored values)."""
    if name in a.bias_deltas:
        D = a.bias_delta(name)
        return torch.from_numpy(D).to(ops.dev) if ops.torch else D
    t = a.read_full(name)
    if not bool(torch.isfinite(t.to(torch.float64)).all()):
        raise ValueError(f"{a.label}: tensor {a.full[name]!r} in file {str(a.file)!r} holds non-finite values")
    x = t if t.dtype == torch.float64 else t.to(torch.float32)
    X = x.to(ops.dev) if ops.torch else x.numpy().copy()
    return ops.sub_(X, B)


def _adapter_pass(runs: list[_Run], adapters: list[lora.Adapter], b: Checkpoint, names: list[str], ops: _Ops,
                  dev: torch.device, top_k: int, layers: str, full_spectrum: bool,
                  cross: dict[str, Any] | None, bar: Any) -> None:
    """The records of LoRA adapters, tensor by tensor: low-rank updates from their factors
    (:func:`_measure_low_rank`), full tensors with :func:`_measure`, the rest ΔW = 0.  The base
    is read once per tensor for ‖W_base‖ (:func:`analysis.lora.stored_norm`, relative error ≲ 1e-6; the
    exact float64 path of the dense diff where it declines) and for the full tensors' difference."""
    n = len(runs)
    for name in names:
        B = None   # the base as float, read only for a tensor an adapter stores whole
        base_l2 = lora.stored_norm(b.read(name)) if b.info(name).is_float else None
        if base_l2 is None:
            B = ops.load(b, name)
            base_l2 = ops.stats(B, counts=False)[0]
        upd: list[Any] = []
        for r, a in zip(runs, adapters):
            p = r.pairs[name]
            if name in a.dora:   # DoRA: W' − W is not low rank, formed in float64 and diffed densely
                if B is None:
                    B = ops.load(b, name)
                D = a.dora_update(name, B.cpu().numpy() if ops.torch else B)
                D = torch.from_numpy(D).to(ops.dev) if ops.torch else D
                _measure(r, p, D, base_l2, ops, dev, top_k, layers, full_spectrum, vectors=n >= 2)
                r.records[-1]["adapter_tensor"] = "dora"
                r.records[-1]["low_rank"] = dict(a.low_rank[name].info(), dora=True)
                upd.append((D.cpu().numpy() if ops.torch else D) if n >= 2 else None)
                del D
            elif name in a.low_rank:
                f = a.factors(name)
                _measure_low_rank(r, p, f, a.low_rank[name].info(), base_l2, ops, dev, top_k, layers,
                                  full_spectrum, n >= 2)
                upd.append(f)
            elif name in a.full or name in a.bias_deltas:
                if B is None:
                    B = ops.load(b, name)
                D = _adapter_dense(a, b, name, B, ops)
                _measure(r, p, D, base_l2, ops, dev, top_k, layers, full_spectrum, vectors=n >= 2)
                r.records[-1]["adapter_tensor"] = "lora_bias" if name in a.bias_deltas else "full"
                upd.append((D.cpu().numpy() if ops.torch else D) if n >= 2 else None)
                del D
            else:
                _measure_low_rank(r, p, None, None, base_l2, ops, dev, top_k, layers, full_spectrum, n >= 2)
                upd.append(None)
            if bar is not None:
                bar.update(1)
        del B
        if cross is not None:
            sh = _shifts(runs)
            G = np.array([[lora.low_rank_inner(x, y) for y in upd] for x in upd])
            with np.errstate(under="ignore"):
                cross[name] = (np.ldexp(G, -(np.array(sh)[:, None] + np.array(sh)[None, :])), sh)


def _low_rank_part(f: tuple[np.ndarray, np.ndarray, float], part: str, axis: int, a: int, z: int) -> dict[str, Any]:
    """Norm and SVD metrics of rows (``axis`` 0) or columns ``a:z`` of ``scale·L·R`` (still low rank)."""
    L, R, s = f
    sub = (L[a:z], R, s) if axis == 0 else (L, R[:, a:z], s)
    spec = lora.low_rank_spectrum(*sub)
    shape = [z - a, R.shape[1]] if axis == 0 else [L.shape[0], z - a]
    out: dict[str, Any] = {"part": part, "axis": axis, "start": a, "stop": z, "shape": shape, "l2": spec.fro_norm,
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None}
    if spec.fro_norm > 0:
        out.update({"s1": float(spec.s[0]), "s2": float(spec.s[1]) if len(spec.s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec)})
    return out


def _measure_low_rank(r: _Run, p: TensorPair, f: tuple[np.ndarray, np.ndarray, float] | None,
                      info: dict[str, Any] | None, base_l2: float, ops: _Ops, dev: torch.device, top_k: int,
                      layers: str, full_spectrum: bool, vectors: bool) -> None:
    """The record of :func:`_measure` for ``ΔW = scale·L·R`` given by its factors ``f`` (``None``:
    ΔW = 0): norm and spectrum from the QR core (:func:`analysis.lora.low_rank_spectrum`), entry
    counts from float32 row blocks (:func:`analysis.lora.low_rank_counts`)."""
    size = int(math.prod(p.compared_shape)) if p.compared_shape else 1
    is_head = p.kind == "head"
    two_d = len(p.shape) == 2 and min(p.compared_shape) >= 1 and (layers == "all" or is_head)
    full = is_head or full_spectrum
    spec = None
    if f is None:
        l2, cnt = 0.0, [0] * len(TOLERANCES)
    else:
        d = min(p.compared_shape)
        nv = 1 if (is_head or vectors) and two_d else 0
        spec = lora.low_rank_spectrum(*f, None if full else min(top_k, d), n_vectors=nv)
        l2 = spec.fro_norm
        cnt = lora.low_rank_counts(*f, ops.t32) if l2 > 0 else [0] * len(TOLERANCES)
    rec = _record(r, p, l2, base_l2, size, cnt)
    if info is not None:
        rec["low_rank"] = info
    if two_d:
        if spec is None or l2 == 0.0:
            rec["note"] = "unchanged (ΔW = 0): SVD metrics undefined"
        else:
            _fill_spectrum(r, p.name, rec, spec, full=full, is_head=is_head, top_k=top_k)
            parts = fused_parts(p.name, p.compared_shape, r.ck.config) if layers == "all" else None
            if parts and f is not None:
                rec["parts"] = [_low_rank_part(f, part, axis, a, z) for part, axis, a, z in parts]
    if len(p.shape) == 2 and is_conv1d(p.name, r.ck.config):
        rec["stored_transposed"] = True
    r.records.append(rec)


def _adapter_notes(doc: dict[str, Any], adapters: list[lora.Adapter]) -> None:
    """Each adapter's summary (``checkpoints[i].adapter``) and what its numbers mean."""
    doc["settings"]["adapters"] = True
    for c, a in zip(doc["checkpoints"], adapters):
        c["adapter"] = a.summary()
        i = a.identity
        c["base_identity"] = i["status"]
        c["base_identity_names"] = {"adapter_base_model_name_or_path": i["adapter_base"], "base": i["base"],
                                    "base_name_or_path": i["base_name_or_path"], "how": i["how"]}
        if i["status"] != "same":
            c["notes"].append(
                f"base identity: {i['status']}: the adapter names base {i['adapter_base']!r}, the base given is "
                f"{i['base']!r}" + (f" (config.json _name_or_path {i['base_name_or_path']!r})"
                                     if i["base_name_or_path"] else "") + f": {i['how']}"
                + (" (--allow-other-base): ΔW is read against another W than the adapter was trained on"
                   if i["status"] == "other (allowed)" else ""))
        c["dtype_differs"] = False
        ranks = ", ".join(str(x) for x in c["adapter"]["ranks"]) or "—"
        c["notes"].append(
            f"LoRA adapter ({a.adapter_config.get('peft_type')}, rank {ranks}, lora_alpha "
            f"{a.adapter_config.get('lora_alpha')}{', rsLoRA' if a.adapter_config.get('use_rslora') else ''}): "
            f"ΔW = s·B·A of {len(a.low_rank) - len(a.dora)} weights measured from the factors without forming ΔW "
            f"(spectrum from the QR core, exact); densities count the entries of s·B·A in float32 row blocks; "
            f"{len(a.dora)} DoRA weights (W' = diag(m/‖W + s·B·A‖_row)·(W + s·B·A), not low rank) formed in float64 "
            f"and diffed densely; "
            f"{len(a.full)} full tensors (modules_to_save, trained biases) and {len(a.bias_deltas)} lora_bias "
            f"updates diffed densely; every other tensor has ΔW = 0. This is the exact update: a checkpoint "
            f"merged in bfloat16 rounds W + s·B·A, which shifts small entries and the densities.")


def _shifts(runs: list[_Run]) -> list[int]:
    """Per run, the power of two just above the norm of its latest ``ΔW`` (0 for ``ΔW = 0``)."""
    return [math.frexp(r.records[-1]["l2"])[1] for r in runs]


def _aligned_sum(parts: list[tuple[np.ndarray, list[int]]]) -> np.ndarray:
    """``Σ_t 2**(s_a+s_b) G_t[a, b]`` for scaled Grams ``(G_t, s)``, itself scaled per run by
    ``2**-(E_a+E_b)``, ``E`` the largest shift of each run: cosines are unchanged by a per-run
    scale, and neither tiny nor huge ``ΔW`` (float64 checkpoints) under- or overflows."""
    S = np.array([s for _, s in parts], dtype=np.int64)
    live = np.array([np.diag(G) > 0 for G, _ in parts])      # a ΔW = 0 sets no scale
    E = np.where(live, S, -(1 << 40)).max(axis=0)
    E = np.where(live.any(axis=0), E, 0)
    total = np.zeros_like(parts[0][0])
    with np.errstate(under="ignore"):
        for G, s in parts:
            d = np.asarray(s, dtype=np.int64) - E
            total += np.ldexp(G, (d[:, None] + d[None, :]).astype(np.int32))
    return total


def _blocked_gram(runs: list[_Run], name: str, B: Any, ops: _Ops) -> np.ndarray:
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


def _record(r: Any, p: TensorPair, l2: float, base_l2: float, size: int, cnt: list[int]) -> dict[str, Any]:
    """Add one tensor's ‖ΔW‖, ‖W‖, size and density counts to the run ``r``; its record with the
    SVD fields empty (dense and low-rank ΔW alike)."""
    r.l2 = math.hypot(r.l2, l2)
    r.base_l2 = math.hypot(r.base_l2, base_l2)
    r.count += size
    r.above = [a + c for a, c in zip(r.above, cnt)]
    return {
        "name": p.name, "kind": p.kind, "layer": p.layer, "shape": list(p.shape),
        "rows_compared": p.rows, "l2": l2, "base_l2": base_l2,
        "relative_l2": l2 / base_l2 if base_l2 > 0 else None,
        "l2_share": None,  # filled in when all tensors are seen
        "density": {_key(t): c / size for t, c in zip(TOLERANCES, cnt)},
        "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None, "stable_rank": None,
    }


def _fill_spectrum(r: _Run, name: str, rec: dict[str, Any], spec: spectra.Spectrum, *, full: bool, is_head: bool,
                   top_k: int) -> None:
    """The SVD fields of the record ``rec`` from ``spec`` (dense and low-rank ΔW alike); the
    leading vectors, when computed, kept in ``r.vectors`` (the head's in float64: they feed the
    u statistics)."""
    s = spec.s
    rec.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec),
                "stable_rank": spectra.stable_rank(spec), "n_singular_values": int(len(s))})
    if full:
        rec["effective_rank"] = spectra.effective_rank(spec)
        rec["srank"] = {_key(dl): int(kv) for dl, kv in
                        zip(SRANK_DELTAS, np.atleast_1d(spectra.srank(spec, list(SRANK_DELTAS))))}
    if is_head:
        rec["singular_values"] = [float(x) for x in s]
    else:
        rec["top_singular_values"] = [float(x) for x in s[:top_k]]
    if spec.u is not None and spec.v is not None:
        keep_dt = np.float64 if is_head else np.float32
        r.vectors[name] = (spec.u[:, 0].astype(keep_dt), spec.v[:, 0].astype(keep_dt))


def _measure(r: _Run, p: TensorPair, D: Any, base_l2: float, ops: _Ops, dev: torch.device,
             top_k: int, layers: str, full_spectrum: bool, vectors: bool) -> None:
    """Norms, densities and (2-D weights) SVD metrics of one ``ΔW_t``; the leading singular
    vectors of the head always, of the other weights when ``vectors`` (alignment needs them).

    Top-``k`` spectra of large float32 ``ΔW`` on the CPU use :mod:`analysis.spectra`'s
    ``"gram32"`` method (float32 Gram and eigenvectors, float64 Rayleigh–Ritz: top-``k`` values to
    ``≤ 10⁻¹¹`` relative, see its docs); the head's full spectrum the float64 ``"gram"``."""
    with _phase("norms_densities"):
        l2, cnt = ops.stats(D)
    if not math.isfinite(l2) or not math.isfinite(base_l2):
        which = "ΔW" if math.isfinite(base_l2) else "the base weight"
        raise ValueError(f"{r.ck.label}: {which} of tensor {p.name!r} is beyond the float64 range (an entry or "
                         f"its norm exceeds 1.8e308, or the difference overflows the stored precision)")
    size = int(math.prod(p.compared_shape)) if p.compared_shape else 1
    rec = _record(r, p, l2, base_l2, size, cnt)
    if p.vocab_resized:
        rec["vocab_rows"] = {"base": p.base_rows, "checkpoint": p.other_rows}
    is_head = p.kind == "head"
    if len(p.shape) == 2 and min(p.compared_shape) >= 1 and (layers == "all" or is_head):
        if cnt[0] == 0:   # no entry differs (cnt[0] = #{|ΔW| > 0}; a tiny ΔW is not 0)
            rec["note"] = "unchanged (ΔW = 0): SVD metrics undefined"
        else:
            d = min(p.compared_shape)
            full = is_head or full_spectrum
            k = None if full else min(top_k, d)
            tall, short = max(p.compared_shape), min(p.compared_shape)
            block_rows = max(1, min(_SPECTRA_MAX_ELEMS // short, -(-tall // _SPECTRA_BLOCK)))
            nv = 1 if (is_head or vectors) else 0
            fast = (k is not None and k < d and not ops.torch and dev.type == "cpu"
                    and getattr(D, "dtype", None) == np.float32 and tall * short > _FAST_MIN_ELEMS)

            background = fast and _BG is not None and _BG.pool is not None

            gram_workers = 1 if background or _BG is None or dev.type != "cpu" else _BG.workers

            def job() -> spectra.Spectrum:   # inline (the head, ...): the Gram pass split between workers,
                return spectra.spectrum(D, k, n_vectors=nv, device=dev,   # in half-size blocks (same memory)
                                        block_rows=block_rows if gram_workers == 1 else max(1, block_rows // 2),
                                        method="gram32" if fast else "auto", workers=gram_workers)

            def fill(spec: spectra.Spectrum) -> None:
                _fill_spectrum(r, p.name, rec, spec, full=full, is_head=is_head, top_k=top_k)

            if fast and _BG is not None:   # in the background; the keys keep their order in the record
                rec.update(dict.fromkeys(("s1", "s2", "s1_s2", "rank1_fraction", "stable_rank", "n_singular_values",
                                          "top_singular_values")))
                _BG.submit(job, fill)
            else:
                with _phase("head_spectrum" if is_head else "spectra"):
                    fill(job())
            parts = fused_parts(p.name, p.compared_shape, r.ck.config) if layers == "all" else None
            if parts:
                rec["parts"] = [_part(D, part, axis, a, z, ops, dev, top_k, full_spectrum)
                                for part, axis, a, z in parts]
    if len(p.shape) == 2 and is_conv1d(p.name, r.ck.config):
        rec["stored_transposed"] = True   # GPT-2 Conv1D: in × out
    _moe_measure(r, p, D, rec, ops, dev, top_k, layers, full_spectrum)
    r.records.append(rec)


def _part(D: Any, part: str, axis: int, a: int, z: int, ops: _Ops, dev: torch.device, top_k: int,
          full_spectrum: bool) -> dict[str, Any]:
    """Norm and SVD metrics of one part of a fused projection (rows or columns ``a:z``)."""
    sub = D[a:z] if axis == 0 else D[:, a:z]
    sub = sub.contiguous() if ops.torch else np.ascontiguousarray(sub)
    l2, cnt = ops.stats(sub)
    out: dict[str, Any] = {"part": part, "axis": axis, "start": a, "stop": z, "shape": list(sub.shape), "l2": l2,
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None}
    if cnt[0] > 0:
        d = min(sub.shape)
        k = None if full_spectrum else min(top_k, d)
        spec = spectra.spectrum(sub, k, device=dev)
        s = spec.s
        out.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec)})
    return out


def _finish(r: _Run, b: Checkpoint, tok: Any, cast: str | None = None, tok_known: int | None = None) -> dict[str, Any]:
    """The per-checkpoint entry of the document from the accumulators."""
    total = r.l2
    for rec in r.records:
        rec["l2_share"] = (rec["l2"] / total) ** 2 if total > 0 else 0.0
    if total == 0.0:
        r.notes.append("the checkpoint is identical to the base (ΔW = 0 everywhere)")
    recs = {rec["name"]: rec for rec in r.records}
    head_rec = dict(recs[b.head])
    head: dict[str, Any] = {k: head_rec.get(k) for k in
                            ("name", "shape", "rows_compared", "l2", "l2_share", "relative_l2", "density",
                             "s1", "s2", "s1_s2", "rank1_fraction", "stable_rank", "effective_rank")}
    head["tied"] = b.tied
    head["srank"] = head_rec.get("srank")
    head["singular_values"] = head_rec.get("singular_values", [])
    if b.head in r.vectors:
        u, v = r.vectors[b.head]
        head.update(u_statistics(u))
        head["top_tokens"] = _top_tokens(u.astype(np.float64), tok, N_TOP_TOKENS, tok_known)
    else:
        head.update({"u_negative_fraction": None, "u_majority_sign_fraction": None, "u_majority_sign": None,
                     "u_largest_entries_side": None, "u_minority_energy_share": None, "u_orientation": None,
                     "u_energy_share": None, "u_vocab_fraction_for_half_energy": None, "u_quantiles": [],
                     "top_tokens": []})
    vocab_note = None
    hp = r.pairs[b.head]
    resized = [p for p in r.pairs.values() if p.vocab_resized]
    if resized:
        vocab_note = (f"vocabulary resized: base has {hp.base_rows} rows, this checkpoint {hp.other_rows}; "
                      f"the first {hp.rows} rows (the common tokens) of "
                      f"{', '.join(p.name for p in resized)} are compared, the other "
                      f"{abs(hp.base_rows - hp.other_rows)} rows are ignored")
    per_layer = []
    L = b.num_layers
    for i in range(L):
        lr = [rec for rec in r.records if rec["layer"] == i]
        ss = math.hypot(*(rec["l2"] for rec in lr))
        bs = math.hypot(*(rec["base_l2"] for rec in lr))
        s12 = [rec["s1_s2"] for rec in lr if rec["s1_s2"] is not None]
        r1 = [rec["rank1_fraction"] for rec in lr if rec["rank1_fraction"] is not None]
        per_layer.append({"layer": i, "l2": ss, "l2_share": (ss / total) ** 2 if total > 0 else 0.0,
                          "relative_l2": ss / bs if bs > 0 else None,
                          "s1_s2_mean": float(np.mean(s12)) if s12 else None,
                          "rank1_fraction_mean": float(np.mean(r1)) if r1 else None,
                          "n_matrices": len(s12)})
    inner = [rec for rec in r.records if rec["kind"] == "block"]
    inner_s12 = [rec["s1_s2"] for rec in inner if rec["s1_s2"] is not None]
    inner_r1 = [rec["rank1_fraction"] for rec in inner if rec["rank1_fraction"] is not None]
    n_inf = sum(1 for rec in inner if rec.get("rank1_fraction") is not None and rec["s1_s2"] is None)
    groups = {}
    for kind in ("head", "embedding", "block", "other"):
        groups[kind] = sum(rec["l2_share"] for rec in r.records if rec["kind"] == kind)
    floor = None
    if r.dtype_differs and cast is None:
        floor = {"l2": r.floor, "n_tensors": r.floor_tensors,
                 "ratio_to_global_l2": r.floor / total if total > 0 else None,
                 "rule": "‖cast(W → coarser dtype) − W‖, W the side stored at the finer precision, over the "
                         "tensors whose dtypes differ"}
        r.notes.append(f"dtypes differ: base {b.dtype}, this checkpoint {r.ck.dtype}; casting alone produces "
                       f"‖ΔW‖ = {r.floor:.4g} (the rounding floor) against the measured {total:.4g}; "
                       f"--cast bf16|fp16|fp32 diffs both at one precision")
    if cast is not None:
        r.notes.append(f"both sides rounded to {cast} before the difference (--cast)")
    out = {
        "path": str(r.ck.path),
        "step": _step_of(str(r.ck.path)),
        "dtype": r.ck.dtype,
        "dtype_differs": r.dtype_differs,
        "rounding_floor": floor,
        "global_l2": total,
        "base_l2": r.base_l2,
        "relative_l2": total / r.base_l2 if r.base_l2 > 0 else None,
        "density": {_key(t): a / r.count for t, a in zip(TOLERANCES, r.above)},
        "n_entries": r.count,
        "output_head": head,
        "layers": r.records,
        "per_layer": per_layer,
        "l2_share_by_kind": groups,
        "inner_s1_s2_mean": float(np.mean(inner_s12)) if inner_s12 else None,
        "inner_rank1_fraction_mean": float(np.mean(inner_r1)) if inner_r1 else None,
        "inner_l2_share_mean": float(np.mean([pl["l2_share"] for pl in per_layer])) if per_layer else None,
        "inner_n_matrices": len(inner_s12),
        "vocab_note": vocab_note,
        "notes": r.notes + ([f"{n_inf} block matrices have σ2 = 0 (s1/s2 infinite), left out of "
                             f"inner_s1_s2_mean"] if n_inf else []),
    }
    _moe_finish(out, r.ck.config)
    return out


# ------------------------------------------------------------ mixture of experts
#: what the per-layer expert aggregates are, stated in report.json and the report
MOE_AGGREGATION = ("per block, over the routed experts' matrices (a fused gate_up_proj counts as its gate and up "
                   "parts): energy = Σ ‖ΔW_e‖²_F and l2_share = Σ of the shares; max and median of s1/s2 and of "
                   "r1 over the matrices that changed (ΔW ≠ 0; an exactly rank-1 ΔW has no finite s1/s2); "
                   "n_experts = distinct expert indices. Routers and shared experts are their own rows.")


def _matrix_metrics(M: Any, ops: _Ops, dev: torch.device, top_k: int, full_spectrum: bool,
                    svd: bool) -> dict[str, Any]:
    """Norm, densities and SVD metrics of one expert matrix (a slice of a fused 3-D ``ΔW``)."""
    M = M.contiguous() if ops.torch else np.ascontiguousarray(M)
    l2, cnt = ops.stats(M)
    size = int(math.prod(M.shape))
    out: dict[str, Any] = {"shape": [int(x) for x in M.shape], "l2": l2,
                           "density": {_key(t): c / size for t, c in zip(TOLERANCES, cnt)},
                           "s1": None, "s2": None, "s1_s2": None, "rank1_fraction": None, "stable_rank": None}
    if svd and cnt[0] > 0 and min(M.shape) >= 1:
        k = None if full_spectrum else min(top_k, min(M.shape))
        spec = spectra.spectrum(M, k, device=dev)
        s = spec.s
        out.update({"s1": float(s[0]), "s2": float(s[1]) if len(s) > 1 else 0.0,
                    "s1_s2": _finite(spectra.s1_s2(spec)), "rank1_fraction": spectra.rank1_fraction(spec),
                    "stable_rank": spectra.stable_rank(spec)})
    return out


def _moe_measure(r: _Run, p: TensorPair, D: Any, rec: dict[str, Any], ops: _Ops, dev: torch.device,
                 top_k: int, layers: str, full_spectrum: bool) -> None:
    """The MoE role of a record (``moe``, ``expert``, ``projection``); a fused 3-D expert tensor is
    measured expert by expert (and per gate/up part), kept under ``_experts`` until :func:`_moe_finish`."""
    mt = moe_tensor(p.name, p.shape, r.ck.config)
    if mt is None:
        return
    rec["moe"] = mt.role
    rec["projection"] = mt.projection
    if mt.expert is not None:
        rec["expert"] = mt.expert
    if not mt.fused or len(p.compared_shape) != 3:
        return
    parts = expert_parts(p.name, p.shape, r.ck.config)
    rec["n_experts"] = int(p.compared_shape[0])
    rec["expert_parts"] = ([{"projection": q, "axis": ax, "start": a, "stop": z, "step": st}
                            for q, ax, a, z, st in parts] if parts else None)
    per = []
    for j in range(rec["n_experts"]):
        M = D[j]   # with parts, only the parts' spectra are reported: the whole matrix gets no SVD
        row = _matrix_metrics(M, ops, dev, top_k, full_spectrum, svd=layers == "all" and not parts)
        if parts:
            row["parts"] = []
            for q, ax, a, z, st in parts:
                sub = M[a:z:st] if ax == 0 else M[:, a:z:st]
                row["parts"].append(dict(_matrix_metrics(sub, ops, dev, top_k, full_spectrum, svd=layers == "all"),
                                         projection=q, axis=ax, start=a, stop=z, step=st))
        per.append(row)
    rec["_experts"] = per


_EXPERT_ROW_KEYS = ("shape", "l2", "density", "s1", "s2", "s1_s2", "rank1_fraction", "stable_rank")


def _expert_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Energy (sum), share (sum), max and median of s1/s2 and r1 over expert-matrix rows."""
    s12 = [x["s1_s2"] for x in rows if x["s1_s2"] is not None]
    r1 = [x["rank1_fraction"] for x in rows if x["rank1_fraction"] is not None]
    l2 = math.hypot(*(x["l2"] for x in rows)) if rows else 0.0
    return {"n_experts": len({x["expert"] for x in rows}), "n_matrices": len(rows),
            "n_changed": sum(1 for x in rows if x["l2"] > 0), "l2": l2, "energy": l2 * l2,
            "l2_share": float(sum(x["l2_share"] for x in rows)),
            "s1_s2_max": max(s12) if s12 else None, "s1_s2_median": float(np.median(s12)) if s12 else None,
            "rank1_fraction_max": max(r1) if r1 else None,
            "rank1_fraction_median": float(np.median(r1)) if r1 else None}


def _moe_finish(out: dict[str, Any], config: dict) -> None:
    """MoE entries of a checkpoint's document: ``experts`` (every expert matrix: block, expert,
    projection), ``per_layer[i]["moe"]`` (the block's experts aggregated, its routers and shared
    experts) and ``moe`` (totals); block and inner means then count the matrices of fused experts."""
    recs = out["layers"]
    if not any("moe" in rec for rec in recs):
        return
    total = out["global_l2"]
    rows: list[dict[str, Any]] = []
    fused_rows: list[dict[str, Any]] = []
    for rec in recs:
        if rec.get("moe") != "expert":
            continue
        per = rec.pop("_experts", None)
        if per is None:
            if len(rec["shape"]) == 2:
                rows.append({"layer": rec["layer"], "expert": rec.get("expert"), "projection": rec["projection"],
                             "name": rec["name"], "index": None, "part": None,
                             **{k: rec.get(k) for k in _EXPERT_ROW_KEYS}})
            continue
        for j, e in enumerate(per):
            for pt in e.get("parts") or [dict(e, projection=rec["projection"])]:
                part = ({k: pt[k] for k in ("axis", "start", "stop", "step")} if "axis" in pt else None)
                row = {"layer": rec["layer"], "expert": j, "projection": pt["projection"], "name": rec["name"],
                       "index": j, "part": part, **{k: pt.get(k) for k in _EXPERT_ROW_KEYS}}
                rows.append(row)
                fused_rows.append(row)
    for row in rows:
        row["l2_share"] = (row["l2"] / total) ** 2 if total > 0 else 0.0
    rows.sort(key=lambda x: (-1 if x["layer"] is None else x["layer"], x["expert"] if x["expert"] is not None else -1,
                             x["projection"] or ""))
    out["experts"] = rows

    def side(role: str, i: int | None) -> list[dict[str, Any]]:
        return [rec for rec in recs if rec.get("moe") == role and rec["layer"] == i]

    for pl in out["per_layer"]:
        i = pl["layer"]
        er = [x for x in rows if x["layer"] == i]
        routers, shared = side("router", i), side("shared_expert", i)
        if not (er or routers or shared):
            pl["moe"] = None
            continue
        by_proj = {q: _expert_stats([x for x in er if x["projection"] == q])
                   for q in sorted({x["projection"] for x in er})}
        pl["moe"] = {
            "experts": dict(_expert_stats(er), by_projection=by_proj),
            "routers": [{k: rec.get(k) for k in ("name", "projection", "shape", "l2", "l2_share", "s1", "s2", "s1_s2",
                                                  "rank1_fraction")} for rec in routers],
            "shared_experts": ({"names": [rec["name"] for rec in shared],
                                "l2": math.hypot(*(rec["l2"] for rec in shared)),
                                "l2_share": float(sum(rec["l2_share"] for rec in shared)),
                                "s1_s2_max": max((rec["s1_s2"] for rec in shared if rec["s1_s2"] is not None),
                                                 default=None)} if shared else None),
        }
        if fused_rows:   # the block's means count each fused expert matrix as a matrix of its own
            fr = [x for x in fused_rows if x["layer"] == i]
            lr = [rec for rec in recs if rec["layer"] == i]
            s12 = [x["s1_s2"] for x in lr + fr if x["s1_s2"] is not None]
            r1 = [x["rank1_fraction"] for x in lr + fr if x["rank1_fraction"] is not None]
            pl.update({"s1_s2_mean": float(np.mean(s12)) if s12 else None,
                       "rank1_fraction_mean": float(np.mean(r1)) if r1 else None, "n_matrices": len(s12)})
    if fused_rows:
        inner = [rec for rec in recs if rec["kind"] == "block"] + [x for x in fused_rows if x["layer"] is not None]
        s12 = [x["s1_s2"] for x in inner if x["s1_s2"] is not None]
        r1 = [x["rank1_fraction"] for x in inner if x["rank1_fraction"] is not None]
        out.update({"inner_s1_s2_mean": float(np.mean(s12)) if s12 else None,
                    "inner_rank1_fraction_mean": float(np.mean(r1)) if r1 else None, "inner_n_matrices": len(s12)})
    share = {role: float(sum(rec["l2_share"] for rec in recs if rec.get("moe") == role))
             for role in ("expert", "router", "shared_expert")}
    moe_layers = [pl["layer"] for pl in out["per_layer"] if pl.get("moe")]
    out["moe"] = {"n_experts": expert_count(config) or (max((x["expert"] for x in rows), default=-1) + 1),
                  "layers": moe_layers, "n_expert_matrices": len(rows),
                  "l2_share": {"experts": share["expert"], "routers": share["router"],
                               "shared_experts": share["shared_expert"]},
                  "fused_tensors": sorted({x["name"] for x in fused_rows}),
                  "aggregation": MOE_AGGREGATION}


# ------------------------------------------------ across checkpoints / runs
def _abs_cos(a: np.ndarray, b: np.ndarray) -> float:
    m = min(a.size, b.size)
    a, b = a[:m].astype(np.float64), b[:m].astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(abs(a @ b) / (na * nb)) if na > 0 and nb > 0 else 0.0


def _alignment(runs: list[_Run], b: Checkpoint, paths: list[str]) -> dict[str, Any]:
    """|cos| of each checkpoint's leading u, v against the last checkpoint's (FADE Table 12)."""
    last = runs[-1]
    L = b.num_layers
    parts = thirds(L)

    def cos(name: str) -> list[tuple[float | None, float | None]]:
        out = []
        for r in runs:
            if name in r.vectors and name in last.vectors:
                (u, v), (ul, vl) = r.vectors[name], last.vectors[name]
                out.append((_abs_cos(u, ul), _abs_cos(v, vl)))
            else:
                out.append((None, None))
        return out

    head = cos(b.head)
    block_mats = [n for n in last.vectors if last.pairs[n].kind == "block"]
    per_layer: dict[int, list[list[tuple]]] = {i: [] for i in range(L)}
    for nm in block_mats:
        per_layer[last.pairs[nm].layer].append(cos(nm))

    def mean_over(layers_: list[int], which: int) -> list[float | None]:
        res = []
        for j in range(len(runs)):
            vals = [c[j][which] for i in layers_ for c in per_layer[i] if c[j][which] is not None]
            res.append(float(np.mean(vals)) if vals else None)
        return res

    return {
        "reference": paths[-1],
        "checkpoints": paths,
        "steps": [_step_of(p) for p in paths],
        "output_head": {"name": b.head, "u": [c[0] for c in head], "v": [c[1] for c in head]},
        "thirds": {k: {"layers": ls, "u": mean_over(ls, 0), "v": mean_over(ls, 1)} for k, ls in parts.items()},
        "per_layer": [{"layer": i, "u": mean_over([i], 0), "v": mean_over([i], 1)} for i in range(L)],
        "note": "|cos| between the leading singular vectors of each checkpoint's ΔW and those of the "
                "last checkpoint; blocks: mean over the 2-D weights of the layers of each third",
    }


def _clustering(runs: list[_Run], cross: dict[str, tuple[np.ndarray, list[int]]], b: Checkpoint,
                paths: list[str]) -> dict[str, Any]:
    """Pairwise cosine of the flattened ΔW (global and per layer), average-linkage
    hierarchical clustering on 1 − cos (scipy), |cos| of the head's u and v between runs."""
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    n = len(runs)

    def cosine(G: np.ndarray) -> np.ndarray:
        d = np.sqrt(np.clip(np.diag(G), 0, None))
        with np.errstate(invalid="ignore", divide="ignore"):
            C = G / np.outer(d, d)
        C[~np.isfinite(C)] = 0.0
        C = np.clip(C, -1.0, 1.0)
        np.fill_diagonal(C, np.where(d > 0, 1.0, 0.0))
        return C

    members: dict[str, list[tuple[np.ndarray, list[int]]]] = {}
    for nm, part in cross.items():
        p = runs[0].pairs[nm]
        g = f"layer {p.layer}" if p.layer is not None else ("output head" if p.kind == "head" else p.kind)
        members.setdefault(g, []).append(part)
    groups = {g: _aligned_sum(parts) for g, parts in members.items()}
    total = _aligned_sum(list(cross.values()))
    C = cosine(total)
    Dm = np.clip(1.0 - C, 0.0, 2.0)
    np.fill_diagonal(Dm, 0.0)
    Z = linkage(squareform(Dm, checks=False), method="average")

    def vec_cos(which: int) -> list[list[float | None]]:
        out = []
        for ra in runs:
            row = []
            for rb in runs:
                if b.head in ra.vectors and b.head in rb.vectors:
                    row.append(_abs_cos(ra.vectors[b.head][which], rb.vectors[b.head][which]))
                else:
                    row.append(None)
            out.append(row)
        return out

    order = sorted(groups, key=lambda g: (0, int(g.split()[1])) if g.startswith("layer ") else (1, g))
    return {
        "labels": paths,
        "cosine_global": C.tolist(),
        "cosine_per_layer": {g: cosine(groups[g]).tolist() for g in order},
        "linkage": Z.tolist(),
        "leaf_order": [int(i) for i in leaves_list(Z)],
        "method": "average",
        "distance": "1 - cos",
        "head_u_abs_cos": vec_cos(0),
        "head_v_abs_cos": vec_cos(1),
        "n": n,
    }


def to_frame(doc: dict) -> pd.DataFrame:
    """The per-tensor records of a :func:`diff` document as one long pandas DataFrame.

    One row per (checkpoint, tensor): ``checkpoint`` (path), ``step``, ``name``, ``kind``,
    ``layer``, ``l2``, ``relative_l2``, ``l2_share``, ``s1``, ``s2``, ``s1_s2``,
    ``rank1_fraction``, ``stable_rank`` and ``density_<tol>`` columns.
    """
    import pandas as pd

    rows = []
    for c in doc["checkpoints"]:
        for r in c["layers"]:
            row = {"checkpoint": c["path"], "step": c.get("step")}
            row.update({k: r.get(k) for k in ("name", "kind", "layer", "l2", "relative_l2", "l2_share", "s1", "s2",
                                               "s1_s2", "rank1_fraction", "stable_rank")})
            row.update({f"density_{k}": v for k, v in r["density"].items()})
            rows.append(row)
    return pd.DataFrame(rows)
