"""The run record an executor run writes to its ``out`` directory: complete, partial, or at a checkpoint.

    PreviousRun (resume) ── events, metrics before the checkpoint ──┐
    coordinator.event_rows ── this run's events ────────────────────┼──► events.parquet
    coordinator.engine_steps ── what each decode step did ──────────┼──► engine_steps.parquet
    learner loop ── one metrics row per step ───────────────────────┼──► metrics.parquet
    scenario ───────────────────────────────────────────────────────┴──► scenario.yaml, summary.json

The files are the simulator's (``scenarios.record.write_run``, with ``backend:
"executor"``) plus ``metrics.parquet`` (loss, reward, KL, staleness per step).
``summary.json`` is written only when the run ends and says ``status``:
complete, interrupted or failed (and ``resumed_from``, the checkpoint's step,
when the run was resumed; ``dtype``, the engines' number format). At a
checkpoint the events and metrics so far are written, and the summary of that
moment goes to ``checkpoint/progress.json`` with ``status: checkpoint``: a
directory without summary.json is a run that has not ended, or was killed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from asyncrl.executor.messages import STEP_COLUMNS
from asyncrl.scenarios.loading import dump_scenario
from asyncrl.scenarios.record import (
    EVENT_COLUMNS,
    SUMMARY_FILE,
    DevicePools,
    RunStatus,
    RunSummary,
    summarize,
    write_run,
)
from asyncrl.scenarios.scenario import Scenario

ENGINE_STEPS_FILE = "engine_steps.parquet"
PROGRESS_FILE = Path("checkpoint") / "progress.json"


@dataclass
class ExecutionResult:
    summary: RunSummary | None  # None: the run never started (nothing written)
    events: pd.DataFrame
    metrics: pd.DataFrame

    @classmethod
    def empty(cls) -> ExecutionResult:
        """What a run that never started its coordinator returns (it writes nothing)."""
        return cls(None, pd.DataFrame(columns=list(EVENT_COLUMNS)), pd.DataFrame())


@dataclass
class PreviousRun:
    """What a resumed run keeps from before its checkpoint."""

    events: pd.DataFrame
    metrics: pd.DataFrame
    wall_time: float

    @classmethod
    def empty(cls) -> PreviousRun:
        return cls(pd.DataFrame(columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS), pd.DataFrame(), 0.0)

    @classmethod
    def load(cls, out: Path, step: int) -> PreviousRun:
        """Events and metrics of the steps before ``step``; rollouts not trained by then are regenerated."""
        events = pd.read_parquet(out / "events.parquet")
        metrics = pd.read_parquet(out / "metrics.parquet")
        trained_before = (events["step"] >= 0) & (events["step"] < step)
        train = events[(events["kind"] == "train") & trained_before]
        wall = float(train["end"].max()) if len(train) else 0.0
        kept = events[trained_before | ((events["kind"].isin(["sync", "drop"])) & (events["end"] <= wall))]
        return cls(kept.reset_index(drop=True), metrics[metrics["step"] < step].reset_index(drop=True), wall)


class RunRecord:
    """The metrics rows of this run, on top of a previous run's record when resumed; writes the whole record."""

    def __init__(self, scenario: Scenario, out: Path) -> None:
        self.scenario, self.out = scenario, out
        self.previous = PreviousRun.empty()
        self.metrics: list[dict[str, float]] = []
        self.resumed_from: int | None = None

    def continue_from(self, previous: PreviousRun, step: int) -> None:
        self.previous, self.resumed_from = previous, step

    def add_step(self, row: dict[str, float]) -> None:
        self.metrics.append(row)

    def write(
        self,
        status: RunStatus | Literal["checkpoint"],
        event_rows: list[dict[str, Any]],
        engine_steps: list[dict[str, Any]] | None = None,
    ) -> ExecutionResult:
        """Write events.parquet, scenario.yaml, metrics.parquet, engine_steps.parquet (what each decode step
        of this run did; a resumed run keeps only its own), then summary.json with ``status``, or at a
        checkpoint checkpoint/progress.json instead."""
        new_events = pd.DataFrame(event_rows, columns=list(EVENT_COLUMNS))
        events = pd.concat([self.previous.events, new_events], ignore_index=True).astype(EVENT_COLUMNS)
        metrics = pd.concat([self.previous.metrics, pd.DataFrame(self.metrics)], ignore_index=True)
        summary = summarize(
            events,
            backend="executor",
            scenario_name=self.scenario.name,
            engines=self.scenario.cluster.engines,
            concurrency=self.scenario.engine_concurrency,
            devices=DevicePools.of(self.scenario.cluster),
        )
        ended = status != "checkpoint"
        summary = summary.model_copy(
            update={
                "status": status if ended else None,
                "dtype": self.scenario.model.dtype,
                "resumed_from": self.resumed_from,
            }
        )
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / SUMMARY_FILE).unlink(missing_ok=True)
        metrics.to_parquet(self.out / "metrics.parquet", index=False)
        steps = pd.DataFrame(engine_steps or [], columns=["worker", *STEP_COLUMNS])
        steps.to_parquet(self.out / ENGINE_STEPS_FILE, index=False)
        yaml = dump_scenario(self.scenario.resolved())
        write_run(self.out, scenario_yaml=yaml, events=events, summary=summary if ended else None)  # summary last
        if not ended:
            progress = {**summary.to_json(), "status": "checkpoint"}
            (self.out / PROGRESS_FILE).write_text(json.dumps(progress, indent=2) + "\n")
        return ExecutionResult(summary, events, metrics)
