"""Benchmark: ``masses.table`` for every family at 101 solve rates and G = 64.

Target: under 1 s on the 2-core CPU machine.  Reference in the same run: the
same exact expectations computed the naive way, one Python loop over (family, p, x)
calling the advantage on a single group, to show what the vectorisation buys.  Prints
both timings, their ratio and the largest disagreement.

Second part: ``masses.exact`` at large G (``--large-G``, default 2**20) for every family,
one p: the compressed evaluation is O(G) per p; target under 1 s per family and p.

    python benchmarks/bench_masses.py [--G 64] [--n-p 101] [--repeat 3] [--large-G 1048576]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

import numpy as np
from scipy import stats

from rlvr_theory import advantages, masses


def naive_exact(adv, p_values, G):
    """Σ_x Binom(x; G, p)·M(x) with Python loops over p and x (reference)."""
    out = np.zeros((len(p_values), 2))
    for i, p in enumerate(p_values):
        for x in range(G + 1):
            r = np.zeros(G)
            r[:x] = 1.0
            r = adv.reward_values[0] + (adv.reward_values[1] - adv.reward_values[0]) * r
            success = r == adv.reward_values[1]
            if adv.batch_level:  # a homogeneous batch of prompts at solve rate p (A-GRAE: ω = p)
                A = adv.population_advantages(r, np.array([p]))[0]
                m = (A[success].sum() / G, -A[~success].sum() / G)
            else:
                kw = {"lengths": adv.default_lengths(success)} if adv.uses_lengths else {}
                mm = masses.of_group(adv, r, **kw)
                m = (float(mm.m_S), float(mm.m_F))
            out[i] += stats.binom.pmf(x, G, p) * np.array(m)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--G", type=int, default=64)
    ap.add_argument("--n-p", type=int, default=101)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large-G", type=int, default=2**20)
    args = ap.parse_args()
    p = np.linspace(0.0, 1.0, args.n_p)

    # cold: fresh caches (first call of a session, includes sympy lambdify)
    importlib.reload(masses)
    t0 = time.perf_counter()
    table = masses.table(p, args.G)
    cold = time.perf_counter() - t0
    warm = min(_timed(lambda: masses.table(p, args.G)) for _ in range(args.repeat))

    t0 = time.perf_counter()
    ref = {a.name: naive_exact(a, p, args.G) for a in advantages.iter_default()}
    naive = time.perf_counter() - t0
    diff = max(np.max(np.abs(table.loc[table.advantage == n, ["m_S_exact", "m_F_exact"]].to_numpy() - r))
               for n, r in ref.items())

    n_fam = table.advantage.nunique()
    print(f"masses.table: {n_fam} families x {args.n_p} p values, G = {args.G} ({len(table)} rows)")
    print(f"  vectorised, cold (incl. sympy lambdify): {cold * 1e3:8.1f} ms")
    print(f"  vectorised, warm (best of {args.repeat}):           {warm * 1e3:8.1f} ms")
    print(f"  naive loop over (family, p, x) [exact columns only]: {naive * 1e3:8.1f} ms")
    print(f"  ratio naive / vectorised-cold: {naive / cold:6.1f}x   naive / warm: {naive / warm:6.1f}x")
    print(f"  max |exact - naive| = {diff:.2e}")
    ok = cold < 1.0 and diff < 1e-12
    print(f"  target: cold < 1 s -> {'met' if cold < 1.0 else 'NOT met'}")

    times = {}
    for a in advantages.iter_default():
        t0 = time.perf_counter()
        masses.exact(a, [0.3], args.large_G)
        times[a.name] = time.perf_counter() - t0
    worst = max(times, key=times.get)
    print(f"masses.exact at G = {args.large_G}, one p: median {np.median(list(times.values())) * 1e3:.0f} ms, "
          f"slowest {worst} {times[worst] * 1e3:.0f} ms over {len(times)} families")
    print(f"  target: < 1 s per family and p -> {'met' if times[worst] < 1.0 else 'NOT met'}")
    return 0 if ok and times[worst] < 1.0 else 1


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
