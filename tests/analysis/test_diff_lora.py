"""LoRA adapters in the checkpoint diff: an adapter directory measured from its factors gives the
metrics of a dense diff of the base against peft's ``merge_and_unload()`` of the same adapter
(tiny Qwen2 and GPT-2 (Conv1D, ``fan_in_fan_out``); rsLoRA, ``rank_pattern`` / ``alpha_pattern``,
``modules_to_save``, an embedding LoRA, ``lora_bias``), bad adapters refused by name before any
report, and the CLI on an adapter directory."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import diff as weight_diff
from analysis.diff import lora, stream
from analysis.diff.cli import main
from tests.analysis import tiny_checkpoints as tc

# peft builds the adapters (imported where it is used: 3-4 s that collection need not pay)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")

LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CONFIGS = {
    # name: (arch, LoraConfig keyword arguments)
    "qwen2_patterns": ("qwen2", dict(target_modules=LINEAR + ["embed_tokens"], r=4, lora_alpha=8,
                                     rank_pattern={"down_proj": 2, "layers.1.self_attn.q_proj": 6},
                                     alpha_pattern={"layers.0.self_attn.q_proj": 3, "up_proj": 16},
                                     modules_to_save=["lm_head"])),
    "qwen2_rslora": ("qwen2", dict(target_modules=["q_proj", "v_proj", "lm_head"], r=8, lora_alpha=4,
                                   use_rslora=True)),
    "qwen2_bias": ("qwen2", dict(target_modules=["q_proj", "k_proj"], r=3, lora_alpha=6, lora_bias=True)),
    "gpt2": ("gpt2", dict(target_modules=["c_attn", "c_proj", "c_fc", "wte"], r=4, lora_alpha=8,
                          fan_in_fan_out=True)),
    "qwen2_dora": ("qwen2", dict(target_modules=["q_proj", "v_proj", "down_proj"], r=4, lora_alpha=8, use_dora=True)),
    "gpt2_dora": ("gpt2", dict(target_modules=["c_attn", "c_fc"], r=2, lora_alpha=4, fan_in_fan_out=True,
                               use_dora=True)),
}
#: adapters of the base-identity tests (not in the merged-diff comparison): the head trained whole
EXTRA = {"qwen2_head": ("qwen2", dict(target_modules=["q_proj", "v_proj"], r=4, lora_alpha=8,
                                      modules_to_save=["lm_head"]))}


def _base(arch: str) -> Path:
    return tc.cached(f"lora_base_{arch}", lambda p: tc.build(p, arch, layers=2, seed=3))


def _adapter(name: str) -> tuple[Path, Path, Path]:
    """``(base, adapter_dir, merged_dir)`` for :data:`CONFIGS` ``name`` (built once per process)."""
    def make(p: Path):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        arch, kw = {**CONFIGS, **EXTRA}[name]
        base = _base(arch)
        torch.manual_seed(7)
        model = AutoModelForCausalLM.from_pretrained(base)
        pm = get_peft_model(model, LoraConfig(init_lora_weights=False, **kw))   # random A and B: ΔW ≠ 0
        with torch.no_grad():
            for n, prm in pm.named_parameters():
                if "modules_to_save" in n or "lora_B.bias" in n or "lora_magnitude_vector" in n:
                    prm.add_(0.01 * torch.randn_like(prm))
        pm.save_pretrained(p / "adapter")
        pm.merge_and_unload().save_pretrained(p / "merged")
        return base, p / "adapter", p / "merged"
    return tc.cached(f"lora_{name}", make)


def _close(a, b, rtol=1e-5, atol=1e-9, what=""):
    if a is None or b is None:
        assert a is None and b is None, what
        return
    assert np.allclose(a, b, rtol=rtol, atol=atol), (what, a, b)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_adapter_equals_dense_merged_diff(name):
    base, ad, merged = _adapter(name)
    da = weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False, full_spectrum=True)
    dm = weight_diff.diff(str(base), [str(merged)], device="cpu", progress=False, full_spectrum=True)
    ca, cm = da["checkpoints"][0], dm["checkpoints"][0]
    for k in ("global_l2", "relative_l2", "base_l2", "inner_l2_share_mean", "inner_s1_s2_mean",
              "inner_rank1_fraction_mean"):
        _close(ca[k], cm[k], what=k)
    assert ca["n_entries"] == cm["n_entries"]
    for t in ca["density"]:
        _close(ca["density"][t], cm["density"][t], atol=2e-4, what=f"density {t}")
    recs = {r["name"]: r for r in cm["layers"]}
    n_low = 0
    for ra in ca["layers"]:
        rm = recs[ra["name"]]
        n_low += "low_rank" in ra
        for k in ("l2", "relative_l2", "l2_share", "s1", "rank1_fraction", "stable_rank"):
            _close(ra[k], rm[k], atol=1e-7, what=(ra["name"], k))
        if ra["l2"] == 0:
            assert rm["l2"] == 0 and ra.get("note") == rm.get("note"), ra["name"]
            continue
        if "low_rank" in ra:
            r = ra["low_rank"]["rank"]
            _close(ra["top_singular_values"][:r] if "top_singular_values" in ra else ra["singular_values"][:r],
                   (rm.get("top_singular_values") or rm["singular_values"])[:r], atol=1e-7, what=ra["name"])
            _close(ra["effective_rank"], rm["effective_rank"], rtol=2e-3, what=ra["name"])
            assert ra["srank"] == rm["srank"], ra["name"]
            if r >= 2:
                _close(ra["s1_s2"], rm["s1_s2"], rtol=1e-4, what=ra["name"])
        for t in ra["density"]:
            _close(ra["density"][t], rm["density"][t], atol=3e-3, what=(ra["name"], t))
        for pa, pm_ in zip(ra.get("parts", []), rm.get("parts", [])):   # GPT-2 c_attn: q, k, v
            for k in ("l2", "s1", "rank1_fraction"):
                _close(pa[k], pm_[k], atol=1e-7, what=(ra["name"], pa["part"], k))
        assert len(ra.get("parts", [])) == len(rm.get("parts", []))
    assert n_low >= 4
    n_dora = sum(r.get("adapter_tensor") == "dora" for r in ca["layers"])
    assert n_dora == (ca["adapter"]["n_dora"] if ca["adapter"]["use_dora"] else 0) and (n_dora > 0) == ("dora" in name)
    ha, hm = ca["output_head"], cm["output_head"]
    for k in ("l2", "l2_share", "s1", "rank1_fraction"):
        _close(ha[k], hm[k], atol=1e-7, what=("head", k))
    if ha["s1"] is not None:
        _close(ha["u_majority_sign_fraction"], hm["u_majority_sign_fraction"], atol=2.0 / ha["shape"][0])
        assert ha["u_largest_entries_side"] == hm["u_largest_entries_side"]
    assert ca["adapter"]["peft_type"] == "LORA" and "LoRA adapter" in " ".join(ca["notes"])


def test_adapter_settings_are_applied():
    base, ad, _ = _adapter("qwen2_patterns")
    b = weight_diff.open_checkpoint(base, "base")
    a = lora.open_adapter(ad, b, "checkpoints[0]")
    q0 = a.low_rank["model.layers.0.self_attn.q_proj.weight"]
    q1 = a.low_rank["model.layers.1.self_attn.q_proj.weight"]
    dn = a.low_rank["model.layers.0.mlp.down_proj.weight"]
    up = a.low_rank["model.layers.0.mlp.up_proj.weight"]
    emb = a.low_rank["model.embed_tokens.weight"]
    assert (q0.rank, q0.scale) == (4, 3 / 4) and (q1.rank, q1.scale) == (6, 8 / 6)
    assert (dn.rank, dn.scale) == (2, 8 / 2) and up.scale == 16 / 4
    assert emb.kind == "embedding" and emb.transposed and "lm_head.weight" in a.full
    _, ad2, _ = _adapter("qwen2_rslora")
    a2 = lora.open_adapter(ad2, b, "checkpoints[0]")
    assert a2.low_rank["lm_head.weight"].scale == pytest.approx(4 / np.sqrt(8))
    a4 = lora.open_adapter(_adapter("qwen2_bias")[1], b, "checkpoints[0]")
    assert a4.bias_deltas["model.layers.0.self_attn.q_proj.bias"][1] == 2.0
    g = weight_diff.open_checkpoint(_base("gpt2"), "base")
    _, ad3, _ = _adapter("gpt2")
    a3 = lora.open_adapter(ad3, g, "checkpoints[0]")
    assert a3.low_rank["transformer.h.0.mlp.c_fc.weight"].transposed


def test_low_rank_spectrum_matches_svd():
    rng = np.random.default_rng(1)
    L, R = rng.standard_normal((300, 5)), rng.standard_normal((5, 70))
    spec = lora.low_rank_spectrum(L, R, 0.3, n_vectors=1)
    D = 0.3 * L @ R
    U, s, Vt = np.linalg.svd(D)
    assert np.allclose(spec.s[:5], s[:5], rtol=1e-12) and np.all(spec.s[5:] == 0)
    assert np.isclose(spec.fro_norm, np.linalg.norm(D), rtol=1e-13)
    assert np.allclose(D @ spec.v[:, 0], spec.s[0] * spec.u[:, 0])
    assert np.argmax(np.abs(spec.u[:, 0])) == np.argmax(spec.u[:, 0])      # largest entry positive
    th = [0.0, 0.1, 1.0, 3.0]
    assert lora.low_rank_counts(L, R, 0.3, th) == [int(np.count_nonzero(np.abs(D) > t)) for t in th]
    M, N = rng.standard_normal((300, 2)), rng.standard_normal((2, 70))
    assert np.isclose(lora.low_rank_inner((L, R, 0.3), (M, N, 2.0)), np.sum(D * (2 * M @ N)))
    assert np.isclose(lora.low_rank_inner(D, (M, N, 2.0)), np.sum(D * (2 * M @ N)))


def test_torch_code_path_agrees(monkeypatch):
    """The CUDA code path (torch tensors; run on CPU tensors here) gives the numpy path's numbers."""
    base, ad, _ = _adapter("qwen2_patterns")
    c = weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False)["checkpoints"][0]
    monkeypatch.setattr(stream, "_TORCH_ON_CPU", True)
    t = weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False)["checkpoints"][0]
    assert t["density"] == c["density"] and t["global_l2"] == pytest.approx(c["global_l2"], rel=1e-12)
    for a, b in zip(t["layers"], c["layers"]):
        assert a["name"] == b["name"] and a["density"] == b["density"]
        assert a["l2"] == pytest.approx(b["l2"], rel=1e-12)
        if b["s1"] is None:  # 1-D tensors (biases, norms) have no spectrum on either path
            assert a["s1"] is None and len(a["shape"]) == 1, a["name"]
        else:
            assert a["s1"] == pytest.approx(b["s1"], rel=1e-12)


# ---------------------------------------------------------------- bad input
def _copy_adapter(tmp_path: Path, name: str = "qwen2_patterns") -> tuple[Path, Path]:
    base, ad, _ = _adapter(name)
    return base, Path(shutil.copytree(ad, tmp_path / "adapter"))


def _edit_config(ad: Path, **kw) -> None:
    f = ad / "adapter_config.json"
    cfg = json.loads(f.read_text())
    cfg.update(kw)
    f.write_text(json.dumps(cfg))


@pytest.mark.parametrize("edit, message", [
    ({"peft_type": "LOHA"}, r"peft_type 'LOHA' in .*adapter_config.json.* is not supported"),
    ({"use_dora": True}, r"setting use_dora in .*adapter_config.json.* is set but module 'model.embed_tokens' has "
                         r"no lora_magnitude_vector .* \(DoRA on embeddings is not supported\)"),
    ({"use_qalora": True}, r"setting use_qalora=True in .*adapter_config.json.* is not supported \(QA-LoRA"),
    ({"rank_pattern": {"down_proj": 3}}, r"module 'model.layers.0.mlp.down_proj' has rank 2 in file .* but "
                                         r"setting rank_pattern in .* gives 3"),
    ({"trainable_token_indices": [1, 2]}, r"setting trainable_token_indices"),
])
def test_bad_adapter_config_refused(tmp_path, edit, message):
    base, ad = _copy_adapter(tmp_path)
    _edit_config(ad, **edit)
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: " + message):
        weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False)


def test_adapter_of_another_base_refused(tmp_path):
    _, ad = _copy_adapter(tmp_path)
    other = tc.build(tmp_path / "small", "qwen2", layers=2, hidden=32)
    with pytest.raises(ValueError, match=r"LoRA factors of module 'model.embed_tokens' .* give a ΔW of shape "
                                         r"\(384, 64\) \(transposed\) but base tensor 'model.embed_tokens.weight'"):
        weight_diff.diff(str(other), [str(ad)], device="cpu", progress=False)
    with pytest.raises(ValueError, match=r"target module 'transformer.h.0.attn.c_attn' .* has no weight "
                                         r"'transformer.h.0.attn.c_attn.weight' in base"):
        weight_diff.diff(str(_base("qwen2")), [str(_adapter("gpt2")[1])], device="cpu", progress=False)


def test_adapter_files_and_mixing_refused(tmp_path):
    base, ad = _copy_adapter(tmp_path)
    _, _, merged = _adapter("qwen2_patterns")
    with pytest.raises(ValueError, match=r"checkpoints\[0\]: .* is a full checkpoint but checkpoints\[1\] .* is a "
                                         r"LoRA adapter directory"):
        weight_diff.diff(str(base), [str(merged), str(ad)], device="cpu", progress=False)
    with pytest.raises(ValueError, match=r"^cast: 'bf16' applies to two stored checkpoints"):
        weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False, cast="bf16")
    (ad / "adapter_model.safetensors").rename(ad / "adapter_model.bin")
    with pytest.raises(ValueError, match=r"has no adapter_model.safetensors \(found adapter_model.bin: only "
                                         r"safetensors"):
        weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False)
    (ad / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    (ad / "adapter_model.bin").unlink()
    with pytest.raises(ValueError, match=r"holds no LoRA tensors|truncated or corrupt"):
        weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False)


def test_two_adapters_alignment_and_clustering():
    base, ad, _ = _adapter("qwen2_patterns")
    doc = weight_diff.diff(str(base), [str(ad), str(ad)], device="cpu", progress=False)
    assert np.allclose(doc["clustering"]["cosine_global"], 1.0)
    assert doc["alignment"]["output_head"]["u"][0] == pytest.approx(1.0)


# ---------------------------------------------------------------------- CLI
def test_cli_writes_report_for_adapter(tmp_path, capsys):
    """The README's ``rlvr-diff runs/sft/final RUN/checkpoint-N --out DIR`` on a TRL+PEFT checkpoint
    folder: the adapter files beside trainer state, optimizer and tokenizer files."""
    base, ad, _ = _adapter("gpt2")
    ck = Path(shutil.copytree(ad, tmp_path / "runs" / "grpo-lora" / "checkpoint-500"))
    (ck / "trainer_state.json").write_text("{}")
    (ck / "optimizer.pt").write_bytes(b"\0" * 16)
    tc.build_tokenizer(tc.VOCAB).save_pretrained(ck)
    out = tmp_path / "reports" / "lora"
    assert main([str(base), str(ck), "--out", str(out), "--device", "cpu"]) == 0
    assert {"report.md", "report.html", "report.json"} <= {p.name for p in out.iterdir()}
    doc = json.loads((out / "report.json").read_text())
    c = doc["checkpoints"][0]
    assert c["adapter"]["fan_in_fan_out"] is True and c["step"] == 500
    assert c["output_head"]["name"] == "transformer.wte.weight" and c["output_head"]["top_tokens"]
    assert any(t["token"] and t["token"].startswith("w") for t in c["output_head"]["top_tokens"])
    md = (out / "report.md").read_text()
    assert "## LoRA adapter" in md and "transformer.h.0.attn.c_attn.weight" in md
    assert "LoRA adapter" in capsys.readouterr().out


def test_cli_bad_adapter_writes_nothing(tmp_path, capsys):
    base, ad = _copy_adapter(tmp_path)
    _edit_config(ad, peft_type="IA3")
    out = tmp_path / "rep"
    assert main([str(base), str(ad), "--out", str(out), "--quiet"]) == 2
    assert "peft_type 'IA3'" in capsys.readouterr().err
    assert not out.exists()


# ------------------------------------------------------------ base identity
def _other_base(tmp_path: Path) -> Path:
    """A second tiny Qwen2 of the same shapes as :func:`_base` but other weights."""
    return tc.build(tmp_path / "other-base", "qwen2", layers=2, seed=4)


def _base_copy(tmp_path: Path, *parts: str, name_or_path: str | None = None) -> Path:
    """A copy of the Qwen2 base at ``tmp_path/parts``, its config.json's ``_name_or_path`` set if given."""
    d = Path(shutil.copytree(_base("qwen2"), tmp_path.joinpath(*parts)))
    if name_or_path is not None:
        cfg = json.loads((d / "config.json").read_text())
        cfg["_name_or_path"] = name_or_path
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_adapter_of_same_shaped_other_base_refused(tmp_path):
    """The user's trial: an adapter diffed against a base of the same shapes that is not its
    ``base_model_name_or_path`` was accepted silently, with another head share; now refused,
    naming the argument, both bases and the option."""
    base, ad, _ = _adapter("qwen2_head")
    other = _other_base(tmp_path)
    assert json.loads((ad / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: adapter .* was trained on base_model_name_or_path "
                                         + re.escape(repr(str(base))) + r" .* the base given is "
                                         + re.escape(repr(str(other))) + r".* another existing directory.* "
                                         r"--allow-other-base \(allow_other_base=True\)"):
        weight_diff.diff(str(other), [str(ad)], device="cpu", progress=False, layers="head")


def test_other_base_allowed_and_recorded(tmp_path, capsys):
    base, ad, _ = _adapter("qwen2_head")
    other = _other_base(tmp_path)
    own = weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False, layers="head")["checkpoints"][0]
    assert own["base_identity"] == "same" and own["base_identity_names"]["how"] == "the same directory"
    doc = weight_diff.diff(str(other), [str(ad)], device="cpu", progress=False, layers="head", allow_other_base=True)
    c = doc["checkpoints"][0]
    assert c["base_identity"] == "other (allowed)" and c["adapter"]["base_identity"] == "other (allowed)"
    assert c["base_identity_names"]["adapter_base_model_name_or_path"] == str(base)
    assert c["base_identity_names"]["base"] == str(other) and doc["settings"]["allow_other_base"] is True
    assert any(n.startswith("base identity: other (allowed)") for n in c["notes"])
    assert c["output_head"]["l2_share"] != pytest.approx(own["output_head"]["l2_share"])   # what was silent
    with pytest.raises(ValueError, match=r"^allow_other_base must be True or False"):
        weight_diff.diff(str(other), [str(ad)], device="cpu", progress=False, allow_other_base="yes")
    # the CLI: refused by default (exit 2, both names, the flag; nothing written), accepted with the flag
    out = tmp_path / "rep"
    assert main(["weights", str(other), str(ad), "--out", str(out), "--device", "cpu", "--layers", "head",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "RL 1" in err and str(base) in err and str(other) in err and "--allow-other-base" in err
    assert not out.exists()
    assert main(["weights", str(other), str(ad), "--out", str(out), "--device", "cpu", "--layers", "head",
                 "--allow-other-base"]) == 0
    assert "base identity: other (allowed)" in capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text())
    assert rep["checkpoints"][0]["base_identity"] == "other (allowed)"
    assert rep["run"]["settings"]["allow_other_base"] is True
    md = (out / "report.md").read_text()
    assert "base identity: other (allowed)" in md and str(base) in md and str(other) in md


def test_base_identity_by_path(tmp_path):
    base, ad = _copy_adapter(tmp_path, "qwen2_head")
    b = weight_diff.open_checkpoint(base, "base")
    (tmp_path / "link").symlink_to(base)           # another spelling of the same directory
    _edit_config(ad, base_model_name_or_path=str(tmp_path / "link"))
    assert lora.open_adapter(ad, b, "checkpoints[0]").identity["status"] == "same"
    _edit_config(ad, base_model_name_or_path=str(_base_copy(tmp_path, "copy")))   # a copy of the base
    i = lora.open_adapter(ad, b, "checkpoints[0]").identity
    assert i["status"] == "same" and "copy" in i["how"]
    other = _base_copy(tmp_path, "edited")           # same files, another config.json: another base
    (other / "config.json").write_text(json.dumps(dict(b.config, rms_norm_eps=1e-5)))
    _edit_config(ad, base_model_name_or_path=str(other))
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: adapter .* another existing directory"):
        lora.open_adapter(ad, b, "checkpoints[0]")


def test_base_identity_by_name(tmp_path):
    _, ad = _copy_adapter(tmp_path, "qwen2_head")
    _edit_config(ad, base_model_name_or_path="Qwen/Qwen2.5-7B")

    def status(d: Path) -> dict:
        return lora.open_adapter(ad, weight_diff.open_checkpoint(d, "base"), "checkpoints[0]").identity

    i = status(_base_copy(tmp_path, "sft", name_or_path="Qwen/Qwen2.5-7B"))           # config.json _name_or_path
    assert i["status"] == "same" and "_name_or_path" in i["how"]
    assert status(_base_copy(tmp_path, "hub", "Qwen", "Qwen2.5-7B"))["status"] == "same"    # directory name
    assert status(_base_copy(tmp_path, "qwen2.5-7b"))["status"] == "same"                  # case-insensitive
    d = _base_copy(tmp_path, "instruct", name_or_path="Qwen/Qwen2.5-7B-Instruct")         # another hub id
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: adapter .* 'Qwen/Qwen2.5-7B' .* the base given is "
                                         r".*instruct.* _name_or_path: 'Qwen/Qwen2.5-7B-Instruct'.*--allow-other-base"):
        status(d)
    i = lora.open_adapter(ad, weight_diff.open_checkpoint(d, "base"), "checkpoints[0]", allow_other_base=True).identity
    assert i["status"] == "other (allowed)"


def test_base_identity_unverified_recorded(tmp_path):
    base, ad = _copy_adapter(tmp_path, "qwen2_head")
    b = weight_diff.open_checkpoint(base, "base")
    _edit_config(ad, base_model_name_or_path="Qwen/Qwen2.5-7B")    # base dir 'lora_base_qwen2', no _name_or_path
    i = lora.open_adapter(ad, b, "checkpoints[0]").identity
    assert i["status"] == "unverified" and i["adapter_base"] == "Qwen/Qwen2.5-7B" and i["base"] == str(base)
    _edit_config(ad, base_model_name_or_path="/elsewhere/checkpoints/sft-final")   # a path not on this machine
    assert lora.open_adapter(ad, b, "checkpoints[0]").identity["status"] == "unverified"
    f = ad / "adapter_config.json"
    cfg = json.loads(f.read_text())
    del cfg["base_model_name_or_path"]
    f.write_text(json.dumps(cfg))
    out = tmp_path / "rep"
    assert main(["weights", str(base), str(ad), "--out", str(out), "--device", "cpu", "--layers", "head",
                 "--quiet"]) == 0
    c = json.loads((out / "report.json").read_text())["checkpoints"][0]
    assert c["base_identity"] == "unverified" and c["base_identity_names"]["adapter_base_model_name_or_path"] is None
    assert "names no base_model_name_or_path" in c["base_identity_names"]["how"]
    assert "base identity: unverified" in (out / "report.md").read_text()
