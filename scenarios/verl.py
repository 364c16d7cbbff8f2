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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.scenarios.catalog import MODEL_PRESETS
from asyncrl.scenarios.memory import rollouts_that_fit

if TYPE_CHECKING:
    from asyncrl.scenarios.scenario import Scenario

#: Megatron's parallel sizes that split one sequence over devices (its expert parallelism does not).
MEGATRON_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
#: Prompts the fully async rollouter runs at once per replica (async_training.concurrent_samples_per_replica).
ASYNC_PROMPTS_PER_REPLICA = 16
#: verl's advantage estimators that have an asyncrl loss.
LOSSES = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo"}
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
_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)(?:,(.*))?\}$")


class VerlError(ValueError):
    """What keeps a verl config from becoming a scenario; one line per problem."""


@dataclass
class VerlPlan:
    """The scenario dict, where each field came from, and what was left out or approximated."""

    scenario: dict[str, Any]
    sources: list[tuple[str, str, Any]] = field(default_factory=list)  # (asyncrl key, verl key, value)
    unmapped: list[tuple[str, Any, str]] = field(default_factory=list)  # (verl key, value, why)
    notes: list[str] = field(default_factory=list)


def lookup(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``a.b.c`` of the config, following ``${a.b}`` and ``${oc.select:a.b,default}`` interpolations."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return default
        node = node.get(part, node.get(False) if part == "n" else None)  # YAML 1.1 reads a bare n as false
        if node is None:
            return default
    return _resolved(config, node, default)


def _resolved(config: dict[str, Any], value: Any, default: Any) -> Any:
    if isinstance(value, str):
        match = _INTERPOLATION.match(value.strip())
        if match:
            fallback = _scalar(match.group(2)) if match.group(2) is not None else default
            return lookup(config, match.group(1), fallback)
        if value.strip() == "???":  # a mandatory value left unset
            return default
    return value


def _scalar(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


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
    get = _Reader(config, plan)
    _model(plan, get, preset)
    plan.scenario["hardware"] = {"device": device}
    _cluster_and_schedule(plan, get)
    _workload(plan, get, completion_tokens, prompt_tokens)
    _algorithm(plan, get)
    _learner(plan, get)
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


class _Reader:
    """Reads verl keys and records which asyncrl field each one fed."""

    def __init__(self, config: dict[str, Any], plan: VerlPlan) -> None:
        self.config, self.plan = config, plan

    def value(self, key: str, default: Any = None) -> Any:
        return lookup(self.config, key, default)

    def into(self, target: str, key: str, default: Any = None, convert: Any = None) -> Any:
        """The verl value of ``key`` (converted), recorded as the source of ``target``."""
        raw = self.value(key, default)
        value = convert(raw) if convert is not None and raw is not None else raw
        self.plan.sources.append((target, key, raw))
        return value

    def integer(self, target: str, key: str, default: int | None = None) -> int:
        value = self.into(target, key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise VerlError(f"{key}: expected an integer, got {value!r}")
        return value


def _missing_inputs(
    config: dict[str, Any], device: str | None, completion_tokens: dict[str, Any] | None, preset: str | None
) -> list[str]:
    """What verl's config cannot give and the flags must: every one of them, at once."""
    missing = []
    path = str(lookup(config, "actor_rollout_ref.model.path", ""))
    if preset is None and guess_preset(path) is None:
        missing.append(
            f"--preset: actor_rollout_ref.model.path {path or '(unset)'} is not a model preset; "
            "give the closest one (asyncrl list shows them)"
        )
    if device is None:
        missing.append("--device: verl's config does not say which GPU; give one (h100, a100-80g, h200, ...)")
    if completion_tokens is None:
        missing.append(
            "--lengths: verl's config gives only the cap (data.max_response_length); give the completion lengths "
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


def _model(plan: VerlPlan, get: _Reader, preset: str | None) -> None:
    path = get.value("actor_rollout_ref.model.path")
    if preset is None:
        preset = guess_preset(str(path))
        plan.sources.append(("model.preset", "actor_rollout_ref.model.path", path))
    else:
        plan.sources.append(("model.preset", "--preset (the model path names none)", preset))
    dtype = get.into("model.dtype", "actor_rollout_ref.rollout.dtype", "bfloat16", lambda v: DTYPES.get(str(v)))
    plan.scenario["model"] = {"preset": preset, **({"dtype": dtype} if dtype else {})}


def _cluster_and_schedule(plan: VerlPlan, get: _Reader) -> None:
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


def _fully_async(plan: VerlPlan, get: _Reader) -> dict[str, Any]:
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


def _workload(plan: VerlPlan, get: _Reader, completion: dict[str, Any] | None, prompt: dict[str, Any] | None) -> None:
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


def _algorithm(plan: VerlPlan, get: _Reader) -> None:
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


def _extra_forward_passes(plan: VerlPlan, get: _Reader, epochs: int, estimator: str) -> int:
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


def _learner(plan: VerlPlan, get: _Reader) -> None:
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


def _model_parallel(get: _Reader) -> int:
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


def _concurrency(plan: VerlPlan, get: _Reader) -> None:
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


def _run(plan: VerlPlan, get: _Reader) -> None:
    steps = get.value("trainer.total_training_steps")
    if isinstance(steps, int) and steps > 0:
        plan.scenario["run"] = {"steps": get.integer("run.steps", "trainer.total_training_steps")}
    else:
        plan.notes.append("run.steps: trainer.total_training_steps is unset (it follows the dataset): 100 steps")
        plan.scenario["run"] = {"steps": 100}


# ── reading the config and the flags, writing the scenario ──────────────────────


def read_config(path: Path, overrides: list[str]) -> dict[str, Any]:
    """The verl config at ``path`` with ``key=value`` overrides applied (``+key`` and ``++key`` as verl takes them)."""
    import yaml

    if not path.is_file():
        raise VerlError(f"{path}: no such file")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise VerlError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(config, dict):
        raise VerlError(f"{path}: a verl config is a mapping (data, actor_rollout_ref, trainer, ...)")
    for override in overrides:
        _override(config, override)
    return config


def _override(config: dict[str, Any], override: str) -> None:
    import yaml

    key, _, raw = override.partition("=")
    *parents, leaf = key.lstrip("+").split(".")
    node = config
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise VerlError(f"{override}: {part} is not a section of the verl config")
        node = child
    try:
        node[leaf] = yaml.safe_load(raw)
    except yaml.YAMLError:
        node[leaf] = raw


def lengths_option(text: str | None, flag: str, out_dir: Path) -> dict[str, Any] | None:
    """``--lengths``: a lengths file or JSONL log (kind: empirical, its path relative to the scenario), or a
    distribution written as YAML (``{kind: lognormal, median: 800, sigma: 1}``). A verl metrics log never
    gets here: the command fits it first (``analysis.lengths.verl_metrics_fit``; scenarios imports no analysis)."""
    import os

    import yaml

    if text is None:
        return None
    path = Path(text).expanduser()
    if path.is_file():
        return {"kind": "empirical", "path": os.path.relpath(path.resolve(), out_dir.resolve())}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict) or "kind" not in value:
        raise VerlError(
            f"{flag}: {text!r} is neither a file nor a distribution like '{{kind: lognormal, median: 800, sigma: 1}}'"
        )
    return value


def plan_lines(plan: VerlPlan) -> str:
    """Where each scenario field came from, what has no counterpart, and what was approximated."""
    width = max(len(target) for target, _, _ in plan.sources)
    lines = ["from verl (scenario key <- verl key = value):"]
    lines += [f"  {target.ljust(width)} <- {key} = {_show(value)}" for target, key, value in plan.sources]
    if plan.unmapped:
        lines.append("no counterpart in a scenario (not modelled):")
        lines += [f"  {key} = {_show(value)}: {why}" for key, value, why in plan.unmapped]
    if plan.notes:
        lines.append("approximated:")
        lines += [f"  {note}" for note in plan.notes]
    return "\n".join(lines)


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)
