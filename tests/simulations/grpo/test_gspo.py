"""GSPO and GSPO-N (sequence-level importance ratio) against hand computations on a fixed batch,
against the sequence-level formula with its own gradient, and wired into the trainer settings."""

from __future__ import annotations

import math

import pytest
import torch

from simulations.grpo import cli, config, losses

# ---------------------------------------------------------------- the batch
# 3 rollouts, budget T = 4; row lengths 3, 2, 4; advantages +1, -0.5, +2.
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
LENGTHS = [3, 2, 4]
ADV = torch.tensor([1.0, -0.5, 2.0])
# token importance ratios; masked positions hold absurd values that must not matter
RATIO = torch.tensor([[1.0, 1.5, 0.7, 100.0], [0.5, 1.4, 3.0, 0.01], [1.0, 0.9, 1.2, 2.0]], dtype=torch.float64)
OLD = torch.full((3, 4), -1.0, dtype=torch.float64)

# sequence ratios s_i = (Π_t r_{i,t})^(1/T_i), by hand
S = [1.05 ** (1 / 3), 0.7 ** 0.5, 2.16 ** 0.25]   # 1.0164, 0.8367, 1.2123


def _logp() -> torch.Tensor:
    return (OLD + torch.log(RATIO)).clone().requires_grad_(True)


def _by_hand(ell: list[float], mode: str) -> float:
    """Aggregate sequence losses ℓ_i carried by each of their T_i tokens."""
    tok = sum(T * x for T, x in zip(LENGTHS, ell))
    return {"token-mean": tok / sum(LENGTHS), "seq-mean-token-mean": sum(ell) / 3,
            "seq-mean-token-sum": tok / 3, "sum-tmax": tok / (3 * 4)}[mode]


def test_sequence_ratios_by_hand():
    assert S[0] == pytest.approx(1.016396, abs=1e-6)
    assert S[1] == pytest.approx(0.836660, abs=1e-6)
    assert S[2] == pytest.approx(1.212310, abs=1e-6)


# clip [0.8, 1.2]: rows 0 and 1 inside, row 2 above with A > 0 (upper clip engaged)
#   ℓ_0 = -s_0 = -1.016396;  ℓ_1 = -(-0.5 s_1) = 0.418330;  ℓ_2 = -1.2 * 2 = -2.4
GSPO_ELL = [-S[0], 0.5 * S[1], -2.4]


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_gspo_equals_hand_computation(mode):
    logp = _logp()
    total, stats = losses.policy_loss(logp, OLD, ADV, MASK, loss="gspo", aggregation=mode, eps_low=0.2,
                                      eps_high=0.2, max_new_tokens=4)
    assert float(total.detach()) == pytest.approx(_by_hand(GSPO_ELL, mode), rel=1e-12)
    assert stats.clip_frac_low == 0.0 and stats.clip_frac_high == pytest.approx(4 / 9)  # row 2's 4 tokens
    if mode == "seq-mean-token-mean":
        # GSPO's objective (1/N) Σ ℓ_i: d/dlogp_{i,t} = -A_i s_i / (T_i N) where unclipped, 0 where clipped
        total.backward()
        expected = torch.zeros(3, 4, dtype=torch.float64)
        expected[0, :3] = -1.0 * S[0] / (3 * 3)
        expected[1, :2] = 0.5 * S[1] / (2 * 3)
        torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)


def test_gspo_per_token_losses_carry_the_sequence_loss():
    L, low, high = losses.per_token_loss(_logp(), OLD, ADV, loss="gspo", eps_low=0.2, eps_high=0.2, mask=MASK)
    for i, ell in enumerate(GSPO_ELL):
        torch.testing.assert_close(L[i].detach(), torch.full((4,), ell, dtype=torch.float64), rtol=1e-12, atol=0)
    assert high[2].all() and not high[:2].any() and not low.any()


def test_gspo_with_the_published_clip_range_clips_every_sequence():
    # ε = (3e-4, 4e-4), GSPO's (the settings' default): clip [0.9997, 1.0004]
    eps = config.GRPOConfig(out="x", loss="gspo").eps
    assert eps == (3e-4, 4e-4) and config.GRPOConfig(out="x", loss="gspo-n").eps == eps
    logp = _logp()
    total, stats = losses.policy_loss(logp, OLD, ADV, MASK, loss="gspo", aggregation="seq-mean-token-mean",
                                      eps_low=eps[0], eps_high=eps[1])
    # row 0: s > 1.0004, A > 0 -> -1.0004;  row 1: s < 0.9997, A < 0 -> -(-0.5 * 0.9997);  row 2: -2 * 1.0004
    assert float(total.detach()) == pytest.approx((-1.0004 + 0.5 * 0.9997 - 2.0008) / 3, rel=1e-12)
    assert stats.clip_frac_low == pytest.approx(2 / 9) and stats.clip_frac_high == pytest.approx(7 / 9)
    total.backward()
    assert float(logp.grad.abs().max()) == 0.0   # every sequence clipped: no gradient


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_gspo_negative_only_keeps_the_negative_sequences(mode):
    # ℓ_0 and ℓ_2 vanish (A > 0); ℓ_1 as in GSPO
    total, stats = losses.policy_loss(_logp(), OLD, ADV, MASK, loss="gspo-n", aggregation=mode, eps_low=0.2,
                                      eps_high=0.2, max_new_tokens=4)
    assert float(total.detach()) == pytest.approx(_by_hand([0.0, GSPO_ELL[1], 0.0], mode), rel=1e-12)
    assert stats.clip_frac_high == 0.0   # the clipped sequence has A > 0: it is dropped, not clipped


def _sequence_reference(logp, old, adv, mask, eps_low, eps_high, mode, max_new_tokens=None):
    """GSPO as Zheng et al. write it: ℓ_i = -min(s_i A_i, clip(s_i) A_i) with s_i = exp(mean log-ratio)
    differentiated as a whole, each ℓ_i weighted as the aggregation weights its T_i tokens."""
    m = mask.to(logp.dtype)
    T = m.sum(-1)
    s = torch.exp(((logp - old) * m).sum(-1) / T)
    ell = -torch.minimum(s * adv, s.clamp(1 - eps_low, 1 + eps_high) * adv)
    N = len(T)
    weight = {"token-mean": T / T.sum(), "seq-mean-token-mean": torch.ones_like(T) / N,
              "seq-mean-token-sum": T / N, "sum-tmax": T / (N * (max_new_tokens or 1))}[mode]
    return (weight * ell).sum()


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_token_form_has_the_value_and_gradient_of_the_sequence_form(mode):
    g = torch.Generator().manual_seed(1)
    N, T = 6, 7
    old = -torch.rand(N, T, generator=g, dtype=torch.float64) - 0.1
    base = old + 0.05 * torch.randn(N, T, generator=g, dtype=torch.float64)
    mask = torch.ones(N, T)
    for i, n in enumerate([7, 1, 3, 5, 2, 6]):
        mask[i, n:] = 0
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0, 0.0, 1.5], dtype=torch.float64)
    a = base.clone().requires_grad_(True)
    b = base.clone().requires_grad_(True)
    got, _ = losses.policy_loss(a, old, adv, mask, loss="gspo", aggregation=mode, eps_low=0.02, eps_high=0.03,
                                max_new_tokens=T)
    ref = _sequence_reference(b, old, adv, mask, 0.02, 0.03, mode, max_new_tokens=T)
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    got.backward()
    ref.backward()
    torch.testing.assert_close(a.grad * mask, b.grad * mask, rtol=1e-10, atol=1e-15)
    assert float((a.grad * (1 - mask)).abs().max()) == 0.0   # padding gets no gradient


def test_one_token_sequences_are_ppo():
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(5, 1, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(5, 1, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5, 0.3], dtype=torch.float64)
    mask = torch.ones(5, 1)
    for neg, tok in (("gspo", "ppo"), ("gspo-n", "grpo-n")):
        s, _ = losses.policy_loss(logp, old, adv, mask, loss=neg)
        p, _ = losses.policy_loss(logp, old, adv, mask, loss=tok)
        assert float(s) == pytest.approx(float(p), rel=1e-12)


def test_per_token_advantages():
    # GSPO-token takes A_{i,t}: L_{i,t} = -min(s_i A_{i,t}, clip(s_i) A_{i,t})
    adv = torch.tensor([[1.0, -1.0, 2.0, 9.0], [0.5, 0.5, 9.0, 9.0], [-1.0, 1.0, -1.0, 1.0]], dtype=torch.float64)
    L, _, _ = losses.per_token_loss(_logp(), OLD, adv, loss="gspo", eps_low=0.2, eps_high=0.2, mask=MASK)
    L = L.detach()
    for i in range(3):
        for t in range(LENGTHS[i]):
            A, s = float(adv[i, t]), S[i]
            assert float(L[i, t]) == pytest.approx(-min(s * A, min(max(s, 0.8), 1.2) * A), rel=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^mask is required for loss='gspo'"):
        losses.per_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), loss="gspo")
    with pytest.raises(ValueError, match=r"^loss must be one of 'ppo', 'cispo', 'grpo-n', 'gspo', 'gspo-n'"):
        losses.per_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), loss="gspo-p")


def test_the_loss_is_a_setting(tmp_path):
    args = cli.build_parser().parse_args(["grpo", "--out", str(tmp_path / "r"), "--loss", "gspo-n"])
    assert args.loss == "gspo-n"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["grpo", "--out", str(tmp_path / "r"), "--loss", "gspo-x"])
    cfg = config.GRPOConfig(out="x", loss="gspo", eps_high=0.01)
    assert cfg.eps == (3e-4, 0.01)
    assert math.isclose(config.DEFAULT_EPS["gspo"][1], 4e-4)


def test_the_trainer_runs_gspo(tmp_path):
    """Two steps of GSPO-N with two epochs per batch (the second epoch sees s_i != 1) on an
    untrained tiny model: the loss reaches the trainer through the settings."""
    from simulations.grpo import trainer

    rows = []
    cfg = trainer.GRPOConfig(out=str(tmp_path / "run"), task="sort", difficulty=3, device="cpu", threads=1,
                             quiet=True, batch_size=2, group_size=4, steps=2, checkpoint_every=2, ppo_epochs=2,
                             loss="gspo-n", aggregation="seq-mean-token-mean", log_kl=False, rollout_log=False)
    trainer.train(cfg, callback=lambda rec: rows.append(rec.metrics))
    assert len(rows) == 2
    for row in rows:
        assert math.isfinite(row["loss"]) and 0 <= row["clip_frac_low"] <= 1 and row["clip_frac_high"] == 0.0
