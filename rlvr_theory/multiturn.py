"""Multi-turn rollouts and retries of failed prompts: reachability and per-turn masses.

Source: FADE App. 9.1 (the masses of a multi-turn rollout) and App. 9.2 (one GRPO retry of
the failures has the masses of Power α = 2).  Masses use the convention of
:mod:`rlvr_theory.masses` (divided by the group size ``G``: the paper's ``B·p·q`` is our
``p·q``).

FADE App. 9.1, Eq. 15-16: the gradient of a rollout of ``T`` turns splits by turn,

    ∇J = Σ_t [m_S^(t)·∇̄_S^(t) − m_F^(t)·∇̄_F^(t)],
    m_S^(t) = ρ_t·E[w_t^+ | turn t reached],   m_F^(t) = ρ_t·E[w_t^- | turn t reached],

with the *reachability factor* ``ρ_t = Pr(turn t is reached)``; one turn (``T = 1``,
``ρ_1 = 1``) is the single-turn framework.  Equivalently ``m^(t) = E[1{t reached}·M^(t)]``:
a turn that is not reached contributes nothing.

The retry scheme of FADE App. 9.2: turn 1 samples a group of ``G`` rollouts and applies an
advantage; turn ``t + 1`` samples a *fresh* group from the same prompt context only when
turn ``t`` failed.  The fresh group is independent of the event that reached it, so

    m^(t) = ρ_t · m(p_t, G)

exactly, ``m(p_t, G)`` the masses of the advantage at that turn's solve rate.  What "turn
``t`` failed" means fixes ``ρ``:

* ``rule="attempt"`` (the paper's ``ρ_2 = q``): the turn's verdict is one attempt (in
  :func:`of_rollouts`, the group's first rollout), failed with probability ``q_t = 1 − p_t``:
  ``ρ_t = Π_{s<t} q_s``;
* ``rule="group"``: the whole group failed (no success in ``G``, the groups without signal):
  ``ρ_t = Π_{s<t} q_s^G``.

**Retry = Power α** (FADE App. 9.2, with the paper's "GRPO" of Sec. 2.2, mean-only:
``dr_grpo``).  With the same context (``p_t = p``) and ``rule="attempt"``, turn ``t`` has the
plug-in masses ``q^(t−1)·p·q = p·q^t``: one retry (turn 2) has exactly the closed-form masses
of ``power_alpha`` with ``alpha=2, normalize=False``, and the ``(α−1)``-th retry those of
Power α for every integer α (with ``normalize=True`` up to its constant
``C = (1+α)^(1+α)/(4α^α)``, 27/16 at α = 2).  At finite ``G`` the identity is only asymptotic:
the exact expectations are ``q·(G−1)/G·p·q`` for the retry and ``E[p̂·q̂²]`` for Power α = 2,
and (:func:`power2_gap`)

    E[p̂·q̂²] − q·(G−1)/G·p·q = (G−1)/G² · p·q·(2p − 1),

zero only at ``p ∈ {0, 1/2, 1}``, O(1/G) elsewhere.  Per group the identity is exact in its
other form: Power α = 2 is Dr. GRPO times ``q̂``, the reachability estimated from the same
group ("a within-batch reweighting", FADE App. 9.2).  With ``rule="group"`` the retry has
``q^G·p·q`` instead, and with std-normalised ``grpo`` ``q·sqrt(p·q)``: neither is Power α.

Examples
--------
>>> from rlvr_theory import multiturn
>>> multiturn.reachability(0.25, turns=3)
array([1.    , 0.75  , 0.5625])
>>> multiturn.turn_masses("dr_grpo", 0.25, turns=2).m_S    # p·q, then p·q²
array([0.1875  , 0.140625])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_plumbing import checks

from . import masses as _masses
from .advantages import Advantage
from .masses import Masses

__all__ = ["RULES", "reachability", "turn_masses", "of_rollouts", "power2_gap"]

#: what makes a turn fail, so that the next one is reached
RULES = ("attempt", "group")


def _rule(rule: Any) -> str:
    return checks.choice("rule", rule, RULES)


def _per_turn_p(p: Any, turns: Any) -> np.ndarray:
    """Solve rates ``[..., T]``: ``p`` itself (``turns=None``) or ``p`` repeated ``turns`` times."""
    if turns is None:
        pa = checks.array("p", p, low=0, high=1, min_ndim=1)
        if pa.shape[-1] == 0:
            raise ValueError("p must have at least one turn on its last axis, got shape "
                             f"{pa.shape}")
        return pa
    turns = checks.integer("turns", turns, low=1)
    pa = checks.array("p", p, low=0, high=1)
    return np.repeat(pa[..., None], turns, axis=-1)


def reachability(p: Any, turns: int | None = None, *, rule: str = "attempt",
                 G: int | None = None) -> np.ndarray:
    """Reachability factors ``ρ_t = Pr(turn t is reached)`` of a retry-on-failure scheme.

    FADE App. 9.1 defines ``ρ_t``; App. 9.2 gives ``ρ_2 = q`` for one retry.  Turn ``t + 1``
    is reached when turn ``t`` is reached and fails, so ``ρ_1 = 1`` and
    ``ρ_t = Π_{s<t} c_s`` with the failure probability ``c_s = q_s = 1 − p_s``
    (``rule="attempt"``) or ``c_s = q_s^G`` (``rule="group"``: no success in the group).

    Parameters
    ----------
    p : array_like
        Solve rates in [0, 1].  With ``turns=None``, shape ``[..., T]``: the solve rate of each
        turn once reached (a turn may see feedback; FADE App. 9.1).  With ``turns``, any shape:
        the same context at every turn (FADE App. 9.2), ``p_t = p``.
    turns : int, optional
        Number of turns ``T >= 1`` when ``p`` is the same at every turn.
    rule : {"attempt", "group"}
        What makes a turn fail (see the module docstring).
    G : int, optional
        Group size, required by ``rule="group"``.

    Returns
    -------
    ndarray
        ``ρ`` of shape ``[..., T]`` (``p.shape + (turns,)`` with ``turns``), non-increasing
        along the last axis.

    Examples
    --------
    >>> from rlvr_theory import multiturn
    >>> multiturn.reachability([[0.5, 0.25, 0.1]])              # turns with feedback
    array([[1.   , 0.5  , 0.375]])
    >>> multiturn.reachability(0.5, turns=3, rule="group", G=2)  # ρ_t = (q^G)^(t−1)
    array([1.    , 0.25  , 0.0625])
    """
    rule = _rule(rule)
    pt = _per_turn_p(p, turns)
    fail = 1.0 - pt
    if rule == "group":
        G = _masses.check_group_size(G)
        fail = fail**G
    elif G is not None:
        _masses.check_group_size(G)
    ones = np.ones(pt.shape[:-1] + (1,))
    return np.concatenate([ones, np.cumprod(fail[..., :-1], axis=-1)], axis=-1)


def turn_masses(adv: Advantage | str, p: Any, G: int | None = None, turns: int | None = None, *,
                rule: str = "attempt", exact: bool = False) -> Masses:
    """Per-turn masses ``m^(t) = ρ_t·m(p_t, G)`` of a retry-on-failure scheme (FADE App. 9.1-9.2).

    Each turn samples a fresh group from its own context, independent of the event that
    reached it, so ``E[w_t^± | turn t reached]`` is the single-turn mass of ``adv`` at the
    turn's solve rate (FADE Eq. 16; App. 9.2 for ``dr_grpo``: ``m^(2) = q·p·q``).  Sum over the
    last axis for the masses of the whole update.

    Parameters
    ----------
    adv : Advantage or str
        The advantage applied at every turn (a registered name: default parameters).
    p : array_like
        Solve rates, as in :func:`reachability`.
    G : int, optional
        Group size: required with ``exact=True``, ``rule="group"`` or where the closed form
        of ``adv`` depends on it.
    turns : int, optional
        Number of turns when ``p`` is the same at every turn.
    rule : {"attempt", "group"}
        What makes a turn fail (see the module docstring).
    exact : bool
        ``False``: the paper's plug-in masses (:func:`rlvr_theory.masses.closed_form`);
        ``True``: the exact finite-G expectations (:func:`rlvr_theory.masses.exact`), for
        which ``m^(t) = E[1{t reached}·M^(t)]`` holds exactly.

    Returns
    -------
    Masses
        ``m_S``, ``m_F`` of shape ``[..., T]``.

    Examples
    --------
    >>> from rlvr_theory import advantages, masses, multiturn
    >>> m = multiturn.turn_masses("dr_grpo", 0.25, turns=2)
    >>> masses.closed_form(advantages.get("power_alpha", alpha=2.0), 0.25).m_S  # = turn 2
    array(0.140625)
    >>> multiturn.turn_masses("dr_grpo", 0.25, G=8, turns=2, exact=True).m_S     # q·(G−1)/G·pq
    array([0.1640625 , 0.12304688])
    """
    adv = _masses.as_advantage(adv)
    exact = checks.choice("exact", exact, (True, False))
    rho = reachability(p, turns, rule=rule, G=G)
    pt = _per_turn_p(p, turns)
    G = _masses.check_group_size(G, adv, required=exact)
    m = _masses.exact(adv, pt, G) if exact else _masses.closed_form(adv, pt, G)
    return Masses(rho * m.m_S, rho * m.m_F)


def of_rollouts(adv: Advantage | str, rewards: Any, *, rule: str = "attempt") -> Masses:
    """Realised per-turn masses ``1{turn t reached}·M^(t)`` of sampled retry rounds.

    ``rewards[..., t, :]`` is the group of turn ``t`` (values ``adv.reward_values``), sampled
    whether or not the turn is reached; a turn is reached when every earlier turn failed:
    its first rollout failed (``rule="attempt"``) or all its rollouts did (``rule="group"``).
    ``M^(t)`` are the group masses of :func:`rlvr_theory.masses.of_group`.  The mean over
    independent samples estimates :func:`turn_masses` with ``exact=True`` (FADE App. 9.1:
    ``m^(t) = ρ_t·E[M^(t) | t reached]``).

    Parameters
    ----------
    adv : Advantage or str
        The advantage applied at every turn.
    rewards : array_like
        Shape ``[..., T, G]``.
    rule : {"attempt", "group"}
        What makes a turn fail.

    Returns
    -------
    Masses
        ``m_S``, ``m_F`` of shape ``[..., T]``; 0 where the turn is not reached.

    Examples
    --------
    >>> from rlvr_theory import multiturn
    >>> r = np.array([[0, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])   # 3 turns, G = 4
    >>> multiturn.of_rollouts("dr_grpo", r).m_S                     # turn 3 not reached
    array([0.1875, 0.25  , 0.    ])
    """
    adv = _masses.as_advantage(adv)
    rule = _rule(rule)
    r = checks.array("rewards", rewards, min_ndim=2)
    if r.shape[-1] == 0 or r.shape[-2] == 0:
        raise ValueError(f"rewards must have shape [..., T, G] with T, G >= 1, got shape {r.shape}")
    m = _masses.of_group(adv, r)
    failed = r != adv.reward_values[1]
    fail = failed[..., 0] if rule == "attempt" else failed.all(axis=-1)
    ones = np.ones(r.shape[:-2] + (1,), dtype=bool)
    reached = np.concatenate([ones, np.logical_and.accumulate(fail[..., :-1], axis=-1)], axis=-1)
    return Masses(np.where(reached, m.m_S, 0.0), np.where(reached, m.m_F, 0.0))


def power2_gap(p: Any, G: int) -> np.ndarray:
    """Exact finite-G mass of Power α = 2 minus that of one Dr. GRPO retry of the failures.

    ``E[p̂·q̂²] − q·(G−1)/G·p·q = (G−1)/G²·p·q·(2p − 1)`` (``X ~ Binom(G, p)``, ``p̂ = X/G``;
    from the first three moments of the binomial).  FADE App. 9.2 equates the two masses
    through their plug-in values ``p·q²``; this is what the identity misses at group size
    ``G``: 0 at ``p ∈ {0, 1/2, 1}``, at most ``(G−1)/G²/(6·sqrt(3)) < 0.097/G`` in absolute
    value (the same for m_S and m_F: both families are sign-balanced).

    Parameters
    ----------
    p : array_like
        Solve rates in [0, 1].
    G : int
        Group size ``>= 1``.

    Returns
    -------
    ndarray
        Same shape as ``p``.

    Examples
    --------
    >>> from rlvr_theory import multiturn
    >>> multiturn.power2_gap([0.25, 0.5, 0.75], 8)
    array([-0.01025391,  0.        ,  0.01025391])
    """
    pa = checks.array("p", p, low=0, high=1)
    G = _masses.check_group_size(G)
    return (G - 1) / G**2 * pa * (1.0 - pa) * (2.0 * pa - 1.0)
