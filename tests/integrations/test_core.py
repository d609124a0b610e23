"""integrations.core.Policy: what the TRL and verl adapters share (no trainer needed)."""

import json
import math

import numpy as np
import pytest

from analysis.audit.metric_logs import live_metrics
from integrations.core import STEP_METRICS, Policy, parse_params
from rlvr_theory import advantages, masses, schedules

RNG = np.random.default_rng(3)


def test_fixed_family_equals_registry_and_masses():
    R = (RNG.random((64, 8)) < 0.35).astype(float)
    pol = Policy(advantage="asym_grpo", advantage_params={"delta": 0.5})
    A, m = pol.step(R.reshape(-1), group_size=8)
    adv = advantages.get("asym_grpo", delta=0.5)
    np.testing.assert_allclose(A, adv(R).reshape(-1), rtol=1e-13)
    ms = masses.of_group(adv, R)
    assert m["m_S"] == pytest.approx(ms.m_S.mean()) and m["m_F"] == pytest.approx(ms.m_F.mean())
    assert m["abs_adv_sum"] == pytest.approx(masses.abs_adv_sum(adv, R).mean())
    assert not {"alpha", "delta", "omega"} & set(m)  # only a schedule reports them
    assert all(isinstance(v, (int, float)) and not math.isnan(v) for v in m.values())


def test_schedule_advances_once_per_step_like_the_schedule_itself():
    pol = Policy(schedule="fade", H0=2.0)
    ref = schedules.get("fade", H0=2.0)
    entropies = [1.5, None, 0.7]  # None: the last entropy seen is reused
    last = 2.0
    for h in entropies:
        R = (RNG.random((16, 8)) < 0.6).astype(float)
        A, m = pol.step(R.reshape(-1), group_size=8, entropy=h)
        last = last if h is None else h
        adv = ref.update(reward_mean=R.mean(), entropy=last)
        np.testing.assert_allclose(A, adv(R).reshape(-1), rtol=1e-13)
        assert m["alpha"] == adv.params["alpha"] and m["delta"] == adv.params["delta"]
    state = json.loads(json.dumps(pol.state_dict()))
    again = Policy(schedule="fade", H0=2.0)
    again.load_state_dict(state)
    assert again.state_dict() == pol.state_dict() and again.advantage == pol.advantage


def test_schedule_H0_given_as_a_schedule_param():
    pol = Policy(schedule="fade", schedule_params={"H0": 2.0, "beta": 0.5})
    ref = schedules.get("fade", H0=2.0, beta=0.5)
    R = (RNG.random((4, 8)) < 0.5).astype(float)
    A, m = pol.step(R.reshape(-1), group_size=8)  # no entropy seen yet: H0
    adv = ref.update(reward_mean=R.mean(), entropy=2.0)
    assert m["delta"] == adv.params["delta"] and pol.H0 == 2.0


def test_agrae_schedule_reports_omega_from_the_batch_solve_rate():
    pol = Policy(schedule="agrae")
    R = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]])
    _, m = pol.step(R.reshape(-1), group_size=4)
    assert m["omega"] == pytest.approx(0.5)


def test_real_rewards_threshold_and_masses():
    r = np.array([0.1, 0.9, 0.5, 0.3, 1.2, 0.0, 0.4, 0.6])
    _, m = Policy(advantage="grpo").step(r, group_size=4)  # graded family, no threshold: no masses
    assert set(m) == {"n_groups", "group_size", "abs_adv_sum"}
    _, m = Policy(advantage="grpo", success_threshold=0.5).step(r, group_size=4)
    s = (r >= 0.5).reshape(2, 4)
    A = advantages.get("grpo").graded_call(r.reshape(2, 4))
    assert m["m_S"] == pytest.approx(np.mean(np.where(s, A, 0).sum(1) / 4))
    with pytest.raises(ValueError, match="success_threshold is required by 'asym_grpo'"):
        Policy(advantage="asym_grpo").step(r, group_size=4)
    with pytest.raises(ValueError, match="success_threshold is required by schedule 'fade'"):
        Policy(schedule="fade").step(r, group_size=4)


def test_nan_rewards_and_padding_left_out():
    r = np.array([1.0, 0.0, np.nan, 0.0, 1.0, 1.0])
    A, m = Policy(advantage="dr_grpo").step(r, np.array(["a", "a", "a", "a", "pad", "pad"]),
                                            valid=np.array([True] * 4 + [False] * 2))
    np.testing.assert_allclose(A, [2 / 3, -1 / 3, 0, -1 / 3, 0, 0])
    assert m["n_groups"] == 1 and m["group_size"] == 3.0


def test_bad_choices_are_refused_before_any_batch():
    with pytest.raises(ValueError, match="give exactly one of advantage"):
        Policy()
    with pytest.raises(ValueError, match="give exactly one of advantage"):
        Policy(advantage="grpo", schedule="fade")
    with pytest.raises(ValueError, match="unknown advantage 'nope'"):
        Policy(advantage="nope")
    with pytest.raises(ValueError, match="asym_grpo: unknown parameter"):
        Policy(advantage="asym_grpo", advantage_params={"gamma": 1})
    with pytest.raises(ValueError, match="unknown schedule 'nope'"):
        Policy(schedule="nope")
    with pytest.raises(ValueError, match="singleton must be one of"):
        Policy(advantage="grpo", singleton="keep")
    with pytest.raises(ValueError, match="success_threshold must be"):
        Policy(advantage="grpo", success_threshold="high")
    pol = Policy(advantage="passk_chen")
    with pytest.raises(ValueError, match=r"num_generations must be >= 4 for advantages.get\('passk_chen'"):
        pol.check_group_size(2, what="num_generations")
    pol.check_group_size(4, what="num_generations")


def test_state_of_another_schedule_is_refused():
    pol = Policy(schedule="agrae")
    with pytest.raises(ValueError, match="state is of schedule 'fade'"):
        pol.load_state_dict(Policy(schedule="fade").state_dict())
    with pytest.raises(ValueError, match="this policy has no schedule"):
        Policy(advantage="grpo").load_state_dict(pol.state_dict())


def test_parse_params():
    assert parse_params("delta=0.5,alpha=2") == {"delta": 0.5, "alpha": 2}
    assert parse_params(" reward_values=(-1, 1), singleton=raw ") == {"reward_values": (-1, 1), "singleton": "raw"}
    assert parse_params(None) == {}
    with pytest.raises(ValueError, match="param must look like NAME=VALUE"):
        parse_params("delta")


def test_step_metrics_are_keys_of_policy_step_and_known_to_the_metric_logs():
    """The one list of names both adapters log: each reads a key Policy.step reports (a family's
    masses, a schedule's parameters), and the names the guard reads are the ones
    analysis.audit.metric_logs maps for both trainers (it cannot import this list)."""
    R = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    keys = set(Policy(advantage="asym_grpo").step(R, group_size=4)[1])
    for name in ("fade", "agrae"):
        keys |= set(Policy(schedule=name).step(R, group_size=4)[1])
    assert set(STEP_METRICS.values()) <= keys
    assert all(name == "rlvr/" + key or (name, key) == ("rlvr/solve_rate", "solve_rate_mean")
               for name, key in STEP_METRICS.items())
    for trainer in ("trl", "verl"):
        got = live_metrics({name: 0.25 for name in STEP_METRICS}, trainer)
        assert got == dict.fromkeys(["m_S", "m_F", "sign_ratio", "frac_all_correct", "frac_all_wrong",
                                     "solve_rate"], 0.25)
