"""Shared by the TRL tests and their torchrun script: a tiny local model, deterministic reward
functions, a trainer subclass that records what entered the loss, and the expected values."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
import torch

from rlvr_theory import advantages, masses

#: the metrics the adapter appends (without the schedule's)
MASS_METRICS = ("rlvr/m_S", "rlvr/m_F", "rlvr/sign_ratio", "rlvr/frac_all_correct",
                "rlvr/frac_all_wrong", "rlvr/abs_adv_sum", "rlvr/solve_rate")
SCHEDULE_METRICS = ("rlvr/alpha", "rlvr/delta", "rlvr/omega")
ROW = "rlvr_test_row"  # extra tensor riding with each row through TRL's shuffle and split


# ------------------------------------------------------------------ model
def tiny_model_and_tokenizer(seed: int = 0):
    """A one-layer Qwen2 over the project's character tokenizer (built locally, no hub)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from simulations.grpo.tokenizer import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def dataset(n: int = 32, start: int = 0):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(start, start + n)]})


# ---------------------------------------------------------------- rewards
def _code(completion: str) -> int:
    return sum(map(ord, completion))


def binary_reward(completions, **kwargs):
    """1 for about a third of the completions (a hash of the text), else 0."""
    return [float(_code(c) % 3 == 0) for c in completions]


def real_reward(completions, **kwargs):
    """Partial credit in {0, 0.25, 0.5, 0.75, 1}."""
    return [(_code(c) % 5) / 4 for c in completions]


def sometimes_none_reward(completions, **kwargs):
    """Real-valued, and None (unscorable) for about a quarter of the completions."""
    return [None if _code(c) % 4 == 0 else (_code(c) % 5) / 4 for c in completions]


REWARDS = {"binary": binary_reward, "real": real_reward, "none": sometimes_none_reward}


# ---------------------------------------------------------------- trainer
def config(out: str, **overrides: Any):
    from trl import GRPOConfig

    kw = dict(output_dir=out, use_cpu=True, per_device_train_batch_size=8, num_generations=4,
              max_completion_length=6, max_steps=2, logging_steps=1, report_to=[], log_completions=True,
              save_strategy="no", seed=0, disable_tqdm=True, learning_rate=1e-3, bf16=False,
              gradient_checkpointing=False)
    kw.update(overrides)
    return GRPOConfig(**kw)


def recording(base: type) -> type:
    """``base`` (a GRPOTrainer) that records, per generation batch, the gathered rewards, the
    advantages handed to the loss (by row) and the ``rlvr/*`` metrics appended."""

    class Recording(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.gens: list[dict] = []
            self.loss_rows: list[tuple[np.ndarray, np.ndarray]] = []
            self.resumed_state: dict | None = None
            self._gathered = None

        def _calculate_rewards(self, *args, **kwargs):
            r = super()._calculate_rewards(*args, **kwargs)
            self._gathered = r.detach().cpu().double().numpy().copy()
            return r

        def _generate_and_score_completions(self, inputs):
            mode = "train" if self.model.training else "eval"
            before = {k: len(v) for k, v in self._metrics[mode].items()}
            out = super()._generate_and_score_completions(inputs)
            g = len(self.gens)
            n = out["advantages"].shape[0]
            out[ROW] = torch.arange(n) + g * 1_000_000
            metrics = {k: v[-1] for k, v in self._metrics[mode].items()
                       if k.startswith("rlvr/") and len(v) > before.get(k, 0)}
            self.gens.append(dict(mode=mode, step=self.state.global_step, rewards_per_func=self._gathered,
                                  weights=self.reward_weights.double().numpy(),
                                  local=out["advantages"].double().numpy().copy(),
                                  rank=self.accelerator.process_index, metrics=metrics,
                                  reward_names=list(self.reward_func_names),
                                  lengths=out["completion_mask"].sum(1).double().numpy()))
            return out

        def _compute_loss(self, model, inputs):
            self.loss_rows.append((inputs[ROW].numpy().copy(), inputs["advantages"].double().numpy().copy()))
            return super()._compute_loss(model, inputs)

        def _load_optimizer_and_scheduler(self, checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            policy = getattr(self, "rlvr_policy", None)
            if checkpoint is not None and policy is not None:
                self.resumed_state = json.loads(json.dumps(policy.state_dict()))

    return Recording


def build(base: type, out: str, *, reward: str | list = "binary", n_prompts: int = 32, cfg: dict | None = None,
          eval_prompts: int = 0, **trainer_kwargs: Any):
    model, tok = tiny_model_and_tokenizer()
    funcs = [REWARDS[r] for r in reward] if isinstance(reward, list) else REWARDS[reward]
    return recording(base)(model=model, reward_funcs=funcs, args=config(out, **(cfg or {})),
                           train_dataset=dataset(n_prompts),
                           eval_dataset=dataset(eval_prompts, start=100) if eval_prompts else None,
                           processing_class=tok, **trainer_kwargs)


# --------------------------------------------------------------- expected
def weighted(gen: dict) -> np.ndarray:
    """TRL's reward per row: Σ w_k r_k over functions that scored it, NaN if none did."""
    r, w = gen["rewards_per_func"], gen["weights"]
    total = np.nansum(r * w, axis=1)
    total[np.isnan(r).all(axis=1)] = np.nan
    return total


def loss_advantages(trainer) -> dict[int, float]:
    """Row id -> advantage, for every row that entered the loss (each must agree every time)."""
    seen: dict[int, float] = {}
    for rows, adv in trainer.loss_rows:
        for i, a in zip(rows.tolist(), adv.tolist()):
            assert seen.setdefault(i, a) == a, "one row entered the loss with two advantages"
    return seen


def parquet_tables(out: str) -> dict[int, Any]:
    import pandas as pd

    return {int(os.path.basename(f)[12:17]): pd.read_parquet(f)
            for f in sorted(glob.glob(os.path.join(out, "completions", "completions_*.parquet")))}


def expected_metrics(adv: advantages.Advantage, R: np.ndarray) -> dict[str, float]:
    """The ``rlvr/*`` values from :mod:`rlvr_theory.masses` on binary rewards ``R`` (groups, G)."""
    m = masses.of_group(adv, R)
    s = R == adv.reward_values[1]
    out = {"rlvr/m_S": m.m_S.mean(), "rlvr/m_F": m.m_F.mean(),
           "rlvr/frac_all_correct": s.all(-1).mean(), "rlvr/frac_all_wrong": (~s).all(-1).mean(),
           "rlvr/abs_adv_sum": masses.abs_adv_sum(adv, R).mean(), "rlvr/solve_rate": s.mean()}
    if out["rlvr/m_F"] != 0:
        out["rlvr/sign_ratio"] = out["rlvr/m_S"] / out["rlvr/m_F"]
    return {k: float(v) for k, v in out.items()}


def to_jsonable(trainer) -> dict:
    """What the torchrun script writes per rank."""
    def arr(x):
        return np.asarray(x).tolist()

    return {"gens": [{k: (arr(v) if isinstance(v, np.ndarray) else v) for k, v in g.items()} for g in trainer.gens],
            "loss": {str(k): v for k, v in loss_advantages(trainer).items()},
            "state": trainer.rlvr_policy.state_dict() if hasattr(trainer, "rlvr_policy") else None,
            "log_history": trainer.state.log_history, "resumed_state": trainer.resumed_state}


def from_jsonable(doc: dict) -> dict:
    for g in doc["gens"]:
        for k in ("rewards_per_func", "weights", "local", "lengths"):
            g[k] = np.array(g[k], dtype=float)
    doc["loss"] = {int(k): v for k, v in doc["loss"].items()}
    return doc
