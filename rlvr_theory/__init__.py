"""rlvr_theory: closed forms of the RLVR papers (pure numpy / scipy / sympy, no I/O).

Modules: :mod:`~rlvr_theory.advantages` (registry of advantage functions),
:mod:`~rlvr_theory.masses` (gradient masses m_S, m_F: per group, closed form, exact
finite-G expectation, ratios, tables), :mod:`~rlvr_theory.schedules` (FADE and A-GRAE
schedules), :mod:`~rlvr_theory.tail_miss` (F-GRPO Lemma 3.1), :mod:`~rlvr_theory.variance`
(FADE App. 14), :mod:`~rlvr_theory.entropy` and :mod:`~rlvr_theory.categorical` (one-step
softmax identities), :mod:`~rlvr_theory.sharpening` (Over-Sharpening Sec. 2) and
:mod:`~rlvr_theory.rank1` (FADE App. 15), :mod:`~rlvr_theory.multiturn` (FADE App. 9: multi-turn
reachability, retries).  Argument checks, the registry class, JSON and the command-line
runner live one layer below, in :mod:`rlvr_plumbing`.  See docs/architecture.md.
"""

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["advantages", "masses", "schedules", "tail_miss", "variance", "entropy", "categorical",
           "sharpening", "rank1", "multiturn", "__version__"]


def __getattr__(name: str) -> Any:
    """``rlvr_theory.masses`` and the other submodules of :data:`__all__`, imported on first use: a
    command that needs the advantages only does not load scipy.stats and pandas (about 1.5 s)."""
    if name in __all__ and name != "__version__":
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
