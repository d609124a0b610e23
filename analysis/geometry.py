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
memory is the spectra's (``3·8·n²`` bytes and ``8·m·k`` per vector set) plus a few blocks.

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
:func:`lora_intruders`, :func:`update_geometry` (all of the first four, sharing the spectra).
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
_NAN = float("nan")


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
    try:
        return spectra.spectrum(W, k, n_vectors=k, **options)
    except ValueError as err:
        if "zero matrix" in str(err):
            raise ValueError(f"{name} is the zero matrix: its singular subspaces are undefined") from None
        raise


class _Rows:
    """Row blocks of one or more same-shaped matrices, upcast to float64 on ``dev``."""

    def __init__(self, mats: Sequence[torch.Tensor], dev: torch.device, block_rows: int | None,
                 progress: bool, desc: str):
        self.mats, self.dev, self.progress, self.desc = mats, dev, progress, desc
        self.m, self.n = (int(s) for s in mats[0].shape)
        self.rows = checks.integer("block_rows", block_rows, low=1, allow_none=True) or max(1, _BLOCK_ELEMS // self.n)

    def __iter__(self) -> Iterator[tuple[slice, list[torch.Tensor]]]:
        starts: Any = range(0, self.m, self.rows)
        if self.progress:
            from tqdm.auto import tqdm
            starts = tqdm(starts, total=-(-self.m // self.rows), desc=self.desc, unit="block", leave=False)
        for i in starts:
            sl = slice(i, min(i + self.rows, self.m))
            yield sl, [M[sl].to(self.dev, torch.float64, copy=True) for M in self.mats]   # ours to modify


def _finite(name: str, total: torch.Tensor | float) -> None:
    if not math.isfinite(float(total)):
        raise ValueError(f"{name} must contain only finite values (found NaN or inf)")


def _vectors(spec: Spectrum, k: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    assert spec.u is not None and spec.v is not None
    return (torch.from_numpy(np.array(spec.u[:, :k])).to(dev), torch.from_numpy(np.array(spec.v[:, :k])).to(dev))


def _options(method: str, device: Any) -> dict:
    checks.choice("method", method, spectra.METHODS)
    return {"method": method, "device": device}


# ---------------------------------------------------------- subspace energy
def _energy_rows(Wb: torch.Tensor, Wr: torch.Tensor, spec: Spectrum, ks: tuple[int, ...], dev: torch.device,
                 block_rows: int | None, progress: bool) -> list[tuple[str, float, float, float]]:
    m, n = (int(s) for s in Wb.shape)
    K = max(ks)
    U, V = _vectors(spec, K, dev)
    X = torch.zeros(K, n, dtype=torch.float64, device=dev)        # U_Kᵀ ΔW
    col = torch.zeros(K, dtype=torch.float64, device=dev)         # ‖ΔW v_i‖²
    fro2 = torch.zeros((), dtype=torch.float64, device=dev)
    for sl, (b, r) in _Rows([Wb, Wr], dev, block_rows, progress, "subspace energy"):
        D = r.sub_(b)
        X.addmm_(U[sl].T, D)
        col += (D @ V).square_().sum(0)
        fro2 += D.square().sum()
    _finite("W_base and W_rl", fro2)
    total = float(fro2)
    C = X @ V                                                       # U_Kᵀ ΔW V_K
    left = torch.cumsum(X.square().sum(1), 0)
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
    sin = torch.linalg.svdvals(B - A @ C).clamp(0.0, 1.0).flip(0)      # ascending: angles ascending
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
def _coordinate_rows(Wb: torch.Tensor, Wr: torch.Tensor, spec: Spectrum | None, top: tuple[float, ...],
                     mults: tuple[float, ...], mask_fracs: tuple[float, ...], q_upd: float,
                     ranks: dict[float, int], dev: torch.device, block_rows: int | None,
                     progress: bool) -> list[tuple[str, float, float, float]]:
    m, n = (int(s) for s in Wb.shape)
    N = m * n
    order = sorted(mask_fracs, key=lambda a: ranks[a])
    U = V = s = None
    if mask_fracs:
        assert spec is not None
        U, V = _vectors(spec, max(ranks.values()), dev)
        s = torch.from_numpy(np.array(spec.s[:U.shape[1]])).to(dev)
    sums = {"base2": 0.0, "delta2": 0.0}

    def blocks(first: list[bool]) -> Iterator[dict[Any, torch.Tensor]]:
        for sl, (b, r) in _Rows([Wb, Wr], dev, block_rows, progress, "coordinates"):
            d = (r - b).abs_()
            if first[0]:
                sums["base2"] += float(b.square().sum())
                sums["delta2"] += float(d.square().sum())
            out: dict[Any, torch.Tensor] = {"delta": d, "base": b.abs_()}
            if mask_fracs:
                P = torch.zeros_like(d)
                k0 = 0
                for a in order:                                  # rank-k reconstructions, nested
                    k1 = ranks[a]
                    if k1 > k0:
                        P.addmm_(U[sl, k0:k1] * s[k0:k1], V[:, k0:k1].T)
                        k0 = k1
                    out[("principal", a)] = P.abs()
            yield out
        first[0] = False

    targets: dict[Any, _Target] = {}
    for q in top + ((q_upd,) if mask_fracs else ()):
        targets[("top", q)] = _Target("delta", _top_count(q, N))
    for a in mask_fracs:
        targets[("principal", a)] = _Target(("principal", a), _top_count(a, N))
        targets[("low", a)] = _Target("base", N - _top_count(a, N) + 1)   # the ⌈aN⌉-th smallest
    first = [True]
    if targets:
        _select(list(targets.values()), lambda: blocks(first), N)
    else:                                   # nothing to select: one pass for the sums
        for _ in blocks(first):
            pass
    _finite("W_base and W_rl", sums["base2"] + sums["delta2"])
    rms_b, rms_d = math.sqrt(sums["base2"] / N), math.sqrt(sums["delta2"] / N)
    t_upd = targets[("top", q_upd)].value if mask_fracs else 0.0

    # final pass: counts and energies at the thresholds, mask intersections
    cnt: dict[Any, int] = {}
    en: dict[Any, float] = {}

    def add(key: Any, x: torch.Tensor | float) -> None:
        cnt[key] = cnt.get(key, 0) + int(x)

    for scores in blocks([False]):
        d = scores["delta"]
        for q in top:
            t = targets[("top", q)].value
            above = d > t
            add(("gt", q), above.sum())
            en[q] = en.get(q, 0.0) + float(d[above].square().sum())
        for c in mults:
            add(("dens", c), (d > c * rms_b).sum())
        if mask_fracs:
            upd = (d >= t_upd) & (d > 0)
            add("upd", upd.sum())
            for a in mask_fracs:
                pm = scores[("principal", a)] >= targets[("principal", a)].value
                lm = scores["base"] <= targets[("low", a)].value
                add(("p", a), pm.sum())
                add(("l", a), lm.sum())
                add(("up", a), (pm & upd).sum())
                add(("ul", a), (lm & upd).sum())

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
        (exact with ties).  ``t`` is found by an exact streaming selection (radix select on the
        float64 bit patterns, 2–3 passes over the blocks; nothing is sorted but one bucket of
        ≤ 2^24 values).  Baseline: i.i.d. Gaussian entries, large ``N``: ``q + 2zφ(z)``,
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

    Cost: typically 3 passes over the pair (2 of the selection, 1 to count); with masks, each
    pass also forms the rank-``r`` reconstructions block by block (``2·m·n·max r`` flops a pass).

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


def _ordinal(x: torch.Tensor) -> torch.Tensor:
    """Monotone integer image of the finite values of ``x`` (bfloat16/float16/float32): the
    number of representable values from 0 to ``x``, negative for ``x < 0``; ``±0 → 0``."""
    bits = x.view(torch.int16 if x.element_size() == 2 else torch.int32).to(torch.int64)
    mag = bits & (0x7FFF if x.element_size() == 2 else 0x7FFFFFFF)
    return torch.where(bits < 0, -mag, mag)


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
    edges = ulp_bin_edges(dt)
    nb = len(edges)
    N = int(Wb.shape[0]) * int(Wb.shape[1])
    hist = torch.zeros(nb, dtype=torch.int64, device=dev)
    exact, dmax, dsum = True, 0, 0
    rows_ = _Rows([Wb, Wr], dev, block_rows, progress, "ULPs")
    for sl in (slice(i, min(i + rows_.rows, rows_.m)) for i in range(0, rows_.m, rows_.rows)):
        pair = []
        for name, M in (("W_base", Wb), ("W_rl", Wr)):
            raw = M[sl].to(dev)
            x = raw.to(dt)
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"{name} must be finite and within the range of {dt} (found NaN, inf or an "
                                 f"entry that overflows {dt})")
            if exact and raw.dtype != dt:
                exact = bool((x.to(torch.float64) == raw.to(torch.float64)).all())
            pair.append(_ordinal(x))
        dist = (pair[1] - pair[0]).abs_().reshape(-1)
        dmax = max(dmax, int(dist.max()))
        dsum += int(dist.sum())
        j = torch.where(dist <= 1, dist, torch.frexp((dist - 1).to(torch.float64)).exponent.to(torch.int64) + 1)
        hist += torch.bincount(j, minlength=nb)
    counts = hist.cpu().numpy()
    rows = [("ulp_share", float(e), c / N, _NAN) for e, c in zip(edges, counts)]
    rows += [("ulp_count", float(e), float(c), _NAN) for e, c in zip(edges, counts)]
    rows += [("unchanged_share", _NAN, counts[0] / N, _NAN), ("one_ulp_share", _NAN, counts[1] / N, _NAN),
             ("max_ulp", _NAN, float(dmax), _NAN), ("mean_ulp", _NAN, dsum / N, _NAN),
             ("exact_in_dtype", _NAN, float(exact), _NAN)]
    return _frame(rows)


# -------------------------------------------------------------- intruders
def lora_intruders(W_base: Any, A: Any, B: Any, scale: float = 1.0, *, k: int = 10,
                   epsilons: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9), side: str = "left",
                   n_base: int | None = None, method: str = "auto", device: Any = "auto",
                   block_rows: int | None = None) -> pd.DataFrame:
    r"""Intruder dimensions of a LoRA update (Shuttleworth et al., "LoRA vs Full Fine-tuning: An
    Illusion of Equivalence", arXiv 2410.21228, Def. 1).

    ``W_tuned = W_base + scale·B·A`` (``B``: ``m × r``, peft's ``lora_B``; ``A``: ``r × n``,
    ``lora_A``).  With ``y_1 … y_k`` the top-``k`` left singular vectors of ``W_tuned`` (right
    ones with ``side="right"``) and ``x_1 … x_{n_base}`` those of ``W_base``, ``y_j`` is an
    **intruder dimension** at threshold ``ε`` iff ``max_i |cos(y_j, x_i)| < ε``.  The paper
    compares against all singular vectors of ``W_base`` (``n_base = min(m, n)``, the default;
    for a square matrix that is a complete basis) and uses ``k = 10``; it sweeps ``ε``.

    Rows: ``max_cos`` (param ``j = 1…k``: ``max_i |⟨y_j, x_i⟩|``), ``n_intruders`` (param ``ε``),
    ``intruder_energy_share`` (param ``ε``: ``Σ_{j intruder} σ_j² / Σ_{j≤k} σ_j²`` of
    ``W_tuned``).  Baseline: NaN.  A direction spread evenly over ``p`` base vectors scores
    ``1/√p``: with a complete basis a random unit vector of ``R^m`` scores about
    ``sqrt(2 ln m / m)``, so "intruder" means "not aligned with any single base direction".

    *Memory.*  :func:`analysis.spectra.spectrum` needs a matrix, so ``W_tuned`` is formed once,
    block by block (``B[rows] @ A`` per row block, never a float64 copy of the whole): in float64
    up to 2^22 entries, else in float32 (``4·m·n`` bytes, one copy of the matrix in float32; its
    rounding of ``6e-8`` relative per entry moves the cosines by ``~1e-7``, far below any ``ε``
    of interest).  The base vectors cost ``8·(m + n)·n_base`` bytes: pass a smaller ``n_base``
    for a huge matrix (then only the top ``n_base`` base directions are compared against).

    Examples
    --------
    A rank-1 update along a new direction ``e_3`` (orthogonal to the top two of the base), made
    dominant: the top singular vector of the tuned matrix is an intruder.

    >>> W = np.diag([3.0, 2.0, 0.0, 0.0])
    >>> Bf, Af = np.array([[0.0], [0.0], [1.0], [0.0]]), np.array([[0.0, 0.0, 10.0, 0.0]])
    >>> out = lora_intruders(W, Af, Bf, k=1, n_base=2, epsilons=[0.5])
    >>> out.set_index("metric")["value"].to_dict()
    {'max_cos': 0.0, 'n_intruders': 1.0, 'intruder_energy_share': 1.0}
    """
    Wb = _as_tensor("W_base", W_base)
    At, Bt = _as_tensor("A", A), _as_tensor("B", B)
    m, n = (int(x) for x in Wb.shape)
    if Bt.shape[0] != m or At.shape[1] != n or Bt.shape[1] != At.shape[0]:
        raise ValueError(f"B (m × r) and A (r × n) must match W_base {m} × {n}: got B {tuple(Bt.shape)}, "
                         f"A {tuple(At.shape)}")
    s = checks.number("scale", scale)
    d = min(m, n)
    k = checks.integer("k", k, low=1, high=d)
    eps = _fractions("epsilons", epsilons, allow_empty=False)
    checks.choice("side", side, ("left", "right"))
    n_base = d if n_base is None else checks.integer("n_base", n_base, low=1, high=d)
    opts = _options(method, device)
    dev = resolve_device(device, Wb)
    dt = torch.float64 if m * n <= (1 << 22) else torch.float32
    Wt = torch.empty((m, n), dtype=dt, device=dev)
    A64 = At.to(dev, torch.float64)
    for sl, (b, bf) in _Rows([Wb, Bt], dev, block_rows, False, "W_tuned"):
        b.addmm_(bf, A64, alpha=s)
        _finite("W_base, A and B", float(b.sum()))
        Wt[sl] = b.to(dt)
    st = _spectrum("W_base + scale·B·A", Wt, k, None, opts)
    del Wt
    sb = _spectrum("W_base", Wb, n_base, None, opts)
    Y = st.u if side == "left" else st.v
    X = sb.u if side == "left" else sb.v
    assert X is not None and Y is not None
    cos = np.abs(X.T @ Y).max(axis=0)                              # (k,)
    sig2 = np.asarray(st.s[:k], dtype=np.float64) ** 2
    tot = float(sig2.sum())
    rows = [("max_cos", float(j + 1), float(min(1.0, c)), _NAN) for j, c in enumerate(cos)]
    for e in eps:
        intr = cos < e
        rows += [("n_intruders", e, float(intr.sum()), _NAN),
                 ("intruder_energy_share", e, float(sig2[intr].sum() / tot) if tot > 0 else 0.0, _NAN)]
    return _frame(rows)


# ------------------------------------------------------------------ all
def update_geometry(W_base: Any, W_rl: Any, *, ks: int | Sequence[int] | None = None,
                    top_fractions: Sequence[float] = (0.001, 0.01, 0.05),
                    rms_multiples: Sequence[float] = (1e-4, 1e-3, 1e-2),
                    mask_fractions: Sequence[float] = (0.01, 0.05), update_fraction: float = 0.05,
                    ulp_dtype: Any = "bfloat16", method: str = "auto", device: Any = "auto",
                    block_rows: int | None = None, progress: bool = False) -> pd.DataFrame:
    """Every metric of this module for one pair, with one spectrum computation per matrix.

    :func:`subspace_energy` and :func:`subspace_rotation` at ``ks``,
    :func:`coordinate_concentration` and :func:`ulp_histogram` (``ulp_dtype=None`` skips it),
    concatenated, with a column ``group`` (``"energy"``, ``"rotation"``, ``"coordinates"``,
    ``"ulp"``) in front.  ``W_base`` needs the top ``max(max(ks), principal ranks)`` singular
    vectors, ``W_rl`` the top ``max(ks)``.

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
    dev = resolve_device(device, Wb)
    ranks = _principal_ranks(masks, d, None)
    sb = _spectrum("W_base", Wb, max([*ks_, *ranks.values()]), None, opts)
    sr = _spectrum("W_rl", Wr, max(ks_), None, opts)
    parts = [("energy", _frame(_energy_rows(Wb, Wr, sb, ks_, dev, block_rows, progress))),
             ("rotation", _frame(_rotation_rows(sb, sr, ks_, dev))),
             ("coordinates", _frame(_coordinate_rows(Wb, Wr, sb, top, mults, masks, q_upd, ranks, dev,
                                                     block_rows, progress)))]
    if ulp_dtype is not None:
        parts.append(("ulp", ulp_histogram(Wb, Wr, ulp_dtype, device=dev, block_rows=block_rows, progress=progress)))
    out = pd.concat([p.assign(group=g) for g, p in parts], ignore_index=True)
    return out[["group", *COLUMNS]]
