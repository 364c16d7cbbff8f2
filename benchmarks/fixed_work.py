"""Fixed units of simulator work, for counting instructions: a comparison of two versions that this machine's
wandering speed cannot disturb.

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null python benchmarks/fixed_work.py UNIT

UNIT is one of

* ``setup``: the imports and the scenarios, nothing simulated (subtract it from the others);
* ``bare``: a bare SimPy process yielding ``env.timeout`` 1,000,000 times;
* ``simulation``: ``large-streaming`` simulated (599,136 rollouts), no event table;
* ``record``: the same, then its run record (event table and summary);
* ``sizing``: every 12th plan of ``asyncrl size quickstart --kind pipelined --kind streaming --max-staleness 2
  --devices 64``, each ended once converged and summarized, as ``size`` does.

Instructions per rollout over instructions per bare timeout (each less ``setup``) is
``simulator_throughput.py``'s figure of merit, bare SimPy events per rollout, counted instead of timed.
Run one unit under both versions (``PYTHONPATH`` set to each checkout) and compare the counts.
"""

from __future__ import annotations

import argparse

import simpy
from asyncrl.scenarios.costs.memory import memory_problem
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.convergence import Tolerance
from asyncrl.simulator.simulation import Simulation, without_cycle_collection
from asyncrl.simulator.summary import run_summary
from asyncrl.simulator.sweep import sizing_variants
from simulator_throughput import BARE_EVENTS, bare_loop  # (this folder: run as a script)

EVERY = 12  # the sizing unit's share of the plans


def bare() -> None:
    env = simpy.Environment()
    env.process(bare_loop(env, BARE_EVENTS))
    with without_cycle_collection():  # as the simulation runs
        env.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("unit", choices=["setup", "bare", "simulation", "record", "sizing"])
    unit = parser.parse_args().unit
    streaming, quickstart = load_scenario("large-streaming"), load_scenario("quickstart")
    baselines, candidates = sizing_variants(quickstart, 64, ["pipelined", "streaming"], [2])
    if unit == "bare":
        bare()
    elif unit in ("simulation", "record"):
        sim = Simulation(streaming)
        sim.run()
        if unit == "record":
            RunRecord.of(streaming, sim.events(), backend="simulator")
    elif unit == "sizing":
        plans = [variant.scenario for variant in baselines + candidates if not memory_problem(variant.scenario)]
        for scenario in plans[::EVERY]:
            sim = Simulation(scenario)
            sim.run(until_converged=Tolerance())
            run_summary(sim)


if __name__ == "__main__":
    main()
