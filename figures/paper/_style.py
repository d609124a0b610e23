"""Shared plotting helpers (matplotlib only, no numbers)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "subplots"]


def subplots(ncols: int, *, width: float = 4.2, height: float = 3.4, **kw):
    """A row of axes with the project's defaults."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False, **kw)
    for ax in axes.ravel():
        ax.grid(alpha=0.3)
    return fig, axes.ravel()
