"""Benchmark: the categorical simulator (F-GRPO App. J) on the full ``fgrpo-fig4`` sweep against
the straightforward reference.

Engine: the whole sweep (17 N × 2 γ × 4 seeds × 1,000 steps × 128,000 actions) through the
command line, ``python -m simulations categorical --preset fgrpo-fig4 --quiet --device cpu
--threads T --out DIR`` in a child process, once per ``--threads`` value: wall time (the
child's own, start to exit: imports, numba kernels, writing the CSVs included), ``wall_s`` of
``simulate`` from its ``config.json``, and the child's peak RSS.

Reference: the straightforward implementation, one configuration at a time in numpy float64,
``Generator.multinomial`` for the counts of each step, the same log-prob surrogate, mean
baseline, focal weight and Adam update (:func:`reference`).  Its cost per step depends on N
(``multinomial`` walks the categories until the N draws are placed) and on how far training has
gone (the policy concentrates on the first 10,000 actions), so it is timed on EVERY N of the
sweep, over ``--ref-steps`` steps at the start and as many again after ``--ref-skip`` steps of
training (both γ), and the full-sweep estimate weights each N by the sweep's steps:
``Σ_N 2 γ × 4 seeds × 1,000 steps × (mean seconds per step at N)``.

Load: ``os.getloadavg()`` is printed at the start, between the parts and at the end: the
machine is shared, and numbers taken under load are slower (and noisier) than quiet ones.

Distribution-level calibration: ``--mu 0 0.5`` also times the engine with memory logits
(``--mu 0.5``; the reference has none): the cost of the memory is the ratio of the two.

``--device cuda`` runs the engine on the GPU (all configurations in one batch; the reference
stays numpy on the CPU), as ``make gpu-check`` does with ``--skip-reference``.

    python benchmarks/bench_sim_categorical.py [--threads 2 1] [--ref-steps 5] [--ref-skip 200]
        [--steps 1000] [--mu 0 [0.5]] [--device cpu] [--preset fgrpo-fig4] [--skip-engine] [--skip-reference]
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulations import categorical as sc  # noqa: E402


def reference(cfg: sc.Config, N: int, gamma: float, seed: int, *, skip: int = 0, timed: int | None = None,
              ) -> tuple[float, float, float]:
    """One configuration, numpy float64, ``Generator.multinomial`` per step: ``skip`` untimed
    steps, then ``timed`` timed ones (default: the rest of ``cfg.steps``).  Returns (the final
    Q_pos, the mean wall seconds of a timed step, its mean CPU seconds)."""
    rng = np.random.default_rng(seed)
    z, correct = sc.initial_logits(cfg)
    m = np.zeros_like(z)
    v = np.zeros_like(z)
    b1, b2 = cfg.betas
    lr = cfg.lr[0]
    rw, rc = cfg.reward_values
    timed = cfg.steps - skip if timed is None else timed
    t0 = c0 = None
    for t in range(skip + timed):
        if t == skip:
            t0, c0 = time.perf_counter(), time.process_time()
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
    per_step = (time.perf_counter() - t0) / max(timed, 1)
    cpu_step = (time.process_time() - c0) / max(timed, 1)
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(p[correct].sum()), per_step, cpu_step


def load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"


def reference_estimate(full: sc.Config, ref_steps: int, ref_skip: int) -> float:
    """The reference's full-sweep time, from ``ref_steps`` timed steps per N, γ and phase."""
    per_n = len(full.gamma) * len(full.seeds) * full.steps  # configuration-steps of each N in the sweep
    print(f"\nreference (numpy float64, one configuration at a time, Generator.multinomial), {ref_steps} steps "
          f"at the start and {ref_steps} after {ref_skip} steps, both gammas, seed 0, every N:")
    print(f"{'N':>8s}{'ms/step start':>15s}{'ms/step later':>15s}{'sweep share s':>15s}{'CPU share s':>13s}")
    total = total_cpu = 0.0
    for N in full.N:
        cfg = sc.Config(N=(N,), steps=ref_skip + ref_steps).validate()
        early = np.array([reference(cfg, N, g, 0, timed=ref_steps)[1:] for g in full.gamma]).mean(0)
        late = np.array([reference(cfg, N, g, 0, skip=ref_skip, timed=ref_steps)[1:] for g in full.gamma]).mean(0)
        share, cpu_share = per_n * (early + late) / 2
        early, late = early[0], late[0]
        total, total_cpu = total + share, total_cpu + cpu_share
        print(f"{N:8d}{1e3 * early:15.2f}{1e3 * late:15.2f}{share:15.1f}{cpu_share:13.1f}", flush=True)
    print(f"reference, full sweep (estimated): {total:.0f} s wall, {total_cpu:.0f} s CPU   [{load()}]")
    return total


def engine_cli(threads: int, steps: int, mu: float = 0.0, device: str = "cpu",
               preset: str = "fgrpo-fig4") -> tuple[float, float, float, float]:
    """The sweep through the command line in a child process: (wall s, simulate's wall_s, CPU s of
    the child (user + system: on a loaded machine, about what the run costs on a quiet one),
    peak RSS GB)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "simulations", "categorical", "--preset", preset, "--steps", str(steps),
               "--quiet", "--device", device, "--threads", str(threads), "--out", str(out)]
        if mu > 0:
            cmd += ["--mu", str(mu)]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        inner = json.loads((out / "config.json").read_text())["wall_s"]
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return wall, inner, cpu, r1.ru_maxrss / 2 ** 20  # ru_maxrss (KiB): the largest child so far


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1], help="--threads of the engine runs [2 1]")
    ap.add_argument("--steps", type=int, default=1000, help="steps of the engine runs (1,000: the full sweep)")
    ap.add_argument("--ref-steps", type=int, default=5, help="timed reference steps per N, gamma and phase [5]")
    ap.add_argument("--ref-skip", type=int, default=200, help="untimed reference steps before the later phase [200]")
    ap.add_argument("--mu", type=float, nargs="+", default=[0.0],
                    help="--mu of the engine runs (> 0: with memory logits) [0]")
    ap.add_argument("--device", default="cpu",
                    help="device of the engine runs (cuda: all configurations in one batch) [cpu]")
    ap.add_argument("--preset", default="fgrpo-fig4",
                    help="the sweep (fgrpo-fig4; fgrpo-fig4-small: the GPU check's dry run) [fgrpo-fig4]")
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--skip-reference", action="store_true")
    a = ap.parse_args()
    full = sc.preset(a.preset)
    print(f"{a.preset}: K={full.K}, {len(full.N)} N (2 .. {max(full.N)}), gamma={list(full.gamma)}, "
          f"{len(full.seeds)} seeds, {full.steps} steps: {len(full.grid())} configurations; "
          f"sampler {sc.sampler(a.device)}; device {a.device}; cores {os.cpu_count()}")
    print(f"start: {load()}")
    runs = []
    if not a.skip_engine:
        print(f"\nengine through the CLI: python -m simulations categorical --preset {a.preset} --quiet "
              f"--device {a.device} --steps {a.steps} --threads T --out DIR")
        for t, mu in [(t, mu) for t in a.threads for mu in a.mu]:
            wall, inner, cpu, rss = engine_cli(t, a.steps, mu, a.device, a.preset)
            scale = full.steps / a.steps
            runs.append((f"{t}" + (f" --mu {mu:g}" if mu > 0 else ""), wall * scale))
            est = "" if a.steps == full.steps else f" -> {wall * scale:.1f} s for 1,000 steps (extrapolated)"
            print(f"  --threads {t}{f' --mu {mu:g}' if mu > 0 else ''}: wall {wall:.1f} s (simulate {inner:.1f} s), "
                  f"CPU {cpu:.1f} s, "
                  f"peak RSS {rss:.2f} GB (largest child so far)"
                  f"{est}   [{load()}]", flush=True)
    ref = None if a.skip_reference else reference_estimate(full, a.ref_steps, a.ref_skip)
    if runs:
        print("\nsummary (target: < 60 s, >= 10x the reference, < 2 GB):")
        for t, wall in runs:
            ratio = f", reference / engine {ref / wall:.1f}x" if ref else ""
            print(f"  engine --threads {t}: {wall:.1f} s{ratio}")
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
