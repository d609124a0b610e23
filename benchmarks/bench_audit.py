"""Benchmark: auditing a large verl rollout dump, ours against the bare engines and pandas.

    python benchmarks/bench_audit.py [--dir DIR] [--steps 1000] [--groups 1024] [--group-size 16]
        [--text-chars 200] [--baseline-steps 100] [--no-baseline] [--no-command] [--repeat 1]
        [--profile] [--delete]

Generates (once, cached in ``--dir``, default ``$TMPDIR/rlvr_bench_audit``) a verl >= 0.9
``rollout_data_dir``: ``{step}.jsonl`` for ``--steps`` steps, each with ``--groups`` groups of
``--group-size`` rollouts (1,000 × 1,024 × 16 = 16.4 M rows by default), every row a JSON
object with ``input`` and ``output`` strings of ``--text-chars`` characters (so that parsing
costs what it costs on a real dump: about 8.5 GB for the full size; check ``df -h`` first),
``gts``, ``score`` (a Bernoulli draw of the group's solve rate), ``step`` and
``uid = "{group}_{rollout}_0"``.

Then, each in its own subprocess (peak RSS ``ru_maxrss`` and CPU seconds per variant; the page
cache is warm for all, the files having just been written or read):

* ``ours`` — :func:`analysis.audit.readers.read` of the whole directory (timed alone: "read";
  a dump this large is held as group counts: the engine aggregates it in one streaming scan),
  then the metrics of ``rlvr-audit`` (:func:`analysis.audit.metrics.audit` with
  ``advantage="grpo"``: every group's advantages, masses, solve rates, pass@k, the per-step
  table);
* ``polars`` — the bare engine: ``polars.scan_ndjson`` of every file projected on ``step``,
  ``uid``, ``score``, the group id from ``uid``, the per-(step, group) mean, size and
  all-correct / all-wrong flags, then per-step means (skipped when polars is not installed);
* ``duckdb`` — the same with DuckDB's ``read_json`` and SQL (skipped when duckdb is not
  installed);
* ``command`` — the whole ``rlvr-audit DIR --out TMP --quiet`` (its own console script,
  peak RSS of that process), and the same steps timed phase by phase in one child (``read``,
  ``suspect_read``, ``metrics.audit`` as the command calls it, ``report.write_report``), each
  with the peak RSS at its end; ``--profile`` adds the cProfile top 15 of each phase;
* ``pandas`` — what a script would do: ``pd.read_json(f, lines=True)`` of every file,
  ``pd.concat``, the group id from ``uid``, ``groupby(["step", "group"])``, then per-step
  means.  On the first ``--baseline-steps`` files only (it holds every text in memory: about
  7 GB for the full size); ``ours`` is timed on the same files too, and the ratio is taken there.

The ratios printed are ours (read alone, and read + metrics) over each bare engine.  The
machine's load average is printed before and after (timings on a shared machine vary:
``--repeat N`` runs every variant N times, interleaved, and keeps the fastest).
``--delete`` removes the generated directory afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    """Peak resident set of this process (``ru_maxrss``, KiB on Linux), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its threads so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _files(folder: str, last: int | None) -> list[str]:
    files = sorted(Path(folder).glob("*.jsonl"), key=lambda p: int(p.stem))
    return [str(p) for p in files if last is None or int(p.stem) <= last]


# ------------------------------------------------------------------ the log
def _write_steps(args: tuple[str, list[int], int, int, int]) -> int:
    import numpy as np

    folder, steps, n_groups, G, chars = args
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz .,;:0123456789", dtype="S1")
    written = 0
    for step in steps:
        rng = np.random.default_rng([7, step])
        pool = [rng.choice(alphabet, chars).tobytes().decode() for _ in range(64)]
        p = rng.beta(0.6, 0.9, n_groups)
        R = rng.random((n_groups, G)) < p[:, None]
        uids = [f"{u:016x}{v:016x}" for u, v in zip(rng.integers(1 << 62, size=n_groups).tolist(),
                                                      rng.integers(1 << 62, size=n_groups).tolist())]
        lines = []
        for b in range(n_groups):
            inp = pool[b % 64]
            u = uids[b]
            for g in range(G):
                lines.append(f'{{"input": "{inp}", "output": "{pool[(b + g) % 64]}", "gts": "{b % 97}", '
                             f'"score": {"1.0" if R[b, g] else "0.0"}, "step": {step}, "uid": "{u}_{g}_0"}}\n')
        tmp = Path(folder) / f".{step}.jsonl.tmp"
        tmp.write_text("".join(lines))
        os.replace(tmp, Path(folder) / f"{step}.jsonl")
        written += len(lines)
    return written


def generate(folder: Path, steps: int, groups: int, G: int, chars: int) -> float:
    """Write the dump unless a complete one of this size is there; returns the seconds spent."""
    from multiprocessing import Pool

    stamp = folder / f".done-{steps}x{groups}x{G}x{chars}"
    if stamp.exists():
        return 0.0
    folder.mkdir(parents=True, exist_ok=True)
    for p in folder.glob("*.jsonl"):
        p.unlink()
    t0 = time.perf_counter()
    chunks = [list(range(1 + i, steps + 1, 2 * 4)) for i in range(2 * 4)]
    with Pool(2) as pool:
        pool.map(_write_steps, [(str(folder), c, groups, G, chars) for c in chunks])
    stamp.write_text("")
    return time.perf_counter() - t0


# ------------------------------------------------------------------ the variants (in subprocesses)
def run_ours(folder: str, last: int | None) -> dict:
    sys.path.insert(0, str(ROOT))
    from analysis.audit import metrics, readers

    base = _peak_mb()
    c0 = _cpu()
    t0 = time.perf_counter()
    r = readers.read(folder, format="verl", steps=None if last is None else (None, last))
    t_read = time.perf_counter() - t0
    cpu_read = _cpu() - c0
    rss_read = _peak_mb()
    doc = metrics.audit(r, advantage="grpo")
    held = "group counts" if r.counts is not None else "rows"
    return {"what": f"read ({held}) + metrics.audit(advantage='grpo')", "rows": r.n_rollouts, "steps": len(doc["steps"]),
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "read_seconds": t_read,
            "read_cpu_seconds": cpu_read, "peak_rss_mb": _peak_mb(), "rss_after_read_mb": rss_read,
            "rss_after_imports_mb": base}


def run_polars(folder: str, last: int | None) -> dict:
    """The bare engine: polars ``scan_ndjson`` (projected) + the per-step group-by."""
    import polars as pl

    base = _peak_mb()
    c0 = _cpu()
    t0 = time.perf_counter()
    lf = pl.scan_ndjson(_files(folder, last), schema={"step": pl.Int64, "uid": pl.String, "score": pl.Float64})
    g = (lf.with_columns(group=pl.col("uid").str.replace(r"_[^_]*_[^_]*$", ""))
         .group_by("step", "group")
         .agg(mean=pl.col("score").mean(), size=pl.len(), all_correct=pl.col("score").min() == 1,
              all_wrong=pl.col("score").max() == 0))
    per_step = (g.group_by("step").agg(pl.col("mean").sum().alias("sum"), pl.col("size").sum().alias("rows"),
                                       pl.col("all_correct").mean(), pl.col("all_wrong").mean())
                .sort("step").collect())
    return {"what": "polars scan_ndjson + group_by", "rows": int(per_step["rows"].sum()), "steps": per_step.height,
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "peak_rss_mb": _peak_mb(),
            "rss_after_imports_mb": base, "checksum": float(per_step["sum"].sum())}


def run_duckdb(folder: str, last: int | None) -> dict:
    """The bare engine: DuckDB ``read_json`` (projected) + the per-step group-by."""
    import duckdb

    base = _peak_mb()
    c0 = _cpu()
    t0 = time.perf_counter()
    con = duckdb.connect()
    per_step = con.sql("""
        with r as (select step, regexp_replace(uid, '_[^_]*_[^_]*$', '') as grp, score
                   from read_json($files, format = 'newline_delimited',
                                  columns = {'step': 'BIGINT', 'uid': 'VARCHAR', 'score': 'DOUBLE'})),
             g as (select step, grp, avg(score) as m, count(*) as size, min(score) = 1 as all_correct,
                          max(score) = 0 as all_wrong from r group by step, grp)
        select step, sum(m) as s, sum(size) as rows, avg(all_correct::int) as ac, avg(all_wrong::int) as aw
        from g group by step order by step""", params={"files": _files(folder, last)}).fetchnumpy()
    return {"what": "duckdb read_json + group by", "rows": int(per_step["rows"].sum()), "steps": len(per_step["step"]),
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "peak_rss_mb": _peak_mb(),
            "rss_after_imports_mb": base, "checksum": float(per_step["s"].sum())}


def run_phases(folder: str, out: str, profile: bool = False) -> dict:
    """What ``rlvr-audit FOLDER --out OUT --quiet`` does, phase by phase (as analysis.audit_cli
    calls them, with its defaults), each timed, with the peak RSS at its end."""
    sys.path.insert(0, str(ROOT))
    import cProfile
    import io
    import pstats

    from analysis.audit import metrics, readers
    from analysis.audit.report import write_report

    phases: dict[str, dict] = {}
    state: dict = {}

    def phase(name, fn):
        prof = cProfile.Profile() if profile else None
        c0 = _cpu()
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        state[name] = fn()
        if prof is not None:
            prof.disable()
        phases[name] = {"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "peak_rss_mb": _peak_mb()}
        if prof is not None:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(15)
            phases[name]["profile_cumulative"] = buf.getvalue()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
            phases[name]["profile_tottime"] = buf.getvalue()

    base = _peak_mb()
    phase("read", lambda: readers.read([folder], "auto", split="train", arg="PATH"))
    phase("suspect_read", lambda: readers.suspect_read(state["read"]))
    phase("metrics.audit", lambda: metrics.audit(state["read"], split="train"))
    phase("write_report", lambda: write_report(state["metrics.audit"], None, out, overwrite=True))
    return {"rows": state["read"].n_rollouts, "phases": phases, "rss_after_imports_mb": base}


def run_pandas(folder: str, last: int | None) -> dict:
    import numpy as np
    import pandas as pd

    base = _peak_mb()
    c0 = _cpu()
    t0 = time.perf_counter()
    files = _files(folder, last)
    df = pd.concat([pd.read_json(p, lines=True) for p in files], ignore_index=True)
    df["group"] = df["uid"].str.rsplit("_", n=2).str[0]
    g = df.groupby(["step", "group"], sort=False)["score"].agg(["mean", "size", "min", "max"])
    g["all_correct"] = g["min"] == 1
    g["all_wrong"] = g["max"] == 0
    per_step = g.groupby(level="step")[["mean", "all_correct", "all_wrong"]].mean()
    return {"what": "pd.read_json(lines=True) + concat + groupby", "rows": len(df), "steps": len(per_step),
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "peak_rss_mb": _peak_mb(),
            "rss_after_imports_mb": base, "checksum": float(np.nansum(per_step["mean"].to_numpy()))}


def _child(variant: str, *args) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); sys.path.insert(0, {str(ROOT)!r}); "
            f"import bench_audit as b; print(json.dumps(b.run_{variant}(*{[str(a) if isinstance(a, Path) else a for a in args]!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    if out.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _command(folder: Path, out: Path) -> dict:
    """``rlvr-audit FOLDER --out OUT --quiet`` as a user runs it; its wall time, CPU seconds and
    peak RSS (``wait4``)."""
    exe = Path(sys.executable).with_name("rlvr-audit")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "analysis.audit_cli"]
    argv += [str(folder), "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rlvr-audit failed (exit {proc.returncode}):\n{err[-3000:]}")
    return {"what": " ".join(Path(a).name if a == str(exe) else a for a in argv), "seconds": wall,
            "cpu_seconds": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024.0}


def _show(name: str, r: dict) -> None:
    extra = (f" (read {r['read_seconds']:.1f} s, cpu {r['read_cpu_seconds']:.1f} s, peak RSS after reading "
             f"{r['rss_after_read_mb']:.0f} MiB)" if "read_seconds" in r else "")
    print(f"{name:<22} {r['rows']:>11,} rows {r['steps']:>5} steps {r['seconds']:>7.1f} s (cpu {r['cpu_seconds']:>6.1f} s)  "
          f"peak RSS {r['peak_rss_mb']:>6.0f} MiB  [{r['what']}]{extra}", flush=True)


def _best(runs: list[dict]) -> dict:
    """The fastest of repeated runs (the least disturbed on a shared machine)."""
    return min(runs, key=lambda r: r["seconds"])


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "rlvr_bench_audit"),
                    help="where the generated dump is cached")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=1024)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--text-chars", type=int, default=200, help="characters of each input and output")
    ap.add_argument("--baseline-steps", type=int, default=100, help="files the pandas baseline reads (0: all)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the pandas baseline")
    ap.add_argument("--no-command", action="store_true", help="skip the whole rlvr-audit command and its phases")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each variant (interleaved); the fastest is kept")
    ap.add_argument("--profile", action="store_true", help="print the cProfile top 15 of each phase of the command")
    ap.add_argument("--delete", action="store_true", help="remove the generated dump at the end")
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    gen = generate(folder, args.steps, args.groups, args.group_size, args.text_chars)
    size = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    rows = args.steps * args.groups * args.group_size
    print(f"verl dump: {args.steps} steps x {args.groups} groups x {args.group_size} rollouts = {rows:,} rows, "
          f"{size / 2**30:.2f} GiB in {folder}" + (f" (generated in {gen:.0f} s)" if gen else " (cached)"))
    print(f"machine: {os.cpu_count()} CPUs; {_load()}", flush=True)
    engines = [e for e in ("polars", "duckdb") if _installed(e)]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="rlvr_bench_report_") as tmp:
        for i in range(max(1, args.repeat)):
            tag = f" #{i + 1}" if args.repeat > 1 else ""
            for name in ["ours"] + engines:
                runs.setdefault(name, []).append(_child(name, folder, None))
                _show(name + tag, runs[name][-1])
            if not args.no_command:
                runs.setdefault("command", []).append(_command(folder, Path(tmp) / f"report{i}"))
                c = runs["command"][-1]
                print(f"{'rlvr-audit' + tag:<22} {c['seconds']:>7.1f} s (cpu {c['cpu_seconds']:.1f} s)  peak RSS "
                      f"{c['peak_rss_mb']:.0f} MiB  [{c['what']}]", flush=True)
        if not args.no_command:
            ph = _child("phases", folder, Path(tmp) / "phases", bool(args.profile))
            print(f"phases of rlvr-audit, in one process ({ph['rows']:,} rows; RSS after imports "
                  f"{ph['rss_after_imports_mb']:.0f} MiB):")
            for name, p in ph["phases"].items():
                print(f"    {name:<14} {p['seconds']:>7.2f} s (cpu {p['cpu_seconds']:>6.1f} s)  peak RSS so far "
                      f"{p['peak_rss_mb']:>6.0f} MiB")
            if args.profile:
                for name, p in ph["phases"].items():
                    print(f"\n---- cProfile of {name} (cumulative)\n{p['profile_cumulative']}"
                          f"---- cProfile of {name} (tottime)\n{p['profile_tottime']}")
    ours = _best(runs["ours"])
    print(f"\nbest of {max(1, args.repeat)}: ours read {ours['read_seconds']:.1f} s, peak RSS after reading "
          f"{ours['rss_after_read_mb']:.0f} MiB; read + metrics {ours['seconds']:.1f} s, {ours['peak_rss_mb']:.0f} MiB")
    for e in engines:
        b = _best(runs[e])
        print(f"ours / bare {e:<7} ({b['seconds']:.1f} s, {b['peak_rss_mb']:.0f} MiB): read time "
              f"x{ours['read_seconds'] / b['seconds']:.2f}, read + metrics x{ours['seconds'] / b['seconds']:.2f}; "
              f"peak RSS after reading x{ours['rss_after_read_mb'] / b['peak_rss_mb']:.2f}")
    if "command" in runs:
        c = _best(runs["command"])
        print(f"rlvr-audit: {c['seconds']:.1f} s, peak RSS {c['peak_rss_mb']:.0f} MiB"
              + "".join(f"; x{c['seconds'] / _best(runs[e])['seconds']:.2f} bare {e}" for e in engines))
    if not args.no_baseline:
        last = None if args.baseline_steps in (0, None) or args.baseline_steps >= args.steps else args.baseline_steps
        small = _child("ours", folder, last) if last is not None else ours
        if last is not None:
            _show(f"ours ({last} steps)", small)
        pd_ = _child("pandas", folder, last)
        _show(f"pandas ({last or args.steps} steps)", pd_)
        print(f"pandas / ours on the same {pd_['rows']:,} rows: time x{pd_['seconds'] / small['seconds']:.1f}, "
              f"peak RSS x{pd_['peak_rss_mb'] / small['peak_rss_mb']:.1f}")
    print(f"machine at the end: {_load()}")
    if args.delete:
        import shutil
        shutil.rmtree(folder)
        print(f"deleted {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
