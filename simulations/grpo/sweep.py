"""The experiment of FADE Sec. 5 / Table 8 at toy scale: AsymGRPO δ ∈ {0.5, 1, 2} and
FADE trained from one SFT checkpoint, then the output-head table of their weight changes.

For every run and every saved step the checkpoint diff (:func:`analysis.diff.diff`,
``ΔW = W_rl − W_sft``) gives the columns of FADE's output-head table:

``OH``          output head's share of the update, ``‖ΔW_head‖_F² / ‖ΔW‖_F²`` (%, ``output_head.l2_share``)
``L2``          global ``‖ΔW‖_F`` over all tensors (``global_l2``)
``s1/s2``       ratio of the two leading singular values of ``ΔW_head``
``rank-1%``     ``σ1² / ‖ΔW_head‖_F²`` (%, FADE App. 15 ``r1``)
``Inner``       mean over transformer blocks of the block's share of ``‖ΔW‖_F²`` (%, ``inner_l2_share_mean``)
``inner_s1_s2`` mean ``s1/s2`` of the block weight matrices (``inner_s1_s2_mean``)

FADE's printed table has one fewer number per row than headers ("OH L2" reads as one
column, the head's L2 share); we report both the share and the global norm.

plus the run's mean training reward over its last 10 steps and (optional) held-out pass@1
of the final checkpoint.  The runs differ only in the advantage; all other settings are
shared.  The settings are those of :class:`~simulations.grpo.config.SweepConfig`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from rlvr_plumbing.io import atomic_write, atomic_write_text

from . import checkpoint as ck
from .config import SweepConfig
from .trainer import train

__all__ = ["SweepConfig", "run_sweep", "output_head_table"]


def output_head_table(base: str | os.PathLike, runs: dict[str, Path], *, device: str = "auto",
                      layers: str = "all", progress: bool = True) -> pd.DataFrame:
    """One row per (run, checkpoint step) from :func:`analysis.diff.diff`.

    ``layers="head"`` computes SVD metrics of the output head only (``inner_s1_s2`` is then
    empty; the other columns need only norms).

    Raises ``RuntimeError`` when ``analysis.diff`` is not installed.
    """
    try:
        from analysis import diff as weight_diff
    except ImportError as err:  # the checkpoint diff ships separately
        raise RuntimeError("the output-head table needs analysis.diff (the checkpoint diff), "
                           f"which is not available: {err}") from None
    rows = []
    for name, run_dir in runs.items():
        ckpts = ck.list_checkpoints(run_dir)
        if not ckpts:
            continue
        rep = weight_diff.diff(str(base), [str(p) for _, p in ckpts], device=device, layers=layers,
                               progress=progress)
        by_path = {os.path.abspath(c["path"]): c for c in rep["checkpoints"]}
        for step, path in ckpts:
            c = by_path.get(os.path.abspath(str(path)))
            if c is None:
                continue
            oh = c.get("output_head") or {}
            pct = lambda v: None if v is None else 100.0 * v  # noqa: E731
            rows.append({"run": name, "step": step, "OH": pct(oh.get("l2_share")), "L2": c.get("global_l2"),
                         "s1/s2": oh.get("s1_s2"), "rank-1%": pct(oh.get("rank1_fraction")),
                         "Inner": pct(c.get("inner_l2_share_mean")), "inner_s1_s2": c.get("inner_s1_s2_mean"),
                         "head_l2": oh.get("l2")})
    return pd.DataFrame(rows)


def run_sweep(init: str | os.PathLike, out: str | os.PathLike, **settings: Any) -> dict[str, Any]:
    """Train every run of :meth:`SweepConfig.runs` into ``out/<run>`` (resuming finished or
    partial runs), evaluate, then write ``out/summary.csv`` and, through the checkpoint diff,
    ``out/output_head_table.{csv,md}``.  Returns ``{"runs", "summary", "table", "table_error"}``.

    ``settings``: the fields of :class:`SweepConfig` (the runs' shared GRPO settings, ``deltas``,
    ``fade``, ``fade_params``, ``eval_problems``, ``eval_n``, ``diff_device``, ``diff_layers``,
    ``quiet``, ``overwrite``).  Every setting, and ``out``, is checked before anything is
    trained: ``out`` must be new, empty or an earlier sweep (its tables or run folders: the
    runs are then resumed), unless ``overwrite`` (the directory is then replaced).
    """
    from .evaluate import evaluate

    sw = SweepConfig(out=str(out), init=str(init), **settings)
    cfgs = sw.validate()  # refuse a bad setting before training anything
    quiet, eval_problems, eval_n = sw.quiet, sw.eval_problems, sw.eval_n
    out = Path(out)
    if sw.overwrite and out.exists():
        ck.remove_tree(out)
    out.mkdir(parents=True, exist_ok=True)
    dirs: dict[str, Path] = {}
    summary = []
    for name, cfg in cfgs.items():
        if not quiet:
            print(f"sweep: training {name} -> {cfg.out}", flush=True)
        dirs[name] = train(cfg)
        m = pd.read_csv(dirs[name] / "metrics.csv")
        row = {"run": name, "steps": int(m["step"].iloc[-1]), "reward_last10": float(m["reward_mean"].tail(10).mean()),
               "entropy_last10": float(m["entropy"].tail(10).mean()),
               "head_delta_norm": float(m["head_delta_norm"].iloc[-1])}
        if eval_problems:
            last = ck.latest_checkpoint(dirs[name])
            res = evaluate(last[1], k=[1], n=eval_n, problems=eval_problems, device=cfg.device,
                           threads=cfg.threads, progress=not quiet)
            row["heldout_pass@1"] = res.pass_at_k[1]
        summary.append(row)
    if eval_problems:
        base_res = evaluate(init, k=[1], n=eval_n, problems=eval_problems, device=sw.device,
                            threads=sw.threads, progress=not quiet)
        summary.insert(0, {"run": "sft (base)", "steps": 0, "heldout_pass@1": base_res.pass_at_k[1]})
    summ = pd.DataFrame(summary)
    atomic_write(out / "summary.csv", lambda p: summ.to_csv(p, index=False))
    table, err = None, None
    try:
        table = output_head_table(init, dirs, device=sw.diff_device, layers=sw.diff_layers, progress=not quiet)
    except RuntimeError as e:
        err = str(e)
    if table is not None:
        atomic_write(out / "output_head_table.csv", lambda p: table.to_csv(p, index=False))
        atomic_write_text(out / "output_head_table.md", table.to_markdown(index=False, floatfmt=".3g")
                          if _has_tabulate() else table.to_string(index=False))
    return {"runs": dirs, "summary": summ, "table": table, "table_error": err}


def _has_tabulate() -> bool:
    """pandas' ``to_markdown`` needs the optional ``tabulate`` package."""
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None
