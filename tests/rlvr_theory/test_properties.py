"""Property tests (hypothesis) over random binary reward arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlvr_theory import advantages, masses

NAMES = advantages.names()


@st.composite
def reward_arrays(draw):
    batch = draw(st.lists(st.integers(1, 4), min_size=0, max_size=2))
    G = draw(st.integers(1, 12))
    bits = draw(hnp.arrays(np.bool_, tuple(batch) + (G,)))
    rv = draw(st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (0.0, 5.0)]))
    return np.where(bits, rv[1], rv[0]), rv


def _call(adv, r):
    kw = {"lengths": adv.default_lengths((r == adv.reward_values[1]).astype(float))} if adv.uses_lengths else {}
    return adv(r, **kw)


def _fits(adv, G):
    return G >= adv.min_group_size()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=reward_arrays(), name=st.sampled_from(NAMES))
def test_shape_kept_and_finite(data, name):
    r, rv = data
    adv = advantages.get(name, reward_values=rv)
    if not _fits(adv, r.shape[-1]):
        return
    out = _call(adv, r)
    assert out.shape == r.shape
    assert np.all(np.isfinite(out))
    m = masses.of_group(adv, r, lengths=None if not adv.uses_lengths else adv.default_lengths(
        (r == rv[1]).astype(float)))
    assert m.m_S.shape == r.shape[:-1] and np.all(np.isfinite(m.m_S)) and np.all(np.isfinite(m.m_F))


@settings(max_examples=60, deadline=None)
@given(data=reward_arrays(), name=st.sampled_from(NAMES))
def test_group_level_families_treat_groups_independently(data, name):
    r, rv = data
    adv = advantages.get(name, reward_values=rv)
    if adv.batch_level or not _fits(adv, r.shape[-1]):
        return
    flat = r.reshape(-1, r.shape[-1])
    whole = _call(adv, flat)
    one_by_one = np.concatenate([_call(adv, row[None]) for row in flat]) if len(flat) else whole
    np.testing.assert_array_equal(whole, one_by_one)


@settings(max_examples=60, deadline=None)
@given(data=reward_arrays(), name=st.sampled_from(NAMES), seed=st.integers(0, 2**32 - 1))
def test_permuting_a_group_permutes_its_advantages(data, name, seed):
    r, rv = data
    adv = advantages.get(name, reward_values=rv)
    if not _fits(adv, r.shape[-1]):
        return
    perm = np.random.default_rng(seed).permutation(r.shape[-1])
    np.testing.assert_allclose(_call(adv, r[..., perm]), _call(adv, r)[..., perm], rtol=1e-12, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(p=st.floats(0, 1), G=st.integers(1, 40), name=st.sampled_from(NAMES))
def test_exact_and_closed_form_are_finite(p, G, name):
    adv = advantages.get(name)
    if not _fits(adv, G):
        return
    for m in (masses.exact(adv, p, G), masses.closed_form(adv, p, G)):
        assert np.isfinite(m.m_S) and np.isfinite(m.m_F)
    assert not np.isnan(masses.advantage_ratio(adv, p, G))
    if adv.batch_level:  # its masses depend on the batch: no signal at any batch success rate
        never = not any(m.m_S or m.m_F for m in (masses.exact(adv, q, G) for q in (0.1, 0.5, 0.9)))
    else:
        per_x = masses.outcome_advantages(adv, G)
        never = not (per_x.m_S.any() or per_x.m_F.any())
    if never:  # e.g. G = 1 for a group-centred family: never any signal
        with pytest.raises(ValueError, match="^G: .* gives zero masses"):
            masses.advantage_ratio(adv, p, G, exact=True)
    else:
        assert not np.isnan(masses.advantage_ratio(adv, p, G, exact=True))


@pytest.mark.parametrize("name", ["agrae", "agrae_sample", "agrae_group"])
def test_a_batch_level_family_without_signal_at_g1_is_refused_not_nan(name):
    """Found by the property above: A-GRAE at G = 1 (every group advantage 0) gave a NaN ratio."""
    adv = advantages.get(name)
    with pytest.raises(ValueError, match="^G: .* gives zero masses for every group of size G = 1"):
        masses.advantage_ratio(adv, 0.3, 1, exact=True)
    assert np.isfinite(masses.advantage_ratio(adv, 0.3, 2, exact=True))
