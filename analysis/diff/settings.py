"""Fixed settings of the checkpoint diff and the JSON conventions every diff module shares.

Accepted argument values (:data:`LAYERS`, :data:`CASTS`), the thresholds and fractions the
report is keyed by (:data:`TOLERANCES`, :data:`SRANK_DELTAS`, :data:`ENERGY_FRACTIONS`), the
phases of ``timings_s`` (:data:`PHASES`), the BLAS threads of a CPU diff
(:data:`CPU_BLAS_THREADS`), and the two JSON helpers :func:`_key` and :func:`_finite`.
Constants only: nothing here changes while a diff runs.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["TOLERANCES", "SRANK_DELTAS", "ENERGY_FRACTIONS", "LAYERS", "CASTS", "PHASES", "CPU_BLAS_THREADS",
           "SERIES_SAMPLE", "SERIES_SEED", "RANDOM_WALKS", "MASK_FRACTION"]

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
#: phases of :func:`analysis.diff.diff`'s ``timings_s`` (seconds of the main thread's wall time
#: spent in each; ``spectra`` with background workers: the time it waited for them)
PHASES = ("read", "difference", "norms_densities", "rounding_floor", "head_spectrum", "spectra", "cross", "finish")
#: OpenBLAS threads during a CPU diff (``None``: leave the process's setting).  numpy and scipy
#: each bundle their own OpenBLAS; their two thread pools, alternating call by call, busy-wait
#: against each other: on the 2-core test machine (load 3-5 from other jobs) the 0.5B benchmark
#: took 226 s with the default 2 threads in both, 177 s / 242 s with one of them at 1, and 36 s
#: with both at 1 (at load 1.5: 25.9 s with 2 threads, 23.0 s with 1).  The previous setting is
#: restored afterwards.  The cores are used by the ``workers`` of
#: :class:`analysis.diff.run.DiffRun` instead (``benchmarks/bench_diff_workers.py``: at load
#: 3.6-7.3, 58 s side by side against 374 s with two BLAS threads per call; quiet: 10.8 s against
#: 11.4 s).
CPU_BLAS_THREADS: int | None = 1

#: series dynamics (:mod:`analysis.diff.dynamics`): entries sampled per tensor for the linearity
#: in the step (all entries of a smaller tensor), and the seed of that sample and of the random walks
SERIES_SAMPLE = 4096
SERIES_SEED = 0
#: Gaussian random walks over the series' steps whose R² is the linearity's baseline
RANDOM_WALKS = 20_000
#: q of the update masks compared across runs (the top ⌈q·N⌉ entries of |ΔW| per tensor)
MASK_FRACTION = 0.05

#: ``rank`` value meaning "every singular direction" (the whole ΔW: RL back)
RANK_FULL = "full"
#: accepted values of ``others`` (where 1-D and other non-matrix floating-point tensors come from)
OTHERS = ("rl", "base")
#: largest shard (bytes of tensor data) before another shard is started (save_pretrained's 5 GB)
DEFAULT_MAX_SHARD_SIZE = 5 * 10**9


def _key(x: float) -> str:
    """JSON key of a tolerance / δ / fraction: ``0`` → ``"0"``, ``1e-5`` → ``"1e-05"``."""
    return f"{x:g}"


def _finite(x: Any) -> float | None:
    """A JSON-safe float: ``None`` for inf/NaN (e.g. ``s1/s2`` of an exactly rank-1 ``ΔW``)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
