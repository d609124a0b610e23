"""Tasks, verifiers, splits, the task registry, the local tokenizer, and the advantage and
schedule settings of the GRPO trainer."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rlvr_plumbing import runner
from rlvr_theory import schedules
from simulations.grpo import config, tasks, tokenizer


def _solve(task: tasks.Task, prompt: str) -> str:
    """Independent solutions, parsed from the prompt text."""
    if task.name == "arith":
        a, b = map(int, re.fullmatch(r"(\d+)\+(\d+)=", prompt).groups())
        return str(a + b).zfill(task.difficulty + 1)
    if task.name == "modular":
        a, b, m = map(int, re.fullmatch(r"(\d+)\*(\d+)%(\d+)=", prompt).groups())
        return str((a * b) % m)
    if task.name == "sort":
        return "".join(sorted(re.fullmatch(r"sort:(\d+)=", prompt).group(1)))
    c, s = re.fullmatch(r"count (\w):(\w+)=", prompt).groups()
    return str(sum(ch == c for ch in s))


@pytest.mark.parametrize("name", ["arith", "modular", "sort", "count"])
def test_builtin_tasks_answers_alphabet_and_verifier(name):
    rng = np.random.default_rng(0)
    lo, hi = tasks.registry()[name].difficulty_range
    for d in (lo, hi):
        task = tasks.get(name, d)
        probs = task.sample(rng, 200)
        assert all(p.answer == _solve(task, p.prompt) for p in probs)
        assert set("".join(p.prompt + p.answer for p in probs)) <= set(task.alphabet)
        assert max(len(p.answer) for p in probs) <= task.max_answer_len()
        answers = [p.answer for p in probs]
        assert task.verify(probs, answers).all()
        wrong = [a + "0" for a in answers[:50]] + [a[:-1] for a in answers[50:100]] + [" " + a for a in answers[100:]]
        assert not task.verify(probs, wrong).any()


def test_difficulty_changes_the_problems():
    rng = np.random.default_rng(1)
    short = tasks.get("arith", 1).sample(rng, 50)
    long_ = tasks.get("arith", 4).sample(rng, 50)
    assert {len(p.prompt) for p in short} == {4} and {len(p.prompt) for p in long_} == {10}
    with pytest.raises(ValueError, match=r"^difficulty must be an integer >= 1 and <= 6, got 7 \(task 'arith'\)"):
        tasks.get("arith", 7)


def test_train_and_heldout_splits_partition_the_problem_space():
    task = tasks.get("arith", 2, heldout_fraction=0.1, split_seed=3)
    prompts = [f"{a:02d}+{b:02d}=" for a in range(100) for b in range(100)]   # every problem
    held = {p for p in prompts if task.is_heldout(p)}
    assert 0.09 < len(held) / len(prompts) < 0.11
    rng = np.random.default_rng(0)
    assert not {p.prompt for p in task.sample(rng, 2000)} & held
    assert {p.prompt for p in task.sample(rng, 500, split="heldout")} <= held
    ev = task.heldout_set(300, seed=0)
    assert len({p.prompt for p in ev}) == 300 and {p.prompt for p in ev} <= held
    assert [p.prompt for p in ev] == [p.prompt for p in task.heldout_set(300, seed=0)]
    other = tasks.get("arith", 2, heldout_fraction=0.1, split_seed=4)
    assert {p for p in prompts if other.is_heldout(p)} != held


def test_users_register_tasks_and_a_task_without_verifier_is_refused():
    class NoVerifier(tasks.Task):
        name = "no_verifier"
        alphabet = "01="

        def generate(self, rng):
            return tasks.Problem("0=", "0")

    with pytest.raises(ValueError, match=r"^task: 'no_verifier' has no verifier"):
        tasks.register(NoVerifier)
    assert "no_verifier" not in tasks.names()

    @tasks.register
    class Reverse(tasks.ExactMatchTask):
        name = "test_reverse"
        alphabet = "0123456789rev:="
        difficulty_range = (1, 8)
        default_difficulty = 3

        def generate(self, rng):
            s = "".join(map(str, rng.integers(0, 10, self.difficulty)))
            return tasks.Problem(f"rev:{s}=", s[::-1])

        def max_answer_len(self):
            return self.difficulty

    try:
        t = tasks.get("test_reverse")
        p = t.sample(np.random.default_rng(0), 5)
        assert t.verify(p, [q.prompt[4:-1][::-1] for q in p]).all()
        with pytest.raises(ValueError, match=r"task 'test_reverse' is already registered"):
            tasks.register(type("Other", (Reverse,), {}))
    finally:
        tasks.unregister("test_reverse")
    assert "test_reverse" not in tasks.names()
    with tasks.registered(Reverse):
        assert tasks.get("test_reverse").name == "test_reverse"
    assert "test_reverse" not in tasks.names()
    with pytest.raises(ValueError, match=r"^task: unknown task 'nope'"):
        tasks.get("nope")


def test_tokenizer_roundtrip_through_autotokenizer(tmp_path):
    from transformers import AutoTokenizer, Qwen2Config
    tok = tokenizer.build_tokenizer("é")
    # a checkpoint directory: config.json of a qwen2 model + the tokenizer
    Qwen2Config(vocab_size=len(tok), hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                num_attention_heads=1, num_key_value_heads=1).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["count a: ab cd=3", "07+45=052", "sort:3141=1134", "x y  z", "café"]
    for s in texts:
        ids = tok.encode(s, add_special_tokens=False)
        assert back.encode(s, add_special_tokens=False) == ids
        assert back.decode(ids) == s == tok.decode(ids)
    assert len(tok.encode("07+45=", add_special_tokens=False)) == 6          # one token per character
    assert back.eos_token == "<eos>" and back.pad_token_id == 0 and back.padding_side == "left"
    for name in tasks.names():
        tokenizer.check_covers(back, tasks.registry()[name].alphabet)
    with pytest.raises(ValueError, match=r"^init: .* cannot encode the task's characters 'XY'"):
        tokenizer.check_covers(tok, "aXbY")


def test_advantage_and_schedule_settings():
    assert runner.parse_params(["delta=0.5", "k=4", "normalize=true", "omega=None", "ema=conventional"]) == \
        {"delta": 0.5, "k": 4, "normalize": True, "omega": None, "ema": "conventional"}
    with pytest.raises(ValueError, match=r"^param must look like NAME=VALUE"):
        runner.parse_params(["delta"])
    with pytest.raises(ValueError, match=r"^param: asym_grpo: unknown parameter\(s\) alpha; allowed: delta"):
        config.GRPOConfig(out="", advantage="asym_grpo", params={"alpha": 1.0}).make_advantage()
    with pytest.raises(ValueError, match=r"^param: unknown parameter\(s\) gamma for schedule 'fade'"):
        config.GRPOConfig(out="", schedule="fade", params={"gamma": 1.0}, steps=10).make_advantage()
    s = schedules.get("fade-log", steps=10, alpha0=2.5)
    assert s.T == 10 and s.alpha0 == 2.5
    assert config.GRPOConfig(out="", schedule="fade-log", params={"alpha0": 2.5}).make_advantage() is None
