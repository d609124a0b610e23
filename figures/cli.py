"""``rlvr-figures list | make NAME... --out DIR | make --all [--full] | check [--full]`` (also ``python -m figures``).

``check`` makes the figures, prints every paper claim next to ours (pass / explained / not
reproducible here / fail) and writes that table to ``docs/reproduction.md``; it exits 1 when a
claim fails without an explanation.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from . import registry

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlvr-figures", description="Regenerate the papers' figures and tables.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="registered figures with their sources")
    mk = sub.add_parser("make", help="write PNG + CSV (+ claims) of figures")
    mk.add_argument("names", nargs="*", metavar="NAME", help="figures to make (see `rlvr-figures list`)")
    mk.add_argument("--all", action="store_true", help="make every registered figure")
    mk.add_argument("--out", default="figures/out", help="output folder (default figures/out)")
    mk.add_argument("--pdf", action="store_true", help="also write a PDF of each figure")
    mk.add_argument("--full", action="store_true", help="paper-scale data where a figure has it (slow)")
    mk.add_argument("--quiet", action="store_true", help="print nothing but errors")
    ck = sub.add_parser("check", help="make figures and write the paper-vs-ours table (docs/reproduction.md)")
    ck.add_argument("names", nargs="*", metavar="NAME", help="figures to check (default: all)")
    ck.add_argument("--out", default="figures/out", help="figure folder (default figures/out)")
    ck.add_argument("--doc", default="docs/reproduction.md", help="Markdown table to write (default docs/reproduction.md)")
    ck.add_argument("--full", action="store_true", help="paper-scale data where a figure has it (slow)")
    ck.add_argument("--quiet", action="store_true", help="print only the summary")
    return ap


def _check(args: argparse.Namespace) -> int:
    from analysis.io import atomic_write_text

    say = (lambda name: None) if args.quiet else (lambda name: print(f"making {name} ...", flush=True))
    table = registry.check(args.names or None, args.out, full=args.full, progress=say)
    os.makedirs(os.path.dirname(os.path.abspath(args.doc)), exist_ok=True)
    atomic_write_text(args.doc, registry.reproduction_markdown(table, full=args.full))
    if not args.quiet:
        import pandas as pd

        with pd.option_context("display.max_rows", None, "display.max_colwidth", 60, "display.width", 200):
            print(table[["figure", "claim", "paper", "ours", "status"]].to_string(index=False))
    counts = table.status.value_counts()
    print(f"{len(table)} claims: " + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in
                                              ("pass", "explained", registry.NOT_HERE, "fail"))
          + f"; table written to {args.doc}")
    return 1 if counts.get("fail", 0) else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "list":
            for name in registry.names():
                spec = registry.get(name)
                print(f"{name:<16} {spec.title}  [{spec.source}]")
            return 0
        if args.command == "check":
            return _check(args)
        if args.all == bool(args.names):
            raise ValueError("make: give figure NAMEs or --all (not both, not neither)")
        names = registry.names() if args.all else args.names
        for name in names:
            registry.get(name)  # refuse unknown names before writing anything
        failed = 0
        for name in names:
            paths, claims = registry.make(name, args.out, pdf=args.pdf, full=args.full)
            failed += sum(c.status == "fail" for c in claims)
            if not args.quiet:
                print(f"{name}: " + ", ".join(str(p) for p in paths))
                for c in claims:
                    mark = {"pass": "ok  ", "explained": "note", registry.NOT_HERE: "n/a ", "fail": "FAIL"}[c.status]
                    print(f"  [{mark}] {c.claim} ({c.source}): paper {c.paper:.6g}, ours {c.ours:.6g}"
                          + (f" -- {c.note}" if c.note else ""))
        if failed and not args.quiet:
            print(f"{failed} claim(s) did not reproduce and have no explanation; see the .claims.csv files")
    except ValueError as err:
        print(f"rlvr-figures: error: {err}", file=sys.stderr)
        return 2
    return 0


def main_exit() -> None:  # console-script entry point
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_exit()
