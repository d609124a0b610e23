"""Few-action toys of the Two-Stage paper and the behaviour-space cases of A-GRAE.

Every toy is a list of :class:`Setting` objects, each run by the batched engine
:func:`simulations.categorical.simulate` (one call per setting; the group sizes ``N`` and the
seeds of a setting are batched inside that call).  This module only names the settings,
turns them into :class:`~simulations.categorical.Config` objects and reshapes the results.

**Two-Stage Algorithm 1** (App. C.1), the update of every two-stage toy: per step draw ``G`` actions
from ``π = softmax(z/τ)``, advantages ``Â(a_i) = r(a_i) − mean_j r(a_j)`` (the ``dr_grpo``
family), gradient ``g_v = Σ_i Â(a_i)(δ_{v,a_i} − π_v)`` (Two-Stage Lemma 1), and an Adam step on
``g/G`` with learning rate ``η`` — the engine's ``surrogate="logprob"``,
``optimizer="adam"``.  Two-Stage Sec. 3.2 uses ``G = 2``, ``η = 0.1``.

**Two stages** (Two-Stage Remark 3, Sec. 3.2): ``a1`` explored and rewarded, ``a2`` unexplored with a
*higher* reward, ``a3`` explored with reward 0.  Stage 1 (exploitation): ``π(a1)`` rises and
``π(a3)`` falls while ``π(a2)`` stays small; stage 2 (exploration): once ``a2`` is drawn next
to ``a1``, ``Â(a2) > 0 > Â(a1)`` and ``π(a1)`` falls while ``π(a2)`` rises.  :func:`stages`
finds the step of the peak of ``π(a1)`` and the step where ``π(a2)`` overtakes it.

Two-stage toys need three or four reward *levels* (``r(a3) = 0 < r(a1) < r(a2)``): the engine's
per-action rewards (``Config(rewards=...)``, advantages through
:meth:`rlvr_theory.advantages.Advantage.graded_call`).  The GRPO-N and A-GRAE toys use binary rewards.

**A-GRAE Theorem 1** (Eq. 6, App. B.3 Eq. 29): with ``C = Σ_{j∈G} A_j``, one gradient-ascent step
moves the logit of behaviour ``b`` by ``Δh_b = η[1(b∈G)·A_b − C·π_b]`` (``A_b`` summed over the
draws of ``b``).  ``C = 0`` (GRPO): an unsampled behaviour does not move (Eq. 9); ``C < 0``
(negative-dominant, GRPO-N): every unsampled behaviour rises by ``−ηCπ_b`` (App. B.5 Eq. 36)
and a sampled incorrect one can rise too (Eq. 35).  The engine's SGD step on the log-prob
surrogate is this update with ``η = lr/N``.

Presets (:data:`TOYS`): ``twostage-fig1`` (Two-Stage Fig. 1: three initial ``π(a2)``, three
``r(a1)``), ``twostage-fig5`` (group sizes 2, 3, 5, 10), ``twostage-fig6`` (temperatures 1, 2,
5, 20, initial probabilities held fixed), ``twostage-fig7`` (four actions),
``twostage-grpo-n`` (GRPO vs GRPO-N, Two-Stage App. B.5), ``agrae-c0`` / ``agrae-cneg`` (A-GRAE
Theorem 1, ``C = 0`` vs ``C < 0``).  The papers print neither the exact probabilities nor the
rewards of their toys (they are in the figures' images); the values chosen here are listed
with each preset and in ``docs/simulations_toys.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_plumbing import checks, runner
from rlvr_plumbing.runtime import resolve_device

from .runs import check_out, command_settings, write_run

if TYPE_CHECKING:  # imported where used: `rlvr-sim --help` loads no pandas or torch
    import pandas as pd

    from . import categorical as sc

__all__ = ["Setting", "Toy", "TOYS", "toy", "configs", "check_size", "run", "stages",
           "behaviour_step", "add_parser", "PERSIAN_BASES", "PERSIAN_COLUMNS", "persian_grid"]


# ------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Setting:
    """One curve family of a toy: initial policy, rewards and training choices.

    Parameters
    ----------
    label : str
        Name of the setting in the results (column ``setting``).
    probs : tuple of float
        Initial policy ``π_0`` (positive, sums to 1).  With a temperature ``τ`` the initial
        logits are ``z_0 = τ·log π_0``, so ``π_0`` is the same at every temperature (Two-Stage Fig. 6
        holds it fixed).
    rewards : tuple of float
        Reward ``r(a_i)`` of each action.  Two values: binary rewards (engine classes
        ``(R_w, R_c)``); more: graded rewards (``Config(rewards=...)``).  The rewarded actions
        (``r > min r``) must come first (engine convention: the correct actions are
        ``0..n_correct−1``).
    N : tuple of int
        Group sizes ``G`` (batched in one engine call).
    temperature, advantage, advantage_params, optimizer, lr, surrogate
        As in :class:`simulations.categorical.Config`.
    actions : tuple of str, optional
        Action names (default ``a1, a2, ...``).
    """

    label: str
    probs: tuple[float, ...]
    rewards: tuple[float, ...]
    N: tuple[int, ...] = (2,)
    temperature: float = 1.0
    advantage: str = "dr_grpo"
    advantage_params: dict = field(default_factory=dict)
    optimizer: str = "adam"
    lr: float = 0.1
    surrogate: str = "logprob"
    actions: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return self.actions if self.actions is not None else tuple(f"a{i + 1}" for i in range(len(self.probs)))

    @property
    def graded(self) -> bool:
        """More than two reward levels (needs the engine's per-action rewards)."""
        return len(set(self.rewards)) > 2

    @property
    def n_correct(self) -> int:
        """Number of rewarded actions (``r > min r``), the leading ones."""
        return int(np.sum(np.asarray(self.rewards) > min(self.rewards)))

    def validate(self) -> Setting:
        """Raise ``ValueError`` naming the first bad field."""
        p = checks.array("probs", self.probs, ndim=1, low=0, low_open=True)
        if len(p) < 2 or abs(p.sum() - 1) > 1e-9:
            raise ValueError(f"probs must be >= 2 positive numbers summing to 1, got {self.probs!r}")
        r = checks.array("rewards", self.rewards, ndim=1)
        if r.shape != p.shape or len(set(self.rewards)) < 2:
            raise ValueError(f"rewards must be {len(p)} finite numbers with at least two distinct values, "
                             f"got {self.rewards!r}")
        pos = r > r.min()
        if not np.all(pos[: pos.sum()]):
            raise ValueError(f"rewards must list the rewarded actions (r > min r) first, got {self.rewards!r}")
        if len(self.names) != len(p):
            raise ValueError(f"actions must be None or {len(p)} names, got {self.actions!r}")
        return self

    def config(self, steps: int, seeds: int, record_every: int) -> sc.Config:
        """The engine :class:`~simulations.categorical.Config` of this setting."""
        from . import categorical as sc

        self.validate()
        steps, seeds, record_every = (checks.integer(name, v, low=1) for name, v in
                                      (("steps", steps), ("seeds", seeds), ("record_every", record_every)))
        r = np.asarray(self.rewards, dtype=float)
        kw: dict[str, Any] = dict(
            K=len(self.probs), n_correct=self.n_correct,
            logits=tuple(float(self.temperature * math.log(x)) for x in self.probs),
            reward_values=(float(r.min()), float(r.max())), N=tuple(self.N), gamma=(0.0,),
            seeds=tuple(range(seeds)), lr=(float(self.lr),), steps=steps,
            advantage=self.advantage, advantage_params=dict(self.advantage_params),
            surrogate=self.surrogate, optimizer=self.optimizer, temperature=float(self.temperature),
            record_every=record_every, record_probs=True)
        if self.graded:
            kw["rewards"] = tuple(float(x) for x in self.rewards)
        return sc.Config(**kw).validate()


@dataclass(frozen=True)
class Toy:
    """A named toy: its settings, default run length and the source it reproduces.

    ``stage_pair = (first, second)`` names the actions whose two-stage dynamic :func:`stages`
    reports (``π(first)`` peaks, then ``second`` overtakes it); ``None`` for toys without one.
    """

    name: str
    title: str
    source: str
    settings: tuple[Setting, ...]
    steps: int
    seeds: int
    record_every: int
    stage_pair: tuple[str, str] | None = ("a1", "a2")

    @property
    def graded(self) -> bool:
        return any(s.graded for s in self.settings)


# Two-Stage Sec. 3.2: a1 explored, rewarded; a2 unexplored, higher reward; a3 explored, reward 0.
PI_BASE = (0.3, 0.01, 0.69)
R_BASE = (0.5, 1.0, 0.0)
# A-GRAE behaviour space: b1 explored correct, b2 rare correct, b3 an over-confident incorrect
# behaviour, b4..b8 other incorrect ones
_PI_B = (0.25, 0.005, 0.40, 0.15, 0.10, 0.05, 0.03, 0.015)
PI_BEHAVIOUR = tuple(float(x) for x in np.asarray(_PI_B) / sum(_PI_B))
R_BEHAVIOUR = (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
BEHAVIOURS = tuple(f"b{i + 1}" for i in range(8))

TOYS: dict[str, Toy] = {t.name: t for t in (
    Toy("twostage-fig1", "Two-stage dynamic of three actions", "Two-Stage Sec. 3.2, Fig. 1, App. C.1 Alg. 1",
        (Setting("pi(a2)=0.05", (0.3, 0.05, 0.65), R_BASE),
         Setting("pi(a2)=0.01", PI_BASE, R_BASE),
         Setting("pi(a2)=0.002", (0.3, 0.002, 0.698), R_BASE),
         Setting("r(a1)=0.2", PI_BASE, (0.2, 1.0, 0.0)),
         Setting("r(a1)=0.5", PI_BASE, R_BASE),
         Setting("r(a1)=0.8", PI_BASE, (0.8, 1.0, 0.0))),
        steps=1000, seeds=16, record_every=5),
    Toy("twostage-fig5", "Two-stage dynamic for group sizes G = 2, 3, 5, 10", "Two-Stage App. C.4, Fig. 5",
        (Setting("G sweep", PI_BASE, R_BASE, N=(2, 3, 5, 10)),), steps=1000, seeds=16, record_every=5),
    Toy("twostage-fig6", "Two-stage dynamic for temperatures 1, 2, 5, 20", "Two-Stage App. C.4, Fig. 6",
        tuple(Setting(f"T={t:g}", PI_BASE, R_BASE, temperature=float(t)) for t in (1, 2, 5, 20)),
        steps=2000, seeds=16, record_every=10),
    Toy("twostage-fig7", "Two-stage dynamic of four actions", "Two-Stage App. C.4, Fig. 7",
        (Setting("four actions", (0.3, 0.05, 0.01, 0.64), (0.4, 0.7, 1.0, 0.0)),),
        steps=1000, seeds=16, record_every=5, stage_pair=("a2", "a3")),
    Toy("twostage-grpo-n", "GRPO vs GRPO-N (negative-only) on the three-action toy, binary rewards",
        "Two-Stage App. B.5, Sec. 4 (Fig. 2), Alg. 1",
        (Setting("GRPO", PI_BASE, (1.0, 1.0, 0.0), advantage="grpo"),
         Setting("GRPO-N", PI_BASE, (1.0, 1.0, 0.0), advantage="grpo_n")),
        steps=500, seeds=16, record_every=5, stage_pair=None),
    Toy("agrae-c0", "Behaviour space, C = 0 (GRPO)", "A-GRAE Theorem 1, Eq. 6-9, App. B.3",
        tuple(Setting(f"GRPO (C=0), {o}", PI_BEHAVIOUR, R_BEHAVIOUR, N=(8,), advantage="grpo", optimizer=o.lower(),
                      lr=lr, actions=BEHAVIOURS) for o, lr in (("SGD", 0.2), ("Adam", 0.05))),
        steps=200, seeds=16, record_every=1, stage_pair=None),
    Toy("agrae-cneg", "Behaviour space, C < 0 (negative-dominant, GRPO-N)", "A-GRAE Theorem 1, App. B.5 Eq. 33-36",
        tuple(Setting(f"{lab} (C<0), {o}", PI_BEHAVIOUR, R_BEHAVIOUR, N=(8,), advantage=a, advantage_params=pp,
                      optimizer=o.lower(), lr=lr, actions=BEHAVIOURS)
              for lab, a, pp in (("negative-dominant", "negative_dominant", {"beta": 10.0}), ("GRPO-N", "grpo_n", {}))
              for o, lr in (("SGD", 0.2), ("Adam", 0.05))),
        steps=200, seeds=16, record_every=1, stage_pair=None),
)}


def toy(name: str) -> Toy:
    """The :class:`Toy` called ``name`` (``ValueError`` listing the names otherwise)."""
    if name not in TOYS:
        raise ValueError(f"preset must be one of {', '.join(TOYS)}, got {name!r}")
    return TOYS[name]


def configs(name: str, *, steps: int | None = None, seeds: int | None = None, record_every: int | None = None,
            settings: Sequence[str] | None = None) -> list[tuple[Setting, sc.Config]]:
    """``(setting, Config)`` for the settings of toy ``name`` (all, or those labelled in
    ``settings``); ``steps``, ``seeds`` (a count: seeds ``0..seeds−1``) and ``record_every``
    override the toy's defaults."""
    t = toy(name)
    labels = [s.label for s in t.settings]
    if settings is not None:
        if isinstance(settings, str) or not settings or any(x not in labels for x in settings):
            raise ValueError(f"settings must be None or a non-empty list of labels of {name!r} "
                             f"({', '.join(labels)}), got {settings!r}")
    chosen = [s for s in t.settings if settings is None or s.label in settings]
    st, se, re = (t.steps if steps is None else steps, t.seeds if seeds is None else seeds,
                  t.record_every if record_every is None else record_every)
    return [(s, s.config(st, se, re)) for s in chosen]


def check_size(name: str, *, steps: int | None = None, seeds: int | None = None, record_every: int | None = None,
               settings: Sequence[str] | None = None, device: str = "cpu") -> int:
    """Refuse (``ValueError``) a run of toy ``name`` that cannot fit in memory, before any seed
    list or tensor is built; returns the estimated bytes.

    The engine's estimate (:meth:`simulations.categorical.Config.memory_bytes`) of the
    largest setting plus the long-form trajectory (one row of ``~20`` columns per setting,
    group size, seed, recorded step and action, three copies while it is assembled).

    >>> check_size("twostage-fig1", steps=200, seeds=2) < 2**26
    True
    >>> check_size("twostage-fig1", seeds=10**12)
    Traceback (most recent call last):
    ...
    ValueError: rlvr-sim toys (--preset twostage-fig1: 6 settings, seeds=1000000000000, steps=1000) needs about ...
    """
    from rlvr_plumbing.runtime import check_memory

    t = toy(name)
    S = t.seeds if seeds is None else checks.integer("seeds", seeds, low=1)
    st = t.steps if steps is None else checks.integer("steps", steps, low=1)
    engine, table = 0, 0
    for _, cfg in configs(name, steps=st, seeds=1, record_every=record_every, settings=settings):
        sized = dataclasses.replace(cfg, seeds=range(S))  # the count only: no seed list is built
        engine = max(engine, sized.memory_bytes(device))
        table += 3 * 8 * 20 * cfg.K * len(cfg.N) * S * (cfg.steps // cfg.record_every + 2)
    n = len(t.settings) if settings is None else len(settings)
    check_memory(engine + table, f"rlvr-sim toys (--preset {name}: {n} settings, seeds={S}, steps={st})",
                 device=device)
    return engine + table


@dataclass
class ToyRun:
    """Settings of a run of :func:`run`: the toy ``name`` (a key of :data:`TOYS`) and what
    replaces its defaults (``None``: the toy's).  :meth:`check` refuses a bad value or a run
    that cannot fit in memory before any work; ``rlvr-sim toys`` generates ``--steps`` and
    ``--seeds`` from the fields (``--preset`` is ``name``)."""

    name: str = field(metadata={"help": "the toy (a key of TOYS)", "cli": False})
    steps: int | None = field(default=None, metadata={"help": "training steps", "default_text": "the preset's"})
    seeds: int | None = field(default=None, metadata={"help": "number of seeds (0..S-1)",
                                                      "default_text": "the preset's"})
    record_every: int | None = field(default=None, metadata={"help": "record every this many steps",
                                                             "default_text": "the preset's", "cli": False})
    settings: list[str] | None = field(default=None, metadata={"help": "labels of the settings to run",
                                                               "default_text": "all", "cli": False})

    def check(self, device: str = "cpu") -> ToyRun:
        """Refuse a bad toy, setting label or count, or a run that cannot fit in memory on
        ``device`` (:func:`check_size`); returns the settings."""
        check_size(self.name, steps=self.steps, seeds=self.seeds, record_every=self.record_every,
                   settings=self.settings, device=device)
        return self

    def configs(self) -> list[tuple[Setting, sc.Config]]:
        """:func:`configs` of these settings."""
        return configs(self.name, steps=self.steps, seeds=self.seeds, record_every=self.record_every,
                       settings=self.settings)


# ------------------------------------------------------------------ running
@contextlib.contextmanager
def _torch_threads(n: int | None = 1) -> Iterator[None]:
    """Run torch on ``n`` CPU threads (restored afterwards; ``None``: leave torch as it is).

    A toy step is a few dozen operations on tensors of ``seeds × K ≤ 64 × 64`` numbers; on a
    shared 2-core machine torch's thread pool made them 15-20× slower (measured: 64 s vs 2.7 s
    for ``twostage-fig1`` under a load of 4), and one thread is never slower here.
    """
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(checks.integer("threads", n, low=1))
    try:
        yield
    finally:
        torch.set_num_threads(before)


_META = ["setting", "N", "seed", "temperature", "advantage", "optimizer", "lr"]


def _long(traj: pd.DataFrame, s: Setting, toy_name: str) -> pd.DataFrame:
    """Engine trajectory (``p_0 … p_{K−1}`` columns) → one row per step and action."""
    K = len(s.probs)
    pcols = [f"p_{i}" for i in range(K)]
    base = traj.assign(setting=s.label)[_META + ["step", "entropy", "Q_pos"]]
    P = traj[pcols].to_numpy()  # [rows, K]
    out = base.loc[base.index.repeat(K)].reset_index(drop=True)
    out.insert(0, "toy", toy_name)
    out.insert(out.columns.get_loc("step") + 1, "action", np.tile(np.array(s.names), len(traj)))
    out.insert(out.columns.get_loc("action") + 1, "reward", np.tile(np.asarray(s.rewards, float), len(traj)))
    out.insert(out.columns.get_loc("reward") + 1, "prob", P.ravel())
    return out


def run(name: str, *, device: str = "cpu", progress: bool = False, threads: int | None = 1,
        **kw: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every setting of toy ``name`` with :func:`simulations.categorical.simulate`.

    Parameters
    ----------
    name : str
        A key of :data:`TOYS`.
    steps, seeds, record_every : int, optional
        Override the toy's defaults (``seeds`` is a count: seeds ``0..seeds−1``).
    settings : list of str, optional
        Labels of the settings to run (default: all).  These four are the fields of
        :class:`ToyRun` (``run(name, **kw)`` runs ``ToyRun(name, **kw)``).
    device : str
        Engine device (``"cpu"`` by default: a few actions gain nothing on a GPU).
    progress : bool
        A tqdm bar over the settings.
    threads : int or None
        Torch CPU threads during the run (restored afterwards); 1 by default (never slower for
        these few actions); ``None`` leaves torch's setting (``rlvr-sim toys`` passes its
        ``--threads`` that way).

    Returns
    -------
    trajectory : DataFrame
        Long form, one row per setting, group size, seed, recorded step and action: ``toy,
        setting, N, seed, temperature, advantage, optimizer, lr, step, action, reward, prob,
        entropy, Q_pos`` (``entropy`` and ``Q_pos`` — the mass of the rewarded actions — repeat
        over the actions of a step).
    final : DataFrame
        One row per setting, group size and seed at the last step: the meta columns,
        ``prob_<action>`` for every action, ``entropy``, and, for toys with a ``stage_pair``,
        the columns of :func:`stages`.

    Examples
    --------
    One setting of Two-Stage Fig. 1 (``π_0(a2) = 0.05``), two seeds, 200 steps: ``π(a1)``
    peaks (stage 1), then ``a2`` overtakes it (stage 2):

    >>> traj, final = run("twostage-fig1", steps=200, seeds=2, settings=["pi(a2)=0.05"])
    >>> final[["seed", "prob_a1", "prob_a2", "t_peak", "t_cross", "two_stage"]].round(3)
       seed  prob_a1  prob_a2  t_peak  t_cross  two_stage
    0     0    0.011    0.983      40     90.0       True
    1     1    0.019    0.978      45     85.0       True
    """
    import pandas as pd

    from . import categorical as sc

    r = ToyRun(name, **kw).check(device)  # before any work
    t = toy(name)
    pairs = r.configs()
    it = pairs
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(pairs, desc=name, unit="setting")
    frames = []
    with _torch_threads(threads):
        for s, cfg in it:
            traj, _ = sc.simulate(cfg, device=device)
            frames.append(_long(traj, s, name))
    traj = pd.concat(frames, ignore_index=True)
    last = traj[traj.step == traj.step.max()]
    final = last.pivot_table(index=["toy"] + _META, columns="action", values="prob", sort=False)
    final = final[list(t.settings[0].names)]
    final.columns = [f"prob_{c}" for c in final.columns]
    final = final.reset_index().merge(last.drop_duplicates(["setting", "N", "seed"])[["setting", "N", "seed", "entropy"]],
                                      on=["setting", "N", "seed"])
    if t.stage_pair is not None:
        final = final.merge(stages(traj, *t.stage_pair), on=["setting", "N", "seed"])
    return traj, final


def stages(traj: pd.DataFrame, first: str = "a1", second: str = "a2", margin: float = 0.05) -> pd.DataFrame:
    """The two stages of Two-Stage Remark 3 in each run of a long-form trajectory (:func:`run`).

    Per ``(setting, N, seed)``: ``p_first_0`` (``π(first)`` at step 0), ``t_peak`` and
    ``p_peak`` (step and value of the maximum of ``π(first)``, first occurrence), ``t_cross``
    (first recorded step ``> 0`` with ``π(second) > π(first)``, NaN if none), ``t_half`` (first
    step with ``π(second) > 0.5``), ``p_first_final``, and ``two_stage``: ``π(first)`` rose
    by more than ``margin``, fell again by more than ``margin`` after its peak, and the peak
    comes no later than the crossing.

    Parameters
    ----------
    traj : DataFrame
        Long form with ``setting, N, seed, step, action, prob`` (every run on the same steps).
    first, second : str
        The explored action that peaks and the unexplored one that overtakes it.
    margin : float
        Minimum rise and fall of ``π(first)`` (probability units).
    """
    keys = ["setting", "N", "seed"]
    missing = {*keys, "step", "action", "prob"} - set(traj.columns)
    if missing:
        raise ValueError(f"traj must have the columns setting, N, seed, step, action, prob; missing {sorted(missing)}")
    for a in (first, second):
        if a not in set(traj.action):
            raise ValueError(f"first/second must be actions of traj ({', '.join(map(str, traj.action.unique()))}), got {a!r}")
    checks.number("margin", margin, low=0)
    wide = {}
    for a in (first, second):
        sub = traj[traj.action == a].sort_values(keys + ["step"], kind="stable")
        idx = sub[keys].drop_duplicates()
        wide[a] = (idx, sub.prob.to_numpy().reshape(len(idx), -1), sub.step.to_numpy().reshape(len(idx), -1))
    idx, P1, S = wide[first]
    P2 = wide[second][1]
    steps = S[0]
    ipk = P1.argmax(1)
    t_peak, p_peak = steps[ipk], P1[np.arange(len(P1)), ipk]
    over = (P2 > P1) & (steps > 0)[None, :]
    half = P2 > 0.5

    def first_step(mask: np.ndarray) -> np.ndarray:
        return np.where(mask.any(1), steps[mask.argmax(1)], np.nan)

    t_cross = first_step(over)
    out = idx.reset_index(drop=True).assign(
        p_first_0=P1[:, 0], t_peak=t_peak, p_peak=p_peak, t_cross=t_cross, t_half=first_step(half),
        p_first_final=P1[:, -1])
    out["two_stage"] = ((out.p_peak - out.p_first_0 > margin) & (out.p_peak - out.p_first_final > margin)
                        & out.t_cross.notna() & (out.t_peak <= out.t_cross))
    return out


def behaviour_step(name: str = "agrae-cneg", *, seeds: int = 64, device: str = "cpu") -> pd.DataFrame:
    """One engine step of every SGD setting of toy ``name`` next to A-GRAE Theorem 1.

    Runs the engine for one step, recovers the logit change from the recorded probabilities
    (``Δz_b = Δlog π_b − mean_i Δlog π_i``, exact for the log-prob surrogate under SGD, whose
    update sums to 0 over the actions), re-draws the same group with
    :func:`simulations.categorical.sample_counts` (the engine's draws are keyed by
    ``(seed, step, draw)``), takes the advantages from the registry and evaluates
    ``Δh_b = η[Σ_{j: a_j = b} A_j − C·π_b]`` with :func:`rlvr_theory.categorical.behaviour_update`
    at ``η = lr/N`` (A-GRAE Eq. 6; the engine averages over the ``N`` draws).

    Returns
    -------
    DataFrame
        One row per setting, seed and behaviour: ``setting, seed, action, correct, pi0,
        count, case`` (:func:`rlvr_theory.categorical.behaviour_cases`), ``C`` (the group's
        advantage sum), ``dh_measured``, ``dh_theorem``.
    """
    import pandas as pd
    import torch

    from rlvr_theory import advantages as adv_reg
    from rlvr_theory import categorical as cat

    from . import categorical as sc

    seeds = checks.integer("seeds", seeds, low=1)
    frames = []
    for s, cfg in configs(name, steps=1, seeds=seeds, record_every=1):
        if s.optimizer != "sgd" or s.surrogate != "logprob" or s.temperature != 1 or len(s.N) != 1:
            continue  # the theorem is one gradient-ascent step on the log-prob objective
        with _torch_threads(1):
            traj, _ = sc.simulate(cfg, device=device)
        K, N, B = len(s.probs), s.N[0], seeds
        P = traj.sort_values(["seed", "step"])[[f"p_{i}" for i in range(K)]].to_numpy().reshape(B, 2, K)
        dlog = np.log(P[:, 1]) - np.log(P[:, 0])
        dh = dlog - dlog.mean(-1, keepdims=True)
        z0, correct = sc.initial_logits(cfg)
        p = torch.softmax(torch.tensor(z0, dtype=torch.float32).repeat(B, 1), -1)
        counts = sc.sample_counts(p, N, torch.arange(B, dtype=torch.int64), 0).round().long().numpy()
        actions = np.repeat(np.tile(np.arange(K), B), counts.ravel()).reshape(B, N)  # sorted draws per seed
        rw, rc = cfg.reward_values
        A = adv_reg.get(s.advantage, reward_values=(rw, rc), **s.advantage_params)(np.where(correct[actions], rc, rw))
        theory = cat.behaviour_update(z0, actions, A, s.lr / N)
        cases = cat.behaviour_cases(actions, np.broadcast_to(correct, (B, K)))
        frames.append(pd.DataFrame({
            "setting": s.label, "seed": np.repeat(np.arange(B), K), "action": np.tile(np.array(s.names), B),
            "correct": np.tile(correct, B), "pi0": P[:, 0].ravel(), "count": counts.ravel(), "case": cases.ravel(),
            "C": np.repeat(A.sum(-1), K), "dh_measured": dh.ravel(), "dh_theorem": theory.ravel()}))
    if not frames:
        raise ValueError(f"name must be a toy with an SGD log-prob setting at temperature 1 (agrae-c0, agrae-cneg), got {name!r}")
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------ CLI
# ------------------------------------------------------------------ the Persian toy over a grid
#: base advantages of :func:`persian_grid` (the readings of Over-Sharpening's toy and of IAC's base)
PERSIAN_BASES: tuple[str, ...] = ("raw", "centred", "normalised")
#: the columns of :func:`persian_grid`'s ``grid`` and their defaults (``None``: required)
PERSIAN_COLUMNS: dict[str, Any] = {"base": None, "alpha": 0.0, "optimizer": "sgd", "lr": 0.1, "momentum": 0.9,
                                   "reduction": "sum", "mu": 0.0, "memory_lr": None}
_PERSIAN_OPTIMIZERS = ("sgd", "momentum", "adamw")
_ADAMW = {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "wd": 0.01}     # torch.optim.AdamW defaults, weight decay 0.01


def _persian_columns(grid: Any) -> dict[str, np.ndarray]:
    """The settings of :func:`persian_grid` as one array per column, checked (``ValueError`` naming
    the column and the allowed values)."""
    import pandas as pd

    g = pd.DataFrame(grid).reset_index(drop=True)
    unknown = sorted(set(g.columns) - set(PERSIAN_COLUMNS))
    if unknown or "base" not in g.columns or not len(g):
        raise ValueError(f"grid: needs a 'base' column and at least one row; unknown columns {unknown}; "
                         f"allowed: {', '.join(PERSIAN_COLUMNS)}")
    for col, default in PERSIAN_COLUMNS.items():          # a missing column or cell takes the default
        if col not in g.columns:
            g[col] = default
        elif default is not None:
            g[col] = g[col].where(g[col].notna(), default)
    cols = {c: g[c].to_numpy() for c in ("base", "optimizer", "reduction")}
    for col, allowed in (("base", PERSIAN_BASES), ("optimizer", _PERSIAN_OPTIMIZERS), ("reduction", ("sum", "mean"))):
        bad = sorted({str(v) for v in cols[col]} - set(allowed))
        if bad:
            raise ValueError(f"grid column {col!r}: {bad} not allowed; allowed: {', '.join(allowed)}")
    g["memory_lr"] = g.memory_lr.where(g.memory_lr.notna(), g.lr).astype(float)
    for col, low, closed in (("alpha", 0.0, True), ("lr", 0.0, False), ("momentum", 0.0, True), ("mu", 0.0, True),
                             ("memory_lr", 0.0, False)):
        v = g[col].to_numpy(float)
        ok = np.isfinite(v) & ((v >= low) if closed else (v > low))
        if col == "momentum":
            ok &= v < 1
        if not ok.all():
            raise ValueError(f"grid column {col!r}: {float(v[~ok][0])!r} not allowed; allowed: a finite number "
                             + ("in [0, 1)" if col == "momentum" else (">= 0" if closed else "> 0")))
        cols[col] = v
    return cols


class _GridOptimizer:
    """SGD, heavy-ball momentum (torch semantics, dampening 0) or AdamW (torch semantics,
    :data:`_ADAMW`) per configuration: ``kind``, ``lr``, ``momentum`` are arrays over the leading
    axis; each kind steps only its own configurations (4 × 4 parameters each)."""

    def __init__(self, kind: np.ndarray, lr: np.ndarray, momentum: np.ndarray, shape: tuple[int, ...]):
        col = (slice(None),) + (None,) * (len(shape) - 1)
        self.rows = {k: np.flatnonzero(kind == k) for k in _PERSIAN_OPTIMIZERS}
        self.lr = {k: lr[i][col] for k, i in self.rows.items()}
        self.beta = momentum[self.rows["momentum"]][col]
        self.buf = np.zeros((len(self.rows["momentum"]),) + shape[1:])
        self.m = np.zeros((len(self.rows["adamw"]),) + shape[1:])
        self.v = np.zeros_like(self.m)
        self.t = 0

    def step(self, W: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Gradient ascent: ``W`` after one step along ``g`` (a new array)."""
        self.t += 1
        a, W = _ADAMW, W.copy()
        i = self.rows["sgd"]
        if len(i):
            W[i] += self.lr["sgd"] * g[i]
        i = self.rows["momentum"]
        if len(i):
            self.buf = g[i].copy() if self.t == 1 else self.beta * self.buf + g[i]
            W[i] += self.lr["momentum"] * self.buf
        i = self.rows["adamw"]
        if len(i):
            lr, gi = self.lr["adamw"], g[i]
            self.m = a["b1"] * self.m + (1 - a["b1"]) * gi
            self.v = a["b2"] * self.v + (1 - a["b2"]) * gi * gi
            W[i] = W[i] * (1 - lr * a["wd"]) + lr * (self.m / (1 - a["b1"] ** self.t)) / (
                np.sqrt(self.v / (1 - a["b2"] ** self.t)) + a["eps"])
        return W


def _persian_advantages(X: np.ndarray, G: int, base: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Advantages of a group of ``G`` binary rewards with ``X`` successes [C]: one value for every
    success and one for every failure, ``(A_success, A_failure)`` [C] each.

    ``base`` per configuration: ``"raw"`` (``r``: 1 and 0), ``"centred"`` (``r − r̄``) or
    ``"normalised"`` (``(r − r̄)/std``, population std, 0 where it is 0); then IAC (Over-Sharpening
    Alg. 1 lines 11-18): every positive advantage times ``(G − |S⁺|)^alpha`` with ``S⁺`` the
    rollouts whose advantage is positive (the successes, where their advantage is positive),
    negatives unchanged; ``alpha = 0`` leaves the base.
    """
    p = X / G
    std = np.sqrt(p * (1 - p))
    inv = np.divide(1.0, std, out=np.zeros_like(std), where=std > 0)
    a_s = np.where(base == "raw", 1.0, np.where(base == "centred", 1 - p, (1 - p) * inv))
    a_f = np.where(base == "raw", 0.0, np.where(base == "centred", -p, -p * inv))
    pos = a_s > 0                                                    # S⁺: the successes, or nobody
    factor = np.where(alpha == 0, 1.0, np.where(pos, G - X, 1.0) ** alpha)
    return np.where(pos, a_s * factor, a_s), a_f


def persian_grid(grid: Any, *, G: int, seeds: int = 16, steps: int = 500, log_every: int = 10,
                 similarity: str = "High") -> pd.DataFrame:
    """The Over-Sharpening toy (Sec. 2.4, App. G-H) for a whole grid of settings in one batch.

    The update is that of :func:`simulations.linear_head.simulate_toy` (its module docstring):
    ``π = softmax(W·h_Persian)``, ``W_0 = 0``; per step ``G`` labels drawn, reward 1 for Cat or
    Persian, ``g = Σ_i A_i (e_{y_i} − π) ⊗ h`` (divided by ``G`` with reduction "mean"), one
    gradient-ascent step; with ``mu > 0`` the labels are drawn from ``softmax((W − μ·W_φ)·h)``
    and the memory head ``W_φ`` takes its own step (same optimizer kind, ``memory_lr``) on the
    mean cross-entropy of the drawn labels (DLC, Alg. 1).  What this function adds: every
    setting the paper leaves open is a column of ``grid`` — the learning rate, the optimizer and
    its momentum, the reduction, the base advantage IAC multiplies — and all rows × seeds run as
    one batch (configurations on the leading axis), so a sweep costs one run.  Seed ``s`` draws
    its uniforms from ``numpy.random.default_rng(s)``, shared by every row (as in
    ``simulate_toy``, whose trajectories this reproduces for the settings it has: tested).

    Parameters
    ----------
    grid : DataFrame or dict of columns
        One row per configuration; columns (:data:`PERSIAN_COLUMNS`, missing ones take their
        default): ``base`` in :data:`PERSIAN_BASES` (required), ``alpha`` >= 0 (IAC exponent;
        0: no IAC), ``optimizer`` in {"sgd", "momentum", "adamw"}, ``lr`` > 0, ``momentum`` in
        [0, 1) (heavy ball), ``reduction`` in {"sum", "mean"}, ``mu`` >= 0 (DLC weight),
        ``memory_lr`` > 0 (NaN/None: ``lr``).
    G : int >= 1
        Group size.
    seeds : int >= 1
        Seeds 0..seeds-1 per row.
    steps, log_every : int >= 1
        Training steps; trajectory rows every ``log_every`` steps and at the last.
    similarity : "High", "Mid" or "Low"
        The held-out Siamese embedding (App. G).

    Returns
    -------
    DataFrame
        One row per (row of ``grid``, seed, logged step): ``config`` (the row's position in
        ``grid``), ``seed``, ``step``, ``G``, ``p_cat``, ``p_persian``, ``winner_share``
        (``max(π_Cat, π_Persian)/(π_Cat + π_Persian)``, from the logits), ``entropy`` (of
        ``π(·|Persian)``) and ``siamese_acc`` (``π(Siamese|Siamese)``).

    Raises
    ------
    ValueError
        A column or value of ``grid`` not allowed (the message names the column and the allowed
        values), ``G``, ``seeds``, ``steps``, ``log_every`` below 1, an unknown ``similarity``,
        or a run whose weights become non-finite (the rows named).

    Examples
    --------
    Raw rewards, IAC (α = 1) on raw rewards and on normalised advantages, momentum 0.9, G = 4:

    >>> import pandas as pd
    >>> grid = pd.DataFrame({"base": ["raw", "raw", "normalised"], "alpha": [0.0, 1.0, 1.0],
    ...                      "optimizer": "momentum", "lr": 0.1})
    >>> tr = persian_grid(grid, G=4, seeds=4, steps=100)
    >>> tr[tr.step == 100].groupby("config").winner_share.mean().round(3).tolist()
    [0.997, 0.985, 0.955]
    """
    import pandas as pd

    from rlvr_theory.sharpening import SIAMESE_VARIANTS, TOY_EMBEDDINGS

    cols = _persian_columns(grid)
    for name, v in (("G", G), ("seeds", seeds), ("steps", steps), ("log_every", log_every)):
        checks.integer(name, v, low=1)
    checks.choice("similarity", similarity, tuple(SIAMESE_VARIANTS))
    n, S = len(cols["base"]), seeds
    C = n * S                                                        # configuration-major: c = row·S + seed
    rep = {k: np.repeat(v, S) for k, v in cols.items()}
    h = np.asarray(TOY_EMBEDDINGS["Persian"], float)
    h_eval = np.asarray(SIAMESE_VARIANTS[similarity], float)
    correct = np.array([1.0, 0.0, 1.0, 0.0])                          # Cat, Dog, Persian, Siamese
    W = np.zeros((C, 4, 4))
    opt = _GridOptimizer(rep["optimizer"], rep["lr"], rep["momentum"], W.shape)
    mem = np.flatnonzero(rep["mu"] > 0)                               # rows with a memory head (DLC)
    Wm = np.zeros((len(mem), 4, 4))
    mopt = _GridOptimizer(rep["optimizer"][mem], rep["memory_lr"][mem], rep["momentum"][mem], Wm.shape)
    mu_m, scale = rep["mu"][mem, None], np.where(rep["reduction"] == "mean", 1.0 / G, 1.0)[:, None]
    rngs = [np.random.default_rng(sd) for sd in range(S)]
    seed_of = np.tile(np.arange(S), n)
    logs = []
    for t in range(steps + 1):
        z = W @ h                                                     # [C, 4] logits at Persian
        z_max = z.max(-1, keepdims=True)
        pi = np.exp(z - z_max)
        pi /= pi.sum(-1, keepdims=True)
        if t % log_every == 0 or t == steps:
            ze = W @ h_eval
            pe = np.exp(ze - ze.max(-1, keepdims=True))
            logp = np.log(np.where(pi > 0, pi, 1.0))
            logs.append({"step": np.full(C, t), "p_cat": pi[:, 0], "p_persian": pi[:, 2],
                         "winner_share": 1 / (1 + np.exp(-np.abs(z[:, 0] - z[:, 2]))),
                         "entropy": -(pi * logp).sum(-1), "siamese_acc": pe[:, 3] / pe.sum(-1)})
        if t == steps:
            break
        q = pi
        if len(mem):                                                  # Alg. 1 lines 5-6 (else q = pi)
            zq = z[mem] - mu_m * (Wm @ h)
            qm = np.exp(zq - zq.max(-1, keepdims=True))
            q = pi.copy()
            q[mem] = qm / qm.sum(-1, keepdims=True)
        # G labels per configuration, y_i = min(#{v: u_i > cdf_v}, 3) as simulate_toy draws them, counted per
        # label: one sorted draw per seed (shared by the rows), #{i: u_i > cdf_v} by a search in it
        u = np.sort(np.stack([rng.random(G) for rng in rngs]), -1)    # [S, G], one draw per seed and step
        cdf = np.cumsum(q, -1)[:, :3]                                 # [C, 3]
        at_most = np.searchsorted((u + 2.0 * np.arange(S)[:, None]).ravel(),
                                  (cdf + 2.0 * seed_of[:, None]).ravel(), side="right").reshape(C, 3)
        beyond = G - (at_most - G * seed_of[:, None])                 # #{i: y_i >= v}, v = 1, 2, 3
        reach = np.concatenate([np.full((C, 1), G), beyond, np.zeros((C, 1), int)], -1)
        counts = (reach[:, :-1] - reach[:, 1:]).astype(float)         # [C, 4] labels drawn
        X = counts @ correct
        a_s, a_f = _persian_advantages(X, G, rep["base"], rep["alpha"])
        weight = np.where(correct == 1, a_s[:, None], a_f[:, None])
        total = a_s * X + a_f * (G - X)                               # Σ_i A_i
        u_pol = weight * counts - total[:, None] * pi                 # Σ_i A_i (e_{y_i} − π)
        with np.errstate(over="ignore", invalid="ignore"):
            W = opt.step(W, (scale * u_pol)[:, :, None] * h)
            if len(mem):                                              # Alg. 1 lines 21-22
                zm = Wm @ h
                pm = np.exp(zm - zm.max(-1, keepdims=True))
                pm /= pm.sum(-1, keepdims=True)
                gm = (counts[mem] - G * pm) / G                # mean cross-entropy gradient (ascent)
                Wm = mopt.step(Wm, gm[:, :, None] * h)
        bad = ~np.isfinite(W).reshape(C, -1).all(-1)
        if bad.any():
            rows = sorted({int(c) // S for c in np.flatnonzero(bad)})
            raise ValueError(f"persian_grid: non-finite weights at step {t + 1} in grid rows {rows[:10]}; "
                             "lower their lr")
    out = pd.DataFrame({k: np.concatenate([d[k] for d in logs]) for k in logs[0]})
    out.insert(0, "seed", np.tile(np.arange(S), n * len(logs)))
    out.insert(0, "config", np.tile(np.repeat(np.arange(n), S), len(logs)))
    out.insert(3, "G", G)
    return out


def _run_cli(args: argparse.Namespace) -> int:
    check_out(args)  # before any work
    t = toy(args.preset)
    dev = resolve_device(args.device)
    given = runner.given_settings(args, ToyRun)
    pairs = ToyRun(args.preset, **given).check(str(dev)).configs()  # validates before anything is written
    t0 = time.perf_counter()
    traj, final = run(args.preset, **given, device=str(dev), progress=not args.quiet,
                      threads=None)  # the runner has applied --threads
    wall = time.perf_counter() - t0

    record = {"preset": t.name, "title": t.title, "source": t.source, "stage_pair": t.stage_pair,
              "toy_settings": [dataclasses.asdict(s) for s, _ in pairs], "configs": [c.to_dict() for _, c in pairs],
              "wall_s": wall}
    write_run(args.out, traj, final, record, settings=command_settings(args), seed=list(pairs[0][1].seeds),
              device=dev, overwrite=args.overwrite)
    if not args.quiet:
        print(f"wrote {args.out}/trajectory.csv, final.csv, config.json ({len(final)} runs, {wall:.1f} s on {dev})")
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``rlvr-sim toys --preset NAME [--steps ..] [--seeds ..] [--threads N] --out DIR``."""
    ap = subparsers.add_parser("toys", help="few-action toys of Two-Stage (two stages, GRPO-N) and A-GRAE Theorem 1",
                               description="Few-action softmax toys run by the categorical engine.")
    ap.add_argument("--preset", required=True, help=f"one of {', '.join(TOYS)}")
    runner.add_settings(ap, ToyRun)  # --steps, --seeds
    runner.add_run_options(ap, device="cpu")
    ap.set_defaults(func=_run_cli)
    return ap
