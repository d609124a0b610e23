"""rlvr_plumbing: what every layer of the toolkit uses and none of the science is.

The bottom layer (``rlvr_plumbing`` ← ``rlvr_theory`` ← ``analysis`` ← ``simulations`` /
``integrations`` ← ``figures``; docs/architecture.md):

- :mod:`~rlvr_plumbing.checks`: argument checks whose errors name the argument and its
  allowed values; host-memory estimates (:func:`~rlvr_plumbing.checks.fits_in_memory`).
- :mod:`~rlvr_plumbing.registry`: the name → object registry class behind every plug-in
  (advantages, schedules, losses, figures).
- :mod:`~rlvr_plumbing.serialize`: the JSON policy (NaN → ``null``, ±inf → ``"inf"``) and
  number formatting.
- :mod:`~rlvr_plumbing.runner`: the command-line runner of every console script (errors in one
  line naming the flag, exit statuses, ``--threads``, settings dataclasses → options).
- :mod:`~rlvr_plumbing.io`: atomic file and directory writes, output-location checks,
  Ctrl-C deferral.
- :mod:`~rlvr_plumbing.runtime`: the device resolver, memory checks on a device and the run
  block written at the top of every JSON output (imports torch).

Submodules are imported on use, so ``import rlvr_plumbing`` loads nothing heavy.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["moved"]


def moved(old: str, new: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of a deprecated alias: ``old.NAME`` warns once per access with
    a ``DeprecationWarning`` naming ``new`` and returns ``new.NAME``.

    >>> import warnings, rlvr_theory.checks
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     f = rlvr_theory.checks.number
    >>> f is importlib.import_module("rlvr_plumbing.checks").number, str(w[0].message)
    (True, 'rlvr_theory.checks is deprecated: import rlvr_plumbing.checks (number)')
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = importlib.import_module(new)
        value = getattr(target, name)  # AttributeError names the new module
        warnings.warn(f"{old} is deprecated: import {new} ({name})", DeprecationWarning, stacklevel=2)
        return value

    return __getattr__
