"""Per-group and per-step diagnostics of a run's rollouts: the numbers of ``rlvr-audit``.

Input: a :class:`analysis.audit.readers.Rollouts` (or anything with its ``frame``,
``source`` and ``group_size``; a bare DataFrame is accepted too) whose ``frame`` has one row
per rollout with columns ``step``, ``group``, ``reward`` (NaN: missing), ``advantage`` (all
NaN when the log has none), ``length`` and ``split``, sorted by (step, group).

* :func:`group_table` — one row per (step, group): size, successes, solve rate p̂, the
  masses ``m_S``, ``m_F`` and ``Σ|A|`` of the advantages actually used, pass@1 and pass@G,
  what-if masses of other families, tail-miss probabilities;
* :func:`step_table` — one row per step: means over the step's groups (a zero-signal group
  counts as 0), the histogram of p̂, the Kish effective sample size, FADE's drift term,
  pass@k, and what FADE's and A-GRAE's schedules would have chosen;
* :func:`which_advantage` — the registry family and parameters that reproduce the logged
  advantages, with the largest deviation;
* :func:`audit` — the whole ``report.json`` document.

Conventions (the ones of :mod:`rlvr_theory.groups`, which computes every advantage, success
and mass here):

* a rollout with a NaN reward is left out of its group (as TRL leaves it out) and counted
  per step in ``n_nan_rewards``; a group whose rewards are all NaN is left out of the step
  (``n_groups`` counts groups with at least one reward);
* the masses of a group of ``k`` rollouts are ``M_S = (1/k)Σ_{i∈S} A_i`` and
  ``M_F = −(1/k)Σ_{i∈F} A_i`` (:func:`rlvr_theory.masses.of_group`, FADE Eq. 3); a step's
  value is the mean over its groups, a zero-signal group (all correct or all wrong)
  counting as 0;
* success is ``r == R_c`` for binary rewards (``R_w``, ``R_c`` read off the rewards when
  they take two values other than 0 and 1) or ``r >= success_threshold``; real-valued
  rewards without a threshold are refused with the message of
  :func:`rlvr_theory.groups.success`;
* groups of unequal size are bucketed by size inside every computation (one vectorised
  call per size); :func:`audit` adds a per-size breakdown and says so in its notes.

Everything is vectorised over all groups of all steps at once.  Two computations loop over
steps, both sequential or per-batch by nature: the schedules' what-if (an EMA over steps) and
the advantages of a batch-level family (A-GRAE with ``omega=None``, REINFORCE++), whose
batch statistics are those of one step's batch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import passk
from rlvr_plumbing import checks
from rlvr_plumbing.serialize import jsonable
from rlvr_theory import advantages as _advantages
from rlvr_theory import entropy, groups, tail_miss
from rlvr_theory.advantages import Advantage
from rlvr_theory.policy import Policy

__all__ = ["group_table", "step_table", "which_advantage", "audit", "candidates", "fittable", "fit_parameter",
           "DEFAULT_RTOL", "CLOSE_RTOL", "FIT_RANGE", "FIT_GRID", "FIT_INT_MAX", "STEP_KEYS", "CHUNK_ROWS"]

#: relative tolerance of :func:`which_advantage` (float32 logs round at ~6e-8)
DEFAULT_RTOL = 1e-5
#: :func:`which_advantage` calls a family that does not reproduce the log "the closest" only when
#: its largest deviation is at most this share of ``max |A_logged|``; farther, no family is named
CLOSE_RTOL = 0.05
#: the range a fitted parameter is searched in (a log-spaced grid, then a bounded refinement)
FIT_RANGE = (1e-3, 1e3)
#: points of that grid; integer parameters are tried at 1, 2, ..., :data:`FIT_INT_MAX`
FIT_GRID = 25
FIT_INT_MAX = 64
#: parameters never fitted: numerical conventions (tried at the values of :func:`candidates`)
_NOT_FITTED = ("eps", "ddof")
#: families refined after the grid besides the trainer's and the user's (the best on the grid)
_FIT_REFINE = 3
#: rows the fit is computed on: whole sample steps up to this many (at least one step); the fitted
#: values are then checked on every sample step, then on every step
FIT_ROWS = 8192
#: keys of ``params`` that configure the grouping, not the family
_RESERVED = ("singleton", "success_threshold")


# =============================================================== the inputs
def _parts(rollouts: Any) -> tuple[pd.DataFrame | None, pd.DataFrame | None, dict[str, Any], int | None]:
    """``(frame, counts, source, group_size)`` of a Rollouts-like object or a bare DataFrame:
    ``counts`` (and ``frame`` None) for a read held as group counts (:attr:`Rollouts.counts`)."""
    if isinstance(rollouts, pd.DataFrame):
        return rollouts, None, {"format": "table", "paths": [], "notes": []}, None
    source = dict(getattr(rollouts, "source", None) or {})
    group_size = getattr(rollouts, "group_size", None)
    counts = getattr(rollouts, "counts", None)
    if isinstance(counts, pd.DataFrame):
        return None, counts, source, group_size
    frame = getattr(rollouts, "frame", None)
    if not isinstance(frame, pd.DataFrame):
        raise ValueError("rollouts must be a Rollouts (analysis.audit.readers.read) or a DataFrame with columns "
                         f"step, group, reward; got {type(rollouts).__name__}")
    return frame, None, source, group_size


def _column(frame: pd.DataFrame, name: str, dtype: Any, default: float | None = None) -> np.ndarray | None:
    if name not in frame.columns:
        if default is None:
            raise ValueError(f"rollouts: the frame has no column {name!r} (columns: {', '.join(map(str, frame.columns))})")
        return None
    return frame[name].to_numpy(dtype=dtype)


def _label(adv: Advantage, singleton: str = "zero") -> str:
    """``name`` at default parameters, else ``name(k=v, ...)``."""
    changed = {k: v for k, v in adv.params.items() if adv.defaults.get(k, object()) != v}
    text = ", ".join(f"{k}={v!r}" for k, v in changed.items())
    if singleton != "zero":
        text = (text + ", " if text else "") + f"singleton={singleton!r}"
    return f"{adv.name}({text})" if text else adv.name


def _split_params(params: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    kw = dict(params or {})
    singleton = kw.pop("singleton", "zero")
    kw.pop("success_threshold", None)
    return kw, checks.choice("singleton", singleton, ("zero", "raw"))


#: rows per call of :mod:`rlvr_theory.groups` (whole steps; bounds the memory of a call)
CHUNK_ROWS = 1 << 21


class _Run:
    """The arrays of one split of a run, grouped once (private: shared by the tables).

    Rows are sorted by (step, group), so a group is a run of consecutive rows (``gstart``) and
    a step too (``step_start``).  ``codes`` numbers the groups with at least one finite
    reward (``-1`` on NaN rows), which is what :mod:`rlvr_theory.groups` reads.  Calls into
    :mod:`rlvr_theory.groups` take whole steps in chunks of about :data:`CHUNK_ROWS` rows
    (memory stays bounded however long the run; every group is whole in its chunk).
    """

    def __init__(self, frame: pd.DataFrame, *, split: str | None, success_threshold: float | None):
        sel = None
        if split is not None and "split" in frame.columns:
            sel = (frame["split"] == split).to_numpy(dtype=bool, na_value=False)
            if sel.all():
                sel = None
        step = _column(frame, "step", np.int64)
        group = _column(frame, "group", np.int64)
        reward = _column(frame, "reward", np.float64)
        logged = _column(frame, "advantage", np.float64, default=np.nan)
        length = _column(frame, "length", np.float64, default=np.nan)
        if sel is not None:
            step, group, reward = step[sel], group[sel], reward[sel]
            logged = None if logged is None else logged[sel]
            length = None if length is None else length[sel]
        n = step.size
        if n > 1:
            ds, dg = np.diff(step), np.diff(group)
            if not np.all((ds > 0) | ((ds == 0) & (dg >= 0))):  # the readers sort; a hand-made frame may not
                order = np.lexsort((group, step))  # stable: keeps the rows' order within a group
                step, group, reward = step[order], group[order], reward[order]
                logged = None if logged is None else logged[order]
                length = None if length is None else length[order]
            del ds, dg
        self.n = n
        self.step, self.group, self.reward, self.length = step, group, reward, length
        self.logged = logged if logged is not None and np.isfinite(logged).any() else None
        self.threshold = None if success_threshold is None else checks.number("success_threshold", success_threshold)
        new = np.ones(n, bool)
        new[1:] = step[1:] != step[:-1]
        self.step_start = np.flatnonzero(new)
        new[1:] |= group[1:] != group[:-1]
        self.gstart = np.flatnonzero(new)
        del new
        self.steps = step[self.step_start]
        self.n_groups_all = self.gstart.size
        self.group_step, self.group_id = step[self.gstart], group[self.gstart]
        for sl in self.chunks():  # the groups module's check (numbers, NaN allowed), without a copy
            groups.check_rewards(reward[sl])
        self.valid = ~np.isnan(reward)
        self.g_rows = np.diff(np.append(self.gstart, n))
        self.g_valid = self.segment_sum(lambda sl: self.valid[sl]).astype(np.int64)
        # step code of each group: how many step starts lie at or before its first row
        self.g_step = np.searchsorted(self.step_start, self.gstart, side="right") - 1
        self.step_rows = np.diff(np.append(self.step_start, n))
        has = self.g_valid > 0
        self.vg = np.flatnonzero(has)                       # groups with a reward, in order
        itype = np.int32 if self.vg.size < 2**31 else np.int64
        codes = np.repeat((np.cumsum(has) - 1).astype(itype), self.g_rows)
        codes[~self.valid] = -1
        self.codes = (codes, int(self.vg.size))
        self.vg_step = self.g_step[self.vg]
        self.reward_values = self._reward_values()
        # shaped rewards: more than two values (partial credit, format bonuses)
        vr = reward[self.valid]
        lo, hi = (float(vr.min()), float(vr.max())) if vr.size else (0.0, 0.0)
        self.shaped = bool(np.any((vr > lo) & (vr < hi)))
        del vr
        self.ref = _advantages.get("dr_grpo", reward_values=self.reward_values)
        self._success: np.ndarray | None = None

    @property
    def success(self) -> np.ndarray:
        """Successes of the rows (:func:`rlvr_theory.groups.success`; refuses real rewards
        without a threshold), computed on first use."""
        if self._success is None:
            out = np.zeros(self.n, bool)
            for sl in self.chunks():
                out[sl] = groups.success(self.ref, self.reward[sl], success_threshold=self.threshold)
            self._success = out
        return self._success

    def segment_sum(self, values, *, per_step: bool = False) -> np.ndarray:
        """Σ over each group (each step with ``per_step``) of ``values(sl)``, the values of the
        rows of a chunk ``sl`` (computed chunk by chunk: no array over all rows)."""
        starts = self.step_start if per_step else self.gstart
        out = np.zeros(starts.size)
        for sl in self.chunks():
            i0, i1 = np.searchsorted(starts, [sl.start, sl.stop])
            out[i0:i1] = np.add.reduceat(np.asarray(values(sl), dtype=float), starts[i0:i1] - sl.start)
        return out

    def segment_extreme(self, values, *, largest: bool) -> np.ndarray:
        """Min (max with ``largest``) over each group of ``values(sl)``, rows with a NaN reward
        left out (±inf for a group without a reward)."""
        ufunc, fill = (np.maximum, -np.inf) if largest else (np.minimum, np.inf)
        out = np.full(self.gstart.size, fill)
        for sl in self.chunks():
            i0, i1 = np.searchsorted(self.gstart, [sl.start, sl.stop])
            v = np.where(self.valid[sl], np.asarray(values(sl), dtype=float), fill)
            out[i0:i1] = ufunc.reduceat(v, self.gstart[i0:i1] - sl.start)
        return out

    def chunks(self, *, per_step: bool = False):
        """Slices of whole steps, about :data:`CHUNK_ROWS` rows each (one step each with ``per_step``)."""
        if self.n == 0:
            return
        if per_step:
            bounds = self.step_start
        else:
            key = self.step_start // CHUNK_ROWS
            bounds = self.step_start[np.flatnonzero(np.r_[True, key[1:] != key[:-1]])]
        ends = np.append(bounds[1:], self.n)
        for lo, hi in zip(bounds.tolist(), ends.tolist()):
            yield slice(lo, hi)

    def _reward_values(self) -> tuple[float, float]:
        """(0, 1), or the two values binary rewards take when they are not 0 and 1."""
        r = self.reward[self.valid]
        if self.threshold is not None or r.size == 0 or np.all((r == 0) | (r == 1)):
            return (0.0, 1.0)
        lo, hi = float(r.min()), float(r.max())
        if lo < hi and np.all((r == lo) | (r == hi)):
            return (lo, hi)
        return (0.0, 1.0)  # real-valued: groups.success refuses them without a threshold

    def family(self, name: str | Advantage, params: Mapping[str, Any] | None = None) -> Advantage:
        """A registry family with the rewards' (R_w, R_c) unless given."""
        if isinstance(name, Advantage):
            return name
        kw = dict(params or {})
        kw.setdefault("reward_values", self.reward_values)
        return _advantages.get(name, **kw)

    # ------------------------------------------------------------ advantages
    def _call(self, adv: Advantage, singleton: str, idx: slice | np.ndarray) -> np.ndarray:
        lengths = None if self.length is None or not adv.uses_lengths else self.length[idx]
        return groups.advantages(adv, self.reward[idx], lengths=lengths, success_threshold=self.threshold,
                                 singleton=singleton, codes=self.sub_codes(idx))

    def advantages(self, adv: Advantage, singleton: str = "zero", steps: np.ndarray | None = None) -> np.ndarray:
        """Per-row advantages of ``adv`` (0 on NaN rows): of every row, or with ``steps`` (step
        codes, ascending) of the rows :meth:`rows_of` ``steps`` only.  A batch-level family is
        computed one step at a time: its batch statistics are those of the step's batch."""
        if adv.uses_lengths and (self.length is None or not np.isfinite(self.length[self.valid]).all()):
            raise ValueError(f"lengths are required by {adv.name!r}: the log has no length for every rollout")
        if steps is None:
            out = np.empty(self.n)
            for sl in self.chunks():
                out[sl] = self.chunk_advantages(adv, singleton, sl)
            return out
        if not adv.batch_level:
            return self._call(adv, singleton, self.rows_of(steps))
        parts = [self._call(adv, singleton, slice(lo, lo + k))
                 for lo, k in zip(self.step_start[steps].tolist(), self.step_rows[steps].tolist())]
        return np.concatenate(parts) if parts else np.zeros(0)

    def chunk_advantages(self, adv: Advantage, singleton: str, sl: slice) -> np.ndarray:
        """Advantages of the rows of one chunk (whole steps); a batch-level family step by step."""
        if adv.uses_lengths and (self.length is None or not np.isfinite(self.length[sl][self.valid[sl]]).all()):
            raise ValueError(f"lengths are required by {adv.name!r}: the log has no length for every rollout")
        if not adv.batch_level:
            return self._call(adv, singleton, sl)
        out = np.empty(sl.stop - sl.start)
        i0, i1 = np.searchsorted(self.step_start, [sl.start, sl.stop])
        for lo, k in zip(self.step_start[i0:i1].tolist(), self.step_rows[i0:i1].tolist()):
            out[lo - sl.start:lo - sl.start + k] = self._call(adv, singleton, slice(lo, lo + k))
        return out

    def zeros_chunk(self, sl: slice) -> np.ndarray:
        """Zero advantages of a chunk (no advantage known)."""
        return np.zeros(sl.stop - sl.start)

    def logged_chunk(self, sl: slice) -> np.ndarray:
        """The logged advantages of a chunk, 0 on NaN rewards and where the log has no value."""
        a = self.logged[sl]  # type: ignore[index]
        return np.where(self.valid[sl] & np.isfinite(a), a, 0.0)

    def rows_of(self, steps: np.ndarray) -> np.ndarray:
        """Row indices of the steps with codes ``steps`` (ascending)."""
        los, cnt = self.step_start[steps], self.step_rows[steps]
        if cnt.sum() == 0:
            return np.zeros(0, np.int64)
        return np.repeat(los - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt) + np.arange(cnt.sum())

    def sub_codes(self, idx: slice | np.ndarray) -> tuple[np.ndarray, int]:
        """``codes`` of the rows ``idx`` (whole groups, ascending), renumbered from 0."""
        c = self.codes[0][idx]
        inc = c >= 0
        if not inc.any():
            return c, 0
        if isinstance(idx, slice):  # contiguous: the codes are consecutive already
            lo, hi = c[inc][0], c[inc][-1]
            return np.where(inc, c - lo, -1), int(hi - lo + 1)
        first = np.flatnonzero(inc)
        new = np.ones(first.size, bool)
        new[1:] = c[first][1:] != c[first][:-1]
        out = np.full(c.size, -1, dtype=np.int64)
        out[first] = np.cumsum(new) - 1
        return out, int(new.sum())

    def reward_sums(self) -> np.ndarray:
        """Σ of the rewards of each group (NaN rewards left out)."""
        return self.segment_sum(lambda sl: np.where(self.valid[sl], self.reward[sl], 0.0))

    def reward_extremes(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of the rewards of each group (±inf for a group without a reward)."""
        return (self.segment_extreme(lambda sl: self.reward[sl], largest=False),
                self.segment_extreme(lambda sl: self.reward[sl], largest=True))

    def family_stats(self, adv: Advantage | None, singleton: str = "zero") -> tuple[groups.GroupStats, np.ndarray]:
        """:meth:`stats` of the advantages of ``adv`` (``None``: zero advantages)."""
        if adv is None:
            return self.stats(self.zeros_chunk)
        return self.stats(functools.partial(self.chunk_advantages, adv, singleton))

    def stats(self, advantages) -> tuple[groups.GroupStats, np.ndarray]:
        """Group statistics (:func:`rlvr_theory.groups.stats`) over the groups with a reward of
        the advantages ``advantages(sl)`` of each chunk, and Σ A_i² per group."""
        parts, sq = [], []
        for sl in self.chunks():
            codes = self.sub_codes(sl)
            a = advantages(sl)
            parts.append(groups.stats(a, self.success[sl], codes=codes))
            c = codes[0]
            inc = c >= 0
            sq.append(np.bincount(c[inc], weights=a[inc] ** 2, minlength=codes[1]))
        if not parts:
            return groups.GroupStats(*(np.zeros(0, t) for t in (np.int64, np.int64, float, float, float))), np.zeros(0)
        return groups.GroupStats(*(np.concatenate(x) for x in zip(*parts))), np.concatenate(sq)


class _CountsRun:
    """A run held as group counts (:attr:`analysis.audit.readers.Rollouts.counts`: binary 0/1
    rewards, no advantage, no length) with the group-level interface of :class:`_Run`.

    A group-relative family's advantages in a group depend on its rewards alone, so every
    group with ``k`` rollouts of which ``x`` have reward 1 has the statistics of the group
    ``[0]·(k−x) + [1]·x``: :meth:`family_stats` computes them once per distinct ``(k, x)``
    through :class:`_Run` (the same code as for rows) and gives each group its pair's.
    Families whose advantages depend on the batch or on lengths need the rows
    (:func:`_needs_rows`)."""

    logged = None
    length = None
    shaped = False
    reward_values = (0.0, 1.0)

    def __init__(self, counts: pd.DataFrame, *, split: str | None, success_threshold: float | None):
        if split is not None and "split" in counts.columns:
            sel = (counts["split"] == split).to_numpy(dtype=bool)
            if not sel.all():
                counts = counts.loc[sel]
        step = counts["step"].to_numpy(np.int64)
        self.threshold = None if success_threshold is None else checks.number("success_threshold", success_threshold)
        self.group_step, self.group_id = step, counts["group"].to_numpy(np.int64)
        self.g_rows = counts["rollouts"].to_numpy(np.int64)
        self.ones = counts["successes"].to_numpy(np.int64)
        self.g_valid = self.g_rows
        self.n = int(self.g_rows.sum())
        self.n_groups_all = step.size
        new = np.ones(step.size, bool)
        new[1:] = step[1:] != step[:-1]
        self.steps = step[new]
        self.g_step = np.cumsum(new) - 1
        self.vg = np.flatnonzero(self.g_rows > 0)
        # the distinct (k, x) pairs, and each group's
        key = self.g_rows * (int(self.g_rows.max(initial=0)) + 1) + self.ones
        _, first, self._pair = np.unique(key, return_index=True, return_inverse=True)
        k, x = self.g_rows[first], self.ones[first]
        rows = np.repeat(np.arange(first.size), k)
        pos = np.arange(rows.size) - np.repeat(np.cumsum(k) - k, k)
        self._pairs = _Run(pd.DataFrame({"step": np.zeros(rows.size, np.int64), "group": rows,
                                         "reward": (pos >= np.repeat(k - x, k)).astype(np.float64)}),
                           split=None, success_threshold=success_threshold)

    def family(self, name: str | Advantage, params: Mapping[str, Any] | None = None) -> Advantage:
        """A registry family with the rewards' (R_w, R_c) unless given."""
        return _Run.family(self, name, params)

    def reward_sums(self) -> np.ndarray:
        """Σ of the rewards of each group: its rollouts with reward 1."""
        return self.ones.astype(float)

    def reward_extremes(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of the rewards of each group."""
        return (self.ones == self.g_rows).astype(float), (self.ones > 0).astype(float)

    def family_stats(self, adv: Advantage | None, singleton: str = "zero") -> tuple[groups.GroupStats, np.ndarray]:
        """:meth:`_Run.family_stats` of every group, from those of its ``(k, x)`` pair."""
        gs, sq = self._pairs.family_stats(adv, singleton)
        return groups.GroupStats(*(np.asarray(a)[self._pair] for a in gs)), sq[self._pair]


def _needs_rows(families: Iterable[Advantage]) -> bool:
    """Whether a run held as counts must be read as rows for these families (their advantages
    depend on the batch or on lengths, not on a group's rewards alone)."""
    return any(a.batch_level or a.uses_lengths for a in families)


# ============================================================== aggregation
def _mean_by(key: np.ndarray, values: np.ndarray, n: int, counts: np.ndarray) -> np.ndarray:
    """Mean of ``values`` per key (NaN where a key has no entry)."""
    s = np.bincount(key, weights=values, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, s / np.maximum(counts, 1), np.nan)


def _ratio(ms: np.ndarray, mf: np.ndarray) -> np.ndarray:
    """mean m_S / mean m_F per key: ``inf`` where only m_F is 0, NaN where both are
    (the convention of :func:`rlvr_theory.groups.summary`)."""
    out = np.full(ms.shape, np.nan)
    nz = mf != 0
    out[nz] = ms[nz] / mf[nz]
    out[~nz & (ms != 0) & ~np.isnan(ms)] = np.inf
    return out


def _drift(H: np.ndarray, ms: np.ndarray, mf: np.ndarray) -> np.ndarray:
    """FADE's drift term ``(m_S − m_F)·H`` (:func:`rlvr_theory.entropy.drift`), NaN where a value is missing."""
    out = np.full(ms.shape, np.nan)
    ok = np.isfinite(H) & np.isfinite(ms) & np.isfinite(mf)
    if ok.any():
        out[ok] = entropy.drift(H[ok], ms[ok], mf[ok])
    return out


def _hist_bins(bins: int) -> tuple[list[str], np.ndarray]:
    """Labels and edges of the solve-rate histogram: ``0``, ``bins`` intervals of (0, 1), ``1``."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    labels = ["0"] + [f"({edges[i]:g}, {edges[i + 1]:g}]" for i in range(bins - 1)] + [f"({edges[-2]:g}, 1)", "1"]
    return labels, edges


def _hist_index(x: np.ndarray, k: np.ndarray, bins: int) -> np.ndarray:
    """Bin of each group's p̂ = x/k: 0 for p̂ = 0, bins + 1 for p̂ = 1, else the interval."""
    x, k = np.asarray(x, np.int64), np.maximum(np.asarray(k, np.int64), 1)
    inner = np.clip((x * bins + k - 1) // k, 1, bins)      # ceil(p̂·bins) in integers: exact on the edges
    return np.where(x == 0, 0, np.where(x == k, bins + 1, inner))


def _compare_items(compare: Iterable[Any], run: _Run) -> list[tuple[str, Advantage, str]]:
    out = []
    for item in compare or ():
        if isinstance(item, Advantage):
            adv, singleton = item, "zero"
        elif isinstance(item, str):
            adv, singleton = run.family(item), "zero"
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            kw, singleton = _split_params(item[1])
            adv = run.family(item[0], kw)
        else:
            raise ValueError(f"compare must hold registry names, (name, params) pairs or Advantage objects, got {item!r}")
        out.append((_label(adv, singleton), adv, singleton))
    return out


def _taus(taus: Iterable[Any]) -> list[float]:
    return [checks.number("tau", t, low=0, high=1, low_open=True) for t in (taus or ())]


def _tau_key(t: float) -> str:
    return f"tail_miss/{t:g}"


class _Tables:
    """Group- and step-level results of one split (private)."""

    def __init__(self, rollouts: Any, *, advantage: str | Advantage | None, params: Mapping[str, Any] | None,
                 success_threshold: float | None, compare: Iterable[Any], taus: Iterable[Any],
                 split: str | None, bins: int):
        frame, counts, self.source, self.group_size = _parts(rollouts)
        kw, singleton = _split_params(params)
        if counts is not None:
            run: Any = _CountsRun(counts, split=split, success_threshold=success_threshold)
            chosen = [run.family(advantage, kw)] if advantage is not None else []
            if _needs_rows(chosen + [c[1] for c in _compare_items(compare, run)]):
                frame, counts = rollouts.frame, None
        if counts is None:
            run = _Run(frame, split=split, success_threshold=success_threshold)
        self.run = run
        labels = counts["split"] if counts is not None else (frame["split"] if "split" in frame.columns else None)
        #: the split labels of the rows (None: the table has no split column)
        self.split_labels = None if labels is None else sorted(set(pd.unique(labels.dropna())))
        self.bins = checks.integer("bins", bins, low=1)
        self.taus = _taus(taus)
        self.notes: list[str] = []
        self.option = None if advantage is None else (run.family(advantage, kw), singleton)
        if run.logged is not None:
            self.masses_from = "logged"
            gs, sq = run.stats(run.logged_chunk)
            n_missing = int(np.count_nonzero(run.valid & ~np.isfinite(run.logged)))
            if n_missing:
                self.notes.append(f"{n_missing} rollout(s) with a reward have no logged advantage; they count as 0.")
        elif self.option is not None:
            self.masses_from = "option"
            gs, sq = run.family_stats(*self.option)
        else:
            self.masses_from = None
            gs, sq = run.family_stats(None)
            if run.n:
                self.notes.append("The log has no advantages and no advantage was chosen: the masses, Σ|A| and "
                                  "n_eff are not computed (choose one with --advantage NAME).")
        self.compare = _compare_items(compare, run)
        if self.masses_from == "logged" and self.option is not None:
            label = _label(*self.option)
            if label not in [c[0] for c in self.compare]:
                self.compare.insert(0, (label, *self.option))
            self.notes.append(f"The log has advantages: the masses are those of the logged advantages; "
                              f"the advantage chosen ({label}) is shown as a what-if under compare.")
        self.gs, self.sq = gs, sq
        self.what_if = {}
        for label, adv, singleton in self.compare:
            self.what_if[label] = (adv, singleton, *run.family_stats(adv, singleton))

    # -------------------------------------------------------------- groups
    def group_frame(self) -> pd.DataFrame:
        run, gs = self.run, self.gs
        vg = run.vg
        n_all = run.n_groups_all
        k = np.zeros(n_all, np.int64)
        k[vg] = gs.size
        x = np.zeros(n_all, np.int64)
        x[vg] = gs.n_success
        has = k > 0

        def full(values: np.ndarray, fill: float = np.nan) -> np.ndarray:
            out = np.full(n_all, fill)
            out[vg] = values
            return out

        rsum = run.reward_sums()
        with np.errstate(invalid="ignore", divide="ignore"):
            p_hat = np.where(has, x / np.maximum(k, 1), np.nan)
            cols: dict[str, Any] = {
                "step": run.group_step, "group": run.group_id,
                "group_size": run.g_rows, "n_valid": k, "n_nan_rewards": run.g_rows - k,
                "n_success": x, "solve_rate": p_hat,
                "reward_mean": np.where(has, rsum / np.maximum(k, 1), np.nan),
                "all_correct": has & (x == k), "all_wrong": has & (x == 0),
            }
        cols["zero_signal"] = cols["all_correct"] | cols["all_wrong"]
        # what the trainer saw: a group-relative advantage is zero exactly where the rewards all equal
        rmin, rmax = run.reward_extremes()
        cols["equal_rewards"] = has & (rmin == rmax)
        cols["shaped_signal"] = cols["zero_signal"] & ~cols["equal_rewards"]
        if run.length is not None:
            lsum = run.segment_sum(lambda sl: np.where(run.valid[sl], np.nan_to_num(run.length[sl]), 0.0))
            with np.errstate(invalid="ignore", divide="ignore"):
                cols["length_mean"] = np.where(has, lsum / np.maximum(k, 1), np.nan)
        if self.masses_from is not None:
            cols.update(m_S=full(gs.m_S), m_F=full(gs.m_F), abs_adv_sum=full(gs.abs_adv_sum), sq_adv_sum=full(self.sq))
        else:
            cols.update({c: np.full(n_all, np.nan) for c in ("m_S", "m_F", "abs_adv_sum", "sq_adv_sum")})
        p1 = np.full(n_all, np.nan)
        pg = np.full(n_all, np.nan)
        if vg.size:
            p1[vg] = passk.pass_at_k(gs.size, gs.n_success, 1)
            pg[vg] = passk.pass_at_k(gs.size, gs.n_success, gs.size)
        cols["pass_at_1"], cols["pass_at_G"] = p1, pg
        for label, (_, _, wgs, wsq) in self.what_if.items():
            cols[f"compare/{label}/m_S"] = full(wgs.m_S)
            cols[f"compare/{label}/m_F"] = full(wgs.m_F)
            cols[f"compare/{label}/abs_adv_sum"] = full(wgs.abs_adv_sum)
            cols[f"compare/{label}/sq_adv_sum"] = full(wsq)
        for t in self.taus:
            mu = gs.n_success / np.maximum(gs.size, 1)
            cols[_tau_key(t)] = full(tail_miss.probability(mu, np.minimum(t, mu), gs.size)) if vg.size else p1 * np.nan
        return pd.DataFrame(cols, copy=False)

    # --------------------------------------------------------------- steps
    def step_frame(self, g: pd.DataFrame, *, by_size: bool = False) -> pd.DataFrame:
        """Means over the groups of each step (or each (step, group size)); ``g`` from :meth:`group_frame`."""
        run = self.run
        has = g["n_valid"].to_numpy() > 0
        gstep = run.g_step
        if by_size:
            sizes, size_code = np.unique(g["group_size"].to_numpy(), return_inverse=True)
            key = gstep * sizes.size + size_code
            n_keys = run.steps.size * sizes.size
        else:
            key, n_keys = gstep, run.steps.size
        cnt_all = np.bincount(key, minlength=n_keys)
        kk = key[has]                                       # the groups with a reward
        cnt = np.bincount(kk, minlength=n_keys)

        def mean(col: str) -> np.ndarray:
            return _mean_by(kk, g[col].to_numpy(dtype=float)[has], n_keys, cnt)

        k = g["n_valid"].to_numpy()[has].astype(float)
        n_roll = np.bincount(kk, weights=k, minlength=n_keys)
        nan_r = np.bincount(key, weights=g["n_nan_rewards"].to_numpy(dtype=float), minlength=n_keys)
        rsum = np.bincount(kk, weights=(g["reward_mean"].to_numpy()[has] * k), minlength=n_keys)
        xsum = np.bincount(kk, weights=g["n_success"].to_numpy()[has].astype(float), minlength=n_keys)
        with np.errstate(invalid="ignore", divide="ignore"):
            cols: dict[str, Any] = {
                "n_groups": cnt, "group_size": _mean_by(kk, k, n_keys, cnt), "n_rollouts": n_roll.astype(np.int64),
                "n_nan_rewards": nan_r.astype(np.int64),
                "reward_mean": np.where(n_roll > 0, rsum / np.maximum(n_roll, 1), np.nan),
                "success_rate": np.where(n_roll > 0, xsum / np.maximum(n_roll, 1), np.nan),
                "solve_rate_mean": mean("solve_rate"),
                "frac_all_correct": mean("all_correct"), "frac_all_wrong": mean("all_wrong"),
                "frac_zero_signal": mean("zero_signal"),
                "frac_equal_rewards": mean("equal_rewards"), "frac_shaped_signal": mean("shaped_signal"),
            }
        cols.update(self._mass_columns(g, "", kk, has, n_keys, cnt))
        cols["drift_per_nat"] = _drift(np.ones(n_keys), cols["m_S"], cols["m_F"])
        cols["pass_at_1"], cols["pass_at_G"] = mean("pass_at_1"), mean("pass_at_G")
        labels, _ = _hist_bins(self.bins)
        hb = _hist_index(g["n_success"].to_numpy()[has], k, self.bins)
        hist = np.bincount(kk * len(labels) + hb, minlength=n_keys * len(labels)).reshape(n_keys, len(labels))
        for j, lab in enumerate(labels):
            cols[f"hist/{lab}"] = hist[:, j]
        for label in self.what_if:
            for name, v in self._mass_columns(g, f"compare/{label}/", kk, has, n_keys, cnt).items():
                cols[f"compare/{label}/{name}"] = v
        for t in self.taus:
            cols[_tau_key(t)] = mean(_tau_key(t))
        if by_size:
            step_col = np.repeat(run.steps, sizes.size)
            size_col = np.tile(sizes, run.steps.size)
            out = pd.DataFrame({"step": step_col, "rows_per_group": size_col, **cols})
            return out.loc[cnt_all > 0].reset_index(drop=True)
        return pd.DataFrame({"step": run.steps, **cols})

    def _mass_columns(self, g: pd.DataFrame, prefix: str, kk: np.ndarray, has: np.ndarray, n_keys: int,
                      cnt: np.ndarray) -> dict[str, np.ndarray]:
        ms = _mean_by(kk, g[f"{prefix}m_S"].to_numpy()[has], n_keys, cnt)
        mf = _mean_by(kk, g[f"{prefix}m_F"].to_numpy()[has], n_keys, cnt)
        a = g[f"{prefix}abs_adv_sum"].to_numpy()[has]
        s_abs = np.bincount(kk, weights=np.nan_to_num(a), minlength=n_keys)
        s_sq = np.bincount(kk, weights=np.nan_to_num(g[f"{prefix}sq_adv_sum"].to_numpy()[has]), minlength=n_keys)
        with np.errstate(invalid="ignore", divide="ignore"):
            n_eff = np.where(s_sq > 0, s_abs**2 / np.where(s_sq > 0, s_sq, 1.0), 0.0)
        n_eff = np.where(np.isnan(ms), np.nan, n_eff)
        return {"m_S": ms, "m_F": mf, "sign_ratio": _ratio(ms, mf), "abs_adv_sum": _mean_by(kk, a, n_keys, cnt),
                "n_eff": n_eff}


# ============================================================== schedules
def _entropy_series(entropy_: Any, steps: np.ndarray) -> np.ndarray | None:
    """Per-step entropy aligned with ``steps`` (NaN where not given), or None."""
    if entropy_ is None:
        return None
    if isinstance(entropy_, (pd.Series, Mapping)):
        m = {int(k): float(v) for k, v in entropy_.items()}
    else:
        arr = np.asarray(entropy_, dtype=float)
        if arr.shape != steps.shape:
            raise ValueError(f"entropy must have one value per step ({steps.size}) or map steps to values, "
                             f"got shape {arr.shape}")
        m = dict(zip(steps.tolist(), arr.tolist()))
    out = np.array([m.get(int(s), np.nan) for s in steps], dtype=float)
    bad = ~np.isnan(out) & ~(np.isfinite(out) & (out >= 0))
    if bad.any():
        raise ValueError(f"entropy must be finite numbers >= 0, got {out[bad][0]!r} at step {int(steps[bad][0])}")
    return out


def _schedule_columns(steps: np.ndarray, solve: np.ndarray, H: np.ndarray | None,
                      fade: Mapping[str, Any] | None, agrae: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """α, δ of FADE's schedule and ω of A-GRAE's, stepping through the run (sequential by nature).

    The schedule is fed each step's success rate (the batch mean reward of {0, 1} rewards)
    and entropy (the last one given carries forward; before the first, ``H0``).  Without an
    entropy series δ is NaN: FADE sets it from an EMA of the entropy.
    """
    first = None if H is None or np.all(np.isnan(H)) else float(H[~np.isnan(H)][0])
    f = Policy(schedule="fade", schedule_params=fade, H0=first)   # a typed H0 wins (Policy's rule)
    a = Policy(schedule="agrae", schedule_params=agrae)
    alpha, delta, omega = (np.full(steps.size, np.nan) for _ in range(3))
    for i, p in enumerate(solve):
        h = None if H is None or np.isnan(H[i]) else float(H[i])   # None: the last one carries forward
        if np.isnan(p):
            if h is not None:
                f.entropy = h
            continue
        adv = f.advance(reward_mean=float(p), entropy=h)
        alpha[i] = adv.params["alpha"]
        delta[i] = adv.params["delta"] if H is not None else np.nan
        omega[i] = a.advance(reward_mean=float(p)).params["omega"]
    return {"fade_alpha": alpha, "fade_delta": delta, "agrae_omega": omega}


# ============================================================== public API
def group_table(rollouts: Any, *, advantage: str | Advantage | None = None, params: Mapping[str, Any] | None = None,
                success_threshold: float | None = None, compare: Iterable[Any] = (), taus: Iterable[float] = (),
                split: str | None = "train") -> pd.DataFrame:
    """One row per (step, group) of the ``split`` rows (``None``: all rows).

    Columns: ``step``, ``group``, ``group_size`` (rows), ``n_valid`` (rows with a reward),
    ``n_nan_rewards``, ``n_success``, ``solve_rate`` (p̂ = n_success/n_valid), ``reward_mean``,
    ``all_correct``, ``all_wrong``, ``zero_signal`` (pass/fail at the threshold: all pass or all
    fail), ``equal_rewards`` (every reward of the group equal: a group-relative advantage is 0
    there, whatever the threshold), ``shaped_signal`` (``zero_signal`` but not ``equal_rewards``:
    shaped rewards gave the group a gradient), ``length_mean`` (when the log has
    lengths), ``m_S``, ``m_F`` (FADE Eq. 3 per group: ``(1/k)Σ_S A``, ``−(1/k)Σ_F A``),
    ``abs_adv_sum`` (Σ|A|, A-GRAE Thm. 2), ``sq_adv_sum`` (Σ A²), ``pass_at_1``,
    ``pass_at_G`` (unbiased, ``k`` = the group's valid rollouts: :func:`analysis.passk.pass_at_k`),
    ``compare/<label>/m_S`` ... for each what-if family, and ``tail_miss/<tau>``
    (F-GRPO Lemma 3.1 at μ = p̂, N = k; ``τ`` capped at p̂, where the probability is 0).

    The advantages are the logged ones when the log has them, else those of ``advantage``
    with ``params`` (``singleton`` among them: "zero" or "raw"); without either the mass
    columns are NaN.  A group whose rewards are all NaN keeps its row with NaN statistics.

    Examples
    --------
    >>> import pandas as pd
    >>> from analysis.audit import metrics
    >>> frame = pd.DataFrame({"step": [1] * 8, "group": [0] * 4 + [1] * 4,
    ...                       "reward": [1.0, 0, 0, 0, 1, 1, 1, 1], "advantage": float("nan")})
    >>> metrics.group_table(frame, advantage="dr_grpo")[["group", "solve_rate", "m_S", "m_F", "zero_signal"]]
       group  solve_rate     m_S     m_F  zero_signal
    0      0        0.25  0.1875  0.1875        False
    1      1        1.00  0.0000  0.0000         True
    """
    t = _Tables(rollouts, advantage=advantage, params=params, success_threshold=success_threshold,
                compare=compare, taus=taus, split=split, bins=10)
    return t.group_frame()


def step_table(rollouts: Any, *, advantage: str | Advantage | None = None, params: Mapping[str, Any] | None = None,
               success_threshold: float | None = None, compare: Iterable[Any] = (), taus: Iterable[float] = (),
               entropy: Any = None, fade: Mapping[str, Any] | None = None, agrae: Mapping[str, Any] | None = None,
               bins: int = 10, split: str | None = "train", by_size: bool = False) -> pd.DataFrame:
    """One row per step: the means over the step's groups, a zero-signal group counting 0.

    Columns (docs/audit.md has each with its source): ``step``, ``n_groups``, ``group_size``
    (mean rollouts with a reward per group), ``n_rollouts``, ``n_nan_rewards``,
    ``reward_mean`` (mean over the step's rollouts), ``success_rate`` (successes/rollouts),
    ``solve_rate_mean`` (mean of p̂ over groups), ``frac_all_correct``, ``frac_all_wrong``,
    ``frac_zero_signal``, ``frac_equal_rewards``, ``frac_shaped_signal``, ``m_S``, ``m_F``,
    ``sign_ratio`` (mean m_S / mean m_F: ``inf`` when
    only m_F is 0, NaN when both are), ``abs_adv_sum`` (mean Σ|A| per group), ``n_eff``,
    ``drift_per_nat``, ``entropy``, ``entropy_drift``, ``pass_at_1``, ``pass_at_G``,
    ``hist/<bin>`` (groups per p̂ bin: ``0``, ``bins`` intervals of (0, 1), ``1``),
    ``compare/<label>/{m_S,m_F,sign_ratio,abs_adv_sum,n_eff}``, ``tail_miss/<tau>``,
    ``fade_alpha``, ``fade_delta``, ``agrae_omega``.

    ``n_eff`` is Kish's effective sample size of the update weights over the step's rollouts,
    ``(Σ_i|A_i|)²/Σ_i A_i²``: the number of equally weighted rollouts whose update would be
    as noisy as this weighted one (all rollouts of the step when every |A_i| is equal, fewer
    as the weight concentrates; zero-signal groups add nothing; 0 when every A_i is 0).  It is
    the rollout-level form of FADE Eq. 10 (:func:`rlvr_theory.variance.kish_neff` weighs
    prompts by ``w(p)``).

    ``drift_per_nat`` is ``m_S − m_F``, the drift term ``(m_S − m_F)·H`` of FADE Eq. 7 /
    Thm. 13.1 per nat of entropy (:func:`rlvr_theory.entropy.drift`); ``entropy_drift`` is the
    term itself at the step's entropy when an ``entropy`` series is given.  Caveat (FADE's
    statement, kept as the paper states it; docs/categorical.md): for a softmax policy the
    drift term is *not* part of the first-order entropy change, which is ``−η·Cov_π(A, log π)``
    whatever ``E[A] = m_S − m_F`` (:func:`rlvr_theory.entropy.natural_change`); read it as
    FADE's diagnostic of sign imbalance, not as a prediction of the entropy change.

    ``fade_alpha``, ``fade_delta``: what ``rlvr_theory.schedules.get("fade", **fade)`` would
    have chosen, fed each step's success rate and the ``entropy`` series (a sequence aligned
    with the steps, or a mapping / Series from step to entropy; missing steps carry the last
    value); ``fade_delta`` is NaN without an entropy series.  ``agrae_omega``: ω of the
    ``"agrae"`` schedule (the step's success rate).  ``by_size=True`` gives one row per
    (step, rows per group), without the schedule columns.

    Examples
    --------
    >>> import pandas as pd
    >>> from analysis.audit import metrics
    >>> frame = pd.DataFrame({"step": [1] * 8 + [2] * 8, "group": ([0] * 4 + [1] * 4) * 2,
    ...                       "reward": [1.0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
    ...                       "advantage": float("nan")})
    >>> t = metrics.step_table(frame, advantage="grpo")
    >>> t[["step", "n_groups", "m_S", "frac_all_correct", "n_eff", "pass_at_1", "fade_alpha"]]
       step  n_groups       m_S  frac_all_correct  n_eff  pass_at_1  fade_alpha
    0     1         2  0.216506               0.5    3.0      0.625         1.0
    1     2         2  0.250000               0.0    4.0      0.250         3.0
    """
    t = _Tables(rollouts, advantage=advantage, params=params, success_threshold=success_threshold,
                compare=compare, taus=taus, split=split, bins=bins)
    return _step_frame(t, entropy=entropy, fade=fade, agrae=agrae, by_size=by_size)


def _step_frame(t: _Tables, *, entropy: Any, fade: Any, agrae: Any, by_size: bool,
                g: pd.DataFrame | None = None) -> pd.DataFrame:
    g = t.group_frame() if g is None else g
    out = t.step_frame(g, by_size=by_size)
    if by_size:
        return out
    H = _entropy_series(entropy, t.run.steps)
    out.insert(out.columns.get_loc("drift_per_nat") + 1, "entropy", np.full(len(out), np.nan) if H is None else H)
    out.insert(out.columns.get_loc("entropy") + 1, "entropy_drift",
               np.full(len(out), np.nan) if H is None else _drift(H, out["m_S"].to_numpy(), out["m_F"].to_numpy()))
    for k, v in _schedule_columns(t.run.steps, out["success_rate"].to_numpy(), H, fade, agrae).items():
        out[k] = v
    return out


# ========================================================= which advantage
def candidates(reward_values: tuple[float, float] = (0.0, 1.0), *, singletons: bool = False,
               lengths: bool = True) -> list[tuple[Advantage, str]]:
    """The conventions :func:`which_advantage` tries, in order of preference.

    GRPO with ``ddof`` 0/1 and ``eps`` 0/1e-6/1e-4 (TRL: ddof 1, eps 1e-4; verl: ddof 1,
    eps 1e-6), then every registered family at its default parameters (read from
    :func:`rlvr_theory.advantages.names` at call time, so families registered later are
    searched too); each with ``singleton="zero"`` and, when the log has groups of one, also
    ``"raw"`` (verl).  Families that use lengths are left out when ``lengths`` is False.

    >>> from analysis.audit.metrics import candidates
    >>> [a.name for a, _ in candidates()][:7]
    ['grpo', 'grpo', 'grpo', 'grpo', 'grpo', 'grpo', 'reinforce']
    """
    out: list[Advantage] = [_advantages.get("grpo", ddof=d, eps=e, reward_values=reward_values)
                            for d in (0, 1) for e in (0.0, 1e-6, 1e-4)]
    for name in _advantages.names():
        try:
            adv = _advantages.get(name, reward_values=reward_values)
        except ValueError:
            continue
        if adv in out or (adv.uses_lengths and not lengths):
            continue
        out.append(adv)
    modes = ("zero", "raw") if singletons else ("zero",)
    return [(a, s) for a in out for s in modes]


def _max_error(run: _Run, adv: Advantage, singleton: str, cmp: np.ndarray) -> float:
    """max |A − A_logged| over the rows ``cmp`` of every step, chunk by chunk."""
    err = 0.0
    for sl in run.chunks():
        c = cmp[sl]
        if c.any():
            d = run.chunk_advantages(adv, singleton, sl)[c] - run.logged[sl][c]  # type: ignore[index]
            err = max(err, float(np.max(np.abs(d))))
    return err


def fittable(adv: Advantage) -> str | None:
    """The parameter :func:`which_advantage` fits for ``adv``: its one numeric parameter (not a
    flag, not ``None``, not a numerical convention such as ``eps`` or ``ddof``), else None."""
    keys = [k for k, v in adv.defaults.items() if k not in _NOT_FITTED and v is not None
            and isinstance(v, (int, float)) and not isinstance(v, bool)]
    return keys[0] if len(keys) == 1 else None


def fit_parameter(adv: Advantage, deviation, *, scale: float = 1.0, int_max: int = FIT_INT_MAX
                  ) -> tuple[Advantage, float] | None:
    """The value of ``adv``'s :func:`fittable` parameter that minimises ``deviation(advantage)``.

    A real parameter is tried on :data:`FIT_GRID` log-spaced values over :data:`FIT_RANGE`, then
    refined between the grid neighbours of the best with a bounded scalar minimisation in
    ``log x`` (:func:`scipy.optimize.minimize_scalar`); the shortest decimal value as good (to
    ``1e-7·scale``) is kept, so that δ = 0.5 reads 0.5.  An integer parameter is tried at 1 to
    ``int_max`` (default :data:`FIT_INT_MAX`; the audit passes the largest group size).  Values
    the family refuses, or where ``deviation`` raises ``ValueError`` or is not finite, count as
    infinitely far.  Returns ``(advantage, deviation)`` or None.
    """
    from scipy import optimize

    key = fittable(adv)
    if key is None:
        return None
    cache: dict[float, float] = {}

    def err(x: float) -> float:
        if x not in cache:
            try:
                e = float(deviation(adv.with_params(**{key: x})))
            except ValueError:
                e = math.inf
            cache[x] = e if math.isfinite(e) else math.inf
        return cache[x]

    integer = isinstance(adv.defaults[key], int)
    grid = np.arange(1, max(int(int_max), 1) + 1) if integer else np.geomspace(*FIT_RANGE, FIT_GRID)
    xs = [float(x) for x in grid]
    errs = np.array([err(int(x) if integer else x) for x in xs])
    if not np.isfinite(errs).any():
        return None
    i = int(np.argmin(errs))
    x, e = (int(xs[i]) if integer else xs[i]), float(errs[i])
    if not integer and e > 0:
        lo, hi = math.log(xs[max(i - 1, 0)]), math.log(xs[min(i + 1, len(xs) - 1)])
        res = optimize.minimize_scalar(lambda u: min(err(math.exp(u)), 1e300), bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-11})
        xr = math.exp(float(res.x))
        if err(xr) < e:
            x, e = xr, err(xr)
        for digits in range(1, 16):  # the shortest decimal value as good as the fitted one
            v = float(f"{x:.{digits}g}")
            if err(v) <= e + 1e-7 * scale:
                x, e = v, err(v)
                break
    return adv.with_params(**{key: x}), e


def _search(run: _Run, rtol: float, sample_steps: int, cands: Sequence[tuple[Advantage, str]] | None, *,
            option: tuple[Advantage, str] | None = None, trainer: Mapping[str, Any] | None = None
            ) -> dict[str, Any] | None:
    """:func:`which_advantage` on a grouped run (``detail=True`` form)."""
    if run.logged is None:
        return None
    rtol = checks.number("rtol", rtol, low=0)
    sample_steps = checks.integer("sample_steps", sample_steps, low=1)
    logged = run.logged
    cmp = run.valid & np.isfinite(logged)   # rows with a reward and a logged advantage
    steps_with = np.flatnonzero(run.segment_sum(lambda sl: cmp[sl], per_step=True) > 0)
    if steps_with.size == 0:
        return None
    pick = steps_with[np.unique(np.linspace(0, steps_with.size - 1, min(sample_steps, steps_with.size))
                                .round().astype(int))]
    idx = run.rows_of(pick)
    sel = cmp[idx]
    log_s = logged[idx][sel]
    scale_s = float(np.max(np.abs(log_s))) if log_s.size else 0.0
    scale = max((float(np.max(np.abs(logged[sl][cmp[sl]]))) for sl in run.chunks() if cmp[sl].any()), default=0.0)
    whole = pick.size == run.steps.size
    lengths_ok = run.length is not None and bool(np.isfinite(run.length[run.valid]).all())
    singles = bool(np.any(run.g_valid == 1))
    modes = ("zero", "raw") if singles else ("zero",)
    searched = cands is None
    if cands is None:
        cands = candidates(run.reward_values, singletons=singles, lengths=lengths_ok)

    def sample_error(adv: Advantage, singleton: str, steps: np.ndarray = pick, rows: np.ndarray = sel,
                     target: np.ndarray = log_s) -> float:
        """max |A − A_logged| over the sample steps (inf where the family is not defined)."""
        try:
            A = run.advantages(adv, singleton, steps=steps)[rows]
        except ValueError:  # not defined on these rewards (group size, real rewards, lengths)
            return math.inf
        e = float(np.max(np.abs(A - target))) if A.size else 0.0
        return e if math.isfinite(e) else math.inf

    def full_error(adv: Advantage, singleton: str, err_s: float) -> float:
        return err_s if whole else _max_error(run, adv, singleton, cmp)

    def entry(adv: Advantage, singleton: str, err: float, origin: str, fitted: Sequence[str] = ()) -> dict:
        return {"name": adv.name, "params": dict(adv.params), "singleton": singleton, "max_abs_error": err,
                "max_rel_error": err / scale if scale > 0 else (0.0 if err == 0 else math.inf),
                "reward_values": list(adv.reward_values), "label": _label(adv, singleton), "from": origin,
                "fitted": list(fitted)}

    # the user's choice first, then the family the trainer's record names, then the conventions
    first: list[tuple[Advantage, str, str]] = []
    if option is not None:
        first.append((option[0], option[1], "option"))
    hint = None
    if trainer and trainer.get("kind") == "family":
        try:
            hint = run.family(str(trainer["name"]), dict(trainer.get("params") or {}))
        except (ValueError, TypeError):  # not a registry family here, or parameters it refuses
            try:
                hint = run.family(str(trainer["name"]))
            except (ValueError, TypeError):
                hint = None
        if hint is not None:
            first += [(hint, s, "trainer") for s in modes]
    known = [(a, s) for a, s, _ in first]
    allc = first + [(a, s, "search") for a, s in cands if (a, s) not in known]
    errors = [(e, i) for i, (a, s, _) in enumerate(allc) if math.isfinite(e := sample_error(a, s))]
    info: dict[str, Any] = {"match": None, "best": None, "closest": None, "tolerance": rtol,
                            "close_tolerance": CLOSE_RTOL, "n_candidates": len(allc), "n_fitted": 0,
                            "sample_steps": [int(x) for x in run.steps[pick]], "option": None,
                            "trainer": None if not trainer else dict(trainer)}
    if option is not None:  # does the user's --advantage reproduce the log?
        e_s = next((e for e, i in errors if i == 0), math.inf)
        err = full_error(option[0], option[1], e_s) if math.isfinite(e_s) else math.inf
        info["option"] = {**entry(option[0], option[1], err, "option"),
                          "reproduced": bool(math.isfinite(err) and err <= rtol * scale)}
        if not math.isfinite(err):
            info["option"].update(max_abs_error=None, max_rel_error=None)
    if not errors:
        return info
    best_err = min(e for e, _ in errors)
    tie = best_err + 1e-9 * max(scale_s, 1e-300)  # equal up to rounding: by preference order
    ranked = sorted(errors, key=lambda t: (t[0] > tie, t[0] if t[0] > tie else 0.0, t[1]))
    for err_s, i in ranked:  # the closest on the sample, checked on every step
        if err_s > rtol * scale_s and info["best"] is not None:
            break
        adv, singleton, origin = allc[i]
        err = full_error(adv, singleton, err_s)
        e = entry(adv, singleton, err, origin)
        if info["best"] is None or err < info["best"]["max_abs_error"]:
            info["best"] = e
        if err <= rtol * scale:
            info["match"] = e
            break
    if info["match"] is None:  # fit the parameter of one-parameter families, on a few whole steps
        n_rows = np.cumsum(run.step_rows[pick])
        fit_pick = pick[:max(int(np.searchsorted(n_rows, FIT_ROWS, side="right")), 1)]
        fit_sel = cmp[run.rows_of(fit_pick)]
        fit_log = logged[run.rows_of(fit_pick)][fit_sel]

        def fit_error(adv: Advantage, singleton: str) -> float:
            return sample_error(adv, singleton, fit_pick, fit_sel, fit_log)

        _fit_search(run, info, entry, fit_error, sample_error, full_error, modes, rtol, scale, scale_s,
                    hint=hint, option=option, searched=searched, lengths_ok=lengths_ok)
    best = info["best"]
    if info["match"] is None and best is not None and best["max_rel_error"] <= CLOSE_RTOL:
        info["closest"] = best
    return info


def _fit_search(run: _Run, info: dict, entry, fit_error, sample_error, full_error, modes: Sequence[str], rtol: float,
                scale: float, scale_s: float, *, hint: Advantage | None, option: tuple[Advantage, str] | None,
                searched: bool, lengths_ok: bool) -> None:
    """The fitting stage of :func:`_search`: every one-parameter family (the trainer's and the
    user's first) on the grid of :func:`fit_parameter`; the trainer's, the user's and the
    :data:`_FIT_REFINE` best others refined, all on the :data:`FIT_ROWS` rows of ``fit_error``;
    the best fits checked on every sample step (``sample_error``), then on every step."""
    families: list[tuple[Advantage, str, bool]] = []   # (family, singleton, always refined)
    named = [a for a in (hint, None if option is None else option[0]) if a is not None and fittable(a)]
    if searched:
        for name in _advantages.names():
            try:
                adv = run.family(name)
            except ValueError:
                continue
            if fittable(adv) is not None and not (adv.uses_lengths and not lengths_ok):
                named.append(adv)
    seen: set[str] = set()
    for adv in named:
        if adv.name not in seen:
            seen.add(adv.name)
            always = (hint is not None and adv is hint) or (option is not None and adv is option[0])
            families += [(adv, s, always) for s in modes]
    info["n_fitted"] = len(families)
    if not families:
        return

    def memo(adv: Advantage, singleton: str):
        key, cache = fittable(adv), {}

        def deviation(a: Advantage) -> float:
            x = a.params[key]
            if x not in cache:
                with np.errstate(all="ignore"):  # extreme grid values (α = 1e3) overflow: inf, not a match
                    cache[x] = fit_error(a, singleton)
            return cache[x]
        return deviation

    devs = [memo(adv, s) for adv, s, _ in families]
    int_max = min(FIT_INT_MAX, max(int(run.g_valid.max()), 1)) if run.g_valid.size else 1
    coarse = []
    for (adv, _, _), dev in zip(families, devs):  # a loop over a handful of families
        key = fittable(adv)
        integer = isinstance(adv.defaults[key], int)
        xs = np.arange(1, int_max + 1) if integer else np.geomspace(*FIT_RANGE, FIT_GRID)
        best = math.inf
        for x in xs.tolist():
            try:
                best = min(best, dev(adv.with_params(**{key: int(x) if integer else x})))
            except ValueError:
                continue
        coarse.append(best)
    order = sorted((e, j) for j, e in enumerate(coarse) if math.isfinite(e))
    chosen = [j for j, (_, _, always) in enumerate(families) if always and math.isfinite(coarse[j])]
    chosen += [j for _, j in order if j not in chosen][:_FIT_REFINE]
    fitted = []
    for j in chosen:
        res = fit_parameter(families[j][0], devs[j], scale=max(scale_s, 1e-300), int_max=int_max)
        if res is not None:
            with np.errstate(all="ignore"):
                fitted.append((sample_error(res[0], families[j][1]), j, res[0]))
    fitted.sort(key=lambda t: (t[0], t[1]))
    for n, (err_s, j, adv) in enumerate(fitted):  # the best fit, and others within tolerance on the sample
        if n > 0 and err_s > rtol * scale_s or not math.isfinite(err_s):
            break
        singleton = families[j][1]
        err = full_error(adv, singleton, err_s)
        origin = ("trainer" if hint is not None and adv.name == hint.name else
                  "option" if option is not None and adv.name == option[0].name else "search")
        e = entry(adv, singleton, err, origin, fitted=[fittable(adv)])
        if info["best"] is None or err < info["best"]["max_abs_error"]:
            info["best"] = e
        if err <= rtol * scale:
            info["match"] = e
            return


def which_advantage(rollouts: Any, *, success_threshold: float | None = None, rtol: float = DEFAULT_RTOL,
                    sample_steps: int = 8, split: str | None = "train",
                    candidates: Sequence[tuple[Advantage, str]] | None = None,
                    advantage: str | Advantage | None = None, params: Mapping[str, Any] | None = None,
                    detail: bool = False) -> dict[str, Any] | None:
    """The registry family and parameters that reproduce the logged advantages.

    Tries, in this order, the family of ``advantage``/``params`` (the user's ``--advantage``:
    ``detail["option"]`` says whether it reproduces the log), the family that the trainer's
    record beside the logs names (``rollouts.source["trainer_config"]``,
    :func:`analysis.audit.readers.trainer_config`: ``rlvr-train``'s ``run_config.json``, the TRL
    adapter's ``checkpoint-N/rlvr_state.json``) with its parameters, and :func:`candidates` (or
    the ``(Advantage, singleton)`` pairs given), on the logged rewards with
    :func:`rlvr_theory.groups.advantages`, first on ``sample_steps`` steps spread over the run,
    then checks the closest candidates on every step.  When none matches, the parameter of each
    one-parameter family (δ of ``asym_grpo``, α of the power families, γ, β, ...:
    :func:`fittable`) is fitted (:func:`fit_parameter`, the trainer's and the user's family
    first; with ``candidates`` given, only those two) and the best fit checked on every step.
    A candidate matches when ``max |A − A_logged| <= rtol·max |A_logged|`` over the rollouts
    that have a reward and a logged advantage (``rtol = 1e-5`` passes float32 logs).
    Candidates that agree to rounding are ranked by that order (Dr. GRPO before AsymGRPO with
    δ = 1, which is the same advantage).

    Returns ``{"name", "params", "singleton", "max_abs_error", "max_rel_error",
    "reward_values", "label", "from", "fitted"}`` of the match (``from``: ``"option"``,
    ``"trainer"`` or ``"search"``; ``fitted``: the parameters fitted), or None when the log has
    no advantages or none is within tolerance.  ``detail=True`` returns ``{"match": ... | None,
    "best": ..., "closest": ... | None, "tolerance", "close_tolerance", "n_candidates",
    "n_fitted", "sample_steps", "option", "trainer"}`` (``best``: the candidate with the
    smallest deviation, measured on every step; ``closest``: the same when no family matches and
    its deviation is at most :data:`CLOSE_RTOL` of ``max |A_logged|``, else None; ``option``:
    the user's family with its deviation and ``reproduced``) and None only when the log has no
    advantages.

    Examples
    --------
    >>> import pandas as pd
    >>> from rlvr_theory import groups
    >>> from analysis.audit import metrics
    >>> r = np.array([1.0, 0, 0, 0, 1, 1, 0, 0])
    >>> A = groups.advantages("rloo", r, group_size=4)
    >>> frame = pd.DataFrame({"step": 1, "group": [0] * 4 + [1] * 4, "reward": r, "advantage": A})
    >>> m = metrics.which_advantage(frame)
    >>> m["name"], m["params"], m["max_abs_error"]
    ('rloo', {}, 0.0)
    """
    frame, counts, source, _ = _parts(rollouts)
    if counts is not None:  # a read held as group counts has no logged advantages
        return None
    run = _Run(frame, split=split, success_threshold=success_threshold)
    option = None
    if advantage is not None:
        kw, singleton = _split_params(params)
        option = (run.family(advantage, kw), singleton)
    found = _search(run, rtol, sample_steps, candidates, option=option, trainer=source.get("trainer_config"))
    if detail or found is None:
        return found
    return found["match"]


# ==================================================================== audit
def _pct_text(x: Any) -> str:
    """A share as a percentage (``"inf %"`` never: an infinite share reads "all")."""
    return f"{100 * x:.3g} %" if isinstance(x, (int, float)) and math.isfinite(x) else "all"


def _trend(steps: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """Least-squares line of ``values`` against ``steps``: slope per 100 steps (None with < 2 points)."""
    ok = np.isfinite(values)
    if np.unique(steps[ok]).size < 2:
        return {"slope_per_100_steps": None, "intercept": None, "n_steps": int(ok.sum())}
    slope, icpt = np.polyfit(steps[ok].astype(float), values[ok], 1)
    return {"slope_per_100_steps": float(slope * 100), "intercept": float(icpt), "n_steps": int(ok.sum())}


def _records(df: pd.DataFrame, cols: Sequence[str]) -> list[dict[str, Any]]:
    return jsonable(df[list(cols)].to_dict(orient="records"))


def _run_summary(g: pd.DataFrame, prefix: str = "") -> dict[str, Any]:
    """Means over all groups of the run (zero-signal groups count 0)."""
    h = g.loc[g["n_valid"] > 0]
    out: dict[str, Any] = {}
    if not prefix:
        k = h["n_valid"].to_numpy(dtype=float)
        out.update(n_groups=int(len(h)), n_rollouts=int(k.sum()), n_nan_rewards=int(g["n_nan_rewards"].sum()),
                   reward_mean=float((h["reward_mean"] * k).sum() / k.sum()) if k.sum() else None,
                   solve_rate_mean=float(h["solve_rate"].mean()) if len(h) else None,
                   frac_all_correct=float(h["all_correct"].mean()) if len(h) else None,
                   frac_all_wrong=float(h["all_wrong"].mean()) if len(h) else None,
                   frac_equal_rewards=float(h["equal_rewards"].mean()) if len(h) else None,
                   frac_shaped_signal=float(h["shaped_signal"].mean()) if len(h) else None,
                   pass_at_1=float(h["pass_at_1"].mean()) if len(h) else None,
                   pass_at_G=float(h["pass_at_G"].mean()) if len(h) else None)
    ms, mf = h[f"{prefix}m_S"].mean(), h[f"{prefix}m_F"].mean()
    sq = h[f"{prefix}sq_adv_sum"].sum()
    out.update(m_S=ms, m_F=mf, sign_ratio=float(_ratio(np.array([ms]), np.array([mf]))[0]),
               abs_adv_sum=h[f"{prefix}abs_adv_sum"].mean())
    out["n_eff_total"] = float(h[f"{prefix}abs_adv_sum"].sum() ** 2 / sq) if sq > 0 else (0.0 if len(h) else None)
    return jsonable(out)


#: per-step columns of report.json "steps" (schema of the audit; the step table has them all)
def _shaped_notes(t: _Tables) -> list[str]:
    """What shaped rewards change, said once (the report's two views rest on these)."""
    T = t.run.threshold
    out = [f"Shaped rewards (more than two values): the trainer's view is the real-valued rewards (a group whose "
           f"rewards all equal gets zero advantage; every other group gets a gradient); the pass/fail view splits "
           f"rollouts at reward >= {T:g} (S: at or above, F: below) for solve rates, pass@k, tail miss and the "
           "m_S/m_F split of the masses."]
    families = ([] if t.option is None or t.masses_from == "logged" else [t.option[0]]) + \
               [adv for adv, *_ in t.what_if.values()]
    binary_only = sorted({a.name for a in families if not a.graded})
    if binary_only:
        out.append(f"{', '.join(binary_only)} {'is' if len(binary_only) == 1 else 'are'} defined on success/failure "
                   f"only: {'its' if len(binary_only) == 1 else 'their'} masses here are of the rewards thresholded at "
                   f"{T:g}, not of the shaped rewards a trainer would feed it.")
    return out


STEP_KEYS = ("step", "n_groups", "group_size", "n_rollouts", "n_nan_rewards", "reward_mean", "success_rate",
             "solve_rate_mean", "frac_all_correct", "frac_all_wrong", "frac_zero_signal", "frac_equal_rewards",
             "frac_shaped_signal", "m_S", "m_F",
             "sign_ratio", "abs_adv_sum", "n_eff", "drift_per_nat", "entropy", "entropy_drift", "pass_at_1",
             "pass_at_G", "fade_alpha", "fade_delta", "agrae_omega")


def audit(rollouts: Any, *, advantage: str | Advantage | None = None, params: Mapping[str, Any] | None = None,
          success_threshold: float | None = None, compare: Iterable[Any] = (), taus: Iterable[float] = (),
          entropy: Any = None, fade: Mapping[str, Any] | None = None, agrae: Mapping[str, Any] | None = None,
          bins: int = 10, rtol: float = DEFAULT_RTOL, sample_steps: int = 8, split: str = "train"
          ) -> dict[str, Any]:
    """The ``report.json`` document of a run (JSON-safe: :func:`rlvr_plumbing.serialize.jsonable`).

    Keys: ``source`` (the readers' dict), ``group_size`` (int, or None when groups have
    unequal sizes), ``group_sizes`` ({rows per group: groups}), ``split``, ``advantage``
    (the :func:`which_advantage` match ``{name, params, singleton, max_abs_error, ...}`` or
    None), ``advantage_search`` (``{match, best, tolerance, n_candidates, sample_steps}`` or
    None when the log has no advantages), ``masses_from`` (``"logged"``, ``"option"`` or
    None) and ``masses_advantage`` (the family of ``--advantage``), ``steps`` (one object
    per step with the keys :data:`STEP_KEYS` and ``tail_miss/<tau>``), ``histogram``
    (``{bins, edges, steps, counts, run}``: groups per p̂ bin), ``compare`` (per what-if
    label: ``{name, params, singleton, steps: [{step, m_S, m_F, sign_ratio, abs_adv_sum,
    n_eff}], summary}``), ``summary`` (means over all groups of the run), ``trends`` (least-squares
    slope per 100 steps of ``pass_at_1``, ``pass_at_G``), ``by_group_size`` (when sizes
    differ: ``{G: {"summary", "steps"}}``), ``val`` (reward statistics of the validation rows,
    when the log has them; keyed by the split's name), ``notes`` (sentences for the report)
    and ``options`` (the options used).

    The options are those of :func:`step_table` (``advantage``, ``params``,
    ``success_threshold``, ``compare``, ``taus``, ``entropy``, ``fade``, ``agrae``, ``bins``)
    and of :func:`which_advantage` (``rtol``, ``sample_steps``); ``split`` names the rows
    audited.

    Examples
    --------
    >>> import pandas as pd
    >>> from rlvr_theory import groups
    >>> from analysis.audit import metrics
    >>> r = np.array([1.0, 0, 0, 0, 1, 1, 0, 0] * 2)
    >>> frame = pd.DataFrame({"step": [0] * 8 + [1] * 8, "group": [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4,
    ...                       "reward": r, "advantage": groups.advantages("grpo", r, group_size=4)})
    >>> doc = metrics.audit(frame, compare=["dr_grpo"], taus=[0.1])
    >>> doc["advantage"]["name"], doc["advantage"]["params"], doc["steps"][0]["m_S"]
    ('grpo', {'ddof': 0, 'eps': 0.0}, 0.4665063509461097)
    >>> round(doc["compare"]["dr_grpo"]["steps"][0]["m_S"], 6), round(doc["steps"][0]["tail_miss/0.1"], 6)
    (0.21875, 0.453594)
    """
    t = _Tables(rollouts, advantage=advantage, params=params, success_threshold=success_threshold,
                compare=compare, taus=taus, split=split, bins=bins)
    run = t.run
    g = t.group_frame()
    st = _step_frame(t, entropy=entropy, fade=fade, agrae=agrae, by_size=False, g=g)
    notes = list(t.notes)
    search = _search(run, rtol, sample_steps, None, option=t.option, trainer=t.source.get("trainer_config"))
    sizes, counts = np.unique(run.g_rows, return_counts=True)
    group_size = t.group_size if t.group_size is not None else (int(sizes[0]) if sizes.size == 1 else None)
    doc: dict[str, Any] = {
        "source": {"format": None, "paths": [], **t.source},
        "group_size": group_size,
        "group_sizes": {str(int(s)): int(c) for s, c in zip(sizes, counts)},
        "split": split,
        "advantage": None if search is None else search["match"],
        "advantage_search": search,
        "masses_from": t.masses_from,
        "masses_advantage": None if t.option is None else {"name": t.option[0].name, "params": dict(t.option[0].params),
                                                           "singleton": t.option[1],
                                                           "on_real_rewards": bool(t.option[0].graded)},
        "rewards": {"kind": "shaped" if run.shaped else "binary", "success_threshold": run.threshold,
                    "values": list(run.reward_values)},
    }
    if run.shaped:
        notes.extend(_shaped_notes(t))
    keys = list(STEP_KEYS) + [_tau_key(x) for x in t.taus]
    doc["steps"] = _records(st, keys)
    labels, edges = _hist_bins(t.bins)
    hist = st[[f"hist/{lab}" for lab in labels]].to_numpy()
    doc["histogram"] = {"bins": labels, "edges": edges.tolist(), "steps": run.steps.tolist(),
                        "counts": hist.tolist(), "run": hist.sum(axis=0).tolist()}
    doc["compare"] = {}
    for label, (adv, singleton, _, _) in t.what_if.items():
        cols = ["m_S", "m_F", "sign_ratio", "abs_adv_sum", "n_eff"]
        sub = st[["step"] + [f"compare/{label}/{c}" for c in cols]]
        sub.columns = ["step"] + cols
        doc["compare"][label] = {"name": adv.name, "params": dict(adv.params), "singleton": singleton,
                                 "on_real_rewards": bool(adv.graded),
                                 "steps": _records(sub, sub.columns), "summary": _run_summary(g, f"compare/{label}/")}
    doc["summary"] = {"n_steps": int(run.steps.size), **_run_summary(g)}
    doc["trends"] = {c: _trend(run.steps, st[c].to_numpy()) for c in ("pass_at_1", "pass_at_G")}
    if sizes.size > 1:
        by = t.step_frame(g, by_size=True)
        doc["by_group_size"] = {}
        for s in sizes:
            gs_rows = g.loc[g["group_size"] == s]
            doc["by_group_size"][str(int(s))] = {
                "summary": _run_summary(gs_rows),
                "steps": _records(by.loc[by["rows_per_group"] == s],
                                  [c for c in by.columns if not c.startswith(("hist/", "compare/"))]),
            }
        notes.append(f"Groups have unequal sizes ({', '.join(f'{int(s)}: {int(c)} groups' for s, c in zip(sizes, counts))}); "
                     "every advantage is computed per size and by_group_size breaks the audit down by size.")
    n_nan = int(st["n_nan_rewards"].sum())
    if n_nan:
        notes.append(f"{n_nan} rollout(s) have no reward (NaN): they are left out of their groups and counted "
                     "per step in n_nan_rewards.")
    n_empty = int(np.count_nonzero(run.g_valid == 0))
    if n_empty:
        notes.append(f"{n_empty} group(s) have no reward at all and are left out of the step means.")
    if entropy is None:
        notes.append("No entropy series: fade_delta is not computed (FADE sets δ from an EMA of the policy "
                     "entropy, which rollout logs do not record) and entropy_drift is not computed; "
                     "drift_per_nat = m_S − m_F is the drift term per nat of entropy.")
    notes.append("drift_per_nat and entropy_drift are FADE's drift term (Eq. 7, Thm. 13.1) as the paper states "
                 "it; for a softmax policy the exact first-order entropy change does not contain it "
                 "(docs/categorical.md).")
    trainer = t.source.get("trainer_config")
    if trainer:
        what = "schedule" if trainer.get("kind") == "schedule" else "advantage"
        given = ", ".join(f"{k}={v!r}" for k, v in (trainer.get("params") or {}).items())
        notes.append(f"{trainer.get('file')} names the {what} {trainer.get('name')}" + (f" ({given})" if given else "")
                     + (" (its parameters are not recorded there)" if not trainer.get("params_known") else "")
                     + (": 'which advantage' tries it first." if what == "advantage" and search is not None else "."))
        if what == "schedule" and search is not None:
            notes.append(f"A schedule ({trainer.get('name')}) changes the advantage's parameters from step to step, "
                         "so no fixed registry family is expected to reproduce the whole log.")
    if search is not None and search.get("option") is not None:
        o = search["option"]
        notes.append(f"--advantage {o['label']} " + (
            f"reproduces the logged advantages (largest deviation {o['max_abs_error']:.3g})." if o["reproduced"] else
            "does not reproduce the logged advantages" + (
                f" (largest deviation {o['max_abs_error']:.3g})." if o.get("max_abs_error") is not None
                else " (it is not defined on these rewards).")))
    if search is not None and search["match"] is None and search["best"] is not None:
        b = search["best"]
        if search.get("closest") is not None:
            notes.append(f"No registry advantage reproduces the logged advantages within relative tolerance "
                         f"{search['tolerance']:g}; the closest is {b['label']} (largest deviation "
                         f"{b['max_abs_error']:.3g}, {100 * b['max_rel_error']:.3g} % of max |A|).")
        else:
            notes.append(f"No registry advantage reproduces the logged advantages within relative tolerance "
                         f"{search['tolerance']:g}, and none comes close: the smallest largest deviation of the "
                         f"{search['n_candidates']} candidates and {search.get('n_fitted', 0)} fitted families is "
                         f"{b['max_abs_error']:.3g} ({_pct_text(b['max_rel_error'])} of max |A|, above the "
                         f"{100 * search.get('close_tolerance', CLOSE_RTOL):g} % under which one is called close).")
    if t.split_labels is not None and split is not None:
        others = sorted(set(t.split_labels) - {split})
        for other in others:
            tv = _Tables(rollouts, advantage=None, params=None, success_threshold=success_threshold,
                         compare=(), taus=(), split=other, bins=bins)
            gv = tv.group_frame()
            sv = tv.step_frame(gv)
            doc[other] = {"summary": {k: v for k, v in _run_summary(gv).items() if k not in
                                  ("m_S", "m_F", "sign_ratio", "abs_adv_sum", "n_eff_total")},
                          "steps": _records(sv, ["step", "n_groups", "group_size", "n_rollouts", "n_nan_rewards",
                                                 "reward_mean", "success_rate", "solve_rate_mean",
                                                 "frac_all_correct", "frac_all_wrong", "pass_at_1", "pass_at_G"])}
    doc["notes"] = notes
    doc["options"] = {"advantage": None if advantage is None else str(getattr(advantage, "name", advantage)),
                      "params": dict(params or {}), "success_threshold": success_threshold,
                      "compare": [c[0] for c in t.compare], "taus": t.taus, "bins": t.bins,
                      "entropy_given": entropy is not None, "fade": dict(fade or {}), "agrae": dict(agrae or {}),
                      "rtol": rtol, "sample_steps": sample_steps, "split": split,
                      "reward_values": list(run.reward_values)}
    return jsonable(doc)
