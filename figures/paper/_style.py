"""Shared plotting helpers (matplotlib only, no numbers).

Paper marks: every number a figure's claims take from a paper is drawn on the figure with one
of the ``paper_*`` helpers (a black dotted line, a black star, a grey band or a boxed note, each
labelled "paper" in the legend once per axes).  Each mark records the numbers it shows in its
artist ``gid`` (``"paper:[v1, v2, ...]"``, :func:`analysis.report.paper_mark`, here
``tag_paper``, the convention the diff and audit reports share); :func:`paper_values` collects them,
:func:`figures.registry.make` writes them into the PNG's metadata (``Paper marks``) and the
figure tests check that every claim with a paper value has a mark showing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.offsetbox import AnchoredText  # noqa: E402

from analysis.report import PAPER_COLOR, paper_values  # noqa: E402  (one gid convention for figures and reports)
from analysis.report import paper_mark as tag_paper  # noqa: E402

__all__ = ["plt", "subplots", "legend_row", "legend_below", "spread_labels", "PAPER_COLOR", "paper_hline", "paper_vline", "paper_point", "paper_band",
           "paper_note", "paper_values", "tag_paper"]

_PAPER_LABEL = "paper"


def subplots(ncols: int, *, width: float = 4.2, height: float = 3.4, nrows: int = 1, **kw):
    """A grid of axes (one row by default) with the project's defaults, flattened."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    for ax in axes.ravel():
        ax.grid(alpha=0.3)
    return fig, axes.ravel()


def legend_row(ncols: int, *, width: float = 4.2, height: float = 3.4, legend_height: float = 1.6,
               nrows: int = 1, **kw):
    """A grid of axes (``nrows`` × ``ncols``, flattened) with, under each row, a band of the same
    columns for legends (``legend_height`` inches; axes off): legends drawn there with
    :func:`legend_below` never cover data, and ``tight_layout`` keeps the plot areas' size.
    Returns ``(fig, axes, legend_axes)``."""
    ratios = [height, legend_height] * nrows
    fig, grid = plt.subplots(2 * nrows, ncols, figsize=(width * ncols, sum(ratios)), squeeze=False,
                             gridspec_kw={"height_ratios": ratios}, **kw)
    axes, spots = grid[0::2].ravel(), grid[1::2].ravel()
    for ax in axes:
        ax.grid(alpha=0.3)
    for ax in spots:
        ax.axis("off")
    return fig, axes, spots


def legend_below(spot: Any, handles: Sequence[Any], *, fontsize: float = 7.5, ncol: int = 1, **kw: Any) -> Any:
    """A legend of ``handles`` at the top of the legend band ``spot`` (from :func:`legend_row`)."""
    return spot.legend(handles=list(handles), loc="upper center", bbox_to_anchor=(0.5, 1.0), fontsize=fontsize,
                       ncol=ncol, frameon=False, **kw)


def spread_labels(ax: Any, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str], *,
                  fontsize: float = 7, gap: float = 1.5, max_iter: int = 400) -> list[Any]:
    """Label the points ``(xs, ys)`` of ``ax`` so that no label overlaps another label or a point:
    each label starts beside its point (on the left of points in the right quarter of the axes),
    and labels that overlap are pushed apart vertically (``gap`` pixels apart); a label moved off
    its point gets a thin grey leader line.  Points drawn at the same place share one label
    ("a = b").  Call it after the figure's layout is final (``tight_layout``): it measures the
    labels as drawn."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    pix = ax.transData.transform(np.column_stack([xs, ys]))
    groups: list[tuple[int, list[str]]] = []   # (first point, names) per place (within a pixel)
    for k, t in enumerate(labels):
        for first, names in groups:
            if np.hypot(*(pix[first] - pix[k])) < 1.0:
                names.append(str(t))
                break
        else:
            groups.append((k, [str(t)]))
    x0, x1 = ax.get_window_extent(renderer).intervalx
    texts = []
    for k, names in groups:
        right = pix[k, 0] > x0 + 0.75 * (x1 - x0)
        texts.append(ax.annotate(" = ".join(names), (xs[k], ys[k]), xytext=(-5 if right else 5, 0),
                                 textcoords="offset points", fontsize=fontsize, va="center",
                                 ha="right" if right else "left", zorder=7))
    boxes = [t.get_window_extent(renderer) for t in texts]
    own = [k for k, _ in groups]
    r = 4.0  # half the size of a point, pixels
    shift = np.zeros(len(texts))

    def overlap(lo_a: float, hi_a: float, lo_b: float, hi_b: float) -> float:
        return min(hi_a, hi_b) - max(lo_a, lo_b) + gap

    for _ in range(max_iter):
        moved = False
        for i, a in enumerate(boxes):
            for j in range(i + 1, len(boxes)):
                b = boxes[j]
                if overlap(a.x0, a.x1, b.x0, b.x1) <= 0:
                    continue
                lo_i, lo_j = a.y0 + shift[i], b.y0 + shift[j]
                o = overlap(lo_i, lo_i + a.height, lo_j, lo_j + b.height)
                if o > 0:
                    up, down = (i, j) if (lo_i + a.height / 2, -i) > (lo_j + b.height / 2, -j) else (j, i)
                    shift[up] += o / 2 + 0.01
                    shift[down] -= o / 2 + 0.01
                    moved = True
            for k, (px, py) in enumerate(pix):  # keep off the other points
                if k == own[i] or overlap(a.x0, a.x1, px - r, px + r) <= 0:
                    continue
                lo = a.y0 + shift[i]
                o = overlap(lo, lo + a.height, py - r, py + r)
                if o > 0:
                    shift[i] += (o + 0.01) if lo + a.height / 2 >= py else -(o + 0.01)
                    moved = True
        if not moved:
            break
    for _k, t, d in zip(own, texts, shift):
        if abs(d) > 0.5:
            t.xyann = (t.xyann[0], d * 72 / fig.dpi)
        if abs(d) > 3:
            ax.annotate("", t.xy, xytext=(t.xyann[0] * 0.8, t.xyann[1]), textcoords="offset points", zorder=6,
                        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5", "shrinkA": 0, "shrinkB": 3})
    return texts


def _label(ax: Any, label: str | None) -> str | None:
    """``label`` for the legend, "paper" only the first time on ``ax`` (``None``: "paper")."""
    if label is not None:
        return label
    return "_nolegend_" if _PAPER_LABEL in ax.get_legend_handles_labels()[1] else _PAPER_LABEL


def paper_hline(ax: Any, y: float, *, label: str | None = None, values: Sequence[float] | None = None,
                xmin: float | None = None, xmax: float | None = None, **kw: Any) -> Any:
    """A horizontal dotted black line at the paper's ``y`` (between data ``xmin`` and ``xmax``
    when given, else across the axes)."""
    style = {"color": PAPER_COLOR, "ls": ":", "lw": 1.3, "zorder": 4, **kw}
    if xmin is None and xmax is None:
        line = ax.axhline(y, label=_label(ax, label), **style)
    else:
        lo, hi = ax.get_xlim()
        line = ax.hlines(y, lo if xmin is None else xmin, hi if xmax is None else xmax, label=_label(ax, label),
                         **{k: v for k, v in style.items() if k != "ls"}, linestyles=style["ls"])
    return tag_paper(line, [y] if values is None else values)


def paper_vline(ax: Any, x: float, *, label: str | None = None, values: Sequence[float] | None = None,
                **kw: Any) -> Any:
    """A vertical dotted black line at the paper's ``x``."""
    line = ax.axvline(x, label=_label(ax, label), **{"color": PAPER_COLOR, "ls": ":", "lw": 1.3, "zorder": 4, **kw})
    return tag_paper(line, [x] if values is None else values)


def paper_point(ax: Any, x: float, y: float, *, label: str | None = None, values: Sequence[float] | None = None,
                **kw: Any) -> Any:
    """A black star at the paper's point ``(x, y)``; ``values``: the numbers it shows (default
    ``[y]``; pass ``[x, y]`` when the claim is about both)."""
    style = {"marker": "*", "s": 110, "color": PAPER_COLOR, "edgecolor": "white", "linewidth": 0.6, "zorder": 6, **kw}
    pts = ax.scatter([x], [y], label=_label(ax, label), **style)
    return tag_paper(pts, [y] if values is None else values)


def paper_band(ax: Any, lo: float, hi: float, *, axis: str = "y", start: float | None = None,
               stop: float | None = None, label: str | None = None, values: Sequence[float] | None = None,
               **kw: Any) -> Any:
    """A grey band ``[lo, hi]`` the paper gives, on the ``y`` (horizontal band) or ``x`` axis,
    drawn only over ``[start, stop]`` of the other axis when given (the range the paper's
    statement covers)."""
    style = {"color": "0.55", "alpha": 0.22, "lw": 0, "zorder": 1, **kw}
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    span, fill, other = ((ax.axhspan, ax.fill_between, ax.get_xlim) if axis == "y"
                         else (ax.axvspan, ax.fill_betweenx, ax.get_ylim))
    if start is None and stop is None:
        art = span(lo, hi, label=_label(ax, label), **style)
    else:
        a, b = other()
        art = fill([a if start is None else start, b if stop is None else stop], lo, hi,
                   label=_label(ax, label), **style)
    return tag_paper(art, [lo, hi] if values is None else values)


def paper_note(ax: Any, text: str, values: Sequence[float], *, loc: str = "lower right",
               fontsize: float = 7, **kw: Any) -> Any:
    """A boxed note ``text`` (e.g. "paper: m_S/m_F = δ = 0.5") inside ``ax`` at ``loc``, for a
    paper number that is not a position on the axes; ``values`` are the numbers it states."""
    box = AnchoredText(text, loc=loc, prop={"fontsize": fontsize}, frameon=True, **kw)
    box.patch.set_boxstyle("round,pad=0.3")
    box.patch.set_edgecolor(PAPER_COLOR)
    box.patch.set_alpha(0.85)
    ax.add_artist(box)
    return tag_paper(box, values)


def passk_bars(ax: Any, df: Any, names: list[str], *, fontsize: float = 7) -> None:
    """Bars of held-out pass@1 and pass@k (mean ± s.e. over seeds, columns ``pass1``, ``pass1_se``,
    ``passk``, ``passk_se``, ``k``) per row of ``df``, with the SFT start (``sft_pass1``,
    ``sft_passk``) as dashed lines: the tables of the trainer experiments."""
    x = np.arange(len(df))
    k = int(df.k.iloc[0])
    w = 0.38
    ax.bar(x - w / 2, df.pass1, w, yerr=df.pass1_se, color="C0", label="pass@1 (mean ± s.e. over seeds)")
    ax.bar(x + w / 2, df.passk, w, yerr=df.passk_se, color="C2", label=f"pass@{k}")
    ax.axhline(df.sft_pass1.iloc[0], color="C0", ls="--", lw=1, label="SFT start: pass@1")
    ax.axhline(df.sft_passk.iloc[0], color="C2", ls="--", lw=1, label=f"SFT start: pass@{k}")
    ax.set_xticks(x, names, fontsize=fontsize)
