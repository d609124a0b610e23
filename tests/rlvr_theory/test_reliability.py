"""Reliability of the theory layer: scale limits that are computed (exact masses in O(G) per p up
to G = 2**20), extreme but finite reward values, inputs that are not what they claim (text,
complex, bool where a number is expected), and the CLI's one-line refusals (full device, G = 10**6).

CLI cases run ``cli.main(argv)`` in this process (:func:`run_in_process`: the code the console
script runs before ``sys.exit``, its output captured); a write to a full standard output runs the
real console script (:func:`_console`)."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rlvr_plumbing import runner
from rlvr_theory import advantages, cli, masses, tail_miss, variance
from tests.in_process import run_in_process
from tests.rlvr_theory.test_advantages import Halved  # a family registered by a user

ALL = advantages.names()
BIN = Path(sys.executable).parent
CLI = shutil.which("rlvr-theory", path=str(BIN)) or str(BIN / "rlvr-theory")


def _console(*args: str, stdout=subprocess.PIPE, cwd=None) -> subprocess.CompletedProcess:
    """The real console script, as a user runs it."""
    return subprocess.run([CLI, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600, cwd=cwd)


# --------------------------------------------------- the dense reference
def dense_exact(adv: advantages.Advantage, p: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The former implementation: the (G+1)×G array of groups with x = 0..G successes, masses by
    summing each group (of_group), then the binomial expectation: O(G²) memory."""
    succ = (np.arange(G)[None, :] < np.arange(G + 1)[:, None]).astype(float)
    rw, rc = adv.reward_values
    rewards = np.where(succ > 0, rc, rw)
    pmf = stats.binom.pmf(np.arange(G + 1)[None, :], G, p[:, None])  # [P, G+1]
    if adv.batch_level:
        A = adv.population_advantages(rewards, p)  # [P, G+1, G]
        m_s = np.where(succ > 0, A, 0.0).sum(-1) / G
        m_f = -np.where(succ > 0, 0.0, A).sum(-1) / G
        return (pmf * m_s).sum(1), (pmf * m_f).sum(1), (pmf * np.abs(A).mean(-1)).sum(1)
    lengths = adv.default_lengths(succ) if adv.uses_lengths else None
    m = masses.of_group(adv, rewards, lengths=lengths)
    mean_abs = np.abs(adv(rewards, lengths=lengths)).mean(-1)
    return pmf @ m.m_S, pmf @ m.m_F, pmf @ mean_abs


VARIANTS = [advantages.get(n) for n in ALL] + [
    advantages.get("grpo", ddof=1, eps=0.1), advantages.get("quantile", tau=0.3), advantages.get("quantile", tau=1.0),
    advantages.get("t2t", alpha=0.7, length_correct=0.2, length_incorrect=0.9), advantages.get("agrae", omega=0.4),
    advantages.get("agrae", alpha=0.5), advantages.get("passk_chen", k=3), advantages.get("logmeanexp", beta=3.0),
    advantages.get("softmax", beta=0.5), advantages.get("power_norm", gamma=0.8), advantages.get("iac", alpha=0.5),
    advantages.get("power_alpha", alpha=0.5, normalize=True), advantages.get("fade", alpha=0.3, delta=0.4),
]
REWARDS = [(0.0, 1.0), (-1.0, 1.0), (0.2, 0.7)]


@pytest.mark.parametrize("adv", VARIANTS, ids=repr)
@pytest.mark.parametrize("rv", REWARDS, ids=str)
def test_exact_equals_the_dense_implementation_at_small_G(adv, rv):
    adv = adv.with_params(reward_values=rv)
    p = np.array([0.0, 0.05, 0.3, 0.5, 0.77, 1.0])
    for G in (max(adv.min_group_size(), 2), 5, 12):
        if G < adv.min_group_size():
            continue
        got = masses.exact(adv, p, G, with_abs=True)
        ref = dense_exact(adv, p, G)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14, err_msg=f"{adv!r} G={G}")


@pytest.mark.parametrize("adv", VARIANTS, ids=repr)
def test_outcome_values_equal_the_dense_groups(adv):
    G = 9
    if adv.batch_level:
        p = np.array([0.2, 0.6])
        a_s, a_f = adv.outcome_values(G, p=p)
        rewards = (np.arange(G)[None, :] < np.arange(G + 1)[:, None]).astype(float)
        A = adv.population_advantages(rewards, p)
        np.testing.assert_allclose(a_s[:, 1:], A[:, 1:, 0], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(a_f[:, :-1], A[:, :-1, -1], rtol=1e-13, atol=1e-15)
        with pytest.raises(ValueError, match="p is required"):
            adv.outcome_values(G)
        return
    t = masses.outcome_advantages(adv, G)
    for x in range(G + 1):
        r = (np.arange(G) < x).astype(float)
        kw = {"lengths": adv.default_lengths(r)} if adv.uses_lengths else {}
        A = adv(r, **kw)
        if x > 0:
            assert t.A_success[x] == pytest.approx(A[0], rel=1e-13, abs=1e-15)
        if x < G:
            assert t.A_failure[x] == pytest.approx(A[-1], rel=1e-13, abs=1e-15)
    assert np.isnan(t.A_success[0]) and np.isnan(t.A_failure[G])


# closed forms that are the G -> ∞ limit of the exact expectation (kind "asymptotic") or the plug-in
# value at p̂ = X/G (kind "exact"): E[f(p̂)] − f(p) = f''(p)·pq/(2G) + O(1/G²) for a smooth f, so the
# gap shrinks like 1/G; passk_tang (q^(G−1) underflows) and the piecewise forms at their kink are left out
LIMIT_FAMILIES = [n for n in ALL if advantages.registry()[n].kind != "expectation"] + ["reinforce_pp"]


@pytest.mark.parametrize("name", LIMIT_FAMILIES)
def test_exact_approaches_the_closed_form_at_large_G(name):
    adv = advantages.get(name)
    p = np.array([0.3, 0.6])
    gaps = {}
    for G in (2**16, 2**20):
        ex = masses.exact(adv, p, G)
        cf = masses.closed_form(adv, p, G)
        for e, c in ((ex.m_S, cf.m_S), (ex.m_F, cf.m_F)):
            scale = np.maximum(np.abs(c), np.abs(e))
            rel = np.where(scale > 0, np.abs(e - c) / np.where(scale > 0, scale, 1.0), 0.0)
            # the constant (|f''|·pq/2 relative to f) is below 8 for every family at these p
            assert np.all(rel <= 8.0 / G + 1e-12), (name, G, e, c, rel)
            gaps.setdefault(G, []).append(rel)
    # and the gap is O(1/G), not just small: 16× smaller from 2^16 to 2^20 (up to rounding)
    big, small = np.concatenate(gaps[2**16]), np.concatenate(gaps[2**20])
    assert np.all(small <= big / 8 + 1e-13), (name, big, small)


@pytest.mark.parametrize("name", ["grpo", "passk_chen", "t2t", "reinforce_pp"])
def test_exact_at_G_2_to_the_20_is_fast_and_O_of_G_in_memory(name):
    G = 2**20
    masses.exact(name, 0.3, 64)  # sympy-free, but warm the imports
    tracemalloc.start()
    t0 = time.perf_counter()
    e = masses.exact(name, [0.3], G)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # measured ~0.3 s and ~100 MB on the 2-core test machine; the dense form needed 8·G² = 8 TiB
    assert elapsed < 10.0, elapsed
    assert peak < 400 * 2**20, peak
    assert np.all(np.isfinite(e.m_S)) and np.all(e.m_S > 0)


def test_exact_many_p_at_large_G_stays_within_a_bounded_budget():
    p = np.linspace(0, 1, 41)
    tracemalloc.start()
    e = masses.exact("dr_grpo", p, 2**18)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 400 * 2**20, peak  # p in chunks: not 41 × (G+1) pmf entries at once (plus temporaries)
    np.testing.assert_allclose(e.m_S, p * (1 - p) * (1 - 2.0**-18), rtol=1e-10, atol=1e-15)  # E[p̂q̂]


def test_variance_exact_method_at_large_G():
    adv = advantages.get("power_alpha", alpha=3.0, normalize=True)
    v = variance.weight_variance(adv, [0.1, 0.5], G=2**18, method="exact")
    d = variance.weight_variance(adv, [0.1, 0.5], G=2**18, method="delta")
    np.testing.assert_allclose(v, d, rtol=1e-3)  # the delta method is the G -> ∞ limit away from the mode


# --------------------------------------------- families registered elsewhere
def test_a_family_registered_elsewhere_uses_the_dense_path_within_a_computed_limit():
    with advantages.registered(Halved):
        adv = advantages.get(Halved.name)
        assert not adv.is_compressible()
        e = masses.exact(adv, [0.2, 0.7], 300)
        np.testing.assert_allclose(e.m_S, 0.5 * masses.exact("grpo", [0.2, 0.7], 300).m_S, rtol=1e-12)
        G = advantages.DENSE_MAX_G + 1
        with pytest.raises(ValueError, match=rf"^G = {G} is too large for .*the limit is G <= {G - 1}$"):
            masses.exact(adv, 0.3, G)
    try:  # a family that declares its definition count-aware gets the compressed form
        Halved.compressible = True
        with advantages.registered(Halved):
            adv = advantages.get(Halved.name)
            assert adv.is_compressible()
            assert float(masses.exact(adv, 0.3, 2**20).m_S) == pytest.approx(
                0.5 * float(masses.exact("grpo", 0.3, 2**20).m_S), rel=1e-12)
    finally:
        Halved.compressible = None


# --------------------------------------------- extreme but finite rewards
EXTREME = [(-1e308, 1e308), (0.0, 5e-324), (-1.7e308, 1.7e308), (1e-320, 3e-320)]


@pytest.mark.parametrize("rv", EXTREME, ids=str)
def test_grpo_is_plus_minus_one_at_extreme_reward_values(rv):
    rw, rc = rv
    for name in ("grpo", "maxrl", "binary_contrastive", "reinforce_pp", "power_norm", "t2t"):
        adv = advantages.get(name, reward_values=rv)
        kw = {"lengths": np.ones(4)} if adv.uses_lengths else {}
        got = adv(np.array([rc, rw, rw, rc]), **kw)
        if name == "grpo":
            np.testing.assert_array_equal(got, [1.0, -1.0, -1.0, 1.0])
        np.testing.assert_allclose(got, [1.0, -1.0, -1.0, 1.0], rtol=5e-16)  # to the last ulp
    ref = masses.exact("grpo", [0.3, 0.5], 8)
    got = masses.exact(advantages.get("grpo", reward_values=rv), [0.3, 0.5], 8)
    np.testing.assert_allclose(got.m_S, ref.m_S, rtol=1e-15)
    np.testing.assert_allclose(masses.closed_form(advantages.get("grpo", reward_values=rv), 0.3).m_S,
                               masses.closed_form("grpo", 0.3).m_S, rtol=1e-15)


SCALED = [n for n in ALL if advantages.get(n).reward_scale_power() is not None]


@pytest.mark.parametrize("name", SCALED)
def test_declared_reward_scale_power_holds(name):
    """A = (R_c − R_w)^power × the advantages at rewards (0, 1): the declaration behind the ranges."""
    rv = (-3.0, 5.0)
    unit, adv = advantages.get(name), advantages.get(name, reward_values=rv)
    s = np.array([[1.0, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    kw = {"lengths": unit.default_lengths(s)} if unit.uses_lengths else {}
    power = adv.reward_scale_power()
    np.testing.assert_allclose(adv(np.where(s > 0, 5.0, -3.0), **kw), unit(s, **kw) * 8.0**power, rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(masses.exact(adv, 0.3, 6).m_S, float(masses.exact(unit, 0.3, 6).m_S) * 8.0**power,
                               rtol=1e-13)


def test_proportional_families_compute_finite_results_or_refuse_with_the_usable_range():
    adv = advantages.get("dr_grpo", reward_values=(-1e308, 1e308))
    np.testing.assert_array_equal(adv(np.array([1e308, -1e308])), [1e308, -1e308])
    assert float(masses.exact(adv, 0.5, 2).m_S) == pytest.approx(2.5e307, rel=1e-15)  # Δ·E[p̂q̂] = Δ·pq(G−1)/G
    with pytest.raises(ValueError, match=r"^reward_values: the advantages of .*skew_r.* overflow float64 .*"
                                         r"proportional to \(R_c − R_w\)\^2, so these groups need R_c − R_w <= "
                                         r"2\.682e\+154$"):
        advantages.get("skew_r", reward_values=(-1e308, 1e308))(np.array([1e308, -1e308, -1e308, 1e308]))
    with pytest.raises(ValueError, match=r"need R_c − R_w <= 1\.798e\+308$"):  # beyond the float range: in text
        advantages.get("quantile", reward_values=(-1e308, 1e308))(np.array([1e308, -1e308]))
    with pytest.raises(ValueError, match=r"need R_c − R_w <= 2\.697e\+308$"):
        advantages.get("rloo", reward_values=(-1.7e308, 1.7e308))(np.array([1.7e308, 1.7e308, -1.7e308, -1.7e308]))
    with pytest.raises(ValueError, match=r"\(R_c − R_w\)\^-1, so these groups need R_c − R_w >= 1\.113e-308$"):
        advantages.get("power_norm", gamma=1.0, reward_values=(0, 5e-324))(np.array([5e-324, 0, 0, 5e-324]))
    with pytest.raises(ValueError, match=r"^reward_values: the closed-form masses of .*skew_r"):
        masses.closed_form(advantages.get("skew_r", reward_values=(-1e308, 1e308)), 0.3)
    with pytest.raises(ValueError, match=r"^reward_values: the closed form of .*softmax.* overflows float64"):
        masses.closed_form(advantages.get("softmax", reward_values=(-1e308, 1e308)), 0.3, 8)
    # underflow to 0 is a correct rounding of a value below 5e-324; the ratios stay exact
    tiny = advantages.get("dr_grpo", reward_values=(0, 5e-324))
    assert float(masses.exact(tiny, 0.3, 8).m_S) == 0.0
    assert float(masses.sign_ratio(tiny, 0.3, 8, exact=True)) == 1.0
    assert float(masses.advantage_ratio(tiny, 0.3)) == pytest.approx(0.3 / 0.7)
    t = masses.table([0.3], 8, [tiny, advantages.get("grpo", reward_values=(-1e308, 1e308))])
    # GRPO is invariant to an affine map of the rewards: at ±1e308 its exact masses are those of
    # 0/1 rewards, computed now (1e-12: the scaled sums round differently)
    plain = float(masses.exact(advantages.get("grpo"), 0.3, 8).m_S)
    assert t.sign_ratio.tolist() == [1.0, 1.0] and t.m_S_exact[1] == pytest.approx(plain, rel=1e-12)


@pytest.mark.parametrize("rv", [("-1e308", "1e308"), ("0", "5e-324")])
def test_cli_masses_at_extreme_reward_values(rv):
    res = run_in_process(cli.main, "masses", "--advantage", "grpo", "--reward-values", *rv, "--p", "0.3", "--G", "8",
                         "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    ref = json.loads(run_in_process(cli.main, "masses", "--advantage", "grpo", "--p", "0.3", "--G", "8",
                                    "--json").stdout)
    assert out["exact"] == ref["exact"] and out["closed_form"] == ref["closed_form"]
    assert "finite" not in res.stderr
    res = run_in_process(cli.main, "masses", "--advantage", "skew_r", "--reward-values", *rv, "--p", "0.3")
    if rv[0] == "-1e308":
        assert res.returncode == 2 and res.stderr.startswith("rlvr-theory: error: --reward-values: ")
        assert "R_c − R_w <=" in res.stderr and "Traceback" not in res.stderr and res.stderr.count("\n") == 1
    else:
        assert res.returncode == 0, res.stderr


# ------------------------------------------------------------ huge G on the CLI
def test_cli_masses_and_table_at_G_one_million():
    res = run_in_process(cli.main, "masses", "--advantage", "passk_chen", "--p", "0.3", "--G", "1000000", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    cf = masses.closed_form("passk_chen", 0.3)
    assert out["exact"]["m_S"] == pytest.approx(float(cf.m_S), rel=8e-6)  # O(1/G)
    res = run_in_process(cli.main, "table", "--advantage", "grpo", "--advantage", "reinforce_pp", "--p", "0.3",
                         "--G", "1000000", "--format", "csv")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 3 and "Traceback" not in res.stderr


def test_cli_refuses_a_dense_family_beyond_its_limit_in_one_line():
    import sympy

    class H(advantages.Advantage):
        name = "test_dense"

        def _compute(self, g, lengths):
            return g.grpo()

        def _closed_form(self, k, d):
            return sympy.Integer(1), sympy.Integer(1)

    with advantages.registered(H):  # registered for this command only
        res = run_in_process(cli.main, "masses", "--advantage", "test_dense", "--p", "0.3", "--G", "1000000")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr == (f"rlvr-theory: error: --G = 1000000 is too large for advantages.get('test_dense'): a family "
                          f"that is not compressible (Advantage.compressible) is evaluated on the G + 1 groups of G "
                          f"rollouts, (G + 1)·G = 1e+12 advantages; the limit is G <= {advantages.DENSE_MAX_G}\n")


# ---------------------------------------- inputs that are not what they claim
def test_complex_rewards_and_text_probabilities_are_refused():
    with pytest.raises(ValueError, match=r"^rewards must be a real numeric array, got complex$"):
        advantages.get("grpo")(np.array([1 + 2j, 0, 1, 0]))
    with pytest.raises(ValueError, match=r"^rewards must be a real numeric array, got complex$"):
        advantages.get("grpo").graded_call(np.array([1 + 0j, 0, 1, 0]))  # even a zero imaginary part
    with pytest.raises(ValueError, match=r"^mu must be a finite number >= 0 and <= 1, got '0.5'$"):
        tail_miss.probability("0.5", 0.1, 8)


_ADV = advantages.get("power_alpha", alpha=3.0, normalize=True)
# (function, keyword arguments of a valid call, the numeric arguments to spoil)
PUBLIC = [
    (masses.closed_form, {"adv": "grpo", "p": 0.3, "G": 8}, ["p", "G"]),
    (masses.exact, {"adv": "grpo", "p": 0.3, "G": 8}, ["p", "G"]),
    (masses.sign_ratio, {"adv": "grpo", "p": 0.3, "G": 8, "exact": True}, ["p", "G"]),
    (masses.advantage_ratio, {"adv": "grpo", "p": 0.3, "G": 8}, ["p", "G"]),
    (masses.outcome_advantages, {"adv": "grpo", "G": 8}, ["G"]),
    (masses.table, {"p": [0.3], "G": 8, "advantages": ["grpo"]}, ["p", "G"]),
    (masses.peak, {"adv": "rloo", "which": "m_S", "G": 8}, ["G"]),
    (masses.binom_pmf, {"p": np.array([0.3]), "G": 8}, ["p", "G"]),
    (masses.of_group, {"adv": "grpo", "rewards": [1.0, 0.0]}, ["rewards"]),
    (masses.abs_adv_sum, {"adv": "grpo", "rewards": [1.0, 0.0]}, ["rewards"]),
    (masses.check_p, {"p": 0.3}, ["p"]),
    (masses.check_group_size, {"G": 8}, ["G"]),
    (advantages.get, {"name": "asym_grpo", "delta": 0.5}, ["delta"]),
    (advantages.get, {"name": "grpo", "eps": 0.1}, ["eps"]),
    (advantages.get, {"name": "passk_chen", "k": 2}, ["k"]),
    (advantages.check_reward_values, {"reward_values": (0.0, 1.0)}, ["reward_values"]),
    (advantages.get("grpo").outcome_values, {"G": 8}, ["G"]),
    (advantages.get("agrae").outcome_values, {"G": 8, "p": [0.3]}, ["G", "p"]),
    (advantages.get("reinforce_pp").population_advantages, {"rewards": [1.0, 0.0], "p_values": [0.3]},
     ["rewards", "p_values"]),
    (advantages.get("t2t").__call__, {"rewards": [1.0, 0.0], "lengths": [1.0, 2.0]}, ["rewards", "lengths"]),
    (advantages.get("grpo").graded_call, {"rewards": [0.5, 0.25]}, ["rewards"]),
    (tail_miss.active, {"mu": 0.5, "N": 8}, ["mu", "N"]),
    (tail_miss.coverage_factor, {"tau": 0.1, "N": 8}, ["tau", "N"]),
    (tail_miss.probability, {"mu": 0.5, "tau": 0.1, "N": 8}, ["mu", "tau", "N"]),
    (tail_miss.reach_probability, {"mu": 0.5, "tau": 0.1, "N": 8}, ["mu", "tau", "N"]),
    (tail_miss.miss_given_active, {"mu": 0.5, "tau": 0.1, "N": 8}, ["mu", "tau", "N"]),
    (tail_miss.peak, {"mu": 0.5, "tau": 0.1}, ["mu", "tau"]),
    (tail_miss.monte_carlo, {"mu": 0.5, "tau": 0.1, "N": 8, "trials": 10, "seed": 0, "chunk": 100},
     ["mu", "tau", "N", "trials", "seed", "chunk"]),
    (tail_miss.miss_streak, {"mu": 0.5, "tau": 0.1, "N": 8, "T": 3}, ["mu", "tau", "N", "T"]),
    (tail_miss.expected_steps, {"mu": 0.5, "tau": 0.1, "N": 8}, ["mu", "tau", "N"]),
    (variance.weight, {"adv": _ADV, "p": 0.3}, ["p"]),
    (variance.weight_derivative, {"adv": _ADV, "p": 0.3}, ["p"]),
    (variance.weight_variance, {"adv": _ADV, "p": 0.3, "G": 8}, ["p", "G"]),
    (variance.relative_weight_variance, {"adv": _ADV, "p": 0.3, "G": 8}, ["p", "G"]),
    (variance.raw_noise, {"p": 0.3, "G": 8, "sigma2": 1.0}, ["p", "G", "sigma2"]),
    (variance.update_noise, {"adv": _ADV, "p": 0.3, "G": 8, "signal": 1.0, "sigma2": 1.0},
     ["p", "G", "signal", "sigma2"]),
    (variance.kish_neff, {"adv": _ADV, "p": [0.3, 0.5], "density": [1.0, 1.0], "M": 4}, ["p", "density", "M"]),
    (variance.update_quality, {"adv": _ADV, "p": [0.3, 0.5], "G": 8, "signal": 1.0, "M": 4.0, "sigma2": 1.0,
                               "density": [1.0, 1.0]}, ["p", "G", "signal", "M", "sigma2", "density"]),
    (variance.enrichment_threshold, {"adv": _ADV, "p": 0.3, "p_bar": 0.5, "G": 8}, ["p", "p_bar", "G"]),
    (variance.enrichment_table, {"p": [0.3], "alpha": 3.0, "p_bar": 0.5, "G_values": [8]}, ["p", "alpha", "p_bar"]),
    (variance.sweet_spot, {"c": 0.5}, ["c"]),
    (variance.alpha_for_mode, {"p": 0.3}, ["p"]),
    (variance.optimal_alpha, {"signal": 1.0, "G": 8, "sigma2": 1.0, "xatol": 1e-3}, ["signal", "G", "sigma2", "xatol"]),
]
BAD = {"text": "0.5", "complex": 0.5 + 1j, "bool": True, "complex array": np.array([0.5 + 0j])}


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("func, kwargs, names", PUBLIC, ids=lambda v: getattr(v, "__qualname__", None) or "")
def test_public_functions_refuse_text_complex_and_bool_naming_the_argument(func, kwargs, names, kind):
    func(**kwargs)  # the valid call works
    for name in names:
        bad = BAD[kind]
        if name == "reward_values":
            bad = (0.0, bad) if kind != "complex array" else np.array([0.0, 1.0 + 0j])
        elif name == "seed" and kind == "bool":
            bad = True
        with pytest.raises(ValueError) as err:
            func(**{**kwargs, name: bad})
        msg = str(err.value)  # "NAME must ...", or "family: NAME must ..." for a family's parameter
        assert msg.split(" must ")[0].split(": ")[-1] == name, (func, name, kind, msg)


# ----------------------------------------------------- the runner's OSError path
def test_list_on_a_full_device_is_one_line_and_status_1():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        res = _console("list", stdout=full)
    assert res.returncode == 1
    assert res.stderr == "rlvr-theory: error: cannot write the output: No space left on device\n"
    with open("/dev/full", "w") as full:
        res = _console("list", "--json", stdout=full)
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


@pytest.mark.parametrize("err, shown", [
    (OSError(errno.ENOSPC, "No space left on device", "runs/x/final.csv"),
     "No space left on device: 'runs/x/final.csv'"),
    (OSError(errno.EROFS, "Read-only file system", "/ro/out.json"), "Read-only file system: '/ro/out.json'"),
    (PermissionError(errno.EACCES, "Permission denied", "a.csv", None), "Permission denied: 'a.csv'"),
    (OSError(errno.EXDEV, "Invalid cross-device link", "a.tmp", None, "b"), "Invalid cross-device link: 'a.tmp' -> 'b'"),
])
def test_an_os_error_naming_a_file_is_one_line_and_status_1(capsys, err, shown):
    import argparse

    def build() -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(prog="rlvr-theory")

        def func(args):
            raise err
        ap.set_defaults(func=func)
        return ap

    assert runner.run("rlvr-theory", build, []) == runner.EXIT_OS == 1
    out, errtext = capsys.readouterr()
    assert out == "" and errtext == f"rlvr-theory: error: {shown}\n"


def test_math_inside_the_limit_is_finite():
    """The (x/G)·A order keeps masses finite where x·A alone would overflow."""
    adv = advantages.get("reinforce", reward_values=(-1e308, 1e308))
    m = masses.exact(adv, [0.0, 0.3, 1.0], 16)
    np.testing.assert_allclose(m.m_S, [0.0, 3e307, 1e308], rtol=1e-14)
    np.testing.assert_allclose(m.m_F, [1e308, 7e307, 0.0], rtol=1e-14)
    assert math.isfinite(float(masses.advantage_ratio(adv, 0.3, 16, exact=True)))
