"""The run record both backends write, and the summary computed from it.

    run dir/
      scenario.yaml     the resolved scenario (defaults written out)
      events.parquet    one row per span (EVENT_COLUMNS)
      summary.json      figures computed from the events by ``summarize`` (``RunSummary``)

Event kinds, by role:

    generation  generate    one rollout (prefill included) under one policy version;
                            with in-flight updates, one row per version it saw
                unfinished  a rollout still running when the run ended, cut there
                sync        an engine loading new weights (``version`` = loaded)
                drop        a finished rollout discarded (too stale, or pushed out
                            of a full queue); zero length
    training    train       one learner step (``tokens`` = prompt + completion)

``step`` on a generate row is the learner step that trained the rollout, −1 if
none did. ``version`` on a generate row is the policy version that produced its
tokens; on a train row the version being trained (= step). Because the summary
is computed from the events alone, the simulator and the executor are
summarized by the same code.

``RunSummary`` documents every field of ``summary.json`` with its unit;
``read_summary`` checks a run directory's file against it, so a malformed or
truncated summary is one ``RunRecordError`` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from asyncrl.scenarios.loading import ScenarioError, describe_validation_error
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SUMMARY_FILE = "summary.json"

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
}
BUSY_KINDS = {"generation": ("generate", "unfinished", "sync"), "training": ("train",)}


def empty_events() -> pd.DataFrame:
    """An event table with no rows and the columns and dtypes of EVENT_COLUMNS."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in EVENT_COLUMNS.items()})


# ── summary.json ────────────────────────────────────────────────────────────────


class RunRecordError(ScenarioError):
    """A path that is not a complete run record; the command line prints it as one line."""


class _SummarySection(BaseModel):
    # Fields a later version adds are kept, not refused: an older reader still reads the run.
    model_config = ConfigDict(extra="allow")


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
        description="staleness averaged over tokens: a rollout updated in flight counts each token at the "
        "version that produced it (steps)"
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
    status: str | None = Field(
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

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict ``summary.json`` holds, fields in their documented order; unset optional ones left out."""
        return self.model_dump(mode="json", exclude_none=True)


def validate_summary(data: Any, source: Path | str = SUMMARY_FILE) -> RunSummary:
    """``data`` as a RunSummary; RunRecordError ``"<source>: <dotted.field>: <problem>"`` if it is not one."""
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        raise RunRecordError(f"{source}: {describe_validation_error(exc)}") from None


def summarize(
    events: pd.DataFrame, *, backend: str, scenario_name: str, engines: int, concurrency: int
) -> dict[str, Any]:
    """Every summary figure, from the event table of one run, as the JSON-ready dict of a RunSummary."""
    train = events[events["kind"] == "train"].sort_values("step")
    wall = float(train["end"].max()) if len(train) else 0.0
    events = events.assign(start=events["start"].clip(upper=wall), end=events["end"].clip(upper=wall))
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
            token_mean=float(per_sample["token_staleness"].mean()) if len(per_sample) else 0.0,
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
    )
    return summary.to_json()


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
        total += _union_length(worker["start"].to_numpy(), worker["end"].to_numpy())
    return total


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
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


def write_run(out_dir: Path, *, scenario_yaml: str, events: pd.DataFrame, summary: dict[str, Any] | None) -> None:
    """Write a run directory; summary.json goes last, so its presence means complete (none: the run goes on)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
    (out_dir / "scenario.yaml").write_text(scenario_yaml)
    events.astype(EVENT_COLUMNS).to_parquet(out_dir / "events.parquet", index=False)
    if summary is not None:
        (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """``summary.json`` of a run directory, checked against RunSummary, as a dict.

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
    return validate_summary(data, source=path).to_json()


def read_events(run_dir: Path) -> pd.DataFrame:
    """``events.parquet`` of a run directory, as written (EVENT_COLUMNS)."""
    return pd.read_parquet(run_dir / "events.parquet")
