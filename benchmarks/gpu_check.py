"""GPU check (``make gpu-check``): the project's GPU paths on one NVIDIA GPU, each step timed
against the CPU figure recorded in docs/performance.md.

    python benchmarks/gpu_check.py [--out DIR] [--workdir DIR] [--only STEP ...] [--dry-run]

Steps, in this order, each a subprocess with its own timeout (:data:`TIMEOUTS_S`, 450 s in all,
so that the whole check fits in 8 minutes on an H100; a step that fails or times out does not
stop the others; the quick ones run first, the 7B pair last):

``gpu-tests`` (30 s)
    ``python -m pytest -q -m gpu -p no:cacheprovider FILES``, FILES the test files under
    ``tests/`` that contain ``mark.gpu`` (found at run time): passed / failed / skipped counts
    and the exit code.
``fgrpo-fig4`` (35 s)
    ``benchmarks/bench_sim_categorical.py --device cuda --threads 2 --skip-reference``: the full
    categorical sweep (all configurations in one batch on CUDA); the engine child's wall time
    (imports and CSVs included, as on the CPU) against 55.4 s (2 threads).
``spectra-head`` (35 s)
    ``benchmarks/bench_spectra.py --device cuda --ref64-rows 5000 --no-ref``: the time of the
    full spectrum of a 152,064 × 3,584 float32 head (device-resident) against 22.0 s; the
    float32 CPU references are skipped (minutes of LAPACK), the float64 accuracy check is kept
    on 5,000 rows.
``grpo-steps`` (30 s)
    ``benchmarks/bench_grpo.py --device cuda``: GRPO trainer steps/s (preset ``tiny-cpu``,
    B = 16 × G = 8, 8 new tokens: the CPU benchmark's defaults), against 6.8 steps/s.
``diff-7b`` (265 s)
    ``benchmarks/bench_diff.py --shape 7b --device cuda --no-baseline``: the checkpoint diff
    (head full spectrum + top-k spectra of every 2-D weight) of a Qwen2.5-7B-shaped bf16 pair
    synthesized in the work folder, against 430.4 s.  The step's wall time INCLUDES BUILDING
    the pair (``results.build_s``: 2 × 7.6 G weights from a seeded CPU generator, ≈ 30 GB
    written) and the read floor (``results.read_s``); the figure compared with the CPU's is
    the diff's own time (``results.ours_s``).  bench_diff also records its numbers in
    ``benchmarks/results/bench_diff_7b_<device>.json`` (kept in ``results.record``).
``diff-7b-head`` (55 s)
    the same with ``--layers head`` (the pair reused), against 90.6 s.

For each step it writes ``<out>/<step>.json`` (command, wall seconds, return code, status,
the numbers the benchmark printed or wrote — its JSON where it writes one, else the parsed
lines —, the stdout and stderr tails, the CPU figure with its docs/performance.md row, and
``ratio_cpu_over_gpu``: CPU seconds over GPU seconds, or GPU steps/s over CPU steps/s, > 1 when
the GPU is faster), as each step ends, then ``<out>/summary.json``; each file carries the
environment (GPU name, driver, CUDA, torch / numpy / transformers / Python versions, UTC time,
git commit).  ``--out`` defaults to ``benchmarks/results/gpu``; files are written atomically (a
temporary name in the same folder, then ``os.replace``).  ``--workdir`` keeps the 7B pair there
(and reuses it: ``build_s`` is then the check of the cache); by default it is built in a new
temporary folder under ``$TMPDIR`` (or /tmp) and removed at the end.  Prints a table (step,
seconds, measured figure, CPU figure, ratio, status); exit status 1 if any step failed or
timed out.

``--dry-run``: tiny shapes on the CPU (CUDA hidden from the children, so that the GPU tests
are collected and skipped; one thread per child, two steps side by side), into a new temporary
folder unless ``--out`` is given.  The fast test suite runs it so that this script cannot rot;
its ratios mean nothing.  Without ``--dry-run`` and without CUDA the script refuses in one line
(exit 2).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE_DOC = "docs/performance.md"


@dataclasses.dataclass(frozen=True)
class CpuFigure:
    """A CPU figure of docs/performance.md: ``text`` (``"430.4 s"``, ``"6.8 steps/s"``) as it
    appears in the "figures" cell of the row whose first cell is ``row``, whose command names
    ``script`` (tests/benchmarks/test_gpu_check.py checks both, so the two cannot drift)."""

    row: str
    script: str
    text: str

    @property
    def value(self) -> float:
        return float(self.text.split()[0])

    @property
    def unit(self) -> str:
        return self.text.split(maxsplit=1)[1]


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of the check: its command, timeout, CPU figure, and the parser that turns its
    stdout (and the JSON file it wrote) into ``(results, measured value or None)``."""

    name: str
    what: str
    argv: tuple[str, ...]
    timeout_s: float
    cpu: CpuFigure | None
    parse: Callable[[str, Path | None], tuple[dict[str, Any], float | None]]
    json_out: Path | None = None   # the JSON file the benchmark writes, if any
    after: str | None = None       # a step that must finish first (dry run: the same work folder)
    skip: str | None = None        # why the step is not run: status "skipped" (no gpu test to run)
    cannot: str | None = None      # why the step cannot run here: status "failed" (no disk for the pair)


DIFF_ROW = "checkpoint diff, 7B pair (bf16, 2 × 15.2 GB)"
CPU_FIGURES: tuple[tuple[str, CpuFigure], ...] = (
    ("diff-7b", CpuFigure(DIFF_ROW, "bench_diff.py", "430.4 s")),
    ("diff-7b-head", CpuFigure(DIFF_ROW, "bench_diff.py", "90.6 s")),
    ("fgrpo-fig4", CpuFigure("categorical sweep `fgrpo-fig4` (17 N × 2 γ × 4 seeds × 1,000 steps × 128,000 actions)",
                             "bench_sim_categorical.py", "55.4 s")),
    ("spectra-head", CpuFigure("spectrum of a 152,064 × 3,584 head", "bench_spectra.py", "22.0 s")),
    ("grpo-steps", CpuFigure("GRPO trainer rollouts and steps", "bench_grpo.py", "6.8 steps/s")),
)
# Seconds per step on the GPU, in running order; they sum to 450 s (the 8-minute check less the
# environment probe and removing the pair).  diff-7b has the lion's share: it BUILDS the pair
# first (2 × 7.6 G bf16 weights from a seeded CPU generator, written to disk: minutes), then
# reads it (the floor) and diffs it.
TIMEOUTS_S: tuple[tuple[str, float], ...] = (
    ("gpu-tests", 30.0), ("fgrpo-fig4", 35.0), ("spectra-head", 35.0), ("grpo-steps", 30.0),
    ("diff-7b", 265.0), ("diff-7b-head", 55.0))
PAIR_BYTES = 2 * 2 * 7_615_616_512  # two bf16 checkpoints of the 7B shape
DRY_RUN_TIMEOUT_S = 150.0
STEP_NAMES = tuple(name for name, _ in TIMEOUTS_S)


# ------------------------------------------------------------------ parsers of the outputs
def _num(pattern: str, text: str, group: int = 1) -> float | None:
    m = re.search(pattern, text, flags=re.M)
    return float(m.group(group)) if m else None


def parse_pytest(stdout: str, _: Path | None) -> tuple[dict[str, Any], float | None]:
    """Counts of pytest's last summary line (``3 passed, 1 failed, 12 skipped, 281 deselected``)."""
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected", "xfailed", "xpassed")}
    line = next((ln for ln in reversed(stdout.splitlines()) if re.search(r"\d+ (passed|failed|skipped|deselected|"
                                                                         r"errors?|xfailed|xpassed)", ln)), "")
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)", line):
        counts["errors" if word.startswith("error") else word] = int(n)
    return {"counts": counts, "summary_line": line.strip("= ")}, None


def parse_diff(stdout: str, _: Path | None) -> tuple[dict[str, Any], float | None]:
    """bench_diff.py: the diff's own time (the ``ours`` row), the read floor, the time to build
    (or reuse) the pair, the head metrics, and the record it wrote (``recorded: FILE``)."""
    res: dict[str, Any] = {
        "ours_s": _num(r"^ours\s+([\d.]+)", stdout), "read_s": _num(r"^read\s+([\d.]+)", stdout),
        "build_s": _num(r"built or reused in ([\d.]+) s", stdout),
        "ours_peak_rss_mib": _num(r"^ours\s+[\d.]+\s+([\d.]+)", stdout),
        "head_s1_s2": _num(r"head s1/s2 = ([\d.eE+-]+)", stdout), "head_rank1": _num(r"r1 = ([\d.eE+-]+)", stdout)}
    rec = re.search(r"^recorded: (.+)$", stdout, flags=re.M)
    if rec and Path(rec.group(1)).is_file():
        res["record_file"] = rec.group(1)
        res["record"] = json.loads(Path(rec.group(1)).read_text())
    return res, res["ours_s"]


def parse_categorical(stdout: str, _: Path | None) -> tuple[dict[str, Any], float | None]:
    """bench_sim_categorical.py: the engine child's wall time (imports, kernels, CSVs included),
    ``simulate``'s own time, CPU seconds and peak RSS of the first engine run."""
    m = re.search(r"--threads (\d+)\S*: wall ([\d.]+) s \(simulate ([\d.]+) s\), CPU ([\d.]+) s, "
                  r"peak RSS ([\d.]+) GB", stdout)
    if not m:
        return {}, None
    res = {"threads": int(m.group(1)), "wall_s": float(m.group(2)), "simulate_s": float(m.group(3)),
           "cpu_s": float(m.group(4)), "peak_rss_gb": float(m.group(5)),
           "sampler": (re.search(r"sampler (\w+)", stdout) or [None, None])[1],
           "extrapolated_1000_steps_s": _num(r"-> ([\d.]+) s for 1,000 steps", stdout)}
    return res, res["wall_s"]


def parse_spectra(stdout: str, _: Path | None) -> tuple[dict[str, Any], float | None]:
    """bench_spectra.py: the time of ``spectrum(W)`` (device-resident on CUDA), with one vector,
    from host memory (CUDA), the method, and the accuracy line."""
    m = re.search(r"ours  spectrum\(W\) \[(\w+)\]:\s+([\d.]+) s", stdout)
    res = {"method": m.group(1) if m else None, "spectrum_s": float(m.group(2)) if m else None,
           "spectrum_one_vector_s": _num(r"spectrum\(W, n_vectors=1\):\s+([\d.]+) s", stdout),
           "spectrum_from_host_s": _num(r"from host memory \(streamed to the GPU\):\s+([\d.]+) s", stdout),
           "generated_s": _num(r"generated in ([\d.]+) s", stdout),
           "accuracy_max_abs_over_s1": _num(r"max\|Δσ\|/σ_1 = ([\d.eE+-]+)", stdout),
           "target_met": "-> met" in stdout}
    return res, res["spectrum_s"]


def parse_grpo(stdout: str, json_out: Path | None) -> tuple[dict[str, Any], float | None]:
    """bench_grpo.py: its JSON (``training.steps_per_s``: median over the steps after the first)."""
    if json_out is None or not json_out.is_file():
        return {}, None
    res = json.loads(json_out.read_text())
    return res, res.get("training", {}).get("steps_per_s")


# ------------------------------------------------------------------ the steps
def gpu_test_files(root: Path = ROOT) -> list[str]:
    """The test files under ``tests/`` that contain ``mark.gpu``, relative to ``root``, sorted."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                  if "mark.gpu" in p.read_text(encoding="utf-8"))


def steps(dry_run: bool, workdir: Path, scratch: Path) -> tuple[Step, ...]:
    """The steps of the check in running order (the quick ones first, the 7B pair last): the
    real shapes on CUDA, or (``dry_run``) tiny ones on the CPU."""
    py = sys.executable
    cpu = dict(CPU_FIGURES)
    tmo = {k: (DRY_RUN_TIMEOUT_S if dry_run else v) for k, v in TIMEOUTS_S}
    dev = "cpu" if dry_run else "cuda"
    tests = gpu_test_files()
    sweep = ("--threads", "1", "--steps", "1", "--preset", "fgrpo-fig4-small") if dry_run else ("--threads", "2")
    head = ("--rows", "2000", "--cols", "64", "--ref64-rows", "500") if dry_run else ("--ref64-rows", "5000")
    grpo_out = scratch / "bench_grpo.json"
    grpo = ("--steps", "2", "--repeats", "1", "--batch-size", "2", "--group-size", "2", "--max-new-tokens", "2",
            "--threads", "1") if dry_run else ()
    diff = (py, "benchmarks/bench_diff.py", "--shape", "tiny" if dry_run else "7b", "--device", dev,
            "--no-baseline", "--workdir", str(workdir))
    no_room = None if dry_run else _no_room_for_the_pair(workdir)
    return (
        Step("gpu-tests", "the gpu-marked tests",
             (py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *tests),
             tmo["gpu-tests"], None, parse_pytest, skip=None if tests else "no test file under tests/ has mark.gpu"),
        Step("fgrpo-fig4", "categorical sweep fgrpo-fig4",
             (py, "benchmarks/bench_sim_categorical.py", "--device", dev, *sweep, "--skip-reference"),
             tmo["fgrpo-fig4"], cpu["fgrpo-fig4"], parse_categorical),
        Step("spectra-head", "spectrum of a 152,064 x 3,584 head",
             (py, "benchmarks/bench_spectra.py", "--device", dev, *head, "--no-ref"),
             tmo["spectra-head"], cpu["spectra-head"], parse_spectra),
        Step("grpo-steps", "GRPO trainer steps/s",
             (py, "benchmarks/bench_grpo.py", "--device", dev, *grpo, "--out", str(grpo_out)),
             tmo["grpo-steps"], cpu["grpo-steps"], parse_grpo, json_out=grpo_out),
        Step("diff-7b", "checkpoint diff, 7B bf16 pair (building it included)", diff, tmo["diff-7b"],
             cpu["diff-7b"], parse_diff, cannot=no_room),
        Step("diff-7b-head", "checkpoint diff, 7B pair, --layers head", (*diff, "--layers", "head"),
             tmo["diff-7b-head"], cpu["diff-7b-head"], parse_diff, after="diff-7b", cannot=no_room),
    )


def _no_room_for_the_pair(workdir: Path) -> str | None:
    """Why the 7B pair cannot be built in ``workdir`` (too little free disk), or None."""
    if (workdir / "7b.done").exists():
        return None
    where = next(p for p in (workdir, *workdir.parents) if p.exists())
    free = shutil.disk_usage(where).free
    if free < PAIR_BYTES * 1.05:
        return (f"{free / 2**30:.1f} GiB free under {where}, the 7B pair needs {PAIR_BYTES / 2**30:.1f} GiB: "
                "give --workdir on a larger disk (or TMPDIR)")
    return None


# ------------------------------------------------------------------ running and recording
def run_command(argv: Sequence[str], timeout_s: float, env: dict[str, str],
                running: set[int]) -> tuple[int | None, str, str, float]:
    """Run ``argv`` in ``ROOT`` in its own process group (its id in ``running`` meanwhile); on
    timeout or interruption kill the group (the benchmarks spawn children of their own).
    Returns (exit code or None on timeout, stdout, stderr, wall seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(list(argv), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    running.add(p.pid)
    try:
        out, err = p.communicate(timeout=timeout_s)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        out, err = p.communicate()
        rc = None
    except BaseException:
        _kill_group(p.pid)
        p.wait()
        raise
    finally:
        running.discard(p.pid)
    return rc, out, err, time.perf_counter() - t0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def ratio(cpu: CpuFigure | None, measured: float | None) -> float | None:
    """CPU / GPU: CPU seconds over measured seconds, or measured rate over the CPU rate."""
    if cpu is None or not measured:
        return None
    return measured / cpu.value if cpu.unit.endswith("/s") else cpu.value / measured


def run_step(step: Step, env: dict[str, str], running: set[int]) -> dict[str, Any]:
    """Run one step and return its record (the environment is added by the caller)."""
    rc, out, err, wall, results, measured = None, "", "", 0.0, {}, None
    if step.skip or step.cannot:
        status, results = ("skipped", {"reason": step.skip}) if step.skip else ("failed", {"error": step.cannot})
    else:
        rc, out, err, wall = run_command(step.argv, step.timeout_s, env, running)
        try:
            results, measured = step.parse(out, step.json_out)
        except (OSError, ValueError, KeyError) as e:
            results, measured = {"parse_error": f"{type(e).__name__}: {e}"}, None
        if rc is None:
            status = "timeout"
        elif rc != 0:
            status = "failed"
        elif step.cpu is not None and measured is None:
            status, results["parse_error"] = "failed", "the benchmark's figure was not found in its output"
        else:
            status = "passed"
    cpu = None if step.cpu is None else {"value": step.cpu.value, "unit": step.cpu.unit, "text": step.cpu.text,
                                         "doc": PERFORMANCE_DOC, "doc_row": step.cpu.row}
    return {"step": step.name, "what": step.what, "command": " ".join(step.argv), "timeout_s": step.timeout_s,
            "wall_s": round(wall, 3), "returncode": rc, "status": status, "results": results,
            "measured": None if measured is None or step.cpu is None else {"value": measured, "unit": step.cpu.unit},
            "cpu_figure": cpu, "ratio_cpu_over_gpu": ratio(step.cpu, measured),
            "stdout_tail": out[-4000:], "stderr_tail": err[-4000:]}


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and ±inf floats (a benchmark's own JSON may hold them) replaced by None."""
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_json_atomic(path: Path, obj: Any) -> None:
    """``obj`` as strict JSON to ``path``: written to a temporary name in the same folder, then
    renamed (``os.replace``), so that no reader sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_finite(obj), f, indent=1, allow_nan=False, default=str)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _driver_version() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None


def environment(dry_run: bool) -> dict[str, Any]:
    """Device name, driver, CUDA, library and Python versions, UTC time and git commit.  The dry
    run does not import torch (its children run on the CPU): device ``cpu``, no CUDA version."""
    if dry_run:
        device, cuda = f"cpu ({platform.machine()}, {os.cpu_count()} cores; dry run)", None
    else:
        import torch

        device, cuda = torch.cuda.get_device_name(0), torch.version.cuda
    return {"device_name": device, "driver_version": _driver_version(), "cuda_version": cuda,
            "torch": _version("torch"), "numpy": _version("numpy"), "transformers": _version("transformers"),
            "python": platform.python_version(),
            "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_commit": _git_commit(), "dry_run": dry_run}


def _fmt(x: float | None, unit: str = "") -> str:
    return "—" if x is None else f"{x:.3g}{unit}" if abs(x) < 10 else f"{x:.1f}{unit}"


def table(records: Sequence[dict[str, Any]]) -> str:
    """The closing table: step, seconds, measured figure, CPU figure, ratio, status."""
    lines = [f"{'step':<14}{'seconds':>9}  {'measured':<14}{'CPU figure':<14}{'CPU/GPU':>8}  status"]
    for r in records:
        if r["step"] == "gpu-tests":
            c = r["results"].get("counts", {})
            meas = f"{c.get('passed', 0)}p {c.get('failed', 0) + c.get('errors', 0)}f {c.get('skipped', 0)}s"
        else:
            m = r["measured"]
            meas = "—" if m is None else f"{_fmt(m['value'])} {m['unit']}"
        cpu = "—" if r["cpu_figure"] is None else r["cpu_figure"]["text"]
        rat = "—" if r["ratio_cpu_over_gpu"] is None else f"{r['ratio_cpu_over_gpu']:.2f}x"
        lines.append(f"{r['step']:<14}{r['wall_s']:>9.1f}  {meas:<14}{cpu:<14}{rat:>8}  {r['status']}")
    lines.append("(gpu-tests: tests passed p, failed or in error f, skipped s; CPU/GPU > 1: the GPU is faster)")
    return "\n".join(lines)


def _schedule(selected: Sequence[Step], jobs: int, env: dict[str, str],
              done: Callable[[dict[str, Any]], None]) -> dict[str, dict[str, Any]]:
    """Run the steps, ``jobs`` chains at a time (a step runs after its ``after`` step when both
    are selected; longest chains first).  ``jobs == 1`` runs in this thread, in order.  On an
    interruption every running process group is killed."""
    names = {s.name for s in selected}
    chains: list[list[Step]] = []
    for s in selected:
        chain = next((c for c in chains if s.after in names and c[-1].name == s.after), None)
        if chain is None:
            chains.append([s])
        else:
            chain.append(s)
    records: dict[str, dict[str, Any]] = {}
    running: set[int] = set()

    def run_chain(chain: list[Step]) -> None:
        for s in chain:
            records[s.name] = run_step(s, env, running)
            done(records[s.name])

    if jobs == 1:
        for c in chains:
            run_chain(c)
        return records
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        for f in [pool.submit(run_chain, c) for c in sorted(chains, key=len, reverse=True)]:
            f.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for pid in list(running):
            _kill_group(pid)
        raise
    pool.shutdown()
    return records


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder of <step>.json and summary.json [benchmarks/results/gpu; "
                                  "--dry-run: a new temporary folder]")
    ap.add_argument("--workdir", help="folder of the synthesized 7B pair (kept, and reused if built) "
                                      "[a new temporary folder under $TMPDIR, removed at the end]")
    ap.add_argument("--only", nargs="+", choices=STEP_NAMES, metavar="STEP",
                    help=f"run only these steps ({', '.join(STEP_NAMES)})")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (the fast suite runs this)")
    args = ap.parse_args(argv)
    try:
        return _check(args)
    except KeyboardInterrupt:
        print("gpu_check: interrupted (the running step's processes were killed)", file=sys.stderr)
        return 130


def _check(args: argparse.Namespace) -> int:
    """The check of :func:`main`'s parsed arguments; returns the exit status."""
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on a machine with an "
                  "NVIDIA GPU, or use --dry-run", file=sys.stderr)
            return 2
    out = Path(args.out) if args.out else (Path(tempfile.mkdtemp(prefix="rlvr_gpu_check_")) if args.dry_run
                                           else ROOT / "benchmarks" / "results" / "gpu")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"gpu_check: cannot write results to {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    env_info = environment(args.dry_run)
    scratch = Path(tempfile.mkdtemp(prefix="rlvr_gpu_check_scratch_"))
    workdir = Path(args.workdir).resolve() if args.workdir else scratch / "pair"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    if args.dry_run:  # the CPU only, one thread per child (two steps run side by side)
        env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    selected = [s for s in steps(args.dry_run, workdir, scratch) if not args.only or s.name in args.only]
    print(f"gpu check{' (dry run: tiny shapes on the CPU; ratios mean nothing)' if args.dry_run else ''}: "
          f"{env_info['device_name']}, driver {env_info['driver_version']}, CUDA {env_info['cuda_version']}, "
          f"torch {env_info['torch']}; {len(selected)} steps, timeout budget "
          f"{sum(s.timeout_s for s in selected):.0f} s; results in {out}", flush=True)
    t0 = time.perf_counter()

    def done(rec: dict[str, Any]) -> None:
        rec["dry_run"], rec["environment"] = args.dry_run, env_info
        write_json_atomic(out / f"{rec['step']}.json", rec)
        print(f"  {rec['step']}: {rec['status']} in {rec['wall_s']:.1f} s", flush=True)

    try:
        records = _schedule(selected, 2 if args.dry_run else 1, env, done)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the 7B pair (~30 GB) unless --workdir
    ordered = [records[s.name] for s in selected]
    failed = [r["step"] for r in ordered if r["status"] not in ("passed", "skipped")]
    summary = {"environment": env_info, "total_wall_s": round(time.perf_counter() - t0, 3),
               "timeout_budget_s": sum(s.timeout_s for s in selected), "failed": failed,
               "ratio_meaning": "CPU seconds / GPU seconds (grpo-steps: GPU steps/s / CPU steps/s); > 1: GPU faster",
               "steps": [{k: r[k] for k in ("step", "status", "returncode", "wall_s", "measured", "cpu_figure",
                                            "ratio_cpu_over_gpu", "command")} for r in ordered]}
    write_json_atomic(out / "summary.json", summary)
    print("\n" + table(ordered))
    for r in ordered:
        res = r["results"]
        if res.get("build_s") is not None:
            print(f"  {r['step']}: its {r['wall_s']:.1f} s include building (or reusing) the pair, "
                  f"{_fmt(res['build_s'])} s, and reading it, {_fmt(res.get('read_s'))} s; the measured figure is the diff "
                  "alone")
        if r["status"] == "timeout":
            print(f"  {r['step']}: killed after its {r['timeout_s']:.0f} s")
        elif r["status"] == "failed":
            last = (r["stderr_tail"].strip().splitlines() or [""])[-1]
            why = res.get("error") or res.get("parse_error") or f"exit {r['returncode']}" + (f": {last}" if last else "")
            print(f"  {r['step']}: {why}")
    print(f"\ntotal {summary['total_wall_s']:.1f} s; wrote {len(ordered)} step files and summary.json to {out}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
