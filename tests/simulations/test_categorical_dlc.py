"""Distribution-level calibration (DLC, Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and 21-22) in the
categorical simulator: per-action memory logits φ trained by cross-entropy on the drawn actions,
draws from q = softmax(z/T − μ·φ), the policy step on the policy's own π.

Every check is against a computation that does not use the engine's step: a step-by-step torch
reference (autograd gradients of each surrogate and of the memory's log-likelihood, torch's own
SGD / Adam, the registry advantages; only the counter-based sampler is shared, fed the
reference's own q), Monte Carlo frequencies of the engine's draws, a first step worked out by
hand, and the reference at ``mu = 0`` for the uncalibrated run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from rlvr_theory import advantages
from simulations import categorical as sc
from simulations import cli


# ------------------------------------------------------------------ an independent reference
def _reference(cfg: sc.Config, N: int, gamma: float, seed: int, lr: float) -> pd.DataFrame:
    """One configuration of ``cfg`` written from Alg. 1, float64 torch, a loop over steps and
    over draws: per step the metrics, the draws from q (the engine's counter-based sampler fed
    this reference's q), the registry advantage of each draw, the surrogate's gradient by
    autograd, torch's optimizer on z, then the memory's cross-entropy step by autograd and its
    own torch optimizer."""
    K, nc, T, mu = cfg.K, cfg.n_correct, cfg.temperature, cfg.mu
    z0, correct = sc.initial_logits(cfg)
    z = torch.tensor(z0, requires_grad=True)
    phi = torch.zeros(K, dtype=torch.float64, requires_grad=True)
    mlr = lr if cfg.memory_lr is None else cfg.memory_lr

    def make_opt(x, rate):
        if cfg.optimizer == "sgd":
            return torch.optim.SGD([x], lr=rate, maximize=True)
        return torch.optim.Adam([x], lr=rate, betas=cfg.betas, eps=cfg.eps, maximize=True)

    opt_z, opt_phi = make_opt(z, lr), make_opt(phi, mlr)
    adv = advantages.get(cfg.advantage, reward_values=cfg.reward_values)
    rw, rc = cfg.reward_values
    p0 = torch.softmax(z.detach() / T, 0)
    rows = []
    for t in range(cfg.steps + 1):
        with torch.no_grad():
            pi = torch.softmax(z / T, 0)
            q = torch.softmax(z / T - mu * phi, 0)                            # Alg. 1 line 5
            m = torch.softmax(phi, 0)
            rows.append(dict(step=t, Q_pos=float(pi[:nc].sum()),
                             M_ret=float(1 - torch.clamp(p0[:nc] - pi[:nc], min=0).sum() / p0[:nc].sum()),
                             entropy=float(-(pi * pi.log()).sum()), p_anchor=float(pi[0]),
                             sample_Q_pos=float(q[:nc].sum()), sample_entropy=float(-(q * q.log()).sum()),
                             memory_entropy=float(-(m * m.log()).sum()),
                             kl_sample_policy=float((q * (q.log() - pi.log())).sum())))
        if t == cfg.steps:
            break
        counts = sc.sample_counts(q[None], N, torch.tensor([seed]), t)[0]     # line 6: N draws from q
        actions = np.repeat(np.arange(K), counts.numpy().astype(int))
        r = np.where(actions < nc, rc, rw)
        A = torch.tensor(adv(r[None])[0])                                       # line 10
        focal = (1 - (actions < nc).mean()) ** gamma
        logpi = torch.log_softmax(z / T, 0)
        if cfg.surrogate == "logprob":                                          # line 20: Σ A log π_θ
            L = sum(A[j] * logpi[a] for j, a in enumerate(actions)) / N
        elif cfg.surrogate == "prob":
            L = sum(A[j] * logpi[a].exp() for j, a in enumerate(actions)) / N
        else:  # trpo: rewards on the distinct sampled support
            R = torch.tensor(np.where(np.arange(K) < nc, rc, rw) * (counts.numpy() > 0))
            L = (logpi.exp() * R).sum() / N
        opt_z.zero_grad()
        (focal * L).backward()
        opt_z.step()
        opt_phi.zero_grad()                                                     # line 22: cross-entropy
        (sum(torch.log_softmax(phi, 0)[a] for a in actions) / N).backward()
        opt_phi.step()
    return pd.DataFrame(rows)


_METRICS = ["Q_pos", "M_ret", "entropy", "p_anchor", "sample_Q_pos", "sample_entropy", "memory_entropy",
            "kl_sample_policy"]


@pytest.mark.parametrize("surrogate,optimizer,T,memory_lr,mu", [
    ("logprob", "adam", 1.0, None, 0.5), ("logprob", "sgd", 1.0, 3.0, 2.0), ("prob", "adam", 0.7, 0.05, 1.0),
    ("trpo", "sgd", 1.0, 2.0, 0.5), ("logprob", "adam", 1.5, 0.2, 3.0)])
def test_engine_equals_the_autograd_reference(surrogate, optimizer, T, memory_lr, mu):
    """Several steps of several configurations (two N, two γ, two seeds) at small K: every
    metric of the engine equals the reference at every step, and the calibration is not a
    no-op (q leaves π)."""
    lr = 0.05 if optimizer == "adam" else 2.0
    cfg = sc.Config(K=12, n_correct=4, z_anchor=1.5, z_correct=0.5, N=(3, 16), gamma=(0.0, 1.0), seeds=(0, 4),
                    lr=(lr,), steps=12, record_every=1, surrogate=surrogate, optimizer=optimizer, temperature=T,
                    mu=mu, memory_lr=memory_lr)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    for row in cfg.grid().itertuples():
        ref = _reference(cfg, row.N, row.gamma, row.seed, row.lr)
        ours = traj[traj.config == row.config].reset_index(drop=True)
        for col in _METRICS:
            np.testing.assert_allclose(ours[col], ref[col], rtol=1e-9, atol=1e-12, err_msg=col)
        assert ref.kl_sample_policy.max() > 1e-3
    assert (traj.memory_lr == (lr if memory_lr is None else memory_lr)).all() and (traj.mu == mu).all()


def test_two_learning_rates_and_the_schedules_agree():
    """Several learning rates (the written-out Adam of both the policy and the memory, whose
    ``memory_lr`` follows each row's lr), the block and batched schedules and blocks side by side
    in threads give the reference's and each other's numbers."""
    cfg = sc.Config(K=12, n_correct=4, z_anchor=1.5, z_correct=0.5, N=(3, 16), gamma=(0.0,), seeds=(1,),
                    lr=(0.02, 0.08), steps=10, record_every=1, mu=1.0)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64, execution="blocks")
    for row in cfg.grid().itertuples():
        ref = _reference(cfg, row.N, row.gamma, row.seed, row.lr)
        ours = traj[traj.config == row.config].reset_index(drop=True)
        np.testing.assert_allclose(ours[_METRICS], ref[_METRICS], rtol=1e-9, atol=1e-12)
        assert (ours.memory_lr == row.lr).all()
    big = sc.Config(K=3000, n_correct=300, N=(4, 64, 4096), gamma=(0.0, 1.0), seeds=(0, 1), steps=15,
                    record_every=5, mu=0.5, memory_lr=0.1, predict=True)
    ref, _ = sc.simulate(big, device="cpu", execution="batched")
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # three blocks side by side
    try:
        blocks, _ = sc.simulate(big, device="cpu", execution="blocks")
    finally:
        torch.set_num_threads(threads)
    pd.testing.assert_frame_equal(ref, blocks, check_exact=True)
    assert ref.kl_sample_policy.max() > 1e-3


def test_torch_sampler_gives_the_same_run(monkeypatch):
    """The pure-torch path (the one CUDA takes: ``torch.searchsorted`` and ``scatter_add_``,
    also for the memory's counts) gives the numba path's run bit for bit with memory."""
    cfg = sc.Config(K=2000, n_correct=200, N=(8, 3000), gamma=(0.0, 1.0), seeds=(0,), steps=12, record_every=3,
                    mu=0.5, memory_lr=0.2)
    fast, _ = sc.simulate(cfg, device="cpu")
    monkeypatch.setattr(sc, "NUMBA", False)
    assert sc.sampler("cpu") == "torch"
    slow, _ = sc.simulate(cfg, device="cpu")
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert fast.kl_sample_policy.max() > 1e-3


# ------------------------------------------------------------------ the draws follow q
def test_draws_follow_q_monte_carlo():
    """The engine's own draws, recovered from its SGD memory (φ has mean 0, so φ = log m − mean
    log m from the recorded m_i, and counts = N·((φ_{t+1} − φ_t)/memory_lr + m_t)), are integers,
    equal the sampler fed the recorded q, and follow q: per-action z-scores of the counts against
    N·q within 4.5, against N·π far outside."""
    S, N, mlr = 400, 4, 4.0
    cfg = sc.Config(K=5, n_correct=2, logits=(1.0, -1.0, 0.5, 0.0, -0.5), N=(N,), gamma=(0.0,),
                    seeds=tuple(range(S)), lr=(0.5,), steps=6, record_every=1, optimizer="sgd", mu=3.0,
                    memory_lr=mlr, record_probs=True)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    K = cfg.K
    P, Q, M = (traj[[f"{c}_{i}" for i in range(K)]].to_numpy().reshape(S, cfg.steps + 1, K) for c in "pqm")
    logm = np.log(M)
    phi = logm - logm.mean(-1, keepdims=True)
    counts = N * ((phi[:, 1:] - phi[:, :-1]) / mlr + M[:, :-1])             # [S, steps, K]
    assert np.abs(counts - np.round(counts)).max() < 1e-6
    counts = np.round(counts)
    assert (counts.sum(-1) == N).all()
    for s in (0, 7):  # the same draws as the sampler fed the engine's q
        for t in (0, 3):
            again = sc.sample_counts(torch.tensor(Q[s, t])[None], N, torch.tensor([s]), t)[0].numpy()
            np.testing.assert_array_equal(counts[s, t], again)
    q, p = Q[:, :-1], P[:, :-1]
    assert np.abs(q - p)[:, 1:].mean() > 0.05                               # q is not π
    z_q = (counts - N * q).sum((0, 1)) / np.sqrt((N * q * (1 - q)).sum((0, 1)))
    z_p = (counts - N * p).sum((0, 1)) / np.sqrt((N * p * (1 - p)).sum((0, 1)))
    assert np.abs(z_q).max() < 4.5, z_q
    assert np.abs(z_p).max() > 10, z_p


# ------------------------------------------------------------------ the memory step by hand
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_first_memory_step_by_hand(optimizer):
    """K = 3 with logits (40, 0, 0): both draws of step 0 are action 0 (probability 1 − 8e-18).
    φ_1 = lr·((1, 0, 0) − (1/3, 1/3, 1/3)) under SGD; under Adam the first step is lr·sign:
    φ_1 = lr·(1, −1, −1) (up to ε/|g| ~ 1e-8).  Then q_1 = softmax(u_1 − μ·φ_1)."""
    lr, mlr, mu = 0.3, 0.6, 0.5
    cfg = sc.Config(K=3, n_correct=1, logits=(40.0, 0.0, 0.0), N=(2,), gamma=(0.0,), seeds=(0,), lr=(lr,),
                    steps=1, record_every=1, optimizer=optimizer, mu=mu, memory_lr=mlr, record_probs=True)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    one = traj[traj.step == 1].iloc[0]
    phi1 = mlr * (np.array([2 / 3, -1 / 3, -1 / 3]) if optimizer == "sgd" else np.array([1.0, -1.0, -1.0]))
    m1 = np.exp(phi1) / np.exp(phi1).sum()
    np.testing.assert_allclose([one.m_0, one.m_1, one.m_2], m1, rtol=1e-7)
    u1 = np.log([one.p_0, one.p_1, one.p_2])
    w = u1 - mu * phi1
    np.testing.assert_allclose([one.q_0, one.q_1, one.q_2], np.exp(w - w.max()) / np.exp(w - w.max()).sum(),
                               rtol=1e-7)
    zero = traj[traj.step == 0].iloc[0]   # φ_0 = 0: the memory is uniform and q_0 = π_0
    assert zero.memory_entropy == pytest.approx(np.log(3), rel=1e-12) and zero.kl_sample_policy == 0
    assert [zero.q_0, zero.q_1, zero.q_2] == [zero.p_0, zero.p_1, zero.p_2]


# ------------------------------------------------------------------ predictions under q
def test_first_order_predictions_hold_for_draws_from_q():
    """F-GRPO Eq. 8 is a function of (z, counts) and Eq. 21 / the entropy formula of the actual
    step: with draws from q (after the memory has moved, q ≠ π) and a small SGD step of the TRPO
    surrogate they still match the measured change."""
    cfg = sc.Config(K=400, n_correct=40, N=(8, 64), gamma=(0.0, 1.0), seeds=(0, 1), steps=6, record_every=1,
                    optimizer="sgd", lr=(1e-4,), surrogate="trpo", predict=True, mu=2.0, memory_lr=50.0)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    later = traj[(traj.step >= 2) & (traj.step < cfg.steps)]
    later = later[later.dQ_pos != 0]  # γ = 1 with every draw correct: no step
    assert later.kl_sample_policy.min() > 1e-2 and len(later) >= 24
    np.testing.assert_allclose(later.dQ_pos_eq8, later.dQ_pos, rtol=2e-3)
    np.testing.assert_allclose(later.dQ_pos_first_order, later.dQ_pos, rtol=2e-3)
    np.testing.assert_allclose(later.dH_first_order, later.dH, rtol=2e-3)


# ------------------------------------------------------------------ off: the uncalibrated run
def _off_config(**kw):
    return sc.Config(K=40, n_correct=6, N=(4, 32), gamma=(0.0, 1.0), seeds=(3,), lr=(0.05,), steps=8,
                     record_every=4, surrogate="logprob", predict=True, **kw)


def test_mu_zero_is_the_uncalibrated_run():
    """``mu = 0`` (default or given) is the uncalibrated run: the engine equals the step-by-step
    reference whose draws come from π itself (at ``mu = 0`` its q = softmax(z/T − 0·φ) = π), adds
    no column, and the default and the given 0 are the same run, compared exactly in this run.
    Tolerance 1e-9 relative: the engine and the reference sum in different orders (float64,
    8 steps of lr 0.05; the observed difference is ~1e-15)."""
    cfg = _off_config()
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    for row in cfg.grid().itertuples():
        ref = _reference(cfg, row.N, row.gamma, row.seed, row.lr)
        ref = ref[ref.step % cfg.record_every == 0].reset_index(drop=True)
        ours = traj[traj.config == row.config].reset_index(drop=True)
        np.testing.assert_array_equal(ours.step, ref.step)
        for col in ("Q_pos", "M_ret", "entropy", "p_anchor"):
            np.testing.assert_allclose(ours[col], ref[col], rtol=1e-9, atol=1e-12, err_msg=col)
        np.testing.assert_array_equal(ref.sample_Q_pos, ref.Q_pos)  # the reference draws from π
    given, _ = sc.simulate(_off_config(mu=0.0), device="cpu", dtype=torch.float64)
    pd.testing.assert_frame_equal(traj, given, check_exact=True)
    assert not {"mu", "memory_lr", "sample_Q_pos", "kl_sample_policy"} & set(traj.columns)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kw,text", [
    ({"mu": -0.5}, "mu must be a finite number >= 0, got -0.5"), ({"mu": float("nan")}, "mu must be"),
    ({"mu": True}, "mu must be"), ({"mu": float("inf")}, "mu must be"),
    ({"mu": 0.5, "memory_lr": 0.0}, "memory_lr must be a finite number > 0, got 0.0"),
    ({"mu": 0.5, "memory_lr": -1}, "memory_lr must be"), ({"mu": 0.5, "memory_lr": "fast"}, "memory_lr must be"),
    ({"memory_lr": 0.1}, "memory_lr applies only with mu > 0 (no memory logits are used at mu = 0), got mu=0.0")])
def test_bad_mu_or_memory_lr_is_refused_by_name(kw, text):
    with pytest.raises(ValueError) as err:
        sc.simulate(sc.Config(K=10, n_correct=2, N=(4,), seeds=(0,), steps=2, **kw), device="cpu")
    assert text in str(err.value)


@pytest.mark.parametrize("kw,text", [
    ({"memory_lr": 1e38}, "memory_lr = 1e+38 makes the run diverge: non-finite memory logits at step 1 "
                          "(configuration 0: N=4, gamma=0, seed=0, mu=0.5)"),
    ({"lr": (1e38,)}, "lr = 1e+38 makes the run diverge: non-finite logits at step 1 (configuration 0: N=4, gamma=0, "
                      "seed=0)")])
def test_a_diverging_memory_is_named(kw, text):
    """Adam steps of ~lr overflow float32 after a step: the run stops naming what diverged."""
    with pytest.raises(ValueError) as err:
        sc.simulate(sc.Config(K=10, n_correct=3, N=(4,), seeds=(0,), steps=30, record_every=1, mu=0.5, **kw),
                    device="cpu")
    assert str(err.value).startswith(text)


@pytest.mark.parametrize("extra,text", [(["--mu", "-1"], "--mu must be a finite number >= 0"),
                                        (["--memory-lr", "0.1"], "--memory-lr applies only with mu > 0"),
                                        (["--mu", "0.5", "--memory-lr", "0"], "--memory-lr must be")])
def test_cli_refuses_bad_values_naming_the_flag(tmp_path, capsys, extra, text):
    out = tmp_path / "bad"
    rc = cli.main(["categorical", "--preset", "fgrpo-fig4-small", "--steps", "2", "--N", "4", "--seeds", "1",
                   "--device", "cpu", "--quiet", "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlvr-sim: error: ") and text in err, err
    assert not out.exists()


def test_cli_mu_reaches_the_run(tmp_path, capsys):
    """``--mu`` and ``--memory-lr`` (flags generated from Config) set the run and are recorded."""
    import json

    out = tmp_path / "dlc"
    rc = cli.main(["categorical", "--preset", "fgrpo-fig4-small", "--steps", "3", "--N", "4", "--seeds", "1",
                   "--device", "cpu", "--quiet", "--threads", "1", "--mu", "0.5", "--memory-lr", "0.2",
                   "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["mu"] == 0.5 and meta["config"]["memory_lr"] == 0.2
    assert meta["settings"]["mu"] == 0.5 and meta["settings"]["memory_lr"] == 0.2
    final = pd.read_csv(out / "final.csv")
    assert (final.mu == 0.5).all() and (final.memory_lr == 0.2).all() and (final.kl_sample_policy > 0).all()


def test_memory_estimate_counts_the_memory():
    off = sc.Config(N=(4,), seeds=(0,))
    on = sc.Config(N=(4,), seeds=(0,), mu=0.5)
    extra = on.memory_bytes() - off.memory_bytes()
    assert 7 * 4 * 128_000 * 2 <= extra <= 7 * 4 * 128_000 * 2 + 3 * 8 * 6 * 102 * 2
