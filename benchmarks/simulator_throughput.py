"""Simulated rollouts per second, as a ratio to a bare SimPy loop measured in the same run.

    python benchmarks/simulator_throughput.py [--scenario large-streaming] [--repeat 3]

The scenario is ``scenarios/large-streaming.yaml``: 256 generation engines,
512,000 trained rollouts, a lognormal tail. Three timings, best of ``--repeat``:

* bare SimPy: a process yielding ``env.timeout`` one million times (events/s), with the cyclic garbage
  collector off, as the simulation runs;
* simulation: ``Simulation.run`` alone (the SimPy model, no event table);
* run record: building the event table and the summary afterwards;
* end to end: ``asyncrl simulate SCENARIO --out DIR`` as a user runs it, in a child process (its start and
  imports, the simulation, the record streamed to Parquet, the summary, and the 95% interval's short nudged
  runs), its CPU seconds; the interval's share is timed apart in this process.

The figure of merit is the cost of one simulated rollout in bare SimPy events:
(bare events per second) / (simulated rollouts per second). Target: at most 4.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator

import simpy
from asyncrl.scenarios import compiled
from asyncrl.scenarios.record.record import DevicePools, RunSummary, summarize
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.simulation import Simulation, without_cycle_collection

BARE_EVENTS = 1_000_000


def bare_loop(env: simpy.Environment, count: int = BARE_EVENTS) -> Generator[simpy.Event, None, None]:
    """The yardstick: a process that only yields ``count`` timeouts."""
    for _ in range(count):
        yield env.timeout(1.0)


def bare_simpy_events_per_s() -> float:
    """Timed with the cyclic garbage collector off, as ``Simulation.run`` runs (``without_cycle_collection``)."""
    env = simpy.Environment()
    env.process(bare_loop(env))
    with without_cycle_collection():
        return BARE_EVENTS / _seconds(env.run)


def _seconds(work: Callable[[], object]) -> float:
    """CPU seconds of this process (``time.process_time``): other work on a shared machine slows the wall
    clock of one timing and not the other's, and the figure is their ratio."""
    start = time.process_time()
    work()
    return time.process_time() - start


def _end_to_end(scenario: str) -> float:
    """CPU seconds of ``asyncrl simulate SCENARIO --quiet --out DIR`` in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = [sys.executable, "-m", "asyncrl", "simulate", scenario, "--quiet", "--out", f"{folder}/run"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _interval(scenario: Scenario) -> float:
    from asyncrl.planning.uncertainty import run_uncertainty

    return _seconds(lambda: run_uncertainty(scenario, {"step_time_s": 1.0, "samples_per_s": 1.0}))


def _run_record(sim: Simulation, scenario: Scenario) -> RunSummary:
    events = sim.events()
    return summarize(
        events,
        backend="simulator",
        scenario_name=scenario.name,
        engines=scenario.cluster.engines,
        concurrency=scenario.engine_concurrency,
        devices=DevicePools.of(scenario.cluster),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large-streaming")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scenario = load_scenario(args.scenario)

    bare, simulated, record, whole, interval = [], [], [], [], []
    for _ in range(args.repeat):
        bare.append(bare_simpy_events_per_s())
        sim = Simulation(scenario)
        simulated.append(_seconds(sim.run))
        record.append(_seconds(lambda sim=sim: _run_record(sim, scenario)))
        whole.append(_end_to_end(args.scenario))
        interval.append(_interval(scenario))
    rollouts = sim.rollouts.samples
    events = len(sim.events())
    bare_rate = max(bare)
    rollout_rate = rollouts / min(simulated)
    with_record_rate = rollouts / (min(simulated) + min(record))
    print(
        f"scenario            {scenario.name}: {scenario.cluster.engines} engines, {rollouts:,} rollouts, {events:,} events"
    )
    print(f"simulator           {'compiled (mypyc)' if compiled.active() else 'pure Python'}")
    print(f"bare SimPy          {bare_rate:,.0f} timeouts/s")
    print(
        f"simulation          {rollout_rate:,.0f} rollouts/s   = {bare_rate / rollout_rate:.2f} bare events per rollout"
    )
    print(
        f"with run record     {with_record_rate:,.0f} rollouts/s   = {bare_rate / with_record_rate:.2f} bare events per rollout"
    )
    end_to_end_rate = rollouts / min(whole)
    print(
        f"end to end (CLI)    {end_to_end_rate:,.0f} rollouts/s   = {bare_rate / end_to_end_rate:.2f} bare events per rollout"
        f"   (of its time, the 95% interval's runs {min(interval) / min(whole):.0%})"
    )


if __name__ == "__main__":
    main()
