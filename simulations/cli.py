"""``rlvr-sim SIMULATOR ...`` (also ``python -m simulations``), on :mod:`rlvr_theory.runner`.

Each simulator module that defines ``add_parser(subparsers)`` contributes one subcommand
(``categorical``, ``linear-head``, ``toys``); its parser sets ``func(args) -> int``.  Parsing,
dispatch and errors are the runner's: a ``ValueError`` prints ``rlvr-sim: error: ...`` (naming
the flag) and exits with status 2, Ctrl-C exits with status 130, ``--threads N`` (every
subcommand) sets the CPU threads before the run.  Advantage parameters are given as a
repeatable ``--param NAME=VALUE``.

Every subcommand writes ``OUT/trajectory.csv``, ``OUT/final.csv`` and ``OUT/config.json``
(:func:`write_run`); ``config.json`` starts with the run block of
:func:`analysis.runtime.run_metadata` (``package_version``, ``settings`` — the options given on
the command line —, ``seed``, ``device``, ``threads``) followed by the simulator's own record.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlvr_theory import runner

__all__ = ["main", "main_exit", "build_parser", "write_run", "command_settings"]

_MODULES = ("simulations.categorical", "simulations.linear_head", "simulations.toys")

#: options that say where and how to run, not what: left out of the recorded settings
_NOT_SETTINGS = ("command", "func", "out", "quiet", "threads", "device")


def command_settings(args: argparse.Namespace, *, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The options given on the command line (not ``None``), ``--param`` parsed into a dict
    (:func:`rlvr_theory.runner.parse_params`); output, progress, device and thread options
    are left out (``device`` and ``threads`` have their own entries in the run block)."""
    skip = set(_NOT_SETTINGS) | set(exclude)
    out = {k: v for k, v in vars(args).items() if k not in skip and v is not None}
    if "param" in out:
        out["param"] = runner.parse_params(out["param"])
    return out


def write_run(out: str | os.PathLike, trajectory: Any, final: Any, record: Mapping[str, Any], *,
              settings: Mapping[str, Any], seed: Any = None, device: Any = None, threads: int | None = None) -> None:
    """The files of every simulator subcommand: ``OUT/trajectory.csv``, ``OUT/final.csv`` and
    ``OUT/config.json``, each written to a temporary name and renamed.

    ``config.json`` is :func:`analysis.runtime.run_metadata` (``package_version``,
    ``settings``, ``seed``, ``device``, ``threads``: torch's current count unless given)
    followed by ``record`` (the simulator's own entries), as strict JSON
    (:func:`analysis.io.write_json`: NaN → ``null``, ±inf → ``"inf"``/``"-inf"``).
    """
    from analysis.io import atomic_write, write_json
    from analysis.runtime import run_metadata

    block = run_metadata(settings, seed=seed, device=device, threads=threads)
    clash = sorted(set(block) & set(record))
    if clash:
        raise TypeError(f"record must not repeat the run block's keys, got {', '.join(clash)}")
    os.makedirs(out, exist_ok=True)
    atomic_write(os.path.join(out, "trajectory.csv"), lambda p: trajectory.to_csv(p, index=False))
    atomic_write(os.path.join(out, "final.csv"), lambda p: final.to_csv(p, index=False))
    write_json(os.path.join(out, "config.json"), {**block, **record}, indent=2)


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
