"""Pre-RL triage: what a planned GRPO group size ``G`` will get out of each prompt.

Input: per prompt ``j``, ``n_j`` sampled completions of the starting (SFT) checkpoint with
``x_j`` successes — what ``rlvr-train eval`` samples — a planned group size ``G <= n_j`` and a
registry advantage.  Output (:func:`triage`), per prompt and over the prompts:

* the **unbiased** probability that a group of ``G`` drawn from the prompt carries no signal
  (all wrong or all right), ``z_G(p) = (1 − p)^G + p^G`` for ``X ~ Bin(G, p)``.  Drawing ``G`` of
  the ``n`` samples without replacement gives the estimator

      ẑ = C(n − x, G)/C(n, G) + C(x, G)/C(n, G),

  whose expectation over ``x ~ Bin(n, p)`` is exactly ``z_G(p)`` (the argument of the unbiased
  pass@k estimator, Chen et al. 2021, :mod:`analysis.passk`, whose log-space ratio it reuses);
* the expected masses ``E[M_S(X)]``, ``E[M_F(X)]`` at group size ``G`` (FADE Eq. 3), estimated
  without bias by the hypergeometric weights ``w_k = C(x, k)·C(n − x, G − k)/C(n, G)`` applied
  to the exact per-count masses of the family (:func:`rlvr_theory.masses.outcome_advantages`):
  ``Σ_k w_k·M(k)`` has expectation ``Σ_k Bin(k; G, p)·M(k) = rlvr_theory.masses.exact(adv, p, G)``
  because ``E_x[w_k] = Bin(k; G, p)``.  The plug-in ``masses.exact(adv, x/n, G)`` is biased;
* over the prompts: the expected share of zero-signal groups, the solve-rate histogram, the mean
  masses and their sign ratio, the prompts that give no signal at any ``G`` (``x ∈ {0, n}``:
  estimated zero-signal probability 1) and a plain verdict sentence.

Vectorised over the prompts (arrays ``[P, G + 1]``); the loop is over the ``G + 1`` counts only
through matrix products.  Docs: ``docs/triage.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rlvr_plumbing import checks
from rlvr_theory import advantages as _adv
from rlvr_theory import masses as _masses
from rlvr_theory.advantages import Advantage

from .passk import _ints, _log_miss

__all__ = ["Triage", "triage", "hypergeometric_weights", "zero_signal_probability", "resolve_advantage",
           "VERDICT_THRESHOLDS"]

#: expected zero-signal share at or above which the verdict says "most" / "a large share" of the
#: groups carry no gradient
VERDICT_THRESHOLDS = (0.5, 0.2)


def _counts(n: Any, x: Any, G: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(n, x) as 1-D int64 arrays of one length (n broadcast), 0 <= x <= n, and 1 <= G <= min n."""
    xx = np.atleast_1d(_ints("x", x, 0))
    if xx.ndim != 1:
        raise ValueError(f"x must be a 1-D array (one success count per prompt), got shape {xx.shape}")
    nn = _ints("n", n, 1)
    try:
        nn = np.broadcast_to(nn, xx.shape).copy()
    except ValueError:
        raise ValueError(f"n must be a scalar or have one entry per prompt ({xx.size}), "
                         f"got shape {nn.shape}") from None
    if np.any(xx > nn):
        i = int(np.argmax(xx > nn))
        raise ValueError(f"x must be integers in [0, n], got {xx[i]} > n = {nn[i]} (prompt {i})")
    G = checks.integer("G", G, low=1)
    if G > int(nn.min()):
        i = int(np.argmin(nn))
        raise ValueError(f"G must be <= n (the samples of every prompt: a group of G is drawn from them "
                         f"without replacement), got G = {G} > n = {nn[i]} (prompt {i})")
    return nn, xx, G


def hypergeometric_weights(n: Any, x: Any, G: Any) -> np.ndarray:
    """``w[j, k] = C(x_j, k)·C(n_j − x_j, G − k)/C(n_j, G)``, k = 0..G: the probability that
    ``G`` of prompt j's ``n_j`` samples, drawn without replacement, hold ``k`` successes.
    Shape ``[P, G + 1]``; rows sum to 1.  ``E_{x ~ Bin(n, p)}[w_k] = Bin(k; G, p)``."""
    nn, xx, G = _counts(n, x, G)
    k = np.arange(G + 1)
    return stats.hypergeom.pmf(k[None, :], nn[:, None], xx[:, None], G)


def zero_signal_probability(n: Any, x: Any, G: Any) -> np.ndarray:
    """Unbiased estimate of ``(1 − p)^G + p^G`` per prompt:
    ``C(n − x, G)/C(n, G) + C(x, G)/C(n, G)``, each ratio in log space
    (:func:`analysis.passk._log_miss`, the pass@k estimator's product form)."""
    nn, xx, G = _counts(n, x, G)
    g = np.asarray(G, dtype=np.int64)
    return np.exp(_log_miss(nn, xx, g)) + np.exp(_log_miss(nn, nn - xx, g))


@dataclass
class Triage:
    """The result of :func:`triage`.

    ``per_prompt``: one row per prompt — ``n``, ``x``, ``p_hat``, ``p_zero_signal``, ``m_S``,
    ``m_F`` (expected masses of one group of G), ``no_signal`` (x ∈ {0, n}).  ``histogram``:
    the solve-rate histogram (``lo``, ``hi``, ``prompts``; the last bin includes 1).
    """

    G: int
    advantage: str
    per_prompt: pd.DataFrame
    histogram: pd.DataFrame
    zero_signal_share: float
    m_S: float
    m_F: float
    sign_ratio: float | None
    no_signal: np.ndarray
    never_solved: int
    always_solved: int
    verdict: str

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (no per-prompt rows but the no-signal indices)."""
        return {"G": self.G, "advantage": self.advantage, "prompts": int(len(self.per_prompt)),
                "zero_signal_share": self.zero_signal_share, "m_S": self.m_S, "m_F": self.m_F,
                "sign_ratio": self.sign_ratio, "no_signal_prompts": [int(i) for i in self.no_signal],
                "no_signal_count": int(self.no_signal.size), "never_solved": self.never_solved,
                "always_solved": self.always_solved, "solve_rate_mean": float(self.per_prompt["p_hat"].mean()),
                "histogram": {"lo": self.histogram["lo"].tolist(), "hi": self.histogram["hi"].tolist(),
                              "prompts": [int(c) for c in self.histogram["prompts"]]},
                "verdict": self.verdict}

    def to_string(self) -> str:
        """The table ``rlvr-train eval --triage`` prints."""
        s = self.summary()
        ratio = "n/a" if s["sign_ratio"] is None else f"{s['sign_ratio']:.4g}"
        hist = "  ".join(f"[{lo:.1f},{hi:.1f}{']' if hi == 1 else ')'}:{c}"
                         for lo, hi, c in zip(s["histogram"]["lo"], s["histogram"]["hi"], s["histogram"]["prompts"]))
        lines = [f"triage at G = {self.G}, advantage {self.advantage}",
                 f"  prompts                {s['prompts']} (mean solve rate {s['solve_rate_mean']:.4f})",
                 f"  zero-signal share      {self.zero_signal_share:.4f} (expected, unbiased)",
                 f"  no-signal prompts      {s['no_signal_count']} ({self.never_solved} never solved, "
                 f"{self.always_solved} always solved)",
                 f"  E[m_S], E[m_F]         {self.m_S:.4g}, {self.m_F:.4g} (sign ratio {ratio})",
                 f"  solve-rate histogram   {hist}",
                 f"  verdict                {self.verdict}"]
        return "\n".join(lines)


def resolve_advantage(advantage: Advantage | str, params: dict[str, Any] | None = None) -> Advantage:
    """The registry family ``advantage`` with ``params``, or an Advantage instance as given (no params)."""
    if isinstance(advantage, Advantage):
        if params:
            raise ValueError("params: give them with an advantage name, not with an Advantage instance")
        return advantage
    if not isinstance(advantage, str):
        raise ValueError(f"advantage must be a registry name or an Advantage, got {type(advantage).__name__}")
    return _adv.get(advantage, **(params or {}))


def _verdict(G: int, P: int, n_desc: str, never: int, always: int, share: float) -> str:
    k = never + always
    head = (f"At G = {G}, {k} of {P} prompts ({100 * k / P:.1f} %) will give no signal "
            f"({never} never solved, {always} always solved in {n_desc} samples)")
    hi, mid = VERDICT_THRESHOLDS
    if share >= hi:
        tail = "half or more of the groups will carry no gradient: filter those prompts, raise G, or use dynamic sampling"
    elif share >= mid:
        tail = "a large share of groups will carry no gradient: consider filtering prompts or a larger G"
    else:
        tail = "most groups will carry signal"
    return f"{head}; the expected share of zero-signal groups is {100 * share:.1f} %: {tail}."


def triage(n: Any, x: Any, G: Any, advantage: Advantage | str = "grpo", params: dict[str, Any] | None = None,
           *, bins: int = 10) -> Triage:
    """Pre-RL triage of prompts with ``x`` successes in ``n`` samples at group size ``G`` (module docstring).

    ``n``: a scalar or one count per prompt; ``x``: one success count per prompt; ``G <= min(n)``;
    ``advantage``: a registry name (with ``params``) or an :class:`~rlvr_theory.advantages.Advantage`
    of group level (batch-level families depend on the whole batch and are refused); ``bins``: equal
    bins of the solve-rate histogram on [0, 1].
    """
    nn, xx, G = _counts(n, x, G)
    adv = resolve_advantage(advantage, params)
    G = _masses.check_group_size(G, adv)
    bins = checks.integer("bins", bins, low=1)
    if adv.batch_level:
        raise ValueError(f"advantage: {adv!r} is batch-level (its advantages depend on the whole batch); "
                         "triage needs a group-level family")
    per_x = _masses.outcome_advantages(adv, G)
    w = hypergeometric_weights(nn, xx, G)
    m_s, m_f = w @ per_x["m_S"].to_numpy(), w @ per_x["m_F"].to_numpy()
    z = zero_signal_probability(nn, xx, G)
    p_hat = xx / nn
    no_sig = (xx == 0) | (xx == nn)
    per_prompt = pd.DataFrame({"n": nn, "x": xx, "p_hat": p_hat, "p_zero_signal": z, "m_S": m_s, "m_F": m_f,
                               "no_signal": no_sig})
    edges = np.linspace(0.0, 1.0, bins + 1)
    counts, _ = np.histogram(p_hat, bins=edges)
    hist = pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "prompts": counts})
    ms, mf = float(m_s.mean()), float(m_f.mean())
    ratio = None if ms == 0 and mf == 0 else float("inf") if mf == 0 else ms / mf
    never, always = int((xx == 0).sum()), int((xx == nn).sum())
    share = float(z.mean())
    n_desc = f"n = {int(nn[0])}" if np.all(nn == nn[0]) else f"n = {int(nn.min())}..{int(nn.max())}"
    return Triage(G, repr(adv), per_prompt, hist, share, ms, mf, ratio, np.flatnonzero(no_sig), never, always,
                  _verdict(G, xx.size, n_desc, never, always, share))
