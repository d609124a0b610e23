"""``benchmarks/gpu_check.py`` (``make gpu-check``): its dry run on the CPU writes every step's
record, its CPU figures are those of docs/performance.md, and without CUDA the real run is
refused with one line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
ENV_FIELDS = {"device_name", "driver_version", "cuda_version", "torch", "numpy", "transformers", "python",
              "timestamp_utc", "git_commit"}
STEP_FIELDS = {"step", "command", "wall_s", "returncode", "status", "results", "measured", "cpu_figure",
               "ratio_cpu_over_gpu", "stdout_tail", "environment"}


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop("gpu_check", None)
    return mod


gc = _load_script()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One dry run (tiny shapes on the CPU) into a temporary folder: (process, folder)."""
    out = tmp_path_factory.mktemp("gpu_check")
    p = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    return p, out


def test_dry_run_writes_the_record_of_every_step(dry_run):
    p, out = dry_run
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for name in gc.STEP_NAMES:
        rec = json.loads((out / f"{name}.json").read_text())
        assert STEP_FIELDS <= set(rec), (name, STEP_FIELDS - set(rec))
        assert ENV_FIELDS <= set(rec["environment"]), name
        assert rec["step"] == name and rec["status"] == "passed" and rec["returncode"] == 0, rec
        assert rec["wall_s"] > 0 and rec["environment"]["dry_run"] is True
        if name == "gpu-tests":  # CUDA hidden from the dry run's children: collected and skipped
            counts = rec["results"]["counts"]
            assert counts["skipped"] >= 1 and counts["failed"] == counts["errors"] == 0, counts
            assert all(f in rec["command"] for f in gc.gpu_test_files())
        else:
            fig = dict(gc.CPU_FIGURES)[name]
            assert rec["cpu_figure"]["value"] == fig.value and rec["cpu_figure"]["doc_row"] == fig.row
            # parsed from the benchmark's output; a tiny shape may time below the printed precision
            value = rec["measured"]["value"]
            assert value is not None and value >= 0, rec["measured"]
            assert (rec["ratio_cpu_over_gpu"] is None) == (value == 0) and (value == 0 or rec["ratio_cpu_over_gpu"] > 0)
    summary = json.loads((out / "summary.json").read_text())
    assert ENV_FIELDS <= set(summary["environment"]) and summary["failed"] == []
    assert [s["step"] for s in summary["steps"]] == list(gc.STEP_NAMES)
    assert not list(out.glob(".*.tmp")), "a temporary file was left behind"


def test_dry_run_prints_a_table_with_every_step(dry_run):
    p, _ = dry_run
    lines = p.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("step") and "CPU figure" in ln)
    rows = {ln.split()[0]: ln for ln in lines[head + 1:head + 1 + len(gc.STEP_NAMES)]}
    assert set(rows) == set(gc.STEP_NAMES), lines[head:]
    assert all(ln.rstrip().endswith("passed") for ln in rows.values())
    assert "430.4 s" in rows["diff-7b"] and "6.8 steps/s" in rows["grpo-steps"]


def _performance_rows() -> dict[str, list[str]]:
    """The rows of the benchmark table of docs/performance.md: first cell → cells."""
    rows = {}
    for ln in (ROOT / gc.PERFORMANCE_DOC).read_text(encoding="utf-8").splitlines():
        if ln.startswith("| ") and not ln.startswith("|---"):
            cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
            rows[cells[0]] = cells
    return rows


def test_cpu_figures_are_those_of_docs_performance():
    rows = _performance_rows()
    assert {name for name, _ in gc.CPU_FIGURES} <= set(gc.STEP_NAMES)
    for name, fig in gc.CPU_FIGURES:
        assert fig.row in rows, f"{name}: no row {fig.row!r} in {gc.PERFORMANCE_DOC}"
        _, command, figures, *_ = rows[fig.row]
        assert fig.script in command, (name, command)
        assert fig.text in figures, f"{name}: {fig.text!r} is not in the figures of {fig.row!r}: {figures!r}"
        assert fig.unit in ("s", "steps/s") and fig.value > 0


def test_timeouts_fit_the_eight_minute_check(tmp_path):
    real = gc.steps(False, tmp_path / "pair", tmp_path)
    assert [s.name for s in real] == list(gc.STEP_NAMES) == [n for n, _ in gc.TIMEOUTS_S]
    assert sum(s.timeout_s for s in real) == sum(t for _, t in gc.TIMEOUTS_S) <= 450
    assert all("--device" in s.argv and "cuda" in s.argv for s in real if s.name != "gpu-tests")
    diff = next(s for s in real if s.name == "diff-7b")
    assert diff.argv[diff.argv.index("--shape") + 1] == "7b" and "--no-baseline" in diff.argv


def test_a_step_past_its_timeout_is_killed_with_its_children():
    running: set[int] = set()
    t0 = time.perf_counter()
    rc, out, _, wall = gc.run_command(["bash", "-c", "echo started; sleep 30 & sleep 30"], 0.5, dict(os.environ),
                                      running)
    assert rc is None and out == "started\n" and wall < 10 and time.perf_counter() - t0 < 10
    assert not running


def test_ratio_is_cpu_over_gpu_for_times_and_gpu_over_cpu_for_rates():
    secs, rate = dict(gc.CPU_FIGURES)["spectra-head"], dict(gc.CPU_FIGURES)["grpo-steps"]
    assert gc.ratio(secs, 2.2) == pytest.approx(10.0)
    assert gc.ratio(rate, 68.0) == pytest.approx(10.0)
    assert gc.ratio(secs, None) is None and gc.ratio(None, 1.0) is None


def test_real_run_without_cuda_is_refused_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the real run would start")
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "gpu")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "CUDA" in p.stderr and "--dry-run" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "gpu").exists()
