"""analysis.guardrails: each rule fires exactly when it should, with its numbers; the guard's
alerts, its rules file and the alerts file the audit reads."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.audit.trainer_log import ALERT_KEYS, ALERTS_FILE, read_alerts
from analysis.guardrails import (
    CovPositive,
    EntropyDrop,
    Guard,
    ISRatio,
    SignRatio,
    ZeroSignal,
    append_alerts,
    default_rules,
    drop_alerts_after,
)


def _hist(**cols):
    n = len(next(iter(cols.values())))
    return pd.DataFrame({"step": np.arange(1, n + 1), **cols})


def test_entropy_drop_fires_at_the_fraction_within_the_window():
    rule = EntropyDrop(fraction=0.5, steps=3)
    H = [1.0, 0.9, 0.8, 0.6, 0.42]
    fired = [rule.check(_hist(entropy=H[:i])) for i in range(1, len(H) + 1)]
    # step 4: max over steps 1..4 is 1.0, drop 40 %; step 5: max over steps 2..5 is 0.9, drop 53 %
    assert [a is not None for a in fired] == [False, False, False, False, True]
    a = fired[-1]
    assert a.step == 5 and a.rule == "entropy_drop" and a.threshold == 0.5
    assert a.value == pytest.approx(1 - 0.42 / 0.9)
    assert "53.3 % in 3 steps (from 0.9 at step 2 to 0.42)" in a.message and "50 % within 3 steps" in a.message
    # a slower fall never fires, however long
    assert EntropyDrop(fraction=0.5, steps=3).check(_hist(entropy=np.linspace(1, 0.3, 50))) is None


def test_cov_positive_needs_n_consecutive_steps():
    rule = CovPositive(steps=3)
    assert rule.check(_hist(cov_logp_adv=[0.1, 0.2, -0.1, 0.3, 0.2])) is None
    a = rule.check(_hist(cov_logp_adv=[0.1, 0.2, -0.1, 0.3, 0.2, 0.05]))
    assert a is not None and a.step == 6 and a.value == pytest.approx(0.05)
    assert "3 consecutive" in a.message and "last 0.05, mean 0.1833" in a.message
    # a step that did not log the metric (NaN) is skipped: it neither breaks nor extends a run
    a = rule.check(_hist(cov_logp_adv=[0.1, 0.2, np.nan, 0.3]))
    assert a is not None and a.step == 4 and "3 consecutive" in a.message
    assert rule.check(_hist(cov_logp_adv=[0.1, np.nan, np.nan, 0.3])) is None
    assert rule.check(_hist(cov_logp_adv=[0.1, 0.2, 0.3, np.nan])).step == 3  # fired at the last step that logged it


def test_masses_logged_every_other_step_still_fire():
    """TRL with num_iterations = 2 logs the masses on generation steps only: the sign ratio rule
    counts the steps that logged them (before, the NaN steps broke every run and it never fired)."""
    nan = np.nan
    m_S, m_F = [0.2, nan, 0.3, nan, 0.25, nan], [0.0, nan, 0.0, nan, 0.0, nan]
    guard = Guard((SignRatio(steps=3),), action="log")
    fired = [guard.update(s, {"m_S": a, "m_F": b}) for s, (a, b) in enumerate(zip(m_S, m_F), 1)]
    assert [[x.step for x in f] for f in fired] == [[], [], [], [], [5], []]  # once, at the third logged step


def test_sign_ratio_band_from_masses_and_from_a_ratio_column():
    rule = SignRatio(steps=2, low=0.8, high=1.25)
    assert rule.check(_hist(m_S=[1.0, 1.0, 1.0], m_F=[1.0, 1.0, 1.0])) is None
    a = rule.check(_hist(m_S=[1.0, 2.0, 3.0], m_F=[1.0, 1.0, 2.0]))
    assert a is not None and a.value == pytest.approx(1.5) and a.threshold == 1.25 and "1.5" in a.message
    a = rule.check(_hist(m_S=[0.2, 0.1], m_F=[0.0, 0.0]))         # only successes reinforced: inf
    assert a is not None and math.isinf(a.value) and "entropy falls" in a.message
    assert rule.check(_hist(m_S=[0.0, 0.0], m_F=[0.0, 0.0])) is None   # no signal: no value
    a = rule.check(_hist(sign_ratio=[0.5, 0.7]))
    assert a is not None and a.threshold == 0.8 and "entropy rises" in a.message
    assert rule.check(_hist(sign_ratio=[0.5, 0.9])) is None


def test_zero_signal_threshold_and_the_binomial_floor():
    rule = ZeroSignal(steps=2, threshold=0.5, group_size=4)
    h = _hist(frac_all_correct=[0.1, 0.5, 0.5], frac_all_wrong=[0.1, 0.25, 0.25], solve_rate=[0.5, 0.5, 0.5])
    assert rule.check(h.iloc[:2]) is None
    a = rule.check(h)
    assert a is not None and a.value == pytest.approx(0.75) and "75 %" in a.message
    assert "12.5 %" in a.message                      # 0.5^4 + 0.5^4 at p = 0.5, G = 4
    assert ZeroSignal(steps=1, threshold=0.5).check(_hist(frac_zero_signal=[0.5])) is None   # strictly above


def test_is_ratio_cap_and_absent_column():
    rule = ISRatio()
    assert rule.check(_hist(entropy=[1.0])) is None
    assert rule.check(_hist(seq_is_ratio_max=[2.0, 3.0])) is None
    a = rule.check(_hist(seq_is_ratio_max=[2.0, 3.5]))
    assert a is not None and a.value == 3.5 and a.threshold == 3.0 and "3.5" in a.message
    assert rule.check({"step": np.array([1]), "is_ratio_max": np.array([4.0])}).rule == "is_ratio"


def test_guard_reports_a_rule_when_it_starts_firing_and_writes_what_the_audit_reads(tmp_path):
    g = Guard((CovPositive(steps=2),), action="alert")
    out = [g.update(s, {"cov_logp_adv": c}) for s, c in enumerate([0.1, 0.1, 0.1, -1.0, 0.1, 0.1], 1)]
    assert [[a.step for a in x] for x in out] == [[], [2], [], [], [], [6]]
    alerts = out[1] + out[5]
    assert all(a.action == "alert" for a in alerts)
    append_alerts(tmp_path, alerts[:1])
    append_alerts(tmp_path, alerts[1:])
    recs = read_alerts([tmp_path / ALERTS_FILE])
    assert [r["step"] for r in recs] == [2, 6]
    assert set(ALERT_KEYS) <= set(recs[0]) and {"value", "threshold", "action", "source"} <= set(recs[0])
    drop_alerts_after(tmp_path, 3)
    assert [r["step"] for r in read_alerts([tmp_path / ALERTS_FILE])] == [2]
    # replay: a rule firing at the last replayed row is taken as reported
    g2 = Guard((CovPositive(steps=2),))
    g2.replay([{"step": 1, "cov_logp_adv": 0.1}, {"step": 2, "cov_logp_adv": 0.1}])
    assert g2.update(3, {"cov_logp_adv": 0.1}) == []


def test_rules_file_round_trip_and_errors_name_the_key(tmp_path):
    g = Guard((EntropyDrop(fraction=0.3, steps=10), ZeroSignal(threshold=0.9, group_size=8)), action="stop")
    f = tmp_path / "guard.json"
    f.write_text(json.dumps(g.to_dict()))
    back = Guard.from_file(f)
    assert back.rules == g.rules and back.action == "stop"
    assert Guard.from_file(f, action="log").action == "log"
    assert Guard.from_spec("default").rules == default_rules()
    assert [r.name for r in Guard.from_dict({}).rules] == [r.name for r in default_rules()]
    for spec, words in [({"rulez": {}}, "'rulez'"), ({"rules": {"entropy_dorp": {}}}, "'entropy_dorp'"),
                        ({"rules": {"entropy_drop": {"fractoin": 0.5}}}, "rules.entropy_drop.fractoin"),
                        ({"rules": {"entropy_drop": {"fraction": 1.5}}}, "entropy_drop.fraction"),
                        ({"rules": {"sign_ratio": {"steps": 0}}}, "sign_ratio.steps"),
                        ({"action": "halt"}, "action")]:
        f.write_text(json.dumps(spec))
        with pytest.raises(ValueError, match=words.replace(".", r"\.")) as err:
            Guard.from_file(f)
        assert str(f) in str(err.value)
    f.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        Guard.from_file(f)
    with pytest.raises(ValueError, match="neither a preset"):
        Guard.from_spec(str(tmp_path / "missing.json"))
