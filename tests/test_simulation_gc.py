"""A simulated run makes no cyclic garbage, so the cyclic collector can stay off while it runs.

``Simulation.run`` turns the collector off for the run (``simulation.without_cycle_collection``): safe only
while everything the run discards is freed by reference counting. Each case here runs with the collector
off (before and after the run too), then collects while the simulation is still alive, keeping what it finds (``gc.DEBUG_SAVEALL``): the
run's own objects are still reachable, so anything found is garbage the run made in cycles.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncrl.scenarios.costs.profile import CostProfile
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.costs import MeasuredCosts
from asyncrl.simulator.simulation import Simulation
from hypothesis import HealthCheck, given, settings

from tests.test_simulator_invariants import costs, scenarios

SHIPPED = sorted(path.stem for path in (Path(__file__).parents[1] / "scenarios").glob("*.yaml"))


@pytest.fixture
def collector_restored() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    gc.set_debug(0)
    gc.garbage.clear()
    gc.enable() if was_enabled else gc.disable()


def _cyclic_garbage(scenario: Scenario, cost_profile: CostProfile | None = None) -> list[str]:
    """The types of the objects a run left in reference cycles."""
    gc.collect()
    gc.disable()  # off before and so after the run too: no automatic collection frees them unseen
    sim = Simulation(scenario, MeasuredCosts(scenario, cost_profile) if cost_profile else None)
    sim.run()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = sorted({type(item).__name__ for item in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert sim.env.now > 0  # (the simulation is alive up to here: its own objects are not garbage)
    return found


@pytest.mark.usefixtures("collector_restored")
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_scenario_leaves_no_cycles(name: str) -> None:
    assert _cyclic_garbage(load_scenario(name, ["run.steps=12"])) == []


@pytest.mark.usefixtures("collector_restored")
@pytest.mark.parametrize(
    "overrides",
    [
        ["schedule.in_flight_updates=true"],
        ["cluster.generation_devices=4", "run.failures.every_s=1.0", "run.failures.restart_s=0.5"],
        ["schedule.in_flight_updates=true", "schedule.kv_on_update=recompute"],
    ],
    ids=["in-flight-updates", "failures", "recompute"],
)
def test_interrupts_and_failures_leave_no_cycles(overrides: list[str]) -> None:
    # Interrupted engines and lost ones raise into their processes: exceptions and tracebacks that could
    # have held frames in cycles.
    assert _cyclic_garbage(load_scenario("cpu-timing", ["run.steps=20", *overrides])) == []


@pytest.mark.usefixtures("collector_restored")
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(scenarios(), costs)
@pytest.mark.slow
def test_random_runs_leave_no_cycles(scenario: Scenario, cost_profile: CostProfile) -> None:
    assert _cyclic_garbage(scenario, cost_profile) == []


@pytest.mark.usefixtures("collector_restored")
@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    gc.enable() if enabled else gc.disable()
    Simulation(load_scenario("cpu-timing", ["run.steps=2"])).run()
    assert gc.isenabled() is enabled
