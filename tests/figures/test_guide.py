"""docs/choosing_an_advantage.md: its tables are what `rlvr-figures guide` generates, and its
cells agree with an independent computation (enumeration of all 2^G reward vectors, written
here from the families' definitions, not through the registry)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from figures import cli, guide, registry

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "choosing_an_advantage.md"


def test_committed_guide_is_what_the_generator_writes():
    """The committed tables are this machine's, number by number, at their printed precision (one
    unit in the last place: a rounding tie such as 0.5625 at 3 digits prints either way by its
    last bit, which another machine may decide differently)."""
    text = DOC.read_text(encoding="utf-8")
    assert registry.same_at_shown_precision(text, guide.replace_generated(text, guide.GUIDE_MARKER,
                                                                       guide.guide_markdown())), \
        "docs/choosing_an_advantage.md is stale: run `rlvr-figures guide`"


def test_same_at_shown_precision_accepts_a_tie_and_nothing_more():
    body = "| `maxrl` | 0.562 / 0.375 | 1.5e-07 | 8 |"
    assert registry.same_at_shown_precision(body, body.replace("0.562", "0.563"))   # the tie of 0.5625
    assert registry.same_at_shown_precision(body, body.replace("1.5e-07", "1.6e-07"))
    assert not registry.same_at_shown_precision(body, body.replace("0.562", "0.564"))  # two units: a change
    assert not registry.same_at_shown_precision(body, body.replace("| 8 |", "| 9 |"))  # a count
    assert not registry.same_at_shown_precision(body, body.replace("maxrl", "grpo"))
    assert not registry.same_at_shown_precision(body, body + " 1")


# ----------------------------------------------------------- independent values
def _grpo(r):
    s = r.std()
    return np.zeros_like(r) if s == 0 else (r - r.mean()) / s


def _asym(delta):
    def adv(r):
        c = r - r.mean()
        return np.where(r == 1, c, c / delta)
    return adv


def _w_reinforce(lam):
    return lambda r: np.where(r == 1, lam, -1.0)


def _enumerate(adv, p: float, G: int) -> tuple[float, float, float]:
    """E[m_S], E[m_F], E[Σ|A|] over all 2^G reward vectors of a prompt at solve rate p."""
    ms = mf = ab = 0.0
    for bits in itertools.product((0.0, 1.0), repeat=G):
        r = np.array(bits)
        x = int(r.sum())
        w = p**x * (1 - p) ** (G - x)
        A = adv(r)
        ms += w * A[r == 1].sum() / G
        mf += -w * A[r == 0].sum() / G
        ab += w * np.abs(A).sum()
    return ms, mf, ab


def _table(title_start: str) -> dict[str, list[str]]:
    """Rows of the generated Markdown table whose bold title starts with ``title_start``."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(f"**{title_start}", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in [ln for ln in block.splitlines() if ln.startswith("| ")][1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _close(cell: str, value: float) -> bool:
    """``cell`` shows ``value`` to its 3 significant digits."""
    shown = float(cell)
    return abs(shown - value) <= 0.51 * 10 ** (math.floor(math.log10(abs(value))) - 2) if value else shown == 0


P = (0.1, 0.3, 0.5, 0.7, 0.9)


@pytest.mark.parametrize("family,adv,p", [("grpo", _grpo, 0.1), ("asym_grpo δ=0.5", _asym(0.5), 0.3),
                                          ("w_reinforce λ=0.1", _w_reinforce(0.1), 0.7)])
def test_mass_sign_and_magnitude_cells_match_enumeration(family, adv, p):
    G = 8
    ms, mf, ab = _enumerate(adv, p, G)
    col = P.index(p)
    m_cell = _table("Table 3a")[family][col]
    assert [_close(c, v) for c, v in zip(m_cell.split(" / "), (ms, mf))] == [True, True], (m_cell, ms, mf)
    assert _close(_table("Table 4")[family][col], ms / mf)
    assert _close(_table("Table 5")[family][col], ms * p / (mf * (1 - p)))
    assert _close(_table("Table 6")[family][col], ab)


def test_sampling_cells_match_enumeration_of_rare_common_and_wrong_rollouts():
    G, p = 8, 0.3
    tau = guide.RARE_SHARE * p
    probs = {"rare": tau, "common": p - tau, "wrong": 1 - p}
    zero = miss = 0.0
    for outcome in itertools.product(probs, repeat=G):
        w = math.prod(probs[o] for o in outcome)
        wrong = outcome.count("wrong")
        if wrong in (0, G):
            zero += w
        elif "rare" not in outcome:
            miss += w
    row = _table("Table 1")["0.3"]  # zero-signal, all-wrong, Pr(B), Pr(B | active) for G = 8 first
    assert _close(row[0], zero) and _close(row[1], (1 - p) ** G)
    assert _close(row[2], miss) and _close(row[3], miss / (1 - zero))


def test_relative_weight_variance_cell_matches_the_binomial_sum():
    G, p = 8, 0.1
    w = lambda x: math.sqrt(x / G * (1 - x / G))  # noqa: E731  GRPO's weight sqrt(p q) at p̂ = x/G
    pmf = [math.comb(G, x) * p**x * (1 - p) ** (G - x) for x in range(G + 1)]
    mean = sum(q * w(x) for x, q in enumerate(pmf))
    var = sum(q * (w(x) - mean) ** 2 for x, q in enumerate(pmf))
    assert _close(_table("Table 7")["grpo"][0], var / (p * (1 - p)))


def test_guide_command_rewrites_only_the_generated_part_and_checks(tmp_path, capsys):
    doc = tmp_path / "guide.md"
    stale = guide.replace_generated(DOC.read_text(encoding="utf-8"), guide.GUIDE_MARKER, "old table\n")
    doc.write_text(stale, encoding="utf-8")
    assert cli.main(["guide", "--doc", str(doc), "--check"]) == 1
    assert "stale" in capsys.readouterr().out and doc.read_text(encoding="utf-8") == stale
    assert cli.main(["guide", "--doc", str(doc)]) == 0
    assert registry.same_at_shown_precision(DOC.read_text(encoding="utf-8"), doc.read_text(encoding="utf-8"))
    assert cli.main(["guide", "--doc", str(doc), "--check"]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name != "guide.md"]  # no temporary leftovers
    capsys.readouterr()
    (tmp_path / "plain.md").write_text("no markers\n", encoding="utf-8")
    assert cli.main(["guide", "--doc", str(tmp_path / "plain.md")]) == 2
    assert "--doc: " in capsys.readouterr().err
    assert cli.main(["guide", "--doc", str(tmp_path)]) == 2  # a directory


def test_family_labels_and_flags_select_the_registry_families():
    from rlvr_plumbing import runner
    from rlvr_theory import advantages

    for name, params in guide.FAMILIES:
        flags = guide.param_flags(params).split()
        parsed = runner.parse_params(flags[1::2]) if flags else {}
        assert advantages.get(name, **parsed) == advantages.get(name, **params)
        assert guide.family_label(name, params).startswith(name)


@pytest.mark.parametrize("kw,msg", [({"p": (1.5,)}, "p must"), ({"G": (0,)}, "G must be an integer >= 1"),
                                    ({"rare_share": 2}, "rare_share must")])
def test_guide_table_refuses_bad_input(kw, msg):
    with pytest.raises(ValueError, match=msg):
        guide.guide_table(families=(("grpo", {}),), **kw)


def test_a_tie_printed_the_other_way_leaves_the_document_untouched(tmp_path):
    """`rlvr-figures guide` on a document whose only difference from this machine's tables is one
    decimal one unit away in its last place writes nothing: the file stays as committed."""
    text = guide.replace_generated(DOC.read_text(encoding="utf-8"), guide.GUIDE_MARKER, guide.guide_markdown())
    cell = re.search(r"\| (0\.\d{2}[1-8]) \|", text)
    flipped = text[:cell.start(1)] + f"{float(cell.group(1)) + 0.001:.3f}" + text[cell.end(1):]
    doc = tmp_path / "guide.md"
    doc.write_text(flipped, encoding="utf-8")
    assert guide.update_document(doc, guide.GUIDE_MARKER, guide.guide_markdown()) is False
    assert doc.read_text(encoding="utf-8") == flipped
    moved = text[:cell.start(1)] + f"{float(cell.group(1)) + 0.002:.3f}" + text[cell.end(1):]
    doc.write_text(moved, encoding="utf-8")
    assert guide.update_document(doc, guide.GUIDE_MARKER, guide.guide_markdown()) is True
    assert doc.read_text(encoding="utf-8") == text
