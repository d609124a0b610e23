"""Helper computations of the FADE figures fade_fig4 (Fig. 4/14, App. 11.3), fade_fig9 (Fig. 9) and
fade_fig12 (App. 12.2 Fig. 12), each against an independent computation (fast: no figure is made)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from figures.paper import fade_fig4, fade_fig9, fade_fig12
from rlvr_theory import advantages
from simulations import linear_head as lh


# ------------------------------------------------------------------ fade_fig4
@pytest.mark.parametrize("name, params, G, want", [
    ("dr_grpo", {}, 8, 1 - 1 / 8),                    # one success among 8: A_s = 1 − 1/8
    ("asym_grpo", {"delta": 0.5}, 8, (7 / 8) / 0.5),  # one failure among 8: A_f = −(7/8)/δ
    ("asym_grpo", {"delta": 4.0}, 8, 7 / 8),          # failures shrunk: the success side wins
    ("maxrl", {}, 8, 7.0),                             # (1 − 1/8)/(1/8)
    ("rloo", {}, 8, 1.0),                              # leave-one-out baseline 0
    ("grpo", {}, 8, math.sqrt(7)),                     # (1 − 1/8)/sqrt((1/8)(7/8))
])
def test_max_abs_advantage_hand_values(name, params, G, want):
    assert fade_fig4.max_abs_advantage(advantages.get(name, **params), G) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("label, name, params", fade_fig4.ADVANTAGES)
def test_max_abs_advantage_is_the_max_over_every_reward_vector(label, name, params):
    """Brute force: all 2^G reward vectors of a group, the family applied to each."""
    G = 6
    adv = advantages.get(name, **params)
    r = np.array(list(itertools.product([0.0, 1.0], repeat=G)))
    brute = float(np.nanmax(np.abs(adv(r))))
    assert fade_fig4.max_abs_advantage(adv, G) == pytest.approx(brute, rel=1e-12), label


def test_equalised_lr_matches_the_reference_step_size():
    """App. 11.3: η_a·max|A_a| = η_ref·max|A_ref| for every advantage of the figure."""
    ref = 0.1 * (1 - 1 / fade_fig4.G)
    for _, name, params in fade_fig4.ADVANTAGES:
        adv = advantages.get(name, **params)
        lr = fade_fig4.equalised_lr(adv, fade_fig4.G, 0.1)
        assert lr * fade_fig4.max_abs_advantage(adv, fade_fig4.G) == pytest.approx(ref, rel=1e-12)
    assert fade_fig4.equalised_lr("maxrl", 8, 0.1) == pytest.approx(0.0125)   # 0.1·0.875/7


# ------------------------------------------------------------------ fade_fig9
def test_per_prompt_solve_rates_against_a_loop_and_the_simulator():
    kw = dict(M=6, K=3, correct="shared", init_scale=1.0)
    tr, final = lh.simulate_population(advantage="fade-entropy", seeds=2, steps=7, log_every=7, lr=0.3, **kw)
    W = final.attrs["weights"][3][1]
    got = fade_fig9.per_prompt_solve_rates(W, **kw)
    H, path_p, cm, _ = lh.population_setup(6, 3, correct="shared", init_scale=1.0)
    want = np.zeros((2, 6))
    for s in range(2):                      # plain loops: softmax of each (prompt, path)
        for m in range(6):
            for z in range(H.shape[1]):
                logits = W[s] @ H[m, z]
                e = np.exp(logits - logits.max())
                want[s, m] += path_p[m, z] * e[cm[m]] / e.sum()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    last = tr[tr.step == 7].sort_values("seed").solve_rate.to_numpy()
    np.testing.assert_allclose(got.mean(-1), last, rtol=1e-10)   # the simulator's exact solve rate


def test_pass_at_k_from_solve_rates():
    p = np.array([[0.5, 0.1], [0.0, 1.0]])
    np.testing.assert_allclose(fade_fig9.pass_at_k(p, 2), [(0.75 + 0.19) / 2, 0.5])
    np.testing.assert_allclose(fade_fig9.pass_at_k(p, 1), p.mean(-1))


# ------------------------------------------------------------------ fade_fig12
def test_curve_fits_recover_known_laws():
    k = fade_fig12.KS.astype(float)
    (C, b), mse = fade_fig12.fit_power_law_curve(k, 1 - 0.4 * k ** -0.7)
    assert (C, b) == pytest.approx((0.4, 0.7), rel=1e-6) and mse < 1e-20
    (c, beta), mse = fade_fig12.fit_exponential_law_curve(k, 1 - np.exp(-0.3 * k ** 0.5))
    assert (c, beta) == pytest.approx((0.3, 0.5), rel=1e-6) and mse < 1e-20


def test_curve_formulas_hand_values():
    assert fade_fig12.power_law_curve(4.0, 0.5, 0.5) == pytest.approx(0.75)
    assert fade_fig12.exponential_law_curve(4.0, 0.25, 1.0) == pytest.approx(1 - math.exp(-1))


@pytest.mark.parametrize("generator", fade_fig12.GENERATORS)
def test_synthetic_solve_rates_have_the_stated_components(generator):
    """Monte Carlo: the fraction below t is w·F_hard(t) + (1 − w)·F_easy(t), each CDF from the
    stated component laws (scipy), within 4 standard errors, at thresholds from 0.005 to 0.9."""
    from scipy import stats
    n, w = 200_000, 0.4
    p = fade_fig12.solve_rates(generator, w, n, np.random.default_rng(1))
    for t in (0.005, 0.05, 0.2, 0.5, 0.9):
        if generator == "beta":
            hard, easy = stats.beta(0.3, 8.0).cdf(t), stats.beta(3.0, 1.2).cdf(t)
        else:
            x = math.log(t / (1 - t))
            hard, easy = stats.norm(-4.5, 1.5).cdf(x), stats.norm(1.5, 1.2).cdf(x)
        want = w * hard + (1 - w) * easy
        assert abs(np.mean(p < t) - want) < 4 * math.sqrt(want * (1 - want) / n), t
    assert ((p > 0) & (p < 1)).all()
    with pytest.raises(ValueError, match="^generator must be one of"):
        fade_fig12.solve_rates("uniform", w, 3, np.random.default_rng(0))
