"""The advantage registry: definitions on concrete reward vectors, input checking, reward values."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_theory import advantages

CANONICAL = ["reinforce", "grpo", "dr_grpo", "rloo", "skew_r", "power_alpha", "power_alpha_easy",
             "asym_power_alpha", "asym_grpo", "maxrl", "passk_tang", "passk_chen", "passk_mix", "asymrl",
             "quantile", "mc_grpo", "binary_contrastive", "power_norm", "softmax", "logmeanexp", "relu",
             "w_reinforce", "t2t", "fgrpo", "agrae", "agrae_hard", "agrae_easy", "positive_dominant",
             "negative_dominant", "iac", "grpo_n", "fade", "reinforce_pp"]


def test_registry_has_every_canonical_name_with_metadata():
    assert set(CANONICAL) <= set(advantages.names())
    for name in CANONICAL:
        cls = advantages.registry()[name]
        assert cls.description and cls.source, name
        assert cls.kind in ("exact", "expectation", "asymptotic")


def test_asym_grpo_example():
    adv = advantages.get("asym_grpo", delta=0.5)
    out = adv(np.array([[1, 0, 0, 1, 0, 0, 0, 0]]))
    assert out.shape == (1, 8)
    np.testing.assert_allclose(out, [[0.75, -0.5, -0.5, 0.75, -0.5, -0.5, -0.5, -0.5]])


def test_definitions_on_a_concrete_group():
    r = np.array([1.0, 0, 0, 0])  # p̂ = 1/4
    s = np.sqrt(3) / 4  # population std
    np.testing.assert_allclose(advantages.get("grpo")(r), (r - 0.25) / s)
    np.testing.assert_allclose(advantages.get("grpo", ddof=1)(r), (r - 0.25) / np.std(r, ddof=1))
    np.testing.assert_allclose(advantages.get("rloo")(r), [1, -1 / 3, -1 / 3, -1 / 3])
    np.testing.assert_allclose(advantages.get("maxrl")(r), [3, -1, -1, -1])
    np.testing.assert_allclose(advantages.get("power_alpha", alpha=2)(r), (r - 0.25) * 0.75)
    np.testing.assert_allclose(advantages.get("binary_contrastive")(r), [1, -1 / 3, -1 / 3, -1 / 3])
    np.testing.assert_allclose(advantages.get("relu")(r), [0.75, 0, 0, 0])
    np.testing.assert_allclose(advantages.get("w_reinforce", lam=0.1)(r), [0.1, -1, -1, -1])
    np.testing.assert_allclose(advantages.get("quantile", tau=0.5)(r), [1, 0, 0, 0])
    np.testing.assert_allclose(advantages.get("quantile", tau=0.9)(r), [0, -1, -1, -1])
    np.testing.assert_allclose(advantages.get("grpo_n")(r), np.minimum((r - 0.25) / s, 0))
    np.testing.assert_allclose(advantages.get("iac", alpha=1)(r), np.where(r > 0, 3, 1) * (r - 0.25) / s)
    sm = np.exp(2 * r) / np.exp(2 * r).sum()
    np.testing.assert_allclose(advantages.get("softmax", beta=2)(r), sm - 0.25)
    np.testing.assert_allclose(advantages.get("fade", alpha=2, delta=0.5)(r), np.where(r > 0, 0.75, -0.5) * 0.75)


def test_groups_without_signal_give_zeros_not_nan():
    flat = np.array([[0.0] * 6, [1.0] * 6])
    for name in advantages.names():
        adv = advantages.get(name)
        kw = {"lengths": adv.default_lengths(flat)} if adv.uses_lengths else {}
        out = adv(flat, **kw)
        assert np.all(np.isfinite(out)), name
        if name not in ("reinforce", "w_reinforce"):
            np.testing.assert_array_equal(out, 0.0, err_msg=name)
    np.testing.assert_array_equal(advantages.get("reinforce")(flat), flat)
    np.testing.assert_array_equal(advantages.get("w_reinforce", lam=0.2)(flat), np.where(flat > 0, 0.2, -1.0))


@pytest.mark.parametrize("name", ["grpo", "maxrl", "passk_chen", "binary_contrastive", "fgrpo", "agrae_hard",
                                  "t2t", "w_reinforce", "iac", "reinforce_pp"])
def test_invariant_families_ignore_the_reward_values(name):
    rng = np.random.default_rng(1)
    s = rng.random((20, 8)) < 0.4
    a, b = advantages.get(name), advantages.get(name, reward_values=(-1, 1))
    kw = {"lengths": a.default_lengths(s.astype(float))} if a.uses_lengths else {}
    np.testing.assert_allclose(a(s.astype(float), **kw), b(np.where(s, 1.0, -1.0), **kw), atol=1e-12)


def test_dr_grpo_scales_with_the_reward_gap():
    r = np.array([1.0, 0, 1, 0, 0])
    np.testing.assert_allclose(advantages.get("dr_grpo", reward_values=(-1, 1))(2 * r - 1),
                               2 * advantages.get("dr_grpo")(r))


def test_bool_rewards_are_accepted_and_shape_is_kept():
    r = np.zeros((2, 3, 5), dtype=bool)
    r[..., 0] = True
    out = advantages.get("grpo")(r)
    assert out.shape == (2, 3, 5) and out.dtype == np.float64


@pytest.mark.parametrize("bad, match", [
    (np.array([[1.0, 0.5, 0]]), "rewards must be binary"),
    (np.array([[1.0, np.nan, 0]]), "rewards must contain only finite numbers"),
    (3.0, r"rewards must have at least 1 axis\(es\)"),
    ([["a", "b"]], "rewards must be a numeric array"),
])
def test_bad_rewards_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        advantages.get("grpo")(bad)


def test_bad_parameters_are_refused_with_their_name():
    with pytest.raises(ValueError, match="asym_grpo: delta must be a finite number > 0"):
        advantages.get("asym_grpo", delta=0)
    with pytest.raises(ValueError, match="unknown parameter"):
        advantages.get("grpo", delta=1)
    with pytest.raises(ValueError, match="passk_chen: k must be an integer >= 1"):
        advantages.get("passk_chen", k=2.5)
    with pytest.raises(ValueError, match="quantile: tau"):
        advantages.get("quantile", tau=0)
    with pytest.raises(ValueError, match="grpo: ddof must be one of 0, 1; got 2"):
        advantages.get("grpo", ddof=2)
    with pytest.raises(ValueError, match="grpo: ddof must be one of 0, 1; got True"):
        advantages.get("grpo", ddof=True)
    with pytest.raises(ValueError, match="reward_values"):
        advantages.get("grpo", reward_values=(1, 0))
    with pytest.raises(ValueError, match="^advantage: unknown advantage 'nope'; allowed: "):
        advantages.get("nope")
    with pytest.raises(ValueError, match="power_alpha: normalize must be one of True, False; got 'yes'"):
        advantages.get("power_alpha", normalize="yes")
    with pytest.raises(ValueError, match="power_alpha: normalize must be one of True, False; got 1"):
        advantages.get("power_alpha", normalize=1)  # a number is not a bool


def test_unknown_name_lists_the_names_sorted():
    with pytest.raises(ValueError) as err:
        advantages.get("nope")
    listed = str(err.value).split("allowed: ")[1].split(", ")
    assert listed == sorted(advantages.names())


def test_parameters_follow_the_checks_policy():
    """Integral floats and numpy scalars are accepted (and normalised), bool and NaN refused."""
    assert advantages.get("passk_chen", k=4.0).params["k"] == 4
    assert isinstance(advantages.get("passk_chen", k=np.int64(3)).params["k"], int)
    assert advantages.get("grpo", ddof=np.float64(1)).params["ddof"] == 1
    assert advantages.get("power_alpha", normalize=np.True_).params["normalize"] is True
    assert advantages.get("asym_grpo", delta=np.float32(0.5)).params["delta"] == 0.5
    with pytest.raises(ValueError, match="asym_grpo: delta must be a finite number > 0, got True"):
        advantages.get("asym_grpo", delta=True)
    with pytest.raises(ValueError, match="fgrpo: gamma must be a finite number >= 0, got nan"):
        advantages.get("fgrpo", gamma=float("nan"))
    with pytest.raises(ValueError, match=r"agrae: omega must be a finite number >= 0 and <= 1 \(or None\)"):
        advantages.get("agrae", omega=1.5)
    for bad in ((0, 1, 2), (1, 1), (0, float("inf")), "ab", (0, float("nan"))):
        with pytest.raises(ValueError, match="^reward_values must be a pair of finite numbers"):
            advantages.get("grpo", reward_values=bad)
    assert advantages.get("grpo", reward_values=np.array([-1, 1])).reward_values == (-1.0, 1.0)


def test_group_size_and_lengths_checks():
    with pytest.raises(ValueError, match=r"rewards: advantages.get\('passk_chen', k=4\) needs a group size G >= 4"):
        advantages.get("passk_chen", k=4)(np.array([1.0, 0, 0]))
    with pytest.raises(ValueError, match=r"rewards: advantages.get\('rloo'\) needs a group size G >= 2"):
        advantages.get("rloo")(np.array([1.0]))
    with pytest.raises(ValueError, match="lengths: t2t needs the response lengths"):
        advantages.get("t2t")(np.array([1.0, 0]))
    with pytest.raises(ValueError, match="lengths: grpo does not use response lengths"):
        advantages.get("grpo")(np.array([1.0, 0]), lengths=[1, 2])
    with pytest.raises(ValueError, match="lengths must contain only finite numbers >= 0"):
        advantages.get("t2t")(np.array([1.0, 0]), lengths=[-1, 2])


def test_closed_form_is_sympy_in_p():
    ms, mf = advantages.get("asym_grpo", delta=0.5).closed_form()
    assert str(ms) == "p*(1 - p)" and str(mf) == "2*p*(1 - p)"
    assert advantages.p in ms.free_symbols
    ms, _ = advantages.get("rloo").closed_form()
    assert advantages.G in ms.free_symbols


def test_with_params_and_equality():
    a = advantages.get("fade", alpha=2.0, delta=0.5)
    b = a.with_params(delta=0.7)
    assert b.params == {"alpha": 2.0, "delta": 0.7} and a.params["delta"] == 0.5
    assert a == advantages.get("fade", alpha=2, delta=0.5) and hash(a) == hash(advantages.get("fade", alpha=2, delta=0.5))
    assert "reward_values" in repr(a.with_params(reward_values=(-1, 1)))


class Halved(advantages.Advantage):
    """A family registered by a user, outside the package (also used by test_reliability)."""

    name = "test_halved_grpo"
    description = "GRPO times 1/2"
    source = "test"

    def _compute(self, g, lengths):
        return 0.5 * g.grpo()

    def _closed_form(self, k, d):
        import sympy

        m = sympy.sqrt(advantages.p * (1 - advantages.p)) / 2
        return m, m


def test_user_registered_family_works_everywhere():
    from rlvr_theory import masses

    with advantages.registered(Halved):
        adv = advantages.get("test_halved_grpo")
        assert "test_halved_grpo" in advantages.names()
        assert float(masses.closed_form(adv, 0.5).m_S) == pytest.approx(0.25)
        assert float(masses.exact(adv, 0.5, 4).m_S) == pytest.approx(0.5 * float(masses.exact("grpo", 0.5, 4).m_S))
    assert "test_halved_grpo" not in advantages.names()


def test_register_collisions_and_unregister():
    class Other(advantages.Advantage):
        name = "grpo"

    with pytest.raises(ValueError, match="advantage 'grpo' is already registered"):
        advantages.register(Other)
    assert advantages.get("grpo").__class__ is not Other
    advantages.register(advantages.registry()["grpo"])  # the same class again: no-op

    class Temp(advantages.Advantage):
        name = "test_temp"

    advantages.register(Temp)
    try:
        assert advantages.names()[-1] == "test_temp"
    finally:
        advantages.unregister("test_temp")
    assert "test_temp" not in advantages.registry()
    with pytest.raises(ValueError, match="^advantage: unknown advantage 'test_temp'"):
        advantages.unregister("test_temp")


def test_graded_call_real_valued_rewards_by_hand():
    r = np.array([[0.0, 0.5, 1.0, 0.5], [0.3, 0.3, 0.3, 0.3]])
    # first group by hand: mean 0.5, deviations c, population std sqrt(mean(c^2)) = sqrt(0.125)
    c = np.array([-0.5, 0.0, 0.5, 0.0])
    std = np.sqrt(0.125)
    np.testing.assert_allclose(advantages.get("dr_grpo").graded_call(r)[0], c, atol=1e-15)
    np.testing.assert_allclose(advantages.get("grpo").graded_call(r)[0], c / std, atol=1e-15)
    np.testing.assert_allclose(advantages.get("rloo").graded_call(r)[0], c * 4 / 3, atol=1e-15)
    np.testing.assert_allclose(advantages.get("grpo_n").graded_call(r)[0], np.minimum(c / std, 0), atol=1e-15)
    for name in ("dr_grpo", "grpo", "rloo", "grpo_n"):  # all-equal group: no signal
        assert np.all(advantages.get(name).graded_call(r)[1] == 0)
    # binary rewards: graded_call agrees with the binary definition
    b = np.array([[1.0, 0.0, 0.0, 1.0, 0.0]])
    np.testing.assert_allclose(advantages.get("grpo").graded_call(b), advantages.get("grpo")(b), atol=1e-15)
    with pytest.raises(ValueError, match="asym_grpo.*binary rewards only; graded rewards need one of "
                                         "reinforce, grpo, dr_grpo, rloo, grpo_n, reinforce_pp, grpo_batch, "
                                         "grpo_passk, opo, reinforce_pp_baseline, gpg$"):
        advantages.get("asym_grpo").graded_call(r)
    with pytest.raises(ValueError, match="rewards must contain only finite numbers"):
        advantages.get("grpo").graded_call([[0.0, np.nan]])
    with pytest.raises(ValueError, match="rewards must be a finite array"):
        advantages.get("grpo", ddof=1).graded_call([[0.5]])  # G = 1 < 2


# ------------------------------------------------------------ reinforce_pp
def test_reinforce_pp_by_hand():
    """Group-centred rewards divided by their population std over the whole batch."""
    r = np.array([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    c = np.array([[0.75, -0.25, -0.25, -0.25], [0.5, 0.5, -0.5, -0.5], [0, 0, 0, 0]])
    sigma = np.sqrt((0.75**2 + 3 * 0.25**2 + 4 * 0.5**2) / 12)  # the flat group counts (zeros)
    adv = advantages.get("reinforce_pp")
    assert adv.batch_level and adv.kind == "expectation"
    np.testing.assert_allclose(adv(r), c / sigma, rtol=1e-14)
    # every leading axis is the batch
    np.testing.assert_allclose(adv(r.reshape(3, 1, 4)), (c / sigma).reshape(3, 1, 4), rtol=1e-14)
    # a batch without signal: 0, not NaN
    np.testing.assert_array_equal(adv(np.ones((2, 4))), 0.0)
    with pytest.raises(ValueError, match="unknown parameter"):
        advantages.get("reinforce_pp", delta=1)


def test_reinforce_pp_is_the_linear_head_definition():
    """The formula the linear-head simulator used (Dr. GRPO advantages divided by their std over
    the batch of each configuration) gives the same numbers, configuration by configuration."""
    rng = np.random.default_rng(3)
    r = (rng.random((5, 16, 8)) < rng.random((5, 16, 1))).astype(float)  # [C, B, G]
    r[0, :3] = 1.0  # some groups without signal
    C = r.shape[0]
    A = advantages.get("dr_grpo")(r)
    sd = A.reshape(C, -1).std(-1)[:, None, None]
    expect = np.divide(A, sd, out=np.zeros_like(A), where=sd > 0)
    adv = advantages.get("reinforce_pp")
    np.testing.assert_array_equal(np.stack([adv(r[c]) for c in range(C)]), expect)


def test_reinforce_pp_monte_carlo_large_batch():
    """A large batch at solve rate p: σ_batch → Δ·sqrt(pq(G−1)/G) and the batch-mean masses →
    the closed form sqrt(pq(G−1)/G), for rewards {0, 1} and {−1, 1}."""
    from rlvr_theory import masses

    rng = np.random.default_rng(11)
    G, n = 8, 200_000
    for p, rv in ((0.3, (0.0, 1.0)), (0.8, (-1.0, 1.0))):
        s = rng.random((n, G)) < p
        r = np.where(s, rv[1], rv[0])
        adv = advantages.get("reinforce_pp", reward_values=rv)
        A = adv(r)
        c = r - r.mean(-1, keepdims=True)
        delta = rv[1] - rv[0]
        target = np.sqrt(p * (1 - p) * (G - 1) / G)
        assert c.std() / delta == pytest.approx(target, rel=5e-3)
        np.testing.assert_allclose(A, c / c.std(), rtol=1e-12, atol=1e-12)
        m = masses.of_group(adv, r)
        closed = masses.closed_form(adv, p, G)
        for sample, value in ((m.m_S, closed.m_S), (m.m_F, closed.m_F)):
            assert sample.mean() == pytest.approx(float(value), rel=5e-3)
        assert float(closed.m_S) == pytest.approx(target, rel=1e-14)
        assert float(masses.exact(adv, p, G).m_S) == pytest.approx(target, rel=1e-12)


def test_reinforce_pp_graded_rewards():
    r = np.array([[0.0, 0.5, 1.0, 0.5], [0.3, 0.3, 0.3, 0.3], [0.2, 0.0, 0.0, 0.2]])
    c = r - r.mean(-1, keepdims=True)
    c[1] = 0.0
    sigma = np.sqrt((c**2).mean())
    np.testing.assert_allclose(advantages.get("reinforce_pp").graded_call(r), c / sigma, rtol=1e-13, atol=1e-15)


def test_closed_form_keeps_named_parameters_symbolic():
    import sympy as sp

    adv = advantages.get("power_alpha", normalize=False, alpha=2)
    ms, mf = adv.closed_form(symbolic=("alpha",))
    a = sp.Symbol("alpha", positive=True)
    assert a in ms.free_symbols
    assert sp.simplify(ms.subs(a, 2) - adv.closed_form()[0]) == 0
    assert sp.simplify(mf.subs(a, 2) - adv.closed_form()[1]) == 0
    with pytest.raises(ValueError, match=r"^symbolic: power_alpha has no parameter\(s\) beta; allowed: alpha, normalize$"):
        adv.closed_form(symbolic=("beta",))
