"""`rlvr-figures`: registry, files written, claims reproduced, bad input."""

from __future__ import annotations

import pandas as pd
import pytest

import figures
from figures import cli

EXPECTED = {"fade_fig2", "fade_table1", "fade_table7", "agrae_fig6", "fgrpo_fig3"}


def test_registry_lists_the_issue_figures():
    assert EXPECTED <= set(figures.names())


def test_make_all_writes_png_csv_and_passing_claims(tmp_path, capsys):
    assert cli.main(["make", "--all", "--out", str(tmp_path), "--quiet"]) == 0
    for name in figures.names():
        png, csv, claims = (tmp_path / f"{name}{s}" for s in (".png", ".csv", ".claims.csv"))
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        df = pd.read_csv(csv)
        assert len(df) > 0
        c = pd.read_csv(claims, keep_default_na=False)
        assert len(c) > 0 and (c.status != "fail").all(), c[c.status == "fail"]
        assert (c.passed | (c.note != "")).all()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers
    assert (tmp_path / "fade_table1.md").read_text().count("\n") == len(pd.read_csv(tmp_path / "fade_table1.csv")) + 2


def test_fig2_csv_holds_the_plotted_masses(tmp_path):
    figures.make("fade_fig2", tmp_path)
    df = pd.read_csv(tmp_path / "fade_fig2.csv")
    row = df[(df.advantage == "asym_grpo") & (df.params == "delta=0.5") & (df.p == 0.5)].iloc[0]
    assert row.m_S == pytest.approx(0.25) and row.m_F == pytest.approx(0.5)


def test_unknown_figure_is_refused_before_writing(tmp_path, capsys):
    assert cli.main(["make", "fade_fig2", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "unknown figure 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert cli.main(["make", "--out", str(tmp_path)]) == 2


def test_pdf_on_request(tmp_path):
    paths, _ = figures.make("agrae_fig6", tmp_path, pdf=True)
    assert (tmp_path / "agrae_fig6.pdf").read_bytes()[:4] == b"%PDF"
    assert len(paths) == 4
