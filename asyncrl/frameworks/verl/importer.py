"""A scenario from a verl trainer config: plan the run you already launch.

    ppo_trainer.yaml (resolved Hydra config), or a recipe's launch script (its key=value lines, expanded)
        ─► key=value overrides (as verl's command line takes them)   (reading: asyncrl/frameworks/verl/config.py)
        ─► VerlPlan: the scenario dict, each field with the verl key (or flag) it came from,
                     the verl settings without a counterpart, the approximations made
        ─► validate_scenario ─► scenario.yaml, each field's line saying where it came from

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
    16 prompts per replica (fully async rollouter) × rollout.n  schedule.max_concurrency (fully async)
    actor_rollout_ref.rollout.gpu_memory_utilization            cluster.gpu_memory_utilization
    async_training.trigger_parameter_sync_step                  schedule.sync_every
    async_training.staleness_threshold                          schedule.staleness_threshold (verl's rule)
    async_training.partial_rollout                              schedule.in_flight_updates, kv_on_update: recompute
    rollout.total_rollout_steps (fully async), trainer.total_training_steps   run.steps
    actor.strategy, fsdp_config.{fsdp_size, dtype, offload_policy}, optim.optimizer   learner.sharding,
        shard_devices, param_dtype, param_offload and optimizer_offload, optimizer
    actor.ulysses_sequence_parallel_size, actor.megatron.{tensor,pipeline}_model_parallel_size,
        context_parallel_size                                   learner.model_parallel
    model.enable_gradient_checkpointing, megatron recompute_granularity   learner.activation_checkpointing
    actor.ppo_max_token_len_per_gpu (dynamic batching), ppo_micro_batch_size_per_gpu   learner.micro_batch_tokens
    Megatron's optimizer_cpu_offload                            learner.optimizer_offload
    algorithm.adv_estimator, actor.optim.lr, actor.clip_ratio (_low), actor.kl_loss_coef, rollout.temperature
    actor.grad_clip, algorithm.gamma, algorithm.lam, algorithm.norm_adv_by_std_in_grpo   the loss settings of the same names

What verl does not say (the GPU, the completion length distribution, a model that is not a
preset) is asked for; what asyncrl does not model is listed, never guessed.

This module holds the mapping of the cluster, schedule, workload and run; ``verl_learner.py`` maps the
algorithm and the learner, ``verl_config.py`` reads the config and the flags and reports the plan
(its names are importable from here).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from asyncrl.frameworks.common.importing import (
    guess_preset,
    lengths_option,
    missing_inputs,
    model_section,
    settle_concurrency,
)
from asyncrl.frameworks.verl.config import (
    Reader,
    VerlError,
    VerlInput,
    VerlPlan,
    check_value,
    lookup,
    plan_lines,
    read_config,
    read_verl,
)
from asyncrl.frameworks.verl.keys import NEUTRAL, NO_COUNTERPART
from asyncrl.frameworks.verl.learner import DTYPES, map_algorithm, map_learner

if TYPE_CHECKING:
    pass

__all__ = [  # the reading side lives in verl_config; importers use this module
    "VerlError",
    "VerlInput",
    "VerlPlan",
    "guess_preset",
    "lengths_option",
    "lookup",
    "plan_from_verl",
    "plan_lines",
    "read_config",
    "read_verl",
    "settle_concurrency",
]

#: Prompts the fully async rollouter runs at once per replica (``fully_async_rollouter.py``: 16, not a setting).
ASYNC_PROMPTS_PER_REPLICA = 16


def plan_from_verl(
    config: dict[str, Any],
    *,
    name: str,
    device: str | dict[str, Any] | None,
    completion_tokens: dict[str, Any] | None,
    prompt_tokens: dict[str, Any] | None = None,
    preset: str | None = None,
    given: set[str] | None = None,
    lengths_from: tuple[str, str] = ("--lengths", "--prompt-lengths"),
    device_from: str = "--device",
) -> VerlPlan:
    """The scenario a verl config describes; a VerlError listing every missing piece at once. ``given``: the keys
    the config or script set (the others are verl's defaults, and the plan says so); ``lengths_from``: what
    the completion and prompt lengths came from (the flags, or a log); ``device_from``: what named the device."""
    plan = VerlPlan(scenario={"name": name, "framework": "verl"})
    path_value = lookup(config, "actor_rollout_ref.model.path", "")
    check_value("actor_rollout_ref.model.path", path_value)
    path = str(path_value)
    cap = "data.max_response_length"
    missing = missing_inputs(
        "verl's config", "actor_rollout_ref.model.path", path, device, completion_tokens, preset, cap
    )
    if missing:
        raise VerlError("\n".join(missing))
    get = Reader(config, plan, given)
    named = lookup(config, "trainer.experiment_name")
    plan.source("name", "trainer.experiment_name" if named == name else "--name (or the file's name)", name)
    plan.source("framework", "(from-verl: verl's fixed costs)", "verl")
    _model(plan, get, preset)
    plan.scenario["hardware"] = {"device": device}
    plan.source("hardware.device", device_from, device)
    _cluster_and_schedule(plan, get)
    _workload(plan, get, completion_tokens, prompt_tokens)
    plan.source("workload.completion_tokens", lengths_from[0], completion_tokens)
    if prompt_tokens is not None:
        plan.source("workload.prompt_tokens", lengths_from[1], prompt_tokens)
    map_algorithm(plan, get)
    map_learner(plan, get)
    _concurrency(plan, get)
    _run(plan, get)
    plan.unmapped = [
        (key, lookup(config, key), why)
        for key, why in NO_COUNTERPART.items()
        if get.is_given(key) and _matters(config, key)
    ]
    return plan


def _matters(config: dict[str, Any], key: str) -> bool:
    """A setting worth listing: set, and not off or neutral (dynamic batching's token budget only with it on)."""
    value = lookup(config, key)
    if value in (None, "", False) or value == NEUTRAL.get(key, object()):
        return False
    if key.startswith("actor_rollout_ref.actor.megatron."):
        return str(lookup(config, "actor_rollout_ref.actor.strategy", "")) == "megatron"
    if key.startswith("actor_rollout_ref.actor.fsdp_config."):
        return str(lookup(config, "actor_rollout_ref.actor.strategy", "fsdp")) != "megatron"
    if key == "actor_rollout_ref.actor.clip_ratio_high":
        return value != lookup(config, "actor_rollout_ref.actor.clip_ratio_low", value)
    return True


def _model(plan: VerlPlan, get: Reader, preset: str | None) -> None:
    path = str(get.value("actor_rollout_ref.model.path", ""))
    model = model_section(plan, "actor_rollout_ref.model.path", path, preset)
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
    memory = _engine_memory(get)
    memory["enforce_eager"] = bool(get.into("cluster.enforce_eager", "actor_rollout_ref.rollout.enforce_eager", False))
    sleeps = bool(get.into("cluster.free_cache_engine", "actor_rollout_ref.rollout.free_cache_engine", True))
    if hybrid or not recipe:  # (a split pool's engines never sleep: they have no learner to make room for)
        memory["free_cache_engine"] = sleeps
        plan.source("schedule.kind", "actor_rollout_ref.hybrid_engine", hybrid)
        if not hybrid:
            plan.notes.append(
                "actor_rollout_ref.hybrid_engine is false but no rollout.n_gpus_per_node (recipe) is set: "
                "planned as colocated"
            )
        plan.source(
            "cluster.generation_devices", "trainer.n_gpus_per_node × nnodes (colocated: the same devices)", trainer
        )
        plan.scenario["cluster"] = {
            "generation_devices": trainer,
            "training_devices": trainer,
            "devices_per_engine": tp,
            "colocated": True,
            **memory,
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
        **memory,
    }
    if get.value("async_training") is not None:
        plan.source("schedule.kind", "async_training (the fully async recipe)", "streaming")
        plan.scenario["schedule"] = _fully_async(plan, get)
        return
    one_step_off = "rollout.n_gpus_per_node (the one step off recipe)"
    plan.source("schedule.kind", one_step_off, "pipelined")
    plan.source("schedule.off_policy_steps", one_step_off, "one step off")
    plan.scenario["schedule"] = {"kind": "pipelined", "off_policy_steps": 1}


def _engine_memory(get: Reader) -> dict[str, float | bool]:
    """vLLM's share of each generation device (the KV cache it leaves bounds the rollouts in flight)."""
    share = get.into("cluster.gpu_memory_utilization", "actor_rollout_ref.rollout.gpu_memory_utilization")
    if share is None:
        return {}
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise VerlError(f"actor_rollout_ref.rollout.gpu_memory_utilization: expected a share in (0, 1], got {share!r}")
    return {"gpu_memory_utilization": float(share)}


def _fully_async(plan: VerlPlan, get: Reader) -> dict[str, Any]:
    """Streaming under verl's rules: weights reach the engines every trigger_parameter_sync_step local updates;
    an engine starts groups up to (1 + staleness_threshold) sync windows past its weights; partial rollout
    moves unfinished rollouts to the new weights (``verl/experimental/fully_async_policy``)."""
    every = get.integer("schedule.sync_every", "async_training.trigger_parameter_sync_step", 4)
    threshold = float(get.into("schedule.staleness_threshold", "async_training.staleness_threshold", 0.1))
    if threshold < 0:
        raise VerlError(f"async_training.staleness_threshold: {threshold} is negative")
    bound = math.ceil(every * (1 + threshold)) + every
    plan.source(
        "schedule.max_staleness",
        "async_training.trigger_parameter_sync_step k, staleness_threshold t",
        f"⌈k(1 + t)⌉ + k = {bound}",
    )
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
        plan.source("schedule.kv_on_update", "async_training.partial_rollout", True)
        plan.notes.append(
            "partial rollout: at each sync verl aborts the running requests, clears the engines' prefix cache and "
            "later sends each again with its tokens so far, which the engine prefills under the new weights "
            "(schedule.kv_on_update: recompute)"
        )
        return {**schedule, "in_flight_updates": True, "kv_on_update": "recompute"}
    plan.notes.append(
        "no partial rollout: at each sync an engine stops starting groups, finishes what runs, then loads "
        "(schedule.refresh: drain)"
    )
    plan.source("schedule.refresh", "async_training.partial_rollout", partial)
    return {**schedule, "refresh": "drain", "refresh_every": every}


def _workload(plan: VerlPlan, get: Reader, completion: dict[str, Any] | None, prompt: dict[str, Any] | None) -> None:
    group = get.integer("workload.samples_per_prompt", "actor_rollout_ref.rollout.n", 1)
    if get.value("async_training"):
        batches = get.integer("workload.prompts_per_step", "async_training.require_batches", 1)
        prompts = batches * get.integer("workload.prompts_per_step", "actor_rollout_ref.actor.ppo_mini_batch_size")
        plan.notes.append(
            "fully async: a learner step is one local update of require_batches × ppo_mini_batch_size "
            f"(data.train_batch_size, {get.value('data.train_batch_size')} here, is not the trainer's batch)"
        )
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
    16 prompts per replica (``fully_async_rollouter.py``, not a setting). What the
    KV cache holds may be fewer: ``settle_concurrency`` lowers it once the scenario's lengths are known."""
    if plan.scenario["schedule"].get("kind") == "streaming":
        group = plan.scenario["workload"]["samples_per_prompt"]
        plan.source(
            "schedule.max_concurrency",
            "verl's fully async rollouter (16 prompts per replica, not a setting) × actor_rollout_ref.rollout.n",
            f"{ASYNC_PROMPTS_PER_REPLICA} × {group}",
        )
        plan.scenario["schedule"]["max_concurrency"] = ASYNC_PROMPTS_PER_REPLICA * group
        return
    sequences = get.value("actor_rollout_ref.rollout.max_num_seqs")
    if isinstance(sequences, int) and not isinstance(sequences, bool) and sequences > 0:
        plan.scenario["schedule"]["max_concurrency"] = get.into(
            "schedule.max_concurrency", "actor_rollout_ref.rollout.max_num_seqs"
        )


def _run(plan: VerlPlan, get: Reader) -> None:
    """Learner steps: trainer.total_training_steps, or the fully async rollouter's total_rollout_steps (prompts)
    over the prompts of a learner step; 100 when the dataset decides."""
    steps = get.value("trainer.total_training_steps")
    prompts = get.value("rollout.total_rollout_steps")
    if isinstance(steps, int) and steps > 0:
        plan.scenario["run"] = {"steps": get.integer("run.steps", "trainer.total_training_steps")}
    elif get.value("async_training") is not None and isinstance(prompts, int) and prompts > 0:
        batch = plan.scenario["workload"]["prompts_per_step"]
        plan.scenario["run"] = {
            "steps": max(1, math.ceil(get.integer("run.steps", "rollout.total_rollout_steps") / batch))
        }
        plan.notes.append(
            f"run.steps = ⌈rollout.total_rollout_steps / prompts per learner step⌉ = ⌈{prompts} / {batch}⌉ (at most: "
            "the dataset × trainer.total_epochs may end it sooner)"
        )
    else:
        plan.source("run.steps", "trainer.total_training_steps", steps)
        plan.notes.append("run.steps: trainer.total_training_steps is unset (it follows the dataset): 100 steps")
        plan.scenario["run"] = {"steps": 100}
