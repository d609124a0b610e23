"""simulations.linear_head.simulate_population: the logged alignment of successive head gradients
(``grad_cos``, ``grad_u_cos``; FADE Cor. 15.3) against an independent replay of the run (the same
draws, the policy gradient from torch autograd, the cosines by hand)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulations import linear_head as lh

M, K, G, LR = 6, 3, 5, 0.3


def _replay(seed: int, steps: int, delta: float, reduction: str = "sum") -> list[torch.Tensor]:
    """The head gradients of ``steps`` SGD steps of ``simulate_population(M=M, K=K, G=G, lr=LR,
    advantage="asym_grpo", delta)``, recomputed: the paths and answers from the seed's uniforms by
    the inverse CDF (two draws of shape (M, G) per step, paths first), advantages by hand
    (``r − r̄``, failures divided by δ), the gradient of ``Σ A log π(y | h)`` / M by autograd."""
    H, path_p, cm, W0 = lh.population_setup(M, K)
    rng = np.random.default_rng(seed)
    W = torch.tensor(W0, dtype=torch.float64)
    Ht = torch.tensor(H, dtype=torch.float64)
    grads = []
    for _ in range(steps):
        u_path = rng.random((M, G))
        cdf = np.cumsum(path_p, -1)
        cdf[:, -1] = 1.0
        z = np.array([[np.searchsorted(cdf[m], u_path[m, i], side="left") for i in range(G)] for m in range(M)])
        z = np.minimum(z, K)
        u_ans = rng.random((M, G))
        Wg = W.clone().requires_grad_(True)
        logp = torch.log_softmax(torch.einsum("vd,mzd->mzv", Wg, Ht), -1)            # [M, K+1, V]
        pz = logp.detach().exp().numpy()[np.arange(M)[:, None], z]                     # [M, G, V]
        y = np.empty((M, G), dtype=int)
        for m in range(M):
            for i in range(G):
                c = np.cumsum(pz[m, i])
                y[m, i] = min(int((u_ans[m, i] > c).sum()), pz.shape[-1] - 1)
        r = (y == cm[:, None]).astype(float)
        A = r - r.mean(1, keepdims=True)
        A = np.where(r > 0, A, A / delta)
        lp = logp[torch.tensor(np.arange(M)[:, None]), torch.tensor(z), torch.tensor(y)]   # [M, G]
        loss = (torch.tensor(A) * lp).sum() / (M * (G if reduction == "mean" else 1))
        loss.backward()
        grads.append(Wg.grad.detach().clone())
        W = W + LR * Wg.grad
    return grads


def _by_hand(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    cos = float((a * b).sum() / (a.norm() * b.norm()))
    ua, ub = torch.linalg.svd(a)[2][0], torch.linalg.svd(b)[2][0]
    return cos, abs(float(ua @ ub))


@pytest.mark.parametrize("delta,reduction", [(0.5, "sum"), (1.0, "mean")])
def test_logged_alignment_equals_autograd_replay(delta, reduction):
    steps, seeds = 4, [0, 7]
    tr, _ = lh.simulate_population(M=M, K=K, G=G, seeds=seeds, lr=LR, steps=steps, log_every=1, reduction=reduction,
                                   advantage="asym_grpo", advantage_params={"delta": delta})
    for seed in seeds:
        g = _replay(seed, steps, delta, reduction)
        rows = tr[tr.seed == seed].set_index("step")
        assert np.isnan(rows.loc[0, "grad_cos"]) and np.isnan(rows.loc[0, "grad_u_cos"])
        assert np.isnan(rows.loc[steps, "grad_cos"]) and np.isnan(rows.loc[steps, "grad_u_cos"])
        for t in range(1, steps):
            cos, u_cos = _by_hand(g[t - 1], g[t])
            assert rows.loc[t, "grad_cos"] == pytest.approx(cos, abs=1e-10)
            assert rows.loc[t, "grad_u_cos"] == pytest.approx(u_cos, abs=1e-8)
        assert len({round(float(rows.loc[t, "grad_cos"]), 6) for t in range(1, steps)}) > 1  # not a constant


def test_logged_rows_pair_the_step_with_the_one_before_even_when_thinned():
    """With ``log_every = 3`` the row of step 3 still holds (g_2, g_3), not (g_0, g_3)."""
    tr1, _ = lh.simulate_population(M=M, K=K, G=G, seeds=[3], lr=LR, steps=7, log_every=1)
    tr3, _ = lh.simulate_population(M=M, K=K, G=G, seeds=[3], lr=LR, steps=7, log_every=3)
    a, b = tr1.set_index("step"), tr3.set_index("step")
    for t in (3, 6):
        assert b.loc[t, "grad_cos"] == a.loc[t, "grad_cos"] and b.loc[t, "grad_u_cos"] == a.loc[t, "grad_u_cos"]


def test_alignment_columns_are_the_last_ones_with_and_without_memory():
    for mu in (0.0, 0.5):
        tr, final = lh.simulate_population(M=M, K=K, G=G, seeds=2, lr=LR, steps=3, log_every=1, mu=mu)
        assert list(tr.columns[-2:]) == ["grad_cos", "grad_u_cos"] == list(final.columns[-2:])
        assert tr[tr.step.between(1, 2)][["grad_cos", "grad_u_cos"]].notna().all().all()


def test_population_alignment_direction_is_pinned():
    """The measured direction documented in docs/simulations_linear_head.md (FADE Cor. 15.3 check):
    the hidden-side directions of successive gradients stay aligned for every delta, while the
    flattened cosine is far from 1 and grows with delta (failure-biased weights align less)."""
    late = {}
    for d in (0.5, 2.0):
        tr, _ = lh.simulate_population(K=4, seeds=4, advantage="asym_grpo", advantage_params={"delta": d}, log_every=5)
        cur = tr[tr.step > 50]
        late[d] = (cur.grad_cos.abs().mean(), cur.grad_u_cos.mean())
    assert late[0.5][1] > 0.9 and late[2.0][1] > 0.9
    assert late[0.5][0] < 0.5 and late[0.5][0] < late[2.0][0]
