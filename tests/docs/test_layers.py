"""Imports point one way: rlvr_plumbing <- rlvr_theory <- analysis <- simulations / integrations <- figures
(docs: README "Layout"); nothing imports integrations."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlvr_plumbing", "rlvr_theory", "analysis", "simulations", "integrations", "figures")
ALLOWED = {
    "rlvr_plumbing": set(),
    "rlvr_theory": {"rlvr_plumbing"},
    "analysis": {"rlvr_plumbing", "rlvr_theory"},
    "simulations": {"rlvr_plumbing", "rlvr_theory", "analysis"},
    "integrations": {"rlvr_plumbing", "rlvr_theory", "analysis"},
    "figures": {"rlvr_plumbing", "rlvr_theory", "analysis", "simulations"},
}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = _imported_packages(path) - ALLOWED[package] - {package}
        if wrong:
            bad.append(f"{path.relative_to(ROOT)} imports {', '.join(sorted(wrong))}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_a_wrong_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy\nfrom integrations.core import Policy\nfrom . import x\n")
    assert _imported_packages(f) == {"integrations"}


def test_architecture_page_names_every_package_and_module_of_the_diff():
    """docs/architecture.md (linked from README) says where each concern lives: it must name every
    package of the layer order and every module of the checkpoint-diff package."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "rlvr_plumbing  ←  rlvr_theory  ←  analysis  ←  simulations / integrations  ←  figures" in text
    missing = [p for p in PACKAGES if f"**`{p}`**" not in text]
    missing += [m.stem for m in (ROOT / "analysis" / "diff").glob("*.py")
                if m.stem != "__init__" and f"`{m.stem}`" not in text]
    assert not missing, missing
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
