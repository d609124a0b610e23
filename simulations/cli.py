"""``rlvr-sim SIMULATOR ...`` (also ``python -m simulations``), on :mod:`rlvr_plumbing.runner`.

Each simulator module that defines ``add_parser(subparsers)`` contributes one subcommand
(``categorical``, ``linear-head``, ``toys``); its parser sets ``func(args) -> int``.  Parsing,
dispatch and errors are the runner's: a ``ValueError`` prints ``rlvr-sim: error: ...`` (naming
the flag) and exits with status 2, Ctrl-C exits with status 130, ``--threads N`` (every
subcommand) sets the CPU threads before the run.  Advantage parameters are given as a
repeatable ``--param NAME=VALUE``.

Every subcommand writes ``OUT/trajectory.csv``, ``OUT/final.csv`` and ``OUT/config.json``
(:func:`write_run`, from :mod:`simulations.runs`); ``config.json`` starts with the run block of
:func:`rlvr_plumbing.runtime.run_metadata` (``package_version``, ``settings`` — the options given on
the command line —, ``seed``, ``device``, ``threads``) followed by the simulator's own record.

What every subcommand guarantees:

* **the output location first**: ``--out`` is checked before any work (:func:`check_out`): an
  existing file, a path under a file, an unwritable place, the working directory (or one that
  holds it) and a non-empty directory that is not an earlier ``rlvr-sim`` output (none of
  :data:`MARKERS`) are refused, the last one unless ``--overwrite``; an earlier output is
  replaced;
* **all at once**: the three files are built in a temporary sibling directory and renamed into
  place together (:func:`rlvr_plumbing.io.atomic_dir`); a killed or failing run (disk full: one line,
  exit status 1) leaves the earlier output, or nothing, under ``--out``;
* **computed limits**: a request that cannot fit in memory (group sizes, actions, steps,
  seeds) is refused before any allocation with the bytes it needs and those available
  (:func:`rlvr_plumbing.runtime.check_memory`);
* **no NaN out of a diverging run**: a run whose parameters become non-finite stops with
  ``rlvr-sim: error: --lr = ... makes the run diverge ...`` (exit status 2, the step and the
  configuration named, :func:`diverged`) and writes nothing.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from rlvr_plumbing import runner

from .runs import MARKERS, check_out, command_settings, diverged, write_run

__all__ = ["main", "main_exit", "build_parser", "write_run", "command_settings", "check_out", "diverged", "MARKERS"]

#: the modules whose ``add_parser`` builds a subcommand; none imports torch or pandas (``rlvr-sim --help``):
#: the categorical simulator's parser lives in :mod:`simulations.categorical_settings`
_MODULES = ("simulations.categorical_settings", "simulations.linear_head", "simulations.toys")


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr-sim`` parser: one subcommand per simulator module that defines ``add_parser``."""
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
    """Run ``rlvr-sim`` with ``argv`` (default: the process arguments); returns the exit status."""
    return runner.run("rlvr-sim", build_parser, argv)


#: console-script entry point of ``rlvr-sim``
main_exit = runner.console("rlvr-sim", build_parser)


if __name__ == "__main__":  # pragma: no cover
    main_exit()
