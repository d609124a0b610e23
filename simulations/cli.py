"""``rlvr-sim SIMULATOR ...`` (also ``python -m simulations``).

Each simulator module that defines ``add_parser(subparsers)`` contributes one subcommand
(``categorical``, ``linear-head``, ``toys``); its parser sets ``func(args) -> int``.  Errors of the
form ``ValueError`` print ``rlvr-sim: error: ...`` and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Sequence

__all__ = ["main", "build_parser", "package_version", "write_run"]

_MODULES = ("simulations.categorical", "simulations.linear_head", "simulations.toys")


def package_version() -> str:
    """The installed version of this package (``"unknown"`` when it is not installed)."""
    try:
        from importlib.metadata import version

        return version("rlvr-diagnostics")
    except Exception:  # pragma: no cover - not installed
        return "unknown"


def write_run(out: str, trajectory: Any, final: Any, meta: dict) -> None:
    """The files of every simulator subcommand: ``OUT/trajectory.csv``, ``OUT/final.csv`` and
    ``OUT/config.json`` (``meta``), each written to a temporary name and renamed."""
    from analysis.io import atomic_write, atomic_write_text

    os.makedirs(out, exist_ok=True)
    atomic_write(os.path.join(out, "trajectory.csv"), lambda p: trajectory.to_csv(p, index=False))
    atomic_write(os.path.join(out, "final.csv"), lambda p: final.to_csv(p, index=False))
    atomic_write_text(os.path.join(out, "config.json"), json.dumps(meta, indent=2, default=str))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlvr-sim", description="Simulators of RLVR training dynamics.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        if hasattr(mod, "add_parser"):
            mod.add_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"rlvr-sim: error: {err}", file=sys.stderr)
        return 2


def main_exit() -> None:  # console-script entry point
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_exit()
