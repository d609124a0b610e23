"""The GRPO trainer end to end on the tiny-cpu preset: SFT → GRPO (two advantages) → eval →
checkpoint diff; registry advantages and masses in the loop; kill-and-resume; bad settings."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from rlvr_theory import advantages, masses, schedules
from rlvr_theory.policy import Policy
from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, evaluate, sft, tasks, trainer

REQUIRED = ["step", "reward_mean", "solve_rate", "frac_all_correct", "frac_all_wrong", "m_S", "m_F", "entropy",
            "clip_frac_low", "clip_frac_high", "kl", "grad_norm", "head_delta_norm", "response_len_mean",
            "step_time", "tokens_per_s", "alpha", "delta"]
TIMING = ["step_time", "tokens_per_s", "rollout_time"]
FAST = dict(task="sort", difficulty=3, device="cpu", threads=1, quiet=True, batch_size=4, group_size=4)


@pytest.fixture(scope="module")
def base(sft_sort3) -> Path:
    """An SFT checkpoint of the tiny-cpu preset on 3-digit sorting (``conftest.sft_sort3``, built once)."""
    return sft_sort3


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _records(cfg: trainer.GRPOConfig) -> list[trainer.StepRecord]:
    recs: list[trainer.StepRecord] = []
    trainer.train(cfg, callback=recs.append)
    return recs


def _check_metrics_against_rewards(recs, rows):
    for rec, row in zip(recs, rows):
        r = rec.rewards
        X = (r == 1).sum(-1)
        assert row["step"] == rec.step
        assert row["reward_mean"] == pytest.approx(r.mean()) and row["solve_rate"] == pytest.approx((r == 1).mean())
        assert row["frac_all_correct"] == pytest.approx((X == r.shape[1]).mean())
        assert row["frac_all_wrong"] == pytest.approx((X == 0).mean())
        # advantages fed to the loss = the registry's on the same rewards; masses = of_group
        adv = advantages.get(rec.advantage.name, **rec.advantage.params)
        np.testing.assert_array_equal(rec.advantages, adv(r))
        m = masses.of_group(adv, r)
        assert row["m_S"] == pytest.approx(float(m.m_S.mean()), abs=1e-15)
        assert row["m_F"] == pytest.approx(float(m.m_F.mean()), abs=1e-15)
        assert row["response_len_mean"] == pytest.approx(rec.lengths.mean())


def test_rollout_kv_cache_matches_recomputation(base):
    """Left-padded prompts of different lengths: cached and uncached sampling draw the same tokens,
    and the batched log-probs equal those of each sequence run alone without padding."""
    from simulations.grpo import models, rollout

    model, tok = models.load_policy(base)
    prompts = ["sort:312=", "7+5=", "sort:9=", "count a:ab="]
    ids, mask = rollout.encode_prompts(tok, prompts, repeat=3)
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, return_entropy=True)
    with warnings.catch_warnings():  # the cache goes in under the keyword this transformers supports
        warnings.simplefilter("error", FutureWarning)
        a = rollout.sample(model, ids, mask, generator=torch.Generator().manual_seed(5), **kw)
        b = rollout.sample(model, ids, mask, generator=torch.Generator().manual_seed(5), use_cache=False, **kw)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)
    with torch.no_grad():
        logp, ent = rollout.token_logprobs(model, a)
        for i in range(len(prompts) * 3):
            n = int(a.response_mask[i].sum())
            seq = torch.cat([ids[i][mask[i].bool()], a.response_ids[i, :n]])[None]
            lp = torch.log_softmax(model(input_ids=seq).logits[0, -n - 1:-1].float(), -1)
            alone = lp.gather(-1, a.response_ids[i, :n, None]).squeeze(-1)
            torch.testing.assert_close(logp[i, :n], alone, rtol=1e-5, atol=1e-5)
    # the sampler's entropies are those of the recomputed distributions
    m = a.response_mask.bool()
    torch.testing.assert_close(a.entropy[m], ent[m], rtol=1e-4, atol=1e-4)
    # eos ends a response: nothing but padding after it, and `completed` says so
    for i in range(len(prompts) * 3):
        r = a.response_ids[i].tolist()
        if tok.eos_token_id in r:
            j = r.index(tok.eos_token_id)
            assert a.completed[i] and all(x == tok.pad_token_id for x in r[j + 1:]) and a.lengths[i] == j + 1


def test_cache_keyword_follows_the_forward_signature():
    """``cache=`` where ``forward`` takes it (transformers that deprecate ``past_key_values``),
    ``past_key_values=`` on a model written against an earlier API."""
    from simulations.grpo import rollout

    class Old(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False):
            return input_ids

    assert rollout.cache_keyword(Old()) == "past_key_values" and rollout.cache_keyword(New()) == "cache"


def test_answer_entropy_by_hand():
    # problem 0 answers 1,1,2,NA -> p = 1/2, 1/4, 1/4: H = 1.5 ln 2; problem 1 answers 5,5,5,5 -> 0
    h = evaluate.answer_entropy(np.array([0, 0, 0, 0, 1, 1, 1, 1]), ["1", "1", "2", "NA", "5", "5", "5", "5"], 2)
    np.testing.assert_allclose(h, [1.5 * math.log(2), 0.0], rtol=1e-14)


def test_sft_grpo_two_advantages_eval_and_diff(base, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    runs = {}
    for name, adv, params in [("grpo", "grpo", {}), ("asym", "asym_grpo", {"delta": 0.5})]:
        cfg = trainer.GRPOConfig(out=str(tmp_path / name), init=str(base), advantage=adv, params=params,
                                 steps=3, checkpoint_every=2, **FAST)
        recs = _records(cfg)
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 3
        _check_metrics_against_rewards(recs, rows)
        header = (tmp_path / name / "metrics.csv").read_text().splitlines()[0].split(",")
        assert header[:len(REQUIRED)] == REQUIRED
        assert [p.name for _, p in ck.list_checkpoints(tmp_path / name)] == ["checkpoint-000002", "checkpoint-000003"]
        if adv == "asym_grpo":
            assert all(r["delta"] == 0.5 and r["alpha"] is None for r in rows)
            assert all(r["m_F"] == pytest.approx(2 * r["m_S"]) for r in rows)  # m_S/m_F = δ (FADE Sec. 2)
        runs[name] = tmp_path / name / "checkpoint-000003"

    # real Hugging Face checkpoints, loadable offline with the Auto classes
    ckpt = runs["asym"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.json", "task.json"} <= \
        set(os.listdir(ckpt))
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    tok = AutoTokenizer.from_pretrained(ckpt)
    assert tok.decode(tok.encode("sort:312=123", add_special_tokens=False)) == "sort:312=123"
    assert model.get_output_embeddings().weight.shape[0] == len(tok)
    w0, wg, wa = _weights(base), _weights(runs["grpo"]), _weights(runs["asym"])
    assert not torch.equal(w0["lm_head.weight"], wa["lm_head.weight"])
    assert not torch.equal(wg["lm_head.weight"], wa["lm_head.weight"])

    res = evaluate.evaluate(ckpt, k=[1, 2], n=4, problems=8, device="cpu", threads=1, progress=False)
    assert res.problems == 8 and list(res.per_problem["n"]) == [4] * 8
    assert res.pass_at_k[1] == pytest.approx(res.per_problem["correct"].sum() / 32)
    assert 0 <= res.answer_entropy <= math.log(4) and res.token_entropy > 0

    from analysis import diff as weight_diff

    rep = weight_diff.diff(str(base), [str(runs["grpo"]), str(runs["asym"])], device="cpu", layers="head",
                           progress=False)
    head = rep["checkpoints"][1]["output_head"]
    dW = (wa["lm_head.weight"] - w0["lm_head.weight"]).double()
    assert head["l2"] == pytest.approx(float(torch.linalg.vector_norm(dW)), rel=1e-6)


def test_fade_schedule_and_batch_level_advantage(base, tmp_path):
    # FADE: α, δ follow an independent replay of the schedule on the logged signals (Alg. 2)
    cfg = trainer.GRPOConfig(out=str(tmp_path / "fade"), init=str(base), schedule="fade",
                             params={"H_target": 0.2}, steps=3, checkpoint_every=3, **FAST)
    recs = _records(cfg)
    rows = pd.read_csv(tmp_path / "fade" / "metrics.csv")
    replay = schedules.FADESchedule(H0=float(rows["entropy_nll"][0]), H_target=0.2)
    for rec, (_, row) in zip(recs, rows.iterrows()):
        replay.update(reward_mean=row["reward_mean"], entropy=row["entropy_nll"])
        assert row["alpha"] == pytest.approx(replay.alpha) and row["delta"] == pytest.approx(replay.delta)
        np.testing.assert_allclose(rec.advantages, advantages.get("fade", alpha=replay.alpha,
                                                                  delta=replay.delta)(rec.rewards), rtol=1e-12)
    # A-GRAE with ω = None reads the whole batch [B, G]
    cfg = trainer.GRPOConfig(out=str(tmp_path / "agrae"), init=str(base), advantage="agrae", steps=2,
                             checkpoint_every=2, **FAST)
    recs = _records(cfg)
    rows = [json.loads(line) for line in (tmp_path / "agrae" / "metrics.jsonl").read_text().splitlines()]
    assert recs[0].advantage.batch_level
    _check_metrics_against_rewards(recs, rows)


class _Crash(Exception):
    pass


def metrics_frame(run: Path) -> pd.DataFrame:
    """A run's ``metrics.csv`` without the timing columns (the part a rerun reproduces)."""
    return pd.read_csv(run / "metrics.csv").drop(columns=TIMING)


def run_crash_resume(tmp_path: Path, common: dict, *, crash_at: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train ``common`` straight through into ``tmp_path/a``; into ``tmp_path/b`` crash after step
    ``crash_at`` and resume.  Returns both runs' :func:`metrics_frame`."""
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "a"), **common))

    def crash(rec):
        if rec.step == crash_at:
            raise _Crash
    with pytest.raises(_Crash):
        trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), **common), callback=crash)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), resume=True, **common))
    return metrics_frame(tmp_path / "a"), metrics_frame(tmp_path / "b")


def test_kill_and_resume_gives_identical_metrics_and_weights(base, tmp_path):
    common = dict(init=str(base), advantage="asym_grpo", params={"delta": 0.5}, steps=5, checkpoint_every=2,
                  log_every=1, ppo_epochs=2, minibatches=2, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "a"), **common))

    def crash(rec):
        if rec.step == 3:   # after checkpoint 2 and the metrics row of step 3
            raise _Crash
    with pytest.raises(_Crash):
        trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), **common), callback=crash)
    # debris of a save interrupted at step 4: a temporary dir and a checkpoint without trainer state
    (tmp_path / "b" / ".checkpoint-000004.tmp-dead").mkdir()
    (tmp_path / "b" / "checkpoint-000004").mkdir()
    assert len(pd.read_csv(tmp_path / "b" / "metrics.csv")) == 3
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), resume=True, **common))
    assert not (tmp_path / "b" / ".checkpoint-000004.tmp-dead").exists()

    a = pd.read_csv(tmp_path / "a" / "metrics.csv").drop(columns=TIMING)
    b = pd.read_csv(tmp_path / "b" / "metrics.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert (a["clip_frac_low"] + a["clip_frac_high"]).gt(0).any()   # μ = 2: clipping engaged somewhere
    for step in (4, 5):
        wa = _weights(tmp_path / "a" / ck.checkpoint_name(step))
        wb = _weights(tmp_path / "b" / ck.checkpoint_name(step))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    oa = torch.load(tmp_path / "a" / "checkpoint-000005" / "trainer_state.pt", weights_only=True)
    ob = torch.load(tmp_path / "b" / "checkpoint-000005" / "trainer_state.pt", weights_only=True)
    for sa, sb in zip(oa["optimizer"]["state"].values(), ob["optimizer"]["state"].values()):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # a changed setting is refused on resume
    with pytest.raises(ValueError, match=r"^resume: setting 'lr' differs"):
        trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), resume=True, **{**common, "lr": 1.0}))


@pytest.mark.parametrize("change, message", [
    ({"advantage": "nope"}, r"^advantage: unknown advantage 'nope'"),
    ({"group_size": 1}, r"^group_size must be an integer >= 2, got 1"),
    ({"params": {"gamma": 2.0}, "advantage": "asym_grpo"}, r"^param: asym_grpo: unknown parameter\(s\) gamma"),
    ({"schedule": "cosine"}, r"^schedule: unknown schedule 'cosine'"),
    ({"init": "NOT_A_MODEL"}, r"^init: .* is not a model directory \(no config.json\)"),
    ({"task": "verifierless"}, r"^task: 'verifierless' has no verifier"),
    ({"loss": "dpo"}, r"^loss must be one of 'ppo', 'cispo', 'grpo-n'"),
    ({"aggregation": "mean"}, r"^aggregation must be one of"),
    ({"minibatches": 3}, r"^minibatches must divide batch_size \* group_size = 16"),
])
def test_bad_configuration_is_refused_before_any_work(base, tmp_path, monkeypatch, change, message):
    class Verifierless(tasks.ExactMatchTask):
        name = "verifierless"
        alphabet = "01="

    (tmp_path / "NOT_A_MODEL").mkdir()
    (tmp_path / "NOT_A_MODEL" / "weights.txt").write_text("x")
    change = {k: (str(tmp_path / v) if v == "NOT_A_MODEL" else v) for k, v in change.items()}
    kw = {**FAST, "init": str(base), "steps": 2, **change}
    out = tmp_path / "run"
    with tasks.registered(Verifierless):
        monkeypatch.setattr(Verifierless, "verify", None)   # lost after registration: the trainer refuses it
        with pytest.raises(ValueError, match=message):
            trainer.train(trainer.GRPOConfig(out=str(out), **kw))
    assert not out.exists()


def test_cli_refuses_and_runs(base, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli.main(["grpo", "--init", str(base), "--advantage", "nope", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("rlvr-train: error: --advantage: unknown advantage 'nope'")
    assert cli.main(["grpo", "--init", str(base), "--group-size", "1", "--out", str(out)]) == 2
    assert "--group-size must be an integer >= 2" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["sft", "--task", "nope", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("rlvr-train: error: --task: unknown task 'nope'")
    assert cli.main(["eval", str(tmp_path), "--k", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr-train: error: checkpoint: ") and "is not a model directory" in err
    assert cli.main(["eval", str(base), "--k", "8", "--n", "4"]) == 2
    assert capsys.readouterr().err.startswith("rlvr-train: error: --k must be <= n = 4")
    assert not out.exists()
    args = ["--steps", "2", "--batch-size", "2", "--group-size", "2", "--checkpoint-every", "2", "--threads", "1",
            "--device", "cpu", "--quiet"]
    assert cli.main(["grpo", "--init", str(base), "--advantage", "asym_grpo", "--param", "delta=2",
                     "--out", str(out), *args]) == 0
    doc = json.loads((out / "run_config.json").read_text())
    assert {"package_version", "settings", "seed", "device", "threads"} <= set(doc)
    assert doc["kind"] == "grpo" and doc["device"] == "cpu" and doc["threads"] == 1 and doc["seed"] == 0
    cfg = doc["settings"]
    assert cfg["task"] == "sort" and cfg["difficulty"] == 3 and cfg["params"] == {"delta": 2}  # from task.json
    assert cli.main(["grpo", "--out", str(out), "--resume", "--steps", "3", "--quiet"]) == 0
    assert len(pd.read_csv(out / "metrics.csv")) == 3
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), *args]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert cli.main(["eval", str(out / "checkpoint-000003"), "--k", "1", "2", "--n", "2", "--problems", "4",
                     "--quiet", "--threads", "1", "--out", str(tmp_path / "ev")]) == 0
    printed = capsys.readouterr().out
    assert "pass@1" in printed and "answer entropy" in printed
    ev = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert set(ev["pass_at_k"]) == {"1", "2"}


def test_sweep_trains_every_run_and_tabulates_the_head(base, tmp_path):
    from simulations.grpo import sweep

    res = sweep.run_sweep(base, tmp_path / "sweep", deltas=[0.5], fade=True, eval_problems=0, quiet=True,
                          diff_layers="head",
                          steps=2, checkpoint_every=1, **{k: v for k, v in FAST.items() if k != "quiet"})
    assert set(res["runs"]) == {"asym_grpo_delta0.5", "fade"}
    assert len(pd.read_csv(tmp_path / "sweep" / "summary.csv")) == 2
    if res["table"] is None:
        pytest.skip(f"checkpoint diff unavailable: {res['table_error']}")
    t = res["table"]
    assert sorted(zip(t["run"], t["step"])) == [("asym_grpo_delta0.5", 1), ("asym_grpo_delta0.5", 2),
                                                 ("fade", 1), ("fade", 2)]
    assert t["OH"].between(0, 100).all() and t["rank-1%"].between(0, 100).all() and (t["L2"] > 0).all()


def test_fade_alpha_delta_follow_a_policy_stepped_on_the_logged_signals(base, tmp_path):
    # the trainer's α, δ are those of a Policy built and advanced here, on the run's metrics log:
    # H0 = the first step's entropy_nll, then (reward_mean, entropy_nll, step) of each row
    cfg = trainer.GRPOConfig(out=str(tmp_path / "fade"), init=str(base), schedule="fade",
                             params={"H_target": 0.2}, steps=4, checkpoint_every=4, **FAST)
    recs = _records(cfg)
    rows = [json.loads(line) for line in (tmp_path / "fade" / "metrics.jsonl").read_text().splitlines()]
    policy = Policy(schedule="fade", schedule_params={"H_target": 0.2}, steps=4, H0=rows[0]["entropy_nll"],
                    reward_values=cfg.reward_values)
    for rec, row in zip(recs, rows, strict=True):
        adv = policy.advance(reward_mean=row["reward_mean"], entropy=row["entropy_nll"], step=row["step"])
        assert (row["alpha"], row["delta"]) == (policy.scheduled_params()["alpha"], policy.scheduled_params()["delta"])
        assert rec.advantage == adv
        np.testing.assert_array_equal(rec.advantages, adv(rec.rewards))
    state = ck.read_json(tmp_path / "fade" / "checkpoint-000004" / "trainer_state.json")
    assert state["policy"] == json.loads(json.dumps(policy.state_dict())) and state["policy_H0"] == policy.H0


def _to_old_format(checkpoint: Path, params: dict) -> None:
    """Rewrite a checkpoint's trainer_state.json as the trainer wrote it before it held a Policy:
    the schedule's keyword arguments (the measured H0 among them) and state."""
    path = checkpoint / "trainer_state.json"
    state = ck.read_json(path)
    policy, H0 = state.pop("policy"), state.pop("policy_H0")
    state["schedule_kwargs"] = {"H0": H0, **params} if policy else None
    state["schedule_state"] = policy["state"] if policy else None
    ck.write_json(path, state)


@pytest.mark.parametrize("method", [{"schedule": "fade", "params": {}},   # H* = H0/2: H0 must be restored
                                    {"advantage": "asym_grpo", "params": {"delta": 0.5}}])
def test_a_checkpoint_in_the_old_format_resumes_identically(base, tmp_path, method):
    common = dict(init=str(base), steps=4, checkpoint_every=2, log_every=1, **method, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "a"), **common))

    def crash(rec):
        if rec.step == 2:
            raise _Crash
    with pytest.raises(_Crash):
        trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), **common), callback=crash)
    _to_old_format(tmp_path / "b" / "checkpoint-000002", method["params"])
    old = ck.read_json(tmp_path / "b" / "checkpoint-000002" / "trainer_state.json")
    assert "policy" not in old and ("schedule" in method) == (old["schedule_state"] is not None)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "b"), resume=True, **common))
    pd.testing.assert_frame_equal(metrics_frame(tmp_path / "a"), metrics_frame(tmp_path / "b"), check_exact=True)
    wa, wb = _weights(tmp_path / "a" / "checkpoint-000004"), _weights(tmp_path / "b" / "checkpoint-000004")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = (ck.read_json(tmp_path / r / "checkpoint-000004" / "trainer_state.json") for r in "ab")
    assert (sb["policy"], sb["policy_H0"], sb["rng"]) == (sa["policy"], sa["policy_H0"], sa["rng"])  # new format


# ---------------------------------------------------------------- end to end, and a real crash (slow)
@pytest.mark.slow  # SFT, two GRPO runs, eval and diff: 25-40 s on 2 cores
def test_rl_raises_heldout_pass_at_1_over_sft(tmp_path):
    """The full tiny-cpu path: SFT to solve rate 0.3, two GRPO runs, eval, diff (~25 s)."""
    common = dict(task="sort", difficulty=4, device="cpu", threads=1, quiet=True)
    final = sft.train_sft(sft.SFTConfig(out=str(tmp_path / "sft"), target_solve_rate=0.3, eval_every=10, **common))
    ev = dict(k=[1, 4], n=16, problems=100, device="cpu", threads=1, progress=False)
    p0 = evaluate.evaluate(final, **ev).pass_at_k[1]
    results = {}
    for name, adv, params in [("grpo", "grpo", {}), ("asym2", "asym_grpo", {"delta": 2.0})]:
        trainer.train(trainer.GRPOConfig(out=str(tmp_path / name), init=str(final), advantage=adv, params=params,
                                         steps=40, batch_size=16, group_size=8, checkpoint_every=20, **common))
        results[name] = evaluate.evaluate(tmp_path / name / "checkpoint-000040", **ev).pass_at_k[1]
    # 100 problems x 16 samples: the standard error of pass@1 is below 0.04
    assert results["grpo"] > p0 + 0.08, (p0, results)
    assert results["asym2"] > p0 + 0.08, (p0, results)
    from analysis import diff as weight_diff

    rep = weight_diff.diff(str(final), [str(tmp_path / n / "checkpoint-000040") for n in results], device="cpu",
                           layers="head", progress=False)
    assert all(c["global_l2"] > 0 for c in rep["checkpoints"])


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_identical(base, tmp_path):
    """A real crash: the training process is killed with SIGKILL after its second checkpoint."""
    args = ["--init", str(base), "--advantage", "grpo", "--steps", "8", "--checkpoint-every", "2",
            "--log-every", "1", "--batch-size", "4", "--group-size", "4", "--threads", "1", "--device", "cpu",
            "--quiet"]
    assert cli.main(["grpo", "--out", str(tmp_path / "a"), *args]) == 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen([sys.executable, "-m", "simulations.grpo", "grpo", "--out", str(tmp_path / "b"), *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (tmp_path / "b" / "checkpoint-000004" / "trainer_state.json").exists():
        assert proc.poll() is None and time.time() < deadline, "training process ended early"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "b" / "checkpoint-000008").exists()
    assert cli.main(["grpo", "--out", str(tmp_path / "b"), "--resume", "--quiet"]) == 0
    a = pd.read_csv(tmp_path / "a" / "metrics.csv").drop(columns=TIMING)
    b = pd.read_csv(tmp_path / "b" / "metrics.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    wa, wb = _weights(tmp_path / "a" / "checkpoint-000008"), _weights(tmp_path / "b" / "checkpoint-000008")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
