"""Greedy decoding in ``rlvr-train eval`` (``--temperature 0``): argmax tokens, the same completions as
transformers' ``generate(do_sample=False)``, independent of the seed, and the greedy accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from simulations.grpo import cli, evaluate, models, rollout, sft, tasks
from simulations.grpo.config import SFTConfig

CPU = dict(device="cpu", threads=1, progress=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A tiny-cpu model after a short SFT on 3-digit sorting (solves part of the held-out set, ~5 s)."""
    out = tmp_path_factory.mktemp("greedy") / "sft"
    return sft.train_sft(SFTConfig(out=str(out), task="sort", difficulty=3, target_solve_rate=0.3, eval_every=25,
                                   eval_problems=32, eval_samples=2, threads=1, device="cpu", quiet=True))


@pytest.fixture(scope="module")
def policy(ckpt):
    model, tok = models.load_policy(ckpt, device="cpu", what="checkpoint")
    return model.eval(), tok


def _prompts(task: tasks.Task) -> list[str]:
    # held-out prompts and shorter ones (left padding of different widths)
    return [p.prompt for p in task.heldout_set(12, seed=0)] + ["sort:1=", "sort:21=", "sort:4321="]


def test_greedy_decode_equals_transformers_generate(policy):
    model, tok = policy
    task = tasks.get("sort", 3)
    ids, mask = rollout.encode_prompts(tok, _prompts(task))
    T = task.max_answer_len() + 2
    for use_cache in (True, False):
        ro = evaluate.greedy_decode(model, ids, mask, max_new_tokens=T, eos_id=tok.eos_token_id,
                                    pad_id=tok.pad_token_id, use_cache=use_cache)
        ref = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=T,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[:, ids.shape[1]:]
        L = ref.shape[1]
        assert torch.equal(ro.response_ids[:, :L], ref)
        assert bool((ro.response_ids[:, L:] == tok.pad_token_id).all())
    # the comparison covers rows that stop at eos at different lengths and rows that do not stop
    lengths = ro.lengths.tolist()
    assert bool(ro.completed.any()) and len(set(lengths)) > 1


def test_greedy_tokens_are_the_argmax_of_a_full_forward_pass(policy):
    model, tok = policy
    task = tasks.get("sort", 3)
    ids, mask = rollout.encode_prompts(tok, _prompts(task))
    ro = evaluate.greedy_decode(model, ids, mask, max_new_tokens=5, eos_id=tok.eos_token_id,
                                pad_id=tok.pad_token_id)
    full, fmask, pos = ro.full()
    P = ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=fmask, position_ids=pos, use_cache=False).logits
    logits = logits[:, P - 1:-1].float()                           # the distribution of each response token
    m = ro.response_mask.bool()
    assert torch.equal(logits.argmax(-1)[m], ro.response_ids[m])
    # the recorded entropy is that of the policy's next-token distribution (temperature 1)
    H = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(ro.entropy[m], H[m], rtol=1e-4, atol=1e-5)
    assert float(ro.entropy[~m].abs().max()) == 0.0


def test_greedy_decoding_uses_no_randomness(policy):
    model, tok = policy
    ids, mask = rollout.encode_prompts(tok, _prompts(tasks.get("sort", 3)))
    kw = dict(max_new_tokens=5, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a = evaluate.greedy_decode(model, ids, mask, **kw)
    assert torch.equal(torch.get_rng_state(), state)                 # the global generator is untouched
    torch.manual_seed(1)
    b = evaluate.greedy_decode(model, ids, mask, **kw)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)


def test_greedy_accuracy_against_generate(ckpt):
    res = evaluate.evaluate(ckpt, temperature=0, problems=40, **CPU)
    assert res.decoding == "greedy" and res.n == 1 and res.problems == 40
    assert res.greedy_accuracy == res.pass_at_k[1] == res.solve_rate
    assert res.answer_entropy == 0.0 and res.token_entropy > 0
    # independently: transformers' Auto classes, generate(do_sample=False), the task's verifier
    task = tasks.get("sort", 3)
    model = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    prompts = list(res.per_problem["prompt"])
    enc = tok(prompts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=task.max_answer_len() + 2,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    resp = out[:, enc["input_ids"].shape[1]:].tolist()
    special = set(tok.all_special_ids)
    texts, valid = [], []
    for row in resp:
        end = row.index(tok.eos_token_id) if tok.eos_token_id in row else None
        body = row[:end] if end is not None else row
        valid.append(end is not None and not special & set(body))
        texts.append(tok.decode(body, skip_special_tokens=True))
    problems = [tasks.Problem(p, a) for p, a in zip(prompts, res.per_problem["answer"])]
    ok = np.asarray(task.verify(problems, texts)) & np.array(valid)
    np.testing.assert_array_equal(res.per_problem["correct"].to_numpy(), ok.astype(int))
    assert res.greedy_accuracy == pytest.approx(ok.mean())
    assert 0 < res.greedy_accuracy < 1                              # a non-trivial model


def test_greedy_accuracy_does_not_depend_on_the_seed(ckpt):
    # the whole held-out split (100 problems of 3-digit sorting) under two seeds: same problems, same answers
    a = evaluate.evaluate(ckpt, temperature=0, problems=500, seed=0, **CPU).per_problem
    b = evaluate.evaluate(ckpt, temperature=0, problems=500, seed=1, **CPU).per_problem
    assert set(a.prompt) == set(b.prompt) and list(a.prompt) != list(b.prompt)
    a, b = a.sort_values("prompt").reset_index(drop=True), b.sort_values("prompt").reset_index(drop=True)
    np.testing.assert_array_equal(a.correct.to_numpy(), b.correct.to_numpy())


def test_greedy_settings_are_checked(ckpt):
    with pytest.raises(ValueError, match=r"^n must be 1 with temperature 0 \(greedy decoding"):
        evaluate.evaluate(ckpt, temperature=0, n=4, problems=2, **CPU)
    with pytest.raises(ValueError, match=r"^k must be 1 with temperature 0 \(greedy decoding.*got 1 8$"):
        evaluate.evaluate(ckpt, temperature=0, k=[1, 8], problems=2, **CPU)
    with pytest.raises(ValueError, match=r"^temperature must be a finite number >= 0, got -0.5"):
        evaluate.evaluate(ckpt, temperature=-0.5, problems=2, **CPU)
    with pytest.raises(ValueError, match=r"^temperature must be a finite number >= 0, got nan"):
        evaluate.evaluate(ckpt, temperature=float("nan"), problems=2, **CPU)
    # sampling reports no greedy accuracy
    res = evaluate.evaluate(ckpt, problems=2, n=2, **CPU)
    assert res.decoding == "sample" and res.greedy_accuracy is None
    assert res.summary()["greedy_accuracy"] is None


def test_the_command_line(ckpt, tmp_path, capsys):
    argv = ["eval", str(ckpt), "--temperature", "0", "--problems", "8", "--quiet", "--threads", "1",
            "--device", "cpu"]
    assert cli.main([*argv, "--out", str(tmp_path / "ev")]) == 0
    printed = capsys.readouterr().out
    assert "1 greedy completion" in printed and "greedy accuracy" in printed
    ev = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert ev["decoding"] == "greedy" and ev["n"] == 1 and ev["greedy_accuracy"] == ev["pass_at_k"]["1"]
    assert cli.main([*argv, "--n", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr-train: error: ") and "n must be 1 with temperature 0" in err
