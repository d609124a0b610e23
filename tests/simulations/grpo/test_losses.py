"""Losses of the GRPO trainer against hand computations on a fixed small batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlvr_theory import advantages
from simulations.grpo import losses

# ---------------------------------------------------------------- the batch
# 3 rollouts, budget T = 4; row lengths 3, 2, 4; advantages +1, -0.5, +2.
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
ADV = torch.tensor([1.0, -0.5, 2.0])
# importance ratios; masked positions hold absurd values that must not matter
RATIO = torch.tensor([[1.0, 1.5, 0.7, 100.0], [0.5, 1.4, 3.0, 0.01], [1.0, 0.9, 1.2, 2.0]], dtype=torch.float64)
OLD = torch.full((3, 4), -1.0, dtype=torch.float64)
EPS_LOW, EPS_HIGH = 0.2, 0.28   # clip to [0.8, 1.28]


def _logp() -> torch.Tensor:
    return (OLD + torch.log(RATIO)).clone().requires_grad_(True)


# PPO per-token losses L = -min(r A, clip(r) A), worked out by hand:
#   row 0 (A=+1):  r=1 -> -1;  r=1.5 -> clip 1.28 -> -1.28 (upper clip);  r=0.7 -> -0.7
#   row 1 (A=-.5): r=0.5 -> min(-0.25, -0.4) = -0.4 -> +0.4 (lower clip);  r=1.4 -> min(-0.7, -0.64) -> +0.7
#   row 2 (A=+2):  -2;  r=0.9 -> -1.8;  r=1.2 -> -2.4;  r=2 -> clip 1.28 -> -2.56 (upper clip)
PPO_ROWS = [[-1.0, -1.28, -0.7], [0.4, 0.7], [-2.0, -1.8, -2.4, -2.56]]


def _cispo_rows() -> list[list[float]]:
    """L = -clip(r)·A·log π with log π = -1 + ln r (by hand, per token)."""
    lp = lambda r: -1.0 + math.log(r)  # noqa: E731
    return [[-1.0 * 1.0 * lp(1.0), -1.28 * 1.0 * lp(1.5), -0.8 * 1.0 * lp(0.7)],
            [-0.8 * -0.5 * lp(0.5), -1.28 * -0.5 * lp(1.4)],
            [-1.0 * 2.0 * lp(1.0), -0.9 * 2.0 * lp(0.9), -1.2 * 2.0 * lp(1.2), -1.28 * 2.0 * lp(2.0)]]


def _aggregate_by_hand(rows: list[list[float]], mode: str, T: int = 4) -> float:
    N = len(rows)
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / N
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in rows) / N
    return sum(sum(r) for r in rows) / (N * T)   # sum-tmax: T_max = N * max_new_tokens


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
@pytest.mark.parametrize("kind", ["ppo", "cispo"])
def test_loss_equals_hand_computation(kind, mode):
    rows = PPO_ROWS if kind == "ppo" else _cispo_rows()
    total, stats = losses.policy_loss(_logp(), OLD, ADV, MASK, loss=kind, aggregation=mode,
                                      eps_low=EPS_LOW, eps_high=EPS_HIGH, max_new_tokens=4)
    assert float(total.detach()) == pytest.approx(_aggregate_by_hand(rows, mode), rel=1e-12)
    assert stats.pg_loss == pytest.approx(_aggregate_by_hand(rows, mode), rel=1e-12)


def test_hand_numbers_of_the_aggregations():
    # the PPO batch: total -10.64 over 9 tokens
    assert _aggregate_by_hand(PPO_ROWS, "token-mean") == pytest.approx(-10.64 / 9)
    assert _aggregate_by_hand(PPO_ROWS, "seq-mean-token-mean") == pytest.approx((-2.98 / 3 + 1.1 / 2 - 8.76 / 4) / 3)
    assert _aggregate_by_hand(PPO_ROWS, "seq-mean-token-sum") == pytest.approx(-10.64 / 3)
    assert _aggregate_by_hand(PPO_ROWS, "sum-tmax") == pytest.approx(-10.64 / 12)


def test_ppo_clipping_engages_where_it_should():
    logp = _logp()
    total, stats = losses.policy_loss(logp, OLD, ADV, MASK, loss="ppo", aggregation="seq-mean-token-sum",
                                      eps_low=EPS_LOW, eps_high=EPS_HIGH)
    total.backward()
    # d/dlogp of -(r A) is -r A where the unclipped term is selected, 0 where a clip engaged; /N = 3
    expected = torch.tensor([[-1.0, 0.0, -0.7, 0.0], [0.0, 0.7, 0.0, 0.0], [-2.0, -1.8, -2.4, 0.0]],
                            dtype=torch.float64) / 3
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)
    # engaged: lower clip on row 1 token 0 (A<0, r<0.8); upper on row 0 token 1 and row 2 token 3
    assert stats.clip_frac_low == pytest.approx(1 / 9)
    assert stats.clip_frac_high == pytest.approx(2 / 9)
    _, low, high = losses.per_token_loss(logp, OLD, ADV, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    assert low[0, 2].item() is False  # r=0.7 < 0.8 but A>0: the lower clip does not bind
    assert high[1, 1].item() is False  # r=1.4 > 1.28 but A<0: the upper clip does not bind


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    logp = _logp()
    total, stats = losses.policy_loss(logp, OLD, ADV, MASK, loss="cispo", aggregation="seq-mean-token-sum",
                                      eps_low=EPS_LOW, eps_high=EPS_HIGH)
    total.backward()
    # gradient -sg(clip(r))·A on every unmasked token, /N = 3
    expected = torch.tensor([[-1.0, -1.28, -0.8, 0.0], [0.4, 0.64, 0.0, 0.0], [-2.0, -1.8, -2.4, -2.56]],
                            dtype=torch.float64) / 3
    torch.testing.assert_close(logp.grad, expected, rtol=1e-12, atol=1e-15)
    # clipped weights: r in {0.7, 0.5} below 0.8; r in {1.5, 1.4, 2.0} above 1.28 (signs do not matter)
    assert stats.clip_frac_low == pytest.approx(2 / 9)
    assert stats.clip_frac_high == pytest.approx(3 / 9)


@pytest.mark.parametrize("neg, full", [("grpo-n", "ppo"), ("gspo-n", "gspo")])
def test_negative_only_loss_is_its_full_loss_on_the_negative_advantages_only(neg, full):
    """GRPO-N is PPO-clip and GSPO-N is GSPO on the negative advantages only."""
    rewards = np.array([[1, 0, 0, 1], [0, 0, 0, 1]], float)
    a_grpo = torch.tensor(advantages.get("grpo")(rewards).ravel())
    a_neg = torch.tensor(advantages.get("grpo_n")(rewards).ravel())
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 5, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(8, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(8, 5)
    mask[:, 3:] = 0
    for mode in losses.AGGREGATIONS:
        n_loss, _ = losses.policy_loss(logp, old, a_grpo, mask, loss=neg, aggregation=mode, max_new_tokens=5)
        p_loss, _ = losses.policy_loss(logp, old, a_neg, mask, loss=full, aggregation=mode, max_new_tokens=5)
        assert float(n_loss) == pytest.approx(float(p_loss), rel=1e-12)
    # and positives alone give nothing
    z, _ = losses.policy_loss(logp, old, a_grpo.clamp_min(0), mask, loss=neg)
    assert float(z) == 0.0


def test_kl_and_entropy_terms():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1]])
    # k3 at ρ = -0.5: e^-0.5 + 0.5 - 1; at ρ = 0: 0
    k3 = math.exp(-0.5) + 0.5 - 1
    torch.testing.assert_close(losses.kl_k3(logp, ref), torch.tensor([[k3, 0.0]], dtype=torch.float64))
    ent = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    adv = torch.tensor([0.0])
    total, st = losses.policy_loss(logp, logp, adv, mask, ref_logp=ref, kl_coef=0.1, entropy=ent, entropy_coef=0.01)
    # pg = 0 (A = 0); + 0.1 * mean(k3, 0) - 0.01 * mean(0.3, 0.7)
    assert float(total) == pytest.approx(0.1 * k3 / 2 - 0.01 * 0.5, rel=1e-12)
    assert st.kl == pytest.approx(k3 / 2) and st.entropy == pytest.approx(0.5)


def test_bad_arguments_name_the_setting():
    with pytest.raises(ValueError, match=r"^aggregation must be one of"):
        losses.aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean")
    with pytest.raises(ValueError, match=r"^max_new_tokens must be"):
        losses.aggregate(torch.zeros(1, 1), torch.ones(1, 1), "sum-tmax")
    with pytest.raises(ValueError, match=r"^loss must be one of"):
        losses.per_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), loss="reinforce")
    with pytest.raises(ValueError, match=r"^ref_logp is required"):
        losses.policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), kl_coef=0.1)
