"""`asyncrl size` with runs ended once converged, against every step simulated, in one sitting.

    python benchmarks/early_stopping.py [--devices 64] [--splits 8] [--bounds 1,2] [--step-time 0.01] [--window 10]

Runs the sizing sweep of the quickstart scenario (pipelined and streaming, bounds 1 and 2 unless told) twice,
alternating: as ``asyncrl size`` runs it (each run ended once its step time and staleness have
converged, the rest extrapolated) and with ``exact=True`` (every step). Prints plans (simulated
runs) per second of each and their ratio, the steps simulated, and how far each early-stopped row's
throughput and mean staleness are from the exact row's. ``--step-time`` and ``--window`` try another
rule than ``size``'s (``simulator.convergence.Tolerance``: 1% and 10 steps).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.convergence import Tolerance
from asyncrl.simulator.sweep import simulate_sizing, sizing_variants

KINDS = ["pipelined", "streaming"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--splits", type=int, default=8)
    parser.add_argument("--bounds", default="1,2", help="staleness bounds, comma-separated (default 1,2)")
    parser.add_argument("--step-time", type=float, default=Tolerance.step_time, help="agreement of step times")
    parser.add_argument("--window", type=int, default=Tolerance.window, help="steps per window")
    args = parser.parse_args()
    tolerance = Tolerance(window=args.window, step_time=args.step_time)
    bounds = [int(bound) for bound in args.bounds.split(",")]
    scenario = load_scenario("quickstart")
    baselines, candidates = sizing_variants(scenario, args.devices, KINDS, bounds, args.splits)
    plans = len(baselines) + len(candidates)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    results = {}
    for exact in (True, False, True, False):  # alternated, so a change in the machine's load hits both
        start = time.perf_counter()
        results[exact] = simulate_sizing(
            scenario, args.devices, KINDS, bounds, args.splits, progress=False, exact=exact, tolerance=tolerance
        )
        seconds[exact].append(time.perf_counter() - start)
    rate = {exact: plans / min(times) for exact, times in seconds.items()}
    print(f"quickstart, {args.devices} devices, {plans} plans of {scenario.run.steps} steps (best of two each)")
    print(f"every step simulated  {rate[True]:6.1f} plans/s")
    print(f"ended once converged  {rate[False]:6.1f} plans/s  = {rate[False] / rate[True]:.2f}x")
    _accuracy(results[True], results[False], scenario.run.steps)


def _accuracy(exact: list, early: list, steps: int) -> None:
    exact_by_label = {variant.label: summary for variant, summary in exact}
    simulated, throughput, staleness = [], [], []
    for variant, summary in early:
        reference = exact_by_label.get(variant.label)
        if reference is None:  # the best baseline engine size differed
            continue
        simulated.append(summary.steps_run)
        throughput.append(abs(summary.throughput.samples_per_s / reference.throughput.samples_per_s - 1))
        staleness.append(abs(summary.staleness.mean - reference.staleness.mean))
    simulated_steps = np.asarray(simulated)
    print(
        f"steps simulated       mean {simulated_steps.mean():.1f} of {steps}, "
        f"{np.mean(simulated_steps < steps):.0%} of rows ended early"
    )
    for name, errors, unit in (("throughput", throughput, "%"), ("mean staleness", staleness, " steps")):
        values = np.asarray(errors) * (100 if unit == "%" else 1)
        p50, p95 = np.percentile(values, [50, 95])
        print(f"{name + ' off by':22}p50 {p50:.3f}{unit}, p95 {p95:.3f}{unit}, max {values.max():.3f}{unit}")


if __name__ == "__main__":
    main()
