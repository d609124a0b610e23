"""verl FSDP shards (``ACTOR/model_world_size_W_rank_R.pt``) read directly, without merging.

The shard files are written the way verl's ``FSDPCheckpointManager`` writes them
(``torch.save`` of each rank's sharded state dict, ``fsdp_config.json``, the config in
``huggingface/``) with plain torch: every rank's DTensors are built in this one process under
torch's fake process group, each local shard cut where DTensor itself puts it
(``compute_local_shape_and_global_offset``), so that no worker process is spawned.  The reader's
tensors must equal the originals bit for bit; layouts it cannot read are refused with verl's merge
command, and nothing is loaded with ``weights_only=False``.  verl's own checkpoint code writes the
shards in ``tests/integrations/test_verl_fsdp_checkpoint.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import checkpoints as ckp
from analysis import diff as wd
from analysis.diff import cli as diff_cli

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch without distributed support: no DTensor", allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard  # noqa: E402
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

VERL_CMD = "python -m verl.model_merger merge --backend fsdp --local_dir {a} --target_dir {a}/huggingface"
VOCAB, HIDDEN, FF, LAYERS = 67, 16, 40, 2      # 67 rows: uneven shards (34 + 33, 23 + 22 + 22, ...)
CONFIG = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": VOCAB,
          "hidden_size": HIDDEN, "intermediate_size": FF, "num_hidden_layers": LAYERS,
          "tie_word_embeddings": False}


def tiny_state(seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """The tensors of a tiny Qwen2-shaped model (names and shapes as transformers saves them)."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN), p + "self_attn.q_proj.bias": (HIDDEN,),
                       p + "self_attn.k_proj.weight": (HIDDEN // 2, HIDDEN), p + "mlp.up_proj.weight": (FF, HIDDEN),
                       p + "mlp.down_proj.weight": (HIDDEN, FF), p + "input_layernorm.weight": (HIDDEN,)})
    shapes.update({"model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)})
    return {k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()}


@contextlib.contextmanager
def as_rank(rank: int, world: int):
    """This process as ``rank`` of ``world`` under torch's fake process group (no peers, no I/O)."""
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def write_fsdp(actor: Path, state: dict[str, torch.Tensor], *, mesh: tuple[int, ...] = (2,),
               dims: tuple[str, ...] = ("fsdp",), placements: dict | None = None, plain: tuple[str, ...] = (),
               local=None, config: dict | None = None) -> Path:
    """What verl's FSDPCheckpointManager writes for ``state``: one ``torch.save`` of each rank's
    state dict, whose entries are DTensors (default placements: ``Replicate`` on every mesh dim but
    the last, ``Shard(0)`` on the last, as FSDP1's sharded state dict on an HSDP mesh) or, for
    ``plain``, the full tensor; ``local(key, rank, piece)`` may replace a local shard by a view of
    the same values."""
    world = math.prod(mesh)
    actor.mkdir(parents=True, exist_ok=True)
    default = tuple(Replicate() for _ in mesh[:-1]) + (Shard(0),)
    for r in range(world):
        with as_rank(r, world):
            dm = init_device_mesh("cpu", mesh, mesh_dim_names=dims)
            sd = {}
            for k, x in state.items():
                if k in plain:
                    sd[k] = x.clone()
                    continue
                pl = (placements or {}).get(k, default)
                shape, off = compute_local_shape_and_global_offset(x.shape, dm, pl)
                piece = x[tuple(slice(o, o + n) for o, n in zip(off, shape))].clone()
                if local is not None:
                    piece = local(k, r, piece)
                sd[k] = DTensor.from_local(piece, dm, pl, run_check=False, shape=x.shape, stride=x.stride())
            torch.save(sd, actor / f"model_world_size_{world}_rank_{r}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    (actor / "huggingface").mkdir(exist_ok=True)
    (actor / "huggingface" / "config.json").write_text(json.dumps(config or CONFIG))
    return actor


def write_hf(path: Path, state: dict[str, torch.Tensor], config: dict | None = None) -> Path:
    """The same tensors as a Hugging Face directory (what verl's merger would write, dtype kept)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config or CONFIG))
    return path


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def assert_reads(ck: ckp.Checkpoint, state: dict[str, torch.Tensor]) -> None:
    assert set(ck.tensors) == set(state)
    for k, x in state.items():
        assert ck.info(k).shape == tuple(x.shape) and ck.info(k).dtype == ckp._st_dtype(x.dtype), k
        assert bits_equal(ck.read(k), x), k
        if x.ndim:
            for lo, hi in ((0, 1), (5, 40), (33, 35), (x.shape[0] - 3, x.shape[0] + 9)):
                assert bits_equal(ck.read(k, lo, hi), x[lo:hi]), (k, lo, hi)


@pytest.fixture()
def no_unsafe_load(monkeypatch):
    """Every torch.load of the reader is a weights-only load."""
    calls = []
    real = torch.load

    def load(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        assert kwargs.get("weights_only") is True, "torch.load without weights_only=True"
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    return calls


# ------------------------------------------------------------------ reading
def test_fsdp_shards_read_bit_for_bit_and_by_row_blocks(tmp_path, no_unsafe_load):
    state = tiny_state()
    state["model.norm.weight"] = state["model.norm.weight"].float()            # mixed dtypes, as stored
    state["model.layers.0.mlp.down_proj.weight"] = state["model.layers.0.mlp.down_proj.weight"].double()
    state["rotary.inv_freq"] = torch.arange(8, dtype=torch.float32)          # a plain, replicated entry
    placements = {"model.layers.1.mlp.down_proj.weight": (Shard(1),),        # other placements
                  "model.layers.1.input_layernorm.weight": (Replicate(),)}

    def transposed(key, rank, piece):                                        # a non-contiguous local shard
        return piece.t().contiguous().t() if key == "model.layers.0.mlp.up_proj.weight" else piece

    actor = write_fsdp(tmp_path / "global_step_7" / "actor", state, placements=placements,
                       plain=("rotary.inv_freq",), local=transposed)
    ck = ckp.open_checkpoint(tmp_path / "global_step_7", "rl")
    assert ck.path == actor / "huggingface" and ck.files == [actor / "model_world_size_2_rank_0.pt",
                                                            actor / "model_world_size_2_rank_1.pt"]
    assert ck.head == "lm_head.weight" and not ck.tied and ck.num_layers == LAYERS
    assert ck.dtypes == {"bfloat16": len(state) - 3, "float32": 2, "float64": 1}
    assert_reads(ck, state)
    x = ck.read_float("lm_head.weight", 30, 40)                               # through the diff's reader
    np.testing.assert_array_equal(x, state["lm_head.weight"][30:40].float().numpy())
    assert no_unsafe_load and all(no_unsafe_load)
    for given in (actor, actor / "huggingface"):                             # every way to name it
        assert ckp.resolve_checkpoint_dir(given) == actor / "huggingface"


@pytest.mark.parametrize("mesh, placements", [
    ((2, 2), (Replicate(), Shard(0))),      # HSDP (verl's "ddp", "fsdp" mesh): the first replica is read
    ((2, 2), (Shard(0), Shard(0))),         # nested sharding of one dim
    ((2, 3), (Shard(1), Shard(0))),         # two dims sharded, six ranks
    ((3,), (Shard(0),)),                    # uneven: 67 rows = 23 + 22 + 22; 16 rows = 6 + 5 + 5
])
def test_meshes_and_placements_are_put_back_where_dtensor_cut_them(tmp_path, mesh, placements):
    state = {k: v for k, v in tiny_state(1, torch.float32).items() if v.ndim == 2}
    names = ("ddp", "fsdp") if len(mesh) == 2 else ("fsdp",)
    write_fsdp(tmp_path / "actor", state, mesh=mesh, dims=names, placements={k: placements for k in state})
    assert_reads(ckp.open_checkpoint(tmp_path / "actor", "rl"), state)


def test_more_ranks_than_rows_gives_empty_shards(tmp_path):
    state = {"model.embed_tokens.weight": torch.randn(3, 4), "model.norm.weight": torch.randn(2)}
    write_fsdp(tmp_path / "actor", state, mesh=(4,))                          # ranks 2 and 3 hold 1 and 0 rows
    assert_reads(ckp.open_checkpoint(tmp_path / "actor", "rl"), state)


def test_tied_head_saved_beside_the_embedding_is_dropped_as_verls_merger_does(tmp_path):
    state = tiny_state(2)
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    cfg = dict(CONFIG, tie_word_embeddings=True)
    write_fsdp(tmp_path / "actor", state, config=cfg)
    ck = ckp.open_checkpoint(tmp_path / "actor", "rl")
    assert "lm_head.weight" not in ck.tensors and ck.head == "model.embed_tokens.weight" and ck.tied
    base = write_hf(tmp_path / "base", {k: v for k, v in tiny_state(3).items() if k != "lm_head.weight"}, cfg)
    pairs, _ = ckp.pair_tensors(ckp.open_checkpoint(base, "base"), ck)
    assert {p.name for p in pairs} == set(ck.tensors)


# ------------------------------------------------------------ rlvr-diff on shards
def test_rlvr_diff_on_fsdp_shards_equals_the_diff_of_the_merged_checkpoint(tmp_path):
    base_state, rl_state = tiny_state(4), tiny_state(5)
    base = write_hf(tmp_path / "base", base_state)
    merged = write_hf(tmp_path / "merged", rl_state)
    run = tmp_path / "run"
    write_fsdp(run / "global_step_10" / "actor", rl_state)
    write_fsdp(run / "global_step_20" / "actor", tiny_state(6), mesh=(3,))
    a = wd.diff(str(base), [str(merged)], device="cpu", progress=False)
    b = wd.diff(str(base), [str(run / "global_step_10")], device="cpu", progress=False)
    ca, cb = a["checkpoints"][0], b["checkpoints"][0]
    assert cb["path"] == str(run / "global_step_10" / "actor" / "huggingface") and cb["step"] == 10
    for k in ("path", "step"):
        ca.pop(k), cb.pop(k)
    assert json.dumps(ca, sort_keys=True, default=str) == json.dumps(cb, sort_keys=True, default=str)
    # --series over FSDP steps, and the command line
    assert [Path(p).relative_to(run).as_posix() for p in wd.series(run)] == [
        "global_step_10/actor/huggingface", "global_step_20/actor/huggingface"]
    rc = diff_cli.main([str(base), str(run / "global_step_10" / "actor"), "--out", str(tmp_path / "rep"),
                        "--layers", "head", "--quiet"])
    assert rc == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["checkpoints"][0]["output_head"] == a["checkpoints"][0]["output_head"]


# ------------------------------------------------------------------ refusals
class Foreign:
    """A class no weights-only load allows."""


def _refusal(given: Path, actor: Path, *parts: str) -> None:
    with pytest.raises(ValueError) as ei:
        ckp.open_checkpoint(given, "checkpoints[0]")
    msg = str(ei.value)
    assert msg.startswith(f"checkpoints[0]: {str(given)!r} is a verl FSDP checkpoint (model_world_size_"), msg
    assert "cannot be read directly: " in msg and msg.endswith(VERL_CMD.format(a=actor)), msg
    for p in parts:
        assert p in msg, (p, msg)


def test_layouts_that_cannot_be_read_are_refused_with_the_merge_command(tmp_path, no_unsafe_load):
    state = {k: v for k, v in tiny_state(7).items() if "layers.1" not in k}
    good = write_fsdp(tmp_path / "good", state)
    ckp.open_checkpoint(good, "rl")

    def variant(name: str) -> Path:
        return Path(shutil.copytree(good, tmp_path / name))

    a = variant("missing")
    (a / "model_world_size_2_rank_1.pt").unlink()
    _refusal(a, a, "shard model_world_size_2_rank_1.pt is missing (world size 2: ranks 0 to 1)")

    a = variant("sizes")
    shutil.copy(a / "model_world_size_2_rank_0.pt", a / "model_world_size_4_rank_0.pt")
    _refusal(a, a, "shards of several world sizes (2, 4)")

    a = variant("config_ws")
    (a / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 8}))
    _refusal(a, a, "fsdp_config.json says world_size 8 but the shards are of world size 2")

    a = variant("no_config")
    (a / "huggingface" / "config.json").unlink()
    _refusal(a / "huggingface", a, "no huggingface/config.json beside the shards")

    a = variant("truncated")
    f = a / "model_world_size_2_rank_1.pt"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    _refusal(a.parent / "truncated", a, "file model_world_size_2_rank_1.pt is not a torch archive")

    a = variant("foreign")                                                   # a class outside the allow-list
    sd = torch.load(a / "model_world_size_2_rank_1.pt", map_location="cpu", weights_only=True)
    sd["extra"] = Foreign()
    torch.save(sd, a / "model_world_size_2_rank_1.pt")
    _refusal(a, a, f"file model_world_size_2_rank_1.pt needs class {__name__}.Foreign, which a weights-only "
                   f"load does not allow")

    a = variant("namespace")
    torch.save({"model": argparse.Namespace(step=1)}, a / "model_world_size_2_rank_0.pt")
    _refusal(a, a, "needs class argparse.Namespace")

    a = variant("keys")
    sd = torch.load(a / "model_world_size_2_rank_1.pt", map_location="cpu", weights_only=True)
    del sd["model.norm.weight"]
    torch.save(sd, a / "model_world_size_2_rank_1.pt")
    _refusal(a, a, "tensor 'model.norm.weight' is in rank 0's shard but not in rank 1's")

    a = variant("lora")
    write_fsdp(a, dict(state, **{"model.layers.0.self_attn.q_proj.lora_A.default.weight": torch.randn(4, HIDDEN)}))
    _refusal(a, a, "LoRA adapter weights (e.g. 'model.layers.0.self_attn.q_proj.lora_A.default.weight')")
    assert all(no_unsafe_load)


def test_unknown_placements_and_unreplicated_plain_tensors_are_refused(tmp_path):
    state = {"model.embed_tokens.weight": torch.randn(6, 4), "model.norm.weight": torch.randn(4)}
    a = write_fsdp(tmp_path / "partial", state, placements={"model.norm.weight": (Partial(),)})
    _refusal(a, a, "tensor 'model.norm.weight' has placement Partial(sum) (only Shard(dim) and Replicate are read)")

    def per_rank(key, rank, piece):                                          # rank-dependent plain tensor
        return piece
    a = write_fsdp(tmp_path / "plain", state, plain=("model.norm.weight",), local=per_rank)
    sd = torch.load(a / "model_world_size_2_rank_1.pt", map_location="cpu", weights_only=True)
    sd["model.norm.weight"] = sd["model.norm.weight"] + 1
    torch.save(sd, a / "model_world_size_2_rank_1.pt")
    _refusal(a, a, "plain (non-DTensor) tensor 'model.norm.weight' differs between rank 0 and rank 1")
    sd["model.norm.weight"] = torch.randn(2)                                  # plain, cut in two: no placements
    torch.save(sd, a / "model_world_size_2_rank_1.pt")
    _refusal(a, a, "plain (non-DTensor) tensor 'model.norm.weight' has shape (2,)")


def test_cli_refuses_an_unreadable_shard_set_and_writes_no_report(tmp_path, capsys):
    state = {k: v for k, v in tiny_state(8).items() if "layers.1" not in k}
    base = write_hf(tmp_path / "base", state)
    actor = write_fsdp(tmp_path / "global_step_3" / "actor", state)
    (actor / "model_world_size_2_rank_0.pt").unlink()
    rc = diff_cli.main([str(base), str(tmp_path / "global_step_3"), "--out", str(tmp_path / "rep"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rlvr-diff: error: RL 1: ")
    assert "model_world_size_2_rank_0.pt is missing" in err and VERL_CMD.format(a=actor) in err
    assert not (tmp_path / "rep").exists()
