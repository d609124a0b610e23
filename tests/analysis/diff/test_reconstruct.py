"""``rlvr-diff reconstruct`` (analysis.diff.reconstruct): rank-k and extrapolated checkpoints.

Every written checkpoint is reloaded with ``transformers.AutoModelForCausalLM.from_pretrained`` and
compared with a dense float64 reference computed here with ``torch.linalg.svd`` (not with
``analysis.spectra``), rounded to the stored dtype: equal to that rounding (one unit in the last
place where the float64 values of the two computations straddle a rounding boundary).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.diff import reconstruct as rc
from analysis.diff.cli import main
from tests.analysis import tiny_checkpoints as tc

RANK_OF_DELTA = 6      # planted ΔW of every matrix: rank 6 with distinct singular values (plus the whole head)


def _deltas(path: Path, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    """A ΔW for every floating-point tensor: rank-6 with a spread spectrum for matrices, dense for
    the head (full rank), random for 1-D tensors (norms, biases)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, t in sorted(tc.load_state(path).items()):
        if not t.is_floating_point():
            continue
        if t.ndim == 2 and k != "lm_head.weight":
            m, n = t.shape
            U = np.linalg.qr(rng.standard_normal((m, RANK_OF_DELTA)))[0]
            V = np.linalg.qr(rng.standard_normal((n, RANK_OF_DELTA)))[0]
            s = 0.05 * scale * np.array([8.0, 4.0, 2.0, 1.0, 0.5, 0.25])
            out[k] = (U * s) @ V.T
        else:
            out[k] = 0.01 * scale * rng.standard_normal(tuple(t.shape))
    return out


def _pair(dtype: str) -> tuple[Path, Path]:
    def make(p: Path):
        base = tc.build(p / "base", "qwen2", layers=2, dtype=dtype, seed=1, tokenizer=True)
        tc.plant_files(base, p / "rl", _deltas(base, 5))
        return base, p / "rl"
    return tc.cached(f"reconstruct_{dtype}", make)


def _load(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    return {k: v.detach() for k, v in model.state_dict().items()}


def _reference(base: Path, rl: Path, k: int | None, *, rescale: bool = False, others: str = "rl"):
    """Dense float64 reconstruction with torch.linalg.svd, cast to the RL dtype."""
    B, R = tc.load_state(base), tc.load_state(rl)
    out = {}
    for name, x in R.items():
        b64, r64 = B[name].to(torch.float64), x.to(torch.float64)
        if x.ndim == 2:
            D = r64 - b64
            U, S, Vh = torch.linalg.svd(D, full_matrices=False)
            kk = len(S) if k is None else min(k, len(S))
            P = (U[:, :kk] * S[:kk]) @ Vh[:kk]
            if rescale:
                P = P * (torch.linalg.norm(D) / torch.linalg.norm(P))
            out[name] = (b64 + P).to(x.dtype)
        else:
            out[name] = x if others == "rl" else B[name].to(x.dtype)
    return out


def _assert_rounding_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Equal, or one unit in the last place apart (float64 rounding of two SVD routes)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = got.to(torch.float64), want.to(torch.float64)
    ulp = torch.finfo(want.dtype).eps * w.abs().clamp_min(torch.finfo(want.dtype).tiny)
    bad = (g - w).abs() > ulp * 1.0001
    assert not bool(bad.any()), (what, float((g - w).abs().max()), int(bad.sum()))
    assert float((g != w).to(torch.float64).mean()) < 0.01, what   # almost all entries bit-identical


def _assert_line_exact(got: torch.Tensor, exact: torch.Tensor, what: str) -> None:
    """The float32 rounding of the exact value, up to the float64 rounding of ``Σ c_i W_i``
    (``c_i`` are not dyadic: an entry whose exact value is 0 may come out as ~1e-17)."""
    want = exact.to(torch.float32)
    err = (got.to(torch.float64) - want.to(torch.float64)).abs()
    ulp = torch.finfo(torch.float32).eps * want.to(torch.float64).abs()
    assert bool((err <= ulp + 1e-14 * float(exact.abs().max())).all()), (what, float(err.max()))
    assert float((got != want).to(torch.float64).mean()) < 0.01, what


def _compare(out: Path, ref: dict[str, torch.Tensor]) -> None:
    got = _load(out)
    for name, want in ref.items():
        _assert_rounding_equal(got[name], want, name)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rank_k_matches_dense_reference_and_reloads(tmp_path, dtype):
    base, rl = _pair(dtype)
    doc = rc.reconstruct(base, rl, tmp_path / "r3", rank=3, max_shard_size="100KB")
    out = tmp_path / "r3"
    _compare(out, _reference(base, rl, 3))
    files = sorted(p.name for p in out.iterdir())
    assert "model.safetensors.index.json" in files and len(doc["shards"]) > 1   # sharded as save_pretrained
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "reconstruct.json"):
        assert f in files, f
    assert (out / "config.json").read_bytes() == (rl / "config.json").read_bytes()
    assert doc["counts"]["matrices"] == 16 and doc["counts"]["other_from_rl"] == 11   # 7 per block, embed, head
    # rank 3 of a rank-6 planted update: the energy share is (8²+4²+2²)/(8²+…+0.25²) in each block matrix
    s = np.array([8.0, 4.0, 2.0, 1.0, 0.5, 0.25])
    e = {r["name"]: r["energy"] for r in doc["matrices"]}
    assert e["model.layers.0.mlp.up_proj.weight"] == pytest.approx((s[:3] ** 2).sum() / (s ** 2).sum(), rel=1e-2)
    assert json.loads((out / "reconstruct.json").read_text())["rank"] == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary left


def test_others_from_base_and_rank_full_gives_rl_back(tmp_path):
    base, rl = _pair("float32")
    rc.reconstruct(base, rl, tmp_path / "b1", rank=1, others="base")
    _compare(tmp_path / "b1", _reference(base, rl, 1, others="base"))
    rc.reconstruct(base, rl, tmp_path / "full", rank="full")
    rc.reconstruct(base, rl, tmp_path / "k64", rank=64)    # every matrix's smaller side is 64
    want = tc.load_state(rl)
    for d in ("full", "k64"):
        got = tc.load_state(tmp_path / d)
        assert set(got) == set(want)
        for n in want:
            assert torch.equal(got[n], want[n]), (d, n)


def test_rescale_gives_the_norm_of_delta(tmp_path):
    base, rl = _pair("float32")
    doc = rc.reconstruct(base, rl, tmp_path / "r1s", rank=1, rescale=True)
    _compare(tmp_path / "r1s", _reference(base, rl, 1, rescale=True))
    B, R, G = tc.load_state(base), tc.load_state(rl), tc.load_state(tmp_path / "r1s")
    for rec in doc["matrices"]:
        n = rec["name"]
        d_rl = torch.linalg.norm(R[n].double() - B[n].double())
        d_got = torch.linalg.norm(G[n].double() - B[n].double())
        assert float(d_got) == pytest.approx(float(d_rl), rel=1e-5), n
        assert rec["scale"] == pytest.approx(rec["delta_l2"] / rec["part_l2"])
        assert torch.linalg.matrix_rank(G[n].double() - B[n].double(), rtol=1e-4) == 1


def test_extrapolation_of_an_exactly_linear_series(tmp_path):
    """W_t = W_0 + t·G with dyadic entries (exact in float32): the line at any step is exact."""
    base = _pair("float32")[0]
    rng = np.random.default_rng(3)
    st = tc.load_state(base)
    G = {k: np.round(rng.standard_normal(tuple(t.shape)) * 64) / 2 ** 14 for k, t in st.items() if t.is_floating_point()}
    W0 = {k: (t.double() * 2 ** 10).round() / 2 ** 10 for k, t in st.items() if t.is_floating_point()}
    zero = tmp_path / "run" / "zero"
    tc.plant_files(base, zero, {k: (W0[k] - st[k].double()).numpy() for k in W0})
    for t in (10, 20, 40):
        tc.plant_files(zero, tmp_path / "run" / f"checkpoint-{t:06d}", {k: t * g for k, g in G.items()})
    cks = [tmp_path / "run" / f"checkpoint-{t:06d}" for t in (10, 20, 40)]
    doc = rc.extrapolate(cks, tmp_path / "x80", at=80)
    assert doc["steps"] == [10.0, 20.0, 40.0]
    got = _load(tmp_path / "x80")
    for k in W0:
        _assert_line_exact(got[k], W0[k] + 80 * torch.from_numpy(G[k]), k)
    # the CLI: a run directory stands for its checkpoint-N folders ("zero" is not one), a step
    # inside the series interpolates
    assert main(["reconstruct", "--series", str(tmp_path / "run"), "--extrapolate", "30", "--out",
                 str(tmp_path / "x30"), "--quiet"]) == 0
    got = tc.load_state(tmp_path / "x30")
    for k in W0:
        _assert_line_exact(got[k], W0[k] + 30 * torch.from_numpy(G[k]), k)
    # explicit steps win over the names
    assert main(["reconstruct", "--series", *map(str, cks), "--steps", "1", "2", "4", "--extrapolate", "8",
                 "--out", str(tmp_path / "x8"), "--quiet"]) == 0
    got = tc.load_state(tmp_path / "x8")
    k = "lm_head.weight"
    _assert_line_exact(got[k], W0[k] + 80 * torch.from_numpy(G[k]), k)


def test_cli_rank_k(tmp_path, capsys):
    base, rl = _pair("float32")
    assert main(["reconstruct", str(base), str(rl), "--rank", "2", "--out", str(tmp_path / "r2")]) == 0
    printed = capsys.readouterr().out
    assert "rank 2" in printed and "16 matrices" in printed
    _compare(tmp_path / "r2", _reference(base, rl, 2))


@pytest.mark.parametrize("argv, message", [
    (["--rank", "0"], "--rank must be an integer >= 1 or 'full', got 0"),
    (["--rank", "two"], "--rank must be an integer >= 1 or 'full'"),
    ([], "--rank is required"),
    (["--rank", "1", "--max-shard-size", "5 parsecs"], "--max-shard-size must be a size"),
])
def test_bad_rank_arguments_are_refused(tmp_path, capsys, argv, message):
    base, rl = _pair("float32")
    out = tmp_path / "out"
    assert main(["reconstruct", str(base), str(rl), "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_bad_series_and_inputs_are_refused(tmp_path, capsys):
    base, rl = _pair("float32")
    out = str(tmp_path / "out")
    cases = [
        (["--series", str(rl), "--extrapolate", "5", "--out", out], "--series must hold at least 2 checkpoints"),
        (["--series", str(base), str(rl), "--extrapolate", "5", "--out", out], "--steps: the step of --series"),
        (["--series", str(base), str(rl), "--steps", "3", "3", "--extrapolate", "5", "--out", out],
         "--steps must hold at least 2 distinct values"),
        (["--series", str(base), str(rl), "--steps", "3", "--extrapolate", "5", "--out", out],
         "--steps must give one step per --series checkpoint"),
        (["--series", str(base), str(rl), "--steps", "1", "2", "--extrapolate", "5", "--rank", "1", "--out", out],
         "--rank is not used with --extrapolate"),
        ([str(base), "--rank", "1", "--out", out], "BASE RL: give BASE and RL"),
        ([str(base), str(rl), "--rank", "1", "--series", str(rl), "--out", out], "--series goes with --extrapolate"),
    ]
    for argv, message in cases:
        assert main(["reconstruct", *argv]) == 2, argv
        assert message in capsys.readouterr().err, (argv, message)
    assert not list(tmp_path.iterdir())


def test_mismatched_shapes_are_refused(tmp_path, capsys):
    base, _ = _pair("float32")
    other = tc.build(tmp_path / "wide", "qwen2", layers=2, hidden=32, seed=1)
    out = tmp_path / "out"
    assert main(["reconstruct", str(base), str(other), "--rank", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "RL: tensor" in err and "has shape" in err and not out.exists()  # the positional as the user typed it
    with pytest.raises(ValueError, match=r"checkpoints\[1\]: tensor .* has shape"):
        rc.extrapolate([base, other], out, at=3, steps=[1, 2])
    assert not out.exists()


def test_existing_out_is_refused_unless_overwrite(tmp_path, capsys):
    base, rl = _pair("float32")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["reconstruct", str(base), str(rl), "--rank", "1", "--out", str(out)]) == 2
    assert "--out" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="holds the input"):
        rc.reconstruct(base, rl, rl.parent, rank=1, overwrite=True)
    assert main(["reconstruct", str(base), str(rl), "--rank", "1", "--out", str(out), "--overwrite", "--quiet"]) == 0
    assert not (out / "notes.txt").exists() and (out / "model.safetensors").is_file()


def test_no_half_written_directory_after_a_failure(tmp_path, monkeypatch):
    base, rl = _pair("float32")
    calls = []

    def fail(*a, **k):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("disk on fire")
        return real(*a, **k)

    real = rc.rank_k_part
    monkeypatch.setattr(rc, "rank_k_part", fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        rc.reconstruct(base, rl, tmp_path / "out", rank=2, max_shard_size="50KB")
    assert len(calls) == 4 and not list(tmp_path.iterdir())     # neither out nor a temporary sibling
    # a failure replacing an earlier output leaves the earlier one as it was
    monkeypatch.setattr(rc, "rank_k_part", real)
    rc.reconstruct(base, rl, tmp_path / "out", rank=1)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    calls.clear()
    monkeypatch.setattr(rc, "rank_k_part", fail)
    with pytest.raises(RuntimeError):
        rc.reconstruct(base, rl, tmp_path / "out", rank=2, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
def test_lora_adapter_rank_k_from_the_factors(tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base, _ = _pair("float32")
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(base)
    cfg = LoraConfig(init_lora_weights=False, target_modules=["q_proj", "v_proj", "down_proj"], r=4, lora_alpha=8,
                     modules_to_save=["lm_head"])
    pm = get_peft_model(model, cfg)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "modules_to_save" in n:
                p.add_(0.01 * torch.randn_like(p))
    pm.save_pretrained(tmp_path / "adapter")
    pm.merge_and_unload().save_pretrained(tmp_path / "merged")
    doc = rc.reconstruct(base, tmp_path / "adapter", tmp_path / "r2", rank=2)
    assert doc["rl_is_adapter"] and doc["counts"]["matrices"] == 7 and doc["counts"]["unchanged"] > 0
    assert sum(bool(r.get("from_factors")) for r in doc["matrices"]) == 6
    got, ref = _load(tmp_path / "r2"), _reference(base, tmp_path / "merged", 2)
    for n, want in ref.items():   # the merged reference is peft's float32 merge: its rounding, not ours
        assert torch.allclose(got[n], want, rtol=0, atol=2e-6), n
    rc.reconstruct(base, tmp_path / "adapter", tmp_path / "full", rank="full")
    merged = tc.load_state(tmp_path / "merged")
    full = tc.load_state(tmp_path / "full")
    for n, want in merged.items():
        assert torch.allclose(full[n], want, rtol=0, atol=2e-6), n


def test_line_weights_and_sizes():
    assert rc.line_weights([0, 1, 2], 1) == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    with pytest.raises(ValueError, match="extrapolate must be"):
        rc.line_weights([0, 1], float("nan"))
    assert rc.parse_size("500MB") == 500 * 10**6 and rc.parse_size("2GiB") == 2 * 2**30
    with pytest.raises(ValueError, match="rank must be an integer >= 1"):
        rc.reconstruct("a", "b", "c", rank=-1)
    with pytest.raises(ValueError, match="others must be"):
        rc.reconstruct("a", "b", "c", rank=1, others="sft")
    assert os.sep not in rc.RECORD_FILE


def test_extrapolation_refuses_lora_adapters(tmp_path, capsys):
    """A series of adapter checkpoints (TRL + peft) is refused by name, before anything is written."""
    base, rl = _pair("float32")
    ad = tmp_path / "run" / "checkpoint-20"
    ad.mkdir(parents=True)
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4}))
    (ad / "adapter_model.safetensors").write_bytes(b"")
    out = tmp_path / "out"
    assert main(["reconstruct", "--series", str(rl), str(ad), "--steps", "10", "20", "--extrapolate", "30",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a LoRA adapter directory" in err and "--series" in err and "merge" in err
    assert not out.exists()
