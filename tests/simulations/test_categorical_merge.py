"""Tests of the categorical engine's CPU sampling kernels and schedules: the numba path (an
``O(N + K)`` merge of the sorted draws with the CDF) against the pure-torch path
(``torch.searchsorted``), bit for bit, and the all-at-once (CUDA) schedule against the
block schedule, on the CPU.

References: the torch path of the same module (``NUMBA = False``: ``torch.cumsum``,
``torch.searchsorted``, ``scatter_add_``), which is the engine's original sampler, on the same
seeds; the block schedule for the batched one.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pandas as pd
import pytest
import torch

from simulations import categorical as sc

HAS_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")


def _policy(B: int, K: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A rugged policy: a few heavy actions, many light ones, some exactly zero."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, K, generator=g, dtype=torch.float64) * 3
    z[:, :: max(1, K // 7)] += 6
    p = torch.softmax(z, -1)
    p[:, 1::5] = 0.0  # zero-probability actions: never drawn, and equal CDF values around them
    return (p / p.sum(-1, keepdim=True)).to(dtype)


def _both(fun, monkeypatch):
    """``fun()`` on the numba path and on the torch path."""
    monkeypatch.setattr(sc, "NUMBA", True)
    a = fun()
    monkeypatch.setattr(sc, "NUMBA", False)
    b = fun()
    return a, b


@needs_numba
@pytest.mark.parametrize("B,K,N", [(1, 2, 1), (3, 5, 40), (5, 64, 7), (8, 1000, 3), (6, 1000, 1000),
                                   (4, 3000, 20_000), (9, 128, 100_000)])
def test_numba_and_torch_paths_draw_the_same_counts(B, K, N, monkeypatch):
    """Same seed -> the same counts, bit for bit, for N << K, N ~ K and N >> K, with zero-mass
    actions, rows that are not a multiple of four, and several steps."""
    p = _policy(B, K, seed=K + N)
    seeds = torch.arange(B, dtype=torch.int64) * 7 + 3
    for step in (0, 1, 999):
        a, b = _both(lambda step=step: sc.sample_counts(p, N, seeds, step), monkeypatch)
        assert torch.equal(a, b)
        assert torch.equal(a.sum(-1), torch.full((B,), float(N), dtype=a.dtype))
        assert not bool((a[:, 1::5] > 0).any())  # zero mass is never drawn


def test_numba_path_is_used_when_numba_imports(monkeypatch):
    assert sc.NUMBA is HAS_NUMBA
    assert sc.sampler("cpu") == ("numba" if HAS_NUMBA else "torch")
    assert sc.sampler("meta") == "torch"  # the kernels are for CPU tensors only
    monkeypatch.setattr(sc, "NUMBA", False)  # the switch forces the torch path
    assert sc.sampler("cpu") == "torch"


def test_torch_path_when_numba_does_not_import():
    """A process where ``import numba`` fails samples with torch, and draws the same counts."""
    code = ("import sys; sys.modules['numba'] = None\n"
            "import torch\n"
            "from simulations import categorical as sc\n"
            "assert sc.NUMBA is False and sc.sampler('cpu') == 'torch'\n"
            "p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)\n"
            "print(sc.sample_counts(p, 10, torch.tensor([0, 1]), step=0).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
    assert out.strip() == str(sc.sample_counts(p, 10, torch.tensor([0, 1]), step=0).tolist())


@needs_numba
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kw", [
    dict(N=(2, 7, 64, 3000), gamma=(0.0, 1.0), seeds=(0, 1, 2), steps=25, record_every=5, predict=True),
    dict(N=(5, 300), gamma=(0.5,), seeds=(3,), lr=(0.01, 0.1), steps=15, record_every=3, surrogate="prob"),
    dict(N=(5, 300), seeds=(3, 4), steps=15, record_every=3, surrogate="trpo"),
    dict(N=(16,), seeds=(1,), steps=15, record_every=3, optimizer="sgd", lr=(1.0,), advantage="grpo"),
])
def test_simulations_are_bit_identical_on_both_paths(kw, dtype, monkeypatch):
    cfg = sc.Config(K=1000, n_correct=100, **kw)
    a, b = _both(lambda: sc.simulate(cfg, device="cpu", dtype=dtype)[0], monkeypatch)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a.Q_pos.nunique() > 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_schedule_equals_block_schedule_on_cpu(dtype):
    """The CUDA schedule (every configuration at once) run on the CPU gives the numbers of the
    CPU schedule (one group size at a time), bit for bit."""
    cfg = sc.Config(K=1000, n_correct=100, N=(2, 7, 64, 1000), gamma=(0.0, 1.0), seeds=(0, 1, 2), lr=(0.05,),
                    steps=25, record_every=5, predict=True)
    a, fa = sc.simulate(cfg, device="cpu", dtype=dtype, execution="blocks")
    b, fb = sc.simulate(cfg, device="cpu", dtype=dtype, execution="batched")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    pd.testing.assert_frame_equal(fa, fb, check_exact=True)
    c, _ = sc.simulate(cfg, device="cpu", dtype=dtype)  # "auto" on the CPU: blocks
    pd.testing.assert_frame_equal(a, c, check_exact=True)
    two_lrs = sc.Config(**{**cfg.to_dict(), "lr": (0.01, 0.1), "surrogate": "prob", "predict": False})
    a, _ = sc.simulate(two_lrs, device="cpu", dtype=dtype, execution="blocks")
    b, _ = sc.simulate(two_lrs, device="cpu", dtype=dtype, execution="batched")
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_schedule_is_checked_and_sizes_the_memory_estimate():
    cfg = sc.Config(N=(4, 1024, 131_072), seeds=(0,), steps=10)
    with pytest.raises(ValueError, match="schedule must be one of 'auto', 'blocks', 'batched'; got 'gpu'"):
        sc.simulate(cfg, device="cpu", schedule="gpu")
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # one block at a time
        assert cfg.memory_bytes("cpu", schedule="batched") > 2 * cfg.memory_bytes("cpu", schedule="blocks")
        assert cfg.memory_bytes("cpu") == cfg.memory_bytes("cpu", schedule="blocks")
        assert cfg.memory_bytes("cuda") == cfg.memory_bytes("cpu", schedule="batched")
        one = cfg.memory_bytes("cpu")
        torch.set_num_threads(2)  # the two largest blocks side by side
        assert one < cfg.memory_bytes("cpu") < cfg.memory_bytes("cpu", schedule="batched")
    finally:
        torch.set_num_threads(n)


@needs_numba
def test_threads_split_rows_with_the_same_draws(monkeypatch):
    """The kernels split the rows among torch's threads: the draws do not depend on the split."""
    p = _policy(11, 20_000, seed=3)
    seeds = torch.arange(11)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sc.sample_counts(p, 200_000, seeds, 2)
        torch.set_num_threads(3)
        three = sc.sample_counts(p, 200_000, seeds, 2)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(one, three)


def test_blocks_side_by_side_give_the_numbers_of_one_thread():
    """With several torch threads the CPU runs blocks side by side (single-threaded operations):
    the same trajectories as one thread, and a diverging block still stops the run."""
    cfg = sc.Config(K=2000, n_correct=200, N=(2, 64, 1000, 5000), gamma=(0.0, 1.0), seeds=(0, 1), steps=20,
                    record_every=4)
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = sc.simulate(cfg, device="cpu")
        torch.set_num_threads(3)
        three, _ = sc.simulate(cfg, device="cpu")
        assert torch.get_num_threads() == 3  # restored
        bad = sc.Config(**{**cfg.to_dict(), "lr": (1e38,)})
        with pytest.raises(ValueError, match="non-finite logits"):
            sc.simulate(bad, device="cpu")
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(n)
    pd.testing.assert_frame_equal(one, three, check_exact=True)


def test_execution_keyword_and_its_deprecated_alias_schedule():
    """``execution`` (how the configurations are advanced) was called ``schedule``: the old
    keyword still works, with a DeprecationWarning naming the new one, and gives the same numbers."""
    cfg = sc.Config(K=50, n_correct=5, N=(4, 16), seeds=(0,), steps=5, record_every=5)
    a, fa = sc.simulate(cfg, device="cpu", execution="blocks")
    with pytest.warns(DeprecationWarning, match="use execution="):
        b, fb = sc.simulate(cfg, device="cpu", schedule="blocks")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    pd.testing.assert_frame_equal(fa, fb, check_exact=True)
    with pytest.warns(DeprecationWarning, match="use execution="):
        assert cfg.memory_bytes("cpu", schedule="batched") == cfg.memory_bytes("cpu", execution="batched")
    with pytest.raises(ValueError, match="execution must be one of 'auto', 'blocks', 'batched'; got 'gpu'"):
        sc.simulate(cfg, device="cpu", execution="gpu")
    with pytest.raises(TypeError, match="give execution only"):
        sc.simulate(cfg, device="cpu", execution="blocks", schedule="blocks")
    with pytest.warns(DeprecationWarning, match="use EXECUTIONS"):
        assert sc.SCHEDULES == sc.EXECUTIONS == ("auto", "blocks", "batched")
