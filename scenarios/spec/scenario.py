"""The scenario: one validated description of an asynchronous RL setup.

    scenario.yaml ──load──► Scenario ──► simulator  (predicts)
                                     └─► executor   (runs for real)

Sections mirror the file: ``model``, ``hardware``, ``cluster``, ``workload`` (``scenarios/spec/sections.py``),
``schedule`` (``scenarios/spec/schedules.py``: one class per kind, with its rules and its label),
``algorithm``, ``learner``, ``run`` (``scenarios/spec/training.py``). Every section forbids unknown keys, so
a typo fails at load time with the field's path. Quantities derived from several sections (engines,
batch size, KV bytes per token, concurrency that fits in memory) live here as properties, computed
once, so both backends read the same numbers instead of re-deriving them. Every section class is
importable from here (``from asyncrl.scenarios.spec.scenario import ClusterSpec``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..costs.efficiency import Efficiency
from ..costs.memory import engine_max_batch, rollouts_that_fit
from .device_sheet import node_devices
from .schedules import (
    PipelinedSchedule,
    Schedule,
    StreamingSchedule,
    SyncSchedule,
    verl_window_groups,
)
from .sections import ClusterSpec, HardwareSpec, ModelSpec, Section, WorkloadSpec
from .training import AlgorithmSpec, LearnerSpec, RunSpec

__all__ = [
    "AlgorithmSpec",
    "ClusterSpec",
    "HardwareSpec",
    "LearnerSpec",
    "ModelSpec",
    "PipelinedSchedule",
    "RunSpec",
    "Scenario",
    "Schedule",
    "StreamingSchedule",
    "SyncSchedule",
    "WorkloadSpec",
    "verl_window_groups",
]


class Scenario(Section):
    """One asynchronous RL setup, as both backends read it."""

    name: str = Field(min_length=1, max_length=200, description="names the run directory")
    framework: Literal["generic", "verl", "nemo-rl", "openrlhf", "areal"] = Field(
        "generic",
        description="the framework whose run this is: its own fixed costs (dispatch, weight refit, collating "
        "the batch: `scenarios/costs/efficiency.py`'s `FRAMEWORKS`, each with its source) stand in for the "
        "catalogue's; the importers set it",
    )
    model: ModelSpec
    hardware: HardwareSpec
    cluster: ClusterSpec
    workload: WorkloadSpec
    schedule: Schedule
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    learner: LearnerSpec = Field(default_factory=LearnerSpec)
    run: RunSpec = Field(default_factory=RunSpec)

    @field_validator("name")
    @classmethod
    def _printable(cls, name: str) -> str:
        """No control characters: the name is printed on terminals (an escape sequence would be obeyed)."""
        bad = next((char for char in name if not char.isprintable()), None)
        if bad is not None:
            raise ValueError(f"holds the control character {ascii(bad)[1:-1]}; use printable text")
        return name

    @model_validator(mode="before")
    @classmethod
    def _node_of_the_device(cls, data: Any) -> Any:
        """``cluster.devices_per_node`` unset: the device's node (eight devices; a GB200 NVL72 rack's 72)."""
        if not (isinstance(data, dict) and isinstance(data.get("cluster"), dict)):
            return data
        hardware = data.get("hardware")
        size = node_devices(hardware.get("device")) if isinstance(hardware, dict) else None
        if size is None or data["cluster"].get("devices_per_node") is not None:
            return data
        return {**data, "cluster": {**data["cluster"], "devices_per_node": size}}

    @model_validator(mode="after")
    def _cross_section(self) -> Scenario:
        if self.cluster.colocated and not self.schedule.may_colocate:
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
        failures = self.run.failures
        if failures is not None and failures.engine != "random" and failures.engine >= self.cluster.engines:
            raise ValueError(
                f"run.failures.engine: {failures.engine}, but the cluster has {self.cluster.engines} engine(s), "
                f"numbered from 0"
            )
        if failures is not None and failures.engines_lost > self.cluster.engines:
            raise ValueError(
                f"run.failures.engines_lost: {failures.engines_lost}, but the cluster has {self.cluster.engines} "
                f"engine(s)"
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
        return self.schedule.queue_groups(self.workload.prompts_per_step)

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
        model, hardware = self.model, self.hardware
        return rollouts_that_fit(
            model.weight_bytes,
            model.kv_bytes_per_token,
            hardware.spec.memory_bytes,
            self.cluster.devices_per_engine,
            self.expected_rollout_tokens,
            self.cluster.gpu_memory_utilization,
            limit=engine_max_batch(hardware.device_name, hardware.spec.memory_bytes),
        )

    @cached_property
    def engine_concurrency(self) -> int:
        """Rollouts one engine holds in flight (``max_concurrency`` or what fits)."""
        explicit = self.schedule.max_concurrency
        return explicit if explicit is not None else self.memory_concurrency

    def efficiency(self) -> Efficiency:
        """The analytic model's terms: the catalogue, the framework's fixed costs, a profile, explicit mfu/mbu."""
        return self.hardware.efficiency(self.framework)

    def resolved(self) -> Scenario:
        """A copy with every defaulted quantity written out, as run records store it."""
        data = self.model_dump(mode="json")
        data["schedule"]["max_concurrency"] = self.engine_concurrency
        data["learner"]["param_dtype"] = self.learner.param_dtype or self.model.dtype
        data["schedule"] |= self.schedule.resolved_fields(self.queue_capacity)
        return Scenario.model_validate(data)
