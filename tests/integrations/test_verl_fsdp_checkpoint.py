"""verl's own FSDP checkpoints read by ``analysis.checkpoints`` without merging.

Two CPU processes (gloo) wrap a tiny Qwen2 (built from a transformers config, no hub access) in
FSDP1 (``FullyShardedDataParallel`` with a device mesh, verl's ``strategy=fsdp``) and in FSDP2
(``fully_shard``, ``strategy=fsdp2``, tied embeddings), and verl's ``FSDPCheckpointManager.save_checkpoint``
writes ``global_step_N/actor/model_world_size_2_rank_R.pt``, ``fsdp_config.json`` and
``huggingface/config.json``.  The reader must give the model's tensors bit for bit, and exactly
what verl's model merger (``python -m verl.model_merger merge --backend fsdp``, the command the
refusal names) writes, which is the same tensors rounded to bfloat16.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
pytest.importorskip("verl.utils.checkpoint.fsdp_checkpoint_manager")

from analysis import checkpoints as ckp  # noqa: E402
from analysis import diff as wd  # noqa: E402

WORLD = 2
FLAVOURS = {"fsdp1": False, "fsdp2": True}        # FSDP flavour -> tie_word_embeddings


def _config(tie: bool):
    from transformers import Qwen2Config

    # 67 rows: uneven shards (34 + 33)
    return Qwen2Config(vocab_size=67, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                       tie_word_embeddings=tie, architectures=["Qwen2ForCausalLM"])


def _save(rank: int, port: int, out: str) -> None:
    """One rank: wrap the model in FSDP1 and FSDP2 and save with verl's checkpoint manager."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank))
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from safetensors.torch import save_file
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from transformers import AutoModelForCausalLM
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
        for step, (flavour, tie) in enumerate(FLAVOURS.items(), start=1):
            torch.manual_seed(step)
            model = AutoModelForCausalLM.from_config(_config(tie), dtype=torch.float32)
            with torch.no_grad():                      # an "RL" update: not the initialisation any more
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(step)) * 1e-3)
            if rank == 0:
                save_file({k: v.contiguous() for k, v in model.state_dict().items()
                           if not (tie and k == "lm_head.weight")}, os.path.join(out, f"{flavour}.safetensors"))
            if flavour == "fsdp1":
                wrapped = FullyShardedDataParallel(model, device_mesh=mesh, device_id=torch.device("cpu"),
                                                   use_orig_params=True)
            else:
                for layer in model.model.layers:
                    fully_shard(layer, mesh=mesh)
                wrapped = fully_shard(model, mesh=mesh)
            manager = FSDPCheckpointManager(
                model=wrapped, optimizer=None, lr_scheduler=None, processing_class=None,
                checkpoint_config=OmegaConf.create({"save_contents": ["model"], "load_contents": ["model"]}))
            manager.save_checkpoint(os.path.join(out, flavour, f"global_step_{step}", "actor"), global_step=step)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("verl_fsdp")
    mp.start_processes(_save, args=(_free_port(), str(out)), nprocs=WORLD, start_method="spawn")
    return out


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_shards_written_by_verl_are_read_bit_for_bit(saved, flavour):
    from safetensors.torch import load_file

    step = 1 + list(FLAVOURS).index(flavour)
    actor = saved / flavour / f"global_step_{step}" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": int(flavour[-1]), "world_size": 2}
    orig = load_file(str(saved / f"{flavour}.safetensors"))
    ck = ckp.open_checkpoint(actor.parent, "rl")
    assert ck.path == actor / "huggingface" and ck.tied == FLAVOURS[flavour]
    assert set(ck.tensors) == set(orig)
    for k, v in orig.items():
        assert _bits_equal(ck.read(k), v), k
        assert _bits_equal(ck.read(k, 30, 40), v[30:40]), k


def test_equal_to_what_verls_merger_writes(saved, tmp_path, monkeypatch):
    """verl's merge command (the one the refusal names: ``python -m verl.model_merger merge ...``,
    its ``main`` run in this process with the command's arguments), on a copy of each shard
    directory: its safetensors are our tensors rounded to bfloat16, bit for bit (the merger casts
    with ``.bfloat16()``), and its tied head is dropped as ours is."""
    from safetensors.torch import load_file
    from verl.model_merger import __main__ as merger

    for step, flavour in enumerate(FLAVOURS, start=1):
        actor = saved / flavour / f"global_step_{step}" / "actor"
        copy = Path(shutil.copytree(actor, tmp_path / flavour / "actor"))
        cmd = ckp.verl_merge_command(copy).split()
        assert cmd[:3] == ["python", "-m", "verl.model_merger"]
        monkeypatch.setattr(sys, "argv", ["verl.model_merger"] + cmd[3:])
        merger.main()
        merged = {}
        for f in (copy / "huggingface").glob("*.safetensors"):
            merged.update(load_file(str(f)))
        ours = ckp.open_checkpoint(actor, "rl")
        assert set(merged) == set(ours.tensors), flavour
        for k, v in merged.items():
            assert v.dtype == torch.bfloat16
            assert _bits_equal(ours.read(k).to(torch.bfloat16), v), (flavour, k)
        # after merging, the same folder is a Hugging Face directory and read as one
        again = ckp.open_checkpoint(copy.parent, "rl")
        assert again.path == copy / "huggingface" and again.files[0].suffix == ".safetensors"


def test_rlvr_diff_reads_the_shards_of_a_verl_run(saved):
    """``rlvr-diff BASE global_step_N`` on verl's shards: the FSDP1 step against a Hugging Face
    copy of the same model's weights gives ΔW = 0 exactly, tensor by tensor."""
    from safetensors.torch import load_file, save_file

    base = saved / "base"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text(json.dumps(_config(False).to_dict()))
    save_file(load_file(str(saved / "fsdp1.safetensors")), str(base / "model.safetensors"))
    doc = wd.diff(str(base), [str(saved / "fsdp1" / "global_step_1")], device="cpu", progress=False)
    c = doc["checkpoints"][0]
    assert c["step"] == 1 and c["path"].endswith("global_step_1/actor/huggingface")
    assert c["global_l2"] == 0.0 and c["density"] and max(c["density"].values()) == 0.0
    assert len(c["layers"]) == 27 and all(rec["l2"] == 0.0 for rec in c["layers"])
