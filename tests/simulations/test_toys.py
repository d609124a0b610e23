"""Few-action toys (`simulations.toys`): the two stages of the Two-Stage paper, its G /
temperature / four-action variants, GRPO-N, and A-GRAE Theorem 1 checked against an
independent numpy step; the ``rlvr-sim toys`` command line."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from simulations import categorical as sc
from simulations import toys


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny tensors: torch's thread pool only adds contention on a shared 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)




def _long(steps, p1, p2, setting="s", seed=0):
    """Hand-made long-form trajectory of a1, a2 (a3 = the rest)."""
    rows = []
    for t, x, y in zip(steps, p1, p2):
        for a, p in (("a1", x), ("a2", y), ("a3", 1 - x - y)):
            rows.append({"setting": setting, "N": 2, "seed": seed, "step": t, "action": a, "prob": p})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ stage detector
def test_stages_on_handmade_trajectories():
    steps = [0, 10, 20, 30, 40, 50]
    up_down = _long(steps, [0.3, 0.8, 0.95, 0.6, 0.3, 0.1], [0.01, 0.01, 0.04, 0.39, 0.69, 0.89], seed=0)
    only_up = _long(steps, [0.3, 0.8, 0.95, 0.97, 0.98, 0.99], [0.01] * 6, seed=1)
    st = toys.stages(pd.concat([up_down, only_up])).set_index("seed")
    # seed 0: peak 0.95 at step 20; a2 > a1 first at step 40 (0.69 > 0.3); a2 > 0.5 at step 40
    assert (st.t_peak[0], st.p_peak[0], st.t_cross[0], st.t_half[0]) == (20, 0.95, 40, 40)
    assert st.p_first_0[0] == 0.3 and st.p_first_final[0] == 0.1 and bool(st.two_stage[0])
    # seed 1: keeps rising, a2 never overtakes
    assert st.t_peak[1] == 50 and math.isnan(st.t_cross[1]) and not bool(st.two_stage[1])


def test_stages_refuses_bad_input():
    df = _long([0, 1], [0.3, 0.4], [0.1, 0.1])
    with pytest.raises(ValueError, match="^traj must have the columns"):
        toys.stages(df.drop(columns="seed"))
    with pytest.raises(ValueError, match="^first/second must be actions"):
        toys.stages(df, "a1", "a9")
    with pytest.raises(ValueError, match="^margin must be"):
        toys.stages(df, margin=-1)


# ------------------------------------------------------------------ settings
def test_fig1_settings_follow_two_stage_algorithm_1():
    t = toys.toy("twostage-fig1")
    for s in t.settings:
        # Two-Stage Sec. 3.2: G = 2, eta = 0.1, mean baseline (dr_grpo), Adam, log-prob REINFORCE (Alg. 1)
        assert (s.N, s.lr, s.advantage, s.optimizer, s.surrogate) == ((2,), 0.1, "dr_grpo", "adam", "logprob")
        r, p = s.rewards, s.probs
        assert r[2] == 0 < r[0] < r[1] and p[0] > p[1]  # r(a1) < r(a2), pi(a1) > pi(a2), r(a3) = 0
        assert s.graded and s.n_correct == 2


def test_config_keeps_the_initial_policy_at_every_temperature():
    s = dataclasses.replace(toys.toy("twostage-grpo-n").settings[0], temperature=5.0)
    cfg = s.config(steps=3, seeds=2, record_every=1)
    z = np.asarray(cfg.logits)
    p = np.exp(z / 5.0) / np.exp(z / 5.0).sum()
    np.testing.assert_allclose(p, toys.PI_BASE, rtol=1e-12)
    assert cfg.reward_values == (0.0, 1.0) and cfg.n_correct == 2 and cfg.record_probs


def test_bad_settings_and_presets_are_refused():
    with pytest.raises(ValueError, match="^preset must be one of twostage-fig1"):
        toys.toy("nope")
    with pytest.raises(ValueError, match="^probs must be"):
        toys.Setting("x", (0.5, 0.6), (1.0, 0.0)).validate()
    with pytest.raises(ValueError, match="^rewards must list the rewarded actions"):
        toys.Setting("x", (0.5, 0.5), (0.0, 1.0)).validate()
    with pytest.raises(ValueError, match="^steps must be an integer >= 1"):
        toys.configs("agrae-c0", steps=0)
    with pytest.raises(ValueError, match="^settings must be None or a non-empty list"):
        toys.configs("agrae-c0", settings=["nope"])


# ------------------------------------------------------------------ the two stages of Two-Stage (graded rewards)
def test_two_stage_toy_shows_its_two_stages():
    traj, final = toys.run("twostage-fig1", settings=["pi(a2)=0.01"], record_every=5)
    st = final.set_index("seed")
    # pi(a1) rises then falls once a2 is found, in most seeds (Two-Stage Sec. 3.2, Fig. 1)
    assert st.two_stage.mean() >= 0.75
    two = st[st.two_stage]
    assert (two.t_peak <= two.t_cross).all() and (two.p_peak > 0.9).all() and (two.p_first_final < 0.5).all()
    # stage 1: a3 (reward 0) falls; a2 stays small while a1 climbs
    a = traj.pivot_table(index=["seed", "step"], columns="action", values="prob")
    at_peak = a.loc[list(zip(two.index, two.t_peak))]
    assert (at_peak.a2 < 0.1).all() and (at_peak.a3 < 0.05).all()
    m3 = traj[traj.action == "a3"].groupby("step").prob.mean().to_numpy()
    assert m3[-1] < 0.01 and np.all(np.diff(m3) < 1e-3)


@pytest.mark.parametrize("advantage", ["dr_grpo", "grpo_n"])
def test_graded_engine_step_matches_numpy(advantage):
    # one SGD step with three reward levels: A_j = r_j - mean (Two-Stage Alg. 1) or min((r_j - mean)/std, 0)
    B, N, lr = 40, 5, 0.3
    s = toys.Setting("x", toys.PI_BASE, toys.R_BASE, N=(N,), advantage=advantage, optimizer="sgd", lr=lr)
    cfg = s.config(steps=1, seeds=B, record_every=1)
    traj, _ = sc.simulate(cfg, device="cpu")
    P = traj.sort_values(["seed", "step"])[["p_0", "p_1", "p_2"]].to_numpy().reshape(B, 2, 3)
    dlog = np.log(P[:, 1]) - np.log(P[:, 0])
    measured = dlog - dlog.mean(1, keepdims=True)
    z0 = torch.tensor(cfg.logits, dtype=torch.float32).repeat(B, 1)
    counts = sc.sample_counts(torch.softmax(z0, -1), N, torch.arange(B), 0).round().long().numpy()
    actions = np.array([np.repeat(np.arange(3), c) for c in counts])
    r = np.asarray(toys.R_BASE)[actions]
    A = r - r.mean(1, keepdims=True)
    if advantage == "grpo_n":
        sd = r.std(1, keepdims=True)
        A = np.minimum(np.divide(A, sd, out=np.zeros_like(A), where=sd > 0), 0.0)
    S = np.zeros((B, 3))
    np.add.at(S, (np.arange(B)[:, None], actions), A)
    expected = lr / N * (S - A.sum(1, keepdims=True) * np.asarray(toys.PI_BASE))
    assert np.abs(expected).max() > 0.01  # the step is not trivially zero
    np.testing.assert_allclose(measured, expected, atol=2e-6)


def test_larger_group_is_more_stable_and_explores_earlier():
    traj, final = toys.run("twostage-fig5")
    g = final.groupby("N")
    assert g.two_stage.mean().min() >= 0.75  # "does not affect our main findings" (Two-Stage App. C.4)
    spread = traj[traj.action == "a1"].pivot_table(index="step", columns=["N", "seed"], values="prob")
    sd = {G: spread[G].std(axis=1).mean() for G in (2, 10)}
    assert sd[10] < 0.5 * sd[2]  # "a larger G leads to more stable optimization"
    tc = g.t_cross.std()
    assert tc[10] < tc[2]
    med = final.assign(t=final.t_cross.fillna(np.inf)).groupby("N").t.median()
    assert med[10] < med[2]


def test_temperature_with_fixed_initial_policy_is_a_step_size_under_adam():
    # derivation: z = T u, g_z = g_u / T, and Adam's m/sqrt(v) is invariant to the 1/T, so
    # u moves by (lr/T)·m/sqrt(v): the T run equals the T = 1 run with lr/T (up to Adam's eps)
    base = toys.Setting("x", toys.PI_BASE, toys.R_BASE)
    a, _ = sc.simulate(dataclasses.replace(base, temperature=4.0).config(300, 6, 1), device="cpu")
    b, _ = sc.simulate(dataclasses.replace(base, lr=0.1 / 4.0).config(300, 6, 1), device="cpu")
    cols = ["p_0", "p_1", "p_2"]
    np.testing.assert_allclose(a[cols].to_numpy(), b[cols].to_numpy(), atol=1e-5)
    # hence the orderings of Fig. 6: a higher T peaks later and keeps more entropy
    traj, final = toys.run("twostage-fig6", settings=["T=1", "T=5"], steps=1500)
    med = final.groupby("temperature").t_peak.median()
    hmin = traj[traj.action == "a1"].groupby(["temperature", "seed"]).entropy.min().groupby("temperature").median()
    assert med[5.0] > 2 * med[1.0] and hmin[5.0] > hmin[1.0]


def test_four_actions_extremes_and_middle():
    traj, final = toys.run("twostage-fig7")
    m = traj.groupby(["step", "action"]).prob.mean().unstack()
    assert np.all(np.diff(m.a4.to_numpy()) < 1e-3) and m.a4.iloc[-1] < 0.01  # a_min falls (Two-Stage App. C.4)
    assert m.a3.iloc[-1] > 10 * m.a3.iloc[0]  # a_max rises
    assert toys.stages(traj, "a1", "a2").two_stage.mean() >= 0.75  # a1: up, then down
    assert final.two_stage.mean() >= 0.5  # a2: up, then down once a3 is found (stage_pair a2, a3)


# ------------------------------------------------------------------ GRPO-N (binary rewards)
def test_grpo_n_keeps_entropy_and_the_unexplored_correct_action():
    traj, final = toys.run("twostage-grpo-n", steps=300)
    f = final.groupby("setting")[["prob_a2", "entropy"]].median()
    # Two-Stage Sec. 4 / Fig. 2: GRPO collapses the entropy, GRPO-N keeps diversity
    assert f.entropy["GRPO-N"] > 3 * f.entropy["GRPO"]
    assert f.prob_a2["GRPO"] < 0.01 < f.prob_a2["GRPO-N"]  # pi0(a2) = 0.01
    q = traj[traj.step == 300].groupby("setting").Q_pos.mean()
    assert (q > 0.99).all()  # both solve the toy


# ------------------------------------------------------------------ A-GRAE Theorem 1, one step
def _numpy_advantages(name: str, r: np.ndarray, beta: float = 10.0) -> np.ndarray:
    """GRPO (population std), negative-dominant and GRPO-N written out for binary r [B, N]."""
    mean = r.mean(1, keepdims=True)
    sd = r.std(1, keepdims=True)
    grpo = np.divide(r - mean, sd, out=np.zeros_like(r), where=sd > 0)
    if name == "grpo":
        return grpo
    if name == "negative_dominant":
        return np.where(grpo > 0, grpo / beta, grpo)
    if name == "grpo_n":
        return np.minimum(grpo, 0.0)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["agrae-c0", "agrae-cneg"])
def test_behaviour_space_step_matches_an_independent_numpy_step(name):
    from rlvr_theory import categorical as cat

    B = 48
    for s, cfg in toys.configs(name, steps=1, seeds=B, record_every=1):
        if s.optimizer != "sgd":
            continue
        traj, _ = sc.simulate(cfg, device="cpu")
        K, N = len(s.probs), s.N[0]
        P = traj.sort_values(["seed", "step"])[[f"p_{i}" for i in range(K)]].to_numpy().reshape(B, 2, K)
        dlog = np.log(P[:, 1]) - np.log(P[:, 0])
        measured = dlog - dlog.mean(1, keepdims=True)  # the log-prob SGD step sums to 0 over actions
        # the same draws (the engine keys them by seed, step, draw); everything else by hand
        z0 = torch.tensor(cfg.logits, dtype=torch.float32).repeat(B, 1)
        counts = sc.sample_counts(torch.softmax(z0, -1), N, torch.arange(B), 0).round().long().numpy()
        assert (counts.sum(1) == N).all()
        actions = np.array([np.repeat(np.arange(K), c) for c in counts])
        r = np.asarray(s.rewards)[actions]
        A = _numpy_advantages(s.advantage, r)
        S = np.zeros((B, K))
        np.add.at(S, (np.arange(B)[:, None], actions), A)
        C = A.sum(1, keepdims=True)
        pi = np.asarray(s.probs)[None, :]
        expected = s.lr / N * (S - C * pi)  # A-GRAE Eq. 6 with eta = lr / N
        np.testing.assert_allclose(measured, expected, atol=2e-6)
        unsampled = counts == 0
        live = np.abs(C[:, 0]) > 1e-9
        if s.advantage == "grpo":
            assert np.allclose(C, 0, atol=1e-12)
            assert np.abs(measured[unsampled]).max() < 1e-6  # Eq. 9: unsampled logits do not move
        else:
            assert live.sum() >= B // 2 and (C[live] < 0).all()  # C = (1/beta - 1)·sum|A_neg| or -sum|A_neg|
            m = unsampled & live[:, None]
            assert (measured[m] > 0).all()  # Eq. 36: every unsampled behaviour rises ...
            np.testing.assert_allclose(measured[m], (-s.lr / N * C * pi * np.ones((B, 1)))[m], atol=1e-6)  # by -eta C pi
        # rlvr_theory's implementation of the theorem agrees with the hand computation
        np.testing.assert_allclose(cat.behaviour_update(np.log(s.probs), actions, A, s.lr / N), expected, atol=1e-12)
    # and so does the library's one-step table used by the figure
    bs = toys.behaviour_step(name, seeds=B)
    assert np.abs(bs.dh_measured - bs.dh_theorem).max() < 2e-6


# ------------------------------------------------------------------ CLI
def _cli(monkeypatch):
    from simulations import cli

    assert "simulations.toys" in cli._MODULES  # `rlvr-sim toys`
    return cli


def test_cli_writes_three_files(tmp_path, monkeypatch):
    cli = _cli(monkeypatch)
    out = tmp_path / "o"
    assert cli.main(["toys", "--preset", "agrae-c0", "--steps", "4", "--seeds", "2", "--out", str(out), "--quiet"]) == 0
    traj = pd.read_csv(out / "trajectory.csv")
    final = pd.read_csv(out / "final.csv")
    meta = json.loads((out / "config.json").read_text())
    assert {"setting", "seed", "step", "action", "prob", "entropy"} <= set(traj.columns)
    assert len(traj) == 2 * 2 * 5 * 8 and set(traj.step) == {0, 1, 2, 3, 4}  # settings x seeds x steps x actions
    assert len(final) == 4 and "prob_b2" in final.columns
    assert meta["preset"] == "agrae-c0" and meta["configs"][0]["steps"] == 4 and meta["device"] == "cpu"
    assert meta["package_version"] and meta["settings"] == {"preset": "agrae-c0", "steps": 4, "seeds": 2}
    assert meta["seed"] == [0, 1] and meta["threads"] >= 1 and len(meta["toy_settings"]) == 2
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_cli_bad_preset_exits_2(tmp_path, monkeypatch, capsys):
    cli = _cli(monkeypatch)
    assert cli.main(["toys", "--preset", "nope", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("rlvr-sim: error: --preset must be one of")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv,message", [(["--steps", "0"], "--steps must be an integer >= 1, got 0"),
                                          (["--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
                                          (["--threads", "0"], "--threads must be an integer >= 1, got 0")])
def test_cli_bad_counts_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    cli = _cli(monkeypatch)
    assert cli.main(["toys", "--preset", "agrae-c0", *argv, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert capsys.readouterr().err == f"rlvr-sim: error: {message}\n"
    assert not (tmp_path / "o").exists()


def test_cli_threads_are_recorded(tmp_path, monkeypatch):
    cli = _cli(monkeypatch)
    before = torch.get_num_threads()
    try:
        assert cli.main(["toys", "--preset", "agrae-c0", "--steps", "1", "--seeds", "1", "--threads", "2",
                         "--out", str(tmp_path / "o"), "--quiet"]) == 0
    finally:
        torch.set_num_threads(before)
    assert json.loads((tmp_path / "o" / "config.json").read_text())["threads"] == 2


def test_counts_accept_integral_floats_and_numpy_ints_but_not_bool():
    (_, cfg), *_ = toys.configs("agrae-c0", steps=3.0, seeds=np.int64(2), record_every=1)
    assert (cfg.steps, cfg.seeds) == (3, (0, 1))
    for kw in ({"steps": True}, {"seeds": 2.5}, {"record_every": np.bool_(True)}):
        with pytest.raises(ValueError, match=f"^{next(iter(kw))} must be an integer >= 1"):
            toys.configs("agrae-c0", **kw)
    with pytest.raises(ValueError, match="^seeds must be an integer >= 1"):
        toys.behaviour_step("agrae-c0", seeds=False)


def test_toy_run_settings_are_the_keywords_of_run():
    """``run(name, **kw)`` runs ``ToyRun(name, **kw)``; its ``check`` refuses before any work."""
    r = toys.ToyRun("twostage-fig1", steps=20, seeds=1, settings=["pi(a2)=0.05"]).check()
    assert [s.label for s, _ in r.configs()] == ["pi(a2)=0.05"]
    with pytest.raises(ValueError, match="^settings must be None or a non-empty list of labels"):
        toys.ToyRun("twostage-fig1", settings=["nope"]).check()
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        toys.run("twostage-fig1", nope=1)
