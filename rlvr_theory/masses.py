"""Positive and negative gradient masses (m_S, m_F) of an advantage function.

Convention (FADE Sec. 2, Eq. 1-3, Table 1, divided by the batch size): for one
prompt with ``G`` rollouts, rewards ``r`` and advantages ``A = adv(r)``, the update is

    Σ_i A_i ∇log π(τ_i) = G·(M_S·∇̄_S − M_F·∇̄_F),
    M_S = (1/G)·Σ_{i∈S} A_i,        M_F = −(1/G)·Σ_{i∈F} A_i,

with ``S`` the successful and ``F`` the failed rollouts and ∇̄ their mean score
gradients.  The papers' Table 1 writes the same quantities times the batch size.

Three views of the masses:

* :func:`of_group` — the masses of given reward groups (any leading batch axes);
* :func:`closed_form` — the paper's formula evaluated at a solve rate ``p`` (the
  "plug-in" value, exact at ``p = p̂`` for families of kind ``"exact"``);
* :func:`exact` — the exact finite-G expectation ``m(p, G) = Σ_x Binom(x; G, p)·M(x)``,
  which the papers do not give.

Ratios: the sign ratio ``m_S/m_F`` and the advantage ratio ``ρ = m_S·p/(m_F·q)``
(FADE Table 7, Sec. 11.3).  Where both masses vanish (``p ∈ {0, 1}``) the ratios are
their limits from inside ``(0, 1)``; ``m_S > 0 = m_F`` gives ``inf``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rlvr_plumbing import checks

from . import advantages as _adv
from .advantages import Advantage, as_advantage

#: sympy, imported on first use (see :class:`rlvr_theory.advantages._LazySympy`); pandas and scipy are
#: imported inside the functions that use them, so that ``rlvr-theory masses`` loads neither
sp = _adv.sp
#: lambdify's ``modules``: numpy's own namespace.  The same generated code as ``"numpy"`` (checked
#: on every closed form), without sympy's ``from numpy import *``, which imports numpy.testing
#: and numpy.f2py (about 0.25 s of ``rlvr-theory masses``)
_NUMPY = [np]

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Masses",
    "of_group",
    "abs_adv_sum",
    "closed_form",
    "plugin",
    "exact",
    "outcome_advantages",
    "sign_ratio",
    "advantage_ratio",
    "table",
    "expressions",
    "peak",
    "as_advantage",
    "check_p",
    "check_group_size",
    "lambdified",
    "binom_pmf",
    "memory_needed",
    "available_memory",
    "check_memory",
]


class Masses(NamedTuple):
    """Positive mass ``m_S`` and negative mass ``m_F`` (arrays of equal shape)."""

    m_S: np.ndarray
    m_F: np.ndarray


# ----------------------------------------------------------------- helpers
def check_p(p: Any) -> np.ndarray:
    """Solve rate(s) ``p`` in [0, 1] as a float64 array (:func:`rlvr_plumbing.checks.array`)."""
    try:
        return checks.array("p", p, low=0, high=1)
    except ValueError:
        raise ValueError(f"p must lie in [0, 1], got {p!r}") from None


def check_group_size(G: Any, adv: Advantage | None = None, *, required: bool = True) -> int | None:
    """The group size as an ``int >= 1`` (:func:`rlvr_plumbing.checks.integer`), and at least
    ``adv.min_group_size()``; ``None`` passes when not ``required``."""
    if G is None:
        if required:
            raise ValueError("G is required: the group size, an integer >= 1")
        return None
    G = checks.integer("G", G, low=1)
    if adv is not None and G < adv.min_group_size():
        raise ValueError(f"G must be >= {adv.min_group_size()} for {adv!r}, got {G}")
    return G


def _unit(adv: Advantage) -> Advantage | None:
    """``adv`` at reward values (0, 1) where its masses are ``(R_c − R_w)^power`` times those
    (:meth:`~rlvr_theory.advantages.Advantage.reward_scale_power`) and its reward values differ;
    else ``None``.  Computing at (0, 1) and rescaling once keeps extreme but finite reward
    values (``(-1e308, 1e308)``, ``(0, 5e-324)``) from overflowing or underflowing on the way,
    and the ratios m_S/m_F, ρ (free of the scale) exact."""
    if adv.reward_values == (0.0, 1.0) or adv.reward_scale_power() is None:
        return None
    return adv.with_params(reward_values=(0.0, 1.0))


# ------------------------------------------------------------ scale limits
#: bytes per outcome x = 0..G held at once by the O(G) evaluation of one p: the per-outcome advantages
#: and masses with their temporaries (measured with tracemalloc at G = 2**16 and 2**20 over every
#: registered family: 124-188 B per outcome; rounded up)
_BYTES_PER_OUTCOME = 256
#: bytes per outcome and value of p in one chunk of p values (at most ``_PMF_CHUNK // (G + 1)`` of
#: them): the binomial pmf and its product (measured about 15 B), and for batch-level families also
#: the per-p population arrays (measured about 72 B)
_BYTES_PER_OUTCOME_AND_P = {False: 16, True: 80}
#: share of the available memory that a request may use (the margin of ``rlvr_plumbing.runtime.check_memory``)
_MEMORY_FRACTION = 0.9
#: requests up to this size are not compared with the memory available (G up to about 2**17)
_SMALL_REQUEST = 32 * 2**20


def memory_needed(G: int, n_p: int = 1, *, batch_level: bool = False) -> int:
    """Bytes that :func:`exact` needs at group size ``G`` for ``n_p`` values of ``p`` (an estimate
    of the largest buffers, in Python integers: no overflow, whatever ``G``).

    >>> memory_needed(8)
    2448
    >>> memory_needed(2**40) // 2**40            # about 272 TiB
    272
    """
    rows = min(max(int(n_p), 1), max(1, _PMF_CHUNK // (int(G) + 1)))
    return (int(G) + 1) * (_BYTES_PER_OUTCOME + rows * _BYTES_PER_OUTCOME_AND_P[bool(batch_level)])


def check_memory(G: int, n_p: int = 1, *, batch_level: bool = False, what: str = "the exact masses",
                  need: int | None = None) -> None:
    """``ValueError`` naming ``G``, the estimate (``need``, default :func:`memory_needed`) and the
    memory available (:func:`available_memory`, 90% of it, through
    :func:`rlvr_plumbing.checks.fits_in_memory`), before anything of size O(G) is
    allocated; ``what`` says what the memory is for.  Requests up to 32 MiB pass unchecked.

    >>> check_memory(1000)
    >>> check_memory(2**40)
    Traceback (most recent call last):
    ...
    ValueError: G = 1099511627776 needs about 272.0 TiB of memory for the exact masses (...); ... available (...): choose a smaller G
    """
    need = memory_needed(G, n_p, batch_level=batch_level) if need is None else need
    if need <= _SMALL_REQUEST:  # the common case costs no reading of the system's memory
        return
    checks.fits_in_memory(need, f"G = {G}", available=available_memory(), fraction=_MEMORY_FRACTION,
                          where=f" for {what} (the G + 1 outcomes of a group, {n_p} value{'s' if n_p != 1 else ''} "
                                "of p)",
                          advice=f" ({_MEMORY_FRACTION:.0%} of the memory free now): choose a smaller G")


def available_memory() -> int:
    """The RAM a new allocation can use now (:func:`rlvr_plumbing.checks.available_host_memory`;
    the tests replace this name to simulate a small machine)."""
    return checks.available_host_memory()


# ---------------------------------------------------------------- of_group
def of_group(adv: Advantage | str, rewards: Any, *, lengths: Any = None) -> Masses:
    """Masses of each group: ``M_S = (1/G)Σ_{i∈S} A_i``, ``M_F = −(1/G)Σ_{i∈F} A_i``.

    ``rewards``: ``[..., G]`` binary array (values ``adv.reward_values``).  Returns arrays of
    shape ``rewards.shape[:-1]``.  Source: FADE Eq. 3.

    Examples
    --------
    >>> from rlvr_theory import advantages, masses
    >>> rewards = np.array([[1, 0, 0, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]])
    >>> masses.of_group("dr_grpo", rewards)
    Masses(m_S=array([0.1875  , 0.234375]), m_F=array([0.1875  , 0.234375]))
    >>> masses.of_group(advantages.get("asym_grpo", delta=0.5), rewards[:1])
    Masses(m_S=array([0.1875]), m_F=array([0.375]))
    """
    adv = as_advantage(adv)
    A = adv(rewards, lengths=lengths)
    success = np.asarray(rewards, dtype=float) == adv.reward_values[1]
    Gn = A.shape[-1]
    return Masses(np.where(success, A, 0.0).sum(-1) / Gn, -np.where(success, 0.0, A).sum(-1) / Gn)


def abs_adv_sum(adv: Advantage | str, rewards: Any, *, lengths: Any = None) -> np.ndarray:
    """Σ_i |A_i| per group, the update magnitude of A-GRAE Theorem 2.

    For GRPO it equals ``2G·sqrt(p̂(1−p̂))``; for the hard/easy controls ``G·sqrt(1−p̂)``
    and ``G·sqrt(p̂)`` (A-GRAE Table 1b).
    """
    return np.abs(as_advantage(adv)(rewards, lengths=lengths)).sum(-1)


def outcome_advantages(adv: Advantage | str, G: int) -> pd.DataFrame:
    """The advantage of a success and of a failure in a group with ``x`` successes.

    One row per ``x = 0..G``: ``x``, ``p_hat``, ``A_success`` (NaN if x = 0),
    ``A_failure`` (NaN if x = G), ``m_S``, ``m_F``, ``abs_adv_sum`` (Σ_i |A_i| of that group, as
    :func:`abs_adv_sum`).  Group-level families
    only (batch-level ones need a batch).  Used by F-GRPO Fig. 3 and A-GRAE Fig. 6.
    O(G) time and memory (:meth:`~rlvr_theory.advantages.Advantage.outcome_values`).
    """
    adv = as_advantage(adv)
    G = check_group_size(G, adv)
    if adv.batch_level:
        raise ValueError(f"adv: {adv!r} is batch-level (its advantages depend on the whole batch); "
                         "outcome_advantages needs a group-level family")
    check_memory(G, what="the outcome advantages")
    m_s, m_f, mean_abs = _per_x(adv, G)
    a_s, a_f = adv.outcome_values(G)
    x = np.arange(G + 1)
    import pandas as pd

    return pd.DataFrame({"x": x, "p_hat": x / G, "A_success": a_s, "A_failure": a_f,
                         "m_S": m_s, "m_F": m_f, "abs_adv_sum": G * mean_abs})


def _from_outcomes(a_s: np.ndarray, a_f: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M_S(x) = x·A_s/G, M_F(x) = −(G−x)·A_f/G and mean|A|(x) from the per-outcome advantages."""
    x = np.arange(G + 1, dtype=float)
    # the fractions x/G first: x·A may overflow where (x/G)·A does not (A ~ 1e308)
    s_part = np.where(x > 0, (x / G) * np.nan_to_num(a_s, nan=0.0), 0.0)
    f_part = np.where(x < G, ((G - x) / G) * np.nan_to_num(a_f, nan=0.0), 0.0)
    return s_part, -f_part, np.abs(s_part) + np.abs(f_part)


def _per_x_uncached(adv: Advantage, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    check_memory(G)
    out = _from_outcomes(*adv.outcome_values(G), G)
    for arr in out:
        arr.setflags(write=False)
    return out


_per_x_small = functools.lru_cache(maxsize=512)(_per_x_uncached)
_per_x_large = functools.lru_cache(maxsize=4)(_per_x_uncached)  # O(G) each: few kept


def _per_x(adv: Advantage, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M_S(x), M_F(x), mean|A|(x) for x = 0..G (group-level families), O(G) memory."""
    return (_per_x_small if G <= 4096 else _per_x_large)(adv, G)


def _per_x_population(adv: Advantage, G: int, p: np.ndarray) -> tuple[np.ndarray, ...]:
    """Like :func:`_per_x` with one row per p for batch-level families: arrays [P, G+1]."""
    check_memory(G, np.size(p), batch_level=True)
    return _from_outcomes(*adv.outcome_values(G, p=p), G)


#: outside ``|x − Gp| < t`` with ``t = a/3 + sqrt(a²/9 + 2a·Gpq) + 1`` every pmf value is below
#: ``e^{−a}`` (Bernstein's inequality), i.e. 0 in float64 for ``a = 750``
_PMF_TAIL = 750.0


@functools.lru_cache(maxsize=64)
def _binomial_coefficients(G: int) -> np.ndarray:
    """``C(G, x)`` for ``x = 0..G`` (G <= 1000: below 1e300), exact integers rounded once to float64
    (read-only, cached).  Python's ``math.comb``, not scipy's ``comb`` (off by up to 2.5e-12
    relative here): importing scipy.special would cost ``rlvr-theory masses`` about 0.3 s."""
    out = np.array([float(math.comb(G, x)) for x in range(G + 1)])
    out.flags.writeable = False
    return out


def binom_pmf(p: Any, G: int) -> np.ndarray:
    """pmf[..., x] = Binom(x; G, p), shape p.shape + (G+1,).

    ``C(G, x)·p^x·q^(G−x)`` in floating point up to G = 1000 (``C(G, x)`` exact integers rounded
    once to float64, :func:`_binomial_coefficients`; exact 0**0 = 1 at
    p ∈ {0, 1}, harmless underflow for subnormal p); beyond, scipy's binomial pmf (accurate to
    a few ulps, where a log-gamma form loses ~1e-9 at G = 2**20), evaluated only where it is
    not 0 in float64 (a window of O(sqrt(G)) around ``Gp``).  Memory ``8·(G+1)`` bytes per p:
    :func:`exact` calls it on chunks of p.
    """
    p = check_p(p)
    G = check_group_size(G)
    # the [p.size, G+1] result and, up to G = 1000, its float64 factors: 32 bytes per entry
    check_memory(G, p.size, what="the binomial pmf", need=32 * (G + 1) * max(p.size, 1))
    if G <= 1000:
        x = np.arange(G + 1)
        pc = p[..., None]
        return _binomial_coefficients(G) * np.power(pc, x) * np.power(1.0 - pc, G - x)
    from scipy import stats

    flat = p.ravel()
    out = np.zeros((flat.size, G + 1))
    a = _PMF_TAIL
    for i, pi in enumerate(flat):
        t = a / 3 + math.sqrt(a * a / 9 + 2 * a * G * pi * (1 - pi)) + 1
        lo, hi = max(0, math.floor(G * pi - t)), min(G, math.ceil(G * pi + t))
        out[i, lo : hi + 1] = stats.binom.pmf(np.arange(lo, hi + 1), G, pi)
    return out.reshape(p.shape + (G + 1,))


#: float64 entries of the binomial pmf computed at once by :func:`exact` (64 MiB): the p values
#: are processed in chunks of ``max(1, _PMF_CHUNK // (G + 1))``
_PMF_CHUNK = 2**23


def _p_chunks(n: int, G: int):
    step = max(1, _PMF_CHUNK // (G + 1))
    for lo in range(0, n, step):
        yield slice(lo, min(n, lo + step))


# -------------------------------------------------------------------- exact
def exact(adv: Advantage | str, p: Any, G: int, *, with_abs: bool = False) -> Masses:
    """Exact finite-G expectation ``m(p, G) = Σ_{x=0}^{G} Binom(x; G, p)·M(x)``.

    ``M(x)`` are the masses of a group with ``x`` successes (:func:`of_group`), so this is
    exact for every family, including those whose paper formula only holds given ``p̂``
    or as ``G → ∞``.  Vectorised over ``p``.  With ``with_abs=True`` returns a triple whose
    third entry is ``E[(1/G)Σ_i|A_i|]``.  Batch-level families are evaluated in a large
    homogeneous batch of prompts at solve rate ``p`` (A-GRAE with ``omega=None``: ``ω = p``;
    ``reinforce_pp``: ``σ_batch = Δ·sqrt(pq(G−1)/G)``).

    Cost: the ``G + 1`` groups are evaluated in their compressed form (two reward values
    with multiplicities, :meth:`~rlvr_theory.advantages.Advantage.outcome_values`), so time
    and memory are O(G) per ``p`` (``G = 2**20``: well under a second per ``p``; the ``p``
    values are processed in chunks of bounded memory).  A family registered elsewhere that
    is not compressible is evaluated on dense groups up to ``G = 16384``.

    Examples
    --------
    >>> from rlvr_theory import masses
    >>> masses.exact("grpo", [0.25, 0.5], 8)             # below the plug-in sqrt(pq)
    Masses(m_S=array([0.37989667, 0.46391399]), m_F=array([0.37989667, 0.46391399]))
    >>> masses.exact("reinforce_pp", 0.25, 8)             # sqrt(pq(G−1)/G)
    Masses(m_S=array(0.40504629), m_F=array(0.40504629))
    """
    adv = as_advantage(adv)
    pa = check_p(p)
    G = check_group_size(G, adv)
    check_memory(G, pa.size, batch_level=adv.batch_level)  # before anything of size O(G)
    unit = _unit(adv)
    if unit is not None:
        out = [adv.rescale(t, what="the exact masses") for t in exact(unit, pa, G, with_abs=True)]
        return (out[0], out[1], out[2]) if with_abs else Masses(out[0], out[1])  # type: ignore[return-value]
    flat = pa.ravel()
    out = [np.empty(flat.shape) for _ in range(3)]
    per_x = None if adv.batch_level else _per_x(adv, G)
    for sl in _p_chunks(flat.size, G):  # bounded memory: O(G) per p, a fixed budget per chunk
        pmf = binom_pmf(flat[sl], G)
        if adv.batch_level:
            for o, t in zip(out, _per_x_population(adv, G, flat[sl])):
                o[sl] = np.einsum("px,px->p", pmf, t)
        else:
            for o, t in zip(out, per_x):
                o[sl] = pmf @ t
    out = [o.reshape(pa.shape) for o in out]
    if with_abs:
        return out[0], out[1], out[2]  # type: ignore[return-value]
    return Masses(out[0], out[1])


# -------------------------------------------------------------- closed form
@functools.lru_cache(maxsize=512)
def lambdified(adv: Advantage, G: int | None):
    m_s, m_f = adv.closed_form()
    needs_G = any(_adv.G in e.free_symbols for e in (m_s, m_f))
    if needs_G and G is None:
        raise ValueError(f"G is required: the closed form of {adv!r} depends on the group size")
    if needs_G:
        m_s, m_f = m_s.subs(_adv.G, G), m_f.subs(_adv.G, G)
    return sp.lambdify(_adv.p, m_s, _NUMPY), sp.lambdify(_adv.p, m_f, _NUMPY), (m_s, m_f)


@functools.cache
def _positive_t() -> Any:
    """The positive sympy symbol ``t`` of :func:`_one_sided_limit` (module attribute ``_t``)."""
    return sp.Symbol("t", positive=True)


def __getattr__(name: str) -> Any:
    """``_t``, made with sympy on first use (see :func:`_positive_t`)."""
    if name == "_t":
        return _positive_t()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _one_sided_limit(expr: sp.Expr, at: float) -> sp.Expr:
    """lim of ``expr`` as p -> 0+ (``at`` = 0) or p -> 1- (``at`` = 1), through p = t or
    p = 1 - t with a positive symbol t (sympy's direct limit in the nonnegative ``p`` can
    return the wrong sign, e.g. for d/dp sqrt(p(1-p)) at 1)."""
    t = _positive_t()
    sub = t if at == 0 else 1 - t
    return sp.limit(expr.subs(_adv.p, sub), t, 0, "+")


def _eval(fn, p: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.broadcast_to(np.asarray(fn(p), dtype=float), p.shape).copy()


def closed_form(adv: Advantage | str, p: Any, G: int | None = None) -> Masses:
    """The paper's masses evaluated at solve rate(s) ``p`` (FADE Table 1 / App. 8).

    ``G`` is needed only where the formula depends on the group size (``rloo``,
    ``passk_tang``, ``softmax``, ``logmeanexp``, ``iac``, ``grpo`` with ``ddof=1``).
    For families of kind ``"exact"``, ``closed_form(adv, X/G, G)`` equals
    ``of_group`` of any group with ``X`` successes.

    Examples
    --------
    >>> from rlvr_theory import masses
    >>> masses.closed_form("grpo", [0.25, 0.5])          # sqrt(pq)
    Masses(m_S=array([0.4330127, 0.5      ]), m_F=array([0.4330127, 0.5      ]))
    >>> masses.closed_form("rloo", 0.25, G=8)             # pq·G/(G−1)
    Masses(m_S=array(0.21428571), m_F=array(0.21428571))
    """
    adv = as_advantage(adv)
    pa = check_p(p)
    G = check_group_size(G, adv, required=False)
    unit = _unit(adv)
    if unit is not None:
        m = closed_form(unit, pa, G)
        return Masses(adv.rescale(m.m_S, what="the closed-form masses"),
                      adv.rescale(m.m_F, what="the closed-form masses"))
    f_s, f_f, exprs = lambdified(adv, G)
    try:
        m_s, m_f = _eval(f_s, pa), _eval(f_f, pa)
    except (OverflowError, TypeError):  # an exact reward value too large for a float in the formula
        raise ValueError(f"reward_values: the closed form of {adv!r} overflows float64 at these "
                         "reward values") from None
    bad = ~(np.isfinite(m_s) & np.isfinite(m_f))
    if np.any(bad):  # only at the closed interval's ends: use the one-sided limits
        for val in np.unique(pa[bad]):
            if val not in (0.0, 1.0):
                if adv.reward_values != (0.0, 1.0):
                    raise ValueError(f"reward_values: the closed form of {adv!r} is not finite at p = {val} "
                                     "(it overflows float64 at these reward values)")
                raise ValueError(f"p: the closed form of {adv!r} is not finite at p = {val}")
            lim = [float(_one_sided_limit(e, val)) for e in exprs]
            sel = bad & (pa == val)
            m_s[sel], m_f[sel] = lim
    return Masses(m_s, m_f)


def plugin(adv: Advantage | str, p: Any, G: int) -> Masses:
    """:func:`closed_form` at solve rate(s) ``p`` and group size ``G``, computed without sympy where
    the family allows it.

    For a group-level, compressible family of kind ``"exact"``
    (:meth:`~rlvr_theory.advantages.Advantage.is_plugin_by_counts`) and ``p`` inside (0, 1), the closed form equals the family's definition on one group of
    ``G`` rollouts with fractional counts ``(pG, (1−p)G)`` of successes and failures (at ``p = x/G``
    that is the group with ``x`` successes, which ``kind == "exact"`` states; in between, the
    same smooth function of ``p̂``): ``M_S = p·A_s``, ``M_F = −(1−p)·A_f``.  Everything else
    (other kinds, batch-level families, ``p ∈ {0, 1}``, a non-finite value) goes to
    :func:`closed_form`.  ``rlvr-theory masses`` prints this, so it loads no sympy for those
    families (sympy's import is ~0.5 s of the command); tests/rlvr_theory/test_plugin.py checks it
    against :func:`closed_form` for every such family.

    >>> plugin("grpo", [0.25, 0.3], 8)                    # sqrt(pq)
    Masses(m_S=array([0.4330127 , 0.45825757]), m_F=array([0.4330127 , 0.45825757]))
    """
    adv = as_advantage(adv)
    pa = check_p(p)
    G = check_group_size(G, adv)
    unit = _unit(adv)
    if unit is not None:
        m = plugin(unit, pa, G)
        return Masses(adv.rescale(m.m_S, what="the closed-form masses"),
                      adv.rescale(m.m_F, what="the closed-form masses"))
    if not adv.is_plugin_by_counts() or np.any((pa <= 0) | (pa >= 1)):
        return closed_form(adv, pa, G)
    x = pa.reshape(-1, 1) * G
    s = np.broadcast_to(np.array([1.0, 0.0]), (x.shape[0], 2))
    rw, rc = adv.reward_values
    g = adv._group(np.where(s > 0, rc, rw), s, np.concatenate([x, G - x], axis=1), G)
    with np.errstate(all="ignore"):
        A = adv._compute(g, adv.default_lengths(s) if adv.uses_lengths else None)
        m_s, m_f = pa.ravel() * A[:, 0], -(1.0 - pa.ravel()) * A[:, 1]
    if not (np.all(np.isfinite(m_s)) and np.all(np.isfinite(m_f))):
        return closed_form(adv, pa, G)
    return Masses(m_s.reshape(pa.shape), m_f.reshape(pa.shape))


_exact = exact  # the ratio functions take a keyword named ``exact``


# ------------------------------------------------------------------- ratios
def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.broadcast_arrays(np.asarray(num, float), np.asarray(den, float))
    out = np.full(num.shape, np.nan)
    nz = den != 0
    out[nz] = num[nz] / den[nz]
    out[~nz & (num > 0)] = np.inf
    out[~nz & (num < 0)] = -np.inf
    return out


@functools.lru_cache(maxsize=1024)
def _closed_ratio_limit(adv: Advantage, G: int | None, at: float, rho: bool) -> float:
    """Limit of the closed-form ratio at p -> 0+ or 1-: direct substitution when sympy's
    automatic cancellation already removed the 0/0, else ``sympy.limit``."""
    f_s, f_f, (m_s, m_f) = lambdified(adv, G)
    inside = np.array([1e-7 if at == 0 else 1 - 1e-7])
    if m_s.is_zero:  # the positive mass vanishes identically
        return 0.0
    if m_f.is_zero:  # the negative mass vanishes identically: ±inf by the sign of m_S inside
        return -np.inf if _eval(f_s, inside)[0] < 0 else np.inf
    expr = m_s / m_f * (_adv.p / (1 - _adv.p) if rho else 1)
    point = sp.Integer(int(at))
    val = expr.subs(_adv.p, point)
    if not val.is_finite:
        try:
            val = _one_sided_limit(expr, at)
        except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gave up
            val = sp.nan
    try:
        out = float(val)
    except TypeError:  # complex infinity
        out = float("nan")
    if np.isnan(out):  # sympy could not decide (piecewise forms): the ratio just inside
        num = _eval(f_s, inside)[0] * (inside[0] if rho else 1.0)
        den = _eval(f_f, inside)[0] * ((1 - inside[0]) if rho else 1.0)
        out = float(_ratio(num, den))
    return out


def _exact_ratio_limit(adv: Advantage, G: int, at: float, rho: bool) -> float:
    """Limit of E[M_S]/E[M_F] as p -> 0 or 1.

    Near an end the expectations are dominated by the group count x closest to it with a
    non-zero mass, so the ratio tends to M_S(x)/M_F(x) there; ρ multiplies by p/q.
    """
    if adv.batch_level:
        m_s, m_f, _ = (t[0] for t in _per_x_population(adv, G, np.array([at])))
        if not (np.any(m_s) or np.any(m_f)):
            # the batch scale vanishes at the end (reinforce_pp: σ_batch = 0); the ratio of
            # each x does not depend on it, so read it just inside
            m_s, m_f, _ = (t[0] for t in _per_x_population(adv, G, np.array([abs(at - 1e-9)])))
    else:
        m_s, m_f, _ = _per_x(adv, G)
    xs = range(G + 1) if at == 0 else range(G, -1, -1)
    r = float("nan")
    for x in xs:
        if m_s[x] != 0 or m_f[x] != 0:
            r = float(_ratio(m_s[x], m_f[x]))
            break
    if rho and r not in (0.0, np.inf) and not np.isnan(r):
        r = 0.0 if at == 0 else np.inf
    return r


@functools.lru_cache(maxsize=512)
def _ratio_fn(adv: Advantage, G: int | None):
    """m_S/m_F as one lambdified expression (sympy cancels common factors: 1 for
    sign-balanced families even where both masses vanish or underflow)."""
    m_s, m_f = lambdified(adv, G)[2]
    expr = m_s / m_f
    if m_s.is_zero or m_f.is_zero or expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        return None  # piecewise forms with a vanishing branch: left to the limits
    return sp.lambdify(_adv.p, expr, _NUMPY)


#: solve rates at which a batch-level family's per-outcome masses are read to decide that a group
#: size never carries signal (its masses are those of the whole batch's success rate)
_INTERIOR = np.linspace(0.05, 0.95, 19)


def _never_signal(adv: Advantage, G: int) -> bool:
    """True when every outcome of a group of size ``G`` gets zero mass (e.g. a group-centred
    advantage at G = 1); for a batch-level family, at every batch success rate of :data:`_INTERIOR`."""
    per_x = _per_x_population(adv, G, _INTERIOR) if adv.batch_level else _per_x(adv, G)
    return not any(np.any(t) for t in per_x[:2])


def _ratios(adv: Advantage, p: np.ndarray, G: int | None, m: Masses, use_exact: bool,
            rho: bool) -> np.ndarray:
    """Sign ratio (or ρ) from masses ``m``; 0/0 resolved symbolically or by the one-sided
    limit toward the nearer end of [0, 1] (where the masses vanish or underflow)."""
    out = _ratio(m.m_S, m.m_F)
    undefined = (m.m_S == 0) & (m.m_F == 0)
    if not use_exact and np.any(undefined):
        fn = _ratio_fn(adv, G)
        if fn is not None:
            val = _eval(fn, p)
            ok = undefined & np.isfinite(val)
            out[ok] = val[ok]
            undefined &= ~ok
    if rho:
        with np.errstate(all="ignore"):
            out = np.array(out * (p / (1.0 - p)), dtype=float)
        undefined |= np.isnan(out)
    if np.any(undefined):
        if use_exact and _never_signal(adv, G):
            if adv.reward_values != (0.0, 1.0) and any(np.any(t) for t in _per_x(adv.with_params(
                    reward_values=(0.0, 1.0)), G)[:2]):
                raise ValueError(f"reward_values: the masses of {adv!r} underflow to 0 for every group of "
                                 f"size G = {G} (R_c − R_w too small for float64); m_S/m_F is undefined")
            raise ValueError(f"G: {adv!r} gives zero masses for every group of size G = {G}; "
                             "m_S/m_F is undefined")
        for at in (0.0, 1.0):
            sel = undefined & ((p < 0.5) if at == 0.0 else (p >= 0.5))
            if np.any(sel):
                out[sel] = (_exact_ratio_limit(adv, G, at, rho) if use_exact
                            else _closed_ratio_limit(adv, G, at, rho))
    return out


def sign_ratio(adv: Advantage | str, p: Any, G: int | None = None, *, exact: bool = False) -> np.ndarray:
    """``m_S/m_F``: 1 for sign-balanced families (FADE Sec. 2.2), ``inf`` when ``m_F = 0 < m_S``.

    ``exact=True`` uses the finite-G expectations (``G`` required).
    """
    adv = as_advantage(adv)
    pa = check_p(p)
    G = check_group_size(G, adv, required=exact)
    adv = _unit(adv) or adv  # the ratio does not depend on the reward scale
    m = _exact(adv, pa, G) if exact else closed_form(adv, pa, G)
    return _ratios(adv, pa, G, m, exact, rho=False)


def advantage_ratio(adv: Advantage | str, p: Any, G: int | None = None, *, exact: bool = False) -> np.ndarray:
    """``ρ(p) = m_S·p/(m_F·q)`` (FADE Sec. 4.1, Table 7); ``p/(1−p)`` for sign-balanced families.

    ``exact=True`` uses the finite-G expectations (``G`` required).  At ``p ∈ {0, 1}`` the
    one-sided limits are returned.

    Examples
    --------
    >>> from rlvr_theory import advantages, masses
    >>> masses.advantage_ratio("grpo", [0.2, 0.5, 1.0])
    array([0.25, 1.  ,  inf])
    >>> masses.advantage_ratio(advantages.get("asym_grpo", delta=0.5), 0.5)  # failure-biased
    array(0.5)
    """
    adv = as_advantage(adv)
    pa = check_p(p)
    G = check_group_size(G, adv, required=exact)
    adv = _unit(adv) or adv  # the ratio does not depend on the reward scale
    m = _exact(adv, pa, G) if exact else closed_form(adv, pa, G)
    return _ratios(adv, pa, G, m, exact, rho=True)


def peak(adv: Advantage | str, which: str = "m_S", G: int | None = None) -> tuple[float, float]:
    """Solve rate maximising a closed-form mass, and the maximum: ``(p*, m*)``.

    ``which`` is ``"m_S"`` or ``"m_F"``.  Power α peaks at ``p* = 1/(1+α)`` with value
    ``1/4`` under the normalisation of FADE Eq. 27; Dr. GRPO at ``1/2`` (FADE Sec. 2.2).
    Bounded scalar search on [0, 1] to ``1e-12`` in ``p``.
    """
    from scipy.optimize import minimize_scalar

    adv = as_advantage(adv)
    if which not in ("m_S", "m_F"):
        raise ValueError(f"which must be 'm_S' or 'm_F', got {which!r}")
    G = check_group_size(G, adv, required=False)
    f = lambdified(adv, G)[0 if which == "m_S" else 1]
    res = minimize_scalar(lambda x: -float(_eval(f, np.array(x))), bounds=(0.0, 1.0), method="bounded",
                          options={"xatol": 1e-12})
    return float(res.x), float(-res.fun)


# -------------------------------------------------------------------- table
def _balance(ms: np.ndarray, mf: np.ndarray) -> np.ndarray:
    close = np.isclose(ms, mf, rtol=1e-12, atol=1e-15)
    return np.where(close, "balanced", np.where(ms > mf, "success-biased", "failure-biased"))


def table(p: Any = (0.3, 0.5), G: int = 8,
          advantages: Iterable[Advantage | str] | None = None) -> pd.DataFrame:
    """Masses of many advantages at many solve rates: FADE Table 1 and Table 7, plus exact columns.

    One row per (advantage, p) with columns ``advantage``, ``params``, ``kind``, ``p``,
    ``G``, ``m_S``, ``m_F`` (closed form at ``p``, the paper's plug-in value),
    ``m_S_exact``, ``m_F_exact`` (finite-G expectation), ``sign_ratio``,
    ``advantage_ratio`` (ρ of the closed form), ``advantage_ratio_exact``,
    ``abs_adv_sum_exact`` (``E[Σ_i |A_i|]`` per group of ``G`` rollouts, A-GRAE Theorem 2: ``2G·sqrt(pq)``
    for GRPO's plug-in) and ``balance`` (of the closed form).  Unlabelled mass and ratio columns are
    the plug-in values; ``rlvr-theory table`` prints them as ``m_S_plugin``, ... (docs/rlvr_theory.md).
    ``advantages`` defaults to every registered family with default parameters.

    Examples
    --------
    >>> from rlvr_theory import advantages, masses
    >>> t = masses.table([0.3, 0.5], 8, ["grpo", advantages.get("asym_grpo", delta=0.5)])
    >>> t[["advantage", "params", "p", "m_S", "m_F", "balance"]].head(3)
       advantage           params    p       m_S       m_F         balance
    0       grpo  ddof=0, eps=0.0  0.3  0.458258  0.458258        balanced
    1       grpo  ddof=0, eps=0.0  0.5  0.500000  0.500000        balanced
    2  asym_grpo        delta=0.5  0.3  0.210000  0.420000  failure-biased
    """
    import pandas as pd

    pa = np.atleast_1d(check_p(p)).ravel()
    G = check_group_size(G)
    advs = [as_advantage(a) for a in (advantages if advantages is not None else _adv.iter_default())]
    frames = []
    for a in advs:  # one vectorised evaluation per family
        check_group_size(G, a)
        u = _unit(a) or a  # ratios at reward values (0, 1): free of the scale, no underflow
        cf_u = closed_form(u, pa, G)
        ex_u = exact(u, pa, G, with_abs=True)
        cf = Masses(*(a.rescale(t, what="the closed-form masses") for t in cf_u)) if u is not a else cf_u
        ms_x, mf_x, abs_x = ((a.rescale(t, what="the exact masses") for t in ex_u) if u is not a else ex_u)
        frames.append(pd.DataFrame({
            "advantage": a.name,
            "params": ", ".join(f"{k}={v}" for k, v in a.params.items()),
            "kind": a.kind,
            "p": pa, "G": G,
            "m_S": cf.m_S, "m_F": cf.m_F,
            "m_S_exact": ms_x, "m_F_exact": mf_x,
            "sign_ratio": _ratios(u, pa, G, cf_u, False, False),
            "advantage_ratio": _ratios(u, pa, G, cf_u, False, True),
            "advantage_ratio_exact": _ratios(u, pa, G, Masses(ex_u[0], ex_u[1]), True, True),
            "abs_adv_sum_exact": G * abs_x,
            "balance": _balance(cf.m_S, cf.m_F),
        }))
    return pd.concat(frames, ignore_index=True)


def expressions(advantages: Sequence[Advantage | str] | None = None) -> pd.DataFrame:
    """The closed forms as text: one row per family with ``m_S``, ``m_F`` (sympy strings),
    their LaTeX, ``kind``, ``source`` and ``erratum`` (where we depart from the paper)."""
    import pandas as pd

    rows = []
    for a in (advantages if advantages is not None else list(_adv.iter_default())):
        a = as_advantage(a)
        ms, mf = a.closed_form()
        rows.append({"advantage": a.name, "params": ", ".join(f"{k}={v}" for k, v in a.params.items()),
                     "m_S": str(ms), "m_F": str(mf), "m_S_latex": sp.latex(ms), "m_F_latex": sp.latex(mf),
                     "kind": a.kind, "source": a.source, "erratum": a.erratum or ""})
    return pd.DataFrame(rows)
