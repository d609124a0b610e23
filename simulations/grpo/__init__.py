"""A small GRPO trainer that produces real Hugging Face checkpoints.

Modules (import what you need; importing the package loads neither torch nor transformers):

* :mod:`~simulations.grpo.config` — the settings of every run kind (``SFTConfig``,
  ``GRPOConfig``, ``EvalConfig``, ``SweepConfig``), from which the command line is generated;
* :mod:`~simulations.grpo.tasks` — synthetic tasks with exact verifiers, a difficulty knob,
  train / held-out splits and a registry for your own tasks;
* :mod:`~simulations.grpo.tokenizer` — a character tokenizer built locally (``tokenizers``);
* :mod:`~simulations.grpo.models` — Qwen2-style presets ``tiny-cpu`` / ``small-gpu`` or any
  local causal LM;
* :mod:`~simulations.grpo.sft` — supervised warm start to a target solve rate;
* :mod:`~simulations.grpo.rollout` — B prompts × G rollouts with a KV cache (``temperature=0``:
  greedy);
* :mod:`~simulations.grpo.losses` — PPO-clip (ε_low, ε_high), CISPO, GRPO-N, the sequence-level
  GSPO and GSPO-N, and four loss aggregations;
* :mod:`~simulations.grpo.trainer` — the GRPO loop, metrics, atomic checkpoints, bit-for-bit
  resume;
* :mod:`~simulations.grpo.evaluate` — held-out pass@k or greedy accuracy, answer- and token-level
  entropy;
* :mod:`~simulations.grpo.sweep` — AsymGRPO δ ∈ {0.5, 1, 2} and FADE from one SFT checkpoint,
  with the output-head table of the checkpoint diff;
* :mod:`~simulations.grpo.cli` — ``rlvr-train sft | grpo | eval | sweep``.

Advantages come only from :mod:`rlvr_theory.advantages` and :mod:`rlvr_theory.schedules`,
masses from :mod:`rlvr_theory.masses`, pass@k from :mod:`analysis.passk`.  See ``docs/grpo.md``.
"""
