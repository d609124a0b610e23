"""The output of a simulator run: its files, its recorded settings, and the error of a run that diverged.

Below the simulators (:mod:`simulations.categorical`, :mod:`simulations.linear_head`,
:mod:`simulations.toys` import it at top level); :mod:`simulations.cli` re-exports every name
here.  See :mod:`simulations.cli` for what every ``rlvr-sim`` subcommand guarantees.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from typing import Any

from rlvr_plumbing import runner

__all__ = ["write_run", "command_settings", "check_out", "diverged", "MARKERS"]

#: the files of every ``rlvr-sim`` output directory (a directory holding one of them is an earlier output)
MARKERS = ("config.json", "trajectory.csv", "final.csv")

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
