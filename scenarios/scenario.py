"""The scenario: one validated description of an asynchronous RL setup.

    scenario.yaml ──load──► Scenario ──► simulator  (predicts)
                                     └─► executor   (runs for real)

Sections mirror the file: ``model``, ``hardware``, ``cluster``, ``workload``,
``schedule``, ``algorithm``, ``learner``, ``run``. Every section forbids unknown keys, so a
typo fails at load time with the field's path. Quantities derived from several
sections (engines, batch size, KV bytes per token, concurrency that fits in
memory) live here as properties, computed once, so both backends read the same
numbers instead of re-deriving them.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from asyncrl.scenarios.catalog import DEVICES, DTYPE_BYTES, MODEL_PRESETS, DeviceSpec
from asyncrl.scenarios.distributions import Fixed, LengthDistribution
from asyncrl.scenarios.efficiency import Efficiency
from asyncrl.scenarios.efficiency import resolve as resolve_efficiency
from asyncrl.scenarios.limits import (
    Concurrency,
    Devices,
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
    Steps,
)
from asyncrl.scenarios.memory import rollouts_that_fit
from asyncrl.scenarios.profile import CostProfile, load_profile
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

DeviceName = Literal[tuple(DEVICES)]  # type: ignore[valid-type]
PresetName = Literal[tuple(MODEL_PRESETS)]  # type: ignore[valid-type]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Section):
    """The policy: a catalog preset, or its architecture figures given directly."""

    preset: PresetName | None = Field(None, description="catalog entry; explicit fields below override it")
    params: PositiveInt | None = Field(None, description="all weights")
    active_params: PositiveInt | None = Field(
        None, description="weights one token passes through (MoE); default params"
    )
    layers: PositiveInt | None = None
    hidden: PositiveInt | None = None
    heads: PositiveInt | None = Field(None, description="attention heads; default hidden / head_dim")
    kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    vocab: PositiveInt | None = Field(None, description="vocabulary size (the learner's logits); from the preset")
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    path: Path | None = Field(
        None,
        description="executor: a checkpoint directory (safetensors; relative to the scenario file where it exists "
        "there), or a hub name already in the local Hugging Face cache; else built from preset",
    )
    trust_remote_code: bool = Field(False, description="executor: allow code shipped with a local checkpoint")

    @field_validator("path")
    @classmethod
    def _path_beside_the_scenario(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir")
        if path is None or path.is_absolute() or not base or not (Path(base) / path).exists():
            return path  # absolute, relative to the working directory, or a hub name
        return (Path(base) / path).resolve()

    @model_validator(mode="after")
    def _fill_from_preset(self) -> ModelSpec:
        if self.preset is not None:
            preset = MODEL_PRESETS[self.preset]
            for name in ("params", "active_params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
                if getattr(self, name) is None:
                    object.__setattr__(self, name, getattr(preset, name))
        missing = [
            name for name in ("params", "layers", "hidden", "kv_heads", "head_dim") if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"give a preset, or {', '.join(missing)}")
        if self.active_params is None:
            object.__setattr__(self, "active_params", self.params)
        if self.heads is None:
            object.__setattr__(self, "heads", max(1, self.hidden // self.head_dim))
        if self.active_params > self.params:
            raise ValueError(f"active_params: {self.active_params} exceeds params ({self.params})")
        return self

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        return float(self.params * self.dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> float:
        """Key and value vectors of one token across all layers."""
        return float(2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes)

    @property
    def label(self) -> str:
        return self.preset or f"{self.params / 1e9:.2g}B"


class HardwareSpec(_Section):
    """The device kind, its efficiency, and optionally measured costs."""

    device: DeviceName = Field(description="catalog entry")
    mfu: Fraction | None = Field(
        None,
        description="model-FLOPs utilization of the learner and prefill; unset: the profile's, else the "
        "catalogue's (scenarios/efficiency.py)",
    )
    mbu: Fraction | None = Field(
        None, description="memory-bandwidth utilization of decoding; unset: the profile's, else the catalogue's"
    )
    sync_latency_s: NonNegativeFloat = Field(0.05, description="fixed cost of one weight sync besides the transfer")
    profile: Path | None = Field(
        None,
        description="measured cost profile; relative to the scenario file (given with --set: to the working directory)",
    )
    host_cores: PositiveInt | None = Field(
        None,
        description="cpu only: cores the run's processes share (scenarios/cores.py); unset: each device its own",
    )

    @model_validator(mode="after")
    def _host_cores_on_cpu(self) -> HardwareSpec:
        if self.host_cores is not None and self.device != "cpu":
            raise ValueError(
                f"host_cores: {self.host_cores} applies to the cpu device, whose devices are cores; "
                f"device is {self.device} (remove host_cores)"
            )
        return self

    @field_validator("profile")
    @classmethod
    def _profile_loads(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None:
            return None
        base = (info.context or {}).get("base_dir")
        resolved = (Path(base) / path if base and not path.is_absolute() else path).resolve()
        load_profile(resolved)
        return resolved

    @property
    def spec(self) -> DeviceSpec:
        return DEVICES[self.device]

    def cost_profile(self) -> CostProfile | None:
        """The measured profile ``profile`` names, if it is one (else the analytic model's, with efficiencies)."""
        profile = load_profile(self.profile) if self.profile is not None else None
        return profile if isinstance(profile, CostProfile) else None

    def efficiency(self) -> Efficiency:
        """The analytic model's efficiency terms: defaults, a ``kind: efficiency`` profile, explicit mfu/mbu."""
        profile = load_profile(self.profile) if self.profile is not None else None
        explicit = {"mbu": self.mbu} if self.mbu is not None else {}
        if self.mfu is not None:  # the learner's utilization: its no-grad passes as well
            explicit |= {"mfu": self.mfu, "forward_mfu": self.mfu}
        return resolve_efficiency(profile if isinstance(profile, Efficiency) else None, explicit)


class ClusterSpec(_Section):
    """How many devices generate, how many train, and how engines span them."""

    generation_devices: Devices
    training_devices: Devices
    devices_per_engine: Devices = Field(1, description="tensor-parallel size of one generation engine")
    colocated: bool = Field(False, description="the same devices alternate between generating and training")
    devices_per_node: PositiveInt = Field(
        8, description="devices that share a node (NVLink); engines, then the learner, fill nodes in order"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        if self.generation_devices % self.devices_per_engine:
            raise ValueError(
                f"devices_per_engine: {self.devices_per_engine} does not divide generation_devices ({self.generation_devices})"
            )
        if self.devices_per_node % self.devices_per_engine:
            raise ValueError(
                f"devices_per_engine: {self.devices_per_engine} does not divide devices_per_node "
                f"({self.devices_per_node}); an engine's devices share one node"
            )
        if self.colocated and self.training_devices != self.generation_devices:
            raise ValueError(
                f"training_devices: {self.training_devices} differs from generation_devices ({self.generation_devices}); "
                "colocated devices both train and generate"
            )
        return self

    @property
    def engines(self) -> int:
        return self.generation_devices // self.devices_per_engine

    @property
    def total_devices(self) -> int:
        return self.generation_devices if self.colocated else self.generation_devices + self.training_devices


class WorkloadSpec(_Section):
    """What one learner step consumes, and how long prompts and completions are."""

    prompts_per_step: PositiveInt = Field(description="groups per learner step")
    samples_per_prompt: PositiveInt = Field(description="group size")
    prompt_tokens: LengthDistribution = Field(default_factory=lambda: Fixed(kind="fixed", value=256))
    completion_tokens: LengthDistribution
    task: str | None = Field(
        None,
        description="executor: a shipped task name or module:function; none = timing mode (lengths drawn, enforced)",
    )
    prompts: Path | None = Field(
        None,
        description="executor: task mode on a prompts file (JSONL, one {prompt, ...} per line; relative to the "
        "scenario file), tokenized by model.path's own tokenizer; with reward",
    )
    reward: str | None = Field(
        None, description="executor: module:function scoring a completion: f(completion_text, record) -> float"
    )

    @field_validator("prompts")
    @classmethod
    def _prompts_beside_the_scenario(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None:
            return None
        base = (info.context or {}).get("base_dir")
        resolved = (Path(base) / path if base and not path.is_absolute() else path).resolve()
        if not resolved.is_file():
            raise ValueError(f"file not found: {resolved}")
        return resolved

    @model_validator(mode="after")
    def _one_task_source(self) -> WorkloadSpec:
        if (self.prompts is None) != (self.reward is None):
            raise ValueError("reward: a prompts file and a reward function go together; give both or neither")
        if self.prompts is not None and self.task is not None:
            raise ValueError("task: give a task, or prompts and reward, not both")
        return self

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def task_mode(self) -> bool:
        """A real reward (a task, or prompts and reward) rather than timing mode."""
        return self.task is not None or self.prompts is not None


class _ScheduleBase(_Section):
    max_concurrency: Concurrency | None = Field(
        None, description="rollouts in flight per engine; default: what fits in memory"
    )


class SyncSchedule(_ScheduleBase):
    """Generate a batch with version v, train on it, sync, repeat."""

    kind: Literal["sync"]

    @cached_property
    def staleness_bound(self) -> int:
        return 0


class PipelinedSchedule(_ScheduleBase):
    """Batch-level overlap: the batch trained at step k was generated with version k − N."""

    kind: Literal["pipelined"]
    off_policy_steps: PositiveInt = Field(
        1, description="N: the batch trained at step k was generated with version k - N"
    )

    @cached_property
    def staleness_bound(self) -> int:
        return self.off_policy_steps


class StreamingSchedule(_ScheduleBase):
    """Continuous generation with admission control on staleness."""

    kind: Literal["streaming"]
    max_staleness: NonNegativeInt = Field(1, description="no trained sample is staler than this")
    in_flight_updates: bool = Field(False, description="new weights reach unfinished rollouts")
    queue_capacity: PositiveInt | None = Field(
        None, description="finished groups held for the learner; default one batch"
    )
    queue_policy: Literal["block", "drop_oldest"] = Field(
        "block", description="when the queue is full: block (generation waits) | drop_oldest"
    )
    refresh: Literal["lazy", "drain"] = Field(
        "lazy",
        description="without in-flight updates, when an engine takes new weights: lazy (once it is empty, or "
        "its weights are too old to start anything) | drain (stop admitting once its weights are "
        "refresh_every versions behind, finish what runs, load)",
    )
    refresh_every: PositiveInt = Field(
        1, description="with refresh: drain, how many versions behind an engine may fall before it drains"
    )
    sync_every: PositiveInt = Field(
        1,
        description="learner steps between two weight syncs to the engines: engines only ever hold versions that "
        "are multiples of this (verl: async_training.trigger_parameter_sync_step)",
    )
    staleness_threshold: NonNegativeFloat | None = Field(
        None,
        description="verl's admission rule: an engine holding version v starts groups only up to "
        "(v + sync_every · (1 + this)) batches, i.e. this share of a sync window ahead; max_staleness then only "
        "drops stragglers (verl: async_training.staleness_threshold); none: AReaL's rule (max_staleness)",
    )

    @cached_property
    def staleness_bound(self) -> int:
        return self.max_staleness

    @model_validator(mode="after")
    def _refresh_needs_no_in_flight_updates(self) -> StreamingSchedule:
        if self.in_flight_updates and self.refresh == "drain":
            raise ValueError("refresh: drain is for engines without in_flight_updates (those load at once)")
        return self


Schedule = Annotated[SyncSchedule | PipelinedSchedule | StreamingSchedule, Field(discriminator="kind")]


def verl_window_groups(schedule: StreamingSchedule, batch_groups: int) -> int:
    """Groups one sync window lets generation start under verl's rule: ⌊sync_every · (1 + threshold) · B⌋
    (verl's max_required_samples, in prompts)."""
    return math.floor(schedule.sync_every * (1 + (schedule.staleness_threshold or 0.0)) * batch_groups + 1e-9)


class AlgorithmSpec(_Section):
    """The loss and how much learner work one step does."""

    loss: Literal["grpo", "rloo", "online_dpo", "ppo"] = "grpo"
    updates_per_step: PositiveInt = Field(
        1, description="optimizer updates per batch (minibatches); compute is unchanged"
    )
    extra_forward_passes: NonNegativeInt = Field(1, description="forward passes per sample besides the training pass")
    learning_rate: PositiveFloat = Field(1e-4, description="executor: Adam learning rate")
    correction: Literal["clip", "tis", "decoupled", "none"] = Field(
        "clip",
        description="executor: off-policy correction of grpo, rloo and ppo (executor/losses.py): clip (PPO clip of "
        "pi/mu), tis (weight min(pi/mu, c), no clip), decoupled (AReaL: weight pi_prox/mu, PPO clip of pi/pi_prox, "
        "pi_prox the policy at the start of the step), none (stale samples taken as on-policy)",
    )
    clip_eps: PositiveFloat | None = Field(
        0.2, description="executor: PPO-style clip of the ratio (pi/mu for clip, pi/pi_prox for decoupled); none = off"
    )
    truncation_cap: PositiveFloat | None = Field(
        None,
        description="executor: cap c on the importance weight (pi/mu for clip and tis, pi_prox/mu for decoupled); "
        "none = no cap, except tis: 2",
    )
    kl_coef: NonNegativeFloat = Field(0.0, description="executor: KL-to-initial-policy penalty")
    dpo_beta: PositiveFloat = Field(0.1, description="executor: online DPO temperature")
    dpo_reference: Literal["initial", "behaviour"] = Field(
        "initial",
        description="executor, online_dpo: the anchor of the implicit reward, the initial policy (the paper's) "
        "or the behaviour policy that sampled the pair",
    )
    temperature: PositiveFloat = Field(1.0, description="executor: sampling temperature of the actors")
    normalise_std: bool = Field(
        True, description="executor, grpo: divide advantages by the group's reward std; false is Dr. GRPO"
    )
    grad_clip: PositiveFloat | None = Field(
        1.0, description="executor: largest global gradient norm per update (clipped above it); none = no clipping"
    )
    gamma: NonNegativeFloat = Field(1.0, le=1.0, description="executor, ppo: discount per token")
    gae_lambda: NonNegativeFloat = Field(0.95, le=1.0, description="executor, ppo: GAE lambda")
    value_coef: NonNegativeFloat = Field(0.5, description="executor, ppo: weight of the value loss")
    value_clip_eps: PositiveFloat | None = Field(
        0.2, description="executor, ppo: clip of the value change from its value at the start of the step; none = off"
    )

    @model_validator(mode="after")
    def _correction_of_a_policy_gradient_loss(self) -> AlgorithmSpec:
        if self.loss == "online_dpo" and self.correction != "clip":
            raise ValueError(
                f"correction: {self.correction!r} would have no effect: online_dpo takes no importance weights "
                "(its loss is off-policy by construction); remove the setting, or use grpo, rloo or ppo"
            )
        return self


class LearnerSpec(_Section):
    """How the learner holds the model in memory (``scenarios/memory.py``); verl and OpenRLHF names given."""

    sharding: Literal["fsdp", "zero3", "zero2", "zero1", "ddp"] = Field(
        "fsdp",
        description="what is split over the training devices: fsdp/zero3 weights, gradients and optimizer; "
        "zero2 gradients and optimizer; zero1 optimizer; ddp nothing "
        "(verl: actor.strategy=fsdp; OpenRLHF: --zero_stage)",
    )
    param_dtype: Literal["bf16", "fp16", "fp32", "fp8"] | None = Field(
        None,
        description="weights and activations; default model.dtype "
        "(verl: fsdp_config.mixed_precision.param_dtype; OpenRLHF: --param_dtype / --bf16)",
    )
    master_weights: Literal["fp32", "none"] = Field(
        "fp32", description="an fp32 copy of the weights the optimizer updates (none: update them in param_dtype)"
    )
    grad_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="gradients (verl: fsdp_config.mixed_precision.reduce_dtype; OpenRLHF: --grad_accum_dtype)",
    )
    optimizer: Literal["adam", "sgd"] = Field(
        "adam", description="adam: two fp32 states per weight; sgd: none (verl: actor.optim)"
    )
    optimizer_offload: bool = Field(
        False,
        description="master weights and optimizer states on CPU through the update (OpenRLHF: --adam_offload; "
        "verl's fsdp_config.optimizer_offload frees them only between steps)",
    )
    param_offload: bool = Field(
        False,
        description="weights on CPU, fetched layer by layer (DeepSpeed: offload_param; "
        "verl's fsdp_config.param_offload frees them only between steps)",
    )
    activation_checkpointing: bool = Field(
        True,
        description="keep only each layer's input, recompute the rest in backward "
        "(verl: model.enable_gradient_checkpointing; OpenRLHF: --gradient_checkpointing)",
    )
    micro_batch_tokens: PositiveInt = Field(
        16384,
        description="tokens per micro-batch on one device, at least one whole rollout "
        "(verl: actor.ppo_max_token_len_per_gpu; OpenRLHF: --train_max_tokens_per_gpu)",
    )
    shard_devices: PositiveInt | None = Field(
        None,
        description="devices one FSDP shard group spans; the groups replicate each other (HSDP); default: a node "
        "when its devices hold the learner state, else all of them (verl: actor.fsdp_config.fsdp_size)",
    )
    model_parallel: PositiveInt = Field(
        1,
        description="training devices that hold one copy of a sequence (verl: actor.ulysses_sequence_parallel_size; "
        "Megatron: tensor × pipeline × context parallel); the rest are data-parallel ranks",
    )


class RunSpec(_Section):
    steps: Steps = Field(100, description="learner steps")
    seed: Seed = 0
    checkpoint_every: PositiveInt | None = Field(None, description="executor: learner checkpoint every N steps")


class Scenario(_Section):
    """One asynchronous RL setup, as both backends read it."""

    name: str = Field(min_length=1, max_length=200)
    model: ModelSpec
    hardware: HardwareSpec
    cluster: ClusterSpec
    workload: WorkloadSpec
    schedule: Schedule
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    learner: LearnerSpec = Field(default_factory=LearnerSpec)
    run: RunSpec = Field(default_factory=RunSpec)

    @model_validator(mode="after")
    def _cross_section(self) -> Scenario:
        if self.cluster.colocated and self.schedule.kind != "sync":
            raise ValueError(
                "cluster.colocated: only a sync schedule can share devices between generating and training"
            )
        group = self.workload.samples_per_prompt
        if self.engine_concurrency < group:
            explicit = self.schedule.max_concurrency is not None
            field = "schedule.max_concurrency" if explicit else "cluster.devices_per_engine"
            fits = (
                "" if explicit else f" of {self.expected_rollout_tokens:,.0f} tokens on average (prompt + completion)"
            )
            raise ValueError(
                f"{field}: an engine holds {self.engine_concurrency} rollouts{fits}, fewer than one group "
                f"(samples_per_prompt = {group}); an engine generates whole groups"
            )
        if self.training_devices % self.learner.model_parallel:
            raise ValueError(
                f"learner.model_parallel: {self.learner.model_parallel} does not divide cluster.training_devices "
                f"({self.training_devices})"
            )
        if self.queue_capacity < self.workload.prompts_per_step:
            raise ValueError(
                f"schedule.queue_capacity: {self.queue_capacity} groups is below prompts_per_step "
                f"({self.workload.prompts_per_step}); the learner could never fill a batch"
            )
        return self

    # Derived quantities: read these, do not re-derive them.

    @cached_property
    def batch_groups(self) -> int:
        return self.workload.prompts_per_step

    @cached_property
    def batch_samples(self) -> int:
        return self.workload.samples_per_step

    @cached_property
    def staleness_bound(self) -> int:
        """Most learner steps a trained sample may lag: 0, N or max_staleness."""
        return self.schedule.staleness_bound

    @cached_property
    def queue_capacity(self) -> int:
        """Finished groups the queue holds before its policy applies: one batch, or under verl's rule
        (``staleness_threshold``) the whole window generation may run ahead (verl's max_queue_size)."""
        capacity = getattr(self.schedule, "queue_capacity", None)
        if capacity is not None:
            return capacity
        threshold = getattr(self.schedule, "staleness_threshold", None)
        if threshold is None:
            return self.workload.prompts_per_step
        return max(self.workload.prompts_per_step, verl_window_groups(self.schedule, self.workload.prompts_per_step))

    @cached_property
    def training_devices(self) -> int:
        return self.cluster.training_devices

    @cached_property
    def expected_rollout_tokens(self) -> float:
        """Prompt plus completion tokens of an average rollout, after truncation."""
        return self.workload.prompt_tokens.mean + self.workload.completion_tokens.mean

    @cached_property
    def memory_concurrency(self) -> int:
        """Rollouts whose KV cache fits in one engine next to the weights (``memory.rollouts_that_fit``)."""
        model = self.model
        return rollouts_that_fit(
            model.weight_bytes,
            model.kv_bytes_per_token,
            self.hardware.spec.memory_bytes,
            self.cluster.devices_per_engine,
            self.expected_rollout_tokens,
        )

    @cached_property
    def engine_concurrency(self) -> int:
        """Rollouts one engine holds in flight (``max_concurrency`` or what fits)."""
        explicit = self.schedule.max_concurrency
        return explicit if explicit is not None else self.memory_concurrency

    def resolved(self) -> Scenario:
        """A copy with every defaulted quantity written out, as run records store it."""
        data = self.model_dump(mode="json")
        data["schedule"]["max_concurrency"] = self.engine_concurrency
        data["learner"]["param_dtype"] = self.learner.param_dtype or self.model.dtype
        if self.schedule.kind == "streaming":
            data["schedule"]["queue_capacity"] = self.queue_capacity
        return Scenario.model_validate(data)
