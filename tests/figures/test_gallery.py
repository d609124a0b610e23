"""docs/figures.md's gallery: the committed text is what `rlvr-figures gallery` writes from the
registry and the committed docs/reproduction.md, and every figure has its thumbnail."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

import figures
from figures import cli, guide, registry

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "figures.md"
REPRODUCTION = ROOT / "docs" / "reproduction.md"
THUMBS = ROOT / "docs" / "gallery"


def test_committed_gallery_is_what_the_generator_writes():
    text = DOC.read_text(encoding="utf-8")
    body = guide.gallery_markdown(REPRODUCTION.read_text(encoding="utf-8"))
    assert guide.replace_generated(text, guide.GALLERY_MARKER, body) == text, \
        "docs/figures.md is stale: run `rlvr-figures gallery --no-thumbnails` (or with --figures DIR)"


def test_every_figure_has_a_section_a_thumbnail_and_its_claims():
    text = DOC.read_text(encoding="utf-8")
    claims = registry.parse_reproduction_markdown(REPRODUCTION.read_text(encoding="utf-8"))
    for name in figures.names():
        assert f"### {name}\n" in text and f"(gallery/{name}.png)" in text, name
        path = THUMBS / f"{name}.png"
        assert path.is_file(), f"{path} missing: run `rlvr-figures gallery --figures DIR`"
        with Image.open(path) as im:
            assert im.format == "PNG" and 100 < im.width <= guide.THUMB_WIDTH, (name, im.size)
        assert path.stat().st_size < 250_000, name
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        assert f"**{figures.get(name).title.replace('|', chr(92) + '|')}**" in section
        for r in claims[claims.figure == name].itertuples():
            assert f"**{r.status}** {r.claim}" in section, (name, r.claim)
        assert guide.figure_description(name)
    assert not sorted(p.stem for p in THUMBS.glob("*.png") if p.stem not in figures.names())  # no orphans


def test_gallery_counts_statuses_per_figure():
    table = "\n".join(["| figure | claim | source | paper | ours | tol | status | note |", "|---|",
                       "| agrae_fig6 | one | A-GRAE Fig. 6 | 8 | 8 | 0 | pass |  |",
                       "| agrae_fig6 | two \\| three | A-GRAE Fig. 6 | 0.4 | — | 0.1 | not reproducible here | 7B |",
                       "| fade_fig2 | four | FADE Fig. 2 | 1 | 2 | 0 | explained | misprint |"])
    body = guide.gallery_markdown(table)
    agrae = body.split("### agrae_fig6\n", 1)[1].split("\n### ", 1)[0]
    assert "Claims (2: 1 pass, 1 not reproducible here):" in agrae
    assert "- **not reproducible here** two | three (A-GRAE Fig. 6): paper 0.4, ours — — 7B" in agrae
    assert "3 claims — 1 pass, 0 depends, 1 explained, 0 underpowered, 1 not reproducible here, 0 fail." in body
    assert "no claims in reproduction.md yet" in body.split("### agrae_thm1_behaviour\n", 1)[1].split("\n### ")[0]


def test_thumbnails_are_small_and_refused_without_the_figure(tmp_path):
    src = tmp_path / "made"
    src.mkdir()
    Image.new("RGB", (1500, 900), "white").save(src / "agrae_fig6.png")
    out = tmp_path / "thumbs"
    paths = guide.write_thumbnails(src, out, names=["agrae_fig6"])
    with Image.open(paths[0]) as im:
        assert im.size == (480, 288)
    with pytest.raises(ValueError, match=r"no PNG in .* for fade_fig2; make them first"):
        guide.write_thumbnails(src, tmp_path / "other", names=["agrae_fig6", "fade_fig2"])
    assert not (tmp_path / "other").exists()
    with pytest.raises(ValueError, match="NAME: unknown figure"):
        guide.write_thumbnails(src, out, names=["nope"])


def test_gallery_command(tmp_path, capsys):
    doc = tmp_path / "figures.md"
    doc.write_text(guide.replace_generated(DOC.read_text(encoding="utf-8"), guide.GALLERY_MARKER, "old\n"),
                   encoding="utf-8")
    assert cli.main(["gallery", "--doc", str(doc), "--no-thumbnails", "--check"]) == 1
    assert cli.main(["gallery", "--doc", str(doc), "--no-thumbnails"]) == 0
    assert doc.read_bytes() == DOC.read_bytes()
    assert cli.main(["gallery", "--doc", str(doc), "--no-thumbnails", "--check"]) == 0
    capsys.readouterr()
    # a figures folder without the PNGs: refused before the document or any thumbnail is written
    assert cli.main(["gallery", "--doc", str(doc), "--figures", str(tmp_path / "none"),
                     "--out", str(tmp_path / "g")]) == 2
    assert "figures: no PNG in" in capsys.readouterr().err and not (tmp_path / "g").exists()
    (tmp_path / "made").mkdir()
    Image.new("RGB", (600, 400), "white").save(tmp_path / "made" / "agrae_fig6.png")
    (tmp_path / "plain.md").write_text("no markers\n", encoding="utf-8")
    assert cli.main(["gallery", "--doc", str(tmp_path / "plain.md"), "--figures", str(tmp_path / "made"),
                     "--out", str(tmp_path / "g")]) == 2
    assert "--doc: " in capsys.readouterr().err and not (tmp_path / "g").exists()
    assert cli.main(["gallery", "--doc", str(doc), "--no-thumbnails", "--width", "0"]) == 2
    assert "--width must be" in capsys.readouterr().err
    assert cli.main(["gallery", "--doc", str(doc), "--reproduction", str(tmp_path / "missing.md")]) == 2
    assert "--reproduction: " in capsys.readouterr().err


def test_guide_figure_draws_every_claim(tmp_path):
    from tests.figures.test_paper_marks import unmarked_claims

    figures.make("guide_families", tmp_path)
    assert unmarked_claims(tmp_path, "guide_families") == []
    c = pd.read_csv(tmp_path / "guide_families.claims.csv")
    assert (c.status == "pass").all() and len(c) >= 5


def _demo_data():
    return pd.DataFrame({"x": [1.0]})


def test_a_figure_without_a_description_is_described_by_its_module_docstring():
    spec = figures.FigureSpec("zz_gallery_demo", "demo", "FADE Fig. 2", _demo_data, lambda df: None)
    with figures.registered(spec):
        text = guide.figure_description("zz_gallery_demo")
        assert text.startswith("docs/figures.md's gallery: the committed text is what `rlvr-figures gallery`")
        assert not text.endswith(".") and "\n" not in text
        assert "### zz_gallery_demo" in guide.gallery_markdown("")
