"""Distribution-level calibration (DLC, Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and 21-22) in
:func:`simulations.linear_head.simulate_toy` and ``simulate_population``: a memory head trained by
cross-entropy on the sampled labels, rollouts drawn from ``softmax(f_θ − μ·f_φ)``, the policy
gradient on ``log π_θ``.

Every check is against a computation that does not use the simulator's code: a step-by-step
torch reference (autograd gradients, torch optimizers, its own inverse-CDF sampler), Monte Carlo
frequencies of the drawn labels, and the same reference at μ = 0 for the uncalibrated toy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from rlvr_theory import advantages
from rlvr_theory.sharpening import TOY_EMBEDDINGS
from simulations import cli
from simulations import linear_head as lh

PERSIAN = np.array(TOY_EMBEDDINGS["Persian"])
CORRECT = np.array([1.0, 0.0, 1.0, 0.0])  # Cat, Dog, Persian, Siamese


# ------------------------------------------------------------------ an independent reference
def _reference_toy(seed: int, G: int, steps: int, *, advantage: str, optimizer: str, lr: float, mu: float,
                   memory_lr: float) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The toy with a memory head written from Alg. 1: one seed, a Python loop over steps,
    torch autograd for both gradients and torch's own SGD / AdamW for both heads.

    Returns per step ``π_θ(·|Persian)`` and ``q = softmax(f_θ − μ f_φ)(·|Persian)`` and the
    final ``W``, ``W_φ``."""
    def make_opt(p: torch.Tensor, rate: float) -> torch.optim.Optimizer:
        if optimizer == "sgd":
            return torch.optim.SGD([p], lr=rate)
        return torch.optim.AdamW([p], lr=rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    rng = np.random.default_rng(seed)
    h = torch.tensor(PERSIAN)
    W = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    Wm = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    opt_w, opt_m = make_opt(W, lr), make_opt(Wm, memory_lr)
    adv = advantages.get(advantage)
    rows = []
    for t in range(steps + 1):
        with torch.no_grad():
            pi = torch.softmax(W @ h, 0).numpy()
            q = torch.softmax(W @ h - mu * (Wm @ h), 0).numpy()          # Alg. 1 line 5
        rows.append(dict(step=t, p_cat=pi[0], p_persian=pi[2], q_cat=q[0], q_persian=q[2]))
        if t == steps:
            break
        u = rng.random((1, G))[0]
        y = np.minimum(np.searchsorted(np.cumsum(q), u, side="left"), 3)  # line 6: inverse CDF of q
        A = torch.tensor(adv(CORRECT[y][None])[0])
        yt = torch.tensor(y)
        opt_w.zero_grad()
        (-(A * torch.log_softmax(W @ h, 0)[yt]).sum()).backward()          # line 20: Σ A log π_θ (Eq. 3)
        opt_w.step()
        opt_m.zero_grad()
        (-torch.log_softmax(Wm @ h, 0)[yt].mean()).backward()               # line 22: cross-entropy
        opt_m.step()
    return pd.DataFrame(rows), W.detach().numpy(), Wm.detach().numpy()


@pytest.mark.parametrize("optimizer,advantage,mu,memory_lr", [("sgd", "iac", 0.5, 0.1), ("sgd", "reinforce", 0.5, 3.0),
                                                             ("adamw", "grpo", 2.0, 0.05)])
def test_toy_with_memory_equals_the_autograd_reference(optimizer, advantage, mu, memory_lr):
    """Samples from softmax(f_θ − μ f_φ), the policy step on log π_θ, the memory's own
    cross-entropy step after it: the trajectory and both heads equal the reference."""
    seeds, G, steps = [0, 5], 6, 40
    tr, final = lh.simulate_toy(G=G, seeds=seeds, steps=steps, advantage=advantage, optimizer=optimizer, lr=0.1,
                                mu=mu, memory_lr=memory_lr)
    for c, seed in enumerate(seeds):
        ref, W, Wm = _reference_toy(seed, G, steps, advantage=advantage, optimizer=optimizer, lr=0.1, mu=mu,
                                    memory_lr=memory_lr)
        ours = tr[tr.seed == seed].reset_index(drop=True)
        for col in ("p_cat", "p_persian", "q_cat", "q_persian"):
            np.testing.assert_allclose(ours[col], ref[col], rtol=1e-9, atol=1e-12, err_msg=col)
        np.testing.assert_allclose(final.attrs["weights"][G][c], W, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(final.attrs["memory_weights"][G][c], Wm, rtol=1e-9, atol=1e-12)
        # the calibration is not a no-op here: the sampling distribution left the policy
        assert np.abs(ref.q_cat - ref.p_cat).max() > 1e-3


def _reference_population(seed: int, *, M: int, K: int, G: int, steps: int, mu: float, memory_lr: float,
                          advantage: str, params: dict) -> tuple[list[float], np.ndarray, np.ndarray]:
    """The population with a memory head from Alg. 1, one seed, loops over steps, torch autograd
    and SGD: per rollout a path z from path_p, then an answer from softmax(f_θ − μ f_φ) at h_{m,z}.
    Returns the per-step solve rate under the sampling distribution and the final heads."""
    H, path_p, cm, W0 = lh.population_setup(M, K)
    V = W0.shape[0]
    rng = np.random.default_rng(seed)
    Ht = torch.tensor(H)                                                    # [M, K+1, d]
    W = torch.tensor(W0, requires_grad=True)
    Wm = torch.zeros(W0.shape, dtype=torch.float64, requires_grad=True)
    opt_w, opt_m = torch.optim.SGD([W], lr=0.05), torch.optim.SGD([Wm], lr=memory_lr)
    adv = advantages.get(advantage, **params)
    cdf_path = np.cumsum(path_p, -1)
    cdf_path[:, -1] = 1.0
    rows = []
    for t in range(steps + 1):
        with torch.no_grad():
            q = torch.softmax(Ht @ W.T - mu * (Ht @ Wm.T), -1).numpy()     # [M, K+1, V]
        rows.append(float((q[np.arange(M), :, cm] * path_p).sum(-1).mean()))
        if t == steps:
            break
        u1 = rng.random((M, G))
        z = np.stack([np.searchsorted(cdf_path[m], u1[m], side="left") for m in range(M)])
        u2 = rng.random((M, G))
        y = np.array([[min(np.searchsorted(np.cumsum(q[m, z[m, i]]), u2[m, i], side="left"), V - 1)
                       for i in range(G)] for m in range(M)])
        A = torch.tensor(adv((y == cm[:, None]).astype(float)))
        hz = Ht[torch.arange(M)[:, None], torch.tensor(z)]                  # [M, G, d]
        yt = torch.tensor(y)[..., None]
        opt_w.zero_grad()
        (-(A * torch.log_softmax(hz @ W.T, -1).gather(-1, yt)[..., 0]).sum() / M).backward()
        opt_w.step()
        opt_m.zero_grad()
        (-torch.log_softmax(hz @ Wm.T, -1).gather(-1, yt).mean()).backward()
        opt_m.step()
    return rows, W.detach().numpy(), Wm.detach().numpy()


def test_population_with_memory_equals_the_autograd_reference():
    M, K, G, steps, mu, mlr = 6, 2, 5, 12, 1.0, 2.0
    params = {"delta": 0.5}
    tr, final = lh.simulate_population(M=M, K=K, G=G, seeds=[1, 4], steps=steps, log_every=1, mu=mu, memory_lr=mlr,
                                       advantage="asym_grpo", advantage_params=params)
    for c, seed in enumerate([1, 4]):
        solve, W, Wm = _reference_population(seed, M=M, K=K, G=G, steps=steps, mu=mu, memory_lr=mlr,
                                             advantage="asym_grpo", params=params)
        np.testing.assert_allclose(tr[tr.seed == seed].sample_solve_rate, solve, rtol=1e-9)
        np.testing.assert_allclose(final.attrs["weights"][K][1][c], W, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(final.attrs["memory_weights"][K][c], Wm, rtol=1e-9, atol=1e-12)
    assert (tr.solve_rate - tr.sample_solve_rate).abs().max() > 1e-3   # the calibration acted


def test_population_mu_zero_is_the_uncalibrated_run():
    kw = dict(M=8, K=[2, 4], seeds=2, steps=20, log_every=5)
    a, fa = lh.simulate_population(**kw)
    b, fb = lh.simulate_population(mu=0.0, **kw)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert "sample_solve_rate" not in b and "memory_weights" not in fb.attrs
    with pytest.raises(ValueError, match="^mu must be a finite number >= 0, got nan"):
        lh.simulate_population(mu=float("nan"), steps=1)


def test_memory_gradient_is_the_cross_entropy_gradient_by_finite_differences():
    """One SGD step of the memory from W_φ = 0 moves it by −memory_lr·∇CE; ∇CE by central
    differences of the mean cross-entropy of the labels drawn at step 0 (uniform policy and memory)."""
    G, lr_m = 7, 0.3
    _, final = lh.simulate_toy(G=G, seeds=[3], steps=1, mu=1.0, memory_lr=lr_m, advantage="grpo")
    y = np.minimum((np.random.default_rng(3).random(G)[:, None] > np.cumsum(np.full(4, 0.25))).sum(-1), 3)

    def ce(Wm: np.ndarray) -> float:
        z = Wm @ PERSIAN
        return float(np.mean(np.log(np.exp(z).sum()) - z[y]))

    eps, fd = 1e-6, np.zeros((4, 4))
    for i in range(4):
        for j in range(4):
            d = np.zeros((4, 4))
            d[i, j] = eps
            fd[i, j] = (ce(d) - ce(-d)) / (2 * eps)
    np.testing.assert_allclose(final.attrs["memory_weights"][G][0], -lr_m * fd, atol=1e-9)


def test_rollouts_follow_the_calibrated_distribution_by_monte_carlo():
    """Over 3,000 seeds the correct labels drawn at step t match Σ_s (q_cat + q_persian) of the
    calibrated distribution (within 4 s.e.), and not the policy's own π_θ (measured: 13 to 145
    s.e. away at steps 1-6)."""
    G, steps = 4, 6
    tr, _ = lh.simulate_toy(G=G, seeds=3000, steps=steps + 1, advantage="reinforce", mu=2.0, memory_lr=20.0)
    for t in range(1, steps + 1):
        cur = tr[tr.step == t]
        drawn = G * cur.reward_mean.sum()                       # correct labels drawn at step t
        qc = (cur.q_cat + cur.q_persian).to_numpy()
        pc = (cur.p_cat + cur.p_persian).to_numpy()
        se = np.sqrt((G * qc * (1 - qc)).sum())
        assert abs(drawn - G * qc.sum()) < 4 * se, t
        assert abs(drawn - G * pc.sum()) > 10 * se, t
    # the logged q is softmax((W − μ W_φ)·h) of the logged heads
    tr1, final = lh.simulate_toy(G=G, seeds=[0, 1], steps=3, advantage="reinforce", mu=1.0, memory_lr=5.0)
    z = (final.attrs["weights"][G] - final.attrs["memory_weights"][G]) @ PERSIAN
    q = np.exp(z - z.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    np.testing.assert_allclose(final[["q_cat", "q_persian"]].to_numpy(), q[:, [0, 2]], rtol=1e-12)


# ------------------------------------------------------------------ μ = 0 is the uncalibrated toy
@pytest.mark.parametrize("optimizer,advantage", [("sgd", "grpo"), ("sgd", "iac"), ("adamw", "grpo"), ("adamw", "iac")])
def test_mu_zero_reproduces_the_uncalibrated_toy(optimizer, advantage):
    """``mu = 0`` is the toy without a memory head: it equals the reference at μ = 0 (whose draws
    come from π itself), adds no column, and the default and the given 0 are the same run
    (compared exactly, both computed now).  Tolerance 1e-9 relative: the simulator and the
    reference sum in different orders (float64, 60 steps of lr 0.1)."""
    seeds, G, steps = [0, 3], 16, 60
    kw = dict(G=G, seeds=seeds, advantage=advantage, optimizer=optimizer, lr=0.1, steps=steps)
    tr, final = lh.simulate_toy(mu=0, **kw)
    for c, seed in enumerate(seeds):
        ref, W, _ = _reference_toy(seed, G, steps, advantage=advantage, optimizer=optimizer, lr=0.1, mu=0.0,
                                   memory_lr=0.1)
        ours = tr[tr.seed == seed].reset_index(drop=True)
        for col in ("p_cat", "p_persian"):
            np.testing.assert_allclose(ours[col], ref[col], rtol=1e-9, atol=1e-12, err_msg=col)
        np.testing.assert_allclose(final.attrs["weights"][G][c], W, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(ref.q_cat, ref.p_cat)  # the reference draws from π
    default, _ = lh.simulate_toy(**kw)
    pd.testing.assert_frame_equal(tr, default, check_exact=True)
    assert not {"q_cat", "mu", "memory_lr", "sample_entropy"} & set(tr.columns)
    assert "memory_weights" not in final.attrs


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kw,msg", [(dict(mu=-0.5), "^mu must be a finite number >= 0, got -0.5"),
                                    (dict(mu=float("nan")), "^mu must be a finite number >= 0, got nan"),
                                    (dict(mu=float("inf")), "^mu must be"), (dict(mu=True), "^mu must be"),
                                    (dict(mu="0.5"), "^mu must be"),
                                    (dict(mu=0.5, memory_lr=0.0), "^memory_lr must be a finite number > 0"),
                                    (dict(mu=0.5, memory_lr=float("nan")), "^memory_lr must be"),
                                    (dict(memory_lr=0.1), "^memory_lr applies only with mu > 0")])
def test_bad_mu_and_memory_lr_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        lh.simulate_toy(steps=2, **kw)


def test_cli_mu_reaches_both_instances_and_bad_values_are_refused(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["linear-head", "--preset", "toy-small", "--steps", "5", "--G", "4", "--seeds", "1",
                     "--mu", "0.5", "--memory-lr", "0.2", "--out", str(out), "--quiet"]) == 0
    tr = pd.read_csv(out / "trajectory.csv")
    assert (tr.mu == 0.5).all() and (tr.memory_lr == 0.2).all() and tr.q_cat.notna().all()
    ref, _ = lh.simulate_toy(G=[4], similarity=["High", "Low"], seeds=1, steps=5, advantage="dr_grpo", mu=0.5,
                             memory_lr=0.2)
    np.testing.assert_allclose(tr.q_cat, ref.q_cat, rtol=1e-12)
    assert cli.main(["linear-head", "--preset", "population-small", "--steps", "4", "--K", "2", "--mu", "0.5",
                     "--out", str(tmp_path / "p"), "--quiet"]) == 0
    pop = pd.read_csv(tmp_path / "p" / "trajectory.csv")
    assert (pop.mu == 0.5).all() and (pop.memory_lr == 0.05).all() and pop.sample_solve_rate.notna().all()
    for argv, word in ((["--preset", "toy-small", "--mu", "nan"], "--mu must be a finite number >= 0, got nan"),
                       (["--preset", "toy-small", "--mu", "-1"], "--mu must be a finite number >= 0"),
                       (["--preset", "toy-small", "--memory-lr", "1"], "--memory-lr applies only with mu > 0"),
                       (["--preset", "population-small", "--mu", "-0.5"], "--mu must be a finite number >= 0")):
        bad = tmp_path / "bad"
        assert cli.main(["linear-head", *argv, "--out", str(bad), "--quiet"]) == 2
        assert word in capsys.readouterr().err
        assert not bad.exists()


# ------------------------------------------------------------------ what DLC does in the toy (measured)
def test_dlc_keeps_both_rewarded_labels_with_raw_rewards_but_not_with_centred_ones():
    """Samples from q, gradient of log π_θ: E[Δz] ∝ E[Σ_i A_i e_{y_i}] − π_θ E[Σ_i A_i].  With raw
    rewards (Σ A > 0) the second term pulls π_θ toward the flatter q and, the memory tracking q,
    toward an even split of Cat and Persian; with GRPO-centred advantages Σ A = 0 and IAC adds
    little, so the drift toward the more sampled label remains.  Measured (16 seeds, G = 4,
    SGD lr 0.1, memory_lr 0.1, step 500): winner share raw 0.96 → 0.61 with μ = 0.5;
    IAC 0.90 → 0.90."""
    share = {}
    for adv in ("reinforce", "iac"):
        for mu in (0.0, 0.5):
            _, fin = lh.simulate_toy(G=4, seeds=8, steps=300, advantage=adv, mu=mu)
            share[adv, mu] = fin.winner_share.mean()
    assert share["reinforce", 0.5] < 0.75 < 0.9 < share["reinforce", 0.0]
    assert share["iac", 0.5] > 0.8
