"""How much one execution differs from the next: the same scenario, the same seed, run again and again.

    python benchmarks/run_to_run.py [--scenario cpu-timing] [--count 6] [--steps 12] [--set KEY=VALUE ...]

Executes the scenario ``--count`` times in this process, one after the other,
and prints per run the learner's seconds per padded token
(``analysis.fits.fit_learner.train_spans``), the mean decode-only engine step and the wall time, then each
figure's max/min. Every run computes the same thing (same seed, same lengths),
so the spread is the machine's: it bounds how closely any prediction from
another run (a calibration) can match one execution. ``asyncrl validate
--repeat R`` takes the median over R executions for that reason.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import pandas as pd
from asyncrl.analysis.fits.fit_learner import train_spans
from asyncrl.analysis.tables import format_table
from asyncrl.executor.processes.runtime import execute
from asyncrl.scenarios.record.record import read_events
from asyncrl.scenarios.spec.loading import load_scenario


def one_run(scenario_name: str, overrides: list[str], out: Path) -> dict[str, float]:
    """Execute once; the learner's and the engines' speed and the wall time of that run."""
    scenario = load_scenario(scenario_name, overrides)
    execute(scenario, out)
    spans = train_spans(read_events(out), scenario.algorithm.updates_per_step)
    steps = pd.read_parquet(out / "engine_steps.parquet")
    decoding = steps[(steps["batch"] > 0) & (steps["joins"] == 0) & (steps["retired"] == 0)]
    return {
        "learner s per padded token": float(spans["seconds"].sum() / spans["longest"].sum()),
        "decode-only step (s)": float((decoding["end"] - decoding["start"]).mean()),
        "wall time (s)": float(json.loads((out / "summary.json").read_text())["wall_time_s"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="cpu-timing")
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = [*args.set, f"run.steps={args.steps}"]
    with tempfile.TemporaryDirectory() as work:
        runs = [one_run(args.scenario, overrides, Path(work) / f"run-{i}") for i in range(args.count)]
    names = list(runs[0])
    rows = [[str(i), *(f"{run[name]:.4g}" for name in names)] for i, run in enumerate(runs)]
    rows.append(["max/min", *(f"{max(r[n] for r in runs) / min(r[n] for r in runs):.3f}" for n in names)])
    print(f"{args.scenario}, {args.count} executions of {args.steps} steps, same seed")
    print(format_table(["run", *names], rows))


if __name__ == "__main__":
    main()
