"""``rlvr-diff``: ΔW report of RL checkpoints against their base, and hidden-state geometry.

    rlvr-diff [weights] BASE RL_1 [RL_2 ...] --out DIR [--device auto|cpu|cuda] [--top-k 64]
              [--layers all|head] [--tokenizer DIR] [--full-spectrum] [--series RUN_DIR]
              [--cast bf16|fp16|fp32] [--allow-other-base] [--geometry] [--prompts FILE [--samples N]
              [--max-new-tokens N] [--temperature T] [--seed S]] [--threads N] [--overwrite] [--json] [--quiet]
    rlvr-diff hidden-states CHECKPOINT --rollouts FILE.jsonl --out DIR [--tokenizer DIR]
              [--device auto|cpu|cuda] [--batch-size 8] [--temperature 1.0] [--threads N]
              [--overwrite] [--json] [--quiet]
    rlvr-diff kl BASE RL --prompts FILE --out DIR [--samples 4] [--max-new-tokens 256] [--temperature 1.0]
              [--seed 0] [--batch-size 8] [--tokenizer DIR] [--device auto|cpu|cuda] [--threads N]
              [--overwrite] [--json] [--quiet]
    rlvr-diff reconstruct BASE RL --rank K|full --out DIR [--rescale] [--others rl|base]
              [--allow-other-base] [--device auto|cpu|cuda] [--max-shard-size 5GB] [--threads N]
              [--overwrite] [--json] [--quiet]
    rlvr-diff reconstruct --series CK1 CK2 [...] | RUN_DIR --extrapolate STEP [--steps S1 S2 ...]
              --out DIR [--max-shard-size 5GB] [--threads N] [--overwrite] [--json] [--quiet]

``weights`` (the default subcommand: ``rlvr-diff BASE RL --out DIR`` is ``rlvr-diff weights
BASE RL --out DIR``; each ``RL`` may also be a PEFT LoRA adapter directory, measured from its
factors by :mod:`analysis.diff.lora`) writes ``DIR/report.md``, ``report.html`` (self-contained),
``report.json`` and PNGs (:func:`analysis.diff.diff`, :mod:`analysis.report`); ``--series
RUN_DIR`` adds the checkpoints of a run in step order (after any RL given): TRL's
``checkpoint-N`` and verl's ``global_step_N/actor/huggingface`` (a verl FSDP shard directory is
refused with the command that merges it); the cross-checkpoint alignment is taken against the
last one.  ``--series RUN_DIR`` alone (no RL given) also measures the series dynamics (share of
bit-identical stored entries between consecutive checkpoints, linearity R² in the step); two or
more RL checkpoints get the Jaccard of their update masks (``report.json`` ``dynamics``, the
report's "Dynamics" section; :mod:`analysis.diff.dynamics`).  ``--cast bf16|fp16|fp32`` rounds both sides to one precision before the difference
(a pair whose dtypes differ is otherwise flagged with its rounding floor).  An adapter whose
``base_model_name_or_path`` names another base than ``BASE`` is refused unless
``--allow-other-base`` (then recorded ``"base_identity": "other (allowed)"``; see
:func:`analysis.diff.lora.base_identity`).  ``--geometry`` adds where every weight matrix's update
lies relative to the base (``report.json`` ``geometry``, the report's "Geometry of the update"
section and the ULP histogram in "Precision"; :mod:`analysis.diff.geometry_pass`); for a LoRA adapter
from its factors, with its intruder dimensions (``report.json`` ``checkpoints[i].adapter.intruders``,
in the report's "LoRA adapter" section).  ``hidden-states`` writes
``DIR/hidden_states.{md,html,json,png}`` (:mod:`analysis.hidden_states`).  ``kl`` writes
``DIR/kl.{md,html,json}``: the token-averaged exact forward ``KL(π_base ‖ π_RL)`` (on continuations
sampled from the base; RL's Razor's forward KL, arXiv 2509.04259) and reverse ``KL(π_RL ‖ π_base)``
(on continuations sampled from the RL checkpoint), per prompt and overall
(:mod:`analysis.diff.kl`); ``weights --prompts FILE`` measures the same for every RL checkpoint
(full checkpoints only: a LoRA adapter is refused) into ``report.json["kl"]`` and the report's
"Policy KL" section.  ``reconstruct``
writes a Hugging Face checkpoint ``DIR`` (:mod:`analysis.diff.reconstruct`): ``W_base`` plus the
rank-``K`` part of every matrix's ``ΔW`` (``--rescale``: rescaled to ``‖ΔW‖_F``; ``--others``: where
norms and biases come from), or, with ``--extrapolate STEP``, the per-entry least-squares line in
the step of a series (``--series`` checkpoints whose steps are read from their names
``checkpoint-N`` / ``global_step_N`` or given with ``--steps``; one ``RUN_DIR`` stands for its
checkpoints in step order); an existing non-empty ``DIR`` is refused unless ``--overwrite``.  The
first two JSON files
carry a ``"run"`` block (:func:`rlvr_plumbing.runtime.run_metadata`: package version, the
command's settings, seed, device, threads).  ``--json`` prints the JSON document on stdout;
otherwise a short summary is printed unless ``--quiet`` (which also hides progress bars).

``--out`` is checked before any checkpoint is read (:func:`rlvr_plumbing.io.check_out`): an
existing file, a path under a file, a place that cannot be written, or a non-empty directory
that is not an earlier report of the same subcommand (unless ``--overwrite``) is refused, and
so is, even with ``--overwrite``, a directory that is or holds one of the inputs.
The report directory appears whole at the end or not at all.

``--threads N`` sets torch's and the BLAS pools' threads (:mod:`rlvr_plumbing.runner`) and is
passed to :func:`analysis.diff.diff` as ``workers=N`` (block spectra side by side).

Running, errors, ``--threads``, Ctrl-C and closed pipes are handled by
:mod:`rlvr_plumbing.runner`: a bad argument prints ``rlvr-diff: error: ...`` on stderr and
exits with status 2, leaving no output directory behind; a write the system refuses (disk
full, read-only file system; also standard output) prints one line naming the file and exits
with status 1.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

from rlvr_plumbing import runner
from rlvr_plumbing.serialize import fmt_number

__all__ = ["main", "main_exit", "build_parser", "PROG"]

PROG = "rlvr-diff"

#: numbers of the printed summary: 4 significant digits, thousands separators (as the report)
_fmt = functools.partial(fmt_number, digits=4, thousands=True)


# ------------------------------------------------------------------ parser
def _add_weights(sub: Any) -> None:
    ap = sub.add_parser(
        "weights", help="ΔW report of RL checkpoints against their base (the default subcommand)",
        description="Compare RL checkpoints with their base checkpoint: ΔW norms, densities, SVD / rank-1 "
                    "metrics of the output head and every weight, alignment and clustering (FADE App. 15).")
    ap.add_argument("base", metavar="BASE", help="base (SFT) checkpoint directory")
    ap.add_argument("checkpoints", metavar="RL", nargs="*",
                    help="RL checkpoint directories, or LoRA adapter directories (adapter_config.json + "
                         "adapter_model.safetensors; ΔW = s·B·A measured from the factors)")
    ap.add_argument("--out", required=True, metavar="DIR", help="report directory (created atomically)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    ap.add_argument("--top-k", type=int, default=64, help="singular values per weight matrix (default 64)")
    ap.add_argument("--layers", default="all", choices=("all", "head"),
                    help="SVD metrics for every 2-D weight (all) or the output head only")
    ap.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory to decode the top tokens of u")
    ap.add_argument("--full-spectrum", action="store_true", help="all singular values of every weight")
    ap.add_argument("--series", metavar="RUN_DIR",
                    help="add the checkpoints of a run in step order (TRL checkpoint-N, also LoRA adapter "
                         "checkpoints of a TRL + peft run, verl global_step_N/actor/huggingface); alone (no RL "
                         "given) it also measures the series dynamics: bit-identical share between consecutive "
                         "checkpoints, linearity R² in the step")
    ap.add_argument("--cast", choices=("bf16", "fp16", "fp32"), default=None,
                    help="round both sides to this precision before the difference (default: as stored; "
                         "differing dtypes are flagged with their rounding floor)")
    ap.add_argument("--allow-other-base", action="store_true",
                    help="diff a LoRA adapter against BASE even when its adapter_config.json "
                         "base_model_name_or_path names another base (refused by default; recorded in the report)")
    ap.add_argument("--geometry", action="store_true",
                    help="also measure where every weight matrix's update lies relative to the base (energy in "
                         "W_base's top-k singular subspaces, principal angles, entry concentration, ULPs of ΔW; "
                         "each beside a random baseline); for LoRA adapters from the factors, with their intruder "
                         "dimensions")
    _add_kl_options(ap, in_weights=True)
    runner.add_threads_option(ap, all_cores=True)   # spectra side by side, one BLAS thread each
    runner.add_overwrite_option(ap)
    ap.add_argument("--json", action="store_true", help="print report.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no summary")
    ap.set_defaults(func=_run_weights)


def _add_hidden_states(sub: Any) -> None:
    ap = sub.add_parser(
        "hidden-states", help="hidden-state geometry of correct vs failed rollouts",
        description="Hidden-state geometry of correct vs failed rollouts: perpendicular correlation and group "
                    "residual norms with their CLT baseline (FADE App. 15.2, Tables 10-11).")
    ap.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    ap.add_argument("--rollouts", required=True, metavar="FILE.jsonl",
                    help="one JSON object per line: prompt_ids/completion_ids (or prompt/completion) and "
                         "correct (or reward)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output directory (created atomically)")
    ap.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory for text rollouts")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    ap.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default 8)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of π (default 1)")
    runner.add_threads_option(ap)
    runner.add_overwrite_option(ap)
    ap.add_argument("--json", action="store_true", help="print hidden_states.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no summary")
    ap.set_defaults(func=_run_hidden_states)


def _add_kl_options(ap: argparse.ArgumentParser, *, in_weights: bool = False) -> None:
    """The sampling options of the policy KL (``kl``; ``weights`` with ``--prompts``, defaults then
    the library's)."""
    tail = " (with --prompts)" if in_weights else ""
    if in_weights:
        ap.add_argument("--prompts", metavar="FILE",
                        help="also measure the forward and reverse KL between the base and every RL policy on "
                             "continuations sampled for these prompts (JSONL 'prompt'/'prompt_ids' per line, or "
                             ".txt one prompt per line); full checkpoints only")
    ap.add_argument("--samples", dest="n_samples", type=int, default=None if in_weights else 4, metavar="N",
                    help=f"continuations sampled per prompt from each model [4]{tail}")
    ap.add_argument("--max-new-tokens", type=int, default=None if in_weights else 256, metavar="N",
                    help=f"longest continuation in tokens [256]{tail}")
    ap.add_argument("--temperature", type=float, default=None if in_weights else 1.0, metavar="T",
                    help=f"sampling temperature; both policies are softmax(logits / T) [1]{tail}")
    ap.add_argument("--seed", type=int, default=None if in_weights else 0, metavar="S",
                    help=f"seed of the base's samples (S + 1: the RL's) [0]{tail}")


def _add_kl(sub: Any) -> None:
    ap = sub.add_parser(
        "kl", help="forward and reverse KL between the base and the RL policy on sampled continuations",
        description="Token-averaged exact KL between the base and the RL policy: forward KL(π_base ‖ π_RL) on "
                    "continuations sampled from the base (RL's Razor, arXiv 2509.04259: forgetting tracks it) and "
                    "reverse KL(π_RL ‖ π_base) on continuations sampled from the RL checkpoint; at every sampled "
                    "token the full-vocabulary KL of the two next-token distributions, per prompt and overall.")
    ap.add_argument("base", metavar="BASE", help="base checkpoint directory")
    ap.add_argument("rl", metavar="RL", help="RL checkpoint directory (a full checkpoint, not a LoRA adapter)")
    ap.add_argument("--prompts", required=True, metavar="FILE",
                    help="JSONL with 'prompt' (string) or 'prompt_ids' (token ids) per line, or .txt with one "
                         "prompt per line")
    ap.add_argument("--out", required=True, metavar="DIR", help="output directory (created atomically)")
    _add_kl_options(ap)
    ap.add_argument("--batch-size", type=int, default=8, help="sequences per generate call and forward pass [8]")
    ap.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory for text prompts [the base's]")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    runner.add_threads_option(ap)
    runner.add_overwrite_option(ap)
    ap.add_argument("--json", action="store_true", help="print kl.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no summary")
    ap.set_defaults(func=_run_kl)


def _add_reconstruct(sub: Any) -> None:
    from .settings import DEFAULT_MAX_SHARD_SIZE, OTHERS, RANK_FULL  # constants only: no torch

    ap = sub.add_parser(
        "reconstruct", help="write a checkpoint: W_base + the rank-k part of ΔW, or a series extrapolated in the step",
        description="Write a loadable Hugging Face checkpoint that tests a claim about ΔW: 'reconstruct BASE RL "
                    "--rank K --out DIR' (every weight matrix W_base + the top-K SVD part of ΔW = W_rl - W_base; "
                    "AlphaRL, arXiv 2510.00553) or 'reconstruct --series CK1 CK2 ... --extrapolate STEP --out DIR' "
                    "(per entry, the least-squares line in the training step evaluated at STEP; RLVR-Linearity, "
                    "arXiv 2601.04537).  Written tensor by tensor, atomically.")
    ap.add_argument("inputs", metavar="BASE RL", nargs="*",
                    help="base checkpoint and RL checkpoint (or LoRA adapter) directories (not with --extrapolate)")
    ap.add_argument("--rank", metavar="K|full",
                    help=f"singular directions of ΔW kept per matrix: an integer >= 1 or {RANK_FULL!r} "
                         "(min(K, smaller side) per matrix)")
    ap.add_argument("--rescale", action="store_true",
                    help="rescale the rank-K part of every matrix to the Frobenius norm of its ΔW")
    ap.add_argument("--others", choices=OTHERS, default="rl",
                    help="where floating-point tensors that are not matrices (norms, biases) come from [rl]")
    ap.add_argument("--extrapolate", type=float, metavar="STEP",
                    help="write the per-entry least-squares line in the step of --series, evaluated at STEP")
    ap.add_argument("--series", nargs="+", metavar="CKPT",
                    help="checkpoints of one run (>= 2), or one run directory (its checkpoint-N / global_step_N)")
    ap.add_argument("--steps", nargs="+", type=float, metavar="STEP",
                    help="the training step of each --series checkpoint [read from the names]")
    ap.add_argument("--out", required=True, metavar="DIR", help="checkpoint directory to write (atomically)")
    ap.add_argument("--device", default="auto", help="where the SVDs run: auto (CUDA when present), cpu, cuda")
    ap.add_argument("--max-shard-size", default=str(DEFAULT_MAX_SHARD_SIZE // 10**9) + "GB", metavar="SIZE",
                    help="largest safetensors shard, e.g. 5GB, 500MB [5GB]")
    ap.add_argument("--allow-other-base", action="store_true",
                    help="read a LoRA adapter whose base_model_name_or_path names another base than BASE")
    runner.add_threads_option(ap)
    runner.add_overwrite_option(ap)
    ap.add_argument("--json", action="store_true", help="print reconstruct.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    ap.set_defaults(func=_run_reconstruct)


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr-diff`` parser: subcommands ``weights`` (default), ``hidden-states``, ``kl`` and ``reconstruct``.

    Examples
    --------
    >>> args = build_parser().parse_args(["weights", "sft", "rl-1", "rl-2", "--out", "rep", "--threads", "2"])
    >>> args.command, args.base, args.checkpoints, args.top_k, args.threads
    ('weights', 'sft', ['rl-1', 'rl-2'], 64, 2)
    >>> build_parser().parse_args(["hidden-states", "ck", "--rollouts", "r.jsonl", "--out", "hs"]).batch_size
    8
    """
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Checkpoint analysis of RL runs.  'rlvr-diff [weights] BASE RL... --out DIR': ΔW report "
                    "(FADE App. 15); 'rlvr-diff hidden-states CHECKPOINT --rollouts FILE --out DIR': hidden-state "
                    "geometry (FADE App. 15.2); 'rlvr-diff kl BASE RL --prompts FILE --out DIR': forward and "
                    "reverse KL between the policies (RL's Razor); 'rlvr-diff reconstruct BASE RL --rank K --out DIR': rank-K "
                    "checkpoint (or --extrapolate STEP along a --series).  'weights' is the default subcommand.")
    sub = ap.add_subparsers(dest="command", metavar="{weights,hidden-states,kl,reconstruct}")
    sub.required = True
    _add_weights(sub)
    _add_hidden_states(sub)
    _add_kl(sub)
    _add_reconstruct(sub)
    return ap


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The command's arguments as typed (for the ``"run"`` block of the JSON file)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "json", "quiet", "overwrite")}


def _check_out(args: argparse.Namespace, markers: Sequence[str], inputs: dict[str, Any],
               own_key: str | None = None) -> None:
    """``--out`` before any work (:func:`rlvr_plumbing.io.check_out`), and never a directory that
    holds one of the inputs: replacing it (``--overwrite``) would delete them.  With ``own_key``,
    a ``report.json`` already in ``--out`` must be this command's (hold that key): another
    command's report (e.g. ``rlvr-audit``'s) is replaced only with ``--overwrite``."""
    import json
    from pathlib import Path

    from rlvr_plumbing.io import check_out

    out = check_out(args.out, markers=markers, overwrite=args.overwrite).resolve()
    old = out / "report.json"
    if own_key and not args.overwrite and old.is_file():
        try:
            mine = own_key in json.loads(old.read_text(encoding="utf-8"))
        except (ValueError, TypeError, UnicodeDecodeError):
            mine = False
        if not mine:
            raise ValueError(f"out: {str(args.out)!r} holds a report.json that is not an rlvr-diff report; "
                             "choose a new directory or pass --overwrite")
    for what, path in inputs.items():
        if path is None:
            continue
        p = Path(path).resolve()
        if p == out or out in p.parents:
            raise ValueError(f"out: {str(args.out)!r} holds the input {what}; the report would "
                             "replace it: choose another directory")


# ---------------------------------------------------------------- commands
def _run_weights(args: argparse.Namespace) -> int:
    from .. import diff as checkpoint_diff
    from .. import report

    inputs = {f"BASE {str(args.base)!r}": args.base, f"--series {args.series!r}": args.series,
              f"--tokenizer {args.tokenizer!r}": args.tokenizer}
    inputs.update({f"RL {str(p)!r}": p for p in args.checkpoints})
    inputs[f"--prompts {args.prompts!r}"] = args.prompts
    _check_out(args, report.REPORT_MARKERS, inputs, own_key="checkpoints")  # before any work
    cks = list(args.checkpoints)
    if args.series:
        cks += checkpoint_diff.series(args.series)
    if not cks:
        raise ValueError("checkpoints: give at least one RL checkpoint directory or --series RUN_DIR")
    kl_opts = _kl_options(args)
    if args.prompts is not None:
        from . import kl as policy

        policy.check_inputs(args.base, cks, args.prompts)  # before the diff: adapters, vocabularies, prompts
    workers = runner.default_threads(all_cores=True) if args.threads is None else args.threads
    dynamics = "series" if args.series and not args.checkpoints and len(cks) >= 2 else "auto"
    doc = checkpoint_diff.diff(args.base, cks, device=args.device, top_k=args.top_k, layers=args.layers,
                               tokenizer=args.tokenizer, full_spectrum=args.full_spectrum, progress=not args.quiet,
                               cast=args.cast, workers=workers, allow_other_base=args.allow_other_base,
                               geometry=args.geometry, dynamics=dynamics)
    if args.prompts is not None:
        doc["kl"] = policy.policy_kls(args.base, cks, args.prompts, device=args.device, tokenizer=args.tokenizer,
                                      progress=not args.quiet, **kl_opts)
    doc["run"]["settings"] = _settings(args)
    doc = report.with_verdicts(doc)   # as report.json holds it
    out = report.write_report(doc, args.out, overwrite=args.overwrite)
    if args.json:
        print(report.to_json(doc))
    elif not args.quiet:
        print(f"report: {out}/report.md, report.html, report.json")
        for c in doc["checkpoints"]:
            h = c["output_head"]
            print(f"{c['path']}: ‖ΔW‖_F = {_fmt(c['global_l2'])} (relative {_fmt(c['relative_l2'])}), "
                  f"OH share {_fmt(100 * h['l2_share'])}%, head s1/s2 = {_fmt(h['s1_s2'])}, "
                  f"rank-1 = {_fmt(None if h['rank1_fraction'] is None else 100 * h['rank1_fraction'])}%, "
                  f"Inner s1/s2 = {_fmt(c['inner_s1_s2_mean'])}, Inner × L = "
                  f"{_fmt(None if c.get('inner_l2_share_x_layers') is None else 100 * c['inner_l2_share_x_layers'])}%"
                  f"\n  verdict: {report.fade_regime(c)['reading']}")
            if c.get("vocab_note"):
                print(f"  note: {c['vocab_note']}")
            if c.get("adapter"):
                _print_adapter(c["adapter"])
                if c.get("base_identity", "same") != "same":
                    n = c["base_identity_names"]
                    print(f"  base identity: {c['base_identity']}: the adapter names "
                          f"{n['adapter_base_model_name_or_path']!r}, the base given is {n['base']!r}")
            if doc.get("geometry"):
                _print_geometry(doc["geometry"]["checkpoints"][doc["checkpoints"].index(c)])
            if c.get("dtype_differs") and c.get("rounding_floor"):
                print(f"  dtypes differ: base {doc['base_dtype']}, checkpoint {c['dtype']}; rounding floor "
                      f"‖ΔW‖ = {_fmt(c['rounding_floor']['l2'])} (use --cast to diff at one precision)")
        if doc.get("dynamics"):
            _print_dynamics(doc["dynamics"])
        for c in (doc.get("kl") or {}).get("checkpoints", []):
            _print_kl(c)
    return 0


def _kl_options(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling options given to ``weights`` (``--prompts``); refused without ``--prompts``."""
    given = {k: getattr(args, k) for k in ("n_samples", "max_new_tokens", "temperature", "seed")
             if getattr(args, k) is not None}
    if given and args.prompts is None:
        flag = {"n_samples": "--samples"}.get(next(iter(given)), "--" + next(iter(given)).replace("_", "-"))
        raise ValueError(f"{flag} goes with --prompts FILE (the policy KL); give --prompts or drop it")
    return given


def _print_kl(c: dict[str, Any]) -> None:
    """One summary line of a checkpoint's policy KL: both directions per token, ± s.e. over prompts."""
    def pm(r: dict[str, Any]) -> str:
        se = r["kl_token_se"]
        return _fmt(r["kl_token_mean"]) + ("" if se is None else f" ± {_fmt(se)}")

    f, r = c["forward"], c["reverse"]
    print(f"{c['rl']}: KL(base‖RL) = {pm(f)} nats/token on base samples (forward, RL's Razor), KL(RL‖base) = "
          f"{pm(r)} on RL samples; {_fmt(f['n_tokens'])} + {_fmt(r['n_tokens'])} tokens, "
          f"{len(c['prompts'])} prompts × {c['settings']['n_samples']} samples")


def _print_dynamics(d: dict[str, Any]) -> None:
    """One summary line of the dynamics: the series' bit-identical share and linearity, or the
    runs' mask Jaccard per pair beside the random baseline."""
    def pct(x: Any) -> str:
        return "—" if x is None else _fmt(100 * x) + "%"

    if d["kind"] == "series":
        lin = d.get("linearity") or {}
        tail = "" if not lin else (f"; linearity in the step: median R² {_fmt(lin.get('median_r2'))}, pooled "
                                   f"{_fmt(lin.get('pooled_r2'))} (random walk: median "
                                   f"{_fmt(lin['random_walk'].get('median_r2'))})")
        print(f"dynamics: {pct(d['change']['identical_share'])} of stored entries bit-identical between consecutive "
              f"checkpoints{tail}")
    else:
        for p in d["pairs"]:
            print(f"dynamics: update masks (top {_fmt(100 * d['settings']['mask_fraction'])}% |ΔW|) of runs {p['a']} "
                  f"and {p['b']}: Jaccard {_fmt(p['jaccard'])}, random {_fmt(p['baseline'])}")


def _print_geometry(g: dict[str, Any]) -> None:
    """One summary line of a checkpoint's geometry (``--geometry``): energy in the top-8 subspaces
    and the unchanged / one-ULP shares, each beside its baseline."""
    def row(metric: str, param: float) -> dict[str, Any]:
        return next((a for a in g["aggregate"] if a["metric"] == metric and a["param"] == param), {})

    left, right = row("energy_left", 8.0), row("energy_right", 8.0)

    def pct(x: Any) -> str:
        return "—" if x is None else _fmt(100 * x) + "%"

    parts = [f"top-8 subspaces hold {pct(left.get('value'))} (left) / {pct(right.get('value'))} (right) of ‖ΔW‖², "
             f"random {pct(left.get('baseline'))} / {pct(right.get('baseline'))}"]
    for h in g.get("precision") or []:
        parts.append(f"{h['dtype']}: {pct(h['unchanged_share'])} unchanged, {pct(h['one_ulp_share'])} by one ULP")
    print("  geometry: " + "; ".join(parts))


def _print_adapter(a: dict[str, Any]) -> None:
    """One summary line for a LoRA adapter directory."""
    dora = f", {a['n_dora']} DoRA" if a.get("n_dora") else ""
    print(f"  LoRA adapter: {a['n_low_rank']} low-rank updates (rank {', '.join(map(str, a['ranks'])) or '—'}, "
          f"lora_alpha {a['lora_alpha']}{', rsLoRA' if a['use_rslora'] else ''}){dora}, {a['n_full']} full "
          f"tensors; ΔW = s·B·A measured from the factors")


def _run_hidden_states(args: argparse.Namespace) -> int:
    from .. import hidden_states, report

    _check_out(args, report.HIDDEN_STATES_MARKERS,  # before any work
               {f"CHECKPOINT {str(args.checkpoint)!r}": args.checkpoint, f"--rollouts {str(args.rollouts)!r}":
                args.rollouts, f"--tokenizer {args.tokenizer!r}": args.tokenizer})
    doc = hidden_states.geometry(args.checkpoint, args.rollouts, tokenizer=args.tokenizer, device=args.device,
                                 batch_size=args.batch_size, temperature=args.temperature, progress=not args.quiet)
    doc["run"]["settings"] = _settings(args)
    out = report.write_hidden_states_report(doc, args.out, overwrite=args.overwrite)
    if args.json:
        print(report.to_json(doc))
    elif not args.quiet:
        r = doc["rho_perp"]
        print(f"report: {out}/hidden_states.md, hidden_states.html, hidden_states.json")
        print(f"rho_perp: correct {_fmt(r['success'])}, failed {_fmt(r['failure'])} (ratio {_fmt(r['ratio'])}); "
              f"||R_F||/||R_S|| = {_fmt(doc['residual_ratio'])} vs CLT sqrt(N_S/N_F) = {_fmt(doc['clt_baseline'])}")
    return 0


def _run_kl(args: argparse.Namespace) -> int:
    from ..report import to_json
    from . import kl as policy

    _check_out(args, policy.KL_MARKERS,  # before any work
               {f"BASE {str(args.base)!r}": args.base, f"RL {str(args.rl)!r}": args.rl,
                f"--prompts {str(args.prompts)!r}": args.prompts, f"--tokenizer {args.tokenizer!r}": args.tokenizer})
    doc = policy.policy_kl(args.base, args.rl, args.prompts, n_samples=args.n_samples,
                           max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                           batch_size=args.batch_size, device=args.device, tokenizer=args.tokenizer,
                           progress=not args.quiet)
    doc["run"]["settings"] = _settings(args)
    out = policy.write_kl_report(doc, args.out, overwrite=args.overwrite)
    if args.json:
        print(to_json(doc))
    elif not args.quiet:
        print(f"report: {out}/kl.md, kl.html, kl.json")
        _print_kl(doc)
    return 0


def _run_reconstruct(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..report import to_json
    from . import reconstruct as rc
    from .stream import series

    if args.extrapolate is None:
        for flag, v in (("--series", args.series), ("--steps", args.steps)):
            if v:
                raise ValueError(f"{flag[2:]} goes with --extrapolate STEP (a series extrapolated in the step); "
                                 "for a rank-K checkpoint give BASE RL --rank K")
        if len(args.inputs) != 2:
            raise ValueError(f"inputs: give BASE and RL (two checkpoint directories), got {len(args.inputs)}: "
                             f"{args.inputs}; or --series CK1 CK2 ... --extrapolate STEP")
        if args.rank is None:
            raise ValueError("rank is required with BASE RL: an integer >= 1 or 'full', e.g. --rank 1")
        doc = rc.reconstruct(args.inputs[0], args.inputs[1], args.out, rank=args.rank, rescale=args.rescale,
                             others=args.others, overwrite=args.overwrite, device=args.device,
                             max_shard_size=args.max_shard_size, allow_other_base=args.allow_other_base,
                             progress=not args.quiet)
    else:
        if args.inputs:
            raise ValueError(f"inputs: no BASE/RL with --extrapolate (got {args.inputs}); give the checkpoints "
                             "with --series CK1 CK2 ...")
        for flag, bad in (("--rank", args.rank is not None), ("--rescale", args.rescale),
                          ("--others", args.others != "rl")):
            if bad:
                raise ValueError(f"{flag[2:]} is not used with --extrapolate; to keep the rank-K part of an "
                                 "extrapolated checkpoint, run 'rlvr-diff reconstruct BASE EXTRAPOLATED --rank K'")
        if not args.series:
            raise ValueError("series is required with --extrapolate: --series CK1 CK2 ... (or one run directory)")
        cks = list(args.series)
        if len(cks) == 1 and Path(cks[0]).is_dir() and not (Path(cks[0]) / "config.json").is_file():
            cks = series(cks[0])
        if len(cks) < 2:
            raise ValueError(f"series must hold at least 2 checkpoints (a line in the step needs two points), "
                             f"got {len(cks)}: {cks}")
        if args.steps is not None and len(args.steps) != len(cks):
            raise ValueError(f"steps must give one step per --series checkpoint ({len(cks)}), got {len(args.steps)}")
        doc = rc.extrapolate(cks, args.out, at=args.extrapolate, steps=args.steps, overwrite=args.overwrite,
                             max_shard_size=args.max_shard_size, progress=not args.quiet)
    doc["settings"] = _settings(args)
    if args.json:
        print(to_json(doc))
    elif not args.quiet:
        print(f"checkpoint: {args.out} ({', '.join(doc['shards'])}; {', '.join(doc['copied_files'])})")
        if doc["kind"] == "rank_k":
            c = doc["counts"]
            e = doc["energy_total"]
            print(f"rank {doc['rank']}{' (rescaled to ‖ΔW‖)' if doc['rescale'] else ''}: {c['matrices']} matrices, "
                  f"{c['other_from_' + doc['others']]} other tensors from {doc['others']}; the rank-{doc['rank']} "
                  f"parts hold {_fmt(None if e is None else 100 * e)}% of ‖ΔW‖²")
        else:
            print(f"extrapolated to step {_fmt(doc['extrapolate'])} from steps "
                  f"{', '.join(_fmt(s) for s in doc['steps'])} (weights {', '.join(_fmt(w) for w in doc['weights'])})")
    return 0


# --------------------------------------------------------------- entry points
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlvr-diff``; return the exit status (0, 2 on a usage or input error, 130 on Ctrl-C).

    Also in-process: argparse's own exit (usage error, ``--help``) is returned, not raised.
    """
    return runner.run(PROG, build_parser, argv, default_command="weights")


main_exit = runner.console(PROG, build_parser, default_command="weights")


if __name__ == "__main__":  # pragma: no cover
    main_exit()
