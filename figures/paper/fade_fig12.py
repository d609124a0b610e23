"""FADE App. 12.2 Fig. 12 (with Fig. 10-11): the shifted power law G(k) = exp(−a(k + k0)^{−b}) fitted
to pass@k curves of three difficulty splits ("small, medium and high mass near 0"), against the
pass@k implied by Beta-binomial and two-component Beta-mixture fits of the per-problem success
counts (:mod:`analysis.passk`), and against the two laws the paper says it moved away from (the
power law and the exponential law of Theorem 12.1, fitted as curves here).

Data: the paper's per-problem counts (LiveCodeBench, 200 samples per problem) are not available.
We draw synthetic ones: per split, ``P = 400`` problems, each hard with probability ``w`` (0.15,
0.4, 0.7 for small, medium, high mass near 0) and easy otherwise — a bimodal solve-rate
distribution as in Fig. 10 — and ``c ~ Binomial(200, p)`` successes.  Two generators of the
solve rates ``p``:

* ``logit-normal``: logit p ~ N(−4.5, 1.5²) (hard) or N(1.5, 1.2²) (easy) — in neither fitted family;
* ``beta``: Beta(0.3, 8) (hard) or Beta(3, 1.2) (easy) — the Beta mixture's own family.

pass@k is the unbiased estimator (:func:`analysis.passk.pass_at_k`) averaged over problems, at
``k`` in :data:`KS` (1 to 128 <= 200); every curve's MSE is over those points (the fitted curves
are drawn at :data:`DENSE`).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
from scipy import optimize

from analysis import passk
from rlvr_plumbing import checks

from ..registry import Claim, FigureSpec, register
from ._style import legend_below, legend_row, paper_note

N_SAMPLES = 200
N_PROBLEMS = 400
KS = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128])
DENSE = np.unique(np.concatenate([KS, np.geomspace(1, 128, 60)]))  # where the fitted curves are drawn
SPLITS = {"small": 0.15, "medium": 0.4, "high": 0.7}
GENERATORS = ("logit-normal", "beta")
SEED = 0
#: fit: (label, colour, line style)
FITS = {"shifted power law": ("C0", "-"), "power law": ("C1", ":"), "exponential law": ("C2", ":"),
        "Beta-binomial": ("C3", "--"), "Beta mixture": ("C4", "--")}


def solve_rates(generator: str, w: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Synthetic per-problem solve rates: hard with probability ``w``, else easy (module docstring)."""
    checks.choice("generator", generator, GENERATORS)
    hard = rng.random(size) < checks.probability("w", w)
    if generator == "beta":
        return np.where(hard, rng.beta(0.3, 8.0, size), rng.beta(3.0, 1.2, size))
    z = np.where(hard, rng.normal(-4.5, 1.5, size), rng.normal(1.5, 1.2, size))
    return 1.0 / (1.0 + np.exp(-z))


def _least_squares(model, x0, k: np.ndarray, y: np.ndarray, bounds) -> tuple[np.ndarray, float]:
    res = optimize.least_squares(lambda z: model(k, *z) - y, x0, bounds=bounds, method="trf",
                                 xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=20000)
    return res.x, float(np.mean((model(k, *res.x) - y) ** 2))


def power_law_curve(k, C: float, b: float) -> np.ndarray:
    """Theorem 12.1 case 1 as a curve: pass@k = 1 − C·k^{−b}."""
    return 1.0 - C * np.asarray(k, dtype=float) ** (-b)


def exponential_law_curve(k, c: float, beta: float) -> np.ndarray:
    """Theorem 12.1 case 2 as a curve (stretched exponential miss): pass@k = 1 − exp(−c·k^β)."""
    return -np.expm1(-c * np.asarray(k, dtype=float) ** beta)


def fit_power_law_curve(k, y) -> tuple[tuple[float, float], float]:
    """Least-squares ``(C, b)`` of :func:`power_law_curve` and the MSE; start: the line through
    ``log(1 − y)`` against ``log k``."""
    k, y = np.asarray(k, dtype=float), np.asarray(y, dtype=float)
    slope, icpt = np.polyfit(np.log(k), np.log(np.clip(1 - y, 1e-12, None)), 1)
    z, mse = _least_squares(power_law_curve, [np.exp(icpt), max(-slope, 1e-3)], k, y, ([0, 1e-6], [np.inf, 50]))
    return (float(z[0]), float(z[1])), mse


def fit_exponential_law_curve(k, y) -> tuple[tuple[float, float], float]:
    """Least-squares ``(c, β)`` of :func:`exponential_law_curve` and the MSE; start: the line
    through ``log(−log(1 − y))`` against ``log k``."""
    k, y = np.asarray(k, dtype=float), np.asarray(y, dtype=float)
    slope, icpt = np.polyfit(np.log(k), np.log(-np.log(np.clip(1 - y, 1e-12, 1 - 1e-12))), 1)
    z, mse = _least_squares(exponential_law_curve, [np.exp(icpt), max(slope, 1e-3)], k, y,
                            ([0, 1e-6], [np.inf, 50]))
    return (float(z[0]), float(z[1])), mse


def data() -> pd.DataFrame:
    rng = np.random.default_rng(SEED)
    rows = []
    for gen in GENERATORS:
        for split, w in SPLITS.items():
            c = rng.binomial(N_SAMPLES, solve_rates(gen, w, N_PROBLEMS, rng))
            emp = passk.pass_at_k(N_SAMPLES, c[None, :], KS[:, None]).mean(-1)
            spl = passk.fit_shifted_power_law(KS, emp)
            (C, b), _ = fit_power_law_curve(KS, emp)
            (ce, be), _ = fit_exponential_law_curve(KS, emp)
            bb = passk.fit_beta_binomial(c, N_SAMPLES)
            mix = passk.fit_beta_mixture(c, N_SAMPLES)
            curves = {"shifted power law": spl, "power law": functools.partial(power_law_curve, C=C, b=b),
                      "exponential law": functools.partial(exponential_law_curve, c=ce, beta=be),
                      "Beta-binomial": bb.pass_at_k, "Beta mixture": mix.pass_at_k}
            common = dict(generator=gen, split=split, w_hard=w, mass_near_0=float(np.mean(c == 0)))
            rows += [dict(common, fit="empirical", k=float(k), pass_at_k=float(v), mse=0.0) for k, v in zip(KS, emp)]
            for fit, curve in curves.items():
                mse = float(np.mean((curve(KS) - emp) ** 2))   # the MSE at the data points only
                rows += [dict(common, fit=fit, k=float(k), pass_at_k=float(v), mse=mse)
                         for k, v in zip(DENSE, curve(DENSE))]
    return pd.DataFrame(rows)


def mse_table(df: pd.DataFrame) -> pd.DataFrame:
    """MSE of every fit against the empirical pass@k: rows (generator, split), columns fits."""
    t = df[df.fit != "empirical"].groupby(["generator", "split", "fit"], sort=False).mse.first().unstack("fit")
    return t[list(FITS)]


def plot(df: pd.DataFrame):
    fig, axes, spots = legend_row(3, nrows=2, width=4.2, height=3.2, legend_height=1.2)  # legends under the panels
    axes, spots = axes.reshape(2, 3), spots.reshape(2, 3)
    t = mse_table(df)
    for row, gen in enumerate(GENERATORS):
        for col, split in enumerate(SPLITS):
            ax = axes[row, col]
            cur = df[(df.generator == gen) & (df.split == split)]
            e = cur[cur.fit == "empirical"]
            ax.plot(e.k, e.pass_at_k, "ko", ms=3.5, label=f"empirical (n = {N_SAMPLES}, {N_PROBLEMS} problems)")
            for fit, (c, ls) in FITS.items():
                f = cur[cur.fit == fit]
                ax.plot(f.k, f.pass_at_k, color=c, ls=ls, lw=1.3, label=f"{fit}: MSE {t.loc[(gen, split), fit]:.1e}")
            ax.set(xscale="log", xlabel="k", title=f"{gen}: {split} mass near 0 "
                   f"({100 * e.mass_near_0.iloc[0]:.0f}% with c = 0)")
            ax.title.set_fontsize(9)
            legend_below(spots[row, col], ax.get_legend_handles_labels()[0], fontsize=8)
        axes[row, 0].set_ylabel("pass@k")
    paper_note(axes[0, 0], "paper (App. 12.2): the shifted power law\nhas the lowest MSE across difficulty\n"
               "splits (1 = yes); see the MSEs", [1.0], loc="lower right")
    fig.tight_layout()
    return fig


def markdown(df: pd.DataFrame) -> str:
    t = mse_table(df)
    lines = ["| generator | split | " + " | ".join(FITS) + " |", "|---|---|" + "---|" * len(FITS)]
    for (gen, split), r in t.iterrows():
        lines.append(f"| {gen} | {split} | " + " | ".join(f"{r[f]:.2e}" for f in FITS) + " |")
    return "\n".join(lines) + "\n"


def claims(df: pd.DataFrame) -> list[Claim]:
    t = mse_table(df)
    beats = t["shifted power law"] < t[["power law", "exponential law"]].min(axis=1)
    lost = ", ".join(f"{g}/{s}: {t.loc[(g, s), 'shifted power law']:.2e} vs exponential "
                     f"{t.loc[(g, s), 'exponential law']:.2e}" for g, s in beats.index[~beats.to_numpy()])
    vs_bb = all((t["shifted power law"] < t["Beta-binomial"]).to_list())
    vs_mix = (t["shifted power law"] < t["Beta mixture"])
    ratio = ", ".join(f"{g}/{s}: {r:.0f}x" for (g, s), r in (t["shifted power law"] / t["Beta mixture"]).items())
    return [
        Claim("the shifted power law fits pass@k with a lower MSE than the power and exponential laws in every "
              "difficulty split, both generators (1 = yes)", "FADE App. 12.2, Fig. 11-12", 1.0, float(beats.all()), 0,
              note=f"measured: it wins in {int(beats.sum())} of {len(beats)} cases; the exponential law "
                   f"(1 - exp(-c k^beta)) is closer in {lost}. Logit-normal hard problems have a solve-rate "
                   "density near 0 that decays faster than any power of p, the rapidly decaying regime of "
                   "Theorem 12.1 where the miss is a stretched exponential in k; the shifted power law's "
                   "fit is the global least-squares optimum (checked against a grid over k0)",
              tested_at=f"both generators x {len(SPLITS)} difficulty splits, {N_PROBLEMS} problems x {N_SAMPLES} "
                        f"samples, seed {SEED}: the fits have no learning settings to sweep"),
        Claim("the shifted power law has a lower pass@k MSE than the Beta-binomial fit in every split, both "
              "generators (1 = yes)", "FADE App. 12.2, Fig. 10, 12", 1.0, float(vs_bb), 0),
        Claim("the shifted power law has the lowest pass@k MSE across difficulty splits, also against the "
              "two-component Beta mixture (1 = yes)", "FADE App. 12.2, Fig. 12", 1.0, float(vs_mix.all()), 0,
              note=f"measured: the Beta mixture's implied pass@k is closer in {int((~vs_mix).sum())} of "
                   f"{len(vs_mix)} split/generator cases (shifted power law MSE / mixture MSE = {ratio}). The "
                   "mixture (5 parameters, fitted to all 400 x 200 counts) matches a bimodal solve-rate "
                   "distribution, which our synthetic splits are by construction (also with logit-normal "
                   "components); the paper's splits come from real LiveCodeBench problems",
              tested_at=f"both generators x {len(SPLITS)} difficulty splits, {N_PROBLEMS} problems x {N_SAMPLES} "
                        f"samples, seed {SEED}: the fits have no learning settings to sweep"),
        Claim("Fig. 12 on the paper's own pass@1 distributions (LiveCodeBench, 200 samples per problem)",
              "FADE App. 12.2, Fig. 12", 1.0, np.nan, 0,
              note="not reproducible here: the paper's per-problem success counts are not published; the "
                   "splits above are synthetic"),
    ]


register(FigureSpec("fade_fig12", "Shifted power law vs Beta fits of pass@k across difficulty splits (synthetic)",
                    "FADE App. 12.2, Fig. 10-12", data, plot, claims, markdown))
