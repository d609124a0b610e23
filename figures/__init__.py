"""figures: the papers' figures and tables regenerated from library calls.

A registry in the style of the lm-evaluation-harness task registry: each figure module
in :mod:`figures.paper` registers a :class:`FigureSpec` with

* ``data()`` — a long-form DataFrame of the plotted numbers (written as ``NAME.csv``);
* ``plot(df)`` — a matplotlib Figure (written as ``NAME.png``, and ``NAME.pdf`` on request);
* ``claims(df)`` — the paper's numbers this figure reproduces, each next to ours.

Figures hold no math: they call :mod:`rlvr_theory`, :mod:`analysis` and :mod:`simulations`.
Sources name the papers by the short names of ``docs/papers.md`` (FADE, Two-Stage, F-GRPO,
A-GRAE, Over-Sharpening).  Command line: ``rlvr-figures list``, ``rlvr-figures make NAME...
--out DIR``, ``rlvr-figures make --all``, ``rlvr-figures check`` (``docs/figures.md``).
"""

from .registry import Claim, FigureSpec, check, get, make, names, register, registered, unregister

__all__ = ["Claim", "FigureSpec", "get", "names", "register", "unregister", "registered", "make", "check"]
