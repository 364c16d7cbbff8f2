"""verl's own defaults for the keys ``from-verl`` reads, and the config a launch script's module starts from.

    python -m verl.trainer.main_ppo …                              ─► ppo_trainer.yaml's defaults
    python -m recipe.dapo.main_dapo …                              ─► the same (recipes start from ppo_trainer)
    python -m verl.experimental.one_step_off_policy.main_ppo …     ─► + rollout: {nnodes: 1, n_gpus_per_node: 8}
    python -m verl.experimental.fully_async_policy.fully_async_main ─► + async_training's defaults
    --config-name=…megatron…, or actor_rollout_ref.actor.megatron.* keys  ─► actor.strategy: megatron

A recipe's launch script gives only the keys it changes; verl fills the rest from its YAML configs. These
are those defaults for what ``from-verl`` maps, as verl's ``verl/trainer/config/_generated_ppo_trainer.yaml``
and the recipes' ``config/*.yaml`` hold them at ``volcengine/verl`` b178a3cd5; ``from-verl`` says which
fields came from a default rather than the script.
"""

from __future__ import annotations

import copy
from typing import Any

PPO_TRAINER: dict[str, Any] = {
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "model": {"enable_gradient_checkpointing": True, "use_remove_padding": True, "lora_rank": 0},
        "actor": {
            "strategy": "fsdp",
            "ppo_mini_batch_size": 256,
            "ppo_micro_batch_size_per_gpu": None,
            "use_dynamic_bsz": False,
            "ppo_max_token_len_per_gpu": 16384,
            "ppo_epochs": 1,
            "clip_ratio": 0.2,
            "use_kl_loss": False,
            "kl_loss_coef": 0.001,
            "grad_clip": 1.0,
            "ulysses_sequence_parallel_size": 1,
            "entropy_coeff": 0,
            "loss_agg_mode": "token-mean",
            "optim": {"lr": 1e-6, "optimizer": "AdamW"},
            "fsdp_config": {
                "param_offload": False,
                "optimizer_offload": False,
                "offload_policy": False,
                "fsdp_size": -1,
                "dtype": "bfloat16",
            },
        },
        "rollout": {
            "n": 1,
            "tensor_model_parallel_size": 2,
            "temperature": 1.0,
            "dtype": "bfloat16",
            "gpu_memory_utilization": 0.5,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 8192,
            "free_cache_engine": True,
            "enforce_eager": False,
            "calculate_log_probs": False,
        },
    },
    "data": {"max_prompt_length": 512, "max_response_length": 512, "train_batch_size": 1024},
    "algorithm": {"adv_estimator": "gae", "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True},
    "trainer": {"n_gpus_per_node": 8, "nnodes": 1, "total_epochs": 30},
}
#: The one-step-off recipe's config (``one_step_off_ppo_trainer.yaml``): a rollout pool beside the trainer.
ONE_STEP_OFF: dict[str, Any] = {
    "rollout": {"nnodes": 1, "n_gpus_per_node": 8},
    "actor_rollout_ref": {"rollout": {"free_cache_engine": False, "calculate_log_probs": True}},
}
#: The fully async recipe's config (``fully_async_ppo_trainer.yaml``).
FULLY_ASYNC: dict[str, Any] = {
    "async_training": {
        "staleness_threshold": 0.1,
        "trigger_parameter_sync_step": 4,
        "require_batches": 1,
        "partial_rollout": True,
        "use_rollout_log_probs": True,
    },
    "rollout": {"nnodes": 1, "n_gpus_per_node": 8, "n": 4, "total_rollout_steps": 100},
    "data": {"gen_batch_size": 1},
}
#: Megatron's trainer config (``ppo_megatron_trainer.yaml``): its parallel sizes and recomputation.
MEGATRON: dict[str, Any] = {
    "actor_rollout_ref": {
        "actor": {
            "strategy": "megatron",
            "megatron": {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "context_parallel_size": 1,
                "param_offload": False,
                "grad_offload": False,
                "optimizer_offload": False,
                "override_transformer_config": {"recompute_granularity": None},
            },
        }
    }
}


def base_config(module: str, arguments: list[str]) -> dict[str, Any]:
    """The defaults a launch of ``module`` with ``arguments`` starts from, before the script's own keys."""
    config = copy.deepcopy(PPO_TRAINER)
    if "one_step_off_policy" in module:
        merge(config, ONE_STEP_OFF)
    if "fully_async_policy" in module:
        merge(config, FULLY_ASYNC)
    megatron = any("megatron" in word for word in arguments if word.startswith("--config-name")) or any(
        word.lstrip("+").startswith("actor_rollout_ref.actor.megatron.") for word in arguments
    )
    if megatron:
        merge(config, MEGATRON)
    return config


def merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``into`` section by section (``update`` wins); returns ``into``."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into
