"""Tail-miss probability of group sampling: active updates that miss a rare-correct mode.

Source: F-GRPO Sec. 3.1, Eq. 9-11, Lemma 3.1 and its proof (App. A); figures
F-GRPO Fig. 1a, Fig. 2 and App. J / Fig. 5.

Setting (F-GRPO Sec. 2.1, 3.1).  A prompt has success probability ``mu`` (μ_pos) and a
rare-correct subset of probability ``tau`` (τ ≤ μ).  A group draws ``N`` i.i.d. rollouts;
each is *rare-correct* with probability τ, *other-correct* with probability μ − τ and
*wrong* with probability 1 − μ.  With ``X`` the number of correct rollouts:

* the update is **active** (mixed rewards, non-zero group-relative advantages) on
  ``A_N = {0 < X < N}``, ``Pr(A_N) = 1 − μ^N − (1 − μ)^N`` (F-GRPO Eq. 9);
* the **tail-miss** event ``B_τ = A_N ∩ {no rare-correct rollout}`` has (F-GRPO Eq. 11)
  ``Pr(B_τ) = (1 − τ)^N − (μ − τ)^N − (1 − μ)^N``.

  Re-derivation: no rare rollout has probability ``(1−τ)^N``; given that, the group is
  inactive iff all rollouts are other-correct (``(μ−τ)^N``) or all are wrong
  (``(1−μ)^N``), two disjoint events.  (Eq. 11 reads correctly in the text copy.)
* the rare mode is **reached** on ``A_N ∖ B_τ``: the group holds a rare-correct rollout
  *and* a wrong one (a rare rollout makes the group non-all-wrong), so
  ``Pr(reach) = 1 − (1−τ)^N − μ^N + (μ−τ)^N`` (beyond the paper; used for the streak and
  waiting-time results below).

Numerics.  The formulas are differences of nearly equal powers; the naive float
evaluation rounds ``1 − τ`` before raising it to the power ``N`` (relative error up to
``N·ε``, 6.5e-9 measured for N ≤ 2^20) and cancels further for small μ or τ.  Here every
power enters through accurately computed logarithms (``N·log1p(−τ)``, ``N·log μ``,
``N·log1p(−y)``) and every difference is rearranged into a form without cancellation
(``expm1``):

* ``Pr(B_τ) = (1−τ)^N · g`` with ``g = 1 − x^N − y^N``, ``x + y = 1``, ``y = min(μ−τ, 1−μ)/(1−τ)``,
  ``g = −expm1(N·log1p(−y)) − y^N``.  As ``y ≤ 1/2``, ``y^N ≤ g/2`` for ``N ≥ 2``: no
  cancellation.
* ``Pr(reach) = (1−U)(1−W) − U·W·(1 − (1−κ)^N)`` with ``U = (1−τ)^N``, ``W = μ^N`` and
  ``κ = τ(1−μ)/((1−τ)μ)`` (because ``μ − τ = (1−τ)μ(1−κ)``); the subtracted term is at
  most about ``1/N`` of the first for ``N ≥ 2`` (exactly ≤ 1/2 at ``N = 2``, checked
  numerically beyond).

Relative error is a few ulps times ``max(1, |N·log(value)|)``; the tests check < 1e-12
against mpmath at 50 digits for N up to 2^20 and τ down to 1e-9.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rlvr_plumbing import checks

__all__ = [
    "active",
    "coverage_factor",
    "probability",
    "reach_probability",
    "miss_given_active",
    "peak",
    "Peak",
    "monte_carlo",
    "MonteCarlo",
    "miss_streak",
    "expected_steps",
]

_COUNTS = ("updates", "steps")


# ----------------------------------------------------------------- validation
def _values(name: str, value: Any, *, integer: bool = False, low: float | None = None,
            high: float | None = None) -> np.ndarray:
    """``value`` as a float64 array; a single number gets the scalar message of
    :func:`checks.number` / :func:`checks.integer`, an array that of :func:`checks.array`."""
    if np.ndim(value) == 0 and not isinstance(value, np.ndarray):
        (checks.integer if integer else checks.number)(name, value, low=low, high=high)
    return checks.array(name, value, integer=integer, low=low, high=high)


def _check_mu(mu: Any) -> np.ndarray:
    """Success probability μ in [0, 1]."""
    return _values("mu", mu, low=0, high=1)


def _check_tau(tau: Any, mu: np.ndarray) -> np.ndarray:
    """Rare-correct mass τ in [0, μ] (broadcasting against μ)."""
    arr = _values("tau", tau)
    try:
        t, m = np.broadcast_arrays(arr, mu)
    except ValueError:
        raise ValueError(f"tau must broadcast against mu: shapes {arr.shape} and {mu.shape}") from None
    bad = (t < 0) | (t > m)
    if np.any(bad):
        raise ValueError(f"tau must lie in [0, mu] (the rare-correct mass is part of the correct mass), "
                         f"got tau = {t[bad].ravel()[0].item()!r} with mu = {m[bad].ravel()[0].item()!r}")
    return arr


def _check_N(N: Any) -> np.ndarray:
    """Group size: integer(s) >= 1 (integral floats accepted)."""
    return _values("N", N, integer=True, low=1)


def _args(mu: Any, tau: Any, N: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = _check_mu(mu)
    t = _check_tau(tau, m)
    n = _check_N(N)
    try:
        return np.broadcast_arrays(m, t, n)
    except ValueError:
        raise ValueError(f"N must broadcast against mu and tau: shapes {n.shape} and "
                         f"{np.broadcast(m, t).shape}") from None


def _out(x: np.ndarray) -> np.ndarray | float:
    return float(x) if x.ndim == 0 else x


# ------------------------------------------------------------ core (no checks)
def _tail(mu: np.ndarray, tau: np.ndarray, N: np.ndarray) -> np.ndarray:
    """(1−τ)^N − (μ−τ)^N − (1−μ)^N on validated float arrays (N may be any real ≥ 1)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        s = 1.0 - tau
        small = np.minimum(mu - tau, 1.0 - mu)  # the smaller of the two "inactive" bases
        y = np.where(s > 0, small / s, 0.0)     # y <= 1/2, x = 1 − y
        g = -np.expm1(N * np.log1p(-y)) - np.power(y, N)
        g = np.where(N == 1, 0.0, np.maximum(g, 0.0))
        return np.exp(N * np.log1p(-tau)) * g


def _reach(mu: np.ndarray, tau: np.ndarray, N: np.ndarray) -> np.ndarray:
    """1 − (1−τ)^N − μ^N + (μ−τ)^N on validated float arrays."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        LU = N * np.log1p(-tau)
        LW = N * np.log(mu)
        kappa = np.where((tau > 0) & (mu < 1), tau * (1.0 - mu) / ((1.0 - tau) * mu), 0.0)
        log1m_kappa = np.where(kappa <= 0.5, np.log1p(-kappa), np.log(mu - tau) - np.log1p(-tau) - np.log(mu))
        F = np.expm1(LU) * np.expm1(LW) + np.exp(LU + LW) * np.expm1(N * log1m_kappa)
        return np.where((tau == 0) | (mu == 1) | (N == 1), 0.0, np.maximum(F, 0.0))


# ------------------------------------------------------------------ public API
def active(mu: Any, N: Any) -> np.ndarray | float:
    """Probability that a group of ``N`` i.i.d. rollouts has mixed rewards.

    ``Pr(A_N) = 1 − μ^N − (1 − μ)^N``, F-GRPO Eq. 9: the group-relative update is
    non-zero ("active") iff ``0 < X < N`` correct rollouts.

    Parameters
    ----------
    mu : array_like
        Success probability μ_pos in [0, 1].
    N : array_like of int
        Group size, integer ≥ 1 (integral floats accepted).

    Returns
    -------
    float or ndarray
        Broadcast shape of the arguments; 0 at ``N = 1`` and at ``μ ∈ {0, 1}``,
        non-decreasing in ``N`` towards 1.
    """
    m = _check_mu(mu)
    n = _check_N(N)
    m, n = np.broadcast_arrays(m, n)
    return _out(_tail(m, np.zeros_like(m), n))


def coverage_factor(tau: Any, N: Any) -> np.ndarray | float:
    """Probability that none of ``N`` i.i.d. rollouts falls in a region of mass ``tau``: ``(1 − τ)^N``.

    The "coverage factor" of F-GRPO Sec. 3.1 (first term of Eq. 11), computed as
    ``exp(N·log1p(−τ))`` so that ``τ = 1e-9`` is not rounded away.

    Parameters
    ----------
    tau : array_like
        Mass of the region, in [0, 1].
    N : array_like of int
        Group size, integer ≥ 1.

    Returns
    -------
    float or ndarray
        Broadcast shape; decreasing in ``N`` (for ``τ > 0``).
    """
    arr = _values("tau", tau, low=0, high=1)
    n = _check_N(N)
    with np.errstate(divide="ignore"):
        return _out(np.asarray(np.exp(n * np.log1p(-arr))))


def probability(mu: Any, tau: Any, N: Any) -> np.ndarray | float:
    """Tail-miss probability ``Pr(B_τ)``: the update is active yet no rollout is rare-correct.

    ``Pr(B_τ) = (1 − τ)^N − (μ − τ)^N − (1 − μ)^N``, F-GRPO Lemma 3.1, Eq. 11
    (proof App. A; re-derived in the module docstring).  Evaluated without cancellation
    (see the module docstring), exact to ~1e-13 relative for ``N ≤ 2^20``, ``τ ≥ 1e-9``.

    Parameters
    ----------
    mu : array_like
        Success probability μ_pos in [0, 1].
    tau : array_like
        Rare-correct mass τ in [0, μ] (``ρ = τ/μ`` in F-GRPO's Fig. 2).
    N : array_like of int
        Group size, integer ≥ 1.

    Returns
    -------
    float or ndarray
        Broadcast shape; ``τ = 0`` gives :func:`active`; 0 at ``N = 1``, at ``τ = μ``
        and at ``μ = 1``.  Non-increasing in τ, log-concave (hence unimodal) in N.

    Examples
    --------
    >>> from rlvr_theory import tail_miss
    >>> tail_miss.probability(0.5, 0.1, 8)  # 0.9**8 - 0.4**8 - 0.5**8
    0.4259056
    >>> tail_miss.probability(0.64, 0.01, [2, 20, 2**15])  # rises with N, then decays like (1 - tau)**N
    array([4.53600000e-001, 8.17809927e-001, 9.42012298e-144])
    """
    m, t, n = _args(mu, tau, N)
    return _out(_tail(m, t, n))


def reach_probability(mu: Any, tau: Any, N: Any) -> np.ndarray | float:
    """Probability that a group is active *and* samples the rare-correct mode.

    ``Pr(A_N ∖ B_τ) = Pr(A_N) − Pr(B_τ) = 1 − (1−τ)^N − μ^N + (μ−τ)^N``: at least one
    rare-correct and at least one wrong rollout.  Only then does the rare mode receive a
    (positive) group-relative advantage.  Complement of Lemma 3.1 within ``A_N``
    (F-GRPO Sec. 3.1; beyond the paper), evaluated without cancellation.

    Parameters
    ----------
    mu, tau, N : array_like
        As in :func:`probability`.

    Returns
    -------
    float or ndarray
        Broadcast shape; 0 where ``τ = 0``, ``μ = 1`` or ``N = 1``.
    """
    m, t, n = _args(mu, tau, N)
    return _out(_reach(m, t, n))


def _log_miss_given_active(m: np.ndarray, t: np.ndarray, n: np.ndarray) -> np.ndarray:
    pa = _tail(m, np.zeros_like(m), n)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(pa > 0, _reach(m, t, n) / pa, 0.0)            # Pr(reach | A)
        r_direct = np.log(np.where(pa > 0, _tail(m, t, n) / pa, 1.0))
        return np.where(pa > 0, np.where(h < 0.5, np.log1p(-h), r_direct), 0.0)


def miss_given_active(mu: Any, tau: Any, N: Any) -> np.ndarray | float:
    """``Pr(B_τ | A_N) = Pr(B_τ)/Pr(A_N)``: an active update misses the rare-correct mode.

    F-GRPO Lemma 3.1 divided by Eq. 9.  Where no update can be active
    (``Pr(A_N) = 0``: ``N = 1`` or ``μ ∈ {0, 1}``) the value is 1 by convention (no active
    update ever reaches the rare mode).  Computed as ``1 − Pr(reach)/Pr(A_N)`` or directly,
    whichever is free of cancellation.

    Parameters
    ----------
    mu, tau, N : array_like
        As in :func:`probability`.

    Returns
    -------
    float or ndarray
        Values in [0, 1], broadcast shape.
    """
    m, t, n = _args(mu, tau, N)
    return _out(np.exp(_log_miss_given_active(m, t, n)))


class Peak(NamedTuple):
    """Integer group size maximising :func:`probability` and the maximum."""

    N: np.ndarray | float
    value: np.ndarray | float


def peak(mu: Any, tau: Any) -> Peak:
    """Group size ``N* ≥ 1`` maximising the tail-miss probability, and ``Pr(B_τ)`` there.

    F-GRPO Sec. 3.1, Fig. 1a, Fig. 2 ("stars mark peaks").  With ``s = 1 − τ``,
    ``y = min(μ−τ, 1−μ)/s``, ``x = 1 − y``: ``Pr(B_τ) = s^N·g(N)``, ``g = 1 − x^N − y^N``.
    ``g`` is positive and concave on ``N > 1``, so ``log Pr(B_τ)`` is concave in ``N`` and
    the real maximiser is the unique root of
    ``φ(N) = c·x^N + d·y^N − λ·g(N)``,  ``c = −log x``, ``d = −log y``, ``λ = −log1p(−τ)``.
    Dropping the ``y^N`` term gives the closed form ``N₀ = log1p(c/λ)/c``, a strict lower
    bound of the root; the root is bracketed above by doubling and refined by vectorised
    bisection, and the integers around it are compared (concavity: the integer maximiser
    is the floor or the ceiling of the real one).  No scan over ``N``.

    Parameters
    ----------
    mu : array_like
        Success probability in [0, 1].
    tau : array_like
        Rare-correct mass in [0, μ]; must be > 0 where ``0 < μ < 1`` (at ``τ = 0`` the
        probability is :func:`active`, increasing in ``N`` without a maximiser).

    Returns
    -------
    Peak
        ``N``: integer-valued float64 (exact below 2^53; ties go to the smaller ``N``),
        ``value``: ``Pr(B_τ)`` at ``N``.  Where ``Pr(B_τ) ≡ 0`` (``τ = μ`` or ``μ = 1``)
        ``N = 1`` and ``value = 0``.

    Examples
    --------
    >>> from rlvr_theory import tail_miss
    >>> tail_miss.peak(0.5, 0.1)
    Peak(N=4.0, value=0.568)
    >>> tail_miss.peak(0.9, [0.1, 0.01, 0.001])  # a rarer mode: a later, higher peak
    Peak(N=array([ 6., 23., 44.]), value=array([0.269296  , 0.72507017, 0.94769811]))
    """
    m = _check_mu(mu)
    t = _check_tau(tau, m)
    m, t = np.broadcast_arrays(m, t)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        s = 1.0 - t
        small = np.minimum(m - t, 1.0 - m)
        degenerate = (small <= 0) | (s <= 0)
        bad = (t == 0) & ~degenerate
        if np.any(bad):
            raise ValueError(f"tau must be > 0 where 0 < mu < 1 for peak (at tau = 0 the probability increases "
                             f"with N towards 1), got tau = 0 with mu = {m[bad].ravel()[0].item()!r}")
        y = np.where(degenerate, 0.25, small / np.where(s > 0, s, 1.0))
        lam = np.where(degenerate, 1.0, -np.log1p(-t))
        c = -np.log1p(-y)
        d = -np.log(y)

        def phi(n: np.ndarray) -> np.ndarray:
            xn, yn = np.exp(-c * n), np.power(y, n)
            return c * xn + d * yn + lam * np.expm1(-c * n) + lam * yn

        lo = np.maximum(np.log1p(c / lam) / c, 1.0)  # phi(lo) > 0
        hi = 2.0 * lo + 2.0
        for _ in range(2000):  # bracket: a few doublings at most
            up = phi(hi) > 0
            if not np.any(up):
                break
            lo = np.where(up, hi, lo)
            hi = np.where(up, 2.0 * hi, hi)
        for _ in range(2000):  # bisection until the bracket is below half an integer
            mid = lo + 0.5 * (hi - lo)
            live = (hi - lo > 0.5) & (mid > lo) & (mid < hi)
            if not np.any(live):
                break
            pos = phi(mid) > 0
            lo = np.where(live & pos, mid, lo)
            hi = np.where(live & ~pos, mid, hi)
        base = np.maximum(np.floor(lo) - 1.0, 1.0)
        best_n, best_v = base, _tail(m, t, base)
        for k in range(1, 4):
            cand = base + k
            v = _tail(m, t, cand)
            better = v > best_v
            best_n, best_v = np.where(better, cand, best_n), np.where(better, v, best_v)
    best_n = np.where(degenerate, 1.0, best_n)
    best_v = np.where(degenerate, 0.0, best_v)
    return Peak(_out(best_n), _out(best_v))


class MonteCarlo(NamedTuple):
    """Monte Carlo estimates of ``Pr(A_N)`` and ``Pr(B_τ)`` with standard errors."""

    active: np.ndarray | float
    active_se: np.ndarray | float
    tail_miss: np.ndarray | float
    tail_miss_se: np.ndarray | float
    trials: int


def monte_carlo(mu: Any, tau: Any, N: Any, trials: int = 10_000,
                seed: int | np.random.Generator | None = 0, *, chunk: int = 2_000_000) -> MonteCarlo:
    """Simulate groups and estimate ``Pr(A_N)`` and ``Pr(B_τ)`` (check of F-GRPO Eq. 9, Lemma 3.1).

    Each trial draws the category counts of one group of ``N`` rollouts from
    ``Multinomial(N; τ, μ − τ, 1 − μ)`` (rare-correct, other-correct, wrong), one
    multinomial draw per group (no loop over rollouts).  ``X = rare + other``; the group is
    active iff ``0 < X < N`` and a tail miss iff active and ``rare = 0``.

    Parameters
    ----------
    mu, tau, N : array_like
        As in :func:`probability`; broadcast together.
    trials : int
        Groups per configuration, ≥ 1.
    seed : int, numpy.random.Generator or None
        Randomness source (``None``: fresh entropy).
    chunk : int
        Largest number of groups drawn at once (bounds the memory; the random stream
        depends on it, so keep it fixed for reproducible results).

    Returns
    -------
    MonteCarlo
        Frequencies ``active``, ``tail_miss`` (broadcast shape) and their binomial
        standard errors ``sqrt(p̂(1 − p̂)/trials)``.
    """
    m, t, n = _args(mu, tau, N)
    trials = checks.integer("trials", trials, low=1)
    chunk = checks.integer("chunk", chunk, low=1)
    rng = checks.random_source("seed", seed)
    pvals = np.stack([t, m - t, 1.0 - m], axis=-1)
    pvals = np.clip(pvals, 0.0, 1.0)
    ni = n.astype(np.int64)
    n_act = np.zeros(m.shape, dtype=np.int64)
    n_miss = np.zeros(m.shape, dtype=np.int64)
    per = max(1, chunk // max(1, m.size))
    done = 0
    while done < trials:
        k = min(per, trials - done)
        counts = rng.multinomial(ni[..., None], pvals[..., None, :], size=m.shape + (k,))
        x = counts[..., 0] + counts[..., 1]
        act = (x > 0) & (x < ni[..., None])
        n_act += act.sum(-1)
        n_miss += (act & (counts[..., 0] == 0)).sum(-1)
        done += k
    pa, pb = n_act / trials, n_miss / trials
    return MonteCarlo(_out(pa), _out(np.sqrt(pa * (1 - pa) / trials)),
                      _out(pb), _out(np.sqrt(pb * (1 - pb) / trials)), trials)


def miss_streak(mu: Any, tau: Any, N: Any, T: Any, *, count: str = "updates") -> np.ndarray | float:
    """Probability that the rare-correct mode stays unreached through ``T`` consecutive updates.

    Model (extends F-GRPO Lemma 3.1 to repeated steps): training step
    ``t = 1, 2, ...`` draws a fresh group of ``N`` i.i.d. rollouts from a *fixed* policy
    (μ, τ held constant — the frozen-policy baseline of the lemma, no learning between
    steps).  A step is an *update* iff its group is active (``A_N``); an inactive step
    changes nothing.  The rare mode is *reached* at a step iff the group is active and
    holds a rare-correct rollout (:func:`reach_probability`); a rare rollout inside an
    all-correct (inactive) group gets zero advantage and does not count.

    * ``count="updates"`` (default): inactive steps are skipped; the probability that each
      of the first ``T`` active updates misses, ``Pr(B_τ | A_N)^T``.
    * ``count="steps"``: every step counts, inactive ones included; the probability that
      none of the first ``T`` steps reaches the rare mode, ``(1 − Pr(reach))^T``.

    Parameters
    ----------
    mu, tau, N : array_like
        As in :func:`probability`.
    T : array_like of int
        Number of updates (or steps), integer ≥ 0 (``T = 0`` gives 1).
    count : {"updates", "steps"}
        What ``T`` counts, see above.

    Returns
    -------
    float or ndarray
        Broadcast shape.  With ``count="updates"`` and ``Pr(A_N) = 0`` the value is 1
        (convention of :func:`miss_given_active`).
    """
    m, t, n = _args(mu, tau, N)
    T_arr = _values("T", T, integer=True, low=0)
    try:
        np.broadcast(m, T_arr)
    except ValueError:
        raise ValueError(f"T must broadcast against mu, tau and N: shapes {T_arr.shape} and {m.shape}") from None
    count = checks.choice("count", count, _COUNTS)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r = _log_miss_given_active(m, t, n) if count == "updates" else np.log1p(-_reach(m, t, n))
        out = np.exp(np.where(T_arr == 0, 0.0, T_arr * log_r))
    return _out(np.asarray(out))


def expected_steps(mu: Any, tau: Any, N: Any, *, count: str = "steps") -> np.ndarray | float:
    """Expected number of steps (or updates) until the rare-correct mode is first reached.

    Same process as :func:`miss_streak` (fresh group of ``N`` per step, frozen policy; the
    mode is reached at the first *active* step whose group holds a rare-correct rollout).
    The waiting time is geometric, counted up to and including the reaching step:

    * ``count="steps"`` (default): every step counts, inactive ones included,
      ``1/Pr(reach)``;
    * ``count="updates"``: only active steps count, ``Pr(A_N)/Pr(reach) = 1/(1 − Pr(B_τ | A_N))``.

    Parameters
    ----------
    mu, tau, N : array_like
        As in :func:`probability`.
    count : {"steps", "updates"}
        What is counted, see above.

    Returns
    -------
    float or ndarray
        Values ≥ 1; ``inf`` where the mode is never reached (``τ = 0``, ``μ = 1`` or
        ``N = 1``).  Source: F-GRPO Lemma 3.1 (per-step probabilities); beyond the paper.
    """
    m, t, n = _args(mu, tau, N)
    count = checks.choice("count", count, _COUNTS)
    hit = _reach(m, t, n)
    num = np.ones_like(hit) if count == "steps" else _tail(m, np.zeros_like(m), n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.where(hit > 0, num / np.where(hit > 0, hit, 1.0), np.inf)
    return _out(np.asarray(out))
