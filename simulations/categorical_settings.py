"""What ``rlvr-sim categorical`` shows before it runs, without torch or pandas.

The names of :mod:`simulations.categorical` that its parser needs (:data:`SURROGATES`,
:data:`OPTIMIZERS`, :data:`PRESETS`, the help of the calibration fields ``mu`` / ``memory_lr`` of
:class:`~simulations.categorical.Config`) and :func:`add_parser` itself live here, so that
``rlvr-sim --help`` (:mod:`simulations.cli`) loads no torch; :mod:`simulations.categorical`
re-exports them (the same objects) and the command imports it when it runs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rlvr_plumbing import runner

from .calibration import CALIBRATION_FIELDS, memory_lr_field, mu_field

__all__ = ["SURROGATES", "OPTIMIZERS", "PRESETS", "add_parser"]

SURROGATES = ("logprob", "prob", "trpo")
OPTIMIZERS = ("sgd", "adam")

PRESETS: dict[str, dict[str, Any]] = {
    # F-GRPO App. J / Fig. 4: 17 N x 2 gamma x 4 seeds x 1,000 steps x 128,000 actions
    "fgrpo-fig4": {},
    # same shape, three N (one per regime), one seed, fewer steps: the regression/CI preset
    "fgrpo-fig4-small": {"N": (4, 1024, 131_072), "seeds": (0,), "steps": 600, "record_every": 10},
}


def mu() -> Any:
    """The ``mu`` field of :class:`simulations.categorical.Config` (:func:`simulations.calibration.mu_field`)."""
    return mu_field("per-action memory logits φ", sample="softmax(z/T − μ·φ)")


def memory_lr() -> Any:
    """The ``memory_lr`` field of :class:`simulations.categorical.Config`."""
    return memory_lr_field("memory logits")


@dataclass(frozen=True)
class _Calibration:
    """The calibration fields of ``Config``, declared the same way: the flags ``--mu``, ``--memory-lr``."""

    mu: float = mu()
    memory_lr: float | None = memory_lr()


def _run_cli(args: argparse.Namespace) -> int:
    from .categorical import _run_cli as run

    return run(args)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``categorical`` to ``rlvr-sim`` (:mod:`simulations.cli`)."""
    ap = subparsers.add_parser("categorical", help="softmax policy over K actions with group sampling (F-GRPO App. J)",
                               description="Batched softmax policy over K actions trained with group sampling.")
    ap.add_argument("--preset", default="fgrpo-fig4", help=f"one of {', '.join(PRESETS)} [fgrpo-fig4]")
    ap.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    ap.add_argument("--N", type=int, nargs="+", help="group sizes")
    ap.add_argument("--gamma", type=float, nargs="+", help="focal exponents")
    ap.add_argument("--seeds", type=int, help="number of seeds (0..S-1)")
    ap.add_argument("--surrogate", choices=SURROGATES)
    ap.add_argument("--optimizer", choices=OPTIMIZERS)
    ap.add_argument("--advantage", help="registry name (default dr_grpo)")
    runner.add_param_option(ap)
    runner.add_settings(ap, _Calibration, only=CALIBRATION_FIELDS)
    runner.add_run_options(ap, device="auto", all_cores=True)
    ap.set_defaults(func=_run_cli)
    return ap
