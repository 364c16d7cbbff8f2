"""``asyncrl size --search wide`` against simulating every plan, and at 1,024 devices against the clock.

    grid (quickstart, pipelined and streaming, bounds 1, 2, 4, every split × engine size × micro-batch)
      ├─ exhaustive: every plan simulated (as ``size`` simulates one: until converged)
      └─ wide: the screen, then the simulator on the plans it cannot rule out
    ─► per budget: plans, plans simulated, regret of the wide choice against the exhaustive best, top-5 overlap,
       the screen's simulated/screened ratio (min, median, max over every plan), and wide / exhaustive seconds

``--devices 1024`` adds a budget too large to simulate whole: plans screened, plans simulated, seconds, and the
bare SimPy event rate measured in the same run (seconds vary by machine; the rate says how fast this one is).

    python benchmarks/wide_search.py [--grid 16 --grid 32] [--devices 1024]
"""

from __future__ import annotations

import argparse
import statistics
import time

from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.sweep import SIZING_TOLERANCE, Variant, simulate_fitting
from asyncrl.simulator.wide_search import ScreenInputs, plans, screen, wide_search
from simulator_throughput import bare_simpy_events_per_s

KINDS, BOUNDS = ["pipelined", "streaming"], [1, 2, 4]


def compare(devices: int) -> str:
    scenario = load_scenario("quickstart")
    start = time.perf_counter()
    found = wide_search(scenario, devices, KINDS, BOUNDS, progress=False)
    wide_s = time.perf_counter() - start
    every = [
        Variant(p.label, scenario_)
        for chunk in plans(scenario, devices, KINDS, BOUNDS)
        for p in chunk
        if (scenario_ := p.scenario(scenario)) is not None
    ]
    start = time.perf_counter()
    exhaustive = [r for r in simulate_fitting(every, progress=False, until_converged=SIZING_TOLERANCE) if r.summary]
    exhaustive_s = time.perf_counter() - start
    rate = {r.subject.label: r.summary.throughput.samples_per_s for r in exhaustive}  # type: ignore[union-attr]
    order = sorted(rate, key=rate.__getitem__, reverse=True)
    chosen = found.ranked[1].subject.label
    regret = 1 - rate[chosen] / rate[order[0]]
    overlap = len(set(order[:5]) & {r.subject.label for r in found.ranked[1:6]})
    inputs = ScreenInputs.of(scenario)
    ratios = [rate[v.label] / screen(v.scenario, inputs) for v in every if v.label in rate]
    return (
        f"{devices:>5}  {len(every):>6}  {found.simulated:>9}  {regret:>7.2%}  {overlap:>7}/5  "
        f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}  {wide_s / exhaustive_s:>10.2f}"
    )


def at_scale(devices: int) -> str:
    scenario = load_scenario("quickstart")
    bare = bare_simpy_events_per_s()
    start = time.perf_counter()
    found = wide_search(scenario, devices, KINDS, BOUNDS, progress=False)
    seconds = time.perf_counter() - start
    return (
        f"{devices} devices: {found.candidates:,} plans screened, {found.simulated} simulated in {found.rounds} "
        f"round(s), {seconds:.1f} s{' (capped)' if found.capped else ''}; bare SimPy {bare / 1e6:.2f} M events/s "
        f"here, so {seconds * bare / 1e6:.1f} s at 1.0 M events/s\n{found.line()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, action="append", help="budgets simulated whole (default 16 and 32)")
    parser.add_argument("--devices", type=int, action="append", default=[], help="budgets searched wide only")
    args = parser.parse_args()
    print("devices   plans  simulated   regret  top-5  sim/screen min / median / max  wide/exhaustive s")
    for devices in args.grid or [16, 32]:
        print(compare(devices))
    for devices in args.devices:
        print(at_scale(devices))


if __name__ == "__main__":
    main()
