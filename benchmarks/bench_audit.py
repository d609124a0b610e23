"""Benchmark: auditing a large verl rollout dump, ours against a plain pandas read-then-groupby.

    python benchmarks/bench_audit.py [--dir DIR] [--steps 1000] [--groups 1024] [--group-size 16]
        [--text-chars 200] [--baseline-steps 100] [--no-baseline] [--delete]

Generates (once, cached in ``--dir``, default ``$TMPDIR/rlvr_bench_audit``) a verl >= 0.9
``rollout_data_dir``: ``{step}.jsonl`` for ``--steps`` steps, each with ``--groups`` groups of
``--group-size`` rollouts (1,000 × 1,024 × 16 = 16.4 M rows by default), every row a JSON
object with ``input`` and ``output`` strings of ``--text-chars`` characters (so that parsing
costs what it costs on a real dump: about 8.5 GB for the full size; check ``df -h`` first),
``gts``, ``score`` (a Bernoulli draw of the group's solve rate), ``step`` and
``uid = "{group}_{rollout}_0"``.

Then, each in its own subprocess (peak RSS ``ru_maxrss`` per variant; the page cache is
warm for both, the files having just been written or read):

* ``ours`` — :func:`analysis.audit.readers.read` of the whole directory, then the metrics
  of ``rlvr-audit`` (:func:`analysis.audit.metrics.audit` with ``advantage="grpo"``: every
  group's advantages, masses, solve rates, pass@k, the per-step table);
* ``pandas`` — what a script would do: ``pd.read_json(f, lines=True)`` of every file,
  ``pd.concat``, the group id from ``uid``, ``groupby(["step", "group"])`` for each
  group's mean, size and all-correct / all-wrong flags, then per-step means.  On the first
  ``--baseline-steps`` files only (it holds every text in memory: about 7 GB for the full
  size); ``ours`` is timed on the same files too, and the ratios are taken there.

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
    from analysis.audit import readers

    try:
        from analysis.audit import metrics
    except ImportError:  # pragma: no cover - before the metrics module existed
        metrics = None
    base = _peak_mb()
    t0 = time.perf_counter()
    r = readers.read(folder, format="verl", steps=None if last is None else (None, last))
    t_read = time.perf_counter() - t0
    rss_read = _peak_mb()
    if metrics is not None and hasattr(metrics, "audit"):
        doc = metrics.audit(r, advantage="grpo")
        n_steps = len(doc["steps"])
        what = "read + metrics.audit(advantage='grpo')"
    else:  # the group pass alone
        from rlvr_theory import groups

        f = r.frame
        A = groups.advantages("grpo", f["reward"].to_numpy(), f["step"].to_numpy() * (1 << 32) + f["group"].to_numpy())
        n_steps = int(f["step"].nunique()) + 0 * len(A)
        what = "read + rlvr_theory.groups.advantages"
    return {"what": what, "rows": len(r.frame), "steps": n_steps, "seconds": time.perf_counter() - t0,
            "read_seconds": t_read, "peak_rss_mb": _peak_mb(), "rss_after_read_mb": rss_read,
            "rss_after_imports_mb": base}


def run_pandas(folder: str, last: int | None) -> dict:
    import numpy as np
    import pandas as pd

    base = _peak_mb()
    t0 = time.perf_counter()
    files = sorted(Path(folder).glob("*.jsonl"), key=lambda p: int(p.stem))
    if last is not None:
        files = [p for p in files if int(p.stem) <= last]
    df = pd.concat([pd.read_json(p, lines=True) for p in files], ignore_index=True)
    df["group"] = df["uid"].str.rsplit("_", n=2).str[0]
    g = df.groupby(["step", "group"], sort=False)["score"].agg(["mean", "size", "min", "max"])
    g["all_correct"] = g["min"] == 1
    g["all_wrong"] = g["max"] == 0
    per_step = g.groupby(level="step")[["mean", "all_correct", "all_wrong"]].mean()
    return {"what": "pd.read_json(lines=True) + concat + groupby", "rows": len(df), "steps": len(per_step),
            "seconds": time.perf_counter() - t0, "peak_rss_mb": _peak_mb(), "rss_after_imports_mb": base,
            "checksum": float(np.nansum(per_step["mean"].to_numpy()))}


def _child(variant: str, folder: Path, last: int | None) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); sys.path.insert(0, {str(ROOT)!r}); "
            f"import bench_audit as b; print(json.dumps(b.run_{variant}({str(folder)!r}, {last!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    if out.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _show(name: str, r: dict) -> None:
    extra = (f" (read {r['read_seconds']:.1f} s, peak RSS after reading {r['rss_after_read_mb']:.0f} MiB)"
             if "read_seconds" in r else "")
    print(f"{name:<20} {r['rows']:>11,} rows {r['steps']:>5} steps {r['seconds']:>7.1f} s  "
          f"peak RSS {r['peak_rss_mb']:>6.0f} MiB  [{r['what']}]{extra}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "rlvr_bench_audit"),
                    help="where the generated dump is cached")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=1024)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--text-chars", type=int, default=200, help="characters of each input and output")
    ap.add_argument("--baseline-steps", type=int, default=100, help="files the pandas baseline reads (0: all)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--delete", action="store_true", help="remove the generated dump at the end")
    args = ap.parse_args(argv)
    folder = Path(args.dir)
    gen = generate(folder, args.steps, args.groups, args.group_size, args.text_chars)
    size = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    rows = args.steps * args.groups * args.group_size
    print(f"verl dump: {args.steps} steps x {args.groups} groups x {args.group_size} rollouts = {rows:,} rows, "
          f"{size / 2**30:.2f} GiB in {folder}" + (f" (generated in {gen:.0f} s)" if gen else " (cached)"))
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    full = _child("ours", folder, None)
    _show("ours (all steps)", full)
    if not args.no_baseline:
        last = None if args.baseline_steps in (0, None) or args.baseline_steps >= args.steps else args.baseline_steps
        ours = _child("ours", folder, last) if last is not None else full
        if last is not None:
            _show(f"ours ({last} steps)", ours)
        pd_ = _child("pandas", folder, last)
        _show(f"pandas ({last or args.steps} steps)", pd_)
        print(f"pandas / ours on the same {pd_['rows']:,} rows: time x{pd_['seconds'] / ours['seconds']:.1f}, "
              f"peak RSS x{pd_['peak_rss_mb'] / ours['peak_rss_mb']:.1f}")
    if args.delete:
        import shutil
        shutil.rmtree(folder)
        print(f"deleted {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
