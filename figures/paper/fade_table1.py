"""FADE Table 1: every advantage as (m_S, m_F), closed form and numbers.

The CSV holds one row per family: the sympy expressions (per rollout), the kind of the
closed form, the source, any erratum, and the plug-in and exact finite-G values at
p = 0.3 and p = 0.5 (G = 8).  The PNG draws the formulas with matplotlib's mathtext (sympy's
LaTeX, a Piecewise written with indicators) and shades the cells the paper states.
"""

from __future__ import annotations

import re

import pandas as pd
import sympy as sp
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from rlvr_theory import masses

from ..registry import Claim, FigureSpec, register
from ._style import plt, tag_paper

G = 8
P = (0.3, 0.5)


def data() -> pd.DataFrame:
    expr = masses.expressions()
    vals = masses.table(P, G)
    wide = vals.pivot_table(index="advantage", columns="p",
                            values=["m_S", "m_F", "m_S_exact", "m_F_exact"], sort=False)
    wide.columns = [f"{v}@p={p:g}" for v, p in wide.columns]
    return expr.merge(wide.reset_index(), on="advantage").assign(G=G)


#: the paper's numbers shown in the table (App. 8), shaded and recorded as paper marks
PAPER_CELLS = {("grpo", "m_S@p=0.3"): 0.21**0.5, ("maxrl", "m_F@p=0.3"): 0.7,
               ("binary_contrastive", "m_F@p=0.3"): 0.3, ("mc_grpo", "m_S@p=0.5"): 0.5}
_VALUES = ["m_S@p=0.3", "m_F@p=0.3", "m_S@p=0.5", "m_F@p=0.5", "m_S_exact@p=0.3", "m_F_exact@p=0.3"]
_HEADS = ["advantage", "$m_S(p)$", "$m_F(p)$", "kind", "$m_S(0.3)$", "$m_F(0.3)$", "$m_S(0.5)$", "$m_F(0.5)$",
          "exact $m_S(0.3)$", "exact $m_F(0.3)$", "parameters"]


def _tex(text: str) -> str:
    """A mass formula (sympy's text form) as mathtext: sympy's LaTeX with each Piecewise written
    as a sum of indicator terms ``a·1[cond]`` (mathtext has no ``cases``)."""
    expr = sp.sympify(text, locals={"p": sp.Symbol("p"), "G": sp.Symbol("G")})
    pieces = {sp.Symbol(f"PIECEWISE{chr(65 + i)}"): pw for i, pw in enumerate(expr.atoms(sp.Piecewise))}
    tex = sp.latex(expr.xreplace({pw: name for name, pw in pieces.items()}))
    for name, pw in pieces.items():
        terms, rest = [], sp.true
        for value, cond in pw.args:  # the piece holds where its condition does and no earlier one's
            cond, rest = sp.And(cond, rest), sp.And(rest, sp.Not(cond))
            if value != 0:
                lhs = rf"\left({sp.latex(value)}\right)" if isinstance(value, sp.Add) else sp.latex(value)
                terms.append(lhs + ("" if cond == sp.true else rf"\,\mathbb{{1}}[{sp.latex(cond)}]"))
        part = " + ".join(terms) or "0"
        tex = tex.replace(sp.latex(name), part if tex == sp.latex(name) else rf"\left({part}\right)")
    tex = re.sub(r"\^\{\\frac\{([^{}]*)\}\{([^{}]*)\}\}", r"^{\1/\2}", tex)  # p^{3/2}, not a stacked 3 over 2
    return "$" + tex.replace(r"\frac", r"\dfrac") + "$"


def _grid(fig, cells: list[list[str]], *, fontsize: float = 7.5, pad: float = 6.0, top: float = 26.0,
          bottom: float = 40.0) -> list[list[tuple[float, float, float, float]]]:
    """Draw ``cells`` (first row: header) as a ruled table filling ``fig``, sized to its text;
    returns each cell's box (x, y, width, height) in figure pixels."""
    renderer = fig.canvas.get_renderer()
    texts = [[fig.text(0, 0, s, fontsize=fontsize - (0.8 if j == len(row) - 1 else 0), va="center",
                       weight="bold" if i == 0 else "normal") for j, s in enumerate(row)] for i, row in enumerate(cells)]
    ext = [[t.get_window_extent(renderer) for t in row] for row in texts]
    col_w = [max(e.width for e in col) + 2 * pad for col in zip(*ext)]
    row_h = [max(e.height for e in row) + 2 * pad for row in ext]
    W, H = sum(col_w), sum(row_h) + top + bottom
    fig.set_size_inches(W / fig.dpi, H / fig.dpi)
    boxes, y = [], H - top
    for i, row in enumerate(texts):
        y -= row_h[i]
        x, line = 0.0, []
        for j, t in enumerate(row):
            t.set_position(((x + pad) / W, (y + row_h[i] / 2) / H))
            line.append((x, y, col_w[j], row_h[i]))
            x += col_w[j]
        boxes.append(line)
        fig.add_artist(Line2D([0, 1], [y / H] * 2, color="0.2" if i == 0 else "0.8", lw=0.8 if i == 0 else 0.5))
    fig.add_artist(Line2D([0, 1], [(H - top) / H] * 2, color="0.2", lw=0.8))
    return boxes


def plot(df: pd.DataFrame):
    cells = [_HEADS]
    for r in df.to_dict("records"):
        same = r["m_S"] == r["m_F"]
        params = "" if not isinstance(r["params"], str) else r["params"]
        cells.append([r["advantage"], _tex(r["m_S"]), "$= m_S$" if same else _tex(r["m_F"]), r["kind"]]
                     + [f"{r[c]:.4g}" for c in _VALUES] + [params])
    fig = plt.figure()
    boxes = _grid(fig, cells)
    W, H = fig.get_size_inches() * fig.dpi
    names = list(df.advantage)
    for (name, column), value in PAPER_CELLS.items():
        x, y, w, h = boxes[1 + names.index(name)][4 + _VALUES.index(column)]
        tag_paper(fig.add_artist(Rectangle((x / W, y / H), w / W, h / H, transform=fig.transFigure,
                                           facecolor="0.82", lw=0, zorder=-1)), [value])
    fig.text(0.5, 1 - 13 / H, f"FADE Table 1: masses per rollout $m_S$, $m_F$ of every advantage (G = {G})",
             ha="center", va="center", fontsize=10)
    fig.text(0.005, 20 / H, r"$e$: Euler's number;  $\mathbb{1}[\cdot]$: indicator;  "
             r"$= m_S$: same formula as $m_S$.  Values: the closed form at p = 0.3 and 0.5; exact: the finite-G "
             f"expectation over X ~ Binom(G = {G}, p).  Shaded: the paper's numbers (App. 8.1, 8.3, 8.6, 8.7).\n"
             r"kind: exact = the formula at $\hat p = X/G$ gives every group's masses; expectation = it gives their "
             r"mean over X ~ Binom(G, p); asymptotic = it is the $G \to \infty$ limit.", va="center", fontsize=7)
    return fig


def markdown(df: pd.DataFrame) -> str:
    lines = [f"| advantage | m_S | m_F | kind | m_S(0.3) | m_F(0.3) | exact m_S(0.3), G={G} | "
             f"exact m_F(0.3), G={G} | source |", "|---|---|---|---|---|---|---|---|---|"]
    for r in df.to_dict("records"):
        lines.append(f"| {r['advantage']} | ${r['m_S_latex']}$ | ${r['m_F_latex']}$ | {r['kind']} | "
                     f"{r['m_S@p=0.3']:.6g} | {r['m_F@p=0.3']:.6g} | {r['m_S_exact@p=0.3']:.6g} | "
                     f"{r['m_F_exact@p=0.3']:.6g} | {r['source']} |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    row = df.set_index("advantage")
    return [
        Claim("GRPO m_S = m_F = sqrt(pq) at p = 0.3", "FADE App. 8.1", 0.21**0.5, row.loc["grpo", "m_S@p=0.3"], 1e-12),
        Claim("MaxRL m_S = m_F = q at p = 0.3", "FADE App. 8.3", 0.7, row.loc["maxrl", "m_F@p=0.3"], 1e-12),
        Claim("binary contrastive m_S = m_F = p at p = 0.3", "FADE App. 8.7", 0.3,
              row.loc["binary_contrastive", "m_F@p=0.3"], 1e-12),
        Claim("MC-GRPO m_S = p·1[p <= 1/2] at p = 0.5", "FADE App. 8.6", 0.5, row.loc["mc_grpo", "m_S@p=0.5"], 1e-12),
    ]


register(FigureSpec("fade_table1", "Masses (m_S, m_F) of every advantage", "FADE Table 1, App. 8",
                    data, plot, claims, markdown))
