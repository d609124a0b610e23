"""Tail-miss probability (F-GRPO Eq. 9, Lemma 3.1): against mpmath at 50 significant
digits, brute-force enumeration of all outcome sequences, Monte Carlo (4 standard errors),
the paper's anchors (App. J / Fig. 5, Fig. 2) and hypothesis properties."""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import figures
from rlvr_theory import tail_miss as tm

# ------------------------------------------------------------------ references
EXPONENTS = {"tail": ((1, "1-t"), (-1, "m-t"), (-1, "1-m")),
             "active": ((1, "one"), (-1, "m"), (-1, "1-m")),
             "reach": ((1, "one"), (-1, "1-t"), (-1, "m"), (1, "m-t"))}


def mp_ref(kind: str, mu: float, tau: float, N: int) -> float:
    """Exact value to 50 significant digits: mpf(float) is exact, and the working precision
    grows with the cancellation between the terms; a sum still at round-off level at 300
    extra digits is an exact zero (e.g. ``reach`` at mu = 1)."""
    dps = 50
    while True:
        with mp.workdps(dps):
            m, t = mp.mpf(mu), mp.mpf(tau)
            base = {"one": mp.mpf(1), "1-t": 1 - t, "m-t": m - t, "1-m": 1 - m, "m": m}
            terms = [sgn * base[b] ** N for sgn, b in EXPONENTS[kind]]
            total = mp.fsum(terms)
            scale = max(abs(x) for x in terms)
            if scale == 0 or total == 0:
                return 0.0
            lost = int(mp.ceil(mp.log10(scale / abs(total))))
            if lost <= dps - 50:
                return float(total)
            if dps > 350:
                return 0.0
            dps = min(60 + lost, dps + 150)


MUS = [0.0, 1e-12, 1e-9, 1e-3, 0.1, 0.5 - 1e-9, 0.5, 0.64, 0.9, 1 - 1e-3, 1 - 1e-7, 1 - 1e-12, 1.0]
TAUS = [0.0, 1e-12, 1e-9, 1e-6, 1e-3, "0.1mu", "0.5mu", "mu(1-1e-9)", "mu"]
NS = [1, 2, 3, 7, 64, 1000, 2**15, 2**17, 2**20]


def _grid():
    out = []
    for mu in MUS:
        for t in TAUS:
            tau = {"0.1mu": 0.1 * mu, "0.5mu": 0.5 * mu, "mu(1-1e-9)": mu * (1 - 1e-9), "mu": mu}.get(t, t)
            if tau <= mu:
                out += [(mu, tau, N) for N in NS]
    return sorted(set(out))


GRID = _grid()


def _check_against_mpmath(kind, fn):
    mu, tau, N = (np.array(c) for c in zip(*GRID))
    ours = fn(mu, tau, N)  # one vectorised call over the whole grid
    worst = 0.0
    for i, (m, t, n) in enumerate(GRID):
        ref = mp_ref(kind, m, t, n)
        if ref > 1e-280:  # not tiny: relative error
            err = abs(ours[i] - ref) / ref
            assert err < 1e-12, (kind, m, t, n, ours[i], ref)
            worst = max(worst, err)
        else:  # tiny or zero: absolute
            assert abs(ours[i] - ref) <= 1e-290, (kind, m, t, n, ours[i], ref)
    return worst


def test_probability_matches_mpmath_on_extreme_grid():
    assert len(GRID) > 500
    assert _check_against_mpmath("tail", tm.probability) < 1e-12


def test_active_matches_mpmath_on_extreme_grid():
    _check_against_mpmath("active", lambda m, t, n: tm.active(m, n))


def test_reach_probability_matches_mpmath_on_extreme_grid():
    _check_against_mpmath("reach", tm.reach_probability)


def test_naive_float_formula_fails_where_ours_does_not():
    """The anchor of the brief: (1 - tau)^N must not round 1 - tau first; the naive form loses digits."""
    for mu, tau, N in ((1e-9, 0.0, 2**20), (1e-9, 1e-12, 2**20), (0.64, 1e-6, 2**20)):
        ref = mp_ref("tail", mu, tau, N)
        naive = (1 - tau) ** N - (mu - tau) ** N - (1 - mu) ** N
        assert abs(naive - ref) / ref > 1e-11  # the naive form is off from the 11th digit on
        assert abs(tm.probability(mu, tau, N) - ref) / ref < 1e-14
    with mp.workdps(50):
        cov = float(mp.power(1 - mp.mpf(1e-9), 2**20))
    assert tm.coverage_factor(1e-9, 2**20) == pytest.approx(cov, rel=1e-14)


# ------------------------------------------------------- enumeration, small N
@pytest.mark.parametrize("mu, tau", [(0.64, 0.1), (0.3, 0.05), (0.9, 0.45), (0.5, 0.5), (1.0, 0.2), (0.2, 0.0)])
@pytest.mark.parametrize("N", [1, 2, 3, 4, 6])
def test_against_enumeration_of_all_outcome_sequences(mu, tau, N):
    """Sum the probabilities of all 3^N sequences (rare, other-correct, wrong) in each event."""
    seqs = np.array(list(itertools.product(range(3), repeat=N)))
    p = np.array([tau, mu - tau, 1 - mu])[seqs].prod(axis=1)
    rare, wrong = (seqs == 0).any(1), (seqs == 2).any(1)
    correct = (seqs != 2).sum(1)
    act = (correct > 0) & (correct < N)
    assert tm.active(mu, N) == pytest.approx(p[act].sum(), abs=1e-15)
    assert tm.probability(mu, tau, N) == pytest.approx(p[act & ~rare].sum(), abs=1e-15)
    assert tm.reach_probability(mu, tau, N) == pytest.approx(p[rare & wrong].sum(), abs=1e-15)
    assert tm.coverage_factor(tau, N) == pytest.approx(p[~rare].sum(), abs=1e-15)


def test_two_rollouts_closed_forms():
    # N = 2: active iff one correct and one wrong; miss iff that correct one is not rare
    mu, tau = np.array([0.2, 0.64, 0.9]), np.array([0.01, 6.3e-5, 0.3])
    np.testing.assert_allclose(tm.active(mu, 2), 2 * mu * (1 - mu), rtol=1e-14)
    np.testing.assert_allclose(tm.probability(mu, tau, 2), 2 * (mu - tau) * (1 - mu), rtol=1e-14)
    np.testing.assert_allclose(tm.reach_probability(mu, tau, 2), 2 * tau * (1 - mu), rtol=1e-14)


# ----------------------------------------------------------------- Monte Carlo
def test_monte_carlo_agrees_within_4_standard_errors():
    mu = np.array([0.64, 0.64, 0.5, 0.2, 0.8, 0.9, 0.64])
    tau = np.array([0.05, 0.01, 0.1, 0.02, 0.4, 0.001, 6.3e-5])
    N = np.array([4, 16, 8, 32, 3, 64, 2**15])
    mc = tm.monte_carlo(mu, tau, N, trials=20_000, seed=1)
    assert mc.trials == 20_000 and mc.active.shape == mu.shape
    for est, se, exact in ((mc.active, mc.active_se, tm.active(mu, N)),
                           (mc.tail_miss, mc.tail_miss_se, tm.probability(mu, tau, N))):
        assert np.all(np.abs(est - exact) <= 4 * se), (est, exact, se)
    assert np.all(mc.tail_miss_se > 0)  # every configuration has a non-trivial tail-miss rate


def test_monte_carlo_broadcasts_and_is_reproducible():
    a = tm.monte_carlo([[0.3], [0.7]], 0.05, [2, 8, 32], trials=500, seed=7)
    b = tm.monte_carlo([[0.3], [0.7]], 0.05, [2, 8, 32], trials=500, seed=np.random.default_rng(7))
    assert a.active.shape == (2, 3)
    np.testing.assert_array_equal(a.tail_miss, b.tail_miss)
    c = tm.monte_carlo(0.5, 0.1, 8, trials=1000, seed=3, chunk=100)  # several chunks
    assert isinstance(c.active, float) and 0 < c.tail_miss < c.active < 1


def _simulate_chains(mu, tau, N, chains, steps, seed):
    """Per step of independent chains: active flag and 'reached' flag (active with a rare rollout)."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(N, [tau, mu - tau, 1 - mu], size=(chains, steps))
    correct = counts[..., 0] + counts[..., 1]
    act = (correct > 0) & (correct < N)
    return act, act & (counts[..., 0] > 0)


@pytest.mark.parametrize("mu, tau, N", [(0.6, 0.05, 4), (0.9, 0.05, 8)])
def test_streak_and_waiting_time_against_simulated_training_steps(mu, tau, N):
    act, hit = _simulate_chains(mu, tau, N, chains=10_000, steps=150, seed=11)
    assert hit.any(1).all()  # every chain reached the mode (else the waiting time is truncated)
    first = hit.argmax(1)  # index of the reaching step
    steps = first + 1
    updates = np.array([a[: f + 1].sum() for a, f in zip(act, first)])
    for count, sample in (("steps", steps), ("updates", updates)):
        se = sample.std(ddof=1) / np.sqrt(len(sample))
        assert abs(sample.mean() - tm.expected_steps(mu, tau, N, count=count)) <= 4 * se
    for T in (1, 3, 6):
        # first T active updates all miss  <=>  the reaching update is the (T+1)-th or later
        p_hat = np.mean(updates > T)
        se = np.sqrt(p_hat * (1 - p_hat) / len(updates))
        assert abs(p_hat - tm.miss_streak(mu, tau, N, T)) <= 4 * se
        # no step among the first T reaches the mode
        p_hat = np.mean(steps > T)
        se = np.sqrt(p_hat * (1 - p_hat) / len(steps))
        assert abs(p_hat - tm.miss_streak(mu, tau, N, T, count="steps")) <= 4 * se


def test_streak_and_waiting_time_limits():
    assert tm.miss_streak(0.64, 0.1, 8, 0) == 1.0
    assert tm.miss_given_active(0.64, 0.1, 8) == pytest.approx(tm.probability(0.64, 0.1, 8) / tm.active(0.64, 8),
                                                               rel=1e-14)
    # no active update is possible: convention 1, never reached
    for mu, tau, N in ((1.0, 0.3, 8), (0.5, 0.1, 1), (0.0, 0.0, 4)):
        assert tm.miss_given_active(mu, tau, N) == 1.0
        assert tm.miss_streak(mu, tau, N, 5) == 1.0
        assert tm.expected_steps(mu, tau, N) == np.inf
    assert tm.expected_steps(0.64, 0.0, 8, count="updates") == np.inf
    # tau = mu: every active group holds a rare rollout
    assert tm.miss_streak(0.3, 0.3, 4, 1) == 0.0
    assert tm.expected_steps(0.3, 0.3, 4, count="updates") == 1.0
    # tiny tau: 1 - Pr(B|A) keeps its digits (no cancellation)
    ref = mp_ref("reach", 0.64, 1e-9, 8) / mp_ref("active", 0.64, 0.0, 8)
    assert tm.expected_steps(0.64, 1e-9, 8, count="updates") == pytest.approx(1 / ref, rel=1e-12)
    assert tm.miss_streak(0.64, 1e-9, 8, 10**6) == pytest.approx(float(mp.power(1 - mp.mpf(ref), 10**6)), rel=1e-9)


# ------------------------------------------------------------- paper anchors
def test_app_j_fig5_anchors():
    """F-GRPO App. J: mu = 0.64, tau = 6.3e-5: plateau near 1, decline for N >~ 2^15, < 1e-3 at 2^17."""
    N = 2 ** np.arange(1, 18)
    p = pd.Series(tm.probability(0.64, 6.3e-5, N), index=N)
    assert p.loc[2**3:2**10].min() > 0.9  # near 1 for intermediate N
    assert p.loc[2**15] < 0.2 and p.loc[2**14] > 0.3  # falls toward zero around 2^15
    assert np.all(np.diff(p.loc[2**10:].to_numpy()) < 0)
    assert p.loc[2**17] < 1e-3  # paper: Pr(B_tau) < 10^-3 at N = 131,072
    # Monte Carlo at the paper's largest group sizes
    mc = tm.monte_carlo(0.64, 6.3e-5, [2**16, 2**17], trials=20_000, seed=5)
    assert np.all(np.abs(mc.tail_miss - p.loc[[2**16, 2**17]].to_numpy()) <= 4 * np.maximum(mc.tail_miss_se, 2e-4))


def test_app_j_parameters_follow_from_the_initial_logits():
    """Cross-check of the setting: 1 anchor logit 5, 9,999 correct logits 3, 118,000 wrong logits 0."""
    Z = np.exp(5.0) + 9_999 * np.exp(3.0) + 118_000
    assert np.exp(3.0) / Z == pytest.approx(6.3e-5, rel=0.01)  # tau_leaf ~ 6.3e-5
    assert (np.exp(5.0) + 9_999 * np.exp(3.0)) / Z == pytest.approx(0.63, abs=0.005)  # Q_pos ~ 0.63 (caption: 0.64)


@pytest.mark.parametrize("mu", [0.8, 0.5, 0.2])
def test_fig2_smaller_rho_moves_the_peak_right_and_up(mu):
    rho = np.array([0.5, 0.2, 0.1, 0.05, 0.01, 1e-3])
    pk = tm.peak(mu, rho * mu)
    assert np.all(np.diff(pk.N) >= 0) and pk.N[-1] > pk.N[0]
    assert np.all(np.diff(pk.value) > 0)
    assert np.all(pk.N > 1)  # never at the smallest group: intermediate N


# ----------------------------------------------------------------------- peak
def _scan(mu, tau, n_max):
    n = np.arange(1, n_max + 1)
    v = tm.probability(mu, tau, n)
    return n[np.argmax(v)], v.max()


def test_peak_matches_exhaustive_scan():
    rng = np.random.default_rng(0)
    mu = np.concatenate([rng.uniform(0.01, 0.99, 200), [0.5, 0.64, 0.999, 1e-3]])
    tau = mu * np.concatenate([10 ** rng.uniform(-4, -0.01, 200), [0.02, 6.3e-5 / 0.64, 1e-3, 0.3]])
    pk = tm.peak(mu, tau)
    assert pk.N.shape == mu.shape
    for m, t, n, v in zip(mu, tau, pk.N, pk.value):
        if n > 20_000:
            continue
        n_ref, v_ref = _scan(m, t, int(2 * n + 10))
        assert v == v_ref and (n == n_ref or tm.probability(m, t, n) == v_ref), (m, t, n, n_ref)


def test_peak_extreme_and_degenerate_cases():
    assert tm.peak(0.64, 6.3e-5) == (20.0, pytest.approx(tm.probability(0.64, 6.3e-5, 20)))
    assert tm.peak(0.3, 0.3) == (1.0, 0.0) and tm.peak(1.0, 0.2) == (1.0, 0.0) and tm.peak(0.0, 0.0) == (1.0, 0.0)
    # tau = 1e-9 and mu near 1: the peak lies far out and is still a local maximum over the integers
    for mu, tau in ((0.64, 1e-9), (1 - 1e-7, 1e-9), (1e-6, 1e-9), (0.5, 1e-300)):
        n, v = tm.peak(mu, tau)
        assert np.isfinite(n) and n >= 1 and 0 < v <= 1
        nb = tm.probability(mu, tau, [max(n - 1, 1), n + 1])
        assert v >= nb.max()


# --------------------------------------------------------------- properties
probs = st.floats(0.0, 1.0, allow_nan=False)
fracs = st.floats(0.0, 1.0, allow_nan=False)
group = st.integers(1, 2**20)


@settings(max_examples=200, deadline=None)
@given(mu=probs, frac=fracs, N=group)
def test_values_in_unit_interval_and_consistent(mu, frac, N):
    tau = mu * frac
    a, b, r = tm.active(mu, N), tm.probability(mu, tau, N), tm.reach_probability(mu, tau, N)
    for v in (a, b, r, tm.miss_given_active(mu, tau, N), tm.miss_streak(mu, tau, N, 7)):
        assert 0.0 <= v <= 1.0 and not np.isnan(v)
    assert b <= a * (1 + 1e-12) and b <= tm.coverage_factor(tau, N) * (1 + 1e-12)  # B in A, B in {no rare}
    assert b + r == pytest.approx(a, rel=1e-12, abs=1e-300)  # A = B + reach (disjoint)
    assert tm.expected_steps(mu, tau, N) >= 1.0


@settings(max_examples=150, deadline=None)
@given(mu=probs, N=st.integers(1, 2**19))
def test_active_is_nondecreasing_in_N_and_symmetric_in_mu(mu, N):
    a = tm.active(mu, [N, N + 1, 2 * N])
    assert a[0] <= a[1] * (1 + 1e-14) and a[1] <= a[2] * (1 + 1e-14)
    hi = max(mu, 1 - mu)  # 1 - hi is exact (Sterbenz), so both calls see the same pair {mu, 1 - mu}
    assert tm.active(hi, N) == pytest.approx(tm.active(1 - hi, N), rel=1e-13, abs=1e-300)


@settings(max_examples=150, deadline=None)
@given(mu=probs, f1=fracs, f2=fracs, N=group)
def test_tail_miss_is_nonincreasing_in_tau(mu, f1, f2, N):
    lo, hi = sorted((f1 * mu, f2 * mu))
    assert tm.probability(mu, hi, N) <= tm.probability(mu, lo, N) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(mu=st.floats(0.001, 0.999), frac=st.floats(1e-6, 0.999), N=st.integers(2, 5000))
def test_tail_miss_is_log_concave_in_N_hence_unimodal(mu, frac, N):
    """Pr(B) is NOT monotone in N (rises then falls) but log-concave: f(N)^2 >= f(N-1) f(N+1)."""
    f = tm.probability(mu, mu * frac, [N - 1, N, N + 1])
    assert f[1] ** 2 >= f[0] * f[2] * (1 - 1e-10)
    n, v = tm.peak(mu, mu * frac)
    assert v >= f.max() * (1 - 1e-14)


def test_what_is_not_monotone():
    """Pr(B_tau) rises then falls in N; it is not monotone in mu either (0 at mu = tau and at mu = 1)."""
    f = tm.probability(0.64, 6.3e-5, [2, 20, 2**17])
    assert f[0] < f[1] > f[2]
    g = tm.probability([0.1, 0.5, 1.0], 0.1, 8)
    assert g[0] == 0.0 and g[1] > 0 and g[2] == 0.0


@settings(max_examples=100, deadline=None)
@given(mu=probs, frac=fracs, N=group, T=st.integers(0, 10**6))
def test_streak_is_nonincreasing_in_T(mu, frac, N, T):
    s = tm.miss_streak(mu, mu * frac, N, [T, T + 1, 2 * T + 5])
    assert np.all(np.diff(s) <= 1e-15) and np.all((s >= 0) & (s <= 1))


def test_broadcasting_and_scalars():
    out = tm.probability(np.array([0.2, 0.5, 0.8])[:, None], 0.01, np.array([1, 2, 8, 64]))
    assert out.shape == (3, 4)
    assert isinstance(tm.probability(0.5, 0.1, 8), float)
    assert tm.probability(0.5, 0.1, 8.0) == tm.probability(0.5, 0.1, np.int64(8))  # integral floats accepted


def test_group_sizes_follow_the_integer_policy():
    """N (and T, trials): ints, numpy integers and integral floats are the same count; bool and
    fractions are refused."""
    ref = tm.probability(0.5, 0.1, 8)
    for N in (8.0, np.int64(8), np.float64(8), np.array(8), [8.0]):
        assert np.all(tm.probability(0.5, 0.1, N) == ref)
    assert tm.miss_streak(0.5, 0.1, 8, 3.0) == tm.miss_streak(0.5, 0.1, 8, np.int64(3))
    assert tm.monte_carlo(0.5, 0.1, 8, trials=100.0) == tm.monte_carlo(0.5, 0.1, 8, trials=np.int64(100))
    for N in (True, 8.5, np.bool_(True)):
        with pytest.raises(ValueError, match="^N must be an integer >= 1"):
            tm.probability(0.5, 0.1, N)
    with pytest.raises(ValueError, match="^N must be a numeric array, got booleans"):
        tm.probability(0.5, 0.1, np.array([True, False]))


# --------------------------------------------------------------- validation
@pytest.mark.parametrize("call, match", [
    (lambda: tm.probability(-0.1, 0.0, 4), "mu must be a finite number >= 0 and <= 1"),
    (lambda: tm.probability(1.5, 0.0, 4), "mu must be a finite number >= 0 and <= 1"),
    (lambda: tm.active(float("nan"), 4), "mu must be a finite number >= 0 and <= 1"),
    (lambda: tm.active([0.5, 1.5], 4), "mu must contain only finite numbers >= 0 and <= 1"),
    (lambda: tm.probability("x", 0.0, 4), "mu must be"),
    (lambda: tm.probability(0.5, 0.6, 4), "tau must lie in [0, mu]"),
    (lambda: tm.probability(0.5, -1e-9, 4), "tau must lie in [0, mu]"),
    (lambda: tm.probability([0.5, 0.2], [0.1, 0.3], 4), "tau must lie in [0, mu]"),
    (lambda: tm.probability(0.5, 0.1, 0), "N must be an integer >= 1"),
    (lambda: tm.probability(0.5, 0.1, 2.5), "N must be an integer >= 1"),
    (lambda: tm.probability(0.5, 0.1, True), "N must be an integer >= 1"),
    (lambda: tm.probability(0.5, 0.1, "8"), "N must be an integer >= 1"),
    (lambda: tm.active(0.5, [4, np.inf]), "N must contain only integers >= 1"),
    (lambda: tm.active(0.5, [4, 2.5]), "N must contain only integers >= 1"),
    (lambda: tm.probability([0.5, 0.2], 0.1, [1, 2, 3]), "N must broadcast"),
    (lambda: tm.coverage_factor(1.2, 4), "tau must be a finite number >= 0 and <= 1"),
    (lambda: tm.monte_carlo(0.5, 0.1, 4, trials=0), "trials must be an integer >= 1"),
    (lambda: tm.monte_carlo(0.5, 0.1, 4, trials=2.5), "trials must be an integer >= 1"),
    (lambda: tm.monte_carlo(0.5, 0.1, 4, trials=[10, 20]), "trials must be an integer >= 1"),
    (lambda: tm.monte_carlo(0.5, 0.1, 4, chunk=0), "chunk must be an integer >= 1"),
    (lambda: tm.monte_carlo(0.5, 0.1, 4, seed=-1), "seed must be an integer >= 0"),
    (lambda: tm.miss_streak(0.5, 0.1, 4, -1), "T must be an integer >= 0"),
    (lambda: tm.miss_streak(0.5, 0.1, 4, 1.5), "T must be an integer >= 0"),
    (lambda: tm.miss_streak(0.5, 0.1, 4, 3, count="rollouts"), "count must be one of"),
    (lambda: tm.expected_steps(0.5, 0.1, 4, count="x"), "count must be one of"),
    (lambda: tm.peak(0.5, 0.0), "tau must be > 0 where 0 < mu < 1"),
    (lambda: tm.peak(0.5, 0.7), "tau must lie in [0, mu]"),
])
def test_invalid_arguments_are_refused_naming_the_argument(call, match):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value).startswith(match.split()[0]) and match in str(err.value)
    assert "np.float64" not in str(err.value)


# ------------------------------------------------------------------ figures
@pytest.mark.parametrize("name", ["fgrpo_fig1a", "fgrpo_fig2", "fgrpo_fig5"])
def test_figures_write_files_and_claims_pass(tmp_path, name):
    paths, claims = figures.make(name, tmp_path)
    png, csv, cl = (tmp_path / f"{name}{s}" for s in (".png", ".csv", ".claims.csv"))
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(pd.read_csv(csv)) > 0
    c = pd.read_csv(cl)
    assert len(c) >= 3 and c.passed.all(), c[~c.passed]
    assert all(cm.passed for cm in claims)


def test_fig5_csv_holds_the_sweep_values(tmp_path):
    figures.make("fgrpo_fig5", tmp_path)
    df = pd.read_csv(tmp_path / "fgrpo_fig5.csv")
    sweep = df[df.grid == "sweep"].set_index("N")
    assert list(sweep.index) == [2**k for k in range(18)]
    # (1 - tau)^N dominates at N = 2^17: the value is exp(N log1p(-tau)) up to (mu - tau)^N, (1 - mu)^N ~ 0
    assert sweep.loc[2**17, "tail_miss"] == pytest.approx(np.exp(2**17 * np.log1p(-6.3e-5)), rel=1e-12)


def test_docs_page_example_runs_and_lists_the_figures():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "tail_miss.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "docs/tail_miss.md", "exec"), {})  # noqa: S102
    for name in ("fgrpo_fig1a", "fgrpo_fig2", "fgrpo_fig5"):
        assert f"| `{name}` |" in text
