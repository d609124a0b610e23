"""Tests of simulations.categorical: exact group sampling, the registry's advantages, one-step
identities, batching, bad input and the ``rlvr-sim categorical`` command line.

References: scipy.stats chi-square against the multinomial law; the registry
(rlvr_theory.advantages) on full reward vectors; the one-step updates and exact mass/entropy
changes of rlvr_theory.categorical / rlvr_theory.entropy (float64 numpy, independent of the
torch engine); the regimes of F-GRPO Fig. 4.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from rlvr_theory import advantages
from rlvr_theory import categorical as cat
from rlvr_theory import entropy as ent
from simulations import categorical as sc
from tests.in_process import run_in_process


# ------------------------------------------------------------------ sampling
def test_counts_chi_square_small_N():
    probs = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    B, N = 20000, 6
    p = torch.tensor(probs).repeat(B, 1)
    counts = sc.sample_counts(p, N, torch.arange(B), step=3).numpy()
    assert np.all(counts.sum(1) == N)
    # pooled cell counts ~ Multinomial(B N, p)
    tot = counts.sum(0)
    assert stats.chisquare(tot, B * N * probs).pvalue > 1e-3
    # marginal of action 0 per row ~ Binomial(N, 0.5)
    obs = np.bincount(counts[:, 0].astype(int), minlength=N + 1)
    assert stats.chisquare(obs, B * stats.binom.pmf(np.arange(N + 1), N, 0.5)).pvalue > 1e-3
    # joint law of (n_0, n_1) for N = 6: multinomial pmf over all cells with expectation >= 5
    pairs = counts[:, 0].astype(int) * (N + 1) + counts[:, 1].astype(int)
    obs2 = np.bincount(pairs, minlength=(N + 1) ** 2)
    a, b = np.divmod(np.arange((N + 1) ** 2), N + 1)
    ok = a + b <= N
    exp2 = np.zeros((N + 1) ** 2)
    exp2[ok] = B * stats.multinomial.pmf(np.stack([a[ok], b[ok], N - a[ok] - b[ok]], 1), N, [0.5, 0.25, 0.25])
    big = exp2 >= 5
    rest_o, rest_e = obs2[~big].sum(), exp2[~big].sum()
    assert stats.chisquare(np.r_[obs2[big], rest_o], np.r_[exp2[big], rest_e]).pvalue > 1e-3


def test_counts_chi_square_large_N_app_j_policy():
    cfg = sc.Config()
    z, correct = sc.initial_logits(cfg)
    probs = cat.softmax(z)
    B, N = 3, 131_072
    counts = sc.sample_counts(torch.tensor(probs).repeat(B, 1), N, torch.arange(B), step=0).numpy()
    assert np.all(counts.sum(1) == N)
    tot = counts.sum(0)
    # classes: anchor, correct leaves, incorrect
    cls_obs = [tot[0], tot[1:cfg.n_correct].sum(), tot[cfg.n_correct:].sum()]
    cls_p = [probs[0], probs[1:cfg.n_correct].sum(), probs[cfg.n_correct:].sum()]
    assert stats.chisquare(cls_obs, B * N * np.array(cls_p)).pvalue > 1e-3
    # within a class all actions are equally likely: 100 bins of leaves, 118 bins of incorrect
    for lo, hi, nb in ((1, cfg.n_correct, 99), (cfg.n_correct, cfg.K, 118)):
        bins = tot[lo:hi].reshape(nb, -1).sum(1)
        assert stats.chisquare(bins).pvalue > 1e-3
    # per-row number of correct draws X ~ Binomial(N, Q_pos): z-score of the 3 rows' sum
    X = counts[:, : cfg.n_correct].sum(1)
    q = probs[: cfg.n_correct].sum()
    assert abs(X.sum() - B * N * q) < 4 * np.sqrt(B * N * q * (1 - q))


def test_sampling_is_per_row_deterministic():
    p = torch.softmax(torch.randn(5, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    seeds = torch.tensor([7, 8, 9, 10, 11])
    full = sc.sample_counts(p, 100, seeds, 4)
    one = sc.sample_counts(p[2:3], 100, seeds[2:3], 4)
    assert torch.equal(full[2:3], one)
    assert not torch.equal(sc.sample_counts(p, 100, seeds, 5), full)


# ------------------------------------------------------------------ advantages
@pytest.mark.parametrize("name", ["dr_grpo", "grpo", "rloo"])
def test_outcome_advantages_match_registry(name):
    adv = advantages.get(name, reward_values=(-1.0, 1.0))
    N = 12
    X = np.arange(N + 1)
    ac, aw = sc.outcome_advantages(adv, X, N)
    for x in X:
        r = np.where(np.arange(N) < x, 1.0, -1.0)
        A = adv(r)
        if x > 0:
            assert ac[x] == pytest.approx(A[0], abs=1e-12)
        if x < N:
            assert aw[x] == pytest.approx(A[-1], abs=1e-12)


# ------------------------------------------------------------------ one-step identities
def _small_cfg(**kw):
    base = dict(K=400, n_correct=40, N=(8, 64), gamma=(0.0, 1.0), seeds=(0, 1), steps=1, record_every=1,
                optimizer="sgd", lr=(0.5,))
    return sc.Config(**{**base, **kw}).validate()


@pytest.mark.parametrize("surrogate,adv,T", [("logprob", "dr_grpo", 1.0), ("logprob", "grpo", 1.0),
                                             ("logprob", "reinforce", 1.0), ("logprob", "reinforce", 2.0),
                                             ("trpo", "dr_grpo", 1.0), ("prob", "dr_grpo", 1.0)])
def test_one_step_matches_rlvr_theory_update(surrogate, adv, T):
    """The engine's measured ΔQ_pos and ΔH after one SGD step equal the exact change of the
    update rebuilt from rlvr_theory.categorical with the same draws (float64).  With a
    temperature the policy is softmax(u), u = z/T, and Δu = Δz/T = (lr/T²)·(gradient in u)."""
    cfg = _small_cfg(surrogate=surrogate, advantage=adv, temperature=T)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    z0, correct = sc.initial_logits(cfg)
    z0 = z0 / T  # u0
    grid = cfg.grid()
    p0 = torch.tensor(cat.softmax(z0))
    reg = advantages.get(adv, reward_values=cfg.reward_values)
    for row in grid.itertuples():
        counts = sc.sample_counts(p0[None], row.N, torch.tensor([row.seed]), 0)[0].numpy()
        actions = np.repeat(np.arange(cfg.K), counts.astype(int))
        r = np.where(correct[actions], 1.0, -1.0)
        focal = (1 - correct[actions].mean()) ** row.gamma
        if surrogate == "logprob":
            dz = cat.logit_update(z0, actions, focal * reg(r), row.lr / T**2)
        elif surrogate == "trpo":
            dz = cat.surrogate_logit_update(z0, correct, counts, row.lr * focal, cfg.reward_values)
        else:  # prob (F-GRPO App. J): gradient of (1/N) sum_j A_j p(a_j) in the logits
            pz = cat.softmax(z0)
            S = cat.advantage_per_action(actions, focal * reg(r), cfg.K) / row.N
            dz = row.lr * pz * (S - np.sum(pz * S))
        cur = traj[traj.config == row.config].set_index("step")
        dq = cat.exact_subset_mass_change(z0, dz, correct)
        dh = ent.exact_change(z0, dz)
        assert cur.Q_pos[1] - cur.Q_pos[0] == pytest.approx(dq, rel=1e-7, abs=1e-15)
        assert cur.entropy[1] - cur.entropy[0] == pytest.approx(dh, rel=1e-6, abs=1e-12)


def test_small_lr_first_order_predictions():
    """With a small step the recorded first-order predictions (F-GRPO Eq. 8 for the TRPO surrogate
    under SGD; Eq. 21 and -Cov(log pi, dz) for the actual step) match the measured change."""
    cfg = _small_cfg(surrogate="trpo", lr=(1e-4,), predict=True)
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    s0 = traj[traj.step == 0]
    assert np.all(np.abs(s0.dQ_pos) > 0)
    np.testing.assert_allclose(s0.dQ_pos_eq8, s0.dQ_pos, rtol=1e-3)
    np.testing.assert_allclose(s0.dQ_pos_first_order, s0.dQ_pos, rtol=1e-3)
    np.testing.assert_allclose(s0.dH_first_order, s0.dH, rtol=1e-3)
    # Q_u_pos: the correct mass not drawn at step 0 equals rlvr_theory's sample_moments
    z0, correct = sc.initial_logits(cfg)
    for row in cfg.grid().itertuples():
        counts = sc.sample_counts(torch.tensor(cat.softmax(z0))[None], row.N, torch.tensor([row.seed]), 0)[0]
        m = cat.sample_moments(z0, correct, counts.numpy(), cfg.reward_values)
        assert s0.Q_u_pos.iloc[row.config] == pytest.approx(float(m.Q_u_pos), rel=1e-10)


def test_expected_logit_update_over_seeds():
    """Mean of the engine's one-step ΔQ_pos over many seeds ≈ the first-order change of
    rlvr_theory's exact expected update (Two-Stage Theorem 1 with the registry's effective advantage)."""
    S = 400
    cfg = _small_cfg(surrogate="logprob", N=(8,), gamma=(0.0,), seeds=tuple(range(S)), lr=(1e-3,))
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    d = traj.pivot(index="config", columns="step", values="Q_pos")
    meas = (d[1] - d[0]).to_numpy()
    z0, correct = sc.initial_logits(cfg)
    edz = cat.expected_group_logit_update(z0, correct, advantages.get("dr_grpo", reward_values=(-1.0, 1.0)), 8, 1e-3)
    pred = cat.subset_mass_change(z0, edz, correct)
    assert abs(meas.mean() - pred) < 4 * meas.std(ddof=1) / np.sqrt(S)


# ------------------------------------------------------------------ batching
def test_batched_equals_one_at_a_time():
    cfg = _small_cfg(optimizer="adam", lr=(1e-2,), steps=15, record_every=3, surrogate="logprob")
    traj, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    cols = ["Q_pos", "M_ret", "entropy", "p_anchor", "frac_lost", "Q_u_pos"]
    for row in cfg.grid().itertuples():
        one = sc.Config(**{**cfg.to_dict(), "N": (row.N,), "gamma": (row.gamma,), "seeds": (row.seed,)})
        t1, _ = sc.simulate(one, device="cpu", dtype=torch.float64)
        mine = traj[traj.config == row.config].reset_index(drop=True)
        np.testing.assert_allclose(mine[cols].to_numpy(), t1[cols].to_numpy(), rtol=1e-12, atol=1e-15)
    assert traj.Q_pos.nunique() > 5  # trajectories actually move


# ------------------------------------------------------------------ defaults, errors, CLI
def test_app_j_initial_state():
    cfg = sc.Config()
    z, correct = sc.initial_logits(cfg)
    p = cat.softmax(z)
    assert p[correct].sum() == pytest.approx(0.63, abs=0.005)  # F-GRPO App. J: Q_pos ≈ 0.63
    assert p[0] == pytest.approx(4.7e-4, abs=5e-6)  # p_anchor ≈ 4.7e-4 (2 digits)
    assert p[1] == pytest.approx(6.3e-5, abs=5e-7)  # τ_leaf ≈ 6.3e-5


@pytest.mark.parametrize("kw,word", [({"surrogate": "ppo"}, "surrogate"), ({"optimizer": "rmsprop"}, "optimizer"),
                                     ({"N": (0,)}, "N"), ({"gamma": (-1.0,)}, "gamma"), ({"lr": (0.0,)}, "lr"),
                                     ({"temperature": 0.0}, "temperature"), ({"advantage": "nope"}, "advantage"),
                                     ({"n_correct": 128_000}, "n_correct")])
def test_bad_config(kw, word):
    with pytest.raises(ValueError, match=f"^{word}"):
        sc.Config(**kw).validate()
    with pytest.raises(ValueError, match="^preset"):
        sc.preset("fig9")


def test_cli_writes_outputs(tmp_path):
    """``rlvr-sim categorical`` as ``main(argv)`` in this process (``python -m simulations`` itself:
    tests/simulations/test_cli.py)."""
    from simulations import cli

    out = tmp_path / "run"
    r = run_in_process(cli.main, "categorical", "--preset", "fgrpo-fig4-small", "--steps", "3", "--N", "4", "16",
                       "--gamma", "0", "1", "--seeds", "1", "--quiet", "--device", "cpu", "--out", str(out))
    assert r.returncode == 0, r.stderr
    final = pd.read_csv(out / "final.csv")
    traj = pd.read_csv(out / "trajectory.csv")
    assert len(final) == 4 and {"N", "gamma", "seed", "advantage", "Q_pos", "M_ret", "entropy"} <= set(final)
    assert "step" in traj and traj.step.max() == 3
    meta = json.loads((out / "config.json").read_text())
    assert meta["device"] == "cpu" and meta["config"]["steps"] == 3
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]
    bad = run_in_process(cli.main, "categorical", "--preset", "nope", "--quiet", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "preset must be one of" in bad.stderr


def test_integer_fields_accept_integral_floats_and_numpy_ints_but_not_bool():
    cfg = _small_cfg(K=np.int64(400), n_correct=40.0, N=[8.0, np.int64(64)], seeds=(np.int64(0), 1), steps=1.0)
    assert (cfg.K, cfg.n_correct, cfg.N, cfg.seeds, cfg.steps) == (400, 40, (8, 64), (0, 1), 1)
    assert all(type(v) is int for v in (cfg.K, cfg.n_correct, cfg.steps, *cfg.N, *cfg.seeds))
    for kw, word in (({"steps": True}, "steps"), ({"N": (8, True)}, r"N\[1\]"), ({"K": 400.5}, "K"),
                     ({"gamma": (False,)}, "gamma"), ({"N": 8}, "N")):
        with pytest.raises(ValueError, match=f"^{word}"):
            _small_cfg(**kw)


def _cli_run(tmp_path, name, *extra):
    from simulations import cli

    out = tmp_path / name
    argv = ["categorical", "--preset", "fgrpo-fig4-small", "--steps", "2", "--N", "16", "--gamma", "0", "--seeds",
            "1", "--device", "cpu", "--quiet", "--out", str(out), *extra]
    return cli.main(argv), out


def test_cli_param_sets_the_advantage_parameters(tmp_path, capsys):
    """``--param NAME=VALUE`` reaches the registry advantage and is recorded in config.json."""
    rc, half = _cli_run(tmp_path, "half", "--advantage", "asym_grpo", "--param", "delta=0.5", "--threads", "1")
    assert rc == 0, capsys.readouterr().err
    rc, one = _cli_run(tmp_path, "one", "--advantage", "asym_grpo", "--param", "delta=1.0")
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((half / "config.json").read_text())
    assert meta["config"]["advantage_params"] == {"delta": 0.5} and meta["config"]["advantage"] == "asym_grpo"
    assert meta["settings"]["param"] == {"delta": 0.5} and meta["threads"] == 1 and meta["seed"] == [0]
    assert {"package_version", "settings", "seed", "device", "threads"} <= set(meta) and "version" not in meta
    q_half = pd.read_csv(half / "final.csv").Q_pos.to_numpy()
    q_one = pd.read_csv(one / "final.csv").Q_pos.to_numpy()
    assert not np.array_equal(q_half, q_one)  # delta changes the run


@pytest.mark.parametrize("extra,word", [(["--advantage", "asym_grpo", "--param", "bogus=1"], "bogus"),
                                        (["--advantage", "asym_grpo", "--param", "delta=-1"], "delta"),
                                        (["--param", "delta"], "--param must look like NAME=VALUE"),
                                        (["--seeds", "0"], "--seeds must be an integer >= 1"),
                                        (["--threads", "0"], "--threads must be an integer >= 1")])
def test_cli_bad_param_is_refused_naming_it(tmp_path, capsys, extra, word):
    rc, out = _cli_run(tmp_path, "bad", *extra)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlvr-sim: error: ") and word in err
    assert not out.exists()


# ------------------------------------------------------------------ regimes (F-GRPO Fig. 4)
@pytest.mark.slow  # a 600-step run of the fgrpo-fig4-small preset (~8 s); the engine's fast tests are above
def test_three_regimes_small_preset():
    _three_regimes()


def _three_regimes():
    _, fin = sc.simulate(sc.preset("fgrpo-fig4-small"), device="cpu")
    f = fin.set_index(["N", "gamma"])
    small, mid, large = f.loc[4], f.loc[1024], f.loc[131_072]
    assert (small.M_ret > 0.95).all() and (small.Q_pos < 0.7).all()       # slow growth, mass kept
    assert (mid.Q_pos > 0.9).all() and (mid.M_ret < 0.5).all()            # concentration zone
    assert (large.Q_pos > 0.9).all() and (large.M_ret > 0.99).all()       # both high
    assert mid.M_ret[1.0] > mid.M_ret[0.0]                                 # focal retains more


def test_manual_adam_matches_torch_adam():
    """Several learning rates take the hand-written Adam; each must equal torch.optim.Adam
    (the single-lr path) on the same configuration."""
    both = _small_cfg(optimizer="adam", lr=(1e-2, 3e-2), steps=12, record_every=4, N=(16,), gamma=(1.0,), seeds=(3,))
    traj, _ = sc.simulate(both, device="cpu", dtype=torch.float64)
    for row in both.grid().itertuples():
        one = sc.Config(**{**both.to_dict(), "lr": (row.lr,)})
        t1, _ = sc.simulate(one, device="cpu", dtype=torch.float64)
        mine = traj[traj.config == row.config].reset_index(drop=True)
        np.testing.assert_allclose(mine[["Q_pos", "entropy", "M_ret"]].to_numpy(),
                                   t1[["Q_pos", "entropy", "M_ret"]].to_numpy(), rtol=1e-10, atol=1e-13)
    assert traj.groupby("config").Q_pos.last().diff().abs().iloc[-1] > 1e-4  # the two lrs differ


@pytest.mark.slow  # runs the fgrpo-fig4-small preset (~12-25 s)
def test_fgrpo_fig4_figure(tmp_path):
    import figures

    figures.make("fgrpo_fig4", tmp_path)
    assert (tmp_path / "fgrpo_fig4.png").stat().st_size > 10_000
    df = pd.read_csv(tmp_path / "fgrpo_fig4.csv")
    assert {"N", "gamma", "step", "Q_pos", "M_ret"} <= set(df)
    c = pd.read_csv(tmp_path / "fgrpo_fig4.claims.csv", keep_default_na=False)
    assert len(c) >= 6 and (c.status.isin(["pass", "not reproducible here"])).all(), c
    assert (c.status == "pass").sum() >= 6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_and_gpu_agree_on_deterministic_parts():
    """Same draws (counter-based generator on both devices), same float64 arithmetic up to
    reduction order: trajectories agree to float tolerance."""
    cfg = _small_cfg(optimizer="adam", lr=(1e-2,), steps=10, record_every=2)
    a, _ = sc.simulate(cfg, device="cpu", dtype=torch.float64)
    b, _ = sc.simulate(cfg, device="cuda", dtype=torch.float64)
    cols = ["Q_pos", "M_ret", "entropy", "p_anchor"]
    np.testing.assert_allclose(a[cols].to_numpy(), b[cols].to_numpy(), rtol=1e-9, atol=1e-12)


def test_recorded_probabilities_are_those_of_their_step_in_float64():
    """Regression: in float64 the recorded p_i / p_anchor were views of the policy buffer that
    later steps overwrite (every row showed the last policy)."""
    logits = (np.log(0.3), np.log(0.01), np.log(0.69))
    cfg = sc.Config(K=3, n_correct=2, logits=logits, N=(4,), gamma=(0.0,), seeds=(0,), steps=20,
                    lr=(0.1,), record_every=5, record_probs=True)
    for dtype in (torch.float32, torch.float64):
        traj, _ = sc.simulate(cfg, device="cpu", dtype=dtype)
        first = traj[traj.step == 0].iloc[0]
        np.testing.assert_allclose([first.p_0, first.p_1, first.p_2], [0.3, 0.01, 0.69], rtol=1e-6)
        assert first.p_anchor == pytest.approx(0.3, rel=1e-6)
        assert traj.p_0.nunique() == len(traj)  # every recorded step differs (Adam moves the logits)
