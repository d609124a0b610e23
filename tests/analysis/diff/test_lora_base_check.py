"""An adapter read against a base other than its recorded ``base_model_name_or_path``.

Issue 30: an adapter diffed against a base of the same shapes that is not its own was accepted
silently (a moved base folder whose directory name matched the base given counted as the same
base) and gave another head share.  Now (:func:`analysis.diff.lora.base_identity`): a recorded
base that is a readable folder is compared by its fingerprint (:func:`analysis.diff.lora.base_fingerprint`:
config, names and shapes, float64 checksums), another base is refused unless
``--allow-other-base`` (then noted in report.json); a recorded base that cannot be read (moved,
a hub id that matches nothing) is read against the base given with a :class:`BaseIdentityWarning`
and a note.  Tiny Qwen2 checkpoints (``tiny_checkpoints.build``) and adapters written directly
with safetensors (no peft).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from analysis import diff as weight_diff
from analysis.checkpoints import open_checkpoint
from analysis.diff import lora
from analysis.diff.cli import main
from tests.analysis import tiny_checkpoints as tc

PREFIX = "base_model.model."
TARGETS = ("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj")


def _base(path: Path, seed: int = 3, **kw) -> Path:
    return tc.build(path, "qwen2", layers=2, seed=seed, **kw)


def _write_adapter(path: Path, base: Path, named: str | None) -> Path:
    """A rank-2 LoRA on :data:`TARGETS` of ``base`` plus the output head trained whole
    (``modules_to_save``), recording ``named`` as its ``base_model_name_or_path``."""
    from safetensors.torch import save_file

    ck = open_checkpoint(base, "base")
    g = torch.Generator().manual_seed(11)
    t: dict[str, torch.Tensor] = {}
    for m in TARGETS:
        out, inp = ck.tensors[m + ".weight"].shape
        t[f"{PREFIX}{m}.lora_A.weight"] = torch.randn(2, inp, generator=g)
        t[f"{PREFIX}{m}.lora_B.weight"] = torch.randn(out, 2, generator=g)
    t[f"{PREFIX}{ck.head}"] = ck.read(ck.head).float() + 0.01 * torch.randn(ck.tensors[ck.head].shape, generator=g)
    path.mkdir(parents=True)
    save_file(t, str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": [m.rsplit(".", 1)[1] for m in TARGETS],
           "modules_to_save": ["lm_head"], "task_type": "CAUSAL_LM", "base_model_name_or_path": named}
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    return path


def _diff(base: Path, ad: Path, **kw) -> dict:
    return weight_diff.diff(str(base), [str(ad)], device="cpu", progress=False, layers="head", **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("lora_base_check")
    base = _base(d / "run" / "base")
    return {"dir": d, "base": base, "adapter": _write_adapter(d / "run" / "checkpoint-4", base, str(base)),
            "other": _base(d / "other" / "base", seed=4)}


def test_own_base_and_its_copies_accepted(run, tmp_path):
    doc = _diff(run["base"], run["adapter"])
    c = doc["checkpoints"][0]
    assert c["base_identity"] == "same" and c["base_identity_names"]["how"] == "the same directory"
    assert not any(n.startswith("base identity") for n in c["notes"])
    # a copy saved in another layout (sharded) with the same weights: the fingerprint agrees
    copy = _base(tmp_path / "resharded", sharded=True)
    assert len(list(copy.glob("*.safetensors"))) > 1
    i = lora.open_adapter(run["adapter"], open_checkpoint(copy, "base"), "checkpoints[0]").identity
    assert i["status"] == "same" and i["how"].startswith("a copy of the base") and "checksums" in i["how"]
    own = c["output_head"]["l2_share"]
    assert _diff(copy, run["adapter"])["checkpoints"][0]["output_head"]["l2_share"] == pytest.approx(own)


def test_other_base_same_shapes_refused(run):
    other = run["other"]
    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: adapter .* was trained on base_model_name_or_path "
                                         + re.escape(repr(str(run["base"]))) + r" .*the base given is "
                                         + re.escape(repr(str(other))) + r".*another existing directory.*"
                                         r"float64 checksum of tensor .* --allow-other-base"):
        _diff(other, run["adapter"])


def test_other_base_differing_in_one_tensor_refused(run, tmp_path):
    """Only a norm weight of block 1 differs (not a tensor checksummed whole): the checksum of its
    first row tells."""
    edited = tc.copy(run["base"], tmp_path / "edited")
    tc.rewrite_tensor(edited, "model.layers.1.post_attention_layernorm.weight", lambda x: x + 0.5)
    with pytest.raises(ValueError, match=r"first row of tensor 'model.layers.1.post_attention_layernorm.weight'"
                                         r".*--allow-other-base"):
        lora.open_adapter(run["adapter"], open_checkpoint(edited, "base"), "checkpoints[0]")


def test_other_base_allowed_with_flag_and_noted(run, tmp_path, capsys):
    other, out = run["other"], tmp_path / "rep"
    assert main(["weights", str(other), str(run["adapter"]), "--out", str(out), "--device", "cpu",
                 "--layers", "head", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(run["base"]) in err and str(other) in err and "--allow-other-base" in err and not out.exists()
    assert main(["weights", str(other), str(run["adapter"]), "--out", str(out), "--device", "cpu",
                 "--layers", "head", "--quiet", "--allow-other-base"]) == 0
    c = json.loads((out / "report.json").read_text())["checkpoints"][0]
    assert c["base_identity"] == "other (allowed)"
    note = next(n for n in c["notes"] if n.startswith("base identity: other (allowed)"))
    assert str(run["base"]) in note and str(other) in note and "--allow-other-base" in note
    own = _diff(run["base"], run["adapter"])["checkpoints"][0]["output_head"]["l2_share"]
    assert c["output_head"]["l2_share"] != pytest.approx(own)    # what went unnoticed before


def test_unreadable_recorded_base_warns_and_notes(run, tmp_path):
    """The issue's silent case: the recorded base folder was moved, and the base given is another
    folder of the same name: not verified, so warned and noted (no longer "same")."""
    moved = tmp_path / "moved" / "base"
    ad = _write_adapter(tmp_path / "ad", run["base"], str(moved))     # /…/moved/base: not on this machine
    with pytest.warns(lora.BaseIdentityWarning, match=r"could not be verified.*not a directory on this machine"):
        doc = _diff(run["other"], ad)
    c = doc["checkpoints"][0]
    assert c["base_identity"] == "unverified" and c["base_identity_names"]["adapter_base_model_name_or_path"] == str(moved)
    assert any(n.startswith("base identity: unverified") and str(moved) in n for n in c["notes"])
    # a folder that exists but holds no checkpoint; a hub id that matches no name of the base
    (tmp_path / "empty").mkdir()
    for named, why in ((str(tmp_path / "empty"), "is not a readable checkpoint"),
                       ("Org/unknown-model", "name does not match")):
        shutil.rmtree(ad)
        _write_adapter(ad, run["base"], named)
        with pytest.warns(lora.BaseIdentityWarning, match=re.escape(why)):
            i = lora.open_adapter(ad, open_checkpoint(run["base"], "base"), "checkpoints[0]").identity
        assert i["status"] == "unverified"
    # the CLI: the report notes it
    out = tmp_path / "rep"
    with pytest.warns(lora.BaseIdentityWarning):
        assert main(["weights", str(run["base"]), str(ad), "--out", str(out), "--device", "cpu", "--layers", "head",
                     "--quiet"]) == 0
    c = json.loads((out / "report.json").read_text())["checkpoints"][0]
    assert c["base_identity"] == "unverified" and any("Org/unknown-model" in n for n in c["notes"])


def test_fingerprint_is_layout_free(run, tmp_path):
    """The fingerprint of a float32 base equals that of the same weights saved sharded; it changes
    with one value of a checksummed tensor."""
    b = open_checkpoint(run["base"], "base")
    fp = lora.base_fingerprint(b, [t + ".weight" for t in TARGETS])
    assert set(fp["sums"]) == {"model.embed_tokens.weight", b.head, TARGETS[0] + ".weight"}
    sh = open_checkpoint(_base(tmp_path / "sh", sharded=True), "base")
    assert lora.base_fingerprint(sh, [t + ".weight" for t in TARGETS]) == fp
    edited = tc.copy(run["base"], tmp_path / "edited")
    tc.rewrite_tensor(edited, "model.embed_tokens.weight", lambda x: torch.cat([x[:-1], x[-1:] + 1e-3]))
    fp2 = lora.base_fingerprint(open_checkpoint(edited, "base"), [t + ".weight" for t in TARGETS])
    assert fp2["sums"]["model.embed_tokens.weight"] != fp["sums"]["model.embed_tokens.weight"]
    assert fp2["row0"] == fp["row0"]
