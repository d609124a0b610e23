"""A registry advantage (default AsymGRPO, δ = 0.5) inside TRL's GRPOTrainer, on CPU, with a tiny model built here.

Run from a clone (about a minute on a laptop CPU; needs the ``trl`` extra: ``pip install -e ".[trl]"``,
see the README's Install section)::

    python examples/trl_grpo.py --out runs/trl_grpo --steps 20
    python examples/trl_grpo.py --out runs/trl_rloo --steps 20 --advantage rloo
    python examples/trl_grpo.py --out runs/trl_asym --steps 20 --advantage asym_grpo --param delta=0.3

Everything but the two marked lines is plain TRL: the trainer is
``integrations.trl.GRPOTrainer`` and it takes ``advantage=`` / ``advantage_params=``
(``--advantage NAME`` / ``--param NAME=VALUE``, parsed like every ``--param`` of the toolkit;
``success_threshold`` and ``singleton`` go to the trainer's keywords of those names).  The
model is a one-layer Qwen2 over a character tokenizer built locally (no download); the reward
is a verifiable check of each completion (here: the answer starts with a digit, a format check
that a fresh model passes about one time in six; put your verifier there).  The run writes
TRL's logs, the completions table (``OUT/completions/completions_NNNNN.parquet``, whose
``advantage`` column holds the AsymGRPO advantages that entered the loss) and prints the
``rlvr/*`` mass diagnostics TRL logged at each step.  At the end it saves TRL's
``OUT/trainer_state.json`` (the log history of the whole run), which ``rlvr-audit OUT --metrics``
reads.
"""

from __future__ import annotations

import argparse
import glob
import os

import numpy as np

from rlvr_plumbing.runner import parse_params

# torch, transformers, datasets and trl are imported where they are used, so that --help and a
# mistyped flag answer at once


def starts_with_digit(completions, **kwargs):
    """Binary verifiable reward: 1.0 if the answer begins with a digit, else 0.0."""
    return [1.0 if c[:1].isdigit() else 0.0 for c in completions]


def tiny_model(tokenizer, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/trl_grpo", help="output directory (TRL's output_dir)")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--advantage", default="asym_grpo", metavar="NAME",
                    help="registry family (rlvr-theory list); default asym_grpo (with delta=0.5 unless --param is given)")
    ap.add_argument("--param", action="append", default=None, metavar="NAME=VALUE",
                    help="a parameter of the family, repeatable (e.g. --param delta=0.5); success_threshold= and "
                         "singleton= go to the trainer")
    ap.add_argument("--save-steps", type=int, default=0,
                    help="save a checkpoint every N steps (0: none); OUT/trainer_state.json is written at the end")
    a = ap.parse_args(argv)
    try:
        params = parse_params(a.param)
    except ValueError as err:
        ap.error(f"--param: {err}")
    if a.param is None and a.advantage == "asym_grpo":
        params = {"delta": 0.5}
    from datasets import Dataset
    from trl import GRPOConfig

    from integrations.core import RESERVED
    from integrations.trl import GRPOTrainer  # <- the registry's advantages inside TRL
    from simulations.grpo.tokenizer import build_tokenizer

    adapter = {k: params.pop(k) for k in RESERVED if k in params and k != "steps"}

    tokenizer = build_tokenizer()
    rng = np.random.default_rng(a.seed)
    prompts = [f"{x}+{y}=" for x, y in rng.integers(0, 50, size=(64, 2))]
    args = GRPOConfig(output_dir=a.out, use_cpu=True, seed=a.seed, max_steps=a.steps, learning_rate=3e-3,
                      per_device_train_batch_size=32, num_generations=8, max_completion_length=4,
                      temperature=1.0, logging_steps=1, log_completions=True, num_completions_to_print=2, report_to=[],
                      save_strategy="steps" if a.save_steps > 0 else "no", save_steps=max(a.save_steps, 1),
                      disable_tqdm=True, bf16=False)
    try:  # the family, its parameters and their values are checked before the model is used
        trainer = GRPOTrainer(model=tiny_model(tokenizer, a.seed), processing_class=tokenizer,
                              reward_funcs=starts_with_digit, train_dataset=Dataset.from_dict({"prompt": prompts}),
                              args=args,
                              advantage=a.advantage, advantage_params=params, **adapter)  # <- the family
    except (ValueError, KeyError) as err:
        ap.error(f"--advantage {a.advantage} / --param: {err}")
    trainer.train()
    trainer.save_state()  # OUT/trainer_state.json (log_history of the whole run): rlvr-audit OUT --metrics

    print(f"{'step':>4} {'reward':>7} {'m_S':>8} {'m_F':>8} {'m_S/m_F':>8} {'all wrong':>9}")
    for h in trainer.state.log_history:
        if "rlvr/m_F" in h:
            ratio = h.get("rlvr/sign_ratio")
            print(f"{h['step']:>4} {h['reward']:>7.3f} {h['rlvr/m_S']:>8.4f} {h['rlvr/m_F']:>8.4f} "
                  f"{'—' if ratio is None else format(ratio, '.3f'):>8} {h['rlvr/frac_all_wrong']:>9.3f}")
    tables = sorted(glob.glob(os.path.join(a.out, "completions", "completions_*.parquet")))
    print(f"completions tables: {len(tables)} in {os.path.join(a.out, 'completions')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
