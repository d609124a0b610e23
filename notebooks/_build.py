"""Write the example notebooks from the cell sources below (outputs empty).

    python notebooks/_build.py

The notebooks are generated so that their code lives in one reviewable file; the test suite
(tests/notebooks/test_notebooks.py) executes every notebook and checks that the committed files match
this script and carry no outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_gradient_masses": [
        ("md", """# Gradient masses of advantage functions

For one prompt with G rollouts and binary rewards, the policy-gradient update is
`G·(m_S·∇̄_S − m_F·∇̄_F)`: `m_S` is the mass pushed onto successes, `m_F` the mass pushed off
failures (FADE, Sec. 2 and Table 1). Their ratio decides whether entropy falls or rises.
This notebook picks a few advantages, plots `m_S`, `m_F` and the advantage ratio
`ρ(p) = m_S·p / (m_F·q)` against the solve rate `p`, and compares the papers' plug-in
formulas with the exact finite-G expectation."""),
        ("code", """import numpy as np
import matplotlib.pyplot as plt
from rlvr_theory import advantages, masses

print(len(advantages.names()), "registered advantages:", ", ".join(advantages.names()))"""),
        ("md", "Pick advantages (any registry name, with parameters) and a group size:"),
        ("code", """picks = {"GRPO": advantages.get("grpo"),
         "Dr.GRPO": advantages.get("dr_grpo"),
         "AsymGRPO δ=0.5": advantages.get("asym_grpo", delta=0.5),
         "Power α=2": advantages.get("power_alpha", alpha=2.0),
         "MaxRL": advantages.get("maxrl")}
G = 8
p = np.linspace(0.01, 0.99, 99)"""),
        ("code", """fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for i, (label, adv) in enumerate(picks.items()):
    mS, mF = masses.closed_form(adv, p)
    axes[0].plot(p, mS, color=f"C{i}", label=label)
    axes[0].plot(p, mF, color=f"C{i}", ls="--")
    axes[1].plot(p, masses.advantage_ratio(adv, p), color=f"C{i}", label=label)
    eS, eF = masses.exact(adv, p, G)
    axes[2].plot(p, eS - mS, color=f"C{i}", label=label)
axes[0].set(title="m_S (solid), m_F (dashed): plug-in", xlabel="solve rate p")
axes[1].set(title="advantage ratio ρ(p)", xlabel="p", yscale="log")
axes[1].axhline(1, color="k", lw=0.5)
axes[2].set(title=f"exact − plug-in m_S at G = {G}", xlabel="p")
axes[0].legend(fontsize=7)
fig.tight_layout()"""),
        ("md", """At small G the plug-in formula (evaluated at the true p) is not the expected mass: the
empirical solve rate p̂ = X/G is random, and groups with X ∈ {0, G} carry no signal. The
exact expectation sums over the binomial law of X. The table below has both, for every family:"""),
        ("code", """tab = masses.table(p=[0.1, 0.3, 0.5], G=G)
tab[tab.advantage.isin(["grpo", "dr_grpo", "asym_grpo", "power_alpha", "maxrl"])].round(4)"""),
        ("md", """A sign-balanced family (GRPO, RLOO, ...) has ρ(p) = p/q; AsymGRPO with δ < 1 puts less
mass on successes. Check against a Monte Carlo estimate of the expected masses:"""),
        ("code", """rng = np.random.default_rng(0)
adv, p0 = picks["AsymGRPO δ=0.5"], 0.3
r = (rng.random((200_000, G)) < p0).astype(float)
mc = masses.of_group(adv, r)
ex = masses.exact(adv, p0, G)
print(f"Monte Carlo m_S = {mc.m_S.mean():.4f} ± {mc.m_S.std() / np.sqrt(len(r)):.4f}, exact = {ex[0]:.4f}")
print(f"Monte Carlo m_F = {mc.m_F.mean():.4f} ± {mc.m_F.std() / np.sqrt(len(r)):.4f}, exact = {ex[1]:.4f}")
assert abs(mc.m_S.mean() - ex[0]) < 5 * mc.m_S.std() / np.sqrt(len(r))"""),
    ],
    "02_tail_miss_and_the_categorical_simulator": [
        ("md", """# Tail miss and the categorical simulator

F-GRPO Lemma 3.1: with a group of N rollouts, a prompt is *active* (it has both a success
and a failure) with probability 1 − μ^N − (1 − μ)^N, and a rare correct mode of mass τ is missed
by an active group with probability Pr(B_τ) = (1 − τ)^N − (μ − τ)^N − (1 − μ)^N. Intermediate N
makes the prompt active while the rare mode stays unsampled: its probability is pushed down."""),
        ("code", """import numpy as np
import matplotlib.pyplot as plt
from rlvr_theory import tail_miss

mu, tau = 0.64, 6.3e-5                    # F-GRPO App. J: initial Q_pos and a leaf's probability
N = 2 ** np.arange(1, 18)
pk = tail_miss.peak(mu, tau)
print(f"Pr(B_tau) peaks at N = {pk.N:g} with value {pk.value:.4f}")
print("Pr(B_tau) at N = 2^17:", tail_miss.probability(mu, tau, 2 ** 17))"""),
        ("code", """mc = tail_miss.monte_carlo(mu, 1e-2, [4, 64, 512], trials=20_000, seed=0)
mc"""),
        ("code", """fig, ax = plt.subplots(figsize=(5, 3.5))
for t in (1e-2, 1e-3, 6.3e-5):
    ax.plot(N, tail_miss.probability(mu, t, N), "o-", ms=3, label=f"τ = {t:g}")
ax.plot(N, tail_miss.active(mu, N), "k--", label="Pr(active)")
ax.set(xscale="log", xlabel="group size N", ylabel="probability", title="Lemma 3.1, μ = 0.64")
ax.legend(fontsize=8);"""),
        ("md", """## A small sweep of the categorical simulator

A softmax policy over K = 128,000 actions (10,000 correct) trained with group sampling
(F-GRPO App. J). The quick preset `fgrpo-fig4-small` (N ∈ {4, 1024, 131,072}, γ ∈ {0, 1}, 600
steps; ~10 s on a 2-core CPU) shows the paper's three regimes: small N keeps the retained
positive mass M_ret near 1 but Q_pos grows slowly; intermediate N grows Q_pos while M_ret
collapses (rare correct actions lose mass); the largest N keeps both high. The focal weight
γ = 1 retains more."""),
        ("code", """from simulations import categorical as sc

cfg = sc.preset("fgrpo-fig4-small")
traj, final = sc.simulate(cfg, device="auto")
final[["N", "gamma", "Q_pos", "M_ret", "entropy"]].round(3)"""),
        ("code", """fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for (n, g), cur in traj.groupby(["N", "gamma"]):
    ls = "-" if g == 0 else "--"
    axes[0].plot(cur.step, cur.Q_pos, ls=ls, label=f"N={n}, γ={g:g}")
    axes[1].plot(cur.step, cur.M_ret, ls=ls)
axes[0].set(xlabel="step", ylabel="Q_pos")
axes[1].set(xlabel="step", ylabel="M_ret")
axes[0].legend(fontsize=7)
fig.tight_layout()"""),
        ("md", "The three regimes, as numbers:"),
        ("code", """f = final.set_index(["N", "gamma"])
q0 = traj[traj.step == 0].Q_pos.iloc[0]
print("small N:  M_ret =", round(f.loc[(4, 0.0), "M_ret"], 3), " Q_pos gain =", round(f.loc[(4, 0.0), "Q_pos"] - q0, 3))
print("mid N:    M_ret =", round(f.loc[(1024, 0.0), "M_ret"], 3), " (γ=1:", round(f.loc[(1024, 1.0), "M_ret"], 3), ")")
print("large N:  M_ret =", round(f.loc[(131072, 0.0), "M_ret"], 3), " Q_pos =", round(f.loc[(131072, 0.0), "Q_pos"], 3))"""),
    ],
    "03_checkpoint_diff": [
        ("md", """# Train two tiny GRPO runs and diff their checkpoints

The whole path of the toolkit on a CPU in under a minute: an SFT warm start on a synthetic
task with an exact verifier (3-digit sorting), two GRPO runs from it that differ only in the
advantage (GRPO and AsymGRPO δ = 0.5), held-out pass@k, and the checkpoint diff ΔW = W_rl −
W_sft with its report. Everything is built locally (tokenizer, Qwen2-style model of ~250k
parameters); the checkpoints are ordinary Hugging Face directories. At this scale the numbers
are illustrations, not the paper's results (see docs/grpo.md for a longer sweep)."""),
        ("code", """import json, tempfile
from pathlib import Path
from simulations.grpo import sft, trainer, evaluate

work = Path(tempfile.mkdtemp(prefix="rlvr-nb03-"))
common = dict(task="sort", difficulty=3, device="cpu", threads=1, quiet=True)
base = sft.train_sft(sft.SFTConfig(out=str(work / "sft"), target_solve_rate=0.3, eval_every=10, max_steps=400, **common))
print(json.loads((base / "sft.json").read_text()))"""),
        ("code", """runs = {"grpo": ("grpo", {}), "asym05": ("asym_grpo", {"delta": 0.5})}
for name, (adv, params) in runs.items():
    trainer.train(trainer.GRPOConfig(out=str(work / name), init=str(base), advantage=adv, params=params,
                                     steps=30, batch_size=16, group_size=8, checkpoint_every=15, **common))
ckpts = [work / name / "checkpoint-000030" for name in runs]
import pandas as pd
metrics = pd.concat([pd.read_csv(work / n / "metrics.csv").assign(run=n) for n in runs])
metrics.groupby("run")[["reward_mean", "m_S", "m_F", "entropy", "head_delta_norm"]].agg(["first", "last"]).round(3)"""),
        ("code", """ev = dict(k=[1, 4], n=8, problems=64, device="cpu", threads=1, progress=False)
for path in [base, *ckpts]:
    print(path.relative_to(work), {k: round(v, 3) for k, v in evaluate.evaluate(path, **ev).pass_at_k.items()})"""),
        ("md", """## The checkpoint diff

`analysis.diff.diff` streams both checkpoints tensor by tensor and returns the
document that `rlvr-diff` writes as report.json; `analysis.report.write_report` adds the
Markdown and self-contained HTML reports with their plots."""),
        ("code", """from analysis import diff, report

doc = diff.diff(str(base), [str(c) for c in ckpts], device="cpu", progress=False)
out = report.write_report(doc, work / "report")
for c in doc["checkpoints"]:
    h = c["output_head"]
    print(f"{Path(c['path']).parent.name:8s} ||dW|| = {c['global_l2']:.4f}  head share = {h['l2_share']:.3f}  "
          f"s1/s2 = {h['s1_s2']:.2f}  rank-1 = {h['rank1_fraction']:.3f}  srank_0.1 = {h['srank']['0.1']}")
sorted(p.name for p in out.iterdir())"""),
        ("code", """from IPython.display import Markdown
Markdown((out / "report.md").read_text()[:3000])"""),
    ],
    "04_audit_a_run": [
        ("md", """# Audit a run from its rollout logs

A trainer already writes every rollout's reward to disk. `analysis.audit` reads those logs
(TRL completions parquet, verl rollout JSONL, prime-rl traces, `rlvr-train grpo` rollouts or
any table) and computes, per step, the papers' diagnostics: the zero-signal groups, the
gradient masses `m_S` and `m_F` of the advantage in use and of alternatives, which advantage
the trainer used, Kish N_eff, the tail-miss risk, pass@1 and pass@G, and what FADE's schedule
would have chosen. This notebook runs on the small example logs committed in
`examples/audit_logs/` (simulated runs in each trainer's exact schema, written by
`examples/make_audit_logs.py`); `rlvr-audit` does the same from the command line
(docs/audit.md)."""),
        ("code", """import tempfile
from pathlib import Path

import analysis
import matplotlib.pyplot as plt
from analysis import audit

LOGS = Path(analysis.__file__).resolve().parents[1] / "examples" / "audit_logs"
work = Path(tempfile.mkdtemp(prefix="rlvr-nb04-"))
r = audit.read(LOGS / "verl" / "rollout_data")       # the format is told from the files
print(r)
print(r.source["grouping"], "grouping,", r.source["n_padding_rows_dropped"], "padding rows dropped")
r.frame.head()"""),
        ("md", """One row per rollout: `step`, `group` (the prompt's rollouts within the step), `reward`,
`advantage` (verl logs none), `length`, `split`. `group_table` has one row per (step, group);
since verl logs no advantages, the masses are those of the advantage we name (GRPO):"""),
        ("code", """groups = audit.group_table(r, advantage="grpo")
groups[["step", "group", "n_valid", "n_success", "solve_rate", "zero_signal", "m_S", "m_F", "pass_at_G"]].head(8).round(3)"""),
        ("md", """`step_table` averages over each step's groups, a zero-signal group (all correct or all
wrong) counting as 0, and adds what-if masses of other families on the same rewards, the
tail-miss risk of a correct mode of mass τ (F-GRPO Lemma 3.1), and FADE's α:"""),
        ("code", """steps = audit.step_table(r, advantage="grpo", compare=["dr_grpo", ("asym_grpo", {"delta": 0.5})], taus=[0.05])
steps[["step", "n_groups", "frac_all_correct", "frac_all_wrong", "m_S", "m_F", "sign_ratio", "n_eff",
       "pass_at_1", "pass_at_G", "tail_miss/0.05", "fade_alpha"]].round(3)"""),
        ("code", """fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
axes[0].plot(steps.step, steps.frac_all_correct, "o-", label="all correct (p̂ = 1)")
axes[0].plot(steps.step, steps.frac_all_wrong, "s--", label="all wrong (p̂ = 0)")
axes[0].set(xlabel="step", ylabel="fraction of groups", title="zero-signal groups")
for i, prefix in enumerate(["", "compare/dr_grpo/", "compare/asym_grpo(delta=0.5)/"]):
    name = prefix.split("/")[1] if prefix else "grpo (in use)"
    style = dict(color=f"C{i}", marker="os^"[i], ms=7 - 2 * i)       # markers keep coinciding lines visible
    axes[1].plot(steps.step, steps[prefix + "m_S"], "-", label=f"m_S, {name}", **style)
    axes[1].plot(steps.step, steps[prefix + "m_F"], "--", label=f"m_F, {name}", **style)
axes[1].set(xlabel="step", ylabel="mean mass per group", title="m_S (solid) and m_F (dashed) of each family")
axes[0].legend(fontsize=7)
axes[1].legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
fig.tight_layout()"""),
        ("md", """## Which advantage is this?

TRL logs the advantage of every rollout. `which_advantage` recomputes it from the logged
rewards with every registry family (and GRPO's `ddof`/`eps` conventions) and reports the one
that reproduces it. This TRL log has two reward functions whose sum is real-valued, so
success is `r >= 1`:"""),
        ("code", """trl = audit.read(LOGS / "trl")
print(trl)
for note in trl.source["notes"]:
    print("-", note)
audit.which_advantage(trl, success_threshold=1)"""),
        ("md", """## The report

`audit` returns the whole `report.json` document; `write_report` writes it with
`report.md`, a self-contained `report.html` and the PNGs, atomically. The report opens with a
verdict:"""),
        ("code", """doc = audit.audit(r, advantage="grpo", compare=["dr_grpo", ("asym_grpo", {"delta": 0.5})], taus=[0.05])
out = audit.write_report(doc, None, work / "report")
print(sorted(p.name for p in out.iterdir()))
from IPython.display import Markdown
Markdown((out / "report.md").read_text().split("## Run")[0])"""),
        ("md", """Every format the same way, from the command line or in-process (`rlvr-audit PATH --out DIR`):"""),
        ("code", """from analysis import audit_cli

for folder, extra in [("verl/rollout_data", ["--advantage", "grpo"]), ("verl_legacy", []),
                      ("trl", ["--success-threshold", "1"]), ("prime-rl", []), ("rlvr", []), ("table", [])]:
    rc = audit_cli.main([str(LOGS / folder), "--out", str(work / folder.replace("/", "_")), "--quiet"] + extra)
    d = audit.audit(audit.read(LOGS / folder), success_threshold=1 if folder == "trl" else None)
    match = d["advantage"]["label"] if d["advantage"] else "-"
    print(f"{folder:18s} exit {rc}  {d['source']['format']:8s} steps {len(d['steps']):2d}  groups {d['summary']['n_groups']:3d}  "
          f"zero-signal {d['summary']['frac_all_correct'] + d['summary']['frac_all_wrong']:.2f}  logged advantage: {match}")"""),
        ("md", """## Shaped rewards: what the trainer did, and pass/fail

The TRL log above sums two reward functions, so its rewards take more than two values. The audit then
gives two views: the trainer's (a group gets zero advantage only when its rewards all equal:
`frac_equal_rewards`) and pass/fail at the threshold (`frac_all_wrong`, solve rates, pass@k).
`frac_shaped_signal` counts the groups that are all-pass or all-fail yet carried a gradient:"""),
        ("code", """doc_trl = audit.audit(trl, success_threshold=1)
print(doc_trl["rewards"])
{k: round(doc_trl["summary"][k], 3) for k in ("frac_all_correct", "frac_all_wrong", "frac_equal_rewards",
                                              "frac_shaped_signal")}"""),
        ("md", """## The trainer's own metric log

`examples/audit_logs/trl_run` is a real CPU run of `examples/trl_grpo.py` (TRL's `GRPOTrainer` with the
AsymGRPO adapter): its completions and `trainer_state.json` (in the output folder and every
`checkpoint-N`). `read_metrics` maps TRL's names to one vocabulary (docs/metric_logs.md):"""),
        ("code", """m = audit.read_metrics(LOGS / "trl_run")
print(m.source["format"], [Path(p).parent.name for p in m.source["paths"]])
m.frame[["step", "entropy", "reward_mean", "frac_zero_std", "clip_frac"]].head()"""),
        ("md", """Cui et al.'s entropy-performance law R = -a·e^H + b is a least-squares problem in a and b; the
ceiling -a + b is the reward the law predicts at zero entropy. `trainer_sections` fits it on all steps,
and on the first 15 % only, judged on the rest (the honest out-of-sample error):"""),
        ("code", """import numpy as np

t = audit.trainer_sections(m)
e = t["entropy"]
print("all steps  ", {k: round(e["fit"][k], 4) for k in ("a", "b", "ceiling", "r2")})
print("first 15 % ", {k: round(e["early_fit"][k], 4) for k in ("a", "b", "ceiling", "oos_rmse")})
H, R = m.frame["entropy"].to_numpy(), m.frame["reward_mean"].to_numpy()
np.linalg.lstsq(np.column_stack([-np.exp(H), np.ones_like(H)]), R, rcond=None)[0]   # the same a, b"""),
        ("md", """From the command line the output folder gives both logs, joined by step; the trainer's
`frac_reward_zero_std` is checked against the rollout log's count:"""),
        ("code", """rc = audit_cli.main([str(LOGS / "trl_run"), "--out", str(work / "trl_run"), "--quiet"])
Markdown((work / "trl_run" / "report.md").read_text().split("## Run")[0])"""),
    ],
}


def build(name: str) -> nbformat.NotebookNode:
    cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in NOTEBOOKS[name]]
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    for i, c in enumerate(nb.cells):  # stable ids: the files only change when the sources do
        c["id"] = f"{name[:2]}-{i:02d}"
    return nb


def main() -> int:
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        path.write_text(nbformat.writes(build(name)) + "\n")
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
