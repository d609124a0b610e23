"""The trainer's data options on the tiny-cpu preset: DAPO dynamic sampling (groups without signal
dropped, the batch refilled up to a cap on rounds) and Over-Sharpening App. I's filtering baseline
(the easiest share of the training queries by the initial policy's solve rate dropped)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, models, rollout, tasks, trainer
from simulations.grpo.config import LATER_SETTINGS
from tests.simulations.grpo.test_trainer import FAST, TIMING, _records, _weights, base, metrics_frame, run_crash_resume  # noqa: F401 (fixture)

DS = ["groups_drawn", "groups_dropped", "refill_rounds", "groups_without_signal"]


def test_options_off_are_the_run_without_them(base, tmp_path):  # noqa: F811
    common = dict(init=str(base), steps=3, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "absent"), **common))
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "off"), dynamic_sampling=False, max_refill_rounds=3,
                                     drop_easiest=0.0, filter_queries=5, filter_samples=3, **common))
    a, b = metrics_frame(tmp_path / "absent"), metrics_frame(tmp_path / "off")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert list(a.columns) == [c for c in trainer.METRIC_COLUMNS if c not in TIMING]   # no new columns
    wa, wb = (_weights(tmp_path / r / ck.checkpoint_name(3)) for r in ("absent", "off"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not (tmp_path / "off" / trainer.QUERY_FILTER_FILE).exists()
    # a run written before the options existed (its run_config.json lacks them) resumes
    path = tmp_path / "absent" / "run_config.json"
    doc = json.loads(path.read_text())
    doc["settings"] = {k: v for k, v in doc["settings"].items() if k not in LATER_SETTINGS}
    path.write_text(json.dumps(doc))
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "absent"), resume=True, **{**common, "steps": 4}))
    assert len(metrics_frame(tmp_path / "absent")) == 4


def test_dynamic_sampling_updates_on_groups_with_signal_only(base, tmp_path):  # noqa: F811
    cap = 2
    cfg = trainer.GRPOConfig(out=str(tmp_path / "ds"), init=str(base), steps=6, dynamic_sampling=True,
                             max_refill_rounds=cap, **FAST)
    recs = _records(cfg)
    B, G = FAST["batch_size"], FAST["group_size"]
    rows = [json.loads(line) for line in (tmp_path / "ds" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(recs) == 6
    for rec, row in zip(recs, rows):
        assert rec.rewards.shape == (B, G)
        signal = rec.rewards.max(1) > rec.rewards.min(1)          # recomputed, not trainer.has_signal
        assert row["groups_drawn"] == B + row["groups_dropped"] and row["groups_dropped"] >= 0
        assert 0 <= row["refill_rounds"] <= cap
        assert row["groups_without_signal"] == int((~signal).sum())
        if row["groups_without_signal"]:                          # only when the cap was reached
            assert row["refill_rounds"] == cap
        else:
            assert signal.all()
        if row["refill_rounds"] == 0:
            assert row["groups_dropped"] == 0
        log = pq.read_table(tmp_path / "ds" / trainer.ROLLOUT_DIR / trainer.rollout_log_name(rec.step)).to_pandas()
        np.testing.assert_array_equal(log["reward"].to_numpy().reshape(B, G), rec.rewards)
    # the short run dropped groups and refilled the batch at least once
    assert sum(r["groups_dropped"] for r in rows) > 0 and any(r["refill_rounds"] > 0 for r in rows)


def test_dynamic_sampling_cap_zero_keeps_the_first_batch(base, tmp_path):  # noqa: F811
    """With no refill round the batch is the one drawn, groups without signal included: the run is
    the run without the option, plus the counts."""
    common = dict(init=str(base), steps=3, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "off"), **common))
    recs = _records(trainer.GRPOConfig(out=str(tmp_path / "cap0"), dynamic_sampling=True, max_refill_rounds=0,
                                       **common))
    on = metrics_frame(tmp_path / "cap0")
    pd.testing.assert_frame_equal(on.drop(columns=DS), metrics_frame(tmp_path / "off"), check_exact=True)
    assert (on["groups_drawn"] == FAST["batch_size"]).all() and (on[["groups_dropped", "refill_rounds"]] == 0).all().all()
    no_signal = [int((r.rewards.max(1) == r.rewards.min(1)).sum()) for r in recs]
    assert on["groups_without_signal"].tolist() == no_signal


def test_dynamic_sampling_resume_is_bit_identical(base, tmp_path):  # noqa: F811
    common = dict(init=str(base), steps=5, checkpoint_every=2, log_every=1, dynamic_sampling=True,
                  max_refill_rounds=3, **FAST)
    a, b = run_crash_resume(tmp_path, common)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a["groups_dropped"].sum() > 0      # refills happened, before and after the checkpoint
    for step in (4, 5):
        wa, wb = _weights(tmp_path / "a" / ck.checkpoint_name(step)), _weights(tmp_path / "b" / ck.checkpoint_name(step))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_drop_easiest_drops_the_easiest_quarter(base, tmp_path):  # noqa: F811
    n, k = 20, 4
    recs = _records(trainer.GRPOConfig(out=str(tmp_path / "f"), init=str(base), steps=3, drop_easiest=0.25,
                                       filter_queries=n, filter_samples=k, **FAST))
    doc = json.loads((tmp_path / "f" / trainer.QUERY_FILTER_FILE).read_text())
    assert doc["fraction"] == 0.25 and doc["samples"] == k and len(doc["queries"]) == n
    rates = np.array([q["solve_rate"] for q in doc["queries"]])
    dropped = np.array([q["dropped"] for q in doc["queries"]])
    np.testing.assert_allclose(rates * k, np.round(rates * k))     # shares of k rollouts
    assert 0 < rates.mean() < 1 and len(set(rates)) > 1               # a spread to rank
    # the rates are the initial policy's: the same draws replayed outside the trainer (pool from the
    # generator [seed, 3], then k rollouts per query from a torch generator seeded by its next draw)
    task = tasks.get("sort", difficulty=3)
    rng = np.random.default_rng([0, 3])
    pool = task.sample(rng, n)
    assert [p.prompt for p in pool] == [q["prompt"] for q in doc["queries"]]
    model, tok = models.load_policy(base, device="cpu")
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    ids, mask = rollout.encode_prompts(tok, [p.prompt for p in pool], repeat=k)
    ro = rollout.sample(model, ids, mask, max_new_tokens=task.max_answer_len() + 2, eos_id=tok.eos_token_id,
                        pad_id=tok.pad_token_id, generator=gen)
    texts, valid = rollout.decode_responses(tok, ro)
    ok = np.asarray(task.verify([p for p in pool for _ in range(k)], texts)) & valid.numpy()
    np.testing.assert_array_equal(rates, ok.reshape(n, k).mean(1))
    # independent recomputation: the floor(n/4) highest rates, ties to the query drawn first
    ranked = sorted(range(n), key=lambda i: (-rates[i], i))[:math.floor(0.25 * n)]
    assert sorted(ranked) == np.flatnonzero(dropped).tolist()
    assert rates[dropped].min() >= rates[~dropped].max()
    # training draws only the queries kept
    kept = {q["prompt"] for q in doc["queries"] if not q["dropped"]}
    for rec in recs:
        log = pq.read_table(tmp_path / "f" / trainer.ROLLOUT_DIR / trainer.rollout_log_name(rec.step))
        assert set(log.column("prompt").to_pylist()) <= kept
    # the helper itself
    np.testing.assert_array_equal(trainer.easiest(rates, 0.25), sorted(ranked))
    assert trainer.easiest(rates, 0.0).size == 0


@pytest.mark.parametrize("argv, message", [
    (["--dynamic-sampling", "--max-refill-rounds", "-1"], "--max-refill-rounds must be an integer >= 0, got -1"),
    (["--drop-easiest", "1"], "--drop-easiest must be a finite number >= 0 and < 1, got 1"),
    (["--drop-easiest", "-0.25"], "--drop-easiest must be a finite number >= 0 and < 1, got -0.25"),
    (["--drop-easiest", "0.25", "--filter-samples", "0"], "--filter-samples must be an integer >= 1, got 0"),
])
def test_bad_data_options_are_refused_with_the_flag(base, tmp_path, capsys, argv, message):  # noqa: F811
    out = tmp_path / "run"
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), "--device", "cpu", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match=r"^max_refill_rounds must be an integer >= 0, got -1"):
        trainer.GRPOConfig(out=str(out), max_refill_rounds=-1).validate()
