"""Benchmark: the batched categorical simulator (F-GRPO App. J) against a reference.

Reference: one configuration at a time in numpy float64, ``Generator.multinomial``
for the counts of each step, the same log-prob surrogate, mean-baseline advantage, focal
weight and Adam update.  Both run the same sweep (K = 128,000 actions, the given N, γ, seeds
and steps) in one process; the script prints the two wall times, their ratio, the cost per
configuration-step and an extrapolation to the full ``fgrpo-fig4`` sweep (17 N × 2 γ × 4 seeds
× 1,000 steps), plus the largest difference of the final Q_pos between the two (they use
different random streams, so only agreement in distribution is expected: the row prints the
mean over configurations of both).

    python benchmarks/bench_sim_categorical.py [--steps 20] [--N 4 1024 131072] [--seeds 2] [--device cpu] [--full-steps 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from analysis.runtime import resolve_device
from simulations import categorical as sc


def reference(cfg: sc.Config, N: int, gamma: float, seed: int) -> float:
    """One configuration, numpy float64, Generator.multinomial per step; returns the final Q_pos."""
    rng = np.random.default_rng(seed)
    z, correct = sc.initial_logits(cfg)
    m = np.zeros_like(z)
    v = np.zeros_like(z)
    b1, b2 = cfg.betas
    lr = cfg.lr[0]
    rw, rc = cfg.reward_values
    for t in range(cfg.steps):
        p = np.exp(z - z.max())
        p /= p.sum()
        counts = rng.multinomial(N, p).astype(float)
        X = counts[correct].sum()
        ph = X / N
        Ac, Aw = ((rc - rw) * (1 - ph), -(rc - rw) * ph) if 0 < X < N else (0.0, 0.0)
        S = counts * np.where(correct, Ac, Aw)
        C = X * Ac + (N - X) * Aw
        g = (1 - ph) ** gamma / N * (S - C * p)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        z = z + lr / (1 - b1 ** (t + 1)) * m / (np.sqrt(v / (1 - b2 ** (t + 1))) + cfg.eps)
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(p[correct].sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--N", type=int, nargs="+", default=[4, 1024, 131_072])
    ap.add_argument("--gamma", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--full-steps", type=int, default=10, help="steps of the full fig4 grid to time (0: skip)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = sc.Config(N=tuple(a.N), gamma=tuple(a.gamma), seeds=tuple(range(a.seeds)), steps=a.steps,
                    record_every=a.steps).validate()
    n_cfg = len(cfg.grid())
    dev = resolve_device(a.device)
    sc.simulate(sc.Config(**{**cfg.to_dict(), "steps": 1}), device=dev)  # warm-up
    t0 = time.perf_counter()
    _, fin = sc.simulate(cfg, device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t_batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = [reference(cfg, r.N, r.gamma, r.seed) for r in cfg.grid().itertuples()]
    t_ref = time.perf_counter() - t0
    full = 17 * 2 * 4 * 1000
    per_b, per_r = t_batched / (n_cfg * a.steps), t_ref / (n_cfg * a.steps)
    print(f"sweep: K={cfg.K}, N={list(cfg.N)}, gamma={list(cfg.gamma)}, seeds={a.seeds}, steps={a.steps} "
          f"({n_cfg} configurations), device={dev}, torch threads={torch.get_num_threads()}")
    print(f"{'':28s}{'wall s':>10s}{'ms/config-step':>16s}{'full fig4 sweep (est.) s':>26s}")
    print(f"{'batched torch (float32)':28s}{t_batched:10.2f}{1e3 * per_b:16.2f}{per_b * full:26.0f}")
    print(f"{'reference numpy (float64)':28s}{t_ref:10.2f}{1e3 * per_r:16.2f}{per_r * full:26.0f}")
    print(f"ratio reference / batched: {t_ref / t_batched:.1f}x")
    if a.full_steps:
        full_cfg = sc.preset("fgrpo-fig4", steps=a.full_steps, record_every=10)
        t0 = time.perf_counter()
        sc.simulate(full_cfg, device=dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_full = time.perf_counter() - t0
        print(f"full fgrpo-fig4 grid (136 configurations, all 17 N), {a.full_steps} steps: {t_full:.2f} s "
              f"-> 1,000 steps est. {t_full * 1000 / a.full_steps:.0f} s (target 60 s CPU, 5 s GPU)")
    print(f"mean final Q_pos: batched {fin.Q_pos.mean():.4f}, reference {np.mean(ref):.4f}")


if __name__ == "__main__":
    main()
