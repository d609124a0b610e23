"""analysis.checkpoints: finding, streaming and refusing Hugging Face checkpoints (real tiny ones)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import checkpoints as C
from tests.analysis import tiny_checkpoints as tc


@pytest.fixture(scope="module")
def llama_bf16_sharded():
    return tc.cached("llama_bf16_sharded", lambda p: tc.build(p, "llama", dtype="bfloat16", sharded=True))


@pytest.fixture(scope="module")
def gpt2_sharded():
    return tc.cached("gpt2_fp32_sharded", lambda p: tc.build(p, "gpt2", dtype="float32", sharded=True))


def test_layer_index_and_kinds():
    assert C.layer_index("model.layers.7.mlp.up_proj.weight") == 7
    assert C.layer_index("transformer.h.11.attn.c_attn.weight") == 11
    assert C.layer_index("gpt_neox.layers.2.attention.dense.weight") == 2
    assert C.layer_index("model.language_model.layers.30.self_attn.q_proj.weight") == 30
    assert C.layer_index("model.norm.weight") is None
    assert C.layer_index("lm_head.weight") is None
    assert C.tensor_kind("lm_head.weight", "lm_head.weight") == "head"
    assert C.tensor_kind("model.embed_tokens.weight", "lm_head.weight") == "embedding"
    assert C.tensor_kind("transformer.wpe.weight", "transformer.wte.weight") == "embedding"
    assert C.tensor_kind("model.layers.0.input_layernorm.weight", "lm_head.weight", 1) == "block"
    assert C.tensor_kind("model.norm.weight", "lm_head.weight", 1) == "other"


def test_find_output_head_across_architectures():
    assert C.find_output_head(["model.embed_tokens.weight", "lm_head.weight"], {}) == ("lm_head.weight", False)
    assert C.find_output_head(["model.embed_tokens.weight"], {"tie_word_embeddings": True}) == \
        ("model.embed_tokens.weight", True)
    assert C.find_output_head(["transformer.wte.weight", "transformer.wpe.weight"], {"model_type": "gpt2"}) == \
        ("transformer.wte.weight", True)  # transformers' default: tied
    assert C.find_output_head(["gpt_neox.embed_in.weight", "embed_out.weight"], {}) == ("embed_out.weight", False)
    assert C.find_output_head(["model.embed_tokens.weight"], {"tie_word_embeddings": False}) == (None, False)
    assert C.find_output_head(["model.language_model.embed_tokens.weight"],
                              {"text_config": {"tie_word_embeddings": True}}) == \
        ("model.language_model.embed_tokens.weight", True)


@pytest.mark.parametrize("which", ["qwen2", "llama", "gpt2"])
def test_open_lists_every_tensor_and_the_head(which, llama_bf16_sharded, gpt2_sharded):
    path = {"qwen2": tc.qwen2_base(), "llama": llama_bf16_sharded, "gpt2": gpt2_sharded}[which]
    ck = C.open_checkpoint(path)
    ref = tc.load_state(path)  # safetensors' own loader, every file
    assert set(ck.tensors) == set(ref)
    for k, t in ref.items():
        assert ck.tensors[k].shape == tuple(t.shape)
    assert ck.num_layers == 3
    if which == "gpt2":
        assert (ck.head, ck.tied) == ("transformer.wte.weight", True)
        assert "lm_head.weight" not in ref  # tied: save_pretrained stores the embedding only
    else:
        assert (ck.head, ck.tied) == ("lm_head.weight", False)
    if which != "qwen2":
        assert len(ck.files) > 1  # really sharded
        assert (Path(path) / "model.safetensors.index.json").is_file()
    assert ck.vocab_size == tc.VOCAB


def test_read_float_is_exact_for_bf16_and_reads_row_slices(llama_bf16_sharded):
    ck = C.open_checkpoint(llama_bf16_sharded)
    ref = tc.load_state(llama_bf16_sharded)
    for name in ("lm_head.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"):
        want = ref[name].to(torch.float64).numpy()
        got = ck.read_float(name)
        assert got.dtype == np.float32 and isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got.astype(np.float64), want)  # bf16 -> f32 is exact
        tt = ck.read_float(name, use_torch=True)
        assert tt.dtype == torch.float32
        np.testing.assert_array_equal(tt.numpy().astype(np.float64), want)
    part = ck.read_float("lm_head.weight", 5, 17)
    np.testing.assert_array_equal(part, ref["lm_head.weight"][5:17].float().numpy())


# ------------------------------------------------------------------ refusals
def test_refuses_paths_that_are_not_checkpoints(tmp_path):
    with pytest.raises(ValueError, match=r"^base: .*does not exist"):
        C.open_checkpoint(tmp_path / "nope", "base")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match=r"^base: .*is not a directory"):
        C.open_checkpoint(f, "base")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: .*not a Hugging Face checkpoint directory: no config.json"):
        C.open_checkpoint(tmp_path / "empty", "checkpoints[0]")
    d = tmp_path / "cfg_only"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match=r"no model.safetensors.*pytorch_model.bin.*only safetensors"):
        C.open_checkpoint(d)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json.*not valid JSON"):
        C.open_checkpoint(d)


def test_refuses_truncated_and_corrupt_files(tmp_path, llama_bf16_sharded):
    d = tc.copy(llama_bf16_sharded, tmp_path / "trunc")
    shard = sorted(d.glob("model-*.safetensors"))[1]
    data = shard.read_bytes()
    shard.write_bytes(data[:-100])
    with pytest.raises(ValueError, match=rf"file '.*{shard.name}' is truncated or corrupt"):
        C.open_checkpoint(d)
    shard.write_bytes(data[:6])
    with pytest.raises(ValueError, match=rf"{shard.name}' is truncated or corrupt"):
        C.open_checkpoint(d)
    bad = bytearray(data)
    bad[10:14] = b"\xff\xfe\x00\x01"  # inside the JSON header
    shard.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match=rf"{shard.name}' is truncated or corrupt"):
        C.open_checkpoint(d)
    shard.unlink()
    with pytest.raises(ValueError, match=rf"shard '.*{shard.name}' listed in model.safetensors.index.json is missing"):
        C.open_checkpoint(d)


def test_refuses_index_naming_a_tensor_its_shard_lacks(tmp_path, llama_bf16_sharded):
    d = tc.copy(llama_bf16_sharded, tmp_path / "idx")
    idx = d / "model.safetensors.index.json"
    doc = json.loads(idx.read_text())
    first = sorted(doc["weight_map"].values())[0]
    doc["weight_map"]["model.layers.9.ghost.weight"] = first
    idx.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"tensor 'model.layers.9.ghost.weight' is listed in .* does not contain it"):
        C.open_checkpoint(d)


@pytest.mark.parametrize("bad,what", [(float("nan"), "2 NaN and 0 Inf"), (float("inf"), "0 NaN and 2 Inf")])
def test_refuses_nan_and_inf_naming_the_tensor(tmp_path, bad, what):
    d = tc.copy(tc.qwen2_base(), tmp_path / "nan")

    def poison(t):
        t = t.clone()
        t.view(-1)[[3, 7]] = bad
        return t
    tc.rewrite_tensor(d, "model.layers.1.mlp.up_proj.weight", poison)
    ck = C.open_checkpoint(d, "checkpoints[2]")
    for use_torch in (False, True):
        with pytest.raises(ValueError, match=rf"^checkpoints\[2\]: tensor 'model.layers.1.mlp.up_proj.weight' in file "
                                             rf"'.*model.safetensors' holds non-finite values: {what}"):
            ck.read_float("model.layers.1.mlp.up_proj.weight", use_torch=use_torch)


def test_pairing_refuses_missing_extra_and_mismatched_tensors(tmp_path):
    base = C.open_checkpoint(tc.qwen2_base(), "base")
    d = tc.copy(tc.qwen2_base(), tmp_path / "missing")
    tc.rewrite_tensor(d, "model.layers.2.self_attn.o_proj.weight", lambda t: None)
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: tensor 'model.layers.2.self_attn.o_proj.weight' "
                                         r"\(in base file '.*model.safetensors'\) is missing from checkpoint"):
        C.pair_tensors(base, C.open_checkpoint(d, "checkpoints[0]"))
    # the other way round: a tensor the base lacks
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: tensor 'model.layers.2.self_attn.o_proj.weight' in "
                                         r"file .* is not in base"):
        C.pair_tensors(C.open_checkpoint(d, "base"), C.open_checkpoint(tc.qwen2_base(), "checkpoints[0]"))
    d2 = tc.copy(tc.qwen2_base(), tmp_path / "shape")
    tc.rewrite_tensor(d2, "model.layers.0.mlp.gate_proj.weight", lambda t: t[:100].clone())
    with pytest.raises(ValueError, match=r"^checkpoints\[1\]: tensor 'model.layers.0.mlp.gate_proj.weight' has shape "
                                         r"\(100, 64\) in file .* but \(128, 64\) in base file"):
        C.pair_tensors(base, C.open_checkpoint(d2, "checkpoints[1]"))


def test_pairing_refuses_a_different_architecture(tmp_path):
    # same tensor names and shapes (Llama and Qwen2 without biases), different model_type
    lam = tc.cached("llama_fp32", lambda p: tc.build(p, "llama", dtype="float32"))
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: model_type 'llama' in .*config.json.* differs from "
                                         r"'qwen2' in base"):
        C.pair_tensors(C.open_checkpoint(tc.qwen2_base(), "base"), C.open_checkpoint(lam, "checkpoints[0]"))
    gpt = tc.cached("gpt2_fp32_sharded", lambda p: tc.build(p, "gpt2", dtype="float32", sharded=True))
    with pytest.raises(ValueError, match=r"differs from|is missing from"):
        C.pair_tensors(C.open_checkpoint(lam, "base"), C.open_checkpoint(gpt, "checkpoints[0]"))


def test_pairing_accepts_a_resized_vocabulary_and_skips_buffers(tmp_path):
    d = tc.copy(tc.qwen2_base(), tmp_path / "resized")
    extra = torch.zeros(8, tc.HIDDEN)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        tc.rewrite_tensor(d, name, lambda t: torch.cat([t, extra]))
    cfg = json.loads((d / "config.json").read_text())
    cfg["vocab_size"] = tc.VOCAB + 8
    (d / "config.json").write_text(json.dumps(cfg))
    tc.rewrite_tensor(d, "model.norm.weight", lambda t: t)  # no-op rewrite keeps the file valid
    pairs, skipped = C.pair_tensors(C.open_checkpoint(tc.qwen2_base(), "base"), C.open_checkpoint(d, "rl"))
    by = {p.name: p for p in pairs}
    assert by["lm_head.weight"].vocab_resized and by["lm_head.weight"].rows == tc.VOCAB
    assert (by["lm_head.weight"].base_rows, by["lm_head.weight"].other_rows) == (tc.VOCAB, tc.VOCAB + 8)
    assert by["model.embed_tokens.weight"].rows == tc.VOCAB
    assert not by["model.norm.weight"].vocab_resized
    assert skipped == []
    # an integer buffer is listed as skipped, not compared
    d2 = tc.copy(tc.qwen2_base(), tmp_path / "buf")
    from safetensors.torch import load_file, save_file
    st = load_file(str(d2 / "model.safetensors"))
    st["model.layers.0.self_attn.bias_mask"] = torch.ones(4, dtype=torch.int64)
    save_file(st, str(d2 / "model.safetensors"), metadata={"format": "pt"})
    pairs, skipped = C.pair_tensors(C.open_checkpoint(d2, "base"), C.open_checkpoint(d2, "rl"))
    assert skipped == ["model.layers.0.self_attn.bias_mask"]
    assert all(p.name != "model.layers.0.self_attn.bias_mask" for p in pairs)
