"""Pre-RL triage (``analysis.triage``): the hypergeometric estimators against exact enumeration of
the G-subsets, their unbiasedness over x ~ Bin(n, p), the expected masses against a Monte Carlo of
Bin(G, p) groups through ``rlvr_theory.groups``, the no-signal prompts, and the refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis import triage as tr
from rlvr_theory import advantages, groups, masses

FAMILIES = [("grpo", {}), ("asym_grpo", {"delta": 0.5}), ("rloo", {}), ("dr_grpo", {})]


def _subsets(n: int, x: int, G: int):
    """Every G-subset of n samples of which the first x are successes, as 0/1 reward rows."""
    r = np.array([1.0] * x + [0.0] * (n - x))
    return np.array([r[list(c)] for c in itertools.combinations(range(n), G)])


@pytest.mark.parametrize("name,params", FAMILIES)
def test_estimators_equal_exact_enumeration_of_the_subsets(name, params):
    adv = advantages.get(name, **params)
    for n in range(2, 8):
        for G in range(max(2, adv.min_group_size()), n + 1):
            xs = np.arange(n + 1)
            t = tr.triage(n, xs, G, name, params)
            w = tr.hypergeometric_weights(n, xs, G)
            for x in xs:
                R = _subsets(n, int(x), G)
                k = R.sum(1)
                zero = np.mean((k == 0) | (k == G))
                ms, mf = masses.of_group(adv, R)   # the masses of every subset, averaged
                assert t.per_prompt["p_zero_signal"][x] == pytest.approx(zero, abs=1e-13)
                assert w[x] == pytest.approx(np.bincount(k.astype(int), minlength=G + 1) / len(R), abs=1e-13)
                assert t.per_prompt["m_S"][x] == pytest.approx(ms.mean(), abs=1e-12)
                assert t.per_prompt["m_F"][x] == pytest.approx(mf.mean(), abs=1e-12)


@pytest.mark.parametrize("n,G", [(8, 2), (16, 8), (16, 16), (64, 5), (200, 32)])
def test_zero_signal_estimator_is_unbiased(n, G):
    xs = np.arange(n + 1)
    z = tr.zero_signal_probability(n, xs, G)
    for p in (0.0, 0.03, 0.3, 0.5, 0.77, 1.0):
        expected = float(stats.binom.pmf(xs, n, p) @ z)      # exact sum over x ~ Bin(n, p)
        assert expected == pytest.approx(p ** G + (1 - p) ** G, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name,params", FAMILIES)
def test_expected_masses_match_a_monte_carlo_of_binomial_groups(name, params):
    n, G, p, groups_mc = 24, 8, 0.3, 200_000
    adv = advantages.get(name, **params)
    xs = np.arange(n + 1)
    t = tr.triage(n, xs, G, name, params)
    pmf = stats.binom.pmf(xs, n, p)
    est_s, est_f = float(pmf @ t.per_prompt["m_S"]), float(pmf @ t.per_prompt["m_F"])
    # exactly the finite-G expectation of rlvr_theory.masses (the estimator is unbiased)
    ex = masses.exact(adv, p, G)
    assert est_s == pytest.approx(float(ex.m_S), rel=1e-10) and est_f == pytest.approx(float(ex.m_F), rel=1e-10)
    # and a Monte Carlo of Bin(G, p) groups through the flat-batch code path
    rng = np.random.default_rng(0)
    r = (rng.random(groups_mc * G) < p).astype(float)
    A = groups.advantages(adv, r, group_size=G)
    gs = groups.stats(A, r == 1.0, group_size=G)
    # tolerance: 6 standard errors of the Monte Carlo mean
    for est, mc in ((est_s, gs.m_S), (est_f, gs.m_F)):
        se = mc.std() / math.sqrt(mc.size)
        assert abs(mc.mean() - est) < 6 * se + 1e-12


def test_the_no_signal_prompts_are_exactly_those_never_or_always_solved():
    rng = np.random.default_rng(1)
    n = rng.integers(4, 30, size=500)
    x = rng.binomial(n, rng.choice([0.0, 0.02, 0.5, 0.97, 1.0], size=500))
    t = tr.triage(n, x, 4)
    expected = np.flatnonzero((x == 0) | (x == n))
    assert expected.size > 0 and np.array_equal(t.no_signal, expected)
    z = t.per_prompt["p_zero_signal"].to_numpy()
    assert np.all(z[expected] == 1.0) and np.all(z[np.setdiff1d(np.arange(500), expected)] < 1.0)
    s = t.summary()
    assert s["no_signal_count"] == expected.size == s["never_solved"] + s["always_solved"]
    assert s["zero_signal_share"] == pytest.approx(z.mean())
    assert sum(s["histogram"]["prompts"]) == 500
    assert f"{expected.size} of 500 prompts" in t.verdict


def test_summary_and_verdict():
    t = tr.triage(16, [0, 3, 8, 16, 15, 1], 8, "asym_grpo", {"delta": 0.5})
    assert t.sign_ratio == pytest.approx(0.5)           # AsymGRPO δ: m_S/m_F = δ at every count
    assert "half or more" in t.verdict and "2 of 6 prompts" in t.verdict
    assert "G = 8" in t.to_string()
    assert "most groups will carry signal" in tr.triage(16, [8, 7, 9], 8).verdict
    assert tr.triage(16, [0, 16], 8).sign_ratio is None


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match=r"^G must be <= n .* G = 9 > n = 8"):
        tr.triage(8, [1, 2], 9)
    with pytest.raises(ValueError, match=r"^G must be <= n"):
        tr.zero_signal_probability([8, 4], [1, 2], 5)
    with pytest.raises(ValueError, match=r"^x must be integers in \[0, n\]"):
        tr.triage(8, [9], 4)
    with pytest.raises(ValueError, match=r"^G "):
        tr.triage(8, [1], 0)
    with pytest.raises(ValueError, match=r"^n must be"):
        tr.triage([8, 8, 8], [1, 2], 2)
    with pytest.raises(ValueError, match=r"^advantage: .*batch-level"):
        tr.triage(8, [1, 2], 4, "reinforce_pp")
    with pytest.raises(ValueError, match=r"^params: "):
        tr.triage(8, [1, 2], 4, advantages.get("grpo"), {"ddof": 1})
    with pytest.raises(ValueError, match=r"asym_grpo: delta"):
        tr.triage(8, [1, 2], 4, "asym_grpo", {"delta": -1})
