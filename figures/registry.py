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

__all__ = ["Claim", "FigureSpec", "register", "get", "names", "make"]


@dataclass(frozen=True)
class Claim:
    """A number from a paper next to ours.

    ``paper`` is the paper's value, ``ours`` what the library computes; the claim holds
    when ``|ours − paper| <= tol`` (absolute).  A claim that does not hold may carry a
    ``note`` explaining why (e.g. a misprint in the paper, shown by derivation); its
    ``status`` is then ``"explained"`` instead of ``"fail"``.
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
        """``"pass"``, ``"explained"`` (fails, with a note) or ``"fail"``."""
        return "pass" if self.passed else ("explained" if self.note else "fail")


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


def make(name: str, out_dir: str | os.PathLike, *, pdf: bool = False) -> tuple[list[Path], list[Claim]]:
    """Regenerate figure ``name`` into ``out_dir``: ``NAME.png``, ``NAME.csv`` (the plotted
    numbers), ``NAME.claims.csv`` (paper vs ours), ``NAME.md`` for tables, ``NAME.pdf`` if asked.

    Returns the written paths and the claims.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = get(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = spec.data()
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
