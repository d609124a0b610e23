"""``rlvr-figures list | make NAME... --out DIR | make --all`` (also ``python -m figures``)."""

from __future__ import annotations

import argparse
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
    mk.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "list":
            for name in registry.names():
                spec = registry.get(name)
                print(f"{name:<16} {spec.title}  [{spec.source}]")
            return 0
        if args.all == bool(args.names):
            raise ValueError("make: give figure NAMEs or --all (not both, not neither)")
        names = registry.names() if args.all else args.names
        for name in names:
            registry.get(name)  # refuse unknown names before writing anything
        failed = 0
        for name in names:
            paths, claims = registry.make(name, args.out, pdf=args.pdf)
            failed += sum(c.status == "fail" for c in claims)
            if not args.quiet:
                print(f"{name}: " + ", ".join(str(p) for p in paths))
                for c in claims:
                    mark = {"pass": "ok  ", "explained": "note", "fail": "FAIL"}[c.status]
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
