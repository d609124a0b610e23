"""Singular-value metrics of a matrix: the one SVD implementation of the project.

Used on the output-head update ``W_Δ = W_rl − W_sft`` of FADE Sec. 4.2 / App. 15,
on every per-layer ``ΔW`` of a checkpoint diff, and by the simulators.  For a matrix ``W``
(``m × n``, ``d = min(m, n)``) with singular values ``σ_1 ≥ … ≥ σ_d ≥ 0``:

=====================  ====================================================  ==========================
metric                 definition                                            source
=====================  ====================================================  ==========================
``s1_s2``              ``σ_1/σ_2``                                           FADE Fig. 5, Sec. 5 table
``rank1_fraction``     ``r_1 = σ_1²/‖W‖_F²``                                 FADE Eq. 8 / App. 15.1
``stable_rank``        ``‖W‖_F²/σ_1² = 1/r_1``                               Rudelson & Vershynin 2007
``effective_rank``     ``exp(−Σ p_i log p_i)``, ``p_i = σ_i/Σ_j σ_j``        Roy & Vetterli 2007
``srank(δ)``           ``min{k : Σ_{i≤k} σ_i / Σ_i σ_i ≥ 1 − δ}``            FADE Fig. 5 (Kumar 2020)
=====================  ====================================================  ==========================

Everything goes through :func:`spectrum`, which returns a :class:`Spectrum`; every metric
accepts either a matrix (then it calls :func:`spectrum` with the keyword options given) or
a :class:`Spectrum` (then nothing is recomputed).  Inputs: numpy arrays or torch tensors,
on CPU or CUDA, float16 / bfloat16 / float32 / float64 (integers and bools are accepted
too).  All arithmetic is float64: the matrix is streamed in row blocks, each block
upcast on the compute device, so no float64 copy of a large matrix is ever made.
Results are float64 numpy arrays on the CPU.

Methods (``method=``)
---------------------
``"svd"``
    LAPACK/cuSOLVER SVD of a float64 copy; the default for matrices of at most 2^20
    entries.  Absolute accuracy ``≈ ε₆₄·σ_1``.
``"gram"``
    the default above 2^20 entries.  Let ``A`` be ``W`` or ``Wᵀ``, whichever is tall
    (``m ≥ n``).  ``G = AᵀA`` (``n × n``) is accumulated in float64 over row blocks and
    eigendecomposed: ``σ_i = sqrt(λ_i(G))``.  Memory: the matrix, one float64 block
    (64 MiB), and two ``n × n`` float64 arrays (``G`` and its eigenvectors); about 1.1× a
    152,064 × 3,584 float32 matrix.  Cost: ``m·n²`` flops (``A`` is read once) plus the
    ``n × n`` eigensolver.

    *Accuracy.*  Forming ``G`` squares the condition number: the float64 eigensolver
    has an absolute error of ``η·σ_1²`` on every ``λ_i`` (``η ≈ 10⁻¹⁶…10⁻¹⁴``), so the
    relative error of ``σ_i`` is about ``η·(σ_1/σ_i)²/2``: ≤ 10⁻⁸ for ``σ_i ≥ 10⁻³σ_1``,
    but singular values below ``sqrt(η)·σ_1 ≈ 10⁻⁸σ_1`` are lost.  With ``refine=True``
    (default) the values below ``10⁻³`` times the largest are recomputed by a
    Rayleigh–Ritz step on ``A`` itself: with ``V_t`` the Gram eigenvectors of that tail,
    ``B = A·V_t`` is formed block by block (float64), the small Gram ``BᵀB`` is
    eigendecomposed, and its square-rooted eigenvalues replace the tail.  ``BᵀB`` has the
    scale of the tail, not of ``σ_1²``, so its rounding error is relative to the tail; the
    step is repeated on the sub-tail below ``10⁻³`` of the new tail maximum (at most
    four levels) until the tail falls below the float64 noise floor ``10⁻¹³σ_1``.  The
    leading ``n_vectors`` singular triplets always get one Rayleigh–Ritz step
    (``Y = A·V_r``, thin SVD of ``Y``), so ``u_i = A v_i/σ_i`` holds to rounding.
    Achieved accuracy (``tests/analysis/test_spectra.py``: mpmath at 50 digits and float64 LAPACK
    as references): refined singular values carry an absolute error of about
    ``10⁻¹⁶·σ_1²/σ_e``, with ``σ_e ≥ 10⁻³σ_1`` the smallest value taken from the Gram step
    (the leak of the top directions into the tail's basis): ``≤ ~10⁻¹³·σ_1`` (worst case
    built: ``1.1·10⁻¹³σ_1``), typically ``10⁻¹⁵·σ_1`` like LAPACK's SVD; i.e. relative
    error ``≲ 10⁻¹³·σ_1/σ_i``.  Examples: ``3·10⁻¹⁶σ_1`` over a graded spectrum
    ``1 … 10⁻¹²``; ``σ_2`` of a matrix with ``σ_1/σ_2 = 10⁶`` to ``10⁻¹¹`` relative.
    Without refinement the absolute error is ``≲ 2·10⁻⁸σ_1``.
    The refinement costs ``2·m·n·t`` flops for a tail of ``t`` values (nothing when
    ``σ_d ≥ 10⁻³σ_1``, as for a noisy ``ΔW``; up to another Gram pass for a numerically
    rank-deficient matrix).
``"randomized"``
    top ``k`` only: randomized range finder with ``n_iter`` power iterations
    (QR-reorthonormalised) and ``n_oversamples`` extra columns (Halko, Martinsson & Tropp
    2011, Alg. 4.4 + 5.1), Gaussian test matrix drawn on the CPU from a seeded
    ``torch.Generator`` (identical on every device).  Cost ``2·(n_iter+1)·m·n·(k+p)``
    flops and ``2·n_iter+2`` passes over the matrix.

``"gram32"``
    top ``k`` only, for large float32 matrices on the CPU (the per-matrix top-``k`` metrics of a
    checkpoint diff); any other input or device runs ``"gram"``.  Three steps: (1) ``G₃₂ = AᵀA``
    by BLAS ``ssyrk`` over float32 row blocks (``A`` multiplied by a power of two first only
    when ``max|A|`` lies outside ``[2^-50, 2^40]``, where float32 squares could under- or
    overflow): one pass, half the flops of a GEMM at twice the float64
    speed; (2) the ``b = k + p`` leading eigenvectors of ``G₃₂`` (``p = max(n_oversamples, 16)``)
    by LAPACK ``ssyevr`` (float32, only the ``b`` wanted), orthonormalised again in float64 by a
    QR; (3) a Rayleigh–Ritz step on ``A`` itself in float64 (the ``R`` factor of ``Y = A·V_b`` by
    a QR streamed over row blocks, so ``Y`` is never stored, and the SVD of ``R``; the ``r``
    requested left vectors ``u_i = A v_i/σ_i`` in one more pass), which also gives the exact
    ``‖A‖_F``.  The float32 Gram and eigensolver only choose the subspace: the singular values
    come from step (3) and are lower bounds of the true ones whose error is quadratic in the
    subspace angle.  Step (2)'s float64 QR matters: ``ssyevr``'s vectors are orthonormal only to
    float32 rounding, which would enter the values at ``10⁻⁷``.  Accuracy
    (``tests/analysis/test_diff_accuracy_fast.py``, float64 LAPACK SVD as reference): relative
    error of each of the top ``k`` values ``≤ 10⁻¹¹`` (measured ``~10⁻¹³`` on noise, spike +
    noise and graded spectra, ``6·10⁻¹³`` on a 7B-shaped noise matrix with a flat
    Marchenko–Pastur spectrum, the hard case); ``s1/s2`` and ``r_1`` likewise; the returned
    singular vectors to first order in the float32 rounding (``‖A v − σ u‖ ≤ 10⁻⁶σ_1``).  Cost:
    ``m·n²/2`` float32 multiply-adds, ``~(4/3)·n³`` float32 flops for the eigensolver, ``m·n·b``
    float64 multiply-adds (on a 18,944 × 3,584 matrix, a 7B MLP weight, two threads: 1.4 s of
    float32 Gram, 0.8 s eigensolver, 0.25 s Rayleigh–Ritz; the block Krylov eigensolver this
    replaces took 3.75 s and was accurate to ``10⁻¹⁰``).

``‖W‖_F`` (``Spectrum.fro_norm``) is always exact: the square root of the float64 sum of
squares (the trace of ``G`` for ``"gram"``), also when only the top ``k`` singular values
are computed.

Conventions
-----------
* ``σ`` in descending order, float64, ``σ_i ≥ 0``.  Values at the noise floor
  (``≲ 10⁻¹⁵σ_1``) are reported as computed, not rounded to 0.
* Singular vectors are unique only up to sign: we make the entry of largest modulus of
  each left vector ``u_i`` positive (the first such entry on a tie) and flip ``v_i``
  with it, so that ``W v_i = σ_i u_i``.  With ``W = W_rl − W_sft`` (FADE Sec. 4.2; its
  Fig. 5 caption writes ``W_sft − W_rl``) the sign of ``ΔW`` does not matter.
* ``r_1`` is clipped to ``≤ 1`` and the stable rank to ``≥ 1`` (rounding can push an
  exactly rank-1 matrix over the bound by one ulp).  ``s1_s2`` is ``inf`` when
  ``σ_2 = 0`` exactly or ``d = 1``.
* The ratio metrics are undefined for the zero matrix and raise a ``ValueError``.
* Magnitude: a matrix whose squares would leave the float64 range (entries above ``1e100``
  or below ``1e-100``, subnormals included) is multiplied by a power of two ``2^e`` (exact;
  ``ldexp``, so ``2^1074`` is never formed) before any square, Gram matrix or SVD, on every
  path, and the results are multiplied back by ``2^-e``.  A Frobenius norm beyond the largest
  float64 is refused (``ValueError``: "W is too large ...").
* ``device="auto"``: the device of a CUDA tensor; else CUDA when
  ``torch.cuda.is_available()`` and the matrix has more than 2^20 entries (smaller ones
  stay on the CPU, where the transfer would cost more than the work); else the CPU.
"""

from __future__ import annotations

import ctypes
import math
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.linalg
import torch
from scipy.linalg.blas import dsyrk, ssyrk

from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device

__all__ = [
    "Spectrum",
    "spectrum",
    "singular_values",
    "s1_s2",
    "rank1_fraction",
    "stable_rank",
    "effective_rank",
    "srank",
    "leading_vectors",
    "successive_alignment",
    "summary",
    "resolve_device",
    "METHODS",
]

#: accepted values of ``method=``
METHODS = ("auto", "svd", "gram", "randomized", "gram32")

_SMALL = 1 << 20            # auto: "svd" up to this many entries, and stay on the CPU
_BLOCK_ELEMS = 1 << 23      # float64 entries per streamed block (64 MiB)
_TRUST = 1e-3               # Gram values below _TRUST × (scale) are refined
_FLOOR = 1e-13              # stop refining below _FLOOR × σ_1 (float64 noise floor)
_MAX_LEVELS = 4
_SAFE = (1e-100, 1e100)     # entry magnitudes whose squares and sums stay normal in float64
_FLOAT64_MAX = float(np.finfo(np.float64).max)
_TORCH_ON_CPU = False       # tests only: run the torch (CUDA) code path on CPU tensors


# ------------------------------------------------------------------ Spectrum
@dataclass(frozen=True)
class Spectrum:
    """Singular values (and optionally leading singular vectors) of one matrix.

    Attributes
    ----------
    s : ndarray, shape (k,)
        Singular values in descending order (all ``d = min(shape)`` of them, or the top ``k``).
    fro_norm : float
        ``‖W‖_F``, exact (float64 sum of squares) even when only the top ``k`` are in ``s``.
        The norm, not its square, so that matrices with entries up to 1e300 stay finite.
    shape : (int, int)
        Shape of the matrix.
    u, v : ndarray or None
        Leading left (``m × r``) and right (``n × r``) singular vectors, ``W v_i = σ_i u_i``,
        sign convention of the module docstring; ``None`` if not requested.
    method : str
        How ``s`` was computed (``"svd"``, ``"gram"``, ``"randomized"``, ``"given"``).
    """

    s: np.ndarray
    fro_norm: float
    shape: tuple[int, int]
    u: np.ndarray | None = None
    v: np.ndarray | None = None
    method: str = "given"

    @property
    def d(self) -> int:
        """``min(shape)``: the number of singular values of the matrix."""
        return min(self.shape)

    @property
    def complete(self) -> bool:
        """Whether ``s`` holds all ``d`` singular values (needed by srank and effective rank)."""
        return len(self.s) == self.d

    @classmethod
    def from_singular_values(cls, s: Any, *, shape: tuple[int, int] | None = None,
                             fro_norm: float | None = None) -> Spectrum:
        """A :class:`Spectrum` from given singular values (e.g. computed elsewhere).

        ``s``: finite, non-negative, any order (sorted here).  ``shape`` defaults to
        ``(len(s), len(s))``; if ``s`` holds fewer than ``min(shape)`` values, ``fro_norm``
        is required, else it defaults to ``sqrt(Σ s²)``.
        """
        arr = checks.array("s", s, ndim=1, low=0.0, nonempty=True)
        arr = np.sort(arr)[::-1].copy()
        if shape is None:
            shape = (arr.size, arr.size)
        shape = tuple(int(x) for x in shape)  # type: ignore[assignment]
        if len(shape) != 2 or min(shape) < arr.size:
            raise ValueError(f"shape must be (m, n) with min(m, n) >= len(s) = {arr.size}, got {shape}")
        top = arr[0] if arr[0] > 0 else 1.0
        norm = top * float(np.sqrt(np.sum((arr / top) ** 2)))
        if fro_norm is None:
            if arr.size < min(shape):
                raise ValueError(f"fro_norm is required when s holds {arr.size} < min(shape) = "
                                 f"{min(shape)} singular values")
            fro_norm = norm
        fro_norm = float(fro_norm)
        if not math.isfinite(fro_norm) or fro_norm < norm * (1 - 1e-12):
            raise ValueError(f"fro_norm must be finite and >= sqrt(sum(s**2)) = {norm!r}, got {fro_norm!r}")
        arr.setflags(write=False)
        return cls(arr, fro_norm, shape, method="given")  # type: ignore[arg-type]


# ------------------------------------------------------------------- inputs
Matrix = Any  # np.ndarray | torch.Tensor (validated 2-D, non-empty, real)
_NP_OK = {torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool}


def _as_matrix(W: Any) -> Matrix:
    """``W`` as a 2-D real numpy array or torch tensor, without copying it."""
    if isinstance(W, Spectrum):
        raise ValueError("W must be a matrix here, not a Spectrum")
    if isinstance(W, torch.Tensor):
        a: Matrix = W.detach()
        if a.is_complex():
            raise ValueError(f"W must be real, got dtype {a.dtype}")
        if not a.is_cuda and a.dtype in _NP_OK:
            a = a.numpy()  # CPU work is done with numpy/scipy (one BLAS, see _Stream)
    else:
        a = W if isinstance(W, np.ndarray) else np.asarray(W)
        if a.dtype.kind not in "biuf":
            raise ValueError(f"W must be a real numeric matrix, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"W must be a 2-D matrix, got a {a.ndim}-D array of shape {tuple(a.shape)}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"W must be non-empty, got shape {tuple(a.shape)}")
    return a


def _shape(W: Matrix) -> tuple[int, int]:
    return int(W.shape[0]), int(W.shape[1])


def _check_delta(delta: Any, name: str) -> np.ndarray:
    """δ of srank: numbers in the open interval (0, 1) (:func:`rlvr_plumbing.checks.array`)."""
    return checks.array(name, delta, low=0.0, high=1.0, low_open=True, high_open=True, nonempty=True)


# ------------------------------------------------- numpy (CPU) / torch (CUDA)
# On the CPU every BLAS/LAPACK call goes through numpy/scipy (OpenBLAS): alternating with
# torch's MKL/OpenMP pool makes each library wait for the other's spinning threads, which
# costs up to 0.3 s per switch on a 2-core machine.  On CUDA everything is torch.
Arr = Any  # np.ndarray (CPU) | torch.Tensor (CUDA)


def _eigh_desc(G: Arr, vectors: bool, upper: bool = False) -> tuple[Arr, Arr | None]:
    """Eigenvalues (descending) and optionally eigenvectors of a symmetric matrix.
    ``upper``: only the upper triangle of ``G`` is filled (CPU Gram from syrk)."""
    if isinstance(G, torch.Tensor):
        if vectors:
            lam, V = torch.linalg.eigh(G)
            return lam.flip(0), V.flip(1)
        return torch.linalg.eigvalsh(G).flip(0), None
    if vectors:
        lam, V = scipy.linalg.eigh(G, lower=not upper, driver="evd", check_finite=False)
        return lam[::-1].copy(), V[:, ::-1].copy()
    lam = scipy.linalg.eigh(G, lower=not upper, eigvals_only=True, driver="evd", check_finite=False)
    return lam[::-1].copy(), None


def _svd(A: Arr) -> tuple[Arr, Arr, Arr]:
    """Thin SVD ``A = U diag(s) Vᵀ``; returns ``(U, s, V)``."""
    if isinstance(A, torch.Tensor):
        U, s, Vh = torch.linalg.svd(A, full_matrices=False)
        return U, s, Vh.T
    U, s, Vh = np.linalg.svd(A, full_matrices=False)
    return U, s, Vh.T


def _qr(A: Arr) -> Arr:
    return torch.linalg.qr(A).Q if isinstance(A, torch.Tensor) else np.linalg.qr(A)[0]


def _sqrt_clip(x: Arr) -> Arr:
    return torch.sqrt(torch.clamp(x, min=0.0)) if isinstance(x, torch.Tensor) else np.sqrt(np.maximum(x, 0.0))


def _arange(lo: int, hi: int, like: Arr) -> Arr:
    return torch.arange(lo, hi, device=like.device) if isinstance(like, torch.Tensor) else np.arange(lo, hi)


def _argsort_desc(s: Arr) -> Arr:
    if isinstance(s, torch.Tensor):
        return torch.argsort(s, descending=True, stable=True)
    return np.argsort(-s, kind="stable")


def _cat_cummin(a: Arr, b: Arr) -> Arr:
    """``concat(a, b)`` made non-increasing by a running minimum (fixes 1-ulp inversions)."""
    if isinstance(a, torch.Tensor):
        return torch.cummin(torch.cat([a, b]), 0).values
    return np.minimum.accumulate(np.concatenate([a, b]))


def _ldexp(x: Any, e: int) -> Any:
    """``x · 2**e``, exact (unless the result is subnormal), for any ``e``: also where ``2**e``
    itself is not a float64 (a subnormal matrix needs ``e`` up to 1074)."""
    if e == 0:
        return x
    if isinstance(x, torch.Tensor):  # torch.ldexp forms 2**e: two steps keep each factor finite
        h = e // 2
        return x * math.ldexp(1.0, h) * math.ldexp(1.0, e - h)
    if isinstance(x, np.ndarray):
        return np.ldexp(x, e)
    return math.ldexp(float(x), e)


def _shift_for(amax: float) -> int:
    """The power of two ``e`` that brings ``amax > 0`` into ``[0.5, 1)``: ``amax·2**e``."""
    return -math.frexp(amax)[1]


def _to_np(x: Arr | None) -> np.ndarray | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy().copy()
    return np.array(x, dtype=np.float64, copy=True)


# ---------------------------------------------------------------- streaming
class _Stream:
    """``A`` = ``W`` or ``Wᵀ`` (whichever has ``m ≥ n``) as float64 row blocks:
    numpy arrays when ``dev`` is the CPU, torch tensors on ``dev`` otherwise."""

    def __init__(self, W: Matrix, dev: torch.device, block_rows: int | None, progress: bool, workers: int = 1):
        self.W, self.dev, self.progress, self.workers = W, dev, progress, workers
        self.cpu = dev.type == "cpu" and not _TORCH_ON_CPU
        self.transposed = W.shape[0] < W.shape[1]
        self.m, self.n = _shape(W)[::-1] if self.transposed else _shape(W)
        self.rows = block_rows or max(1, _BLOCK_ELEMS // self.n)
        self.shift = 0  # the arithmetic runs on A·2**shift (rescale_if_needed)

    def raw_blocks(self) -> Iterator[tuple[slice, Matrix]]:
        for i in range(0, self.m, self.rows):
            sl = slice(i, min(i + self.rows, self.m))
            yield sl, (self.W[:, sl].T if self.transposed else self.W[sl])

    def _float64(self, part: Matrix) -> Arr:
        if self.cpu:
            if isinstance(part, torch.Tensor):  # CUDA tensor or bfloat16 (exact in float32)
                part = part.to("cpu")
                part = (part if part.dtype in _NP_OK else part.to(torch.float32)).numpy()
            blk = np.asarray(part, dtype=np.float64)
        else:
            if isinstance(part, np.ndarray):
                part = _np_to_torch(part)
            blk = part.to(self.dev).to(torch.float64)
        return _ldexp(blk, self.shift)

    def blocks(self, desc: str) -> Iterator[tuple[slice, Arr]]:
        it: Any = self.raw_blocks()
        if self.progress:
            from tqdm.auto import tqdm
            it = tqdm(it, total=-(-self.m // self.rows), desc=desc, unit="block", leave=False)
        for sl, part in it:
            yield sl, self._float64(part)

    def zeros(self, *shape: int) -> Arr:
        return np.zeros(shape) if self.cpu else torch.zeros(shape, dtype=torch.float64, device=self.dev)

    def asarray(self, x: torch.Tensor) -> Arr:
        return x.to("cpu", torch.float64).numpy() if self.cpu else x.to(self.dev, torch.float64)

    def rescale_if_needed(self, fro2: float) -> bool:
        """After a first pass: refuse NaN/inf, and pick a power-of-2 scale if the float64
        squares overflowed or underflowed.  True if the pass must be redone with it."""
        if math.isfinite(fro2) and _SAFE[0] ** 2 <= fro2 <= _SAFE[1] ** 2:
            return False
        amax = 0.0
        for _, part in self.raw_blocks():
            if isinstance(part, torch.Tensor):
                a = float((part if part.is_floating_point() else part.to(torch.float64)).abs().amax())
            else:
                a = float(np.max(np.abs(part.astype(np.float64, copy=False))))
            if not math.isfinite(a):
                raise ValueError("W must contain only finite values (found NaN or inf)")
            amax = max(amax, a)
        if amax == 0.0:
            return False
        self.shift = _shift_for(amax)
        return True

    def gram(self) -> tuple[Arr, float]:
        """``G = AᵀA`` (float64; on the CPU only its upper triangle) and ``‖A‖_F² = trace(G)``."""
        n = self.n
        if self.cpu:  # BLAS syrk: half the flops of a GEMM, accumulated in place
            G = _gram_of_blocks((blk for _, blk in self.blocks("Gram")), n, np.float64, self.workers)
            return G, float(np.trace(G))
        Gt = torch.zeros(n, n, dtype=torch.float64, device=self.dev)
        for _, blk in self.blocks("Gram"):
            Gt.addmm_(blk.T, blk)
        return Gt, float(torch.diagonal(Gt).sum())

    def matmul(self, X: Arr, *, want_fro2: bool = False) -> tuple[Arr, float]:
        """``A @ X`` (``m × r``) and, if asked, ``‖A‖_F²`` in the same pass."""
        Y = self.zeros(self.m, X.shape[1])
        fro2 = 0.0
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # see rescale_if_needed
            for sl, blk in self.blocks("A @ X"):
                Y[sl] = blk @ X
                if want_fro2:
                    fro2 += float((blk * blk).sum())
        return Y, fro2

    def rmatmul(self, Y: Arr) -> Arr:
        """``Aᵀ @ Y`` (``n × r``)."""
        Z = self.zeros(self.n, Y.shape[1])
        for sl, blk in self.blocks("Aᵀ @ Y"):
            Z += blk.T @ Y[sl]
        return Z

    def gram_of_product(self, X: Arr) -> Arr:
        """``(A X)ᵀ(A X)`` without storing ``A X``."""
        C = self.zeros(X.shape[1], X.shape[1])
        for _, blk in self.blocks("Rayleigh-Ritz"):
            B = blk @ X
            C += B.T @ B
        return C


def _np_to_torch(a: np.ndarray) -> torch.Tensor:
    try:
        with warnings.catch_warnings():  # read-only arrays: we never write to W
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(a)
    except (TypeError, ValueError, RuntimeError):  # negative strides, byte order, uint16, float128
        b = np.ascontiguousarray(a)
        try:
            return torch.from_numpy(b)
        except (TypeError, ValueError, RuntimeError):
            return torch.from_numpy(b.astype(np.float64))


# ---------------------------------------------------------------- algorithms
def _rayleigh_ritz_top(st: _Stream, V: Arr) -> tuple[Arr, Arr, Arr]:
    """Singular triplets of ``A`` restricted to span(V): thin SVD of ``Y = A V``."""
    Y, _ = st.matmul(V)
    U, s, Z = _svd(Y)
    return U, s, V @ Z


def _gram(st: _Stream, k: int | None, r: int, refine: bool) -> tuple:
    G, fro2 = st.gram()
    if st.rescale_if_needed(fro2):
        G, fro2 = st.gram()
    if fro2 == 0.0:
        return None, 0.0, None, None
    d = st.n
    want = d if k is None else k
    lam, V = _eigh_desc(G, vectors=r > 0, upper=st.cpu)
    s = _sqrt_clip(lam)
    s1 = float(s[0])
    t0 = int((s >= _TRUST * s1).sum())  # s[t0:] is the untrusted tail
    do_refine = refine and t0 < want
    if do_refine and V is None:
        lam, V = _eigh_desc(G, vectors=True, upper=st.cpu)
        s = _sqrt_clip(lam)
    del G
    if do_refine:
        tail = _arange(t0, d, s)
        for _ in range(_MAX_LEVELS):
            mu, Z = _eigh_desc(st.gram_of_product(V[:, tail]), vectors=True)
            vals = _sqrt_clip(mu)
            s[tail] = vals
            V[:, tail] = V[:, tail] @ Z
            top = float(vals[0])
            keep = vals < _TRUST * top
            if top <= _FLOOR * s1 or not bool(keep.any()):
                break
            tail = tail[keep]
        order = _argsort_desc(s)
        s, V = s[order], V[:, order]
    U = None
    if r > 0:
        U, s_top, V = _rayleigh_ritz_top(st, V[:, :r])
        # the Rayleigh-Ritz values are the accurate ones: keep them first, order non-increasing
        s = _cat_cummin(s_top, s[r:])
    return s[:want], fro2, U, V


def _float32_input(A: Matrix) -> bool:
    return isinstance(A, np.ndarray) and A.dtype == np.float32


def _nogil(module: str, name: str, nargs: int) -> Any:
    """The BLAS/LAPACK routine ``name`` of :mod:`scipy.linalg.cython_blas` / ``cython_lapack``
    (``module``) as a ctypes function, which releases the GIL while it runs (scipy's f2py
    wrappers hold it, so two diff workers calling ``scipy.linalg.eigh`` would take turns);
    ``None`` where scipy does not export it."""
    try:
        import importlib

        cap = importlib.import_module(f"scipy.linalg.{module}").__pyx_capi__[name]
        get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
        get_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
        return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))(get_ptr(cap, get_name(cap)))
    except (ImportError, AttributeError, KeyError, ValueError):  # pragma: no cover - an unusual scipy build
        return None


_SSYEVR = _nogil("cython_lapack", "ssyevr", 21)
_SSYRK = _nogil("cython_blas", "ssyrk", 10)
_DSYRK = _nogil("cython_blas", "dsyrk", 10)


def _syrk(G: np.ndarray, blk: np.ndarray) -> np.ndarray:
    """``G += blkᵀ·blk`` on the upper triangle of the float32 or float64 ``n × n``
    Fortran-ordered ``G`` (``blk`` of the same dtype; BLAS ``ssyrk``/``dsyrk`` without the GIL,
    scipy's wrapper where that is unavailable)."""
    single = G.dtype == np.float32
    fn, wrapper, scalar = (_SSYRK, ssyrk, ctypes.c_float) if single else (_DSYRK, dsyrk, ctypes.c_double)
    c_ok = blk.flags.c_contiguous
    if fn is None or not (c_ok or blk.flags.f_contiguous):
        return wrapper(1.0, np.ascontiguousarray(blk).T, beta=1.0, c=G, trans=0, lower=0, overwrite_c=1)
    rows, n = blk.shape
    # a C-ordered rows × n block is the Fortran n × rows matrix X = blkᵀ: G += X·Xᵀ ("N");
    # a Fortran-ordered one is blk itself: G += blkᵀ·blk ("T")
    trans, lda = (b"N", n) if c_ok else (b"T", rows)
    ref, c_int, one = ctypes.byref, ctypes.c_int, scalar(1.0)
    fn(ref(ctypes.c_char(b"U")), ref(ctypes.c_char(trans)), ref(c_int(n)), ref(c_int(rows)), ref(one),
       blk.ctypes.data, ref(c_int(lda)), ref(one), G.ctypes.data, ref(c_int(n)))
    return G


_PARTIAL_GRAMS = 2   # the Gram pass accumulates this many partial sums (blocks alternate between them)


def _gram_of_blocks(blocks: Iterator[np.ndarray], n: int, dtype: Any, workers: int) -> np.ndarray:
    """``Σ blkᵀ·blk`` over ``blocks`` (upper triangle, Fortran order): the blocks alternate
    between ``_PARTIAL_GRAMS`` partial sums, added at the end, so the result is the same for
    every ``workers``; with ``workers ≥ 2`` the partial sums are accumulated side by side in
    threads (GIL-free BLAS, one BLAS thread each: no barrier to wait at on a busy machine)."""
    parts = [np.zeros((n, n), dtype=dtype, order="F") for _ in range(_PARTIAL_GRAMS)]
    if workers <= 1:
        for i, blk in enumerate(blocks):
            _syrk(parts[i % _PARTIAL_GRAMS], blk)
    else:
        with ThreadPoolExecutor(min(workers, _PARTIAL_GRAMS), thread_name_prefix="spectra-gram") as ex:
            busy: list[Any] = [None] * _PARTIAL_GRAMS
            it, i = iter(blocks), 0
            while True:
                j = i % _PARTIAL_GRAMS
                if busy[j] is not None:   # the slot's previous block is done (and freed) first:
                    busy[j].result()      # at most _PARTIAL_GRAMS blocks exist at a time
                    busy[j] = None
                blk = next(it, None)
                if blk is None:
                    break
                busy[j] = ex.submit(_syrk, parts[j], blk)
                del blk
                i += 1
            for f in busy:
                if f is not None:
                    f.result()
    G = parts[0]
    for P in parts[1:]:
        G += P
    return G


def _top_eigvecs32(G: np.ndarray, b: int) -> np.ndarray:
    """The ``b`` leading eigenvectors (descending) of the symmetric float32 ``G`` (its upper
    triangle; overwritten), by LAPACK ``ssyevr`` without the GIL (``scipy.linalg.eigh`` with
    the same driver where that is unavailable)."""
    n = G.shape[0]
    if _SSYEVR is None or not (G.dtype == np.float32 and G.flags.f_contiguous):
        return scipy.linalg.eigh(G, lower=False, subset_by_index=[n - b, n - 1], driver="evr",
                                 overwrite_a=True, check_finite=False)[1][:, ::-1]
    c_int, c_float = ctypes.c_int, ctypes.c_float
    jobz, rng, uplo = ctypes.c_char(b"V"), ctypes.c_char(b"I"), ctypes.c_char(b"U")
    nn, il, iu, m, info = c_int(n), c_int(n - b + 1), c_int(n), c_int(0), c_int(0)
    vl, vu, abstol = c_float(0.0), c_float(0.0), c_float(0.0)
    w = np.zeros(n, np.float32)
    z = np.zeros((n, b), np.float32, order="F")
    isuppz = np.zeros(2 * b, np.int32)
    ref = ctypes.byref

    def call(work: np.ndarray, lwork: int, iwork: np.ndarray, liwork: int) -> None:
        _SSYEVR(ref(jobz), ref(rng), ref(uplo), ref(nn), G.ctypes.data, ref(nn), ref(vl), ref(vu), ref(il),
                ref(iu), ref(abstol), ref(m), w.ctypes.data, z.ctypes.data, ref(nn), isuppz.ctypes.data,
                work.ctypes.data, ref(c_int(lwork)), iwork.ctypes.data, ref(c_int(liwork)), ref(info))
        if info.value != 0:
            raise np.linalg.LinAlgError(f"LAPACK ssyevr failed (info = {info.value})")

    work, iwork = np.zeros(1, np.float32), np.zeros(1, np.int32)
    call(work, -1, iwork, -1)   # workspace query
    lwork, liwork = int(work[0]), int(iwork[0])
    call(np.zeros(lwork, np.float32), lwork, np.zeros(liwork, np.int32), liwork)
    return z[:, ::-1]



def _gram32(st: _Stream, k: int, r: int, p: int) -> tuple:
    """Top ``k``: float32 Gram, its leading eigenvectors (float32 LAPACK), float64 Rayleigh–Ritz
    on ``A`` (module docstring, ``"gram32"``).  CPU, float32 ``A`` only."""
    amax = 0.0
    for _, part in st.raw_blocks():
        a = float(np.max(np.abs(part)))
        if not math.isfinite(a):
            raise ValueError("W must contain only finite values (found NaN or inf)")
        amax = max(amax, a)
    if amax == 0.0:
        return None, 0.0, None, None
    st.shift = _shift_for(amax)
    # float32 squares and their sums stay normal and finite for max|A| in [2^-50, 2^40]: the
    # Gram pass then reads A unscaled (G only chooses the subspace; its scale does not matter)
    pre = 0 if -40 <= st.shift <= 50 else st.shift
    n = st.n
    with np.errstate(under="ignore"):
        blocks = (part if pre == 0 else np.ldexp(part, pre).astype(np.float32, copy=False)
                  for _, part in st.raw_blocks())
        G = _gram_of_blocks(blocks, n, np.float32, st.workers)
    # the b leading eigenvectors of the float32 Gram (LAPACK ssyevr on its upper triangle; they
    # do not depend on the power-of-2 scale), orthonormalised again in float64: ssyevr's vectors
    # are orthonormal only to float32 rounding, which would otherwise enter the values below
    b = min(n, k + max(p, 16))
    W = _top_eigvecs32(G, b)
    del G
    W = np.linalg.qr(W.astype(np.float64))[0]
    # Rayleigh-Ritz on A: the R factor of Y = A·W by a streamed QR (Y is never stored), its SVD
    R = np.zeros((0, b))
    fro2 = 0.0
    st.rows = max(b, -(-st.rows // 4))   # smaller blocks: the block, A·W and the QR input stay ≲ 1/4 of a Gram block
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for _, blk in st.blocks("Rayleigh-Ritz"):
            fro2 += float(np.einsum("ij,ij->", blk, blk))   # no block-sized temporary
            R = np.linalg.qr(np.vstack([R, blk @ W]), mode="r")
    _, s, Zt = np.linalg.svd(R)
    V = W @ Zt.T[:, :max(r, 1)]
    U = None
    if r > 0:
        U = st.matmul(V[:, :r])[0]
        U /= s[:r]                       # in place: no second m × r array
    return s[:k], fro2, U, V[:, :r]


def _randomized(st: _Stream, k: int, r: int, n_iter: int, p: int, gen: torch.Generator) -> tuple:
    width = min(k + p, st.n)
    omega = st.asarray(torch.randn(st.n, width, generator=gen, dtype=torch.float64, device=gen.device))
    Y, fro2 = st.matmul(omega, want_fro2=True)
    if st.rescale_if_needed(fro2):
        Y, fro2 = st.matmul(omega, want_fro2=True)
    if fro2 == 0.0:
        return None, 0.0, None, None
    Q = _qr(Y)
    for _ in range(n_iter):
        Q = _qr(st.rmatmul(Q))
        Q = _qr(st.matmul(Q)[0])
    P, s, R = _svd(st.rmatmul(Q))      # Aᵀ Q = P S Rᵀ, so Qᵀ A = R S Pᵀ
    U = Q @ R[:, :r] if r else None
    V = P[:, :r] if r else None
    return s[:k], fro2, U, V


def _direct(W: Matrix, dev: torch.device, k: int | None, r: int) -> tuple:
    """LAPACK (CPU) / cuSOLVER (CUDA) SVD of a float64 copy, scaled by a power of 2."""
    st = _Stream(W, dev, None, False)
    A = st._float64(W)
    amax = float(abs(A).max())
    if not math.isfinite(amax):
        raise ValueError("W must contain only finite values (found NaN or inf)")
    if amax == 0.0:
        return None, 0.0, None, None
    shift = _shift_for(amax)
    A = _ldexp(A, shift)
    fro = math.sqrt(float((A * A).sum()))
    if r > 0:
        U, s, V = _svd(A)
        U, V = U[:, :r], V[:, :r]
    else:
        s = torch.linalg.svdvals(A) if isinstance(A, torch.Tensor) else np.linalg.svd(A, compute_uv=False)
        U = V = None
    s, fro = _unscale(s, fro, shift)
    return (s if k is None else s[:k]), fro, U, V


def _unscale(s: Arr, fro: float, shift: int) -> tuple[Arr, float]:
    """Singular values and norm of ``A·2**shift`` back to those of ``A``; refuse a norm beyond
    the float64 range (the ratio metrics would be inf/inf)."""
    if math.frexp(fro)[1] - shift > 1024:
        raise ValueError(f"W is too large: its Frobenius norm is about 2^{math.log2(fro) - shift:.1f}, beyond "
                         f"the largest float64 ({_FLOAT64_MAX:.4g}); divide it by a power of two first")
    with np.errstate(under="ignore"):
        return _ldexp(s, -shift), math.ldexp(fro, -shift)


def _fix_signs(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Make the largest-|entry| of each column of ``u`` positive (first on ties); flip ``v``
    (in place: ``u`` and ``v`` are :func:`spectrum`'s own copies)."""
    idx = np.concatenate([np.argmax(np.abs(u[:, j:j + 16]), axis=0) for j in range(0, u.shape[1], 16)]
                         ).astype(np.intp)     # 16 columns at a time: no m × r temporary
    sgn = np.sign(u[idx, np.arange(u.shape[1])])
    sgn[sgn == 0] = 1.0
    u *= sgn
    v *= sgn
    return u, v


# ------------------------------------------------------------------ spectrum
def spectrum(W: Any, k: int | None = None, *, n_vectors: int = 0, method: str = "auto",
             device: str | torch.device | None = "auto", refine: bool = True, n_iter: int = 4,
             n_oversamples: int = 10, seed: int | torch.Generator = 0,
             block_rows: int | None = None, progress: bool = False, workers: int = 1) -> Spectrum:
    """Singular values (all, or the top ``k``) and leading singular vectors of a matrix.

    The one SVD entry point of the project (DESIGN.md "analysis"; FADE Sec. 4.2,
    App. 15: "full SVD of the output head delta, rank-1 decomposition Δ ≈ s₁uvᵀ").

    Parameters
    ----------
    W : array_like or torch.Tensor, shape (m, n)
        Real matrix, numpy or torch, CPU or CUDA, float16/bfloat16/float32/float64 (ints and
        bools accepted).  Never copied whole (``"svd"`` copies matrices ≤ 2^20 entries).
    k : int, optional
        Number of leading singular values, ``1 ≤ k ≤ min(m, n)``; ``None``: all of them.
    n_vectors : int
        Number ``r`` of leading singular triplets whose vectors are returned,
        ``0 ≤ r ≤ k`` (or ``min(m, n)``).  Costs ``(m + n)·r`` floats.
    method : {"auto", "svd", "gram", "randomized", "gram32"}
        See the module docstring.  ``"auto"``: ``"svd"`` up to 2^20 entries, else ``"gram"``.
        ``"randomized"`` and ``"gram32"`` need ``k``.
    device : "auto", "cpu", "cuda", "cuda:N" or torch.device
        Where the arithmetic runs (:func:`resolve_device`).  Results are identical up to
        rounding on every device.
    refine : bool
        ``"gram"`` only: recompute singular values below ``10⁻³σ_1`` by Rayleigh–Ritz on
        ``W`` (module docstring); ``False`` skips it (absolute accuracy ``≈ 10⁻⁸σ_1``).
    n_iter, n_oversamples : int
        ``"randomized"``: power iterations (≥ 0) and extra columns (≥ 0); ``"gram32"``: extra
        eigenvectors (at least 16 are used).
    seed : int or torch.Generator
        ``"randomized"``: seed of the Gaussian test matrix.
    block_rows : int, optional
        Rows per streamed float64 block (default: 64 MiB blocks).
    progress : bool
        Show a tqdm bar over the blocks of each pass.
    workers : int
        CPU, ``"gram"`` and ``"gram32"``: threads for the Gram pass.  Its row blocks alternate
        between two partial Grams, accumulated side by side by up to two threads (one BLAS thread
        each, the BLAS called without the GIL) and added at the end, so the numbers do not depend
        on ``workers``; with ``workers ≥ 2`` two row blocks exist at a time (pass ``block_rows``
        halved to keep the memory of one).

    Returns
    -------
    Spectrum
        ``s`` (descending), the exact ``fro_norm = ‖W‖_F``, and ``u``, ``v`` if ``n_vectors > 0``.

    Raises
    ------
    ValueError
        ``W`` not a non-empty finite real 2-D matrix; ``k``, ``n_vectors``, ``method``,
        ``device``, ``n_iter``, ``n_oversamples``, ``seed`` or ``block_rows`` out of range;
        ``n_vectors > 0`` for the zero matrix (its singular vectors are undefined); ``‖W‖_F``
        beyond the largest float64 (``W is too large: ...``).

    Examples
    --------
    >>> W = np.diag([4.0, 2.0, 1.0, 0.5])
    >>> spec = spectrum(W)
    >>> spec.s, round(spec.fro_norm, 6), spec.method
    (array([4. , 2. , 1. , 0.5]), 4.609772, 'svd')
    >>> spectrum(W, k=2, method="gram").s          # the top 2 through the Gram matrix
    array([4., 2.])
    >>> spec = spectrum(np.outer([1.0, 2.0, 2.0], [3.0, 4.0]), n_vectors=1)   # rank 1: 15·u vᵀ
    >>> spec.s.round(12), spec.u[:, 0], spec.v[:, 0]
    (array([15.,  0.]), array([0.33333333, 0.66666667, 0.66666667]), array([0.6, 0.8]))
    """
    A = _as_matrix(W)
    m, n = _shape(A)
    d = min(m, n)
    k = checks.integer("k", k, low=1, high=d, allow_none=True)
    r = checks.integer("n_vectors", n_vectors, low=0, high=d if k is None else k)
    checks.choice("method", method, METHODS)
    checks.choice("refine", refine, (True, False))
    n_iter = checks.integer("n_iter", n_iter, low=0)
    n_oversamples = checks.integer("n_oversamples", n_oversamples, low=0)
    block_rows = checks.integer("block_rows", block_rows, low=1, allow_none=True)
    workers = checks.integer("workers", workers, low=1)
    if not isinstance(seed, torch.Generator):
        seed = checks.integer("seed", seed, low=0)
    dev = resolve_device(device, A)
    if method == "auto":
        method = "svd" if m * n <= _SMALL else "gram"
    if method in ("randomized", "gram32") and k is None:
        raise ValueError(f"k is required with method={method!r} (the number of leading singular values)")

    transposed = False
    if method == "svd":
        s, fro, U, V = _direct(A, dev, k, r)
    else:
        st = _Stream(A, dev, block_rows, progress, workers)
        transposed = st.transposed
        if method == "gram32" and not (st.cpu and _float32_input(A)):
            method = "gram"
        if method == "gram":
            s, fro2, U, V = _gram(st, k, r, bool(refine))  # fro2: of the scaled matrix
        elif method == "gram32":
            s, fro2, U, V = _gram32(st, k, r, n_oversamples)  # type: ignore[arg-type]
        else:
            gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
            s, fro2, U, V = _randomized(st, k, r, n_iter, n_oversamples, gen)  # type: ignore[arg-type]
        fro = math.sqrt(fro2)
        if s is not None:
            s, fro = _unscale(s, fro, st.shift)
    if s is None:  # the zero matrix
        if r > 0:
            raise ValueError("n_vectors must be 0 for the zero matrix W: its singular vectors are undefined")
        s_np = np.zeros(d if k is None else k)
        s_np.setflags(write=False)
        return Spectrum(s_np, 0.0, (m, n), method=method)
    s_np = _to_np(s)
    u = v = None
    if r > 0:
        U, V = (V, U) if transposed else (U, V)
        u, v = _to_np(U)[:, :r], _to_np(V)[:, :r]
        del U, V                          # the algorithm's arrays, before the in-place sign flips
        u, v = _fix_signs(u, v)
        u.setflags(write=False)
        v.setflags(write=False)
    s_np.setflags(write=False)
    return Spectrum(s_np, float(fro), (m, n), u, v, method)


def singular_values(W: Any, k: int | None = None, **options: Any) -> np.ndarray:
    """Singular values of ``W`` in descending order (all, or the top ``k``), float64.

    ``options`` as for :func:`spectrum` (``method``, ``device``, ``refine``, ...).
    Reference: ``numpy.linalg.svd(W, compute_uv=False)``.
    """
    return spectrum(W, k, **options).s


# ------------------------------------------------------------------- metrics
def _spec(W: Any, k: int | None, options: dict, *, need_complete: bool, what: str) -> Spectrum:
    """``W`` as a Spectrum (computed with ``options`` unless it already is one)."""
    if isinstance(W, Spectrum):
        if options:
            raise ValueError(f"options {sorted(options)} apply to a matrix W, not to a Spectrum")
        spec = W
    else:
        if "k" in options:
            raise ValueError(f"k cannot be passed to {what}: it chooses the k it needs")
        A = _as_matrix(W)
        spec = spectrum(A, None if k is None else min(k, min(_shape(A))), **options)
    if need_complete and not spec.complete:
        raise ValueError(f"W must carry the full spectrum for {what} (Σ_i σ_i over all "
                         f"{spec.d} values): got a Spectrum of the top {len(spec.s)}; use k=None")
    if spec.fro_norm == 0.0:
        raise ValueError(f"W is the zero matrix: {what} is undefined")
    return spec


def s1_s2(W: Any, **options: Any) -> float:
    """Ratio of the two largest singular values ``σ_1/σ_2`` (FADE Fig. 5, Sec. 5 table).

    ``inf`` when ``σ_2 = 0`` exactly or ``min(W.shape) = 1``.  ``W``: a matrix (``options``
    go to :func:`spectrum`, which then computes only the top 2) or a :class:`Spectrum`.

    Examples
    --------
    >>> s1_s2(np.diag([4.0, 2.0, 1.0, 0.5]))
    2.0
    >>> s1_s2(np.diag([3.0, 0.0])), s1_s2(np.array([[3.0, 4.0]]))   # σ_2 = 0; one singular value
    (inf, inf)
    """
    spec = _spec(W, 2, options, need_complete=False, what="s1_s2")
    if spec.d == 1:
        return math.inf
    if len(spec.s) < 2:
        raise ValueError("W must carry at least 2 singular values for s1_s2, got a Spectrum of the top 1")
    s1, s2 = float(spec.s[0]), float(spec.s[1])
    return math.inf if s2 == 0.0 else s1 / s2


def rank1_fraction(W: Any, **options: Any) -> float:
    """Rank-1 fraction ``r_1 = σ_1²/‖W‖_F²`` in ``(0, 1]`` (FADE Eq. 8, App. 15.1 Eq. 33).

    The fraction of the Frobenius energy in the leading singular direction, FADE's
    "rank-1%" divided by 100; ``1`` iff ``W`` has rank 1.  ``‖W‖_F`` is the exact norm
    (not the sum over computed top values).  Clipped to ``≤ 1`` against rounding.

    Examples
    --------
    >>> W = np.diag([4.0, 2.0, 1.0, 0.5])
    >>> round(rank1_fraction(W), 6), 16 / (16 + 4 + 1 + 0.25)      # σ1² / ‖W‖_F²
    (0.752941, 0.7529411764705882)
    >>> rank1_fraction(spectrum(W, k=1))        # a top-1 Spectrum suffices: ‖W‖_F is exact
    0.7529411764705882
    """
    spec = _spec(W, 1, options, need_complete=False, what="rank1_fraction")
    return min(1.0, (float(spec.s[0]) / spec.fro_norm) ** 2)


def stable_rank(W: Any, **options: Any) -> float:
    """Stable rank ``‖W‖_F²/σ_1² = 1/r_1`` in ``[1, rank(W)]`` (Rudelson & Vershynin 2007).

    Clipped to ``≥ 1`` against rounding.
    """
    spec = _spec(W, 1, options, need_complete=False, what="stable_rank")
    return max(1.0, (spec.fro_norm / float(spec.s[0])) ** 2)


def effective_rank(W: Any, **options: Any) -> float:
    """Effective rank ``exp(H(p))``, ``p_i = σ_i/Σ_j σ_j``, ``H = −Σ_i p_i log p_i``.

    Roy & Vetterli (2007), "The effective rank: a measure of effective dimensionality",
    Def. 1 (``0·log 0 = 0``).  In ``[1, rank(W)]``.  Needs the full spectrum.
    """
    spec = _spec(W, None, options, need_complete=True, what="effective_rank")
    p = spec.s / spec.s.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def srank(W: Any, delta: float | Sequence[float] | np.ndarray = 0.01, **options: Any) -> Any:
    """``srank_δ(W) = min{k : Σ_{i≤k} σ_i / Σ_{i≤d} σ_i ≥ 1 − δ}`` (FADE Fig. 5 caption).

    The definition of Kumar et al. (2020), "Implicit under-parameterization inhibits
    data-efficient deep RL", with the singular values themselves (not their squares).
    ``delta`` in the open interval ``(0, 1)``: a number (returns an ``int``) or an array
    (returns an int array of its shape; one cumulative sum and one ``searchsorted``).
    Needs the full spectrum.  Default ``δ = 0.01`` as in Kumar et al.; FADE does not
    state its δ.

    Examples
    --------
    σ = (4, 2, 1, 0.5), Σσ = 7.5: the top 2 hold 6/7.5 = 0.8 of it.

    >>> W = np.diag([4.0, 2.0, 1.0, 0.5])
    >>> srank(W, 0.2)
    2
    >>> srank(W, [0.01, 0.2, 0.5])
    array([4, 2, 1])
    """
    dl = _check_delta(delta, "delta")
    spec = _spec(W, None, options, need_complete=True, what="srank")
    c = np.cumsum(spec.s)
    frac = c / c[-1]                       # frac[-1] == 1 exactly
    ks = np.minimum(np.searchsorted(frac, 1.0 - dl, side="left") + 1, len(frac))
    return int(ks) if ks.ndim == 0 else ks.astype(int)


def leading_vectors(W: Any, r: int = 1, **options: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``r`` leading singular triplets ``(u, s, v)``: ``u`` (m × r), ``s`` (r,), ``v`` (n × r).

    ``W v_i = σ_i u_i``.  Sign: the largest-|entry| of each ``u_i`` is positive (the first
    one on ties) and ``v_i`` is flipped with it.  FADE App. 15: "rank-1
    decomposition Δ ≈ s₁uvᵀ", ``u`` the output-token direction of the output-head ``ΔW``
    (V × d).  Vectors of (near-)equal singular values are defined only up to a rotation.
    ``W``: a matrix (``options`` go to :func:`spectrum`; with ``method="randomized"`` the
    default ``k`` is ``r``) or a :class:`Spectrum` computed with ``n_vectors ≥ r``.
    """
    if isinstance(W, Spectrum):
        if options:
            raise ValueError(f"options {sorted(options)} apply to a matrix W, not to a Spectrum")
        have = 0 if W.u is None else W.u.shape[1]
        if have == 0:
            raise ValueError("W is a Spectrum without singular vectors: compute it with n_vectors >= r")
        r = checks.integer("r", r, low=1, high=have)
        spec = W
    else:
        A = _as_matrix(W)
        r = checks.integer("r", r, low=1, high=min(_shape(A)))
        opts = dict(options)
        k = opts.pop("k", r if opts.get("method") == "randomized" else None)
        spec = spectrum(A, k, n_vectors=r, **opts)
    assert spec.u is not None and spec.v is not None
    return spec.u[:, :r], spec.s[:r].copy(), spec.v[:, :r]


def _top_right_vector(a: torch.Tensor) -> torch.Tensor:
    """Leading right singular vector of each matrix of ``a`` [..., V, d] (float64, entries scaled to
    at most 1): the top eigenvector of the d × d Gram ``aᵀa`` when V ≥ d (V·d² work instead of an
    SVD's larger constant; an output head has V ≫ d), else from the SVD."""
    if a.shape[-2] < a.shape[-1]:
        return torch.linalg.svd(a, full_matrices=False).Vh[..., 0, :]
    if a.device.type == "cpu" and not _TORCH_ON_CPU:  # numpy's Aᵀ·A is a symmetric rank-k update, twice as fast as torch's matmul
        n = a.numpy()
        gram = torch.from_numpy(np.matmul(np.swapaxes(n, -1, -2), n))
    else:
        gram = a.mT @ a
    return torch.linalg.eigh(gram).eigenvectors[..., :, -1]


def successive_alignment(prev: Any, cur: Any) -> tuple[np.ndarray, np.ndarray]:
    """Alignment of two successive output-head gradients (FADE Cor. 15.3, "cross-step accumulation").

    Returns ``(cos, u_cos)``: ``cos = ⟨g_{t−1}, g_t⟩_F / (‖g_{t−1}‖_F ‖g_t‖_F)``, the signed cosine
    of the flattened gradients, and ``u_cos = |⟨u_{t−1}, u_t⟩|``, the absolute cosine of their
    leading right singular vectors (the hidden-side direction ``u`` ∈ R^d of ``g_t ≈ w_t ⊗ u``;
    the sign of a singular vector is arbitrary, hence the absolute value).  The corollary's
    condition is ``u_cos → 1``: then ``Σ_t η_t g_t`` stays rank-1.  FADE reports ``|cos| ≈ 1.0``
    from step ~600 for asymmetric advantages and lower values for symmetric ones.

    ``prev``, ``cur``: arrays (numpy or torch) of the same shape ``[..., V, d]``; leading axes are
    a batch (one value per matrix).  Computed in float64 with torch on the tensors' device (a GPU
    gradient stays on the GPU; numpy arrays on the CPU); the two values come back as numpy arrays.  A zero gradient gives NaN for both (no direction).  The
    leading vector of a matrix whose top two singular values tie is not unique; ``u_cos`` is then
    not meaningful.  Cost: one d × d Gram per matrix (V·d² operations; on one CPU
    thread 0.5 s for a 2,048 × 896 head, 14 s for a 151,936 × 896 one).

    Examples
    --------
    >>> g = np.outer([1.0, -2.0, 0.5], [3.0, 0.0, 4.0])       # rank 1: w ⊗ u
    >>> cos, u_cos = successive_alignment(g, -0.5 * g)
    >>> float(cos), float(u_cos)
    (-1.0, 1.0)
    >>> h = np.array([[1.0, 0.0], [0.0, 2.0]])
    >>> [round(float(x), 6) for x in successive_alignment(h, h.T @ np.array([[0.0, 1.0], [1.0, 0.0]]))]
    [0.0, 0.0]
    """
    a, b = (torch.as_tensor(x).detach().to(torch.float64) for x in (prev, cur))
    if a.shape != b.shape or a.ndim < 2:
        raise ValueError(f"prev and cur must be matrices [..., V, d] of the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    b = b.to(a.device)
    ma, mb = (x.abs().amax(dim=(-2, -1), keepdim=True) for x in (a, b))
    a, b = a / torch.where(ma > 0, ma, 1.0), b / torch.where(mb > 0, mb, 1.0)   # scale-free: no under/overflow
    na, nb = (torch.linalg.vector_norm(x, dim=(-2, -1)) for x in (a, b))
    cos = (a * b).sum(dim=(-2, -1)) / (na * nb)
    u_cos = (_top_right_vector(a) * _top_right_vector(b)).sum(-1).abs()
    bad = (na == 0) | (nb == 0)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=a.device)
    return (torch.where(bad, nan, cos.clamp(-1.0, 1.0)).cpu().numpy(),
            torch.where(bad, nan, u_cos.clamp(max=1.0)).cpu().numpy())

def summary(W: Any, *, deltas: float | Sequence[float] = (0.01,), k: int | None = None,
            as_frame: bool = False, **options: Any) -> dict[str, Any] | pd.DataFrame:
    """All metrics of one matrix from one spectrum computation.

    Keys: ``rows``, ``cols``, ``method``, ``n_singular_values``, ``fro_norm``, ``s1``,
    ``s2``, ``s1_s2``, ``rank1_fraction`` (FADE's "rank-1%" / 100), ``stable_rank``,
    ``effective_rank`` and ``srank_<δ>`` for each δ of ``deltas`` (e.g. ``srank_0.01``).
    With ``k`` (top-``k`` spectrum) ``effective_rank`` and ``srank_*`` are left out
    (they need all singular values), and ``s2``, ``s1_s2`` too if ``k = 1``.
    ``as_frame=True``: a long DataFrame with columns ``metric``, ``value``.  ``W``: a
    matrix (``options`` go to :func:`spectrum`) or a :class:`Spectrum`.  The zero matrix
    raises ``ValueError`` (its ratios are undefined).  Source: FADE Sec. 5 table
    (s1/s2, rank-1%), Fig. 5 (srank), App. 15.

    Examples
    --------
    >>> out = summary(np.diag([4.0, 2.0, 1.0, 0.5]), deltas=(0.01, 0.2))
    >>> {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}  # doctest: +NORMALIZE_WHITESPACE
    {'rows': 4, 'cols': 4, 'method': 'svd', 'n_singular_values': 4, 'fro_norm': 4.6098, 's1': 4.0,
     's2': 2.0, 's1_s2': 2.0, 'rank1_fraction': 0.7529, 'stable_rank': 1.3281, 'effective_rank': 3.1171,
     'srank_0.01': 4, 'srank_0.2': 2}
    """
    dl = np.atleast_1d(_check_delta(deltas, "deltas")) if np.size(deltas) else np.zeros(0)
    spec = _spec(W, k, options, need_complete=False, what="summary")
    out: dict[str, Any] = {
        "rows": spec.shape[0], "cols": spec.shape[1], "method": spec.method,
        "n_singular_values": len(spec.s), "fro_norm": spec.fro_norm, "s1": float(spec.s[0]),
    }
    if len(spec.s) >= 2 or spec.d == 1:
        out["s2"] = float(spec.s[1]) if len(spec.s) >= 2 else 0.0
        out["s1_s2"] = s1_s2(spec)
    out["rank1_fraction"] = rank1_fraction(spec)
    out["stable_rank"] = stable_rank(spec)
    if spec.complete:
        out["effective_rank"] = effective_rank(spec)
        for dv, kv in zip(dl, np.atleast_1d(srank(spec, dl)) if dl.size else []):
            out[f"srank_{dv:g}"] = int(kv)
    if as_frame:
        return pd.DataFrame({"metric": list(out), "value": list(out.values())})
    return out
