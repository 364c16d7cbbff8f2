"""A scenario from a NeMo-RL GRPO config: the runs of NeMo-RL's performance recipes, as asyncrl plans them.

    recipe.yaml ─(its ``defaults:`` chain merged, ``${...}`` filled: a resolved config)─► plan_from_nemo_rl
        ─► the scenario dict, and per field the NeMo-RL key it came from (``sources``)

Read from NeMo-RL (key names of ``examples/configs/grpo_math_1B.yaml`` and the performance recipes; a key
the config leaves out takes that file's default, listed in DEFAULTS):

    grpo.num_prompts_per_step, grpo.num_generations_per_prompt     workload.prompts_per_step, samples_per_prompt
    policy.train_global_batch_size                                 algorithm.updates_per_step (samples / this)
    policy.max_total_sequence_length                               the cap of prompt + completion
    cluster.num_nodes × cluster.gpus_per_node                      all devices (the devices that share NVLink are
                                                                   the device's node: 8 on a DGX, 72 on a GB200 NVL72)
    policy.generation.colocated.enabled                            cluster.colocated: sync on every device
    policy.generation.colocated.resources.*                        the generation pool; the rest train
    policy.generation.vllm_cfg.tensor_parallel_size                cluster.devices_per_engine
    policy.generation.vllm_cfg.gpu_memory_utilization              cluster.gpu_memory_utilization
    grpo.async_grpo.max_trajectory_age_steps                       schedule streaming, max_staleness
    grpo.async_grpo.in_flight_weight_updates                       schedule.in_flight_updates
    policy.megatron_cfg.{tensor,pipeline,context}_model_parallel_size   learner.model_parallel (their product)
    policy.megatron_cfg.activation_checkpointing                   learner.activation_checkpointing
    policy.sequence_packing.train_mb_tokens                        learner.micro_batch_tokens
    loss_fn.reference_policy_kl_penalty                            extra_forward_passes: the previous policy's
                                                                   log-probs, and the reference's unless 0

NeMo-RL's async GRPO (``nemo_rl/algorithms/async_utils.py``) generates each group for a target weight
version at most ``max_trajectory_age_steps`` ahead of the trainer's and trains it at that version: AReaL's
admission rule with η = the age, which is asyncrl's ``streaming``. Megatron's distributed optimizer shards the
optimizer state only (``learner.sharding: zero1``). What the config does not say (the GPU, the lengths, a
model that is not a preset) is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from asyncrl.scenarios.errors import ScenarioError

#: grpo_math_1B.yaml's values of the keys read here, where a recipe leaves them out.
DEFAULTS: dict[str, Any] = {
    "grpo.async_grpo.enabled": False,
    "grpo.async_grpo.max_trajectory_age_steps": 1,
    "grpo.async_grpo.in_flight_weight_updates": False,
    "policy.train_global_batch_size": 512,
    "policy.train_micro_batch_size": 4,
    "policy.generation.colocated.enabled": True,
    "policy.generation.vllm_cfg.tensor_parallel_size": 1,
    "policy.generation.vllm_cfg.gpu_memory_utilization": 0.6,
    "policy.megatron_cfg.tensor_model_parallel_size": 1,
    "policy.megatron_cfg.pipeline_model_parallel_size": 1,
    "policy.megatron_cfg.context_parallel_size": 1,
    "policy.megatron_cfg.activation_checkpointing": False,
    "loss_fn.reference_policy_kl_penalty": 0.01,
    "cluster.gpus_per_node": 8,
    "cluster.num_nodes": 1,
}
MODEL_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


@dataclass
class NemoRlPlan:
    """The scenario a NeMo-RL config describes, and where each field came from."""

    scenario: dict[str, Any]
    sources: list[tuple[str, str, Any]] = field(default_factory=list)


class _Reader:
    def __init__(self, config: Mapping[str, Any], plan: NemoRlPlan) -> None:
        self.config, self.plan = config, plan

    def value(self, key: str) -> Any:
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return DEFAULTS.get(key)
            node = node[part]
        return node

    def into(self, target: str, key: str) -> Any:
        value = self.value(key)
        self.plan.sources.append((target, key, value))
        return value

    def integer(self, target: str, key: str) -> int:
        value = self.into(target, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScenarioError(f"{key}: expected a positive integer, got {value!r}")
        return value


def plan_from_nemo_rl(
    config: Mapping[str, Any],
    *,
    name: str,
    model: dict[str, Any],
    device: str,
    prompt_tokens: dict[str, Any],
    completion_tokens: dict[str, Any],
) -> NemoRlPlan:
    """The scenario of one NeMo-RL run: ``config`` resolved, ``model`` a scenario model section, the lengths
    distributions without their caps (the sequence cap less the longest prompt caps the completions)."""
    plan = NemoRlPlan(scenario={"name": name, "model": model, "hardware": {"device": device}})
    get = _Reader(config, plan)
    _cluster_and_schedule(plan, get)
    _workload(plan, get, prompt_tokens, completion_tokens)
    _learner(plan, get)
    return plan


def _cluster_and_schedule(plan: NemoRlPlan, get: _Reader) -> None:
    devices = get.integer("cluster", "cluster.gpus_per_node") * get.integer("cluster", "cluster.num_nodes")
    cluster: dict[str, Any] = {
        "devices_per_engine": get.integer(
            "cluster.devices_per_engine", "policy.generation.vllm_cfg.tensor_parallel_size"
        ),
        "gpu_memory_utilization": float(
            get.into("cluster.gpu_memory_utilization", "policy.generation.vllm_cfg.gpu_memory_utilization")
        ),
    }
    if get.into("cluster.colocated", "policy.generation.colocated.enabled"):
        plan.scenario["cluster"] = {"generation_devices": devices, "training_devices": devices, "colocated": True}
    else:
        resources = "policy.generation.colocated.resources"
        generation = get.integer("cluster.generation_devices", f"{resources}.num_nodes") * get.integer(
            "cluster.generation_devices", f"{resources}.gpus_per_node"
        )
        if generation >= devices:
            raise ScenarioError(f"{resources}: {generation} generation devices leave none of the {devices} to train")
        plan.scenario["cluster"] = {"generation_devices": generation, "training_devices": devices - generation}
    plan.scenario["cluster"] |= cluster
    if get.into("schedule.kind", "grpo.async_grpo.enabled"):
        plan.scenario["schedule"] = {
            "kind": "streaming",
            "max_staleness": get.integer("schedule.max_staleness", "grpo.async_grpo.max_trajectory_age_steps"),
            "in_flight_updates": bool(
                get.into("schedule.in_flight_updates", "grpo.async_grpo.in_flight_weight_updates")
            ),
        }
    else:
        plan.scenario["schedule"] = {"kind": "sync"}


def _workload(plan: NemoRlPlan, get: _Reader, prompt: dict[str, Any], completion: dict[str, Any]) -> None:
    prompts = get.integer("workload.prompts_per_step", "grpo.num_prompts_per_step")
    group = get.integer("workload.samples_per_prompt", "grpo.num_generations_per_prompt")
    sequence_cap = get.integer("workload.completion_tokens.max_tokens", "policy.max_total_sequence_length")
    prompt_cap = int(prompt.get("max_tokens", prompt.get("value", 0)))
    if prompt_cap >= sequence_cap:
        raise ScenarioError(
            f"policy.max_total_sequence_length: {sequence_cap} leaves no room after {prompt_cap}-token prompts"
        )
    plan.scenario["workload"] = {
        "prompts_per_step": prompts,
        "samples_per_prompt": group,
        "prompt_tokens": prompt,
        "completion_tokens": {**completion, "max_tokens": sequence_cap - prompt_cap},
    }
    samples = prompts * group
    batch = get.integer("algorithm.updates_per_step", "policy.train_global_batch_size")
    if samples % batch:
        raise ScenarioError(f"policy.train_global_batch_size: {batch} does not divide the {samples} samples of a step")
    reference = bool(get.into("algorithm.extra_forward_passes", "loss_fn.reference_policy_kl_penalty"))
    plan.scenario["algorithm"] = {
        "loss": "grpo",
        "updates_per_step": samples // batch,
        "extra_forward_passes": 1 + int(reference),
    }


def _learner(plan: NemoRlPlan, get: _Reader) -> None:
    parallel = 1
    for name in MODEL_PARALLEL:
        parallel *= get.integer("learner.model_parallel", f"policy.megatron_cfg.{name}")
    packed = get.value("policy.sequence_packing.train_mb_tokens")
    if packed is None:
        packed = get.value("policy.max_total_sequence_length") * get.value("policy.train_micro_batch_size")
    plan.sources.append(("learner.micro_batch_tokens", "policy.sequence_packing.train_mb_tokens", packed))
    plan.scenario["learner"] = {
        "sharding": "zero1",
        "model_parallel": parallel,
        "activation_checkpointing": bool(
            get.into("learner.activation_checkpointing", "policy.megatron_cfg.activation_checkpointing")
        ),
        "micro_batch_tokens": int(packed),
    }
