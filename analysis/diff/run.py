"""The state of one checkpoint diff: :class:`DiffRun`, created per :func:`analysis.diff.diff` call.

Everything that used to live in module globals while a diff ran (the background spectra, the
phase timings) is held here and passed down, so two diffs in one process (two notebook threads)
share nothing:

- :class:`DiffRun`: the settings every measurement needs (device, array backend, ``top_k``,
  ``layers``, ...), the ``workers`` and their :class:`_Background` spectra, the phase timings
  and the progress bar.
- :class:`_Background`: top-``k`` spectra of block weights computed by worker threads while the
  main thread reads the next tensors.
- :class:`_Tally`: the accumulators of one RL checkpoint.
- :func:`_blas_threads`: the BLAS thread count of a CPU diff, restored afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..checkpoints import Checkpoint, TensorPair
from .settings import PHASES, TOLERANCES

__all__ = ["DiffRun"]


class _Background:
    """Top-``k`` spectra of the block weights computed by ``workers`` threads side by side
    (``analysis.spectra``'s ``"gram32"`` releases the GIL in every heavy step, each call on one
    BLAS thread: no thread pools spinning against each other on a busy machine), while the main
    thread reads and differences the next tensors.  At most ``2·workers`` jobs are queued or
    running (a worker that finishes finds the next job waiting instead of idling while the main
    thread reads); each job's ``fill`` runs in the main thread, in submission order.
    ``workers = 1``: inline.  ``phase`` is :meth:`DiffRun.phase` (the main thread's waits count
    as ``"spectra"``)."""

    def __init__(self, workers: int, phase: Any):
        self.workers = workers
        self.phase = phase
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="rlvr-diff") if workers > 1 else None
        self.pending: collections.deque = collections.deque()

    def submit(self, job: Any, fill: Any) -> None:
        if self.pool is None:
            with self.phase("spectra"):
                fill(job())
            return
        while len(self.pending) >= 2 * self.workers:
            self._pop()
        self.pending.append((self.pool.submit(job), fill))

    def _pop(self) -> None:
        fut, fill = self.pending.popleft()
        with self.phase("spectra"):   # the main thread's wait: the spectra that reading did not hide
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


@dataclass
class DiffRun:
    """What one :func:`analysis.diff.diff` call measures with, and what it accumulates on the way.

    Attributes
    ----------
    device : torch.device
        Where differences, reductions and SVDs run.
    ops : analysis.diff.stream._Ops
        The array backend (numpy on the CPU, torch on CUDA).
    workers : int
        Threads computing block spectra side by side on the CPU (``>= 1``; 1: inline).
    top_k, layers, full_spectrum, cast
        The arguments of :func:`analysis.diff.diff`.
    vectors : bool
        Keep the leading singular vectors of every weight (alignment needs them: two or more
        checkpoints); the head's are always kept.
    geometry : bool
        Measure the geometry of every weight matrix's update relative to the base
        (:mod:`analysis.diff.geometry_pass`) during the tensor pass.
    dynamics : analysis.diff.dynamics.Dynamics or None
        The series dynamics or the update masks across runs, fed during the tensor pass
        (:mod:`analysis.diff.dynamics`); ``None``: off.
    timings : dict
        Seconds of the main thread per phase (:data:`analysis.diff.settings.PHASES`).
    background : _Background or None
        The background spectra while the tensor pass runs (:meth:`spectra_workers`).
    geometry_base : dict
        ``geometry=True``: ``W_base``'s spectrum of the tensor being measured, shared by every
        checkpoint (:func:`analysis.diff.geometry_pass._spectra`).
    bar : tqdm or None
        The progress bar over tensors.
    """

    device: torch.device
    ops: Any
    workers: int = 1
    top_k: int = 64
    layers: str = "all"
    full_spectrum: bool = False
    cast: str | None = None
    vectors: bool = False
    geometry: bool = False
    dynamics: Any = None
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    background: _Background | None = None
    bar: Any = None
    geometry_base: dict[Any, Any] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the wall time of the block to ``timings[name]``."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t

    @contextlib.contextmanager
    def spectra_workers(self) -> Iterator[_Background]:
        """The :class:`_Background` of this run (``workers`` threads on a numpy CPU diff, inline
        otherwise) for the duration of the block; closed, its threads joined, afterwards."""
        n = self.workers if self.device.type == "cpu" and not self.ops.torch else 1
        self.background = _Background(n, self.phase)
        try:
            yield self.background
        finally:
            self.background.close()
            self.background = None

    def tick(self) -> None:
        """One tensor of one checkpoint done (progress bar)."""
        if self.bar is not None:
            self.bar.update(1)


class _Tally:
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
        self.geometry: list[dict[str, Any]] = []   # per matrix, with geometry=True (analysis.diff.geometry_pass)


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
