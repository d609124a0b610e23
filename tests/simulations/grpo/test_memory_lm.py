"""Distribution-level calibration in the GRPO trainer (Over-Sharpening Sec. 3.2, Alg. 1 lines 4-6 and
21-22): rollouts drawn from softmax(f_θ − μ·f_φ) with a memory LM stepped alongside the policy, the
memory's cross-entropy step, a neutral start, μ = 0 equal to the run without it, kill and resume."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch

from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, memory, models, rollout, trainer
from tests.simulations.grpo.test_trainer import FAST, TIMING, _weights, base, metrics_frame, run_crash_resume  # noqa: F401 (fixture)

MU = 0.7


def _policy_and_memory(base_dir, seed=1, scale=2.0):  # noqa: F811
    """The SFT policy and a memory LM whose head is random (f_φ far from 0), both in eval mode."""
    model, tok = models.load_policy(base_dir)
    mem = memory.MemoryModel(model, tok, preset="tiny-cpu", lr=1e-3, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head = models.output_head(mem.model)
        head.copy_(scale * torch.randn(head.shape, generator=g))
    return model.eval(), mem.model.eval(), tok


def _nucleus_by_hand(p: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the most probable tokens until their mass reaches top_p (inclusive), renormalise."""
    order = np.argsort(-p, kind="stable")
    keep = np.zeros_like(p, bool)
    mass = 0.0
    for i in order:
        keep[i] = True
        mass += p[i]
        if mass >= top_p:
            break
    q = np.where(keep, p, 0.0)
    return q / q.sum()


@pytest.mark.slow  # Monte Carlo of the sampler (~5 s each); the same draws are checked exactly by the next test
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_first_token_frequencies_are_the_calibrated_softmax(base, temperature, top_p):  # noqa: F811
    """Monte Carlo at a fixed context: the frequencies of the first sampled token match
    nucleus(softmax((f_θ − μ f_φ)/T)) from separate forward passes, and are far from the
    policy's own softmax(f_θ/T)."""
    model, mem, tok = _policy_and_memory(base)
    N = 6000
    ids, mask = rollout.encode_prompts(tok, ["sort:312="], repeat=N)
    ro = rollout.sample(model, ids, mask, max_new_tokens=1, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                        temperature=temperature, top_p=top_p, generator=torch.Generator().manual_seed(3),
                        memory=mem, mu=MU)
    V = models.output_head(model).shape[0]
    freq = np.bincount(ro.response_ids[:, 0].numpy(), minlength=V) / N
    with torch.no_grad():
        f_theta = model(input_ids=ids[:1]).logits[0, -1].double().numpy()
        f_phi = mem(input_ids=ids[:1]).logits[0, -1].double().numpy()

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()
    q = _nucleus_by_hand(softmax((f_theta - MU * f_phi) / temperature), top_p)
    p = _nucleus_by_hand(softmax(f_theta / temperature), top_p)
    se = np.sqrt(np.maximum(q * (1 - q), 1e-12) / N)
    assert np.all(np.abs(freq - q) <= 4.5 * se + 1e-12), np.max(np.abs(freq - q) / se)
    assert freq[q == 0].sum() == 0                                  # nothing drawn outside the nucleus
    assert np.max(np.abs(freq - p) / np.sqrt(np.maximum(p * (1 - p), 1 / N) / N)) > 20   # not π_θ


def test_calibrated_draws_equal_a_reference_loop_without_cache(base):  # noqa: F811
    """The policy and the memory stepped together with their KV caches draw the tokens of a plain
    loop that recomputes both models on the whole prefix and samples from the calibrated softmax."""
    model, mem, tok = _policy_and_memory(base)
    ids, pmask = rollout.encode_prompts(tok, ["sort:312=", "sort:9=", "sort:4401="], repeat=4)
    T, temp, top_p = 6, 0.8, 0.95
    ro = rollout.sample(model, ids, pmask, max_new_tokens=T, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                        temperature=temp, top_p=top_p, generator=torch.Generator().manual_seed(11),
                        memory=mem, mu=MU)
    gen = torch.Generator().manual_seed(11)
    seq, mask = ids.clone(), pmask.clone()
    alive = torch.ones(len(ids), dtype=torch.bool)
    drawn = []
    with torch.no_grad():
        for _ in range(T):
            pos = (mask.cumsum(-1) - 1).clamp_min(0)
            lt = model(input_ids=seq, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            lm = mem(input_ids=seq, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            probs = torch.softmax((lt - MU * lm) / temp, -1)
            kept = torch.tensor(np.stack([_nucleus_by_hand(p, top_p) for p in probs.double().numpy()]),
                                dtype=torch.float32)
            tok_t = torch.where(alive, torch.multinomial(kept, 1, generator=gen)[:, 0], tok.pad_token_id)
            drawn.append(tok_t)
            alive &= tok_t != tok.eos_token_id
            seq = torch.cat([seq, tok_t[:, None]], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            if not alive.any():
                break
    ref = torch.stack(drawn, 1)
    assert torch.equal(ro.response_ids[:, :ref.shape[1]], ref)


def test_memory_step_is_two_hand_adamw_steps_on_the_cross_entropy(base):  # noqa: F811
    """MemoryModel.update = AdamW (computed by hand) on the token-mean cross-entropy of the sampled
    responses (computed by hand from the logits); at the start f_φ ≡ 0, so the loss is log V."""
    model, tok = models.load_policy(base)
    lr, wd, b1, b2, eps = 0.05, 0.1, 0.9, 0.999, 1e-8
    mem = memory.MemoryModel(model, tok, preset="tiny-cpu", lr=lr, weight_decay=wd, seed=4)
    ids, pmask = rollout.encode_prompts(tok, ["sort:312=", "sort:57="], repeat=3)
    ro = rollout.sample(model, ids, pmask, max_new_tokens=5, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                        generator=torch.Generator().manual_seed(0))
    V = models.output_head(model).shape[0]
    ref = copy.deepcopy(mem.model)
    m = {n: torch.zeros_like(p) for n, p in ref.named_parameters()}
    v = {n: torch.zeros_like(p) for n, p in ref.named_parameters()}
    full = torch.cat([ro.prompt_ids, ro.response_ids], 1)
    att = torch.cat([ro.prompt_mask, torch.ones_like(ro.response_mask)], 1)
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    P, resp_mask = ro.prompt_ids.shape[1], ro.response_mask.double()
    small = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in ref.named_parameters()}
    for k in (1, 2):
        ref.zero_grad(set_to_none=True)
        logits = ref(input_ids=full, attention_mask=att, position_ids=pos).logits[:, P - 1:-1]
        nll = -torch.log_softmax(logits.double(), -1).gather(-1, ro.response_ids[..., None])[..., 0]
        hand_loss = (nll * resp_mask).sum() / resp_mask.sum()
        hand_loss.backward()
        got = mem.update(ro)
        assert got == pytest.approx(float(hand_loss.detach()), rel=1e-6)
        if k == 1:
            assert got == pytest.approx(math.log(V), rel=1e-6)          # uniform memory: CE = log V
        got_p = dict(mem.model.named_parameters())
        with torch.no_grad():
            for n, p in ref.named_parameters():
                g = p.grad.double()
                torch.testing.assert_close(got_p[n].grad.double(), g, rtol=1e-4, atol=1e-6)   # the CE gradient
                small[n] |= (g != 0) & (g.abs() < 1e-5)
                m[n] = b1 * m[n] + (1 - b1) * g
                v[n] = b2 * v[n] + (1 - b2) * g * g
                step = lr * (m[n] / (1 - b1 ** k)) / ((v[n] / (1 - b2 ** k)).sqrt() + eps)
                p.copy_((p.double() * (1 - lr * wd) - step).to(p.dtype))
        for n, p in ref.named_parameters():
            # Adam divides by |g|: where 0 < |g| < 1e-5 the float32 rounding of g (its sign, even) shows in
            # the step, so those few entries are held to one step's size lr only, the others to 1e-5 (lr·2e-4)
            diff = (got_p[n] - p).abs().detach()
            assert torch.where(small[n], 0.0, diff).max() < 1e-5 and diff.max() < lr, (n, float(diff.max()))
        assert sum(int(x.sum()) for x in small.values()) < 0.05 * sum(x.numel() for x in small.values())
    assert models.output_head(mem.model).abs().max() > 0.01              # the head moved


def test_memory_starts_neutral_and_mu_zero_is_the_run_without_it(base, tmp_path):  # noqa: F811
    common = dict(init=str(base), steps=3, **FAST)
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "absent"), **common))
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "zero"), mu=0.0, **common))
    trainer.train(trainer.GRPOConfig(out=str(tmp_path / "dlc"), mu=MU, memory_lr=0.05, **common))
    a, z, d = (metrics_frame(tmp_path / r) for r in ("absent", "zero", "dlc"))
    pd.testing.assert_frame_equal(a, z, check_exact=True)
    assert "memory_loss" not in z.columns
    wa, wz = (_weights(tmp_path / r / ck.checkpoint_name(3)) for r in ("absent", "zero"))
    assert all(torch.equal(wa[k], wz[k]) for k in wa)
    assert "memory" not in torch.load(tmp_path / "zero" / ck.checkpoint_name(3) / "trainer_state.pt",
                                      weights_only=True)
    # f_φ ≡ 0 at the start: step 1 samples from π_θ (same rollouts, same update), and the memory's
    # first cross-entropy is that of the uniform distribution, log V (the columns of step 1's row that
    # step 2 fills, such as the entropy change to step 2, differ)
    assert list(d.columns) == [*a.columns, "memory_loss"]
    later = ["memory_loss", *trainer.NEXT_STEP_COLUMNS]
    pd.testing.assert_frame_equal(d.iloc[:1].drop(columns=later), a.iloc[:1].drop(columns=later[1:]), check_exact=True)
    V = models.output_head(models.load_policy(base)[0]).shape[0]
    assert d["memory_loss"].iloc[0] == pytest.approx(math.log(V), rel=1e-6)
    # afterwards the memory is no longer neutral: the draws and the policy differ
    assert not d.drop(columns="memory_loss").equals(a)


def test_resume_with_memory_is_bit_identical(base, tmp_path):  # noqa: F811
    common = dict(init=str(base), steps=5, checkpoint_every=2, log_every=1, mu=MU, memory_lr=0.05, **FAST)
    a, b = run_crash_resume(tmp_path, common)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert np.isfinite(a["head_grad_cos"].iloc[2])   # step 3, the first after the resume: g_2 came from the checkpoint
    for step in (4, 5):
        ca, cb = tmp_path / "a" / ck.checkpoint_name(step), tmp_path / "b" / ck.checkpoint_name(step)
        wa, wb = _weights(ca), _weights(cb)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        ma, mb = (torch.load(c / "trainer_state.pt", weights_only=True)["memory"]["model"] for c in (ca, cb))
        assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.parametrize("argv, message", [
    (["--mu", "-0.5"], "--mu must be a finite number >= 0, got -0.5"),
    (["--mu", "nan"], "--mu must be a finite number >= 0, got nan"),
    (["--memory-lr", "0.01"], "--memory-lr applies only with mu > 0"),
    (["--mu", "0.5", "--memory-lr", "0"], "--memory-lr must be a finite number > 0"),
    (["--mu", "0.5", "--memory-preset", "huge"], "--memory-preset: invalid choice: 'huge'"),
])
def test_bad_memory_options_are_refused_by_name(base, tmp_path, capsys, argv, message):  # noqa: F811
    out = tmp_path / "run"
    assert cli.main(["grpo", "--init", str(base), "--out", str(out), "--device", "cpu", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_bad_mu_is_refused_by_the_api():
    with pytest.raises(ValueError, match=r"^mu must be a finite number >= 0, got -1"):
        trainer.GRPOConfig(out="unused", mu=-1).validate()
    with pytest.raises(ValueError, match=r"^memory_preset applies only with mu > 0"):
        trainer.GRPOConfig(out="unused", memory_preset="tiny-cpu").validate()
    with pytest.raises(ValueError, match=r"^mu must be a finite number >= 0, got -0.1"):
        rollout.sample(None, torch.zeros((1, 1), dtype=torch.long), torch.ones((1, 1), dtype=torch.long),
                       max_new_tokens=1, eos_id=0, pad_id=0, mu=-0.1)
