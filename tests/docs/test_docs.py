"""The README and docs tell the truth: their examples run and their tables match the code."""

from __future__ import annotations

import re
from pathlib import Path

from rlvr_theory import advantages, masses

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_readme_python_examples_run():
    # the TRL snippet is a template (model, dataset, reward function are the user's); its runnable
    # version, examples/trl_grpo.py, runs in tests/integrations/test_trl.py
    blocks = [b for b in _python_blocks(ROOT / "README.md") if "integrations.trl" not in b]
    assert len(blocks) >= 2
    ns: dict = {}
    try:
        for code in blocks:
            exec(compile(code, "README.md", "exec"), ns)  # noqa: S102
    finally:
        if "half_grpo" in advantages.names():
            advantages.unregister("half_grpo")
    m = ns["masses"].of_group(ns["adv"], ns["rewards"])
    assert float(m.m_S[0]) == 0.1875 and float(m.m_F[0]) == 0.375


def test_docs_registry_table_matches_the_code():
    text = (ROOT / "docs" / "rlvr_theory.md").read_text()
    for r in masses.expressions().to_dict("records"):
        row = f"| `{r['advantage']}` |"
        assert row in text, r["advantage"]
        line = next(ln for ln in text.splitlines() if ln.startswith(row))
        assert f"`{r['m_S']}`" in line and f"`{r['m_F']}`" in line and r["kind"] in line, line


def test_docs_list_every_figure():
    import figures

    text = (ROOT / "docs" / "figures.md").read_text()
    for name in figures.names():
        assert f"`{name}`" in text


def test_readme_gallery_lists_every_figure():
    import figures

    text = (ROOT / "README.md").read_text()
    for name in figures.names():
        assert f"- `{name}` — {figures.get(name).title}" in text, name


#: where a citation's name ends and its location in the paper begins
_LOCATOR = re.compile(r"\s*(?:\(|,|\b(?:Sec|App|Eqs?|Tables?|Figs?|Alg|Algorithm|Theorems?|Thm|Prop|Cor|Lemma|Remark)\b)")


def _cited_names(source: str) -> list[str]:
    """``"Shao et al. 2024; FADE App. 8.1"`` → ``["Shao et al. 2024", "FADE"]``."""
    return [_LOCATOR.split(part.strip(), maxsplit=1)[0].strip() for part in source.split(";") if part.strip()]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_papers_page_resolves_every_short_name_of_the_registries():
    import figures

    text = (ROOT / "docs" / "papers.md").read_text()
    anchors = {_slug(h) for h in re.findall(r"^#{2,3} (.+)$", text, flags=re.M)}
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, target
    sources = {f"advantage {n}": cls.source for n, cls in advantages.registry().items()}
    sources |= {f"figure {n}": figures.get(n).source for n in figures.names()}
    for where, source in sources.items():
        assert source, where
        for name in _cited_names(source):
            assert f"[{name}](#{_slug(name)})" in text, f"{where}: {name!r} (from {source!r}) is not in docs/papers.md"
    for short in ("FADE", "Two-Stage", "F-GRPO", "A-GRAE", "Over-Sharpening"):
        assert f"| [{short}](#{_slug(short)}) |" in text  # in the table of the five papers


def test_docs_index_links_every_page():
    index = (ROOT / "docs" / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, page.name
