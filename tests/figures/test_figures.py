"""`rlvr-figures`: registry, files written, claims reproduced, bad input."""

from __future__ import annotations

import pandas as pd
import pytest

import figures
from figures import cli

EXPECTED = {"fade_fig2", "fade_table1", "fade_table7", "agrae_fig6", "fgrpo_fig3"}


def test_registry_lists_the_issue_figures():
    assert EXPECTED <= set(figures.names())


def test_check_all_writes_figures_claims_and_the_reproduction_table(tmp_path, capsys):
    doc = tmp_path / "doc" / "reproduction.md"
    assert cli.main(["check", "--out", str(tmp_path), "--doc", str(doc), "--quiet"]) == 0
    text = doc.read_text()
    n_claims = 0
    for name in figures.names():
        png, csv, claims = (tmp_path / f"{name}{s}" for s in (".png", ".csv", ".claims.csv"))
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        df = pd.read_csv(csv)
        assert len(df) > 0
        c = pd.read_csv(claims, keep_default_na=False)
        assert len(c) > 0 and (c.status != "fail").all(), c[c.status == "fail"]
        assert (c.passed | (c.note != "")).all()
        n_claims += len(c)
        for claim in c.claim:  # every claim of every figure is a row of the table
            assert claim.replace("|", "\\|") in text
    assert f"Summary: {n_claims} claims" in text and text.count("\n| ") == n_claims + 1
    assert f"{n_claims} claims:" in capsys.readouterr().out
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


def test_claim_status_and_check_exit_code(tmp_path, capsys):
    from figures.registry import Claim, FigureSpec, NOT_HERE, _REGISTRY, register

    assert Claim("c", "s", 1.0, 1.05, 0.1).status == "pass"
    assert Claim("c", "s", 1.0, 2.0, 0.1).status == "fail"
    assert Claim("c", "s", 1.0, 2.0, 0.1, note="misprint").status == "explained"
    assert Claim("c", "s", 0.40, float("nan"), 0.01, note="needs 7B runs").status == NOT_HERE
    assert Claim("c", "s", 0.40, float("nan"), 0.01).status == "fail"  # NaN without a reason
    spec = FigureSpec("zz_test_fail", "t", "s", lambda: pd.DataFrame({"x": [1.0, 2.0]}),
                      lambda df: __import__("matplotlib.pyplot").pyplot.figure(),
                      lambda df: [Claim("one equals two", "nowhere", 1.0, 2.0, 0.0),
                                  Claim("7B only", "000 Sec. 5", 0.4, float("nan"), 0.0, note="needs 7B runs")],
                      full_data=lambda: pd.DataFrame({"x": [3.0]}))
    register(spec)
    try:
        doc = tmp_path / "r.md"
        assert cli.main(["check", "zz_test_fail", "--out", str(tmp_path), "--doc", str(doc), "--quiet"]) == 1
        text = doc.read_text()
        assert "| zz_test_fail | one equals two | nowhere | 1 | 2 | 0 | fail |" in text
        assert "| 7B only | 000 Sec. 5 | 0.4 | — | 0 | not reproducible here | needs 7B runs |" in text
        assert "1 fail" in capsys.readouterr().out
        assert cli.main(["make", "zz_test_fail", "--full", "--out", str(tmp_path), "--quiet"]) == 0
        assert pd.read_csv(tmp_path / "zz_test_fail.csv").x.tolist() == [3.0]  # --full used full_data
        assert cli.main(["check", "nope", "--out", str(tmp_path), "--doc", str(doc)]) == 2
    finally:
        del _REGISTRY["zz_test_fail"]
