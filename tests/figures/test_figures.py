"""`rlvr-figures`: registry, files written, claims reproduced, bad input, reproducible table."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import figures
from figures import cli, registry
from rlvr_plumbing.serialize import fmt_number
from tests.figures.test_paper_marks import unmarked_claims

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "reproduction.md"

EXPECTED = {"fade_fig2", "fade_table1", "fade_table7", "agrae_fig6", "fgrpo_fig3"}


def assert_same_claims_at_tolerance(committed: pd.DataFrame, now: pd.DataFrame) -> None:
    """Two parsed claims tables say the same: the same claims with the same statuses, notes equal
    up to one unit in the last printed place of the numbers they quote, and every number within
    the claim's tolerance plus half the rounding step of each shown number (a claim computed on
    another machine may move by machine noise, never by its tolerance)."""
    assert len(now) == len(committed)
    for a, b in zip(committed.itertuples(), now.itertuples()):
        where = f"{b.figure}: {b.claim}"
        assert (a.figure, a.claim, a.source, a.status, a.tol) == (b.figure, b.claim, b.source, b.status, b.tol), where
        assert registry.same_at_shown_precision(a.note, b.note), (where, a.note, b.note)
        for col in ("paper", "ours"):
            x, y = getattr(a, col), getattr(b, col)
            if math.isnan(x) or math.isnan(y):
                assert math.isnan(x) and math.isnan(y), (where, col, x, y)
                continue
            shown = (registry._display_step(x, b.tol) + registry._display_step(y, b.tol)) / 2
            assert abs(x - y) <= (b.tol + shown) * (1 + 1e-9), (where, col, x, y)


def test_registry_lists_the_core_figures():
    assert EXPECTED <= set(figures.names())


def test_core_figures_say_what_the_committed_table_says(tmp_path):
    """The fast suite's share of `make figures`: the core figures, made now, against their rows of
    docs/reproduction.md at each claim's tolerance (the whole table: the slow test below)."""
    names = sorted(EXPECTED)
    table = registry.check(names, tmp_path)
    committed = registry.parse_reproduction_markdown(COMMITTED.read_text())
    committed = committed[committed.figure.isin(names)].reset_index(drop=True)
    order = {n: i for i, n in enumerate(committed.figure.drop_duplicates())}
    table = table.sort_values("figure", key=lambda f: f.map(order), kind="stable").reset_index(drop=True)
    assert set(committed.figure) == set(names)
    assert_same_claims_at_tolerance(committed, table.assign(tol=[float(fmt_number(t)) for t in table.tol]))


@pytest.mark.slow  # makes all 32 figures (`make figures`): about 3.5 minutes on 2 cores
def test_check_all_writes_figures_claims_and_keeps_the_committed_table(tmp_path, capsys):
    """`make figures` (= `rlvr-figures check`) on a clean checkout says what docs/reproduction.md
    says, claim by claim at each claim's tolerance (the committed table was computed on another
    machine: a claim may move by machine noise, never by more than its tolerance, and never
    change its status); where nothing moved beyond tol/10 the file is left as it is."""
    doc = tmp_path / "doc" / "reproduction.md"
    doc.parent.mkdir()
    doc.write_bytes(COMMITTED.read_bytes())
    assert cli.main(["check", "--out", str(tmp_path), "--doc", str(doc), "--quiet"]) == 0
    text = doc.read_text()
    assert_same_claims_at_tolerance(registry.parse_reproduction_markdown(COMMITTED.read_text()),
                                    registry.parse_reproduction_markdown(text))
    n_claims, frames = 0, []
    for name in figures.names():
        png, csv, claims = (tmp_path / f"{name}{s}" for s in (".png", ".csv", ".claims.csv"))
        assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        df = pd.read_csv(csv)
        assert len(df) > 0
        c = pd.read_csv(claims, keep_default_na=False)
        assert len(c) > 0 and (c.status != "fail").all(), c[c.status == "fail"]
        assert (c.passed | (c.note != "")).all()
        n_claims += len(c)
        assert unmarked_claims(tmp_path, name) == [], f"{name}: paper numbers not drawn on the figure"
        for claim in c.claim:  # every claim of every figure is a row of the table
            assert claim.replace("|", "\\|") in text
        frames.append(c.assign(figure=name, **{k: pd.to_numeric(c[k], errors="coerce") for k in ("paper", "ours")}))
    assert f"Summary: {n_claims} claims" in text and text.count("\n| ") == n_claims + 1
    assert len(pd.read_csv(tmp_path / "claims.csv")) == n_claims  # the full table, beside the figures
    assert len((tmp_path / "claims.txt").read_text().splitlines()) == n_claims + 1
    out = capsys.readouterr().out
    assert f"{n_claims} claims:" in out and ("unchanged" in out) == (doc.read_bytes() == COMMITTED.read_bytes())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers
    assert (tmp_path / "fade_table1.md").read_text().count("\n") == len(pd.read_csv(tmp_path / "fade_table1.csv")) + 2
    # the file as left is this machine's claims at the precision of each claim
    regenerated = registry.reproduction_markdown(pd.concat(frames, ignore_index=True))
    assert regenerated.split("\nSummary:")[0] == text.split("\nSummary:")[0]
    assert registry.same_at_claim_precision(registry.parse_reproduction_markdown(text),
                                            registry.parse_reproduction_markdown(regenerated))


def test_fig2_csv_holds_the_plotted_masses(tmp_path):
    figures.make("fade_fig2", tmp_path)
    df = pd.read_csv(tmp_path / "fade_fig2.csv")
    row = df[(df.advantage == "asym_grpo") & (df.params == "delta=0.5") & (df.p == 0.5)].iloc[0]
    assert row.m_S == pytest.approx(0.25) and row.m_F == pytest.approx(0.5)


def test_unknown_figure_is_refused_before_writing(tmp_path, capsys):
    assert cli.main(["make", "fade_fig2", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr-figures: error: NAME: unknown figure 'nope'; allowed: ") and "fade_fig2" in err
    assert not (tmp_path / "o").exists()
    assert cli.main(["make", "--out", str(tmp_path)]) == 2
    assert "give figure NAMEs or --all" in capsys.readouterr().err
    assert cli.main(["make", "fade_fig2", "--threads", "0", "--out", str(tmp_path / "o")]) == 2
    assert "--threads must be" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_pdf_on_request(tmp_path):
    paths, _ = figures.make("agrae_fig6", tmp_path, pdf=True)
    assert (tmp_path / "agrae_fig6.pdf").read_bytes()[:4] == b"%PDF"
    assert len(paths) == 4


def test_claim_status_and_check_exit_code(tmp_path, capsys):
    from figures.registry import NOT_HERE, Claim, FigureSpec

    assert Claim("c", "s", 1.0, 1.05, 0.1).status == "pass"
    assert Claim("c", "s", 1.0, 2.0, 0.1).status == "fail"
    assert Claim("c", "s", 1.0, 2.0, 0.1, note="misprint").status == "explained"
    assert Claim("c", "s", 0.40, float("nan"), 0.01, note="needs 7B runs").status == NOT_HERE
    assert Claim("c", "s", 0.40, float("nan"), 0.01).status == "fail"  # NaN without a reason
    spec = FigureSpec("zz_test_fail", "t", "s", lambda: pd.DataFrame({"x": [1.0, 2.0]}),
                      lambda df: __import__("matplotlib.pyplot").pyplot.figure(),
                      lambda df: [Claim("one equals two", "nowhere", 1.0, 2.0, 0.0),
                                  Claim("7B only", "FADE Sec. 5", 0.4, float("nan"), 0.0, note="needs 7B runs")],
                      full_data=lambda: pd.DataFrame({"x": [3.0]}))
    with figures.registered(spec):
        assert "zz_test_fail" in figures.names()
        with pytest.raises(ValueError, match="already registered"):
            figures.register(FigureSpec("zz_test_fail", "t", "s", spec.data, spec.plot))
        doc = tmp_path / "r.md"
        assert cli.main(["check", "zz_test_fail", "--out", str(tmp_path), "--doc", str(doc), "--quiet"]) == 1
        text = doc.read_text()
        assert "| zz_test_fail | one equals two | nowhere | 1 | 2 | 0 | fail |" in text
        assert "| 7B only | FADE Sec. 5 | 0.4 | — | 0 | not reproducible here | needs 7B runs |" in text
        assert "1 fail" in capsys.readouterr().out
        assert cli.main(["make", "zz_test_fail", "--full", "--out", str(tmp_path), "--quiet"]) == 0
        assert pd.read_csv(tmp_path / "zz_test_fail.csv").x.tolist() == [3.0]  # --full used full_data
        assert cli.main(["check", "nope", "--out", str(tmp_path), "--doc", str(doc)]) == 2
    assert "zz_test_fail" not in figures.names()
    with pytest.raises(ValueError, match="NAME: unknown figure 'zz_test_fail'"):
        figures.unregister("zz_test_fail")


def test_check_prints_a_summary_the_failures_and_where_the_table_went(tmp_path, capsys):
    """`make figures` (= `rlvr-figures check`) prints one summary line, each failed claim in full
    and where the full table went (OUT/claims.txt, OUT/claims.csv), not the table itself;
    `--verbose` adds a line per figure and the table."""
    from figures.registry import Claim, FigureSpec

    long = "a claim whose text is longer than the sixty characters the table cuts it to, " * 2
    spec = FigureSpec("zz_test_summary", "t", "s", lambda: pd.DataFrame({"x": [1.0]}),
                      lambda df: __import__("matplotlib.pyplot").pyplot.figure(),
                      lambda df: [Claim("holds", "FADE Sec. 1", 1.0, 1.0, 0.0), Claim(long, "FADE Sec. 2", 1.0, 2.0, 0.1),
                                  Claim("misprint", "FADE Sec. 3", 1.0, 2.0, 0.1, note="shown by derivation")])
    out, doc = tmp_path / "figs", tmp_path / "r.md"
    with figures.registered(spec):
        assert cli.main(["check", "zz_test_summary", "--out", str(out), "--doc", str(doc)]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 3, lines
        assert lines[0].startswith("1 figure made in ") and lines[0].endswith(
            "; 3 claims: 1 pass, 0 depends, 1 explained, 0 underpowered, 0 not reproducible here, 1 fail")
        assert lines[1] == f"  FAIL zz_test_summary: {long} (FADE Sec. 2): paper 1, ours 2, tol 0.1"  # in full
        assert lines[2] == f"full table: {out / 'claims.txt'} (and claims.csv, with notes); {doc} written"
        table = pd.read_csv(out / "claims.csv", keep_default_na=False)
        assert table.claim.tolist() == ["holds", long, "misprint"] and table.note.tolist()[2] == "shown by derivation"
        assert table.status.tolist() == ["pass", "fail", "explained"]
        text = (out / "claims.txt").read_text()
        assert text.splitlines()[0].split() == ["figure", "claim", "paper", "ours", "status"] and len(text.splitlines()) == 4
        assert cli.main(["check", "zz_test_summary", "--out", str(out), "--doc", str(doc), "--verbose"]) == 1
        verbose = capsys.readouterr().out
        assert verbose.startswith("making zz_test_summary ...\n" + text)
        assert verbose.splitlines()[-1].startswith(f"full table: {out / 'claims.txt'}")
        assert cli.main(["check", "zz_test_summary", "--out", str(out), "--doc", str(doc), "--quiet"]) == 1
        assert len(capsys.readouterr().out.splitlines()) == 2  # no failures listed


def test_claim_numbers_are_rounded_to_the_precision_of_their_claim():
    cn = registry.claim_number
    # rounded to the largest power of ten <= tol/10: error <= tol/20
    assert cn(0.630082, 0.005) == cn(0.630061, 0.005) == "0.6301"
    assert cn(0.000465274, 5e-6) == "0.0004653" and cn(0.999935, 0.02) == cn(0.999955, 0.02) == "1"
    assert cn(2.54436e-07, 1e-6) == cn(2.84865e-07, 1e-6) == "3e-07"
    assert cn(9.8242e-19, 1e-12) == cn(-2.2e-16, 1e-12) == cn(-2.22045e-16, 0.15) == "0"  # not "-0"
    assert cn(70.3, 0.5) == "70.3" and cn(1.3937, 0.005) == "1.3937" and cn(-0.873079, 0.3) == "-0.87"
    assert cn(0.7367619, 1e-10) == "0.736762" and cn(8.0, 1e-12) == "8"  # at most 6 significant digits
    assert cn(0.875, 0.0) == "0.875" and cn(1 / 3, 0.0) == "0.333333"  # exact claims: 6 digits
    assert cn(float("nan"), 0.01) == "—"
    for x, tol in [(0.630082, 0.005), (0.404244, 0.02), (1.19623, 0.01), (3.2e-7, 1e-6), (15.0, 0.5)]:
        shown = float(cn(x, tol))
        assert abs(shown - x) <= tol / 20 + 1e-15


def test_committed_reproduction_table_is_its_own_rendering_and_stable_below_its_precision():
    """The committed table is what `reproduction_markdown` writes for the numbers it shows, and
    any change of a number by less than half its rounding step (>= tol/200) writes the same bytes."""
    text = COMMITTED.read_text()
    table = registry.parse_reproduction_markdown(text)
    assert len(table) > 100 and f"Summary: {len(table)} claims" in text
    assert "(figures.md#gallery)" in registry.reproduction_markdown(table)   # links the gallery
    assert registry.ROUNDING_RULE in text
    assert registry.reproduction_markdown(table) == text
    for sign in (1, -1):
        moved = table.copy()
        for col in ("paper", "ours"):
            step = [10.0 ** (math.floor(math.log10(t) + 1e-9) - 1) if t > 0 else 0.0 for t in table.tol]
            moved[col] = [v + sign * 0.45 * s if s > 0 else v for v, s in zip(table[col], step)]
        assert registry.reproduction_markdown(moved) == text


def test_the_table_file_is_rewritten_only_when_a_claim_changes_beyond_its_precision(tmp_path):
    row = {"figure": "f", "claim": "c", "source": "FADE Sec. 1", "paper": 0.63, "ours": 0.630051, "tol": 0.005,
           "status": "pass", "note": ""}
    table = pd.DataFrame([row])
    doc = tmp_path / "r.md"
    assert registry.write_reproduction(doc, table) is True
    before = doc.read_bytes()
    assert "| 0.63 | 0.6301 | 0.005 |" in doc.read_text()  # 0.630051 rounds up
    # machine noise moves `ours` across the rounding boundary, by less than tol/10: file untouched
    assert registry.write_reproduction(doc, table.assign(ours=[0.629949])) is False
    assert doc.read_bytes() == before
    # a change beyond tol/10, a new status or a new claim text is written
    assert registry.write_reproduction(doc, table.assign(ours=[0.6292])) is True
    assert "| 0.6292 |" in doc.read_text()
    assert registry.write_reproduction(doc, table.assign(ours=[0.6292], claim=["c2"])) is True
    assert registry.write_reproduction(doc, table.assign(ours=[0.6292], claim=["c2"], status=["fail"])) is True
    assert "1 fail" in doc.read_text()
    # tol = 0 claims compare as shown; NaN only equals NaN
    exact = pd.DataFrame([{**row, "ours": 1.0, "tol": 0.0, "paper": 1.0}])
    assert registry.write_reproduction(doc, exact) is True
    assert registry.write_reproduction(doc, exact.assign(ours=[1.0 + 1e-12])) is False
    assert registry.write_reproduction(doc, exact.assign(ours=[0.875])) is True
    assert registry.write_reproduction(doc, exact.assign(ours=[float("nan")], status=["fail"])) is True
    assert registry.write_reproduction(doc, exact.assign(ours=[float("nan")], status=["fail"])) is False
