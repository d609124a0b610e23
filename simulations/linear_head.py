"""Linear-head policy ``π(y | x) = softmax(W·h(x))`` with fixed features h, trained by
group-relative policy gradients (Over-Sharpening Sec. 2.4, App. G-H; FADE App. 15).

Two instances share one vectorised core (numpy float64, configurations on the leading axis,
no Python loop over samples; one ``numpy.random.Generator`` per seed, so a batched run and a
one-seed run give the same trajectory — the only Python loops are over seeds to draw their
uniforms and over configurations to step a schedule's scalar state):

* :func:`simulate_toy` — the Cat/Dog/Persian/Siamese toy of Over-Sharpening Sec. 2.4: only the Persian
  input is trained, reward 1 for Cat or Persian; ``π(Cat|Persian)``, ``π(Persian|Persian)``
  and the held-out ``π(Siamese|Siamese)`` are logged (Over-Sharpening Fig. 1-2, App. G Fig. 3-4,
  App. H Fig. 5 with IAC).
* :func:`simulate_population` — ``M`` prompts with a solve-rate spread, one correct and
  ``K`` failure modes each, hidden features whose perpendicular correlation differs for
  correct and failed outcomes (FADE App. 15, Cor. 15.2).  ``ΔW = W_T − W_0`` is the
  output-head update of FADE App. 15; its rank-1 fraction ``r1``, ``s1/s2`` and stable rank
  come from :func:`analysis.spectra.summary`, the alignment of successive head gradients
  (FADE Cor. 15.3) from :func:`analysis.spectra.successive_alignment`.

Update rule (both instances; masses convention of :mod:`rlvr_theory.masses`)::

    g = (1/B) Σ_b Σ_i A_{b,i} (e_{y_{b,i}} − π(·|h_{b,i})) ⊗ h_{b,i}   (= ∇_W of Σ A log π)
    W ← optimizer(W, g)  (gradient *ascent*; SGD, heavy-ball momentum, or AdamW with torch semantics)

``B`` prompts per step, ``G`` rollouts per prompt, ``h_{b,i}`` the hidden state at which rollout
``i`` of prompt ``b`` emits its answer token.  ``reduction="mean"`` divides by ``G`` as well.  Advantages
come from :mod:`rlvr_theory.advantages` (any registered name and parameters; a batch-level
family such as ``"reinforce_pp"`` — group-mean-centred rewards divided by the standard
deviation of those centred rewards over the whole batch — sees the ``[B, G]`` rewards of one
configuration at a time) or from a schedule of :mod:`rlvr_theory.schedules` (``"fade"``,
``"fade-log"``, ``"agrae"``, the FADE ablations ``"fade-entropy"``, ``"fade-alpha-only"``,
``"fade-delta-only"``: one :class:`rlvr_theory.policy.Policy` per configuration,
advanced every step with that configuration's batch mean reward and mean entropy before its
advantages are computed, FADE Alg. 2).  Both lookups refuse an unknown name or parameter
before any work starts.

Distribution-level calibration (Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and 21-22), both
instances, ``mu > 0``: a memory head ``W_φ`` on the same features (``_CalibrationHead``); the rollouts are
drawn from ``softmax((W − μ·W_φ)·h)``, the policy update above keeps the policy's own ``π``, and
``W_φ`` then takes its own optimizer step on the mean cross-entropy of the drawn labels.

Choices the papers leave open (Over-Sharpening gives neither the learning rate nor the initialisation):
``W_0 = 0`` (uniform policy) for the toy, ``lr = 0.1``, reduction "sum" (so that the step
grows with G, the mechanism of Over-Sharpening Cor. 2.2).  The settings of each instance are a
dataclass (:class:`ToySettings`, :class:`PopulationSettings`: fields with help text, a
``check`` method, the ``rlvr-sim linear-head`` flags generated from them); the simulators take
the same fields as keywords.  See ``docs/simulations_linear_head.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_plumbing import checks, runner, serialize
from rlvr_theory import advantages as _adv
from rlvr_theory import schedules as _sched
from rlvr_theory.policy import Policy
from rlvr_theory.sharpening import SIAMESE_VARIANTS, TOY_EMBEDDINGS

from .calibration import check_calibration, memory_lr_field, mu_field
from .runs import check_out, command_settings, diverged, write_run

if TYPE_CHECKING:  # imported where used: `rlvr-sim --help` loads no pandas or torch
    import pandas as pd

__all__ = [
    "TOY_LABELS",
    "OPTIMIZERS",
    "PRESETS",
    "softmax",
    "head_gradient",
    "ToySettings",
    "PopulationSettings",
    "simulate_toy",
    "population_features",
    "population_setup",
    "expected_gradient",
    "simulate_population",
    "run_preset",
    "check_size",
    "add_parser",
]

#: label order of the Over-Sharpening toy (rows of W)
TOY_LABELS: tuple[str, ...] = ("Cat", "Dog", "Persian", "Siamese")
#: optimizers understood by the simulators
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adamw")
REDUCTIONS: tuple[str, ...] = ("sum", "mean")


# ----------------------------------------------------------------------------- checks
def _seed_list(seeds: Any) -> list[int]:
    """``seeds``: a count ``n`` (seeds ``0..n−1``) or a sequence of seeds."""
    if np.ndim(seeds) == 0:
        return list(range(checks.integer("seeds", seeds, low=1)))
    return [checks.integer(f"seeds[{i}]", s, low=0) for i, s in enumerate(seeds)]


def _check_common(G: Any, steps: Any, lr: Any, optimizer: str, reduction: str,
                  log_every: Any) -> tuple[int, int, float, int]:
    """The settings both simulators share, checked (:mod:`rlvr_plumbing.checks`): ``G, steps, lr,
    log_every`` as ``int, int, float, int``."""
    checks.choice("optimizer", optimizer, OPTIMIZERS)
    checks.choice("reduction", reduction, REDUCTIONS)
    return (checks.integer("G", G, low=1), checks.integer("steps", steps, low=1),
            checks.number("lr", lr, low=0, low_open=True), checks.integer("log_every", log_every, low=1))


def _spectrum(dW: np.ndarray, step: int, lr: float, where: str) -> dict[str, Any]:
    """:func:`analysis.spectra.summary` of a head update (NaN metrics and norm 0 for a zero update,
    which has no direction); one too large for float64 (its norm
    overflows) or not finite is a diverged run (:func:`simulations.runs.diverged`)."""
    from analysis import spectra

    if not np.any(dW) and np.isfinite(dW).all():  # no update yet (e.g. every advantage 0): no direction
        return {"rank1_fraction": np.nan, "s1_s2": np.nan, "stable_rank": np.nan, "fro_norm": 0.0}
    try:
        sp = spectra.summary(dW, deltas=())
    except ValueError as err:
        raise diverged(step, where, lr, "a head update too large for float64") from err
    if not all(np.isfinite(sp[key]) for key in ("rank1_fraction", "fro_norm")):
        raise diverged(step, where, lr, "a non-finite spectrum of the head update")
    return sp


def _check_finite(W: np.ndarray, step: int, lr: float, names: Sequence[str], what: str = "non-finite weights") -> None:
    """``ValueError`` (:func:`simulations.runs.diverged`) if a configuration's entries of ``W``
    (configurations on the leading axis) are not all finite; ``names[c]`` names configuration ``c``."""
    ok = np.isfinite(W).reshape(len(W), -1).all(-1)
    if not ok.all():
            raise diverged(step, names[int(np.argmin(ok))], lr, what)


# ----------------------------------------------------------------------------- core
def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the max (no overflow: a shifted logit below the
    float64 range is ``-inf``, its probability 0)."""
    with np.errstate(over="ignore"):
        z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _entropy(pi: np.ndarray) -> np.ndarray:
    return -(pi * np.log(np.where(pi > 0, pi, 1.0))).sum(-1)


def _sample(pi: np.ndarray, G: int, rng: np.random.Generator) -> np.ndarray:
    """G i.i.d. labels from each row of ``pi`` [..., V] -> [..., G] (inverse CDF, vectorised)."""
    cdf = np.cumsum(pi, -1)
    cdf[..., -1] = 1.0
    u = rng.random(pi.shape[:-1] + (G,))
    idx = (u[..., :, None] > cdf[..., None, :]).sum(-1)
    return np.minimum(idx, pi.shape[-1] - 1)


def head_gradient(pi: np.ndarray, H: np.ndarray, y: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Policy gradient of a linear softmax head, ``Σ_{b,i} A_{b,i} (e_{y_{b,i}} − π_b) ⊗ h_b``.

    FADE App. 15.1, Eq. 32 (``g_i = A_i v_i ⊗ h_i``, ``v_i = e_{y_i} − π_i``); it is the
    gradient of ``Σ A_{b,i} log π(y_{b,i} | h_b)`` with respect to ``W`` (V × d).

    Parameters
    ----------
    pi : ndarray, shape (C, B, V)
        Policy at each context.
    H : ndarray, shape (C, B, d) or (B, d)
        Features of each context.
    y : ndarray of int, shape (C, B, G)
        Sampled labels.
    A : ndarray, shape (C, B, G)
        Advantages.

    Returns
    -------
    ndarray, shape (C, V, d)
    """
    C, B, _ = y.shape
    u = -A.sum(-1)[..., None] * pi                     # Σ_i A_i (e_{y_i} − π), per context
    np.add.at(u, (np.arange(C)[:, None, None], np.arange(B)[None, :, None], y), A)
    return np.einsum("cbv,cbd->cvd" if H.ndim == 3 else "cbv,bd->cvd", u, H)


class _Optimizer:
    """Gradient ascent on a [C, V, d] parameter: SGD, heavy-ball momentum (torch SGD with
    momentum 0.9, dampening 0) or AdamW (torch.optim.AdamW semantics, decoupled weight decay)."""

    def __init__(self, name: str, lr: float, shape: tuple[int, ...], *, momentum: float = 0.9,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01):
        self.name, self.lr = name, lr
        self.momentum, self.betas, self.eps, self.wd = momentum, betas, eps, weight_decay
        self.m = np.zeros(shape)
        self.v = np.zeros(shape)
        self.t = 0

    def step(self, W: np.ndarray, g: np.ndarray) -> np.ndarray:
        self.t += 1
        if self.name == "sgd":
            return W + self.lr * g
        if self.name == "momentum":
            self.m = g if self.t == 1 else self.momentum * self.m + g
            return W + self.lr * self.m
        b1, b2 = self.betas
        W = W * (1 - self.lr * self.wd)
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        mhat = self.m / (1 - b1**self.t)
        vhat = self.v / (1 - b2**self.t)
        return W + self.lr * mhat / (np.sqrt(vhat) + self.eps)


class _CalibrationHead:
    """Memory head of distribution-level calibration (Over-Sharpening Sec. 3.2, Alg. 1): logits
    ``f_φ = W_φ·h`` on the policy's features, ``W_φ`` [C, V, d] from 0 (uniform), its own
    optimizer.  The caller samples from ``softmax(f_θ − μ·f_φ)`` (lines 5-6); :meth:`update`
    takes one step on the mean cross-entropy of the sampled labels (line 22),
    ``∇_{W_φ} = (1/(B·G)) Σ_{b,i} (e_{y_{b,i}} − softmax(f_φ(h_b))) ⊗ h_b`` (ascent on the
    log-likelihood; :func:`head_gradient` with unit weights, as matrix products), so
    ``softmax(f_φ)`` tracks the frequencies of the sampled labels."""

    def __init__(self, optimizer: str, lr: float, shape: tuple[int, ...]):
        self.W = np.zeros(shape)
        self.opt = _Optimizer(optimizer, lr, shape)

    def logits(self, H: np.ndarray) -> np.ndarray:
        """``f_φ`` [C, B, V] at the contexts ``H`` [C, B, d] (a matrix product per configuration)."""
        return np.matmul(H, self.W.transpose(0, 2, 1))

    def update(self, H: np.ndarray, y: np.ndarray) -> None:
        """One step on the labels ``y`` [C, B, G] drawn at the contexts ``H`` [C, B, d]."""
        C, B, G = y.shape
        u = -G * softmax(self.logits(H))                     # Σ_i (e_{y_i} − softmax(f_φ)) per context
        np.add.at(u, (np.arange(C)[:, None, None], np.arange(B)[None, :, None], y), 1.0)
        g = np.matmul(u.transpose(0, 2, 1), H) / (B * G)
        with np.errstate(over="ignore", invalid="ignore"):
            self.W = self.opt.step(self.W, g)


class _Advantages:
    """Per-configuration advantages from :class:`rlvr_theory.policy.Policy`: one policy for a
    registry family (:func:`rlvr_theory.advantages.get`), applied to all configurations at once
    (a batch-level family to each configuration's batch), or one policy per configuration for a
    schedule (:func:`rlvr_theory.schedules.get`), each advanced with its configuration's mean
    reward and entropy.  ``H0[c]`` is the measured initial entropy of configuration ``c``; an
    ``H0`` in the parameters wins (the policy's rule).  An unknown name or parameter raises
    ``ValueError`` (the registries' messages)."""

    def __init__(self, name: str, params: dict[str, Any], C: int, H0: np.ndarray, steps: int | None = None):
        self.name = name
        if name in _sched.names():
            self.policies = [Policy(schedule=name, schedule_params=params, steps=steps, H0=float(h))
                             for h in np.broadcast_to(H0, (C,))]
            self.fixed: Policy | None = None
        else:
            self.policies = []
            self.fixed = Policy(advantage=name, advantage_params=params)

    def __call__(self, r: np.ndarray, entropy: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advantages [C, B, G] and the (alpha, delta) in force per configuration (NaN if none)."""
        C = r.shape[0]
        alpha = np.full(C, np.nan)
        delta = np.full(C, np.nan)
        if self.fixed is None:
            out = np.empty(r.shape)
            for c, pol in enumerate(self.policies):     # loop over configurations: scalar state only
                a = pol.advance(reward_mean=float(r[c].mean()), entropy=float(entropy[c]), step=step)
                out[c] = a(r[c])
                alpha[c] = a.params.get("alpha", np.nan)
                delta[c] = a.params.get("delta", np.nan)
            return out, alpha, delta
        adv = self.fixed.advantage
        if adv.batch_level:  # e.g. reinforce_pp: the batch of one configuration at a time
            return np.stack([adv(r[c]) for c in range(C)]), alpha, delta
        if "delta" in adv.params:
            delta[:] = adv.params["delta"]
        if "alpha" in adv.params:
            alpha[:] = adv.params["alpha"]
        return adv(r), alpha, delta


# ----------------------------------------------------------------------------- settings
#: the default a flag shows: a preset's value replaces the simulator's
_PRESET = {"default_text": "the preset's"}


def _shared_fields() -> dict[str, Any]:
    """Help text of the settings both instances share."""
    return dict(
        advantage_params=dict(help="parameters of the advantage or schedule (--param NAME=VALUE)"),
        optimizer=dict(help="optimizer of the head (and of the memory head)", choices=OPTIMIZERS, **_PRESET),
        lr=dict(help="learning rate", **_PRESET),
        steps=dict(help="training steps", **_PRESET),
        reduction=dict(help="sum or mean over the G rollouts of a prompt", choices=REDUCTIONS),
        log_every=dict(help="trajectory rows every log_every steps (and the last step)"),
    )


_ADVANTAGE_HELP = ("registry name (e.g. reinforce_pp) or schedule (fade, fade-log, agrae, fade-entropy, "
                   "fade-alpha-only, fade-delta-only)")


@dataclass
class ToySettings:
    """Settings of :func:`simulate_toy` (the Over-Sharpening toy), one field per keyword.

    ``G`` and ``similarity`` take one value or a list (a sweep); ``seeds`` a count (seeds
    ``0..n−1``) or a list of seeds.  :meth:`check` checks every field (before any work).
    """

    G: list[int] = field(default=4, metadata={"help": "group sizes (toy: a list; population: one value)",
                                                      **_PRESET})  # type: ignore[assignment]
    similarity: list[str] = field(default="High", metadata={  # type: ignore[assignment]
        "help": "Siamese variants: High, Mid, Low (toy only)", **_PRESET})
    seeds: int = field(default=1, metadata={"help": "number of seeds (0..S-1; a list of seeds from Python)",
                                            **_PRESET})
    advantage: str = field(default="dr_grpo", metadata={"help": _ADVANTAGE_HELP, **_PRESET})
    advantage_params: dict | None = field(default=None, metadata=_shared_fields()["advantage_params"])
    optimizer: str = field(default="sgd", metadata=_shared_fields()["optimizer"])
    lr: float = field(default=0.1, metadata=_shared_fields()["lr"])
    steps: int = field(default=500, metadata=_shared_fields()["steps"])
    reduction: str = field(default="sum", metadata=_shared_fields()["reduction"])
    log_every: int = field(default=1, metadata=_shared_fields()["log_every"])
    mu: float = mu_field("a memory head f_φ")
    memory_lr: float | None = memory_lr_field("memory head")

    def check(self) -> ToySettings:
        """Every field checked (:mod:`rlvr_plumbing.checks`; the size of the run first,
        :func:`check_size`); an unknown advantage or parameter is refused.  Returns the
        settings normalised: ``G``, ``similarity`` and ``seeds`` as lists, ``memory_lr`` the
        one in force (``lr`` unless given)."""
        Gs = [checks.integer("G", g, low=1) for g in np.atleast_1d(self.G).tolist()]
        sims = [self.similarity] if isinstance(self.similarity, str) else list(self.similarity)
        for s in sims:
            checks.choice("similarity", s, tuple(SIAMESE_VARIANTS))
        check_size("toy", G=Gs, similarity=sims, seeds=self.seeds, steps=self.steps, log_every=self.log_every)
        seed_list = _seed_list(self.seeds)
        _, steps, lr, log_every = _check_common(max(Gs), self.steps, self.lr, self.optimizer, self.reduction,
                                                self.log_every)
        mu, memory_lr = check_calibration(self.mu, self.memory_lr, model="memory head", lr=lr)
        params = dict(self.advantage_params or {})
        _Advantages(self.advantage, params, 1, np.ones(1), steps)  # an unknown name or parameter: refused
        return dataclasses.replace(self, G=Gs, similarity=sims, seeds=seed_list, advantage_params=params,
                                   steps=steps, lr=lr, log_every=log_every, mu=mu, memory_lr=memory_lr)


@dataclass
class PopulationSettings:
    """Settings of :func:`simulate_population` (the FADE App. 15 prompt population), one field
    per keyword.  ``K`` takes one value or a list (a sweep); ``seeds`` a count or a list of
    seeds.  :meth:`check` checks every field (before any work)."""

    M: int = field(default=32, metadata={"help": "prompts per step"})
    K: list[int] = field(default=4, metadata={"help": "failure modes (population only)", **_PRESET})  # type: ignore[assignment]
    tokens_per_mode: int = field(default=4, metadata={"help": "wrong-answer tokens per failure mode"})
    G: int = field(default=8, metadata={"help": "rollouts per prompt"})
    seeds: int = field(default=4, metadata={"help": "number of seeds (0..S-1; a list of seeds from Python)"})
    advantage: str = field(default="asym_grpo", metadata={"help": _ADVANTAGE_HELP})
    advantage_params: dict | None = field(default=None, metadata=_shared_fields()["advantage_params"])
    correct: str = field(default="per_prompt", metadata={
        "help": "one correct answer per prompt, or one shared by all", "choices": ("per_prompt", "shared")})
    solve_rates: tuple[float, float] = field(default=(0.1, 0.9), metadata={
        "help": "range (lo, hi) of the good-path probabilities"})
    rho_success: float = field(default=0.8, metadata={"help": "correlation of the good-path hidden states"})
    rho_failure: float = field(default=0.8, metadata={"help": "correlation of the failure-mode hidden states"})
    shared: float = field(default=0.5, metadata={"help": "weight of the shared direction u_1"})
    init_scale: float = field(default=5.0, metadata={"help": "scale of the initial head"})
    feature_seed: int = field(default=0, metadata={"help": "seed of the fixed features"})
    optimizer: str = field(default="sgd", metadata=_shared_fields()["optimizer"])
    lr: float = field(default=0.05, metadata=_shared_fields()["lr"])
    steps: int = field(default=100, metadata=_shared_fields()["steps"])
    reduction: str = field(default="sum", metadata=_shared_fields()["reduction"])
    log_every: int = field(default=10, metadata=_shared_fields()["log_every"])
    mu: float = mu_field("a memory head f_φ")
    memory_lr: float | None = memory_lr_field("memory head")

    def check(self) -> PopulationSettings:
        """Every field checked as :meth:`ToySettings.check` does (the size first); returns the
        settings normalised (``K`` and ``seeds`` as lists, ``memory_lr`` the one in force)."""
        M = checks.integer("M", self.M, low=1)
        Ks = [checks.integer("K", k, low=1) for k in np.atleast_1d(self.K).tolist()]
        check_size("population", M=M, K=Ks, tokens_per_mode=self.tokens_per_mode, G=self.G, seeds=self.seeds,
                   correct=self.correct, steps=self.steps, log_every=self.log_every)
        seed_list = _seed_list(self.seeds)
        G, steps, lr, log_every = _check_common(self.G, self.steps, self.lr, self.optimizer, self.reduction,
                                                self.log_every)
        mu, memory_lr = check_calibration(self.mu, self.memory_lr, model="memory head", lr=lr)
        params = dict(self.advantage_params or {})
        _Advantages(self.advantage, params, 1, np.ones(1), steps)  # an unknown name or parameter: refused
        return dataclasses.replace(self, M=M, K=Ks, G=G, seeds=seed_list, advantage_params=params, steps=steps,
                                   lr=lr, log_every=log_every, mu=mu, memory_lr=memory_lr)


def _settings(cls: type, given: Any, kw: dict[str, Any]) -> Any:
    """``cls(**kw)``, or ``given`` (an instance of ``cls``) with ``kw`` replaced."""
    if given is None:
        return cls(**kw)
    if not isinstance(given, cls):
        raise TypeError(f"settings must be a {cls.__name__}, got {type(given).__name__}")
    return dataclasses.replace(given, **kw)


# ----------------------------------------------------------------------------- instance 1
def simulate_toy(settings: ToySettings | None = None, /, *, progress: bool = False,
                 **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The softmax toy of Over-Sharpening Sec. 2.4 (Fig. 1-2), App. G (Fig. 3-4), App. H (Fig. 5).

    Labels :data:`TOY_LABELS` with the 4-d embeddings of
    :data:`rlvr_theory.sharpening.TOY_EMBEDDINGS` as the *inputs* ``h(x)``; ``W`` (4 × 4)
    starts at 0.  Each step samples ``G`` labels for the Persian input only, reward 1 for
    Cat or Persian, and updates ``W`` (see the module docstring).  The held-out Siamese input
    uses the embedding of :data:`SIAMESE_VARIANTS` ``[similarity]``.  All combinations of
    ``G × similarity × seeds`` run together as one batch.

    Parameters
    ----------
    settings : ToySettings, optional
        The settings as one object (the keywords below replace its fields); or give the fields
        as keywords (``simulate_toy(G=4, ...)`` runs ``ToySettings(G=4, ...)``).
    progress : bool
        A tqdm bar per group size.
    G : int or sequence of int >= 1
        Group sizes.
    similarity : "High", "Mid", "Low" or a sequence of them
        Siamese variant (Over-Sharpening App. G).
    seeds : int (count: seeds 0..n-1) or sequence of int
        One independent run per seed (seed ``s`` → ``numpy.random.default_rng(s)``; the
        other axes of the sweep share the sampler per seed and group size).
    advantage, advantage_params
        A registry name (:func:`rlvr_theory.advantages.names`) or a schedule
        (:func:`rlvr_theory.schedules.names`) and its parameters; an unknown name or parameter
        is refused before any work.  Over-Sharpening uses ``reinforce`` (raw), ``dr_grpo``
        (mean-shifted), ``grpo`` (normalised), ``rloo``, ``reinforce_pp``; IAC is ``iac``.
    optimizer : "sgd", "momentum", "adamw"
    lr : float > 0
    steps : int >= 1
        500 in Over-Sharpening.
    reduction : "sum" or "mean"
        Sum or mean over the G rollouts.
    log_every : int >= 1
        Trajectory rows every ``log_every`` steps (and the last step).
    mu : float >= 0
        Distribution-level calibration (DLC, Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and
        21-22): weight of the memory head.  ``0`` (default) uses no memory: the run is the
        uncalibrated one, bit for bit.  ``mu > 0`` adds a memory head ``W_φ`` (4 × 4, on the
        same features, starting at 0); rollouts are drawn from ``softmax((W − μ·W_φ)·h)``
        while the policy gradient keeps the policy's own ``log π_θ`` (Eq. 3, no importance
        weight); after the policy step, ``W_φ`` takes its own optimizer step (same
        ``optimizer`` kind, own state) on the cross-entropy of the sampled labels, the mean
        over the group.  Over-Sharpening Fig. 5b/5d uses ``mu = 0.5``.
    memory_lr : float > 0 or None
        Learning rate of the memory head (``None``: ``lr``).  Only with ``mu > 0``.

    Returns
    -------
    trajectory, final : DataFrame
        ``final.attrs["weights"]``: ``{G: W}`` with ``W`` of shape (configurations, 4, 4),
        rows in the order of ``final`` for that ``G`` (``W_0 = 0``, so ``W = ΔW``).
        Long form, one row per configuration (and step): ``G``, ``similarity``, ``seed``,
        ``advantage``, ``optimizer``, ``lr``, ``p_cat``, ``p_persian``, ``p_dog``,
        ``p_siamese_train`` (π(Siamese|Persian)), ``siamese_acc`` (π(Siamese|Siamese)),
        ``reward_mean``, ``entropy``, ``winner_share`` (max(p_cat, p_persian)/(p_cat+p_persian)).
        With ``mu > 0`` also ``q_cat``, ``q_persian``, ``sample_entropy`` (the calibrated
        sampling distribution at Persian), ``mu``, ``memory_lr``, and
        ``final.attrs["memory_weights"]``: ``{G: W_φ}``.

    Examples
    --------
    Group sizes 4 and 16, two seeds, 100 SGD steps with the mean-shifted advantage: the
    rewarded mass drifts onto one of Cat and Persian (``winner_share`` above 1/2), and the
    held-out Siamese input loses its own label, faster with the larger group:

    >>> tr, final = simulate_toy(G=[4, 16], seeds=2, steps=100, advantage="dr_grpo")
    >>> final[["G", "seed", "p_cat", "p_persian", "siamese_acc", "winner_share"]].round(3)
        G  seed  p_cat  p_persian  siamese_acc  winner_share
    0   4     0  0.193      0.761        0.040         0.798
    1   4     1  0.601      0.353        0.050         0.630
    2  16     0  0.108      0.885        0.014         0.892
    3  16     1  0.373      0.620        0.015         0.625

    Raw rewards collapse onto one label; with a memory head (μ = 0.5) the rollouts come from the
    flatter ``q`` and both rewarded labels keep their mass:

    >>> for mu in (0.0, 0.5):
    ...     _, fin = simulate_toy(G=4, seeds=4, steps=300, advantage="reinforce", mu=mu)
    ...     print(fin.winner_share.round(3).tolist())
    [0.952, 0.987, 0.967, 0.99]
    [0.553, 0.698, 0.665, 0.6]
    >>> fin[["seed", "p_cat", "p_persian", "q_cat", "q_persian"]].round(3)
       seed  p_cat  p_persian  q_cat  q_persian
    0     0  0.442      0.547  0.439      0.520
    1     1  0.299      0.691  0.347      0.618
    2     2  0.332      0.658  0.377      0.588
    3     3  0.396      0.593  0.460      0.502
    """
    import pandas as pd

    s = _settings(ToySettings, settings, kw).check()  # before any work
    Gs, sims, seed_list, params = s.G, s.similarity, s.seeds, s.advantage_params
    steps, lr, log_every, optimizer, reduction = s.steps, s.lr, s.log_every, s.optimizer, s.reduction
    advantage, mu, memory_lr = s.advantage, s.mu, s.memory_lr

    x_train = np.asarray(TOY_EMBEDDINGS["Persian"])
    correct = np.array([1.0, 0.0, 1.0, 0.0])          # Cat, Dog, Persian, Siamese
    # one group of runs per group size (G varies the sampled shape); the rest batched
    frames_t, weights, calibration_weights = [], {}, {}
    for g in Gs:
        combos = [(sim, sd) for sd in seed_list for sim in sims]
        C = len(combos)
        names = [f"G={g}, similarity={sim}, seed={sd}" for sim, sd in combos]
        x_eval = np.array([SIAMESE_VARIANTS[s] for s, _ in combos])       # [C, d]
        rngs = {sd: np.random.default_rng(sd) for sd in seed_list}
        W = np.zeros((C, 4, 4))
        opt = _Optimizer(optimizer, lr, W.shape)
        calib = _CalibrationHead(optimizer, memory_lr, W.shape) if mu > 0 else None
        H = np.broadcast_to(x_train, (C, 1, 4))
        pi0 = softmax(np.einsum("cvd,cbd->cbv", W, H))
        rule = _Advantages(advantage, params, C, _entropy(pi0)[:, 0], steps)
        rows = []
        it = range(steps + 1)
        if progress:
            from tqdm.auto import tqdm
            it = tqdm(it, desc=f"linear-head toy G={g}", leave=False)
        for t in it:
            z = np.einsum("cvd,cbd->cbv", W, H)                           # [C, 1, 4] logits
            pi = softmax(z)
            ent = _entropy(pi)[:, 0]
            # Alg. 1 lines 5-6 (line 8 without memory): rollouts from softmax(f_θ − μ·f_φ)
            q = pi if calib is None else softmax(z - mu * calib.logits(H))
            if t % log_every == 0 or t == steps:
                pe = softmax(np.einsum("cvd,cd->cv", W, x_eval))
                # max(p_cat, p_persian)/(p_cat + p_persian) from the logits: finite when both underflow
                share = 1 / (1 + np.exp(-np.abs(z[:, 0, 0] - z[:, 0, 2])))
                rows.append(dict(step=t, p_cat=pi[:, 0, 0], p_dog=pi[:, 0, 1], p_persian=pi[:, 0, 2],
                                 p_siamese_train=pi[:, 0, 3], siamese_acc=pe[:, 3], entropy=ent,
                                 reward_mean=np.full(C, np.nan), winner_share=share))
                if calib is not None:
                    rows[-1].update(q_cat=q[:, 0, 0], q_persian=q[:, 0, 2], sample_entropy=_entropy(q)[:, 0])
            if t == steps:
                break
            # one sampler per seed: configurations of the same seed see the same uniforms
            draws = {sd: rngs[sd].random((1, g)) for sd in seed_list}
            u = np.stack([draws[sd] for _, sd in combos])                 # [C, 1, G]
            cdf = np.cumsum(q, -1)
            y = np.minimum((u[..., None] > cdf[..., None, :]).sum(-1), 3)
            r = correct[y]
            A, _, _ = rule(r, ent, t)
            grad = head_gradient(pi, H, y, A)          # the policy's own log-probabilities (Eq. 3)
            if reduction == "mean":
                grad = grad / g
            with np.errstate(over="ignore", invalid="ignore"):  # a diverging run is refused just below
                W = opt.step(W, grad)
            _check_finite(W, t + 1, lr, names)
            if calib is not None:                                         # Alg. 1 lines 21-22
                calib.update(H, y)
                _check_finite(calib.W, t + 1, memory_lr, names, "non-finite memory weights")
            if t % log_every == 0:
                rows[-1]["reward_mean"] = r.mean((1, 2))
        # one frame from the logged rows (each row: C configurations), built column by column
        cols: dict[str, Any] = {"step": np.repeat(np.array([row["step"] for row in rows], dtype=np.int64), C),
                                "G": np.full(C * len(rows), g, dtype=np.int64),
                                "similarity": [s for s, _ in combos] * len(rows),
                                "seed": np.array([sd for _, sd in combos] * len(rows), dtype=np.int64)}
        cols.update({k: np.concatenate([np.asarray(row[k], dtype=float) for row in rows])
                     for k in rows[0] if k != "step"})
        tr = pd.DataFrame(cols)
        frames_t.append(tr)
        weights[g] = W
        if calib is not None:
            calibration_weights[g] = calib.W
    tr = pd.concat(frames_t, ignore_index=True)
    tr["advantage"], tr["optimizer"], tr["lr"] = advantage, optimizer, lr
    if mu > 0:
        tr["mu"], tr["memory_lr"] = mu, memory_lr
    tr["winner_share"] = tr.pop("winner_share")  # the last column
    final = tr[tr.step == steps].drop(columns=["reward_mean"], errors="ignore").reset_index(drop=True)
    final.attrs["weights"] = weights
    if mu > 0:
        final.attrs["memory_weights"] = calibration_weights
    return tr, final


# ----------------------------------------------------------------------------- instance 2
def population_features(M: int, K: int, *, rho_success: float = 0.8, rho_failure: float = 0.8,
                        shared: float = 1.0, n_noise: int = 16, seed: int = 0
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Fixed hidden features of the prompt population (FADE App. 15.1-15.2, Cor. 15.2 geometry).

    An orthonormal basis (QR of a Gaussian matrix, ``seed``) of ``R^d``, ``d = 2 + K +
    n_noise``, holds the shared direction ``u_1``, a success direction ``s``, ``K`` mutually
    orthogonal failure-mode directions ``μ_k``; the last ``n_noise`` directions carry unit
    noise vectors ``ζ`` (one per prompt and path).  Each rollout of prompt ``m`` follows a
    *reasoning path* ``z``: the good path ``z = 0`` or one of the ``K`` failure modes, and the
    answer token is read at the hidden state

        h_{m,0} = a·u_1 + √ρ_S·s   + √(1−ρ_S)·ζ_{m,0}      (good path)
        h_{m,k} = a·u_1 + √ρ_F·μ_k + √(1−ρ_F)·ζ_{m,k}      (failure mode k = 1..K)

    (``a`` = ``shared``).  The perpendicular parts of two good-path states have cosine
    ``≈ ρ_S``; two failure states share a mode with probability ``1/K``, so their mean
    cosine is ``≈ ρ_F/K``: ``K`` and ``ρ_F`` control how decorrelated failures are (FADE
    Table 10 measures correct rollouts 3-4× more correlated than failed ones).

    Returns
    -------
    H : ndarray (M, K+1, d)
        Hidden state of each (prompt, path).
    dirs : ndarray (K+1, d)
        ``s`` and the ``μ_k``.
    zeta : ndarray (M, K+1, d)
        The noise vectors ``ζ_{m,z}``.
    """
    M, K = checks.integer("M", M, low=1), checks.integer("K", K, low=1)
    a = checks.number("shared", shared, low=0)
    rs = checks.probability("rho_success", rho_success)
    rf = checks.probability("rho_failure", rho_failure)
    n_noise = checks.integer("n_noise", n_noise, low=1)
    rng = np.random.default_rng(checks.integer("seed", seed, low=0))
    d = 2 + K + n_noise
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    B = Q.T                                            # rows: orthonormal directions
    u1, dirs, noise = B[0], B[1:2 + K], B[2 + K:]
    z = rng.standard_normal((M, K + 1, n_noise)) @ noise
    z /= np.linalg.norm(z, axis=-1, keepdims=True)
    rho = np.array([rs] + [rf] * K)[:, None]
    H = a * u1 + np.sqrt(rho) * dirs + np.sqrt(1 - rho) * z
    return H, dirs, z


def population_setup(M: int, K: int, *, tokens_per_mode: int = 4, correct: str = "per_prompt",
                     solve_rates: tuple[float, float] = (0.1, 0.9), rho_success: float = 0.8,
                     rho_failure: float = 0.8, shared: float = 0.5, init_scale: float = 5.0,
                     feature_seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Contexts, path probabilities, correct answers and initial head of :func:`simulate_population`.

    Returns
    -------
    H : ndarray (M, K+1, d)
        Hidden state of each (prompt, path) (:func:`population_features`).
    path_p : ndarray (M, K+1)
        Path probabilities: ``g_m`` for the good path, ``(1−g_m)/K`` per failure mode.
    correct_idx : ndarray of int (M,)
        ``c_m``.
    W0 : ndarray (V, d)
        Initial head, ``V = (M or 1) + K·tokens_per_mode``.
    """
    M, K = checks.integer("M", M, low=1), checks.integer("K", K, low=1)
    tpm = checks.integer("tokens_per_mode", tokens_per_mode, low=1)
    c0 = checks.number("init_scale", init_scale, low=0)
    checks.choice("correct", correct, ("per_prompt", "shared"))
    if correct == "per_prompt" and checks.probability("rho_success", rho_success) >= 1:
        raise ValueError(f"rho_success must be < 1 with correct='per_prompt' (the prompt is told apart by "
                         f"its √(1−ρ_S)·ζ part), got {rho_success!r}")
    rates = checks.array("solve_rates", solve_rates, ndim=1, low=0, high=1, low_open=True, high_open=True)
    if len(rates) != 2 or rates[0] > rates[1]:
        raise ValueError(f"solve_rates must be a pair (lo, hi) with 0 < lo <= hi < 1, got {solve_rates!r}")
    lo, hi = (float(v) for v in rates)
    H, dirs, zeta = population_features(M, K, rho_success=rho_success, rho_failure=rho_failure,
                                        shared=shared, seed=feature_seed)
    n_c = M if correct == "per_prompt" else 1
    cm = np.arange(M) if correct == "per_prompt" else np.zeros(M, dtype=int)
    gm = np.linspace(lo, hi, M)
    path_p = np.concatenate([gm[:, None], np.repeat(((1 - gm) / K)[:, None], K, 1)], 1)
    n_wrong = K * tpm
    W0 = np.zeros((n_c + n_wrong, H.shape[-1]))
    if correct == "per_prompt":
        W0[:n_c] = c0 * zeta[:, 0] / np.sqrt(1 - rho_success)       # logit c0 on the good path
    else:
        W0[0] = c0 * dirs[0]
    W0[n_c:] = c0 * dirs[1 + np.arange(n_wrong) // tpm]
    return H, path_p, cm, W0


def expected_gradient(W: np.ndarray, H: np.ndarray, path_p: np.ndarray, correct: np.ndarray,
                      advantage: Any, G: int) -> np.ndarray:
    """Exact expectation of one step's head gradient (reduction "sum", divided by the prompt count).

    ``E[g] = (1/M) Σ_m Σ_z P(z|m) Σ_y π(y|h_{m,z}) · G·E[A_i | r_i = r(y)] · (e_y − π(·|h_{m,z})) ⊗ h_{m,z}``

    where the prompt's group has ``X ~ Binom(G, p_m)`` successes, ``p_m = Σ_z P(z|m) π(correct|h_{m,z})``,
    and ``E[A_i | r_i]`` sums the registry advantage of a group with ``X' + r_i`` successes
    over ``X' ~ Binom(G−1, p_m)`` (the other rollouts).  An independent check of the sampled
    simulator (no sampling, enumeration over ``X'``).  FADE Eq. 2-3 / App. 15.1 ``E[g_i]``.

    Parameters
    ----------
    W : ndarray (V, d)
    H : ndarray (M, Z, d)
        Contexts (the toy: ``Z = 1``).
    path_p : ndarray (M, Z)
        Context probabilities per prompt (rows sum to 1).
    correct : ndarray of bool (M, V) or of int (M,)
        Correct answers: a mask, or one index per prompt.
    advantage : registry :class:`~rlvr_theory.advantages.Advantage` (group-level) or name
    G : int >= 1

    Returns
    -------
    ndarray (V, d)
    """
    from scipy.stats import binom

    adv = _adv.get(advantage) if isinstance(advantage, str) else advantage
    if adv.batch_level:
        raise ValueError("advantage must be group-level (batch-level advantages have no per-group expectation)")
    G = checks.integer("G", G, low=adv.min_group_size())
    W, H, path_p = np.asarray(W, float), np.asarray(H, float), np.asarray(path_p, float)
    M, V = H.shape[0], W.shape[0]
    corr = np.asarray(correct)
    mask = corr.astype(bool) if corr.ndim == 2 else (np.arange(V)[None, :] == corr[:, None])
    pi = softmax(np.einsum("vd,mzd->mzv", W, H))                        # (M, Z, V)
    p = ((pi * mask[:, None, :]).sum(-1) * path_p).sum(-1)             # (M,)
    X = np.arange(G + 1)
    groups = (np.arange(G)[None, :] < X[:, None]).astype(float)         # X successes first
    A = adv(groups)                                                     # (G+1, G)
    a_succ = A[X, 0]                                                    # a success in a group with X successes
    a_fail = A[X, G - 1]                                                # a failure in a group with X successes
    xs = np.arange(G)                                                   # X' = successes among the others
    w = binom.pmf(xs[None, :], G - 1, p[:, None])                       # (M, G)
    eA_s = (w * a_succ[xs + 1]).sum(-1)
    eA_f = (w * a_fail[xs]).sum(-1)
    eA = np.where(mask, eA_s[:, None], eA_f[:, None])                   # (M, V)
    u = path_p[..., None] * pi * eA[:, None, :]
    u = u - u.sum(-1, keepdims=True) * pi
    return G * np.einsum("mzv,mzd->vd", u, H) / M


def _population_policy(W: np.ndarray, H: np.ndarray, cm: np.ndarray,
                       path_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Policy ``[C, M, K+1, V]`` of the heads ``W`` at every (prompt, path), the exact solve rate
    and the path-weighted mean answer entropy per configuration."""
    pi = softmax(np.einsum("cvd,mzd->cmzv", W, H))
    return (pi, *_population_stats(pi, cm, path_p))


def _population_stats(pi: np.ndarray, cm: np.ndarray, path_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact solve rate and path-weighted mean entropy per configuration of ``pi`` [C, M, K+1, V]."""
    pc = np.take_along_axis(pi, np.broadcast_to(cm[None, :, None, None], pi.shape[:3] + (1,)), -1)[..., 0]
    return (pc * path_p).sum(-1).mean(-1), (_entropy(pi) * path_p).sum(-1).mean(-1)


def simulate_population(settings: PopulationSettings | None = None, /, *, progress: bool = False,
                        **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Population of ``M`` prompts with ``K`` failure modes: the rank-1 funnel (FADE App. 15, Fig. 8).

    Each rollout of prompt ``m`` first follows a reasoning path (fixed, not learned): the good
    path with probability ``g_m`` (evenly spaced over ``solve_rates``), else one of the ``K``
    failure modes uniformly.  The head ``W`` (V × d) then emits the answer token
    ``y ~ softmax(W h_{m,z})`` at the path's hidden state (:func:`population_features`);
    reward 1 iff ``y = c_m``.  Vocabulary: the correct answers, then ``K·tokens_per_mode``
    wrong answers, wrong answer ``j`` (counted from 0) in mode ``k(j) = ⌊j/tokens_per_mode⌋``:
    every mode has the same number of tokens, so ``‖E[A v | k]‖`` does not depend on ``K``
    (the hypothesis of Cor. 15.2; with a fixed number of wrong tokens shared out among the
    modes it would, and the K-trend of ``r1`` is then not monotone).

    * ``correct="per_prompt"``: ``c_m = m`` (``V = M + K·tokens_per_mode``), initial head
      ``W_0 = c·(Σ_m e_{c_m} ⊗ ζ_{m,0}/√(1−ρ_S) + Σ_j e_j ⊗ μ_{k(j)})`` (needs ``ρ_S < 1``);
    * ``correct="shared"``: ``c_m = 0`` for all prompts (``V = 1 + K·tokens_per_mode``, like FADE's
      "code" tokens), ``W_0 = c·(e_0 ⊗ s + Σ_j e_j ⊗ μ_{k(j)})``;

    (``c`` = ``init_scale``): the good path favours the correct answer, failure mode ``k``
    its own block of wrong answers, so the failure signals ``E[A v | k]`` differ across
    modes (Cor. 15.2).  Every step all ``M`` prompts get ``G`` rollouts.  Every
    ``log_every`` steps the SVD metrics of ``ΔW = W_t − W_0`` come from
    :func:`analysis.spectra.summary` (``r1`` = FADE Eq. 33's ``σ1²/‖ΔW‖_F²``).

    Parameters
    ----------
    settings : PopulationSettings, optional
        The settings as one object (the keywords below replace its fields); or give the fields
        as keywords (:class:`PopulationSettings`).
    progress : bool
        A tqdm bar per ``K``.
    M, G : int >= 1
        Prompts per step and rollouts per prompt.
    K : int >= 1 or sequence
        Failure modes; each value is one block of the sweep.
    tokens_per_mode : int >= 1
        Wrong-answer tokens per failure mode.
    seeds : int (count) or sequence of int
        Training seeds, batched (``numpy.random.default_rng(seed)``, one per configuration).
    advantage, advantage_params
        As in :func:`simulate_toy`; ``asym_grpo`` with ``delta`` for Prop. 15.1, ``fade`` for the
        FADE controller (``advantage_params`` go to :func:`rlvr_theory.schedules.get`; the
        schedule's ``H0`` is the initial mean answer entropy unless given).
    correct : "per_prompt" or "shared"
    solve_rates : (lo, hi) with 0 < lo <= hi < 1
        Range of the good-path probabilities ``g_m``.
    rho_success, rho_failure : float in [0, 1]
    shared : float >= 0
        Weight ``a`` of the shared direction ``u_1``.
    init_scale : float >= 0
    feature_seed : int >= 0
        Seed of the fixed features.
    optimizer, lr, steps, reduction, log_every : see :func:`simulate_toy`.
    mu, memory_lr
        Distribution-level calibration as in :func:`simulate_toy`: a memory head ``W_φ``
        (V × d, from 0) on the same hidden states; the answer token of every rollout is drawn
        from ``softmax((W − μ·W_φ)·h_{m,z})`` (the path ``z`` is not learned and is drawn as
        without memory), the policy gradient keeps ``log π_θ``, and ``W_φ`` takes one step on
        the cross-entropy of the drawn answers (mean over the ``M·G`` rollouts) after the
        policy step.  ``mu = 0`` (default): no memory, the uncalibrated run bit for bit.

    Returns
    -------
    trajectory, final : DataFrame
        Columns ``step``, ``K``, ``seed``, ``reward_mean`` (that step's batch), ``solve_rate``
        (exact mean success probability), ``entropy`` (mean answer entropy over prompts and
        paths, path-weighted), ``alpha``, ``delta`` (in force at that step; NaN if none),
        ``r1``, ``s1_s2``, ``stable_rank``, ``dW_norm`` (NaN at step 0), plus the settings.
        With ``mu > 0`` also ``sample_solve_rate`` and ``sample_entropy`` (the same two under
        the calibrated sampling distribution), ``mu``, ``memory_lr``, and
        ``final.attrs["memory_weights"]``: ``{K: W_φ}``.
        The last two columns, ``grad_cos`` and ``grad_u_cos``, are the alignment of successive
        head gradients (FADE Cor. 15.3, cross-step accumulation): the row of step ``t`` holds
        :func:`analysis.spectra.successive_alignment` ``(g_{t−1}, g_t)`` of the policy
        gradients ``g`` that steps ``t − 1`` and ``t`` computed (the raw gradient, before the
        optimizer transforms it; ``cos`` of the flattened matrices, ``|cos|`` of their leading
        right singular vectors); NaN at step 0, at the last step (no gradient is computed
        there) and where a gradient is zero.  They change nothing else: the other columns are
        those of a run without them, bit for bit.
        ``final.attrs["weights"]``: ``{K: (W0, W)}``, ``W`` of shape (seeds, V, d).
    """
    import pandas as pd

    from analysis import spectra

    s = _settings(PopulationSettings, settings, kw).check()  # before any work
    M, Ks, G, seed_list, params = s.M, s.K, s.G, s.seeds, s.advantage_params
    steps, lr, log_every, optimizer, reduction = s.steps, s.lr, s.log_every, s.optimizer, s.reduction
    advantage, correct, mu, memory_lr = s.advantage, s.correct, s.mu, s.memory_lr
    C = len(seed_list)
    out, weights, calibration_weights = [], {}, {}
    for k in Ks:
        H, path_p, cm, W0 = population_setup(M, k, tokens_per_mode=s.tokens_per_mode, correct=correct,
                                             solve_rates=s.solve_rates, rho_success=s.rho_success,
                                             rho_failure=s.rho_failure, shared=s.shared, init_scale=s.init_scale,
                                             feature_seed=s.feature_seed)
        V = W0.shape[0]
        W = np.broadcast_to(W0, (C,) + W0.shape).copy()
        opt = _Optimizer(optimizer, lr, W.shape)
        calib = _CalibrationHead(optimizer, memory_lr, W.shape) if mu > 0 else None
        rngs = [np.random.default_rng(sd) for sd in seed_list]
        _, _, ent0 = _population_policy(W, H, cm, path_p)
        rule = _Advantages(advantage, params, C, ent0, steps)
        names = [f"K={k}, seed={sd}" for sd in seed_list]
        it = range(steps + 1)
        if progress:
            from tqdm.auto import tqdm
            it = tqdm(it, desc=f"linear-head population K={k}", leave=False)
        rows = []
        prev_grad: np.ndarray | None = None                 # the previous step's head gradient [C, V, d]
        ci, mi, gi = np.arange(C)[:, None, None], np.arange(M)[None, :, None], np.arange(G)[None, None, :]
        for t in it:
            pi, solve, ent = _population_policy(W, H, cm, path_p)
            if calib is not None:   # Alg. 1 lines 5-6: f_θ − μ·f_φ = (W − μ·W_φ)·h, both heads linear in h
                q = softmax(np.matmul(H.reshape(-1, H.shape[-1]), (W - mu * calib.W).transpose(0, 2, 1))
                            ).reshape(pi.shape)
            logged = t % log_every == 0 or t == steps
            if logged:
                row = dict(step=t, seed=seed_list, solve_rate=solve, entropy=ent, reward_mean=np.full(C, np.nan),
                           alpha=np.full(C, np.nan), delta=np.full(C, np.nan))
                if calib is not None:
                    row["sample_solve_rate"], row["sample_entropy"] = _population_stats(q, cm, path_p)
                specs = [_spectrum(W[c] - W0, t, lr, names[c]) if t > 0 else None for c in range(C)]
                for key in ("rank1_fraction", "s1_s2", "stable_rank", "fro_norm"):
                    row[key] = [np.nan if sp_ is None else sp_[key] for sp_ in specs]
                rows.append(row)
            if t == steps:
                break
            z = np.stack([_sample(path_p, G, rng) for rng in rngs])              # [C, M, G] paths
            pz = pi[ci, mi, z]                                                   # [C, M, G, V]
            qz = pz if calib is None else q[ci, mi, z]                           # sampling distribution
            u = np.stack([rng.random((M, G)) for rng in rngs])
            y = np.minimum((u[..., None] > np.cumsum(qz, -1)).sum(-1), V - 1)    # [C, M, G]
            r = (y == cm[:, None]).astype(float)
            A, alpha, delta = rule(r, ent, t)
            w = -A[..., None] * pz                     # the policy's own log-probabilities (Eq. 3)
            np.add.at(w, (ci, mi, gi, y), A)
            Hz = H[np.arange(M)[None, :, None], z]                               # [C, M, G, d]
            grad = np.einsum("cmgv,cmgd->cvd", w, Hz)
            grad /= M * (G if reduction == "mean" else 1)
            with np.errstate(over="ignore", invalid="ignore"):  # a diverging run is refused just below
                W = opt.step(W, grad)
            _check_finite(W, t + 1, lr, names)
            if calib is not None:                      # Alg. 1 lines 21-22: one context per rollout
                calib.update(Hz.reshape(C, M * G, -1), y.reshape(C, M * G, 1))
                _check_finite(calib.W, t + 1, memory_lr, names, "non-finite memory weights")
            if logged:
                rows[-1]["reward_mean"], rows[-1]["alpha"], rows[-1]["delta"] = r.mean((1, 2)), alpha, delta
                # FADE Cor. 15.3: alignment of this step's head gradient with the previous step's
                rows[-1]["grad_cos"], rows[-1]["grad_u_cos"] = (
                    spectra.successive_alignment(prev_grad, grad) if prev_grad is not None
                    else (np.full(C, np.nan), np.full(C, np.nan)))
            prev_grad = grad                               # g_t, before the optimizer transforms it
        df = pd.concat([pd.DataFrame(r_) for r_ in rows], ignore_index=True)
        df.insert(1, "K", k)
        out.append(df)
        weights[k] = (W0, W)
        if calib is not None:
            calibration_weights[k] = calib.W
    tr = pd.concat(out, ignore_index=True).rename(columns={"rank1_fraction": "r1", "fro_norm": "dW_norm"})
    tr["advantage"] = advantage
    tr["advantage_params"] = serialize.dumps(params, sort_keys=True)
    tr["correct"] = correct
    tr["M"], tr["G"], tr["tokens_per_mode"], tr["optimizer"], tr["lr"] = M, G, s.tokens_per_mode, optimizer, lr
    tr["rho_success"], tr["rho_failure"], tr["shared"] = s.rho_success, s.rho_failure, s.shared
    if mu > 0:
        tr["mu"], tr["memory_lr"] = mu, memory_lr
    for col in ("grad_cos", "grad_u_cos"):             # added columns: the last ones, after every earlier column
        tr[col] = tr.pop(col)
    final = tr[tr.step == steps].reset_index(drop=True)
    final.attrs["weights"] = weights
    if mu > 0:
        final.attrs["memory_weights"] = calibration_weights
    return tr, final


# ----------------------------------------------------------------------------- presets & CLI
#: named settings: (instance, keyword arguments of the simulator)
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "oversharpening-fig1": ("toy", dict(G=[4, 16, 64], similarity="High", seeds=8, advantage="dr_grpo")),
    "oversharpening-fig2": ("toy", dict(G=[4, 16, 64], similarity=["High", "Mid", "Low"], seeds=8,
                                        advantage="grpo")),
    "oversharpening-iac": ("toy", dict(G=[4, 16], similarity="High", seeds=8, advantage="iac")),
    "oversharpening-dlc": ("toy", dict(G=[4, 16], similarity="High", seeds=8, advantage="iac", mu=0.5)),
    "toy-small": ("toy", dict(G=[4, 16], similarity=["High", "Low"], seeds=2, steps=100)),
    "fade-rank1": ("population", dict(K=[2, 4, 8, 16], seeds=4, advantage="asym_grpo",
                                      advantage_params={"delta": 0.5})),
    "fade-fig8": ("population", dict(K=4, seeds=4, advantage="fade", correct="shared", init_scale=1.0,
                                     lr=0.1, steps=300, log_every=5)),
    "population-small": ("population", dict(M=8, K=[2, 4], seeds=2, steps=50, log_every=10)),
}


def run_preset(name: str, **overrides: Any) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Run the preset ``name`` of :data:`PRESETS` with some arguments replaced (``None`` = keep).

    Returns ``(trajectory, final, config)``; ``config`` holds every setting used.
    """
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {name!r}")
    instance, kw = PRESETS[name]
    kw = {**kw, **{k: v for k, v in overrides.items() if v is not None}}
    fn = simulate_toy if instance == "toy" else simulate_population
    defaults = {**_defaults(instance), "progress": False}
    check_size(instance, **kw, what=f"rlvr-sim linear-head --preset {name}")
    tr, final = fn(**kw)
    return tr, final, {"preset": name, "instance": instance, **defaults, **kw}


def _defaults(instance: str) -> dict[str, Any]:
    """The default of every field of :class:`ToySettings` (``instance="toy"``) or
    :class:`PopulationSettings`, in field order."""
    cls = ToySettings if instance == "toy" else PopulationSettings
    return {f.name: f.default for f in dataclasses.fields(cls)}


def check_size(instance: str, *, what: str | None = None, **kw: Any) -> int:
    """Refuse (``ValueError``) a run of :func:`simulate_toy` (``instance="toy"``) or
    :func:`simulate_population` (``"population"``) with the keyword arguments ``kw`` that cannot
    fit in memory, before any seed list or array is built; returns the estimated bytes.  The
    message starts with ``what`` (default ``"the linear-head toy"`` / ``"... population"``).

    The sizes are read (and checked) as Python integers: the toy holds ``~9`` numbers per
    configuration and rollout; the population ``~3`` policies ``[C, M, K+1, V]``, ``~4``
    arrays ``[C, M, G, V]`` and the gathered features ``[C, M, G, d]`` (``V = (M or 1) +
    K·tokens_per_mode``, ``d = K + 18``), with a memory head (``mu > 0``) two more of each of
    the first two (``~11`` numbers per rollout for the toy); both a trajectory of ``~25`` columns per
    configuration and logged step, three copies while it is assembled.

    >>> check_size("toy", G=[4, 16], seeds=2, steps=100) < 2**24
    True
    >>> check_size("toy", G=[10**12], steps=10)
    Traceback (most recent call last):
    ...
    ValueError: the linear-head toy (G up to 1000000000000, 1 configurations, steps=10) needs about ...
    """
    kw = {**_defaults(instance), **kw}
    seeds = kw["seeds"]
    S = checks.integer("seeds", seeds, low=1) if np.ndim(seeds) == 0 else len(seeds)
    steps = checks.integer("steps", kw["steps"], low=1)
    log_every = checks.integer("log_every", kw["log_every"], low=1)
    records = steps // log_every + 2
    calib = 2 * int(checks.number("mu", kw["mu"], low=0) > 0)   # the memory head's distributions
    if instance == "toy":
        Gs = [checks.integer("G", g, low=1) for g in np.atleast_1d(kw["G"]).tolist()]
        C = S * (1 if isinstance(kw["similarity"], str) else len(kw["similarity"]))
        nbytes = max(C * ((9 + calib) * 8 * g + 2_000) for g in Gs) + 3 * 8 * 25 * C * len(Gs) * records
        text = f"(G up to {max(Gs)}, {C * len(Gs)} configurations, steps={steps})"
    else:
        M, G = checks.integer("M", kw["M"], low=1), checks.integer("G", kw["G"], low=1)
        tpm = checks.integer("tokens_per_mode", kw["tokens_per_mode"], low=1)
        Ks = [checks.integer("K", k, low=1) for k in np.atleast_1d(kw["K"]).tolist()]
        V = {k: (M if kw["correct"] == "per_prompt" else 1) + k * tpm for k in Ks}
        nbytes = (max(8 * S * (M * ((3 + calib) * (k + 1) * V[k] + (4 + calib) * G * V[k] + G * (k + 18))
                          + 6 * V[k] * (k + 18))
                      for k in Ks) + 3 * 8 * 25 * S * len(Ks) * records)
        text = f"(M={M}, K up to {max(Ks)}, G={G}, {S * len(Ks)} configurations, steps={steps})"
    from rlvr_plumbing.runtime import check_memory

    check_memory(nbytes, f"{what or 'the linear-head ' + instance} {text}", device="cpu")
    return nbytes


#: the fields of :class:`ToySettings` with a flag, in the order of ``--help`` (``--K`` is
#: :class:`PopulationSettings`'; the toy's values go to either instance)
_TOY_FLAGS = ("steps", "G", "seeds", "similarity", "advantage", "optimizer", "lr", "mu", "memory_lr")


def _cli(args: argparse.Namespace) -> int:
    check_out(args)  # before any work
    params = runner.parse_params(args.param) or None
    if args.preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {args.preset!r}")
    instance = PRESETS[args.preset][0]
    over: dict[str, Any] = dict(runner.given_settings(args, ToySettings, names=_TOY_FLAGS),
                                advantage_params=params, progress=not args.quiet)
    if instance == "toy":
        for flag in ("K", "delta"):
            if getattr(args, flag) is not None:
                raise ValueError(f"{flag} applies to the population presets only")
        over["similarity"] = args.similarity
    else:
        if args.similarity is not None:
            raise ValueError("similarity applies to the toy presets only")
        over["K"] = args.K
        if args.delta is not None:
            over["advantage_params"] = {**(params or {}), "delta": args.delta}
        if args.G is not None:
            if len(args.G) != 1:
                raise ValueError("G must be a single value for the population presets")
            over["G"] = args.G[0]
    tr, final, config = run_preset(args.preset, **over)

    config.pop("progress", None)
    write_run(args.out, tr, final, config, settings=command_settings(args), seed=_seed_list(config["seeds"]),
              device="cpu", overwrite=args.overwrite)
    if not args.quiet:
        print(f"wrote {args.out}/trajectory.csv, final.csv, config.json ({len(final)} configurations)")
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``rlvr-sim linear-head --preset NAME [...] --out DIR`` to an argparse subparsers object."""
    ap = subparsers.add_parser("linear-head", help="linear softmax head (Over-Sharpening toy, FADE rank-1 funnel)",
                               description="Linear-head policy softmax(W h(x)) with fixed features.")
    ap.add_argument("--preset", required=True, help=f"one of: {', '.join(PRESETS)}")
    runner.add_settings(ap, ToySettings, only=_TOY_FLAGS[:3])  # --steps, --G, --seeds
    runner.add_settings(ap, ToySettings, only=("similarity",))
    runner.add_settings(ap, PopulationSettings, only=("K",))
    ap.add_argument("--delta", type=float, help="shortcut for --param delta=VALUE (population only)")
    runner.add_settings(ap, ToySettings, only=("advantage",))
    runner.add_param_option(ap, of="advantage or schedule", json_alias="--advantage-params")
    runner.add_settings(ap, ToySettings, only=_TOY_FLAGS[5:])  # --optimizer, --lr, --mu, --memory-lr
    runner.add_run_options(ap)
    ap.set_defaults(func=_cli)
    return ap
