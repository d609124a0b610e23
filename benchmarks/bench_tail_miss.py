"""Benchmark: ``tail_miss.probability`` (F-GRPO Lemma 3.1) on a grid of 10^6 (μ, τ, N) points.

Target: under 1 s on a 2-core CPU (docs/performance.md, docs/tail_miss.md).  References in the same run:

* the naive float formula ``(1−τ)**N − (μ−τ)**N − (1−μ)**N`` on the same grid (speed), and
* mpmath at 50 significant digits on a random subsample (accuracy of both).

Prints both timings, their ratio and the largest relative errors (where the exact value is
not tiny, > 1e-280).  Exit status 0 when the target is met and our error is < 1e-12.

    python benchmarks/bench_tail_miss.py [--n 1000000] [--n-mp 2000] [--repeat 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time

import mpmath as mp
import numpy as np

from rlvr_theory import tail_miss


def grid(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """μ uniform on [0, 1] (10% within 1e-6 of 0 or 1), τ log-uniform on [1e-9, μ], N log-uniform on [1, 2^20]."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.0, 1.0, n)
    edge = rng.random(n) < 0.1
    k = int(edge.sum())
    mu[edge] = np.where(rng.random(k) < 0.5, rng.uniform(1e-8, 1e-6, k), 1 - rng.uniform(0.0, 1e-6, k))
    lo = np.log(1e-9)
    tau = np.where(mu > 1e-9, np.exp(rng.uniform(lo, np.log(np.maximum(mu, 1e-9)))), 0.0)
    tau = np.minimum(tau, mu)
    N = np.floor(np.exp(rng.uniform(0.0, np.log(2.0**20), n))).astype(np.int64)
    return mu, tau, N


def mp_exact(mu: float, tau: float, N: int) -> float:
    """Lemma 3.1 with 50 significant digits (precision raised by the cancellation)."""
    dps = 50
    while True:
        with mp.workdps(dps):
            m, t = mp.mpf(mu), mp.mpf(tau)
            terms = [(1 - t) ** N, -((m - t) ** N), -((1 - m) ** N)]
            total, scale = mp.fsum(terms), max(abs(x) for x in terms)
            if total == 0 or scale == 0:
                return 0.0
            lost = int(mp.ceil(mp.log10(scale / abs(total))))
            if lost <= dps - 50 or dps > 350:
                return float(total) if lost <= dps - 50 else 0.0
            dps = min(60 + lost, dps + 150)


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--n-mp", type=int, default=2000, help="subsample size for the mpmath reference")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    mu, tau, N = grid(args.n, args.seed)

    cold, ours = _timed(lambda: tail_miss.probability(mu, tau, N))
    warm = min(_timed(lambda: tail_miss.probability(mu, tau, N))[0] for _ in range(args.repeat))
    t_naive, naive = min((_timed(lambda: (1 - tau) ** N - (mu - tau) ** N - (1 - mu) ** N)
                          for _ in range(args.repeat)), key=lambda x: x[0])
    t_act, _ = _timed(lambda: tail_miss.active(mu, N))
    t_reach, _ = _timed(lambda: tail_miss.reach_probability(mu, tau, N))
    t_peak, _ = _timed(lambda: tail_miss.peak(mu, np.maximum(tau, 1e-9 * (mu > 0))))

    idx = np.random.default_rng(args.seed + 1).choice(args.n, size=min(args.n_mp, args.n), replace=False)
    t0 = time.perf_counter()
    ref = np.array([mp_exact(float(mu[i]), float(tau[i]), int(N[i])) for i in idx])
    t_mp = time.perf_counter() - t0
    ok = ref > 1e-280
    rel_ours = np.abs(ours[idx][ok] - ref[ok]) / ref[ok]
    rel_naive = np.abs(naive[idx][ok] - ref[ok]) / ref[ok]

    print(f"tail_miss.probability on {args.n:,} points (mu, tau in [1e-9, mu], N in [1, 2^20])")
    print(f"  ours, cold:                  {cold * 1e3:8.1f} ms")
    print(f"  ours, warm (best of {args.repeat}):      {warm * 1e3:8.1f} ms")
    print(f"  naive float powers (best of {args.repeat}): {t_naive * 1e3:8.1f} ms")
    print(f"  ratio ours-warm / naive: {warm / t_naive:5.2f}x  (> 1: the price of the stable form)")
    print(f"  mpmath 50 digits, {len(idx)} points: {t_mp * 1e3:8.1f} ms  "
          f"(~{t_mp / len(idx) * args.n:6.0f} s for the full grid: {t_mp / len(idx) * args.n / warm:,.0f}x ours)")
    print(f"  also: active {t_act * 1e3:.1f} ms, reach_probability {t_reach * 1e3:.1f} ms, peak {t_peak * 1e3:.1f} ms")
    print(f"  max rel. error vs mpmath ({ok.sum()} points with value > 1e-280):")
    print(f"    ours  {rel_ours.max():.2e}   (median {np.median(rel_ours):.1e})")
    print(f"    naive {rel_naive.max():.2e}   (median {np.median(rel_naive):.1e}; "
          f"{np.mean(rel_naive > 1e-12):.1%} of points worse than 1e-12)")
    met = warm < 1.0 and cold < 1.0
    print(f"  target: < 1 s -> {'met' if met else 'NOT met'}; accuracy < 1e-12 -> "
          f"{'met' if rel_ours.max() < 1e-12 else 'NOT met'}")
    return 0 if met and rel_ours.max() < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
