"""The checkpoint diff: ΔW = W_rl − W_base of Hugging Face checkpoints (FADE Sec. 4.2, Sec. 5 table, App. 15).

For each RL checkpoint against a base (SFT) checkpoint, tensor by tensor,
``ΔW_t = W_rl,t − W_base,t``, streamed one tensor at a time from both checkpoints
(:mod:`analysis.checkpoints`), on the GPU when present.  What is measured (``global_l2``,
``relative_l2``, ``l2_share``, ``density``, ``s1_s2``, ``rank1_fraction``, ``srank``, the head's
``u`` statistics, alignment, clustering) is listed in ``docs/checkpoint_diff.md``.

One module per job:

- :mod:`~analysis.diff.compare`: :func:`diff` (the ``report.json`` document), :func:`to_frame`;
- :mod:`~analysis.diff.run`: :class:`DiffRun`, the state of one :func:`diff` call (workers,
  background spectra, phase timings, device), passed down;
- :mod:`~analysis.diff.stream`: the tensor pass over two checkpoints (read, round, difference,
  Gram matrices); :func:`series` of a training run;
- :mod:`~analysis.diff.measure`: one ``ΔW``: norms, densities, SVD / rank-1 metrics;
- :mod:`~analysis.diff.lora`: PEFT LoRA adapters: reading, low-rank algebra, their tensor pass;
- :mod:`~analysis.diff.moe`: mixture-of-experts matrices and per-block aggregates;
- :mod:`~analysis.diff.head`: the head's leading singular vector ``u`` and its top tokens;
- :mod:`~analysis.diff.align`: alignment across checkpoints, pairwise cosines, clustering;
- :mod:`~analysis.diff.settings`: accepted values, thresholds, phases (constants);
- :mod:`~analysis.diff.geometry_pass`: ``--geometry``, :mod:`analysis.geometry` of each matrix in the
  tensor pass, aggregated per run and per block;
- :mod:`~analysis.diff.dynamics`: a series' change density and linearity in the step, and the
  Jaccard of update masks across runs;
- :mod:`~analysis.diff.reconstruct`: checkpoints that test the claims, rank-k parts of ``ΔW`` and
  series extrapolated in the step (``rlvr-diff reconstruct``; imported as a module, its functions
  ``reconstruct`` / ``extrapolate`` are not re-exported here so that the module name stays free);
- :mod:`~analysis.diff.cli`: the ``rlvr-diff`` command.

No module holds state that changes while a diff runs: two diffs in one process (two threads)
share nothing.  The report (Markdown, HTML, PNGs) is written by :mod:`analysis.report`, shared
with the audit report.  ``analysis.weight_diff``, ``analysis.lora`` and ``analysis.diff_cli``
are deprecated aliases of this package.
"""

from __future__ import annotations

import importlib
from typing import Any

from .settings import CASTS, CPU_BLAS_THREADS, ENERGY_FRACTIONS, LAYERS, PHASES, SRANK_DELTAS, TOLERANCES

#: the names re-exported here from the submodules that import torch, imported on first use
#: (:func:`__getattr__`): ``rlvr-diff --help`` (``analysis.diff.cli``) loads neither torch nor scipy
_LAZY_NAMES = (
    ("..checkpoints", ("open_checkpoint",)),
    (".align", ("thirds",)),
    (".compare", ("diff", "to_frame")),
    (".head", ("N_QUANTILES", "N_TOP_TOKENS", "TOKENIZER_MIN_COVERAGE", "U_ORIENTATION", "u_statistics")),
    (".moe", ("MOE_AGGREGATION",)),
    (".run", ("DiffRun",)),
    (".stream", ("_step_of", "series")),
)

__all__ = ["diff", "series", "to_frame", "u_statistics", "TOLERANCES", "SRANK_DELTAS", "ENERGY_FRACTIONS", "thirds",
           "LAYERS", "CASTS", "U_ORIENTATION", "TOKENIZER_MIN_COVERAGE", "MOE_AGGREGATION", "PHASES", "DiffRun",
           "CPU_BLAS_THREADS", "N_TOP_TOKENS", "N_QUANTILES", "open_checkpoint", "_step_of"]

#: the other names of the former ``analysis.weight_diff`` module, by the module that holds them now
#: (read through :func:`__getattr__`, so that ``analysis.weight_diff.NAME`` keeps working)
_FORMER_NAMES = (
    ("stream", ("_Ops", "_TORCH_ON_CPU", "_CHUNK", "_CHUNK_CUDA", "_MANTISSA", "_blocked_gram")),
    ("measure", ("_FAST_MIN_ELEMS", "_measure", "_record", "_fill_spectrum", "_part", "_shifts")),
    ("run", ("_Background", "_Tally", "_blas_threads")),
    ("head", ("_top_tokens", "_decode", "_special_ids", "_check_tokenizer")),
    ("align", ("_alignment", "_clustering", "_aligned_sum", "_abs_cos")),
    ("moe", ("_moe_measure", "_moe_finish", "_matrix_metrics", "_expert_stats")),
    ("lora", ("_is_adapter", "_open_adapters", "_measure_low_rank")),
    ("compare", ("_finish", "_check_args", "_device_name")),
    ("settings", ("_key", "_finite")),
)


def __getattr__(name: str) -> Any:
    """A name of :data:`__all__` from the submodule that defines it (imported on first use), or a
    name of the former ``analysis.weight_diff`` from the submodule that holds it now."""
    for module, names in _LAZY_NAMES:
        if name in names:
            return getattr(importlib.import_module(module, __name__), name)
    for module, names in _FORMER_NAMES:
        if name in names:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
