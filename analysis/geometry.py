r"""Geometry of an update ``ΔW = W_rl − W_base`` relative to the base weights ``W_base``.

Matrix math of issue 29 (items 1, 2 and 6): where an RL update lies relative to the singular
structure and the entries of the weights it changes.  Every function takes the pair
``(W_base, W_rl)`` (numpy arrays or torch tensors, CPU or CUDA, float16 / bfloat16 / float32 /
float64, same shape ``m × n``) and returns a long :class:`pandas.DataFrame` with the columns

``metric``
    the name of the quantity (the tables below);
``param``
    its parameter (the rank ``k``, a fraction ``q``, a multiple ``c``, a threshold ``ε``, a ULP
    bin), as a float; NaN for a quantity without one;
``value``
    the measured value (float64; never NaN for a valid input);
``baseline``
    the same quantity for an isotropic random update of the same shape (and norm): a ``ΔW``
    whose ``vec(ΔW)`` is spherically symmetric, e.g. i.i.d. Gaussian entries; NaN where no
    closed form exists (principal angles, singular-value drift, ULP counts, intruders).

Singular vectors come from :func:`analysis.spectra.spectrum` (the project's one SVD: dense
LAPACK up to 2^20 entries, else the float64 Gram matrix with ``ssyevr``/Rayleigh–Ritz, or
``method="gram32"``; never a dense full SVD of a large matrix).  Everything else streams the
matrices in row blocks (default 2^22 float64 entries, 32 MiB) upcast to float64 on the compute
device, so no float64 copy of a matrix is made: on a 152,064 × 3,584 float32 pair the extra
memory is the spectra's (``"gram32"``: ``2·4·n²`` bytes for the Gram; ``8·m·k`` per vector set,
used as views) plus a few blocks and the coordinate brackets' contents (a few MiB).

Conventions
-----------
* ``ΔW = W_rl − W_base`` is formed per block in float64 (exact for float32/bfloat16/float16
  inputs).  Shapes must match; the inputs must be finite with entries of magnitude in
  ``[1e-100, 1e100]`` or zero (every weight matrix is).
* ``ΔW = 0`` is valid: every energy share, concentration share, density and overlap is 0,
  the drift is 0 and every angle is 0 up to rounding (~1e-13°: the same vectors, whose
  orthonormality holds to rounding),
  the ULP histogram is all in bin 0.  ``W_base = 0`` or ``W_rl = 0`` is refused
  (``ValueError``): their singular subspaces are undefined.
* Ranks ``k`` must lie in ``[1, min(m, n)]``; the default set :func:`default_ks` is
  ``{1, 8, 64, ⌈0.05·min(m, n)⌉}`` clipped to ``min(m, n)``: the spectra then need only the
  top ``max(k)`` vectors (cost ``O(m·n·k)`` beyond the Gram matrix).
* A top-``k`` subspace is well defined only when ``σ_k > σ_{k+1}``; at a tie the results
  depend on which basis of the tied block the eigensolver returns.

Functions
---------
:func:`subspace_energy`, :func:`subspace_rotation`, :func:`coordinate_concentration`,
:func:`update_mask_jaccard`, :func:`jaccard_baseline`, :func:`ulp_histogram`,
:func:`lora_intruders`, :func:`update_geometry` (all of the first four, sharing the spectra),
:func:`lora_update_geometry` (the same and the intruders of a LoRA update ``scale·B·A``, from its
factors).
Definitions, sources and baselines are in each docstring and in ``docs/spectra.md``
("Geometry of an update relative to the base").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import stats

from analysis import spectra
from analysis.spectra import Spectrum
from rlvr_plumbing import checks
from rlvr_plumbing.runtime import resolve_device

__all__ = [
    "COLUMNS",
    "default_ks",
    "subspace_energy",
    "subspace_rotation",
    "coordinate_concentration",
    "update_mask_jaccard",
    "jaccard_baseline",
    "ulp_histogram",
    "ulp_bin_edges",
    "lora_intruders",
    "update_geometry",
    "geometry_base_spectrum",
    "geometry_spectra",
    "lora_update_geometry",
]

#: columns of every result
COLUMNS = ("metric", "param", "value", "baseline")

_BLOCK_ELEMS = 1 << 22          # float64 entries per streamed block (32 MiB)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ULP_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
               "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}
# radix select on float64 bit patterns: a first digit of up to 20 bits, then digits of ≤ 16 bits
_FIRST_BITS = 20
_GATHER = 1 << 24               # a bucket with at most this many keys is gathered and sorted
# coordinate concentration: thresholds bracketed from a fixed-seed uniform sample, resolved in one pass
_SAMPLE = 1 << 18               # entries sampled (with replacement; all of them for a smaller matrix)
_SAMPLE_CHUNK = 1 << 14         # sampled principal scores computed this many at a time
_BRACKET_Z = 6.0                # bracket half-width in binomial standard deviations of the sampled rank
_WIDEN = 1e-9                   # relative widening of brackets of scores sampled with another rounding
_HIST_CAP = 1 << 21             # distinct values (pairs) one bracket may hold before the radix fallback
_NAN = float("nan")
_ULP_ELEMS = 1 << 20            # entries per block of the ULP histogram (int32/int64 temporaries)
_GRAM32_MIN = 1 << 22           # float32 CPU matrices above this many entries: spectra's "gram32"
_ANGLE_ROWS = 1 << 20           # entries of B − A·C per row block when computing principal angles


# ------------------------------------------------------------------- inputs
def _as_tensor(name: str, W: Any) -> torch.Tensor:
    """``W`` as a 2-D floating torch tensor, without copying (numpy arrays are wrapped)."""
    if isinstance(W, Spectrum):
        raise ValueError(f"{name} must be a matrix, not a Spectrum")
    if isinstance(W, torch.Tensor):
        t = W.detach()
    else:
        a = W if isinstance(W, np.ndarray) else np.asarray(W)
        if a.dtype.kind != "f" or a.dtype.itemsize > 8:
            raise ValueError(f"{name} must be a floating-point matrix (float16, bfloat16, float32 or float64), "
                             f"got dtype {a.dtype}")
        try:
            with warnings.catch_warnings():          # read-only arrays: never written to
                warnings.simplefilter("ignore", UserWarning)
                t = torch.from_numpy(a)
        except (TypeError, ValueError, RuntimeError):  # byte order, negative strides
            t = torch.from_numpy(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("=")))
    if t.dtype not in _FLOATS:
        raise ValueError(f"{name} must be a floating-point matrix (float16, bfloat16, float32 or float64), "
                         f"got dtype {t.dtype}")
    if t.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(t.shape)}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {tuple(t.shape)}")
    return t


def _pair(W_base: Any, W_rl: Any, rl_name: str = "W_rl") -> tuple[torch.Tensor, torch.Tensor]:
    Wb, Wr = _as_tensor("W_base", W_base), _as_tensor(rl_name, W_rl)
    if Wb.shape != Wr.shape:
        raise ValueError(f"{rl_name} must have the shape of W_base {tuple(Wb.shape)}, got {tuple(Wr.shape)}")
    return Wb, Wr


def default_ks(m: int, n: int) -> tuple[int, ...]:
    """The default ranks: ``{1, 8, 64, ⌈0.05·d⌉}`` with ``d = min(m, n)``, those ``≤ d``, sorted.

    >>> default_ks(152064, 3584), default_ks(40, 30)
    ((1, 8, 64, 180), (1, 2, 8))
    """
    d = min(int(m), int(n))
    return tuple(sorted({k for k in (1, 8, 64, max(1, math.ceil(0.05 * d))) if k <= d}))


def _check_ks(ks: Any, d: int, name: str = "ks") -> tuple[int, ...]:
    arr = checks.array(name, ks, integer=True, low=1, high=d, nonempty=True)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be an integer or a 1-D sequence of integers, got shape {arr.shape}")
    return tuple(sorted({int(k) for k in np.atleast_1d(arr)}))


def _fractions(name: str, x: Any, *, allow_empty: bool = True) -> tuple[float, ...]:
    arr = checks.array(name, x, low=0.0, high=1.0, low_open=True, nonempty=not allow_empty)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a number or a 1-D sequence of numbers, got shape {arr.shape}")
    return tuple(sorted({float(v) for v in np.atleast_1d(arr)}))


def _frame(rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(
        {"metric": object, "param": np.float64, "value": np.float64, "baseline": np.float64})


def _spectrum(name: str, W: torch.Tensor, k: int, given: Spectrum | None, options: dict) -> Spectrum:
    """Top-``k`` spectrum with ``k`` vectors of ``W`` (or the ``given`` one, checked)."""
    if given is not None:
        if not isinstance(given, Spectrum):
            raise ValueError(f"the spectrum of {name} must be an analysis.spectra.Spectrum, got {type(given).__name__}")
        have = 0 if given.u is None else given.u.shape[1]
        if tuple(given.shape) != tuple(W.shape) or have < k:
            raise ValueError(f"the spectrum of {name} must have shape {tuple(W.shape)} and at least {k} singular "
                             f"vectors, got shape {given.shape} with {have}")
        return given
    if options.get("method") == "gram32" and isinstance(W, torch.Tensor) and W.device.type == "cpu":
        W = W.numpy()                         # the array the tensor wraps (no copy)
    try:
        return spectra.spectrum(W, k, n_vectors=k, **options)
    except ValueError as err:
        if "zero matrix" in str(err):
            raise ValueError(f"{name} is the zero matrix: its singular subspaces are undefined") from None
        raise


class _Rows:
    """Row blocks of one or more same-shaped matrices, upcast to float64 on ``dev``."""

    def __init__(self, mats: Sequence[torch.Tensor], dev: torch.device, block_rows: int | None,
                 progress: bool, desc: str, reuse: bool = False):
        self.mats, self.dev, self.progress, self.desc, self.reuse = mats, dev, progress, desc, reuse
        self.m, self.n = (int(s) for s in mats[0].shape)
        self.rows = checks.integer("block_rows", block_rows, low=1, allow_none=True) or max(1, _BLOCK_ELEMS // self.n)

    def __iter__(self) -> Iterator[tuple[slice, list[torch.Tensor]]]:
        starts: Any = range(0, self.m, self.rows)
        if self.progress:
            from tqdm.auto import tqdm
            starts = tqdm(starts, total=-(-self.m // self.rows), desc=self.desc, unit="block", leave=False)
        # reuse: the blocks of torch matrices are copied into the same float64 buffers each time (no
        # page faults of fresh 32 MiB allocations); a consumer must not keep a block past its turn
        bufs: dict[int, torch.Tensor] = {}
        for i in starts:
            sl = slice(i, min(i + self.rows, self.m))
            out = []
            for j, M in enumerate(self.mats):
                if self.reuse and isinstance(M, torch.Tensor):
                    if j not in bufs:
                        bufs[j] = torch.empty((self.rows, self.n), dtype=torch.float64, device=self.dev)
                    out.append(bufs[j][:sl.stop - sl.start].copy_(M[sl]))
                else:
                    out.append(M[sl].to(self.dev, torch.float64, copy=True))   # ours to modify
            yield sl, out


def _finite(name: str, total: torch.Tensor | float) -> None:
    if not math.isfinite(float(total)):
        raise ValueError(f"{name} must contain only finite values (found NaN or inf)")


def _vectors(spec: Spectrum, k: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``k`` singular vectors as float64 tensors on ``dev``: views of the spectrum's
    read-only arrays on the CPU (never written to; no ``8·(m + n)·k``-byte copies), copies on CUDA."""
    assert spec.u is not None and spec.v is not None
    with warnings.catch_warnings():          # read-only arrays: never written to
        warnings.simplefilter("ignore", UserWarning)
        u, v = torch.from_numpy(np.asarray(spec.u, dtype=np.float64)), torch.from_numpy(np.asarray(spec.v, dtype=np.float64))
    return u[:, :k].to(dev), v[:, :k].to(dev)


def _options(method: str, device: Any) -> dict:
    checks.choice("method", method, spectra.METHODS)
    return {"method": method, "device": device}


def _fast_options(W: torch.Tensor, options: dict, dev: torch.device, workers: int) -> dict:
    """``options`` with ``"gram32"`` (Gram pass on ``workers`` threads) for ``method="auto"`` and a
    float32 CPU matrix of more than :data:`_GRAM32_MIN` entries computed on the CPU (see
    :func:`update_geometry`, "Spectra"); else ``options``.  :func:`_spectrum` then passes ``W``
    as the numpy array it wraps (``"gram32"`` reads numpy float32)."""
    if (options["method"] == "auto" and dev.type == "cpu" and W.device.type == "cpu"
            and W.dtype == torch.float32 and W.numel() > _GRAM32_MIN):
        return {**options, "method": "gram32", "workers": workers}
    return options


def _both_spectra(Wb: torch.Tensor, Wr: torch.Tensor, kb: int, kr: int, given_b: Spectrum | None,
                  given_r: Spectrum | None, opts: dict, dev: torch.device, workers: int) -> tuple[Spectrum, Spectrum]:
    """The top-``kb`` spectrum of ``Wb`` and top-``kr`` of ``Wr`` (or those given, checked), one
    after the other, each Gram pass on ``workers`` threads.  (Both side by side in two threads
    was measured slower on the loaded 2-core machine: 35.1 s against 27.2 s for an
    18,944 × 3,584 pair at load ≈ 4.)"""
    return (_spectrum("W_base", Wb, kb, given_b, _fast_options(Wb, opts, dev, workers)),
            _spectrum("W_rl", Wr, kr, given_r, _fast_options(Wr, opts, dev, workers)))


def geometry_spectra(W_base: Any, W_rl: Any, *, ks: int | Sequence[int] | None = None,
                     mask_fractions: Sequence[float] = (0.01, 0.05), base_spectrum: Spectrum | None = None,
                     method: str = "auto", device: Any = "auto", workers: int = 1) -> tuple[Spectrum, Spectrum]:
    """The spectra of ``W_base`` and ``W_rl`` that :func:`update_geometry` computes (top
    ``max(max(ks), principal ranks)`` and ``max(ks)`` triplets), to pass as its ``base_spectrum``
    and ``rl_spectrum``; ``base_spectrum`` given: only ``W_rl``'s is computed.  ``workers``: threads
    of each ``"gram32"`` Gram pass (CPU).

    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 30))
    >>> sb, sr = geometry_spectra(W, W + 0.01 * rng.standard_normal((40, 30)), workers=2)
    >>> sb.u.shape, sr.u.shape                          # default_ks(40, 30) = (1, 2, 8)
    ((40, 8), (40, 8))
    """
    Wb, Wr = _pair(W_base, W_rl)
    ks_, k_base, opts, dev, workers = _spectra_settings(Wb, ks, mask_fractions, method, device, workers)
    return _both_spectra(Wb, Wr, k_base, max(ks_), base_spectrum, None, opts, dev, workers)


def _spectra_settings(Wb: torch.Tensor, ks: Any, mask_fractions: Any, method: str, device: Any,
                      workers: Any) -> tuple[tuple[int, ...], int, dict, torch.device, int]:
    """Checked ``ks``, the base's rank ``max(max(ks), principal ranks)``, options, device, workers."""
    d = min(Wb.shape)
    ks_ = default_ks(*Wb.shape) if ks is None else _check_ks(ks, d)
    ranks = _principal_ranks(_fractions("mask_fractions", mask_fractions), d, None)
    return (ks_, max([*ks_, *ranks.values()]), _options(method, device), resolve_device(device, Wb),
            checks.integer("workers", workers, low=1))


def geometry_base_spectrum(W_base: Any, *, ks: int | Sequence[int] | None = None,
                           mask_fractions: Sequence[float] = (0.01, 0.05), method: str = "auto",
                           device: Any = "auto", workers: int = 1) -> Spectrum:
    """The spectrum of ``W_base`` that :func:`update_geometry` computes (the top
    ``max(max(ks), principal ranks)`` singular triplets), to pass as its ``base_spectrum`` when one
    base is measured against several checkpoints.

    >>> W = np.random.default_rng(0).standard_normal((40, 30))
    >>> geometry_base_spectrum(W).u.shape              # default_ks(40, 30) = (1, 2, 8)
    (40, 8)
    """
    Wb = _as_tensor("W_base", W_base)
    _, k_base, opts, dev, workers = _spectra_settings(Wb, ks, mask_fractions, method, device, workers)
    return _spectrum("W_base", Wb, k_base, None, _fast_options(Wb, opts, dev, workers))


# ---------------------------------------------------------- subspace energy
def _energy_rows(Wb: torch.Tensor, Wr: torch.Tensor, spec: Spectrum, ks: tuple[int, ...], dev: torch.device,
                 block_rows: int | None, progress: bool) -> list[tuple[str, float, float, float]]:
    m, n = (int(s) for s in Wb.shape)
    K = max(ks)
    U, V = _vectors(spec, K, dev)
    X = torch.zeros(K, n, dtype=torch.float64, device=dev)        # U_Kᵀ ΔW
    col = torch.zeros(K, dtype=torch.float64, device=dev)         # ‖ΔW v_i‖²
    fro2 = torch.zeros((), dtype=torch.float64, device=dev)
    for sl, (b, r) in _Rows([Wb, Wr], dev, block_rows, progress, "subspace energy", reuse=True):
        D = r.sub_(b)
        X.addmm_(U[sl].T, D)
        col += (D @ V).square_().sum(0)
        fro2 += torch.dot(D.view(-1), D.view(-1))
    _finite("W_base and W_rl", fro2)
    return _energy_table(m, n, ks, X.square().sum(1), col, X @ V, float(fro2), dev)


def _energy_table(m: int, n: int, ks: tuple[int, ...], row2: torch.Tensor, col: torch.Tensor, C: torch.Tensor,
                  total: float, dev: torch.device) -> list[tuple[str, float, float, float]]:
    """The rows of :func:`subspace_energy` from ``row2[i] = ‖u_iᵀ ΔW‖²``, ``col[i] = ‖ΔW v_i‖²``
    (``i < K``), ``C = U_Kᵀ ΔW V_K`` and ``total = ‖ΔW‖_F²``."""
    left = torch.cumsum(row2, 0)
    right = torch.cumsum(col, 0)
    both = torch.diagonal(torch.cumsum(torch.cumsum(C.square(), 0), 1))
    diag = torch.cumsum(torch.diagonal(C).square(), 0)
    idx = torch.tensor([k - 1 for k in ks], device=dev)
    L, R, B, Dg = (t[idx].cpu().numpy() / total if total > 0 else np.zeros(len(ks)) for t in (left, right, both, diag))
    rows: list[tuple[str, float, float, float]] = [("delta_fro_norm", _NAN, math.sqrt(total), _NAN)]
    for j, k in enumerate(ks):
        pl, pr, pb, pd_ = k / m, k / n, k * k / (m * n), k / (m * n)
        l_, r_, b_, d_ = (float(min(1.0, max(0.0, x))) for x in (L[j], R[j], B[j], Dg[j]))
        rot = (1.0 - d_) if total > 0 else 0.0
        cross = max(0.0, l_ + r_ - 2 * b_)
        outside = max(0.0, 1.0 - l_ - r_ + b_) if total > 0 else 0.0
        rows += [("energy_left", k, l_, pl), ("energy_right", k, r_, pr), ("energy_both", k, b_, pb),
                 ("diagonal", k, d_, pd_), ("rotation", k, rot, 1.0 - pd_),
                 ("rotation_in_block", k, max(0.0, b_ - d_), pb - pd_),
                 ("rotation_cross", k, cross, pl + pr - 2 * pb),
                 ("outside", k, outside, (1 - pl) * (1 - pr))]
    return rows


def subspace_energy(W_base: Any, W_rl: Any, ks: int | Sequence[int] | None = None, *,
                    base_spectrum: Spectrum | None = None, method: str = "auto", device: Any = "auto",
                    block_rows: int | None = None, progress: bool = False) -> pd.DataFrame:
    r"""Share of ``‖ΔW‖_F²`` inside ``W_base``'s top-``k`` singular subspaces, for several ``k``.

    With ``W_base = U Σ Vᵀ``, ``U_k``, ``V_k`` its top-``k`` left and right singular vectors,
    ``ΔW = W_rl − W_base`` (``m × n``) and ``E = ‖ΔW‖_F²``:

    =====================  ===============================================  ===================
    metric                 definition (divided by ``E``)                    random baseline
    =====================  ===============================================  ===================
    ``energy_left``        ``‖U_kᵀ ΔW‖_F²``                                 ``k/m``
    ``energy_right``       ``‖ΔW V_k‖_F²``                                  ``k/n``
    ``energy_both``        ``‖U_kᵀ ΔW V_k‖_F²``                             ``k²/(mn)``
    ``diagonal``           ``Σ_{i≤k} (u_iᵀ ΔW v_i)²``                       ``k/(mn)``
    ``rotation``           ``1 − diagonal``                                 ``1 − k/(mn)``
    ``rotation_in_block``  ``energy_both − diagonal``                       ``(k² − k)/(mn)``
    ``rotation_cross``     ``energy_left + energy_right − 2·energy_both``   ``k/m + k/n − 2k²/(mn)``
    ``outside``            ``1 − left − right + both``                      ``(1 − k/m)(1 − k/n)``
    =====================  ===============================================  ===================

    plus ``delta_fro_norm`` (``‖ΔW‖_F``, no baseline).

    *The diagonal/rotation split.*  With ``P = U_kU_kᵀ`` and ``Q = V_kV_kᵀ``, ``‖ΔW‖²`` is the
    sum of the orthogonal parts ``‖PΔWQ‖² + ‖PΔW(I−Q)‖² + ‖(I−P)ΔWQ‖² + ‖(I−P)ΔW(I−Q)‖²``.
    The **diagonal** part ``Σ_{i≤k}(u_iᵀΔWv_i)²`` is the energy on the diagonal of the base's
    singular basis: to first order it moves the top-``k`` singular values
    (``δσ_i = u_iᵀΔWv_i``) and leaves the vectors where they are.  Everything else is the
    **rotation** ``1 − diagonal``, made of three disjoint parts: ``rotation_in_block`` (the
    off-diagonal entries of ``U_kᵀΔWV_k``: mixes the top-``k`` directions among themselves),
    ``rotation_cross`` (``‖PΔW(I−Q)‖² + ‖(I−P)ΔWQ‖²``: tilts the top-``k`` subspaces towards the
    rest, first order in the principal angles of :func:`subspace_rotation`) and ``outside``
    (``‖(I−P)ΔW(I−Q)‖²``: invisible to the top-``k`` triplets to first order).

    Sources: "Dense Supervision, Sparse Updates" (arXiv 2606.13657; code
    ``SydCS/OPD-Param-Analysis``: the left/right/both projection ratios); "The Path Not Taken:
    RLVR Provably Learns Off the Principals" (arXiv 2511.08567: updates avoid the principal
    directions).  The diagonal/rotation split is ours (issue 29).

    *Random baseline.*  For a ``ΔW`` whose ``vec`` is spherically symmetric (e.g. i.i.d.
    Gaussian), ``ΔW/‖ΔW‖_F`` is uniform on the unit sphere of ``R^{mn}`` and each share is a
    sum of ``p·mn`` squared coordinates of it: ``Beta(p·mn/2, (1−p)·mn/2)`` with mean exactly
    ``p`` (the column ``baseline``) and standard deviation ``≈ sqrt(2p(1−p)/(mn))``.

    Parameters
    ----------
    W_base, W_rl : array_like or torch.Tensor, shape (m, n)
        Base and updated weights (any float dtype, CPU or CUDA).
    ks : int or sequence of int, optional
        Ranks in ``[1, min(m, n)]``; default :func:`default_ks`.
    base_spectrum : Spectrum, optional
        ``spectra.spectrum(W_base, K, n_vectors=K)`` with ``K ≥ max(ks)``, to reuse.
    method, device : str
        For :func:`analysis.spectra.spectrum` and the streamed passes (``"auto"``: CUDA for a
        CUDA tensor or a large matrix when available).
    block_rows : int, optional
        Rows per streamed block (default: 2^22 float64 entries).
    progress : bool
        tqdm bar over the blocks.

    Returns
    -------
    DataFrame
        Columns ``metric, param (= k), value, baseline``.  ``ΔW = 0`` gives every share 0.

    Examples
    --------
    An update inside the top-1 subspace of ``diag(3, 2, 1)``: all of its energy on the diagonal.

    >>> W = np.diag([3.0, 2.0, 1.0])
    >>> out = subspace_energy(W, W + np.diag([0.5, 0.0, 0.0]), ks=[1, 2])
    >>> out[out.param == 1][["metric", "value", "baseline"]].round(4).to_numpy().tolist()  # doctest: +NORMALIZE_WHITESPACE
    [['energy_left', 1.0, 0.3333], ['energy_right', 1.0, 0.3333], ['energy_both', 1.0, 0.1111],
     ['diagonal', 1.0, 0.1111], ['rotation', 0.0, 0.8889], ['rotation_in_block', 0.0, 0.0],
     ['rotation_cross', 0.0, 0.4444], ['outside', 0.0, 0.4444]]
    """
    Wb, Wr = _pair(W_base, W_rl)
    ks_ = default_ks(*Wb.shape) if ks is None else _check_ks(ks, min(Wb.shape))
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    spec = _spectrum("W_base", Wb, max(ks_), base_spectrum, opts)
    return _frame(_energy_rows(Wb, Wr, spec, ks_, dev, block_rows, progress))


# --------------------------------------------------------- subspace rotation
def _angles(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Principal angles (radians, ascending) between span(A) and span(B), orthonormal ``A``, ``B``
    (Björck & Golub 1973; small angles from the sines, large ones from the cosines, as in
    Knyazev & Argentati 2002 and ``scipy.linalg.subspace_angles``)."""
    C = A.T @ B
    cos = torch.linalg.svdvals(C).clamp(0.0, 1.0)                      # descending: angles ascending
    # the singular values of B − A·C from the R factor of its QR, streamed over row blocks (the
    # same values: an orthogonal transformation; never an m × k temporary of a tall matrix)
    m, k = (int(x) for x in A.shape)
    step = max(k, _ANGLE_ROWS // max(k, 1))
    R = torch.zeros((0, k), dtype=A.dtype, device=A.device)
    for i in range(0, m, step):
        Y = torch.cat([R, B[i:i + step] - A[i:i + step] @ C]) if i else B[:step] - A[:step] @ C
        R = torch.linalg.qr(Y, mode="r").R if m > step else Y
    sin = torch.linalg.svdvals(R).clamp(0.0, 1.0).flip(0)             # ascending: angles ascending
    return torch.where(sin * sin <= 0.5, torch.arcsin(sin), torch.arccos(cos))


def _rotation_rows(sb: Spectrum, sr: Spectrum, ks: tuple[int, ...], dev: torch.device
                   ) -> list[tuple[str, float, float, float]]:
    K = max(ks)
    Ub, Vb = _vectors(sb, K, dev)
    Ur, Vr = _vectors(sr, K, dev)
    rows: list[tuple[str, float, float, float]] = []
    for k in ks:
        for side, A, B in (("left", Ub, Ur), ("right", Vb, Vr)):
            th = torch.rad2deg(_angles(A[:, :k], B[:, :k]))
            rows += [(f"angle_{side}_max_deg", k, float(th.max()), _NAN),
                     (f"angle_{side}_mean_deg", k, float(th.mean()), _NAN)]
        s_b, s_r = np.asarray(sb.s[:k], dtype=np.float64), np.asarray(sr.s[:k], dtype=np.float64)
        rows.append(("sv_drift", k, float(np.linalg.norm(s_r - s_b) / np.linalg.norm(s_b)), _NAN))
    return rows


def subspace_rotation(W_base: Any, W_rl: Any, ks: int | Sequence[int] | None = None, *,
                      base_spectrum: Spectrum | None = None, rl_spectrum: Spectrum | None = None,
                      method: str = "auto", device: Any = "auto") -> pd.DataFrame:
    r"""Principal angles between the top-``k`` singular subspaces of ``W_base`` and ``W_rl``, and
    the drift of the top-``k`` singular values.

    For each ``k``: the principal angles ``0 ≤ θ_1 ≤ … ≤ θ_k ≤ 90°`` between span(``U_k``) of
    ``W_base`` and span(``U_k``) of ``W_rl`` (``cos θ_i`` = the singular values of
    ``U_{k,base}ᵀ U_{k,rl}``; Björck & Golub 1973), reported as ``angle_left_max_deg`` and
    ``angle_left_mean_deg``; the same for the right subspaces (``angle_right_*``); and
    ``sv_drift = ‖s_{rl,1:k} − s_{base,1:k}‖_2 / ‖s_{base,1:k}‖_2`` (the top ``k`` singular values of
    each matrix, in descending order).  Small angles are computed from the sines (the singular
    values of ``U_rl − U_base(U_baseᵀU_rl)``), large ones from the cosines, so both are accurate
    to rounding (Knyazev & Argentati 2002; as ``scipy.linalg.subspace_angles``).

    Sources: "The Path Not Taken" (arXiv 2511.08567: "minimal spectral drift, reduced
    principal-subspace rotation"); "RL Is Neither a Panacea Nor a Mirage" (arXiv 2508.16546:
    singular values stay, vectors rotate); ``SydCS/OPD-Param-Analysis`` (``spectral drift`` as the
    relative L2 change of the singular values; it reports the mean sine of the angles).

    *Baselines.*  No closed form (the angles a random update causes depend on the gaps of the
    base spectrum): the column is NaN.  ``W_rl = W_base`` gives 0 for all of them (the angles up to rounding, ~1e-13°).  The angles
    of a ``k`` where ``σ_k ≈ σ_{k+1}`` (of either matrix) are not meaningful.

    Parameters as :func:`subspace_energy` (``rl_spectrum``: the same for ``W_rl``).

    Examples
    --------
    A rotation by 30° of the top left singular vector of ``diag(2, 1)``:

    >>> c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    >>> W = np.diag([2.0, 1.0])
    >>> out = subspace_rotation(W, np.array([[c, -s], [s, c]]) @ W, ks=1)
    >>> out.set_index("metric")["value"].round(10).to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'angle_left_max_deg': 30.0, 'angle_left_mean_deg': 30.0, 'angle_right_max_deg': 0.0,
     'angle_right_mean_deg': 0.0, 'sv_drift': 0.0}
    """
    Wb, Wr = _pair(W_base, W_rl)
    ks_ = default_ks(*Wb.shape) if ks is None else _check_ks(ks, min(Wb.shape))
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    sb = _spectrum("W_base", Wb, max(ks_), base_spectrum, opts)
    sr = _spectrum("W_rl", Wr, max(ks_), rl_spectrum, opts)
    return _frame(_rotation_rows(sb, sr, ks_, dev))


# ----------------------------------------------------------- exact selection
@dataclass
class _Target:
    """The ``rank``-th largest value of the non-negative score ``score`` (1-based), found by a
    radix select on the float64 bit patterns (monotone in the value for values ≥ 0)."""

    score: Any
    rank: int
    prefix: int = 0          # the digits found so far
    level: int = 0           # how many digits
    above: int = 0           # keys strictly above the current bucket
    gather: bool = False     # next pass: collect the bucket's keys and sort them
    value: float | None = None

    def group(self) -> tuple:
        return (self.score, self.level, self.prefix, self.gather)


def _digits(N: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Widths and shifts of the radix digits of a 64-bit key for ``N`` values: a first digit of
    ``clip(bit_length(N), 8, 20)`` bits (a histogram no larger than the data), then 16-bit ones."""
    widths = [min(_FIRST_BITS, max(8, int(N).bit_length()))]
    while sum(widths) < 64:
        widths.append(min(16, 64 - sum(widths)))
    shifts = tuple(64 - sum(widths[:i + 1]) for i in range(len(widths)))
    return tuple(widths), shifts


def _key_to_float(key: int) -> float:
    return float(torch.tensor([key], dtype=torch.int64).view(torch.float64)[0])


def _select(targets: list[_Target], passes: Callable[[], Iterator[dict[Any, torch.Tensor]]], N: int) -> None:
    """Resolve every target exactly (``N`` values per score): one pass per radix level
    (histograms of the next digit of the keys in the current bucket, :func:`_digits`), and a
    last pass that gathers a bucket of ≤ 2^24 keys and sorts it.  Typically two passes: with
    20 bits the first level leaves buckets of 1/256 of an octave."""
    widths, shifts = _digits(N)
    while True:
        live = [t for t in targets if t.value is None]
        if not live:
            return
        acc: dict[tuple, Any] = {t.group(): None if not t.gather else [] for t in live}
        for scores in passes():
            keys = {}
            for (s, level, prefix, gather) in acc:
                if s not in keys:
                    keys[s] = scores[s].reshape(-1).view(torch.int64)
                k = keys[s]
                if level > 0:
                    k = k[(k >> shifts[level - 1]) == prefix]
                grp = (s, level, prefix, gather)
                if gather:
                    acc[grp].append(k.cpu())
                else:
                    h = torch.bincount((k >> shifts[level]) & ((1 << widths[level]) - 1),
                                       minlength=1 << widths[level])
                    acc[grp] = h if acc[grp] is None else acc[grp] + h
        for t in live:
            data = acc[t.group()]
            need = t.rank - t.above
            if t.gather:
                vals = torch.sort(torch.cat(data), descending=True).values
                t.value = _key_to_float(int(vals[need - 1]))
                continue
            h = data.cpu()
            rev = torch.cumsum(h.flip(0), 0)                     # keys with digit >= len-1-j
            j = int(torch.searchsorted(rev, torch.tensor([need], dtype=rev.dtype))[0])
            b = len(h) - 1 - j
            t.above += int(rev[j] - h[b])
            t.prefix = (t.prefix << widths[t.level]) | b
            t.level += 1
            if t.level == len(widths):
                t.value = _key_to_float(t.prefix)
            elif int(h[b]) <= _GATHER:
                t.gather = True


def _top_count(q: float, N: int) -> int:
    """``⌈q·N⌉`` entries (at least 1), robust to the rounding of ``q·N``."""
    K = math.ceil(q * N - 1e-9 * max(1.0, q * N))
    return min(N, max(1, K))


def _gauss_top_share(q: float) -> float:
    """Share of ``E[x²]`` in the top fraction ``q`` of ``|x|``, ``x ~ N(0, 1)``: ``q + 2zφ(z)``,
    ``z = Φ⁻¹(1 − q/2)``."""
    if q >= 1.0:
        return 1.0
    z = float(stats.norm.isf(q / 2))
    return min(1.0, q + 2.0 * z * float(stats.norm.pdf(z)))


def jaccard_baseline(p_a: Any, p_b: Any) -> Any:
    r"""Expected Jaccard index of two independent random masks of densities ``p_a``, ``p_b``:
    ``p_a·p_b / (p_a + p_b − p_a·p_b)`` (the large-``N`` limit of ``E|A∩B| / E|A∪B|``; as in
    ``SydCS/OPD-Param-Analysis``, "Dense Supervision, Sparse Updates", arXiv 2606.13657).

    ``1`` when both densities are 0 (two empty masks are identical: the convention of
    :func:`update_mask_jaccard`).  Vectorised over arrays; densities in ``[0, 1]``.

    >>> jaccard_baseline(0.05, 0.05), jaccard_baseline(1.0, 0.3), jaccard_baseline(0.0, 0.0)
    (0.02564102564102564, 0.3, 1.0)
    """
    a = checks.array("p_a", p_a, low=0.0, high=1.0)
    b = checks.array("p_b", p_b, low=0.0, high=1.0)
    union = a + b - a * b
    out = np.where(union > 0, a * b / np.where(union > 0, union, 1.0), 1.0)
    return float(out) if out.ndim == 0 else out


def _jaccard(inter: int, a: int, b: int) -> float:
    union = a + b - inter
    return inter / union if union > 0 else 1.0


# -------------------------------------------------- coordinate concentration
class _Hist:
    """Distinct values (1-D) or distinct rows of value pairs (``n × 2``) with their counts,
    collected block by block on the CPU; ``full`` once more than ``cap`` distinct ones are held
    (the caller then falls back to the radix select)."""

    def __init__(self, cap: int):
        self.cap, self.parts, self.size, self.merged, self.full = cap, [], 0, 0, False

    def add(self, x: torch.Tensor) -> None:
        if self.full or x.shape[0] == 0:
            return
        v, c = torch.unique(x.cpu(), dim=0 if x.ndim == 2 else None, return_counts=True)
        self.parts.append((v, c))
        self.size += int(v.shape[0])
        if self.size > self.cap or self.size > max(2 * self.merged, 1 << 16):
            self._merge()
            if self.size > self.cap:
                self.full, self.parts, self.size = True, [], 0

    def _merge(self) -> None:
        if len(self.parts) > 1:
            v = torch.cat([p[0] for p in self.parts])
            c = torch.cat([p[1] for p in self.parts])
            u, inv = torch.unique(v, dim=0 if v.ndim == 2 else None, return_inverse=True)
            self.parts = [(u, torch.zeros(u.shape[0], dtype=torch.int64).index_add_(0, inv, c))]
        self.size = self.merged = sum(int(p[0].shape[0]) for p in self.parts)

    def table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The distinct values (rows) and their counts."""
        self._merge()
        if not self.parts:
            return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.int64)
        return self.parts[0]

    def count(self, keep: Callable[[torch.Tensor], torch.Tensor]) -> int:
        v, c = self.table()
        return int(c[keep(v)].sum()) if v.shape[0] else 0


@dataclass
class _Bracket:
    """The ``rank``-th largest value ``t`` of the score ``score`` bracketed as ``lo ≤ t ≤ hi`` from a
    sample; the main pass counts the values ``> hi`` (``above``, their squares ``above2``) and
    collects those in ``[lo, hi]`` (``hist``); ``t`` is then exact when ``above < rank ≤ above +
    |hist|`` (:meth:`resolve`), else ``None`` (the radix select takes over)."""

    score: Any
    rank: int
    lo: float
    hi: float
    hist: _Hist
    above: int = 0
    above2: float = 0.0
    value: float | None = None

    def resolve(self) -> float | None:
        if self.hist.full:
            return None
        v, c = self.hist.table()
        need = self.rank - self.above
        if need < 1 or need > int(c.sum()):
            return None
        order = torch.argsort(v, descending=True)
        j = int(torch.searchsorted(torch.cumsum(c[order], 0), torch.tensor([need]))[0])
        self.value = float(v[order][j])
        return self.value


def _bracket(xs: torch.Tensor, rank: int, N: int, exact: bool) -> tuple[float, float]:
    """``[lo, hi]`` around the ``rank``-th largest of ``N`` values from a uniform sample of them
    drawn with replacement, ``xs``, sorted in descending order (``exact``: the sample is all of
    them: ``lo = hi = t``).  The number of sampled values ``≥ t`` is Binomial(``S``, ``≥ rank/N``):
    the bracket spans ``±`` :data:`_BRACKET_Z` standard deviations (+ 2) of it in ``xs``."""
    S = int(xs.numel())
    if exact:
        t = float(xs[rank - 1])
        return t, t
    p = rank / N
    mid, sd = S * p, math.sqrt(S * p * (1.0 - p))
    j_hi = math.floor(mid - _BRACKET_Z * sd - 2)
    j_lo = math.ceil(mid + _BRACKET_Z * sd + 2)
    hi = float(xs[min(j_hi, S) - 1]) if j_hi >= 1 else math.inf
    lo = float(xs[max(j_lo, 1) - 1]) if j_lo <= S else 0.0
    return lo, hi


def _coordinate_rows(Wb: torch.Tensor, Wr: torch.Tensor, spec: Spectrum | None, top: tuple[float, ...],
                     mults: tuple[float, ...], mask_fracs: tuple[float, ...], q_upd: float,
                     ranks: dict[float, int], dev: torch.device, block_rows: int | None,
                     progress: bool) -> list[tuple[str, float, float, float]]:
    """The rows of :func:`coordinate_concentration` (``Wr`` a matrix or an :class:`_Updated`).

    Two passes: (1) cheap: ``Σ W_base²``, ``Σ ΔW²`` and a uniform sample of :data:`_SAMPLE`
    entries (fixed seed; the principal scores at the sampled positions from the gathered rows of
    ``U_r S_r`` and ``V_r``), which brackets every threshold (:func:`_bracket`); (2) the one pass
    that forms the rank-``r`` reconstructions: counts above each bracket, the distinct values
    inside it with their counts, the density counts, and for the mask intersections the
    entries whose membership depends on both unknown thresholds.  The thresholds and counts are
    then resolved exactly from these (ties included).  A threshold outside its bracket or a
    bracket holding more than :data:`_HIST_CAP` distinct values (a sample that missed, a wall of
    ties) falls back to the radix select :func:`_select` for those thresholds and a counting pass
    (the reconstructions formed again in each of these passes)."""
    m, n = (int(s) for s in Wb.shape)
    N = m * n
    order = sorted(mask_fracs, key=lambda a: ranks[a])
    U = V = s = None
    if mask_fracs:
        assert spec is not None
        U, V = _vectors(spec, max(ranks.values()), dev)
        s = torch.from_numpy(np.array(spec.s[:U.shape[1]])).to(dev)

    def principal(sl: slice, out: dict[Any, torch.Tensor], like: torch.Tensor) -> None:
        """``|W_base^{(r)}|`` of the block for each mask fraction (rank-``r`` reconstructions, nested)."""
        P = torch.zeros_like(like)
        k0 = 0
        for j, a in enumerate(order):
            k1 = ranks[a]
            if k1 > k0:
                P.addmm_(U[sl, k0:k1] * s[k0:k1], V[:, k0:k1].T)
                k0 = k1
            out[("principal", a)] = P.abs_() if j == len(order) - 1 else P.abs()

    def blocks() -> Iterator[dict[Any, torch.Tensor]]:
        for sl, (b, r) in _Rows([Wb, Wr], dev, block_rows, progress, "coordinates", reuse=True):
            out: dict[Any, torch.Tensor] = {"delta": r.sub_(b).abs_(), "base": b.abs_()}
            if mask_fracs:
                principal(sl, out, b)
            yield out

    targets: dict[Any, _Target] = {}
    for q in top + ((q_upd,) if mask_fracs else ()):
        targets[("top", q)] = _Target("delta", _top_count(q, N))
    for a in mask_fracs:
        targets[("principal", a)] = _Target(("principal", a), _top_count(a, N))
        targets[("low", a)] = _Target("base", N - _top_count(a, N) + 1)   # the ⌈aN⌉-th smallest

    # ---- pass 1: sums and the sample
    exact = N <= _SAMPLE
    g = torch.Generator().manual_seed(0)
    pos = torch.arange(N) if exact else torch.sort(torch.randint(0, N, (_SAMPLE,), generator=g)).values
    sums = {"base2": 0.0, "delta2": 0.0}
    samp: dict[Any, list[torch.Tensor]] = {"delta": [], "base": []}
    for sl, (b, r) in _Rows([Wb, Wr], dev, block_rows, progress, "coordinates (sums)", reuse=True):
        d = r.sub_(b)
        sums["base2"] += float(torch.dot(b.view(-1), b.view(-1)))
        sums["delta2"] += float(torch.dot(d.view(-1), d.view(-1)))
        i0, i1 = (int(x) for x in torch.searchsorted(pos, torch.tensor([sl.start * n, sl.stop * n])))
        loc = (pos[i0:i1] - sl.start * n).to(dev)
        samp["delta"].append(d.reshape(-1)[loc].abs().cpu())
        samp["base"].append(b.reshape(-1)[loc].abs().cpu())
    _finite("W_base and W_rl", sums["base2"] + sums["delta2"])
    rms_b, rms_d = math.sqrt(sums["base2"] / N), math.sqrt(sums["delta2"] / N)
    sample = {k: torch.cat(v) for k, v in samp.items()}
    if mask_fracs:
        acc = torch.zeros(pos.numel(), dtype=torch.float64)
        k0 = 0
        for a in order:
            k1 = ranks[a]
            if k1 > k0:
                for c0 in range(0, pos.numel(), _SAMPLE_CHUNK):
                    pc = pos[c0:c0 + _SAMPLE_CHUNK].to(dev)
                    Ug, Vg = (U[pc // n, k0:k1] * s[k0:k1]), V[pc % n, k0:k1]
                    acc[c0:c0 + _SAMPLE_CHUNK] += (Ug * Vg).sum(1).cpu()
                k0 = k1
            sample[("principal", a)] = acc.abs()

    brackets: dict[tuple, _Bracket] = {}
    ordered: dict[Any, torch.Tensor] = {}
    for t in targets.values():
        if (t.score, t.rank) not in brackets:
            if t.score not in ordered:
                ordered[t.score] = torch.sort(sample[t.score], descending=True).values
            lo, hi = _bracket(ordered[t.score], t.rank, N, exact)
            if t.score not in ("delta", "base"):   # sampled from gathered rows: other rounding than the blocks'
                lo, hi = lo * (1 - _WIDEN), hi * (1 + _WIDEN)
            brackets[(t.score, t.rank)] = _Bracket(t.score, t.rank, lo, hi, _Hist(_HIST_CAP))

    def br(key: Any) -> _Bracket:
        return brackets[(targets[key].score, targets[key].rank)]

    # ---- pass 2: the reconstructions once; counts, bracket contents, intersections
    dens = dict.fromkeys(mults, 0)
    inter: dict[Any, list] = {}       # per (tag, a): [#both certain, hist x | d certain, hist d | x certain, pairs]
    for a in mask_fracs:
        for tag in ("up", "ul"):
            inter[(tag, a)] = [0, _Hist(_HIST_CAP), _Hist(_HIST_CAP), _Hist(_HIST_CAP)]
    # each score's entries that can matter: ≥ the lowest lo of its brackets (≤ the highest hi for
    # W_base's low mask), gathered once per block; everything else is counted on those
    low_side = ("base",)
    bound: dict[Any, float] = {}
    for bk in brackets.values():
        x0 = bound.get(bk.score)
        bound[bk.score] = ((bk.hi if x0 is None else max(x0, bk.hi)) if bk.score in low_side
                           else (bk.lo if x0 is None else min(x0, bk.lo)))
    bu = br(("top", q_upd)) if mask_fracs else None
    for scores in blocks():
        d = scores["delta"].view(-1)
        nb = d.numel()
        for c in mults:
            dens[c] += int(torch.count_nonzero(d > c * rms_b))
        cand: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        for sc, x0 in bound.items():
            x = scores[sc].view(-1)
            idx = torch.nonzero(x <= x0 if sc in low_side else x >= x0).squeeze(1)
            cand[sc] = (idx, x[idx])
        for bk in brackets.values():
            xs = cand[bk.score][1]
            above = xs > bk.hi
            na = int(torch.count_nonzero(above))
            bk.above += nb - xs.numel() + na if bk.score in low_side else na
            if bk.score == "delta":
                bk.above2 += float(xs[above].square().sum())
            bk.hist.add(xs[(xs >= bk.lo) & ~above])
        for a in mask_fracs:
            assert bu is not None
            for tag, key in (("up", ("principal", a)), ("ul", ("low", a))):
                bk = br(key)
                idx, xs = cand[bk.score]
                ds = d[idx]
                u_in = ds > bu.hi                                   # in the update mask for every t_U
                u_mid = (ds >= bu.lo) & ~u_in
                above = xs > bk.hi
                mid = (xs >= bk.lo) & ~above
                x_in = above if tag == "up" else xs < bk.lo        # in the mask for every t in [lo, hi]
                st = inter[(tag, a)]
                st[0] += int(torch.count_nonzero(x_in & u_in))
                st[1].add(ds[x_in & u_mid])
                st[2].add(xs[mid & u_in])
                both = mid & u_mid
                st[3].add(torch.stack([xs[both], ds[both]], 1))
        del scores, d, cand

    # ---- resolve
    for bk in brackets.values():
        bk.resolve()
    failed = [t for t in targets.values() if brackets[(t.score, t.rank)].value is None]
    for t in targets.values():
        t.value = brackets[(t.score, t.rank)].value
    cnt: dict[Any, int] = {}
    en: dict[Any, float] = {}
    if failed or any(h.full for st in inter.values() for h in st[1:]):
        _select(failed, blocks, N)    # the radix select for the thresholds outside their brackets,
        _count_pass(blocks, targets, top, mults, mask_fracs, q_upd, rms_b, cnt, en)   # then counts
    else:
        for c in mults:
            cnt[("dens", c)] = dens[c]
        for q in top:
            bk, t = br(("top", q)), targets[("top", q)].value
            v, c = bk.hist.table()
            gt = v > t
            cnt[("gt", q)] = bk.above + int(c[gt].sum())
            en[q] = bk.above2 + float((v[gt].square() * c[gt]).sum())
        if mask_fracs:
            bu = br(("top", q_upd))
            t_u = targets[("top", q_upd)].value
            cnt["upd"] = bu.above + bu.hist.count(lambda v: (v >= t_u) & (v > 0))
            for a in mask_fracs:
                bp, t_p = br(("principal", a)), targets[("principal", a)].value
                bl, t_l = br(("low", a)), targets[("low", a)].value
                cnt[("p", a)] = bp.above + bp.hist.count(lambda v, t=t_p: v >= t)
                cnt[("l", a)] = N - bl.above - bl.hist.count(lambda v, t=t_l: v > t)
                for tag, t_x, keep in (("up", t_p, lambda v, t: v >= t), ("ul", t_l, lambda v, t: v <= t)):
                    st = inter[(tag, a)]
                    cnt[(tag, a)] = (st[0] + st[1].count(lambda v: (v >= t_u) & (v > 0))
                                     + st[2].count(lambda v, t=t_x, f=keep: f(v, t))
                                     + st[3].count(lambda v, t=t_x, f=keep: f(v[:, 0], t) & (v[:, 1] >= t_u)
                                                   & (v[:, 1] > 0)))
    return _coordinate_table(N, top, mults, mask_fracs, q_upd, ranks, targets, cnt, en, sums, rms_b, rms_d)


def _count_pass(blocks: Callable[[], Iterator[dict[Any, torch.Tensor]]], targets: dict[Any, _Target],
                top: tuple[float, ...], mults: tuple[float, ...], mask_fracs: tuple[float, ...], q_upd: float,
                rms_b: float, cnt: dict[Any, int], en: dict[Any, float]) -> None:
    """Counts and energies at the known thresholds ``targets``, mask intersections (one pass)."""
    def add(key: Any, x: torch.Tensor | float) -> None:
        cnt[key] = cnt.get(key, 0) + int(x)

    t_upd = targets[("top", q_upd)].value if mask_fracs else 0.0
    for scores in blocks():
        d = scores["delta"]
        for q in top:
            above = d > targets[("top", q)].value
            add(("gt", q), torch.count_nonzero(above))
            en[q] = en.get(q, 0.0) + float(d[above].square().sum())
        for c in mults:
            add(("dens", c), torch.count_nonzero(d > c * rms_b))
        if mask_fracs:
            upd = (d >= t_upd) & (d > 0)
            add("upd", torch.count_nonzero(upd))
            for a in mask_fracs:
                pm = scores[("principal", a)] >= targets[("principal", a)].value
                lm = scores["base"] <= targets[("low", a)].value
                add(("p", a), torch.count_nonzero(pm))
                add(("l", a), torch.count_nonzero(lm))
                add(("up", a), torch.count_nonzero(pm & upd))
                add(("ul", a), torch.count_nonzero(lm & upd))


def _coordinate_table(N: int, top: tuple[float, ...], mults: tuple[float, ...], mask_fracs: tuple[float, ...],
                      q_upd: float, ranks: dict[float, int], targets: dict[Any, _Target], cnt: dict[Any, int],
                      en: dict[Any, float], sums: dict[str, float], rms_b: float, rms_d: float
                      ) -> list[tuple[str, float, float, float]]:
    rows: list[tuple[str, float, float, float]] = [("base_rms", _NAN, rms_b, _NAN), ("delta_rms", _NAN, rms_d, _NAN)]
    total = sums["delta2"]
    for q in top:
        K = _top_count(q, N)
        t = targets[("top", q)].value
        share = (en[q] + (K - cnt[("gt", q)]) * t * t) / total if total > 0 else 0.0
        rows.append(("top_energy_share", q, min(1.0, share), _gauss_top_share(K / N)))
    for c in mults:
        base = 2.0 * float(stats.norm.sf(c * rms_b / rms_d)) if rms_d > 0 else 0.0
        rows.append(("density_above_rms", c, cnt[("dens", c)] / N, base))
    if mask_fracs:
        nu = cnt["upd"]
        pu = nu / N
        rows.append(("update_mask_density", q_upd, pu, _NAN))
        for a in mask_fracs:
            for tag, name in (("p", "principal"), ("l", "low")):
                nm, ni = cnt[(tag, a)], cnt[("u" + tag, a)]
                pm_ = nm / N
                rows += [(f"{name}_mask_density", a, pm_, _NAN),
                         (f"update_in_{name}", a, ni / nu if nu else 0.0, pm_),
                         (f"{name}_updated", a, ni / nm if nm else 0.0, pu),
                         (f"jaccard_update_{name}", a, _jaccard(ni, nu, nm), jaccard_baseline(pu, pm_))]
            rows.append(("principal_rank", a, float(ranks[a]), _NAN))
    return rows


def _principal_ranks(mask_fracs: tuple[float, ...], d: int, principal_rank: int | None) -> dict[float, int]:
    if principal_rank is not None:
        r = checks.integer("principal_rank", principal_rank, low=1, high=d)
        return {a: r for a in mask_fracs}
    return {a: min(d, max(1, math.floor(a * d + 1e-9))) for a in mask_fracs}


def coordinate_concentration(W_base: Any, W_rl: Any, *, top_fractions: Sequence[float] = (0.001, 0.01, 0.05),
                             rms_multiples: Sequence[float] = (1e-4, 1e-3, 1e-2),
                             mask_fractions: Sequence[float] = (0.01, 0.05), update_fraction: float = 0.05,
                             principal_rank: int | None = None, base_spectrum: Spectrum | None = None,
                             method: str = "auto", device: Any = "auto", block_rows: int | None = None,
                             progress: bool = False) -> pd.DataFrame:
    r"""How the update is spread over the entries, and where its largest entries lie.

    ``N = m·n`` entries, ``E = ‖ΔW‖_F²``, ``rms(X) = ‖X‖_F/√N``.

    ``top_energy_share`` (param ``q``)
        Share of ``E`` in the ``K = ⌈q·N⌉`` entries of largest ``|ΔW|``:
        ``(Σ_{|ΔW|>t} ΔW² + (K − #{|ΔW|>t})·t²)/E`` with ``t`` the ``K``-th largest ``|ΔW|``
        (exact with ties).  ``t`` is found exactly in one pass (see *Cost*; nothing of size
        ``N`` is sorted).  Baseline: i.i.d. Gaussian entries, large ``N``: ``q + 2zφ(z)``,
        ``z = Φ⁻¹(1 − q/2)`` (0.0134, 0.0946, 0.2987 for ``q`` = 0.1 %, 1 %, 5 %).
        Source: ``SydCS/OPD-Param-Analysis`` (``coord_top_*_energy_ratio``).
    ``density_above_rms`` (param ``c``)
        Share of entries with ``|ΔW| > c·rms(W_base)``.  Baseline: Gaussian ``ΔW`` of the same
        rms, ``2·(1 − Φ(c·rms(W_base)/rms(ΔW)))``.  Source: OPD-Param-Analysis (its thresholds
        relative to the source rms; it reports the complement).
    Masks (param ``α`` of ``mask_fractions``; off with ``mask_fractions=()``)
        * update mask ``M_U``: the ``⌈q_U·N⌉`` entries of largest ``|ΔW|`` (``q_U =
          update_fraction``), ties at the threshold included, unchanged entries (``ΔW = 0``)
          excluded; its achieved density ``p_U`` is ``update_mask_density``;
        * principal mask ``M_P``: the ``⌈α·N⌉`` entries of largest ``|W_base^{(r)}|``, the rank-``r``
          truncated SVD ``Σ_{i≤r} σ_i u_i v_iᵀ`` of ``W_base`` with ``r = max(1, ⌊α·d⌋)``
          (``principal_rank`` overrides ``r``), ties included: the "principal weights" of LIFT
          (Liu et al. 2025, arXiv 2506.00772) as used by "The Path Not Taken" (arXiv
          2511.08567, Sec. on off-principal updates) and defined so in OPD-Param-Analysis
          (``compute_coordinate_mask_overlap_metrics``: rank ``max(1, int(α·d))``, top ``⌈α·N⌉``);
        * small-magnitude mask ``M_L``: the ``⌈α·N⌉`` entries of smallest ``|W_base|``, ties
          included (same sources).

        For ``X ∈ {principal, low}``: ``X_mask_density`` ``p_X``; ``update_in_X =
        |M_U∩M_X|/|M_U|`` (baseline ``p_X``: an update mask placed at random);
        ``X_updated = |M_U∩M_X|/|M_X|`` (baseline ``p_U``); ``jaccard_update_X`` (baseline
        :func:`jaccard_baseline` ``(p_U, p_X)``), and ``principal_rank`` ``r``.  OPD-Param-Analysis
        takes the update mask as ``|ΔW| > atol``; ``update_fraction=1`` gives that with
        ``atol = 0`` (every changed entry).  Each threshold is exact (the selection above) and
        the masks are never stored: a last pass counts the intersections.

    ``ΔW = 0``: every share, density and overlap is 0 (empty update mask; a Jaccard of it with a
    non-empty mask is 0).  Also reported: ``base_rms``, ``delta_rms``.

    Cost: two passes over the pair.  The first is elementwise: ``Σ W_base²``, ``Σ ΔW²`` and a
    uniform sample of 2^18 entries (fixed seed; all entries of a smaller matrix) whose sorted
    values bracket each threshold ``t`` between two sample quantiles ``±6`` binomial standard
    deviations (+2) around its rank (principal scores at the sampled positions from the gathered
    rows of ``U_r S_r`` and ``V_r``).  The second forms the rank-``r`` reconstructions block by
    block once (``2·m·n·max r`` flops) and keeps, per threshold, the count (and energy) of the
    values above the bracket and the distinct values inside it with their counts (≈0.5 % of
    ``N`` for a 5 % threshold, fewer with ties); for the mask intersections the same for the
    entries whose membership depends on both thresholds.  Each ``t`` is then the exact
    order statistic and every count exact, ties included.  If a bracket misses its rank
    (probability ~1e-9 per threshold) or holds more than 2^21 distinct values, those thresholds
    are found by a radix select on the float64 bit patterns (2–3 more passes, the
    reconstructions formed in each) and a counting pass follows: the same numbers, slower.
    Measured on an 18,944 × 3,584 float32 pair (1 BLAS thread, load ≈ 4 on the 2-core machine):
    8.4 s and 0.7× the matrix of extra memory (the radix select before: 28.8 s, 4 passes, 8.5×).

    Examples
    --------
    >>> W = np.arange(1.0, 101.0).reshape(10, 10)
    >>> D = np.zeros((10, 10)); D[0, 0] = 3.0; D[5, 5] = 4.0     # 2 of 100 entries: 9 + 16
    >>> out = coordinate_concentration(W, W + D, top_fractions=[0.01, 0.02], mask_fractions=())
    >>> out[out.metric == "top_energy_share"][["param", "value"]].to_numpy()
    array([[0.01, 0.64],
           [0.02, 1.  ]])
    """
    Wb, Wr = _pair(W_base, W_rl)
    top = _fractions("top_fractions", top_fractions)
    mults = tuple(sorted({float(c) for c in np.atleast_1d(checks.array("rms_multiples", rms_multiples, low=0.0))}))
    masks = _fractions("mask_fractions", mask_fractions)
    q_upd = checks.number("update_fraction", update_fraction, 0.0, 1.0, low_open=True)
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    d = min(Wb.shape)
    ranks = _principal_ranks(masks, d, principal_rank)
    spec = _spectrum("W_base", Wb, max(ranks.values()), base_spectrum, opts) if masks else None
    return _frame(_coordinate_rows(Wb, Wr, spec, top, mults, masks, q_upd, ranks, dev, block_rows, progress))


def update_mask_jaccard(W_base: Any, W_rl_a: Any, W_rl_b: Any, fraction: float = 0.05, *, device: Any = "auto",
                        block_rows: int | None = None, progress: bool = False) -> pd.DataFrame:
    r"""Jaccard index of the update masks of two runs from one base, against the random baseline.

    ``M_a`` = the ``⌈q·N⌉`` entries of largest ``|W_rl_a − W_base|`` (ties at the threshold
    included, unchanged entries excluded; ``fraction=1``: every changed entry), ``M_b`` likewise;
    ``jaccard = |M_a∩M_b|/|M_a∪M_b|`` (1 if both are empty), baseline
    ``p_a·p_b/(p_a + p_b − p_a·p_b)`` with the achieved densities (:func:`jaccard_baseline`).
    Also ``density_a``, ``density_b``.  Source: "Dense Supervision, Sparse Updates" (arXiv
    2606.13657, ``SydCS/OPD-Param-Analysis``: ``nonzero_jaccard`` and its random baseline); "The
    Path Not Taken" (arXiv 2511.08567: update masks are consistent across runs).

    Examples
    --------
    >>> W = np.zeros((4, 5)); A = W.copy(); B = W.copy()
    >>> A[0, :2] = 1.0; B[0, 1:3] = 1.0                         # {0,1} and {1,2} of row 0
    >>> update_mask_jaccard(W, A, B, fraction=0.1)[["metric", "value", "baseline"]].round(4).to_numpy()
    array([['jaccard', 0.3333, 0.0526],
           ['density_a', 0.1, nan],
           ['density_b', 0.1, nan]], dtype=object)
    """
    Wb, Wa = _pair(W_base, W_rl_a, "W_rl_a")
    _, Wc = _pair(W_base, W_rl_b, "W_rl_b")
    q = checks.number("fraction", fraction, 0.0, 1.0, low_open=True)
    dev = resolve_device(device, Wb)
    N = int(Wb.shape[0]) * int(Wb.shape[1])

    total = [0.0]

    def blocks() -> Iterator[dict[Any, torch.Tensor]]:
        for _, (b, a, c) in _Rows([Wb, Wa, Wc], dev, block_rows, progress, "update masks"):
            total[0] += float(a.sum() + b.sum() + c.sum())
            yield {"a": (a - b).abs_(), "b": (c - b).abs_()}

    ta, tb = _Target("a", _top_count(q, N)), _Target("b", _top_count(q, N))
    _select([ta, tb], blocks, N)
    na = nb = ni = 0
    for sc in blocks():
        ma = (sc["a"] >= ta.value) & (sc["a"] > 0)
        mb = (sc["b"] >= tb.value) & (sc["b"] > 0)
        na, nb, ni = na + int(ma.sum()), nb + int(mb.sum()), ni + int((ma & mb).sum())
    _finite("W_base, W_rl_a and W_rl_b", total[0])
    pa, pb = na / N, nb / N
    return _frame([("jaccard", q, _jaccard(ni, na, nb), jaccard_baseline(pa, pb)),
                   ("density_a", q, pa, _NAN), ("density_b", q, pb, _NAN)])


# --------------------------------------------------------------------- ULPs
def _ulp_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in (torch.bfloat16, torch.float16, torch.float32):
        return dtype
    if isinstance(dtype, str) and dtype in _ULP_DTYPES:
        return _ULP_DTYPES[dtype]
    raise ValueError(f"dtype must be one of 'bfloat16', 'float16', 'float32' (or the torch dtype), got {dtype!r}")


def _ordinal(x: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Monotone integer image of the finite values of ``x`` (bfloat16/float16/float32): the
    number of representable values from 0 to ``x``, negative for ``x < 0``; ``±0 → 0`` (as
    ``dtype``: int32 holds it for the 2-byte dtypes, and their differences)."""
    two = x.element_size() == 2
    bits = x.view(torch.int16 if two else torch.int32).to(dtype)
    sign = bits >> (15 if two else 31)                   # 0, or −1 for a set sign bit
    return ((bits & (0x7FFF if two else 0x7FFFFFFF)) ^ sign) - sign      # ±magnitude, branch-free


def ulp_bin_edges(dtype: Any = "bfloat16") -> np.ndarray:
    """Upper edges of the ULP-count bins of :func:`ulp_histogram` for ``dtype``: ``0, 1, 2, 4, 8,
    …, 2^J`` with ``2^J`` the first power of two ≥ the largest possible distance between two
    finite values (bfloat16: 2^16; float16: 2^16; float32: 2^32).  Bin ``0`` is {0}, bin ``1``
    is {1}, bin ``2^j`` (``j ≥ 1``) is ``(2^{j−1}, 2^j]``: {2}, {3, 4}, {5, …, 8}, …

    >>> ulp_bin_edges("bfloat16")[:6].tolist(), int(ulp_bin_edges("bfloat16")[-1]) == 2**16
    ([0, 1, 2, 4, 8, 16], True)
    """
    dt = _ulp_dtype(dtype)
    max_ord = int(_ordinal(torch.tensor([torch.finfo(dt).max], dtype=dt))[0])
    J = (2 * max_ord - 1).bit_length()
    return np.array([0] + [1 << j for j in range(J + 1)], dtype=np.int64)


def ulp_histogram(W_base: Any, W_rl: Any, dtype: Any = "bfloat16", *, device: Any = "auto",
                  block_rows: int | None = None, progress: bool = False) -> pd.DataFrame:
    r"""``|ΔW|`` in units in the last place (ULPs) of ``W_base`` in ``dtype``: a histogram.

    Both matrices are rounded to ``dtype`` (torch's round-to-nearest-even ``.to(dtype)``; exact
    when they already are of that dtype, e.g. bfloat16 checkpoints).  For each entry the **ULP
    distance** is the number of steps between adjacent representable values of ``dtype`` from
    ``W_base`` to ``W_rl``: ``|ord(W_rl) − ord(W_base)|`` with ``ord`` the monotone integer image
    of the bit pattern (sign-magnitude to two's complement; ``+0`` and ``−0`` are the same
    value, distance 0).  It is exact (integer arithmetic on the bits, no float approximation)
    and equals ``|ΔW| / ulp(W_base)`` when both values lie in the same binade; across a power of
    two it counts the steps of each binade (e.g. from 1 − 2^-8 to 1 + 2^-7 in bfloat16 is 2
    ULPs).

    Rows: ``ulp_share`` (param = the bin's upper edge, :func:`ulp_bin_edges`: bins {0}, {1},
    {2}, {3–4}, {5–8}, …, ``(2^{j−1}, 2^j]``; shares sum to 1), ``ulp_count`` (the same as
    counts), ``unchanged_share`` (distance 0: bit-identical in ``dtype`` up to the sign of
    zero), ``one_ulp_share`` (distance exactly 1), ``max_ulp``, ``mean_ulp``, and
    ``exact_in_dtype`` (1 if every entry of both inputs was representable in ``dtype``, else 0:
    then the histogram is of the rounded values).  Baseline: NaN (none).

    Sources: "The Path Not Taken" (arXiv 2511.08567, Gate III "Precision": bf16 hides updates
    below one ULP; bf16-aware sparsity); AReaL #1125, TRL PR #5417, miles PR #881 (≥ 98 % of bf16
    entries bit-identical between steps).

    ``dtype``: ``"bfloat16"`` (default), ``"float16"``, ``"float32"`` or the torch dtype.  A
    value that overflows ``dtype`` when rounded is refused (``ValueError``).

    Examples
    --------
    >>> base = torch.tensor([[1.0, 2.0, -3.0, 0.5]], dtype=torch.bfloat16)
    >>> rl = base.clone(); rl[0, 0] = torch.nextafter(base[0, 0], torch.tensor(2.0, dtype=torch.bfloat16))
    >>> out = ulp_histogram(base, rl).set_index(["metric", "param"])["value"]
    >>> out["unchanged_share"].item(), out["one_ulp_share"].item(), float(out["ulp_count"][1.0])
    (0.75, 0.25, 1.0)
    """
    Wb, Wr = _pair(W_base, W_rl)
    dt = _ulp_dtype(dtype)
    dev = resolve_device(device, Wb)
    return _frame(_ulp_rows(Wb, Wr, dt, dev, block_rows, progress))


def _ulp_rows(Wb: torch.Tensor, Wr: Any, dt: torch.dtype, dev: torch.device, block_rows: int | None,
              progress: bool) -> list[tuple[str, float, float, float]]:
    """The rows of :func:`ulp_histogram` (``Wr`` a matrix or an :class:`_Updated`)."""
    edges = ulp_bin_edges(dt)
    nb = len(edges)
    N = int(Wb.shape[0]) * int(Wb.shape[1])
    hist = torch.zeros(nb, dtype=torch.int64, device=dev)
    exact, dmax, dsum = True, 0, 0
    rows_ = _Rows([Wb, Wr], dev, block_rows, progress, "ULPs")
    step = rows_.rows if block_rows is not None else max(1, _ULP_ELEMS // rows_.n)
    # 2-byte dtypes: int32 ordinals and a histogram of every distance (< 2^17), folded into the
    # bins at the end (max and mean from it, exactly); float32: int64, binned per block
    small = torch.empty((), dtype=dt).element_size() == 2
    idt = torch.int32 if small else torch.int64
    max_ord = int(_ordinal(torch.tensor([torch.finfo(dt).max], dtype=dt))[0])   # larger: inf or NaN
    every = torch.zeros(2 * max_ord + 1, dtype=torch.int64, device=dev) if small else None
    for sl in (slice(i, min(i + step, rows_.m)) for i in range(0, rows_.m, step)):
        pair = []
        for name, M in (("W_base", Wb), ("W_rl", Wr)):
            raw = M[sl].to(dev)
            x = raw.to(dt)
            o = _ordinal(x, idt)
            lo_, hi_ = torch.aminmax(o)
            if int(lo_) < -max_ord or int(hi_) > max_ord:
                raise ValueError(f"{name} must be finite and within the range of {dt} (found NaN, inf or an "
                                 f"entry that overflows {dt})")
            if exact and raw.dtype != dt:
                exact = bool(torch.equal(x.to(raw.dtype), raw))   # dt ⊂ raw's dtype: exact comparison
            pair.append(o)
        dist = pair[1].sub_(pair[0]).abs_().reshape(-1)
        del pair
        if every is not None:
            every += torch.bincount(dist, minlength=every.numel())
            continue
        dmax = max(dmax, int(dist.max()))
        dsum += int(dist.sum())
        j = torch.where(dist <= 1, dist, torch.frexp((dist - 1).to(torch.float64)).exponent.to(idt) + 1)
        hist += torch.bincount(j, minlength=nb)
    if every is not None:
        f = every.cpu().numpy()
        v = np.arange(f.size, dtype=np.int64)
        nz = np.flatnonzero(f)
        dmax, dsum = (int(nz[-1]) if nz.size else 0), int((v * f).sum())
        j = np.where(v <= 1, v, np.frexp(np.maximum(v - 1, 1).astype(np.float64))[1] + 1)
        counts = np.zeros(nb, dtype=np.int64)
        np.add.at(counts, j, f)
    else:
        counts = hist.cpu().numpy()
    rows = [("ulp_share", float(e), c / N, _NAN) for e, c in zip(edges, counts)]
    rows += [("ulp_count", float(e), float(c), _NAN) for e, c in zip(edges, counts)]
    rows += [("unchanged_share", _NAN, counts[0] / N, _NAN), ("one_ulp_share", _NAN, counts[1] / N, _NAN),
             ("max_ulp", _NAN, float(dmax), _NAN), ("mean_ulp", _NAN, dsum / N, _NAN),
             ("exact_in_dtype", _NAN, float(exact), _NAN)]
    return rows


# -------------------------------------------------------------- intruders
class _Updated:
    """``W_base + scale·B·A`` by rows: ``M[sl]`` is the float64 block ``W_base[sl] + scale·B[sl]·A``
    on the factors' device (a new tensor), so that the streamed passes of this module read it like a
    matrix while nothing of size ``m × n`` beyond one block is formed."""

    def __init__(self, Wb: torch.Tensor, sB: torch.Tensor, A: torch.Tensor):
        self.Wb, self.sB, self.A = Wb, sB, A
        self.shape = Wb.shape

    def __getitem__(self, sl: slice) -> torch.Tensor:
        return self.Wb[sl].to(self.A.device, torch.float64, copy=True).addmm_(self.sB[sl], self.A)


def _factors(Wb: torch.Tensor, A: Any, B: Any, scale: Any, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A, scale·B)`` as float64 tensors on ``dev``, their shapes checked against ``W_base``."""
    At, Bt = _as_tensor("A", A), _as_tensor("B", B)
    m, n = (int(x) for x in Wb.shape)
    if Bt.shape[0] != m or At.shape[1] != n or Bt.shape[1] != At.shape[0]:
        raise ValueError(f"B (m × r) and A (r × n) must match W_base {m} × {n}: got B {tuple(Bt.shape)}, "
                         f"A {tuple(At.shape)}")
    s = checks.number("scale", scale)
    A64, sB = At.to(dev, torch.float64), Bt.to(dev, torch.float64) * s
    _finite("A and B", float(A64.abs().sum() + sB.abs().sum()))
    return A64, sB


def _form(upd: _Updated, dev: torch.device, block_rows: int | None) -> torch.Tensor:
    """``W_base + scale·B·A`` formed whole, row block by row block: float64 up to 2^22 entries, else
    float32 (one float32 copy of the matrix: what :func:`analysis.spectra.spectrum` reads)."""
    m, n = (int(x) for x in upd.shape)
    dt = torch.float64 if m * n <= (1 << 22) else torch.float32
    Wt = torch.empty((m, n), dtype=dt, device=dev)
    for sl, (b,) in _Rows([upd], dev, block_rows, False, "W_tuned"):   # type: ignore[list-item]
        _finite("W_base, A and B", float(b.sum()))
        Wt[sl] = b.to(dt)
    return Wt


def _frobenius(sB: torch.Tensor, A: torch.Tensor) -> float:
    """``‖sB·A‖_F`` from the triangular factors of the thin QRs of ``sB`` and ``Aᵀ`` (never formed)."""
    RB = torch.linalg.qr(sB, mode="r").R
    RA = torch.linalg.qr(A.T, mode="r").R
    return float(torch.linalg.matrix_norm(RB @ RA.T))


def _intruder_rows(sb: Spectrum, st: Spectrum, k: int, n_base: int, eps: tuple[float, ...], side: str,
                   d: int) -> list[tuple[str, float, float, float]]:
    """The rows of :func:`lora_intruders` from the spectra of ``W_base`` (``≥ n_base`` vectors) and of
    the tuned matrix (``≥ k`` vectors)."""
    Y = st.u if side == "left" else st.v
    X = sb.u if side == "left" else sb.v
    assert X is not None and Y is not None
    P = np.asarray(X[:, :n_base]).T @ np.asarray(Y[:, :k])                 # (n_base, k)
    cos = np.minimum(1.0, np.abs(P).max(axis=0))
    span = np.minimum(1.0, np.einsum("ij,ij->j", P, P))
    # the base vectors beyond n_base are orthonormal and orthogonal to the first n_base:
    # Σ_{i > n_base} cos² ≤ 1 − span, so max_{i > n_base} |cos| ≤ √(1 − span)
    rest = np.sqrt(np.maximum(0.0, 1.0 - span)) if n_base < d else np.zeros(k)
    sig2 = np.asarray(st.s[:k], dtype=np.float64) ** 2
    tot = float(sig2.sum())
    rows = [("max_cos", float(j + 1), float(c), _NAN) for j, c in enumerate(cos)]
    rows += [("base_span_share", float(j + 1), float(x), _NAN) for j, x in enumerate(span)]
    for e in eps:
        intr = cos < e
        rows += [("n_intruders", e, float(intr.sum()), _NAN),
                 ("n_intruders_certain", e, float((intr & (rest < e)).sum()), _NAN),
                 ("intruder_energy_share", e, float(sig2[intr].sum() / tot) if tot > 0 else 0.0, _NAN)]
    return rows


def lora_intruders(W_base: Any, A: Any, B: Any, scale: float = 1.0, *, k: int = 10,
                   epsilons: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9), side: str = "left",
                   n_base: int | None = None, base_spectrum: Spectrum | None = None,
                   tuned_spectrum: Spectrum | None = None, method: str = "auto", device: Any = "auto",
                   block_rows: int | None = None) -> pd.DataFrame:
    r"""Intruder dimensions of a LoRA update (Shuttleworth et al., "LoRA vs Full Fine-tuning: An
    Illusion of Equivalence", arXiv 2410.21228, Def. 1).

    ``W_tuned = W_base + scale·B·A`` (``B``: ``m × r``, peft's ``lora_B``; ``A``: ``r × n``,
    ``lora_A``).  With ``y_1 … y_k`` the top-``k`` left singular vectors of ``W_tuned`` (right
    ones with ``side="right"``) and ``x_1 … x_{n_base}`` those of ``W_base``, ``y_j`` is an
    **intruder dimension** at threshold ``ε`` iff ``max_i |cos(y_j, x_i)| < ε``.  The paper
    compares against all singular vectors of ``W_base`` (``n_base = min(m, n)``, the default;
    for a square matrix that is a complete basis) and uses ``k = 10``; it sweeps ``ε``.

    Rows: ``max_cos`` (param ``j = 1…k``: ``max_{i ≤ n_base} |⟨y_j, x_i⟩|``), ``base_span_share``
    (param ``j``: ``‖X_{n_base}ᵀ y_j‖²``, the share of ``y_j`` inside the span of the compared base
    vectors), ``n_intruders`` (param ``ε``), ``n_intruders_certain`` (param ``ε``: those intruders
    that stay intruders against every base vector, also the ``d − n_base`` not compared:
    ``max_cos < ε`` and ``√(1 − base_span_share) < ε``, a bound on the cosine with any base vector
    outside the compared ones; equal to ``n_intruders`` when ``n_base = d``), and
    ``intruder_energy_share`` (param ``ε``: ``Σ_{j intruder} σ_j² / Σ_{j≤k} σ_j²`` of
    ``W_tuned``).  With ``n_base < d``, ``n_intruders`` is an upper bound of the paper's count
    (fewer base vectors, smaller maxima) and ``n_intruders_certain`` a lower bound.  Baseline:
    NaN (:func:`lora_update_geometry` computes one).  A direction spread evenly over ``p`` base
    vectors scores ``1/√p``: with a complete basis a random unit vector of ``R^m`` scores about
    ``sqrt(2 ln m / m)``, so "intruder" means "not aligned with any single base direction".

    *Cost.*  Two calls of :func:`analysis.spectra.spectrum` (dense LAPACK up to 2^20 entries, else
    the float64 Gram matrix and its eigendecomposition: never a dense SVD of a large matrix),
    or none for a spectrum given: ``base_spectrum`` (of ``W_base``, ``≥ n_base`` vectors) and
    ``tuned_spectrum`` (of ``W_tuned``, ``≥ k`` vectors) are used as they are.  ``spectrum`` needs
    a matrix, so ``W_tuned`` is formed once, block by block (``B[rows] @ A`` per row block, never a
    float64 copy of the whole): in float64 up to 2^22 entries, else in float32 (``4·m·n`` bytes, one
    copy of the matrix in float32; its rounding of ``6e-8`` relative per entry moves the cosines by
    ``~1e-7``, far below any ``ε`` of interest).  The base vectors cost ``8·(m + n)·n_base`` bytes
    (``n_base = d`` at the 152,064 × 3,584 head of a 7B model: 4.5 GB): pass a smaller ``n_base``
    for a huge matrix and read ``n_intruders_certain`` beside ``n_intruders``.

    Examples
    --------
    A rank-1 update along a new direction ``e_3`` (orthogonal to the top two of the base), made
    dominant: the top singular vector of the tuned matrix is an intruder.

    >>> W = np.diag([3.0, 2.0, 0.0, 0.0])
    >>> Bf, Af = np.array([[0.0], [0.0], [1.0], [0.0]]), np.array([[0.0, 0.0, 10.0, 0.0]])
    >>> out = lora_intruders(W, Af, Bf, k=1, n_base=2, epsilons=[0.5])
    >>> out.set_index("metric")["value"].to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'max_cos': 0.0, 'base_span_share': 0.0, 'n_intruders': 1.0, 'n_intruders_certain': 0.0,
     'intruder_energy_share': 1.0}

    Not certain: ``e_3`` may be one of the two base singular vectors (``σ = 0``) left out by
    ``n_base=2``.
    """
    Wb = _as_tensor("W_base", W_base)
    m, n = (int(x) for x in Wb.shape)
    d = min(m, n)
    k = checks.integer("k", k, low=1, high=d)
    eps = _fractions("epsilons", epsilons, allow_empty=False)
    checks.choice("side", side, ("left", "right"))
    n_base = d if n_base is None else checks.integer("n_base", n_base, low=1, high=d)
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    A64, sB = _factors(Wb, A, B, scale, dev)
    if tuned_spectrum is None:
        Wt = _form(_Updated(Wb, sB, A64), dev, block_rows)
        st = _spectrum("W_base + scale·B·A", Wt, k, None, opts)
        del Wt
    else:
        st = _spectrum("W_base + scale·B·A", Wb, k, tuned_spectrum, opts)
    sb = _spectrum("W_base", Wb, n_base, base_spectrum, opts)
    return _frame(_intruder_rows(sb, st, k, n_base, eps, side, d))


# ------------------------------------------------------------------ all
def update_geometry(W_base: Any, W_rl: Any, *, ks: int | Sequence[int] | None = None,
                    top_fractions: Sequence[float] = (0.001, 0.01, 0.05),
                    rms_multiples: Sequence[float] = (1e-4, 1e-3, 1e-2),
                    mask_fractions: Sequence[float] = (0.01, 0.05), update_fraction: float = 0.05,
                    ulp_dtype: Any = "bfloat16", method: str = "auto", device: Any = "auto",
                    block_rows: int | None = None, progress: bool = False, base_spectrum: Spectrum | None = None,
                    rl_spectrum: Spectrum | None = None, workers: int = 1) -> pd.DataFrame:
    """Every metric of this module for one pair, with one spectrum computation per matrix.

    :func:`subspace_energy` and :func:`subspace_rotation` at ``ks``,
    :func:`coordinate_concentration` and :func:`ulp_histogram` (``ulp_dtype=None`` skips it),
    concatenated, with a column ``group`` (``"energy"``, ``"rotation"``, ``"coordinates"``,
    ``"ulp"``) in front.  ``W_base`` needs the top ``max(max(ks), principal ranks)`` singular
    vectors, ``W_rl`` the top ``max(ks)``; ``base_spectrum`` / ``rl_spectrum``
    (:func:`geometry_spectra` with the same ``ks`` and ``mask_fractions``) are used as given, e.g.
    one base against several checkpoints.

    *Spectra.*  With ``method="auto"``, a float32 matrix of more than 2^22 entries on the CPU
    (every large weight of a checkpoint diff) gets :func:`analysis.spectra.spectrum`'s ``"gram32"``
    (float32 Gram and ``ssyevr``, float64 Rayleigh–Ritz; its Gram pass split over ``workers``
    threads): ~2× faster than the float64 ``"gram"`` and no float64 ``n × n`` arrays.  Its
    singular vectors are those of a float64 Rayleigh–Ritz step in a subspace chosen in float32:
    measured against numpy's float64 SVD on 4,000 × 1,000 float32 pairs
    (``tests/analysis/test_geometry.py::test_gram32_vectors_accuracy``; Gaussian ``W_base``, the
    hard case: flat spectrum, gaps ``σ_k/σ_{k+1} ≈ 1.0005``): energy shares to ``6·10⁻¹⁰``
    absolute, principal angles to ``1.4·10⁻⁶`` degrees, ``sv_drift`` to ``10⁻¹¹`` relative
    (a graded spectrum: ``10⁻¹⁰``, ``2.5·10⁻⁷`` degrees); the coordinate masks use the same
    vectors.  Smaller, float64 or CUDA matrices keep ``"auto"`` (dense float64 SVD up to 2^20
    entries, else the float64 Gram: accurate to rounding).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 30)).astype(np.float32)
    >>> out = update_geometry(W, W + 1e-3 * rng.standard_normal((40, 30)).astype(np.float32))
    >>> sorted(out.group.unique()), list(out.columns)
    (['coordinates', 'energy', 'rotation', 'ulp'], ['group', 'metric', 'param', 'value', 'baseline'])
    """
    Wb, Wr = _pair(W_base, W_rl)
    d = min(Wb.shape)
    ks_ = default_ks(*Wb.shape) if ks is None else _check_ks(ks, d)
    top = _fractions("top_fractions", top_fractions)
    mults = tuple(sorted({float(c) for c in np.atleast_1d(checks.array("rms_multiples", rms_multiples, low=0.0))}))
    masks = _fractions("mask_fractions", mask_fractions)
    q_upd = checks.number("update_fraction", update_fraction, 0.0, 1.0, low_open=True)
    if ulp_dtype is not None:
        _ulp_dtype(ulp_dtype)
    opts = _options(method, device)
    workers = checks.integer("workers", workers, low=1)
    dev = resolve_device(device, Wb)
    ranks = _principal_ranks(masks, d, None)
    sb, sr = _both_spectra(Wb, Wr, max([*ks_, *ranks.values()]), max(ks_), base_spectrum, rl_spectrum, opts, dev,
                           workers)
    parts = [("energy", _frame(_energy_rows(Wb, Wr, sb, ks_, dev, block_rows, progress))),
             ("rotation", _frame(_rotation_rows(sb, sr, ks_, dev))),
             ("coordinates", _frame(_coordinate_rows(Wb, Wr, sb, top, mults, masks, q_upd, ranks, dev,
                                                     block_rows, progress)))]
    if ulp_dtype is not None:
        parts.append(("ulp", ulp_histogram(Wb, Wr, ulp_dtype, device=dev, block_rows=block_rows, progress=progress)))
    out = pd.concat([p.assign(group=g) for g, p in parts], ignore_index=True)
    return out[["group", *COLUMNS]]


# ------------------------------------------------------------ LoRA, from the factors
def _lora_energy_rows(sb: Spectrum, sB: torch.Tensor, A: torch.Tensor, ks: tuple[int, ...], dev: torch.device
                      ) -> list[tuple[str, float, float, float]]:
    """:func:`subspace_energy`'s rows for ``ΔW = sB·A`` from the factors: with ``P = U_Kᵀ sB``,
    ``Q = A V_K`` and the triangular factors ``R_B``, ``R_A`` of the thin QRs of ``sB`` and ``Aᵀ``,
    ``‖u_iᵀ ΔW‖ = ‖P_i R_Aᵀ‖``, ``‖ΔW v_i‖ = ‖R_B Q_{:,i}‖``, ``U_Kᵀ ΔW V_K = P Q`` and
    ``‖ΔW‖_F = ‖R_B R_Aᵀ‖_F`` (cost ``O((m + n)·K·r)``)."""
    m, n = int(sB.shape[0]), int(A.shape[1])
    U, V = _vectors(sb, max(ks), dev)
    RB = torch.linalg.qr(sB, mode="r").R
    RA = torch.linalg.qr(A.T, mode="r").R
    P, Q = U.T @ sB, A @ V
    total = float((RB @ RA.T).square().sum())
    return _energy_table(m, n, ks, (P @ RA.T).square().sum(1), (RB @ Q).square().sum(0), P @ Q, total, dev)


def lora_update_geometry(W_base: Any, A: Any, B: Any, scale: float = 1.0, *,
                         ks: int | Sequence[int] | None = None,
                         top_fractions: Sequence[float] = (0.001, 0.01, 0.05),
                         rms_multiples: Sequence[float] = (1e-4, 1e-3, 1e-2),
                         mask_fractions: Sequence[float] = (0.01, 0.05), update_fraction: float = 0.05,
                         ulp_dtype: Any = "bfloat16", intruders: bool = True, k: int = 10,
                         epsilons: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9), side: str = "left",
                         n_base: int | None = None, seed: int | Sequence[int] = 0, method: str = "auto",
                         device: Any = "auto", block_rows: int | None = None, progress: bool = False
                         ) -> pd.DataFrame:
    r""":func:`update_geometry` of a LoRA update ``ΔW = scale·B·A`` from its factors, and its
    intruder dimensions beside those of a random update of the same rank and norm.

    ``W_rl = W_base + scale·B·A`` (``B``: ``m × r``, peft's ``lora_B``; ``A``: ``r × n``,
    ``lora_A``).  The same rows and definitions as :func:`update_geometry` (groups ``"energy"``,
    ``"rotation"``, ``"coordinates"``, ``"ulp"``), computed so:

    * **energy** from the factors, exactly, without forming ``ΔW``: ``U_Kᵀ ΔW = (U_Kᵀ sB)·A``,
      ``ΔW V_K = sB·(A V_K)``, norms through the triangular factors of the thin QRs of ``sB`` and
      ``Aᵀ`` (:func:`_lora_energy_rows`; ``O((m + n)·K·r)`` beyond ``W_base``'s spectrum);
    * **rotation** (principal angles, singular-value drift) from the top-``K`` spectrum of
      ``W_rl``, formed once row block by row block (float64 up to 2^22 entries, else float32:
      what the dense diff holds in memory as ``W_rl``; the spectrum is the top-``k`` machinery of
      :func:`analysis.spectra.spectrum`, never a dense SVD of a large matrix).  The top-``k``
      subspaces of ``W_base + ΔW`` depend on all of ``W_base``, not only on its top-``k`` triplets
      and the factors, so no exact shortcut exists;
    * **coordinates** and **ulp** need the entries: they stream float64 row blocks
      ``W_base[rows] + scale·B[rows]·A`` (never the whole ``ΔW``), so ``ΔW`` entries are exact to
      float64 rounding.  The ULP histogram is that of ``W_rl`` rounded once to ``ulp_dtype``
      against ``W_base``: the entries a merge of the adapter stored in that dtype
      (``merge_and_unload`` then ``save_pretrained``) would leave bit-identical, up to peft's own
      rounding order (it rounds ``scale·B·A`` to the weight's dtype before adding);
      ``exact_in_dtype`` is then 0 unless every merged value is representable.

    With ``intruders`` the group ``"intruders"`` holds :func:`lora_intruders`'s rows (``k``,
    ``epsilons``, ``side``) from the same spectra (no further SVD of ``W_base`` or ``W_rl``),
    against the top ``n_base`` singular vectors of ``W_base`` (default: those the geometry
    computes anyway, ``max(ks)`` and the principal ranks; ``n_intruders`` then bounds the paper's
    count from above and ``n_intruders_certain`` from below).  Their ``baseline`` is the same rows
    for ``W_base + G_B·G_A`` with Gaussian ``G_B`` (``m × r``), ``G_A`` (``r × n``) drawn by
    ``numpy.random.default_rng(seed)`` and scaled to ``‖G_B G_A‖_F = ‖ΔW‖_F``: whether an update
    of this rank and size, with no preferred direction, makes intruders too (one more top-``k``
    spectrum).

    Parameters as :func:`update_geometry` and :func:`lora_intruders`; ``seed``: the baseline's.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 30))
    >>> U, s, Vt = np.linalg.svd(W)
    >>> out = lora_update_geometry(W, Vt[:2], U[:, :2] * 0.1, ks=[2], k=2, epsilons=[0.5], ulp_dtype=None)
    >>> e = out[(out.group == "energy") & (out.param == 2)].set_index("metric")["value"]
    >>> float(round(e["energy_left"], 12)), float(round(e["energy_both"], 12))   # ΔW inside the top-2 block
    (1.0, 1.0)
    >>> sorted(out.group.unique())
    ['coordinates', 'energy', 'intruders', 'rotation']
    """
    Wb = _as_tensor("W_base", W_base)
    m, n = (int(x) for x in Wb.shape)
    d = min(m, n)
    ks_ = default_ks(m, n) if ks is None else _check_ks(ks, d)
    top = _fractions("top_fractions", top_fractions)
    mults = tuple(sorted({float(c) for c in np.atleast_1d(checks.array("rms_multiples", rms_multiples, low=0.0))}))
    masks = _fractions("mask_fractions", mask_fractions)
    q_upd = checks.number("update_fraction", update_fraction, 0.0, 1.0, low_open=True)
    ulp = None if ulp_dtype is None else _ulp_dtype(ulp_dtype)
    checks.choice("intruders", intruders, (True, False))
    k = checks.integer("k", k, low=1, high=d)
    eps = _fractions("epsilons", epsilons, allow_empty=False)
    checks.choice("side", side, ("left", "right"))
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    A64, sB = _factors(Wb, A, B, scale, dev)
    ranks = _principal_ranks(masks, d, None)
    kb = max([*ks_, *ranks.values()])
    nb = kb if n_base is None else checks.integer("n_base", n_base, low=1, high=d)
    sb = _spectrum("W_base", Wb, max(kb, nb if intruders else 1), None, opts)
    upd = _Updated(Wb, sB, A64)
    Wt = _form(upd, dev, block_rows)
    sr = _spectrum("W_base + scale·B·A", Wt, max(max(ks_), k if intruders else 1), None, opts)
    del Wt
    parts = [("energy", _frame(_lora_energy_rows(sb, sB, A64, ks_, dev))),
             ("rotation", _frame(_rotation_rows(sb, sr, ks_, dev))),
             ("coordinates", _frame(_coordinate_rows(Wb, upd, sb, top, mults, masks, q_upd, ranks,  # type: ignore[arg-type]
                                                     dev, block_rows, progress)))]
    if ulp is not None:
        parts.append(("ulp", _frame(_ulp_rows(Wb, upd, ulp, dev, block_rows, progress))))
    if intruders:
        rows = _intruder_rows(sb, sr, k, nb, eps, side, d)
        rng = np.random.default_rng(seed)
        r = int(A64.shape[0])
        GB = torch.from_numpy(rng.standard_normal((m, r))).to(dev)
        GA = torch.from_numpy(rng.standard_normal((r, n))).to(dev)
        fro = _frobenius(sB, A64)
        GB *= fro / _frobenius(GB, GA) if fro > 0 else 0.0
        Wg = _form(_Updated(Wb, GB, GA), dev, block_rows)
        sg = _spectrum("W_base + a random rank-r update", Wg, k, None, opts)
        del Wg
        base = _intruder_rows(sb, sg, k, nb, eps, side, d)
        parts.append(("intruders", _frame([(a[0], a[1], a[2], b[2]) for a, b in zip(rows, base)])))
    out = pd.concat([p.assign(group=g) for g, p in parts], ignore_index=True)
    return out[["group", *COLUMNS]]
