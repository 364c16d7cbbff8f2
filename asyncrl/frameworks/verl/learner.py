"""The verl keys of the learner's work and memory, mapped to ``algorithm`` and ``learner``.

    actor.ppo_epochs, ppo_mini_batch_size, adv_estimator, optim.lr, ... ─► map_algorithm ─► algorithm: {...}
    actor.strategy, fsdp_config.{fsdp_size, dtype, offload_policy}, optim.optimizer,
    ulysses / Megatron parallel sizes, recomputation, the micro-batch       ─► map_learner   ─► learner: {...}

Part of ``scenarios.verl.plan_from_verl``; each value read is recorded as its field's source.
"""

from __future__ import annotations

import math
from typing import Any

from asyncrl.frameworks.verl.config import Reader, VerlPlan

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
    forward, training = _extra_passes(plan, get, epochs, estimator)
    algorithm: dict[str, Any] = {
        "updates_per_step": epochs * max(1, math.ceil(batch / mini)),
        "extra_forward_passes": forward,
        "extra_training_passes": training,
    }
    if loss is not None:
        algorithm["loss"] = loss
    lr = get.into("algorithm.learning_rate", "actor_rollout_ref.actor.optim.lr")
    low = "actor_rollout_ref.actor.clip_ratio_low"  # DAPO's clip-higher sets the two ends; asyncrl's is symmetric
    clip = get.into("algorithm.clip_eps", low if get.is_given(low) else "actor_rollout_ref.actor.clip_ratio")
    temperature = get.into("algorithm.temperature", "actor_rollout_ref.rollout.temperature")
    use_kl = bool(get.into("algorithm.kl_coef", "actor_rollout_ref.actor.use_kl_loss", False))
    get.value("actor_rollout_ref.actor.kl_loss_coef")  # looked at either way; it counts only with use_kl_loss
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


def _extra_passes(plan: VerlPlan, get: Reader, epochs: int, estimator: str) -> tuple[int, int]:
    """The learner's work beyond one training pass per sample: (no-grad passes, training passes)."""
    reference = bool(get.value("actor_rollout_ref.actor.use_kl_loss", False)) or bool(
        get.value("algorithm.use_kl_in_reward", False)
    )
    critic_epochs = int(get.value("critic.ppo_epochs", epochs) or epochs) if estimator == "gae" else 0
    rollout_log_probs = bool(get.value("actor_rollout_ref.actor.use_rollout_log_probs", False)) or bool(
        get.value("async_training.use_rollout_log_probs", False)
    )
    forward = {
        "old log-probs": 0 if rollout_log_probs else 1,
        "reference (KL)": 1 if reference else 0,
        "critic's values": 1 if critic_epochs else 0,
    }
    training = {"PPO epochs after the first": epochs - 1, "the critic's update": critic_epochs}
    for label, parts, field in (
        ("no-grad passes", forward, "algorithm.extra_forward_passes"),
        ("training passes", training, "algorithm.extra_training_passes"),
    ):
        shown = ", ".join(f"{name} {count}" for name, count in parts.items() if count) or "none"
        plan.notes.append(f"{field} = {sum(parts.values())} ({label}: {shown})")
        plan.sources.append((field, "actor_rollout_ref.actor.ppo_epochs", epochs))
    return sum(forward.values()), sum(training.values())


ACTOR = "actor_rollout_ref.actor"
#: verl's dtypes as the learner names them.
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32", "fp32": "fp32"}


def map_learner(plan: VerlPlan, get: Reader) -> None:
    """How the learner shards and splits its work and what it keeps: the strategy, FSDP's shard groups and
    dtype, the optimizer and what is offloaded through the update, sequence (or Megatron model) parallelism,
    activation recomputation, the micro-batch."""
    learner: dict[str, Any] = {}
    megatron = str(get.value(f"{ACTOR}.strategy", "fsdp")) == "megatron"
    learner["sharding"] = get.into("learner.sharding", f"{ACTOR}.strategy", "fsdp", lambda _: "fsdp")
    if megatron:
        learner["backend"] = get.into("learner.backend", f"{ACTOR}.strategy", "fsdp")
    if megatron:
        plan.notes.append(
            "learner.sharding = fsdp: Megatron splits weights and gradients over TP × PP and the optimizer over "
            "every rank (use_distributed_optimizer); planned as all three sharded over the training devices"
        )
    else:
        _fsdp(plan, get, learner)
    _optimizer(get, learner, megatron)
    parallel = _model_parallel(get)
    if parallel > 1:
        learner["model_parallel"] = parallel
    stages = get.value(f"{ACTOR}.megatron.pipeline_model_parallel_size") if megatron else None
    if isinstance(stages, int) and not isinstance(stages, bool) and stages > 1:
        learner["pipeline_stages"] = get.into(
            "learner.pipeline_stages", f"{ACTOR}.megatron.pipeline_model_parallel_size"
        )
    learner["activation_checkpointing"] = _recompute(plan, get, megatron)
    _micro_batch(plan, get, learner)
    _forward_micro_batch(get, learner)
    if megatron:  # verl's Megatron actor packs its sequences (no padding computed), whatever use_remove_padding says
        learner["remove_padding"] = bool(get.into("learner.remove_padding", f"{ACTOR}.strategy", True, lambda _: True))
    else:
        learner["remove_padding"] = bool(
            get.into("learner.remove_padding", "actor_rollout_ref.model.use_remove_padding", True)
        )
    offload = _phase_offload(get, megatron)
    if offload != "none":
        learner["phase_offload"] = offload
    _lora(plan, get, learner)
    plan.scenario["learner"] = learner


def _lora(plan: VerlPlan, get: Reader, learner: dict[str, Any]) -> None:
    """LoRA adapters (``model.lora_rank``), planned on every linear layer of each block (verl's recipes'
    ``target_modules: all-linear``)."""
    rank = get.value("actor_rollout_ref.model.lora_rank", 0)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        return
    learner["lora_rank"] = get.into("learner.lora_rank", "actor_rollout_ref.model.lora_rank")
    targets = get.value("actor_rollout_ref.model.target_modules", "all-linear")
    if targets != "all-linear":
        plan.notes.append(
            f"learner.lora_rank = {rank}: adapters planned on every linear layer (target_modules is {targets!r})"
        )


def _fsdp(plan: VerlPlan, get: Reader, learner: dict[str, Any]) -> None:
    """FSDP's shard groups (fsdp_size), its compute dtype, and FSDP2's offload policy (states on the CPU)."""
    devices = plan.scenario["cluster"]["training_devices"]
    fsdp = get.value(f"{ACTOR}.fsdp_config.fsdp_size")
    if isinstance(fsdp, int) and not isinstance(fsdp, bool):
        get.into("learner.shard_devices", f"{ACTOR}.fsdp_config.fsdp_size")
        learner["shard_devices"] = devices if fsdp <= 0 else min(fsdp, devices)  # -1: shard over every device
    dtype = get.into("learner.param_dtype", f"{ACTOR}.fsdp_config.dtype", "bfloat16", lambda v: DTYPES.get(str(v)))
    if dtype is not None:
        learner["param_dtype"] = dtype
    if get.value(f"{ACTOR}.fsdp_config.offload_policy") is True:  # FSDP2's CPUOffloadPolicy: through the update
        learner["param_offload"] = get.into("learner.param_offload", f"{ACTOR}.fsdp_config.offload_policy")
        learner["optimizer_offload"] = get.into("learner.optimizer_offload", f"{ACTOR}.fsdp_config.offload_policy")


def _optimizer(get: Reader, learner: dict[str, Any], megatron: bool) -> None:
    """Adam-like or plain SGD; Megatron's CPU optimizer (optimizer_cpu_offload) keeps its states on the CPU."""
    name = get.into("learner.optimizer", f"{ACTOR}.optim.optimizer", "AdamW", lambda v: str(v).lower())
    learner["optimizer"] = "sgd" if name == "sgd" else "adam"
    cpu = f"{ACTOR}.optim.override_optimizer_config.optimizer_cpu_offload"
    if megatron and get.value(cpu) is True:
        learner["optimizer_offload"] = get.into("learner.optimizer_offload", cpu)


def _recompute(plan: VerlPlan, get: Reader, megatron: bool) -> bool:
    """Activation recomputation: FSDP's enable_gradient_checkpointing, Megatron's recompute_granularity."""
    if not megatron:
        return bool(
            get.into("learner.activation_checkpointing", "actor_rollout_ref.model.enable_gradient_checkpointing", True)
        )
    key = f"{ACTOR}.megatron.override_transformer_config.recompute_granularity"
    granularity = get.into("learner.activation_checkpointing", key)
    if granularity == "selective":
        plan.notes.append("learner.activation_checkpointing = true: Megatron's selective recompute planned as full")
    return granularity in ("full", "selective")


def _micro_batch(plan: VerlPlan, get: Reader, learner: dict[str, Any]) -> None:
    """Tokens of one micro-batch: ppo_max_token_len_per_gpu under dynamic batching, else the rows of
    ppo_micro_batch_size_per_gpu at the prompt and response caps (their padded size, at most)."""
    budget = get.value(f"{ACTOR}.ppo_max_token_len_per_gpu")
    rows = _rows_per_device(
        get, "learner.micro_batch_rows", f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{ACTOR}.ppo_micro_batch_size"
    )
    if get.value(f"{ACTOR}.use_dynamic_bsz") and isinstance(budget, int) and budget > 0:
        get.into("learner.micro_batch_tokens", f"{ACTOR}.use_dynamic_bsz")
        learner["micro_batch_tokens"] = get.into("learner.micro_batch_tokens", f"{ACTOR}.ppo_max_token_len_per_gpu")
    elif isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
        get.into("learner.micro_batch_tokens", f"{ACTOR}.ppo_micro_batch_size_per_gpu")
        length = get.integer("learner.micro_batch_tokens", "data.max_prompt_length", 512) + get.integer(
            "learner.micro_batch_tokens", "data.max_response_length", 512
        )
        learner["micro_batch_tokens"] = rows * length
        learner["micro_batch_rows"] = rows
        plan.source("learner.micro_batch_rows", f"{ACTOR}.ppo_micro_batch_size_per_gpu", rows)
        plan.notes.append(
            f"learner.micro_batch_tokens = {rows} rows × {length:,} tokens (the prompt and response caps): "
            "ppo_micro_batch_size_per_gpu without dynamic batching"
        )
    else:
        get.into("learner.micro_batch_tokens", f"{ACTOR}.use_dynamic_bsz", False)
        plan.notes.append("learner.micro_batch_tokens: neither dynamic batching nor a micro-batch size: the default")


def _rows_per_device(get: Reader, target: str, per_device: str, whole: str) -> Any:
    """A micro-batch's rows per device: verl's ``*_per_gpu`` key, or (verl before 2025) the key of the whole
    micro-batch over the training devices."""
    rows = get.value(per_device)
    if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
        return rows
    total = get.value(whole)
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        get.into(target, whole)
        devices = get.integer(target, "trainer.n_gpus_per_node", 8) * get.integer(target, "trainer.nnodes", 1)
        return max(1, total // devices)
    return rows


def _forward_micro_batch(get: Reader, learner: dict[str, Any]) -> None:
    """Rows of a no-grad pass's micro-batch (old log-probs): verl's log_prob_micro_batch_size_per_gpu, unless
    log-prob passes pack by tokens (log_prob_use_dynamic_bsz)."""
    if get.value("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz") or get.value(f"{ACTOR}.use_dynamic_bsz"):
        if get.is_given("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"):  # read, and left: packed
            get.into("learner.micro_batch_tokens", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
        return
    rows = _rows_per_device(
        get,
        "learner.forward_micro_batch_rows",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size",
    )
    if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
        get.into("learner.forward_micro_batch_rows", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
        learner["forward_micro_batch_rows"] = rows


def _phase_offload(get: Reader, megatron: bool) -> str:
    """What verl moves to the host between its phases: fsdp_config.param_offload (the weights) and
    optimizer_offload (Adam's states), or Megatron's param_offload and optimizer_offload."""
    section = f"{ACTOR}.megatron" if megatron else f"{ACTOR}.fsdp_config"
    params = bool(get.into("learner.phase_offload", f"{section}.param_offload", False))
    optimizer = bool(get.into("learner.phase_offload", f"{section}.optimizer_offload", False))
    return {(False, False): "none", (True, False): "params", (False, True): "optimizer"}.get(
        (params, optimizer), "both"
    )


def _model_parallel(get: Reader) -> int:
    """Devices sharing one sequence: Ulysses sequence parallelism (FSDP) or Megatron's TP × PP × CP."""
    if str(get.value(f"{ACTOR}.strategy", "")) == "megatron":
        keys = [f"{ACTOR}.megatron.{name}" for name in MEGATRON_PARALLEL]
        sizes = [get.into("learner.model_parallel", key) for key in keys if get.value(key) is not None]
        return math.prod(size for size in sizes if isinstance(size, int) and size > 0)
    ulysses = get.into("learner.model_parallel", f"{ACTOR}.ulysses_sequence_parallel_size", 1)
    return ulysses if isinstance(ulysses, int) and not isinstance(ulysses, bool) and ulysses > 1 else 1
