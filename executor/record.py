"""The run record an executor run writes to its ``out`` directory: complete, partial, or at a checkpoint.

    PreviousRun (resume) ── events, metrics before the checkpoint ──┐
    coordinator.event_rows ── this run's events ────────────────────┼──► events.parquet
    coordinator.engine_steps ── what each decode step did ──────────┼──► engine_steps.parquet
    learner loop ── one metrics row per step ───────────────────────┼──► metrics.parquet
    evaluation (run.eval_every) ── held-out answers ────────────────┼──► eval.parquet
    scenario ───────────────────────────────────────────────────────┴──► scenario.yaml, summary.json

The files are the simulator's (``scenarios.record.record.RunRecord.write``, with ``backend:
"executor"``) plus the tables ``metrics`` (loss, reward, KL, staleness per step) and
``engine_steps``.
``summary.json`` is written only when the run ends and says ``status``:
complete, interrupted or failed (and ``resumed_from``, the checkpoint's step,
when the run was resumed; ``dtype``, the engines' number format). At a
checkpoint the events and metrics so far are written, and the summary of that
moment goes to ``checkpoint/progress.json`` with ``status: checkpoint``: a
directory without summary.json is a run that has not ended, or was killed. A run
resumed after its learner died (``--auto-resume``: ``executor.processes.supervisor``) records the
death as a ``restart`` row of the learner and ``lost`` rows (``learner_restart_rows``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from ..scenarios.record.record import EVENT_COLUMNS, RunRecord, RunStatus, event_row
from ..scenarios.record.run_summary import Throughput
from ..scenarios.spec.scenario import Scenario
from .processes.messages import STEP_COLUMNS

PROGRESS_FILE = Path("checkpoint") / "progress.json"


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
        """Events and metrics of the steps before ``step``; rollouts not trained by then are regenerated. Loads,
        drops, restarts and lost rollouts before that step's end are kept."""
        events = pd.read_parquet(out / "events.parquet")
        metrics = pd.read_parquet(out / "metrics.parquet")
        trained_before = (events["step"] >= 0) & (events["step"] < step)
        train = events[(events["kind"] == "train") & trained_before]
        wall = float(train["end"].max()) if len(train) else 0.0
        kept = events[
            trained_before | ((events["kind"].isin(["sync", "drop", "restart", "lost"])) & (events["end"] <= wall))
        ]
        return cls(kept.reset_index(drop=True), metrics[metrics["step"] < step].reset_index(drop=True), wall)


@dataclass(frozen=True)
class LearnerRestart:
    """What a run resumed after its learner died knows of the death."""

    clock_zero: float  # time.time() at the run clock's zero: the resumed run keeps the dead one's clock
    died_at: float  # when the learner died, on the run clock (s)
    groups_started: (
        int  # groups the dead learner had started, as it last reported (its lost ones from the checkpoint's)
    )


def learner_restart_rows(
    restart: LearnerRestart, first_group: int, group_size: int, now: float
) -> list[dict[str, Any]]:
    """A resumed run's record of its learner's death: the ``restart`` row (death to now) and a zero-length ``lost``
    row per sample of each group the dead learner had started from ``first_group`` on."""
    rows = [event_row("learner", "restart", restart.died_at, now)]
    for group in range(first_group, restart.groups_started):
        rows += [
            event_row("learner", "lost", restart.died_at, restart.died_at, group=group, sample=s)
            for s in range(group_size)
        ]
    return rows


def _with_loss_samples(throughput: Throughput, metrics: pd.DataFrame, wall: float) -> Throughput:
    """``throughput`` with ``loss_samples_per_s``: the metrics' ``samples`` (those the loss trained on) over ``wall``."""
    if "samples" not in metrics or wall <= 0:
        return throughput
    return throughput.model_copy(update={"loss_samples_per_s": float(metrics["samples"].sum()) / wall})


class RunLog:
    """The metrics rows of this run, on top of a previous run's record when resumed; writes the whole record."""

    def __init__(self, scenario: Scenario, out: Path) -> None:
        self.scenario, self.out = scenario, out
        self.previous = PreviousRun.empty()
        self.metrics: list[dict[str, float]] = []
        self.resumed_from: int | None = None
        self.evaluation: pd.DataFrame | None = (
            None  # eval.parquet's rows (executor.learning.evaluation), when evaluated
        )

    def continue_from(self, previous: PreviousRun, step: int) -> None:
        self.previous, self.resumed_from = previous, step

    def add_step(self, row: dict[str, float]) -> None:
        self.metrics.append(row)

    def write(
        self,
        status: RunStatus | Literal["checkpoint"],
        event_rows: list[dict[str, Any]],
        engine_steps: list[dict[str, Any]] | None = None,
    ) -> RunRecord:
        """Write the run record (events, scenario, the tables ``metrics`` and ``engine_steps``: what each decode
        step of this run did, a resumed run keeping only its own), then summary.json with ``status``, or at a
        checkpoint checkpoint/progress.json instead; the record written."""
        new_events = pd.DataFrame(event_rows, columns=list(EVENT_COLUMNS))
        events = pd.concat([self.previous.events, new_events], ignore_index=True).astype(EVENT_COLUMNS)
        metrics = pd.concat([self.previous.metrics, pd.DataFrame(self.metrics)], ignore_index=True)
        steps = pd.DataFrame(engine_steps or [], columns=["worker", *STEP_COLUMNS])
        evaluation = {"eval": self.evaluation} if self.evaluation is not None else {}
        record = RunRecord.of(self.scenario, events, "executor", metrics=metrics, engine_steps=steps, **evaluation)
        assert record.summary is not None  # RunRecord.of summarizes
        ended = status != "checkpoint"
        summary = record.summary.model_copy(
            update={
                "status": status if ended else None,
                "dtype": self.scenario.model.dtype,
                "resumed_from": self.resumed_from,
                "throughput": _with_loss_samples(record.summary.throughput, metrics, record.summary.wall_time_s),
            }
        )
        written = replace(record, summary=summary if ended else None).write(self.out)  # summary.json last
        if not ended:
            progress = {**summary.to_json(), "status": "checkpoint"}
            (written / PROGRESS_FILE).parent.mkdir(exist_ok=True)
            (written / PROGRESS_FILE).write_text(json.dumps(progress, indent=2) + "\n")
        return replace(record, summary=summary)
