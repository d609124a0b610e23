"""``rlvr-sim SIMULATOR ...`` (also ``python -m simulations``), on :mod:`rlvr_plumbing.runner`.

Each simulator module that defines ``add_parser(subparsers)`` contributes one subcommand
(``categorical``, ``linear-head``, ``toys``); its parser sets ``func(args) -> int``.  Parsing,
dispatch and errors are the runner's: a ``ValueError`` prints ``rlvr-sim: error: ...`` (naming
the flag) and exits with status 2, Ctrl-C exits with status 130, ``--threads N`` (every
subcommand) sets the CPU threads before the run.  Advantage parameters are given as a
repeatable ``--param NAME=VALUE``.

Every subcommand writes ``OUT/trajectory.csv``, ``OUT/final.csv`` and ``OUT/config.json``
(:func:`write_run`); ``config.json`` starts with the run block of
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
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlvr_plumbing import runner

__all__ = ["main", "main_exit", "build_parser", "write_run", "command_settings", "check_out", "diverged", "MARKERS"]

#: the files of every ``rlvr-sim`` output directory (a directory holding one of them is an earlier output)
MARKERS = ("config.json", "trajectory.csv", "final.csv")

_MODULES = ("simulations.categorical", "simulations.linear_head", "simulations.toys")

#: options that say where and how to run, not what: left out of the recorded settings
_NOT_SETTINGS = ("command", "func", "out", "overwrite", "quiet", "threads", "device")


def command_settings(args: argparse.Namespace, *, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The options given on the command line (not ``None``), ``--param`` parsed into a dict
    (:func:`rlvr_plumbing.runner.parse_params`); output, progress, device and thread options
    (and ``--overwrite``) are left out (``device`` and ``threads`` have their own entries in the run block)."""
    skip = set(_NOT_SETTINGS) | set(exclude)
    out = {k: v for k, v in vars(args).items() if k not in skip and v is not None}
    if "param" in out:
        out["param"] = runner.parse_params(out["param"])
    return out


def check_out(args: argparse.Namespace) -> Any:
    """``--out`` of a subcommand, checked before any work (:func:`rlvr_plumbing.io.check_out` with
    :data:`MARKERS` and ``--overwrite``); returns it as a ``Path``.  The working directory (or
    one that holds it) is refused too: the output directory is replaced as a whole, which would
    leave the shell in a deleted directory."""
    from rlvr_plumbing.io import check_out as _check

    if isinstance(args.out, (str, os.PathLike)) and os.fspath(args.out):
        out, cwd = os.path.abspath(args.out), os.getcwd()
        if cwd == out or cwd.startswith(out.rstrip(os.sep) + os.sep):
            raise ValueError(f"out: {str(args.out)!r} is the working directory or holds it (the output directory "
                             "is replaced as a whole); give a new directory")
    return _check(args.out, markers=MARKERS, overwrite=bool(getattr(args, "overwrite", False)))


def diverged(step: int, where: str, lr: Any, what: str = "non-finite weights") -> ValueError:
    """The error of a run that diverged (``what`` happened) at ``step`` (``where``: the
    configuration): it names the step and the learning rate, the likely cause.

    >>> str(diverged(37, "G=4, seed=0", 1000.0))
    'lr = 1000 makes the run diverge: non-finite weights at step 37 (G=4, seed=0); choose a smaller value'
    """
    return ValueError(f"lr = {float(lr):g} makes the run diverge: {what} at step {step} ({where}); "
                      "choose a smaller value")


def write_run(out: str | os.PathLike, trajectory: Any, final: Any, record: Mapping[str, Any], *,
              settings: Mapping[str, Any], seed: Any = None, device: Any = None, threads: int | None = None,
              overwrite: bool = False) -> None:
    """The files of every simulator subcommand: ``OUT/trajectory.csv``, ``OUT/final.csv`` and
    ``OUT/config.json``, built in a temporary directory and renamed into place together
    (:func:`rlvr_plumbing.io.atomic_dir`): ``out`` holds the whole new output, or what it held before.
    An existing non-empty ``out`` must be an earlier output (one of :data:`MARKERS`) unless
    ``overwrite``.

    ``config.json`` is :func:`rlvr_plumbing.runtime.run_metadata` (``package_version``,
    ``settings``, ``seed``, ``device``, ``threads``: torch's current count unless given)
    followed by ``record`` (the simulator's own entries), as strict JSON
    (:func:`rlvr_plumbing.io.write_json`: NaN → ``null``, ±inf → ``"inf"``/``"-inf"``).
    """
    from pathlib import Path

    from rlvr_plumbing.io import atomic_dir, write_json
    from rlvr_plumbing.runtime import run_metadata

    block = run_metadata(settings, seed=seed, device=device, threads=threads)
    clash = sorted(set(block) & set(record))
    if clash:
        raise TypeError(f"record must not repeat the run block's keys, got {', '.join(clash)}")

    def build(tmp: Path) -> None:
        trajectory.to_csv(tmp / "trajectory.csv", index=False)
        final.to_csv(tmp / "final.csv", index=False)
        write_json(tmp / "config.json", {**block, **record}, indent=2)

    # an absolute, normalised path: ``.`` or ``run/..`` has a name and a parent to rename beside
    atomic_dir(os.path.abspath(out), build, markers=None if overwrite else MARKERS)


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
