"""Every number a figure's claims take from a paper is drawn on the figure (a paper mark).

``figures.registry.make`` writes the numbers the paper marks show into the PNG's metadata
(``Paper marks``); each claim of ``NAME.claims.csv`` with a paper value must match one of them
(within the claim's tolerance, or to 1e-9 relative).  The check reads the written files, so a
figure cannot silently lose its marks.  The whole-registry check runs inside
``tests/figures/test_figures.py`` (which makes every figure once); here: the mechanism.
"""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import pytest
from PIL import Image

import figures
from figures.paper import _style


def unmarked_claims(out_dir, name: str) -> list[str]:
    """The claims of figure ``name`` in ``out_dir`` whose paper value no paper mark shows."""
    marks = json.loads(Image.open(os.path.join(out_dir, f"{name}.png")).text.get("Paper marks", "[]"))
    c = pd.read_csv(os.path.join(out_dir, f"{name}.claims.csv"), keep_default_na=False)
    missing = []
    for row in c.itertuples():
        paper = pd.to_numeric(row.paper, errors="coerce")
        if not math.isfinite(paper):
            continue
        tol = float(row.tol) if row.tol != "" else 0.0
        if not any(abs(v - paper) <= tol or math.isclose(v, paper, rel_tol=1e-9, abs_tol=1e-12) for v in marks):
            missing.append(f"{row.claim} (paper {paper:g})")
    return missing


def test_marks_are_recorded_in_the_png_and_matched_to_claims(tmp_path):
    fig, axes = _style.subplots(2)
    axes[0].plot([0, 1], [0, 1], label="ours")
    _style.paper_hline(axes[0], 0.25)
    _style.paper_point(axes[1], 0.5, 0.3, values=[0.5, 0.3])
    _style.paper_band(axes[1], 0.3, 0.5, start=0.5, stop=1.0)
    _style.paper_note(axes[0], "paper: ratio 2", [2.0])
    assert sorted(_style.paper_values(fig)) == [0.25, 0.3, 0.3, 0.5, 0.5, 2.0]
    assert axes[0].get_legend_handles_labels()[1].count("paper") == 1
    spec = figures.registry.FigureSpec(
        "marks_demo", "demo", "none", lambda: pd.DataFrame({"x": [1]}), lambda df: fig,
        lambda df: [figures.Claim("drawn", "s", 0.25, 0.25, 0.0), figures.Claim("drawn, tol", "s", 2.05, 2.0, 0.1),
                    figures.Claim("not drawn", "s", 7.0, 7.0, 0.0),
                    figures.Claim("no paper value", "s", float("nan"), 1.0, 0.0, note="x")])
    with figures.registry.registered(spec):
        figures.make("marks_demo", tmp_path)
    assert unmarked_claims(tmp_path, "marks_demo") == ["not drawn (paper 7)"]
    with pytest.raises(ValueError, match="axis must be 'x' or 'y'"):
        _style.paper_band(axes[0], 0, 1, axis="z")
