"""The simulator's failure what-if against an executor run with the same injected failure, on this machine.

    python benchmarks/failure_whatif.py [--scenario cpu-pareto] [--every 10] [--repeats 2] [--out runs/failure-whatif]

    per repeat, in repeat-<r>/, one after the other (a shared machine's speed drifts over minutes):
    calibration-*       short runs of the scenario (as written and sync, another seed), and one with a
                        failure at 1.5 s: the profile is fitted to all three, engine_start_s to the restart
    measured-healthy    execute it as written; predicted-healthy: simulate it with the profile
    measured-failure    execute it with run.failures {every_s: EVERY, engine: 0}: engine 0 killed (SIGKILL)
                        every EVERY seconds, restarted, its groups generated again; predicted-failure:
                        simulate the same, the what-if charging the fitted restart, the weight reload and
                        the lost groups

It prints each repeat's fitted restart, each run's wall time measured and predicted, the prediction's
error relative to the measurement, and the failures' cost (wall time with them less without them),
measured and predicted. Every run directory stays under ``--out`` for ``asyncrl compare``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncrl.executor.backend import Executor
from asyncrl.scenarios.costs.profile import load_profile
from asyncrl.scenarios.record.record import RunRecord
from asyncrl.scenarios.spec.loading import load_scenario, variant
from asyncrl.scenarios.spec.scenario import Scenario
from asyncrl.simulator.backend import Simulator

from asyncrl.calibration.runs import calibration_scenario, execute_calibration_runs, executor, fit_calibration_runs

CALIBRATION_FAILURE_S = 1.5  # inside a short calibration run of a CPU scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cpu-pareto")
    parser.add_argument("--every", type=float, default=10.0, help="engine 0 is killed every this many seconds")
    parser.add_argument("--repeats", type=int, default=2, help="calibrations, each with its measured pair")
    parser.add_argument("--out", type=Path, default=Path("runs/failure-whatif"))
    args = parser.parse_args()
    healthy = load_scenario(args.scenario)
    failing = variant(healthy, {"run.failures": {"every_s": args.every, "engine": 0}})
    print(f"{healthy.name}: engine 0 killed every {args.every:g} s")
    print(
        f"{'repeat':<7} {'restart s':>9} {'without s':>10} {'predicted':>9} {'error':>7} "
        f"{'with s':>10} {'predicted':>9} {'error':>7} {'restarts':>8} {'cost s':>7} {'predicted':>9}"
    )
    for repeat in range(1, args.repeats + 1):
        directory = args.out / f"repeat-{repeat}"
        profile = calibrate(healthy, directory)
        with_profile = {"hardware.profile": str(profile.resolve())}
        predicted, measured = [], []
        for name, scenario in (("healthy", healthy), ("failure", failing)):
            measured.append(Executor(max_restarts=100).run(scenario, directory / f"measured-{name}"))
            predicted.append(
                Simulator(force=True).run(variant(scenario, with_profile), directory / f"predicted-{name}")
            )
        walls = [(_wall(p), _wall(m)) for p, m in zip(predicted, measured, strict=True)]
        restarts = measured[1].summary.restarts if measured[1].summary else None
        print(
            f"{repeat:<7} {load_profile(profile).engine_start_s or 0:>9.2f} "  # type: ignore[union-attr]
            + " ".join(f"{m:>10.2f} {p:>9.2f} {p / m - 1:>+7.1%}" for p, m in walls)
            + f" {restarts.engines if restarts else 0:>8}"
            + f" {walls[1][1] - walls[0][1]:>7.2f} {walls[1][0] - walls[0][0]:>9.2f}"
        )


def calibrate(scenario: Scenario, directory: Path) -> Path:
    """Short runs of ``scenario`` (as written, sync, and one with a failure at 1.5 s) and the profile fitted
    to them, ``engine_start_s`` to the failure's restart; the profile's path."""
    runs = execute_calibration_runs(scenario, directory, steps=8, backend=executor())
    with_restart = variant(scenario, {"run.failures": {"at_s": [CALIBRATION_FAILURE_S], "engine": 0}})
    runs.append(directory / "calibration-restart")
    executor().run(calibration_scenario(with_restart, scenario.schedule.kind, 8), runs[-1])
    fit_calibration_runs(scenario, runs, directory / "profile.yaml")
    return directory / "profile.yaml"


def _wall(record: RunRecord) -> float:
    assert record.summary is not None  # the run ended
    return record.summary.wall_time_s


if __name__ == "__main__":
    main()
