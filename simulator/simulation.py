"""The simulated cluster: engines, the rollout queue, the learner, weight sync.

    engines ──finished groups──► queue ──select_batch──► learner
       ▲                                                    │
       └──────────── new version (sync_target, load) ◄──────┘

Every decision goes through ``scenarios.policy``; this module only keeps the
state those functions read (latest version, live groups, the queue) and moves
simulated time. ``simulate`` returns the run's events and summary.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import pandas as pd
import simpy

from scenarios import policy
from scenarios.policy import FinishedGroup
from scenarios.record import summarize
from scenarios.scenario import Scenario
from scenarios.workload import LengthStream
from simulator.costs import CostModel, cost_model
from simulator.engine import Engine
from simulator.recorder import Recorder

StepCallback = Callable[[int, float], None]


@dataclass
class SimulationResult:
    events: pd.DataFrame
    summary: dict[str, Any]


class Simulation:
    """Shared state of one simulated run; engines and the learner act on it."""

    def __init__(self, scenario: Scenario, costs: CostModel | None = None) -> None:
        self.env = simpy.Environment()
        self.scenario = scenario
        self.costs = costs or cost_model(scenario)
        self.group_size = scenario.workload.samples_per_prompt
        self.latest_version = 0
        self.live_groups = 0  # started and not dropped: the next group's live index
        self.queue: list[FinishedGroup] = []
        self.finished_per_batch: dict[int, int] = {}
        self.lengths = LengthStream(scenario)
        self.recorder = Recorder(scenario)
        # Per group, indexed by group id (the order groups started); prompt lengths and join
        # progress live in the recorder (group_prompt, group_join), which engines read too.
        self.remaining: list[int] = []
        self.batch_of: list[int] = []
        self.engines = [Engine(self, index) for index in range(scenario.cluster.engines)]
        self.engines_with_room = len(self.engines)  # engines that could take one more group
        self.learner_wake: simpy.Event | None = None
        self.done = self.env.event()

    # Called by engines.

    def fair_share(self, admissible: int) -> int:
        """Groups one engine may take of ``admissible``: split evenly over engines with room.

        Without this the first engine to wake would take a whole burst (say, a
        sync batch) while the others idle; a dispatcher balances load instead.
        """
        if admissible <= 1:
            return admissible
        return -(-admissible // max(1, self.engines_with_room))

    def start_group(self, engine: Engine) -> tuple[int, int, list[int]]:
        """Start the next group on ``engine``: its id, prompt length and completion lengths."""
        group = len(self.remaining)
        prompt, lengths = self.lengths.next_group()
        self.remaining.append(self.group_size)
        self.batch_of.append(policy.batch_of(self.live_groups, self.scenario))
        self.live_groups += 1
        self.recorder.group_started(group, engine, self.env.now, prompt, lengths)
        return group, prompt, lengths

    def group_finished(self, group: int, now: float) -> None:
        """The last rollout of ``group`` finished: put the group in the queue."""
        pushed_out = policy.overflow(self.scenario, queued_groups=len(self.queue))
        if pushed_out:
            self.drop([self.queue[pos] for pos in range(pushed_out)], now)
            self.notify_engines()  # fewer live groups: admission may reopen
        version = self.recorder.group_version[group]
        batch = self.batch_of[group]
        self.queue.append(FinishedGroup(group=group, batch=batch, version=version))
        self.finished_per_batch[batch] = self.finished_per_batch.get(batch, 0) + 1
        if self.learner_wake is not None and not self.learner_wake.triggered:
            self.learner_wake.succeed()

    # Called by the learner and the queue.

    def drop(self, groups: list[FinishedGroup], now: float) -> None:
        for item in groups:
            self.queue.remove(item)
            self.finished_per_batch[item.batch] -= 1
            self.recorder.group_dropped(item.group, now)
        self.live_groups -= len(groups)

    def notify_engines(self) -> None:
        """The latest version, the live count or the queue changed: wake engines that can act.

        Idle engines always wake (they may have weights to load). An engine busy
        decoding is interrupted only if new weights should reach its rollouts, or
        if the policy would now let it start a group it was refused before.
        """
        streaming = not policy.exact_versions(self.scenario)
        in_flight_updates = streaming and self.scenario.schedule.in_flight_updates
        for engine in self.engines:
            if (
                engine.wake is not None
                or (in_flight_updates and engine.version < self.latest_version)
                or (streaming and engine.blocked_with_room and self.admissible(engine) > 0)
            ):
                engine.poke()

    def admissible(self, engine: Engine) -> int:
        """Groups the policy lets ``engine`` start now."""
        return policy.admissible_groups(
            self.scenario, engine_version=engine.version, live_groups=self.live_groups, queued_groups=len(self.queue)
        )

    def _learner(self, on_step: StepCallback | None) -> Generator[simpy.Event, None, None]:
        env = self.env
        for step in range(self.scenario.run.steps):
            batch = yield from self._collect_batch(step)
            self.notify_engines()  # the queue shrank
            tokens = self.recorder.batch_tokens(batch, self.scenario.algorithm.updates_per_step)
            duration = self.costs.train_step(tokens)
            self.recorder.train(step, env.now, env.now + duration, tokens.actual, batch)
            yield env.timeout(duration)
            self.latest_version = step + 1
            self.notify_engines()
            if on_step is not None:
                on_step(step, env.now)
        self.done.succeed()

    def _collect_batch(self, step: int) -> Generator[simpy.Event, None, list[int]]:
        """Wait until the policy forms step ``step``'s batch; return its group ids."""
        while True:
            if self._may_be_ready(step):
                choice = policy.select_batch(self.scenario, self.queue, step)
                taken = [self.queue[pos] for pos in choice.take]
                if choice.drop:
                    self.drop([self.queue[pos] for pos in choice.drop], self.env.now)
                    self.notify_engines()
                if taken:
                    for item in taken:
                        self.queue.remove(item)
                        self.finished_per_batch[item.batch] -= 1
                    return [item.group for item in taken]
            self.learner_wake = self.env.event()
            yield self.learner_wake
            self.learner_wake = None

    def _may_be_ready(self, step: int) -> bool:
        """Cheap precondition for select_batch, so it is not called on every arrival."""
        if policy.exact_versions(self.scenario):
            return self.finished_per_batch.get(step, 0) >= self.scenario.batch_groups
        return len(self.queue) >= self.scenario.batch_groups

    def run(self, on_step: StepCallback | None = None) -> None:
        self.env.process(self._learner(on_step))
        self.env.run(until=self.done)
        for engine in self.engines:
            engine.settle(self.env.now)


def simulate(
    scenario: Scenario, on_step: StepCallback | None = None, costs: CostModel | None = None
) -> SimulationResult:
    """Simulate ``scenario`` to its last learner step; the events and their summary."""
    sim = Simulation(scenario, costs)
    sim.run(on_step)
    events = sim.recorder.events(sim.engines, wall_time=sim.env.now)
    summary = summarize(
        events,
        backend="simulator",
        scenario_name=scenario.name,
        engines=scenario.cluster.engines,
        concurrency=scenario.engine_concurrency,
    )
    return SimulationResult(events=events, summary=summary)
