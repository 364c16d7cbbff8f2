"""A scenario from a NeMo-RL GRPO config: ``asyncrl from-nemo-rl``, and NeMo-RL's published runs.

    recipe.yaml ─(asyncrl/frameworks/nemo_rl/config.py: defaults merged, overrides, ${...} filled)─► plan_from_nemo_rl
        ─► ImportPlan: the scenario dict, each field with the NeMo-RL key it came from, what has no counterpart

Read from NeMo-RL (key names of ``examples/configs/grpo_math_1B.yaml`` and the performance recipes; a key
the config leaves out takes that file's default, listed in DEFAULTS):

    policy.model_name                                              the model (a preset, or a local config.json)
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
optimizer state only (``learner.sharding: zero1``). What the config does not say (the GPU, the lengths of
prompts and completions, a model that is neither a preset nor on this machine) is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks.common.importing import missing_inputs, model_section
from asyncrl.frameworks.common.provenance import ImportPlan

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
    "cluster.gpus_per_node": 1,
    "cluster.num_nodes": 1,
}
MODEL_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
#: NeMo-RL settings that shape a step's cost with no counterpart in a scenario (listed when set).
NO_COUNTERPART = {
    "policy.megatron_cfg.expert_model_parallel_size": "expert parallelism (the MoE learner's all-to-all is in mfu)",
    "policy.megatron_cfg.fp8_cfg.enabled": "an FP8 learner (the catalogue's peaks are bf16's)",
    "policy.generation.vllm_cfg.precision": "the engines' precision (model.dtype says the weights')",
    "policy.dtensor_cfg.enabled": "the DTensor (FSDP2) learner: planned as Megatron's",
    "grpo.use_dynamic_sampling": "dynamic sampling: generating more groups until enough have a reward spread",
}
#: Values of those settings that change nothing: not worth listing.
NEUTRAL = {"policy.generation.vllm_cfg.precision": "bfloat16"}
CAP = "policy.max_total_sequence_length"


def plan_from_nemo_rl(
    config: Mapping[str, Any],
    *,
    name: str,
    device: str | dict[str, Any] | None,
    completion_tokens: dict[str, Any] | None,
    prompt_tokens: dict[str, Any] | None,
    preset: str | None = None,
    model: dict[str, Any] | None = None,
) -> ImportPlan:
    """The scenario of one NeMo-RL run, ``config`` resolved; ``model`` (a scenario model section) instead of the
    one ``policy.model_name`` names. A ScenarioError lists every missing input at once."""
    plan = ImportPlan(scenario={"name": name, "framework": "nemo-rl"}, framework="NeMo-RL")
    get = _Reader(config, plan)
    path = str(get.value("policy.model_name") or "")
    missing = missing_inputs("NeMo-RL's config", "policy.model_name", path, device, completion_tokens, preset, CAP)
    if model is not None:  # given whole: no preset wanted
        missing = [line for line in missing if not line.startswith("preset:")]
    if prompt_tokens is None:
        missing.append(f"prompt_lengths: NeMo-RL caps only the whole sequence ({CAP}); give the prompt lengths")
    if missing:
        raise ScenarioError("\n".join(missing))
    plan.source("name", "--name", name)
    plan.source("framework", "(from-nemo-rl: NeMo-RL's fixed costs)", "nemo-rl")
    plan.scenario["model"] = model or model_section(plan, "policy.model_name", path, preset)
    plan.scenario["hardware"] = {"device": device}
    plan.source("hardware.device", "--device", device)
    _cluster_and_schedule(plan, get)
    assert prompt_tokens is not None and completion_tokens is not None
    _workload(plan, get, prompt_tokens, completion_tokens)
    _learner(plan, get)
    plan.unmapped += [
        (key, value, why)
        for key, why in NO_COUNTERPART.items()
        if (value := get.value(key)) not in (None, False, 1, NEUTRAL.get(key))
    ]
    return plan


class _Reader:
    def __init__(self, config: Mapping[str, Any], plan: ImportPlan) -> None:
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
        self.plan.source(target, key, value)
        return value

    def integer(self, target: str, key: str) -> int:
        value = self.into(target, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScenarioError(f"{key}: expected a positive integer, got {value!r}")
        return value

    def share(self, target: str, key: str) -> float:
        value = self.into(target, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ScenarioError(f"{key}: expected a share in (0, 1], got {value!r}")
        return float(value)


def _cluster_and_schedule(plan: ImportPlan, get: _Reader) -> None:
    devices = get.integer("cluster.training_devices", "cluster.gpus_per_node") * get.integer(
        "cluster.training_devices", "cluster.num_nodes"
    )
    cluster: dict[str, Any] = {
        "devices_per_engine": get.integer(
            "cluster.devices_per_engine", "policy.generation.vllm_cfg.tensor_parallel_size"
        ),
        "gpu_memory_utilization": get.share(
            "cluster.gpu_memory_utilization", "policy.generation.vllm_cfg.gpu_memory_utilization"
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


def _workload(plan: ImportPlan, get: _Reader, prompt: dict[str, Any], completion: dict[str, Any]) -> None:
    prompts = get.integer("workload.prompts_per_step", "grpo.num_prompts_per_step")
    group = get.integer("workload.samples_per_prompt", "grpo.num_generations_per_prompt")
    sequence_cap = get.integer("workload.completion_tokens.max_tokens", CAP)
    prompt_cap = int(prompt.get("max_tokens", prompt.get("value", 0)))
    if prompt_cap >= sequence_cap:
        raise ScenarioError(
            f"policy.max_total_sequence_length: {sequence_cap} leaves no room after {prompt_cap}-token prompts"
        )
    plan.source("workload.prompt_tokens", "--prompt-lengths", prompt)
    plan.source("workload.completion_tokens", "--lengths", completion)
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
    plan.source("algorithm.loss", "(GRPO: the recipe's algorithm)", "grpo")
    plan.scenario["algorithm"] = {
        "loss": "grpo",
        "updates_per_step": samples // batch,
        "extra_forward_passes": 1 + int(reference),
    }


def _learner(plan: ImportPlan, get: _Reader) -> None:
    parallel = 1
    for name in MODEL_PARALLEL:
        parallel *= get.integer("learner.model_parallel", f"policy.megatron_cfg.{name}")
    packed = get.value("policy.sequence_packing.train_mb_tokens")
    if packed is None:
        packed = get.value("policy.max_total_sequence_length") * get.value("policy.train_micro_batch_size")
    plan.source("learner.micro_batch_tokens", "policy.sequence_packing.train_mb_tokens", packed)
    plan.source("learner.sharding", "(Megatron's distributed optimizer)", "zero1")
    plan.source("learner.backend", "(Megatron-core training)", "megatron")
    stages = get.integer("learner.pipeline_stages", "policy.megatron_cfg.pipeline_model_parallel_size")
    plan.scenario["learner"] = {
        **({"pipeline_stages": stages} if stages > 1 else {}),
        "backend": "megatron",
        "sharding": "zero1",
        "model_parallel": parallel,
        "activation_checkpointing": bool(
            get.into("learner.activation_checkpointing", "policy.megatron_cfg.activation_checkpointing")
        ),
        "micro_batch_tokens": int(packed),
    }
