"""The verl keys of the learner's work and memory, mapped to ``algorithm`` and ``learner``.

    actor.ppo_epochs, ppo_mini_batch_size, adv_estimator, optim.lr, ... ─► map_algorithm ─► algorithm: {...}
    fsdp_config.fsdp_size, ulysses / Megatron parallel sizes, ...       ─► map_learner   ─► learner: {...}

Part of ``scenarios.verl.plan_from_verl``; each value read is recorded as its field's source.
"""

from __future__ import annotations

import math
from typing import Any

from asyncrl.scenarios.verl_config import Reader, VerlPlan

#: Megatron's parallel sizes that split one sequence over devices (its expert parallelism does not).
MEGATRON_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


#: verl's advantage estimators that have an asyncrl loss.
LOSSES = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo"}


def map_algorithm(plan: VerlPlan, get: Reader) -> None:
    estimator = str(get.into("algorithm.loss", "algorithm.adv_estimator", "gae"))
    loss = LOSSES.get(estimator)
    if loss is None:
        plan.unmapped.append(("algorithm.adv_estimator", estimator, f"no counterpart (asyncrl: {', '.join(LOSSES)})"))
    epochs = get.integer("algorithm.updates_per_step", "actor_rollout_ref.actor.ppo_epochs", 1)
    mini = get.integer("algorithm.updates_per_step", "actor_rollout_ref.actor.ppo_mini_batch_size", 256)
    batch = plan.scenario["workload"]["prompts_per_step"]
    algorithm: dict[str, Any] = {
        "updates_per_step": epochs * max(1, math.ceil(batch / mini)),
        "extra_forward_passes": _extra_forward_passes(plan, get, epochs, estimator),
    }
    if loss is not None:
        algorithm["loss"] = loss
    lr = get.into("algorithm.learning_rate", "actor_rollout_ref.actor.optim.lr")
    clip = get.into("algorithm.clip_eps", "actor_rollout_ref.actor.clip_ratio")
    temperature = get.into("algorithm.temperature", "actor_rollout_ref.rollout.temperature")
    use_kl = bool(get.value("actor_rollout_ref.actor.use_kl_loss", False))
    kl = get.into("algorithm.kl_coef", "actor_rollout_ref.actor.kl_loss_coef") if use_kl else 0.0
    grad_clip = get.into("algorithm.grad_clip", "actor_rollout_ref.actor.grad_clip")
    gamma = get.into("algorithm.gamma", "algorithm.gamma")
    lam = get.into("algorithm.gae_lambda", "algorithm.lam")
    numbers = {"learning_rate": lr, "clip_eps": clip, "temperature": temperature, "kl_coef": kl}
    numbers |= {"grad_clip": grad_clip, "gamma": gamma, "gae_lambda": lam}
    for key, value in numbers.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            algorithm[key] = float(value)
    normalise = get.into("algorithm.normalise_std", "algorithm.norm_adv_by_std_in_grpo")
    if isinstance(normalise, bool):
        algorithm["normalise_std"] = normalise  # false: Dr. GRPO
    plan.scenario["algorithm"] = algorithm


def _extra_forward_passes(plan: VerlPlan, get: Reader, epochs: int, estimator: str) -> int:
    """Learner work beyond one forward and backward pass per sample, in forward passes (a backward ≈ 2)."""
    reference = bool(get.value("actor_rollout_ref.actor.use_kl_loss", False)) or bool(
        get.value("algorithm.use_kl_in_reward", False)
    )
    critic_epochs = int(get.value("critic.ppo_epochs", epochs) or epochs) if estimator == "gae" else 0
    rollout_log_probs = bool(get.value("actor_rollout_ref.actor.use_rollout_log_probs", False)) or bool(
        get.value("async_training.use_rollout_log_probs", False)
    )
    parts = {
        "old log-probs": 0 if rollout_log_probs else 1,
        "reference (KL)": 1 if reference else 0,
        "PPO epochs after the first": 3 * (epochs - 1),
        "critic (values, then training)": 1 + 3 * critic_epochs if critic_epochs else 0,
    }
    total = sum(parts.values())
    shown = ", ".join(f"{label} {count}" for label, count in parts.items() if count) or "none"
    plan.notes.append(f"algorithm.extra_forward_passes = {total} ({shown}; a backward pass counts as two)")
    plan.sources.append(("algorithm.extra_forward_passes", "actor_rollout_ref.actor.ppo_epochs", epochs))
    return total


def map_learner(plan: VerlPlan, get: Reader) -> None:
    """How the learner shards and splits its work: FSDP's shard groups, sequence (or Megatron model)
    parallelism, activation recomputation, the micro-batch token budget."""
    learner: dict[str, Any] = {}
    devices = plan.scenario["cluster"]["training_devices"]
    fsdp = get.value("actor_rollout_ref.actor.fsdp_config.fsdp_size")
    if isinstance(fsdp, int) and not isinstance(fsdp, bool):
        get.into("learner.shard_devices", "actor_rollout_ref.actor.fsdp_config.fsdp_size")
        learner["shard_devices"] = devices if fsdp <= 0 else min(fsdp, devices)  # -1: shard over every device
    parallel = _model_parallel(get)
    if parallel > 1:
        learner["model_parallel"] = parallel
    checkpointing = get.value("actor_rollout_ref.model.enable_gradient_checkpointing")
    if isinstance(checkpointing, bool):
        learner["activation_checkpointing"] = get.into(
            "learner.activation_checkpointing", "actor_rollout_ref.model.enable_gradient_checkpointing"
        )
    budget = get.value("actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
    if get.value("actor_rollout_ref.actor.use_dynamic_bsz") and isinstance(budget, int) and budget > 0:
        learner["micro_batch_tokens"] = get.into(
            "learner.micro_batch_tokens", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
        )
    if learner:
        plan.scenario["learner"] = learner


def _model_parallel(get: Reader) -> int:
    """Devices sharing one sequence: Ulysses sequence parallelism (FSDP) or Megatron's TP × PP × CP."""
    if str(get.value("actor_rollout_ref.actor.strategy", "")) == "megatron":
        keys = [f"actor_rollout_ref.actor.megatron.{name}" for name in MEGATRON_PARALLEL]
        sizes = [get.into("learner.model_parallel", key) for key in keys if get.value(key) is not None]
        return math.prod(size for size in sizes if isinstance(size, int) and size > 0)
    ulysses = get.value("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1)
    if isinstance(ulysses, int) and ulysses > 1:
        get.into("learner.model_parallel", "actor_rollout_ref.actor.ulysses_sequence_parallel_size")
        return ulysses
    return 1
