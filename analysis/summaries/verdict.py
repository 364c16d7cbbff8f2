"""``asyncrl plan``'s verdict: the best asynchronous plan against the best synchronous one, in one line.

    simulator.sweep.simulate_sizing ─► ranked (variant, summary) rows (asyncrl size's)
        ─► best sync row (colocated or split, any engine size), best async row
        ─► "verdict: fully async on 16:16 tp4: 1.93× the best sync plan, mean staleness 2.1 (max 5), 0.0% dropped;
            best sync plan: sync colocated 32 tp4 at 6.2 samples/s; switch"

Both are the fastest by samples/s among the rows ``size`` simulated over the same devices; nothing here
simulates. The async plan is named for what it is in the frameworks' words: ``fully async`` (streaming under
verl's rule, a staleness threshold), ``one step off`` (pipelined, N = 1), ``N steps off``; other streaming
schedules by their label (``streaming-2``, ``streaming-4-inflight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...scenarios.record.record import RunSummary

if TYPE_CHECKING:
    from ...scenarios.spec.scenario import Scenario
    from .sizing import SizingResult


@dataclass(frozen=True)
class Verdict:
    """The best sync and async rows of a sizing, and the figures the verdict line states."""

    best_sync: Any  # SizingResult
    best_async: Any | None  # SizingResult; None when no async plan fits

    @property
    def speedup(self) -> float | None:
        """The best async plan's samples/s over the best sync plan's."""
        if self.best_async is None:
            return None
        return _rate(self.best_async.summary) / _rate(self.best_sync.summary)

    def line(self) -> str:
        sync = f"{plan_name(self.best_sync.subject.scenario)} at {_rate(self.best_sync.summary):.3g} samples/s"
        if self.best_async is None or self.speedup is None:
            return f"verdict: no asynchronous plan fits these devices; best sync plan: {sync}"
        summary: RunSummary = self.best_async.summary
        dropped = summary.samples.dropped / max(1, summary.samples.generated)
        advice = "switch" if self.speedup > 1 else "stay sync"
        return (
            f"verdict: {plan_name(self.best_async.subject.scenario)}: {self.speedup:.2f}× the best sync plan, "
            f"mean staleness {summary.staleness.mean:.2f} (max {summary.staleness.max}), {dropped:.1%} dropped; "
            f"best sync plan: {sync}; {advice}"
        )


def verdict(ranked: Sequence[SizingResult]) -> Verdict:
    """The fastest sync and async rows among those simulated (a ScenarioError-free ValueError if no sync row)."""
    simulated = [row for row in ranked if row.summary is not None]
    sync = [row for row in simulated if row.subject.scenario.schedule.kind == "sync"]
    asynchronous = [row for row in simulated if row.subject.scenario.schedule.kind != "sync"]
    if not sync:
        raise ValueError("devices: no synchronous plan fits these devices, nothing to compare with")
    fastest = max(sync, key=lambda row: _rate(row.summary))
    return Verdict(fastest, max(asynchronous, key=lambda row: _rate(row.summary)) if asynchronous else None)


def plan_name(scenario: Scenario) -> str:
    """``fully async on 16:16 tp4``, ``sync colocated 32 tp4``, ``one step off on 4:12 tp2``."""
    cluster = scenario.cluster
    tp = f"tp{cluster.devices_per_engine}"
    if cluster.colocated:
        return f"{schedule_name(scenario)} colocated {cluster.generation_devices} {tp}"
    return f"{schedule_name(scenario)} on {cluster.generation_devices}:{cluster.training_devices} {tp}"


def schedule_name(scenario: Scenario) -> str:
    schedule = scenario.schedule
    if schedule.kind == "sync":
        return "sync"
    if schedule.kind == "pipelined":
        steps = scenario.staleness_bound
        return "one step off" if steps == 1 else f"{steps} steps off"
    verl = getattr(schedule, "staleness_threshold", None) is not None  # verl's fully async rule
    return "fully async" if verl else schedule.label


def _rate(summary: RunSummary | None) -> float:
    assert summary is not None  # only simulated rows are compared
    return summary.throughput.samples_per_s
