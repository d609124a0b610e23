"""The trainer presets of README.md and docs/choosing_an_advantage.md (issue 30, item 7): each row's
flags, typed into ``rlvr-theory masses``, give the masses of that trainer's advantage formula.

The formulas are transcribed here from the installed trainers' source (verl 0.9.1
``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``: ``torch.std`` (unbiased, ddof 1),
``epsilon=1e-6``, ``norm_adv_by_std_in_grpo=False`` subtracts the mean only; TRL 1.16.0
``trl/trainer/grpo_trainer.py``: ``nanstd`` (Bessel-corrected, ddof 1), ``+ 1e-4``, ``scale_rewards``
``"group"``/``"batch"``/``"none"``), not from the registry.  Their expected masses are computed by
enumerating all 2^G reward vectors of a group, weighting each by its binomial probability.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from rlvr_theory import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "choosing_an_advantage.md"]
MARKER = "<!-- trainer presets: tests/rlvr_theory/test_trainer_presets.py -->"
G = 8


def _centred(r: np.ndarray) -> np.ndarray:
    return r - r.mean(axis=1, keepdims=True)


def _by_std(r: np.ndarray, std: np.ndarray, eps: float) -> np.ndarray:
    return _centred(r) / (std + eps)


# trainer setting (the first cell of a row) -> advantages of groups r [n, G] inside a large batch at
# solve rate p: only TRL "batch" reads the batch, whose std of the rewards tends to sqrt(p(1-p))
FORMULAS = {
    "verl `algorithm.adv_estimator=grpo` (default `norm_adv_by_std_in_grpo=True`)":
        lambda r, p: _by_std(r, r.std(axis=1, ddof=1, keepdims=True), 1e-6),
    "verl `grpo` with `norm_adv_by_std_in_grpo=False` (Dr. GRPO)": lambda r, p: _centred(r),
    "TRL `GRPOConfig` default (`scale_rewards=\"group\"`)":
        lambda r, p: _by_std(r, r.std(axis=1, ddof=1, keepdims=True), 1e-4),
    "TRL `scale_rewards=\"batch\"`": lambda r, p: _by_std(r, np.sqrt(p * (1 - p)), 1e-4),
    "TRL `scale_rewards=\"none\"` (Dr. GRPO)": lambda r, p: _centred(r),
    "the papers' GRPO (FADE App. 8.1)":
        lambda r, p: np.divide(_centred(r), r.std(axis=1, keepdims=True), out=np.zeros(r.shape),
                               where=r.std(axis=1, keepdims=True) > 0),
}
#: the rows whose plug-in value is one group's masses at p̂ = p (kind "exact"); TRL "batch" is an
#: expectation over the batch
GROUP_LEVEL = {k for k in FORMULAS if "batch" not in k}

ALL = np.array(list(itertools.product([0.0, 1.0], repeat=G)))


def _rows(path: Path) -> dict[str, str]:
    """The preset table after MARKER: trainer setting -> the flags (first backticked span of column 2)."""
    text = path.read_text(encoding="utf-8")
    assert MARKER in text, f"{path.name} has no trainer preset table"
    lines = text.split(MARKER, 1)[1].strip().splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        setting, flags = (c.strip() for c in line.strip("|").split("|")[:2])
        rows[setting] = re.search(r"`([^`]*)`", flags).group(1)
    return rows


def _expected(formula, p: float) -> tuple[float, float]:
    """E[M_S], E[M_F] over X ~ Binom(G, p) by enumeration: M_S = (1/G)Σ_S A_i, M_F = −(1/G)Σ_F A_i."""
    A = np.nan_to_num(formula(ALL, p))  # a flat group: 0/eps = 0 in the trainers (nan only without eps)
    x = ALL.sum(axis=1)
    w = p**x * (1 - p) ** (G - x)
    ms = (A * ALL).sum(axis=1) / G
    mf = -(A * (1 - ALL)).sum(axis=1) / G
    return float(w @ ms), float(w @ mf)


def _masses_cli(capsys, flags: str, p: float) -> dict:
    code = cli.main(["masses", *shlex.split(flags), "--p", repr(p), "--G", str(G), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_documented_preset_is_checked_and_both_documents_agree(doc):
    rows = _rows(doc)
    assert set(rows) == set(FORMULAS), set(rows) ^ set(FORMULAS)
    assert rows == _rows(DOCS[0])


@pytest.mark.parametrize("setting", sorted(FORMULAS))
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_documented_flags_give_the_trainers_masses(capsys, setting, p):
    flags = _rows(DOCS[0])[setting]
    out = _masses_cli(capsys, flags, p)
    want = _expected(FORMULAS[setting], p)
    # float64 sums over 256 vectors against the O(G) evaluation: agreement to ~1e-15, checked at 1e-12
    assert [out["exact"]["m_S"], out["exact"]["m_F"]] == pytest.approx(want, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("setting", sorted(GROUP_LEVEL))
def test_plug_in_is_one_group_at_p_hat_equal_p(capsys, setting):
    x = 3
    out = _masses_cli(capsys, _rows(DOCS[0])[setting], x / G)
    r = np.array([[1.0] * x + [0.0] * (G - x)])
    A = FORMULAS[setting](r, x / G)[0]
    want = (A[:x].sum() / G, -A[x:].sum() / G)
    assert [out["closed_form"]["m_S"], out["closed_form"]["m_F"]] == pytest.approx(want, rel=1e-12)


def test_trainers_grpo_is_six_and_a_half_percent_below_the_papers_at_G_8():
    verl = _expected(FORMULAS["verl `algorithm.adv_estimator=grpo` (default `norm_adv_by_std_in_grpo=True`)"], 0.3)
    paper = _expected(FORMULAS["the papers' GRPO (FADE App. 8.1)"], 0.3)
    shortfall = 1 - verl[0] / paper[0]
    assert round(100 * shortfall, 1) == 6.5  # sqrt(7/8) = 0.9354; eps = 1e-6 moves it by ~2e-6
    for doc in DOCS:
        assert "6.5 % smaller" in doc.read_text(encoding="utf-8")
