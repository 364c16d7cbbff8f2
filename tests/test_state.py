"""The schedule state both backends hold: dispatch worked by hand, and its invariants under random events."""

from __future__ import annotations

from typing import Any

from asyncrl.scenarios.rules import policy
from asyncrl.scenarios.rules.actions import Load, Start
from asyncrl.scenarios.rules.state import ScheduleState
from asyncrl.scenarios.spec.scenario import Scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_scenario


def two_engines(schedule: dict[str, Any], concurrency: int = 8, steps: int = 5, prompts: int = 4) -> Scenario:
    """Two one-device engines, batches of ``prompts`` groups × 2 samples."""
    return small_scenario(
        cluster={"generation_devices": 2, "training_devices": 2},
        workload={
            "prompts_per_step": prompts,
            "samples_per_prompt": 2,
            "prompt_tokens": {"kind": "fixed", "value": 10},
            "completion_tokens": {"kind": "fixed", "value": 100},
        },
        schedule={"max_concurrency": concurrency, **schedule},
        run={"steps": steps, "seed": 0},
    )


def test_a_burst_is_split_evenly_over_empty_engines() -> None:
    # Sync, 4 groups per step, room for all 4 on each engine: 2 + 2, not 3 + 1.
    state = ScheduleState(two_engines({"kind": "sync"}), engines=2)
    assert state.dispatch() == [Start(0, (0,), (0,)), Start(1, (1,), (0,)), Start(0, (2,), (0,)), Start(1, (3,), (0,))]
    assert [engine.in_flight for engine in state.engines] == [4, 4]
    assert state.live_groups == 4 and state.dispatch() == []  # batch 1 needs version 1


def test_the_least_loaded_engine_takes_groups_first() -> None:
    streaming = two_engines({"kind": "streaming", "max_staleness": 1, "in_flight_updates": True, "queue_capacity": 8})
    state = ScheduleState(streaming, engines=2)
    state.dispatch()  # 8 admissible groups (batches 0 and 1), room for 4 per engine: 4 + 4
    assert [engine.in_flight for engine in state.engines] == [8, 8]
    state.samples_finished(0, 6)  # engine 0 finished groups 0-2, engine 1 group 4
    state.samples_finished(1, 2)
    for group in (0, 1, 2, 4):
        state.group_finished(group, version=0)
    assert [item.group for item in state.take(0).batch] == [0, 1, 2, 4]
    state.publish(1)
    # In-flight updates: both load at once. Version 1 admits groups 8..11. Loads 2 and 6: engine 0
    # takes two to catch up, then the tie goes to the lower index, then engine 1 takes the last.
    assert state.dispatch() == [Load(0, 1), Load(1, 1), Start(0, (8, 9, 10), (2, 2, 2)), Start(1, (11,), (2,))]
    assert [engine.in_flight for engine in state.engines] == [8, 8]


def test_loads_come_before_the_groups_that_need_them() -> None:
    state = ScheduleState(two_engines({"kind": "sync"}), engines=2)
    state.dispatch()
    for engine in (0, 1):
        state.samples_finished(engine, 4)
        state.group_finished(engine, version=0)  # engine 0 holds groups 0 and 2, engine 1 groups 1 and 3
        state.group_finished(engine + 2, version=0)
    assert sorted(item.group for item in state.take(0).batch) == [0, 1, 2, 3]
    assert state.dispatch() == []  # batch 1 needs version 1, not out yet
    assert state.publish(1) == []  # sync keeps only the latest version
    # An engine takes its commands in order: the groups after a load are generated with its weights.
    assert state.dispatch() == [
        Load(0, 1),
        Load(1, 1),
        Start(0, (4,), (1,)),
        Start(1, (5,), (1,)),
        Start(0, (6,), (1,)),
        Start(1, (7,), (1,)),
    ]
    assert [engine.version for engine in state.engines] == [1, 1]


def test_publish_forgets_versions_beyond_the_bound() -> None:
    state = ScheduleState(two_engines({"kind": "pipelined", "off_policy_steps": 2}), engines=2)
    # Batch k is generated with version k - 2, so after version 4 only 2, 3 and 4 may still be loaded.
    assert [state.publish(v) for v in (1, 2, 3, 4)] == [[], [], [], [1]]
    assert state.kept_versions == {2, 3, 4}


def test_overflow_drops_the_oldest_finished_groups() -> None:
    streaming = two_engines(
        {"kind": "streaming", "max_staleness": 2, "queue_capacity": 4, "queue_policy": "drop_oldest"}
    )
    state = ScheduleState(streaming, engines=2)
    state.dispatch()  # 12 admissible groups, room for 8
    for group in range(4):
        assert state.group_finished(group, version=0) == ()
    dropped = state.group_finished(4, version=0)
    assert [item.group for item in dropped] == [0]
    assert state.live_groups == 7 and [item.group for item in state.queue] == [1, 2, 3, 4]


# Invariants under random events.

EVENTS = st.lists(
    st.tuples(st.sampled_from(["finish", "finish", "take", "publish"]), st.integers(0, 3)),
    max_size=80,
)
SCHEDULES = st.sampled_from(
    [
        {"kind": "sync"},
        {"kind": "pipelined", "off_policy_steps": 1},
        {"kind": "streaming", "max_staleness": 2, "queue_capacity": 6},
        {"kind": "streaming", "max_staleness": 1, "in_flight_updates": True, "queue_policy": "drop_oldest"},
    ]
)


@settings(max_examples=150, deadline=None)
@given(schedule=SCHEDULES, concurrency=st.sampled_from([2, 4, 6, 8]), events=EVENTS)
def test_dispatch_keeps_its_invariants_under_random_events(
    schedule: dict[str, Any], concurrency: int, events: list[tuple[str, int]]
) -> None:
    scenario = two_engines(schedule, concurrency=concurrency, steps=6)
    state = ScheduleState(scenario, engines=3)
    unfinished: list[tuple[int, int, int]] = []  # (engine, group, samples left)
    step = 0
    for kind, pick in events:
        for action in state.dispatch():
            if isinstance(action, Start):
                unfinished.extend((action.engine, group, 2) for group in action.groups)
        check_invariants(state, scenario)
        if kind == "finish" and unfinished:
            engine, group, left = unfinished.pop(pick % len(unfinished))
            state.samples_finished(engine, left)
            state.group_finished(group, version=state.engines[engine].version)
        elif kind == "take" and state.take(step).batch:
            step += 1
        elif kind == "publish" and state.latest_version < step:
            state.publish(state.latest_version + 1)
    assert state.live_groups <= scenario.run.steps * scenario.batch_groups


def check_invariants(state: ScheduleState, scenario: Scenario) -> None:
    """After a dispatch: what a full scan finds, and no engine left idle that could take a group."""
    size, capacity = scenario.workload.samples_per_prompt, scenario.engine_concurrency
    for index, engine in enumerate(state.engines):
        assert 0 <= engine.in_flight <= capacity
        has_room = capacity - engine.in_flight >= size
        assert (index in state.index.room.get(engine.version, set())) == has_room  # the index is the full scan
        if has_room:
            assert state.admissible(index) == 0  # admission exhausted: dispatch gave out all it could
        target = state.sync_target(index)
        if target is not None and target in state.kept_versions:
            raise AssertionError(f"engine {index} should be loading {target}")
    assert sorted(item.group for item in state.queue) == sorted({item.group for item in state.queue})
    exact = policy.exact_versions(scenario)
    for item in state.queue:
        assert item.batch == item.group // scenario.batch_groups or not exact
