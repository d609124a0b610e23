"""``rlvr-figures list | make NAME... --out DIR | make --all [--full] | check [--full] | guide | gallery``
(also ``python -m figures``).

``check`` makes the figures and puts every paper claim next to ours (pass / depends / explained /
underpowered / not reproducible here / fail) in one table, written to ``OUT/claims.txt`` and ``OUT/claims.csv`` and to
``docs/reproduction.md``; it prints one summary line (figures made, claims by status, time), each
failed claim in full and where the table went (``--verbose``: also a line per figure and the whole
table), and exits 1 when a claim fails without an explanation.  An existing table that already holds the same claims at
their precision (numbers within tol/10 of those shown) is left untouched, so ``make figures`` keeps a clean
checkout clean (:func:`figures.registry.write_reproduction`).  Parsing, errors (exit 2), Ctrl-C (130), a closed pipe (141)
and ``--threads`` are those of every console script of the toolkit (:mod:`rlvr_plumbing.runner`,
``docs/cli.md``).

``guide`` rewrites the generated table of ``docs/choosing_an_advantage.md``
(:func:`figures.guide.guide_markdown`); ``gallery`` writes a thumbnail of every figure of a
figures folder to ``docs/gallery/`` and rewrites the generated gallery of ``docs/figures.md``
from the registry and ``docs/reproduction.md`` (:func:`figures.guide.gallery_markdown`).  Both
replace only the part between their ``<!-- BEGIN GENERATED: ... -->`` and
``<!-- END GENERATED -->`` markers, atomically; with ``--check`` they write nothing and exit 1
when the document is stale.

Before any figure is made, the names are checked (an unknown one is refused and nothing is
written) and so are ``--out`` and ``--doc`` (:func:`rlvr_plumbing.io.check_out`): an existing
file given as ``--out`` (a directory given as ``--doc``), a path under a file, or a place
that cannot be written is refused with a message naming the flag.  ``--out`` is a shared
folder: each figure's files are added to it (each written atomically, other files kept), so
a non-empty folder is accepted; a folder that does not exist yet appears with the first
figure's files, complete (:func:`rlvr_plumbing.io.atomic_dir`).  A write the system refuses later
(disk full) prints one line naming the file and exits with status 1; the figures made before it
stay complete, and a new ``--out`` whose first figure failed is not left behind empty.

Examples
--------
>>> main(["list"])  # doctest: +ELLIPSIS
agrae_fig6       Sum of absolute advantages vs success rate  [A-GRAE Fig. 6, Table 1b]
...
0
>>> main(["make", "fade_fig99", "--out", "/nonexistent"])  # doctest: +ELLIPSIS
2
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rlvr_plumbing import checks, runner
from rlvr_plumbing.io import check_out
from rlvr_plumbing.serialize import fmt_number

from . import guide, registry

__all__ = ["main", "main_exit", "build_parser"]

PROG = "rlvr-figures"
_MARK = {"pass": "ok  ", "depends": "part", "explained": "note", "underpowered": "weak", registry.NOT_HERE: "n/a ",
         "fail": "FAIL"}


def _list(args: argparse.Namespace) -> str:
    return "\n".join(f"{name:<16} {registry.get(name).title}  [{registry.get(name).source}]"
                     for name in registry.names())


def _make(args: argparse.Namespace) -> int:
    if args.all == bool(args.names):
        raise ValueError("make: give figure NAMEs or --all (not both, not neither)")
    names = registry.names() if args.all else args.names
    for name in names:
        registry.get(name)  # refuse unknown names before writing anything
    check_out(args.out, overwrite=True)  # a shared folder: other files are kept, never replaced
    failed = 0
    for name in names:
        paths, claims = registry.make(name, args.out, pdf=args.pdf, full=args.full)
        failed += sum(c.status == "fail" for c in claims)
        if not args.quiet:
            print(f"{name}: " + ", ".join(str(p) for p in paths))
            for c in claims:
                print(f"  [{_MARK[c.status]}] {c.claim} ({c.source}): paper {fmt_number(c.paper)}, ours {fmt_number(c.ours)}"
                      + (f" -- {c.shown_note}" if c.shown_note else ""))
    if failed and not args.quiet:
        print(f"{failed} claim(s) did not reproduce and have no explanation; see the .claims.csv files")
    return 0


def _check(args: argparse.Namespace) -> int:
    """Make the figures; print one summary line, every failed claim in full and where the table
    went (``--verbose``: also a line per figure and the whole table; ``--quiet``: no failures, no
    progress).  The table goes to ``OUT/claims.txt``, ``OUT/claims.csv`` and ``--doc``."""
    for name in args.names or ():
        registry.get(name)  # refuse unknown names before writing anything
    check_out(args.out, overwrite=True)
    check_out(args.doc, kind="file", arg="doc")
    say = _progress(args)
    try:
        table = registry.check(args.names or None, args.out, full=args.full, progress=say)
    finally:
        say(None)
    paths = registry.write_check_table(args.out, table)
    written = registry.write_reproduction(args.doc, table, full=args.full)
    if args.verbose:
        print(registry.check_table_text(table), end="")
    counts = table.status.value_counts()
    n_fig, secs = table.attrs.get("figures", table.figure.nunique()), table.attrs.get("seconds", 0.0)
    took = f"{secs:.0f} s" if secs < 90 else f"{int(secs // 60)} min {secs % 60:02.0f} s"
    print(f"{n_fig} figure{'s' if n_fig != 1 else ''} made in {took}; {len(table)} claims: "
          + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in registry.STATUSES))
    if not args.quiet:
        for r in table[table.status == "fail"].itertuples():
            print(f"  FAIL {r.figure}: {r.claim} ({r.source}): paper {fmt_number(r.paper)}, ours "
                  f"{fmt_number(r.ours)}, tol {fmt_number(r.tol)}")
    print(f"full table: {paths[0]} (and {paths[1].name}, with notes); "
          + (f"{args.doc} written" if written else f"{args.doc} unchanged (same claims at their precision)"))
    return 1 if counts.get("fail", 0) else 0


def _progress(args: argparse.Namespace):
    """Per-figure progress of ``check``: a line each with ``--verbose``; on a terminal one status
    line on stderr, rewritten in place and erased by ``say(None)``; otherwise nothing."""
    import sys

    if args.verbose:
        return lambda name: None if name is None else print(f"making {name} ...", flush=True)
    if args.quiet or not sys.stderr.isatty():
        return lambda name: None
    total = len(args.names) if args.names else len(registry.names())
    seen = [0]

    def say(name: str | None) -> None:
        seen[0] += name is not None
        sys.stderr.write("\r\033[K" + ("" if name is None else f"[{seen[0]}/{total}] making {name} ..."))
        sys.stderr.flush()
    return say


def _guide(args: argparse.Namespace) -> int:
    check_out(args.doc, kind="file", arg="doc")
    changed = guide.update_document(args.doc, guide.GUIDE_MARKER, guide.guide_markdown(), check=args.check)
    return _report(args.doc, changed, args.check)


def _gallery(args: argparse.Namespace) -> int:
    check_out(args.doc, kind="file", arg="doc")
    check_out(args.reproduction, kind="file", arg="reproduction")
    try:
        text = open(args.reproduction, encoding="utf-8").read()
    except FileNotFoundError:
        raise ValueError(f"reproduction: {args.reproduction} does not exist; run `rlvr-figures check` first") from None
    width = checks.integer("width", args.width, low=16)
    body = guide.gallery_markdown(text, thumbs=args.thumbs)
    guide.update_document(args.doc, guide.GALLERY_MARKER, body, check=True)  # refuses a doc without markers
    if not args.check and not args.no_thumbnails:
        paths = guide.write_thumbnails(args.figures, args.out, width=width)
        print(f"{len(paths)} thumbnails written to {args.out}")
    changed = guide.update_document(args.doc, guide.GALLERY_MARKER, body, check=args.check)
    return _report(args.doc, changed, args.check)


def _report(doc: str, changed: bool, check: bool) -> int:
    if check:
        print(f"{doc}: {'stale, run the command without --check' if changed else 'up to date'}")
        return 1 if changed else 0
    print(f"{doc}: {'generated part rewritten' if changed else 'unchanged'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr-figures`` parser; each subcommand sets ``func`` (dispatched by :func:`runner.run`)."""
    ap = argparse.ArgumentParser(prog=PROG, description="Regenerate the papers' figures and tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="registered figures with their sources").set_defaults(func=_list)
    mk = sub.add_parser("make", help="write PNG + CSV (+ claims) of figures")
    mk.add_argument("names", nargs="*", metavar="NAME", help="figures to make (see `rlvr-figures list`)")
    mk.add_argument("--all", action="store_true", help="make every registered figure")
    mk.add_argument("--out", default="figures/out", help="output folder (default figures/out)")
    mk.add_argument("--pdf", action="store_true", help="also write a PDF of each figure")
    mk.add_argument("--full", action="store_true", help="paper-scale data where a figure has it (slow)")
    mk.add_argument("--quiet", action="store_true", help="print nothing but errors")
    runner.add_threads_option(mk)
    mk.set_defaults(func=_make)
    ck = sub.add_parser("check", help="make figures and write the paper-vs-ours table (docs/reproduction.md)")
    ck.add_argument("names", nargs="*", metavar="NAME", help="figures to check (default: all)")
    ck.add_argument("--out", default="figures/out", help="figure folder (default figures/out)")
    ck.add_argument("--doc", default="docs/reproduction.md", help="Markdown table to write (default docs/reproduction.md)")
    ck.add_argument("--full", action="store_true", help="paper-scale data where a figure has it (slow)")
    ck.add_argument("--quiet", action="store_true", help="print only the summary line and where the table went")
    ck.add_argument("-v", "--verbose", action="store_true",
                    help="also print a line per figure and the whole claims table (as written to OUT/claims.txt)")
    runner.add_threads_option(ck)
    ck.set_defaults(func=_check)
    gd = sub.add_parser("guide", help="rewrite the generated table of docs/choosing_an_advantage.md")
    gd.add_argument("--doc", default="docs/choosing_an_advantage.md",
                    help="the guide to update (default docs/choosing_an_advantage.md)")
    gd.add_argument("--check", action="store_true", help="write nothing; exit 1 if the table is stale")
    runner.add_threads_option(gd)
    gd.set_defaults(func=_guide)
    gl = sub.add_parser("gallery", help="thumbnails of made figures + the generated gallery of docs/figures.md")
    gl.add_argument("--figures", default="figures/out", help="folder of made figures, NAME.png (default figures/out)")
    gl.add_argument("--out", default="docs/gallery", help="thumbnail folder (default docs/gallery)")
    gl.add_argument("--doc", default="docs/figures.md", help="gallery page to update (default docs/figures.md)")
    gl.add_argument("--reproduction", default="docs/reproduction.md",
                    help="claims table the statuses are read from (default docs/reproduction.md)")
    gl.add_argument("--thumbs", default="gallery", help="thumbnail folder as linked from --doc (default gallery)")
    gl.add_argument("--width", type=float, default=guide.THUMB_WIDTH, help="thumbnail width in pixels (default 480)")
    gl.add_argument("--no-thumbnails", action="store_true", help="only rewrite the text (no figures folder needed)")
    gl.add_argument("--check", action="store_true", help="write nothing; exit 1 if the gallery text is stale")
    runner.add_threads_option(gl)
    gl.set_defaults(func=_gallery)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlvr-figures`` with ``argv`` (default: the command line) and return the exit status."""
    return runner.run(PROG, build_parser, argv)


main_exit = runner.console(PROG, build_parser)

if __name__ == "__main__":  # pragma: no cover
    main_exit()
