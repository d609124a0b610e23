"""Distribution-level calibration (DLC, Over-Sharpening Sec. 3.2, Alg. 1): its settings, declared once.

The rollouts are drawn from ``softmax(f_θ − μ·f_φ)``, ``f_φ`` the logits of a *memory model*
trained by cross-entropy on the drawn samples; the policy gradient keeps the policy's own
``log π_θ``.  Every simulator that offers it (:class:`simulations.categorical.Config`, the
linear head's :class:`simulations.linear_head.ToySettings` and
:class:`~simulations.linear_head.PopulationSettings`, :class:`simulations.grpo.config.GRPOConfig`)
declares its fields with :func:`mu_field`, :func:`memory_lr_field` (and the GRPO trainer
:func:`memory_preset_field`) and checks them with :func:`check_calibration`:

* ``mu >= 0``: the weight of the memory model; ``0`` (default) uses none, the run is the
  uncalibrated one bit for bit;
* ``memory_lr > 0`` or ``None`` (the policy's learning rate): the memory model's learning rate;
* ``memory_preset`` (GRPO only): the memory model's architecture.

The last two apply only with ``mu > 0``; given at ``mu = 0`` they are refused.  The
command-line flags (``--mu``, ``--memory-lr``, ``--memory-preset``) come from the fields'
metadata (:func:`rlvr_plumbing.runner.add_settings`).

>>> check_calibration(0.5, None, model="memory head", lr=0.1)
(0.5, 0.1)
>>> check_calibration(0, 0.1, model="memory logits", plural=True)
Traceback (most recent call last):
...
ValueError: memory_lr applies only with mu > 0 (no memory logits are used at mu = 0), got mu=0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Any

from rlvr_plumbing import checks

__all__ = ["CALIBRATION_FIELDS", "mu_field", "memory_lr_field", "memory_preset_field", "check_calibration"]

#: the settings of distribution-level calibration (the GRPO trainer adds ``memory_preset``)
CALIBRATION_FIELDS = ("mu", "memory_lr")


def mu_field(model: str, *, sample: str = "softmax(f_θ − μ·f_φ)") -> Any:
    """The ``mu`` field of a settings dataclass (default 0: off); ``model`` names the memory
    model in the help text (e.g. ``"a memory head f_φ"``), ``sample`` the sampling distribution."""
    return field(default=0.0, metadata={
        "help": f"distribution-level calibration (Over-Sharpening Sec. 3.2): sample from {sample}, with {model} "
                "trained by cross-entropy on the samples (the paper: 0.5; 0: off, no memory)"})


def memory_lr_field(model: str, *, default_text: str = "the policy's lr") -> Any:
    """The ``memory_lr`` field (default ``None``: the policy's learning rate, ``default_text``
    in the help)."""
    return field(default=None, metadata={"help": f"with --mu > 0, the learning rate of the {model}",
                                         "default_text": default_text})


def memory_preset_field(presets: Sequence[str]) -> Any:
    """The ``memory_preset`` field (default ``None``: the first of ``presets``)."""
    return field(default=None, metadata={
        "help": "with --mu > 0, the memory model's architecture (its output head starts at zero)",
        "choices": tuple(presets), "default_text": next(iter(presets))})


def check_calibration(mu: Any, memory_lr: Any, *, model: str, plural: bool = False, lr: Any = None,
                      memory_preset: Any = None, presets: Sequence[str] | None = None) -> tuple[float, Any]:
    """``mu`` (>= 0) and ``memory_lr`` (> 0 or ``None``), checked (:mod:`rlvr_plumbing.checks`),
    and ``memory_preset`` one of ``presets`` (or ``None``); ``memory_lr`` and ``memory_preset``
    given with ``mu = 0`` are refused, the message naming ``model`` (``plural``: "are used").

    Returns ``(mu, memory_lr)``, ``memory_lr`` replaced by ``lr`` when it is ``None``.
    """
    mu = checks.number("mu", mu, low=0)
    memory_lr = None if memory_lr is None else checks.number("memory_lr", memory_lr, low=0, low_open=True)
    if memory_preset is not None:
        checks.choice("memory_preset", memory_preset, tuple(presets or ()))
    for name, value in (("memory_lr", memory_lr), ("memory_preset", memory_preset)):
        if value is not None and mu == 0:
            raise ValueError(f"{name} applies only with mu > 0 (no {model} {'are' if plural else 'is'} used "
                             f"at mu = 0), got mu={mu!r}")
    return mu, lr if memory_lr is None else memory_lr
