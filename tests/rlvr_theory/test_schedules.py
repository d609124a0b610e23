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
    assert schedules.names() == ["fade", "fade-log", "agrae"]
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
    (lambda: schedules.get("cosine"), r"^schedule: unknown schedule 'cosine'; allowed: agrae, fade, fade-log$"),
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
