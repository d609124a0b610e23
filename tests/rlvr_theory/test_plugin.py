"""``masses.plugin``: the plug-in masses without sympy (what ``rlvr-theory masses`` prints) equal the
closed forms (sympy, :func:`rlvr_theory.masses.closed_form`) for every family it evaluates itself,
and are the closed form itself for the others (issue 30, item 8)."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_theory import advantages, masses

#: solve rates off the grid x/G of every G below, inside (0, 1)
P = np.array([0.013, 0.1, 0.2999, 0.37, 0.5, 0.61, 0.77, 0.99])
VARIANTS = [advantages.get(n) for n in advantages.names()] + [
    advantages.get("grpo", ddof=1, eps=1e-6), advantages.get("grpo", ddof=1, eps=1e-4),
    advantages.get("asym_grpo", delta=0.5), advantages.get("power_alpha", alpha=3.0, normalize=True),
    advantages.get("maxrl", eps=1e-6), advantages.get("fgrpo", gamma=2.0),
    advantages.get("grpo", reward_values=(-1.0, 1.0)), advantages.get("reinforce", reward_values=(-1.0, 1.0)),
    advantages.get("asym_grpo", delta=2.0, reward_values=(0.0, 5.0)),
]


def _by_counts(adv: advantages.Advantage) -> bool:
    return adv.kind == "exact" and not adv.batch_level and adv.plugin_by_counts is not False and adv.is_compressible()


@pytest.mark.parametrize("adv", VARIANTS, ids=repr)
def test_plugin_equals_the_closed_form(adv):
    for G in (3, 8, 64):
        if G < adv.min_group_size():
            continue
        got, want = masses.plugin(adv, P, G), masses.closed_form(adv, P, G)
        # two float64 evaluations of one function (the definition at fractional counts, sympy's
        # lambdified formula): rounding only, a few ulps of the masses' scale
        scale = np.maximum(np.abs(want.m_S), np.abs(want.m_F)).max()
        np.testing.assert_allclose(got.m_S, want.m_S, rtol=1e-12, atol=1e-15 * scale, err_msg=f"{adv!r} G={G}")
        np.testing.assert_allclose(got.m_F, want.m_F, rtol=1e-12, atol=1e-15 * scale, err_msg=f"{adv!r} G={G}")


def test_most_families_are_evaluated_without_sympy_and_the_rest_fall_back(monkeypatch):
    by_counts = [a for a in VARIANTS if _by_counts(a)]
    assert len(by_counts) >= 30  # every group-level family of kind "exact" but the quantile ones
    calls = []
    real = masses.closed_form
    monkeypatch.setattr(masses, "closed_form", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    for adv in VARIANTS:
        masses.plugin(adv, 0.3, 8)
    assert {a for a in calls} == {a for a in VARIANTS if not _by_counts(a)}
    calls.clear()
    masses.plugin("grpo", [0.0, 0.5, 1.0], 8)  # the ends: the closed form's one-sided limits
    assert calls == [advantages.get("grpo")]


def test_quantile_is_kept_on_the_closed_form_because_counts_would_differ():
    """The flag is needed: at G = 3 the quantile of fractional counts jumps elsewhere."""
    adv = advantages.get("mc_grpo")
    assert adv.plugin_by_counts is False and not adv.is_plugin_by_counts()
    x = np.array([[0.37 * 3]])
    s = np.array([[1.0, 0.0]])
    g = adv._group(s, s, np.concatenate([x, 3 - x], axis=1), 3)
    A = adv._compute(g, None)
    assert 0.37 * A[0, 0] != pytest.approx(float(masses.closed_form(adv, 0.37, 3).m_S), abs=1e-3)


def test_plugin_refuses_bad_input_as_closed_form_does():
    with pytest.raises(ValueError, match="p must lie in"):
        masses.plugin("grpo", 1.5, 8)
    with pytest.raises(ValueError, match="G must be"):
        masses.plugin("grpo", 0.3, 0)


def test_a_family_registered_elsewhere_uses_the_closed_form_unless_it_opts_in():
    class Half(advantages.Advantage):
        name = "half_grpo_plugin_test"
        compressible = True

        def _compute(self, g, lengths):
            return 0.5 * g.grpo()

        def _closed_form(self, k, d):
            m = advantages.sp.sqrt(advantages.p * (1 - advantages.p)) / 2
            return m, m

    with advantages.registered(Half):
        assert not Half().is_plugin_by_counts()
        Half.plugin_by_counts = True
        assert Half().is_plugin_by_counts()
        assert float(masses.plugin(Half(), 0.3, 8).m_S) == pytest.approx(0.5 * 0.21**0.5, rel=1e-14)
