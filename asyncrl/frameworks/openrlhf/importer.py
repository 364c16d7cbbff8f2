"""A scenario from OpenRLHF's launch flags: ``asyncrl from-openrlhf``.

    flags (asyncrl/frameworks/openrlhf/flags.py) ─► plan_from_openrlhf ─► ImportPlan (scenario, each field's flag,
                                                                    what has no counterpart, what is approximated)

What OpenRLHF's PPO trainer (``openrlhf/cli/train_ppo_ray.py``, ``openrlhf/trainer/ppo_trainer_async.py``,
v0.9.9) does, and the scenario it is:

    --actor_num_nodes × --actor_num_gpus_per_node          cluster.training_devices (DeepSpeed learner)
    --vllm_num_engines × --vllm_tensor_parallel_size        cluster.generation_devices, devices_per_engine
    --vllm_gpu_memory_utilization                           cluster.gpu_memory_utilization
    --colocate_all_models (without --async_train)          colocated sync (the engines on the actor's GPUs)
    neither                                                 sync on separate pools (generation waits for training)
    --async_train, --async_queue_size q                    pipelined, q batches off policy: the generator runs q
                                                            batches ahead, holding the engines while it generates
    --partial_rollout                                       streaming, η = q, in-flight weight updates (KV recomputed)
    --rollout_batch_size, --n_samples_per_prompt            workload.prompts_per_step, samples_per_prompt
    --train_batch_size (samples), --max_epochs              algorithm.updates_per_step
    --generate_max_len / --max_new_tokens, --prompt_max_len / --max_len   the completion and prompt caps
    --zero_stage, --param_dtype (--bf16), --grad_accum_dtype, --adam_offload, --gradient_checkpointing,
    --train_max_tokens_per_gpu (--use_dynamic_batch), --ring_attn_size × --ds_tensor_parallel_size   learner
    --advantage_estimator, --actor_learning_rate, --eps_clip, --init_kl_coef, --temperature, --max_norm,
    --lambd, --gamma, --no_advantage_std_norm, --enable_vllm_is_correction (tis)      algorithm

The reference, critic and reward models run on GPUs of their own unless colocated with the actor: those GPUs are
outside the plan (listed), and their passes are counted on the learner only where they share its GPUs.
"""

from __future__ import annotations

import math
from typing import Any

from asyncrl.frameworks.common.importing import missing_inputs, model_section
from asyncrl.frameworks.common.provenance import ImportPlan, SettingsError
from asyncrl.frameworks.openrlhf.flags import NEUTRAL, NO_COUNTERPART, Flags

#: OpenRLHF's advantage estimators that have an asyncrl loss.
LOSSES = {"gae": "ppo", "group_norm": "grpo", "dr_grpo": "grpo", "rloo": "rloo"}
ZERO = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def plan_from_openrlhf(
    flags: Flags,
    *,
    name: str,
    device: str | dict[str, Any] | None,
    completion_tokens: dict[str, Any] | None,
    prompt_tokens: dict[str, Any] | None = None,
    preset: str | None = None,
) -> ImportPlan:
    """The scenario OpenRLHF's flags describe; a SettingsError listing every missing piece at once."""
    plan = flags.plan
    pretrain = str(flags.value("pretrain") or "")
    cap = "--generate_max_len or --max_new_tokens"
    missing = missing_inputs(
        "OpenRLHF's flags", flags.label("pretrain"), pretrain, device, completion_tokens, preset, cap
    )
    if missing:
        raise SettingsError("\n".join(missing))
    plan.scenario = {"name": name, "framework": "openrlhf"}
    plan.source("name", "--name (or the script's name)", name)
    plan.source("framework", "(from-openrlhf: OpenRLHF's fixed costs)", "openrlhf")
    _model(plan, flags, pretrain, preset)
    plan.scenario["hardware"] = {"device": device}
    plan.source("hardware.device", "--device", device)
    _cluster_and_schedule(plan, flags)
    _workload(plan, flags, completion_tokens, prompt_tokens)
    _algorithm(plan, flags)
    _learner(plan, flags)
    _run(plan, flags)
    _other_pools(plan, flags)
    plan.unmapped += [
        (flags.label(key), flags.value(key), why)
        for key, why in NO_COUNTERPART.items()
        if flags.given(key) and flags.value(key) not in (None, False, NEUTRAL.get(key, object()))
    ]
    return plan


def _model(plan: ImportPlan, flags: Flags, pretrain: str, preset: str | None) -> None:
    model = model_section(plan, flags.label("pretrain"), pretrain, preset)
    dtype = "fp16" if flags.into("model.dtype", "param_dtype") == "fp16" else "bf16"
    plan.scenario["model"] = {**model, "dtype": dtype}


def _cluster_and_schedule(plan: ImportPlan, flags: Flags) -> None:
    """The actor's GPUs train; the vLLM engines' GPUs generate, the same GPUs under --colocate_all_models."""
    training = flags.integer("cluster.training_devices", "actor_num_nodes") * flags.integer(
        "cluster.training_devices", "actor_num_gpus_per_node"
    )
    engines = flags.into("cluster.generation_devices", "vllm_num_engines")
    if not isinstance(engines, int) or isinstance(engines, bool) or engines < 1:
        raise SettingsError(
            f"{flags.label('vllm_num_engines')}: {engines!r}; without vLLM engines OpenRLHF generates with the "
            "learner's own model, which asyncrl does not model"
        )
    tp = flags.integer("cluster.devices_per_engine", "vllm_tensor_parallel_size")
    asynchronous = flags.switch("async_train")
    colocated = flags.switch("colocate_all_models") and not asynchronous
    plan.source("cluster.colocated", flags.label("colocate_all_models"), flags.switch("colocate_all_models"))
    if colocated and engines * tp != training:
        raise SettingsError(
            f"{flags.label('colocate_all_models')}: vllm_num_engines × vllm_tensor_parallel_size = {engines * tp} "
            f"must equal the actor's {training} GPUs (as OpenRLHF asserts)"
        )
    share = flags.into("cluster.gpu_memory_utilization", "vllm_gpu_memory_utilization")
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise SettingsError(f"{flags.label('vllm_gpu_memory_utilization')}: expected a share in (0, 1], got {share!r}")
    plan.scenario["cluster"] = {
        "generation_devices": engines * tp,
        "training_devices": training,
        "devices_per_engine": tp,
        "gpu_memory_utilization": float(share),
        **({"colocated": True} if colocated else {}),
    }
    if flags.switch("colocate_all_models") and asynchronous:
        plan.notes.append(
            "--colocate_all_models with --async_train colocates only the DeepSpeed models: the vLLM "
            "engines get GPUs of their own (as OpenRLHF does)"
        )
    plan.scenario["schedule"] = _schedule(plan, flags, asynchronous)


def _schedule(plan: ImportPlan, flags: Flags, asynchronous: bool) -> dict[str, Any]:
    if not asynchronous:
        plan.source("schedule.kind", flags.label("async_train"), False)
        return {"kind": "sync"}
    plan.source("schedule.kind", flags.label("async_train"), True)
    if flags.switch("partial_rollout"):
        queue = flags.integer("schedule.max_staleness", "async_queue_size")
        plan.source("schedule.kind", flags.label("partial_rollout"), True)
        plan.source("schedule.in_flight_updates", flags.label("partial_rollout"), True)
        plan.source("schedule.kv_on_update", flags.label("partial_rollout"), True)
        plan.notes.append(
            f"--partial_rollout: streaming with in-flight updates and η = async_queue_size = {queue} (OpenRLHF "
            "generates a rollout batch at a time, its weights updated under it; asyncrl admits groups continuously); "
            "vLLM's pause for the update frees the running requests' KV cache, so each is prefilled again under "
            "the new weights (schedule.kv_on_update: recompute)"
        )
        return {"kind": "streaming", "max_staleness": queue, "in_flight_updates": True, "kv_on_update": "recompute"}
    queue = flags.integer("schedule.off_policy_steps", "async_queue_size")
    plan.notes.append(
        f"--async_train: pipelined, {queue} step(s) off policy (the generator runs async_queue_size batches ahead "
        "and holds the engines while it generates, so weights load between batches)"
    )
    return {"kind": "pipelined", "off_policy_steps": queue}


def _workload(plan: ImportPlan, flags: Flags, completion: Any, prompt: Any) -> None:
    prompt_cap, response_cap = _caps(plan, flags, prompt)
    if prompt is None:
        prompt = {"kind": "fixed", "value": prompt_cap}
        plan.notes.append(
            f"workload.prompt_tokens: every prompt taken at the cap, {prompt_cap} (give --prompt-lengths)"
        )
    else:
        plan.source("workload.prompt_tokens", "--prompt-lengths", prompt)
    plan.source("workload.completion_tokens", "--lengths", completion)
    plan.scenario["workload"] = {
        "prompts_per_step": flags.integer("workload.prompts_per_step", "rollout_batch_size"),
        "samples_per_prompt": flags.integer("workload.samples_per_prompt", "n_samples_per_prompt"),
        "prompt_tokens": {**prompt, "max_tokens": prompt.get("max_tokens", prompt_cap)},
        "completion_tokens": {**completion, "max_tokens": completion.get("max_tokens", response_cap)},
    }


def _caps(plan: ImportPlan, flags: Flags, prompt: Any) -> tuple[int, int]:
    """(prompt cap, response cap): 0.8's --prompt_max_len and --generate_max_len; 0.9's --max_len (prompt and
    response together) and --max_new_tokens (unset: what the prompt leaves of max_len)."""
    if flags.given("generate_max_len") or flags.given("prompt_max_len"):
        prompt_cap = flags.into("workload.prompt_tokens", "prompt_max_len", 1024)
        return prompt_cap, flags.into("workload.completion_tokens.max_tokens", "generate_max_len", 1024)
    total = flags.into("workload.completion_tokens.max_tokens", "max_len")
    new = flags.value("max_new_tokens")
    if isinstance(new, int) and not isinstance(new, bool) and 0 < new < total:
        flags.into("workload.completion_tokens.max_tokens", "max_new_tokens")
        flags.into("workload.prompt_tokens", "max_len")
        return total - new, new
    guess = int(prompt.get("max_tokens", prompt.get("value", 256))) if isinstance(prompt, dict) else 256
    plan.source("workload.prompt_tokens", "asyncrl's default prompt cap (no --max_new_tokens)", guess)
    plan.notes.append(f"workload.completion_tokens.max_tokens = max_len − {guess}: no --max_new_tokens")
    return guess, max(1, total - guess)


def _algorithm(plan: ImportPlan, flags: Flags) -> None:
    estimator = str(flags.into("algorithm.loss", "advantage_estimator"))
    loss = LOSSES.get(estimator)
    if loss is None:
        plan.unmapped.append((flags.label("advantage_estimator"), estimator, f"no asyncrl loss ({', '.join(LOSSES)})"))
    samples = flags.value("rollout_batch_size") * flags.value("n_samples_per_prompt")
    epochs = flags.integer("algorithm.updates_per_step", "max_epochs")
    batch = flags.integer("algorithm.updates_per_step", "train_batch_size")
    algorithm: dict[str, Any] = {
        "updates_per_step": epochs * max(1, math.ceil(samples / batch)),
        "extra_forward_passes": _extra_passes(plan, flags, epochs, estimator),
    }
    if loss is not None:
        algorithm["loss"] = loss
    if estimator == "dr_grpo" or flags.switch("no_advantage_std_norm"):
        algorithm["normalise_std"] = False
        plan.source("algorithm.normalise_std", flags.label("advantage_estimator"), estimator)
    low_high = flags.value("eps_clip_low_high")
    if isinstance(low_high, list) and low_high:
        clip = flags.into("algorithm.clip_eps", "eps_clip_low_high")[0]
    else:
        clip = flags.into("algorithm.clip_eps", "eps_clip")
    numbers = {
        "learning_rate": flags.into("algorithm.learning_rate", "actor_learning_rate"),
        "clip_eps": clip,
        "kl_coef": flags.into("algorithm.kl_coef", "init_kl_coef"),
        "kl_as_loss": flags.into("algorithm.kl_coef", "use_kl_loss", False),  # in the loss or the reward: one pass
        "temperature": flags.into("algorithm.temperature", "temperature"),
        "grad_clip": flags.into("algorithm.grad_clip", "max_norm"),
        "gamma": flags.into("algorithm.gamma", "gamma"),
        "gae_lambda": flags.into("algorithm.gae_lambda", "lambd"),
    }
    algorithm |= {key: float(value) for key, value in numbers.items() if _number(value) and key != "kl_as_loss"}
    if flags.switch("enable_vllm_is_correction") and flags.value("vllm_is_correction_type") == "tis":
        high = flags.value("vllm_is_truncated_threshold")
        algorithm["correction"] = flags.into("algorithm.correction", "enable_vllm_is_correction") and "tis"
        if isinstance(high, list) and len(high) == 2 and _number(high[1]):
            algorithm["truncation_cap"] = float(
                flags.into("algorithm.truncation_cap", "vllm_is_truncated_threshold")[1]
            )
    plan.scenario["algorithm"] = algorithm


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _extra_passes(plan: ImportPlan, flags: Flags, epochs: int, estimator: str) -> int:
    """Passes on the actor's GPUs besides training: old log-probs; the reference's and the critic's where they
    share those GPUs (their own GPUs otherwise, outside the plan)."""
    together = flags.switch("colocate_all_models")
    reference = _number(flags.value("init_kl_coef")) and flags.value("init_kl_coef") > 0
    shared_reference = reference and (together or flags.switch("colocate_actor_ref"))
    critic = estimator == "gae"
    parts = {
        "old log-probs": 1,
        "PPO epochs after the first": 3 * (epochs - 1),
        "reference (KL), on the actor's GPUs": 1 if shared_reference else 0,
        "critic (values, then training)": 1 + 3 * epochs if critic and together else 0,
    }
    total = sum(parts.values())
    shown = ", ".join(f"{label} {count}" for label, count in parts.items() if count)
    plan.source("algorithm.extra_forward_passes", flags.label("init_kl_coef"), flags.value("init_kl_coef"))
    plan.source("algorithm.extra_forward_passes", flags.label("colocate_all_models"), together)
    plan.notes.append(f"algorithm.extra_forward_passes = {total} ({shown}; a backward pass counts as two)")
    return total


def _learner(plan: ImportPlan, flags: Flags) -> None:
    stage = flags.into("learner.sharding", "zero_stage")
    if stage not in ZERO:
        raise SettingsError(f"{flags.label('zero_stage')}: {stage!r} is not a ZeRO stage (0 to 3)")
    dtype = "fp16" if flags.value("param_dtype") == "fp16" else "bf16"
    if flags.given("bf16"):  # 0.8's switch
        flags.into("learner.param_dtype", "bf16")
    flags.into("learner.param_dtype", "param_dtype")
    learner: dict[str, Any] = {
        "sharding": ZERO[stage],
        "param_dtype": dtype,
        "optimizer_offload": flags.into("learner.optimizer_offload", "adam_offload", False) is True,
        "activation_checkpointing": flags.into("learner.activation_checkpointing", "gradient_checkpointing", False)
        is True,
    }
    grad = flags.value("grad_accum_dtype")
    if grad in ("fp32", "bf16"):
        learner["grad_dtype"] = flags.into("learner.grad_dtype", "grad_accum_dtype")
    parallel = flags.integer("learner.model_parallel", "ring_attn_size") * flags.integer(
        "learner.model_parallel", "ds_tensor_parallel_size"
    )
    if parallel > 1:
        learner["model_parallel"] = parallel
    flags.value("micro_train_batch_size")  # rows of a micro-batch: only without dynamic batching
    if flags.into("learner.micro_batch_tokens", "use_dynamic_batch", False) is True:
        learner["micro_batch_tokens"] = flags.integer("learner.micro_batch_tokens", "train_max_tokens_per_gpu")
    else:
        rows = flags.integer("learner.micro_batch_tokens", "micro_train_batch_size")
        length = plan.scenario["workload"]["prompt_tokens"]["max_tokens"]
        length += plan.scenario["workload"]["completion_tokens"]["max_tokens"]
        learner["micro_batch_tokens"] = rows * length
        plan.notes.append(f"learner.micro_batch_tokens = {rows} rows × {length:,} tokens (the caps), no dynamic batch")
    plan.scenario["learner"] = learner


def _run(plan: ImportPlan, flags: Flags) -> None:
    """Learner steps: --max_samples prompts × --num_episodes over --rollout_batch_size (100 if unbounded)."""
    samples, episodes = flags.value("max_samples"), flags.value("num_episodes")
    if flags.given("max_samples") and _number(samples) and _number(episodes):
        batch = plan.scenario["workload"]["prompts_per_step"]
        flags.into("run.steps", "num_episodes")
        steps = max(1, math.ceil(flags.into("run.steps", "max_samples") * episodes / batch))
        plan.notes.append(
            f"run.steps = ⌈max_samples × num_episodes / rollout_batch_size⌉ = {steps} (the dataset may be smaller)"
        )
    else:
        plan.source("run.steps", flags.label("max_samples"), None)
        plan.notes.append("run.steps: no --max_samples (the dataset decides): 100 steps")
        steps = 100
    plan.scenario["run"] = {"steps": steps}


def _other_pools(plan: ImportPlan, flags: Flags) -> None:
    """The reference, critic and reward models' own GPUs, outside the plan unless they share the actor's."""
    together = flags.switch("colocate_all_models")
    pools = {
        "ref": _number(flags.value("init_kl_coef")) and flags.value("init_kl_coef") > 0,
        "critic": flags.value("advantage_estimator") == "gae",
        "reward": bool(flags.value("reward_pretrain")) and not flags.value("remote_rm_url"),
    }
    if pools["critic"] and pools["reward"] and flags.switch("colocate_critic_reward"):
        pools["reward"] = False  # on the critic's GPUs, listed with them
    for pool, used in pools.items():
        shared = together or (pool == "ref" and flags.switch("colocate_actor_ref"))
        nodes, gpus = flags.value(f"{pool}_num_nodes"), flags.value(f"{pool}_num_gpus_per_node")
        if used and not shared:
            plan.unmapped.append(
                (
                    f"{flags.label(f'{pool}_num_nodes')} × {flags.label(f'{pool}_num_gpus_per_node')}",
                    nodes * gpus,
                    f"the {pool} model's own GPUs: outside the plan (its passes overlap the learner's)",
                )
            )
