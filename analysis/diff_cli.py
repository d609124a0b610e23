"""``rlvr-diff``: ΔW report of RL checkpoints against their base, and hidden-state geometry.

    rlvr-diff BASE RL_1 [RL_2 ...] --out DIR [--device auto|cpu|cuda] [--top-k 64]
              [--layers all|head] [--tokenizer DIR] [--full-spectrum] [--series RUN_DIR]
              [--json] [--quiet]
    rlvr-diff hidden-states CHECKPOINT --rollouts FILE.jsonl --out DIR [--tokenizer DIR]
              [--device auto|cpu|cuda] [--batch-size 8] [--temperature 1.0] [--json] [--quiet]

The first form writes ``DIR/report.md``, ``report.html`` (self-contained), ``report.json``
and PNGs (:mod:`analysis.weight_diff`, :mod:`analysis.report`); ``--series RUN_DIR`` adds
the ``checkpoint-*`` directories of a run in step order (after any RL given), and the
cross-checkpoint alignment is taken against the last one.  The second form writes
``DIR/hidden_states.{md,html,json,png}`` (:mod:`analysis.hidden_states`).  ``--json``
prints the JSON document on stdout; otherwise a short summary is printed unless
``--quiet`` (which also hides progress bars).  Errors: ``rlvr-diff: error: ...`` on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

__all__ = ["main", "main_exit", "build_parser", "build_hidden_parser"]

PROG = "rlvr-diff"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Compare RL checkpoints with their base checkpoint: ΔW norms, densities, SVD / rank-1 "
                    "metrics of the output head and every weight, alignment and clustering (FADE App. 15). "
                    "Also: 'rlvr-diff hidden-states CHECKPOINT --rollouts FILE --out DIR'.")
    ap.add_argument("base", metavar="BASE", help="base (SFT) checkpoint directory")
    ap.add_argument("checkpoints", metavar="RL", nargs="*", help="RL checkpoint directories")
    ap.add_argument("--out", required=True, metavar="DIR", help="report directory (created atomically)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    ap.add_argument("--top-k", type=int, default=64, help="singular values per weight matrix (default 64)")
    ap.add_argument("--layers", default="all", choices=("all", "head"),
                    help="SVD metrics for every 2-D weight (all) or the output head only")
    ap.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory to decode the top tokens of u")
    ap.add_argument("--full-spectrum", action="store_true", help="all singular values of every weight")
    ap.add_argument("--series", metavar="RUN_DIR", help="add RUN_DIR/checkpoint-* in step order")
    ap.add_argument("--json", action="store_true", help="print report.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no summary")
    return ap


def build_hidden_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=f"{PROG} hidden-states",
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
    ap.add_argument("--json", action="store_true", help="print hidden_states.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no progress bars, no summary")
    return ap


def _fmt(x: object) -> str:
    from .report import _fmt as f
    return f(x)


def _run_diff(args: argparse.Namespace) -> int:
    from . import report, weight_diff

    cks = list(args.checkpoints)
    if args.series:
        cks += weight_diff.series(args.series)
    if not cks:
        raise ValueError("checkpoints: give at least one RL checkpoint directory or --series RUN_DIR")
    doc = weight_diff.diff(args.base, cks, device=args.device, top_k=args.top_k, layers=args.layers,
                           tokenizer=args.tokenizer, full_spectrum=args.full_spectrum, progress=not args.quiet)
    out = report.write_report(doc, args.out)
    if args.json:
        print(report.to_json(doc))
    elif not args.quiet:
        print(f"report: {out}/report.md, report.html, report.json")
        for c in doc["checkpoints"]:
            h = c["output_head"]
            print(f"{c['path']}: ‖ΔW‖_F = {_fmt(c['global_l2'])} (relative {_fmt(c['relative_l2'])}), "
                  f"OH share {_fmt(100 * h['l2_share'])}%, head s1/s2 = {_fmt(h['s1_s2'])}, "
                  f"rank-1 = {_fmt(None if h['rank1_fraction'] is None else 100 * h['rank1_fraction'])}%, "
                  f"Inner s1/s2 = {_fmt(c['inner_s1_s2_mean'])}")
            if c.get("vocab_note"):
                print(f"  note: {c['vocab_note']}")
    return 0


def _run_hidden(args: argparse.Namespace) -> int:
    from . import hidden_states, report

    doc = hidden_states.geometry(args.checkpoint, args.rollouts, tokenizer=args.tokenizer, device=args.device,
                                 batch_size=args.batch_size, temperature=args.temperature, progress=not args.quiet)
    out = report.write_hidden_states_report(doc, args.out)
    if args.json:
        print(report.to_json(doc))
    elif not args.quiet:
        r = doc["rho_perp"]
        print(f"report: {out}/hidden_states.md, hidden_states.html, hidden_states.json")
        print(f"rho_perp: correct {_fmt(r['success'])}, failed {_fmt(r['failure'])} (ratio {_fmt(r['ratio'])}); "
              f"||R_F||/||R_S|| = {_fmt(doc['residual_ratio'])} vs CLT sqrt(N_S/N_F) = {_fmt(doc['clt_baseline'])}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlvr-diff``; return the exit status (0, or 2 on a usage or input error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hidden = bool(argv) and argv[0] == "hidden-states"
    parser = build_hidden_parser() if hidden else build_parser()
    try:
        args = parser.parse_args(argv[1:] if hidden else argv)
    except SystemExit as exc:  # argparse printed its usage error (exit 2) or --help (exit 0)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    try:
        return _run_hidden(args) if hidden else _run_diff(args)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


def main_exit() -> None:  # console-script entry point
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_exit()
