"""Peak memory of ``asyncrl simulate`` against the rollouts it simulates: the record is written in pieces
(``simulator.recording.streamed``) and settled rollouts are packed as the run goes (``simulator.rollouts``), so the peak
should stay flat where the run grows.

    .venv/bin/python benchmarks/simulator_memory.py [--quick]

Each configuration runs in a fresh subprocess what ``asyncrl simulate --out DIR`` runs (simulate, write the run
directory), and reports its peak resident set (``resource.getrusage``) before and after. The table prints the
peak, the growth over the process's start (Python, numpy, pandas and pyarrow included), and the growth per
simulated rollout. The last ``simulate`` row is the planning target: a 1,000-step run of 8,192 rollouts a step
(about a minute). Then ``asyncrl size`` of the same scenario with every step simulated (``--exact``, five plans on
two worker processes, a few minutes): its largest worker's peak (a worker summarizes each plan without its event
table, ``simulator.summary``), and the peak of the command's own process. ``--quick`` leaves out the two largest
``simulate`` runs and the ``size`` one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

CHILD = """
import json, resource, sys, tempfile
from pathlib import Path
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.backend import Simulator
scenario = load_scenario(sys.argv[1], sys.argv[2:])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with tempfile.TemporaryDirectory() as out:
    summary = Simulator(force=True).write(scenario, Path(out) / "run")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rollouts": summary.samples.generated, "before_kb": before, "peak_kb": peak}))
"""

SIZE_CHILD = """
import json, resource, sys
from asyncrl.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""

BIG = ["workload.prompts_per_step=512"]  # large-streaming at 8,192 rollouts a step
CONFIGS = [
    ("quickstart", ["run.steps=100"]),
    ("quickstart", ["run.steps=1600"]),
    ("moe-streaming", ["run.steps=200"]),
    ("quickstart", ["run.steps=2", "cluster.generation_devices=65536"]),
    (
        "quickstart",
        ["run.steps=500", "schedule.kind=sync", "cluster.generation_devices=1024", "workload.prompts_per_step=1"],
    ),
    ("large-streaming", [*BIG, "run.steps=30"]),
    ("large-streaming", [*BIG, "run.steps=100"]),
    ("large-streaming", [*BIG, "run.steps=300"]),
    ("large-streaming", [*BIG, "run.steps=1000"]),
]


SIZE = ["large-streaming", *BIG, "run.steps=1000", "--devices", "320", "--kind", "streaming", "--splits", "1"]
SIZE += ["--exact", "--quiet", "--force"]


def measure(name: str, overrides: list[str]) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", CHILD, name, *overrides], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the two largest runs")
    quick = parser.parse_args().quick
    configs = CONFIGS[:-2] if quick else CONFIGS
    print(f"{'scenario --set ...':<100} {'rollouts':>10} {'peak MB':>7} {'growth MB':>9} {'B/rollout':>9}")
    for name, overrides in configs:
        figures = measure(name, overrides)
        growth = (figures["peak_kb"] - figures["before_kb"]) * 1024
        label = " ".join([name, *overrides])
        print(
            f"{label:<100} {figures['rollouts']:>10,} {figures['peak_kb'] / 1024:>7,.0f} "
            f"{growth / 2**20:>9,.0f} {growth / max(1, figures['rollouts']):>9,.0f}"
        )
    if not quick:
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, "-c", SIZE_CHILD, "size", *SIZE, "--out", f"{folder}/plans.csv"]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
        figures = json.loads(done.stdout.splitlines()[-1])
        print(f"asyncrl size {' '.join(SIZE[:-2])} (each plan 1,000 steps of 8,192 rollouts)")
        print(
            f"  largest worker's peak {figures['worker_peak_kb'] / 1024:,.0f} MB, the command's own process "
            f"{figures['peak_kb'] / 1024:,.0f} MB"
        )


if __name__ == "__main__":
    main()
