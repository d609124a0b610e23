"""``rlvr-audit``: diagnose an RL run from the rollout logs its trainer wrote.

    rlvr-audit PATH [PATH ...] --out REPORT_DIR [--format auto|trl|verl|prime-rl|rlvr|table|open-instruct|slime]
               [--group-size G] [--reward-column NAME] [--success-threshold T]
               [--advantage NAME --param k=v ...] [--compare NAME ...] [--tau T ...]
               [--steps A:B] [--split train|val|all] [--skip-bad-lines] [--allow-suspect-read]
               [--metrics PATH ...] [--metric-format auto|trl|verl|prime-rl|wandb|table]
               [--metric-map THEIRS=OURS ...] [--performance METRIC] [--fit-fraction F] [--is-cap C]
               [--json] [--threads N] [--overwrite] [--quiet]

Reads the rollout logs (:func:`analysis.audit.readers.read`: TRL completions parquet, verl
rollout JSONL, prime-rl traces, ``rlvr-train grpo`` rollouts, open-instruct saved traces, slime
debug rollout dumps, or any table with columns ``step``, ``group``, ``reward``), computes the per-group and per-step diagnostics
(:func:`analysis.audit.metrics.audit`) and writes ``REPORT_DIR/report.md``, ``report.html``
(self-contained), ``report.json`` and PNGs (:func:`analysis.audit.report.write_report`).
``report.json`` carries a ``"run"`` block (:func:`rlvr_plumbing.runtime.run_metadata`: package
version, the command's settings, threads).  ``--json`` prints ``report.json`` on stdout;
otherwise a short summary is printed unless ``--quiet``.

The trainer's metric log (TRL ``trainer_state.json`` with every ``checkpoint-N``'s, verl's file
logger, prime-rl, W&B exports, a step-keyed table: :mod:`analysis.audit.metric_logs`) is found
among ``PATH`` or named with ``--metrics``; with it the report adds the Entropy section (Cui et
al.'s fit with its early-fit error), the train–inference mismatch, the zero-signal cross-check and
the alerts (:mod:`analysis.audit.trainer_log`).  A metric log alone, rollouts alone, or both
(joined by step).

Every argument is checked before any log is read, and ``--out`` first
(:func:`rlvr_plumbing.io.check_out`): an existing file, a path under a file, a place that cannot be
written, or a non-empty directory that is not an earlier audit report (unless
``--overwrite``) is refused, and so is, even with ``--overwrite``, a directory that is or holds
one of the inputs.  A log that does not match its format is refused with the file, line (or
row) and column named.  A read that looks wrong (:func:`analysis.audit.readers.suspect_read`: more
than :data:`~analysis.audit.readers.MAX_DROPPED_SHARE` of the rows dropped, or every group of one
rollout without ``--group-size 1``) is refused with one line (exit 2) unless
``--allow-suspect-read``, which audits the rows as read and says so in the report's verdict and
in ``report.json`` ``"suspect_read"``.  Nothing is written until the whole report is ready; the report
directory appears whole at the end or not at all.

Running, errors, ``--threads``, Ctrl-C and closed pipes are handled by
:mod:`rlvr_plumbing.runner`: a bad argument prints ``rlvr-audit: error: ...`` (naming the flag)
on stderr and exits with status 2; a write the system refuses prints one line naming the file
and exits with status 1.  Ctrl-C, at any moment, exits with status 130 and one line saying
what was not written: ``rlvr-audit: interrupted: no report written; 'REPORT_DIR' is left as it
was`` (or ``was not created``) until the report is renamed into place, ``...: the report in
'REPORT_DIR' is complete; the summary was not printed`` after; no temporary directory is left
beside ``REPORT_DIR`` (:func:`rlvr_plumbing.io.atomic_dir`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr_plumbing import checks, runner
from rlvr_plumbing.serialize import fmt_number

__all__ = ["main", "main_exit", "build_parser", "parse_steps", "PROG", "FORMATS"]

PROG = "rlvr-audit"
#: the log formats ``--format`` accepts (``auto`` detects one from the files)
FORMATS = ("auto", "trl", "verl", "prime-rl", "rlvr", "table", "open-instruct", "slime")
#: the metric-log formats ``--metric-format`` accepts
METRIC_FORMATS = ("auto", "trl", "verl", "prime-rl", "wandb", "table")

_fmt = functools.partial(fmt_number, digits=4, thousands=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr-audit`` parser.

    Examples
    --------
    >>> a = build_parser().parse_args(["logs/", "--out", "rep", "--compare", "dr_grpo", "rloo", "--tau", "0.01",
    ...                                "--advantage", "asym_grpo", "--param", "delta=0.5", "--steps", "10:"])
    >>> a.paths, a.format, a.compare, a.tau, a.advantage, a.param, a.steps
    (['logs/'], 'auto', ['dr_grpo', 'rloo'], [0.01], 'asym_grpo', ['delta=0.5'], '10:')
    """
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Diagnose an RL run from the rollout logs its trainer wrote (TRL completions parquet, verl "
                    "rollout JSONL, prime-rl traces, rlvr-train rollouts, or a table): per step the zero-signal "
                    "groups, the masses m_S, m_F of the advantage in use and of alternatives, which advantage "
                    "was used, Kish N_eff, tail-miss risk, pass@1 and pass@G, and what FADE's schedule would "
                    "have chosen.  Writes REPORT_DIR/report.{md,html,json} and PNGs.  See docs/audit.md.")
    ap.add_argument("paths", metavar="PATH", nargs="+", help="log files or directories (one run)")
    ap.add_argument("--out", required=True, metavar="REPORT_DIR", help="report directory (created atomically)")
    ap.add_argument("--format", default="auto", choices=FORMATS, help="log format [auto: detected from the files]")
    ap.add_argument("--group-size", type=int, default=None, metavar="G",
                    help="rollouts per prompt (TRL's num_generations) [inferred from the log]")
    ap.add_argument("--reward-column", default=None, metavar="NAME",
                    help="the reward column to use (TRL: one reward function) [the total reward]")
    ap.add_argument("--success-threshold", type=float, default=None, metavar="T",
                    help="real-valued rewards: a rollout succeeds when r >= T [binary rewards: r = max]")
    ap.add_argument("--advantage", default=None, metavar="NAME",
                    help="registry advantage for the masses when the log has no advantages (rlvr-theory list)")
    runner.add_param_option(ap, help="parameter of --advantage, repeatable (e.g. --param delta=0.5)")
    ap.add_argument("--compare", nargs="+", action="extend", default=None, metavar="NAME",
                    help="what-if: masses of these registry advantages on the same rewards; NAME:k=v,k=v gives "
                         "parameters (e.g. asym_grpo:delta=0.5)")
    ap.add_argument("--tau", nargs="+", action="extend", type=float, default=None, metavar="T",
                    help="tail-miss risk for a correct mode of mass T (0 < T < 1), repeatable")
    ap.add_argument("--steps", default=None, metavar="A:B", help="only steps A to B, inclusive (A: or :B open)")
    ap.add_argument("--split", default="train", choices=("train", "val", "all"),
                    help="rollouts to audit where the log tells train from validation (prime-rl train/eval, a split "
                         "column); 'val' labels a verl validation dump; 'all' audits train and summarises val [train]")
    ap.add_argument("--skip-bad-lines", action="store_true",
                    help="skip (and count) unreadable JSONL lines instead of refusing the file")
    ap.add_argument("--metrics", nargs="+", action="extend", default=None, metavar="PATH",
                    help="the trainer's metric log (TRL trainer_state.json, verl file-logger JSONL, prime-rl, W&B "
                         "export, a step-keyed table), files or folders [found among PATH: trainer_state.json, "
                         "checkpoint-N/trainer_state.json, metric JSONL/CSV files]")
    ap.add_argument("--metric-format", default="auto", choices=METRIC_FORMATS,
                    help="metric log format [auto: detected from the files]")
    ap.add_argument("--metric-map", nargs="+", action="extend", default=None, metavar="THEIRS=OURS",
                    help="map the log's metric names to ours (docs/metric_logs.md), e.g. my_entropy=entropy "
                         "acc=val/acc; comma-separated pairs are accepted too")
    ap.add_argument("--performance", default=None, metavar="METRIC",
                    help="the metric Cui's entropy-performance law is fitted to (e.g. val/acc) [reward_mean]")
    ap.add_argument("--fit-fraction", type=float, default=0.15, metavar="F",
                    help="share of the steps the early entropy-performance fit sees; the rest judge it [0.15]")
    ap.add_argument("--is-cap", type=float, default=3.0, metavar="C",
                    help="cap of the importance-sampling ratio; steps above it are flagged [3.0, TRL's default]")
    ap.add_argument("--allow-suspect-read", action="store_true",
                    help="audit a read that looks wrong instead of refusing it: more than 5%% of the rows dropped "
                         "(earlier outputs of multi-output verl rollouts, unreadable lines), or every group of one "
                         "rollout; the report's verdict says so")
    runner.add_threads_option(ap)
    runner.add_overwrite_option(ap)
    ap.add_argument("--json", action="store_true", help="print report.json on stdout")
    ap.add_argument("--quiet", action="store_true", help="no summary")
    ap.set_defaults(func=_run)
    return ap


# ------------------------------------------------------------------ checks
def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """``"A:B"`` → ``(A, B)`` (inclusive; ``"A:"`` and ``":B"`` leave one end open).

    >>> parse_steps("10:20"), parse_steps("5:"), parse_steps(":100"), parse_steps(None)
    ((10, 20), (5, None), (None, 100), None)
    >>> parse_steps("20:10")
    Traceback (most recent call last):
    ...
    ValueError: steps must be A:B with A <= B, got '20:10'
    """
    if text is None:
        return None
    a, sep, b = str(text).partition(":")
    if not sep or (not a.strip() and not b.strip()):
        raise ValueError(f"steps must look like A:B, A: or :B (integer steps, inclusive), got {text!r}")
    ends = []
    for part in (a.strip(), b.strip()):
        if not part:
            ends.append(None)
            continue
        try:
            v = int(part)
        except ValueError:
            raise ValueError(f"steps must look like A:B with integer steps {checks.range_text(0)}, "
                             f"got {text!r}") from None
        ends.append(checks.integer("steps", v, low=0))
    lo, hi = ends
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"steps must be A:B with A <= B, got {text!r}")
    return lo, hi


def _compare(items: Sequence[str] | None) -> list[tuple[str, dict[str, Any]]]:
    """``["dr_grpo", "asym_grpo:delta=0.5,..."]`` → ``[(name, params), ...]``, each checked
    (messages start with ``compare``, which the runner shows as ``--compare``)."""
    from rlvr_theory import advantages

    out: list[tuple[str, dict[str, Any]]] = []
    for item in items or ():
        name, _, rest = str(item).partition(":")
        pairs = [p for p in rest.split(",") if p.strip()]
        if any("=" not in p for p in pairs):
            raise ValueError(f"compare: {item!r}: parameters must look like NAME:k=v,k=v (e.g. asym_grpo:delta=0.5)")
        try:
            params = runner.parse_params(pairs)
            advantages.get(name, **params)
        except ValueError as err:
            msg = str(err)
            raise ValueError("compare: " + (msg[len("advantage: "):] if msg.startswith("advantage: ") else msg)) from None
        out.append((name, params))
    return out


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The command's arguments as typed (the ``settings`` of report.json's ``"run"``)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "json", "quiet", "overwrite")}


def _check(args: argparse.Namespace) -> dict[str, Any]:
    """Every argument, before any log is read; returns the keyword arguments of the audit."""
    from .audit.report import check_report_out

    out = check_report_out(args.out, overwrite=args.overwrite).resolve()   # first, before any work
    for p in list(args.paths) + list(args.metrics or ()):
        if not Path(p).exists():
            raise ValueError(f"{'PATH' if p in args.paths else 'metrics'}: {str(p)!r} does not exist")
        rp = Path(p).resolve()
        if rp == out or out in rp.parents:
            raise ValueError(f"out: {str(args.out)!r} holds the input {str(p)!r}; the report would replace it: "
                             "choose another directory")
    opts: dict[str, Any] = {
        "group_size": None if args.group_size is None else checks.integer("group_size", args.group_size, low=1),
        "success_threshold": (None if args.success_threshold is None else
                              checks.number("success_threshold", args.success_threshold)),
        "steps": parse_steps(args.steps),
        "taus": tuple(checks.number("tau", t, low=0, high=1, low_open=True, high_open=True)
                      for t in (args.tau or ())),
        "compare": _compare(args.compare),
    }
    params = runner.parse_params(args.param)
    if params and not args.advantage:
        raise ValueError("param: give the advantage they belong to with --advantage NAME")
    if args.advantage:
        from rlvr_theory import advantages

        advantages.get(args.advantage, **params)    # unknown name or parameter: refused here
    opts["advantage"], opts["params"] = args.advantage, params
    if args.reward_column is not None and not str(args.reward_column).strip():
        raise ValueError("reward_column must be a column name, got ''")
    from .audit import metric_logs

    opts["metric_map"] = metric_logs.parse_metric_map(args.metric_map) if args.metric_map else None
    opts["fit_fraction"] = checks.number("fit_fraction", args.fit_fraction, low=0, high=1, low_open=True,
                                         high_open=True)
    opts["is_cap"] = checks.number("is_cap", args.is_cap, low=1)
    if args.performance is not None and not str(args.performance).strip():
        raise ValueError("performance must be a metric name (e.g. reward_mean, val/acc), got ''")
    return opts


# ---------------------------------------------------------------- command
def _summary(doc: dict, out: Path) -> str:
    """A few lines for the terminal: where the report is, and the run's headline numbers."""
    src = doc.get("source") or {}
    o = doc.get("summary") or {}
    G = doc.get("group_size")
    lines = [f"report: {out}/report.md, report.html, report.json"]
    if doc.get("steps"):
        lines.append(f"{src.get('format')} log: {_fmt(o.get('n_steps', len(doc.get('steps') or [])))} steps, "
                     f"{_fmt(o.get('n_groups'))} groups of {G if G is not None else 'unequal sizes'}")
    msrc = (doc.get("trainer_log") or {}).get("source") or {}
    if msrc:
        lines.append(f"{msrc.get('format')} metric log: {_fmt(len((doc.get('trainer_log') or {}).get('steps') or []))} "
                     f"steps, {len(msrc.get('columns') or {})} metrics read")
    if o.get("frac_all_correct") is not None and o.get("frac_all_wrong") is not None:
        lines.append(f"zero-signal groups {_fmt(100 * (o['frac_all_correct'] + o['frac_all_wrong']))}% "
                     f"(all correct {_fmt(100 * o['frac_all_correct'])}%, all wrong {_fmt(100 * o['frac_all_wrong'])}%)")
    if o.get("m_S") is not None:
        ratio = o.get("sign_ratio")
        lines.append(f"m_S {_fmt(o['m_S'])}, m_F {_fmt(o.get('m_F'))}, sign ratio "
                     f"{_fmt(float(ratio) if ratio is not None else None)}")
    t = doc.get("trainer_log") or {}
    e = t.get("entropy") or {}
    if e:
        fit = e.get("fit")
        lines.append(f"entropy {_fmt(e['first'])} → {_fmt(e['last'])} nats"
                     + (f"; Cui fit of {e['performance']}: ceiling −a + b = {_fmt(fit['ceiling'])}" if fit else ""))
    if (t.get("mismatch") or {}).get("flagged_steps"):
        lines.append(f"importance-sampling ratio above its cap at {len(t['mismatch']['flagged_steps'])} step(s)")
    suspect = (doc.get("suspect_read") or {}).get("problems")
    if suspect:
        lines.insert(0, "suspect read, audited anyway (--allow-suspect-read): " + "; ".join(suspect))
    a = doc.get("advantage")
    search = doc.get("advantage_search") or {}
    if a:
        how = " (--advantage)" if a.get("from") == "option" else ""
        lines.append(f"logged advantages reproduced by {a.get('label') or a.get('name')}{how} "
                     f"(max |error| {_fmt(a.get('max_abs_error'))})")
    elif doc.get("masses_from") == "logged":
        c = search.get("closest")
        lines.append("logged advantages: no registry family within tolerance"
                     + (f"; closest {c.get('label')} (max |error| {_fmt(c.get('max_abs_error'))})" if c else
                        "; none comes close"))
    return "\n".join(lines)


def _inputs(args: argparse.Namespace) -> tuple[list[Path], list[str], list[Path]]:
    """``(metric files, rollout paths, alert files)`` of the command's paths.

    Metric logs are those given with ``--metrics`` and those found among ``PATH``
    (:func:`analysis.audit.metric_logs.find_metric_files`); a ``PATH`` that is a metric file
    itself is not a rollout path, and a folder that holds no rollout log (only a metric log) is
    none either.  Neither kind found: refused naming ``PATH``.
    """
    from .audit import metric_logs, readers, trainer_log

    paths = list(args.paths)
    metric_files = metric_logs.find_metric_files(paths + list(args.metrics or ()), arg="PATH")
    found = {Path(f).resolve() for f in metric_files}
    rollout_paths = [p for p in paths if not (Path(p).is_file() and Path(p).resolve() in found)]
    if args.format == "auto" and metric_files:
        kept = []
        for p in rollout_paths:
            try:
                readers.detect_format(p, arg="PATH")
            except ValueError as err:
                if not str(err).startswith("format: cannot tell"):
                    raise
                continue                         # a folder with the metric log only
            kept.append(p)
        rollout_paths = kept
    if not metric_files and not rollout_paths:
        raise ValueError(f"PATH: no rollout log and no metric log in {', '.join(map(repr, paths))}")
    return metric_files, rollout_paths, trainer_log.find_alerts(paths)


def _identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the directory at ``path`` (``None``: none there): the report
    renamed into place is another directory than the one that was there before."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if path.is_dir() else None


def _run(args: argparse.Namespace) -> int:
    """The audit.  Ctrl-C is the runner's (exit 130, one line); here it only learns what was
    not written: the ``KeyboardInterrupt`` is raised again with that text."""
    where = Path(args.out)
    before = _identity(where)
    unprinted = ("; report.json was not printed" if args.json else "" if args.quiet else "; the summary was not printed")
    try:
        opts = _check(args)                 # every argument, --out first; nothing read or written yet
        from rlvr_plumbing.runtime import run_metadata

        from .audit import metric_logs, metrics, readers, trainer_log
        from .audit.report import write_report
        from .report import to_json

        metric_files, rollout_paths, alert_files = _inputs(args)
        metric_log = None if not metric_files else metric_logs.read_metrics(
            metric_files, args.metric_format, metric_map=opts["metric_map"], steps=opts["steps"], arg="metrics")
        alerts = trainer_log.read_alerts(alert_files) if alert_files else []
        rollouts = None if not rollout_paths else readers.read(
            rollout_paths, args.format, group_size=opts["group_size"], reward_column=args.reward_column,
            steps=opts["steps"], skip_bad_lines=args.skip_bad_lines, split=args.split, arg="PATH")
        if rollouts is not None:
            problems = readers.suspect_read(rollouts)
            if problems and not args.allow_suspect_read:
                more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
                raise ValueError(f"PATH: {problems[0]}{more}; the log may be misread (check how it marks its groups, "
                                 "or pass --group-size 1 if groups of one are right); pass --allow-suspect-read to "
                                 "audit the rows as read")
            entropy = None
            if metric_log is not None and "entropy" in metric_log.frame.columns:
                e = metric_log.frame[["step", "entropy"]].dropna()
                entropy = dict(zip(e["step"].tolist(), e["entropy"].tolist())) or None
            doc = metrics.audit(rollouts, advantage=opts["advantage"], params=opts["params"],
                                success_threshold=opts["success_threshold"], compare=opts["compare"],
                                taus=opts["taus"], entropy=entropy, split="val" if args.split == "val" else "train")
            doc["suspect_read"] = {"problems": problems, "allowed": bool(args.allow_suspect_read),
                                   "max_dropped_share": readers.MAX_DROPPED_SHARE}
            if problems:
                doc.setdefault("notes", []).insert(0, "Suspect read, audited anyway (--allow-suspect-read): "
                                                   + "; ".join(problems) + ".")
        else:
            doc = {"source": {"format": None, "paths": []}, "steps": [], "group_size": None, "notes": [
                "No rollout log: the report rests on the trainer's metric log alone (give the rollout dump too for "
                "masses, solve rates and the zero-signal cross-check)."]}
        if metric_log is not None or alerts:
            rsteps = None
            # the trainer's frac_zero_std is of its training batches: compared with training rollouts only
            if doc["steps"] and "frac_equal_rewards" in doc["steps"][0] and args.split != "val":
                import pandas as pd

                rsteps = pd.DataFrame(doc["steps"])[["step", "frac_equal_rewards", "n_groups"]].astype(float)
            doc["trainer_log"] = trainer_log.sections(metric_log, rollout_steps=rsteps, performance=args.performance,
                                                      fit_fraction=opts["fit_fraction"], is_cap=opts["is_cap"],
                                                      alerts=alerts)
        # the run-metadata block of every JSON file of the toolkit (doc["summary"] holds the run's means)
        doc["run"] = run_metadata(_settings(args), threads=args.threads or runner.default_threads())
        out = write_report(doc, None, args.out, overwrite=args.overwrite)
    except KeyboardInterrupt:
        # the report directory is renamed into place whole (rlvr_plumbing.io.atomic_dir), so it is
        # either the new one (another directory than before) or what was there
        now = _identity(where)
        if now is not None and now != before:
            raise KeyboardInterrupt(f"the report in {args.out!r} is complete{unprinted}") from None
        raise KeyboardInterrupt(f"no report written; {args.out!r} "
                                + ("is left as it was" if before is not None else "was not created")) from None
    try:
        if args.json:
            print(to_json(doc))
        elif not args.quiet:
            print(_summary(doc, out))
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"the report in {args.out!r} is complete{unprinted}") from None
    return 0


# --------------------------------------------------------------- entry points
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlvr-audit``; return the exit status (0, 2 on a usage or input error, 130 on Ctrl-C).

    Also in-process: argparse's own exit (usage error, ``--help``) is returned, not raised.
    """
    return runner.run(PROG, build_parser, argv)


main_exit = runner.console(PROG, build_parser)


if __name__ == "__main__":  # pragma: no cover
    main_exit()
