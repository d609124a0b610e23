"""One-step identities of a softmax (categorical) policy ``p = softmax(z)`` over ``K`` actions.

Every function is vectorised over a batch of configurations: logits ``z`` have shape
``[..., K]`` (last axis = actions), sampled ``actions`` and their ``advantages`` have shape
``[..., N]`` (last axis = the ``N`` draws of one configuration), masks and ``counts`` have
shape ``[..., K]``; leading axes broadcast.  Probabilities are computed from
``log_softmax(z)``, so ``K = 128,000`` and probabilities far below ``1e-300`` are fine
(they underflow to an exact 0 where they are multiplied, never to NaN).

Updates (all satisfy ``Σ_i Δz_i = 0``):

* :func:`logit_update` — the sampled policy-gradient step on the logits,
  ``Δz_i = (η/N)·Σ_j A_j(δ_{i,a_j} − p_i)`` (Two-Stage Lemma 1, summed over a
  group of ``N`` draws as in its Theorem 1);
* :func:`behaviour_update` — the same without the ``1/N``,
  ``Δh_b = η[Σ_{j: a_j = b} A_j − C·π_b]``, ``C = Σ_j A_j`` (A-GRAE Theorem 1, Eq. 6,
  App. B.3 Eq. 29), with its cases (:func:`behaviour_cases`, Eq. 7-9 and App. B.5 Eq. 34-36);
* :func:`expected_logit_update` — ``E[Δz_v] = η·p_v(Â_v − Σ_u p_u Â_u)`` for a fixed advantage
  per action (Two-Stage Theorem 1); :func:`expected_group_logit_update` — the exact expectation for
  a group-relative advantage from the registry (beyond the paper, see below);
* :func:`surrogate_logit_update` — F-GRPO's TRPO-style surrogate step on the distinct sampled
  support, ``Δz_i = (η/N)·p_i(R_i − S_R)`` (F-GRPO Eq. 7).

Mass changes:

* :func:`probability_change`, :func:`subset_mass_change` — the first-order softmax expansion
  ``Δp_i = p_i(Δz_i − Σ_j p_jΔz_j)`` and the subset-mass identity
  ``ΔQ_S = Σ_{i∈S} p_iΔz_i − Q_S·Σ_j p_jΔz_j`` (F-GRPO App. C, Eq. 20-21);
* :func:`delta_q_pos` — ``ΔQ_pos`` of the total correct mass (F-GRPO Eq. 8);
  :func:`delta_q_unsampled_pos` — ``ΔQ_u,pos`` of the unsampled correct mass
  (F-GRPO Prop. 3.2, Eq. 13, App. D-E), both with their terms;
* :func:`conditional_sampled_mass` — ``E[P_pos | X = k]``, ``E[P_neg | X = k]`` and
  ``E[S_R | X = k]`` in closed form (F-GRPO App. B, Lemma B.1, Eq. 17-19), and
  :func:`conditional_sampled_mass_differences` — their steps from ``k`` to ``k + 1``, whose signs
  are the monotonicity of Lemma B.1 and Cor. B.2 (the motivation of the focal weight, Sec. 4);
* :func:`exact_probability_change`, :func:`exact_subset_mass_change` — the exact change
  ``softmax(z + Δz) − softmax(z)``, computed as ``p_i·expm1(Δz_i − Δlse)`` with
  ``Δlse = log Σ_j p_j e^{Δz_j}``, so that it keeps full relative precision for tiny steps
  (the naive difference of two probabilities loses it).  These are the references against
  which the tests check every first-order formula; :func:`log_partition_change` gives
  ``Δlse`` itself (used by :func:`rlvr_theory.entropy.exact_change`).

Argument checks use :mod:`rlvr_plumbing.checks`; :func:`check_like` (an array over the
actions of given logits) is shared with :mod:`rlvr_theory.entropy`.

Exact expectation for group-relative advantages.  Two-Stage Theorem 1 treats ``Â(v)`` as a fixed
function of the action.  With a group-relative advantage (GRPO, ...) ``A_j`` depends on the
whole group; the expectation of :func:`logit_update` is still of the Theorem-1 form, exactly,
with ``Â_v`` replaced by the *effective advantage* ``ā_v = E[A_1 | a_1 = v]`` (a short proof is
in :func:`effective_advantage`).  For binary rewards ``ā_v`` depends only on whether ``v`` is
correct and is read off the registry (:func:`rlvr_theory.masses.outcome_advantages`):
``ā_C = Q_pos⁻¹·m_S(Q_pos, G)`` and ``ā_W = −Q_neg⁻¹·m_F(Q_pos, G)`` with the exact finite-G
masses of :func:`rlvr_theory.masses.exact`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy import special

from rlvr_plumbing import checks

from . import masses as _masses
from .advantages import Advantage

__all__ = [
    "log_softmax",
    "softmax",
    "log_partition_change",
    "check_like",
    "sample_actions",
    "action_counts",
    "advantage_per_action",
    "logit_update",
    "behaviour_update",
    "behaviour_cases",
    "group_logit_update",
    "expected_logit_update",
    "effective_advantage",
    "expected_group_logit_update",
    "probability_change",
    "subset_mass_change",
    "exact_probability_change",
    "exact_subset_mass_change",
    "SampleMoments",
    "sample_moments",
    "surrogate_logit_update",
    "QPosChange",
    "delta_q_pos",
    "QUnsampledPosChange",
    "delta_q_unsampled_pos",
    "ConditionalSampledMass",
    "conditional_sampled_mass",
    "conditional_sampled_mass_differences",
]


# ----------------------------------------------------------------- checks
def _fits(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``arr`` if its last axis has length ``shape[-1]`` and it broadcasts with ``shape``."""
    if arr.shape[-1] != shape[-1]:
        raise ValueError(f"{name} must have a last axis of length {shape[-1]}, got shape {arr.shape}")
    try:
        np.broadcast_shapes(arr.shape, shape)
    except ValueError:
        raise ValueError(f"{name} must broadcast with shape {shape}, got shape {arr.shape}") from None
    return arr


def _check_z(z: Any) -> np.ndarray:
    """Logits: a finite array ``[..., K]`` with ``K >= 1``."""
    arr = checks.array("z", z, min_ndim=1)
    if arr.shape[-1] < 1:
        raise ValueError(f"z must be an array [..., K] of logits with K >= 1, got shape {arr.shape}")
    return arr


def _eta(eta: Any) -> np.ndarray:
    """eta as an array with a trailing axis of length 1 (it multiplies [..., K] arrays)."""
    return checks.array("eta", eta)[..., None]


def check_like(name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` as a finite float array ``[..., K]`` over the same actions as an array of ``shape``.

    The last axis must have length ``K = shape[-1]`` and the leading axes must broadcast
    with those of ``shape`` (e.g. an advantage per action for logits of shape ``shape``).
    Otherwise ``ValueError`` naming ``name``.  Used by :mod:`rlvr_theory.entropy` too.

    Examples
    --------
    >>> check_like("A", [1, 0, 2], (5, 3))
    array([1., 0., 2.])
    >>> check_like("A", [1, 0], (5, 3))
    Traceback (most recent call last):
    ...
    ValueError: A must have a last axis of length 3, got shape (2,)
    """
    return _fits(name, checks.array(name, x, min_ndim=1), shape)


def _check_mask(name: str, mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean (or 0/1) mask ``[..., K]`` over the actions."""
    arr = np.asarray(mask)
    if arr.dtype != bool:
        arr = checks.array(name, mask, min_ndim=1, low=0, high=1, integer=True).astype(bool)
    elif arr.ndim == 0:
        raise ValueError(f"{name} must be a boolean mask [..., K] over the actions, got a single value")
    return _fits(name, arr, shape)


def _check_counts(counts: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Draw counts: integers >= 0 ``[..., K]`` with at least one draw per configuration."""
    arr = _fits("counts", checks.array("counts", counts, min_ndim=1, low=0, integer=True), shape)
    if np.any(arr.sum(-1) < 1):
        raise ValueError("counts must hold at least one draw (N >= 1) in every configuration")
    return arr


def _check_actions(actions: Any, K: int) -> np.ndarray:
    """Sampled actions: integers in ``[0, K)`` with shape ``[..., N]``, ``N >= 1``."""
    arr = checks.array("actions", actions, min_ndim=1, low=0, high=K - 1, integer=True)
    if arr.shape[-1] < 1:
        raise ValueError(f"actions must have shape [..., N] with N >= 1 draws, got shape {arr.shape}")
    return arr.astype(np.int64)


def _check_rv(reward_values: Any) -> tuple[float, float]:
    """The pair ``(R_w, R_c)`` of finite rewards."""
    rv = checks.array("reward_values", reward_values, ndim=1)
    if rv.shape != (2,):
        raise ValueError(f"reward_values must be a pair (R_w, R_c) of finite numbers, got {reward_values!r}")
    return float(rv[0]), float(rv[1])


# ---------------------------------------------------------------- softmax
def log_softmax(z: Any) -> np.ndarray:
    """``log p = z − logsumexp(z)`` along the last axis (finite for every finite ``z``)."""
    return special.log_softmax(_check_z(z), axis=-1)


def softmax(z: Any) -> np.ndarray:
    """``p = softmax(z)`` along the last axis, as ``exp(log_softmax(z))``."""
    return np.exp(log_softmax(z))


def _delta_lse(p: np.ndarray, logp: np.ndarray, dz: np.ndarray) -> np.ndarray:
    """``log Σ_j p_j e^{Δz_j}`` with full relative precision for small steps: ``log1p(Σ p·expm1)``
    where every ``|Δz_j| <= 1``, ``logsumexp`` otherwise.  Keeps the trailing axis."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # rows left to logsumexp
        small = np.log1p(np.sum(p * np.expm1(dz), axis=-1, keepdims=True))
    large = special.logsumexp(logp + dz, axis=-1, keepdims=True)
    ok = np.max(np.abs(dz), axis=-1, keepdims=True) <= 1.0
    return np.where(ok & np.isfinite(small), small, large)


def log_partition_change(z: Any, dz: Any) -> np.ndarray:
    """``Δlse = logsumexp(z + Δz) − logsumexp(z) = log Σ_j p_j e^{Δz_j}`` along the last axis.

    The change of the log-partition function of ``softmax(z)`` under the logit step ``dz``
    (shape ``[..., K]``), computed as ``log1p(Σ_j p_j·expm1(Δz_j))`` where every
    ``|Δz_j| <= 1`` (full relative precision for tiny steps, where the difference of two
    ``logsumexp`` loses it) and by ``logsumexp`` otherwise.  Then
    ``softmax(z + Δz)_i = p_i·e^{Δz_i − Δlse}`` (:func:`exact_probability_change`).
    Returns ``[...]``.

    Examples
    --------
    >>> z = np.log([0.5, 0.25, 0.25])
    >>> float(log_partition_change(z, [1e-9, 0.0, 0.0]))   # = log(1 + 0.5·expm1(1e-9))
    5e-10
    >>> float(log_partition_change(z, [np.log(2), 0.0, 0.0]))   # log 1.5
    0.4054651081081644
    """
    logp = log_softmax(z)
    d = _dz_like(dz, logp.shape)
    return _delta_lse(np.exp(logp), logp, d)[..., 0]


# ---------------------------------------------------------------- sampling
def sample_actions(z: Any, N: int, rng: np.random.Generator) -> np.ndarray:
    """``N`` i.i.d. draws from ``softmax(z)`` per configuration: integer array ``[..., N]``.

    Draws are made as multinomial counts and returned in random order (the group-relative
    advantages of the registry are permutation-equivariant, the order matters only to the
    caller).  Randomness only from ``rng`` (a ``numpy.random.Generator``).
    """
    logp = log_softmax(z)
    N = checks.integer("N", N, low=1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0))")
    p = np.exp(logp)
    p /= p.sum(-1, keepdims=True)
    K = p.shape[-1]
    flat = p.reshape(-1, K)
    counts = rng.multinomial(N, flat)
    idx = np.repeat(np.tile(np.arange(K), flat.shape[0]), counts.ravel()).reshape(flat.shape[0], N)
    return rng.permuted(idx, axis=-1).reshape(p.shape[:-1] + (N,))


def action_counts(actions: Any, K: int) -> np.ndarray:
    """How often each of the ``K`` actions was drawn: ``counts[..., i] = Σ_j δ_{i,a_j}``."""
    K = checks.integer("K", K, low=1)
    a = _check_actions(actions, K)
    return advantage_per_action(a, np.ones(a.shape), K).astype(np.int64)


def advantage_per_action(actions: Any, advantages: Any, K: int) -> np.ndarray:
    """``S[..., i] = Σ_j A_j·δ_{i,a_j}``: the advantages of the draws summed onto their actions.

    ``actions`` (integers in ``[0, K)``) and ``advantages`` have shape ``[..., N]`` with
    broadcasting leading axes; the result has shape ``[..., K]``.  One ``np.bincount`` over
    the flattened batch (no loop over samples or actions).
    """
    K = checks.integer("K", K, low=1)
    a = _check_actions(actions, K)
    A = checks.array("advantages", advantages, min_ndim=1)
    try:
        a, A = np.broadcast_arrays(a, A)
    except ValueError:
        raise ValueError(f"advantages must broadcast with actions {a.shape}, got shape {A.shape}") from None
    batch, N = a.shape[:-1], a.shape[-1]
    B = int(np.prod(batch))
    flat = (np.arange(B)[:, None] * K + a.reshape(B, N)).ravel()
    return np.bincount(flat, weights=A.reshape(-1), minlength=B * K).reshape(batch + (K,))


# ----------------------------------------------------------------- updates
def _sampled_update(z: Any, actions: Any, advantages: Any, eta: Any, per_draw: bool) -> np.ndarray:
    logp = log_softmax(z)
    e = _eta(eta)
    S = advantage_per_action(actions, advantages, logp.shape[-1])
    A = np.broadcast_arrays(np.asarray(actions), np.asarray(advantages, dtype=float))[1]
    C = A.sum(-1, keepdims=True)
    scale = e / A.shape[-1] if per_draw else e
    return scale * (S - C * np.exp(logp))


def logit_update(z: Any, actions: Any, advantages: Any, eta: Any) -> np.ndarray:
    """One sampled policy-gradient step on the logits of a softmax policy.

    ``Δz_i = (η/N)·Σ_{j=1}^{N} A_j·(δ_{i,a_j} − p_i)``: each draw ``a_j`` with advantage
    ``A_j`` raises its own logit by ``η A_j(1 − p_{a_j})/N`` and moves every other logit by
    ``−η A_j p_i/N`` (Two-Stage Lemma 1, App. B.2; averaged over the group as in
    its Theorem 1).  ``Σ_i Δz_i = 0``.

    Parameters
    ----------
    z : array [..., K]
        Logits.
    actions : int array [..., N]
        Sampled actions, leading axes broadcasting with those of ``z``.
    advantages : array [..., N]
        Advantage of each draw (e.g. ``rlvr_theory.advantages.get("grpo")(rewards)``).
    eta : float or array over the batch axes
        Learning rate.

    Returns
    -------
    ndarray [..., K]
        ``Δz``.  :func:`behaviour_update` is ``N`` times this.

    Examples
    --------
    >>> from rlvr_theory import categorical
    >>> z = np.zeros(4)  # uniform over 4 actions
    >>> categorical.logit_update(z, [0, 1, 2], [1.0, 0.5, -1.5], eta=0.1)  # sums to 0
    array([ 0.03333333,  0.01666667, -0.05      ,  0.        ])
    """
    return _sampled_update(z, actions, advantages, eta, per_draw=True)


def behaviour_update(z: Any, actions: Any, advantages: Any, eta: Any) -> np.ndarray:
    """The logit update in behaviour space, ``Δh_b = η·[1(b ∈ G)·A_b − C·π_b]`` (A-GRAE
    Theorem 1, Eq. 6; proof App. B.3, Eq. 29), with ``C = Σ_{j∈G} A_j`` the group's advantage sum.

    The objective is ``J(h) = Σ_{j∈G} A_j log π_{a_j}(h)`` (A-GRAE Eq. 24); a behaviour drawn more
    than once contributes the sum of its draws' advantages (the Kronecker sum of Eq. 26-27,
    which Eq. 6 writes as ``1(b ∈ G)·A_b``).  Equal to ``N·`` :func:`logit_update`.  The cases
    of :func:`behaviour_cases`: for ``C = 0`` (GRPO) a sampled positive moves by ``ηA_pos``, a
    sampled negative by ``ηA_neg`` and an unsampled behaviour not at all (Eq. 7-9); for
    ``C ≠ 0`` every behaviour also moves by ``−ηCπ_b`` (App. B.5, Eq. 34-36).

    Shapes and arguments as in :func:`logit_update`.
    """
    return _sampled_update(z, actions, advantages, eta, per_draw=False)


def behaviour_cases(actions: Any, correct: Any, K: int | None = None) -> np.ndarray:
    """The case of each behaviour in A-GRAE Theorem 1 (Eq. 7-9, 34-36).

    Returns a string array ``[..., K]`` with ``"sampled_positive"`` (drawn and correct,
    A-GRAE's ``G_pos``), ``"sampled_negative"`` (drawn and incorrect, ``G_neg``) and
    ``"unsampled"`` (``U``).  ``correct`` is a boolean mask ``[..., K]``; ``K`` defaults to
    its last axis.
    """
    mask = np.asarray(correct)
    K = mask.shape[-1] if K is None and mask.ndim else K
    if K is None:
        raise ValueError("correct must be a boolean mask [..., K] over the actions")
    K = checks.integer("K", K, low=1)
    mask = _check_mask("correct", mask, (K,))
    sampled = action_counts(actions, K) > 0
    return np.where(sampled, np.where(mask, "sampled_positive", "sampled_negative"), "unsampled")


def _rewards_of(actions: np.ndarray, correct: np.ndarray, reward_values: tuple[float, float]) -> np.ndarray:
    """Reward of each draw, R_c if its action is correct else R_w (broadcasting the batch axes)."""
    batch = np.broadcast_shapes(actions.shape[:-1], correct.shape[:-1])
    a = np.broadcast_to(actions, batch + actions.shape[-1:])
    c = np.broadcast_to(correct, batch + correct.shape[-1:])
    hit = np.take_along_axis(c, a, axis=-1)
    rw, rc = reward_values
    return np.where(hit, rc, rw)


def group_logit_update(z: Any, actions: Any, correct: Any, adv: Advantage | str, eta: Any) -> np.ndarray:
    """:func:`logit_update` with binary rewards and a registry advantage.

    Draw ``j`` gets reward ``R_c`` if ``correct[a_j]`` else ``R_w`` (``adv.reward_values``),
    the group (last axis of ``actions``) gets advantages ``adv(rewards)``, and
    ``Δz = (η/N)·Σ_j A_j(e_{a_j} − p)`` (Two-Stage Lemma 1 with the registry's advantage).
    Group-level families only: a batch-level one (A-GRAE without ``omega``) would read
    the batch axes of ``actions`` as one batch.
    """
    adv = _group_adv(adv)
    zz = _check_z(z)
    K = zz.shape[-1]
    a = _check_actions(actions, K)
    c = _check_mask("correct", correct, zz.shape)
    rewards = _rewards_of(a, c, adv.reward_values)
    return logit_update(zz, a, adv(rewards), eta)


def _group_adv(adv: Advantage | str) -> Advantage:
    adv = _masses.as_advantage(adv)
    if adv.batch_level:
        raise ValueError(f"adv must be a group-level advantage; {adv!r} is batch-level (batch-level advantages depend on the other prompts of the batch)")
    return adv


def expected_logit_update(z: Any, action_advantage: Any, eta: Any) -> np.ndarray:
    """Expected logit update for a fixed advantage per action (Two-Stage Theorem 1).

    ``E[Δz_v] = η·p_v[(1 − p_v)Â_v − Σ_{u≠v} p_u Â_u] = η·p_v(Â_v − Σ_u p_u Â_u)``:
    the expectation of :func:`logit_update` when the ``N`` draws are i.i.d. from ``p`` and
    draw ``j`` has advantage ``Â(a_j)``; it does not depend on ``N`` and equals the exact
    (vanilla) gradient ``η·∂/∂z E_p[Â]``.  ``action_advantage`` has shape ``[..., K]``.
    For group-relative advantages use :func:`expected_group_logit_update`.
    """
    logp = log_softmax(z)
    A = check_like("action_advantage", action_advantage, logp.shape)
    p = np.exp(logp)
    mean = np.sum(p * A, axis=-1, keepdims=True)
    return _eta(eta) * p * (A - mean)


def _binom_pmf(q_pos: np.ndarray, q_neg: np.ndarray, n: int) -> np.ndarray:
    """Binom(x; n, Q_pos) for x = 0..n, shape q.shape + (n+1,), from Q_pos and Q_neg = 1 − Q_pos
    given separately (Q_neg keeps its relative precision when Q_pos is near 1)."""
    x = np.arange(n + 1)
    logc = special.gammaln(n + 1) - special.gammaln(x + 1) - special.gammaln(n - x + 1)
    with np.errstate(divide="ignore"):
        return np.exp(logc + special.xlogy(x, q_pos[..., None]) + special.xlogy(n - x, q_neg[..., None]))


def effective_advantage(z: Any, correct: Any, adv: Advantage | str, G: int) -> np.ndarray:
    """Effective advantage per action ``ā_v = E[A_1 | a_1 = v]`` of a group-relative advantage.

    For a group of ``G`` i.i.d. draws from ``p = softmax(z)`` with binary rewards (correct
    actions ``correct``) and a group-level registry advantage ``adv``: given ``a_1 = v``, the
    other ``G − 1`` draws are correct independently with probability ``Q_pos = Σ_{i∈P} p_i``,
    so with ``X' ~ Binom(G − 1, Q_pos)``

        ā_v = E[A_success(1 + X')]   (v correct),     ā_v = E[A_failure(X')]   (v incorrect),

    with ``A_success(x)``, ``A_failure(x)`` the advantages in a group with ``x`` successes
    (:func:`rlvr_theory.masses.outcome_advantages`).  Then ``E[(1/G)Σ_j A_j δ_{v,a_j}] = p_v ā_v``
    and ``E[(1/G)Σ_j A_j] = Σ_u p_u ā_u = m_S − m_F`` (exact masses at ``Q_pos``), so the expected
    :func:`logit_update` is Two-Stage Theorem 1 with ``Â = ā`` — exactly, for every ``G``.
    Returns an array ``[..., K]`` (beyond the papers; derivation ours).
    """
    adv = _group_adv(adv)
    logp = log_softmax(z)
    c = _check_mask("correct", correct, logp.shape)
    G = _masses.check_group_size(G, adv)
    table = _masses.outcome_advantages(adv, G)
    a_succ = table.A_success.to_numpy()[1:]   # x = 1..G
    a_fail = table.A_failure.to_numpy()[:-1]  # x = 0..G-1
    p = np.exp(logp)
    q_pos = np.sum(np.where(c, p, 0.0), axis=-1)
    q_neg = np.sum(np.where(c, 0.0, p), axis=-1)
    tot = q_pos + q_neg
    w = _binom_pmf(q_pos / tot, q_neg / tot, G - 1)
    return np.where(c, (w @ a_succ)[..., None], (w @ a_fail)[..., None])


def expected_group_logit_update(z: Any, correct: Any, adv: Advantage | str, G: int, eta: Any) -> np.ndarray:
    """Exact expectation of :func:`group_logit_update` over groups of ``G`` i.i.d. draws.

    ``E[Δz_v] = η·p_v(ā_v − Σ_u p_u ā_u)`` with the effective advantage ``ā`` of
    :func:`effective_advantage`: Two-Stage Theorem 1, made exact for group-relative advantages.
    """
    return expected_logit_update(z, effective_advantage(z, correct, adv, G), eta)


# ----------------------------------------------------------- mass changes
def _dz_like(dz: Any, shape: tuple[int, ...]) -> np.ndarray:
    return check_like("dz", dz, shape)


def probability_change(z: Any, dz: Any) -> np.ndarray:
    """First-order probability change ``Δp_i = p_i(Δz_i − Σ_j p_jΔz_j)`` (F-GRPO App. C,
    Eq. 20, from the softmax Jacobian ``∂p_i/∂z_j = p_i(δ_ij − p_j)``)."""
    logp = log_softmax(z)
    d = _dz_like(dz, logp.shape)
    p = np.exp(logp)
    return p * (d - np.sum(p * d, axis=-1, keepdims=True))


def subset_mass_change(z: Any, dz: Any, subset: Any) -> np.ndarray:
    """Subset-mass identity ``ΔQ_S = Σ_{i∈S} p_iΔz_i − Q_S·Σ_j p_jΔz_j`` (F-GRPO App. C, Eq. 21).

    First order in ``Δz``; ``subset`` is a boolean mask ``[..., K]``.  Returns ``[...]``.
    """
    logp = log_softmax(z)
    d = _dz_like(dz, logp.shape)
    s = _check_mask("subset", subset, logp.shape)
    p = np.exp(logp)
    ps = np.where(s, p, 0.0)
    return np.sum(ps * d, axis=-1) - ps.sum(-1) * np.sum(p * d, axis=-1)


def exact_probability_change(z: Any, dz: Any) -> np.ndarray:
    """Exact ``softmax(z + Δz) − softmax(z)``, as ``p_i·expm1(Δz_i − Δlse)`` with
    ``Δlse = log Σ_j p_j e^{Δz_j}``: accurate to a few ulps relative to the change itself
    even for tiny steps and tiny probabilities (the reference for every first-order formula)."""
    logp = log_softmax(z)
    d = _dz_like(dz, logp.shape)
    p = np.exp(logp)
    return p * np.expm1(d - _delta_lse(p, logp, d))


def exact_subset_mass_change(z: Any, dz: Any, subset: Any) -> np.ndarray:
    """Exact ``Q_S(z + Δz) − Q_S(z)`` for a boolean mask ``subset`` (see
    :func:`exact_probability_change`).  Returns ``[...]``."""
    zz = _check_z(z)
    s = _check_mask("subset", subset, zz.shape)
    return np.sum(np.where(s, exact_probability_change(zz, dz), 0.0), axis=-1)


# --------------------------------------------------- F-GRPO Sec. 2.3
class SampleMoments(NamedTuple):
    """Masses and second moments of one batch of ``N`` draws (F-GRPO Sec. 2.3, Eq. 6).

    ``Q_pos``, ``Q_neg``: total correct / incorrect mass; ``P_pos``, ``P_neg``: mass of the
    distinct sampled correct (``A``) / incorrect (``B``) actions; ``A2 = Σ_{i∈A} p_i²``,
    ``B2 = Σ_{i∈B} p_i²``; ``U_pos2``, ``U_neg2``: ``Σ p_i²`` over unsampled correct /
    incorrect actions; ``Q_u_pos``: unsampled correct mass (F-GRPO Eq. 12); ``S_R = R_c P_pos +
    R_w P_neg`` the batch baseline; ``N`` the number of draws.  Arrays over the batch axes.
    """

    Q_pos: np.ndarray
    Q_neg: np.ndarray
    P_pos: np.ndarray
    P_neg: np.ndarray
    A2: np.ndarray
    B2: np.ndarray
    U_pos2: np.ndarray
    U_neg2: np.ndarray
    Q_u_pos: np.ndarray
    S_R: np.ndarray
    N: np.ndarray


def sample_moments(z: Any, correct: Any, counts: Any, reward_values: Any = (0.0, 1.0)) -> SampleMoments:
    """The quantities of F-GRPO Sec. 2.3 for logits ``z``, correct mask and draw counts.

    ``counts[..., i]`` is how often action ``i`` was drawn (:func:`action_counts`); an action
    is *sampled* when its count is positive.  ``reward_values = (R_w, R_c)`` (F-GRPO Eq. 1).
    """
    logp = log_softmax(z)
    c = _check_mask("correct", correct, logp.shape)
    n = _check_counts(counts, logp.shape)
    rw, rc = _check_rv(reward_values)
    p = np.exp(logp)
    p2 = np.exp(2.0 * logp)
    s = n > 0

    def tot(x, m):
        return np.sum(np.where(m, x, 0.0), axis=-1)

    P_pos, P_neg = tot(p, s & c), tot(p, s & ~c)
    return SampleMoments(
        Q_pos=tot(p, c), Q_neg=tot(p, ~c), P_pos=P_pos, P_neg=P_neg,
        A2=tot(p2, s & c), B2=tot(p2, s & ~c), U_pos2=tot(p2, ~s & c), U_neg2=tot(p2, ~s & ~c),
        Q_u_pos=tot(p, ~s & c), S_R=rc * P_pos + rw * P_neg, N=n.sum(-1))


def surrogate_logit_update(z: Any, correct: Any, counts: Any, eta: Any,
                           reward_values: Any = (0.0, 1.0)) -> np.ndarray:
    """F-GRPO's one-step logit update of the TRPO-style linear surrogate (F-GRPO Eq. 7).

    ``Δz_i = (η/N)·p_i(R_i − S_R)`` with ``R_i = R_c`` for sampled correct, ``R_w`` for
    sampled incorrect and ``0`` for unsampled actions, and ``S_R = Σ_i p_i R_i =
    R_c P_pos + R_w P_neg``.  It is the gradient of ``(1/N)·Σ_{i sampled} p_i R_i`` (each
    distinct sampled action counted once).  Unsampled actions move by ``−(η/N)S_R p_i``.
    ``Σ_i Δz_i = 0``.
    """
    logp = log_softmax(z)
    c = _check_mask("correct", correct, logp.shape)
    n = _check_counts(counts, logp.shape)
    rw, rc = _check_rv(reward_values)
    e = _eta(eta)
    p = np.exp(logp)
    R = np.where(n > 0, np.where(c, rc, rw), 0.0)
    S_R = np.sum(p * R, axis=-1, keepdims=True)
    return e / n.sum(-1, keepdims=True) * p * (R - S_R)


class QPosChange(NamedTuple):
    """``ΔQ_pos`` of F-GRPO Eq. 8 and its three terms (each includes the factor ``η/N``)."""

    total: np.ndarray
    sampled_correct: np.ndarray    # (η/N)(R_c − S_R) Q_neg A2  >= 0
    sampled_incorrect: np.ndarray  # (η/N)(S_R − R_w) Q_pos B2  >= 0
    unsampled_coupling: np.ndarray  # (η/N) S_R (Q_pos U_neg2 − Q_neg U_pos2)


def delta_q_pos(z: Any, correct: Any, counts: Any, eta: Any, reward_values: Any = (0.0, 1.0)) -> QPosChange:
    """First-order change of the total correct mass under the surrogate step (F-GRPO Eq. 8).

    ``ΔQ_pos = (η/N)[(R_c − S_R)Q_neg A2 + (S_R − R_w)Q_pos B2 + S_R(Q_pos U_neg2 − Q_neg U_pos2)]``

    (Hu et al. 2025 via F-GRPO Sec. 2.3; it is the subset-mass identity, Eq. 21, with
    ``S = P`` applied to :func:`surrogate_logit_update`).  Returns :class:`QPosChange`
    over the batch axes.

    Examples
    --------
    >>> from rlvr_theory import categorical
    >>> z = np.log([0.4, 0.1, 0.3, 0.2])
    >>> correct = [True, True, False, False]
    >>> counts = [2, 0, 1, 0]  # action 0 drawn twice, action 2 once
    >>> d = categorical.delta_q_pos(z, correct, counts, eta=0.1)
    >>> round(float(d.total), 6), round(float(d.unsampled_coupling), 6)
    (0.0024, 0.0002)
    """
    m = sample_moments(z, correct, counts, reward_values)
    rw, rc = _check_rv(reward_values)
    k = checks.array("eta", eta) / m.N
    a = k * (rc - m.S_R) * m.Q_neg * m.A2
    b = k * (m.S_R - rw) * m.Q_pos * m.B2
    u = k * m.S_R * (m.Q_pos * m.U_neg2 - m.Q_neg * m.U_pos2)
    return QPosChange(a + b + u, a, b, u)


class QUnsampledPosChange(NamedTuple):
    """``ΔQ_u,pos`` of F-GRPO Prop. 3.2 (Eq. 13) and its two terms (each includes ``η/N``)."""

    total: np.ndarray
    direct_drift: np.ndarray           # −(η/N) S_R U_pos2
    normalization_coupling: np.ndarray  # −(η/N) Q_u,pos[(R_c − S_R)A2 + (R_w − S_R)B2 − S_R U2]


def delta_q_unsampled_pos(z: Any, correct: Any, counts: Any, eta: Any,
                          reward_values: Any = (0.0, 1.0)) -> QUnsampledPosChange:
    """First-order change of the unsampled correct mass ``Q_u,pos`` (F-GRPO Prop. 3.2, Eq. 13).

    ``ΔQ_u,pos = (η/N)[−S_R U_pos2 − Q_u,pos((R_c − S_R)A2 + (R_w − S_R)B2 − S_R U2)]``,
    ``U2 = U_pos2 + U_neg2`` (proof F-GRPO App. D: Eq. 21 with ``S = U ∩ P``; the set of
    unsampled correct actions is held fixed, it is the one of this batch).  Returns
    :class:`QUnsampledPosChange` over the batch axes.
    """
    m = sample_moments(z, correct, counts, reward_values)
    rw, rc = _check_rv(reward_values)
    k = checks.array("eta", eta) / m.N
    direct = -k * m.S_R * m.U_pos2
    coupling = -k * m.Q_u_pos * ((rc - m.S_R) * m.A2 + (rw - m.S_R) * m.B2 - m.S_R * (m.U_pos2 + m.U_neg2))
    return QUnsampledPosChange(direct + coupling, direct, coupling)


# --------------------------------------------------- F-GRPO App. B
class ConditionalSampledMass(NamedTuple):
    """Conditional expectations of the distinct sampled masses given ``X = k`` correct draws
    (F-GRPO App. B), or their steps from ``k`` to ``k + 1``; arrays of one shape.

    ``k``: the number of correct draws; ``P_pos``: ``E[P_pos | X = k]`` (Eq. 18); ``P_neg``:
    ``E[P_neg | X = k]`` (Eq. 19); ``S_R``: ``E[S_R | X = k] = R_c·P_pos + R_w·P_neg`` (Eq. 17).
    """

    k: np.ndarray
    P_pos: np.ndarray
    P_neg: np.ndarray
    S_R: np.ndarray


def _conditional_parts(z: Any, correct: Any, N: Any, reward_values: Any
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, float, float]:
    """``(π, q, c, N, R_w, R_c)``: the probabilities, each action's probability within its own
    class (``q_pos = π/μ_pos`` on correct actions, ``q_neg = π/(1 − μ_pos)`` on incorrect ones)
    and the checked arguments."""
    logp = log_softmax(z)
    c = _check_mask("correct", correct, logp.shape)
    logp, c = np.broadcast_arrays(logp, c)
    N = checks.integer("N", N, low=1)
    rw, rc = _check_rv(reward_values)
    with np.errstate(divide="ignore", invalid="ignore"):   # an empty class: log μ = −inf, never used
        log_mu_pos = special.logsumexp(np.where(c, logp, -np.inf), axis=-1, keepdims=True)
        log_mu_neg = special.logsumexp(np.where(c, -np.inf, logp), axis=-1, keepdims=True)
        q = np.where(c, np.exp(logp - log_mu_pos), np.exp(logp - log_mu_neg))
    q = np.where(np.isfinite(q), np.minimum(q, 1.0), 0.0)
    return np.exp(logp), q, c, N, rw, rc


def conditional_sampled_mass(z: Any, correct: Any, N: int, k: Any = None,
                             reward_values: Any = (0.0, 1.0)) -> ConditionalSampledMass:
    """Expected distinct sampled correct / incorrect mass and baseline given ``X = k`` correct draws.

    For ``N`` i.i.d. draws from ``π = softmax(z)``, ``X`` of them correct, ``A`` / ``B`` the sets
    of *distinct* sampled correct / incorrect actions, ``P_pos = Σ_{o∈A} π(o)``,
    ``P_neg = Σ_{o∈B} π(o)`` and the categorical baseline ``S_R = R_c·P_pos + R_w·P_neg``
    (F-GRPO App. B Eq. 17; Sec. 2.3), F-GRPO Lemma B.1 gives, for ``k = 0, …, N``,

    .. math::

        E[P_{pos} | X = k] = \\sum_{o ∈ C} π(o)\\,(1 − (1 − q_{pos}(o))^k),  \\qquad
        E[P_{neg} | X = k] = \\sum_{o ∉ C} π(o)\\,(1 − (1 − q_{neg}(o))^{N−k}),

    with ``q_pos(o) = π(o)/μ_pos`` and ``q_neg(o) = π(o)/(1 − μ_pos)`` the distributions
    within each class and ``μ_pos = Σ_{o∈C} π(o)`` (Eq. 18-19): given ``X = k`` the ``k``
    correct draws are i.i.d. from ``q_pos``, and ``o`` is sampled unless all ``k`` miss it.

    Parameters
    ----------
    z : array_like, shape (..., K)
        Logits of the policy (finite); leading axes are a batch of configurations.
    correct : array_like of bool, shape (..., K)
        Which actions are correct (the set ``C``); broadcasts with ``z``.
    N : int
        Draws per group, ``N >= 1``.
    k : array_like of int, optional
        Numbers of correct draws, integers in ``[0, N]``.  ``None`` (default): every
        ``k = 0, …, N`` on a new trailing axis.  Otherwise ``k`` broadcasts with the batch axes
        ``z.shape[:-1]`` (e.g. one ``k`` per configuration).
    reward_values : (float, float), optional
        ``(R_w, R_c)``, the rewards of an incorrect and a correct draw (F-GRPO Eq. 1);
        default ``(0, 1)``.

    Returns
    -------
    ConditionalSampledMass
        ``(k, P_pos, P_neg, S_R)``, arrays of shape ``z.shape[:-1] + (N + 1,)`` when ``k`` is
        ``None``, else of the broadcast shape of ``z.shape[:-1]`` and ``k``.

    Notes
    -----
    ``E[P_pos | X = k]`` is non-decreasing and ``E[P_neg | X = k]`` non-increasing in ``k``
    (Lemma B.1), so ``E[S_R | X = k]`` is non-decreasing whenever ``R_w <= 0 <= R_c``
    (Cor. B.2): a group with more correct draws has, in expectation, a larger baseline
    ``S_R``, the regime ``S_R > 0`` in which unsampled correct mass drifts down (Prop. 3.2).
    This is why the observable ``μ̂_pos = X/N`` serves as the proxy that the focal weight
    ``(1 − μ̂_pos)^γ`` (Eq. 15) down-weights.  Cor. B.2 states the hypotheses ``R_c > R_w``
    and ``R_w <= 0``; its proof uses ``R_c > 0``, and without it the claim fails (with one
    correct and one incorrect action and ``(R_w, R_c) = (−1, −0.5)``, ``E[S_R | X = 1] <
    E[S_R | X = 0]``): :func:`conditional_sampled_mass_differences` gives the signs exactly.

    ``(1 − q)^k`` is evaluated as ``exp(k·log1p(−q))`` and ``1 − (1 − q)^k`` as
    ``−expm1(k·log1p(−q))``, so rare actions (``q`` far below machine epsilon, ``K = 128,000``)
    keep full relative precision (``≈ k·q``).  Configurations in which ``X = k`` is impossible
    (no correct action and ``k > 0``, no incorrect one and ``k < N``) get the value of the
    formula (an empty sum is 0).  Vectorised over the batch, ``k`` and the actions (memory
    ``O(batch·len(k)·K)``).

    References
    ----------
    F-GRPO (2026), App. B: Eq. 17, Lemma B.1 (Eq. 18-19), Corollary B.2; Sec. 4 (focal weight).

    Examples
    --------
    One correct action of probability 0.2 and two incorrect ones (0.5, 0.3), ``N = 3``:

    >>> from rlvr_theory import categorical
    >>> z = np.log([0.2, 0.5, 0.3])
    >>> m = categorical.conditional_sampled_mass(z, [True, False, False], N=3, reward_values=(-1, 1))
    >>> m.k
    array([0, 1, 2, 3])
    >>> m.P_pos.round(6)          # the single correct action is sampled as soon as X >= 1
    array([0. , 0.2, 0.2, 0.2])
    >>> m.P_neg.round(6)          # q_neg = (0.625, 0.375): 0.5(1 − 0.375^(3−k)) + 0.3(1 − 0.625^(3−k))
    array([0.700391, 0.6125  , 0.425   , 0.      ])
    >>> m.S_R.round(6)            # non-decreasing: R_w = −1 <= 0 <= R_c = 1
    array([-0.700391, -0.4125  , -0.225   ,  0.2     ])
    >>> categorical.conditional_sampled_mass(z, [True, False, False], N=3, k=[0, 2]).P_neg.round(6)
    array([0.700391, 0.425   ])
    """
    p, q, c, N, rw, rc = _conditional_parts(z, correct, N, reward_values)
    batch = p.shape[:-1]
    if k is None:
        kk = np.broadcast_to(np.arange(N + 1), batch + (N + 1,))
        pp, qq, cc = p[..., None, :], q[..., None, :], c[..., None, :]
    else:
        kk = checks.array("k", k, low=0, high=N, integer=True).astype(np.int64)
        try:
            shape = np.broadcast_shapes(batch, kk.shape)
        except ValueError:
            raise ValueError(f"k must broadcast with the batch shape {batch} of z, got shape {kk.shape}") from None
        kk = np.broadcast_to(kk, shape)
        pp, qq, cc = (np.broadcast_to(x, shape + (x.shape[-1],)) for x in (p, q, c))
    draws = np.where(cc, kk[..., None], N - kk[..., None])          # k correct draws, N − k incorrect
    hit = -np.expm1(special.xlog1py(draws, -qq))                     # Pr(o sampled | X = k)
    P_pos = np.sum(np.where(cc, pp * hit, 0.0), axis=-1)
    P_neg = np.sum(np.where(cc, 0.0, pp * hit), axis=-1)
    return ConditionalSampledMass(np.array(kk), P_pos, P_neg, rc * P_pos + rw * P_neg)


def conditional_sampled_mass_differences(z: Any, correct: Any, N: int,
                                         reward_values: Any = (0.0, 1.0)) -> ConditionalSampledMass:
    """Steps ``E[· | X = k + 1] − E[· | X = k]`` of :func:`conditional_sampled_mass`, ``k = 0, …, N − 1``,
    in closed form (F-GRPO App. B, proofs of Lemma B.1 and Cor. B.2).

    .. math::

        ΔP_{pos}(k) = \\sum_{o ∈ C} π(o)\\,q_{pos}(o)\\,(1 − q_{pos}(o))^k \\ge 0,  \\qquad
        ΔP_{neg}(k) = −\\sum_{o ∉ C} π(o)\\,q_{neg}(o)\\,(1 − q_{neg}(o))^{N−k−1} \\le 0,

    and ``ΔS_R(k) = R_c·ΔP_pos(k) + R_w·ΔP_neg(k)``, which is ``>= 0`` for every ``k`` when
    ``R_w <= 0 <= R_c`` (Cor. B.2).  Each step is a sum of terms of one sign, computed without
    the cancellation of differencing :func:`conditional_sampled_mass`, so its sign is exact.

    Parameters
    ----------
    z, correct, N, reward_values
        As in :func:`conditional_sampled_mass`.

    Returns
    -------
    ConditionalSampledMass
        ``(k, P_pos, P_neg, S_R)`` holding ``k = 0, …, N − 1`` and the three steps, arrays of
        shape ``z.shape[:-1] + (N,)``.

    References
    ----------
    F-GRPO (2026), App. B, Lemma B.1 (the discrete difference in its proof) and Corollary B.2.

    Examples
    --------
    With ``R_c < 0`` the baseline can fall although ``R_c > R_w`` and ``R_w <= 0``, the
    hypotheses Cor. B.2 states (its proof uses ``R_c > 0``):

    >>> from rlvr_theory import categorical
    >>> z = np.log([0.4, 0.6])                    # one correct, one incorrect action
    >>> d = categorical.conditional_sampled_mass_differences(z, [True, False], N=2, reward_values=(-1, -0.5))
    >>> d.P_pos, d.P_neg
    (array([0.4, 0. ]), array([-0. , -0.6]))
    >>> d.S_R                                     # −0.5·0.4 < 0 at k = 0
    array([-0.2,  0.6])
    """
    p, q, c, N, rw, rc = _conditional_parts(z, correct, N, reward_values)
    k = np.arange(N)
    pq = (p * q)[..., None, :]
    cc = c[..., None, :]
    left = np.where(cc, k[:, None], N - k[:, None] - 1)              # draws left that could miss o
    term = pq * np.exp(special.xlog1py(left, -q[..., None, :]))
    d_pos = np.sum(np.where(cc, term, 0.0), axis=-1)
    d_neg = -np.sum(np.where(cc, 0.0, term), axis=-1)
    kk = np.broadcast_to(k, d_pos.shape)
    return ConditionalSampledMass(np.array(kk), d_pos, d_neg, rc * d_pos + rw * d_neg)
