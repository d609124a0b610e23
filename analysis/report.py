"""Checkpoint-diff and hidden-state reports: Markdown, self-contained HTML, JSON and PNGs.

:func:`write_report` turns the document of :func:`analysis.weight_diff.diff` into a
directory ``report.md``, ``report.html`` (every plot embedded as a base64 PNG, no external
file or script), ``report.json`` and the PNGs; :func:`write_hidden_states_report` does the
same for :func:`analysis.hidden_states.geometry` (``hidden_states.*``).  Everything is
written into a temporary directory beside ``out`` and renamed to ``out`` when complete
(an existing report directory is replaced only then, :func:`analysis.io.atomic_dir`); files
inside go through :func:`analysis.io.atomic_write`.  JSON follows :mod:`rlvr_theory.serialize`
(NaN → ``null``, ±inf → ``"inf"``/``"-inf"``); numbers in tables are
:func:`rlvr_theory.serialize.fmt_number` with 4 significant digits.

The report is drawn from the document alone (no checkpoint is re-read), so a saved
``report.json`` can be rendered again: ``write_report(json.load(open(p)), out)``.
"""

from __future__ import annotations

import base64
import functools
import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_theory.serialize import dumps, fmt_number

from .io import atomic_dir, atomic_write, atomic_write_text

__all__ = ["write_report", "write_hidden_states_report", "to_json", "render_markdown", "render_html",
           "REPORT_FILES", "REPORT_MARKERS", "HIDDEN_STATES_MARKERS"]

#: files every diff report holds (PNGs come in addition)
REPORT_FILES = ("report.md", "report.html", "report.json")
#: a non-empty directory holding one of these is an earlier diff report (replaced without --overwrite)
REPORT_MARKERS = ("report.json",)
#: ... an earlier hidden-state report (or diff report) directory
HIDDEN_STATES_MARKERS = ("hidden_states.json", "report.json")

Block = tuple  # ("h2", text) | ("p", text) | ("table", headers, rows) | ("img", file, caption)


# ------------------------------------------------------------------ helpers
def to_json(doc: dict) -> str:
    """The document as strict JSON, indented: the one JSON policy of
    :mod:`rlvr_theory.serialize` (NaN → ``null``, ±inf → ``"inf"``/``"-inf"``)."""
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


def _png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _figure(w: float = 7.0, h: float = 3.6, ncols: int = 1):
    """A matplotlib ``Figure`` (object API: no pyplot state, no backend switch) and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    axes = fig.subplots(1, ncols)
    return fig, axes


# ------------------------------------------------------------------- plots
def _labels(doc: dict) -> list[str]:
    return [(f"step {c['step']}" if c.get("step") is not None else _short(c["path"])) for c in doc["checkpoints"]]


def _plot_head_spectrum(doc: dict) -> bytes | None:
    fig, ax = _figure()
    any_ = False
    for lab, c in zip(_labels(doc), doc["checkpoints"]):
        s = c["output_head"].get("singular_values") or []
        if s:
            ax.semilogy(np.arange(1, len(s) + 1), np.maximum(s, 1e-300), label=lab, lw=1.2)
            any_ = True
    if not any_:
        return None
    ax.set_xlabel("index i")
    ax.set_ylabel("σ_i of ΔW (output head)")
    ax.set_xscale("log")
    ax.set_title("Output-head ΔW singular values")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_l2_share(doc: dict) -> bytes:
    fig, ax = _figure()
    for lab, c in zip(_labels(doc), doc["checkpoints"]):
        pl = c["per_layer"]
        if pl:
            ax.plot([p["layer"] for p in pl], [100 * p["l2_share"] for p in pl], marker=".", label=
                    f"{lab} (head {100 * (c['output_head']['l2_share'] or 0):.3g}%)")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("block")
    ax.set_ylabel("share of ‖ΔW‖²_F (%)")
    ax.set_title("Per-layer L2 share (output head in the legend)")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_layer_s12(doc: dict) -> bytes | None:
    fig, ax = _figure()
    drew = False
    for lab, c in zip(_labels(doc), doc["checkpoints"]):
        xs = [p["layer"] for p in c["per_layer"] if p["s1_s2_mean"] is not None]
        ys = [p["s1_s2_mean"] for p in c["per_layer"] if p["s1_s2_mean"] is not None]
        if xs:
            ax.plot(xs, ys, marker=".", label=lab)
            drew = True
    if not drew:
        return None
    ax.set_xlabel("block")
    ax.set_ylabel("mean s1/s2 of the block's weights")
    ax.set_title("Per-layer s1/s2 of ΔW")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_u(doc: dict) -> bytes | None:
    fig, ax = _figure()
    drew = False
    for lab, c in zip(_labels(doc), doc["checkpoints"]):
        q = c["output_head"].get("u_quantiles") or []
        if q:
            ax.plot(np.linspace(0, 1, len(q)), q, label=lab)
            drew = True
    if not drew:
        return None
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("fraction of vocabulary (sorted by u)")
    ax.set_ylabel("u_i")
    ax.set_title("Leading left singular vector u of the output-head ΔW")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_density(doc: dict) -> bytes:
    fig, ax = _figure(6, 3.4)
    tols = [str(t) for t in doc["checkpoints"][0]["density"]]
    for lab, c in zip(_labels(doc), doc["checkpoints"]):
        ax.plot(range(len(tols)), [100 * c["density"][t] for t in tols], marker="o", label=lab)
    ax.set_xticks(range(len(tols)), [f"> {t}" for t in tols])
    ax.set_xlabel("|ΔW| threshold")
    ax.set_ylabel("entries updated (%)")
    ax.set_title("Update density")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_alignment(doc: dict) -> bytes:
    al = doc["alignment"]
    x = [s if s is not None else i for i, s in enumerate(al["steps"])]
    fig, ax = _figure()
    ax.plot(x, [np.nan if v is None else v for v in al["output_head"]["u"]], marker="o", label="output head |cos u|")
    for k, v in al["thirds"].items():
        ax.plot(x, [np.nan if y is None else y for y in v["u"]], marker=".", label=f"{k} blocks |cos u|")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("step" if all(s is not None for s in al["steps"]) else "checkpoint")
    ax.set_ylabel("|cos| with the last checkpoint")
    ax.set_title("Cross-checkpoint alignment of leading singular vectors (FADE Table 12)")
    ax.legend(fontsize=7)
    return _png(fig)


def _plot_clustering(doc: dict) -> bytes:
    from scipy.cluster.hierarchy import dendrogram

    cl = doc["clustering"]
    C = np.asarray(cl["cosine_global"], dtype=float)
    labs = [_short(p) for p in cl["labels"]]
    fig, (a1, a2) = _figure(10, 4, 2)
    im = a1.imshow(C, vmin=-1, vmax=1, cmap="RdBu_r")
    a1.set_xticks(range(len(labs)), labs, rotation=60, ha="right", fontsize=7)
    a1.set_yticks(range(len(labs)), labs, fontsize=7)
    a1.set_title("cos(ΔW_a, ΔW_b), all tensors")
    fig.colorbar(im, ax=a1, shrink=0.8)
    Z = np.asarray(cl["linkage"], dtype=float)
    dendrogram(Z, labels=labs, ax=a2, leaf_rotation=60, leaf_font_size=7)
    a2.set_ylabel("1 − cos (average linkage)")
    a2.set_title("Hierarchical clustering of runs")
    return _png(fig)


# ------------------------------------------------------------------ report
class _Page:
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


def _overview(page: _Page, doc: dict, labs: list[str]) -> None:
    st = doc.get("settings", {})
    arch = doc.get("architecture", {})
    page.add(("p", f"Base: {doc['base']}. Device: {doc['device']}. Architecture: {arch.get('model_type')} with "
                   f"{arch.get('num_layers')} blocks, output head {arch.get('output_head')}"
                   f"{' (tied to the input embedding)' if arch.get('tied_embeddings') else ''}. "
                   f"Settings: top_k = {st.get('top_k')}, layers = {st.get('layers')}, full spectrum = "
                   f"{st.get('full_spectrum')}. Time: {_fmt(doc.get('timing_s'), digits=3)} s."))


def _summary(page: _Page, doc: dict, labs: list[str]) -> None:
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


def _density(page: _Page, doc: dict, labs: list[str]) -> None:
    cks = doc["checkpoints"]
    page.add(("h2", "Update density"))
    tols = list(cks[0]["density"])
    page.add(("table", ["checkpoint"] + [f"|ΔW| > {t}" for t in tols],
              [[lab] + [_pct(c["density"][t], 4) for t in tols] for lab, c in zip(labs, cks)]))
    page.img("density.png", _plot_density(doc), "Fraction of entries with |ΔW| above each threshold.")


def _top_tokens_table(toks: list[dict]) -> Block:
    """The ten most positive and most negative entries of u, side by side."""
    pos = [t for t in toks if t["sign"] == "+"][:10]
    neg = [t for t in toks if t["sign"] == "-"][:10]
    rows = []
    for i in range(max(len(pos), len(neg))):
        row: list[Any] = []
        for lst in (pos, neg):
            if i < len(lst):
                t = lst[i]
                row += [t["token_id"], repr(t["token"]) if t["token"] is not None else "—", _fmt(t["u"])]
            else:
                row += ["", "", ""]
        rows.append([i + 1] + row)
    return ("table", ["rank", "+ id", "+ token", "u", "− id", "− token", "u"], rows)


def _output_head(page: _Page, doc: dict, labs: list[str]) -> None:
    """Spectrum and u of the output-head ΔW (FADE App. 15.1)."""
    page.add(("h2", "Output head"))
    page.img("head_spectrum.png", _plot_head_spectrum(doc), "Singular values of the output-head ΔW.")
    page.img("head_u.png", _plot_u(doc), "The leading left singular vector u over the vocabulary, sorted.")
    for lab, c in zip(labs, doc["checkpoints"]):
        h = c["output_head"]
        page.add(("h3", f"{lab}: {h['name']}"))
        share = h.get("u_energy_share") or {}
        page.add(("p", f"‖ΔW‖_F = {_fmt(h['l2'])} ({_pct(h['l2_share'])} of the total), s1 = {_fmt(h.get('s1'))}, "
                       f"s2 = {_fmt(h.get('s2'))}, s1/s2 = {_fmt(h['s1_s2'])}, r1 = {_pct(h['rank1_fraction'])}, "
                       f"srank(δ) = {h.get('srank')}, stable rank = {_fmt(h.get('stable_rank'))}, effective rank = "
                       f"{_fmt(h.get('effective_rank'))}. u: {_pct(h.get('u_negative_fraction'), 4)} of tokens "
                       f"negative; top 1% of tokens hold {_pct(share.get('0.01'))} of ‖u‖², top 22% hold "
                       f"{_pct(share.get('0.22'))}; half of ‖u‖² lies in "
                       f"{_pct(h.get('u_vocab_fraction_for_half_energy'))} of the vocabulary."))
        if h.get("top_tokens"):
            page.add(_top_tokens_table(h["top_tokens"]))


def _layers(page: _Page, doc: dict, labs: list[str]) -> None:
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


def _alignment(page: _Page, doc: dict, labs: list[str]) -> None:
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


def _clustering(page: _Page, doc: dict, labs: list[str]) -> None:
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


#: the sections of a diff report, in order
_SECTIONS = (_overview, _summary, _density, _output_head, _layers, _alignment, _clustering)


def _blocks(doc: dict) -> tuple[list[Block], dict[str, bytes]]:
    """The report's blocks and images: one section after the other (:data:`_SECTIONS`)."""
    page, labs = _Page(), _labels(doc)
    for section in _SECTIONS:
        section(page, doc, labs)
    return page.blocks, page.images


def write_report(doc: dict, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``report.md``, ``report.html``, ``report.json`` and the PNGs of a
    :func:`analysis.weight_diff.diff` document into directory ``out`` (atomically).

    ``out`` may not exist yet, be empty, or be a previous report directory (replaced
    when the new one is complete); anything else is refused with a ``ValueError`` unless
    ``overwrite`` (then it is replaced whole).  A write the system refuses (disk full)
    raises ``OSError`` naming the file and leaves ``out`` as it was.
    """
    if not isinstance(doc, dict) or "checkpoints" not in doc or not doc["checkpoints"]:
        raise ValueError("doc must be the dict returned by analysis.weight_diff.diff")
    blocks, images = _blocks(doc)
    title = "Checkpoint diff: ΔW = W_rl − W_base"

    def build(tmp: Path) -> None:
        for name, data in images.items():
            atomic_write(tmp / name, lambda p, d=data: Path(p).write_bytes(d))
        atomic_write_text(tmp / "report.md", render_markdown(title, blocks))
        atomic_write_text(tmp / "report.html", render_html(title, blocks, images))
        atomic_write_text(tmp / "report.json", to_json(doc))

    return atomic_dir(out, build, markers=None if overwrite else REPORT_MARKERS)


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
    fig, (a1, a2) = _figure(8, 3.2, 2)
    a1.bar(["correct", "failed"], [r["success"] or 0, r["failure"] or 0], color=["tab:green", "tab:red"])
    a1.set_title("ρ̂ of h⊥ (Table 10)")
    a2.bar(["measured", "CLT"], [doc["residual_ratio"] or 0, doc["clt_baseline"] or 0], color=["tab:blue", "tab:gray"])
    a2.set_title("‖R_F‖/‖R_S‖ (Table 11)")
    images["hidden_states.png"] = _png(fig)
    B.append(("img", "hidden_states.png", "Perpendicular correlation by outcome and residual-norm ratio."))
    return B, images


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
