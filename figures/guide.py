"""Generated parts of two documents: the table of ``docs/choosing_an_advantage.md`` and the
gallery of ``docs/figures.md``.

* :func:`guide_table` — what the main advantage families do to the quantities the papers
  name (masses ``m_S``, ``m_F``, sign ratio, ``ρ``, ``Σ|A|``, weight-estimation variance) and
  what group sampling does (zero-signal groups, tail-miss), at solve rates ``p`` and group
  sizes ``G``; every number comes from :mod:`rlvr_theory` (:mod:`~rlvr_theory.masses`,
  :mod:`~rlvr_theory.variance`, :mod:`~rlvr_theory.tail_miss`).  :func:`guide_markdown`
  renders it.
* :func:`gallery_markdown` — one section per registered figure: thumbnail, title, source,
  what it shows, and its claims with their status read from ``docs/reproduction.md``
  (:func:`figures.registry.parse_reproduction_markdown`), so no figure is re-made for the
  text; :func:`write_thumbnails` makes the thumbnails from a folder of made figures.
* :func:`replace_generated` / :func:`update_document` — rewrite the part of a document
  between ``<!-- BEGIN GENERATED: NAME -->`` and ``<!-- END GENERATED -->`` (atomically,
  :func:`rlvr_plumbing.io.atomic_write_text`).

Command line: ``rlvr-figures guide`` and ``rlvr-figures gallery`` (:mod:`figures.cli`).

Examples
--------
>>> t = guide_table(p=(0.5,), G=(8,), families=(("asym_grpo", {"delta": 0.5}),))
>>> t[["family", "G", "p", "m_S", "m_F", "sign_ratio", "rho"]]
            family  G    p      m_S     m_F  sign_ratio  rho
0  asym_grpo δ=0.5  8  0.5  0.21875  0.4375         0.5  0.5
>>> replace_generated("a\\n<!-- BEGIN GENERATED: x -->\\nold\\n<!-- END GENERATED -->\\nb\\n", "x", "new\\n")
'a\\n<!-- BEGIN GENERATED: x -->\\nnew\\n<!-- END GENERATED -->\\nb\\n'
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr_plumbing import checks
from rlvr_plumbing.io import atomic_write, atomic_write_text, check_out
from rlvr_plumbing.serialize import fmt_number
from rlvr_theory import advantages, masses, tail_miss, variance

from . import registry

if TYPE_CHECKING:  # imported where used: `rlvr-figures --help` loads no pandas
    import pandas as pd

__all__ = ["FAMILIES", "FIGURE_FAMILIES", "GUIDE_P", "GUIDE_G", "RARE_SHARE", "family_label", "param_flags",
           "guide_table", "guide_markdown", "gallery_markdown", "figure_description", "write_thumbnails",
           "replace_generated", "update_document", "GUIDE_MARKER", "GALLERY_MARKER", "THUMB_WIDTH"]

#: the families of the guide: (registry name, parameters), in the order of the tables
FAMILIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("grpo", {}),
    ("dr_grpo", {}),
    ("maxrl", {}),
    ("power_alpha", {"alpha": 2.0, "normalize": True}),
    ("agrae_hard", {}),
    ("fgrpo", {"gamma": 1.0}),
    ("passk_chen", {"k": 4}),
    ("asym_grpo", {"delta": 0.5}),
    ("asym_grpo", {"delta": 2.0}),
    ("fade", {"alpha": 2.0, "delta": 0.5}),
    ("negative_dominant", {"beta": 10.0}),
    ("grpo_n", {}),
    ("w_reinforce", {"lam": 0.1}),
    ("iac", {"alpha": 1.0}),
)
#: the families drawn by the figure ``guide_families`` (a subset, so that each curve is visible)
FIGURE_FAMILIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("grpo", {}),
    ("dr_grpo", {}),
    ("maxrl", {}),
    ("power_alpha", {"alpha": 2.0, "normalize": True}),
    ("fgrpo", {"gamma": 1.0}),
    ("asym_grpo", {"delta": 0.5}),
)
GUIDE_P: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
GUIDE_G: tuple[int, ...] = (8, 16)
#: the rare-correct mode of the tail-miss columns holds this share of the correct mass (τ = μ/10)
RARE_SHARE = 0.1
GUIDE_MARKER = "guide table (rlvr-figures guide)"
GALLERY_MARKER = "gallery (rlvr-figures gallery)"
THUMB_WIDTH = 480

_SYMBOL = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "lam": "λ", "tau": "τ"}
_BEGIN = "<!-- BEGIN GENERATED: {} -->"
_END = "<!-- END GENERATED -->"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def family_label(name: str, params: dict[str, Any]) -> str:
    """Short label of a family with its parameters: ``asym_grpo δ=0.5``.

    >>> family_label("power_alpha", {"alpha": 2.0, "normalize": True})
    'power_alpha α=2, normalized'
    """
    parts = []
    for k, v in params.items():
        if k == "normalize":
            if v:
                parts.append("normalized")
            continue
        parts.append(f"{_SYMBOL.get(k, k)}={_value(v)}")
    return name + (" " + ", ".join(parts) if parts else "")


def param_flags(params: dict[str, Any]) -> str:
    """The ``--param NAME=VALUE`` flags that select ``params`` on the command line.

    >>> param_flags({"alpha": 2.0, "normalize": True})
    '--param alpha=2 --param normalize=true'
    """
    return " ".join(f"--param {k}={_value(v)}" for k, v in params.items())


# ------------------------------------------------------------------- the guide
def guide_table(p: Sequence[float] = GUIDE_P, G: Sequence[int] = GUIDE_G,
                families: Iterable[tuple[str, dict[str, Any]]] = FAMILIES, *,
                rare_share: float = RARE_SHARE) -> pd.DataFrame:
    """One row per (family, G, p): what a family does at solve rate ``p`` with ``G`` rollouts.

    Columns: ``family`` (label), ``advantage`` (registry name), ``params`` (``--param`` flags),
    ``G``, ``p``; per family, each an exact expectation over the group's successes
    ``X ~ Binom(G, p)`` (so the groups without signal count, with their zero or non-zero
    weights): ``m_S``, ``m_F`` (:func:`rlvr_theory.masses.exact`), ``sign_ratio`` = m_S/m_F
    and ``rho`` = m_S·p/(m_F·q) (FADE Table 7; :func:`~rlvr_theory.masses.advantage_ratio`
    with ``exact=True``), ``abs_adv_sum`` = E[Σ_i|A_i|] per group of ``G`` rollouts (A-GRAE Theorem 2),
    ``rel_var`` = Var(w(p̂))/w(p)² of the weight w = m_S (m_F where m_S is identically 0;
    FADE Eq. 28-31, :func:`~rlvr_theory.variance.relative_weight_variance` with
    ``method="exact"``), ``weight`` (which mass that is); per (G, p), the same for every
    family: ``zero_signal`` = Pr(all rewards equal) = 1 − Pr(A_N) (F-GRPO Eq. 9),
    ``all_wrong`` = (1−p)^G, ``tail_miss`` = Pr(B_τ) at τ = ``rare_share``·p (F-GRPO
    Lemma 3.1) and ``miss_given_active`` = Pr(B_τ | A_N).

    Examples
    --------
    >>> t = guide_table(p=(0.1,), G=(8,), families=(("grpo", {}),))
    >>> round(float(t.zero_signal[0]), 4), round(float(t.all_wrong[0]), 4), round(float(t.tail_miss[0]), 4)
    (0.4305, 0.4305, 0.4923)
    """
    import pandas as pd

    pa = checks.array("p", p, low=0, high=1).ravel()
    Gs = [checks.integer("G", g, low=1) for g in np.atleast_1d(np.asarray(G, dtype=object))]
    rare_share = checks.number("rare_share", rare_share, 0, 1)
    rows = []
    for name, params in families:
        adv = advantages.get(name, **params)
        which = "m_F" if masses.lambdified(adv, max(Gs))[2][0].is_zero else "m_S"
        for g in Gs:
            g = masses.check_group_size(g, adv)
            ms, mf, mean_abs = masses.exact(adv, pa, g, with_abs=True)
            sign = masses.sign_ratio(adv, pa, g, exact=True)
            rho = masses.advantage_ratio(adv, pa, g, exact=True)
            rel = variance.relative_weight_variance(adv, pa, g, which=which, method="exact")
            tau = rare_share * pa
            rows.append(pd.DataFrame({
                "family": family_label(name, params), "advantage": name, "params": param_flags(params),
                "G": g, "p": pa, "m_S": ms, "m_F": mf, "sign_ratio": sign, "rho": rho,
                "abs_adv_sum": g * mean_abs, "rel_var": rel, "weight": which,
                "zero_signal": 1.0 - np.asarray(tail_miss.active(pa, g)), "all_wrong": tail_miss.coverage_factor(pa, g),
                "tail_miss": tail_miss.probability(pa, tau, g),
                "miss_given_active": tail_miss.miss_given_active(pa, tau, g),
            }))
    return pd.concat(rows, ignore_index=True)


def _cell(x: float, digits: int = 3) -> str:
    return fmt_number(float(x), digits)


def _wide(t: pd.DataFrame, value: str, Gs: Sequence[int], ps: Sequence[float], fmt=None) -> list[str]:
    """Rows = families, columns = (G, p) blocks."""
    fmt = fmt or (lambda r: _cell(r[value]))
    head = "| family | " + " | ".join(f"G={g}, p={p:g}" for g in Gs for p in ps) + " |"
    lines = [head, "|---|" + "---:|" * (len(Gs) * len(ps))]
    idx = t.set_index(["family", "G", "p"])
    for fam in dict.fromkeys(t.family):
        cells = [fmt(idx.loc[(fam, g, p)]) for g in Gs for p in ps]
        lines.append(f"| `{fam}` | " + " | ".join(cells) + " |")
    return lines


def guide_markdown(t: pd.DataFrame | None = None) -> str:
    """The generated part of ``docs/choosing_an_advantage.md``: the tables of :func:`guide_table`
    (3 significant digits, ``∞`` for an infinite ratio, ``—`` for an undefined one)."""
    t = guide_table() if t is None else t
    Gs = list(dict.fromkeys(int(g) for g in t.G))
    ps = list(dict.fromkeys(float(p) for p in t.p))
    first = t[t.family == t.family.iloc[0]].set_index(["G", "p"])
    out = ["Generated by `rlvr-figures guide` from `figures.guide.guide_table()`; do not edit by hand. "
           "Every per-family number is an exact expectation over the number of successes X ~ Binom(G, p) "
           "of a group of G rollouts of a prompt with solve rate p (groups without signal included).",
           "",
           "**Table 1 — sampling (the same for every family).** Share of groups without signal (all "
           "rewards equal: no baseline family learns from them), the all-wrong part of it, and the "
           f"tail-miss probability Pr(B_τ) for a rare-correct mode holding τ = {RARE_SHARE:g}·p of the "
           "solve rate (F-GRPO Lemma 3.1), unconditional and given that the update is active.",
           "",
           "| p | " + " | ".join(f"{c}, G={g}" for g in Gs for c in ("zero-signal", "all-wrong", "Pr(B_τ)",
                                                                    "Pr(B_τ \\| active)")) + " |",
           "|---:|" + "---:|" * (4 * len(Gs))]
    for p in ps:
        cells = []
        for g in Gs:
            r = first.loc[(g, p)]
            cells += [_cell(r.zero_signal), _cell(r.all_wrong), _cell(r.tail_miss), _cell(r.miss_given_active)]
        out.append(f"| {p:g} | " + " | ".join(cells) + " |")
    flags = t.drop_duplicates("family")[["family", "advantage", "params"]]
    out += ["", "**Table 2 — the families and how to select them** (`rlvr-theory table --advantage NAME "
            "[--param ...]`, `rlvr-train --advantage NAME [--param ...]`).", "",
            "| family | registry name | parameters |", "|---|---|---|"]
    out += [f"| `{r.family}` | `{r.advantage}` | {('`' + r.params + '`') if r.params else '(defaults)'} |"
            for r in flags.itertuples()]
    for g in Gs:
        out += ["", f"**Table 3{'abcdefgh'[Gs.index(g)]} — masses m_S / m_F at G = {g}, exact** (the "
                "finite-G expectation, not the plug-in closed form at p̂ = p; difficulty focus: where the mass "
                "peaks in p; sign: which of the two is larger).", ""]
        out += _wide(t, "m_S", [g], ps, lambda r: f"{_cell(r.m_S)} / {_cell(r.m_F)}")
    out += ["", "**Table 4 — sign ratio m_S/m_F, exact** (of the exact masses; > 1 success-biased, < 1 "
            "failure-biased; FADE Sec. 4.1: the entropy drift is η(m_S − m_F)·H).", ""]
    out += _wide(t, "sign_ratio", Gs, ps)
    odds = ", ".join(_cell(p / (1 - p)) if p < 1 else "∞" for p in ps)
    out += ["", "**Table 5 — advantage ratio ρ = m_S·p/(m_F·q), exact** (of the exact masses; FADE Table 7 "
            f"prints the plug-in; p/(1−p) for every sign-balanced family: {odds}).", ""]
    out += _wide(t, "rho", Gs, ps)
    out += ["", "**Table 6 — update magnitude Σ_i |A_i| per group of G rollouts, exact** (E over X; "
            "`abs_adv_sum` in every table and report of this toolkit; A-GRAE Theorem 2: 2G·sqrt(p̂(1−p̂)) for a "
            "GRPO group with p̂ = X/G; the scale axis of FADE Sec. 1).", ""]
    out += _wide(t, "abs_adv_sum", Gs, ps)
    out += ["", "**Table 7 — relative weight-estimation variance Var(w(p̂))/w(p)²** of the weight w = m_S "
            "(m_F for `grpo_n`, whose m_S is 0) evaluated at p̂ = X/G (FADE Eq. 28-31, exact over X).", ""]
    out += _wide(t, "rel_var", Gs, ps)
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- the gallery
#: what each figure shows (moved from the former table of docs/figures.md); a figure without an
#: entry is described by the first paragraph of its module's docstring
WHAT: dict[str, str] = {
    "fade_app15_residuals": "residual-norm ratio ‖R_F‖/‖R_S‖ vs N_S/N_F: CLT baseline, Monte Carlo of the "
                            "null, the paper's measured band",
    "fade_fig2": "m_S (solid), m_F (dashed) vs p: existing methods, Power α series (dotted: peak-normalised, Eq. 27), "
                 "AsymGRPO series",
    "fade_table1": "closed forms of every family, values at p = 0.3, 0.5, plug-in and exact (G = 8)",
    "fade_table7": "ρ at p = 0.3 and 0.5, plug-in and exact (G = 8); families with m_F = 0 left out as in "
                   "the paper",
    "agrae_thm1_behaviour": "one SGD step measured vs Eq. 6; π(b2) and entropy over 200 steps (SGD, Adam) for "
                            "GRPO, negative-dominant, GRPO-N; Two-Stage toy GRPO vs GRPO-N",
    "agrae_fig6": "Σ_i|A_i| per group vs p (G = 8): GRPO, hard- and easy-focused",
    "fgrpo_fig3": "(1−p)^γ·|A_GRPO| for correct (solid) and incorrect (dashed) rollouts, γ ∈ {0, 0.5, 1, 2}",
    "fgrpo_fig1a": "Pr(B_τ), Pr(A_N) and (1−τ)^N vs N at μ = 0.5, τ = 0.01, N = 2, 8, 32 and the peak marked",
    "fgrpo_fig2": "Pr(B_τ) vs N, panels μ ∈ {0.8, 0.5, 0.2}, curves ρ ∈ {0.2, 0.1, 0.05, 0.01}, stars at "
                  "`peak`",
    "fgrpo_fig5": "Pr(B_τ) and Pr(A_N) vs N at μ = 0.64, τ = 6.3e-5, sweep N = 2^0..2^17 (linear and log axes)",
    "twostage_fig1": "π(a1..a3) vs step, mean of 16 seeds + each seed; top π0(a2) ∈ {0.05, 0.01, 0.002}, "
                     "bottom r(a1) ∈ {0.2, 0.5, 0.8}; G = 2, Adam, lr 0.1",
    "twostage_fig5": "the two-stage toy for G = 2, 3, 5, 10",
    "twostage_fig6": "the two-stage toy for temperatures 1, 2, 5, 20 (π0 fixed) + entropy",
    "twostage_fig7": "four actions, mean of seeds + one seed",
    "fgrpo_fig4": "Q_pos and M_ret vs step, final vs N (small preset; `rlvr-figures make fgrpo_fig4 --full` "
                  "for the paper-scale sweep)",
    "fade_fig7": "Power α weights, Var(w(p̂)) (delta solid, exact dashed) and Var(w)/w² with v0 at G = 16, "
                 "α ∈ {1, 2, 3, 5}",
    "fade_table8": "minimum s(p)/s(0.5) for α = 3 over GRPO, p = 0.05…0.5, G = ∞ and (ours) G = 16, 8 with "
                   "easing; PNG table + CSV + markdown",
    "fade_sweetspot": "c, G, p*, α_mode, α_known, α_corrected (delta and exact Var) for c = 0…1.5, G = 8, 16",
    "oversharpening_appg": "High / Mid / Low similarity: λ, ρ, λ/ρ (ours next to the printed values), "
                           "η = ρ/λ, and R (App. F form) vs G for labels Cat:Persian:Dog = 5:2:1 at q = Persian, "
                           "GRPO advantages, o' = Cat; Markdown table",
    "oversharpening_fig1": "π(Cat), π(Persian) at Persian over 500 steps for raw, mean-shifted, normalised, "
                           "RLOO, REINFORCE++ and G ∈ {4, 16, 64}",
    "oversharpening_fig2": "held-out Siamese accuracy for High/Mid/Low × G ∈ {4, 16}; GRPO vs IAC winner "
                           "share and entropy",
    "oversharpening_fig5": "winner share of Cat/Persian in the Persian toy under SGD and AdamW for GRPO, IAC and "
                           "IAC + DLC (memory head, μ = 0.5), the same with raw rewards, and the final share "
                           "against the memory head's learning rate (G = 4, 16)",
    "fade_rank1_funnel": "r1 of ΔW over steps for δ ∈ {0.5, 1, 2}, K ∈ {2, 4, 16}; dotted r1 of E[g]",
    "fade_fig8": "FADE α, δ over steps, solve rate and entropy/H0",
    "guide_families": "the main families on one page: m_S (solid), m_F (dashed), ρ and Σ_i|A_i| vs p for "
                      "G = 8 and 16; lines are expectations over X ~ Binom(G, p), markers one group with "
                      "p̂ = x/G; the table behind it is in [choosing_an_advantage.md](choosing_an_advantage.md)",
}

_STATUS_ORDER = registry.STATUSES


def figure_description(name: str) -> str:
    """What figure ``name`` shows: :data:`WHAT`, else the first paragraph of its module's docstring."""
    if name in WHAT:
        return WHAT[name]
    spec = registry.get(name)
    module = sys.modules.get(spec.data.__module__) or importlib.import_module(spec.data.__module__)
    doc = (module.__doc__ or spec.title).strip().split("\n\n")[0]
    doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc).replace("``", "`")  # Sphinx roles and literals -> Markdown
    return " ".join(doc.split()).rstrip(".")


def gallery_markdown(reproduction_text: str, *, thumbs: str = "gallery") -> str:
    """The generated gallery of ``docs/figures.md``: one section per registered figure with its
    thumbnail ``{thumbs}/NAME.png``, title, source, :func:`figure_description` and its claims
    with their status and numbers as ``docs/reproduction.md`` shows them (``reproduction_text``,
    parsed by :func:`figures.registry.parse_reproduction_markdown`).

    Examples
    --------
    >>> text = ("| figure | claim | source | paper | ours | tol | status | note |\\n|---|\\n"
    ...         "| agrae_fig6 | a claim | A-GRAE Fig. 6 | 8 | 8 | 1e-12 | pass |  |\\n")
    >>> "Claims (1: 1 pass)" in gallery_markdown(text)
    True
    """
    table = registry.parse_reproduction_markdown(reproduction_text)
    names = registry.names()
    counts = table.status.value_counts()
    lines = [f"Generated by `rlvr-figures gallery` from the figure registry and "
             f"[reproduction.md](reproduction.md); do not edit by hand. {len(names)} figures, "
             f"{len(table)} claims — " + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in _STATUS_ORDER) + ".",
             "", "Figures: " + " · ".join(f"[`{n}`](#{n})" for n in names) + "."]
    for name in names:
        spec = registry.get(name)
        rows = table[table.figure == name]
        c = rows.status.value_counts()
        summary = (f"{len(rows)}: "
                   + ", ".join(f"{int(c[s])} {s}" for s in _STATUS_ORDER if c.get(s, 0))) if len(rows) else \
            "no claims in reproduction.md yet (run `rlvr-figures check`)"
        lines += ["", f"### {name}", "",
                  f"[![{name}]({thumbs}/{name}.png)]({thumbs}/{name}.png)", "",
                  f"**{registry._escape(spec.title)}** — {registry._escape(spec.source)}. `rlvr-figures make {name}`", "",
                  f"Shows: {figure_description(name)}.", "", f"Claims ({summary}):"]
        if len(rows):
            lines.append("")
        for r in rows.itertuples():
            nums = f"paper {fmt_number(r.paper)}, ours {fmt_number(r.ours)}"
            note = f" — {r.note}" if r.note else ""
            lines.append(f"- **{r.status}** {r.claim} ({r.source}): {nums}{note}")
    return "\n".join(lines) + "\n"


def write_thumbnails(figures_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                     names: Sequence[str] | None = None, width: int = THUMB_WIDTH) -> list[Path]:
    """Write ``out_dir/NAME.png``, a ``width``-pixel-wide thumbnail (palette PNG, optimised) of
    ``figures_dir/NAME.png`` for every registered figure (or ``names``).  A missing PNG is
    refused, naming the figures and the command that makes them, before anything is written;
    each thumbnail is written atomically."""
    from PIL import Image

    width = checks.integer("width", width, low=16)
    src = Path(figures_dir)
    wanted = list(names) if names is not None else registry.names()
    for n in wanted:
        registry.get(n)
    missing = [n for n in wanted if not (src / f"{n}.png").is_file()]
    if missing:
        raise ValueError(f"figures: no PNG in {src} for {', '.join(missing)}; make them first with "
                         f"`rlvr-figures make --all --out {src}`")
    out = check_out(out_dir, overwrite=True, arg="out")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for n in wanted:
        with Image.open(src / f"{n}.png") as im:
            im = im.convert("RGB")
            w = min(width, im.width)
            h = max(1, round(im.height * w / im.width))
            thumb = im.resize((w, h), Image.LANCZOS).quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        atomic_write(out / f"{n}.png", lambda p, t=thumb: t.save(p, format="PNG", optimize=True))
        written.append(out / f"{n}.png")
    return written


# ------------------------------------------------------------ generated parts
def replace_generated(text: str, name: str, body: str, *, where: str = "the document") -> str:
    """``text`` with the lines between ``<!-- BEGIN GENERATED: name -->`` and the next
    ``<!-- END GENERATED -->`` replaced by ``body``; ``ValueError`` if the markers are missing."""
    begin = _BEGIN.format(name)
    i = text.find(begin)
    j = text.find(_END, i + len(begin)) if i >= 0 else -1
    if i < 0 or j < 0:
        raise ValueError(f"doc: {where} has no '{begin}' ... '{_END}' block")
    body = body if body.endswith("\n") else body + "\n"
    return text[: i + len(begin)] + "\n" + body + text[j:]


def update_document(path: str | os.PathLike, name: str, body: str, *, check: bool = False) -> bool:
    """Put ``body`` between the markers ``name`` of the document ``path``; returns whether the
    document changed.  A document whose only differences are printed decimals within one unit in
    their last place (:func:`figures.registry.same_at_shown_precision`: a rounding tie decided by another
    machine's last bit) is left as it is.  ``check``: only compare, write nothing.  Written
    atomically."""
    path = check_out(path, kind="file", arg="doc")
    if not path.is_file():
        raise ValueError(f"doc: {path} does not exist")
    old = path.read_text(encoding="utf-8")
    new = replace_generated(old, name, body, where=str(path))
    if registry.same_at_shown_precision(old, new):
        return False
    if not check:
        atomic_write_text(path, new)
    return True
