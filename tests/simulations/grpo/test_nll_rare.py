"""ΔNLL on rare-correct trajectories (F-GRPO App. F.2) in simulations.grpo.evaluate, against NLLs
recomputed with a plain transformers forward pass of each unpadded sequence, one at a time."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from simulations.grpo import evaluate, models, sft, tasks
from simulations.grpo.config import SFTConfig

CPU = dict(device="cpu", threads=1)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nllrare") / "sft"
    return sft.train_sft(SFTConfig(out=str(out), task="sort", difficulty=3, target_solve_rate=0.3, eval_every=25,
                                   eval_problems=32, eval_samples=2, **CPU, quiet=True))


@pytest.fixture(scope="module")
def trained(base, tmp_path_factory) -> Path:
    """The base model with its output head perturbed (a stand-in for a trained checkpoint)."""
    out = tmp_path_factory.mktemp("nllrare") / "perturbed"
    model, tok = models.load_policy(base, what="base")
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        head = models.output_head(model)
        head.add_(0.3 * torch.randn(head.shape, generator=g))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(base / "task.json", out / "task.json")
    return out


@pytest.fixture(scope="module")
def full_set(base):
    """Every correct trajectory (fraction 1), sorted by base NLL, largest first."""
    return evaluate.rare_correct_set(base, prompts=12, samples=16, fraction=1.0, seed=3, **CPU)


def reference_nll(model, tok, prompts, responses_ids, responses_mask) -> np.ndarray:
    """−(1/T) Σ log π(y_t | x, y_<t): each sequence alone, no padding, no position ids, no cache."""
    out = []
    for prompt, ids, m in zip(prompts, responses_ids, responses_mask):
        x = tok(prompt, add_special_tokens=False)["input_ids"]
        y = ids[m.bool()].tolist()
        seq = torch.tensor([x + y])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=seq).logits[0].double(), -1)
        pos = torch.arange(len(x) - 1, len(x) + len(y) - 1)
        out.append(float(-logp[pos, torch.tensor(y)].mean()))
    return np.array(out)


def sorted_answer(prompt: str) -> str:  # the sort task by hand: "sort:312=" -> "123"
    return "".join(sorted(prompt[len("sort:"):-1]))


def test_rare_set_nll_equals_a_plain_forward_pass(base, full_set):
    model, tok = models.load_policy(base, what="base")
    ref = reference_nll(model.eval(), tok, full_set.prompts, full_set.response_ids, full_set.response_mask)
    np.testing.assert_allclose(full_set.base_nll, ref, rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(full_set.base_nll) <= 1e-6)                    # largest NLL first
    # only correct trajectories: the responses are the sorted digits (checked by hand, not by the task)
    assert full_set.responses == [sorted_answer(p) for p in full_set.prompts]
    assert len(full_set.prompts) == full_set.candidates > 10 and full_set.drawn == 12 * 16


@pytest.mark.parametrize("fraction", [0.05, 0.2])
def test_rare_set_is_the_top_fraction_by_base_nll(base, full_set, fraction):
    rare = evaluate.rare_correct_set(base, prompts=12, samples=16, fraction=fraction, seed=3, **CPU)
    m = math.ceil(fraction * full_set.candidates)
    assert len(rare.prompts) == m and rare.candidates == full_set.candidates
    model, tok = models.load_policy(base, what="base")
    ref_all = reference_nll(model.eval(), tok, full_set.prompts, full_set.response_ids, full_set.response_mask)
    top = np.argsort(-ref_all, kind="stable")[:m]
    assert sorted(zip(rare.prompts, rare.responses)) == sorted((full_set.prompts[i], full_set.responses[i])
                                                                for i in top)
    assert rare.base_nll.min() >= np.sort(ref_all)[::-1][m - 1] - 1e-5


def test_delta_nll_rare_against_the_reference(base, trained, full_set, tmp_path):
    rare = evaluate.rare_correct_set(base, prompts=12, samples=16, fraction=0.2, seed=3, **CPU)
    assert evaluate.delta_nll_rare(base, rare, **CPU) == 0.0
    model, tok = models.load_policy(trained, what="checkpoint")
    ref = reference_nll(model.eval(), tok, rare.prompts, rare.response_ids, rare.response_mask)
    want = ref.mean() - rare.base_nll.mean()
    got = evaluate.delta_nll_rare(trained, rare, **CPU)
    assert abs(want) > 0.01 and got == pytest.approx(want, abs=1e-5)
    # saved and loaded: the same set, the same value
    back = evaluate.RareSet.load(rare.save(tmp_path / "rare.npz"))
    assert back.prompts == rare.prompts and back.responses == rare.responses
    np.testing.assert_array_equal(back.base_nll, rare.base_nll)
    assert evaluate.delta_nll_rare(trained, back, **CPU) == got
    # evaluate(rare=...) reports it; without it the summary is what it was (no new keys)
    res = evaluate.evaluate(trained, k=(1,), n=2, problems=4, progress=False, rare=back, **CPU)
    assert res.delta_nll_rare == pytest.approx(got, abs=1e-6) and res.summary()["delta_nll_rare"] == res.delta_nll_rare
    plain = evaluate.evaluate(trained, k=(1,), n=2, problems=4, progress=False, **CPU).summary()
    assert "delta_nll_rare" not in plain and "nll_rare" not in plain
    assert {k: v for k, v in res.summary().items() if "nll" not in k} == plain


def test_bad_arguments_are_refused_by_name(base, full_set):
    with pytest.raises(ValueError, match="fraction must be"):
        evaluate.rare_correct_set(base, fraction=0, **CPU)
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        evaluate.rare_correct_set(base, samples=0, **CPU)
    with pytest.raises(ValueError, match="rare must be a RareSet"):
        evaluate.evaluate(base, problems=2, progress=False, rare="x", **CPU)
    with pytest.raises(ValueError, match="base: .* not a model directory"):
        evaluate.rare_correct_set(base.parent, **CPU)
    # a base model that solves nothing has no rare-correct set
    task = tasks.get("sort", 10)
    with pytest.raises(ValueError, match="solved none"):
        evaluate.rare_correct_set(base, task=task, prompts=2, samples=2, **CPU)


def test_rlvr_train_eval_reports_delta_nll_rare_and_reuses_a_saved_set(base, trained, tmp_path, capsys):
    """`rlvr-train eval --nll-rare-base B --nll-rare-set F`: builds the set, writes it to F, reports
    ΔNLL_rare in eval.json; a second checkpoint reads the same F back (no base needed)."""
    import json

    from simulations.grpo import cli

    path = tmp_path / "rare.npz"
    common = ["--k", "1", "--problems", "4", "--threads", "1", "--device", "cpu", "--quiet"]
    assert cli.main(["eval", str(trained), "--nll-rare-base", str(base), "--nll-rare-set", str(path),
                     "--nll-rare-prompts", "6", "--nll-rare-samples", "8", "--nll-rare-fraction", "0.5",
                     "--out", str(tmp_path / "e1"), *common]) == 0
    assert "ΔNLL_rare" in capsys.readouterr().out
    rare = evaluate.RareSet.load(path)
    assert rare.base == str(base) and rare.fraction == 0.5
    got = json.loads((tmp_path / "e1" / "eval.json").read_text())
    assert got["delta_nll_rare"] == pytest.approx(evaluate.delta_nll_rare(trained, rare, **CPU), abs=1e-12)
    assert got["delta_nll_rare"] != 0
    stamp = path.stat().st_mtime_ns
    assert cli.main(["eval", str(base), "--nll-rare-set", str(path), "--out", str(tmp_path / "e2"), *common]) == 0
    assert path.stat().st_mtime_ns == stamp                                  # read, not rebuilt
    assert json.loads((tmp_path / "e2" / "eval.json").read_text())["delta_nll_rare"] == 0.0
    assert cli.main(["eval", str(base), "--nll-rare-set", str(tmp_path / "none.npz"), *common]) == 2
    assert "--nll-rare-set" in capsys.readouterr().err
    assert cli.main(["eval", str(base), "--nll-rare-base", str(base), "--nll-rare-fraction", "0", *common]) == 2
    assert "--nll-rare-fraction" in capsys.readouterr().err
