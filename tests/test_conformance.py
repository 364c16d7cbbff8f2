"""The simulator and the executor's coordinator decide alike: one event sequence, the same decisions.

A simulated run is traced at its ``ScheduleState`` (which samples finished when,
groups completed, publishes, takes, and what each dispatch decided). The trace
is then replayed into a real ``Coordinator`` as the messages actors would send
and the calls the learner would make, each sample's message at the time the
sample really finished (not when the simulator told its state, which for
finishes it applies ahead may be later), with queues that only record what it
commands and no processes. The coordinator must command exactly the
loads and group starts the simulation decided, in the same order: the shared
state and the two wrappers around it (engines reporting to the simulation,
actors reporting to the coordinator) agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from asyncrl.executor.processes.coordinator import Coordinator
from asyncrl.executor.processes.messages import FinishedRollout, LoadWeights, RolloutDone, StartGroups, StepFinished
from asyncrl.scenarios.rules.actions import Action, Dispatch, Load, Taken
from asyncrl.scenarios.rules.policy import FinishedGroup
from asyncrl.scenarios.rules.state import ScheduleState
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import CostModel, MeasuredCosts
from asyncrl.simulator.packed import Columns
from asyncrl.simulator.simulation import Simulation

from tests.conftest import profile, small_scenario

Event = tuple[Any, ...]


class TracedState(ScheduleState):
    """A ScheduleState that writes down every call the simulation makes, with the samples' ids."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(sim.scenario, sim.scenario.cluster.engines)
        self.sim = sim
        self.trace: list[Event] = []
        self._reported: set[int] = set()

    def samples_finished(self, engine: int, count: int = 1) -> None:
        rollouts, size, now = self.sim.rollouts, self.sim.rollouts.group_size, self.sim.env.now
        samples = [  # the live rollouts (``Rollouts.base`` on: the groups packed away are settled)
            sample
            for sample, end in enumerate(rollouts.end, start=rollouts.sample_base)
            if rollouts.engine[sample // size - rollouts.base] == engine and end <= now and sample not in self._reported
        ]
        assert len(samples) == count, "the engine reported as many finishes as it recorded"
        self._reported.update(samples)
        self.trace.append(("finished", now, engine, samples, []))
        super().samples_finished(engine, count)

    def group_finished(self, group: int, version: int) -> tuple[FinishedGroup, ...]:
        self.trace[-1][4].append(group)  # completed in this instant, in this order
        return super().group_finished(group, version)

    def publish(self, version: int) -> list[int]:
        self.trace.append(("publish", self.sim.env.now, version))
        return super().publish(version)

    def take(self, step: int) -> Taken:
        self.trace.append(("take", self.sim.env.now, step))
        return super().take(step)

    def dispatch_grouped(self) -> Dispatch:
        decision = super().dispatch_grouped()  # what the simulation applies: traced as the coordinator gets it
        self.trace.append(("dispatch", self.sim.env.now, decision.actions()))
        return decision


@dataclass
class _Request:
    prompt: list[int]


class _Source:
    """What the coordinator asks of a work source, with nothing behind it."""

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size

    def requests(self, group: int) -> list[_Request]:
        return [_Request(prompt=[1, 2, 3])] * self.group_size

    def reward(self, group: int, sample: int, rollout: FinishedRollout) -> float:
        return 0.0

    def forget(self, group: int) -> None:
        pass


class _Done:
    def is_completed(self) -> bool:
        return True


class _Recording:
    """A command queue that writes down what it is told."""

    def __init__(self, engine: int, log: list[tuple[int, Any]]) -> None:
        self.engine, self.log = engine, log

    def put(self, command: Any) -> None:
        self.log.append((self.engine, command))


def decisions(actions: list[Action]) -> list[tuple[int, str, int]]:
    flat = []
    for action in actions:
        if isinstance(action, Load):
            flat.append((action.engine, "load", action.version))
        else:
            flat.extend((action.engine, "start", group) for group in action.groups)
    return flat


def commanded(log: list[tuple[int, Any]]) -> list[tuple[int, str, int]]:
    flat = []
    for engine, command in log:
        if isinstance(command, LoadWeights):
            flat.append((engine, "load", command.version))
        elif isinstance(command, StartGroups):  # one dispatch's groups, sent together
            flat.extend((engine, "start", start.group) for start in command.starts)
    return flat


def replay(trace: list[Event], sim: Simulation) -> list[tuple[int, Any]]:
    """Feed the simulation's events to a coordinator as actor messages and learner calls, in time order."""
    scenario, size, rollouts = sim.scenario, sim.rollouts.group_size, sim.rollouts.columns()
    log: list[tuple[int, Any]] = []
    queues = [_Recording(engine, log) for engine in range(scenario.cluster.engines)]
    send = lambda flat, rank: _Done()  # noqa: E731
    coordinator = Coordinator(scenario, _Source(size), queues, clock=lambda: 0.0, send=send)  # type: ignore[arg-type]
    weights = torch.zeros(1)
    coordinator.publish(0, weights)  # what the runtime does first: the initial dispatch
    timeline: list[tuple[float, int, int, Any]] = []  # (time, trace position, order within it, what)
    for position, event in enumerate(trace):
        if event[0] == "finished":
            _, _, engine, samples, completed = event
            last = [s for group in completed for s in samples if s // size == group]
            first = [s for s in samples if s not in last]
            for order, sample in enumerate(first + last):
                message = RolloutDone(engine, sample // size, _rollout(sample, size, rollouts))
                timeline.append((rollouts.end[sample], position, order, message))
        elif event[0] in ("publish", "take"):
            timeline.append((event[1], position, 0, event))
    timeline.sort(key=lambda item: item[:3])
    pending: list[RolloutDone] = []
    for index, (time, _, _, what) in enumerate(timeline):
        if isinstance(what, RolloutDone):
            pending.append(what)
            following = timeline[index + 1] if index + 1 < len(timeline) else None
            # One instant's reports at once, every engine's (the receiver drains its queue, then dispatches).
            if following is None or following[0] != time or not isinstance(following[3], RolloutDone):
                coordinator.on_messages(per_engine_step(pending))
                pending = []
        elif what[0] == "publish":
            coordinator.publish(what[2], weights)
        else:
            coordinator.try_take(what[2])
    return log


def per_engine_step(done: list[RolloutDone]) -> list[StepFinished]:
    """One instant's finishes as the actors send them: one StepFinished per engine."""
    engines = dict.fromkeys(message.actor for message in done)
    return [StepFinished(engine, tuple(m for m in done if m.actor == engine)) for engine in engines]


def _rollout(sample: int, size: int, rollouts: Columns) -> FinishedRollout:
    version, tokens = int(rollouts.version[sample // size]), int(rollouts.tokens[sample])
    return FinishedRollout(sample % size, [0] * tokens, [0.0] * tokens, [version] * tokens, 0, 0, [])


SCHEDULES = {
    "sync": {"kind": "sync", "max_concurrency": 6},
    "pipelined": {"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 4},
    "streaming": {"kind": "streaming", "max_staleness": 2, "max_concurrency": 6, "queue_capacity": 6},
    "streaming-inflight-drop": {
        "kind": "streaming",
        "max_staleness": 1,
        "in_flight_updates": True,
        "max_concurrency": 4,
        "queue_capacity": 4,
        "queue_policy": "drop_oldest",
    },
    # verl's fully async rules: weights every 2 steps, half a sync window ahead; partial rollout, or a drain.
    "verl-partial": {
        "kind": "streaming",
        "max_staleness": 5,
        "sync_every": 2,
        "staleness_threshold": 0.5,
        "in_flight_updates": True,
        "max_concurrency": 6,
    },
    "verl-drain": {
        "kind": "streaming",
        "max_staleness": 5,
        "sync_every": 2,
        "staleness_threshold": 0.5,
        "refresh": "drain",
        "refresh_every": 2,
        "max_concurrency": 6,
    },
}


def assert_coordinator_agrees(
    engines: int, group_size: int, sigma: float, schedule: dict, steps: int, seed: int
) -> None:
    """Simulate, replay the trace into a coordinator, and compare what each decided."""
    scenario = small_scenario(
        cluster={"generation_devices": engines, "training_devices": 2},
        workload={
            "prompts_per_step": 3 if group_size == 2 else 4,
            "samples_per_prompt": group_size,
            "prompt_tokens": {"kind": "fixed", "value": 10},
            "completion_tokens": {"kind": "lognormal", "median": 60, "sigma": sigma, "max_tokens": 600},
        },
        schedule=schedule,
        run={"steps": steps, "seed": seed},
    )
    assert_agrees_on(scenario)


def assert_agrees_on(scenario: Scenario, costs: CostModel | None = None) -> list[Event]:
    """Simulate ``scenario``, replay its trace into a coordinator, compare what each decided; the trace."""
    sim = Simulation(scenario, costs)
    sim.state = traced = TracedState(sim)
    sim.run()
    expected = [decision for event in traced.trace if event[0] == "dispatch" for decision in decisions(event[2])]
    assert len(expected) > scenario.run.steps * scenario.batch_groups / 2  # the run really started groups
    assert commanded(replay(traced.trace, sim)) == expected
    return traced.trace


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("engines", [2, 3])
def test_coordinator_commands_what_the_simulation_decided(name: str, engines: int) -> None:
    assert_coordinator_agrees(engines, group_size=2, sigma=1.0, schedule=SCHEDULES[name], steps=12, seed=3)


WIDE = {
    "streaming-drop": {
        "kind": "streaming",
        "max_staleness": 1,
        "max_concurrency": 16,
        "queue_capacity": 4,
        "queue_policy": "drop_oldest",
    },
    "streaming-inflight": {"kind": "streaming", "max_staleness": 2, "max_concurrency": 12, "in_flight_updates": True},
    "pipelined-2": {"kind": "pipelined", "off_policy_steps": 2, "max_concurrency": 16},
}


@pytest.mark.parametrize("name", list(WIDE))
@pytest.mark.parametrize("seed", [0, 1])
def test_with_finishes_applied_ahead_the_coordinator_still_agrees(name: str, seed: int) -> None:
    # Room for 4 groups of 4 per engine: engines that were refused admission plan many quiet
    # finishes ahead; when a drop or a publish reopens admission, their loads must be current.
    assert_coordinator_agrees(3, group_size=4, sigma=1.2, schedule=WIDE[name], steps=15, seed=seed)


def test_engines_reporting_at_the_same_instant_are_decided_for_together() -> None:
    # Fixed lengths and flat costs: both engines finish each batch at the same moment. The coordinator
    # drains both reports before it dispatches; the simulation must too (it decides once per instant).
    scenario = small_scenario(
        cluster={"generation_devices": 2, "training_devices": 2},
        workload={"prompts_per_step": 4, "samples_per_prompt": 2, "prompt_tokens": {"kind": "fixed", "value": 16}},
        schedule={"kind": "pipelined", "off_policy_steps": 1, "max_concurrency": 8},
        run={"steps": 8, "seed": 0},
    )
    flat = profile(prefill_token_s=0.0, weight_sync_s=0.0, train_token_s=0.001)
    trace = assert_agrees_on(scenario, MeasuredCosts(scenario, flat))
    finishes = [(event[1], event[2]) for event in trace if event[0] == "finished"]
    same_instant = {time for time, engine in finishes if (time, 1 - engine) in finishes}
    assert same_instant  # the case this test is about happened
