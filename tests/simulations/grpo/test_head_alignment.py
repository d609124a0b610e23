"""FADE Cor. 15.3 in the GRPO trainer: the alignment of successive output-head gradients
(``head_grad_cos``, ``head_grad_u_cos``) against gradients recomputed by hand with autograd, the
head's own part of a tied embedding, and the option off."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from simulations.grpo import checkpoint as ck
from simulations.grpo import models, rollout, tasks, trainer
from tests.simulations.grpo.test_trainer import FAST, TIMING, _records, _weights, base  # noqa: F401 (fixture)


def _alignment_by_hand(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Cosine of the flattened matrices and |cosine| of their leading right singular vectors."""
    cos = float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
    ua, ub = np.linalg.svd(a)[2][0], np.linalg.svd(b)[2][0]
    return cos, float(abs(ua @ ub))


def _head_gradient_by_hand(model, ro, adv: np.ndarray) -> np.ndarray:
    """∂L/∂W_head of the PPO token-mean loss at ratio 1 (one epoch, one minibatch: old = current),
    L = −Σ_{n,t} m·A_n·exp(logp − logp.detach()) / Σ m, with autograd."""
    model.zero_grad(set_to_none=True)
    ids = torch.cat([ro.prompt_ids, ro.response_ids], 1)
    att = torch.cat([ro.prompt_mask, torch.ones_like(ro.response_mask)], 1)
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    P = ro.prompt_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, P - 1:-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ro.response_ids[..., None])[..., 0]
    m = ro.response_mask.float()
    A = torch.as_tensor(adv.reshape(-1), dtype=torch.float32)[:, None]
    loss = -(m * A * torch.exp(logp - logp.detach())).sum() / m.sum()
    loss.backward()
    return model.lm_head.weight.grad.double().numpy()


def test_two_steps_recomputed_by_hand(base, tmp_path):  # noqa: F811
    """Steps 1-3 replayed outside the trainer (the same draws from its generators, the weights of
    its checkpoints), their head gradients by autograd of the loss written out, and the alignment
    by numpy: equal to the trainer's columns."""
    steps = 3
    cfg = trainer.GRPOConfig(out=str(tmp_path / "run"), init=str(base), steps=steps, checkpoint_every=1, **FAST)
    recs = _records(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["head_grad_cos"] is None and rows[0]["head_grad_u_cos"] is None   # no g_0
    model, tok = models.load_policy(base)
    assert model.config.tie_word_embeddings is False          # lm_head.weight is the head alone
    task = tasks.get("sort", difficulty=3)
    np_rng, gen = np.random.default_rng([0, 2]), torch.Generator().manual_seed(0)
    B, G = FAST["batch_size"], FAST["group_size"]
    grads = []
    for step in range(1, steps + 1):
        if step > 1:   # the policy after step-1 updates, from the trainer's checkpoint
            model.load_state_dict(load_file(str(tmp_path / "run" / ck.checkpoint_name(step - 1) / "model.safetensors")))
        problems = task.sample(np_rng, B)
        ids, mask = rollout.encode_prompts(tok, [p.prompt for p in problems], repeat=G)
        ro = rollout.sample(model, ids, mask, max_new_tokens=task.max_answer_len() + 2, eos_id=tok.eos_token_id,
                            pad_id=tok.pad_token_id, generator=gen)
        texts, valid = rollout.decode_responses(tok, ro)
        ok = np.asarray(task.verify([p for p in problems for _ in range(G)], texts)) & valid.numpy()
        np.testing.assert_array_equal(ok.reshape(B, G).astype(float), recs[step - 1].rewards)  # in step
        grads.append(_head_gradient_by_hand(model.train(), ro, recs[step - 1].advantages))
    checked = 0
    for step in range(2, steps + 1):
        if not (np.any(grads[step - 2]) and np.any(grads[step - 1])):
            continue                                   # a zero gradient (no signal): no direction
        cos, u_cos = _alignment_by_hand(grads[step - 2], grads[step - 1])
        assert rows[step - 1]["head_grad_cos"] == pytest.approx(cos, abs=2e-5)
        assert rows[step - 1]["head_grad_u_cos"] == pytest.approx(u_cos, abs=2e-4)
        checked += 1
    assert checked >= 1
    assert len({round(r["head_grad_cos"], 3) for r in rows[1:] if r["head_grad_cos"] is not None}) == checked


def test_minibatches_sum_the_backward_passes(base, tmp_path):  # noqa: F811
    """With 2 epochs of 2 minibatches, g_t is the sum of the four backward passes' head gradients
    (recorded by a hook on the optimizer, independently of the trainer's accumulator)."""
    cfg = trainer.GRPOConfig(out=str(tmp_path / "run"), init=str(base), steps=3, ppo_epochs=2, minibatches=2, **FAST)
    seen: list[torch.Tensor] = []
    orig = torch.optim.AdamW.step

    def spy(self, *a, **k):   # the head's .grad at each optimizer step of the policy (clipped)
        head = self.param_groups[0]["params"][-1]              # lm_head.weight: the last parameter
        assert head.dim() == 2 and head.shape[1] == 64
        seen.append(head.grad.detach().clone())
        return orig(self, *a, **k)
    grad_norms: list[float] = []
    orig_clip = torch.nn.utils.clip_grad_norm_

    def clip_spy(params, max_norm, *a, **k):
        n = orig_clip(params, max_norm, *a, **k)
        grad_norms.append(float(n))
        return n
    mp = pytest.MonkeyPatch()
    mp.setattr(torch.optim.AdamW, "step", spy)
    mp.setattr(torch.nn.utils, "clip_grad_norm_", clip_spy)
    try:
        trainer.train(cfg)
    finally:
        mp.undo()
    assert len(seen) == 3 * 4 == len(grad_norms)
    # undo the clipping (factor min(1, max_norm / (norm + 1e-6)), torch's) to get the raw gradients
    raw = [g / min(1.0, 1.0 / (n + 1e-6)) for g, n in zip(seen, grad_norms)]
    steps = [sum(raw[4 * s:4 * s + 4]).double().numpy() for s in range(3)]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for s in (1, 2):
        cos, u_cos = _alignment_by_hand(steps[s - 1], steps[s])
        assert rows[s]["head_grad_cos"] == pytest.approx(cos, abs=1e-4)
        assert rows[s]["head_grad_u_cos"] == pytest.approx(u_cos, abs=1e-3)


def _tied_and_untied(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kw = dict(vocab_size=23, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              intermediate_size=32)
    torch.manual_seed(seed)
    tied = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **kw))
    untied = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=False, **kw))
    sd = dict(tied.state_dict())
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()
    untied.load_state_dict(sd)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    return tied, untied


def test_tied_head_gets_its_output_projection_part_only():
    """A tied head's .grad mixes the embedding lookup's gradient in; HeadGradient keeps the head's
    part, which is lm_head.grad of an untied copy with the same weights (two backward passes
    summed; a forward pass without gradient ignored)."""
    tied, untied = _tied_and_untied()
    hg = models.HeadGradient(tied)
    assert hg.tied
    gen = torch.Generator().manual_seed(1)
    total = torch.zeros_like(untied.lm_head.weight)
    for _ in range(2):
        ids = torch.randint(0, 23, (3, 5), generator=gen)
        w = torch.randn(3, 5, 23, generator=gen)
        with torch.no_grad():
            tied(input_ids=ids)                                   # sampling: not recorded
        (tied(input_ids=ids).logits * w).sum().backward()
        hg.after_backward()
        untied.zero_grad(set_to_none=True)
        (untied(input_ids=ids).logits * w).sum().backward()
        total += untied.lm_head.weight.grad
        shared = tied.lm_head.weight.grad.clone()
        tied.zero_grad(set_to_none=True)
    got = hg.pop()
    torch.testing.assert_close(got, total, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(shared, untied.lm_head.weight.grad, atol=1e-4)   # the shared .grad differs
    assert hg.pop() is None
    hg.remove()
    assert not tied.lm_head._forward_hooks


def test_option_off_leaves_the_other_columns_and_weights(base, tmp_path):  # noqa: F811
    common = dict(init=str(base), steps=3, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "on"), **common))
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "off"), head_alignment=False, **common))
    on = pd.read_csv(tmp_path / "on" / "metrics.csv").drop(columns=TIMING)
    off = pd.read_csv(tmp_path / "off" / "metrics.csv").drop(columns=TIMING)
    assert list(on.columns) == [*off.columns, *trainer.HEAD_ALIGNMENT_COLUMNS]   # appended at the end
    pd.testing.assert_frame_equal(on[off.columns], off, check_exact=True)
    wa, wb = (_weights(tmp_path / r / ck.checkpoint_name(3)) for r in ("on", "off"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(ValueError, match=r"^head_alignment must be True or False, got 'yes'"):
        trainer.GRPOConfig(out=str(tmp_path / "x"), head_alignment="yes").validate()
