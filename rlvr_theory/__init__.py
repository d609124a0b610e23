"""rlvr_theory: closed forms of the RLVR papers (pure numpy / scipy / sympy, no I/O).

Modules: :mod:`~rlvr_theory.advantages` (registry of advantage functions),
:mod:`~rlvr_theory.masses` (gradient masses m_S, m_F: per group, closed form, exact
finite-G expectation, ratios, tables), :mod:`~rlvr_theory.schedules` (FADE and A-GRAE
schedules).
"""

from . import advantages, masses, schedules

__version__ = "0.1.0"
__all__ = ["advantages", "masses", "schedules", "__version__"]
