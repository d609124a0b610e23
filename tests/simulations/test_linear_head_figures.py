"""Helpers of the linear-head figure modules checked against the simulator's own numbers (the
figures themselves are made by tests/figures/test_figures.py)."""

from __future__ import annotations

import numpy as np

from figures.paper import oversharpening_fig5ac as fig5ac
from simulations import linear_head as lh


def test_per_prompt_solve_rate_and_entropy_average_to_the_logged_ones():
    """fig5ac._per_prompt recomputes each prompt's exact solve rate and path-weighted entropy from
    the final heads; their mean over prompts is what the simulator logs for the same step."""
    tr, final = lh.simulate_population(M=fig5ac.M, K=fig5ac.K, G=4, seeds=3, steps=6, log_every=3, advantage="iac",
                                       optimizer="adamw", lr=0.05)
    W0, W = final.attrs["weights"][fig5ac.K]
    s, e = fig5ac._per_prompt(W)
    np.testing.assert_allclose(s.mean(1), final.solve_rate, rtol=1e-12)
    np.testing.assert_allclose(e.mean(1), final.entropy, rtol=1e-12)
    s0, e0 = fig5ac._per_prompt(W0[None])
    first = tr[tr.step == 0]
    np.testing.assert_allclose(np.repeat(s0.mean(), 3), first.solve_rate, rtol=1e-12)
    # the prompts run from hard to easy: the initial solve rate rises with g_m
    g = lh.population_setup(fig5ac.M, fig5ac.K)[1][:, 0]
    assert np.all(np.diff(g) > 0) and np.corrcoef(g, s0[0])[0, 1] > 0.9
