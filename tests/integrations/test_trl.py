"""integrations.trl: registry advantages and schedules inside TRL's GRPOTrainer (CPU, tiny model).

What entered the loss, the completions parquet and the ``rlvr/*`` metrics are compared with the
registry (:func:`rlvr_theory.advantages.get`) and :mod:`rlvr_theory.masses` on the rewards TRL
gathered, in one process and under ``torchrun --nproc_per_node 2`` (gloo); a schedule's state
survives a checkpoint and ``resume_from_checkpoint``; TRL's own ``scale_rewards`` settings equal
their registry calls; every bad configuration is refused with its message.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("pyarrow")

import torch  # noqa: E402
import trl  # noqa: E402

from integrations.trl import STATE_FILE, GRPOTrainer  # noqa: E402
from rlvr_theory import advantages, schedules  # noqa: E402
from tests.integrations import trl_tiny as T  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G = 4
FADE = dict(H0=4.0, H_target=4.5)  # δ = 1 + Ĥ − H* moves inside (0.3, 1) at the tiny model's entropy ≈ 4.02

torch.set_num_threads(1)


# ----------------------------------------------------------------- checks
def family(name, **params):
    adv = advantages.get(name, **params)

    def expect(gens, log_history):
        out = []
        for gen in gens:
            R = T.weighted(gen).reshape(-1, G)
            out.append((adv(R).ravel(), T.expected_metrics(adv, R)))
        return out

    return expect


def fade(**params):
    """Replays the FADE schedule from the solve rates and the entropy TRL logged."""

    def expect(gens, log_history):
        sched = schedules.get("fade", **params)
        ent = {h["step"]: h["entropy"] for h in log_history if "entropy" in h}
        out, prev = [], None
        h = params["H0"]
        for gen in gens:
            R = T.weighted(gen).reshape(-1, G)
            if prev is not None:  # the entropy logged since the previous generation batch
                vals = [v for s, v in ent.items() if prev < s <= gen["step"]]
                h = sum(vals) / len(vals) if vals else h
            adv = sched.update(reward_mean=float(R.mean()), entropy=h)
            m = T.expected_metrics(adv, R)
            m.update({"rlvr/alpha": adv.params["alpha"], "rlvr/delta": adv.params["delta"]})
            out.append((adv(R).ravel(), m))
            prev = gen["step"]
        return out

    return expect


def check(docs, tables, expect, *, metrics=True):
    """``docs``: one record per rank (:func:`trl_tiny.to_jsonable` form); ``tables``: the parquet files."""
    nproc = len(docs)
    gens = [g for g in docs[0]["gens"] if g["mode"] == "train"]
    assert gens, "no generation batch"
    expected = expect(gens, docs[0]["log_history"])
    for i, (A, m) in enumerate(expected):
        for rank, doc in enumerate(docs):
            g = doc["gens"][i]
            assert g["rank"] == rank
            np.testing.assert_array_equal(g["rewards_per_func"], gens[i]["rewards_per_func"])
            n_local = g["local"].size
            assert n_local * nproc == A.size
            part = A[rank * n_local:(rank + 1) * n_local]
            np.testing.assert_allclose(g["local"], part, rtol=1e-6, atol=1e-7)
            rows = {k % 1_000_000: v for k, v in doc["loss"].items() if k // 1_000_000 == i}
            assert sorted(rows) == list(range(n_local)), "every row of the batch entered the loss"
            np.testing.assert_allclose([rows[j] for j in range(n_local)], part, rtol=1e-6, atol=1e-7)
            if metrics:
                assert set(g["metrics"]) == set(m), (g["metrics"], m)
                for k, v in m.items():
                    assert g["metrics"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert tables, "no completions parquet"
    steps = [g["step"] for g in gens]
    for s, df in tables.items():
        i = max(j for j, st in enumerate(steps) if st < s)
        np.testing.assert_allclose(df["advantage"].to_numpy(), expected[i][0], rtol=1e-9, atol=1e-12)
        for j, col in enumerate(gens[i]["reward_names"]):
            np.testing.assert_array_equal(df[col].to_numpy(), gens[i]["rewards_per_func"][:, j])
    # the metrics went through TRL's logging
    logged = [h for h in docs[0]["log_history"] if "rlvr/m_S" in h]
    assert len(logged) == len(gens)
    if metrics:
        for h, (_, m) in zip(logged, expected):
            for k, v in m.items():
                assert h[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def run_here(tmp_path, name, *, base=GRPOTrainer, reward="binary", cfg=None, **kw):
    out = str(tmp_path / name)
    tr = T.build(base, out, reward=reward, cfg=cfg, **kw)
    tr.train()
    return tr, out


def doc_of(tr):
    return T.from_jsonable(json.loads(json.dumps(T.to_jsonable(tr))))


# -------------------------------------------------------- one process
def test_group_level_family_grad_accumulation_and_iterations(tmp_path):
    tr, out = run_here(tmp_path, "asym", cfg=dict(gradient_accumulation_steps=2, num_iterations=2, max_steps=4),
                       advantage="asym_grpo", advantage_params={"delta": 0.5})
    assert len(tr.gens) == 2  # one generation batch per steps_per_generation × num_iterations
    check([doc_of(tr)], T.parquet_tables(out), family("asym_grpo", delta=0.5))


def test_batch_level_family(tmp_path):
    tr, out = run_here(tmp_path, "rpp", advantage="reinforce_pp")
    check([doc_of(tr)], T.parquet_tables(out), family("reinforce_pp"))


def test_schedule_fade_advances_once_per_generation_batch(tmp_path):
    tr, out = run_here(tmp_path, "fade", cfg=dict(max_steps=3), schedule="fade", schedule_params=dict(FADE))
    check([doc_of(tr)], T.parquet_tables(out), fade(**FADE))
    assert tr.rlvr_policy.schedule.step == 3
    assert 0.3 < tr.rlvr_policy.schedule.delta < 1  # the entropy signal moved δ


def test_family_with_response_lengths(tmp_path):
    tr, out = run_here(tmp_path, "t2t", cfg=dict(max_steps=1), advantage="t2t")
    gen = tr.gens[0]
    A = advantages.get("t2t")(T.weighted(gen).reshape(-1, G), lengths=gen["lengths"].reshape(-1, G)).ravel()
    np.testing.assert_allclose(gen["local"], A, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(T.parquet_tables(out)[1]["advantage"].to_numpy(), A, rtol=1e-12, atol=1e-12)


def test_fade_log_runs_over_the_generation_batches_of_the_run(tmp_path):
    # max_steps comes from the epochs (known only in train()); one generation batch per
    # num_iterations = 2 optimizer steps
    tr, _ = run_here(tmp_path, "log", n_prompts=4, cfg=dict(max_steps=-1, num_train_epochs=1, num_iterations=2),
                     schedule="fade-log")
    sched = tr.rlvr_policy.schedule
    assert tr.state.max_steps == 2 * len(tr.gens) >= 4
    assert sched.T == len(tr.gens) == sched.step
    assert sched.alpha == pytest.approx(sched.alpha_min) and sched.delta == pytest.approx(sched.delta_min)


def test_evaluation_uses_the_current_advantage_and_does_not_move_the_schedule(tmp_path):
    tr, _ = run_here(tmp_path, "eval", eval_prompts=4, cfg=dict(max_steps=2, eval_strategy="steps", eval_steps=1,
                                                                per_device_eval_batch_size=8),
                     schedule="fade", schedule_params=dict(FADE))
    train = [g for g in tr.gens if g["mode"] == "train"]
    evals = [g for g in tr.gens if g["mode"] == "eval"]
    assert len(train) == 2 and evals and tr.rlvr_policy.schedule.step == 2
    sched = schedules.get("fade", **FADE)
    for g in tr.gens:  # the schedule's advantage as it stood at each batch
        R = T.weighted(g).reshape(-1, G)
        if g["mode"] == "train":
            entropy = [h["entropy"] for h in tr.state.log_history if "entropy" in h and h["step"] == g["step"]]
            sched.update(reward_mean=float(R.mean()), entropy=entropy[0] if entropy else FADE["H0"])
        np.testing.assert_allclose(g["local"], sched.advantage(R).ravel(), rtol=1e-6, atol=1e-7)
    logged = [h for h in tr.state.log_history if "eval_rlvr/m_S" in h]
    assert logged and all("eval_rlvr/alpha" not in h for h in logged)


def ragged(adv, r, *, threshold=None):
    """The registry on each group's scored rows (groups of one: 0), NaN rows 0."""
    A = np.zeros(r.size)
    for g in range(r.size // G):
        rows = np.arange(g * G, (g + 1) * G)
        rows = rows[~np.isnan(r[rows])]
        if rows.size < 2:
            continue
        x = r[rows]
        if threshold is not None:
            A[rows] = adv(np.where(x >= threshold, 1.0, 0.0))
        else:
            A[rows] = adv.graded_call(x)
    return A


@pytest.mark.parametrize("name,threshold", [("asym_grpo", 0.5), ("dr_grpo", None)])
def test_real_rewards_and_unscorable_rows(tmp_path, name, threshold):
    params = {"delta": 0.5} if name == "asym_grpo" else {}
    tr, out = run_here(tmp_path, name, reward="none", cfg=dict(per_device_train_batch_size=16, max_steps=1),
                       advantage=name, advantage_params=params, success_threshold=threshold)
    adv = advantages.get(name, **params)
    gen = tr.gens[0]
    r = T.weighted(gen)
    assert np.isnan(r).any() and np.any((r > 0) & (r < 1))  # the case is exercised
    A = ragged(adv, r, threshold=threshold)
    np.testing.assert_allclose(gen["local"], A, rtol=1e-6, atol=1e-7)
    assert np.all(gen["local"][np.isnan(r)] == 0)
    table = T.parquet_tables(out)[1]
    np.testing.assert_allclose(table["advantage"].to_numpy(), A, rtol=1e-12, atol=1e-12)
    if threshold is not None:
        assert "rlvr/m_S" in gen["metrics"] and "rlvr/frac_all_wrong" in gen["metrics"]
    else:  # masses need a success/failure split: left out, not NaN
        assert set(gen["metrics"]) == {"rlvr/abs_adv_sum"}


def test_checkpoint_and_resume_restore_the_schedule(tmp_path):
    cfg = dict(max_steps=4, save_strategy="steps", save_steps=2)
    a, out_a = run_here(tmp_path, "a", cfg=cfg, schedule="fade", schedule_params=dict(FADE))
    saved = {s: json.load(open(os.path.join(out_a, f"checkpoint-{s}", STATE_FILE))) for s in (2, 4)}
    assert saved[4]["policy"] == json.loads(json.dumps(a.rlvr_policy.state_dict()))
    assert saved[2]["policy"]["state"]["step"] == 2 and saved[4]["policy"]["state"]["step"] == 4
    # "killed" after checkpoint-2: a new trainer resumes from it
    ckpt = str(tmp_path / "kept" / "checkpoint-2")
    shutil.copytree(os.path.join(out_a, "checkpoint-2"), ckpt)
    b = T.build(GRPOTrainer, str(tmp_path / "b"), cfg=cfg, schedule="fade", schedule_params=dict(FADE))
    b.train(resume_from_checkpoint=ckpt)
    assert b.resumed_state == saved[2]["policy"]
    assert len(b.gens) == 2
    final = b.rlvr_policy.state_dict()
    for k, v in saved[4]["policy"]["state"].items():
        assert final["state"][k] == pytest.approx(v, rel=1e-9), k
    assert final["entropy"] == pytest.approx(saved[4]["policy"]["entropy"], rel=1e-9)


@pytest.mark.parametrize("scale,name,params", [("group", "grpo", {"ddof": 1, "eps": 1e-4}),
                                                ("batch", "grpo_batch", {}), ("none", "dr_grpo", {})])
def test_trl_scale_rewards_are_registry_calls(tmp_path, scale, name, params):
    if name not in advantages.names():
        pytest.skip(f"{name} is not registered")
    tr, out = run_here(tmp_path, scale, base=trl.GRPOTrainer, cfg=dict(max_steps=1, scale_rewards=scale))
    R = T.weighted(tr.gens[0]).reshape(-1, G)
    A = advantages.get(name, **params)(R).ravel()
    np.testing.assert_allclose(T.parquet_tables(out)[1]["advantage"].to_numpy(), A, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tr.gens[0]["local"], A, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- refusals
@pytest.mark.parametrize("kw,msg", [
    (dict(advantage="nope"), "unknown advantage 'nope'; allowed: "),
    (dict(advantage="asym_grpo", advantage_params={"gamma": 1}), r"asym_grpo: unknown parameter\(s\) gamma; allowed: delta"),
    (dict(advantage="asym_grpo", advantage_params={"delta": 0}), "asym_grpo: delta must be a finite number > 0, got 0"),
    (dict(schedule="nope"), "unknown schedule 'nope'; allowed: "),
    (dict(schedule="fade", schedule_params={"gamma": 1}), r"unknown parameter\(s\) gamma for schedule 'fade'"),
    (dict(), "give exactly one of advantage"),
    (dict(advantage="grpo", schedule="fade"), "give exactly one of advantage"),
    (dict(advantage="grpo", singleton="one"), "singleton must be one of 'zero', 'raw'; got 'one'"),
])
def test_refused_before_the_model_is_used(kw, msg):
    with pytest.raises(ValueError, match=msg):
        GRPOTrainer(model=None, **kw)


@pytest.mark.parametrize("reward,cfg,kw,msg", [
    ("binary", {}, dict(advantage="passk_chen", advantage_params={"k": 8}),
     r"num_generations must be >= 8 for advantages.get\('passk_chen', k=8\), got 4"),
    (["binary", "real"], {}, dict(advantage="asym_grpo"),
     r"success_threshold is required by 'asym_grpo'.*weighted sum of 2 reward functions"),
    ("binary", dict(reward_weights=[2.0]), dict(schedule="fade"),
     r"success_threshold is required by 'fade'.*weights \[2.0\]"),
    ("binary", dict(multi_objective_aggregation="normalize_then_sum"), dict(advantage="grpo"),
     "multi_objective_aggregation must be 'sum_then_normalize'"),
])
def test_refused_in_init(tmp_path, reward, cfg, kw, msg):
    with pytest.raises(ValueError, match=msg):
        T.build(GRPOTrainer, str(tmp_path / "x"), reward=reward, cfg=cfg, **kw)


def test_weighted_sum_accepted_with_a_threshold_or_a_graded_family(tmp_path):
    T.build(GRPOTrainer, str(tmp_path / "a"), reward=["binary", "real"], advantage="asym_grpo",
            success_threshold=1.0)
    T.build(GRPOTrainer, str(tmp_path / "b"), reward=["binary", "real"], advantage="rloo")


def test_real_rewards_without_threshold_refused_at_step(tmp_path):
    tr = T.build(GRPOTrainer, str(tmp_path / "x"), reward="real", cfg=dict(max_steps=1), advantage="asym_grpo")
    with pytest.raises(ValueError, match=r"success_threshold is required by 'asym_grpo'.*real-valued"):
        tr.train()


# --------------------------------------------------------- two processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    cfg_resume = dict(max_steps=2, save_strategy="steps", save_steps=1)
    runs = {
        "asym": dict(cfg=dict(gradient_accumulation_steps=2, num_iterations=2, max_steps=4),
                     trainer=dict(advantage="asym_grpo", advantage_params={"delta": 0.5})),
        "rpp": dict(cfg=dict(per_device_train_batch_size=4), trainer=dict(advantage="reinforce_pp")),
        "fade": dict(cfg=dict(max_steps=3), trainer=dict(schedule="fade", schedule_params=dict(FADE))),
        "ckpt": dict(cfg=cfg_resume, trainer=dict(schedule="fade", schedule_params=dict(FADE))),
        "resumed": dict(cfg=cfg_resume, trainer=dict(schedule="fade", schedule_params=dict(FADE)),
                        resume_from=str(tmp / "ckpt" / "checkpoint-1")),
    }
    spec = {"runs": [dict(name=k, out=str(tmp / k), **v) for k, v in runs.items()]}
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), os.path.join(ROOT, "tests", "integrations", "trl_dist.py"), str(tmp / "spec.json")]
    proc = subprocess.run(cmd, env=env, cwd=str(tmp), capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    def docs(name):
        return [T.from_jsonable(json.load(open(tmp / name / f"rank{r}.json"))) for r in (0, 1)]

    return tmp, docs


@pytest.mark.parametrize("name,expect", [("asym", family("asym_grpo", delta=0.5)), ("rpp", family("reinforce_pp")),
                                         ("fade", fade(**FADE))])
def test_two_processes(two_processes, name, expect):
    tmp, docs = two_processes
    d = docs(name)
    check(d, T.parquet_tables(str(tmp / name)), expect)
    assert d[0]["state"] == d[1]["state"]


def test_two_processes_resume(two_processes):
    tmp, docs = two_processes
    saved = {s: json.load(open(tmp / "ckpt" / f"checkpoint-{s}" / STATE_FILE)) for s in (1, 2)}
    a, b = docs("ckpt"), docs("resumed")
    assert a[0]["state"] == a[1]["state"] == saved[2]["policy"]
    assert b[0]["resumed_state"] == b[1]["resumed_state"] == saved[1]["policy"]
    assert b[0]["state"]["state"]["step"] == 2 and b[0]["state"] == b[1]["state"]
    for k, v in saved[2]["policy"]["state"].items():
        assert b[0]["state"]["state"][k] == pytest.approx(v, rel=1e-9), k


# --------------------------------------------------------------- example
def test_example_script(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "trl_grpo.py"), "--out", str(out),
                           "--steps", "2", "--advantage", "asym_grpo", "--param", "delta=0.3"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "completions tables: 2" in proc.stdout
    adv = advantages.get("asym_grpo", delta=0.3)  # --advantage / --param reached the trainer
    for df in T.parquet_tables(str(out)).values():
        R = df["starts_with_digit"].to_numpy().reshape(-1, 8)
        np.testing.assert_allclose(df["advantage"].to_numpy(), adv(R).ravel(), rtol=1e-12, atol=1e-12)
    state = json.load(open(out / "trainer_state.json"))  # saved at the end: rlvr-audit OUT --metrics reads it
    assert state["global_step"] == 2 and any("rlvr/m_S" in h for h in state["log_history"])


@pytest.mark.parametrize("flags, message", [(["--param", "delta"], "NAME=VALUE"),
                                            (["--advantage", "no_such_family"], "no_such_family")])
def test_example_script_refuses_bad_flags(tmp_path, flags, message):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "trl_grpo.py"), "--out",
                           str(tmp_path / "run"), *flags], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "run").exists()
