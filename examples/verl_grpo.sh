#!/usr/bin/env bash
# GRPO-style training in verl with a registry advantage: AsymGRPO, delta = 0.5.
#
#   pip install "rlvr-diagnostics[verl]"       # verl finds the estimators itself: the entry point
#                                              # `verl.plugins` of this package is loaded by `import verl`
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct DATA=$HOME/data/gsm8k bash examples/verl_grpo.sh [more overrides]
#
# verl's AlgoConfig refuses unknown keys, so the family's parameters travel in the environment
# variable RLVR_PARAMS ("delta=0.5,alpha=2"; reserved keys: success_threshold, singleton, steps).
# The advantages are computed in verl's TaskRunner, a Ray actor: the variables reach it through
# ray_kwargs.ray_init.runtime_env.env_vars (the `+` adds keys that verl's config does not declare).
# Other estimators: algorithm.adv_estimator=rlvr_<family> (any family of `rlvr-theory list`),
# or a schedule, e.g. rlvr_schedule_fade_log with RLVR_PARAMS="steps=<total training steps>".
# Without installing the package (a source checkout on PYTHONPATH), load the plugin with
#   "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=integrations.verl"
# (and export VERL_USE_EXTERNAL_MODULES=integrations.verl for the driver).
# The diagnostics (masses m_S, m_F, sign ratio, zero-signal fractions) go to the Python logger
# rlvr_diagnostics.verl and, one JSON line per step, to $RLVR_LOG_DIR/rlvr_<host>_<pid>.jsonl.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
DATA=${DATA:-$HOME/data/gsm8k}
RLVR_PARAMS=${RLVR_PARAMS:-delta=0.5}
RLVR_LOG_DIR=${RLVR_LOG_DIR:-$PWD/rlvr_logs}
export RLVR_PARAMS RLVR_LOG_DIR

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=rlvr_asym_grpo \
    "+ray_kwargs.ray_init.runtime_env.env_vars.RLVR_PARAMS='${RLVR_PARAMS}'" \
    "+ray_kwargs.ray_init.runtime_env.env_vars.RLVR_LOG_DIR='${RLVR_LOG_DIR}'" \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    'trainer.logger=["console"]' \
    trainer.project_name=rlvr_diagnostics \
    trainer.experiment_name=asym_grpo_delta0.5 \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=50 \
    trainer.test_freq=10 \
    trainer.total_epochs=3 \
    "$@"
