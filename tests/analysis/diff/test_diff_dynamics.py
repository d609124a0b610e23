"""Series dynamics (``rlvr-diff --series``, ``diff(..., dynamics="series"|"runs")``): bit-identical
share between consecutive checkpoints, linearity R² in the step, Jaccard of update masks across runs.

Every number is recomputed here with numpy from the tensors read back with safetensors: the
bit-identical counts from the int16 views of the bf16 tensors, the R² from ``numpy.polyfit`` on the
same fixed-seed sample, the Jaccard from Python sets of flat indices and the baseline from its
formula; an exactly linear series (float64, exact) gives R² = 1; a diff without a series or several
checkpoints has no ``dynamics`` and an unchanged document.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from analysis import geometry
from analysis.diff import diff
from analysis.diff.cli import main
from analysis.diff.dynamics import linearity_r2, sample_indices
from analysis.diff.settings import MASK_FRACTION, SERIES_SAMPLE

SHAPES = {"model.embed_tokens.weight": (80, 16), "model.layers.0.self_attn.q_proj.weight": (16, 16),
          "model.layers.0.mlp.up_proj.weight": (300, 16), "model.layers.0.input_layernorm.weight": (16,),
          "model.norm.weight": (16,), "lm_head.weight": (80, 16)}
CONFIG = {"model_type": "qwen2", "num_hidden_layers": 1, "hidden_size": 16, "vocab_size": 80,
          "tie_word_embeddings": False}
STEPS = (10, 20, 40, 50)


def _write(path: Path, tensors: dict) -> str:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    return str(path)


def _base(g: torch.Generator, dtype: torch.dtype) -> dict:
    return {k: (0.1 * torch.randn(s, generator=g, dtype=torch.float64)).to(dtype) for k, s in SHAPES.items()}


def _flat(path: str) -> dict:
    return {k: v.reshape(-1) for k, v in load_file(str(Path(path) / "model.safetensors")).items()}


@pytest.fixture(scope="module")
def bf16_series(tmp_path_factory):
    """A bf16 run of 4 checkpoints: a random walk of small steps (many entries keep their bits)."""
    root = tmp_path_factory.mktemp("bf16")
    g = torch.Generator().manual_seed(1)
    W = {k: v.to(torch.float64) for k, v in _base(g, torch.float32).items()}
    base = _write(root / "base", {k: v.bfloat16() for k, v in W.items()})
    cks = []
    for s in STEPS:
        W = {k: v + 3e-4 * torch.randn(v.shape, generator=g, dtype=torch.float64) * (torch.rand(v.shape, generator=g) < 0.3)
             for k, v in W.items()}
        cks.append(_write(root / "run" / f"checkpoint-{s}", {k: v.bfloat16() for k, v in W.items()}))
    return base, cks, root


def test_bit_identical_share_equals_numpy_count(bf16_series):
    base, cks, _ = bf16_series
    doc = diff(base, cks, device="cpu", progress=False, dynamics="series")
    d = doc["dynamics"]
    assert d["kind"] == "series" and d["steps"] == [float(s) for s in STEPS] and d["step_source"] == "names"
    states = [_flat(c) for c in cks]
    tot_same = tot_n = 0
    for t in d["tensors"]:
        shares = []
        for a, b in zip(states, states[1:]):
            x, y = a[t["name"]].view(torch.int16).numpy(), b[t["name"]].view(torch.int16).numpy()
            same = int(np.count_nonzero(x == y))
            shares.append(same / x.size)
            tot_same, tot_n = tot_same + same, tot_n + x.size
        assert t["identical_shares"] == pytest.approx(shares, abs=0)
        assert t["identical_share"] == pytest.approx(np.mean(shares), rel=1e-12)
    assert d["change"]["identical"] == tot_same and d["change"]["n_entries"] == tot_n
    assert d["change"]["identical_share"] == tot_same / tot_n
    assert 0.3 < d["change"]["identical_share"] < 0.95      # some change, much unchanged
    assert [p["identical"] for p in d["change"]["pairs"]] == [
        sum(int(np.count_nonzero(a[n].view(torch.int16).numpy() == b[n].view(torch.int16).numpy())) for n in SHAPES)
        for a, b in zip(states, states[1:])]
    assert doc["settings"]["dynamics"] == "series" and "dynamics" not in doc["timings_s"]


def test_random_walk_r2_equals_polyfit_on_the_same_sample(bf16_series):
    base, cks, _ = bf16_series
    d = diff(base, cks, device="cpu", progress=False, dynamics="series")["dynamics"]
    states = [_flat(c) for c in cks]
    x = np.array(STEPS, dtype=np.float64)
    all_r2, all_res, all_tot, n_static, n_all = [], 0.0, 0.0, 0, 0
    for t in d["tensors"]:
        idx = sample_indices(t["name"], t["n_entries"])
        assert idx.size == min(SERIES_SAMPLE, t["n_entries"])
        Y = np.stack([s[t["name"]].to(torch.float64).numpy()[idx] for s in states])
        r2s, res_t, tot_t = [], 0.0, 0.0
        for j in range(Y.shape[1]):
            y = Y[:, j]
            if np.all(y == y[0]):
                n_static += 1
                continue
            fit = np.polyval(np.polyfit(x, y, 1), x)
            res, tot = float(np.sum((y - fit) ** 2)), float(np.sum((y - y.mean()) ** 2))
            r2s.append(1 - res / tot)
            res_t, tot_t = res_t + res, tot_t + tot
        n_all += Y.shape[1]
        assert t["n_sampled"] == Y.shape[1]
        if r2s:
            assert t["median_r2"] == pytest.approx(np.median(r2s), abs=1e-9)
            assert t["pooled_r2"] == pytest.approx(1 - res_t / tot_t, abs=1e-9)
        else:
            assert t["median_r2"] is None and t["pooled_r2"] is None
        all_r2 += r2s
        all_res, all_tot = all_res + res_t, all_tot + tot_t
    lin = d["linearity"]
    assert lin["n_sampled"] == n_all and lin["static_share"] == pytest.approx(n_static / n_all, abs=0)
    assert lin["median_r2"] == pytest.approx(np.median(all_r2), abs=1e-9)
    assert lin["pooled_r2"] == pytest.approx(1 - all_res / all_tot, abs=1e-9)
    assert lin["median_r2"] < 0.8                         # a random walk is not linear in the step
    assert 0.3 < lin["random_walk"]["median_r2"] < 0.9


def test_exactly_linear_series_gives_r2_one(tmp_path):
    """float64 checkpoints W_base + s·D with dyadic D: exactly linear in the step s; D = 0 on some entries."""
    g = torch.Generator().manual_seed(2)
    base = {k: torch.randint(-64, 64, s, generator=g).to(torch.float64) / 64 for k, s in SHAPES.items()}
    D = {k: torch.randint(-8, 9, s, generator=g).to(torch.float64) / 1024 for k, s in SHAPES.items()}
    b = _write(tmp_path / "base", base)
    cks = [_write(tmp_path / "run" / f"checkpoint-{s}", {k: base[k] + s * D[k] for k in SHAPES}) for s in STEPS]
    d = diff(b, cks, device="cpu", progress=False, dynamics="series")["dynamics"]
    lin = d["linearity"]
    assert lin["median_r2"] == pytest.approx(1.0, abs=1e-12) and lin["pooled_r2"] == pytest.approx(1.0, abs=1e-12)
    static = sum(int(np.count_nonzero(D[t["name"]].reshape(-1).numpy()[sample_indices(t["name"], t["n_entries"])] == 0))
                 for t in d["tensors"])
    assert lin["static_share"] == pytest.approx(static / lin["n_sampled"], abs=0) and static > 0
    for t in d["tensors"]:
        assert t["median_r2"] == pytest.approx(1.0, abs=1e-12)
    # a static entry: R² defined as 1, no NaN; a line through noise: the numpy value
    r2, ss_res, ss_tot, st = linearity_r2([0, 1, 2], np.array([[3.0, 0.0], [3.0, 1.0], [3.0, 0.0]]))
    assert r2.tolist() == [1.0, 0.0] and st.tolist() == [True, False] and ss_tot[0] == ss_res[0] == 0.0


def test_two_checkpoints_no_linearity_and_position_steps(tmp_path):
    g = torch.Generator().manual_seed(3)
    base = _base(g, torch.float32)
    b = _write(tmp_path / "base", base)
    cks = [_write(tmp_path / n, {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in base.items()})
           for n in ("a", "b")]
    d = diff(b, cks, device="cpu", progress=False, dynamics="series")["dynamics"]
    assert d["linearity"] is None and d["step_source"] == "position" and d["steps"] == [0.0, 1.0]
    assert len(d["change"]["pairs"]) == 1 and len(d["notes"]) == 2


def _mask(d: np.ndarray, q: float) -> set:
    a = np.abs(d)
    k = min(a.size, max(1, math.ceil(q * a.size - 1e-9 * max(1.0, q * a.size))))
    t = np.sort(a)[::-1][k - 1]
    return set(np.flatnonzero((a >= t) & (a > 0)).tolist())


def test_jaccard_across_runs_equals_sets_and_baseline(tmp_path):
    """Three runs of one base: a shared sparse update plus each run's own (float32: ΔW as numpy has it)."""
    g = torch.Generator().manual_seed(4)
    base = _base(g, torch.float32)
    shared = {k: torch.randn(s, generator=g) * (torch.rand(s, generator=g) < 0.04) for k, s in SHAPES.items()}
    b = _write(tmp_path / "base", base)
    runs = []
    for i in range(3):
        own = {k: 0.5 * torch.randn(s, generator=g) * (torch.rand(s, generator=g) < 0.05) for k, s in SHAPES.items()}
        runs.append(_write(tmp_path / f"rl{i}", {k: base[k] + 1e-2 * (shared[k] + own[k]) for k in SHAPES}))
    doc = diff(b, runs, device="cpu", progress=False)               # "auto": runs
    d = doc["dynamics"]
    assert d["kind"] == "runs" and d["settings"]["mask_fraction"] == MASK_FRACTION
    B = _flat(b)
    R = [_flat(r) for r in runs]
    tot = {}
    for t in d["tensors"]:
        n = t["name"]
        masks = [_mask((r[n] - B[n]).numpy(), MASK_FRACTION) for r in R]
        for p in t["pairs"]:
            A, C = masks[p["a"]], masks[p["b"]]
            N = B[n].numel()
            assert p["jaccard"] == pytest.approx(len(A & C) / len(A | C), abs=1e-15)
            pa, pb = len(A) / N, len(C) / N
            assert (p["density_a"], p["density_b"]) == pytest.approx((pa, pb), abs=1e-15)
            assert p["baseline"] == pytest.approx(pa * pb / (pa + pb - pa * pb), rel=1e-12)
            x = tot.setdefault((p["a"], p["b"]), [0, 0, 0, 0])
            x[0], x[1], x[2], x[3] = x[0] + len(A & C), x[1] + len(A | C), x[2] + len(A), x[3] + len(C)
        if len(B[n].shape) == 1:
            continue
        W = load_file(str(Path(b) / "model.safetensors"))[n]
        Wa, Wc = (load_file(str(Path(runs[i]) / "model.safetensors"))[n] for i in (0, 1))
        ref = geometry.update_mask_jaccard(W, Wa, Wc, fraction=MASK_FRACTION, device="cpu").set_index("metric")
        assert t["pairs"][0]["jaccard"] == pytest.approx(ref.loc["jaccard", "value"], abs=1e-12)
        assert t["pairs"][0]["baseline"] == pytest.approx(ref.loc["jaccard", "baseline"], abs=1e-12)
    N = sum(v.numel() for v in B.values())
    for p in d["pairs"]:
        inter, union, na, nb = tot[(p["a"], p["b"])]
        assert (p["intersection"], p["union"], p["n_entries"]) == (inter, union, N)
        assert p["jaccard"] == inter / union
        assert p["baseline"] == pytest.approx(geometry.jaccard_baseline(na / N, nb / N), rel=1e-15)
        assert p["jaccard"] > 3 * p["baseline"]


def test_without_series_or_several_checkpoints_nothing_changes(tmp_path):
    g = torch.Generator().manual_seed(5)
    base = _base(g, torch.float32)
    b = _write(tmp_path / "base", base)
    cks = [_write(tmp_path / f"rl{i}", {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in base.items()})
           for i in range(2)]

    def strip(doc):
        return {k: v for k, v in doc.items() if k not in ("timing_s", "timings_s", "run")}

    one = diff(b, cks[:1], device="cpu", progress=False)
    assert "dynamics" not in one and "dynamics" not in one["settings"] and "dynamics" not in one["timings_s"]
    assert "dynamics" not in one["run"]["settings"]
    off = diff(b, cks[:1], device="cpu", progress=False, dynamics=None)
    assert json.dumps(strip(one)) == json.dumps(strip(off))
    two, two_off = (diff(b, cks, device="cpu", progress=False, dynamics=x) for x in ("auto", None))
    two = strip(two)
    two.pop("dynamics")
    two["settings"].pop("dynamics")
    assert json.dumps(two) == json.dumps(strip(two_off))
    with pytest.raises(ValueError, match="dynamics must be"):
        diff(b, cks, device="cpu", progress=False, dynamics="steps")
    with pytest.raises(ValueError, match="at least 2 checkpoints"):
        diff(b, cks[:1], device="cpu", progress=False, dynamics="series")


def test_cli_series_writes_the_dynamics_section(bf16_series, capsys):
    base, cks, root = bf16_series
    out = root / "rep"
    assert main([base, "--series", str(root / "run"), "--out", str(out), "--device", "cpu", "--threads", "1"]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["dynamics"]["kind"] == "series" and doc["dynamics"]["checkpoints"] == cks
    md = (out / "report.md").read_text()
    sec = md.split("## Dynamics")[1]
    assert f"{100 * doc['dynamics']['change']['identical_share']:.3g}% of stored entries are bit-identical" in sec
    assert "median R²" in sec and "random walks" in sec
    assert "bit-identical between consecutive" in capsys.readouterr().out
