"""LoRA GRPO inside TRL on CPU: the adapter checkpoints that ``rlvr-diff`` reads as ``ΔW = s·B·A``.

Run from a clone (well under a minute on a laptop CPU; needs the ``trl`` extra and peft:
``pip install -e ".[trl]" peft``, see the README's Install section)::

    python examples/trl_grpo_lora.py --out runs/grpo-lora --steps 4 --save-steps 2
    rlvr-diff runs/grpo-lora/base runs/grpo-lora/checkpoint-4 --out reports/lora

It is ``examples/trl_grpo.py`` (the same tiny model, prompts and verifiable reward, imported from
it) with one change: a peft ``LoraConfig`` passed to ``integrations.trl.GRPOTrainer`` as
``peft_config=``, so that TRL trains a LoRA adapter and leaves the base weights frozen:

* rank ``r = 8``, ``lora_alpha = 16`` (scale ``s = lora_alpha / r = 2``), no dropout;
* ``target_modules="all-linear"``: every linear layer of the transformer blocks of the tiny
  Qwen2 (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``,
  ``down_proj``; peft leaves the output head ``lm_head`` out), 14 modules over its 2 blocks.

The base model is saved once, before training, to ``OUT/base`` and the trainer is given the model
loaded back from there, so every adapter records ``base_model_name_or_path = OUT/base`` (absolute)
in its ``adapter_config.json``: ``rlvr-diff OUT/base OUT/checkpoint-N`` pairs the adapter with its
own base (``rlvr-diff`` refuses another base of the same shapes unless ``--allow-other-base``).
``--save-steps N`` writes ``OUT/checkpoint-N``, ``OUT/checkpoint-2N``, ... (TRL's checkpoints of a
peft model: ``adapter_config.json`` and ``adapter_model.safetensors``, plus optimizer state), and
the final ``trainer_state.json`` is written to ``OUT``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from trl_grpo import starts_with_digit, tiny_model  # this script's folder is on sys.path

# torch, transformers, datasets, peft and trl are imported where they are used, so that --help and a
# mistyped flag answer at once

LORA_RANK = 8
LORA_ALPHA = 16


def lora_config():
    """The adapter trained here: rank 8 on every linear layer of the blocks (module docstring)."""
    from peft import LoraConfig

    return LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear",
                      bias="none", task_type="CAUSAL_LM")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/grpo-lora", help="output directory (TRL's output_dir; the base in OUT/base)")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-steps", type=int, default=2,
                    help="save an adapter checkpoint (OUT/checkpoint-N) every N steps (0: none)")
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error(f"--steps must be at least 1, got {a.steps}")
    if a.save_steps < 0:
        ap.error(f"--save-steps must be 0 or more, got {a.save_steps}")
    try:
        import peft  # noqa: F401
    except ImportError:
        ap.error("peft is not installed: pip install peft (it builds the LoRA adapter)")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from integrations.trl import GRPOTrainer
    from simulations.grpo.tokenizer import build_tokenizer

    out = os.path.abspath(a.out)
    base_dir = os.path.join(out, "base")
    tokenizer = build_tokenizer()
    tiny_model(tokenizer, a.seed).save_pretrained(base_dir)   # the base, once: rlvr-diff OUT/base OUT/checkpoint-N
    model = AutoModelForCausalLM.from_pretrained(base_dir)    # its name_or_path is OUT/base: the adapters record it
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id

    rng = np.random.default_rng(a.seed)
    prompts = [f"{x}+{y}=" for x, y in rng.integers(0, 50, size=(64, 2))]
    args = GRPOConfig(output_dir=out, use_cpu=True, seed=a.seed, max_steps=a.steps, learning_rate=3e-3,
                      per_device_train_batch_size=32, num_generations=8, max_completion_length=4,
                      temperature=1.0, logging_steps=1, report_to=[],
                      save_strategy="steps" if a.save_steps > 0 else "no", save_steps=max(a.save_steps, 1),
                      disable_tqdm=True, bf16=False)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=starts_with_digit,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), args=args,
                          peft_config=lora_config(),           # <- LoRA: TRL wraps the model with peft
                          advantage="asym_grpo", advantage_params={"delta": 0.5})
    trainer.model.print_trainable_parameters()
    trainer.train()
    trainer.save_state()   # OUT/trainer_state.json

    print(f"{'step':>4} {'reward':>7} {'m_S':>8} {'m_F':>8}")
    for h in trainer.state.log_history:
        if "rlvr/m_F" in h:
            print(f"{h['step']:>4} {h['reward']:>7.3f} {h['rlvr/m_S']:>8.4f} {h['rlvr/m_F']:>8.4f}")
    cks = sorted((d for d in os.listdir(out) if d.startswith("checkpoint-")), key=lambda d: int(d.split("-")[1]))
    print(f"base: {base_dir}")
    print(f"adapter checkpoints: {', '.join(cks) or 'none (--save-steps 0)'} in {out}")
    if cks:
        print(f"diff one: rlvr-diff {base_dir} {os.path.join(out, cks[-1])} --out reports/lora")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
