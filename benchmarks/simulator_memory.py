"""Peak memory of the simulator against what the run records: rollouts, event rows and engines.

    .venv/bin/python benchmarks/simulator_memory.py

Each configuration is simulated in a fresh subprocess, which reports its own peak resident set
(``resource.getrusage``) before the simulation and after it and the run record's write; the table
prints the growth, and the growth per recorded event row (one per rollout, one per version a
rollout saw with in-flight updates, one per weight load, one per step). ``simulator.budget``
charges more than every figure here.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, resource, sys, tempfile
from pathlib import Path
from asyncrl.scenarios.spec.loading import load_scenario
from asyncrl.simulator.simulation import simulate
scenario = load_scenario(sys.argv[1], sys.argv[2:])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = simulate(scenario)
with tempfile.TemporaryDirectory() as out:
    result.write(Path(out))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rollouts": result.summary.samples.generated, "rows": len(result.events), "before_kb": before, "peak_kb": peak}))
"""

CONFIGS = [
    ("quickstart", ["run.steps=25"]),
    ("quickstart", ["run.steps=100"]),
    ("quickstart", ["run.steps=400"]),
    ("quickstart", ["run.steps=1600"]),
    ("quickstart", ["run.steps=400", "schedule.max_concurrency=4096"]),
    ("moe-streaming", ["run.steps=200"]),
    ("quickstart", ["run.steps=2", "cluster.generation_devices=4096"]),
    ("quickstart", ["run.steps=2", "cluster.generation_devices=65536"]),
    (
        "quickstart",
        ["run.steps=500", "schedule.kind=sync", "cluster.generation_devices=1024", "workload.prompts_per_step=1"],
    ),
]


def measure(name: str, overrides: list[str]) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", CHILD, name, *overrides], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    print(
        f"{'scenario --set ...':<104} {'rollouts':>9} {'event rows':>10} {'peak MB':>7} {'growth MB':>9} {'B/row':>6}"
    )
    for name, overrides in CONFIGS:
        figures = measure(name, overrides)
        growth = (figures["peak_kb"] - figures["before_kb"]) * 1024
        label = " ".join([name, *overrides])
        print(
            f"{label:<104} {figures['rollouts']:>9,} {figures['rows']:>10,} {figures['peak_kb'] / 1024:>7,.0f} "
            f"{growth / 2**20:>9,.0f} {growth / max(1, figures['rows']):>6,.0f}"
        )


if __name__ == "__main__":
    main()
