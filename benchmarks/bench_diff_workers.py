"""Top-k spectra of the checkpoint diff's block weights: workers side by side vs BLAS threads.

    python benchmarks/bench_diff_workers.py [--matrices 4] [--rows 18944] [--cols 3584] [--k 64]

Times ``analysis.spectra.spectrum(A, k, method="gram32")`` on ``--matrices`` float32 Gaussian
matrices of a 7B MLP weight's shape in three ways, in one run: one after the other with one
BLAS thread (the reference), two worker threads side by side with one BLAS thread each (what
``analysis.diff.diff`` does on the CPU), and one after the other with two BLAS threads.
Checks that the singular values are identical in every variant and prints the ratios and the
load average (run it on a quiet and on a busy machine: ``docs/checkpoint_diff.md``).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from analysis import spectra


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", type=int, default=4)
    ap.add_argument("--rows", type=int, default=18944)
    ap.add_argument("--cols", type=int, default=3584)
    ap.add_argument("--k", type=int, default=64)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    mats = [(1e-3 * rng.standard_normal((a.rows, a.cols))).astype(np.float32) for _ in range(a.matrices)]

    def job(A: np.ndarray) -> np.ndarray:
        return spectra.spectrum(A, a.k, method="gram32", device="cpu").s

    print(f"{a.matrices} matrices {a.rows} x {a.cols} float32, top {a.k}; load average {os.getloadavg()[0]:.2f}")
    times, results = {}, {}
    with threadpool_limits(1):
        t = time.perf_counter()
        results["serial, 1 BLAS thread"] = [job(A) for A in mats]
        times["serial, 1 BLAS thread"] = time.perf_counter() - t
        with ThreadPoolExecutor(2) as ex:
            t = time.perf_counter()
            results["2 workers x 1 BLAS thread"] = list(ex.map(job, mats))
            times["2 workers x 1 BLAS thread"] = time.perf_counter() - t
    with threadpool_limits(2):
        t = time.perf_counter()
        results["serial, 2 BLAS threads"] = [job(A) for A in mats]
        times["serial, 2 BLAS threads"] = time.perf_counter() - t
    ref = results["serial, 1 BLAS thread"]
    base = times["serial, 1 BLAS thread"]
    for name, el in times.items():
        same = all(np.array_equal(x, y) for x, y in zip(results[name], ref))
        print(f"{name:<28}{el:>8.1f} s   {base / el:>5.2f}x the serial reference   identical values: {same}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
