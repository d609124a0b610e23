"""The figure registry and the writer that turns a :class:`FigureSpec` into files.

Each module of :mod:`figures.paper` registers one :class:`FigureSpec` (a
:class:`rlvr_plumbing.registry.Registry` named ``"figure"``); :func:`make` writes one figure,
:func:`check` makes several and collects their claims, :func:`reproduction_markdown` renders
the claims as ``docs/reproduction.md``.

The table is reproducible: every ``paper`` and ``ours`` number is rounded to the precision its
claim is checked at (:func:`claim_number`), so regenerating it on another machine gives the
same bytes even where the last digits of a simulation differ; and :func:`write_reproduction`
leaves an existing table untouched when the new claims agree with it to ``tol/10`` plus half
the step a number is shown with (:func:`same_at_claim_precision`), which also covers a number
that machine noise moves across a rounding boundary.

Examples
--------
>>> import tempfile
>>> from figures import registry
>>> paths, claims = registry.make("fgrpo_fig3", tempfile.mkdtemp())
>>> sorted(p.name for p in paths)
['fgrpo_fig3.claims.csv', 'fgrpo_fig3.csv', 'fgrpo_fig3.png']
>>> [c.status for c in claims]
['pass', 'pass', 'pass']
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import pkgutil
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr_plumbing.io import atomic_dir, atomic_write, atomic_write_text, check_out
from rlvr_plumbing.registry import Registry
from rlvr_plumbing.serialize import fmt_number

if TYPE_CHECKING:  # imported where used: `rlvr-figures --help` loads no pandas
    import pandas as pd

__all__ = ["Claim", "FigureSpec", "register", "unregister", "registered", "get", "names", "make", "check",
           "claim_number", "reproduction_markdown", "parse_reproduction_markdown", "same_at_claim_precision",
           "same_at_shown_precision", "write_reproduction", "check_table_text", "write_check_table",
           "CHECK_TABLE", "NOT_HERE", "STATUSES", "VERDICTS", "STATUS_MEANING"]

NOT_HERE = "not reproducible here"


#: the verdicts a figure module may set on a claim that does not pass (:attr:`Claim.verdict`)
VERDICTS = ("depends", "underpowered")

#: every status a claim can have, in the order the summaries list them
STATUSES = ("pass", "depends", "explained", "underpowered", NOT_HERE, "fail")

#: what each status means (the preamble of docs/reproduction.md and the protocol, docs/protocol.md)
STATUS_MEANING = {
    "pass": "holds (|ours − paper| ≤ tol) at the paper's settings or across the grid of the settings "
            "the paper leaves open",
    "depends": "holds on part of the grid only: the note says where, with the numbers",
    "explained": "fails across the grid, and a derivation or a stated difference of setting says why "
                 "(e.g. a misprint shown by derivation)",
    "underpowered": "no detectable effect, and the smallest effect the experiment could detect "
                    "(2 s.e. of the difference) is larger than the paper's effect",
    NOT_HERE: "needs the papers' 7B-scale RL runs or data that are not published; the note says which",
    "fail": "differs, unexplained",
}


@dataclass(frozen=True)
class Claim:
    """A number from a paper next to ours.

    ``paper`` is the paper's value, ``ours`` what the library computes; the claim holds
    when ``|ours − paper| <= tol`` (absolute).  A claim that does not hold may carry a
    ``note`` explaining why (e.g. a misprint in the paper, shown by derivation); its
    ``status`` is then ``"explained"`` instead of ``"fail"``.  A claim that only holds at
    paper scale (e.g. 7B RL runs) has ``ours = nan`` and the reason in ``note``; its status is
    ``"not reproducible here"``.

    Parameters
    ----------
    claim, source : str
        What the paper states, and where (short paper name and figure, table or section).
    paper, ours, tol : float
        The paper's number, ours, and the absolute tolerance the claim is checked at.
    note : str, optional
        Why a claim that does not pass differs (required with ``verdict``).
    verdict : {"", "depends", "underpowered"}, optional
        ``""`` (default): the status follows from the numbers and the note.  ``"depends"``: the
        claim holds on part of the grid of settings the paper leaves open (the note says where,
        with the numbers).  ``"underpowered"``: no detectable effect, and the smallest effect the
        experiment could detect (2 s.e. of the difference) is larger than the paper's.  Either
        needs a ``note``; a claim that passes is ``"pass"`` whatever its verdict.
    tested_at : str, optional
        The settings the claim was tested at (e.g. ``"lr ∈ {1e-4, 3e-4, 1e-3}, 10 seeds"``),
        shown after the note (:attr:`shown_note`).

    Raises
    ------
    ValueError
        ``verdict`` not one of the allowed values, or given without a ``note``.

    Examples
    --------
    >>> Claim("c", "s", 1.0, 0.0, 0.1, note="holds at lr 0.1 only", verdict="depends",
    ...       tested_at="lr ∈ {0.03, 0.1}").status
    'depends'
    >>> Claim("c", "s", 1.0, 0.0, 0.1, verdict="depends")
    Traceback (most recent call last):
    ...
    ValueError: verdict='depends' needs a note saying where the claim holds or what it could detect
    """

    claim: str
    source: str
    paper: float
    ours: float
    tol: float
    note: str = ""
    verdict: str = ""
    tested_at: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in ("", *VERDICTS):
            raise ValueError(f"verdict: {self.verdict!r} is not allowed; allowed: '', "
                             + ", ".join(repr(v) for v in VERDICTS))
        if self.verdict and not self.note:
            raise ValueError(f"verdict={self.verdict!r} needs a note saying where the claim holds or what "
                             "it could detect")

    @property
    def passed(self) -> bool:
        return abs(self.ours - self.paper) <= self.tol or self.ours == self.paper

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`: ``"pass"``; else ``"not reproducible here"`` (``ours`` is
        NaN, with the reason in the note); else the ``verdict`` (``"depends"``,
        ``"underpowered"``) where one is set; else ``"explained"`` (fails, with a note) or
        ``"fail"``."""
        if self.passed:
            return "pass"
        if self.note and self.ours != self.ours:  # NaN: paper-scale only
            return NOT_HERE
        if self.verdict:
            return self.verdict
        return "explained" if self.note else "fail"

    @property
    def shown_note(self) -> str:
        """The note as the tables show it: ``note``, then ``Tested at: …`` where ``tested_at`` is set.

        >>> Claim("c", "s", 1.0, 2.0, 0.1, note="misprint.", tested_at="lr 0.1").shown_note
        'misprint. Tested at: lr 0.1.'
        """
        if not self.tested_at:
            return self.note
        sep = " " if self.note.rstrip().endswith((".", ";", ":")) or not self.note else ". "
        return (self.note.rstrip() + sep if self.note else "") + f"Tested at: {self.tested_at.rstrip('.')}."


@dataclass(frozen=True)
class FigureSpec:
    """One registered figure or table of a paper."""

    name: str
    title: str
    source: str
    data: Callable[[], pd.DataFrame]
    plot: Callable[[pd.DataFrame], object]
    claims: Callable[[pd.DataFrame], list[Claim]] = field(default=lambda df: [])
    markdown: Callable[[pd.DataFrame], str] | None = None
    #: the paper-scale data (``--full``); ``data`` is the quick default
    full_data: Callable[[], pd.DataFrame] | None = None


_REGISTRY: Registry[FigureSpec] = Registry("figure", sort=True)
_LOADED = False


def register(spec: FigureSpec) -> FigureSpec:
    """Add a figure to the registry (``ValueError`` if another figure has its name)."""
    return _REGISTRY.register(spec)


def unregister(name: str) -> None:
    """Remove the figure ``name`` (``ValueError`` listing the names if there is none)."""
    get(name)
    _REGISTRY.unregister(name)


def registered(spec: FigureSpec) -> contextlib.AbstractContextManager[FigureSpec]:
    """Context manager: ``spec`` is registered inside the ``with`` block only (for tests)."""
    _load()
    return _REGISTRY.registered(spec)


def _load() -> None:
    global _LOADED
    if not _LOADED:
        from . import paper

        for mod in pkgutil.iter_modules(paper.__path__):
            importlib.import_module(f"{paper.__name__}.{mod.name}")
        _LOADED = True


def names() -> list[str]:
    """Registered figure names, sorted.

    >>> from figures import registry
    >>> "fade_fig2" in registry.names() and registry.names() == sorted(registry.names())
    True
    """
    _load()
    return _REGISTRY.names()


def get(name: str) -> FigureSpec:
    """The :class:`FigureSpec` called ``name``; ``ValueError`` listing the names otherwise
    (the argument is named ``NAME``, as in ``rlvr-figures make NAME``).

    Examples
    --------
    >>> from figures import registry
    >>> spec = registry.get("fgrpo_fig3")
    >>> spec.title, spec.source
    ('Focal-weighted advantage magnitude vs success rate', 'F-GRPO Fig. 3')
    >>> registry.get("fade_fig99")
    Traceback (most recent call last):
    ...
    ValueError: NAME: unknown figure 'fade_fig99'; allowed: agrae_fig6, ...
    """
    _load()
    return _REGISTRY.get(name, arg="NAME")


def make(name: str, out_dir: str | os.PathLike, *, pdf: bool = False, full: bool = False
         ) -> tuple[list[Path], list[Claim]]:
    """Regenerate figure ``name`` into ``out_dir``: ``NAME.png``, ``NAME.csv`` (the plotted
    numbers), ``NAME.claims.csv`` (paper vs ours), ``NAME.md`` for tables, ``NAME.pdf`` if asked.
    ``full`` uses the figure's paper-scale data where it has one (``FigureSpec.full_data``).

    The PNG's metadata entry ``Paper marks`` lists the numbers drawn by the figure's paper marks
    (:mod:`figures.paper._style`); every claim with a paper value has one (tested).

    Returns the written paths and the claims.  An unknown ``name`` and an ``out_dir`` that
    cannot receive the files (an existing file, a path under a file, not writable) are refused
    (``ValueError``) before anything is computed or written.  Files already in ``out_dir`` are
    kept; the figure's own are replaced, each atomically.  An ``out_dir`` that does not exist yet
    is built in a hidden temporary sibling and renamed into place with the figure's files
    (:func:`rlvr_plumbing.io.atomic_dir`): a write that fails (disk full) leaves no folder behind.

    Examples
    --------
    >>> import tempfile
    >>> paths, claims = make("agrae_fig6", tempfile.mkdtemp(), pdf=True)
    >>> sorted(p.suffix for p in paths)
    ['.csv', '.csv', '.pdf', '.png']
    >>> claims[0].claim, claims[0].status
    ('GRPO sum|A| = 2G sqrt(p(1-p)) = 8 at p = 0.5', 'pass')
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = get(name)
    out = check_out(out_dir, overwrite=True, arg="out_dir")
    df = spec.full_data() if full and spec.full_data is not None else spec.data()
    fig = spec.plot(df)
    claims = spec.claims(df)
    from .paper._style import paper_values

    # the numbers the figure's paper marks show, in the PNG's metadata (checked against the
    # claims by the figure tests: a figure cannot silently lose its paper marks)
    marks = {"Paper marks": json.dumps(paper_values(fig))}
    cols = ["claim", "source", "paper", "ours", "tol", "passed", "status", "note"]
    import pandas as pd

    cdf = pd.DataFrame([{"claim": c.claim, "source": c.source, "paper": c.paper, "ours": c.ours, "tol": c.tol,
                         "passed": c.passed, "status": c.status, "note": c.shown_note} for c in claims], columns=cols)
    names: list[str] = []

    def write_into(folder: Path) -> None:
        """The figure's files into ``folder``, each written atomically."""
        def emit(suffix: str, write: Callable[[str], None]) -> None:
            atomic_write(folder / f"{name}{suffix}", write)
            names.append(f"{name}{suffix}")

        emit(".csv", lambda p: df.to_csv(p, index=False, float_format="%.17g"))
        emit(".png", lambda p: fig.savefig(p, dpi=150, bbox_inches="tight", format="png", metadata=marks))
        if pdf:
            emit(".pdf", lambda p: fig.savefig(p, bbox_inches="tight", format="pdf"))
        emit(".claims.csv", lambda p: cdf.to_csv(p, index=False, float_format="%.17g"))
        if spec.markdown is not None:
            atomic_write_text(folder / f"{name}.md", spec.markdown(df))
            names.append(f"{name}.md")

    try:
        if out.is_dir():  # a shared folder: the figure's files are added, the others kept
            write_into(out)
        else:  # a new folder appears with this figure's files, complete, or not at all
            atomic_dir(out, write_into)
    finally:
        plt.close(fig)
    return [out / n for n in names], claims


def check(names_: list[str] | None, out_dir: str | os.PathLike, *, full: bool = False,
          progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Make the figures ``names_`` (all when ``None``) into ``out_dir`` and return every claim as
    one table: ``figure, claim, source, paper, ours, tol, status, note``.  Unknown names are
    refused before any figure is made."""
    rows = []
    start = time.perf_counter()
    for name in names_ or names():
        get(name)  # refuse unknown names before any work
    check_out(out_dir, overwrite=True, arg="out_dir")
    for name in names_ or names():
        if progress is not None:
            progress(name)
        _, claims = make(name, out_dir, full=full)
        rows += [{"figure": name, "claim": c.claim, "source": c.source, "paper": c.paper, "ours": c.ours,
                  "tol": c.tol, "status": c.status, "note": c.shown_note} for c in claims]
    import pandas as pd

    table = pd.DataFrame(rows, columns=["figure", "claim", "source", "paper", "ours", "tol", "status", "note"])
    # what the run took, for `rlvr-figures check`'s summary line (not part of the table's columns)
    table.attrs.update(figures=len(names_ or names()), seconds=time.perf_counter() - start)
    return table


#: the file names :func:`write_check_table` writes into the figures folder
CHECK_TABLE = ("claims.txt", "claims.csv")


def check_table_text(table: pd.DataFrame) -> str:
    """The claims ``table`` of :func:`check` as text, one row per claim (figure, claim cut to 60
    characters, paper, ours, status): what ``rlvr-figures check --verbose`` prints."""
    import pandas as pd

    with pd.option_context("display.max_rows", None, "display.max_colwidth", 60, "display.width", 200):
        return table[["figure", "claim", "paper", "ours", "status"]].to_string(index=False) + "\n"


def write_check_table(out_dir: str | os.PathLike, table: pd.DataFrame) -> list[Path]:
    """Write the full claims ``table`` of :func:`check` into the figures folder ``out_dir``:
    ``claims.txt`` (:func:`check_table_text`) and ``claims.csv`` (every column, notes included),
    each atomically; returns their paths."""
    out = check_out(out_dir, overwrite=True, arg="out_dir")
    out.mkdir(parents=True, exist_ok=True)
    txt, csv = (out / n for n in CHECK_TABLE)
    atomic_write_text(txt, check_table_text(table))
    atomic_write(csv, lambda p: table.to_csv(p, index=False, float_format="%.17g"))
    return [txt, csv]



_COLUMNS = ["figure", "claim", "source", "paper", "ours", "tol", "status", "note"]

#: how docs/reproduction.md rounds its numbers (also its header)
ROUNDING_RULE = (
    "Numbers are rounded to the precision their claim is checked at, so that the table is the same "
    "on every machine: `paper` and `ours` are rounded to the largest power of ten that is at most "
    "tol/10 (the shown value is within tol/20 of the computed one) and shown with at most 6 "
    "significant digits; claims with tol = 0 (exact comparisons) show 6 significant digits; "
    "`tol` is shown as written in the figure module; `—` is no value.")


#: the experiment protocol, the preamble of docs/reproduction.md (the grids: docs/protocol.md)
PROTOCOL = (
    "Protocol.  For every experiment behind a claim, the settings the paper fixes are taken as given; the "
    "settings it leaves open (learning rate, optimizer, reduction, base advantage, steps, group size where "
    "not stated) are swept over a grid fixed before the runs: at least our default, the paper's nearest "
    "stated value and one value on each side.  Where the paper's method admits two readings, each reading "
    "is its own claim row.  A null result states the smallest effect the experiment could detect (2 s.e. "
    "of the difference) next to the paper's effect, and where the paper describes a mechanism (a collapse "
    "trajectory, an entropy rise) the note reports whether the run shows it.  A note ends with the "
    "settings its claim was tested at (`Tested at: …`).  The grid of each experiment: "
    "[protocol.md](protocol.md) (toy and simulation figures) and "
    "[seed_experiments.md](seed_experiments.md) (the tiny-trainer experiments).")


def claim_number(x: float, tol: float) -> str:
    """``x`` as shown in the reproduction table of a claim checked at absolute tolerance ``tol``.

    ``x`` is rounded to the largest power of ten ``10**k <= tol/10`` (rounding error at most
    ``tol/20``, so far below the tolerance that the table never shows a pass as a fail) and
    written with at most 6 significant digits (:func:`rlvr_plumbing.serialize.fmt_number`);
    ``tol = 0`` gives 6 significant digits; NaN gives ``—``.  A change of ``x`` smaller than
    half the rounding step leaves the text unchanged unless ``x`` lies that close to a rounding
    boundary, which is what makes the table independent of machine-level noise.

    Examples
    --------
    >>> claim_number(0.6300816, 0.005), claim_number(2.54436e-07, 1e-6), claim_number(9.8e-19, 1e-12)
    ('0.6301', '3e-07', '0')
    >>> claim_number(0.7367619, 1e-10), claim_number(0.875, 0.0), claim_number(float("nan"), 0.01)
    ('0.736762', '0.875', '—')
    """
    x, tol = float(x), float(tol)
    if not math.isfinite(x) or not (tol > 0 and math.isfinite(tol)):
        return fmt_number(x)
    k = math.floor(math.log10(tol) + 1e-9) - 1  # 10**k: the largest power of ten <= tol/10
    r = round(x, -k)
    if r == 0:
        return "0"
    digits = min(6, max(1, math.floor(math.log10(abs(r)) + 1e-9) - k + 1))
    return fmt_number(r, digits)


def _escape(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def reproduction_markdown(table: pd.DataFrame, *, full: bool = False) -> str:
    """``docs/reproduction.md``: the claims table of :func:`check` as Markdown, with counts.

    Numbers are rounded by :func:`claim_number`, so the text depends only on the claims, not on
    the last digits a machine computes.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame([["fig", "a claim", "Two-Stage Fig. 1", 0.63, 0.6300816, 0.005, "pass", ""]],
    ...                  columns=_COLUMNS)
    >>> reproduction_markdown(t).splitlines()[-1]
    '| fig | a claim | Two-Stage Fig. 1 | 0.63 | 0.6301 | 0.005 | pass |  |'
    """
    counts = table.status.value_counts()
    summary = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in STATUSES)
    lines = [
        "# Reproduction report: every paper number next to ours",
        "",
        "Generated by `rlvr-figures check" + (" --full" if full else "") + "` (also the last step of "
        "`make figures`); do not edit by hand.  Each row is a number stated by one of the five papers "
        "(`source`, short names as in [papers.md](papers.md)), recomputed by the figure module named in "
        "`figure`; the [gallery](figures.md#gallery) shows each figure with these claims.  Simulation figures "
        "use their quick presets"
        + (" at paper scale (`--full`)." if full else "; `rlvr-figures check --full` runs the paper-scale sweeps."),
        "",
        PROTOCOL,
        "",
        "`status`, in the order the summary counts them:",
        "",
        *(f"- **{s}**: {STATUS_MEANING[s]}." for s in STATUSES),
        "",
        ROUNDING_RULE,
        "",
        f"Summary: {len(table)} claims — {summary}.",
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for r in table.itertuples():
        lines.append(f"| {r.figure} | {_escape(r.claim)} | {_escape(r.source)} | {claim_number(r.paper, r.tol)} | "
                     f"{claim_number(r.ours, r.tol)} | {fmt_number(float(r.tol))} | {r.status} | {_escape(r.note)} |")
    return "\n".join(lines) + "\n"


def _number(cell: str) -> float:
    return math.nan if cell == "—" else float(cell.replace("∞", "inf"))


def parse_reproduction_markdown(text: str) -> pd.DataFrame:
    """The claims table of a ``docs/reproduction.md`` (numbers as shown, ``—`` as NaN), the
    inverse of :func:`reproduction_markdown` up to its rounding."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| figure |"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append(dict(zip(_COLUMNS, cells)))
    import pandas as pd

    table = pd.DataFrame(rows, columns=_COLUMNS)
    for col in ("paper", "ours", "tol"):
        table[col] = [_number(c) for c in table[col]]
    return table


def _display_step(shown: float, tol: float) -> float:
    """The rounding step of a number as :func:`claim_number` shows it (0 when it is exact)."""
    exps = []
    if tol > 0 and math.isfinite(tol):
        exps.append(math.floor(math.log10(tol) + 1e-9) - 1)
    if shown != 0:
        exps.append(math.floor(math.log10(abs(shown)) + 1e-9) - 5)  # the 6th significant digit
    return 10.0 ** max(exps) if exps else 0.0


_SHOWN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")


def _last_place(token: str) -> float:
    """One unit in the last place of a number as printed (``0.562`` → 0.001, ``1.5e-07`` → 1e-08)."""
    mant, _, exp = token.lower().partition("e")
    return 10.0 ** (int(exp or 0) - len(mant.partition(".")[2]))


def same_at_shown_precision(old: str, new: str) -> bool:
    """Whether two generated texts say the same thing: equal apart from printed decimals, and
    each decimal of ``new`` within one unit in the last printed place of ``old``'s.

    A value on a rounding tie (``0.5625`` with 3 significant digits) prints ``0.562`` or ``0.563``
    by its last bit, which differs between machines (BLAS, compiler, library versions): such a
    text is the same document.  Integers (counts, group sizes) must be equal.

    >>> same_at_shown_precision("| 0.562 | 8 |", "| 0.563 | 8 |"), same_at_shown_precision("0.562", "0.564")
    (True, False)
    >>> same_at_shown_precision("| 8 |", "| 9 |"), same_at_shown_precision("a 0.5", "b 0.5")
    (False, False)
    """
    if old == new:
        return True
    if _SHOWN.split(old) != _SHOWN.split(new):
        return False
    for a, b in zip(_SHOWN.findall(old), _SHOWN.findall(new)):
        if a == b:
            continue
        if not ({".", "e"} & set(a.lower()) and {".", "e"} & set(b.lower())):
            return False  # an integer changed
        if abs(float(a) - float(b)) > max(_last_place(a), _last_place(b)) * (1 + 1e-9):
            return False
    return True


def same_at_claim_precision(old: pd.DataFrame, new: pd.DataFrame) -> bool:
    """Whether ``new`` claims say what the table ``old`` (as parsed from its Markdown) shows:
    the same rows with the same texts and statuses, the same notes up to one unit in the last
    printed place of the numbers they quote (:func:`same_at_shown_precision`), and every
    ``paper`` / ``ours`` number of ``new`` within ``tol/10`` plus half a rounding step of the
    number shown (NaN only with NaN).

    ``rlvr-figures check`` leaves an existing table file untouched when the new claims are the
    same at this precision, so that machine-level noise (a float32 sum, a sampled draw flipped
    by it) never dirties the checkout, even where it moves a number across a rounding boundary.

    >>> t = parse_reproduction_markdown("| f | c | s | 0.63 | 0.6301 | 0.005 | pass |  |")
    >>> same_at_claim_precision(t, t.assign(ours=[0.62985])), same_at_claim_precision(t, t.assign(ours=[0.6290]))
    (True, False)
    """
    if len(old) != len(new):
        return False
    for a, b in zip(old.itertuples(), new.itertuples()):
        if any(str(getattr(a, c)) != str(getattr(b, c)) for c in ("figure", "claim", "source", "status")):
            return False
        if not same_at_shown_precision(str(a.note), str(b.note)):  # measured numbers quoted in a note
            return False
        tol = float(b.tol)
        if abs(float(a.tol) - tol) > _display_step(float(a.tol), 0.0) / 2:
            return False
        for col in ("paper", "ours"):
            shown, x = float(getattr(a, col)), float(getattr(b, col))
            if math.isnan(shown) or math.isnan(x):
                if math.isnan(shown) != math.isnan(x):
                    return False
            elif abs(x - shown) > (tol / 10 + _display_step(shown, tol) / 2) * (1 + 1e-9) + 1e-300:
                return False
    return True


def write_reproduction(path: str | os.PathLike, table: pd.DataFrame, *, full: bool = False) -> bool:
    """Write the claims ``table`` to ``path`` as :func:`reproduction_markdown`, unless ``path``
    already holds the same claims at their precision (:func:`same_at_claim_precision`) under the
    same header; returns whether the file was written.  ``path`` must be a file path in a
    writable place (checked first, :func:`rlvr_plumbing.io.check_out`)."""
    path = check_out(path, kind="file", arg="path")
    text = reproduction_markdown(table, full=full)
    if path.exists():
        old_text = path.read_text(encoding="utf-8")
        head = lambda t: t.split("\nSummary:", 1)[0]  # noqa: E731
        if head(old_text) == head(text) and same_at_claim_precision(parse_reproduction_markdown(old_text), table):
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return True
