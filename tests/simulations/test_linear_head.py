"""simulations.linear_head: exact gradients, reproducibility, the Over-Sharpening toy claims, the FADE
rank-1 funnel, the FADE controller wiring and the CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import spectra
from rlvr_theory import advantages, rank1, schedules
from rlvr_theory.sharpening import TOY_EMBEDDINGS
from simulations import cli
from simulations import linear_head as lh

PERSIAN = np.array(TOY_EMBEDDINGS["Persian"])
TOY_CORRECT = np.array([[True, False, True, False]])  # Cat, Dog, Persian, Siamese


# ------------------------------------------------------------------ exact gradient identities
def test_head_gradient_equals_torch_autograd_of_the_surrogate():
    rng = np.random.default_rng(0)
    C, B, G, V, d = 3, 5, 4, 6, 7
    W = rng.standard_normal((C, V, d))
    H = rng.standard_normal((C, B, d))
    y = rng.integers(0, V, (C, B, G))
    A = rng.standard_normal((C, B, G))
    pi = lh.softmax(np.einsum("cvd,cbd->cbv", W, H))
    ours = lh.head_gradient(pi, H, y, A)
    Wt = torch.tensor(W, requires_grad=True)
    logp = torch.log_softmax(torch.einsum("cvd,cbd->cbv", Wt, torch.tensor(H)), -1)      # [C, B, V]
    lp = torch.gather(logp, 2, torch.tensor(y).reshape(C, B, G)).reshape(C, B, G)
    (torch.tensor(A) * lp).sum().backward()
    np.testing.assert_allclose(ours, Wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def _brute_force_toy_expectation(adv, G: int) -> np.ndarray:
    """E[Σ_i A_i (e_{y_i} − π) ⊗ h] at W = 0 by enumerating all 4^G label tuples."""
    pi = np.full(4, 0.25)
    out = np.zeros((4, 4))
    for ys in itertools.product(range(4), repeat=G):
        r = TOY_CORRECT[0][list(ys)].astype(float)
        A = adv(r[None])[0]
        g = sum(A[i] * np.outer(np.eye(4)[ys[i]] - pi, PERSIAN) for i in range(G))
        out += 0.25**G * g
    return out


@pytest.mark.parametrize("name", ["grpo", "reinforce", "rloo", "iac"])
def test_expected_gradient_equals_brute_force_enumeration(name):
    adv = advantages.get(name)
    G = 3
    ours = lh.expected_gradient(np.zeros((4, 4)), PERSIAN[None, None], np.ones((1, 1)), TOY_CORRECT, adv, G)
    np.testing.assert_allclose(ours, _brute_force_toy_expectation(adv, G), atol=1e-12)


def test_toy_one_step_small_lr_matches_the_expected_gradient():
    """One SGD step with lr = 1e-6 from W0 = 0: ΔW/lr averaged over 4,000 seeds = E[g] (4 s.e.)."""
    lr, n = 1e-6, 4000
    _, final = lh.simulate_toy(G=4, seeds=n, steps=1, lr=lr, advantage="grpo")
    D = final.attrs["weights"][4] / lr
    E = lh.expected_gradient(np.zeros((4, 4)), PERSIAN[None, None], np.ones((1, 1)), TOY_CORRECT,
                             advantages.get("grpo"), 4)
    se = D.std(0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(D.mean(0) - E) <= 4 * se + 1e-12)
    assert np.abs(E).max() > 0.05                            # the check is not vacuous


def test_population_one_step_matches_the_expected_gradient():
    lr, n = 1e-6, 2000
    _, final = lh.simulate_population(M=8, K=2, seeds=n, steps=1, lr=lr, advantage="asym_grpo",
                                      advantage_params={"delta": 0.5}, log_every=1)
    W0, W = final.attrs["weights"][2]
    D = (W - W0) / lr
    H, path_p, cm, W0b = lh.population_setup(8, 2)
    np.testing.assert_array_equal(W0, W0b)
    E = lh.expected_gradient(W0, H, path_p, cm, advantages.get("asym_grpo", delta=0.5), 8)
    z = np.abs(D.mean(0) - E) / (D.std(0, ddof=1) / np.sqrt(n) + 1e-15)
    assert z.max() < 4.5                                     # 320 entries: max |z| ~ 3 expected
    assert np.abs(E).max() > 0.01


# ------------------------------------------------------------------ reproducibility
def test_seeds_reproduce_and_batching_does_not_change_a_run():
    a, _ = lh.simulate_toy(G=4, seeds=[0, 1, 2], steps=50, similarity=["High", "Low"])
    b, _ = lh.simulate_toy(G=4, seeds=[0, 1, 2], steps=50, similarity=["High", "Low"])
    pd.testing.assert_frame_equal(a, b)
    c, _ = lh.simulate_toy(G=4, seeds=[1], steps=50, similarity="High")
    sub = a[(a.seed == 1) & (a.similarity == "High")].reset_index(drop=True)
    pd.testing.assert_frame_equal(sub, c)
    p1, _ = lh.simulate_population(M=6, K=2, seeds=[0, 3], steps=20, log_every=5)
    p2, _ = lh.simulate_population(M=6, K=2, seeds=[3], steps=20, log_every=5)
    pd.testing.assert_frame_equal(p1[p1.seed == 3].reset_index(drop=True), p2)
    p3, _ = lh.simulate_population(M=6, K=2, seeds=[4], steps=20, log_every=5)
    assert not np.allclose(p2.r1.dropna(), p3.r1.dropna())


# ------------------------------------------------------------------ the Over-Sharpening toy (Fig. 1-2, App. G-H)
@pytest.fixture(scope="module")
def toy_runs():
    runs = {}
    for adv in ("reinforce", "dr_grpo", "grpo", "iac"):
        runs[adv] = lh.simulate_toy(G=[4, 16], similarity=["High", "Mid", "Low"], seeds=16, advantage=adv,
                                    steps=500, log_every=10)[0]
    return runs


def test_toy_collapses_onto_one_label(toy_runs):
    """Over-Sharpening Sec. 2.4: 'the model eventually collapses onto a single label (either Cat or Persian)'."""
    tr = toy_runs["reinforce"]
    fin = tr[(tr.step == 500) & (tr.similarity == "High")]
    # measured: mean share of the winning label among {Cat, Persian} 0.93 (G=4), 0.96 (G=16)
    assert fin.groupby("G").winner_share.mean().min() > 0.9
    assert (fin.p_cat + fin.p_persian).min() > 0.99        # Dog and Siamese are gone
    wins = (fin.p_cat > fin.p_persian).mean()
    assert 0 < wins < 1                                     # "which label wins is random"
    # raw rewards collapse more aggressively than mean-shifted ones (Over-Sharpening Fig. 1)
    ms = toy_runs["dr_grpo"]
    assert fin.winner_share.mean() > ms[(ms.step == 500) & (ms.similarity == "High")].winner_share.mean()


def test_siamese_accuracy_is_squeezed_faster_with_similarity_and_group_size(toy_runs):
    """Over-Sharpening Fig. 2: held-out π(Siamese|Siamese) falls faster for High > Mid > Low and larger G."""
    for adv, tr in toy_runs.items():
        acc = tr[tr.step == 100].groupby(["G", "similarity"]).siamese_acc.mean()
        for g in (4, 16):
            assert acc[(g, "High")] < acc[(g, "Mid")] < acc[(g, "Low")] < 0.25, (adv, acc)
        for s in ("High", "Mid", "Low"):
            assert acc[(16, s)] < acc[(4, s)], (adv, acc)


def test_iac_does_not_slow_collapse_in_the_single_prompt_toy(toy_runs):
    """Over-Sharpening App. H Fig. 5 reports IAC delaying collapse; with the paper's rule
    (positives × (G − |S⁺|)^α, a factor >= 1) and one training prompt it cannot redistribute
    across prompts and only enlarges positive steps: collapse is faster, not slower.
    Measured (16 seeds, SGD lr 0.1, step 500): winner share GRPO 0.84 / 0.95, IAC 0.90 / 0.93 (G = 4 / 16),
    entropy GRPO 0.39 / 0.17, IAC 0.27 / 0.17."""
    f = {a: toy_runs[a][(toy_runs[a].step == 500) & (toy_runs[a].similarity == "High")] for a in ("grpo", "iac")}
    ent = {a: f[a].groupby("G").entropy.mean() for a in f}
    assert ent["iac"][4] < ent["grpo"][4]
    assert (advantages.get("iac")(np.array([[1, 1, 0, 0]])) >= advantages.get("grpo")(np.array([[1, 1, 0, 0]]))).all()


# ------------------------------------------------------------------ FADE App. 15: rank-1 funnel
def test_expected_gradient_rank1_matches_prop_15_1():
    """r1 of E[g] (analysis.spectra) = Eq. 33 with u1 its top right singular vector (rlvr_theory.rank1)."""
    H, path_p, cm, W0 = lh.population_setup(16, 4)
    Eg = lh.expected_gradient(W0, H, path_p, cm, advantages.get("asym_grpo", delta=0.5), 8)
    _, _, v = spectra.leading_vectors(Eg, 1)
    u1 = v[:, 0]
    signal, residual = Eg @ u1, Eg - np.outer(Eg @ u1, u1)
    assert spectra.rank1_fraction(Eg) == pytest.approx(float(rank1.rank1_limit(signal, residual)), rel=1e-10)


def test_rank1_of_expected_update_grows_with_K_and_as_delta_decreases():
    """FADE Prop. 15.1 / Cor. 15.2 in expectation (exact, no sampling), M = 32, G = 8.
    Measured r1(E[g]) at W0, δ = 0.5 / 1 / 2: K=2 0.709/0.663/0.611, K=4 0.737/0.713/0.689,
    K=8 0.758/0.740/0.723, K=16 0.776/0.768/0.762."""
    r = {}
    for K in (2, 4, 8, 16):
        H, path_p, cm, W0 = lh.population_setup(32, K)
        for d in (0.5, 1.0, 2.0):
            r[K, d] = spectra.rank1_fraction(lh.expected_gradient(W0, H, path_p, cm,
                                                                  advantages.get("asym_grpo", delta=d), 8))
    for d in (0.5, 1.0, 2.0):
        assert r[2, d] < r[4, d] < r[8, d] < r[16, d]
    for K in (2, 4, 8, 16):
        assert r[K, 0.5] > r[K, 1.0] > r[K, 2.0]
    assert r[2, 0.5] == pytest.approx(0.709, abs=2e-3)


def test_simulated_rank1_funnel_grows_with_K_and_as_delta_decreases():
    """ΔW = W_T − W_0 after 100 SGD steps (lr 0.05, 4 seeds).  Measured mean r1, δ = 0.5 / 2:
    K=2 0.668 / 0.589, K=16 0.757 / 0.753; δ = 0.5: K = 2, 4, 8, 16 → 0.668, 0.706, 0.731, 0.757."""
    r = {}
    for d in (0.5, 2.0):
        _, f = lh.simulate_population(K=[2, 4, 16], seeds=4, advantage="asym_grpo", advantage_params={"delta": d},
                                      log_every=100)
        r[d] = f.groupby("K").r1.mean()
    assert r[0.5][2] < r[0.5][4] < r[0.5][16]
    assert r[2.0][2] < r[2.0][4] < r[2.0][16]
    assert r[0.5][2] > r[2.0][2] + 0.03


def test_fade_controller_is_logged_and_follows_the_schedule():
    """α, δ logged per step equal a FADESchedule replayed on the logged reward means and entropies."""
    tr, _ = lh.simulate_population(M=8, K=2, seeds=[0], steps=30, log_every=1, advantage="fade",
                                   correct="shared", init_scale=1.0, lr=0.3)
    tr = tr[tr.step < 30]
    s = schedules.FADESchedule(float(tr.entropy.iloc[0]))
    for _, row in tr.iterrows():
        a = s.update(reward_mean=float(row.reward_mean), entropy=float(row.entropy), step=int(row.step))
        assert row.alpha == pytest.approx(a.params["alpha"]) and row.delta == pytest.approx(a.params["delta"])
    assert tr.alpha.between(1, 3).all() and tr.delta.between(0.3, 1).all()


# ------------------------------------------------------------------ advantages, optimizers, bad input
@pytest.mark.parametrize("adv,params", [("reinforce_pp", None), ("rloo", None), ("agrae", {"alpha": 1.0}),
                                        ("power_alpha", {"alpha": 2.0})])
@pytest.mark.parametrize("opt", ["sgd", "momentum", "adamw"])
def test_all_advantage_kinds_and_optimizers_run_without_nan(adv, params, opt):
    tr, _ = lh.simulate_toy(G=4, seeds=2, steps=20, advantage=adv, advantage_params=params, optimizer=opt, lr=0.05)
    assert np.isfinite(tr.drop(columns=["reward_mean"]).select_dtypes(float).to_numpy()).all()


def test_reinforce_pp_normalises_by_the_batch_std():
    rule = lh._Advantages("reinforce_pp", {}, 1, np.ones(1))
    r = np.array([[[1.0, 0, 0, 0], [1, 1, 0, 0]]])
    A, _, _ = rule(r, np.ones(1), 0)
    c = r - r.mean(-1, keepdims=True)
    np.testing.assert_allclose(A, c / c.std())
    # per configuration: each configuration's batch has its own std (the registry family on r[c])
    r2 = np.concatenate([r, np.array([[[1.0, 0, 0, 0], [0, 0, 0, 0]]])])
    A2, _, _ = lh._Advantages("reinforce_pp", {}, 2, np.ones(2))(r2, np.ones(2), 0)
    for c_ in range(2):
        np.testing.assert_array_equal(A2[c_], advantages.get("reinforce_pp")(r2[c_]))
    with pytest.raises(ValueError, match="reinforce_pp"):  # takes no parameters
        lh.simulate_toy(advantage="reinforce_pp", advantage_params={"delta": 0.5}, steps=1)


def test_every_schedule_of_the_registry_runs():
    for name in schedules.names():
        tr, _ = lh.simulate_toy(G=4, seeds=1, steps=5, advantage=name)
        assert np.isfinite(tr.p_cat).all()
    with pytest.raises(ValueError, match="gamma"):  # an unknown schedule parameter, before any work
        lh.simulate_population(steps=1, advantage="fade", advantage_params={"gamma": 1.0})


def test_counts_accept_integral_floats_and_numpy_ints_but_not_bool():
    a, _ = lh.simulate_toy(G=[np.int64(4), 8.0], seeds=2.0, steps=np.int64(3), log_every=1.0)
    b, _ = lh.simulate_toy(G=[4, 8], seeds=2, steps=3, log_every=1)
    pd.testing.assert_frame_equal(a, b)
    for kw, word in ((dict(G=True), "G"), (dict(steps=True), "steps"), (dict(seeds=[0, True]), r"seeds\[1\]"),
                     (dict(steps=2.5), "steps"), (dict(log_every=np.bool_(True)), "log_every"), (dict(lr=True), "lr")):
        with pytest.raises(ValueError, match=f"^{word} must be"):
            lh.simulate_toy(**kw)
    with pytest.raises(ValueError, match="^K must be"):
        lh.population_features(4, False)
    assert lh.population_features(4.0, np.int64(2))[0].shape == lh.population_features(4, 2)[0].shape


@pytest.mark.parametrize("kw,word", [(dict(G=0), "G"), (dict(similarity="Top"), "similarity"),
                                     (dict(advantage="nope"), "advantage"), (dict(optimizer="rmsprop"), "optimizer"),
                                     (dict(lr=-1.0), "lr"), (dict(steps=0), "steps"), (dict(reduction="max"), "reduction")])
def test_toy_bad_input(kw, word):
    with pytest.raises(ValueError, match=word):
        lh.simulate_toy(**kw)


@pytest.mark.parametrize("kw,word", [(dict(K=0), "K"), (dict(solve_rates=(0.5, 1.0)), "solve_rates"),
                                     (dict(rho_success=1.0), "rho_success"), (dict(correct="x"), "correct")])
def test_population_bad_input(kw, word):
    with pytest.raises(ValueError, match=word):
        lh.simulate_population(steps=1, **kw)


# ------------------------------------------------------------------ CLI
def test_cli_writes_three_files_atomically(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["linear-head", "--preset", "toy-small", "--steps", "20", "--G", "4", "8",
                     "--similarity", "High", "Mid", "--seeds", "2", "--advantage", "iac",
                     "--advantage-params", '{"alpha": 1.0}', "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "final.csv", "trajectory.csv"]
    final = pd.read_csv(out / "final.csv")
    assert len(final) == 2 * 2 * 2 and set(final.G) == {4, 8} and (final.step == 20).all()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["advantage"] == "iac" and cfg["steps"] == 20 and cfg["lr"] == 0.1 and cfg["package_version"]
    assert {"package_version", "settings", "seed", "device", "threads"} <= set(cfg) and "version" not in cfg
    assert cfg["advantage_params"] == {"alpha": 1.0} and cfg["settings"]["param"] == {"alpha": 1.0}
    assert cfg["seed"] == [0, 1] and cfg["device"] == "cpu"
    assert "--advantage-params is deprecated; use --param NAME=VALUE" in capsys.readouterr().err
    traj = pd.read_csv(out / "trajectory.csv")
    assert {"step", "G", "similarity", "seed", "p_cat", "p_persian", "siamese_acc"} <= set(traj.columns)
    out2 = tmp_path / "p"
    assert cli.main(["linear-head", "--preset", "population-small", "--K", "2", "--delta", "0.5",
                     "--steps", "10", "--out", str(out2), "--quiet"]) == 0
    f2 = pd.read_csv(out2 / "final.csv")
    assert {"K", "seed", "r1", "s1_s2", "alpha", "delta"} <= set(f2.columns)
    assert json.loads((out2 / "config.json").read_text())["advantage_params"] == {"delta": 0.5}


def test_cli_param_is_the_same_as_the_deprecated_json_alias(tmp_path, capsys):
    runs = {}
    for name, opt in (("param", ["--param", "alpha=1.0"]), ("alias", ["--advantage-params", '{"alpha": 1.0}'])):
        assert cli.main(["linear-head", "--preset", "toy-small", "--steps", "5", "--G", "4", "--seeds", "1",
                         "--advantage", "iac", *opt, "--out", str(tmp_path / name), "--quiet"]) == 0
        runs[name] = pd.read_csv(tmp_path / name / "trajectory.csv")
    pd.testing.assert_frame_equal(runs["param"], runs["alias"])
    assert capsys.readouterr().err.count("deprecated") == 1  # only the alias warns
    # argparse refuses what is not a JSON object: usage, exit 2
    assert cli.main(["linear-head", "--preset", "toy-small", "--advantage-params", "[1]", "--out", str(tmp_path / "x")]) == 2
    assert "--advantage-params: must be a JSON object" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("argv,word", [(["--preset", "nope"], "preset"), (["--preset", "toy-small", "--lr", "-1"], "lr"),
                                       (["--preset", "toy-small", "--advantage", "zzz"], "advantage"),
                                       (["--preset", "fade-rank1", "--similarity", "High"], "similarity"),
                                       (["--preset", "toy-small", "--delta", "0.5"], "delta"),
                                       (["--preset", "toy-small", "--advantage", "iac", "--param", "bogus=1"], "bogus"),
                                       (["--preset", "toy-small", "--advantage", "fade", "--param", "gamma=1"], "gamma"),
                                       (["--preset", "toy-small", "--steps", "0"], "--steps must be an integer >= 1"),
                                       (["--preset", "toy-small", "--threads", "0"], "--threads")])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, word):
    out = tmp_path / "o"
    assert cli.main(["linear-head", *argv, "--out", str(out), "--quiet"]) == 2
    assert word in capsys.readouterr().err
    assert not out.exists()


# ------------------------------------------------------------------ figures
@pytest.mark.slow  # four simulation figures (20-25 s); `make figures` makes and checks them all
def test_linear_head_figures_are_made_and_their_claims_hold(tmp_path):
    import figures

    for name in ("oversharpening_fig1", "oversharpening_fig2", "fade_rank1_funnel", "fade_fig8"):
        figures.make(name, tmp_path)
        png = tmp_path / f"{name}.png"
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(pd.read_csv(tmp_path / f"{name}.csv")) > 0
        c = pd.read_csv(tmp_path / f"{name}.claims.csv", keep_default_na=False)
        assert len(c) > 0 and (c.status != "fail").all(), c[c.status == "fail"]


def test_a_run_without_any_update_reports_no_direction_instead_of_diverging():
    """G = 1 with Dr.GRPO: every advantage is 0, the head never moves; the spectrum of a zero update
    is NaN (no direction) and its norm 0, not a divergence error."""
    traj, final = lh.simulate_population(M=4, G=1, seeds=1, advantage="dr_grpo", steps=3, log_every=1)
    assert (traj.dW_norm.fillna(0) == 0).all() and traj.r1.isna().all() and traj.grad_cos.isna().all()
    assert final.solve_rate.iloc[0] == traj.solve_rate.iloc[0]


def test_settings_dataclasses_are_the_simulators_keywords():
    """``simulate_toy(**kw)`` runs ``ToySettings(**kw)`` (and the population likewise): the same
    frames from the keywords or the object; ``check`` normalises and refuses before any work."""
    kw = dict(G=[4, 8], seeds=2, steps=10, advantage="fade", mu=0.5)
    a, fa = lh.simulate_toy(**kw)
    b, fb = lh.simulate_toy(lh.ToySettings(**kw))
    c, _ = lh.simulate_toy(lh.ToySettings(G=[4, 8], seeds=2, steps=10), advantage="fade", mu=0.5)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    pd.testing.assert_frame_equal(a, c, check_exact=True)
    pd.testing.assert_frame_equal(fa, fb, check_exact=True)
    s = lh.ToySettings(**kw).check()
    assert (s.G, s.similarity, s.seeds, s.memory_lr) == ([4, 8], ["High"], [0, 1], 0.1)
    pk = dict(M=4, K=2, seeds=1, steps=4, log_every=2, advantage="fade")
    pd.testing.assert_frame_equal(lh.simulate_population(**pk)[0],
                                  lh.simulate_population(lh.PopulationSettings(**pk))[0], check_exact=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        lh.simulate_toy(nope=1)
    with pytest.raises(ValueError, match="^similarity must be one of"):
        lh.ToySettings(similarity="Huge").check()
    flags = {a.dest for a in cli.build_parser()._subparsers._group_actions[0].choices["linear-head"]._actions}
    assert {"G", "seeds", "steps", "similarity", "K", "advantage", "optimizer", "lr", "mu", "memory_lr"} <= flags


def test_advantages_of_a_schedule_are_one_policy_per_configuration():
    """A schedule runs one :class:`rlvr_theory.policy.Policy` per configuration (each with its
    measured H0, a typed H0 wins); a fixed family one policy for the whole batch."""
    rule = lh._Advantages("fade", {}, 2, np.array([1.0, 0.5]), 10)
    assert len(rule.policies) == 2 and rule.fixed is None
    assert [p.H0 for p in rule.policies] == [1.0, 0.5]
    assert [p.H0 for p in lh._Advantages("fade", {"H0": 2.0}, 2, np.array([1.0, 0.5]), 10).policies] == [2.0, 2.0]
    fixed = lh._Advantages("asym_grpo", {"delta": 0.5}, 3, np.ones(3))
    assert fixed.policies == [] and fixed.fixed.name == "asym_grpo"
    r = np.array([[[1.0, 0, 0, 0]], [[1, 1, 0, 0]], [[0, 0, 0, 0]]])
    A, alpha, delta = fixed(r, np.ones(3), 0)
    np.testing.assert_array_equal(A, advantages.get("asym_grpo", delta=0.5)(r))
    assert (delta == 0.5).all() and np.isnan(alpha).all()
