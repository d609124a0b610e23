"""analysis.diff.kl and ``rlvr-diff kl``: exact KL between the base and the RL policy.

References: closed forms on two tokens, a float64 dense computation with plain torch on the
two models' logits (one unpadded sequence at a time), the single-sample Monte Carlo estimator,
and identical checkpoints (KL exactly 0).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from analysis import report
from analysis.diff import cli as diff_cli
from analysis.diff import kl
from tests.analysis import tiny_checkpoints as tc

PROMPTS = [[5, 6, 7], [9, 10], [100], [40, 41, 42, 43], [7, 300]]


def _base():
    return tc.cached("kl_base", lambda p: tc.build(p, "qwen2", layers=2, tokenizer=True))


def _planted():
    """RL = base + a dense head change: peaked, clearly different next-token distributions."""
    def make(p):
        d = np.random.default_rng(7).standard_normal((tc.VOCAB, tc.HIDDEN)) * 0.15
        tc.plant_files(_base(), p, {"lm_head.weight": d})
        return p
    return tc.cached("kl_planted", make)


def _same_with_greedy_config():
    """A copy of the base whose generation_config.json asks for top-k 1 and a repetition penalty:
    the sampler must set them aside (else the samples of a prompt would all be the argmax path)."""
    def make(p):
        tc.copy(_base(), p)
        (p / "generation_config.json").write_text(json.dumps(
            {"do_sample": True, "top_k": 1, "repetition_penalty": 1.3, "eos_token_id": 2, "pad_token_id": 0}))
        return p
    return tc.cached("kl_same", make)


# ------------------------------------------------------------------ (d) closed forms
def test_two_token_closed_form_and_temperature():
    a = torch.tensor([[0.0, 0.0], [2.0, -1.0], [-3.0, 0.5], [1.0, 1.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.5, -3.0], [1.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 1])
    for T in (1.0, 0.5, 3.0):
        p = 1 / (1 + np.exp(-(a[:, 0] - a[:, 1]).numpy() / T))        # p(token 0) = σ((a0 − a1)/T)
        q = 1 / (1 + np.exp(-(b[:, 0] - b[:, 1]).numpy() / T))
        want = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
        want_mc = np.where(y.numpy() == 0, np.log(p / q), np.log((1 - p) / (1 - q)))
        got, mc = kl.token_kl(a, b, y, temperature=T)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)   # float64 throughout
        np.testing.assert_allclose(mc.numpy(), want_mc, rtol=1e-12, atol=1e-15)
    assert float(kl.token_kl(a[3:], b[3:])[0][0]) == 0.0                        # same logits: exactly 0


def test_zero_probabilities_give_zero_or_inf_never_nan():
    ninf = -math.inf
    p = torch.tensor([[0.0, ninf, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)    # p = (1/2, 0, 1/2), uniform
    q = torch.tensor([[0.0, 0.0, 0.0], [0.0, ninf, 0.0]], dtype=torch.float64)    # q = uniform, (1/2, 0, 1/2)
    got, _ = kl.token_kl(p, q)
    assert got[0].item() == pytest.approx(math.log(1.5), rel=1e-12)               # KL((½,0,½) ‖ ⅓) = log 3/2
    assert got[1].item() == math.inf                                              # q = 0 where p > 0
    big = torch.tensor([[800.0, -800.0, 0.0]])                                    # float32 logits far apart
    got, _ = kl.token_kl(big, torch.zeros(1, 3))
    assert math.isfinite(got.item()) and got.item() == pytest.approx(math.log(3.0), rel=1e-9)
    with pytest.raises(ValueError, match=r"^logits_p and logits_q must be two \(N, V\) arrays of one shape"):
        kl.token_kl(torch.zeros(2, 3), torch.zeros(2, 4))


def test_chunks_over_tokens_do_not_change_the_result(monkeypatch):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 11, generator=g), torch.randn(37, 11, generator=g)
    y = torch.randint(0, 11, (37,), generator=g)
    whole = kl.token_kl(a, b, y)
    monkeypatch.setattr(kl, "_CHUNK", 11 * 5)                                     # 5 rows per chunk
    part = kl.token_kl(a, b, y)
    assert torch.equal(whole[0], part[0]) and torch.equal(whole[1], part[1])


# ------------------------------------------------------------------ (a) identical checkpoints
def test_identical_checkpoints_give_exactly_zero_and_the_checkpoint_sampling_config_is_set_aside():
    doc = kl.policy_kl(str(_base()), str(_same_with_greedy_config()), PROMPTS[:2], n_samples=3, max_new_tokens=5,
                       batch_size=6, device="cpu", progress=False, return_tokens=True)
    for key in ("forward", "reverse"):
        d = doc[key]
        assert d["kl_token_mean"] == 0.0 and d["mc_token_mean"] == 0.0 and d["kl_sequence_mean"] == 0.0
        assert all(r[key]["kl"] == 0.0 for r in doc["prompts"])
        assert d["n_sequences"] == 6
    # top_k = 1 in the RL copy's generation_config.json would make the 3 samples of a prompt equal
    rev = doc["tokens"]["reverse"]
    assert any(len({tuple(s["ids"]) for s in rev if s["prompt"] == i}) > 1 for i in range(2))
    assert doc["settings"]["stop_token_ids"] == {"base": [2], "rl": [2]}


# ------------------------------------------------------------- (b), (c) on a planted head change
@pytest.fixture(scope="module")
def planted_doc():
    return kl.policy_kl(str(_base()), str(_planted()), PROMPTS[:4], n_samples=3, max_new_tokens=8, temperature=0.8,
                        seed=3, batch_size=4, device="cpu", dtype="float64", progress=False, return_tokens=True)


def _dense_reference(tokens, T):
    """Plain torch, float64 models, one unpadded sequence at a time: KL_t and log p(y_t) − log q(y_t)."""
    from transformers import AutoModelForCausalLM

    models = {k: AutoModelForCausalLM.from_pretrained(str(p), dtype=torch.float64).eval()
              for k, p in (("base", _base()), ("rl", _planted()))}
    out = {}
    with torch.no_grad():
        for key, (pk, qk) in (("forward", ("base", "rl")), ("reverse", ("rl", "base"))):
            rows = []
            for s in tokens[key]:
                ids = torch.tensor([PROMPTS[s["prompt"]] + s["ids"]])
                P = len(PROMPTS[s["prompt"]])
                zp = models[pk](ids).logits[0, P - 1:-1].double() / T
                zq = models[qk](ids).logits[0, P - 1:-1].double() / T
                p, q = torch.softmax(zp, -1), torch.softmax(zq, -1)
                kl_t = (p * (torch.log(p) - torch.log(q))).sum(-1)
                y = ids[0, P:]
                mc_t = torch.log(p[torch.arange(len(y)), y]) - torch.log(q[torch.arange(len(y)), y])
                rows.append((kl_t.numpy(), mc_t.numpy()))
            out[key] = rows
    return out


def test_exact_kl_matches_a_float64_dense_computation(planted_doc):
    doc = planted_doc
    ref = _dense_reference(doc["tokens"], 0.8)
    for key in ("forward", "reverse"):
        for s, (k_ref, m_ref) in zip(doc["tokens"][key], ref[key]):
            # float64 models: batched right-padded vs unpadded forwards differ by rounding only (~1e-14)
            np.testing.assert_allclose(s["kl"], k_ref, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(s["mc"], m_ref, rtol=1e-9, atol=1e-12)


def test_continuations_stop_at_the_first_stop_token_and_the_means_are_token_weighted(planted_doc):
    doc = planted_doc
    for key in ("forward", "reverse"):
        toks = doc["tokens"][key]
        assert len(toks) == 4 * 3
        for s in toks:
            assert 1 <= len(s["ids"]) <= 8 and len(s["kl"]) == len(s["ids"])
            assert 2 not in s["ids"][:-1]                               # EOS only as the last token
            assert len(s["ids"]) == 8 or s["ids"][-1] == 2              # stopped, or ran to max_new_tokens
        allk = np.concatenate([s["kl"] for s in toks])
        d = doc[key]
        assert d["n_tokens"] == allk.size
        assert d["kl_token_mean"] == pytest.approx(allk.mean(), rel=1e-12)
        per = np.array([np.concatenate([s["kl"] for s in toks if s["prompt"] == i]).mean() for i in range(4)])
        assert d["kl_prompt_mean"] == pytest.approx(per.mean(), rel=1e-12)
        assert d["kl_prompt_se"] == pytest.approx(per.std(ddof=1) / math.sqrt(4), rel=1e-10)
        seq = np.array([np.sum(s["kl"]) for s in toks])
        assert d["kl_sequence_mean"] == pytest.approx(seq.mean(), rel=1e-12)
        np.testing.assert_allclose([r[key]["kl"] for r in doc["prompts"]], per, rtol=1e-12)


def test_planted_change_kl_positive_and_single_sample_estimator_agrees(planted_doc):
    doc = planted_doc
    for key in ("forward", "reverse"):
        toks = doc["tokens"][key]
        k = np.concatenate([s["kl"] for s in toks])
        m = np.concatenate([s["mc"] for s in toks])
        assert k.min() > 0 and doc[key]["kl_token_mean"] > 1e-3
        # E[mc_t | prefix] = KL_t, so d_t = mc_t − KL_t are martingale differences: uncorrelated,
        # s.e. of their mean = sd/√N.  Samples from another distribution (top-k, a repetition
        # penalty, wrong positions under left padding) would move the mean of d away from 0.
        dlt = m - k
        se = dlt.std(ddof=1) / math.sqrt(dlt.size)
        assert abs(dlt.mean()) < 4 * se, (key, dlt.mean(), se)
        assert doc[key]["mc_minus_kl_se"] == pytest.approx(se, rel=1e-10)


# ------------------------------------------------------------------ refusals
def test_refusals(tmp_path):
    base = str(_base())
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt_ids": [5, 6]}\n\n{oops\n')
    with pytest.raises(ValueError, match=rf"^prompts: {f}:3: not valid JSON"):
        kl.read_prompts(f)
    f.write_text('{"prompt": "w1"}\n{"text": "w2"}\n')
    with pytest.raises(ValueError, match=rf"^prompts: {f}:2: needs 'prompt'"):
        kl.read_prompts(f)
    f.write_text('{"prompt_ids": [5, -1]}\n')
    with pytest.raises(ValueError, match=rf"^prompts: {f}:1: prompt_ids must contain only integers >= 0"):
        kl.read_prompts(f)
    f.write_text("\n  \n")
    with pytest.raises(ValueError, match=r"^prompts: .* holds no prompts"):
        kl.read_prompts(f)
    with pytest.raises(ValueError, match=r"^prompts: .*missing.jsonl' is not a file"):
        kl.read_prompts(tmp_path / "missing.jsonl")
    t = tmp_path / "p.txt"
    t.write_text("w1 w2\n\nw3\nw1 w2\n")
    assert [r["prompt"] for r in kl.read_prompts(t)] == ["w1 w2", "w3", "w1 w2"]
    assert [r["source"] for r in kl.read_prompts(t)] == [f"{t}:1", f"{t}:3", f"{t}:4"]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^rl: .* is a LoRA adapter directory; the policy KL needs a full"):
        kl.policy_kl(base, str(adapter), [[5]], progress=False)
    other = tc.cached("kl_vocab", lambda p: tc.build(p, "qwen2", layers=1, vocab=256))
    with pytest.raises(ValueError, match=r"^rl: vocabulary of 256 tokens .* differs from the base's 384"):
        kl.policy_kl(base, str(other), [[5]], progress=False)
    with pytest.raises(ValueError, match=r"^n_samples must be an integer >= 1"):
        kl.policy_kl(base, base, [[5]], n_samples=0)
    with pytest.raises(ValueError, match=r"^top_p must be a finite number > 0 and <= 1, got 0.0"):
        kl.policy_kl(base, base, [[5]], top_p=0.0)
    with pytest.raises(ValueError, match=r"^prompts: prompts\[0\]: token id 999 is outside the vocabulary"):
        kl.policy_kl(base, base, [[999]], progress=False, device="cpu")
    with pytest.raises(ValueError, match=r"max_new_tokens 300 exceed the model's max_position_embeddings = 256"):
        kl.policy_kl(base, base, [[5]], max_new_tokens=300, progress=False, device="cpu")


# ------------------------------------------------------------------ (e) the command line
def _prompts_file(tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "w1 w2 w3"}\n{"prompt_ids": [9, 10], "completion_ids": [11], "correct": true}\n')
    return f


def test_cli_kl_writes_the_report_atomically_and_prints_a_summary(tmp_path, capsys):
    f = _prompts_file(tmp_path)
    out = tmp_path / "kl"
    argv = [str(_base()), str(_planted()), "--prompts", str(f), "--out", str(out), "--samples", "2",
            "--max-new-tokens", "4", "--device", "cpu"]
    capsys.readouterr()
    assert diff_cli.main(["kl", *argv]) == 0
    text = capsys.readouterr().out
    assert "KL(base‖RL) = " in text and "forward, RL's Razor" in text and "2 prompts × 2 samples" in text
    assert sorted(p.name for p in out.iterdir()) == sorted(kl.KL_FILES)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]      # no temporary directory left
    doc = json.loads((out / "kl.json").read_text())
    assert doc["forward"]["n_sequences"] == 4 and doc["forward"]["kl_token_mean"] > 0
    assert doc["prompts"][0]["prompt"] == "w1 w2 w3" and doc["prompts"][1]["source"] == f"{f}:2"
    assert doc["run"]["settings"]["n_samples"] == 2 and doc["settings"]["tokenizer"] == str(_base())
    md = (out / "kl.md").read_text()
    assert "## Policy KL" in md and report.KL_READING in md and "KL(π_base ‖ π_RL)" in md
    assert "<h2>Policy KL</h2>" in (out / "kl.html").read_text()
    # a directory that is not an earlier kl report is refused and left alone
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert diff_cli.main(["kl", *argv[:4], "--out", str(other), "--quiet"]) == 2
    assert "--out" in capsys.readouterr().err and (other / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("content,msg", [
    (None, "--prompts: '{f}' is not a file"),
    ("\n\n", "--prompts: '{f}' holds no prompts"),
    ('{{"prompt": "w1"}}\n{{oops\n', "--prompts: {f}:2: not valid JSON"),
    ('{{"prompt": 5}}\n', "--prompts: {f}:1: needs 'prompt'"),
])
def test_cli_bad_prompts_are_refused_naming_the_flag_and_the_line(tmp_path, capsys, content, msg):
    f = tmp_path / "p.jsonl"
    if content is not None:
        f.write_text(content.format())
    capsys.readouterr()
    rc = diff_cli.main(["kl", str(_base()), str(_base()), "--prompts", str(f), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlvr-diff: error: ") and msg.format(f=f) in err, err
    assert not (tmp_path / "o").exists()


def test_cli_weights_prompts_adds_the_kl_to_the_report(tmp_path, capsys, cheap_png):
    f = _prompts_file(tmp_path)
    rc = diff_cli.main([str(_base()), str(_planted()), "--out", str(tmp_path / "rep"), "--layers", "head",
                        "--top-k", "4", "--device", "cpu", "--prompts", str(f), "--samples", "2",
                        "--max-new-tokens", "3", "--seed", "5"])
    assert rc == 0
    assert "KL(base‖RL) = " in capsys.readouterr().out
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    c = doc["kl"]["checkpoints"][0]
    assert c["rl"] == str(_planted()) and c["forward"]["n_sequences"] == 4 and c["settings"]["seed"] == 5
    assert c["forward"]["kl_token_mean"] > 0 and c["reverse"]["kl_token_mean"] > 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Policy KL" in md and report.KL_READING in md
    # refusals before any work: sampling options without --prompts, a LoRA adapter with --prompts
    assert diff_cli.main([str(_base()), str(_planted()), "--out", str(tmp_path / "r2"), "--samples", "2"]) == 2
    assert "--samples goes with --prompts" in capsys.readouterr().err
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert diff_cli.main([str(_base()), str(adapter), "--out", str(tmp_path / "r3"), "--prompts", str(f)]) == 2
    err = capsys.readouterr().err
    assert "RL 1: " in err and "is a LoRA adapter directory" in err and not (tmp_path / "r3").exists()
