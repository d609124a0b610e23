"""Advantages and masses of a flat batch of rollouts in ragged groups.

The registry (:mod:`rlvr_theory.advantages`) works on rectangular arrays ``[..., G]``.
Trainers hold their rollouts as one flat batch: TRL as ``num_generations`` consecutive rows
per prompt, verl with a group id per row (``uid``) and padding rows, both with rewards that
may be missing (TRL: NaN when every reward function returned None) or real-valued (format
bonuses, partial credit).  This module is the one bridge between the two:

* :func:`group_codes` — dense group numbers from ids or from a block size, with rows left out;
* :func:`success` — which rollouts count as successes (binary rewards, or ``r >= T``);
* :func:`advantages` — the registry family on every group (one vectorised call per group size);
* :func:`stats` and :func:`summary` — per-group masses in the convention of
  :func:`rlvr_theory.masses.of_group` and their per-batch means.

Conventions.  Rows left out (``valid`` False, NaN reward) take part in no statistic and get
advantage 0.  A group of one rollout gets 0 (``singleton="zero"``, the registry's convention:
a group without signal) or its raw reward (``"raw"``, verl's convention: group mean 0 and
std 1).  Real-valued rewards: a family whose definition is real-valued (``graded``) uses them
as they are; a family defined on success/failure needs ``success_threshold`` ``T`` and sees
the binary rewards ``R_w + Δ·1[r >= T]``; masses split rollouts by the same ``T``.

Examples
--------
>>> from rlvr_theory import groups
>>> r = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, np.nan, 0.0])
>>> ids = np.array(["a", "a", "a", "a", "b", "b", "b", "b"])
>>> A = groups.advantages("dr_grpo", r, ids)          # the NaN row is left out of group b
>>> A
array([ 0.75      , -0.25      , -0.25      , -0.25      ,  0.33333333,
        0.33333333,  0.        , -0.66666667])
>>> gs = groups.stats(A, groups.success("dr_grpo", r), ids, valid=~np.isnan(r))
>>> gs.size, gs.m_S
(array([4, 3]), array([0.1875    , 0.22222222]))
>>> groups.summary(gs)["frac_all_wrong"]
0.0
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from rlvr_plumbing import checks

from .advantages import Advantage, as_advantage

__all__ = ["group_codes", "success", "advantages", "stats", "summary", "GroupStats", "is_binary", "check_rewards"]


class GroupStats(NamedTuple):
    """Per-group statistics, arrays of shape ``(n_groups,)``."""

    size: np.ndarray       #: rollouts in the group (rows left out do not count)
    n_success: np.ndarray  #: successes in the group
    m_S: np.ndarray        #: (1/k)·Σ_{i∈S} A_i
    m_F: np.ndarray        #: −(1/k)·Σ_{i∈F} A_i
    abs_adv_sum: np.ndarray    #: Σ_i |A_i|


# ------------------------------------------------------------------ grouping
def _mask(name: str, value: Any, n: int) -> np.ndarray:
    m = np.asarray(value)
    if m.shape != (n,) or m.dtype != bool:
        raise ValueError(f"{name} must be a boolean array of shape ({n},), got {m.dtype} of shape {m.shape}")
    return m


def _first_appearance(keys: np.ndarray) -> np.ndarray:
    """Dense numbers 0..m-1 of ``keys`` in the order of their first appearance."""
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inv.reshape(-1)]


def group_codes(n: int, index: Any = None, *, group_size: int | None = None,
                valid: Any = None) -> tuple[np.ndarray, int]:
    """Group number of each of ``n`` rows: ``(codes, n_groups)``.

    ``codes[i]`` is in ``0..n_groups-1`` (groups numbered in the order of their first included
    row) or ``-1`` for a row left out by ``valid``.  Groups come from ``index`` (a 1-D array of
    ids of any type: ints, strings) or, when ``index`` is None, from ``group_size`` consecutive
    rows (TRL's layout; ``n`` must be a multiple of it).

    Examples
    --------
    >>> from rlvr_theory.groups import group_codes
    >>> group_codes(5, np.array(["x", "y", "x", "pad", "y"]), valid=np.array([1, 1, 1, 0, 1], bool))
    (array([ 0,  1,  0, -1,  1]), 2)
    >>> group_codes(6, group_size=3)
    (array([0, 0, 0, 1, 1, 1]), 2)
    """
    n = checks.integer("n", n, low=0)
    if index is None:
        if group_size is None:
            raise ValueError("index or group_size is required: the group id of each row, or the rows per group")
        G = checks.integer("group_size", group_size, low=1)
        if n % G:
            raise ValueError(f"group_size: {n} rows are not a whole number of groups of {G}")
        block = np.arange(n, dtype=np.int64) // G
    else:
        idx = np.asarray(index)
        if idx.shape != (n,):
            raise ValueError(f"index must have one group id per row, shape ({n},), got shape {idx.shape}")
        block = _first_appearance(idx) if n else np.zeros(0, dtype=np.int64)
    if valid is None:
        if index is not None:
            return block, int(block.max()) + 1 if n else 0
        return block, n // G
    keep = _mask("valid", valid, n)
    codes = np.full(n, -1, dtype=np.int64)
    if keep.any():
        codes[keep] = _first_appearance(block[keep])
    return codes, int(codes.max()) + 1 if keep.any() else 0


def _codes(n: int, index: Any, group_size: Any, valid: Any, codes: Any) -> tuple[np.ndarray, int]:
    if codes is not None:
        c, m = codes
        return np.asarray(c), int(m)
    return group_codes(n, index, group_size=group_size, valid=valid)


# ------------------------------------------------------------------- rewards
def check_rewards(rewards: Any) -> np.ndarray:
    """``rewards`` as a float64 1-D array: numbers, NaN allowed (a missing reward), ±inf refused."""
    r = np.asarray(rewards)
    if r.ndim != 1 or r.dtype.kind not in "biuf":
        raise ValueError(f"rewards must be a 1-D array of numbers (NaN = missing), got {r.dtype} of shape {r.shape}")
    r = r.astype(np.float64)
    if np.isinf(r).any():
        raise ValueError(f"rewards must be finite or NaN (missing); found {r[np.isinf(r)][0]}")
    return r


def _threshold(success_threshold: Any) -> float | None:
    if success_threshold is None:
        return None
    return checks.number("success_threshold", success_threshold)


def is_binary(adv: Advantage, rewards: np.ndarray) -> bool:
    """True if every non-NaN reward is ``R_w`` or ``R_c`` of ``adv.reward_values``."""
    rw, rc = adv.reward_values
    r = rewards[~np.isnan(rewards)]
    return bool(np.all((r == rw) | (r == rc)))


def _real_example(adv: Advantage, r: np.ndarray) -> float:
    rw, rc = adv.reward_values
    x = r[~np.isnan(r)]
    return float(x[(x != rw) & (x != rc)][0])


def success(adv: Advantage | str, rewards: Any, *, success_threshold: float | None = None) -> np.ndarray:
    """Boolean successes: ``r >= success_threshold``, or ``r == R_c`` for binary rewards.

    NaN rewards are never successes.  Real-valued rewards without a threshold are refused:
    success and failure, and with them the masses, are not defined for them.
    """
    adv = as_advantage(adv)
    r = check_rewards(rewards)
    t = _threshold(success_threshold)
    if t is not None:
        return r >= t
    if not is_binary(adv, r):
        rw, rc = adv.reward_values
        raise ValueError(f"success_threshold is required: the rewards are real-valued (e.g. {_real_example(adv, r):g}, "
                         f"not R_w = {rw:g} or R_c = {rc:g}); rollouts with reward >= success_threshold count as successes")
    return r == adv.reward_values[1]


# ---------------------------------------------------------------- advantages
def advantages(adv: Advantage | str, rewards: Any, index: Any = None, *, group_size: int | None = None,
               valid: Any = None, lengths: Any = None, success_threshold: float | None = None,
               singleton: str = "zero", codes: tuple[np.ndarray, int] | None = None) -> np.ndarray:
    """Per-row advantages of ``adv`` on a flat batch of rollouts in groups.

    Parameters
    ----------
    adv : Advantage or str
        A registry family (:func:`rlvr_theory.advantages.get`).
    rewards : array (n,)
        One reward per row; NaN marks a missing reward (left out, advantage 0).
    index, group_size, valid
        The groups, as in :func:`group_codes` (or precomputed ``codes = (codes, n_groups)``,
        which must already leave out the NaN rows).
    lengths : array (n,), optional
        Response lengths, for families that use them (``adv.uses_lengths``).
    success_threshold : float, optional
        Reward at or above which a rollout succeeds; needed by a family defined on
        success/failure when the rewards are not all ``R_w`` or ``R_c``.
    singleton : {"zero", "raw"}
        Advantage of a group of one rollout: 0, or its reward (verl).

    Returns
    -------
    float64 array (n,); 0 on rows left out.  Rows of a group are passed to the family in
    their original order; groups are bucketed by size (one vectorised call per size).  A
    batch-level family reads its batch statistics over all groups of two or more rollouts,
    which must then have one size.
    """
    adv = as_advantage(adv)
    r = check_rewards(rewards)
    n = r.size
    singleton = checks.choice("singleton", singleton, ("zero", "raw"))
    t = _threshold(success_threshold)
    L = None
    if adv.uses_lengths:
        if lengths is None:
            raise ValueError(f"lengths are required by {adv.name!r}: the response length of each row")
        L = checks.array("lengths", lengths, ndim=1, low=0)
        if L.shape != (n,):
            raise ValueError(f"lengths must have one length per row, shape ({n},), got shape {L.shape}")
    keep = ~np.isnan(r)
    if valid is not None:
        keep &= _mask("valid", valid, n)
    c, m = _codes(n, index, group_size, keep, codes)
    out = np.zeros(n)
    if m == 0:
        return out
    rows_in = np.flatnonzero(c >= 0)
    order = rows_in[np.argsort(c[rows_in], kind="stable")]
    sizes = np.bincount(c[rows_in], minlength=m)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    binary = is_binary(adv, r[rows_in])
    if not binary and not adv.graded and t is None:
        rw, rc = adv.reward_values
        raise ValueError(f"success_threshold is required by {adv.name!r}, which is defined on success/failure "
                         f"rewards (R_w = {rw:g}, R_c = {rc:g}): these rewards are real-valued "
                         f"(e.g. {_real_example(adv, r[rows_in]):g}); rollouts with reward >= success_threshold "
                         "count as successes")
    ks = np.unique(sizes)
    multi = ks[ks > 1]
    if adv.batch_level and multi.size > 1:
        raise ValueError(f"{adv.name!r} reads statistics over the whole batch and needs groups of one size; "
                         f"got sizes {', '.join(str(int(k)) for k in multi)}")
    for k in ks:  # a few distinct sizes, not one iteration per group
        sel = np.flatnonzero(sizes == k)
        rows = order[starts[sel][:, None] + np.arange(k)]
        R = r[rows]
        if k == 1:
            out[rows] = R if singleton == "raw" else 0.0
            continue
        if k < adv.min_group_size():
            raise ValueError(f"{adv!r} needs groups of at least {adv.min_group_size()} rollouts; "
                             f"{sel.size} group(s) have {int(k)}")
        Lk = None if L is None else L[rows]
        if binary:
            A = adv(R, lengths=Lk)
        elif adv.graded:
            A = adv.graded_call(R, lengths=Lk) if Lk is not None else adv.graded_call(R)
        else:
            rw, rc = adv.reward_values
            A = adv(np.where(R >= t, rc, rw), lengths=Lk)
        out[rows] = A
    return out


# ------------------------------------------------------------------- masses
def stats(A: Any, success: Any, index: Any = None, *, group_size: int | None = None, valid: Any = None,
          codes: tuple[np.ndarray, int] | None = None) -> GroupStats:
    """Per-group masses and counts of advantages ``A`` (n,) with successes ``success`` (n,).

    ``M_S = (1/k)·Σ_{i∈S} A_i`` and ``M_F = −(1/k)·Σ_{i∈F} A_i`` with ``k`` the rollouts of the
    group that are not left out: the convention of :func:`rlvr_theory.masses.of_group` (FADE
    Eq. 3), equal to it on rectangular groups.
    """
    a = np.asarray(A, dtype=np.float64)
    s = np.asarray(success, dtype=bool)
    n = a.size
    if a.shape != (n,) or s.shape != (n,):
        raise ValueError(f"A and success must be 1-D arrays of one length, got shapes {a.shape} and {s.shape}")
    c, m = _codes(n, index, group_size, valid, codes)
    inc = c >= 0
    cc, aa, ss = c[inc], a[inc], s[inc]
    k = np.bincount(cc, minlength=m)
    x = np.bincount(cc, weights=ss, minlength=m).astype(np.int64)
    ms = np.bincount(cc, weights=np.where(ss, aa, 0.0), minlength=m) / np.maximum(k, 1)
    mf = -np.bincount(cc, weights=np.where(ss, 0.0, aa), minlength=m) / np.maximum(k, 1)
    return GroupStats(k, x, ms, mf + 0.0, np.bincount(cc, weights=np.abs(aa), minlength=m))


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if x.size else None


def summary(gs: GroupStats) -> dict[str, Any]:
    """Means over the groups of a batch (a group without signal counts as 0 in the masses).

    Keys: ``n_groups``, ``group_size`` (mean), ``solve_rate_mean`` (mean of p̂),
    ``frac_all_correct``, ``frac_all_wrong``, ``m_S``, ``m_F``, ``sign_ratio`` (mean m_S /
    mean m_F; ``inf`` when only m_F is 0, None when both are) and ``abs_adv_sum`` (mean Σ|A|).
    Every value but ``n_groups`` is None for a batch without groups.
    """
    k = gs.size
    out: dict[str, Any] = {"n_groups": int(k.size)}
    p = gs.n_success / np.maximum(k, 1)
    ms, mf = _mean(gs.m_S), _mean(gs.m_F)
    if ms is None or mf is None:
        ratio = None
    elif mf != 0:
        ratio = ms / mf
    else:
        ratio = float("inf") if ms != 0 else None
    out.update(group_size=_mean(k.astype(float)), solve_rate_mean=_mean(p),
               frac_all_correct=_mean((gs.n_success == k).astype(float)),
               frac_all_wrong=_mean((gs.n_success == 0).astype(float)),
               m_S=ms, m_F=mf, sign_ratio=ratio, abs_adv_sum=_mean(gs.abs_adv_sum))
    return out
