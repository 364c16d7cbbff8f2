"""The simulated cluster: engines, the rollout queue, the learner, weight sync.

    engines ──finished samples / groups──► ScheduleState ──take──► learner
       ▲                                        │                    │
       └──── Load / Start (dispatch) ◄──────────┴──── publish(v) ◄───┘

Every decision is ``scenarios.rules.state.ScheduleState``'s, the same object the
executor's coordinator holds; this module applies its answers to simulated
engines and moves simulated time. The live per-group state is in
``simulator.rollouts``; the recorder only appends. ``simulate`` returns the
run's record (``scenarios.record.record.RunRecord``).

One decision per instant: engines that finish at the same moment all report
before the state is asked to dispatch (``AfterInstant``), as the executor's
coordinator drains every actor's message before it dispatches; otherwise the
first engine to report would take work the others, free at that moment too,
were meant to share.

Sweeps may end a run early (``run(until_converged=Tolerance(...))``): once
its step time and staleness have converged after step k
(``simulator.convergence``), the run is cut short to end after step k + bound
(the schedule's staleness bound), as if the scenario had said so from the
start, so it still ends with the drain a run's last steps see;
``simulator.summary`` adds the steps skipped, each worth a step of the steady
span (``Simulation.steady``). A run with ``run.failures`` (``simulator.failures``) is never ended early:
its failures would be left out.

The cyclic garbage collector is off while a run runs (``without_cycle_collection``): the run makes no
cyclic garbage (its objects are freed by reference counting; ``tests/test_simulation_gc.py`` holds every
shipped scenario to that), yet its millions of short-lived tuples and events set off collections that
scanned every object in the process, a tenth of a sizing run's time.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.events import EventPriority

from ..scenarios.record.record import RunRecord
from ..scenarios.rules.actions import Load, LoadEmpty, Regenerate, Start
from ..scenarios.rules.cores import core_share
from ..scenarios.rules.policy import FinishedGroup
from ..scenarios.rules.state import ScheduleState
from ..scenarios.rules.workload import LengthStream
from ..scenarios.spec.scenario import Scenario
from .budget import plan
from .convergence import Tolerance, steady_span
from .costs import CostModel, cost_model
from .dormant import Dormant
from .engine import Engine
from .failures import EngineFailures
from .host import Computation, Host
from .learner_costs import LearnerStep, attention_weight, data_parallel_ranks
from .recording.recorder import Recorder
from .rollouts import Rollouts

if TYPE_CHECKING:
    import pandas as pd

StepCallback = Callable[[int, float], None]

DORMANT_AT_LEAST = 8  # engines loading together that go dormant: fewer load one by one (numpy has a fixed cost)

LATE = EventPriority(2)  # after SimPy's URGENT (0) and NORMAL (1): once everything else due at an instant


class AfterInstant(simpy.Event):
    """An event processed once every other event due at this instant has been (SimPy's ``Timeout(0)``,
    at a lower priority)."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok, self._value = True, None
        env.schedule(self, LATE)


class Simulation:
    """One simulated run: engines and the learner act on one ``ScheduleState``."""

    def __init__(self, scenario: Scenario, costs: CostModel | None = None, memory_share: int = 1) -> None:
        """``memory_share``: simulations running at once in this machine's memory (a sweep's workers), each
        budgeted a share of it."""
        budget = plan(scenario, share=memory_share)  # before anything is allocated: a run that does not fit is refused
        self.env = simpy.Environment()
        self.scenario = scenario
        self.costs = costs or cost_model(scenario)
        self.state = ScheduleState(scenario, scenario.cluster.engines)
        self.lengths = LengthStream(scenario)
        self.rollouts = Rollouts(scenario.workload.samples_per_prompt, max_samples=budget.rollouts)
        self.recorder = Recorder(self.rollouts, data_parallel_ranks(scenario), attention_weight(scenario))
        self.host = Host(
            core_share(scenario, self.costs.time_slicing()),
            self.costs.learner_contention(),
            self.costs.engine_contention(),
        )
        self.ahead: set[Engine] = set()  # engines refused admission with quiet finishes planned ahead
        self.engines = [
            Engine(self.env, index, scenario, self.costs, self.rollouts, self, self.host, self.ahead)
            for index in range(scenario.cluster.engines)
        ]
        self.learner = Computation(self.env, self.host, scenario.training_devices)
        self._wake_s = self.costs.engine_wake()  # an idle engine's delay to act on work (constant per run)
        self.dormant = Dormant(self.engines, self._wake_s)  # engines holding nothing, loading weights together
        self.learner_wake: simpy.Event | None = None  # set while the learner waits for step ``waiting_for``'s batch
        self.waiting_for = 0
        self.deciding: AfterInstant | None = None  # the decision due at the end of this instant, if deferred
        self._groups_in = False  # groups completed since the last decision: the learner may take
        self.done = self.env.event()
        self.steps = scenario.run.steps  # learner steps this run takes (fewer once ended early)
        self.steady: tuple[int, int] | None = None  # steps [first, last) of the steady span, if ended early
        self._step_times: list[float] = []
        self._last_step_end = 0.0
        self._staleness: list[float] = []  # mean staleness of each step's batch
        self.learner_steps: list[LearnerStep] = []  # what each learner step cost, by part (calibration reads it)
        failures = scenario.run.failures
        self.failures = EngineFailures(self, failures, self.costs) if failures and failures.plans_any else None

    # Engines report (the Listener protocol).

    def finished(self, engine: Engine, samples: int, groups: list[int]) -> simpy.Event | None:
        state = self.state
        state.samples_finished(engine.index, samples)
        if groups:
            version_of = self.rollouts.version_of
            for group in groups:
                if state.overflows():
                    self._confirm_refused()  # the drop may let them in
                    self._record_drops(state.group_finished(group, version_of(group)))
                else:
                    state.group_finished(group, version_of(group))  # (drops none)
            self._groups_in = True
        return self._decide_after_instant()

    def _decide_after_instant(self) -> simpy.Event | None:
        """Decide once every report of this instant is in: now, when nothing else is due at this instant
        (the common case, no SimPy event), else at the end of it; the event to wait for in that case."""
        if self.deciding is None:
            if self.env.peek() > self.env.now:
                self._decide()
            else:
                self.deciding = AfterInstant(self.env)
                self.deciding.callbacks.append(self._decide)
        return self.deciding

    def _decide(self, _: simpy.Event | None = None) -> None:
        """The instant's decision: dispatch, then let the learner see the groups that came in (the
        coordinator's receiver drains its queue, dispatches, then wakes the learner)."""
        self.deciding = None
        if self._groups_in:
            self._groups_in = False
            wake = self.learner_wake
            if wake is not None and not wake.triggered and self.state.may_be_ready(self.waiting_for):
                wake.succeed()  # (not ready: the learner would find nothing to take, so it sleeps on)
        self.dispatch()

    def retired(self, engine: Engine, samples: int) -> None:
        self.state.samples_finished(engine.index, samples)

    # Decisions applied.

    def dispatch(self) -> None:
        """Apply what the state says to do now: lost groups again, weight loads, then group starts (in that
        order). Engines with nothing in flight load together, as dormant engines (``simulator.dormant``)."""
        regenerate, loads, load_empty, starts = self.state.dispatch_grouped()
        self.recorder.decide()
        for rank, action in enumerate(regenerate, start=-len(regenerate)):
            if isinstance(action, Load):
                self._load(action.engine, action.version, rank)
            else:
                self._regenerate(action)
        for load in loads:
            self._load(load.engine, load.version, load.engine)
        for group in load_empty:
            self._load_dormant(group)
        for start in starts:
            self._start(start)

    def engine(self, index: int) -> Engine:
        """Engine ``index``, awake: its own state in it (``simulator.dormant``), brought to now."""
        engine = self.engines[index]
        if index in self.dormant.asleep:
            self.dormant.wake(engine)
        engine.prepare(self.env.now)
        if self._wake_s and engine.idle(self.env.now):
            engine.wake_up(self._wake_s)  # work handed to an idle engine reaches it this much later
        return engine

    def _load(self, index: int, version: int, rank: int) -> None:
        engine = self.engine(index)
        start, loaded, ready = engine.load(version)
        self.recorder.sync(index, start, loaded, version, rank)
        if ready > loaded:
            self.recorder.switch(index, loaded, ready, rank)
        if engine.in_flight:
            engine.replan()  # (an empty engine's load is all pause: nothing to plan until it gets work)

    def _load_dormant(self, group: LoadEmpty) -> None:
        if len(group.engines) < DORMANT_AT_LEAST:
            for index in group.engines:
                self._load(index, group.version, index)
            return
        engines = np.asarray(group.engines, dtype=np.int64)
        done = self.dormant.load(engines, group.version, self.env.now)
        self.recorder.syncs_of(engines, done.start, done.loaded, group.version)
        switching = done.ready > done.loaded
        if switching.any():
            self.recorder.switches_of(engines[switching], done.loaded[switching], done.ready[switching])

    def _regenerate(self, action: Regenerate) -> None:
        now, rollouts = self.env.now, self.rollouts
        engine = self.engine(action.engine)
        for group in action.groups:
            lengths = rollouts.restart_group(
                group, engine.index, now, engine.version, engine.progress, len(engine.loads)
            )
            prefill = engine.start(group, rollouts.prompt_of(group), lengths)
            rollouts.prefilled_again(group, prefill.start, prefill.end)
        engine.replan()

    def _start(self, action: Start) -> None:
        now = self.env.now
        engine = self.engine(action.engine)
        index, loads = engine.index, engine.loads
        next_group, start_group, prefill = self.lengths.next_group, self.rollouts.start_group, self.rollouts.prefilled
        for group in action.groups:  # (one burst may start hundreds: the calls are bound once)
            prompt, lengths = next_group()
            start_group(index, now, engine.version, prompt, engine.progress, len(loads), lengths)
            prefill(*engine.start(group, prompt, lengths))
        engine.replan()

    def _confirm_refused(self) -> None:
        """Before a change that may reopen admission (a publish, a take, a drop): engines that had room
        and were refused plan finishes ahead, and the state must see those already past, since
        their loads decide the split. It sees them as the coordinator would: before the change."""
        now = self.env.now
        due = [engine for engine in self.ahead if engine.has_past(now)]  # (on a large cluster, most have none yet)
        for engine in sorted(due, key=lambda engine: engine.index):  # the others have nothing to confirm
            engine.confirm(now)

    def _record_drops(self, dropped: Sequence[FinishedGroup]) -> None:
        for item in dropped:
            self.recorder.dropped(item.group, self.env.now)
            self.rollouts.dropped(item.group)

    # The learner.

    def _learner(
        self, on_step: StepCallback | None, until_converged: Tolerance | None
    ) -> Generator[simpy.Event, None, None]:
        env = self.env
        self.state.publish(self.state.first_version)  # the starting weights, loadable as the executor's are
        self.dispatch()  # the first groups
        step = 0
        while step < self.steps:
            batch = yield from self._collect_batch(step)
            yield from self._switch_to_training()
            if self.costs.train_start():
                yield env.timeout(self.costs.train_start())  # the batch's report reaches the learner, which collates it
            tokens = self.recorder.batch_tokens(batch, self.scenario.algorithm.updates_per_step)
            cost = self.costs.learner_step(tokens)
            self.learner_steps.append(cost)
            self.rollouts.trained(batch, step)
            start = env.now
            yield from self.learner.run(cost.total_s)
            self.recorder.train(step, start, env.now, tokens.actual, cost.communication_s)
            if until_converged is not None and self.steady is None:
                self._check_convergence(step, batch, until_converged)
            self._confirm_refused()
            self.state.publish(step + 1)
            self.dispatch()
            if on_step is not None:
                on_step(step, env.now)
            self.rollouts.pack_settled()  # the groups this step settled are read no more
            step += 1
        self.done.succeed()

    def _switch_to_training(self) -> Generator[simpy.Event, None, None]:
        """Colocated: the devices bring the learner state back before the step (no time when it stayed)."""
        duration = self.costs.switch_to_training()
        if duration > 0:
            self.recorder.decide()
            self.recorder.switch(-1, self.env.now, self.env.now + duration)
            yield self.env.timeout(duration)

    def _check_convergence(self, step: int, batch: list[int], tolerance: Tolerance) -> None:
        """After step ``step``: note its time and staleness; once converged, end the run early."""
        self._step_times.append(self.env.now - self._last_step_end)
        self._last_step_end = self.env.now
        version_of = self.rollouts.version_of
        self._staleness.append(step - sum(version_of(group) for group in batch) / len(batch))
        first = steady_span(self._step_times, self._staleness, tolerance, self.steps)
        end = step + 1 + self.scenario.staleness_bound
        if first is not None and end < self.steps:
            self.steady = (first, step + 1)
            self._end_at(end)

    def _end_at(self, steps: int) -> None:
        """End the run after ``steps`` learner steps, as if the scenario said so from the start.

        Called before the state learns of the step just taken (latest version ``steps − bound − 1``):
        admission reaches at most ``bound + 1`` batches past the latest version, so no group admitted
        so far lies beyond the new end and the state's decisions up to now stand; from now on they see
        the shorter run, which ends with the drain a full run ends with.
        """
        run = self.scenario.run.model_copy(update={"steps": steps})
        self.state.use_scenario(self.scenario.model_copy(update={"run": run}))
        self.steps = steps

    def _collect_batch(self, step: int) -> Generator[simpy.Event, None, list[int]]:
        """Wait until the state forms step ``step``'s batch; return its group ids."""
        while True:
            if self.state.may_be_ready(step):
                self._confirm_refused()
            taken = self.state.take(step)
            self._record_drops(taken.dropped)
            if taken.batch or taken.dropped:
                self.dispatch()  # the queue shrank, or fewer groups are live
            if taken.batch:
                return [item.group for item in taken.batch]
            self.learner_wake, self.waiting_for = self.env.event(), step
            yield self.learner_wake
            self.learner_wake = None

    def run(self, on_step: StepCallback | None = None, until_converged: Tolerance | None = None) -> None:
        """Simulate to the last learner step, or, with ``until_converged``, end early once converged
        (never with failures planned)."""
        if self.failures is not None:
            self.env.process(self.failures.process())
            until_converged = None
        if until_converged is not None:
            until_converged = until_converged.in_periods_of(self.scenario.schedule.step_period)
        self.env.process(self._learner(on_step, until_converged))
        with without_cycle_collection():
            self.env.run(until=self.done)
        self.dormant.wake_all()
        for engine in self.engines:
            engine.settle(self.env.now)
        self.rollouts.close()

    def events(self) -> pd.DataFrame:
        """The run's event table (call after ``run``)."""
        import pandas as pd

        events = self.recorder.events(
            [engine.progress for engine in self.engines],
            [engine.loads for engine in self.engines],
            self.env.now,
            self.costs.tensor_parallel(),
        )
        if self.failures is None:
            return events
        return pd.concat([events, self.failures.log.rows()], ignore_index=True)


@contextmanager
def without_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector off inside, as it was after (reference counting still frees everything)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def simulate(scenario: Scenario, on_step: StepCallback | None = None, costs: CostModel | None = None) -> RunRecord:
    """Simulate ``scenario`` to its last learner step; its record (events and their summary), in memory."""
    sim = Simulation(scenario, costs)
    sim.run(on_step)
    return RunRecord.of(scenario, sim.events(), backend="simulator")
