"""simulations.toys.persian_grid: the Over-Sharpening toy over a grid of settings in one batch.

Expected values come from the independent engine simulations.linear_head.simulate_toy (its own
vectorisation, one call per setting) and from a literal, loop-based reading of Over-Sharpening
Alg. 1 lines 10-18 — never from persian_grid itself."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from simulations import linear_head as lh
from simulations import toys
from simulations.toys import _persian_advantages

COLS = ["p_cat", "p_persian", "winner_share", "entropy", "siamese_acc"]
NAMES = {"raw": "reinforce", "centred": "dr_grpo", "normalised": "grpo"}


def _reference(row: dict, G: int, seeds: int, steps: int, log_every: int) -> pd.DataFrame:
    adv = "iac" if row.get("alpha", 0.0) == 1.0 else NAMES[row["base"]]
    tr, _ = lh.simulate_toy(G=G, seeds=seeds, steps=steps, log_every=log_every, advantage=adv,
                            optimizer=row.get("optimizer", "sgd"), reduction=row.get("reduction", "sum"),
                            lr=row.get("lr", 0.1), mu=row.get("mu", 0.0),
                            memory_lr=row.get("memory_lr") if row.get("mu", 0.0) > 0 else None)
    return tr


@pytest.mark.parametrize("G", [4, 16])
def test_matches_simulate_toy_at_every_shared_setting(G):
    rows = [dict(base=b, optimizer=o, reduction=r, lr=lr) for b, o, r, lr in
            itertools.product(NAMES, ("sgd", "momentum", "adamw"), ("sum", "mean"), (0.03, 0.3))]
    rows += [dict(base="normalised", alpha=1.0, optimizer="adamw"),
             dict(base="normalised", alpha=1.0, optimizer="sgd", mu=0.5),
             dict(base="raw", optimizer="adamw", mu=0.5, memory_lr=1.0)]
    grid = pd.DataFrame(rows)
    tr = toys.persian_grid(grid, G=G, seeds=3, steps=60, log_every=20)
    assert len(tr) == len(rows) * 3 * 4
    for i, row in enumerate(rows):
        row = {k: v for k, v in row.items() if not (isinstance(v, float) and np.isnan(v))}
        ref = _reference(row, G, 3, 60, 20)
        mine = tr[tr.config == i]
        assert mine.step.tolist() == ref.step.tolist() and mine.seed.tolist() == ref.seed.tolist()
        # the two engines sum the same terms in a different order; AdamW's normalisation can amplify
        # that last-bit difference over the steps, far below 1e-8
        np.testing.assert_allclose(mine[COLS].to_numpy(), ref[COLS].to_numpy(), rtol=0, atol=1e-8, err_msg=str(row))


def _alg1(r: np.ndarray, base: str, alpha: float) -> np.ndarray:
    """Over-Sharpening Alg. 1 lines 10-18 for one group, with loops: base advantages, S+ = {A > 0},
    positives times (G - |S+|)^alpha, negatives unchanged."""
    G = len(r)
    mean = sum(r) / G
    std = (sum((x - mean) ** 2 for x in r) / G) ** 0.5
    A = []
    for x in r:
        if base == "raw":
            A.append(float(x))
        elif base == "centred":
            A.append(x - mean)
        else:
            A.append((x - mean) / std if std > 0 else 0.0)
    n_pos = sum(a > 0 for a in A)
    return np.array([a * (G - n_pos) ** alpha if a > 0 else a for a in A])


@pytest.mark.parametrize(("G", "base", "alpha"), list(itertools.product((1, 4, 7), toys.PERSIAN_BASES, (0.0, 0.5, 1.0, 2.0))))
def test_advantages_follow_algorithm_1(G, base, alpha):
    X = np.arange(G + 1)
    a_s, a_f = _persian_advantages(X.astype(float), G, np.full(G + 1, base), np.full(G + 1, alpha))
    for x in X:
        want = _alg1(np.r_[np.ones(x), np.zeros(G - x)], base, alpha)
        got = np.r_[np.full(x, a_s[x]), np.full(G - x, a_f[x])]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)  # float64, a few operations


def test_raw_iac_silences_all_correct_groups_and_no_nan():
    a_s, a_f = _persian_advantages(np.array([4.0, 0.0]), 4, np.array(["raw", "normalised"]), np.array([1.0, 1.0]))
    assert a_s.tolist() == [0.0, 0.0] and a_f.tolist() == [0.0, 0.0]  # all correct: (G - G)^1 = 0; none correct


@pytest.mark.parametrize(("grid", "match"), [
    ({"alpha": [1.0]}, "needs a 'base' column"),
    ({"base": ["raw"], "beta": [0.9]}, r"unknown columns \['beta'\]"),
    ({"base": ["gaussian"]}, r"grid column 'base': \['gaussian'\] not allowed; allowed: raw, centred, normalised"),
    ({"base": ["raw"], "optimizer": ["adam"]}, r"'optimizer': \['adam'\] not allowed; allowed: sgd, momentum, adamw"),
    ({"base": ["raw"], "reduction": ["max"]}, r"'reduction'.*allowed: sum, mean"),
    ({"base": ["raw"], "lr": [0.0]}, r"grid column 'lr': 0.0 not allowed; allowed: a finite number > 0"),
    ({"base": ["raw"], "momentum": [1.0]}, r"'momentum'.*in \[0, 1\)"),
    ({"base": ["raw"], "alpha": [-1.0]}, r"'alpha'.*>= 0"),
])
def test_bad_grid_is_refused_naming_the_column(grid, match):
    with pytest.raises(ValueError, match=match):
        toys.persian_grid(pd.DataFrame(grid), G=4, seeds=1, steps=2)


def test_bad_arguments_and_divergence_are_refused():
    with pytest.raises(ValueError, match="G"):
        toys.persian_grid({"base": ["raw"]}, G=0)
    with pytest.raises(ValueError, match="similarity"):
        toys.persian_grid({"base": ["raw"]}, G=4, similarity="Tabby")
    with pytest.raises(ValueError, match=r"non-finite weights at step \d+ in grid rows \[1\]; lower their lr"):
        toys.persian_grid({"base": ["raw", "raw"], "lr": [0.1, 1e308], "optimizer": "momentum"}, G=64, seeds=1,
                          steps=50)
