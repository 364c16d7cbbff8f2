"""Engine failures: the plan of ``run.failures``, the rules for lost groups worked by hand, the schedule state
under random deaths, and simulated runs with failures keeping every group trained exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from asyncrl.analysis.records.exactly_once import exactly_once_violations
from asyncrl.scenarios.rules.actions import Load, Regenerate, Start
from asyncrl.scenarios.rules.state import ScheduleState
from asyncrl.scenarios.spec.failures import (
    NO_VERSION,
    Failure,
    FailureSpec,
    failure_plan,
    may_regenerate,
    regeneration_version,
)
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario, validate_scenario
from asyncrl.simulator.simulation import simulate
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_state import SCHEDULES, two_engines


def test_the_plan_merges_moments_and_a_period_in_time_order() -> None:
    spec = FailureSpec(at_s=[25.0, 5.0], every_s=10.0, engine=1)
    plan = failure_plan(spec, engines=2, seed=0)
    assert [next(plan) for _ in range(5)] == [
        Failure(5.0, 1),
        Failure(10.0, 1),
        Failure(20.0, 1),
        Failure(25.0, 1),
        Failure(30.0, 1),
    ]
    node = FailureSpec(at_s=[5.0], engine=3, engines_lost=2)  # a node of two engines: 3 and, wrapping, 0
    assert list(failure_plan(node, engines=4, seed=0)) == [Failure(5.0, 3), Failure(5.0, 0)]
    [(time, engine)] = failure_plan(FailureSpec(at_s=[3.0]), engines=4, seed=0)  # random: drawn, one failure
    assert time == 3.0 and 0 <= engine < 4
    assert list(failure_plan(None, engines=4, seed=0)) == []


def test_random_engines_are_drawn_from_the_seed() -> None:
    spec = FailureSpec(every_s=1.0)
    draws = [[next(plan).engine for _ in range(40)] for plan in (failure_plan(spec, 3, seed) for seed in (7, 7, 8))]
    assert draws[0] == draws[1] != draws[2]
    assert set(draws[0]) == {0, 1, 2}


def test_a_failure_section_names_an_engine_there_is_and_may_plan_nothing() -> None:
    assert list(failure_plan(FailureSpec(), engines=2, seed=0)) == []  # a sweep's baseline: every_s null
    with pytest.raises(ScenarioError, match=r"run\.failures\.engine: 2, but the cluster has 1 engine"):
        load_scenario("cpu-timing", ["run.failures={at_s: [1], engine: 2}"])
    with pytest.raises(ScenarioError, match=r"run\.failures\.engines_lost: 2, but the cluster has 1 engine"):
        load_scenario("cpu-timing", ["run.failures={at_s: [1], engines_lost: 2}"])


def test_which_weights_may_generate_a_lost_group_again() -> None:
    # Batch 5 under a bound of 2 was started with version 3 (exact) or at least 3 (streaming).
    assert may_regenerate(exact=True, engine_version=3, batch=5, bound=2)
    assert not may_regenerate(exact=True, engine_version=4, batch=5, bound=2)
    assert may_regenerate(exact=False, engine_version=4, batch=5, bound=2)
    assert not may_regenerate(exact=False, engine_version=2, batch=5, bound=2)
    assert not may_regenerate(exact=False, engine_version=4, batch=5, bound=2, draining=True)
    assert not may_regenerate(exact=False, engine_version=NO_VERSION, batch=0, bound=2)
    assert regeneration_version(exact=True, batch=5, bound=2, latest_version=5) == 3
    assert regeneration_version(exact=False, batch=5, bound=2, latest_version=5) == 5
    assert regeneration_version(exact=True, batch=1, bound=2, latest_version=1) == 0


def test_a_dead_engines_groups_go_to_the_other_engine_before_new_ones() -> None:
    state = ScheduleState(two_engines({"kind": "streaming", "max_staleness": 1, "queue_capacity": 8}), engines=2)
    state.publish(0)
    state.dispatch()  # groups 0..7 (batches 0 and 1), 4 per engine: 0, 2, 4, 6 on engine 0
    state.samples_finished(1, 8)
    for group in (1, 3, 5, 7):
        state.group_finished(group, version=0)
    state.engine_lost(0, [0, 2, 4, 6])
    assert state.engines[0].version == NO_VERSION and 0 in state.down
    # Engine 1 is empty and holds version 0: it takes the lost groups, under their own ids and batches.
    assert state.dispatch() == [Regenerate(1, (0, 2, 4, 6), (0, 0, 1, 1))]
    assert state.lost == [] and state.live_groups == 8
    state.engine_restored(0)
    state.publish(1)
    # Back up without weights: it loads the latest, then takes what admission allows (batch 2: ids 8..11).
    assert state.dispatch()[:1] == [Load(0, 1)]


def test_an_exact_schedule_loads_an_idle_engine_back_to_the_lost_groups_version() -> None:
    # Pipelined, one step off: batch 1 is generated with version 0, batch 2 with version 1.
    state = ScheduleState(two_engines({"kind": "pipelined", "off_policy_steps": 1}, concurrency=4), engines=2)
    state.publish(0)
    assert state.dispatch() == [Start(0, (0,), (0,)), Start(1, (1,), (0,)), Start(0, (2,), (0,)), Start(1, (3,), (0,))]
    for engine in (0, 1):
        state.samples_finished(engine, 4)
    for group in range(4):
        state.group_finished(group, version=0)
    state.dispatch()  # batch 1 (groups 4..7), still version 0
    state.take(0)
    state.publish(1)
    state.samples_finished(1, 4)  # engine 1 finished groups 5 and 7 and now loads version 1
    state.group_finished(5, version=0)
    state.group_finished(7, version=0)
    assert state.dispatch()[0] == Load(1, 1)
    state.engine_lost(0, [4, 6])
    # Nobody holds version 0 any more; engine 1 is busy with batch 2, so the lost groups wait.
    assert state.dispatch() == [] and state.lost == [4, 6]
    state.samples_finished(1, 4)
    state.group_finished(8, version=1)
    state.group_finished(9, version=1)
    # Idle again: loaded back to version 0 for the lost groups of batch 1, before any new group.
    assert state.dispatch()[:2] == [Load(1, 0), Regenerate(1, (4, 6), (1, 1))]


# The state under random deaths: no group twice in flight, none lost, down engines given nothing.

EVENTS = st.lists(
    st.tuples(st.sampled_from(["finish", "finish", "finish", "take", "publish", "die", "restore"]), st.integers(0, 5)),
    max_size=80,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(schedule=SCHEDULES, concurrency=st.sampled_from([2, 4, 8]), events=EVENTS)
def test_deaths_keep_every_group_once(
    schedule: dict[str, Any], concurrency: int, events: list[tuple[str, int]]
) -> None:
    scenario = two_engines(schedule, concurrency=concurrency, steps=6)
    state = ScheduleState(scenario, engines=3)
    state.publish(0)
    running: dict[int, int] = {}  # group -> engine
    finished: set[int] = set()
    step = 0
    for kind, pick in events:
        for action in state.dispatch():
            assert action.engine not in state.down
            if isinstance(action, Start | Regenerate):
                for group in action.groups:
                    assert group not in running and group not in finished
                    running[group] = action.engine
        for index, engine in enumerate(state.engines):
            assert engine.in_flight == 2 * sum(on == index for on in running.values())
        assert set(state.lost).isdisjoint(running) and set(state.lost).isdisjoint(finished)
        assert len(running) + len(finished) + len(state.lost) == state.next_group
        if kind == "finish" and running:
            group = sorted(running)[pick % len(running)]
            engine = running.pop(group)
            state.samples_finished(engine, 2)
            state.group_finished(group, version=state.engines[engine].version)
            finished.add(group)
        elif kind == "take" and state.take(step).batch:
            step += 1
        elif kind == "publish" and state.latest_version < step:
            state.publish(state.latest_version + 1)
        elif kind == "die" and pick % 3 not in state.down:
            engine = pick % 3
            lost = sorted(group for group, on in running.items() if on == engine)
            for group in lost:
                del running[group]
            state.engine_lost(engine, lost)
        elif kind == "restore" and state.down:
            state.engine_restored(sorted(state.down)[pick % len(state.down)])


# Simulated runs with failures.


@pytest.mark.parametrize(
    "overrides",
    [
        ["schedule.kind=sync", "cluster.generation_devices=2"],
        ["schedule.kind=pipelined", "schedule.off_policy_steps=2"],
        ["schedule.max_staleness=1", "schedule.in_flight_updates=true", "schedule.queue_policy=drop_oldest"],
        ["cluster.generation_devices=3"],
        ["cluster.generation_devices=4", "run.failures.engines_lost=2"],
    ],
    ids=["sync-2", "pipelined-2", "streaming-in-flight", "streaming-3", "nodes-of-2"],
)
def test_simulated_failures_keep_every_group_trained_once(overrides: list[str]) -> None:
    # Fail about three times a run, whatever the cost model makes of its length.
    healthy_s = simulate(load_scenario("cpu-timing", ["run.steps=12", *overrides])).summary.wall_time_s
    failures = [f"run.failures.every_s={healthy_s / 3:.3f}", "run.failures.restart_s=0.5"]
    failing = load_scenario("cpu-timing", ["run.steps=12", *failures, *overrides])
    failed = simulate(failing)
    summary = failed.summary
    assert summary.restarts is not None and summary.restarts.engines >= 2
    assert summary.restarts.regenerated_samples > 0
    assert exactly_once_violations(failing, failed.events) == []


def test_a_sync_run_on_one_engine_waits_out_the_restart_and_the_lost_work() -> None:
    # One engine, sync, failing in its first generation (before any publish: it reloads the starting weights):
    # while it is down nothing is generated, and the learner waits for the lost groups.
    base = load_scenario("cpu-timing", ["run.steps=6", "schedule.kind=sync"])
    failing = load_scenario(
        "cpu-timing", ["run.steps=6", "schedule.kind=sync", "run.failures={at_s: [0.1], restart_s: 2}"]
    )
    healthy, failed = simulate(base).summary, simulate(failing).summary
    assert failed.restarts is not None and failed.restarts.down_s == 2.0
    assert failed.wall_time_s > healthy.wall_time_s + 2.0  # the restart, then the lost groups again


def test_a_run_whose_engines_fail_faster_than_they_work_is_refused() -> None:
    scenario = validate_scenario(
        {**load_scenario("cpu-timing").model_dump(mode="json"), "run": {"steps": 5, "failures": {"every_s": 0.2}}}
    )
    with pytest.raises(ScenarioError, match="engines fail faster than they can generate a batch"):
        simulate(scenario)
