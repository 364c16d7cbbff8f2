"""Engine failures in a simulated run (``run.failures``): a SimPy process that kills engines and restarts them.

    failure_plan(run.failures) ─► at each failure's time:
        engine.fail(now) ─► the rollouts it held ─► FailureLog: a ``lost`` row per sample of each group
        ScheduleState.engine_lost(engine, groups) ─► dispatch: the groups go out again (``Regenerate``)
        restart_s later: ScheduleState.engine_restored(engine) ─► dispatch: Load, then work

What a restart costs is what the executor pays (``scenarios.spec.failures`` has the rules): the engine is
down for ``restart_s`` (``run.failures.restart_s``, else the cost model's ``engine_start``: a process
start and a model load), then loads the weights like any engine (a weight sync), and every group it
held is generated again from its first token, on whichever engine may take it first. A failure that
hits an engine already down changes nothing. The lost work and the restarts are rows of the event
table (``lost``, ``restart``) and, in sweeps, the summary's ``restarts``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, NamedTuple

import simpy

from ..scenarios.files.errors import ScenarioError
from ..scenarios.record.record import EVENT_COLUMNS, event_row
from ..scenarios.record.run_summary import Restarts
from ..scenarios.spec.failures import FailureSpec, failure_plan

if TYPE_CHECKING:
    import pandas as pd

    from .costs import CostModel
    from .simulation import Simulation


class LostSpan(NamedTuple):
    """One sample of a group lost with its engine, from the group's start to the loss (or its own end)."""

    engine: int
    group: int
    sample: int  # within its group
    start: float  # (s)
    end: float  # (s)
    version: int
    tokens: int  # generated before the loss


class RestartSpan(NamedTuple):
    """An engine down: from its failure until its replacement can load weights."""

    engine: int
    start: float  # (s)
    end: float  # (s)


class FailureLog:
    """The lost samples and the restarts of a run, appended as they happen."""

    def __init__(self) -> None:
        self.lost: list[LostSpan] = []
        self.restarts: list[RestartSpan] = []

    def rows(self) -> pd.DataFrame:
        """``lost`` and ``restart`` rows of the event table."""
        import pandas as pd

        lost = [
            event_row(
                s.engine, "lost", s.start, s.end, version=s.version, group=s.group, sample=s.sample, tokens=s.tokens
            )
            for s in self.lost
        ]
        restarts = [event_row(span.engine, "restart", span.start, span.end) for span in self.restarts]
        return pd.DataFrame([*lost, *restarts], columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)

    def summary(self, wall: float) -> Restarts | None:
        """The summary's ``restarts`` (spans cut at ``wall``, as the event table's summary cuts them)."""
        if not self.restarts:
            return None
        down = sum(min(span.end, wall) - min(span.start, wall) for span in self.restarts)
        return Restarts(engines=len(self.restarts), regenerated_samples=len(self.lost), down_s=down)


class EngineFailures:
    """Kills the engines ``spec`` plans to fail, at their times, and restarts them ``restart_s`` later.

    A run whose engines fail faster than the learner can take a step would never end: after
    ``STALL_FAILURES`` per engine with no learner step between them, it is refused (ScenarioError).
    """

    STALL_FAILURES = 20

    def __init__(self, sim: Simulation, spec: FailureSpec, costs: CostModel) -> None:
        self.sim, self.spec = sim, spec
        self.restart_s = spec.restart_s if spec.restart_s is not None else costs.engine_start()
        self.log = FailureLog()
        self._stalled = 0  # failures since the last learner step
        self._steps_seen = 0

    def process(self) -> Generator[simpy.Event, None, None]:
        env, scenario = self.sim.env, self.sim.scenario
        plan = failure_plan(self.spec, scenario.cluster.engines, scenario.run.seed)
        failure = next(plan, None)
        while failure is not None:
            if failure.time > env.now:
                yield env.timeout(failure.time - env.now)
            self._check_progress(failure.time)
            while failure is not None and failure.time <= env.now:  # every engine of this moment (a node)
                self.fail(failure.engine)
                failure = next(plan, None)
            self.sim._confirm_refused()
            self.sim.dispatch()

    def _check_progress(self, now: float) -> None:
        steps = len(self.sim.recorder.trains)
        self._stalled = 0 if steps > self._steps_seen else self._stalled + 1
        self._steps_seen = steps
        if self._stalled > self.STALL_FAILURES * self.sim.scenario.cluster.engines:
            raise ScenarioError(
                f"run.failures: {self._stalled} failures by {now:,.0f} s with no learner step between them: "
                f"engines fail faster than they can generate a batch (restart {self.restart_s:g} s); the run "
                "would never end"
            )

    def fail(self, index: int) -> None:
        """Engine ``index`` dies now: its groups are lost, and its replacement comes ``restart_s`` later.
        The caller dispatches once every engine failing at this moment (a node) is down, so none is
        handed another's lost groups."""
        sim, now = self.sim, self.sim.env.now
        if index in sim.state.down:
            return
        sim._confirm_refused()  # the state must see every engine's finishes up to now before it re-plans
        running = dict(sim.dormant.wake(sim.engines[index]).fail(now))
        rollouts, size = sim.rollouts, sim.rollouts.group_size
        groups = sorted({sample // size for sample in running})
        for group in groups:
            at, first = group - rollouts.base, group * size - rollouts.sample_base  # in the live lists
            for offset in range(size):
                sample = group * size + offset
                finished = not math.isnan(rollouts.end[first + offset])
                end = rollouts.end[first + offset] if finished else now
                drawn = rollouts.tokens[first + offset]
                tokens = drawn if finished else round(min(running[sample], drawn))
                span = LostSpan(index, group, offset, rollouts.start[at], end, rollouts.version[at], tokens)
                self.log.lost.append(span)
            rollouts.lose(group, now, sim.engines[index].progress)
        sim.state.engine_lost(index, groups)
        self.log.restarts.append(RestartSpan(index, now, now + self.restart_s))
        sim.env.process(self._restore(index))

    def _restore(self, index: int) -> Generator[simpy.Event, None, None]:
        yield self.sim.env.timeout(self.restart_s)
        self.sim._confirm_refused()
        self.sim.state.engine_restored(index)
        self.sim.dispatch()
