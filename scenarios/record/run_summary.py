"""``summary.json``: every figure of one run, as a typed value (``RunSummary``), with its unit.

    events ──scenarios.record.summarize.summarize──► RunSummary ──to_json──► summary.json
                                                  ▲                        │
                                                  └──validate_summary──────┘

Both backends' runs are summarized into this one model; analysis reads its
attributes. A file that does not match it (a field missing, of the wrong type)
is one ``RunRecordError`` naming the file and the dotted field. A field a later
version adds is ignored, not refused, so an older reader still reads the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..files.errors import ScenarioError
from ..spec.loading import describe_validation_error
from ..staleness.penalty import TimeToTarget

SUMMARY_FILE = "summary.json"
#: How an executed run ended (``RunSummary.status``); a run that is still going has no summary. Study cells
#: and validate rows say the same words.
RunStatus = Literal["complete", "interrupted", "failed"]


class RunRecordError(ScenarioError):
    """A path that is not a complete run record; the command line prints it as one line."""


class _SummarySection(BaseModel):
    # A field a later version adds is ignored, not refused: an older reader still reads the run.
    model_config = ConfigDict(extra="ignore")


class StepTime(_SummarySection):
    """Seconds between the ends of consecutive learner steps (the first step counts from time 0)."""

    mean: float = Field(description="mean step time (s)")
    p50: float = Field(description="median step time (s)")
    p95: float = Field(description="95th percentile of the step time (s)")


class Throughput(_SummarySection):
    """Trained rollouts over the wall time; a rollout generated but never trained does not count."""

    samples_per_s: float = Field(description="trained rollouts per second of wall time (samples/s)")
    tokens_per_s: float = Field(description="completion tokens of the trained rollouts per second (tokens/s)")
    loss_samples_per_s: float | None = Field(
        None,
        description="executor: rollouts the loss took a gradient from per second: online DPO's two per pair, the "
        "groups `filter_zero_variance` kept; unset for the simulator (samples/s)",
    )


class Staleness(_SummarySection):
    """Of each trained rollout: learner steps between the oldest policy version that generated it and the
    version trained (``step − version``), in steps; 0 is on-policy."""

    mean: float = Field(description="mean staleness (steps)")
    p50: float = Field(description="median staleness (steps)")
    p95: float = Field(description="95th percentile of the staleness (steps)")
    max: int = Field(description="largest staleness (steps)")
    token_mean: float = Field(
        description="staleness averaged over trained tokens, each counted once at the version that produced it "
        "(a rollout updated in flight has tokens of several versions; a long rollout weighs more) (steps)"
    )
    histogram: dict[str, int] = Field(description="trained rollouts by staleness; keys are steps, as strings")


class Utilization(_SummarySection):
    """Busy time over available time, as fractions (0–1)."""

    generation: float = Field(
        description="time engines had a rollout or a weight load open, over engines × wall time (fraction)"
    )
    training: float = Field(description="time the learner was in a step, over wall time (fraction)")
    generation_slots: float = Field(
        description="rollout-seconds over engines × concurrency slots × wall time: how full engines ran (fraction)"
    )


class Idle(_SummarySection):
    """1 − utilization, per role (fractions, 0–1)."""

    generation: float = Field(description="1 − utilization.generation (fraction)")
    training: float = Field(description="1 − utilization.training (fraction)")


class SampleCounts(_SummarySection):
    """Rollouts by fate at the end of the run (counts); generated = trained + queued + in_flight + dropped."""

    generated: int = Field(description="rollouts started: finished ones plus those still running (rollouts)")
    trained: int = Field(description="rollouts a learner step trained (rollouts)")
    queued: int = Field(description="finished rollouts waiting for the learner when the run ended (rollouts)")
    in_flight: int = Field(description="rollouts still generating when the run ended (rollouts)")
    dropped: int = Field(description="finished rollouts discarded: too stale, or pushed out of a full queue (rollouts)")


class GenerationTime(_SummarySection):
    """Device-seconds of the generation pool by what they went to (an engine's seconds × its devices)."""

    decode: float = Field(description="decoding, tensor-parallel all-reduces excluded; the executor's prefill too (s)")
    prefill: float = Field(description="prefilling prompts; 0 for the executor, which counts it as decode (s)")
    weight_sync: float = Field(description="loading new weights (s)")
    phase_switch: float = Field(description="colocated: handing the devices back to generation (s)")
    tensor_parallel: float = Field(description="tensor-parallel all-reduces of decode steps; 0 for the executor (s)")
    idle: float = Field(description="nothing to do; colocated runs: all idle device time (s)")


class TrainingTime(_SummarySection):
    """Device-seconds of the training pool by what they went to (the learner's seconds × its devices)."""

    compute: float = Field(description="learner steps, exposed communication excluded (s)")
    communication: float = Field(description="data-parallel communication compute did not hide; 0 for the executor (s)")
    phase_switch: float = Field(description="colocated: bringing the learner state back before a step (s)")
    idle: float = Field(description="waiting for a batch; 0 for colocated runs (s)")


class DeviceCounts(_SummarySection):
    """Devices per role; colocated runs count the same devices in both roles and once in ``total``."""

    generation: int = Field(description="devices of the generation pool (devices)")
    training: int = Field(description="devices of the training pool (devices)")
    total: int = Field(description="devices the run holds (devices)")


class Breakdown(_SummarySection):
    """Where device time went, in device-seconds (seconds summed over devices): every category of both
    roles adds up to wall_time_s × devices.total."""

    devices: DeviceCounts
    generation: GenerationTime
    training: TrainingTime


class DeviceHours(_SummarySection):
    """Device-hours the run held its devices for (devices × wall time)."""

    total: float = Field(description="devices.total × wall_time_s / 3600 (device-hours)")
    per_step: float = Field(description="total / steps (device-hours per learner step)")
    per_1k_samples: float = Field(description="total per 1,000 trained rollouts (device-hours)")


class Restarts(_SummarySection):
    """Workers lost during the run and restarted, and the work lost with them (``scenarios.spec.failures``)."""

    engines: int = Field(description="engine restarts: an engine died and a replacement took its place (restarts)")
    learner: int = Field(
        0, description="executor runs with --auto-resume only: the learner died and the run resumed (restarts)"
    )
    regenerated_samples: int = Field(
        description="rollouts generated again because the worker that held them died, once per loss (rollouts)"
    )
    down_s: float = Field(
        description="seconds workers were down, from each death to its replacement's start, summed (s)"
    )


class RunSummary(_SummarySection):
    """``summary.json``: every figure of one run, computed from its events by ``summarize``.

    Times are seconds of the run's clock (simulated or measured) from its start to the end of the last
    learner step; spans running past that are cut there.
    """

    backend: str = Field(description="what produced the run: 'simulator' or 'executor'")
    scenario: str = Field(description="name of the scenario run")
    steps: int = Field(description="learner steps completed (steps)")
    steps_simulated: int | None = Field(
        default=None,
        description="simulator sweeps only, when the run was ended once converged: the learner steps simulated; "
        "the figures are extrapolated to ``steps`` (steps)",
    )
    extrapolated: bool | None = Field(
        default=None,
        description="simulator sweeps only: true when the figures are those of ``steps_simulated`` steps plus the "
        "steps skipped, each one a mean step of the converged span (staleness histogram counts scaled, rounded)",
    )
    wall_time_s: float = Field(description="end of the last learner step (s)")
    step_time_s: StepTime
    throughput: Throughput
    staleness: Staleness
    utilization: Utilization
    idle: Idle
    weight_sync_s: float = Field(description="seconds engines spent loading new weights, per engine (s)")
    samples: SampleCounts
    breakdown: Breakdown | None = Field(
        default=None, description="where device time went, per role; absent from runs recorded before it existed"
    )
    device_hours: DeviceHours | None = Field(
        default=None, description="device-hours held; absent from runs recorded before it existed"
    )
    status: RunStatus | None = Field(
        default=None,
        description="executor runs only: how the run ended, 'complete', 'interrupted' or 'failed' (progress at a "
        "checkpoint goes to checkpoint/progress.json, never here); absent from simulator runs",
    )
    resumed_from: int | None = Field(
        default=None,
        description="executor runs continued with --resume only: the learner step of the checkpoint they "
        "continued from (steps)",
    )
    dtype: str | None = Field(
        default=None,
        description="executor runs only: the number format the engines ran in, 'fp32' or 'bf16' (the learner keeps "
        "fp32 weights and computes in it under autocast); absent from simulator runs",
    )
    restarts: Restarts | None = Field(
        default=None,
        description="runs in which a worker died and was restarted (an executor's real deaths, or the simulator's "
        "run.failures); absent when none did",
    )
    time_to_target: TimeToTarget | None = Field(
        default=None,
        description="simulator runs given a staleness penalty fit only (``--penalty``): when the run reaches the "
        "penalty's target reward",
    )

    @property
    def steps_run(self) -> int:
        """Learner steps actually run: ``steps_simulated`` for a run ended once converged, else ``steps``."""
        return self.steps_simulated if self.steps_simulated is not None else self.steps

    def figure(self, path: tuple[str, ...]) -> float:
        """The figure at a field path, e.g. ``("throughput", "samples_per_s")``."""
        value: Any = self
        for name in path:
            value = value[name] if isinstance(value, dict) else getattr(value, name)
        return float(value)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict ``summary.json`` holds, fields in their documented order; unset optional ones left out."""
        return self.model_dump(mode="json", exclude_none=True)


def validate_summary(data: Any, source: Path | str = SUMMARY_FILE) -> RunSummary:
    """``data`` as a RunSummary; RunRecordError ``"<source>: <dotted.field>: <problem>"`` if it is not one."""
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        raise RunRecordError(f"{source}: {describe_validation_error(exc)}") from None
