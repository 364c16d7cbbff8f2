"""The run record both backends write, and the summary computed from it.

    run dir/
      scenario.yaml     the resolved scenario (defaults written out)
      events.parquet    one row per span (EVENT_COLUMNS)
      summary.json      figures computed from the events by ``summarize`` (``RunSummary``)

Event kinds, by role:

    generation  generate    one rollout (prefill included) under one policy version;
                            with in-flight updates, one row per version it saw
                unfinished  a rollout still running when the run ended, cut there
                prefill     an engine prefilling a group's prompt (``tokens`` = prompt);
                            inside the group's generate spans; simulator only
                sync        an engine loading new weights (``version`` = loaded)
                switch      a colocated engine handing its devices back to generation
                            (the learner state leaving); simulator only
                drop        a finished rollout discarded (too stale, or pushed out
                            of a full queue); zero length
    training    train       one learner step (``tokens`` = prompt + completion)
                switch      colocated devices bringing the learner state back; simulator only

``step`` on a generate row is the learner step that trained the rollout, −1 if
none did. ``version`` on a generate row is the policy version that produced its
tokens; on a train row the version being trained (= step). ``comm_s`` is the
part of a span spent communicating where compute could not hide it: on a
rollout row its share of its engine's tensor-parallel all-reduces (each decode
step's split evenly among the rollouts in the batch), on a train row the
learner's exposed data-parallel communication; 0 elsewhere, and 0 wherever the
executor cannot tell it apart. Because the summary is computed from the events
alone, the simulator and the executor are summarized by the same code.

``breakdown`` in the summary splits every device-second of the run (wall time ×
devices) by what it went to, per role; colocated devices count once, under the
phase they were in, and their idle time is generation's (training has none:
every device trains together).

``RunSummary`` documents every field of ``summary.json`` with its unit;
``read_summary`` checks a run directory's file against it, so a malformed or
truncated summary is one ``RunRecordError`` naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import numpy as np
import pandas as pd
from asyncrl.scenarios.loading import ScenarioError, describe_validation_error
from asyncrl.scenarios.penalty import TimeToTarget
from asyncrl.scenarios.scenario import ClusterSpec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SUMMARY_FILE = "summary.json"
#: How an executed run ended (``RunSummary.status``); a run that is still going has no summary.
RunStatus = Literal["complete", "interrupted", "failed"]

EVENT_COLUMNS: dict[str, str] = {
    "worker": "string",
    "role": "string",
    "kind": "string",
    "start": "float64",
    "end": "float64",
    "step": "int64",
    "version": "int64",
    "group": "int64",
    "sample": "int64",
    "tokens": "int64",
    "comm_s": "float64",
}
BUSY_KINDS = {"generation": ("generate", "unfinished", "prefill", "sync", "switch"), "training": ("train", "switch")}
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class DevicePools:
    """How many devices each role holds; colocated pools are the same devices."""

    generation: int
    devices_per_engine: int
    training: int
    colocated: bool

    @classmethod
    def of(cls, cluster: ClusterSpec) -> DevicePools:
        return cls(cluster.generation_devices, cluster.devices_per_engine, cluster.training_devices, cluster.colocated)

    @property
    def total(self) -> int:
        return self.generation if self.colocated else self.generation + self.training


def empty_events() -> pd.DataFrame:
    """An event table with no rows and the columns and dtypes of EVENT_COLUMNS."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in EVENT_COLUMNS.items()})


# ── summary.json ────────────────────────────────────────────────────────────────


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


Subject = TypeVar("Subject")


class Simulated(NamedTuple, Generic[Subject]):
    """What a sweep hands back per case: the case (a variant, a grid point) and its simulated summary, read by
    name (``result.summary``); summary None: not simulated (it does not fit in memory, or does not validate)."""

    subject: Subject
    summary: RunSummary | None


def validate_summary(data: Any, source: Path | str = SUMMARY_FILE) -> RunSummary:
    """``data`` as a RunSummary; RunRecordError ``"<source>: <dotted.field>: <problem>"`` if it is not one."""
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        raise RunRecordError(f"{source}: {describe_validation_error(exc)}") from None


def summarize(
    events: pd.DataFrame,
    *,
    backend: str,
    scenario_name: str,
    engines: int,
    concurrency: int,
    devices: DevicePools | None = None,
) -> RunSummary:
    """Every summary figure, from the event table of one run; the device-time breakdown and device-hours
    need ``devices`` (without them they are left out)."""
    train = events[events["kind"] == "train"].sort_values("step")
    wall = float(train["end"].max()) if len(train) else 0.0
    events = events.assign(start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall))
    if "comm_s" not in events:  # a record from before the column existed
        events = events.assign(comm_s=0.0)
    per_sample = _trained_samples(events)
    generation_busy = _busy_seconds(events, "generation")
    training_busy = _busy_seconds(events, "training")
    sample_seconds = _span_seconds(events, ("generate", "unfinished"))
    syncs = events[events["kind"] == "sync"]
    summary = RunSummary(
        backend=backend,
        scenario=scenario_name,
        steps=len(train),
        wall_time_s=wall,
        step_time_s=StepTime(**_stats(np.diff(np.concatenate([[0.0], train["end"].to_numpy()])))),
        throughput=Throughput(
            samples_per_s=_ratio(len(per_sample), wall),
            tokens_per_s=_ratio(float(per_sample["tokens"].sum()), wall),
        ),
        staleness=Staleness(
            **_stats(per_sample["staleness"].to_numpy(), with_max=True),
            token_mean=_token_mean(per_sample),
            histogram={str(k): int(v) for k, v in per_sample["staleness"].value_counts().sort_index().items()},
        ),
        utilization=Utilization(
            generation=_ratio(generation_busy, engines * wall),
            training=_ratio(training_busy, wall),
            generation_slots=_ratio(sample_seconds, engines * concurrency * wall),
        ),
        idle=Idle(
            generation=1.0 - _ratio(generation_busy, engines * wall),
            training=1.0 - _ratio(training_busy, wall),
        ),
        weight_sync_s=_ratio(float((syncs["end"] - syncs["start"]).sum()), engines),
        samples=SampleCounts(**_sample_counts(events, trained=len(per_sample))),
        breakdown=_breakdown(events, devices, wall, generation_busy) if devices is not None else None,
        device_hours=(
            _device_hours(devices.total * wall, steps=len(train), trained=len(per_sample))
            if devices is not None
            else None
        ),
    )
    return summary


def _breakdown(events: pd.DataFrame, devices: DevicePools, wall: float, generation_busy: float) -> Breakdown:
    """Device-seconds per role and category, from events already cut at ``wall`` (see the module docstring);
    ``generation_busy`` is the engines' busy seconds, added over engines."""
    tp, trainers = devices.devices_per_engine, devices.training
    totals = events.assign(seconds=events["end"] - events["start"], comm_s=events["comm_s"].fillna(0.0))
    by_kind = totals.groupby(["role", "kind"], observed=True)[["seconds", "comm_s"]].sum()

    def total(role: str, kind: str, column: str = "seconds") -> float:
        return float(by_kind[column].get((role, kind), 0.0))

    tensor_parallel = total("generation", "generate", "comm_s") + total("generation", "unfinished", "comm_s")
    pauses = total("generation", "prefill") + total("generation", "sync") + total("generation", "switch")
    communication = total("training", "train", "comm_s")
    generation = GenerationTime(
        decode=max(0.0, generation_busy - pauses - tensor_parallel) * tp,
        prefill=total("generation", "prefill") * tp,
        weight_sync=total("generation", "sync") * tp,
        phase_switch=total("generation", "switch") * tp,
        tensor_parallel=tensor_parallel * tp,
        idle=0.0,
    )
    training = TrainingTime(
        compute=(total("training", "train") - communication) * trainers,
        communication=communication * trainers,
        phase_switch=total("training", "switch") * trainers,
        idle=0.0,
    )
    return _with_idle(generation, training, devices, wall)


def _with_idle(generation: GenerationTime, training: TrainingTime, devices: DevicePools, wall: float) -> Breakdown:
    """Idle device-seconds: what each pool's categories leave of its devices × wall (colocated: of one pool)."""
    generation_busy = sum(generation.model_dump().values())
    training_busy = sum(training.model_dump().values())
    if devices.colocated:
        generation_idle = devices.total * wall - generation_busy - training_busy
        training_idle = 0.0
    else:
        generation_idle = devices.generation * wall - generation_busy
        training_idle = devices.training * wall - training_busy
    counts = DeviceCounts(generation=devices.generation, training=devices.training, total=devices.total)
    return Breakdown(
        devices=counts,
        generation=generation.model_copy(update={"idle": max(0.0, generation_idle)}),
        training=training.model_copy(update={"idle": max(0.0, training_idle)}),
    )


def _device_hours(device_seconds: float, *, steps: int, trained: int) -> DeviceHours:
    total = device_seconds / SECONDS_PER_HOUR
    return DeviceHours(total=total, per_step=_ratio(total, steps), per_1k_samples=_ratio(1000.0 * total, trained))


def _trained_samples(events: pd.DataFrame) -> pd.DataFrame:
    """One row per trained rollout: staleness (oldest version) and token-mean staleness."""
    rows = events[(events["kind"] == "generate") & (events["step"] >= 0)]
    if rows.empty:
        return pd.DataFrame({"tokens": [], "staleness": [], "token_staleness": []})
    weighted = rows.assign(weight=rows["version"] * rows["tokens"])
    by_sample = weighted.groupby(["group", "sample"], sort=False)
    tokens = by_sample["tokens"].sum()
    oldest = by_sample["version"].min()
    step = by_sample["step"].first()
    mean_version = (by_sample["weight"].sum() / tokens.where(tokens > 0)).fillna(oldest)
    return pd.DataFrame(
        {"tokens": tokens, "staleness": (step - oldest).astype(np.int64), "token_staleness": step - mean_version}
    )


def _token_mean(per_sample: pd.DataFrame) -> float:
    """Staleness averaged over trained tokens, each token counted once at the version that produced it."""
    token_steps = float((per_sample["token_staleness"] * per_sample["tokens"]).sum())
    return _ratio(token_steps, float(per_sample["tokens"].sum()))


def _sample_counts(events: pd.DataFrame, *, trained: int) -> dict[str, int]:
    kinds = events["kind"]
    finished = events.loc[kinds == "generate", ["group", "sample"]].drop_duplicates()
    in_flight = events.loc[kinds == "unfinished", ["group", "sample"]].drop_duplicates()
    dropped = int((kinds == "drop").sum())
    return {
        "generated": len(finished) + len(in_flight),
        "trained": trained,
        "queued": len(finished) - trained - dropped,
        "in_flight": len(in_flight),
        "dropped": dropped,
    }


def _busy_seconds(events: pd.DataFrame, role: str) -> float:
    """Seconds each worker of ``role`` had any span open, added over workers."""
    spans = events[(events["role"] == role) & events["kind"].isin(BUSY_KINDS[role])]
    total = 0.0
    for _, worker in spans.groupby("worker", sort=False):
        total += union_length(worker["start"].to_numpy(), worker["end"].to_numpy())
    return total


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals [starts[i], ends[i]]."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    opens_block = np.concatenate([[True], starts[1:] > reach[:-1]])
    block_end = np.maximum.reduceat(ends, np.flatnonzero(opens_block))
    return float((block_end - starts[opens_block]).sum())


def _span_seconds(events: pd.DataFrame, kinds: tuple[str, ...]) -> float:
    spans = events[events["kind"].isin(kinds)]
    return float((spans["end"] - spans["start"]).sum())


def _stats(values: np.ndarray, with_max: bool = False) -> dict[str, float]:
    if len(values) == 0:
        stats = {"mean": 0.0, "p50": 0.0, "p95": 0.0}
        return {**stats, "max": 0} if with_max else stats
    stats = {
        "mean": float(np.mean(values)),
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
    }
    return {**stats, "max": int(np.max(values))} if with_max else stats


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else 0.0


def write_run(out_dir: Path, *, scenario_yaml: str, events: pd.DataFrame, summary: RunSummary | None) -> None:
    """Write a run directory; summary.json goes last, so its presence means complete (none: the run goes on)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
    (out_dir / "scenario.yaml").write_text(scenario_yaml)
    events.astype(EVENT_COLUMNS).to_parquet(out_dir / "events.parquet", index=False)
    if summary is not None:
        (out_dir / SUMMARY_FILE).write_text(json.dumps(summary.to_json(), indent=2) + "\n")


def read_summary(run_dir: Path) -> RunSummary:
    """``summary.json`` of a run directory, checked against RunSummary.

    RunRecordError (one line, naming the directory or the file and the field) when the directory or the
    file is missing, the file is not JSON, or a field is missing or of the wrong type.
    """
    path = run_dir / SUMMARY_FILE
    if not run_dir.is_dir():
        raise RunRecordError(f"{run_dir}: no such run directory")
    if not path.is_file():
        raise RunRecordError(f"{run_dir}: no {SUMMARY_FILE} (not a run directory, or the run did not finish)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunRecordError(f"{path}: not valid JSON ({exc})") from None
    return validate_summary(data, source=path)


def read_events(run_dir: Path) -> pd.DataFrame:
    """``events.parquet`` of a run directory, as written (EVENT_COLUMNS)."""
    return pd.read_parquet(run_dir / "events.parquet")
