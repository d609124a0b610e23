"""The figure registry and the writer that turns a :class:`FigureSpec` into files."""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from analysis.io import atomic_write

__all__ = ["Claim", "FigureSpec", "register", "get", "names", "make", "check", "reproduction_markdown"]

NOT_HERE = "not reproducible here"


@dataclass(frozen=True)
class Claim:
    """A number from a paper next to ours.

    ``paper`` is the paper's value, ``ours`` what the library computes; the claim holds
    when ``|ours − paper| <= tol`` (absolute).  A claim that does not hold may carry a
    ``note`` explaining why (e.g. a misprint in the paper, shown by derivation); its
    ``status`` is then ``"explained"`` instead of ``"fail"``.  A claim that only holds at
    paper scale (e.g. 7B RL runs) has ``ours = nan`` and the reason in ``note``; its status is
    ``"not reproducible here"``.
    """

    claim: str
    source: str
    paper: float
    ours: float
    tol: float
    note: str = ""

    @property
    def passed(self) -> bool:
        return abs(self.ours - self.paper) <= self.tol or self.ours == self.paper

    @property
    def status(self) -> str:
        """``"pass"``, ``"explained"`` (fails, with a note), ``"not reproducible here"`` (``ours``
        is NaN, with the reason in the note) or ``"fail"``."""
        if self.passed:
            return "pass"
        if self.note and self.ours != self.ours:  # NaN: paper-scale only
            return NOT_HERE
        return "explained" if self.note else "fail"


@dataclass(frozen=True)
class FigureSpec:
    """One registered figure or table of a paper."""

    name: str
    title: str
    source: str
    data: Callable[[], pd.DataFrame]
    plot: Callable[[pd.DataFrame], "object"]
    claims: Callable[[pd.DataFrame], list[Claim]] = field(default=lambda df: [])
    markdown: Callable[[pd.DataFrame], str] | None = None
    #: the paper-scale data (``--full``); ``data`` is the quick default
    full_data: Callable[[], pd.DataFrame] | None = None


_REGISTRY: dict[str, FigureSpec] = {}
_LOADED = False


def register(spec: FigureSpec) -> FigureSpec:
    """Add a figure to the registry (names must be unique)."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"figure {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    global _LOADED
    if not _LOADED:
        from . import paper

        for mod in pkgutil.iter_modules(paper.__path__):
            importlib.import_module(f"{paper.__name__}.{mod.name}")
        _LOADED = True


def names() -> list[str]:
    """Registered figure names, sorted."""
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> FigureSpec:
    """The :class:`FigureSpec` called ``name``; ``ValueError`` listing the names otherwise."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"NAME: unknown figure {name!r}; allowed: {', '.join(sorted(_REGISTRY))}") from None


def make(name: str, out_dir: str | os.PathLike, *, pdf: bool = False, full: bool = False
         ) -> tuple[list[Path], list[Claim]]:
    """Regenerate figure ``name`` into ``out_dir``: ``NAME.png``, ``NAME.csv`` (the plotted
    numbers), ``NAME.claims.csv`` (paper vs ours), ``NAME.md`` for tables, ``NAME.pdf`` if asked.
    ``full`` uses the figure's paper-scale data where it has one (``FigureSpec.full_data``).

    Returns the written paths and the claims.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = get(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = spec.full_data() if full and spec.full_data is not None else spec.data()
    fig = spec.plot(df)
    claims = spec.claims(df)
    written: list[Path] = []

    def emit(suffix: str, write: Callable[[str], None]) -> None:
        path = out / f"{name}{suffix}"
        atomic_write(path, write)
        written.append(path)

    emit(".csv", lambda p: df.to_csv(p, index=False, float_format="%.17g"))
    emit(".png", lambda p: fig.savefig(p, dpi=150, bbox_inches="tight", format="png"))
    if pdf:
        emit(".pdf", lambda p: fig.savefig(p, bbox_inches="tight", format="pdf"))
    plt.close(fig)
    cols = ["claim", "source", "paper", "ours", "tol", "passed", "status", "note"]
    cdf = pd.DataFrame([{"claim": c.claim, "source": c.source, "paper": c.paper, "ours": c.ours, "tol": c.tol,
                         "passed": c.passed, "status": c.status, "note": c.note} for c in claims], columns=cols)
    emit(".claims.csv", lambda p: cdf.to_csv(p, index=False, float_format="%.17g"))
    if spec.markdown is not None:
        text = spec.markdown(df)
        emit(".md", lambda p: Path(p).write_text(text))
    return written, claims


def check(names_: list[str] | None, out_dir: str | os.PathLike, *, full: bool = False,
          progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Make the figures ``names_`` (all when ``None``) into ``out_dir`` and return every claim as
    one table: ``figure, claim, source, paper, ours, tol, status, note`` (issue 7 §1)."""
    rows = []
    for name in names_ or names():
        get(name)  # refuse unknown names before any work
    for name in names_ or names():
        if progress is not None:
            progress(name)
        _, claims = make(name, out_dir, full=full)
        rows += [{"figure": name, "claim": c.claim, "source": c.source, "paper": c.paper, "ours": c.ours,
                  "tol": c.tol, "status": c.status, "note": c.note} for c in claims]
    return pd.DataFrame(rows, columns=["figure", "claim", "source", "paper", "ours", "tol", "status", "note"])


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.6g}"


def reproduction_markdown(table: pd.DataFrame, *, full: bool = False) -> str:
    """``docs/reproduction.md``: the claims table of :func:`check` as Markdown, with counts."""
    counts = table.status.value_counts()
    summary = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in ("pass", "explained", NOT_HERE, "fail"))
    lines = [
        "# Reproduction report: every paper number next to ours",
        "",
        "Generated by `rlvr-figures check" + (" --full" if full else "") + "` (also the last step of "
        "`make figures`); do not edit by hand.  Each row is a number stated by one of the five papers "
        "(`source`), recomputed by the figure module named in `figure`.  `status`: **pass** "
        "(|ours − paper| ≤ tol), **explained** (differs; the note says why, e.g. a misprint shown by "
        "derivation), **not reproducible here** (needs the papers' 7B-scale RL runs; the note says "
        "which), **fail** (differs, unexplained).  Simulation figures use their quick presets"
        + (" at paper scale (`--full`)." if full else "; `rlvr-figures check --full` runs the paper-scale sweeps."),
        "",
        f"Summary: {len(table)} claims — {summary}.",
        "",
        "| figure | claim | source | paper | ours | tol | status | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    esc = lambda t: str(t).replace("|", "\\|").replace("\n", " ")
    for r in table.itertuples():
        lines.append(f"| {r.figure} | {esc(r.claim)} | {esc(r.source)} | {_fmt(r.paper)} | {_fmt(r.ours)} | "
                     f"{_fmt(r.tol)} | {r.status} | {esc(r.note)} |")
    return "\n".join(lines) + "\n"
