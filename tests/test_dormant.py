"""What keeps a plan's cost from growing with the cluster changes no record.

Dormant engines (``simulator.dormant``): the same run is simulated with every idle engine's load applied as a
dormant group (even a group of one) and with none (each through ``Engine.load``); the event tables must be
equal to the last bit. The summary's busy time, merged for all engines at once, equals worker by worker.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.record.busy import busy_seconds, running_max, union_length
from asyncrl.scenarios.rules.actions import Load, LoadEmpty
from asyncrl.scenarios.rules.state import ScheduleState
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator import simulation
from asyncrl.simulator.costs import MeasuredCosts
from asyncrl.simulator.simulation import Simulation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import profile, small_scenario
from tests.test_simulator_invariants import costs, scenarios


def _events(scenario: Scenario, cost_profile: CostProfile | None, dormant_at_least: int) -> tuple[pd.DataFrame, int]:
    """The run's event table, and how many loads were applied to dormant engines."""
    original = simulation.DORMANT_AT_LEAST
    simulation.DORMANT_AT_LEAST = dormant_at_least
    try:
        sim = Simulation(scenario, MeasuredCosts(scenario, cost_profile) if cost_profile else None)
        sim.run()
        return sim.events(), sim.dormant.loads
    finally:
        simulation.DORMANT_AT_LEAST = original


def _same_run_either_way(scenario: Scenario, cost_profile: CostProfile | None = None) -> int:
    grouped, dormant_loads = _events(scenario, cost_profile, dormant_at_least=1)
    one_by_one, none = _events(scenario, cost_profile, dormant_at_least=10**9)
    assert none == 0
    pd.testing.assert_frame_equal(grouped, one_by_one, check_exact=True)
    return dormant_loads


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), costs)
def test_dormant_loads_change_no_record(scenario: Scenario, cost_profile: CostProfile) -> None:
    _same_run_either_way(scenario, cost_profile)


@pytest.mark.parametrize(
    "overrides",
    [
        ["cluster.generation_devices=8", "schedule.kind=pipelined"],
        ["cluster.generation_devices=8", "schedule.in_flight_updates=true"],
        ["cluster.generation_devices=6", "run.failures.every_s=2.5", "run.failures.restart_s=0.5"],
        ["cluster.generation_devices=4", "cluster.training_devices=4", "cluster.colocated=true", "schedule.kind=sync"],
    ],
    ids=["pipelined", "in-flight-updates", "failures", "colocated"],
)
def test_many_idle_engines_load_as_one_with_the_same_record(overrides: list[str]) -> None:
    scenario = load_scenario("cpu-timing", ["run.steps=8", *overrides])
    assert _same_run_either_way(scenario) > 0  # the dormant path was taken


def test_an_idle_engine_waking_mid_load_starts_after_it() -> None:
    # Four engines, one group per step: three idle engines load each version; with a weight sync longer
    # than a step (0.5 s against 0.2 s of decoding), each load begins where the last one ends.
    scenario = small_scenario(
        cluster={"generation_devices": 4, "training_devices": 1},
        workload={"prompts_per_step": 1, "samples_per_prompt": 2},
        schedule={"kind": "streaming", "max_staleness": 1, "max_concurrency": 2},
        run={"steps": 6, "seed": 0},
    )
    assert _same_run_either_way(scenario, profile(weight_sync_s=0.5, train_token_s=1e-4, wake_s=0.01)) > 0


def test_the_state_groups_the_loads_of_empty_engines() -> None:
    scenario = small_scenario(
        cluster={"generation_devices": 3, "training_devices": 1},
        workload={"prompts_per_step": 1, "samples_per_prompt": 2},
        schedule={"kind": "streaming", "max_staleness": 1, "max_concurrency": 2},
        run={"steps": 6},
    )
    state = ScheduleState(scenario, engines=3)
    state.dispatch()  # batches 0 and 1 on engines 0 and 1; engine 2 holds nothing
    state.publish(1)
    grouped = state.dispatch_grouped()  # engine 2 loads version 1, then takes batch 2
    assert grouped.load_empty == [LoadEmpty((2,), 1)] and grouped.loads == []
    state.samples_finished(2, 2)
    state.samples_finished(0, 2)
    state.samples_finished(1, 2)
    state.publish(2)
    grouped = state.dispatch_grouped()
    # One group per version held (engines 0 and 1 hold 0, engine 2 holds 1); as single actions, in engine order.
    assert sorted(grouped.load_empty, key=lambda load: load.engines) == [LoadEmpty((0, 1), 2), LoadEmpty((2,), 2)]
    assert grouped.actions()[:3] == [Load(0, 2), Load(1, 2), Load(2, 2)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.floats(0, 100, allow_nan=False), st.floats(0, 10, allow_nan=False)),
        max_size=60,
    )
)
def test_busy_seconds_of_all_workers_at_once_add_up_as_worker_by_worker(spans: list) -> None:
    # The summary merges every engine's spans in one pass (a large cluster has thousands); it must give the
    # same double as union_length worker by worker, added in worker order.
    workers = np.asarray([worker for worker, _, _ in spans], dtype=np.int64)
    starts = np.asarray([start for _, start, _ in spans], dtype=np.float64)
    ends = starts + np.asarray([length for _, _, length in spans], dtype=np.float64)
    expected = 0.0
    for worker in sorted(set(workers.tolist())):
        mine = workers == worker
        expected += union_length(starts[mine], ends[mine])
    assert busy_seconds(workers, starts, ends) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0]), st.booleans()), min_size=1, max_size=40))
def test_running_max_restarts_where_told(points: list) -> None:
    values = np.asarray([value for value, _ in points])
    restart = np.asarray([index == 0 or again for index, (_, again) in enumerate(points)])
    expected, best = [], -np.inf
    for value, again in zip(values.tolist(), restart.tolist(), strict=True):
        best = value if again else max(best, value)
        expected.append(best)
    assert running_max(values, restart).tolist() == expected
