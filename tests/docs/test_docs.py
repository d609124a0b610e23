"""The README and docs tell the truth: their examples run and their tables match the code."""

from __future__ import annotations

import re
from pathlib import Path

from rlvr_theory import advantages, masses

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_readme_python_examples_run():
    blocks = _python_blocks(ROOT / "README.md")
    assert len(blocks) >= 2
    ns: dict = {}
    try:
        for code in blocks:
            exec(compile(code, "README.md", "exec"), ns)  # noqa: S102
    finally:
        advantages._REGISTRY.pop("half_grpo", None)
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
