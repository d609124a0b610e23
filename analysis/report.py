"""Checkpoint-diff and hidden-state reports: Markdown, self-contained HTML, JSON and PNGs.

:func:`write_report` turns the document of :func:`analysis.diff.diff` into a
directory ``report.md``, ``report.html`` (every plot embedded as a base64 PNG, no external
file or script), ``report.json`` and the PNGs; :func:`write_hidden_states_report` does the
same for :func:`analysis.hidden_states.geometry` (``hidden_states.*``).  Everything is
written into a temporary directory beside ``out`` and renamed to ``out`` when complete
(an existing report directory is replaced only then, :func:`rlvr_plumbing.io.atomic_dir`); files
inside go through :func:`rlvr_plumbing.io.atomic_write`.  JSON follows :mod:`rlvr_plumbing.serialize`
(NaN → ``null``, ±inf → ``"inf"``/``"-inf"``); numbers in tables are
:func:`rlvr_plumbing.serialize.fmt_number` with 4 significant digits.

The diff report opens with a verdict (OH share, head r1 and s1/s2, Inner, density, each beside
the values of FADE's Sec. 5 output-head table, :data:`FADE_SEC5_TABLE`), then the precision of
every checkpoint (dtype, mismatch flag, rounding floor), the LoRA adapter (adapter directories
only: settings, what is exact, the largest low-rank updates), the summary, density, output head
(with the orientation rule of ``u``), layers, mixture of experts (MoE checkpoints only: the experts
of each block aggregated, routers and shared experts, ``experts.png``), alignment and clustering,
and the dynamics (a series: bit-identical share between consecutive checkpoints and linearity in
the step beside random walks; several runs: Jaccard of their update masks beside the random
baseline; :mod:`analysis.diff.dynamics`).

The report is drawn from the document alone (no checkpoint is re-read), so a saved
``report.json`` can be rendered again: ``write_report(json.load(open(p)), out)``.

Generic helpers, public for other reports (``analysis.audit.report``): :func:`render_markdown`,
:func:`render_html`, ``Block``, :func:`png_bytes` (a figure's PNG bytes, cropped to its content,
with the numbers of its paper marks in the PNG metadata ``Paper marks``), :func:`new_figure`
(a matplotlib ``Figure`` without pyplot), :func:`y_room` (y limits with room for flat data),
:func:`paper_mark` / :func:`paper_values` (the paper's reference numbers drawn on a plot, in
black and labelled "paper") and :func:`coincides_with` (a curve drawn over an earlier equal
one says so in its legend label).

The diff report opens with the verdict table and ``verdict.png`` (each checkpoint beside
FADE's Sec. 5 table); plots label their axes with symbols and units, explain every colour and
line style in a legend and draw the paper's numbers where the report compares with them
(FADE App. 15.1 for ``u``, Table 12 for the alignment, Tables 10-11 for the hidden states).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_plumbing.io import atomic_dir, atomic_write, atomic_write_text
from rlvr_plumbing.serialize import dumps, fmt_number

__all__ = ["write_report", "with_verdicts", "write_hidden_states_report", "to_json", "render_markdown", "render_html",
           "png_bytes", "new_figure", "y_room", "paper_mark", "paper_values", "coincides_with",
           "PAPER_COLOR", "Block", "REPORT_FILES", "REPORT_MARKERS", "HIDDEN_STATES_MARKERS",
           "FADE_SEC5_TABLE", "FADE_LAYERS", "FADE_STATED_REGIMES", "FAILURE_BIASED", "SIGN_BALANCED",
           "fade_regime", "verdict_edges"]

#: files every diff report holds (PNGs come in addition)
REPORT_FILES = ("report.md", "report.html", "report.json")
#: a non-empty directory holding one of these is an earlier diff report (replaced without --overwrite)
REPORT_MARKERS = ("report.json",)
#: ... an earlier hidden-state report (or diff report) directory
HIDDEN_STATES_MARKERS = ("hidden_states.json", "report.json")

Block = tuple  # ("h2", text) | ("p", text) | ("table", headers, rows) | ("img", file, caption)

#: FADE's Sec. 5 output-head table (Qwen 2.5 7B; cited in its text as "Table 8", the table beside
#: Fig. 8, not the App. 14 enrichment table): per row (label, OH share %, s1/s2, rank-1 %, Inner %).
#: Ranges are (low, high); FADE reports no update density.  Checked against the paper's text
#: (every number as printed; the symmetric OH "< 10 %" is stored as (0, 10), the "∼" values of the
#: asymmetric and symmetric rows as one-point ranges).
FADE_SEC5_TABLE = (
    ("FADE H*=0.5, 10k", 6.1, 4.10, 38.7, 3.32),
    ("FADE H*=0.5, 33k", 6.3, 3.84, 54.4, 3.32),
    ("FADE H*=1.0, 10k", 13.2, 3.51, 55.9, 3.07),
    ("FADE H*=1.0, 40k", 66.9, 5.34, 88.2, 1.17),
    ("FADE H*=1.3, 10k", 23.9, 3.25, 68.3, 2.69),
    ("FADE H*=1.3, 30k", 72.7, 5.77, 91.2, 0.96),
    ("asymmetric (failure-biased) runs", (90, 90), (6.96, 8.51), (78, 96), (0.3, 0.3)),
    ("symmetric (sign-balanced) runs", (0, 10), (3.61, 3.98), (61, 62), (3.2, 3.2)),
)
#: blocks of the model behind every row of :data:`FADE_SEC5_TABLE`: Qwen 2.5 7B, 28 layers (FADE App. 15
#: model list); the rows agree: OH + 28·Inner = 98.4-99.7 % (the rest: embeddings and norms)
FADE_LAYERS = 28
#: the rows of :data:`FADE_SEC5_TABLE` whose regime the paper states, and where: the asymmetric and
#: symmetric rows by their names (Sec. 4.2, Table 9); H* = 0.5 "keeps ‖W_Δ‖ small and the update
#: full-rank", the sign-balanced end of the transition H* controls; H* = 1.3 at 30k "reproduces the
#: rank-1 collapse seen in static failure-biased methods" (Sec. 5).  The other three FADE rows (H* = 1.0,
#: H* = 1.3 at 10k) the paper places on no side.
FADE_STATED_REGIMES = {0: "sign-balanced", 1: "sign-balanced", 5: "failure-biased",
                       6: "failure-biased", 7: "sign-balanced"}


# ------------------------------------------------------------------ helpers
def to_json(doc: dict) -> str:
    """The document as strict JSON, indented: the one JSON policy of
    :mod:`rlvr_plumbing.serialize` (NaN → ``null``, ±inf → ``"inf"``/``"-inf"``)."""
    return dumps(doc, indent=1)


#: numbers in tables: 4 significant digits, integers with thousands separators
_fmt = functools.partial(fmt_number, digits=4, thousands=True)


def _pct(x: Any, digits: int = 3) -> str:
    """``x`` (a fraction) as a percentage with ``digits`` significant digits; ``—`` for None."""
    return "—" if x is None else fmt_number(100 * float(x), digits) + "%"


def _short(path: str) -> str:
    p = Path(str(path))
    return p.name if p.parent.name in ("", ".") else f"{p.parent.name}/{p.name}"


# ---------------------------------------------------------------- renderers
def render_markdown(title: str, blocks: Sequence[Block]) -> str:
    """Markdown of a list of blocks (tables as pipe tables, images as relative links)."""
    lines = [f"# {title}", ""]
    for b in blocks:
        if b[0] == "h2":
            lines += [f"## {b[1]}", ""]
        elif b[0] == "h3":
            lines += [f"### {b[1]}", ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "table":
            _, head, rows = b
            lines.append("| " + " | ".join(str(h).replace("|", "\\|") for h in head) + " |")
            lines.append("|" + "---|" * len(head))
            for r in rows:
                lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
            lines.append("")
        elif b[0] == "img":
            lines += [f"![{b[2]}]({b[1]})", ""]
    return "\n".join(lines)


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}"
        "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}"
        "figure{margin:1em 0}figcaption{font-size:.85em;color:#555}code{background:#f6f6f6}")


def render_html(title: str, blocks: Sequence[Block], images: dict[str, bytes]) -> str:
    """Self-contained HTML: PNGs embedded as ``data:image/png;base64`` URIs, inline CSS."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>"]
    for b in blocks:
        if b[0] in ("h2", "h3"):
            parts.append(f"<{b[0]}>{e(b[1])}</{b[0]}>")
        elif b[0] == "p":
            parts.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "table":
            _, head, rows = b
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>")
            for r in rows:
                parts.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>")
            parts.append("</table>")
        elif b[0] == "img":
            data = base64.b64encode(images[b[1]]).decode("ascii")
            parts.append(f"<figure><img alt='{e(b[2])}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{e(b[2])}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def png_bytes(fig: Any) -> bytes:
    """The PNG bytes of a matplotlib ``Figure`` (110 dpi, cropped to its drawn content plus a
    thin margin, so that no label is cut), for :func:`render_html` / files.  The numbers its
    paper marks show (:func:`paper_mark`) are written into the PNG's ``Paper marks`` metadata.

    Examples
    --------
    >>> fig, ax = new_figure(2, 1)
    >>> _ = ax.plot([0, 1], [0, 1])
    >>> png_bytes(fig)[:4]
    b'\\x89PNG'
    """
    import io

    buf = io.BytesIO()
    marks = paper_values(fig)
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", pad_inches=0.04,
                metadata={"Paper marks": json.dumps(marks)} if marks else None)
    return buf.getvalue()


def new_figure(w: float = 7.0, h: float = 3.6, ncols: int = 1, *, nrows: int = 1):
    """A matplotlib ``Figure`` (object API: no pyplot state, no backend switch) and its axes
    (one ``Axes`` for a 1 × 1 grid, else an array, as ``Figure.subplots``).

    Examples
    --------
    >>> fig, (a, b) = new_figure(6, 3, 2)
    >>> [float(x) for x in fig.get_size_inches()]
    [6.0, 3.0]
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(nrows, ncols)
    return fig, axes


# ------------------------------------------------------------- paper marks
#: colour of the paper's reference marks (black dotted lines and stars, as the paper figures)
PAPER_COLOR = "black"


def paper_mark(artist: Any, values: Sequence[float]) -> Any:
    """Record on ``artist`` that it shows the paper's ``values`` (its ``gid``
    ``"paper:[v1, ...]"``, the convention of the paper figures); :func:`png_bytes` writes the
    marks of a figure into the PNG's ``Paper marks`` metadata.  Returns ``artist``."""
    vals = [float(v) for v in values]
    old = artist.get_gid() or ""
    if old.startswith("paper:"):
        vals = json.loads(old[6:]) + vals
    artist.set_gid("paper:" + json.dumps(vals))
    return artist


def paper_values(fig: Any) -> list[float]:
    """Every number the paper marks of ``fig`` show (:func:`paper_mark`).

    Examples
    --------
    >>> fig, ax = new_figure(2, 1)
    >>> _ = paper_mark(ax.axhline(0.97), [0.97])
    >>> paper_values(fig)
    [0.97]
    """
    out: list[float] = []
    for art in fig.findobj(lambda a: (a.get_gid() or "").startswith("paper:")):
        out += json.loads(art.get_gid()[6:])
    return out


def coincides_with(y: Sequence[float], drawn: Sequence[tuple[str, Sequence[float]]], *,
                   rtol: float = 1e-6) -> str | None:
    """The label of the first ``(label, values)`` of ``drawn`` equal to ``y`` (same NaNs, finite
    values within ``rtol`` of the largest magnitude), else ``None``: a curve drawn exactly over an
    earlier one says so in its legend label instead of vanishing.

    Examples
    --------
    >>> coincides_with([1.0, 2.0], [("a", [1.0, 2.5]), ("b", [1.0, 2.0 + 1e-12])])
    'b'
    >>> coincides_with([1.0, 2.0], [("a", [1.0, 2.5])]) is None
    True
    """
    a = np.asarray(y, dtype=float)
    for label, values in drawn:
        b = np.asarray(values, dtype=float)
        if a.shape != b.shape or not a.size or not np.array_equal(np.isnan(a), np.isnan(b)):
            continue
        fin = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(a[~fin], b[~fin]):
            continue
        scale = float(np.abs(np.concatenate([a[fin], b[fin]])).max()) if fin.any() else 0.0
        if np.all(np.abs(a[fin] - b[fin]) <= rtol * scale):
            return label
    return None


#: line style and marker of the i-th series (colour ``Ci``): curves that coincide stay visible
_STYLES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"))


def _style(i: int, *, marker: bool = True) -> dict:
    ls, mk = _STYLES[i % len(_STYLES)]
    return {"color": f"C{i % 10}", "ls": ls, **({"marker": mk, "ms": 4.5, "mfc": "none"} if marker else {})}


def _same_note(label: str, y: Any, drawn: list[tuple[str, Any]]) -> str:
    """``label``, with "(coincides with OTHER)" when ``y`` equals an earlier curve; ``y`` is recorded."""
    other = coincides_with(y, drawn)
    drawn.append((label, y))
    return label if other is None else f"{label} (coincides with {other})"


def _legend(ax: Any, **kw: Any) -> None:
    ax.legend(fontsize=7, framealpha=0.85, **kw)


def _integer_x(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# ------------------------------------------------------------------- plots
def y_room(ax: Any, values: Sequence[float], *, from_zero: bool = True, margin: float = 0.12) -> tuple[float, float]:
    """Set y limits that leave room around the data, flat data included (a constant line sits
    inside the frame, not on it); returns ``(bottom, top)``.

    Examples
    --------
    >>> fig, ax = new_figure(3, 2)
    >>> y_room(ax, [4.0, 4.0, 4.0])          # a flat line at 4: drawn at 89% of the height
    (0.0, 4.48)
    >>> y_room(ax, [0.0, 0.0])
    (0.0, 1.0)
    """
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return ax.get_ylim()
    lo, hi = float(v.min()), float(v.max())
    if from_zero:
        lo = min(lo, 0.0)
    span = hi - lo
    if span == 0.0:
        span = abs(hi) if hi != 0 else 1.0
        if from_zero or hi == 0:
            bottom, top = (lo, hi + 0.25 * span) if hi != 0 else (0.0, 1.0)
        else:
            bottom, top = lo - 0.25 * span, hi + 0.25 * span
    else:
        bottom = lo if from_zero and lo == 0.0 else lo - margin * span
        top = hi + margin * span
    ax.set_ylim(bottom, top)
    return float(bottom), float(top)


def _labels(doc: dict) -> list[str]:
    return [(f"step {c['step']}" if c.get("step") is not None else _short(c["path"])) for c in doc["checkpoints"]]


#: the verdict figure's panels: (column of FADE_SEC5_TABLE, factor applied to FADE's column, name of the
#: metric in verdict_edges(), y label, this report's value of a checkpoint)
_VERDICT_PANELS = (
    (1, 1, "OH", "OH share: output head's\nshare of ‖ΔW‖² (%)", lambda c: _scaled(c["output_head"].get("l2_share"))),
    (3, 1, "r1", "head r1 = σ₁²/‖ΔW_head‖²_F (%)", lambda c: _scaled(c["output_head"].get("rank1_fraction"))),
    (2, 1, "s1/s2", "head s1/s2 = σ₁/σ₂", lambda c: c["output_head"].get("s1_s2")),
    (4, FADE_LAYERS, "Inner×L", "Inner × L: blocks' share of ‖ΔW‖²\n(mean block share ÷ even split 1/L, %;"
     "\nFADE: Inner × 28)", lambda c: _scaled(_inner_x_layers(c))),
)
_FAILURE_BIASED, _SIGN_BALANCED = "tab:red", "tab:blue"


def _scaled(x: Any, by: float = 100.0) -> float | None:
    return None if x is None or not np.isfinite(x) else by * float(x)


def _tick(label: str, width: int = 18) -> str:
    """A checkpoint's label short enough for a tick: its last path part, cut to ``width`` from the left."""
    last = label.rsplit("/", 1)[-1]
    return last if len(last) <= width else "…" + last[-(width - 1):]


def _plot_verdict(doc: dict, labs: list[str]) -> bytes:
    """Each checkpoint's OH share, head r1, head s1/s2 and Inner × L beside FADE's Sec. 5 table
    (FADE's Inner times :data:`FADE_LAYERS`): the six FADE runs (stars), the ranges of the
    failure-biased and sign-balanced runs, and the verdict's edges (:func:`verdict_edges`, dotted)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(labs)
    fig, axes = new_figure(11.5, 3.3, 4)
    edges = verdict_edges()
    for ax, (col, factor, metric, ylabel, ours) in zip(axes, _VERDICT_PANELS):
        vals = [ours(c) for c in doc["checkpoints"]]
        xs = [i for i, v in enumerate(vals) if v is not None]
        ax.plot(xs, [vals[i] for i in xs], ls="none", marker="o", ms=7, color="C0", zorder=5)
        runs = [factor * r[col] for r in FADE_SEC5_TABLE[:6]]
        paper_mark(ax.scatter(n + np.linspace(-0.2, 0.2, len(runs)), runs, marker="*", s=80, color=PAPER_COLOR, edgecolor="white",
                              linewidth=0.5, zorder=6), runs)
        every = [v for v in vals if v is not None] + runs
        for row, color in ((FADE_SEC5_TABLE[6], _FAILURE_BIASED), (FADE_SEC5_TABLE[7], _SIGN_BALANCED)):
            lo, hi = (factor * x for x in row[col])
            art = (ax.axhspan(lo, hi, color=color, alpha=0.18, lw=0, zorder=1) if hi > lo else
                   ax.axhline(lo, color=color, ls="--", lw=1.3, zorder=2))
            paper_mark(art, [lo, hi])
            every += [lo, hi]
        for regime, color in (("failure-biased", _FAILURE_BIASED), ("sign-balanced", _SIGN_BALANCED)):
            ax.axhline(edges[metric][regime], color=color, ls=":", lw=1.0, zorder=2)
            every.append(edges[metric][regime])
        pos = [v for v in every if v > 0]
        if col == 2 and pos and max(pos) > 30 * min(pos):      # a near-exact rank-1 head: s1/s2 spans decades
            ax.set_yscale("log")
        else:
            bottom, top = y_room(ax, every)
            ax.set_ylim(bottom - 0.04 * (top - bottom), top)        # a dot at 0 is drawn whole
        for i in (i for i, v in enumerate(vals) if v is None):     # say why a checkpoint has no dot
            ax.text(i, 0.5, "no value", transform=ax.get_xaxis_transform(), rotation=90, ha="center", va="center",
                    fontsize=7, color="0.4")
        ax.set_xlim(-0.6, n + 0.6)
        ax.set_xticks(range(n + 1), [_tick(lab) for lab in labs] + ["FADE runs"], rotation=30, ha="right",
                      fontsize=7)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.25, lw=0.5, axis="y")
    fig.legend(handles=[
        Line2D([], [], ls="none", marker="o", ms=7, color="C0", label="this report's checkpoints"),
        Line2D([], [], ls="none", marker="*", ms=9, color=PAPER_COLOR,
               label="paper: the six FADE runs (Sec. 5 table, Qwen 2.5 7B)"),
        Patch(color=_FAILURE_BIASED, alpha=0.3, label="paper: failure-biased runs (band: range, dashed: one value)"),
        Patch(color=_SIGN_BALANCED, alpha=0.3, label="paper: sign-balanced runs (band: range, dashed: one value)"),
        Line2D([], [], ls=":", color="0.3", label="verdict edges: failure-biased (red), sign-balanced (blue)"),
    ], loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    return png_bytes(fig)


def _plot_head_spectrum(doc: dict) -> bytes | None:
    fig, ax = new_figure()
    drawn: list[tuple[str, Any]] = []
    for i, (lab, c) in enumerate(zip(_labels(doc), doc["checkpoints"])):
        h = c["output_head"]
        s = h.get("singular_values") or []
        if s:
            y = np.maximum(np.asarray(s, dtype=float), 1e-300)
            label = f"{lab}: s1/s2 = {_fmt(h.get('s1_s2'))}, r1 = {_pct(h.get('rank1_fraction'))}"
            ax.plot(np.arange(1, len(s) + 1), y, lw=1.3, **_style(i, marker=len(s) <= 40),
                    label=_same_note(label, y, drawn))
    if not drawn:
        return None
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("index i of the singular value (log scale)")
    ax.set_ylabel("$\\sigma_i$ of the output-head ΔW (log scale)")
    ax.grid(alpha=0.25, lw=0.5)
    _legend(ax, loc="lower left")
    return png_bytes(fig)


def _plot_l2_share(doc: dict) -> bytes:
    fig, ax = new_figure()
    ys: list[float] = []
    drawn: list[tuple[str, Any]] = []
    for i, (lab, c) in enumerate(zip(_labels(doc), doc["checkpoints"])):
        pl = c["per_layer"]
        if pl:
            y = [100 * p["l2_share"] for p in pl]
            ys += y
            label = f"{lab} (output head: {_pct(c['output_head']['l2_share'])} of ‖ΔW‖²)"
            ax.plot([p["layer"] for p in pl], y, **_style(i), label=_same_note(label, y, drawn))
    y_room(ax, ys)
    _integer_x(ax)
    ax.set_xlabel("transformer block ℓ")
    ax.set_ylabel("block's share of ‖ΔW‖²_F (%)")
    ax.grid(alpha=0.25, lw=0.5)
    _legend(ax, loc="lower left")
    return png_bytes(fig)


def _plot_layer_s12(doc: dict) -> bytes | None:
    fig, ax = new_figure()
    every: list[float] = [1.0]
    drawn: list[tuple[str, Any]] = []
    for i, (lab, c) in enumerate(zip(_labels(doc), doc["checkpoints"])):
        xs = [p["layer"] for p in c["per_layer"] if p["s1_s2_mean"] is not None]
        ys = [p["s1_s2_mean"] for p in c["per_layer"] if p["s1_s2_mean"] is not None]
        if xs:
            ax.plot(xs, ys, **_style(i), label=_same_note(lab, xs + ys, drawn))
            every += ys
    if not drawn:
        return None
    ax.axhline(1.0, color="0.4", lw=0.8, ls=(0, (1, 2)), label="s1/s2 = 1: no dominant direction")
    y_room(ax, every)
    _integer_x(ax)
    ax.set_xlabel("transformer block ℓ")
    ax.set_ylabel("mean σ₁/σ₂ of the block's 2-D ΔW")
    ax.grid(alpha=0.25, lw=0.5)
    _legend(ax, loc="lower left")
    return png_bytes(fig)


#: FADE App. 15.1 (Qwen 2.5 7B): u has one sign on 99.93-99.97% of the tokens, the largest entries on the
#: other side (so, oriented as here, sorted u changes sign there); half of ‖u‖² lies in ~22% of the vocabulary
_FADE_U_SIGN = (0.9993, 0.9997)
_FADE_U_HALF_ENERGY = 0.22


def _plot_u(doc: dict) -> bytes | None:
    fig, ax = new_figure()
    drawn: list[tuple[str, Any]] = []
    for i, (lab, c) in enumerate(zip(_labels(doc), doc["checkpoints"])):
        q = c["output_head"].get("u_quantiles") or []
        if q:
            ax.plot(np.linspace(0, 1, len(q)), q, lw=1.3, **_style(i, marker=False),
                    label=_same_note(lab, q, drawn))
    if not drawn:
        return None
    ax.axhline(0, color="0.4", lw=0.6)
    lo, hi = _FADE_U_SIGN
    paper_mark(ax.axvline((lo + hi) / 2, color=PAPER_COLOR, ls=":", lw=1.3, zorder=4,
                          label=f"paper: sign change at {100 * lo:g}–{100 * hi:g}% of the vocabulary"), [lo, hi])
    from matplotlib.offsetbox import AnchoredText

    note = AnchoredText(f"paper (FADE App. 15.1, Qwen 2.5 7B):\nu < 0 on {100 * lo:g}–{100 * hi:g}% of tokens, "
                        f"largest $|u_i|$ positive;\nhalf of ‖u‖² in ~{100 * _FADE_U_HALF_ENERGY:g}% of the vocabulary",
                        loc="lower right", prop={"fontsize": 7}, frameon=True)
    note.patch.set_boxstyle("round,pad=0.3")
    note.patch.set_edgecolor(PAPER_COLOR)
    ax.add_artist(paper_mark(note, [lo, hi, _FADE_U_HALF_ENERGY]))
    ax.set_xlabel("fraction of the vocabulary (tokens sorted by $u_i$)")
    ax.set_ylabel("$u_i$ (entry of the unit vector u)")
    ax.grid(alpha=0.25, lw=0.5)
    _legend(ax, loc="upper left")
    return png_bytes(fig)


def _plot_density(doc: dict) -> bytes:
    fig, ax = new_figure(6, 3.4)
    tols = [str(t) for t in doc["checkpoints"][0]["density"]]
    ys: list[float] = []
    drawn: list[tuple[str, Any]] = []
    for i, (lab, c) in enumerate(zip(_labels(doc), doc["checkpoints"])):
        y = [100 * c["density"][t] for t in tols]
        ys += y
        ax.plot(range(len(tols)), y, **_style(i), label=_same_note(lab, y, drawn))
    y_room(ax, ys)
    ax.set_xticks(range(len(tols)), [f"> {t}" for t in tols])
    ax.set_xlabel("threshold t on |ΔW_ij| (all tensors)")
    ax.set_ylabel("entries with |ΔW_ij| > t (%)")
    ax.grid(alpha=0.25, lw=0.5)
    _legend(ax, loc="lower left")
    return png_bytes(fig)


#: FADE Table 12 (Qwen 2.5 7B, GRPO): the head's u at step 1,200 already has |cos| 0.97 with step 15,000's
_FADE_HEAD_ALIGNMENT = 0.97


def _plot_alignment(doc: dict) -> bytes:
    al = doc["alignment"]
    steps = al["steps"]
    by_step = all(s is not None for s in steps)
    x = list(steps) if by_step else list(range(len(steps)))
    fig, ax = new_figure()
    ax.plot(x, [np.nan if v is None else v for v in al["output_head"]["u"]], color="C0", ls="-", marker="o", ms=6,
            lw=1.8, label="output head")
    for i, (k, v) in enumerate(al["thirds"].items(), start=1):
        ax.plot(x, [np.nan if y is None else y for y in v["u"]], **_style(i), label=f"{k} blocks (mean)")
    paper_mark(ax.axhline(_FADE_HEAD_ALIGNMENT, color=PAPER_COLOR, ls=":", lw=1.3, zorder=4,
                          label=f"paper: GRPO head, step 1,200 vs 15,000: {_FADE_HEAD_ALIGNMENT:g} (FADE Table 12)"),
               [_FADE_HEAD_ALIGNMENT])
    ax.set_ylim(0, 1.05)
    if by_step:
        _integer_x(ax)
    else:
        ax.set_xticks(x, _labels(doc), fontsize=7)
    ax.set_xlabel("training step" if by_step else "checkpoint")
    ax.set_ylabel("|cos u| with the last checkpoint")
    ax.grid(alpha=0.25, lw=0.5)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return png_bytes(fig)


def _plot_clustering(doc: dict) -> bytes:
    from scipy.cluster.hierarchy import dendrogram

    cl = doc["clustering"]
    C = np.asarray(cl["cosine_global"], dtype=float)
    labs = [_short(p) for p in cl["labels"]]
    fig, (a1, a2) = new_figure(10, 4, 2)
    im = a1.imshow(C, vmin=-1, vmax=1, cmap="RdBu_r")
    if len(labs) <= 12:     # the values themselves, legible on either end of the colour map
        for (i, j), v in np.ndenumerate(C):
            a1.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if abs(v) > 0.6 else "black")
    a1.set_xticks(range(len(labs)), labs, rotation=60, ha="right", fontsize=7)
    a1.set_yticks(range(len(labs)), labs, fontsize=7)
    a1.set_title("cos(ΔW_a, ΔW_b), all tensors flattened", fontsize=9)
    fig.colorbar(im, ax=a1, shrink=0.8, label="cosine")
    Z = np.asarray(cl["linkage"], dtype=float)
    dendrogram(Z, labels=labs, ax=a2, leaf_rotation=60, leaf_font_size=7)
    a2.set_ylabel("distance 1 − cos (average linkage)")
    a2.set_title("Hierarchical clustering of runs", fontsize=9)
    return png_bytes(fig)


# ------------------------------------------------------------------ report
class Page:
    """The blocks and embedded images of a report, filled section by section."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.images: dict[str, bytes] = {}

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)

    def img(self, name: str, data: bytes | None, caption: str) -> None:
        """An image block (skipped when the plot had nothing to draw)."""
        if data is not None:
            self.images[name] = data
            self.blocks.append(("img", name, caption))


def _fade_range(col: int, factor: float = 1.0) -> str:
    """FADE's values of one column (times ``factor``): the FADE-run range, then the asymmetric and
    symmetric rows."""
    runs = [factor * r[col] for r in FADE_SEC5_TABLE[:6]]
    asym = tuple(factor * x for x in FADE_SEC5_TABLE[6][col])
    sym = tuple(factor * x for x in FADE_SEC5_TABLE[7][col])

    def g(x: float) -> str:
        return f"{x:.4g}"

    def rng(x: Any) -> str:
        lo, hi = x
        return g(lo) if lo == hi else f"{g(lo)}-{g(hi)}"
    sym_txt = f"<{g(sym[1])}" if col == 1 else f"≈{rng(sym)}" if sym[0] == sym[1] else rng(sym)
    asym_txt = f"≈{rng(asym)}" if asym[0] == asym[1] else rng(asym)
    return f"FADE runs {g(min(runs))}-{g(max(runs))}; failure-biased {asym_txt}; sign-balanced {sym_txt}"


#: the regimes a verdict commits to: the key used in votes -> the text of the verdict
FAILURE_BIASED = "failure-biased regime (like FADE's asymmetric runs)"
SIGN_BALANCED = "sign-balanced regime (like FADE's symmetric runs and its H* = 0.5 runs)"
_REGIME_TEXT = {"failure-biased": FAILURE_BIASED, "sign-balanced": SIGN_BALANCED}
#: the metrics that vote: (name, column of FADE_SEC5_TABLE, factor applied to FADE's column, True when the
#: failure-biased runs have the larger values, unit)
_VOTERS = (
    ("OH", 1, 1, True, "%"),
    ("r1", 3, 1, True, "%"),
    ("s1/s2", 2, 1, True, ""),
    ("Inner×L", 4, FADE_LAYERS, False, "%"),
)
#: OH and Inner×L are read only when the output head holds at most this fraction of the compared entries
#: (FADE's sign-balanced OH bound "< 10 %"; Qwen 2.5 7B: 152,064·3,584 / 7.62e9 = 7.2 %)
_HEAD_ENTRY_LIMIT = 0.10
#: a checkpoint step at or below this reads no failure-biased vote from r1 or s1/s2 (FADE Table 9a: at 500
#: steps every method's head update is rank-1 dominant)
_EARLY_STEPS = 500
#: a global rounding floor at or above this fraction of the measured ‖ΔW‖ (dtypes differ) reads nothing
_FLOOR_LIMIT = 0.5


def verdict_edges() -> dict[str, dict[str, float]]:
    """The edges of the verdict's votes, from :data:`FADE_SEC5_TABLE` and :data:`FADE_STATED_REGIMES`.

    Returns
    -------
    dict
        ``{metric: {"sign-balanced": edge, "failure-biased": edge}}`` in the table's units (OH, r1 and
        Inner×L in %, s1/s2 a ratio; Inner×L = FADE's Inner × :data:`FADE_LAYERS`).

    Notes
    -----
    A regime's edge is its least extreme value over the rows the paper puts in that regime (the end of
    a range nearest the other regime): for OH, r1 and s1/s2 (larger when failure-biased) the
    failure-biased edge is the smallest such value and the sign-balanced edge the largest; for Inner×L
    the other way round.  This gives OH ≤ 10 | ≥ 72.7 %, r1 ≤ 62 | ≥ 78 %, s1/s2 ≤ 4.10 | ≥ 5.77 and
    Inner×L ≥ 89.6 | ≤ 26.88 % (sign-balanced | failure-biased).  Each of FADE's rows with a stated
    regime lies inside its own regime's edges, so the edges are not tuned to any run of ours.
    """
    out = {}
    for name, col, k, up, _unit in _VOTERS:
        edges = {}
        for regime in ("sign-balanced", "failure-biased"):
            near_high = (regime == "sign-balanced") == up      # the end of a range nearest the other regime
            ends = []
            for i, reg in FADE_STATED_REGIMES.items():
                if reg == regime:
                    v = FADE_SEC5_TABLE[i][col]
                    lo, hi = v if isinstance(v, tuple) else (v, v)
                    ends.append(k * (hi if near_high else lo))
            edges[regime] = max(ends) if near_high else min(ends)
        out[name] = edges
    return out


def _inner_x_layers(c: dict) -> float | None:
    """Inner × L of a checkpoint entry (the blocks' total share of ‖ΔW‖²); from ``per_layer`` for
    documents written before ``inner_l2_share_x_layers`` existed."""
    x = c.get("inner_l2_share_x_layers")
    if x is None and c.get("per_layer"):
        x = float(sum(pl["l2_share"] for pl in c["per_layer"]))
    return x


def _head_entry_fraction(c: dict) -> float | None:
    """The output head's fraction of the compared entries (None when the entry lacks the shape or count)."""
    h, n = c.get("output_head") or {}, c.get("n_entries")
    shape = h.get("shape")
    if not shape or not n:
        return None
    rows = h.get("rows_compared") or shape[0]
    return float(rows * int(np.prod(shape[1:])) / n)


def _num(x: float, unit: str) -> str:
    return ("∞" if x == float("inf") else fmt_number(x, 3)) + (" %" if unit else "")


def fade_regime(c: dict) -> dict[str, Any]:
    """Which of FADE's regimes a checkpoint's update is in, or why that cannot be said.

    Parameters
    ----------
    c : dict
        One entry of ``doc["checkpoints"]`` of :func:`analysis.diff.diff` (read: ``output_head``
        ``l2_share``, ``rank1_fraction``, ``s1_s2``, ``shape``, ``rows_compared``; ``inner_l2_share_x_layers``
        or ``per_layer``; ``n_entries``, ``step``, ``dtype_differs``, ``rounding_floor``).

    Returns
    -------
    dict
        ``regime``: ``"failure-biased"``, ``"sign-balanced"`` or None; ``reading``: :data:`FAILURE_BIASED`,
        :data:`SIGN_BALANCED` or ``"cannot classify: <reason>"``; ``votes``: per metric ``{"metric",
        "value"`` (table units, None if absent), ``"vote"`` (``"failure-biased"``, ``"sign-balanced"``,
        ``"between"`` or ``"not read"``), ``"why"`` (why not read)``}``; ``votes_text``: the votes in one line.

    Notes
    -----
    Four metrics vote, each against the edges of :func:`verdict_edges` (inclusive): OH share, head r1,
    head s1/s2 (σ2 = 0: s1/s2 = ∞) and Inner×L = the blocks' total share of ‖ΔW‖² (FADE's Inner × 28).
    A value at or beyond a regime's edge votes for it, a value between the edges votes "between".
    The verdict commits to a regime when a strict majority of the metrics that can be read vote for it
    and none votes for the other; at least two must be readable, one of them r1 or s1/s2.  OH and
    Inner×L nearly sum to 100 %, so they carry about one measurement: they never commit without r1 or
    s1/s2 (with all four readable, a strict majority needs three).

    Nothing is read (``cannot classify``) when the head did not change (r1 undefined) or, dtypes
    differing, when the rounding floor is ≥ 50 % of the measured ‖ΔW‖.  Metrics are not read
    when FADE's ranges do not apply: OH and Inner×L when the head holds more than 10 % of the
    entries (an update of equal size per entry, roughly what Adam's normalised steps give, puts OH at
    the head's entry fraction, so above FADE's sign-balanced bound of 10 % a spread update could not
    read sign-balanced; Qwen 2.5 7B: 7.2 %); a failure-biased vote of r1 or s1/s2 at a known step
    ≤ 500 (FADE Table 9a: every method's head update is rank-1 dominant at 500 steps).
    """
    h = c.get("output_head") or {}
    r1 = h.get("rank1_fraction")
    out: dict[str, Any] = {"regime": None, "votes": [], "votes_text": ""}
    if r1 is None or h.get("l2") == 0:
        out["reading"] = "cannot classify: no output-head update (ΔW_head = 0, r1 undefined)"
        return out
    floor = c.get("rounding_floor") or {}
    ratio = floor.get("ratio_to_global_l2")
    if c.get("dtype_differs") and ratio is not None and ratio >= _FLOOR_LIMIT:
        out["reading"] = (f"cannot classify: casting alone produces {_pct(ratio)} of the measured ‖ΔW‖ (rounding "
                          f"floor ≥ {_FLOOR_LIMIT:.0%}): the update is mostly dtype rounding; rerun with --cast")
        return out
    s12 = h.get("s1_s2")
    if s12 is None and r1 > 0:
        s12 = float("inf")      # σ2 = 0: an exactly rank-1 head update
    inner_l = _inner_x_layers(c)
    values = {"OH": _scaled(h.get("l2_share")), "r1": _scaled(r1), "s1/s2": s12, "Inner×L": _scaled(inner_l)}
    frac, step = _head_entry_fraction(c), c.get("step")
    edges = verdict_edges()
    for name, _col, _k, up, _unit in _VOTERS:
        x, e = values[name], edges[name]
        why = None
        if x is None:
            vote, why = "not read", "no value"
        else:
            sb, fb = e["sign-balanced"], e["failure-biased"]
            tol = 1e-9 * max(abs(sb), abs(fb))      # inclusive edges despite the % <-> fraction conversion
            vote = ("failure-biased" if (x >= fb - tol if up else x <= fb + tol) else
                    "sign-balanced" if (x <= sb + tol if up else x >= sb - tol) else "between")
            if name in ("OH", "Inner×L") and frac is not None and frac > _HEAD_ENTRY_LIMIT:
                vote, why = "not read", (f"the head holds {_pct(frac)} of the entries, > "
                                         f"{_HEAD_ENTRY_LIMIT:.0%}: FADE's OH and Inner ranges do not apply")
            elif name in ("r1", "s1/s2") and vote == "failure-biased" and step is not None and step <= _EARLY_STEPS:
                vote, why = "not read", (f"step {step} ≤ {_EARLY_STEPS}: every method is rank-1 dominant "
                                         f"then, FADE Table 9a")
        out["votes"].append({"metric": name, "value": x, "vote": vote, "why": why})
    out["votes_text"] = ", ".join(f"{v['metric']} → {v['vote']}" for v in out["votes"])
    read = [v for v in out["votes"] if v["vote"] != "not read"]
    unread = [v for v in out["votes"] if v["vote"] == "not read"]
    unread_txt = "; not read: " + "; ".join(f"{v['metric']} ({v['why']})" for v in unread) if unread else ""
    if len(read) < 2:
        out["reading"] = (f"cannot classify at this depth/scale: {len(read)} of {len(_VOTERS)} metrics can be read"
                          + unread_txt)
        return out
    if not any(v["metric"] in ("r1", "s1/s2") for v in read):
        out["reading"] = ("cannot classify: of the head's shape neither r1 nor s1/s2 can be read, and OH and Inner×L "
                          "alone nearly sum to 100 % (one measurement)" + unread_txt)
        return out
    count = {reg: sum(v["vote"] == reg for v in read) for reg in _REGIME_TEXT}
    for reg, other in (("failure-biased", "sign-balanced"), ("sign-balanced", "failure-biased")):
        if 2 * count[reg] > len(read) and count[other] == 0:
            out["regime"], out["reading"] = reg, _REGIME_TEXT[reg]
            return out
    units = {name: unit for name, *_, unit in _VOTERS}
    if count["failure-biased"] and count["sign-balanced"]:
        out["reading"] = "cannot classify: the metrics disagree (" + "; ".join(
            f"{v['metric']} {_num(v['value'], units[v['metric']])} → {v['vote']}" for v in read
            if v["vote"] != "between") + ")" + unread_txt
        return out
    between = "; ".join(f"{v['metric']} {_num(v['value'], units[v['metric']])} (sign-balanced "
                        f"{'≤' if up else '≥'} {fmt_number(edges[v['metric']]['sign-balanced'], 3)}, failure-biased "
                        f"{'≥' if up else '≤'} {fmt_number(edges[v['metric']]['failure-biased'], 3)})"
                        for v in read if v["vote"] == "between"
                        for up in [next(u for n, _c, _k, u, _un in _VOTERS if n == v["metric"])])
    lead = max(count, key=count.get)
    tally = (f"votes for {lead}: {count[lead]} of {len(read)} readable metrics (a strict majority is needed)"
             if count[lead] else f"none of the {len(read)} readable metrics votes for a regime")
    out["reading"] = f"cannot classify: between FADE's ranges: {between}; {tally}" + unread_txt
    return out


def _verdict(page: Page, doc: dict, labs: list[str]) -> None:
    """A few lines per checkpoint, each value beside FADE's Sec. 5 table (Qwen 2.5 7B), and the
    regime :func:`fade_regime` reads from them with each metric's vote."""
    page.add(("h2", "Verdict"))
    rows = []
    for lab, c in zip(labs, doc["checkpoints"]):
        h = c["output_head"]
        v = fade_regime(c)
        rows.append([lab, _pct(h.get("l2_share")), _pct(h.get("rank1_fraction")), _fmt(h.get("s1_s2")),
                     _pct(c.get("inner_l2_share_mean")), _pct(_inner_x_layers(c)),
                     _pct((c.get("density") or {}).get("0"), 4), v["reading"], v["votes_text"] or "—"])
    rows.append(["FADE Sec. 5 table (Qwen 2.5 7B)", _fade_range(1) + " (%)", _fade_range(3) + " (%)",
                 _fade_range(2), _fade_range(4) + " (%)", _fade_range(4, FADE_LAYERS) + " (%)", "not reported",
                 "", ""])
    page.add(("table", ["checkpoint", "OH share", "head r1", "head s1/s2", "Inner", "Inner × L", "density |ΔW| > 0",
                        "verdict", "votes"], rows))
    e = verdict_edges()

    def edge(m: str, reg: str, up: bool, unit: str = " %") -> str:
        return f"{'≥' if up == (reg == 'failure-biased') else '≤'} {fmt_number(e[m][reg], 4)}{unit}"
    page.add(("p", "OH = the output head's share of ‖ΔW‖²; r1 = σ1²/‖ΔW_head‖²; Inner = mean per-block share of "
                   "‖ΔW‖² (the paper's Inner column, see Summary); Inner × L = Inner times the number of blocks L: "
                   "the blocks' total share of ‖ΔW‖², equivalently the mean block share relative to an even split "
                   "1/L, which compares across depths (FADE's values × 28: Qwen 2.5 7B has 28 blocks); density = "
                   "fraction of entries that changed. FADE's values are for 7B models after thousands of steps: "
                   "compare regimes, not digits."))
    page.add(("p", "Verdict rule: each metric votes failure-biased at or beyond the failure-biased edge (OH "
                   f"{edge('OH', 'failure-biased', True)}, r1 {edge('r1', 'failure-biased', True)}, s1/s2 "
                   f"{edge('s1/s2', 'failure-biased', True, '')}, Inner × L {edge('Inner×L', 'failure-biased', False)}),"
                   f" sign-balanced at or beyond the sign-balanced edge (OH {edge('OH', 'sign-balanced', True)}, r1 "
                   f"{edge('r1', 'sign-balanced', True)}, s1/s2 {edge('s1/s2', 'sign-balanced', True, '')}, Inner × L "
                   f"{edge('Inner×L', 'sign-balanced', False)}), 'between' otherwise. An edge is the least extreme "
                   "value of the FADE rows whose regime the paper states (asymmetric and symmetric runs; H* = 0.5 "
                   "sign-balanced; H* = 1.3 at 30k failure-biased). A regime is named when a strict majority of the "
                   "readable metrics vote for it and none for the other. Not read: OH and Inner × L when the head "
                   f"holds more than {_HEAD_ENTRY_LIMIT:.0%} of the entries (Qwen 2.5 7B: 7.2 %); a failure-biased "
                   f"r1 or s1/s2 at a step ≤ {_EARLY_STEPS} (FADE Table 9a: every method is rank-1 dominant at 500 "
                   f"steps); nothing when the head did not change or the rounding floor is ≥ {_FLOOR_LIMIT:.0%} of "
                   "‖ΔW‖."))
    page.img("verdict.png", _plot_verdict(doc, labs), "Each checkpoint (blue dots) beside FADE's Sec. 5 table "
             "(Qwen 2.5 7B; black stars: the six FADE runs; red: failure-biased runs, blue: sign-balanced runs; "
             "dotted: the verdict's edges). The last panel is Inner × L (FADE's Inner × 28). "
             "FADE reports no update density.")
    for lab, c in zip(labs, doc["checkpoints"]):
        if c.get("dtype_differs") and c.get("rounding_floor"):
            f = c["rounding_floor"]
            page.add(("p", f"Precision ({lab}): base {doc.get('base_dtype')}, checkpoint {c.get('dtype')}: casting "
                           f"alone produces ‖ΔW‖ = {_fmt(f['l2'])} against the measured {_fmt(c['global_l2'])} "
                           f"({_pct(f.get('ratio_to_global_l2'))}); rerun with --cast to diff at one precision."))


def _precision(page: Page, doc: dict, labs: list[str]) -> None:
    """The dtype of every checkpoint, mismatches flagged with the rounding floor."""
    st = doc.get("settings", {})
    page.add(("h2", "Precision"))
    rows = [["base", doc.get("base_dtype", "—"), "", "", "", ""]]
    for lab, c in zip(labs, doc["checkpoints"]):
        f = c.get("rounding_floor") or {}
        flag = ("dtypes differ" if c.get("dtype_differs") else "same dtype")
        rows.append([lab, c.get("dtype", "—"), flag, _fmt(c["global_l2"]), _fmt(f.get("l2")),
                     _pct(f.get("ratio_to_global_l2"))])
    page.add(("table", ["checkpoint", "dtype", "flag", "measured ‖ΔW‖_F", "rounding floor ‖ΔW‖_F", "floor / measured"],
              rows))
    cast = st.get("cast")
    page.add(("p", (f"Both sides were rounded to {cast} before the difference (--cast {cast})." if cast else
                    "Rounding floor: the ‖ΔW‖ that casting alone produces, ‖cast(W → coarser dtype) − W‖ with W "
                    "the side stored at the finer precision, per tensor (layers[].rounding_floor_l2) and overall; "
                    "a measured ‖ΔW‖ near it is rounding, not training. --cast bf16|fp16|fp32 diffs both sides "
                    "at one precision.")))
    _ulp_tables(page, doc, labs)


def _overview(page: Page, doc: dict, labs: list[str]) -> None:
    st = doc.get("settings", {})
    arch = doc.get("architecture", {})
    page.add(("p", f"Base: {doc['base']}. Device: {doc['device']}. Architecture: {arch.get('model_type')} with "
                   f"{arch.get('num_layers')} blocks, output head {arch.get('output_head')}"
                   f"{' (tied to the input embedding)' if arch.get('tied_embeddings') else ''}. "
                   f"Settings: top_k = {st.get('top_k')}, layers = {st.get('layers')}, full spectrum = "
                   f"{st.get('full_spectrum')}. Time: {_fmt(doc.get('timing_s'), digits=3)} s."))
    if st.get("tokenizer_note"):
        page.add(("p", f"Warning (tokenizer): {st['tokenizer_note']}."))


def _summary(page: Page, doc: dict, labs: list[str]) -> None:
    """FADE Sec. 5 table columns per checkpoint, and the notes of each checkpoint."""
    cks = doc["checkpoints"]
    page.add(("h2", "Summary"))
    page.add(("table", ["checkpoint", "path", "‖ΔW‖_F", "‖ΔW‖/‖W‖", "OH share", "head s1/s2", "head rank-1%",
                        "srank 0.01", "stable rank", "eff. rank", "Inner s1/s2", "Inner L2 share"],
              [[lab, c["path"], _fmt(c["global_l2"]), _fmt(c["relative_l2"]),
                _pct(c["output_head"]["l2_share"]), _fmt(c["output_head"]["s1_s2"]),
                _pct(c["output_head"]["rank1_fraction"]), _fmt((c["output_head"].get("srank") or {}).get("0.01")),
                _fmt(c["output_head"].get("stable_rank")), _fmt(c["output_head"].get("effective_rank")),
                _fmt(c["inner_s1_s2_mean"]), _pct(c["inner_l2_share_mean"])] for lab, c in zip(labs, cks)]))
    page.add(("p", "FADE Sec. 5 table columns: OH = the output head's share of Σ_t ‖ΔW_t‖²_F; "
                   "s1/s2 and rank-1% = σ1/σ2 and 100·σ1²/‖ΔW‖²_F of the output-head ΔW; "
                   "'Inner s1/s2' = mean s1/s2 over the 2-D weights of all transformer blocks; "
                   "'Inner L2 share' = mean over blocks of a block's share of ‖ΔW‖² (the paper's 'Inner' "
                   "numbers behave like this one: OH + #blocks·Inner ≈ 100%)."))
    for lab, c in zip(labs, cks):
        for note in ([c["vocab_note"]] if c.get("vocab_note") else []) + list(c.get("notes") or []):
            page.add(("p", f"Note ({lab}): {note}"))


def _density(page: Page, doc: dict, labs: list[str]) -> None:
    cks = doc["checkpoints"]
    page.add(("h2", "Update density"))
    tols = list(cks[0]["density"])
    page.add(("table", ["checkpoint"] + [f"|ΔW| > {t}" for t in tols],
              [[lab] + [_pct(c["density"][t], 4) for t in tols] for lab, c in zip(labs, cks)]))
    page.img("density.png", _plot_density(doc), "Fraction of entries with |ΔW| above each threshold.")


def _token_text(t: dict) -> str:
    """A decoded token for a table: special tokens by their name (``<eos>``), others quoted."""
    tok = t.get("token")
    if tok is None:
        return "—"
    return str(tok) if t.get("special") else repr(tok)


def _top_tokens_table(toks: list[dict]) -> Block:
    """The ten most positive and most negative entries of u, side by side (the "−" column holds
    negative entries only, the "+" column positive ones; shorter when u has fewer)."""
    pos = [t for t in toks if t["sign"] == "+"][:10]
    neg = [t for t in toks if t["sign"] == "-"][:10]
    rows = []
    for i in range(max(len(pos), len(neg))):
        row: list[Any] = []
        for lst in (pos, neg):
            if i < len(lst):
                t = lst[i]
                row += [t["token_id"], _token_text(t), _fmt(t["u"])]
            else:
                row += ["", "", ""]
        rows.append([i + 1] + row)
    return ("table", ["rank", "+ id", "+ token", "u", "− id", "− token", "u"], rows)


def _output_head(page: Page, doc: dict, labs: list[str]) -> None:
    """Spectrum and u of the output-head ΔW (FADE App. 15.1)."""
    page.add(("h2", "Output head"))
    page.add(("p", "Orientation of u: u and −u (with v flipped) are the same singular direction; this report signs "
                   "u so that its largest-magnitude entry is positive, so 'negative' means 'opposite to the largest "
                   "entry'. Read the sign-free numbers: the majority-sign fraction and the side holding the "
                   "largest entries. FADE's '99.93-99.97% of tokens negative' is a majority-sign fraction of "
                   "0.9993-0.9997 with the largest entries on the minority side."))
    page.img("head_spectrum.png", _plot_head_spectrum(doc), "Singular values of the output-head ΔW.")
    page.img("head_u.png", _plot_u(doc), "The leading left singular vector u over the vocabulary, sorted.")
    for lab, c in zip(labs, doc["checkpoints"]):
        h = c["output_head"]
        page.add(("h3", f"{lab}: {h['name']}"))
        share = h.get("u_energy_share") or {}
        page.add(("p", f"‖ΔW‖_F = {_fmt(h['l2'])} ({_pct(h['l2_share'])} of the total), s1 = {_fmt(h.get('s1'))}, "
                       f"s2 = {_fmt(h.get('s2'))}, s1/s2 = {_fmt(h['s1_s2'])}, r1 = {_pct(h['rank1_fraction'])}, "
                       f"srank(δ) = {h.get('srank')}, stable rank = {_fmt(h.get('stable_rank'))}, effective rank = "
                       f"{_fmt(h.get('effective_rank'))}. u: one sign on {_pct(h.get('u_majority_sign_fraction'), 4)} "
                       f"of tokens (majority), the largest |u_i| on the {h.get('u_largest_entries_side') or '—'} side "
                       f"(minority side: {_pct(h.get('u_minority_energy_share'))} of ‖u‖²); as oriented here "
                       f"{_pct(h.get('u_negative_fraction'), 4)} of tokens are negative; top 1% of tokens hold "
                       f"{_pct(share.get('0.01'))} of ‖u‖², top 22% hold "
                       f"{_pct(share.get('0.22'))}; half of ‖u‖² lies in "
                       f"{_pct(h.get('u_vocab_fraction_for_half_energy'))} of the vocabulary."))
        if h.get("top_tokens"):
            page.add(_top_tokens_table(h["top_tokens"]))


def _layers(page: Page, doc: dict, labs: list[str]) -> None:
    """Per block and the tensors with the largest share of ‖ΔW‖² (FADE App. 15 "per-layer L2")."""
    page.add(("h2", "Layers"))
    page.img("l2_share.png", _plot_l2_share(doc), "Share of ‖ΔW‖² per transformer block.")
    page.img("layer_s1_s2.png", _plot_layer_s12(doc), "Mean s1/s2 of the 2-D weights of each block.")
    for lab, c in zip(labs, doc["checkpoints"]):
        page.add(("h3", f"{lab}: per block"))
        page.add(("table", ["block", "‖ΔW‖_F", "share", "‖ΔW‖/‖W‖", "mean s1/s2", "mean rank-1%"],
                  [[p["layer"], _fmt(p["l2"]), _pct(p["l2_share"]), _fmt(p["relative_l2"]), _fmt(p["s1_s2_mean"]),
                    _pct(p["rank1_fraction_mean"])] for p in c["per_layer"]]))
        top = sorted(c["layers"], key=lambda r: -(r["l2_share"] or 0))[:12]
        page.add(("p", f"{lab}: the tensors with the largest share of ‖ΔW‖²:"))
        page.add(("table", ["tensor", "shape", "‖ΔW‖_F", "share", "s1/s2", "rank-1%", "density > 0"],
                  [[r["name"], "×".join(map(str, r["shape"])), _fmt(r["l2"]), _pct(r["l2_share"]),
                    _fmt(r["s1_s2"]), _pct(r["rank1_fraction"]), _pct(r["density"].get("0"))] for r in top]))


def _plot_experts(c: dict) -> bytes | None:
    """Share of ‖ΔW‖² of every routed expert (its matrices summed), block × expert, for one checkpoint."""
    rows = [x for x in c.get("experts") or [] if x["layer"] is not None and x["expert"] is not None]
    if not rows:
        return None
    layers = sorted({x["layer"] for x in rows})
    n_exp = 1 + max(x["expert"] for x in rows)
    grid = np.zeros((len(layers), n_exp))
    for x in rows:
        grid[layers.index(x["layer"]), x["expert"]] += 100 * x["l2_share"]
    from matplotlib.ticker import MaxNLocator

    fig, ax = new_figure(7, min(8.0, 1.2 + 0.35 * len(layers)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    every = max(1, -(-len(layers) // 24))
    ax.set_yticks(range(0, len(layers), every), [str(i) for i in layers[::every]], fontsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("routed expert e")
    ax.set_ylabel("transformer block ℓ")
    ax.set_title("Share of ‖ΔW‖² per routed expert", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.9, label="share of ‖ΔW‖² (%)")
    return png_bytes(fig)


def _experts(page: Page, doc: dict, labs: list[str]) -> None:
    """Mixture of experts: per block, the routed experts aggregated, the routers and shared
    experts; the expert matrices with the largest share (``report.json`` keeps every expert)."""
    cks = [(lab, c) for lab, c in zip(labs, doc["checkpoints"]) if c.get("moe")]
    if not cks:
        return
    page.add(("h2", "Mixture of experts"))
    page.add(("p", "Per block: the routed experts' matrices aggregated (energy = Σ ‖ΔW_e‖²_F over the block's expert "
                   "matrices, share = its share of ‖ΔW‖²; max and median of s1/s2 and r1 over the matrices that "
                   "changed; a fused 3-D expert tensor counts as one matrix per expert, gate_up_proj as its gate and "
                   "up parts), then the router and the shared experts, each a row of their own. report.json keeps "
                   "every expert matrix (checkpoints[].experts: block, expert, projection)."))
    for j, (lab, c) in enumerate(cks):
        m = c["moe"]
        sh = m["l2_share"]
        page.add(("h3", f"{lab}: experts per block"))
        page.add(("p", f"{m['n_experts']} routed experts per MoE block, {m['n_expert_matrices']} expert matrices; "
                       f"share of ‖ΔW‖²: experts {_pct(sh['experts'])}, routers {_pct(sh['routers'])}, shared "
                       f"experts {_pct(sh['shared_experts'])}."
                       + (f" Fused expert tensors: {len(m['fused_tensors'])}." if m.get("fused_tensors") else "")))
        rows = []
        for pl in c["per_layer"]:
            mo = pl.get("moe")
            if not mo:
                continue
            e = mo["experts"]
            rt = next((r for r in mo["routers"] if r["projection"] == "router" and len(r.get("shape") or []) == 2),
                      None)
            se = mo["shared_experts"]
            rows.append([pl["layer"], e["n_experts"], e["n_matrices"], _fmt(e["energy"]), _pct(e["l2_share"]),
                         _fmt(e["s1_s2_max"]), _fmt(e["s1_s2_median"]), _pct(e["rank1_fraction_max"]),
                         _pct(e["rank1_fraction_median"]), _fmt(rt["s1_s2"]) if rt else "—",
                         _pct(sum(r["l2_share"] for r in mo["routers"])) if mo["routers"] else "—",
                         _pct(se["l2_share"]) if se else "—"])
        page.add(("table", ["block", "experts", "matrices", "Σ‖ΔW_e‖²", "share", "max s1/s2", "median s1/s2",
                            "max r1", "median r1", "router s1/s2", "router share", "shared share"], rows))
        top = sorted((x for x in c["experts"] if x["l2"] > 0), key=lambda x: -(x["l2_share"] or 0))[:12]
        page.add(("p", f"{lab}: the expert matrices with the largest share of ‖ΔW‖² ({len(top)} shown of "
                       f"{len(c['experts'])}; unchanged ones left out):"))
        page.add(("table", ["block", "expert", "projection", "tensor", "‖ΔW‖_F", "share", "s1/s2", "rank-1%"],
                  [[x["layer"], x["expert"], x["projection"],
                    x["name"] + (f" [{x['index']}]" if x.get("index") is not None else ""), _fmt(x["l2"]),
                    _pct(x["l2_share"]), _fmt(x["s1_s2"]), _pct(x["rank1_fraction"])] for x in top]))
        if j == len(cks) - 1:
            page.img("experts.png", _plot_experts(c), f"{lab}: share of ‖ΔW‖² per routed expert and block.")


def _alignment(page: Page, doc: dict, labs: list[str]) -> None:
    """|cos| of leading singular vectors against the last checkpoint (FADE Table 12); several checkpoints only."""
    al = doc.get("alignment")
    if not al:
        return
    page.add(("h2", "Cross-checkpoint alignment (FADE Table 12)"))
    page.add(("p", f"|cos| of the leading singular vectors of each checkpoint's ΔW against those of the last "
                   f"one ({_short(al['reference'])}). Blocks: mean over the 2-D weights of the layers of each "
                   f"third (early {al['thirds']['early']['layers']}, mid {al['thirds']['mid']['layers']}, "
                   f"late {al['thirds']['late']['layers']})."))
    page.add(("table", ["checkpoint", "head |cos u|", "head |cos v|", "early |cos u|", "mid |cos u|",
                        "late |cos u|", "early |cos v|", "mid |cos v|", "late |cos v|"],
              [[lab, _fmt(al["output_head"]["u"][j]), _fmt(al["output_head"]["v"][j])]
               + [_fmt(al["thirds"][k]["u"][j]) for k in ("early", "mid", "late")]
               + [_fmt(al["thirds"][k]["v"][j]) for k in ("early", "mid", "late")]
               for j, lab in enumerate(labs)]))
    page.img("alignment.png", _plot_alignment(doc), "Alignment with the last checkpoint.")


def _clustering(page: Page, doc: dict, labs: list[str]) -> None:
    """Pairwise cosine of ΔW between runs and their clustering (FADE App. 15); several checkpoints only."""
    cl = doc.get("clustering")
    if not cl:
        return
    page.add(("h2", "Across runs: cosine of ΔW and clustering"))
    page.add(("table", ["cos(ΔW)"] + labs, [[labs[i]] + [_fmt(x, digits=3) for x in row]
                                             for i, row in enumerate(cl["cosine_global"])]))
    page.add(("p", f"Average-linkage clustering on 1 − cos; leaf order: "
                   f"{', '.join(labs[i] for i in cl['leaf_order'])}."))
    page.add(("table", ["head |cos u| / |cos v|"] + labs,
              [[labs[i]] + [f"{_fmt(a, digits=3)} / {_fmt(b, digits=3)}" for a, b in zip(ru, rv)]
               for i, (ru, rv) in enumerate(zip(cl["head_u_abs_cos"], cl["head_v_abs_cos"]))]))
    per = cl.get("cosine_per_layer") or {}
    if per and len(labs) >= 2:
        pairs = [(i, j) for i in range(len(labs)) for j in range(i + 1, len(labs))][:6]
        page.add(("table", ["group"] + [f"cos({labs[i]}, {labs[j]})" for i, j in pairs],
                  [[g] + [_fmt(M[i][j], digits=3) for i, j in pairs] for g, M in per.items()]))
    page.img("clustering.png", _plot_clustering(doc), "Cosine similarity of the flattened ΔW and the dendrogram.")


def _lora(page: Page, doc: dict, labs: list[str]) -> None:
    """LoRA adapters (adapter directories only): settings, what is exact, the largest updates."""
    cks = [(lab, c) for lab, c in zip(labs, doc["checkpoints"]) if c.get("adapter")]
    if not cks:
        return
    page.add(("h2", "LoRA adapter"))
    page.add(("p", "ΔW = s·B·A of every target module (s = lora_alpha/r, lora_alpha/√r with rsLoRA; per module from "
                   "rank_pattern / alpha_pattern; transposed for fan_in_fan_out (GPT-2 Conv1D) and embeddings), "
                   "measured from the factors without forming ΔW: norms, singular values, s1/s2, r1 and u, v from "
                   "the r × r core of the QR factorisations of B and Aᵀ (exact; the singular values beyond r are "
                   "0). Densities count the entries of s·B·A, formed one float32 row block at a time. "
                   "DoRA weights (W' = diag(m/‖W + s·B·A‖_row)·(W + s·B·A): not low rank), modules_to_save and "
                   "trained biases are diffed densely; every other tensor has ΔW = 0. "
                   "This is the exact update: a merged bfloat16 checkpoint (merge_and_unload) rounds W + s·B·A, "
                   "which moves small entries, the densities and the smallest singular values."))
    for lab, c in cks:
        a = c["adapter"]
        page.add(("table", ["checkpoint", "adapter", "r (stored)", "lora_alpha", "rsLoRA", "low-rank updates",
                            "DoRA", "full tensors", "lora_bias", "factors dtype", "trained on"],
                  [[lab, a["path"], f"{a['r']} ({', '.join(map(str, a['ranks'])) or '—'})", a["lora_alpha"],
                    "yes" if a["use_rslora"] else "no", a["n_low_rank"], a.get("n_dora", 0), a["n_full"],
                    a["n_lora_bias"],
                    a["factors_dtype"], a.get("base_model_name_or_path") or "—"]]))
        low = sorted((r for r in c["layers"] if r.get("low_rank")), key=lambda r: -(r["l2_share"] or 0))[:12]
        if low:
            page.add(("p", f"{lab}: the adapter's updates (LoRA, DoRA) with the largest share of ‖ΔW‖²:"))
            page.add(("table", ["tensor", "rank", "scale s", "‖ΔW‖_F", "share", "s1/s2", "rank-1%", "density > 1e-05"],
                      [[r["name"], r["low_rank"]["rank"], _fmt(r["low_rank"]["scale"]), _fmt(r["l2"]),
                        _pct(r["l2_share"]), _fmt(r["s1_s2"]), _pct(r["rank1_fraction"]),
                        _pct(r["density"].get("1e-05"))] for r in low]))
        _intruders(page, lab, a.get("intruders"), doc)


def _intruders_reading(lab: str, s: dict, k: int) -> str:
    """One sentence on the intruders at one ε, beside the random update of the same rank and norm."""
    n, got, base = s["n_targets"], s["n_intruders"], s["baseline_n_intruders"]
    if got == 0 and base == 0:
        verdict = "neither the adapter nor a random update of its rank and norm brings new directions into the top"
    elif got > 1.5 * base + 1:
        verdict = ("the adapter brings in more new directions than a random update of its rank and norm: the "
                   "intruders are its own structure, not its size")
    elif base > 1.5 * got + 1:
        verdict = ("a random update of the same rank and norm would bring in more: the adapter stays closer to "
                   "the base's directions than its size alone implies")
    else:
        verdict = ("a random update of the same rank and norm brings in about as many: the intruders follow from "
                   "the update's size and rank rather than from what it learned")
    return (f"{lab}: at ε = {_fmt(s['epsilon'])}, {_fmt(got)} of the top-{k} singular vectors of the {n} updated "
            f"matrices are intruder dimensions ({_fmt(got / n if n else None, digits=3)} per matrix, "
            f"{s['targets_with_intruders']} of {n} matrices have one; {_pct(s['energy_share_mean'])} of the "
            f"top-{k} energy on average), against {_fmt(base)} ({s['baseline_targets_with_intruders']} matrices, "
            f"{_pct(s['baseline_energy_share_mean'])}) for a random update: {verdict}.")


def _intruders(page: Page, lab: str, intr: dict | None, doc: dict) -> None:
    """The intruder dimensions of one adapter's LoRA updates (``--geometry``), beside the random update."""
    if not intr or not intr.get("targets"):
        if doc.get("settings", {}).get("adapters") and not doc.get("geometry"):
            page.add(("p", f"{lab}: intruder dimensions (arXiv 2410.21228) need the base's singular vectors: "
                           f"rerun with --geometry."))
        return
    k = intr["k"]
    page.add(("p", f"{lab}: intruder dimensions (Shuttleworth et al., arXiv 2410.21228): a top-{k} singular vector "
                   f"of W_base + s·B·A (output side) that no singular vector of W_base resembles (|cos| < ε with "
                   f"each). LoRA tends to create them, full fine-tuning not. Compared with the top singular "
                   f"vectors of W_base the geometry computes (n_base per matrix; the paper uses all): 'intruders' "
                   f"is an upper bound of the paper's count, 'certain' a lower bound. Random: the same for "
                   f"W_base plus a Gaussian update of the adapter's rank and the same ‖ΔW‖_F (seeded)."))
    mid = next((x for x in intr["summary"] if abs(x["epsilon"] - 0.5) < 1e-12), intr["summary"][len(intr["summary"]) // 2])
    page.add(("p", _intruders_reading(lab, mid, k)))
    page.add(("table", ["ε", "intruders", "certain", "per matrix", "matrices with one", "energy share (mean)",
                        "random: intruders", "random: matrices with one", "random: energy share"],
              [[_fmt(x["epsilon"]), _fmt(x["n_intruders"]), _fmt(x["n_intruders_certain"]),
                _fmt(x["n_intruders"] / x["n_targets"] if x["n_targets"] else None, digits=3),
                f"{x['targets_with_intruders']} / {x['n_targets']}", _pct(x["energy_share_mean"]),
                _fmt(x["baseline_n_intruders"]), f"{x['baseline_targets_with_intruders']} / {x['n_targets']}",
                _pct(x["baseline_energy_share_mean"])] for x in intr["summary"]]))
    j = intr["epsilons"].index(mid["epsilon"])
    top = sorted(intr["targets"], key=lambda t: (-t["by_epsilon"][j]["n_intruders"], -(t["delta_energy"] or 0)))[:12]
    page.add(("p", f"{lab}: the matrices with the most intruders at ε = {_fmt(mid['epsilon'])}:"))
    page.add(("table", ["matrix", "rank", "n_base", "intruders", "certain", "random", "energy share", "random",
                        "max |cos| of y_1", "random"],
              [[t["name"], t["rank"], t["n_base"], t["by_epsilon"][j]["n_intruders"],
                t["by_epsilon"][j]["n_intruders_certain"], t["by_epsilon"][j]["baseline_n_intruders"],
                _pct(t["by_epsilon"][j]["energy_share"]), _pct(t["by_epsilon"][j]["baseline_energy_share"]),
                _fmt(t["max_cos"][0], digits=3), _fmt(t["baseline_max_cos"][0], digits=3)] for t in top]))


# ------------------------------------------------------- geometry (--geometry)
#: a measured share is read as "like a random matrix" within these ratios to the random baseline
_LIKE_RANDOM = (0.5, 2.0)


def _geo(agg: list[dict], metric: str, param: Any) -> dict | None:
    """The aggregate row of ``metric`` at ``param`` (``None`` when no matrix reports it)."""
    for a in agg:
        if a["metric"] == metric and a["param"] is not None and param is not None and abs(a["param"] - param) < 1e-12:
            return a
    return None


def _geo_k(agg: list[dict]) -> float | None:
    """The rank the reading uses: 8 when the matrices that have it hold most of ‖ΔW‖², else the
    rank covering the most of it (the smallest such)."""
    rows = [a for a in agg if a["metric"] == "energy_left" and a["value"] is not None]
    if not rows:
        return None
    k8 = _geo(rows, "energy_left", 8.0)
    if k8 is not None and (k8["energy_covered"] or 0) >= 0.5:
        return 8.0
    return min(rows, key=lambda a: (-(a["energy_covered"] or 0), a["param"]))["param"]


def _versus(a: dict | None, b: dict | None = None) -> str | None:
    """``"below"``, ``"like"`` or ``"above"``: the (mean of the) measured value(s) against the random baseline(s)."""
    rows = [x for x in (a, b) if x is not None]
    if not rows or any(x["value"] is None or x["baseline"] is None for x in rows):
        return None
    v, base = sum(x["value"] for x in rows), sum(x["baseline"] for x in rows)
    if base <= 0:
        return "above" if v > 0 else "like"
    r = v / base
    return "below" if r < _LIKE_RANDOM[0] else "above" if r > _LIKE_RANDOM[1] else "like"


def _geometry_reading(g: dict) -> list[str]:
    """Plain sentences from one checkpoint's aggregate, each conditional on what the numbers show."""
    agg = g["aggregate"]
    out = []
    k = _geo_k(agg)
    if k is None or g.get("energy", 0) <= 0:
        return ["No weight matrix changed (ΔW = 0): nothing to read."]
    kk = f"{k:g}"
    L, R, Bo = _geo(agg, "energy_left", k), _geo(agg, "energy_right", k), _geo(agg, "energy_both", k)
    cover = "" if (L["energy_covered"] or 0) > 0.999 else \
        f" (over the matrices with min(m, n) ≥ {kk}: {_pct(L['energy_covered'])} of ‖ΔW‖²)"
    lead = {"below": "The update avoids the principal directions",
            "above": "The update concentrates on the principal directions",
            "like": "The update meets the principal directions as a random matrix would"}.get(_versus(L, R))
    if lead:
        both = (f"; {_pct(Bo['value'])} inside both (random: {_pct(Bo['baseline'])})" if Bo and Bo["baseline"] is not None
                else "")
        out.append(f"{lead}: {_pct(L['value'])} of its energy in the top-{kk} left singular subspace of W_base and "
                   f"{_pct(R['value'])} in the right one, against {_pct(L['baseline'])} and {_pct(R['baseline'])} "
                   f"for a random matrix of the same shape{both}{cover}.")
    D = _geo(agg, "diagonal", k)
    v = _versus(D)
    if v:
        what = {"above": "more than a random update does: part of the update rescales the top singular values",
                "below": "less than a random update does",
                "like": "as much as a random update does"}[v]
        out.append(f"{_pct(D['value'])} of its energy lies on the diagonal of the base's top-{kk} singular basis "
                   f"(moving the top-{kk} singular values without turning their vectors), against "
                   f"{_pct(D['baseline'])} for a random matrix: {what}.")
    al, ar = _geo(agg, "angle_left_max_deg", k), _geo(agg, "angle_right_max_deg", k)
    ml, mr = _geo(agg, "angle_left_mean_deg", k), _geo(agg, "angle_right_mean_deg", k)
    sv = _geo(agg, "sv_drift", k)
    if al and ar and al["value"] is not None and ar["value"] is not None:
        big = max(al["value"], ar["value"])
        verb = "barely turn" if big < 1 else "turn a little" if big < 10 else "turn substantially"
        drift = "" if sv is None or sv["value"] is None else \
            f"; their top-{kk} singular values drift by {_pct(sv['value'])} (relative)"
        means = "" if not (ml and mr) else f", mean angle {_fmt(ml['value'], digits=3)}° and {_fmt(mr['value'], digits=3)}°"
        out.append(f"The top-{kk} singular subspaces {verb}: largest principal angle {_fmt(al['value'], digits=3)}° "
                   f"(left) and {_fmt(ar['value'], digits=3)}° (right){means}{drift} (‖ΔW‖²-weighted means over "
                   f"matrices; no closed-form random baseline: the angles depend on the gaps of the base spectrum).")
    T = _geo(agg, "top_energy_share", 0.01)
    v = _versus(T)
    if v:
        lead = {"above": "The update is concentrated on few entries",
                "below": "The update is spread more evenly over the entries than Gaussian noise",
                "like": "The update is spread over the entries like Gaussian noise"}[v]
        out.append(f"{lead}: the 1% largest entries of ΔW hold {_pct(T['value'])} of its energy, against "
                   f"{_pct(T['baseline'])} for Gaussian entries.")
    for name, what in (("principal", "the principal weights (the largest entries of W_base's rank-r part)"),
                       ("low", "the small-magnitude weights of W_base")):
        P = _geo(agg, f"update_in_{name}", 0.05)
        v = _versus(P)
        if v:
            verb = {"below": "avoid", "above": "favour", "like": "fall on"}[v]
            tail = " as often as at random" if v == "like" else ""
            out.append(f"The largest entries of the update {verb} {what}{tail}: {_pct(P['value'])} of the update "
                       f"mask (the 5% largest |ΔW|) lies in the 5% mask, against {_pct(P['baseline'])} at random.")
    return out


#: the aggregate rows shown in the report's table (all their parameters)
_GEO_TABLE = ("energy_left", "energy_right", "energy_both", "diagonal", "angle_left_max_deg", "angle_right_max_deg",
              "sv_drift", "top_energy_share", "density_above_rms", "update_in_principal", "update_in_low",
              "jaccard_update_principal", "jaccard_update_low")


def _geo_cell(a: dict | None, digits: int = 3) -> str:
    if a is None or a["value"] is None:
        return "—"
    return f"{_fmt(a['value'], digits=digits)}°" if a["metric"].endswith("_deg") else _pct(a["value"], digits)


def _geo_base(a: dict | None) -> str:
    return "—" if a is None or a["baseline"] is None else _pct(a["baseline"])


def _geometry(page: Page, doc: dict, labs: list[str]) -> None:
    """Where the update lies relative to the base (``--geometry`` only), each number beside the
    random-matrix baseline of the same shape."""
    geo = doc.get("geometry")
    if not geo:
        return
    page.add(("h2", "Geometry of the update"))
    page.add(("p", "Where ΔW lies relative to W_base, per weight matrix (analysis.geometry.update_geometry: energy "
                   "in W_base's top-k singular subspaces, principal angles and singular-value drift between the "
                   "top-k subspaces of W_base and W_rl, concentration over the entries, overlap of the largest "
                   "entries with the principal and small-magnitude weights), each beside its baseline: the same "
                   "number for an isotropic random update of the same shape and norm. " + geo["aggregation"]))
    if doc.get("settings", {}).get("adapters"):
        page.add(("p", "LoRA adapters: the matrices an adapter updates (analysis.geometry.lora_update_geometry): "
                       "energies from the factors B and A exactly, without forming ΔW; angles and drift from the "
                       "top-k spectrum of W_base + s·B·A formed once as a matrix; entry concentration and ULPs "
                       "from float64 row blocks of W_base + s·B·A (the ULPs: W_base + s·B·A rounded once to "
                       "W_base's dtype, as a merged checkpoint stores it). DoRA and modules_to_save tensors as "
                       "dense updates; matrices no adapter updates (ΔW = 0) are left out."))
    for lab, g in zip(labs, geo["checkpoints"]):
        page.add(("h3", f"{lab}: {g['n_matrices']} matrices"))
        for s in _geometry_reading(g):
            page.add(("p", s))
        agg = g["aggregate"]
        rows = [[a["metric"], _fmt(a["param"]), _geo_cell(a, 4), _geo_base(a), a["n_matrices"],
                 _pct(a["energy_covered"])] for a in agg if a["metric"] in _GEO_TABLE]
        page.add(("table", ["metric", "k / q / c / α", "value", "random baseline", "matrices", "of ‖ΔW‖²"], rows))
        k = _geo_k(agg)
        if k is None:
            continue
        kk = f"{k:g}"
        if g["per_layer"]:
            page.add(("p", f"{lab}: per block (‖ΔW‖²-weighted over its matrices; k = {kk}):"))
            page.add(("table", ["block", "share of ‖ΔW‖²", f"left top-{kk}", "random", f"right top-{kk}", "random",
                                f"max angle left (k = {kk})", "top 1% entries", "random"],
                      [[pl["layer"], _pct(pl["energy"] / g["energy"] if g["energy"] > 0 else None)]
                       + [f(_geo(pl["aggregate"], mt, q)) for mt, q, f in
                          (("energy_left", k, _geo_cell), ("energy_left", k, _geo_base),
                           ("energy_right", k, _geo_cell), ("energy_right", k, _geo_base),
                           ("angle_left_max_deg", k, _geo_cell), ("top_energy_share", 0.01, _geo_cell),
                           ("top_energy_share", 0.01, _geo_base))]
                       for pl in g["per_layer"]]))
        top = sorted((m for m in g["matrices"] if m["delta_energy"]), key=lambda m: -m["delta_energy"])[:12]
        if top:
            page.add(("p", f"{lab}: the matrices with the largest ‖ΔW‖² (top-{kk} subspaces):"))
            rows = []
            for m in top:
                mrows = [dict(x, n_matrices=1, energy_covered=1.0) for x in m["metrics"]]
                rows.append([m["name"] + ("" if m["expert"] is None else f" [expert {m['expert']}]"),
                             "×".join(map(str, m["shape"])), _pct(m["delta_energy"] / g["energy"])]
                            + [f(_geo(mrows, mt, k)) for mt, f in
                               (("energy_left", _geo_cell), ("energy_left", _geo_base), ("energy_right", _geo_cell),
                                ("energy_right", _geo_base), ("angle_left_max_deg", _geo_cell),
                                ("sv_drift", _geo_cell))])
            page.add(("table", ["matrix", "shape", "share of ‖ΔW‖²", f"left top-{kk}", "random", f"right top-{kk}",
                                "random", "max angle left", "sv drift"], rows))
        notes = [m for m in g["matrices"] if m.get("note")]
        for m in notes[:5]:
            page.add(("p", f"Note ({lab}): {m['name']}: {m['note']}"))


def _ulp_label(lo: int, hi: int) -> str:
    return str(hi) if hi <= 2 or lo + 1 == hi else f"{lo + 1}–{hi}"


def _ulp_tables(page: Page, doc: dict, labs: list[str]) -> None:
    """The ULP histogram of ΔW in W_base's dtype over all weight matrices (``--geometry`` only)."""
    geo = doc.get("geometry")
    if not geo:
        return
    for lab, g in zip(labs, geo["checkpoints"]):
        for h in g.get("precision") or []:
            changed = 1.0 - h["unchanged_share"]
            s = (f"{lab}: {_pct(h['unchanged_share'])} of the {_fmt(h['n_entries'])} entries of the "
                 f"{h['n_matrices']} weight matrices are unchanged in {h['dtype']} (the same value in W_base's dtype) "
                 f"and {_pct(h['one_ulp_share'])} moved by exactly one ULP (the smallest step {h['dtype']} allows)")
            if changed > 0 and h["one_ulp_share"] / changed > 0.5:
                s += "; most changed entries moved by that one step: the update lives at the precision floor"
            elif changed > 0:
                s += f"; the changed entries moved by {_fmt(h['mean_ulp'] / changed, digits=3)} ULPs on average"
            if h["unchanged_share"] > 0.5:
                s += f"; most entries are bit-identical to the base in {h['dtype']}"
            if not h["exact_in_dtype"]:
                s += f" (some values were not representable in {h['dtype']}: the histogram is of the rounded values)"
            page.add(("p", s + "."))
            edges, counts = h["bin_edges"], h["counts"]
            last = max([i for i, c in enumerate(counts) if c] or [0])
            rows = [[_ulp_label(edges[i - 1] if i else -1, edges[i]) if i else "0 (unchanged)", _fmt(counts[i]),
                     _pct(h["shares"][i], 4)] for i in range(last + 1)]
            page.add(("table", [f"|ΔW| in ULPs of {h['dtype']}", "entries", "share"], rows))


# ------------------------------------------------------- dynamics (series / runs)
def _dynamics_series(page: Page, d: dict) -> None:
    ch = d["change"]
    steps = d.get("steps") or []
    src = "" if d.get("step_source") == "names" else " (steps: the position in the series)"
    share = ch.get("identical_share")
    if share is not None:
        read = ("most entries do not change from one checkpoint to the next" if share > 0.5 else
                "most entries change from one checkpoint to the next")
        page.add(("p", f"{_pct(share)} of stored entries are bit-identical between consecutive checkpoints "
                       f"({_fmt(ch['n_entries'])} entry comparisons over {len(ch['pairs'])} consecutive pairs{src}): "
                       f"{read}. Reference: {ch.get('reference')}."))
    page.add(("table", ["from step", "to step", "bit-identical", "entries", "share"],
              [[_fmt(p["from_step"]), _fmt(p["to_step"]), _fmt(p["identical"]), _fmt(p["n_entries"]),
                _pct(p["identical_share"], 4)] for p in ch["pairs"]]))
    lin = d.get("linearity")
    st = d.get("settings") or {}
    if lin:
        rw = lin.get("random_walk") or {}
        med, rmed = lin.get("median_r2"), rw.get("median_r2")
        if med is None:
            page.add(("p", f"No sampled entry moves over the {len(steps)} checkpoints: linearity undefined."))
        else:
            verb = ("the entries move linearly in the step" if med >= 0.8 else
                    "the entries move partly linearly in the step" if rmed is None or med > rmed + 0.1 else
                    "the entries move like random walks, not linearly in the step")
            page.add(("p", f"{verb[0].upper() + verb[1:]}: median R² {_fmt(med, digits=3)}, pooled R² "
                           f"{_fmt(lin.get('pooled_r2'), digits=3)} over {_fmt(lin['n_sampled'])} sampled entries "
                           f"({_fmt(st.get('sample_size'))} per tensor, seed {st.get('seed')}; "
                           f"{_pct(lin.get('static_share'))} do not move and are left out); Gaussian random walks "
                           f"over the same {len(steps)} steps give median R² {_fmt(rmed, digits=3)} (pooled "
                           f"{_fmt(rw.get('pooled_r2'), digits=3)}). RLVR-Linearity (arXiv 2601.04537) reports "
                           f"R² ≈ 0.9."))
    rows = sorted(d.get("tensors") or [], key=lambda t: -t["n_entries"])[:15]
    if rows:
        page.add(("p", "The largest tensors:"))
        page.add(("table", ["tensor", "entries", "bit-identical (consecutive)", "static (sample)", "median R²",
                            "pooled R²"],
                  [[t["name"], _fmt(t["n_entries"]), _pct(t["identical_share"], 4), _pct(t.get("static_share")),
                    _fmt(t.get("median_r2"), digits=3), _fmt(t.get("pooled_r2"), digits=3)] for t in rows]))


def _dynamics_runs(page: Page, d: dict, labs: list[str]) -> None:
    q = d["settings"]["mask_fraction"]
    rows = []
    for p in d["pairs"]:
        ratio = p["jaccard"] / p["baseline"] if p["baseline"] else None
        rows.append([f"{labs[p['a']]} vs {labs[p['b']]}", _fmt(p["jaccard"], digits=3), _fmt(p["baseline"], digits=3),
                     "—" if ratio is None else f"{_fmt(ratio, digits=3)}×", _pct(p["density_a"]), _pct(p["density_b"])])
    best = max(d["pairs"], key=lambda p: p["jaccard"]) if d["pairs"] else None
    if best is not None:
        r = best["jaccard"] / best["baseline"] if best["baseline"] else None
        read = ("the runs update the same entries far more often than chance" if r is not None and r > 2 else
                "the runs update the same entries about as often as chance")
        page.add(("p", f"Update masks (the top {_pct(q)} of |ΔW| per tensor) of runs {labs[best['a']]} and "
                       f"{labs[best['b']]}: Jaccard {_fmt(best['jaccard'], digits=3)} against "
                       f"{_fmt(best['baseline'], digits=3)} for two independent random masks of the same densities: "
                       f"{read}."))
    page.add(("table", ["pair", "Jaccard", "random baseline", "ratio", "density a", "density b"], rows))


def _dynamics(page: Page, doc: dict, labs: list[str]) -> None:
    """How the checkpoints move relative to each other (``report.json`` ``dynamics``)."""
    d = doc.get("dynamics")
    if not d:
        return
    page.add(("h2", "Dynamics"))
    if d["kind"] == "series":
        _dynamics_series(page, d)
    else:
        _dynamics_runs(page, d, labs)
    for note in d.get("notes") or []:
        page.add(("p", f"Note: {note}."))


# ------------------------------------------------------------ policy KL (--prompts)
#: the plain reading of the forward KL (RL's Razor, arXiv 2509.04259)
KL_READING = "RL's Razor: forgetting tracks this forward KL, not ΔW's norm or rank"


def _pm(x: Any, se: Any) -> str:
    return _fmt(x) if se is None else f"{_fmt(x)} ± {_fmt(se)}"


def _policy_kl(page: Page, doc: dict, labs: list[str]) -> None:
    """KL between the base and each RL policy on sampled continuations (``report.json`` ``kl``,
    :mod:`analysis.diff.kl`): both directions per checkpoint, then the prompts with the largest
    forward KL."""
    d = doc.get("kl")
    if not d or not d.get("checkpoints"):
        return
    lab_of = {c.get("path"): lab for c, lab in zip(doc.get("checkpoints") or [], labs)}
    page.add(("h2", "Policy KL"))
    page.add(("p", f"{KL_READING}. RL's Razor (Shenfeld et al., arXiv 2509.04259) finds that forgetting of prior "
                   "tasks is predicted by the forward KL between the base and the fine-tuned policy on the new task, "
                   "E_x[KL(π_base ‖ π_RL)], and not by the norm, sparsity or rank of the weight change. Forward = "
                   "KL(π_base ‖ π_RL) on continuations sampled from the base; reverse = KL(π_RL ‖ π_base) on "
                   "continuations sampled from the RL checkpoint. At every sampled token: the exact KL between the two "
                   "next-token distributions over the whole vocabulary (float64), in nats per token; a continuation's "
                   "tokens run up to and including its stop token."))
    rows = []
    for c in d["checkpoints"]:
        lab = lab_of.get(c.get("rl"), _short(c.get("rl", "")))
        for key in ("forward", "reverse"):
            r = c[key]
            rows.append([lab, f"{key}: {r['divergence']}", r["sampled_from"], _pm(r["kl_token_mean"], r["kl_token_se"]),
                         _pm(r["kl_prompt_mean"], r["kl_prompt_se"]), _pm(r["kl_sequence_mean"], r["kl_sequence_se"]),
                         _pm(r["mc_token_mean"], r["mc_token_se"]), _fmt(r["n_tokens"]), _fmt(r["n_sequences"])])
    page.add(("table", ["checkpoint", "divergence", "sampled from", "KL per token (pooled)", "mean of prompt means",
                        "KL per continuation", "single-sample estimate", "tokens", "continuations"], rows))
    st = d.get("settings") or {}
    page.add(("p", f"± one standard error over the {_fmt(st.get('n_prompts'))} prompts. KL per continuation = the mean "
                   "of Σ_t KL_t, the KL between the two distributions of whole continuations; the single-sample "
                   "estimate = the mean of log p(y_t) − log q(y_t), unbiased but noisier. Sampling: "
                   f"{_fmt(st.get('n_samples'))} continuations per prompt from each model, at most "
                   f"{_fmt(st.get('max_new_tokens'))} new tokens, temperature {_fmt(st.get('temperature'))}, top-p "
                   f"{_fmt(st.get('top_p'))}, seed {st.get('seed')}; models in {st.get('dtype')}; prompts: "
                   f"{st.get('prompts')}."))
    for c in d["checkpoints"]:
        lab = lab_of.get(c.get("rl"), _short(c.get("rl", "")))
        top = sorted(c.get("prompts") or [], key=lambda r: -r["forward"]["kl"])[:15]
        if not top:
            continue
        page.add(("p", f"Prompts with the largest forward KL ({lab}; {len(c['prompts'])} prompts in report.json):"))
        page.add(("table", ["prompt", "source", "forward KL / token", "reverse KL / token", "tokens (fwd / rev)"],
                  [[(r["prompt"] if len(r["prompt"] or "") <= 60 else r["prompt"][:57] + "...")
                    if r.get("prompt") is not None else f"{_fmt(r['n_prompt_tokens'])} token ids", r.get("source", ""),
                    _fmt(r["forward"]["kl"]), _fmt(r["reverse"]["kl"]),
                    f"{_fmt(r['forward']['n_tokens'])} / {_fmt(r['reverse']['n_tokens'])}"] for r in top]))


#: the sections of a diff report, in order
_SECTIONS = (_verdict, _overview, _precision, _lora, _summary, _density, _output_head, _layers, _geometry, _experts,
             _alignment, _clustering, _dynamics, _policy_kl)


def _blocks(doc: dict) -> tuple[list[Block], dict[str, bytes]]:
    """The report's blocks and images: one section after the other (:data:`_SECTIONS`)."""
    page, labs = Page(), _labels(doc)
    for section in _SECTIONS:
        section(page, doc, labs)
    return page.blocks, page.images


def write_report(doc: dict, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``report.md``, ``report.html``, ``report.json`` and the PNGs of a
    :func:`analysis.diff.diff` document into directory ``out`` (atomically).

    ``out`` may not exist yet, be empty, or be a previous report directory (replaced
    when the new one is complete); anything else is refused with a ``ValueError`` unless
    ``overwrite`` (then it is replaced whole).  A write the system refuses (disk full)
    raises ``OSError`` naming the file and leaves ``out`` as it was.
    """
    if not isinstance(doc, dict) or "checkpoints" not in doc or not doc["checkpoints"]:
        raise ValueError("doc must be the dict returned by analysis.diff.diff")
    blocks, images = _blocks(doc)
    title = "Checkpoint diff: ΔW = W_rl − W_base"

    def build(tmp: Path) -> None:
        for name, data in images.items():
            atomic_write(tmp / name, lambda p, d=data: Path(p).write_bytes(d))
        atomic_write_text(tmp / "report.md", render_markdown(title, blocks))
        atomic_write_text(tmp / "report.html", render_html(title, blocks, images))
        atomic_write_text(tmp / "report.json", to_json(with_verdicts(doc)))

    return atomic_dir(out, build, markers=None if overwrite else REPORT_MARKERS)


def with_verdicts(doc: dict) -> dict:
    """``doc`` with every checkpoint's :func:`fade_regime` under ``"verdict"`` (report.json; ``doc``
    itself is not changed)."""
    return {**doc, "checkpoints": [{**c, "verdict": fade_regime(c)} for c in doc["checkpoints"]]}


# ------------------------------------------------------------ hidden states
def _hidden_blocks(doc: dict) -> tuple[list[Block], dict[str, bytes]]:
    r, n, rn = doc["rho_perp"], doc["n_tokens"], doc["residual_norm"]
    pap = doc.get("paper", {})
    B: list[Block] = [
        ("p", f"Checkpoint: {doc['checkpoint']}. Device: {doc['device']}. Trajectories: "
              f"{doc['n_trajectories']['success']} correct, {doc['n_trajectories']['failure']} failed "
              f"({doc.get('n_skipped_trajectories', 0)} skipped: empty prompt or completion). Tokens: "
              f"N_S = {n['success']:,}, N_F = {n['failure']:,}. The top right singular vector u1 of H carries "
              f"{_pct(doc.get('u1_energy_fraction'))} of ‖H‖²_F."),
        ("h2", "Perpendicular correlation (FADE Table 10)"),
        ("table", ["group", "tokens", "ρ̂ of h⊥"],
         [["correct (S)", _fmt(n["success"]), _fmt(r["success"])], ["failed (F)", _fmt(n["failure"]), _fmt(r["failure"])],
          ["ratio S/F", "", _fmt(r["ratio"])]]),
        ("p", f"FADE (Qwen 2.5 7B) finds correct trajectories {pap.get('rho_ratio', [3, 4])[0]:g}-"
              f"{pap.get('rho_ratio', [3, 4])[1]:g}× more correlated than failed ones."),
        ("h2", "Group residual norms and CLT baseline (FADE Table 11)"),
        ("table", ["quantity", "value"],
         [["‖R_S‖_F", _fmt(rn["success"])], ["‖R_F‖_F", _fmt(rn["failure"])],
          ["‖R_F‖/‖R_S‖ (measured)", _fmt(doc["residual_ratio"])],
          ["sqrt(N_S/N_F) (CLT baseline)", _fmt(doc["clt_baseline"])],
          ["measured / baseline", _fmt(doc["ratio_over_baseline"])]]),
        ("p", f"Paper: sqrt({pap.get('n_success', 8968):,}/{pap.get('n_failure', 54700):,}) ≈ "
              f"{pap.get('clt_baseline', 0.40)}, measured {pap.get('residual_ratio_measured', [0.73, 0.79])[0]}-"
              f"{pap.get('residual_ratio_measured', [0.73, 0.79])[1]}."),
    ]
    images: dict[str, bytes] = {}
    images["hidden_states.png"] = _plot_hidden_states(doc)
    B.append(("img", "hidden_states.png", "Perpendicular correlation by outcome and residual-norm ratio."))
    return B, images


def _plot_hidden_states(doc: dict) -> bytes:
    """ρ̂ of h⊥ by outcome (left) and ‖R_F‖/‖R_S‖ against its CLT baseline (right), with FADE's values."""
    from matplotlib.offsetbox import AnchoredText

    r, pap = doc["rho_perp"], doc.get("paper", {})
    lo3, hi3 = pap.get("rho_ratio", [3, 4])
    clt, (m_lo, m_hi) = pap.get("clt_baseline", 0.40), pap.get("residual_ratio_measured", [0.73, 0.79])
    fig, (a1, a2) = new_figure(8.5, 3.3, 2)
    a1.bar(["correct (S)", "failed (F)"], [r["success"] or 0, r["failure"] or 0], color=["tab:green", "tab:red"],
           width=0.6)
    a1.set_ylabel("ρ̂ of h⊥ (mean pairwise cosine)")
    a1.set_title(f"Table 10: ratio S/F = {_fmt(r.get('ratio'))}", fontsize=9)
    note = AnchoredText(f"paper (FADE, Qwen 2.5 7B):\nS/F ratio {lo3:g}–{hi3:g}", loc="upper right",
                        prop={"fontsize": 7}, frameon=True)
    note.patch.set_boxstyle("round,pad=0.3")
    note.patch.set_edgecolor(PAPER_COLOR)
    a1.add_artist(paper_mark(note, [lo3, hi3]))
    y_room(a1, [r["success"] or 0, r["failure"] or 0], margin=0.35)
    a2.bar(["measured\n‖R_F‖/‖R_S‖", "CLT baseline\n√(N_S/N_F)"], [doc["residual_ratio"] or 0, doc["clt_baseline"] or 0],
           color=["tab:blue", "tab:gray"], width=0.6, label="this checkpoint")
    paper_mark(a2.fill_between([-0.4, 0.4], m_lo, m_hi, color="0.55", alpha=0.35, lw=0, zorder=3,
                               label=f"paper: measured {m_lo:g}–{m_hi:g}"), [m_lo, m_hi])
    paper_mark(a2.hlines(clt, 0.6, 1.4, colors=PAPER_COLOR, linestyles=":", lw=1.5, zorder=4,
                         label=f"paper: baseline {clt:g}"), [clt])
    y_room(a2, [doc["residual_ratio"] or 0, doc["clt_baseline"] or 0, m_hi, clt], margin=0.35)
    a2.set_ylabel("ratio of group residual norms")
    a2.set_title("Table 11: residual norms", fontsize=9)
    _legend(a2, loc="upper right")
    for ax in (a1, a2):
        ax.grid(alpha=0.25, lw=0.5, axis="y")
    return png_bytes(fig)


def write_hidden_states_report(doc: dict, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``hidden_states.md``, ``.html``, ``.json`` and ``hidden_states.png`` of an
    :func:`analysis.hidden_states.geometry` document into ``out`` (atomically; ``out`` as
    for :func:`write_report`)."""
    if not isinstance(doc, dict) or "rho_perp" not in doc:
        raise ValueError("doc must be the dict returned by analysis.hidden_states.geometry")
    blocks, images = _hidden_blocks(doc)
    title = "Hidden-state geometry of correct vs failed rollouts"

    def build(tmp: Path) -> None:
        for name, data in images.items():
            atomic_write(tmp / name, lambda p, d=data: Path(p).write_bytes(d))
        atomic_write_text(tmp / "hidden_states.md", render_markdown(title, blocks))
        atomic_write_text(tmp / "hidden_states.html", render_html(title, blocks, images))
        atomic_write_text(tmp / "hidden_states.json", to_json(doc))

    return atomic_dir(out, build, markers=None if overwrite else HIDDEN_STATES_MARKERS)
