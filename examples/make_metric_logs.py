"""Write the example *metric* logs of ``rlvr-audit`` from real CPU runs of the TRL and verl integrations.

Two sub-commands, each run in its framework's environment (the ones ``make test-integrations``
builds under ``~/.cache/rlvr-diagnostics/envs``; ``PYTHONPATH=.`` makes the checkout importable
even where the environment's editable install points elsewhere)::

    E=~/.cache/rlvr-diagnostics/envs
    PYTHONPATH=. $E/trl-*/bin/python  examples/make_metric_logs.py trl    # 20-70 s on 2 CPU cores
    PYTHONPATH=. $E/verl-*/bin/python examples/make_metric_logs.py verl   # 1-4 min on 2 CPU cores

Each rewrites only its own folder (``--out``, default ``examples/audit_logs``).  Seeded: a
second run gives the same numbers on the same machine and library versions, except the
wall-clock fields (TRL's ``step_time``, ``train_runtime``, ``*_per_second``; verl's
``timing_s/*``, ``timing_per_token_ms/*``, ``perf/time_per_step``, ``perf/throughput``,
``actor/perf/cpu_memory_used_gb``).

``trl`` -> ``trl_run/``
    ``examples/trl_grpo.py --steps 40 --save-steps 20`` (AsymGRPO δ = 0.5 in
    ``integrations.trl.GRPOTrainer``, a 2-layer Qwen2 over a character tokenizer, 32 completions
    per step in groups of 8, ``logging_steps=1``, ``log_completions=True``), then copies what a
    TRL output folder holds besides weights: ``trainer_state.json`` (``log_history`` of the 40
    steps, ``trainer.save_state()``), ``checkpoint-{20,40}/trainer_state.json`` and
    ``checkpoint-{20,40}/rlvr_state.json`` (the adapter's state file) and
    ``completions/completions_NNNNN.parquet``.  Model, optimizer, scheduler, RNG, tokenizer and
    ``training_args.bin`` files are left out.

``verl`` -> ``verl_metrics/asym_grpo_delta0.5_cpu.jsonl``
    verl's own PPO loop, ``RayPPOTrainer.fit()`` of verl 0.9.1 (``trainer.use_v1=False``), run
    for 40 steps in this process with ``algorithm.adv_estimator=rlvr_asym_grpo``
    (``RLVR_PARAMS=delta=0.5``), GRPO-style settings (n = 8, KL loss 0.001 ``low_var_kl``, token
    rollout-IS) and ``trainer.logger=[file]``.  The lines are those of verl's ``FileLogger``
    (``{"step": N, "data": {...}}``), which writes
    ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``; ``verl_metrics/`` is the project
    folder (``rlvr_diagnostics/``).  What stood in for the GPU machinery (Ray worker groups,
    the vLLM/SGLang agent loop, FSDP) and which keys were removed is in that folder's
    ``README.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trl_grpo import tiny_model  # the script's folder is on sys.path: the model of examples/trl_grpo.py

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SEED = 0

# ----------------------------------------------------------------------------------- TRL
TRL_DIR = "trl_run"
TRL_STEPS = 40
TRL_SAVE_STEPS = 20


def make_trl(out: Path, steps: int = TRL_STEPS, save_steps: int = TRL_SAVE_STEPS, seed: int = SEED) -> Path:
    """Run examples/trl_grpo.py and copy its logs (no weights) to ``out/trl_run``."""
    dest = out / TRL_DIR
    with tempfile.TemporaryDirectory(prefix="rlvr-trl-run-") as tmp:
        run = Path(tmp) / "run"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        cmd = [sys.executable, str(ROOT / "trl_grpo.py"), "--out", str(run), "--steps", str(steps),
               "--save-steps", str(save_steps), "--seed", str(seed)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=env, cwd=tmp)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        shutil.copy2(run / "trainer_state.json", dest / "trainer_state.json")
        for ckpt in sorted(run.glob("checkpoint-*")):
            (dest / ckpt.name).mkdir()
            for name in ("trainer_state.json", "rlvr_state.json"):
                if (ckpt / name).exists():
                    shutil.copy2(ckpt / name, dest / ckpt.name / name)
        (dest / "completions").mkdir()
        for table in sorted((run / "completions").glob("completions_*.parquet")):
            shutil.copy2(table, dest / "completions" / table.name)
    return dest


# ---------------------------------------------------------------------------------- verl
VERL_DIR = "verl_metrics"
VERL_PROJECT = "rlvr_diagnostics"
VERL_EXPERIMENT = "asym_grpo_delta0.5_cpu"
VERL_STEPS = 40
PROMPT_LEN, RESPONSE_LEN, N_ROLLOUTS, N_PROMPTS = 8, 8, 8, 8
#: keys verl writes that measure nothing on a machine without a GPU: the MFU (verl's FLOPs
#: counter needs a GPU's peak FLOP/s; the stand-in worker reports NaN) and the CUDA memory
#: counters (torch.cuda.max_memory_* read 0 in a CPU build).  Dropped from every line.
VERL_DROPPED = ("perf/mfu/actor_infer", "perf/mfu/actor",
                "actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb")
VERL_OVERRIDES = [
    "algorithm.adv_estimator=rlvr_asym_grpo",
    f"data.train_batch_size={N_PROMPTS}", f"data.max_prompt_length={PROMPT_LEN}",
    f"data.max_response_length={RESPONSE_LEN}", "data.dataloader_num_workers=0", f"data.seed={SEED}",
    "actor_rollout_ref.model.path=tiny-qwen2-built-in-process", "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.optim.lr=3e-3",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.use_torch_compile=False", "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
    "actor_rollout_ref.rollout.name=hf", f"actor_rollout_ref.rollout.n={N_ROLLOUTS}",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
    "algorithm.rollout_correction.rollout_is=token",
    "trainer.logger=[file]", f"trainer.project_name={VERL_PROJECT}", f"trainer.experiment_name={VERL_EXPERIMENT}",
    f"trainer.total_training_steps={VERL_STEPS}", "trainer.total_epochs=100",
    "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.device=cpu",
    "trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
    "trainer.resume_mode=disable", "trainer.use_v1=False",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def starts_with_digit(text: str) -> float:
    """The verifiable reward of examples/trl_grpo.py: 1.0 if the answer begins with a digit."""
    return 1.0 if text[:1].isdigit() else 0.0


def make_verl(out: Path, steps: int = VERL_STEPS, seed: int = SEED) -> Path:
    """verl's RayPPOTrainer.fit() on CPU in this process; its FileLogger lines go to ``out/verl_metrics``."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ["RLVR_PARAMS"] = "delta=0.5"
    os.environ.pop("RLVR_LOG_DIR", None)
    os.environ.pop("VERL_FILE_LOGGER_PATH", None)
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-verl-run-"))
    os.environ["VERL_FILE_LOGGER_ROOT"] = str(tmp)  # FileLogger: ROOT/<project>/<experiment>.jsonl

    import copy
    from functools import partial

    import numpy as np
    import torch
    import torch.distributed as dist
    import verl
    import verl.utils.torch_functional as verl_F
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import Role
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.optimizer import build_optimizer
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    import integrations.verl  # noqa: F401  registers the rlvr_* estimators (also verl's plugin entry point)
    from simulations.grpo.tokenizer import build_tokenizer

    # verl 0.9.1 registers no CPU platform (it falls back to "cuda"): its FSDP engine module is
    # told that the device is the CPU.  Nothing else of verl is changed.
    transformer_impl.get_device_id = lambda: "cpu"
    transformer_impl.get_device_name = lambda: "cpu"
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)

    tokenizer = build_tokenizer()
    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = [o if not o.startswith("trainer.total_training_steps=") else f"trainer.total_training_steps={steps}"
                 for o in VERL_OVERRIDES] + [f"trainer.default_local_dir={tmp / 'checkpoints'}"]
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)

    # the prompts of examples/trl_grpo.py, as verl's RLHFDataset rows (chat messages + reward metadata)
    rng = np.random.default_rng(seed)
    rows = [{"raw_prompt": [{"role": "user", "content": f"{x}+{y}="}], "data_source": "rlvr/starts_with_digit",
             "reward_model": {"style": "rule", "ground_truth": "starts with a digit"}, "extra_info": {"index": i},
             "index": i, "dummy_tensor": torch.tensor([0], dtype=torch.uint8)}
            for i, (x, y) in enumerate(rng.integers(0, 50, size=(64, 2)))]

    class Rows(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return dict(self.rows[i])

    class OneProcess:  # ResourcePoolManager: throughput is per worker; here one CPU process
        def get_n_gpus(self):
            return 1

    trainer = RayPPOTrainer(config=config, tokenizer=tokenizer,
                            role_worker_mapping={Role.ActorRollout: object, Role.RefPolicy: object},
                            resource_pool_manager=OneProcess(), train_dataset=Rows(rows), val_dataset=Rows(rows[:8]),
                            device_name="cpu")
    config = trainer.config  # optim.total_training_steps is set by the trainer

    # --- actor and reference: verl's engine classes (FSDPEngineWithLMHead's forward_step,
    # forward_backward_batch, optimizer_step, lr scheduler; TrainingWorker's infer_batch /
    # train_mini_batch; ppo_loss) on a plain (unsharded) module in this process
    rcfg = config.actor_rollout_ref
    actor_cfg = omega_conf_to_dataclass(rcfg.actor)
    with open_dict(rcfg.ref):  # as ActorRolloutRefWorker.init_model
        rcfg.ref.ppo_mini_batch_size = rcfg.actor.ppo_mini_batch_size
        rcfg.ref.ppo_micro_batch_size = rcfg.ref.pop("log_prob_micro_batch_size", None)
        rcfg.ref.ppo_micro_batch_size_per_gpu = rcfg.ref.pop("log_prob_micro_batch_size_per_gpu", None)
        rcfg.ref.use_dynamic_bsz = rcfg.ref.pop("log_prob_use_dynamic_bsz", False)
        rcfg.ref.ppo_max_token_len_per_gpu = rcfg.ref.pop("log_prob_max_token_len_per_gpu", None)
    ref_cfg = omega_conf_to_dataclass(rcfg.ref)
    a_eng = actor_cfg.engine
    a_eng.use_dynamic_bsz = rcfg.actor.use_dynamic_bsz
    a_eng.infer_max_token_len_per_gpu = rcfg.rollout.log_prob_max_token_len_per_gpu
    a_eng.infer_micro_batch_size_per_gpu = rcfg.rollout.log_prob_micro_batch_size_per_gpu
    a_eng.max_token_len_per_gpu = rcfg.actor.ppo_max_token_len_per_gpu
    a_eng.micro_batch_size_per_gpu = rcfg.actor.ppo_micro_batch_size_per_gpu
    a_eng.use_remove_padding = False
    r_eng = ref_cfg.engine
    r_eng.use_dynamic_bsz = rcfg.ref.use_dynamic_bsz
    r_eng.infer_max_token_len_per_gpu = rcfg.ref.ppo_max_token_len_per_gpu
    r_eng.infer_micro_batch_size_per_gpu = rcfg.ref.ppo_micro_batch_size_per_gpu
    r_eng.use_remove_padding = False

    class ModelConfig(dict):
        __getattr__ = dict.get

    def engine(module, cfg, train: bool):
        """FSDPEngineWithLMHead without FSDP: the attributes its __init__/initialize set, one rank, fp32."""
        e = transformer_impl.FSDPEngineWithLMHead.__new__(transformer_impl.FSDPEngineWithLMHead)
        e.__dict__.update(
            model_config=ModelConfig(use_remove_padding=False, lora_rank=0), engine_config=cfg.engine,
            optimizer_config=cfg.optim, checkpoint_config=None, mode=None, rank=0, use_remove_padding=False,
            ulysses_device_mesh=None, ulysses_parallel_group=None, ulysses_sequence_parallel_size=1,
            use_ulysses_sp=False, _is_offload_param=False, _is_offload_optimizer=False, _is_lora=False,
            _uses_fsdp2_cpu_offload_policy=False, _autocast_dtype=torch.float32, scaler=None, _qat_config=None,
            _qat_enabled=False, compute_entropy_from_logits=verl_F.entropy_from_logits, pad_to_length=False,
            pad_to_length_bucket=1024, pass_packed_cu_seqlens=False, module=module)
        e.optimizer = build_optimizer(module.parameters(), cfg.optim) if train else None
        e.lr_scheduler = e._build_lr_scheduler(e.optimizer) if train else None
        return e

    class NoProfiler:
        rank = 0

        def check_enable(self):
            return False

        check_this_step = check_this_rank = check_enable

        def step(self):
            pass

    def worker(eng, loss_fn):
        w = TrainingWorker.__new__(TrainingWorker)
        w.__dict__.update(engine=eng, engine_config=eng.engine_config, model_config=ModelConfig(use_remove_padding=False),
                          device_name="cpu", flops_counter=None, profiler=NoProfiler(), loss_fn=loss_fn)
        return w

    policy = tiny_model(tokenizer, seed)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    actor = worker(engine(policy, actor_cfg, train=True), partial(ppo_loss, config=actor_cfg))
    ref = worker(engine(reference, ref_cfg, train=False), None)
    nan = float("nan")

    class WorkerGroup:
        """The methods RayPPOTrainer calls on ActorRolloutRefWorker's Ray group, in this process."""

        def __init__(self):
            self._dispatch_info = {}

        def _query_dispatch_info(self, role):
            return [0]  # one data-parallel rank

        def compute_log_prob(self, data):
            out = actor.infer_batch(data).cpu()
            out["metrics"]["mfu"] = nan  # needs a GPU's peak FLOP/s; the key is dropped from the log
            return out

        def compute_ref_log_prob(self, data):
            return ref.infer_batch(data).cpu()

        def update_actor(self, data):
            out = actor.train_mini_batch(data=data).cpu()
            out["metrics"]["mfu"] = [nan]
            return out

    class Weights:  # the rollout samples from the actor's own module: no weight transfer to make
        def sleep_replicas(self):
            pass

        def update_weights(self, step):
            pass

    gen = torch.Generator().manual_seed(seed)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id

    class Rollout:
        """AgentLoopManager.generate_sequences with HF ``generate`` for vLLM: single turn, reward in rm_scores."""

        def generate_sequences(self, batch):
            texts = [m[0]["content"] for m in batch.non_tensor_batch["raw_prompt"]]
            enc = tokenizer(texts, padding="max_length", max_length=PROMPT_LEN, return_tensors="pt")  # left-padded
            prompts, prompt_mask = enc["input_ids"], enc["attention_mask"]
            policy.eval()
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            with torch.no_grad():
                g = policy.generate(input_ids=prompts, attention_mask=prompt_mask, do_sample=True,
                                    temperature=rcfg.rollout.temperature, top_k=0, top_p=1.0,
                                    max_new_tokens=RESPONSE_LEN, output_scores=True, return_dict_in_generate=True)
            new = g.sequences[:, PROMPT_LEN:]
            bs, n_new = new.shape
            responses = torch.full((bs, RESPONSE_LEN), pad, dtype=torch.long)
            responses[:, :n_new] = new
            # vLLM's logprobs_mode=processed_logprobs: log-softmax of the temperature-scaled logits
            logp = torch.stack([torch.log_softmax(s.float(), -1) for s in g.scores], 1)
            rollout_lp = torch.zeros(bs, RESPONSE_LEN)
            rollout_lp[:, :n_new] = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
            lengths = torch.tensor([row.index(eos) + 1 if eos in row else RESPONSE_LEN for row in responses.tolist()])
            response_mask = (torch.arange(RESPONSE_LEN)[None] < lengths[:, None]).long()
            responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad))
            rollout_lp = rollout_lp * response_mask
            scores = torch.tensor([starts_with_digit(tokenizer.decode(responses[i, :lengths[i]].tolist(),
                                                                      skip_special_tokens=True)) for i in range(bs)])
            attention_mask = torch.cat([prompt_mask, response_mask], 1)
            rm_scores = torch.zeros(bs, RESPONSE_LEN)
            rm_scores[torch.arange(bs), lengths - 1] = scores  # the score on the last response token
            td = TensorDict({"prompts": prompts, "responses": responses, "response_mask": response_mask,
                             "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention_mask,
                             "position_ids": torch.clip(torch.cumsum(attention_mask, -1) - 1, min=0),
                             "rollout_log_probs": rollout_lp, "rm_scores": rm_scores}, batch_size=bs)
            non_tensor = {"__num_turns__": np.full(bs, 2, dtype=np.int32), **batch.non_tensor_batch}
            mm = np.empty(bs, dtype=object)
            mm[:] = [{} for _ in range(bs)]
            non_tensor["multi_modal_inputs"] = mm
            return DataProto(batch=td, non_tensor_batch=non_tensor, meta_info={"reward_extra_keys": [], "timing": {}})

    trainer.actor_rollout_wg = trainer.ref_policy_wg = WorkerGroup()
    trainer.async_rollout_manager = Rollout()
    trainer.checkpoint_manager = Weights()
    t0 = time.perf_counter()
    trainer.fit()
    print(f"verl fit: {steps} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    dist.destroy_process_group()

    written = tmp / VERL_PROJECT / f"{VERL_EXPERIMENT}.jsonl"
    dest_dir = out / VERL_DIR  # the project folder: ROOT/rlvr_diagnostics/ of the run
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / written.name
    import orjson  # verl's FileLogger writes with orjson: the kept values keep its formatting

    with open(written, "rb") as src, open(dest, "wb") as dst:
        for line in src:
            rec = orjson.loads(line)
            for key in VERL_DROPPED:
                rec["data"].pop(key, None)
            dst.write(orjson.dumps(rec) + b"\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("framework", choices=("trl", "verl"), help="which run (each in its own environment)")
    ap.add_argument("--out", default=str(ROOT / "audit_logs"), help="parent folder [examples/audit_logs]")
    ap.add_argument("--steps", type=int, default=None, help="training steps [40]")
    args = ap.parse_args(argv)
    out = Path(args.out)
    t0 = time.perf_counter()
    if args.framework == "trl":
        dest = make_trl(out, steps=args.steps or TRL_STEPS)
    else:
        dest = make_verl(out, steps=args.steps or VERL_STEPS)
    files = [dest] if dest.is_file() else [p for p in dest.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"wrote {len(files)} file(s) ({size / 1024:.0f} KiB) under {dest} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
