"""Registry of advantage functions ("policy weights") used in RLVR.

Every entry maps the binary rewards of a group of ``G`` rollouts of one prompt to one
weight per rollout.  Rewards are arrays ``[..., G]``: the last axis is the group, the
leading axes are the prompts of a batch.  All families are *group-level* (each group is
computed on its own) except those flagged ``batch_level``: A-GRAE with ``omega=None``
reads the batch success rate, ``reinforce_pp`` the standard deviation of the centred
rewards, ``grpo_batch`` that of the rewards, ``reinforce_pp_baseline`` the length-weighted
mean and variance of the centred rewards, and ``gpg`` the fraction of nonzero rewards, over
the whole array.

The conventions of the peer trainers are registry calls (verl 0.9, TRL 1.16, SkyRL 0.4):
verl ``grpo`` is ``grpo`` with ``ddof=1, eps=1e-6``; TRL ``scale_rewards="group"`` is
``grpo`` with ``ddof=1, eps=1e-4``, ``"batch"`` is ``grpo_batch``, ``"none"`` is
``dr_grpo``; verl ``grpo_passk``, ``opo``, ``reinforce_plus_plus_baseline`` and ``gpg`` are
the families of those names (``reinforce_pp_baseline`` for the third); verl ``rloo`` is
``rloo``; SkyRL ``maxrl`` is ``maxrl`` with ``eps=1e-6`` (rewards (0, 1)).

Rewards are binary, ``r_i = R_w + (R_c - R_w) * 1[rollout i is correct]``
(F-GRPO Eq. 1), with ``reward_values=(R_w, R_c)`` and ``R_c > R_w``; the default is
``(0, 1)``.  Each family is implemented from its *definition* on the reward vector
(group mean, standard deviation, quantile, leave-one-out maximum, softmax, ...), never
from its closed form, so that the closed forms of :meth:`Advantage.closed_form`
(sympy, in the solve rate ``p``) are an independent check of the implementation.

Notation used in the docstrings: ``X`` successes in the group, ``p̂ = X/G``,
``q̂ = 1 - p̂``, ``Δ = R_c - R_w``, ``r̄`` the group mean reward.  A group with no
signal (all rewards equal) gets zero advantages in every family that subtracts a group
baseline; ``reinforce`` and ``w_reinforce`` have no baseline and keep their weights.

How the closed form relates to the implementation is recorded in ``kind``:

``"exact"``
    the closed form evaluated at ``p = p̂`` equals the masses of every group with ``X``
    successes (the paper's derivation is exact given ``p̂``);
``"expectation"``
    the closed form equals the expectation of the masses over ``X ~ Binom(G, p)``
    (pass@k of Tang et al.: the weight fires only when exactly one rollout succeeds;
    ``reinforce_pp`` in a large batch of prompts at solve rate ``p``);
``"asymptotic"``
    the closed form is the ``G → ∞`` limit; the exact finite-``G`` expectation
    converges to it at rate ``O(1/G)``.

Sources are named by the short names of ``docs/papers.md`` (FADE, Two-Stage, F-GRPO,
A-GRAE, Over-Sharpening) or by author and year.

Examples
--------
>>> from rlvr_theory import advantages
>>> adv = advantages.get("asym_grpo", delta=0.5)
>>> adv(np.array([[1, 0, 0, 1, 0, 0, 0, 0]]))
array([[ 0.75, -0.5 , -0.5 ,  0.75, -0.5 , -0.5 , -0.5 , -0.5 ]])
>>> adv.closed_form()
(p*(1 - p), 2*p*(1 - p))
>>> "reinforce_pp" in advantages.names()
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np

from rlvr_plumbing import checks
from rlvr_plumbing.registry import Registry, did_you_mean

__all__ = [
    "Advantage",
    "get",
    "as_advantage",
    "names",
    "register",
    "unregister",
    "registered",
    "registry",
    "check_reward_values",
    "DENSE_MAX_G",
    "p",
    "G",
]

class _LazySympy:
    """Stands for the ``sympy`` module until first used (importing sympy takes ~0.6 s: a command
    that never asks for a closed form does not pay it); :func:`_sympy` then replaces it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_sympy(), name)


sp: Any = _LazySympy()


def _sympy() -> Any:
    """``sympy``, imported on first use, with the module's symbols defined: ``p`` (the solve rate
    used by every closed form), ``G`` (the group size, only where the closed form depends on it)
    and ``_q = 1 - p``.  Module attributes (``advantages.p``) come through :func:`__getattr__`."""
    global sp, p, G, _q
    import sympy

    if "_q" not in globals():  # a second thread racing here makes equal symbols: harmless
        p = sympy.Symbol("p", nonnegative=True)
        G = sympy.Symbol("G", positive=True, integer=True)
        _q = 1 - p
    sp = sympy
    return sympy


def __getattr__(name: str) -> Any:
    """``p``, ``G`` (sympy symbols of the solve rate and the group size) and ``_q``, made with
    sympy on first use (see :func:`_sympy`)."""
    if name in ("p", "G", "_q"):
        _sympy()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_REGISTRY: Registry[type[Advantage]] = Registry("advantage")


def register(cls: type[Advantage]) -> type[Advantage]:
    """Class decorator adding an :class:`Advantage` subclass to the registry under ``cls.name``.

    Users add their own families the same way::

        @advantages.register
        class MyWeight(advantages.Advantage):
            name = "my_weight"
            ...

    A second class under a taken name raises ``ValueError`` (see :func:`unregister`).
    """
    return _REGISTRY.register(cls)


def unregister(name: str) -> None:
    """Remove the family ``name`` from the registry (``ValueError`` listing the names if unknown)."""
    _REGISTRY.unregister(name)


def registered(cls: type[Advantage]) -> AbstractContextManager[type[Advantage]]:
    """Context manager: ``cls`` is registered inside the ``with`` block only (for tests)::

        with advantages.registered(MyWeight):
            masses.exact("my_weight", 0.3, 8)
    """
    return _REGISTRY.registered(cls)


def names() -> list[str]:
    """Registered advantage names, in registration order."""
    return _REGISTRY.names()


def registry() -> Mapping[str, type[Advantage]]:
    """A copy of the registry: name -> class."""
    return _REGISTRY.as_dict()


def get(name: str, **params: Any) -> Advantage:
    """Instantiate the advantage ``name`` with ``params`` (and ``reward_values``).

    Raises ``ValueError`` naming the allowed names when ``name`` is unknown, and the
    parameter and its allowed range when a parameter is refused.

    Examples
    --------
    >>> from rlvr_theory import advantages
    >>> adv = advantages.get("grpo", ddof=1)
    >>> adv
    advantages.get('grpo', ddof=1, eps=0.0)
    >>> adv(np.array([1.0, 0.0, 0.0, 1.0]))
    array([ 0.8660254, -0.8660254, -0.8660254,  0.8660254])
    >>> advantages.get("asym_grpo", delta=0)
    Traceback (most recent call last):
    ...
    ValueError: asym_grpo: delta must be a finite number > 0, got 0
    """
    return _REGISTRY.get(name)(**params)


def as_advantage(adv: Advantage | str) -> Advantage:
    """``adv`` itself, or the registered family of that name with default parameters."""
    if isinstance(adv, Advantage):
        return adv
    if isinstance(adv, str):
        return get(adv)
    raise ValueError(f"adv must be an Advantage or a registered name, got {type(adv).__name__}")


def check_reward_values(reward_values: Any) -> tuple[float, float]:
    """``(R_w, R_c)`` as two floats with ``R_c > R_w`` (the rewards of a wrong and a correct rollout)."""
    msg = f"reward_values must be a pair of finite numbers (R_w, R_c) with R_c > R_w, got {reward_values!r}"
    if isinstance(reward_values, (tuple, list)) and any(isinstance(v, (bool, np.bool_)) for v in reward_values):
        raise ValueError(msg)  # bool is never a number, also inside a pair (0.0, True)
    try:
        rv = checks.array("reward_values", reward_values, ndim=1)
    except ValueError:
        raise ValueError(msg) from None
    if rv.shape != (2,) or not rv[1] > rv[0]:
        raise ValueError(msg)
    return float(rv[0]), float(rv[1])


def _sym(value: Any) -> sp.Expr:
    """Exact sympy number for a parameter value (0.1 -> 1/10)."""
    if isinstance(value, (bool, np.bool_)):
        return sp.Integer(int(value))
    if isinstance(value, (int, np.integer)):
        return sp.Integer(int(value))
    return sp.nsimplify(float(value), rational=True)


def _div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num/den with 0 wherever den == 0 (used only where the numerator vanishes too)."""
    num, den = np.broadcast_arrays(np.asarray(num, float), np.asarray(den, float))
    out = np.zeros(num.shape)
    np.divide(num, den, out=out, where=den != 0)
    return out


def _frexp_delta(rw: float, rc: float) -> tuple[float, int]:
    """``(m, e)`` with ``R_c − R_w = m·2^e``, ``0.5 <= m < 1``, also where the difference overflows."""
    d = rc - rw
    if math.isfinite(d):
        return math.frexp(d)
    m, e = math.frexp(0.5 * rc - 0.5 * rw)  # |R| ~ 1e308: Δ/2 is a float (exact halving)
    return m, e + 1


def _fmt_log10(x: float) -> str:
    """10**x as text, also beyond the float range (``2.7e+308``)."""
    e = math.floor(x)
    m = 10 ** (x - e)
    if round(m, 3) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.4g}e{e:+d}"


def _pow(base: np.ndarray, expo: float) -> np.ndarray:
    """base**expo for base >= 0, with 0**negative -> 0 (callers mask those entries)."""
    base = np.asarray(base, float)
    out = np.zeros(base.shape)
    np.power(base, expo, out=out, where=base > 0)
    if expo == 0:
        out[base == 0] = 1.0
    return out


class Group:
    """Per-group statistics shared by the families (last axis = group), in units of Δ.

    The rewards enter through ``u = (r − R_w)/Δ`` (the success indicator ``s`` for binary
    rewards), so that no statistic over- or underflows whatever the reward values:
    scale-free families (GRPO, ...) never see ``Δ = R_c − R_w``, the others multiply by a
    power of it once, at the end (:meth:`scale`).  ``r`` keeps the rewards as given.

    ``counts`` (optional, broadcastable to ``u``) are multiplicities of the entries: a group
    of ``G`` rollouts with ``x`` successes is then two entries with counts ``(x, G − x)``
    (:meth:`Advantage.outcome_values`: every ``x = 0..G`` in O(G) memory).  The families
    reduce over the group only through :meth:`total`, :meth:`top`, :meth:`bottom` and
    :meth:`kth_smallest`, which honour the counts (an entry with count 0 is absent).
    """

    def __init__(self, r: np.ndarray, u: np.ndarray, s: np.ndarray, rw: float, rc: float,
                 counts: np.ndarray | None = None, G: int | None = None):
        self.r, self.u, self.s = r, u, s
        self.counts = counts
        self._here = True if counts is None else counts > 0
        self.G = r.shape[-1] if counts is None else int(G)  # type: ignore[arg-type]
        self.rw, self.rc = rw, rc
        self.delta = rc - rw  # may overflow to inf (e.g. (-1e308, 1e308)): only scale() reads it
        self.X = self.total(s)
        self.phat = self.X / self.G
        self.qhat = 1.0 - self.phat
        self.mean_u = self.total(u) / self.G
        # exact zero on groups without signal (all rewards equal)
        self.degenerate = (self.X == 0) | (self.X == self.G)
        self.centered_u = np.where(self.degenerate, 0.0, u - self.mean_u)

    # --------------------------------------------------- count-aware reductions
    def _present(self) -> np.ndarray | bool:
        return self._here

    def _reduce(self, a: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
        """``ufunc`` over the group axis, keeping it; a few entries (compressed groups) pairwise,
        faster than numpy's reduction over a short axis."""
        if self.counts is not None and a.shape[-1] <= 4:
            out = a[..., 0:1]
            for k in range(1, a.shape[-1]):
                out = ufunc(out, a[..., k : k + 1])
            return out
        return ufunc.reduce(a, axis=-1, keepdims=True)

    def total(self, a: np.ndarray) -> np.ndarray:
        """Σ over the group (each entry times its count), keeping the group axis."""
        if self.counts is None:
            return np.sum(a, axis=-1, keepdims=True)
        return self._reduce(np.where(self._here, a * self.counts, 0.0), np.add)

    def top(self, a: np.ndarray) -> np.ndarray:
        """Largest entry present in the group (``-inf`` if none)."""
        return self._reduce(np.where(self._here, a, -np.inf), np.maximum)

    def bottom(self, a: np.ndarray) -> np.ndarray:
        """Smallest entry present in the group (``inf`` if none)."""
        return self._reduce(np.where(self._here, a, np.inf), np.minimum)

    def kth_smallest(self, a: np.ndarray, j: int) -> np.ndarray:
        """The ``j``-th smallest value of the group (1-based, counting multiplicities)."""
        if self.counts is None:
            return np.sort(a, axis=-1)[..., j - 1 : j]
        a, c = np.broadcast_arrays(a, self.counts)
        order = np.argsort(a, axis=-1, kind="stable")
        cum = np.cumsum(np.take_along_axis(c, order, axis=-1), axis=-1)
        idx = np.argmax(cum >= j, axis=-1)[..., None]
        return np.take_along_axis(np.take_along_axis(a, order, axis=-1), idx, axis=-1)

    # ------------------------------------------------------------ statistics
    def scale(self, a: np.ndarray, power: float = 1.0) -> np.ndarray:
        """``a·Δ^power`` without forming an overflowing ``Δ`` or ``Δ^power`` on the way."""
        if power == 0:
            return a
        if math.isfinite(self.delta):
            try:
                f = self.delta**power if power != 1 else self.delta
            except OverflowError:  # Python floats raise instead of giving inf
                f = math.inf
            if math.isfinite(f) and f >= np.finfo(float).tiny:
                return a * f
        # Δ = m·2^e with 0.5 <= m < 1, so Δ^power = m^power·2^(e·power): the power of two is
        # applied last by ldexp (correctly rounded, inf or 0 only if the result itself is)
        m, e = _frexp_delta(self.rw, self.rc)
        n = math.floor(e * power)
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(np.asarray(a, dtype=float) * (m**power * 2.0 ** (e * power - n)), n)

    @property
    def mean(self) -> np.ndarray:
        """Group mean reward ``r̄`` (a convex combination of R_w and R_c: never overflows)."""
        return (1.0 - self.mean_u) * self.rw + self.mean_u * self.rc

    @property
    def centered(self) -> np.ndarray:
        """``r − r̄`` (0 on groups without signal)."""
        return self.scale(self.centered_u)

    def std_u(self, ddof: int = 0) -> np.ndarray:
        """Standard deviation of ``u`` over the group (0 on groups without signal)."""
        return np.sqrt(self.total(self.centered_u**2) / (self.G - ddof))

    def std(self, ddof: int = 0) -> np.ndarray:
        """Standard deviation of the rewards over the group (0 on groups without signal)."""
        return self.scale(self.std_u(ddof))

    def grpo(self, ddof: int = 0, eps: float = 0.0) -> np.ndarray:
        """(r − r̄)/(σ + eps), 0 on groups without signal (``eps`` in reward units)."""
        with np.errstate(over="ignore"):
            e = eps / self.delta if eps else 0.0  # Δ = inf: eps/Δ = 0; Δ subnormal: inf, A -> 0
        return _div(self.centered_u, self.std_u(ddof) + e)


class Advantage:
    """Base class of a registered advantage family.

    Subclasses set the class attributes below and implement ``_compute`` (the
    definition, on rewards) and ``_closed_form`` (the paper's masses, sympy).
    Instances are immutable; :meth:`with_params` returns a modified copy.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    source: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    kind: ClassVar[str] = "exact"
    min_group: ClassVar[int] = 1
    uses_lengths: ClassVar[bool] = False
    #: explanation where our closed form departs from the paper's printed one
    erratum: ClassVar[str | None] = None
    #: the definition reads the rewards only through r, the group mean and std, so it is
    #: defined for real-valued (graded) rewards too (:meth:`graded_call`)
    graded: ClassVar[bool] = False
    #: the advantages are proportional to ``Δ**scale_power`` (``Δ = R_c − R_w``; 0: invariant
    #: to the reward values; ``None``: not a power of Δ); states the usable reward range when
    #: the advantages would overflow (:meth:`reward_scale_power`)
    scale_power: ClassVar[float | None] = 1.0
    #: the definition reduces over the group only through :class:`Group`'s count-aware methods,
    #: so :meth:`outcome_values` evaluates every x = 0..G in O(G) memory; ``None``: true for the
    #: families of this module, false for a family registered elsewhere (set it True once its
    #: ``_compute`` uses ``g.total``/``g.top``/... instead of reducing ``g.r`` itself)
    compressible: ClassVar[bool | None] = None
    #: for a family of kind ``"exact"`` that is group-level and compressible: the closed form at any
    #: ``p`` in (0, 1) equals the definition on a group of ``G`` rollouts holding ``pG`` successes and
    #: ``(1−p)G`` failures as fractional counts, so :func:`rlvr_theory.masses.plugin` gives the plug-in
    #: masses without sympy (:meth:`is_plugin_by_counts`); ``None``: true for the families of this
    #: module (checked for each by tests/rlvr_theory/test_plugin.py), false for a family registered
    #: elsewhere unless it sets True; False where the definition is not smooth in the counts (the
    #: quantile families at small G)
    plugin_by_counts: ClassVar[bool | None] = None

    def __init__(self, reward_values: tuple[float, float] = (0.0, 1.0), **params: Any):
        unknown = set(params) - set(self.defaults)
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "none"
            hint = did_you_mean(sorted(unknown)[0], self.defaults) if len(unknown) == 1 else ""
            raise ValueError(
                f"{self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; allowed: {allowed}{hint}"
            )
        merged = {**self.defaults, **params}
        rv = check_reward_values(reward_values)
        self.reward_values: tuple[float, float] = rv
        self.params: dict[str, Any] = self._validate(merged)

    # ----------------------------------------------------------------- params
    def _validate(self, params: dict[str, Any]) -> dict[str, Any]:
        """Check parameter ranges; subclasses extend. Returns the cleaned dict."""
        return params

    def _number(self, params: dict, key: str, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, integer: bool = False, allow_none: bool = False) -> None:
        """Check ``params[key]`` with :mod:`rlvr_plumbing.checks` (the message names the family)."""
        try:
            if integer:
                params[key] = checks.integer(key, params[key], low, high, allow_none=allow_none)
            else:
                params[key] = checks.number(key, params[key], low, high, low_open=low_open, allow_none=allow_none)
        except ValueError as err:
            raise ValueError(f"{self.name}: {err}") from None

    def _choice(self, params: dict, key: str, allowed: tuple) -> None:
        """Check ``params[key]`` with :func:`rlvr_plumbing.checks.choice` (the message names the family)."""
        try:
            params[key] = checks.choice(key, params[key], allowed)
        except ValueError as err:
            raise ValueError(f"{self.name}: {err}") from None

    def with_params(self, **params: Any) -> Advantage:
        """Copy with some parameters (or ``reward_values``) replaced."""
        rv = params.pop("reward_values", self.reward_values)
        return type(self)(reward_values=rv, **{**self.params, **params})

    @property
    def batch_level(self) -> bool:
        """True if the advantage reads statistics across groups (the leading axes)."""
        return False

    def min_group_size(self) -> int:
        """Smallest group size G the family is defined for (with these parameters)."""
        return self.min_group

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        if self.reward_values != (0.0, 1.0):
            args = (args + ", " if args else "") + f"reward_values={self.reward_values!r}"
        return f"advantages.get({self.name!r}{', ' + args if args else ''})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Advantage) and other.name == self.name
                and other.params == self.params and other.reward_values == self.reward_values)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.params.items())), self.reward_values))

    # ------------------------------------------------------------- computing
    def __call__(self, rewards: Any, *, lengths: Any = None) -> np.ndarray:
        """Per-rollout advantages, same shape as ``rewards`` (float64).

        ``rewards``: finite array ``[..., G]`` whose entries are ``R_w`` or ``R_c``.
        ``lengths``: only for families with ``uses_lengths`` (``t2t``, ``opo``,
        ``reinforce_pp_baseline``), same shape.

        Examples
        --------
        >>> from rlvr_theory import advantages
        >>> rewards = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
        >>> advantages.get("rloo")(rewards)          # the flat group gets 0
        array([[ 1.        , -0.33333333, -0.33333333, -0.33333333],
               [ 0.        ,  0.        ,  0.        ,  0.        ]])
        >>> advantages.get("grpo", reward_values=(-1, 1))(2 * rewards - 1)[0]
        array([ 1.73205081, -0.57735027, -0.57735027, -0.57735027])
        >>> advantages.get("grpo")(np.array([1.0, 0.5]))
        Traceback (most recent call last):
        ...
        ValueError: rewards must be binary with values reward_values = (R_w, R_c) = (0, 1); found 0.5
        """
        r, s = self._check_rewards(rewards)
        lens = self._check_lengths(lengths, r.shape)
        g = self._group(r, s)
        return self._finite(g, lens, self._compute(g, lens))

    def graded_call(self, rewards: Any, *, lengths: Any = None) -> np.ndarray:
        """Per-rollout advantages of real-valued rewards ``[..., G]`` (families with ``graded``).

        For the families whose definition is real-valued: it uses the rewards only through
        ``r``, group and batch means, standard deviations and maxima (REINFORCE, GRPO, Dr. GRPO =
        the mean baseline of Two-Stage Alg. 1, RLOO, GRPO-N, REINFORCE++, and the peer trainers'
        conventions ``grpo_batch``, ``grpo_passk``, ``opo``, ``reinforce_pp_baseline``, ``gpg``);
        a group whose rewards are all equal gets 0 (as in :meth:`__call__`).  ``lengths``: for
        families with ``uses_lengths`` (``opo``, ``reinforce_pp_baseline``), same shape.

        >>> get("opo").graded_call(np.array([0.5, 0.0, 1.0]), lengths=np.array([2, 1, 1]))
        array([ 0. , -0.5,  0.5])
        """
        if not self.graded:
            allowed = ", ".join(n for n, cls in registry().items() if cls.graded)
            raise ValueError(f"advantage {self.name!r} is defined for binary rewards only; graded rewards need one of {allowed}")
        r = checks.array("rewards", rewards, min_ndim=1)
        if r.shape[-1] < self.min_group_size():
            raise ValueError(f"rewards must be a finite array [..., G] with G >= {self.min_group_size()}, got shape {r.shape}")
        # s marks the group's best rewards: X = G exactly when all rewards are equal (no signal)
        lens = self._check_lengths(lengths, r.shape)
        s = (r == r.max(-1, keepdims=True)).astype(float)
        g = Group(r, r, s, 0.0, 1.0)  # real rewards: u = r, Δ = 1
        A = self._compute(g, lens)
        if not np.all(np.isfinite(A)):
            raise ValueError(f"rewards: the advantages of {self!r} overflow float64 for these rewards "
                             f"(largest finite {np.finfo(float).max:.4g}); rescale the rewards")
        return A

    # ------------------------------------------------ scaled and compressed forms
    def _group(self, r: np.ndarray, s: np.ndarray, counts: np.ndarray | None = None,
               G: int | None = None, *, unit: bool = False) -> Group:
        """The :class:`Group` of binary rewards (``unit``: as if the rewards were (0, 1))."""
        rw, rc = (0.0, 1.0) if unit else self.reward_values
        return Group(np.where(s > 0, rc, rw) if unit else r, s, s, rw, rc, counts, G)

    def reward_scale_power(self) -> float | None:
        """The advantages are proportional to ``(R_c − R_w)**power`` (0: invariant to the reward
        values; ``None``: not a power).  Used to state the usable reward range."""
        return self.scale_power

    def is_compressible(self) -> bool:
        """Whether :meth:`outcome_values` evaluates all ``x = 0..G`` in O(G) memory and time."""
        if self.compressible is not None:
            return bool(self.compressible)
        return all(getattr(getattr(type(self), m, None), "__module__", __name__) == __name__
                   for m in ("_compute", "_scale", "default_lengths", "population_advantages", "_population"))

    def is_plugin_by_counts(self) -> bool:
        """Whether :func:`rlvr_theory.masses.plugin` evaluates the closed form from the definition
        on fractional counts (:attr:`plugin_by_counts`): kind ``"exact"``, group-level, compressible."""
        flag = self.plugin_by_counts if self.plugin_by_counts is not None else type(self).__module__ == __name__
        return bool(flag) and self.kind == "exact" and not self.batch_level and self.is_compressible()

    def _finite(self, g: Group, lengths: np.ndarray | None, A: np.ndarray) -> np.ndarray:
        """``A`` if finite where the group has rollouts, else the usable reward range as ``ValueError``."""
        present = np.broadcast_to(g._present(), A.shape)
        if np.all(np.isfinite(A) | ~present):
            return A
        if np.any(np.isnan(A) & present):  # not an overflow: a definition that gives NaN
            raise ValueError(f"rewards: the advantages of {self!r} are NaN for these groups")
        big = 0.0
        if self.reward_scale_power():
            unit = self._compute(self._group(g.r, g.s, g.counts, g.G, unit=True), lengths)
            big = float(np.max(np.where(present & np.isfinite(unit), np.abs(unit), 0.0)))
        raise self._overflow("the advantages", "these groups", big)

    def _overflow(self, what: str, where: str, big: float) -> ValueError:
        """The refusal of values that overflow float64, with the usable reward range where the
        values are ``big·(R_c − R_w)^power`` (``big``: their largest size at rewards (0, 1))."""
        fmax = np.finfo(float).max
        power = self.reward_scale_power()
        rw, rc = self.reward_values
        head = (f"reward_values: {what} of {self!r} overflow float64 (largest finite {fmax:.4g}) "
                f"with R_w = {rw:g}, R_c = {rc:g}")
        if power and big > 0:  # big·Δ^power <= fmax, in log10: the limit may lie beyond the float range
            log10_limit = (math.log10(fmax) - math.log10(big)) / power
            scaling = "proportional to R_c − R_w" if power == 1 else f"proportional to (R_c − R_w)^{power:g}"
            return ValueError(f"{head}; they are {scaling}, so {where} need R_c − R_w "
                              f"{'<=' if power > 0 else '>='} {_fmt_log10(log10_limit)}")
        return ValueError(f"{head}; use reward values closer together or other parameters")

    def rescale(self, values: Any, *, what: str = "the values") -> np.ndarray:
        """``values·(R_c − R_w)^power`` (:meth:`reward_scale_power`): quantities linear in the
        advantages (masses, ...) computed at reward values (0, 1), brought to this family's
        reward values without forming an overflowing ``R_c − R_w`` on the way.  A result that
        overflows float64 is refused with the usable reward range.

        >>> get("dr_grpo", reward_values=(-1e308, 1e308)).rescale([0.25, 0.5])
        array([5.e+307, 1.e+308])
        """
        power = self.reward_scale_power()
        if power is None:
            raise ValueError(f"{self!r}: the advantages are not proportional to a power of R_c − R_w")
        a = np.array(values, dtype=float)
        if power == 0 or self.reward_values == (0.0, 1.0):
            return a
        rw, rc = self.reward_values
        out = Group(np.zeros(1), np.zeros(1), np.zeros(1), rw, rc).scale(a, power)
        if not np.all(np.isfinite(out) | ~np.isfinite(a)):
            finite = np.abs(a[np.isfinite(a)])
            raise self._overflow(what, "these values", float(finite.max()) if finite.size else 0.0)
        return out

    def outcome_values(self, G: int, *, p: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The advantage of a success and of a failure in a group of ``G`` rollouts with
        ``x = 0..G`` successes: ``(A_success, A_failure)``, arrays ``[G+1]``; ``NaN`` where
        there is no such rollout (``A_success`` at ``x = 0``, ``A_failure`` at ``x = G``).

        Batch-level families need ``p`` (solve rates; a homogeneous batch of prompts at each,
        :meth:`population_advantages`) and return arrays ``[len(p), G+1]``.  A compressible
        family (:meth:`is_compressible`: every family of this module) is evaluated on the
        ``G + 1`` groups written as two entries with multiplicities ``(x, G − x)``: O(G) time
        and memory (``G = 2**20`` in milliseconds); another family on the dense groups, in
        chunks of bounded memory, up to ``G = 16384``.

        >>> a_s, a_f = get("grpo").outcome_values(4)
        >>> a_s, a_f
        (array([       nan, 1.73205081, 1.        , 0.57735027, 0.        ]), array([ 0.        , -0.57735027, -1.        , -1.73205081,        nan]))
        """
        G = checks.integer("G", G, low=self.min_group_size())
        if self.batch_level:
            if p is None:
                raise ValueError(f"p is required: {self!r} is batch-level (its advantages depend on the batch)")
            pv = checks.array("p", p, low=0, high=1).ravel()
        x = np.arange(G + 1, dtype=float)[:, None]
        if self.is_compressible():
            s = np.broadcast_to(np.array([1.0, 0.0]), (G + 1, 2))
            counts = np.concatenate([x, G - x], axis=1)
            rw, rc = self.reward_values
            g = self._group(np.where(s > 0, rc, rw), s, counts, G)
            lengths = self.default_lengths(s) if self.uses_lengths else None
            A = self._population(g, pv) if self.batch_level else self._compute(g, lengths)
            A = self._finite(g, lengths, A)
            a_s, a_f = A[..., 0], A[..., 1]
        else:
            a_s, a_f = _dense_outcomes(self, G, pv if self.batch_level else None)
        xs = x[:, 0]
        with np.errstate(invalid="ignore"):
            return np.where(xs > 0, a_s, np.nan), np.where(xs < G, a_f, np.nan)

    def _check_rewards(self, rewards: Any) -> tuple[np.ndarray, np.ndarray]:
        r = checks.array("rewards", rewards, min_ndim=1, allow_bool=True)  # [..., G]: the group is the last axis
        if r.shape[-1] < self.min_group_size():
            raise ValueError(
                f"rewards: {self!r} needs a group size G >= {self.min_group_size()} on the last axis, "
                f"got G = {r.shape[-1]}"
            )
        rw, rc = self.reward_values
        s = r == rc
        if not np.all(s | (r == rw)):
            bad = r[~(s | (r == rw))].flat[0]
            raise ValueError(
                f"rewards must be binary with values reward_values = (R_w, R_c) = ({rw:g}, {rc:g}); found {bad:g}"
            )
        return np.where(s, rc, rw), s.astype(float)

    def _check_lengths(self, lengths: Any, shape: tuple[int, ...]) -> np.ndarray | None:
        if not self.uses_lengths:
            if lengths is not None:
                raise ValueError(f"lengths: {self.name} does not use response lengths; pass lengths=None")
            return None
        if lengths is None:
            raise ValueError(f"lengths: {self.name} needs the response lengths, an array of the rewards' shape")
        L = checks.array("lengths", lengths, low=0)
        try:
            return np.broadcast_to(L, shape)
        except ValueError:
            raise ValueError(f"lengths must broadcast to the rewards' shape {shape}, got shape {L.shape}") from None

    def _compute(self, g: Group, lengths: np.ndarray | None) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    # ----------------------------------------------------------- closed form
    def closed_form(self, *, symbolic: Iterable[str] = ()) -> tuple[sp.Expr, sp.Expr]:
        """Per-rollout masses ``(m_S, m_F)`` as sympy expressions in ``p`` (and ``G``).

        Normalised per rollout (the update is ``G·(m_S ∇̄_S − m_F ∇̄_F)``); the papers'
        Table 1 writes the same quantities times the batch size.  ``q`` is written
        ``1 - p``.  Parameters and reward values are substituted as exact rationals, except
        the parameters named in ``symbolic``, which stay the positive sympy symbols of their
        names (to differentiate or lambdify in them).

        >>> get("power_alpha", normalize=False).closed_form(symbolic=("alpha",))[0]
        p*(1 - p)**alpha
        """
        _sympy()  # the _closed_form methods read the module's p, G and _q
        keep = set(symbolic)
        if keep - set(self.params):
            raise ValueError(f"symbolic: {self.name} has no parameter(s) {', '.join(sorted(keep - set(self.params)))}; "
                             f"allowed: {', '.join(sorted(self.params)) or 'none'}")
        rw, rc = (_sym(v) for v in self.reward_values)
        syms = {k: (sp.Symbol(k, positive=True) if k in keep else _sym(v) if v is not None else None)
                for k, v in self.params.items()}
        m_s, m_f = self._closed_form(syms, rc - rw)
        return sp.sympify(m_s), sp.sympify(m_f)

    def _closed_form(self, k: dict[str, Any], d: sp.Expr) -> tuple[Any, Any]:  # pragma: no cover
        raise NotImplementedError

    def population_advantages(self, rewards: np.ndarray, p_values: np.ndarray) -> np.ndarray | None:
        """Advantages of ``rewards`` inside a homogeneous batch of prompts at each solve rate.

        Returns ``None`` for group-level families (the batch does not matter).  Batch-level
        families return an array ``[len(p_values), *rewards.shape]``: A-GRAE with
        ``omega=None`` uses ``ω = p`` (a large batch of prompts all at solve rate ``p``).
        Used by :func:`rlvr_theory.masses.exact`.
        """
        if not self.batch_level:
            return None
        r, s = self._check_rewards(rewards)
        pv = checks.array("p_values", p_values, low=0, high=1).ravel()
        g = self._group(r, s)
        return self._finite(g, None, self._population(g, pv))

    def _population(self, g: Group, p_values: np.ndarray) -> np.ndarray:  # pragma: no cover
        """Advantages of the groups ``g`` in a homogeneous batch at each solve rate: ``[P, *shape]``."""
        raise NotImplementedError


#: largest G evaluated on dense groups (families that are not compressible): (G+1)·G advantages
DENSE_MAX_G = 16384
_DENSE_CHUNK = 2**22  # advantages per dense chunk (32 MiB of float64)


def _dense_outcomes(adv: Advantage, G: int, p_values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Advantage.outcome_values` on the dense groups (successes first), in chunks of x."""
    if G > DENSE_MAX_G:
        raise ValueError(f"G = {G} is too large for {adv!r}: a family that is not compressible "
                         f"(Advantage.compressible) is evaluated on the G + 1 groups of G rollouts, "
                         f"(G + 1)·G = {(G + 1) * G:.3g} advantages; the limit is G <= {DENSE_MAX_G}")
    rw, rc = adv.reward_values
    per = 1 if p_values is None else len(p_values)
    rows = max(1, _DENSE_CHUNK // (G * per))
    a_s, a_f = [], []
    for lo in range(0, G + 1, rows):
        x = np.arange(lo, min(G + 1, lo + rows))
        succ = (np.arange(G)[None, :] < x[:, None]).astype(float)
        r = np.where(succ > 0, rc, rw)
        if p_values is None:
            A = adv(r, lengths=adv.default_lengths(succ) if adv.uses_lengths else None)
        else:
            A = adv.population_advantages(r, p_values)
        a_s.append(A[..., 0])
        a_f.append(A[..., -1])
    return np.concatenate(a_s, axis=-1), np.concatenate(a_f, axis=-1)


# ============================================================ the families ===


@register
class Reinforce(Advantage):
    """REINFORCE: ``A_i = r_i`` (no baseline).

    Masses ``m_S = R_c·p``, ``m_F = −R_w·q``: with the default rewards {0, 1} only
    successes carry weight (``m_F = 0``); with {−1, +1} (the limit FADE App. 8.9 calls
    REINFORCE) ``m_S = p``, ``m_F = q``.
    """

    graded = True
    name = "reinforce"
    description = "raw reward as weight, no baseline"
    source = "Williams 1992; FADE Table 1"

    scale_power = None  # A = r itself

    def _compute(self, g, lengths):
        return np.array(g.r, dtype=float, copy=True)

    def _closed_form(self, k, d):
        rw, rc = (_sym(v) for v in self.reward_values)
        return rc * p, -rw * _q


@register
class GRPO(Advantage):
    """GRPO: ``A_i = (r_i − r̄)/(σ_r + eps)``, σ_r the group standard deviation.

    ``ddof=0`` (population std, FADE App. 8.1) gives ``m_S = m_F = sqrt(pq)`` exactly;
    ``ddof=1`` (``torch.std`` default, as in TRL) multiplies by ``sqrt((G−1)/G)``.
    ``eps`` (F-GRPO Eq. 4) is 0 by default; groups without signal get 0.

    The peers' conventions: verl and SkyRL ``grpo`` are ``ddof=1, eps=1e-6`` (verl
    ``norm_adv_by_std_in_grpo=False`` is ``dr_grpo``); TRL ``scale_rewards="group"`` is
    ``ddof=1, eps=1e-4`` (``"none"`` is ``dr_grpo``, ``"batch"`` is ``grpo_batch``).
    """

    graded = True
    name = "grpo"
    description = "group mean baseline, divided by the group std"
    source = "Shao et al. 2024; FADE App. 8.1; F-GRPO Eq. 4"
    defaults = {"ddof": 0, "eps": 0.0}
    min_group = 1

    def _validate(self, params):
        self._choice(params, "ddof", (0, 1))
        self._number(params, "eps", low=0)
        return params

    def min_group_size(self) -> int:
        return 1 + self.params["ddof"]

    def reward_scale_power(self) -> float | None:
        return 0.0 if self.params["eps"] == 0 else None

    def _compute(self, g, lengths):
        return g.grpo(self.params["ddof"], self.params["eps"])

    def _closed_form(self, k, d):
        sd = d * sp.sqrt(p * _q * (G / (G - k["ddof"]) if self.params["ddof"] else 1))
        m = d * p * _q / (sd + k["eps"])
        return m, m


@register
class DrGRPO(Advantage):
    """Dr. GRPO (mean-only GRPO): ``A_i = r_i − r̄``; ``m_S = m_F = Δ·pq``."""

    graded = True
    name = "dr_grpo"
    description = "group mean baseline, no std normalisation"
    source = "Liu et al. 2025; FADE Sec. 2.2, Eq. 4-6"

    def _compute(self, g, lengths):
        return g.centered.copy()

    def _closed_form(self, k, d):
        return d * p * _q, d * p * _q


@register
class RLOO(Advantage):
    """RLOO: ``A_i = r_i − mean_{j≠i} r_j = G/(G−1)·(r_i − r̄)``; ``m_S = m_F = Δ·pq·G/(G−1)``."""

    graded = True
    name = "rloo"
    description = "leave-one-out mean baseline"
    source = "Kool et al. 2019; Ahmadian et al. 2024; FADE Table 1"
    min_group = 2

    def _compute(self, g, lengths):
        loo = (g.total(g.u) - g.u) / (g.G - 1)
        return g.scale(np.where(g.degenerate, 0.0, g.u - loo))

    def _closed_form(self, k, d):
        m = d * p * _q * G / (G - 1)
        return m, m


@register
class SkewR(Advantage):
    """Skew-R: GRPO times Dr. GRPO scale, ``A_i = (r_i − r̄)·σ_r``; ``m_S = m_F = Δ²(pq)^{3/2}``.

    FADE App. 8.1 gives the masses ``pq·sqrt(pq)`` ("the product of both"); the advantage
    with exactly these masses is the mean-centred reward times the group std (Power Norm
    with γ = −1/2).
    """

    name = "skew_r"
    description = "mean-centred reward times the group std (variance emphasis)"
    source = "Thrampoulidis et al. 2025; FADE App. 8.1"

    scale_power = 2.0

    def _compute(self, g, lengths):
        return g.scale(g.centered_u * g.std_u(0), 2.0)

    def _closed_form(self, k, d):
        m = d**2 * (p * _q) ** sp.Rational(3, 2)
        return m, m


def _peak_constant(alpha: float) -> float:
    """FADE Eq. 27: C = (1+α)^(1+α)/(4 α^α), so that max_p C·p(1−p)^α = 1/4."""
    return (1 + alpha) ** (1 + alpha) / (4 * alpha**alpha) if alpha > 0 else 0.25


def _peak_constant_sym(alpha: sp.Expr) -> sp.Expr:
    return (1 + alpha) ** (1 + alpha) / (4 * alpha**alpha) if alpha != 0 else sp.Rational(1, 4)


@register
class PowerAlpha(Advantage):
    """Power α (focal): ``A_i = C·(r_i − r̄)·q̂^(α−1)``; ``m_S = m_F = C·Δ·p q^α``.

    ``q̂ = (R_c − r̄)/Δ`` is the failure fraction (``1 − r̄`` for rewards {0, 1}, FADE
    Alg. 1).  ``normalize=True`` uses the peak normalisation of FADE Eq. 27,
    ``C = (1+α)^(1+α)/(4α^α)``, so the mass peaks at ``1/4`` at ``p = 1/(1+α)``;
    otherwise ``C = 1``.  α = 1 is Dr. GRPO.
    """

    name = "power_alpha"
    description = "mean baseline times (1 - r̄)^(α-1): focus on hard prompts"
    source = "FADE Sec. 4.3, App. 8.2 item 1, Eq. 27, Alg. 1"
    defaults = {"alpha": 2.0, "normalize": False}

    def _validate(self, params):
        self._number(params, "alpha", low=0)
        self._choice(params, "normalize", (True, False))
        return params

    def _const(self) -> float:
        return _peak_constant(self.params["alpha"]) if self.params["normalize"] else 1.0

    def _const_sym(self, k) -> sp.Expr:
        return _peak_constant_sym(k["alpha"]) if self.params["normalize"] else sp.Integer(1)

    def _compute(self, g, lengths):
        return g.scale(self._const() * g.centered_u * _pow(g.qhat, self.params["alpha"] - 1))

    def _closed_form(self, k, d):
        m = self._const_sym(k) * d * p * _q ** k["alpha"]
        return m, m


@register
class PowerAlphaEasy(PowerAlpha):
    """Easy Power α: ``A_i = C·(r_i − r̄)·p̂^(α−1)``; ``m_S = m_F = C·Δ·p^α q`` (peak at ``α/(1+α)``)."""

    name = "power_alpha_easy"
    description = "mean baseline times r̄^(α-1): focus on easy prompts"
    source = "FADE Sec. 4.3"

    def _compute(self, g, lengths):
        return g.scale(self._const() * g.centered_u * _pow(g.phat, self.params["alpha"] - 1))

    def _closed_form(self, k, d):
        m = self._const_sym(k) * d * p ** k["alpha"] * _q
        return m, m


@register
class AsymPowerAlpha(Advantage):
    """Asymmetric Power α: successes ``(r_i − r̄)·q̂^(α_s−1)``, failures ``(r_i − r̄)·p̂^(α_f−1)``.

    ``m_S = Δ·p q^{α_s}``, ``m_F = Δ·p^{α_f} q``; α_s = α_f = 1 is Dr. GRPO.
    """

    name = "asym_power_alpha"
    description = "separate difficulty powers for successes and failures"
    source = "FADE App. 8.2 item 2"
    defaults = {"alpha_s": 2.0, "alpha_f": 1.0}

    def _validate(self, params):
        self._number(params, "alpha_s", low=0)
        self._number(params, "alpha_f", low=0)
        return params

    def _compute(self, g, lengths):
        w = np.where(g.s > 0, _pow(g.qhat, self.params["alpha_s"] - 1), _pow(g.phat, self.params["alpha_f"] - 1))
        return g.scale(g.centered_u * w)

    def _closed_form(self, k, d):
        return d * p * _q ** k["alpha_s"], d * p ** k["alpha_f"] * _q


@register
class AsymGRPO(Advantage):
    """AsymGRPO: ``A_i = r_i − r̄`` on successes, ``(r_i − r̄)/δ`` on failures.

    ``m_S = Δ·pq``, ``m_F = Δ·pq/δ``: δ < 1 is failure-biased, δ > 1 success-biased,
    δ = 1 is Dr. GRPO.
    """

    name = "asym_grpo"
    description = "mean baseline with failures scaled by 1/δ"
    source = "FADE Sec. 4.1, App. 8.2 item 3"
    defaults = {"delta": 1.0}

    def _validate(self, params):
        self._number(params, "delta", low=0, low_open=True)
        return params

    def _compute(self, g, lengths):
        return g.scale(np.where(g.s > 0, g.centered_u, g.centered_u / self.params["delta"]))

    def _closed_form(self, k, d):
        return d * p * _q, d * p * _q / k["delta"]


@register
class MaxRL(Advantage):
    """MaxRL: ``A_i = (r_i − r̄)/(r̄ − R_w + eps)`` (= ``(r_i − r̄)/(r̄ + eps)`` for rewards {0, 1}).

    With ``eps = 0`` (the default): ``A_s = q̂/p̂``, ``A_f = −1``, so ``m_S = m_F = q``
    (FADE App. 8.3): sign-balanced, hard-focused, invariant to the reward values.  With
    ``eps > 0`` (in reward units), ``m_S = m_F = Δ·pq/(Δp + eps)`` exactly given ``p̂``.
    SkyRL's ``maxrl`` estimator is ``eps=1e-6`` on rewards (0, 1): it divides by ``r̄ + eps``
    (not ``r̄ − R_w``), so it matches only where ``R_w = 0``; a SkyRL group of one rollout
    keeps its raw reward (``rlvr_theory.groups``, ``singleton="raw"``).

    >>> get("maxrl", eps=1e-6)(np.array([1.0, 0.0, 0.0, 0.0]))   # SkyRL: (r − r̄)/(r̄ + 1e-6)
    array([ 2.999988, -0.999996, -0.999996, -0.999996])
    """

    name = "maxrl"
    description = "mean baseline divided by the mean reward (maximum likelihood RL)"
    source = "Tajwar et al. 2026; FADE App. 8.3; SkyRL (compute_maxrl_advantage)"
    defaults = {"eps": 0.0}
    scale_power = 0.0  # with eps = 0 (reward_scale_power)

    def _validate(self, params):
        self._number(params, "eps", low=0)
        return params

    def reward_scale_power(self) -> float | None:
        return 0.0 if self.params["eps"] == 0 else None

    def _compute(self, g, lengths):
        with np.errstate(over="ignore"):
            e = self.params["eps"] / g.delta if self.params["eps"] else 0.0
        return _div(g.centered_u, g.mean_u + e)  # (r − r̄)/(r̄ − R_w + eps) in units of Δ

    def _closed_form(self, k, d):
        if self.params["eps"] == 0:
            return _q, _q
        m = d * p * _q / (d * p + k["eps"])
        return m, m


@register
class PassKTang(Advantage):
    """pass@k leave-one-out (Tang et al.): ``A_i = max(r) − max(r_{−i})``, k = G.

    Only a unique success gets weight (Δ); failures never do.  The masses are random
    given the group; their expectation over ``X ~ Binom(G, p)`` is exactly
    ``m_S = Δ·p q^(G−1)``, ``m_F = 0`` (FADE App. 8.4.1, with the group-sum ``k p q^(k−1)``
    divided by G).
    """

    name = "passk_tang"
    description = "leave-one-out pass@G indicator: only a unique success is rewarded"
    source = "Tang et al. 2025; FADE App. 8.4.1"
    kind = "expectation"
    min_group = 1

    def _compute(self, g, lengths):
        u = g.u
        top = g.top(u)
        is_top = u == top
        n_top = g.total(is_top.astype(float))
        # second largest value: the max after removing one copy of the top
        second = g.top(np.where(is_top, -np.inf, u))
        loo = np.where(is_top & (n_top == 1), second, top)
        loo = np.where(np.isfinite(loo), loo, top)  # G = 1: nothing left, treat as no change
        return g.scale(np.where(g.degenerate, 0.0, top - loo))

    def _closed_form(self, k, d):
        return d * p * _q ** (G - 1), sp.Integer(0)


def _ratio_of_binomials(F: np.ndarray, Gn: int, k: int) -> np.ndarray:
    """C(F, k)/C(Gn, k) = Π_{j<k} (F − j)/(Gn − j), exactly 0 when F < k."""
    j = np.arange(k, dtype=float)
    return np.prod((F[..., None] - j) / (Gn - j), axis=-1)


@register
class PassKChen(Advantage):
    """Analytic pass@k (Chen et al.), with R_k = 1 − C(F,k)/C(G,k), σ_k = sqrt(R_k(1−R_k)).

    ``A_s = (1 − R_k)/σ_k``, ``A_f = (1 − R_k − C(F−1,k−1)/C(G−1,k−1))/σ_k`` (F failures).
    Given ``p̂`` the masses are ``m_S = m_F = p̂·sqrt((1−R_k)/R_k)`` exactly (FADE
    App. 8.4.2); the closed form is the paper's population limit
    ``p·sqrt(q^k/(1−q^k))``, written ``sqrt(p q^k / Σ_{j<k} q^j)`` so that it is finite
    at ``p = 0``.  The exact finite-G expectation converges to it as ``O(1/G)``.
    Groups with ``F < k`` (every k-subset holds a success) get 0: ``R_k = 1``.
    """

    name = "passk_chen"
    description = "analytic pass@k advantage, mean-centred (sign-balanced)"
    source = "Chen et al. 2025; FADE App. 8.4.2"
    kind = "asymptotic"
    defaults = {"k": 4}

    def _validate(self, params):
        self._number(params, "k", low=1, integer=True)
        return params

    def min_group_size(self) -> int:
        return self.params["k"]

    def _chen(self, g: Group) -> np.ndarray:
        k, Gn = self.params["k"], g.G
        F = Gn - g.X
        one_minus_R = _ratio_of_binomials(F, Gn, k)
        sigma = np.sqrt(one_minus_R * (1.0 - one_minus_R))
        q_prime = _ratio_of_binomials(F - 1, Gn - 1, k - 1)
        a_s = _div(one_minus_R, sigma)
        a_f = _div(one_minus_R - q_prime, sigma)
        return np.where(g.degenerate, 0.0, np.where(g.s > 0, a_s, a_f))

    scale_power = 0.0

    def _compute(self, g, lengths):
        return self._chen(g)

    def _closed_form(self, k, d):
        kk = int(k["k"])
        m = sp.sqrt(p * _q**kk / sum(_q**j for j in range(kk)))
        return m, m


@register
class PassKMix(PassKChen):
    """Mix of pass@k and pass@1 (Chen et al.): ``A_i = p̂·A_i^{pass@k} + q̂·A_i^{GRPO}``.

    Closed form (population limit, FADE App. 8.4.3):
    ``m_S = m_F = p²·sqrt(q^k/(1−q^k)) + q·sqrt(pq)``.
    """

    name = "passk_mix"
    description = "convex mix p·pass@k + q·pass@1 advantages"
    source = "Chen et al. 2025; FADE App. 8.4.3"

    def _compute(self, g, lengths):
        return g.phat * self._chen(g) + g.qhat * g.grpo()

    def _closed_form(self, k, d):
        (chen, _) = super()._closed_form(k, d)
        m = p * chen + _q * sp.sqrt(p * _q)
        return m, m


@register
class AsymRL(Advantage):
    """AsymRL shifted baseline: ``A_i = r_i − (r̄ + δ)``.

    ``m_S = p(Δq − δ)``, ``m_F = q(Δp + δ)``: δ > 0 biases toward failures
    (Arnal et al. recommend δ = 0.01).  Groups without signal get 0 (no shift).
    """

    name = "asymrl"
    description = "mean baseline shifted up by δ (failure bias)"
    source = "Arnal et al. 2026; FADE App. 8.5"
    defaults = {"delta": 0.01}

    def _validate(self, params):
        self._number(params, "delta")
        return params

    scale_power = None  # Δ·(...) − δ

    def _compute(self, g, lengths):
        return np.where(g.degenerate, 0.0, g.centered - self.params["delta"])

    def _closed_form(self, k, d):
        return p * (d * _q - k["delta"]), _q * (d * p + k["delta"])


@register
class Quantile(Advantage):
    """Quantile baseline: ``A_i = r_i − Q_τ(r)``, Q_τ the (lower, inverted-CDF) τ-quantile.

    For binary rewards ``Q_τ = R_w`` iff ``p̂ ≤ 1 − τ``, so
    ``m_S = Δ·p·1[p ≤ 1−τ]`` and ``m_F = Δ·q·1[p > 1−τ]``.
    """

    name = "quantile"
    description = "τ-quantile of the group rewards as baseline"
    source = "Dabney et al. 2018; FADE App. 8.6"
    defaults = {"tau": 0.5}
    plugin_by_counts = False  # the τ-quantile of fractional counts jumps elsewhere than 1[p ≤ 1−τ] (G = 3)
    erratum = ("FADE App. 8.6 writes Q_τ = 0 iff p ≤ τ; the τ-quantile of a binary sample is 0 iff "
               "p ≤ 1 − τ. Both agree at τ = 1/2 (median, MC-GRPO); we use 1 − τ.")

    def _validate(self, params):
        self._number(params, "tau", low=0, high=1, low_open=True)
        return params

    def _tau(self) -> float:
        return self.params["tau"]

    def _compute(self, g, lengths):
        # smallest j (1-based) with j/G >= tau; rounding guards 0.3*10 = 3.0000000000000004
        j = max(int(math.ceil(round(self._tau() * g.G, 9))), 1)
        return g.scale(g.u - g.kth_smallest(g.u, j))

    def _closed_form(self, k, d):
        thr = 1 - _sym(self._tau())
        return (sp.Piecewise((d * p, p <= thr), (0, True)),
                sp.Piecewise((0, p <= thr), (d * _q, True)))


@register
class MCGRPO(Quantile):
    """MC-GRPO: median baseline, ``A_i = r_i − med(r)`` (lower median): quantile with τ = 1/2.

    ``m_S = Δ·p·1[p ≤ 1/2]``, ``m_F = Δ·q·1[p > 1/2]``.
    """

    name = "mc_grpo"
    description = "group median as baseline"
    source = "Kim 2026; FADE App. 8.6"
    defaults = {}
    erratum = None

    def _validate(self, params):
        return params

    def _tau(self) -> float:
        return 0.5


@register
class BinaryContrastive(Advantage):
    """Binary contrastive weight: ``W = 1[r = R_c] − p̂/(1−p̂)·1[r = R_w]``; ``m_S = m_F = p``."""

    name = "binary_contrastive"
    description = "+1 for successes, −p/(1−p) for failures"
    source = "Greensmith et al. 2004; FADE App. 8.7"

    scale_power = 0.0

    def _compute(self, g, lengths):
        w = np.where(g.s > 0, 1.0, -_div(g.phat, g.qhat))
        return np.where(g.degenerate, 0.0, w)

    def _closed_form(self, k, d):
        return p, p


@register
class PowerNorm(Advantage):
    """Power Norm: ``A_i = (r_i − r̄)/(σ_r²)^γ``, σ_r² the group variance (``r̄(1−r̄)`` for {0, 1}).

    ``m_S = m_F = Δ^(1−2γ)·(pq)^(1−γ)``: γ = 1/2 is GRPO, γ = 0 Dr. GRPO.
    """

    name = "power_norm"
    description = "mean baseline divided by the variance to the power γ"
    source = "Andrychowicz et al. 2021; FADE App. 8.8"
    defaults = {"gamma": 0.5}

    def _validate(self, params):
        self._number(params, "gamma")
        return params

    def reward_scale_power(self) -> float | None:
        return 1.0 - 2.0 * self.params["gamma"]

    def _compute(self, g, lengths):
        var_u = g.std_u(0) ** 2  # the variance is Δ²·var_u
        gamma = self.params["gamma"]
        return g.scale(g.centered_u * _pow(var_u, -gamma), 1.0 - 2.0 * gamma)

    def _closed_form(self, k, d):
        m = d ** (1 - 2 * k["gamma"]) * (p * _q) ** (1 - k["gamma"])
        return m, m


@register
class Softmax(Advantage):
    """Softmax weight: ``A_i = softmax_β(r)_i − 1/G`` over the group.

    ``m_S = m_F = (e^{βΔ} − 1)·pq / (G·(1 + p(e^{βΔ} − 1)))`` exactly given ``p̂``.
    """

    name = "softmax"
    description = "softmax of β·reward over the group minus the uniform weight"
    source = "Shao et al. 2024; FADE App. 8.9"
    defaults = {"beta": 1.0}
    scale_power = None
    erratum = ("FADE App. 8.9 prints m = (e^β−1)pq/(1+p(e^β−1)), the group sum Σ_i A_i·(±1); per rollout "
               "(our normalisation, and the paper's own B·m convention elsewhere) the masses carry a factor 1/G.")

    def _validate(self, params):
        self._number(params, "beta", low=0, low_open=True)
        return params

    def _compute(self, g, lengths):
        z = self.params["beta"] * g.scale(g.u - g.top(g.u))  # β(r − max r) <= 0
        w = np.exp(z)
        w = w / g.total(w)
        return np.where(g.degenerate, 0.0, w - 1.0 / g.G)

    def _closed_form(self, k, d):
        e = sp.exp(k["beta"] * d) - 1
        m = e * p * _q / (G * (1 + p * e))
        return m, m


@register
class LogMeanExp(Advantage):
    """Log-mean-exp leave-one-out: ``A_i = lme_β(r) − lme_β(r_{−i})``, ``lme_β(x) = β⁻¹ log mean e^{βx}``.

    Derivation (ours): with ``m = p̂e^{βΔ} + q̂`` (rewards measured from R_w),
    ``A_s = β⁻¹ log((G−1)m/(Gm − e^{βΔ})) > 0`` and ``A_f = β⁻¹ log((G−1)m/(Gm − 1)) < 0``.
    Expanding in 1/G, ``G·m_S = G·m_F = (e^{βΔ}−1)pq/(β(1+p(e^{βΔ}−1))) + O(1/G)``:
    to leading order it is the softmax weight divided by β (sign-balanced); the
    ``O(1/G)`` remainder is success-biased (``Σ_i A_i ≥ 0`` by Jensen).  The closed form
    is this leading term; the exact finite-G masses converge to it at rate ``O(1/G)``.
    """

    name = "logmeanexp"
    description = "leave-one-out difference of log-mean-exp of the rewards"
    source = "Jiang et al. 2025; FADE App. 8.9"
    kind = "asymptotic"
    defaults = {"beta": 1.0}
    min_group = 2
    scale_power = None
    erratum = ("FADE App. 8.9 states m_S = pe^β/(pe^β+q), m_F = q/(pe^β+q) (sign-biased, O(1)). The "
               "leave-one-out definition gives masses of order 1/G whose leading term is sign-balanced "
               "(softmax/β); only an O(1/G²) success bias remains. We use the derived form.")

    def _validate(self, params):
        self._number(params, "beta", low=0, low_open=True)
        return params

    def _compute(self, g, lengths):
        # binary rewards, counted: with w = e^{−βΔ}, T = X + (G−X)w = Σ_j e^{β(r_j − R_c)},
        # A_i = β⁻¹·log((G−1)T/(G(T − e^{β(r_i − R_c)}))) = β⁻¹·log1p(num/den) with
        # num, den free of cancellation: (G−X)(1−w), G(X−1+(G−X)w) for a success and
        # −X(1−w), G(X+(G−X−1)w) for a failure
        b, Gn, X = self.params["beta"], g.G, g.X
        w = math.exp(-b * g.delta)
        em = -math.expm1(-b * g.delta)  # 1 − w
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            a_s = np.log1p((Gn - X) * em / (Gn * ((X - 1) + (Gn - X) * w))) / b
            a_f = np.log1p(-X * em / (Gn * (X + (Gn - X - 1) * w))) / b
            a = np.where(g.s > 0, a_s, a_f)
        return np.where(g.degenerate, 0.0, a)

    def _closed_form(self, k, d):
        e = sp.exp(k["beta"] * d) - 1
        m = e * p * _q / (k["beta"] * G * (1 + p * e))
        return m, m


@register
class ReLU(Advantage):
    """ReLU advantage: ``A_i = max(0, r_i − r̄)``; ``m_S = Δ·pq``, ``m_F = 0``."""

    name = "relu"
    description = "positive part of the mean-centred reward"
    source = "Srinivasan et al. 2018; FADE App. 8.11"

    def _compute(self, g, lengths):
        return g.scale(np.maximum(g.centered_u, 0.0))

    def _closed_form(self, k, d):
        return d * p * _q, sp.Integer(0)


@register
class WReinforce(Advantage):
    """W-REINFORCE: ``A = λ`` for successes, ``−1`` for failures (no baseline).

    ``m_S = λp``, ``m_F = q``; Zhu et al. recommend λ = 0.1.
    """

    name = "w_reinforce"
    description = "down-weighted positive REINFORCE: +λ / −1"
    source = "Zhu et al. 2025; FADE Fig. 2, Table 1"
    defaults = {"lam": 0.1}

    def _validate(self, params):
        self._number(params, "lam", low=0)
        return params

    scale_power = 0.0

    def _compute(self, g, lengths):
        return np.where(g.s > 0, self.params["lam"], -1.0)

    def _closed_form(self, k, d):
        return k["lam"] * p, _q


@register
class T2T(Advantage):
    """Thickening-to-Thinning: GRPO on the length-shaped reward
    ``R_i = 1 − α p̂ L_i`` (correct) or ``α(1−p̂)L_i`` (wrong), ``L_i`` normalised lengths.

    Given the group, ``m_S = m_F = p̂q̂·C/σ_R`` with ``C = 1 − α p̂ L̄_S − α q̂ L̄_F``
    (FADE App. 8.2, Eq. 12-14).  The closed form assumes equal lengths within each
    outcome, ``L_S`` = ``length_correct`` and ``L_F`` = ``length_incorrect`` (used by the
    tables): then ``σ_R = |C|·sqrt(pq)`` and ``m_S = m_F = sign(C)·sqrt(pq)``.
    """

    name = "t2t"
    description = "GRPO on a length-shaped reward (short successes, long failures)"
    source = "T2T; FADE App. 8.2, Eq. 12-14"
    defaults = {"alpha": 0.1, "length_correct": 0.5, "length_incorrect": 0.5}
    uses_lengths = True
    scale_power = 0.0  # the shaped reward does not read the reward values

    def _validate(self, params):
        self._number(params, "alpha", low=0)
        self._number(params, "length_correct", low=0)
        self._number(params, "length_incorrect", low=0)
        return params

    def default_lengths(self, successes: np.ndarray) -> np.ndarray:
        """Lengths of the closed form's model: ``length_correct``/``length_incorrect`` by outcome."""
        return np.where(successes > 0, self.params["length_correct"], self.params["length_incorrect"])

    def _compute(self, g, lengths):
        a = self.params["alpha"]
        R = np.where(g.s > 0, 1.0 - a * g.phat * lengths, a * g.qhat * lengths)
        flat = g.top(R) - g.bottom(R) == 0  # equal shaped rewards: no signal
        Rc = np.where(flat, 0.0, R - g.total(R) / g.G)
        sd = np.sqrt(g.total(Rc**2) / g.G)
        return _div(Rc, sd)

    def _closed_form(self, k, d):
        C = 1 - k["alpha"] * p * k["length_correct"] - k["alpha"] * _q * k["length_incorrect"]
        m = sp.sign(C) * sp.sqrt(p * _q)
        return m, m


@register
class FGRPO(Advantage):
    """F-GRPO: focal weight ``g = (1 − μ̂_pos)^γ`` times the GRPO advantage (F-GRPO Eq. 15-16).

    ``m_S = m_F = q^γ·sqrt(pq)``; γ = 0 is GRPO.
    """

    name = "fgrpo"
    description = "GRPO scaled by the focal weight (1 - p̂)^γ"
    source = "F-GRPO Eq. 15-16"
    defaults = {"gamma": 1.0}

    def _validate(self, params):
        self._number(params, "gamma", low=0)
        return params

    scale_power = 0.0

    def _compute(self, g, lengths):
        return _pow(g.qhat, self.params["gamma"]) * g.grpo()

    def _closed_form(self, k, d):
        m = _q ** k["gamma"] * sp.sqrt(p * _q)
        return m, m


@register
class AGRAE(Advantage):
    """A-GRAE (A-GRAE Eq. 11-13).  With ``A`` the GRPO advantage and p̂ the group success rate,

    ``A_i = ω/2·A_i/sqrt(p̂) + (1−ω)/2·A_i/sqrt(1−p̂)`` (Eq. 12, the *sample-level* asymmetry,
    "dynamic difficulty attention shift"), then positive advantages are multiplied by
    ``min(1, ω/α)`` (Eq. 13, the *group-level* asymmetry, "attenuation suppression strategy").
    ``ω`` is the batch success rate (Eq. 11, the mean reward for rewards {0, 1}): with
    ``omega=None`` it is computed over the whole array passed (all leading axes form the
    batch); a number fixes it.

    ``m_F = ω/2·sqrt(q) + (1−ω)/2·sqrt(p)``, ``m_S = min(1, ω/α)·m_F``.  In the closed form
    and in :func:`rlvr_theory.masses.exact`, ``omega=None`` means a homogeneous batch,
    ``ω = p``.

    ``norm_by_std=False`` is A-GRAE on top of Dr. GRPO (A-GRAE Tables 2-5, "Dr.GRPO + A-GRAE"):
    ``A`` is the mean-centred reward ``r − r̄`` instead of GRPO's ``(r − r̄)/σ`` (the authors'
    code: verl's ``norm_adv_by_std_in_grpo=False`` branch, then the same Eq. 12-13 rescaling);
    the masses are then ``Δ·sqrt(pq)`` times those above (``m_F = Δ·(ω/2·sqrt(p)·q + (1−ω)/2·p·sqrt(q))``).

    The ablations of A-GRAE Table 5 keep one of the two steps: ``agrae_sample`` (Eq. 12 only)
    and ``agrae_group`` (Eq. 13 on the GRPO advantage only).

    >>> get("agrae", omega=0.5)(np.array([1.0, 0.0, 0.0, 0.0]))       # p̂ = 1/4; positives halved
    array([ 0.6830127, -0.4553418, -0.4553418, -0.4553418])
    >>> get("agrae", omega=0.5, norm_by_std=False)(np.array([1.0, 0.0, 0.0, 0.0]))   # on Dr. GRPO
    array([ 0.29575318, -0.19716878, -0.19716878, -0.19716878])
    """

    name = "agrae"
    description = "asymmetric GRAE: batch-accuracy-driven difficulty and positive attenuation"
    source = "A-GRAE Eq. 11-13"
    defaults = {"omega": None, "alpha": 1.0, "norm_by_std": True}
    #: which of the two asymmetries the family applies (A-GRAE Table 5's ablations keep one)
    _sample_level: ClassVar[bool] = True
    _group_level: ClassVar[bool] = True

    def _validate(self, params):
        self._number(params, "omega", low=0, high=1, allow_none=True)
        if "alpha" in params:
            self._number(params, "alpha", low=0, low_open=True)
        self._choice(params, "norm_by_std", (True, False))
        return params

    @property
    def batch_level(self) -> bool:
        return self.params["omega"] is None

    def reward_scale_power(self) -> float | None:
        return 0.0 if self.params["norm_by_std"] else 1.0

    def _compute(self, g, lengths, omega=None):
        if omega is None:  # the batch success rate: the mean of p̂ over the groups
            omega = (self.params["omega"] if self.params["omega"] is not None
                     else float(np.sum(g.X) / (g.G * g.X.size)) if g.X.size else 0.0)
        w = omega
        a = g.grpo() if self.params["norm_by_std"] else g.centered_u  # Dr. GRPO: r − r̄ (in units of Δ)
        if self._sample_level:
            a = 0.5 * w * _div(a, np.sqrt(g.phat)) + 0.5 * (1 - w) * _div(a, np.sqrt(g.qhat))
        if self._group_level:
            a = np.where(a > 0, a * np.minimum(1.0, np.asarray(w) / self.params["alpha"]), a)
        else:
            a = np.broadcast_to(a, np.broadcast_shapes(np.shape(a), np.shape(w))).copy()
        return a if self.params["norm_by_std"] else g.scale(a)

    def _closed_form(self, k, d):
        w = p if k["omega"] is None else k["omega"]
        if self._sample_level:  # Eq. 12: A/sqrt(p̂) weighted ω/2, A/sqrt(q̂) weighted (1−ω)/2
            m_f = (w / 2 * sp.sqrt(_q) + (1 - w) / 2 * sp.sqrt(p) if self.params["norm_by_std"]
                   else d * (w / 2 * sp.sqrt(p) * _q + (1 - w) / 2 * p * sp.sqrt(_q)))
        else:  # GRPO's masses, or Dr. GRPO's
            m_f = sp.sqrt(p * _q) if self.params["norm_by_std"] else d * p * _q
        return (sp.Min(1, w / k["alpha"]) * m_f if self._group_level else m_f), m_f

    def _population(self, g, p_values):
        return self._compute(g, None, omega=p_values.reshape((-1,) + (1,) * g.s.ndim))


@register
class AGRAESample(AGRAE):
    """A-GRAE with the sample-level asymmetry only (A-GRAE Table 5, "GRPO + A-GRAE (sample level)";
    App. D.5's "dynamic difficulty attention shift"): Eq. 12 without Eq. 13's attenuation,

    ``A_i = ω/2·A_i/sqrt(p̂) + (1−ω)/2·A_i/sqrt(1−p̂)``, ``m_S = m_F = ω/2·sqrt(q) + (1−ω)/2·sqrt(p)``

    (sign-balanced: the easy/hard re-weighting changes a group's scale, not the balance of its
    signs).  ``omega`` and ``norm_by_std`` as in ``agrae`` (``norm_by_std=False``: on Dr. GRPO,
    ``m_S = m_F = Δ·(ω/2·sqrt(p)·q + (1−ω)/2·p·sqrt(q))``).

    >>> get("agrae_sample", omega=0.5)(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 1.3660254, -0.4553418, -0.4553418, -0.4553418])
    """

    name = "agrae_sample"
    description = "A-GRAE's sample-level asymmetry only: batch-accuracy-driven easy-to-hard re-weighting (Eq. 12)"
    source = "A-GRAE Eq. 11-12, Table 5, App. D.5"
    defaults = {"omega": None, "norm_by_std": True}
    _group_level = False


@register
class AGRAEGroup(AGRAE):
    """A-GRAE with the group-level asymmetry only (A-GRAE Table 5, "GRPO + A-GRAE (group level)";
    App. D.5's "attenuation suppression strategy", compared there with ``negative_dominant``):
    Eq. 13 applied to the GRPO advantage,

    ``A_i* = A_i·min(1, ω/α)`` where ``A_i > 0``, else ``A_i``;
    ``m_S = min(1, ω/α)·sqrt(pq)``, ``m_F = sqrt(pq)``.

    ``omega``, ``alpha`` and ``norm_by_std`` as in ``agrae`` (``norm_by_std=False``: on Dr. GRPO,
    ``m_S = min(1, ω/α)·Δ·pq``, ``m_F = Δ·pq``).

    >>> get("agrae_group", omega=0.5)(np.array([1.0, 0.0, 0.0, 0.0]))
    array([ 0.8660254 , -0.57735027, -0.57735027, -0.57735027])
    """

    name = "agrae_group"
    description = "A-GRAE's group-level asymmetry only: positive advantages times min(1, ω/α) (Eq. 13)"
    source = "A-GRAE Eq. 11, 13, Table 5, App. D.5"
    _sample_level = False


class _ScaledGRPO(Advantage):
    """GRPO advantage with outcome- or difficulty-dependent rescaling (A-GRAE Table 1)."""

    def _scale(self, g: Group) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    scale_power = 0.0

    def _compute(self, g, lengths):
        return g.grpo() * self._scale(g)


@register
class AGRAEHard(_ScaledGRPO):
    """Hard-focused control: ``A* = γ·A/sqrt(p̂)``; ``m_S = m_F = γ·sqrt(q)``, Σ|A*| = G·sqrt(1−p̂) at γ = 1/2."""

    name = "agrae_hard"
    description = "GRPO divided by sqrt(p̂): hard-focused control"
    source = "A-GRAE Sec. 4.1, Table 1b"
    defaults = {"gamma": 0.5}

    def _validate(self, params):
        self._number(params, "gamma", low=0)
        return params

    def _scale(self, g):
        return self.params["gamma"] * _div(1.0, np.sqrt(g.phat))

    def _closed_form(self, k, d):
        return k["gamma"] * sp.sqrt(_q), k["gamma"] * sp.sqrt(_q)


@register
class AGRAEEasy(AGRAEHard):
    """Easy-focused control: ``A* = γ·A/sqrt(1−p̂)``; ``m_S = m_F = γ·sqrt(p)``, Σ|A*| = G·sqrt(p̂) at γ = 1/2."""

    name = "agrae_easy"
    description = "GRPO divided by sqrt(1 - p̂): easy-focused control"
    source = "A-GRAE Sec. 4.1, Table 1b"

    def _scale(self, g):
        return self.params["gamma"] * _div(1.0, np.sqrt(g.qhat))

    def _closed_form(self, k, d):
        return k["gamma"] * sp.sqrt(p), k["gamma"] * sp.sqrt(p)


@register
class PositiveDominant(_ScaledGRPO):
    """Positive-dominant control: positive GRPO advantages times β; ``m_S = β·sqrt(pq)``, ``m_F = sqrt(pq)``."""

    name = "positive_dominant"
    description = "GRPO with positive advantages scaled up by β"
    source = "A-GRAE Sec. 4.1, Table 1a"
    defaults = {"beta": 10.0}

    def _validate(self, params):
        self._number(params, "beta", low=0, low_open=True)
        return params

    _power = 1  # positives times beta**_power

    def _scale(self, g):
        return np.where(g.s > 0, self.params["beta"] ** self._power, 1.0)

    def _closed_form(self, k, d):
        return k["beta"] ** self._power * sp.sqrt(p * _q), sp.sqrt(p * _q)


@register
class NegativeDominant(PositiveDominant):
    """Negative-dominant control: positive GRPO advantages divided by β; ``m_S = sqrt(pq)/β``, ``m_F = sqrt(pq)``."""

    name = "negative_dominant"
    description = "GRPO with positive advantages scaled down by β"
    source = "A-GRAE Sec. 4.1, Table 1a"

    _power = -1


@register
class IAC(_ScaledGRPO):
    """Inverse-success advantage calibration: positive GRPO advantages times ``(G − |S⁺|)^α``.

    ``m_S = sqrt(pq)·(Gq)^α``, ``m_F = sqrt(pq)`` (Over-Sharpening Sec. 3.1); α = 0 is GRPO.
    """

    name = "iac"
    description = "GRPO with positives scaled by (number of failures)^α"
    source = "Over-Sharpening Sec. 3.1"
    defaults = {"alpha": 1.0}

    def _validate(self, params):
        self._number(params, "alpha", low=0)
        return params

    def _scale(self, g):
        return np.where(g.s > 0, _pow(g.G - g.X, self.params["alpha"]), 1.0)

    def _closed_form(self, k, d):
        return sp.sqrt(p * _q) * (G * _q) ** k["alpha"], sp.sqrt(p * _q)


@register
class GRPON(Advantage):
    """GRPO-N: only the negative GRPO advantages, ``A_i = min(A_i^GRPO, 0)``; ``m_S = 0``, ``m_F = sqrt(pq)``."""

    graded = True
    name = "grpo_n"
    description = "negative-only GRPO (relative negative gradients)"
    source = "Two-Stage App. B.5"

    scale_power = 0.0

    def _compute(self, g, lengths):
        return np.minimum(g.grpo(), 0.0)

    def _closed_form(self, k, d):
        return sp.Integer(0), sp.sqrt(p * _q)


@register
class FADE(Advantage):
    """FADE with fixed (α, δ): ``A_i = q̂^(α−1)·(r_i − r̄)``, divided by δ when ``r_i < r̄`` (FADE Eq. 11).

    ``m_S = Δ·p q^α``, ``m_F = Δ·p q^α/δ``.  :class:`rlvr_theory.schedules.FADESchedule`
    sets α and δ from EMAs of solve rate and entropy (FADE Alg. 2).
    """

    name = "fade"
    description = "Power α with failures scaled by 1/δ (FADE at fixed α, δ)"
    source = "FADE Eq. 11, Alg. 2"
    defaults = {"alpha": 1.0, "delta": 1.0}

    def _validate(self, params):
        self._number(params, "alpha", low=0)
        self._number(params, "delta", low=0, low_open=True)
        return params

    def _compute(self, g, lengths):
        a = g.centered_u * _pow(g.qhat, self.params["alpha"] - 1)
        return g.scale(np.where(g.centered_u < 0, a / self.params["delta"], a))

    def _closed_form(self, k, d):
        m = d * p * _q ** k["alpha"]
        return m, m / k["delta"]


@register
class ReinforcePP(Advantage):
    """REINFORCE++ with group baseline: ``A_i = (r_i − r̄)/σ_batch``, 0 where ``σ_batch = 0``.

    ``σ_batch`` is the population standard deviation (ddof 0) of the group-centred rewards
    ``r_i − r̄`` over the *whole* array passed (all leading axes and the group axis): the
    global normalisation of REINFORCE++ (Hu et al. 2025) applied to a group baseline.  A
    group without signal contributes zeros (which count in ``σ_batch``).  Batch-level.

    Closed form (ours).  In a large batch of prompts that all have solve rate ``p``,
    ``σ_batch²`` tends to the expected second moment of a group,
    ``E[(1/G)Σ_i (r_i − r̄)²] = Δ²·E[p̂q̂] = Δ²·pq·(G−1)/G``.  A group with ``X``
    successes has ``M_S = M_F = Δ·p̂q̂/σ_batch``, so the expectation over
    ``X ~ Binom(G, p)`` is ``m_S = m_F = sqrt(pq·(G−1)/G)``: GRPO's ``sqrt(pq)`` shrunk by
    ``sqrt((G−1)/G)`` and independent of the reward values (kind ``"expectation"``, in
    that homogeneous large batch: :meth:`population_advantages`).  Given one group the
    masses are not a function of ``p̂`` alone (they depend on the rest of the batch).
    """

    graded = True
    name = "reinforce_pp"
    description = "group-mean-centred reward divided by the std of those over the whole batch"
    source = "Hu et al. 2025 (REINFORCE++), group-baseline variant"
    kind = "expectation"
    min_group = 2

    @property
    def batch_level(self) -> bool:
        return True

    scale_power = 0.0

    def _compute(self, g, lengths, sigma=None):
        c = g.centered_u  # in units of Δ: σ_batch scales alike
        if sigma is None:  # population std over all axes (every rollout of every group)
            n = g.G * g.X.size
            if n:
                mu = float(np.sum(g.total(c))) / n
                sigma = math.sqrt(float(np.sum(g.total((c - mu) ** 2))) / n)
            else:
                sigma = 0.0
        return _div(c, sigma)

    def _closed_form(self, k, d):
        m = sp.sqrt(p * _q * (G - 1) / G)
        return m, m

    def _population(self, g, p_values):
        pv = p_values.reshape((-1,) + (1,) * g.s.ndim)
        return self._compute(g, None, sigma=np.sqrt(pv * (1.0 - pv) * (g.G - 1) / g.G))  # σ_batch/Δ


# ====================================================== the peers' conventions ===
# verl 0.9 (verl/trainer/ppo/core_algos.py), TRL 1.16 (GRPOTrainer, scale_rewards="batch"):
# each family is the peer's definition on one batch of equal-size groups; a group of one
# rollout (verl: its raw reward) is left to rlvr_theory.groups (singleton="raw").


def _binomial_moments(p: Any, G: Any) -> tuple[Any, Any, Any]:
    """``E[p̂q̂]``, ``E[p̂q̂²]``, ``E[p̂²q̂]`` for ``X ~ Binom(G, p)`` (numpy or sympy)."""
    q = 1 - p
    return (p * q * (G - 1) / G, p * q * (G - 1) * (q * (G - 2) + 1) / G**2,
            p * q * (G - 1) * (p * (G - 2) + 1) / G**2)


@register
class GRPOBatch(Advantage):
    """GRPO with the batch std (TRL ``scale_rewards="batch"``): ``A_i = (r_i − r̄)/(σ_batch + eps)``.

    ``r̄`` is the group mean and ``σ_batch`` the standard deviation of the *rewards* (not the
    centred rewards) over the whole array passed, with ``ddof`` (TRL: ``nanstd``, ddof 1) and
    ``eps`` in reward units (TRL: ``1e-4``); groups without signal get 0.  Batch-level.

    Closed form (ours).  In a large batch of prompts that all have solve rate ``p``,
    ``σ_batch → Δ·sqrt(pq)`` (whatever ``ddof``), and a group with ``X`` successes has
    ``M_S = M_F = Δ·p̂q̂/(σ_batch + eps)``; over ``X ~ Binom(G, p)``:
    ``m_S = m_F = Δ·pq·(G−1)/G / (Δ·sqrt(pq) + eps)`` (kind ``"expectation"``).

    >>> get("grpo_batch", eps=0)(np.array([[1.0, 0.0], [1.0, 1.0]]))  # σ_batch of (1, 0, 1, 1): 0.5
    array([[ 1., -1.],
           [ 0.,  0.]])
    """

    graded = True
    name = "grpo_batch"
    description = "group mean baseline divided by the std of the rewards over the whole batch"
    source = "TRL (GRPOTrainer, scale_rewards='batch'); Shao et al. 2024"
    kind = "expectation"
    defaults = {"ddof": 1, "eps": 1e-4}
    min_group = 2

    def _validate(self, params):
        self._choice(params, "ddof", (0, 1))
        self._number(params, "eps", low=0)
        return params

    @property
    def batch_level(self) -> bool:
        return True

    def reward_scale_power(self) -> float | None:
        return 0.0 if self.params["eps"] == 0 else None

    def _compute(self, g, lengths, sigma=None):
        if sigma is None:  # std of the rewards over every rollout of every group, in units of Δ
            n, ddof = g.G * g.X.size, self.params["ddof"]
            sigma = 0.0
            if n - ddof > 0:
                mu = float(np.sum(g.total(g.u))) / n
                sigma = math.sqrt(float(np.sum(g.total((g.u - mu) ** 2))) / (n - ddof))
        with np.errstate(over="ignore"):
            e = self.params["eps"] / g.delta if self.params["eps"] else 0.0
        return _div(g.centered_u, sigma + e)

    def _closed_form(self, k, d):
        m = d * p * _q * (G - 1) / G / (d * sp.sqrt(p * _q) + k["eps"])
        return m, m

    def _population(self, g, p_values):
        pv = p_values.reshape((-1,) + (1,) * g.s.ndim)
        return self._compute(g, None, sigma=np.sqrt(pv * (1.0 - pv)))


@register
class GRPOPassK(Advantage):
    """verl's pass@k GRPO: only the best rollout of a group gets ``(r_max − r_2nd)/(σ + eps)``.

    ``r_max`` and ``r_2nd`` are the two largest rewards of the group (equal when the best is
    not unique: then every rollout gets 0), ``σ`` the group standard deviation with ddof 1
    and ``eps`` in reward units (verl's defaults, ``1e-6``); ``norm_by_std=False``
    (``norm_adv_by_std_in_grpo=False``) drops the division, which is ``passk_tang``.  For
    binary rewards only a unique success gets weight: ``Δ/(Δ/sqrt(G) + eps)``.

    The masses are random given the group; their expectation over ``X ~ Binom(G, p)`` is
    exactly ``m_S = p q^(G−1)·Δ/(Δ/sqrt(G) + eps)`` (``Δ·p q^(G−1)`` without the
    normalisation), ``m_F = 0`` (kind ``"expectation"``, as ``passk_tang``).

    >>> get("grpo_passk")(np.array([1.0, 0.0, 0.0, 0.0]))        # 1/(1/sqrt(4) + 1e-6)
    array([1.999996, 0.      , 0.      , 0.      ])
    >>> get("grpo_passk", norm_by_std=False).graded_call(np.array([0.5, 0.9, 0.2]))
    array([0. , 0.4, 0. ])
    """

    graded = True
    name = "grpo_passk"
    description = "pass@k GRPO: only a unique best rollout is rewarded, by its gap over the runner-up"
    source = "Tang et al. 2025; verl (compute_grpo_passk_outcome_advantage)"
    kind = "expectation"
    defaults = {"norm_by_std": True, "eps": 1e-6}
    min_group = 2

    def _validate(self, params):
        self._choice(params, "norm_by_std", (True, False))
        self._number(params, "eps", low=0)
        return params

    def reward_scale_power(self) -> float | None:
        if not self.params["norm_by_std"]:
            return 1.0
        return 0.0 if self.params["eps"] == 0 else None

    def _compute(self, g, lengths):
        u = g.u
        top = g.top(u)
        is_top = u == top
        unique = g.total(is_top.astype(float)) == 1
        second = g.top(np.where(is_top, -np.inf, u))  # the runner-up (the max of the rest)
        gap = np.where(is_top & unique & np.isfinite(second) & ~g.degenerate, top - second, 0.0)
        if not self.params["norm_by_std"]:
            return g.scale(gap)
        with np.errstate(over="ignore"):
            e = self.params["eps"] / g.delta if self.params["eps"] else 0.0
        return _div(gap, g.std_u(1) + e)

    def _closed_form(self, k, d):
        m = d * p * _q ** (G - 1)
        if self.params["norm_by_std"]:
            m = m / (d / sp.sqrt(G) + k["eps"])
        return m, sp.Integer(0)


@register
class OPO(Advantage):
    """OPO: the length-weighted group baseline, ``A_i = r_i − Σ_j l_j r_j / Σ_j l_j``.

    ``l_i`` are the response lengths (verl: tokens of the response mask); equal lengths give
    Dr. GRPO.  Groups without signal get 0.  The closed form assumes equal lengths within each
    outcome, ``L_S`` = ``length_correct`` and ``L_F`` = ``length_incorrect`` (used by the
    tables); given ``p̂`` it is exact:
    ``m_S = Δ·pq·L_F/(pL_S + qL_F)``, ``m_F = Δ·pq·L_S/(pL_S + qL_F)`` -- longer failures
    make it success-biased.

    >>> get("opo")(np.array([1.0, 0.0, 0.0]), lengths=np.array([10, 30, 20]))  # baseline 10/60
    array([ 0.83333333, -0.16666667, -0.16666667])
    """

    graded = True
    name = "opo"
    description = "length-weighted group mean baseline (optimal baseline for sequence rewards)"
    source = "Hao et al. 2025 (OPO); verl (compute_opo_outcome_advantage)"
    defaults = {"length_correct": 1.0, "length_incorrect": 1.0}
    uses_lengths = True

    def _validate(self, params):
        self._number(params, "length_correct", low=0, low_open=True)
        self._number(params, "length_incorrect", low=0, low_open=True)
        return params

    def default_lengths(self, successes: np.ndarray) -> np.ndarray:
        """Lengths of the closed form's model: ``length_correct``/``length_incorrect`` by outcome."""
        return np.where(successes > 0, self.params["length_correct"], self.params["length_incorrect"])

    def _compute(self, g, lengths):
        w = np.broadcast_to(lengths, g.u.shape)
        total = g.total(w)
        if np.any((total <= 0) & ~g.degenerate):
            raise ValueError(f"lengths: {self.name} needs a positive total length in every group with signal "
                             "(its baseline is Σ l_i r_i / Σ l_i)")
        base = _div(g.total(w * g.u), total)
        return g.scale(np.where(g.degenerate, 0.0, g.u - base))

    def _closed_form(self, k, d):
        ls, lf = k["length_correct"], k["length_incorrect"]
        den = p * ls + _q * lf
        return d * p * _q * lf / den, d * p * _q * ls / den


@register
class ReinforcePPBaseline(Advantage):
    """verl's REINFORCE++-baseline: group mean subtracted, then whitened over the batch's *tokens*.

    With ``c_i = r_i − r̄`` (0 on groups without signal) and ``l_i`` the response lengths,
    ``A_i = (c_i − μ)/sqrt(v + eps)``, ``μ = Σ l_i c_i / n``, ``v = Σ l_i (c_i − μ)² / (n − 1)``,
    ``n = Σ l_i``, sums over the whole array passed: verl's ``masked_whiten`` of the centred
    reward repeated on every token of the response (mean and variance over all tokens of the
    batch, ``unbiased`` correction ``n/(n−1)``, ``eps = 1e-8`` in squared reward units; verl's
    ``masked_mean`` also adds ``1e-8`` to ``n``, a relative ``1e-8/n`` left out here).  A group
    without signal gets ``−μ/sqrt(v + eps)`` (0 with equal lengths).  Batch-level.

    Closed form (ours).  In a large batch of prompts at solve rate ``p`` whose successes have
    ``L_S`` = ``length_correct`` and failures ``L_F`` = ``length_incorrect`` tokens,
    ``μ = Δ(L_S − L_F)·E[p̂q̂]/L̄`` and ``v = Δ²(L_S·E[p̂q̂²] + L_F·E[p̂²q̂])/L̄ − μ²`` with
    ``L̄ = pL_S + qL_F`` and the binomial moments ``E[p̂q̂] = pq(G−1)/G``,
    ``E[p̂q̂²] = pq(G−1)(q(G−2)+1)/G²``, ``E[p̂²q̂] = pq(G−1)(p(G−2)+1)/G²``; then
    ``m_S = (Δ·E[p̂q̂] − μp)/sqrt(v + eps)``, ``m_F = (Δ·E[p̂q̂] + μq)/sqrt(v + eps)``
    (kind ``"expectation"``).  Equal lengths: ``m_S = m_F = Δ·E[p̂q̂]/sqrt(Δ²·E[p̂q̂] + eps)``,
    ``reinforce_pp`` up to ``eps``.

    >>> get("reinforce_pp_baseline")(np.array([[1.0, 0.0], [1.0, 1.0]]), lengths=np.array([[3, 1], [2, 2]]))
    array([[ 1.06066013, -1.76776688],
           [-0.35355338, -0.35355338]])
    """

    graded = True
    name = "reinforce_pp_baseline"
    description = "group mean baseline, then whitening over all tokens of the batch (verl)"
    source = "Hu et al. 2025 (REINFORCE++); verl (compute_reinforce_plus_plus_baseline_outcome_advantage)"
    kind = "expectation"
    defaults = {"eps": 1e-8, "unbiased": True, "length_correct": 1.0, "length_incorrect": 1.0}
    min_group = 2
    uses_lengths = True

    def _validate(self, params):
        self._number(params, "eps", low=0)
        self._choice(params, "unbiased", (True, False))
        self._number(params, "length_correct", low=0, low_open=True)
        self._number(params, "length_incorrect", low=0, low_open=True)
        return params

    @property
    def batch_level(self) -> bool:
        return True

    def reward_scale_power(self) -> float | None:
        return 0.0 if self.params["eps"] == 0 else None

    def default_lengths(self, successes: np.ndarray) -> np.ndarray:
        """Lengths of the closed form's model: ``length_correct``/``length_incorrect`` by outcome."""
        return np.where(successes > 0, self.params["length_correct"], self.params["length_incorrect"])

    def _compute(self, g, lengths, stats=None):
        c = g.centered_u  # in units of Δ
        if stats is None:  # token-weighted mean and variance over the whole batch
            w = np.broadcast_to(self.default_lengths(g.s) if lengths is None else lengths, c.shape)
            n = float(np.sum(g.total(w)))
            if n <= 0 or (self.params["unbiased"] and n <= 1):
                raise ValueError(f"lengths: {self.name} needs more than {int(self.params['unbiased'])} token(s) "
                                 f"in the batch (the sum of the lengths), got {n:g}")
            mu = float(np.sum(g.total(w * c))) / n
            var = float(np.sum(g.total(w * (c - mu) ** 2))) / n
            if self.params["unbiased"]:
                var *= n / (n - 1)
        else:
            mu, var = stats
        with np.errstate(over="ignore"):
            e = self.params["eps"] / g.delta / g.delta if self.params["eps"] else 0.0
        return _div(c - mu, np.sqrt(var + e))

    def _moments(self, pv: Any, Gn: Any) -> tuple[Any, Any, Any]:
        """``E[p̂q̂]``, ``μ/Δ`` and ``v/Δ²`` of the large homogeneous batch (numpy or sympy)."""
        ls, lf = self.params["length_correct"], self.params["length_incorrect"]
        return self._moments_in(pv, Gn, ls, lf)

    @staticmethod
    def _moments_in(pv, Gn, ls, lf):
        e1, e_pq2, e_p2q = _binomial_moments(pv, Gn)
        if ls == lf:  # equal lengths: μ = 0 and v = E[p̂q̂²] + E[p̂²q̂] = E[p̂q̂]
            return e1, 0 * e1, e1
        lbar = pv * ls + (1 - pv) * lf
        mu = (ls - lf) * e1 / lbar
        return e1, mu, (ls * e_pq2 + lf * e_p2q) / lbar - mu**2

    def _closed_form(self, k, d):
        e1, mu, v = self._moments_in(p, G, k["length_correct"], k["length_incorrect"])
        s = sp.sqrt(d**2 * v + k["eps"])
        return (d * e1 - d * mu * p) / s, (d * e1 + d * mu * _q) / s

    def _population(self, g, p_values):
        pv = p_values.reshape((-1,) + (1,) * g.s.ndim)
        _, mu, v = self._moments(pv, g.G)
        return self._compute(g, None, stats=(mu, np.maximum(v, 0.0)))


@register
class GPG(Advantage):
    """verl's GPG: ``A_i = α·(r_i − r̄)/f_norm`` with ``α = B / #{j : r_j ≠ 0}``.

    ``B`` is the number of rollouts of the whole array passed and the count runs over all of
    them (verl: ``bsz / count_nonzero(scores)``, the count clamped at 1); ``f_norm`` is verl's
    ``f_norm`` (1).  Groups without signal get 0.  Batch-level.  The count reads the rewards as
    given: for rewards (0, 1) it is the number of successes, for two nonzero reward values it
    is ``B`` (``α = 1``, Dr. GRPO).

    Closed form (ours).  In a large batch of prompts at solve rate ``p`` the fraction of
    nonzero rewards is ``φ = p·1[R_c ≠ 0] + q·1[R_w ≠ 0]`` and ``α → 1/φ``, so
    ``m_S = m_F = Δ·pq(G−1)/(G·φ·f_norm)`` (``Δ·q(G−1)/G`` for rewards (0, 1): hard-focused
    like MaxRL), and 0 where ``φ = 0`` (every group without signal; kind ``"expectation"``;
    :func:`rlvr_theory.masses.exact` reads a subnormal ``φ`` as ``2.2e-308``).

    >>> get("gpg")(np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))  # α = 8/1
    array([[ 6., -2., -2., -2.],
           [ 0.,  0.,  0.,  0.]])
    """

    graded = True
    name = "gpg"
    description = "group mean baseline scaled by batch size / number of nonzero rewards (verl GPG)"
    source = "Chu et al. 2025 (GPG); verl (compute_gpg_outcome_advantage)"
    kind = "expectation"
    defaults = {"f_norm": 1.0}
    min_group = 2
    scale_power = None  # α reads which rewards are 0, not only R_c − R_w

    def _validate(self, params):
        self._number(params, "f_norm", low=0, low_open=True)
        return params

    @property
    def batch_level(self) -> bool:
        return True

    def _nonzero_fraction(self, pv: Any) -> Any:
        rw, rc = self.reward_values
        return (pv if rc != 0 else 0) + ((1 - pv) if rw != 0 else 0)

    def _compute(self, g, lengths, alpha=None):
        if alpha is None:
            n = g.G * g.X.size
            alpha = n / max(float(np.sum(g.total((g.r != 0).astype(float)))), 1.0)
        return g.centered * (alpha / self.params["f_norm"])

    def _closed_form(self, k, d):
        phi = self._nonzero_fraction(p)
        m = d * p * _q * (G - 1) / (G * phi * k["f_norm"])
        if phi != 1:
            m = sp.Piecewise((0, sp.Eq(phi, 0)), (m, True))
        return m, m

    def _population(self, g, p_values):
        pv = p_values.reshape((-1,) + (1,) * g.s.ndim)
        phi = np.broadcast_to(np.asarray(self._nonzero_fraction(pv), dtype=float), pv.shape)
        # φ = 0: every group is without signal (A = 0 whatever α); a subnormal φ (p < 2.2e-308)
        # is read as the smallest normal float, so that α·(r − r̄) stays finite
        alpha = _div(1.0, np.where(phi > 0, np.maximum(phi, np.finfo(float).tiny), 0.0))
        return self._compute(g, None, alpha=alpha)


def iter_default() -> Iterator[Advantage]:
    """One instance of every registered family with its default parameters."""
    for name in names():
        yield get(name)
