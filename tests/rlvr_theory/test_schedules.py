"""FADE and A-GRAE schedules (FADE Eq. 11, Alg. 2, Eq. 17-18; A-GRAE Eq. 11-13), and the schedule registry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlvr_theory import advantages, schedules


def test_fade_ema_as_written_and_clipping():
    s = schedules.FADESchedule(H0=2.0)  # H* = 1.0
    assert (s.p_hat, s.H_hat, s.H_target) == (0.5, 2.0, 1.0)
    adv = s.update(reward_mean=0.2, entropy=1.5)
    p_hat = 0.02 * 0.5 + 0.98 * 0.2          # Alg. 2 line 5 as written
    H_hat = 0.02 * 2.0 + 0.98 * 1.5
    assert s.p_hat == pytest.approx(p_hat) and s.H_hat == pytest.approx(H_hat)
    assert s.alpha == pytest.approx(min(max(3 * (1 - p_hat) / (2 * p_hat), 1), 3))
    assert s.delta == 1.0  # 1 + Ĥ − H* > 1 clipped
    assert adv == advantages.get("fade", alpha=s.alpha, delta=1.0)
    for _ in range(5):
        s.update(reward_mean=0.9, entropy=0.5)
    assert s.alpha == 1.0                           # 3(0.1)/(1.8) < 1
    assert s.delta == pytest.approx(1 + s.H_hat - 1.0)  # inside (0.3, 1)
    s.update(reward_mean=0.9, entropy=0.0)
    assert s.delta == pytest.approx(max(0.3, 1 + s.H_hat - 1.0))
    assert s.step == 7


def test_fade_conventional_ema_and_alpha_max():
    s = schedules.FADESchedule(H0=1.0, ema="conventional", alpha_max=3.0)
    s.update(reward_mean=0.0, entropy=1.0)
    assert s.p_hat == pytest.approx(0.98 * 0.5)
    s2 = schedules.FADESchedule(H0=1.0, p0=0.0)
    assert s2.alpha == 3.0  # p̂ = 0: clip at alpha_max


def test_fade_state_roundtrip_is_exact():
    rng = np.random.default_rng(0)
    a, b = schedules.FADESchedule(H0=1.3), schedules.FADESchedule(H0=1.3)
    for _ in range(10):
        a.update(reward_mean=float(rng.random()), entropy=float(rng.random() * 2))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for _ in range(5):
        r, h = float(rng.random()), float(rng.random())
        assert a.update(reward_mean=r, entropy=h) == b.update(reward_mean=r, entropy=h)
    with pytest.raises(ValueError, match="state is missing keys"):
        b.load_state_dict({"p_hat": 0.5})


def test_fade_log_schedule_endpoints():
    s = schedules.FADELogSchedule(T=20000)
    assert (s.alpha, s.delta) == (2.0, 1.0)
    s.update(step=20000)
    assert s.alpha == pytest.approx(1.917) and s.delta == pytest.approx(0.802)
    s.update(step=8500)
    frac = math.log(2) / math.log1p(20000 / 8500)
    assert s.alpha == pytest.approx(2.0 - 0.083 * frac)
    with pytest.raises(ValueError, match="T must be an integer"):
        schedules.FADELogSchedule(T=0)


def test_agrae_schedule_tracks_batch_reward():
    s = schedules.AGRAESchedule(alpha=0.5)
    adv = s.update(reward_mean=0.25)
    assert adv == advantages.get("agrae", omega=0.25, alpha=0.5)
    r = np.array([[1.0, 0, 0, 0], [1.0, 1, 0, 0]])
    # a whole batch with ω = 0.25 equals the batch-level advantage computed from r.mean()
    r2 = np.array([[1.0, 0, 0, 0], [0.0, 0, 0, 0]])
    np.testing.assert_allclose(s.update(reward_mean=r2.mean())(r2), advantages.get("agrae", alpha=0.5)(r2))
    assert s.step == 2 and r.shape == (2, 4)


def test_schedule_inputs_are_checked():
    s = schedules.FADESchedule(H0=1.0)
    with pytest.raises(ValueError, match="reward_mean must be a finite number"):
        s.update(reward_mean=float("nan"), entropy=1.0)
    with pytest.raises(ValueError, match="entropy must be a finite number >= 0"):
        s.update(reward_mean=0.5, entropy=-1.0)
    with pytest.raises(ValueError, match="ema must be"):
        schedules.FADESchedule(H0=1.0, ema="other")


# --------------------------------------------------------------- registry
def test_schedule_names_and_get():
    assert schedules.names() == ["fade", "fade-log", "agrae", "fade-entropy", "fade-alpha-only", "fade-delta-only"]
    s = schedules.get("fade", H0=2.0, beta=0.1)
    assert isinstance(s, schedules.FADESchedule) and (s.H0, s.H_target, s.beta) == (2.0, 1.0, 0.1)
    assert schedules.get("fade").H0 == 1.0                      # no H0 at all: 1.0
    assert schedules.get("fade", H0=None, H_target=0.2).H0 == 1.0
    log = schedules.get("fade-log", steps=50, alpha_min=1.5)
    assert isinstance(log, schedules.FADELogSchedule) and log.T == 50 and log.alpha_min == 1.5
    agrae = schedules.get("agrae", steps=10, H0=3.0, alpha=0.5, reward_values=(-1.0, 1.0))
    assert isinstance(agrae, schedules.AGRAESchedule) and agrae.alpha == 0.5
    assert agrae.update(reward_mean=0.0) == advantages.get("agrae", omega=0.5, alpha=0.5, reward_values=(-1, 1))


def test_schedule_get_H0_is_the_fade_parameter():
    """H0 typed as a parameter and H0 measured by a trainer are the same argument."""
    assert schedules.get("fade", H0=2.0).H0 == 2.0
    assert schedules.get("fade", **{"H0": 3.0, "H_target": 0.5}).H_target == 0.5
    assert schedules.get("fade-log", steps=5, H0=2.0).T == 5  # ignored by the others


@pytest.mark.parametrize("call, match", [
    (lambda: schedules.get("cosine"), r"^schedule: unknown schedule 'cosine'; allowed: agrae, fade, fade-alpha-only, fade-delta-only, "
                                            r"fade-entropy, fade-log$"),
    (lambda: schedules.get("fade", gamma=1.0),
     r"^param: unknown parameter\(s\) gamma for schedule 'fade'; allowed: H0, H_target, alpha_max, beta, "
     r"delta_min, p0, ema$"),
    (lambda: schedules.get("fade-log", steps=10, T=5), r"^param: unknown parameter\(s\) T for schedule 'fade-log'"),
    (lambda: schedules.get("fade-log"), r"^steps is required for schedule 'fade-log'"),
    (lambda: schedules.get("fade-log", steps=0), r"^T must be an integer >= 1, got 0$"),
    (lambda: schedules.get("fade", beta=1.5), r"^beta must be a finite number >= 0 and <= 1, got 1.5$"),
    (lambda: schedules.get("fade", H0=-1.0), r"^H0 must be a finite number >= 0, got -1.0$"),
    (lambda: schedules.get("agrae", alpha=0), r"^alpha must be a finite number > 0, got 0$"),
    (lambda: schedules.get("agrae", reward_values=(1, 0)), r"^reward_values must be a pair"),
])
def test_schedule_get_refuses_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_schedule_checks_follow_the_policy():
    assert schedules.FADELogSchedule(T=np.int64(10)).T == 10
    assert schedules.FADELogSchedule(T=10.0).T == 10
    with pytest.raises(ValueError, match="^T must be an integer >= 1, got True"):
        schedules.FADELogSchedule(T=True)
    s = schedules.FADELogSchedule(T=10)
    s.update(step=np.int64(3))
    assert s.step == 3 and isinstance(s.step, int)
    with pytest.raises(ValueError, match="^step must be an integer >= 0, got 2.5"):
        s.update(step=2.5)
    f = schedules.FADESchedule(H0=1.0)
    with pytest.raises(ValueError, match="^step must be an integer >= 0"):
        f.update(reward_mean=0.5, entropy=1.0, step=-1)
    assert f.step == 0 and f.p_hat == 0.5  # refused before any state changed
    with pytest.raises(ValueError, match=r"^reward_mean must be a finite number >= -1 and <= 1, got 2.0"):
        schedules.AGRAESchedule(reward_values=(-1, 1)).update(reward_mean=2.0)
    with pytest.raises(ValueError, match="^ema must be one of 'as_written', 'conventional'; got 'other'"):
        schedules.FADESchedule(H0=1.0, ema="other")


# ------------------------------------------------- FADE ablations (Sec. 5, App. 10 Fig. 9)
def _signals(n, seed):
    rng = np.random.default_rng(seed)
    return [(float(r), float(h)) for r, h in zip(rng.random(n), np.linspace(2.0, 0.05, n) * rng.uniform(0.8, 1.2, n))]


def _hand(signals, *, H0, H_target, alpha_max=3.0, beta=0.02, delta_min=0.3, p0=0.5, alpha_from, delta_from):
    """FADE Eq. 11 / Alg. 2 written out again from the paper, step by step (plain floats)."""
    p, H, out = p0, H0, []
    for r, h in signals:
        p, H = beta * p + (1 - beta) * r, beta * H + (1 - beta) * h      # Alg. 2 line 5, as written
        if alpha_from == "solve_rate":
            a = min(max(3 * (1 - p) / (2 * p), 1.0), alpha_max)
        elif alpha_from == "entropy":   # our map: alpha_max at H0, 1 at H*, linear in between
            a = 1 + (alpha_max - 1) * min(max((H - H_target) / (H0 - H_target), 0.0), 1.0)
        else:
            a = 1.0
        d = min(max(1 + H - H_target, delta_min), 1.0) if delta_from == "entropy" else 1.0
        out.append((a, d))
    return out


@pytest.mark.parametrize("name, alpha_from, delta_from", [
    ("fade-entropy", "entropy", "entropy"), ("fade-alpha-only", "solve_rate", "none"),
    ("fade-delta-only", "none", "entropy")])
def test_fade_ablations_match_a_hand_computation(name, alpha_from, delta_from):
    sig = _signals(60, 1)
    s = schedules.get(name, H0=2.0, H_target=0.8) if name != "fade-alpha-only" else schedules.get(name, H0=2.0)
    got = []
    for r, h in sig:
        adv = s.update(reward_mean=r, entropy=h)
        got.append((adv.params["alpha"], adv.params["delta"]))
        assert adv == advantages.get("fade", alpha=s.alpha, delta=s.delta)
    want = _hand(sig, H0=2.0, H_target=0.8, alpha_from=alpha_from, delta_from=delta_from)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-13, atol=1e-15)
    a, d = np.array(got).T
    # the run spans the interesting ranges (the checks above are not vacuous)
    if alpha_from != "none":
        assert a.max() > 2.5 and a.min() == 1.0 and ((a > 1) & (a < a.max())).any()
    if delta_from != "none":
        assert d.max() == 1.0 and d.min() < 0.6


def test_fade_entropy_alpha_hand_values():
    """α = 1 + (α_max − 1)(Ĥ − H*)/(H0 − H*), clipped: worked numbers."""
    s = schedules.FADEEntropySchedule(H0=2.0, beta=0.0)  # β = 0 as written: Ĥ = H_t
    assert (s.alpha, s.delta) == (3.0, 1.0)
    assert s.update(reward_mean=0.5, entropy=1.5).params == {"alpha": 2.0, "delta": 1.0}
    assert s.update(reward_mean=0.5, entropy=1.25).params == {"alpha": 1.5, "delta": 1.0}
    assert s.update(reward_mean=0.5, entropy=0.5).params == {"alpha": 1.0, "delta": 0.5}
    assert s.update(reward_mean=0.5, entropy=5.0).params == {"alpha": 3.0, "delta": 1.0}
    s2 = schedules.FADEEntropySchedule(H0=1.0, H_target=1.5, beta=0.0)  # no room above the target
    assert s2.update(reward_mean=0.5, entropy=2.0).params["alpha"] == 1.0


@pytest.mark.parametrize("name, twin", [("fade-alpha-only", dict(H_target=0.0)),
                                        ("fade-delta-only", dict(alpha_max=1.0))])
def test_alpha_only_and_delta_only_are_fade_bit_for_bit(name, twin):
    """The presets equal the existing FADE schedule with δ (α) switched off through its parameters."""
    for kw in ({}, dict(beta=0.3, ema="conventional"), dict(p0=0.1) if "H_target" in twin else dict(delta_min=0.5)):
        a = schedules.get(name, H0=1.7, **kw)
        b = schedules.get("fade", H0=1.7, **twin, **kw)
        for r, h in _signals(80, 2):
            assert a.update(reward_mean=r, entropy=h) == b.update(reward_mean=r, entropy=h)
            assert (a.p_hat, a.H_hat, a.alpha, a.delta) == (b.p_hat, b.H_hat, b.alpha, b.delta)


def test_fade_entropy_delta_is_fade_delta_bit_for_bit():
    a, b = schedules.get("fade-entropy", H0=1.3, H_target=0.9), schedules.get("fade", H0=1.3, H_target=0.9)
    for r, h in _signals(80, 3):
        a.update(reward_mean=r, entropy=h)
        b.update(reward_mean=r, entropy=h)
        assert (a.H_hat, a.delta) == (b.H_hat, b.delta)


@pytest.mark.parametrize("name", ["fade-entropy", "fade-alpha-only", "fade-delta-only"])
def test_fade_ablation_H0_from_the_first_entropy_and_exact_resume(name):
    sig = _signals(30, 4)
    lazy, given = schedules.get(name), schedules.get(name, H0=sig[0][1])   # what a trainer passes or not
    assert lazy.H0 is None and lazy.delta == 1.0
    for r, h in sig[:10]:
        assert lazy.update(reward_mean=r, entropy=h) == given.update(reward_mean=r, entropy=h)
    assert (lazy.H0, lazy.H_target) == (sig[0][1], sig[0][1] / 2)
    again = schedules.get(name)
    again.load_state_dict(json.loads(json.dumps(lazy.state_dict())))
    for r, h in sig[10:]:
        assert again.update(reward_mean=r, entropy=h) == lazy.update(reward_mean=r, entropy=h)
    with pytest.raises(ValueError, match="^entropy must be a finite number >= 0"):
        schedules.get(name).update(reward_mean=0.5, entropy=float("nan"))
    bad = schedules.get(name)
    with pytest.raises(ValueError, match="^reward_mean must be"):
        bad.update(reward_mean=2.0, entropy=1.0)
    assert bad.H0 is None  # refused before any state changed


@pytest.mark.parametrize("name, unused", [("fade-entropy", "p0"), ("fade-alpha-only", "H_target"),
                                          ("fade-alpha-only", "delta_min"), ("fade-delta-only", "alpha_max")])
def test_fade_ablations_refuse_parameters_they_ignore(name, unused):
    with pytest.raises(ValueError, match=f"^param: unknown parameter\\(s\\) {unused} for schedule '{name}'"):
        schedules.get(name, **{unused: 0.5})
    assert schedules.get(name, steps=10, H0=2.0, beta=0.5).beta == 0.5
