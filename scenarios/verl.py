"""A scenario from a verl trainer config: plan the run you already launch.

    ppo_trainer.yaml (resolved Hydra config) ─► key=value overrides (as verl's command line takes them)
        ─► VerlPlan: the scenario dict, each field with the verl key it came from,
                     the verl settings without a counterpart, the approximations made
        ─► validate_scenario ─► scenario.yaml

Read from verl (the key names of ``verl/trainer/config/ppo_trainer.yaml`` and of the
``one_step_off_policy`` and ``fully_async_policy`` recipes):

    data.train_batch_size                                       workload.prompts_per_step
    actor_rollout_ref.rollout.n                                 workload.samples_per_prompt
    data.max_prompt_length, data.max_response_length            the prompt and completion caps
    trainer.n_gpus_per_node × trainer.nnodes                    devices (training devices for the recipes)
    rollout.n_gpus_per_node × rollout.nnodes (recipes)          generation devices
    actor_rollout_ref.rollout.tensor_model_parallel_size        cluster.devices_per_engine
    actor_rollout_ref.hybrid_engine                             cluster.colocated, schedule sync
    async_training.* (fully async recipe)                       schedule streaming
    actor_rollout_ref.actor.ppo_epochs, ppo_mini_batch_size     algorithm.updates_per_step, extra_forward_passes
    actor_rollout_ref.rollout.max_num_seqs                      schedule.max_concurrency (at most what fits)
    async_training.concurrent_samples_per_replica × rollout.n   schedule.max_concurrency (fully async)
    async_training.trigger_parameter_sync_step                  schedule.sync_every
    async_training.staleness_threshold                          schedule.staleness_threshold (verl's rule)
    async_training.partial_rollout                              schedule.in_flight_updates
    actor.fsdp_config.fsdp_size, actor.ulysses_sequence_parallel_size   learner.shard_devices, model_parallel
    model.enable_gradient_checkpointing, actor.ppo_max_token_len_per_gpu   learner.activation_checkpointing,
                                                                 micro_batch_tokens
    algorithm.adv_estimator, actor.optim.lr, actor.clip_ratio, actor.kl_loss_coef, rollout.temperature
    actor.grad_clip, algorithm.gamma, algorithm.lam, algorithm.norm_adv_by_std_in_grpo   the loss settings of the same names

What verl does not say (the GPU, the completion length distribution, a model that is not a
preset) is asked for; what asyncrl does not model is listed, never guessed.

This module holds the mapping of the cluster, schedule, workload and run; ``verl_learner.py`` maps the
algorithm and the learner, ``verl_config.py`` reads the config and the flags and reports the plan
(its names are importable from here).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.catalog import MODEL_PRESETS
from asyncrl.scenarios.memory import rollouts_that_fit
from asyncrl.scenarios.model_config import config_path
from asyncrl.scenarios.verl_config import (
    Reader,
    VerlError,
    VerlPlan,
    lengths_option,
    lookup,
    plan_lines,
    read_config,
)
from asyncrl.scenarios.verl_learner import map_algorithm, map_learner

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import Scenario

__all__ = [  # the reading side lives in verl_config; importers use this module
    "VerlError",
    "VerlPlan",
    "guess_preset",
    "lengths_option",
    "lookup",
    "plan_from_verl",
    "plan_lines",
    "read_config",
    "settle_concurrency",
]

#: Prompts the fully async rollouter runs at once per replica (async_training.concurrent_samples_per_replica).
ASYNC_PROMPTS_PER_REPLICA = 16
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32", "fp32": "fp32"}
#: verl settings that shape cost or behaviour but have no counterpart in a scenario.
NO_COUNTERPART = {
    "actor_rollout_ref.actor.strategy": "FSDP or FSDP2 alike (a Megatron learner: set learner.model_parallel)",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "verl frees the weights only between phases: in the "
    "calibrated colocated switch (switch_s), not in the memory check",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "verl frees the optimizer only between phases: in the "
    "calibrated colocated switch (switch_s), not in the memory check",
    "actor_rollout_ref.actor.loss_agg_mode": "loss aggregation (the executor averages per token)",
    "actor_rollout_ref.actor.entropy_coeff": "entropy bonus",
    "actor_rollout_ref.model.lora_rank": "LoRA",
    "actor_rollout_ref.rollout.name": "the inference engine (vLLM, SGLang): its speed is the calibrated decode terms",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "asyncrl gives an engine 90% of device memory",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "prefill chunking",
    "actor_rollout_ref.rollout.free_cache_engine": "freeing the KV cache between phases",
    "reward_model.enable": "a reward model's forward pass",
    "trainer.total_epochs": "epochs over a dataset whose size the config does not give",
    "data.train_files": "the dataset",
}
#: Values of those settings that change nothing (off, none, one-way parallelism): not worth listing.
NEUTRAL = {
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.model.lora_rank": 0,
}


def plan_from_verl(
    config: dict[str, Any],
    *,
    name: str,
    device: str | None,
    completion_tokens: dict[str, Any] | None,
    prompt_tokens: dict[str, Any] | None = None,
    preset: str | None = None,
) -> VerlPlan:
    """The scenario a verl config describes; a VerlError listing every missing piece at once."""
    plan = VerlPlan(scenario={"name": name})
    missing = _missing_inputs(config, device, completion_tokens, preset)
    if missing:
        raise VerlError("\n".join(missing))
    get = Reader(config, plan)
    _model(plan, get, preset)
    plan.scenario["hardware"] = {"device": device}
    _cluster_and_schedule(plan, get)
    _workload(plan, get, completion_tokens, prompt_tokens)
    map_algorithm(plan, get)
    map_learner(plan, get)
    _concurrency(plan, get)
    _run(plan, get)
    plan.unmapped = [(key, lookup(config, key), why) for key, why in NO_COUNTERPART.items() if _matters(config, key)]
    return plan


def _matters(config: dict[str, Any], key: str) -> bool:
    """A setting worth listing: set, and not off or neutral (dynamic batching's token budget only with it on)."""
    value = lookup(config, key)
    if value in (None, "", False) or value == NEUTRAL.get(key, object()):
        return False
    if key == "actor_rollout_ref.actor.ppo_max_token_len_per_gpu":
        return bool(lookup(config, "actor_rollout_ref.actor.use_dynamic_bsz"))
    return True


def _missing_inputs(
    config: dict[str, Any], device: str | None, completion_tokens: dict[str, Any] | None, preset: str | None
) -> list[str]:
    """What verl's config cannot give and the arguments must (each named: ``preset: ...``), all at once."""
    missing = []
    path = str(lookup(config, "actor_rollout_ref.model.path", ""))
    if preset is None and guess_preset(path) is None and config_path(Path(path)) is None:
        missing.append(
            f"preset: actor_rollout_ref.model.path {path or '(unset)'} is not a model preset, nor a checkpoint "
            "with a config.json on this machine; give the closest preset (asyncrl list shows them)"
        )
    if device is None:
        missing.append("device: verl's config does not say which GPU; give one (h100, a100-80g, h200, ...)")
    if completion_tokens is None:
        missing.append(
            "lengths: verl's config gives only the cap (data.max_response_length); give the completion lengths "
            "(a lengths file, a JSONL log, a verl metrics log, or e.g. '{kind: lognormal, median: 800, sigma: 1}')"
        )
    return missing


#: Words of a fine-tuned variant's name that leave its architecture as the base model's (Qwen2.5-Math-7B
#: has Qwen2.5-7B's layers, widths and vocabulary).
VARIANT_WORDS = ("-math", "-coder", "-instruct", "-chat", "-base")


def guess_preset(model_path: str) -> str | None:
    """The longest preset name inside the model's name, variant words left out
    (``Qwen/Qwen2.5-7B-Instruct`` and ``Qwen/Qwen2.5-Math-7B`` → ``qwen2.5-7b``)."""
    name = Path(model_path.rstrip("/")).name.lower()
    for word in VARIANT_WORDS:
        name = name.replace(word, "")
    found = [preset for preset in MODEL_PRESETS if preset != "tiny" and preset in name]
    return max(found, key=len) if found else None


def _model(plan: VerlPlan, get: Reader, preset: str | None) -> None:
    """The model: ``--preset`` if given, else the checkpoint's own config.json where it is on this machine (a
    directory, or a hub name in the local cache: ``scenarios.model_config``), else the preset its name names."""
    path = get.value("actor_rollout_ref.model.path")
    model: dict[str, Any]
    if preset is not None:
        plan.sources.append(("model.preset", "--preset", preset))
        model = {"preset": preset}
    elif config_path(Path(str(path))) is not None:
        plan.sources.append(("model.path", "actor_rollout_ref.model.path (its config.json)", path))
        model = {"path": str(path)}
    else:
        plan.sources.append(("model.preset", "actor_rollout_ref.model.path", path))
        model = {"preset": guess_preset(str(path))}
    dtype = get.into("model.dtype", "actor_rollout_ref.rollout.dtype", "bfloat16", lambda v: DTYPES.get(str(v)))
    plan.scenario["model"] = {**model, **({"dtype": dtype} if dtype else {})}


def _cluster_and_schedule(plan: VerlPlan, get: Reader) -> None:
    """Hybrid engine: colocated sync. The recipes: a split, pipelined (one step off) or streaming (fully async)."""
    trainer = get.integer("cluster.training_devices", "trainer.n_gpus_per_node", 8) * get.integer(
        "cluster.training_devices", "trainer.nnodes", 1
    )
    tp = get.integer("cluster.devices_per_engine", "actor_rollout_ref.rollout.tensor_model_parallel_size", 1)
    hybrid = bool(get.into("cluster.colocated", "actor_rollout_ref.hybrid_engine", True))
    recipe = get.value("rollout.n_gpus_per_node") is not None
    if hybrid or not recipe:
        if not hybrid:
            plan.notes.append(
                "actor_rollout_ref.hybrid_engine is false but no rollout.n_gpus_per_node (recipe) is set: "
                "planned as colocated"
            )
        plan.scenario["cluster"] = {
            "generation_devices": trainer,
            "training_devices": trainer,
            "devices_per_engine": tp,
            "colocated": True,
        }
        plan.scenario["schedule"] = {"kind": "sync"}
        return
    generation = get.integer("cluster.generation_devices", "rollout.n_gpus_per_node") * get.integer(
        "cluster.generation_devices", "rollout.nnodes", 1
    )
    plan.scenario["cluster"] = {
        "generation_devices": generation,
        "training_devices": trainer,
        "devices_per_engine": tp,
    }
    plan.scenario["schedule"] = (
        _fully_async(plan, get)
        if get.value("async_training")
        else {
            "kind": "pipelined",
            "off_policy_steps": 1,
        }
    )


def _fully_async(plan: VerlPlan, get: Reader) -> dict[str, Any]:
    """Streaming under verl's rules: weights reach the engines every trigger_parameter_sync_step local updates;
    an engine starts groups up to (1 + staleness_threshold) sync windows past its weights; partial rollout
    moves unfinished rollouts to the new weights (``verl/experimental/fully_async_policy``)."""
    every = get.integer("schedule.sync_every", "async_training.trigger_parameter_sync_step", 4)
    threshold = float(get.into("schedule.staleness_threshold", "async_training.staleness_threshold", 0.1))
    if threshold < 0:
        raise VerlError(f"async_training.staleness_threshold: {threshold} is negative")
    bound = math.ceil(every * (1 + threshold)) + every
    plan.notes.append(
        f"schedule.max_staleness = ⌈trigger_parameter_sync_step × (1 + staleness_threshold)⌉ + "
        f"trigger_parameter_sync_step = {bound}: verl drops no sample; the bound only catches a straggler "
        "a sync window late"
    )
    schedule: dict[str, Any] = {
        "kind": "streaming",
        "max_staleness": bound,
        "sync_every": every,
        "staleness_threshold": threshold,
    }
    partial = bool(get.into("schedule.in_flight_updates", "async_training.partial_rollout", True))
    if partial and threshold > 0:  # verl: partial rollout only acts with a threshold
        return {**schedule, "in_flight_updates": True}
    plan.notes.append(
        "no partial rollout: at each sync an engine stops starting groups, finishes what runs, then loads "
        "(schedule.refresh: drain)"
    )
    return {**schedule, "refresh": "drain", "refresh_every": every}


def _workload(plan: VerlPlan, get: Reader, completion: dict[str, Any] | None, prompt: dict[str, Any] | None) -> None:
    group = get.integer("workload.samples_per_prompt", "actor_rollout_ref.rollout.n", 1)
    if get.value("async_training"):
        batches = get.integer("workload.prompts_per_step", "async_training.require_batches", 1)
        prompts = batches * get.integer("workload.prompts_per_step", "actor_rollout_ref.actor.ppo_mini_batch_size")
        plan.notes.append("fully async: a learner step is one local update of require_batches × ppo_mini_batch_size")
    else:
        prompts = get.integer("workload.prompts_per_step", "data.train_batch_size")
    prompt_cap = get.integer("workload.prompt_tokens", "data.max_prompt_length", 512)
    response_cap = get.integer("workload.completion_tokens.max_tokens", "data.max_response_length", 512)
    if prompt is None:
        plan.notes.append(
            f"workload.prompt_tokens: every prompt taken at the cap, data.max_prompt_length = {prompt_cap} "
            "(give --prompt-lengths for the real ones)"
        )
        prompt = {"kind": "fixed", "value": prompt_cap}
    plan.scenario["workload"] = {
        "prompts_per_step": prompts,
        "samples_per_prompt": group,
        "prompt_tokens": _capped(prompt, prompt_cap),
        "completion_tokens": _capped(completion or {}, response_cap),
    }


def _capped(lengths: dict[str, Any], cap: int) -> dict[str, Any]:
    """The distribution with verl's cap as max_tokens (unless it names its own)."""
    return {**lengths, "max_tokens": lengths.get("max_tokens", cap)}


def _concurrency(plan: VerlPlan, get: Reader) -> None:
    """Rollouts an engine runs at once: vLLM's max_num_seqs, or the fully async rollouter's cap of
    concurrent_samples_per_replica prompts per replica (``fully_async_rollouter``: 16 by default). What the
    KV cache holds may be fewer: ``settle_concurrency`` lowers it once the scenario's lengths are known."""
    if plan.scenario["schedule"].get("kind") == "streaming":
        prompts = get.integer(
            "schedule.max_concurrency", "async_training.concurrent_samples_per_replica", ASYNC_PROMPTS_PER_REPLICA
        )
        plan.scenario["schedule"]["max_concurrency"] = prompts * plan.scenario["workload"]["samples_per_prompt"]
        return
    sequences = get.value("actor_rollout_ref.rollout.max_num_seqs")
    if isinstance(sequences, int) and not isinstance(sequences, bool) and sequences > 0:
        plan.scenario["schedule"]["max_concurrency"] = get.into(
            "schedule.max_concurrency", "actor_rollout_ref.rollout.max_num_seqs"
        )


def settle_concurrency(plan: VerlPlan, scenario: Scenario) -> bool:
    """Lower ``schedule.max_concurrency`` to the rollouts whose KV cache fits (vLLM admits no more); True when
    it changed the plan (validate the scenario again)."""
    wanted = plan.scenario["schedule"].get("max_concurrency")
    if wanted is None:
        return False
    model = scenario.model
    fits = rollouts_that_fit(
        model.weight_bytes,
        model.kv_bytes_per_token,
        scenario.hardware.spec.memory_bytes,
        scenario.cluster.devices_per_engine,
        scenario.expected_rollout_tokens,
        limit=wanted,
    )
    if fits >= wanted:
        return False
    group = scenario.workload.samples_per_prompt
    plan.scenario["schedule"]["max_concurrency"] = max(group, fits)
    plan.notes.append(
        f"schedule.max_concurrency = {max(group, fits)}: verl allows {wanted} rollouts per engine, its KV cache holds "
        f"{fits} of {scenario.expected_rollout_tokens:,.0f} tokens on average"
    )
    return True


def _run(plan: VerlPlan, get: Reader) -> None:
    steps = get.value("trainer.total_training_steps")
    if isinstance(steps, int) and steps > 0:
        plan.scenario["run"] = {"steps": get.integer("run.steps", "trainer.total_training_steps")}
    else:
        plan.notes.append("run.steps: trainer.total_training_steps is unset (it follows the dataset): 100 steps")
        plan.scenario["run"] = {"steps": 100}
