"""Sizing plans per minute against the cluster's device count, every size measured in one run.

    python benchmarks/sizing_scale.py [--devices 64 --devices 256 --devices 1024 --devices 4096] [--workers N] [--exact]

What ``asyncrl size quickstart --kind pipelined --kind streaming --max-staleness 2 --devices D`` simulates
(``simulate_sizing``: the sync colocated baselines and every split × engine size × schedule, each run ended
once converged), timed at each ``D``. The batch is the same at every size, so a plan should cost about the
same: the figure of merit is the plans per minute at each size as a ratio to the smallest size's, measured
in the same run. By default the plans run in this process, one at a time, and the rate is per CPU-minute
of this process (``time.process_time``), which a machine shared with other work disturbs far less than
wall time; two cores run about twice that. ``--workers N`` runs them in a pool of N processes and
reports wall time instead. It also prints the learner steps each plan simulated on average and the
milliseconds each step cost, which tell a plan that ends later from one whose steps cost more.

A plans-per-minute figure says as much about the machine as about the code, so the bare SimPy loop of
``simulator_throughput.py`` is timed before and after the sizes (CPU seconds, the best of three each time) and
every rate is also given per 1.0 M bare events a second: plans per minute × 10⁶ / (bare events per second), the
figure to compare across machines and sittings. Goal: at least 1,500 such plans a minute at 64, 256 and 1,024
devices.
"""

from __future__ import annotations

import argparse
import time

from asyncrl.scenarios import compiled
from asyncrl.scenarios.costs.memory import memory_problem
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.sweep import simulate_sizing, sizing_variants
from simulator_throughput import bare_simpy_events_per_s

BARE_TIMINGS = 3  # the bare loop's timings before and after the sizes: the best of each set is kept


def plans_per_minute(devices: int, workers: int, exact: bool) -> tuple[int, float, int]:
    """(plans simulated, seconds, learner steps simulated in all) for one sizing of ``devices`` devices: CPU
    seconds of this process with one worker, wall seconds with more."""
    scenario = load_scenario("quickstart")
    kinds, bounds = ["pipelined", "streaming"], [2]
    baselines, candidates = sizing_variants(scenario, devices, kinds, bounds)
    plans = sum(not memory_problem(variant.scenario) for variant in baselines + candidates)  # all simulated
    clock = time.process_time if workers == 1 else time.perf_counter
    start = clock()
    results = simulate_sizing(scenario, devices, kinds, bounds, progress=False, exact=exact, workers=workers)
    seconds = clock() - start
    summaries = [result.summary for result in results if result.summary is not None]
    steps = sum(summary.steps_run for summary in summaries)
    return plans, seconds, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, action="append", help="device counts (default 64, 256, 1024, 4096)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1: this one, CPU time)")
    parser.add_argument("--exact", action="store_true", help="simulate every step (no early stopping)")
    args = parser.parse_args()
    sizes = args.devices or [64, 256, 1024, 4096]
    rates = []
    unit = "CPU s" if args.workers == 1 else "wall s"
    before = max(bare_simpy_events_per_s() for _ in range(BARE_TIMINGS))
    measured = [(devices, *plans_per_minute(devices, args.workers, args.exact)) for devices in sizes]
    after = max(bare_simpy_events_per_s() for _ in range(BARE_TIMINGS))
    bare = (before + after) / 2
    print(f"simulator: {'compiled (mypyc)' if compiled.active() else 'pure Python'}")
    print(f"bare SimPy: {before:,.0f} events/s before the sizes, {after:,.0f} after (CPU time; their mean divides)")
    header = f"{'devices':>8} {'plans':>6} {unit:>8} {'plans/min':>10} {'per 1M bare/s':>14} {'vs first':>9}"
    print(f"{header} {'steps/plan':>11} {'ms/step':>8}")
    for devices, plans, seconds, steps in measured:
        rates.append(plans / seconds * 60)
        print(
            f"{devices:>8,} {plans:>6} {seconds:>8.2f} {rates[-1]:>10,.0f} {rates[-1] * 1e6 / bare:>14,.0f}"
            f" {rates[-1] / rates[0]:>9.2f} {steps / plans:>11.1f} {seconds / steps * 1000:>8.2f}"
        )


if __name__ == "__main__":
    main()
